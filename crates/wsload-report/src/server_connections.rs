//! What each server replica counted of its connections over a cell, read by the conductor from
//! the reference server's counters (`wsload_contract::server_metrics`), so that a connection
//! the clients saw closed early or reset is set beside what the server did with it: gave up
//! on its handshake, closed it for idleness, refused it at its cap.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use wsload_spec::server_connections::ServerConnections;

/// One replica's connection counters, or their increase over a cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaConnections {
    /// The replica, as the conductor reached it (its metrics endpoint).
    pub replica: String,
    /// Admitted after the WebSocket handshake.
    pub accepted: u64,
    /// Refused before admission, by reason (`handshake_timeout`, `capacity`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rejected: BTreeMap<String, u64>,
    /// Admitted connections that ended, by reason (`idle_timeout`, `client`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub closed: BTreeMap<String, u64>,
}

impl ReplicaConnections {
    /// What grew from `before` to `self` (a counter that went down, a restarted replica,
    /// counts from zero).
    pub fn increase(&self, before: &ReplicaConnections) -> ReplicaConnections {
        let grew = |a: u64, b: u64| if a >= b { a - b } else { a };
        let by_reason = |after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>| {
            after
                .iter()
                .map(|(k, v)| (k.clone(), grew(*v, before.get(k).copied().unwrap_or(0))))
                .filter(|(_, v)| *v > 0)
                .collect()
        };
        ReplicaConnections {
            replica: self.replica.clone(),
            accepted: grew(self.accepted, before.accepted),
            rejected: by_reason(&self.rejected, &before.rejected),
            closed: by_reason(&self.closed, &before.closed),
        }
    }

    pub fn rejected_for(&self, reason: &str) -> u64 {
        self.rejected.get(reason).copied().unwrap_or(0)
    }

    pub fn closed_for(&self, reason: &str) -> u64 {
        self.closed.get(reason).copied().unwrap_or(0)
    }
}

/// Each replica's increase from `before` to `after`, matched by replica (one missing before
/// counts from zero).
pub fn increase(
    before: &[ReplicaConnections],
    after: &[ReplicaConnections],
) -> Vec<ReplicaConnections> {
    after
        .iter()
        .map(|a| match before.iter().find(|b| b.replica == a.replica) {
            Some(b) => a.increase(b),
            None => a.clone(),
        })
        .collect()
}

/// The replicas' counts `per_replica` summed, with how the admissions spread over them: what
/// a cell's result carries. `None` without a replica.
pub fn summarize(per_replica: &[ReplicaConnections]) -> Option<ServerConnections> {
    let busiest = per_replica.iter().max_by_key(|r| r.accepted)?;
    let mut sum = total(per_replica);
    sum.accepted_min = per_replica.iter().map(|r| r.accepted).min();
    sum.accepted_max = Some(busiest.accepted);
    sum.busiest = Some(busiest.replica.clone());
    Some(sum)
}

/// The replicas' counts summed, without their spread: what a conductor keeps of a reading.
pub fn total(per_replica: &[ReplicaConnections]) -> ServerConnections {
    let one = |r: &ReplicaConnections| ServerConnections {
        replicas: 1,
        accepted: r.accepted,
        rejected: r.rejected.clone(),
        closed: r.closed.clone(),
        ..ServerConnections::default()
    };
    let mut sum = per_replica
        .iter()
        .fold(ServerConnections::default(), |s, r| s.plus(&one(r)));
    sum.replicas = u32::try_from(per_replica.len()).unwrap_or(u32::MAX);
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::replica;

    #[test]
    fn the_increase_is_per_replica_and_reason_and_drops_what_did_not_grow() {
        let before = [
            replica("a", 10, &[("handshake_timeout", 2)], &[("client", 5)]),
            replica("b", 7, &[], &[]),
        ];
        let after = [
            replica(
                "a",
                15,
                &[("handshake_timeout", 9)],
                &[("client", 5), ("idle_timeout", 3)],
            ),
            replica("b", 9, &[("capacity", 1)], &[]),
            replica("c", 4, &[], &[]),
        ];
        assert_eq!(
            increase(&before, &after),
            [
                replica("a", 5, &[("handshake_timeout", 7)], &[("idle_timeout", 3)]),
                replica("b", 2, &[("capacity", 1)], &[]),
                replica("c", 4, &[], &[]),
            ]
        );
    }

    #[test]
    fn a_replica_whose_counters_went_down_restarted_and_counts_from_zero() {
        let before = [replica("a", 100, &[], &[("client", 50)])];
        let after = [replica("a", 3, &[], &[("client", 1)])];
        assert_eq!(
            increase(&before, &after),
            [replica("a", 3, &[], &[("client", 1)])]
        );
    }

    #[test]
    fn a_cell_is_the_replicas_summed_with_the_fewest_and_most_admitted() {
        let cell = [
            replica("a", 5, &[("handshake_timeout", 7)], &[("idle_timeout", 3)]),
            replica("b", 9, &[("handshake_timeout", 1)], &[]),
            replica("c", 2, &[], &[("idle_timeout", 1)]),
        ];
        let s = summarize(&cell).expect("replicas");
        assert_eq!(s.replicas, 3);
        assert_eq!(s.accepted, 16);
        assert_eq!(s.rejected_for("handshake_timeout"), 8);
        assert_eq!(s.closed_for("idle_timeout"), 4);
        assert_eq!((s.accepted_min, s.accepted_max), (Some(2), Some(9)));
        assert_eq!(s.busiest.as_deref(), Some("b"));
        assert_eq!(summarize(&[]), None);
        let t = total(&cell);
        assert_eq!(
            (t.replicas, t.accepted, t.accepted_max, t.busiest),
            (3, 16, None, None)
        );
    }
}
