//! The presets of examples/ for real servers against the servers they name, each started by
//! the test from its registry through scripts/test-servers/run.sh (npm packages cached by
//! install.sh, the Python ones by python-install.sh, nats-server by scripts/tools.sh,
//! Debian's RabbitMQ for STOMP; our own wsload-server for the broadcaster). Each preset runs
//! as shipped, only its address changed, through the `wsload` binary with `--out`; the result
//! is checked against what the server itself counted (its GET /stats, /varz or /metrics).
//!
//! The first presets (socketio, socketio-fanout, graphql-ws, stomp, jsonrpc) one test
//! at a time: 1,000 connections held through a 3 s heartbeat deadline must not share two
//! cores with another test's thousand. The corpus of issue 38 (nats, mqtt, sockjs, socketio2,
//! ariadne, channels, broadcast and their fan-outs), servers the presets were not written
//! for, a few at a time in one test (`CORPUS`).

mod common;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is in the workspace")
        .to_path_buf()
}

/// A test server of scripts/test-servers/, stopped (TERM, then KILL) when dropped.
struct TestServer {
    child: Child,
    name: String,
    host: String,
    port: u16,
    stats: Option<String>,
    /// Where `stats` is served: the line's `statsPort` (nats-server's monitoring port), else
    /// `port`.
    stats_port: u16,
}

/// How long a server may take to print its line: RabbitMQ boots in ~10 s, and a cold cache
/// installs first (part_cargo of scripts/test installs before cargo test, so rarely here).
const START_TIMEOUT: Duration = Duration::from_secs(180);

