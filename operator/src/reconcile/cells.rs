//! The test conducted cell by cell. Every cell is a barrier, twice: its measured phase begins at
//! one instant once every live shard opened its share (measure.rs); once every live shard finished
//! cell k (each `between`, its summary in `GET /control`), the servers' received counter, summed
//! over every replica, settles; the cell's outcome is recorded in `status.cells`; the conductor
//! decides cell k+1 (or the end) from the recorded outcomes, and every shard is told to begin it at
//! one instant. So "N connections at once" did happen, and a cell's delivery is every replica's
//! count against every shard's sends over exactly that cell.
//!
//! Restart-safe by construction: a cell is recorded in status (with its start instant) before
//! any shard hears of it, and the next reconcile orders it to every shard that has not got it
//! (the orders are idempotent); the conductor is rebuilt each time by replaying the recorded
//! outcomes. Only the settling readings live in memory, and a restarted operator settles anew.

use super::Context;
use super::view::View;
use crate::pods;
use crate::server_counter::ServerCounter;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use wsload_control::Conductor;
use wsload_control::barrier::{self, Barrier, Merged};
use wsload_control::protocol::{CellKey, CellSummary, Phase as ShardPhase, State};
use wsload_control::server_topics;
use wsload_control::settle::{self, Settle};
use wsload_spec::LoadTestSpec;
use wsload_spec::fanout::ServerTopics;
use wsload_spec::status::{CellStatus, MAX_MEASURE_CELLS};

/// How soon to look again once some shards finished the cell (or opened their share of it):
/// the others are close behind.
pub(super) const SOON: Duration = Duration::from_millis(200);

/// What the servers' counter says a finished cell delivered.
enum Delivery {
    /// The counter is still taking in what the shards sent: look again.
    Settling,
    /// Received during the cell, every replica summed.
    Received(u64),
    /// It cannot be known: no counter, a replica or a shard lost, or the counter unreadable.
    Unknown,
}

