//! What a fan-out's figures point at: deliveries missing (and, with the server's topic
//! counters, where they went), duplicates and reordering, deliveries the clocks cannot time,
//! deliveries of no topic of their subscriber's, and latencies the shards' clocks blur.

use super::{Finding, Rule, finding};
use crate::fanout::{Fanout, ServerTopics};
use crate::fanout_figures::FanoutFigures;
use crate::measure::NumberField;
use crate::numbers::{ms, num};
use crate::result::{CellResult, RunResult};
use crate::table::percent;

/// The share of the fan-out p50 the clocks' uncertainty may reach before it is a finding.
pub const CLOCK_SHARE_OF_P50: f64 = 0.1;

/// Every rule of one fan-out cell (none for other cells).
pub fn cell(c: &CellResult) -> Vec<Finding> {
    let (Some(fig), Some(tally)) = (&c.figures.fanout, &c.measure.counts.fanout) else {
        return Vec::new();
    };
    let mut out: Vec<Finding> = [
        behind(c),
        incomplete(c, fig, tally),
        order(c, fig),
        before_publish(c, fig, tally),
        unreadable(c, tally),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(server) = &c.server_topics {
        out.extend(server_account(c, fig, tally, server));
    }
    out
}

/// How much more load generator would have kept up: the subscribers read `read` deliveries a
/// second while the publishers' pace owed them `owed` (above by a margin no jitter makes),
/// and they had deliveries left unread at the deadline. `None` when they kept up, or when no
/// timed delivery shows the pace.
pub fn behind(c: &CellResult) -> Option<Finding> {
    let fig = c.figures.fanout.as_ref()?;
    let counts = &c.measure.counts;
    let owed = fig.owed_per_sec?;
    if counts.behind == 0 || fig.read_per_sec <= 0.0 || owed < fig.read_per_sec * BEHIND_MARGIN {
        return None;
    }
    let times = (owed / fig.read_per_sec).ceil();
    let mut evidence = format!(
        "the subscribers read {}/s of the {}/s the publishers' pace owed them ({} of it), {} connections with {} unread at the deadline",
        num(fig.read_per_sec),
        num(owed),
        percent(fig.read_per_sec / owed),
        num(counts.behind as f64),
        super::mb(counts.unread_bytes)
    );
    if let Some(cpu) = c.loadgen_cpu {
        evidence.push_str(&format!(
            "; the busiest load generator at {:.0}% CPU",
            cpu * 100.0
        ));
    }
    finding(
        Rule::FanoutBehind,
        c,
        &format!(
            "the load generator could not keep up with the deliveries, so the server's delivery rate is not measured here (completeness counts what the subscribers reached, and they read the window in what was published before it); about {times:.0} times its capacity would keep up: {times:.0} shards of this size, or {times:.0} times its cores"
        ),
        evidence,
    )
}

/// The share the pace may exceed what was read by before the subscribers count as behind:
/// more than one read loop's jitter.
const BEHIND_MARGIN: f64 = 1.1;

/// Deliveries expected and never received: how many, on which topics, the subscribers that
/// missed most, and whether subscribers' connections ended early.
pub fn incomplete(c: &CellResult, fig: &FanoutFigures, tally: &Fanout) -> Option<Finding> {
    if fig.gaps == 0 {
        return None;
    }
    let short_topics = tally
        .topics
        .iter()
        .filter(|t| t.publishes(tally.by_server) * t.subscribers > t.delivered)
        .count();
    let mut evidence = format!(
        "{} gaps of {} expected deliveries, completeness {}, on {} of {} topics",
        num(fig.gaps as f64),
        num(fig.expected as f64),
        fig.completeness.map_or("-".into(), percent),
        short_topics,
        fig.topics
    );
    let missed: Vec<String> = fig
        .slowest
        .iter()
        .filter(|s| s.gaps > 0)
        .take(3)
        .map(|s| {
            format!(
                "conn {} on topic {} missed {}",
                s.conn,
                s.topic,
                num(s.gaps as f64)
            )
        })
        .collect();
    if !missed.is_empty() {
        evidence.push_str(&format!("; most missed: {}", missed.join(", ")));
    }
    let counts = &c.measure.counts;
    let dropped = counts.dropped_total();
    let cause = if dropped > 0 {
        let reasons: Vec<String> = counts
            .dropped
            .iter()
            .map(|(k, n)| format!("{} x{}", k.label(), num(*n as f64)))
            .collect();
        evidence.push_str(&format!(
            "; {} subscribers dropped ({})",
            num(dropped as f64),
            reasons.join(", ")
        ));
        match &c.measure.reconnect {
            // They came back (spec.reconnect): what they missed while away is in its window.
            Some(r) if r.storms.iter().any(|s| s.reconnected > 0) => {
                let away: u64 = r.storms.iter().map(|s| s.gaps).sum();
                let unfed: u64 = r.storms.iter().map(|s| s.unfed).sum();
                let rest = if unfed > 0 {
                    format!(
                        "; {} subscribers came back and read nothing after (the server did not subscribe them again: a resumed session it forgot, a subscription refused without a word)",
                        num(unfed as f64)
                    )
                } else {
                    String::new()
                };
                format!(
                    "subscribers did not receive every delivery of the window; {} of the gaps are what subscribers missed while dropped and coming back (the reconnect figures, per disruption), {} no drop explains (subscribers' before any drop of theirs), the rest of subscribers not back before the window ended, back but fed nothing, or dropped before their first delivery of it{rest}",
                    num(away as f64),
                    num(r.gaps_undropped as f64)
                )
            }
            _ => "subscribers did not receive every delivery of the window; some of their connections ended early, and what was published after is missing (see why they ended)".to_string(),
        }
    } else if c.server_topics.is_some() {
        "subscribers did not receive every delivery of the window; the server's own account follows"
            .to_string()
    } else {
        "subscribers did not receive every delivery of the window; the server's topic counters (a managed wsload-server's) would tell whether the server dropped them or they were lost on the way".to_string()
    };
    finding(Rule::FanoutIncomplete, c, &cause, evidence)
}

/// The server's counters against what the subscribers received: (a) it dropped deliveries for
/// slow consumers, (b) it counted deliveries no subscriber received, (c) publishes never
/// reached it.
pub fn server_account(
    c: &CellResult,
    fig: &FanoutFigures,
    tally: &Fanout,
    s: &ServerTopics,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if s.dropped_slow_consumer > 0 {
        let mut evidence = format!(
            "server dropped {} of {} owed deliveries for slow consumers",
            num(s.dropped_slow_consumer as f64),
            num(s.fanout as f64)
        );
        if s.dropped_closed > 0 {
            evidence.push_str(&format!(
                " and {} to closed connections",
                num(s.dropped_closed as f64)
            ));
        }
        evidence.push_str(&format!("; subscribers missed {}", num(fig.gaps as f64)));
        out.extend(finding(
            Rule::FanoutServer,
            c,
            &format!(
                "the server dropped {} deliveries for slow consumers: the clients did not read fast enough (add shards or cores to the load generator), or its subscriber queue is too short for the bursts (wsload-server's --subscriber-queue)",
                num(s.dropped_slow_consumer as f64)
            ),
            evidence,
        ));
    }
    // Everything a subscriber read that the server wrote: the window's deliveries, copies and
    // late arrivals of them, those published outside the window, and those without a number.
    let received = fig.delivered + fig.duplicates + fig.too_late + tally.outside + tally.unreadable;
    let unreceived = s.delivered.saturating_sub(received);
    // A few still in flight when the counters were read are not a finding.
    if unreceived > (s.delivered / 10_000).max(1) {
        let dropped = c.measure.counts.dropped_total();
        let cause = if dropped > 0 {
            // A connection that drops takes what was written to it and not yet read along.
            format!(
                "the server counted {} deliveries that no subscriber received: {} connections dropped during the cell, and what the server had written to them and they had not read went with them (or it was lost on the way, or counted and never sent)",
                num(unreceived as f64),
                num(dropped as f64)
            )
        } else {
            format!(
                "the server counted {} deliveries that no subscriber received: lost between the server's write and the subscriber's read (a proxy, the network), or the server counts what it never sent (wsload-server's --test-drop-every does so on purpose)",
                num(unreceived as f64)
            )
        };
        out.extend(finding(
            Rule::FanoutServer,
            c,
            &cause,
            format!(
                "server delivered {}; subscribers received {} ({} of the window, {} duplicates, {} outside it)",
                num(s.delivered as f64),
                num(received as f64),
                num(fig.delivered as f64),
                num(fig.duplicates as f64),
                num(tally.outside as f64)
            ),
        ));
    }
    if !tally.by_server && s.published < fig.publishes {
        let lost = fig.publishes - s.published;
        let mut evidence = format!(
            "server counted {} publishes; wsload's publishers sent {} in the measured window alone",
            num(s.published as f64),
            num(fig.publishes as f64)
        );
        if tally.publishers_failed > 0 {
            evidence.push_str(&format!(
                "; {} of {} publisher connections failed or dropped",
                tally.publishers_failed, tally.publishers
            ));
        }
        out.extend(finding(
            Rule::FanoutServer,
            c,
            &format!(
                "{} publishes never reached the server: its subscribers could not be sent them (check the publishers' connections and the server's publish errors)",
                num(lost as f64)
            ),
            evidence,
        ));
    }
    out
}

/// Copies and arrivals out of order: a topic's subscriber should see each publish once, in
/// order.
pub fn order(c: &CellResult, fig: &FanoutFigures) -> Option<Finding> {
    if fig.duplicates + fig.out_of_order + fig.too_late == 0 {
        return None;
    }
    let mut evidence = format!(
        "{} duplicates, {} out of order",
        num(fig.duplicates as f64),
        num(fig.out_of_order as f64)
    );
    if fig.too_late > 0 {
        evidence.push_str(&format!(
            ", {} too late to tell (more than {} numbers behind; counted as gaps)",
            num(fig.too_late as f64),
            crate::fanout::WINDOW
        ));
    }
    evidence.push_str(&format!(", of {} deliveries", num(fig.delivered as f64)));
    finding(
        Rule::FanoutOrder,
        c,
        "subscribers received deliveries twice or out of order: the server (or something between) repeats or reorders a topic's messages",
        evidence,
    )
}

/// Deliveries timed before their publish instant: the clocks disagree beyond the offsets the
/// conductor measured.
pub fn before_publish(c: &CellResult, fig: &FanoutFigures, tally: &Fanout) -> Option<Finding> {
    if tally.before_publish == 0 {
        return None;
    }
    let stamped_by = if tally.by_server {
        "the server stamps publish instants on its own clock, which wsload does not measure; "
    } else {
        ""
    };
    finding(
        Rule::FanoutClockDisagree,
        c,
        &format!(
            "deliveries arrived before their publish instant: the clocks disagree beyond the offsets measured ({stamped_by}a clock stepped, or drifted, during the run); they were timed as 0, so the low percentiles read low: keep the nodes' clocks in sync (NTP, chrony)"
        ),
        format!(
            "{} of {} deliveries timed before their publish instant",
            num(tally.before_publish as f64),
            num(fig.delivered as f64)
        ),
    )
}

/// Deliveries not counted for want of a topic: those the delivery rule took without a topic
/// the subscriber could name (none where `delivery.topic` points, or one it did not
/// subscribe to). Those without a readable sequence number are the rest of `unreadable`,
/// named by the field (`findings::fields`).
pub fn unreadable(c: &CellResult, tally: &Fanout) -> Option<Finding> {
    let no_sequence = c
        .measure
        .counts
        .unreadable
        .get(&NumberField::Sequence)
        .copied()
        .unwrap_or(0);
    let no_topic = tally.unreadable.saturating_sub(no_sequence);
    if no_topic == 0 {
        return None;
    }
    finding(
        Rule::FanoutUnreadable,
        c,
        "deliveries named no topic of their subscriber's (none where conversation.delivery.topic points, or one it did not subscribe to), so they were not counted: point delivery.topic at the field that names the topic (fanout.topicPrefix and its number: t0, t1, ...)",
        format!(
            "{} deliveries without a topic of their subscriber's",
            num(no_topic as f64)
        ),
    )
}

/// Fan-out latencies compare a publish instant stamped on one node with a receipt on another:
/// where the shards' clock uncertainty is a large share of the p50, say how far the latencies
/// may be from the truth.
pub fn clock_blur(r: &RunResult) -> Vec<Finding> {
    let mut clocks: Vec<(u32, u64)> = r
        .shard_info
        .iter()
        .filter_map(|s| Some((s.index, s.clock?.uncertainty_micros)))
        .collect();
    clocks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    r.cells
        .iter()
        .filter_map(|c| {
            let fig = c.figures.fanout.as_ref()?;
            let by_server = c.measure.counts.fanout.as_ref()?.by_server;
            // wsload's publishers: a delivery crosses two shards' clocks, at worst the two
            // least known (one shard's publisher and subscriber share a clock, whose error
            // cancels). The server's: one shard's clock against the server's own.
            let crossed: &[(u32, u64)] = match (by_server, clocks.len()) {
                (true, n) if n >= 1 => &clocks[..1],
                (false, n) if n >= 2 => &clocks[..2],
                _ => return None,
            };
            let bound_us: u64 = crossed.iter().map(|(_, u)| u).sum();
            let p50 = fig.latency.p50;
            let bound = bound_us as f64 / 1e6;
            if p50 <= 0.0 || bound <= CLOCK_SHARE_OF_P50 * p50 {
                return None;
            }
            let named: Vec<String> = crossed
                .iter()
                .map(|(i, u)| format!("shard {i} ± {}", ms(*u as f64 / 1e6)))
                .collect();
            let server = if by_server {
                "; the server's ticker stamps on the server's clock, which is not measured at all"
            } else {
                ""
            };
            finding(
                Rule::FanoutClock,
                c,
                &format!(
                    "fan-out latencies are within ± {} of the truth: a delivery's publish instant and its receipt are read on different clocks, each known only that closely{server}; tighten it with NTP (chrony) on the nodes and fewer network hops between the shards and the conductor",
                    ms(bound)
                ),
                format!(
                    "fanout p50 {}; {}: ± {} is {:.0}% of it",
                    ms(p50),
                    named.join(", "),
                    ms(bound),
                    bound / p50 * 100.0
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::measure::Dropped;
    use crate::result::ShardClock;

    fn text(found: &[Finding]) -> Vec<String> {
        found.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn missing_deliveries_name_the_gaps_topics_and_subscribers() {
        let r = fixtures::fanout();
        let c = &r.cells[0];
        let f = incomplete(
            c,
            c.figures.fanout.as_ref().expect("figures"),
            c.measure.counts.fanout.as_ref().expect("tallies"),
        )
        .expect("incomplete");
        assert_eq!(
            f.evidence,
            "5 gaps of 100.0K expected deliveries, completeness 99.995%, on 1 of 2 topics; most missed: conn 17 on topic 1 missed 5"
        );
        assert!(f.cause.ends_with("the server's own account follows"), "{f}");
        // Without the server's counters, what they would tell; with drops, the drops.
        let mut c = c.clone();
        c.server_topics = None;
        c.measure.counts.drop(Dropped::Reset);
        c.measure.counts.drop(Dropped::Reset);
        let f = incomplete(
            &c,
            c.figures.fanout.as_ref().expect("figures"),
            c.measure.counts.fanout.as_ref().expect("tallies"),
        )
        .expect("incomplete");
        assert!(
            f.evidence.ends_with("; 2 subscribers dropped (reset x2)"),
            "{f}"
        );
        assert!(f.cause.contains("connections ended early"), "{f}");
        c.measure.counts.dropped.clear();
        let f = cell(&c);
        assert!(
            f[0].cause
                .contains("the server's topic counters (a managed wsload-server's)"),
            "{f:?}"
        );
    }

    #[test]
    fn the_servers_account_tells_drops_lies_and_lost_publishes_apart() {
        let mut r = fixtures::fanout();
        // The fixture's server delivered 100,137: 100 more than the 99,995 + 2 + 40 received.
        let found = text(&cell(&r.cells[0]));
        assert!(
            found.contains(&"finding [100]: the server counted 100 deliveries that no subscriber received: lost between the server's write and the subscriber's read (a proxy, the network), or the server counts what it never sent (wsload-server's --test-drop-every does so on purpose) (server delivered 100.1K; subscribers received 100.0K (100.0K of the window, 2 duplicates, 40 outside it))".to_string()),
            "{found:#?}"
        );
        // Subscribers dropped meanwhile: what was in flight to them went with them.
        for _ in 0..3 {
            r.cells[0].measure.counts.drop(Dropped::Disrupted);
        }
        let found = text(&cell(&r.cells[0]));
        assert!(
            found.iter().any(|f| f.contains("the server counted 100 deliveries that no subscriber received: 3 connections dropped during the cell, and what the server had written to them and they had not read went with them")),
            "{found:#?}"
        );
        r.cells[0].measure.counts.dropped.clear();
        let c = &mut r.cells[0];
        let s = c.server_topics.as_mut().expect("server");
        // (a) dropped for slow consumers, and the rest received: no "lie".
        (s.delivered, s.dropped_slow_consumer, s.dropped_closed) = (100_037, 5, 1);
        // (c) publishes that never reached it.
        s.published = 1_990;
        c.measure
            .counts
            .fanout
            .as_mut()
            .expect("tally")
            .publishers_failed = 1;
        let found = text(&cell(c));
        let server: Vec<&String> = found
            .iter()
            .filter(|f| f.contains("the server dropped") || f.contains("never reached"))
            .collect();
        assert_eq!(
            server,
            vec![
                "finding [100]: the server dropped 5 deliveries for slow consumers: the clients did not read fast enough (add shards or cores to the load generator), or its subscriber queue is too short for the bursts (wsload-server's --subscriber-queue) (server dropped 5 of 100.4K owed deliveries for slow consumers and 1 to closed connections; subscribers missed 5)",
                "finding [100]: 10 publishes never reached the server: its subscribers could not be sent them (check the publishers' connections and the server's publish errors) (server counted 1990 publishes; wsload's publishers sent 2000 in the measured window alone; 1 of 2 publisher connections failed or dropped)",
            ]
        );
        assert!(!found.iter().any(|f| f.contains("no subscriber received")));
        // The server's own publishes are the span the subscribers saw: no such comparison.
        c.measure.counts.fanout.as_mut().expect("tally").by_server = true;
        assert!(!text(&cell(c)).iter().any(|f| f.contains("never reached")));
    }

    #[test]
    fn copies_reordering_early_arrivals_and_deliveries_of_no_topic_are_counted() {
        let mut r = fixtures::fanout();
        let c = &mut r.cells[0];
        {
            let t = c.measure.counts.fanout.as_mut().expect("tally");
            t.before_publish = 7;
            t.unreadable = 12;
            t.topics[0].too_late = 1;
        }
        c.compute();
        let found = text(&cell(c));
        let has = |s: &str| found.iter().any(|f| f.contains(s));
        assert!(
            has(
                "(2 duplicates, 3 out of order, 1 too late to tell (more than 512 numbers behind; counted as gaps), of 100.0K deliveries)"
            ),
            "{found:#?}"
        );
        assert!(has(
            "deliveries arrived before their publish instant: the clocks disagree beyond the offsets measured (a clock stepped"
        ));
        assert!(has(
            "(7 of 100.0K deliveries timed before their publish instant)"
        ));
        assert!(has(
            "point delivery.topic at the field that names the topic (fanout.topicPrefix and its number: t0, t1, ...) (12 deliveries without a topic of their subscriber's)"
        ));
        // Those without a sequence number are named by their field, not here.
        c.measure
            .counts
            .unreadable
            .insert(NumberField::Sequence, 12);
        assert!(!text(&cell(c)).iter().any(|f| f.contains("topic of")));
        c.measure
            .counts
            .unreadable
            .insert(NumberField::Sequence, 10);
        assert!(
            text(&cell(c))
                .iter()
                .any(|f| f.contains("(2 deliveries without a topic of their subscriber's)"))
        );
        c.measure.counts.unreadable.clear();
        // A whole, ordered fan-out has nothing to say.
        let t = c.measure.counts.fanout.as_mut().expect("tally");
        t.topics[1] = t.topics[0];
        t.topics[0].too_late = 0;
        t.topics[1].too_late = 0;
        (t.before_publish, t.unreadable, t.slowest) = (0, 0, Vec::new());
        c.server_topics = None;
        c.compute();
        assert_eq!(cell(c), Vec::new());
    }

    fn clocked(uncertainties: &[u64]) -> RunResult {
        let mut r = fixtures::fanout();
        let info = r.shard_info[0].clone();
        r.shard_info = uncertainties
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let mut s = info.clone();
                s.index = i as u32;
                s.clock = Some(ShardClock {
                    offset_micros: 10,
                    uncertainty_micros: *u,
                    samples: 5,
                });
                s
            })
            .collect();
        r
    }

    #[test]
    fn clocks_known_loosely_against_the_p50_are_named_with_the_bound() {
        // The fixture's p50 is about 5.5 ms: 10% of it is 550 us.
        assert_eq!(clock_blur(&clocked(&[100, 200, 250])), Vec::new());
        let f = text(&clock_blur(&clocked(&[100, 400, 300])));
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].starts_with("finding [100]: fan-out latencies are within ± 700 us of the truth"),
            "{f:?}"
        );
        assert!(f[0].contains("NTP (chrony)"), "{f:?}");
        assert!(
            f[0].contains("; shard 1 ± 400 us, shard 2 ± 300 us: ± 700 us is 13% of it)"),
            "{f:?}"
        );
        // One shard's publisher and subscribers share a clock.
        assert_eq!(clock_blur(&clocked(&[5_000])), Vec::new());
        // The server's ticker: one shard's clock against the server's, which is unmeasured.
        let mut r = clocked(&[600]);
        r.cells[0]
            .measure
            .counts
            .fanout
            .as_mut()
            .expect("tally")
            .by_server = true;
        r.cells[0].compute();
        let f = text(&clock_blur(&r));
        assert!(f[0].contains("± 600 us of the truth"), "{f:?}");
        assert!(f[0].contains("which is not measured at all"), "{f:?}");
    }

    /// A publisher's pace the subscribers did not keep up with, and deliveries left unread at
    /// the deadline: the load generator is named, with how many times its capacity would
    /// keep up; the same pace read in full (or nothing unread) is no finding.
    #[test]
    fn subscribers_behind_the_pace_name_the_load_generator_and_how_much_more() {
        let mut r = crate::fixtures::fanout();
        let c = &mut r.cells[0];
        let f = c.measure.counts.fanout.as_mut().expect("tally");
        // 1,000 publishes a second on each topic, seen from the deliveries' numbers and
        // instants; 50 subscribers each: 100,000 deliveries a second owed.
        for t in &mut f.topics {
            t.paced(1, 1_000_000);
            t.paced(2_001, 3_000_000);
        }
        f.read_in_window = 300_000;
        c.measure.counts.behind = 40;
        c.measure.counts.unread_bytes = 4_000_000;
        c.loadgen_cpu = Some(0.97);
        c.compute();
        let fig = c.figures.fanout.as_ref().expect("figures");
        assert_eq!(fig.owed_per_sec, Some(100_000.0));
        assert_eq!(fig.read_per_sec, 30_000.0);
        let b = behind(c).expect("behind");
        assert_eq!(b.rule, Rule::FanoutBehind);
        assert!(b.cause.contains("about 4 times its capacity would keep up: 4 shards of this size, or 4 times its cores"), "{}", b.cause);
        assert!(
            b.evidence.contains("read 30.0K/s of the 100.0K/s"),
            "{}",
            b.evidence
        );
        assert!(
            b.evidence.contains("40 connections with 4.00 MB unread"),
            "{}",
            b.evidence
        );
        assert!(b.evidence.contains("97% CPU"), "{}", b.evidence);
        // The generic finding gives way to it.
        assert!(crate::findings::client_behind(c).is_none());

        c.measure
            .counts
            .fanout
            .as_mut()
            .expect("tally")
            .read_in_window = 1_000_000;
        c.compute();
        assert!(behind(c).is_none(), "read all it was owed");
        c.measure
            .counts
            .fanout
            .as_mut()
            .expect("tally")
            .read_in_window = 300_000;
        c.measure.counts.behind = 0;
        c.compute();
        assert!(behind(c).is_none(), "nothing unread");
    }
}
