//! What one worker measures for one cell, merged across workers and shards at the end.

pub use crate::connect_error::ConnectError;
use crate::hist::Hist;
pub use crate::pushes::PushTallies;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why an established connection ended before the client closed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dropped {
    /// The server sent a close frame; the code is kept separately.
    ServerClose,
    /// TCP reset or end of stream without a closing handshake.
    Reset,
    /// A read or write failed otherwise.
    Error,
    /// No answer to a ping within `ping.timeout` (sustainedHold).
    PingTimeout,
    /// The server broke RFC 6455 (the rule is the evidence); the client sent close 1002, or
    /// 1007 for invalid UTF-8.
    ProtocolError,
    /// A frame over the client's frame limit or a message over its message limit; the client
    /// sent close 1009.
    MessageTooBig,
    /// Writes made no progress for `writeTimeout`: the server stopped reading.
    ServerNotReading,
    /// The conversation's automatic replies passed [`MAX_REPLIES_PER_SECOND`]: the server
    /// answers each reply with the message that triggers it again (a runaway exchange). The
    /// reply rule (its index and `when`) is the evidence; the client sent close 1008.
    ReplyLoop,
    /// wsload closed it abruptly (no close frame) for a `close` disruption
    /// (`spec.disruptions`): a client that vanished.
    Disrupted,
}

/// How long a healthy connection's closing handshake may take at its cell's end (our close
/// written, the server's read): a server that never answers a close holds the cell's end this
/// long past its deadline, and no longer.
pub const CLOSING_HANDSHAKE_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

/// Most automatic replies one connection may send within a second before it ends as
/// [`Dropped::ReplyLoop`]. Heartbeats come every few seconds (Socket.IO's every 25 s,
/// graphql-ws' and STOMP's every few): a thousand a second, sustained over a second, is a
/// thousand times any of them, and a runaway exchange over loopback or a LAN runs at tens of
/// thousands. A loop slower than this (a round trip over 1 ms) is left to run, its replies
/// counted.
pub const MAX_REPLIES_PER_SECOND: u32 = 1_000;

impl Dropped {
    pub fn label(self) -> &'static str {
        match self {
            Dropped::ServerClose => "server_close",
            Dropped::Reset => "reset",
            Dropped::Error => "error",
            Dropped::PingTimeout => "ping_timeout",
            Dropped::ProtocolError => "protocol_error",
            Dropped::MessageTooBig => "message_too_big",
            Dropped::ServerNotReading => "server_not_reading",
            Dropped::ReplyLoop => "reply_loop",
            Dropped::Disrupted => "disrupted",
        }
    }
}

/// What a frame that answered nothing was: a data frame of either kind, or a pong that matched
/// no ping outstanding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    Text,
    Binary,
    Pong,
}

impl FrameKind {
    pub fn label(self) -> &'static str {
        match self {
            FrameKind::Text => "text",
            FrameKind::Binary => "binary",
            FrameKind::Pong => "pong",
        }
    }
}

/// Frames of one kind and their payload bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameTally {
    pub frames: u64,
    pub bytes: u64,
}

impl FrameTally {
    pub fn is_empty(&self) -> bool {
        self.frames == 0 && self.bytes == 0
    }
    pub fn add(&mut self, o: &FrameTally) {
        self.frames += o.frames;
        self.bytes += o.bytes;
    }
}

/// A number wsload reads from the server's messages, by where the conversation says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NumberField {
    /// The measured message's `${seq}` as its answer carries it (`answer.id`).
    AnswerId,
    /// A fan-out delivery's sequence number (`delivery.sequence`).
    Sequence,
    /// A fan-out delivery's publish instant (`delivery.publishedAt`).
    PublishedAt,
}

impl NumberField {
    /// The field as the conversation names it.
    pub fn label(self) -> &'static str {
        match self {
            NumberField::AnswerId => "answer.id",
            NumberField::Sequence => "delivery.sequence",
            NumberField::PublishedAt => "delivery.publishedAt",
        }
    }

    /// The `evidence` key of the first value of this field that could not be read.
    pub fn evidence_key(self) -> &'static str {
        match self {
            NumberField::AnswerId => "unreadable answer.id",
            NumberField::Sequence => "unreadable delivery.sequence",
            NumberField::PublishedAt => "unreadable delivery.publishedAt",
        }
    }
}

