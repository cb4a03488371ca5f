//! The opening handshake's pieces (RFC 6455 4.1): the request's key, and the server's response
//! head read off the read buffer and checked. Sending the request and reading the response are
//! [`crate::Ws::handshake`]'s.

use crate::deflate::{self, DeflateOffer, DeflateParams};
use crate::error::{HandshakeError, HeadFault, InvalidUpgrade, NotHttp, RequiredHeader};
use bytes::{Buf, BytesMut};

// Defined here before they had a module of their own: callers keep the path.
pub use crate::excerpt::{MAX_EXCERPT, excerpt};

/// The largest HTTP response head accepted.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// What the handshake checks in a response, kept as the server sent it so that a failure can
/// say what was wrong.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    /// The status line's reason phrase (`Internal Server Error`).
    pub reason: String,
    /// The first line of the body, when the body's start arrived with the head (never waited
    /// for); `None` for a 101 (what follows it is frames).
    pub body: Option<String>,
    upgrade: Option<String>,
    connection: Option<String>,
    accept: Option<String>,
    protocol: Option<String>,
    /// The `Sec-WebSocket-Extensions` header's value, its lines joined with commas.
    extensions: Option<String>,
}

/// What the upgrade request offered beside the upgrade itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offer<'a> {
    /// `Sec-WebSocket-Protocol`'s subprotocols, if any.
    pub protocols: Option<&'a [String]>,
    /// permessage-deflate, if offered.
    pub deflate: Option<&'a DeflateOffer>,
}

/// What a valid 101 agreed to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Agreed {
    /// The subprotocol the server selected; `None` when it selected none (RFC 6455 4.1
    /// allows that even when some were offered: the caller says so).
    pub protocol: Option<String>,
    /// permessage-deflate's parameters, when the server accepted it (then
    /// [`crate::Ws::use_deflate`] them).
    pub deflate: Option<DeflateParams>,
}

impl Head {
    /// RFC 6455 4.1's checks of a server's 101 (as tungstenite's client made them), and
    /// RFC 7692's of its extensions: `accept` is the expected `Sec-WebSocket-Accept`, `offer`
    /// what the request offered. A failure names the header and what it said.
    pub fn verify(&self, accept: &str, offer: &Offer<'_>) -> Result<Agreed, HandshakeError> {
        if self.status != 101 {
            return Err(HandshakeError::Status {
                status: self.status,
                reason: self.reason.clone(),
                body: self.body.clone(),
            });
        }
        required(&self.upgrade, RequiredHeader::Upgrade, "websocket", |v| {
            v.eq_ignore_ascii_case("websocket")
        })?;
        required(
            &self.connection,
            RequiredHeader::Connection,
            "Upgrade",
            |v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            },
        )?;
        required(
            &self.accept,
            RequiredHeader::SecWebSocketAccept,
            accept,
            |v| v == accept,
        )?;
        // RFC 6455 4.1: an extension the client did not offer fails the connection (its
        // framing would be misread: RSV bits, compressed payloads).
        let deflate = deflate::negotiate(offer.deflate, self.extensions.as_deref())?;
        let protocol = match (&self.protocol, offer.protocols) {
            (None, _) => None,
            (Some(p), None) => {
                return Err(InvalidUpgrade::ProtocolNotRequested {
                    selected: excerpt(p),
                }
                .into());
            }
            (Some(p), Some(offered)) if offered.iter().any(|o| o == p) => Some(p.clone()),
            (Some(p), Some(offered)) => {
                return Err(InvalidUpgrade::ProtocolNotOffered {
                    selected: excerpt(p),
                    offered: excerpt(&offered.join(", ")),
                }
                .into());
            }
        };
        Ok(Agreed { protocol, deflate })
    }
}

/// `header`, which a 101 must carry with a value `ok` takes: missing, or what it said against
/// what was `expected`.
fn required(
    value: &Option<String>,
    header: RequiredHeader,
    expected: &str,
    ok: impl Fn(&str) -> bool,
) -> Result<(), InvalidUpgrade> {
    match value {
        None => Err(InvalidUpgrade::Missing(header)),
        Some(v) if !ok(v) => Err(InvalidUpgrade::Wrong {
            header,
            value: excerpt(v),
            expected: expected.into(),
        }),
        Some(_) => Ok(()),
    }
}

