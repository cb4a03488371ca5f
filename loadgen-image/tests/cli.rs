//! The `wsload` binary against the real `wsload-server`: shards and their merge, exit codes,
//! and the coordinated-omission correction when the load generator itself stalls.

mod common;

use common::{Server, WATCHDOG, server_bin, settle};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use wsload::measure::{ConnectError, Dropped, MAX_REPLIES_PER_SECOND};
use wsload::report::RunResult;
use wsload_contract::env as var;

/// A scratch directory under cargo's target tmp dir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("wsload-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write scratch file");
        p
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `wsload` process; killed when dropped unfinished (a failed test).
struct Wsload {
    child: Child,
    stdout: Option<std::thread::JoinHandle<Vec<u8>>>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
}

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

impl Wsload {
    fn start(args: &[&str]) -> Wsload {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wsload"))
            .args(args)
            .env(var::SERVER_BIN, server_bin())
            .env(var::THREADS, "2")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("wsload starts");
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        Wsload {
            child,
            stdout,
            stderr,
        }
    }

    /// Sends a signal by name; the child is not reaped before `finish`, so the pid is ours.
    fn signal(&self, sig: &str) {
        common::signal(self.child.id(), sig);
    }

    /// Stops the process; returns once all its threads are stopped.
    fn stop(&self) -> Instant {
        common::stop(self.child.id())
    }

