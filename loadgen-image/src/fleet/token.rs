//! The control token of a run's local shards (`wsload run` with `shards: N`): 32 bytes from
//! the OS, written to a file only this user can read, in a directory only this user can open,
//! whose path the shards are given. Any local process could otherwise release, end or read a
//! run's shards on their loopback ports. The directory goes with the run.

use rand::TryRng as _;
use rand::rngs::SysRng;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use wsload_control::Token;

/// Why the control token could not be made: this machine's.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot draw {what} from the OS: {source}")]
    Draw {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Bytes of randomness in a token (hex: twice as many characters).
const BYTES: usize = 32;

/// A run's token and the private file that carries it to the shards; removed when dropped.
pub struct TokenFile {
    token: Token,
    dir: PathBuf,
    path: PathBuf,
}

impl TokenFile {
    /// A new random token, written under the system's temporary directory.
    pub fn create() -> Result<TokenFile, TokenError> {
        let mut bytes = [0u8; BYTES];
        SysRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| TokenError::Draw {
                what: "the shards' control token",
                source: e.into(),
            })?;
        TokenFile::write(Token::from_bytes(&bytes), &std::env::temp_dir())
    }

    fn write(token: Token, under: &Path) -> Result<TokenFile, TokenError> {
        // A name of the token's own randomness: nobody can have made it first, and
        // `create` (not `create_dir_all`) fails rather than use one that exists.
        let mut name = [0u8; 8];
        SysRng
            .try_fill_bytes(&mut name)
            .map_err(|e| TokenError::Draw {
                what: "a name for the control token's directory",
                source: e.into(),
            })?;
        let dir = under.join(format!("wsload-run-{}", Token::from_bytes(&name).expose()));
        DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|source| TokenError::Create {
                path: dir.clone(),
                source,
            })?;
        let path = dir.join("control-token");
        // From here the directory is ours to remove, whatever fails next.
        let file = TokenFile { token, dir, path };
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file.path)
            .map_err(|source| TokenError::Create {
                path: file.path.clone(),
                source,
            })?;
        out.write_all(file.token.expose().as_bytes())
            .map_err(|source| TokenError::Write {
                path: file.path.clone(),
                source,
            })?;
        Ok(file)
    }

    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The file the shards read it from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::debug!(dir = %self.dir.display(), error = %e, "control token not removed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn the_token_is_random_private_and_removed_with_the_run() {
        let a = TokenFile::create().expect("a token file");
        let b = TokenFile::create().expect("another");
        assert_ne!(a.token().expose(), b.token().expose());
        assert_eq!(a.token().expose().len(), 2 * BYTES);
        let read = Token::read(a.path()).expect("the shards read it");
        assert_eq!(read.expose(), a.token().expose());
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(a.path()), 0o600);
        assert_eq!(mode(a.path().parent().expect("dir")), 0o700);
        let dir = a.path().parent().expect("dir").to_path_buf();
        drop(a);
        assert!(!dir.exists(), "the token's directory outlived the run");
    }
}
