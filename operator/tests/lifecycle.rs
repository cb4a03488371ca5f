//! The operator's whole lifecycle against a real kube-apiserver: pods are real `wsload shard`
//! and `wsload-server` processes run by the test kubelet (tests/support/kubelet.rs) on
//! loopback addresses, so the start barrier, the per-cell barriers, the server counters summed
//! over replicas, the results and the merge are the real ones. The
//! operator runs in this process, scoped to the test's namespace, and is stopped and started
//! again the way a crashed operator pod would be.

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::{Cluster, Kubelet, KubeletOpts, wait_for};
use wsload_contract::env as var;
use wsload_operator::leader::LeaderConfig;
use wsload_operator::reconcile::Config;
use wsload_spec::LoadTestResource;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState, Verdict};

const LONG: Duration = Duration::from_secs(120);

struct Env {
    cluster: &'static Cluster,
    client: kube::Client,
    ns: String,
    kubelet: Kubelet,
    lts: Api<LoadTestResource>,
    pods: Api<Pod>,
}

async fn env(prefix: &str) -> Env {
    env_on(support::shared().await, prefix).await
}

async fn env_on(cluster: &'static Cluster, prefix: &str) -> Env {
    support::test_logs();
    cluster.apply_crds().await;
    let ns = cluster.namespace(prefix).await;
    let client = cluster.client().await;
    let kubelet = Kubelet::start(client.clone(), &ns, KubeletOpts::default()).await;
    Env {
        cluster,
        lts: Api::namespaced(client.clone(), &ns),
        pods: Api::namespaced(client.clone(), &ns),
        client,
        ns,
        kubelet,
    }
}

/// An operator scoped to one namespace, as the chart's namespaced mode runs it.
fn operator(e: &Env, leader: Option<LeaderConfig>) -> tokio::task::JoinHandle<()> {
    operator_at(e, leader, "127.0.0.1:0".parse().expect("addr"))
}

fn operator_at(
    e: &Env,
    leader: Option<LeaderConfig>,
    metrics_listen: std::net::SocketAddr,
) -> tokio::task::JoinHandle<()> {
    operator_with(e, leader, metrics_listen, test_config())
}

fn test_config() -> Config {
    Config {
        poll: Duration::from_millis(300),
        ..Config::default()
    }
}

fn operator_with(
    e: &Env,
    leader: Option<LeaderConfig>,
    metrics_listen: std::net::SocketAddr,
    config: Config,
) -> tokio::task::JoinHandle<()> {
    support::run_operator(e.client.clone(), &e.ns, leader, metrics_listen, config)
}

async fn create(e: &Env, name: &str, spec: &str) {
    e.lts
        .create(
            &PostParams::default(),
            &support::loadtests::loadtest(name, spec),
        )
        .await
        .expect("create LoadTest");
}

fn phase(lt: Option<&LoadTestResource>) -> Option<Phase> {
    lt?.status.as_ref()?.phase
}

async fn wait_phase(e: &Env, name: &str, want: Phase) -> LoadTestStatus {
    let lt = wait_for(&e.lts, name, &format!("phase {want:?}"), LONG, |lt| {
        phase(lt) == Some(want)
            || (phase(lt).is_some_and(Phase::is_finished) && want != Phase::Running)
    })
    .await
    .expect("LoadTest exists");
    lt.status.expect("status")
}

async fn wait_finished(e: &Env, name: &str) -> LoadTestStatus {
    let lt = wait_for(&e.lts, name, "a finished phase", LONG, |lt| {
        phase(lt).is_some_and(Phase::is_finished)
    })
    .await
    .expect("LoadTest exists");
    let st = lt.status.expect("status");
    eprintln!("{name}: {:?} {:?}: {:?}", st.phase, st.reason, st.message);
    st
}

fn condition<'a>(st: &'a LoadTestStatus, t: &str) -> Option<&'a str> {
    st.conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| c.status.as_str())
}

/// A stored result (gzip-compressed JSON in `binaryData`), as JSON; `None` when not stored.
async fn stored(e: &Env, config_map: &str, key: &str) -> Option<serde_json::Value> {
    let cms: Api<ConfigMap> = Api::namespaced(e.client.clone(), &e.ns);
    let cm = cms.get_opt(config_map).await.expect("get ConfigMap")?;
    let bytes = cm.binary_data?.remove(key)?.0;
    let json = wsload_report::stored::json_text(&bytes).expect("gzip");
    Some(serde_json::from_slice(&json).expect("a JSON result"))
}

/// The merged result of test `name`.
async fn merged(e: &Env, name: &str) -> serde_json::Value {
    stored(e, &format!("{name}-results"), "merged.json.gz")
        .await
        .expect("the merged result is stored")
}

/// Shard `index`'s own result, when stored.
async fn shard_result(e: &Env, name: &str, index: u32) -> Option<serde_json::Value> {
    stored(e, &format!("{name}-result-{index}"), "result.json.gz").await
}

