//! The client's errors: the handshake's own, and what a failure tells the peer. Failures after
//! the handshake are tungstenite's `Error`, as they were when tokio-tungstenite was the client.

use std::io;
use tokio_tungstenite::tungstenite::Error as WsError;

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("upgrade: {0}")]
    Io(#[source] io::Error),
    /// The server closed before the response head was complete.
    #[error("upgrade: the server closed before its response")]
    Eof,
    /// Not an HTTP response head.
    #[error("upgrade: not an HTTP response")]
    Malformed,
    /// An HTTP status other than 101.
    #[error("upgrade: HTTP status {0}")]
    Status(u16),
    /// A 101 without the headers RFC 6455 4.1 requires, with a wrong accept key, or with an
    /// extension or subprotocol not requested.
    #[error("upgrade: {0}")]
    Invalid(&'static str),
}

pub(crate) fn invalid_utf8() -> WsError {
    WsError::Utf8("invalid UTF-8 in a text message".into())
}

/// The close status a failure sends the peer: 1007 for invalid UTF-8, 1009 for a message
/// too big, 1002 for any other violation; `None` for the transport's errors (nothing to tell).
pub(crate) fn failure_code(e: &WsError) -> Option<u16> {
    match e {
        WsError::Utf8(_) => Some(1007),
        WsError::Capacity(_) => Some(1009),
        WsError::Protocol(_) => Some(1002),
        _ => None,
    }
}
