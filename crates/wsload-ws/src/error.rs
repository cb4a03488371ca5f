//! The client's errors: the handshake's own, a compressed message that does not inflate, and
//! what a failure tells the peer. Failures after the handshake are tungstenite's `Error`, as
//! they were when tokio-tungstenite was the client.

use std::io;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::error::ProtocolError;

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("upgrade: {0}")]
    Io(#[source] io::Error),
    /// The server closed before the response head was complete.
    #[error("upgrade: the server closed before its response")]
    Eof,
    /// Not an HTTP response head: its first line.
    #[error("upgrade: not an HTTP response: {0:?}")]
    Malformed(String),
    /// An HTTP status other than 101, its reason phrase, and the first line of the body if
    /// one came with the head.
    #[error("upgrade: HTTP {status} {reason}{}", body.as_ref().map(|b| format!(": {b}")).unwrap_or_default())]
    Status {
        status: u16,
        reason: String,
        body: Option<String>,
    },
    /// A 101 without the headers RFC 6455 4.1 requires, with a wrong accept key, or with an
    /// extension or subprotocol not requested: which header, and what it said.
    #[error("upgrade: {0}")]
    Invalid(String),
}

/// A compressed message that does not inflate, with zlib's reason. It travels as an
/// `InvalidData` I/O error (tungstenite's error has no variant for it); [`failure_code`]
/// gives it 1007, as for a message whose payload is not what its type says.
#[derive(Debug, thiserror::Error)]
#[error("permessage-deflate: a message that does not inflate")]
pub struct InflateError(#[source] pub flate2::DecompressError);

pub(crate) fn invalid_utf8() -> WsError {
    WsError::Utf8("invalid UTF-8 in a text message".into())
}

/// The close status a failure sends the peer: 1007 for invalid UTF-8 or a compressed message
/// that does not inflate, 1009 for a frame or message too big, 1002 for any other violation
/// by the peer; `None` for the transport's errors and the stream's end without a close
/// (nothing to tell), and for our own misuse.
pub fn failure_code(e: &WsError) -> Option<u16> {
    match e {
        WsError::Utf8(_) => Some(1007),
        WsError::Io(io) if io.get_ref().is_some_and(|i| i.is::<InflateError>()) => Some(1007),
        WsError::Capacity(_) => Some(1009),
        WsError::Protocol(
            ProtocolError::ResetWithoutClosingHandshake | ProtocolError::SendAfterClosing,
        ) => None,
        WsError::Protocol(_) => Some(1002),
        _ => None,
    }
}
