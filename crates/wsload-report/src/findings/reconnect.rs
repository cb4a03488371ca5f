//! What a cell's reconnect figures show (`Reconnects`): a storm that overwhelmed the replicas
//! left (the reconnections' handshakes far slower than the first connections', the attempts
//! in one burst) and connections that never came back, each per disruption with its figures.

use super::{Finding, Rule, finding};
use crate::numbers::{ms, num};
use crate::reconnect::{Reconnects, Storm};
use crate::result::CellResult;

/// Reconnection handshakes whose p99 is this many times the first connections' were slowed by
/// the storm itself: the first connections opened in measured batches, these all at once.
pub const HERD_SLOWDOWN: f64 = 2.0;
/// Attempts at a peak rate below this (per second) are no herd, however slow.
const HERD_MIN_PEAK: u64 = 100;
/// The first delay a herd finding proposes, in seconds: socket.io-client's.
const SPREAD_S: f64 = 1.0;

/// Every rule of one cell with reconnect figures (none without).
pub fn cell(c: &CellResult) -> Vec<Finding> {
    let Some(r) = &c.measure.reconnect else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, s) in r.storms.iter().enumerate() {
        out.extend(herd(c, r, i, s));
        out.extend(never_back(c, s));
    }
    out.extend(share_not_taken_back(c, r));
    out
}

/// A replica holding less than this part of an even share at the window's end never took
/// its share back.
const SHARE_TAKEN_BACK: f64 = 0.5;

