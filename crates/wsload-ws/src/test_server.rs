//! A one-connection server for tests that answers the upgrade with a 101 carrying `extra`
//! headers (each ending in CRLF): what a misbehaving server sends; and the pieces of a
//! hand-made upgrade for other tests' hostile servers. This crate's tests use it, and other
//! crates' with the `test-server` feature.

use crate::handshake::find_head_end;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// Its address, and the task that yields the connection once answered.
pub async fn answer_101(extra: &str) -> (SocketAddr, JoinHandle<TcpStream>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let extra = extra.to_string();
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.expect("accept");
        let mut req = Vec::new();
        while find_head_end(&req).is_none() {
            let mut b = [0u8; 512];
            let n = s.read(&mut b).await.expect("read");
            assert!(n > 0, "request incomplete");
            req.extend_from_slice(&b[..n]);
        }
        let accept = accept_for(&req).expect("a Sec-WebSocket-Key");
        let resp = response_101(&accept, &extra);
        s.write_all(resp.as_bytes()).await.expect("write");
        s
    });
    (addr, server)
}

/// The `Sec-WebSocket-Accept` the upgrade request `head` asks for (the key's answer, by
/// tungstenite's derivation, not this crate's); `None` without a key.
pub fn accept_for(head: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(head);
    let key = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("sec-websocket-key")
            .then(|| v.trim().to_string())
    })?;
    Some(derive_accept_key(key.as_bytes()))
}

/// A valid 101 answering with `accept`, plus `extra` headers (each ending in CRLF).
pub fn response_101(accept: &str, extra: &str) -> String {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n{extra}\r\n"
    )
}

/// Reads an upgrade request off `s` and answers it with a plain 101: the start of a hand-made
/// server's connection. `None` if the client went away first or sent no key.
pub async fn upgrade(s: &mut TcpStream) -> Option<()> {
    let mut req = Vec::new();
    while find_head_end(&req).is_none() {
        let mut b = [0u8; 1024];
        let n = s.read(&mut b).await.ok()?;
        if n == 0 {
            return None;
        }
        req.extend_from_slice(&b[..n]);
    }
    let resp = response_101(&accept_for(&req)?, "");
    s.write_all(resp.as_bytes()).await.ok()
}

/// A server's frame of `opcode` (unmasked, FIN set), as it goes on the wire.
pub fn server_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    crate::frame::encode(&mut f, true, opcode, payload, None);
    f
}

/// Takes the client's complete frames off `buf`: (opcode, unmasked payload).
pub fn client_frames(buf: &mut Vec<u8>) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(h) = crate::frame::parse_header(buf)
        && buf.len() - h.header_len >= h.payload_len as usize
    {
        let end = h.header_len + h.payload_len as usize;
        let mut payload = buf[h.header_len..end].to_vec();
        crate::mask::mask(&mut payload, h.key.expect("client frames are masked"));
        out.push((h.opcode, payload));
        buf.drain(..end);
    }
    out
}
