//! The control API's credential: one bearer token per test, which the conductor sends on every
//! control request (`Authorization: Bearer <token>`) and the shard checks before anything else.
//! Where it comes from is the conductor's business (the operator derives it from its key,
//! `wsload run` draws it from the OS); here is what both ends share: its form, the file that
//! carries it to a shard, and the comparison, in constant time so that an answer's timing says
//! nothing of how much of a guess was right.
//!
//! The token's text is never printed: [`Token`]'s `Debug` hides it and no error here holds it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use subtle::ConstantTimeEq as _;

/// The fewest characters a token has: the conductors make 64 (32 bytes, hex); a shorter one
/// is a file that was truncated or mis-mounted, not a credential worth trusting.
pub const MIN_LEN: usize = 32;

/// What a control request without the right token gets, besides its 401.
pub const REFUSED: &str =
    "control requests need this test's token: Authorization: Bearer <token>\n";

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the control token file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the control token{at} has {len} characters; at least {MIN_LEN} are needed")]
    TooShort { at: String, len: usize },
    #[error("the control token{at} holds characters other than visible ASCII")]
    NotVisible { at: String },
}

/// A test's control token. Clones share the text.
#[derive(Clone)]
pub struct Token(Arc<str>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<hidden>)")
    }
}

impl Token {
    /// `text` without surrounding whitespace (a file's trailing newline), if it is a token.
    pub fn new(text: &str) -> Result<Token, TokenError> {
        Token::checked(text, String::new())
    }

    fn checked(text: &str, at: String) -> Result<Token, TokenError> {
        let text = text.trim();
        // Visible ASCII only: it travels in a header, and a byte there that is not would be
        // refused (or worse, split the header) on the way.
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::NotVisible { at });
        }
        if text.len() < MIN_LEN {
            return Err(TokenError::TooShort {
                at,
                len: text.len(),
            });
        }
        Ok(Token(Arc::from(text)))
    }

    /// The token in the file at `path` (the shard's, written by its conductor).
    pub fn read(path: &Path) -> Result<Token, TokenError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Token::checked(&text, format!(" in {}", path.display()))
    }

    /// `bytes` in lowercase hex: how a conductor makes a token of a key's MAC or of random
    /// bytes.
    pub fn from_bytes(bytes: &[u8]) -> Token {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            text.push(char::from(DIGITS[usize::from(b >> 4)]));
            text.push(char::from(DIGITS[usize::from(b & 0xf)]));
        }
        Token(Arc::from(text))
    }

    /// The text to send. For the client's header and the file a conductor writes, nothing
    /// else: never a log line, a status or an error.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether an `Authorization` header's value carries this token. The comparison takes the
    /// same time wherever the first difference is.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let Some(offered) = authorization.and_then(bearer) else {
            return false;
        };
        bool::from(offered.as_bytes().ct_eq(self.0.as_bytes()))
    }
}

/// The credential of `Bearer <credential>` (the scheme is case-insensitive, RFC 9110 11.1).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, credential) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credential.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn only_the_same_token_as_a_bearer_is_admitted() {
        let t = Token::new(T).expect("a token");
        assert!(t.admits(Some(&format!("Bearer {T}"))));
        assert!(t.admits(Some(&format!("bearer  {T} "))));
        assert!(!t.admits(None));
        assert!(!t.admits(Some(T)), "no scheme");
        assert!(!t.admits(Some(&format!("Basic {T}"))));
        assert!(!t.admits(Some(&format!("Bearer {T}0"))), "longer");
        assert!(!t.admits(Some(&format!("Bearer {}", &T[1..]))), "shorter");
        assert!(!t.admits(Some(&format!("Bearer {}", T.replace('f', "e")))));
        assert!(!t.admits(Some("Bearer ")));
    }

    #[test]
    fn a_token_is_long_visible_text_and_never_shown() {
        assert!(matches!(
            Token::new("short"),
            Err(TokenError::TooShort { len: 5, .. })
        ));
        assert!(matches!(
            Token::new(&format!("{T} {T}")),
            Err(TokenError::NotVisible { .. })
        ));
        let t = Token::new(&format!("  {T}\n")).expect("trimmed");
        assert_eq!(t.expose(), T);
        assert_eq!(format!("{t:?}"), "Token(<hidden>)");
        let hex = Token::from_bytes(&[0x00, 0x9f, 0xff]);
        assert_eq!(hex.expose(), "009fff");
    }

    #[test]
    fn a_token_is_read_from_its_file_and_errors_do_not_hold_it() {
        let dir = std::env::temp_dir().join(format!("wsload-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("token");
        std::fs::write(&path, format!("{T}\n")).expect("write");
        assert_eq!(Token::read(&path).expect("read").expose(), T);
        let secret = "a-secret-but-too-short";
        std::fs::write(&path, secret).expect("write");
        let e = Token::read(&path).expect_err("too short");
        assert!(!e.to_string().contains(secret), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        let missing = Token::read(&dir.join("none")).expect_err("missing");
        assert!(matches!(missing, TokenError::Read { .. }), "{missing}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
