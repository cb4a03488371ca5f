//! The fanout scenario's shape: topics, how subscribers spread over them, who publishes, and
//! how long deliveries may still arrive after the measured window. How a subscription and a
//! delivery look on the wire is the conversation's (`subscribe`, `delivery`).

use crate::spec::{LoadTestSpec, ManagedServer, Scenario};
use crate::units::Dur;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most topics a fanout may have: a result keeps a tally per topic, and each shard sends its
/// tallies to the conductor (~60 bytes each).
pub const MAX_TOPICS: u32 = 100_000;
/// Most topics one subscriber subscribes to.
pub const MAX_TOPICS_PER_SUBSCRIBER: u32 = 64;
/// Publishes per second to each topic when a fanout gives no rate.
pub const DEFAULT_RATE_PER_TOPIC: f64 = 10.0;
/// The topic prefix of wsload-server's ticker (`t0`, `t1`, ...).
pub const TICKER_PREFIX: &str = "t";
/// The ticker's flags: set one in `target.server.args` and wsload leaves the ticker to you.
const TICKER_TOPICS_FLAG: &str = "--ticker-topics";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FanoutSpec {
    /// Topics `${topicPrefix}0` .. `${topicPrefix}N-1`.
    #[serde(default = "default_topics")]
    #[schemars(range(min = 1, max = MAX_TOPICS))]
    pub topics: u32,
    /// Topics each subscriber subscribes to. Subscriber `n` (over all shards) takes topics
    /// `(n x k + j) mod topics` for `j` in `0..k`: round robin, so every topic has the same
    /// number of subscribers, give or take one.
    #[serde(default = "default_per_subscriber")]
    #[schemars(range(min = 1, max = MAX_TOPICS_PER_SUBSCRIBER))]
    pub topics_per_subscriber: u32,
    /// What topic names start with (`t`: `t0`, `t1`, ...; the reference server's ticker's).
    #[serde(default = "default_prefix")]
    #[schemars(length(min = 1, max = 64))]
    pub topic_prefix: String,
    /// Who publishes: `wsload` (one publisher connection per topic, open loop at `rate`, each
    /// message carrying its topic's `${seq}` and its intended instant as `${sendTime}`) or
    /// `server` (the server pushes on its own, such as wsload-server's ticker).
    #[serde(default)]
    pub publisher: Publisher,
    /// How long subscribers keep reading after the measured window for what was published in
    /// it: later than this, a delivery is missing.
    #[serde(default = "default_drain")]
    pub drain: Dur,
}

impl Default for FanoutSpec {
    fn default() -> Self {
        FanoutSpec {
            topics: default_topics(),
            topics_per_subscriber: default_per_subscriber(),
            topic_prefix: default_prefix(),
            publisher: Publisher::default(),
            drain: default_drain(),
        }
    }
}

impl FanoutSpec {
    /// The topics subscriber `n` (over all shards) subscribes to, by index.
    pub fn topics_of(&self, n: u64) -> impl Iterator<Item = u32> + '_ {
        let (t, k) = (
            u64::from(self.topics.max(1)),
            u64::from(self.topics_per_subscriber),
        );
        let k = k.min(t);
        (0..k).map(move |j| ((n.wrapping_mul(k) + j) % t) as u32)
    }

    /// Topic `i`'s name.
    pub fn topic_name(&self, i: u32) -> String {
        format!("{}{i}", self.topic_prefix)
    }

    /// The topic index a name stands for, if it is one of this fanout's.
    pub fn topic_index(&self, name: &[u8]) -> Option<u32> {
        let digits = name.strip_prefix(self.topic_prefix.as_bytes())?;
        let i = crate::decimal::parse_u64(digits)?;
        u32::try_from(i).ok().filter(|i| *i < self.topics)
    }
}

/// Whether the managed server runs its ticker for this fanout: `publisher: server` against
/// `target.server`, unless the server's args or env already start a ticker of their own.
pub fn managed_ticker(spec: &LoadTestSpec) -> Option<&ManagedServer> {
    let server = spec.target.server.as_ref()?;
    let own = server.args.iter().any(|a| {
        a == TICKER_TOPICS_FLAG
            || a.strip_prefix(TICKER_TOPICS_FLAG)
                .is_some_and(|rest| rest.starts_with('='))
    }) || server
        .env
        .iter()
        .any(|e| e.name == wsload_contract::env::SERVER_TICKER_TOPICS);
    (spec.scenario == Scenario::Fanout && spec.fanout.publisher == Publisher::Server && !own)
        .then_some(server)
}

/// The arguments that start a managed wsload-server's ticker over the fanout's topics (empty
/// when it runs none, see [`managed_ticker`]): `rate` spread evenly over the topics (its last
/// stage's target when it ramps: the ticker has one rate), `message.size` bytes of padding.
/// Every place a managed server starts (one machine, a cluster) passes these before the
/// user's `target.server.args`.
pub fn ticker_args(spec: &LoadTestSpec) -> Vec<String> {
    if managed_ticker(spec).is_none() {
        return Vec::new();
    }
    let topics = spec.fanout.topics.max(1);
    let per_topic = spec
        .rate
        .as_ref()
        .and_then(|r| {
            r.messages_per_second
                .or_else(|| r.stages.last().map(|s| s.target))
        })
        .map_or(DEFAULT_RATE_PER_TOPIC, |total| total / f64::from(topics));
    vec![
        TICKER_TOPICS_FLAG.to_string(),
        topics.to_string(),
        "--ticker-rate".to_string(),
        per_topic.to_string(),
        "--ticker-payload-size".to_string(),
        spec.message.size.to_string(),
    ]
}

