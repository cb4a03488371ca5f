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
    /// Each watched cell's readings, by cell index.
    cells: BTreeMap<u32, Arc<Mutex<Readings>>>,
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

/// Which test's replicas a task reads.
struct Replicas {
    namespace: Option<String>,
    test: String,
    uid: String,
    count: u32,
    port: u16,
}

impl Replicas {
    /// Each replica's metrics endpoint as the pod cache holds it now; `None` for one with no
    /// pod or no address (deleted, not scheduled yet).
    fn urls(&self, pods: &Store<Pod>) -> Vec<Option<String>> {
        // Each replica's pod, one on its way out giving way to its replacement.
        let mut by_replica: BTreeMap<u32, (bool, String)> = BTreeMap::new();
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
            let leaving = pod.metadata.deletion_timestamp.is_some();
            if leaving && by_replica.get(&r).is_some_and(|(l, _)| !l) {
                continue;
            }
            let host = if ip.contains(':') {
                format!("[{ip}]")
            } else {
                ip
            };
            by_replica.insert(r, (leaving, format!("http://{host}:{}/metrics", self.port)));
        }
        (0..self.count)
            .map(|r| by_replica.remove(&r).map(|(_, url)| url))
            .collect()
    }
}

/// Every replica read at once.
async fn read(http: &Client, urls: Vec<Option<String>>) -> Vec<Reading> {
    let reads = urls.into_iter().map(|url| {
        let http = http.clone();
        async move {
            let body = scrape::fetch(&http, &url?, SCRAPE_TIMEOUT).await.ok()?;
            watch::parse(&body)
        }
    });
    futures_util::stream::iter(reads)
        .buffered(CONCURRENCY)
        .collect()
        .await
}

/// Reads `replicas` from `from` (Unix ms: the measured phase's start) every [`BUCKET_MS`],
/// until aborted.
async fn run(
    pods: Store<Pod>,
    http: Client,
    replicas: Replicas,
    from: u64,
    into: Arc<Mutex<Readings>>,
) {
    let ms_into = || super::disrupt::clock_millis().saturating_sub(from);
    if let Some(wait) = from.checked_sub(super::disrupt::clock_millis()) {
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    let first = read(&http, replicas.urls(&pods)).await;
    *lock(&into) = Readings::starting(&first);
    let mut ticks = tokio::time::interval(Duration::from_millis(BUCKET_MS));
    // Late (a slow replica, a busy operator): the next reading is due a step from now, not at
    // once to catch up.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let now = read(&http, replicas.urls(&pods)).await;
        lock(&into).record(ms_into(), &now);
    }
}

impl View<'_> {
    /// Reads the managed server's replicas while the cell under way is measured, from
    /// `measured_from` (Unix ms); stops reading once it is done. Only where the operator kills
    /// or restarts them: the user's Deployment's pods are not the operator's to find.
    pub(super) fn watch_replicas(&self, measured_from: u64, done: bool) {
        let Some(cell) = self.st.cells.last() else {
            return;
        };
        let uid = self.lt.uid().unwrap_or_default();
        let mut all = lock(&self.ctx.watches);
        if done {
            if let Some(w) = all.get_mut(&uid)
                && let Some((_, task)) = w.running.take()
            {
                task.abort();
            }
            return;
        }
        let Some(server) = &self.lt.spec.target.server else {
            return;
        };
        let ours = self.lt.spec.disruptions.iter().any(|d| {
            d.kill.is_some() || d.restart.as_ref().is_some_and(|r| r.deployment.is_none())
        });
        let w = all.entry(uid.clone()).or_default();
        let watched = w.running.as_ref().is_some_and(|(c, _)| *c == cell.index)
            || w.cells.contains_key(&cell.index);
        if !ours || watched || super::disrupt::clock_millis() > measured_from + LATE {
            return;
        }
        let readings = Arc::new(Mutex::new(Readings::default()));
        w.cells.insert(cell.index, readings.clone());
        let replicas = Replicas {
            namespace: self.lt.namespace(),
            test: self.lt.name_any(),
            uid,
            count: server.replicas.max(1),
            port: server.metrics_port,
        };
        let task = tokio::spawn(run(
            self.ctx.pods.store(),
            self.ctx.http.clone(),
            replicas,
            measured_from,
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
    for (index, readings) in &w.cells {
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
