//! One reconcile's view of a test (the status being written, the children as read) and what
//! every phase shares: entering a phase, conditions, failing with a cause, deadlines.

use super::{Apis, Context, World};
use crate::Result;
use crate::names::{self};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use std::time::Duration;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState, ShardStatus};
use wsload_spec::{LoadTestResource, ShardFailurePolicy};

pub(super) struct Step<'a> {
    pub(super) ctx: &'a Context,
    pub(super) lt: &'a LoadTestResource,
    pub(super) apis: &'a Apis,
    pub(super) world: &'a World,
    pub(super) st: &'a mut LoadTestStatus,
    pub(super) now: Timestamp,
}

pub(super) const CONDITION_FAILED: &str = "Failed";

impl Step<'_> {
    pub(super) async fn run(&mut self) -> Result<Action> {
        match self.st.phase {
            None => self.begin(),
            Some(Phase::Pending) => self.pending().await,
            Some(Phase::Starting) => self.starting().await,
            Some(Phase::Running) => self.running().await,
            Some(Phase::Collecting) => self.collecting().await,
            Some(Phase::Succeeded | Phase::Failed) => self.finished().await,
        }
    }

    pub(super) fn test(&self) -> String {
        self.lt.name_any()
    }

    pub(super) fn enter(&mut self, phase: Phase, message: impl Into<String>) {
        self.st.phase = Some(phase);
        self.st.phase_since = Some(Time(self.now));
        self.st.message = Some(message.into());
    }

    pub(super) fn condition(
        &mut self,
        type_: &str,
        ok: bool,
        reason: &str,
        message: impl Into<String>,
    ) {
        let status = if ok { "True" } else { "False" };
        let generation = self.lt.metadata.generation;
        let message = message.into();
        let now = Time(self.now);
        match self.st.conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = now;
                }
                c.status = status.to_string();
                c.reason = reason.to_string();
                c.message = message;
                c.observed_generation = generation;
            }
            None => self.st.conditions.push(Condition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: reason.to_string(),
                message,
                last_transition_time: now,
                observed_generation: generation,
            }),
        }
    }

    pub(super) fn failing(&self) -> bool {
        self.st
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_FAILED && c.status == "True")
    }

    /// Marks the test as failed; it still collects what was measured when shards ran.
    pub(super) fn mark_failed(&mut self, reason: &str, message: impl Into<String>) {
        let message = message.into();
        if !self.failing() {
            self.st.reason = Some(reason.to_string());
            self.condition(CONDITION_FAILED, true, reason, message.clone());
        }
        self.st.message = Some(message);
    }

    /// The first failure's message (the cause), and the latest one when it adds something.
    pub(super) fn failure_message(&self) -> String {
        let cause = self
            .st
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_FAILED && c.status == "True")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        match self.st.message.as_deref() {
            Some(latest) if !cause.is_empty() && !cause.contains(latest) && latest != cause => {
                format!("{cause}; {latest}")
            }
            _ if !cause.is_empty() => cause,
            latest => latest.unwrap_or_default().to_string(),
        }
    }

    /// Ends the test as Failed now (nothing left to collect).
    pub(super) async fn fail(
        &mut self,
        reason: &str,
        message: impl Into<String>,
    ) -> Result<Action> {
        self.mark_failed(reason, message);
        let message = self.failure_message();
        self.enter(Phase::Failed, message);
        self.st.completion_time = Some(Time(self.now));
        self.finished().await
    }

    pub(super) fn deadline_passed(&self, limit: Duration) -> bool {
        let Some(since) = self.st.phase_since.as_ref() else {
            return false;
        };
        let limit = SignedDuration::try_from(limit).unwrap_or(SignedDuration::MAX);
        self.now.duration_since(since.0) > limit
    }

    pub(super) fn timeouts(&self) -> (Duration, Duration, Duration) {
        let d = &self.lt.spec.run.deadlines;
        let start = d.scheduling.get() + d.ready.get();
        // connectionLimit has no expected length (the search decides): an hour unless set.
        let mut run = wsload_spec::timing::run_deadline(&self.lt.spec)
            .unwrap_or(Duration::from_secs(3600))
            + self.lt.spec.run.start_delay.get();
        if d.run.is_none() {
            // Between cells: noticing the barrier, the server counter settling, the next
            // release's delay. A deadline the spec sets is taken as given.
            let cells = wsload_control::sequence::planned(&self.lt.spec).len();
            let between =
                self.ctx.config.cell_delay + self.ctx.config.poll + wsload_control::settle::QUIET;
            run += between * u32::try_from(cells).unwrap_or(u32::MAX);
        }
        (start, run, d.collect.get())
    }

    pub(super) fn set_shard(&mut self, index: u32, state: ShardState, reason: Option<String>) {
        if let Some(s) = self.st.shards.iter_mut().find(|s| s.index == index) {
            s.state = state;
            s.reason = reason;
        }
    }

    pub(super) fn shard(&self, index: u32) -> Option<&ShardStatus> {
        self.st.shards.iter().find(|s| s.index == index)
    }

    pub(super) fn shard_failed(&mut self, index: u32, state: ShardState, why: String) {
        let pod = names::shard(&self.test(), index);
        tracing::warn!(loadtest = %self.test(), shard = index, reason = %why, "shard lost");
        self.set_shard(index, state, Some(why.clone()));
        if !self.st.missing_shards.contains(&index) {
            self.st.missing_shards.push(index);
        }
        let message = format!("shard {index} (pod {pod}) failed after release: {why}");
        match self.lt.spec.run.shard_failure {
            ShardFailurePolicy::Fail => self.mark_failed("ShardFailed", message),
            ShardFailurePolicy::Continue => {
                self.condition("Degraded", true, "ShardFailed", message);
            }
        }
    }
}

pub(super) fn humantime(d: Duration) -> String {
    wsload_spec::Dur(d).to_string()
}
