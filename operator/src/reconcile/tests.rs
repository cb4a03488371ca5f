//! One scenario per branch of each phase, against the mocked API server of
//! [`crate::fixtures`]: the status written, the requests made, the Events published. Shards
//! that must be asked over HTTP are given addresses nobody listens on, so the branches where
//! a shard does not answer are exercised too; the answering ones are the lifecycle tests'.

use crate::builders;
use crate::fixtures::{MockApi, ago, exited, loadtest, ready, reconcile_once, unschedulable};
use crate::shard_entries;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use std::time::Duration;
use wsload_spec::LoadTestResource;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState, Verdict};

/// Nothing listens here: connecting is refused at once.
const NOBODY: &str = "127.254.254.254";
/// A phase entered this very instant, or ten hours ago (past any deadline).
const NOW: Duration = Duration::ZERO;
const LONG_AGO: Duration = Duration::from_secs(10 * 3600);

fn external(shards: u32) -> Value {
    json!({"target": {"url": "ws://127.0.0.1:9/"}, "scenario": "pingLatency",
           "connections": [4], "ping": {"count": 5}, "shards": shards})
}

fn managed() -> Value {
    json!({"target": {"server": {}}, "scenario": "pingLatency", "connections": [4],
           "ping": {"count": 5}})
}

/// The status of a test of `spec` that entered `phase` `since` ago, its shards in `shards`.
fn status(spec: &Value, phase: Phase, since: Duration, shards: ShardState) -> LoadTestStatus {
    let lt = loadtest("t", spec.clone(), None);
    let mut entries = shard_entries::pending(&lt.spec);
    for e in &mut entries {
        e.state = shards;
    }
    LoadTestStatus {
        phase: Some(phase),
        phase_since: Some(ago(since)),
        target_url: Some("ws://127.0.0.1:9/".into()),
        shards: entries,
        ..Default::default()
    }
}

fn shard_pod(lt: &LoadTestResource, i: u32) -> Pod {
    builders::shard_pod(lt, i, "ws://127.0.0.1:9/", "{}")
}

fn server_pod(lt: &LoadTestResource) -> Pod {
    let server = lt.spec.target.server.clone().expect("a managed server");
    builders::server_pod(lt, &server, 0)
}

/// A test of `spec` that entered `phase` `since` ago, its shards in `shards`.
fn in_phase(spec: Value, phase: Phase, since: Duration, shards: ShardState) -> LoadTestResource {
    let st = status(&spec, phase, since, shards);
    loadtest("t", spec, Some(st))
}

fn written(api: &MockApi) -> LoadTestStatus {
    api.status().expect("a status write")
}

/// One reconcile of `lt` with `pods` in the cache; the status it wrote.
async fn reconciled(api: &MockApi, lt: LoadTestResource, pods: Vec<Pod>) -> LoadTestStatus {
    reconcile_once(api, lt, pods).await.expect("reconcile");
    written(api)
}

/// Asserts that the reconcile made `call` (`"PATCH pods/t-server"`).
#[track_caller]
fn assert_called(api: &MockApi, call: &str) {
    let calls = api.calls();
    assert!(calls.iter().any(|c| c == call), "no {call} in {calls:?}");
}

#[track_caller]
fn assert_no_pod_calls(api: &MockApi) {
    let calls = api.calls();
    assert!(!calls.iter().any(|c| c.contains("pods")), "{calls:?}");
}

fn reason(st: &LoadTestStatus) -> Option<&str> {
    st.reason.as_deref()
}

// --- new -------------------------------------------------------------------------------

#[tokio::test]
async fn a_new_test_gets_an_entry_per_shard_and_goes_pending() {
    let api = MockApi::default();
    let st = reconciled(&api, loadtest("t", external(3), None), vec![]).await;
    assert_eq!(st.phase, Some(Phase::Pending));
    assert_eq!(st.shards.len(), 3);
    assert!(st.shards.iter().all(|s| s.state == ShardState::Pending));
    assert_eq!(api.events(), ["Pending"]);
    assert_no_pod_calls(&api);
}

#[tokio::test]
async fn a_spec_only_the_operator_can_judge_fails_before_anything_runs() {
    let api = MockApi::default();
    let spec = json!({"target": {"server": {}}, "scenario": "connectionStorm",
                      "connections": [10], "thresholds": ["rtt.p99 < 5ms"]});
    let st = reconciled(&api, loadtest("t", spec, None), vec![]).await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(reason(&st), Some("InvalidSpec"));
    assert!(
        st.message
            .unwrap_or_default()
            .contains("spec.thresholds[0]")
    );
    assert_eq!(api.events(), ["Failed"]);
    assert_no_pod_calls(&api);
}

