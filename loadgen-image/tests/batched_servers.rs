//! Servers that pack several messages of their protocol into one frame, as real ones do
//! (newline-delimited JSON, SockJS' `a[...]` arrays), each a few lines of raw TCP started by
//! the test: a heartbeat ping packed behind a push must still be answered, and every packed
//! answer and push counted as a message of its own (`conversation.split`).

mod common;

use common::{only, run, spec};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wsload::measure::{Dropped, FrameKind};
use wsload::report::CellResult;
use wsload_ws::test_server::{client_frames, server_frame as frame, upgrade};

/// How the server packs its messages.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Packing {
    /// Messages separated by `\n` in one text frame.
    Lines,
    /// SockJS: `o` on open, then `a["...","..."]`; the client sends `["..."]` arrays too.
    SockJs,
}

/// What the server counted: heartbeat pings sent, pongs received, pushes sent.
#[derive(Default)]
struct Tally {
    pings: AtomicU64,
    pongs: AtomicU64,
    pushes: AtomicU64,
}

/// The messages of `packing` in one frame.
fn packed(packing: Packing, messages: &[String]) -> Vec<u8> {
    match packing {
        Packing::Lines => {
            let text: String = messages.iter().map(|m| format!("{m}\n")).collect();
            frame(0x1, text.as_bytes())
        }
        Packing::SockJs => {
            let strings: Vec<String> = messages
                .iter()
                .map(|m| serde_json::to_string(m).expect("a string"))
                .collect();
            frame(0x1, format!("a[{}]", strings.join(",")).as_bytes())
        }
    }
}

/// The client's messages in one of its frames.
fn unpacked(packing: Packing, payload: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(payload).into_owned();
    match packing {
        Packing::Lines => text
            .split('\n')
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect(),
        Packing::SockJs => serde_json::from_str(&text).unwrap_or_default(),
    }
}

