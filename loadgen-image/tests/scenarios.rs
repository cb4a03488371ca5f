//! Every scenario on real loopback sockets against the real `wsload-server`, through the
//! library (`wsload::conduct::run::run`), asserting the figures wsload reports and reconciling them
//! with what the server itself counted. Speeds are never compared with constants: only
//! counts, ratios and orderings.

mod common;

use common::{Server, only, run, settle, spec};
use std::time::{Duration, Instant};
use wsload::measure::{ConnectError, Dropped};
use wsload::report::CellResult;

const RECEIVED: &str = "wsload_server_messages_received_total";
const SENT: &str = "wsload_server_messages_sent_total";

/// `target.url` and `serverMetrics.url` lines pointing at `server` (indented for `spec`).
fn target(server: &Server) -> String {
    format!(
        "  target: {{url: {}/}}\n  serverMetrics: {{url: {}}}\n",
        server.ws, server.metrics
    )
}

fn dropped(c: &CellResult, why: Dropped) -> u64 {
    c.measure.counts.dropped.get(&why).copied().unwrap_or(0)
}

fn failed(c: &CellResult, why: ConnectError) -> u64 {
    c.measure.counts.failed.get(&why).copied().unwrap_or(0)
}

fn close_code(c: &CellResult, code: &str) -> u64 {
    c.measure.counts.close_codes.get(code).copied().unwrap_or(0)
}

/// What the server counted equals what the clients sent, warm-up included.
fn assert_reconciled(c: &CellResult) {
    assert_eq!(
        c.server_received,
        Some(c.measure.counts.sent_with_warmup),
        "{}: server received vs clients sent",
        c.label
    );
    assert_eq!(c.figures.delivery, Some(1.0), "{}", c.label);
}

// 1. connectionStorm

#[test]
fn storm_opens_every_connection() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "storm",
        "  scenario: connectionStorm\n  connections: [120]\n  connect: {batchSize: 40, batchInterval: 10ms}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!((n.attempted, n.connected, n.survived), (120, 120, 120));
    assert_eq!(n.failed_total() + n.dropped_total(), 0);
    assert_eq!(c.measure.hists.connect.len(), 120);
    assert_eq!(c.figures.connect.count, 120);
    assert_eq!(c.measure.hists.tcp.len(), 120);
    assert!(c.figures.connect_rate > 0.0);
    assert!(c.figures.connect.p50 > 0.0 && c.figures.connect.p50 <= c.figures.connect.p99);
    assert_eq!(c.figures.errors, 0.0);
    assert_eq!(c.figures.survival, 1.0);
    let accepted = server.metric("wsload_server_connections_accepted_total", &[]);
    assert_eq!(accepted, 120);
    assert_eq!(
        server.metric("wsload_server_connections_rejected_total", &[]),
        0
    );
    let closed = settle(120, || {
        server.metric(
            "wsload_server_connections_closed_total",
            &[("reason", "client")],
        )
    });
    assert_eq!(closed, 120, "every connection closed by the client");
}

/// A stopped server with a listen backlog of 4, met by a storm of 8: the kernel queues 5 (one
/// over the backlog) and drops the other SYNs. The server resumes once its queue is full and
/// drains it well before the clients retransmit the dropped SYNs, 1 s later, so each of those
/// 3 takes ~1 s to connect, all of it in TCP, and the report names the cause.
///
/// The retransmits come as one burst (the SYNs went out together): a queue smaller than the
/// burst would drop some again, however fast the server accepts, and push them to 3 s, 7 s, 15 s.
#[test]
fn a_full_accept_backlog_is_found_as_syn_retransmits() {
    let server = Server::start(&["--listen-backlog", "4"]);
    server.stop();
    let port: u16 = server
        .ws
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the server's port");
    let resume = {
        let pid = server.pid();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while accept_queue(port) < 4 {
                assert!(
                    Instant::now() < deadline,
                    "the storm never filled the queue"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            // The SYNs came together: whatever else the queue takes is in by now.
            std::thread::sleep(Duration::from_millis(50));
            common::signal(pid, "CONT");
        })
    };
    // Without serverMetrics: reading them would wait for the stopped server, and the storm
    // would start only once it runs again.
    let r = run(&spec(
        "backlog",
        &format!(
            "  target: {{url: {}/}}\n  scenario: connectionStorm\n  connections: [8]\n  connect: {{batchSize: 8}}\n",
            server.ws
        ),
    ));
    resume.join().expect("the server resumed");
    let c = only(&r);
    assert_eq!(c.measure.counts.connected, 8, "{:?}", c.measure.counts);
    let tcp = |p: f64| c.measure.hists.tcp.percentile(p);
    // The queued connected at once, the dropped after the retransmit.
    assert!(tcp(50.0) < 0.5, "TCP connect p50 {} s", tcp(50.0));
    assert!(
        (0.9..1.5).contains(&tcp(90.0)),
        "TCP connect p90 {} s",
        tcp(90.0)
    );
    let found = wsload_report::findings(&r);
    let syn: Vec<_> = found
        .iter()
        .filter(|f| f.rule == wsload_report::Rule::SynRetransmits)
        .collect();
    assert_eq!(syn.len(), 1, "{found:?}");
    eprintln!("{}", syn[0]);
    assert!(
        r.render().contains(&syn[0].to_string()),
        "the report says it"
    );
    // A server that keeps up is not found so.
    let healthy = Server::start(&[]);
    let r = run_on(
        &healthy,
        "backlog-ok",
        "  scenario: connectionStorm\n  connections: [24]\n  connect: {batchSize: 24}\n",
    );
    assert!(
        !wsload_report::findings(&r)
            .iter()
            .any(|f| f.rule == wsload_report::Rule::SynRetransmits),
        "{:?}",
        wsload_report::findings(&r)
    );
}

