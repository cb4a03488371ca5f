//! Hostile and broken servers, each a few lines of raw TCP started by its test: every failure
//! must come out named, with its evidence, and a protocol violation must be answered on the
//! wire with the close code RFC 6455 gives it (the server here reads it off the socket).

mod common;

use common::{only, run, spec};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};
use wsload::measure::{ConnectError, Dropped};
use wsload::report::CellResult;
use wsload_contract::env as var;
use wsload_ws::test_server::{accept_for, response_101};

/// A listener on an ephemeral loopback port whose every connection `handle` serves on a
/// thread of its own; what the handlers report comes back on the receiver. The threads end
/// with the test process.
fn serve<T: Send + 'static>(
    handle: impl Fn(TcpStream, Sender<T>) + Send + Sync + Copy + 'static,
) -> (u16, Receiver<T>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let tx = tx.clone();
            std::thread::spawn(move || handle(s, tx));
        }
    });
    (port, rx)
}

/// Reads the upgrade request off `s`: the `Sec-WebSocket-Accept` its key asks for.
fn read_request(s: &mut TcpStream) -> String {
    let mut req = Vec::new();
    let mut b = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b).expect("request");
        assert!(n > 0, "the request ended early");
        req.extend_from_slice(&b[..n]);
    }
    accept_for(&req).expect("a key")
}

/// A correct 101 for the request on `s`.
fn upgrade(s: &mut TcpStream) {
    let accept = read_request(s);
    let resp = response_101(&accept, "");
    s.write_all(resp.as_bytes()).expect("101");
}

/// One client frame off the wire: its first byte (FIN and opcode) and its unmasked payload.
fn client_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).expect("a frame header");
    assert_eq!(h[1] & 0x80, 0x80, "client frames are masked");
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l).expect("length");
            usize::from(u16::from_be_bytes(l))
        }
        127 => panic!("no client frame here is that long"),
        n => usize::from(n),
    };
    let mut key = [0u8; 4];
    s.read_exact(&mut key).expect("mask key");
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).expect("payload");
    for (i, b) in p.iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
    (h[0], p)
}

/// What the server read after its violation: the client's close frame's status code (`None`
/// for a close without one), and whether the client then ended its stream with a FIN (read
/// as the end of the stream) rather than a reset.
#[derive(Debug, PartialEq)]
struct Closed {
    code: Option<u16>,
    fin: bool,
}

/// Reads the client's close frame; `then` runs before the rest of the stream is read (to stop
/// a flood, as a server does once it reads a close).
fn read_close(s: &mut TcpStream, then: impl FnOnce(&mut TcpStream)) -> Closed {
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let (b0, payload) = client_frame(s);
    assert_eq!(b0, 0x88, "the client's first frame is a close");
    let code = (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
    then(s);
    let mut rest = Vec::new();
    let fin = s.read_to_end(&mut rest).is_ok() && rest.is_empty();
    Closed { code, fin }
}

fn target(port: u16) -> String {
    format!("  target: {{url: \"ws://127.0.0.1:{port}/\"}}\n")
}

fn dropped(c: &CellResult, why: Dropped) -> u64 {
    c.measure.counts.dropped.get(&why).copied().unwrap_or(0)
}

fn failed(c: &CellResult, why: ConnectError) -> u64 {
    c.measure.counts.failed.get(&why).copied().unwrap_or(0)
}

fn evidence<'a>(c: &'a CellResult, label: &str) -> &'a str {
    c.measure
        .counts
        .evidence
        .get(label)
        .map_or("", String::as_str)
}

/// Zeros: after a frame header, its payload, without end.
fn zeros() -> Vec<u8> {
    vec![0u8; 64 * 1024]
}

/// One connection held against a server that upgrades it and sends `bytes` with its 101: the cell, and
/// what the server read back. With `flood`, the server keeps sending what it makes (zeros,
/// frames) after them until it reads the client's close frame, then ends its side of the
/// stream, as a server does. `extra`: more lines of the spec.
fn violation(
    name: &str,
    bytes: &'static [u8],
    flood: Option<fn() -> Vec<u8>>,
    extra: &str,
) -> (CellResult, Closed) {
    violation_in(
        "  scenario: sustainedHold\n  connections: [1]\n  duration: 2s\n",
        name,
        bytes,
        flood,
        extra,
    )
}

