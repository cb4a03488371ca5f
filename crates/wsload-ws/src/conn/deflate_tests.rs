//! The connection with permessage-deflate agreed: messages compressed out, inflated in, on
//! both read paths, and the frames RFC 7692 forbids failing the connection.

use super::tests::{client_frame, pair, server_frame};
use super::*;
use crate::message::MAX_MESSAGE;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TAKEOVER: DeflateParams = DeflateParams {
    server_max_window_bits: 15,
    client_max_window_bits: 15,
    server_no_context_takeover: false,
    client_no_context_takeover: false,
};
/// RFC 7692 7.2.3.1 and 7.2.3.2: "Hello", then "Hello" again sharing the window.
const HELLO: [u8; 7] = [0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
const HELLO_AGAIN: [u8; 5] = [0xf2, 0x00, 0x11, 0x00, 0x00];

/// A server frame with RSV1 set.
fn compressed_frame(b0: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = server_frame(b0, payload);
    f[0] |= RSV1;
    f
}

async fn deflating_pair() -> (Ws, tokio::net::TcpStream) {
    let (mut ws, s) = pair(1024).await;
    ws.use_deflate(TAKEOVER);
    (ws, s)
}

#[tokio::test]
async fn compressed_messages_are_inflated_on_both_read_paths() {
    let (mut ws, mut s) = deflating_pair().await;
    let mut wire = compressed_frame(0x81, &HELLO);
    wire.extend(compressed_frame(0x81, &HELLO_AGAIN));
    // A compressed message in two fragments: RSV1 on the first only (the RFC's "Hello" cut).
    wire.extend(compressed_frame(0x01, &HELLO[..3]));
    wire.extend(server_frame(0x80, &HELLO[3..]));
    wire.extend(server_frame(0x81, b"plain"));
    s.write_all(&wire).await.expect("write");
    assert_eq!(
        ws.next().await.expect("one").expect("ok"),
        Message::Text("Hello".into())
    );
    // The counting path: its check sees the inflated payload.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let got = std::future::poll_fn(|cx| {
            ws.poll_recv(cx, &mut |_, p| {
                seen.push(p.to_vec());
                p == b"Hello"
            })
        })
        .await;
        assert!(matches!(got, Some(Ok(Recv::Data { .. }))), "{got:?}");
    }
    assert_eq!(seen, [&b"Hello"[..], b"Hello", b"plain"]);
}

#[tokio::test]
async fn data_messages_go_out_compressed_and_control_frames_do_not() {
    let (mut ws, mut s) = deflating_pair().await;
    let json = r#"{"type":"echo","payload":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#;
    ws.send(Message::Text(json.into())).await.expect("send");
    ws.queue_data(false, json.as_bytes());
    ws.send(Message::Ping(Bytes::from_static(b"p")))
        .await
        .expect("ping");
    let mut peer = Deflate::new(TAKEOVER);
    for b0 in [0xC1, 0xC2] {
        let (got_b0, p) = client_frame(&mut s).await;
        assert_eq!(got_b0, b0);
        assert!(p.len() < json.len(), "{}", p.len());
        let mut out = Vec::new();
        assert!(matches!(
            peer.inflate(&p, &mut out, 1 << 20),
            Ok(Inflated::Done)
        ));
        assert_eq!(out, json.as_bytes());
    }
    assert_eq!(client_frame(&mut s).await, (0x89, b"p".to_vec()));
}

/// RSV1 where RFC 7692 6.1 forbids it (a control frame, a continuation), a message that does
/// not inflate, and one that inflates past the message limit: each fails the connection with
/// its close code, on both read paths.
#[tokio::test]
async fn forbidden_or_hostile_compressed_frames_fail_the_connection() {
    let zeros = vec![0u8; MAX_MESSAGE + 1024 * 1024];
    let mut bomb = Vec::new();
    Deflate::new(TAKEOVER).with_compressed(&zeros, |c| bomb = c.expect("compressed").to_vec());
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (compressed_frame(0x89, b""), 1002, "RSV1 on a ping"),
        (
            [
                compressed_frame(0x01, &HELLO[..3]),
                compressed_frame(0x80, &HELLO[3..]),
            ]
            .concat(),
            1002,
            "RSV1 on a continuation",
        ),
        (
            compressed_frame(0x82, &[0xff, 0xff]),
            1007,
            "not deflate data",
        ),
        (compressed_frame(0x82, &bomb), 1009, "a decompression bomb"),
    ];
    for (bytes, code, what) in cases {
        for counting in [false, true] {
            let (mut ws, mut s) = deflating_pair().await;
            let bytes = bytes.clone();
            let writer = tokio::spawn(async move {
                s.write_all(&bytes).await.expect("write");
                s
            });
            let failed = if counting {
                std::future::poll_fn(|cx| ws.poll_recv(cx, &mut |_, _| true))
                    .await
                    .and_then(Result::err)
                    .map(|e| e.to_string())
            } else {
                ws.next().await.and_then(Result::err).map(|e| e.to_string())
            };
            assert!(failed.is_some(), "{what} (counting: {counting})");
            let mut s = writer.await.expect("writer");
            let close = client_frame(&mut s).await;
            assert_eq!(
                close,
                (0x88, code.to_be_bytes().to_vec()),
                "{what} (counting: {counting}): {failed:?}"
            );
            drop(ws);
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).await.expect("read");
        }
    }
}