impl TestServer {
    /// Starts `scripts/test-servers/run.sh NAME ARGS...` and reads its one line (the contract
    /// in scripts/test-servers/serve.js).
    fn start(name: &str, args: &[&str]) -> TestServer {
        let started = Instant::now();
        let mut child = Command::new(repo().join("scripts/test-servers/run.sh"))
            .arg(name)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("scripts/test-servers/run.sh starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut server = TestServer {
            child,
            name: name.to_string(),
            host: String::new(),
            port: 0,
            stats: None,
            stats_port: 0,
        };
        let line = rx
            .recv_timeout(START_TIMEOUT)
            .unwrap_or_else(|_| panic!("{name} printed no line within {START_TIMEOUT:?}"));
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{name}'s line is not the contract's JSON ({e}): {line:?}"));
        assert_eq!(v["server"], name, "{line}");
        server.host = v["host"].as_str().expect("host").to_string();
        server.port = v["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .expect("port");
        server.stats = v["stats"].as_str().map(str::to_string);
        server.stats_port = v["statsPort"]
            .as_u64()
            .map_or(Some(server.port), |p| u16::try_from(p).ok())
            .expect("statsPort");
        eprintln!(
            "{name} listening on port {} after {:?}",
            server.port,
            started.elapsed()
        );
        server
    }

    /// The server's GET /stats (the path and port its line names).
    fn stats(&self) -> Value {
        let path = self.stats.as_deref().expect("this server has stats");
        let mut s =
            TcpStream::connect((self.host.as_str(), self.stats_port)).expect("connect for stats");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        write!(s, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.host).expect("request");
        let mut resp = String::new();
        s.read_to_string(&mut resp).expect("response");
        let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
        // Go's net/http answers an HTTP/1.0 request in kind.
        assert!(
            head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
            "{head}"
        );
        serde_json::from_str(body).expect("stats are JSON")
    }

    /// Polls the stats until `pick` of them is `want` (the server counts a moment after the
    /// client ends), at most 5 s; returns the last value.
    fn settle(&self, want: u64, pick: impl Fn(&Value) -> u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let v = pick(&self.stats());
            if v == want || Instant::now() > deadline {
                return v;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // TERM first: stomp.sh stops its RabbitMQ node and removes its directory on TERM.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("{} did not stop on TERM; killed", self.name);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory under cargo's target tmpdir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("wsload-real-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// examples/NAME.yaml as shipped, its target's default port `port` replaced by `server`'s.
fn preset(name: &str, default: &str, server: &TestServer) -> String {
    let text = std::fs::read_to_string(repo().join(format!("examples/{name}.yaml")))
        .expect("the preset exists");
    let ours = format!("127.0.0.1:{}", server.port);
    assert!(
        text.contains(default),
        "examples/{name}.yaml targets {default} (the port its comment starts the server on)"
    );
    text.replace(default, &ours)
}

/// How long a run may take beyond its own duration before it fails instead of hanging.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// `wsload run` of `yaml` with `--out`: its exit status and the result JSON. Its output is
/// read as it comes (a full pipe would stall it) and printed (shown on failure).
fn run(dir: &Scratch, yaml: &str) -> (ExitStatus, Value) {
    let spec = dir.0.join("loadtest.yaml");
    let out = dir.0.join("result.json");
    std::fs::write(&spec, yaml).expect("write the LoadTest");
    let mut child = Command::new(env!("CARGO_BIN_EXE_wsload"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wsload runs");
    let readers = [
        drain(child.stdout.take().expect("piped stdout")),
        drain(child.stderr.take().expect("piped stderr")),
    ];
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wsload's status") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for r in readers {
        eprintln!("{}", r.join().unwrap_or_default());
    }
    let status =
        status.unwrap_or_else(|| panic!("wsload run did not finish within {RUN_TIMEOUT:?}"));
    let text = std::fs::read_to_string(&out).expect("the result file was written");
    let result: Value = serde_json::from_str(&text).expect("a wsload result");
    (status, result)
}

/// All of `pipe`, read on a thread of its own.
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

/// The only cell of a one-tier result.
fn only(result: &Value) -> &Value {
    let cells = result["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 1, "one cell expected");
    &cells[0]
}

fn count(cell: &Value, name: &str) -> u64 {
    cell["counts"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("counts.{name} in {}", cell["counts"]))
}

/// A count the result leaves out when it is zero (the conversation's `replies`).
fn count_or_zero(cell: &Value, name: &str) -> u64 {
    let v = &cell["counts"][name];
    if v.is_null() {
        return 0;
    }
    v.as_u64()
        .unwrap_or_else(|| panic!("counts.{name} is a number: {v}"))
}

/// Server messages counted as pushes: `counts.pushes` frames (left out when none).
fn pushes(cell: &Value) -> u64 {
    let v = &cell["counts"]["pushes"];
    if v.is_null() {
        return 0;
    }
    v["frames"]
        .as_u64()
        .unwrap_or_else(|| panic!("counts.pushes.frames: {v}"))
}

fn figure(cell: &Value, path: &[&str]) -> f64 {
    let mut v = &cell["figures"];
    for p in path {
        v = &v[p];
    }
    v.as_f64()
        .unwrap_or_else(|| panic!("figures.{} in {}", path.join("."), cell["figures"]))
}

fn stat(stats: &Value, name: &str) -> u64 {
    stats[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} in the server's stats {stats}"))
}

/// No connection failed or dropped, and no step on open missed its message.
fn clean(cell: &Value) {
    let counts = &cell["counts"];
    // Counts are camelCase in the result JSON (Rust's `expect_missed`).
    for map in ["failed", "dropped", "expectMissed"] {
        let v = &counts[map];
        let empty = v.is_null()
            || v.as_object().is_some_and(|m| m.values().all(|n| n == 0))
            || v.as_u64() == Some(0);
        assert!(empty, "counts.{map}: {v}");
    }
}

/// All `n` connections opened and held to the end of a window at least `secs` long.
fn held_through(cell: &Value, n: u64, secs: f64) {
    assert_eq!(count(cell, "connected"), n);
    assert_eq!(count(cell, "survived"), n);
    assert_eq!(figure(cell, &["survival"]), 1.0);
    let held = cell["measuredSecs"].as_f64().expect("measuredSecs");
    assert!(held >= secs, "held {held} s");
}

fn passed(status: &ExitStatus) {
    assert_eq!(
        status.code(),
        Some(0),
        "the preset's thresholds hold (exit 0)"
    );
}

#[test]
fn socketio_holds_1000_connections_through_heartbeats() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start("socketio", &[]);
    let dir = Scratch::new("socketio");
    let (status, result) = run(&dir, &preset("socketio", "127.0.0.1:3000", &server));
    let cell = only(&result);
    clean(cell);
    // Six heartbeats in 30 s: every connection still open is one that answered them all.
    held_through(cell, 1000, 29.0);
    // The acks: every chat answered, their latency percentiles present.
    assert!(count(cell, "sent") >= 1000 * 25, "a chat a second each");
    assert_eq!(count(cell, "lost"), 0);
    assert_eq!(
        figure(cell, &["rtt", "count"]) as u64,
        count(cell, "received")
    );
    assert!(figure(cell, &["rtt", "p99"]) > 0.0);
    // The room's ticks: ~300 per connection in 30 s, never more than the server delivered.
    let stats = server.stats();
    let ticks = pushes(cell);
    assert!(ticks >= 1000 * 200, "room messages received: {ticks}");
    assert!(ticks <= stat(&stats, "ticks"), "{ticks} > {stats}");
    assert!(stat(&stats, "chats") >= count(cell, "sent"));
    // Every Engine.IO connection joined the namespace: none is a bare transport.
    assert_eq!(stat(&stats, "engineio"), 1000, "{stats}");
    assert_eq!(stat(&stats, "socketio"), 1000, "{stats}");
    assert_eq!(stat(&stats, "joined"), 1000, "{stats}");
    // The heartbeat replies were sent, and never counted as load.
    assert!(
        count_or_zero(cell, "replies") >= 1000 * 5,
        "pongs to Engine.IO pings"
    );
    // Last: the figures above say what went wrong better than the exit code.
    passed(&status);
}

#[test]
fn socketio_rooms_deliver_every_publish_to_every_member() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start("socketio", &["--tick-ms", "0"]);
    let dir = Scratch::new("socketio-fanout");
    let (status, result) = run(&dir, &preset("socketio-fanout", "127.0.0.1:3000", &server));
    let cell = only(&result);
    clean(cell);
    let f = &cell["counts"]["fanout"];
    let n = |v: &Value, name: &str| {
        v[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} in the fanout tally {v}"))
    };
    assert_eq!(
        (n(f, "publishers"), n(f, "publishersFailed")),
        (4, 0),
        "{f}"
    );
    assert_eq!(n(f, "unreadable"), 0, "{f}");
    let topics = f["topics"].as_array().expect("a tally per room");
    assert_eq!(topics.len(), 4);
    let mut delivered = 0;
    for t in topics {
        // 200 subscribers over 4 rooms, 25 publishes a second for 20 s.
        delivered += every_member_read_every_publish(t, 50, 450);
    }
    // Every delivery read was timed from its publish instant.
    assert_eq!(count(cell, "received"), delivered);
    // What the server broadcast is what the subscribers read: the window's deliveries and
    // those published in the drain's edge (read, not counted).
    let read = delivered + n(f, "outside");
    assert_eq!(server.settle(read, |s| stat(s, "delivered")), read);
    let stats = server.stats();
    assert_eq!(stat(&stats, "joined"), 200, "{stats}");
    // Subscribers and publishers, all Socket.IO connections, all held to the end.
    assert_eq!(stat(&stats, "socketio"), 204, "{stats}");
    passed(&status);
}

/// The Socket.IO rooms preset with half its subscribers dropped 2 s in (a `close`) and back
/// 500 ms later: each runs Engine.IO's open and joins its room again (the server counts every
/// join), and what the room published meanwhile is missing for exactly those subscribers:
/// every missing delivery is one of their gaps, the others missed nothing. A server the
/// fanout's reconnects were not written with.
#[test]
fn socketio_rooms_rejoined_after_a_drop_miss_only_what_was_published_meanwhile() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start("socketio", &["--tick-ms", "0"]);
    let dir = Scratch::new("socketio-fanout-close");
    let yaml = rooms_half_dropped(&server);
    let (status, result) = run(&dir, &yaml);
    let cell = only(&result);
    let picked = half_of_forty();
    let rc = &cell["reconnect"];
    let close = &rc["storms"][1];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(close["what"], "close 50% at 2s", "{rc}");
    assert_eq!(
        (n(close, "dropped"), n(close, "reconnected")),
        (picked, picked),
        "{rc}"
    );
    // 25 publishes a second to each room, away 500 ms: every one missed about 12.
    assert_eq!(n(close, "gapped"), picked, "{rc}");
    let gaps = n(close, "gaps");
    assert!((picked * 8..=picked * 20).contains(&gaps), "{rc}");
    assert_eq!(n(rc, "gapsUndropped"), 0, "{rc}");
    // Subscribed anew, not resumed: nothing counted recovered; each fed again.
    assert!(close["recovered"].is_null(), "{rc}");
    assert!(close["unfed"].is_null(), "{rc}");
    let mut missing = 0;
    for t in cell["counts"]["fanout"]["topics"]
        .as_array()
        .expect("rooms")
    {
        missing += n(t, "published") * n(t, "subscribers") - n(t, "delivered");
        in_order_once(t);
    }
    assert_eq!(
        missing, gaps,
        "every missing delivery is a dropped subscriber's gap"
    );
    // Every subscriber joined its room, and each one dropped joined it again.
    let stats = server.stats();
    assert_eq!(stat(&stats, "joined"), 40 + picked, "{stats}");
    assert_eq!(count(cell, "survived"), 44);
    passed(&status);
}

/// The same drop against Socket.IO's connection-state recovery (`--recovery-ms`): each
/// subscriber captures its session id (`pid`) on open and the offset each event carries as
/// its last argument, and back, resumes with `40{"pid":...,"offset":...}` instead of joining
/// again. The server gives it its room back and replays what it missed before its connect
/// answer: every delivery published while it was away is read (recovered), none is lost.
#[test]
fn socketio_recovery_replays_to_a_resumed_subscriber_what_it_missed_while_away() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start("socketio", &["--tick-ms", "0", "--recovery-ms", "30000"]);
    let dir = Scratch::new("socketio-fanout-resume");
    let yaml = resuming(&rooms_half_dropped(&server));
    let (status, result) = run(&dir, &yaml);
    let cell = only(&result);
    let picked = half_of_forty();
    let rc = &cell["reconnect"];
    let close = &rc["storms"][1];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(
        (n(close, "dropped"), n(close, "reconnected")),
        (picked, picked),
        "{rc}"
    );
    // Away 500 ms at 25 publishes a second: about 12 each, all replayed, none lost.
    let recovered = n(close, "recovered");
    assert!((picked * 8..=picked * 20).contains(&recovered), "{rc}");
    assert_eq!((n(close, "gaps"), n(close, "gapped")), (0, 0), "{rc}");
    assert!(close["unfed"].is_null(), "{rc}");
    assert_eq!(n(rc, "gapsUndropped"), 0, "{rc}");
    for t in cell["counts"]["fanout"]["topics"]
        .as_array()
        .expect("rooms")
    {
        assert_eq!(
            n(t, "published") * n(t, "subscribers"),
            n(t, "delivered"),
            "{t}"
        );
        in_order_once(t);
    }
    // The server recovered each one's session (its room given back: no join again).
    let stats = server.stats();
    assert_eq!(stat(&stats, "recovered"), picked, "{stats}");
    assert_eq!(stat(&stats, "joined"), 40, "{stats}");
    passed(&status);
}

/// The same resuming subscribers against a server that forgot their sessions (kept 300 ms,
/// they are away 500): it takes the `40{"pid":...}` for a new socket, in no room. Nothing is
/// counted recovered, and each dropped subscriber reads nothing from its drop on: what it
/// missed is the room's deliveries it never read, not gaps between deliveries.
#[test]
fn socketio_sessions_forgotten_leave_resumed_subscribers_in_no_room() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start("socketio", &["--tick-ms", "0", "--recovery-ms", "300"]);
    let dir = Scratch::new("socketio-fanout-resume-refused");
    let yaml = resuming(&rooms_half_dropped(&server));
    let (_, result) = run(&dir, &yaml);
    let cell = only(&result);
    let picked = half_of_forty();
    let rc = &cell["reconnect"];
    let close = &rc["storms"][1];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(n(close, "reconnected"), picked, "{rc}");
    assert!(close["recovered"].is_null(), "{rc}");
    assert_eq!((n(close, "gaps"), n(rc, "gapsUndropped")), (0, 0), "{rc}");
    // Each dropped subscriber's room published about 4 s (100 publishes) after its drop.
    let mut missing = 0;
    for t in cell["counts"]["fanout"]["topics"]
        .as_array()
        .expect("rooms")
    {
        missing += n(t, "published") * n(t, "subscribers") - n(t, "delivered");
    }
    assert!(
        (picked * 90..=picked * 110).contains(&missing),
        "{missing}: {rc}"
    );
    // Each of them back, and fed nothing since.
    assert_eq!(n(close, "unfed"), picked, "{rc}");
    let stats = server.stats();
    assert_eq!(stat(&stats, "recovered"), 0, "{stats}");
    assert_eq!(stat(&stats, "joined"), 40, "{stats}");
}

/// The socketio-fanout preset against `server`, cut to 40 subscribers over 6 s, half of them
/// dropped from the client side 2 s in and back 500 ms later.
fn rooms_half_dropped(server: &TestServer) -> String {
    preset("socketio-fanout", "127.0.0.1:3000", server)
        .replace("connections: [200]", "connections: [40]")
        .replace("duration: 20s", "duration: 6s")
        .replace(
            "  scenario: fanout\n",
            "  scenario: fanout\n  reconnect: {policy: fixed, delay: 500ms}\n  disruptions: [{at: 2s, close: {share: 50%}}]\n",
        )
}

/// How many of those 40 the 50% close picks (its draw, done here as wsload does it).
fn half_of_forty() -> u64 {
    let share = wsload_spec::reconnect::CloseSpec {
        share: wsload_spec::Percent(0.5),
    };
    (0..40u64).filter(|conn| share.picks(*conn, 0)).count() as u64
}

/// The socketio-fanout preset made to resume through Socket.IO's connection-state recovery.
fn resuming(yaml: &str) -> String {
    let open = "      - name: namespace-connected\n        expect: {prefix: \"40\"}\n";
    let delivery = "      topic: {json: \"1.room\"}\n";
    assert!(yaml.contains(open) && yaml.contains(delivery), "{yaml}");
    yaml.replace(
        open,
        &format!("{open}        capture: {{pid: {{json: pid}}}}\n"),
    )
    .replace(
        delivery,
        &format!(
            "{delivery}      resumeFrom: {{json: \"2\"}}\n    resume:\n      - name: engineio-open\n        expect: {{prefix: \"0\"}}\n      - name: namespace-resume\n        send: {{text: '40{{\"pid\":\"${{pid}}\",\"offset\":\"${{resumeFrom}}\"}}'}}\n      - name: namespace-resumed\n        expect: {{prefix: \"40\"}}\n        capture: {{pid: {{json: pid}}}}\n"
        ),
    )
}

/// SockJS frames messages its own way: `o` on open, then messages as `a["...",...]`, a JSON
/// array of strings, each split into a message of its own. The preset as shipped, against the
/// server with no ticks and its connection check after 700 ms quiet: between two chats' answers
/// (a second apart) the server sends a WebSocket ping and closes the connection when its pong
/// is missing for 10 s, so every connection held 30 s answered ~30 of them.
fn sockjs_arrays_split_into_messages_through_its_heartbeats() {
    let server = TestServer::start("sockjs", &["--tick-ms", "0", "--heartbeat-ms", "700"]);
    let dir = Scratch::new("sockjs");
    let (status, result) = run(&dir, &preset("sockjs", "127.0.0.1:5000", &server));
    let cell = only(&result);
    clean(cell);
    held_through(cell, 1000, 59.0);
    let stats = server.stats();
    assert_eq!(stat(&stats, "joined"), 1000, "{stats}");
    // Every chat answered and matched by the seq inside the array's string: the
    // correlation read it from the split part, not from the whole frame.
    assert_eq!(count(cell, "lost"), 0);
    assert!(count(cell, "sent") >= 1000 * 55, "a chat a second each");
    assert_eq!(
        figure(cell, &["rtt", "count"]) as u64,
        count(cell, "received")
    );
    assert!(stat(&stats, "chats") >= count(cell, "sent"), "{stats}");
    assert_eq!(stat(&stats, "unreadable"), 0, "{stats}");
    // No ticks, no `h` (this sockjs pings instead): nothing pushed, nothing unsolicited (an
    // unsplit array would be).
    assert_eq!(pushes(cell), 0);
    assert!(
        cell["counts"]["unsolicited"].is_null(),
        "{}",
        cell["counts"]
    );
    // Last: the figures above say what went wrong better than the exit code.
    passed(&status);
}

#[test]
fn graphql_ws_subscribers_each_receive_every_event() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start("graphql-ws", &["--subscribers", "1000"]);
    let dir = Scratch::new("graphql-ws");
    let (status, result) = run(&dir, &preset("graphql-ws", "127.0.0.1:4000", &server));
    let cell = only(&result);
    clean(cell);
    assert_eq!(count(cell, "connected"), 1000);
    assert_eq!(figure(cell, &["survival"]), 1.0);
    let stats = server.stats();
    assert_eq!(stat(&stats, "subscribers"), 1000, "{stats}");
    assert_eq!(stat(&stats, "completed"), 1000, "{stats}");
    let events = stat(&stats, "eventsPerSubscription");
    // Every subscriber received every event: what the server delivered, and no more; and
    // each subscription's `complete`, counted apart by name, none left unsolicited.
    assert_eq!(stat(&stats, "delivered"), events * 1000, "{stats}");
    assert_eq!(pushes(cell), events * 1000 + 1000);
    let by_name = &cell["counts"]["pushesByName"];
    assert_eq!(by_name["next"]["frames"], events * 1000, "{by_name}");
    assert_eq!(by_name["complete"]["frames"], 1000, "{by_name}");
    assert!(
        cell["counts"]["unsolicited"].is_null(),
        "{}",
        cell["counts"]
    );
    // The client's pings answered by the server's pongs, matched by their payload.
    assert_eq!(count(cell, "lost"), 0);
    assert!(count(cell, "sent") >= 1000 * 5);
    assert_eq!(
        figure(cell, &["rtt", "count"]) as u64,
        count(cell, "received")
    );
    // The server's pings answered: what it counted is what the client says it replied.
    let replies = count_or_zero(cell, "replies");
    assert!(replies >= 1000 * 3, "the server pings every 2 s: {replies}");
    assert_eq!(server.settle(replies, |s| stat(s, "pongs")), replies);
    // Last: the figures above say what went wrong better than the exit code.
    passed(&status);
}

