//! Topics over real sockets: subscribe, publish and deliver in the pubsub and wse profiles, slow
//! consumers, the ticker, and the test hooks, with every counter checked to the delivery.

mod common;
use common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_tungstenite::tungstenite::Message;
use wsload_proto::frame;

const PUBLISHED_CLIENT: &str = r#"wsload_server_topic_published_total{source="client"}"#;
const PUBLISHED_TICKER: &str = r#"wsload_server_topic_published_total{source="ticker"}"#;
const FANOUT: &str = "wsload_server_topic_fanout_total";
const DELIVERED: &str = "wsload_server_topic_delivered_total";
const DROPPED_SLOW: &str = r#"wsload_server_topic_dropped_total{reason="slow_consumer"}"#;
const DROPPED_CLOSED: &str = r#"wsload_server_topic_dropped_total{reason="closed"}"#;
const SUBSCRIPTIONS: &str = "wsload_server_topic_subscriptions";
const TOPICS: &str = "wsload_server_topics";

fn text(v: Value) -> Message {
    Message::Text(v.to_string().into())
}

fn json_of(msg: &Message) -> Value {
    match msg {
        Message::Text(t) => serde_json::from_str(t).expect("JSON text"),
        Message::Binary(b) => {
            let body = b.strip_prefix(b"M:").expect("M: prefix");
            rmp_serde::from_slice(body).expect("valid MsgPack")
        }
        other => panic!("not data: {other:?}"),
    }
}

fn publish(topic: &str, seq: u64, ack: bool) -> Message {
    text(json!({"type":"publish","topic":topic,"seq":seq,"ts":seq * 10,"ack":ack,"data":"payload"}))
}

/// Subscribes `ws` to `topic` in the pubsub profile and waits for the confirmation.
async fn subscribe(ws: &mut Client, topic: &str) {
    send_all(ws, [text(json!({"type":"subscribe","topic":topic}))]).await;
    assert_eq!(
        json_of(&next_data(ws).await),
        json!({"type":"subscribed","topic":topic})
    );
}

/// The `seq` of each message, as a publish carries it.
fn seq_of(msg: &Message) -> u64 {
    json_of(msg)["seq"].as_u64().expect("seq")
}

/// Reads `n` data messages.
async fn read_n(ws: &mut Client, n: usize) -> Vec<Message> {
    let mut got = Vec::with_capacity(n);
    for _ in 0..n {
        got.push(next_data(ws).await);
    }
    got
}