/// Counters of one cell. All are totals over the measured window unless named otherwise.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub attempted: u64,
    pub connected: u64,
    pub failed: BTreeMap<ConnectError, u64>,
    pub dropped: BTreeMap<Dropped, u64>,
    /// Close codes servers sent, as text (`1001`, `4401`).
    pub close_codes: BTreeMap<String, u64>,
    pub sent: u64,
    /// Sent including the warm-up: what the server's counter is reconciled against.
    pub sent_with_warmup: u64,
    pub received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Messages sent that expected an answer (pings, echoes, paced messages).
    pub expected: u64,
    /// Of those, never answered within `ping.timeout` (or by the end).
    pub lost: u64,
    /// Answers that did not match what was outstanding (wrong id or order).
    pub mismatched: u64,
    /// Connections that were open and healthy at the end.
    pub survived: u64,
    /// One example of each failure reason seen (a connect failure's or a drop's label): the
    /// status and body line, the header, the rule broken. The first one recorded is kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub evidence: BTreeMap<String, String>,
    /// Frames the server sent that answered nothing sent (a push, a flood, a copy beyond what
    /// was sent, a pong to no ping): never counted as received or as an answer.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unsolicited: BTreeMap<FrameKind, FrameTally>,
    /// Connections that still had more to read at the deadline than the answers they were
    /// owed: the server sent faster than this client read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub behind: u64,
    /// Bytes those connections left unread at the deadline (their socket and read buffer).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unread_bytes: u64,
    /// Connections whose writes were still waiting for the server to read at the deadline
    /// (it read slower than they wrote, or stopped): the cell ended on time, and what was
    /// still queued in wsload is not counted as sent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unwritten: u64,
    /// Bytes those connections still had queued at the deadline.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unwritten_bytes: u64,
    /// Connections whose closing handshake the server never finished within
    /// [`CLOSING_HANDSHAKE_BOUND`]: each held its cell's end that long past the deadline.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub close_unanswered: u64,
    /// How long connections had been open in the measured phase when they ended, by the
    /// reason they ended (a drop's label): "closed by the server after ~8 s" is a heartbeat
    /// that was never answered, "at once" is a refusal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lifetimes: BTreeMap<String, Lifetime>,
    /// Connections whose step on open timed out, by the step's name (the conversation's
    /// `expect_timeout` failures).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub expect_missed: BTreeMap<String, u64>,
    /// Automatic replies the conversation sent (heartbeat answers): never counted as sent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replies: u64,
    /// Server messages that matched the conversation's `push` or one of its `pushes`: counted
    /// apart from answers and from unsolicited frames.
    #[serde(default, skip_serializing_if = "FrameTally::is_empty")]
    pub pushes: FrameTally,
    /// The pushes of each named rule (`conversation.pushes`), by its name: every rule, those
    /// that matched nothing too.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pushes_by_name: BTreeMap<String, FrameTally>,
    /// The pushes of each rule by its index, as a worker counts them (a fixed array: nothing
    /// allocated or looked up per push); named into `pushes_by_name` at the worker's end
    /// ([`Counts::name_pushes`]).
    #[serde(skip)]
    pub push_rules: PushTallies,
    /// The fanout scenario's deliveries, per topic (absent in other scenarios).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fanout: Option<crate::fanout::Fanout>,
    /// Server messages the conversation took for an answer or a delivery (its `match`
    /// accepted them, or, without one, they carry the field) whose number could not be read,
    /// by field, over the whole cell (warm-up and drain too); the first one's value is kept
    /// in `evidence` ([`NumberField::evidence_key`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unreadable: BTreeMap<NumberField, u64>,
}

/// How long connections lived, in milliseconds: enough to merge exactly (sums, extremes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifetime {
    pub count: u64,
    pub min_ms: u64,
    pub max_ms: u64,
    pub sum_ms: u64,
}