/// A cell's server counter settling, kept between reconciles in [`Context::settles`].
#[derive(Debug)]
pub struct Settling {
    cell: u32,
    settle: Settle,
    since: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A map of readings stays usable after a panic elsewhere.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops what is kept in memory for a test (finished or deleted).
pub(super) fn forget(ctx: &Context, uid: &str) {
    lock(&ctx.settles).remove(uid);
}

/// A cell as status records it at its release to `shards` shards.
pub(super) fn cell_released(key: &CellKey, start_at_millis: u64, shards: usize) -> CellStatus {
    CellStatus {
        index: key.index,
        label: key.label.clone(),
        connections: key.connections,
        start_at_millis,
        shards: u32::try_from(shards).unwrap_or(u32::MAX),
        ..Default::default()
    }
}

/// A recorded cell's outcome, as the conductor judges it.
fn outcome(c: &CellStatus) -> CellSummary {
    CellSummary {
        index: c.index,
        attempted: c.attempted,
        failed: c.failed,
        sent_with_warmup: c.sent,
        ..Default::default()
    }
}

/// The conductor as the recorded cells leave it.
pub(crate) struct Replay {
    pub conductor: Conductor,
    /// While the last recorded cell runs: its key. Once it is done: the next cell, or `None`
    /// when the run is over.
    pub next: Option<CellKey>,
}

/// Rebuilds the conductor from the spec and replays every finished cell's outcome into it:
/// it makes the same decisions again, so status needs to hold only the outcomes.
pub(crate) fn replay(spec: &LoadTestSpec, cells: &[CellStatus]) -> Replay {
    let mut conductor = Conductor::new(spec);
    let mut next = conductor.next(None);
    for c in cells.iter().take_while(|c| c.done) {
        next = conductor.next(Some(&outcome(c)));
    }
    Replay { conductor, next }
}

/// What every cell recorded so far says the servers' topic counters grew by, by cell index.
pub(super) fn topics_per_cell(cells: &[CellStatus]) -> Vec<Option<ServerTopics>> {
    cells.iter().map(|c| c.server_topics).collect()
}

/// What every cell recorded so far says the servers received, by cell index.
pub(super) fn received_per_cell(cells: &[CellStatus]) -> Vec<Option<u64>> {
    cells.iter().map(|c| c.server_received).collect()
}

fn finished(s: &State, index: u32) -> bool {
    s.state == ShardPhase::Between && s.last_cell.as_ref().is_some_and(|c| c.index == index)
}

impl View<'_> {
    /// Moves the cells on, given the control state of every shard still live (`all_answered`:
    /// none of them failed to answer). Returns how soon to look again when sooner than the
    /// poll interval.
    pub(super) async fn conduct(
        &mut self,
        states: &BTreeMap<u32, State>,
        all_answered: bool,
    ) -> Option<Duration> {
        let current = self.st.cells.last().cloned()?;
        if !current.done {
            if current.index > 0 {
                self.order_cell(states, &current).await;
            }
            // A shard that did not answer may have finished or not: the barrier waits.
            if !all_answered {
                return None;
            }
            let rendezvous = self.rendezvous(&current, states).await;
            let live: Vec<&State> = states.values().collect();
            let merged = match barrier::evaluate(current.index, &live) {
                Barrier::Passed(m) => m,
                // Nothing live: the Running phase moves on to collecting.
                Barrier::Over => return None,
                Barrier::Waiting => {
                    let done = states
                        .values()
                        .filter(|s| finished(s, current.index))
                        .count();
                    if let Some(r) = rendezvous.filter(|_| done == 0) {
                        self.st.message = Some(r.message);
                        return r.soon;
                    }
                    self.st.message = Some(format!(
                        "cell {} ({}): {done}/{} shards finished it",
                        current.index,
                        current.label,
                        states.len()
                    ));
                    return (done > 0).then_some(SOON);
                }
            };
            let received = match self.settled(&current, &merged).await {
                Delivery::Settling => {
                    self.st.message = Some(format!(
                        "cell {} ({}): every shard finished it; waiting for the server counter",
                        current.index, current.label
                    ));
                    return Some(settle::POLL);
                }
                Delivery::Received(n) => Some(n),
                Delivery::Unknown => None,
            };
            let topics = self.cell_topics(&current, &merged).await;
            let connections = self.cell_connections(&current).await;
            self.record(current.index, &merged, received);
            if let Some(c) = self.st.cells.iter_mut().find(|c| c.index == current.index) {
                c.server_topics = topics;
                c.server_connections = connections;
            }
            // The shards hear of the end only once the cell is in status: a shard told to end
            // is never between cells again, so a cell still unrecorded then could not be.
            if replay(&self.lt.spec, &self.st.cells).next.is_none() {
                return Some(Duration::from_millis(10));
            }
        }
        let next = replay(&self.lt.spec, &self.st.cells).next;
        if next.is_some() && self.server_down() {
            // A disruption left a replica down: the next cell begins with every one ready.
            self.st.message = Some(format!(
                "cell {} done; the server replicas a disruption took down are starting again",
                current.index
            ));
            return Some(Duration::from_millis(250));
        }
        match next {
            Some(key) => {
                let delay = u64::try_from(self.ctx.config.cell_delay.as_millis()).unwrap_or(0);
                let start_at = unix_millis(self) + delay;
                tracing::info!(cell = key.index, label = %key.label, start_at, "releasing the next cell");
                self.st.message = Some(format!(
                    "cell {} ({}) starts at {start_at} (Unix ms)",
                    key.index, key.label
                ));
                let shards = self.count_live();
                self.forget_disruptions();
                self.st.cells.push(cell_released(&key, start_at, shards));
                // Recorded before any shard hears of it: the next reconcile tells them.
                Some(Duration::from_millis(10))
            }
            None => {
                self.end_cells(states).await;
                None
            }
        }
    }

