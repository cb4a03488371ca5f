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
use kube::runtime::utils::PredicateConfig;
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use std::net::SocketAddr;
use std::sync::Arc;
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
        .default_backoff()
        .reflect(pod_writer)
        .touched_objects();
    // The operator's own status writes do not call for another reconcile (each one scheduled
    // its next look): only a new or changed spec does.
    let (lt_store, lt_writer) = reflector::store();
    let lt_events = watcher(lts, watcher::Config::default())
        .default_backoff()
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
