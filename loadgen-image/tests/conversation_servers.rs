//! Servers with a protocol of their own, each a few lines of raw TCP started by the test, and
//! the LoadTest's conversation that speaks it: an init/ack before any answer, a heartbeat the
//! client must answer, answers by JSON id out of order, pushes between the answers, an ack
//! that never comes, and a session id captured on open and sent back in every message.

mod common;

use common::{close_frame as close, only, raw_server, read_frames, run, spec, text_frame as text};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use wsload::measure::{ConnectError, Dropped, FrameTally};
use wsload::report::CellResult;
use wsload_ws::test_server::{server_frame as frame, upgrade};

/// What the server's protocol asks of a client.
#[derive(Debug, Clone, Copy, Default)]
struct Protocol {
    /// Answers nothing before the client's `init` (closes with 4401 instead); sends `ack`.
    init: bool,
    /// Never sends the `ack`.
    never_ack: bool,
    /// Sends `2` this often and closes with 1000 if the previous one got no `3`.
    heartbeat: Option<Duration>,
    /// Sends `{"sid":"s-N"}` first and answers only messages carrying it back.
    session: bool,
    /// Holds each request until the next one comes, then answers the later first.
    reverse: bool,
    /// Pushes `{"type":"tick"}` this often.
    ticks: Option<Duration>,
    /// Sends `{"type":"delivery","seq":N}` this often, N counting from 1 on each connection:
    /// a fanout's subscriber without a subscription.
    deliveries: Option<Duration>,
}

/// What the server says to one client message; `Err` closes the connection with it.
struct Session {
    p: Protocol,
    sid: String,
    inited: bool,
    beat_answered: bool,
    held: Option<String>,
}

