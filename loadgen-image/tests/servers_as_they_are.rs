//! Servers as users found them when adapting the presets, each a few lines of raw TCP started
//! by the test: a subscription that ends with a `complete` beside its `next` events (several
//! push rules, each counted by name), a server that broadcasts to every connection without
//! any subscribe message (a fanout without subscribe steps), a heartbeat whose ping is `{}`
//! and wants `{}` back (a reply equal to its trigger), and a server that answers every reply
//! with the trigger again (a runaway exchange, ended as `reply_loop`).

mod common;

use common::{close_frame as close, only, raw_server, read_frames, run, spec, text_frame as text};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use wsload::measure::{Dropped, FrameTally, MAX_REPLIES_PER_SECOND};
use wsload::report::CellResult;
use wsload_report::fanout::Fanout;
use wsload_ws::test_server::{server_frame as frame, upgrade};

/// What the server does after the upgrade (it always answers a ping with its pong, and a
/// close with a close).
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// At the client's first ping (the measured phase has begun), sends `events`
    /// `{"type":"next",...}` then one `{"type":"complete"}`, as a graphql-ws subscription.
    Subscription { events: u64 },
    /// Sends `{}` every `every` and closes with 1000 when the previous one got no `{}` back.
    EmptyHeartbeat { every: Duration },
    /// At the client's first ping sends `{}`, and answers every `{}` with `{}` again.
    Runaway,
    /// Sends `{"type":"tick","seq":N,"ts":MICROS}` every `every` to every connection at once,
    /// N counting from 1 over the server's life: nobody subscribes.
    Ticker { every: Duration },
    /// Sends every text message any connection sends to every connection.
    Relay,
}

/// What the server saw: the close codes clients sent.
#[derive(Default)]
struct Seen {
    closes: Mutex<Vec<u16>>,
}