#[test]
fn stomp_receipts_match_every_send() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start("stomp", &[]);
    let dir = Scratch::new("stomp");
    let (status, result) = run(&dir, &preset("stomp", "127.0.0.1:15674", &server));
    let cell = only(&result);
    clean(cell);
    assert_eq!(count(cell, "connected"), 100);
    assert_eq!(count(cell, "sent"), 100 * 40);
    assert_eq!(
        count(cell, "received"),
        count(cell, "sent"),
        "a RECEIPT per SEND"
    );
    assert_eq!(count(cell, "lost"), 0);
    assert_eq!(count(cell, "mismatched"), 0);
    assert_eq!(
        figure(cell, &["rtt", "count"]) as u64,
        count(cell, "received")
    );
    // Each connection's queue delivered back what it sent, but for at most its last SEND:
    // the broker may send that RECEIPT before that MESSAGE, and the cell ends on the receipt.
    let delivered = pushes(cell);
    let sent = count(cell, "sent");
    assert!(
        delivered <= sent && delivered >= sent - 100,
        "{delivered} MESSAGEs for {sent} SENDs"
    );
    // ~10 s of connection against the broker's 2 s heart-beat deadline: none dropped for
    // silence (checked by clean above) means the client's heart-beats went out.
    let held = cell["measuredSecs"].as_f64().expect("measuredSecs");
    assert!(
        held >= 9.0,
        "connections lived {held} s, beyond the heart-beat deadline"
    );
    // Last: the figures above say what went wrong better than the exit code.
    passed(&status);
}