#[tokio::test]
async fn a_crd_older_than_the_operator_fails_the_test_up_front() {
    let api = MockApi::default();
    let mut crd = serde_json::to_value(crate::crd::definition()).expect("json");
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["properties"]
        .as_object_mut()
        .and_then(|p| p.remove("fanout"))
        .expect("spec.fanout");
    api.installed_crd(crd);
    let st = reconciled(&api, loadtest("t", managed(), None), vec![]).await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(reason(&st), Some("CrdOutdated"));
    let message = st.message.unwrap_or_default();
    assert!(message.contains("it lacks spec.fanout, so"), "{message}");
    assert_eq!(api.events(), ["Failed"]);
    assert_no_pod_calls(&api);
}

#[tokio::test]
async fn a_status_write_refused_for_an_undeclared_field_stops_the_test() {
    // The CRD cannot be read (a namespaced install); the refused write tells instead.
    let api = MockApi::default();
    api.refuse("/apis/apiextensions.k8s.io/", 403);
    api.undeclared_status("shards");
    let lt = loadtest("t", external(2), None);
    reconcile_once(&api, lt, vec![]).await.expect("reconcile");
    let st = written(&api);
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(reason(&st), Some("CrdOutdated"));
    assert!(
        st.shards.is_empty(),
        "the last accepted status, with the failure"
    );
    let message = st.message.unwrap_or_default();
    assert!(message.contains("it lacks status.shards, so"), "{message}");
    assert!(message.ends_with("the test is stopped"), "{message}");
    assert_no_pod_calls(&api);
}

#[tokio::test]
async fn an_operator_that_may_not_read_the_crd_admits_the_test() {
    let api = MockApi::default();
    api.refuse("/apis/apiextensions.k8s.io/", 403);
    let st = reconciled(&api, loadtest("t", external(1), None), vec![]).await;
    assert_eq!(st.phase, Some(Phase::Pending));
    assert_called(
        &api,
        "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/loadtests.wsload.dev",
    );
}

#[tokio::test]
async fn a_namespace_whose_pod_security_refuses_the_tuning_container_fails_the_test_up_front() {
    let api = MockApi::default();
    api.namespace_label(crate::pod_security::LABEL_ENFORCE, "baseline");
    let mut spec = managed();
    spec["loadgen"] = json!({"tuning": {"sysctls": {"net.core.somaxconn": "4096"}}});
    let st = reconciled(&api, loadtest("t", spec.clone(), None), vec![]).await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(reason(&st), Some("PodSecurityRefused"));
    let message = st.message.unwrap_or_default();
    assert!(
        message.contains("allowedUnsafeSysctls: [net.core.somaxconn]"),
        "{message}"
    );
    assert_eq!(api.events(), ["Failed"]);
    assert_no_pod_calls(&api);

    // The same test where the level is unknown (no `get namespaces`) goes on: the API server
    // is left to judge.
    let api = MockApi::default();
    api.refuse("/api/v1/namespaces/ns", 403);
    let st = reconciled(&api, loadtest("t", spec, None), vec![]).await;
    assert_eq!(st.phase, Some(Phase::Pending));
}

// --- Pending ---------------------------------------------------------------------------

#[tokio::test]
async fn an_external_target_goes_straight_to_starting() {
    let api = MockApi::default();
    let lt = in_phase(external(1), Phase::Pending, NOW, ShardState::Pending);
    let st = reconciled(&api, lt, vec![]).await;
    assert_eq!(st.phase, Some(Phase::Starting));
    assert_eq!(st.target_url.as_deref(), Some("ws://127.0.0.1:9/"));
}

#[tokio::test]
async fn a_managed_server_is_applied_then_waited_on() {
    let api = MockApi::default();
    let lt = in_phase(managed(), Phase::Pending, NOW, ShardState::Pending);
    reconcile_once(&api, lt, vec![]).await.expect("reconcile");
    assert_called(&api, "PATCH pods/t-server");
    assert_called(&api, "PATCH services/t-server");
    // Nothing changed in status: still Pending, not written.
    assert!(api.status().is_none(), "{:?}", api.calls());
}

