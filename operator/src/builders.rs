//! Pure builders of a LoadTest's children: the same spec always gives the same objects, so
//! applying them again is a no-op, and they are unit-tested without an API server.

use crate::names::{self, MANAGER, SHARD_PORT};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, Container, ContainerPort, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSecurityContext,
    PodSpec, Probe, SeccompProfile, Secret, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Service, ServicePort, ServiceSpec, Sysctl, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use wsload_contract::control as control_file;
use wsload_contract::env as var;
use wsload_control::Token;
use wsload_spec::{
    API_VERSION, KIND, LoadTestResource, LoadTestSpec, ManagedServer, Placement, SecretValue,
    Spread,
};

pub fn owner(lt: &LoadTestResource) -> Option<OwnerReference> {
    lt.controller_owner_ref(&())
}

fn meta(lt: &LoadTestResource, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: lt.namespace(),
        labels: Some(labels),
        owner_references: owner(lt).map(|o| vec![o]),
        ..Default::default()
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_string(),
                api_version: None,
            }),
            ..Default::default()
        }),
    }
}

fn secret_env(name: String, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name,
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_string(),
                key: key.to_string(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
    }
}

/// Every pod runs as a non-root user under the runtime's default seccomp filter: with
/// [`restricted`] on its containers, what the "restricted" Pod Security level asks.
fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// Containers run as an unprivileged user with nothing writable and no capabilities.
fn restricted() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: None,
        }),
        ..Default::default()
    }
}

fn http_probe(path: &str, port: u16) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::Int(i32::from(port)),
            ..Default::default()
        }),
        period_seconds: Some(1),
        timeout_seconds: Some(2),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

fn port(name: &str, port: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: i32::from(port),
        protocol: Some("TCP".to_string()),
        ..Default::default()
    }
}

fn selector(test: &str, role: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([
            (names::LABEL_LOADTEST.to_string(), test.to_string()),
            (names::LABEL_ROLE.to_string(), role.to_string()),
        ])),
        match_expressions: None,
    }
}

fn host_term(test: &str, role: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selector(test, role)),
        topology_key: "kubernetes.io/hostname".to_string(),
        ..Default::default()
    }
}

/// The user's affinity plus the anti-affinity terms wsload adds; the user's own terms are kept.
fn affinity(
    user: Option<&Affinity>,
    required: Vec<PodAffinityTerm>,
    preferred: Vec<PodAffinityTerm>,
) -> Option<Affinity> {
    let mut a = user.cloned().unwrap_or_default();
    if !required.is_empty() || !preferred.is_empty() {
        let anti = a
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default);
        if !required.is_empty() {
            anti.required_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .extend(required);
        }
        if !preferred.is_empty() {
            anti.preferred_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .extend(preferred.into_iter().map(|t| WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: t,
                }));
        }
    }
    (a != Affinity::default()).then_some(a)
}

fn placement_spec(p: &Placement, affinity: Option<Affinity>) -> PodSpec {
    PodSpec {
        node_selector: (!p.node_selector.is_empty()).then(|| p.node_selector.clone()),
        tolerations: (!p.tolerations.is_empty()).then(|| p.tolerations.clone()),
        affinity,
        ..Default::default()
    }
}