/// One connection: every 50 ms a push and a heartbeat ping packed in one frame (a
/// connection that leaves a ping unanswered for 300 ms is closed with 4000), and every
/// request `{"id":N}` answered in one frame behind a push.
async fn connection(mut s: TcpStream, packing: Packing, tally: Arc<Tally>) {
    if upgrade(&mut s).await.is_none() {
        return;
    }
    let (mut rd, mut wr) = s.into_split();
    if packing == Packing::SockJs && wr.write_all(&frame(0x1, b"o")).await.is_err() {
        return;
    }
    let (tx, mut outbox) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let owed = Arc::new(AtomicU64::new(0));
    let reader = {
        let (tx, owed, tally) = (tx.clone(), owed.clone(), tally.clone());
        tokio::spawn(async move {
            let (mut buf, mut b) = (Vec::new(), vec![0u8; 64 * 1024]);
            while let Ok(n) = rd.read(&mut b).await {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&b[..n]);
                for (op, payload) in client_frames(&mut buf) {
                    if op == 0x8 {
                        let _ = tx.send(frame(0x8, &1000u16.to_be_bytes()));
                        return;
                    }
                    for m in unpacked(packing, &payload) {
                        if m == r#"{"type":"pong"}"# {
                            owed.store(0, Ordering::Relaxed);
                            tally.pongs.fetch_add(1, Ordering::Relaxed);
                        } else if m.starts_with(r#"{"id":"#) {
                            let n = tally.pushes.fetch_add(1, Ordering::Relaxed);
                            let push = format!(r#"{{"type":"push","n":{n}}}"#);
                            let _ = tx.send(packed(packing, &[push, m]));
                        }
                    }
                }
            }
        })
    };
    let mut beat = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            out = outbox.recv() => {
                let Some(out) = out else { break };
                let close = out.first() == Some(&0x88);
                if wr.write_all(&out).await.is_err() || close {
                    break;
                }
            }
            _ = beat.tick() => {
                // Unanswered for 300 ms: the connection is closed as a server does.
                if owed.load(Ordering::Relaxed) >= 6 {
                    let mut code = 4000u16.to_be_bytes().to_vec();
                    code.extend_from_slice(b"no pong");
                    let _ = wr.write_all(&frame(0x8, &code)).await;
                    break;
                }
                let n = tally.pushes.fetch_add(1, Ordering::Relaxed);
                tally.pings.fetch_add(1, Ordering::Relaxed);
                owed.fetch_add(1, Ordering::Relaxed);
                let push = format!(r#"{{"type":"push","n":{n}}}"#);
                let ping = r#"{"type":"ping"}"#.to_string();
                if wr.write_all(&packed(packing, &[push, ping])).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = wr.shutdown().await;
    reader.abort();
}

/// A server packing as `packing`: its `ws://` URL, its tallies and the runtime (dropping it
/// stops the server).
fn start(packing: Packing) -> (String, Arc<Tally>, tokio::runtime::Runtime) {
    let tally = Arc::new(Tally::default());
    let t = tally.clone();
    let (url, rt) = common::raw_server(move |s, _| connection(s, packing, t.clone()));
    (url, tally, rt)
}

/// The conversation against a server packing as `packing`: its heartbeat answered, its
/// pushes counted, requests answered by id; `split` how the LoadTest says frames split.
fn conversation(packing: Packing, split: &str) -> String {
    let (pong, message) = match packing {
        Packing::Lines => (r#"{"type":"pong"}"#, r#"{"id":${seq}}"#),
        Packing::SockJs => (r#"["{\"type\":\"pong\"}"]"#, r#"["{\"id\":${seq}}"]"#),
    };
    format!(
        "  conversation:\n{split}    replies:\n      - when: {{json: {{field: type, equals: ping}}}}\n        send: {{text: '{pong}'}}\n    push: {{json: {{field: type, equals: push}}}}\n    message:\n      text: '{message}'\n      answer: {{id: {{json: id}}}}\n"
    )
}

fn hold(packing: Packing, name: &str, split: &str) -> (CellResult, Arc<Tally>) {
    let (url, tally, _server) = start(packing);
    let lt = spec(
        name,
        &format!(
            "  target: {{url: {url}}}\n  warmup: 0s\n  scenario: sustainedHold\n  connections: [6]\n  duration: 1500ms\n  ping: {{kind: app, interval: 200ms, timeout: 500ms}}\n{}",
            conversation(packing, split)
        ),
    );
    let r = run(&lt);
    (only(&r).clone(), tally)
}

/// Before `split`: the heartbeat ping packed behind a push was never seen, so never answered:
/// every connection closed with the server's 4000 "no pong". With it: every ping answered,
/// every connection held, and the client's automatic replies are exactly the pongs the
/// server read.
#[test]
fn a_heartbeat_packed_behind_a_push_is_answered() {
    let (c, _) = hold(Packing::Lines, "packed-unsplit", "");
    let n = &c.measure.counts;
    assert_eq!(n.connected, 6);
    assert_eq!(n.survived, 0, "{n:?}");
    assert_eq!(n.close_codes.get("4000"), Some(&6), "{n:?}");
    assert_eq!(n.dropped.get(&Dropped::ServerClose), Some(&6), "{n:?}");

    let (c, tally) = hold(
        Packing::Lines,
        "packed-split",
        "    split: {separator: \"\\n\"}\n",
    );
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.survived), (6, 6), "{n:?}");
    assert!(n.close_codes.is_empty(), "{n:?}");
    // Every app ping answered (by its id, from behind a push), none lost.
    assert!(n.expected >= 6 * 5, "{n:?}");
    assert_eq!(n.lost, 0, "{n:?}");
    assert_eq!(c.measure.hists.rtt.len(), n.expected, "{n:?}");
    // Every heartbeat answered: the pongs the server read are the replies the client sent.
    let pongs = common::settle(n.replies, || tally.pongs.load(Ordering::Relaxed));
    assert_eq!(n.replies, pongs, "{n:?}");
    assert!(pongs >= 6 * 20, "{pongs} pongs");
    // No part taken for unsolicited: each is an answer, a push or a heartbeat.
    assert!(!n.unsolicited.contains_key(&FrameKind::Text), "{n:?}");
    assert!(n.pushes.frames > 0, "{n:?}");
}

/// SockJS' framing: `o`, then `a[...]` arrays of JSON strings, each a message; the client's
/// answers in `[...]` arrays as a SockJS client sends them.
#[test]
fn a_sockjs_array_carries_messages_each_counted() {
    let (c, tally) = hold(
        Packing::SockJs,
        "sockjs",
        "    split: {jsonArray: {prefix: a}}\n",
    );
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.survived), (6, 6), "{n:?}");
    assert_eq!(n.lost, 0, "{n:?}");
    assert!(
        n.expected >= 30 && c.measure.hists.rtt.len() == n.expected,
        "{n:?}"
    );
    let pongs = common::settle(n.replies, || tally.pongs.load(Ordering::Relaxed));
    assert_eq!(n.replies, pongs, "{n:?}");
    // `o` is a frame of its own form: unsolicited, once per connection, before the window.
    assert!(n.pushes.frames > 0, "{n:?}");
}

