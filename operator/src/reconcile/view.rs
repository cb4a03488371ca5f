//! One reconcile's view of a test: the spec as run (install defaults filled in), the status
//! being written, the children as read and the instant of the reconcile; which phase's step
//! runs, and what every phase reads from the view (its shards, its deadlines).

use super::{Apis, Context, World};
use crate::Result;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use std::time::Duration;
use wsload_control::Token;
use wsload_spec::LoadTestResource;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState, ShardStatus};

/// How long each phase may last before the test fails, counted from `status.phaseSince`.
pub(super) struct PhaseLimits {
    /// Pending and Starting each: the spec's scheduling and ready deadlines together.
    pub(super) start: Duration,
    pub(super) run: Duration,
    pub(super) collect: Duration,
}

/// What one reconcile works on; each phase's step is a method of it (start.rs, running.rs,
/// cells.rs, collect.rs), and the status it leaves is written once the step returns.
pub(super) struct View<'a> {
    pub(super) ctx: &'a Context,
    pub(super) lt: &'a LoadTestResource,
    pub(super) apis: &'a Apis,
    pub(super) world: &'a World,
    pub(super) st: &'a mut LoadTestStatus,
    pub(super) now: Timestamp,
}

impl<'a> View<'a> {
    /// A step, on `st`, of the test as the API server and the cache hold it at this instant.
    pub(super) fn now(
        ctx: &'a Context,
        lt: &'a LoadTestResource,
        apis: &'a Apis,
        world: &'a World,
        st: &'a mut LoadTestStatus,
    ) -> View<'a> {
        View {
            ctx,
            lt,
            apis,
            world,
            st,
            now: Timestamp::now(),
        }
    }
}

impl View<'_> {
    pub(super) async fn run(&mut self) -> Result<Action> {
        match self.st.phase {
            None => self.begin().await,
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

    /// The test's control token, derived again at each use (control_key.rs): nothing to keep.
    pub(super) fn token(&self) -> Token {
        let ns = self.lt.namespace().unwrap_or_default();
        let uid = self.lt.uid().unwrap_or_default();
        self.ctx.control_key.token(&ns, &self.test(), &uid)
    }

    pub(super) fn deadline_passed(&self, limit: Duration) -> bool {
        let Some(since) = self.st.phase_since.as_ref() else {
            return false;
        };
        let limit = SignedDuration::try_from(limit).unwrap_or(SignedDuration::MAX);
        self.now.duration_since(since.0) > limit
    }

    pub(super) fn limits(&self) -> PhaseLimits {
        let d = &self.lt.spec.run.deadlines;
        let start = d.scheduling.get() + d.ready.get();
        // connectionLimit has no expected length (the search decides): an hour unless set.
        let mut run = wsload_spec::timing::run_deadline(&self.lt.spec)
            .unwrap_or(Duration::from_secs(3600))
            + self.lt.spec.run.start_delay.get();
        if d.run.is_none() {
            // Between cells: noticing the barrier, the server counter settling, the next
            // release's delay; within a cell, noticing every shard connected and the measure
            // instant's lead. A deadline the spec sets is taken as given.
            let cells = wsload_control::sequence::planned(&self.lt.spec).len();
            let between = (self.ctx.config.cell_delay + self.ctx.config.poll) * 2
                + wsload_control::settle::QUIET;
            run += between * u32::try_from(cells).unwrap_or(u32::MAX);
        }
        PhaseLimits {
            start,
            run,
            collect: d.collect.get(),
        }
    }

    pub(super) fn set_shard(&mut self, index: u32, state: ShardState, reason: Option<String>) {
        crate::shard_entries::set(&mut self.st.shards, index, state, reason);
    }

    pub(super) fn shard(&self, index: u32) -> Option<&ShardStatus> {
        self.st.shards.iter().find(|s| s.index == index)
    }
}

pub(super) fn humantime(d: Duration) -> String {
    wsload_spec::Dur(d).to_string()
}