/// [`violation`] in another scenario (its `scenario`, `connections` and other lines).
fn violation_in(
    scenario: &str,
    name: &str,
    bytes: &'static [u8],
    flood: Option<fn() -> Vec<u8>>,
    extra: &str,
) -> (CellResult, Closed) {
    let (port, rx) = serve(move |mut s, tx| {
        // With its 101, in one write: a client that reads what came with the 101 before it
        // sends anything meets the violation first, whatever the scheduler does (sent apart,
        // a storm's close once went out before the violation arrived: no code owed).
        let accept = read_request(&mut s);
        let mut first = response_101(&accept, "").into_bytes();
        first.extend_from_slice(bytes);
        s.write_all(&first).expect("the 101 and the violation");
        let stop = Arc::new(AtomicBool::new(false));
        // The flood's end: `false` if a write failed (the client reset the connection).
        let flooding = flood.map(|make| {
            let mut w = s.try_clone().expect("clone");
            let stop = stop.clone();
            std::thread::spawn(move || {
                let chunk = make();
                while !stop.load(Ordering::Relaxed) {
                    if w.write_all(&chunk).is_err() {
                        return false;
                    }
                }
                true
            })
        });
        let mut flood_ok = true;
        let mut closed = read_close(&mut s, |s| {
            stop.store(true, Ordering::Relaxed);
            if let Some(f) = flooding {
                flood_ok = f.join().expect("the flood");
            }
            let _ = s.shutdown(std::net::Shutdown::Write);
        });
        closed.fin &= flood_ok;
        let _ = tx.send(closed);
    });
    let r = run(&spec(name, &format!("{}{scenario}{extra}", target(port))));
    let closed = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the server read a close frame");
    (only(&r).clone(), closed)
}

/// Before: counted as `reset`, no evidence, and no close frame reached the server.
fn assert_protocol_error(name: &str, bytes: &'static [u8], code: u16, rule: &str) {
    let (c, closed) = violation(name, bytes, None, "");
    assert_eq!(dropped(&c, Dropped::ProtocolError), 1, "{name}");
    assert_eq!(c.measure.counts.dropped_total(), 1, "{name}");
    assert!(
        evidence(&c, "protocol_error").contains(rule),
        "{name}: {:?}",
        c.measure.counts.evidence
    );
    assert!(
        evidence(&c, "protocol_error").contains(&format!("close {code} sent")),
        "{name}"
    );
    assert_eq!(
        closed,
        Closed {
            code: Some(code),
            fin: true
        },
        "{name}"
    );
}

#[test]
fn a_reserved_bit_is_closed_with_1002() {
    assert_protocol_error("rsv", &[0xC1, 0x00], 1002, "Reserved bits are non-zero");
}

#[test]
fn a_masked_server_frame_is_closed_with_1002() {
    assert_protocol_error(
        "masked",
        &[0x81, 0x82, 1, 2, 3, 4, 5, 6],
        1002,
        "masked frame from server",
    );
}

#[test]
fn a_fragmented_control_frame_is_closed_with_1002() {
    assert_protocol_error(
        "fragmented-ping",
        &[0x09, 0x00],
        1002,
        "Fragmented control frame",
    );
}

#[test]
fn invalid_utf8_is_closed_with_1007() {
    assert_protocol_error("utf8", &[0x81, 0x02, 0xff, 0xfe], 1007, "invalid UTF-8");
}

/// 1005 means "no status code" and must never be sent (RFC 6455 7.4.1). Before: `reset`.
#[test]
fn close_code_1005_on_the_wire_is_closed_with_1002() {
    assert_protocol_error(
        "close-1005",
        &[0x88, 0x02, 0x03, 0xED],
        1002,
        "Invalid close sequence",
    );
}

/// One connection against a server that sends `bytes`, then `flood` until it reads a close:
/// dropped as `message_too_big`, nothing else, the evidence naming `over` (the size against
/// the limit) and the 1009 sent. The client reads and drops the flood until the server, having
/// read the close, ends its side: then it closes with a FIN. (Dropped at once, its socket
/// would still hold unread flood and the kernel would reset the connection.)
fn assert_message_too_big(
    name: &str,
    bytes: &'static [u8],
    flood: fn() -> Vec<u8>,
    extra: &str,
    over: &str,
) {
    let (c, closed) = violation(name, bytes, Some(flood), extra);
    assert_eq!(
        dropped(&c, Dropped::MessageTooBig),
        1,
        "{name}: {:?}",
        c.measure.counts
    );
    assert_eq!(c.measure.counts.dropped_total(), 1, "{name}");
    let e = evidence(&c, "message_too_big");
    assert!(
        e.contains(over) && e.contains("close 1009 sent"),
        "{name}: {e}"
    );
    assert_eq!(
        closed,
        Closed {
            code: Some(1009),
            fin: true
        },
        "{name}"
    );
}