#[tokio::test]
async fn a_ready_server_moves_the_test_to_starting_at_its_pod_ip() {
    let api = MockApi::default();
    let lt = in_phase(managed(), Phase::Pending, NOW, ShardState::Pending);
    let pods = vec![ready(server_pod(&lt), "10.0.0.7")];
    let st = reconciled(&api, lt, pods).await;
    assert_eq!(st.phase, Some(Phase::Starting));
    let url = st.target_url.unwrap_or_default();
    assert!(url.starts_with("ws://10.0.0.7:"), "{url}");
    assert!(
        !api.calls().iter().any(|c| c == "PATCH pods/t-server"),
        "an existing pod is not applied again"
    );
}

#[tokio::test]
async fn a_server_that_exits_before_the_test_fails_it() {
    let api = MockApi::default();
    let lt = in_phase(managed(), Phase::Pending, NOW, ShardState::Pending);
    let pods = vec![exited(server_pod(&lt), 137, "OOMKilled")];
    let st = reconciled(&api, lt, pods).await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(reason(&st), Some("ServerFailed"));
    assert!(st.message.unwrap_or_default().contains("OOMKilled"));
}

#[tokio::test]
async fn a_server_not_ready_by_its_deadline_fails_the_test_saying_why() {
    let api = MockApi::default();
    let lt = in_phase(managed(), Phase::Pending, LONG_AGO, ShardState::Pending);
    let pods = vec![server_pod(&lt)];
    let st = reconciled(&api, lt, pods).await;
    assert_eq!(reason(&st), Some("ServerNotReady"));
    assert!(st.message.unwrap_or_default().contains("t-server"));
}

// --- Starting --------------------------------------------------------------------------

#[tokio::test]
async fn starting_creates_every_shard_pod() {
    let api = MockApi::default();
    let lt = in_phase(external(3), Phase::Starting, NOW, ShardState::Pending);
    reconcile_once(&api, lt, vec![]).await.expect("reconcile");
    let mut created: Vec<String> = api
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("PATCH pods/"))
        .collect();
    created.sort();
    assert_eq!(
        created,
        [
            "PATCH pods/t-shard-0",
            "PATCH pods/t-shard-1",
            "PATCH pods/t-shard-2"
        ]
    );
    assert_eq!(written(&api).message.as_deref(), Some("0/3 shards ready"));
}

/// The control Secret is created before any shard pod (a pod whose Secret is missing would
/// not start), by a create, never a read; one that exists already (an earlier reconcile's,
/// the same derived token) does not stop the shards; and shard pods that exist need none.
#[tokio::test]
async fn the_control_secret_is_created_before_the_shard_pods_and_never_read() {
    let api = MockApi::default();
    let lt = in_phase(external(2), Phase::Starting, NOW, ShardState::Pending);
    reconcile_once(&api, lt.clone(), vec![])
        .await
        .expect("reconcile");
    let calls = api.calls();
    let secret = calls.iter().position(|c| c == "POST secrets");
    let first_pod = calls.iter().position(|c| c.starts_with("PATCH pods/"));
    assert!(
        secret.is_some() && secret < first_pod,
        "the Secret first: {calls:?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| c.contains("secrets") && c != "POST secrets"),
        "{calls:?}"
    );

    let again = MockApi::default();
    again.refuse("secrets", 409);
    reconcile_once(&again, lt.clone(), vec![])
        .await
        .expect("an existing Secret is fine");
    let calls = again.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("PATCH pods/"))
            .count(),
        2,
        "{calls:?}"
    );

    let refused = MockApi::default();
    refused.refuse("secrets", 403);
    assert!(reconcile_once(&refused, lt.clone(), vec![]).await.is_err());
    assert!(
        !refused.calls().iter().any(|c| c.starts_with("PATCH pods/")),
        "no shard pod without its Secret"
    );

    let existing = MockApi::default();
    let pods = vec![shard_pod(&lt, 0), shard_pod(&lt, 1)];
    reconcile_once(&existing, lt, pods)
        .await
        .expect("reconcile");
    assert!(
        !existing.calls().iter().any(|c| c.contains("secrets")),
        "{:?}",
        existing.calls()
    );
}

#[tokio::test]
async fn a_shard_that_ends_before_the_start_fails_the_test() {
    let api = MockApi::default();
    let lt = in_phase(external(2), Phase::Starting, NOW, ShardState::Pending);
    let pods = vec![
        ready(shard_pod(&lt, 0), NOBODY),
        exited(shard_pod(&lt, 1), 2, "Error"),
    ];
    let st = reconciled(&api, lt, pods).await;
    assert_eq!(reason(&st), Some("ShardFailed"));
    assert_eq!(st.shards[1].state, ShardState::Failed);
}

