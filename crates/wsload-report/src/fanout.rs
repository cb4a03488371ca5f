//! What one subscriber received of one topic's sequence, and the sum over many: deliveries,
//! gaps (sequence numbers never received), duplicates and out-of-order arrivals. A subscriber's
//! [`Sequence`] lives in its connection's task (no lock, no allocation per delivery); the
//! [`Deliveries`] of all of them add up exactly, per cell and across shards, as the other counts
//! do.
//!
//! A subscriber that joins a running stream starts at the first number it receives: what was
//! published before it subscribed is not a gap. What was published after its last receipt is,
//! once the topic's last number is known ([`Sequence::finish`]).

use serde::{Deserialize, Serialize};

/// How far below the highest number received a late arrival is still told apart from a
/// duplicate: a bitmap of this many numbers per subscriber and topic (64 bytes).
pub const WINDOW: u64 = 512;
const WORDS: usize = (WINDOW / 64) as usize;

/// What a subscriber received of a topic, summed over subscribers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deliveries {
    /// Subscriber-topic pairs that received anything.
    pub streams: u64,
    /// Distinct sequence numbers received.
    pub delivered: u64,
    /// Numbers received again.
    pub duplicates: u64,
    /// Numbers received after a higher one (they filled a gap).
    pub out_of_order: u64,
    /// Numbers between a subscriber's first and the topic's last never received.
    pub missing: u64,
    /// Numbers received more than [`WINDOW`] below the highest one: neither a duplicate nor a
    /// filled gap can be told, so they are not credited (their gap stays counted).
    pub too_late: u64,
}

impl Deliveries {
    pub fn add(&mut self, other: &Deliveries) {
        self.streams += other.streams;
        self.delivered += other.delivered;
        self.duplicates += other.duplicates;
        self.out_of_order += other.out_of_order;
        self.missing += other.missing;
        self.too_late += other.too_late;
    }

    /// What the subscribers should have received: every number from each one's first to the
    /// topic's last.
    pub fn expected(&self) -> u64 {
        self.delivered + self.missing
    }

    /// Received over expected; `None` when nothing was expected.
    pub fn completeness(&self) -> Option<f64> {
        let expected = self.expected();
        (expected > 0).then(|| self.delivered as f64 / expected as f64)
    }
}

/// How one arrival counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next number, or one past a gap.
    New,
    /// A number below the highest, not received before: it fills a gap.
    Late,
    /// Received before.
    Duplicate,
    /// Too far below the highest to tell (see [`Deliveries::too_late`]).
    TooLate,
}

/// One subscriber's view of one topic's sequence.
#[derive(Debug, Clone, Default)]
pub struct Sequence {
    /// The highest number received; meaningful once `counts.streams` is 1.
    high: u64,
    /// Bit `i` (word `i / 64`, bit `i % 64`): `high - i` was received.
    seen: [u64; WORDS],
    counts: Deliveries,
}

impl Sequence {
    /// Counts the arrival of number `seq`.
    pub fn record(&mut self, seq: u64) -> Arrival {
        let c = &mut self.counts;
        if c.streams == 0 {
            c.streams = 1;
            c.delivered = 1;
            self.high = seq;
            self.seen = [0; WORDS];
            self.seen[0] = 1;
            return Arrival::New;
        }
        if seq > self.high {
            let ahead = seq - self.high;
            c.missing += ahead - 1;
            c.delivered += 1;
            self.advance(ahead);
            self.high = seq;
            self.seen[0] |= 1;
            return Arrival::New;
        }
        let behind = self.high - seq;
        if behind >= WINDOW {
            c.too_late += 1;
            return Arrival::TooLate;
        }
        let (word, bit) = ((behind / 64) as usize, behind % 64);
        if self.seen[word] & (1 << bit) != 0 {
            c.duplicates += 1;
            return Arrival::Duplicate;
        }
        self.seen[word] |= 1 << bit;
        // Every number from the lowest received to `high` was counted received or missing, so
        // the lowest lies `span` below `high`. Inside that, the arrival fills a gap; below it,
        // the stream starts earlier than seen so far, and what lies between is a gap.
        let span = c.delivered - 1 + c.missing;
        c.delivered += 1;
        c.out_of_order += 1;
        if behind > span {
            c.missing += behind - span - 1;
        } else {
            c.missing = c.missing.saturating_sub(1);
        }
        Arrival::Late
    }

    /// The topic's last number is `last`: what came after this subscriber's highest is missing.
    pub fn finish(&mut self, last: u64) {
        if self.counts.streams == 1 && last > self.high {
            self.counts.missing += last - self.high;
            self.advance(last - self.high);
            self.high = last;
        }
    }