/// A frame header announcing 1 GiB, then the server keeps sending. Before: counted as
/// `error`, and the server saw no close frame.
#[test]
fn a_1_gib_frame_is_message_too_big_closed_with_1009() {
    const HEADER: [u8; 10] = [0x82, 127, 0, 0, 0, 0, 0x40, 0, 0, 0];
    assert_message_too_big("gib", &HEADER, zeros, "", "1073741824");
}

/// A storm's connection reads what came with the 101 before its close goes out: a violation
/// there is that violation, named with its rule and answered with its code on the wire.
/// Before: `reset` 1 of 1, no evidence (the finding blamed "another machine"), and wsload's
/// close carried no code.
#[test]
fn a_storm_names_a_violation_and_answers_it_with_its_code() {
    const RSV: [u8; 2] = [0xC1, 0x00];
    const GIB: [u8; 10] = [0x82, 127, 0, 0, 0, 0, 0x40, 0, 0, 0];
    /// A case: its name, what the server sends after the 101 (and floods after it), the drop
    /// and its label, the close code owed, and what the evidence names.
    struct Case {
        name: &'static str,
        bytes: &'static [u8],
        flood: Option<fn() -> Vec<u8>>,
        why: Dropped,
        label: &'static str,
        code: u16,
        rule: &'static str,
    }
    let cases = [
        Case {
            name: "storm-rsv",
            bytes: &RSV,
            flood: None,
            why: Dropped::ProtocolError,
            label: "protocol_error",
            code: 1002,
            rule: "Reserved bits are non-zero",
        },
        Case {
            name: "storm-gib",
            bytes: &GIB,
            flood: Some(zeros),
            why: Dropped::MessageTooBig,
            label: "message_too_big",
            code: 1009,
            rule: "1073741824",
        },
    ];
    for Case {
        name,
        bytes,
        flood,
        why,
        label,
        code,
        rule,
    } in cases
    {
        let (c, closed) = violation_in(
            "  scenario: connectionStorm\n  connections: [1]\n",
            name,
            bytes,
            flood,
            "",
        );
        let n = &c.measure.counts;
        assert_eq!(n.dropped, [(why, 1)].into(), "{name}: {n:?}");
        let e = evidence(&c, label);
        assert!(
            e.contains(rule) && e.contains(&format!("close {code} sent")),
            "{name}: {e}"
        );
        assert_eq!(
            closed,
            Closed {
                code: Some(code),
                fin: true
            },
            "{name}"
        );
    }
}

/// A close frame without a status: the server closed, with no code, which reports as 1005.
/// Before: counted as `server_close` with no code at all.
#[test]
fn a_close_without_a_status_is_a_server_close_coded_1005() {
    let (c, closed) = violation("close-no-status", &[0x88, 0x00], None, "");
    assert_eq!(dropped(&c, Dropped::ServerClose), 1);
    assert_eq!(c.measure.counts.dropped_total(), 1);
    assert_eq!(c.measure.counts.close_codes.get("1005"), Some(&1));
    assert!(
        evidence(&c, "server_close").contains("without a status code"),
        "{:?}",
        c.measure.counts.evidence
    );
    // The client answered the close as it came: without a code.
    assert_eq!(closed.code, None);
}

/// A storm of 3 against a server that answers the upgrade with `response` (the key's accept
/// value substituted for `{accept}`).
/// [`storm_against`] a response every attempt must fail as `upgrade_invalid` (3 of 3): its
/// evidence.
fn upgrade_invalid(name: &str, response: &'static str) -> String {
    let r = storm_against(name, response);
    let c = only(&r);
    assert_eq!(failed(c, ConnectError::UpgradeInvalid), 3, "{name}");
    evidence(c, "upgrade_invalid").to_string()
}

fn storm_against(name: &str, response: &'static str) -> wsload::report::RunResult {
    let (port, _rx) = serve::<()>(move |mut s, _| {
        let accept = read_request(&mut s);
        let _ = s.write_all(response.replace("{accept}", &accept).as_bytes());
        // Keep the socket until the client is done with it.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    run(&spec(
        name,
        &format!(
            "{}  scenario: connectionStorm\n  connections: [3]\n",
            target(port)
        ),
    ))
}

