//! permessage-deflate's negotiation and codec, against RFC 7692's own examples.

use super::*;

fn params(takeover: bool) -> DeflateParams {
    DeflateParams {
        server_max_window_bits: 15,
        client_max_window_bits: 15,
        server_no_context_takeover: !takeover,
        client_no_context_takeover: !takeover,
    }
}

fn compress(d: &mut Deflate, payload: &[u8]) -> Vec<u8> {
    d.with_compressed(payload, |c| c.expect("compressed").to_vec())
}

fn inflate(d: &mut Deflate, compressed: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match d.inflate(compressed, &mut out, 1 << 20).expect("inflates") {
        Inflated::Done => out,
        Inflated::TooBig(n) => panic!("too big: {n}"),
    }
}

/// RFC 7692 7.2.3.1 and 7.2.3.2: "Hello" compressed, then again sharing the window.
#[test]
fn the_rfc_examples_inflate() {
    let mut d = Deflate::new(params(true));
    assert_eq!(
        inflate(&mut d, &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00]),
        b"Hello"
    );
    assert_eq!(inflate(&mut d, &[0xf2, 0x00, 0x11, 0x00, 0x00]), b"Hello");
    // Without the first message's window, the second is a reference to nothing.
    let mut fresh = Deflate::new(params(true));
    assert!(
        fresh
            .inflate(&[0xf2, 0x00, 0x11, 0x00, 0x00], &mut Vec::new(), 1 << 20)
            .is_err()
    );
}

#[test]
fn a_message_round_trips_and_loses_its_tail() {
    let json = br#"{"type":"echo","seq":1,"sent":1700000000000,"payload":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#;
    for takeover in [true, false] {
        let (mut client, mut server) = (
            Deflate::new(params(takeover)),
            Deflate::new(params(takeover)),
        );
        let c = compress(&mut client, json);
        assert!(c.len() < json.len(), "{} >= {}", c.len(), json.len());
        assert!(!c.ends_with(&TAIL));
        assert_eq!(inflate(&mut server, &c), json);
    }
    // An empty message is the single byte RFC 7692 7.2.3.6 allows.
    let mut d = Deflate::new(params(true));
    let empty = compress(&mut d, b"");
    assert_eq!(inflate(&mut Deflate::new(params(true)), &empty), b"");
    assert!(empty.len() <= 2, "{empty:?}");
}

/// With context takeover the second copy of a message is a back-reference (a few bytes) and
/// needs the first to inflate; without, each message stands alone, the same size each time.
#[test]
fn the_context_is_kept_or_reset_as_agreed() {
    let msg =
        br#"{"jsonrpc":"2.0","method":"subscribe","params":{"channel":"ticker.BTC-USD"},"id":7}"#;
    let mut kept = Deflate::new(params(true));
    let (a, b) = (compress(&mut kept, msg), compress(&mut kept, msg));
    assert!(b.len() < a.len() / 2, "{} vs {}", b.len(), a.len());
    let mut peer = Deflate::new(params(true));
    assert_eq!(inflate(&mut peer, &a), msg);
    assert_eq!(inflate(&mut peer, &b), msg);

    let mut reset = Deflate::new(params(false));
    let (a, b) = (compress(&mut reset, msg), compress(&mut reset, msg));
    assert_eq!(a, b);
    // Each inflates on its own: the receiving side resets too.
    let mut peer = Deflate::new(params(false));
    assert_eq!(inflate(&mut peer, &b), msg);
    assert_eq!(inflate(&mut peer, &a), msg);
    // No state of the connection's own: the thread's was used.
    assert!(reset.compress.is_none() && peer.decompress.is_none());
    assert!(kept.compress.is_some());
}

/// A small window is honoured: random bytes repeated 1000 bytes later are out of a 512-byte
/// window's reach, so a 2^15 window compresses the repeats away and 2^9 cannot (inflate
/// resolves long references within one message's output, so it would not tell).
#[test]
fn the_client_window_is_honoured() {
    let small = DeflateParams {
        server_max_window_bits: 9,
        client_max_window_bits: 9,
        server_no_context_takeover: false,
        client_no_context_takeover: false,
    };
    let mut x = 12345u32;
    let block: Vec<u8> = (0..1000)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect();
    let text = block.repeat(4);
    let wide = compress(&mut Deflate::new(params(true)), &text);
    let narrow = compress(&mut Deflate::new(small), &text);
    assert!(wide.len() < 1200, "{}", wide.len());
    assert!(narrow.len() > 3900, "{}", narrow.len());
    assert_eq!(inflate(&mut Deflate::new(small), &narrow), text);
    // A server-imposed 256-byte window: zlib cannot, so messages go uncompressed.
    let mut tiny = Deflate::new(DeflateParams {
        client_max_window_bits: 8,
        ..small
    });
    assert!(tiny.with_compressed(&text, |c| c.is_none()));
}

/// 64 MiB of zeros compress to ~64 KiB; inflated under a 1 MiB limit, the output stops just
/// past it, and the buffer never grew much beyond.
#[test]
fn a_bomb_is_stopped_at_the_limit() {
    let zeros = vec![0u8; 64 << 20];
    let bomb = compress(&mut Deflate::new(params(true)), &zeros);
    assert!(bomb.len() < 128 * 1024, "{}", bomb.len());
    let max = 1 << 20;
    let mut out = Vec::new();
    let r = Deflate::new(params(true))
        .inflate(&bomb, &mut out, max)
        .expect("inflates");
    let Inflated::TooBig(size) = r else {
        panic!("{r:?}");
    };
    assert!(size > max && size <= max + INFLATE_STEP, "{size}");
    assert!(
        out.capacity() <= max + 2 * INFLATE_STEP,
        "{}",
        out.capacity()
    );
}

