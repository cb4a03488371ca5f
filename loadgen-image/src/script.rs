//! The conversation, compiled once per run from the spec (`wsload_spec`'s templates,
//! matchers and extractors): the LoadTest's own, or its protocol's built-in one
//! (`wsload_spec::builtin`), alike. The steps on open, the automatic replies, the client
//! heartbeat, the measured message (and the ping) and how its answer is recognised, and the
//! pushes.
//!
//! A template becomes an [`Out`]: its literal bytes in one buffer and the places its
//! placeholders go. Captured variables are spliced in once per connection ([`Out::resolve`]);
//! per message only the sequence number, the send time and the random parts are written,
//! into the worker's arena or over the last message made ([`Prebuilt`]): no allocation per
//! message.

use crate::encoding::Encoding;
use bytes::{BufMut, Bytes, BytesMut};
use std::ops::{DerefMut, Range};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use wsload_spec::conversation::{Conversation, MeasuredMessage, Payload};
use wsload_spec::decimal::parse_u64;
use wsload_spec::fanout::TimeUnit;
use wsload_spec::json_path::Memo;
use wsload_spec::matching::{Extractor, MatchError, Matcher};
use wsload_spec::template::{PAD_BYTE, Part, Template, TemplateError, uuid_text};

mod prebuilt;
pub use prebuilt::Prebuilt;

/// How long an `expect` waits when its step gives no timeout.
pub const DEFAULT_EXPECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Messages cut from one arena block (see `message.rs`).
const ARENA_MESSAGES: usize = 16;
const ARENA_MAX: usize = 64 * 1024;

/// Why a conversation does not compile. `wsload validate` refuses these first, with the
/// same causes; here they only guard a spec that skipped validation.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("{field}: {source}")]
    Template {
        field: String,
        #[source]
        source: TemplateError,
    },
    #[error("{field}: {source}")]
    Match {
        field: String,
        #[source]
        source: MatchError,
    },
    #[error("{field}: set exactly one of text or binary")]
    Payload { field: String },
    #[error("spec.conversation.message: none (the protocol's built-in message was not filled in)")]
    NoMessage,
}

/// The compiled conversation.
#[derive(Debug, Clone)]
pub struct Script {
    pub open: Vec<Step>,
    /// A fanout subscriber's steps, once per topic (`${topic}` its name).
    pub subscribe: Vec<Step>,
    /// How a fanout subscriber reads a delivery.
    delivery: Option<DeliveryRule>,
    replies: Vec<ReplyRule>,
    heartbeat: Option<(Duration, Out)>,
    /// The measured message (`builtin::effective` gives every conversation one).
    message: Measured,
    /// The message the scenarios that time each message send, if not `message`.
    ping: Option<Measured>,
    /// How the measured message goes on the wire and its answers are read (a cell's format).
    encoding: Encoding,
    push: Option<Matcher>,
    /// Variable names, in the order steps capture them: a connection's values are kept in
    /// this order.
    vars: Vec<String>,
}

/// One step on open.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub action: Action,
}

#[derive(Debug, Clone)]
pub enum Action {
    Send(Out),
    Expect {
        matcher: Matcher,
        /// (index into the connection's variables, where the value is).
        captures: Vec<(usize, Extractor)>,
        timeout: Duration,
    },
}

/// The conversation's `delivery`, compiled.
#[derive(Debug, Clone)]
pub struct DeliveryRule {
    when: Option<Matcher>,
    sequence: Extractor,
    published_at: Option<(Extractor, TimeUnit)>,
    topic: Option<Extractor>,
}

/// What a delivery carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered<'a> {
    pub seq: u64,
    /// The publish instant, Unix microseconds (`None`: the rule reads none, or none was there).
    pub published_us: Option<u64>,
    /// The topic's name as the delivery carries it (when the rule reads one).
    pub topic: Option<&'a [u8]>,
}

/// What a server message is to a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery<'a> {
    /// Not a delivery.
    No,
    /// A delivery without a sequence number wsload can read.
    Unreadable,
    Yes(Delivered<'a>),
}

impl DeliveryRule {
    fn compile(d: &wsload_spec::conversation::Delivery) -> Result<DeliveryRule, ScriptError> {
        let at = "spec.conversation.delivery";
        let prefix = d.matches.as_ref().and_then(|m| m.prefix.as_deref());
        let x = |name: &str, c: &wsload_spec::conversation::Capture| {
            Extractor::compile(c, prefix).map_err(|source| ScriptError::Match {
                field: format!("{at}.{name}"),
                source,
            })
        };
        Ok(DeliveryRule {
            when: d
                .matches
                .as_ref()
                .map(|m| matcher(&format!("{at}.match"), m))
                .transpose()?,
            sequence: x("sequence", &d.sequence)?,
            published_at: d
                .published_at
                .as_ref()
                .map(|c| x("publishedAt", c).map(|e| (e, d.published_at_unit)))
                .transpose()?,
            topic: d.topic.as_ref().map(|c| x("topic", c)).transpose()?,
        })
    }

