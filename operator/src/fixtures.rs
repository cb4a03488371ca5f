//! A mocked API server for reconcile unit tests (tower-test, as controller-rs does): the
//! reconcile under test talks to a `kube::Client` whose every request lands here, is recorded,
//! and is answered the way the API server would (echoing applies, storing status, refusing
//! what a scenario says to refuse). Pods come from a reflector store the scenario fills. So a
//! branch of the phase machine runs in milliseconds, with no cluster; the lifecycle tests on
//! a real kube-apiserver stay the proof that the real API agrees.

use crate::control_key::ControlKey;
use crate::metrics::Metrics;
use crate::reconcile::{self, Config, Context};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use wsload_spec::LoadTestResource;
use wsload_spec::status::LoadTestStatus;

pub const NS: &str = "ns";
pub const UID: &str = "uid-1";
/// The operator's control key in reconcile tests.
pub const KEY: &[u8] = b"fixture-key-fixture-key-fixture-key!";

/// A LoadTest named `name` with `spec` (JSON) and `status`.
pub fn loadtest(name: &str, spec: Value, status: Option<LoadTestStatus>) -> LoadTestResource {
    let mut lt: LoadTestResource = serde_json::from_value(json!({
        "apiVersion": wsload_spec::API_VERSION,
        "kind": wsload_spec::KIND,
        "metadata": {"name": name, "namespace": NS, "uid": UID, "generation": 1},
        "spec": spec,
    }))
    .expect("a LoadTest");
    lt.status = status;
    lt
}

/// A LoadTest `t` like [`loadtest`]'s, its spec given as YAML (each line indented two
/// spaces), without status.
pub fn yaml_loadtest(spec: &str) -> LoadTestResource {
    let doc = format!(
        "apiVersion: {}\nkind: {}\nmetadata: {{name: t, namespace: {NS}, uid: {UID}, generation: 1}}\nspec:\n{spec}",
        wsload_spec::API_VERSION,
        wsload_spec::KIND
    );
    wsload_spec::yaml::parse(&doc).expect("LoadTest")
}

/// The name of `pod`'s main (first) container.
fn main_container(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

/// `pod` as the kubelet reports it Ready at `ip`.
pub fn ready(mut pod: Pod, ip: &str) -> Pod {
    let container = main_container(&pod);
    let condition = |type_: &str| PodCondition {
        type_: type_.into(),
        status: "True".into(),
        ..Default::default()
    };
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some(ip.into()),
        conditions: Some(vec![
            condition("PodScheduled"),
            condition("ContainersReady"),
            condition("Ready"),
        ]),
        container_statuses: Some(vec![ContainerStatus {
            name: container,
            ready: true,
            ..Default::default()
        }]),
        ..Default::default()
    });
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some("node-0".into());
    }
    pod
}