    pub fn counts(&self) -> &Deliveries {
        &self.counts
    }

    /// The highest number received, if any was.
    pub fn high(&self) -> Option<u64> {
        (self.counts.streams == 1).then_some(self.high)
    }

    /// Moves the window up by `by` numbers: bit `i` becomes bit `i + by`.
    fn advance(&mut self, by: u64) {
        if by >= WINDOW {
            self.seen = [0; WORDS];
            return;
        }
        let (words, bits) = ((by / 64) as usize, (by % 64) as u32);
        for j in (0..WORDS).rev() {
            let lo = j.checked_sub(words).map_or(0, |k| self.seen[k]);
            let carry = match j.checked_sub(words + 1) {
                Some(k) if bits > 0 => self.seen[k] >> (64 - bits),
                _ => 0,
            };
            self.seen[j] = if bits == 0 { lo } else { (lo << bits) | carry };
        }
    }
}

/// Most subscribers a cell's result names as the slowest.
pub const SLOWEST: usize = 10;

/// A fanout cell's tallies, as each shard counts them and the conductor adds them up: per
/// topic (by index), and the subscribers that received least.
///
/// Only what was published in the measured window counts: with wsload's publishers, the
/// sequence numbers whose intended instant lies in it (every shard decides alike, from the
/// cell's start on the conductor's clock); with the server's, the deliveries whose publish
/// instant does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fanout {
    /// Tallies by topic index (`fanout.topics` of them).
    pub topics: Vec<TopicTally>,
    /// The subscribers that received fewest in the window, then latest: at most [`SLOWEST`],
    /// worst first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slowest: Vec<SubscriberTally>,
    /// Deliveries of messages published outside the measured window (warm-up, drain): read,
    /// not counted.
    #[serde(default)]
    pub outside: u64,
    /// Deliveries read during the measured window, whenever published: what the subscribers
    /// took in, kept up or not (a subscriber behind reads the window's time in what was
    /// published before it).
    #[serde(default)]
    pub read_in_window: u64,
    /// Messages that matched `delivery.match` but carried no sequence number wsload could read.
    #[serde(default)]
    pub unreadable: u64,
    /// Deliveries timed before their publish instant on the conductor's clock (clock error
    /// beyond the offsets measured): recorded as 0.
    #[serde(default)]
    pub before_publish: u64,
    /// Whether the server published (`fanout.publisher: server`): the window's publishes are
    /// then the span of sequence numbers the subscribers saw ([`TopicTally::publishes`]).
    #[serde(default)]
    pub by_server: bool,
    /// wsload's publisher connections opened, and those that failed to open or dropped.
    #[serde(default)]
    pub publishers: u64,
    #[serde(default)]
    pub publishers_failed: u64,
}

/// What the subscribers of one topic received of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicTally {
    /// Subscribers subscribed when the window began.
    pub subscribers: u64,
    /// Publishes of the window by wsload's publishers (0 when the server publishes).
    pub published: u64,
    /// The lowest and highest sequence number of the window any subscriber received (0: none).
    pub first_seq: u64,
    pub last_seq: u64,
    /// Distinct sequence numbers of the window received, over subscribers.
    pub delivered: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Received too far below a subscriber's highest to tell (see [`Deliveries::too_late`]).
    pub too_late: u64,
    /// The lowest- and highest-numbered deliveries read (at any time) whose publish instant
    /// is known, as (sequence number, Unix µs): the server's publish pace, which the
    /// subscribers may not have kept up with (`None`: no timed delivery read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced_from: Option<(u64, u64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced_to: Option<(u64, u64)>,
}

impl TopicTally {
    /// Publishes per second the topic's numbers and instants show (the pace its publisher
    /// kept, whatever the subscribers read of it); `None` without two timed deliveries apart.
    pub fn publish_pace(&self) -> Option<f64> {
        let ((s0, t0), (s1, t1)) = (self.paced_from?, self.paced_to?);
        (s1 > s0 && t1 > t0).then(|| (s1 - s0) as f64 * 1e6 / (t1 - t0) as f64)
    }

    /// A delivery numbered `seq`, published at `at_us`, read: the pace's ends moved out to it.
    pub fn paced(&mut self, seq: u64, at_us: u64) {
        if self.paced_from.is_none_or(|(s, _)| seq < s) {
            self.paced_from = Some((seq, at_us));
        }
        if self.paced_to.is_none_or(|(s, _)| seq > s) {
            self.paced_to = Some((seq, at_us));
        }
    }