/// After a disruption that dropped connections, a replica holds far less than an even share
/// at the window's end: long-lived connections do not move back to a replica that returns.
fn share_not_taken_back(c: &CellResult, r: &Reconnects) -> Option<Finding> {
    // The replicas up at the end: one still down took nothing back, and says so elsewhere.
    let up: Vec<(usize, u64)> = r
        .replicas_held
        .iter()
        .enumerate()
        .filter_map(|(i, n)| Some((i, (*n)?)))
        .collect();
    let dropped: u64 = r.storms.iter().skip(1).map(|s| s.dropped).sum();
    if up.len() < 2 || dropped == 0 {
        return None;
    }
    let total: u64 = up.iter().map(|(_, n)| n).sum();
    let even = total as f64 / up.len() as f64;
    let short: Vec<String> = up
        .iter()
        .filter(|(_, n)| (*n as f64) < even * SHARE_TAKEN_BACK)
        .map(|(i, n)| format!("replica {i} held {}", num(*n as f64)))
        .collect();
    if short.is_empty() {
        return None;
    }
    finding(
        Rule::ShareNotTakenBack,
        c,
        "a replica never took its share of connections back: those it dropped reconnected to the replicas left and stayed there (long-lived connections do not rebalance); the server closing a share of its connections after a replica returns, or clients reconnecting over time, spreads them again",
        format!(
            "{} of {} connections at the window's end, an even share {}; held by each: {}",
            short.join(", "),
            num(total as f64),
            num(even.round()),
            up.iter()
                .map(|(_, n)| num(*n as f64))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
}

fn what(s: &Storm) -> String {
    if s.what.is_empty() {
        "the drops before any disruption".into()
    } else {
        s.what.clone()
    }
}

/// The reconnections of a window came as one burst and the replicas left answered them slowly.
fn herd(c: &CellResult, r: &Reconnects, i: usize, s: &Storm) -> Option<Finding> {
    let first = c.measure.hists.connect.percentile(99.0);
    let during = s.handshake.percentile(99.0);
    let peak = r.peak_attempts(s.from_ms, r.window_end(i));
    if s.handshake.is_empty()
        || first <= 0.0
        || during < first * HERD_SLOWDOWN
        || peak < HERD_MIN_PEAK
    {
        return None;
    }
    // Full jitter from a first delay of D spreads the first attempts evenly over D: about
    // dropped / D a second at most, against the peak seen.
    let spread = if r.jittered {
        "the policy's jitter did not spread them enough: a longer first delay spreads them wider"
            .to_string()
    } else {
        format!(
            "a backoff with jitter spreads them: full jitter over a first delay of {SPREAD_S:.0} s would have begun at most ~{}/s (policy: exponential, delay: {SPREAD_S:.0}s, jitter: full)",
            num((s.dropped as f64 / SPREAD_S).ceil())
        )
    };
    finding(
        Rule::ReconnectHerd,
        c,
        &format!(
            "the reconnections after {} came as a herd and the replicas left took them slowly; {spread}",
            what(s)
        ),
        format!(
            "attempts at {}/s in their busiest 100 ms, {} in all for {} dropped; reconnect handshake p99 {} against the first connections' {} ({:.1}x)",
            num(peak as f64),
            num(s.attempts as f64),
            num(s.dropped as f64),
            ms(during),
            ms(first),
            during / first
        ),
    )
}

/// Connections a window dropped that were not back at the cell's end.
fn never_back(c: &CellResult, s: &Storm) -> Option<Finding> {
    let missing = s.never_back();
    if missing == 0 {
        return None;
    }
    let failed: Vec<String> = s
        .failed
        .iter()
        .map(|(k, n)| format!("{} x{}", k.label(), num(*n as f64)))
        .collect();
    let failed = if failed.is_empty() {
        "no attempt failed".to_string()
    } else {
        format!("failed attempts: {}", failed.join(", "))
    };
    let cause = if s.attempts == 0 {
        "connections dropped and never came back: no reconnect policy is set (reconnect.policy), or the cell ended before their first attempt".to_string()
    } else if s.gave_up == missing {
        "connections dropped and never came back: each gave up after the policy's last attempt"
            .to_string()
    } else {
        "connections dropped and were not back by the cell's end: their attempts failed, or their backoff outlasted the cell".to_string()
    };
    finding(
        Rule::NeverBack,
        c,
        &cause,
        format!(
            "{} of {} dropped after {} never back, {} gave up; {} attempts, {failed}",
            num(missing as f64),
            num(s.dropped as f64),
            what(s),
            num(s.gave_up as f64),
            num(s.attempts as f64)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::ConnectError;
    use std::time::Duration;

    /// A cell whose first connections took 2 ms each, with `r`'s reconnect figures.
    fn cell(r: Reconnects) -> CellResult {
        let mut c = crate::fixtures::report().cells[0].clone();
        c.measure.hists.connect = Default::default();
        for _ in 0..100 {
            c.measure.hists.connect.record(Duration::from_millis(2));
        }
        c.measure.reconnect = Some(r);
        c
    }

    /// 1,000 dropped at 10 s and back, each attempt at `attempt_ms(i)` and its handshake
    /// taking `handshake`.
    fn storm(jittered: bool, attempt_ms: impl Fn(u64) -> u64, handshake: Duration) -> Reconnects {
        let mut r = Reconnects::new(
            "p".into(),
            jittered,
            &[(10_000, "kill 1 replica at 10s".into())],
        );
        for i in 0..1_000 {
            r.dropped(1);
            r.attempt(1, attempt_ms(i));
            r.back(1, attempt_ms(i) + 5, Duration::from_millis(50), handshake);
        }
        r
    }

    #[test]
    fn a_replica_back_with_few_connections_at_the_end_never_took_its_share_back() {
        let mut r = storm(true, |i| 10_000 + i, Duration::from_millis(2));
        r.replicas_held = vec![Some(480), Some(490), Some(30)];
        let f = super::cell(&cell(r.clone()));
        let share: Vec<_> = f
            .iter()
            .filter(|f| f.rule == Rule::ShareNotTakenBack)
            .collect();
        assert_eq!(share.len(), 1, "{f:?}");
        assert!(
            share[0].evidence.starts_with(
                "replica 2 held 30 of 1000 connections at the window's end, an even share 333"
            ),
            "{}",
            share[0].evidence
        );
        // Spread within half an even share, or read from one replica only: nothing to say.
        r.replicas_held = vec![Some(400), Some(430), Some(170)];
        assert!(
            !super::cell(&cell(r.clone()))
                .iter()
                .any(|f| f.rule == Rule::ShareNotTakenBack)
        );
        // A replica still down is not one that came back.
        r.replicas_held = vec![Some(500), Some(500), None];
        assert!(
            !super::cell(&cell(r.clone()))
                .iter()
                .any(|f| f.rule == Rule::ShareNotTakenBack)
        );
        r.replicas_held = vec![Some(1000)];
        assert!(
            !super::cell(&cell(r))
                .iter()
                .any(|f| f.rule == Rule::ShareNotTakenBack)
        );
    }

    #[test]
    fn a_herd_without_jitter_is_named_with_the_spread_jitter_gives() {
        // Every attempt within 10 ms of the kill, handshakes ten times the first ones'.
        let c = cell(storm(false, |i| 10_000 + i % 10, Duration::from_millis(20)));
        let f = cell_findings(&c);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].rule, Rule::ReconnectHerd);
        assert!(
            f[0].cause
                .contains("after kill 1 replica at 10s came as a herd"),
            "{f:?}"
        );
        assert!(
            f[0].cause.contains("would have begun at most ~1000/s"),
            "{f:?}"
        );
        // 1,000 attempts in one 100 ms bucket: 10,000 a second at the peak.
        assert!(
            f[0].evidence.starts_with("attempts at 10.0K/s in their busiest 100 ms, 1000 in all for 1000 dropped; reconnect handshake p99 20."),
            "{f:?}"
        );
    }

    #[test]
    fn attempts_spread_out_or_handshakes_unharmed_are_no_herd() {
        // Spread over 5 s: 20 per 100 ms, 200/s at the peak, but handshakes as fast as the first.
        let spread = cell(storm(true, |i| 10_000 + i * 5, Duration::from_millis(2)));
        assert!(cell_findings(&spread).is_empty());
        // Slow handshakes, but a trickle: 2 per 100 ms.
        let trickle = cell(storm(true, |i| 10_000 + i * 50, Duration::from_millis(20)));
        assert!(cell_findings(&trickle).is_empty());
    }

    #[test]
    fn connections_never_back_are_named_with_why() {
        let mut r = Reconnects::new("p".into(), true, &[(1_000, "kill 3 replicas at 1s".into())]);
        for _ in 0..60 {
            r.dropped(1);
            for _ in 0..2 {
                r.attempt(1, 1_100);
                r.failed(1, ConnectError::Refused);
            }
            r.gave_up(1);
        }
        let f = cell_findings(&cell(r));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].rule, Rule::NeverBack);
        assert!(
            f[0].cause
                .contains("each gave up after the policy's last attempt"),
            "{f:?}"
        );
        assert_eq!(
            f[0].evidence,
            "60 of 60 dropped after kill 3 replicas at 1s never back, 60 gave up; 120 attempts, failed attempts: refused x120"
        );
    }

    fn cell_findings(c: &CellResult) -> Vec<Finding> {
        super::cell(c)
    }
}
