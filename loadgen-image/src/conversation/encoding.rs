//! A cell's wire format (`message.format`, `formats`): how the conversation's measured
//! message, written as JSON text, goes on the wire (a text frame, a binary frame, `M:` MsgPack
//! or `C:` zlib, the formats of the WSE benchmarks), and how an answer in that format is read
//! back as JSON for the answer rule. The same for the built-in conversations and a user's.

use std::borrow::Cow;
use wsload_proto::frame;
use wsload_spec::Format;

/// The largest answer a `C:` body may inflate to before it is not read as one (the
/// connection's own message limit still applies to the frame).
const INFLATE_LIMIT: usize = 16 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// As the template says: a text or a binary frame of its bytes.
    #[default]
    AsWritten,
    /// Its bytes in a binary frame.
    Binary,
    /// `M:` + MsgPack of the JSON it renders to.
    Msgpack,
    /// `C:` + zlib of the JSON it renders to, at this level.
    Zlib(u32),
}

impl Encoding {
    pub fn of(format: Format, level: u32) -> Encoding {
        match format {
            Format::Json => Encoding::AsWritten,
            Format::Binary => Encoding::Binary,
            Format::Msgpack => Encoding::Msgpack,
            Format::Zlib => Encoding::Zlib(level),
        }
    }

    /// Whether a message's bytes change on the way (made, then encoded).
    pub fn transforms(self) -> bool {
        matches!(self, Encoding::Msgpack | Encoding::Zlib(_))
    }

    /// Whether a message written as text (`text`) goes as a text frame.
    pub fn text(self, text: bool) -> bool {
        text && self == Encoding::AsWritten
    }

    /// The frame's payload for a message rendered as `rendered`. A template that is not JSON
    /// cannot be MsgPack: it goes as written, in a binary frame (`wsload validate` says so
    /// first).
    pub fn encode(self, rendered: &[u8]) -> Vec<u8> {
        match self {
            Encoding::Msgpack => {
                frame::json_to_msgpack(rendered).unwrap_or_else(|_| rendered.to_vec())
            }
            Encoding::Zlib(level) => frame::encode_zlib(rendered, level),
            Encoding::AsWritten | Encoding::Binary => rendered.to_vec(),
        }
    }

    /// An answer as the answer rule reads it: a binary frame in this format as its JSON,
    /// anything else as it came. `None` for a binary frame in this format that does not decode.
    pub fn decode(self, text: bool, data: &[u8]) -> Option<Cow<'_, [u8]>> {
        if text || !self.transforms() {
            return Some(Cow::Borrowed(data));
        }
        match frame::binary_to_json(data, INFLATE_LIMIT) {
            Ok(json) => Some(Cow::Owned(json)),
            // Not in the format at all (no prefix): read as it came.
            Err(frame::FrameError::Opaque) => Some(Cow::Borrowed(data)),
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_round_trips_to_the_json_written() {
        let json = br#"{"id":7,"d":"xxxx"}"#;
        for format in [Format::Json, Format::Binary, Format::Msgpack, Format::Zlib] {
            let e = Encoding::of(format, 6);
            let wire = e.encode(json);
            let text = e.text(true);
            assert_eq!(text, format == Format::Json, "{format:?}");
            let back = e.decode(text, &wire).expect("decodes");
            let v: serde_json::Value = serde_json::from_slice(&back).expect("json");
            assert_eq!(v, serde_json::json!({"id": 7, "d": "xxxx"}), "{format:?}");
        }
        // A broken body in the format is no answer; a frame of no format is read as it came.
        assert_eq!(Encoding::Zlib(6).decode(false, b"C:not zlib"), None);
        assert_eq!(
            Encoding::Msgpack.decode(false, b"raw").as_deref(),
            Some(&b"raw"[..])
        );
    }
}
