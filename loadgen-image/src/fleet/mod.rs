//! `wsload run` with `shards: N` (N > 1): the test's shards as N `wsload shard` processes on
//! this machine, conducted the way the operator conducts pods (wsload_control): started
//! together, released cell by cell at one instant, the servers' counters summed over every
//! replica once every shard finished a cell, the results merged, the verdict judged once.
//! A per-process limit (open files) then caps a shard, not the test, and a local run goes
//! through the code a cluster run does.

pub mod bar;
pub mod error;
pub mod limit;
pub mod token;

pub use error::{FleetError, ShardFailure};

use crate::conduct::RunError;
use crate::conduct::capacity;
use crate::conduct::error::{EXIT_INPUT, EXIT_MEASURED_NOTHING};
use crate::conduct::server_metrics::ScrapeError;
use crate::conduct::server_metrics::{ConnectionCounters, Counter, TopicCounters};
use crate::conduct::target;
use crate::fleet::bar::{FleetBar, StartBar};
use crate::fleet::token::TokenFile;
use crate::model::Shard;
use crate::model::options::Options;
use crate::model::plan::Plan;
use crate::observe::progress::Outline;
use futures_util::future::join_all;
use limit::TooManyShards;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use wsload_contract::announce;
use wsload_contract::env as var;
use wsload_control::barrier::{self, Barrier, Connect};
use wsload_control::client::ShardClient;
use wsload_control::clock::{self, Estimator};
use wsload_control::settle::{self, Settle};
use wsload_control::{CellKey, Conductor, Phase, State, assemble};
use wsload_report::report::RunResult;
use wsload_spec::LoadTest;

/// A shard's control requests go to loopback: a slow answer is a stuck shard.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a shard may take to get ready (parse, resolve, build its dialer).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Between the release and the instant: time for every POST to arrive.
const LEAD: Duration = Duration::from_millis(250);
/// A live process whose endpoint has not answered for this long is stuck: left out, as lost.
const SILENCE: Duration = Duration::from_secs(60);
/// How often to ask the shards how far they are, with a few of them.
const POLL: Duration = Duration::from_millis(50);

/// How often to ask `shards` shards how far they are: every 50 ms for up to 4, slower with
/// more, so that the questions stay ~80 a second. With 59 shards on 2 cores, 1,180 a second
/// were a load of their own on a machine already saturated by the connections.
fn poll_every(shards: usize) -> Duration {
    POLL * u32::try_from(shards.div_ceil(4).clamp(1, 20)).unwrap_or(20)
}

struct ShardProc {
    index: u32,
    child: Child,
    client: ShardClient,
    /// The last lines of its stderr, to say why it stopped.
    log: mpsc::Receiver<String>,
    /// Gone, and why; its measurements are lost.
    lost: Option<Lost>,
    /// When its endpoint last answered.
    answered: Instant,
    /// Its clock against this process's (wsload_control::clock), and when it was last probed.
    clock: Estimator,
    probed: Instant,
}

/// Why a shard was left out of the rest of the run.
#[derive(Debug)]
enum Lost {
    /// Its process ended (the note says how).
    Exited,
    /// Its endpoint did not answer for [`SILENCE`].
    Silent,
    /// A cell's release did not reach it.
    NotReleased(wsload_control::Error),
}

impl ShardProc {
    /// The release that has this shard begin at `at` (Unix ms, this process's clock)
    /// (wsload_control::clock::release).
    fn release_at(&self, at: u64) -> wsload_control::protocol::Release {
        clock::release(at, self.clock.estimate().as_ref())
    }