#[test]
fn garbage_does_not_inflate() {
    let mut out = Vec::new();
    let r = Deflate::new(params(true)).inflate(&[0xff, 0xff, 0xff, 0xff], &mut out, 1 << 20);
    assert!(r.is_err(), "{r:?}");
}

#[test]
fn the_offer_is_written_as_browsers_write_it() {
    assert_eq!(
        DeflateOffer::default().header_value(),
        "permessage-deflate; client_max_window_bits"
    );
    let all = DeflateOffer {
        server_max_window_bits: Some(10),
        client_max_window_bits: Some(12),
        server_no_context_takeover: true,
        client_no_context_takeover: true,
    };
    assert_eq!(
        all.header_value(),
        "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=12"
    );
}

#[test]
fn accepted_responses_give_the_parameters() {
    let offer = DeflateOffer {
        server_max_window_bits: Some(12),
        ..DeflateOffer::default()
    };
    assert_eq!(negotiate(Some(&offer), None).expect("declined"), None);
    assert_eq!(
        negotiate(
            Some(&offer),
            Some("permessage-deflate; server_max_window_bits=\"10\"; client_max_window_bits=11; server_no_context_takeover")
        )
        .expect("valid"),
        Some(DeflateParams {
            server_max_window_bits: 10,
            client_max_window_bits: 11,
            server_no_context_takeover: true,
            client_no_context_takeover: false,
        })
    );
    // The server may reset the client's context unasked (RFC 7692 7.1.1.2).
    let p = negotiate(
        Some(&DeflateOffer::default()),
        Some("Permessage-Deflate;client_no_context_takeover"),
    )
    .expect("valid")
    .expect("accepted");
    assert!(p.client_no_context_takeover);
    assert_eq!(
        (p.server_max_window_bits, p.client_max_window_bits),
        (15, 15)
    );
}

/// Each response the client must refuse, with the exact evidence it gives.
#[test]
fn bad_responses_are_refused_naming_the_fault() {
    let offer = DeflateOffer {
        server_max_window_bits: Some(10),
        client_max_window_bits: Some(12),
        ..DeflateOffer::default()
    };
    let base = "permessage-deflate; server_max_window_bits=10";
    let param = ExtensionFault::Param;
    let cases = [
        (
            "x-webkit-deflate-frame".to_string(),
            ExtensionFault::NotOffered {
                name: "x-webkit-deflate-frame".into(),
            },
            "\"x-webkit-deflate-frame\" not offered",
        ),
        (
            format!("{base}, {base}"),
            ExtensionFault::Twice,
            "permessage-deflate twice",
        ),
        (
            format!("{base}; mode=fast"),
            param(ParamFault::Unknown {
                name: "mode".into(),
            }),
            "unknown parameter \"mode\"",
        ),
        (
            "permessage-deflate; server_max_window_bits=12".to_string(),
            param(ParamFault::ServerWindowTooLarge {
                bits: 12,
                asked: 10,
            }),
            "server_max_window_bits=12, larger than the 10 asked for",
        ),
        (
            "permessage-deflate".to_string(),
            param(ParamFault::NoServerWindow { asked: 10 }),
            "no server_max_window_bits, 10 asked for",
        ),
        (
            format!("{base}; client_max_window_bits=13"),
            param(ParamFault::ClientWindowTooLarge {
                bits: 13,
                offered: 12,
            }),
            "client_max_window_bits=13, larger than the 12 offered",
        ),
        (
            format!("{base}; client_max_window_bits=7"),
            param(ParamFault::BadWindow {
                param: DeflateParam::ClientMaxWindowBits,
                value: "7".into(),
            }),
            "client_max_window_bits=\"7\", not 8-15",
        ),
        (
            "permessage-deflate; server_max_window_bits=+9".to_string(),
            param(ParamFault::BadWindow {
                param: DeflateParam::ServerMaxWindowBits,
                value: "+9".into(),
            }),
            "server_max_window_bits=\"+9\", not 8-15",
        ),
        (
            format!("{base}; server_no_context_takeover; server_no_context_takeover"),
            param(ParamFault::Repeated(DeflateParam::ServerNoContextTakeover)),
            "server_no_context_takeover twice",
        ),
        (
            format!("{base}; server_no_context_takeover=1"),
            param(ParamFault::Valued(DeflateParam::ServerNoContextTakeover)),
            "server_no_context_takeover takes no value",
        ),
        (
            "permessage-deflate; server_max_window_bits".to_string(),
            param(ParamFault::NoValue(DeflateParam::ServerMaxWindowBits)),
            "server_max_window_bits without a value",
        ),
    ];
    for (header, fault, why) in cases {
        let e = negotiate(Some(&offer), Some(&header)).expect_err(&header);
        assert_eq!(
            e.to_string(),
            format!("upgrade: Sec-WebSocket-Extensions: {header:?} ({why})")
        );
        match e {
            HandshakeError::Invalid(InvalidUpgrade::Extensions {
                header: h,
                fault: f,
            }) => {
                assert_eq!((h, f), (header, fault));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        negotiate(None, Some("permessage-deflate"))
            .expect_err("not offered")
            .to_string(),
        "upgrade: Sec-WebSocket-Extensions: \"permessage-deflate\" (none requested)"
    );
}
