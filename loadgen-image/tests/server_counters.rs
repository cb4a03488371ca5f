//! What the server did with the connections, from its own counters: a real wsload-server
//! reached through a link that holds the upgrade past the server's handshake timeout (as a
//! machine too busy to answer does), and one that closes idle connections. The clients see
//! `closed_early` and `server_close`; the result carries the replicas' counters over the cell
//! and a finding names the server's reason beside the clients' count.

mod common;

use common::{Server, only, run, spec};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;
use wsload::measure::{ConnectError, Dropped};
use wsload_report::findings::{Rule, findings};

/// A TCP relay to `to` that holds what the client sends for `hold` before passing it on: the
/// server accepts at once and waits for the upgrade request that long.
fn holding_relay(to: std::net::SocketAddr, hold: Duration) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for client in l.incoming() {
            let Ok(client) = client else { return };
            std::thread::spawn(move || {
                let Ok(server) = TcpStream::connect(to) else {
                    return;
                };
                let (mut c_read, mut s_write) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                std::thread::spawn(move || {
                    std::thread::sleep(hold);
                    pipe(&mut c_read, &mut s_write);
                });
                let (mut s_read, mut c_write) = (server, client);
                pipe(&mut s_read, &mut c_write);
            });
        }
    });
    port
}

/// Copies `from` to `to` until `from` ends, then ends `to`'s write side.
fn pipe(from: &mut TcpStream, to: &mut TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf) {
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn addr(ws: &str) -> std::net::SocketAddr {
    ws.trim_start_matches("ws://")
        .trim_end_matches('/')
        .parse()
        .expect("a socket address")
}

/// The one finding of `rule` in `r`.
fn the_finding(r: &wsload::report::RunResult, rule: Rule) -> wsload_report::Finding {
    let mut f: Vec<_> = findings(r).into_iter().filter(|f| f.rule == rule).collect();
    assert_eq!(f.len(), 1, "{rule:?} in {:?}", findings(r));
    f.remove(0)
}

/// The cell's server counters, which a run against wsload-server always has.
fn counters(
    c: &wsload::report::CellResult,
) -> &wsload_report::server_connections::ServerConnections {
    c.server_connections
        .as_ref()
        .expect("the server's counters")
}

#[test]
fn upgrades_held_past_the_servers_handshake_timeout_are_named_by_the_servers_count() {
    let server = Server::start(&[
        "--handshake-timeout",
        "1s",
        "--idle-timeout",
        "0",
        "--ping-interval",
        "0",
    ]);
    let relay = holding_relay(addr(&server.ws), Duration::from_millis(2500));
    let r = run(&spec(
        "held-upgrades",
        &format!(
            "  target: {{url: \"ws://127.0.0.1:{relay}/\"}}\n  serverMetrics: {{url: {}}}\n  scenario: connectionStorm\n  connections: [5]\n  connect: {{timeout: 10s}}\n",
            server.metrics
        ),
    ));
    let c = only(&r);
    assert_eq!(
        c.measure.counts.failed.get(&ConnectError::ClosedEarly),
        Some(&5),
        "{:?}",
        c.measure.counts
    );
    let replica = counters(c);
    assert_eq!(replica.replicas, 1, "{replica:?}");
    assert_eq!(replica.busiest.as_deref(), Some(server.metrics.as_str()));
    assert_eq!(replica.accepted, 0);
    assert_eq!(replica.rejected_for("handshake_timeout"), 5, "{replica:?}");
    assert_eq!(
        the_finding(&r, Rule::ServerHandshakeTimeout).evidence,
        "handshake_timeout: 5 over 1 replica; the clients counted closed_early 5"
    );
    assert!(r.render().contains("--handshake-timeout"), "{}", r.render());
    // The kernel's resets (the server dropping sockets with the upgrade unread sends one)
    // add nothing to what the server said of these five, and blame no side.
    assert_eq!(c.kernel.len(), 1, "{:?}", c.kernel);
    assert!(
        findings(&r).iter().all(|f| f.rule != Rule::KernelResets),
        "{:?}",
        findings(&r)
    );
}

#[test]
fn connections_the_server_closed_as_idle_are_named_by_the_servers_count() {
    let server = Server::start(&["--idle-timeout", "1s", "--ping-interval", "0"]);
    let r = run(&spec(
        "idle-closed",
        &format!(
            "  target: {{url: {}/}}\n  serverMetrics: {{url: {}}}\n  scenario: sustainedHold\n  connections: [2]\n  duration: 4s\n  ping: {{interval: 30s, timeout: 10s}}\n",
            server.ws, server.metrics
        ),
    ));
    let c = only(&r);
    assert_eq!(
        c.measure.counts.dropped.get(&Dropped::ServerClose),
        Some(&2),
        "{:?}",
        c.measure.counts
    );
    let replica = counters(c);
    assert_eq!(replica.accepted, 2, "{replica:?}");
    assert_eq!(replica.closed_for("idle_timeout"), 2, "{replica:?}");
    assert_eq!(
        the_finding(&r, Rule::ServerIdleTimeout).evidence,
        "idle_timeout: 2 over 1 replica; the clients counted server_close 2"
    );
}

#[test]
fn a_quiet_run_against_the_server_counts_every_connection_and_names_nothing() {
    let server = Server::start(&[]);
    let r = run(&spec(
        "quiet",
        &format!(
            "  target: {{url: {}/}}\n  serverMetrics: {{url: {}}}\n  scenario: connectionStorm\n  connections: [20]\n",
            server.ws, server.metrics
        ),
    ));
    let c = only(&r);
    let replica = counters(c);
    assert_eq!(replica.accepted, 20, "{replica:?}");
    assert!(replica.rejected.is_empty(), "{replica:?}");
    let server_rules = [
        Rule::ServerHandshakeTimeout,
        Rule::ServerIdleTimeout,
        Rule::ServerCapacity,
        Rule::ServerImbalance,
    ];
    assert!(
        findings(&r).iter().all(|f| !server_rules.contains(&f.rule)),
        "{:?}",
        findings(&r)
    );
}

/// A hold whose connect phase outlasts the server's idle timeout: its first connections are
/// served from their open (read, answered, kept alive every ping.interval) while the rest
/// open, so the server closes none as idle. Before: they sat unread until the measured phase
/// and the server closed them (at 300,000 connections the connect phase took four minutes).
#[test]
fn a_hold_keeps_its_first_connections_alive_while_the_rest_open() {
    let server = Server::start(&["--idle-timeout", "1s", "--ping-interval", "0"]);
    let r = run(&spec(
        "slow-open",
        &format!(
            "  target: {{url: {}/}}\n  serverMetrics: {{url: {}}}\n  scenario: sustainedHold\n  connections: [6]\n  connect: {{batchSize: 1, batchInterval: 400ms}}\n  duration: 2s\n  ping: {{interval: 400ms, timeout: 5s}}\n",
            server.ws, server.metrics
        ),
    ));
    let c = only(&r);
    // Six batches 400 ms apart: the first connection waited 2 s for the measured phase.
    assert!(c.connect_secs >= 1.9, "connect phase {} s", c.connect_secs);
    assert_eq!(c.measure.counts.survived, 6, "{:?}", c.measure.counts);
    assert_eq!(
        c.measure.counts.dropped_total(),
        0,
        "{:?}",
        c.measure.counts
    );
    let replica = counters(c);
    assert_eq!(replica.accepted, 6, "{replica:?}");
    assert_eq!(replica.closed_for("idle_timeout"), 0, "{replica:?}");
}