    fn tail(&self) -> String {
        let lines: Vec<String> = self.log.try_iter().collect();
        lines
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for ShardProc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Runs `lt` (read from `file`) as `lt.spec.shards` shard processes of this binary.
pub fn run(lt: &LoadTest, file: &Path, opts: &Options) -> Result<RunResult, FleetError> {
    let spec = &lt.spec;
    if opts.plot.is_some() {
        return Err(FleetError::Plot {
            shards: spec.shards,
        });
    }
    // The shards inherit this process's limits: a share none can open fails here, at once,
    // and so does a count of shards this machine cannot run, before any is forked.
    let limits = capacity::raise();
    machine_runs(spec.shards, opts.threads, limits)?;
    for index in 0..spec.shards {
        capacity::check(
            spec,
            Shard {
                index,
                count: spec.shards,
            },
            limits,
        )
        .map_err(RunError::from)?;
    }
    if let Some(why) = crate::conduct::disrupt::cluster_only(&spec.disruptions) {
        return Err(RunError::Disruption(why).into());
    }
    if wsload_spec::reconnect::on_server(&spec.disruptions) {
        // This conductor releases cells on its own clock; locally disruptions are timed from
        // a measured phase's start inside the one process that runs the server (issue 40).
        // The operator times them from every shard's measure instant.
        return Err(RunError::Disruption(format!(
            "kill and restart with shards: {} run in a cluster (the operator times them from the shards' common measure instant); on one machine use shards: 1, one process with the same load",
            spec.shards
        ))
        .into());
    }
    // The servers first: every shard dials the same port (replicas share it).
    let target::Target {
        url,
        metrics_urls,
        local,
    } = target::target(lt, opts)?;
    let counters = target::server_counters(lt, &metrics_urls);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| FleetError::Io {
            what: "cannot build the conductor's runtime",
            source,
        })?;
    // Kept until the shards are gone: they read it at start, the conductor sends it on.
    let token = TokenFile::create()?;
    let mut shards = spawn_all(lt, file, opts, &url, &token)?;
    // The bar's cell lengths from the largest share (shard 0's): the shards connect theirs at
    // once.
    let first = Shard {
        index: 0,
        count: spec.shards,
    };
    let outline = match opts.progress {
        true => Some(Outline::new(
            &Plan::new(spec, first).map_err(RunError::from)?,
        )),
        false => None,
    };
    let result = rt.block_on(conduct(lt, &mut shards, &counters, outline));
    drop(shards);
    drop(token);
    drop(local);
    let mut result = result?;
    result.target = url;
    Ok(result)
}

/// Refuses `shards` local shard processes (of `threads` runtime threads each, default: the
/// cores shared out) when this machine, with open-file `limits`, cannot run them.
pub fn machine_runs(
    shards: u32,
    threads: Option<usize>,
    limits: capacity::Limits,
) -> Result<(), TooManyShards> {
    let threads = shard_threads(threads, shards) as u64;
    limit::check(shards, threads, &limit::Machine::detect(limits.soft))
}

/// Runtime threads per shard: N processes share the cores, one runtime thread per core over
/// all of them, unless --threads says.
fn shard_threads(threads: Option<usize>, n: u32) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    threads.unwrap_or((cores / n as usize).max(1))
}

