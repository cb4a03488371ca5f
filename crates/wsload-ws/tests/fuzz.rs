//! A fuzz round over the two parsers that read what a server sends: the frame decoder and the
//! HTTP response head parser. Arbitrary bytes, cut at arbitrary points, must never panic and
//! must decode the same however they are cut; valid frames and heads must come back as they
//! went in; and input cut short must ask for more, not fail.

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use wsload_ws::frame::{self, Header, OP_BINARY, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT};
use wsload_ws::handshake::{self, MAX_RESPONSE_HEAD};
use wsload_ws::mask::mask;
use wsload_ws::{HandshakeError, Offer};

/// What decoding a byte stream gave: the frames taken, the error that ended it (as text:
/// tungstenite's errors have no `PartialEq`) and the bytes not consumed (waiting for more, or
/// not fed once an error ended it).
#[derive(Debug, PartialEq)]
struct Decoded {
    frames: Vec<(Header, Bytes)>,
    error: Option<String>,
    rest: usize,
}

/// Feeds `wire` to the decoder in pieces ending at `cuts` (sorted, within `wire`), taking every
/// frame complete after each piece, as reads arrive.
fn decode_in_pieces(wire: &[u8], cuts: &[usize]) -> Decoded {
    let mut rd = BytesMut::new();
    let mut frames = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain([wire.len()].iter()) {
        rd.extend_from_slice(&wire[from..cut]);
        from = cut;
        loop {
            match frame::take(&mut rd, false, frame::MAX_FRAME) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => {
                    return Decoded {
                        frames,
                        error: Some(e.to_string()),
                        rest: rd.len() + wire.len() - from,
                    };
                }
            }
        }
    }
    Decoded {
        frames,
        error: None,
        rest: rd.len(),
    }
}

/// Cut points within `len`, sorted.
fn cuts(picks: &[Index], len: usize) -> Vec<usize> {
    let mut c: Vec<usize> = picks.iter().map(|i| i.index(len + 1)).collect();
    c.sort_unstable();
    c
}

/// A payload of `len` bytes; its content does not matter to the framing, so it is a pattern
/// (drawing 64 KiB byte by byte would make the round slow).
fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A frame a server may send: (fin, opcode, payload). Lengths cover all three length
/// classes (7-bit, 16-bit, 64-bit).
fn server_frame() -> impl Strategy<Value = (bool, u8, Vec<u8>)> {
    let data_len = prop_oneof![8 => 0usize..126, 3 => 126usize..2048, 1 => 65_530usize..65_600];
    let data = (
        any::<bool>(),
        prop_oneof![Just(OP_CONT), Just(OP_TEXT), Just(OP_BINARY)],
        data_len,
        any::<u8>(),
    )
        .prop_map(|(fin, op, len, seed)| (fin, op, payload(len, seed)));
    let control = (
        prop_oneof![Just(OP_CLOSE), Just(OP_PING), Just(OP_PONG)],
        0usize..=125,
        any::<u8>(),
    )
        .prop_map(|(op, len, seed)| (true, op, payload(len, seed)));
    prop_oneof![3 => data, 1 => control]
}

fn encode_all(frames: &[(bool, u8, Vec<u8>)]) -> (Vec<u8>, Vec<usize>) {
    let mut wire = Vec::new();
    let mut ends = Vec::new();
    for (fin, op, p) in frames {
        frame::encode(&mut wire, *fin, *op, p, None);
        ends.push(wire.len());
    }
    (wire, ends)
}

