//! The reconcile loop: one LoadTest's phase machine (docs/operator.md). Each call observes the
//! test's children, moves the status forward at most one phase, and says when to look again.
//! Every decision comes from the status and the children alone, so a restarted operator resumes
//! a running test where the old one left it.

mod admission;
mod cells;
mod clocks;
mod collect;
mod conditions;
mod connections;
mod disrupt;
mod fanout;
mod measure;
mod reason;
mod replica_watch;
mod rollout;
mod running;
mod start;
mod store;
#[cfg(test)]
mod tests;
mod view;
mod written;

use crate::builders;
use crate::control_key::ControlKey;
use crate::metrics::Metrics;
use crate::names::{self, MANAGER};
use crate::pod_cache::PodCache;
use crate::{Error, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;
use wsload_http::http_client::Client;
use wsload_spec::LoadTestResource;
use wsload_spec::status::{LoadTestStatus, Phase};

pub struct Context {
    pub client: kube::Client,
    /// Every test's pods, from the controller's own watch: a reconcile reads them here, not
    /// from the API server, however many shards a test has.
    pub pods: PodCache,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub config: Config,
    /// Each test's control token is derived from it (control_key.rs).
    pub control_key: ControlKey,
    /// One connection pool for every shard's control endpoint and every server's counter:
    /// each poll reuses a shard's kept-alive connection rather than opening one per shard
    /// per poll. Each call still has its own limit (`control_timeout`, `result_timeout`).
    pub http: Client,
    /// The server counter settling after a cell, per LoadTest uid. In memory only: it is a
    /// few seconds of readings, and a restarted operator simply settles the cell again.
    pub settles: Mutex<HashMap<String, cells::Settling>>,
    /// Each running test's shard clock probes, per LoadTest uid (clocks.rs). In memory only:
    /// status keeps the estimates, and a restarted operator probes afresh.
    pub clocks: Mutex<HashMap<String, clocks::Clocks>>,
    /// Each test's server replicas' connection counters as last read, per LoadTest uid
    /// (connections.rs). In memory only: status keeps their sums.
    pub connections: connections::Readings,
    /// The resourceVersion of each test's last status write (written.rs).
    pub written: written::Written,
    /// The managed server's replicas read while a disrupted cell runs (replica_watch.rs).
    pub watches: replica_watch::Watches,
}

impl Context {
    pub fn new(
        client: kube::Client,
        pods: Store<Pod>,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        config: Config,
        control_key: ControlKey,
    ) -> Context {
        Context {
            client,
            pods: PodCache::new(pods),
            recorder,
            metrics,
            config,
            control_key,
            http: Client::new(),
            settles: Mutex::new(HashMap::new()),
            clocks: Mutex::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
            watches: Mutex::new(HashMap::new()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Limit on one control exchange with a shard (state, release, cell, end, finish) or a
    /// server's counter: small bodies inside the cluster, so a shard that has not answered by
    /// then is unreachable, and must not hold up the others' release.
    pub control_timeout: Duration,
    /// Limit on fetching one shard's result (up to megabytes).
    pub result_timeout: Duration,
    /// How often a running test is looked at even when nothing changes.
    pub poll: Duration,
    /// From deciding a cell (after the first) to its start, and from every shard connected
    /// to the cell's measure instant: every shard hears of it before the instant, so all
    /// begin together.
    pub cell_delay: Duration,
    pub defaults: crate::defaults::Defaults,
    /// Read cluster-scoped objects before a test creates anything (admission.rs): the
    /// namespace's Pod Security level and the installed CRD. Off for a namespaced install,
    /// whose Role cannot grant `get` on either: it would only be refused.
    pub read_cluster_objects: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            control_timeout: Duration::from_secs(2),
            result_timeout: Duration::from_secs(30),
            poll: Duration::from_secs(2),
            cell_delay: Duration::from_secs(1),
            defaults: crate::defaults::Defaults::default(),
            read_cluster_objects: true,
        }
    }
}

/// What the API server holds for one test, read at the start of a reconcile.
struct World {
    /// The managed server's replica pods, by replica index.
    pub(super) servers: BTreeMap<u32, Pod>,
    pub(super) shards: BTreeMap<u32, Pod>,
}

struct Apis {
    pub(super) lts: Api<LoadTestResource>,
    pub(super) pods: Api<Pod>,
    pub(super) services: Api<Service>,
    pub(super) config_maps: Api<ConfigMap>,
    /// Created only (the control token's): never read.
    pub(super) secrets: Api<Secret>,
    /// The user's own, rolled by a `restart: {deployment}` disruption: read and patched only,
    /// where the chart's `rbac.rollDeployments` grants it.
    pub(super) deployments: Api<Deployment>,
}

pub async fn reconcile(lt: Arc<LoadTestResource>, ctx: Arc<Context>) -> Result<Action> {
    // Every line a reconcile logs names its test with its namespace: one operator conducts
    // tests of the same name in several namespaces.
    let span = tracing::info_span!(
        "reconcile",
        namespace = %lt.namespace().unwrap_or_default(),
        loadtest = %lt.name_any()
    );
    reconcile_test(lt, ctx).instrument(span).await
}

async fn reconcile_test(lt: Arc<LoadTestResource>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile_started();
    let ns = lt.namespace().ok_or_else(|| Error::NoNamespace {
        loadtest: lt.name_any(),
    })?;
    let uid = lt.uid().unwrap_or_default();
    if lt.meta().deletion_timestamp.is_some() {
        ctx.metrics.set_phase(&uid, None);
        cells::forget(&ctx, &uid);
        clocks::forget(&ctx, &uid);
        connections::forget(&ctx, &uid);
        replica_watch::forget(&ctx, &uid);
        written::forget(&ctx, &uid);
        return Ok(Action::await_change());
    }
    let apis = Apis {
        lts: Api::namespaced(ctx.client.clone(), &ns),
        pods: Api::namespaced(ctx.client.clone(), &ns),
        services: Api::namespaced(ctx.client.clone(), &ns),
        config_maps: Api::namespaced(ctx.client.clone(), &ns),
        secrets: Api::namespaced(ctx.client.clone(), &ns),
        deployments: Api::namespaced(ctx.client.clone(), &ns),
    };
    ctx.pods.ready().await?;
    let written::Fresh { lt, restore } = written::fresh(&ctx, &apis.lts, lt).await?;
    let world = observe(&ctx.pods, &lt);
    // Children are built from the spec with the install's defaults filled in.
    let effective = ctx.config.defaults.apply(&lt);
    let old = lt.status.clone().unwrap_or_default();
    let mut st = old.clone();
    let mut action = View::now(&ctx, &effective, &apis, &world, &mut st)
        .run()
        .await;
    // Whatever the step managed before an error is still written: results already collected
    // and shards already released must not be forgotten.
    if st != old || restore {
        let mut stored = match write_status(&apis.lts, &lt, &st).await {
            Err(e) => {
                // Refused for a field the installed CRD does not declare: an older CRD (one
                // admission could not read). It would be refused at every reconcile, so the
                // test stops, its last accepted status carrying the failure.
                let field =
                    outdated_field(&e).filter(|_| !old.phase.is_some_and(Phase::is_finished));
                let Some(field) = field else {
                    return Err(e);
                };
                tracing::error!(field, "status refused: the CRD does not declare a field");
                st = old.clone();
                let message = admission::outdated_crd(&[field], "the test is stopped");
                action = View::now(&ctx, &effective, &apis, &world, &mut st)
                    .fail(reason::Reason::CrdOutdated, message)
                    .await;
                write_status(&apis.lts, &lt, &st).await?
            }
            Ok(stored) => stored,
        };
        if restore {
            stored = written::clear_foreign(&apis.lts, &st, stored).await?;
        }
        written::remember(&ctx, &uid, &stored);
        if st.phase != old.phase {
            announce(&ctx, &lt, &st).await;
        }
    }
    ctx.metrics.set_phase(&uid, st.phase.map(|p| p.as_str()));
    if st.phase.is_some_and(Phase::is_finished) {
        cells::forget(&ctx, &uid);
        clocks::forget(&ctx, &uid);
        connections::forget(&ctx, &uid);
        replica_watch::forget(&ctx, &uid);
        // The last write stays known: a finished test read from a cache that lags must not
        // be taken for a running one. Deleting the test forgets it.
    }
    action
}

pub fn error_policy(lt: Arc<LoadTestResource>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(err.metric_label());
    tracing::warn!(
        namespace = %lt.namespace().unwrap_or_default(),
        loadtest = %lt.name_any(),
        error = %err,
        "reconcile failed; retrying"
    );
    Action::requeue(Duration::from_secs(3))
}

/// The test's children as the controller's cache holds them. The cache is complete (the
/// reconcile waited for its first listing), so a pod missing here is gone, not unread.
fn observe(pods: &PodCache, lt: &LoadTestResource) -> World {
    let test = lt.name_any();
    let ns = lt.namespace();
    let mut world = World {
        servers: BTreeMap::new(),
        shards: BTreeMap::new(),
    };
    for pod in pods.pods() {
        // Only children of this very LoadTest count: a re-created test of the same name must
        // not adopt its predecessor's pods.
        if pod.namespace() != ns || !builders::is_owned_by(&pod.metadata, lt) {
            continue;
        }
        let name = pod.name_any();
        if let Some(r) = names::server_replica_index(&test, &name) {
            world.servers.insert(r, Pod::clone(&pod));
        } else if let Some(i) = names::shard_index(&test, &name) {
            world.shards.insert(i, Pod::clone(&pod));
        }
    }
    world
}

/// The field a status write was refused for, when the CRD does not declare it.
fn outdated_field(e: &Error) -> Option<String> {
    match e {
        Error::Kube(kube::Error::Api(status)) => crate::crd::undeclared_field(&status.message),
        _ => None,
    }
}

async fn write_status(
    api: &Api<LoadTestResource>,
    lt: &LoadTestResource,
    st: &LoadTestStatus,
) -> Result<LoadTestResource> {
    let patch = serde_json::json!({
        "apiVersion": wsload_spec::API_VERSION,
        "kind": wsload_spec::KIND,
        "status": st,
    });
    let stored = api
        .patch_status(
            &lt.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(stored)
}

async fn announce(ctx: &Context, lt: &LoadTestResource, st: &LoadTestStatus) {
    let phase = st.phase.map(|p| p.as_str()).unwrap_or("Unknown");
    let failed = st.phase == Some(Phase::Failed);
    let note = st
        .message
        .clone()
        .unwrap_or_else(|| format!("phase {phase}"));
    tracing::info!(phase, message = %note, "phase changed");
    let event = Event {
        type_: if failed {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: phase.to_string(),
        note: Some(crate::text::truncate(&note, 1000)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &lt.object_ref(&())).await {
        tracing::warn!(error = %e, "cannot publish event");
    }
}

use view::View;
