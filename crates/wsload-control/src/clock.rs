//! Each shard's wall clock against the conductor's, NTP-style over the control channel. A
//! probe is `GET /control/clock`: the conductor notes its clock when it sends (t0) and when the
//! answer is back (t1), the shard answers with its clock (ts) somewhere in between. Assuming
//! the reply was stamped halfway, the offset is `ts - (t0 + t1) / 2`; whatever the split of
//! the round trip between the two ways, the true offset is within half the round trip of it.
//! So the probe of the smallest round trip is the one to believe, and half its round trip the
//! uncertainty to report.
//!
//! A clock drifts (tens of µs per second unsynchronized, far less under NTP), so a best probe
//! taken long ago becomes wrong while still looking precise: the estimate is the best of the
//! last [`WINDOW`] probes only. With a burst before the first cell and one probe every
//! [`EVERY`] after, the window spans about a minute and a half: it follows a drifting clock,
//! and a few congested probes cannot displace the burst's good one within that time.

use crate::protocol::{ClockReading, Release, State};
use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wsload_report::ShardClock;

/// Probes the estimate is taken from: the most recent ones.
pub const WINDOW: usize = 16;
/// Probes in a row before the first cell: enough that one of them is likely to have met no
/// queue on either way.
pub const BURST: usize = 8;
/// One probe per shard this often while the test runs: cheap (one small request), and often
/// enough to follow a drifting clock.
pub const EVERY: Duration = Duration::from_secs(5);

/// One probe, in microseconds: the conductor's clock when it sent (`sent`) and received
/// (`received`), the shard's clock in its answer (`shard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub sent: u64,
    pub shard: u64,
    pub received: u64,
}

impl Sample {
    /// A probe sent at `sent` (the conductor's wall clock), answered with `reading` after
    /// `round_trip` measured on a monotonic clock, so that a wall clock stepped meanwhile
    /// cannot make the round trip look short.
    pub fn new(sent: u64, reading: ClockReading, round_trip: Duration) -> Sample {
        let round_trip = u64::try_from(round_trip.as_micros()).unwrap_or(u64::MAX);
        Sample {
            sent,
            shard: reading.unix_micros,
            received: sent.saturating_add(round_trip),
        }
    }

    pub fn round_trip(&self) -> u64 {
        self.received.saturating_sub(self.sent)
    }

    /// Shard clock minus conductor clock, were the answer stamped halfway through the round
    /// trip.
    pub fn offset(&self) -> i64 {
        let twice = 2 * i128::from(self.shard) - i128::from(self.sent) - i128::from(self.received);
        (twice / 2).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// How far the true offset may be from [`Sample::offset`]: half the round trip, rounded
    /// up.
    pub fn uncertainty(&self) -> u64 {
        self.round_trip().div_ceil(2)
    }
}

/// The estimate of one shard's clock, from the probes taken so far.
#[derive(Debug, Clone, Default)]
pub struct Estimator {
    recent: VecDeque<Sample>,
    taken: u32,
}

impl Estimator {
    pub fn add(&mut self, sample: Sample) {
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(sample);
        self.taken = self.taken.saturating_add(1);
    }

    /// The probe of the smallest round trip among the recent ones (the latest of equals: the
    /// same precision, closer to now).
    pub fn best(&self) -> Option<&Sample> {
        self.recent.iter().rev().min_by_key(|s| s.round_trip())
    }