/// The counting read (throughput): every answer packed behind a push is counted as an answer
/// by its id, every push as a push, and nothing as unsolicited.
#[test]
fn packed_answers_are_counted_by_the_counting_read() {
    let (url, _tally, _server) = start(Packing::Lines);
    let lt = spec(
        "packed-throughput",
        &format!(
            "  target: {{url: {url}}}\n  warmup: 0s\n  scenario: throughput\n  connections: [2]\n  duration: 1s\n  window: 8\n{}",
            conversation(Packing::Lines, "    split: {separator: \"\\n\"}\n")
        ),
    );
    let r = run(&lt);
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!(n.connected, 2);
    assert!(n.sent > 100, "{n:?}");
    assert!(n.received > 0, "{n:?}");
    // What was sent and not answered is at most the window per connection, in flight.
    assert!(n.sent - n.received <= 2 * 8, "{n:?}");
    assert!(n.pushes.frames >= n.received, "{n:?}");
    assert!(!n.unsolicited.contains_key(&FrameKind::Text), "{n:?}");
}

/// A topic's ticker packing deliveries four to a frame (newline-delimited), to every
/// connection from its subscribe on: before `split` only the first of each four was counted
/// and the fan-out reported gaps on subscribers that never dropped one.
async fn ticker_connection(mut s: TcpStream, ticks: tokio::sync::broadcast::Sender<u64>) {
    if upgrade(&mut s).await.is_none() {
        return;
    }
    let (mut rd, mut wr) = s.into_split();
    // Subscribed once the subscribe message arrives (any data frame).
    let (mut buf, mut b) = (Vec::new(), vec![0u8; 4096]);
    loop {
        match rd.read(&mut b).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
        if client_frames(&mut buf).iter().any(|(op, _)| *op == 0x1) {
            break;
        }
    }
    let mut rx = ticks.subscribe();
    let closed = common::until_client_closes(rd);
    let mut batch = String::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)), if closed.is_finished() => break,
            tick = rx.recv() => {
                let Ok(seq) = tick else { break };
                let ts = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("after 1970")
                    .as_micros();
                batch.push_str(&format!(r#"{{"topic":"t","seq":{seq},"ts":{ts}}}"#));
                batch.push('\n');
                if seq % 4 == 0 && wr.write_all(&frame(0x1, batch.as_bytes())).await.is_err() {
                    break;
                }
                if seq % 4 == 0 {
                    batch.clear();
                }
            }
        }
        if closed.is_finished() {
            let _ = wr.write_all(&frame(0x8, &1000u16.to_be_bytes())).await;
            break;
        }
    }
    let _ = wr.shutdown().await;
}

fn fanout(name: &str, split: &str) -> CellResult {
    let (ticks, _) = tokio::sync::broadcast::channel::<u64>(4096);
    let t = ticks.clone();
    let (url, rt) = common::raw_server(move |s, _| ticker_connection(s, t.clone()));
    rt.spawn(async move {
        let mut seq = 0u64;
        let mut every = tokio::time::interval(Duration::from_millis(2));
        loop {
            every.tick().await;
            seq += 1;
            let _ = ticks.send(seq);
        }
    });
    let lt = spec(
        name,
        &format!(
            "  target: {{url: {url}}}\n  warmup: 500ms\n  scenario: fanout\n  connections: [8]\n  duration: 1s\n  fanout: {{topics: 1, publisher: server, drain: 300ms}}\n  conversation:\n{split}    subscribe:\n      - {{name: sub, send: {{text: '{{\"sub\":\"${{topic}}\"}}'}}}}\n    delivery:\n      sequence: {{json: seq}}\n      publishedAt: {{json: ts}}\n"
        ),
    );
    let r = run(&lt);
    only(&r).clone()
}

#[test]
fn deliveries_packed_in_one_frame_are_each_counted() {
    let c = fanout("packed-fanout-unsplit", "");
    let f = c.figures.fanout.as_ref().expect("fan-out figures");
    assert!(f.gaps > 0, "{f:?}");

    let c = fanout("packed-fanout", "    split: {separator: \"\\n\"}\n");
    let f = c.figures.fanout.as_ref().expect("fan-out figures");
    assert_eq!(f.gaps, 0, "{f:?}");
    assert_eq!(f.completeness, Some(1.0), "{f:?}");
    assert_eq!(f.delivered, f.expected, "{f:?}");
    // 8 subscribers, a publish every 2 ms over the 1 s window (and the server's own pace).
    assert!(f.delivered >= 8 * 300, "{f:?}");
    assert_eq!(c.measure.counts.connected, 8);
}