    pub fn add(&mut self, o: &TopicTally) {
        self.subscribers += o.subscribers;
        self.published += o.published;
        self.first_seq = match (self.first_seq, o.first_seq) {
            (0, b) => b,
            (a, 0) => a,
            (a, b) => a.min(b),
        };
        self.last_seq = self.last_seq.max(o.last_seq);
        self.delivered += o.delivered;
        self.duplicates += o.duplicates;
        self.out_of_order += o.out_of_order;
        self.too_late += o.too_late;
        if let Some((s, t)) = o.paced_from {
            self.paced(s, t);
        }
        if let Some((s, t)) = o.paced_to {
            self.paced(s, t);
        }
    }

    /// A subscriber's view of the topic, added in.
    pub fn add_subscriber(&mut self, seq: &Sequence, first: u64, last: u64) {
        let c = seq.counts();
        self.subscribers += 1;
        self.delivered += c.delivered;
        self.duplicates += c.duplicates;
        self.out_of_order += c.out_of_order;
        self.too_late += c.too_late;
        self.add(&TopicTally {
            first_seq: first,
            last_seq: last,
            ..TopicTally::default()
        });
    }

    /// The window's publishes: counted by wsload's publishers, else the span the subscribers
    /// saw (`by_server`).
    pub fn publishes(&self, by_server: bool) -> u64 {
        if !by_server {
            self.published
        } else if self.last_seq == 0 {
            0
        } else {
            self.last_seq - self.first_seq + 1
        }
    }
}

/// One subscriber's receipt of one of its topics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriberTally {
    /// The connection's number over all shards.
    pub conn: u64,
    pub topic: u32,
    /// Distinct numbers of the window received.
    pub delivered: u64,
    /// Its slowest delivery, microseconds from the publish instant (0: untimed).
    pub max_latency_us: u64,
}

impl Fanout {
    /// Another shard's or worker's tallies, added in.
    pub fn add(&mut self, o: &Fanout) {
        if self.topics.len() < o.topics.len() {
            self.topics.resize(o.topics.len(), TopicTally::default());
        }
        for (a, b) in self.topics.iter_mut().zip(&o.topics) {
            a.add(b);
        }
        self.slowest.extend_from_slice(&o.slowest);
        keep_slowest(&mut self.slowest);
        self.by_server |= o.by_server;
        self.outside += o.outside;
        self.read_in_window += o.read_in_window;
        self.unreadable += o.unreadable;
        self.before_publish += o.before_publish;
        self.publishers += o.publishers;
        self.publishers_failed += o.publishers_failed;
    }

    /// The sums over topics: expected deliveries (each topic's publishes times its
    /// subscribers), delivered, and the rest.
    pub fn totals(&self, by_server: bool) -> FanoutTotals {
        let mut t = FanoutTotals::default();
        for topic in &self.topics {
            let p = topic.publishes(by_server);
            t.publishes += p;
            t.expected += p * topic.subscribers;
            t.delivered += topic.delivered;
            t.duplicates += topic.duplicates;
            t.out_of_order += topic.out_of_order;
            t.too_late += topic.too_late;
            t.subscriptions += topic.subscribers;
        }
        t.missing = t.expected.saturating_sub(t.delivered);
        t
    }
}

/// The reference server's topic counters over a cell, to reconcile with what the subscribers
/// received; defined with the spec's types, as the LoadTest status keeps them too.
pub use wsload_spec::fanout::ServerTopics;

/// Keeps the [`SLOWEST`] subscribers of `v` that received fewest, then latest, worst first.
pub fn keep_slowest(v: &mut Vec<SubscriberTally>) {
    v.sort_by(|a, b| {
        a.delivered
            .cmp(&b.delivered)
            .then(b.max_latency_us.cmp(&a.max_latency_us))
            .then(a.conn.cmp(&b.conn))
            .then(a.topic.cmp(&b.topic))
    });
    v.truncate(SLOWEST);
}

/// A fanout cell's sums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FanoutTotals {
    /// Publishes in the window, over topics.
    pub publishes: u64,
    /// Subscriber-topic pairs.
    pub subscriptions: u64,
    pub expected: u64,
    pub delivered: u64,
    /// Expected and never received in time: the gaps.
    pub missing: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub too_late: u64,
}

