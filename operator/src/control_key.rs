//! The operator's key, and each test's control token derived from it:
//! `hex(HMAC-SHA256(key, "wsload-control/v1" NUL namespace NUL name NUL uid))`.
//!
//! Derived, not stored: an operator that restarts mid-test computes the same token again, so
//! it never reads a Secret back (RBAC gives it `create` on Secrets and nothing else), and the
//! Secret it mounts into the shards ([`crate::builders::control_secret`]) holds what it would
//! compute anyway. The uid makes a re-created test of the same name a different test: its
//! predecessor's shards, were any left, do not answer to it.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wsload_control::Token;

/// What every derivation begins with: a key used for anything else one day gives other MACs.
const CONTEXT: &[u8] = b"wsload-control/v1";

/// The fewest bytes a key has: the chart generates 48 characters.
pub const MIN_KEY_BYTES: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the control key file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the control key file {path} holds {len} bytes (surrounding whitespace aside); at least {MIN_KEY_BYTES} are needed"
    )]
    TooShort { path: PathBuf, len: usize },
}

/// The operator's key. Clones share it; `Debug` does not show it.
#[derive(Clone)]
pub struct ControlKey(Arc<[u8]>);

impl fmt::Debug for ControlKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ControlKey(<hidden>)")
    }
}

impl ControlKey {
    /// The key in the file at `path` (the chart's Secret, mounted), without surrounding
    /// whitespace: an editor's trailing newline must not change every token.
    pub fn read(path: &Path) -> Result<ControlKey, KeyError> {
        let bytes = std::fs::read(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let key = bytes.trim_ascii();
        if key.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort {
                path: path.to_path_buf(),
                len: key.len(),
            });
        }
        Ok(ControlKey(Arc::from(key)))
    }

    /// A key given as bytes (tests, and tools that hold one already).
    pub fn from_bytes(key: &[u8]) -> ControlKey {
        ControlKey(Arc::from(key))
    }

    /// The control token of the LoadTest `namespace/name` whose uid is `uid`.
    pub fn token(&self, namespace: &str, name: &str, uid: &str) -> Token {
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC takes keys of any length"),
        };
        for (i, part) in [
            CONTEXT,
            namespace.as_bytes(),
            name.as_bytes(),
            uid.as_bytes(),
        ]
        .into_iter()
        .enumerate()
        {
            // NUL between the parts: no name holds one, so no two (ns, name, uid) give the
            // same input.
            if i > 0 {
                mac.update(&[0]);
            }
            mac.update(part);
        }
        Token::from_bytes(&mac.finalize().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_token_is_stable_for_its_test_and_differs_for_any_other() {
        let key = ControlKey::from_bytes(KEY);
        let t = key.token("ns", "t", "uid-1");
        assert_eq!(t.expose(), key.token("ns", "t", "uid-1").expose());
        assert_eq!(t.expose().len(), 64);
        let others = [
            key.token("ns2", "t", "uid-1"),
            key.token("ns", "t2", "uid-1"),
            key.token("ns", "t", "uid-2"),
            // The separator keeps the parts apart: "n"+"st" is not "ns"+"t".
            key.token("n", "st", "uid-1"),
            ControlKey::from_bytes(b"1123456789abcdef0123456789abcdef").token("ns", "t", "uid-1"),
        ];
        for other in &others {
            assert_ne!(other.expose(), t.expose());
        }
        // What the documented formula gives, computed independently of this module's loop.
        let mut mac = Hmac::<Sha256>::new_from_slice(KEY).expect("a key");
        mac.update(b"wsload-control/v1\0ns\0t\0uid-1");
        assert_eq!(
            Token::from_bytes(&mac.finalize().into_bytes()).expose(),
            t.expose()
        );
        assert_eq!(format!("{key:?}"), "ControlKey(<hidden>)");
    }

    #[test]
    fn the_key_file_is_read_trimmed_and_a_short_one_refused() {
        let dir = std::env::temp_dir().join(format!("wsload-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("key");
        std::fs::write(&path, [KEY, b"\n"].concat()).expect("write");
        let read = ControlKey::read(&path).expect("a key");
        assert_eq!(
            read.token("ns", "t", "u").expose(),
            ControlKey::from_bytes(KEY).token("ns", "t", "u").expose()
        );
        std::fs::write(&path, "short-secret\n").expect("write");
        let e = ControlKey::read(&path).expect_err("too short");
        assert!(matches!(e, KeyError::TooShort { len: 12, .. }), "{e}");
        assert!(!e.to_string().contains("short-secret"), "{e}");
        let e = ControlKey::read(&dir.join("none")).expect_err("missing");
        assert!(matches!(e, KeyError::Read { .. }), "{e}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