    /// The live shards that answered, by index, with their pod IPs.
    pub(super) fn addresses<'s>(
        &self,
        indexes: impl Iterator<Item = &'s u32>,
    ) -> Vec<(u32, String)> {
        indexes
            .filter_map(|i| Some((*i, self.world.shards.get(i).and_then(pods::ip)?)))
            .collect()
    }

    /// Tells every shard that finished the cell before `cell` (and has not heard of `cell`
    /// yet) to begin it at its instant. A shard that has heard answers the same order alike.
    async fn order_cell(&mut self, states: &BTreeMap<u32, State>, cell: &CellStatus) {
        let replay = replay(&self.lt.spec, &self.st.cells);
        let Some(key) = replay.next.filter(|k| k.index == cell.index) else {
            tracing::warn!(
                cell = cell.index,
                "the recorded cell is not the conductor's: not ordered"
            );
            return;
        };
        let waiting = states
            .iter()
            .filter(|(_, s)| s.state == ShardPhase::Between && s.cells_done == cell.index)
            .map(|(i, _)| i);
        let targets = self.addresses(waiting);
        // Each shard its instant on its own clock: all begin at the cell's on the operator's.
        let releases = self.releases(&targets, cell.start_at_millis);
        let answers = self
            .order_shards(&targets, |i, c| {
                let key = key.clone();
                let release = releases.of(i);
                async move { c.cell(release, key).await }
            })
            .await;
        for (i, answer) in answers {
            if let Err(e) = answer {
                tracing::warn!(shard = i, cell = cell.index, error = %e, "cell order not delivered; retrying");
            }
        }
    }

    /// No more cells: every shard between cells builds its result.
    async fn end_cells(&mut self, states: &BTreeMap<u32, State>) {
        let between = states
            .iter()
            .filter(|(_, s)| s.state == ShardPhase::Between)
            .map(|(i, _)| i);
        let targets = self.addresses(between);
        if targets.is_empty() {
            return;
        }
        self.st.message = Some(format!(
            "all {} cells done; shards building their results",
            self.st.cells.len()
        ));
        let answers = self
            .order_shards(&targets, |_, c| async move { c.end().await })
            .await;
        for (i, answer) in answers {
            if let Err(e) = answer {
                tracing::warn!(shard = i, error = %e, "end not delivered; retrying");
            }
        }
    }

    /// Whether the test kills or restarts server replicas: what a deleted pod's process
    /// counted went with it, and its new one's counters began at zero, so no sum of them is
    /// the cell's (the shards' own figures stand).
    pub(super) fn counters_gone(&self) -> bool {
        wsload_spec::reconnect::on_server(&self.lt.spec.disruptions)
    }

    /// The summed counter when cell `index` began: the baseline plus every earlier cell's
    /// receipt; unknown once one of them is.
    fn counter_before(&self, index: u32) -> Option<u64> {
        let earlier = self.st.cells.iter().take_while(|c| c.index < index);
        earlier.fold(self.st.server_received_baseline, |sum, c| {
            Some(sum?.saturating_add(c.server_received?))
        })
    }

    /// The summed topic counters when cell `index` began: the baseline plus every earlier
    /// cell's increase; unknown once one of them is.
    fn topics_before(&self, index: u32) -> Option<ServerTopics> {
        let earlier = self.st.cells.iter().take_while(|c| c.index < index);
        earlier.fold(self.st.server_topics_baseline, |sum, c| {
            Some(server_topics::sum(&sum?, &c.server_topics?))
        })
    }

    /// A fanout's topic counters' increase over the cell every shard just finished (and the
    /// received counter settled: what was queued has gone out), every replica summed.
    async fn cell_topics(&self, cell: &CellStatus, merged: &Merged) -> Option<ServerTopics> {
        let before = self.topics_before(cell.index)?;
        if u32::try_from(merged.shards).unwrap_or(u32::MAX) < cell.shards
            || self.server_lost().is_some()
            || self.counters_gone()
        {
            return None;
        }
        let counter = ServerCounter::of(&self.lt.spec, &self.world.servers).ok()??;
        let after = self.read_topics(&counter).await?;
        Some(server_topics::increase(&before, &after))
    }

    /// What the servers received during the cell, once their counter settled.
    async fn settled(&mut self, cell: &CellStatus, merged: &Merged) -> Delivery {
        if u32::try_from(merged.shards).unwrap_or(u32::MAX) < cell.shards {
            // A shard was lost during the cell (see record): nothing to wait for.
            return Delivery::Unknown;
        }
        if let Some(why) = self.server_lost() {
            // A lost replica's count is gone with it: no sum can be right.
            tracing::warn!(cell = cell.index, reason = %why, "delivery unknown");
            return Delivery::Unknown;
        }
        if self.counters_gone() {
            return Delivery::Unknown;
        }
        let counter = match ServerCounter::of(&self.lt.spec, &self.world.servers) {
            Ok(Some(c)) => c,
            Ok(None) => return Delivery::Unknown,
            Err(e) => {
                tracing::warn!(cell = cell.index, error = %e, "delivery unknown");
                return Delivery::Unknown;
            }
        };
        // Earlier cells are all recorded by now (cells run one at a time): no baseline means it
        // was unreadable at the start deadline, or an earlier cell's receipt is unknown. No
        // later reading can make a difference exact, so waiting would only hold every later
        // cell until the run deadline.
        let Some(before) = self.counter_before(cell.index) else {
            tracing::warn!(
                cell = cell.index,
                "no server counter before the cell: delivery unknown"
            );
            return Delivery::Unknown;
        };
        let reading = counter
            .read(&self.ctx.http, self.ctx.config.control_timeout)
            .await;
        let uid = self.lt.uid().unwrap_or_default();
        let now = Instant::now();
        let mut settles = lock(&self.ctx.settles);
        let fresh = || Settling {
            cell: cell.index,
            settle: Settle::new(before, merged.outcome.sent_with_warmup, now),
            since: now,
        };
        let s = settles.entry(uid.clone()).or_insert_with(fresh);
        if s.cell != cell.index {
            *s = fresh();
        }
        let result = match reading {
            Ok(r) => s
                .settle
                .observe(r, now)
                .map_or(Delivery::Settling, Delivery::Received),
            Err(e) => {
                tracing::warn!(cell = cell.index, error = %e, "server counter unreadable");
                // Unreadable for as long as the counter may take to settle: keep what was read.
                if now.duration_since(s.since) >= settle::MAX {
                    s.settle
                        .last()
                        .map_or(Delivery::Unknown, Delivery::Received)
                } else {
                    Delivery::Settling
                }
            }
        };
        if !matches!(result, Delivery::Settling) {
            settles.remove(&uid);
        }
        result
    }

    fn record(&mut self, index: u32, merged: &Merged, received: Option<u64>) {
        let Some(c) = self.st.cells.iter_mut().find(|c| c.index == index) else {
            return;
        };
        let o = &merged.outcome;
        let finished = u32::try_from(merged.shards).unwrap_or(u32::MAX);
        // A shard lost during the cell: the servers counted what it sent, nobody knows how
        // much that was.
        let received = received.filter(|_| finished >= c.shards);
        c.done = true;
        if usize::try_from(index).unwrap_or(usize::MAX) >= MAX_MEASURE_CELLS {
            // Needed only while the cell ran (measure.rs): status stays bounded.
            c.measure_at_millis = None;
        }
        c.shards = finished;
        c.attempted = o.attempted;
        c.failed = o.failed;
        c.sent = o.sent_with_warmup;
        c.server_received = received;
        c.started_at_millis = Some(o.started_at_micros / 1000);
        c.start_skew_millis = Some(merged.start_spread_micros as f64 / 1000.0);
        tracing::info!(
            cell = index, label = %c.label, sent = c.sent,
            received = ?received, skew_ms = ?c.start_skew_millis, "cell done"
        );
    }
}

