//! A fake fleet of shard pods, for testing the operator at scale without running `wsload shard`
//! processes: a "virtual kubelet" for the pods labelled `wsload.dev/role=shard` in one
//! namespace, and this one process serving every such pod's shard control endpoint
//! (docs/operator.md, "Shard control protocol") as tokio tasks.
//!
//! Per shard pod it sees (one watch for the whole namespace):
//! - takes a loopback address unique across test processes ([`super::kubelet::next_ip`]),
//!   binds `<ip>:9464` and serves the control protocol there, with the real shard's state
//!   machine and status codes (loadgen-image/src/conduct/control.rs): `start` arms the first cell
//!   (the spec's, `Conductor::first`, read from the pod's [`var::LOADTEST`]), the cell runs for
//!   [`FleetOpts::cell_duration`] from its `startAt`, then the shard is `between` with the
//!   cell's summary; `cell`, `end`, `result`, `finish` as the real one answers them;
//! - reads the test's control token from the Secret the pod mounts (as a kubelet would mount
//!   it) and, as a real shard, answers no control request without it (401);
//! - binds the pod to a node name (no Node object: nothing reads it) and writes its status as
//!   a kubelet would: Running, Ready, its IP; after `POST /control/finish` the container
//!   terminates with exit code 0 and the pod Succeeded, as a real shard exits;
//! - when the pod is deleted, stops serving and removes it (grace period 0).
//!
//! The result a shard serves is a `RunResult` of the cells it ran, shaped like a real one:
//! per cell its share of the connections, ping counts, and histograms filled with log-normal
//! samples (a 5-tier pingLatency shard's result is tens of KB of JSON, as a real one is), so
//! that merging all shards and judging thresholds behaves as with real shards.
//! [`Behaviour`] makes a shard hang (accept connections, never answer), pad its result, take
//! long to connect, run its clock off the host's, or not take measure orders for a while.
//! With [`FleetOpts::rendezvous`] the shards of several wait for one another as real ones do:
//! once its cell's instant came and its connect delay passed, a shard is `connected` on the
//! cell and measures (runs for the cell duration) only from the instant `POST /control/measure`
//! names. Every control request is recorded ([`ShardRecord`]) for assertions on timing.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{EnvVar, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use wsload_contract::env as var;
use wsload_control::endpoint::{self, ShardEndpoint, json};
use wsload_control::protocol::{
    self, CellOrder, ClockReading, ConnectSummary, MeasureOrder, Phase, StartRequest, State,
};
use wsload_control::{CellKey, CellSummary, Conductor, Token};
use wsload_http::prometheus_client::metrics::gauge::Gauge;
use wsload_http::prometheus_client::registry::Registry;
use wsload_http::{Exposition, Reply, Request};
use wsload_report::{CellResult, Hist, Measure, Part, RunResult, ShardInfo};
use wsload_spec::shares::count_share;
use wsload_spec::{LoadTest, Scenario};

use super::cluster::scratch_dir;
use super::kubelet::next_ip;

/// The shard pods' label (`wsload.dev/role=shard`), as the operator sets it.
const SHARD_SELECTOR: &str = "wsload.dev/role=shard";
const LABEL_LOADTEST: &str = "wsload.dev/loadtest";
/// The port every shard serves its control endpoint on (`names::SHARD_PORT`).
const SHARD_PORT: u16 = wsload_operator::names::SHARD_PORT;
/// The histograms' upper bound (wsload_report::hist): 1 h in microseconds.
const MAX_MICROS: u64 = 3_600_000_000;
/// At most this many distinct draws per histogram; more samples repeat them.
const MAX_DRAWS: u64 = 4_000;

/// What a shard does differently from a well-behaved one.
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    /// Accepts connections on its control port and never answers: the unreachable shard
    /// (its pod is Ready all the same).
    pub hang: bool,
    /// Grows the result by about this many bytes once compressed (gzip), with histograms of
    /// random counts over their whole range in the cells' `tcp`, `upgrade` and `ready`
    /// histograms, which no threshold judges. Histograms merge by value, so N padded shards
    /// merge into about one padded result, not N (at most ~1.3 MiB can be added).
    pub padding_bytes: usize,
    /// With [`FleetOpts::rendezvous`]: how long it takes to open its share of each cell,
    /// from the cell's instant, before it says it is `connected`.
    pub connect_delay: Duration,
    /// Its wall clock minus the host's, ms: what `GET /control/clock` reads, the clock it
    /// waits for its instants by and stamps its cells with (a node whose clock is off).
    pub clock_offset_ms: i64,
    /// While this holds true, `POST /control/measure` is answered 503 and not acted on (as
    /// if the answer were lost); recorded all the same.
    pub hold_measure: Option<Arc<AtomicBool>>,
}

/// How a [`FakeFleet`] runs its shards.
#[derive(Debug, Clone)]
pub struct FleetOpts {
    /// How long each cell runs from its `startAt` (default 1 s).
    pub cell_duration: Duration,
    /// Behaviour of shard `index` (of any test in the namespace); the others behave.
    pub behaviours: BTreeMap<u32, Behaviour>,
    /// Most API requests (bindings, status patches, deletions) in flight at once (default 24).
    pub api_concurrency: usize,
    /// Shards of several (of a test other than a fanout) say they are `connected` on each
    /// cell and wait for `POST /control/measure`, as real ones do. Off by default: each
    /// measures from its cell's instant, and the operator has nothing to tell it.
    pub rendezvous: bool,
}

impl Default for FleetOpts {
    fn default() -> Self {
        FleetOpts {
            cell_duration: Duration::from_secs(1),
            behaviours: BTreeMap::new(),
            api_concurrency: 24,
            rendezvous: false,
        }
    }
}

