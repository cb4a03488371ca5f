//! A fanout cell's figures, derived from its tallies ([`crate::fanout::Fanout`]) and its
//! delivery latencies: what the tables, findings, thresholds and the LoadTest status read.

use crate::fanout::{Fanout, SubscriberTally};
use crate::hist::Hist;
use crate::percentiles::Percentiles;
use serde::{Deserialize, Serialize};

/// Deliveries, what was missing from them and how long they took, over a cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FanoutFigures {
    /// Distinct deliveries per measured second, over subscribers.
    pub deliveries_per_sec: f64,
    /// Deliveries the subscribers read per measured second, whenever published: what they
    /// took in, kept up or not.
    pub read_per_sec: f64,
    /// Deliveries per second the publishers' pace owed the subscribers, from the numbers and
    /// instants the deliveries carry (each topic's pace times its subscribers); unset
    /// without timed deliveries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owed_per_sec: Option<f64>,
    /// Publishes of the window per measured second, over topics.
    pub publishes_per_sec: f64,
    /// Topics that had a subscriber or a publish.
    pub topics: u64,
    pub publishes: u64,
    /// Subscriber-topic pairs.
    pub subscriptions: u64,
    /// Each topic's publishes times its subscribers.
    pub expected: u64,
    pub delivered: u64,
    /// Expected deliveries never received in time.
    pub gaps: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Received too far below a subscriber's highest number to be told apart.
    pub too_late: u64,
    /// Delivered over expected, 0..1; unset when nothing was expected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completeness: Option<f64>,
    /// From each delivery's intended publish instant to its receipt, seconds.
    pub latency: Percentiles,
    /// The subscribers that received least, worst first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slowest: Vec<SlowSubscriber>,
}

/// One of the slowest subscribers of a cell, on one of its topics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SlowSubscriber {
    /// The connection's number over all shards.
    pub conn: u64,
    pub topic: u32,
    pub delivered: u64,
    /// The topic's publishes it did not receive.
    pub gaps: u64,
    /// Its slowest delivery, microseconds (0: untimed).
    pub max_latency_us: u64,
}

impl FanoutFigures {
    /// The figures of tallies `f` and latencies `latency` over `measured_secs`.
    pub fn of(f: &Fanout, latency: &Hist, measured_secs: f64) -> FanoutFigures {
        let t = f.totals(f.by_server);
        let per = |n: u64| {
            if measured_secs > 0.0 {
                n as f64 / measured_secs
            } else {
                0.0
            }
        };
        let topics = f
            .topics
            .iter()
            .filter(|t| t.subscribers > 0 || t.publishes(f.by_server) > 0)
            .count() as u64;
        let owed = f
            .topics
            .iter()
            .filter_map(|t| Some(t.publish_pace()? * t.subscribers as f64))
            .fold(None, |sum: Option<f64>, o| Some(sum.unwrap_or(0.0) + o));
        FanoutFigures {
            deliveries_per_sec: per(t.delivered),
            read_per_sec: per(f.read_in_window),
            owed_per_sec: owed,
            publishes_per_sec: per(t.publishes),
            topics,
            publishes: t.publishes,
            subscriptions: t.subscriptions,
            expected: t.expected,
            delivered: t.delivered,
            gaps: t.missing,
            duplicates: t.duplicates,
            out_of_order: t.out_of_order,
            too_late: t.too_late,
            completeness: t.completeness(),
            latency: Percentiles::of(latency),
            slowest: f.slowest.iter().map(|s| slow(f, s)).collect(),
        }
    }
}

/// A slow subscriber's gaps: its topic's publishes less what it received of them.
fn slow(f: &Fanout, s: &SubscriberTally) -> SlowSubscriber {
    let publishes = f
        .topics
        .get(s.topic as usize)
        .map_or(0, |t| t.publishes(f.by_server));
    SlowSubscriber {
        conn: s.conn,
        topic: s.topic,
        delivered: s.delivered,
        gaps: publishes.saturating_sub(s.delivered),
        max_latency_us: s.max_latency_us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fanout::TopicTally;
    use std::time::Duration;

    #[test]
    fn figures_count_every_topics_publishes_times_its_subscribers() {
        let f = Fanout {
            topics: vec![
                TopicTally {
                    subscribers: 3,
                    published: 100,
                    first_seq: 1,
                    last_seq: 100,
                    delivered: 298,
                    duplicates: 1,
                    out_of_order: 2,
                    ..TopicTally::default()
                },
                TopicTally {
                    subscribers: 2,
                    published: 100,
                    first_seq: 1,
                    last_seq: 100,
                    delivered: 200,
                    ..TopicTally::default()
                },
                TopicTally::default(),
            ],
            slowest: vec![SubscriberTally {
                conn: 7,
                topic: 0,
                delivered: 98,
                max_latency_us: 9_000,
            }],
            ..Fanout::default()
        };
        let mut h = Hist::default();
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        let fig = FanoutFigures::of(&f, &h, 10.0);
        assert_eq!((fig.topics, fig.publishes, fig.subscriptions), (2, 200, 5));
        assert_eq!((fig.expected, fig.delivered, fig.gaps), (500, 498, 2));
        assert_eq!((fig.duplicates, fig.out_of_order, fig.too_late), (1, 2, 0));
        assert_eq!(fig.completeness, Some(0.996));
        assert_eq!(
            (fig.deliveries_per_sec, fig.publishes_per_sec),
            (49.8, 20.0)
        );
        assert_eq!(fig.latency.count, 100);
        assert!((fig.latency.p50 - 0.050).abs() < 0.001, "{:?}", fig.latency);
        assert_eq!(
            fig.slowest,
            vec![SlowSubscriber {
                conn: 7,
                topic: 0,
                delivered: 98,
                gaps: 2,
                max_latency_us: 9_000
            }]
        );
    }

    #[test]
    fn the_servers_publishes_are_the_span_the_subscribers_saw() {
        let f = Fanout {
            topics: vec![TopicTally {
                subscribers: 2,
                first_seq: 11,
                last_seq: 20,
                delivered: 19,
                ..TopicTally::default()
            }],
            by_server: true,
            ..Fanout::default()
        };
        let fig = FanoutFigures::of(&f, &Hist::default(), 0.0);
        assert_eq!((fig.publishes, fig.expected, fig.gaps), (10, 20, 1));
        assert_eq!(fig.deliveries_per_sec, 0.0, "no measured time, no rate");
        assert_eq!(fig.latency.count, 0);
    }
}
