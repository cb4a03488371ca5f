//! The opening handshake's pieces (RFC 6455 4.1): the request's key, and the server's response
//! head read off the read buffer and checked. Sending the request and reading the response are
//! [`crate::Ws::handshake`]'s.

use crate::error::HandshakeError;
use bytes::{Buf, BytesMut};

/// The largest HTTP response head accepted.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// What the handshake checks in a 101 response.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    upgrade_websocket: bool,
    connection_upgrade: bool,
    accept: Option<String>,
    protocol: Option<String>,
    /// A `Sec-WebSocket-Extensions` header was present (the request never offers any).
    extensions: bool,
}

impl Head {
    /// RFC 6455 4.1's checks of a server's 101 (as tungstenite's client made them):
    /// `accept` is the expected `Sec-WebSocket-Accept`, `protocols` whether the request
    /// offered subprotocols.
    pub fn verify(&self, accept: &str, protocols: Option<&[String]>) -> Result<(), HandshakeError> {
        if self.status != 101 {
            return Err(HandshakeError::Status(self.status));
        }
        if !self.upgrade_websocket {
            return Err(HandshakeError::Invalid("no Upgrade: websocket"));
        }
        if !self.connection_upgrade {
            return Err(HandshakeError::Invalid("no Connection: Upgrade"));
        }
        if self.accept.as_deref() != Some(accept) {
            return Err(HandshakeError::Invalid("Sec-WebSocket-Accept mismatch"));
        }
        // RFC 6455 4.1: an extension the client did not offer fails the connection (its
        // framing would be misread: RSV bits, compressed payloads).
        if self.extensions {
            return Err(HandshakeError::Invalid("extension not requested"));
        }
        match (&self.protocol, protocols) {
            (None, None) => Ok(()),
            (Some(_), None) => Err(HandshakeError::Invalid("subprotocol not requested")),
            (Some(p), Some(offered)) if offered.iter().any(|o| o == p) => Ok(()),
            _ => Err(HandshakeError::Invalid("subprotocol mismatch")),
        }
    }
}

/// Takes the response head off the start of `rd` once it is complete; bytes after it (the
/// first frames) stay. `Ok(None)`: more bytes are needed; past [`MAX_RESPONSE_HEAD`] without
/// the head's end, the response is malformed.
pub fn take_head(rd: &mut BytesMut) -> Result<Option<Head>, HandshakeError> {
    match find_head_end(rd) {
        Some(end) => {
            let head = parse_head(&rd[..end]);
            rd.advance(end);
            head.map(Some)
        }
        None if rd.len() >= MAX_RESPONSE_HEAD => Err(HandshakeError::Malformed),
        None => Ok(None),
    }
}

/// The length of the response head (through its blank line), once complete.
pub fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// A complete response head: the status line and the headers the handshake checks.
pub fn parse_head(head: &[u8]) -> Result<Head, HandshakeError> {
    let text = std::str::from_utf8(head).map_err(|_| HandshakeError::Malformed)?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().ok_or(HandshakeError::Malformed)?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !(version == "HTTP/1.1" || version == "HTTP/1.0") {
        return Err(HandshakeError::Malformed);
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or(HandshakeError::Malformed)?;
    let mut h = Head {
        status,
        upgrade_websocket: false,
        connection_upgrade: false,
        accept: None,
        protocol: None,
        extensions: false,
    };
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once(':').ok_or(HandshakeError::Malformed)?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("upgrade") {
            h.upgrade_websocket = value.eq_ignore_ascii_case("websocket");
        } else if name.eq_ignore_ascii_case("connection") {
            h.connection_upgrade = value
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
        } else if name.eq_ignore_ascii_case("sec-websocket-accept") {
            h.accept = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("sec-websocket-protocol") {
            h.protocol = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("sec-websocket-extensions") {
            h.extensions = true;
        }
    }
    Ok(h)
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64 (24 characters).
pub fn new_key() -> [u8; 24] {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let r: [u8; 16] = rand::random();
    let mut out = [b'='; 24];
    for (i, c) in r.chunks(3).enumerate() {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = [
            B64[(n >> 18) as usize & 63],
            B64[(n >> 12) as usize & 63],
            B64[(n >> 6) as usize & 63],
            B64[n as usize & 63],
        ];
        let keep = c.len() + 1;
        out[i * 4..i * 4 + keep].copy_from_slice(&chars[..keep]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

    #[test]
    fn keys_are_base64_of_16_bytes() {
        let k = new_key();
        assert_eq!(&k[22..], b"==");
        assert!(
            k[..22]
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
        );
        assert_ne!(new_key(), k);
        // The RFC's example key and accept value.
        assert_eq!(
            derive_accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn response_heads_are_checked() {
        let ok = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        let end = find_head_end(ok).expect("complete");
        assert_eq!(end, ok.len());
        let h = parse_head(&ok[..end]).expect("parses");
        assert!(h.verify("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", None).is_ok());
        assert!(matches!(
            h.verify("other", None),
            Err(HandshakeError::Invalid(_))
        ));
        let denied =
            parse_head(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n").expect("parses");
        assert!(matches!(
            denied.verify("x", None),
            Err(HandshakeError::Status(401))
        ));
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert_eq!(
            find_head_end(b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\n"),
            None
        );
    }

    #[test]
    fn the_head_is_taken_and_the_first_frames_stay() {
        let mut rd = BytesMut::from(&b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\n"[..]);
        assert!(matches!(take_head(&mut rd), Ok(None)));
        rd.extend_from_slice(b"\r\n\x81\x02hi");
        let h = take_head(&mut rd).expect("parses").expect("complete");
        assert_eq!(h.status, 101);
        assert_eq!(&rd[..], b"\x81\x02hi");
        let mut endless = BytesMut::from(&vec![b'a'; MAX_RESPONSE_HEAD][..]);
        assert!(matches!(
            take_head(&mut endless),
            Err(HandshakeError::Malformed)
        ));
    }
}
