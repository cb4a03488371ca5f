//! Proves the test harness in `support/`: the shared control plane, and the test kubelet
//! running pods as real processes with the status a kubelet would write.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use nix::sys::signal::Signal;
use serde_json::json;
use support::kubelet::http_get_status;
use support::{
    Kubelet, KubeletOpts, main_container, pod_condition, pod_phase, pod_ready, wait_for,
};

const T: Duration = Duration::from_secs(30);

async fn setup(prefix: &str, opts: KubeletOpts) -> (Api<Pod>, Kubelet) {
    let cluster = support::shared().await;
    let ns = cluster.namespace(prefix).await;
    let client = cluster.client().await;
    let kubelet = Kubelet::start(client.clone(), &ns, opts).await;
    (Api::namespaced(client, &ns), kubelet)
}

async fn create(api: &Api<Pod>, pod: serde_json::Value) -> Pod {
    let pod: Pod = serde_json::from_value(pod).expect("a valid Pod");
    api.create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

/// A pod running `sh -c script`: the image is a name only, `command` picks the host's sh.
fn shell_pod(name: &str, restart: &str, script: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}],
        },
    })
}

fn process_alive(pid: u32) -> bool {
    // Zombies are dead for this purpose; the test kubelet reaps its children anyway.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn cluster_serves_namespaces_to_client_and_kubectl() {
    let cluster = support::shared().await;
    let a = cluster.namespace("harness").await;
    let b = cluster.namespace("harness").await;
    assert_ne!(a, b, "namespaces must be unique");
    let ns = Api::<Namespace>::all(cluster.client().await)
        .get(&a)
        .await
        .expect("get the namespace just created");
    assert_eq!(ns.metadata.name.as_deref(), Some(a.as_str()));
    let out = cluster.kubectl_ok(&["get", "namespace", &b, "-o", "name"]);
    assert_eq!(out.trim(), format!("namespace/{b}"));
    assert!(std::ptr::eq(cluster, support::shared().await));
}

#[tokio::test]
async fn server_pod_runs_on_its_ip_follows_readiness_and_dies_when_deleted() {
    let (pods, kubelet) = setup("server", KubeletOpts::default()).await;
    create(
        &pods,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "server", "labels": {"app": "server"}},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 10,
                "containers": [{
                    "name": "server",
                    "image": "wsload/server:0.1.0",
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": wsload_contract::env::SERVER_LISTEN, "value": "$(POD_IP):8080"},
                        {"name": wsload_contract::env::SERVER_METRICS_LISTEN, "value": "$(POD_IP):9090"},
                    ],
                    "ports": [
                        {"name": "ws", "containerPort": 8080},
                        {"name": "metrics", "containerPort": 9090},
                    ],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}},
                }],
            },
        }),
    )
    .await;
    let pod = wait_for(&pods, "server", "Ready", T, |p| p.is_some_and(pod_ready))
        .await
        .expect("exists");
    let status = pod.status.as_ref().expect("status");
    let ip = status.pod_ip.clone().expect("podIP");
    assert!(ip.starts_with("127.") && ip != "127.0.0.1", "pod IP {ip}");
    assert_eq!(pod_phase(&pod), Some("Running"));
    for c in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert_eq!(pod_condition(&pod, c), Some("True"), "condition {c}");
    }
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    assert_eq!(node.as_deref(), Some(kubelet.node_names()[0].as_str()));
    assert!(status.host_ip.is_some() && status.start_time.is_some());
    let main = main_container(&pod).expect("container status");
    assert!(main.ready && main.started == Some(true) && main.restart_count == 0);
    assert!(
        main.state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some()
    );

    let process = kubelet.pod("server").expect("the kubelet runs it");
    assert_eq!(process.ip, ip);
    let pid = process.pid.expect("a process");
    assert!(process_alive(pid));
    // The server bound what $(POD_IP) expanded to.
    assert_eq!(http_get_status(&ip, 9090, "/healthz").await, Some(200));
    assert_eq!(http_get_status(&ip, 9090, "/readyz").await, Some(200));
    tokio::net::TcpStream::connect((ip.as_str(), 8080))
        .await
        .expect("the WebSocket port accepts");

    kubelet.pause_readiness("server").await;
    wait_for(&pods, "server", "not Ready while paused", T, |p| {
        p.is_some_and(|p| pod_condition(p, "Ready") == Some("False"))
    })
    .await;
    kubelet.resume_readiness("server").await;
    wait_for(&pods, "server", "Ready again", T, |p| {
        p.is_some_and(pod_ready)
    })
    .await;

    pods.delete("server", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(&pods, "server", "gone", T, |p| p.is_none()).await;
    // The pod is removed only once its process has exited and been reaped.
    assert!(!process_alive(pid), "pid {pid} outlived its pod");
    let log = std::fs::read_to_string(&process.log).expect("pod log");
    assert!(log.contains("run 0"), "pod log:\n{log}");
}

