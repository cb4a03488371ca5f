//! What a cell's dropped connections did to come back (`spec.reconnect`), window by window:
//! one window before any disruption, then one from each disruption's instant to the next. A
//! drop belongs to the window it happened in, and so do its attempts and its return.

use crate::connect_error::ConnectError;
use crate::hist::Hist;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The reconnect figures of one cell, merged exactly over workers and shards.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reconnects {
    /// The policy, as the report names it (`exponential (1s..30s doubling, full jitter)`).
    pub policy: String,
    /// Whether the policy draws its waits at random (a jitter): what a herd finding suggests.
    #[serde(default)]
    pub jittered: bool,
    /// The windows: the first from the measured phase's start, then one per disruption.
    pub storms: Vec<Storm>,
    /// Reconnect attempts begun in each [`BUCKET_MS`] of the measured phase, up to the last
    /// one: a herd's peak shows within a second (an immediate policy's attempts all leave
    /// within milliseconds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<u64>,
    /// Connections back in each [`BUCKET_MS`] of the measured phase, up to the last one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub returns: Vec<u64>,
    /// In a fanout: the window's sequence numbers missing between deliveries of subscribers
    /// before any drop of theirs (gaps no drop explains; 0 on a server that loses nothing).
    #[serde(default)]
    pub gaps_undropped: u64,
    /// Connections the managed server's replicas admitted in each [`BUCKET_MS`] of the
    /// measured phase, all replicas summed, read from their own counters while the cell ran
    /// (`wsload run` with kills or restarts): what the attempts met. Empty when not read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_accepts: Vec<u64>,
    /// The connections each managed replica held at the measured window's end, by its own
    /// gauge (its last reading before the end), in replica order; `None` for one down then.
    /// Empty when not read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas_held: Vec<Option<u64>>,
}

/// The drops of one window, and how they came back.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Storm {
    /// Milliseconds into the measured phase the window begins (its disruption's `at`).
    pub from_ms: u64,
    /// What began it (`kill 1 replica at 5s`); empty for the window before any disruption.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub what: String,
    /// Connections dropped in the window (the server closed, reset or stopped answering).
    pub dropped: u64,
    /// Of those, opened again (dialed and their steps on open done).
    pub reconnected: u64,
    /// Of those not back, the ones that stopped after the policy's last attempt.
    #[serde(default)]
    pub gave_up: u64,
    /// Reconnect attempts begun: those that failed, those that opened, and any the cell's
    /// end cut short.
    pub attempts: u64,
    /// Failed attempts by why they failed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed: BTreeMap<ConnectError, u64>,
    /// Milliseconds from the window's start to the last connection's return.
    #[serde(default)]
    pub last_back_ms: u64,
    /// Each returned connection's time down: from its drop to its return.
    #[serde(default, skip_serializing_if = "Hist::is_empty")]
    pub downtime: Hist,
    /// The successful reconnections' handshakes (TCP connect to ready), to set against the
    /// cell's first connections' (`hists.connect`).
    #[serde(default, skip_serializing_if = "Hist::is_empty")]
    pub handshake: Hist,
    /// In a fanout: the measured window's sequence numbers the subscribers dropped in this
    /// window missed between their deliveries, from their drop until their next (what was
    /// published while they were away, and lost to them).
    #[serde(default)]
    pub gaps: u64,
    /// Of the window's drops of subscribers, those followed by such a gap.
    #[serde(default)]
    pub gapped: u64,
    /// In a fanout whose subscribers resume (`conversation.resume`): deliveries of the
    /// measured window they read back whose publish instant fell while they were away, from
    /// their drop to their return (what the server replayed; set against `gaps`, what it
    /// did not).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recovered: u64,
    /// In a fanout: subscribers back from a drop in this window that read no delivery of the
    /// measured window after their return (subscribed by nothing: a session the server
    /// forgot, a subscription it refused without a word).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unfed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Storm {
    /// Dropped and neither back nor given up: still trying when the cell ended.
    pub fn never_back(&self) -> u64 {
        self.dropped.saturating_sub(self.reconnected)
    }
}

impl Reconnects {
    /// Empty figures for `windows`: each disruption's instant (ms into the measured phase) and
    /// what it does.
    pub fn new(policy: String, jittered: bool, windows: &[(u64, String)]) -> Reconnects {
        let mut storms = vec![Storm::default()];
        storms.extend(windows.iter().map(|(from_ms, what)| Storm {
            from_ms: *from_ms,
            what: what.clone(),
            ..Storm::default()
        }));
        Reconnects {
            policy,
            jittered,
            storms,
            ..Reconnects::default()
        }
    }

