//! The client's errors: the handshake's own (a response that is not HTTP, a 101 that RFC 6455
//! 4.1 or RFC 7692 forbids, each fault typed with what the server said), a compressed message
//! that does not inflate, and what a failure tells the peer. Failures after the handshake are
//! tungstenite's `Error`, as they were when tokio-tungstenite was the client.
//!
//! A fault's text is the evidence the load generator reports for `upgrade_invalid` and
//! `upgrade_rejected` (docs/loadtest.md quotes it, its tests match it): the types say what was
//! wrong, the text stays as the reports have always written it.

use std::fmt;
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
    /// Not an HTTP response head.
    #[error("upgrade: {0}")]
    Malformed(#[from] NotHttp),
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
    Invalid(#[from] InvalidUpgrade),
}

/// A response that is not an HTTP response head: what gave it away, and a line of it as
/// evidence, said by its fault (a valid status line is never called "not HTTP": a header
/// flood's is one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.said())]
pub struct NotHttp {
    pub fault: HeadFault,
    /// The first non-empty line of what came (for [`HeadFault::HeaderLine`], of the header
    /// line), trimmed and cut to an excerpt; empty when there was none.
    pub line: String,
}

impl NotHttp {
    fn said(&self) -> String {
        let line = &self.line;
        match self.fault {
            HeadFault::StatusLine => format!("not an HTTP response: {line:?}"),
            HeadFault::NotText => format!("a response head that is not UTF-8: {line:?}"),
            HeadFault::HeaderLine => format!("a header line without a colon: {line:?}"),
            HeadFault::TooLong => format!(
                "no blank line ended the response head within its limit (a header flood, or not HTTP): it began {line:?}"
            ),
        }
    }
}

/// What made a response head not HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadFault {
    /// No blank line ended it within the response head's limit.
    TooLong,
    /// It is not UTF-8.
    NotText,
    /// Its first line is not `HTTP/1.1` or `HTTP/1.0` with a numeric status.
    StatusLine,
    /// A header line without a colon.
    HeaderLine,
}

/// A 101 that RFC 6455 4.1 or RFC 7692 forbids: which header, and what it said (cut to an
/// excerpt).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidUpgrade {
    /// A header every 101 carries is absent.
    #[error("no {} header", .0.as_required())]
    Missing(RequiredHeader),
    /// It says something other than what the request requires.
    #[error("{header}: {value:?} (expected {expected:?})")]
    Wrong {
        header: RequiredHeader,
        value: String,
        expected: String,
    },
    /// A subprotocol selected when the request offered none.
    #[error("Sec-WebSocket-Protocol: {selected:?} (none requested)")]
    ProtocolNotRequested { selected: String },
    /// A subprotocol the request did not offer (or several: the header's lines joined);
    /// `offered` is the request's list.
    #[error("Sec-WebSocket-Protocol: {selected:?} (offered {offered:?})")]
    ProtocolNotOffered { selected: String, offered: String },
    /// An answer to the extensions offer the client may not accept: the header's value (its
    /// lines joined with commas) and what is wrong with it.
    #[error("Sec-WebSocket-Extensions: {header:?} ({fault})")]
    Extensions {
        header: String,
        #[source]
        fault: ExtensionFault,
    },
}

/// The headers with which a 101 accepts the upgrade (RFC 6455 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequiredHeader {
    Upgrade,
    Connection,
    SecWebSocketAccept,
}

impl RequiredHeader {
    pub fn name(self) -> &'static str {
        match self {
            RequiredHeader::Upgrade => "Upgrade",
            RequiredHeader::Connection => "Connection",
            RequiredHeader::SecWebSocketAccept => "Sec-WebSocket-Accept",
        }
    }

    /// As a missing header is named: with the value RFC 6455 requires when that is the same
    /// for every request (the accept key is not).
    fn as_required(self) -> &'static str {
        match self {
            RequiredHeader::Upgrade => "Upgrade: websocket",
            RequiredHeader::Connection => "Connection: Upgrade",
            RequiredHeader::SecWebSocketAccept => "Sec-WebSocket-Accept",
        }
    }
}

