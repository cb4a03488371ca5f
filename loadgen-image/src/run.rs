//! One run of a LoadTest in this process: the whole test (`wsload run` with one shard) or one
//! shard's share (`wsload shard`). Starts the managed server when the test has one, runs the
//! cells its gate orders (crate::gate), and judges the thresholds.

use crate::capacity;
use crate::cell::Workers;
use crate::clock::{unix_micros, unix_ms};
use crate::dial::Dialer;
use crate::gate::{Gate, LocalGate};
use crate::live::{CELL_STEP, Labels, Live};
use crate::local_server::{self, LocalServers};
use crate::measure::ConnectError;
use crate::plan::{self, Planned, Shard};
use crate::progress::{Outline, Progress};
use crate::report::{CellResult, RunResult, ShardInfo};
use crate::server_metrics::Counter;
use crate::{Error, Result};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wsload_spec::LoadTest;

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
    /// Plot the run's per-second RTT percentiles and msg/s to this PNG (`--plot`).
    pub plot: Option<PathBuf>,
}

/// Worker threads of a run: `--threads`, else one per core.
pub fn threads(opts: &Options) -> usize {
    opts.threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The live metrics of a run of `lt` with `opts`, one slot per worker.
pub fn live(lt: &LoadTest, opts: &Options) -> Arc<Live> {
    Arc::new(Live::new(
        threads(opts),
        Labels {
            test: lt.name().to_string(),
            shard: opts.shard.unwrap_or(Shard::WHOLE).index,
            scenario: lt.spec.scenario.as_str(),
        },
    ))
}

/// Binds `--metrics-listen` (before anything else starts, so a taken port fails the run early).
pub fn bind_metrics(addr: SocketAddr) -> Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)
        .map_err(|e| Error::Io(format!("cannot bind --metrics-listen {addr}: {e}")))?;
    l.set_nonblocking(true)
        .map_err(|e| Error::Io(e.to_string()))?;
    crate::eprintln_above!(
        "wsload metrics on http://{}/metrics",
        l.local_addr().map_err(|e| Error::Io(e.to_string()))?
    );
    Ok(l)
}