impl Lifetime {
    pub fn record(&mut self, ms: u64) {
        self.min_ms = if self.count == 0 {
            ms
        } else {
            self.min_ms.min(ms)
        };
        self.max_ms = self.max_ms.max(ms);
        self.sum_ms += ms;
        self.count += 1;
    }
    pub fn add(&mut self, o: &Lifetime) {
        if o.count == 0 {
            return;
        }
        self.min_ms = if self.count == 0 {
            o.min_ms
        } else {
            self.min_ms.min(o.min_ms)
        };
        self.max_ms = self.max_ms.max(o.max_ms);
        self.sum_ms += o.sum_ms;
        self.count += o.count;
    }
    pub fn mean_ms(&self) -> u64 {
        self.sum_ms.checked_div(self.count).unwrap_or(0)
    }
}

/// The `evidence` key of the first data frame that answered nothing: a heartbeat nobody
/// answered shows itself there.
pub const UNSOLICITED: &str = "unsolicited";
/// The evidence label of writes still waiting at the deadline (`Counts::unwritten`).
pub const UNWRITTEN: &str = "unwritten";

/// The `evidence` key under which a cell keeps what its server negotiated in the upgrade
/// (a subprotocol, compression), or declined.
pub const NEGOTIATED: &str = "negotiated";

/// The longest evidence kept, in characters: a line of a report, not a body.
pub const MAX_EVIDENCE: usize = 200;

/// `text` cut to [`MAX_EVIDENCE`] characters (an ellipsis marks the cut), control characters
/// shown as spaces: evidence comes from the server, and goes into one line of a report.
pub fn bounded_evidence(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_EVIDENCE)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(MAX_EVIDENCE).is_some() {
        out.push('…');
    }
    out
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Counts {
    pub fn fail(&mut self, why: ConnectError) {
        *self.failed.entry(why).or_default() += 1;
    }
    pub fn drop(&mut self, why: Dropped) {
        *self.dropped.entry(why).or_default() += 1;
    }
    /// Keeps `text` as the example of failure `label`, unless one is kept already.
    pub fn witness(&mut self, label: &str, text: &str) {
        if !self.evidence.contains_key(label) {
            self.evidence
                .insert(label.to_string(), bounded_evidence(text));
        }
    }
    /// Whether an example of failure `label` is kept: what it would cost to describe another
    /// need not be spent.
    pub fn has_evidence(&self, label: &str) -> bool {
        self.evidence.contains_key(label)
    }
    /// Counts a message whose `field` could not be read; `example()` describes it if it is
    /// the first (called once, so a failure that repeats costs no text per message).
    pub fn unreadable(&mut self, field: NumberField, example: impl FnOnce() -> String) {
        *self.unreadable.entry(field).or_default() += 1;
        if !self.has_evidence(field.evidence_key()) {
            self.witness(field.evidence_key(), &example());
        }
    }
    pub fn unsolicited(&mut self, kind: FrameKind, frames: u64, bytes: u64) {
        let t = self.unsolicited.entry(kind).or_default();
        t.frames += frames;
        t.bytes += bytes;
    }
    pub fn unsolicited_total(&self) -> FrameTally {
        self.unsolicited
            .values()
            .fold(FrameTally::default(), |a, t| FrameTally {
                frames: a.frames + t.frames,
                bytes: a.bytes + t.bytes,
            })
    }
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }
    pub fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }
    /// Connections that failed to open or dropped, those wsload dropped itself for a `close`
    /// disruption left out: the `errors` figure's count.
    pub fn errors_total(&self) -> u64 {
        let ours = self.dropped.get(&Dropped::Disrupted).copied().unwrap_or(0);
        self.failed_total() + self.dropped_total().saturating_sub(ours)
    }

    pub fn add(&mut self, o: &Counts) {
        self.attempted += o.attempted;
        self.connected += o.connected;
        for (k, v) in &o.failed {
            *self.failed.entry(*k).or_default() += v;
        }
        for (k, v) in &o.dropped {
            *self.dropped.entry(*k).or_default() += v;
        }
        for (k, v) in &o.close_codes {
            *self.close_codes.entry(k.clone()).or_default() += v;
        }
        self.sent += o.sent;
        self.sent_with_warmup += o.sent_with_warmup;
        self.received += o.received;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.expected += o.expected;
        self.lost += o.lost;
        self.mismatched += o.mismatched;
        self.survived += o.survived;
        for (k, v) in &o.evidence {
            self.evidence.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, t) in &o.unsolicited {
            self.unsolicited(*k, t.frames, t.bytes);
        }
        self.behind += o.behind;
        self.unread_bytes += o.unread_bytes;
        self.unwritten += o.unwritten;
        self.unwritten_bytes += o.unwritten_bytes;
        self.close_unanswered += o.close_unanswered;
        for (k, v) in &o.expect_missed {
            *self.expect_missed.entry(k.clone()).or_default() += v;
        }
        self.replies += o.replies;
        self.pushes.add(&o.pushes);
        for (k, t) in &o.pushes_by_name {
            self.pushes_by_name.entry(k.clone()).or_default().add(t);
        }
        for (mine, theirs) in self.push_rules.iter_mut().zip(o.push_rules.iter()) {
            mine.add(theirs);
        }
        if let Some(f) = &o.fanout {
            self.fanout.get_or_insert_with(Default::default).add(f);
        }
        for (k, l) in &o.lifetimes {
            self.lifetimes.entry(k.clone()).or_default().add(l);
        }
        for (k, n) in &o.unreadable {
            *self.unreadable.entry(*k).or_default() += n;
        }
    }
    /// Counts `frames` pushes of `bytes` matched by push rule `rule` (by index): into the
    /// total, and into the rule's tally when the rule is one of the named ones.
    #[inline]
    pub fn pushed(&mut self, rule: usize, frames: u64, bytes: u64) {
        let t = FrameTally { frames, bytes };
        self.pushes.add(&t);
        if let Some(r) = self.push_rules.get_mut(rule) {
            r.add(&t);
        }
    }
    /// Moves the pushes counted by rule index into `pushes_by_name`, by the rules' `names` in
    /// index order (`None`: an unnamed rule, counted in the total only).
    pub fn name_pushes<'a>(&mut self, names: impl IntoIterator<Item = Option<&'a str>>) {
        for (name, t) in names.into_iter().zip(self.push_rules.iter_mut()) {
            if let Some(name) = name {
                self.pushes_by_name
                    .entry(name.to_string())
                    .or_default()
                    .add(t);
            }
            *t = FrameTally::default();
        }
    }
    /// Counts a connection that ended for `why` after `ms` milliseconds in the measured phase.
    pub fn lived(&mut self, why: Dropped, ms: u64) {
        self.lifetimes
            .entry(why.label().to_string())
            .or_default()
            .record(ms);
    }
}

