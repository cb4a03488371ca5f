//! An MQTT 3.1.1 broker of a few dozen lines, started by the test (raw TCP, the WebSocket
//! upgrade with subprotocol `mqtt`, packets in binary frames: one a frame, all of a read's
//! answers in one frame, or a byte a frame, as brokers differ), and the preset
//! `examples/mqtt.yaml` run against it: CONNECT answered by CONNACK, each PUBLISH QoS 1 by the
//! PUBACK carrying its packet id (in order, or each pair reversed), PINGREQ by PINGRESP. The
//! broker checks what it is sent as a broker would: a packet it cannot parse, a text frame or a
//! packet id of 0 ends the connection.

mod common;

use common::{loopback_server, only, run, spec};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wsload::report::CellResult;
use wsload_spec::{Dur, LoadTest};
use wsload_ws::test_server::{accept_for, client_frames, response_101, server_frame as frame};

/// What the broker counted, over all its connections.
#[derive(Debug, Default)]
struct Seen {
    /// Upgrades that offered the `mqtt` subprotocol.
    offered_mqtt: AtomicU64,
    connects: AtomicU64,
    publishes: AtomicU64,
    pingreqs: AtomicU64,
    /// PUBACKs sent in the other order than their PUBLISHes.
    reversed: AtomicU64,
    /// The largest `seq` a PUBLISH's payload carried.
    max_seq: AtomicU64,
    /// PUBLISHes whose packet id is not their payload's `seq` as a 16-bit id (1 to 65,535,
    /// then 1 again), or is 0; and anything else a broker refuses.
    violations: AtomicU64,
}

/// How the broker answers PUBLISHes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Acks {
    InOrder,
    /// Each PUBACK held until the next PUBLISH, then both sent, the later one first.
    Reversed,
}

/// How the broker cuts its packets into WebSocket frames (MQTT over WebSocket leaves it free).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    /// One packet a frame (mochi-mqtt, mostly).
    PerPacket,
    /// Every answer to one read in one frame (mochi-mqtt with two deliveries pending).
    Packed,
    /// A byte a frame (npm aedes writes its CONNACK so).
    Bytewise,
}

impl Framing {
    fn frames(self, packets: &[Vec<u8>]) -> Vec<u8> {
        match self {
            Framing::PerPacket => packets.iter().flat_map(|p| frame(0x2, p)).collect(),
            Framing::Packed if packets.is_empty() => Vec::new(),
            Framing::Packed => frame(0x2, &packets.concat()),
            Framing::Bytewise => packets
                .iter()
                .flatten()
                .flat_map(|b| frame(0x2, &[*b]))
                .collect(),
        }
    }
}

/// One MQTT packet off the stream: its first byte and its body; `None` until whole.
fn packet(stream: &mut Vec<u8>) -> Option<(u8, Vec<u8>)> {
    let mut len = 0usize;
    let mut at = 1;
    loop {
        let b = *stream.get(at)?;
        len |= usize::from(b & 0x7F) << (7 * (at - 1));
        at += 1;
        if b & 0x80 == 0 {
            break;
        }
    }
    if stream.len() < at + len {
        return None;
    }
    let body = stream[at..at + len].to_vec();
    let first = stream[0];
    stream.drain(..at + len);
    Some((first, body))
}

/// An MQTT string at the start of `b`: its bytes and what follows.
fn string(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = usize::from(u16::from_be_bytes([*b.first()?, *b.get(1)?]));
    Some((b.get(2..2 + n)?, &b[2 + n..]))
}

