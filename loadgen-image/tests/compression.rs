//! What real clients negotiate, against a real third-party server: npm's `ws` (the server
//! under Socket.IO, graphql-ws and most Node services), started by the test as an echo
//! server with permessage-deflate on, off, or picking a subprotocol. The runs go through
//! `wsload run`'s code; the server reports what it negotiated and the bytes its sockets
//! carried, so "compressed on the wire" is the server's count, not ours.
//!
//! `ws` is installed once with npm into the cache (`$WSLOAD_CACHE`, default
//! `~/.cache/wsload`), pinned as scripts/test-servers pins it; node and npm must be present.

mod common;

use common::{only, run, spec};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use wsload::measure::ConnectError;

const WS_VERSION: &str = "8.18.3";

/// The echo server: `DEFLATE` (JSON: ws's `perMessageDeflate` option) and `PROTOCOL` (a
/// subprotocol to pick when offered, else none) from the environment; prints its port, then
/// on each line read from stdin what it saw: connections, those that agreed to compress, the
/// subprotocols selected, the payload bytes echoed and its sockets' bytes read and written
/// (handshakes included).
const SERVER: &str = r#"
const { WebSocketServer } = require('ws');
const deflate = JSON.parse(process.env.DEFLATE);
const protocol = process.env.PROTOCOL || '';
const stats = { connections: 0, deflated: 0, protocols: [], payload: 0, read: 0, written: 0 };
const sockets = new Set();
const wss = new WebSocketServer({
  host: '127.0.0.1', port: 0, perMessageDeflate: deflate,
  handleProtocols: (offered) => (offered.has(protocol) ? protocol : false),
});
wss.on('connection', (ws, req) => {
  stats.connections++;
  if (ws.extensions.includes('permessage-deflate')) stats.deflated++;
  stats.protocols.push(ws.protocol);
  sockets.add(req.socket);
  ws.on('message', (data, isBinary) => { stats.payload += data.length; ws.send(data, { binary: isBinary }); });
  req.socket.on('close', () => { stats.read += req.socket.bytesRead; stats.written += req.socket.bytesWritten; sockets.delete(req.socket); });
});
wss.on('listening', () => console.log(wss.address().port));
require('readline').createInterface({ input: process.stdin }).on('line', () => {
  let read = stats.read, written = stats.written;
  for (const s of sockets) { read += s.bytesRead; written += s.bytesWritten; }
  console.log(JSON.stringify({ ...stats, read, written }));
});
"#;

/// `node_modules` holding `ws`, installed on first use.
fn node_modules() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let cache = std::env::var_os("WSLOAD_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/wsload")
            });
        let dir = cache.join(format!("npm-ws-{WS_VERSION}"));
        let modules = dir.join("node_modules");
        if modules.join("ws/package.json").exists() {
            return modules;
        }
        // Installed beside, then renamed: a concurrent run sees all of it or none.
        let tmp = cache.join(format!("npm-ws-{WS_VERSION}.{}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("cache dir");
        let ok = Command::new("npm")
            .args(["install", "--prefix"])
            .arg(&tmp)
            .arg(format!("ws@{WS_VERSION}"))
            .args([
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ])
            .status()
            .expect("npm (node and npm are needed for this test)");
        assert!(ok.success(), "npm install ws@{WS_VERSION} failed");
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another run got there first.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        modules
    })
}

/// A running `ws` echo server.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    port: u16,
}

