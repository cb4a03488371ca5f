//! While the load runs: every shard's pod and control state watched, losses handled by the
//! test's policy, start skew measured, the run deadline kept.

use super::reason::Reason;
use super::view::{View, humantime};
use crate::Result;
use crate::pods::{self, PodHealth};
use crate::text::listed;
use kube::runtime::controller::Action;
use std::collections::BTreeMap;
use std::time::Duration;
use wsload_control::protocol::{Phase as ShardPhase, State};
use wsload_spec::status::{Phase, ShardState, ShardStatus};

impl View<'_> {
    /// A shard that stopped being able to deliver its result, and why.
    pub(super) fn shard_loss(&self, index: u32) -> Option<(ShardState, String)> {
        let Some(pod) = self.world.shards.get(&index) else {
            return Some((ShardState::Lost, "pod deleted".into()));
        };
        let restarts = pods::restarts(pod);
        if restarts > 0 {
            return Some((
                ShardState::Lost,
                format!(
                    "container restarted ({restarts}x) after release; its measurements are gone"
                ),
            ));
        }
        match pods::health(pod) {
            PodHealth::Ended { reason } => Some((ShardState::Failed, reason)),
            _ => None,
        }
    }

    pub(super) async fn running(&mut self) -> Result<Action> {
        let run_limit = self.limits().run;
        if let Some(why) = self.server_lost() {
            self.mark_failed(Reason::ServerLost, format!("{why} during the run"));
        }
        let targets = self.live_shard_addresses();
        self.probe_clocks_due(&targets).await;
        let (states, all_answered) = self.poll_shards(&targets).await;
        self.st.start_skew_millis = skew_millis(&self.st.shards);
        let soon = self.conduct(&states, all_answered).await;
        let disrupting = match self.disrupt().await {
            Ok(soon) => soon,
            // Retried soon; the run's deadline below still holds.
            Err(e) => {
                tracing::warn!(error = %e, "disruption step failed; retrying");
                Some(Duration::from_secs(1))
            }
        };
        let soon = match (soon, disrupting) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let unfinished: Vec<u32> = self
            .st
            .shards
            .iter()
            .filter(|s| live(s.state))
            .map(|s| s.index)
            .collect();
        if unfinished.is_empty() {
            self.enter(Phase::Collecting, "all shards finished; collecting results");
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        if self.deadline_passed(run_limit) {
            self.run_deadline_exceeded(&unfinished, run_limit);
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        let poll = self.ctx.config.poll;
        Ok(Action::requeue(soon.map_or(poll, |s| s.min(poll))))
    }

    /// The live shards whose pods can still deliver, by index and pod IP. Each one's restart
    /// count is recorded on the way; a shard whose pod cannot deliver any more is lost.
    fn live_shard_addresses(&mut self) -> Vec<(u32, String)> {
        let indexes: Vec<u32> = self.st.shards.iter().map(|s| s.index).collect();
        let mut targets = Vec::new();
        for i in indexes {
            let Some(state) = self.shard(i).map(|s| s.state) else {
                continue;
            };
            if !live(state) {
                continue;
            }
            let restarts = self.world.shards.get(&i).map_or(0, pods::restarts);
            if let Some(s) = self.st.shards.iter_mut().find(|s| s.index == i) {
                s.restarts = u32::try_from(restarts).unwrap_or(0);
            }
            if let Some((bad, why)) = self.shard_loss(i) {
                self.shard_failed(i, bad, why);
                continue;
            }
            if let Some(ip) = self.world.shards.get(&i).and_then(pods::ip) {
                targets.push((i, ip));
            }
        }
        targets
    }

    /// Asks every shard of `targets` for its control state: those still in a cell (or
    /// between cells), by index, and whether every live shard answered. A shard that ended
    /// is marked Done, one that restarted lost.
    async fn poll_shards(&mut self, targets: &[(u32, String)]) -> (BTreeMap<u32, State>, bool) {
        // Every live shard asked at once: the barrier needs all of them, and hundreds of
        // shards one after another would take longer than a cell.
        let answers = self
            .order_shards(targets, |_, c| async move { c.state().await })
            .await;
        let mut states = BTreeMap::new();
        let mut all_answered = targets.len() == self.count_live();
        for (i, answer) in answers {
            match answer {
                Ok(cs) => {
                    if let Some(cs) = self.note_state(i, cs) {
                        states.insert(i, cs);
                    }
                }
                Err(e) => {
                    all_answered = false;
                    tracing::debug!(shard = i, error = %e, "shard state unknown");
                }
            }
        }
        (states, all_answered)
    }

    /// Records what shard `i` answered; its state back when it is still in the run, its
    /// instants on the operator's clock (so the skews are how far apart shards really began).
    fn note_state(&mut self, i: u32, cs: State) -> Option<State> {
        let cs = self.on_operator_clock(i, &cs);
        if let (Some(us), Some(s)) = (
            cs.started_at_micros,
            self.st.shards.iter_mut().find(|s| s.index == i),
        ) {
            s.started_at_micros = Some(us);
        }
        match cs.state {
            ShardPhase::Done | ShardPhase::Failed => {
                let note = cs
                    .error
                    .as_ref()
                    .map(|e| format!("finished with an error: {e}"));
                self.set_shard(i, ShardState::Done, note);
                None
            }
            ShardPhase::Waiting => {
                // The new process can answer before the kubelet's restartCount reaches
                // the watch cache; a failed shard is not looked at again, so its count
                // would stay 0 although it restarted.
                if let Some(s) = self.st.shards.iter_mut().find(|s| s.index == i) {
                    s.restarts = s.restarts.max(1);
                }
                self.shard_failed(
                    i,
                    ShardState::Lost,
                    format!("shard {i} is waiting for a start again: it restarted after release"),
                );
                None
            }
            ShardPhase::Armed
            | ShardPhase::Running
            | ShardPhase::Connected
            | ShardPhase::Between => Some(cs),
        }
    }

    /// The run outlived its deadline: the unfinished shards are lost, the test fails, and
    /// what finished is collected.
    fn run_deadline_exceeded(&mut self, unfinished: &[u32], run_limit: Duration) {
        for i in unfinished {
            self.set_shard(*i, ShardState::Lost, Some("run deadline exceeded".into()));
        }
        self.mark_failed(
            Reason::RunDeadlineExceeded,
            format!(
                "{} shards did not finish within {}: {}",
                unfinished.len(),
                humantime(run_limit),
                listed(unfinished, 10)
            ),
        );
        self.enter(
            Phase::Collecting,
            "run deadline exceeded; collecting what finished",
        );
    }

    /// Shards that may still run or report cells.
    pub(super) fn count_live(&self) -> usize {
        self.st.shards.iter().filter(|s| live(s.state)).count()
    }
}

/// A shard status that may still run or report cells.
fn live(state: ShardState) -> bool {
    matches!(
        state,
        ShardState::Running | ShardState::Ready | ShardState::Pending
    )
}

/// Spread of the shards' actual start instants (Unix microseconds, on the operator's clock).
fn skew_millis(shards: &[ShardStatus]) -> Option<f64> {
    let starts = shards.iter().filter_map(|s| s.started_at_micros);
    let (min, max) = starts.fold(None, |acc: Option<(u64, u64)>, us| match acc {
        None => Some((us, us)),
        Some((lo, hi)) => Some((lo.min(us), hi.max(us))),
    })?;
    Some((max - min) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_is_the_exact_spread_of_reported_starts() {
        let mk = |us: Option<u64>| ShardStatus {
            started_at_micros: us,
            ..Default::default()
        };
        assert_eq!(skew_millis(&[mk(None)]), None);
        // Within one second: whole-second times would have said 0.
        let s = skew_millis(&[mk(Some(1_000_000)), mk(Some(1_004_500)), mk(None)]);
        assert_eq!(s, Some(4.5));
    }
}