    /// What `data` is to a subscriber. `memo` remembers where the fields were in the last
    /// delivery, so deliveries of one shape are not walked each.
    #[inline]
    pub fn read<'a>(&self, text: bool, data: &'a [u8], memo: &mut [Memo; 2]) -> Delivery<'a> {
        if self.when.as_ref().is_some_and(|m| !m.matches(text, data)) {
            return Delivery::No;
        }
        let [seq_memo, time_memo] = memo;
        let Some(seq) = self.sequence.extract_u64_memo(data, seq_memo) else {
            return if self.when.is_some() {
                Delivery::Unreadable
            } else {
                Delivery::No
            };
        };
        let published_us = self
            .published_at
            .as_ref()
            .and_then(|(x, unit)| Some(unit.to_micros(x.extract_u64_memo(data, time_memo)?)));
        Delivery::Yes(Delivered {
            seq,
            published_us,
            topic: self.topic.as_ref().and_then(|x| x.extract(data)),
        })
    }
}

#[derive(Debug, Clone)]
struct ReplyRule {
    when: Matcher,
    send: Out,
}

#[derive(Debug, Clone)]
struct Measured {
    out: Out,
    answer: Option<AnswerBy>,
}

/// How the measured message's answers are recognised.
#[derive(Debug, Clone)]
enum AnswerBy {
    /// `answer.match` and `answer.id`.
    Rule {
        when: Option<Matcher>,
        id: Option<Extractor>,
    },
    /// `answer.echoed`: the message itself, sent back. In a MsgPack or zlib format the answer
    /// is decoded and read by `id_in_json`, the JSON field the template writes `${seq}` into.
    Echoed { id_in_json: Option<Extractor> },
}

/// The `${seq}` a template is rendered with to find the JSON field that carries it.
const PROBE_SEQ: u64 = 987_654_321;

impl Measured {
    fn compile(at: &str, m: &MeasuredMessage, vars: &[String]) -> Result<Measured, ScriptError> {
        let p = Payload {
            text: m.text.clone(),
            binary: m.binary.clone(),
        };
        let out = Out::compile(at, &p, vars)?;
        let answer = match &m.answer {
            None => None,
            Some(a) if a.echoed => Some(AnswerBy::Echoed {
                id_in_json: seq_field(&out),
            }),
            Some(a) => {
                let when = a
                    .matches
                    .as_ref()
                    .map(|mm| matcher(&format!("{at}.answer.match"), mm))
                    .transpose()?;
                let prefix = a.matches.as_ref().and_then(|mm| mm.prefix.as_deref());
                let id =
                    a.id.as_ref()
                        .map(|c| {
                            Extractor::compile(c, prefix).map_err(|source| ScriptError::Match {
                                field: format!("{at}.answer.id"),
                                source,
                            })
                        })
                        .transpose()?;
                Some(AnswerBy::Rule { when, id })
            }
        };
        Ok(Measured { out, answer })
    }
}

/// Where a JSON template writes `${seq}`, as an extractor: `None` if the template is not JSON
/// or carries no `${seq}` as a field's whole value.
fn seq_field(out: &Out) -> Option<Extractor> {
    fn find(v: &serde_json::Value, path: &mut Vec<String>) -> bool {
        let probe = PROBE_SEQ.to_string();
        match v {
            serde_json::Value::Number(n) => n.as_u64() == Some(PROBE_SEQ),
            serde_json::Value::String(s) => *s == probe,
            serde_json::Value::Object(m) => m.iter().any(|(k, v)| {
                path.push(k.clone());
                find(v, path) || path.pop().is_some_and(|_| false)
            }),
            serde_json::Value::Array(a) => a.iter().enumerate().any(|(i, v)| {
                path.push(i.to_string());
                find(v, path) || path.pop().is_some_and(|_| false)
            }),
            _ => false,
        }
    }
    let mut rendered = Vec::new();
    let fill = Fill {
        seq: PROBE_SEQ,
        ..Fill::default()
    };
    // A real send time: an empty one would leave `"ts":,`, not JSON.
    out.write_at(&mut rendered, &fill, &SendTime::now());
    let value: serde_json::Value = serde_json::from_slice(&rendered).ok()?;
    let mut path = Vec::new();
    if !find(&value, &mut path) {
        return None;
    }
    let capture = wsload_spec::conversation::Capture {
        json: Some(path.join(".")),
        regex: None,
    };
    Extractor::compile(&capture, None).ok()
}

/// What a server message is to the conversation, before it is looked at as an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// Answered automatically by reply rule `i`.
    Reply(usize),
    /// One of the server's pushes.
    Push,
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
    /// Not an answer.
    No,
}

fn payload<'a>(field: &str, p: &'a Payload) -> Result<(bool, &'a str), ScriptError> {
    match (&p.text, &p.binary) {
        (Some(t), None) => Ok((true, t)),
        (None, Some(b)) => Ok((false, b)),
        _ => Err(ScriptError::Payload {
            field: field.to_string(),
        }),
    }
}

