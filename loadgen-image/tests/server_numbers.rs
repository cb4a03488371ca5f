//! Servers that write their numbers as they like, each a few lines of raw TCP started by the
//! test: an answer's id as `12`, `12.0`, `120e-1` or `"12"`, a delivery's sequence number
//! likewise and its publish instant in milliseconds with a fraction; and messages whose JSON
//! begins where the match's prefix does (`{"push":...}`) or after it (Socket.IO's `42[...]`).
//! Every number is read in every form, every field where the message's JSON is, and what
//! cannot be read is counted by field, named by a finding, with the value as it came.

mod common;

use common::{only, raw_server, run, spec};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wsload::measure::NumberField;
use wsload::report::{CellResult, RunResult};
use wsload_report::fanout::Fanout;
use wsload_ws::test_server::{client_frames, server_frame as frame, upgrade};

/// How the server writes what it sends.
#[derive(Clone, Copy)]
struct Shape {
    /// The answer to a request carrying `id`.
    answer: fn(u64) -> String,
    /// Delivery `seq`, published at `us` (Unix microseconds).
    delivery: fn(u64, u64) -> String,
    /// How many deliveries follow the client's first message without an id (its
    /// subscription), one every [`DELIVERY_EVERY`].
    deliveries: u64,
}

const DELIVERY_EVERY: Duration = Duration::from_millis(10);

/// A whole number as servers write one, by `n`: `n`, `n.0`, `n0e-1`, `"n"`.
fn whole(n: u64) -> String {
    match n % 4 {
        0 => n.to_string(),
        1 => format!("{n}.0"),
        2 => format!("{n}0e-1"),
        _ => format!("\"{n}\""),
    }
}

/// An instant `us` in milliseconds as servers write one, by `n`: with its fraction
/// (`1795864874129.112`), as a string of it, as an exponent, as a whole number.
fn millis(n: u64, us: u64) -> String {
    let (ms, frac) = (us / 1000, us % 1000);
    match n % 4 {
        0 => format!("{ms}.{frac:03}"),
        1 => format!("\"{ms}.{frac:03}\""),
        2 => format!("{}.{:03}{frac:03}e3", ms / 1000, ms % 1000),
        _ => ms.to_string(),
    }
}