#[tokio::test]
async fn exit_code_3_fails_the_pod_and_output_goes_to_its_log() {
    let (pods, kubelet) = setup("exit", KubeletOpts::default()).await;
    create(
        &pods,
        shell_pod("exit3", "Never", "echo going down; exit 3"),
    )
    .await;
    let pod = wait_for(&pods, "exit3", "Failed", T, |p| {
        p.is_some_and(|p| pod_phase(p) == Some("Failed"))
    })
    .await
    .expect("exists");
    let main = main_container(&pod).expect("container status");
    let terminated = main
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("terminated");
    assert_eq!(terminated.exit_code, 3);
    assert_eq!(terminated.reason.as_deref(), Some("Error"));
    assert!(terminated.started_at.is_some() && terminated.finished_at.is_some());
    assert!(!pod_ready(&pod));
    let log = std::fs::read_to_string(kubelet.log_path("exit3")).expect("pod log");
    assert!(log.contains("going down"), "pod log:\n{log}");
}

#[tokio::test]
async fn on_failure_restarts_until_success_and_counts_restarts() {
    let (pods, _kubelet) = setup("onfailure", KubeletOpts::default()).await;
    let mark = support::cluster::scratch_dir().join(format!("mark-{}", std::process::id()));
    let script = format!(
        "if [ -e {m} ]; then exit 0; else touch {m}; exit 1; fi",
        m = mark.display()
    );
    create(&pods, shell_pod("flaky", "OnFailure", &script)).await;
    let pod = wait_for(&pods, "flaky", "Succeeded", T, |p| {
        p.is_some_and(|p| pod_phase(p) == Some("Succeeded"))
    })
    .await
    .expect("exists");
    let main = main_container(&pod).expect("container status");
    assert_eq!(main.restart_count, 1);
    let last = main
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("lastState.terminated");
    assert_eq!(last.exit_code, 1);
    let now = main
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("terminated");
    assert_eq!(
        (now.exit_code, now.reason.as_deref()),
        (0, Some("Completed"))
    );
}

#[tokio::test]
async fn hooks_oom_kill_crash_and_restart() {
    let (pods, kubelet) = setup("hooks", KubeletOpts::default()).await;
    for name in ["oom", "crash", "restarted"] {
        create(&pods, shell_pod(name, "Never", "exec sleep 600")).await;
    }
    for name in ["oom", "crash", "restarted"] {
        wait_for(&pods, name, "Ready", T, |p| p.is_some_and(pod_ready)).await;
    }

    kubelet.oom_kill("oom").await;
    let pod = pods.get("oom").await.expect("get");
    let terminated = main_container(&pod)
        .and_then(|c| c.state.as_ref()?.terminated.clone())
        .expect("terminated once oom_kill returns");
    assert_eq!(
        (terminated.exit_code, terminated.reason.as_deref()),
        (137, Some("OOMKilled"))
    );
    assert_eq!(pod_phase(&pod), Some("Failed"));

    kubelet.kill("crash", Signal::SIGKILL).await;
    let pod = wait_for(&pods, "crash", "Failed", T, |p| {
        p.is_some_and(|p| pod_phase(p) == Some("Failed"))
    })
    .await
    .expect("exists");
    let terminated = main_container(&pod)
        .and_then(|c| c.state.as_ref()?.terminated.clone())
        .expect("terminated");
    assert_eq!(
        (terminated.exit_code, terminated.reason.as_deref()),
        (137, Some("Error"))
    );

    let before = kubelet.pod("restarted").and_then(|p| p.pid).expect("pid");
    kubelet.restart("restarted").await;
    let pod = pods.get("restarted").await.expect("get");
    let main = main_container(&pod).expect("container status");
    assert_eq!(main.restart_count, 1);
    assert!(
        main.state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some()
    );
    assert!(
        main.last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some()
    );
    assert_eq!(pod_phase(&pod), Some("Running"));
    let after = kubelet.pod("restarted").expect("listed");
    assert_eq!(after.restart_count, 1);
    assert_ne!(after.pid, Some(before));
    assert!(!process_alive(before));
}

