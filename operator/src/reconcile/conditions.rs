//! How a reconcile reports the test's course in status: entering a phase, conditions, failing
//! with a cause (kept as the first failure's message), and a shard lost after release under
//! the test's shardFailure policy.

use super::reason::{ConditionType, Reason};
use super::view::View;
use crate::Result;
use crate::names;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::controller::Action;
use wsload_spec::ShardFailurePolicy;
use wsload_spec::status::{Phase, ShardState};

impl View<'_> {
    pub(super) fn enter(&mut self, phase: Phase, message: impl Into<String>) {
        self.st.phase = Some(phase);
        self.st.phase_since = Some(Time(self.now));
        self.st.message = Some(message.into());
    }

    pub(super) fn condition(
        &mut self,
        type_: ConditionType,
        ok: bool,
        reason: Reason,
        message: impl Into<String>,
    ) {
        let (type_, reason) = (type_.as_str(), reason.as_str());
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
            .any(|c| c.type_ == ConditionType::Failed.as_str() && c.status == "True")
    }

    /// Failing, and the first cause was `reason`.
    pub(super) fn failed_with(&self, reason: Reason) -> bool {
        self.failing() && self.st.reason.as_deref() == Some(reason.as_str())
    }

    /// Marks the test as failed; it still collects what was measured when shards ran.
    pub(super) fn mark_failed(&mut self, reason: Reason, message: impl Into<String>) {
        let message = message.into();
        if !self.failing() {
            self.st.reason = Some(reason.as_str().to_string());
            self.condition(ConditionType::Failed, true, reason, message.clone());
        }
        self.st.message = Some(message);
    }

    /// The first failure's message (the cause), and the latest one when it adds something.
    pub(super) fn failure_message(&self) -> String {
        let cause = self
            .st
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Failed.as_str() && c.status == "True")
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
        reason: Reason,
        message: impl Into<String>,
    ) -> Result<Action> {
        self.mark_failed(reason, message);
        let message = self.failure_message();
        self.enter(Phase::Failed, message);
        self.st.completion_time = Some(Time(self.now));
        self.finished().await
    }

    pub(super) fn shard_failed(&mut self, index: u32, state: ShardState, why: String) {
        let pod = names::shard(&self.test(), index);
        tracing::warn!(shard = index, reason = %why, "shard lost");
        self.set_shard(index, state, Some(why.clone()));
        if !self.st.missing_shards.contains(&index) {
            self.st.missing_shards.push(index);
        }
        let message = format!("shard {index} (pod {pod}) failed after release: {why}");
        match self.lt.spec.run.shard_failure {
            ShardFailurePolicy::Fail => self.mark_failed(Reason::ShardFailed, message),
            ShardFailurePolicy::Continue => {
                self.condition(ConditionType::Degraded, true, Reason::ShardFailed, message);
            }
        }
    }
}