/// `pod` as the scheduler leaves one it cannot place: Pending, on no node, `PodScheduled`
/// False with `message`.
pub fn unschedulable(mut pod: Pod, message: &str) -> Pod {
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some(message.into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    pod
}

/// `pod` with its main container exited with `code`.
pub fn exited(mut pod: Pod, code: i32, reason: &str) -> Pod {
    let name = main_container(&pod);
    let status = pod.status.get_or_insert_with(Default::default);
    status.phase = Some("Failed".into());
    status.container_statuses = Some(vec![ContainerStatus {
        name,
        state: Some(k8s_openapi::api::core::v1::ContainerState {
            terminated: Some(k8s_openapi::api::core::v1::ContainerStateTerminated {
                exit_code: code,
                reason: Some(reason.into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    pod
}

/// One request the reconcile made.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub body: Value,
}

impl Call {
    /// `"PATCH pods/t-shard-0"`: the verb and the path after the namespace.
    pub fn short(&self) -> String {
        format!("{} {}", self.method, in_namespace(&self.path))
    }
}

/// A request path after the namespace, without its query: `pods/t-shard-0`.
fn in_namespace(path: &str) -> &str {
    path.split_once(&format!("/namespaces/{NS}/"))
        .map_or(path, |(_, t)| t)
        .split('?')
        .next()
        .unwrap_or_default()
}

/// A `Status` failure as the API server answers it.
fn failure(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// What the mocked API server holds and how it answers.
#[derive(Default)]
struct Server {
    calls: Vec<Call>,
    /// ConfigMaps by name (what GET returns).
    config_maps: BTreeMap<String, Value>,
    /// Paths (after the namespace, e.g. `configmaps/t-results`) answered with this status.
    refuse: Vec<(String, u16)>,
    /// The LoadTest under test, as the API server returns it.
    loadtest: Value,
    /// Labels of the namespace [`NS`] (its Pod Security level).
    namespace_labels: BTreeMap<String, String>,
    /// The LoadTest CRD as installed, when not this operator's own.
    crd: Option<Value>,
    /// Status fields (top-level) a status write is refused for, as an API server whose CRD
    /// does not declare them refuses a server-side apply.
    undeclared: Vec<String>,
}

/// The mocked API server of one scenario.
#[derive(Clone, Default)]
pub struct MockApi(Arc<Mutex<Server>>);

impl MockApi {
    fn server(&self) -> std::sync::MutexGuard<'_, Server> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The namespace [`NS`] carries `key: value`.
    pub fn namespace_label(&self, key: &str, value: &str) -> &Self {
        self.server()
            .namespace_labels
            .insert(key.to_string(), value.to_string());
        self
    }

    /// The installed LoadTest CRD is `crd` instead of this operator's own.
    pub fn installed_crd(&self, crd: Value) -> &Self {
        self.server().crd = Some(crd);
        self
    }

    /// Status writes carrying `field` (top-level in status) are refused, as an API server
    /// whose CRD predates the field refuses them.
    pub fn undeclared_status(&self, field: &str) -> &Self {
        self.server().undeclared.push(field.to_string());
        self
    }

    /// Requests to `path` (after the namespace; a prefix) get HTTP `code`.
    pub fn refuse(&self, path: &str, code: u16) -> &Self {
        self.server().refuse.push((path.to_string(), code));
        self
    }

    /// A ConfigMap the API server already holds.
    pub fn config_map(&self, cm: &k8s_openapi::api::core::v1::ConfigMap) -> &Self {
        let name = cm.metadata.name.clone().unwrap_or_default();
        let value = serde_json::to_value(cm).expect("json");
        self.server().config_maps.insert(name, value);
        self
    }

    /// A ConfigMap as the API server now holds it (applied by the reconcile, or given).
    pub fn stored_config_map(&self, name: &str) -> Option<k8s_openapi::api::core::v1::ConfigMap> {
        let value = self.server().config_maps.get(name)?.clone();
        Some(serde_json::from_value(value).expect("a ConfigMap"))
    }

    /// Every request so far, as `"VERB path-after-namespace"`.
    pub fn calls(&self) -> Vec<String> {
        self.server().calls.iter().map(Call::short).collect()
    }

    /// The last status the reconcile wrote.
    pub fn status(&self) -> Option<LoadTestStatus> {
        let server = self.server();
        let body = server
            .calls
            .iter()
            .rev()
            .find(|c| c.method == Method::PATCH && c.short().ends_with("/status"))?
            .body
            .get("status")?
            .clone();
        Some(serde_json::from_value(body).expect("a status"))
    }

    /// Reasons of the Events published.
    pub fn events(&self) -> Vec<String> {
        self.server()
            .calls
            .iter()
            .filter(|c| c.path.contains("/events"))
            .filter_map(|c| c.body.get("reason")?.as_str().map(String::from))
            .collect()
    }

    fn answer(&self, method: &Method, path: &str, body: &Value) -> (u16, Value) {
        let mut server = self.server();
        let tail = in_namespace(path);
        if let Some((_, code)) = server.refuse.iter().find(|(p, _)| tail.starts_with(p)) {
            let code = *code;
            let message = format!("{tail} refused by the test");
            return (code, failure(code, "Forbidden", &message));
        }
        match (
            method.as_str(),
            tail.split('/').collect::<Vec<_>>().as_slice(),
        ) {
            ("GET", ["", "api", "v1", "namespaces", name]) => (
                200,
                json!({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": name, "labels": server.namespace_labels}}),
            ),
            // The installed CRD: this operator's own unless a test installs another.
            (
                "GET",
                [
                    "",
                    "apis",
                    "apiextensions.k8s.io",
                    "v1",
                    "customresourcedefinitions",
                    _,
                ],
            ) => {
                let crd = server.crd.clone().unwrap_or_else(|| {
                    serde_json::to_value(crate::crd::definition()).expect("json")
                });
                (200, crd)
            }
            ("GET", ["configmaps", name]) => match server.config_maps.get(*name) {
                Some(cm) => (200, cm.clone()),
                None => (404, failure(404, "NotFound", "not found")),
            },
            ("PATCH", ["configmaps", name]) => {
                server.config_maps.insert(name.to_string(), body.clone());
                (200, body.clone())
            }
            ("PATCH", ["loadtests", _, "status"]) => {
                let status = body.get("status").cloned().unwrap_or(Value::Null);
                if let Some(f) = server.undeclared.iter().find(|f| status.get(f).is_some()) {
                    let message = format!(
                        "failed to create typed patch object (/; wsload.dev/v1alpha1, \
                         Kind=LoadTest): .status.{f}: field not declared in schema"
                    );
                    return (500, failure(500, "InternalError", &message));
                }
                let mut lt = server.loadtest.clone();
                lt["status"] = status;
                (200, lt)
            }
            ("POST", ["events"]) => (201, body.clone()),
            ("DELETE", [kind, name]) => (
                200,
                json!({"apiVersion": "v1", "kind": "Status", "status": "Success",
                       "details": {"name": name, "kind": kind}}),
            ),
            // Applies of pods and services: the object as sent.
            _ => (200, body.clone()),
        }
    }

    /// A client whose requests this mock answers, for as long as the client lives.
    pub fn client(&self) -> kube::Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let path = parts.uri.to_string();
                let (code, answer) = api.answer(&parts.method, &path, &body);
                api.server().calls.push(Call {
                    method: parts.method,
                    path,
                    body,
                });
                let response = Response::builder()
                    .status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).unwrap_or_default()))
                    .expect("a response");
                send.send_response(response);
            }
        });
        kube::Client::new(service, NS)
    }
}

/// A pod store holding exactly `pods`, ready as after the controller's first listing.
pub fn pod_store(pods: Vec<Pod>) -> Store<Pod> {
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for pod in pods {
        writer.apply_watcher_event(&watcher::Event::InitApply(pod));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

/// Runs one reconcile of `lt` against `api`, with `pods` in the cache.
pub async fn reconcile_once(
    api: &MockApi,
    lt: LoadTestResource,
    pods: Vec<Pod>,
) -> crate::Result<Action> {
    api.server().loadtest = serde_json::to_value(&lt).expect("json");
    let client = api.client();
    let reporter = Reporter {
        controller: "wsload-operator".into(),
        instance: None,
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        pod_store(pods),
        Recorder::new(client, reporter),
        Arc::new(Metrics::default()),
        Config {
            control_timeout: Duration::from_millis(300),
            ..Config::default()
        },
        ControlKey::from_bytes(KEY),
    ));
    reconcile::reconcile(Arc::new(lt), ctx).await
}

/// A moment `ago` before now, as status records it.
pub fn ago(ago: Duration) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let d = k8s_openapi::jiff::SignedDuration::try_from(ago).expect("duration");
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::now().checked_sub(d).expect("a time"),
    )
}