#[test]
fn jsonrpc_answers_by_id() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start("jsonrpc", &[]);
    let dir = Scratch::new("jsonrpc");
    let (status, result) = run(&dir, &preset("jsonrpc", "127.0.0.1:8090", &server));
    let cell = only(&result);
    clean(cell);
    assert_eq!(count(cell, "connected"), 100);
    assert_eq!(count(cell, "sent"), 100 * 50);
    assert_eq!(count(cell, "received"), count(cell, "sent"));
    assert_eq!(count(cell, "lost"), 0);
    assert_eq!(count(cell, "mismatched"), 0);
    assert_eq!(
        figure(cell, &["rtt", "count"]) as u64,
        count(cell, "received")
    );
    assert!(figure(cell, &["rtt", "p50"]) > 0.0);
    let stats = server.stats();
    assert_eq!(stat(&stats, "calls"), count(cell, "sent"), "{stats}");
    assert_eq!(stat(&stats, "connections"), 100, "{stats}");
    // The subscription's notifications arrived (one every 100 ms while connections lived).
    assert!(pushes(cell) > 0);
    // Last: the figures above say what went wrong better than the exit code.
    passed(&status);
}

/// The corpus of issue 38, servers the presets were not written for: each proof starts its
/// server, runs its preset as shipped (1,000 connections held a minute through the server's
/// heartbeats) and checks the figures against the server's own counts, panicking on a miss.
/// They run all at once (`corpus_servers_each_hold_1000_connections_a_minute`): their
/// minutes are mostly waiting, and one after another they would cost the suite a minute
/// each.
const CORPUS: &[(&str, fn())] = &[
    ("nats", nats_lines_split_into_messages_through_its_pings),
    (
        "ariadne-fanout",
        ariadne_subscribers_receive_every_publish_on_both_subprotocols,
    ),
    ("mqtt", mqtt_packets_are_read_whole_from_aedes_frames),
    (
        "mqtt-fanout",
        mqtt_subscribers_receive_every_publish_of_their_topic,
    ),
    (
        "ariadne",
        ariadne_graphql_transport_ws_answers_queries_and_bare_pongs,
    ),
    (
        "socketio2",
        socketio2_client_pings_hold_engineio3_connections,
    ),
    (
        "broadcast",
        broadcast_subscribers_read_every_message_of_the_feed,
    ),
    (
        "channels",
        channels_consumer_answers_every_chat_through_daphne_pings,
    ),
    (
        "ariadne-graphql-ws",
        ariadne_graphql_ws_answers_queries_through_keep_alives,
    ),
    (
        "sockjs",
        sockjs_arrays_split_into_messages_through_its_heartbeats,
    ),
    (
        "channels-fanout",
        channels_group_broadcast_reaches_every_member,
    ),
];

/// How many corpus proofs run at once, unless `WSLOAD_CORPUS_AT_ONCE` says: each holds a
/// thousand connections a minute, mostly waiting. Six at once on two cores were too many:
/// Ariadne answered 17-32% of the connections' queries past their 5 s timeout, and aedes
/// delivered 99.18% of a fan-out in time; four at once beside a build, 86% of it.
const CORPUS_AT_ONCE: usize = 3;

/// Every corpus proof, `CORPUS_AT_ONCE` at a time, in the list's order (the longest first, the
/// two Ariadne holds apart: one Python process each on the same two cores), each on
/// a thread named for its server (its panic says which); `WSLOAD_CORPUS=mqtt,nats` runs only
/// those.
#[test]
fn corpus_servers_each_hold_1000_connections_a_minute() {
    // One group at a time among the tests here: the older presets' tighter heartbeat
    // deadlines (Socket.IO's 3 s) are not shared with the corpus' thousands.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let only = std::env::var("WSLOAD_CORPUS").ok();
    let chosen = |name: &str| {
        only.as_ref()
            .is_none_or(|o| o.split(',').any(|n| n == name))
    };
    let at_once = std::env::var("WSLOAD_CORPUS_AT_ONCE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CORPUS_AT_ONCE)
        .max(1);
    let queue = Mutex::new(CORPUS.iter().filter(|(name, _)| chosen(name)));
    let failed = Mutex::new(Vec::new());
    let mut ran = 0;
    std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for _ in 0..at_once {
            let (queue, failed) = (&queue, &failed);
            workers.push(scope.spawn(move || {
                let mut ran = 0;
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some(&(name, proof)) = next else {
                        return ran;
                    };
                    ran += 1;
                    let t = std::thread::Builder::new()
                        .name(format!("corpus-{name}"))
                        .spawn(proof)
                        .expect("a thread");
                    if t.join().is_err() {
                        failed.lock().unwrap_or_else(|e| e.into_inner()).push(name);
                    }
                }
            }));
        }
        for w in workers {
            ran += w.join().expect("a corpus worker");
        }
    });
    assert!(ran > 0, "WSLOAD_CORPUS={only:?} names no corpus server");
    let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(
        failed.is_empty(),
        "corpus servers failed (their panics above): {failed:?}"
    );
}

fn mqtt_packets_are_read_whole_from_aedes_frames() {
    let server = TestServer::start("mqtt", &[]);
    let dir = Scratch::new("mqtt");
    let (status, result) = run(&dir, &preset("mqtt", "127.0.0.1:1882", &server));
    let cell = only(&result);
    clean(cell);
    // aedes writes its CONNACK a byte a frame: every connection that read one whole is open,
    // and stays so through twelve keep-alives the broker enforces (1.5 x 15 s).
    held_through(cell, 1000, 59.0);
    let stats = server.stats();
    assert_eq!(stat(&stats, "clients"), 1000, "{stats}");
    no_mqtt_errors_but_writes_to_closing_sockets(&stats);
    // Every QoS 1 PUBLISH acknowledged by its packet id, the broker's count the same.
    let sent = count(cell, "sent");
    assert!(sent >= 1000 * 55, "a PUBLISH a second each: {sent}");
    assert_eq!(count(cell, "lost"), 0);
    assert_eq!(count(cell, "received"), sent);
    assert_eq!(stats["published"]["1"].as_u64(), Some(sent), "{stats}");
    assert_eq!(figure(cell, &["rtt", "count"]) as u64, sent);
    // Each PINGRESP a push: every keep-alive answered, none taken for an answer.
    let pongs = pushes(cell);
    assert!(pongs >= 1000 * 11, "PINGRESPs: {pongs}");
    assert!(pongs <= stat(&stats, "pings"), "{pongs} > {stats}");
    passed(&status);
}

