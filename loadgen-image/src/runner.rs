//! One run of a LoadTest in this process: the whole test (`wsload run`) or one shard's share
//! (`wsload shard`). Starts the managed server when the test has one, runs the cells, reads
//! the server's counter around each, and judges the thresholds.

use crate::dial::Dialer;
use crate::engine::Engine;
use crate::live::{Labels, Live};
use crate::local_server::{self, LocalServer};
use crate::measure::ConnectError;
use crate::plan::{self, Planned, Shard};
use crate::report::{CellResult, Probe, RunResult};
use crate::server_metrics::Counter;
use crate::{Error, Result};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wsload_spec::{LoadTest, Scenario};

#[derive(Debug, Clone, Default)]
pub struct Options {
    pub threads: Option<usize>,
    pub shard: Option<Shard>,
    pub server_bin: Option<PathBuf>,
    pub metrics_listen: Option<SocketAddr>,
    /// Start load at this Unix time (ms): the cluster's start barrier.
    pub start_at_unix_ms: Option<u64>,
    /// Overrides the target (the operator passes the managed server's Service URL).
    pub target_url: Option<String>,
    pub server_metrics_url: Option<String>,
    pub progress: bool,
}

/// The server's counter has settled when it has not moved for this long...
const SETTLE_QUIET: Duration = Duration::from_secs(2);
/// ...or after this long in any case.
const SETTLE_MAX: Duration = Duration::from_secs(60);

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn run(lt: &LoadTest, opts: &Options) -> Result<RunResult> {
    let spec = &lt.spec;
    let shard = opts.shard.unwrap_or(Shard::WHOLE);
    let mut local = None;
    let (url, metrics_url) = match (&opts.target_url, &spec.target.url, &spec.target.server) {
        (Some(u), _, _) => (u.clone(), opts.server_metrics_url.clone()),
        (None, Some(u), _) => (u.clone(), None),
        (None, None, Some(server)) => {
            let s = LocalServer::start(
                local_server::find_binary(opts.server_bin.clone()),
                spec,
                server,
            )?;
            let urls = (s.ws_url.clone(), Some(s.metrics_url.clone()));
            local = Some(s);
            urls
        }
        (None, None, None) => return Err(Error::Spec("spec.target: no url and no server".into())),
    };
    let counter = spec
        .server_metrics
        .as_ref()
        .map(|m| Counter {
            url: m.url.clone().or(metrics_url.clone()).unwrap_or_default(),
            name: m.received.clone(),
            labels: m.labels.clone(),
        })
        .or_else(|| {
            // A managed server is ours: its counter is known.
            metrics_url
                .clone()
                .filter(|_| spec.target.server.is_some())
                .map(|url| Counter {
                    url,
                    name: wsload_spec::DEFAULT_RECEIVED_METRIC.to_string(),
                    labels: Default::default(),
                })
        })
        .filter(|c| !c.url.is_empty());

    let threads = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let live = Arc::new(Live::new(
        threads,
        Labels {
            test: lt.name().to_string(),
            shard: shard.index,
            scenario: spec.scenario.as_str(),
        },
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let background = spawn_background(
        live.clone(),
        opts.metrics_listen,
        opts.progress,
        stop.clone(),
    )?;
    let dialer = Arc::new(Dialer::new(spec, &url)?);
    let engine = Engine {
        threads,
        live: live.clone(),
    };

    if let Some(at) = opts.start_at_unix_ms {
        let now = unix_ms();
        if at > now {
            tracing::info!(wait_ms = at - now, "waiting for the common start time");
            std::thread::sleep(Duration::from_millis(at - now));
        }
    }

    let mut result = RunResult {
        test: lt.name().to_string(),
        scenario: spec.scenario,
        target: url.clone(),
        shards: if shard.count > 1 {
            vec![shard.index]
        } else {
            (0..spec.shards).collect()
        },
        shard_count: if shard.count > 1 {
            shard.count
        } else {
            spec.shards
        },
        started_at_unix_ms: unix_ms(),
        cells: Vec::new(),
        probes: Vec::new(),
        limit: None,
        thresholds: spec.thresholds.clone(),
        verdict: None,
        notes: Vec::new(),
        shard_info: Vec::new(),
    };
    if spec.scenario == Scenario::ConnectionLimit {
        limit_search(lt, shard, &engine, &dialer, counter.as_ref(), &mut result);
    } else {
        for planned in plan::cells(spec, shard) {
            let cell = run_planned(
                &engine,
                &dialer,
                counter.as_ref(),
                &planned,
                &mut result.notes,
            );
            result.cells.push(cell);
        }
    }
    if result.cells.iter().any(|c| {
        c.measure
            .counts
            .failed
            .contains_key(&ConnectError::FileLimit)
    }) {
        result.notes.push(
            "this process hit its open-file limit (ulimit -n): the failures marked file_limit are the load generator's, not the server's; use more shards"
                .into(),
        );
    }
    if let Some(c) = result
        .cells
        .iter()
        .find(|c| c.measure.counts.connected == 0 && c.measure.counts.attempted > 0)
    {
        let reasons: Vec<String> = c
            .measure
            .counts
            .failed
            .iter()
            .map(|(k, v)| format!("{} x{v}", k.label()))
            .collect();
        result.notes.push(format!(
            "no connection to {url} succeeded in cell {} ({})",
            c.label,
            reasons.join(", ")
        ));
    }
    result.judge();
    stop.store(true, Ordering::Relaxed);
    drop(local);
    if let Some(h) = background {
        let _ = h.join();
    }
    Ok(result)
}

fn run_planned(
    engine: &Engine,
    dialer: &Arc<Dialer>,
    counter: Option<&Counter>,
    planned: &Planned,
    notes: &mut Vec<String>,
) -> CellResult {
    engine
        .live
        .set_phase(&planned.cell.label, planned.target_rate);
    let before = counter.map(Counter::read);
    let run = engine.run_cell(&planned.cell, dialer);
    let server_received = match (counter, before) {
        (Some(c), Some(Ok(before))) => {
            // The server may still be working through what sits in socket buffers (zlib
            // frames decode slowly): wait while its counter still moves, until it has
            // everything, at most SETTLE_MAX.
            let started = std::time::Instant::now();
            let mut last: Option<u64> = None;
            let mut last_change = started;
            loop {
                match c.read() {
                    Ok(after) => {
                        let delta = after.saturating_sub(before);
                        if last != Some(delta) {
                            last_change = std::time::Instant::now();
                        }
                        last = Some(delta);
                        let still = last_change.elapsed() >= SETTLE_QUIET;
                        if delta >= run.measure.counts.sent_with_warmup
                            || still
                            || started.elapsed() >= SETTLE_MAX
                        {
                            break;
                        }
                    }
                    Err(e) => {
                        notes.push(format!("server counter {}: {e}", c.name));
                        break;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            last
        }
        (Some(c), Some(Err(e))) => {
            notes.push(format!("server counter {} unreadable: {e}", c.name));
            None
        }
        _ => None,
    };
    let mut cell = CellResult {
        label: planned.cell.label.clone(),
        connections: planned.total_connections,
        size: planned.size,
        format: planned.format.as_str().to_string(),
        target_rate: planned.target_rate,
        connect_secs: run.connect_secs,
        measured_secs: run.measured_secs,
        start_skew_us: run.start_skew_us,
        measure: run.measure,
        server_received,
        figures: Default::default(),
    };
    cell.compute();
    tracing::info!(cell = %cell.label, sent = cell.measure.counts.sent, received = cell.measure.counts.received, connected = cell.measure.counts.connected, "cell done");
    cell
}

/// Exponential probe from `limit.start`, then binary search down to `limit.resolution`.
fn limit_search(
    lt: &LoadTest,
    shard: Shard,
    engine: &Engine,
    dialer: &Arc<Dialer>,
    counter: Option<&Counter>,
    result: &mut RunResult,
) {
    let l = lt.spec.limit;
    let probe = |n: u32, result: &mut RunResult| -> bool {
        let planned = plan::cell(
            &lt.spec,
            shard,
            n.to_string(),
            n,
            lt.spec.message.size,
            lt.spec.message.format,
        );
        let cell = run_planned(engine, dialer, counter, &planned, &mut result.notes);
        let c = &cell.measure.counts;
        let bad = c.failed_total() + c.dropped_total();
        let error_rate = if c.attempted > 0 {
            bad as f64 / c.attempted as f64
        } else {
            1.0
        };
        let passed = error_rate < l.max_error_rate.0;
        result.probes.push(Probe {
            connections: n,
            error_rate,
            passed,
        });
        result.cells.push(cell);
        passed
    };
    let (mut lo, mut hi) = (0u32, None);
    let mut n = l.start;
    loop {
        if probe(n, result) {
            lo = n;
            if n >= l.max {
                break;
            }
            n = n.saturating_mul(2).min(l.max);
        } else {
            hi = Some(n);
            break;
        }
    }
    if let Some(mut hi) = hi {
        while hi - lo > l.resolution {
            let mid = lo + (hi - lo) / 2;
            if probe(mid, result) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    result.limit = (lo > 0).then_some(lo);
}

/// The `/metrics` endpoint, the achieved-rate ticker and the terminal progress line.
fn spawn_background(
    live: Arc<Live>,
    listen: Option<SocketAddr>,
    progress: bool,
    stop: Arc<AtomicBool>,
) -> Result<Option<std::thread::JoinHandle<()>>> {
    let listener = match listen {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .map_err(|e| Error::Io(format!("cannot bind --metrics-listen {addr}: {e}")))?;
            l.set_nonblocking(true)
                .map_err(|e| Error::Io(e.to_string()))?;
            eprintln!(
                "wsload metrics on http://{}/metrics",
                l.local_addr().map_err(|e| Error::Io(e.to_string()))?
            );
            Some(l)
        }
        None => None,
    };
    let progress = progress && std::io::stderr().is_terminal();
    let handle = std::thread::Builder::new()
        .name("wsload-metrics".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Some(l) = listener.and_then(|l| tokio::net::TcpListener::from_std(l).ok()) {
                    tokio::spawn(wsload_metrics::serve(l, live.clone()));
                }
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    live.tick(Duration::from_secs(1));
                    if progress {
                        eprint!("\r\x1b[K{}", live.progress_line());
                    }
                }
                if progress {
                    eprint!("\r\x1b[K");
                }
            });
        })
        .map_err(|e| Error::Io(e.to_string()))?;
    Ok(Some(handle))
}