const TWO_SHARDS: &str = "  target: {server: {}}
  scenario: throughput
  connections: [20]
  duration: 2s
  window: 4
  shards: 2
  thresholds: [\"errors < 1%\", \"throughput > 1\"]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_server_and_two_shards_run_to_a_verdict_in_status() {
    let e = env("lt-pass").await;
    let metrics = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().expect("addr")
    };
    let op = operator_at(&e, None, metrics);
    create(
        &e,
        "two",
        &format!(
            "{TWO_SHARDS}  run: {{cleanup: keep}}\n  loadgen:\n    sysctls: {{net.ipv4.ip_local_port_range: \"1024 65535\"}}\n    tuning: {{sysctls: {{net.core.somaxconn: \"4096\"}}}}\n    env: [{{name: {}, value: \"1=50\"}}]\n",
            var::CLOCK_SHIFT_MS
        ),
    )
    .await;
    // How late a sleeping thread wakes on this machine while the test runs (the shards wake
    // for their start the same way): the most, sampled throughout.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let mut late = Duration::ZERO;
            while sampling.load(Ordering::Relaxed) {
                let t = std::time::Instant::now();
                std::thread::sleep(Duration::from_millis(2));
                late = late.max(t.elapsed().saturating_sub(Duration::from_millis(2)));
            }
            late
        })
    };
    let st = wait_finished(&e, "two").await;
    sampling.store(false, Ordering::Relaxed);
    let late = sampler.join().expect("the sampler");
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.verdict, Some(Verdict::Pass));
    assert_eq!(condition(&st, "ThresholdsPassed"), Some("True"));
    assert_eq!(condition(&st, "Released"), Some("True"));
    // Every shard delivered.
    assert!(
        st.shards.iter().all(|s| s.state == ShardState::Collected),
        "{:?}",
        st.shards
    );
    assert!(st.shards.iter().all(|s| s.started_at_micros.is_some()));
    // Shard 1's clock runs 50 ms ahead (the test hook): the operator measured it within the
    // uncertainty it states, shard 0's near 0, and released both at one true instant.
    let clock = |i: usize| st.shards[i].clock.expect("the shard's clock in status");
    let (on_time, ahead) = (clock(0), clock(1));
    assert!(
        on_time.offset_micros.unsigned_abs() <= on_time.uncertainty_micros + 1_000,
        "{on_time:?}"
    );
    assert!(
        (ahead.offset_micros - 50_000).unsigned_abs() <= ahead.uncertainty_micros + 1_000,
        "{ahead:?}"
    );
    assert!(on_time.samples >= 8 && ahead.samples >= 8);
    // Released at one instant: within 25 ms on a quiet machine, plus twice the most a thread
    // of this test overslept during the run (beside the real-server corpus at the lowest
    // priority the shards woke 42 ms late: a machine's load, not the release), plus the
    // uncertainty the operator states for the two clocks (each start is on the operator's
    // clock through its offset, known only that well). CI once saw 27.1 ms against a bound of
    // 25.3 that sampled only after the run and left the clocks out. The 50 ms offset removed
    // is what a quiet machine shows.
    let skew = st.start_skew_millis.expect("skew measured");
    let stated = (on_time.uncertainty_micros + ahead.uncertainty_micros) as f64 / 1000.0;
    let bound = 25.0 + stated + 2.0 * late.as_secs_f64() * 1000.0;
    assert!(
        (0.0..bound).contains(&skew),
        "start skew {skew} ms, bound {bound} ms (clocks {on_time:?}, {ahead:?})"
    );
    // One cell, conducted by the operator: both shards finished it, and the server's counter
    // (read before it and settled after it) took in exactly what they sent.
    assert!(st.server_received_baseline.is_some());
    assert_eq!(st.cells.len(), 1, "{:?}", st.cells);
    let cell = &st.cells[0];
    assert!(
        cell.done && cell.shards == 2 && cell.attempted == 20,
        "{cell:?}"
    );
    assert!(cell.sent > 0);
    assert_eq!(cell.server_received, Some(cell.sent), "{cell:?}");
    assert!(cell.start_skew_millis.is_some_and(|s| s >= 0.0));
    let tier = &st.tiers[0];
    assert_eq!(tier.delivery, Some(1.0), "{tier:?}");
    assert_eq!(tier.connections, 20);
    assert!(tier.messages_per_second > 0.0);
    assert!(
        tier.connect
            .as_ref()
            .is_some_and(|c| c.p99 > 0.0 && c.p99 >= c.p50),
        "{tier:?}"
    );
    assert!(
        st.achieved_rate
            .as_deref()
            .is_some_and(|r| r.ends_with("msg/s"))
    );
    assert!(st.p99.is_some());
    assert!(
        st.target_url
            .as_deref()
            .is_some_and(|u| u.starts_with("ws://127."))
    );
    // Each shard's result, with its histograms, outlives the pods; the merge is stored too.
    for i in 0..2 {
        let r = shard_result(&e, "two", i).await.expect("a shard result");
        assert_eq!(r["shards"], serde_json::json!([i]));
    }
    let merged = merged(&e, "two").await;
    assert_eq!(merged["shards"], serde_json::json!([0, 1]));
    let offset = &merged["shardInfo"][1]["clock"]["offsetMicros"];
    assert!(
        offset
            .as_i64()
            .is_some_and(|o| (45_000..55_000).contains(&o)),
        "{offset}"
    );

    // Children: owned by the LoadTest, placed apart, the server behind a Service.
    let lt = e.lts.get("two").await.expect("get");
    let uid = lt.metadata.uid.clone().expect("uid");
    let pods = e
        .pods
        .list(&ListParams::default().labels("wsload.dev/loadtest=two"))
        .await
        .expect("list");
    let mut names: Vec<String> = pods
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["two-server", "two-shard-0", "two-shard-1"]);
    let mut nodes = Vec::new();
    for p in &pods.items {
        let owner = &p.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(owner.uid, uid);
        assert_eq!(owner.controller, Some(true));
        nodes.push(
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .expect("scheduled"),
        );
    }
    // Safe sysctls through the pod security context, the others by the opt-in init container.
    for p in pods.items.iter().filter(|p| {
        p.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.contains("-shard-"))
    }) {
        let spec = p.spec.as_ref().expect("spec");
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.clone())
            .unwrap_or_default();
        assert_eq!(sysctls.len(), 1);
        assert_eq!(sysctls[0].name, "net.ipv4.ip_local_port_range");
        let init = spec
            .init_containers
            .as_ref()
            .expect("tuning init container");
        assert_eq!(
            init[0].args.as_deref(),
            Some(&["sysctl".to_string(), "net.core.somaxconn=4096".to_string()][..])
        );
    }
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "server and each shard on a node of its own");
    let svcs: Api<Service> = Api::namespaced(e.client.clone(), &e.ns);
    svcs.get("two-server").await.expect("server Service");
    // kubectl get lt shows the figures.
    let table = e.cluster.kubectl_ok(&["get", "lt", "-n", &e.ns]);
    eprintln!("{table}");
    let row = table.lines().find(|l| l.starts_with("two ")).expect("row");
    assert!(
        row.contains("Succeeded") && row.contains("throughput") && row.contains("Pass"),
        "{row}"
    );
    // An Event for every phase it went through, on the LoadTest.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(e.client.clone(), &e.ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|ev| ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("two"))
        .filter_map(|ev| ev.reason)
        .collect();
    for phase in ["Pending", "Starting", "Running", "Collecting", "Succeeded"] {
        assert!(
            reasons.iter().any(|r| r == phase),
            "no {phase} event in {reasons:?}"
        );
    }
    // The operator's own metrics count what it did.
    let text =
        wsload_http::http_client::get(&format!("http://{metrics}/metrics"), Duration::from_secs(5))
            .await
            .expect("operator /metrics");
    assert!(
        text.body
            .contains("wsload_operator_loadtests{phase=\"Succeeded\"} 1"),
        "{}",
        text.body
    );
    assert!(text.body.contains("wsload_operator_leader 1"));
    op.abort();
    e.kubelet.stop().await;
}

