//! Messages the load generator sends, built once per cell from a template.
//!
//! A constant message is a shared `Bytes` clone (no allocation per send). A message that
//! carries an id (to match its echo) is the template copied into an arena `BytesMut` with the
//! id written at a fixed offset: one allocation per arena block, not per message. Echoes are
//! matched by reading the id back at the same offset, without parsing JSON.

use bytes::{Bytes, BytesMut};
use serde_json::json;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use wsload_proto::frame;
use wsload_spec::{Format, Protocol};

/// Placeholder the id slot is written into; unique in every template.
const ID_PLACEHOLDER: &str = "0000000000000000";
/// Messages cut from one arena block: enough to amortize the allocation, small enough that
/// 100K connections that ping now and then do not each pin a large block.
const ARENA_MESSAGES: usize = 16;
const ARENA_MAX: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Binary,
}

/// Where the id lives in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdSlot {
    /// 16 lowercase hex digits at this offset (JSON and MsgPack strings).
    Hex(usize),
    /// 8 little-endian bytes at this offset (raw binary).
    Le(usize),
    /// No id (zlib bodies cannot be patched): answers are matched by order.
    None,
}

/// A message template of one protocol, format and size.
#[derive(Debug, Clone)]
pub struct Template {
    bytes: Bytes,
    kind: Kind,
    id: IdSlot,
}