/// What the server sends for one client frame; `Err` ends the connection after it.
fn on_frame(
    shape: Shape,
    op: u8,
    payload: &[u8],
    pinged: &mut bool,
    answered: &mut bool,
    all: &broadcast::Sender<Vec<u8>>,
    seen: &Seen,
) -> Result<Vec<u8>, Vec<u8>> {
    let mut out = Vec::new();
    match op {
        0x8 => {
            if let [a, b, ..] = payload {
                let code = u16::from_be_bytes([*a, *b]);
                seen.closes.lock().expect("lock").push(code);
            }
            return Err(frame(0x8, payload.get(..2).unwrap_or_default()));
        }
        0x9 => {
            out.extend(frame(0xA, payload));
            if !std::mem::replace(pinged, true) {
                match shape {
                    Shape::Subscription { events } => {
                        for n in 1..=events {
                            out.extend(text(&format!(r#"{{"type":"next","n":{n}}}"#)));
                        }
                        out.extend(text(r#"{"type":"complete"}"#));
                    }
                    Shape::Runaway => out.extend(text("{}")),
                    _ => {}
                }
            }
        }
        0x1 => match shape {
            Shape::EmptyHeartbeat { .. } if payload == b"{}" => *answered = true,
            Shape::Runaway if payload == b"{}" => out.extend(text("{}")),
            Shape::Relay => {
                let _ = all.send(text(&String::from_utf8_lossy(payload)));
            }
            _ => {}
        },
        _ => {}
    }
    Ok(out)
}

async fn connection(
    mut s: TcpStream,
    shape: Shape,
    all: broadcast::Sender<Vec<u8>>,
    seen: Arc<Seen>,
) {
    let mut everyone = all.subscribe();
    if upgrade(&mut s).await.is_none() {
        return;
    }
    let never = Duration::from_secs(3600);
    let every = match shape {
        Shape::EmptyHeartbeat { every } => every,
        _ => never,
    };
    let mut beat = tokio::time::interval(every);
    beat.tick().await;
    let (mut pinged, mut answered) = (false, true);
    let mut buf = Vec::new();
    loop {
        let mut out = Vec::new();
        let mut end = None;
        tokio::select! {
            frames = read_frames(&mut s, &mut buf) => {
                let Some(frames) = frames else { return };
                for (op, payload) in frames {
                    match on_frame(shape, op, &payload, &mut pinged, &mut answered, &all, &seen) {
                        Ok(o) => out.extend(o),
                        Err(last) => {
                            end = Some(last);
                            break;
                        }
                    }
                }
            }
            _ = beat.tick() => {
                if !std::mem::replace(&mut answered, false) {
                    end = Some(close(1000, "heartbeat timeout"));
                } else {
                    out.extend(text("{}"));
                }
            }
            m = everyone.recv() => match m {
                Ok(m) => out.extend(m),
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
        let ending = end.is_some();
        out.extend(end.unwrap_or_default());
        if s.write_all(&out).await.is_err() {
            return;
        }
        if ending {
            let _ = s.shutdown().await;
            return;
        }
    }
}

/// A server of `shape` on a loopback port of its own runtime: its `ws://` URL, what it saw,
/// and the runtime (dropping it stops the server).
fn start(shape: Shape) -> (String, Arc<Seen>, tokio::runtime::Runtime) {
    let (all, _) = broadcast::channel(4096);
    let seen = Arc::new(Seen::default());
    let (served, everyone) = (seen.clone(), all.clone());
    let (url, rt) = raw_server(move |s, _| connection(s, shape, everyone.clone(), served.clone()));
    if let Shape::Ticker { every } = shape {
        rt.spawn(async move {
            let mut tick = tokio::time::interval(every);
            for seq in 1u64.. {
                tick.tick().await;
                let ts = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .expect("after 1970")
                    .as_micros();
                let _ = all.send(text(&format!(r#"{{"type":"tick","seq":{seq},"ts":{ts}}}"#)));
            }
        });
    }
    (url, seen, rt)
}

/// Runs the spec body `body` against a server of `shape`: its only cell, the report's text
/// and what the server saw.
fn run_against(shape: Shape, name: &str, body: &str) -> (CellResult, String, Arc<Seen>) {
    let (url, seen, _server) = start(shape);
    let lt = spec(
        name,
        &format!("  target: {{url: '{url}'}}\n  warmup: 0s\n{body}"),
    );
    let r = run(&lt);
    let c = only(&r).clone();
    (c, r.render(), seen)
}

const HOLD: &str = "  scenario: sustainedHold\n  duration: 2s\n  ping: {kind: frame, interval: 200ms, timeout: 1s}\n";

/// graphql-ws' `complete` beside its `next` events: each kind counted under its own name,
/// neither unsolicited, in the cell's counts, its result JSON and its report. Before, one
/// `push` rule only: the `complete` frames were unsolicited (and `pushes:` was refused).
#[test]
fn several_push_rules_are_each_counted_by_name() {
    let (c, report, _) = run_against(
        Shape::Subscription { events: 20 },
        "push-rules",
        &format!(
            "{HOLD}  connections: [3]\n  conversation:\n    pushes:\n      - {{name: next, match: {{json: {{field: type, equals: next}}}}}}\n      - {{name: complete, match: {{json: {{field: type, equals: complete}}}}}}\n      - {{name: error, match: {{json: {{field: type, equals: error}}}}}}\n"
        ),
    );
    let n = &c.measure.counts;
    assert_eq!((n.survived, n.dropped_total()), (3, 0), "{n:?}");
    let next_len = r#"{"type":"next","n":1}"#.len() as u64;
    let next_bytes = 3 * (9 * next_len + 11 * (next_len + 1));
    let complete = FrameTally {
        frames: 3,
        bytes: 3 * r#"{"type":"complete"}"#.len() as u64,
    };
    let next = FrameTally {
        frames: 60,
        bytes: next_bytes,
    };
    assert_eq!(
        n.pushes_by_name,
        [
            ("complete".to_string(), complete),
            ("error".to_string(), FrameTally::default()),
            ("next".to_string(), next),
        ]
        .into()
    );
    assert_eq!(
        n.pushes,
        FrameTally {
            frames: 63,
            bytes: next.bytes + complete.bytes
        }
    );
    assert!(n.unsolicited.is_empty(), "{n:?}");
    let json = serde_json::to_value(&c).expect("json");
    assert_eq!(
        json["counts"]["pushesByName"]["complete"]["frames"], 3,
        "{json}"
    );
    assert!(
        report.contains("63 pushes received (")
            && report.contains("; complete 3, error 0, next 60)"),
        "{report}"
    );
}

/// A heartbeat whose ping is `{}` and whose answer is `{}` too: the server's `{}` is answered,
/// wsload's own never (it reads only what the server sends), and every connection is held.
/// Before, `wsload validate` refused the reply as a loop.
#[test]
fn a_ping_and_pong_that_are_the_same_message_are_held() {
    let (c, _, _) = run_against(
        Shape::EmptyHeartbeat {
            every: Duration::from_millis(100),
        },
        "same-ping-pong",
        &format!(
            "{HOLD}  connections: [3]\n  conversation:\n    replies:\n      - {{when: {{equals: '{{}}'}}, send: {{text: '{{}}'}}}}\n"
        ),
    );
    let n = &c.measure.counts;
    assert_eq!(n.connected, 3, "{n:?}");
    assert_eq!((n.survived, n.dropped_total()), (3, 0), "{n:?}");
    // A beat every 100 ms over the 2 s held (and the open before it), each answered once.
    assert!((3 * 15..=3 * 30).contains(&n.replies), "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
}

/// A server that answers every reply with its trigger again: the exchange runs as fast as
/// both sides go, and wsload ends it once a connection's replies pass the bound within a
/// second, as `reply_loop`, with close 1008, the rule named. Before, the reply was refused by
/// `wsload validate` (and a server echoing one that passed it looped for the whole cell).
#[test]
fn a_runaway_exchange_ends_as_reply_loop_naming_the_rule() {
    let (c, report, seen) = run_against(
        Shape::Runaway,
        "runaway",
        &format!(
            "{HOLD}  connections: [2]\n  conversation:\n    replies:\n      - {{when: {{prefix: '['}}, send: {{text: ok}}}}\n      - {{when: {{equals: '{{}}'}}, send: {{text: '{{}}'}}}}\n"
        ),
    );
    let n = &c.measure.counts;
    assert_eq!(n.connected, 2, "{n:?}");
    assert_eq!(n.survived, 0, "{n:?}");
    assert_eq!(n.dropped, [(Dropped::ReplyLoop, 2)].into(), "{n:?}");
    // The bound's replies went out, and not one more.
    assert_eq!(n.replies, 2 * u64::from(MAX_REPLIES_PER_SECOND), "{n:?}");
    // Within a second of the exchange's start (the first ping, 100-200 ms into the hold).
    let lived = n.lifetimes["reply_loop"];
    assert!(lived.max_ms < 1_200, "{lived:?}");
    let e = &n.evidence["reply_loop"];
    assert!(
        e.starts_with(&format!(
            "replies[1] (when {{\"equals\":\"{{}}\"}}) matched {} server messages within ",
            MAX_REPLIES_PER_SECOND + 1
        )),
        "{e}"
    );
    assert!(
        report.contains("reply_loop: 2 of 2 connections"),
        "{report}"
    );
    // Told why: close 1008 (policy violation).
    let closes = common::settle(2, || seen.closes.lock().expect("lock").len() as u64);
    assert_eq!(closes, 2);
    assert_eq!(*seen.closes.lock().expect("lock"), [1008, 1008]);
}

fn fanout(c: &CellResult) -> &Fanout {
    c.measure.counts.fanout.as_ref().expect("a fanout tally")
}

const DELIVERY: &str = "    delivery:\n      match: {json: {field: type, equals: tick}}\n      sequence: {json: seq}\n      publishedAt: {json: ts}\n";

/// A server that publishes to every connection on its own, no subscribe message: the
/// subscribers read its deliveries from their open, and the window's are all counted. Before,
/// refused: "add at least one" subscribe step.
#[test]
fn a_fanout_without_subscribe_steps_reads_a_servers_broadcast() {
    let (c, _, _) = run_against(
        Shape::Ticker {
            every: Duration::from_millis(10),
        },
        "broadcast-ticker",
        &format!(
            "  scenario: fanout\n  connections: [4]\n  duration: 1s\n  fanout: {{publisher: server, drain: 300ms}}\n  conversation:\n{DELIVERY}"
        ),
    );
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.failed_total()), (4, 0), "{n:?}");
    assert_eq!((n.survived, n.dropped_total()), (4, 0), "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
    let f = fanout(&c);
    let t = f.totals(f.by_server);
    let topic = f.topics[0];
    let published = topic.publishes(f.by_server);
    // ~100 ticks in the 1 s window, every one to each of the 4 subscribers.
    assert!((70..=110).contains(&published), "{topic:?}");
    assert_eq!(topic.subscribers, 4);
    assert_eq!((t.delivered, t.missing), (t.expected, 0), "{t:?}");
    assert_eq!(t.delivered, 4 * published);
    assert_eq!((t.duplicates, t.out_of_order, f.unreadable), (0, 0, 0));
    assert_eq!(c.measure.hists.fanout.len(), t.delivered);
}

/// wsload's publisher against a server that relays every message to every connection, its
/// publisher too: each publish reaches each subscriber, and the publisher's own copies are
/// not taken for unsolicited frames.
#[test]
fn a_fanout_without_subscribe_steps_counts_what_a_relay_broadcasts() {
    let (c, _, _) = run_against(
        Shape::Relay,
        "broadcast-relay",
        &format!(
            "  scenario: fanout\n  connections: [3]\n  duration: 1s\n  rate: {{messagesPerSecond: 50}}\n  fanout: {{drain: 300ms}}\n  conversation:\n{DELIVERY}    message: {{text: '{{\"type\":\"tick\",\"seq\":${{seq}},\"ts\":${{sendTime}}}}'}}\n"
        ),
    );
    let n = &c.measure.counts;
    assert_eq!((n.survived, n.dropped_total()), (4, 0), "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
    let f = fanout(&c);
    let t = f.totals(f.by_server);
    let topic = f.topics[0];
    assert_eq!((f.publishers, f.publishers_failed), (1, 0));
    assert!((40..=55).contains(&topic.published), "{topic:?}");
    assert_eq!(t.expected, 3 * topic.published, "{t:?}");
    assert_eq!(
        (t.delivered, t.missing, t.duplicates),
        (t.expected, 0, 0),
        "{t:?}"
    );
}
