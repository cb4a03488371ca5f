//! The managed server's replicas read while a disrupted cell runs (`wsload run` with kills or
//! restarts): how many connections they admitted in each 100 ms of the measured phase (what
//! the reconnect attempts met), and how many each held (what a replica back took of its share).
//! Between cells their counters cannot be read: a kill takes what a process counted with it.
//! On a thread of its own, off the workers' and the disruptions': a scrape that waits on a
//! replica being killed or started must hold up neither.

use crate::conduct::local_server::LocalServers;
use crate::counters::Counters;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wsload_http::scrape;
use wsload_report::reconnect::{BUCKET_MS, Reconnects, add_at};

/// What a replica counts of the connections it admitted (after the WebSocket handshake).
const ACCEPTED: &str = "wsload_server_connections_accepted_total";
/// What it holds now.
const ACTIVE: &str = "wsload_server_connections_active";
/// A replica that does not answer within this is read as holding nothing (being killed, or
/// not started yet); the next reading goes on.
const SCRAPE_TIMEOUT: Duration = Duration::from_millis(300);
/// How often the thread looks for a measured phase's start.
const LOOK: Duration = Duration::from_millis(20);

/// One cell's readings.
#[derive(Debug, Default)]
struct Watched {
    cell: Option<usize>,
    /// Admissions per [`BUCKET_MS`] of the measured phase, all replicas summed.
    accepts: Vec<u64>,
    /// Each reading's instant (ms into the phase) and what each replica held then (`None`:
    /// it did not answer).
    held: Vec<(u64, Vec<Option<u64>>)>,
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
    /// reconnect figures: the admissions up to the window's end, and what each replica held
    /// at its last reading before it (the connections close after it).
    pub fn into_figures(&self, index: usize, window: Duration, r: &mut Reconnects) {
        let w = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        if w.cell != Some(index) {
            return;
        }
        let end = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let buckets = usize::try_from(end.div_ceil(BUCKET_MS)).unwrap_or(usize::MAX);
        r.server_accepts = w.accepts.iter().take(buckets).copied().collect();
        if let Some((_, held)) = w.held.iter().rev().find(|(ms, _)| *ms < end) {
            r.replicas_held.clone_from(held);
        }
    }
}

fn run(
    servers: &Mutex<LocalServers>,
    counters: &Counters,
    stop: &AtomicBool,
    into: &Mutex<Watched>,
) {
    // Each replica's admissions at its last reading, and that reading's instant (ms into the
    // phase).
    let mut last: Vec<Option<u64>> = Vec::new();
    let mut last_at = 0;
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
        if cell != Some(i) {
            cell = Some(i);
            *into.lock().unwrap_or_else(PoisonError::into_inner) = Watched {
                cell,
                ..Watched::default()
            };
            last = read(servers, &mut urls)
                .iter()
                .map(|r| r.map(|(a, _)| a))
                .collect();
            last_at = 0;
            next = from;
        }
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(LOOK * 5));
            continue;
        }
        next += Duration::from_millis(BUCKET_MS);
        let readings = read(servers, &mut urls);
        let ms =
            |t: Instant| u64::try_from(t.saturating_duration_since(from).as_millis()).unwrap_or(0);
        let at = ms(Instant::now());
        // Late (a slow replica, a busy machine): the next reading is due 100 ms from now, not
        // at once to catch up.
        let done = Instant::now();
        if next <= done {
            next = done + Duration::from_millis(BUCKET_MS);
        }
        last.resize(readings.len(), None);
        let mut admitted = 0;
        let mut held = Vec::with_capacity(readings.len());
        for (seen, reading) in last.iter_mut().zip(&readings) {
            let Some((accepted, active)) = *reading else {
                // Down, or slow to answer: what it admits next is counted from its next
                // reading (a replica started again counts from zero).
                held.push(None);
                continue;
            };
            admitted += match *seen {
                Some(before) if accepted >= before => accepted - before,
                // Started again since: its counter began anew.
                Some(_) => accepted,
                None => 0,
            };
            *seen = Some(accepted);
            held.push(Some(active));
        }
        let mut w = into.lock().unwrap_or_else(PoisonError::into_inner);
        // What was admitted since the last reading, filed at the middle of that interval.
        add_at(
            &mut w.accepts,
            last_at + at.saturating_sub(last_at) / 2,
            admitted,
        );
        last_at = at;
        w.held.push((at, held));
    }
}

/// Each replica's admissions and held connections now; `None` for one that did not answer.
/// The replicas' endpoints are `urls`, renewed when the servers are not being stopped or
/// started (a restart holds their lock for seconds: the readings must go on meanwhile).
fn read(servers: &Mutex<LocalServers>, urls: &mut Vec<String>) -> Vec<Option<(u64, u64)>> {
    match servers.try_lock() {
        Ok(s) => urls.clone_from(&s.metrics_urls),
        Err(std::sync::TryLockError::Poisoned(p)) => urls.clone_from(&p.into_inner().metrics_urls),
        Err(std::sync::TryLockError::WouldBlock) => {}
    }
    let any = BTreeMap::new();
    urls.iter()
        .map(|url| {
            let body = scrape::fetch_blocking(url, SCRAPE_TIMEOUT).ok()?;
            let accepted = scrape::find(&body, ACCEPTED, &any)?;
            let active = scrape::find(&body, ACTIVE, &any).unwrap_or(0.0);
            Some((accepted as u64, active as u64))
        })
        .collect()
}