/// 256 cases a property (about a second in all, debug build); a failure prints its input
/// rather than saving it beside the sources.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary bytes (some starting like frames) never panic the decoder, and decode the same
    /// whole as in pieces.
    #[test]
    fn arbitrary_bytes_decode_alike_however_cut(
        prefix in prop::option::of(server_frame()),
        junk in vec(any::<u8>(), 0..200),
        picks in vec(any::<Index>(), 0..8),
    ) {
        let mut wire = prefix.map(|f| encode_all(&[f]).0).unwrap_or_default();
        wire.extend_from_slice(&junk);
        let whole = decode_in_pieces(&wire, &[]);
        let pieces = decode_in_pieces(&wire, &cuts(&picks, wire.len()));
        prop_assert_eq!(&whole, &pieces);
        // The pure helpers take anything too.
        let _ = frame::parse_header(&wire);
        let _ = frame::is_complete(&wire);
        if let Some(h) = frame::parse_header(&wire) {
            prop_assert!(h.header_len <= frame::MAX_HEADER && h.header_len <= wire.len());
        }
    }

    /// Valid server frames, encoded and cut anywhere, come back as they went in, and nothing
    /// is left over.
    #[test]
    fn server_frames_round_trip_however_cut(
        frames in vec(server_frame(), 1..6),
        picks in vec(any::<Index>(), 0..8),
    ) {
        let (wire, _) = encode_all(&frames);
        let got = decode_in_pieces(&wire, &cuts(&picks, wire.len()));
        prop_assert_eq!(got.error, None);
        prop_assert_eq!(got.rest, 0);
        prop_assert_eq!(got.frames.len(), frames.len());
        for ((h, p), (fin, op, want)) in got.frames.iter().zip(&frames) {
            prop_assert_eq!((h.fin, h.opcode, h.key), (*fin, *op, None));
            prop_assert_eq!(&p[..], &want[..]);
        }
    }

    /// Input cut short asks for more: the frames wholly before the cut, no error, and the
    /// incomplete one kept in the buffer.
    #[test]
    fn truncated_frames_ask_for_more(
        frames in vec(server_frame(), 1..4),
        at in any::<Index>(),
    ) {
        let (wire, ends) = encode_all(&frames);
        let cut = at.index(wire.len());
        let got = decode_in_pieces(&wire[..cut], &[]);
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        prop_assert_eq!(got.error, None);
        prop_assert_eq!(got.frames.len(), whole);
        prop_assert_eq!(got.rest, cut - ends[..whole].last().copied().unwrap_or(0));
        prop_assert!(!frame::is_complete(&wire[cut - got.rest..cut]));
    }

    /// A client's frames (masked with a random key) parse back to their header and, unmasked,
    /// their payload; a client refuses a masked frame from a server.
    #[test]
    fn client_frames_round_trip(
        (fin, op, p) in server_frame(),
        key in any::<[u8; 4]>(),
    ) {
        let mut wire = Vec::new();
        frame::encode(&mut wire, fin, op, &p, Some(key));
        let h = frame::parse_header(&wire).expect("complete");
        prop_assert_eq!((h.fin, h.opcode, h.key), (fin, op, Some(key)));
        prop_assert_eq!(h.header_len + p.len(), wire.len());
        let mut body = wire[h.header_len..].to_vec();
        mask(&mut body, key);
        prop_assert_eq!(body, p);
        prop_assert!(frame::decode_header(&wire, false, frame::MAX_FRAME).is_err());
    }

    /// The word-at-a-time mask is the RFC's byte-wise XOR, at any length and alignment.
    #[test]
    fn masking_is_the_bytewise_xor(data in vec(any::<u8>(), 0..100), start in 0usize..8, key in any::<[u8; 4]>()) {
        let start = start.min(data.len());
        let mut fast = data.clone();
        mask(&mut fast[start..], key);
        let slow: Vec<u8> = data
            .iter()
            .enumerate()
            .map(|(i, b)| if i < start { *b } else { b ^ key[(i - start) % 4] })
            .collect();
        prop_assert_eq!(fast, slow);
    }
}

/// What taking a head off a byte stream gave: the status, or the error (as text), or
/// nothing yet; and the bytes not consumed (left in the buffer or not fed yet).
fn head_in_pieces(wire: &[u8], cuts: &[usize]) -> (Result<Option<u16>, String>, usize) {
    let mut rd = BytesMut::new();
    let mut from = 0;
    for &cut in cuts.iter().chain([wire.len()].iter()) {
        rd.extend_from_slice(&wire[from..cut]);
        from = cut;
        match handshake::take_head(&mut rd) {
            Ok(None) => {}
            Ok(Some(h)) => return (Ok(Some(h.status)), rd.len() + wire.len() - from),
            Err(e) => return (Err(e.to_string()), rd.len() + wire.len() - from),
        }
    }
    (Ok(None), rd.len())
}

/// `name` with each letter's case flipped where `flips` has a bit set: header names are
/// case-insensitive.
fn recase(name: &str, flips: u64) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if flips >> (i % 64) & 1 == 1 {
                if c.is_ascii_uppercase() {
                    c.to_ascii_lowercase()
                } else {
                    c.to_ascii_uppercase()
                }
            } else {
                c
            }
        })
        .collect()
}

/// A header the handshake does not look at.
fn other_header() -> impl Strategy<Value = String> {
    ("[A-Za-z][A-Za-z0-9-]{0,15}", "[ -~]{0,40}")
        .prop_filter("not a header the handshake checks", |(n, _)| {
            let n = n.to_ascii_lowercase();
            !(n == "upgrade" || n == "connection" || n.starts_with("sec-websocket"))
        })
        .prop_map(|(n, v)| format!("{n}:{v}"))
}