fn matcher(field: &str, m: &wsload_spec::conversation::Match) -> Result<Matcher, ScriptError> {
    Matcher::compile(m).map_err(|source| ScriptError::Match {
        field: field.to_string(),
        source,
    })
}

/// The name under which a fanout's connection knows its topic (`${topic}`), variable 0.
pub const TOPIC_VAR: &str = "topic";

/// Steps of `list` (`open`, `subscribe`), in order; captures are added to `vars`.
fn compile_steps(
    list: &str,
    steps: &[wsload_spec::conversation::Step],
    vars: &mut Vec<String>,
) -> Result<Vec<Step>, ScriptError> {
    let mut out = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let at = format!("spec.conversation.{list}[{i}]");
        let action = match (&step.send, &step.expect) {
            (Some(send), _) => Action::Send(Out::compile(&format!("{at}.send"), send, vars)?),
            (None, Some(expect)) => {
                let matcher = matcher(&format!("{at}.expect"), expect)?;
                let mut captures = Vec::new();
                for (name, capture) in &step.capture {
                    let x = Extractor::compile(capture, expect.prefix.as_deref()).map_err(
                        |source| ScriptError::Match {
                            field: format!("{at}.capture.{name}"),
                            source,
                        },
                    )?;
                    vars.push(name.clone());
                    captures.push((vars.len() - 1, x));
                }
                Action::Expect {
                    matcher,
                    captures,
                    timeout: step.timeout.map_or(DEFAULT_EXPECT_TIMEOUT, |t| t.get()),
                }
            }
            (None, None) => {
                return Err(ScriptError::Payload {
                    field: format!("{at}.send"),
                });
            }
        };
        out.push(Step {
            name: step.name.clone(),
            action,
        });
    }
    Ok(out)
}

impl Script {
    pub fn compile(c: &Conversation) -> Result<Script, ScriptError> {
        // A fanout's connections know their topic from the start: variable 0 (TOPIC_VAR).
        let mut vars: Vec<String> = if c.delivery.is_some() {
            vec![TOPIC_VAR.to_string()]
        } else {
            Vec::new()
        };
        let open = compile_steps("open", &c.open, &mut vars)?;
        let subscribe = compile_steps("subscribe", &c.subscribe, &mut vars)?;
        let delivery = c.delivery.as_ref().map(DeliveryRule::compile).transpose()?;
        Self::compile_rest(c, open, subscribe, delivery, vars)
    }

    fn compile_rest(
        c: &Conversation,
        open: Vec<Step>,
        subscribe: Vec<Step>,
        delivery: Option<DeliveryRule>,
        vars: Vec<String>,
    ) -> Result<Script, ScriptError> {
        let replies = c
            .replies
            .iter()
            .enumerate()
            .map(|(j, r)| {
                let at = format!("spec.conversation.replies[{j}]");
                Ok(ReplyRule {
                    when: matcher(&format!("{at}.when"), &r.when)?,
                    send: Out::compile(&format!("{at}.send"), &r.send, &[])?,
                })
            })
            .collect::<Result<_, ScriptError>>()?;
        let heartbeat = match &c.heartbeat {
            Some(h) => Some((
                h.every.get(),
                Out::compile("spec.conversation.heartbeat.send", &h.send, &[])?,
            )),
            None => None,
        };
        let Some(message) = &c.message else {
            return Err(ScriptError::NoMessage);
        };
        let message = Measured::compile("spec.conversation.message", message, &vars)?;
        let ping = c
            .ping
            .as_ref()
            .map(|m| Measured::compile("spec.conversation.ping", m, &vars))
            .transpose()?;
        let push = c
            .push
            .as_ref()
            .map(|m| matcher("spec.conversation.push", m))
            .transpose()?;
        Ok(Script {
            open,
            subscribe,
            delivery,
            replies,
            heartbeat,
            message,
            ping,
            encoding: Encoding::AsWritten,
            push,
            vars,
        })
    }

    /// The conversation as a cell holds it: the message its scenario sends (the `ping` when
    /// it `times_each` message and there is one, else the measured message) in the cell's
    /// encoding, made once if it is the same for every message at the cell's `size`.
    pub fn for_cell(&self, times_each: bool, encoding: Encoding, size: usize) -> Script {
        let mut s = self.clone();
        if let Some(ping) = s.ping.take()
            && times_each
        {
            s.message = ping;
        }
        s.message.out.encode_as(encoding, size);
        s.encoding = encoding;
        s
    }

    /// How a fanout subscriber reads a delivery (`None` outside a fanout).
    pub fn delivery(&self) -> Option<&DeliveryRule> {
        self.delivery.as_ref()
    }

    /// How many variables a connection captures on open.
    pub fn var_count(&self) -> usize {
        self.vars.len()
    }

    /// What a server message is to the conversation: a reply rule's, a push, or neither.
    /// Asked of every message a counting read takes: inlined there.
    #[inline]
    pub fn incoming(&self, text: bool, data: &[u8]) -> Incoming {
        if let Some(i) = self.replies.iter().position(|r| r.when.matches(text, data)) {
            return Incoming::Reply(i);
        }
        if self.push.as_ref().is_some_and(|p| p.matches(text, data)) {
            return Incoming::Push;
        }
        Incoming::Other
    }