const SLOW: &str = "  target: {server: {}}
  scenario: throughput
  connections: [10]
  duration: 6s
  window: 2
  shards: 2
";

async fn running_shards(e: &Env, name: &str) {
    wait_phase(e, name, Phase::Running).await;
    // Give the load a moment to begin, so the crash happens mid-run.
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_killed_shard_fails_the_test_and_keeps_what_the_others_measured() {
    let e = env("lt-oom").await;
    let op = operator(&e, None);
    // A threshold shard 0 alone passes, so the verdict shows what a lost shard does to it.
    create(
        &e,
        "oom",
        &format!("{SLOW}  thresholds: [\"errors < 50%\"]\n"),
    )
    .await;
    running_shards(&e, "oom").await;
    e.kubelet.oom_kill("oom-shard-1").await;
    let st = wait_finished(&e, "oom").await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(st.reason.as_deref(), Some("ShardFailed"));
    let s1 = &st.shards[1];
    assert_eq!(s1.state, ShardState::Failed);
    assert!(
        s1.reason
            .as_deref()
            .is_some_and(|r| r.contains("OOMKilled")),
        "{s1:?}"
    );
    assert_eq!(st.missing_shards, [1]);
    // Half the load was measured: no Pass, whatever the survivors' figures say.
    assert_eq!(st.verdict, Some(Verdict::Fail));
    let judged = st.conditions.iter().find(|c| c.type_ == "ThresholdsPassed");
    assert_eq!(
        judged.map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("False", "Incomplete")),
        "{judged:?}"
    );
    // Shard 0 finished: its result is stored and its figures are in status.
    assert_eq!(st.shards[0].state, ShardState::Collected);
    assert!(shard_result(&e, "oom", 0).await.is_some());
    assert_eq!(st.tiers[0].connections, 10);
    assert!(st.tiers[0].messages_per_second > 0.0);
    op.abort();
    e.kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_shard_failure_continue_a_crashed_shard_is_left_out_and_the_test_succeeds() {
    let e = env("lt-cont").await;
    let op = operator(&e, None);
    create(
        &e,
        "cont",
        &format!("{SLOW}  run: {{shardFailure: continue}}\n"),
    )
    .await;
    running_shards(&e, "cont").await;
    e.kubelet
        .kill("cont-shard-0", nix::sys::signal::Signal::SIGKILL)
        .await;
    let st = wait_finished(&e, "cont").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.missing_shards, [0]);
    assert_eq!(condition(&st, "Degraded"), Some("True"));
    assert_eq!(st.shards[1].state, ShardState::Collected);
    op.abort();
    e.kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_restarted_after_release_is_detected() {
    let e = env("lt-restart").await;
    let op = operator(&e, None);
    create(&e, "rs", SLOW).await;
    running_shards(&e, "rs").await;
    e.kubelet.restart("rs-shard-0").await;
    let st = wait_finished(&e, "rs").await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(st.reason.as_deref(), Some("ShardFailed"));
    assert!(
        st.shards[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("restart")),
        "{:?}",
        st.shards[0]
    );
    assert_eq!(st.shards[0].restarts, 1);
    op.abort();
    e.kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_resumes_a_running_test_from_status_and_children() {
    let e = env("lt-resume").await;
    let op = operator(&e, None);
    // Tests beside it, one finished and one running: the new operator reconciles all of them
    // at once while its pod cache fills, and each must wake when the cache is ready. The
    // finished one first: created after `resume` and waited for, it let `resume` run to its
    // end unseen on a loaded machine (CI: `resume` Succeeded while `done` still ran).
    create(
        &e,
        "done",
        "  target: {server: {}}\n  scenario: throughput\n  connections: [2]\n  duration: 1s\n",
    )
    .await;
    assert_eq!(
        wait_finished(&e, "done").await.phase,
        Some(Phase::Succeeded)
    );
    create(
        &e,
        "resume",
        "  target: {server: {}}\n  scenario: throughput\n  connections: [6, 10]\n  duration: 2s\n  window: 2\n  shards: 2\n",
    )
    .await;
    create(
        &e,
        "beside",
        "  target: {server: {}}\n  scenario: throughput\n  connections: [4]\n  duration: 6s\n",
    )
    .await;
    // Both watched at once: waited for one after the other, `beside` (one shard) ran to its
    // end while `resume`'s two shards started on a loaded machine (CI), and its Running was
    // never seen.
    let (before, _) = tokio::join!(
        wait_phase(&e, "resume", Phase::Running),
        wait_phase(&e, "beside", Phase::Running)
    );
    op.abort();
    let _ = op.await;
    // While no operator runs, the shards finish their cell and wait between cells: the next
    // one is the operator's to release.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let op = operator(&e, None);
    assert_eq!(
        wait_finished(&e, "beside").await.phase,
        Some(Phase::Succeeded)
    );
    let st = wait_finished(&e, "resume").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.start_at, before.start_at, "the start instant is kept");
    assert!(st.shards.iter().all(|s| s.state == ShardState::Collected));
    // Both cells conducted, the first settled by the new operator, delivery reconciled.
    assert_eq!(st.cells.len(), 2, "{:?}", st.cells);
    for (cell, tier) in st.cells.iter().zip(&st.tiers) {
        assert!(cell.done, "{cell:?}");
        assert_eq!(cell.server_received, Some(cell.sent), "{cell:?}");
        assert_eq!(tier.delivery, Some(1.0), "{tier:?}");
    }
    op.abort();
    e.kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_be_scheduled_fails_at_its_deadline_saying_why() {
    let e = env("lt-sched").await;
    let op = operator(&e, None);
    create(
        &e,
        "nowhere",
        "  target: {server: {placement: {nodeSelector: {pool: no-such-pool}}}}
  scenario: pingLatency
  connections: [2]
  run: {deadlines: {scheduling: 1s, ready: 1s}}
",
    )
    .await;
    let st = wait_finished(&e, "nowhere").await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(st.reason.as_deref(), Some("ServerNotReady"));
    let msg = st.message.unwrap_or_default();
    assert!(
        msg.contains("nowhere-server") && msg.contains("2s"),
        "{msg}"
    );
    // Nothing else was started for it.
    let shards = e
        .pods
        .list(&ListParams::default().labels("wsload.dev/role=shard"))
        .await
        .expect("list");
    assert!(shards.items.is_empty());
    op.abort();
    e.kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_only_the_operator_can_judge_is_failed_in_status_before_anything_runs() {
    let e = env("lt-invalid").await;
    let op = operator(&e, None);
    // The schema accepts rtt.p99 (a known metric); that a connection storm measures no round
    // trip is the spec checker's call, and it must be reported, not half-run.
    create(
        &e,
        "storm",
        "  target: {server: {}}\n  scenario: connectionStorm\n  connections: [10]\n  thresholds: [\"rtt.p99 < 5ms\"]\n",
    )
    .await;
    let st = wait_finished(&e, "storm").await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(st.reason.as_deref(), Some("InvalidSpec"));
    let msg = st.message.unwrap_or_default();
    assert!(msg.contains("spec.thresholds[0]"), "{msg}");
    let pods = e.pods.list(&ListParams::default()).await.expect("list");
    assert!(pods.items.is_empty(), "an invalid test starts nothing");
    op.abort();
    e.kubelet.stop().await;
}

/// A namespace that enforces "restricted": the API server's PodSecurity admission judges
/// every pod the operator creates, so a test that Succeeds there proves them compliant; a test
/// asking for the privileged tuning container fails before anything is created, and the API
/// server itself refuses the pod it would have needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_namespace_admits_wsloads_pods_and_refuses_the_tuning_container_up_front() {
    let e = env("lt-restricted").await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(e.client.clone());
    namespaces
        .patch(
            &e.ns,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}})),
        )
        .await
        .expect("label the namespace");
    let op = operator(&e, None);
    create(
        &e,
        "tuned",
        "  target: {server: {}}\n  scenario: throughput\n  connections: [10]\n  loadgen: {tuning: {sysctls: {net.core.somaxconn: \"4096\"}}}\n",
    )
    .await;
    let st = wait_finished(&e, "tuned").await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(st.reason.as_deref(), Some("PodSecurityRefused"));
    let msg = st.message.unwrap_or_default();
    for part in [
        e.ns.as_str(),
        "\"restricted\"",
        "privileged tuning init container",
        "allowedUnsafeSysctls: [net.core.somaxconn]",
        "net.core.somaxconn=4096",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    let pods = e.pods.list(&ListParams::default()).await.expect("list");
    assert!(pods.items.is_empty(), "a refused test creates nothing");
    // The operator's judgement is the API server's: the shard pod it would have created is
    // refused by admission, naming the rule.
    let tuned = e.lts.get("tuned").await.expect("get");
    let pod = wsload_operator::builders::shard_pod(&tuned, 0, "ws://127.0.0.1:1/", "doc");
    let refused = e
        .pods
        .create(&PostParams::default(), &pod)
        .await
        .expect_err("admission refuses the tuning container");
    assert!(
        refused
            .to_string()
            .contains("violates PodSecurity \"restricted"),
        "{refused}"
    );

    create(&e, "plain", TWO_SHARDS).await;
    let st = wait_finished(&e, "plain").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    op.abort();
    e.kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_tests_delete_their_pods_and_expire_after_their_ttl() {
    let e = env("lt-ttl").await;
    let op = operator(&e, None);
    create(
        &e,
        "ttl",
        "  target: {server: {}}\n  scenario: pingLatency\n  connections: [4]\n  ping: {count: 5}\n  run: {ttlAfterFinished: 10s}\n",
    )
    .await;
    let st = wait_finished(&e, "ttl").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    wait_for(&e.pods, "ttl-server", "server pod deleted", LONG, |p| {
        p.is_none()
    })
    .await;
    wait_for(&e.pods, "ttl-shard-0", "shard pod deleted", LONG, |p| {
        p.is_none()
    })
    .await;
    wait_for(&e.lts, "ttl", "LoadTest deleted by its TTL", LONG, |lt| {
        lt.is_none()
    })
    .await;
    op.abort();
    e.kubelet.stop().await;
}

/// An "external" server: a pod the test makes itself, outside any LoadTest; its IP once ready.
async fn external_server(e: &Env) -> String {
    let server: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "external"},
        "spec": {"containers": [{"name": "s", "image": "wsload/server:test",
            "env": [
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": wsload_contract::env::SERVER_LISTEN, "value": "$(POD_IP):8080"},
                {"name": wsload_contract::env::SERVER_METRICS_LISTEN, "value": "$(POD_IP):9090"}],
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 9090}}}]}
    }))
    .expect("pod");
    e.pods
        .create(&PostParams::default(), &server)
        .await
        .expect("create");
    let ready = wait_for(&e.pods, "external", "ready", LONG, |p| {
        p.is_some_and(support::pod_ready)
    })
    .await
    .expect("pod");
    ready.status.and_then(|s| s.pod_ip).expect("ip")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_target_is_used_as_given() {
    let e = env("lt-ext").await;
    let ip = external_server(&e).await;
    let op = operator(&e, None);
    create(
        &e,
        "ext",
        &format!("  target: {{url: \"ws://{ip}:8080/\"}}\n  scenario: pingLatency\n  connections: [4]\n  ping: {{count: 5}}\n  shards: 2\n  thresholds: [\"loss < 1%\"]\n"),
    )
    .await;
    let st = wait_finished(&e, "ext").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.verdict, Some(Verdict::Pass));
    assert_eq!(
        st.target_url.as_deref(),
        Some(format!("ws://{ip}:8080/").as_str())
    );
    assert!(e.pods.get_opt("ext-server").await.expect("get").is_none());
    op.abort();
    e.kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over() {
    let e = env("lt-leader").await;
    let lease = |id: &str| {
        let mut cfg = LeaderConfig::new(e.ns.clone(), id.to_string());
        cfg.lease_duration = Duration::from_secs(3);
        cfg.retry_every = Duration::from_millis(300);
        cfg
    };
    let first = operator(&e, Some(lease("first")));
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(e.client.clone(), &e.ns);
    let held_by = |l: Option<&k8s_openapi::api::coordination::v1::Lease>, who: &str| {
        l.and_then(|l| l.spec.as_ref()?.holder_identity.as_deref()) == Some(who)
    };
    wait_for(&leases, "wsload-operator", "held by first", LONG, |l| {
        held_by(l, "first")
    })
    .await;
    let second = operator(&e, Some(lease("second")));
    create(&e, "lead", SLOW).await;
    wait_phase(&e, "lead", Phase::Running).await;
    let lease_now = leases.get("wsload-operator").await.expect("lease");
    assert!(
        held_by(Some(&lease_now), "first"),
        "the standby must not take a held lease"
    );
    first.abort();
    wait_for(
        &leases,
        "wsload-operator",
        "taken over by second",
        LONG,
        |l| held_by(l, "second"),
    )
    .await;
    let st = wait_finished(&e, "lead").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    second.abort();
    e.kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_deadline_fails_and_keeps_nothing_half_done() {
    let e = env("lt-runlate").await;
    let op = operator(&e, None);
    create(
        &e,
        "late",
        "  target: {server: {}}\n  scenario: sustainedHold\n  connections: [4]\n  duration: 60s\n  run: {deadlines: {run: 2s}, startDelay: 1s}\n",
    )
    .await;
    let st = wait_finished(&e, "late").await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(st.reason.as_deref(), Some("RunDeadlineExceeded"));
    assert!(
        st.shards.iter().all(|s| s.state == ShardState::Lost),
        "{:?}",
        st.shards
    );
    assert!(
        st.message.unwrap_or_default().contains("3s"),
        "the limit is named"
    );
    op.abort();
    e.kubelet.stop().await;
}

/// A server counter that cannot be read (nothing listens at `serverMetrics.url`): past the
/// start deadline the run goes on with delivery unknown, and every cell ends when its shards
/// do. Before, each cell waited for a counter that could never settle, and the test failed at
/// its run deadline with what it had measured thrown away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_server_counter_leaves_delivery_unknown_and_the_test_ends() {
    let e = env("lt-nocounter").await;
    let op = operator(&e, None);
    create(
        &e,
        "nocounter",
        "  target: {server: {}}\n  scenario: pingLatency\n  connections: [2, 4]\n  ping: {count: 3}\n  serverMetrics: {url: \"http://127.0.0.1:1/metrics\"}\n  run: {deadlines: {scheduling: 8s, ready: 8s, run: 40s}, startDelay: 1s}\n",
    )
    .await;
    let st = wait_finished(&e, "nocounter").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.server_received_baseline, None);
    assert_eq!(st.cells.len(), 2, "{:?}", st.cells);
    assert!(
        st.cells
            .iter()
            .all(|c| c.done && c.server_received.is_none() && c.sent > 0),
        "{:?}",
        st.cells
    );
    op.abort();
    e.kubelet.stop().await;
}