/// The background thread: the HTTP endpoint (if any), the achieved-rate ticker, the
/// terminal progress line. Stopped by dropping it.
pub struct Background {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Everything of a run that comes before its start: the target resolved (the managed server
/// started), the server's counter found, the dialer built. Its failures are the caller's
/// (invalid input, unreachable target); from `run_cells` on, everything is measured.
pub struct Prepared {
    shard: Shard,
    url: String,
    /// Every server replica's received counter (empty when none is known).
    counters: Vec<Counter>,
    dialer: Arc<Dialer>,
    workers: Workers,
    /// Dropped with the run: stops the managed servers.
    _local: Option<LocalServers>,
}

pub fn prepare(lt: &LoadTest, opts: &Options, live: Arc<Live>) -> Result<Prepared> {
    let spec = &lt.spec;
    let shard = opts.shard.unwrap_or(Shard::WHOLE);
    capacity::check(spec, shard, capacity::raise())?;
    let Target {
        url,
        metrics_urls,
        local,
    } = target(lt, opts)?;
    let counters = counters(lt, &metrics_urls);
    let dialer = Arc::new(Dialer::new(spec, &url)?);
    Ok(Prepared {
        shard,
        url,
        counters,
        dialer,
        workers: Workers {
            threads: threads(opts),
            live,
        },
        _local: local,
    })
}

/// Where a run's connections go: `--target-url`, else the spec's URL, else the managed
/// server's replicas, started here (and stopped when this is dropped).
pub struct Target {
    pub url: String,
    /// The servers' metrics endpoints, when known.
    pub metrics_urls: Vec<String>,
    pub local: Option<LocalServers>,
}

pub fn target(lt: &LoadTest, opts: &Options) -> Result<Target> {
    let spec = &lt.spec;
    let (url, metrics_urls, local) = match (&opts.target_url, &spec.target.url, &spec.target.server)
    {
        (Some(u), _, _) => (
            u.clone(),
            opts.server_metrics_url.iter().cloned().collect(),
            None,
        ),
        (None, Some(u), _) => (u.clone(), Vec::new(), None),
        (None, None, Some(server)) => {
            let s = LocalServers::start(
                local_server::find_binary(opts.server_bin.clone()),
                spec,
                server,
            )?;
            (s.ws_url.clone(), s.metrics_urls.clone(), Some(s))
        }
        (None, None, None) => {
            return Err(Error::Spec("spec.target: no url and no server".into()));
        }
    };
    Ok(Target {
        url,
        metrics_urls,
        local,
    })
}

/// The received counters of a test's servers: the spec's `serverMetrics` (its own URL, else
/// each of `metrics_urls`), else for a managed server, ours on each replica.
pub fn counters(lt: &LoadTest, metrics_urls: &[String]) -> Vec<Counter> {
    let spec = &lt.spec;
    match &spec.server_metrics {
        Some(m) => {
            let urls: Vec<String> = match &m.url {
                Some(u) => vec![u.clone()],
                None => metrics_urls.to_vec(),
            };
            urls.into_iter()
                .filter(|u| !u.is_empty())
                .map(|url| Counter {
                    url,
                    name: m.received.clone(),
                    labels: m.labels.clone(),
                })
                .collect()
        }
        None if spec.target.server.is_some() => metrics_urls
            .iter()
            .map(|url| Counter {
                url: url.clone(),
                name: wsload_spec::DEFAULT_RECEIVED_METRIC.to_string(),
                labels: Default::default(),
            })
            .collect(),
        None => Vec::new(),
    }
}

impl Prepared {
    /// The result before any cell: what ran, against what, judged by which thresholds.
    pub fn empty_result(&self, lt: &LoadTest, started_at_unix_ms: u64) -> RunResult {
        let spec = &lt.spec;
        let shard = self.shard;
        let mut result = RunResult {
            test: lt.name().to_string(),
            scenario: spec.scenario,
            target: self.url.clone(),
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
            started_at_unix_ms,
            cells: Vec::new(),
            probes: Vec::new(),
            limit: None,
            thresholds: spec.thresholds.clone(),
            verdict: None,
            notes: Vec::new(),
            shard_info: Vec::new(),
            spec: None,
        };
        // The report (`wsload report --html`) shows what ran; the copy has secrets redacted.
        if let Err(e) = result.set_spec(spec) {
            tracing::warn!(error = %e, "the spec is left out of the result");
        }
        result
    }

    /// The servers' received counters, for a gate that judges delivery.
    pub fn counters(&self) -> Vec<Counter> {
        self.counters.clone()
    }

    /// Runs every cell `gate` orders into `result`, so that if one panics the cells before it
    /// are kept.
    pub fn run_cells(&self, lt: &LoadTest, result: &mut RunResult, gate: &mut dyn Gate) {
        let mut done: Option<usize> = None;
        while let Some(key) = gate.next(done.map(|i| &mut result.cells[i])) {
            let planned = plan::keyed(&lt.spec, self.shard, &key);
            let started = unix_micros();
            let mut cell = run_cell(&self.workers, &self.dialer, &planned, result.cells.len());
            cell.started_first_micros = started;
            cell.started_last_micros = started;
            result.cells.push(cell);
            done = Some(result.cells.len() - 1);
        }
        gate.conclude(result);
    }

    /// What the reader must know of the cells, and the verdict.
    pub fn conclude(&self, result: &mut RunResult) {
        conclude(result, &self.url);
    }
}

fn conclude(result: &mut RunResult, url: &str) {
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
}

/// What a panic carried, for a person.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Measures `prepared` from now: the cells, the shard's wall-clock start and finish, the
/// verdict. A run that broke off (a panic) returns what was measured before, and why.
pub fn measure(
    lt: &LoadTest,
    opts: &Options,
    prepared: &Prepared,
    gate: &mut dyn Gate,
) -> (RunResult, Option<String>) {
    let mut result = prepared.empty_result(lt, unix_ms());
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        prepared.run_cells(lt, &mut result, gate)
    }));
    let error = ran.err().map(|p| panic_message(&*p));
    // The gate may have waited for the start: the load began with the first cell.
    let started = result
        .cells
        .first()
        .map_or_else(unix_micros, |c| c.started_first_micros);
    result.started_at_unix_ms = started / 1000;
    if let Some(shard) = opts.shard {
        result.shard_info.push(ShardInfo {
            index: shard.index,
            started_at_micros: started,
            finished_at_micros: unix_micros(),
            error: error.clone(),
        });
    }
    if let Some(e) = &error {
        result.notes.push(format!(
            "the run failed: {e}; the cells above are what was measured before"
        ));
    }
    prepared.conclude(&mut result);
    (result, error)
}

