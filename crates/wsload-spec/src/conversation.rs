//! The conversation a connection holds with a server of its own protocol (Socket.IO,
//! graphql-ws, STOMP, JSON-RPC, ...): steps on open, automatic replies, the measured message
//! and how its answer is recognised, and the server's pushes. The types only: what a template
//! or a match means, and their checks, are in `template` and `matching`.
//!
//! See docs/loadtest.md, "Your own protocol".

use crate::cel;
use crate::template::Written;
use crate::units::{Dur, TimeUnit};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most steps on open, replies, or captures of one step.
pub const MAX_STEPS: usize = 32;
/// Longest template, match text or regular expression.
pub const MAX_TEMPLATE_LEN: usize = 16 * 1024;
/// Most named push rules (`pushes`): a worker counts each rule's pushes in a fixed array of
/// this many tallies (no allocation, no lookup by name per push).
pub const MAX_PUSH_RULES: usize = 8;
/// Longest step or push rule name.
pub const MAX_NAME_LEN: usize = 64;
/// The variable under which `resume` knows the position a subscriber's last delivery
/// carried (`delivery.resumeFrom`).
pub const RESUME_FROM_VAR: &str = "resumeFrom";

/// What each connection says and expects, in the protocol of the server under test.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::conversation_rules)]
pub struct Conversation {
    /// Steps after the upgrade, in order: the connection counts as open (connected) once the
    /// last one is done. A step that does not complete within its timeout fails the
    /// connection as `expect_timeout`, counted by the step's name; a capture that finds
    /// nothing in the step's message fails it as `capture_missed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_STEPS))]
    pub open: Vec<Step>,
    /// Server messages answered automatically for the whole life of the connection
    /// (heartbeats): never counted as load, as answers or as pushes. Only the server's
    /// messages are answered, so an answer may equal what it answers (`{}` for `{}`); a
    /// server that answers every reply with its trigger again ends the connection as
    /// `reply_loop`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_STEPS))]
    pub replies: Vec<Reply>,
    /// Messages the client sends on its own every `every` (client heartbeats such as
    /// Phoenix's): not counted as load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Heartbeat>,
    /// The measured message: what the scenarios that send send (throughput, payloadMatrix,
    /// blast; and pingLatency, sustainedHold's pings, pingpong, echo and constantRate when
    /// there is no `ping`), and how its answer is recognised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<MeasuredMessage>,
    /// The message the scenarios that time each message send (pingLatency, sustainedHold's
    /// app pings, pingpong, echo, constantRate) when it is not the measured message: a
    /// request the server answers (WSE's `ping`, a Socket.IO emit with an ack) beside a
    /// `message` it only receives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping: Option<MeasuredMessage>,
    /// Server messages counted as pushes received (a room's messages, a subscription's
    /// events): counted and timed apart from answers. One rule, counted in the total only;
    /// `pushes` names several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<Match>,
    /// Kinds of server pushes, each counted by its name beside the total (graphql-ws' `next`
    /// and `complete`): a message is counted under the first rule it matches. Instead of
    /// `push`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PUSH_RULES))]
    pub pushes: Vec<PushRule>,
    /// The fanout scenario's subscription: steps a subscriber runs after `open`, once for each
    /// of its topics, with the topic's name as `${topic}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_STEPS))]
    pub subscribe: Vec<Step>,
    /// A fanout subscriber's steps when it comes back (`spec.reconnect`), instead of `open`
    /// and `subscribe`: a protocol that resumes a session is asked to (Socket.IO's
    /// connection-state recovery: `40{"pid":"${pid}","offset":"${resumeFrom}"}`). Its variables
    /// are its previous connection's captures (a step here may capture them anew) and
    /// `${resumeFrom}`, the position its last delivery carried (`delivery.resumeFrom`). What
    /// the server sends while they run is read as the subscriber's (a replay of what it
    /// missed), and deliveries published while it was away are counted `recovered`. A
    /// subscriber with no position yet (no delivery read), and a publisher, open and
    /// subscribe as the first time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_STEPS))]
    pub resume: Vec<Step>,
    /// The fanout scenario's deliveries: which server messages are a topic's messages, and
    /// where each carries its sequence number, its publish instant and its topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
    /// How the server packs several of its messages into one frame (newline-delimited JSON,
    /// a line protocol, SockJS' `a[...]`): every part is then a message of its own, matched,
    /// answered, counted and timed as one. Without it a frame is one message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
}

/// Longest separator, and longest prefix of a JSON array envelope.
pub const MAX_SPLIT_LEN: usize = 16;

