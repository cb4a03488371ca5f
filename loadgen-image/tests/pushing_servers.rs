//! Servers that send what was not asked for, each a few lines of raw TCP started by the test:
//! one that floods text frames and never echoes, one that echoes with a changed payload, one
//! that echoes everything twice, and an honest one for comparison. An answer is recognised by
//! what it carries, never by when it arrived, and a cell ends on time whatever the server
//! sends.

mod common;

use common::{only, raw_server, read_frames, run, spec};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use wsload::measure::{Dropped, FrameKind, FrameTally};
use wsload::report::CellResult;
use wsload_ws::test_server::{server_frame as frame, upgrade};

/// Data frames the `Twice` servers read, over the process.
static TWICE_READ: AtomicU64 = AtomicU64::new(0);

/// What a hostile server does after the upgrade.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Never echoes; sends text frames as fast as the socket takes them.
    Flood,
    /// Echoes every data frame with its last byte changed.
    Tamper,
    /// Echoes every data frame twice.
    Twice,
    /// Echoes every data frame as it came.
    Echo,
    /// Answers every ping with an empty pong first, then the right one.
    ExtraPongs,
}

/// One connection: the upgrade, then `mode` until the client's close (answered) or its end.
async fn connection(mut s: TcpStream, mode: Mode) {
    if upgrade(&mut s).await.is_none() {
        return;
    }
    let (mut rd, mut wr) = s.into_split();
    let (closed_tx, mut closed) = tokio::sync::watch::channel(false);
    let (echo_tx, mut echoes) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let reader = tokio::spawn(async move {
        let mut buf = Vec::new();
        while let Some(frames) = read_frames(&mut rd, &mut buf).await {
            for (op, payload) in frames {
                let echo = match (op, mode) {
                    (0x8, _) => {
                        let _ = closed_tx.send(true);
                        return;
                    }
                    (0x9, Mode::ExtraPongs) => {
                        let mut f = frame(0xA, b"");
                        f.extend(frame(0xA, &payload));
                        Some(f)
                    }
                    (0x9, _) => Some(frame(0xA, &payload)),
                    (0x1 | 0x2, Mode::Tamper) => {
                        let mut p = payload;
                        if let Some(last) = p.last_mut() {
                            *last ^= 1;
                        }
                        Some(frame(op, &p))
                    }
                    (0x1 | 0x2, Mode::Twice) => {
                        TWICE_READ.fetch_add(1, Ordering::Relaxed);
                        let mut f = frame(op, &payload);
                        f.extend(frame(op, &payload));
                        Some(f)
                    }
                    (0x1 | 0x2, Mode::Echo) => Some(frame(op, &payload)),
                    _ => None,
                };
                if let Some(e) = echo {
                    let _ = echo_tx.send(e);
                }
            }
        }
        let _ = closed_tx.send(true);
    });
    // A burst of pushes: 64 text frames of a tick each, written as one.
    let burst: Vec<u8> = (0..64)
        .flat_map(|i| frame(0x1, format!("{{\"type\":\"tick\",\"n\":{i}}}").as_bytes()))
        .collect();
    loop {
        let step = tokio::select! {
            biased;
            _ = closed.changed() => break,
            e = echoes.recv() => match e {
                Some(e) => wr.write_all(&e).await,
                None => break,
            },
            r = wr.write_all(&burst), if matches!(mode, Mode::Flood) => r,
        };
        if step.is_err() {
            break;
        }
    }
    // The client's close is answered; then the connection ends.
    let _ = wr.write_all(&frame(0x8, &1000u16.to_be_bytes())).await;
    let _ = wr.shutdown().await;
    reader.abort();
}

/// A server in `mode` on a loopback port of its own runtime; `ws://` URL and the runtime
/// (dropping it stops the server).
fn start(mode: Mode) -> (String, tokio::runtime::Runtime) {
    raw_server(move |s, _| connection(s, mode))
}

/// Runs the spec body `body` against a server in `mode`: its only cell, the report as text,
/// and the cell's wall clock, from its start to the run's end.
fn run_against(mode: Mode, name: &str, body: &str) -> (CellResult, String, Duration) {
    let (url, _server) = start(mode);
    let lt = spec(
        name,
        &format!("  target: {{url: {url}}}\n  warmup: 0s\n{body}"),
    );
    let began = Instant::now();
    let r = run(&lt);
    let run_took = began.elapsed();
    let c = only(&r);
    let ended = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    let took = ended.saturating_sub(Duration::from_micros(c.started_first_micros));
    assert!(
        c.started_first_micros > 0 && took <= run_took,
        "{took:?} of {run_took:?}"
    );
    eprintln!(
        "{name}: the run took {run_took:?}, its cell {took:?}; measured {:.2} s",
        c.measured_secs
    );
    (c.clone(), r.render(), took)
}

