//! The operator under load (issue 26): many LoadTests at once, in one namespace and across
//! others, conducted by one cluster-wide operator against a real kube-apiserver, each with 2
//! fake shards (tests/support/fake_shards.rs).
//!
//! - Each test has its own connection count, and tests in different namespaces share names,
//!   so a result stored or merged under the wrong test shows: every test must reach its own
//!   verdict with figures equal to what ITS shards served.
//! - None is starved: one test is first run alone (same operator build, same cluster, same
//!   machine), and every test of the batch must finish within bounds relative to that
//!   ([`SERIAL_SHARE`]).
//! - Some tests are deleted before their end and some after it; afterwards nothing of theirs
//!   is left that would outlive them (see [`check_deleted`] for what "left" can mean on a
//!   control plane without a garbage collector).
//!
//! The operator runs as its own process (the `wsload-operator` binary, `run` without a watch
//! namespace, no leader election), so that its memory is its own: one line per load on stdout,
//!
//! ```text
//! loadtests=N namespaces=M succeeded=S deleted=D slowest_s=.. median_s=.. alone_s=.. \
//!   rss_mib=.. hwm_mib=.. cpu_s=.. reconciles=K reconcile_p50_ms=.. reconcile_p99_ms=..
//! ```
//!
//! N is 12 in the suite (`cargo test -p wsload-operator --test many_tests`: 26-46 s of test
//! after 18-25 s starting the control plane, on a shared 2-core VM), the same checks at 50
//! taking 35-80 s, so the suite keeps 12; `WSLOAD_MANY_LOADTESTS` sets N (bench/operator/many.sh
//! runs 50).

mod support;

use futures_util::future::join_all;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::Cluster;
use support::fake_shards::{FakeFleet, FleetOpts};
use wsload_operator::names;
use wsload_report::{RunResult, stored};
use wsload_spec::LoadTestResource;
use wsload_spec::status::{LoadTestStatus, Phase, ShardState, Verdict};

/// LoadTests at once in the suite; `WSLOAD_MANY_LOADTESTS` overrides it.
const SUITE_LOAD: usize = 12;
/// Namespaces besides the main one that half of the tests are spread over.
const OTHER_NAMESPACES: usize = 5;
const SHARDS: u32 = 2;
/// The operator's poll, as the shard simulation runs it (bench/operator).
const POLL: &str = "1s";
/// None starved, by two bounds on each test's duration (creation to seen finished), both
/// relative to the duration of a test alone measured first in the same run:
///
/// - it finishes at most one test-alone's duration after the batch's median: a test left
///   waiting for a turn while its peers progress (the starved one) lags them by at least the
///   length of a turn, one test's duration;
/// - it takes at most `N / SERIAL_SHARE` test-alone durations: the shared work (the API
///   server, the fleet, the operator) grows with N, so every test may slow down, but served one
///   after another the last test would take N test-alone durations; within a fraction of that,
///   the tests were conducted side by side.
const SERIAL_SHARE: f64 = 2.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Runs to its end and is checked.
    Runs,
    /// Deleted once seen Running (released, not finished).
    DeletedRunning,
    /// Deleted once finished.
    DeletedFinished,
}

/// One LoadTest of the batch and what was seen of it.
#[derive(Debug)]
struct Planned {
    ns: String,
    name: String,
    /// Its own figure: no two tests share it.
    connections: u32,
    fate: Fate,
    created: Option<Instant>,
    uid: Option<String>,
    status: LoadTestStatus,
    finished: Option<Instant>,
    deleted: Option<(Instant, Phase)>,
}

impl Planned {
    fn key(&self) -> (String, String) {
        (self.ns.clone(), self.name.clone())
    }

    fn took(&self) -> Option<Duration> {
        Some(self.finished? - self.created?)
    }

    /// Nothing more to wait for.
    fn settled(&self) -> bool {
        match self.fate {
            Fate::Runs | Fate::DeletedFinished => self.finished.is_some(),
            Fate::DeletedRunning => self.deleted.is_some(),
        }
    }
}

/// Tests deleted before their end and after it: every tenth from the fourth, and from the
/// eighth. The others run to their end.
fn fate(k: usize) -> Fate {
    match k % 10 {
        3 => Fate::DeletedRunning,
        7 => Fate::DeletedFinished,
        _ => Fate::Runs,
    }
}

