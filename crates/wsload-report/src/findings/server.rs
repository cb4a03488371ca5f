//! What the server replicas' own connection counters say of a cell (`server_connections`):
//! handshakes a replica gave up on, connections it closed as idle or refused at its cap, and
//! connections spread unevenly over the replicas. Each sets the server's count beside what the
//! clients saw of the same connections.

use super::{Finding, Rule, finding};
use crate::measure::{ConnectError, Dropped};
use crate::numbers::num;
use crate::result::CellResult;
use crate::server_connections::ServerConnections;
use wsload_contract::server_metrics::{closed, rejected};

/// Replicas whose busiest admitted more than this many times what the quietest did spread the
/// load unevenly enough to name.
pub const IMBALANCE: f64 = 2.0;
/// Fewer admissions per replica than this are too few to judge a spread by.
const IMBALANCE_MIN_PER_REPLICA: u64 = 100;

/// Every rule of one cell with replica counters (none without).
pub fn cell(c: &CellResult) -> Vec<Finding> {
    let Some(r) = &c.server_connections else {
        return Vec::new();
    };
    [
        handshake_timeout(c, r),
        idle_timeout(c, r),
        capacity(c, r),
        imbalance(c, r),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `N over K replicas`: a count summed over the replicas read.
fn over(n: u64, r: &ServerConnections) -> String {
    let s = if r.replicas == 1 { "" } else { "s" };
    format!("{} over {} replica{s}", num(n as f64), r.replicas)
}

/// What the clients counted of the same connections, for the evidence:
/// `; the clients counted closed_early 76.1K, reset 12`.
fn clients_saw(c: &CellResult, failed: &[ConnectError], dropped: &[Dropped]) -> String {
    let counts = &c.measure.counts;
    let seen: Vec<String> = failed
        .iter()
        .map(|k| (k.label(), counts.failed.get(k).copied().unwrap_or(0)))
        .chain(
            dropped
                .iter()
                .map(|k| (k.label(), counts.dropped.get(k).copied().unwrap_or(0))),
        )
        .filter(|(_, n)| *n > 0)
        .map(|(l, n)| format!("{l} {}", num(n as f64)))
        .collect();
    if seen.is_empty() {
        String::new()
    } else {
        format!("; the clients counted {}", seen.join(", "))
    }
}

/// Upgrades the server dropped for taking longer than its handshake timeout from the TCP
/// accept: the server's machine was too busy to answer them in time. The clients see these as
/// closed before ready (or reset) while opening.
pub fn handshake_timeout(c: &CellResult, r: &ServerConnections) -> Option<Finding> {
    let n = r.rejected_for(rejected::HANDSHAKE_TIMEOUT);
    (n > 0).then_some(())?;
    finding(
        Rule::ServerHandshakeTimeout,
        c,
        "the server dropped connections whose upgrade it did not finish within its handshake timeout (wsload-server --handshake-timeout, 10 s by default): the server's CPUs were too busy to answer upgrades in time; give the servers more CPU (replicas on other cores or nodes), open connections more slowly (connect.batchSize, connect.batchInterval), or raise the server's handshake timeout",
        format!(
            "{}: {}{}",
            rejected::HANDSHAKE_TIMEOUT,
            over(n, r),
            clients_saw(
                c,
                &[ConnectError::ClosedEarly, ConnectError::Timeout],
                &[Dropped::Reset]
            )
        ),
    )
}

/// Connections the server closed because nothing came from them for its idle timeout: the
/// clients' keepalive (ping.interval) was longer than it, or late on a busy client.
pub fn idle_timeout(c: &CellResult, r: &ServerConnections) -> Option<Finding> {
    let n = r.closed_for(closed::IDLE_TIMEOUT);
    (n > 0).then_some(())?;
    finding(
        Rule::ServerIdleTimeout,
        c,
        "the server closed connections that sent nothing for its idle timeout (wsload-server --idle-timeout, 60 s by default): set ping.interval well under it; if it is already, the load generator was too busy to send its pings on time (its CPU, more shards)",
        format!(
            "{}: {}{}",
            closed::IDLE_TIMEOUT,
            over(n, r),
            clients_saw(c, &[], &[Dropped::ServerClose, Dropped::Reset])
        ),
    )
}

/// Connections the server refused at its connection cap.
pub fn capacity(c: &CellResult, r: &ServerConnections) -> Option<Finding> {
    let n = r.rejected_for(rejected::CAPACITY);
    (n > 0).then_some(())?;
    finding(
        Rule::ServerCapacity,
        c,
        "the server refused connections at its cap (wsload-server --max-connections): raise the cap or add replicas",
        format!(
            "{}: {}{}",
            rejected::CAPACITY,
            over(n, r),
            clients_saw(c, &[ConnectError::UpgradeRejected], &[Dropped::ServerClose])
        ),
    )
}

/// Replicas admitting very different shares: one SO_REUSEPORT group (or a Service) hashes
/// connections by their addresses, so few source addresses or ports can load some replicas
/// far more than others, and the busiest one's limits are met first.
pub fn imbalance(c: &CellResult, r: &ServerConnections) -> Option<Finding> {
    if r.replicas < 2 {
        return None;
    }
    let (min, max) = (r.accepted_min?, r.accepted_max?);
    let per_replica = r.accepted / u64::from(r.replicas);
    if per_replica < IMBALANCE_MIN_PER_REPLICA || (max as f64) <= IMBALANCE * (min.max(1) as f64) {
        return None;
    }
    let busiest = r
        .busiest
        .as_ref()
        .map(|b| format!("; most at {b}"))
        .unwrap_or_default();
    finding(
        Rule::ServerImbalance,
        c,
        "the server replicas admitted very unequal shares of the connections: the busiest meets its limits first; spread the clients' source addresses or ports wider, or balance with a proxy",
        format!(
            "accepted per replica: {} to {} over {} replicas (mean {}{busiest})",
            num(min as f64),
            num(max as f64),
            r.replicas,
            num(per_replica as f64)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{replica, shard};
    use crate::server_connections::{ReplicaConnections, summarize};

    fn cell_with(r: Vec<ReplicaConnections>) -> CellResult {
        let mut c = shard(0, 100, 1, 1).cells.remove(0);
        c.server_connections = summarize(&r);
        c
    }

    fn counters(c: &CellResult) -> &ServerConnections {
        c.server_connections.as_ref().expect("counters")
    }

    #[test]
    fn a_quiet_server_says_nothing() {
        let c = cell_with(vec![
            replica("a", 500, &[], &[("client", 500)]),
            replica("b", 520, &[], &[]),
        ]);
        assert_eq!(cell(&c), []);
        assert_eq!(cell(&cell_with(Vec::new())), []);
    }

    #[test]
    fn handshake_timeouts_are_named_with_the_replicas_and_what_the_clients_saw() {
        let mut c = cell_with(vec![
            replica("http://r1/metrics", 500, &[("handshake_timeout", 30)], &[]),
            replica("http://r2/metrics", 480, &[("handshake_timeout", 70)], &[]),
            replica("http://r3/metrics", 510, &[], &[]),
        ]);
        c.measure
            .counts
            .failed
            .insert(ConnectError::ClosedEarly, 100);
        let f = cell(&c);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].rule, Rule::ServerHandshakeTimeout);
        assert_eq!(
            f[0].evidence,
            "handshake_timeout: 100 over 3 replicas; the clients counted closed_early 100"
        );
        assert!(f[0].cause.contains("--handshake-timeout"), "{}", f[0].cause);
    }

    #[test]
    fn idle_closes_and_the_cap_are_each_their_own_finding() {
        let c = cell_with(vec![replica(
            "a",
            400,
            &[("capacity", 5)],
            &[("idle_timeout", 9)],
        )]);
        let rules: Vec<Rule> = cell(&c).iter().map(|f| f.rule).collect();
        assert_eq!(rules, [Rule::ServerIdleTimeout, Rule::ServerCapacity]);
        assert_eq!(
            idle_timeout(&c, counters(&c)).expect("idle").evidence,
            "idle_timeout: 9 over 1 replica"
        );
    }

    #[test]
    fn an_uneven_spread_is_named_past_twice_the_quietest() {
        let even = cell_with(vec![
            replica("a", 1000, &[], &[]),
            replica("b", 1900, &[], &[]),
        ]);
        assert_eq!(imbalance(&even, counters(&even)), None);
        let uneven = cell_with(vec![
            replica("a", 1000, &[], &[]),
            replica("b", 2100, &[], &[]),
        ]);
        let f = imbalance(&uneven, counters(&uneven)).expect("uneven");
        assert_eq!(
            f.evidence,
            "accepted per replica: 1000 to 2100 over 2 replicas (mean 1550; most at b)"
        );
        // Too few to judge.
        let few = cell_with(vec![replica("a", 10, &[], &[]), replica("b", 90, &[], &[])]);
        assert_eq!(imbalance(&few, counters(&few)), None);
    }

    #[test]
    fn without_each_replicas_reading_the_sums_still_speak_but_the_spread_does_not() {
        let mut c = cell_with(vec![
            replica("a", 1000, &[("handshake_timeout", 4)], &[]),
            replica("b", 3000, &[], &[]),
        ]);
        let r = c.server_connections.as_mut().expect("counters");
        (r.accepted_min, r.accepted_max, r.busiest) = (None, None, None);
        let rules: Vec<Rule> = cell(&c).iter().map(|f| f.rule).collect();
        assert_eq!(rules, [Rule::ServerHandshakeTimeout]);
    }
}
