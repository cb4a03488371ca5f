//! The scenarios, and the one table that says what each is made of ([`Scenario::profile`]):
//! which cells a test runs, how every connection behaves once open, how long a cell lasts,
//! and what a cell measures (and so must have measured to pass). The parts that depend on the
//! scenario read the table rather than match on the scenario: the plan and the expected
//! duration, validation, the progress bar, the result's tables and the verdict. A new
//! scenario is a variant and a row; a new way for connections to behave is a [`Motion`] and
//! the load generator's loop for it (`loadgen-image/README.md`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Scenario {
    /// Open N connections in batches; accept rate and handshake latency.
    ConnectionStorm,
    /// N connections ping concurrently; round-trip percentiles, lost pings.
    PingLatency,
    /// N connections send as fast as possible; msg/s, bytes/s, server receipt.
    Throughput,
    /// Throughput for each payload size x connection tier.
    PayloadMatrix,
    /// Throughput of the same message as JSON, MsgPack and zlib.
    FormatComparison,
    /// Hold N connections with periodic pings; survival and ping percentiles.
    SustainedHold,
    /// Largest N held with errors under a bound: exponential probe, then binary search.
    ConnectionLimit,
    /// Echo perftest: one message in flight per connection (closed loop).
    Pingpong,
    /// Echo perftest: paced sender and separate reader; loss.
    Echo,
    /// Echo perftest: send only, never read.
    Blast,
    /// Open-loop constant rate with ramp stages; coordinated-omission-corrected latency.
    ConstantRate,
    /// Subscribers on topics, publishers (wsload's, or the server's own) on an open-loop
    /// schedule: deliveries, gaps, duplicates and latency from the intended publish instant.
    Fanout,
}

/// What a scenario is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    pub cells: Cells,
    pub motion: Motion,
    pub length: Length,
    pub measures: Measures,
}

/// Which cells a test of the scenario runs, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cells {
    /// One per connection tier (`connections`).
    Tiers,
    /// One per payload size x tier (`sizes`).
    SizesByTiers,
    /// One per wire format x tier (`formats`).
    FormatsByTiers,
    /// Probes decided as the test goes: exponential, then a binary search (`limit`).
    Search,
}

/// How every connection of a cell behaves once open: the load generator's behavior of the
/// same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Motion {
    /// Closes at once.
    Close,
    /// `ping.count` pings one after another, `ping.interval` apart.
    Pings,
    /// Writes as fast as it can, a window of answers in flight when the server answers.
    Saturate,
    /// Writes only, never reads.
    Blast,
    /// One message in flight, closed loop.
    PingPong,
    /// Held open, pinging every `ping.interval`.
    Hold,
    /// Held open without pings: a limit probe.
    Probe,
    /// Sends on an open-loop schedule (`rate`), each answer timed from its intended instant.
    Paced,
    /// Subscribes to topics and counts what they deliver; wsload's publishers publish on a
    /// schedule.
    Fanout,
}

impl Motion {
    /// Whether the connections sit idle but for a small frame now and then (opened and
    /// closed, or held): they leave Nagle on, one system call less each.
    pub fn mostly_idle(self) -> bool {
        matches!(self, Motion::Close | Motion::Hold | Motion::Probe)
    }

    /// Whether the connections read nothing larger than a pong: a small read buffer serves.
    pub fn reads_little(self) -> bool {
        self.mostly_idle() || self == Motion::Pings
    }
}

/// How long a cell lasts once its connections are open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// Nothing after the connect batches.
    Nothing,
    /// Until its pings are answered, the warm-up's first.
    Pings,
    /// `warmup`, then `duration`.
    Duration,
    /// `warmup`, then `duration` or the rate's stages; `required`: the spec must give a
    /// rate (else a default one paces it).
    Rate { required: bool },
    /// As [`Length::Rate`], then `fanout.drain` while subscribers read what is on its way.
    RateThenDrain,
    /// `limit.hold`, each probe.
    LimitHold,
}

impl Length {
    /// Whether the cell is measured over a window of time (so `duration` must be above zero
    /// unless stages give it).
    pub fn is_timed(self) -> bool {
        matches!(
            self,
            Length::Duration | Length::Rate { .. } | Length::RateThenDrain
        )
    }
}

/// What a cell measures: the figures its table shows, the thresholds that apply to it, and
/// what it must have measured to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measures {
    /// Connections opened: the accept rate and the handshake's latency.
    Connects,
    /// The most connections held: a search's outcome.
    Limit,
    /// Round trips one at a time: their latency and loss; with `survival`, the connections
    /// held through them.
    RoundTrips { survival: bool },
    /// Messages sent as fast as possible and their answers counted (not each timed).
    Echoes,
    /// Messages sent and never read back.
    Sends,
    /// Open-loop messages, each answer timed from its intended send instant.
    PacedRoundTrips,
    /// What topics deliver to their subscribers: deliveries, gaps, latency from the publish.
    Deliveries,
}