/// Server replica `replica`'s pod: the reference server (or the user's image) bound to the pod
/// IP. Every replica carries the labels the Service selects.
pub fn server_pod(lt: &LoadTestResource, server: &ManagedServer, replica: u32) -> Pod {
    let test = lt.name_any();
    let spec = &lt.spec;
    let mut envs = vec![
        field_env("POD_IP", "status.podIP"),
        env(var::SERVER_LISTEN, format!("$(POD_IP):{}", server.port)),
        env(
            var::SERVER_METRICS_LISTEN,
            format!("$(POD_IP):{}", server.metrics_port),
        ),
        env(var::SERVER_PROFILE, server.profile.as_str()),
    ];
    if let Some(jwt) = spec.auth.as_ref().and_then(|a| a.jwt.as_ref()) {
        envs.extend(secret_source_env(var::SERVER_JWT_SECRET, &jwt.secret));
        if let Some(iss) = &jwt.issuer {
            envs.push(env(var::SERVER_JWT_ISSUER, iss.clone()));
        }
        if let Some(aud) = &jwt.audience {
            envs.push(env(var::SERVER_JWT_AUDIENCE, aud.clone()));
        }
    } else if server.profile == wsload_spec::ServerProfile::Wse {
        envs.push(env(var::SERVER_WSE_ALLOW_ANONYMOUS, "true"));
    }
    envs.extend(server.env.iter().map(|e| env(&e.name, e.value.clone())));
    // A fanout the server publishes: its ticker over the fanout's topics, before the user's
    // args (which may start one of their own instead).
    let mut args = wsload_spec::ticker_args(spec);
    args.extend(server.args.iter().cloned());
    let mut labels = names::labels(&test, names::ROLE_SERVER);
    labels.insert("app.kubernetes.io/name".into(), "wsload-server".into());
    labels.insert(names::LABEL_REPLICA.into(), replica.to_string());
    let mut metadata = meta(lt, names::server_replica(&test, replica), labels);
    metadata.annotations = Some(scrape_annotations(server.metrics_port));
    // Replicas on nodes of their own where there are nodes to spare: the point of several is
    // more of a machine's sockets, memory and cores; one node may still hold them all.
    let apart = if server.replicas > 1 {
        vec![host_term(&test, names::ROLE_SERVER)]
    } else {
        vec![]
    };
    let mut pod_spec = placement_spec(
        &server.placement,
        affinity(server.placement.affinity.as_ref(), vec![], apart),
    );
    pod_spec.restart_policy = Some("Never".to_string());
    pod_spec.termination_grace_period_seconds = Some(15);
    pod_spec.automount_service_account_token = Some(false);
    pod_spec.security_context = Some(pod_security_context());
    pod_spec.containers = vec![Container {
        name: "server".to_string(),
        image: Some(server.image.clone()),
        image_pull_policy: server.image_pull_policy.map(|p| p.as_str().to_string()),
        args: Some(args).filter(|a| !a.is_empty()),
        env: Some(envs),
        ports: Some(vec![
            port("ws", server.port),
            port("metrics", server.metrics_port),
        ]),
        readiness_probe: Some(http_probe("/readyz", server.metrics_port)),
        resources: server.resources.clone(),
        security_context: Some(restricted()),
        ..Default::default()
    }];
    Pod {
        metadata,
        spec: Some(pod_spec),
        status: None,
    }
}

fn scrape_annotations(port: u16) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("prometheus.io/scrape".to_string(), "true".to_string()),
        ("prometheus.io/port".to_string(), port.to_string()),
        ("prometheus.io/path".to_string(), "/metrics".to_string()),
    ])
}

/// The env entries that deliver a secret: inline values and `fromEnv` need nothing in a pod
/// (`fromEnv` names a variable the user sets through `loadgen.env`); a Secret key becomes a
/// secretKeyRef.
fn secret_source_env(name: &str, s: &SecretValue) -> Vec<EnvVar> {
    match (&s.value, &s.secret_ref) {
        (Some(v), _) => vec![env(name, v.clone())],
        (None, Some(r)) => vec![secret_env(name.to_string(), &r.name, &r.key)],
        (None, None) => vec![],
    }
}

