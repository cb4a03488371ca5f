//! After the load: every shard's result stored (each in its own object) before the shard may
//! exit, the stored results merged as they are read back and judged into status, cleanup and
//! the TTL. No error here escapes the collect deadline: what cannot be stored or read ends the
//! test Failed with the reason, keeping whatever was stored.

use super::cells;
use super::connections;
use super::fanout;
use super::reason::{ConditionType, Reason};
use super::replica_watch;
use super::store::{self, StoreError};
use super::view::{View, humantime};
use crate::Result;
use crate::builders;
use crate::names::SHARD_PORT;
use crate::names::{self};
use crate::pods::{self};
use crate::results::{self, Merging, Summary};
use crate::text::listed;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;
use wsload_control::Token;
use wsload_control::client::ShardClient;
use wsload_http::http_client::Client;
use wsload_spec::status::{Phase, ShardState, Verdict};
use wsload_spec::{Cleanup, LoadTestResource};

/// How one shard's result fared in one collecting pass.
enum Collected {
    /// Stored (bytes compressed); the shard was told it may exit.
    Stored(usize),
    /// The shard has no result yet.
    NotYet,
    /// The shard did not answer; it may later.
    Unreachable(wsload_control::Error),
    /// Its pod is gone and nothing was stored.
    Gone,
    Store(StoreError),
}

/// How to ask one shard for its result, then tell it to go: the limits on each, and the
/// test's token.
#[derive(Clone)]
struct CallLimits {
    result: Duration,
    control: Duration,
    token: Token,
}

/// Why a result that cannot be stored fails the test.
fn not_stored(e: &StoreError) -> Reason {
    match e {
        StoreError::TooLarge { .. } => Reason::ResultTooLarge,
        _ => Reason::ResultStoreFailed,
    }
}

/// Fetches shard `index`'s result, stores it, and tells the shard it may go. A shard that
/// cannot be asked (its pod gone, or not answering) may have been collected already by a
/// reconcile whose status write was lost: its stored result counts.
async fn collect_one(
    http: Client,
    ip: Option<String>,
    index: u32,
    config_maps: kube::Api<ConfigMap>,
    lt: Arc<LoadTestResource>,
    limits: CallLimits,
) -> (u32, Collected) {
    let fetched = match &ip {
        Some(ip) => ShardClient::with_http(
            http.clone(),
            ip,
            SHARD_PORT,
            limits.token.clone(),
            limits.result,
        )
        .result()
        .await
        .map_err(Collected::Unreachable),
        None => Err(Collected::Gone),
    };
    let json = match fetched {
        Ok(Some(json)) => json,
        Ok(None) => return (index, Collected::NotYet),
        Err(not_asked) => {
            let name = names::shard_result(&lt.name_any(), index);
            return match config_maps.get_opt(&name).await {
                Ok(Some(cm)) if builders::is_owned_by(&cm.metadata, &lt) => {
                    (index, Collected::Stored(0))
                }
                _ => (index, not_asked),
            };
        }
    };
    let stored = match store::shard_result(&config_maps, &lt, index, json.as_bytes()).await {
        Ok(bytes) => bytes,
        Err(e) => return (index, Collected::Store(e)),
    };
    // Stored: the shard may go. One that does not hear it exits after its linger.
    if let Some(ip) = &ip
        && let Err(e) = ShardClient::with_http(http, ip, SHARD_PORT, limits.token, limits.control)
            .finish()
            .await
    {
        tracing::debug!(shard = index, error = %e, "finish not delivered");
    }
    (index, Collected::Stored(stored))
}

