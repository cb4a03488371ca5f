//! The operator conducting many shards against a real kube-apiserver, with a fake fleet of
//! shard pods served in this process (tests/support/fake_shards.rs): results stored one
//! ConfigMap per shard however large in total, a store the API server refuses failing the test
//! at once instead of at the collect deadline, and a shard that does not answer leaving the
//! others' release on time. The operator runs in this process, scoped to the test's namespace.

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::fake_shards::{Behaviour, FleetOpts};
use support::fleet_env::FleetEnv;
use support::loadtests::binary;
use support::{Cluster, wait_for};
use wsload_operator::names;
use wsload_operator::reconcile::Config;
use wsload_report::stored;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState};

const LONG: Duration = Duration::from_secs(180);

type Env = FleetEnv;

async fn env(prefix: &str, fleet: FleetOpts) -> Env {
    FleetEnv::start(
        support::shared().await,
        prefix,
        fleet,
        Duration::from_millis(300),
    )
    .await
}

/// A pingLatency test of `shards` shards against an address nobody dials (the fake shards
/// never connect), spread freely (the fleet is its own scheduler), plus `extra` spec lines.
fn spec(shards: u32, extra: &str) -> String {
    format!(
        "  target: {{url: \"ws://127.0.0.1:9/\"}}
  scenario: pingLatency
  connections: [{}, {}, {}]
  ping: {{count: 20, timeout: 5s, kind: app}}
  shards: {shards}
  loadgen: {{spread: none}}
  thresholds: [\"loss < 0.1%\", \"rtt.p99 < 500ms\"]
{extra}",
        10 * shards,
        20 * shards,
        30 * shards
    )
}

/// When each phase was first seen (polled every 50 ms), and the final status.
struct Run {
    status: LoadTestStatus,
    seen: BTreeMap<&'static str, Instant>,
}

impl Run {
    fn seen(&self, phase: Phase) -> Option<Instant> {
        self.seen.get(phase.as_str()).copied()
    }
}

async fn run_to_the_end(e: &Env, name: &str) -> Run {
    let deadline = Instant::now() + LONG;
    let mut seen = BTreeMap::new();
    loop {
        let lt = e.lts.get_opt(name).await.expect("get LoadTest");
        let status = lt.and_then(|lt| lt.status).unwrap_or_default();
        if let Some(p) = status.phase {
            seen.entry(p.as_str()).or_insert_with(Instant::now);
            if p.is_finished() {
                eprintln!(
                    "{name}: {:?} {:?}: {:?}",
                    status.phase, status.reason, status.message
                );
                return Run { status, seen };
            }
        }
        if Instant::now() > deadline {
            panic!(
                "{name} did not finish within {LONG:?}; fleet log {}; status:\n{status:#?}",
                e.fleet.log_path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn condition<'a>(st: &'a LoadTestStatus, t: &str) -> Option<&'a str> {
    st.conditions
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| c.status.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_over_a_mebibyte_in_total_are_all_kept() {
    const SHARDS: u32 = 4;
    // Each result about 330 KB compressed: 1.3 MB in all, more than one object may hold;
    // the merge of the padded histograms stays about one shard's size.
    let behaviours = (0..SHARDS)
        .map(|i| {
            (
                i,
                Behaviour {
                    padding_bytes: 320_000,
                    ..Default::default()
                },
            )
        })
        .collect();
    let e = env(
        "scale-big",
        FleetOpts {
            behaviours,
            ..Default::default()
        },
    )
    .await;
    e.create("big", &spec(SHARDS, "")).await;
    let run = run_to_the_end(&e, "big").await;
    let st = &run.status;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert!(
        st.shards.iter().all(|s| s.state == ShardState::Collected) && st.shards.len() == 4,
        "{:?}",
        st.shards
    );
    assert_eq!(
        st.results_config_map.as_deref(),
        Some(names::results("big").as_str())
    );
    let uid = e
        .lts
        .get("big")
        .await
        .expect("get")
        .metadata
        .uid
        .expect("uid");
    let mut total = 0;
    for i in 0..SHARDS {
        let name = names::shard_result("big", i);
        let cm = e
            .config_maps
            .get_opt(&name)
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("{name} missing"));
        let labels = cm.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(names::LABEL_LOADTEST).map(String::as_str),
            Some("big")
        );
        assert_eq!(
            labels.get(names::LABEL_ROLE).map(String::as_str),
            Some(names::ROLE_RESULT)
        );
        let owners = cm.metadata.owner_references.clone().unwrap_or_default();
        assert!(owners.iter().any(|o| o.uid == uid), "{name}: {owners:?}");
        let bytes = binary(&cm, names::RESULT_KEY);
        total += bytes.len();
        let result = stored::decode(&bytes).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(result.shards, vec![i], "{name}");
        assert_eq!(result.cells.len(), 3, "{name}");
        let served = e.fleet.record("big", i).expect("shard served");
        eprintln!(
            "{name}: {} bytes stored, {} bytes of JSON served",
            bytes.len(),
            served.result_bytes
        );
    }
    let merged_cm = e
        .config_maps
        .get(&names::results("big"))
        .await
        .expect("merged ConfigMap");
    let merged_bytes = binary(&merged_cm, names::MERGED_KEY);
    let merged = stored::decode(&merged_bytes).expect("merged result decodes");
    assert_eq!(merged.shards, (0..SHARDS).collect::<Vec<_>>());
    assert_eq!(merged.shard_count, SHARDS);
    eprintln!(
        "results: {total} bytes over {SHARDS} shard ConfigMaps, merged {} bytes",
        merged_bytes.len()
    );
    assert!(
        total > 1 << 20,
        "the shards' results add up to {total} bytes only: the test must store over 1 MiB"
    );
}

/// A cluster-wide ValidatingAdmissionPolicy and its binding, deleted when dropped.
struct Policy {
    cluster: &'static Cluster,
    name: String,
}

impl Policy {
    /// Denies creating or updating ConfigMap `configmap` in `ns`.
    async fn deny_config_map(cluster: &'static Cluster, ns: &str, configmap: &str) -> Policy {
        let name = format!("wsload-test-deny-{ns}");
        let yaml = format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [\"\"]
      apiVersions: [\"v1\"]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  validations:
  - expression: \"request.namespace != '{ns}' || object.metadata.name != '{configmap}'\"
    message: \"ConfigMap {configmap} is refused by the test's admission policy\"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
"
        );
        let path = support::cluster::scratch_dir().join(format!("{name}.yaml"));
        std::fs::write(&path, yaml).expect("write the policy");
        let policy = Policy { cluster, name };
        let file = path.to_str().expect("UTF-8 path").to_string();
        tokio::task::spawn_blocking(move || cluster.kubectl_ok(&["apply", "-f", &file]))
            .await
            .expect("kubectl apply");
        policy
    }

    fn delete(&self) {
        let _ = self.cluster.kubectl(&[
            "delete",
            "--ignore-not-found",
            &format!("validatingadmissionpolicybinding/{}", self.name),
            &format!("validatingadmissionpolicy/{}", self.name),
        ]);
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        self.delete();
    }
}

/// Waits until the API server refuses ConfigMap `name` (a dry run): policies take a moment
/// to reach the admission plugin.
async fn until_refused(e: &Env, name: &str) {
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match e.config_maps.create(&dry, &cm).await {
            Err(kube::Error::Api(s)) if (400..500).contains(&s.code) => {
                eprintln!("the API server refuses {name}: {} {}", s.code, s.message);
                return;
            }
            other => assert!(
                Instant::now() < deadline,
                "the admission policy does not refuse {name} after 60 s: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_succeed_fails_before_the_collect_deadline() {
    let e = env("scale-refused", FleetOpts::default()).await;
    let refused = names::shard_result("refused", 1);
    let policy = Policy::deny_config_map(e.cluster, &e.ns, &refused).await;
    until_refused(&e, &refused).await;
    e.create("refused", &spec(3, "  run: {deadlines: {collect: 2m}}\n"))
        .await;
    let run = run_to_the_end(&e, "refused").await;
    policy.delete();
    let st = &run.status;
    assert_eq!(st.phase, Some(Phase::Failed), "{st:#?}");
    assert_eq!(st.reason.as_deref(), Some("ResultStoreFailed"), "{st:#?}");
    let message = st.message.clone().unwrap_or_default();
    assert!(message.contains(&refused), "{message}");
    // Promptly: from Collecting (or the last Running seen, had Collecting passed unseen) to
    // Failed, far below the 2-minute collect deadline.
    let since = run
        .seen(Phase::Collecting)
        .or(run.seen(Phase::Running))
        .expect("Running or Collecting seen");
    let took = run.seen(Phase::Failed).expect("Failed seen") - since;
    eprintln!("Collecting to Failed in {took:?}: {message}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // What could be stored is kept.
    let kept = e
        .config_maps
        .get_opt(&names::shard_result("refused", 0))
        .await
        .expect("get");
    let kept = kept.expect("shard 0's result kept");
    let r0 = stored::decode(&binary(&kept, names::RESULT_KEY)).expect("decodes");
    assert_eq!(r0.shards, vec![0]);
    assert!(
        e.config_maps
            .get_opt(&refused)
            .await
            .expect("get")
            .is_none()
    );
    // A Warning Event on the LoadTest says why.
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let list = events.list(&ListParams::default()).await.expect("events");
        let warning = list.items.iter().find(|ev| {
            ev.type_.as_deref() == Some("Warning")
                && ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("refused")
        });
        if let Some(ev) = warning {
            eprintln!("event: {:?} {:?}", ev.reason, ev.note);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no Warning event for the LoadTest: {:?}",
            list.items
                .iter()
                .map(|ev| (&ev.type_, &ev.reason, &ev.note))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_shard_does_not_delay_the_others_release() {
    let control_timeout = Config::default().control_timeout;
    let behaviours = BTreeMap::from([(
        0,
        Behaviour {
            hang: true,
            ..Default::default()
        },
    )]);
    let e = env(
        "scale-hang",
        FleetOpts {
            behaviours,
            ..Default::default()
        },
    )
    .await;
    e.create("hang", &spec(4, "  run: {shardFailure: continue}\n"))
        .await;
    let run = run_to_the_end(&e, "hang").await;
    let st = &run.status;
    eprintln!(
        "phase {:?} reason {:?} message {:?}; Degraded {:?}; shards {:?}",
        st.phase,
        st.reason,
        st.message,
        condition(st, "Degraded"),
        st.shards
    );
    let start_at_ms = st.start_at_millis.expect("status.startAtMillis");
    let records = e.fleet.test_records("hang");
    let hung = records.iter().find(|r| r.index == 0).expect("shard 0");
    eprintln!(
        "shard 0 (hangs) was sent {} start request(s)",
        hung.starts.len()
    );
    let arrivals: Vec<_> = (1..4)
        .map(|i| {
            let r = records
                .iter()
                .find(|r| r.index == i)
                .unwrap_or_else(|| panic!("shard {i} never served"));
            let a = r
                .first_start()
                .unwrap_or_else(|| panic!("shard {i} never got a start request: {r:?}"))
                .clone();
            eprintln!(
                "shard {i}: start arrived {:.1} ms before startAt (answered {})",
                start_at_ms as f64 - a.unix_micros as f64 / 1000.0,
                a.status
            );
            assert!(
                a.unix_micros < start_at_ms * 1000,
                "shard {i}'s start arrived after the start instant {start_at_ms}: {a:?}"
            );
            a
        })
        .collect();
    let first = arrivals.iter().map(|a| a.at).min().expect("arrivals");
    let last = arrivals.iter().map(|a| a.at).max().expect("arrivals");
    eprintln!("shards 1-3 released within {:?}", last - first);
    assert!(
        last - first < control_timeout,
        "the reachable shards' starts spread over {:?}",
        last - first
    );
    let lost = st.shards.iter().find(|s| s.index == 0).expect("shard 0");
    assert_eq!(lost.state, ShardState::Lost, "{:?}", st.shards);
    assert!(
        lost.reason.as_deref().is_some_and(|r| !r.is_empty()),
        "{lost:?}"
    );
    for s in st.shards.iter().filter(|s| s.index > 0) {
        assert_eq!(s.state, ShardState::Collected, "{:?}", st.shards);
    }
    assert!(st.phase.is_some_and(Phase::is_finished));
    if st.phase == Some(Phase::Succeeded) {
        assert_eq!(condition(st, "Degraded"), Some("True"), "{st:#?}");
        assert_eq!(st.missing_shards, vec![0]);
    }
    // The pods are cleaned up (cleanup: delete) and the fleet removed them.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(e.client.clone(), &e.ns);
    wait_for(
        &pods,
        &names::shard("hang", 1),
        "shard pod gone",
        LONG,
        |p| p.is_none(),
    )
    .await;
}