    /// The window a drop `ms` into the measured phase belongs to.
    pub fn window(&self, ms: u64) -> usize {
        self.storms
            .iter()
            .rposition(|s| s.from_ms <= ms)
            .unwrap_or(0)
    }

    pub fn dropped(&mut self, window: usize) {
        if let Some(s) = self.storms.get_mut(window) {
            s.dropped += 1;
        }
    }

    /// An attempt begun `ms` into the measured phase.
    pub fn attempt(&mut self, window: usize, ms: u64) {
        bump(&mut self.attempts, ms);
        if let Some(s) = self.storms.get_mut(window) {
            s.attempts += 1;
        }
    }

    /// An attempt that did not open, and why.
    pub fn failed(&mut self, window: usize, why: ConnectError) {
        if let Some(s) = self.storms.get_mut(window) {
            *s.failed.entry(why).or_default() += 1;
        }
    }

    /// A connection back `ms` into the measured phase, after `down` and a handshake of
    /// `handshake`.
    pub fn back(&mut self, window: usize, ms: u64, down: Duration, handshake: Duration) {
        bump(&mut self.returns, ms);
        if let Some(s) = self.storms.get_mut(window) {
            s.reconnected += 1;
            s.last_back_ms = s.last_back_ms.max(ms.saturating_sub(s.from_ms));
            s.downtime.record(down);
            s.handshake.record(handshake);
        }
    }

    /// A subscriber's `gaps` in its deliveries since its drop in `window` (`None`: since
    /// its start, never dropped before).
    pub fn gaps(&mut self, window: Option<usize>, gaps: u64) {
        match window.and_then(|w| self.storms.get_mut(w)) {
            Some(s) => {
                s.gaps += gaps;
                s.gapped += u64::from(gaps > 0);
            }
            None => self.gaps_undropped += gaps,
        }
    }

    /// `n` deliveries a subscriber dropped in `window` read back, published while it was
    /// away.
    pub fn recovered(&mut self, window: usize, n: u64) {
        if let Some(s) = self.storms.get_mut(window) {
            s.recovered += n;
        }
    }

    /// A subscriber back from a drop in `window` that read nothing of the window since.
    pub fn unfed(&mut self, window: usize) {
        if let Some(s) = self.storms.get_mut(window) {
            s.unfed += 1;
        }
    }

    pub fn gave_up(&mut self, window: usize) {
        if let Some(s) = self.storms.get_mut(window) {
            s.gave_up += 1;
        }
    }

    /// Adds another worker's or shard's figures of the same cell (the same windows).
    pub fn add(&mut self, o: &Reconnects) {
        if self.policy.is_empty() {
            self.policy = o.policy.clone();
            self.jittered = o.jittered;
        }
        if self.storms.len() < o.storms.len() {
            self.storms.resize_with(o.storms.len(), Storm::default);
        }
        for (mine, theirs) in self.storms.iter_mut().zip(&o.storms) {
            if mine.what.is_empty() {
                mine.what = theirs.what.clone();
                mine.from_ms = theirs.from_ms;
            }
            mine.dropped += theirs.dropped;
            mine.reconnected += theirs.reconnected;
            mine.gave_up += theirs.gave_up;
            mine.attempts += theirs.attempts;
            for (k, v) in &theirs.failed {
                *mine.failed.entry(*k).or_default() += v;
            }
            mine.last_back_ms = mine.last_back_ms.max(theirs.last_back_ms);
            mine.downtime.add(&theirs.downtime);
            mine.handshake.add(&theirs.handshake);
            mine.gaps += theirs.gaps;
            mine.gapped += theirs.gapped;
            mine.recovered += theirs.recovered;
            mine.unfed += theirs.unfed;
        }
        self.gaps_undropped += o.gaps_undropped;
        add_series(&mut self.attempts, &o.attempts);
        add_series(&mut self.returns, &o.returns);
        add_series(&mut self.server_accepts, &o.server_accepts);
        // The replicas are the run's, read by one process: the same figures, not parts.
        if self.replicas_held.is_empty() {
            self.replicas_held.clone_from(&o.replicas_held);
        }
    }

    /// The replicas' admissions' peak rate from `from_ms` to `to_ms`, per second; `None`
    /// when they were not read.
    pub fn peak_server_accepts(&self, from_ms: u64, to_ms: u64) -> Option<u64> {
        (!self.server_accepts.is_empty())
            .then(|| peak(&self.server_accepts, from_ms, to_ms) * (1000 / BUCKET_MS))
    }

    /// The attempts' peak rate from `from_ms` to `to_ms` (ms into the phase), per second:
    /// the busiest [`BUCKET_MS`]'s, scaled.
    pub fn peak_attempts(&self, from_ms: u64, to_ms: u64) -> u64 {
        peak(&self.attempts, from_ms, to_ms) * (1000 / BUCKET_MS)
    }