impl Server {
    fn start(deflate: &str, protocol: &str) -> Server {
        let mut child = Command::new("node")
            .args(["-e", SERVER])
            .env("NODE_PATH", node_modules())
            .env("DEFLATE", deflate)
            .env("PROTOCOL", protocol)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("port: {line:?}"));
        Server {
            child,
            stdin,
            stdout,
            port,
        }
    }

    fn stats(&mut self) -> Value {
        writeln!(self.stdin).expect("ask");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("stats");
        serde_json::from_str(&line).expect("json")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A short throughput run of 1 KiB JSON echoes (padding that compresses) against `port`.
fn echoes(port: u16, extra: &str) -> wsload::report::RunResult {
    run(&spec(
        "deflate",
        &format!(
            "  target: {{url: 'ws://127.0.0.1:{port}/'}}\n  scenario: throughput\n  connections: [4]\n  duration: 2s\n  warmup: 0s\n  message: {{size: 1024}}\n{extra}"
        ),
    ))
}

#[test]
fn echoes_are_compressed_both_ways_and_measured() {
    let mut server = Server::start("{\"threshold\": 0}", "");
    let r = echoes(server.port, "  compression: {}\n");
    let c = only(&r);
    let counts = &c.measure.counts;
    assert_eq!(counts.connected, 4, "{counts:?}");
    assert!(
        counts.failed.is_empty() && counts.dropped.is_empty(),
        "{counts:?}"
    );
    assert!(counts.received > 100, "{counts:?}");
    assert_eq!(counts.mismatched, 0, "{counts:?}");
    assert_eq!(
        counts.evidence.get("negotiated").map(String::as_str),
        Some("permessage-deflate: server window 2^15, client window 2^15"),
    );
    let s = server.stats();
    assert_eq!(
        (s["connections"].as_u64(), s["deflated"].as_u64()),
        (Some(4), Some(4)),
        "{s}"
    );
    // The server inflated what it echoed; its sockets carried a fraction of it each way.
    let payload = s["payload"].as_u64().expect("payload");
    let (read, written) = (
        s["read"].as_u64().expect("read"),
        s["written"].as_u64().expect("written"),
    );
    assert!(payload >= counts.received * 1024, "{s} vs {counts:?}");
    assert!(
        read * 5 < payload,
        "client to server: {read} bytes on the wire for {payload}"
    );
    assert!(
        written * 5 < payload,
        "server to client: {written} bytes on the wire for {payload}"
    );
    eprintln!(
        "{payload} payload bytes echoed: {read} on the wire to the server, {written} back ({:.1}% and {:.1}%)",
        100.0 * read as f64 / payload as f64,
        100.0 * written as f64 / payload as f64
    );
}

#[test]
fn windows_and_context_takeover_are_negotiated_as_asked() {
    let mut server = Server::start("{\"threshold\": 0}", "");
    let r = echoes(
        server.port,
        "  compression: {serverMaxWindowBits: 10, clientMaxWindowBits: 11, serverNoContextTakeover: true, clientNoContextTakeover: true}\n",
    );
    let counts = &only(&r).measure.counts;
    assert!(
        counts.received > 100 && counts.dropped.is_empty(),
        "{counts:?}"
    );
    assert_eq!(
        counts.evidence.get("negotiated").map(String::as_str),
        Some(
            "permessage-deflate: server window 2^10 (no context takeover), client window 2^11 (no context takeover)"
        ),
    );
    assert_eq!(server.stats()["deflated"].as_u64(), Some(4));
}

#[test]
fn a_server_that_declines_is_measured_uncompressed_unless_compression_is_required() {
    let mut server = Server::start("false", "");
    let r = echoes(server.port, "  compression: {}\n");
    let counts = &only(&r).measure.counts;
    assert!(
        counts.received > 100 && counts.failed.is_empty(),
        "{counts:?}"
    );
    assert_eq!(
        counts.evidence.get("negotiated").map(String::as_str),
        Some("permessage-deflate declined: measured uncompressed"),
    );
    let s = server.stats();
    assert_eq!(s["deflated"].as_u64(), Some(0), "{s}");
    assert!(s["read"].as_u64() > s["payload"].as_u64(), "{s}");

    let r = echoes(server.port, "  compression: {required: true}\n");
    let counts = &only(&r).measure.counts;
    assert_eq!(counts.connected, 0, "{counts:?}");
    assert_eq!(
        counts.failed.get(&ConnectError::UpgradeInvalid),
        Some(&4),
        "{counts:?}"
    );
    assert_eq!(
        counts.evidence.get("upgrade_invalid").map(String::as_str),
        Some(
            "no Sec-WebSocket-Extensions: permessage-deflate declined (spec.compression.required)"
        ),
    );
}

#[test]
fn the_subprotocol_is_offered_and_what_the_server_selects_is_said() {
    let mut server = Server::start("false", "v12.stomp");
    let r = echoes(
        server.port,
        "  subprotocols: [graphql-transport-ws, v12.stomp]\n",
    );
    let counts = &only(&r).measure.counts;
    assert!(
        counts.received > 100 && counts.failed.is_empty(),
        "{counts:?}"
    );
    assert_eq!(
        counts.evidence.get("negotiated").map(String::as_str),
        Some("subprotocol \"v12.stomp\""),
    );
    let s = server.stats();
    assert_eq!(s["protocols"].as_array().map(Vec::len), Some(4), "{s}");
    assert!(
        s["protocols"]
            .as_array()
            .is_some_and(|p| p.iter().all(|p| p == "v12.stomp")),
        "{s}"
    );
    // None of the offered: the server selects none, which RFC 6455 allows; the run says so.
    let r = echoes(server.port, "  subprotocols: [mqtt]\n");
    let counts = &only(&r).measure.counts;
    assert!(
        counts.received > 100 && counts.failed.is_empty(),
        "{counts:?}"
    );
    assert_eq!(
        counts.evidence.get("negotiated").map(String::as_str),
        Some("no subprotocol selected (offered \"mqtt\")"),
    );
}