/// What the scheduler says of a shard one per node with no node left.
const NO_NODE: &str = "0/4 nodes are available: 1 node(s) had untolerated taint, 2 node(s) didn't match pod anti-affinity rules, 1 node(s) didn't match Pod's node affinity/selector";

/// A 4-shard test Starting since `since` (its scheduling deadline 10 s): shards 0 and 1
/// ready, 2 and 3 on no node.
async fn two_shards_unschedulable(since: Duration) -> LoadTestStatus {
    let api = MockApi::default();
    let mut spec = external(4);
    spec["run"] = json!({"deadlines": {"scheduling": "10s", "ready": "5m"}});
    let lt = in_phase(spec, Phase::Starting, since, ShardState::Pending);
    let pods = vec![
        ready(shard_pod(&lt, 0), NOBODY),
        ready(shard_pod(&lt, 1), NOBODY),
        unschedulable(shard_pod(&lt, 2), NO_NODE),
        unschedulable(shard_pod(&lt, 3), NO_NODE),
    ];
    reconciled(&api, lt, pods).await
}

#[tokio::test]
async fn unschedulable_shards_are_named_with_the_schedulers_reason_while_waiting() {
    let st = two_shards_unschedulable(NOW).await;
    assert_eq!(st.phase, Some(Phase::Starting));
    assert_eq!(
        st.message.as_deref(),
        Some(
            format!("2/4 shards ready; 2 not scheduled: shards 2, 3: unschedulable: {NO_NODE}")
                .as_str()
        )
    );
    assert_eq!(st.shards[3].state, ShardState::Pending);
    assert_eq!(
        st.shards[3].reason.as_deref(),
        Some(format!("unschedulable: {NO_NODE}").as_str())
    );
}

#[tokio::test]
async fn unschedulable_shards_fail_the_test_once_the_scheduling_deadline_passed() {
    // 11 s: past `scheduling` (10 s), long before `scheduling` + `ready`.
    let st = two_shards_unschedulable(Duration::from_secs(11)).await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(reason(&st), Some("ShardsUnschedulable"));
    assert_eq!(
        st.message.as_deref(),
        Some(
            format!(
                "2 of 4 shards not scheduled within 10s: shards 2, 3: unschedulable: {NO_NODE}"
            )
            .as_str()
        )
    );
}

#[tokio::test]
async fn scheduled_shards_not_ready_wait_out_the_whole_start_deadline() {
    let mut spec = external(2);
    spec["run"] = json!({"deadlines": {"scheduling": "10s", "ready": "5m"}});
    // Placed on a node, not ready: past `scheduling`, within `scheduling` + `ready`, it
    // waits; past both, it fails as not ready, not as unschedulable.
    for (since, phase, why) in [
        (Duration::from_secs(11), Phase::Starting, None),
        (LONG_AGO, Phase::Failed, Some("ShardsNotReady")),
    ] {
        let api = MockApi::default();
        let lt = in_phase(spec.clone(), Phase::Starting, since, ShardState::Pending);
        // Ready's pod with its readiness taken back: on a node, its container not ready.
        let mut placed = ready(shard_pod(&lt, 1), NOBODY);
        if let Some(conditions) = placed.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions.retain(|c| c.type_ == "PodScheduled");
        }
        let pods = vec![ready(shard_pod(&lt, 0), NOBODY), placed];
        let st = reconciled(&api, lt, pods).await;
        assert_eq!(st.phase, Some(phase), "{st:#?}");
        assert_eq!(reason(&st), why);
    }
}

#[tokio::test]
async fn all_shards_ready_fixes_the_start_instant_before_telling_anyone() {
    let api = MockApi::default();
    let lt = in_phase(external(2), Phase::Starting, NOW, ShardState::Ready);
    let delay = lt.spec.run.start_delay.get();
    let pods = (0..2).map(|i| ready(shard_pod(&lt, i), NOBODY)).collect();
    let before = unix_millis();
    let st = reconciled(&api, lt, pods).await;
    assert_eq!(st.phase, Some(Phase::Starting));
    let at = st.start_at_millis.expect("startAtMillis");
    let delay = u64::try_from(delay.as_millis()).expect("ms");
    assert!(
        at >= before + delay && at <= unix_millis() + delay,
        "{at} vs {before} + {delay}"
    );
    assert!(st.cells.is_empty(), "cell 0 is recorded with the release");
}

