//! One run of a LoadTest in this process: the whole test (`wsload run` with one shard) or one
//! shard's share (`wsload shard`). Starts the managed server when the test has one, runs the
//! cells its gate orders (crate::conduct::gate), and judges the thresholds.

use super::error::RunError;
use crate::cell::Workers;
use crate::cell::rendezvous::Meeting;
use crate::conduct::background::spawn_background;
use crate::conduct::capacity;
use crate::conduct::disrupt::{self, Disruptor};
use crate::conduct::gate::{Gate, LocalGate};
use crate::conduct::local_server::LocalServers;
use crate::conduct::replica_watch::ReplicaWatch;
use crate::conduct::server_metrics::Counter;
use crate::conduct::target::{Target, server_counters, target};
use crate::connect::Dialer;
use crate::counters::Counters;
use crate::machine::clock::{unix_micros, unix_ms};
use crate::machine::cpu::CpuClock;
use crate::machine::netstat::{self, Proc};
use crate::model::options::{Options, threads};
use crate::model::plan::Plan;
use crate::model::{Planned, Shard};
use crate::observe::exposition::{Endpoint, Labels, LiveMetrics};
use crate::observe::progress::Outline;
use crate::observe::sampler::Sampler;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use wsload_report::Part;
use wsload_report::measure::ConnectError;
use wsload_report::report::{CellResult, RunResult, ShardInfo};
use wsload_spec::LoadTest;

/// A run's live figures: the counters its workers write (one slot each), the timelines
/// sampled from them, and their Prometheus exposition.
#[derive(Debug, Clone)]
pub struct Instruments {
    pub counters: Arc<Counters>,
    pub sampler: Arc<Sampler>,
    pub exposition: Arc<LiveMetrics>,
}

impl Instruments {
    /// The instruments of a run of `lt` with `opts`.
    pub fn new(lt: &LoadTest, opts: &Options) -> Instruments {
        let counters = Arc::new(Counters::new(threads(opts)));
        let sampler = Arc::new(Sampler::new(counters.clone()));
        let labels = Labels {
            test: lt.name().to_string(),
            shard: opts.shard.unwrap_or(Shard::WHOLE).index,
            scenario: lt.spec.scenario.as_str(),
        };
        Instruments {
            counters,
            exposition: Arc::new(LiveMetrics::new(sampler.clone(), labels)),
            sampler,
        }
    }
}

/// Binds `--metrics-listen` (before anything else starts, so a taken port fails the run early).
pub fn bind_metrics(addr: SocketAddr) -> Result<std::net::TcpListener, RunError> {
    let l = std::net::TcpListener::bind(addr)
        .map_err(|e| RunError::io(format!("cannot bind --metrics-listen {addr}"), e))?;
    l.set_nonblocking(true)
        .map_err(|e| RunError::io("--metrics-listen", e))?;
    let addr = l
        .local_addr()
        .map_err(|e| RunError::io("--metrics-listen", e))?;
    crate::observe::terminal::eprintln_above!(
        "{}",
        wsload_contract::announce::loadgen_metrics(&format!("http://{addr}/metrics"))
    );
    Ok(l)
}

/// Everything of a run that comes before its start: the plan (the conversation compiled),
/// the target resolved (the managed server started), the server's counter found, the dialer
/// built. Its failures are the caller's
/// (invalid input, unreachable target); from `run_cells` on, everything is measured.
pub struct Prepared {
    plan: Plan,
    url: String,
    /// Every server replica's received counter (empty when none is known).
    counters: Vec<Counter>,
    dialer: Arc<Dialer>,
    workers: Workers,
    /// Takes each cell's timeline.
    sampler: Arc<Sampler>,
    /// Stopped before the servers (fields drop in order): it may be restarting one.
    _disruptor: Option<Disruptor>,
    /// Reads the managed replicas while a disrupted cell runs; stopped before the servers.
    watch: Option<ReplicaWatch>,
    /// Dropped with the run: stops the managed servers.
    local: Option<Arc<Mutex<LocalServers>>>,
}

/// Who runs the disruptions that act on the server's processes (`spec.disruptions`' kills
/// and restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disruptions {
    /// This process: it runs the managed server (`wsload run`).
    Here,
    /// The conductor (the operator, which deletes the server's pods): a shard only measures.
    Conductor,
}