/// aedes counts as a client error a write it made to a WebSocket already closing: a PUBLISH
/// it routed to a subscriber whose close frame had just arrived (seen once in 1,010 closes
/// on a loaded machine), its race, not a packet of ours. Any other error (a packet it could
/// not parse, a keep-alive missed) fails.
fn no_mqtt_errors_but_writes_to_closing_sockets(stats: &serde_json::Value) {
    let kinds = stats["errorKinds"].as_object().expect("errors by kind");
    let mut counted = 0;
    for (kind, n) in kinds {
        assert!(
            kind.starts_with("WebSocket is not open: readyState 2"),
            "{kind}: {stats}"
        );
        counted += n.as_u64().expect("a count");
    }
    assert_eq!(counted, stat(stats, "errors"), "{stats}");
}

/// The fan-out counterpart: 1,000 subscribers over 10 topics a minute, every connection's
/// PINGREQ keeping it within aedes' keep-alive (before, a fanout sent no heartbeat: every
/// subscriber was reset 22.4 s in).
fn mqtt_subscribers_receive_every_publish_of_their_topic() {
    let server = TestServer::start("mqtt", &[]);
    let dir = Scratch::new("mqtt-fanout");
    let (status, result) = run(&dir, &preset("mqtt-fanout", "127.0.0.1:1882", &server));
    let cell = only(&result);
    clean(cell);
    // 30 s: past aedes' keep-alive deadline (1.5 x 15 s) once over, which only the
    // heartbeat from each connection's open holds (the fan-out is not a minute's hold: the
    // server's minute is examples/mqtt.yaml's).
    held_through(cell, 1010, 29.0);
    let f = &cell["counts"]["fanout"];
    assert_eq!(f["publishers"].as_u64(), Some(10), "{f}");
    assert_eq!(f["unreadable"].as_u64(), Some(0), "{f}");
    let topics = f["topics"].as_array().expect("a tally per topic");
    assert_eq!(topics.len(), 10);
    let mut delivered = 0;
    for t in topics {
        // 100 subscribers a topic, 5 publishes a second for 30 s.
        delivered += every_member_read_every_publish(t, 100, 140);
    }
    assert_eq!(count(cell, "received"), delivered);
    assert_eq!(figure(cell, &["fanout", "completeness"]), 1.0);
    // What the broker routed by its subscription table is what the subscribers read.
    let read = delivered + f["outside"].as_u64().expect("outside");
    assert_eq!(server.settle(read, |s| stat(s, "routed")), read);
    let stats = server.stats();
    assert_eq!(stat(&stats, "subscriptions"), 1000, "{stats}");
    no_mqtt_errors_but_writes_to_closing_sockets(&stats);
    // A PINGREQ every 5 s from all 1,010 connections, each answered.
    assert!(stat(&stats, "pings") >= 1010 * 5, "{stats}");
    assert!(pushes(cell) >= 1000 * 5, "PINGRESPs: {}", pushes(cell));
    passed(&status);
}

/// Socket.IO 2 on Engine.IO 3 (npm `socket.io@2`): the client pings and the server answers,
/// so connections live only by the preset's `heartbeat`. The server at pingInterval 5 s +
/// pingTimeout 10 s closes one quiet for 15 s; the preset chats every 20 s, so between chats
/// its "2" every 5 s alone holds each connection (without it: survival 0.00%, every
/// connection closed by the server as "ping timeout"). The 10 s grace covers wsload's
/// heartbeat starting its schedule again when the measured phase begins (a gap of up to
/// twice the 5 s there; see the preset's head). A tick each 500 ms, not 100: the corpus runs
/// at once, and 10,000 pushes a second would take the cores from the other servers' proofs.
fn socketio2_client_pings_hold_engineio3_connections() {
    let server = TestServer::start(
        "socketio2",
        &[
            "--ping-interval-ms",
            "5000",
            "--ping-timeout-ms",
            "10000",
            "--tick-ms",
            "500",
        ],
    );
    let dir = Scratch::new("socketio2");
    let (status, result) = run(&dir, &preset("socketio2", "127.0.0.1:3002", &server));
    let cell = only(&result);
    clean(cell);
    held_through(cell, 1000, 59.0);
    let stats = server.stats();
    // Every Engine.IO connection is one Socket.IO socket, joined: the server connected "/"
    // itself and the preset sent no "40" of its own (that would be a second socket).
    assert_eq!(stat(&stats, "engineio"), 1000, "{stats}");
    assert_eq!(stat(&stats, "socketio"), 1000, "{stats}");
    assert_eq!(stat(&stats, "joined"), 1000, "{stats}");
    assert!(stats["disconnects"]["ping timeout"].is_null(), "{stats}");
    // The heartbeat: every connection pinged at least 11 times in its minute (one each 5 s
    // from the phase's start, beside any while the tier still opened, whose pongs are counted
    // nowhere), each answered by a "3" counted as the `pong` push, never as load.
    assert!(stat(&stats, "pingsMin") >= 11, "{stats}");
    let by_name = |name: &str| {
        cell["counts"]["pushesByName"][name]["frames"]
            .as_u64()
            .unwrap_or_else(|| panic!("pushesByName.{name} in {}", cell["counts"]))
    };
    let pongs = by_name("pong");
    assert!(pongs >= 1000 * 11, "pongs: {pongs}");
    assert!(pongs <= stat(&stats, "pings"), "{pongs} > {stats}");
    assert_eq!(count_or_zero(cell, "replies"), 0, "the server never pings");
    // The chats: one each 20 s (the first a share of that in), every ack matched by the id
    // it carries, the server's count the same.
    let sent = count(cell, "sent");
    assert!(sent >= 1000 * 2, "a chat each 20 s: {sent}");
    assert_eq!(count(cell, "lost"), 0);
    assert_eq!(count(cell, "received"), sent);
    assert_eq!(figure(cell, &["rtt", "count"]) as u64, sent);
    assert_eq!(server.settle(sent, |s| stat(s, "chats")), sent);
    // The room's ticks: ~120 a connection in a minute at 500 ms, never more than the server
    // sent; with the pongs they are every push, and nothing is unsolicited.
    let ticks = by_name("tick");
    assert!(ticks >= 1000 * 100, "room messages received: {ticks}");
    assert!(ticks <= stat(&stats, "ticks"), "{ticks} > {stats}");
    assert_eq!(pushes(cell), ticks + pongs);
    assert!(
        cell["counts"]["unsolicited"].is_null(),
        "{}",
        cell["counts"]
    );
    passed(&status);
}