impl View<'_> {
    pub(super) async fn collecting(&mut self) -> Result<Action> {
        let collect_limit = self.limits().collect;
        let limits = CallLimits {
            result: self.ctx.config.result_timeout,
            control: self.ctx.config.control_timeout,
            token: self.token(),
        };
        // One copy for every call: the LoadTest carries its status, an entry per shard, so a
        // copy per call was N^2 bytes (3.4 GB at 5,000 shards, issue 27).
        let lt = Arc::new(self.lt.clone());
        let calls: Vec<_> = self
            .shards_in(ShardState::Done)
            .into_iter()
            .map(|i| {
                collect_one(
                    self.ctx.http.clone(),
                    self.world.shards.get(&i).and_then(pods::ip),
                    i,
                    self.apis.config_maps.clone(),
                    lt.clone(),
                    limits.clone(),
                )
            })
            .collect();
        let mut waiting = Vec::new();
        for (i, outcome) in fanout::bounded(calls).await {
            match outcome {
                Collected::Stored(bytes) => {
                    tracing::debug!(shard = i, bytes, "result stored");
                    self.set_shard(i, ShardState::Collected, None);
                }
                Collected::NotYet => waiting.push(format!("shard {i}: no result yet")),
                Collected::Gone => self.shard_failed(
                    i,
                    ShardState::Lost,
                    "pod gone before its result was collected".into(),
                ),
                Collected::Unreachable(e) => waiting.push(format!("shard {i}: {e}")),
                Collected::Store(e) if e.is_transient() => {
                    waiting.push(format!("shard {i}: storing: {e}"));
                }
                Collected::Store(e) => {
                    // Trying again gets the same answer: the test fails now, with the cause,
                    // and goes on collecting the others' results.
                    let reason = not_stored(&e);
                    let why = format!("shard {i}'s result cannot be stored: {e}");
                    tracing::warn!(shard = i, error = %e, "result not stored");
                    self.set_shard(i, ShardState::Failed, Some(why.clone()));
                    if !self.st.missing_shards.contains(&i) {
                        self.st.missing_shards.push(i);
                    }
                    self.mark_failed(reason, why);
                }
            }
        }
        waiting.sort();
        let pending = self.shards_in(ShardState::Done);
        if !pending.is_empty() {
            let collected = self.shards_in(ShardState::Collected).len();
            if !self.deadline_passed(collect_limit) {
                self.st.message = Some(format!(
                    "{collected} results stored, {} to collect: {}",
                    pending.len(),
                    listed(&waiting, 5)
                ));
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            let why = format!(
                "result not collected within {}: {}",
                humantime(collect_limit),
                listed(&waiting, 5)
            );
            for i in &pending {
                self.shard_failed(*i, ShardState::Lost, why.clone());
            }
        }
        self.conclude().await
    }

    fn shards_in(&self, state: ShardState) -> Vec<u32> {
        self.st
            .shards
            .iter()
            .filter(|s| s.state == state)
            .map(|s| s.index)
            .collect()
    }

    /// Reads every stored result back, folding each into the merge as it arrives.
    async fn merge_stored(&mut self) -> std::result::Result<Merging, StoreError> {
        let test = self.test();
        let reads: Vec<_> = self
            .shards_in(ShardState::Collected)
            .into_iter()
            .map(|i| {
                let api = self.apis.config_maps.clone();
                let test = test.clone();
                async move { (i, store::read_shard_result(&api, &test, i).await) }
            })
            .collect();
        let mut merging = Merging::default();
        let mut merge_error = None;
        // Results are decoded and folded in one by one: at most the fan-out's worth of
        // compressed results are held at once, never all of them.
        let mut stream = futures_util::stream::iter(reads).buffer_unordered(16);
        while let Some((i, read)) = stream.next().await {
            match read {
                Ok(bytes) => {
                    let clock = self.shard(i).and_then(|s| s.clock);
                    if merge_error.is_none()
                        && let Err(e) = merging.add(i, &bytes, clock)
                    {
                        merge_error = Some(e);
                    }
                }
                Err(StoreError::Missing { name }) => {
                    self.shard_failed(
                        i,
                        ShardState::Lost,
                        format!("its stored result (ConfigMap {name}) was deleted"),
                    );
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(e) = merge_error {
            self.mark_failed(
                Reason::MergeFailed,
                format!("shard results cannot be merged: {e}"),
            );
        }
        Ok(merging)
    }

    /// Merges every stored result, judges the thresholds and ends the test. Reading or
    /// storing may fail for a while; past the collect deadline the test ends Failed.
    pub(super) async fn conclude(&mut self) -> Result<Action> {
        let merging = match self.read_back().await {
            ControlFlow::Continue(merging) => merging,
            ControlFlow::Break(action) => return action,
        };
        if merging.shards() == 0 {
            // When already failing, `fail` puts the cause before this.
            let why = if self.failing() {
                "no result stored".to_string()
            } else {
                "no shard delivered a result".to_string()
            };
            return self.fail(Reason::NoResults, why).await;
        }
        if !self.failed_with(Reason::MergeFailed)
            && let ControlFlow::Break(action) = self.judge(merging).await
        {
            return Ok(action);
        }
        self.enter_outcome();
        self.finished().await
    }

    /// The stored results merged; `Break` with what the reconcile returns when they cannot be
    /// read (yet).
    async fn read_back(&mut self) -> ControlFlow<Result<Action>, Merging> {
        let collect_limit = self.limits().collect;
        match self.merge_stored().await {
            Ok(merging) => ControlFlow::Continue(merging),
            Err(e) if e.is_transient() && !self.deadline_passed(collect_limit) => {
                self.st.message = Some(format!("reading the stored results: {e}"));
                ControlFlow::Break(Ok(Action::requeue(Duration::from_secs(1))))
            }
            Err(e) => ControlFlow::Break(
                self.fail(
                    Reason::ResultsUnreadable,
                    format!("stored results unreadable: {e}"),
                )
                .await,
            ),
        }
    }

    /// Completes the merge, stores it, and judges the thresholds into status; `Break` to look
    /// again when storing failed for now.
    async fn judge(&mut self, merging: Merging) -> ControlFlow<Action> {
        // The received counts and connectionLimit's probes are the conductor's: what the cells
        // recorded, replayed.
        let received = cells::received_per_cell(&self.st.cells);
        let topics = cells::topics_per_cell(&self.st.cells);
        let connections = connections::per_cell(&self.st.cells);
        let conductor = cells::replay(&self.lt.spec, &self.st.cells).conductor;
        let uid = self.lt.uid().unwrap_or_default();
        let summary = merging.finish().and_then(|mut merged| {
            wsload_control::assemble::topics(&mut merged, &topics);
            wsload_control::assemble::connections(&mut merged, &connections);
            replica_watch::into_figures(self.ctx, &uid, &mut merged);
            results::summarize(&self.lt.spec, merged, &received, &conductor)
        });
        let summary = match summary {
            Ok(summary) => summary,
            Err(e) => {
                self.mark_failed(
                    Reason::MergeFailed,
                    format!("shard results cannot be merged: {e}"),
                );
                return ControlFlow::Continue(());
            }
        };
        self.store_merged(&summary).await?;
        summary.apply(self.st);
        let verdict = self.st.verdict.unwrap_or(Verdict::Fail);
        self.condition(
            ConditionType::ThresholdsPassed,
            verdict == Verdict::Pass,
            Reason::Judged(verdict),
            summary.verdict_message.clone(),
        );
        ControlFlow::Continue(())
    }

    /// Stores the merged result beside the LoadTest; `Break` to try again (before the collect
    /// deadline). One that cannot be stored fails the test, which keeps its figures in status.
    async fn store_merged(&mut self, summary: &Summary) -> ControlFlow<Action> {
        let stored = store::merged(
            &self.apis.config_maps,
            self.lt,
            summary.merged.clone(),
            summary.report.clone(),
        )
        .await;
        match stored {
            Ok(()) => self.st.results_config_map = Some(names::results(&self.test())),
            Err(e) if e.is_transient() && !self.deadline_passed(self.limits().collect) => {
                self.st.message = Some(format!("storing the merged result: {e}"));
                return ControlFlow::Break(Action::requeue(Duration::from_secs(1)));
            }
            Err(e) => self.mark_failed(
                not_stored(&e),
                format!("the merged result cannot be stored: {e}"),
            ),
        }
        ControlFlow::Continue(())
    }

    /// The test ends: Failed with its cause, or Succeeded with its verdict.
    fn enter_outcome(&mut self) {
        self.st.completion_time = Some(Time(self.now));
        if self.failing() {
            let m = self.failure_message();
            // The figures cover only what survived, so thresholds that held over them prove
            // nothing about the load asked for: a CI gate reading `verdict` must not pass.
            if self.st.verdict == Some(Verdict::Pass) {
                self.st.verdict = Some(Verdict::Fail);
                self.condition(
                    ConditionType::ThresholdsPassed,
                    false,
                    Reason::Incomplete,
                    format!("the thresholds held over what was measured, but the test failed: {m}"),
                );
            }
            self.enter(Phase::Failed, m);
        } else {
            let verdict = self.st.verdict.map_or("none", Verdict::as_str);
            let rate = self.st.achieved_rate.clone().unwrap_or_default();
            self.enter(Phase::Succeeded, format!("verdict {verdict}; {rate}"));
        }
    }

    pub(super) async fn finished(&mut self) -> Result<Action> {
        let spec = &self.lt.spec;
        if spec.run.cleanup == Cleanup::Delete {
            self.cleanup().await?;
        }
        if let (Some(ttl), Some(done)) = (
            spec.run.ttl_after_finished,
            self.st.completion_time.as_ref(),
        ) {
            let ttl = SignedDuration::try_from(ttl.get()).unwrap_or(SignedDuration::MAX);
            let left = ttl - self.now.duration_since(done.0);
            if left <= SignedDuration::ZERO {
                tracing::info!("ttlAfterFinished passed; deleting the LoadTest");
                self.apis
                    .lts
                    .delete(&self.test(), &DeleteParams::background())
                    .await?;
                return Ok(Action::await_change());
            }
            let left = Duration::try_from(left).unwrap_or(Duration::from_secs(60));
            return Ok(Action::requeue(left));
        }
        Ok(Action::await_change())
    }

    /// Deletes the pods (and the server's Service) once nothing more is needed from them;
    /// the results ConfigMap stays with the LoadTest.
    pub(super) async fn cleanup(&self) -> Result<()> {
        let test = self.test();
        let pods: Vec<String> = self
            .world
            .shards
            .values()
            .chain(self.world.servers.values())
            .map(ResourceExt::name_any)
            .collect();
        for name in pods {
            match self.apis.pods.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        if self.lt.spec.target.server.is_some() {
            match self
                .apis
                .services
                .delete(&names::server(&test), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