#[test]
fn storm_over_server_cap_counts_the_refused() {
    // Over its cap the server completes the upgrade, then closes with 1013 ("try again
    // later"): the client sees an open WebSocket that the server refused at once.
    let server = Server::start(&["--max-connections", "40"]);
    let r = run_on(
        &server,
        "storm-cap",
        "  scenario: connectionStorm\n  connections: [100]\n  connect: {batchSize: 25}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    // Every upgrade completed (that is what the handshake figures time)...
    assert_eq!((n.attempted, n.connected), (100, 100));
    assert_eq!(n.failed_total(), 0);
    assert_eq!(c.measure.hists.connect.len(), 100);
    // ...but the server admitted only what its cap allowed and closed the rest with 1013:
    // those are drops with their close code, not held connections. (Usually exactly 40 are
    // admitted; a refused connection whose server task ran late may find a place that an
    // early goodbye freed, so the server's own books are the reference.)
    let accepted = server.metric("wsload_server_connections_accepted_total", &[]);
    let refused = server.metric(
        "wsload_server_connections_rejected_total",
        &[("reason", "capacity")],
    );
    assert_eq!(accepted + refused, 100);
    assert!(accepted >= 40 && refused >= 50, "{accepted} / {refused}");
    assert_eq!(n.survived, accepted);
    assert_eq!(dropped(c, Dropped::ServerClose), refused);
    assert_eq!(n.dropped_total(), refused);
    assert_eq!(close_code(c, "1013"), refused);
    assert_eq!(c.figures.survival, accepted as f64 / 100.0);
    // The table shows them.
    let table = r.render();
    assert!(table.contains(&format!("| {refused} |")), "{table}");
}

// 2. pingLatency

#[test]
fn ping_latency_counts_every_ping() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "ping",
        "  scenario: pingLatency\n  connections: [20]\n  ping: {count: 10}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.survived), (20, 20));
    assert_eq!(c.figures.rtt.count, 200);
    assert_eq!(c.figures.rtt_raw.count, 200);
    assert_eq!((n.expected, n.lost, n.mismatched), (200, 0, 0));
    // App pings are echoed data messages: sent, received and reconciled one for one.
    assert_eq!((n.sent, n.received), (200, 200));
    assert_reconciled(c);
    let rtt = &c.figures.rtt;
    assert!(rtt.p50 > 0.0 && rtt.p50 <= rtt.p99 && rtt.p99 <= rtt.max);
    assert_eq!(c.figures.loss, 0.0);
}

#[test]
fn ping_latency_against_a_silent_server_loses_every_ping() {
    let server = Server::start(&["--profile", "sink"]);
    let lt = spec(
        "ping-sink",
        &format!(
            "{}  scenario: pingLatency\n  connections: [10]\n  ping: {{count: 3, timeout: 200ms}}\n",
            target(&server)
        ),
    );
    let started = Instant::now();
    let r = run(&lt);
    let c = only(&r);
    let n = &c.measure.counts;
    // Every ping is accounted for: sent, expected, lost; none answered, none forgotten.
    assert_eq!((n.sent, n.expected, n.lost), (30, 30, 30));
    assert_eq!(c.figures.rtt.count, 0);
    assert_eq!(c.figures.loss, 1.0);
    // A lost ping does not end the connection in pingLatency: the next one goes out.
    assert_eq!((n.connected, n.survived, n.dropped_total()), (10, 10, 0));
    // The server did get them.
    assert_reconciled(c);
    // Three timeouts in a row per connection, not more.
    assert!(started.elapsed() >= Duration::from_millis(600));
}

