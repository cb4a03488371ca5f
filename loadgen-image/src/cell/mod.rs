//! Runs one cell (a tier, a matrix cell, a limit probe) of this process's share.
//!
//! One OS thread per worker, each with a current-thread runtime (the oha model): a
//! connection's task never leaves its thread, statistics live in the worker (`Rc<RefCell>`,
//! no locks, no atomics) and are merged once at the end. Workers connect their part of each
//! batch, meet at a barrier, and all start the measured phase at one instant. A fanout's and
//! a hold's connections are served meanwhile (crate::behavior::serving); the others wait unread.
//!
//! [`start_line`] is where the workers meet; [`worker`] is one worker's share, dialed
//! (crate::connect) and then run (crate::behavior); [`rendezvous`] is where a shard meets
//! the other shards of the test before measuring.

pub mod rendezvous;
mod start_line;
mod worker;

use crate::connect::Dialer;
use crate::counters::Counters;
use crate::model::{Behavior, Cell};
use rendezvous::Meeting;
use start_line::StartLine;
use std::rc::Rc;
use std::sync::Arc;
use tokio::time::Instant;
use worker::{Worker, WorkerOut};
use wsload_report::measure::Measure;

/// The outcome of one cell in this process.
pub struct CellOutcome {
    pub measure: Measure,
    /// First dial to last connection established (or failed).
    pub connect_secs: f64,
    /// The measured window (after warm-up), as it actually lasted.
    pub measured_secs: f64,
    /// Spread of the workers' start instants (microseconds): the in-process start skew.
    pub start_skew_us: u64,
    /// When the measured phase (warm-up first) began, Unix µs on this process's clock; `None`
    /// when it never did (nothing connected).
    pub measured_from_micros: Option<u64>,
}

/// The worker threads a cell runs on, and the live counters they feed (a slot each).
pub struct Workers {
    pub threads: usize,
    pub counters: Arc<Counters>,
}

impl Workers {
    /// Runs `cell` on the workers, each on its own thread, and merges their figures. With a
    /// `meeting`, the measured phase begins when the conductor says every shard's share is
    /// open (a fanout's shards keep their common instant instead: see `start_line`).
    pub fn run(&self, cell: &Cell, dialer: &Arc<Dialer>, meeting: Option<Meeting>) -> CellOutcome {
        let count = self.threads.clamp(1, cell.connections.max(1) as usize);
        let meeting = meeting.filter(|_| !matches!(cell.behavior, Behavior::Fanout(_)));
        let start_line = Arc::new(StartLine::new(count, meeting));
        let outs: Vec<WorkerOut> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..count)
                .map(|index| {
                    let start_line = start_line.clone();
                    let (dialer, counters) = (dialer.clone(), self.counters.clone());
                    s.spawn(move || {
                        let worker = Worker {
                            index,
                            count,
                            cell,
                            dialer,
                            slot: counters.slot_ref(index),
                            counters,
                            stats: Rc::default(),
                        };
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .expect("a current-thread runtime builds");
                        let local = tokio::task::LocalSet::new();
                        local.block_on(&rt, worker.run(&start_line))
                    })
                })
                .collect();
            let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
            // A worker that panicked took its connections' figures with it: the cell cannot
            // be reported as measured. Every worker is joined first, so none outlives the cell.
            joined
                .into_iter()
                .map(|j| j.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect()
        });
        let mut outcome = merge(&outs);
        outcome.measured_from_micros = start_line.began_unix_us();
        outcome
    }
}

/// The cell's figures from its workers'.
fn merge(outs: &[WorkerOut]) -> CellOutcome {
    let mut measure = Measure::default();
    for o in outs {
        measure.add(&o.measure);
    }
    let first = outs.iter().map(|o| o.first_dial).min();
    let last = outs.iter().map(|o| o.last_connected).max();
    let connect_secs = first
        .zip(last)
        .map_or(0.0, |(a, b)| b.saturating_duration_since(a).as_secs_f64());
    let measured_secs = outs
        .iter()
        .map(|o| o.measured)
        .max()
        .unwrap_or_default()
        .as_secs_f64();
    let starts: Vec<Instant> = outs.iter().map(|o| o.started).collect();
    let skew = starts
        .iter()
        .max()
        .zip(starts.iter().min())
        .map_or(0, |(a, b)| a.duration_since(*b).as_micros() as u64);
    CellOutcome {
        measure,
        connect_secs,
        measured_secs,
        start_skew_us: skew,
        measured_from_micros: None,
    }
}