/// One control request as a shard received it.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// Wall clock when it arrived, Unix microseconds.
    pub unix_micros: u64,
    pub at: Instant,
    /// The `startAt` it carried (Unix ms, the shard's clock).
    pub start_at: u64,
    /// The `conductorAt` it carried: the same instant on the conductor's clock.
    pub conductor_at: Option<u64>,
    /// The cell it named (`start` without one: `None`).
    pub cell: Option<u32>,
    /// What the shard answered (0: a hanging shard never does).
    pub status: u16,
}

/// What happened to one shard, for assertions.
#[derive(Debug, Clone)]
pub struct ShardRecord {
    pub test: String,
    pub index: u32,
    pub pod: String,
    pub ip: String,
    pub hang: bool,
    /// When the fleet first saw the pod, and when it reported it Ready.
    pub seen_at: Instant,
    pub ready_at: Option<Instant>,
    /// Every `POST /control/start` and `POST /control/cell`, retries included, in order.
    pub starts: Vec<Arrival>,
    pub cells: Vec<Arrival>,
    /// Every `POST /control/measure`, retries and held ones included, in order.
    pub measures: Vec<Arrival>,
    /// When it said it was `connected` on each cell, by cell index.
    pub connected_at: BTreeMap<u32, Instant>,
    /// Cells it ran to the end.
    pub cells_run: u32,
    /// `POST /control/end` accepted; the result built (`done`); `POST /control/finish` answered.
    pub ended: bool,
    pub done: bool,
    pub finished: bool,
    /// The result's JSON size, and what `GET /control/result` served in all (retries add up).
    pub result_bytes: usize,
    pub results_served: u32,
    pub bytes_served: u64,
    /// The pod was deleted.
    pub gone: bool,
}

impl ShardRecord {
    /// The first start request's arrival.
    pub fn first_start(&self) -> Option<&Arrival> {
        self.starts.first()
    }
}

/// The fleet: a watch on the namespace's shard pods and the endpoints it serves. Stops (every
/// endpoint closed) when dropped or [`FakeFleet::stop`]ped; the pods stay in the API.
pub struct FakeFleet {
    shared: Arc<FleetState>,
    watch: JoinHandle<()>,
}

/// What the fleet's watch and every fake shard share: the pods' API and the slots limiting
/// calls to it, every shard served and the log.
struct FleetState {
    pods: Api<Pod>,
    /// Read for the control token a shard pod mounts.
    secrets: Api<Secret>,
    namespace: String,
    opts: FleetOpts,
    api_slots: Semaphore,
    /// Results and cells being made up at once: a burst of 1000 would starve the timers
    /// that start the cells.
    work_slots: Semaphore,
    /// Every shard served, by pod uid; kept after the pod is gone, for its record.
    shards: Mutex<HashMap<String, Arc<FakeShard>>>,
    log: Mutex<std::fs::File>,
    log_path: std::path::PathBuf,
    started: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn now() -> Time {
    Time(Timestamp::now())
}

impl FakeFleet {
    /// Starts serving the shard pods of `namespace`, and returns once the watch has listed
    /// what is there already.
    pub async fn start(client: kube::Client, namespace: &str, opts: FleetOpts) -> FakeFleet {
        let log_path = scratch_dir().join(format!("fleet-{namespace}.log"));
        let log = std::fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", log_path.display()));
        let shared = Arc::new(FleetState {
            pods: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            api_slots: Semaphore::new(opts.api_concurrency.max(1)),
            work_slots: Semaphore::new(2),
            opts,
            shards: Mutex::new(HashMap::new()),
            log: Mutex::new(log),
            log_path,
            started: Instant::now(),
        });
        let (synced_tx, synced_rx) = oneshot::channel();
        let watch = tokio::spawn(watch_loop(shared.clone(), synced_tx));
        let _ = tokio::time::timeout(Duration::from_secs(60), synced_rx).await;
        FakeFleet { shared, watch }
    }

    pub fn namespace(&self) -> &str {
        &self.shared.namespace
    }

    /// The fleet's log: every pod adopted, bound, deleted, and every API failure.
    pub fn log_path(&self) -> &std::path::Path {
        &self.shared.log_path
    }

    /// Every shard served so far, by test and index.
    pub fn records(&self) -> Vec<ShardRecord> {
        let shards: Vec<Arc<FakeShard>> = lock(&self.shared.shards).values().cloned().collect();
        let mut records: Vec<ShardRecord> = shards.iter().map(|s| s.record()).collect();
        records.sort_by(|a, b| (&a.test, a.index, a.seen_at).cmp(&(&b.test, b.index, b.seen_at)));
        records
    }

    /// The shards of LoadTest `test`, by index.
    pub fn test_records(&self, test: &str) -> Vec<ShardRecord> {
        self.records()
            .into_iter()
            .filter(|r| r.test == test)
            .collect()
    }

    /// Shard `index` of `test` (the latest pod of that name if there were several).
    pub fn record(&self, test: &str, index: u32) -> Option<ShardRecord> {
        self.test_records(test)
            .into_iter()
            .rev()
            .find(|r| r.index == index)
    }

    /// The result (JSON) shard `index` of `test` serves, once it has built it.
    pub fn served_result(&self, test: &str, index: u32) -> Option<Arc<str>> {
        let shards: Vec<Arc<FakeShard>> = lock(&self.shared.shards).values().cloned().collect();
        shards
            .iter()
            .filter(|s| s.test == test && s.index == index)
            .find_map(|s| s.lock().result.clone())
    }