impl Measures {
    /// Whether answers are timed: round-trip latency exists.
    pub fn times_answers(self) -> bool {
        matches!(
            self,
            Measures::RoundTrips { .. } | Measures::Echoes | Measures::PacedRoundTrips
        )
    }

    /// Whether answers are awaited one by one, so an unanswered message counts as lost.
    pub fn counts_loss(self) -> bool {
        matches!(
            self,
            Measures::RoundTrips { .. } | Measures::PacedRoundTrips
        )
    }

    /// Whether messages flow (a rate of sent and received messages exists).
    pub fn moves_messages(self) -> bool {
        !matches!(self, Measures::Connects | Measures::Limit)
    }
}

impl Scenario {
    pub const ALL: [Scenario; 12] = [
        Scenario::ConnectionStorm,
        Scenario::PingLatency,
        Scenario::Throughput,
        Scenario::PayloadMatrix,
        Scenario::FormatComparison,
        Scenario::SustainedHold,
        Scenario::ConnectionLimit,
        Scenario::Pingpong,
        Scenario::Echo,
        Scenario::Blast,
        Scenario::ConstantRate,
        Scenario::Fanout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::ConnectionStorm => "connectionStorm",
            Scenario::PingLatency => "pingLatency",
            Scenario::Throughput => "throughput",
            Scenario::PayloadMatrix => "payloadMatrix",
            Scenario::FormatComparison => "formatComparison",
            Scenario::SustainedHold => "sustainedHold",
            Scenario::ConnectionLimit => "connectionLimit",
            Scenario::Pingpong => "pingpong",
            Scenario::Echo => "echo",
            Scenario::Blast => "blast",
            Scenario::ConstantRate => "constantRate",
            Scenario::Fanout => "fanout",
        }
    }

    /// What the scenario is made of: the one place that says it.
    pub fn profile(self) -> Profile {
        use {Cells as C, Length as L, Measures as M, Motion as B};
        let (cells, motion, length, measures) = match self {
            Scenario::ConnectionStorm => (C::Tiers, B::Close, L::Nothing, M::Connects),
            Scenario::PingLatency => (
                C::Tiers,
                B::Pings,
                L::Pings,
                M::RoundTrips { survival: false },
            ),
            Scenario::Throughput => (C::Tiers, B::Saturate, L::Duration, M::Echoes),
            Scenario::PayloadMatrix => (C::SizesByTiers, B::Saturate, L::Duration, M::Echoes),
            Scenario::FormatComparison => (C::FormatsByTiers, B::Saturate, L::Duration, M::Echoes),
            Scenario::SustainedHold => (
                C::Tiers,
                B::Hold,
                L::Duration,
                M::RoundTrips { survival: true },
            ),
            Scenario::ConnectionLimit => (C::Search, B::Probe, L::LimitHold, M::Limit),
            Scenario::Pingpong => (
                C::Tiers,
                B::PingPong,
                L::Duration,
                M::RoundTrips { survival: false },
            ),
            Scenario::Echo => (
                C::Tiers,
                B::Paced,
                L::Rate { required: false },
                M::PacedRoundTrips,
            ),
            Scenario::ConstantRate => (
                C::Tiers,
                B::Paced,
                L::Rate { required: true },
                M::PacedRoundTrips,
            ),
            Scenario::Blast => (C::Tiers, B::Blast, L::Duration, M::Sends),
            Scenario::Fanout => (C::Tiers, B::Fanout, L::RateThenDrain, M::Deliveries),
        };
        Profile {
            cells,
            motion,
            length,
            measures,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scenario is in ALL once, and reads back from its name.
    #[test]
    fn every_scenario_is_listed_once_under_its_name() {
        let names: std::collections::BTreeSet<&str> =
            Scenario::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(names.len(), Scenario::ALL.len());
        for s in Scenario::ALL {
            let back: Scenario =
                serde_json::from_value(serde_json::json!(s.as_str())).expect("its name reads");
            assert_eq!(back, s);
        }
    }

    /// The rows agree with each other: a search probes by holding, a window of time is what
    /// measures sends, a fanout delivers.
    #[test]
    fn the_rows_agree_with_each_other() {
        for s in Scenario::ALL {
            let p = s.profile();
            assert_eq!(p.cells == Cells::Search, p.motion == Motion::Probe, "{s:?}");
            assert_eq!(
                p.motion == Motion::Fanout,
                p.measures == Measures::Deliveries
            );
            if matches!(p.measures, Measures::Echoes | Measures::Sends) {
                assert!(p.length.is_timed(), "{s:?}");
            }
            if p.measures.counts_loss() {
                assert!(p.measures.times_answers(), "{s:?}");
            }
        }
    }
}