/// Server replicas: N pods behind the one Service the shards dial (the test kubelet plays
/// kube-proxy), every replica's counter scraped by pod IP and summed per cell against every
/// shard's sends: delivery is exactly 100%, in each of two cells the shards began together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_over_two_server_replicas_reconcile_delivery_exactly() {
    let e = env("lt-replicas").await;
    let op = operator(&e, None);
    create(
        &e,
        "rep",
        "  target: {server: {replicas: 2}}
  scenario: throughput
  connections: [12, 24]
  duration: 2s
  window: 4
  shards: 3
  run: {cleanup: keep}
  thresholds: [\"delivery > 99.99%\", \"errors < 1%\"]
",
    )
    .await;
    let st = wait_finished(&e, "rep").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.verdict, Some(Verdict::Pass), "{:?}", st.thresholds);
    // The shards dialed the Service, not one replica's pod.
    let svcs: Api<Service> = Api::namespaced(e.client.clone(), &e.ns);
    let svc = svcs.get("rep-server").await.expect("server Service");
    let cluster_ip = svc.spec.and_then(|s| s.cluster_ip).expect("cluster IP");
    assert_eq!(
        st.target_url.as_deref(),
        Some(format!("ws://{cluster_ip}:8080/").as_str())
    );
    assert_eq!(st.cells.len(), 2, "{:?}", st.cells);
    for (cell, tier) in st.cells.iter().zip(&st.tiers) {
        assert!(cell.done && cell.shards == 3, "{cell:?}");
        assert!(cell.sent > 0);
        assert_eq!(cell.server_received, Some(cell.sent), "{cell:?}");
        assert!(cell.start_skew_millis.is_some(), "{cell:?}");
        assert_eq!(tier.delivery, Some(1.0), "{tier:?}");
    }
    assert_eq!(
        st.cells.iter().map(|c| c.connections).collect::<Vec<_>>(),
        [12, 24]
    );
    // The second cell was released after the first ended, at one instant for all.
    assert!(st.cells[1].start_at_millis > st.cells[0].started_at_millis.expect("started"));
    // Both replicas took connections, and their counters add up to every cell's sends.
    let mut total = 0u64;
    for pod in ["rep-server", "rep-server-1"] {
        let p = e.pods.get(pod).await.expect("replica pod");
        let ip = p.status.and_then(|s| s.pod_ip).expect("pod IP");
        let n = wsload_http::scrape::read(
            &wsload_http::http_client::Client::new(),
            &format!("http://{ip}:9090"),
            wsload_spec::DEFAULT_RECEIVED_METRIC,
            &Default::default(),
            Duration::from_secs(5),
        )
        .await
        .expect("replica metrics");
        assert!(n > 0, "{pod} received nothing: kube-proxy did not spread");
        total += n;
    }
    let baseline = st.server_received_baseline.expect("baseline");
    assert_eq!(
        total - baseline,
        st.cells.iter().map(|c| c.sent).sum::<u64>()
    );
    op.abort();
    e.kubelet.stop().await;
}

