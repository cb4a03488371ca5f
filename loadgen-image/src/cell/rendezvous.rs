//! Where a shard, its share of a cell open, meets the other shards of the test: it says so, and
//! its measured phase begins at the instant the conductor names once every shard has
//! (wsload_control::protocol: `connected`, `POST /control/measure`). Without it, a shard
//! measures from the end of its own connect phase, and with shards that open at different
//! speeds the first may finish a hold before the last has opened its share: N connections were
//! then never held at once.

use crate::machine::clock;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The conductor's word to a shard that said it is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Go {
    /// Not yet: a shard is still opening its share.
    Wait,
    /// Measure cell `cell` from `unix_ms` (this shard's clock).
    At { cell: u32, unix_ms: u64 },
    /// The session ends (finished, SIGTERM): go on at once, nobody waits for the figures.
    Stop,
}

/// What the conductor's side of a shard does when the shard's share is open.
pub trait Rendezvous: Send + Sync {
    /// This shard opened `opened` connections of cell `index` (`failed` could not open): say
    /// so, and hear the conductor's word on the receiver returned.
    fn connected(&self, index: u32, opened: u64, failed: u64) -> watch::Receiver<Go>;
}

/// A cell's rendezvous: which cell, with whom.
#[derive(Clone)]
pub struct Meeting {
    pub index: u32,
    pub rendezvous: Arc<dyn Rendezvous>,
}

impl Meeting {
    /// Says the share is open and waits for the conductor's word: the instant to measure from
    /// (`None`: at once, the session ending).
    pub async fn wait(&self, opened: u64, failed: u64) -> Option<Instant> {
        let mut word = self.rendezvous.connected(self.index, opened, failed);
        tracing::info!(
            cell = self.index,
            opened,
            failed,
            "share open; waiting for every shard to open its own"
        );
        let go = match word
            .wait_for(|g| matches!(g, Go::At { cell, .. } if *cell == self.index) || *g == Go::Stop)
            .await
        {
            Ok(g) => *g,
            // The conductor's side is gone with the session: nothing to wait for.
            Err(_) => Go::Stop,
        };
        let Go::At { unix_ms, .. } = go else {
            return None;
        };
        let now = clock::unix_micros();
        let at = unix_ms.saturating_mul(1000);
        if at < now {
            tracing::warn!(
                late_ms = (now - at) / 1000,
                "the instant to measure from had passed when it arrived; measuring now"
            );
        }
        Some(Instant::now() + Duration::from_micros(at.saturating_sub(now)))
    }
}
