//! The reconcile loop: one LoadTest's phase machine (docs/operator.md). Each call observes the
//! test's children, moves the status forward at most one phase, and says when to look again.
//! Every decision comes from the status and the children alone, so a restarted operator resumes
//! a running test where the old one left it.

use crate::builders::{self, Endpoints};
use crate::metrics::Metrics;
use crate::names::{self, MANAGER};
use crate::pods::{self, PodHealth};
use crate::results;
use crate::shard_client::{RunState, ShardClient};
use crate::{Error, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState, ShardStatus};
use wsload_spec::{Cleanup, LoadTestResource, ShardFailurePolicy};

pub struct Context {
    pub client: kube::Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub config: Config,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Limit on one HTTP exchange with a shard.
    pub http_timeout: Duration,
    /// How often a running test is looked at even when nothing changes.
    pub poll: Duration,
    pub defaults: crate::defaults::Defaults,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            http_timeout: Duration::from_secs(5),
            poll: Duration::from_secs(2),
            defaults: crate::defaults::Defaults::default(),
        }
    }
}

/// What the API server holds for one test, read at the start of a reconcile.
struct World {
    server: Option<Pod>,
    shards: BTreeMap<u32, Pod>,
    results: Option<ConfigMap>,
}

struct Apis {
    lts: Api<LoadTestResource>,
    pods: Api<Pod>,
    services: Api<Service>,
    config_maps: Api<ConfigMap>,
}

pub async fn reconcile(lt: Arc<LoadTestResource>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile_started();
    let ns = lt
        .namespace()
        .ok_or_else(|| Error::Invalid("LoadTest has no namespace".into()))?;
    let uid = lt.uid().unwrap_or_default();
    if lt.meta().deletion_timestamp.is_some() {
        ctx.metrics.set_phase(&uid, None);
        return Ok(Action::await_change());
    }
    let apis = Apis {
        lts: Api::namespaced(ctx.client.clone(), &ns),
        pods: Api::namespaced(ctx.client.clone(), &ns),
        services: Api::namespaced(ctx.client.clone(), &ns),
        config_maps: Api::namespaced(ctx.client.clone(), &ns),
    };
    let world = observe(&apis, &lt).await?;
    // Children are built from the spec with the install's defaults filled in.
    let effective = ctx.config.defaults.apply(&lt);
    let old = lt.status.clone().unwrap_or_default();
    let mut st = old.clone();
    let mut step = Step {
        ctx: &ctx,
        lt: &effective,
        apis: &apis,
        world: &world,
        st: &mut st,
        now: Timestamp::now(),
    };
    let action = step.run().await;
    // Whatever the step managed before an error is still written: results already collected
    // and shards already released must not be forgotten.
    if st != old {
        write_status(&apis.lts, &lt, &st).await?;
        if st.phase != old.phase {
            announce(&ctx, &lt, &st).await;
        }
    }
    ctx.metrics.set_phase(&uid, st.phase.map(|p| p.as_str()));
    action
}

pub fn error_policy(lt: Arc<LoadTestResource>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(err.metric_label());
    tracing::warn!(loadtest = %lt.name_any(), error = %err, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(3))
}

async fn observe(apis: &Apis, lt: &LoadTestResource) -> Result<World> {
    let test = lt.name_any();
    let selector = format!("{}={test}", names::LABEL_LOADTEST);
    let pods = apis
        .pods
        .list(&ListParams::default().labels(&selector))
        .await?;
    let mut world = World {
        server: None,
        shards: BTreeMap::new(),
        results: apis.config_maps.get_opt(&names::results(&test)).await?,
    };
    for pod in pods {
        // Only children of this very LoadTest count: a re-created test of the same name must
        // not adopt its predecessor's pods.
        if !builders::is_owned_by(&pod.metadata, lt) {
            continue;
        }
        let name = pod.name_any();
        if name == names::server(&test) {
            world.server = Some(pod);
        } else if let Some(i) = names::shard_index(&test, &name) {
            world.shards.insert(i, pod);
        }
    }
    Ok(world)
}

