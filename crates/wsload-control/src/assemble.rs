//! The merged result completed with what only the conductor knows: each cell's server receipt
//! (every replica's counter summed, against every shard's sends) and what each replica did with
//! its connections, connectionLimit's probes
//! and limit, and the verdict over it all.

use crate::sequence::Conductor;
use wsload_report::fanout::ServerTopics;
use wsload_report::report::RunResult;
use wsload_report::server_connections::ServerConnections;

/// Sets each cell's server topic counters (`topics[i]`: every replica's increase during cell
/// i, `None` where unread); before [`complete`], which computes the figures from them.
pub fn topics(result: &mut RunResult, topics: &[Option<ServerTopics>]) {
    for (cell, t) in result.cells.iter_mut().zip(topics) {
        cell.server_topics = *t;
    }
}

/// Sets each cell's server connection counters (`per_cell[i]`: the replicas' increase during
/// cell i, summed; `None` where unread).
pub fn connections(result: &mut RunResult, per_cell: &[Option<ServerConnections>]) {
    for (cell, c) in result.cells.iter_mut().zip(per_cell) {
        cell.server_connections = c.clone();
    }
}

/// Completes `result` (merged from every shard's result): `received[i]` is what the servers
/// counted during cell i, `None` where it could not be read.
pub fn complete(result: &mut RunResult, received: &[Option<u64>], conductor: &Conductor) {
    for (cell, received) in result.cells.iter_mut().zip(received) {
        cell.server_received = *received;
        cell.compute();
    }
    if conductor.is_search() {
        result.probes = conductor.probes().to_vec();
        result.limit = conductor.limit();
    }
    result.judge();
}
