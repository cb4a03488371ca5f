//! Why a connection attempt failed: counted per cell (`measure`), per reconnect window
//! (`reconnect`), and the `reason` label of the attempts' metric.

use serde::{Deserialize, Serialize};

/// Why a connection attempt failed; also the `reason` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectError {
    /// TCP connect refused (nothing listening, or the accept queue overflowed).
    Refused,
    /// No answer within `connect.timeout`.
    Timeout,
    /// This process ran out of file descriptors (EMFILE): more shards are needed.
    FileLimit,
    /// No free local port for the source address.
    NoPorts,
    /// The HTTP upgrade was answered with something other than 101 (the status, its reason
    /// and the body's first line are the evidence).
    UpgradeRejected,
    /// The answer to the upgrade was not HTTP, or a 101 broke RFC 6455 4.1 (a header missing
    /// or wrong: the evidence names it and what it said).
    UpgradeInvalid,
    /// The server closed before `server_ready` (WSE) or sent an error instead.
    ClosedEarly,
    /// The server refused the token (close 4401 / AUTH_FAILED).
    AuthFailed,
    /// TLS failed.
    Tls,
    /// A step on open of the conversation did not get the message it expects within its
    /// timeout (counted by step in `expectMissed`, the last message seen as evidence).
    ExpectTimeout,
    /// A step on open got its message, but a capture of the step found nothing in it (a JSON
    /// field missing, a regular expression that did not match): the values spliced later would
    /// be empty. The step, the capture and the message are the evidence.
    CaptureMissed,
    /// Anything else (see the log).
    Other,
}

impl ConnectError {
    pub fn label(self) -> &'static str {
        match self {
            ConnectError::Refused => "refused",
            ConnectError::Timeout => "timeout",
            ConnectError::FileLimit => "file_limit",
            ConnectError::NoPorts => "no_ports",
            ConnectError::UpgradeRejected => "upgrade_rejected",
            ConnectError::UpgradeInvalid => "upgrade_invalid",
            ConnectError::ClosedEarly => "closed_early",
            ConnectError::AuthFailed => "auth_failed",
            ConnectError::Tls => "tls",
            ConnectError::ExpectTimeout => "expect_timeout",
            ConnectError::CaptureMissed => "capture_missed",
            ConnectError::Other => "other",
        }
    }
}