/// Before: `upgrade_rejected` with neither status nor body.
#[test]
fn an_http_500_names_its_status_and_body() {
    let r = storm_against(
        "http-500",
        "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 22\r\n\r\ndatabase is down\r\nmore",
    );
    let c = only(&r);
    assert_eq!(failed(c, ConnectError::UpgradeRejected), 3);
    assert_eq!(c.measure.counts.connected, 0);
    assert_eq!(
        evidence(c, "upgrade_rejected"),
        "HTTP 500 Internal Server Error: database is down"
    );
}

/// Before: `upgrade_rejected`, the wrong value nowhere.
#[test]
fn a_wrong_accept_key_names_the_header_and_both_values() {
    let e = upgrade_invalid(
        "bad-accept",
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: abc\r\n\r\n",
    );
    assert!(
        e.starts_with("Sec-WebSocket-Accept: \"abc\" (expected \""),
        "{e}"
    );
}

/// A header flood: a valid status line, then header lines past the response head's limit
/// with no blank line. Before: "not an HTTP response: \"HTTP/1.1 101 Switching Protocols\"",
/// which it is.
#[test]
fn a_header_flood_is_named_as_one() {
    let flood: &'static str = Box::leak(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\n{}",
            "X-Flood: aaaaaaaaaaaaaaaa\r\n".repeat(4096)
        )
        .into_boxed_str(),
    );
    assert_eq!(
        upgrade_invalid("header-flood", flood),
        "no blank line ended the response head within its limit (a header flood, or not HTTP): it began \"HTTP/1.1 101 Switching Protocols\""
    );
}

/// A server that reads everything and never answers a close: each connection's closing
/// handshake waits its bound (2 s) and no longer, counted in `closeUnanswered` and said in the
/// report. Before, the 2 s past a cell's duration were said nowhere.
#[test]
fn closes_the_server_never_answers_are_counted_and_said() {
    let (port, _rx) = serve::<()>(|mut s, _| {
        upgrade(&mut s);
        let mut sink = [0u8; 4096];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    });
    let r = run(&spec(
        "close-unanswered",
        &format!(
            "{}  scenario: sustainedHold\n  connections: [2]\n  duration: 1s\n  ping: {{interval: 30s}}\n",
            target(port)
        ),
    ));
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!((n.survived, n.close_unanswered), (2, 2), "{n:?}");
    let report = r.render();
    assert!(
        report.contains(&format!(
            "closing handshake [{}]: 2 of 2 closes unanswered within 2 s",
            c.label
        )),
        "{report}"
    );
}

/// Before: `upgrade_rejected`, the missing header unnamed.
#[test]
fn a_101_without_upgrade_names_the_missing_header() {
    assert_eq!(
        upgrade_invalid(
            "no-upgrade",
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n",
        ),
        "no Upgrade: websocket header"
    );
}

/// The reasons reach the report a reader sees: a finding per reason, with its example.
#[test]
fn the_report_names_the_reason_and_its_evidence() {
    let r = storm_against(
        "http-503",
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 9\r\n\r\nsorry now",
    );
    let text = r.render();
    assert!(
        text.contains("the server refused the WebSocket upgrade (upgrade_rejected: 3 of 3 attempts; e.g. HTTP 503 Service Unavailable: sorry now)"),
        "{text}"
    );
    let json = serde_json::to_string(&r).expect("json");
    assert!(
        json.contains(
            r#""evidence":{"upgrade_rejected":"HTTP 503 Service Unavailable: sorry now"}"#
        ),
        "{json}"
    );
}

/// A server that upgrades and then never reads. `writeTimeout: 1s` in a cell of 8 s: both
/// connections end as `server_not_reading` within a few seconds (the socket buffers fill
/// first), not at the deadline. Before: blast counted ~39 MB stuck in kernel buffers as sent
/// and called the connections survived; throughput waited on its window until the deadline.
fn against_a_server_that_never_reads(name: &str, tail: &str) {
    let (port, _rx) = serve::<()>(|mut s, _| {
        upgrade(&mut s);
        std::thread::sleep(Duration::from_secs(30));
        drop(s);
    });
    let r = run(&spec(
        name,
        &format!(
            "{}  connections: [2]\n  duration: 8s\n  writeTimeout: 1s\n{tail}",
            target(port)
        ),
    ));
    let c = only(&r);
    assert_eq!(
        dropped(c, Dropped::ServerNotReading),
        2,
        "{:?}",
        c.measure.counts
    );
    assert_eq!(c.measure.counts.survived, 0);
    let e = evidence(c, "server_not_reading");
    assert!(e.starts_with("no write progress for 1s"), "{e}");
    // Every connection had ended well before the 8 s deadline, and the cell with them.
    assert!(
        c.measured_secs < 5.0,
        "the cell lasted {} s",
        c.measured_secs
    );
}