    /// Stops the watch and closes every endpoint. The pods stay as they are in the API.
    pub fn stop(&self) {
        self.watch.abort();
        let shards: Vec<Arc<FakeShard>> = lock(&self.shared.shards).values().cloned().collect();
        for s in shards {
            s.stop_serving();
        }
    }
}

impl Drop for FakeFleet {
    fn drop(&mut self) {
        self.stop();
    }
}

impl FleetState {
    fn log(&self, msg: impl AsRef<str>) {
        let t = self.started.elapsed().as_secs_f64();
        let _ = writeln!(lock(&self.log), "{t:9.3} {}", msg.as_ref());
    }
}

// --- the pods ---------------------------------------------------------------------------------

async fn watch_loop(shared: Arc<FleetState>, synced: oneshot::Sender<()>) {
    let config = watcher::Config::default().labels(SHARD_SELECTOR);
    let stream = watcher(shared.pods.clone(), config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut synced = Some(synced);
    // Pods adopted (by uid) and pods whose deletion is being finished.
    let mut adopted: HashSet<String> = HashSet::new();
    let mut deleting: HashSet<String> = HashSet::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if pod.metadata.deletion_timestamp.is_some() {
                    if deleting.insert(uid.clone()) {
                        if let Some(s) = lock(&shared.shards).get(&uid) {
                            s.pod_gone();
                        }
                        tokio::spawn(final_delete(shared.clone(), pod));
                    }
                } else if !is_terminal(&pod) && adopted.insert(uid) {
                    tokio::spawn(adopt(shared.clone(), pod));
                }
            }
            Ok(watcher::Event::Delete(pod)) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(s) = lock(&shared.shards).get(&uid) {
                    s.pod_gone();
                }
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(s) = synced.take() {
                    let _ = s.send(());
                }
            }
            Ok(watcher::Event::Init) => {}
            Err(e) => shared.log(format!("watch error (retrying): {e}")),
        }
    }
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn env_value<'a>(env: &'a [EnvVar], name: &str) -> Option<&'a str> {
    env.iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.as_deref())
}

/// The control token in the file `env` names, read from the Secret the pod mounts there, as
/// the kubelet would have written it.
async fn mounted_token(shared: &FleetState, pod: &Pod, env: &[EnvVar]) -> Result<Token, String> {
    let file = env_value(env, var::CONTROL_TOKEN_FILE)
        .ok_or_else(|| format!("{} is not set", var::CONTROL_TOKEN_FILE))?;
    let (dir, key) = file
        .rsplit_once('/')
        .ok_or_else(|| format!("{file}: not a path"))?;
    let spec = pod.spec.as_ref().ok_or("no spec")?;
    let mount = spec
        .containers
        .first()
        .and_then(|c| c.volume_mounts.as_ref())
        .and_then(|ms| ms.iter().find(|m| m.mount_path == dir))
        .ok_or_else(|| format!("nothing is mounted at {dir}"))?;
    let secret = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .and_then(|v| v.secret.as_ref()?.secret_name.clone())
        .ok_or_else(|| format!("volume {} is no Secret", mount.name))?;
    let data = shared
        .secrets
        .get(&secret)
        .await
        .map_err(|e| format!("secret {secret}: {e}"))?
        .data
        .unwrap_or_default();
    let bytes = data
        .get(key)
        .ok_or_else(|| format!("secret {secret} has no key {key}"))?;
    Token::new(&String::from_utf8_lossy(&bytes.0)).map_err(|e| e.to_string())
}

/// Makes a new shard pod a served, Ready shard.
async fn adopt(shared: Arc<FleetState>, pod: Pod) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let Some(container) = pod.spec.as_ref().and_then(|s| s.containers.first()) else {
        shared.log(format!("pod {name}: no container; ignored"));
        return;
    };
    let env = container.env.clone().unwrap_or_default();
    let index: u32 = env_value(&env, var::SHARD_INDEX)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let count: u32 = env_value(&env, var::SHARD_COUNT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let lt = env_value(&env, var::LOADTEST)
        .ok_or_else(|| format!("{} is not set", var::LOADTEST))
        .and_then(|doc| {
            LoadTest::from_yaml(doc, &format!("${}", var::LOADTEST)).map_err(|e| e.to_string())
        });
    let target = env_value(&env, var::TARGET_URL)
        .unwrap_or_default()
        .to_string();
    let test = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_LOADTEST).cloned())
        .unwrap_or_default();
    let behaviour = shared
        .opts
        .behaviours
        .get(&index)
        .cloned()
        .unwrap_or_default();
    let token = match mounted_token(&shared, &pod, &env).await {
        Ok(t) => t,
        Err(e) => {
            // As a kubelet whose volume cannot be mounted: the container never starts.
            shared.log(format!(
                "pod {name}: control token not mounted: {e}; left Pending"
            ));
            return;
        }
    };

    let _slot = shared.api_slots.acquire().await;
    let mut bound = None;
    for _ in 0..8 {
        let ip = next_ip();
        match TcpListener::bind((ip.as_str(), SHARD_PORT)).await {
            Ok(l) => {
                bound = Some((ip, l));
                break;
            }
            Err(e) => shared.log(format!("pod {name}: cannot bind {ip}:{SHARD_PORT}: {e}")),
        }
    }
    let Some((ip, listener)) = bound else {
        shared.log(format!("pod {name}: no address to serve on; left Pending"));
        return;
    };
    let fanout = lt
        .as_ref()
        .is_ok_and(|lt| lt.spec.scenario == Scenario::Fanout);
    let mut state = State::default();
    if let Err(e) = &lt {
        // As a real shard whose spec does not load: failed, not ready.
        state.state = Phase::Failed;
        state.error = Some(e.clone());
    }
    let shard = Arc::new(FakeShard {
        fleet: Arc::downgrade(&shared),
        ready: lt.is_ok(),
        lt: lt.ok(),
        test: test.clone(),
        index,
        count,
        pod: name.clone(),
        uid: uid.clone(),
        container: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        ip: ip.clone(),
        target,
        behaviour: behaviour.clone(),
        token,
        cell_duration: shared.opts.cell_duration,
        rendezvous: shared.opts.rendezvous && count > 1 && !fanout,
        measure_orders: watch::channel(None).0,
        inner: Mutex::new(Inner {
            state,
            started: None,
            last_order: None,
            last_measure: None,
            ended_cells: false,
            cells: Vec::new(),
            result: None,
            finished: false,
            gone: false,
            record: ShardRecord {
                test,
                index,
                pod: name.clone(),
                ip: ip.clone(),
                hang: behaviour.hang,
                seen_at: Instant::now(),
                ready_at: None,
                starts: Vec::new(),
                cells: Vec::new(),
                measures: Vec::new(),
                connected_at: BTreeMap::new(),
                cells_run: 0,
                ended: false,
                done: false,
                finished: false,
                result_bytes: 0,
                results_served: 0,
                bytes_served: 0,
                gone: false,
            },
        }),
        server: Mutex::new(None),
    });
    let server = if behaviour.hang {
        tokio::spawn(hang(listener, shard.clone()))
    } else {
        tokio::spawn(wsload_http::serve(
            listener,
            Arc::new(Endpoint(shard.clone())),
        ))
    };
    *lock(&shard.server) = Some(server);
    lock(&shared.shards).insert(uid.clone(), shard.clone());
    shared.log(format!(
        "pod {name} (shard {index}/{count}) served at {ip}:{SHARD_PORT}{}",
        if behaviour.hang { " (hangs)" } else { "" }
    ));

    let scheduled = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
    if scheduled.is_none() {
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name(&shared.namespace)},
        });
        let bound: Result<Value, _> = shared
            .pods
            .create_subresource("binding", &name, &PostParams::default(), &binding)
            .await;
        if let Err(e) = bound {
            shared.log(format!("binding pod {name} failed: {e}"));
            return;
        }
    }
    if shard.patch_status(&shared, shard.running_status()).await {
        lock(&shard.inner).record.ready_at = Some(Instant::now());
    }
}