/// The broker's answer to one packet, its packets unframed; `None` ends the connection (as a
/// broker does on a protocol violation: no close frame, the TCP connection closed).
fn answer(
    first: u8,
    body: &[u8],
    connected: &mut bool,
    held: &mut Option<Vec<u8>>,
    acks: Acks,
    seen: &Seen,
) -> Option<Vec<Vec<u8>>> {
    let violation = || {
        seen.violations.fetch_add(1, Ordering::Relaxed);
        None
    };
    match (first >> 4, *connected) {
        (1, false) => {
            let (name, rest) = string(body)?;
            let (client, _) = string(rest.get(4..)?)?;
            let digits = client.strip_prefix(b"wsload")?;
            if name != b"MQTT" || rest[0] != 4 || digits.is_empty() {
                return violation();
            }
            *connected = true;
            seen.connects.fetch_add(1, Ordering::Relaxed);
            Some(vec![vec![0x20, 0x02, 0x00, 0x00]])
        }
        (3, true) if first & 0x06 == 0x02 => {
            let (topic, rest) = string(body)?;
            let id = u16::from_be_bytes([*rest.first()?, *rest.get(1)?]);
            let payload: serde_json::Value = serde_json::from_slice(&rest[2..]).ok()?;
            let seq = payload["seq"].as_u64()?;
            if !topic.starts_with(b"wsload/") || id == 0 || u64::from(id) != (seq - 1) % 65_535 + 1
            {
                return violation();
            }
            seen.publishes.fetch_add(1, Ordering::Relaxed);
            seen.max_seq.fetch_max(seq, Ordering::Relaxed);
            let puback = vec![0x40, 0x02, (id >> 8) as u8, id as u8];
            if acks == Acks::InOrder {
                return Some(vec![puback]);
            }
            match held.take() {
                None => {
                    *held = Some(puback);
                    Some(Vec::new())
                }
                Some(first) => {
                    seen.reversed.fetch_add(1, Ordering::Relaxed);
                    Some(vec![puback, first])
                }
            }
        }
        (12, true) if body.is_empty() => {
            seen.pingreqs.fetch_add(1, Ordering::Relaxed);
            Some(vec![vec![0xd0, 0x00]])
        }
        _ => violation(),
    }
}

async fn connection(mut s: TcpStream, acks: Acks, framing: Framing, seen: Arc<Seen>) {
    let mut head = Vec::new();
    let mut b = vec![0u8; 64 * 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let offered = text
        .lines()
        .any(|l| l.starts_with("sec-websocket-protocol:") && l.contains("mqtt"));
    let extra = if offered {
        seen.offered_mqtt.fetch_add(1, Ordering::Relaxed);
        "Sec-WebSocket-Protocol: mqtt\r\n"
    } else {
        ""
    };
    let Some(accept) = accept_for(&head) else {
        return;
    };
    if s.write_all(response_101(&accept, extra).as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let (mut buf, mut stream) = (Vec::new(), Vec::new());
    let (mut connected, mut held) = (false, None);
    loop {
        let n = match s.read(&mut b).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&b[..n]);
        let (mut out, mut packets) = (Vec::new(), Vec::new());
        let mut closing = false;
        for (op, payload) in client_frames(&mut buf) {
            match op {
                0x2 => stream.extend_from_slice(&payload),
                // Closed after the packets that came before the close are answered.
                0x8 => {
                    closing = true;
                    break;
                }
                0x9 => out.extend(frame(0xA, &payload)),
                // A text frame closes the connection, as mochi-mqtt does.
                _ => return,
            }
        }
        while let Some((first, body)) = packet(&mut stream) {
            match answer(first, &body, &mut connected, &mut held, acks, &seen) {
                Some(a) => packets.extend(a),
                None => return,
            }
        }
        out.extend(framing.frames(&packets));
        if closing {
            out.extend(frame(0x8, &1000u16.to_be_bytes()));
        }
        if s.write_all(&out).await.is_err() || closing {
            return;
        }
    }
}

/// The broker on a loopback port of its own runtime: its URL, what it saw, and the runtime
/// (dropping it stops the broker).
fn start(acks: Acks, framing: Framing) -> (String, Arc<Seen>, tokio::runtime::Runtime) {
    let seen = Arc::new(Seen::default());
    let counted = Arc::clone(&seen);
    let (url, rt) = loopback_server(move |s| connection(s, acks, framing, Arc::clone(&counted)));
    (url, seen, rt)
}

/// The preset as shipped.
fn preset() -> LoadTest {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mqtt.yaml");
    LoadTest::from_file(path).expect("the preset is valid")
}

fn report(name: &str, c: &CellResult, seen: &Seen) {
    eprintln!("{name}: {:?}\nbroker: {seen:?}", c.measure.counts);
}

/// The preset, shortened: 4 connections held 3 s, a PUBLISH every 200 ms and a PINGREQ every
/// 500 ms each. Before: `bytes` was an unknown field, and the preset did not parse.
#[test]
fn the_mqtt_preset_holds_with_every_publish_acked_by_its_packet_id() {
    let (url, seen, _broker) = start(Acks::InOrder, Framing::PerPacket);
    let mut lt = preset();
    lt.spec.target.url = Some(url);
    lt.spec.connections = vec![4];
    lt.spec.duration = Dur::secs(3);
    lt.spec.warmup = Dur::secs(0);
    lt.spec.ping.interval = Some(Dur::millis(200));
    if let Some(hb) = lt
        .spec
        .conversation
        .as_mut()
        .and_then(|c| c.heartbeat.as_mut())
    {
        hb.every = Dur::millis(500);
    }
    let r = run(&lt);
    let c = only(&r);
    report("mqtt-preset", c, &seen);
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.failed_total()), (4, 0), "{n:?}");
    assert_eq!((n.survived, n.dropped_total()), (4, 0), "{n:?}");
    assert_eq!(seen.offered_mqtt.load(Ordering::Relaxed), 4);
    assert_eq!(seen.connects.load(Ordering::Relaxed), 4);
    assert_eq!(seen.violations.load(Ordering::Relaxed), 0);
    // ~15 PUBLISHes each in 3 s, every one acknowledged by its own packet id and timed.
    assert!(n.expected >= 4 * 10, "{n:?}");
    assert_eq!(seen.publishes.load(Ordering::Relaxed), n.expected, "{n:?}");
    assert_eq!(
        (n.received, n.lost, n.mismatched),
        (n.expected, 0, 0),
        "{n:?}"
    );
    assert_eq!(c.measure.hists.rtt.len(), n.expected);
    // Every PINGRESP counted as a push, nothing unsolicited: ~5 keep-alives each.
    let pings = seen.pingreqs.load(Ordering::Relaxed);
    assert!(pings >= 4 * 4, "{seen:?}");
    assert_eq!(n.pushes.frames, pings, "{n:?}");
    assert_eq!(n.pushes.bytes, 2 * pings, "{n:?}");
    assert!(n.unsolicited.is_empty(), "{n:?}");
}

