//! Faults of the control plane itself while a LoadTest runs (docs/operator.md, "Faults of the
//! control plane"): the API server restarted, a watch expired (410 Gone), a status write by
//! another writer. Each run ends as defined with every measured result kept: the shards'
//! result ConfigMaps hold exactly what they served, the merged one and status their sums, and
//! no cell was lost or run twice.
//!
//! The operator runs in this process against a real kube-apiserver + etcd, scoped to the
//! test's namespace, with a fake fleet of shard pods (tests/support/fake_shards.rs): the
//! faults are the control plane's, so the shards need only to behave as real ones do. Tests
//! that stop the API server or compact etcd have a control plane of their own
//! ([`support::cluster::private`]); the others share the binary's.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kube::api::{Api, WatchEvent, WatchParams};
use support::Cluster;
use support::fake_shards::FleetOpts;
use support::fleet_env::FleetEnv;
use support::loadtests::binary;
use wsload_operator::names;
use wsload_report::{RunResult, stored};
use wsload_spec::LoadTestResource;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState, Verdict};

const LONG: Duration = Duration::from_secs(120);
const SHARDS: u32 = 2;
/// The cells of [`SPEC`], one per connection count.
const CELLS: usize = 3;
/// How often the operator looks at a running test: every outage below outlasts it.
const POLL: Duration = Duration::from_millis(500);
/// Three cells of 2 s each: an outage of a few seconds falls in the middle of the run.
const SPEC: &str = "  target: {url: \"ws://127.0.0.1:9/\"}
  scenario: pingLatency
  connections: [20, 40, 60]
  ping: {count: 20, timeout: 5s, kind: app}
  shards: 2
  loadgen: {spread: none}
  thresholds: [\"loss < 0.1%\", \"rtt.p99 < 500ms\"]
";

type Env = FleetEnv;

async fn env(cluster: &'static Cluster, prefix: &str) -> Env {
    let fleet = FleetOpts {
        cell_duration: Duration::from_secs(2),
        ..Default::default()
    };
    FleetEnv::start(cluster, prefix, fleet, POLL).await
}

/// A control plane of the test's own (the faults below stop or compact it) with its
/// namespace, and the LoadTest `name` created there.
async fn private(name: &str) -> Env {
    let e = env(support::cluster::private(name).await, &format!("cp-{name}")).await;
    e.create(name, SPEC).await;
    e
}

/// Ends a test of [`private`]: its operator first, then its control plane.
async fn tear_down(e: Env, took: Instant) {
    let cluster = e.cluster;
    drop(e);
    tokio::task::spawn_blocking(|| cluster.down())
        .await
        .expect("down");
    eprintln!("test took {:?}", took.elapsed());
}

/// Polls the test's status (every 50 ms) until `cond` holds; panics after [`LONG`].
async fn until(
    e: &Env,
    name: &str,
    what: &str,
    cond: impl Fn(&LoadTestStatus) -> bool,
) -> LoadTestStatus {
    let deadline = Instant::now() + LONG;
    loop {
        // An API server coming back may refuse a request or two while it settles.
        if let Ok(Some(lt)) = e.lts.get_opt(name).await {
            let st = lt.status.unwrap_or_default();
            if cond(&st) {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: not {what} after {LONG:?}; fleet log {}; status:\n{st:#?}",
                e.fleet.log_path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// While its first cell runs: Running, that cell released and not yet done.
async fn until_first_cell_runs(e: &Env, name: &str) -> LoadTestStatus {
    until(e, name, "running its first cell", |st| {
        st.phase == Some(Phase::Running) && st.cells.len() == 1 && !st.cells[0].done
    })
    .await
}

async fn until_finished(e: &Env, name: &str) -> LoadTestStatus {
    let st = until(e, name, "finished", |st| {
        st.phase.is_some_and(Phase::is_finished)
    })
    .await;
    eprintln!("{name}: {:?} {:?}: {:?}", st.phase, st.reason, st.message);
    st
}

/// The defined end of an undisturbed run, whatever happened to the control plane meanwhile:
/// Succeeded with its verdict, every shard collected, every cell recorded once; each shard
/// ordered each cell once (retries of one order aside) and ran it once; every shard's stored
/// result exactly what it served, the merged one and status their sums.
async fn assert_ended_as_defined_with_every_result(e: &Env, name: &str, st: &LoadTestStatus) {
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.reason, None, "{st:#?}");
    assert_eq!(st.verdict, Some(Verdict::Pass), "{st:#?}");
    assert!(st.thresholds.iter().all(|t| t.pass), "{:?}", st.thresholds);
    assert_eq!(st.shards.len(), SHARDS as usize, "{:?}", st.shards);
    assert!(
        st.shards.iter().all(|s| s.state == ShardState::Collected),
        "{:?}",
        st.shards
    );
    assert!(st.missing_shards.is_empty(), "{st:#?}");
    let indexes: Vec<u32> = st.cells.iter().map(|c| c.index).collect();
    assert_eq!(indexes, [0, 1, 2], "{:?}", st.cells);
    assert!(st.cells.iter().all(|c| c.done), "{:?}", st.cells);
    assert_eq!(st.tiers.len(), CELLS, "{:?}", st.tiers);
    assert_eq!(
        st.results_config_map.as_deref(),
        Some(names::results(name).as_str())
    );

    let mut served: Vec<RunResult> = Vec::new();
    for i in 0..SHARDS {
        let record = e.fleet.record(name, i).expect("shard served");
        assert_eq!(record.cells_run, CELLS as u32, "shard {i}: {record:?}");
        // The first cell comes with the start, each later one in its own order: one instant
        // per cell, whatever was retried.
        let starts: Vec<u64> = record.starts.iter().map(|a| a.start_at).collect();
        assert!(
            !starts.is_empty() && starts.iter().all(|s| *s == starts[0]),
            "shard {i} was started at different instants: {:?}",
            record.starts
        );
        assert!(
            record.starts.iter().all(|a| a.status == 202),
            "shard {i}: {:?}",
            record.starts
        );
        for cell in 1..CELLS as u32 {
            let orders: Vec<_> = record
                .cells
                .iter()
                .filter(|a| a.cell == Some(cell))
                .collect();
            assert!(
                !orders.is_empty()
                    && orders
                        .iter()
                        .all(|a| a.status == 202 && a.start_at == orders[0].start_at),
                "shard {i}, cell {cell}: ordered {orders:?}"
            );
            assert_eq!(
                Some(orders[0].start_at),
                st.cells
                    .iter()
                    .find(|c| c.index == cell)
                    .map(|c| c.start_at_millis),
                "shard {i}, cell {cell}: status records another instant than the shard got"
            );
        }
        assert!(
            record.cells.iter().all(|a| a.cell.is_some_and(|c| c >= 1)),
            "shard {i}: {:?}",
            record.cells
        );

        let json = e
            .fleet
            .served_result(name, i)
            .unwrap_or_else(|| panic!("shard {i} built no result"));
        let cm_name = names::shard_result(name, i);
        let cm = e
            .config_maps
            .get_opt(&cm_name)
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("{cm_name} missing"));
        let kept = stored::json_text(&binary(&cm, names::RESULT_KEY)).expect("gzip");
        assert!(
            kept == json.as_bytes(),
            "{cm_name} holds other than what shard {i} served"
        );
        let result: RunResult = serde_json::from_str(&json).expect("a shard result");
        assert_eq!(result.cells.len(), CELLS, "shard {i}");
        served.push(result);
    }

    let merged_cm = e
        .config_maps
        .get(&names::results(name))
        .await
        .expect("the merged ConfigMap");
    let merged = stored::decode(&binary(&merged_cm, names::MERGED_KEY)).expect("decodes");
    assert_eq!(merged.shards, (0..SHARDS).collect::<Vec<_>>());
    assert_eq!(merged.cells.len(), CELLS);
    for k in 0..CELLS {
        let sum = |f: fn(&wsload_report::Counts) -> u64| -> u64 {
            served.iter().map(|r| f(&r.cells[k].measure.counts)).sum()
        };
        let counts = &merged.cells[k].measure.counts;
        let (tier, cell) = (&st.tiers[k], &st.cells[k]);
        assert_eq!(counts.attempted, sum(|c| c.attempted), "cell {k}");
        assert_eq!(counts.connected, sum(|c| c.connected), "cell {k}");
        assert_eq!(counts.sent, sum(|c| c.sent), "cell {k}");
        assert_eq!(counts.received, sum(|c| c.received), "cell {k}");
        assert_eq!(counts.expected, sum(|c| c.expected), "cell {k}");
        assert_eq!(counts.lost, sum(|c| c.lost), "cell {k}");
        assert_eq!(tier.connected, sum(|c| c.connected), "cell {k}: {tier:?}");
        assert_eq!(tier.survived, sum(|c| c.survived), "cell {k}: {tier:?}");
        assert_eq!(cell.attempted, sum(|c| c.attempted), "cell {k}: {cell:?}");
        assert_eq!(cell.sent, sum(|c| c.sent_with_warmup), "cell {k}: {cell:?}");
        assert_eq!(cell.shards, SHARDS, "cell {k}: {cell:?}");
    }
}

/// Stops the API server for `outage` (etcd keeps running), runs `meanwhile` on the stopped
/// control plane, and starts the API server again on the same address and certificates.
/// Returns how long it was down.
async fn restart_apiserver(
    cluster: &'static Cluster,
    outage: Duration,
    meanwhile: impl FnOnce(&Cluster) + Send + 'static,
) -> Duration {
    tokio::task::spawn_blocking(move || {
        let stopped = cluster.stop_apiserver();
        meanwhile(cluster);
        std::thread::sleep(outage.saturating_sub(stopped.down_for()));
        let down = stopped.down_for();
        cluster.start_apiserver(stopped);
        down
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// The code a watch of LoadTests from `version` is refused with (0: it was not refused). A
/// request or two may fail on a connection the restart closed: those are retried.
async fn watch_from(lts: &Api<LoadTestResource>, version: &str) -> u16 {
    let mut attempts = 0;
    loop {
        attempts += 1;
        match lts.watch(&WatchParams::default().timeout(5), version).await {
            Err(kube::Error::Api(s)) => return s.code,
            Ok(stream) => {
                let mut stream = std::pin::pin!(stream);
                match stream.next().await {
                    Some(Ok(WatchEvent::Error(s))) => return s.code,
                    Some(Err(e)) if attempts < 10 => eprintln!("watch from {version}: {e}"),
                    other => {
                        eprintln!("a watch from {version} gave {other:?}");
                        return 0;
                    }
                }
            }
            Err(e) if attempts < 10 => eprintln!("watch from {version}: {e}"),
            Err(e) => panic!("a watch from {version}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restarted_mid_run_loses_no_result() {
    let took = Instant::now();
    let e = private("restart").await;
    let before = until_first_cell_runs(&e, "restart").await;
    // Six polls without an API server: the first cell ends and its shards wait between cells
    // meanwhile; the operator's reconciles and its watches fail until it is back.
    let down = restart_apiserver(e.cluster, POLL * 6, |_| {}).await;
    eprintln!("kube-apiserver was down {down:?}");
    let st = until_finished(&e, "restart").await;
    assert_eq!(st.start_at, before.start_at, "the start instant is kept");
    assert_eq!(st.cells[0].start_at_millis, before.cells[0].start_at_millis);
    assert_ended_as_defined_with_every_result(&e, "restart", &st).await;
    tear_down(e, took).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_expired_while_the_api_server_was_down_is_listed_again() {
    let took = Instant::now();
    let e = private("expired").await;
    until_first_cell_runs(&e, "expired").await;
    // A version the operator's LoadTest watch has seen (it saw the write that made it).
    let seen = e
        .lts
        .get("expired")
        .await
        .expect("get")
        .metadata
        .resource_version
        .expect("a resourceVersion");
    // While the API server is down, etcd moves on and forgets the history before: every
    // watch the API server had open can only be resumed with 410 Gone.
    let down = restart_apiserver(e.cluster, POLL * 6, |c| {
        let at = c.advance_and_compact_etcd(3);
        eprintln!("etcd compacted at revision {at}");
    })
    .await;
    eprintln!("kube-apiserver was down {down:?}");

    // The condition happened: a watch from that version is refused as expired...
    let gone = watch_from(&e.lts, &seen).await;
    assert_eq!(gone, 410, "a watch from {seen} after the compaction");
    // ...and the operator's own watch met it: the only LIST of LoadTests the restarted API
    // server can have served is the operator's, which lists again only on 410 Gone (any
    // other watch error resumes from the version it had).
    let relisted = Instant::now();
    loop {
        let lists = e
            .cluster
            .apiserver_requests(&e.client, &[("resource", "loadtests"), ("verb", "LIST")])
            .await;
        if let Ok(lists @ 1..) = lists {
            eprintln!(
                "the operator listed LoadTests again ({lists} LIST) {:?} after the restart",
                relisted.elapsed()
            );
            break;
        }
        assert!(
            relisted.elapsed() < Duration::from_secs(60),
            "the operator never listed LoadTests again after its watch expired ({lists:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let st = until_finished(&e, "expired").await;
    assert_ended_as_defined_with_every_result(&e, "expired", &st).await;
    tear_down(e, took).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_status_write_mid_run_is_undone_and_the_run_ends_as_defined() {
    let took = Instant::now();
    let cluster = support::shared().await;
    let e = env(cluster, "cp-foreign").await;
    e.create("foreign", SPEC).await;
    // Once the first cell is recorded and the second released to the shards: the write
    // below would make an operator that believed it redo the first cell or lose it.
    let before = until(&e, "foreign", "running its second cell", |st| {
        st.phase == Some(Phase::Running) && st.cells.len() == 2 && st.cells[0].done
    })
    .await;

    // A person "stopping" the test by hand: fields the operator owns, the lists replaced
    // whole as a merge patch does.
    let by_hand = r#"{"status": {"phase": "Failed", "reason": "StoppedByHand",
        "message": "set with kubectl patch", "cells": [], "shards": []}}"#;
    // Another tool adding a condition of its own (a policy engine, a CI gate): a field the
    // operator does not set, appended.
    let external = r#"[{"op": "add", "path": "/status/conditions/-", "value": {
        "type": "ExternalCheck", "status": "True", "reason": "Checked",
        "message": "added by another writer", "lastTransitionTime": "2026-01-01T00:00:00Z"}}]"#;
    let ns = e.ns.clone();
    tokio::task::spawn_blocking(move || {
        for (kind, patch) in [("merge", by_hand), ("json", external)] {
            cluster.kubectl_ok(&[
                "patch",
                "-n",
                &ns,
                "loadtest",
                "foreign",
                "--subresource=status",
                &format!("--type={kind}"),
                "-p",
                patch,
            ]);
        }
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));

    // The operator puts its own fields back within a few polls, from what it last wrote.
    let restored = until(&e, "foreign", "restored by the operator", |st| {
        st.phase != Some(Phase::Failed)
            && !st.cells.is_empty()
            && st.reason.as_deref() != Some("StoppedByHand")
    })
    .await;
    assert!(
        restored.cells.len() >= 2,
        "cells restored: {:?}",
        restored.cells
    );
    assert_eq!(restored.cells[..1], before.cells[..1], "cell 0 as recorded");
    assert_eq!(
        restored.cells[1].start_at_millis, before.cells[1].start_at_millis,
        "cell 1 keeps its instant"
    );
    assert_ne!(
        restored.message.as_deref(),
        Some("set with kubectl patch"),
        "{restored:#?}"
    );
    assert_eq!(
        restored.shards.len(),
        SHARDS as usize,
        "{:?}",
        restored.shards
    );

    let st = until_finished(&e, "foreign").await;
    assert_eq!(st.start_at, before.start_at, "the start instant is kept");
    assert_ended_as_defined_with_every_result(&e, "foreign", &st).await;
    // The other writer's condition is its own: kept beside the operator's.
    let external = st
        .conditions
        .iter()
        .find(|c| c.type_ == "ExternalCheck")
        .unwrap_or_else(|| panic!("the foreign condition is gone: {:?}", st.conditions));
    assert_eq!(external.message, "added by another writer");
    assert_eq!(
        st.conditions
            .iter()
            .filter(|c| c.type_ == "ThresholdsPassed")
            .map(|c| c.status.as_str())
            .collect::<Vec<_>>(),
        ["True"]
    );
    eprintln!("test took {:?}", took.elapsed());
}
