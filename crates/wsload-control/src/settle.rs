//! When a cell's delivery can be read: the server may still be working through what sits in
//! socket buffers (zlib frames decode slowly), so the conductor reads the summed counter of
//! every server replica until it has what the shards sent, or stops moving, or a cap passes.

use std::time::{Duration, Instant};

/// The counter has settled when it has not moved for this long...
pub const QUIET: Duration = Duration::from_secs(2);
/// ...or after this long in any case.
pub const MAX: Duration = Duration::from_secs(60);
/// How often to read it meanwhile.
pub const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct Settle {
    before: u64,
    expected: u64,
    started: Instant,
    last: Option<u64>,
    last_change: Instant,
}

impl Settle {
    /// `before`: the summed counter when the cell began; `expected`: what every shard sent.
    pub fn new(before: u64, expected: u64, now: Instant) -> Settle {
        Settle {
            before,
            expected,
            started: now,
            last: None,
            last_change: now,
        }
    }

    /// Takes a reading of the summed counter; `Some(received during the cell)` once settled.
    pub fn observe(&mut self, reading: u64, now: Instant) -> Option<u64> {
        let delta = reading.saturating_sub(self.before);
        if self.last != Some(delta) {
            self.last = Some(delta);
            self.last_change = now;
        }
        let quiet = now.duration_since(self.last_change) >= QUIET;
        let capped = now.duration_since(self.started) >= MAX;
        (delta >= self.expected || quiet || capped).then_some(delta)
    }

    /// What was received so far (for a counter that became unreadable).
    pub fn last(&self) -> Option<u64> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settles_on_everything_received_or_quiet_or_cap() {
        let t0 = Instant::now();
        let mut s = Settle::new(100, 50, t0);
        assert_eq!(s.observe(120, t0), None);
        assert_eq!(s.observe(150, t0 + POLL), Some(50));
        let mut s = Settle::new(100, 50, t0);
        assert_eq!(s.observe(140, t0), None);
        assert_eq!(s.observe(140, t0 + QUIET / 2), None);
        assert_eq!(s.observe(140, t0 + QUIET), Some(40));
        let mut s = Settle::new(0, 1_000_000, t0);
        let mut reading = 0;
        let mut at = t0;
        while at < t0 + MAX {
            reading += 1;
            assert_eq!(s.observe(reading, at), None);
            at += Duration::from_secs(1);
        }
        assert_eq!(s.observe(reading + 1, at), Some(reading + 1));
    }
}