#[test]
fn ping_latency_over_the_wse_protocol() {
    let server = Server::start(&["--profile", "wse", "--jwt-secret", "s3cret"]);
    let r = run_on(
        &server,
        "ping-wse",
        "  protocol: wse\n  auth: {jwt: {secret: {value: s3cret}}}\n  scenario: pingLatency\n  connections: [10]\n  ping: {count: 5}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.failed_total(), n.survived), (10, 0, 10));
    // The server's `ready` phase is timed for every connection.
    assert_eq!(c.measure.hists.ready.len(), 10);
    assert_eq!(c.figures.rtt.count, 50);
    assert_eq!((n.expected, n.lost), (50, 0));
    assert_eq!(n.sent, 50);
    // The PONGs: each server_hello was taken by the open step that expects it.
    assert_eq!(n.received, 50);
    // The server counts the client_hello of each connection as well as the pings.
    assert_eq!(server.metric(RECEIVED, &[("profile", "wse")]), 60);
    assert_reconciled(c);
    assert_eq!(server.metric("wsload_server_auth_failures_total", &[]), 0);
}

#[test]
fn wse_with_a_wrong_secret_fails_every_connection_as_auth() {
    let server = Server::start(&["--profile", "wse", "--jwt-secret", "s3cret"]);
    let r = run_on(
        &server,
        "ping-wse-bad",
        "  protocol: wse\n  auth: {jwt: {secret: {value: wrong}}}\n  scenario: pingLatency\n  connections: [6]\n  ping: {count: 2}\n",
    );
    let c = only(&r);
    assert_eq!(c.measure.counts.connected, 0);
    assert_eq!(failed(c, ConnectError::AuthFailed), 6);
    assert_eq!(c.figures.errors, 1.0);
    assert!(
        r.notes.iter().any(|n| n.contains("auth_failed x6")),
        "{:?}",
        r.notes
    );
    assert_eq!(
        server.metric(
            "wsload_server_auth_failures_total",
            &[("reason", "bad_signature")]
        ),
        6
    );
}

#[test]
fn ping_latency_with_websocket_ping_frames() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "ping-frame",
        "  scenario: pingLatency\n  connections: [10]\n  ping: {count: 5, kind: frame}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!(c.figures.rtt.count, 50);
    assert_eq!((n.expected, n.lost, n.mismatched), (50, 0, 0));
    // Control frames are not data messages, on either side.
    assert_eq!((n.sent, n.received), (0, 0));
    assert_eq!(c.server_received, Some(0));
}

// 3. throughput

#[test]
fn throughput_against_echo_is_reconciled_exactly() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "tp-echo",
        "  scenario: throughput\n  connections: [8]\n  duration: 1s\n  warmup: 300ms\n  window: 16\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert!(n.sent > 0);
    // The warm-up's messages are not figures, but the server got them too.
    assert!(n.sent_with_warmup > n.sent);
    assert_reconciled(c);
    // Echoes were read, never more than what was sent.
    assert!(n.received > 0 && n.received <= n.sent_with_warmup);
    assert_eq!(n.bytes_sent, n.sent * 64);
    assert_eq!((n.survived, n.dropped_total()), (8, 0));
    assert!(c.figures.sent_per_sec > 0.0 && c.figures.received_per_sec > 0.0);
    // The client read no more echoes than the server sent. (The server may send fewer than
    // it received: echoes of messages read in the same batch as the client's close frame are
    // not sent once the close is answered.)
    let echoed = server.metric(SENT, &[]);
    assert!(n.received <= echoed && echoed <= n.sent_with_warmup);
}

#[test]
fn throughput_against_sink_is_reconciled_exactly() {
    let server = Server::start(&["--profile", "sink"]);
    let r = run_on(
        &server,
        "tp-sink",
        "  scenario: throughput\n  connections: [8]\n  duration: 1s\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert!(n.sent > 0);
    assert_eq!(n.received, 0);
    assert_reconciled(c);
    assert_eq!((n.survived, n.dropped_total()), (8, 0));
    assert_eq!(server.metric(SENT, &[]), 0);
}

#[test]
fn throughput_with_large_messages_reads_while_it_writes() {
    // A 64-message window of 256 KiB is 16 MiB written before the first echo is awaited:
    // more than the sockets hold, so the echo server blocks writing to us and stops reading.
    // The client must read while its writes wait, or both wait forever. 3 s: on loaded cores
    // a debug server took over 1 s to echo the first window, and a deadlock reads nothing
    // however long the cell.
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "tp-large",
        "  scenario: throughput\n  connections: [2]\n  duration: 3s\n  message: {size: 262144}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert!(n.sent > 0 && n.received > 0);
    assert_eq!((n.survived, n.dropped_total()), (2, 0));
    assert_eq!(n.bytes_sent, n.sent * 262_144);
    assert_reconciled(c);
}

// 4. payloadMatrix

#[test]
fn payload_matrix_runs_every_size_and_tier() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "matrix",
        "  scenario: payloadMatrix\n  connections: [2, 4]\n  sizes: [64, 512, 2048]\n  duration: 300ms\n",
    );
    let labels: Vec<&str> = r.cells.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "64 B x 2",
            "64 B x 4",
            "512 B x 2",
            "512 B x 4",
            "2 KiB x 2",
            "2 KiB x 4"
        ]
    );
    let expect = [(64, 2), (64, 4), (512, 2), (512, 4), (2048, 2), (2048, 4)];
    for (c, (size, conns)) in r.cells.iter().zip(expect) {
        let n = &c.measure.counts;
        assert_eq!((c.size, c.connections), (size, conns), "{}", c.label);
        assert_eq!(n.connected, u64::from(conns), "{}", c.label);
        assert!(n.sent > 0, "{}", c.label);
        // JSON messages are padded to exactly the cell's size.
        assert_eq!(n.bytes_sent, n.sent * u64::from(size), "{}", c.label);
        assert_eq!(c.format, "json");
        assert_reconciled(c);
    }
    // Bytes the server got: the sum over cells of messages x size.
    let bytes: u64 = r
        .cells
        .iter()
        .map(|c| c.measure.counts.sent_with_warmup * u64::from(c.size))
        .sum();
    assert_eq!(
        server.metric("wsload_server_bytes_received_total", &[]),
        bytes
    );
}

