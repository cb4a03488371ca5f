//! Binary frame prefixes of the WSE protocol and decoding of inbound messages.
//!
//! A text frame carries a JSON envelope. A binary frame may start with a two-byte prefix:
//! `M:` MsgPack body, `C:` zlib-compressed body (JSON inside, or `M:` MsgPack), `E:` an
//! AES-GCM body that a load test cannot decrypt. Any other binary frame is opaque.

use flate2::Compression;
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::io::{Read, Write};

pub const MSGPACK_PREFIX: &[u8; 2] = b"M:";
pub const ZLIB_PREFIX: &[u8; 2] = b"C:";
pub const ENCRYPTED_PREFIX: &[u8; 2] = b"E:";

/// Wire format of one data frame; also the `format` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// A text frame (JSON in the WSE protocol).
    Text,
    /// A binary frame without a known prefix.
    Binary,
    Msgpack,
    Zlib,
    Encrypted,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::Text,
        Format::Binary,
        Format::Msgpack,
        Format::Zlib,
        Format::Encrypted,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn label(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Binary => "binary",
            Format::Msgpack => "msgpack",
            Format::Zlib => "zlib",
            Format::Encrypted => "encrypted",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The format of a binary frame and its body after the prefix.
    pub fn of_binary(data: &[u8]) -> (Format, &[u8]) {
        match data.get(..2) {
            Some(p) if p == MSGPACK_PREFIX => (Format::Msgpack, &data[2..]),
            Some(p) if p == ZLIB_PREFIX => (Format::Zlib, &data[2..]),
            Some(p) if p == ENCRYPTED_PREFIX => (Format::Encrypted, &data[2..]),
            _ => (Format::Binary, data),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("invalid JSON envelope: {0}")]
    Json(#[from] serde_json::Error),
    #[error("invalid MsgPack envelope: {0}")]
    Msgpack(#[from] rmp_serde::decode::Error),
    #[error("cannot encode MsgPack: {0}")]
    MsgpackEncode(#[from] rmp_serde::encode::Error),
    #[error("invalid zlib body: {0}")]
    Zlib(std::io::Error),
    #[error("zlib body inflates past the {limit}-byte message limit")]
    TooLarge { limit: usize },
    #[error("encrypted frames cannot be decoded without the session key")]
    Encrypted,
    #[error("opaque binary frame has no envelope")]
    Opaque,
}

/// The fields of an inbound envelope the server acts on. Unknown fields are validated by the
/// parser and skipped, so decoding a large trading message allocates nothing.
#[derive(Debug, Default, Deserialize)]
pub struct Inbound<'a> {
    #[serde(borrow, default)]
    pub t: Option<Cow<'a, str>>,
    #[serde(default)]
    pub p: Option<InboundPayload>,
}

#[derive(Debug, Default, Deserialize)]
pub struct InboundPayload {
    /// Milliseconds on the client's clock, echoed back in `PONG`.
    #[serde(default)]
    pub client_timestamp: Option<serde_json::Number>,
    // The topic fields are read leniently: any other message may carry fields of these names
    // with other types, and must still decode.
    /// The topic of `subscribe`, `unsubscribe` and `publish`, when a string.
    #[serde(default, deserialize_with = "lenient::string")]
    pub topic: Option<String>,
    /// A publish's sequence number in its topic, echoed in `published`, when a number.
    #[serde(default, deserialize_with = "lenient::number")]
    pub seq: Option<serde_json::Number>,
    /// A publish that wants a `published` answer (`true`; anything else is no).
    #[serde(default, deserialize_with = "lenient::flag")]
    pub ack: bool,
}

/// Fields taken when of the expected type and ignored otherwise.
mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::{Number, Value};

    pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::String(s) => Some(s),
            _ => None,
        })
    }

    pub fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Number>, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::Number(n) => Some(n),
            _ => None,
        })
    }

    pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        Ok(Value::deserialize(d)? == Value::Bool(true))
    }
}

impl Inbound<'_> {
    pub fn kind(&self) -> &str {
        self.t.as_deref().unwrap_or("")
    }
}

/// Decodes a JSON text envelope.
pub fn decode_text(text: &str) -> Result<Inbound<'_>, FrameError> {
    Ok(serde_json::from_str(text)?)
}

/// Decodes a MsgPack body (after the `M:` prefix).
pub fn decode_msgpack(body: &[u8]) -> Result<Inbound<'_>, FrameError> {
    Ok(rmp_serde::from_slice(body)?)
}

/// Inflates a zlib body (after the `C:` prefix), refusing to grow past `limit` bytes.
pub fn inflate(body: &[u8], limit: usize) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    let read = ZlibDecoder::new(body)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(FrameError::Zlib)?;
    if read > limit {
        return Err(FrameError::TooLarge { limit });
    }
    Ok(out)
}

/// Decodes an inflated zlib payload: JSON text, or `M:`-prefixed MsgPack.
pub fn decode_inflated(inner: &[u8]) -> Result<Inbound<'_>, FrameError> {
    match inner.strip_prefix(MSGPACK_PREFIX.as_slice()) {
        Some(mp) => decode_msgpack(mp),
        None => Ok(serde_json::from_slice(inner)?),
    }
}

/// `M:` + MsgPack encoding of `value`, maps with field names (as the WSE client expects).
pub fn encode_msgpack<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = MSGPACK_PREFIX.to_vec();
    value.serialize(&mut rmp_serde::Serializer::new(&mut out).with_struct_map())?;
    Ok(out)
}

/// `C:` + zlib encoding of `body` at `level` (0-9; the WSE benchmark uses 6).
pub fn encode_zlib(body: &[u8], level: u32) -> Vec<u8> {
    let mut enc = ZlibEncoder::new(ZLIB_PREFIX.to_vec(), Compression::new(level.min(9)));
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(body);
    enc.finish().unwrap_or_default()
}