pub fn prepare(
    lt: &LoadTest,
    opts: &Options,
    instruments: &Instruments,
    plan: Plan,
    disruptor: Disruptions,
) -> Result<Prepared, RunError> {
    let spec = &lt.spec;
    capacity::check(spec, plan.shard(), capacity::raise())?;
    let Target {
        url,
        metrics_urls,
        local,
    } = target(lt, opts)?;
    if disruptor == Disruptions::Here
        && let Some(why) = disrupt::cluster_only(&spec.disruptions)
    {
        return Err(RunError::Disruption(why));
    }
    let dialer = Arc::new(Dialer::new(spec, &url)?);
    let local = local.map(|l| Arc::new(Mutex::new(l)));
    // A `close` is the connections' own; a kill or a restart needs the server's processes.
    let on_server =
        wsload_spec::reconnect::on_server(&spec.disruptions) && disruptor == Disruptions::Here;
    let disruptor = match (&local, !on_server) {
        (_, true) => None,
        (Some(servers), false) => disrupt::spawn(
            &spec.disruptions,
            servers.clone(),
            instruments.counters.clone(),
        )
        .map_err(|e| RunError::io("cannot start the disruptions' thread", e))?,
        (None, false) => {
            return Err(RunError::Disruption(format!(
                "this process does not run the managed server it would kill (the target is {url}); run the LoadTest with `wsload run` and no --target-url"
            )));
        }
    };
    let watch = match (&local, on_server) {
        (Some(servers), true) => Some(
            ReplicaWatch::spawn(servers.clone(), instruments.counters.clone())
                .map_err(|e| RunError::io("cannot start the replicas' reading thread", e))?,
        ),
        _ => None,
    };
    Ok(Prepared {
        plan,
        url,
        counters: server_counters(lt, &metrics_urls),
        dialer,
        workers: Workers {
            threads: threads(opts),
            counters: instruments.counters.clone(),
        },
        sampler: instruments.sampler.clone(),
        _disruptor: disruptor,
        watch,
        local,
    })
}

