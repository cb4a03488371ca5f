//! Each shard's clock against the operator's (wsload_control::clock): a burst of probes when
//! every shard is ready, before the start instant is fixed, then one probe per shard every
//! few seconds while the test runs. The estimators live in memory ([`Context::clocks`], per
//! LoadTest uid); the estimate each gives is written to the shard's status, which the
//! releases and the merge read, so a restarted operator releases by the last estimate and
//! probes afresh.

use super::Context;
use super::view::View;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use wsload_control::clock::{self, Estimator};
use wsload_control::protocol::State;

/// One test's probes, kept between reconciles.
#[derive(Debug, Default)]
pub struct Clocks {
    estimators: BTreeMap<u32, Estimator>,
    probed: Option<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Probes already taken stay usable after a panic elsewhere.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops what is kept in memory for a test (finished or deleted).
pub(super) fn forget(ctx: &Context, uid: &str) {
    lock(&ctx.clocks).remove(uid);
}

impl View<'_> {
    /// Probes every shard of `targets` (index, pod IP) `times` times in a row, all at once
    /// each time, and writes each shard's estimate to its status. A probe that fails is only
    /// a sample missing; its shard is not probed again in this burst, so a shard that does not
    /// answer costs the burst one control timeout, not one per round.
    pub(super) async fn probe_clocks(&mut self, targets: &[(u32, String)], times: usize) {
        let uid = self.lt.uid().unwrap_or_default();
        let mut targets = targets.to_vec();
        for _ in 0..times {
            if targets.is_empty() {
                break;
            }
            let answers = self
                .order_shards(&targets, |_, c| async move { c.clock().await })
                .await;
            let mut clocks = lock(&self.ctx.clocks);
            let test = clocks.entry(uid.clone()).or_default();
            for (i, answer) in answers {
                match answer {
                    Ok(sample) => test.estimators.entry(i).or_default().add(sample),
                    Err(e) => {
                        tracing::debug!(shard = i, error = %e, "clock probe failed");
                        targets.retain(|(t, _)| *t != i);
                    }
                }
            }
            test.probed = Some(Instant::now());
        }
        let estimates: Vec<(u32, wsload_spec::status::ShardClock)> = {
            let clocks = lock(&self.ctx.clocks);
            clocks.get(&uid).map_or_else(Vec::new, |t| {
                t.estimators
                    .iter()
                    .filter_map(|(i, e)| Some((*i, e.estimate()?)))
                    .collect()
            })
        };
        for (i, estimate) in estimates {
            if let Some(s) = self.st.shards.iter_mut().find(|s| s.index == i) {
                s.clock = Some(estimate);
            }
        }
    }

    /// One probe of every shard of `targets` once the last is [`clock::EVERY`] old (or was
    /// taken by another operator process).
    pub(super) async fn probe_clocks_due(&mut self, targets: &[(u32, String)]) {
        let uid = self.lt.uid().unwrap_or_default();
        let due = lock(&self.ctx.clocks)
            .get(&uid)
            .and_then(|t| t.probed)
            .is_none_or(|at| at.elapsed() >= clock::EVERY);
        if due {
            self.probe_clocks(targets, 1).await;
        }
    }

    /// `at` (Unix ms, the operator's clock) as the instant shard `index` must be given to
    /// begin then (wsload_control::clock::release_at).
    pub(super) fn release_at(&self, index: u32, at: u64) -> wsload_control::protocol::Release {
        clock::release(at, self.shard(index).and_then(|s| s.clock.as_ref()))
    }

    /// Each of `targets` (shard index, address) its release at `at` (Unix ms, the operator's
    /// clock), on its own clock, read before the requests go out.
    pub(super) fn releases(&self, targets: &[(u32, String)], at: u64) -> Releases {
        Releases {
            at,
            each: targets
                .iter()
                .map(|(i, _)| (*i, self.release_at(*i, at)))
                .collect(),
        }
    }

    /// Shard `index`'s `state` with the instants it stamped on the operator's clock.
    pub(super) fn on_operator_clock(&self, index: u32, state: &State) -> State {
        clock::on_conductor_clock(state, self.shard(index).and_then(|s| s.clock.as_ref()))
    }
}

/// The releases of one order, by shard index.
pub(super) struct Releases {
    at: u64,
    each: BTreeMap<u32, wsload_control::protocol::Release>,
}

impl Releases {
    /// Shard `index`'s release; one not among the targets gets the instant as it is.
    pub(super) fn of(&self, index: u32) -> wsload_control::protocol::Release {
        self.each
            .get(&index)
            .copied()
            .unwrap_or(wsload_control::protocol::Release {
                start_at: self.at,
                conductor_at: Some(self.at),
                offset_micros: 0,
            })
    }
}