/// connectionLimit over 2 shards is one search: each probe split over both shards and judged
/// on the merged outcome, so it finds the cap of a server that admits 40 connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_limit_over_two_shards_finds_the_server_cap() {
    const CAP: u32 = 40;
    const RESOLUTION: u32 = 4;
    let e = env("lt-limit").await;
    let op = operator(&e, None);
    create(
        &e,
        "cap",
        &format!(
            "  target: {{server: {{args: [\"--max-connections\", \"{CAP}\"]}}}}
  scenario: connectionLimit
  shards: 2
  limit: {{start: 10, max: 160, resolution: {RESOLUTION}, maxErrorRate: 1%, hold: 1s}}
"
        ),
    )
    .await;
    let st = wait_finished(&e, "cap").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    let probes: Vec<u32> = st.cells.iter().map(|c| c.connections).collect();
    assert_eq!(&probes[..3], &[10, 20, 40], "{probes:?}");
    assert!(
        st.cells.iter().all(|c| c.done && c.shards == 2),
        "{:?}",
        st.cells
    );
    let merged = merged(&e, "cap").await;
    let limit = merged["limit"].as_u64().expect("a limit") as u32;
    assert!(
        limit <= CAP && CAP - limit <= RESOLUTION,
        "limit {limit}, cap {CAP}, probes {probes:?}"
    );
    // The conductor's probes are the cells run, each judged once over both shards.
    let judged = merged["probes"].as_array().expect("probes");
    assert_eq!(judged.len(), probes.len());
    op.abort();
    e.kubelet.stop().await;
}