fn spawn_all(
    lt: &LoadTest,
    file: &Path,
    opts: &Options,
    url: &str,
    token: &TokenFile,
) -> Result<Vec<ShardProc>, FleetError> {
    let n = lt.spec.shards;
    let exe = std::env::current_exe().map_err(|source| FleetError::Io {
        what: "cannot find this binary to start shards",
        source,
    })?;
    let threads = shard_threads(opts.threads, n);
    let bar = StartBar::new(n, opts.progress);
    let mut shards = Vec::new();
    for index in 0..n {
        let listen: SocketAddr = match opts.metrics_listen {
            // Consecutive ports from the one given, so a scrape config can list them.
            Some(a) => SocketAddr::new(a.ip(), a.port().saturating_add(index as u16)),
            None => SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let shard = Spawn {
            index,
            count: n,
            threads,
            listen,
        };
        shards.push(spawn(&exe, file, shard, url, token)?);
        if let Some(bar) = &bar {
            bar.started(index + 1);
        }
    }
    Ok(shards)
}

/// One shard process to start: which, and where its endpoint listens.
struct Spawn {
    index: u32,
    count: u32,
    threads: usize,
    listen: SocketAddr,
}

fn spawn(
    exe: &PathBuf,
    file: &Path,
    shard: Spawn,
    url: &str,
    token: &TokenFile,
) -> Result<ShardProc, FleetError> {
    let Spawn {
        index,
        count,
        threads,
        listen,
    } = shard;
    let mut child = Command::new(exe)
        .arg("shard")
        .arg(file)
        .args(["--index", &index.to_string(), "--count", &count.to_string()])
        .args(["--threads", &threads.to_string()])
        .args(["--metrics-listen", &listen.to_string()])
        .args(["--target-url", url])
        .args(["--await-start", "--linger", "10m"])
        .env_remove(var::LOADTEST)
        .env_remove(var::SERVER_METRICS_URL)
        // The path, not the token: the token stays off command lines and out of environments.
        .env(var::CONTROL_TOKEN_FILE, token.path())
        // The shard asks the kernel for SIGTERM when this process dies.
        .env(var::EXIT_WITH_PARENT, std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| FleetError::Spawn { index, source })?;
    let stderr = child.stderr.take().ok_or(FleetError::Shard {
        index,
        failure: ShardFailure::NoStderr,
    })?;
    let (tx, rx) = mpsc::channel();
    let (addr_tx, addr_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("shard-{index}-log"))
        .spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                if let Some(url) = announce::parse_loadgen_metrics(&line) {
                    let addr = url
                        .trim_start_matches("http://")
                        .trim_end_matches("/metrics");
                    let _ = addr_tx.send(addr.to_string());
                    continue;
                }
                // The machine's limits, the same for every shard here: the run checked them.
                if announce::KernelLine::parse(&line).is_some() {
                    continue;
                }
                crate::observe::terminal::eprintln_above!("[shard {index}] {line}");
                let _ = tx.send(line);
            }
        })
        .map_err(|source| FleetError::LogReader { index, source })?;
    let mut shard = ShardProc {
        index,
        child,
        client: ShardClient::new("127.0.0.1", 0, token.token().clone(), HTTP_TIMEOUT),
        log: rx,
        lost: None,
        answered: Instant::now(),
        clock: Estimator::default(),
        probed: Instant::now(),
    };
    let addr = addr_rx
        .recv_timeout(READY_TIMEOUT)
        .map_err(|_| FleetError::Shard {
            index,
            failure: ShardFailure::NoEndpoint { tail: shard.tail() },
        })?;
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| FleetError::Shard {
            index,
            failure: ShardFailure::Endpoint { addr: addr.clone() },
        })?;
    shard.client = ShardClient::new(&host, port, token.token().clone(), HTTP_TIMEOUT);
    Ok(shard)
}

