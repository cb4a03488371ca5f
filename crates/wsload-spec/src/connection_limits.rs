//! `connect.limits`: what one connection may hold for the server it talks to, so that a
//! hostile or broken server cannot grow the load generator's memory without bound. The load
//! generator's WebSocket client (`wsload_ws::Limits`) enforces them; docs/loadtest.md states
//! the memory they bound.

use crate::cel;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Bytes one connection may hold for the server: a message, a frame, replies waiting to be
/// written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::connection_limits_rules)]
pub struct ConnectionLimits {
    /// The largest message a server may send: a fragmented message reassembled, or a
    /// compressed one inflated. A bigger one ends the connection as `message_too_big`
    /// (close 1009).
    #[serde(default = "default_max_message")]
    #[schemars(range(min = cel::MIN_LIMIT_BYTES, max = cel::MAX_LIMIT_BYTES))]
    pub max_message_bytes: u32,
    /// The largest frame a server may send, judged from its header before its payload
    /// arrives; a connection's read buffer never grows past it. A bigger one ends the
    /// connection as `message_too_big` (close 1009). At most `maxMessageBytes`.
    #[serde(default = "default_max_frame")]
    #[schemars(range(min = cel::MIN_LIMIT_BYTES, max = cel::MAX_LIMIT_BYTES))]
    pub max_frame_bytes: u32,
    /// Replies (pongs, close replies, a conversation's automatic replies) the connection may
    /// hold unwritten while the server reads nothing; past it the connection ends as
    /// `server_not_reading`.
    #[serde(default = "default_max_pending_write")]
    #[schemars(range(min = cel::MIN_LIMIT_BYTES, max = cel::MAX_LIMIT_BYTES))]
    pub max_pending_write_bytes: u32,
}

/// Defaults: tungstenite's message and frame limits, which the client had before they could
/// be set, and pending writes far above what a server that reads ever leaves queued.
pub const DEFAULT_MAX_MESSAGE: u32 = 64 << 20;
pub const DEFAULT_MAX_FRAME: u32 = 16 << 20;
pub const DEFAULT_MAX_PENDING_WRITE: u32 = 16 << 20;

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_message_bytes: DEFAULT_MAX_MESSAGE,
            max_frame_bytes: DEFAULT_MAX_FRAME,
            max_pending_write_bytes: DEFAULT_MAX_PENDING_WRITE,
        }
    }
}

fn default_max_message() -> u32 {
    DEFAULT_MAX_MESSAGE
}
fn default_max_frame() -> u32 {
    DEFAULT_MAX_FRAME
}
fn default_max_pending_write() -> u32 {
    DEFAULT_MAX_PENDING_WRITE
}

impl ConnectionLimits {
    /// The most one connection holds for its server, in bytes: a frame being read, a message
    /// being reassembled or inflated (its buffer grows by doubling, so up to twice the limit),
    /// and replies waiting to be written. The kernel's socket buffers come on top.
    pub fn worst_case_bytes(&self) -> u64 {
        u64::from(self.max_frame_bytes)
            + 2 * u64::from(self.max_message_bytes)
            + u64::from(self.max_pending_write_bytes)
    }
}
