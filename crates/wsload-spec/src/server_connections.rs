//! What the server replicas counted of their connections over a cell (the reference server's
//! counters, `wsload_contract::server_metrics`), summed over the replicas: the same figures
//! in a local run's result and in a LoadTest's status, where replicas can be many and each
//! cell must stay small.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Every replica's connection counters over a cell, summed, with how the admissions spread
/// over the replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerConnections {
    /// Replicas read.
    pub replicas: u32,
    /// Admitted after the WebSocket handshake.
    pub accepted: u64,
    /// Refused before admission, by reason (`handshake_timeout`, `capacity`, ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rejected: BTreeMap<String, u64>,
    /// Admitted connections that ended, by reason (`idle_timeout`, `client`, ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub closed: BTreeMap<String, u64>,
    /// The fewest and the most one replica admitted; unset when each replica's reading
    /// before the cell is not at hand (an operator restarted during it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_min: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_max: Option<u64>,
    /// The replica that admitted the most (a metrics URL, or a server pod's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busiest: Option<String>,
}

impl ServerConnections {
    pub fn rejected_for(&self, reason: &str) -> u64 {
        self.rejected.get(reason).copied().unwrap_or(0)
    }

    pub fn closed_for(&self, reason: &str) -> u64 {
        self.closed.get(reason).copied().unwrap_or(0)
    }

    /// The sums of `self` and `other` (the spread is not additive: unset).
    pub fn plus(&self, other: &ServerConnections) -> ServerConnections {
        ServerConnections {
            replicas: self.replicas.max(other.replicas),
            accepted: self.accepted.saturating_add(other.accepted),
            rejected: add(&self.rejected, &other.rejected),
            closed: add(&self.closed, &other.closed),
            ..ServerConnections::default()
        }
    }

    /// What the sums grew by from `before` to `self` (a count that went down, a replica that
    /// restarted, reads as no growth, never as a wrapped-around count; reasons that did not
    /// grow are left out). The spread is not a difference of sums: unset.
    pub fn since(&self, before: &ServerConnections) -> ServerConnections {
        let by_reason = |after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>| {
            after
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(*before.get(k).unwrap_or(&0))))
                .filter(|(_, v)| *v > 0)
                .collect()
        };
        ServerConnections {
            replicas: self.replicas,
            accepted: self.accepted.saturating_sub(before.accepted),
            rejected: by_reason(&self.rejected, &before.rejected),
            closed: by_reason(&self.closed, &before.closed),
            ..ServerConnections::default()
        }
    }
}

fn add(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut out = a.clone();
    for (k, v) in b {
        let e = out.entry(k.clone()).or_insert(0);
        *e = e.saturating_add(*v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sums(accepted: u64, rejected: &[(&str, u64)], closed: &[(&str, u64)]) -> ServerConnections {
        let map = |p: &[(&str, u64)]| p.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        ServerConnections {
            replicas: 2,
            accepted,
            rejected: map(rejected),
            closed: map(closed),
            ..ServerConnections::default()
        }
    }

    #[test]
    fn sums_add_and_their_growth_leaves_out_what_did_not_grow() {
        let base = sums(10, &[("capacity", 1)], &[("client", 4)]);
        let cell = sums(5, &[("handshake_timeout", 3)], &[("client", 2)]);
        let after = base.plus(&cell);
        assert_eq!(
            after,
            sums(
                15,
                &[("capacity", 1), ("handshake_timeout", 3)],
                &[("client", 6)]
            )
        );
        assert_eq!(after.since(&base), cell);
        // A replica restarted: its counts went down, which is no growth.
        assert_eq!(base.since(&after), sums(0, &[], &[]));
    }

    #[test]
    fn status_leaves_out_what_is_unset() {
        let json = serde_json::to_value(sums(3, &[], &[])).expect("json");
        assert_eq!(json, serde_json::json!({"replicas": 2, "accepted": 3}));
    }
}
