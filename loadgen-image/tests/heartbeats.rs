//! The conversation's client heartbeat (`conversation.heartbeat`) on every connection from
//! its open, in every phase: against a server that, as an MQTT broker enforces its keep-alive,
//! closes a connection whose client sent no heartbeat of its protocol for 400 ms (WebSocket
//! pongs do not count), with a connect phase longer than that. Before, only a hold's measured
//! phase sent it: a fanout's subscribers and publishers never did (aedes reset every
//! subscriber 22.4 s in), and a hold's connections not while the rest of the tier opened.

mod common;

use common::{close_frame, only, raw_server, read_frames, run, spec, text_frame};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use wsload_ws::test_server::upgrade;

/// What the server counted over its connections.
#[derive(Debug, Default)]
struct Seen {
    beats: AtomicU64,
    /// Connections it closed for a missing heartbeat.
    timed_out: AtomicU64,
}

const KEEP_ALIVE: Duration = Duration::from_millis(400);

/// One connection: every tick of the broadcast from its open, closed with 4000 once
/// KEEP_ALIVE passes without a `hb` from the client.
async fn connection(mut s: TcpStream, seen: Arc<Seen>, ticks: broadcast::Sender<String>) {
    let mut ticks = ticks.subscribe();
    if upgrade(&mut s).await.is_none() {
        return;
    }
    let (mut rd, mut wr) = s.into_split();
    let mut buf = Vec::new();
    let mut last_beat = Instant::now();
    loop {
        tokio::select! {
            tick = ticks.recv() => {
                if last_beat.elapsed() > KEEP_ALIVE {
                    seen.timed_out.fetch_add(1, Ordering::Relaxed);
                    let _ = wr.write_all(&close_frame(4000, "no heartbeat")).await;
                    return;
                }
                let Ok(tick) = tick else { return };
                if wr.write_all(&text_frame(&tick)).await.is_err() {
                    return;
                }
            }
            frames = read_frames(&mut rd, &mut buf) => {
                let Some(frames) = frames else { return };
                for (op, payload) in frames {
                    match op {
                        0x1 if payload == b"hb" => {
                            seen.beats.fetch_add(1, Ordering::Relaxed);
                            last_beat = Instant::now();
                        }
                        0x8 => return,
                        _ => {}
                    }
                }
            }
        }
    }
}

/// The server: a numbered tick to every connection each 20 ms (its instant a float in
/// milliseconds, as such servers write it).
fn server() -> (String, Arc<Seen>, tokio::runtime::Runtime) {
    let seen = Arc::new(Seen::default());
    let counted = Arc::clone(&seen);
    let (ticks, _) = broadcast::channel(64);
    let sender = ticks.clone();
    let (url, rt) = raw_server(move |s, _| connection(s, Arc::clone(&counted), sender.clone()));
    rt.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(20));
        for seq in 1u64.. {
            every.tick().await;
            let ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970")
                .as_micros() as f64
                / 1000.0;
            let _ = ticks.send(format!(r#"{{"seq":{seq},"ts":{ms:.3}}}"#));
        }
    });
    (url, seen, rt)
}

/// 4 connections opened 300 ms apart (the first waits 900 ms for the window), a heartbeat
/// every 100 ms, and `rest`.
fn load(name: &str, url: &str, rest: &str) -> wsload_spec::LoadTest {
    spec(
        name,
        &format!(
            "  target: {{url: '{url}'}}\n  connections: [4]\n  connect: {{batchSize: 1, batchInterval: 300ms}}\n  warmup: 200ms\n  duration: 1s\n{rest}"
        ),
    )
}

const HEARTBEAT: &str = "    heartbeat: {every: 100ms, send: {text: hb}}\n";

#[test]
fn fanout_subscribers_send_the_heartbeat_before_and_in_the_window() {
    let (url, seen, _server) = server();
    let lt = load(
        "heartbeat-fanout",
        &url,
        &format!(
            "  scenario: fanout\n  fanout: {{topics: 1, publisher: server, drain: 300ms}}\n  conversation:\n{HEARTBEAT}    delivery: {{sequence: {{json: seq}}, publishedAt: {{json: ts}}, publishedAtUnit: ms}}\n"
        ),
    );
    let r = run(&lt);
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!(seen.timed_out.load(Ordering::Relaxed), 0, "{seen:?}");
    assert_eq!((n.connected, n.failed_total()), (4, 0), "{n:?}");
    assert_eq!((n.survived, n.dropped_total()), (4, 0), "{n:?}");
    // ~2.4 s of life over the four, a heartbeat each 100 ms.
    assert!(seen.beats.load(Ordering::Relaxed) >= 4 * 10, "{seen:?}");
    let f = c.figures.fanout.as_ref().expect("fan-out figures");
    assert!(f.delivered > 0, "{f:?}");
    assert_eq!(f.gaps, 0, "{f:?}");
    assert_eq!(f.completeness, Some(1.0), "{f:?}");
}

/// A hold's heartbeat goes on at the measured phase where it was: every 250 ms against the
/// 400 ms keep-alive. Before, it started again an interval into the phase, so the gap across
/// the phase's start reached up to two intervals (500 ms): of 8 connections, those whose last
/// heartbeat before it came more than 150 ms early were closed (Engine.IO 3 closed
/// connections so). Also, before, none was sent while the tier opened.
#[test]
fn held_connections_keep_one_heartbeat_schedule_from_their_open() {
    let (url, seen, _server) = server();
    let lt = spec(
        "heartbeat-hold",
        &format!(
            "  target: {{url: '{url}'}}\n  connections: [8]\n  connect: {{batchSize: 1, batchInterval: 150ms}}\n  warmup: 200ms\n  duration: 1s\n  scenario: sustainedHold\n  conversation:\n    heartbeat: {{every: 250ms, send: {{text: hb}}}}\n    push: {{prefix: '{{\"seq\"'}}\n"
        ),
    );
    let r = run(&lt);
    let c = only(&r);
    let n = &c.measure.counts;
    assert_eq!((n.survived, n.dropped_total()), (8, 0), "{n:?}");
    assert_eq!(seen.timed_out.load(Ordering::Relaxed), 0, "{seen:?}");
    assert_eq!((n.connected, n.failed_total()), (8, 0), "{n:?}");
    assert_eq!((n.survived, n.dropped_total()), (8, 0), "{n:?}");
    assert!(seen.beats.load(Ordering::Relaxed) >= 8 * 4, "{seen:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
}