fn node_name(namespace: &str) -> String {
    format!("{namespace}-fleet")
}

/// What a kubelet does last for a deleted pod: removes it for good.
async fn final_delete(shared: Arc<FleetState>, pod: Pod) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let _slot = shared.api_slots.acquire().await;
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    // 404 and 409 (a newer pod of the same name) both mean there is nothing left to do.
    match shared.pods.delete(&name, &params).await {
        Ok(_) => shared.log(format!("pod {name} deleted")),
        Err(e) => shared.log(format!("pod {name}: final delete: {e}")),
    }
}

/// A shard that accepts connections and never answers. It reads what arrives, so that the
/// records say what was asked of it.
async fn hang(listener: TcpListener, shard: Arc<FakeShard>) {
    let mut held = JoinSet::new();
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shard = shard.clone();
        held.spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut n = 0;
            while n < buf.len() {
                match stream.read(&mut buf[n..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(read) => n += read,
                }
                let text = String::from_utf8_lossy(&buf[..n]);
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if body.len() >= length {
                        shard.heard_while_hanging(head, body.as_bytes());
                        break;
                    }
                }
            }
            // Never answered: held open until the fleet stops.
            std::future::pending::<()>().await;
            drop(stream);
        });
        // Reap whatever ended (nothing does: they are pending), keeping the set bounded.
        while held.try_join_next().is_some() {}
    }
}

// --- one shard ----------------------------------------------------------------------------------

struct FakeShard {
    fleet: Weak<FleetState>,
    /// The spec loaded (as a real shard's `/readyz`).
    ready: bool,
    lt: Option<LoadTest>,
    test: String,
    index: u32,
    count: u32,
    pod: String,
    uid: String,
    container: String,
    image: String,
    ip: String,
    target: String,
    behaviour: Behaviour,
    /// The test's control token, required of every control request.
    token: Token,
    cell_duration: Duration,
    /// Waits for the measure order of each cell ([`FleetOpts::rendezvous`]).
    rendezvous: bool,
    /// The last measure order taken, for the cell waiting for it.
    measure_orders: watch::Sender<Option<MeasureOrder>>,
    inner: Mutex<Inner>,
    server: Mutex<Option<JoinHandle<()>>>,
}

/// One cell a shard ran, kept as it will be served: its JSON (a few KB) and when it began.
/// Decoded, a `CellResult` holds seven histograms spanning 1 us to 1 h, ~190 KB each whatever
/// they count: N shards keeping every cell decoded held N x cells x 1.3 MB, 33 GB for 5,000
/// shards of 5 cells (issue 27), where real shards hold one each.
struct RanCell {
    /// The cell without its start instants, which are known only once it began.
    json: Box<str>,
    started_micros: u64,
}

/// A cell made up ahead of its instant, encoded, with the counts its summary reports.
struct MadeCell {
    json: Box<str>,
    attempted: u64,
    connected: u64,
    failed: u64,
    sent_with_warmup: u64,
}

impl MadeCell {
    fn encode(cell: &CellResult) -> serde_json::Result<MadeCell> {
        let c = &cell.measure.counts;
        Ok(MadeCell {
            json: serde_json::to_string(cell)?.into_boxed_str(),
            attempted: c.attempted,
            connected: c.connected,
            failed: c.failed_total() + c.dropped_total(),
            sent_with_warmup: c.sent_with_warmup,
        })
    }
}

impl RanCell {
    fn decode(&self) -> serde_json::Result<CellResult> {
        let mut cell: CellResult = serde_json::from_str(&self.json)?;
        cell.started_first_micros = self.started_micros;
        cell.started_last_micros = self.started_micros;
        Ok(cell)
    }
}

struct Inner {
    state: State,
    /// The start request and the last cell order accepted: a retry of either is answered
    /// alike, anything else is a conflict (as the real shard).
    started: Option<StartRequest>,
    last_order: Option<CellOrder>,
    /// The measure order taken for the cell it connected last (endpoint::admit_measure).
    last_measure: Option<MeasureOrder>,
    ended_cells: bool,
    /// The cells run so far, encoded until the result is built (then taken).
    cells: Vec<RanCell>,
    result: Option<Arc<str>>,
    /// `POST /control/finish` answered: the process would have exited.
    finished: bool,
    /// The pod was deleted: the process would have been killed.
    gone: bool,
    record: ShardRecord,
}

