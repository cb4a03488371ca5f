//! `wsload run` with `shards: N`: N `wsload shard` processes conducted cell by cell, servers
//! as replicas sharing one port, one reconciliation of delivery over all of them, one
//! connectionLimit search over all shards, and a share a process cannot open refused before
//! any load.

mod common;

use common::{WATCHDOG, server_bin};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Instant;
use wsload::report::RunResult;
use wsload_contract::env as var;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("wsload-fleet-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// `wsload run` of a LoadTest with `body` as its spec, behind `shell` (e.g. a ulimit) if
/// given; the result file is read when the run wrote one.
fn run(name: &str, body: &str, shell: Option<&str>) -> (Output, Option<RunResult>) {
    run_with(name, body, shell, &[])
}

/// [`run`] with `env` set for `wsload run`, which its shards inherit.
fn run_with(
    name: &str,
    body: &str,
    shell: Option<&str>,
    env: &[(&str, &str)],
) -> (Output, Option<RunResult>) {
    let dir = scratch(name);
    let file = dir.join("test.yaml");
    let out = dir.join("result.json");
    std::fs::write(
        &file,
        format!("apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: {name}\nspec:\n{body}"),
    )
    .expect("write spec");
    let mut cmd = common::behind(shell, env!("CARGO_BIN_EXE_wsload"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let output = cmd
        .arg("run")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .env(var::SERVER_BIN, server_bin())
        .env(var::THREADS, "1")
        .stdin(Stdio::null())
        .output()
        .expect("wsload runs");
    assert!(
        started.elapsed() < WATCHDOG,
        "the run took {:?}",
        started.elapsed()
    );
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    println!("{}", String::from_utf8_lossy(&output.stdout));
    let result = std::fs::read_to_string(&out)
        .ok()
        .map(|t| serde_json::from_str(&t).expect("a RunResult"));
    let _ = std::fs::remove_dir_all(&dir);
    (output, result)
}

#[test]
fn three_shards_and_two_replicas_reconcile_delivery_exactly() {
    let (o, r) = run(
        "tp",
        "  target: {server: {replicas: 2}}\n  scenario: throughput\n  connections: [30, 60]\n  duration: 1s\n  warmup: 300ms\n  shards: 3\n  thresholds: [\"delivery >= 100%\"]\n",
        None,
    );
    assert_eq!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("x2 (SO_REUSEPORT)"), "{err}");
    let r = r.expect("a result");
    assert_eq!((r.shards.clone(), r.shard_count), (vec![0, 1, 2], 3));
    assert_eq!(r.shard_info.len(), 3);
    for c in &r.cells {
        let n = &c.measure.counts;
        assert_eq!(n.connected, u64::from(c.connections), "{}", c.label);
        assert!(n.sent_with_warmup > 0);
        // Both replicas took connections (SO_REUSEPORT spreads them): only the sum of both
        // counters can equal what the three shards sent.
        assert_eq!(c.server_received, Some(n.sent_with_warmup), "{}", c.label);
        assert_eq!(c.figures.delivery, Some(1.0));
        // Released together: every shard began the cell, and the spread is recorded.
        assert!(c.started_first_micros > 0 && c.shard_skew_ms().is_some());
    }
    assert!(r.verdict.is_some_and(|v| v.passed));
}

/// Two shard processes, one with its clock 50 ms ahead (the test hook): the conductor measures
/// that offset within the uncertainty it states, the other's near 0, and still releases every
/// cell on both at one true instant (without the offset in the release, or in the stamps,
/// the skew would be 50 ms).
#[test]
fn a_shard_clock_50_ms_ahead_is_measured_and_its_cells_still_begin_with_the_others() {
    let (o, r) = run_with(
        "clock",
        "  target: {server: {}}\n  scenario: throughput\n  connections: [10, 20]\n  duration: 1s\n  warmup: 200ms\n  shards: 2\n",
        None,
        &[(var::CLOCK_SHIFT_MS, "1=50")],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let r = r.expect("a result");
    let clock = |i: usize| r.shard_info[i].clock.expect("the shard's clock measured");
    let (on_time, ahead) = (clock(0), clock(1));
    eprintln!("clocks: {on_time:?} {ahead:?}");
    assert!(
        on_time.offset_micros.unsigned_abs() <= on_time.uncertainty_micros + 1_000,
        "{on_time:?}"
    );
    assert!(
        (ahead.offset_micros - 50_000).unsigned_abs() <= ahead.uncertainty_micros + 1_000,
        "{ahead:?}"
    );
    // The burst before the first cell, and more while it ran.
    assert!(
        on_time.samples >= 8 && ahead.samples >= 8,
        "{on_time:?} {ahead:?}"
    );
    for c in &r.cells {
        let skew = c.shard_skew_ms().expect("both shards began the cell");
        assert!(skew < 25.0, "cell {}: skew {skew} ms", c.label);
    }
    let skew = r.start_skew_micros().expect("two shards' starts");
    assert!(skew < 25_000, "start skew {skew} us");
    assert!(
        out.contains("Shard clocks against the conductor's"),
        "{out}"
    );
    assert!(out.contains("shard 1 +"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("shard clocks against this process's"), "{err}");
}

#[test]
fn connection_limit_over_two_shards_is_one_search() {
    let (o, r) = run(
        "limit",
        "  target:\n    server:\n      args: [\"--max-connections\", \"300\"]\n  scenario: connectionLimit\n  limit: {start: 75, max: 1200, maxErrorRate: 1%, hold: 300ms, resolution: 25}\n  connect: {batchSize: 150}\n  shards: 2\n  thresholds: [\"limit >= 275\"]\n",
        None,
    );
    assert_eq!(o.status.code(), Some(0));
    let r = r.expect("a result");
    let limit = r.limit.expect("a limit");
    assert!((275..=303).contains(&limit), "limit {limit}");
    // One probe per cell, each judged on both shards' connections together.
    assert_eq!(r.probes.len(), r.cells.len());
    for (p, c) in r.probes.iter().zip(&r.cells) {
        assert_eq!(c.label, p.connections.to_string());
        assert_eq!(c.measure.counts.attempted, u64::from(p.connections));
        let bad = c.measure.counts.failed_total() + c.measure.counts.dropped_total();
        let rate = bad as f64 / c.measure.counts.attempted as f64;
        assert!((p.error_rate - rate).abs() < 1e-9, "{p:?}");
    }
}

#[test]
fn a_share_above_the_open_file_limit_is_refused_before_any_load() {
    for shards in [1, 2] {
        let (o, r) = run(
            "files",
            &format!(
                "  target: {{server: {{}}}}\n  scenario: sustainedHold\n  connections: [3000]\n  duration: 1s\n  shards: {shards}\n"
            ),
            Some("ulimit -Sn 512 && ulimit -Hn 1024"),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        let share = 3000 / shards;
        for part in [
            format!("must open {share} connections"),
            "only 1024 files (ulimit -n 1024, hard 1024".to_string(),
            format!("to at least {}", share + 64),
            "spec.shards: 4 or more".to_string(),
        ] {
            assert!(err.contains(&part), "{part:?} not in {err}");
        }
        assert!(r.is_none(), "no result: nothing was measured");
        assert!(o.stdout.is_empty(), "no report");
    }
}

/// A shard count this machine cannot run is refused from its detected figures before any
/// process is forked (here: an open-file limit too small for the parent's per-shard pipes and
/// connections, and on any machine under 157 cores, the cores).
#[test]
fn shards_beyond_what_this_machine_runs_are_refused_before_any_fork() {
    let started = Instant::now();
    let (o, r) = run(
        "too-many",
        "  target: {server: {}}\n  scenario: connectionStorm\n  connections: [5000]\n  shards: 5000\n",
        Some("ulimit -Sn 512 && ulimit -Hn 512"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "refused in {:?}",
        started.elapsed()
    );
    for part in [
        "spec.shards: 5000 is more shard processes than this machine can run",
        "or fewer",
        "in a cluster, where each shard is a pod",
    ] {
        assert!(err.contains(part), "{part:?} not in {err}");
    }
    // Nothing started: no managed server, no shard, no result.
    assert!(!err.contains("managed wsload-server"), "{err}");
    assert!(!err.contains("[shard"), "{err}");
    assert!(r.is_none() && o.stdout.is_empty());
    // `validate` accepts it (a cluster runs it) and says what `run` here would refuse.
    let file = scratch("too-many-validate").join("test.yaml");
    std::fs::write(
        &file,
        "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata: {name: many}\nspec:\n  target: {server: {}}\n  scenario: connectionStorm\n  connections: [5000]\n  shards: 5000\n",
    )
    .expect("write spec");
    let o = common::behind(
        Some("ulimit -Sn 512 && ulimit -Hn 512"),
        env!("CARGO_BIN_EXE_wsload"),
    )
    .arg("validate")
    .arg(&file)
    .output()
    .expect("wsload validate runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("note: for `wsload run` on this machine: spec.shards: 5000 is more"),
        "{err}"
    );
}

/// The same note from every shard (here: none of its connections succeeded) is said once,
/// with how many shards made it; and a run that connected nothing fails (exit 4).
#[test]
fn a_note_every_shard_makes_is_said_once() {
    let (o, r) = run(
        "notes",
        "  target: {url: \"ws://127.0.0.1:1/\"}\n  scenario: connectionStorm\n  connections: [8]\n  shards: 8\n",
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(4), "{out}");
    let r = r.expect("a result");
    let refused: Vec<&String> = r
        .notes
        .iter()
        .filter(|n| n.contains("no connection to ws://127.0.0.1:1/ succeeded"))
        .collect();
    assert_eq!(refused.len(), 1, "{:?}", r.notes);
    assert!(refused[0].ends_with("[8 shards]"), "{}", refused[0]);
    // An external server with no counter: what it received is unknown, not 0.
    assert!(
        r.cells.iter().all(|c| c.server_received.is_none()),
        "{:?}",
        r.cells
            .iter()
            .map(|c| c.server_received)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        out.matches("no connection to ws://127.0.0.1:1/").count(),
        1,
        "{out}"
    );
    // Shards whose target resolves to nothing: the run exits as one process would.
    let (o, _) = run(
        "unresolvable",
        "  target: {url: \"ws://no-such-host.invalid:8080/\"}\n  scenario: connectionStorm\n  connections: [2]\n  shards: 2\n",
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains("cannot resolve no-such-host.invalid:8080"),
        "{err}"
    );
}

/// A fanout over two shards whose clocks differ by 50 ms: each publishes half the topics and
/// subscribes to all of them, so half the deliveries cross from one clock to the other. Both
/// stamp on the conductor's clock (their measured offset taken out), so no delivery is timed
/// 50 ms late or early, and every one of the window is counted once.
#[test]
fn a_fanout_across_shards_50_ms_apart_times_deliveries_on_one_clock() {
    let (o, r) = run_with(
        "fanout-clock",
        "  target: {server: {profile: pubsub}}\n  scenario: fanout\n  connections: [20]\n  duration: 2s\n  warmup: 300ms\n  shards: 2\n  connect: {timeout: 2s}\n  fanout: {topics: 4, drain: 1s}\n  rate: {messagesPerSecond: 400}\n",
        None,
        &[(var::CLOCK_SHIFT_MS, "1=50")],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let r = r.expect("a result");
    let ahead = r.shard_info[1].clock.expect("shard 1's clock measured");
    assert!(
        (ahead.offset_micros - 50_000).unsigned_abs() <= ahead.uncertainty_micros + 1_000,
        "{ahead:?}"
    );
    let c = &r.cells[0];
    let f = c.measure.counts.fanout.as_ref().expect("a fanout tally");
    assert_eq!((f.publishers, f.publishers_failed), (4, 0));
    let t = f.totals(false);
    assert_eq!(
        (t.delivered, t.missing, t.duplicates),
        (t.expected, 0, 0),
        "{t:?}"
    );
    assert!(t.expected >= 4 * 150 * 5, "{t:?}");
    let h = &c.measure.hists.fanout;
    assert_eq!(h.len(), t.delivered);
    // Uncorrected, the deliveries from shard 0 to shard 1 would be timed 50 ms late (a
    // quarter of them: p80 above 50 ms) and those the other way 50 ms early, clamped to 0 and
    // counted as before their publish. (Measured uncorrected: p99 57.7 ms, 895 of 3,200
    // before their publish; corrected: p99 6.9 ms, none.)
    let (p50, p80, p99) = (h.percentile(50.0), h.percentile(80.0), h.percentile(99.0));
    eprintln!(
        "fanout latency p50 {p50} s, p80 {p80} s, p99 {p99} s, before publish {}",
        f.before_publish
    );
    assert!(
        p80 < 0.025,
        "p80 {p80} s: a shard's offset was not taken out"
    );
    assert!(
        f.before_publish * 100 < t.delivered,
        "{} of {} deliveries timed before their publish",
        f.before_publish,
        t.delivered
    );
}

/// The status line's code of one request sent on a connection of its own, without a token.
fn anonymous(port: u16, method: &str, path: &str) -> Option<u16> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    let body = if method == "POST" { "{}" } else { "" };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer.split(' ').nth(1)?.parse().ok()
}

/// Two consecutive free ports on loopback (the run's shards listen on `base` and `base + 1`).
fn two_free_ports() -> u16 {
    for _ in 0..100 {
        let first = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let base = first.local_addr().expect("addr").port();
        if base < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", base + 1)).is_ok() {
            return base;
        }
    }
    panic!("no two consecutive free ports");
}

/// While a two-shard run is in progress, anyone else on the machine asking its shards to end,
/// or for their results, without the run's token is refused (401), and the run ends as it
/// would have: exit 0, every cell measured on both shards.
#[test]
fn control_requests_without_the_runs_token_are_refused_and_the_run_goes_on() {
    let dir = scratch("auth");
    let file = dir.join("test.yaml");
    let out = dir.join("result.json");
    std::fs::write(
        &file,
        "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: auth\nspec:\n  target: {server: {}}\n  scenario: throughput\n  connections: [10, 20]\n  duration: 1s\n  warmup: 200ms\n  shards: 2\n  thresholds: [\"delivery >= 100%\"]\n",
    )
    .expect("write spec");
    let base = two_free_ports();
    let started = Instant::now();
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_wsload"))
        .arg("run")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .args(["--metrics-listen", &format!("127.0.0.1:{base}")])
        .env(var::SERVER_BIN, server_bin())
        .env(var::THREADS, "1")
        .env_remove(var::CONTROL_TOKEN_FILE)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("wsload runs");
    let requests = [
        ("POST", "/control/end"),
        ("POST", "/control/finish"),
        ("GET", "/control/result"),
        ("GET", "/control"),
    ];
    let mut refused = std::collections::BTreeMap::new();
    let status = loop {
        if let Some(status) = run.try_wait().expect("wait") {
            break status;
        }
        assert!(started.elapsed() < WATCHDOG, "the run took too long");
        for port in [base, base + 1] {
            for (method, path) in requests {
                match anonymous(port, method, path) {
                    Some(401) => *refused.entry((port, path)).or_insert(0) += 1,
                    Some(other) => panic!("{method} {path} without the token: {other}"),
                    // Not listening yet, or gone.
                    None => {}
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    eprintln!("refused: {refused:?}");
    assert_eq!(status.code(), Some(0));
    for port in [base, base + 1] {
        for (_, path) in requests {
            assert!(
                refused.get(&(port, path)).is_some_and(|n| *n > 0),
                "{path} on {port} was never asked while the run went on: {refused:?}"
            );
        }
    }
    let r: RunResult =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("the result")).expect("json");
    assert_eq!(r.shard_info.len(), 2);
    assert_eq!(r.cells.len(), 2);
    for c in &r.cells {
        let n = &c.measure.counts;
        assert_eq!(n.connected, u64::from(c.connections), "{}", c.label);
        assert_eq!(c.figures.delivery, Some(1.0));
    }
    assert!(r.verdict.is_some_and(|v| v.passed));
    let _ = std::fs::remove_dir_all(&dir);
}