fn spec(connections: u32) -> String {
    format!(
        "  target: {{url: \"ws://127.0.0.1:9/\"}}
  scenario: pingLatency
  connections: [{connections}]
  ping: {{count: 20, timeout: 5s, kind: app}}
  shards: {SHARDS}
  loadgen: {{spread: none}}
  thresholds: [\"loss < 0.1%\", \"rtt.p99 < 500ms\"]
"
    )
}

async fn create(client: &kube::Client, ns: &str, name: &str, connections: u32) -> Instant {
    let spec = spec(connections);
    let lt = support::loadtests::valid_loadtest(name, &spec);
    Api::<LoadTestResource>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &lt)
        .await
        .unwrap_or_else(|e| panic!("create LoadTest {ns}/{name}: {e}"));
    Instant::now()
}

// --- the operator, as its own process -------------------------------------------------------

/// `wsload-operator run`, cluster-wide, killed when dropped.
struct Operator {
    child: Child,
    metrics: SocketAddr,
}

impl Operator {
    async fn start(cluster: &Cluster, label: &str) -> Operator {
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let log = support::cluster::scratch_dir().join(format!("operator-{label}.log"));
        let log = std::fs::File::create(&log).expect("create the operator's log");
        // The key the simulated shards' tokens are derived from (support::CONTROL_KEY).
        let key = support::cluster::scratch_dir().join(format!("operator-{label}.key"));
        std::fs::write(&key, support::CONTROL_KEY).expect("write the operator's control key");
        let mut command = Command::new(env!("CARGO_BIN_EXE_wsload-operator"));
        // The operator's own variables, were any set around the test, must not scope it.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("WSLOAD_OPERATOR_") {
                command.env_remove(name);
            }
        }
        let child = command
            .args(["run", "--leader-elect", "false", "--poll", POLL])
            .arg("--metrics-listen")
            .arg(metrics.to_string())
            .arg("--control-key-file")
            .arg(&key)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .env("RUST_LOG", "info,kube=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start wsload-operator");
        let operator = Operator { child, metrics };
        let url = format!("http://{metrics}/readyz");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let answer = wsload_http::http_client::get(&url, Duration::from_secs(2)).await;
            if answer.is_ok_and(|a| a.status == 200) {
                return operator;
            }
            assert!(
                Instant::now() < deadline,
                "the operator is not ready after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its resident memory now and at its peak (VmRSS, VmHWM), in MiB.
    fn memory_mib(&self) -> (f64, f64) {
        let path = format!("/proc/{}/status", self.child.id());
        let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let kib = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no {field} in {path}"))
        };
        (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
    }

    /// The CPU time it has used (user and system), in seconds.
    fn cpu_seconds(&self) -> f64 {
        let path = format!("/proc/{}/stat", self.child.id());
        let stat = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // After the command name in parentheses: state is field 3, utime and stime 14 and 15.
        let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<f64>().ok());
        let total = ticks(14).zip(ticks(15)).map(|(u, s)| u + s);
        // USER_HZ is 100 on every Linux this runs on.
        total.unwrap_or_else(|| panic!("cannot read the CPU times in {path}")) / 100.0
    }

    /// Reconciles run, and the p50 and p99 of their duration (ms), from its `/metrics`.
    async fn reconciles(&self) -> (u64, Option<f64>, Option<f64>) {
        use wsload_http::{buckets, scrape};
        let url = format!("http://{}/metrics", self.metrics);
        let body = wsload_http::http_client::get(&url, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("scrape {url}: {e}"))
            .body;
        let total = scrape::find(&body, "wsload_operator_reconciles_total", &BTreeMap::new())
            .unwrap_or_else(|| panic!("no reconcile counter in {url}"));
        let counts = buckets::from_cumulative(&scrape::buckets(
            &body,
            "wsload_operator_reconcile_duration_seconds",
        ));
        let ms = |q| buckets::quantile(q, &counts).map(|s| s * 1000.0);
        (total as u64, ms(0.5), ms(0.99))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// --- the load ---------------------------------------------------------------------------------

/// What one load's line says.
struct Figures {
    loadtests: usize,
    namespaces: usize,
    succeeded: usize,
    deleted: usize,
    slowest: Duration,
    median: Duration,
    alone: Duration,
    memory: (f64, f64),
    cpu_seconds: f64,
    reconciles: (u64, Option<f64>, Option<f64>),
}

impl Figures {
    fn line(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        format!(
            "loadtests={} namespaces={} succeeded={} deleted={} slowest_s={:.1} median_s={:.1} alone_s={:.1} rss_mib={:.1} hwm_mib={:.1} cpu_s={:.1} reconciles={} reconcile_p50_ms={} reconcile_p99_ms={}",
            self.loadtests,
            self.namespaces,
            self.succeeded,
            self.deleted,
            self.slowest.as_secs_f64(),
            self.median.as_secs_f64(),
            self.alone.as_secs_f64(),
            self.memory.0,
            self.memory.1,
            self.cpu_seconds,
            self.reconciles.0,
            ms(self.reconciles.1),
            ms(self.reconciles.2),
        )
    }
}

fn load() -> usize {
    std::env::var("WSLOAD_MANY_LOADTESTS")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse()
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or_else(|| panic!("WSLOAD_MANY_LOADTESTS={v}: not a count"))
        })
        .unwrap_or(SUITE_LOAD)
}