impl FakeShard {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    fn record(&self) -> ShardRecord {
        self.lock().record.clone()
    }

    fn state(&self) -> State {
        self.lock().state.clone()
    }

    fn arrival(start_at: u64, cell: Option<u32>, status: u16) -> Arrival {
        Arrival {
            unix_micros: unix_micros(),
            at: Instant::now(),
            start_at,
            conductor_at: None,
            cell,
            status,
        }
    }

    /// Its wall clock, Unix microseconds: the host's moved by its offset.
    fn clock_micros(&self) -> u64 {
        let offset = self.behaviour.clock_offset_ms.saturating_mul(1000);
        unix_micros().saturating_add_signed(offset)
    }

    /// Arms the next cell at `start_at`, saying so when the instant has passed.
    fn arm(&self, inner: &mut Inner, start_at: u64) {
        inner.state.arm(start_at, self.clock_micros() / 1000);
    }

    /// `POST /control/start`.
    fn start(self: &Arc<Self>, body: &[u8]) -> Reply {
        let request = match endpoint::parse_start(body) {
            Ok(r) => r,
            Err(reply) => return reply,
        };
        let mut inner = self.lock();
        let mut arrival =
            Self::arrival(request.start_at, request.cell.as_ref().map(|c| c.index), 0);
        let admit = endpoint::admit_start(inner.started.as_ref(), inner.state.state, &request);
        let reply = match admit.settled(&inner.state) {
            Some(reply) => reply,
            None => {
                self.arm(&mut inner, request.start_at);
                inner.started = Some(request.clone());
                let first = request
                    .cell
                    .clone()
                    .or_else(|| self.lt.as_ref().and_then(|lt| Conductor::first(&lt.spec)));
                match first {
                    Some(key) => {
                        tokio::spawn(self.clone().run_cell(request.start_at, key));
                    }
                    // No cell at all: the run is over before it began.
                    None => {
                        inner.ended_cells = true;
                        tokio::spawn(self.clone().conclude());
                    }
                }
                json(202, &inner.state)
            }
        };
        arrival.status = reply.status;
        inner.record.starts.push(arrival);
        reply
    }

    /// `POST /control/cell`.
    fn cell(self: &Arc<Self>, body: &[u8]) -> Reply {
        let request = match endpoint::parse_cell(body) {
            Ok(r) => r,
            Err(reply) => return reply,
        };
        let mut inner = self.lock();
        let mut arrival = Self::arrival(request.start_at, Some(request.cell.index), 0);
        let admit = endpoint::admit_cell(
            inner.last_order.as_ref(),
            &inner.state,
            inner.ended_cells,
            &request,
        );
        let reply = match admit.settled(&inner.state) {
            Some(reply) => reply,
            None => {
                self.arm(&mut inner, request.start_at);
                inner.last_order = Some(request.clone());
                tokio::spawn(
                    self.clone()
                        .run_cell(request.start_at, request.cell.clone()),
                );
                json(202, &inner.state)
            }
        };
        arrival.status = reply.status;
        inner.record.cells.push(arrival);
        reply
    }

    /// `POST /control/measure`: to a shard `connected` on the cell, as the real one admits it.
    fn measure(&self, body: &[u8]) -> Reply {
        let request = match endpoint::parse_measure(body) {
            Ok(r) => r,
            Err(reply) => return reply,
        };
        let mut inner = self.lock();
        let mut arrival = Self::arrival(request.start_at, Some(request.cell), 0);
        arrival.conductor_at = request.conductor_at;
        let held = self
            .behaviour
            .hold_measure
            .as_ref()
            .is_some_and(|h| h.load(Ordering::SeqCst));
        let admit = endpoint::admit_measure(inner.last_measure.as_ref(), &inner.state, &request);
        let reply = if held {
            Reply::text(503, "measure orders held by the test\n".to_string())
        } else {
            match admit.settled(&inner.state) {
                Some(reply) => reply,
                None => {
                    inner.last_measure = Some(request);
                    inner.state.state = Phase::Running;
                    if let Some(c) = inner.state.connected.as_mut() {
                        c.measure_at = Some(request.start_at);
                    }
                    self.measure_orders.send_replace(Some(request));
                    json(202, &inner.state)
                }
            }
        };
        arrival.status = reply.status;
        inner.record.measures.push(arrival);
        reply
    }

    /// `POST /control/end`.
    fn end(self: &Arc<Self>) -> Reply {
        let mut inner = self.lock();
        if let Some(reply) =
            endpoint::admit_end(inner.ended_cells, inner.state.state).settled(&inner.state)
        {
            return reply;
        }
        inner.ended_cells = true;
        inner.record.ended = true;
        tokio::spawn(self.clone().conclude());
        json(202, &inner.state)
    }

    /// `GET /control/result`.
    fn result(&self) -> Reply {
        let mut inner = self.lock();
        match inner.result.clone() {
            Some(r) => {
                inner.record.results_served += 1;
                inner.record.bytes_served += r.len() as u64;
                Reply::json(200, r.to_string())
            }
            None => json(409, &inner.state),
        }
    }

    /// After the answer to `POST /control/finish`: the process exits 0.
    fn finish(self: &Arc<Self>) {
        {
            let mut inner = self.lock();
            if inner.finished {
                return;
            }
            inner.finished = true;
            inner.record.finished = true;
        }
        self.stop_serving();
        let Some(fleet) = self.fleet.upgrade() else {
            return;
        };
        let shard = self.clone();
        tokio::spawn(async move {
            let _slot = fleet.api_slots.acquire().await;
            shard.patch_status(&fleet, shard.exited_status()).await;
        });
    }

