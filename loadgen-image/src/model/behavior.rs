//! How every connection of a cell behaves once open, as data: what a scenario's connections
//! do ([`Behavior`]), with what they need to do it. The loop each one runs is in
//! crate::behavior, one file per variant.

use super::schedule::Schedule;
use std::sync::Arc;
use std::time::Duration;
use wsload_spec::PingKind;
use wsload_spec::fanout::{FanoutSpec, Publisher};

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
    /// `connect.timeout`: how long the last dials may take (see cell/start_line.rs, `common_start`).
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