/// The first non-empty line of what arrived of a body, as text, bounded.
fn first_line(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(&body[..body.len().min(4 * MAX_EXCERPT)]);
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(excerpt)
}

/// Takes the response head off the start of `rd` once it is complete; bytes after it (the
/// first frames) stay. `Ok(None)`: more bytes are needed; past [`MAX_RESPONSE_HEAD`] without
/// the head's end, the response is malformed.
pub fn take_head(rd: &mut BytesMut) -> Result<Option<Head>, HandshakeError> {
    match find_head_end(rd) {
        Some(end) => {
            let head = parse_head(&rd[..end]);
            rd.advance(end);
            let mut head = head?;
            if head.status != 101 {
                head.body = first_line(rd);
            }
            Ok(Some(head))
        }
        None if rd.len() >= MAX_RESPONSE_HEAD => Err(malformed(HeadFault::TooLong, rd)),
        None => Ok(None),
    }
}

/// The response is not HTTP, for `fault`: the first line of `b` is the evidence.
fn malformed(fault: HeadFault, b: &[u8]) -> HandshakeError {
    NotHttp {
        fault,
        line: first_line(b).unwrap_or_default(),
    }
    .into()
}

/// The length of the response head (through its blank line), once complete.
pub fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// A complete response head: the status line and the headers the handshake checks.
pub fn parse_head(head: &[u8]) -> Result<Head, HandshakeError> {
    let text = std::str::from_utf8(head).map_err(|_| malformed(HeadFault::NotText, head))?;
    let bad_status = || malformed(HeadFault::StatusLine, head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().ok_or_else(bad_status)?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !(version == "HTTP/1.1" || version == "HTTP/1.0") {
        return Err(bad_status());
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad_status)?;
    let mut h = Head {
        status,
        reason: excerpt(parts.next().unwrap_or_default().trim()),
        body: None,
        upgrade: None,
        connection: None,
        accept: None,
        protocol: None,
        extensions: None,
    };
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| malformed(HeadFault::HeaderLine, line.as_bytes()))?;
        let value = Some(value.trim().to_string());
        // Repeated lines of a list header are one list (RFC 9110 5.3): two lines of
        // extensions or subprotocols are judged together.
        let listed = |h: &mut Option<String>, v: Option<String>| {
            *h = match (h.take(), v) {
                (Some(a), Some(b)) => Some(format!("{a}, {b}")),
                (a, b) => b.or(a),
            }
        };
        if name.eq_ignore_ascii_case("upgrade") {
            h.upgrade = value;
        } else if name.eq_ignore_ascii_case("connection") {
            h.connection = value;
        } else if name.eq_ignore_ascii_case("sec-websocket-accept") {
            h.accept = value;
        } else if name.eq_ignore_ascii_case("sec-websocket-protocol") {
            listed(&mut h.protocol, value);
        } else if name.eq_ignore_ascii_case("sec-websocket-extensions") {
            listed(&mut h.extensions, value);
        }
    }
    Ok(h)
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64 (24 characters).
pub fn new_key() -> [u8; 24] {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    // One 128-bit draw: an array of bytes would be sampled a 32-bit word per byte.
    let r = rand::random::<u128>().to_ne_bytes();
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
        assert!(
            h.verify("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", &Offer::default())
                .is_ok()
        );
        match h.verify("other", &Offer::default()) {
            Err(HandshakeError::Invalid(what)) => {
                assert_eq!(
                    what.to_string(),
                    "Sec-WebSocket-Accept: \"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\" (expected \"other\")"
                );
                assert_eq!(
                    what,
                    InvalidUpgrade::Wrong {
                        header: RequiredHeader::SecWebSocketAccept,
                        value: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into(),
                        expected: "other".into(),
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        let denied =
            parse_head(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n").expect("parses");
        assert!(matches!(
            denied.verify("x", &Offer::default()),
            Err(HandshakeError::Status { status: 401, ref reason, body: None }) if reason == "Unauthorized"
        ));
        for (head, what) in [
            (
                &b"HTTP/1.1 101 OK\r\nConnection: Upgrade\r\n\r\n"[..],
                "no Upgrade: websocket header",
            ),
            (
                b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: keep-alive\r\n\r\n",
                "Connection: \"keep-alive\" (expected \"Upgrade\")",
            ),
            (
                b"HTTP/1.1 101 OK\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
                "Upgrade: \"h2c\" (expected \"websocket\")",
            ),
        ] {
            let h = parse_head(head).expect("parses");
            assert_eq!(
                h.verify("x", &Offer::default())
                    .expect_err("invalid")
                    .to_string(),
                format!("upgrade: {what}")
            );
        }
        for (head, fault, line) in [
            (
                &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
                HeadFault::StatusLine,
                "SSH-2.0-OpenSSH",
            ),
            (
                b"HTTP/1.1 abc OK\r\n\r\n",
                HeadFault::StatusLine,
                "HTTP/1.1 abc OK",
            ),
            (
                b"HTTP/1.1 101 \xff\r\n\r\n",
                HeadFault::NotText,
                "HTTP/1.1 101 \u{fffd}",
            ),
            (
                b"HTTP/1.1 101 OK\r\nUpgrade websocket\r\n\r\n",
                HeadFault::HeaderLine,
                "Upgrade websocket",
            ),
        ] {
            match parse_head(head) {
                Err(HandshakeError::Malformed(e)) => {
                    assert_eq!(
                        e,
                        NotHttp {
                            fault,
                            line: line.into()
                        }
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            find_head_end(b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\n"),
            None
        );
    }

    /// RFC 6455 4.1: a subprotocol not offered fails the upgrade, naming it and the offer;
    /// none selected is allowed (the caller says so); permessage-deflate is agreed when offered
    /// and accepted, refused when not offered. Repeated header lines are judged together.
    #[test]
    fn subprotocols_and_extensions_are_checked_against_the_offer() {
        let ok = "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: k\r\n";
        let offered = ["graphql-transport-ws".to_string(), "v12.stomp".to_string()];
        let deflate = DeflateOffer::default();
        let offer = Offer {
            protocols: Some(&offered),
            deflate: Some(&deflate),
        };
        let verify = |extra: &str, offer: &Offer<'_>| {
            parse_head(format!("{ok}{extra}\r\n").as_bytes())
                .expect("parses")
                .verify("k", offer)
        };
        let agreed = verify(
            "Sec-WebSocket-Protocol: v12.stomp\r\nSec-WebSocket-Extensions: permessage-deflate\r\n",
            &offer,
        )
        .expect("valid");
        assert_eq!(agreed.protocol.as_deref(), Some("v12.stomp"));
        assert_eq!(agreed.deflate.map(|p| p.client_max_window_bits), Some(15));
        assert_eq!(
            verify("", &offer).expect("none selected"),
            Agreed::default()
        );
        assert_eq!(
            verify("Sec-WebSocket-Protocol: mqtt\r\n", &offer)
                .expect_err("not offered")
                .to_string(),
            "upgrade: Sec-WebSocket-Protocol: \"mqtt\" (offered \"graphql-transport-ws, v12.stomp\")"
        );
        assert_eq!(
            verify(
                "Sec-WebSocket-Protocol: v12.stomp\r\nSec-WebSocket-Protocol: graphql-transport-ws\r\n",
                &offer
            )
            .expect_err("two selected")
            .to_string(),
            "upgrade: Sec-WebSocket-Protocol: \"v12.stomp, graphql-transport-ws\" (offered \"graphql-transport-ws, v12.stomp\")"
        );
        assert_eq!(
            verify(
                "Sec-WebSocket-Extensions: permessage-deflate\r\nSec-WebSocket-Extensions: permessage-deflate\r\n",
                &offer
            )
            .expect_err("twice")
            .to_string(),
            "upgrade: Sec-WebSocket-Extensions: \"permessage-deflate, permessage-deflate\" (permessage-deflate twice)"
        );
        assert_eq!(
            verify(
                "Sec-WebSocket-Extensions: permessage-deflate\r\n",
                &Offer::default()
            )
            .expect_err("not offered")
            .to_string(),
            "upgrade: Sec-WebSocket-Extensions: \"permessage-deflate\" (none requested)"
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
            Err(HandshakeError::Malformed(NotHttp {
                fault: HeadFault::TooLong,
                ..
            }))
        ));
        // A refusal's body: its first line, as far as it came with the head.
        let mut rd = BytesMut::from(
            &b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 40\r\n\r\n\r\ndatabase down\nmore"[..],
        );
        let h = take_head(&mut rd).expect("parses").expect("complete");
        assert_eq!(
            h.verify("x", &Offer::default())
                .expect_err("500")
                .to_string(),
            "upgrade: HTTP 500 Internal Server Error: database down"
        );
    }
}
