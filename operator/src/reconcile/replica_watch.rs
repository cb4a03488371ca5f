//! The managed server's replicas read every 100 ms while a cell the operator kills or restarts
//! them in is measured: their admissions against the shards' reconnect attempts, and what each
//! held at the cell's end (a replica back that never took its share). A task per test, apart
//! from the reconciles: a reading every 100 ms would otherwise wait on them, and they on it.
//!
//! In memory only, as the replicas' spread in connections.rs: a restarted operator leaves the
//! cell under way without these figures (its readings before the restart are gone, and
//! admissions counted from the middle of a storm would pass for all of it).

use super::Context;
use super::view::View;
use crate::names;
use crate::pods;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use wsload_control::replica_watch::{self as watch, Reading, Readings};
use wsload_http::http_client::Client;
use wsload_http::scrape;
use wsload_report::reconnect::BUCKET_MS;
use wsload_report::report::RunResult;

/// A replica that does not answer within this is read as down (deleted, or not started yet):
/// the next reading is due.
const SCRAPE_TIMEOUT: Duration = Duration::from_millis(300);
/// Replicas read at once.
const CONCURRENCY: usize = 32;
/// A watch begun later than this into its cell's measured phase is not begun: what the
/// replicas admitted before it would be missing from the figures.
const LATE: u64 = 1000;

/// Each running test's watches, by LoadTest uid.
pub type Watches = Mutex<HashMap<String, TestWatch>>;

#[derive(Default)]
pub struct TestWatch {
    /// The task reading the cell under way, and that cell's index.
    running: Option<(u32, tokio::task::AbortHandle)>,
    /// Each watched cell's measured phase start (Unix ms) and readings, by cell index.
    cells: BTreeMap<u32, (u64, Arc<Mutex<Readings>>)>,
}