    /// What a hanging shard was sent (it never answers).
    fn heard_while_hanging(&self, head: &str, body: &[u8]) {
        let mut words = head.split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let mut inner = self.lock();
        match (method, path) {
            ("POST", protocol::START) => {
                if let Ok(r) = serde_json::from_slice::<StartRequest>(body) {
                    let a = Self::arrival(r.start_at, r.cell.map(|c| c.index), 0);
                    inner.record.starts.push(a);
                }
            }
            ("POST", protocol::CELL) => {
                if let Ok(r) = serde_json::from_slice::<CellOrder>(body) {
                    let a = Self::arrival(r.start_at, Some(r.cell.index), 0);
                    inner.record.cells.push(a);
                }
            }
            ("POST", protocol::MEASURE) => {
                if let Ok(r) = serde_json::from_slice::<MeasureOrder>(body) {
                    let mut a = Self::arrival(r.start_at, Some(r.cell), 0);
                    a.conductor_at = r.conductor_at;
                    inner.record.measures.push(a);
                }
            }
            _ => {}
        }
    }

    fn pod_gone(&self) {
        {
            let mut inner = self.lock();
            inner.gone = true;
            inner.record.gone = true;
        }
        self.stop_serving();
    }

    fn stop_serving(&self) {
        if let Some(server) = lock(&self.server).take() {
            server.abort();
        }
    }

    /// Runs one cell: its measurements are made up while it is armed (a few at a time over
    /// the fleet, so that no burst of work competes with the start instant), then it waits
    /// for its instant, (with [`FleetOpts::rendezvous`]) connects and waits for the measure
    /// instant, "runs" for the cell duration, and is `between` with the cell's summary.
    async fn run_cell(self: Arc<Self>, start_at: u64, key: CellKey) {
        let Some(lt) = self.lt.clone() else {
            return;
        };
        let Some(fleet) = self.fleet.upgrade() else {
            return;
        };
        let (index, count, duration) = (self.index, self.count, self.cell_duration);
        let cell_key = key.clone();
        // Encoded as soon as made: N shards hold a made cell each until their instant.
        let build = tokio::spawn(async move {
            let _slot = fleet.work_slots.acquire().await;
            tokio::task::spawn_blocking(move || {
                MadeCell::encode(&synth_cell(&lt, &cell_key, index, count, duration))
            })
            .await
        });
        self.sleep_until(start_at).await;
        let began = self.clock_micros();
        {
            let mut inner = self.lock();
            if inner.finished || inner.gone {
                return;
            }
            inner.state.state = Phase::Running;
            inner.state.started_at_micros.get_or_insert(began);
        }
        let started = if self.rendezvous {
            match self.connect_and_wait(&key).await {
                Some(at) => at,
                None => return,
            }
        } else {
            began
        };
        tokio::time::sleep(self.cell_duration).await;
        let made = match build.await {
            Ok(Ok(Ok(made))) => made,
            Ok(Ok(Err(e))) => {
                let mut inner = self.lock();
                inner.state.state = Phase::Failed;
                inner.state.error = Some(format!("cannot encode cell {}: {e}", key.index));
                return;
            }
            _ => return,
        };
        let summary = CellSummary {
            index: key.index,
            attempted: made.attempted,
            connected: made.connected,
            failed: made.failed,
            sent_with_warmup: made.sent_with_warmup,
            started_at_micros: started,
            finished_at_micros: self.clock_micros(),
        };
        let mut inner = self.lock();
        if inner.finished || inner.gone {
            return;
        }
        inner.cells.push(RanCell {
            json: made.json,
            started_micros: started,
        });
        inner.state.state = Phase::Between;
        inner.state.cells_done = key.index + 1;
        inner.state.last_cell = Some(summary);
        inner.state.start_at = None;
        inner.record.cells_run += 1;
    }

    /// Until its clock reads `at` (Unix ms).
    async fn sleep_until(&self, at: u64) {
        let wait = at.saturating_mul(1000).saturating_sub(self.clock_micros());
        tokio::time::sleep(Duration::from_micros(wait)).await;
    }

    /// Opens its share of cell `key` (its connect delay), says it is `connected` and waits for
    /// the measure order; then for the instant it names. That instant on its clock, in µs;
    /// `None` once the process would be gone.
    async fn connect_and_wait(&self, key: &CellKey) -> Option<u64> {
        tokio::time::sleep(self.behaviour.connect_delay).await;
        // Subscribed before it says it is connected: no order can come in between unseen.
        let mut orders = self.measure_orders.subscribe();
        {
            let mut inner = self.lock();
            if inner.finished || inner.gone {
                return None;
            }
            inner.state.state = Phase::Connected;
            inner.state.connected = Some(ConnectSummary {
                index: key.index,
                opened: u64::from(count_share(key.connections, self.index, self.count.max(1))),
                failed: 0,
                measure_at: None,
            });
            inner.record.connected_at.insert(key.index, Instant::now());
        }
        let order = {
            let taken = orders
                .wait_for(|o| o.is_some_and(|o| o.cell == key.index))
                .await
                .ok()?;
            (*taken)?
        };
        self.sleep_until(order.start_at).await;
        Some(self.clock_micros())
    }

    /// After the last cell: the result, as the real shard builds it, then `done`.
    async fn conclude(self: Arc<Self>) {
        let (cells, note, started) = {
            let mut inner = self.lock();
            (
                std::mem::take(&mut inner.cells),
                inner.state.note.clone(),
                inner.state.started_at_micros,
            )
        };
        let Some(lt) = self.lt.clone() else {
            return;
        };
        let Some(fleet) = self.fleet.upgrade() else {
            return;
        };
        let _slot = fleet.work_slots.acquire().await;
        let this = self.clone();
        let built = tokio::task::spawn_blocking(move || {
            let finished = this.clock_micros();
            let result = this.build_result(&lt, &cells, note, started, finished)?;
            let json = serde_json::to_string(&result)?;
            let started = result.shard_info.first().map(|i| i.started_at_micros);
            Ok::<_, serde_json::Error>((json, started, finished))
        })
        .await;
        let Ok(built) = built else {
            return;
        };
        let mut inner = self.lock();
        match built {
            Ok((json, started, finished)) => {
                inner.state.started_at_micros = started.or(inner.state.started_at_micros);
                inner.state.finished_at_micros = Some(finished);
                inner.record.result_bytes = json.len();
                inner.record.done = true;
                inner.result = Some(Arc::from(json));
                inner.state.state = Phase::Done;
            }
            Err(e) => {
                inner.state.state = Phase::Failed;
                inner.state.error = Some(format!("cannot build the result: {e}"));
            }
        }
    }

