//! The connection's tests, against a loopback TCP peer playing the server.

use super::*;
use crate::frame::MAX_FRAME;
use crate::handshake::{Offer, new_key};
use crate::mask::mask;
use crate::split::Split;
use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// A server end of a loopback TCP pair, and the client `Ws` on the other.
pub(super) async fn pair(read_size: usize) -> (Ws, TcpStream) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
    (
        Ws::new(Io::Plain(c.expect("connect")), read_size),
        s.expect("accept").0,
    )
}

/// An unmasked server frame; `b0` is its first byte (FIN and opcode).
pub(super) fn server_frame(b0: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    frame::encode(&mut f, b0 & 0x80 != 0, b0 & 0x0f, payload, None);
    f
}

/// Reads one masked client frame: (first byte, unmasked payload).
pub(super) async fn client_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).await.expect("header");
    assert_eq!(h[1] & 0x80, 0x80, "client frames are masked");
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l).await.expect("len");
            usize::from(u16::from_be_bytes(l))
        }
        127 => {
            let mut l = [0u8; 8];
            s.read_exact(&mut l).await.expect("len");
            usize::try_from(u64::from_be_bytes(l)).expect("a length")
        }
        n => usize::from(n),
    };
    let mut key = [0u8; 4];
    s.read_exact(&mut key).await.expect("key");
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).await.expect("payload");
    mask(&mut p, key);
    (h[0], p)
}

#[tokio::test]
async fn frames_both_ways_with_pings_fragments_and_close() {
    use futures_util::{SinkExt, StreamExt};
    let (mut ws, mut s) = pair(1024).await;
    // Client to server: text of each length class, masked with distinct keys.
    let big = "y".repeat(300);
    ws.send(Message::Text("hi".into())).await.expect("send");
    ws.send(Message::Text(big.clone().into()))
        .await
        .expect("send");
    assert_eq!(client_frame(&mut s).await, (0x81, b"hi".to_vec()));
    assert_eq!(client_frame(&mut s).await, (0x81, big.clone().into_bytes()));

    // Server to client: two texts in one write are counted together, the one expected apart
    // from the other; then a ping
    // (answered with a pong), a fragmented binary message, and a close.
    let mut burst = server_frame(0x81, b"one");
    burst.extend(server_frame(0x81, big.as_bytes()));
    s.write_all(&burst).await.expect("write");
    let got = std::future::poll_fn(|cx| ws.poll_recv(cx, &mut |text, p| text && p == b"one")).await;
    assert!(
        matches!(
            got,
            Some(Ok(Recv::Data {
                expected: Tally {
                    frames: 1,
                    bytes: 3
                },
                text: Tally {
                    frames: 1,
                    bytes: 300
                },
                binary: Tally {
                    frames: 0,
                    bytes: 0
                },
            }))
        ),
        "{got:?}"
    );
    let mut rest = server_frame(0x89, b"pp");
    rest.extend(server_frame(0x02, b"ab"));
    rest.extend(server_frame(0x80, b"cd"));
    rest.extend(server_frame(0x88, &1001u16.to_be_bytes()));
    s.write_all(&rest).await.expect("write");
    assert_eq!(
        ws.next().await.expect("ping").expect("ok"),
        Message::Ping("pp".into())
    );
    assert_eq!(client_frame(&mut s).await, (0x8a, b"pp".to_vec()));
    assert_eq!(
        ws.next().await.expect("binary").expect("ok"),
        Message::Binary(Bytes::from_static(b"abcd"))
    );
    match ws.next().await.expect("close").expect("ok") {
        Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 1001),
        other => panic!("{other:?}"),
    }
    // The close is answered with its code; the server then ends the stream.
    assert_eq!(
        client_frame(&mut s).await,
        (0x88, 1001u16.to_be_bytes().to_vec())
    );
    drop(s);
    assert!(ws.next().await.is_none());
}

