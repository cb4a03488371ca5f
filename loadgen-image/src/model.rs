//! What a cell is, as data: the bottom layer of the load generator. Planning (plan.rs) makes
//! these from a spec; the counters, the execution and the presentation read them; nothing
//! here runs anything.

use crate::encoding::Encoding;
use crate::schedule::Schedule;
use std::sync::Arc;
use std::time::Duration;
use wsload_spec::fanout::{FanoutSpec, Publisher};
use wsload_spec::{Format, PingKind};

/// This process's place among the shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };
}

/// How the connection pings (pingLatency, sustainedHold, pingpong, paced loads).
#[derive(Debug, Clone, Copy)]
pub struct PingCfg {
    pub kind: PingKind,
    pub timeout: Duration,
}

#[derive(Clone)]
pub enum Behavior {
    /// Connect, then close (connectionStorm).
    Close,
    /// Stay open until the deadline, pinging every `every` (sustainedHold, limit probes).
    Hold {
        every: Option<Duration>,
        ping: PingCfg,
    },
    /// `count` pings one after another, `interval` apart (pingLatency).
    Ping {
        count: u32,
        interval: Duration,
        ping: PingCfg,
    },
    /// Write as fast as possible until the deadline. With `window`, the server answers every
    /// message and at most `window` are in flight; without, nothing is awaited.
    Saturate {
        window: Option<u32>,
        per_message_flush: bool,
    },
    /// Write only, never read (blast).
    Blast { per_message_flush: bool },
    /// One message in flight, closed loop (pingpong).
    PingPong { ping: PingCfg },
    /// Open loop on a schedule (echo mode, constantRate); latency from the intended send time.
    Paced {
        schedule: Arc<Schedule>,
        ping: PingCfg,
        per_message_flush: bool,
    },
    /// Subscribers count and time what their topics deliver; publishers (this process's
    /// share of wsload's, one per topic) publish on an open-loop schedule.
    Fanout(Arc<FanoutPlan>),
}

/// A fanout cell's part in this process. The cell's `connections` are its subscribers; its
/// publishers are dialed after them, numbered after every subscriber of the test.
#[derive(Debug)]
pub struct FanoutPlan {
    pub spec: FanoutSpec,
    /// Subscribers of the whole test (the tier).
    pub subscribers: u32,
    /// The topics this process's publishers publish to, in order (none when the server
    /// publishes).
    pub publishing: Vec<u32>,
    /// One topic's publish schedule, over warm-up and the measured window: each publisher's,
    /// phase-shifted by its topic.
    pub schedule: Schedule,
    /// How long subscribers read on after the measured window.
    pub drain: Duration,
    /// `connect.timeout`: how long the last dials may take (see cell.rs, `common_start`).
    pub connect_timeout: Duration,
}

impl FanoutPlan {
    /// Whether the server publishes (so the window's publishes are counted from what the
    /// subscribers saw).
    pub fn by_server(&self) -> bool {
        self.spec.publisher == Publisher::Server
    }

    /// The connection number of the publisher of `topic`: after every subscriber.
    pub fn publisher_conn(&self, topic: u32) -> u64 {
        u64::from(self.subscribers) + u64::from(topic)
    }
}

impl Behavior {
    /// Whether each message is timed by its answer (the conversation's `ping` is sent, if it
    /// has one) rather than counted (its measured message).
    pub fn times_each(&self) -> bool {
        matches!(
            self,
            Behavior::Hold { .. }
                | Behavior::Ping { .. }
                | Behavior::PingPong { .. }
                | Behavior::Paced { .. }
        )
    }

    /// Whether the cell lasts `duration` (else it ends when the work is done).
    pub fn is_timed(&self) -> bool {
        !matches!(self, Behavior::Close | Behavior::Ping { .. })
    }
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
pub struct Stage {
    /// How long the connect batches are spread over (the last batch's start).
    pub connect: Duration,
    pub warmup: Duration,
    /// `None`: the cell ends when its connections are done (a count of pings), not at a time.
    pub measured: Option<Duration>,
}

impl Stage {
    pub fn of(p: &Planned) -> Stage {
        let c = &p.cell;
        let batches = c.connections.div_ceil(c.batch_size.max(1));
        Stage {
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
