//! The fanout scenario against wsload-server's topics (`pubsub` profile): every publish of the
//! measured window counted at every subscriber exactly, and the server's test hooks (a
//! delivery dropped, sent twice, sent late) seen by wsload exactly as the hooks made them.

mod common;

use common::{Server, only, run, spec};
use wsload::report::CellResult;
use wsload_report::fanout::{Fanout, FanoutTotals, TopicTally};

fn fanout(c: &CellResult) -> &Fanout {
    c.measure.counts.fanout.as_ref().expect("a fanout tally")
}

fn totals(c: &CellResult) -> FanoutTotals {
    let f = fanout(c);
    f.totals(f.by_server)
}

/// The numbers `n` of `[t.first_seq, t.last_seq]` for which `hit(n)`.
fn count_in(t: &TopicTally, hit: impl Fn(u64) -> bool) -> u64 {
    (t.first_seq..=t.last_seq).filter(|n| hit(*n)).count() as u64
}

#[test]
fn every_publish_of_the_window_reaches_every_subscriber_exactly() {
    let lt = spec(
        "fanout-exact",
        "  target: {server: {profile: pubsub}}\n  scenario: fanout\n  connections: [30]\n  duration: 2s\n  warmup: 300ms\n  fanout: {topics: 3, topicsPerSubscriber: 2, drain: 1s}\n  rate: {messagesPerSecond: 300}\n",
    );
    let r = run(&lt);
    let c = only(&r);
    let f = fanout(c);
    let t = totals(c);
    assert_eq!((f.publishers, f.publishers_failed), (3, 0));
    assert_eq!(f.topics.len(), 3);
    for (i, topic) in f.topics.iter().enumerate() {
        // 30 subscribers of 2 topics each over 3 topics: 20 a topic.
        assert_eq!(topic.subscribers, 20, "topic {i}");
        // wsload's publishers counted the window's publishes; the subscribers saw that span.
        assert_eq!(
            topic.published,
            topic.last_seq - topic.first_seq + 1,
            "topic {i}: {topic:?}"
        );
        assert!(topic.published > 100, "topic {i}: {topic:?}");
    }
    assert_eq!(t.expected, t.publishes * 20);
    assert_eq!((t.delivered, t.missing), (t.expected, 0), "{t:?}");
    assert_eq!((t.duplicates, t.out_of_order, t.too_late), (0, 0, 0));
    assert_eq!(t.completeness(), Some(1.0));
    // Every counted delivery was timed, and what was published in the warm-up was read, not
    // counted.
    assert_eq!(c.measure.hists.fanout.len(), t.delivered);
    assert!(f.outside > 0, "{f:?}");
    assert_eq!((f.unreadable, f.before_publish), (0, 0));
    assert_eq!(c.measure.counts.received, t.delivered);
    assert_eq!(
        c.measure.counts.failed_total() + c.measure.counts.dropped_total(),
        0
    );
}

/// A fanout of one topic, at `rate`, to `subscribers`, against an external server with `args`.
fn hooked(name: &str, args: &[&str], subscribers: u32) -> CellResult {
    let mut all = vec!["--profile", "pubsub"];
    all.extend_from_slice(args);
    let server = Server::start(&all);
    let lt = spec(
        name,
        &format!(
            "  target: {{url: '{}/'}}\n  scenario: fanout\n  connections: [{subscribers}]\n  duration: 2s\n  warmup: 200ms\n  fanout: {{topics: 1, drain: 1s}}\n  rate: {{messagesPerSecond: 500}}\n",
            server.ws
        ),
    );
    only(&run(&lt)).clone()
}

#[test]
fn a_server_that_drops_every_hundredth_delivery_to_one_subscriber_shows_exactly_those_gaps() {
    let c = hooked("fanout-drop", &["--test-drop-every", "100"], 4);
    let f = fanout(&c);
    let topic = f.topics[0];
    // The hook drops the topic's first subscriber's 100th, 200th... delivery: numbers 100,
    // 200... (it subscribed before the first publish). Those in the window are the gaps.
    let dropped = count_in(&topic, |n| n % 100 == 0);
    assert!(dropped >= 5, "{topic:?}");
    let t = totals(&c);
    assert_eq!(t.missing, dropped, "{t:?}");
    assert_eq!(t.delivered, topic.published * 4 - dropped);
    assert_eq!((t.duplicates, t.out_of_order), (0, 0));
    // The one subscriber that lost them is named first among the slowest.
    assert_eq!(
        f.slowest[0].delivered,
        topic.published - dropped,
        "{:?}",
        f.slowest
    );
    assert!(
        f.slowest[1..]
            .iter()
            .all(|s| s.delivered == topic.published)
    );
}

#[test]
fn duplicates_and_reordering_are_counted_exactly() {
    let c = hooked("fanout-dup", &["--test-duplicate-every", "50"], 3);
    let topic = fanout(&c).topics[0];
    let t = totals(&c);
    assert_eq!(t.duplicates, count_in(&topic, |n| n % 50 == 0), "{t:?}");
    assert_eq!((t.missing, t.out_of_order), (0, 0));
    assert_eq!(t.delivered, t.expected);

    let c = hooked("fanout-swap", &["--test-swap-every", "50"], 3);
    let topic = fanout(&c).topics[0];
    let t = totals(&c);
    // Number N held back and sent after N+1: out of order when both are in the window.
    let swapped = count_in(&topic, |n| n % 50 == 0 && n < topic.last_seq);
    assert_eq!(t.out_of_order, swapped, "{t:?} {topic:?}");
    assert_eq!((t.missing, t.duplicates), (0, 0));
    assert_eq!(t.delivered, t.expected);
}

#[test]
fn a_server_that_publishes_itself_is_counted_from_what_the_subscribers_saw() {
    let server = Server::start(&[
        "--profile",
        "pubsub",
        "--ticker-topics",
        "2",
        "--ticker-rate",
        "200",
    ]);
    let lt = spec(
        "fanout-ticker",
        &format!(
            "  target: {{url: '{}/'}}\n  scenario: fanout\n  connections: [10]\n  duration: 2s\n  warmup: 200ms\n  fanout: {{topics: 2, publisher: server, drain: 1s}}\n",
            server.ws
        ),
    );
    let r = run(&lt);
    let c = only(&r);
    let f = fanout(c);
    assert!(f.by_server);
    assert_eq!(f.publishers, 0);
    let t = totals(c);
    for topic in &f.topics {
        assert_eq!(topic.subscribers, 5);
        // 2 s at 200/s, give or take the window's edges.
        let span = topic.last_seq - topic.first_seq + 1;
        assert!((390..=410).contains(&span), "{topic:?}");
    }
    assert_eq!((t.delivered, t.missing), (t.expected, 0), "{t:?}");
    assert_eq!(c.measure.hists.fanout.len(), t.delivered);
}