#[tokio::test]
async fn protocol_violations_fail_the_connection() {
    use futures_util::StreamExt;
    for (bytes, what) in [
        (vec![0x81, 0x82, 1, 2, 3, 4, 5, 6], "masked server frame"),
        (vec![0xC1, 0x00], "reserved bit"),
        (vec![0x83, 0x00], "unknown opcode"),
        (vec![0x80, 0x00], "continuation without a start"),
        (vec![0x81, 0x02, 0xff, 0xfe], "invalid UTF-8"),
        (vec![0x09, 0x00], "fragmented ping"),
    ] {
        let (mut ws, mut s) = pair(1024).await;
        s.write_all(&bytes).await.expect("write");
        assert!(matches!(ws.next().await, Some(Err(_))), "{what}");
        assert!(ws.next().await.is_none(), "{what}: ended");
    }
    // The stream ending without a close frame is a reset.
    let (mut ws, s) = pair(1024).await;
    drop(s);
    assert!(matches!(
        ws.next().await,
        Some(Err(WsError::Protocol(
            ProtocolError::ResetWithoutClosingHandshake
        )))
    ));
}

/// Every violation by the server is answered with a close frame carrying its status code
/// (1002, 1007 for invalid UTF-8, 1009 for a frame over the limit) before the connection
/// ends, on both read paths: messages (`next`) and counting reads (`poll_recv`).
#[tokio::test]
async fn violations_send_a_close_frame_with_their_code() {
    use futures_util::StreamExt;
    let mut too_big = vec![0x82, 127];
    too_big.extend_from_slice(&(MAX_FRAME as u64 + 1).to_be_bytes());
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (vec![0xC1, 0x00], 1002, "reserved bit"),
        (vec![0x83, 0x00], 1002, "unknown data opcode"),
        (vec![0x8B, 0x00], 1002, "unknown control opcode"),
        (vec![0x80, 0x00], 1002, "continuation without a start"),
        (vec![0x09, 0x00], 1002, "fragmented ping"),
        (server_frame(0x89, &[0u8; 126]), 1002, "ping over 125 bytes"),
        (
            [server_frame(0x01, b"a"), server_frame(0x81, b"b")].concat(),
            1002,
            "a new message inside a fragmented one",
        ),
        (vec![0x88, 0x01, 0x03], 1002, "close payload of 1 byte"),
        (
            server_frame(0x88, &999u16.to_be_bytes()),
            1002,
            "close code 999",
        ),
        (
            server_frame(0x88, &1005u16.to_be_bytes()),
            1002,
            "close code 1005",
        ),
        (
            vec![0x81, 0x82, 1, 2, 3, 4, 5, 6],
            1002,
            "masked server frame",
        ),
        (vec![0x81, 0x02, 0xff, 0xfe], 1007, "invalid UTF-8"),
        (
            [server_frame(0x01, b"ok"), server_frame(0x80, &[0xc0, 0xaf])].concat(),
            1007,
            "invalid UTF-8 across fragments",
        ),
        (
            server_frame(0x88, &[0x03, 0xe8, 0xff]),
            1007,
            "invalid UTF-8 in a close reason",
        ),
        (too_big, 1009, "frame over the limit"),
    ];
    for (bytes, code, what) in cases {
        for counting in [false, true] {
            let (mut ws, mut s) = pair(1024).await;
            s.write_all(&bytes).await.expect("write");
            let failed = if counting {
                matches!(
                    std::future::poll_fn(|cx| ws.poll_recv(cx, &mut |_, _| true)).await,
                    Some(Err(_))
                )
            } else {
                matches!(ws.next().await, Some(Err(_)))
            };
            assert!(failed, "{what} (counting: {counting})");
            let close =
                tokio::time::timeout(std::time::Duration::from_secs(5), client_frame(&mut s))
                    .await
                    .unwrap_or_else(|_| panic!("{what} (counting: {counting}): no close frame"));
            assert_eq!(
                close,
                (0x88, code.to_be_bytes().to_vec()),
                "{what} (counting: {counting})"
            );
            // The close goes out once: the connection is over.
            drop(ws);
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).await.expect("read");
            assert!(rest.is_empty(), "{what}: {rest:?}");
        }
    }
    // The transport failing is no violation of the peer's: nothing to tell it.
    let (mut ws, s) = pair(1024).await;
    drop(s);
    assert!(matches!(
        ws.next().await,
        Some(Err(WsError::Protocol(
            ProtocolError::ResetWithoutClosingHandshake
        )))
    ));
    assert!(!ws.close_sent);
}

