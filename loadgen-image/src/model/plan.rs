//! Turns a spec into the cells this process runs: one per tier, per size x tier, per
//! format x tier, with this shard's share of connections and rate, and the conversation each
//! holds, compiled once per run ([`Plan`]).

use super::behavior::{Behavior, FanoutPlan, PingCfg};
use super::cell::{Cell, Planned, Shard};
use super::schedule::Schedule;
use crate::conversation::{Encoding, Script, ScriptError};
use std::sync::Arc;
use std::time::Duration;
use wsload_control::{CellKey, sequence};
use wsload_spec::fanout::Publisher;
use wsload_spec::scenario::{Length, Motion};
use wsload_spec::shares::{count_offset, count_share, rate_share};
use wsload_spec::{FlushMode, Format, LoadTestSpec, Protocol, RateSpec, ServerProfile, builtin};

/// Per-connection pace of the echo mode when the spec gives no rate.
pub const DEFAULT_ECHO_RATE_PER_CONN: f64 = 100.0;
/// Publishes per second to each topic when a fanout gives no rate (the managed server's
/// ticker's too).
pub const DEFAULT_FANOUT_RATE_PER_TOPIC: f64 = wsload_spec::fanout::DEFAULT_RATE_PER_TOPIC;
/// Ping interval of sustainedHold when the spec gives none (the seed's).
pub const DEFAULT_HOLD_PING: Duration = Duration::from_secs(5);

/// Whether the server answers every measured message (so throughput keeps a window of
/// answers): whether the conversation's measured message, the LoadTest's or its protocol's,
/// has an answer rule; but a managed server whose profile only receives or pushes (`sink`,
/// `broadcast`) never answers the echo conversation's.
pub fn server_echoes(spec: &LoadTestSpec) -> bool {
    let own = spec.conversation.as_ref().and_then(|c| c.message.as_ref());
    if let Some(m) = own {
        return m.answer.is_some();
    }
    let echoing = match (spec.protocol, &spec.target.server) {
        (Protocol::Echo, Some(s)) => s.profile == ServerProfile::Echo,
        _ => true,
    };
    echoing
        && builtin::conversation(spec.protocol)
            .ok()
            .and_then(|c| c.message)
            .is_some_and(|m| m.answer.is_some())
}

pub fn ping_cfg(spec: &LoadTestSpec) -> PingCfg {
    PingCfg {
        kind: spec.ping.kind,
        timeout: spec.ping.timeout.get(),
    }
}

/// The warm-up before a measured window of `duration`: none when nothing is measured by time.
fn warmup(spec: &LoadTestSpec, duration: Duration) -> Duration {
    if duration.is_zero() {
        Duration::ZERO
    } else {
        spec.warmup.get()
    }
}

/// An open-loop cell's sends: its schedule from the end of the warm-up, how long it runs, and
/// the whole test's target rate.
struct OpenLoop {
    schedule: Schedule,
    duration: Duration,
    target_rate: f64,
}

/// The schedule of `senders` sending `share` of the spec's rate, or `default_rate` over them
/// when the spec has none (then the test's target is `default_target`).
fn open_loop(
    spec: &LoadTestSpec,
    share: f64,
    senders: u32,
    duration: Duration,
    default_rate: f64,
    default_target: f64,
) -> OpenLoop {
    let (schedule, total) = match &spec.rate {
        Some(rate) => Schedule::from_spec(rate, share, senders, duration),
        None => (
            Schedule::constant(default_rate, senders, duration),
            duration,
        ),
    };
    let target_rate = spec
        .rate
        .as_ref()
        .and_then(RateSpec::target)
        .unwrap_or(default_target);
    OpenLoop {
        schedule: schedule.after_warmup(warmup(spec, total)),
        duration: total,
        target_rate,
    }
}