/// How a frame splits into messages: exactly one of `separator`, `jsonArray` and `packets`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::split_rules)]
pub struct Split {
    /// Messages separated by this text: `"\n"`, `"\r\n"`, `"\u001e"` (the record
    /// separator of SignalR's JSON protocol). Empty parts are not messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_SPLIT_LEN))]
    pub separator: Option<String>,
    /// Messages as the elements of a JSON array after a prefix (SockJS: `a["m1","m2"]`): a
    /// string element's text unescaped, any other element as written. A frame that is not the
    /// prefix and an array (SockJS' `o`, `h`) is one message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_array: Option<JsonArraySplit>,
    /// Binary frames as one stream of packets that each say their length (MQTT: `{at: 1,
    /// length: varint}`), however the server cuts them into frames: a packet written in
    /// several frames is one message, several in a frame are several. Text frames are each
    /// one message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<PacketSplit>,
}

/// Most bytes before a packet's length field.
pub const MAX_LENGTH_AT: u8 = 64;

/// Packets that say their length.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PacketSplit {
    /// Where the length field starts, in bytes from the packet's first (MQTT: 1, after the
    /// type and flags byte).
    #[serde(default)]
    #[schemars(range(max = MAX_LENGTH_AT))]
    pub at: u8,
    /// How the length is written; it counts the bytes after the length field.
    pub length: PacketLength,
}

/// How a packet writes its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PacketLength {
    /// MQTT's variable byte integer: 7 bits a byte, low first, at most 4 bytes.
    #[default]
    Varint,
    /// Big-endian, 1 byte.
    U8,
    /// Big-endian, 2 bytes.
    U16,
    /// Big-endian, 4 bytes.
    U32,
}

/// A JSON array envelope.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JsonArraySplit {
    /// What comes before the array (SockJS: `a`); none by default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = MAX_SPLIT_LEN))]
    pub prefix: String,
}

/// How a subscriber reads a delivery. Publishers (wsload's) write the same fields with
/// `${seq}` (the topic's sequence number, from 1), `${sendTime}` (the intended publish
/// instant, microseconds on the conductor's clock) and `${topic}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Delivery {
    /// Which server messages are deliveries (any that carries a sequence number, if absent).
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<Match>,
    /// Where a delivery carries its topic's sequence number (a whole number, growing by one
    /// per publish).
    pub sequence: Capture,
    /// Where it carries its publish instant since the Unix epoch (in `publishedAtUnit`):
    /// latency is measured from it. Without it, deliveries are counted but not timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<Capture>,
    #[serde(default, skip_serializing_if = "is_default_unit")]
    pub published_at_unit: TimeUnit,
    /// Where it carries its topic's name: needed when a subscriber has several topics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<Capture>,
    /// Where it carries the position a subscriber back resumes from (Socket.IO's offset, its
    /// event's last argument: `{json: "2"}`): `${resumeFrom}` in `resume`, the last one read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<Capture>,
}

fn is_default_unit(u: &TimeUnit) -> bool {
    *u == TimeUnit::default()
}

/// One step on open: send a message, or expect one (and capture values from it).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::step_rules)]
pub struct Step {
    /// The step's name, as misses are counted and reported under it.
    #[schemars(length(min = 1, max = MAX_NAME_LEN))]
    pub name: String,
    /// A message to send (a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<Payload>,
    /// A message to wait for: the first server message that matches completes the step;
    /// others are skipped (automatic replies still answer them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Match>,
    /// Values taken from the expected message into variables for later templates
    /// (`${name}`), by variable name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_STEPS))]
    pub capture: BTreeMap<String, Capture>,
    /// How long an `expect` may wait (default 5s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
}

/// A message to send: a template, as a text or a binary frame (exactly one of `text`,
/// `binary` and `bytes`).
///
/// Placeholders: `${conn}` (the connection's number over all shards), `${seq}` (the
/// connection's message sequence number, from 1), `${sendTime}` (microseconds since the Unix
/// epoch when the message is made), `${random}` (a random 32-bit number), `${hex:N}` (N random
/// hex digits), `${uuid}` (a random UUID v4), `${pad}` (filler that makes the message
/// `message.size` bytes) and `${NAME}` for a variable captured on open. `$${` is a literal
/// `${`. In `bytes` (see [`crate::template::bytes`]): hex bytes, text in double quotes,
/// `${seq:u16}` and the like (big-endian at a fixed width), `${len:varint}` (a length
/// computed over what follows, to the end of its `( ... )` group or of the message).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::payload_rules)]
pub struct Payload {
    /// Sent as a text frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub text: Option<String>,
    /// Sent as a binary frame (the template's UTF-8 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub binary: Option<String>,
    /// Sent as a binary frame, written as bytes (a binary protocol's, MQTT's): hex, text in
    /// double quotes, numbers at a fixed width (`${seq:u16}`), computed lengths
    /// (`${len:varint}`, `(${len:u16} "topic")`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub bytes: Option<String>,
}

impl Payload {
    /// The template and how it is written; `None` unless exactly one of the three is set.
    pub fn written(&self) -> Option<(Written, &str)> {
        Written::one_of(
            self.text.as_deref(),
            self.binary.as_deref(),
            self.bytes.as_deref(),
        )
    }
}