/// The server replicas' connection counters reach status in a cluster run: a managed server
/// that closes idle connections after 1 s, against a hold that pings every 30 s. Every
/// replica's counters are read before the cell and after it; the cell keeps their sums, and
/// `status.findings` names the server's idle closes beside what the clients saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_connection_counters_and_their_finding_reach_status() {
    let e = env("lt-conns").await;
    let op = operator(&e, None);
    create(
        &e,
        "idle",
        "  target: {server: {replicas: 2, args: [\"--idle-timeout\", \"1s\", \"--ping-interval\", \"0\"]}}
  scenario: sustainedHold
  connections: [4]
  shards: 2
  duration: 4s
  ping: {interval: 30s, timeout: 10s}
",
    )
    .await;
    let st = wait_finished(&e, "idle").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    let baseline = st.server_connections_baseline.as_ref().expect("a baseline");
    assert_eq!(
        (baseline.replicas, baseline.accepted),
        (2, 0),
        "{baseline:?}"
    );
    let c = st.cells[0]
        .server_connections
        .as_ref()
        .expect("the cell's counters");
    assert_eq!((c.replicas, c.accepted), (2, 4), "{c:?}");
    assert_eq!(c.closed_for("idle_timeout"), 4, "{c:?}");
    assert_eq!(
        c.accepted_min.zip(c.accepted_max).map(|(a, b)| a + b <= 4),
        Some(true)
    );
    assert!(
        st.findings
            .iter()
            .any(|f| f.contains("idle_timeout: 4 over 2 replicas")),
        "{:?}",
        st.findings
    );
    op.abort();
    e.kubelet.stop().await;
}

/// Issue 40 through the operator: a managed server's replica killed mid-hold (its pod deleted
/// with no grace period 1 s into the measured phase, after a 1 s warm-up, created again 1 s
/// later) and a
/// rolling restart (each replica's pod deleted as a deploy does, created again and ready,
/// then the next): the connections come back, the test Succeeds, and status holds what the
/// operator did and the tier's reconnect figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_pods_killed_and_rolled_mid_hold_through_the_operator() {
    let e = env("lt-disrupt").await;
    let op = operator(&e, None);
    let hold = "  target: {server: {replicas: 2}}
  scenario: sustainedHold
  connections: [40]
  ping: {interval: 1s, timeout: 2s}
  reconnect: {policy: exponential, delay: 100ms, maxDelay: 1s, jitter: full}
  run: {cleanup: keep}
  thresholds: [\"survival >= 99%\"]
";
    create(
        &e,
        "kill",
        // 12 s: the pod created again 1 s after the kill has 9 s to be ready within the cell
        // (on a loaded 2-core machine the test kubelet took 8 s to start it).
        &format!("{hold}  warmup: 1s\n  duration: 12s\n  disruptions: [{{at: 1s, kill: {{replicas: 1, restartAfter: 1s}}}}]\n"),
    )
    .await;
    let before: Vec<String> = uids(&e, "kill").await;
    let st = wait_finished(&e, "kill").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.verdict, Some(Verdict::Pass), "{:?}", st.thresholds);
    let cell = &st.cells[0];
    let measure = cell
        .measure_at_millis
        .expect("a lone shard waited for the measure instant");
    let [kill] = &cell.disruptions[..] else {
        panic!("one disruption in status: {:?}", cell.disruptions)
    };
    assert_eq!(kill.replicas.len(), 1, "{kill:?}");
    // On time: 1 s into the measured phase, which begins after the 1 s warm-up (within the
    // operator's look-again interval).
    assert!(
        (measure + 2000..measure + 2800).contains(&kill.began_at_millis),
        "began {} ms after the measure instant",
        kill.began_at_millis as i64 - measure as i64
    );
    let ended = kill.ended_at_millis.expect("the replica back");
    assert!(ended >= kill.began_at_millis + 1000, "{kill:?}");
    let rc = st.tiers[0].reconnect.as_ref().expect("reconnect figures");
    eprintln!("kill: {kill:?}\n  {rc:?}");
    assert!(rc.dropped > 0 && rc.dropped < 40, "{rc:?}");
    assert_eq!(rc.never_back, 0, "{rc:?}");
    assert!(
        rc.all_back_after.is_some() && rc.peak_attempts_per_second > 0,
        "{rc:?}"
    );
    // What the attempts met: the replicas read every 100 ms admitted the ones back (the
    // survivor at least).
    let accepts = rc
        .peak_server_accepts_per_second
        .expect("the replicas' admissions read");
    assert!(accepts > 0, "{rc:?}");
    // The connections it dropped came back to the survivor within a second, before it was
    // created again: it held none at the end (read every 100 ms, not at the cell's end, when
    // every connection is closing), and a finding says so.
    assert!(
        st.findings
            .iter()
            .any(|f| f.contains("a replica never took its share")
                && f.contains("held 0 of 40 connections")),
        "{:?}",
        st.findings
    );
    // The killed replica's pod is a new one; the other is the one from before.
    let after = uids(&e, "kill").await;
    assert_eq!(
        after.iter().filter(|u| before.contains(u)).count(),
        1,
        "{before:?} {after:?}"
    );
    // Its counters went with it: no delivery figure is made up.
    assert_eq!(cell.server_received, None, "{cell:?}");

    // Over two shards: the operator times it from their common measure instant.
    create(
        &e,
        "roll",
        &format!(
            "{hold}  shards: 2\n  warmup: 0s\n  duration: 12s\n  disruptions: [{{at: 1s, restart: {{}}}}]\n"
        ),
    )
    .await;
    let before: Vec<String> = uids(&e, "roll").await;
    let st = wait_finished(&e, "roll").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.cells[0].shards, 2, "{:?}", st.cells[0]);
    let measure = st.cells[0]
        .measure_at_millis
        .expect("the shards met at a measure instant");
    let [roll] = &st.cells[0].disruptions[..] else {
        panic!("one disruption in status: {:?}", st.cells[0].disruptions)
    };
    assert!(
        (measure + 1000..measure + 1800).contains(&roll.began_at_millis),
        "began {} ms after the measure instant",
        roll.began_at_millis as i64 - measure as i64
    );
    assert!(roll.ended_at_millis.is_some(), "{roll:?}");
    assert!(
        roll.message
            .starts_with("rolling restart of 2 replicas done"),
        "{roll:?}"
    );
    let rc = st.tiers[0].reconnect.as_ref().expect("reconnect figures");
    eprintln!("roll: {roll:?}\n  {rc:?}");
    // A roll drops every connection at least once (one back on the replica restarted later
    // drops again), and every one comes back.
    assert!(rc.dropped >= 40, "{rc:?}");
    assert_eq!(rc.never_back, 0, "{rc:?}");
    assert!(
        rc.peak_server_accepts_per_second.is_some_and(|a| a > 0),
        "{rc:?}"
    );
    let after = uids(&e, "roll").await;
    assert!(
        after.iter().all(|u| !before.contains(u)),
        "{before:?} {after:?}"
    );
    op.abort();
    e.kubelet.stop().await;
}