/// Our own broadcaster: wsload-server's broadcast profile, every connection every message, no
/// subscribe message, each message's instant a float in milliseconds. The server pings each
/// connection every 5 s and closes one silent for 12 s (the client sends nothing else): 30 s
/// held is every ping answered. Its arguments are those examples/broadcast.yaml's
/// comment starts it with.
fn broadcast_subscribers_read_every_message_of_the_feed() {
    let server = common::Server::start(&[
        "--profile",
        "broadcast",
        "--broadcast-interval",
        "50ms",
        "--broadcast-batch",
        "1",
        "--broadcast-timestamp",
        "ms",
        "--ping-interval",
        "5s",
        "--idle-timeout",
        "12s",
    ]);
    let text = std::fs::read_to_string(repo().join("examples/broadcast.yaml")).expect("preset");
    assert!(text.contains("ws://127.0.0.1:8080/"));
    let yaml = text.replace("ws://127.0.0.1:8080", &server.ws);
    let dir = Scratch::new("broadcast");
    let (status, result) = run(&dir, &yaml);
    let cell = only(&result);
    clean(cell);
    held_through(cell, 1000, 29.0);
    let f = &cell["counts"]["fanout"];
    assert_eq!(f["byServer"].as_bool(), Some(true), "{f}");
    assert_eq!(f["unreadable"].as_u64(), Some(0), "{f}");
    let t = &f["topics"][0];
    let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("{k} in {t}"));
    assert_eq!(n("subscribers"), 1000, "{t}");
    // 20 a second for 30 s, every one read by every subscriber, once, in order.
    let span = n("lastSeq") - n("firstSeq") + 1;
    assert!(span >= 570, "{t}");
    assert_eq!(n("delivered"), span * 1000, "{t}");
    in_order_once(t);
    assert_eq!(figure(cell, &["fanout", "completeness"]), 1.0);
    assert_eq!(figure(cell, &["fanout", "gaps"]), 0.0);
    assert_eq!(count(cell, "received"), n("delivered"));
    // The server skipped nothing for a slow subscriber, and sent at least what was read.
    let lagged = server.metric("wsload_server_broadcast_lagged_total", &[]);
    assert_eq!(lagged, 0);
    let sent = server.metric(
        "wsload_server_messages_sent_total",
        &[("profile", "broadcast")],
    );
    assert!(
        sent >= n("delivered") + f["outside"].as_u64().expect("outside"),
        "{sent}"
    );
    passed(&status);
}

// @corpus-socketio2 (Socket.IO 2's tests go above this line)

/// The Python servers' counters are their whole life; a test that runs two presets on one
/// server holds each run against what moved.
fn moved(before: &Value, after: &Value, name: &str) -> u64 {
    stat(after, name) - stat(before, name)
}

/// A server's WebSocket pings over a run (uvicorn's keep-alive, Daphne's): at least `each`
/// per connection, every one answered but those in flight when the connections closed, none
/// timed out (a connection closed for one would have failed `clean`).
fn pings_answered(stats: &Value, conns: u64, each: u64) -> u64 {
    let (pings, pongs) = (stat(stats, "pings"), stat(stats, "pongs"));
    assert!(pongs >= conns * each, "{pongs} pongs: {stats}");
    assert!(pongs <= pings && pings - pongs <= conns, "{stats}");
    assert_eq!(stat(stats, "pingTimeouts"), 0, "{stats}");
    pongs
}

/// None of a topic's deliveries read twice, out of its publishes' order, or after the drain.
fn in_order_once(t: &Value) {
    for k in ["duplicates", "outOfOrder", "tooLate"] {
        assert_eq!(t[k].as_u64(), Some(0), "{k}: {t}");
    }
}

/// One topic's tally: at least `min_published` publishes in the window, each read by every one
/// of its `subscribers` subscribers, once, in order, and the span of sequence numbers read is
/// the span published. Returns the topic's deliveries.
fn every_member_read_every_publish(t: &Value, subscribers: u64, min_published: u64) -> u64 {
    let n = |k: &str| {
        t[k].as_u64()
            .unwrap_or_else(|| panic!("{k} in the tally {t}"))
    };
    assert_eq!(n("subscribers"), subscribers, "{t}");
    let published = n("published");
    assert!(
        published >= min_published,
        "{min_published} publishes or more: {t}"
    );
    assert_eq!(n("delivered"), published * subscribers, "{t}");
    assert_eq!(n("lastSeq") - n("firstSeq") + 1, published, "{t}");
    in_order_once(t);
    n("delivered")
}

/// A fan-out over `topics` topics of `per_topic` subscribers each, with wsload's publishers:
/// every publish of the window reached every subscriber of its topic, once, in order, timed
/// from its own instant. Returns (deliveries read in and outside the window, the publishers'
/// publishes, warm-up's included).
fn every_publish_delivered(cell: &Value, topics: usize, per_topic: u64) -> (u64, u64) {
    clean(cell);
    assert_eq!(count(cell, "survived"), topics as u64 * (per_topic + 1));
    let f = &cell["counts"]["fanout"];
    let n = |v: &Value, name: &str| {
        v[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} in the fanout tally {v}"))
    };
    assert_eq!(
        (n(f, "publishers"), n(f, "publishersFailed")),
        (topics as u64, 0),
        "{f}"
    );
    assert_eq!(n(f, "unreadable"), 0, "{f}");
    let tallies = f["topics"].as_array().expect("a tally per topic");
    assert_eq!(tallies.len(), topics);
    let (mut delivered, mut published) = (0, 0);
    for t in tallies {
        delivered += every_member_read_every_publish(t, per_topic, 4);
        published += n(t, "lastSeq");
    }
    assert_eq!(figure(cell, &["fanout", "completeness"]), 1.0);
    assert_eq!(figure(cell, &["fanout", "gaps"]), 0.0);
    assert_eq!(count(cell, "received"), delivered);
    assert_eq!(
        figure(cell, &["fanout", "latency", "count"]) as u64,
        delivered
    );
    assert!(figure(cell, &["fanout", "latency", "p50"]) > 0.0);
    assert!(
        cell["counts"]["unsolicited"].is_null(),
        "{}",
        cell["counts"]
    );
    (delivered + n(f, "outside"), published)
}

/// Ariadne (PyPI) on uvicorn over graphql-transport-ws, examples/ariadne.yaml as shipped:
/// 1,000 connections a minute through uvicorn's WebSocket pings, a query every 5 s each
/// answered by its operation id, and the protocol's `ping` sent as a heartbeat, answered with
/// Ariadne's bare `{"type":"pong"}` (no payload to match), each counted as a push.
fn ariadne_graphql_transport_ws_answers_queries_and_bare_pongs() {
    let server = TestServer::start("ariadne", &[]);
    let dir = Scratch::new("ariadne");
    let (status, result) = run(&dir, &preset("ariadne", "127.0.0.1:8000", &server));
    let cell = only(&result);
    clean(cell);
    held_through(cell, 1000, 59.0);
    let sent = count(cell, "sent");
    // A query every 10 s each, closed loop: a Python server slowed by whatever else the
    // machine runs stretches the schedule (4,252 in a minute with a release build beside it,
    // answers' p50 2.3 s), and no query is sent whose answer would come after the deadline.
    // The exact checks are below; this one says the schedule ran.
    assert!(sent >= 1000 * 3, "a query every 10 s each: {sent}");
    assert_eq!(count(cell, "lost"), 0);
    assert_eq!(count(cell, "mismatched"), 0);
    assert_eq!(count(cell, "received"), sent);
    assert_eq!(figure(cell, &["rtt", "count"]) as u64, sent);
    // Every query the client timed is one the server executed, and no other.
    assert_eq!(server.settle(sent, |s| stat(s, "echoes")), sent);
    let stats = server.stats();
    assert_eq!(
        stats["connections"]["graphql-transport-ws"], 1000,
        "{stats}"
    );
    let pongs = pings_answered(&stats, 1000, 10);
    // The bare pongs: one per protocol ping the server answered, but those of the last
    // heartbeat in flight at the end; neither answers nor unsolicited.
    let by_name = &cell["counts"]["pushesByName"];
    let bare = by_name["pong"]["frames"].as_u64().expect("pong pushes");
    let pinged = stat(&stats, "protocolPings");
    assert!(
        bare >= 1000 * 10 && bare <= pinged && pinged - bare <= 1000,
        "{bare} pongs, {stats}"
    );
    // Each query's `complete`, behind its `next`, but where the window ended between them.
    let complete = by_name["complete"]["frames"]
        .as_u64()
        .expect("complete pushes");
    assert!(
        complete <= sent && sent - complete <= 1000,
        "{complete} of {sent}"
    );
    assert!(
        cell["counts"]["unsolicited"].is_null(),
        "{}",
        cell["counts"]
    );
    eprintln!(
        "ariadne graphql-transport-ws: 1000 held {} s through {pongs} WebSocket pongs; {sent} queries answered (the server's echoes {}); {bare} bare pongs of {pinged} protocol pings",
        cell["measuredSecs"],
        stat(&stats, "echoes")
    );
    passed(&status);
}