impl Drop for TestWatch {
    fn drop(&mut self) {
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Readings stay usable after a panic elsewhere.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops what is kept for a test (finished or deleted), its task stopped.
pub(super) fn forget(ctx: &Context, uid: &str) {
    lock(&ctx.watches).remove(uid);
}

/// After the cell's planned end, a task still reading stops by itself this much later: a
/// test deleted mid-cell is never reconciled again to stop it.
const OUTLIVE: Duration = Duration::from_secs(30);

/// Which test's replicas a task reads.
struct Replicas {
    namespace: Option<String>,
    test: String,
    uid: String,
    count: u32,
    port: u16,
}

impl Replicas {
    /// Each replica's metrics endpoint as the pod cache holds it now, with its pod's identity
    /// (a replica created again is a new pod); `None` for one with no pod or no address
    /// (deleted, not scheduled yet). A replica's pod has a fixed name: its replacement is
    /// created only once it is gone.
    fn endpoints(&self, pods: &Store<Pod>) -> Vec<Option<(u64, String)>> {
        let mut by_replica: BTreeMap<u32, (u64, String)> = BTreeMap::new();
        for pod in pods.state() {
            let ours = pod.namespace() == self.namespace
                && pod
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == self.uid && o.controller == Some(true));
            let replica = names::server_replica_index(&self.test, &pod.name_any());
            let (true, Some(r), Some(ip)) = (ours, replica, pods::ip(&pod)) else {
                continue;
            };
            let host = if ip.contains(':') {
                format!("[{ip}]")
            } else {
                ip
            };
            let instance = identity(pod.metadata.uid.as_deref().unwrap_or_default());
            let url = format!("http://{host}:{}/metrics", self.port);
            by_replica.insert(r, (instance, url));
        }
        (0..self.count).map(|r| by_replica.remove(&r)).collect()
    }
}

/// A pod's UID as a reading's instance (never 0: that is "unknown").
fn identity(uid: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    uid.hash(&mut h);
    h.finish() | 1
}

/// Every replica read at once.
async fn read(http: &Client, endpoints: Vec<Option<(u64, String)>>) -> Vec<Reading> {
    let reads = endpoints.into_iter().map(|endpoint| {
        let http = http.clone();
        async move {
            let (instance, url) = endpoint?;
            let body = scrape::fetch(&http, &url, SCRAPE_TIMEOUT).await.ok()?;
            watch::parse(&body, instance)
        }
    });
    futures_util::stream::iter(reads)
        .buffered(CONCURRENCY)
        .collect()
        .await
}

/// Reads `replicas` from `from` (Unix ms: the measured phase's start) every [`BUCKET_MS`],
/// until aborted or `until` (Unix ms).
async fn run(
    pods: Store<Pod>,
    http: Client,
    replicas: Replicas,
    (from, until): (u64, u64),
    into: Arc<Mutex<Readings>>,
) {
    let ms_into = || super::disrupt::clock_millis().saturating_sub(from);
    if let Some(wait) = from.checked_sub(super::disrupt::clock_millis()) {
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    let at = ms_into();
    let first = read(&http, replicas.endpoints(&pods)).await;
    *lock(&into) = Readings::starting(at, &first);
    let mut ticks = tokio::time::interval(Duration::from_millis(BUCKET_MS));
    // Late (a slow replica, a busy operator): the next reading is due a step from now, not at
    // once to catch up.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    while super::disrupt::clock_millis() < until {
        ticks.tick().await;
        // The counters are read from here on: the reading's instant is its start.
        let at = ms_into();
        let now = read(&http, replicas.endpoints(&pods)).await;
        lock(&into).record(at, &now);
    }
}

impl View<'_> {
    /// Reads the managed server's replicas while the cell under way is measured from
    /// `measured_from` (Unix ms; `None`: not known yet, or the cell is done), and stops reading
    /// a cell no longer under way. Only where the operator kills or restarts them: the user's
    /// Deployment's pods are not the operator's to find.
    pub(super) fn watch_replicas(&self, measured_from: Option<u64>) {
        let Some(cell) = self.st.cells.last() else {
            return;
        };
        let uid = self.lt.uid().unwrap_or_default();
        let mut all = lock(&self.ctx.watches);
        let w = all.entry(uid.clone()).or_default();
        let current = measured_from.filter(|_| !cell.done);
        if let Some((index, task)) = &w.running
            && (*index != cell.index || current.is_none())
        {
            task.abort();
            w.running = None;
        }
        let Some(from) = current else {
            return;
        };
        let Some(server) = &self.lt.spec.target.server else {
            return;
        };
        let ours = self.lt.spec.disruptions.iter().any(|d| {
            d.kill.is_some() || d.restart.as_ref().is_some_and(|r| r.deployment.is_none())
        });
        // Watched already from this very instant (a measure instant never written, chosen
        // again later, is another).
        let watched = w.cells.get(&cell.index).is_some_and(|(f, _)| *f == from);
        if !ours || watched || super::disrupt::clock_millis() > from + LATE {
            return;
        }
        let readings = Arc::new(Mutex::new(Readings::default()));
        w.cells.insert(cell.index, (from, readings.clone()));
        let replicas = Replicas {
            namespace: self.lt.namespace(),
            test: self.lt.name_any(),
            uid,
            count: server.replicas.max(1),
            port: server.metrics_port,
        };
        let length = wsload_spec::timing::cell_length(&self.lt.spec)
            .saturating_sub(self.lt.spec.warmup.get());
        let until = from + u64::try_from((length + OUTLIVE).as_millis()).unwrap_or(u64::MAX);
        let task = tokio::spawn(run(
            self.ctx.pods.store(),
            self.ctx.http.clone(),
            replicas,
            (from, until),
            readings,
        ));
        if let Some((_, before)) = w.running.replace((cell.index, task.abort_handle())) {
            before.abort();
        }
    }
}

/// Puts each watched cell's readings into the merged result's reconnect figures, cut at the
/// cell's measured window.
pub(super) fn into_figures(ctx: &Context, uid: &str, merged: &mut RunResult) {
    let all = lock(&ctx.watches);
    let Some(w) = all.get(uid) else {
        return;
    };
    for (index, (_, readings)) in &w.cells {
        let cell = usize::try_from(*index)
            .ok()
            .and_then(|i| merged.cells.get_mut(i));
        let Some(cell) = cell else {
            continue;
        };
        let window = (cell.measured_secs * 1e3).round() as u64;
        if let Some(r) = cell.measure.reconnect.as_mut() {
            lock(readings).into_figures(window, r);
        }
    }
}