/// Waits until every shard is ready, or says which could not get ready and why.
async fn await_ready(shards: &mut [ShardProc]) -> Result<(), FleetError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let mut waiting = 0;
        for s in shards.iter_mut() {
            if let Ok(Some(status)) = s.child.try_wait() {
                // A shard that cannot take its share (open files, bad input) exits at once
                // with the reason: the test's own error.
                let tail = s.tail();
                let why = tail.trim_start_matches("wsload: ").to_string();
                return Err(match status.code() {
                    Some(c) if c == i32::from(EXIT_INPUT) => {
                        FleetError::ShardRefusedInput { said: why }
                    }
                    Some(c) if c == i32::from(EXIT_MEASURED_NOTHING) => {
                        FleetError::ShardMeasuredNothing { said: why }
                    }
                    _ => FleetError::Shard {
                        index: s.index,
                        failure: ShardFailure::Exited {
                            status: status.to_string(),
                            why,
                        },
                    },
                });
            }
            if !s.client.ready().await {
                waiting += 1;
            }
        }
        if waiting == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(FleetError::NotReady {
                waiting,
                within: READY_TIMEOUT,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A server replica's counter that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {source}")]
struct Unreadable {
    url: String,
    #[source]
    source: ScrapeError,
}

/// The servers' received counters summed over every replica.
fn sum(counters: &[Counter]) -> Result<u64, Unreadable> {
    let mut total = 0;
    for c in counters {
        total += c.read().map_err(|source| Unreadable {
            url: c.url.clone(),
            source,
        })?;
    }
    Ok(total)
}

fn start_instant() -> u64 {
    crate::machine::clock::unix_ms() + LEAD.as_millis() as u64
}

/// Probes the clock of every shard still in the run `times` times in a row (the shards at
/// once); a probe that fails is only a sample missing.
async fn probe_clocks(shards: &mut [ShardProc], times: usize) {
    let live: Vec<usize> = (0..shards.len())
        .filter(|&i| shards[i].lost.is_none())
        .collect();
    for _ in 0..times {
        let samples = join_all(live.iter().map(|&i| shards[i].client.clock())).await;
        for (&i, sample) in live.iter().zip(samples) {
            match sample {
                Ok(s) => shards[i].clock.add(s),
                Err(e) => {
                    tracing::debug!(shard = shards[i].index, error = %e, "clock probe failed")
                }
            }
            shards[i].probed = Instant::now();
        }
    }
}

/// One probe of each shard whose last is [`clock::EVERY`] old: the estimates follow the
/// clocks through the run.
async fn probe_clocks_due(shards: &mut [ShardProc]) {
    if shards
        .iter()
        .any(|s| s.lost.is_none() && s.probed.elapsed() >= clock::EVERY)
    {
        probe_clocks(shards, 1).await;
    }
}

/// `shard 1 +50.012 ms ± 0.09 ms` for each shard whose clock answered.
fn clock_summary(shards: &[ShardProc]) -> String {
    let clocks: Vec<String> = shards
        .iter()
        .map(|s| match s.clock.estimate() {
            Some(c) => format!(
                "shard {} {} ± {}",
                s.index,
                wsload_report::findings::signed_ms(c.offset_micros),
                wsload_report::ms(c.uncertainty_micros as f64 / 1e6)
            ),
            None => format!("shard {} not measured", s.index),
        })
        .collect();
    clocks.join(", ")
}

/// Marks shards that exited as lost, saying so in `notes`.
fn reap(shards: &mut [ShardProc], cell: &str, notes: &mut Vec<String>) {
    for s in shards.iter_mut().filter(|s| s.lost.is_none()) {
        if let Ok(Some(status)) = s.child.try_wait() {
            let why = format!(
                "shard {} exited ({status}) during cell {cell}: its measurements are lost ({})",
                s.index,
                s.tail()
            );
            crate::observe::terminal::eprintln_above!("wsload: {why}");
            notes.push(why);
            s.lost = Some(Lost::Exited);
        }
    }
}

async fn states(shards: &[ShardProc]) -> Vec<(usize, Option<State>)> {
    let live: Vec<usize> = (0..shards.len())
        .filter(|&i| shards[i].lost.is_none())
        .collect();
    let answers = join_all(live.iter().map(|&i| shards[i].client.state())).await;
    live.into_iter()
        .zip(answers)
        .map(|(i, a)| (i, a.ok()))
        .collect()
}

async fn conduct(
    lt: &LoadTest,
    shards: &mut [ShardProc],
    counters: &[Counter],
    outline: Option<Outline>,
) -> Result<RunResult, FleetError> {
    await_ready(shards).await?;
    let urls = shards
        .iter()
        .map(|s| format!("{}/metrics", s.client.base()))
        .collect();
    let bar = FleetBar::new(outline, urls);
    let mut notes = Vec::new();
    let mut conductor = Conductor::new(&lt.spec);
    let mut received: Vec<Option<u64>> = Vec::new();
    let mut topics = TopicCounters::of(&lt.spec, counters);
    let mut topics_per_cell = Vec::new();
    if let Err(e) = topics.begin() {
        notes.push(format!("server topic counters unreadable: {e}"));
    }
    let mut connections = ConnectionCounters::of(counters);
    let mut connections_per_cell = Vec::new();
    if let Err(e) = connections.begin() {
        notes.push(format!("server connection counters unreadable: {e}"));
    }
    // No counter at all (an external server without one): what it received is unknown, not 0.
    let mut before = match sum(counters) {
        _ if counters.is_empty() => None,
        Ok(v) => Some(v),
        Err(e) => {
            notes.push(format!("server counters unreadable: {e}"));
            None
        }
    };
    let Some(mut key) = conductor.next(None) else {
        return Err(FleetError::NoCell);
    };
    probe_clocks(shards, clock::BURST).await;
    crate::observe::terminal::eprintln_above!(
        "wsload: shard clocks against this process's: {}",
        clock_summary(shards)
    );
    start(shards, &key).await?;
    if let Some(bar) = &bar {
        bar.released(&key);
    }
    loop {
        let Some(merged) = await_cell(shards, &key, &mut notes).await else {
            notes.push(format!("no shard finished cell {}", key.label));
            break;
        };
        let sent = merged.outcome.sent_with_warmup;
        let got = settle_counters(counters, &mut before, sent, &mut notes).await;
        received.resize(key.index as usize, None);
        received.push(got);
        topics_per_cell.resize(key.index as usize, None);
        topics_per_cell.push(topics.end().unwrap_or_else(|e| {
            notes.push(format!("server topic counters unreadable: {e}"));
            None
        }));
        connections_per_cell.resize(key.index as usize, None);
        connections_per_cell.push(connections.end().unwrap_or_else(|e| {
            notes.push(format!("server connection counters unreadable: {e}"));
            None
        }));
        crate::observe::terminal::eprintln_above!(
            "wsload: cell {} done on {} shard(s), start skew {:.1} ms{}",
            key.label,
            merged.shards,
            merged.start_spread_micros as f64 / 1000.0,
            got.map_or(String::new(), |r| format!(
                ", servers received {r} of {sent} sent"
            ))
        );
        let Some(next) = conductor.next(Some(&merged.outcome)) else {
            break;
        };
        key = next;
        release(shards, start_instant(), &key).await;
        if let Some(bar) = &bar {
            bar.released(&key);
        }
    }
    if let Some(bar) = bar {
        bar.finish().await;
    }
    end_all(shards).await;
    let mut result = collect(shards, &mut notes).await?;
    result.notes.append(&mut notes);
    assemble::topics(&mut result, &topics_per_cell);
    assemble::connections(&mut result, &connections_per_cell);
    assemble::complete(&mut result, &received, &conductor);
    Ok(result)
}

/// Starts every shard at one instant with the first cell; a shard that refuses fails the run
/// before anything is measured.
async fn start(shards: &[ShardProc], key: &CellKey) -> Result<(), FleetError> {
    let at = start_instant();
    let released = join_all(
        shards
            .iter()
            .map(|s| s.client.start(s.release_at(at), Some(key.clone()))),
    )
    .await;
    for (s, r) in shards.iter().zip(released) {
        if let Err(e) = r {
            return Err(FleetError::ShardControl {
                index: s.index,
                source: e,
            });
        }
    }
    crate::observe::terminal::eprintln_above!(
        "wsload: {} shards released at {at} (Unix ms), cell {}",
        shards.len(),
        key.label
    );
    Ok(())
}

/// Waits until every shard still in the run has finished `key`'s cell, leaving out (in
/// `notes`) those that exit or stay silent: the cell merged over them, or `None` when none
/// finished it.
async fn await_cell(
    shards: &mut [ShardProc],
    key: &CellKey,
    notes: &mut Vec<String>,
) -> Option<barrier::Merged> {
    // The instant every shard measures from, once all have opened their share: chosen once,
    // sent again to any shard that has not taken it.
    let mut measure_at: Option<u64> = None;
    loop {
        reap(shards, &key.label, notes);
        probe_clocks_due(shards).await;
        let answers = states(shards).await;
        let mut silent = false;
        for (i, answer) in &answers {
            let s = &mut shards[*i];
            if answer.is_some() {
                s.answered = Instant::now();
            } else if s.answered.elapsed() > SILENCE {
                let why = format!(
                    "shard {} did not answer for {SILENCE:?} during cell {}: left out, its measurements are lost",
                    s.index, key.label
                );
                crate::observe::terminal::eprintln_above!("wsload: {why}");
                notes.push(why);
                s.lost = Some(Lost::Silent);
            } else {
                silent = true;
            }
        }
        if silent {
            // A shard that does not answer may be busy: ask again (an exit is reaped).
            tokio::time::sleep(poll_every(shards.len())).await;
            continue;
        }
        // On this process's clock: the skew is how far apart the shards really began.
        let (positions, known): (Vec<usize>, Vec<State>) = answers
            .iter()
            .filter(|(i, _)| shards[*i].lost.is_none())
            .filter_map(|(i, s)| {
                let clock = shards[*i].clock.estimate();
                Some((*i, clock::on_conductor_clock(s.as_ref()?, clock.as_ref())))
            })
            .unzip();
        let known: Vec<&State> = known.iter().collect();
        if let Connect::Passed(c) = barrier::connected(key.index, &known) {
            if !c.waiting.is_empty() {
                let at = *measure_at.get_or_insert_with(|| {
                    let at = start_instant();
                    crate::observe::terminal::eprintln_above!(
                        "wsload: cell {}: every shard opened its share ({} connections, {} failed): measuring from {at} (Unix ms)",
                        key.label,
                        c.opened,
                        c.failed,
                    );
                    at
                });
                let waiting: Vec<usize> = c.waiting.iter().map(|&p| positions[p]).collect();
                measure(shards, &waiting, at, key).await;
            }
        }
        match barrier::evaluate(key.index, &known) {
            Barrier::Waiting => tokio::time::sleep(poll_every(shards.len())).await,
            Barrier::Passed(m) => return Some(m),
            Barrier::Over => return None,
        }
    }
}

/// What the servers received during the cell just over, once they settled.
async fn settle_counters(
    counters: &[Counter],
    before: &mut Option<u64>,
    sent: u64,
    notes: &mut Vec<String>,
) -> Option<u64> {
    let start = (*before)?;
    let mut settle = Settle::new(start, sent, Instant::now());
    loop {
        match sum(counters) {
            Ok(reading) => {
                if let Some(got) = settle.observe(reading, Instant::now()) {
                    *before = Some(reading);
                    return Some(got);
                }
            }
            Err(e) => {
                notes.push(format!("server counters unreadable: {e}"));
                *before = None;
                return None;
            }
        }
        tokio::time::sleep(settle::POLL).await;
    }
}

/// Tells the shards at `waiting` to measure `key`'s cell from `at` (Unix ms, this process's
/// clock). One that does not hear is asked again at the next poll.
async fn measure(shards: &[ShardProc], waiting: &[usize], at: u64, key: &CellKey) {
    let answers = join_all(waiting.iter().map(|&i| {
        let s = &shards[i];
        s.client.measure(s.release_at(at), key.index)
    }))
    .await;
    for (&i, a) in waiting.iter().zip(answers) {
        if let Err(e) = a {
            tracing::warn!(shard = shards[i].index, cell = %key.label, error = %e, "the measure order was not delivered; asking again");
        }
    }
}

async fn release(shards: &mut [ShardProc], at: u64, key: &CellKey) {
    let live: Vec<usize> = (0..shards.len())
        .filter(|&i| shards[i].lost.is_none())
        .collect();
    let answers = join_all(live.iter().map(|&i| {
        let s = &shards[i];
        s.client.cell(s.release_at(at), key.clone())
    }))
    .await;
    for (i, a) in live.into_iter().zip(answers) {
        if let Err(e) = a {
            tracing::warn!(shard = shards[i].index, cell = %key.label, error = %e, "the cell was not released");
            shards[i].lost = Some(Lost::NotReleased(e));
        }
    }
}

async fn end_all(shards: &mut [ShardProc]) {
    let answers = states(shards).await;
    let between: Vec<usize> = answers
        .iter()
        .filter(|(_, s)| s.as_ref().is_some_and(|s| s.state == Phase::Between))
        .map(|(i, _)| *i)
        .collect();
    let _ = join_all(between.iter().map(|&i| shards[i].client.end())).await;
}

/// Every shard's result, merged; `finish` lets each exit.
async fn collect(
    shards: &mut [ShardProc],
    notes: &mut Vec<String>,
) -> Result<RunResult, FleetError> {
    let mut merged: Option<RunResult> = None;
    for s in shards.iter_mut() {
        let deadline = Instant::now() + READY_TIMEOUT;
        let body = loop {
            if let Some(Lost::NotReleased(e)) = &s.lost {
                notes.push(format!(
                    "shard {}: a cell was not released to it ({e}): its measurements are lost",
                    s.index
                ));
            }
            if s.lost.is_some() {
                break None;
            }
            match s.client.result().await {
                Ok(Some(body)) => break Some(body),
                Ok(None) if Instant::now() < deadline => tokio::time::sleep(POLL).await,
                Ok(None) => {
                    notes.push(format!("shard {} kept no result", s.index));
                    break None;
                }
                Err(e) => {
                    notes.push(format!("shard {}: its result is lost: {e}", s.index));
                    break None;
                }
            }
        };
        let Some(body) = body else { continue };
        let mut part: RunResult =
            serde_json::from_str(&body).map_err(|source| FleetError::ShardResult {
                index: s.index,
                source,
            })?;
        if let Some(c) = s.clock.estimate() {
            part.on_conductor_clock(c);
        }
        match &mut merged {
            None => merged = Some(part),
            Some(m) => m.merge(&part).map_err(|source| FleetError::Merge {
                index: s.index,
                source,
            })?,
        }
        let _ = s.client.finish().await;
    }
    let mut merged = merged.ok_or_else(|| FleetError::NoResult {
        notes: notes.clone(),
    })?;
    merged.shard_count = shards.len() as u32;
    Ok(merged)
}
