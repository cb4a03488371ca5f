//! What a server message is to the conversation: answered by a reply rule, one of the
//! server's pushes, or neither; and to the measured messages outstanding: the answer to
//! which one (by the `${seq}` it carries), or none. Asked of every frame a counting read
//! takes, so read in place.

use super::out::Out;
use super::script::{AnswerBy, Script};
use super::unreadable;
use wsload_spec::decimal::Wanted;
use wsload_spec::json_path::{Memo, NoNumber};

/// What a server message is to the conversation, before it is looked at as an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// Answered automatically by reply rule `i`.
    Reply(usize),
    /// One of the server's pushes, matched by push rule `i` (counted by its index).
    Push(usize),
    /// Neither: an answer, or unsolicited.
    Other,
}

/// What a server message is to the measured messages outstanding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recognised {
    /// The answer to the message with this `${seq}`.
    Id(u64),
    /// An answer carrying no id: it answers the oldest outstanding.
    Next,
    /// An answer whose id cannot be read: one `answer.match` accepts, or, without a match,
    /// one whose `answer.id` field holds no whole number. It answers nothing, and is counted
    /// as such.
    Unreadable,
    /// Not an answer.
    No,
}

/// An answer by the `${seq}` read from it, if it is one.
#[inline]
fn by_id(seq: Option<u64>) -> Recognised {
    seq.map_or(Recognised::No, Recognised::Id)
}

impl Script {
    /// What a server message is to the conversation: a reply rule's, a push, or neither.
    /// Asked of every message a counting read takes: inlined there.
    #[inline]
    pub fn incoming(&self, text: bool, data: &[u8]) -> Incoming {
        if let Some(i) = self.replies.iter().position(|r| r.when.matches(text, data)) {
            return Incoming::Reply(i);
        }
        if let Some(i) = self.pushes.iter().position(|p| p.when.matches(text, data)) {
            return Incoming::Push(i);
        }
        Incoming::Other
    }

    /// The measured message, when each server frame of a counting read may first be read
    /// as its echo the short way ([`Out::short_seq`]): no reply or push rule comes before
    /// it, its answers are its echoes as written. `None` for any other conversation.
    pub fn short_echo(&self) -> Option<&Out> {
        let plain = self.replies.is_empty() && self.pushes.is_empty();
        let echoed = matches!(self.message.answer, Some(AnswerBy::Echoed { .. }));
        let out = &self.message.out;
        (plain && echoed && !self.encoding.transforms() && out.reads_short()).then_some(out)
    }

    /// What a server message is to the measured messages outstanding.
    pub fn recognise(&self, text: bool, data: &[u8]) -> Recognised {
        self.recognise_with(text, data, &mut Memo::default())
    }

    /// [`Script::recognise`] for a reader of many answers: `memo` keeps where the id was
    /// (see [`Memo`]), so answers of one shape are not walked each. Inlined into the counting
    /// read, which asks it of every answer.
    #[inline]
    pub fn recognise_with(&self, text: bool, data: &[u8], memo: &mut Memo) -> Recognised {
        let Some(by) = self.message.answer.as_ref() else {
            return Recognised::No;
        };
        // A message alike every time is echoed as the same bytes, in any format: compared
        // whole, as sent, without decoding; identical echoes are told apart by order alone.
        if let (AnswerBy::Echoed { .. }, Some(sent)) = (by, self.message.out.constant()) {
            return if text == self.message.out.is_text() && data == &sent[..] {
                Recognised::Next
            } else {
                Recognised::No
            };
        }
        let decoded;
        let transformed = self.encoding.transforms() && !text;
        let (text, data) = if transformed {
            // An answer in the cell's MsgPack or zlib format, read as the JSON it carries.
            match self.encoding.decode(text, data) {
                Some(json) => {
                    decoded = json;
                    (true, &decoded[..])
                }
                None => return Recognised::No,
            }
        } else {
            (text, data)
        };
        match by {
            AnswerBy::Echoed { id_in_json } if transformed => match id_in_json {
                Some(x) => by_id(x.extract_number_memo(data, memo, Wanted::Whole).ok()),
                None => Recognised::Next,
            },
            AnswerBy::Echoed { .. } => match self.message.out.echoed_seq(text, data) {
                Some(Some(seq)) => Recognised::Id(seq),
                Some(None) => Recognised::Next,
                None => Recognised::No,
            },
            AnswerBy::Rule { when, id } => {
                if when.as_ref().is_some_and(|w| !w.matches(text, data)) {
                    return Recognised::No;
                }
                match id
                    .as_ref()
                    .map(|x| x.extract_number_memo(data, memo, Wanted::Whole))
                {
                    None => Recognised::Next,
                    Some(Ok(id)) => Recognised::Id(id),
                    // Without a match, what has no id field is some other message.
                    Some(Err(NoNumber::Missing)) if when.is_none() => Recognised::No,
                    Some(Err(_)) => Recognised::Unreadable,
                }
            }
        }
    }

    /// What a report shows of an answer whose id could not be read
    /// ([`Recognised::Unreadable`]): the value as it came and the message (decoded from the
    /// cell's MsgPack or zlib). Asked once per worker, on the failure path only.
    pub fn unreadable_answer(&self, text: bool, data: &[u8]) -> String {
        let decoded;
        let data = if self.encoding.transforms() && !text {
            match self.encoding.decode(text, data) {
                Some(json) => {
                    decoded = json;
                    &decoded[..]
                }
                None => data,
            }
        } else {
            data
        };
        let id = match &self.message.answer {
            Some(AnswerBy::Rule { id: Some(x), .. }) => x.as_written(data),
            _ => None,
        };
        unreadable::example(id, data)
    }
}