/// The UIDs of test `name`'s server pods, once both are there.
/// The user's own Deployment behind an external URL, rolled mid-hold: the operator sets
/// `wsload.dev/restartedAt` on its pod template and waits for the roll to be done. This
/// cluster runs no Deployment controller, so the test plays it: once the template changed,
/// it reports every replica of the new generation updated and available. A Deployment that
/// does not exist fails the test as `DisruptionFailed`, what was measured kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_deployment_is_rolled_and_its_rollout_awaited() {
    use k8s_openapi::api::apps::v1::Deployment;
    let e = env("lt-rollout").await;
    let ip = external_server(&e).await;
    let deployments: Api<Deployment> = Api::namespaced(e.client.clone(), &e.ns);
    let chat: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "chat"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "chat"}},
            "template": {"metadata": {"labels": {"app": "chat"}},
                "spec": {"containers": [{"name": "c", "image": "chat:1"}]}}}
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &chat)
        .await
        .expect("create");
    // The Deployment controller's part: the new template rolled out as soon as it is there.
    let controller = {
        let deployments = deployments.clone();
        tokio::spawn(async move {
            let rolled = wait_for(&deployments, "chat", "its template annotated", LONG, |d| {
                d.and_then(|d| {
                    d.spec
                        .as_ref()?
                        .template
                        .metadata
                        .as_ref()?
                        .annotations
                        .clone()
                })
                .is_some_and(|a| a.contains_key("wsload.dev/restartedAt"))
            })
            .await
            .expect("deployment");
            tokio::time::sleep(Duration::from_millis(700)).await;
            let generation = rolled.metadata.generation;
            let status = serde_json::json!({"status": {"observedGeneration": generation,
                "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2}});
            deployments
                .patch_status("chat", &PatchParams::default(), &Patch::Merge(&status))
                .await
                .expect("status");
            generation
        })
    };
    let op = operator(&e, None);
    let hold = format!(
        "  target: {{url: \"ws://{ip}:8080/\"}}\n  scenario: sustainedHold\n  connections: [10]\n  warmup: 0s\n  duration: 5s\n  ping: {{interval: 1s, timeout: 2s}}\n  reconnect: {{policy: immediate}}\n"
    );
    create(
        &e,
        "roll",
        &format!("{hold}  disruptions: [{{at: 1s, restart: {{deployment: chat}}}}]\n"),
    )
    .await;
    let st = wait_finished(&e, "roll").await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    let generation = controller.await.expect("the controller's part");
    let [roll] = &st.cells[0].disruptions[..] else {
        panic!("one disruption in status: {:?}", st.cells[0].disruptions)
    };
    assert_eq!(roll.generation, generation, "{roll:?}");
    assert!(roll.ended_at_millis.is_some(), "{roll:?}");
    assert!(
        roll.message
            .starts_with("deployment chat rolled (wsload.dev/restartedAt set on its pod template)")
            && roll
                .message
                .contains("; its 2 replicas updated and available "),
        "{roll:?}"
    );
    // The roll's instant is a time, as kubectl rollout restart writes its own.
    let after = deployments.get("chat").await.expect("get");
    let stamp = after.spec.and_then(|s| {
        s.template
            .metadata?
            .annotations?
            .get("wsload.dev/restartedAt")
            .cloned()
    });
    assert!(
        stamp.is_some_and(|t| t.parse::<k8s_openapi::jiff::Timestamp>().is_ok()),
        "{:?}",
        deployments.get("chat").await.ok().and_then(|d| d.spec)
    );

    create(
        &e,
        "missing",
        &format!("{hold}  disruptions: [{{at: 1s, restart: {{deployment: chad}}}}]\n"),
    )
    .await;
    let st = wait_finished(&e, "missing").await;
    assert_eq!(st.phase, Some(Phase::Failed), "{st:#?}");
    assert_eq!(st.reason.as_deref(), Some("DisruptionFailed"), "{st:#?}");
    let message = st.message.clone().unwrap_or_default();
    assert!(
        message.contains("spec.disruptions[0].restart.deployment: no Deployment chad in namespace"),
        "{message}"
    );
    // What was measured is kept: the hold's figures are in status.
    assert_eq!(st.cells.len(), 1, "{st:#?}");
    assert!(st.tiers[0].connections > 0, "{:?}", st.tiers);
    op.abort();
    e.kubelet.stop().await;
}

/// An operator whose RBAC does not grant patching Deployments where the user's is (the chart
/// without `rbac.rollDeployments` naming that namespace): the roll is refused by the API
/// server, and the test fails as `DisruptionFailed` naming the chart value that grants it,
/// what was measured kept. The operator acts as a user bound to a Role that grants all it
/// needs in the namespace but `get` only on Deployments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_the_operator_may_not_patch_fails_the_test_naming_the_chart_value() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let e = env("lt-roll-403").await;
    let ip = external_server(&e).await;
    let post = PostParams::default();
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "no-roll"},
        "rules": [
            {"apiGroups": ["", "wsload.dev", "events.k8s.io"], "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}
        ]
    }))
    .expect("role");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "no-roll"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "no-roll"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "wsload-no-roll"}]
    }))
    .expect("binding");
    Api::<Role>::namespaced(e.client.clone(), &e.ns)
        .create(&post, &role)
        .await
        .expect("create the role");
    Api::<RoleBinding>::namespaced(e.client.clone(), &e.ns)
        .create(&post, &binding)
        .await
        .expect("bind it");
    let chat: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "chat"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "chat"}},
            "template": {"metadata": {"labels": {"app": "chat"}},
                "spec": {"containers": [{"name": "c", "image": "chat:1"}]}}}
    }))
    .expect("deployment");
    let deployments: Api<Deployment> = Api::namespaced(e.client.clone(), &e.ns);
    deployments.create(&post, &chat).await.expect("create");
    // As the chart's namespaced install: no cluster-scoped reads.
    let config = Config {
        read_cluster_objects: false,
        ..test_config()
    };
    let op = support::run_operator(
        e.cluster.client_as("wsload-no-roll").await,
        &e.ns,
        None,
        "127.0.0.1:0".parse().expect("addr"),
        config,
    );
    create(
        &e,
        "refused",
        &format!(
            "  target: {{url: \"ws://{ip}:8080/\"}}\n  scenario: sustainedHold\n  connections: [10]\n  warmup: 0s\n  duration: 4s\n  ping: {{interval: 1s, timeout: 2s}}\n  reconnect: {{policy: immediate}}\n  disruptions: [{{at: 1s, restart: {{deployment: chat}}}}]\n"
        ),
    )
    .await;
    let st = wait_finished(&e, "refused").await;
    assert_eq!(st.phase, Some(Phase::Failed), "{st:#?}");
    assert_eq!(st.reason.as_deref(), Some("DisruptionFailed"), "{st:#?}");
    let message = st.message.clone().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "spec.disruptions[0].restart.deployment: the operator may not patch Deployments in namespace {}",
            e.ns
        )) && message.contains("forbidden")
            && message.contains(&format!("install the chart with rbac.rollDeployments: [{}]", e.ns)),
        "{message}"
    );
    // Nothing was rolled, and what was measured is kept.
    let after = deployments.get("chat").await.expect("get");
    assert_eq!(after.metadata.generation, Some(1), "{:?}", after.spec);
    assert_eq!(st.cells.len(), 1, "{st:#?}");
    assert!(st.tiers[0].connections > 0, "{:?}", st.tiers);
    op.abort();
    e.kubelet.stop().await;
}