impl Session {
    fn on_text(&mut self, msg: &str, out: &mut Vec<u8>) -> Result<(), Vec<u8>> {
        match msg {
            "init" => {
                self.inited = true;
                if !self.p.never_ack {
                    out.extend(text("ack"));
                }
                return Ok(());
            }
            "3" => {
                self.beat_answered = true;
                return Ok(());
            }
            _ => {}
        }
        if self.p.init && !self.inited {
            return Err(close(4401, "init first"));
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(msg) else {
            return Err(close(4400, "not json"));
        };
        if self.p.session && v["sid"] != self.sid.as_str() {
            out.extend(text(r#"{"error":"unknown session"}"#));
            return Ok(());
        }
        let answer = format!(r#"{{"id":{},"ok":true}}"#, v["id"]);
        if self.p.reverse {
            match self.held.take() {
                None => self.held = Some(answer),
                Some(first) => {
                    out.extend(text(&answer));
                    out.extend(text(&first));
                }
            }
        } else {
            out.extend(text(&answer));
        }
        Ok(())
    }
}

async fn connection(mut s: TcpStream, p: Protocol, n: u64) {
    if upgrade(&mut s).await.is_none() {
        return;
    }
    let mut session = Session {
        p,
        sid: format!("s-{n}"),
        inited: false,
        beat_answered: true,
        held: None,
    };
    if p.session {
        let hello = format!(r#"{{"sid":"{}"}}"#, session.sid);
        if s.write_all(&text(&hello)).await.is_err() {
            return;
        }
    }
    let never = Duration::from_secs(3600);
    let mut beat = tokio::time::interval(p.heartbeat.unwrap_or(never));
    let mut tick = tokio::time::interval(p.ticks.unwrap_or(never));
    let mut deliver = tokio::time::interval(p.deliveries.unwrap_or(never));
    beat.tick().await;
    tick.tick().await;
    deliver.tick().await;
    let mut delivered = 0u64;
    let mut buf = Vec::new();
    loop {
        let mut out = Vec::new();
        let mut end = None;
        tokio::select! {
            frames = read_frames(&mut s, &mut buf) => {
                let Some(frames) = frames else { return };
                for (op, payload) in frames {
                    match op {
                        0x8 => end = Some(close(1000, "")),
                        0x9 => out.extend(frame(0xA, &payload)),
                        0x1 => {
                            let msg = String::from_utf8_lossy(&payload).into_owned();
                            if let Err(c) = session.on_text(&msg, &mut out) {
                                end = Some(c);
                            }
                        }
                        _ => {}
                    }
                    if end.is_some() {
                        break;
                    }
                }
            }
            _ = beat.tick(), if p.heartbeat.is_some() => {
                if !session.beat_answered {
                    end = Some(close(1000, "heartbeat timeout"));
                } else {
                    session.beat_answered = false;
                    out.extend(text("2"));
                }
            }
            _ = tick.tick(), if p.ticks.is_some() => out.extend(text(r#"{"type":"tick"}"#)),
            _ = deliver.tick(), if p.deliveries.is_some() => {
                delivered += 1;
                out.extend(text(&format!(r#"{{"type":"delivery","seq":{delivered}}}"#)));
            }
        }
        let ending = end.is_some();
        if let Some(c) = end {
            out.extend(c);
        }
        if s.write_all(&out).await.is_err() {
            return;
        }
        if ending {
            let _ = s.shutdown().await;
            return;
        }
    }
}

/// A server of protocol `p` on a loopback port of its own runtime; `ws://` URL and the
/// runtime (dropping it stops the server).
fn start(p: Protocol) -> (String, tokio::runtime::Runtime) {
    raw_server(move |s, n| connection(s, p, n))
}

/// Runs the spec body `body` against a server of protocol `p`: its only cell.
fn run_against(p: Protocol, name: &str, body: &str) -> CellResult {
    let (url, _server) = start(p);
    let lt = spec(
        name,
        &format!("  target: {{url: {url}}}\n  warmup: 0s\n{body}"),
    );
    let r = run(&lt);
    let c = only(&r).clone();
    eprintln!("{name}: {:?}", c.measure.counts);
    c
}

const JSON_ID: &str = r#"    message:
      text: '{"id":${seq},"p":"${pad}"}'
      answer: {id: {json: id}}
"#;

/// Before: every message was closed on with 4401 (the init was never sent), nothing answered.
#[test]
fn a_server_that_needs_an_init_answers_after_the_ack() {
    let c = run_against(
        Protocol {
            init: true,
            ..Protocol::default()
        },
        "conv-init",
        &format!(
            "  scenario: pingLatency\n  connections: [4]\n  ping: {{count: 5, timeout: 2s}}\n  conversation:\n    open:\n      - {{name: init, send: {{text: init}}}}\n      - {{name: ack, expect: {{equals: ack}}, timeout: 2s}}\n{JSON_ID}"
        ),
    );
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.failed_total()), (4, 0), "{n:?}");
    assert_eq!(
        (n.expected, n.received, n.lost, n.mismatched),
        (20, 20, 0, 0),
        "{n:?}"
    );
    assert_eq!(c.measure.hists.rtt.len(), 20);
    assert!(n.unsolicited.is_empty(), "{n:?}");
    // The steps on open are the connection's readiness.
    assert_eq!(c.measure.hists.ready.len(), 4);
}

/// The server closes a connection whose heartbeat went unanswered; the reply keeps it open.
#[test]
fn replies_to_a_heartbeat_keep_connections_alive() {
    let p = Protocol {
        heartbeat: Some(Duration::from_millis(200)),
        ..Protocol::default()
    };
    let hold = "  scenario: sustainedHold\n  connections: [3]\n  duration: 2s\n  ping: {kind: frame, interval: 500ms, timeout: 1s}\n";
    let c = run_against(
        p,
        "conv-heartbeat",
        &format!(
            "{hold}  conversation:\n    replies:\n      - {{when: {{equals: '2'}}, send: {{text: '3'}}}}\n"
        ),
    );
    let n = &c.measure.counts;
    assert_eq!((n.survived, n.dropped_total()), (3, 0), "{n:?}");
    // About 10 beats each in 2 s; answered, and counted as replies, not as load.
    assert!(n.replies >= 3 * 8, "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
    assert_eq!(n.sent, 0, "frame pings are not data: {n:?}");

    let c = run_against(p, "conv-no-reply", hold);
    let n = &c.measure.counts;
    assert_eq!(n.survived, 0, "{n:?}");
    assert_eq!(
        n.dropped.get(&Dropped::ServerClose).copied(),
        Some(3),
        "{n:?}"
    );
    assert_eq!(n.close_codes.get("1000").copied(), Some(3), "{n:?}");
    assert!(
        n.evidence["server_close"].contains("heartbeat timeout"),
        "{:?}",
        n.evidence
    );
    // When: the second beat finds the first unanswered, ~400 ms after the open.
    let lived = n.lifetimes["server_close"];
    assert_eq!(lived.count, 3, "{n:?}");
    assert!((300..1_500).contains(&lived.max_ms), "{lived:?}");
    // And why, as the finding says it: the server's "2" went unanswered.
    assert_eq!(n.evidence[wsload::measure::UNSOLICITED], "\"2\"");
    let f = wsload_report::findings::failures(&c);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].cause.contains("add one under conversation.replies")
            && f[0]
                .evidence
                .contains("server_close: 3 of 3 connections with 1000 x3 after"),
        "{f:?}"
    );
}

/// A fanout's subscribers wait out a connect phase far longer than the server's heartbeat
/// allows (a beat every 200 ms, closed at the next one unanswered, as Socket.IO does): the
/// conversation's reply answers it from the open, so every subscriber lives into the window
/// and receives all its deliveries, and those before the window are counted outside it.
/// Before, the first subscribers were closed while they waited for the measured phase.
#[test]
fn a_fanout_answers_the_heartbeat_before_its_measured_phase() {
    let c = run_against(
        Protocol {
            heartbeat: Some(Duration::from_millis(200)),
            deliveries: Some(Duration::from_millis(10)),
            ..Protocol::default()
        },
        "conv-fanout-heartbeat",
        "  scenario: fanout\n  connections: [4]\n  connect: {batchSize: 1, batchInterval: 500ms}\n  duration: 1s\n  fanout: {topics: 1, publisher: server, drain: 200ms}\n  conversation:\n    subscribe:\n      - {name: subscribe, send: {text: '{\"id\":0,\"topic\":\"${topic}\"}'}}\n      - {name: subscribed, expect: {json: {field: ok, equals: 'true'}}, timeout: 2s}\n    replies:\n      - {when: {equals: '2'}, send: {text: '3'}}\n    delivery:\n      match: {json: {field: type, equals: delivery}}\n      sequence: {json: seq}\n",
    );
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.failed_total()), (4, 0), "{n:?}");
    assert_eq!((n.survived, n.dropped_total()), (4, 0), "{n:?}");
    // The first subscriber waited 1.5 s for the window, then 1 s and the drain: 5 s of beats
    // among them at least, each answered.
    assert!(n.replies >= 20, "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
    let f = n.fanout.as_ref().expect("a fanout tally");
    // ~100 deliveries each in the window (arriving in it: untimed), and the connect phase's
    // before it: 1.5 s + 1 s + 0.5 s at 100/s among them at least.
    assert!(f.outside >= 250, "{f:?}");
    assert_eq!(f.slowest.len(), 4, "{f:?}");
    for s in &f.slowest {
        assert!((80..=110).contains(&s.delivered), "{f:?}");
    }
}

/// The client's heartbeat goes out on its own between the pings, never counted as load; the
/// server's answers to it are counted here as pushes.
#[test]
fn a_heartbeat_is_sent_on_its_own_and_not_counted_as_load() {
    let c = run_against(
        Protocol::default(),
        "conv-client-heartbeat",
        "  scenario: sustainedHold\n  connections: [2]\n  duration: 2s\n  ping: {kind: frame, interval: 500ms, timeout: 1s}\n  conversation:\n    heartbeat: {every: 100ms, send: {text: '{\"id\":\"hb-${conn}\"}'}}\n    push: {regex: 'hb-[01]\"'}\n",
    );
    let n = &c.measure.counts;
    assert_eq!((n.survived, n.dropped_total()), (2, 0), "{n:?}");
    // 19 or 20 beats each in 2 s (fewer if a loaded machine delays the timer), each answered.
    assert!((2 * 15..=2 * 20).contains(&n.pushes.frames), "{n:?}");
    // Pings every 500 ms, each connection's first at its share of the interval: connection 0
    // at 250 ms (then 750, 1250; not 1750, the cell's last 250 ms, where no answer could be
    // waited for), connection 1 at 500 ms (1000, 1500).
    assert_eq!((n.sent, n.expected, n.lost), (0, 6, 0), "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
}

/// Before (matched by order): every other answer was taken for a loss.
#[test]
fn answers_by_json_id_out_of_order_are_matched_exactly() {
    let c = run_against(
        Protocol {
            reverse: true,
            ..Protocol::default()
        },
        "conv-reverse",
        &format!(
            "  scenario: constantRate\n  connections: [2]\n  duration: 1s\n  rate: {{messagesPerSecond: 100}}\n  ping: {{timeout: 2s}}\n  conversation:\n{JSON_ID}"
        ),
    );
    let n = &c.measure.counts;
    // Each connection sends 50: pairs are answered, the 50th was never followed.
    assert_eq!(n.expected, 100, "{n:?}");
    assert_eq!((n.received, n.lost, n.mismatched), (100, 0, 0), "{n:?}");
    assert_eq!(c.measure.hists.rtt.len(), 100);
}

/// A push between the answers is counted as one, never as an answer nor unsolicited.
#[test]
fn pushes_are_counted_not_taken_for_answers() {
    let c = run_against(
        Protocol {
            ticks: Some(Duration::from_millis(20)),
            ..Protocol::default()
        },
        "conv-push",
        "  scenario: pingpong\n  connections: [2]\n  duration: 1s\n  ping: {timeout: 2s}\n  conversation:\n    message:\n      text: '{\"id\":${seq}}'\n      answer: {match: {json: {field: ok, equals: 'true'}}}\n    push: {json: {field: type, equals: tick}}\n",
    );
    let n = &c.measure.counts;
    assert!(n.expected > 10, "{n:?}");
    assert_eq!((n.lost, n.mismatched), (0, 0), "{n:?}");
    assert_eq!(n.received, n.expected, "{n:?}");
    // ~50 ticks a connection in 1 s, each 15 bytes.
    assert!(n.pushes.frames >= 2 * 30, "{n:?}");
    assert_eq!(n.pushes.bytes, n.pushes.frames * 15, "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
}

/// An ack that never comes fails the connection, counted under the step's name.
#[test]
fn an_expect_that_times_out_is_counted_by_step() {
    let c = run_against(
        Protocol {
            never_ack: true,
            ..Protocol::default()
        },
        "conv-no-ack",
        "  scenario: pingpong\n  connections: [3]\n  duration: 1s\n  conversation:\n    open:\n      - {name: init, send: {text: init}}\n      - {name: ack, expect: {equals: ack}, timeout: 300ms}\n",
    );
    let n = &c.measure.counts;
    assert_eq!(n.connected, 0, "{n:?}");
    assert_eq!(n.failed.get(&ConnectError::ExpectTimeout).copied(), Some(3));
    assert_eq!(n.expect_missed.get("ack").copied(), Some(3), "{n:?}");
    assert_eq!(
        n.evidence["expect_timeout"],
        "step \"ack\" waited 300ms for its expected message; no message came"
    );
}

/// The session id the server sends first is captured and carried by a later step's message
/// (answered only if it is the connection's own) and by every measured message.
#[test]
fn a_captured_variable_is_sent_in_the_measured_message() {
    let c = run_against(
        Protocol {
            session: true,
            ..Protocol::default()
        },
        "conv-session",
        "  scenario: pingLatency\n  connections: [3]\n  ping: {count: 4, timeout: 2s}\n  conversation:\n    open:\n      - {name: hello, expect: {regex: sid}, capture: {sid: {json: sid}}}\n      - {name: join, send: {text: '{\"id\":0,\"sid\":\"${sid}\"}'}}\n      - {name: joined, expect: {json: {field: id, equals: '0'}}, timeout: 2s}\n    message:\n      text: '{\"id\":${seq},\"sid\":\"${sid}\"}'\n      answer: {id: {json: id}}\n",
    );
    let n = &c.measure.counts;
    assert_eq!(n.connected, 3, "{n:?}");
    assert_eq!((n.expected, n.received, n.lost), (12, 12, 0), "{n:?}");
    assert!(
        n.unsolicited.is_empty(),
        "an unknown session would be: {n:?}"
    );
    assert_eq!(
        n.pushes,
        FrameTally::default(),
        "no push rule, no push: {n:?}"
    );
}

/// A capture that finds nothing in its step's message (a JSON field the message lacks, a
/// regular expression that does not match) fails the connection as `capture_missed`, the
/// message quoted: before, `${sid}` was spliced empty and the run measured as if all was well.
#[test]
fn a_capture_that_finds_nothing_fails_the_connection_with_the_message() {
    for (name, capture) in [
        ("conv-capture-json", "{json: session}"),
        ("conv-capture-regex", "{regex: 'id=(\\w+)'}"),
    ] {
        let c = run_against(
            Protocol {
                session: true,
                ..Protocol::default()
            },
            name,
            &format!(
                "  scenario: pingLatency\n  connections: [3]\n  ping: {{count: 4, timeout: 2s}}\n  conversation:\n    open:\n      - {{name: hello, expect: {{regex: sid}}, capture: {{sid: {capture}}}}}\n    message:\n      text: '{{\"id\":${{seq}},\"sid\":\"${{sid}}\"}}'\n      answer: {{id: {{json: id}}}}\n"
            ),
        );
        let n = &c.measure.counts;
        assert_eq!(n.connected, 0, "{name}: {n:?}");
        assert_eq!(
            n.failed.get(&ConnectError::CaptureMissed).copied(),
            Some(3),
            "{name}: {n:?}"
        );
        assert_eq!(n.expected, 0, "{name}: nothing sent: {n:?}");
        assert!(n.expect_missed.is_empty(), "{name}: {n:?}");
        let evidence = &n.evidence["capture_missed"];
        assert!(
            evidence.starts_with("step \"hello\" got \"{\\\"sid\\\":\\\"s-")
                && evidence.ends_with("in which its capture \"sid\" found nothing"),
            "{name}: {evidence}"
        );
    }
}