impl Prepared {
    /// The result before any cell: what ran, against what, judged by which thresholds.
    pub fn empty_result(&self, lt: &LoadTest, started_at_unix_ms: u64) -> RunResult {
        let spec = &lt.spec;
        let shard = self.plan.shard();
        let part = Part {
            index: shard.index,
            count: shard.count,
        };
        let mut result = RunResult::begun(lt.name(), spec, &self.url, part, started_at_unix_ms);
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
    /// are kept. Returns when the first cell began (Unix µs): when the load began.
    pub fn run_cells(&self, result: &mut RunResult, gate: &mut dyn Gate) -> Option<u64> {
        let mut done: Option<usize> = None;
        let mut began = None;
        while let Some(key) = gate.next(done.map(|i| &mut result.cells[i])) {
            if let (Some(_), Some(local)) = (done, &self.local) {
                // A disruption of the cell before may have left replicas down: each cell
                // begins with every one (started here, before its first dial).
                disrupt::restart_all(local);
            }
            let planned = self.plan.keyed(&key);
            let started = unix_micros();
            began.get_or_insert(started);
            let meeting = gate.meeting(key.index);
            let mut cell = run_cell(self, &planned, result.cells.len(), meeting);
            if let (Some(watch), Some(r)) = (&self.watch, cell.measure.reconnect.as_mut()) {
                watch.into_figures(result.cells.len(), planned.cell.duration, r);
            }
            // A cell's start is its measured phase's: what the shards' skew is read from. The
            // shards open their shares at their own pace and meet before measuring, so their
            // releases' spread says nothing of the figures. A cell that never measured keeps
            // its release.
            if cell.started_first_micros == 0 {
                cell.started_first_micros = started;
                cell.started_last_micros = started;
            }
            result.cells.push(cell);
            done = Some(result.cells.len() - 1);
        }
        gate.conclude(result);
        began
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
        prepared.run_cells(&mut result, gate)
    }));
    // The gate may have waited for the start: the load began with the first cell.
    let (began, error) = match ran {
        Ok(began) => (began, None),
        Err(p) => (None, Some(panic_message(&*p))),
    };
    let started = began
        .or_else(|| result.cells.first().map(|c| c.started_first_micros))
        .unwrap_or_else(unix_micros);
    result.started_at_unix_ms = started / 1000;
    if let Some(shard) = opts.shard {
        result.shard_info.push(ShardInfo {
            index: shard.index,
            started_at_micros: started,
            finished_at_micros: unix_micros(),
            error: error.clone(),
            clock: None,
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
pub fn run(lt: &LoadTest, opts: &Options) -> Result<RunResult, RunError> {
    let plan = Plan::new(&lt.spec, opts.shard.unwrap_or(Shard::WHOLE))?;
    let instruments = Instruments::new(lt, opts);
    let listener = opts.metrics_listen.map(bind_metrics).transpose()?;
    let progress = opts.progress.then(|| Outline::new(&plan));
    let background = spawn_background(
        instruments.sampler.clone(),
        listener.map(|l| (l, Arc::new(Endpoint::new(&instruments.exposition)))),
        progress,
    )?;
    let prepared = prepare(lt, opts, &instruments, plan, Disruptions::Here)?;
    // The whole test in this process reads the servers itself; a shard of several never
    // judges delivery (its conductor does, over every shard).
    let whole = opts.shard.is_none_or(|s| s.count == 1);
    // A killed or restarted replica takes what it counted with it: its counters would make
    // the servers look short, and its replacement's look idle.
    let server_disrupted = wsload_spec::reconnect::on_server(&lt.spec.disruptions);
    let counters = if whole && !server_disrupted {
        prepared.counters()
    } else {
        Vec::new()
    };
    let mut gate = LocalGate::new(&lt.spec, counters, opts.start_at_unix_ms);
    let (mut result, error) = measure(lt, opts, &prepared, &mut gate);
    if server_disrupted && whole {
        result.notes.push(
            "the servers' counters are not read: a kill or restart disruption ends replica processes, and what a process counted goes with it"
                .into(),
        );
    }
    drop(prepared);
    drop(background);
    if let Some(path) = &opts.plot {
        write_plot(lt, &instruments.sampler, path, &mut result);
    }
    match error {
        None => Ok(result),
        Some(message) => Err(RunError::Panicked { message }),
    }
}

/// `--plot`: the run's timeline as a PNG, named in the report. A plot that cannot be written
/// is said on stderr and in the notes; it does not change the verdict or the exit code.
fn write_plot(lt: &LoadTest, sampler: &Sampler, path: &std::path::Path, result: &mut RunResult) {
    let title = format!("{} ({})", lt.name(), lt.spec.scenario.as_str());
    let (step_ms, samples) = sampler.run_timeline(crate::observe::plot::MAX_POINTS);
    let points = crate::observe::plot::points(step_ms, &samples);
    match crate::observe::plot::write_png(path, &title, &points) {
        Ok(()) => {
            eprintln!("plot written to {}", path.display());
            let step = humantime::format_duration(std::time::Duration::from_millis(step_ms.into()));
            result.notes.push(format!(
                "plot: {} (RTT p50/p90/p99/p99.9 and msg/s sent, received, target; {} samples of {step})",
                path.display(),
                points.len()
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
    prepared: &Prepared,
    planned: &Planned,
    index: usize,
    meeting: Option<Meeting>,
) -> CellResult {
    let Prepared {
        workers,
        dialer,
        sampler,
        plan,
        ..
    } = prepared;
    let counters = &workers.counters;
    counters.set_phase(&planned.cell.label, planned.target_rate);
    counters.begin_cell(index, &planned.cell.label, planned.total_connections);
    let cpu = CpuClock::start(workers.threads);
    // The kernel's counters are read next to the cell's first dial and its last close, so
    // what they grew by is the cell's (and whatever else shares the namespace meanwhile).
    let proc = Proc::system();
    let before = proc.reading();
    sampler.kernel_peaks().restart(&before);
    let run = workers.run(&planned.cell, dialer, meeting);
    let after = proc.reading();
    let loadgen_cpu = cpu.busy();
    counters.end_cell();
    let kernel = netstat::figures(
        &before,
        &after,
        &sampler.kernel_peaks().seen(),
        plan.shard().index,
    );
    let (timeline_step_ms, timeline) = sampler.take_cell_samples();
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
        server_topics: None,
        server_connections: None,
        started_first_micros: run.measured_from_micros.unwrap_or(0),
        started_last_micros: run.measured_from_micros.unwrap_or(0),
        figures: Default::default(),
        timeline,
        timeline_step_ms,
        loadgen_cpu,
        kernel: kernel.into_iter().collect(),
    };
    cell.compute();
    tracing::info!(cell = %cell.label, sent = cell.measure.counts.sent, received = cell.measure.counts.received, connected = cell.measure.counts.connected, "cell done");
    cell
}