/// The preset's conversation in an open loop (100 PUBLISHes a second, each connection's 50
/// on their schedule whatever the acks do), against a broker that acknowledges each pair of
/// PUBLISHes in reverse: every PUBACK still times its own PUBLISH, found by packet id.
/// Before: `bytes` was an unknown field.
#[test]
fn pubacks_out_of_order_are_matched_by_packet_id() {
    let (url, seen, _broker) = start(Acks::Reversed, Framing::PerPacket);
    let conversation = serde_json::to_string(&preset().spec.conversation).expect("json");
    let lt = spec(
        "mqtt-reversed",
        &format!(
            "  target: {{url: {url}}}\n  subprotocols: [mqtt]\n  warmup: 0s\n  scenario: constantRate\n  connections: [2]\n  duration: 1s\n  rate: {{messagesPerSecond: 100}}\n  ping: {{timeout: 2s}}\n  conversation: {conversation}\n"
        ),
    );
    let r = run(&lt);
    let c = only(&r);
    report("mqtt-reversed", c, &seen);
    let n = &c.measure.counts;
    assert_eq!((n.connected, n.failed_total()), (2, 0), "{n:?}");
    assert_eq!(seen.violations.load(Ordering::Relaxed), 0);
    assert_eq!(n.expected, 100, "{n:?}");
    assert_eq!(seen.publishes.load(Ordering::Relaxed), 100);
    assert_eq!(
        seen.reversed.load(Ordering::Relaxed),
        50,
        "every pair reversed"
    );
    assert_eq!((n.received, n.lost, n.mismatched), (100, 0, 0), "{n:?}");
    assert_eq!(c.measure.hists.rtt.len(), 100);
    assert!(n.unsolicited.is_empty(), "{n:?}");
}