#[test]
fn blast_against_a_server_that_never_reads_is_server_not_reading() {
    against_a_server_that_never_reads("blast-stuck", "  scenario: blast\n");
}

#[test]
fn throughput_against_a_server_that_never_reads_is_server_not_reading() {
    against_a_server_that_never_reads(
        "throughput-stuck",
        "  scenario: throughput\n  message: {size: 65536}\n",
    );
}

/// The same server against the default `writeTimeout` (10 s), longer than the cell (issue 39,
/// case 2). Before: a 5 s cell of 64 KiB messages took 20.8 s (each connection waited out its
/// write timeout past the deadline), and the report said no message was sent although ~3.7 MB
/// per connection sat in the socket. Now the cell ends at its deadline: no connection is
/// dropped (none waited its timeout), what left wsload counts as sent (the kernel took it),
/// what was still queued does not, and a finding says which writes still waited and why.
#[test]
fn throughput_against_a_server_that_stops_reading_ends_on_time_counting_what_left() {
    let (port, _rx) = serve::<()>(|mut s, _| {
        upgrade(&mut s);
        std::thread::sleep(Duration::from_secs(30));
        drop(s);
    });
    let began = Instant::now();
    let r = run(&spec(
        "throughput-stops-reading",
        &format!(
            "{}  connections: [2]\n  duration: 2s\n  scenario: throughput\n  message: {{size: 65536}}\n",
            target(port)
        ),
    ));
    let took = began.elapsed();
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!(n.dropped_total(), 0, "{n:?}");
    assert_eq!((n.unwritten, n.received), (2, 0), "{n:?}");
    // What the kernel took: something, and no more than the first burst (64 in flight).
    assert!(n.sent > 0 && n.sent < 2 * 64, "{n:?}");
    assert_eq!(n.bytes_sent, n.sent * 65536, "{n:?}");
    // Each still had the rest of its burst queued.
    assert!(n.unwritten_bytes >= 2 * 65536, "{n:?}");
    let e = evidence(c, "unwritten");
    assert!(
        e.starts_with("a write still waiting at the cell's deadline: ")
            && e.contains("bytes waiting to be written")
            && e.contains("; nothing written for "),
        "{e}"
    );
    assert!(
        (c.measured_secs - 2.0).abs() < 0.5,
        "measured {} s",
        c.measured_secs
    );
    // The deadline, then the closing handshake's bound (our close cannot even be written).
    assert_eq!(n.close_unanswered, 2, "{n:?}");
    assert!(
        took < Duration::from_secs(2 + 2 + 3),
        "the run took {took:?}"
    );
    let text = r.render();
    assert!(
        text.contains("2 connections had") && text.contains("still queued at the deadline"),
        "{text}"
    );
    // Nothing measured: no echo, and no server counter to say what arrived.
    assert!(
        text.contains(&format!(
            "no echo came back and no server counted a message ({} sent)",
            n.sent
        )),
        "{text}"
    );
}

/// Paced sending (open loop) writes whatever the server reads; against one that reads
/// nothing, its writes stall too.
#[test]
fn paced_sending_to_a_server_that_never_reads_is_server_not_reading() {
    against_a_server_that_never_reads(
        "paced-stuck",
        "  scenario: constantRate\n  rate: {messagesPerSecond: 2000}\n  message: {size: 65536}\n",
    );
}

/// A blast never reads, so an echo server's answers fill the socket towards it and the server
/// stops reading: the blast waits on itself, not on the server, and its connections are not
/// `server_not_reading` however long they wait (here 5 s against `writeTimeout: 1s`).
#[test]
fn a_blast_stalled_by_its_own_unread_echoes_is_not_the_servers_fault() {
    let server = common::Server::start(&[]);
    let r = run(&spec(
        "blast-echo",
        &format!(
            "  target: {{url: {}/}}\n  scenario: blast\n  connections: [2]\n  duration: 5s\n  writeTimeout: 1s\n  message: {{size: 16384}}\n",
            server.ws
        ),
    ));
    let c = only(&r);
    assert_eq!(
        c.measure.counts.dropped_total(),
        0,
        "{:?}",
        c.measure.counts
    );
    assert_eq!(c.measure.counts.survived, 2);
    // It did send, and did stall: judged without the unread answers, this same run ends both
    // connections as `server_not_reading` after a second.
    assert!(c.measure.counts.bytes_sent > 0);
}

// --- hostile servers: what one connection may be made to hold (`connect.limits`) --------