// 5. formatComparison

fn format_counts(server: &Server, profile: &str, format: &str) -> u64 {
    server.metric(RECEIVED, &[("profile", profile), ("format", format)])
}

fn format_cells(r: &wsload::report::RunResult) -> [&CellResult; 3] {
    let labels: Vec<&str> = r.cells.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["json x 4", "msgpack x 4", "zlib x 4"]);
    [&r.cells[0], &r.cells[1], &r.cells[2]]
}

#[test]
fn format_comparison_matches_the_servers_per_format_counters() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "formats",
        "  scenario: formatComparison\n  connections: [4]\n  duration: 400ms\n  message: {size: 1024}\n",
    );
    let [json, msgpack, zlib] = format_cells(&r);
    for c in [json, msgpack, zlib] {
        assert!(c.measure.counts.sent > 0, "{}", c.label);
        assert_reconciled(c);
    }
    assert_eq!(
        format_counts(&server, "echo", "text"),
        json.measure.counts.sent_with_warmup
    );
    assert_eq!(
        format_counts(&server, "echo", "msgpack"),
        msgpack.measure.counts.sent_with_warmup
    );
    assert_eq!(
        format_counts(&server, "echo", "zlib"),
        zlib.measure.counts.sent_with_warmup
    );
    assert_eq!(format_counts(&server, "echo", "binary"), 0);
    // Same logical message: JSON is exactly the size asked, zlib compresses its padding.
    let per_msg = |c: &CellResult| c.measure.counts.bytes_sent / c.measure.counts.sent;
    assert_eq!(per_msg(json), 1024);
    assert!(per_msg(zlib) * 4 < per_msg(json), "{}", per_msg(zlib));
}

#[test]
fn format_comparison_over_wse_is_decoded_by_the_server() {
    let server = Server::start(&["--profile", "wse", "--wse-allow-anonymous"]);
    let r = run_on(
        &server,
        "formats-wse",
        "  protocol: wse\n  scenario: formatComparison\n  connections: [4]\n  duration: 400ms\n",
    );
    let [json, msgpack, zlib] = format_cells(&r);
    for c in [json, msgpack, zlib] {
        assert!(c.measure.counts.sent > 0, "{}", c.label);
        assert_eq!(c.measure.counts.connected, 4);
        // Includes each connection's client_hello, which the server counts too.
        assert_reconciled(c);
    }
    // Every client_hello is a JSON text frame, whatever the cell's format: one per
    // connection of each cell, counted in that cell's sent_with_warmup.
    let hello = |c: &CellResult| c.measure.counts.connected;
    let hellos = hello(json) + hello(msgpack) + hello(zlib);
    assert_eq!(hellos, 12);
    assert_eq!(
        format_counts(&server, "wse", "text"),
        json.measure.counts.sent_with_warmup + hello(msgpack) + hello(zlib)
    );
    assert_eq!(
        format_counts(&server, "wse", "msgpack"),
        msgpack.measure.counts.sent_with_warmup - hello(msgpack)
    );
    assert_eq!(
        format_counts(&server, "wse", "zlib"),
        zlib.measure.counts.sent_with_warmup - hello(zlib)
    );
    let data: u64 = [json, msgpack, zlib]
        .iter()
        .map(|c| c.measure.counts.sent)
        .sum();
    assert_eq!(server.metric(RECEIVED, &[]), data + hellos);
    // Every frame decoded: the formats are what the server expects.
    assert_eq!(
        server.metric("wsload_server_malformed_frames_total", &[]),
        0
    );
}

// 6. sustainedHold