/// A misbehaving server's 101: the handshake against a listener that answers with
/// `extra` headers; `Ok` when the response passes `verify` (no subprotocol offered).
async fn handshake_with(extra: &str) -> Result<(), HandshakeError> {
    let (addr, server) = crate::test_server::answer_101(extra).await;
    let key = new_key();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {}\r\n\r\n",
        std::str::from_utf8(&key).expect("ascii")
    );
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let mut ws = Ws::new(Io::Plain(tcp), 1024);
    let head = ws.handshake(request.as_bytes()).await;
    let _server = server.await.expect("server");
    head?
        .verify(&derive_accept_key(&key), &Offer::default())
        .map(drop)
}

#[tokio::test]
async fn a_101_with_an_extension_or_subprotocol_not_requested_fails_the_upgrade() {
    handshake_with("").await.expect("a plain 101 passes");
    for extra in [
        "Sec-WebSocket-Extensions: permessage-deflate\r\n",
        "sec-websocket-extensions: x-custom; a=1\r\n",
        "Sec-WebSocket-Protocol: chat\r\n",
    ] {
        let r = handshake_with(extra).await;
        assert!(
            matches!(r, Err(HandshakeError::Invalid(_))),
            "{extra:?}: {r:?}"
        );
    }
}

#[tokio::test]
async fn a_large_message_grows_the_read_buffer() {
    use futures_util::StreamExt;
    let (mut ws, mut s) = pair(256).await;
    let payload = vec![7u8; 200_000];
    let mut f = vec![0x82, 127];
    f.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    f.extend_from_slice(&payload);
    tokio::spawn(async move {
        s.write_all(&f).await.expect("write");
        s
    });
    assert_eq!(
        ws.next().await.expect("message").expect("ok"),
        Message::Binary(payload.into())
    );
}

/// Idle connections own no buffers: reads borrow the thread's, a frame cut by the end of
/// a read is copied out into a small buffer of the connection's own, and a connection that
/// still has a complete frame buffered keeps the thread's buffer until it takes that frame
/// while another connection reads meanwhile.
#[tokio::test]
async fn connections_take_turns_with_the_threads_buffers() {
    use futures_util::{SinkExt, StreamExt};
    use std::time::Duration;
    let (mut a, mut sa) = pair(4096).await;
    let (mut b, mut sb) = pair(4096).await;
    let idle = |ws: &Ws| ws.rd.capacity() == 0 && ws.wr.capacity() == 0 && !ws.holds_spare;

    // A sends and reads a whole message: nothing left with it.
    a.send(Message::Text("hello".into())).await.expect("send");
    assert_eq!(client_frame(&mut sa).await, (0x81, b"hello".to_vec()));
    sa.write_all(&server_frame(0x81, b"hello"))
        .await
        .expect("write");
    assert_eq!(
        a.next().await.expect("message").expect("ok"),
        Message::Text("hello".into())
    );
    assert!(idle(&a));

    // Half a frame: copied out, the rest completes it.
    let frame = server_frame(0x82, &[9u8; 100]);
    sa.write_all(&frame[..40]).await.expect("write");
    assert!(
        tokio::time::timeout(Duration::from_millis(50), a.next())
            .await
            .is_err()
    );
    assert_eq!(a.rd.len(), 40);
    assert!(!a.holds_spare && a.rd.capacity() < 4096);
    sa.write_all(&frame[40..]).await.expect("write");
    assert_eq!(
        a.next().await.expect("message").expect("ok"),
        Message::Binary(vec![9u8; 100].into())
    );
    assert!(idle(&a));

    // Two frames in one read: A keeps the buffer after the first, B reads in between.
    let mut two = server_frame(0x81, b"one");
    two.extend(server_frame(0x81, b"two"));
    sa.write_all(&two).await.expect("write");
    assert_eq!(
        a.next().await.expect("one").expect("ok"),
        Message::Text("one".into())
    );
    assert!(a.holds_spare);
    sb.write_all(&server_frame(0x81, b"bee"))
        .await
        .expect("write");
    assert_eq!(
        b.next().await.expect("bee").expect("ok"),
        Message::Text("bee".into())
    );
    assert!(idle(&b));
    assert_eq!(
        a.next().await.expect("two").expect("ok"),
        Message::Text("two".into())
    );
    assert!(idle(&a));
}