    fn build_result(
        &self,
        lt: &LoadTest,
        cells: &[RanCell],
        note: Option<String>,
        started: Option<u64>,
        finished: u64,
    ) -> serde_json::Result<RunResult> {
        let spec = &lt.spec;
        let mut cells = cells
            .iter()
            .map(RanCell::decode)
            .collect::<serde_json::Result<Vec<_>>>()?;
        if self.behaviour.padding_bytes > 0 {
            let mut rng = Rng::new(&self.test, self.index, u32::MAX);
            pad(&mut cells, self.behaviour.padding_bytes, &mut rng);
        }
        let started = cells
            .first()
            .map(|c| c.started_first_micros)
            .or(started)
            .unwrap_or(finished);
        let part = Part {
            index: self.index,
            count: self.count,
        };
        let mut result = RunResult::begun(lt.name(), spec, &self.target, part, started / 1000);
        result.cells = cells;
        result.notes.extend(note);
        result.shard_info.push(ShardInfo {
            index: self.index,
            started_at_micros: started,
            finished_at_micros: finished,
            error: None,
            clock: None,
        });
        result.judge();
        Ok(result)
    }

    /// Patches the pod's status; false (and logged) when the API refused.
    async fn patch_status(&self, fleet: &FleetState, body: Value) -> bool {
        match fleet
            .pods
            .patch_status(&self.pod, &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                fleet.log(format!("pod {}: status patch failed: {e}", self.pod));
                false
            }
        }
    }

    fn conditions(ready: bool, completed: bool, t: &Time) -> Value {
        let c = |type_: &str, status: bool| {
            let mut c = json!({
                "type": type_, "status": if status { "True" } else { "False" },
                "lastTransitionTime": t,
            });
            if !status {
                c["reason"] = json!(if completed {
                    "PodCompleted"
                } else {
                    "ContainersNotReady"
                });
            }
            c
        };
        json!([
            c("PodScheduled", true),
            c("Initialized", true),
            c("ContainersReady", ready),
            c("Ready", ready),
        ])
    }

    /// Running and Ready at its address (not ready when its spec did not load).
    fn running_status(&self) -> Value {
        let t = now();
        json!({
            // A precondition: a newer pod of the same name must not get this one's status.
            "metadata": {"uid": self.uid},
            "status": {
                "phase": "Running",
                "conditions": Self::conditions(self.ready, false, &t),
                "hostIP": self.ip, "hostIPs": [{"ip": self.ip}],
                "podIP": self.ip, "podIPs": [{"ip": self.ip}],
                "startTime": t,
                "containerStatuses": [{
                    "name": self.container, "image": self.image, "imageID": "",
                    "containerID": format!("fake://{}", self.uid),
                    "ready": self.ready, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": t}},
                }],
            },
        })
    }

    /// The container exited 0 (after `POST /control/finish`): the pod Succeeded.
    fn exited_status(&self) -> Value {
        let t = now();
        json!({
            "metadata": {"uid": self.uid},
            "status": {
                "phase": "Succeeded",
                "conditions": Self::conditions(false, true, &t),
                "containerStatuses": [{
                    "name": self.container, "image": self.image, "imageID": "",
                    "containerID": format!("fake://{}", self.uid),
                    "ready": false, "started": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                        "startedAt": t, "finishedAt": t}},
                }],
            },
        })
    }
}

/// The control endpoint of one shard.
struct Endpoint(Arc<FakeShard>);

impl Exposition for Endpoint {
    fn render(&self) -> String {
        // Encoded as the real shard's registry is (OpenMetrics, by prometheus-client), so
        // anything scraping a fake shard reads what it would read from a real one.
        let cells_done = Gauge::<i64>::default();
        cells_done.set(i64::from(self.0.state().cells_done));
        let shard = (Cow::Borrowed("shard"), Cow::Owned(self.0.index.to_string()));
        let mut registry = Registry::with_labels(std::iter::once(shard));
        registry.register(
            "wsload_fake_shard_cells_done",
            "Cells this fake shard has finished",
            cells_done,
        );
        wsload_http::encode(&registry)
    }

    fn ready(&self) -> bool {
        self.0.ready
    }

    fn handle(&self, request: &Request<'_>) -> Option<Reply> {
        endpoint::route(self, request)
    }

    fn answered(&self, request: &Request<'_>) {
        if endpoint::is_finish(self, request) {
            self.0.finish();
        }
    }
}

impl ShardEndpoint for Endpoint {
    fn token(&self) -> &Token {
        &self.0.token
    }

    fn state(&self) -> State {
        self.0.state()
    }

    fn start(&self, body: &[u8]) -> Reply {
        self.0.start(body)
    }

    fn cell(&self, body: &[u8]) -> Reply {
        self.0.cell(body)
    }

    fn measure(&self, body: &[u8]) -> Reply {
        self.0.measure(body)
    }

    fn end(&self) -> Reply {
        self.0.end()
    }

    fn result(&self) -> Reply {
        self.0.result()
    }

    /// The host's clock, which every made-up instant of these shards is read from.
    fn clock(&self) -> ClockReading {
        ClockReading {
            unix_micros: self.0.clock_micros(),
        }
    }
}

// --- made-up measurements -------------------------------------------------------------------

/// splitmix64: deterministic per test, shard and cell, no dependency.
struct Rng(u64);

