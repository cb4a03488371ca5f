//! Caps, limits, keepalive and the SIGTERM drain, each with the behaviour a client sees and
//! the counter that records it.

mod common;
use common::*;
use futures_util::StreamExt;
use std::io::Read;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_closes_with_1013_and_frees_places() {
    let server = Server::start(&["--max-connections", "2"]);
    // Admission happens after the upgrade, so a client can see its 101 before its place is
    // taken: wait for each place to be taken or a later client may win it.
    let mut a = connect(&server.url("/")).await;
    server.wait_metric("wsload_server_connections_active", 1.0);
    let _b = connect(&server.url("/")).await;
    server.wait_metric("wsload_server_connections_active", 2.0);
    let mut c = connect(&server.url("/")).await;
    assert_eq!(
        close_code(&mut c, Duration::from_secs(5)).await,
        Some(CloseCode::Again)
    );
    assert_eq!(
        server.metric(r#"wsload_server_connections_rejected_total{reason="capacity"}"#),
        1.0
    );
    assert_eq!(server.metric("wsload_server_connections_active"), 2.0);

    a.close(None).await.expect("close");
    while a.next().await.is_some() {}
    server.wait_metric("wsload_server_connections_active", 1.0);
    let mut d = connect(&server.url("/")).await;
    send_all(&mut d, [Message::Text("in".into())]).await;
    assert_eq!(next_data(&mut d).await, Message::Text("in".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_message_closes_with_1009() {
    let server = Server::start(&["--max-message-size", "1024"]);
    let mut ws = connect(&server.url("/")).await;
    send_all(&mut ws, [Message::Binary(vec![1u8; 1024].into())]).await;
    assert_eq!(
        next_data(&mut ws).await.len(),
        1024,
        "a message at the limit passes"
    );
    send_all(&mut ws, [Message::Binary(vec![1u8; 1025].into())]).await;
    assert_eq!(
        close_code(&mut ws, Duration::from_secs(5)).await,
        Some(CloseCode::Size)
    );
    let series =
        r#"wsload_server_connections_closed_total{profile="echo",reason="message_too_big"}"#;
    assert_eq!(server.wait_metric(series, 1.0), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_tcp_client_is_dropped_at_the_handshake_timeout() {
    let server = Server::start(&["--handshake-timeout", "300ms"]);
    let addr = server.ws[0].trim_start_matches("ws://").to_string();
    let started = Instant::now();
    let mut tcp = std::net::TcpStream::connect(&addr).expect("tcp connect");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 16];
    // The server closes without answering: read sees end of stream.
    assert_eq!(tcp.read(&mut buf).expect("read until close"), 0);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250),
        "dropped too early: {waited:?}"
    );
    assert_eq!(
        // The socket is dropped just before the rejection is counted.
        server.wait_metric(
            r#"wsload_server_connections_rejected_total{reason="handshake_timeout"}"#,
            1.0
        ),
        1.0
    );
    assert_eq!(
        server.metric(r#"wsload_server_connections_accepted_total{profile="echo"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_upgrade_request_counts_as_handshake_error() {
    let server = Server::start(&[]);
    let addr = server.ws[0].trim_start_matches("ws://").to_string();
    // A plain GET is not an upgrade: no 101, and the connection ends.
    let mut tcp = std::net::TcpStream::connect(&addr).expect("tcp connect");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    std::io::Write::write_all(&mut tcp, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
    let mut answer = String::new();
    let _ = tcp.read_to_string(&mut answer);
    assert!(!answer.contains(" 101 "), "answered {answer:?}");
    assert_eq!(
        // The socket is dropped just before the rejection is counted.
        server.wait_metric(
            r#"wsload_server_connections_rejected_total{reason="handshake_error"}"#,
            1.0
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_is_pinged_then_closed() {
    let server = Server::start(&["--ping-interval", "100ms", "--idle-timeout", "800ms"]);
    // A client that reads but never writes: tungstenite would answer pings with pongs (which
    // count as activity), so read raw frames without answering by not polling between pings.
    let mut ws = connect(&server.url("/")).await;
    let started = Instant::now();
    let first = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("a ping arrives");
    assert!(matches!(first, Some(Ok(Message::Ping(_)))), "got {first:?}");
    // Keep the connection silent: do not read again (no pong is written) until well after the
    // idle timeout, then expect the close.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let code = close_code(&mut ws, Duration::from_secs(5)).await;
    assert_eq!(code, Some(CloseCode::Normal));
    assert!(started.elapsed() >= Duration::from_millis(800));
    let series = r#"wsload_server_connections_closed_total{profile="echo",reason="idle_timeout"}"#;
    assert_eq!(server.wait_metric(series, 1.0), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_client_is_not_idle() {
    let server = Server::start(&["--ping-interval", "0", "--idle-timeout", "400ms"]);
    let mut ws = connect(&server.url("/")).await;
    for i in 0..12 {
        send_all(&mut ws, [Message::Text(format!("{i}").into())]).await;
        assert_eq!(
            next_data(&mut ws).await,
            Message::Text(format!("{i}").into())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        server.metric(
            r#"wsload_server_connections_closed_total{profile="echo",reason="idle_timeout"}"#
        ),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_with_1001_and_exits_in_bound() {
    let mut server = Server::start(&["--drain-timeout", "3s"]);
    let mut clients = Vec::new();
    for _ in 0..20 {
        clients.push(connect(&server.url("/")).await);
    }
    assert_eq!(server.get("/readyz").0, 200);
    let started = Instant::now();
    server.signal("-TERM");
    for ws in clients.iter_mut() {
        assert_eq!(
            close_code(ws, Duration::from_secs(5)).await,
            Some(CloseCode::Away)
        );
    }
    let status = server
        .wait_exit(Duration::from_secs(5))
        .expect("server exits after the drain");
    assert!(status.success(), "exit status {status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "drain took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_timeout_bounds_exit_when_clients_ignore_close() {
    let mut server = Server::start(&["--drain-timeout", "500ms"]);
    // Raw TCP clients that completed the upgrade but never read: the close handshake cannot
    // complete, so only the drain timeout ends the process.
    let addr = server.ws[0].trim_start_matches("ws://").to_string();
    let mut raw = Vec::new();
    for _ in 0..3 {
        let mut s = std::net::TcpStream::connect(&addr).expect("connect");
        use std::io::Write;
        write!(
            s,
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .expect("upgrade request");
        raw.push(s);
    }
    server.wait_metric("wsload_server_connections_active", 3.0);
    let started = Instant::now();
    server.signal("-TERM");
    let status = server
        .wait_exit(Duration::from_secs(5))
        .expect("exits within the drain timeout");
    assert!(status.success());
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[test]
fn health_ready_and_unknown_paths() {
    let server = Server::start(&[]);
    assert_eq!(server.get("/healthz"), (200, "ok\n".to_string()));
    assert_eq!(server.get("/readyz").0, 200);
    assert_eq!(server.get("/nope").0, 404);
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("# TYPE wsload_server_handshake_duration_seconds histogram"));
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wsload-server"))
        .args([
            "--profile",
            "wse",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--jwt-secret"), "stderr: {err}");

    // A port already taken is named with the listener it was for.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wsload-server"))
        .args(["--listen", &addr, "--metrics-listen", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot bind the WebSocket listener on {addr}")),
        "stderr: {err}"
    );
}