    /// Reply rule `i`'s answer (rendered now: a reply may carry a placeholder).
    pub fn reply(&self, i: usize, arena: &mut BytesMut, fill: &Fill) -> Option<(bool, Bytes)> {
        let out = &self.replies.get(i)?.send;
        Some((out.text, out.bytes(arena, fill)))
    }

    /// The client heartbeat: how often, and what.
    pub fn heartbeat(&self) -> Option<(Duration, &Out)> {
        self.heartbeat.as_ref().map(|(every, out)| (*every, out))
    }

    /// Whether anything answers the measured message (else nothing is awaited).
    pub fn is_answered(&self) -> bool {
        self.message.answer.is_some()
    }

    /// How long the measured message is at `size`, about (exact when every message is alike):
    /// what a window of answers in flight may hold.
    pub fn message_len(&self, size: usize) -> usize {
        let out = &self.message.out;
        out.constant().map_or_else(
            || size.max(out.literal.len() + 20 * out.pieces.len()),
            Bytes::len,
        )
    }

    /// The measured message as connection with these captured `vars` sends it: `shared` (see
    /// [`Script::shared_message`]) when it uses no variable.
    pub fn message_for(&self, vars: &[Bytes], shared: &Option<Arc<Out>>) -> Arc<Out> {
        match shared {
            Some(out) => out.clone(),
            None => Arc::new(self.message.out.resolve(vars)),
        }
    }

    /// The measured message for connections that capture nothing it uses.
    pub fn shared_message(&self) -> Option<Arc<Out>> {
        let out = &self.message.out;
        (!out.uses_vars()).then(|| Arc::new(out.resolve(&[])))
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
                Some(x) => by_id(x.extract_u64_memo(data, memo)),
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
                match id {
                    None => Recognised::Next,
                    Some(x) => by_id(x.extract_u64_memo(data, memo)),
                }
            }
        }
    }
}

/// An answer by the `${seq}` read from it, if it is one.
#[inline]
fn by_id(seq: Option<u64>) -> Recognised {
    seq.map_or(Recognised::No, Recognised::Id)
}

/// How many digits `n` has in decimal.
fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// `${sendTime}` as written: microseconds since the Unix epoch, in decimal.
#[derive(Debug, Clone, Copy, Default)]
pub struct SendTime {
    us: u64,
    digits: [u8; 20],
    len: u8,
}

/// Compared once per message made (see [`Prebuilt`]): the digits follow from the number, and
/// the length tells the default (no digits) from zero.
impl PartialEq for SendTime {
    fn eq(&self, other: &SendTime) -> bool {
        self.us == other.us && self.len == other.len
    }
}

impl Eq for SendTime {}

impl SendTime {
    /// The shard's wall clock (`clock::unix_micros`, which the clock test hook shifts), as
    /// the conductor's clock offsets are measured against.
    pub fn now() -> SendTime {
        SendTime::from_micros(crate::clock::unix_micros())
    }

    /// `us` microseconds since the Unix epoch, written as `${sendTime}` writes them.
    pub fn from_micros(us: u64) -> SendTime {
        let mut b = itoa::Buffer::new();
        let text = b.format(us).as_bytes();
        let mut digits = [0u8; 20];
        digits[..text.len()].copy_from_slice(text);
        SendTime {
            us,
            digits,
            len: text.len() as u8,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[..usize::from(self.len)]
    }
}

/// The per-message values of a template.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fill {
    pub conn: u64,
    pub seq: u64,
    /// What `${pad}` fills to.
    pub size: usize,
}

/// One piece of a compiled template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(Range<usize>),
    Conn,
    Seq,
    SendTime,
    Random,
    Hex(usize),
    Uuid,
    Pad,
    Var(usize),
}

/// A number a message carries whose digits change from one message to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Number {
    Conn,
    Seq,
    SendTime,
}

/// A template ready to send: literal bytes in one buffer, the pieces in order.
#[derive(Debug, Clone)]
pub struct Out {
    text: bool,
    literal: Bytes,
    pieces: Box<[Piece]>,
    /// How it goes on the wire.
    encoding: Encoding,
    /// The message, encoded, when every message is the same at the cell's size (literal
    /// bytes and a pad): made once.
    constant: Option<Bytes>,
    /// What the pad's length is computed from, once per template rather than per message.
    shape: Shape,
}

/// A template's length, as far as it is known before a message is made: the fixed bytes,
/// and how many of each number whose width varies.
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    fixed: usize,
    conns: usize,
    seqs: usize,
    times: usize,
    pad: bool,
    random: bool,
    /// It draws random parts (`${random}`, `${hex}`, `${uuid}`): no message is the last
    /// one with its numbers written over.
    drawn: bool,
}