/// Which server messages match: every field given must hold. The JSON `field` is read from
/// the message after `prefix` when both are given (Socket.IO's `42["event",...]`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::match_rules)]
pub struct Match {
    /// The whole message is exactly this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub equals: Option<String>,
    /// The message starts with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub prefix: Option<String>,
    /// The message starts with these bytes: hex, and text in double quotes (an MQTT PUBACK:
    /// `'40 02'`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub bytes: Option<String>,
    /// A regular expression (Rust `regex` syntax) found in the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub regex: Option<String>,
    /// A JSON field equal to a value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<JsonField>,
    /// The frame's kind: `text` or `binary` (default: either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = cel::null_is_unset)]
    pub frame: Option<FrameType>,
}

/// A JSON field and the value it must hold.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JsonField {
    /// Dotted path from the top (`payload.data.id`; array elements by index: `0`).
    #[schemars(length(min = 1, max = 256))]
    pub field: String,
    /// The value: a string field equals it as text; a number, `true`, `false` or `null`
    /// equals it as written in JSON.
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub equals: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FrameType {
    Text,
    Binary,
}

/// Where a value is in a message (exactly one of `json`, `regex` and `at`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::capture_rules)]
pub struct Capture {
    /// A JSON field's value (a string without its quotes), by dotted path; read after the
    /// match's `prefix` when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub json: Option<String>,
    /// The first group of a regular expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub regex: Option<String>,
    /// The `width` bytes at this offset from the message's first byte (a binary protocol's
    /// field: an MQTT PUBACK's packet id is `{at: 2, width: 2}`), read as a big-endian
    /// number where a number is wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_CAPTURE_AT))]
    pub at: Option<u32>,
    /// How many bytes `at` reads: 1, 2, 4 or 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 8))]
    pub width: Option<u8>,
}

/// The furthest offset a capture reads at (a message's bytes beyond are not a header's).
pub const MAX_CAPTURE_AT: u32 = 1 << 20;

/// A server message answered automatically.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reply {
    /// The messages answered.
    pub when: Match,
    /// The answer (a template).
    pub send: Payload,
}

/// A kind of server push, counted by name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PushRule {
    /// What the pushes are counted under (`counts.pushesByName` in the result).
    #[schemars(length(min = 1, max = MAX_NAME_LEN))]
    pub name: String,
    /// The messages that are these pushes.
    #[serde(rename = "match")]
    pub matches: Match,
}

/// A message the client sends on its own, periodically.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Heartbeat {
    /// How often.
    pub every: Dur,
    /// What (a template).
    pub send: Payload,
}

/// The measured message and its answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::measured_message_rules)]
pub struct MeasuredMessage {
    /// Sent as a text frame (a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub text: Option<String>,
    /// Sent as a binary frame (a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub binary: Option<String>,
    /// Sent as a binary frame, written as bytes (see [`Payload::bytes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TEMPLATE_LEN))]
    pub bytes: Option<String>,
    /// How its answer is recognised; without it, nothing answers the message (the server
    /// only receives: throughput counts what was sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<AnswerRule>,
}

impl MeasuredMessage {
    /// Its template as a payload.
    pub fn payload(&self) -> Payload {
        Payload {
            text: self.text.clone(),
            binary: self.binary.clone(),
            bytes: self.bytes.clone(),
        }
    }

    /// The template and how it is written; `None` unless exactly one of the three is set.
    pub fn written(&self) -> Option<(Written, &str)> {
        Written::one_of(
            self.text.as_deref(),
            self.binary.as_deref(),
            self.bytes.as_deref(),
        )
    }
}

/// How an answer to the measured message is recognised: a message that matches `match`
/// (any, if absent) and carries the message's `${seq}` where `id` says; without `id`, the next
/// message that matches answers the oldest one outstanding.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnswerRule {
    /// Which messages may be answers.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<Match>,
    /// Where an answer carries the `${seq}` of the message it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Capture>,
    /// The answer is the message sent back unchanged (an echo server): every byte the
    /// template writes is checked, each placeholder's shape too, and the `${seq}` is read
    /// from where the template puts it. Instead of `match` and `id`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub echoed: bool,
}

/// permessage-deflate (RFC 7692), offered in the upgrade when present: the server may accept
/// it (then both sides compress) or not (then nothing is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compression {
    /// Ask the server to use a window of 2^N bytes (8-15; default: the server's choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 8, max = 15))]
    pub server_max_window_bits: Option<u8>,
    /// Offer to compress with a window of 2^N bytes (9-15: zlib has no 256-byte window;
    /// default: offered bare, the server may choose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 9, max = 15))]
    pub client_max_window_bits: Option<u8>,
    /// Ask the server to reset its compression context after every message.
    #[serde(default)]
    pub server_no_context_takeover: bool,
    /// Reset ours after every message (less memory per connection, larger messages).
    #[serde(default)]
    pub client_no_context_takeover: bool,
    /// Whether a server that declines compression fails the connection (default: measured
    /// uncompressed, and said so).
    #[serde(default)]
    pub required: bool,
}