#[test]
fn sustained_hold_survives_with_pings() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "hold",
        "  scenario: sustainedHold\n  connections: [20]\n  duration: 1200ms\n  ping: {interval: 300ms, timeout: 1s}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.survived, n.dropped_total()), (20, 20, 0));
    assert_eq!(c.figures.survival, 1.0);
    assert_eq!((n.lost, n.expected), (0, c.figures.rtt.count));
    // About three pings each (at 300, 600, 900 ms): at least two, at most four.
    assert!(
        (40..=80).contains(&c.figures.rtt.count),
        "{}",
        c.figures.rtt.count
    );
    assert_reconciled(c);
}

#[test]
fn sustained_hold_counts_idle_timeouts_against_survival() {
    // No pings within the hold (the default interval is 5 s), so the server's idle timeout
    // closes every connection with 1000.
    let server = Server::start(&["--idle-timeout", "300ms"]);
    let r = run_on(
        &server,
        "hold-idle",
        "  scenario: sustainedHold\n  connections: [10]\n  duration: 1500ms\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!(n.connected, 10);
    assert_eq!(n.survived, 0);
    assert_eq!(dropped(c, Dropped::ServerClose), 10);
    assert_eq!(close_code(c, "1000"), 10);
    assert_eq!(c.figures.survival, 0.0);
    assert_eq!(
        server.metric(
            "wsload_server_connections_closed_total",
            &[("reason", "idle_timeout")]
        ),
        10
    );
}

#[test]
fn sustained_hold_counts_a_dead_server_against_survival() {
    let mut server = Server::start(&[]);
    let lt = spec(
        "hold-kill",
        &format!(
            "  target: {{url: {}/}}\n  scenario: sustainedHold\n  connections: [10]\n  duration: 2s\n  ping: {{interval: 200ms, timeout: 1s}}\n",
            server.ws
        ),
    );
    std::thread::scope(|s| {
        let runner = s.spawn(|| run(&lt));
        // Kill it once every connection is held.
        let held = settle(10, || {
            server.metric("wsload_server_connections_active", &[])
        });
        assert_eq!(held, 10);
        std::thread::sleep(Duration::from_millis(300));
        server.kill();
        let r = runner.join().expect("the run thread ends");
        let c = only(&r);
        let n = &c.measure.counts;
        assert_eq!(n.connected, 10);
        assert_eq!(n.survived, 0);
        assert_eq!(n.dropped_total(), 10, "{:?}", n.dropped);
        assert_eq!(c.figures.survival, 0.0);
        assert!(
            c.figures.rtt.count >= 10,
            "pings answered while the server lived"
        );
        // A ping outstanding when its connection died was never answered: lost, not
        // forgotten. Every expected answer is either a round trip or a loss.
        assert_eq!(n.expected, c.figures.rtt.count + n.lost);
    });
}

#[test]
fn sustained_hold_counts_a_ping_timeout_against_survival() {
    // The sink never answers: each connection's first ping times out, and in a hold that
    // ends the connection's survival.
    let server = Server::start(&["--profile", "sink"]);
    let r = run_on(
        &server,
        "hold-timeout",
        "  scenario: sustainedHold\n  connections: [10]\n  duration: 1500ms\n  ping: {interval: 200ms, timeout: 200ms}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!(n.connected, 10);
    assert_eq!(n.survived, 0);
    assert_eq!(dropped(c, Dropped::PingTimeout), 10);
    assert_eq!((n.expected, n.lost), (10, 10));
    assert_eq!(c.figures.survival, 0.0);
    assert_eq!(c.figures.loss, 1.0);
}

// 7. connectionLimit

#[test]
fn connection_limit_finds_the_servers_cap() {
    // The managed server of the spec, with its cap passed through `target.server.args`.
    let lt = spec(
        "limit",
        "  target:\n    server:\n      args: [\"--max-connections\", \"300\"]\n  scenario: connectionLimit\n  limit: {start: 75, max: 1200, maxErrorRate: 1%, hold: 300ms, resolution: 25}\n  connect: {batchSize: 150}\n",
    );
    let r = run(&lt);
    let limit = r.limit.expect("a limit was found");
    // Within the resolution of the cap; above it only by what 1% of errors allows.
    assert!((275..=303).contains(&limit), "limit {limit}");
    assert_eq!(r.probes.len(), r.cells.len());
    assert!(r.probes.len() >= 5, "{:?}", r.probes);
    for (p, c) in r.probes.iter().zip(&r.cells) {
        assert_eq!(c.label, p.connections.to_string());
        assert_eq!(p.passed, p.error_rate < 0.01, "{p:?}");
        if p.connections <= 300 {
            assert!(p.passed, "{p:?}");
        } else {
            // The server refused everything over its cap: (n - 300) / n of the attempts.
            let over = f64::from(p.connections - 300) / f64::from(p.connections);
            assert!(!p.passed, "{p:?}");
            assert!((p.error_rate - over).abs() < 0.02, "{p:?} vs {over}");
            assert!(close_code(c, "1013") > 0, "{p:?}");
        }
    }
    // The limit is the largest probe that held; every larger probe failed.
    let best = r
        .probes
        .iter()
        .filter(|p| p.passed)
        .map(|p| p.connections)
        .max();
    assert_eq!(best, Some(limit));
    assert!(
        r.probes
            .iter()
            .filter(|p| p.connections > limit)
            .all(|p| !p.passed)
    );
    let failed_above = r
        .probes
        .iter()
        .filter(|p| !p.passed)
        .map(|p| p.connections)
        .min();
    assert!(
        failed_above.is_some_and(|f| f - limit <= 25),
        "{:?}",
        r.probes
    );
    assert!(r.render().contains(&format!("Limit: {limit} connections")));
}

// 8. pingpong, echo, blast

#[test]
fn pingpong_is_closed_loop() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "pingpong",
        "  scenario: pingpong\n  connections: [5]\n  duration: 1s\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert!(c.figures.rtt.count > 0);
    // One message in flight: each answer is one round trip, each send one expected answer.
    // The one a connection has out at the deadline may go unanswered within the grace (a
    // loaded machine): counted lost, so at most one per connection.
    assert_eq!(c.figures.rtt.count, n.received);
    assert_eq!(n.expected, n.sent);
    assert_eq!(n.sent, n.received + n.lost, "{n:?}");
    assert!(n.lost <= 5, "{n:?}");
    assert_reconciled(c);
}

#[test]
fn echo_mode_loses_nothing_against_echo() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "echo-mode",
        "  scenario: echo\n  connections: [5]\n  duration: 1s\n  rate: {messagesPerSecond: 500}\n  ping: {timeout: 1s}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert!(n.sent > 0);
    assert_eq!((n.expected, n.lost, n.mismatched), (n.sent, 0, 0));
    assert_eq!(c.figures.loss, 0.0);
    assert_eq!(c.figures.rtt.count, n.sent);
    assert_eq!(n.received, n.sent);
    assert_eq!(c.target_rate, 500.0);
    let ratio = c.figures.sent_per_sec / 500.0;
    assert!((0.9..=1.1).contains(&ratio), "sent/target {ratio}");
    assert_reconciled(c);
}