impl Shape {
    fn of(pieces: &[Piece]) -> Shape {
        let mut s = Shape::default();
        for p in pieces {
            match p {
                Piece::Lit(r) => s.fixed += r.len(),
                Piece::Conn => s.conns += 1,
                Piece::Seq => s.seqs += 1,
                Piece::SendTime => s.times += 1,
                Piece::Random => s.random = true,
                Piece::Hex(n) => {
                    s.fixed += *n;
                    s.drawn = true;
                }
                Piece::Uuid => {
                    s.fixed += 36;
                    s.drawn = true;
                }
                Piece::Pad => s.pad = true,
                Piece::Var(_) => {}
            }
        }
        s.drawn |= s.random;
        s
    }
}

impl Out {
    fn compile(field: &str, p: &Payload, vars: &[String]) -> Result<Out, ScriptError> {
        let (text, source) = payload(field, p)?;
        let names: Vec<&str> = vars.iter().map(String::as_str).collect();
        let t = Template::parse(source, &names).map_err(|source| ScriptError::Template {
            field: field.to_string(),
            source,
        })?;
        Ok(Out::of(text, &t, vars))
    }

    fn of(text: bool, t: &Template, vars: &[String]) -> Out {
        let mut literal = Vec::new();
        let pieces = t
            .parts()
            .iter()
            .map(|p| match p {
                Part::Literal(r) => {
                    let start = literal.len();
                    literal.extend_from_slice(t.literal(r));
                    Piece::Lit(start..literal.len())
                }
                Part::Conn => Piece::Conn,
                Part::Seq => Piece::Seq,
                Part::SendTime => Piece::SendTime,
                Part::Random => Piece::Random,
                Part::Hex(n) => Piece::Hex(*n),
                Part::Uuid => Piece::Uuid,
                Part::Pad => Piece::Pad,
                Part::Var(name) => Piece::Var(vars.iter().position(|v| **v == **name).unwrap_or(0)),
            })
            .collect();
        Out::new(text, literal.into(), pieces)
    }

    fn new(text: bool, literal: Bytes, pieces: Box<[Piece]>) -> Out {
        Out {
            text,
            literal,
            shape: Shape::of(&pieces),
            pieces,
            encoding: Encoding::AsWritten,
            constant: None,
        }
    }

    /// Whether it goes as a text frame (else binary).
    pub fn is_text(&self) -> bool {
        self.encoding.text(self.text)
    }

    /// Sets how it goes on the wire, and makes it once if every message at `size` is alike.
    fn encode_as(&mut self, encoding: Encoding, size: usize) {
        self.encoding = encoding;
        self.constant = None;
        let alike = self
            .pieces
            .iter()
            .all(|p| matches!(p, Piece::Lit(_) | Piece::Pad));
        if alike {
            let mut rendered = Vec::new();
            self.write_at(
                &mut rendered,
                &Fill {
                    size,
                    ..Fill::default()
                },
                &SendTime::default(),
            );
            self.constant = Some(if encoding.transforms() {
                encoding.encode(&rendered).into()
            } else {
                rendered.into()
            });
        }
    }

    /// The message every message is, when they are all alike (see [`Out::encode_as`]).
    pub fn constant(&self) -> Option<&Bytes> {
        self.constant.as_ref()
    }

    /// Whether a message is made, then encoded (MsgPack, zlib): not patched in place.
    pub fn transforms(&self) -> bool {
        self.encoding.transforms()
    }