/// A server that announces a 1 GiB frame and keeps sending: the client fails the connection
/// with 1009 and lingers, so the server reads the close frame and then the end of the
/// client's writes (FIN), not a reset, even though it never stops sending.
#[tokio::test]
async fn a_failed_connection_lingers_until_its_close_frame_is_read() {
    use futures_util::StreamExt;
    let (mut ws, s) = pair(1024).await;
    let (mut rd, mut wr) = s.into_split();
    let flood = tokio::spawn(async move {
        let mut header = vec![0x82, 127];
        header.extend_from_slice(&(1u64 << 30).to_be_bytes());
        wr.write_all(&header).await.expect("header");
        let chunk = vec![0u8; 64 * 1024];
        while wr.write_all(&chunk).await.is_ok() {}
    });
    assert!(matches!(ws.next().await, Some(Err(WsError::Capacity(_)))));
    let client = tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        ws.linger(start + std::time::Duration::from_millis(500))
            .await;
        start.elapsed()
    });
    let mut h = [0u8; 2];
    rd.read_exact(&mut h).await.expect("close header");
    assert_eq!(h, [0x88, 0x82]);
    let mut rest = [0u8; 6];
    rd.read_exact(&mut rest).await.expect("key and code");
    let mut code = [rest[4], rest[5]];
    mask(&mut code, [rest[0], rest[1], rest[2], rest[3]]);
    assert_eq!(u16::from_be_bytes(code), 1009);
    // Then the end of the client's stream: a FIN, read as 0 bytes.
    let mut more = [0u8; 16];
    assert_eq!(rd.read(&mut more).await.expect("FIN, not a reset"), 0);
    // The server never stopped: the linger ended at its bound.
    let lingered = client.await.expect("client");
    assert!(
        lingered >= std::time::Duration::from_millis(400),
        "{lingered:?}"
    );
    flood.abort();
}

/// The client end of a loopback pair bounded by `limits`.
async fn limited_pair(limits: Limits) -> (Ws, TcpStream) {
    let (ws, s) = pair(1024).await;
    (Ws::with_limits(ws.into_io(), 1024, limits), s)
}

fn small_limits() -> Limits {
    Limits {
        max_message: 64 * 1024,
        max_frame: 16 * 1024,
        max_pending_write: 64 * 1024,
    }
}

/// A frame header over the connection's own frame limit fails it with 1009 at once, before
/// any payload arrives; one within it passes.
#[tokio::test]
async fn a_frame_over_the_connections_limit_is_1009() {
    use futures_util::StreamExt;
    let (mut ws, mut s) = limited_pair(small_limits()).await;
    s.write_all(&server_frame(0x82, &[7u8; 16 * 1024]))
        .await
        .expect("write");
    assert!(matches!(ws.next().await, Some(Ok(Message::Binary(b))) if b.len() == 16 * 1024));
    // Only the header of a frame one byte over: judged from it alone.
    s.write_all(&[0x82, 126, 0x40, 0x01]).await.expect("write");
    let e = ws.next().await.expect("an item").expect_err("too big");
    assert!(
        matches!(
            e,
            WsError::Capacity(CapacityError::MessageTooLong {
                size: 16385,
                max_size: 16384
            })
        ),
        "{e}"
    );
    assert_eq!(failure_code(&e), Some(1009));
    let (b0, p) = client_frame(&mut s).await;
    assert_eq!((b0, &p[..2]), (0x88, &1009u16.to_be_bytes()[..]));
}

/// A fragmented message that never sets FIN grows only to the message limit: the
/// continuation that would pass it fails the connection with 1009.
#[tokio::test]
async fn an_endless_fragmented_message_stops_at_the_message_limit() {
    use futures_util::StreamExt;
    let (mut ws, mut s) = limited_pair(small_limits()).await;
    let writer = tokio::spawn(async move {
        s.write_all(&server_frame(0x02, &[1u8; 8 * 1024])).await?;
        loop {
            s.write_all(&server_frame(0x00, &[1u8; 8 * 1024])).await?;
        }
        #[allow(unreachable_code)]
        Ok::<_, io::Error>(s)
    });
    let e = ws.next().await.expect("an item").expect_err("too big");
    assert!(
        matches!(e, WsError::Capacity(CapacityError::MessageTooLong { size, max_size: 65536 }) if size == 72 * 1024),
        "{e}"
    );
    drop(ws);
    writer.abort();
}

