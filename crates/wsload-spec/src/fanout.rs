//! The fanout scenario's shape: topics, how subscribers spread over them, who publishes, and
//! how long deliveries may still arrive after the measured window. How a subscription and a
//! delivery look on the wire is the conversation's (`subscribe`, `delivery`).

use crate::units::Dur;
/// The unit of a delivery's publish instant, a unit among the others; named here too, where
/// the load generator has always imported it from.
pub use crate::units::TimeUnit;
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