    /// Whether it splices captured variables (see [`Out::resolve`]).
    pub fn uses_vars(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Var(_)))
    }

    /// Whether every message is the same bytes (then they are shared, not copied).
    fn is_fixed(&self) -> bool {
        self.pieces.iter().all(|p| matches!(p, Piece::Lit(_)))
    }

    /// The same template with the connection's captured values spliced into its literal
    /// bytes, once.
    pub fn resolve(&self, vars: &[Bytes]) -> Out {
        let mut literal = Vec::new();
        let mut pieces: Vec<Piece> = Vec::with_capacity(self.pieces.len());
        for p in self.pieces.iter() {
            let bytes = match p {
                Piece::Lit(r) => &self.literal[r.clone()],
                Piece::Var(i) => vars.get(*i).map_or(&[][..], |v| &v[..]),
                other => {
                    pieces.push(other.clone());
                    continue;
                }
            };
            let start = literal.len();
            literal.extend_from_slice(bytes);
            // Adjacent literals are one copy per message.
            match pieces.last_mut() {
                Some(Piece::Lit(prev)) if prev.end == start => prev.end = literal.len(),
                _ => pieces.push(Piece::Lit(start..literal.len())),
            }
        }
        let mut out = Out::new(self.text, literal.into(), pieces.into());
        out.encoding = self.encoding;
        out.constant = self.constant.clone();
        out
    }

    /// One message's bytes, written into `arena` (or shared, when fixed).
    pub fn bytes(&self, arena: &mut BytesMut, fill: &Fill) -> Bytes {
        let time = if self.has_time() && self.constant.is_none() {
            SendTime::now()
        } else {
            SendTime::default()
        };
        self.bytes_at(arena, fill, &time)
    }

    /// [`Out::bytes`] with `${sendTime}` given (a publish's intended instant).
    pub fn bytes_at(&self, arena: &mut BytesMut, fill: &Fill, time: &SendTime) -> Bytes {
        if let Some(c) = &self.constant {
            return c.clone();
        }
        if self.encoding.transforms() {
            let mut rendered = Vec::with_capacity(self.literal.len() + 64 + fill.size);
            self.write_at(&mut rendered, fill, time);
            return self.encoding.encode(&rendered).into();
        }
        if self.is_fixed() {
            return self.literal.clone();
        }
        let want = self.literal.len() + 64 + fill.size;
        if arena.capacity() - arena.len() < want {
            arena.reserve((want * ARENA_MESSAGES).min(ARENA_MAX).max(want));
        }
        self.write_at(arena, fill, time);
        arena.split().freeze()
    }

    /// Appends one message to `buf`: the literal bytes, the placeholders' values written in
    /// place, and the pad (inserted once the rest is known). `${sendTime}` is now.
    pub fn write<B>(&self, buf: &mut B, fill: &Fill)
    where
        B: BufMut + DerefMut<Target = [u8]>,
    {
        let time = if self.has_time() {
            SendTime::now()
        } else {
            SendTime::default()
        };
        self.write_at(buf, fill, &time);
    }

    /// How long `${pad}` is in the message for `fill`, known before it is written (the
    /// numbers' digits counted); `None` without a pad, or with a `${random}` (known once drawn).
    fn pad_len(&self, fill: &Fill, time: &SendTime) -> Option<usize> {
        let s = &self.shape;
        if !s.pad || s.random {
            return None;
        }
        let len = s.fixed
            + s.conns * decimal_len(fill.conn)
            + s.seqs * decimal_len(fill.seq)
            + s.times * time.as_bytes().len();
        Some(fill.size.saturating_sub(len))
    }

    /// Whether a message can be made from the last by writing its numbers over (see
    /// [`Prebuilt`]): not when it draws random parts, or when its pad waits for them.
    fn patchable(&self) -> bool {
        !self.shape.drawn
    }

    /// Whether `data`, a text (`text`) or binary frame, is a message of this template sent
    /// back unchanged: every literal byte equal, each placeholder of its shape (digits, hex,
    /// a UUID, the pad's filler; a captured value up to the next literal). `Some(seq)` with
    /// the `${seq}` it carries (`None` inside when the template has none), `None` if it is
    /// not one.
    pub fn echoed_seq(&self, text: bool, data: &[u8]) -> Option<Option<u64>> {
        if text != self.is_text() {
            return None;
        }
        let mut at = 0;
        let mut seq = None;
        let run = |from: usize, ok: fn(&u8) -> bool| {
            from + data[from..].iter().take_while(|b| ok(b)).count()
        };
        for (i, p) in self.pieces.iter().enumerate() {
            let end = match p {
                Piece::Lit(r) => {
                    let lit = &self.literal[r.clone()];
                    data.get(at..)?.starts_with(lit).then_some(at + lit.len())?
                }
                Piece::Conn | Piece::Seq | Piece::SendTime | Piece::Random => {
                    let end = run(at, u8::is_ascii_digit);
                    if end == at || end - at > 20 {
                        return None;
                    }
                    if *p == Piece::Seq {
                        seq = Some(parse_u64(&data[at..end])?);
                    }
                    end
                }
                Piece::Hex(n) => {
                    let end = at + n;
                    data.get(at..end)?
                        .iter()
                        .all(u8::is_ascii_hexdigit)
                        .then_some(end)?
                }
                Piece::Uuid => {
                    let end = at + 36;
                    data.get(at..end)?
                        .iter()
                        .all(|b| b.is_ascii_hexdigit() || *b == b'-')
                        .then_some(end)?
                }
                Piece::Pad => run(at, |b| *b == PAD_BYTE),
                Piece::Var(_) => match self.pieces.get(i + 1) {
                    Some(Piece::Lit(r)) => {
                        let next = &self.literal[r.clone()];
                        at + data
                            .get(at..)?
                            .windows(next.len())
                            .position(|w| w == next)?
                    }
                    _ => data.len(),
                },
            };
            at = end;
        }
        (at == data.len()).then_some(seq)
    }

    /// Whether it carries `${sendTime}` (then a sender reads the clock for it).
    pub fn has_time(&self) -> bool {
        self.shape.times > 0
    }

    /// [`Out::write`] with `${sendTime}` given: a burst of messages made together shares one
    /// clock read and one formatting of it.
    pub fn write_at<B>(&self, buf: &mut B, fill: &Fill, time: &SendTime)
    where
        B: BufMut + DerefMut<Target = [u8]>,
    {
        self.write_recording(buf, fill, time, &mut |_, _| {});
    }

    /// [`Out::write_at`], telling `at` where each number went (its piece and offset).
    fn write_recording<B>(
        &self,
        buf: &mut B,
        fill: &Fill,
        time: &SendTime,
        at: &mut dyn FnMut(Number, usize),
    ) where
        B: BufMut + DerefMut<Target = [u8]>,
    {
        let start = buf.len();
        let pad = self.pad_len(fill, time);
        let mut pad_at = None;
        let mut digits = itoa::Buffer::new();
        for p in self.pieces.iter() {
            match p {
                Piece::Lit(r) => buf.put_slice(&self.literal[r.clone()]),
                Piece::Conn => {
                    at(Number::Conn, buf.len() - start);
                    buf.put_slice(digits.format(fill.conn).as_bytes());
                }
                Piece::Seq => {
                    at(Number::Seq, buf.len() - start);
                    buf.put_slice(digits.format(fill.seq).as_bytes());
                }
                Piece::SendTime => {
                    at(Number::SendTime, buf.len() - start);
                    buf.put_slice(time.as_bytes());
                }
                Piece::Random => buf.put_slice(digits.format(rand::random::<u32>()).as_bytes()),
                Piece::Hex(n) => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    let mut left = *n;
                    while left > 0 {
                        let r: u64 = rand::random();
                        for k in 0..left.min(16) {
                            buf.put_u8(HEX[((r >> (4 * k)) & 0xF) as usize]);
                        }
                        left = left.saturating_sub(16);
                    }
                }
                Piece::Uuid => buf.put_slice(&uuid_text(rand::random(), rand::random())),
                Piece::Pad => match pad {
                    Some(n) => buf.put_bytes(PAD_BYTE, n),
                    None => pad_at = Some(buf.len()),
                },
                Piece::Var(_) => {}
            }
        }
        // A `${random}` is as long as its digits: the pad goes in once the rest is written.
        if let Some(at) = pad_at {
            let fill_len = fill.size.saturating_sub(buf.len() - start);
            if fill_len > 0 {
                buf.put_bytes(PAD_BYTE, fill_len);
                buf[at..].rotate_right(fill_len);
            }
        }
    }

    /// One message, as a frame of the template's kind.
    pub fn message(&self, arena: &mut BytesMut, fill: &Fill) -> Message {
        self.frame(self.bytes(arena, fill))
    }

    /// [`Out::message`] with `${sendTime}` given (a publish's intended instant).
    pub fn message_at(&self, arena: &mut BytesMut, fill: &Fill, time: &SendTime) -> Message {
        self.frame(self.bytes_at(arena, fill, time))
    }

    fn frame(&self, bytes: Bytes) -> Message {
        if self.is_text() {
            // Literals are a template's UTF-8 and captures come from text frames or are made
            // valid when captured; a binary capture that is not text sends as binary.
            match std::str::from_utf8(&bytes) {
                Ok(_) => Message::Text(Utf8Bytes::try_from(bytes).unwrap_or_default()),
                Err(_) => Message::Binary(bytes),
            }
        } else {
            Message::Binary(bytes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_spec::LoadTest;

    fn script(conversation: &str) -> Script {
        let yaml = format!(
            "  target: {{url: 'ws://127.0.0.1:1/'}}\n  scenario: pingpong\n  conversation:\n{conversation}"
        );
        let lt = LoadTest::from_spec_yaml(&yaml, "t").expect("valid");
        Script::compile(lt.spec.conversation.as_ref().expect("conversation")).expect("compiles")
    }

    fn text(b: &Bytes) -> &str {
        std::str::from_utf8(b).expect("utf8")
    }

    #[test]
    fn a_message_writes_only_its_placeholders_and_pads_to_size() {
        let s = script(
            "    message:\n      text: '{\"id\":${seq},\"c\":${conn},\"p\":\"${pad}\"}'\n      answer: {id: {json: id}}\n",
        );
        let out = s.shared_message().expect("shared: no variables");
        let mut arena = BytesMut::new();
        let fill = Fill {
            conn: 7,
            seq: 12,
            size: 40,
        };
        let a = out.bytes(&mut arena, &fill);
        assert_eq!(
            text(&a),
            format!("{{\"id\":12,\"c\":7,\"p\":\"{}\"}}", "x".repeat(18))
        );
        assert_eq!(a.len(), 40);
        // The counting loop's path, into a reused vector: the same bytes.
        let mut v = b"old".to_vec();
        v.clear();
        out.write(&mut v, &fill);
        assert_eq!(&v[..], &a[..]);
        let b = out.bytes(&mut arena, &Fill { seq: 13, ..fill });
        // Cut from the same arena block: no allocation per message.
        assert_eq!(b.as_ptr() as usize - a.as_ptr() as usize, 40);
        assert_eq!(
            s.recognise(true, br#"{"id":12,"result":1}"#),
            Recognised::Id(12)
        );
        assert_eq!(s.recognise(true, br#"{"result":1}"#), Recognised::No);
        assert_eq!(s.recognise(true, br#"{"id":"x1"}"#), Recognised::No);
        // Answers of one shape, read through one memo: each by the id it carries.
        let mut memo = Memo::default();
        for (answer, seen) in [
            (&br#"{"id":41,"result":1}"#[..], Recognised::Id(41)),
            (br#"{"id":42,"result":1}"#, Recognised::Id(42)),
            (br#"{"id":"43","result":1}"#, Recognised::Id(43)),
            (br#"{"id":44x,"result":1}"#, Recognised::No),
            (br#"{"id":-1,"result":1}"#, Recognised::No),
            (br#"{"id":1000000,"result":1}"#, Recognised::Id(1_000_000)),
        ] {
            assert_eq!(s.recognise_with(true, answer, &mut memo), seen);
        }
    }

    #[test]
    fn an_echoed_answer_is_the_message_as_sent() {
        let s = script(
            "    message:\n      text: '{\"id\":${seq},\"ts\":${sendTime},\"h\":\"${hex:4}\",\"d\":\"${pad}\"}'\n      answer: {echoed: true}\n",
        );
        let out = s.shared_message().expect("shared");
        let fill = Fill {
            conn: 1,
            seq: 77,
            size: 64,
        };
        let sent = out.bytes(&mut BytesMut::new(), &fill);
        assert_eq!(s.recognise(true, &sent), Recognised::Id(77));
        // A literal or pad byte changed, one byte more or less, the other frame kind: not an
        // answer. (A send time's digits cannot be checked: any digits are one.)
        for i in [0, 2, sent.len() - 5, sent.len() - 1] {
            let mut changed = sent.to_vec();
            changed[i] ^= 0x01;
            assert_eq!(s.recognise(true, &changed), Recognised::No, "byte {i}");
        }
        assert_eq!(s.recognise(true, &sent[..sent.len() - 1]), Recognised::No);
        let mut longer = sent.to_vec();
        longer.push(b'}');
        assert_eq!(s.recognise(true, &longer), Recognised::No);
        assert_eq!(s.recognise(false, &sent), Recognised::No);
        // Another message of the template (other digits, a shorter pad) is one.
        let other = out.bytes(
            &mut BytesMut::new(),
            &Fill {
                seq: 123_456,
                ..fill
            },
        );
        assert_eq!(s.recognise(true, &other), Recognised::Id(123_456));
        // In MsgPack, decoded and read by the field the template writes ${seq} into.
        let mp = s.for_cell(false, Encoding::Msgpack, 64);
        let wire = mp
            .shared_message()
            .expect("shared")
            .bytes(&mut BytesMut::new(), &fill);
        assert!(wire.starts_with(b"M:"));
        assert_eq!(mp.recognise(false, &wire), Recognised::Id(77));
    }

    #[test]
    fn captured_values_are_spliced_once_per_connection() {
        let s = script(
            "    open:\n      - {name: hello, expect: {prefix: '0'}, capture: {sid: {json: sid}}}\n    message: {text: '42[\"m\",\"${sid}\",${seq}]'}\n",
        );
        assert_eq!(s.var_count(), 1);
        assert!(s.shared_message().is_none());
        let out = s.message_for(&[Bytes::from_static(b"abc")], &None);
        assert_eq!(out.pieces.len(), 3, "{:?}", out.pieces);
        let m = out.bytes(
            &mut BytesMut::new(),
            &Fill {
                seq: 5,
                ..Fill::default()
            },
        );
        assert_eq!(text(&m), r#"42["m","abc",5]"#);
        assert!(!s.is_answered());
    }

    #[test]
    fn replies_and_pushes_are_told_apart_from_answers() {
        let s = script(
            "    replies:\n      - {when: {equals: '2'}, send: {text: '3'}}\n    push: {prefix: '42[\"tick\"'}\n    message:\n      text: '42${seq}[\"echo\"]'\n      answer: {match: {prefix: '43'}}\n",
        );
        assert_eq!(s.incoming(true, b"2"), Incoming::Reply(0));
        assert_eq!(s.incoming(true, br#"42["tick",1]"#), Incoming::Push);
        assert_eq!(s.incoming(true, b"431[]"), Incoming::Other);
        assert_eq!(s.recognise(true, b"431[]"), Recognised::Next);
        assert_eq!(s.recognise(true, b"2"), Recognised::No);
        let (t, r) = s
            .reply(0, &mut BytesMut::new(), &Fill::default())
            .expect("reply");
        assert!(t);
        assert_eq!(&r[..], b"3");
    }

    #[test]
    fn random_parts_have_their_shape() {
        let s = script("    message: {text: '${uuid} ${hex:20} ${random} ${sendTime}'}\n");
        let out = s.shared_message().expect("shared");
        let m = out.bytes(&mut BytesMut::new(), &Fill::default());
        let f: Vec<&str> = text(&m).split(' ').collect();
        assert_eq!(f[0].len(), 36);
        assert_eq!(f[1].len(), 20);
        assert!(f[1].bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(f[2].parse::<u32>().is_ok());
        assert!(f[3].parse::<u64>().expect("micros") > 1_600_000_000_000_000);
        assert_eq!(
            [0, 9, 10, 99, 100, u64::MAX].map(decimal_len),
            [1, 1, 2, 2, 3, 20]
        );
        // A pad beside a random number of unknown length still fills to the size.
        let s = script("    message: {text: '${random}:${pad}', answer: {}}\n");
        let out = s.shared_message().expect("shared");
        let fill = Fill {
            size: 30,
            ..Fill::default()
        };
        assert_eq!(out.bytes(&mut BytesMut::new(), &fill).len(), 30);
    }
}