/// A whole run: `wsload run`, or `wsload shard` without the control protocol.
pub fn run(lt: &LoadTest, opts: &Options) -> Result<RunResult> {
    let live = live(lt, opts);
    let listener = opts.metrics_listen.map(bind_metrics).transpose()?;
    let progress = opts
        .progress
        .then(|| Outline::new(&lt.spec, opts.shard.unwrap_or(Shard::WHOLE)));
    let background = spawn_background(
        live.clone(),
        listener.map(|l| (l, Arc::new(crate::live::Endpoint::new(&live)))),
        progress,
    )?;
    let prepared = prepare(lt, opts, live.clone())?;
    // The whole test in this process reads the servers itself; a shard of several never
    // judges delivery (its conductor does, over every shard).
    let whole = opts.shard.is_none_or(|s| s.count == 1);
    let counters = if whole {
        prepared.counters()
    } else {
        Vec::new()
    };
    let mut gate = LocalGate::new(&lt.spec, counters, opts.start_at_unix_ms);
    let (mut result, error) = measure(lt, opts, &prepared, &mut gate);
    drop(prepared);
    drop(background);
    if let Some(path) = &opts.plot {
        write_plot(lt, &live, path, &mut result);
    }
    match error {
        None => Ok(result),
        Some(e) => Err(Error::Runtime(format!("the run failed: {e}"))),
    }
}

/// `--plot`: the run's timeline as a PNG, named in the report. A plot that cannot be written
/// is said on stderr and in the notes; it does not change the verdict or the exit code.
fn write_plot(lt: &LoadTest, live: &Live, path: &std::path::Path, result: &mut RunResult) {
    let title = format!("{} ({})", lt.name(), lt.spec.scenario.as_str());
    let samples = live.samples();
    match crate::plot::write_png(path, &title, &samples) {
        Ok(()) => {
            eprintln!("plot written to {}", path.display());
            result.notes.push(format!(
                "plot: {} (RTT p50/p90/p99/p99.9 and msg/s sent, received, target; {} one-second samples)",
                path.display(),
                samples.len()
            ));
        }
        Err(e) => {
            eprintln!("wsload: {e}");
            result.notes.push(format!("no plot: {e}"));
        }
    }
}

/// Runs one planned cell on `workers` and computes its figures.
fn run_cell(
    workers: &Workers,
    dialer: &Arc<Dialer>,
    planned: &Planned,
    index: usize,
) -> CellResult {
    let live = &workers.live;
    live.set_phase(&planned.cell.label, planned.target_rate);
    live.begin_cell(index, &planned.cell.label, planned.total_connections);
    let cpu = CpuClock::start(workers.threads);
    let run = workers.run(&planned.cell, dialer);
    let loadgen_cpu = cpu.busy();
    live.end_cell();
    let (timeline_step_ms, timeline) = live.take_cell_samples();
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
        server_received: None,
        started_first_micros: 0,
        started_last_micros: 0,
        figures: Default::default(),
        timeline,
        timeline_step_ms,
        loadgen_cpu,
    };
    cell.compute();
    tracing::info!(cell = %cell.label, sent = cell.measure.counts.sent, received = cell.measure.counts.received, connected = cell.measure.counts.connected, "cell done");
    cell
}

/// How busy this process kept the cores its workers could use over a cell: 1.0 means the load
/// generator, not the server, may have set the pace (the report's finding says so).
struct CpuClock {
    wall: Instant,
    cpu: Option<Duration>,
    cores: f64,
}

impl CpuClock {
    fn start(threads: usize) -> CpuClock {
        // available_parallelism honours the container's CPU quota: workers beyond it share.
        let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
        CpuClock {
            wall: Instant::now(),
            cpu: process_cpu(),
            cores: threads.clamp(1, usable) as f64,
        }
    }

    /// The fraction since `start`; `None` when the clock cannot be read.
    fn busy(&self) -> Option<f64> {
        let used = process_cpu()?.checked_sub(self.cpu?)?;
        busy_fraction(used, self.wall.elapsed(), self.cores)
    }
}

fn busy_fraction(used: Duration, wall: Duration, cores: f64) -> Option<f64> {
    let capacity = wall.as_secs_f64() * cores;
    (capacity > 0.0).then(|| (used.as_secs_f64() / capacity).min(1.0))
}

