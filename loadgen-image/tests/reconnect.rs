//! Reconnect storms on one machine: managed server replicas killed mid-hold (SIGKILL, as a
//! crash) and the held connections they dropped brought back by the LoadTest's policy, every
//! figure counted in the disruption's window.

mod common;

use common::{only, run, spec};
use wsload::measure::{ConnectError, Dropped};

/// Three replicas, `conns` held connections, one replica killed 1 s in with `kill`, and
/// `reconnect` as the policy.
fn storm(name: &str, conns: u32, reconnect: &str, kill: &str) -> wsload::report::RunResult {
    run(&spec(
        name,
        &format!(
            "  target: {{server: {{replicas: 3}}}}\n  scenario: sustainedHold\n  connections: [{conns}]\n  duration: 4s\n  warmup: 0s\n  ping: {{interval: 500ms, timeout: 1s}}\n  reconnect: {reconnect}\n  disruptions:\n    - at: 1s\n      kill: {kill}\n"
        ),
    ))
}

#[test]
fn a_killed_replica_drops_its_share_and_every_connection_comes_back() {
    let r = storm(
        "storm-back",
        300,
        "{policy: exponential, delay: 50ms, maxDelay: 400ms, jitter: full}",
        "{replicas: 1}",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    let rc = c.measure.reconnect.as_ref().expect("reconnect figures");
    assert_eq!(rc.storms.len(), 2, "{rc:?}");
    let (before, kill) = (&rc.storms[0], &rc.storms[1]);
    assert_eq!(kill.what, "kill 1 replica at 1s");
    assert_eq!(before.dropped, 0, "nothing dropped before the kill: {rc:?}");
    // The kernel spreads connections over the three replicas by their ports' hash: the
    // killed one held some, not all.
    assert!(
        (20..=200).contains(&kill.dropped),
        "a third or so of 300 dropped: {rc:?}"
    );
    assert_eq!(n.dropped_total(), kill.dropped, "{n:?}");
    assert_eq!(kill.reconnected, kill.dropped, "every one back: {rc:?}");
    assert_eq!(kill.never_back(), 0);
    assert_eq!(kill.downtime.len(), kill.reconnected);
    assert_eq!(kill.handshake.len(), kill.reconnected);
    assert!(kill.attempts >= kill.reconnected, "{rc:?}");
    // Back within the policy's waits (at most 400 ms each, 3 s left), not at the deadline.
    assert!(kill.last_back_ms < 2_500, "{rc:?}");
    assert!(kill.downtime.max() < 2.5, "{rc:?}");
    assert_eq!(rc.attempts.iter().sum::<u64>(), kill.attempts);
    assert_eq!(rc.returns.iter().sum::<u64>(), kill.reconnected);
    // Nothing before the kill: the series begin at the measured phase.
    assert!(rc.attempts[..10].iter().all(|n| *n == 0), "{rc:?}");
    // Back and held to the end: healthy at the deadline.
    assert_eq!((n.connected, n.survived), (300, 300), "{n:?}");
    // The replicas' own counters, read while the cell ran: the two left admitted every
    // reconnection, and hold every connection at the end; the killed one is down.
    assert_eq!(
        rc.server_accepts.iter().sum::<u64>(),
        kill.reconnected,
        "{rc:?}"
    );
    assert_eq!(rc.replicas_held.len(), 3, "{rc:?}");
    assert_eq!(rc.replicas_held.iter().filter(|h| h.is_none()).count(), 1);
    assert_eq!(
        rc.replicas_held.iter().flatten().sum::<u64>(),
        300,
        "{rc:?}"
    );
    let text = r.render();
    assert!(
        text.contains(&format!(
            "kill 1 replica at 1s: {} dropped, {} back (all within",
            kill.dropped, kill.reconnected
        )),
        "{text}"
    );
    assert!(text.contains(", the replicas admitting at most "), "{text}");
    assert!(text.contains("- (down)"), "{text}");
}

/// A replica killed and started again 300 ms later, its connections back within 50 ms: they
/// all reconnected to the two left, and stay there. At the window's end it holds none of its
/// share, and the finding says so.
#[test]
fn a_replica_started_again_after_its_connections_came_back_never_takes_its_share_back() {
    let r = storm(
        "storm-share",
        300,
        "{policy: fixed, delay: 50ms}",
        "{replicas: 1, restartAfter: 300ms}",
    );
    let c = only(&r);
    let rc = c.measure.reconnect.as_ref().expect("reconnect figures");
    let kill = &rc.storms[1];
    assert_eq!(kill.reconnected, kill.dropped, "{rc:?}");
    assert!(kill.last_back_ms < 300, "back before the restart: {rc:?}");
    let held: Vec<u64> = rc.replicas_held.iter().flatten().copied().collect();
    assert_eq!(held.len(), 3, "all three up at the end: {rc:?}");
    assert_eq!(held.iter().sum::<u64>(), 300, "{rc:?}");
    assert_eq!(held.iter().min(), Some(&0), "{rc:?}");
    let findings = wsload_report::findings(&r);
    let share: Vec<_> = findings
        .iter()
        .filter(|f| f.rule == wsload_report::Rule::ShareNotTakenBack)
        .collect();
    assert_eq!(share.len(), 1, "{findings:?}");
    assert!(
        share[0]
            .evidence
            .contains(" held 0 of 300 connections at the window's end, an even share 100"),
        "{}",
        share[0].evidence
    );
}

#[test]
fn without_a_policy_the_dropped_stay_down() {
    let r = storm("storm-down", 150, "{policy: none}", "{replicas: 1}");
    let c = only(&r);
    let n = &c.measure.counts;
    let rc = c
        .measure
        .reconnect
        .as_ref()
        .expect("drops are counted by window");
    let kill = &rc.storms[1];
    assert!(kill.dropped > 0, "{rc:?}");
    assert_eq!(
        (kill.reconnected, kill.attempts, kill.never_back()),
        (0, 0, kill.dropped)
    );
    assert_eq!(n.survived + kill.dropped, 150, "{n:?}");
}

#[test]
fn a_policy_that_runs_out_of_attempts_gives_up_counting_each_refusal() {
    // Every replica killed, back only after the cell: each dropped connection tries twice,
    // is refused twice, and gives up.
    let r = storm(
        "storm-give-up",
        60,
        "{policy: steps, delays: [0s, 100ms], maxAttempts: 2}",
        "{replicas: 3, restartAfter: 10s}",
    );
    let c = only(&r);
    let rc = c.measure.reconnect.as_ref().expect("figures");
    let kill = &rc.storms[1];
    assert_eq!(kill.dropped, 60, "{rc:?}");
    assert_eq!(
        (kill.attempts, kill.reconnected, kill.gave_up),
        (120, 0, 60),
        "{rc:?}"
    );
    // Refused by the port no one listens on; an attempt the instant after the kill may
    // still reach a listener its dying process has not closed yet, and be cut there.
    assert_eq!(kill.failed.values().sum::<u64>(), 120, "{rc:?}");
    assert!(
        kill.failed
            .keys()
            .all(|k| matches!(k, ConnectError::Refused | ConnectError::ClosedEarly)),
        "{rc:?}"
    );
    assert!(
        kill.failed.get(&ConnectError::Refused) > Some(&60),
        "{rc:?}"
    );
    assert_eq!(c.measure.counts.survived, 0);
    let text = r.render();
    assert!(
        text.contains("60 never back, 60 after the policy's last attempt"),
        "{text}"
    );
}

#[test]
fn a_rolling_restart_drops_every_connection_with_1001_and_all_come_back() {
    let r = run(&spec(
        "storm-roll",
        "  target: {server: {replicas: 3}}\n  scenario: sustainedHold\n  connections: [150]\n  duration: 5s\n  warmup: 0s\n  ping: {interval: 500ms, timeout: 1s}\n  reconnect: {policy: exponential, delay: 50ms, maxDelay: 400ms, jitter: full}\n  disruptions:\n    - at: 1s\n      restart: {}\n",
    ));
    let c = only(&r);
    let n = &c.measure.counts;
    let rc = c.measure.reconnect.as_ref().expect("figures");
    let roll = &rc.storms[1];
    assert_eq!(roll.what, "rolling restart at 1s");
    // Every replica restarted: every connection dropped once at least (one that came back to
    // a replica restarted later dropped again), each by the server's 1001.
    assert!(roll.dropped >= 150, "{rc:?}");
    assert_eq!(n.dropped_total(), roll.dropped, "{n:?}");
    assert_eq!(
        n.close_codes.get("1001").copied(),
        Some(roll.dropped),
        "{n:?}"
    );
    assert_eq!(roll.reconnected, roll.dropped, "{rc:?}");
    assert_eq!((n.connected, n.survived), (150, 150), "{n:?}");
}

#[test]
fn a_close_disruption_drops_exactly_the_share_it_picks_and_they_come_back() {
    close_share("1s");
}

/// At the measured phase's first instant too: every hold begins a moment after it, and
/// still every connection the draw picks is closed.
#[test]
fn a_close_at_the_phase_start_still_drops_its_whole_share() {
    close_share("0s");
}

fn close_share(at: &str) {
    let r = run(&spec(
        &format!("storm-close-{}", at.trim_end_matches('s')),
        &format!(
            "  target: {{server: {{}}}}\n  scenario: sustainedHold\n  connections: [200]\n  duration: 3s\n  warmup: 0s\n  ping: {{interval: 500ms, timeout: 1s}}\n  reconnect: {{policy: immediate}}\n  disruptions:\n    - at: {at}\n      close: {{share: 50%}}\n"
        ),
    ));
    let c = only(&r);
    let n = &c.measure.counts;
    let rc = c.measure.reconnect.as_ref().expect("figures");
    let close = &rc.storms[1];
    assert_eq!(close.what, format!("close 50% at {at}"));
    // The connections the draw picks, by their numbers (0..200 in one process).
    let share = wsload_spec::reconnect::CloseSpec {
        share: wsload_spec::Percent(0.5),
    };
    let picked = (0..200).filter(|conn| share.picks(*conn, 0)).count() as u64;
    assert!((70..=130).contains(&picked), "{picked}");
    assert_eq!(close.dropped, picked, "{rc:?}");
    assert_eq!(
        n.dropped.get(&Dropped::Disrupted).copied(),
        Some(picked),
        "{n:?}"
    );
    assert_eq!(close.reconnected, picked, "{rc:?}");
    assert_eq!((n.connected, n.survived), (200, 200), "{n:?}");
}

/// Each tier begins with every replica: the one killed for good in the first is started again
/// before the second dials, so the second's kill leaves one to come back to.
#[test]
fn every_tier_begins_with_every_replica() {
    let r = run(&spec(
        "storm-tiers",
        "  target: {server: {replicas: 2}}\n  scenario: sustainedHold\n  connections: [60, 90]\n  duration: 2s\n  warmup: 0s\n  ping: {interval: 500ms, timeout: 1s}\n  reconnect: {policy: immediate}\n  disruptions:\n    - at: 1s\n      kill: {replicas: 1}\n",
    ));
    assert_eq!(r.cells.len(), 2);
    for c in &r.cells {
        let rc = c.measure.reconnect.as_ref().expect("figures");
        let kill = &rc.storms[1];
        assert!(kill.dropped > 0, "[{}] {rc:?}", c.label);
        assert_eq!(
            (kill.reconnected, kill.never_back()),
            (kill.dropped, 0),
            "[{}] {rc:?}",
            c.label
        );
        assert_eq!(
            c.measure.counts.survived,
            u64::from(c.connections),
            "[{}]",
            c.label
        );
    }
}

/// A fanout's subscribers dropped by a `close` and back 300 ms later, subscribed again: what
/// was published while they were away is missing for exactly them, every missing delivery of
/// the window is one of their gaps, and the subscribers never dropped missed nothing.
#[test]
fn a_fanouts_dropped_subscribers_miss_what_was_published_meanwhile_and_only_they_do() {
    let subscribers = 60u64;
    let r = run(&spec(
        "storm-fanout-close",
        "  target: {server: {profile: pubsub}}\n  scenario: fanout\n  connections: [60]\n  duration: 3s\n  warmup: 300ms\n  fanout: {topics: 2, drain: 1s}\n  rate: {messagesPerSecond: 200}\n  reconnect: {policy: fixed, delay: 300ms}\n  disruptions:\n    - at: 1s\n      close: {share: 50%}\n",
    ));
    let c = only(&r);
    let rc = c.measure.reconnect.as_ref().expect("figures");
    let close = &rc.storms[1];
    let share = wsload_spec::reconnect::CloseSpec {
        share: wsload_spec::Percent(0.5),
    };
    // A fanout's closes pick among its subscribers (0..60), never its publishers.
    let picked = (0..subscribers)
        .filter(|conn| share.picks(*conn, 0))
        .count() as u64;
    assert!((15..=45).contains(&picked), "{picked}");
    assert_eq!(
        (close.dropped, close.reconnected),
        (picked, picked),
        "{rc:?}"
    );
    assert_eq!(rc.storms[0].dropped, 0, "{rc:?}");
    // 100 publishes a second per topic, away 300 ms and more: every one of them missed some.
    assert_eq!(close.gapped, picked, "{rc:?}");
    assert!(close.gaps >= picked * 20, "{rc:?}");
    // At most the longest time away's publishes each, with room for those in flight at
    // the close and for the subscription taking effect.
    let most = (close.downtime.max() * 100.0).ceil() as u64 + 10;
    assert!(close.gaps <= picked * most, "{rc:?}");
    assert_eq!(rc.gaps_undropped, 0, "{rc:?}");
    let f = c.measure.counts.fanout.as_ref().expect("a fanout tally");
    let t = f.totals(f.by_server);
    assert!(t.publishes > 500, "{t:?}");
    // Every delivery the window missed is one of theirs, counted once.
    assert_eq!(t.missing, close.gaps, "{t:?} {rc:?}");
    assert_eq!((t.duplicates, t.too_late), (0, 0), "{t:?}");
    assert_eq!(f.publishers_failed, 0);
    let text = r.render();
    assert!(
        text.contains(&format!(
            "fan-out gaps {} (after {picked} of its drops)",
            close.gaps
        )),
        "{text}"
    );
    assert!(text.contains("gaps no drop explains: 0"), "{text}");
    assert!(
        text.contains(&format!(
            "{} of the gaps are what subscribers missed while dropped and coming back",
            close.gaps
        )),
        "{text}"
    );
}

/// The fanout's only replica killed and started again: subscribers and publishers all
/// dropped, all back, the publishers publishing what fell due while they were down, the
/// subscribers reading on; every gap is a dropped subscriber's.
#[test]
fn a_fanouts_killed_server_drops_everyone_and_all_come_back_reading() {
    let r = run(&spec(
        "storm-fanout-kill",
        "  target: {server: {profile: pubsub}}\n  scenario: fanout\n  connections: [40]\n  duration: 4s\n  warmup: 300ms\n  fanout: {topics: 2, drain: 1s}\n  rate: {messagesPerSecond: 200}\n  reconnect: {policy: exponential, delay: 100ms, maxDelay: 400ms, jitter: full}\n  disruptions:\n    - at: 1s\n      kill: {replicas: 1, restartAfter: 300ms}\n",
    ));
    let c = only(&r);
    let rc = c.measure.reconnect.as_ref().expect("figures");
    let kill = &rc.storms[1];
    // 40 subscribers and 2 publishers.
    assert_eq!((kill.dropped, kill.reconnected), (42, 42), "{rc:?}");
    assert_eq!(rc.gaps_undropped, 0, "{rc:?}");
    let f = c.measure.counts.fanout.as_ref().expect("a fanout tally");
    assert_eq!(f.publishers_failed, 0, "{f:?}");
    let t = f.totals(f.by_server);
    // Back for the last 2.5 s of the window at 100 a second per topic: most of it delivered.
    assert!(t.delivered * 2 > t.expected, "{t:?}");
    assert!(t.missing >= kill.gaps, "{t:?} {rc:?}");
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.survived), (42, 42), "{n:?}");
}