/// Ariadne on uvicorn over the older `graphql-ws` subprotocol, examples/ariadne-graphql-ws.yaml
/// as shipped: 1,000 connections a minute through the protocol's `ka` keep-alives (every 5 s)
/// and uvicorn's WebSocket pings, a query every 5 s each answered by a `data` message with its
/// operation id.
fn ariadne_graphql_ws_answers_queries_through_keep_alives() {
    let server = TestServer::start("ariadne", &[]);
    let dir = Scratch::new("ariadne-graphql-ws");
    let (status, result) = run(
        &dir,
        &preset("ariadne-graphql-ws", "127.0.0.1:8000", &server),
    );
    let cell = only(&result);
    clean(cell);
    held_through(cell, 1000, 59.0);
    let sent = count(cell, "sent");
    // A query every 10 s each, closed loop: a Python server slowed by whatever else the
    // machine runs stretches the schedule (4,252 in a minute with a release build beside it,
    // answers' p50 2.3 s), and no query is sent whose answer would come after the deadline.
    // The exact checks are below; this one says the schedule ran.
    assert!(sent >= 1000 * 3, "a query every 10 s each: {sent}");
    assert_eq!(count(cell, "lost"), 0);
    assert_eq!(count(cell, "mismatched"), 0);
    assert_eq!(count(cell, "received"), sent);
    assert_eq!(figure(cell, &["rtt", "count"]) as u64, sent);
    assert_eq!(server.settle(sent, |s| stat(s, "echoes")), sent);
    let stats = server.stats();
    assert_eq!(stats["connections"]["graphql-ws"], 1000, "{stats}");
    let pongs = pings_answered(&stats, 1000, 10);
    // The `ka` keep-alives read in the window: ~12 a connection, never more than sent.
    let ka = cell["counts"]["pushesByName"]["ka"]["frames"]
        .as_u64()
        .expect("ka pushes");
    assert!(ka >= 1000 * 11, "{ka} ka");
    assert!(ka <= stat(&stats, "keepAlives"), "{ka} ka, {stats}");
    assert!(
        cell["counts"]["unsolicited"].is_null(),
        "{}",
        cell["counts"]
    );
    eprintln!(
        "ariadne graphql-ws: 1000 held {} s through {ka} ka read (the server sent {}) and {pongs} WebSocket pongs; {sent} queries answered (the server's echoes {})",
        cell["measuredSecs"],
        stat(&stats, "keepAlives"),
        stat(&stats, "echoes")
    );
    passed(&status);
}

/// Ariadne's subscriptions as a fan-out, on both subprotocols in turn against one server
/// (examples/ariadne-fanout.yaml, examples/ariadne-graphql-ws-fanout.yaml as shipped): 1,000
/// subscribers over two topics, wsload's publishers sending a GraphQL mutation that the server
/// hands to every subscription of its topic; every event's seq and publish instant (a GraphQL
/// Float) read from the event itself.
fn ariadne_subscribers_receive_every_publish_on_both_subprotocols() {
    let server = TestServer::start("ariadne", &[]);
    for (name, protocol) in [
        ("ariadne-fanout", "graphql-transport-ws"),
        ("ariadne-graphql-ws-fanout", "graphql-ws"),
    ] {
        let dir = Scratch::new(name);
        let before = server.stats();
        let (status, result) = run(&dir, &preset(name, "127.0.0.1:8000", &server));
        let cell = only(&result);
        let (read, published) = every_publish_delivered(cell, 2, 500);
        // The server's own counts: every mutation the publishers made, and every event it
        // handed a subscription read by a subscriber, in the window or out of it.
        let delivered = server.settle(stat(&before, "delivered") + read, |s| stat(s, "delivered"))
            - stat(&before, "delivered");
        let after = server.stats();
        assert_eq!(delivered, read, "{after}");
        assert_eq!(moved(&before, &after, "published"), published, "{after}");
        assert_eq!(moved(&before, &after, "subscriptions"), 1000, "{after}");
        assert_eq!(
            after["connections"][protocol]
                .as_u64()
                .expect("connections")
                - before["connections"][protocol]
                    .as_u64()
                    .expect("connections"),
            1002,
            "{after}"
        );
        assert_eq!(stat(&after, "pingTimeouts"), 0, "{after}");
        eprintln!(
            "{name}: {} delivered in the window, {read} read = the server's delivered {delivered}; {published} mutations = its published; p50 {} s, p99 {} s",
            figure(cell, &["fanout", "delivered"]),
            figure(cell, &["fanout", "latency", "p50"]),
            figure(cell, &["fanout", "latency", "p99"])
        );
        passed(&status);
    }
}

/// Django Channels on Daphne, examples/channels.yaml as shipped: 1,000 connections to a JSON
/// consumer a minute through Daphne's WebSocket pings (sent after 5 s quiet: a chat every 15 s
/// leaves two between chats), every chat answered by its seq.
fn channels_consumer_answers_every_chat_through_daphne_pings() {
    let server = TestServer::start("channels", &[]);
    let dir = Scratch::new("channels");
    let (status, result) = run(&dir, &preset("channels", "127.0.0.1:8001", &server));
    let cell = only(&result);
    clean(cell);
    held_through(cell, 1000, 59.0);
    let sent = count(cell, "sent");
    assert!(sent >= 1000 * 3, "a chat every 15 s each: {sent}");
    assert_eq!(count(cell, "lost"), 0);
    assert_eq!(count(cell, "mismatched"), 0);
    assert_eq!(count(cell, "received"), sent);
    assert_eq!(figure(cell, &["rtt", "count"]) as u64, sent);
    assert_eq!(server.settle(sent, |s| stat(s, "chats")), sent);
    let stats = server.stats();
    assert_eq!(stat(&stats, "connections"), 1000, "{stats}");
    assert_eq!(stat(&stats, "unknown"), 0, "{stats}");
    let pongs = pings_answered(&stats, 1000, 6);
    assert!(
        cell["counts"]["unsolicited"].is_null(),
        "{}",
        cell["counts"]
    );
    eprintln!(
        "channels: 1000 held {} s through {pongs} Daphne pings answered (of {}); {sent} chats answered (the server's {})",
        cell["measuredSecs"],
        stat(&stats, "pings"),
        stat(&stats, "chats")
    );
    passed(&status);
}

