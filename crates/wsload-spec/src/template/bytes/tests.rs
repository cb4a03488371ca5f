//! Bytes templates parsed and rendered to the exact bytes of MQTT 3.1.1 packets, their
//! lengths computed, their numbers wrapped, and every error saying what to write.

use super::*;
use crate::template::{Template, TemplateError, Values};
use std::collections::BTreeMap;

fn render(source: &str, seq: u64, size: usize) -> Vec<u8> {
    let vars = BTreeMap::from([("sid".to_string(), vec![0xAB, 0xCD])]);
    let t = Template::parse_bytes(source, &["sid"]).expect("parses");
    t.render(&mut Values {
        conn: 7,
        seq,
        send_time_us: 1_700_000_000_000_000,
        size,
        vars: &vars,
        random: 1,
    })
}

fn error(source: &str) -> String {
    Template::parse_bytes(source, &[])
        .expect_err("refused")
        .to_string()
}

/// An MQTT string: a big-endian u16 length, then the bytes.
fn mqtt_string(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

#[test]
fn an_mqtt_connect_renders_to_its_exact_bytes() {
    let connect = render(
        r#"10 ${len:varint} 00 04 "MQTT" 04 02 00 3c (${len:u16} "wsload${conn}")"#,
        1,
        0,
    );
    let mut body = mqtt_string(b"MQTT");
    body.extend_from_slice(&[0x04, 0x02, 0x00, 0x3c]);
    body.extend(mqtt_string(b"wsload7"));
    let mut want = vec![0x10, body.len() as u8];
    want.extend(body);
    assert_eq!(connect, want);
    // Hex runs and spacing are free; upper and lower case alike.
    assert_eq!(render("c000", 1, 0), [0xc0, 0x00]);
    assert_eq!(render(" C0\n00 ", 1, 0), [0xc0, 0x00]);
}

#[test]
fn a_publish_carries_its_packet_id_in_binary_and_its_payload_as_text() {
    let t = r#"32 ${len:varint} (${len:u16} "t/${conn}") ${seq:u16} "seq=${seq}""#;
    let publish = render(t, 300, 0);
    let mut body = mqtt_string(b"t/7");
    body.extend_from_slice(&300u16.to_be_bytes());
    body.extend_from_slice(b"seq=300");
    let mut want = vec![0x32, body.len() as u8];
    want.extend(body);
    assert_eq!(publish, want);
}

#[test]
fn a_remaining_length_above_127_takes_two_varint_bytes() {
    // 2 + 3 (topic) + 2 (id) + the pad: 200 bytes of message, of which 3 are the fixed
    // header (0x32 and a 2-byte remaining length of 197).
    let publish = render(
        r#"32 ${len:varint} (${len:u16} "t/1") ${seq:u16} "${pad}""#,
        1,
        200,
    );
    assert_eq!(publish.len(), 200);
    assert_eq!(
        &publish[..3],
        [0x32, 0xC5, 0x01],
        "197 = 0x45 | 0x80, then 1"
    );
    assert_eq!(&publish[3..10], [0x00, 0x03, b't', b'/', b'1', 0x00, 0x01]);
    assert!(publish[10..].iter().all(|b| *b == b'x'));
    // At 131 bytes the pad makes the remaining length exactly 128: two bytes, 0x80 0x01.
    let p = render(r#"30 ${len:varint} "${pad}""#, 1, 131);
    assert_eq!((p.len(), &p[..3]), (131, &[0x30, 0x80, 0x01][..]));
    // At 129 a one-byte length of 127 makes it exactly.
    let p = render(r#"30 ${len:varint} "${pad}""#, 1, 129);
    assert_eq!((p.len(), &p[..2]), (129, &[0x30, 0x7F][..]));
    // 130 bytes would need a remaining length of 128 in one byte: one byte short instead,
    // never over; so for every size.
    let p = render(r#"30 ${len:varint} "${pad}""#, 1, 130);
    assert_eq!((p.len(), &p[..2]), (129, &[0x30, 0x7F][..]));
    for size in 1..300 {
        let p = render(r#"30 ${len:varint} "${pad}""#, 1, size);
        assert!(
            p.len() <= size.max(2) && p.len() + 1 >= size,
            "{size}: {}",
            p.len()
        );
    }
    // Larger ones: 16,384 takes three bytes.
    let mut b = [0; MAX_LENGTH_BYTES];
    assert_eq!(
        LengthKind::Varint.encode(16_384, &mut b),
        [0x80, 0x80, 0x01]
    );
    assert_eq!(
        LengthKind::Varint.encode(268_435_455, &mut b),
        [0xFF, 0xFF, 0xFF, 0x7F]
    );
    assert_eq!(
        LengthKind::Varint.read_width(&[0x80, 0x80, 0x01, 0x30]),
        Some(3)
    );
    assert_eq!(LengthKind::Varint.read_width(&[0x80]), None);
}

#[test]
fn lengths_count_to_the_end_of_their_group() {
    // Nested: the outer length counts the inner group whole, its length field included.
    let p = render(r#"${len:u8} AA (${len:u8} "abc" (${len:u16} BB)) CC"#, 1, 0);
    assert_eq!(
        p,
        [9, 0xAA, 6, b'a', b'b', b'c', 0x00, 0x01, 0xBB, 0xCC],
        "9 after the first length; 6 (abc, 2, BB) inside; 1 inside the innermost"
    );
    // Variables and every text placeholder counted as rendered.
    let p = render(r#"${len:u8} "${sid}" ${sid} "${hex:3}${uuid}""#, 1, 0);
    assert_eq!(p[0] as usize, p.len() - 1);
    assert_eq!(&p[1..5], [0xAB, 0xCD, 0xAB, 0xCD]);
}

#[test]
fn numbers_are_big_endian_at_their_width() {
    let p = render("${conn:u8} ${conn:u32} ${seq:u64} ${sendTime:u64}", 258, 0);
    let mut want = vec![7, 0, 0, 0, 7];
    want.extend_from_slice(&258u64.to_be_bytes());
    want.extend_from_slice(&1_700_000_000_000_000u64.to_be_bytes());
    assert_eq!(p, want);
    // Other numbers keep their low bytes; `${random:u32}` draws 4.
    assert_eq!(
        render("${sendTime:u16}", 1, 0),
        (1_700_000_000_000_000u64 as u16).to_be_bytes()
    );
    assert_eq!(render("${random:u32}", 1, 0).len(), 4);
}

#[test]
fn a_narrow_seq_wraps_to_1_and_its_answer_reads_back_the_latest() {
    let w = Width::U16;
    assert_eq!(w.cycle(), Some(65_535));
    assert_eq!(
        [1, 65_535, 65_536, 65_537, 131_070, 131_071].map(|s| w.seq(s)),
        [1, 65_535, 1, 2, 65_535, 1],
        "0 is never written"
    );
    assert_eq!(w.seq(0), 0, "no sequence stays none");
    assert_eq!(render("${seq:u16}", 65_536, 0), [0, 1]);
    assert_eq!(Width::U64.cycle(), None);
    assert_eq!(Width::U8.seq(256), 1);
    // Read back against the latest sent: exact while fewer than 65,535 are outstanding.
    let c = w.cycle();
    assert_eq!(unwrap_seq(7, 10, c), Some(7));
    assert_eq!(unwrap_seq(11, 10, c), None, "not sent yet");
    assert_eq!(unwrap_seq(0, 10, c), None, "never written");
    assert_eq!(unwrap_seq(65_536, 70_000, c), None, "wider than the field");
    assert_eq!(unwrap_seq(4_465, 70_000, c), Some(70_000));
    assert_eq!(unwrap_seq(1, 70_000, c), Some(65_536));
    assert_eq!(unwrap_seq(65_535, 70_000, c), Some(65_535));
    assert_eq!(
        unwrap_seq(4_466, 70_000, c),
        Some(4_466),
        "the one before, a cycle back"
    );
    assert_eq!(unwrap_seq(1, 0, c), None, "nothing sent");
    // Without a cycle, an id is itself if it was sent.
    assert_eq!(unwrap_seq(7, 10, None), Some(7));
    assert_eq!(unwrap_seq(11, 10, None), None);
    assert_eq!(unwrap_seq(0, 10, None), None);
}

#[test]
fn quoted_text_escapes_quotes_and_backslashes_and_keeps_placeholders() {
    assert_eq!(
        render(r#""{\"seq\":${seq},\"p\":\"a\\b\"}" "$${x}""#, 3, 0),
        br#"{"seq":3,"p":"a\b"}${x}"#
    );
    assert_eq!(render(r#""""#, 1, 0), b"");
}

#[test]
fn a_match_s_bytes_are_fixed() {
    assert_eq!(fixed("40 02"), Ok(vec![0x40, 0x02]));
    assert_eq!(fixed(r#"30 "ab""#), Ok(vec![0x30, b'a', b'b']));
    assert_eq!(fixed(" "), Err(BytesError::Empty));
    assert_eq!(fixed("${seq:u16}"), Err(BytesError::NotFixed));
    assert_eq!(fixed("(40)"), Err(BytesError::NotFixed));
    assert_eq!(fixed("4"), Err(BytesError::OddHex { at: 0 }));
}

#[test]
fn errors_say_what_to_write() {
    assert_eq!(
        error("40 zz"),
        "'z' at byte 3 is not a hex byte; write bytes as pairs of hex digits (30 0a), text in double quotes (\"topic\"), numbers as ${seq:u16}"
    );
    assert_eq!(
        error("40 023"),
        "the hex digits ending at byte 5 are odd in number; write each byte as two digits (0a, not a)"
    );
    assert!(
        error(r#"30 "abc"#).contains("not closed by \""),
        "{}",
        error(r#"30 "abc"#)
    );
    assert!(error(r#""a\nb""#).contains("only \\\" and \\\\ are escapes"));
    assert_eq!(error("(30 ${len:u8}"), "( at byte 0 is not closed by )");
    assert_eq!(error("30)"), ") at byte 2 closes no (");
    assert_eq!(error(&"(".repeat(9)), "groups nest 8 deep at most");
    assert_eq!(error(&"${len:u8}".repeat(17)), "16 length fields at most");
    assert_eq!(
        error("32 ${seq}"),
        "${seq} outside quotes needs a width: ${seq:u16} (big-endian; u8, u16, u32 or u64), or \"${seq}\" in quotes for its decimal digits"
    );
    assert!(error(r#""${seq:u16}""#).contains("put it outside the quotes"));
    assert_eq!(
        error("${seq:u24}"),
        "${seq:u24}: the width is u8, u16, u32 or u64"
    );
    assert!(error("${len:u64}").contains("a length is varint"));
    assert!(error(r#""${random}""#).contains("use ${random:u32}"));
    assert!(error("${pad} ${pad}").contains("more than once"));
    assert!(matches!(
        Template::parse_bytes("${sid}", &[]),
        Err(TemplateError::Unknown { .. })
    ));
    assert!(matches!(
        Template::parse_bytes("30 ${len", &[]),
        Err(TemplateError::Unclosed { at: 3 })
    ));
}

#[test]
fn a_length_that_does_not_fit_its_field_is_refused() {
    let t = Template::parse_bytes(r#"${len:u8} "${pad}""#, &[]).expect("parses");
    let vars = BTreeMap::new();
    let values = |size| Values {
        conn: 0,
        seq: 1,
        send_time_us: 0,
        size,
        vars: &vars,
        random: 0,
    };
    assert_eq!(t.check_lengths(&values(256)), Ok(()));
    assert_eq!(
        t.check_lengths(&values(300)).map_err(|e| e.to_string()),
        Err("a length of 299 bytes, above the 255 its field holds; write the length wider (${len:u16}, ${len:varint}) or the message shorter".into())
    );
}