/// Why a spec's conversation does not compile (`wsload validate` refuses these first, with
/// the same causes; here they only guard a spec that skipped validation).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The protocol's built-in conversation, merged with the LoadTest's own, does not parse.
    #[error(transparent)]
    Builtin(#[from] wsload_spec::yaml::ParseError),
    #[error(transparent)]
    Script(#[from] ScriptError),
}

/// A run's plan in this process: the spec, this process's place among the shards, and the
/// conversation compiled once (the LoadTest's own, or its protocol's built-in one, alike):
/// every cell this process runs is made from it.
#[derive(Debug, Clone)]
pub struct Plan {
    spec: LoadTestSpec,
    shard: Shard,
    script: Script,
}

impl Plan {
    pub fn new(spec: &LoadTestSpec, shard: Shard) -> Result<Plan, PlanError> {
        let conversation =
            builtin::effective(spec.conversation.as_ref(), spec.protocol, spec.scenario)?;
        let mut script = Script::compile(&conversation)?;
        // The steps on open pad to the spec's message size, whatever a cell's size is.
        script.open_size = spec.message.size as usize;
        Ok(Plan {
            spec: spec.clone(),
            shard,
            script,
        })
    }

    pub fn spec(&self) -> &LoadTestSpec {
        &self.spec
    }

    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// The cell the conductor named, this shard's share of it.
    pub fn keyed(&self, key: &CellKey) -> Planned {
        self.cell(key.label.clone(), key.connections, key.size, key.format)
    }

    /// Every planned cell of the spec, in run order (connectionLimit's probes are decided as
    /// it goes, by the conductor).
    pub fn cells(&self) -> Vec<Planned> {
        sequence::planned(&self.spec)
            .iter()
            .map(|k| self.keyed(k))
            .collect()
    }

    /// A connectionLimit probe's cell, at the search's first count: every probe's course is
    /// alike but for its count.
    pub fn probe(&self) -> Planned {
        let spec = &self.spec;
        self.cell(
            String::new(),
            spec.limit.start,
            spec.message.size,
            spec.message.format,
        )
    }

    /// One cell of `connections` (whole test) with `size` and `format`, holding the
    /// conversation in its format and size.
    fn cell(&self, label: String, connections: u32, size: u32, format: Format) -> Planned {
        let shape = Shape {
            label,
            connections,
            size,
            format,
        };
        cell(&self.spec, self.shard, shape, &self.script)
    }
}

/// What tells one cell of a test from another.
struct Shape {
    label: String,
    /// Of the whole test.
    connections: u32,
    size: u32,
    format: Format,
}

/// The cell `shape` of `spec`, this shard's share, holding `script` in its format and size.
fn cell(spec: &LoadTestSpec, shard: Shard, shape: Shape, script: &Script) -> Planned {
    let Shape {
        label,
        connections,
        size,
        format,
    } = shape;
    let mine = count_share(connections, shard.index, shard.count);
    let first = u64::from(count_offset(connections, shard.index, shard.count));
    let per_message_flush = spec.flush == FlushMode::PerMessage;
    let ping = ping_cfg(spec);
    let profile = spec.scenario.profile();
    // How long the cell lasts once open, unless its rate decides (below).
    let mut duration = match profile.length {
        Length::Nothing => Duration::ZERO,
        Length::LimitHold => spec.limit.hold.get(),
        Length::Pings | Length::Duration | Length::Rate { .. } | Length::RateThenDrain => {
            spec.duration.get()
        }
    };
    let mut target_rate = 0.0;
    let share = rate_share(1.0, shard.count);
    let behavior = match profile.motion {
        Motion::Close => Behavior::Close,
        Motion::Pings => Behavior::Ping {
            count: spec.ping.count,
            interval: spec.ping.interval.map_or(Duration::ZERO, |d| d.get()),
            ping,
        },
        Motion::Saturate => Behavior::Saturate {
            window: server_echoes(spec).then_some(spec.window),
            per_message_flush,
        },
        Motion::Hold => Behavior::Hold {
            every: Some(spec.ping.interval.map_or(DEFAULT_HOLD_PING, |d| d.get())),
            ping,
        },
        Motion::Probe => Behavior::Hold { every: None, ping },
        Motion::PingPong => Behavior::PingPong { ping },
        Motion::Blast => Behavior::Blast { per_message_flush },
        Motion::Paced => {
            let paced = open_loop(
                spec,
                share,
                mine,
                duration,
                DEFAULT_ECHO_RATE_PER_CONN * f64::from(mine),
                DEFAULT_ECHO_RATE_PER_CONN * f64::from(connections),
            );
            duration = paced.duration;
            target_rate = paced.target_rate;
            Behavior::Paced {
                schedule: Arc::new(paced.schedule),
                ping,
                per_message_flush,
            }
        }
        Motion::Fanout => {
            let f = &spec.fanout;
            let topics = f.topics.max(1);
            // One topic's schedule: the whole rate over the topics, as if each were a
            // connection of a paced cell.
            let default = DEFAULT_FANOUT_RATE_PER_TOPIC * f64::from(topics);
            let paced = open_loop(spec, 1.0, topics, duration, default, default);
            duration = paced.duration;
            target_rate = paced.target_rate;
            let publishing = if f.publisher == Publisher::Wsload {
                (0..topics)
                    .filter(|t| t % shard.count == shard.index)
                    .collect()
            } else {
                Vec::new()
            };
            Behavior::Fanout(Arc::new(FanoutPlan {
                spec: f.clone(),
                subscribers: connections,
                publishing,
                schedule: paced.schedule,
                drain: f.drain.get(),
                connect_timeout: spec.connect.timeout.get(),
            }))
        }
    };
    let encoding = Encoding::of(format, spec.message.compression_level);
    Planned {
        cell: Cell {
            label,
            connections: mine,
            first,
            batch_size: spec.connect.batch_size,
            batch_interval: spec.connect.batch_interval.get(),
            encoding,
            size: size as usize,
            warmup: warmup(spec, duration),
            duration,
            write_timeout: spec.write_timeout.get(),
            script: Arc::new(script.for_cell(behavior.times_each(), encoding, size as usize)),
            behavior,
            comeback: super::comeback::Comeback::of(spec).map(Arc::new),
        },
        total_connections: connections,
        size,
        format,
        target_rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_spec::fixtures::spec;

    fn plan(spec: &LoadTestSpec, shard: Shard) -> Vec<Planned> {
        Plan::new(spec, shard).expect("compiles").cells()
    }

    #[test]
    fn shards_split_connections_and_rate() {
        let s = spec(
            "  target: {server: {}}\n  scenario: constantRate\n  connections: [10]\n  rate: {messagesPerSecond: 1000}\n  shards: 3\n",
        );
        let parts: Vec<Planned> = (0..3)
            .map(|i| plan(&s, Shard { index: i, count: 3 }).remove(0))
            .collect();
        assert_eq!(
            parts.iter().map(|p| p.cell.connections).collect::<Vec<_>>(),
            vec![4, 3, 3]
        );
        assert_eq!(
            parts.iter().map(|p| p.cell.first).collect::<Vec<_>>(),
            vec![0, 4, 7]
        );
        assert!(
            parts
                .iter()
                .all(|p| p.target_rate == 1000.0 && p.total_connections == 10)
        );
        let Behavior::Paced { schedule, .. } = &parts[0].cell.behavior else {
            panic!("paced")
        };
        // 1000/s over 3 shards, 4 connections in shard 0: 83.3/s each.
        assert!((schedule.rate_at(0.1) - 1000.0 / 3.0 / 4.0).abs() < 1e-9);
    }

    #[test]
    fn matrix_and_formats_expand() {
        let s = spec(
            "  target: {server: {}}\n  scenario: payloadMatrix\n  connections: [10, 20]\n  sizes: [64, 1024]\n",
        );
        let labels: Vec<String> = plan(&s, Shard::WHOLE)
            .into_iter()
            .map(|p| p.cell.label)
            .collect();
        assert_eq!(
            labels,
            ["64 B x 10", "64 B x 20", "1 KiB x 10", "1 KiB x 20"]
        );
        let s = spec("  target: {server: {}}\n  scenario: formatComparison\n");
        let labels: Vec<String> = plan(&s, Shard::WHOLE)
            .into_iter()
            .map(|p| p.cell.label)
            .collect();
        assert_eq!(labels, ["json x 100", "msgpack x 100", "zlib x 100"]);
    }

    #[test]
    fn a_measured_message_keeps_a_window_only_if_something_answers_it() {
        let base = "  target: {url: 'ws://127.0.0.1:1/'}\n  scenario: throughput\n  conversation:\n    message:\n      text: '{\"id\":${seq}}'\n";
        assert!(matches!(
            plan(&spec(base), Shard::WHOLE)[0].cell.behavior,
            Behavior::Saturate { window: None, .. }
        ));
        let answered = format!("{base}      answer: {{id: {{json: id}}}}\n");
        assert!(matches!(
            plan(&spec(&answered), Shard::WHOLE)[0].cell.behavior,
            Behavior::Saturate {
                window: Some(64),
                ..
            }
        ));
    }

    #[test]
    fn echo_window_only_against_echoing_servers() {
        let s = spec("  target: {server: {profile: sink}}\n  scenario: throughput\n");
        assert!(matches!(
            plan(&s, Shard::WHOLE)[0].cell.behavior,
            Behavior::Saturate { window: None, .. }
        ));
        let s = spec("  target: {server: {}}\n  scenario: throughput\n  window: 8\n");
        assert!(matches!(
            plan(&s, Shard::WHOLE)[0].cell.behavior,
            Behavior::Saturate {
                window: Some(8),
                ..
            }
        ));
    }
}
