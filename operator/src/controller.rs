//! Runs the LoadTest controller: leader election first, then the watch loop; `/metrics`,
//! `/healthz` and `/readyz` from the start so probes answer while a replica waits as a
//! candidate.

use crate::control_key::ControlKey;
use crate::leader::{self, LeaderConfig};
use crate::metrics::Metrics;
use crate::names;
use crate::reconcile::{self, Config, Context};
use crate::{Error, Result};
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::utils::{Backoff, PredicateConfig, ResetTimerBackoff};
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use wsload_spec::LoadTestResource;

#[derive(Debug, Clone)]
pub struct Options {
    pub metrics_listen: SocketAddr,
    /// Watch only this namespace (namespaced install); all namespaces when `None`.
    pub namespace: Option<String>,
    /// Lease to hold while reconciling; `None` runs without election (one replica only).
    pub leader: Option<LeaderConfig>,
    pub config: Config,
    /// The key each test's shard control token is derived from.
    pub control_key: ControlKey,
}

/// How long a failed watch waits before it tries again: 0.5 s doubling to 5 s, each wait
/// plus up to itself again at random, back to 0.5 s after a minute without failure.
///
/// Not kube's default (client-go's 30 s cap, so up to 60 s with its jitter): that is sized for
/// API servers with thousands of watchers, and this operator holds two. After an outage long
/// enough to reach the cap, a watch that resumes into 410 Gone waits once to learn it and
/// again before it lists: two minutes in which a new LoadTest would not be seen (a 60-second
/// bound in tests/control_plane.rs was missed on a slow machine).
fn watch_backoff() -> ResetTimerBackoff<watcher::ExponentialBackoff> {
    let delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(delays.into(), Duration::from_secs(60))
}

/// The controller's own wait after a trigger error: none. kube's controller otherwise sleeps
/// its default backoff on every error out of the merged triggers, on top of the watch's own,
/// and while it sleeps no trigger is read: a failing pod watch held back the LoadTest watch's
/// list for its 20 s (measured with RUST_LOG=kube_runtime=debug in tests/control_plane.rs).
/// Each watch backs off on its own ([`watch_backoff`]), so none loops hot.
struct NoPause;

impl Iterator for NoPause {
    type Item = Duration;

    fn next(&mut self) -> Option<Self::Item> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoPause {
    fn reset(&mut self) {}
}

pub async fn run(client: kube::Client, opts: Options) -> Result<()> {
    let metrics = Arc::new(Metrics::default());
    let listener = tokio::net::TcpListener::bind(opts.metrics_listen)
        .await
        .map_err(|source| Error::Listen {
            addr: opts.metrics_listen,
            source,
        })?;
    tracing::info!(address = %opts.metrics_listen, "serving /metrics, /healthz, /readyz");
    tokio::spawn(wsload_http::serve(listener, metrics.clone()));

    let leases: Option<(Api<Lease>, LeaderConfig)> = opts
        .leader
        .clone()
        .map(|cfg| (Api::namespaced(client.clone(), &cfg.namespace), cfg));
    if let Some((api, cfg)) = &leases {
        leader::acquire(api, cfg).await?;
    }
    metrics.set_leader(true);
    metrics.set_ready(true);

    let (lts, pods): (Api<LoadTestResource>, Api<Pod>) = match &opts.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let reporter = Reporter {
        controller: "wsload-operator".into(),
        instance: opts.leader.as_ref().map(|l| l.identity.clone()),
    };
    // One watch of the tests' pods feeds both the triggers and the store every reconcile reads.
    let (pod_store, pod_writer) = reflector::store();
    let children = watcher::Config::default().labels(names::LABEL_LOADTEST);
    let pod_events = watcher(pods, children)
        .backoff(watch_backoff())
        .reflect(pod_writer)
        .touched_objects();
    // The operator's own status writes do not call for another reconcile (each one scheduled
    // its next look): only a new or changed spec does.
    let (lt_store, lt_writer) = reflector::store();
    let lt_events = watcher(lts, watcher::Config::default())
        .backoff(watch_backoff())
        .reflect(lt_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());
    let ctx = Arc::new(Context::new(
        client.clone(),
        pod_store,
        Recorder::new(client.clone(), reporter),
        metrics.clone(),
        opts.config.clone(),
        opts.control_key.clone(),
    ));
    let controller = Controller::for_stream(lt_events, lt_store)
        .owns_stream(pod_events)
        .trigger_backoff(NoPause)
        .shutdown_on_signal()
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(
                    namespace = obj.namespace.as_deref().unwrap_or_default(),
                    loadtest = %obj.name,
                    "reconciled"
                ),
                Err(e) => tracing::debug!(error = %e, "reconcile error"),
            }
        });

    match &leases {
        Some((api, cfg)) => {
            tokio::select! {
                () = controller => {
                    if let Err(e) = leader::release(api, cfg).await {
                        tracing::warn!(error = %e, "could not release the leader lease");
                    }
                    Ok(())
                }
                lost = leader::hold(api, cfg) => {
                    metrics.set_leader(false);
                    Err(lost)
                }
            }
        }
        None => {
            controller.await;
            Ok(())
        }
    }
}