/// A message of our own larger than the pending-write limit, unwritten while the server is
/// slow to read, is no pile of replies: a ping then gets its pong queued behind it, and the
/// connection goes on.
#[tokio::test]
async fn our_own_message_over_the_pending_write_limit_is_not_taken_for_unread_replies() {
    use futures_util::StreamExt;
    let (mut ws, mut s) = limited_pair(small_limits()).await;
    // More than the loopback socket's buffers take while the server reads nothing.
    let big = vec![5u8; 32 << 20];
    ws.queue_data(false, &big);
    s.write_all(&server_frame(0x89, b"hi"))
        .await
        .expect("write");
    match ws.next().await {
        Some(Ok(Message::Ping(p))) => assert_eq!(&p[..], b"hi"),
        other => panic!("{other:?}"),
    }
    assert!(
        ws.queued() > 64 * 1024,
        "the message is still queued: {}",
        ws.queued()
    );
    // The server reads now: our message, then the pong.
    let reader = tokio::spawn(async move {
        let (b0, p) = client_frame(&mut s).await;
        let (b1, q) = client_frame(&mut s).await;
        (b0, p.len(), b1, q)
    });
    futures_util::future::poll_fn(|cx| ws.poll_flush_all(cx))
        .await
        .expect("flush");
    let (b0, len, b1, pong) = reader.await.expect("reader");
    assert_eq!((b0, len), (0x82, 32 << 20));
    assert_eq!((b1, &pong[..]), (0x8a, &b"hi"[..]));
}

/// A server that floods pings and reads nothing: the pongs queue until the pending-write
/// limit, then the connection fails (no close frame: the server reads nothing) instead of
/// growing its write buffer without bound.
#[tokio::test]
async fn a_ping_flood_from_a_server_that_never_reads_stops_at_the_pending_write_limit() {
    use futures_util::StreamExt;
    let (mut ws, mut s) = limited_pair(small_limits()).await;
    let ping = server_frame(0x89, &[9u8; 125]);
    let burst: Vec<u8> = ping
        .iter()
        .copied()
        .cycle()
        .take(ping.len() * 512)
        .collect();
    let writer = tokio::spawn(async move {
        loop {
            if s.write_all(&burst).await.is_err() {
                return s;
            }
        }
    });
    let mut pings = 0u64;
    let e = loop {
        match ws.next().await {
            Some(Ok(Message::Ping(_))) => pings += 1,
            Some(Ok(other)) => panic!("{other:?}"),
            Some(Err(e)) => break e,
            None => panic!("ended without an error"),
        }
    };
    assert!(matches!(e, WsError::WriteBufferFull(_)), "{e}");
    assert_eq!(failure_code(&e), None);
    // Over the limit by at most one pong (131 bytes masked), never far past it.
    assert!(
        ws.queued() > 64 * 1024 && ws.queued() <= 64 * 1024 + 131,
        "{}",
        ws.queued()
    );
    assert!(pings > 64 * 1024 / 131, "{pings} pings");
    drop(ws);
    writer.abort();
}

