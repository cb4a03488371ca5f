//! The operator conducting the measure barrier (docs/operator.md, "Shard control protocol"):
//! shards of several open their share of a cell, say they are `connected` and wait; once every
//! live shard has, the operator records one measure instant in the cell's status and tells
//! each shard that instant on its own clock. Against a real kube-apiserver, with a fake fleet
//! whose shards rendezvous as real ones do (tests/support/fake_shards.rs), one slow to connect,
//! one whose orders are held while the operator restarts, one that dies while the others wait.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use support::fake_shards::{Arrival, Behaviour, FleetOpts, ShardRecord};
use support::fleet_env::FleetEnv;
use wsload_operator::names;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState, Verdict};

const LONG: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(300);
const SHARDS: u32 = 3;

/// A pingLatency test of three shards over `connections` against an address nobody dials
/// (the fake shards never dial), plus `extra` spec lines.
fn spec(connections: &str, extra: &str) -> String {
    format!(
        "  target: {{url: \"ws://127.0.0.1:9/\"}}
  scenario: pingLatency
  connections: {connections}
  ping: {{count: 20, timeout: 5s, kind: app}}
  shards: {SHARDS}
  loadgen: {{spread: none}}
  thresholds: [\"loss < 0.1%\"]
{extra}"
    )
}

/// A fleet whose shards rendezvous, each behaving as `behaviours` says.
async fn env(prefix: &str, behaviours: BTreeMap<u32, Behaviour>) -> FleetEnv {
    let fleet = FleetOpts {
        behaviours,
        rendezvous: true,
        ..Default::default()
    };
    FleetEnv::start(support::shared().await, prefix, fleet, POLL).await
}

async fn status(e: &FleetEnv, name: &str) -> LoadTestStatus {
    e.lts
        .get(name)
        .await
        .unwrap_or_else(|err| panic!("get {name}: {err}"))
        .status
        .unwrap_or_default()
}

/// Polls status every 50 ms until `cond` holds of it and the fleet's records; panics after
/// [`LONG`]. Every status message seen on the way is passed to `seen`.
async fn until(
    e: &FleetEnv,
    name: &str,
    what: &str,
    mut seen: impl FnMut(&str),
    cond: impl Fn(&LoadTestStatus, &[ShardRecord]) -> bool,
) -> LoadTestStatus {
    let deadline = Instant::now() + LONG;
    loop {
        let st = status(e, name).await;
        if let Some(m) = st.message.as_deref() {
            seen(m);
        }
        if cond(&st, &e.fleet.test_records(name)) {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: not {what} after {LONG:?}; fleet log {}; status:\n{st:#?}",
            e.fleet.log_path().display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn until_finished(e: &FleetEnv, name: &str, seen: impl FnMut(&str)) -> LoadTestStatus {
    let st = until(e, name, "finished", seen, |st, _| {
        st.phase.is_some_and(Phase::is_finished)
    })
    .await;
    eprintln!("{name}: {:?} {:?}: {:?}", st.phase, st.reason, st.message);
    st
}

fn record(e: &FleetEnv, name: &str, index: u32) -> ShardRecord {
    e.fleet
        .record(name, index)
        .unwrap_or_else(|| panic!("shard {index} of {name} never served"))
}

/// The measure orders shard `r` got for cell `cell`.
fn measures(r: &ShardRecord, cell: u32) -> Vec<&Arrival> {
    r.measures.iter().filter(|a| a.cell == Some(cell)).collect()
}

fn measure_at(st: &LoadTestStatus, cell: u32) -> u64 {
    st.cells
        .iter()
        .find(|c| c.index == cell)
        .and_then(|c| c.measure_at_millis)
        .unwrap_or_else(|| panic!("cell {cell} has no measureAtMillis: {:?}", st.cells))
}

/// Every measure order shard `r` got for `cell` named `at` on the operator's clock (and the
/// same instant on its own, by its clock's offset); at least one was taken (202).
fn told_the_recorded_instant(st: &LoadTestStatus, r: &ShardRecord, cell: u32, at: u64) {
    let orders = measures(r, cell);
    assert!(
        orders.iter().any(|a| a.status == 202),
        "shard {} took no measure order for cell {cell}: {orders:?}",
        r.index
    );
    let clock = st
        .shards
        .iter()
        .find(|s| s.index == r.index)
        .and_then(|s| s.clock.as_ref())
        .unwrap_or_else(|| panic!("shard {} has no clock estimate: {:?}", r.index, st.shards));
    // Rounded to the millisecond, off by at most the estimate's uncertainty.
    let slack = 1 + i64::try_from(clock.uncertainty_micros.div_ceil(1000)).unwrap_or(i64::MAX);
    for a in orders {
        assert_eq!(a.conductor_at, Some(at), "shard {}: {a:?}", r.index);
        let own = a.start_at as i64 - at as i64;
        let offset = clock.offset_micros / 1000;
        assert!(
            (own - offset).abs() <= slack,
            "shard {} (clock {clock:?}) was told {} on its clock for {at}: {a:?}",
            r.index,
            a.start_at
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_shard_measures_before_every_shard_is_connected_and_all_from_one_instant() {
    const SLOW: Duration = Duration::from_secs(3);
    // Shard 1 takes 3 s to open its share of each cell; shards 0 and 2 run their clocks off
    // the host's, so one instant is a different `startAt` for each.
    let behaviours = BTreeMap::from([
        (
            0,
            Behaviour {
                clock_offset_ms: -120,
                ..Default::default()
            },
        ),
        (
            1,
            Behaviour {
                connect_delay: SLOW,
                ..Default::default()
            },
        ),
        (
            2,
            Behaviour {
                clock_offset_ms: 250,
                ..Default::default()
            },
        ),
    ]);
    let e = env("measure-slow", behaviours).await;
    e.create("slow", &spec("[30, 60]", "")).await;
    let mut messages: Vec<String> = Vec::new();
    let st = until_finished(&e, "slow", |m| {
        if messages.last().map(String::as_str) != Some(m) {
            messages.push(m.to_string());
        }
    })
    .await;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.verdict, Some(Verdict::Pass), "{st:#?}");
    assert_eq!(st.cells.len(), 2, "{:?}", st.cells);

    let records: Vec<ShardRecord> = (0..SHARDS).map(|i| record(&e, "slow", i)).collect();
    for (cell, connections) in [(0u32, 30u64), (1, 60)] {
        let at = measure_at(&st, cell);
        let c = &st.cells[cell as usize];
        assert!(c.done, "{c:?}");
        assert_eq!(c.shards, SHARDS, "{c:?}");
        // The slow shard connected 3 s after the cell's instant; the instant came after.
        assert!(
            at >= c.start_at_millis + SLOW.as_millis() as u64,
            "cell {cell}: measuring from {at}, the cell began at {}",
            c.start_at_millis
        );
        let connected_at = |r: &ShardRecord| {
            *r.connected_at
                .get(&cell)
                .unwrap_or_else(|| panic!("shard {} never connected on cell {cell}", r.index))
        };
        let last_connected = records.iter().map(connected_at).max().expect("shards");
        assert_eq!(
            last_connected,
            connected_at(&records[1]),
            "the slow shard was the last to connect"
        );
        for r in &records {
            told_the_recorded_instant(&st, r, cell, at);
            for a in measures(r, cell) {
                assert!(
                    a.at > last_connected,
                    "shard {} was told to measure cell {cell} before every shard was connected: {a:?}",
                    r.index
                );
            }
            assert_eq!(r.cells_run, 2, "shard {}: {r:?}", r.index);
        }
        let head = format!("cell {cell} ({connections}): ");
        let waiting = format!("{head}2/{SHARDS} shards connected");
        let passed = format!(
            "{head}all {SHARDS} shards connected ({connections} opened, 0 failed); measuring from {at} (Unix ms)"
        );
        assert!(
            messages.contains(&waiting) && messages.contains(&passed),
            "no {waiting:?} or {passed:?} among {messages:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restarted_while_shards_wait_tells_them_the_recorded_instant() {
    // Shard 2 takes no measure order until the first operator is gone.
    let held = Arc::new(AtomicBool::new(true));
    let behaviours = BTreeMap::from([(
        2,
        Behaviour {
            hold_measure: Some(held.clone()),
            ..Default::default()
        },
    )]);
    let mut e = env("measure-restart", behaviours).await;
    e.create("restart", &spec("[30]", "")).await;
    let before = until(
        &e,
        "restart",
        "telling shard 2 when to measure",
        |_| {},
        |st, records| {
            let refused = records
                .iter()
                .find(|r| r.index == 2)
                .is_some_and(|r| r.measures.iter().any(|a| a.status == 503));
            refused
                && st
                    .cells
                    .first()
                    .is_some_and(|c| c.measure_at_millis.is_some())
        },
    )
    .await;
    let at = measure_at(&before, 0);

    e.stop_operator().await;
    let stopped = record(&e, "restart", 2).measures.len();
    held.store(false, Ordering::SeqCst);
    let restarted = Instant::now();
    e.start_operator();
    let st = until_finished(&e, "restart", |_| {}).await;

    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(measure_at(&st, 0), at, "the recorded instant is kept");
    let waited = record(&e, "restart", 2);
    let after: Vec<&Arrival> = waited.measures[stopped..].iter().collect();
    assert!(
        after.iter().any(|a| a.status == 202 && a.at > restarted),
        "the restarted operator never told shard 2: {:?}",
        waited.measures
    );
    for i in 0..SHARDS {
        let r = record(&e, "restart", i);
        told_the_recorded_instant(&st, &r, 0, at);
        assert_eq!(r.cells_run, 1, "shard {i}: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_dying_while_the_others_wait_leaves_the_barrier_to_them() {
    // Shard 2 would take an hour to open its share: it dies first.
    let behaviours = BTreeMap::from([(
        2,
        Behaviour {
            connect_delay: Duration::from_secs(3600),
            ..Default::default()
        },
    )]);
    let e = env("measure-dies", behaviours).await;
    e.create("dies", &spec("[30]", "  run: {shardFailure: continue}\n"))
        .await;
    let waiting = format!("cell 0 (30): 2/{SHARDS} shards connected");
    let seen = until(
        &e,
        "dies",
        "waiting for shard 2",
        |_| {},
        |st, _| st.message.as_deref() == Some(waiting.as_str()),
    )
    .await;
    // The operator saw two shards connected and one not: nobody is told yet.
    for i in 0..SHARDS {
        let r = record(&e, "dies", i);
        assert!(r.measures.is_empty(), "shard {i} was told early: {r:?}");
    }
    assert!(seen.cells[0].measure_at_millis.is_none(), "{seen:#?}");

    let pods: Api<Pod> = Api::namespaced(e.client.clone(), &e.ns);
    let died = Instant::now();
    pods.delete(&names::shard("dies", 2), &DeleteParams::default())
        .await
        .expect("delete shard 2's pod");
    let st = until_finished(&e, "dies", |_| {}).await;

    assert_eq!(st.phase, Some(Phase::Succeeded), "{st:#?}");
    assert_eq!(st.missing_shards, vec![2], "{st:#?}");
    // Failed when the operator saw its pod being deleted, Lost when only that it was gone.
    let lost = st.shards.iter().find(|s| s.index == 2).expect("shard 2");
    assert!(
        matches!(lost.state, ShardState::Failed | ShardState::Lost),
        "{:?}",
        st.shards
    );
    let at = measure_at(&st, 0);
    assert_eq!(st.cells[0].shards, 2, "{:?}", st.cells);
    for i in 0..2 {
        let r = record(&e, "dies", i);
        told_the_recorded_instant(&st, &r, 0, at);
        assert!(
            measures(&r, 0).iter().all(|a| a.at > died),
            "shard {i} was told before shard 2 died: {r:?}"
        );
        assert_eq!(r.cells_run, 1, "shard {i}: {r:?}");
    }
    assert!(record(&e, "dies", 2).measures.is_empty());
}
