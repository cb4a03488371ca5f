//! Why a connection could not be opened, classified by reason (`ConnectError`), with what the
//! server said when it said something worth keeping (a refused upgrade's status, the step on
//! open that missed and the last message seen).

use std::time::Duration;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use wsload_report::measure::{ConnectError, bounded_evidence};
use wsload_ws::HandshakeError;

/// Why a dial failed, and what the server said, when it said something worth keeping (a
/// refused or invalid upgrade's status, body line or header): one example per reason goes
/// into the cell's evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct DialError {
    pub why: ConnectError,
    pub evidence: Option<String>,
    /// The conversation's step on open that failed (`expect_timeout`), by name.
    pub step: Option<String>,
}

impl From<ConnectError> for DialError {
    fn from(why: ConnectError) -> Self {
        DialError {
            why,
            evidence: None,
            step: None,
        }
    }
}

/// A step's miss: the step, how long it waited and the last message it skipped.
pub(super) fn expect_missed(step: &str, waited: Duration, last: Option<&str>) -> DialError {
    let seen = match last {
        Some(m) => format!("the last message was {m:?}"),
        None => "no message came".to_string(),
    };
    DialError {
        why: ConnectError::ExpectTimeout,
        evidence: Some(bounded_evidence(&format!(
            "step {step:?} waited {waited:?} for its expected message; {seen}"
        ))),
        step: Some(step.to_string()),
    }
}

/// A step's message that left one of its captures empty: the connection ends there rather
/// than send an empty value where the server expects the captured one.
pub(super) fn capture_missed(step: &str, capture: &str, msg: &[u8]) -> DialError {
    DialError {
        why: ConnectError::CaptureMissed,
        evidence: Some(bounded_evidence(&format!(
            "step {step:?} got {:?}, in which its capture {capture:?} found nothing",
            String::from_utf8_lossy(&msg[..msg.len().min(512)])
        ))),
        step: None,
    }
}

/// The evidence of a server that closed during a step on open.
pub(super) fn closed_at(
    step: &str,
    frame: Option<&tokio_tungstenite::tungstenite::protocol::CloseFrame>,
) -> String {
    match frame {
        Some(f) => format!(
            "closed with {} {:?} during step {step:?}",
            u16::from(f.code),
            f.reason.as_str()
        ),
        None => format!("closed during step {step:?}"),
    }
}

/// Why the server's close during the steps on open failed the connection: the codes servers
/// close an unauthorised connection with (WSE's 4401, graphql-ws' 4403 Forbidden, HTTP's 401
/// and 403 carried into the 4000 range as many servers do) are `auth_failed`; any other close
/// is `closed_early`.
pub(super) fn closed_why(frame: Option<&CloseFrame>) -> ConnectError {
    match frame.map(|f| u16::from(f.code)) {
        Some(AUTH_FAILED_CLOSE | FORBIDDEN_CLOSE) => ConnectError::AuthFailed,
        _ => ConnectError::ClosedEarly,
    }
}

/// Close codes of a refused credential (see [`closed_why`]).
const AUTH_FAILED_CLOSE: u16 = wsload_proto::envelope::CLOSE_AUTH_FAILED;
const FORBIDDEN_CLOSE: u16 = 4403;

/// errno values that name a reason of their own.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;
const EADDRNOTAVAIL: i32 = 99;
const EADDRINUSE: i32 = 98;

pub fn io_error(e: &std::io::Error) -> ConnectError {
    match e.raw_os_error() {
        Some(EMFILE | ENFILE) => ConnectError::FileLimit,
        Some(EADDRNOTAVAIL | EADDRINUSE) => ConnectError::NoPorts,
        _ => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => ConnectError::Refused,
            std::io::ErrorKind::TimedOut => ConnectError::Timeout,
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof => {
                ConnectError::ClosedEarly
            }
            _ => ConnectError::Other,
        },
    }
}

/// rustls reports a failed TLS handshake as `InvalidData`; anything else is the socket's.
pub(super) fn tls_error(e: &std::io::Error) -> ConnectError {
    if e.kind() == std::io::ErrorKind::InvalidData {
        ConnectError::Tls
    } else {
        io_error(e)
    }
}

/// A failed upgrade's reason, with what the server answered as its evidence: the status
/// line and body line of a refusal, the header a 101 got wrong, the first line of a response
/// that is not HTTP.
pub(super) fn handshake_error(e: &HandshakeError) -> DialError {
    let why = match e {
        HandshakeError::Io(io) => return io_error(io).into(),
        HandshakeError::Eof => return ConnectError::ClosedEarly.into(),
        HandshakeError::Status {
            status: 401 | 403, ..
        } => ConnectError::AuthFailed,
        HandshakeError::Status { .. } => ConnectError::UpgradeRejected,
        HandshakeError::Malformed(_) | HandshakeError::Invalid(_) => ConnectError::UpgradeInvalid,
    };
    let text = e.to_string();
    DialError {
        why,
        evidence: Some(text.strip_prefix("upgrade: ").unwrap_or(&text).to_string()),
        step: None,
    }
}

pub(super) fn ws_error(e: &WsError) -> ConnectError {
    match e {
        WsError::Io(io) => io_error(io),
        WsError::Http(resp) if resp.status().as_u16() == 401 || resp.status().as_u16() == 403 => {
            ConnectError::AuthFailed
        }
        WsError::Http(_) | WsError::HttpFormat(_) => ConnectError::UpgradeRejected,
        WsError::Tls(_) => ConnectError::Tls,
        WsError::ConnectionClosed | WsError::AlreadyClosed | WsError::Protocol(_) => {
            ConnectError::ClosedEarly
        }
        _ => ConnectError::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_ws::{HeadFault, NotHttp};

    /// A refused upgrade keeps its status line as evidence; 401 and 403 are `auth_failed`.
    #[test]
    fn a_refused_upgrade_keeps_its_status_as_evidence() {
        let refused = |status: u16, reason: &str| HandshakeError::Status {
            status,
            reason: reason.into(),
            body: Some("go away".into()),
        };
        assert_eq!(
            handshake_error(&refused(401, "Unauthorized")),
            DialError {
                why: ConnectError::AuthFailed,
                evidence: Some("HTTP 401 Unauthorized: go away".into()),
                step: None,
            }
        );
        assert_eq!(
            handshake_error(&refused(502, "Bad Gateway")).why,
            ConnectError::UpgradeRejected
        );
        assert_eq!(
            handshake_error(&HandshakeError::Malformed(NotHttp {
                fault: HeadFault::StatusLine,
                line: "SSH-2.0-OpenSSH_9.6".into(),
            })),
            DialError {
                why: ConnectError::UpgradeInvalid,
                evidence: Some("not an HTTP response: \"SSH-2.0-OpenSSH_9.6\"".into()),
                step: None,
            }
        );
        assert_eq!(handshake_error(&HandshakeError::Eof).evidence, None);
    }

    #[test]
    fn io_errors_are_classified() {
        assert_eq!(
            io_error(&std::io::Error::from_raw_os_error(EMFILE)),
            ConnectError::FileLimit
        );
        assert_eq!(
            io_error(&std::io::Error::from_raw_os_error(EADDRNOTAVAIL)),
            ConnectError::NoPorts
        );
        assert_eq!(
            io_error(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            ConnectError::Refused
        );
    }
}
