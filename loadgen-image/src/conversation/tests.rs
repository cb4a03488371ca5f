//! The conversation compiled, rendered and recognised, end to end.

use super::out::decimal_len;
use super::*;
use bytes::{Bytes, BytesMut};
use wsload_spec::LoadTest;
use wsload_spec::json_path::Memo;
use wsload_spec::{Format, Protocol, builtin};

fn script(conversation: &str) -> Script {
    let yaml = format!(
        "  target: {{url: 'ws://127.0.0.1:1/'}}\n  scenario: pingpong\n  conversation:\n{conversation}"
    );
    let lt = LoadTest::from_spec_yaml(&yaml, "t").expect("valid");
    Script::compile(lt.spec.conversation.as_ref().expect("conversation")).expect("compiles")
}

fn text(b: &Bytes) -> &str {
    std::str::from_utf8(b).expect("utf8")
}

#[test]
fn a_message_writes_only_its_placeholders_and_pads_to_size() {
    let s = script(
        "    message:\n      text: '{\"id\":${seq},\"c\":${conn},\"p\":\"${pad}\"}'\n      answer: {id: {json: id}}\n",
    );
    let out = s.shared_message().expect("shared: no variables");
    let mut arena = BytesMut::new();
    let fill = Fill {
        conn: 7,
        seq: 12,
        size: 40,
    };
    let a = out.bytes(&mut arena, &fill);
    assert_eq!(
        text(&a),
        format!("{{\"id\":12,\"c\":7,\"p\":\"{}\"}}", "x".repeat(18))
    );
    assert_eq!(a.len(), 40);
    // The counting loop's path, into a reused vector: the same bytes.
    let mut v = b"old".to_vec();
    v.clear();
    out.write(&mut v, &fill);
    assert_eq!(&v[..], &a[..]);
    let b = out.bytes(&mut arena, &Fill { seq: 13, ..fill });
    // Cut from the same arena block: no allocation per message.
    assert_eq!(b.as_ptr() as usize - a.as_ptr() as usize, 40);
    assert_eq!(
        s.recognise(true, br#"{"id":12,"result":1}"#),
        Recognised::Id(12)
    );
    // Without answer.match, a message without the id is another message; one whose id holds
    // no whole number is an answer that cannot be read.
    assert_eq!(s.recognise(true, br#"{"result":1}"#), Recognised::No);
    assert_eq!(s.recognise(true, br#"{"id":"x1"}"#), Recognised::Unreadable);
    // Answers of one shape, read through one memo: each by the id it carries, in any form a
    // server writes a whole number in.
    let mut memo = Memo::default();
    for (answer, seen) in [
        (&br#"{"id":41,"result":1}"#[..], Recognised::Id(41)),
        (br#"{"id":42,"result":1}"#, Recognised::Id(42)),
        (br#"{"id":"43","result":1}"#, Recognised::Id(43)),
        (br#"{"id":44x,"result":1}"#, Recognised::Unreadable),
        (br#"{"id":-1,"result":1}"#, Recognised::Unreadable),
        (br#"{"id":45.0,"result":1}"#, Recognised::Id(45)),
        (br#"{"id":4.6e1,"result":1}"#, Recognised::Id(46)),
        (br#"{"id":"47.0","result":1}"#, Recognised::Id(47)),
        (br#"{"id":47.5,"result":1}"#, Recognised::Unreadable),
        (br#"{"id":1000000,"result":1}"#, Recognised::Id(1_000_000)),
    ] {
        assert_eq!(s.recognise_with(true, answer, &mut memo), seen);
    }
}

#[test]
fn an_echoed_answer_is_the_message_as_sent() {
    let s = script(
        "    message:\n      text: '{\"id\":${seq},\"ts\":${sendTime},\"h\":\"${hex:4}\",\"d\":\"${pad}\"}'\n      answer: {echoed: true}\n",
    );
    let out = s.shared_message().expect("shared");
    let fill = Fill {
        conn: 1,
        seq: 77,
        size: 64,
    };
    let sent = out.bytes(&mut BytesMut::new(), &fill);
    assert_eq!(s.recognise(true, &sent), Recognised::Id(77));
    // A literal or pad byte changed, one byte more or less, the other frame kind: not an
    // answer. (A send time's digits cannot be checked: any digits are one.)
    for i in [0, 2, sent.len() - 5, sent.len() - 1] {
        let mut changed = sent.to_vec();
        changed[i] ^= 0x01;
        assert_eq!(s.recognise(true, &changed), Recognised::No, "byte {i}");
    }
    assert_eq!(s.recognise(true, &sent[..sent.len() - 1]), Recognised::No);
    let mut longer = sent.to_vec();
    longer.push(b'}');
    assert_eq!(s.recognise(true, &longer), Recognised::No);
    assert_eq!(s.recognise(false, &sent), Recognised::No);
    // Another message of the template (other digits, a shorter pad) is one.
    let other = out.bytes(
        &mut BytesMut::new(),
        &Fill {
            seq: 123_456,
            ..fill
        },
    );
    assert_eq!(s.recognise(true, &other), Recognised::Id(123_456));
    // In MsgPack, decoded and read by the field the template writes ${seq} into.
    let mp = s.for_cell(false, Encoding::Msgpack, 64);
    let wire = mp
        .shared_message()
        .expect("shared")
        .bytes(&mut BytesMut::new(), &fill);
    assert!(wire.starts_with(b"M:"));
    assert_eq!(mp.recognise(false, &wire), Recognised::Id(77));
}

#[test]
fn captured_values_are_spliced_once_per_connection() {
    let s = script(
        "    open:\n      - {name: hello, expect: {prefix: '0'}, capture: {sid: {json: sid}}}\n    message: {text: '42[\"m\",\"${sid}\",${seq}]'}\n",
    );
    assert_eq!(s.var_count(), 1);
    assert!(s.shared_message().is_none());
    let out = s.message_for(&[Bytes::from_static(b"abc")], &None);
    assert_eq!(out.pieces.len(), 3, "{:?}", out.pieces);
    let m = out.bytes(
        &mut BytesMut::new(),
        &Fill {
            seq: 5,
            ..Fill::default()
        },
    );
    assert_eq!(text(&m), r#"42["m","abc",5]"#);
    assert!(!s.is_answered());
}

#[test]
fn replies_and_pushes_are_told_apart_from_answers() {
    let s = script(
        "    replies:\n      - {when: {equals: '2'}, send: {text: '3'}}\n    push: {prefix: '42[\"tick\"'}\n    message:\n      text: '42${seq}[\"echo\"]'\n      answer: {match: {prefix: '43'}}\n",
    );
    assert_eq!(s.incoming(true, b"2"), Incoming::Reply(0));
    assert_eq!(s.incoming(true, br#"42["tick",1]"#), Incoming::Push(0));
    assert_eq!(s.incoming(true, b"431[]"), Incoming::Other);
    assert_eq!(s.recognise(true, b"431[]"), Recognised::Next);
    assert_eq!(s.recognise(true, b"2"), Recognised::No);
    let (t, r) = s
        .reply(0, &mut BytesMut::new(), &Fill::default())
        .expect("reply");
    assert!(t);
    assert_eq!(&r[..], b"3");
}

/// Each push rule by its index, the first that matches; names kept for the cell's end. A
/// reply rule's `when` is kept as written, for a reply loop's evidence.
#[test]
fn push_rules_are_told_apart_by_index_and_named() {
    let s = script(
        "    replies:\n      - {when: {equals: '{}'}, send: {text: '{}'}}\n    pushes:\n      - {name: next, match: {json: {field: type, equals: next}}}\n      - {name: complete, match: {json: {field: type, equals: complete}}}\n    message: {text: m}\n",
    );
    assert_eq!(s.incoming(true, br#"{"type":"next"}"#), Incoming::Push(0));
    assert_eq!(
        s.incoming(true, br#"{"type":"complete"}"#),
        Incoming::Push(1)
    );
    assert_eq!(s.incoming(true, br#"{"type":"error"}"#), Incoming::Other);
    // An answer equal to what it answers: the server's `{}` is answered, never ours.
    assert_eq!(s.incoming(true, b"{}"), Incoming::Reply(0));
    assert_eq!(s.reply_when(0), r#"{"equals":"{}"}"#);
    assert_eq!(
        s.push_names().collect::<Vec<_>>(),
        [Some("next"), Some("complete")]
    );
    // `push` is one rule without a name.
    let s = script("    push: {prefix: a}\n    message: {text: m}\n");
    assert_eq!(s.incoming(true, b"ab"), Incoming::Push(0));
    assert_eq!(s.push_names().collect::<Vec<_>>(), [None]);
}

#[test]
fn random_parts_have_their_shape() {
    let s = script("    message: {text: '${uuid} ${hex:20} ${random} ${sendTime}'}\n");
    let out = s.shared_message().expect("shared");
    let m = out.bytes(&mut BytesMut::new(), &Fill::default());
    let f: Vec<&str> = text(&m).split(' ').collect();
    assert_eq!(f[0].len(), 36);
    assert_eq!(f[1].len(), 20);
    assert!(f[1].bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(f[2].parse::<u32>().is_ok());
    assert!(f[3].parse::<u64>().expect("micros") > 1_600_000_000_000_000);
    assert_eq!(
        [0, 9, 10, 99, 100, u64::MAX].map(decimal_len),
        [1, 1, 2, 2, 3, 20]
    );
    // A pad beside a random number of unknown length still fills to the size.
    let s = script("    message: {text: '${random}:${pad}', answer: {}}\n");
    let out = s.shared_message().expect("shared");
    let fill = Fill {
        size: 30,
        ..Fill::default()
    };
    assert_eq!(out.bytes(&mut BytesMut::new(), &fill).len(), 30);
}

/// An answer `answer.match` accepts whose id cannot be read is an unreadable answer, never
/// another message's (before: no answer at all, counted as nothing but unsolicited), and a
/// report can show what it carried.
#[test]
fn a_matched_answer_without_a_readable_id_is_unreadable() {
    let s = script(
        "    message:\n      text: '{\"id\":${seq},\"m\":\"sum\"}'\n      answer: {match: {prefix: '{\"result\"'}, id: {json: id}}\n",
    );
    assert_eq!(
        s.recognise(true, br#"{"result":3,"id":7.0}"#),
        Recognised::Id(7)
    );
    for unreadable in [
        &br#"{"result":3,"id":7.5}"#[..],
        br#"{"result":3,"id":null}"#,
        br#"{"result":3}"#,
    ] {
        assert_eq!(
            s.recognise(true, unreadable),
            Recognised::Unreadable,
            "{}",
            String::from_utf8_lossy(unreadable)
        );
    }
    assert_eq!(
        s.recognise(true, br#"{"error":1,"id":7.5}"#),
        Recognised::No
    );
    assert_eq!(
        s.unreadable_answer(true, br#"{"result":3,"id":7.5}"#),
        r#"7.5 (in {"result":3,"id":7.5})"#
    );
    assert_eq!(
        s.unreadable_answer(true, br#"{"result":3}"#),
        r#"no value (in {"result":3})"#
    );
    let msg = tokio_tungstenite::tungstenite::Message::Text(r#"{"result":3,"id":-7}"#.into());
    assert_eq!(
        answer::answer(answer::Asked::Script(&s), &msg),
        answer::Answer::Unreadable
    );
}

/// MQTT 3.1.1: a PUBLISH QoS 1 whose packet id is `${seq}` in 16 bits, answered by the PUBACK
/// that carries it at bytes 2..4; the broker's PINGRESP a push.
const MQTT: &str = r#"    message:
      bytes: '32 ${len:varint} (${len:u16} "t/${conn}") ${seq:u16} "{\"seq\":${seq},\"p\":\"${pad}\"}"'
      answer: {match: {bytes: '40 02'}, id: {at: 2, width: 2}}
    push: {bytes: 'd0 00'}
"#;

/// The PUBLISH `MQTT` sends for `seq` on connection 7 padded to `size`, built here by hand.
fn publish(seq: u64, size: usize) -> Vec<u8> {
    let payload_fixed = format!(r#"{{"seq":{seq},"p":""}}"#);
    let body_fixed = 2 + 3 + 2 + payload_fixed.len();
    let varint = |n: usize| {
        if n < 128 {
            vec![n as u8]
        } else {
            vec![(n & 0x7F) as u8 | 0x80, (n >> 7) as u8]
        }
    };
    // The pad that makes the whole `size`, the remaining length's own width counted.
    let mut pad = size.saturating_sub(1 + 1 + body_fixed);
    if 1 + varint(body_fixed + pad).len() + body_fixed + pad > size {
        pad = size.saturating_sub(1 + 2 + body_fixed);
    }
    let mut p = vec![0x32];
    p.extend(varint(body_fixed + pad));
    p.extend_from_slice(&[0x00, 0x03, b't', b'/', b'7']);
    p.extend_from_slice(&((seq - 1) % 65_535 + 1).to_be_bytes()[6..]);
    p.extend_from_slice(format!(r#"{{"seq":{seq},"p":"{}"}}"#, "x".repeat(pad)).as_bytes());
    p
}

#[test]
fn a_bytes_template_is_written_in_place_with_its_lengths_computed() {
    let s = script(MQTT);
    let out = s.shared_message().expect("shared: no variables");
    assert!(!out.is_text());
    let mut arena = BytesMut::new();
    let mut prebuilt = Prebuilt::default();
    // 64 bytes: a one-byte remaining length; 300: two (0xA9 0x02 = 297); `${seq}` across a
    // change of its digits' width and past the 16-bit id's wrap (65,536 is packet id 1).
    for (seq, size) in [
        (1, 64),
        (2, 64),
        (99, 64),
        (100, 300),
        (65_535, 300),
        (65_536, 300),
    ] {
        let fill = Fill { conn: 7, seq, size };
        let want = publish(seq, size);
        assert_eq!(want.len(), size, "the helper's own arithmetic");
        let made = out.bytes(&mut arena, &fill);
        assert_eq!(&made[..], &want[..], "seq {seq}, size {size}");
        let mut v = Vec::new();
        out.write(&mut v, &fill);
        assert_eq!(v, want, "seq {seq}: the write path");
        // The counting loop's path: rebuilt every time (binary numbers are not patched as
        // digits), into the same buffer.
        let made = prebuilt.make(&out, &fill, &SendTime::default());
        assert_eq!(made, &want[..], "seq {seq}: prebuilt");
        assert!(matches!(
            out.message(&mut arena, &fill),
            tokio_tungstenite::tungstenite::Message::Binary(_)
        ));
    }
    assert_eq!(&publish(100, 300)[..3], [0x32, 0xA9, 0x02]);
    // Cut from the same arena block: no allocation per message.
    let mut arena = BytesMut::new();
    let fill = Fill {
        conn: 7,
        seq: 5,
        size: 64,
    };
    let a = out.bytes(&mut arena, &fill);
    let b = out.bytes(&mut arena, &Fill { seq: 6, ..fill });
    assert_eq!(b.as_ptr() as usize - a.as_ptr() as usize, 64);
}

#[test]
fn a_puback_answers_the_publish_whose_packet_id_it_carries() {
    let s = script(MQTT);
    assert_eq!(
        s.recognise(false, &[0x40, 0x02, 0x01, 0x2C]),
        Recognised::Id(300)
    );
    // Another packet answers nothing; PINGRESP is a push.
    assert_eq!(
        s.recognise(false, &[0x90, 0x03, 0x00, 0x07, 0x01]),
        Recognised::No
    );
    // A PUBACK cut short is one the match takes without an id to read: unreadable, counted
    // and named, never taken for another packet.
    assert_eq!(
        s.recognise(false, &[0x40, 0x02, 0x01]),
        Recognised::Unreadable
    );
    assert_eq!(s.incoming(false, &[0xd0, 0x00]), Incoming::Push(0));
    assert_eq!(
        s.incoming(false, &[0x40, 0x02, 0x00, 0x01]),
        Incoming::Other
    );
    // Packet ids wrap after 65,535: an id stands for the latest message sent with it.
    assert_eq!(s.sent_seq(300, 300), Some(300));
    assert_eq!(s.sent_seq(301, 300), None, "not sent yet");
    assert_eq!(s.sent_seq(0, 300), None, "never a packet id");
    assert_eq!(s.sent_seq(1, 65_536), Some(65_536));
    assert_eq!(s.sent_seq(65_535, 65_536), Some(65_535));
    // A text template's ids do not wrap.
    let json =
        script("    message:\n      text: '{\"id\":${seq}}'\n      answer: {id: {json: id}}\n");
    assert_eq!(json.sent_seq(1, 65_536), Some(1));
    assert_eq!(json.sent_seq(65_537, 65_536), None);
}

#[test]
fn a_bytes_message_echoed_is_read_back_field_by_field() {
    let s = script(
        "    message:\n      bytes: '30 ${len:varint} ${seq:u16} \"${seq}:${pad}\"'\n      answer: {echoed: true}\n",
    );
    let out = s.shared_message().expect("shared");
    let fill = Fill {
        conn: 1,
        seq: 65_537,
        size: 200,
    };
    let sent = out.bytes(&mut BytesMut::new(), &fill);
    assert_eq!(sent.len(), 200);
    assert_eq!(
        &sent[..5],
        [0x30, 0xC5, 0x01, 0x00, 0x02],
        "197 in two bytes, then id 2"
    );
    // The decimal `${seq}` is read, whole: it has not wrapped, so ids do not.
    assert_eq!(s.recognise(false, &sent), Recognised::Id(65_537));
    assert_eq!(s.sent_seq(65_537, 65_540), Some(65_537));
    assert_eq!(
        s.recognise(true, &sent),
        Recognised::No,
        "a text frame is not its echo"
    );
    assert_eq!(s.recognise(false, &sent[..2]), Recognised::No);
    // Without the digits, the packet id is read, and it wraps.
    let s = script(
        "    message:\n      bytes: '30 ${len:varint} ${seq:u16}'\n      answer: {echoed: true}\n",
    );
    let sent = s
        .shared_message()
        .expect("shared")
        .bytes(&mut BytesMut::new(), &fill);
    assert_eq!(&sent[..], [0x30, 0x02, 0x00, 0x02]);
    assert_eq!(s.recognise(false, &sent), Recognised::Id(2));
    assert_eq!(s.sent_seq(2, 65_540), Some(65_537));
}

#[test]
fn a_binary_capture_is_spliced_as_its_bytes() {
    let s = script(
        "    open:\n      - {name: token, expect: {bytes: '20'}, capture: {t: {at: 1, width: 2}}}\n    message: {bytes: '30 ${len:u8} ${t} \"${t}\"'}\n",
    );
    let out = s.message_for(&[Bytes::from_static(&[0xFF, 0x00])], &None);
    let m = out.bytes(&mut BytesMut::new(), &Fill::default());
    assert_eq!(&m[..], [0x30, 4, 0xFF, 0x00, 0xFF, 0x00]);
}

/// [`seq_echo::SeqEcho::seq`] as the message's own echo check asks it.
fn fast_seq(out: &Out, data: &[u8]) -> Option<u64> {
    let f = out.seq_echo.as_ref().expect("read the short way");
    f.seq(data, |seq, size| {
        let mut b = Vec::new();
        let fill = Fill {
            seq,
            size,
            ..Fill::default()
        };
        out.write_at(&mut b, &fill, &SendTime::default());
        b
    })
}

#[test]
fn the_echo_messages_are_read_the_short_way_and_anything_else_is_left_to_the_walk() {
    let c = builtin::conversation(Protocol::Echo).expect("parses");
    for size in [16, 64, 1024] {
        let s = Script::compile(&c).expect("compiles").for_cell(
            false,
            Encoding::of(Format::Json, 6),
            size,
        );
        let out = s.shared_message().expect("no variables");
        for seq in [1, 9, 10, 99, 100, 12_345, 999_999_999_999] {
            let fill = Fill { conn: 1, seq, size };
            let msg = out.bytes(&mut BytesMut::new(), &fill);
            assert_eq!(fast_seq(&out, &msg), Some(seq), "{size}: {seq}");
            assert_eq!(out.echoed_seq(true, &msg), Some(Some(seq)), "{size}: {seq}");
            let mut changed = msg.to_vec();
            let last = changed.len() - 1;
            changed[last] ^= 1;
            assert_eq!(fast_seq(&out, &changed), None, "{size}: {seq} changed");
            assert_eq!(
                out.echoed_seq(true, &changed),
                None,
                "{size}: {seq} changed"
            );
        }
        // Digits with a leading zero were never sent; past 12 digits the walk reads them.
        let zero = br#"{"type":"msg","id":07,"#;
        assert_eq!(fast_seq(&out, zero), None);
        let long = 1_000_000_000_000u64;
        let fill = Fill {
            conn: 1,
            seq: long,
            size,
        };
        let msg = out.bytes(&mut BytesMut::new(), &fill);
        assert_eq!(fast_seq(&out, &msg), None);
        assert_eq!(out.echoed_seq(true, &msg), Some(Some(long)));
    }
    // The ping carries its send time too: read by the walk.
    let ping =
        Script::compile(&c)
            .expect("compiles")
            .for_cell(true, Encoding::of(Format::Json, 6), 64);
    assert!(ping.shared_message().expect("shared").seq_echo.is_none());
}

#[test]
fn a_resume_takes_open_s_variables_anew_and_knows_the_position_after_them() {
    let yaml = r#"  target: {url: 'ws://127.0.0.1:1/'}
  scenario: fanout
  reconnect: {policy: immediate}
  conversation:
    open:
      - {name: connected, expect: {prefix: '40'}, capture: {pid: {json: pid}}}
    resume:
      - {name: resume, send: {text: '40{"pid":"${pid}","offset":"${resumeFrom}"}'}}
      - {name: resumed, expect: {prefix: '40'}, capture: {pid: {json: pid}}}
    message:
      text: '42["publish",{"room":"${topic}","seq":${seq},"ts":${sendTime}}]'
    delivery:
      match: {prefix: '42'}
      sequence: {json: '1.seq'}
      resumeFrom: {json: '2'}
"#;
    let lt = LoadTest::from_spec_yaml(yaml, "t").expect("valid");
    let s =
        Script::compile(lt.spec.conversation.as_ref().expect("conversation")).expect("compiles");
    // topic, pid, resumeFrom: the resume's capture of pid is open's variable, taken anew.
    assert_eq!(s.var_count(), 3);
    assert_eq!(
        (s.var_name(1), s.resume_from.map(|i| s.var_name(i))),
        ("pid", Some("resumeFrom"))
    );
    let Action::Expect { captures, .. } = &s.resume[1].action else {
        panic!("resume[1] expects");
    };
    assert_eq!(captures.iter().map(|(v, _)| *v).collect::<Vec<_>>(), [1]);
    let rule = s.delivery().expect("a delivery rule");
    let event = br#"42["publish",{"room":"t0","seq":3,"ts":1},"KX3-7"]"#;
    assert_eq!(rule.position(event), Some(&b"KX3-7"[..]));
    assert!(rule.is_delivery(true, event));
    assert!(!rule.is_delivery(true, br#"40{"sid":"a","pid":"b"}"#));
}