/// Asserts that nothing more arrives for a short while.
async fn assert_quiet(ws: &mut Client) {
    let more = tokio::time::timeout(Duration::from_millis(300), ws.next()).await;
    assert!(more.is_err(), "unexpected: {more:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_topics_fifty_subscribers_get_every_publish_and_the_counters_reconcile() {
    let server = Server::start(&["--profile", "pubsub"]);
    const SUBSCRIBERS: usize = 50;
    const PER_TOPIC: u64 = 200;
    let topics = ["room0", "room1", "room2"];
    // Subscriber i takes topic i % 3; subscriber 0 takes room1 as well.
    let mut subs = Vec::new();
    for i in 0..SUBSCRIBERS {
        let mut ws = connect(&server.url("/")).await;
        subscribe(&mut ws, topics[i % 3]).await;
        if i == 0 {
            subscribe(&mut ws, "room1").await;
        }
        subs.push(ws);
    }
    let per_topic_subs = [17u64, 18, 16];
    assert_eq!(server.metric(SUBSCRIPTIONS), 51.0);
    assert_eq!(server.metric(TOPICS), 3.0);

    let mut publisher = connect(&server.url("/")).await;
    let mut sent: Vec<Vec<Message>> = vec![Vec::new(); 3];
    for seq in 1..=PER_TOPIC {
        for (t, topic) in topics.iter().enumerate() {
            let msg = publish(topic, seq, seq == PER_TOPIC);
            sent[t].push(msg.clone());
            send_all(&mut publisher, [msg]).await;
        }
    }
    // The publisher hears only its three acks, never its own publishes.
    for (t, topic) in topics.iter().enumerate() {
        assert_eq!(
            json_of(&next_data(&mut publisher).await),
            json!({"type":"published","topic":topic,"seq":PER_TOPIC,"subscribers":per_topic_subs[t]})
        );
    }
    assert_quiet(&mut publisher).await;

    for (i, ws) in subs.iter_mut().enumerate() {
        let t = i % 3;
        if i == 0 {
            let got = read_n(ws, 2 * PER_TOPIC as usize).await;
            let (room0, room1): (Vec<_>, Vec<_>) = got
                .into_iter()
                .partition(|m| json_of(m)["topic"] == "room0");
            assert_eq!(room0, sent[0], "subscriber 0, room0");
            assert_eq!(room1, sent[1], "subscriber 0, room1");
        } else {
            // The publisher's bytes, in its order, without gaps or duplicates.
            assert_eq!(
                read_n(ws, PER_TOPIC as usize).await,
                sent[t],
                "subscriber {i}"
            );
        }
    }
    // And nothing more, to any of them.
    futures_util::future::join_all(subs.iter_mut().map(assert_quiet)).await;

    let owed = PER_TOPIC * per_topic_subs.iter().sum::<u64>();
    assert_eq!(server.metric(PUBLISHED_CLIENT), (3 * PER_TOPIC) as f64);
    assert_eq!(server.metric(PUBLISHED_TICKER), 0.0);
    assert_eq!(server.metric(FANOUT), owed as f64);
    assert_eq!(server.metric(DELIVERED), owed as f64);
    assert_eq!(server.metric(DROPPED_SLOW), 0.0);
    assert_eq!(server.metric(DROPPED_CLOSED), 0.0);
    assert_eq!(
        server.metric(r#"wsload_server_messages_received_total{profile="pubsub",format="text"}"#),
        (3 * PER_TOPIC + 51) as f64
    );
    assert_eq!(
        server.metric(r#"wsload_server_messages_sent_total{profile="pubsub",format="text"}"#),
        (owed + 51 + 3) as f64,
        "deliveries, subscribe confirmations and acks"
    );

    // Unsubscribing and leaving take the subscriptions and then the topics away.
    send_all(
        &mut subs[0],
        [text(json!({"type":"unsubscribe","topic":"room1"}))],
    )
    .await;
    assert_eq!(
        json_of(&next_data(&mut subs[0]).await),
        json!({"type":"unsubscribed","topic":"room1"})
    );
    assert_eq!(server.metric(SUBSCRIPTIONS), 50.0);
    for ws in subs.iter_mut() {
        ws.close(None).await.expect("close");
    }
    assert_eq!(server.wait_metric(SUBSCRIPTIONS, 0.0), 0.0);
    assert_eq!(server.wait_metric(TOPICS, 0.0), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_server_cannot_act_on_get_an_error() {
    let server = Server::start(&["--profile", "pubsub"]);
    let mut ws = connect(&server.url("/")).await;
    for bad in [
        Message::Text("{not json".into()),
        text(json!({"type":"subscribe"})),
        text(json!({"type":"shout","topic":"a"})),
    ] {
        send_all(&mut ws, [bad]).await;
        assert_eq!(json_of(&next_data(&mut ws).await)["type"], "error");
    }
    assert_eq!(
        server.metric(r#"wsload_server_malformed_frames_total{profile="pubsub",format="text"}"#),
        1.0
    );
    // A publish nobody listens to is still a publish, owed to nobody.
    send_all(&mut ws, [publish("empty", 1, true)]).await;
    assert_eq!(json_of(&next_data(&mut ws).await)["subscribers"], 0);
    assert_eq!(server.metric(PUBLISHED_CLIENT), 1.0);
    assert_eq!(server.metric(FANOUT), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_loses_deliveries_counted_while_others_get_everything() {
    const QUEUE: usize = 16;
    const MESSAGES: u64 = 2_400;
    const CHUNK: u64 = 8;
    let server = Server::start(&["--profile", "pubsub", "--subscriber-queue", "16"]);
    let mut stalled = connect(&server.url("/")).await;
    subscribe(&mut stalled, "feed").await;
    let mut reader = connect(&server.url("/")).await;
    subscribe(&mut reader, "feed").await;
    let mut publisher = connect(&server.url("/")).await;

    // 8 KiB each: 20 MB in all, well past what the sockets of the stalled subscriber buffer.
    let pad = "x".repeat(8192);
    let mut seq = 0;
    while seq < MESSAGES {
        // Chunks smaller than the queue, each read by `reader` before the next: it never falls
        // behind, so only the stalled subscriber can lose anything.
        let chunk: Vec<Message> = (0..CHUNK)
            .map(|i| text(json!({"type":"publish","topic":"feed","seq":seq + i + 1,"data":pad})))
            .collect();
        send_all(&mut publisher, chunk).await;
        for m in read_n(&mut reader, CHUNK as usize).await {
            seq += 1;
            assert_eq!(seq_of(&m), seq, "the reader gets every publish in order");
        }
    }
    assert!(QUEUE < CHUNK as usize * 4 && MESSAGES % CHUNK == 0);
    assert_quiet(&mut reader).await;

    // Now the stalled subscriber reads what reached it: in order, without duplicates.
    let mut stalled_got = 0u64;
    let mut last = 0;
    while let Ok(Some(Ok(m))) =
        tokio::time::timeout(Duration::from_millis(1500), stalled.next()).await
    {
        if m.is_text() {
            let s = seq_of(&m);
            assert!(s > last, "seq {s} after {last}");
            last = s;
            stalled_got += 1;
        }
    }
    let owed = 2 * MESSAGES;
    assert_eq!(server.metric(PUBLISHED_CLIENT), MESSAGES as f64);
    assert_eq!(server.metric(FANOUT), owed as f64);
    let delivered = server.metric(DELIVERED) as u64;
    let slow = server.metric(DROPPED_SLOW) as u64;
    assert_eq!(server.metric(DROPPED_CLOSED), 0.0);
    assert_eq!(
        delivered,
        MESSAGES + stalled_got,
        "delivered is what arrived"
    );
    assert_eq!(
        slow,
        MESSAGES - stalled_got,
        "and the rest was dropped, counted"
    );
    assert!(
        slow > 0,
        "the stalled subscriber lost nothing: {stalled_got} arrived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ticker_keeps_its_rate_and_each_topics_sequence() {
    const RATE: u64 = 200;
    let server = Server::start(&[
        "--profile",
        "pubsub",
        "--ticker-topics",
        "3",
        "--ticker-rate",
        "200",
        "--ticker-payload-size",
        "32",
    ]);
    // Ticks already flow: the confirmations come among them.
    let mut all = connect(&server.url("/")).await;
    send_all(
        &mut all,
        ["t0", "t1", "t2"].map(|t| text(json!({"type":"subscribe","topic":t}))),
    )
    .await;
    let mut confirmed = 0;
    while confirmed < 3 {
        if json_of(&next_data(&mut all).await)["type"] == "subscribed" {
            confirmed += 1;
        }
    }
    let mut one = connect(&server.url("/")).await;
    send_all(&mut one, [text(json!({"type":"subscribe","topic":"t1"}))]).await;
    assert_eq!(json_of(&next_data(&mut one).await)["type"], "subscribed");

    let now_us = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_micros() as u64
    };
    let started = now_us();
    let mut by_topic: [Vec<(u64, u64)>; 3] = Default::default();
    let mut t1_bytes = Vec::new();
    while now_us() - started < 1_000_000 {
        let m = next_data(&mut all).await;
        let v = json_of(&m);
        assert_eq!(v["type"], "publish");
        assert_eq!(v["data"].as_str().map(str::len), Some(32));
        let (seq, ts) = (
            v["seq"].as_u64().expect("seq"),
            v["ts"].as_u64().expect("ts"),
        );
        let t: usize = v["topic"].as_str().expect("topic")[1..]
            .parse()
            .expect("tN");
        by_topic[t].push((seq, ts));
        if t == 1 {
            t1_bytes.push(m);
        }
    }
    for (t, ticks) in by_topic.iter().enumerate() {
        let (s0, ts0) = ticks[0];
        for (i, &(seq, ts)) in ticks.iter().enumerate() {
            assert_eq!(seq, s0 + i as u64, "t{t}: consecutive sequence numbers");
            assert_eq!(
                ts - ts0,
                (seq - s0) * 1_000_000 / RATE,
                "t{t}: instants one period apart"
            );
        }
        // Recent ticks, not a backlog: the ticker is not behind its schedule. (Generous: the
        // test client shares two cores with the server and other tests.)
        let (_, last_ts) = ticks[ticks.len() - 1];
        let lag = now_us().saturating_sub(last_ts);
        assert!(lag < 1_000_000, "t{t}: the last tick is {lag} us old");
    }
    // The rate, from the server's own count over a measured wall-clock span: open-loop, the
    // ticks published by any instant are the ticks due by then, however the process was
    // scheduled.
    let (p0, w0) = (server.metric(PUBLISHED_TICKER), now_us());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (p1, w1) = (server.metric(PUBLISHED_TICKER), now_us());
    let rate = (p1 - p0) / 3.0 / ((w1 - w0) as f64 / 1e6);
    assert!(
        (RATE as f64 * 0.9..RATE as f64 * 1.1).contains(&rate),
        "{rate} ticks/s per topic"
    );
    // Every topic's tick k went out at the same instant.
    let (s1, ts1) = by_topic[1][0];
    let (s0, ts0) = by_topic[0][0];
    assert_eq!(ts1 as i64 - ts0 as i64, (s1 as i64 - s0 as i64) * 5_000);
    // Another subscriber of t1 gets the very same bytes.
    let first = seq_of(&t1_bytes[0]);
    let mut other = next_data(&mut one).await;
    while seq_of(&other) < first {
        other = next_data(&mut one).await;
    }
    let k = (seq_of(&other) - first) as usize;
    assert_eq!(other, t1_bytes[k]);
    assert_eq!(server.metric(PUBLISHED_CLIENT), 0.0);
}

/// Two subscribers of one topic (the first hooked by `hook`), then `n` publishes; what each
/// received, once `hooked_count` and `n` messages arrived.
async fn hooked_run(server: &Server, n: u64, hooked_count: usize) -> (Vec<u64>, Vec<u64>, Client) {
    let mut hooked = connect(&server.url("/")).await;
    subscribe(&mut hooked, "news").await;
    let mut plain = connect(&server.url("/")).await;
    subscribe(&mut plain, "news").await;
    let mut publisher = connect(&server.url("/")).await;
    send_all(&mut publisher, (1..=n).map(|s| publish("news", s, false))).await;
    let seqs = |got: Vec<Message>| got.iter().map(seq_of).collect::<Vec<_>>();
    let plain_got = seqs(read_n(&mut plain, n as usize).await);
    let hooked_got = seqs(read_n(&mut hooked, hooked_count).await);
    assert_quiet(&mut hooked).await;
    (hooked_got, plain_got, hooked)
}

fn hook_series(hook: &str) -> String {
    format!(r#"wsload_server_topic_test_hook_total{{hook="{hook}"}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drop_hook_loses_every_nth_delivery_yet_counts_it_delivered() {
    let server = Server::start(&["--profile", "pubsub", "--test-drop-every", "100"]);
    let (hooked, plain, _ws) = hooked_run(&server, 1000, 990).await;
    assert_eq!(plain, (1..=1000).collect::<Vec<_>>());
    let want: Vec<u64> = (1..=1000).filter(|s| s % 100 != 0).collect();
    assert_eq!(hooked, want, "gaps at 100, 200, ... 1000");
    // The server says it delivered all 2,000: the lie the hook exists for.
    assert_eq!(server.wait_metric(DELIVERED, 2000.0), 2000.0);
    assert_eq!(server.metric(FANOUT), 2000.0);
    assert_eq!(server.metric(DROPPED_SLOW), 0.0);
    assert_eq!(server.metric(&hook_series("drop")), 10.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_duplicate_hook_sends_every_nth_delivery_twice() {
    let server = Server::start(&["--profile", "pubsub", "--test-duplicate-every", "100"]);
    let (hooked, plain, _ws) = hooked_run(&server, 1000, 1010).await;
    assert_eq!(plain, (1..=1000).collect::<Vec<_>>());
    let want: Vec<u64> = (1..=1000)
        .flat_map(|s| if s % 100 == 0 { vec![s, s] } else { vec![s] })
        .collect();
    assert_eq!(hooked, want);
    assert_eq!(server.wait_metric(DELIVERED, 2000.0), 2000.0);
    assert_eq!(server.metric(&hook_series("duplicate")), 10.0);
    assert_eq!(server.metric(&hook_series("drop")), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_swap_hook_sends_every_nth_delivery_after_the_next() {
    let server = Server::start(&["--profile", "pubsub", "--test-swap-every", "100"]);
    // The 1000th is held for a next delivery that never comes.
    let (hooked, plain, mut ws) = hooked_run(&server, 1000, 999).await;
    assert_eq!(plain, (1..=1000).collect::<Vec<_>>());
    let mut want: Vec<u64> = Vec::new();
    for s in 1..1000 {
        if s % 100 == 1 && s > 100 {
            want.push(s);
            want.push(s - 1);
        } else if s % 100 != 0 {
            want.push(s);
        }
    }
    assert_eq!(hooked, want, "101 before 100, 201 before 200, ...");
    assert_eq!(server.metric(&hook_series("swap")), 10.0);
    assert_eq!(server.wait_metric(DELIVERED, 1999.0), 1999.0);
    // The held one is lost when its connection ends, and counted so.
    ws.close(None).await.expect("close");
    assert_eq!(server.wait_metric(DROPPED_CLOSED, 1.0), 1.0);
    assert_eq!(server.metric(FANOUT), 2000.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wse_envelopes_subscribe_and_publish_in_every_format() {
    let server = Server::start(&["--profile", "wse", "--wse-allow-anonymous"]);
    let ready = |m: Message| assert_eq!(json_of(&m)["t"], "server_ready");

    // A MsgPack subscriber, subscribing with an `M:` frame.
    let mut mp = connect(&server.url("/wse?format=msgpack")).await;
    ready(next_data(&mut mp).await);
    let sub = frame::encode_msgpack(&json!({"t":"subscribe","p":{"topic":"prices"}})).expect("mp");
    send_all(&mut mp, [Message::Binary(sub.into())]).await;
    let confirmed = next_data(&mut mp).await;
    assert!(confirmed.is_binary(), "answered in MsgPack");
    let v = json_of(&confirmed);
    assert_eq!(
        (v["c"].clone(), v["t"].clone()),
        (json!("WSE"), json!("subscribed"))
    );
    assert_eq!(v["p"]["topic"], "prices");

    // A JSON subscriber, subscribing with a `C:` zlib frame.
    let mut z = connect(&server.url("/wse")).await;
    ready(next_data(&mut z).await);
    let sub = json!({"t":"subscribe","p":{"topic":"prices"}}).to_string();
    send_all(
        &mut z,
        [Message::Binary(
            frame::encode_zlib(sub.as_bytes(), 6).into(),
        )],
    )
    .await;
    assert_eq!(json_of(&next_data(&mut z).await)["t"], "subscribed");

    // A publisher: JSON text with an ack, MsgPack without, and one without a topic.
    let mut publisher = connect(&server.url("/wse")).await;
    ready(next_data(&mut publisher).await);
    let mut sent = Vec::new();
    for seq in 1..=5u64 {
        let m = text(json!({"t":"publish","p":{"topic":"prices","seq":seq,"ts":seq,"ack":true}}));
        sent.push(m.clone());
        send_all(&mut publisher, [m]).await;
        let ack = json_of(&next_data(&mut publisher).await);
        assert_eq!(ack["t"], "published");
        assert_eq!(
            ack["p"],
            json!({"topic":"prices","seq":seq,"subscribers":2})
        );
    }
    let m =
        frame::encode_msgpack(&json!({"t":"publish","p":{"topic":"prices","seq":6}})).expect("mp");
    let m = Message::Binary(m.into());
    sent.push(m.clone());
    send_all(&mut publisher, [m]).await;
    send_all(&mut publisher, [text(json!({"t":"publish","p":{"seq":7}}))]).await;
    let err = json_of(&next_data(&mut publisher).await);
    assert_eq!(
        (err["t"].clone(), err["p"]["code"].clone()),
        (json!("error"), json!("BAD_REQUEST"))
    );
    assert_quiet(&mut publisher).await;

    // Each subscriber gets the publisher's frames as sent, whatever its own format.
    assert_eq!(read_n(&mut mp, 6).await, sent);
    assert_eq!(read_n(&mut z, 6).await, sent);
    assert_eq!(server.metric(PUBLISHED_CLIENT), 6.0);
    assert_eq!(server.metric(FANOUT), 12.0);
    assert_eq!(server.wait_metric(DELIVERED, 12.0), 12.0);
    assert_eq!(server.metric(SUBSCRIPTIONS), 2.0);
    assert_eq!(server.metric(TOPICS), 1.0);
}
