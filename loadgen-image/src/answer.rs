//! How a frame read is recognised as the answer to something sent: by what it carries, never
//! by when it arrived. A server that pushes (chat, market data, a flood) sends frames between
//! the answers; taking any of them for an answer would time the push, not the round trip.
//!
//! Every check here reads the frame in place (no allocation) except the WSE `PONG`'s, which
//! decodes an envelope the server built. What matches nothing is unsolicited, by kind.

use crate::measure::FrameKind;
use crate::message::{self, Template};
use crate::script::{Recognised, Script};
use tokio_tungstenite::tungstenite::Message;

/// What was sent, and so what its answer must carry.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// WebSocket ping frames whose 8-byte payload is the id: the pong returns it (RFC 6455 5.5.3).
    FramePing,
    /// Data messages cut from `template` and echoed back whole.
    Echo(&'a Template),
    /// WSE application pings: the `PONG` returns the ping's `client_timestamp`, which the
    /// sender makes unique per connection and uses as the id.
    WsePing,
    /// The conversation's measured message: its answer carries the `${seq}` back where the
    /// answer rule's `id` says, or is the next message its `match` accepts.
    Script(&'a Script),
}

/// What a frame read is to what was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The answer to the message with this id: the id and everything else as sent.
    To(u64),
    /// An exact copy of a message sent without an id (a zlib body cannot be patched): all
    /// that is left to tell identical messages apart is their order, so it answers the oldest
    /// outstanding one, if any is.
    Copy,
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
        Asked::Echo(template) if kind != FrameKind::Pong => {
            echo(template, kind == FrameKind::Text, data).unwrap_or(unsolicited)
        }
        Asked::Echo(_) => unsolicited,
        Asked::WsePing => message::wse_pong_stamp(msg).map_or(unsolicited, Answer::To),
        Asked::Script(_) if kind == FrameKind::Pong => unsolicited,
        Asked::Script(script) => match script.recognise(kind == FrameKind::Text, data) {
            Recognised::Id(id) => Answer::To(id),
            Recognised::Next => Answer::Copy,
            Recognised::No => unsolicited,
        },
    }
}

/// Whether the payload `data` of a text (`text`) or binary frame is an echo of a message from
/// `template`, and of which: the frame's kind and length as sent, every byte outside the id
/// slot equal to the template's, and a readable id in it. `None` for anything else.
pub fn echo(template: &Template, text: bool, data: &[u8]) -> Option<Answer> {
    let sent = template.payload();
    if text != template.is_text() || data.len() != sent.len() {
        return None;
    }
    match template.id_slot() {
        Some(slot) => {
            let same_outside =
                data[..slot.start] == sent[..slot.start] && data[slot.end..] == sent[slot.end..];
            if !same_outside {
                return None;
            }
            template.id_in(&data[slot]).map(Answer::To)
        }
        None => (data == sent).then_some(Answer::Copy),
    }
}

/// Whether the payload `data` of a text (`text`) or binary frame answers the greeting the
/// handshake sent (a WSE `server_hello` after the `client_hello`): it comes in the measured
/// phase, as the dial does not wait for it, and is an answer though no ping asked for it.
pub fn is_greeting_answer(text: bool, data: &[u8]) -> bool {
    message::wse_type_in(text, data).as_deref() == Some("server_hello")
}

/// Whether `msg` answers the WSE greeting (see [`is_greeting_answer`]).
pub fn greets(msg: &Message) -> bool {
    match msg {
        Message::Text(t) => is_greeting_answer(true, t.as_bytes()),
        Message::Binary(b) => is_greeting_answer(false, b),
        _ => false,
    }
}

/// Whether `data` is an exact copy of the template as sent (the counting loop sends the
/// template itself, with no id): the check a counting read makes on every frame, in place.
pub fn is_copy(template: &Template, text: bool, data: &[u8]) -> bool {
    text == template.is_text() && data == template.payload()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use wsload_spec::{Format, Protocol};

    fn bytes_of(m: &Message) -> Vec<u8> {
        match m {
            Message::Text(t) => t.as_bytes().to_vec(),
            Message::Binary(b) => b.to_vec(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn an_echo_answers_by_its_id_and_only_if_the_rest_is_as_sent() {
        let mut arena = BytesMut::new();
        for format in [Format::Json, Format::Msgpack, Format::Binary] {
            let t = Template::data(Protocol::Echo, format, 128, 6);
            let sent = t.with_id(&mut arena, 42);
            assert_eq!(answer(Asked::Echo(&t), &sent), Answer::To(42), "{format:?}");
            // The same id with one byte changed outside it is not an answer.
            let mut changed = bytes_of(&sent);
            let last = changed.len() - 1;
            changed[last] ^= 1;
            assert_eq!(
                echo(&t, t.is_text(), &changed),
                None,
                "{format:?}: a changed payload"
            );
            // The right bytes in the other frame kind are not an answer either.
            assert_eq!(echo(&t, !t.is_text(), &bytes_of(&sent)), None);
            // A push of another size answers nothing.
            let push = Message::Binary(Bytes::from_static(b"tick"));
            assert_eq!(
                answer(Asked::Echo(&t), &push),
                Answer::Unsolicited(FrameKind::Binary)
            );
        }
    }

    #[test]
    fn a_template_without_an_id_is_answered_only_by_its_exact_copy() {
        let t = Template::data(Protocol::Echo, Format::Zlib, 256, 6);
        assert!(t.id_slot().is_none());
        assert_eq!(answer(Asked::Echo(&t), &t.constant()), Answer::Copy);
        assert!(is_copy(&t, false, t.payload()));
        let mut other = t.payload().to_vec();
        other[3] ^= 0x10;
        assert_eq!(
            answer(Asked::Echo(&t), &Message::Binary(other.into())),
            Answer::Unsolicited(FrameKind::Binary)
        );
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
        let n = serde_json::Number::from(1_700_000_000_123u64);
        let pong = wsload_proto::envelope::pong("id", 1, Some(&n));
        let msg = Message::Text(pong.to_string().into());
        assert_eq!(answer(Asked::WsePing, &msg), Answer::To(1_700_000_000_123));
        let other = serde_json::json!({"t": "trade", "p": {"client_timestamp": 5}});
        assert_eq!(
            answer(Asked::WsePing, &Message::Text(other.to_string().into())),
            Answer::Unsolicited(FrameKind::Text)
        );
    }
}