impl FanoutTotals {
    /// Delivered over expected; `None` when nothing was expected.
    pub fn completeness(&self) -> Option<f64> {
        (self.expected > 0).then(|| self.delivered as f64 / self.expected as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seqs: impl IntoIterator<Item = u64>) -> (Sequence, Vec<Arrival>) {
        let mut s = Sequence::default();
        let arrivals = seqs.into_iter().map(|n| s.record(n)).collect();
        (s, arrivals)
    }

    #[test]
    fn every_thousandth_dropped_is_exactly_that_many_gaps() {
        let (mut s, _) = run((1..=100_000).filter(|n| n % 1000 != 0));
        s.finish(100_000);
        let c = s.counts();
        assert_eq!((c.delivered, c.missing), (99_900, 100));
        assert_eq!((c.duplicates, c.out_of_order, c.too_late), (0, 0, 0));
        assert_eq!(c.completeness(), Some(0.999));
    }

    #[test]
    fn duplicates_and_swaps_are_counted_and_fill_nothing_twice() {
        // 1 2 4 3 5 5 7 6 8, then 3 again (a duplicate of a late one).
        let (s, a) = run([1, 2, 4, 3, 5, 5, 7, 6, 8, 3]);
        let c = s.counts();
        assert_eq!(c.delivered, 8);
        assert_eq!((c.duplicates, c.out_of_order, c.missing), (2, 2, 0));
        assert_eq!(a[3], Arrival::Late);
        assert_eq!(a[5], Arrival::Duplicate);
        assert_eq!(a[9], Arrival::Duplicate);
    }

    #[test]
    fn a_subscriber_that_joins_late_starts_at_its_first() {
        let (mut s, _) = run(500..=600);
        s.finish(610);
        let c = s.counts();
        assert_eq!((c.delivered, c.missing), (101, 10));
        // A number below its first that still arrives counts, and what lies between is a gap.
        let (s, a) = run([10, 11, 12, 8]);
        assert_eq!(a[3], Arrival::Late);
        assert_eq!((s.counts().delivered, s.counts().missing), (4, 1));
    }

    #[test]
    fn the_window_slides_across_words_and_forgets_beyond_it() {
        let mut s = Sequence::default();
        s.record(1);
        // A jump of 70 (across a word boundary), then the numbers skipped, in reverse.
        s.record(71);
        for n in (2..71).rev() {
            assert_eq!(s.record(n), Arrival::Late, "{n}");
        }
        assert_eq!(s.record(40), Arrival::Duplicate);
        assert_eq!(s.counts().missing, 0);
        // Far ahead: what lies more than the window behind cannot be told any more.
        s.record(71 + WINDOW + 5);
        assert_eq!(s.record(72), Arrival::TooLate);
        assert_eq!(s.record(71 + WINDOW), Arrival::Late);
        let c = s.counts();
        assert_eq!(c.too_late, 1);
        assert_eq!(c.missing, WINDOW + 4 - 1);
    }

    #[test]
    fn topic_tallies_add_up_exactly_across_shards() {
        // Topic 0: 10 publishes, two subscribers on two shards; one missed 3, one got a
        // duplicate. Topic 1: published by the server, seen from 5 to 9 by its subscriber.
        let mut a = Fanout {
            topics: vec![
                TopicTally {
                    published: 10,
                    ..Default::default()
                },
                TopicTally::default(),
            ],
            ..Default::default()
        };
        let (s, _) = run((1..=10).filter(|n| ![2, 5, 9].contains(n)));
        a.topics[0].add_subscriber(&s, 1, 10);
        let mut b = Fanout {
            topics: vec![TopicTally::default(); 2],
            ..Default::default()
        };
        let (s, _) = run([1, 2, 3, 3, 4, 5, 6, 7, 8, 9, 10]);
        b.topics[0].add_subscriber(&s, 1, 10);
        b.slowest = vec![SubscriberTally {
            conn: 1,
            topic: 0,
            delivered: 10,
            max_latency_us: 5,
        }];
        a.slowest = vec![SubscriberTally {
            conn: 0,
            topic: 0,
            delivered: 7,
            max_latency_us: 2,
        }];
        a.add(&b);
        let t = a.totals(false);
        assert_eq!((t.publishes, t.subscriptions, t.expected), (10, 2, 20));
        assert_eq!((t.delivered, t.missing, t.duplicates), (17, 3, 1));
        assert_eq!(t.completeness(), Some(0.85));
        assert_eq!(a.slowest[0].conn, 0, "fewest delivered first");
        let mut server = TopicTally::default();
        let (s, _) = run(5..=9);
        server.add_subscriber(&s, 5, 9);
        assert_eq!(server.publishes(true), 5);
    }

    #[test]
    fn sums_are_exact() {
        let (mut a, _) = run((1..=50).filter(|n| n % 10 != 0));
        a.finish(50);
        let (mut b, _) = run([1, 3, 2, 2]);
        b.finish(4);
        let mut total = Deliveries::default();
        total.add(a.counts());
        total.add(b.counts());
        assert_eq!(total.streams, 2);
        assert_eq!(total.delivered, 45 + 3);
        assert_eq!(total.missing, 5 + 1);
        assert_eq!(total.expected(), 50 + 4);
        assert_eq!((total.duplicates, total.out_of_order), (1, 1));
    }
}