pub(super) fn unix_millis(view: &View<'_>) -> u64 {
    u64::try_from(view.now.as_millisecond()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> LoadTestSpec {
        wsload_spec::yaml::parse(yaml).expect("spec")
    }

    fn done(key: &CellKey, attempted: u64, failed: u64) -> CellStatus {
        CellStatus {
            done: true,
            attempted,
            failed,
            ..cell_released(key, 0, 1)
        }
    }

    #[test]
    fn replaying_recorded_outcomes_gives_the_same_decisions() {
        let s = spec(
            "target: {server: {}}\nscenario: connectionLimit\nlimit: {start: 100, max: 1000, resolution: 50}\n",
        );
        // The conductor run live, probe by probe, against a cap of 300 connections...
        let mut live = Conductor::new(&s);
        let mut cells: Vec<CellStatus> = Vec::new();
        let mut next = live.next(None);
        while let Some(key) = next {
            // ...and a fresh one replaying status at every step agrees with it.
            let replayed = replay(&s, &cells);
            assert_eq!(replayed.next.as_ref(), Some(&key));
            cells.push(cell_released(&key, 0, 1));
            assert_eq!(
                replay(&s, &cells).next.as_ref(),
                Some(&key),
                "running: same key"
            );
            let n = u64::from(key.connections);
            let c = done(&key, n, n.saturating_sub(300));
            next = live.next(Some(&outcome(&c)));
            *cells.last_mut().expect("cell") = c;
        }
        let end = replay(&s, &cells);
        assert_eq!(end.next, None);
        assert_eq!(end.conductor.limit(), live.limit());
        let passed = |c: &Conductor| -> Vec<(u32, bool)> {
            c.probes()
                .iter()
                .map(|p| (p.connections, p.passed))
                .collect()
        };
        assert_eq!(passed(&end.conductor), passed(&live));
        let limit = end.conductor.limit().expect("a limit");
        assert!((250..=300).contains(&limit), "{limit}");
    }

    #[test]
    fn planned_cells_replay_in_order_then_end() {
        let s = spec("target: {server: {}}\nscenario: throughput\nconnections: [10, 20]\n");
        let first = replay(&s, &[]).next.expect("cell 0");
        assert_eq!((first.index, first.connections), (0, 10));
        let second = replay(&s, &[done(&first, 10, 0)]).next.expect("cell 1");
        assert_eq!((second.index, second.label.as_str()), (1, "20"));
        assert_eq!(
            replay(&s, &[done(&first, 10, 0), done(&second, 20, 0)]).next,
            None
        );
        let cells = [done(&first, 10, 0), cell_released(&second, 5, 2)];
        assert_eq!(received_per_cell(&cells), [None, None]);
    }
}