async fn write_status(
    api: &Api<LoadTestResource>,
    lt: &LoadTestResource,
    st: &LoadTestStatus,
) -> Result<()> {
    let patch = serde_json::json!({
        "apiVersion": wsload_spec::API_VERSION,
        "kind": wsload_spec::KIND,
        "status": st,
    });
    api.patch_status(
        &lt.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

async fn announce(ctx: &Context, lt: &LoadTestResource, st: &LoadTestStatus) {
    let phase = st.phase.map(|p| p.as_str()).unwrap_or("Unknown");
    let failed = st.phase == Some(Phase::Failed);
    let note = st
        .message
        .clone()
        .unwrap_or_else(|| format!("phase {phase}"));
    tracing::info!(loadtest = %lt.name_any(), phase, message = %note, "phase changed");
    let event = Event {
        type_: if failed {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: phase.to_string(),
        note: Some(truncate(&note, 1000)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &lt.object_ref(&())).await {
        tracing::warn!(error = %e, "cannot publish event");
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

struct Step<'a> {
    ctx: &'a Context,
    lt: &'a LoadTestResource,
    apis: &'a Apis,
    world: &'a World,
    st: &'a mut LoadTestStatus,
    now: Timestamp,
}

const CONDITION_FAILED: &str = "Failed";

impl Step<'_> {
    async fn run(&mut self) -> Result<Action> {
        match self.st.phase {
            None => self.begin(),
            Some(Phase::Pending) => self.pending().await,
            Some(Phase::Starting) => self.starting().await,
            Some(Phase::Running) => self.running().await,
            Some(Phase::Collecting) => self.collecting().await,
            Some(Phase::Succeeded | Phase::Failed) => self.finished().await,
        }
    }

    fn test(&self) -> String {
        self.lt.name_any()
    }

    fn enter(&mut self, phase: Phase, message: impl Into<String>) {
        self.st.phase = Some(phase);
        self.st.phase_since = Some(Time(self.now));
        self.st.message = Some(message.into());
    }

    fn condition(&mut self, type_: &str, ok: bool, reason: &str, message: impl Into<String>) {
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

    fn failing(&self) -> bool {
        self.st
            .conditions
            .iter()
            .any(|c| c.type_ == CONDITION_FAILED && c.status == "True")
    }

    /// Marks the test as failed; it still collects what was measured when shards ran.
    fn mark_failed(&mut self, reason: &str, message: impl Into<String>) {
        let message = message.into();
        if !self.failing() {
            self.st.reason = Some(reason.to_string());
            self.condition(CONDITION_FAILED, true, reason, message.clone());
        }
        self.st.message = Some(message);
    }

    /// The first failure's message (the cause), and the latest one when it adds something.
    fn failure_message(&self) -> String {
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
    async fn fail(&mut self, reason: &str, message: impl Into<String>) -> Result<Action> {
        self.mark_failed(reason, message);
        let message = self.failure_message();
        self.enter(Phase::Failed, message);
        self.st.completion_time = Some(Time(self.now));
        self.finished().await
    }

    fn deadline_passed(&self, limit: Duration) -> bool {
        let Some(since) = self.st.phase_since.as_ref() else {
            return false;
        };
        let limit = SignedDuration::try_from(limit).unwrap_or(SignedDuration::MAX);
        self.now.duration_since(since.0) > limit
    }

    fn begin(&mut self) -> Result<Action> {
        self.st.observed_generation = self.lt.metadata.generation;
        self.st.start_time = Some(Time(self.now));
        let spec = &self.lt.spec;
        if let Err(errors) = wsload_spec::validate::validate(spec) {
            let list = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            self.mark_failed("InvalidSpec", format!("invalid LoadTest: {list}"));
            self.enter(Phase::Failed, format!("invalid LoadTest: {list}"));
            self.st.completion_time = Some(Time(self.now));
            return Ok(Action::await_change());
        }
        self.st.shards = results::shares(&self.test(), spec);
        self.condition(CONDITION_FAILED, false, "NoFailure", "");
        self.enter(Phase::Pending, "starting the server under test");
        Ok(Action::requeue(Duration::from_millis(200)))
    }

    fn timeouts(&self) -> (Duration, Duration, Duration) {
        let d = &self.lt.spec.run.deadlines;
        let start = d.scheduling.get() + d.ready.get();
        // connectionLimit has no expected length (the search decides): an hour unless set.
        let run = wsload_spec::timing::run_deadline(&self.lt.spec)
            .unwrap_or(Duration::from_secs(3600))
            + self.lt.spec.run.start_delay.get();
        (start, run, d.collect.get())
    }

    async fn pending(&mut self) -> Result<Action> {
        let Some(server) = self.lt.spec.target.server.clone() else {
            let url = self.lt.spec.target.url.clone().unwrap_or_default();
            self.st.target_url = Some(url.clone());
            self.enter(Phase::Starting, format!("target {url}; starting shards"));
            return Ok(Action::requeue(Duration::from_millis(200)));
        };
        let pp = PatchParams::apply(MANAGER).force();
        let test = self.test();
        if self.world.server.is_none() {
            let pod = builders::server_pod(self.lt, &server);
            self.apis
                .pods
                .patch(&names::server(&test), &pp, &Patch::Apply(&pod))
                .await?;
        }
        let svc = builders::server_service(self.lt, &server);
        self.apis
            .services
            .patch(&names::server(&test), &pp, &Patch::Apply(&svc))
            .await?;
        let (start_limit, _, _) = self.timeouts();
        match self.world.server.as_ref().map(pods::health) {
            Some(PodHealth::Ready { ip }) => {
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip.clone()
                };
                let url = format!("ws://{host}:{}{}", server.port, server.path);
                self.st.target_url = Some(url.clone());
                self.condition(
                    "ServerReady",
                    true,
                    "PodReady",
                    format!("{} at {url}", names::server(&test)),
                );
                self.enter(
                    Phase::Starting,
                    format!("server ready at {url}; starting shards"),
                );
                Ok(Action::requeue(Duration::from_millis(200)))
            }
            Some(PodHealth::Ended { reason }) => {
                self.fail(
                    "ServerFailed",
                    format!(
                        "server pod {} ended before the test: {reason}",
                        names::server(&test)
                    ),
                )
                .await
            }
            other => {
                if self.deadline_passed(start_limit) {
                    let why = other
                        .map(|h| h.describe())
                        .unwrap_or_else(|| "not created".into());
                    return self
                        .fail(
                            "ServerNotReady",
                            format!(
                                "server pod {} not ready within {}: {why}",
                                names::server(&test),
                                humantime(start_limit)
                            ),
                        )
                        .await;
                }
                Ok(Action::requeue(Duration::from_secs(1)))
            }
        }
    }

    /// The managed server must stay up while shards start and run.
    fn server_lost(&self) -> Option<String> {
        self.lt.spec.target.server.as_ref()?;
        match self.world.server.as_ref().map(pods::health) {
            None => Some("server pod deleted".into()),
            Some(PodHealth::Ended { reason }) => Some(format!("server pod ended: {reason}")),
            _ => None,
        }
    }

    fn endpoints(&self) -> Endpoints {
        let spec = &self.lt.spec;
        let server_metrics_url = spec
            .server_metrics
            .as_ref()
            .and_then(|m| m.url.clone())
            .or_else(|| {
                let server = spec.target.server.as_ref()?;
                let ip = self.world.server.as_ref().and_then(pods::ip)?;
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip
                };
                Some(format!("http://{host}:{}/metrics", server.metrics_port))
            });
        Endpoints {
            target_url: self.st.target_url.clone().unwrap_or_default(),
            server_metrics_url,
        }
    }

    async fn starting(&mut self) -> Result<Action> {
        if let Some(why) = self.server_lost() {
            return self.fail("ServerLost", why).await;
        }
        let test = self.test();
        self.ensure_results_config_map().await?;
        let endpoints = self.endpoints();
        let document =
            builders::loadtest_document(self.lt).map_err(|e| Error::Serialize(e.to_string()))?;
        let pp = PatchParams::apply(MANAGER).force();
        let (start_limit, _, _) = self.timeouts();
        let mut waiting = Vec::new();
        let mut ready = Vec::new();
        for i in 0..self.lt.spec.shards {
            let name = names::shard(&test, i);
            let Some(pod) = self.world.shards.get(&i) else {
                // Created once: a pod's spec is immutable, and the one made is the one to use.
                let pod = builders::shard_pod(self.lt, i, &endpoints, &document);
                self.apis
                    .pods
                    .patch(&name, &pp, &Patch::Apply(&pod))
                    .await?;
                waiting.push(format!("shard {i}: pod created"));
                continue;
            };
            match pods::health(pod) {
                PodHealth::Ready { ip } => ready.push((i, ip)),
                PodHealth::Ended { reason } => {
                    self.set_shard(i, ShardState::Failed, Some(reason.clone()));
                    return self
                        .fail(
                            "ShardFailed",
                            format!("shard {i} (pod {name}) ended before the start: {reason}"),
                        )
                        .await;
                }
                h => {
                    self.set_shard(i, ShardState::Pending, Some(h.describe()));
                    waiting.push(format!("shard {i} (pod {name}): {}", h.describe()));
                }
            }
        }
        for (i, _) in &ready {
            self.set_shard(*i, ShardState::Ready, None);
        }
        if !waiting.is_empty() {
            if self.deadline_passed(start_limit) {
                return self
                    .fail(
                        "ShardsNotReady",
                        format!(
                            "shards not ready within {}: {}",
                            humantime(start_limit),
                            waiting.join("; ")
                        ),
                    )
                    .await;
            }
            self.st.message = Some(format!(
                "{}/{} shards ready",
                ready.len(),
                self.lt.spec.shards
            ));
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        self.condition(
            "ShardsReady",
            true,
            "AllReady",
            format!("{} shards ready", ready.len()),
        );
        // The start instant is written to status before any shard hears it, so an operator that
        // restarts mid-release sends every shard the same instant.
        let Some(start_at) = self.st.start_at.as_ref().map(|t| t.0) else {
            let delay =
                SignedDuration::try_from(self.lt.spec.run.start_delay.get()).unwrap_or_default();
            let at = self.now.checked_add(delay).unwrap_or(self.now);
            self.st.start_at = Some(Time(at));
            self.st.message = Some(format!("all shards ready; releasing them at {at}"));
            return Ok(Action::requeue(Duration::from_millis(10)));
        };
        let start_ms = u64::try_from(start_at.as_millisecond()).unwrap_or(0);
        let mut refused = Vec::new();
        for (i, ip) in &ready {
            let client = ShardClient::new(ip, self.ctx.config.http_timeout);
            match client.start(start_ms).await {
                Ok(_) => self.set_shard(*i, ShardState::Running, None),
                Err(e) => refused.push(format!("shard {i}: {e}")),
            }
        }
        if !refused.is_empty() {
            if self.deadline_passed(start_limit) {
                return self
                    .fail(
                        "ReleaseFailed",
                        format!("shards could not be released: {}", refused.join("; ")),
                    )
                    .await;
            }
            self.st.message = Some(format!("releasing: {}", refused.join("; ")));
            return Ok(Action::requeue(Duration::from_millis(500)));
        }
        self.condition(
            "Released",
            true,
            "StartBarrier",
            format!("all shards released at {start_at}"),
        );
        self.enter(
            Phase::Running,
            format!("{} shards released at {start_at}", ready.len()),
        );
        Ok(Action::requeue(self.ctx.config.poll))
    }

    fn set_shard(&mut self, index: u32, state: ShardState, reason: Option<String>) {
        if let Some(s) = self.st.shards.iter_mut().find(|s| s.index == index) {
            s.state = state;
            s.reason = reason;
        }
    }

    fn shard(&self, index: u32) -> Option<&ShardStatus> {
        self.st.shards.iter().find(|s| s.index == index)
    }

    async fn ensure_results_config_map(&self) -> Result<()> {
        if self.world.results.is_some() {
            return Ok(());
        }
        let cm = builders::results_config_map(self.lt);
        match self
            .apis
            .config_maps
            .create(&PostParams::default(), &cm)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A shard that stopped being able to deliver its result, and why.
    fn shard_loss(&self, index: u32) -> Option<(ShardState, String)> {
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

    async fn running(&mut self) -> Result<Action> {
        let test = self.test();
        let (_, run_limit, _) = self.timeouts();
        if let Some(why) = self.server_lost() {
            self.mark_failed("ServerLost", format!("{why} during the run"));
        }
        let indexes: Vec<u32> = self.st.shards.iter().map(|s| s.index).collect();
        for i in indexes {
            let Some(state) = self.shard(i).map(|s| s.state) else {
                continue;
            };
            if !matches!(
                state,
                ShardState::Running | ShardState::Ready | ShardState::Pending
            ) {
                continue;
            }
            if let Some((bad, why)) = self.shard_loss(i) {
                self.shard_failed(i, bad, why);
                continue;
            }
            let Some(ip) = self.world.shards.get(&i).and_then(pods::ip) else {
                continue;
            };
            match ShardClient::new(&ip, self.ctx.config.http_timeout)
                .state()
                .await
            {
                Ok(cs) => {
                    if let (Some(us), Some(s)) = (
                        cs.started_at_micros,
                        self.st.shards.iter_mut().find(|s| s.index == i),
                    ) {
                        s.started_at = micros_time(us);
                    }
                    match cs.state {
                        RunState::Done | RunState::Failed => {
                            let note = cs.error.map(|e| format!("finished with an error: {e}"));
                            self.set_shard(i, ShardState::Done, note);
                        }
                        RunState::Waiting => self.shard_failed(
                            i,
                            ShardState::Lost,
                            format!(
                                "shard {i} is waiting for a start again: it restarted after release"
                            ),
                        ),
                        RunState::Armed | RunState::Running => {}
                    }
                }
                Err(e) => {
                    tracing::debug!(loadtest = %test, shard = i, error = %e, "shard state unknown")
                }
            }
        }
        self.st.start_skew_millis = skew_millis(&self.st.shards);
        let unfinished: Vec<u32> = self
            .st
            .shards
            .iter()
            .filter(|s| {
                matches!(
                    s.state,
                    ShardState::Running | ShardState::Ready | ShardState::Pending
                )
            })
            .map(|s| s.index)
            .collect();
        if unfinished.is_empty() {
            self.enter(Phase::Collecting, "all shards finished; collecting results");
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        if self.deadline_passed(run_limit) {
            for i in &unfinished {
                self.set_shard(*i, ShardState::Lost, Some("run deadline exceeded".into()));
            }
            self.mark_failed(
                "RunDeadlineExceeded",
                format!(
                    "shards {unfinished:?} did not finish within {}",
                    humantime(run_limit)
                ),
            );
            self.enter(
                Phase::Collecting,
                "run deadline exceeded; collecting what finished",
            );
            return Ok(Action::requeue(Duration::from_millis(10)));
        }
        let running = self.st.shards.len() - unfinished.len();
        self.st.message = Some(format!(
            "{running}/{} shards finished",
            self.st.shards.len()
        ));
        Ok(Action::requeue(self.ctx.config.poll))
    }

    fn shard_failed(&mut self, index: u32, state: ShardState, why: String) {
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

    async fn collecting(&mut self) -> Result<Action> {
        let test = self.test();
        let (_, _, collect_limit) = self.timeouts();
        let stored: Vec<String> = self
            .world
            .results
            .as_ref()
            .and_then(|cm| cm.data.as_ref())
            .map(|d| d.keys().cloned().collect())
            .unwrap_or_default();
        let done: Vec<u32> = self
            .st
            .shards
            .iter()
            .filter(|s| s.state == ShardState::Done)
            .map(|s| s.index)
            .collect();
        for i in done {
            let key = names::result_key(i);
            let ip = self.world.shards.get(&i).and_then(pods::ip);
            if !stored.contains(&key) {
                let Some(ip) = ip.clone() else {
                    self.shard_failed(
                        i,
                        ShardState::Lost,
                        "pod gone before its result was collected".into(),
                    );
                    continue;
                };
                match ShardClient::new(&ip, self.ctx.config.http_timeout)
                    .result()
                    .await
                {
                    Ok(Some(json)) => {
                        let patch = serde_json::json!({ "data": { key.clone(): json } });
                        self.apis
                            .config_maps
                            .patch(
                                &names::results(&test),
                                &PatchParams::default(),
                                &Patch::Merge(&patch),
                            )
                            .await?;
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(loadtest = %test, shard = i, error = %e, "cannot fetch result");
                        continue;
                    }
                }
            }
            // Stored: the shard may go. A shard that is already gone needs no word.
            if let Some(ip) = ip
                && let Err(e) = ShardClient::new(&ip, self.ctx.config.http_timeout)
                    .finish()
                    .await
            {
                tracing::debug!(loadtest = %test, shard = i, error = %e, "finish not delivered");
            }
            self.set_shard(i, ShardState::Collected, None);
        }
        let pending: Vec<u32> = self
            .st
            .shards
            .iter()
            .filter(|s| s.state == ShardState::Done)
            .map(|s| s.index)
            .collect();
        if !pending.is_empty() {
            if !self.deadline_passed(collect_limit) {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            for i in &pending {
                self.shard_failed(
                    *i,
                    ShardState::Lost,
                    format!("result not collected within {}", humantime(collect_limit)),
                );
            }
        }
        self.conclude().await
    }

    /// Merges every stored result, judges the thresholds and ends the test.
    async fn conclude(&mut self) -> Result<Action> {
        let test = self.test();
        let cm = self
            .apis
            .config_maps
            .get_opt(&names::results(&test))
            .await?;
        let data = cm.and_then(|c| c.data).unwrap_or_default();
        let shard_results: Vec<(u32, &String)> = self
            .st
            .shards
            .iter()
            .filter_map(|s| data.get(&names::result_key(s.index)).map(|d| (s.index, d)))
            .collect();
        self.st.results_config_map = Some(names::results(&test));
        if shard_results.is_empty() {
            return self.fail("NoResults", "no shard delivered a result").await;
        }
        match results::summarize(&self.lt.spec, &shard_results) {
            Ok(summary) => {
                let patch =
                    serde_json::json!({ "data": { names::MERGED_KEY: summary.merged_json } });
                self.apis
                    .config_maps
                    .patch(
                        &names::results(&test),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
                summary.apply(self.st);
                let pass = self.st.verdict == Some(wsload_spec::status::Verdict::Pass);
                let verdict_message = summary.verdict_message.clone();
                self.condition(
                    "ThresholdsPassed",
                    pass,
                    if pass { "Pass" } else { "Fail" },
                    verdict_message,
                );
            }
            Err(e) => {
                self.mark_failed(
                    "MergeFailed",
                    format!("shard results cannot be merged: {e}"),
                );
            }
        }
        self.st.completion_time = Some(Time(self.now));
        if self.failing() {
            let m = self.failure_message();
            self.enter(Phase::Failed, m);
        } else {
            let verdict = self.st.verdict.map_or("none", |v| match v {
                wsload_spec::status::Verdict::Pass => "Pass",
                wsload_spec::status::Verdict::Fail => "Fail",
            });
            let rate = self.st.achieved_rate.clone().unwrap_or_default();
            self.enter(Phase::Succeeded, format!("verdict {verdict}; {rate}"));
        }
        self.finished().await
    }

    async fn finished(&mut self) -> Result<Action> {
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
                tracing::info!(loadtest = %self.test(), "ttlAfterFinished passed; deleting the LoadTest");
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
    async fn cleanup(&self) -> Result<()> {
        let test = self.test();
        let mut pods: Vec<String> = self
            .world
            .shards
            .values()
            .map(ResourceExt::name_any)
            .collect();
        if self.world.server.is_some() {
            pods.push(names::server(&test));
        }
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

fn micros_time(us: u64) -> Option<Time> {
    Timestamp::from_microsecond(i64::try_from(us).ok()?)
        .ok()
        .map(Time)
}

/// Spread of the shards' actual start instants, once every running shard reported one.
fn skew_millis(shards: &[ShardStatus]) -> Option<f64> {
    let starts: Vec<i64> = shards
        .iter()
        .filter_map(|s| s.started_at.as_ref().map(|t| t.0.as_microsecond()))
        .collect();
    if starts.is_empty() {
        return None;
    }
    let (min, max) = (starts.iter().min()?, starts.iter().max()?);
    Some((max - min) as f64 / 1000.0)
}

fn humantime(d: Duration) -> String {
    wsload_spec::Dur(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_is_the_spread_of_reported_starts() {
        let mk = |us: Option<u64>| ShardStatus {
            started_at: us.and_then(micros_time),
            ..Default::default()
        };
        assert_eq!(skew_millis(&[mk(None)]), None);
        let s = skew_millis(&[mk(Some(1_000_000)), mk(Some(1_004_500)), mk(None)]);
        assert_eq!(s, Some(4.5));
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        assert_eq!(truncate("héllo", 2), "h...");
        assert_eq!(truncate("ok", 10), "ok");
    }
}