/// Half the tests (rounded up) in `main`, the others round-robin over `others`, named
/// `lt-<i>` by their place in their namespace: names repeat across namespaces.
fn plan(n: usize, main: &str, others: &[String]) -> Vec<Planned> {
    let in_main = n.div_ceil(2);
    let mut per_ns: HashMap<String, usize> = HashMap::new();
    (0..n)
        .map(|k| {
            let ns = if k < in_main {
                main.to_string()
            } else {
                others[(k - in_main) % others.len()].clone()
            };
            let i = per_ns.entry(ns.clone()).or_default();
            let name = format!("lt-{i}");
            *i += 1;
            Planned {
                ns,
                name,
                // Even, so both shards serve the same share; distinct per test.
                connections: 20 + 2 * k as u32,
                fate: fate(k),
                created: None,
                uid: None,
                status: LoadTestStatus::default(),
                finished: None,
                deleted: None,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_loadtests_at_once_each_reach_their_own_verdict_and_deleted_ones_leave_nothing() {
    support::test_logs();
    let n = load();
    let cluster = support::shared().await;
    cluster.apply_crds().await;
    let client = cluster.client().await;

    let alone = run_alone(cluster, &client).await;
    println!("{}", alone.line());

    let batch = start_batch(cluster, &client, n).await;
    let mut tests = batch.tests;
    // Serial service would finish the last test after about n tests alone: past that, stop.
    let patience = alone.alone.mul_f64(n as f64) + Duration::from_secs(60);
    follow(&client, &mut tests, patience).await;
    let figures = measure(&batch.operator, &tests, batch.fleets.len(), &alone).await;
    println!("{}", figures.line());

    for t in tests.iter().filter(|t| t.fate != Fate::DeletedRunning) {
        check_own_results(&client, &batch.fleets[&t.ns], t).await;
        check_not_starved(t, &figures, n);
    }
    // Every shard any fleet served belongs to a test planned in its namespace.
    for (ns, fleet) in &batch.fleets {
        for r in fleet.records() {
            assert!(
                tests.iter().any(|t| &t.ns == ns && t.name == r.test),
                "{ns}: a shard of an unknown test {:?} was served",
                r.test
            );
        }
    }
    for t in tests.iter_mut().filter(|t| t.fate == Fate::DeletedFinished) {
        delete(&client, t).await;
    }
    for t in tests.iter().filter(|t| t.deleted.is_some()) {
        check_deleted(&client, t).await;
    }
}

/// The batch under way: its namespaces' fleets, its operator, its tests just created.
struct Batch {
    fleets: BTreeMap<String, FakeFleet>,
    operator: Operator,
    tests: Vec<Planned>,
}

/// Namespaces, a fleet in each, a fresh cluster-wide operator, then all `n` tests at once.
async fn start_batch(cluster: &'static Cluster, client: &kube::Client, n: usize) -> Batch {
    let main = cluster.namespace("many").await;
    let mut others = Vec::new();
    for i in 0..OTHER_NAMESPACES {
        others.push(cluster.namespace(&format!("many-{i}")).await);
    }
    let mut fleets = BTreeMap::new();
    for ns in std::iter::once(&main).chain(&others) {
        let fleet = FakeFleet::start(client.clone(), ns, FleetOpts::default()).await;
        fleets.insert(ns.clone(), fleet);
    }
    let operator = Operator::start(cluster, &format!("{n}")).await;
    let mut tests = plan(n, &main, &others);
    let created = join_all(
        tests
            .iter()
            .map(|t| create(client, &t.ns, &t.name, t.connections)),
    )
    .await;
    for (t, at) in tests.iter_mut().zip(created) {
        t.created = Some(at);
    }
    eprintln!("{n} LoadTests created over {} namespaces", fleets.len());
    Batch {
        fleets,
        operator,
        tests,
    }
}

/// The load's figures, once every test is settled.
async fn measure(
    operator: &Operator,
    tests: &[Planned],
    namespaces: usize,
    alone: &Figures,
) -> Figures {
    let mut took: Vec<Duration> = tests.iter().filter_map(Planned::took).collect();
    took.sort();
    Figures {
        loadtests: tests.len(),
        namespaces,
        succeeded: tests
            .iter()
            .filter(|t| t.status.phase == Some(Phase::Succeeded))
            .count(),
        deleted: tests.iter().filter(|t| t.fate != Fate::Runs).count(),
        slowest: took.last().copied().unwrap_or_default(),
        median: took.get(took.len() / 2).copied().unwrap_or_default(),
        alone: alone.alone,
        memory: operator.memory_mib(),
        cpu_seconds: operator.cpu_seconds(),
        reconciles: operator.reconciles().await,
    }
}

/// The two bounds of [`SERIAL_SHARE`]'s comment.
fn check_not_starved(t: &Planned, figures: &Figures, n: usize) {
    let alone = figures.alone;
    let took = t.took().expect("finished");
    assert!(
        took <= figures.median + alone,
        "{}/{} took {took:.1?}, over a test alone ({alone:.1?}) more than the median ({:.1?}): starved",
        t.ns,
        t.name,
        figures.median
    );
    let serial = alone.mul_f64(n as f64 / SERIAL_SHARE);
    assert!(
        took <= serial.max(alone),
        "{}/{} took {took:.1?}, over {n}/{SERIAL_SHARE} tests alone ({alone:.1?} each)",
        t.ns,
        t.name
    );
}

/// One test alone, with its own operator: the reference duration and the figures at a load
/// of one.
async fn run_alone(cluster: &'static Cluster, client: &kube::Client) -> Figures {
    let ns = cluster.namespace("alone").await;
    let _fleet = FakeFleet::start(client.clone(), &ns, FleetOpts::default()).await;
    let operator = Operator::start(cluster, "alone").await;
    let mut tests = vec![Planned {
        ns: ns.clone(),
        name: "alone".into(),
        connections: 10,
        fate: Fate::Runs,
        created: None,
        uid: None,
        status: LoadTestStatus::default(),
        finished: None,
        deleted: None,
    }];
    tests[0].created = Some(create(client, &ns, "alone", 10).await);
    follow(client, &mut tests, Duration::from_secs(180)).await;
    let t = &tests[0];
    assert_eq!(t.status.phase, Some(Phase::Succeeded), "{:#?}", t.status);
    let took = t.took().expect("finished");
    let memory = operator.memory_mib();
    let cpu_seconds = operator.cpu_seconds();
    let reconciles = operator.reconciles().await;
    drop(operator);
    // Out of the way of the batch's operator, which watches every namespace.
    Api::<LoadTestResource>::namespaced(client.clone(), &ns)
        .delete("alone", &DeleteParams::background())
        .await
        .expect("delete the test alone");
    Figures {
        loadtests: 1,
        namespaces: 1,
        succeeded: 1,
        deleted: 0,
        slowest: took,
        median: took,
        alone: took,
        memory,
        cpu_seconds,
        reconciles,
    }
}

/// Lists every LoadTest each 200 ms until every test is settled: notes when each was first
/// seen finished, and deletes the [`Fate::DeletedRunning`] ones once seen Running.
async fn follow(client: &kube::Client, tests: &mut [Planned], patience: Duration) {
    let all: Api<LoadTestResource> = Api::all(client.clone());
    let started = Instant::now();
    while !tests.iter().all(Planned::settled) {
        let list = all
            .list(&ListParams::default())
            .await
            .expect("list LoadTests");
        let now = Instant::now();
        let by_key: HashMap<(String, String), LoadTestResource> = list
            .items
            .into_iter()
            .map(|lt| ((lt.namespace().unwrap_or_default(), lt.name_any()), lt))
            .collect();
        for t in tests.iter_mut() {
            if t.deleted.is_some() {
                continue;
            }
            let Some(lt) = by_key.get(&t.key()) else {
                continue;
            };
            t.uid = lt.uid();
            t.status = lt.status.clone().unwrap_or_default();
            let phase = t.status.phase;
            if phase.is_some_and(Phase::is_finished) && t.finished.is_none() {
                t.finished = Some(now);
            }
            if t.fate == Fate::DeletedRunning && phase == Some(Phase::Running) {
                delete(client, t).await;
            }
        }
        let waiting: Vec<String> = tests
            .iter()
            .filter(|t| !t.settled())
            .map(|t| format!("{}/{} {:?}", t.ns, t.name, t.status.phase))
            .collect();
        assert!(
            started.elapsed() < patience,
            "not settled within {patience:?}: {waiting:?}"
        );
        assert!(
            !tests
                .iter()
                .any(|t| t.fate == Fate::DeletedRunning && t.finished.is_some()),
            "a test to delete while Running finished before it was seen Running (poll too slow)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn delete(client: &kube::Client, t: &mut Planned) {
    let phase = t.status.phase.unwrap_or(Phase::Pending);
    Api::<LoadTestResource>::namespaced(client.clone(), &t.ns)
        .delete(&t.name, &DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("delete {}/{}: {e}", t.ns, t.name));
    t.deleted = Some((Instant::now(), phase));
    eprintln!("{}/{}: deleted while {}", t.ns, t.name, phase.as_str());
}

/// The cell's connections attempted, summed over the result's cells.
fn attempted(r: &RunResult) -> u64 {
    r.cells.iter().map(|c| c.measure.counts.attempted).sum()
}

/// The test reached its own verdict: Succeeded, passed, both shards collected; what its
/// shards served is what is stored under its name, their sum is what it merged and what its
/// status says, and every result labelled for it is its own.
async fn check_own_results(client: &kube::Client, fleet: &FakeFleet, t: &Planned) {
    let who = format!("{}/{}", t.ns, t.name);
    let st = &t.status;
    assert_eq!(st.phase, Some(Phase::Succeeded), "{who}: {st:#?}");
    assert_eq!(st.verdict, Some(Verdict::Pass), "{who}: {st:#?}");
    assert!(
        st.shards.len() == SHARDS as usize
            && st.shards.iter().all(|s| s.state == ShardState::Collected),
        "{who}: {:?}",
        st.shards
    );
    let own = u64::from(t.connections);
    let cell = st.cells.first().unwrap_or_else(|| panic!("{who}: no cell"));
    assert_eq!(
        (cell.connections, cell.attempted),
        (t.connections, own),
        "{who}"
    );
    let tier = st.tiers.first().unwrap_or_else(|| panic!("{who}: no tier"));
    assert_eq!(tier.connected, own, "{who}: {tier:?}");

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &t.ns);
    let mut served_sum = 0;
    for i in 0..SHARDS {
        let served = fleet
            .served_result(&t.name, i)
            .unwrap_or_else(|| panic!("{who}: shard {i} served no result"));
        let served: RunResult =
            serde_json::from_str(&served).unwrap_or_else(|e| panic!("{who}: shard {i}: {e}"));
        let name = names::shard_result(&t.name, i);
        let cm = config_maps
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("{who}: {name}: {e}"));
        let stored = stored::decode(&support::loadtests::binary(&cm, names::RESULT_KEY))
            .unwrap_or_else(|e| panic!("{who}: {name}: {e}"));
        assert_eq!(stored.test, t.name, "{who}: {name}");
        assert_eq!(
            (stored.shards.clone(), attempted(&stored)),
            (vec![i], attempted(&served)),
            "{who}: {name} is not what shard {i} served"
        );
        served_sum += attempted(&served);
    }
    assert_eq!(served_sum, own, "{who}: its shards served another count");
    let merged_cm = config_maps
        .get(&names::results(&t.name))
        .await
        .unwrap_or_else(|e| panic!("{who}: merged result: {e}"));
    assert!(
        merged_cm
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == t.uid.as_ref()),
        "{who}: the merged result is not this test's: {:?}",
        merged_cm.owner_references()
    );
    let merged = stored::decode(&support::loadtests::binary(&merged_cm, names::MERGED_KEY))
        .unwrap_or_else(|e| panic!("{who}: merged: {e}"));
    assert_eq!(merged.test, t.name, "{who}");
    assert_eq!(merged.shards, (0..SHARDS).collect::<Vec<_>>(), "{who}");
    assert_eq!(attempted(&merged), served_sum, "{who}: merged");
    assert!(
        merged.cells.iter().all(|c| c.connections == t.connections),
        "{who}: merged cells of {:?} connections",
        merged
            .cells
            .iter()
            .map(|c| c.connections)
            .collect::<Vec<_>>()
    );
    // No other test's result under this test's label.
    let labelled = config_maps
        .list(&ListParams::default().labels(&format!("{}={}", names::LABEL_LOADTEST, t.name)))
        .await
        .expect("list ConfigMaps");
    assert_eq!(labelled.items.len(), SHARDS as usize + 1, "{who}");
    for cm in &labelled.items {
        for bytes in
            cm.binary_data.iter().flatten().filter_map(|(k, v)| {
                (k == names::RESULT_KEY || k == names::MERGED_KEY).then_some(&v.0)
            })
        {
            let r = stored::decode(bytes).unwrap_or_else(|e| panic!("{who}: {e}"));
            assert_eq!(r.test, t.name, "{who}: {}", cm.name_any());
            assert!(
                r.cells.iter().all(|c| c.connections == t.connections),
                "{who}: {} holds another test's cells",
                cm.name_any()
            );
        }
    }
}

/// Objects of kind `K` in the test's namespace that are its own: labelled with its name, or
/// owned by its uid.
async fn children<K>(client: &kube::Client, t: &Planned) -> Vec<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), &t.ns);
    let list = api.list(&ListParams::default()).await.expect("list");
    list.items
        .into_iter()
        .filter(|o| {
            o.labels().get(names::LABEL_LOADTEST) == Some(&t.name)
                || o.owner_references()
                    .iter()
                    .any(|r| Some(&r.uid) == t.uid.as_ref())
        })
        .collect()
}

