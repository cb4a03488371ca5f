//! `wsload shard --await-start` driven over HTTP as the operator drives it, against the real
//! `wsload-server`: readiness, the common start, results, finish, linger, the open-file limit.

mod common;

use common::{Server, WATCHDOG, server_bin};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use wsload::report::RunResult;
use wsload_contract::announce::KernelLine;
use wsload_contract::env as var;
use wsload_control::protocol::{ClockReading, Phase, State};
use wsload_http::http_client::{self, Response};

const T: Duration = Duration::from_secs(5);

/// The control token every shard here is started with, and sent on every control request.
const TOKEN: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

/// The file holding [`TOKEN`], written once per test process.
fn token_file() -> &'static str {
    static FILE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("wsload-control-{}", std::process::id()));
        std::fs::write(&path, TOKEN).expect("the token file");
        path.display().to_string()
    })
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn loadtest(name: &str, body: &str) -> String {
    format!(
        "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: {name}\nspec:\n{body}"
    )
}

/// Runs one request of the (async) client on a runtime of its own: the test drives the shard
/// from plain threads.
fn on_runtime<F: std::future::Future>(request: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(request)
}

/// A `wsload shard --await-start` process; killed when dropped unfinished.
struct Shard {
    child: Child,
    /// `http://127.0.0.1:PORT`, its endpoint, once it printed it.
    base: String,
    stderr: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Shard {
    /// Starts `wsload shard --await-start` with `args` and `env`, through `sh -c` with `shell`
    /// prepended when given (to set limits); waits for its endpoint address.
    fn start(args: &[&str], env: &[(&str, &str)], shell: Option<&str>) -> Shard {
        let mut cmd = common::behind(shell, env!("CARGO_BIN_EXE_wsload"));
        cmd.args(["shard", "--await-start", "--metrics-listen", "127.0.0.1:0"])
            .args(args)
            .env(var::THREADS, "2")
            .env(var::SERVER_BIN, server_bin())
            .env("RUST_LOG", "warn")
            .env(var::CONTROL_TOKEN_FILE, token_file())
            .env_remove(var::LOADTEST)
            .env_remove(var::AWAIT_START)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("wsload starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("shard: {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shard = Shard {
            child,
            base: String::new(),
            stderr: rx,
            log: Vec::new(),
        };
        let deadline = Instant::now() + WATCHDOG;
        while shard.base.is_empty() {
            let line = shard
                .stderr
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the shard prints its endpoint");
            if let Some(url) = wsload_contract::announce::parse_loadgen_metrics(&line) {
                shard.base = url.trim_end_matches("/metrics").to_string();
            }
            shard.log.push(line);
        }
        shard
    }

    fn get(&self, path: &str) -> Response {
        let client = http_client::Client::new();
        let url = format!("{}{path}", self.base);
        on_runtime(client.get_bearer(&url, TOKEN, T)).expect("the shard answers")
    }

    fn post(&self, path: &str, body: &str) -> Response {
        let client = http_client::Client::new();
        let url = format!("{}{path}", self.base);
        on_runtime(client.post_json_bearer(&url, body, TOKEN, T)).expect("the shard answers")
    }

    fn state(&self) -> State {
        let r = self.get("/control");
        assert_eq!(r.status, 200, "{}", r.body);
        serde_json::from_str(&r.body).expect("a control state")
    }

    fn start_at(&self, at: u64) -> (u16, State) {
        let r = self.post("/control/start", &format!("{{\"startAt\": {at}}}"));
        (
            r.status,
            serde_json::from_str(&r.body).expect("a control state"),
        )
    }

    /// Polls `/readyz` until 200, within the watchdog.
    fn await_ready(&self) {
        let deadline = Instant::now() + WATCHDOG;
        while self.get("/readyz").status != 200 {
            assert!(Instant::now() < deadline, "the shard never got ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls `/control` until the shard finished cell `index` and waits between cells.
    fn await_between(&self, index: u32) -> State {
        let deadline = Instant::now() + WATCHDOG;
        loop {
            let state = self.state();
            if state.state == Phase::Between && state.cells_done == index + 1 {
                return state;
            }
            assert!(
                matches!(state.state, Phase::Armed | Phase::Running | Phase::Between),
                "{state:?}"
            );
            assert!(
                Instant::now() < deadline,
                "cell {index} never ended: {state:?}"
            );
            assert!(
                state.state != Phase::Running
                    || state
                        .connected
                        .as_ref()
                        .is_none_or(|c| c.index != index || c.measure_at.is_some()),
                "{state:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls `/control` until the shard opened its share of cell `index` and waits to be told
    /// when to measure.
    fn await_connected(&self, index: u32) -> State {
        let deadline = Instant::now() + WATCHDOG;
        loop {
            let state = self.state();
            if state.state == Phase::Connected {
                let c = state.connected.as_ref().expect("a connect summary");
                assert_eq!((c.index, c.measure_at), (index, None), "{state:?}");
                return state;
            }
            assert!(
                matches!(state.state, Phase::Armed | Phase::Running),
                "{state:?}"
            );
            assert!(
                Instant::now() < deadline,
                "cell {index} never connected: {state:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn measure(&self, index: u32, at: u64) -> (u16, State) {
        let r = self.post(
            "/control/measure",
            &format!("{{\"cell\": {index}, \"startAt\": {at}}}"),
        );
        (
            r.status,
            serde_json::from_str(&r.body).expect("a control state"),
        )
    }

    /// Polls `/control/result` until it answers 200, within the watchdog.
    fn await_result(&self) -> (RunResult, String) {
        let deadline = Instant::now() + WATCHDOG;
        loop {
            let r = self.get("/control/result");
            if r.status == 200 {
                let result = serde_json::from_str(&r.body).expect("a RunResult");
                return (result, r.body);
            }
            assert_eq!(r.status, 409, "{}", r.body);
            assert!(Instant::now() < deadline, "no result within the watchdog");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for a line of its log matching `pred`, within the watchdog.
    fn await_log(&mut self, pred: impl Fn(&str) -> bool) -> String {
        if let Some(l) = self.log.iter().find(|l| pred(l)) {
            return l.clone();
        }
        let deadline = Instant::now() + WATCHDOG;
        loop {
            let line = self
                .stderr
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("no such line in {:?}", self.log));
            self.log.push(line.clone());
            if pred(&line) {
                return line;
            }
        }
    }

    /// Waits for the exit, at most `within`.
    fn exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                self.log.extend(self.stderr.try_iter());
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the shard did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Shards 0 and 1 of `doc` (given in the environment, as in a pod), ready to be started.
fn two_ready_shards(doc: &str) -> Vec<Shard> {
    let shards: Vec<Shard> = (0..2)
        .map(|i| {
            let index = i.to_string();
            Shard::start(
                &["--index", &index, "--count", "2"],
                &[(var::LOADTEST, doc)],
                None,
            )
        })
        .collect();
    for s in &shards {
        s.await_ready();
    }
    shards
}

/// As the conductor does: once every shard opened its share of cell `index`, tells all to
/// measure from one instant.
fn measure_together(shards: &[Shard], index: u32) {
    measure_apart(shards, index, &[]);
}

/// [`measure_together`], shard i told to measure `late_ms[i]` ms after the others (0 past
/// the list's end).
fn measure_apart(shards: &[Shard], index: u32, late_ms: &[u64]) {
    for s in shards {
        s.await_connected(index);
    }
    let common = unix_ms() + 200;
    for (i, s) in shards.iter().enumerate() {
        let at = common + late_ms.get(i).copied().unwrap_or(0);
        let (status, state) = s.measure(index, at);
        assert_eq!(status, 202, "{state:?}");
        assert_eq!(state.state, Phase::Running);
        assert_eq!(state.connected.and_then(|c| c.measure_at), Some(at));
    }
}

/// What a one-shot process (`wsload shard` that fails at once) exits with and prints.
fn run_shard(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wsload"));
    cmd.arg("shard")
        .args(args)
        .env(var::CONTROL_TOKEN_FILE, token_file())
        .env_remove(var::LOADTEST)
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("wsload runs");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    eprintln!("exit {:?}: {err}", o.status.code());
    (o.status.code(), err)
}

/// A shard says at start-up what it runs under (a pod's image has no shell to look with): its
/// spec's sysctls as in force where it runs, a warning for one that is not as asked, and its
/// open-file limits.
#[test]
fn a_shard_logs_the_sysctls_of_its_spec_as_in_force() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .expect("every Linux has the port range");
    let range = range.split_whitespace().collect::<Vec<_>>().join(" ");
    // Asked for, not set: outside a pod nothing applies loadgen.sysctls.
    let doc = loadtest(
        "kernel",
        "  target: {url: \"ws://127.0.0.1:9/\"}\n  scenario: pingLatency\n  connections: [1]\n  ping: {count: 1}\n  loadgen:\n    sysctls: {net.ipv4.ip_local_port_range: \"1 2\"}\n",
    );
    let mut s = Shard::start(
        &[],
        &[
            (var::LOADTEST, doc.as_str()),
            (var::SHARD_INDEX, "0"),
            (var::SHARD_COUNT, "1"),
        ],
        None,
    );
    let line = s.await_log(|l| KernelLine::parse(l).is_some());
    let kernel = KernelLine::parse(&line).expect("the kernel line");
    assert_eq!(
        kernel.sysctls,
        [("net.ipv4.ip_local_port_range".to_string(), Some(range))]
    );
    let (soft, hard) = kernel.open_files;
    assert!(soft > 0 && soft <= hard, "{line}");
    s.await_log(|l| l.contains("not in force") && l.contains("net.ipv4.ip_local_port_range"));
}

#[test]
fn shards_start_together_hand_over_results_and_exit_when_finished() {
    let server = Server::start(&[]);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("wsload-control-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let doc = loadtest(
        "together",
        &format!(
            "  target: {{url: {}/}}\n  serverMetrics: {{url: {}}}\n  scenario: pingLatency\n  connections: [21]\n  ping: {{count: 5}}\n  shards: 2\n",
            server.ws, server.metrics
        ),
    );
    let file = dir.join("together.yaml");
    std::fs::write(&file, &doc).expect("write spec");
    // Shard 0 reads a file; shard 1 gets the LoadTest in the environment, as in a pod.
    let shards = [
        Shard::start(
            &[
                file.to_str().expect("utf-8 path"),
                "--index",
                "0",
                "--count",
                "2",
            ],
            &[],
            None,
        ),
        Shard::start(
            &[],
            &[
                (var::LOADTEST, doc.as_str()),
                (var::SHARD_INDEX, "1"),
                (var::SHARD_COUNT, "2"),
            ],
            None,
        ),
    ];
    for s in &shards {
        s.await_ready();
        assert_eq!(s.state(), State::default(), "waiting, nothing else");
        let early = s.get("/control/result");
        assert_eq!(early.status, 409);
        assert!(early.body.contains("\"waiting\""), "{}", early.body);
    }
    assert_eq!(
        server.metric("wsload_server_connections_accepted_total", &[]),
        0,
        "no load before the start"
    );

    let start_at = unix_ms() + 500;
    for s in &shards {
        let (status, state) = s.start_at(start_at);
        assert_eq!(status, 202);
        assert_eq!(state.start_at, Some(start_at));
        assert!(matches!(
            state.state,
            Phase::Armed | Phase::Running | Phase::Done
        ));
        // The operator retries: the same instant is a no-op, another one a conflict.
        assert_eq!(s.start_at(start_at).0, 202);
        let (status, state) = s.start_at(start_at + 1000);
        assert_eq!(status, 409);
        assert_eq!(state.start_at, Some(start_at));
    }

    // Each shard of two waits, its share open, until told when to measure.
    measure_together(&shards, 0);
    // After its cell, each shard waits for the conductor: no result until the end.
    let mut attempted = Vec::new();
    for s in &shards {
        let state = s.await_between(0);
        let cell = state.last_cell.expect("the cell's summary");
        assert_eq!(cell.index, 0);
        assert!(cell.started_at_micros >= start_at * 1000, "{cell:?}");
        attempted.push(cell.attempted);
        assert_eq!(s.get("/control/result").status, 409);
    }
    assert_eq!(attempted, [11, 10]);
    for s in &shards {
        let r = s.post("/control/end", "{}");
        assert_eq!(r.status, 202, "{}", r.body);
        // The conductor retries: the same end again is a no-op.
        assert_eq!(s.post("/control/end", "{}").status, 202);
    }
    let mut parts = Vec::new();
    for s in &shards {
        let (result, _) = s.await_result();
        let state = s.state();
        assert_eq!(state.state, Phase::Done, "{state:?}");
        assert_eq!(state.note, None, "the start was in the future: {state:?}");
        let started = state.started_at_micros.expect("startedAtMicros");
        let finished = state.finished_at_micros.expect("finishedAtMicros");
        // Never before the common instant, and soon after it. Loose: two cores run both
        // shards, the server and the test.
        let late_ms = (started as f64 - start_at as f64 * 1000.0) / 1000.0;
        eprintln!(
            "shard {:?} started {late_ms:.3} ms after startAt",
            result.shards
        );
        assert!(
            (0.0..100.0).contains(&late_ms),
            "started {late_ms} ms after startAt"
        );
        assert!(finished > started);
        let info = &result.shard_info;
        assert_eq!(info.len(), 1);
        assert_eq!(
            (info[0].started_at_micros, info[0].finished_at_micros),
            (started, finished)
        );
        assert_eq!(info[0].error, None);
        parts.push(result);
    }
    assert_eq!(parts[0].shards, [0]);
    assert_eq!(parts[1].shards, [1]);
    let connected: Vec<u64> = parts
        .iter()
        .map(|p| p.cells[0].measure.counts.connected)
        .collect();
    assert_eq!(connected, [11, 10]);
    let mut merged = parts[0].clone();
    merged.merge(&parts[1]).expect("the shards merge");
    let m = &merged.cells[0];
    assert_eq!(m.measure.counts.sent, 105);
    assert_eq!(m.measure.counts.lost, 0);
    assert_eq!(m.measure.hists.rtt.len(), 105);
    let skew = merged.start_skew_micros().expect("two shards' starts");
    eprintln!("start skew {skew} us");
    assert!(skew < 100_000, "start skew {skew} us");
    assert_eq!(
        server.metric("wsload_server_messages_received_total", &[]),
        m.measure.counts.sent_with_warmup
    );

    for mut s in shards {
        let r = s.post("/control/finish", "{}");
        assert_eq!(r.status, 200, "{}", r.body);
        let status = s.exit(Duration::from_secs(5));
        assert_eq!(status.code(), Some(0), "{:?}", s.log);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cell's skew is how far apart the shards began measuring it: a shard released late but
/// measuring with the others adds none (it opened its share before the measure instant), and a
/// shard told to measure late shows by as much.
#[test]
fn a_late_release_is_absorbed_by_the_measure_instant_and_a_late_measure_shows_in_the_skew() {
    let server = Server::start(&[]);
    let doc = loadtest(
        "cells",
        &format!(
            "  target: {{url: {}/}}\n  scenario: pingLatency\n  connections: [4, 6]\n  ping: {{count: 3}}\n  shards: 2\n",
            server.ws
        ),
    );
    let shards = two_ready_shards(&doc);
    // Shard 1 is released 400 ms after shard 0 (a slow node, a late POST) for cell 0, and
    // both measure from one instant...
    let at = unix_ms() + 300;
    assert_eq!(shards[0].start_at(at).0, 202);
    assert_eq!(shards[1].start_at(at + 400).0, 202);
    measure_together(&shards, 0);
    for s in &shards {
        s.await_between(0);
    }
    // ...then both are released together for cell 1, which the conductor names, and shard 1
    // is told to measure 400 ms after shard 0.
    let at = unix_ms() + 300;
    let order = format!(
        "{{\"startAt\": {at}, \"cell\": {{\"index\": 1, \"label\": \"6\", \"connections\": 6, \"size\": 64, \"format\": \"json\"}}}}"
    );
    for s in &shards {
        let r = s.post("/control/cell", &order);
        assert_eq!(r.status, 202, "{}", r.body);
    }
    measure_apart(&shards, 1, &[0, 400]);
    for s in &shards {
        s.await_between(1);
        assert_eq!(s.post("/control/end", "{}").status, 202);
    }
    let mut parts = shards.iter().map(|s| s.await_result().0);
    let mut merged = parts.next().expect("shard 0");
    for p in parts {
        merged.merge(&p).expect("the shards merge");
    }
    let skew: Vec<f64> = merged
        .cells
        .iter()
        .map(|c| c.shard_skew_ms().expect("a skew per cell"))
        .collect();
    eprintln!("per-cell skew {skew:?} ms");
    assert!(skew[0] < 100.0, "{skew:?}");
    // Instants are whole milliseconds and each start lands a fraction of one after its own.
    assert!((390.0..600.0).contains(&skew[1]), "{skew:?}");
    assert_eq!(merged.cells[1].measure.counts.connected, 6);
    assert!(merged.render().contains("start skew per cell"));
    for s in &shards {
        assert_eq!(s.post("/control/finish", "{}").status, 200);
    }
}

#[test]
fn a_late_start_runs_at_once_and_an_unclaimed_result_lingers_out() {
    let server = Server::start(&[]);
    let doc = loadtest(
        "late",
        &format!(
            "  target: {{url: {}/}}\n  scenario: pingLatency\n  connections: [3]\n  ping: {{count: 2}}\n  thresholds: [\"rtt.p99 < 1us\"]\n",
            server.ws
        ),
    );
    let mut s = Shard::start(
        &["--index", "0", "--count", "1", "--linger", "1500ms"],
        &[(var::LOADTEST, doc.as_str())],
        None,
    );
    s.await_ready();
    let (status, state) = s.start_at(unix_ms() - 2000);
    assert_eq!(status, 202);
    let note = state.note.expect("the state says the start was late");
    assert!(note.contains("in the past"), "{note}");
    s.await_between(0);
    assert_eq!(s.post("/control/end", "{}").status, 202);
    let (result, _) = s.await_result();
    assert_eq!(result.cells[0].measure.counts.sent, 6);
    assert!(result.notes.iter().any(|n| n.contains("in the past")));
    // A failed threshold is the operator's to judge: the shard's result carries the verdict,
    // its exit code does not.
    assert!(result.verdict.as_ref().is_some_and(|v| !v.passed));
    let done = Instant::now();
    let status = s.exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{:?}", s.log);
    assert!(
        done.elapsed() >= Duration::from_millis(1000),
        "exited before --linger: {:?}",
        done.elapsed()
    );
}

/// The clock test hook moves what the shard's clock endpoint answers and what the shard stamps
/// alike: released at an instant of its own clock, it begins then and says so on that clock.
#[test]
fn the_clock_hook_shifts_the_clock_endpoint_and_the_stamps_alike() {
    let server = Server::start(&[]);
    let doc = loadtest(
        "clock",
        &format!(
            "  target: {{url: {}/}}\n  scenario: pingLatency\n  connections: [2]\n  ping: {{count: 2}}\n",
            server.ws
        ),
    );
    let shift_ms: i64 = -30_000;
    let s = Shard::start(
        &["--index", "1", "--count", "2", "--linger", "1s"],
        &[
            (var::LOADTEST, doc.as_str()),
            (var::CLOCK_SHIFT_MS, "0=5,1=-30000"),
        ],
        None,
    );
    s.await_ready();
    let before = unix_ms() * 1000;
    let r = s.get("/control/clock");
    let after = unix_ms() * 1000 + 999;
    assert_eq!(r.status, 200, "{}", r.body);
    let reading: ClockReading = serde_json::from_str(&r.body).expect("a clock reading");
    let offset = reading.unix_micros as i64 - ((before + after) / 2) as i64;
    let bound = (after - before) / 2 + 1_000;
    assert!(
        (offset - shift_ms * 1000).unsigned_abs() <= bound,
        "offset {offset} us, bound {bound} us"
    );
    assert_eq!(s.post("/control/clock", "{}").status, 405);
    // 300 ms ahead on the shard's clock: in time, not "in the past" by 30 s.
    let at = (unix_ms() as i64 + shift_ms + 300) as u64;
    let (status, state) = s.start_at(at);
    assert_eq!((status, state.note), (202, None));
    let state = s.await_between(0);
    let started = state.started_at_micros.expect("a start");
    assert!(
        (at * 1000..at * 1000 + 5_000_000).contains(&started),
        "began at {started}, released for {at} (ms)"
    );
    let cell = state.last_cell.expect("the cell");
    assert!(cell.finished_at_micros + 20_000_000 < unix_ms() * 1000);
    assert_eq!(s.post("/control/end", "{}").status, 202);
    let (result, _) = s.await_result();
    assert!(result.shard_info[0].started_at_micros < (at + 5_000) * 1000);
    // A value that does not parse stops the shard before anything runs.
    let (code, err) = run_shard(
        &["--await-start", "--index", "0", "--count", "1"],
        &[(var::LOADTEST, doc.as_str()), (var::CLOCK_SHIFT_MS, "soon")],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains(var::CLOCK_SHIFT_MS), "{err}");
}

#[test]
fn the_environment_names_what_is_wrong_with_it() {
    let bad = loadtest(
        "bad",
        "  target: {url: ws://127.0.0.1:9/}\n  scenario: throughput\n  connections: [ten]\n",
    );
    let args = ["--await-start", "--index", "0", "--count", "1"];
    let (code, err) = run_shard(&args, &[(var::LOADTEST, &bad)]);
    assert_eq!(code, Some(2));
    assert!(err.contains(&format!("${}", var::LOADTEST)), "{err}");
    assert!(err.contains("spec.connections[0]"), "{err}");
    let (code, err) = run_shard(&args, &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains(var::LOADTEST), "{err}");
    let (code, err) = run_shard(&args, &[(var::LOADTEST, "  ")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("is empty"), "{err}");
}

/// A shard nobody could conduct does not start: without a token file, or with a file that
/// holds no token, it stops at once, naming the variable (and not the file's content).
#[test]
fn a_shard_under_control_needs_its_token() {
    let doc = loadtest(
        "tokenless",
        "  target: {url: ws://127.0.0.1:9/}\n  scenario: throughput\n  connections: [1]\n",
    );
    let args = ["--await-start", "--index", "0", "--count", "1"];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wsload"));
    cmd.arg("shard")
        .args(args)
        .env(var::LOADTEST, &doc)
        .env_remove(var::CONTROL_TOKEN_FILE)
        .stdin(Stdio::null());
    let o = cmd.output().expect("wsload runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(var::CONTROL_TOKEN_FILE), "{err}");
    let short = std::env::temp_dir().join(format!("wsload-short-{}", std::process::id()));
    std::fs::write(&short, "hunter2").expect("write");
    let (code, err) = run_shard(
        &args,
        &[
            (var::LOADTEST, &doc),
            (var::CONTROL_TOKEN_FILE, &short.display().to_string()),
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(var::CONTROL_TOKEN_FILE), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    let _ = std::fs::remove_file(&short);
}

#[test]
fn the_soft_open_file_limit_is_raised_and_a_share_above_the_hard_one_refused() {
    // Nothing listens on port 9: the shard only has to get ready, not to connect.
    let doc = loadtest(
        "many",
        "  target: {url: \"ws://127.0.0.1:9/\"}\n  scenario: connectionStorm\n  connections: [1000]\n",
    );
    let mut s = Shard::start(
        &["--index", "0", "--count", "1"],
        &[(var::LOADTEST, doc.as_str()), ("RUST_LOG", "info")],
        Some("ulimit -Sn 256 && ulimit -Hn 2048"),
    );
    s.await_ready();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", s.child.id()))
        .expect("/proc/PID/limits");
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("an open-files line");
    let numbers: Vec<&str> = open_files.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers, ["2048", "2048"], "{open_files}");
    s.await_log(|l| l.contains("raised the soft open-file limit"));
    // A pod deletion: SIGTERM ends a waiting shard at once, not after the grace period.
    common::signal(s.child.id(), "TERM");
    let status = s.exit(Duration::from_secs(5));
    assert_eq!(status.code(), Some(143));

    // A hard limit short of the share: refused before any load, with the numbers and the fix.
    let mut s = Shard::start(
        &["--index", "0", "--count", "1"],
        &[(var::LOADTEST, doc.as_str())],
        Some("ulimit -Sn 256 && ulimit -Hn 512"),
    );
    let status = s.exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(2), "{:?}", s.log);
    let log = s.log.join("\n");
    for part in [
        "shard 0 of 1 must open 1000 connections",
        "only 512 files (ulimit -n 512, hard 512",
        "to at least 1064",
        "spec.shards: 3 or more",
    ] {
        assert!(log.contains(part), "{part:?} not in {log}");
    }
}

/// A shard of several holds its share open and measures nothing until the conductor says
/// every shard's is open: N connections are then held at once, however long each shard took.
/// The order is taken once, for the cell the shard waits on; a retry is answered alike.
#[test]
fn a_shard_of_several_measures_only_once_told_every_share_is_open() {
    let server = Server::start(&[]);
    let doc = loadtest(
        "rendezvous",
        &format!(
            "  target: {{url: {}/}}\n  serverMetrics: {{url: {}}}\n  scenario: sustainedHold\n  connections: [20]\n  duration: 1s\n  ping: {{interval: 200ms, timeout: 1s}}\n  shards: 2\n",
            server.ws, server.metrics
        ),
    );
    let shards = two_ready_shards(&doc);
    // Shard 1 is released 1.5 s after shard 0: shard 0 waits for it, its share held open.
    let at = unix_ms() + 200;
    assert_eq!(shards[0].start_at(at).0, 202);
    let waiting = shards[0].await_connected(0);
    assert_eq!(
        waiting.connected.map(|c| (c.opened, c.failed)),
        Some((10, 0))
    );
    // Not a conductor's word yet: an order for another cell is refused, and so is one to a
    // shard still connecting.
    assert_eq!(shards[0].measure(1, unix_ms()).0, 409);
    assert_eq!(shards[1].start_at(unix_ms() + 1_500).0, 202);
    assert_eq!(shards[1].measure(0, unix_ms()).0, 409);
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(
        shards[0].state().state,
        Phase::Connected,
        "shard 0 went on alone"
    );
    assert_eq!(
        server.metric("wsload_server_connections_active", &[]),
        10,
        "shard 0's share is held while it waits"
    );
    shards[1].await_connected(0);
    assert_eq!(server.metric("wsload_server_connections_active", &[]), 20);
    let at = unix_ms() + 300;
    for s in &shards {
        assert_eq!(s.measure(0, at).0, 202);
        // A retry is answered alike; another instant for the same cell is a conflict.
        assert_eq!(s.measure(0, at).0, 202);
        let (status, state) = s.measure(0, at + 1);
        assert_eq!(status, 409);
        assert_eq!(state.connected.and_then(|c| c.measure_at), Some(at));
    }
    let mut ended = Vec::new();
    for s in &shards {
        let state = s.await_between(0);
        let cell = state.last_cell.expect("the cell's summary");
        assert_eq!((cell.connected, cell.failed), (10, 0));
        ended.push(cell.finished_at_micros);
        assert_eq!(s.post("/control/end", "{}").status, 202);
    }
    // Both held from the same instant for the same 1 s: neither ended before it was over.
    for end in ended {
        assert!(end >= (at + 1_000) * 1000, "a shard ended its hold early");
    }
    let mut parts = shards.iter().map(|s| s.await_result().0);
    let mut merged = parts.next().expect("shard 0");
    for p in parts {
        merged.merge(&p).expect("the shards merge");
    }
    let c = &merged.cells[0].measure.counts;
    assert_eq!((c.connected, c.dropped_total(), c.lost), (20, 0, 0));
    for s in &shards {
        assert_eq!(s.post("/control/finish", "{}").status, 200);
    }
}