/// Latency distributions of one cell. An empty one is left out of the JSON (a cell that
/// opened no connection, a scenario that times no round trip): a result is stored once per
/// shard, and empty histograms are most of a small one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Hists {
    /// TCP connect.
    #[serde(skip_serializing_if = "Hist::is_empty")]
    pub tcp: Hist,
    /// HTTP upgrade (and TLS), after TCP.
    #[serde(skip_serializing_if = "Hist::is_empty")]
    pub upgrade: Hist,
    /// Upgrade done to ready (WSE `server_ready`); empty for plain echo.
    #[serde(skip_serializing_if = "Hist::is_empty")]
    pub ready: Hist,
    /// TCP connect start to ready: the seeds' "connection latency".
    #[serde(skip_serializing_if = "Hist::is_empty")]
    pub connect: Hist,
    /// Round trip; from the intended send time in open-loop scenarios.
    #[serde(skip_serializing_if = "Hist::is_empty")]
    pub rtt: Hist,
    /// Round trip from the actual send time.
    #[serde(skip_serializing_if = "Hist::is_empty")]
    pub rtt_raw: Hist,
    /// Fanout: a delivery's receipt from its intended publish instant, both on the
    /// conductor's clock (each shard's offset taken out).
    #[serde(default, skip_serializing_if = "Hist::is_empty")]
    pub fanout: Hist,
}

impl Hists {
    pub fn add(&mut self, o: &Hists) {
        self.tcp.add(&o.tcp);
        self.upgrade.add(&o.upgrade);
        self.ready.add(&o.ready);
        self.connect.add(&o.connect);
        self.rtt.add(&o.rtt);
        self.rtt_raw.add(&o.rtt_raw);
        self.fanout.add(&o.fanout);
    }
}