/// A deleted test leaves nothing that outlives it. This control plane runs no
/// kube-controller-manager, so no garbage collector: what a cluster's collector removes
/// (everything whose controller ownerReference names the deleted test) stays here. So the
/// check is: every Pod, Service, ConfigMap and Secret labelled for the test or owned by it is
/// owned by it (its controller reference names its uid, so the collector removes it), and
/// what the operator deletes itself (a finished test's pods, `cleanup: Delete`) is gone.
async fn check_deleted(client: &kube::Client, t: &Planned) {
    let who = format!("{}/{}", t.ns, t.name);
    let uid = t.uid.clone().unwrap_or_else(|| panic!("{who}: never seen"));
    let lts: Api<LoadTestResource> = Api::namespaced(client.clone(), &t.ns);
    assert!(
        lts.get_opt(&t.name).await.expect("get").is_none(),
        "{who} still exists"
    );
    if t.fate == Fate::DeletedFinished {
        // The operator deleted them when the test finished; the fleet then removes each.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let pods: Vec<Pod> = children(client, t).await;
            if pods.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{who}: finished and deleted, its pods remain: {:?}",
                pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let pods: Vec<Pod> = children(client, t).await;
    let services: Vec<Service> = children(client, t).await;
    let config_maps: Vec<ConfigMap> = children(client, t).await;
    let secrets: Vec<Secret> = children(client, t).await;
    // Deleted mid-run, the test may have left its shards, never more.
    assert!(pods.len() <= SHARDS as usize, "{who}: {} pods", pods.len());
    for p in &pods {
        owned_by(&who, &uid, "Pod", p);
    }
    for s in &services {
        owned_by(&who, &uid, "Service", s);
    }
    for c in &config_maps {
        owned_by(&who, &uid, "ConfigMap", c);
    }
    for s in &secrets {
        owned_by(&who, &uid, "Secret", s);
    }
    eprintln!(
        "{who} (deleted while {}): left for the garbage collector {} pods, {} Services, {} ConfigMaps, {} Secrets, all owned by it",
        t.deleted.map_or("?", |(_, p)| p.as_str()),
        pods.len(),
        services.len(),
        config_maps.len(),
        secrets.len()
    );
}

/// `object`'s controller reference names the LoadTest `uid` (its kind and apiVersion too, which
/// the garbage collector resolves the owner by), and no other owner keeps it: a garbage
/// collector removes it.
fn owned_by(who: &str, uid: &str, kind: &str, object: &impl Resource) {
    let refs = object.meta().owner_references.clone().unwrap_or_default();
    let controller = refs.iter().any(|r| {
        r.uid == uid
            && r.controller == Some(true)
            && r.kind == wsload_spec::KIND
            && r.api_version == wsload_spec::API_VERSION
    });
    assert!(
        controller && refs.iter().all(|r| r.uid == uid),
        "{who}: {kind} {} would outlive its test: owners {refs:?}",
        object.meta().name.as_deref().unwrap_or("?")
    );
}