impl fmt::Display for RequiredHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with a `Sec-WebSocket-Extensions` answer (RFC 7692 5 and 7.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtensionFault {
    /// An extension accepted when the request offered none.
    #[error("none requested")]
    NotRequested,
    /// An extension other than permessage-deflate: its name as it came.
    #[error("{name:?} not offered")]
    NotOffered { name: String },
    /// permessage-deflate accepted twice.
    #[error("permessage-deflate twice")]
    Twice,
    /// permessage-deflate accepted with parameters the client may not accept.
    #[error(transparent)]
    Param(#[from] ParamFault),
}

/// A permessage-deflate parameter in a server's answer that the client may not accept
/// (RFC 7692 7.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamFault {
    /// Not one of RFC 7692's: its name as it came.
    #[error("unknown parameter {name:?}")]
    Unknown { name: String },
    #[error("{0} twice")]
    Repeated(DeflateParam),
    /// A `*_no_context_takeover` with a value.
    #[error("{0} takes no value")]
    Valued(DeflateParam),
    /// A `*_max_window_bits` without one: in an answer it says which window was agreed.
    #[error("{0} without a value")]
    NoValue(DeflateParam),
    /// A window size that is not 8 to 15 in plain digits: the value as it came.
    #[error("{param}={value:?}, not 8-15")]
    BadWindow { param: DeflateParam, value: String },
    #[error("server_max_window_bits={bits}, larger than the {asked} asked for")]
    ServerWindowTooLarge { bits: u8, asked: u8 },
    #[error("client_max_window_bits={bits}, larger than the {offered} offered")]
    ClientWindowTooLarge { bits: u8, offered: u8 },
    /// No `server_max_window_bits` in the answer to a request that asked for a window below
    /// the largest: a server that accepts the limit says which (RFC 7692 7.1.2.1).
    #[error("no server_max_window_bits, {asked} asked for")]
    NoServerWindow { asked: u8 },
}

/// permessage-deflate's parameters (RFC 7692 7.1), shown as the header spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeflateParam {
    ServerNoContextTakeover,
    ClientNoContextTakeover,
    ServerMaxWindowBits,
    ClientMaxWindowBits,
}

impl DeflateParam {
    const ALL: [DeflateParam; 4] = [
        DeflateParam::ServerNoContextTakeover,
        DeflateParam::ClientNoContextTakeover,
        DeflateParam::ServerMaxWindowBits,
        DeflateParam::ClientMaxWindowBits,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DeflateParam::ServerNoContextTakeover => "server_no_context_takeover",
            DeflateParam::ClientNoContextTakeover => "client_no_context_takeover",
            DeflateParam::ServerMaxWindowBits => "server_max_window_bits",
            DeflateParam::ClientMaxWindowBits => "client_max_window_bits",
        }
    }

    /// The parameter `name` spells, exactly (no case folding: the client never accepted
    /// another spelling).
    pub fn named(name: &str) -> Option<DeflateParam> {
        DeflateParam::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for DeflateParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts of a 101's faults no other test asserts, as the reports write them.
    #[test]
    fn faults_read_as_the_reports_write_them() {
        let missing = |h| HandshakeError::from(InvalidUpgrade::Missing(h)).to_string();
        assert_eq!(
            missing(RequiredHeader::Connection),
            "upgrade: no Connection: Upgrade header"
        );
        assert_eq!(
            missing(RequiredHeader::SecWebSocketAccept),
            "upgrade: no Sec-WebSocket-Accept header"
        );
        assert_eq!(
            InvalidUpgrade::ProtocolNotRequested {
                selected: "chat".into()
            }
            .to_string(),
            "Sec-WebSocket-Protocol: \"chat\" (none requested)"
        );
        assert_eq!(
            HandshakeError::from(NotHttp {
                fault: HeadFault::StatusLine,
                line: "SSH-2.0-OpenSSH_9.6".into(),
            })
            .to_string(),
            "upgrade: not an HTTP response: \"SSH-2.0-OpenSSH_9.6\""
        );
        // A header flood's status line is valid: the head's end is what never came.
        assert_eq!(
            HandshakeError::from(NotHttp {
                fault: HeadFault::TooLong,
                line: "HTTP/1.1 101 Switching Protocols".into(),
            })
            .to_string(),
            "upgrade: no blank line ended the response head within its limit (a header flood, or not HTTP): it began \"HTTP/1.1 101 Switching Protocols\""
        );
    }

    #[test]
    fn parameters_are_named_as_the_header_spells_them() {
        for p in DeflateParam::ALL {
            assert_eq!(DeflateParam::named(p.name()), Some(p));
        }
        assert_eq!(DeflateParam::named("Server_Max_Window_Bits"), None);
    }
}