fn unsolicited(c: &CellResult, kind: FrameKind) -> FrameTally {
    c.measure
        .counts
        .unsolicited
        .get(&kind)
        .copied()
        .unwrap_or_default()
}

/// Before: 12 pings, lost 0, round trips of microseconds (any frame answered the oldest ping).
#[test]
fn pings_against_a_flood_are_all_lost_never_answered() {
    let (c, text, _) = run_against(
        Mode::Flood,
        "flood-pings",
        "  scenario: pingLatency\n  connections: [4]\n  ping: {count: 3, timeout: 300ms}\n",
    );
    let n = &c.measure.counts;
    assert_eq!(n.connected, 4);
    assert_eq!(n.expected, 12);
    assert_eq!(n.lost, 12, "every ping lost");
    assert_eq!(c.measure.hists.rtt.len(), 0, "no round trip timed");
    assert_eq!(n.received, 0, "nothing received as an answer");
    assert!(unsolicited(&c, FrameKind::Text).frames > 0, "{n:?}");
    assert!(unsolicited(&c, FrameKind::Text).bytes > 0, "{n:?}");
    assert!(
        text.contains("unsolicited text frames") && text.contains("were not counted as answers"),
        "{text}"
    );
}

/// Before: Echoes/s in the millions, received many times what was sent.
#[test]
fn throughput_against_a_flood_counts_no_echo() {
    let (c, _, took) = run_against(
        Mode::Flood,
        "flood-throughput",
        "  scenario: throughput\n  connections: [2]\n  duration: 1s\n  window: 16\n",
    );
    let n = &c.measure.counts;
    assert_eq!(n.connected, 2);
    assert!(n.sent > 0);
    assert_eq!(n.received, 0, "{n:?}");
    assert_eq!(c.figures.received_per_sec, 0.0);
    assert!(unsolicited(&c, FrameKind::Text).frames > 0, "{n:?}");
    assert!(took < Duration::from_secs(4), "a 1 s cell took {took:?}");
}

/// Before: ran for tens of seconds, survival 100%, lost 0, the pings answered by the flood.
#[test]
fn a_hold_against_a_flood_ends_on_time_with_its_pings_lost() {
    let (c, _, took) = run_against(
        Mode::Flood,
        "flood-hold",
        "  scenario: sustainedHold\n  connections: [4]\n  duration: 5s\n  ping: {interval: 1s, timeout: 10s}\n",
    );
    let n = &c.measure.counts;
    assert_eq!(n.connected, 4);
    // Wall clock of the cell: the 5 s measured, the last ping's grace, the goodbye.
    assert!(took < Duration::from_secs(6), "a 5 s hold took {took:?}");
    assert_eq!(n.expected, 4, "one ping each, sent within the first second");
    assert_eq!(n.lost, 4, "never answered, lost at the deadline");
    assert_eq!(c.measure.hists.rtt.len(), 0);
    assert_eq!(n.received, 0);
    assert!(unsolicited(&c, FrameKind::Text).frames > 0, "{n:?}");
    assert_eq!(n.dropped_total(), 0, "{n:?}");
}

/// A short timeout ends the connection as a hold does, and only the pings' timeouts do.
/// Before: no ping was lost and every connection survived.
#[test]
fn a_hold_against_a_flood_loses_its_ping_at_the_timeout() {
    let (c, _, took) = run_against(
        Mode::Flood,
        "flood-hold-timeout",
        "  scenario: sustainedHold\n  connections: [3]\n  duration: 5s\n  ping: {interval: 500ms, timeout: 500ms}\n",
    );
    let n = &c.measure.counts;
    assert_eq!((n.expected, n.lost), (3, 3), "{n:?}");
    assert_eq!(n.dropped.get(&Dropped::PingTimeout).copied(), Some(3));
    assert_eq!(n.survived, 0);
    assert!(took < Duration::from_secs(6), "{took:?}");
}

