//! How a frame read is recognised as the answer to something sent: by what it carries, never
//! by when it arrived. A server that pushes (chat, market data, a flood) sends frames between
//! the answers; taking any of them for an answer would time the push, not the round trip.
//!
//! Every check here reads the frame in place (no allocation) but an answer in a MsgPack or
//! zlib format, which is decoded first. What matches nothing is unsolicited, by kind.

use super::{Recognised, Script};
use tokio_tungstenite::tungstenite::Message;
use wsload_report::measure::FrameKind;

/// What was sent, and so what its answer must carry.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// WebSocket ping frames whose 8-byte payload is the id: the pong returns it (RFC 6455 5.5.3).
    FramePing,
    /// The conversation's message (the echo and WSE protocols' built-in ones included): its
    /// answer carries the `${seq}` back where the answer rule's `id` says, or is the next
    /// message its `match` accepts.
    Script(&'a Script),
}

/// What a frame read is to what was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The answer to the message with this id.
    To(u64),
    /// An answer that carries no id: all that is left to tell answers apart is their order,
    /// so it answers the oldest outstanding message, if any is.
    Copy,
    /// An answer whose id cannot be read ([`Recognised::Unreadable`]): it answers nothing,
    /// and is counted by the field, neither as an answer nor as unsolicited.
    Unreadable,
    /// Answers nothing sent: counted apart, by kind, never as an answer.
    Unsolicited(FrameKind),
    /// A control frame outside the conversation: a server's ping (the connection answers it)
    /// or a close (the caller ends on it).
    Control,
}

/// The kind a data or pong frame is counted under when it answers nothing.
fn kind_of(msg: &Message) -> Option<(FrameKind, &[u8])> {
    match msg {
        Message::Text(t) => Some((FrameKind::Text, t.as_bytes())),
        Message::Binary(b) => Some((FrameKind::Binary, b)),
        Message::Pong(p) => Some((FrameKind::Pong, p)),
        _ => None,
    }
}

/// `msg` as answering nothing: unsolicited by its kind (a control frame stays one).
pub fn unsolicited(msg: &Message) -> Answer {
    kind_of(msg).map_or(Answer::Control, |(kind, _)| Answer::Unsolicited(kind))
}