async fn uids(e: &Env, name: &str) -> Vec<String> {
    let mut got = Vec::new();
    for _ in 0..300 {
        got = Vec::new();
        for pod in [format!("{name}-server"), format!("{name}-server-1")] {
            if let Ok(p) = e.pods.get(&pod).await
                && p.metadata.deletion_timestamp.is_none()
            {
                got.extend(p.metadata.uid);
            }
        }
        if got.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    got
}

/// The LoadTest CRD's schema, changed by `edit` and written back (the API server serves the
/// change at once to a GET, which is what the operator reads).
async fn edit_crd(client: &kube::Client, edit: impl FnOnce(&mut serde_json::Value)) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = serde_json::to_value(crds.get("loadtests.wsload.dev").await.expect("get CRD"))
        .expect("serialize");
    edit(&mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]);
    let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("still a CRD");
    crds.replace("loadtests.wsload.dev", &PostParams::default(), &crd)
        .await
        .expect("replace CRD");
}

/// Waits for test `name` to end Failed/CrdOutdated for the missing `measureAtMillis`, its
/// message naming the CRD, the field, the fix and what became of the test (`ending`).
async fn stopped_by_the_crd(e: &Env, name: &str, ending: &str) {
    let st = wait_finished(e, name).await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(st.reason.as_deref(), Some("CrdOutdated"));
    let msg = st.message.unwrap_or_default();
    for part in [
        "loadtests.wsload.dev",
        "lacks status.cells[].measureAtMillis, so",
        "kubectl apply --server-side -f charts/wsload/crds/",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    assert!(msg.ends_with(ending), "{msg}");
}

/// A CRD left over from an older chart (`helm upgrade` never upgrades crds/): the API server
/// refuses every status write carrying `measureAtMillis`, and the test would stall at its
/// first measure barrier. The test fails before anything is created, naming the field and the
/// fix; an operator that may not read the CRD stops the test at the first refused write; once
/// the current CRD is applied, the next test runs without restarting the operator. Its own
/// control plane: the CRD is cluster-wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_older_than_the_operator_fails_the_test_up_front_naming_the_missing_field() {
    let e = env_on(support::cluster::private("crd-old").await, "lt-crd-old").await;
    let mut removed = serde_json::Value::Null;
    edit_crd(&e.client, |s| {
        removed = s["properties"]["status"]["properties"]["cells"]["items"]["properties"]
            .as_object_mut()
            .and_then(|p| p.remove("measureAtMillis"))
            .expect("the CRD has status.cells[].measureAtMillis");
    })
    .await;
    let op = operator(&e, None);
    let spec = "  target: {server: {}}\n  scenario: throughput\n  connections: [10]\n";
    create(&e, "old", spec).await;
    stopped_by_the_crd(&e, "old", "nothing was created").await;
    let pods = e.pods.list(&ListParams::default()).await.expect("list");
    assert!(pods.items.is_empty(), "a refused test creates nothing");
    op.abort();

    // An operator that may not read CRDs (a namespaced install) learns it from its first
    // status write the API server did not keep whole: the two shards' measure instant. The
    // test stops there rather than waiting out its deadline.
    let blind = Config {
        read_cluster_objects: false,
        ..test_config()
    };
    let op = operator_with(&e, None, "127.0.0.1:0".parse().expect("addr"), blind);
    let two = "  target: {server: {}}\n  scenario: sustainedHold\n  connections: [6]\n  duration: 2s\n  shards: 2\n";
    create(&e, "blind", two).await;
    stopped_by_the_crd(&e, "blind", "the test is stopped").await;
    op.abort();

    let op = operator(&e, None);
    edit_crd(&e.client, |s| {
        s["properties"]["status"]["properties"]["cells"]["items"]["properties"]["measureAtMillis"] =
            removed;
    })
    .await;
    create(&e, "current", spec).await;
    // Admission writes the first phase: Pending when admitted, Failed when refused.
    let lt = wait_for(&e.lts, "current", "a phase", LONG, |lt| phase(lt).is_some())
        .await
        .expect("LoadTest exists");
    let st = lt.status.expect("status");
    assert_eq!(st.phase, Some(Phase::Pending), "{:?}", st.message);
    op.abort();
    e.kubelet.stop().await;
    let cluster = e.cluster;
    tokio::task::spawn_blocking(|| cluster.down())
        .await
        .expect("down");
}