#[tokio::test]
async fn env_resolves_like_a_kubelet_and_init_containers_complete() {
    let (pods, kubelet) = setup("env", KubeletOpts::default()).await;
    let client = support::shared().await.client().await;
    let ns = kubelet.namespace().to_string();
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"token": "sekrit"},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"mode": "fast", "K": "from-envfrom"},
    }))
    .expect("configmap");
    Api::<ConfigMap>::namespaced(client, &ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
    create(
        &pods,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "env", "labels": {"tier": "t1"}},
            "spec": {
                "restartPolicy": "Never",
                "initContainers": [{"name": "tune", "image": "wsload/loadgen:0.1.0",
                    "args": ["sysctl", "net.core.somaxconn=65535"],
                    "securityContext": {"privileged": true}}],
                "containers": [{
                    "name": "main", "image": "busybox",
                    "command": ["sh", "-c", "echo \"$OUT\" $(NAME)"],
                    "envFrom": [{"prefix": "CM_", "configMapRef": {"name": "c"}}],
                    "env": [
                        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
                        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
                        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "mode"}}},
                        {"name": "OUT", "value": "$(NAME)|$(NODE)|$(TIER)|$(TOKEN)|$(MODE)|$(CM_K)|$(LATER)|$$(NAME)"},
                        {"name": "LATER", "value": "x"},
                    ],
                }],
            },
        }),
    )
    .await;
    let pod = wait_for(&pods, "env", "Succeeded", T, |p| {
        p.is_some_and(|p| pod_phase(p) == Some("Succeeded"))
    })
    .await
    .expect("exists");
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("node");
    let log = std::fs::read_to_string(kubelet.log_path("env")).expect("pod log");
    let expected = format!("env|{node}|t1|sekrit|fast|from-envfrom|$(LATER)|$(NAME) env");
    assert!(
        log.lines().any(|l| l == expected),
        "expected the line {expected:?} in the pod log:\n{log}"
    );
    let init = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|s| s.first())
        .and_then(|s| s.state.as_ref()?.terminated.clone())
        .expect("the init container reported terminated");
    assert_eq!(
        (init.exit_code, init.reason.as_deref()),
        (0, Some("Completed"))
    );
}

#[tokio::test]
async fn node_selector_without_a_match_stays_unscheduled_until_a_node_fits() {
    let (pods, kubelet) = setup("selector", KubeletOpts::default()).await;
    let mut pod = shell_pod("picky", "Never", "exec sleep 600");
    pod["spec"]["nodeSelector"] = json!({"disk": "ssd"});
    create(&pods, pod).await;
    let pod = wait_for(&pods, "picky", "PodScheduled=False", T, |p| {
        p.is_some_and(|p| pod_condition(p, "PodScheduled") == Some("False"))
    })
    .await
    .expect("exists");
    let cond = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .expect("condition");
    assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
    assert!(
        cond.message
            .as_deref()
            .is_some_and(|m| m.contains("didn't match Pod's node affinity/selector")),
        "{cond:?}"
    );
    assert_eq!(pod.spec.as_ref().and_then(|s| s.node_name.as_deref()), None);
    assert_eq!(pod_phase(&pod), Some("Pending"));
    assert!(kubelet.pod("picky").is_none());

    let ssd = kubelet
        .add_node(BTreeMap::from([("disk".to_string(), "ssd".to_string())]))
        .await;
    let pod = wait_for(&pods, "picky", "Ready on the new node", T, |p| {
        p.is_some_and(pod_ready)
    })
    .await
    .expect("exists");
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(ssd.as_str())
    );
}

#[tokio::test]
async fn required_anti_affinity_spreads_pods_one_per_node() {
    let opts = KubeletOpts {
        nodes: 2,
        ..Default::default()
    };
    let (pods, kubelet) = setup("spread", opts).await;
    for i in 0..3 {
        let mut pod = shell_pod(&format!("shard-{i}"), "Never", "exec sleep 600");
        pod["metadata"]["labels"] = json!({"role": "shard"});
        pod["spec"]["affinity"] = json!({"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"role": "shard"}},
            }],
        }});
        create(&pods, pod).await;
    }
    let mut nodes = Vec::new();
    for i in 0..2 {
        let pod = wait_for(&pods, &format!("shard-{i}"), "Ready", T, |p| {
            p.is_some_and(pod_ready)
        })
        .await
        .expect("exists");
        nodes.push(pod.spec.and_then(|s| s.node_name).expect("node"));
    }
    assert_ne!(nodes[0], nodes[1]);
    let third = wait_for(&pods, "shard-2", "unschedulable", T, |p| {
        p.is_some_and(|p| pod_condition(p, "PodScheduled") == Some("False"))
    })
    .await
    .expect("exists");
    let message = third
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(message.contains("anti-affinity"), "{message}");
    // A shard that ends frees its node, as in a scheduler.
    kubelet.kill("shard-0", Signal::SIGKILL).await;
    let third = wait_for(&pods, "shard-2", "scheduled once shard-0 ended", T, |p| {
        p.is_some_and(pod_ready)
    })
    .await
    .expect("exists");
    assert_eq!(third.spec.and_then(|s| s.node_name), Some(nodes[0].clone()));
}

#[tokio::test]
async fn deletion_escalates_to_sigkill_after_the_grace_period() {
    let (pods, kubelet) = setup("grace", KubeletOpts::default()).await;
    let mut pod = shell_pod("stubborn", "Never", "trap '' TERM; exec sleep 600");
    pod["spec"]["terminationGracePeriodSeconds"] = json!(1);
    create(&pods, pod).await;
    wait_for(&pods, "stubborn", "Ready", T, |p| p.is_some_and(pod_ready)).await;
    let pid = kubelet.pod("stubborn").and_then(|p| p.pid).expect("pid");
    let started = std::time::Instant::now();
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(&pods, "stubborn", "gone", T, |p| p.is_none()).await;
    let took = started.elapsed();
    assert!(!process_alive(pid), "pid {pid} outlived its pod");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "SIGTERM ignored: the pod must go once the 1 s grace period is over, took {took:?}"
    );
}