    /// The offset and its uncertainty from the best recent probe, and how many were taken;
    /// `None` before any answered.
    pub fn estimate(&self) -> Option<ShardClock> {
        let best = self.best()?;
        Some(ShardClock {
            offset_micros: best.offset(),
            uncertainty_micros: best.uncertainty(),
            samples: self.taken,
        })
    }
}

/// The conductor's wall clock, Unix microseconds: the clock the offsets are against.
pub fn conductor_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The instant (Unix ms) to send a shard so that it begins at `at` on the conductor's clock.
/// A shard sleeps until its own clock reads the instant it was given; one running ahead by d
/// reads `at + d` exactly when the conductor's reads `at`, so it is given `at + d` and every
/// shard begins at the same true instant. The instant is in whole milliseconds (the
/// protocol's), so the release is as close as the uncertainty plus half a millisecond.
pub fn release_at(at: u64, clock: Option<&ShardClock>) -> u64 {
    let Some(c) = clock else { return at };
    let offset_ms = (c.offset_micros as f64 / 1000.0).round() as i64;
    (i128::from(at) + i128::from(offset_ms)).clamp(0, i128::from(u64::MAX)) as u64
}

/// The release of a shard that begins at `at` (Unix ms) on the conductor's clock: its own
/// instant ([`release_at`]), with the conductor's instant and the offset it stamps by.
pub fn release(at: u64, clock: Option<&ShardClock>) -> Release {
    Release {
        start_at: release_at(at, clock),
        conductor_at: Some(at),
        offset_micros: clock.map_or(0, |c| c.offset_micros),
    }
}

/// A shard's `state` with the instants it stamped moved onto the conductor's clock, so that
/// the spread of the shards' cell starts (the barrier's skew) compares one clock's readings.
pub fn on_conductor_clock(state: &State, clock: Option<&ShardClock>) -> State {
    let mut state = state.clone();
    let Some(c) = clock else { return state };
    let cell = state.last_cell.as_mut();
    let stamps = [
        state.started_at_micros.as_mut(),
        state.finished_at_micros.as_mut(),
    ]
    .into_iter()
    .flatten()
    .chain(
        cell.into_iter()
            .flat_map(|c| [&mut c.started_at_micros, &mut c.finished_at_micros]),
    );
    for micros in stamps {
        *micros = c.to_conductor(*micros);
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe sent at `t0` whose request takes `up` µs and whose answer takes `down`, to a
    /// shard whose clock is `offset` ahead.
    fn probe(t0: u64, up: u64, down: u64, offset: i64) -> Sample {
        let stamped = (t0 + up) as i64 + offset;
        Sample {
            sent: t0,
            shard: stamped as u64,
            received: t0 + up + down,
        }
    }

    #[test]
    fn the_probe_of_the_smallest_round_trip_gives_the_offset() {
        let offset = 50_000;
        let mut e = Estimator::default();
        assert_eq!(e.estimate(), None);
        // Slow probes, one-sided: each alone would be off by thousands of µs.
        e.add(probe(1_000_000, 9_000, 200, offset));
        e.add(probe(2_000_000, 300, 4_000, offset));
        e.add(probe(3_000_000, 120, 100, offset));
        e.add(probe(4_000_000, 2_000, 2_000, offset));
        let c = e.estimate().expect("an estimate");
        assert_eq!(e.best().map(Sample::round_trip), Some(220));
        assert_eq!(c.offset_micros, offset + 10);
        assert_eq!(c.uncertainty_micros, 110);
        assert_eq!(c.samples, 4);
        // A clock behind gives a negative offset.
        let behind = probe(5_000_000, 100, 100, -7_000);
        assert_eq!((behind.offset(), behind.uncertainty()), (-7_000, 100));
    }

    /// However the round trip splits between the two ways, the error is within the
    /// uncertainty, and it reaches it only when the split is all on one way.
    #[test]
    fn asymmetric_delays_stay_within_the_uncertainty() {
        for offset in [-250_000i64, -3, 0, 1, 50_000, 3_600_000_000] {
            for rtt in [1u64, 2, 99, 100, 1_000, 40_001] {
                for up in 0..=rtt {
                    if rtt > 100 && up % (rtt / 50) != 0 {
                        continue;
                    }
                    let s = probe(1_800_000_000_000_000, up, rtt - up, offset);
                    let error = (s.offset() - offset).unsigned_abs();
                    assert!(
                        error <= s.uncertainty(),
                        "offset {offset} rtt {rtt} up {up}: error {error} > {}",
                        s.uncertainty()
                    );
                }
            }
        }
    }

    /// The estimate follows the recent probes: a best probe older than the window gives way,
    /// so a clock that drifted is followed.
    #[test]
    fn old_probes_leave_the_window_and_a_drifting_clock_is_followed() {
        let mut e = Estimator::default();
        e.add(probe(0, 10, 10, 1_000));
        for k in 1..WINDOW as u64 {
            e.add(probe(k * 5_000_000, 200, 200, 1_000));
        }
        assert_eq!(e.estimate().map(|c| c.offset_micros), Some(1_000));
        assert_eq!(e.estimate().map(|c| c.uncertainty_micros), Some(10));
        // The clock has moved 300 µs since; the precise old probe leaves the window.
        e.add(probe(WINDOW as u64 * 5_000_000, 150, 150, 1_300));
        let c = e.estimate().expect("an estimate");
        assert_eq!((c.offset_micros, c.uncertainty_micros), (1_300, 150));
        assert_eq!(c.samples, WINDOW as u32 + 1);
    }

    #[test]
    fn a_round_trip_measured_monotonically_makes_the_sample() {
        let s = Sample::new(
            1_000,
            ClockReading {
                unix_micros: 51_200,
            },
            Duration::from_micros(400),
        );
        assert_eq!(
            (s.received, s.round_trip(), s.offset()),
            (1_400, 400, 50_000)
        );
    }

    #[test]
    fn a_shard_ahead_is_released_later_by_its_offset() {
        let ahead = ShardClock {
            offset_micros: 50_400,
            uncertainty_micros: 100,
            samples: 8,
        };
        assert_eq!(release_at(1_000_000, Some(&ahead)), 1_000_050);
        let behind = ShardClock {
            offset_micros: -2_600,
            ..ahead
        };
        assert_eq!(release_at(1_000_000, Some(&behind)), 999_997);
        assert_eq!(release_at(1_000_000, None), 1_000_000);
        // Released that way, it stamps its start 50 ms later by its own clock: on the
        // conductor's, it began with the others.
        let stamped = State {
            started_at_micros: Some(1_000_050_400),
            last_cell: Some(crate::CellSummary {
                started_at_micros: 1_000_050_400,
                finished_at_micros: 1_001_050_400,
                ..Default::default()
            }),
            ..Default::default()
        };
        let moved = on_conductor_clock(&stamped, Some(&ahead));
        assert_eq!(moved.started_at_micros, Some(1_000_000_000));
        let cell = moved.last_cell.expect("a cell");
        assert_eq!(
            (cell.started_at_micros, cell.finished_at_micros),
            (1_000_000_000, 1_001_000_000)
        );
        assert_eq!(on_conductor_clock(&stamped, None), stamped);
    }
}