/// Everything a worker measured for one cell.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Measure {
    pub counts: Counts,
    pub hists: Hists,
    /// How dropped connections came back (`spec.reconnect`, `spec.disruptions`); absent when
    /// the cell neither reconnects nor disrupts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconnect: Option<crate::reconnect::Reconnects>,
}

impl Measure {
    pub fn add(&mut self, o: &Measure) {
        self.counts.add(&o.counts);
        self.hists.add(&o.hists);
        if let Some(r) = &o.reconnect {
            self.reconnect.get_or_insert_with(Default::default).add(r);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn empty_histograms_are_left_out_and_read_back_empty() {
        let mut h = Hists::default();
        h.rtt.record(std::time::Duration::from_millis(2));
        let json = serde_json::to_string(&h).expect("json");
        assert!(
            json.contains("\"rtt\"") && !json.contains("connect"),
            "{json}"
        );
        let back: Hists = serde_json::from_str(&json).expect("read");
        assert_eq!((back.rtt.len(), back.connect.len()), (1, 0));
    }

    use super::*;
    use std::time::Duration;

    #[test]
    fn merging_adds_every_counter_and_histogram() {
        let mut a = Measure::default();
        a.counts.sent = 10;
        a.counts.fail(ConnectError::Refused);
        a.counts.close_codes.insert("1001".into(), 2);
        a.hists.rtt.record(Duration::from_millis(1));
        let mut b = a.clone();
        b.counts.fail(ConnectError::Timeout);
        b.counts.drop(Dropped::Reset);
        a.add(&b);
        assert_eq!(a.counts.sent, 20);
        assert_eq!(a.counts.failed[&ConnectError::Refused], 2);
        assert_eq!(a.counts.failed[&ConnectError::Timeout], 1);
        assert_eq!(a.counts.failed_total(), 3);
        assert_eq!(a.counts.dropped_total(), 1);
        assert_eq!(a.counts.close_codes["1001"], 4);
        assert_eq!(a.hists.rtt.len(), 2);
        let json = serde_json::to_string(&a).expect("serialize");
        assert!(json.contains("\"refused\":2"), "{json}");
        assert!(!json.contains("evidence"), "no evidence, no field: {json}");
    }

    #[test]
    fn evidence_keeps_the_first_example_bounded() {
        let mut a = Counts::default();
        a.witness("upgrade_rejected", "HTTP 500 Internal Server Error");
        a.witness("upgrade_rejected", "HTTP 502 Bad Gateway");
        let mut b = Counts::default();
        b.witness("upgrade_rejected", "HTTP 503");
        b.witness("protocol_error", &format!("a\nb{}", "x".repeat(500)));
        a.add(&b);
        assert_eq!(
            a.evidence["upgrade_rejected"],
            "HTTP 500 Internal Server Error"
        );
        let long = &a.evidence["protocol_error"];
        assert!(long.starts_with("a b") && long.ends_with('…'), "{long}");
        assert_eq!(long.chars().count(), MAX_EVIDENCE + 1);
        let json = serde_json::to_string(&a).expect("serialize");
        let back: Counts = serde_json::from_str(&json).expect("read back");
        assert_eq!(back.evidence, a.evidence);
    }

    #[test]
    fn lifetimes_merge_exactly_by_reason() {
        let mut a = Counts::default();
        a.lived(Dropped::ServerClose, 8_000);
        a.lived(Dropped::ServerClose, 8_200);
        let mut b = Counts::default();
        b.lived(Dropped::ServerClose, 7_900);
        b.lived(Dropped::Reset, 10);
        a.add(&b);
        let close = a.lifetimes["server_close"];
        assert_eq!(
            (close.count, close.min_ms, close.max_ms, close.sum_ms),
            (3, 7_900, 8_200, 24_100)
        );
        assert_eq!(close.mean_ms(), 8_033);
        assert_eq!(a.lifetimes["reset"].min_ms, 10);
        let back: Counts =
            serde_json::from_str(&serde_json::to_string(&a).expect("json")).expect("read back");
        assert_eq!(back, a);
        // An empty side leaves the minimum alone.
        let mut c = Counts::default();
        c.add(&a);
        assert_eq!(c.lifetimes["server_close"].min_ms, 7_900);
    }

    #[test]
    fn unsolicited_frames_merge_by_kind_and_read_back() {
        let mut a = Counts::default();
        let json = serde_json::to_string(&a).expect("serialize");
        assert!(
            !json.contains("unsolicited") && !json.contains("behind"),
            "{json}"
        );
        a.unsolicited(FrameKind::Text, 3, 300);
        a.behind = 1;
        a.unread_bytes = 70_000;
        a.unwritten = 1;
        a.unwritten_bytes = 65_550;
        let mut b = a.clone();
        b.unsolicited(FrameKind::Pong, 1, 0);
        a.add(&b);
        assert_eq!(
            a.unsolicited[&FrameKind::Text],
            FrameTally {
                frames: 6,
                bytes: 600
            }
        );
        assert_eq!(a.unsolicited[&FrameKind::Pong].frames, 1);
        assert_eq!(a.unsolicited_total().frames, 7);
        assert_eq!((a.behind, a.unread_bytes), (2, 140_000));
        assert_eq!((a.unwritten, a.unwritten_bytes), (2, 131_100));
        let json = serde_json::to_string(&a).expect("serialize");
        assert!(
            json.contains(
                r#""unsolicited":{"text":{"frames":6,"bytes":600},"pong":{"frames":1,"bytes":0}}"#
            ),
            "{json}"
        );
        assert!(json.contains(r#""unreadBytes":140000"#), "{json}");
        assert!(json.contains(r#""unwrittenBytes":131100"#), "{json}");
        let back: Counts = serde_json::from_str(&json).expect("read back");
        assert_eq!(back, a);
    }

    #[test]
    fn unreadable_fields_merge_by_field_with_their_first_example() {
        let mut a = Counts::default();
        let json = serde_json::to_string(&a).expect("serialize");
        assert!(!json.contains("unreadable"), "{json}");
        a.unreadable(NumberField::AnswerId, || "4.5".into());
        a.unreadable(NumberField::AnswerId, || unreachable!("described once"));
        let mut b = Counts::default();
        b.unreadable(NumberField::AnswerId, || "-1".into());
        b.unreadable(NumberField::PublishedAt, || "\"soon\"".into());
        a.add(&b);
        assert_eq!(
            a.unreadable,
            BTreeMap::from([(NumberField::AnswerId, 3), (NumberField::PublishedAt, 1)])
        );
        assert_eq!(a.evidence["unreadable answer.id"], "4.5");
        assert_eq!(a.evidence["unreadable delivery.publishedAt"], "\"soon\"");
        let json = serde_json::to_string(&a).expect("serialize");
        assert!(
            json.contains(r#""unreadable":{"answerId":3,"publishedAt":1}"#),
            "{json}"
        );
        let back: Counts = serde_json::from_str(&json).expect("read back");
        assert_eq!(back, a);
    }

    #[test]
    fn conversation_counts_merge_exactly_and_are_left_out_when_none() {
        let mut a = Counts::default();
        let json = serde_json::to_string(&a).expect("serialize");
        assert!(
            !json.contains("expectMissed") && !json.contains("replies") && !json.contains("pushes"),
            "{json}"
        );
        a.fail(ConnectError::ExpectTimeout);
        *a.expect_missed.entry("ack".into()).or_default() += 1;
        a.replies = 5;
        a.pushes = FrameTally {
            frames: 3,
            bytes: 30,
        };
        let mut b = a.clone();
        *b.expect_missed.entry("welcome".into()).or_default() += 2;
        a.add(&b);
        assert_eq!(
            a.expect_missed,
            BTreeMap::from([("ack".to_string(), 2), ("welcome".to_string(), 2)])
        );
        assert_eq!(a.failed[&ConnectError::ExpectTimeout], 2);
        assert_eq!((a.replies, a.pushes.frames, a.pushes.bytes), (10, 6, 60));
        let json = serde_json::to_string(&a).expect("serialize");
        assert!(
            json.contains(r#""expect_timeout":2"#)
                && json.contains(r#""expectMissed":{"ack":2,"welcome":2}"#)
                && json.contains(r#""pushes":{"frames":6,"bytes":60}"#),
            "{json}"
        );
        let back: Counts = serde_json::from_str(&json).expect("read back");
        assert_eq!(back, a);
    }
}