/// One connection past 65,535 PUBLISHes, in a closed loop (each PUBLISH awaits its PUBACK)
/// and in a throughput window: the packet id wraps to 1 (never 0, which the broker refuses)
/// while the payload's `seq` goes on, and a PUBACK after the wrap still answers the latest
/// PUBLISH with its id. Before the id was unwrapped, the first PUBACK after the wrap (id 1)
/// was taken for the first PUBLISH's, long answered: mismatched, and its PUBLISH lost.
#[test]
fn packet_ids_wrap_past_65535_without_a_zero() {
    let conversation = serde_json::to_string(&preset().spec.conversation).expect("json");
    for (scenario, load) in [
        ("pingpong", "  duration: 8s\n  ping: {timeout: 2s}\n"),
        ("throughput", "  duration: 2s\n  window: 256\n"),
    ] {
        let (url, seen, _broker) = start(Acks::InOrder, Framing::PerPacket);
        let name = format!("mqtt-wrap-{scenario}");
        let lt = spec(
            &name,
            &format!(
                "  target: {{url: {url}}}\n  subprotocols: [mqtt]\n  warmup: 0s\n  scenario: {scenario}\n  connections: [1]\n{load}  conversation: {conversation}\n"
            ),
        );
        let r = run(&lt);
        let c = only(&r);
        report(&name, c, &seen);
        let n = &c.measure.counts;
        assert_eq!((n.connected, n.dropped_total()), (1, 0), "{name}: {n:?}");
        assert_eq!(
            seen.violations.load(Ordering::Relaxed),
            0,
            "{name}: no id 0"
        );
        let sent = seen.publishes.load(Ordering::Relaxed);
        assert_eq!(n.sent, sent, "{name}: {n:?}");
        assert!(
            seen.max_seq.load(Ordering::Relaxed) > 65_535,
            "{name}: {seen:?}"
        );
        assert!(n.unsolicited.is_empty(), "{name}: {n:?}");
        if scenario == "pingpong" {
            // Every PUBLISH answered and timed, the last one's PUBACK included.
            assert_eq!((n.expected, n.received), (sent, sent), "{name}: {n:?}");
            assert_eq!((n.lost, n.mismatched), (0, 0), "{name}: {n:?}");
            assert_eq!(c.measure.hists.rtt.len(), sent, "{name}");
        } else {
            // Every PUBACK read counted, all but the window's in flight at the deadline.
            assert!(
                n.received + 256 >= sent && n.received <= sent,
                "{name}: {n:?}"
            );
        }
    }
}

/// The preset's conversation in an open loop against a broker that cuts its packets as it
/// likes: all of a read's answers in one frame (a reversed pair of PUBACKs together), or a
/// byte a frame (aedes' CONNACK, and here every packet). `split: {packets: ...}` reads each
/// packet whole either way: every PUBACK times its own PUBLISH. Without the split, the
/// byte-a-frame CONNACK is never seen whole: every connection waits out its `connack` step.
#[test]
fn packets_are_read_whole_however_the_broker_frames_them() {
    let conversation = serde_json::to_value(&preset().spec.conversation).expect("json");
    let load = |url: &str, conversation: &serde_json::Value, name: &str| {
        spec(
            name,
            &format!(
                "  target: {{url: {url}}}\n  subprotocols: [mqtt]\n  warmup: 0s\n  scenario: constantRate\n  connections: [2]\n  duration: 1s\n  rate: {{messagesPerSecond: 100}}\n  ping: {{timeout: 2s}}\n  connect: {{timeout: 2s}}\n  conversation: {conversation}\n"
            ),
        )
    };
    for framing in [Framing::Packed, Framing::Bytewise] {
        let (url, seen, _broker) = start(Acks::Reversed, framing);
        let r = run(&load(&url, &conversation, "mqtt-framing"));
        let c = only(&r);
        report(&format!("mqtt-{framing:?}"), c, &seen);
        let n = &c.measure.counts;
        assert_eq!((n.connected, n.failed_total()), (2, 0), "{framing:?} {n:?}");
        assert_eq!(seen.violations.load(Ordering::Relaxed), 0);
        assert_eq!(seen.publishes.load(Ordering::Relaxed), 100, "{framing:?}");
        assert_eq!(seen.reversed.load(Ordering::Relaxed), 50, "{framing:?}");
        assert_eq!(
            (n.received, n.lost, n.mismatched),
            (100, 0, 0),
            "{framing:?} {n:?}"
        );
        assert_eq!(c.measure.hists.rtt.len(), 100);
        assert!(n.unsolicited.is_empty(), "{framing:?} {n:?}");
    }
    let mut unsplit = conversation.clone();
    unsplit
        .as_object_mut()
        .expect("a conversation")
        .remove("split")
        .expect("the preset splits");
    let (url, seen, _broker) = start(Acks::InOrder, Framing::Bytewise);
    let r = run(&load(&url, &unsplit, "mqtt-unsplit"));
    let c = only(&r);
    report("mqtt-unsplit", c, &seen);
    let n = &c.measure.counts;
    assert_eq!(seen.connects.load(Ordering::Relaxed), 2);
    assert_eq!(n.connected, 0, "{n:?}");
    assert_eq!(n.failed_total(), 2, "{n:?}");
    assert_eq!(n.expect_missed.get("connack"), Some(&2), "{n:?}");
}