/// The Service in front of the server replicas: a stable name for users and Prometheus. With
/// one replica the shards dial its pod IP (neither DNS nor kube-proxy in the way); with more,
/// the Service's cluster IP, and kube-proxy spreads their connections over the replicas.
pub fn server_service(lt: &LoadTestResource, server: &ManagedServer) -> Service {
    let test = lt.name_any();
    Service {
        metadata: meta(
            lt,
            names::server(&test),
            names::labels(&test, names::ROLE_SERVER),
        ),
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([
                (names::LABEL_LOADTEST.to_string(), test.clone()),
                (
                    names::LABEL_ROLE.to_string(),
                    names::ROLE_SERVER.to_string(),
                ),
            ])),
            ports: Some(vec![
                ServicePort {
                    name: Some("ws".into()),
                    port: i32::from(server.port),
                    target_port: Some(IntOrString::String("ws".into())),
                    ..Default::default()
                },
                ServicePort {
                    name: Some("metrics".into()),
                    port: i32::from(server.metrics_port),
                    target_port: Some(IntOrString::String("metrics".into())),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The LoadTest as the file a shard reads ([`var::LOADTEST`]): the same document `wsload run`
/// takes, so a shard validates exactly what a local run would.
pub fn loadtest_document(
    lt: &LoadTestResource,
) -> Result<String, wsload_spec::yaml::SerializeError> {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Doc<'a> {
        api_version: &'a str,
        kind: &'a str,
        metadata: DocMeta,
        spec: &'a LoadTestSpec,
    }
    #[derive(serde::Serialize)]
    struct DocMeta {
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
    }
    wsload_spec::yaml::to_string(&Doc {
        api_version: API_VERSION,
        kind: KIND,
        metadata: DocMeta {
            name: lt.name_any(),
            namespace: lt.namespace(),
        },
        spec: &lt.spec,
    })
}

/// The group the shard's container runs with (the pod's `fsGroup`): the mounted control token
/// is readable by this group only, whichever non-root user the image runs as. The built-in
/// image's own group (loadgen-image/Dockerfile, `USER 65532:65532`).
pub const SHARD_FS_GROUP: i64 = 65532;

/// The token's file mode in the shard's volume: owner and group read, nobody else.
const TOKEN_MODE: i32 = 0o440;

/// The volume of the control token in a shard pod.
const TOKEN_VOLUME: &str = "control-token";

/// The Secret holding the test's control token (`<test>-control`, key `token`), which its
/// shard pods mount. Owned by the LoadTest, so it goes with it; immutable, as the token is
/// derived from the test and never changes.
pub fn control_secret(lt: &LoadTestResource, token: &Token) -> Secret {
    let test = lt.name_any();
    Secret {
        metadata: meta(
            lt,
            names::control_secret(&test),
            names::labels(&test, names::ROLE_CONTROL),
        ),
        data: Some(BTreeMap::from([(
            control_file::TOKEN_KEY.to_string(),
            ByteString(token.expose().as_bytes().to_vec()),
        )])),
        type_: Some("Opaque".to_string()),
        immutable: Some(true),
        ..Default::default()
    }
}

/// The test's control Secret as a read-only volume (the token alone, mode [`TOKEN_MODE`]).
fn token_volume(test: &str) -> Volume {
    Volume {
        name: TOKEN_VOLUME.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(names::control_secret(test)),
            default_mode: Some(TOKEN_MODE),
            optional: Some(false),
            items: None,
        }),
        ..Default::default()
    }
}

/// Shard `index`'s pod. `restartPolicy: Never`: a restarted shard would repeat load the
/// others did not; the operator sees the failure and applies the test's policy instead.
pub fn shard_pod(lt: &LoadTestResource, index: u32, target_url: &str, document: &str) -> Pod {
    let test = lt.name_any();
    let spec = &lt.spec;
    let lg = &spec.loadgen;
    let mut envs = vec![
        field_env("POD_IP", "status.podIP"),
        env(var::LOADTEST, document),
        env(var::SHARD_INDEX, index.to_string()),
        env(var::SHARD_COUNT, spec.shards.to_string()),
        env(var::AWAIT_START, "true"),
        env(var::METRICS_LISTEN, format!("$(POD_IP):{SHARD_PORT}")),
        // No server metrics URL: delivery is the operator's to reconcile, over every replica
        // and every shard at once, never one shard's against a shared counter.
        env(var::TARGET_URL, target_url),
        // The file's path only: the token itself is in no env value, arg or status.
        env(var::CONTROL_TOKEN_FILE, control_file::token_path()),
    ];
    for (secret, key) in secret_refs(spec) {
        envs.push(secret_env(
            wsload_spec::secret_env_name(&secret, &key),
            &secret,
            &key,
        ));
    }
    envs.extend(lg.env.iter().map(|e| env(&e.name, e.value.clone())));

    let required_hosts = |on: bool| {
        let mut terms = Vec::new();
        if on {
            terms.push(host_term(&test, names::ROLE_SHARD));
        }
        terms
    };
    let mut required = required_hosts(lg.spread == Spread::OnePerNode);
    let preferred = required_hosts(lg.spread == Spread::Preferred);
    if lg.separate_from_server && spec.target.server.is_some() {
        required.push(host_term(&test, names::ROLE_SERVER));
    }
    let mut pod_spec = placement_spec(
        &lg.placement,
        affinity(lg.placement.affinity.as_ref(), required, preferred),
    );
    pod_spec.restart_policy = Some("Never".to_string());
    pod_spec.termination_grace_period_seconds = Some(10);
    pod_spec.service_account_name = lg.service_account_name.clone();
    pod_spec.automount_service_account_token = Some(false);
    pod_spec.volumes = Some(vec![token_volume(&test)]);
    pod_spec.security_context = Some(PodSecurityContext {
        fs_group: Some(SHARD_FS_GROUP),
        sysctls: (!lg.sysctls.is_empty()).then(|| {
            lg.sysctls
                .iter()
                .map(|(name, value)| Sysctl {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect()
        }),
        ..pod_security_context()
    });
    if let Some(tuning) = lg.tuning.as_ref().filter(|t| !t.sysctls.is_empty()) {
        let mut args = vec!["sysctl".to_string()];
        args.extend(tuning.sysctls.iter().map(|(k, v)| format!("{k}={v}")));
        pod_spec.init_containers = Some(vec![Container {
            name: "tune".to_string(),
            image: Some(lg.image.clone()),
            image_pull_policy: lg.image_pull_policy.map(|p| p.as_str().to_string()),
            args: Some(args),
            security_context: Some(SecurityContext {
                privileged: Some(true),
                run_as_user: Some(0),
                run_as_non_root: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        }]);
    }
    pod_spec.containers = vec![Container {
        name: "loadgen".to_string(),
        image: Some(lg.image.clone()),
        image_pull_policy: lg.image_pull_policy.map(|p| p.as_str().to_string()),
        args: Some(vec!["shard".to_string()]),
        env: Some(envs),
        ports: Some(vec![port("metrics", SHARD_PORT)]),
        readiness_probe: Some(http_probe("/readyz", SHARD_PORT)),
        resources: lg.resources.clone(),
        security_context: Some(restricted()),
        volume_mounts: Some(vec![VolumeMount {
            name: TOKEN_VOLUME.to_string(),
            mount_path: control_file::TOKEN_DIR.to_string(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    }];
    let mut labels = names::shard_labels(&test, index);
    labels.insert("app.kubernetes.io/name".into(), "wsload-loadgen".into());
    let mut metadata = meta(lt, names::shard(&test, index), labels);
    metadata.annotations = Some(scrape_annotations(SHARD_PORT));
    Pod {
        metadata,
        spec: Some(pod_spec),
        status: None,
    }
}

/// Every Secret key the spec reads, for the shards' env.
fn secret_refs(spec: &LoadTestSpec) -> Vec<(String, String)> {
    let Some(auth) = &spec.auth else {
        return vec![];
    };
    [auth.jwt.as_ref().map(|j| &j.secret), auth.token.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.secret_ref.as_ref())
        .map(|r| (r.name.clone(), r.key.clone()))
        .collect()
}

/// The ConfigMap that keeps every shard's result; created empty, filled key by key.
/// The results ConfigMap holding the merged result (gzip-compressed JSON).
pub fn results_config_map(
    lt: &LoadTestResource,
    merged: Vec<u8>,
    report: Option<Vec<u8>>,
) -> ConfigMap {
    let test = lt.name_any();
    let mut data = BTreeMap::from([(names::MERGED_KEY.to_string(), ByteString(merged))]);
    if let Some(report) = report {
        data.insert(names::REPORT_KEY.to_string(), ByteString(report));
    }
    ConfigMap {
        metadata: meta(lt, names::results(&test), names::labels(&test, "results")),
        binary_data: Some(data),
        ..Default::default()
    }
}

/// Shard `index`'s own result (gzip-compressed JSON), one object per shard.
pub fn shard_result_config_map(lt: &LoadTestResource, index: u32, result: Vec<u8>) -> ConfigMap {
    let test = lt.name_any();
    let mut labels = names::labels(&test, names::ROLE_RESULT);
    labels.insert(names::LABEL_SHARD.to_string(), index.to_string());
    ConfigMap {
        metadata: meta(lt, names::shard_result(&test, index), labels),
        binary_data: Some(BTreeMap::from([(
            names::RESULT_KEY.to_string(),
            ByteString(result),
        )])),
        ..Default::default()
    }
}

/// The field manager is part of the contract with `kubectl`: users see who owns what.
pub const FIELD_MANAGER: &str = MANAGER;

/// A LoadTest's own reference, for owner checks in tests.
pub fn is_owned_by(meta: &ObjectMeta, lt: &LoadTestResource) -> bool {
    let uid = lt.meta().uid.as_deref();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| Some(o.uid.as_str()) == uid && o.controller == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{UID, yaml_loadtest as lt};
    use std::collections::BTreeSet;

    fn env_of<'a>(pod: &'a Pod, name: &str) -> Option<&'a EnvVar> {
        pod.spec.as_ref()?.containers[0]
            .env
            .as_ref()?
            .iter()
            .find(|e| e.name == name)
    }

    const SPEC: &str = "  target: {server: {profile: wse, port: 8443}}
  protocol: wse
  scenario: throughput
  connections: [100]
  shards: 3
  auth: {jwt: {secret: {secretRef: {name: wse-jwt, key: secret}}, issuer: me}}
  loadgen:
    placement: {nodeSelector: {pool: epyc}, tolerations: [{key: dedicated, operator: Equal, value: loadgen, effect: NoSchedule}]}
    sysctls: {net.ipv4.ip_local_port_range: \"1024 65535\"}
    tuning: {sysctls: {net.core.somaxconn: \"65535\"}}
";

    /// The control Secret: the token under its key, owned by the test (so it goes with it),
    /// labelled as the test's other children; never changed once made.
    #[test]
    fn the_control_secret_holds_the_token_and_belongs_to_the_test() {
        let lt = lt(SPEC);
        let token = Token::new("0123456789abcdef0123456789abcdef").expect("a token");
        let secret = control_secret(&lt, &token);
        assert_eq!(secret.metadata.name.as_deref(), Some("t-control"));
        assert_eq!(
            secret.metadata.namespace.as_deref(),
            Some(crate::fixtures::NS)
        );
        let owner = &secret.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller, owner.kind.as_str()),
            (UID, Some(true), KIND)
        );
        let labels = secret.metadata.labels.as_ref().expect("labels");
        assert_eq!(
            labels.get(names::LABEL_LOADTEST).map(String::as_str),
            Some("t")
        );
        assert_eq!(
            labels.get(names::LABEL_ROLE).map(String::as_str),
            Some("control")
        );
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("wsload-operator")
        );
        let data = secret.data.as_ref().expect("data");
        assert_eq!(data.len(), 1);
        assert_eq!(
            data.get(control_file::TOKEN_KEY).map(|b| b.0.as_slice()),
            Some(token.expose().as_bytes())
        );
        assert_eq!(secret.immutable, Some(true));
    }

    /// A shard pod mounts the control Secret read-only where the contract says, readable by
    /// its group only, and is told the file's path: the token is in no env value or arg.
    #[test]
    fn a_shard_pod_mounts_its_control_token_and_names_only_its_path() {
        let lt = lt(SPEC);
        let pod = shard_pod(&lt, 0, "ws://10.0.0.9:8443/", "doc");
        let spec = pod.spec.as_ref().expect("spec");
        let volumes = spec.volumes.as_ref().expect("volumes");
        let volume = volumes
            .iter()
            .find(|v| v.name == TOKEN_VOLUME)
            .expect("the token volume");
        let source = volume.secret.as_ref().expect("a Secret volume");
        assert_eq!(source.secret_name.as_deref(), Some("t-control"));
        assert_eq!(source.default_mode, Some(0o440));
        assert_eq!(source.optional, Some(false));
        let security = spec.security_context.as_ref().expect("pod security");
        assert_eq!(security.fs_group, Some(SHARD_FS_GROUP));
        assert_eq!(security.run_as_non_root, Some(true));
        let main = &spec.containers[0];
        let mounts = main.volume_mounts.as_ref().expect("mounts");
        assert_eq!(mounts.len(), 1);
        assert_eq!(
            (
                mounts[0].name.as_str(),
                mounts[0].mount_path.as_str(),
                mounts[0].read_only
            ),
            (TOKEN_VOLUME, control_file::TOKEN_DIR, Some(true))
        );
        let file = env_of(&pod, var::CONTROL_TOKEN_FILE).expect("the token file variable");
        assert_eq!(file.value.as_deref(), Some("/var/run/wsload/control/token"));
        assert!(file.value_from.is_none());
        // Nothing in the pod refers to the token's key other than as a file in the volume.
        let text = serde_json::to_string(&pod).expect("json");
        let key = crate::control_key::ControlKey::from_bytes(crate::fixtures::KEY);
        let token = key.token(crate::fixtures::NS, "t", UID);
        assert!(!text.contains(token.expose()));
        assert!(main.args.iter().flatten().all(|a| !a.contains("token")));
    }

    #[test]
    fn a_shard_pod_is_told_its_share_target_and_secrets_and_is_placed_apart() {
        let lt = lt(SPEC);
        let pod = shard_pod(&lt, 2, "ws://10.0.0.9:8443/", "doc");
        assert_eq!(pod.metadata.name.as_deref(), Some("t-shard-2"));
        let owner = &pod.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!((owner.uid.as_str(), owner.controller), (UID, Some(true)));
        let value = |n: &str| env_of(&pod, n).and_then(|e| e.value.clone());
        assert_eq!(value(var::SHARD_INDEX).as_deref(), Some("2"));
        assert_eq!(value(var::SHARD_COUNT).as_deref(), Some("3"));
        assert_eq!(
            value(var::TARGET_URL).as_deref(),
            Some("ws://10.0.0.9:8443/")
        );
        assert_eq!(value(var::LOADTEST).as_deref(), Some("doc"));
        assert!(env_of(&pod, var::SERVER_METRICS_URL).is_none());
        assert_eq!(
            value(var::METRICS_LISTEN).as_deref(),
            Some("$(POD_IP):9464")
        );
        let secret = env_of(&pod, &wsload_spec::secret_env_name("wse-jwt", "secret"))
            .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .expect("secret env");
        assert_eq!(
            (secret.name.as_str(), secret.key.as_str()),
            ("wse-jwt", "secret")
        );

        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(
            spec.node_selector
                .as_ref()
                .and_then(|s| s.get("pool"))
                .map(String::as_str),
            Some("epyc")
        );
        assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(1));
        let anti = spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .expect("required anti-affinity");
        let roles: Vec<&str> = anti
            .iter()
            .map(|t| {
                assert_eq!(t.topology_key, "kubernetes.io/hostname");
                t.label_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.as_ref())
                    .and_then(|m| m.get(names::LABEL_ROLE))
                    .map(String::as_str)
                    .unwrap_or("")
            })
            .collect();
        assert_eq!(
            roles,
            ["shard", "server"],
            "one shard per node, none beside the server"
        );
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_ref())
            .expect("sysctls");
        assert_eq!(sysctls[0].name, "net.ipv4.ip_local_port_range");
        let init = &spec
            .init_containers
            .as_ref()
            .expect("tuning init container")[0];
        assert_eq!(
            init.security_context.as_ref().and_then(|s| s.privileged),
            Some(true)
        );
        assert_eq!(
            init.args.as_deref(),
            Some(&["sysctl".to_string(), "net.core.somaxconn=65535".to_string()][..])
        );
        let main = &spec.containers[0];
        assert_eq!(
            main.security_context
                .as_ref()
                .and_then(|s| s.read_only_root_filesystem),
            Some(true)
        );
        assert_eq!(
            main.readiness_probe
                .as_ref()
                .and_then(|p| p.http_get.as_ref())
                .and_then(|h| h.path.as_deref()),
            Some("/readyz")
        );
    }

    /// The variables on a pod the operator builds are those the contract lists for it; the
    /// shard's and the server's command lines are checked against the same lists.
    #[test]
    fn pods_carry_the_variables_the_contract_lists() {
        let names = |pod: &Pod| -> BTreeSet<String> {
            let env = pod.spec.as_ref().and_then(|s| s.containers[0].env.clone());
            env.unwrap_or_default()
                .into_iter()
                .map(|e| e.name)
                .filter(|n| n != "POD_IP" && !n.starts_with(var::SECRET_PREFIX))
                .collect()
        };
        let listed =
            |vars: &[&str]| -> BTreeSet<String> { vars.iter().map(|v| v.to_string()).collect() };
        let shard = names(&shard_pod(&lt(SPEC), 0, "ws://10.0.0.9:8443/", "doc"));
        assert_eq!(shard, listed(var::SHARD_POD));
        let anonymous = "  target: {server: {profile: wse}}\n  protocol: wse\n  scenario: throughput\n  connections: [10]\n";
        let mut server = BTreeSet::new();
        for spec in [
            SPEC.to_string(),
            SPEC.replace("issuer: me", "issuer: me, audience: you"),
            anonymous.to_string(),
        ] {
            let lt = lt(&spec);
            let managed = lt.spec.target.server.clone().expect("server");
            server.extend(names(&server_pod(&lt, &managed, 0)));
        }
        assert_eq!(server, listed(var::SERVER_POD));
    }

    #[test]
    fn spread_none_and_an_external_target_add_no_anti_affinity_and_no_tuning() {
        let lt = lt(
            "  target: {url: \"ws://example:80/\"}\n  scenario: pingLatency\n  shards: 2\n  loadgen: {spread: none}\n",
        );
        let pod = shard_pod(&lt, 0, "ws://example:80/", "doc");
        let spec = pod.spec.expect("spec");
        assert!(spec.affinity.is_none());
        assert!(spec.init_containers.is_none());
        assert!(spec.security_context.and_then(|s| s.sysctls).is_none());
    }

    #[test]
    fn the_server_pod_binds_its_pod_ip_and_gets_the_jwt_secret() {
        let lt = lt(SPEC);
        let server = lt.spec.target.server.clone().expect("server");
        let pod = server_pod(&lt, &server, 0);
        assert_eq!(pod.metadata.name.as_deref(), Some("t-server"));
        // One replica: nothing to keep apart.
        assert!(
            pod.spec
                .as_ref()
                .and_then(|s| s.affinity.as_ref())
                .is_none()
        );
        let value = |n: &str| env_of(&pod, n).and_then(|e| e.value.clone());
        assert_eq!(value(var::SERVER_LISTEN).as_deref(), Some("$(POD_IP):8443"));
        assert_eq!(value(var::SERVER_PROFILE).as_deref(), Some("wse"));
        assert_eq!(value(var::SERVER_JWT_ISSUER).as_deref(), Some("me"));
        assert!(
            env_of(&pod, var::SERVER_JWT_SECRET)
                .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
                .is_some()
        );
        let svc = server_service(&lt, &server);
        let ports: Vec<i32> = svc
            .spec
            .and_then(|s| s.ports)
            .unwrap_or_default()
            .iter()
            .map(|p| p.port)
            .collect();
        assert_eq!(ports, [8443, 9090]);
    }

    #[test]
    fn a_fanout_the_server_publishes_starts_its_ticker_before_the_users_args() {
        let ticker = lt(
            "  target: {server: {profile: pubsub, replicas: 2, args: [--subscriber-queue, '64']}}\n  scenario: fanout\n  fanout: {topics: 4, publisher: server}\n  rate: {messagesPerSecond: 400}\n  message: {size: 16}\n",
        );
        let server = ticker.spec.target.server.clone().expect("server");
        let args = |pod: &Pod| pod.spec.as_ref().expect("spec").containers[0].args.clone();
        let expected: Vec<String> = [
            "--ticker-topics",
            "4",
            "--ticker-rate",
            "100",
            "--ticker-payload-size",
            "16",
            "--subscriber-queue",
            "64",
        ]
        .map(String::from)
        .to_vec();
        for replica in 0..2 {
            assert_eq!(
                args(&server_pod(&ticker, &server, replica)),
                Some(expected.clone())
            );
        }
        // wsload's publishers: the user's args alone; none at all: no args.
        let own = lt("  target: {server: {profile: pubsub}}\n  scenario: fanout\n");
        let server = own.spec.target.server.clone().expect("server");
        assert_eq!(args(&server_pod(&own, &server, 0)), None);
    }

    #[test]
    fn server_replicas_are_named_labelled_for_the_service_and_kept_apart() {
        let lt =
            lt("  target: {server: {replicas: 3}}\n  scenario: throughput\n  connections: [30]\n");
        let server = lt.spec.target.server.clone().expect("server");
        let svc = server_service(&lt, &server);
        let selector = svc.spec.and_then(|s| s.selector).expect("selector");
        for replica in 0..3 {
            let pod = server_pod(&lt, &server, replica);
            let name = pod.metadata.name.clone().expect("name");
            assert_eq!(name, names::server_replica("t", replica));
            let labels = pod.metadata.labels.clone().expect("labels");
            assert!(
                selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
                "{name}: {labels:?} not selected by {selector:?}"
            );
            assert_eq!(
                labels.get(names::LABEL_REPLICA).map(String::as_str),
                Some(replica.to_string().as_str())
            );
            let preferred = pod
                .spec
                .as_ref()
                .and_then(|s| s.affinity.as_ref()?.pod_anti_affinity.as_ref())
                .and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .expect("preferred anti-affinity among replicas");
            assert_eq!(
                preferred[0].pod_affinity_term.topology_key,
                "kubernetes.io/hostname"
            );
        }
    }

    /// Every pod the operator creates passes "restricted", checked rule by rule against the
    /// standard (pod_security.rs: Host Namespaces, HostPath Volumes, Host Ports, Privileged
    /// Containers, Capabilities, /proc Mount Type, Seccomp, AppArmor, SELinux, HostProcess,
    /// Sysctls, Volume Types, Privilege Escalation, Running as Non-root, Running as Non-root
    /// user); only the tuning container the user asks for breaks it, and baseline too.
    #[test]
    fn every_pod_passes_restricted_pod_security_unless_tuning_is_asked_for() {
        use crate::pod_security::{Level, violations};
        let untuned = SPEC.replace(
            "    tuning: {sysctls: {net.core.somaxconn: \"65535\"}}\n",
            "",
        );
        assert_ne!(untuned, SPEC);
        let specs = [
            untuned,
            "  target: {server: {profile: pubsub, replicas: 2}}\n  scenario: fanout\n  fanout: {topics: 4, publisher: server}\n  rate: {messagesPerSecond: 400}\n  message: {size: 16}\n".to_string(),
            "  target: {url: \"ws://example:80/\"}\n  scenario: pingLatency\n  shards: 2\n  loadgen: {spread: none}\n".to_string(),
        ];
        for spec in &specs {
            let lt = lt(spec);
            let mut pods = vec![shard_pod(&lt, 0, "ws://10.0.0.9:8443/", "doc")];
            if let Some(server) = &lt.spec.target.server {
                pods.extend((0..server.replicas.max(1)).map(|r| server_pod(&lt, server, r)));
            }
            for pod in &pods {
                let broken = violations(pod, Level::Restricted);
                assert!(broken.is_empty(), "{:?}: {broken:?}", pod.metadata.name);
            }
        }
        let tuned = shard_pod(&lt(SPEC), 0, "ws://10.0.0.9:8443/", "doc");
        let rules = |level| -> BTreeSet<&str> {
            violations(&tuned, level).iter().map(|v| v.rule).collect()
        };
        assert_eq!(
            rules(Level::Restricted),
            BTreeSet::from([
                "Privileged Containers",
                "Privilege Escalation",
                "Running as Non-root",
                "Running as Non-root user",
                "Capabilities",
            ])
        );
        assert_eq!(
            rules(Level::Baseline),
            BTreeSet::from(["Privileged Containers"])
        );
        assert!(rules(Level::Privileged).is_empty());
    }

    #[test]
    fn the_shard_document_is_a_loadtest_file_wsload_accepts() {
        let lt = lt(SPEC);
        let doc = loadtest_document(&lt).expect("yaml");
        let parsed = wsload_spec::LoadTest::from_yaml(&doc, "env").expect("valid LoadTest");
        assert_eq!(parsed.spec, lt.spec);
        assert_eq!(parsed.metadata.name, "t");
    }
}
