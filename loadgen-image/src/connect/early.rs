//! Deliveries a connection back read past while its steps ran (a replay sent before the
//! answer its steps wait for), kept for its subscriber under two budgets: one connection's and
//! the process's.

use tokio_tungstenite::tungstenite::Message;

/// Most bytes of deliveries a connection back keeps while its steps run: a replay longer is
/// read past from there, and shows as its subscriber's gaps.
pub const EARLY_MAX_BYTES: usize = 4 << 20;
/// Most bytes all the connections of the process keep so at once (a herd of subscribers
/// resuming into long replays): past it, what they read past is not kept either.
pub const EARLY_PROCESS_MAX_BYTES: usize = 256 << 20;

/// What the process keeps now of [`EARLY_PROCESS_MAX_BYTES`].
static EARLY_KEPT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Deliveries a connection's steps read past, kept for its subscriber; their bytes count
/// against the process's budget until they are dropped.
#[derive(Debug, Default)]
pub struct Early {
    pub msgs: Vec<Message>,
    bytes: usize,
}

impl Early {
    /// Keeps `m` (`len` bytes) if both budgets allow.
    pub(super) fn keep(&mut self, m: Message, len: usize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if self.bytes + len > EARLY_MAX_BYTES {
            return false;
        }
        if EARLY_KEPT.fetch_add(len, Relaxed) + len > EARLY_PROCESS_MAX_BYTES {
            EARLY_KEPT.fetch_sub(len, Relaxed);
            return false;
        }
        self.bytes += len;
        self.msgs.push(m);
        true
    }
}

impl Drop for Early {
    fn drop(&mut self) {
        EARLY_KEPT.fetch_sub(self.bytes, std::sync::atomic::Ordering::Relaxed);
    }
}
