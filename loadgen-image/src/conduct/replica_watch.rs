//! The managed server's replicas read while a disrupted cell runs (`wsload run` with kills or
//! restarts), every 100 ms of the measured phase (`wsload_control::replica_watch` makes the
//! figures). On a thread of its own, off the workers' and the disruptions': a scrape that
//! waits on a replica being killed or started must hold up neither.

use crate::conduct::local_server::LocalServers;
use crate::counters::Counters;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wsload_control::replica_watch::{self as watch, Reading, Readings};
use wsload_http::scrape;
use wsload_report::reconnect::{BUCKET_MS, Reconnects};

/// A replica that does not answer within this is read as holding nothing (being killed, or
/// not started yet); the next reading goes on.
const SCRAPE_TIMEOUT: Duration = Duration::from_millis(300);
/// How often the thread looks for a measured phase's start.
const LOOK: Duration = Duration::from_millis(20);

/// One cell's readings.
#[derive(Debug, Default)]
struct Watched {
    cell: Option<usize>,
    readings: Readings,
}

/// The thread that reads the replicas; stopped (and joined) when dropped.
pub struct ReplicaWatch {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
    watched: Arc<Mutex<Watched>>,
}

impl Drop for ReplicaWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl ReplicaWatch {
    /// Starts reading `servers` in every cell `counters` reports.
    pub fn spawn(
        servers: Arc<Mutex<LocalServers>>,
        counters: Arc<Counters>,
    ) -> std::io::Result<ReplicaWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let watched = Arc::new(Mutex::new(Watched::default()));
        let (stopped, into) = (stop.clone(), watched.clone());
        let handle = std::thread::Builder::new()
            .name("wsload-replicas".into())
            .spawn(move || run(&servers, &counters, &stopped, &into))?;
        Ok(ReplicaWatch {
            stop,
            handle: Some(handle),
            watched,
        })
    }

    /// Puts what was read in cell `index`, whose measured window lasted `window`, into its
    /// reconnect figures.
    pub fn into_figures(&self, index: usize, window: Duration, r: &mut Reconnects) {
        let w = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        if w.cell == Some(index) {
            let end = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
            w.readings.into_figures(end, r);
        }
    }
}

fn run(
    servers: &Mutex<LocalServers>,
    counters: &Counters,
    stop: &AtomicBool,
    into: &Mutex<Watched>,
) {
    let mut urls: Vec<String> = Vec::new();
    let mut cell: Option<usize> = None;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let course = counters.course();
        let (Some(i), Some(from), false) = (
            course.cell.as_ref().map(|p| p.index),
            course.measured_from,
            course.ended,
        ) else {
            std::thread::sleep(LOOK);
            continue;
        };
        let ms =
            |t: Instant| u64::try_from(t.saturating_duration_since(from).as_millis()).unwrap_or(0);
        if cell != Some(i) {
            cell = Some(i);
            let at = ms(Instant::now());
            let first = read(servers, &mut urls);
            *into.lock().unwrap_or_else(PoisonError::into_inner) = Watched {
                cell,
                readings: Readings::starting(at, &first),
            };
            next = from;
        }
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(LOOK * 5));
            continue;
        }
        next += Duration::from_millis(BUCKET_MS);
        // The counters are read from here on: the reading's instant is its start.
        let at = ms(Instant::now());
        let readings = read(servers, &mut urls);
        let done = Instant::now();
        // Late (a slow replica, a busy machine): the next reading is due 100 ms from now, not
        // at once to catch up.
        if next <= done {
            next = done + Duration::from_millis(BUCKET_MS);
        }
        into.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .readings
            .record(at, &readings);
    }
}

/// Each replica's reading now. The replicas' endpoints are `urls`, renewed when the servers are
/// not being stopped or started (a restart holds their lock for seconds: the readings must go
/// on meanwhile).
fn read(servers: &Mutex<LocalServers>, urls: &mut Vec<String>) -> Vec<Reading> {
    match servers.try_lock() {
        Ok(s) => urls.clone_from(&s.metrics_urls),
        Err(std::sync::TryLockError::Poisoned(p)) => urls.clone_from(&p.into_inner().metrics_urls),
        Err(std::sync::TryLockError::WouldBlock) => {}
    }
    urls.iter()
        .map(|url| {
            let body = scrape::fetch_blocking(url, SCRAPE_TIMEOUT).ok()?;
            // A replica started again keeps its metrics port, and nothing in its exposition
            // tells its process from the one before: a restart shows as its counter going down.
            watch::parse(&body, 0)
        })
        .collect()
}