/// A connection told how its server packs messages hands every part on as a message of its
/// own, in order, a ping between frames in its place; a frame of another form whole; the
/// counting read counts each part, the expected ones apart. Without a split a frame is one
/// message, as always.
#[tokio::test]
async fn a_split_connection_hands_on_each_message_of_a_frame() {
    use futures_util::StreamExt;
    let (mut ws, mut s) = pair(1024).await;
    ws.split_messages(Split::Separator(Box::from(&b"\n"[..])));
    let mut burst = server_frame(0x81, b"{\"seq\":1}\n{\"seq\":2}\nping\n");
    burst.extend(server_frame(0x89, b"p"));
    burst.extend(server_frame(0x81, b"alone"));
    // A fragmented frame is split once whole.
    burst.extend(server_frame(0x01, b"x\ny"));
    burst.extend(server_frame(0x80, b"z\n"));
    s.write_all(&burst).await.expect("write");
    let mut got = Vec::new();
    for _ in 0..7 {
        got.push(ws.next().await.expect("a message").expect("ok"));
    }
    let texts: Vec<String> = got
        .iter()
        .map(|m| match m {
            Message::Text(t) => t.to_string(),
            Message::Ping(p) => format!("ping frame {:?}", &p[..]),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        texts,
        [
            "{\"seq\":1}",
            "{\"seq\":2}",
            "ping",
            "ping frame [112]",
            "alone",
            "x",
            "yz"
        ]
    );

    // The counting read: three parts of which two are expected, then one frame of one part.
    let mut burst = server_frame(0x81, b"e\nother\ne\n");
    burst.extend(server_frame(0x82, b"e"));
    s.write_all(&burst).await.expect("write");
    let mut seen = 0;
    let got = std::future::poll_fn(|cx| {
        ws.poll_recv(cx, &mut |_, p| {
            seen += 1;
            p == b"e"
        })
    })
    .await;
    let Some(Ok(Recv::Data {
        expected,
        text,
        binary,
    })) = got
    else {
        panic!("data: {got:?}");
    };
    assert_eq!((expected.frames, expected.bytes), (3, 3));
    assert_eq!((text.frames, text.bytes), (1, 5));
    assert_eq!(binary.frames, 0);
    assert_eq!(seen, 4);
}

/// SockJS' framing: `a[...]` arrays of JSON strings, each a message unescaped; `o` and `h`
/// whole; an escaped part counted unescaped by the counting read.
#[tokio::test]
async fn a_json_array_envelope_gives_its_strings_unescaped() {
    use futures_util::StreamExt;
    let (mut ws, mut s) = pair(1024).await;
    ws.split_messages(Split::JsonArray {
        prefix: Box::from(&b"a"[..]),
    });
    let mut burst = server_frame(0x81, b"o");
    burst.extend(server_frame(0x81, br#"a["{\"seq\":7}","hi"]"#));
    s.write_all(&burst).await.expect("write");
    let mut got = Vec::new();
    for _ in 0..3 {
        match ws.next().await.expect("a message").expect("ok") {
            Message::Text(t) => got.push(t.to_string()),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, ["o", "{\"seq\":7}", "hi"]);
    s.write_all(&server_frame(0x81, br#"a["{\"seq\":8}","{\"seq\":9}"]"#))
        .await
        .expect("write");
    let got =
        std::future::poll_fn(|cx| ws.poll_recv(cx, &mut |_, p| p.starts_with(b"{\"seq\":"))).await;
    let Some(Ok(Recv::Data { expected, .. })) = got else {
        panic!("data: {got:?}");
    };
    assert_eq!((expected.frames, expected.bytes), (2, 18));
}

/// MQTT over WebSocket as aedes writes it: a packet in several frames (its CONNACK a byte a
/// frame), several in one (a SUBACK and a PINGRESP), one straddling two; each packet one
/// message on the message path and one counted on the counting read, a text frame whole.
#[tokio::test]
async fn packets_are_read_whole_whatever_the_frames() {
    use futures_util::StreamExt;
    let (mut ws, mut s) = pair(1024).await;
    ws.split_messages(Split::Packets {
        at: 1,
        length: crate::Length::Varint,
    });
    let mut burst = Vec::new();
    for b in [0x20u8, 2, 0, 0] {
        burst.extend(server_frame(0x82, &[b]));
    }
    burst.extend(server_frame(0x82, &[0x90, 3, 0, 1, 0, 0xd0, 0, 0x40]));
    burst.extend(server_frame(0x82, &[2, 0, 7]));
    burst.extend(server_frame(0x81, b"not mqtt"));
    s.write_all(&burst).await.expect("write");
    let mut got = Vec::new();
    for _ in 0..5 {
        match ws.next().await.expect("a message").expect("ok") {
            Message::Binary(b) => got.push(b.to_vec()),
            Message::Text(t) => got.push(t.as_bytes().to_vec()),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        got,
        [
            vec![0x20, 2, 0, 0],
            vec![0x90, 3, 0, 1, 0],
            vec![0xd0, 0],
            vec![0x40, 2, 0, 7],
            b"not mqtt".to_vec(),
        ]
    );
    // The counting read: three PUBACKs over two frames (one cut in the middle), then one more
    // in the next read.
    s.write_all(
        &[
            server_frame(0x82, &[0x40, 2, 0, 8, 0x40, 2, 0, 9, 0x40, 2]),
            server_frame(0x82, &[0, 10]),
        ]
        .concat(),
    )
    .await
    .expect("write");
    let mut seen = Vec::new();
    let mut pubacks = 0;
    while pubacks < 3 {
        let got = std::future::poll_fn(|cx| {
            ws.poll_recv(cx, &mut |_, p| {
                seen.push(p.to_vec());
                p.starts_with(&[0x40, 2])
            })
        })
        .await;
        let Some(Ok(Recv::Data {
            expected, binary, ..
        })) = got
        else {
            panic!("data: {got:?}");
        };
        assert_eq!(binary.frames, 0);
        assert_eq!(expected.bytes, 4 * expected.frames);
        pubacks += expected.frames;
    }
    assert_eq!(pubacks, 3);
    assert_eq!(seen, [[0x40, 2, 0, 8], [0x40, 2, 0, 9], [0x40, 2, 0, 10]]);
}

/// A packet stream may carry a packet up to the message limit, no further: a length that
/// announces more fails the connection as a message too big once the carry passes the limit.
#[tokio::test]
async fn a_carried_packet_past_the_message_limit_is_too_big() {
    use futures_util::StreamExt;
    let (mut ws, mut s) = limited_pair(small_limits()).await;
    ws.split_messages(Split::Packets {
        at: 1,
        length: crate::Length::Varint,
    });
    // A PUBLISH announcing 1 MiB, sent in frames within the frame limit.
    let mut head = vec![0x30, 0x80, 0x80, 0x40];
    head.extend(vec![b'x'; 8 * 1024]);
    s.write_all(&server_frame(0x82, &head))
        .await
        .expect("write");
    for _ in 0..8 {
        s.write_all(&server_frame(0x82, &[b'x'; 8 * 1024]))
            .await
            .expect("write");
    }
    let e = ws.next().await.expect("an item").expect_err("too big");
    assert!(
        matches!(
            e,
            WsError::Capacity(CapacityError::MessageTooLong { max_size, .. }) if max_size == 64 * 1024
        ),
        "{e:?}"
    );
}

/// What a writer that stops takes back is exactly the data frames not begun: the frame being
/// written is finished and a pong queued after them still goes, so the server reads whole
/// frames, and the count taken back is what it never gets.
#[tokio::test]
async fn unwritten_data_frames_are_withdrawn_whole_and_control_frames_stay() {
    let (mut ws, mut server) = pair(1024).await;
    ws.queue_data(true, b"first");
    ws.queue_data(true, b"second");
    ws.frame(OP_PONG, b"p");
    ws.queue_data(false, &[7u8; 300]);
    // Two bytes of the first frame already out: it is begun, and stays.
    ws.wr_pos = 2;
    let queued = ws.queued();
    assert_eq!(ws.withdraw_unwritten(), (2, 6 + 300));
    assert_eq!(ws.queued(), queued - (2 + 4 + 6) - (2 + 2 + 4 + 300));
    // Nothing left to take back.
    assert_eq!(ws.withdraw_unwritten(), (0, 0));
    // The bytes "written" never reached the server here: put them back and send the rest.
    ws.wr_pos = 0;
    std::future::poll_fn(|cx| ws.poll_flush_all(cx))
        .await
        .expect("write");
    assert_eq!(client_frame(&mut server).await, (0x81, b"first".to_vec()));
    assert_eq!(client_frame(&mut server).await, (0x8A, b"p".to_vec()));
}

/// An automatic reply queued among them is not the writer's to count: nothing is taken back
/// while one waits, and once the buffer has drained the writer's own frames are again.
#[tokio::test]
async fn nothing_is_withdrawn_while_an_automatic_reply_waits() {
    let (mut ws, _server) = pair(1024).await;
    ws.queue_data(true, b"first");
    ws.queue_reply(true, b"reply");
    ws.queue_data(true, b"second");
    assert_eq!(ws.withdraw_unwritten(), (0, 0));
    std::future::poll_fn(|cx| ws.poll_flush_all(cx))
        .await
        .expect("write");
    ws.queue_data(true, b"third");
    assert_eq!(ws.withdraw_unwritten(), (1, 5));
}