#[tokio::test]
async fn shards_unreleased_when_the_instant_passes_are_lost() {
    let api = MockApi::default();
    let spec = external(2);
    let mut st = status(&spec, Phase::Starting, NOW, ShardState::Ready);
    st.start_at_millis = Some(unix_millis() - 1000);
    let lt = loadtest("t", spec, Some(st));
    let pods = (0..2).map(|i| ready(shard_pod(&lt, i), NOBODY)).collect();
    let st = reconciled(&api, lt, pods).await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert!(st.shards.iter().all(|s| s.state == ShardState::Lost));
    let why = st.shards[0].reason.clone().unwrap_or_default();
    assert!(
        why.starts_with("not released before the start instant"),
        "{why}"
    );
    assert_eq!(st.missing_shards, [0, 1]);
}

// --- Running ---------------------------------------------------------------------------

#[tokio::test]
async fn a_shard_pod_deleted_while_running_is_lost_and_fails_the_test() {
    let api = MockApi::default();
    let lt = in_phase(external(2), Phase::Running, NOW, ShardState::Running);
    let pods = vec![ready(shard_pod(&lt, 0), NOBODY)];
    let st = reconciled(&api, lt, pods).await;
    assert_eq!(st.phase, Some(Phase::Running), "shard 0 still runs");
    assert_eq!(st.shards[1].state, ShardState::Lost);
    assert_eq!(reason(&st), Some("ShardFailed"));
    assert_eq!(st.missing_shards, [1]);
}

#[tokio::test]
async fn a_run_past_its_deadline_goes_to_collecting_with_the_cause() {
    let api = MockApi::default();
    let lt = in_phase(external(1), Phase::Running, LONG_AGO, ShardState::Running);
    let pods = vec![ready(shard_pod(&lt, 0), NOBODY)];
    let st = reconciled(&api, lt, pods).await;
    assert_eq!(st.phase, Some(Phase::Collecting));
    assert_eq!(reason(&st), Some("RunDeadlineExceeded"));
    assert_eq!(st.shards[0].state, ShardState::Lost);

    // With nothing stored, collecting ends it: the message says the cause once, then what
    // followed from it.
    let api = MockApi::default();
    reconcile_once(&api, loadtest("t", external(1), Some(st)), vec![])
        .await
        .expect("reconcile");
    let st = written(&api);
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(reason(&st), Some("RunDeadlineExceeded"));
    let message = st.message.unwrap_or_default();
    assert_eq!(
        message.matches("did not finish within").count(),
        1,
        "{message}"
    );
    assert!(message.ends_with("; no result stored"), "{message}");
}

// --- Collecting ------------------------------------------------------------------------

fn echo() -> Value {
    // As the fixture shard's result: one echo cell of 200 connections.
    json!({"target": {"url": "ws://127.0.0.1:9/"}, "scenario": "echo", "connections": [200],
           "thresholds": ["rtt.p99 < 5ms"]})
}

/// The API server holding shard 0's result, as the operator stored it: its kernel counted 3
/// listen overflows.
fn stored_result(api: &MockApi, lt: &LoadTestResource) {
    let mut r = wsload_report::fixtures::shard(0, 100, 1, 1_000_000);
    r.cells[0].kernel = vec![wsload_report::fixtures::kernel(0, 4026532001, 3)];
    let packed = wsload_report::stored::encode(&r).expect("encode");
    api.config_map(&builders::shard_result_config_map(lt, 0, packed));
}

/// A one-shard echo test Collecting since `since`, its shard in `shard`, its result stored.
fn collecting(api: &MockApi, since: Duration, shard: ShardState) -> LoadTestResource {
    let lt = in_phase(echo(), Phase::Collecting, since, shard);
    stored_result(api, &lt);
    lt
}

#[tokio::test]
async fn a_gone_shard_with_nothing_stored_leaves_no_results() {
    let api = MockApi::default();
    let lt = in_phase(external(1), Phase::Collecting, NOW, ShardState::Done);
    let st = reconciled(&api, lt, vec![]).await;
    assert_eq!(st.shards[0].state, ShardState::Lost);
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(reason(&st), Some("ShardFailed"), "the first cause stays");
    assert_called(&api, "GET configmaps/t-result-0");
}

