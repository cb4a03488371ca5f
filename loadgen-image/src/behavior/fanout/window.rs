//! A fanout cell's measured window on the conductor's clock, which every process decides
//! alike from the publish instant a message carries; and the worker's fanout tallies, a slot
//! for every topic.

use crate::behavior::worker::WorkerState;
use crate::model::FanoutPlan;
use std::time::Duration;
use wsload_report::fanout::{Fanout, TopicTally};
use wsload_report::measure::Measure;

/// The measured window on the conductor's clock, Unix microseconds: `[from, to)`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    from: u64,
    to: u64,
}

impl Window {
    /// Holds nothing: what is read before the measured phase.
    pub(super) const NONE: Window = Window {
        from: u64::MAX,
        to: u64::MAX,
    };

    pub(super) fn of(ctx: &WorkerState) -> Window {
        let warmup = ctx.measure_from.saturating_duration_since(ctx.start);
        let duration = ctx.deadline.saturating_duration_since(ctx.measure_from);
        let from = ctx.cell_clock.epoch_micros + micros(warmup);
        Window {
            from,
            to: from + micros(duration),
        }
    }

    pub(super) fn holds(&self, us: u64) -> bool {
        us >= self.from && us < self.to
    }
}

pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The worker's fanout tallies, made on first use with a slot for every topic.
pub(super) fn tally<'a>(m: &'a mut Measure, plan: &FanoutPlan) -> &'a mut Fanout {
    let f = m.counts.fanout.get_or_insert_with(Fanout::default);
    let topics = plan.spec.topics as usize;
    if f.topics.len() < topics {
        f.topics.resize(topics, TopicTally::default());
    }
    f.by_server = plan.by_server();
    f
}