/// Before: every tampered echo answered its ping (the id was right).
#[test]
fn an_echo_with_a_changed_payload_is_not_an_answer() {
    let (c, _, _) = run_against(
        Mode::Tamper,
        "tamper-pings",
        "  scenario: pingLatency\n  connections: [4]\n  ping: {count: 3, timeout: 300ms}\n",
    );
    let n = &c.measure.counts;
    assert_eq!((n.expected, n.lost), (12, 12), "{n:?}");
    assert_eq!(c.measure.hists.rtt.len(), 0);
    assert_eq!(n.received, 0);
    assert_eq!(unsolicited(&c, FrameKind::Text).frames, 12, "{n:?}");

    let (c, _, _) = run_against(
        Mode::Tamper,
        "tamper-throughput",
        "  scenario: throughput\n  connections: [2]\n  duration: 1s\n  window: 16\n",
    );
    let n = &c.measure.counts;
    assert_eq!(n.received, 0, "{n:?}");
    assert_eq!(n.sent, 32, "the window stays full: nothing echoed");
    assert_eq!(unsolicited(&c, FrameKind::Text).frames, 32, "{n:?}");
}

/// Before: received twice what was sent; then (issue 39) the built-in message carried no
/// `${seq}`, so a copy of an earlier echo answered a later message: 67,846 answers counted
/// where the server had read 54,156 messages. Now each message's echo counts once, by the
/// `${seq}` it carries (in MsgPack and zlib too, found in the cycle made once), and its copy is
/// counted as mismatched, never as an answer nor as unsolicited.
#[test]
fn copies_of_answers_are_never_counted_as_answers() {
    for format in ["json", "binary", "msgpack", "zlib"] {
        let read_before = TWICE_READ.load(Ordering::Relaxed);
        let (c, text, _) = run_against(
            Mode::Twice,
            &format!("twice-throughput-{format}"),
            &format!(
                "  scenario: throughput\n  connections: [2]\n  duration: 1s\n  window: 16\n  message: {{format: {format}}}\n"
            ),
        );
        // Read after the run: every message the server read is in, and only this run's
        // (the tests that share the mode run one at a time: this one only).
        let read = TWICE_READ.load(Ordering::Relaxed) - read_before;
        let n = &c.measure.counts;
        assert!(n.received > 0, "{format}: {n:?}");
        assert!(
            n.received <= read,
            "{format}: {} answers counted, the server read {read} messages",
            n.received
        );
        // Each copy came right behind its answer: as many, but for those the deadline split.
        assert!(
            n.mismatched <= n.received && n.received - n.mismatched <= 2 * 16,
            "{format}: {} copies of {} answers",
            n.mismatched,
            n.received
        );
        assert!(n.unsolicited.is_empty(), "{format}: {n:?}");
        assert!(
            text.contains("answers to messages already answered or given up on were not counted"),
            "{format}: {text}"
        );
    }
}

/// The honest server of the same few lines: answers, none lost, nothing unsolicited.
#[test]
fn an_honest_echo_still_answers() {
    let (c, _, _) = run_against(
        Mode::Echo,
        "honest-pings",
        "  scenario: pingLatency\n  connections: [4]\n  ping: {count: 3, timeout: 2s}\n",
    );
    let n = &c.measure.counts;
    assert_eq!((n.expected, n.lost, n.mismatched), (12, 0, 0), "{n:?}");
    assert_eq!(c.measure.hists.rtt.len(), 12);
    assert_eq!(n.received, 12);
    assert!(n.unsolicited.is_empty(), "{n:?}");

    let (c, _, _) = run_against(
        Mode::Echo,
        "honest-throughput",
        "  scenario: throughput\n  connections: [2]\n  duration: 1s\n  window: 16\n",
    );
    let n = &c.measure.counts;
    assert!(n.received > 0 && n.received <= n.sent_with_warmup, "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
    assert_eq!(n.behind, 0, "{n:?}");
}

/// A pong that answers no ping is counted apart; the right one still answers.
/// Before: the same answers, and the empty pongs nowhere.
#[test]
fn a_pong_that_answers_no_ping_is_unsolicited() {
    let (c, _, _) = run_against(
        Mode::ExtraPongs,
        "extra-pongs",
        "  scenario: pingLatency\n  connections: [4]\n  ping: {count: 3, timeout: 2s, kind: frame}\n",
    );
    let n = &c.measure.counts;
    assert_eq!((n.expected, n.lost, n.mismatched), (12, 0, 0), "{n:?}");
    assert_eq!(c.measure.hists.rtt.len(), 12);
    assert_eq!(
        unsolicited(&c, FrameKind::Pong),
        FrameTally {
            frames: 12,
            bytes: 0
        }
    );
}
