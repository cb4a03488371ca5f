//! The fanout scenario against real servers: the managed wsload-server's ticker started over a
//! fanout's topics, and the conductor's reading of the server's topic counters over a cell.

mod common;
use common::*;
use futures_util::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use wsload::conduct::gate::{Gate, LocalGate};
use wsload::conduct::local_server::LocalServers;
use wsload::conduct::server_metrics::Counter;
use wsload::report::CellResult;
use wsload_report::fanout::ServerTopics;

const PUBLISHED_TICKER: &str = "wsload_server_topic_published_total";

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(url: &str) -> Ws {
    tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
        .0
}

/// The next text message, within 5 s.
async fn next_text(ws: &mut Ws) -> String {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a message within 5 s")
            .expect("the connection is open")
            .expect("a frame");
        if let Message::Text(t) = msg {
            return t.to_string();
        }
    }
}

/// Subscribes `ws` to `topic` (pubsub profile) and waits for the confirmation.
async fn subscribe(ws: &mut Ws, topic: &str) {
    let req = format!(r#"{{"type":"subscribe","topic":"{topic}"}}"#);
    ws.send(Message::Text(req.into())).await.expect("send");
    let answer = next_text(ws).await;
    assert!(answer.contains(r#""type":"subscribed""#), "{answer}");
}

#[test]
fn a_managed_server_ticks_the_fanouts_topics_at_the_fanouts_rate() {
    // 3 topics at 300 messages a second over all of them: 100 a second to each.
    let lt = spec(
        "ticker",
        "  target: {server: {profile: pubsub}}\n  scenario: fanout\n  fanout: {topics: 3, publisher: server}\n  rate: {messagesPerSecond: 300}\n  message: {size: 20}\n",
    );
    let server = lt.spec.target.server.clone().expect("managed");
    let servers =
        LocalServers::start(server_bin().to_path_buf(), &lt.spec, &server).expect("starts");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // A subscriber of the last topic gets the ticker's messages, `data` padded to 20 bytes.
    let got = rt.block_on(async {
        let mut ws = connect(&servers.ws_url).await;
        subscribe(&mut ws, "t2").await;
        next_text(&mut ws).await
    });
    let v: serde_json::Value = serde_json::from_str(&got).expect("JSON");
    assert_eq!(v["topic"], "t2", "{got}");
    assert_eq!(v["data"].as_str().map(str::len), Some(20), "{got}");
    assert!(
        v["seq"].as_u64().is_some() && v["ts"].as_u64().is_some(),
        "{got}"
    );
    let ticker = |url: &str| {
        Counter {
            url: url.to_string(),
            name: PUBLISHED_TICKER.into(),
            labels: [("source".to_string(), "ticker".to_string())].into(),
        }
        .read()
        .expect("reads")
    };
    let url = &servers.metrics_urls[0];
    let (t0, n0) = (Instant::now(), ticker(url));
    std::thread::sleep(Duration::from_millis(1500));
    let per_sec = (ticker(url) - n0) as f64 / t0.elapsed().as_secs_f64();
    assert!(
        (240.0..=360.0).contains(&per_sec),
        "ticker published {per_sec:.0}/s over 3 topics, want 300"
    );
}

#[test]
fn the_gate_reads_the_server_topic_counters_over_a_cell() {
    let server = Server::start(&["--profile", "pubsub"]);
    let lt = spec(
        "gate",
        "  target: {server: {profile: pubsub}}\n  scenario: fanout\n  fanout: {topics: 2}\n  duration: 1s\n",
    );
    let counter = Counter {
        url: server.metrics.clone(),
        name: wsload_spec::DEFAULT_RECEIVED_METRIC.into(),
        labels: Default::default(),
    };
    let mut gate = LocalGate::new(&lt.spec, vec![counter], None);
    // Published before the cell: not the cell's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = format!("{}/", server.ws);
    let publish = |topic: &str, seq: u64| {
        Message::Text(
            format!(r#"{{"type":"publish","topic":"{topic}","seq":{seq},"ts":1}}"#).into(),
        )
    };
    let mut early = rt.block_on(async {
        let mut sub = connect(&url).await;
        subscribe(&mut sub, "t0").await;
        let mut publisher = connect(&url).await;
        publisher.send(publish("t0", 1)).await.expect("send");
        next_text(&mut sub).await;
        (sub, publisher)
    });
    assert!(gate.next(None).is_some(), "a first cell");
    // The cell: 3 subscribers of t0 (one from before), 2 of t1; 10 publishes to each topic.
    rt.block_on(async {
        let mut subs = Vec::new();
        for topic in ["t0", "t0", "t1", "t1"] {
            let mut ws = connect(&url).await;
            subscribe(&mut ws, topic).await;
            subs.push(ws);
        }
        for seq in 1..=10 {
            for topic in ["t0", "t1"] {
                early.1.send(publish(topic, seq)).await.expect("send");
            }
        }
        for ws in subs.iter_mut().chain([&mut early.0]) {
            for _ in 0..10 {
                next_text(ws).await;
            }
        }
    });
    let mut cell: CellResult = wsload_report::fixtures::shard(0, 0, 1, 0).cells.remove(0);
    gate.next(Some(&mut cell));
    assert_eq!(
        cell.server_topics,
        Some(ServerTopics {
            published: 20,
            fanout: 10 * 3 + 10 * 2,
            delivered: 50,
            dropped_slow_consumer: 0,
            dropped_closed: 0,
        })
    );
}
