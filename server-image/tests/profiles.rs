//! echo, sink and broadcast over real sockets, with the counters checked to the message.

mod common;
use common::*;
use futures_util::StreamExt;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_returns_every_frame_with_its_type_and_counts_exactly() {
    let server = Server::start(&["--profile", "echo"]);
    const CONNS: usize = 8;
    const PER_CONN: usize = 2_500;
    let mut tasks = Vec::new();
    for c in 0..CONNS {
        let url = server.url("/");
        tasks.push(tokio::spawn(async move {
            let mut ws = connect(&url).await;
            let msgs = (0..PER_CONN).map(|i| {
                if i % 2 == 0 {
                    Message::Text(format!("{c}:{i:05}:text-payload").into())
                } else {
                    Message::Binary(vec![c as u8; 100].into())
                }
            });
            send_all(&mut ws, msgs).await;
            for i in 0..PER_CONN {
                match next_data(&mut ws).await {
                    Message::Text(t) => {
                        assert_eq!(i % 2, 0, "text came back in a binary slot");
                        assert_eq!(t.as_str(), format!("{c}:{i:05}:text-payload"));
                    }
                    Message::Binary(b) => {
                        assert_eq!(i % 2, 1, "binary came back in a text slot");
                        assert_eq!(&b[..], &vec![c as u8; 100][..]);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            ws.close(None).await.expect("close");
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let n = (CONNS * PER_CONN / 2) as f64;
    let text_len = "0:00000:text-payload".len() as f64;
    for dir in ["received", "sent"] {
        assert_eq!(
            server.metric(&format!(
                r#"wsload_server_messages_{dir}_total{{profile="echo",format="text"}}"#
            )),
            n
        );
        assert_eq!(
            server.metric(&format!(
                r#"wsload_server_messages_{dir}_total{{profile="echo",format="binary"}}"#
            )),
            n
        );
        assert_eq!(
            server.metric(&format!(
                r#"wsload_server_bytes_{dir}_total{{profile="echo",format="text"}}"#
            )),
            n * text_len
        );
        assert_eq!(
            server.metric(&format!(
                r#"wsload_server_bytes_{dir}_total{{profile="echo",format="binary"}}"#
            )),
            n * 100.0
        );
    }
    assert_eq!(
        server.metric(r#"wsload_server_connections_accepted_total{profile="echo"}"#),
        CONNS as f64
    );
    assert_eq!(
        server.wait_metric(
            r#"wsload_server_connections_closed_total{profile="echo",reason="client"}"#,
            CONNS as f64
        ),
        CONNS as f64
    );
    assert_eq!(server.metric("wsload_server_connections_active"), 0.0);
    assert_eq!(
        server.metric(r#"wsload_server_handshake_duration_seconds_count{profile="echo"}"#),
        CONNS as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_counts_without_answering() {
    let server = Server::start(&["--profile", "sink"]);
    let mut ws = connect(&server.url("/")).await;
    const N: usize = 20_000;
    send_all(
        &mut ws,
        (0..N).map(|i| Message::Binary(vec![(i % 251) as u8; 64].into())),
    )
    .await;
    // Prefixed binary frames are classified by format even in the sink.
    send_all(&mut ws, [Message::Binary(b"M:\x80".to_vec().into())]).await;
    let series = r#"wsload_server_messages_received_total{profile="sink",format="binary"}"#;
    assert_eq!(server.wait_metric(series, N as f64), N as f64);
    assert_eq!(
        server.wait_metric(
            r#"wsload_server_bytes_received_total{profile="sink",format="binary"}"#,
            (N * 64) as f64
        ),
        (N * 64) as f64
    );
    // The prefixed frame went out last, so it may still be in flight when the binary count
    // is complete: wait for it rather than read it once.
    assert_eq!(
        server.wait_metric(
            r#"wsload_server_messages_received_total{profile="sink",format="msgpack"}"#,
            1.0
        ),
        1.0
    );
    // Nothing comes back: the only frame we may see within a short wait is none at all.
    let reply = tokio::time::timeout(Duration::from_millis(300), ws.next()).await;
    assert!(reply.is_err(), "sink answered: {reply:?}");
    assert_eq!(
        server.metric(r#"wsload_server_messages_sent_total{profile="sink",format="binary"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_every_client_with_increasing_timestamps() {
    let server = Server::start(&[
        "--profile",
        "broadcast",
        "--broadcast-interval",
        "20ms",
        "--broadcast-payload-size",
        "200",
    ]);
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(connect(&server.url("/feed")).await);
    }
    let mut received = 0u64;
    for ws in clients.iter_mut() {
        let mut last: Option<(u64, u64)> = None;
        for _ in 0..10 {
            let Message::Text(t) = next_data(ws).await else {
                panic!("ticks are text")
            };
            let v: serde_json::Value = serde_json::from_str(&t).expect("tick is JSON");
            assert_eq!(v["t"], "tick");
            assert_eq!(v["pad"].as_str().map(str::len), Some(200));
            let seq = v["seq"].as_u64().expect("seq");
            let ts = v["ts_us"].as_u64().expect("ts_us");
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_micros() as u64;
            assert!(
                ts <= now_us && now_us - ts < 5_000_000,
                "tick timestamp {ts} vs now {now_us}"
            );
            if let Some((s, t0)) = last {
                assert_eq!(seq, s + 1, "ticks arrive in order without gaps");
                assert!(ts > t0);
            }
            last = Some((seq, ts));
            received += 1;
        }
    }
    for ws in clients.iter_mut() {
        ws.close(None).await.expect("close");
        while let Some(Ok(m)) = ws.next().await {
            if m.is_text() {
                received += 1;
            }
        }
    }
    let series = r#"wsload_server_connections_closed_total{profile="broadcast",reason="client"}"#;
    assert_eq!(server.wait_metric(series, 5.0), 5.0);
    // Every tick the server counted as sent was read by a client, and no more.
    assert_eq!(
        server.metric(r#"wsload_server_messages_sent_total{profile="broadcast",format="text"}"#),
        received as f64
    );
}

/// `--broadcast-batch 5`: five messages at each tick, numbered one after the other (ticks hold
/// 1..=5, 6..=10, ...), each stamped by `--broadcast-timestamp ms` as `"ts"`, a float of
/// milliseconds near now; `ts_us` is then not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_publishes_a_batch_per_tick_stamped_in_float_milliseconds() {
    const BATCH: u64 = 5;
    const TICKS: usize = 4;
    let server = Server::start(&[
        "--profile",
        "broadcast",
        "--broadcast-interval",
        "50ms",
        "--broadcast-batch",
        "5",
        "--broadcast-timestamp",
        "ms",
    ]);
    let mut ws = connect(&server.url("/")).await;
    let mut ticks: Vec<Vec<(u64, f64)>> = Vec::new();
    let mut last_seq = None;
    while ticks.len() < TICKS || ticks.last().map(Vec::len) != Some(BATCH as usize) {
        let Message::Text(t) = next_data(&mut ws).await else {
            panic!("ticks are text")
        };
        let v: serde_json::Value = serde_json::from_str(&t).expect("tick is JSON");
        assert_eq!(v["t"], "tick");
        assert!(v.get("ts_us").is_none(), "{t}");
        let written = t
            .split_once(r#""ts":"#)
            .and_then(|(_, rest)| rest.split_once(','))
            .map(|(number, _)| number)
            .expect("a ts field");
        let (whole, fraction) = written.split_once('.').expect("ts written as a float");
        assert!(
            whole.len() == 13 && fraction.len() == 3,
            "milliseconds, microseconds as the fraction: {written}"
        );
        let ts = v["ts"].as_f64().expect("ts is a number");
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_micros() as f64
            / 1000.0;
        assert!(
            ts <= now_ms && now_ms - ts < 5_000.0,
            "tick at {ts} ms, now {now_ms} ms"
        );
        let seq = v["seq"].as_u64().expect("seq");
        if let Some(last) = last_seq {
            assert_eq!(seq, last + 1, "one number per message, none skipped");
        }
        last_seq = Some(seq);
        // The first tick may have been joined midway: counted from the next one on.
        if (seq - 1) % BATCH == 0 {
            ticks.push(Vec::new());
        }
        if let Some(tick) = ticks.last_mut() {
            tick.push((seq, ts));
        }
    }
    for tick in &ticks {
        assert_eq!(tick.len(), BATCH as usize, "{ticks:?}");
        let spread = tick[tick.len() - 1].1 - tick[0].1;
        assert!((0.0..20.0).contains(&spread), "one tick's batch: {tick:?}");
    }
    for pair in ticks.windows(2) {
        let apart = pair[1][0].1 - pair[0][0].1;
        assert!(apart >= 30.0, "ticks 50 ms apart: {ticks:?}");
    }
    ws.close(None).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_and_pinned_listeners_choose_the_profile() {
    let server = Server::start_with_listeners(
        &["127.0.0.1:0", "127.0.0.1:0=sink"],
        &["--route", "/quiet=sink", "--profile", "echo"],
    );
    let mut echo = connect(&server.url("/anything")).await;
    send_all(&mut echo, [Message::Text("hi".into())]).await;
    assert_eq!(next_data(&mut echo).await, Message::Text("hi".into()));

    let mut routed = connect(&server.url("/quiet")).await;
    let mut pinned = connect(&format!("{}/anything", server.ws[1])).await;
    send_all(&mut routed, [Message::Text("a".into())]).await;
    send_all(&mut pinned, [Message::Text("b".into())]).await;
    let series = r#"wsload_server_messages_received_total{profile="sink",format="text"}"#;
    assert_eq!(server.wait_metric(series, 2.0), 2.0);
    assert_eq!(
        server.metric(r#"wsload_server_connections_accepted_total{profile="sink"}"#),
        2.0
    );
    assert_eq!(
        server.metric(r#"wsload_server_connections_accepted_total{profile="echo"}"#),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echoes_of_messages_just_before_a_close_are_not_lost() {
    use futures_util::SinkExt;
    let server = Server::start(&["--profile", "echo"]);
    for _ in 0..5 {
        let mut ws = connect(&server.url("/")).await;
        const N: usize = 500;
        // Messages and the close frame leave in one write, so the server reads them in one
        // batch: the replies must be queued before tungstenite sees the close.
        for i in 0..N {
            ws.feed(Message::Text(format!("m{i}").into()))
                .await
                .expect("feed");
        }
        ws.close(None).await.expect("close");
        let mut echoed = 0;
        while let Some(Ok(m)) = ws.next().await {
            if m.is_text() {
                echoed += 1;
            }
        }
        assert_eq!(echoed, N, "every message before the close is echoed");
    }
}
