//! The conversation compiled, rendered and recognised, end to end.

use super::out::decimal_len;
use super::*;
use bytes::{Bytes, BytesMut};
use wsload_spec::LoadTest;
use wsload_spec::json_path::Memo;

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