#[test]
fn echo_mode_loses_everything_against_sink() {
    let server = Server::start(&["--profile", "sink"]);
    let r = run_on(
        &server,
        "echo-sink",
        "  scenario: echo\n  connections: [5]\n  duration: 1s\n  rate: {messagesPerSecond: 200}\n  ping: {timeout: 300ms}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert!(n.sent > 0);
    assert_eq!((n.expected, n.lost), (n.sent, n.sent));
    assert_eq!(c.figures.loss, 1.0);
    assert_eq!((c.figures.rtt.count, n.received), (0, 0));
    assert_reconciled(c);
}

#[test]
fn echo_mode_counts_what_a_dead_server_never_answered_as_lost() {
    let mut server = Server::start(&[]);
    let lt = spec(
        "echo-kill",
        &format!(
            "  target: {{url: {}/}}\n  scenario: echo\n  connections: [5]\n  duration: 2s\n  rate: {{messagesPerSecond: 1000}}\n",
            server.ws
        ),
    );
    std::thread::scope(|s| {
        let runner = s.spawn(|| run(&lt));
        let flowing = settle(u64::MAX, || {
            if server.metric(RECEIVED, &[]) > 0 {
                u64::MAX
            } else {
                0
            }
        });
        assert_eq!(flowing, u64::MAX, "the load started");
        // Stop the server mid-run with answers outstanding, then kill it.
        std::thread::sleep(Duration::from_millis(300));
        server.signal("STOP");
        std::thread::sleep(Duration::from_millis(100));
        server.kill();
        let r = runner.join().expect("the run thread ends");
        let c = only(&r);
        let n = &c.measure.counts;
        assert_eq!((n.connected, n.survived, n.dropped_total()), (5, 0, 5));
        assert!(
            n.lost > 0,
            "the stalled server's messages were never answered"
        );
        assert_eq!(n.expected, n.sent);
        assert_eq!(n.expected, c.figures.rtt.count + n.lost);
        assert!(c.figures.loss > 0.0);
    });
}

#[test]
fn echo_mode_with_large_messages_survives_a_stall() {
    // 64 KiB messages pile up while the server is stopped; when it resumes, its echoes fill
    // the socket towards us while our backlog is still being written. Reading while writing
    // keeps both moving; every message is answered.
    let server = Server::start(&[]);
    let lt = spec(
        "echo-large",
        &format!(
            "{}  scenario: echo\n  connections: [2]\n  duration: 1500ms\n  message: {{size: 65536}}\n  rate: {{messagesPerSecond: 600}}\n  ping: {{timeout: 10s}}\n",
            target(&server)
        ),
    );
    std::thread::scope(|s| {
        let runner = s.spawn(|| run(&lt));
        let flowing = settle(u64::MAX, || {
            if server.metric(RECEIVED, &[]) > 0 {
                u64::MAX
            } else {
                0
            }
        });
        assert_eq!(flowing, u64::MAX, "the load started");
        std::thread::sleep(Duration::from_millis(200));
        server.signal("STOP");
        std::thread::sleep(Duration::from_millis(400));
        server.signal("CONT");
        let r = runner.join().expect("the run thread ends");
        let c = only(&r);
        let n = &c.measure.counts;
        assert!(n.sent > 0);
        assert_eq!((n.survived, n.dropped_total()), (2, 0));
        assert_eq!((n.expected, n.lost), (n.sent, 0));
        assert_eq!(c.figures.rtt.count, n.sent);
        assert_reconciled(c);
    });
}

#[test]
fn blast_sends_and_never_reads() {
    let server = Server::start(&["--profile", "sink"]);
    let r = run_on(
        &server,
        "blast",
        "  scenario: blast\n  connections: [4]\n  duration: 1s\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert!(n.sent > 0);
    assert_eq!(n.received, 0);
    assert_eq!(n.survived, 4);
    assert_reconciled(c);
}

#[test]
fn blast_against_echo_ends_on_time() {
    // The server echoes what a blast never reads: once the sockets fill, the server stops
    // reading and the client's writes block. The cell must still end at its deadline.
    let server = Server::start(&[]);
    let lt = spec(
        "blast-echo",
        &format!(
            "{}  scenario: blast\n  connections: [2]\n  duration: 1s\n  message: {{size: 16384}}\n",
            target(&server)
        ),
    );
    let started = Instant::now();
    let r = run(&lt);
    let elapsed = started.elapsed();
    let c = only(&r);
    let n = &c.measure.counts;
    assert!(n.sent > 0);
    assert_eq!(n.received, 0);
    assert_eq!((n.survived, n.dropped_total()), (2, 0));
    // What the blast handed over, cut-short burst included, reached the server: the closing
    // handshake reads the server's backlog of echoes so that it can read ours.
    assert_reconciled(c);
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
}

// 9. constantRate

#[test]
fn constant_rate_achieves_its_target() {
    let server = Server::start(&[]);
    let r = run_on(
        &server,
        "rate",
        "  scenario: constantRate\n  connections: [10]\n  duration: 2s\n  rate: {messagesPerSecond: 1000}\n",
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!(c.target_rate, 1000.0);
    let ratio = c.figures.sent_per_sec / c.target_rate;
    assert!((0.9..=1.1).contains(&ratio), "sent/target {ratio}");
    assert_eq!((n.expected, n.lost), (n.sent, 0));
    assert_eq!(c.figures.rtt.count, n.sent);
    assert_reconciled(c);
}

#[test]
fn constant_rate_shows_a_server_stall() {
    // The server is stopped (SIGSTOP) for STALL in the middle of an open-loop run. The
    // sender keeps its schedule and never waits for the server, so every message due during
    // the stall waits for its answer: the stall shows in full, from the intended send time
    // (corrected) and, since the sends were not held back, from the actual one (raw) too.
    // (That the corrected view also holds what the raw one omits when the *sender* is held
    // back is `a_stalled_load_generator_is_corrected_for`, in tests/cli.rs.)
    const STALL: Duration = Duration::from_millis(500);
    const RATE: f64 = 2000.0;
    let server = Server::start(&[]);
    let lt = spec(
        "rate-stall",
        &format!(
            "{}  scenario: constantRate\n  connections: [10]\n  duration: 2500ms\n  rate: {{messagesPerSecond: {RATE}}}\n  ping: {{timeout: 5s}}\n",
            target(&server)
        ),
    );
    {
        let (r, stall) = run_with_server_stall(&server, &lt, Duration::from_millis(400), STALL);
        let c = only(&r);
        let n = &c.measure.counts;
        let (rtt, raw) = (&c.figures.rtt, &c.figures.rtt_raw);
        // Nothing lost or dropped: the answers came after the stall.
        assert_eq!((n.expected, n.lost, n.dropped_total()), (n.sent, 0, 0));
        assert_eq!(rtt.count, n.sent);
        assert_eq!(raw.count, n.sent);
        // Some message was due within one schedule period (1/RATE over all connections) of
        // the stop and could not be answered before the server resumed.
        let period = 1.0 / RATE;
        assert!(
            rtt.max >= stall - 2.0 * period,
            "corrected max {} vs stall {stall}",
            rtt.max
        );
        // A fifth of the run was stalled: both p99s sit inside the stall. No omission.
        assert!(rtt.p99 > STALL.as_secs_f64() / 2.0, "{rtt:?}");
        assert!(raw.p99 > STALL.as_secs_f64() / 2.0, "{raw:?}");
        // Counted from the intended instant, a round trip is never shorter than from the
        // actual one; the sender is never early, so on average it is longer.
        assert!(rtt.p99 >= raw.p99, "corrected {rtt:?} vs raw {raw:?}");
        assert!(rtt.max >= raw.max, "corrected {rtt:?} vs raw {raw:?}");
        assert!(rtt.mean > raw.mean, "corrected {rtt:?} vs raw {raw:?}");
        assert_reconciled(c);
        // The report's timeline shows when: the sender keeps its schedule while no answer
        // comes, then the step the server resumes in has the stall in its p99, far above
        // the typical step's.
        let t = &c.timeline;
        assert_eq!(c.timeline_step_ms, 100);
        assert!(t.iter().any(|s| s.sent > 0 && s.received == 0), "{t:?}");
        let mut p99s: Vec<u64> = t.iter().filter_map(|s| s.p99_us).collect();
        p99s.sort_unstable();
        let worst = p99s.last().copied().unwrap_or(0);
        assert!(worst > STALL.as_micros() as u64 / 2, "{t:?}");
        assert!(p99s[p99s.len() / 2] < worst / 4, "{t:?}");
    }
}

#[test]
fn a_server_stall_under_backpressure_shows_only_in_corrected_latency() {
    // Large messages at a high byte rate: while the server is stopped, the socket buffers
    // fill within a few hundred milliseconds and the sender's writes block. Messages due
    // during the block leave late, right when the server resumes, and are answered fast from
    // their actual send time: the raw view omits the stall for them (coordinated omission),
    // the corrected view, timed from when each was due, does not.
    const STALL: Duration = Duration::from_millis(800);
    let server = Server::start(&[]);
    let lt = spec(
        "rate-stall-backpressure",
        &format!(
            "{}  scenario: constantRate\n  connections: [2]\n  duration: 3s\n  rate: {{messagesPerSecond: 1000}}\n  message: {{size: 65536, format: binary}}\n  ping: {{timeout: 10s}}\n",
            target(&server)
        ),
    );
    {
        let (r, _) = run_with_server_stall(&server, &lt, Duration::from_millis(500), STALL);
        let c = only(&r);
        let (rtt, raw) = (&c.figures.rtt, &c.figures.rtt_raw);
        assert_eq!(
            c.measure.counts.lost, 0,
            "every message was answered after the stall"
        );
        // A quarter of the run was stalled: the corrected p99 sits inside the stall...
        assert!(rtt.p99 > STALL.as_secs_f64() / 2.0, "corrected {rtt:?}");
        // ...while from the actual send times most of it disappears. Not at p99: the messages
        // sent before the buffers filled waited the whole stall in both views, and they are
        // more than 1% of the run. The held-back ones are the next tenth: measured here,
        // corrected p90 ~600 ms against raw p90 ~50 ms.
        assert!(
            rtt.p90 > raw.p90 + 0.1,
            "corrected p90 {} must exceed raw p90 {} by the time the sender was held back",
            rtt.p90,
            raw.p90
        );
        assert!(
            rtt.mean > raw.mean * 1.5,
            "corrected {rtt:?} vs raw {raw:?}"
        );
    }
}

/// Runs `lt` and, once its load reaches the server, waits `after` and then stops the server
/// (SIGSTOP) for `stall`. Returns the result and how long the server really stood still.
fn run_with_server_stall(
    server: &Server,
    lt: &wsload_spec::LoadTest,
    after: Duration,
    stall: Duration,
) -> (wsload::report::RunResult, f64) {
    std::thread::scope(|s| {
        let runner = s.spawn(|| run(lt));
        let flowing = settle(u64::MAX, || {
            if server.metric(RECEIVED, &[]) > 0 {
                u64::MAX
            } else {
                0
            }
        });
        assert_eq!(flowing, u64::MAX, "the load started");
        std::thread::sleep(after);
        let stopped = server.stop();
        std::thread::sleep(stall);
        // At most the time the server stood still.
        let stood = stopped.elapsed().as_secs_f64();
        server.signal("CONT");
        (runner.join().expect("the run thread ends"), stood)
    })
}

/// Runs a LoadTest named `name` against `server`, `tail` being the spec after the target.
fn run_on(server: &Server, name: &str, tail: &str) -> wsload::report::RunResult {
    run(&spec(name, &format!("{}{tail}", target(server))))
}

/// The connections waiting in the accept queue of the IPv4 listener on `port` (the receive
/// queue column of a listening socket in `/proc/net/tcp`).
fn accept_queue(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, rem_address, st (0A: listening), tx_queue:rx_queue
            (f.len() > 4 && f[1].ends_with(&local) && f[3] == "0A")
                .then(|| f[4].split_once(':'))
                .flatten()
                .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok())
        })
        .sum()
}