fn answer_in_every_form(id: u64) -> String {
    format!(r#"{{"result":true,"id":{}}}"#, whole(id))
}

/// Every fifth id written as a fraction: no message's.
fn answer_every_fifth_unreadable(id: u64) -> String {
    let id = if id % 5 == 0 {
        format!("{id}.5")
    } else {
        whole(id)
    };
    format!(r#"{{"result":true,"id":{id}}}"#)
}

fn push_in_every_form(seq: u64, us: u64) -> String {
    format!(
        r#"{{"push":true,"seq":{},"ts":{}}}"#,
        whole(seq),
        millis(seq, us)
    )
}

fn socketio_in_every_form(seq: u64, us: u64) -> String {
    format!(
        r#"42["tick",{{"seq":{},"ts":{}}}]"#,
        whole(seq),
        millis(seq, us)
    )
}

/// Every tenth sequence number a fraction, every seventh other instant a word.
fn push_partly_unreadable(seq: u64, us: u64) -> String {
    let s = if seq % 10 == 0 {
        format!("{seq}.5")
    } else {
        whole(seq)
    };
    let t = if seq % 7 == 0 && seq % 10 != 0 {
        "\"soon\"".to_string()
    } else {
        millis(seq, us)
    };
    format!(r#"{{"push":true,"seq":{s},"ts":{t}}}"#)
}

fn no_delivery(_: u64, _: u64) -> String {
    String::new()
}

fn unix_micros() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(now.as_micros()).expect("in range")
}

/// One connection: requests with an `id` answered as `shape` says, the first message without
/// one followed by the deliveries; until the client's close (answered) or its end.
async fn connection(mut s: TcpStream, shape: Shape) {
    if upgrade(&mut s).await.is_none() {
        return;
    }
    let mut tick = tokio::time::interval(DELIVERY_EVERY);
    let (mut subscribed, mut delivered) = (false, 0u64);
    let mut buf = Vec::new();
    let mut b = vec![0u8; 64 * 1024];
    loop {
        let mut out = Vec::new();
        let mut closing = false;
        tokio::select! {
            r = s.read(&mut b) => {
                let n = match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&b[..n]);
                for (op, payload) in client_frames(&mut buf) {
                    match op {
                        0x8 => closing = true,
                        0x9 => out.extend(frame(0xA, &payload)),
                        0x1 => {
                            let v: serde_json::Value =
                                serde_json::from_slice(&payload).unwrap_or_default();
                            match v["id"].as_u64() {
                                Some(id) => out.extend(frame(0x1, (shape.answer)(id).as_bytes())),
                                None => subscribed = true,
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ = tick.tick(), if subscribed && delivered < shape.deliveries => {
                delivered += 1;
                let d = (shape.delivery)(delivered, unix_micros());
                out.extend(frame(0x1, d.as_bytes()));
            }
        }
        if closing {
            out.extend(frame(0x8, &1000u16.to_be_bytes()));
        }
        if s.write_all(&out).await.is_err() || closing {
            let _ = s.shutdown().await;
            return;
        }
    }
}

/// Runs the spec body `body` against a server of `shape` on a loopback port of its own
/// runtime: the run.
fn run_against(shape: Shape, name: &str, body: &str) -> RunResult {
    let (url, _server) = raw_server(move |s, _| connection(s, shape));
    let lt = spec(
        name,
        &format!("  target: {{url: '{url}'}}\n  warmup: 0s\n{body}"),
    );
    run(&lt)
}

fn answers(answer: fn(u64) -> String) -> Shape {
    Shape {
        answer,
        delivery: no_delivery,
        deliveries: 0,
    }
}

fn deliveries(delivery: fn(u64, u64) -> String) -> Shape {
    Shape {
        answer: |_| String::new(),
        delivery,
        deliveries: DELIVERIES,
    }
}

/// Deliveries each subscriber is sent: 1 s of them, all read before the drain ends.
const DELIVERIES: u64 = 100;

/// A JSON-RPC-like request whose answer is recognised by the start of its JSON.
const REQUEST: &str = "  conversation:\n    message:\n      text: '{\"id\":${seq},\"method\":\"sum\"}'\n      answer: {match: {prefix: '{\"result\"'}, id: {json: id}}\n";

/// A fan-out of 2 subscribers of 1 topic the server publishes to, with `delivery`'s rule.
fn fanout(delivery: &str) -> String {
    format!(
        "  scenario: fanout\n  connections: [2]\n  duration: 1s\n  fanout: {{topics: 1, publisher: server, drain: 500ms}}\n  conversation:\n    subscribe:\n      - {{name: subscribe, send: {{text: '{{\"type\":\"subscribe\",\"topic\":\"${{topic}}\"}}'}}}}\n    delivery:\n{delivery}"
    )
}

fn tally(c: &CellResult) -> &Fanout {
    c.measure.counts.fanout.as_ref().expect("a fanout tally")
}

/// Deliveries that are JSON from their first byte, matched by that start.
const PUSH_RULE: &str = "      match: {prefix: '{\"push\"'}\n      sequence: {json: seq}\n      publishedAt: {json: ts}\n      publishedAtUnit: ms\n";

/// Every delivery of the window counted and timed, and all the others read outside it:
/// every number readable.
fn all_read_and_timed(c: &CellResult) {
    let f = tally(c);
    let t = f.totals(f.by_server);
    assert_eq!((f.unreadable, f.before_publish), (0, 0), "{f:?}");
    assert!(
        c.measure.counts.unreadable.is_empty(),
        "{:?}",
        c.measure.counts
    );
    assert!(t.delivered >= 50, "{t:?}");
    assert_eq!(t.delivered + f.outside, 2 * DELIVERIES, "{t:?} {f:?}");
    assert_eq!((t.duplicates, t.out_of_order), (0, 0), "{t:?}");
    assert_eq!(c.measure.hists.fanout.len(), t.delivered);
    // On one machine's clock: the instants, fractions of a millisecond and all, are close.
    let p50 = c.measure.hists.fanout.percentile(50.0);
    assert!(p50 < 0.05, "fan-out p50 {p50} s");
}

/// A delivery that is JSON from its first byte, matched by that start (`{"push"`): its fields
/// are read from the whole message, in every form. Before: read after the prefix (from
/// `":true,"seq":...`), every delivery was unreadable; and a float instant left the rest
/// untimed (latency count 0, no finding).
#[test]
fn a_delivery_matched_by_the_start_of_its_json_is_read_whole_in_every_number_form() {
    let r = run_against(
        deliveries(push_in_every_form),
        "numbers-push",
        &fanout(PUSH_RULE),
    );
    all_read_and_timed(only(&r));
}

/// A delivery after a header (Socket.IO's `42["tick",{...}]`): read after the prefix, in
/// every form. Before: a float or an exponent was no number.
#[test]
fn a_delivery_after_a_header_is_read_after_the_prefix_in_every_number_form() {
    let r = run_against(
        deliveries(socketio_in_every_form),
        "numbers-socketio",
        &fanout(
            "      match: {prefix: '42', json: {field: '0', equals: tick}}\n      sequence: {json: 1.seq}\n      publishedAt: {json: 1.ts}\n      publishedAtUnit: ms\n",
        ),
    );
    all_read_and_timed(only(&r));
}

/// A sequence number that is no whole number (every tenth, `10.5`) and an instant that is no
/// number (every seventh other, `"soon"`): counted by field, exactly, named by a finding with
/// the first value as it came. The deliveries without a readable instant are still counted,
/// by when they arrived, untimed.
#[test]
fn delivery_numbers_that_cannot_be_read_are_counted_by_field_and_named() {
    let r = run_against(
        deliveries(push_partly_unreadable),
        "numbers-unreadable-deliveries",
        &fanout(PUSH_RULE),
    );
    let c = only(&r);
    let n = &c.measure.counts;
    // Each subscriber: 10 fractions (10, 20 ... 100), 13 words (7, 14 ... 98 but 70).
    assert_eq!(
        n.unreadable,
        [(NumberField::Sequence, 20), (NumberField::PublishedAt, 26)].into(),
        "{n:?}"
    );
    let f = tally(c);
    let t = f.totals(f.by_server);
    assert_eq!(f.unreadable, 20, "{f:?}");
    assert_eq!(
        t.delivered + f.outside,
        2 * (DELIVERIES - 10),
        "{t:?} {f:?}"
    );
    let timed = c.measure.hists.fanout.len();
    assert!(
        timed < t.delivered && timed + 26 >= t.delivered,
        "{timed} {t:?}"
    );
    assert!(
        n.evidence["unreadable delivery.sequence"]
            .starts_with(r#"10.5 (in {"push":true,"seq":10.5,"ts":"#),
        "{:?}",
        n.evidence
    );
    let found: Vec<String> = wsload_report::findings::fields::cell(c)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with(
            "finding [2]: deliveries carried no sequence number wsload could read as a whole number, so they were not counted: point conversation.delivery.sequence at"
        ) && found[0].contains("(20 deliveries with an unreadable delivery.sequence; e.g. 10.5 (in"),
        "{found:#?}"
    );
    assert!(
        found[1].ends_with(
            r#"(26 deliveries with an unreadable delivery.publishedAt; e.g. "soon" (in {"push":true,"seq":"7","ts":"soon"}))"#
        ),
        "{found:#?}"
    );
    // The sequence numbers are named by their field alone: no topic was missing.
    let all = r.render();
    assert!(!all.contains("named no topic"), "{all}");
    assert!(all.contains("unreadable delivery.publishedAt"), "{all}");
}

/// 3 connections of 10 requests each, one at a time (pingLatency), against a server that
/// answers as `answer` writes: the cell.
fn ten_requests_each(answer: fn(u64) -> String, name: &str) -> CellResult {
    let r = run_against(
        answers(answer),
        name,
        &format!(
            "  scenario: pingLatency\n  connections: [3]\n  ping: {{count: 10, timeout: 300ms}}\n{REQUEST}"
        ),
    );
    only(&r).clone()
}

/// Answers recognised by the start of their JSON (`{"result"`), their id in every form:
/// each answers its message. Before: the id was read after the prefix, so nothing answered
/// and every message was lost.
#[test]
fn answer_ids_in_every_form_answer_their_message() {
    let c = ten_requests_each(answer_in_every_form, "numbers-answers");
    let n = &c.measure.counts;
    assert_eq!(
        (n.expected, n.received, n.lost, n.mismatched),
        (30, 30, 0, 0),
        "{n:?}"
    );
    assert_eq!(c.measure.hists.rtt.len(), 30);
    assert!(n.unsolicited.is_empty() && n.unreadable.is_empty(), "{n:?}");
}

/// An answer whose id is no whole number (every fifth, `5.5`) answers nothing, and is counted
/// as an unreadable answer id, not as unsolicited, with the value as it came; its message is
/// lost. Before: silently unsolicited, no field named.
#[test]
fn answers_whose_id_cannot_be_read_are_counted_and_named() {
    let c = ten_requests_each(answer_every_fifth_unreadable, "numbers-unreadable-answers");
    let n = &c.measure.counts;
    assert_eq!(
        (n.expected, n.received, n.lost, n.mismatched),
        (30, 24, 6, 0),
        "{n:?}"
    );
    assert_eq!(n.unreadable, [(NumberField::AnswerId, 6)].into(), "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
    let found: Vec<String> = wsload_report::findings::fields::cell(&c)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        vec![
            r#"finding [3]: answers to the measured message carried an id wsload could not read as a whole number, so they answered nothing and the messages they answer count as lost: point conversation.message.answer.id (ping.answer.id for a ping) at the field that carries the message's ${seq} back (42, 42.0, 4.2e1 and "42" all read), or narrow answer.match to the answers (6 answers with an unreadable answer.id; e.g. 5.5 (in {"result":true,"id":5.5}))"#
        ]
    );
}

/// The counting read (throughput) takes answers in every form, and counts those whose id
/// cannot be read apart from the unsolicited: each leaves its message unanswered, so the
/// window of 16 fills with them after 80 messages (every fifth unreadable).
#[test]
fn a_counting_read_counts_unreadable_answers_apart() {
    let r = run_against(
        answers(answer_every_fifth_unreadable),
        "numbers-counting",
        &format!(
            "  scenario: throughput\n  connections: [2]\n  duration: 1s\n  window: 16\n{REQUEST}"
        ),
    );
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!((n.sent, n.received), (160, 128), "{n:?}");
    assert_eq!(n.unreadable, [(NumberField::AnswerId, 32)].into(), "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
    assert_eq!(
        n.evidence["unreadable answer.id"],
        r#"5.5 (in {"result":true,"id":5.5})"#
    );
}