/// `M:` + the MsgPack encoding of the JSON document `text`: a message written as JSON, sent
/// in the MsgPack format.
pub fn json_to_msgpack(text: &[u8]) -> Result<Vec<u8>, FrameError> {
    let value: serde_json::Value = serde_json::from_slice(text)?;
    encode_msgpack(&value)
}

/// The JSON text of a binary frame in the MsgPack or zlib format (`M:`/`C:` prefixed), so that
/// what reads JSON reads it; `Opaque` for a binary frame of neither.
pub fn binary_to_json(data: &[u8], limit: usize) -> Result<Vec<u8>, FrameError> {
    fn msgpack(body: &[u8]) -> Result<Vec<u8>, FrameError> {
        let value: serde_json::Value = rmp_serde::from_slice(body)?;
        Ok(serde_json::to_vec(&value)?)
    }
    match Format::of_binary(data) {
        (Format::Msgpack, body) => msgpack(body),
        (Format::Zlib, body) => {
            let inner = inflate(body, limit)?;
            match inner.strip_prefix(MSGPACK_PREFIX.as_slice()) {
                Some(mp) => msgpack(mp),
                None => Ok(inner),
            }
        }
        (Format::Encrypted, _) => Err(FrameError::Encrypted),
        _ => Err(FrameError::Opaque),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_goes_to_msgpack_and_back() {
        let text = br#"{"id":12,"p":{"s":"x"}}"#;
        let mp = json_to_msgpack(text).expect("encodes");
        assert!(mp.starts_with(MSGPACK_PREFIX));
        let back: serde_json::Value =
            serde_json::from_slice(&binary_to_json(&mp, 1 << 20).expect("decodes")).expect("json");
        assert_eq!(back, serde_json::json!({"id": 12, "p": {"s": "x"}}));
        let z = encode_zlib(text, 6);
        assert_eq!(binary_to_json(&z, 1 << 20).expect("inflates"), text);
        assert!(matches!(
            binary_to_json(b"raw", 10),
            Err(FrameError::Opaque)
        ));
        assert!(matches!(
            binary_to_json(&z, 4),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn classifies_prefixes() {
        assert_eq!(Format::of_binary(b"M:xy"), (Format::Msgpack, &b"xy"[..]));
        assert_eq!(Format::of_binary(b"C:xy"), (Format::Zlib, &b"xy"[..]));
        assert_eq!(Format::of_binary(b"E:xy"), (Format::Encrypted, &b"xy"[..]));
        assert_eq!(Format::of_binary(b"M"), (Format::Binary, &b"M"[..]));
        assert_eq!(
            Format::of_binary(b"\x00\x01"),
            (Format::Binary, &b"\x00\x01"[..])
        );
    }

    #[test]
    fn same_envelope_in_every_format() {
        let msg = json!({"t": "ping", "p": {"client_timestamp": 1234, "pad": "x".repeat(100)}});
        let text = msg.to_string();
        let d = decode_text(&text).expect("json");
        assert_eq!(d.kind(), "ping");
        assert_eq!(
            d.p.and_then(|p| p.client_timestamp).map(|n| n.to_string()),
            Some("1234".into())
        );

        let mp = encode_msgpack(&msg).expect("encode");
        let (fmt, body) = Format::of_binary(&mp);
        assert_eq!(fmt, Format::Msgpack);
        assert_eq!(decode_msgpack(body).expect("msgpack").kind(), "ping");

        let z = encode_zlib(text.as_bytes(), 6);
        let (fmt, body) = Format::of_binary(&z);
        assert_eq!(fmt, Format::Zlib);
        let inner = inflate(body, 1 << 20).expect("inflate");
        assert_eq!(decode_inflated(&inner).expect("inner").kind(), "ping");
        // zlib around MsgPack too.
        let z = encode_zlib(&mp, 6);
        let inner = inflate(&z[2..], 1 << 20).expect("inflate");
        assert_eq!(
            decode_inflated(&inner).expect("inner msgpack").kind(),
            "ping"
        );
    }

    #[test]
    fn topic_fields_are_read_when_well_typed_and_never_fail_a_message() {
        let d = decode_text(r#"{"t":"publish","p":{"topic":"q","seq":4,"ack":true,"x":[1]}}"#)
            .expect("publish");
        let p = d.p.expect("payload");
        assert_eq!(p.topic.as_deref(), Some("q"));
        assert_eq!(p.seq.map(|n| n.to_string()), Some("4".into()));
        assert!(p.ack);
        let odd = json!({"t":"trade","p":{"topic":{"a":1},"seq":"7","ack":"yes"}});
        let odd_text = odd.to_string();
        let d = decode_text(&odd_text).expect("other types still decode");
        let p = d.p.expect("payload");
        assert_eq!((p.topic, p.seq, p.ack), (None, None, false));
        let mp = encode_msgpack(&odd).expect("encode");
        let d = decode_msgpack(&mp[2..]).expect("and in MsgPack");
        assert_eq!(d.kind(), "trade");
    }

    #[test]
    fn malformed_bodies_are_errors() {
        assert!(decode_text("{not json").is_err());
        assert!(decode_text("[1,2]").is_err());
        assert!(decode_msgpack(b"\xc1").is_err());
        assert!(inflate(b"not zlib at all", 1024).is_err());
        let big = encode_zlib(&vec![b' '; 10_000], 9);
        assert!(matches!(
            inflate(&big[2..], 1000),
            Err(FrameError::TooLarge { limit: 1000 })
        ));
    }
}
