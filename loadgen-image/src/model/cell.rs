//! What a cell is, as data: its connections, its behavior, how long it lasts, and where this
//! process stands among the shards. Planning (crate::model::plan) makes these from a spec;
//! the counters, the execution and the presentation read them; nothing here runs anything.

use super::behavior::Behavior;
use crate::conversation::{Encoding, Script};
use std::sync::Arc;
use std::time::Duration;
use wsload_spec::Format;

/// This process's place among the shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };
}

/// What every connection of a cell does, and for how long.
#[derive(Clone)]
pub struct Cell {
    pub label: String,
    /// This process's connections.
    pub connections: u32,
    /// Global number of this process's first connection (shard offset), for source addresses
    /// and JWT subjects.
    pub first: u64,
    pub batch_size: u32,
    pub batch_interval: Duration,
    /// How the cell's format puts the measured message on the wire.
    pub encoding: Encoding,
    /// `message.size` of the cell (its size in a payload matrix): what the conversation's
    /// `${pad}` fills the measured message to.
    pub size: usize,
    pub behavior: Behavior,
    pub warmup: Duration,
    pub duration: Duration,
    /// How long a connection's writes may make no progress (`spec.writeTimeout`).
    pub write_timeout: Duration,
    /// The conversation as this cell holds it (`Script::for_cell`): its measured message in
    /// the cell's format and size.
    pub script: Arc<Script>,
    /// How its held connections come back when dropped, and the windows of their figures;
    /// `None` when the spec neither reconnects nor disrupts.
    pub comeback: Option<Arc<super::comeback::Comeback>>,
}

/// A planned cell plus what the report says of it.
#[derive(Clone)]
pub struct Planned {
    pub cell: Cell,
    /// Connections of the whole test (all shards) in this cell.
    pub total_connections: u32,
    pub size: u32,
    pub format: Format,
    /// Messages per second asked of the whole test (open loop), else 0.
    pub target_rate: f64,
}

/// A cell's planned course: connect, warm-up, measured window.
#[derive(Debug, Clone, PartialEq)]
pub struct Phases {
    /// How long the connect batches are spread over (the last batch's start).
    pub connect: Duration,
    pub warmup: Duration,
    /// `None`: the cell ends when its connections are done (a count of pings), not at a time.
    pub measured: Option<Duration>,
}

impl Phases {
    pub fn of(p: &Planned) -> Phases {
        let c = &p.cell;
        let batches = c.connections.div_ceil(c.batch_size.max(1));
        Phases {
            connect: c.batch_interval * batches.saturating_sub(1),
            warmup: c.warmup,
            measured: match c.behavior {
                // A storm closes each connection once open: nothing after the batches.
                Behavior::Close => Some(Duration::ZERO),
                // A fanout's subscribers read on for `drain` after the window.
                Behavior::Fanout(ref f) => Some(c.duration + f.drain),
                ref b if b.is_timed() => Some(c.duration),
                _ => None,
            },
        }
    }
    pub fn total(&self) -> Option<Duration> {
        self.measured.map(|m| self.connect + self.warmup + m)
    }
}
