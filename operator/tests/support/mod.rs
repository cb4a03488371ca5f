//! Test harness for the operator's integration tests: a real kube-apiserver + etcd per test
//! binary ([`cluster`]) and a fake kubelet that runs pods as local processes on loopback
//! addresses ([`kubelet`]). Include it from a test file with `mod support;`.

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

pub mod cluster;
pub mod fake_shards;
pub mod faults;
pub mod fleet_env;
pub mod kubelet;
pub mod loadtests;
pub mod proxy;

// Re-exports for test files, which use some of them each.
#[allow(unused_imports)]
pub use cluster::{Cluster, shared};
#[allow(unused_imports)]
pub use kubelet::{Kubelet, KubeletOpts, PodProcess};

use std::fmt::Debug;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::{Api, Resource};
use serde::{Serialize, de::DeserializeOwned};

/// Polls `name` every 100 ms until `cond` holds for it (`None`: it does not exist) and returns
/// what it last saw. Panics after `timeout` with `what` and the object's last status.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut(Option<&K>) -> bool,
) -> Option<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let deadline = Instant::now() + timeout;
    loop {
        let current = match api.get_opt(name).await {
            Ok(obj) => obj,
            Err(e) => panic!("waiting for {name} ({what}): {e}"),
        };
        if cond(current.as_ref()) {
            return current;
        }
        if Instant::now() >= deadline {
            let status = current
                .as_ref()
                .and_then(|o| serde_json::to_value(o).ok())
                .map(|v| {
                    serde_json::to_string_pretty(v.get("status").unwrap_or(&v)).unwrap_or_default()
                })
                .unwrap_or_else(|| "(does not exist)".into());
            panic!(
                "timed out after {timeout:?} waiting for {name}: {what}; last status:\n{status}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `status` of the pod's condition `type_` ("True", "False", ...).
pub fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

pub fn pod_ready(pod: &Pod) -> bool {
    pod_condition(pod, "Ready") == Some("True")
}

pub fn pod_phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// The status of the pod's first container, the one the test kubelet runs.
pub fn main_container(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

/// The operator's log with the test's output when RUST_LOG asks for it
/// (`RUST_LOG=wsload_operator=debug`); silent otherwise.
pub fn test_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_test_writer()
        .try_init();
}

/// The operator's control key in these tests (the chart generates one per install).
pub const CONTROL_KEY: &[u8] = b"operator-tests-control-key-0123456789";

/// The operator in this process, scoped to namespace `ns` as the chart's namespaced mode runs
/// it, until the handle is aborted.
pub fn run_operator(
    client: kube::Client,
    ns: &str,
    leader: Option<wsload_operator::leader::LeaderConfig>,
    metrics_listen: std::net::SocketAddr,
    config: wsload_operator::reconcile::Config,
) -> tokio::task::JoinHandle<()> {
    let opts = wsload_operator::controller::Options {
        metrics_listen,
        namespace: Some(ns.to_string()),
        leader,
        config,
        control_key: wsload_operator::control_key::ControlKey::from_bytes(CONTROL_KEY),
    };
    tokio::spawn(async move {
        if let Err(err) = wsload_operator::controller::run(client, opts).await {
            eprintln!("operator stopped: {err}");
        }
    })
}