    /// The returns' peak rate from `from_ms` to `to_ms`, per second.
    pub fn peak_back(&self, from_ms: u64, to_ms: u64) -> u64 {
        peak(&self.returns, from_ms, to_ms) * (1000 / BUCKET_MS)
    }

    /// Where window `i` ends (the next one's start), in ms into the phase.
    pub fn window_end(&self, i: usize) -> u64 {
        self.storms.get(i + 1).map_or(u64::MAX, |s| s.from_ms)
    }
}

/// The span of one entry of the series, in milliseconds.
pub const BUCKET_MS: u64 = 100;
/// The most entries a series holds (a day): later ones count in the last.
const MAX_BUCKETS: usize = 864_000;

/// Adds `n` to the entry of `ms` into the phase.
pub fn add_at(series: &mut Vec<u64>, ms: u64, n: u64) {
    let i = usize::try_from(ms / BUCKET_MS)
        .unwrap_or(MAX_BUCKETS)
        .min(MAX_BUCKETS);
    if series.len() <= i {
        series.resize(i + 1, 0);
    }
    series[i] += n;
}

fn bump(series: &mut Vec<u64>, ms: u64) {
    let i = usize::try_from(ms / BUCKET_MS)
        .unwrap_or(MAX_BUCKETS)
        .min(MAX_BUCKETS);
    if series.len() <= i {
        series.resize(i + 1, 0);
    }
    series[i] += 1;
}

fn add_series(mine: &mut Vec<u64>, theirs: &[u64]) {
    if mine.len() < theirs.len() {
        mine.resize(theirs.len(), 0);
    }
    for (m, t) in mine.iter_mut().zip(theirs) {
        *m += t;
    }
}

fn peak(series: &[u64], from_ms: u64, to_ms: u64) -> u64 {
    let from = usize::try_from(from_ms / BUCKET_MS).unwrap_or(usize::MAX);
    let to = usize::try_from(to_ms.div_ceil(BUCKET_MS)).unwrap_or(usize::MAX);
    series
        .iter()
        .enumerate()
        .filter(|(i, _)| *i >= from && *i < to)
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_attempts_and_returns_land_in_their_window_and_merge_exactly() {
        let windows = [(5_000, "kill 1 replica at 5s".to_string())];
        let mut a = Reconnects::new("immediate".into(), false, &windows);
        let mut b = Reconnects::new("immediate".into(), false, &windows);
        assert_eq!((a.window(0), a.window(4_999), a.window(5_000)), (0, 0, 1));
        a.dropped(1);
        a.attempt(1, 5_010);
        a.failed(1, ConnectError::Refused);
        a.attempt(1, 5_300);
        a.back(
            1,
            5_310,
            Duration::from_millis(300),
            Duration::from_millis(2),
        );
        b.dropped(1);
        b.dropped(1);
        b.attempt(1, 6_100);
        b.back(
            1,
            6_150,
            Duration::from_millis(1_150),
            Duration::from_millis(4),
        );
        b.gave_up(1);
        a.gaps(Some(1), 7);
        b.gaps(Some(1), 0);
        b.gaps(None, 2);
        b.recovered(1, 5);
        b.unfed(1);
        a.add(&b);
        let s = &a.storms[1];
        assert_eq!(
            (
                s.dropped,
                s.reconnected,
                s.gave_up,
                s.attempts,
                s.never_back()
            ),
            (3, 2, 1, 3, 1)
        );
        assert_eq!(s.failed.get(&ConnectError::Refused), Some(&1));
        assert_eq!((s.gaps, s.gapped, a.gaps_undropped), (7, 1, 2));
        assert_eq!((s.recovered, s.unfed), (5, 1));
        assert_eq!(s.last_back_ms, 1_150);
        assert_eq!((s.downtime.len(), s.handshake.len()), (2, 2));
        // 5,010 and 5,300 ms from a, 6,100 from b: buckets 50, 53 and 61 of 100 ms.
        assert_eq!(a.attempts.len(), 62);
        assert_eq!((a.attempts[50], a.attempts[53], a.attempts[61]), (1, 1, 1));
        assert_eq!(a.attempts.iter().sum::<u64>(), 3);
        assert_eq!(a.peak_attempts(5_000, a.window_end(1)), 10);
        assert_eq!(a.peak_attempts(0, 5_000), 0);
        assert_eq!(a.storms[0].dropped, 0);
        let json = serde_json::to_string(&a).expect("json");
        let back: Reconnects = serde_json::from_str(&json).expect("read back");
        assert_eq!(back.storms[1].downtime.len(), 2);
        assert_eq!(back.storms[1].what, "kill 1 replica at 5s");
    }
}