/// What `msg` is to messages sent as `asked`.
pub fn answer(asked: Asked<'_>, msg: &Message) -> Answer {
    let Some((kind, data)) = kind_of(msg) else {
        return Answer::Control;
    };
    let unsolicited = Answer::Unsolicited(kind);
    match asked {
        Asked::FramePing => match <[u8; 8]>::try_from(data) {
            Ok(id) if kind == FrameKind::Pong => Answer::To(u64::from_le_bytes(id)),
            _ => unsolicited,
        },
        Asked::Script(_) if kind == FrameKind::Pong => unsolicited,
        Asked::Script(script) => match script.recognise(kind == FrameKind::Text, data) {
            Recognised::Id(id) => Answer::To(id),
            Recognised::Next => Answer::Copy,
            Recognised::Unreadable => Answer::Unreadable,
            Recognised::No => unsolicited,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Encoding;
    use crate::conversation::Fill;
    use bytes::{Bytes, BytesMut};
    use wsload_spec::{Format, Protocol, builtin};

    fn builtin_script(protocol: Protocol, format: Format) -> Script {
        let c = builtin::conversation(protocol).expect("parses");
        Script::compile(&c)
            .expect("compiles")
            .for_cell(true, Encoding::of(format, 6), 128)
    }

    fn sent(script: &Script, seq: u64) -> Message {
        let out = script.shared_message().expect("no variables");
        out.message(
            &mut BytesMut::new(),
            &Fill {
                conn: 1,
                seq,
                size: 128,
            },
        )
    }

    #[test]
    fn an_echo_answers_by_the_id_it_carries_in_every_format() {
        for format in [Format::Json, Format::Msgpack, Format::Zlib, Format::Binary] {
            let s = builtin_script(Protocol::Echo, format);
            let msg = sent(&s, 42);
            assert_eq!(msg.is_text(), format == Format::Json, "{format:?}");
            assert_eq!(
                answer(Asked::Script(&s), &msg),
                Answer::To(42),
                "{format:?}"
            );
            // A push of another shape answers nothing.
            let push = Message::Binary(Bytes::from_static(b"tick"));
            assert_eq!(
                answer(Asked::Script(&s), &push),
                Answer::Unsolicited(FrameKind::Binary),
                "{format:?}"
            );
            // A body in the format that does not decode is no answer.
            let broken = match format {
                Format::Zlib => Message::Binary(Bytes::from_static(b"C:broken")),
                _ => Message::Text(r#"{"id":"x"}"#.into()),
            };
            assert!(
                matches!(answer(Asked::Script(&s), &broken), Answer::Unsolicited(_)),
                "{format:?}"
            );
        }
    }

    #[test]
    fn throughput_s_echo_carries_its_seq_in_every_format_and_a_changed_copy_answers_nothing() {
        for format in [Format::Json, Format::Msgpack, Format::Zlib, Format::Binary] {
            let c = builtin::conversation(Protocol::Echo).expect("parses");
            let s = Script::compile(&c).expect("compiles").for_cell(
                false,
                Encoding::of(format, 6),
                128,
            );
            let msg = sent(&s, 2);
            assert_ne!(sent(&s, 1), msg, "{format:?}: each message its own");
            assert_eq!(answer(Asked::Script(&s), &msg), Answer::To(2), "{format:?}");
            assert_eq!(s.sent_seq(2, 7), Some(2), "{format:?}");
            if Encoding::of(format, 6).transforms() {
                // Decoded, and answered by the id read from it (a server may re-encode).
                continue;
            }
            let mut changed = match &msg {
                Message::Text(t) => t.as_bytes().to_vec(),
                Message::Binary(b) => b.to_vec(),
                _ => unreachable!(),
            };
            let last = changed.len() - 1;
            changed[last] ^= 1;
            let changed = match &msg {
                Message::Text(_) => {
                    Message::Text(String::from_utf8_lossy(&changed).into_owned().into())
                }
                _ => Message::Binary(changed.into()),
            };
            assert!(
                matches!(answer(Asked::Script(&s), &changed), Answer::Unsolicited(_)),
                "{format:?}: a changed echo"
            );
        }
    }

    #[test]
    fn in_msgpack_and_zlib_each_message_is_encoded_with_its_own_id() {
        for format in [Format::Msgpack, Format::Zlib] {
            let c = builtin::conversation(Protocol::Echo).expect("parses");
            let s = Script::compile(&c).expect("compiles").for_cell(
                false,
                Encoding::of(format, 6),
                128,
            );
            // Ids never wrap: a message made once and sent again would carry an id a later
            // message also carries, and a window as large as the cycle would take one's echo
            // for the other's.
            assert_eq!(s.message.out.seq_cycle(), None, "{format:?}");
            assert_ne!(sent(&s, 1025), sent(&s, 1), "{format:?}");
            assert_eq!(
                answer(Asked::Script(&s), &sent(&s, 1025)),
                Answer::To(1025),
                "{format:?}"
            );
        }
    }

    #[test]
    fn pongs_answer_frame_pings_by_their_payload() {
        let pong = |p: &[u8]| Message::Pong(Bytes::copy_from_slice(p));
        assert_eq!(
            answer(Asked::FramePing, &pong(&7u64.to_le_bytes())),
            Answer::To(7)
        );
        assert_eq!(
            answer(Asked::FramePing, &pong(b"")),
            Answer::Unsolicited(FrameKind::Pong)
        );
        assert_eq!(
            answer(Asked::FramePing, &Message::Text("x".into())),
            Answer::Unsolicited(FrameKind::Text)
        );
        assert_eq!(
            answer(Asked::FramePing, &Message::Ping(Bytes::new())),
            Answer::Control
        );
    }

    #[test]
    fn a_wse_pong_answers_the_ping_whose_stamp_it_returns() {
        let s = builtin_script(Protocol::Wse, Format::Json);
        let ping = sent(&s, 9);
        assert_eq!(
            ping.to_text().expect("text"),
            r#"{"t":"ping","p":{"client_timestamp":9}}"#
        );
        let n = serde_json::Number::from(9u64);
        let pong = wsload_proto::envelope::pong("id", 1, Some(&n));
        let msg = Message::Text(pong.to_string().into());
        assert_eq!(answer(Asked::Script(&s), &msg), Answer::To(9));
        // The stamp in a message that is not a PONG answers nothing.
        let other = serde_json::json!({"t": "trade", "p": {"client_timestamp": 9}});
        assert_eq!(
            answer(Asked::Script(&s), &Message::Text(other.to_string().into())),
            Answer::Unsolicited(FrameKind::Text)
        );
        // A msgpack ping is answered in JSON by the reference server: read as it came.
        let s = builtin_script(Protocol::Wse, Format::Msgpack);
        assert!(sent(&s, 3).is_binary());
        assert_eq!(answer(Asked::Script(&s), &msg), Answer::To(9));
    }
}
