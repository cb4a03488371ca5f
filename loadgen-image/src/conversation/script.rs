//! The compiled conversation ([`Script`]): the steps on open and on subscribe, the automatic
//! replies, the client heartbeat, the measured message and the ping with how their answers
//! are recognised, the pushes; and the copy a cell holds, in the cell's format and size.

use super::delivery::DeliveryRule;
use super::encoding::Encoding;
use super::error::{ScriptError, matcher};
use super::out::{Fill, Out, SendTime};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Duration;
use wsload_spec::conversation::{Conversation, MeasuredMessage};
use wsload_spec::matching::{Extractor, Matcher};
use wsload_spec::template::bytes::unwrap_seq;

/// How long an `expect` waits when its step gives no timeout.
pub const DEFAULT_EXPECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The compiled conversation.
#[derive(Debug, Clone)]
pub struct Script {
    pub open: Vec<Step>,
    /// A fanout subscriber's steps, once per topic (`${topic}` its name).
    pub subscribe: Vec<Step>,
    /// A fanout subscriber's steps when it comes back with a position, instead of those two.
    pub resume: Vec<Step>,
    /// The variable `resume` knows the position as (`${resumeFrom}`), when deliveries carry
    /// one.
    pub resume_from: Option<usize>,
    /// How a fanout subscriber reads a delivery.
    pub(super) delivery: Option<DeliveryRule>,
    pub(super) replies: Vec<ReplyRule>,
    pub(super) heartbeat: Option<(Duration, Out)>,
    /// The measured message (`builtin::effective` gives every conversation one).
    pub(super) message: Measured,
    /// The message the scenarios that time each message send, if not `message`.
    pub(super) ping: Option<Measured>,
    /// How the measured message goes on the wire and its answers are read (a cell's format).
    pub(super) encoding: Encoding,
    /// The push rules, `push` first (unnamed) then `pushes`: a push is counted by its rule's
    /// index, the names kept here for the end of the cell.
    pub(super) pushes: Vec<PushBy>,
    /// Variable names, in the order steps capture them: a connection's values are kept in
    /// this order.
    pub(super) vars: Vec<String>,
    /// What `${pad}` fills a step's message to: the spec's `message.size`, whatever a cell's
    /// size (set by the plan; 0 until then).
    pub open_size: usize,
    /// How the server packs several messages into a frame: each connection's reads hand
    /// every part on as a message of its own (see `wsload_ws::split`).
    pub split: Option<wsload_ws::Split>,
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

#[derive(Debug, Clone)]
pub(super) struct ReplyRule {
    pub(super) when: Matcher,
    pub(super) send: Out,
    /// `when` as the spec wrote it (JSON): what a `reply_loop`'s evidence names.
    pub(super) when_text: String,
}

/// A push rule: which messages, and what they are counted under (`None`: `push`, counted in
/// the total only).
#[derive(Debug, Clone)]
pub(super) struct PushBy {
    pub(super) when: Matcher,
    pub(super) name: Option<String>,
}

#[derive(Debug, Clone)]
pub(super) struct Measured {
    pub(super) out: Out,
    pub(super) answer: Option<AnswerBy>,
    /// How many ids an answer can carry before they repeat, when the message writes its
    /// `${seq}` in binary narrower than 8 bytes (MQTT's 16-bit packet id): ids wrap.
    pub(super) cycle: Option<u64>,
}

/// How the measured message's answers are recognised.
#[derive(Debug, Clone)]
pub(super) enum AnswerBy {
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
        let out = Out::compile(at, &m.payload(), vars)?;
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
        // Ids wrap where an answer carries the `${seq}` as the message writes it in binary:
        // a field read at an offset, or an echo without the decimal one.
        let cycle = match &answer {
            Some(AnswerBy::Rule { id: Some(x), .. }) if x.is_binary() => out.seq_cycle(),
            Some(AnswerBy::Echoed { .. }) if !out.seq_in_digits() => out.seq_cycle(),
            _ => None,
        };
        Ok(Measured { out, answer, cycle })
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
        ..Default::default()
    };
    Extractor::compile(&capture, None).ok()
}

/// The name under which a fanout's connection knows its topic (`${topic}`), variable 0.
pub const TOPIC_VAR: &str = "topic";
use wsload_spec::conversation::RESUME_FROM_VAR;

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
                    // A name captured before (by `open`, for `resume`) is taken anew.
                    let at = match vars.iter().position(|v| v == name) {
                        Some(at) => at,
                        None => {
                            vars.push(name.clone());
                            vars.len() - 1
                        }
                    };
                    captures.push((at, x));
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