impl Rng {
    fn new(test: &str, shard: u32, cell: u32) -> Rng {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for b in test.bytes() {
            seed = (seed ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng(seed ^ (u64::from(shard) << 32) ^ u64::from(cell))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.unit(), self.unit());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Log-normal microseconds around `median`, clamped to `[lo, hi]`.
    fn log_normal(&mut self, median: f64, sigma: f64, lo: f64, hi: f64) -> u64 {
        (median * (sigma * self.normal()).exp()).clamp(lo, hi) as u64
    }
}

/// Records `n` samples drawn by `draw` into `hists`: at most [`MAX_DRAWS`] distinct draws,
/// each recorded its share of `n` times.
fn record_samples(hists: &mut [&mut Hist], n: u64, mut draw: impl FnMut() -> u64) {
    if n == 0 {
        return;
    }
    let draws = n.min(MAX_DRAWS);
    let (each, extra) = (n / draws, n % draws);
    for d in 0..draws {
        let v = Duration::from_micros(draw());
        for _ in 0..each + u64::from(d < extra) {
            for h in hists.iter_mut() {
                h.record(v);
            }
        }
    }
}

/// Shard `index`'s measurements of cell `key`: its share of the connections, each
/// connected, every ping answered, latencies log-normal (growing with the connections).
fn synth_cell(
    lt: &LoadTest,
    key: &CellKey,
    index: u32,
    count: u32,
    duration: Duration,
) -> CellResult {
    let spec = &lt.spec;
    let share = u64::from(count_share(key.connections, index, count.max(1)));
    let pings = u64::from(spec.ping.count.max(1));
    let mut rng = Rng::new(lt.name(), index, key.index);
    let mut m = Measure::default();
    let c = &mut m.counts;
    c.attempted = share;
    c.connected = share;
    c.survived = share;
    c.sent = share * pings;
    c.sent_with_warmup = c.sent;
    c.received = c.sent;
    c.expected = c.sent;
    c.bytes_sent = c.sent * u64::from(key.size);
    c.bytes_received = c.bytes_sent;
    let h = &mut m.hists;
    // Handshakes: TCP, upgrade, ready; connect is their sum, per connection.
    for _ in 0..share.min(MAX_DRAWS) {
        let tcp = rng.log_normal(120.0, 0.5, 20.0, 20_000.0);
        let upgrade = rng.log_normal(350.0, 0.5, 50.0, 50_000.0);
        let ready = rng.log_normal(200.0, 0.6, 20.0, 50_000.0);
        h.tcp.record(Duration::from_micros(tcp));
        h.upgrade.record(Duration::from_micros(upgrade));
        h.ready.record(Duration::from_micros(ready));
        h.connect
            .record(Duration::from_micros(tcp + upgrade + ready));
    }
    // Pings one after another: corrected and raw round trips are the same. Mostly around a
    // median growing with the load, a tail of slow ones; 0.3 ms to 50 ms.
    let median = 400.0 + share as f64 * 0.5;
    record_samples(&mut [&mut h.rtt, &mut h.rtt_raw], share * pings, || {
        if rng.unit() < 0.02 {
            rng.log_normal(8_000.0, 0.8, 300.0, 50_000.0)
        } else {
            rng.log_normal(median, 0.6, 300.0, 50_000.0)
        }
    });
    let mut cell = CellResult {
        label: key.label.clone(),
        connections: key.connections,
        size: key.size,
        format: key.format.as_str().to_string(),
        target_rate: 0.0,
        connect_secs: 0.02 + share as f64 * 0.000_2,
        measured_secs: duration.as_secs_f64(),
        start_skew_us: 50,
        measure: m,
        server_received: None,
        server_topics: None,
        server_connections: None,
        // When it began: set once it has.
        started_first_micros: 0,
        started_last_micros: 0,
        figures: Default::default(),
        timeline: Vec::new(),
        timeline_step_ms: 100,
        loadgen_cpu: None,
        kernel: Vec::new(),
    };
    cell.compute();
    cell
}

/// The lowest value of every bucket a histogram (1 us to 1 h, 3 significant digits) has.
fn slots() -> &'static [u64] {
    static SLOTS: OnceLock<Vec<u64>> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let mut v: Vec<u64> = (1..2048).collect();
        for k in 1.. {
            let first = 1024u64 << k;
            if first > MAX_MICROS {
                break;
            }
            v.extend(
                (1024..2048u64)
                    .map(|j| j << k)
                    .take_while(|&x| x <= MAX_MICROS),
            );
        }
        v
    })
}

/// A histogram with a random count below 2^`bits` in each of `slots`: built by doubling and
/// adding, bit by bit, since `Hist` records one sample at a time.
fn random_counts(slots: &[u64], rng: &mut Rng, bits: u32) -> Hist {
    let counts: Vec<u64> = slots
        .iter()
        .map(|_| 1 + rng.next() % ((1u64 << bits) - 1))
        .collect();
    let mut acc = Hist::new();
    for b in (0..bits).rev() {
        let copy = acc.clone();
        acc.add(&copy);
        for (slot, count) in slots.iter().zip(&counts) {
            if count >> b & 1 == 1 {
                acc.record(Duration::from_micros(*slot));
            }
        }
    }
    acc
}

/// Adds about `bytes` of incompressible histogram data to the cells' tcp, upgrade and ready
/// histograms (about 90 KB per histogram at most).
fn pad(cells: &mut [CellResult], bytes: usize, rng: &mut Rng) {
    const BITS: u32 = 31;
    // What one slot of random 31-bit counts costs deflated, about.
    const PER_SLOT: f64 = 3.9;
    let all = slots();
    let mut left = bytes as f64;
    for cell in cells.iter_mut() {
        let h = &mut cell.measure.hists;
        for hist in [&mut h.tcp, &mut h.upgrade, &mut h.ready] {
            if left <= 0.0 {
                return;
            }
            let n = ((left / PER_SLOT) as usize).clamp(64, all.len());
            let padding = random_counts(&all[..n], rng, BITS);
            left -= (padding.to_base64().len() * 3 / 4) as f64;
            hist.add(&padding);
        }
    }
}