/// Django Channels' group broadcast, examples/channels-fanout.yaml as shipped: 1,000 members
/// of two groups, wsload's publishers' messages group_sent through the in-memory channel layer
/// to every member.
fn channels_group_broadcast_reaches_every_member() {
    let server = TestServer::start("channels", &[]);
    let dir = Scratch::new("channels-fanout");
    let (status, result) = run(&dir, &preset("channels-fanout", "127.0.0.1:8001", &server));
    let cell = only(&result);
    let (read, published) = every_publish_delivered(cell, 2, 500);
    assert_eq!(server.settle(read, |s| stat(s, "delivered")), read);
    let stats = server.stats();
    assert_eq!(stat(&stats, "published"), published, "{stats}");
    assert_eq!(stat(&stats, "joined"), 1000, "{stats}");
    assert_eq!(stat(&stats, "connections"), 1002, "{stats}");
    assert_eq!(stat(&stats, "pingTimeouts"), 0, "{stats}");
    // Members send nothing after joining: Daphne pinged them, and they answered.
    assert!(stat(&stats, "pongs") >= 1000, "{stats}");
    eprintln!(
        "channels-fanout: {} delivered in the window, {read} read = the server's delivered; {published} publishes = its published; p50 {} s, p99 {} s; {} pings answered",
        figure(cell, &["fanout", "delivered"]),
        figure(cell, &["fanout", "latency", "p50"]),
        figure(cell, &["fanout", "latency", "p99"]),
        stat(&stats, "pongs")
    );
    passed(&status);
}

// @corpus-python (Ariadne's and Django Channels' tests go above this line)

/// NATS (nats-server from the Go module proxy) over its WebSocket listener: a line protocol,
/// several lines packed in a binary frame, split on "\r\n" so that a MSG's header line and
/// its payload line are two messages. One server, its two presets in turn, each held against
/// the server's own counters (GET /varz on its monitoring port, taken before and after: the
/// counters are the server's whole life, its readiness probe's connection among them).
fn nats_lines_split_into_messages_through_its_pings() {
    let server = TestServer::start("nats", &[]);
    let delta = |before: &Value, after: &Value, name: &str| stat(after, name) - stat(before, name);

    // examples/nats.yaml: 1,000 connections a minute, a PUB every 5 s to a subject of its own,
    // answered by the MSG that delivers it back (the seq read from the header's subject).
    let dir = Scratch::new("nats");
    let before = server.stats();
    let (status, result) = run(&dir, &preset("nats", "127.0.0.1:8080", &server));
    let after = server.stats();
    let cell = only(&result);
    clean(cell);
    // The server PINGs a connection quiet for 2 s (between PUBs) and closes one that leaves
    // two PINGs unanswered: a minute held, none stale, is every PING answered.
    held_through(cell, 1000, 59.0);
    assert_eq!(delta(&before, &after, "total_connections"), 1000, "{after}");
    assert_eq!(delta(&before, &after, "stale_connections"), 0, "{after}");
    let pongs = count_or_zero(cell, "replies");
    assert!(pongs >= 1000 * 6, "PONGs to the server's PINGs: {pongs}");
    // Every PUB answered by its own MSG: the server received each once and delivered each
    // once, to the one subscriber of its subject.
    let sent = count(cell, "sent");
    assert!(sent >= 1000 * 11, "a PUB every 5 s each: {sent}");
    assert_eq!(count(cell, "lost"), 0);
    assert_eq!(count(cell, "mismatched"), 0);
    assert_eq!(count(cell, "received"), sent);
    assert_eq!(figure(cell, &["rtt", "count"]) as u64, sent);
    assert_eq!(delta(&before, &after, "in_msgs"), sent, "{after}");
    assert_eq!(delta(&before, &after, "out_msgs"), sent, "{after}");
    // Each MSG's payload line, read apart from its header, a push; nothing unsolicited.
    let by_name = &cell["counts"]["pushesByName"];
    assert_eq!(by_name["payload"]["frames"], sent, "{by_name}");
    eprintln!(
        "nats: 1000 held {} s, {pongs} PINGs answered, {sent} PUBs answered (the server: {} in, {} out)",
        cell["measuredSecs"],
        delta(&before, &after, "in_msgs"),
        delta(&before, &after, "out_msgs")
    );
    assert!(
        cell["counts"]["unsolicited"].is_null(),
        "{}",
        cell["counts"]
    );
    passed(&status);

    // examples/nats-fanout.yaml: 1,000 subscribers of four subjects, four publishers at 5 a
    // second each, every delivery timed from the instant its payload carries.
    let dir = Scratch::new("nats-fanout");
    let before = server.stats();
    let (status, result) = run(&dir, &preset("nats-fanout", "127.0.0.1:8080", &server));
    let after = server.stats();
    let cell = only(&result);
    clean(cell);
    assert_eq!(count(cell, "survived"), 1004);
    assert_eq!(delta(&before, &after, "total_connections"), 1004, "{after}");
    assert_eq!(delta(&before, &after, "stale_connections"), 0, "{after}");
    assert_eq!(delta(&before, &after, "slow_consumers"), 0, "{after}");
    let f = &cell["counts"]["fanout"];
    let n = |v: &Value, name: &str| {
        v[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} in the fanout tally {v}"))
    };
    assert_eq!(
        (n(f, "publishers"), n(f, "publishersFailed")),
        (4, 0),
        "{f}"
    );
    assert_eq!(n(f, "unreadable"), 0, "{f}");
    let topics = f["topics"].as_array().expect("a tally per subject");
    assert_eq!(topics.len(), 4);
    let (mut delivered, mut published) = (0, 0);
    for t in topics {
        // 1,000 subscribers a subject, 5 publishes a second for 20 s.
        delivered += every_member_read_every_publish(t, 1000, 90);
        // The publishers' PUBs, warm-up's included, are numbered 1..lastSeq.
        published += n(t, "lastSeq");
    }
    assert_eq!(figure(cell, &["fanout", "completeness"]), 1.0);
    assert_eq!(figure(cell, &["fanout", "gaps"]), 0.0);
    assert_eq!(
        figure(cell, &["fanout", "latency", "count"]) as u64,
        delivered
    );
    assert!(figure(cell, &["fanout", "latency", "p50"]) > 0.0);
    // The server's own counts: every PUB the publishers made, and every MSG it delivered
    // read by a subscriber, in the window (delivered) or out of it (outside).
    assert_eq!(delta(&before, &after, "in_msgs"), published, "{after}");
    assert_eq!(
        delta(&before, &after, "out_msgs"),
        delivered + n(f, "outside"),
        "{after}"
    );
    // A MSG header line for each payload read in the window, but where a window's edge fell
    // between the two lines of one MSG (at most one a subscriber at each edge); nothing
    // unsolicited.
    let by_name = &cell["counts"]["pushesByName"];
    let headers = by_name["msg"]["frames"].as_u64().expect("msg pushes");
    assert!(
        headers.abs_diff(n(f, "readInWindow")) <= 2 * 1000,
        "{headers} MSG headers, {f}"
    );
    assert!(
        cell["counts"]["unsolicited"].is_null(),
        "{}",
        cell["counts"]
    );
    // Subscribers PUB nothing: the server PINGed them, and they answered.
    assert!(count_or_zero(cell, "replies") > 0);
    eprintln!(
        "nats-fanout: {delivered} delivered + {} outside = the server's out_msgs {}; {published} PUBs = its in_msgs; {headers} MSG headers, {} payloads read in the window",
        n(f, "outside"),
        delta(&before, &after, "out_msgs"),
        n(f, "readInWindow")
    );
    passed(&status);
}

// @corpus-nats (NATS's tests go above this line)