#[tokio::test]
async fn a_gone_shard_whose_result_was_stored_counts_as_collected() {
    let api = MockApi::default();
    let lt = collecting(&api, NOW, ShardState::Done);
    let st = reconciled(&api, lt, vec![]).await;
    assert_eq!(st.shards[0].state, ShardState::Collected);
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
}

#[tokio::test]
async fn stored_results_are_merged_judged_and_the_merge_stored() {
    let api = MockApi::default();
    let lt = collecting(&api, NOW, ShardState::Collected);
    let st = reconciled(&api, lt, vec![]).await;
    assert_eq!(st.phase, Some(Phase::Succeeded));
    assert_eq!(st.verdict, Some(Verdict::Pass));
    assert_eq!(st.results_config_map.as_deref(), Some("t-results"));
    assert_called(&api, "PATCH configmaps/t-results");
    assert_eq!(api.events(), ["Succeeded"]);
    // What the report would say of the merge, in status.
    assert_eq!(
        st.findings,
        [
            "finding [100]: connections were refused: nothing listening, or the server's accept queue overflowed (refused: 1 of 100 attempts)",
            "finding [100]: the kernel dropped connections at a full accept queue (ListenOverflows): the server accepted more slowly than connections arrived; raise its listen backlog and net.core.somaxconn, add server replicas, or open connections more slowly (a smaller connect.batchSize, a longer connect.batchInterval) (TcpExtListenOverflows +3, TcpExtListenDrops +3 in net:[4026532001] (shard 0))",
        ]
    );
    // The merge and, beside it, the page `wsload report --html` would write.
    let cm = api.stored_config_map("t-results").expect("stored");
    let data = cm.binary_data.expect("binaryData");
    let merged = wsload_report::stored::decode(&data[crate::names::MERGED_KEY].0).expect("merged");
    assert_eq!(merged.shards, [0]);
    let page = wsload_report::stored::json_text(&data[crate::names::REPORT_KEY].0).expect("gzip");
    let page = String::from_utf8(page).expect("utf-8");
    assert_eq!(page, wsload_report::html(&merged));
}

#[tokio::test]
async fn a_refused_merge_store_fails_the_test_and_keeps_the_figures() {
    let api = MockApi::default();
    let lt = collecting(&api, NOW, ShardState::Collected);
    api.refuse("configmaps/t-results", 403);
    let st = reconciled(&api, lt, vec![]).await;
    assert_eq!(st.phase, Some(Phase::Failed));
    assert_eq!(reason(&st), Some("ResultStoreFailed"));
    let message = st.message.clone().unwrap_or_default();
    assert!(
        message.contains("t-results") && message.contains("refused by the test (403)"),
        "{message}"
    );
    assert_eq!(st.tiers.len(), 1, "the figures are kept");
    assert_eq!(
        st.verdict,
        Some(Verdict::Fail),
        "a failed test never passes"
    );
    assert_eq!(api.events(), ["Failed"]);
}

#[tokio::test]
async fn unreadable_results_are_retried_until_the_collect_deadline() {
    for (since, phase, why) in [
        (NOW, Phase::Collecting, None),
        (LONG_AGO, Phase::Failed, Some("ResultsUnreadable")),
    ] {
        let api = MockApi::default();
        let lt = collecting(&api, since, ShardState::Collected);
        api.refuse("configmaps/t-result-0", 503);
        let st = reconciled(&api, lt, vec![]).await;
        assert_eq!(st.phase, Some(phase), "{st:#?}");
        assert_eq!(reason(&st), why);
    }
}

// --- finished --------------------------------------------------------------------------

#[tokio::test]
async fn a_finished_test_deletes_its_pods_and_itself_after_its_ttl() {
    let api = MockApi::default();
    let mut spec = external(1);
    spec["run"] = json!({"ttlAfterFinished": "1s"});
    let mut st = status(&spec, Phase::Succeeded, LONG_AGO, ShardState::Collected);
    st.completion_time = Some(ago(LONG_AGO));
    let lt = loadtest("t", spec, Some(st));
    let pods = vec![ready(shard_pod(&lt, 0), NOBODY)];
    reconcile_once(&api, lt, pods).await.expect("reconcile");
    assert_called(&api, "DELETE pods/t-shard-0");
    assert_called(&api, "DELETE loadtests/t");
}

fn unix_millis() -> u64 {
    u64::try_from(k8s_openapi::jiff::Timestamp::now().as_millisecond()).expect("after 1970")
}
