//! Per-second samples of a cell's measured phase: what the throughput-over-time charts draw.
//!
//! The load generator keeps lock-free running totals for /metrics; a [`Recorder`] turns one
//! reading of them per second into a [`Sample`] of what happened in that second. Shards begin
//! a cell at one released instant, so their samples of the same second add up ([`merge`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One second of a cell's measured phase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Seconds since the cell's measured phase began: this sample covers `[second, second + 1)`.
    pub second: u32,
    /// Messages sent during this second.
    pub sent: u64,
    /// Messages (answers, echoes, broadcasts) received during this second.
    pub received: u64,
    /// Connections open at the end of this second.
    pub open: u64,
    /// Pings answered during this second (scenarios that ping).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pings_answered: u64,
    /// Pings declared lost during this second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pings_lost: u64,
    /// Round-trip p99 so far in the cell, microseconds, where the load generator has it
    /// cheaply. Merged shards keep the worst shard's: a p99 does not add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<u64>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A reading of the load generator's running totals (counters since the cell began, except
/// `open`, which is a gauge).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub sent: u64,
    pub received: u64,
    pub open: u64,
    pub pings_answered: u64,
    pub pings_lost: u64,
}

/// Turns one reading of the running totals per second into samples.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    last: Totals,
    samples: Vec<Sample>,
}

impl Recorder {
    /// Starts at the totals read when the measured phase began (the warm-up's counts are
    /// not the cell's).
    pub fn new(start: Totals) -> Self {
        Recorder {
            last: start,
            samples: Vec::new(),
        }
    }

    /// Records the second ending now: `second` is its offset from the measured phase's start,
    /// `p99_us` the running round-trip p99 when the caller has one.
    pub fn tick(&mut self, second: u32, now: Totals, p99_us: Option<u64>) {
        // Saturating: a counter read torn against another thread's reset must not wrap.
        let d = |now: u64, last: u64| now.saturating_sub(last);
        self.samples.push(Sample {
            second,
            sent: d(now.sent, self.last.sent),
            received: d(now.received, self.last.received),
            open: now.open,
            pings_answered: d(now.pings_answered, self.last.pings_answered),
            pings_lost: d(now.pings_lost, self.last.pings_lost),
            p99_us,
        });
        self.last = now;
    }

    /// The samples recorded, in order: a cell's `timeline`.
    pub fn finish(self) -> Vec<Sample> {
        self.samples
    }
}

/// Adds another shard's timeline of the same cell into `into`, second by second.
pub fn merge(into: &mut Vec<Sample>, other: &[Sample]) {
    if other.is_empty() {
        return;
    }
    let mut by_second: BTreeMap<u32, Sample> = into.drain(..).map(|s| (s.second, s)).collect();
    for s in other {
        let e = by_second.entry(s.second).or_insert_with(|| Sample {
            second: s.second,
            ..Sample::default()
        });
        e.sent += s.sent;
        e.received += s.received;
        e.open += s.open;
        e.pings_answered += s.pings_answered;
        e.pings_lost += s.pings_lost;
        e.p99_us = e.p99_us.max(s.p99_us);
    }
    into.extend(by_second.into_values());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(sent: u64, received: u64, open: u64) -> Totals {
        Totals {
            sent,
            received,
            open,
            ..Totals::default()
        }
    }

    #[test]
    fn recorder_keeps_what_happened_in_each_second() {
        let mut r = Recorder::new(totals(50, 40, 10));
        r.tick(0, totals(150, 130, 10), None);
        r.tick(
            1,
            Totals {
                pings_answered: 7,
                pings_lost: 1,
                ..totals(350, 330, 9)
            },
            Some(1200),
        );
        let s = r.finish();
        assert_eq!((s[0].sent, s[0].received, s[0].open), (100, 90, 10));
        assert_eq!((s[1].sent, s[1].received, s[1].open), (200, 200, 9));
        assert_eq!((s[1].pings_answered, s[1].pings_lost), (7, 1));
        assert_eq!((s[0].p99_us, s[1].p99_us), (None, Some(1200)));
    }

    #[test]
    fn merge_adds_samples_of_the_same_second_and_keeps_the_rest() {
        let mut a = vec![
            Sample {
                second: 0,
                sent: 10,
                received: 9,
                open: 5,
                p99_us: Some(300),
                ..Sample::default()
            },
            Sample {
                second: 1,
                sent: 20,
                received: 20,
                open: 5,
                ..Sample::default()
            },
        ];
        // The other shard's run went one second longer and has no second 1 (a missed tick).
        let b = vec![
            Sample {
                second: 0,
                sent: 1,
                received: 1,
                open: 2,
                pings_answered: 4,
                p99_us: Some(900),
                ..Sample::default()
            },
            Sample {
                second: 2,
                sent: 3,
                received: 2,
                open: 2,
                pings_lost: 1,
                ..Sample::default()
            },
        ];
        merge(&mut a, &b);
        assert_eq!(
            a.iter().map(|s| s.second).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert_eq!((a[0].sent, a[0].received, a[0].open), (11, 10, 7));
        assert_eq!((a[0].pings_answered, a[0].p99_us), (4, Some(900)));
        assert_eq!((a[1].sent, a[1].open), (20, 5));
        assert_eq!((a[2].sent, a[2].pings_lost, a[2].p99_us), (3, 1, None));
        let before = a.clone();
        merge(&mut a, &[]);
        assert_eq!(a, before);
    }
}