/// The reference server's topic counters over a cell (`wsload_server_topic_*_total`), to
/// reconcile with what the subscribers received: a server that says it delivered and a client
/// that did not receive are told apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerTopics {
    /// Publishes, by clients and by the ticker.
    pub published: u64,
    /// Subscribers at each publish, summed: what the server owed.
    pub fanout: u64,
    /// Deliveries written to a subscriber's socket.
    pub delivered: u64,
    /// Deliveries dropped because a subscriber's queue was full, or its connection closed.
    pub dropped_slow_consumer: u64,
    pub dropped_closed: u64,
}

/// Who publishes to the topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Publisher {
    /// wsload's publisher connections, one per topic, on an open-loop schedule.
    #[default]
    Wsload,
    /// The server itself (wsload-server's `--ticker-*`, a market-data feed).
    Server,
}

/// The unit of a delivery's publish instant (since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TimeUnit {
    S,
    Ms,
    #[default]
    Us,
    Ns,
}

impl TimeUnit {
    /// `value` of this unit, in microseconds.
    pub fn to_micros(self, value: u64) -> u64 {
        match self {
            TimeUnit::S => value.saturating_mul(1_000_000),
            TimeUnit::Ms => value.saturating_mul(1000),
            TimeUnit::Us => value,
            TimeUnit::Ns => value / 1000,
        }
    }
}

fn default_topics() -> u32 {
    1
}
fn default_per_subscriber() -> u32 {
    1
}
fn default_prefix() -> String {
    "t".into()
}
fn default_drain() -> Dur {
    Dur::secs(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribers_spread_round_robin() {
        let f = FanoutSpec {
            topics: 4,
            topics_per_subscriber: 2,
            ..FanoutSpec::default()
        };
        let of = |n| f.topics_of(n).collect::<Vec<_>>();
        assert_eq!((of(0), of(1), of(2)), (vec![0, 1], vec![2, 3], vec![0, 1]));
        let mut per_topic = [0u32; 4];
        for n in 0..10 {
            for t in f.topics_of(n) {
                per_topic[t as usize] += 1;
            }
        }
        assert_eq!(per_topic, [5, 5, 5, 5]);
        assert_eq!(f.topic_index(b"t3"), Some(3));
        assert_eq!(f.topic_index(b"t4"), None);
        assert_eq!(f.topic_index(b"x1"), None);
        assert_eq!(f.topic_name(2), "t2");
    }

    fn spec(body: &str) -> LoadTestSpec {
        crate::yaml::parse(body).expect("spec")
    }

    #[test]
    fn a_managed_server_ticks_the_fanouts_topics_at_its_rate() {
        let s = spec(
            "target: {server: {profile: pubsub}}\nscenario: fanout\nfanout: {topics: 4, publisher: server}\nrate: {messagesPerSecond: 200}\nmessage: {size: 32}\n",
        );
        assert_eq!(
            ticker_args(&s),
            [
                "--ticker-topics",
                "4",
                "--ticker-rate",
                "50",
                "--ticker-payload-size",
                "32"
            ]
        );
        // No rate: the default per topic; a ramp: its last target.
        let s = spec(
            "target: {server: {profile: pubsub}}\nscenario: fanout\nfanout: {topics: 3, publisher: server}\n",
        );
        assert_eq!(ticker_args(&s)[3], "10");
        let s = spec(
            "target: {server: {profile: pubsub}}\nscenario: fanout\nfanout: {topics: 2, publisher: server}\nrate: {stages: [{duration: 1s, target: 10}, {duration: 1s, target: 5}]}\n",
        );
        assert_eq!(ticker_args(&s)[3], "2.5");
    }

    #[test]
    fn no_ticker_for_wsloads_publishers_an_external_server_or_the_users_own() {
        for body in [
            "target: {server: {profile: pubsub}}\nscenario: fanout\n",
            "target: {url: 'ws://127.0.0.1:1/'}\nscenario: fanout\nfanout: {publisher: server}\n",
            "target: {server: {profile: pubsub, args: [--ticker-topics, '2']}}\nscenario: fanout\nfanout: {publisher: server}\n",
            "target: {server: {profile: pubsub, args: ['--ticker-topics=2']}}\nscenario: fanout\nfanout: {publisher: server}\n",
            "target: {server: {profile: pubsub, env: [{name: WSLOAD_SERVER_TICKER_TOPICS, value: '2'}]}}\nscenario: fanout\nfanout: {publisher: server}\n",
            "target: {server: {profile: pubsub}}\nscenario: echo\n",
        ] {
            assert_eq!(ticker_args(&spec(body)), Vec::<String>::new(), "{body}");
        }
    }

    #[test]
    fn more_topics_per_subscriber_than_topics_is_all_of_them() {
        let f = FanoutSpec {
            topics: 2,
            topics_per_subscriber: 5,
            ..FanoutSpec::default()
        };
        assert_eq!(f.topics_of(7).collect::<Vec<_>>(), vec![0, 1]);
    }
}