/// Pads `text` (JSON with a `"pad":""` field) so the whole is `size` bytes when possible.
fn padded_json(build: impl Fn(&str) -> serde_json::Value, size: usize) -> String {
    let bare = build("").to_string();
    let pad = "x".repeat(size.saturating_sub(bare.len()));
    build(&pad).to_string()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

impl Template {
    /// The data message of `protocol` in `format`, about `size` bytes (the envelope is the
    /// minimum): the echo perftest's `{type,id,ts,data}` or a WSE trading message.
    pub fn data(protocol: Protocol, format: Format, size: usize, level: u32) -> Template {
        let value = |pad: &str| match protocol {
            Protocol::Echo => json!({"type": "msg", "id": ID_PLACEHOLDER, "ts": 0, "data": pad}),
            Protocol::Wse => json!({
                "t": "trade",
                "p": {"id": ID_PLACEHOLDER, "sym": "BTC-USD", "side": "buy", "px": 67012.5, "qty": 0.125, "pad": pad}
            }),
        };
        match format {
            Format::Json => {
                let text = padded_json(value, size);
                let id = find(text.as_bytes(), ID_PLACEHOLDER.as_bytes())
                    .map_or(IdSlot::None, IdSlot::Hex);
                Template {
                    bytes: Bytes::from(text),
                    kind: Kind::Text,
                    id,
                }
            }
            Format::Msgpack => {
                // Pad by the same amount JSON would need, then encode: the logical message is
                // the same across formats, as the format comparison requires.
                let text = padded_json(value, size);
                let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                let bytes = frame::encode_msgpack(&v).unwrap_or_default();
                let id = find(&bytes, ID_PLACEHOLDER.as_bytes()).map_or(IdSlot::None, IdSlot::Hex);
                Template {
                    bytes: Bytes::from(bytes),
                    kind: Kind::Binary,
                    id,
                }
            }
            Format::Zlib => {
                let text = padded_json(value, size);
                Template {
                    bytes: Bytes::from(frame::encode_zlib(text.as_bytes(), level)),
                    kind: Kind::Binary,
                    id: IdSlot::None,
                }
            }
            Format::Binary => {
                let mut b = vec![0xA5u8; size.max(8)];
                b[..8].copy_from_slice(&0u64.to_le_bytes());
                Template {
                    bytes: Bytes::from(b),
                    kind: Kind::Binary,
                    id: IdSlot::Le(0),
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The message's bytes, as sent.
    pub fn payload(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether it goes as a text frame (else binary).
    pub fn is_text(&self) -> bool {
        self.kind == Kind::Text
    }

    fn wrap(&self, bytes: Bytes) -> Message {
        match self.kind {
            // Templates are ASCII JSON and ids are hex: always valid UTF-8.
            Kind::Text => Message::Text(Utf8Bytes::try_from(bytes).unwrap_or_default()),
            Kind::Binary => Message::Binary(bytes),
        }
    }

    /// The template itself: a reference-count bump, no copy.
    pub fn constant(&self) -> Message {
        self.wrap(self.bytes.clone())
    }

    /// A copy carrying `id`, cut from `arena`.
    pub fn with_id(&self, arena: &mut BytesMut, id: u64) -> Message {
        if arena.capacity() - arena.len() < self.bytes.len() {
            arena.reserve(
                (self.bytes.len() * ARENA_MESSAGES)
                    .min(ARENA_MAX)
                    .max(self.bytes.len()),
            );
        }
        arena.extend_from_slice(&self.bytes);
        match self.id {
            IdSlot::Hex(at) => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                for i in 0..16 {
                    arena[at + i] = HEX[((id >> (60 - 4 * i)) & 0xf) as usize];
                }
            }
            IdSlot::Le(at) => arena[at..at + 8].copy_from_slice(&id.to_le_bytes()),
            IdSlot::None => {}
        }
        self.wrap(arena.split().freeze())
    }

    /// Where the id is written in a message from this template (`None` when it carries none).
    pub fn id_slot(&self) -> Option<std::ops::Range<usize>> {
        match self.id {
            IdSlot::Hex(at) => Some(at..at + 16),
            IdSlot::Le(at) => Some(at..at + 8),
            IdSlot::None => None,
        }
    }

    /// The id in `slot`, the bytes of an echo at [`Template::id_slot`].
    pub fn id_in(&self, slot: &[u8]) -> Option<u64> {
        match self.id {
            IdSlot::Hex(_) => {
                let hex = std::str::from_utf8(slot.get(..16)?).ok()?;
                u64::from_str_radix(hex, 16).ok()
            }
            IdSlot::Le(_) => Some(u64::from_le_bytes(slot.get(..8)?.try_into().ok()?)),
            IdSlot::None => None,
        }
    }
}

/// A WSE application ping carrying `stamp`, the client's clock in milliseconds: the PONG
/// echoes it, so a connection's stamps are made unique (see `answer`).
pub fn wse_ping(format: Format, level: u32, stamp: u64) -> Message {
    let v = json!({"t": "ping", "p": {"client_timestamp": stamp}});
    match format {
        Format::Msgpack => Message::Binary(frame::encode_msgpack(&v).unwrap_or_default().into()),
        Format::Zlib => Message::Binary(frame::encode_zlib(v.to_string().as_bytes(), level).into()),
        Format::Json | Format::Binary => Message::Text(v.to_string().into()),
    }
}

/// The WSE greeting sent after `server_ready`.
pub fn wse_client_hello() -> Message {
    Message::Text(
        json!({"t": "client_hello", "p": {"client_version": concat!("wsload/", env!("CARGO_PKG_VERSION")), "protocol_version": 1}})
            .to_string()
            .into(),
    )
}

/// The `t` of a WSE message, in any format (for telling PONG from other traffic).
pub fn wse_type(msg: &Message) -> Option<String> {
    match msg {
        Message::Text(t) => wse_type_in(true, t.as_bytes()),
        Message::Binary(b) => wse_type_in(false, b),
        _ => None,
    }
}

/// The `t` of a WSE message whose payload is `data`, from a text (`text`) or binary frame.
pub fn wse_type_in(text: bool, data: &[u8]) -> Option<String> {
    if text {
        let t = std::str::from_utf8(data).ok()?;
        return frame::decode_text(t)
            .ok()
            .and_then(|i| i.t.map(|t| t.into_owned()));
    }
    match frame::Format::of_binary(data) {
        (frame::Format::Msgpack, body) => frame::decode_msgpack(body)
            .ok()
            .and_then(|i| i.t.map(|t| t.into_owned())),
        (frame::Format::Zlib, body) => {
            let inner = frame::inflate(body, 16 << 20).ok()?;
            frame::decode_inflated(&inner)
                .ok()
                .and_then(|i| i.t.map(|t| t.into_owned()))
        }
        _ => None,
    }
}

/// The `client_timestamp` a WSE `PONG` echoes, in any format; `None` for anything else.
pub fn wse_pong_stamp(msg: &Message) -> Option<u64> {
    let stamp = |i: frame::Inbound<'_>| {
        if i.kind() != "PONG" {
            return None;
        }
        i.p?.client_timestamp?.as_u64()
    };
    match msg {
        Message::Text(t) => frame::decode_text(t).ok().and_then(stamp),
        Message::Binary(b) => match frame::Format::of_binary(b) {
            (frame::Format::Msgpack, body) => frame::decode_msgpack(body).ok().and_then(stamp),
            (frame::Format::Zlib, body) => {
                let inner = frame::inflate(body, 16 << 20).ok()?;
                frame::decode_inflated(&inner).ok().and_then(stamp)
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_in_every_patchable_format() {
        let mut arena = BytesMut::new();
        for format in [Format::Json, Format::Msgpack, Format::Binary] {
            let t = Template::data(Protocol::Echo, format, 128, 6);
            let slot = t.id_slot().expect("an id slot");
            for id in [0u64, 1, 0xdead_beef, u64::MAX] {
                let m = t.with_id(&mut arena, id);
                let data = match &m {
                    Message::Text(t) => t.as_bytes().to_vec(),
                    Message::Binary(b) => b.to_vec(),
                    _ => unreachable!(),
                };
                assert_eq!(t.id_in(&data[slot.clone()]), Some(id), "{format:?}");
                assert_eq!(m.len(), t.len());
            }
        }
    }

    #[test]
    fn sizes_and_formats() {
        let json = Template::data(Protocol::Echo, Format::Json, 256, 6);
        assert_eq!(json.len(), 256);
        assert!(json.constant().is_text());
        let v: serde_json::Value = match json.constant() {
            Message::Text(t) => serde_json::from_str(&t).expect("valid JSON"),
            _ => unreachable!(),
        };
        assert_eq!(v["type"], "msg");
        // Smaller than the envelope: the envelope is the minimum.
        assert!(Template::data(Protocol::Echo, Format::Json, 8, 6).len() > 8);
        let wse = Template::data(Protocol::Wse, Format::Json, 190, 6);
        assert_eq!(wse.len(), 190);
        assert_eq!(wse_type(&wse.constant()).as_deref(), Some("trade"));
        let mp = Template::data(Protocol::Wse, Format::Msgpack, 190, 6);
        assert_eq!(wse_type(&mp.constant()).as_deref(), Some("trade"));
        let z = Template::data(Protocol::Wse, Format::Zlib, 1024, 6);
        assert!(z.id_slot().is_none());
        assert!(z.len() < 200, "padding compresses: {}", z.len());
        assert_eq!(wse_type(&z.constant()).as_deref(), Some("trade"));
        assert_eq!(
            Template::data(Protocol::Echo, Format::Binary, 64, 6).len(),
            64
        );
    }

    #[test]
    fn arena_amortizes_allocation() {
        let t = Template::data(Protocol::Echo, Format::Json, 64, 6);
        let mut arena = BytesMut::new();
        let first = t.with_id(&mut arena, 1);
        let second = t.with_id(&mut arena, 2);
        // Both messages are cut from the same block.
        let (a, b) = match (&first, &second) {
            (Message::Text(a), Message::Text(b)) => (
                a.as_bytes().as_ptr() as usize,
                b.as_bytes().as_ptr() as usize,
            ),
            _ => unreachable!(),
        };
        assert_eq!(b - a, 64);
    }
}