/// `conversation.split` as the connection takes it.
fn split(s: &wsload_spec::conversation::Split) -> Result<wsload_ws::Split, ScriptError> {
    use wsload_spec::conversation::PacketLength;
    match (&s.separator, &s.json_array, &s.packets) {
        (Some(sep), None, None) => Ok(wsload_ws::Split::Separator(sep.as_bytes().into())),
        (None, Some(a), None) => Ok(wsload_ws::Split::JsonArray {
            prefix: a.prefix.as_bytes().into(),
        }),
        (None, None, Some(p)) => Ok(wsload_ws::Split::Packets {
            at: usize::from(p.at),
            length: match p.length {
                PacketLength::Varint => wsload_ws::Length::Varint,
                PacketLength::U8 => wsload_ws::Length::Fixed(1),
                PacketLength::U16 => wsload_ws::Length::Fixed(2),
                PacketLength::U32 => wsload_ws::Length::Fixed(4),
            },
        }),
        _ => Err(ScriptError::Split),
    }
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
        let resume_from = delivery
            .as_ref()
            .is_some_and(DeliveryRule::has_position)
            .then(|| {
                vars.push(RESUME_FROM_VAR.to_string());
                vars.len() - 1
            });
        let resume = compile_steps("resume", &c.resume, &mut vars)?;
        Self::compile_rest(c, [open, subscribe, resume], resume_from, delivery, vars)
    }

    fn compile_rest(
        c: &Conversation,
        [open, subscribe, resume]: [Vec<Step>; 3],
        resume_from: Option<usize>,
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
                    when_text: serde_json::to_string(&r.when).unwrap_or_default(),
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
        let unnamed = c.push.iter().map(|m| {
            Ok(PushBy {
                when: matcher("spec.conversation.push", m)?,
                name: None,
            })
        });
        let named = c.pushes.iter().enumerate().map(|(i, p)| {
            Ok(PushBy {
                when: matcher(&format!("spec.conversation.pushes[{i}].match"), &p.matches)?,
                name: Some(p.name.clone()),
            })
        });
        let pushes: Vec<PushBy> = unnamed.chain(named).collect::<Result<_, ScriptError>>()?;
        // A worker counts pushes in a fixed array by rule index.
        if pushes.len() > wsload_spec::conversation::MAX_PUSH_RULES {
            return Err(ScriptError::TooManyPushRules {
                rules: pushes.len(),
            });
        }
        Ok(Script {
            open,
            subscribe,
            resume,
            resume_from,
            delivery,
            replies,
            heartbeat,
            message,
            ping,
            encoding: Encoding::AsWritten,
            pushes,
            vars,
            open_size: 0,
            split: c.split.as_ref().map(split).transpose()?,
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

    /// The name of the connection's variable `i` (its capture's, or `topic`).
    pub fn var_name(&self, i: usize) -> &str {
        self.vars.get(i).map_or("?", String::as_str)
    }

    /// How many variables a connection captures on open.
    pub fn var_count(&self) -> usize {
        self.vars.len()
    }

    /// Reply rule `i`'s answer (rendered now: a reply may carry a placeholder).
    pub fn reply(&self, i: usize, arena: &mut BytesMut, fill: &Fill) -> Option<(bool, Bytes)> {
        let out = &self.replies.get(i)?.send;
        Some((out.text, out.bytes(arena, fill)))
    }

    /// Reply rule `i`'s `when`, as the spec wrote it.
    pub fn reply_when(&self, i: usize) -> &str {
        self.replies.get(i).map_or("", |r| r.when_text.as_str())
    }

    /// The push rules' names by index (`None`: the unnamed `push`): what a worker's pushes,
    /// counted by rule index, are named by at its end.
    pub fn push_names(&self) -> impl Iterator<Item = Option<&str>> {
        self.pushes.iter().map(|p| p.name.as_deref())
    }

    /// The client heartbeat: how often, and what.
    pub fn heartbeat(&self) -> Option<(Duration, &Out)> {
        self.heartbeat.as_ref().map(|(every, out)| (*every, out))
    }

    /// The `${seq}` of the message an answer carrying `id` answers, `last` the latest sent:
    /// `id` itself, or where the message writes its `${seq}` in binary narrower than 8 bytes
    /// (they wrap), the latest message written with it. `None` if no message sent has it.
    #[inline]
    pub fn sent_seq(&self, id: u64, last: u64) -> Option<u64> {
        unwrap_seq(id, last, self.message.cycle)
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
}
