//! What one connection may hold for a server, whatever the server sends: the bounds that keep
//! a hostile or broken server from growing the load generator's memory.

use crate::frame::MAX_FRAME;
use crate::message::MAX_MESSAGE;

/// One connection's bounds. Every field is a byte count; `u32` keeps [`crate::Ws`] small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest message: a reassembled fragmented message, or a compressed one inflated.
    /// Past it the connection fails with close 1009.
    pub max_message: u32,
    /// The largest frame, judged from its header before its payload arrives: the read buffer
    /// never grows past it (and a header). Past it the connection fails with close 1009.
    pub max_frame: u32,
    /// Bytes waiting to be written that a read may leave behind when it queues a reply (a
    /// pong, a close, a conversation's automatic reply) and the socket takes nothing: past
    /// it, the server sends and does not read, and the connection fails
    /// (`WsError::WriteBufferFull`) before the replies pile up without bound.
    pub max_pending_write: u32,
}

/// Pending writes allowed by default: far above what a connection queues while the server
/// reads (a 128 KiB burst and one message).
pub const MAX_PENDING_WRITE: usize = 16 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message: MAX_MESSAGE as u32,
            max_frame: MAX_FRAME as u32,
            max_pending_write: MAX_PENDING_WRITE as u32,
        }
    }
}