    /// Waits for the exit (at most the watchdog), prints its output, returns it.
    fn finish(mut self) -> Output {
        let deadline = Instant::now() + WATCHDOG;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for wsload") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "wsload exits within the watchdog"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
            h.and_then(|h| h.join().ok()).unwrap_or_default()
        };
        let out = Output {
            status,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
        };
        eprintln!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Wsload {
    fn drop(&mut self) {
        // A no-op once the child was reaped by `finish`.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wsload(args: &[&str]) -> Output {
    Wsload::start(args).finish()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn result(path: &Path) -> RunResult {
    let text = std::fs::read_to_string(path).expect("the result file was written");
    serde_json::from_str(&text).expect("a wsload result")
}

fn loadtest(name: &str, body: &str) -> String {
    format!(
        "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: {name}\nspec:\n{body}"
    )
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[test]
fn shards_merge_exactly() {
    let server = Server::start(&[]);
    let dir = Scratch::new("shards");
    let spec = dir.file(
        "ping.yaml",
        &loadtest(
            "sharded",
            &format!(
                "  target: {{url: {}/}}\n  serverMetrics: {{url: {}}}\n  scenario: pingLatency\n  connections: [21]\n  ping: {{count: 5}}\n  shards: 2\n",
                server.ws, server.metrics
            ),
        ),
    );
    let spec = spec.to_str().expect("utf-8 path");
    let outs = [dir.path("s0.json"), dir.path("s1.json")];
    // Both shards start together, as pods do behind the operator's barrier.
    let start = (unix_ms() + 1500).to_string();
    let shards: Vec<Wsload> = outs
        .iter()
        .enumerate()
        .map(|(i, out)| {
            Wsload::start(&[
                "shard",
                spec,
                "--index",
                &i.to_string(),
                "--count",
                "2",
                "--start-at",
                &start,
                // Shards serve /metrics on 9464 by default; two at once need their own ports.
                "--metrics-listen",
                "127.0.0.1:0",
                "--out",
                out.to_str().expect("utf-8 path"),
            ])
        })
        .collect();
    for s in shards {
        let o = s.finish();
        assert_eq!(o.status.code(), Some(0));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.lines().any(|l| {
                wsload_contract::announce::parse_loadgen_metrics(l)
                    .is_some_and(|u| u.starts_with("http://127.0.0.1:"))
            }),
            "a shard serves /metrics: {err}"
        );
    }
    let parts: Vec<RunResult> = outs.iter().map(|p| result(p)).collect();
    // 21 connections split 11 + 10, each shard naming itself.
    assert_eq!(parts[0].shards, [0]);
    assert_eq!(parts[1].shards, [1]);
    let conns: Vec<u64> = parts
        .iter()
        .map(|p| p.cells[0].measure.counts.connected)
        .collect();
    assert_eq!(conns, [11, 10]);

    let merged_path = dir.path("merged.json");
    // One as `--out` wrote it, one gzip-compressed as the operator stores results.
    let packed = dir.path("shard-1.json.gz");
    let json = std::fs::read(&outs[1]).expect("read shard 1");
    std::fs::write(
        &packed,
        wsload_report::stored::compress(&json).expect("compress"),
    )
    .expect("write");
    let o = wsload(&[
        "merge",
        outs[0].to_str().expect("utf-8 path"),
        packed.to_str().expect("utf-8 path"),
        "--out",
        merged_path.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let merged = result(&merged_path);
    assert_eq!(merged.shards, [0, 1]);
    assert_eq!(merged.shard_count, 2);
    let m = &merged.cells[0];
    let sum = |f: &dyn Fn(&RunResult) -> u64| parts.iter().map(f).sum::<u64>();
    assert_eq!(m.measure.counts.connected, 21);
    assert_eq!(
        m.measure.counts.connected,
        sum(&|p| p.cells[0].measure.counts.connected)
    );
    assert_eq!(
        m.measure.counts.sent,
        sum(&|p| p.cells[0].measure.counts.sent)
    );
    assert_eq!(m.measure.counts.sent, 105);
    // Histograms add exactly, count for count.
    assert_eq!(
        m.measure.hists.rtt.len(),
        sum(&|p| p.cells[0].measure.hists.rtt.len())
    );
    assert_eq!(m.figures.rtt.count, 105);
    assert_eq!(m.measure.hists.connect.len(), 21);
    let max_of_parts = parts
        .iter()
        .map(|p| p.cells[0].figures.rtt.max)
        .fold(0.0, f64::max);
    assert_eq!(m.figures.rtt.max, max_of_parts);
    // The server got exactly what both shards sent.
    let sent_all = sum(&|p| p.cells[0].measure.counts.sent_with_warmup);
    assert_eq!(
        server.metric("wsload_server_messages_received_total", &[]),
        sent_all
    );
    // Shards without a conductor never judge delivery: each saw the others' messages too.
    assert_eq!(m.server_received, None);

    // The merge shown again: the same tables as `merge` printed, from plain or compressed
    // JSON, and as one HTML page carrying the spec the shards ran.
    let html = dir.path("merged.html");
    let again = wsload(&[
        "report",
        merged_path.to_str().expect("utf-8 path"),
        "--html",
        html.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(stdout(&again), stdout(&o));
    let page = std::fs::read_to_string(&html).expect("the HTML report");
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..80]);
    assert!(page.contains("<svg"), "a chart");
    assert!(page.contains("Test spec"), "the spec section");
    assert!(merged.spec.is_some(), "each shard records its spec");
    let o = wsload(&["report", packed.to_str().expect("utf-8 path")]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("shards [1] of 2"), "{}", stdout(&o));

    // A shard merged twice is refused, naming the shard.
    let o = wsload(&[
        "merge",
        outs[0].to_str().expect("utf-8 path"),
        outs[0].to_str().expect("utf-8 path"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("shard 0 is in both results"));
    // So is a file that is not a result.
    let junk = dir.file("junk.json", "{\"hello\": 1}");
    let o = wsload(&["merge", junk.to_str().expect("utf-8 path")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a wsload result"));
}

#[test]
fn thresholds_decide_the_exit_code() {
    let server = Server::start(&[]);
    let dir = Scratch::new("thresholds");
    let body = |thresholds: &str| {
        loadtest(
            "judged",
            &format!(
                "  target: {{url: {}/}}\n  scenario: pingLatency\n  connections: [5]\n  ping: {{count: 5}}\n  thresholds: {thresholds}\n",
                server.ws
            ),
        )
    };
    let pass = dir.file("pass.yaml", &body("[\"loss < 1%\"]"));
    let o = wsload(&["run", pass.to_str().expect("utf-8 path")]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Verdict: PASS"));

    // No loopback round trip takes under a microsecond.
    let fail = dir.file("fail.yaml", &body("[\"loss < 1%\", \"rtt.p99 < 1us\"]"));
    let out = dir.path("fail.json");
    let o = wsload(&[
        "run",
        fail.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(text.contains("PASS loss < 1%"), "{text}");
    assert!(text.contains("FAIL rtt.p99 < 1us"), "{text}");
    assert!(text.contains("Verdict: FAIL"), "{text}");
    // The failed run's result is still written, with its verdict.
    let r = result(&out);
    let verdict = r.verdict.expect("judged");
    assert!(!verdict.passed);
    assert_eq!(verdict.checks.iter().filter(|c| !c.passed).count(), 1);
}

/// A hold shorter than its ping interval sends no ping: its connections were held (survival
/// measured), its loss never was. `loss < 0.1%` fails saying so, and the run exits 1 (a
/// threshold failed), not 0 as a loss of 0 out of 0 once passed, nor 4 (the cell measured
/// what sustainedHold is for).
#[test]
fn a_threshold_never_measured_fails_the_run_with_its_reason() {
    let server = Server::start(&[]);
    let dir = Scratch::new("never-measured");
    let f = dir.file(
        "hold.yaml",
        &loadtest(
            "unpinged",
            &format!(
                "  target: {{url: {}/}}\n  scenario: sustainedHold\n  connections: [3]\n  duration: 1s\n  ping: {{interval: 30s}}\n  thresholds: [\"loss < 0.1%\", \"survival > 99%\"]\n",
                server.ws
            ),
        ),
    );
    let out = dir.path("hold.json");
    let o = wsload(&[
        "run",
        f.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}{}", stderr(&o));
    assert!(
        text.contains("  FAIL loss < 0.1% [3] not measured: 0 pings were sent\n"),
        "{text}"
    );
    assert!(
        text.contains("  PASS survival > 99% [3] actual 100"),
        "{text}"
    );
    assert!(text.contains("Verdict: FAIL"), "{text}");
    let r = result(&out);
    assert_eq!(r.cells[0].measure.counts.expected, 0);
    let v = r.verdict.expect("judged");
    assert!(!v.passed && v.unmeasured.is_empty(), "{v:?}");
    let loss = &v.checks[0];
    assert_eq!(
        (loss.passed, loss.actual, loss.reason.as_deref()),
        (false, None, Some("not measured: 0 pings were sent"))
    );
}

#[test]
fn invalid_files_exit_2_naming_the_field() {
    let dir = Scratch::new("invalid");
    let cases = [
        // Validation: a value out of range.
        (
            "  target: {url: ws://127.0.0.1:9/}\n  scenario: pingLatency\n  ping: {count: 0}\n",
            "spec.ping.count",
        ),
        // Parsing: a value of the wrong type.
        (
            "  target: {url: ws://127.0.0.1:9/}\n  scenario: throughput\n  connections: [ten]\n",
            "spec.connections[0]",
        ),
        // Parsing: a misspelt field.
        (
            "  target: {url: ws://127.0.0.1:9/}\n  scenario: throughput\n  conections: [10]\n",
            "conections",
        ),
        // A threshold the scenario does not measure.
        (
            "  target: {url: ws://127.0.0.1:9/}\n  scenario: connectionStorm\n  thresholds: [\"survival > 99%\"]\n",
            "spec.thresholds[0]",
        ),
    ];
    for (i, (body, field)) in cases.iter().enumerate() {
        let f = dir.file(&format!("bad{i}.yaml"), &loadtest("bad", body));
        for cmd in ["run", "validate"] {
            let o = wsload(&[cmd, f.to_str().expect("utf-8 path")]);
            assert_eq!(o.status.code(), Some(2), "{cmd} case {i}");
            assert!(
                stderr(&o).contains(field),
                "{cmd} case {i}: {field} not named in {}",
                stderr(&o)
            );
        }
    }
    let o = wsload(&[
        "run",
        dir.path("missing.yaml").to_str().expect("utf-8 path"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot read"));
}

/// URLs the one parser refuses (`wsload_spec::target_url::CORPUS` holds them all; the API
/// server refuses them too, see operator/tests/crd_validation.rs).
const BAD_URLS: [&str; 6] = [
    "ws://127.0.0.1:99999/",
    "ws://127.0.0.1:65536/",
    "ws://127.0.0.1:abc/",
    "ws://[::1/",
    "ws://h:8080:9090/",
    "ws://h/%zz",
];

#[test]
fn a_bad_target_url_is_refused_by_validate_and_run_alike() {
    let dir = Scratch::new("bad-url");
    for (i, url) in BAD_URLS.iter().enumerate() {
        let f = dir.file(
            &format!("url{i}.yaml"),
            &loadtest(
                "url",
                &format!("  target: {{url: \"{url}\"}}\n  scenario: connectionStorm\n  connections: [1]\n"),
            ),
        );
        for cmd in ["validate", "run"] {
            let o = wsload(&[cmd, f.to_str().expect("utf-8 path")]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd} {url}: {err}");
            assert!(
                err.contains("spec.target.url")
                    && err.contains(url)
                    && err.contains("port 1-65535"),
                "{cmd} {url}: {err}"
            );
        }
    }
    // A URL given at run time (as the operator gives shards the managed server's) goes
    // through the same parser: never port 80 for a port it could not read.
    let f = dir.file(
        "good.yaml",
        &loadtest("url", "  target: {url: \"ws://127.0.0.1:1/\"}\n  scenario: connectionStorm\n  connections: [1]\n"),
    );
    let o = wsload(&[
        "shard",
        f.to_str().expect("utf-8 path"),
        "--index",
        "0",
        "--count",
        "1",
        "--metrics-listen",
        "127.0.0.1:0",
        "--target-url",
        "ws://127.0.0.1:99999/",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("spec.target.url") && err.contains("port \"99999\""),
        "{err}"
    );
}

/// Issue 39's loop: a reply `t${sendTime}` to any message starting `t17` and a digit, against an
/// echo server. `wsload validate` cannot see the loop (it fills `${sendTime}` with a sample),
/// so the run must: each connection ends as `reply_loop` once its replies pass the bound, the
/// rule named, and the run exits 4 (no connection survived to measure). Before: 27.0K replies
/// in 4 s over 2 connections, exit 0, no finding.
#[test]
fn a_reply_loop_validate_cannot_see_ends_at_run_time() {
    let server = Server::start(&[]);
    let dir = Scratch::new("reply-loop");
    let f = dir.file(
        "loop.yaml",
        &loadtest(
            "loop",
            &format!(
                "  target: {{url: {}/}}\n  scenario: sustainedHold\n  connections: [2]\n  duration: 4s\n  conversation:\n    open:\n      - {{name: kick, send: {{text: 't${{sendTime}}'}}}}\n    replies:\n      - {{when: {{regex: '^t17[1-9]'}}, send: {{text: 't${{sendTime}}'}}}}\n",
                server.ws
            ),
        ),
    );
    let path = f.to_str().expect("utf-8 path");
    let o = wsload(&["validate", path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = dir.path("loop.json");
    let o = wsload(&["run", path, "--out", out.to_str().expect("utf-8 path")]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(4), "{text}{}", stderr(&o));
    assert!(text.contains("reply_loop: 2 of 2 connections"), "{text}");
    let r = result(&out);
    let n = &r.cells[0].measure.counts;
    assert_eq!(n.dropped, [(Dropped::ReplyLoop, 2)].into(), "{n:?}");
    assert_eq!(n.replies, 2 * u64::from(MAX_REPLIES_PER_SECOND), "{n:?}");
    assert!(
        n.evidence["reply_loop"].starts_with("replies[0] (when "),
        "{:?}",
        n.evidence
    );
}

/// `wsload --help` names every exit code the binary ends with (4 was missing).
#[test]
fn the_help_names_every_exit_code() {
    let o = wsload(&["--help"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "0 passed".to_string(),
        "1 a threshold failed".into(),
        "2 invalid input".into(),
        "3 the run could not be done".into(),
        format!("{} it measured nothing", wsload::EXIT_MEASURED_NOTHING),
    ] {
        assert!(help.contains(&said), "{said:?} not in: {help}");
    }
}

#[test]
fn input_files_are_read_within_a_limit() {
    let dir = Scratch::new("big-input");
    // A valid LoadTest padded past 1 MiB with a comment: its size alone refuses it.
    let mut text = loadtest(
        "big",
        "  target: {url: \"ws://127.0.0.1:1/\"}\n  scenario: connectionStorm\n",
    );
    text.push_str(&format!("# {}\n", "x".repeat(1 << 20)));
    let big = dir.file("big.yaml", &text);
    for (path, cmd) in [
        ("/dev/zero", "validate"),
        ("/dev/zero", "run"),
        (big.to_str().expect("utf-8 path"), "validate"),
        (big.to_str().expect("utf-8 path"), "run"),
    ] {
        let started = Instant::now();
        let o = wsload(&[cmd, path]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd} {path}: {err}");
        assert!(
            err.contains(path) && err.contains("more than 1 MiB, the most a LoadTest file may be"),
            "{cmd} {path}: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{cmd} {path}");
    }
    // The files a LoadTest names are bounded too: a CA file that never ends.
    let ca = dir.file(
        "ca.yaml",
        &loadtest(
            "ca",
            "  target: {url: \"wss://127.0.0.1:1/\"}\n  scenario: connectionStorm\n  tls: {caFile: /dev/zero}\n",
        ),
    );
    let o = wsload(&["run", ca.to_str().expect("utf-8 path")]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("spec.tls.caFile: /dev/zero holds more than 4 MiB, the most a CA file may be"),
        "{err}"
    );
}

/// `report` and `merge` read a result of as many cells as a LoadTest can run, and refuse one
/// of more before reading its cells, naming the cap: a result's cells are what reading it
/// holds (issue 39).
#[test]
fn a_result_of_more_cells_than_a_loadtest_runs_is_refused() {
    let dir = Scratch::new("cells");
    // `n` copies of a fixture cell whose histograms are not empty.
    let result = |n: usize| {
        let mut r = wsload_report::fixtures::shard(0, 200, 3, 1_000_000);
        let h = &mut r.cells[0].measure.hists;
        for i in 1..40 {
            h.connect.record(Duration::from_micros(i * 137));
            h.tcp.record(Duration::from_micros(i * 41));
        }
        let mut v = serde_json::to_value(&r).expect("json");
        let cell = v["cells"][0].take();
        v["cells"] = serde_json::Value::Array(vec![cell; n]);
        serde_json::to_string(&v).expect("json")
    };
    let cap = wsload_spec::status::MAX_CELLS;
    let at = dir.file("at.json", &result(cap));
    let past = dir.file("past.json", &result(cap + 1));
    let (at, past) = (
        at.to_str().expect("utf-8 path"),
        past.to_str().expect("utf-8 path"),
    );
    let o = wsload(&["report", at]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("Verdict: PASS"), "{}", stdout(&o));
    for cmd in ["report", "merge"] {
        let o = wsload(&[cmd, past]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        assert_eq!(
            stderr(&o).trim(),
            format!(
                "wsload: {past}: the result holds 2049 cells, more than the 2048 a valid LoadTest can run (64 tiers x 32 message sizes)"
            ),
            "{cmd}"
        );
    }
}

#[test]
fn a_run_that_connected_nothing_fails_with_its_own_code() {
    let dir = Scratch::new("nothing");
    // Refused: no thresholds, so only the rule that a run must measure something fails it.
    for scenario in ["connectionStorm", "pingLatency", "throughput"] {
        let f = dir.file(
            &format!("{scenario}.yaml"),
            &loadtest(
                "nothing",
                &format!("  target: {{url: \"ws://127.0.0.1:1/\"}}\n  scenario: {scenario}\n  connections: [3]\n  duration: 1s\n  ping: {{count: 2}}\n"),
            ),
        );
        let out = dir.path(&format!("{scenario}.json"));
        let o = wsload(&[
            "run",
            f.to_str().expect("utf-8 path"),
            "--out",
            out.to_str().expect("utf-8 path"),
        ]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(4), "{scenario}: {text}{}", stderr(&o));
        assert!(
            text.contains("Measured nothing")
                && text.contains("no connection was established (3 attempted: refused x3)")
                && text.contains("Verdict: FAIL"),
            "{scenario}: {text}"
        );
        let v = result(&out).verdict.expect("judged without thresholds");
        assert!(!v.passed && v.checks.is_empty() && v.unmeasured.len() == 1);
    }
    // A name that resolves to nothing (`.invalid` never does, RFC 6761): the same code.
    let f = dir.file(
        "unresolvable.yaml",
        &loadtest(
            "nothing",
            "  target: {url: \"ws://no-such-host.invalid:8080/\"}\n  scenario: connectionStorm\n  connections: [1]\n",
        ),
    );
    let o = wsload(&["run", f.to_str().expect("utf-8 path")]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains("cannot resolve no-such-host.invalid:8080")
            && err.contains("no connection can be established"),
        "{err}"
    );
}

/// Connected, but nothing of what the scenario measures came back: a server that never
/// answers (the reference server's `sink` profile) fails pingLatency (exit 4, no thresholds),
/// while throughput against it measured the server's count and passes.
#[test]
fn a_cell_that_got_no_answer_measured_nothing() {
    let dir = Scratch::new("no-answer");
    let f = dir.file(
        "ping.yaml",
        &loadtest(
            "sink",
            "  target: {server: {profile: sink}}\n  scenario: pingLatency\n  connections: [3]\n  ping: {count: 3, timeout: 300ms}\n",
        ),
    );
    let o = wsload(&["run", f.to_str().expect("utf-8 path")]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(4), "{text}{}", stderr(&o));
    assert!(
        text.contains("FAIL [3] no round trip was answered (9 sent expecting an answer)"),
        "{text}"
    );
    let f = dir.file(
        "tp.yaml",
        &loadtest(
            "sink",
            "  target: {server: {profile: sink}}\n  scenario: throughput\n  connections: [3]\n  duration: 500ms\n",
        ),
    );
    let o = wsload(&["run", f.to_str().expect("utf-8 path")]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}

#[test]
fn an_unreachable_target_is_reported_and_kept() {
    let dir = Scratch::new("unreachable");
    let f = dir.file(
        "down.yaml",
        &loadtest(
            "down",
            "  target: {url: \"ws://127.0.0.1:1/\"}\n  scenario: connectionStorm\n  connections: [5]\n  thresholds: [\"errors < 1%\"]\n",
        ),
    );
    let out = dir.path("down.json");
    let o = wsload(&[
        "run",
        f.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    // Not a crash: the run itself was done and reported, and since nothing connected it
    // measured nothing (4), which wins over the failed threshold (1).
    assert_eq!(o.status.code(), Some(4));
    let text = stdout(&o);
    assert!(text.contains("refused x5"), "{text}");
    let r = result(&out);
    let c = &r.cells[0].measure.counts;
    assert_eq!((c.attempted, c.connected), (5, 0));
    assert_eq!(c.failed.get(&ConnectError::Refused), Some(&5));
    assert_eq!(r.cells[0].figures.errors, 1.0);
    let json = std::fs::read_to_string(&out).expect("result");
    assert!(json.contains("\"refused\": 5"), "{json}");
}

#[test]
fn a_stalled_load_generator_is_corrected_for() {
    // Coordinated omission from the other side: the load generator itself is stopped
    // (SIGSTOP) for STALL. Messages due meanwhile leave late, all at once on resume, and the
    // server answers them at once: from their actual send time (raw) they look fast; from
    // their intended send time (corrected) they waited the stall, as a user would have.
    const STALL: Duration = Duration::from_millis(500);
    let server = Server::start(&[]);
    let dir = Scratch::new("stall");
    let f = dir.file(
        "rate.yaml",
        &loadtest(
            "stalled",
            &format!(
                "  target: {{url: {}/}}\n  scenario: constantRate\n  connections: [10]\n  duration: 2500ms\n  rate: {{messagesPerSecond: 2000}}\n  ping: {{timeout: 5s}}\n",
                server.ws
            ),
        ),
    );
    let out = dir.path("rate.json");
    let run = Wsload::start(&[
        "run",
        f.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    let flowing = settle(1, || {
        u64::from(server.metric("wsload_server_messages_received_total", &[]) > 0)
    });
    assert_eq!(flowing, 1, "the load started");
    std::thread::sleep(Duration::from_millis(400));
    let stopped = run.stop();
    std::thread::sleep(STALL);
    let stall = stopped.elapsed().as_secs_f64();
    run.signal("CONT");
    assert_eq!(run.finish().status.code(), Some(0));
    let r = result(&out);
    let c = &r.cells[0];
    let n = &c.measure.counts;
    let (rtt, raw) = (&c.figures.rtt, &c.figures.rtt_raw);
    assert_eq!((n.expected, n.lost), (n.sent, 0));
    assert_eq!(rtt.count, n.sent);
    // A fifth of the messages were due during the stall: the corrected p99 is inside it...
    assert!(rtt.p99 > stall / 2.0, "{rtt:?}");
    assert!(rtt.max >= stall - 0.01, "max {} vs stall {stall}", rtt.max);
    // ...while the raw view, timing from when they finally left, hides it.
    assert!(raw.p99 * 2.0 < rtt.p99, "raw {raw:?} vs corrected {rtt:?}");
    // The schedule caught up: the late messages were sent, not skipped.
    let ratio = c.figures.sent_per_sec / c.target_rate;
    assert!((0.9..=1.1).contains(&ratio), "sent/target {ratio}");
}

#[cfg(feature = "plot")]
#[test]
fn run_plot_is_a_png_of_the_run() {
    // The managed server (so the run also names its metrics address), 3 s of constant rate:
    // a few one-second samples with RTTs in them.
    let dir = Scratch::new("plot");
    let spec = dir.file(
        "plot.yaml",
        &loadtest(
            "plotted",
            "  target: {server: {profile: echo}}\n  scenario: constantRate\n  connections: [4]\n  duration: 3s\n  rate: {messagesPerSecond: 400}\n",
        ),
    );
    let png = dir.path("run.png");
    let o = wsload(&[
        "run",
        spec.to_str().expect("utf-8 path"),
        "--plot",
        png.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(o.status.code(), Some(0));
    the_scripts_read_the_managed_servers_line(&dir, &stderr(&o));
    assert!(stdout(&o).contains("plot: "), "the report names the plot");
    let bytes = std::fs::read(&png).expect("the plot was written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!(
        (be(16), be(20)),
        (wsload::observe::plot::WIDTH, wsload::observe::plot::HEIGHT),
        "IHDR width x height"
    );
    assert!(
        bytes.len() > 20_000,
        "{} bytes: lines and text",
        bytes.len()
    );

    // A plot that cannot be written is said, and the run's verdict stands.
    let o = wsload(&[
        "run",
        spec.to_str().expect("utf-8 path"),
        "--plot",
        dir.path("no/such/dir/run.png")
            .to_str()
            .expect("utf-8 path"),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("cannot plot to"), "{}", stderr(&o));
}

#[cfg(feature = "plot")]
/// The managed servers' metrics URLs, as `wsload run` printed them, read alike by the
/// contract's parser and by the scripts' readers (scripts/lib/common.sh and common.py), which
/// Prometheus jobs and the scale benchmark rely on.
fn the_scripts_read_the_managed_servers_line(dir: &Scratch, stderr: &str) {
    let line = stderr
        .lines()
        .find(|l| wsload_contract::announce::parse_managed_servers(l).is_some())
        .unwrap_or_else(|| panic!("no managed servers line in {stderr}"));
    let urls = wsload_contract::announce::parse_managed_servers(line).expect("parsed");
    assert_eq!(urls.len(), 1, "{line}");
    assert!(urls[0].starts_with("http://127.0.0.1:"), "{line}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace");
    let log = dir.file("run.stderr", stderr);
    let sh = Command::new("bash")
        .arg("-c")
        .arg("source scripts/lib/common.sh && managed_metrics_urls \"$1\"")
        .arg("bash")
        .arg(&log)
        .current_dir(root)
        .output()
        .expect("bash runs");
    assert_eq!(
        String::from_utf8_lossy(&sh.stdout).trim(),
        urls[0],
        "{sh:?}"
    );
    let py = Command::new("python3")
        .args([
            "-c",
            "import sys; sys.path.insert(0, 'scripts/lib'); import common; \
             print(common.managed_metrics_addr(sys.argv[1]))",
            line,
        ])
        .current_dir(root)
        .output()
        .expect("python3 runs");
    let addr = urls[0]
        .trim_start_matches("http://")
        .trim_end_matches("/metrics");
    assert_eq!(String::from_utf8_lossy(&py.stdout).trim(), addr, "{py:?}");
}

#[cfg(not(feature = "plot"))]
#[test]
fn run_plot_without_the_feature_is_refused_before_the_run() {
    // A target nothing listens on: had the run started, it would fail (exit 3) on connecting.
    let dir = Scratch::new("no-plot");
    let spec = dir.file(
        "plot.yaml",
        &loadtest(
            "plotted",
            "  target: {url: ws://127.0.0.1:9/}\n  scenario: constantRate\n  connections: [1]\n  duration: 1s\n",
        ),
    );
    let png = dir.path("run.png");
    let o = wsload(&[
        "run",
        spec.to_str().expect("utf-8 path"),
        "--plot",
        png.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("this wsload was built without the `plot` feature"),
        "{}",
        stderr(&o)
    );
    assert!(!png.exists());
}

/// `spec`, valid (`validate` accepts it, for a cluster), refused by `wsload run` with exit 2
/// before anything is written, saying `says`; what it printed.
fn refused_here_before_the_run(name: &str, spec: &str, says: &str) -> String {
    let dir = Scratch::new(name);
    let file = dir.file(&format!("{name}.yaml"), &loadtest(name, spec));
    let path = file.to_str().expect("utf-8 path");
    let o = wsload(&["validate", path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = dir.path("result.json");
    let o = wsload(&["run", path, "--out", out.to_str().expect("utf-8 path")]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(says), "{}", stderr(&o));
    assert!(!out.exists());
    stderr(&o)
}

/// Kills with several shards are the operator's (it times them from the shards' common
/// measure instant): `validate` accepts the file, for a cluster; `wsload run` refuses it
/// before any server or shard starts, saying where it runs and what runs here.
#[test]
fn kills_with_several_shards_are_the_clusters_and_refused_here_before_the_run() {
    let said = refused_here_before_the_run(
        "shard-kill",
        "  target: {server: {replicas: 2}}\n  scenario: sustainedHold\n  connections: [20]\n  duration: 2s\n  shards: 2\n  reconnect: {policy: immediate}\n  disruptions: [{at: 1s, kill: {replicas: 1}}]\n",
        "spec.disruptions: kill and restart with shards: 2 run in a cluster",
    );
    assert!(!said.contains("managed wsload-server on"), "{said}");
}

/// A Deployment is rolled through the Kubernetes API, by the operator only.
#[test]
fn a_deployment_rolled_is_the_clusters_and_refused_here_before_the_run() {
    refused_here_before_the_run(
        "deployment-roll",
        "  target: {url: 'ws://127.0.0.1:9/'}\n  scenario: sustainedHold\n  connections: [20]\n  duration: 2s\n  reconnect: {policy: immediate}\n  disruptions: [{at: 1s, restart: {deployment: chat}}]\n",
        "spec.disruptions: entry 0 rolls deployment chat (restart.deployment): the operator does that through the Kubernetes API",
    );
}

/// Every live process below `pid`: children of each of its threads, recursively.
fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(p) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.filter_map(Result::ok) {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                if alive(child) {
                    let comm =
                        std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
                    found.push((child, comm.trim().to_string()));
                    queue.push(child);
                }
            }
        }
    }
    found
}

/// `pid` exists and is not a zombie (an exited process its reaper has not collected yet).
fn alive(pid: u32) -> bool {
    common::state(Path::new(&format!("/proc/{pid}/stat")))
        .is_some_and(|state| state != 'Z' && state != 'X')
}

#[test]
fn a_killed_run_leaves_no_process_behind() {
    // SIGKILL, where no handler and no Drop runs: the managed server, and a fleet's shard
    // processes, must still end with the run, or they hold ports and load after it.
    for shards in [1, 2] {
        let dir = Scratch::new(&format!("killed-{shards}"));
        let f = dir.file(
            "hold.yaml",
            &loadtest(
                "hold",
                &format!(
                    "  target: {{server: {{profile: echo}}}}\n  scenario: sustainedHold\n  connections: [4]\n  duration: 60s\n  shards: {shards}\n"
                ),
            ),
        );
        let run = Wsload::start(&["run", f.to_str().expect("utf-8 path")]);
        let pid = run.child.id();
        // Everything the run starts: its server, and with shards, one wsload per shard.
        let expected = |procs: &[(u32, String)]| {
            let servers = procs.iter().filter(|(_, c)| c == "wsload-server").count();
            let shard_procs = procs.iter().filter(|(_, c)| c == "wsload").count();
            servers == 1 && (shards == 1 || shard_procs == shards)
        };
        let deadline = Instant::now() + WATCHDOG;
        let started = loop {
            let procs = descendants(pid);
            if expected(&procs) {
                break procs;
            }
            assert!(
                Instant::now() < deadline,
                "shards: {shards}: the run started {procs:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        run.signal("KILL");
        // Checked before `finish`: a process left behind would hold the run's stderr open, and
        // reading it to its end would wait forever.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left: Vec<_> = started.iter().filter(|(p, _)| alive(*p)).collect();
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                for (p, _) in &left {
                    common::signal(*p, "KILL");
                }
                panic!("shards: {shards}: still running 10 s after the run was killed: {left:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = run.finish();
        assert_eq!(o.status.code(), None, "killed by a signal");
    }
}

/// An echo server that answers each message `delay` after reading it (pings at once).
fn echo_after(delay: Duration) -> (String, tokio::runtime::Runtime) {
    use tokio::io::AsyncWriteExt;
    use wsload_ws::test_server::{server_frame, upgrade};
    common::raw_server(move |mut s, _| async move {
        if upgrade(&mut s).await.is_none() {
            return;
        }
        let mut buf = Vec::new();
        while let Some(frames) = common::read_frames(&mut s, &mut buf).await {
            for (op, payload) in frames {
                let answer = match op {
                    0x1 | 0x2 => {
                        tokio::time::sleep(delay).await;
                        server_frame(op, &payload)
                    }
                    0x9 => server_frame(0xA, &payload),
                    0x8 => {
                        let _ = s.write_all(&common::close_frame(1000, "")).await;
                        return;
                    }
                    _ => continue,
                };
                if s.write_all(&answer).await.is_err() {
                    return;
                }
            }
        }
    })
}

/// Issue 41: `wsload compare` on two real runs of one LoadTest, the second against a server
/// answering 2 ms later: Regressed, exit 1, naming the round trips; a result against itself
/// is Same (exit 0); results of other scenarios cannot be compared (exit 2, both named).
#[test]
fn compare_finds_an_echo_two_ms_slower_and_refuses_other_scenarios() {
    let dir = Scratch::new("compare");
    let mut outs = Vec::new();
    for (name, delay) in [("base", Duration::ZERO), ("slow", Duration::from_millis(2))] {
        let (url, rt) = echo_after(delay);
        let file = dir.file(
            &format!("{name}.yaml"),
            &format!(
                "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata: {{name: cmp}}\nspec:\n  target: {{url: '{url}'}}\n  scenario: pingpong\n  connections: [10]\n  warmup: 0s\n  duration: 3s\n"
            ),
        );
        let out = dir.path(&format!("{name}.json"));
        let run = wsload(&[
            "run",
            &file.to_string_lossy(),
            "--out",
            &out.to_string_lossy(),
            "--threads",
            "1",
        ]);
        assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
        drop(rt);
        outs.push(out.to_string_lossy().into_owned());
    }
    let json = dir.path("comparison.json");
    let c = wsload(&[
        "compare",
        &outs[0],
        &outs[1],
        "--json",
        &json.to_string_lossy(),
    ]);
    assert_eq!(c.status.code(), Some(1), "{}", stderr(&c));
    let text = stdout(&c);
    let verdict = text.lines().last().unwrap_or_default();
    assert!(
        verdict.starts_with("verdict: Regressed (cell 10: ") && verdict.contains("rtt p50"),
        "{text}"
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("written")).expect("json");
    assert_eq!(written["verdict"], "Regressed", "{written}");
    let p50 = written["cells"][0]["figures"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "rtt p50"))
        .cloned()
        .unwrap_or_default();
    // About 2 ms more than the base's round trip.
    let (base, new) = (p50["base"].as_f64(), p50["new"].as_f64());
    assert!(
        base.zip(new)
            .is_some_and(|(b, n)| (0.0015..0.006).contains(&(n - b))),
        "{p50}"
    );
    // Connecting is a pingpong's setup, not what it measures: not compared.
    assert!(!text.contains("connect p"), "{text}");

    let same = wsload(&["compare", &outs[0], &outs[0]]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    assert!(
        stdout(&same).ends_with("verdict: Same\n"),
        "{}",
        stdout(&same)
    );

    let mut other: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&outs[0]).expect("read")).expect("json");
    other["scenario"] = serde_json::json!("throughput");
    let other_path = dir.file("other.json", &other.to_string());
    let refused = wsload(&["compare", &outs[0], &other_path.to_string_lossy()]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("the scenarios differ: base pingpong, new throughput"),
        "{}",
        stderr(&refused)
    );
    let bare = wsload(&["compare", &outs[0], &outs[1], "--min-effect", "25"]);
    assert_eq!(bare.status.code(), Some(2), "{}", stderr(&bare));
    assert!(
        stderr(&bare).contains("\"25\" without % would be 2500%: write 25% (or 0.25)"),
        "{}",
        stderr(&bare)
    );
    let bad = wsload(&["compare", &outs[0], &outs[1], "--confidence", "100%"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("a confidence is between 0% and 100%"),
        "{}",
        stderr(&bad)
    );
}
