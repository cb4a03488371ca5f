//! Replicas and open files: several server processes sharing one port (`--reuse-port`), the
//! open-file limit raised at start and exposed, and a server out of descriptors backing off.

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const ACCEPTED: &str = r#"wsload_server_connections_accepted_total{profile="echo"}"#;

/// A loopback address whose port was free a moment ago.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

/// `server` (a command line from `Server::command`) run by `sh` after `ulimit_args`.
fn under_ulimit(ulimit_args: &str, server: &Command) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit {ulimit_args} && exec \"$0\" \"$@\""))
        .arg(server.get_program())
        .args(server.get_args());
    for (k, v) in server.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd
}

/// Waits until the server's stderr contains `text`; returns the stderr.
fn wait_stderr(server: &Server, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let err = server.stderr();
        if err.contains(text) || Instant::now() > deadline {
            return err;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_port_replicas_share_one_port() {
    let addr = free_addr();
    let a = Server::start_with_listeners(&[&addr], &["--reuse-port"]);
    let b = Server::start_with_listeners(&[&addr], &["--reuse-port"]);
    assert_eq!(a.ws, b.ws, "both listen on the same address");
    assert_ne!(
        a.metrics, b.metrics,
        "each replica has its own metrics port"
    );

    let mut clients = Vec::new();
    for i in 0..40 {
        let mut ws = connect(&format!("ws://{addr}/")).await;
        send_all(&mut ws, [Message::Text(format!("{i}").into())]).await;
        assert_eq!(
            next_data(&mut ws).await,
            Message::Text(format!("{i}").into())
        );
        clients.push(ws);
    }
    // Every echo came back, so every connection was admitted by one replica or the other.
    let (on_a, on_b) = (a.metric(ACCEPTED), b.metric(ACCEPTED));
    assert_eq!(on_a + on_b, 40.0, "a: {on_a}, b: {on_b}");
    // The kernel hashes each connection's 4-tuple to a listener: all 40 on one replica has a
    // probability of 2^-39.
    assert!(on_a > 0.0 && on_b > 0.0, "a: {on_a}, b: {on_b}");
    assert_eq!(
        a.metric("wsload_server_connections_active") + b.metric("wsload_server_connections_active"),
        40.0
    );
}

#[test]
fn without_reuse_port_a_second_server_cannot_bind_the_port() {
    let addr = free_addr();
    let _first = Server::start_with_listeners(&[&addr], &[]);
    let second = |args: &[&str]| {
        let out = Server::command(&[&addr], args).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "stderr: {err}");
        err
    };
    let err = second(&[]);
    assert!(
        err.contains(&format!("cannot bind the WebSocket listener on {addr}"))
            && err.contains("--reuse-port"),
        "stderr: {err}"
    );
    // SO_REUSEPORT shares a port only among sockets that all set it.
    let err = second(&["--reuse-port"]);
    assert!(
        err.contains(&format!("cannot bind the WebSocket listener on {addr}"))
            && err.contains("did not set --reuse-port"),
        "stderr: {err}"
    );
}

#[test]
fn soft_open_file_limit_is_raised_to_the_hard_one() {
    let mut server = Server::command(&["127.0.0.1:0"], &[]);
    server.env("RUST_LOG", "info");
    let server = Server::spawn(under_ulimit("-S -n 100", &server), true);
    let limit = server.metric("wsload_server_open_files_limit");
    assert!(limit > 100.0, "limit {limit}");
    let line = format!("raised the soft open-file limit from 100 to {limit}");
    let err = wait_stderr(&server, &line);
    assert!(err.contains(&line), "stderr: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_server_backs_off_counts_and_logs_once_a_second() {
    let server = Server::command(
        &["127.0.0.1:0"],
        &["--max-connections", "1000", "--handshake-timeout", "60s"],
    );
    let server = Server::spawn(under_ulimit("-n 64", &server), true);
    assert_eq!(server.metric("wsload_server_open_files_limit"), 64.0);
    let err = wait_stderr(&server, "target.server.replicas");
    assert!(
        err.contains("--max-connections 1000 is more than this server can hold")
            && err.contains("ulimit -Hn")
            && err.contains("target.server.replicas"),
        "stderr: {err}"
    );

    // Raw TCP connections that never send their upgrade: each holds a descriptor in the server
    // until the handshake timeout, so the server runs out after about 50 of them and the rest
    // wait in the listen backlog.
    let addr = server.ws[0].trim_start_matches("ws://").to_string();
    let raw: Vec<_> = (0..100)
        .map(|_| std::net::TcpStream::connect(&addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let logged_before = server.stderr().matches("out of file descriptors").count();
    let cpu_before = cpu_ticks(server.pid());
    std::thread::sleep(Duration::from_secs(3));
    let cpu = cpu_ticks(server.pid()) - cpu_before;
    let logged = server.stderr().matches("out of file descriptors").count() - logged_before;
    assert!(logged_before >= 1, "stderr: {}", server.stderr());
    // A spinning accept loop would burn ~300 ticks (100 a second) in 3 s.
    assert!(
        cpu <= 30,
        "{cpu} clock ticks of CPU in 3 s out of descriptors"
    );
    assert!(logged <= 4, "{logged} lines in 3 s:\n{}", server.stderr());

    // Once the clients go, the server frees their descriptors and serves again.
    drop(raw);
    let mut ws = connect(&server.url("/")).await;
    send_all(&mut ws, [Message::Text("back".into())]).await;
    assert_eq!(next_data(&mut ws).await, Message::Text("back".into()));
    let failures = server.metric(r#"wsload_server_accept_errors_total{kind="file_limit"}"#);
    assert!(failures >= 1.0, "file_limit accept errors: {failures}");
}