/// User plus system CPU time of this process, all threads.
fn process_cpu() -> Option<Duration> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let t = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(tv.tv_sec()).unwrap_or(0))
            + Duration::from_micros(u64::try_from(tv.tv_usec()).unwrap_or(0))
    };
    Some(t(u.user_time()) + t(u.system_time()))
}

/// Starts the background thread, serving `endpoint` (a bound listener and what it exposes)
/// if given, and drawing the progress of `progress`'s run if stderr is a terminal.
pub fn spawn_background<E: wsload_http::Exposition>(
    live: Arc<Live>,
    endpoint: Option<(std::net::TcpListener, Arc<E>)>,
    progress: Option<Outline>,
) -> Result<Background> {
    let stop = Arc::new(AtomicBool::new(false));
    let progress = progress.filter(|_| std::io::stderr().is_terminal());
    let stopped = stop.clone();
    let handle = std::thread::Builder::new()
        .name("wsload-http".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Some((l, exposition)) = endpoint
                    && let Ok(l) = tokio::net::TcpListener::from_std(l)
                {
                    tokio::spawn(wsload_http::serve(l, exposition));
                }
                let mut progress = progress.map(Progress::new);
                // Interrupted at a terminal: the bar is taken off before the process ends as
                // SIGINT would end it. Elsewhere SIGINT keeps its default.
                let watch = progress.is_some();
                let mut interrupted = std::pin::pin!(async move {
                    if watch && tokio::signal::ctrl_c().await.is_ok() {
                        return;
                    }
                    std::future::pending::<()>().await
                });
                // The cell's report timeline is sampled every step; the rate gauge, the
                // --plot timeline and the bar once a second.
                let per_second =
                    (Duration::from_secs(1).as_millis() / CELL_STEP.as_millis().max(1)).max(1);
                let mut tick = tokio::time::interval(CELL_STEP);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut ticks: u128 = 0;
                while !stopped.load(Ordering::Relaxed) {
                    let cell_start = live.cell_start_pending();
                    tokio::select! {
                        _ = tick.tick() => {}
                        () = live.cell_armed() => continue,
                        () = async {
                            match cell_start {
                                Some(at) => tokio::time::sleep_until(at.into()).await,
                                None => std::future::pending().await,
                            }
                        } => {
                            // A cell's measured phase begins: its timeline starts now and
                            // its steps are counted from here.
                            live.sample_cell(Instant::now());
                            tick.reset_after(CELL_STEP);
                            continue;
                        }
                        () = &mut interrupted => {
                            if let Some(p) = &progress {
                                p.interrupted();
                            }
                            std::process::exit(130);
                        }
                    }
                    live.sample_cell(Instant::now());
                    ticks += 1;
                    if (ticks - 1) % per_second != 0 {
                        continue;
                    }
                    live.tick(Duration::from_secs(1));
                    if let Some(p) = &mut progress {
                        p.draw(&live);
                    }
                }
            });
        })
        .map_err(|e| Error::Io(e.to_string()))?;
    Ok(Background {
        stop,
        handle: Some(handle),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_is_cpu_time_over_the_cores_the_workers_could_use() {
        let f = |used_ms, wall_ms, cores| {
            busy_fraction(
                Duration::from_millis(used_ms),
                Duration::from_millis(wall_ms),
                cores,
            )
        };
        assert_eq!(f(1000, 1000, 1.0), Some(1.0));
        assert_eq!(f(1000, 1000, 2.0), Some(0.5));
        // Threads outside the workers (the scrape, the ticker) can push the sum past them.
        assert_eq!(f(2500, 1000, 2.0), Some(1.0));
        assert_eq!(f(10, 0, 2.0), None);
    }

    /// The process clock counts every thread: it has grown by at least what this thread spent
    /// (read from the thread's own clock, so a loaded machine only makes the test longer).
    #[test]
    fn the_process_clock_counts_this_threads_work() {
        let thread_cpu = || {
            use nix::sys::resource::{UsageWho, getrusage};
            let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::from_micros(
                    u64::try_from(tv.tv_sec() * 1_000_000 + tv.tv_usec()).unwrap_or(0),
                )
            };
            t(u.user_time()) + t(u.system_time())
        };
        let before = process_cpu().expect("getrusage");
        let t0 = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - t0 < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spent = thread_cpu() - t0;
        let grown = process_cpu().expect("getrusage") - before;
        // getrusage rounds to its tick; a few milliseconds either way.
        assert!(
            grown + Duration::from_millis(20) >= spent,
            "{grown:?} < {spent:?}"
        );
    }
}