/// `wsload run` of `body` as a child process, so its memory is its own: the result, its peak
/// resident memory in KiB (`VmHWM`, as last read from /proc before it exited) and how long it
/// ran.
fn run_child(name: &str, body: &str) -> (wsload::report::RunResult, u64, Duration) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("broken-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let file = dir.join("lt.yaml");
    let out = dir.join("result.json");
    std::fs::write(
        &file,
        format!("apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: {name}\nspec:\n{body}"),
    )
    .expect("write the spec");
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_wsload"))
        .arg("run")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .env(var::THREADS, "2")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("wsload starts");
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for wsload") {
            break status;
        }
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak_kib = peak_kib.max(kib);
        }
        if start.elapsed() > common::WATCHDOG {
            let _ = child.kill();
            panic!("{name}: wsload did not exit within the watchdog");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("{name}: no result ({status}): {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    let r: wsload::report::RunResult = serde_json::from_str(&text).expect("a wsload result");
    for c in &r.cells {
        eprintln!("{name}: {:?}", c.measure.counts);
    }
    eprintln!(
        "{name}: peak RSS {} KiB, {:.2} s",
        peak_kib,
        elapsed.as_secs_f64()
    );
    (r, peak_kib, elapsed)
}

/// The held connections of a spec against `port`: `conns` connections held for `secs`.
fn hold(port: u16, conns: u32, secs: u32, extra: &str) -> String {
    format!(
        "{}  scenario: sustainedHold\n  connections: [{conns}]\n  duration: {secs}s\n{extra}",
        target(port)
    )
}

/// What the same process peaks at against a server that upgrades and says nothing: the
/// baseline the hostile cases' memory is compared with.
fn quiet_peak_kib() -> u64 {
    static PEAK: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PEAK.get_or_init(|| {
        let (port, _rx) = serve::<()>(|mut s, _| {
            upgrade(&mut s);
            std::thread::sleep(Duration::from_secs(30));
        });
        let (_, peak, _) = run_child("quiet", &hold(port, 2, 3, ""));
        peak
    })
}

/// A frame over the connection's own `maxFrameBytes` (64 KiB here, one byte over): closed
/// with 1009 from its header alone, as the 1 GiB one is against the default.
#[test]
fn a_frame_over_max_frame_bytes_is_message_too_big_closed_with_1009() {
    const HEADER: [u8; 10] = [0x82, 127, 0, 0, 0, 0, 0, 1, 0, 1];
    assert_message_too_big(
        "frame-limit",
        &HEADER,
        zeros,
        "  connect: {limits: {maxFrameBytes: 65536}}\n",
        "65537 > 65536",
    );
}

/// A server that upgrades each connection and writes `opening`, then what `flood` makes again
/// and again until a write fails, reading nothing; and the load generator's peak memory with
/// nothing to do ([`quiet_peak_kib`]), to compare a run's against.
fn flooding_server(opening: &'static [u8], flood: fn() -> Vec<u8>) -> (u16, u64) {
    let (port, _) = serve::<()>(move |mut s, _| {
        upgrade(&mut s);
        let chunk = flood();
        if s.write_all(opening).is_ok() {
            while s.write_all(&chunk).is_ok() {}
        }
    });
    (port, quiet_peak_kib())
}

/// Continuation frames of 16 KiB, four at a time, none with FIN.
fn continuations() -> Vec<u8> {
    let mut one = vec![0x00, 126, 0x40, 0x00];
    one.resize(4 + 16 * 1024, b'x');
    one.repeat(4)
}

/// A fragmented message that never sets FIN: the reassembly stops at `maxMessageBytes`
/// (1 MiB here) with 1009, and the server reads the close.
#[test]
fn an_endless_fragmented_message_is_message_too_big_closed_with_1009() {
    // 64 continuations of 16 KiB fill the limit; the 65th passes it.
    assert_message_too_big(
        "endless-fragments",
        &[0x02, 0x00],
        continuations,
        "  connect: {limits: {maxMessageBytes: 1048576, maxFrameBytes: 65536}}\n",
        &format!("{} > 1048576", 1048576 + 16 * 1024),
    );
}

/// A server flooding continuations without end, and never reading: the peak memory of the
/// load generator follows `maxMessageBytes`. At 1 MiB it stays near the quiet baseline; at
/// the default 64 MiB it grows by about that much per connection before 1009 ends it.
#[test]
fn the_message_limit_bounds_the_memory_an_endless_message_takes() {
    let (port, quiet) = flooding_server(&[0x02, 0x00], continuations);
    let measure = |name: &str, limits: &str| {
        let (r, peak, elapsed) = run_child(name, &hold(port, 2, 3, limits));
        let c = only(&r);
        assert_eq!(
            dropped(c, Dropped::MessageTooBig),
            2,
            "{name}: {:?}",
            c.measure.counts
        );
        assert!(elapsed < Duration::from_secs(3 + 10), "{name}: {elapsed:?}");
        peak
    };
    let small = measure(
        "fragments-1m",
        "  connect: {limits: {maxMessageBytes: 1048576, maxFrameBytes: 65536}}\n",
    );
    let default = measure("fragments-64m", "");
    eprintln!("peak RSS: quiet {quiet} KiB, 1 MiB limit {small} KiB, 64 MiB limit {default} KiB");
    // Two connections of 1 MiB each, and the buffers they grew in: a few MiB over quiet.
    assert!(
        small < quiet + 16 * 1024,
        "quiet {quiet} KiB, 1 MiB limit {small} KiB"
    );
    // The default lets each reach 64 MiB (the buffer doubling as it grows may hold more).
    assert!(
        default > small + 64 * 1024,
        "1 MiB {small} KiB, 64 MiB {default} KiB"
    );
}

/// A connectionStorm of 3 at `connect.timeout: 1s` against a server that never completes
/// the upgrade: each attempt ends as `timeout`, none connected, and the run takes one
/// deadline (1 s, and the start-up), not one per byte the server trickles or forever.
fn three_attempts_time_out_at_1s(name: &str, port: u16) {
    let start = Instant::now();
    let r = run(&spec(
        name,
        &format!(
            "{}  scenario: connectionStorm\n  connections: [3]\n  connect: {{timeout: 1s}}\n",
            target(port)
        ),
    ));
    let elapsed = start.elapsed();
    let c = only(&r);
    assert_eq!(
        failed(c, ConnectError::Timeout),
        3,
        "{name}: {:?}",
        c.measure.counts
    );
    assert_eq!(c.measure.counts.connected, 0, "{name}");
    assert!(elapsed >= Duration::from_secs(1), "{name}: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(1 + 8), "{name}: {elapsed:?}");
}

/// A server that accepts TCP and then answers the upgrade one byte every 100 ms, without
/// end: bytes keep arriving, the attempt still ends at `connect.timeout`.
#[test]
fn a_trickled_handshake_is_a_timeout_at_connect_timeout() {
    let (port, _rx) = serve::<()>(|mut s, _| {
        let _ = read_request(&mut s);
        let head = b"HTTP/1.1 101 Switching Protocols\r\nX-Trickle: ";
        for b in head.iter().chain(std::iter::repeat(&b'a')) {
            if s.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    three_attempts_time_out_at_1s("trickle", port);
}

/// A server that accepts TCP, reads the upgrade and never answers.
#[test]
fn a_handshake_never_answered_is_a_timeout_at_connect_timeout() {
    let (port, _rx) = serve::<()>(|mut s, _| {
        let _ = read_request(&mut s);
        std::thread::sleep(Duration::from_secs(30));
    });
    three_attempts_time_out_at_1s("silent-upgrade", port);
}

/// 512 pings of 125 bytes, ready to be written in one go.
fn pings() -> Vec<u8> {
    let mut one = vec![0x89, 125];
    one.resize(2 + 125, b'p');
    one.repeat(512)
}

/// A server that floods pings and reads nothing: the pongs back up past the socket buffers,
/// then past `maxPendingWriteBytes` (64 KiB here), and each connection ends as
/// `server_not_reading` well before the cell's end; memory stays near the quiet baseline.
/// Before: the pongs queued without bound for as long as the cell lasted.
#[test]
fn a_ping_flood_that_never_reads_is_server_not_reading_at_max_pending_write_bytes() {
    let (port, quiet) = flooding_server(&[], pings);
    let (r, peak, elapsed) = run_child(
        "ping-flood",
        &hold(
            port,
            2,
            6,
            "  writeTimeout: 30s\n  connect: {limits: {maxPendingWriteBytes: 65536}}\n",
        ),
    );
    let c = only(&r);
    assert_eq!(
        dropped(c, Dropped::ServerNotReading),
        2,
        "{:?}",
        c.measure.counts
    );
    assert_eq!(c.measure.counts.dropped_total(), 2);
    let e = evidence(c, "server_not_reading");
    assert!(e.contains("maxPendingWriteBytes"), "{e}");
    assert!(
        c.measured_secs < 5.0,
        "the connections ended long before the 6 s deadline: {} s",
        c.measured_secs
    );
    assert!(elapsed < Duration::from_secs(6 + 10), "{elapsed:?}");
    assert!(
        peak < quiet + 16 * 1024,
        "quiet {quiet} KiB, ping flood {peak} KiB"
    );
}

/// Tiny text frames ("x"), 64 KiB of them at a time.
fn tiny_messages() -> Vec<u8> {
    [0x81u8, 0x01, b'x'].repeat(64 * 1024 / 3)
}

/// A server that floods small messages as fast as it can: nothing is an error, the cell ends
/// at its deadline, the frames are counted as unsolicited (never as received or answers), and
/// memory stays near the quiet baseline.
#[test]
fn a_flood_of_small_messages_is_counted_unsolicited_and_ends_on_time() {
    let (port, quiet) = flooding_server(&[], tiny_messages);
    let (r, peak, elapsed) = run_child("message-flood", &hold(port, 2, 3, ""));
    let c = only(&r);
    assert_eq!(
        c.measure.counts.dropped_total(),
        0,
        "{:?}",
        c.measure.counts
    );
    assert_eq!(c.measure.counts.survived, 2);
    assert_eq!(c.measure.counts.received, 0);
    let text = c
        .measure
        .counts
        .unsolicited
        .get(&wsload::measure::FrameKind::Text)
        .copied()
        .unwrap_or_default();
    assert!(text.frames > 100_000, "{text:?}");
    assert_eq!(text.bytes, text.frames, "one byte each");
    assert!(c.measured_secs < 3.0 + 2.0, "{} s", c.measured_secs);
    assert!(elapsed < Duration::from_secs(3 + 10), "{elapsed:?}");
    assert!(
        peak < quiet + 16 * 1024,
        "quiet {quiet} KiB, flood {peak} KiB"
    );
}

/// A server that closes the connection with its 101 (the upgrade and the FIN in one go):
/// every connection of a hold is gone before its first ping. Nothing was measured, whatever
/// survival says: the run exits 4 naming why. Before: "Survival 0.00%", no verdict, exit 0.
#[test]
fn a_hold_whose_connections_all_die_before_a_ping_exits_4() {
    let (port, _rx) = serve::<()>(|mut s, _| {
        upgrade(&mut s);
        let _ = s.shutdown(std::net::Shutdown::Both);
    });
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("broken-died-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let file = dir.join("lt.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: died\nspec:\n{}",
            hold(port, 2, 2, "")
        ),
    )
    .expect("write the spec");
    let out = Command::new(env!("CARGO_BIN_EXE_wsload"))
        .arg("run")
        .arg(&file)
        .env(var::THREADS, "1")
        .stdin(Stdio::null())
        .output()
        .expect("wsload runs");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{stdout}");
    assert!(
        stdout.contains("no connection survived to measure: all 2 ended before any round trip"),
        "{stdout}"
    );
}

/// A server that floods empty pings and reads nothing. Before, a held connection whose ping
/// write waited on the full socket read nothing meanwhile: the server blocked writing its
/// flood to us, we blocked writing our ping (and the pongs before it) to it, and the run hung
/// (1 in 3 here, 2 of 3 in the issue, still running at 90 s). Now a write reads while it
/// waits, and may not wait past the cell's deadline (its grace aside): the cell ends on time,
/// every connection survived or ended as `server_not_reading` with its evidence, and no round
/// trip was measured.
#[test]
fn a_hold_against_a_ping_flood_that_never_reads_ends_on_time() {
    let (port, _rx) = serve::<()>(|mut s, _| {
        upgrade(&mut s);
        let flood = [0x89u8, 0x00].repeat(4096);
        while s.write_all(&flood).is_ok() {}
    });
    let (r, _, elapsed) = run_child("ping-flood-hold", &hold(port, 2, 5, ""));
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!(n.connected, 2, "{n:?}");
    let not_reading = dropped(c, Dropped::ServerNotReading);
    assert_eq!(n.survived + not_reading, 2, "{n:?}");
    assert_eq!(n.received, 0, "{n:?}");
    if not_reading > 0 {
        let e = evidence(c, "server_not_reading");
        assert!(
            e.starts_with("no write progress for")
                || e.starts_with("a write still waiting at the cell's deadline"),
            "{e}"
        );
    }
    // 5 s, then at most the goodbye's 2 s and the grace of an answer in flight: a hang is
    // the watchdog's 90 s.
    assert!(elapsed < Duration::from_secs(20), "ran {elapsed:?}");
}
