//! wsload-server's connection counters in a cluster run: every replica read before the first
//! cell and once every shard finished each cell, so that the merged result's findings say what
//! the servers did with the connections (handshakes given up on, idle closes, refusals at the
//! cap, admissions spread unevenly).
//!
//! Status keeps the sums (the baseline, each cell's increase): a restarted operator goes on
//! from them. How the admissions spread over the replicas needs each replica's reading before
//! the cell, which only memory keeps: a restarted operator leaves one cell's spread unset.

use super::Context;
use super::view::View;
use crate::names;
use crate::server_counter::ServerCounter;
use kube::ResourceExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use wsload_contract::server_metrics::{closed, rejected};
use wsload_control::server_connections;
use wsload_report::server_connections::{self as counts, ReplicaConnections, ServerConnections};
use wsload_spec::status::{CellStatus, MAX_CONNECTION_CELLS};

/// Each test's replicas as last read, by LoadTest uid.
pub type Readings = Mutex<HashMap<String, Reading>>;

/// Every replica's counters when cell `before` began.
#[derive(Debug)]
pub struct Reading {
    before: u32,
    replicas: Vec<ReplicaConnections>,
}

fn lock(m: &Readings) -> MutexGuard<'_, HashMap<String, Reading>> {
    // Readings stay usable after a panic elsewhere.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops what is kept in memory for a test (finished or deleted).
pub(super) fn forget(ctx: &Context, uid: &str) {
    lock(&ctx.connections).remove(uid);
}

/// What every cell recorded so far says the counters grew by, by cell index.
pub(super) fn per_cell(cells: &[CellStatus]) -> Vec<Option<ServerConnections>> {
    cells.iter().map(|c| c.server_connections.clone()).collect()
}

/// Only the reasons wsload-server counts: a server with labels of its own would make status
/// grow without bound.
fn known(c: ServerConnections) -> ServerConnections {
    let keep = |m: BTreeMap<String, u64>, all: &[&str]| {
        m.into_iter()
            .filter(|(k, _)| all.contains(&k.as_str()))
            .collect()
    };
    ServerConnections {
        rejected: keep(c.rejected, &rejected::ALL),
        closed: keep(c.closed, &closed::ALL),
        ..c
    }
}

impl View<'_> {
    /// Every replica's counters at `counter`'s URLs, each named by its pod (a managed server)
    /// or URL; `None` when unreadable or not wsload-server's (a note in the log, no retry).
    async fn read_connections(&self, counter: &ServerCounter) -> Option<Vec<ReplicaConnections>> {
        let read = server_connections::read(
            &self.ctx.http,
            &counter.urls,
            self.ctx.config.control_timeout,
        )
        .await;
        let mut replicas = match read {
            Ok(r) if r.len() == counter.urls.len() => r,
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "server connection counters unreadable");
                return None;
            }
        };
        if self.lt.spec.server_metrics.is_none() && self.lt.spec.target.server.is_some() {
            // The URLs are the replicas' in order (ServerCounter::of).
            let test = self.test();
            for (i, r) in (0u32..).zip(replicas.iter_mut()) {
                r.replica = names::server_replica(&test, i);
            }
        }
        Some(replicas)
    }

    /// Reads the counters before the first cell into `status.serverConnectionsBaseline`.
    pub(super) async fn read_connections_baseline(&mut self, counter: &ServerCounter) {
        let Some(replicas) = self.read_connections(counter).await else {
            return;
        };
        self.st.server_connections_baseline = Some(known(counts::total(&replicas)));
        let uid = self.lt.uid().unwrap_or_default();
        lock(&self.ctx.connections).insert(
            uid,
            Reading {
                before: 0,
                replicas,
            },
        );
    }

    /// The summed counters when cell `index` began: the baseline plus every earlier cell's
    /// increase; unknown once one of them is.
    fn connections_before(&self, index: u32) -> Option<ServerConnections> {
        let earlier = self.st.cells.iter().take_while(|c| c.index < index);
        earlier.fold(self.st.server_connections_baseline.clone(), |sum, c| {
            Some(sum?.plus(c.server_connections.as_ref()?))
        })
    }

    /// What the counters grew by over the cell every shard just finished, every replica
    /// summed, with the spread when each replica's reading before the cell is at hand.
    pub(super) async fn cell_connections(&self, cell: &CellStatus) -> Option<ServerConnections> {
        if usize::try_from(cell.index).unwrap_or(usize::MAX) >= MAX_CONNECTION_CELLS
            || self.server_lost().is_some()
            || self.counters_gone()
        {
            return None;
        }
        let before = self.connections_before(cell.index)?;
        let counter = ServerCounter::of(&self.lt.spec, &self.world.servers).ok()??;
        let after = self.read_connections(&counter).await?;
        let mut grew = known(counts::total(&after).since(&before));
        let uid = self.lt.uid().unwrap_or_default();
        let mut readings = lock(&self.ctx.connections);
        if let Some(r) = readings.get(&uid).filter(|r| r.before == cell.index)
            && let Some(spread) = counts::summarize(&counts::increase(&r.replicas, &after))
        {
            grew.accepted_min = spread.accepted_min;
            grew.accepted_max = spread.accepted_max;
            grew.busiest = spread.busiest;
        }
        readings.insert(
            uid,
            Reading {
                before: cell.index + 1,
                replicas: after,
            },
        );
        Some(grew)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_keeps_only_the_reasons_wsload_server_counts() {
        let c = ServerConnections {
            replicas: 1,
            accepted: 3,
            rejected: BTreeMap::from([
                ("handshake_timeout".to_string(), 2),
                ("made_up".to_string(), 9),
            ]),
            closed: BTreeMap::from([("idle_timeout".to_string(), 1), ("x".to_string(), 4)]),
            ..ServerConnections::default()
        };
        let k = known(c);
        assert_eq!(
            k.rejected,
            BTreeMap::from([("handshake_timeout".to_string(), 2)])
        );
        assert_eq!(k.closed, BTreeMap::from([("idle_timeout".to_string(), 1)]));
        assert_eq!(k.accepted, 3);
    }

    #[test]
    fn each_cell_is_recorded_as_status_holds_it() {
        let cell = |index: u32, accepted: u64| CellStatus {
            index,
            server_connections: Some(ServerConnections {
                replicas: 2,
                accepted,
                ..ServerConnections::default()
            }),
            ..CellStatus::default()
        };
        let cells = [cell(0, 5), CellStatus::default()];
        let got: Vec<Option<u64>> = per_cell(&cells)
            .iter()
            .map(|c| c.as_ref().map(|c| c.accepted))
            .collect();
        assert_eq!(got, [Some(5), None]);
    }
}
