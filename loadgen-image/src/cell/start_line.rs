//! Where a cell's workers meet: the connect phase's common clock, then the barrier before the
//! measured phase and the one instant every worker begins it at: at once, the instant the
//! conductor names once every shard's share is open (crate::cell::rendezvous), or a fanout's
//! common instant across shards.

use super::rendezvous::Meeting;
use crate::behavior::worker::Instants;
use crate::counters::Counters;
use crate::machine::clock::{self, CellClock};
use crate::model::{Behavior, Cell};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::sync::Barrier;
use tokio::time::Instant;

/// The instant a cell's measured phase (warm-up first) begins, as every worker takes it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Start {
    pub at: Instant,
    /// The cell's clock (clock::take_cell, once per cell), as the conductor armed it.
    pub cell_clock: CellClock,
    /// `at` on the conductor's clock and on this process's, Unix µs.
    pub on_conductor_us: u64,
    pub unix_us: u64,
}

impl Start {
    /// The instants `cell`'s connections measure by, from this start: warm-up first, then
    /// the measured window.
    pub(super) fn instants(&self, cell: &Cell) -> Instants {
        let measure_from = self.at + cell.warmup;
        Instants {
            start: self.at,
            cell_clock: self.cell_clock,
            start_on_conductor_us: self.on_conductor_us,
            measure_from,
            deadline: measure_from + cell.duration,
        }
    }
}

/// Where the workers meet: the connect phase's common clock, then the barrier before the
/// measured phase and the one instant it starts at.
pub(super) struct StartLine {
    barrier: Barrier,
    start: OnceLock<Start>,
    /// The cell's clock as the conductor armed it, and the instant every shard's measured
    /// phase begins at when they must begin together (see [`common_start`]).
    armed: OnceLock<(CellClock, Option<Instant>)>,
    /// When the workers begin dialing.
    pub connect_start: Instant,
    /// The other shards of the test, when the measured phase waits for them; and the instant
    /// the conductor named (`None` inside: at once).
    meeting: Option<Meeting>,
    met: OnceLock<Option<Instant>>,
}

impl StartLine {
    pub(super) fn new(workers: usize, meeting: Option<Meeting>) -> StartLine {
        StartLine {
            barrier: Barrier::new(workers),
            start: OnceLock::new(),
            armed: OnceLock::new(),
            connect_start: Instant::now() + Duration::from_millis(5),
            meeting,
            met: OnceLock::new(),
        }
    }

    /// When the measured phase began, Unix µs on this process's clock; `None` when it never
    /// did.
    pub(super) fn began_unix_us(&self) -> Option<u64> {
        self.start.get().map(|s| s.unix_us)
    }

    /// Waits, each worker its connect phase done, for the measured phase: the other workers
    /// at the barrier, the other shards through the meeting (one worker speaking for the
    /// shard), a fanout's common instant. The first worker through marks the cell measuring
    /// in `counters`.
    pub(super) async fn cross(&self, cell: &Cell, counters: &Counters) -> Start {
        let leader = self.barrier.wait().await.is_leader();
        if let Some(meeting) = &self.meeting {
            // One worker speaks for the shard; the others wait at the barrier, serving their
            // connections meanwhile, as all of them do while the conductor's word is awaited.
            if leader {
                let (now, base) = (counters.snapshot(), counters.course_base());
                let at = meeting
                    .wait(now.opened - base.opened, now.failed - base.failed)
                    .await;
                let _ = self.met.set(at);
            }
            self.barrier.wait().await;
        }
        let (armed, wake) = *self.armed.get_or_init(|| {
            let armed = clock::take_cell();
            match common_start(cell, &armed) {
                Some(at) => {
                    let now = clock::conductor_micros();
                    if now > at {
                        tracing::warn!(
                            late_ms = (now - at) / 1000,
                            "connected after the instant every shard was to begin measuring; this shard begins late"
                        );
                    }
                    let wait = Duration::from_micros(at.saturating_sub(now));
                    (
                        CellClock {
                            epoch_micros: at,
                            ..armed
                        },
                        Some(Instant::now() + wait),
                    )
                }
                None => (armed, self.met.get().copied().flatten()),
            }
        });
        if let Some(at) = wake {
            tokio::time::sleep_until(at).await;
        }
        *self.start.get_or_init(|| {
            let now = Instant::now();
            let on_conductor_us = clock::conductor_micros();
            counters.measuring(now.into_std(), cell.warmup);
            Start {
                at: now,
                cell_clock: armed,
                on_conductor_us,
                unix_us: clock::unix_micros(),
            }
        })
    }
}

/// When shards must begin a cell's measured phase together, the instant on the conductor's
/// clock they do: a fanout's publishers and subscribers are on every shard, and a publish
/// made before another shard's subscribers are subscribed would be a gap that is no
/// server's. Each shard has until the last connect batch's start plus `connect.timeout` to
/// be connected (its own clock cannot tell when the others are), the cell's release
/// instant being the origin. `None` for other cells, and without a conductor.
fn common_start(cell: &Cell, armed: &CellClock) -> Option<u64> {
    let Behavior::Fanout(plan) = &cell.behavior else {
        return None;
    };
    if !armed.conducted {
        return None;
    }
    let dials = cell.connections + u32::try_from(plan.publishing.len()).unwrap_or(u32::MAX);
    let batches = dials.div_ceil(cell.batch_size.max(1));
    let allowance = cell.batch_interval * batches.saturating_sub(1) + plan.connect_timeout;
    Some(armed.epoch_micros + u64::try_from(allowance.as_micros()).unwrap_or(u64::MAX))
}