/// A server's 101 with the required headers in any order and case, among others, followed by
/// the first frame's bytes: (the response, the head's length, the accept value).
fn response_101() -> impl Strategy<Value = (Vec<u8>, usize, String)> {
    (
        "[A-Za-z0-9+/]{27}=",
        any::<[u64; 3]>(),
        " {0,2}",
        vec(other_header(), 0..5),
        any::<Index>(),
        any::<Index>(),
        any::<Index>(),
        vec(any::<u8>(), 0..20),
    )
        .prop_map(|(accept, flips, pad, others, i, j, k, after)| {
            let mut headers = others;
            headers.insert(
                i.index(headers.len() + 1),
                format!("{}:{pad}websocket", recase("Upgrade", flips[0])),
            );
            headers.insert(
                j.index(headers.len() + 1),
                format!(
                    "{}:{pad}keep-alive, Upgrade{pad}",
                    recase("Connection", flips[1])
                ),
            );
            headers.insert(
                k.index(headers.len() + 1),
                format!("{}: {accept}", recase("Sec-WebSocket-Accept", flips[2])),
            );
            let mut wire = format!(
                "HTTP/1.1 101 Switching Protocols\r\n{}\r\n\r\n",
                headers.join("\r\n")
            )
            .into_bytes();
            let head_len = wire.len();
            wire.extend_from_slice(&after);
            (wire, head_len, accept)
        })
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary bytes never panic the head parser, and parse the same whole as in pieces;
    /// without the head's end it asks for more.
    #[test]
    fn arbitrary_heads_parse_alike_however_cut(
        start in prop_oneof![Just(""), Just("HTTP/1.1 "), Just("HTTP/1.0 101 OK\r\n")],
        junk in vec(prop_oneof![4 => any::<u8>(), 1 => Just(b'\r'), 1 => Just(b'\n'), 1 => Just(b':')], 0..200),
        picks in vec(any::<Index>(), 0..8),
    ) {
        let mut wire = start.as_bytes().to_vec();
        wire.extend_from_slice(&junk);
        let whole = head_in_pieces(&wire, &[]);
        prop_assert_eq!(&whole, &head_in_pieces(&wire, &cuts(&picks, wire.len())));
        if handshake::find_head_end(&wire).is_none() {
            prop_assert_eq!(whole, (Ok(None), wire.len()));
        }
    }

    /// A 101 with the right headers, in any order and case among others, parses and passes
    /// the checks, however it is cut; the bytes after it stay for the frames; cut short of its
    /// end, it asks for more.
    #[test]
    fn a_valid_101_parses_however_cut(
        (wire, head_len, accept) in response_101(),
        picks in vec(any::<Index>(), 0..8),
        short in any::<Index>(),
    ) {
        let mut rd = BytesMut::from(&wire[..]);
        let head = handshake::take_head(&mut rd).expect("parses").expect("complete");
        prop_assert_eq!(head.status, 101);
        prop_assert!(head.verify(&accept, &Offer::default()).is_ok(), "{:?}", head.verify(&accept, &Offer::default()));
        prop_assert_eq!(&rd[..], &wire[head_len..]);
        prop_assert_eq!(
            head_in_pieces(&wire, &cuts(&picks, wire.len())),
            (Ok(Some(101)), wire.len() - head_len)
        );
        let cut = short.index(head_len);
        prop_assert_eq!(head_in_pieces(&wire[..cut], &[]), (Ok(None), cut));
    }

    /// Any other status parses and fails the checks with that status.
    #[test]
    fn other_statuses_are_refused_with_their_code(status in 100u16..600, reason_sent in "[A-Za-z ]{0,20}") {
        prop_assume!(status != 101);
        let wire = format!("HTTP/1.1 {status} {reason_sent}\r\ncontent-length: 0\r\n\r\n");
        let head = handshake::parse_head(wire.as_bytes()).expect("parses");
        let refused = matches!(
            head.verify("x", &Offer::default()),
            Err(HandshakeError::Status { status: s, ref reason, .. }) if s == status && reason == reason_sent.trim()
        );
        prop_assert!(refused);
    }
}

/// A response that never ends its head is refused once it passes the limit, not buffered
/// without end.
#[test]
fn an_endless_head_is_malformed() {
    let mut rd = BytesMut::from(&b"HTTP/1.1 101 OK\r\n"[..]);
    rd.extend_from_slice(&vec![b'x'; MAX_RESPONSE_HEAD]);
    assert!(matches!(
        handshake::take_head(&mut rd),
        Err(HandshakeError::Malformed(_))
    ));
}
