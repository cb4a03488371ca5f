//! Topics as the reference server's `pubsub` profile speaks them: plain JSON objects told apart
//! by `type`. The `wse` profile carries the same requests in its envelope (`t` and `p`, see
//! [`crate::envelope`]); both share the names below.
//!
//! A client sends `subscribe`, `unsubscribe` and `publish`; the server answers `subscribed`,
//! `unsubscribed`, `published` (only to a publish that asked with `"ack":true`) and `error`.
//! A publish is delivered to the topic's subscribers as the publisher's bytes, unchanged.

use serde::Deserialize;
use serde_json::{Number, json};
use std::borrow::Cow;

pub const SUBSCRIBE: &str = "subscribe";
pub const UNSUBSCRIBE: &str = "unsubscribe";
pub const PUBLISH: &str = "publish";
pub const SUBSCRIBED: &str = "subscribed";
pub const UNSUBSCRIBED: &str = "unsubscribed";
pub const PUBLISHED: &str = "published";

/// The fields of a client's topic request the server acts on. Anything else (a publish's
/// `ts` and `data`) is validated by the parser and skipped without allocating.
#[derive(Debug, Default, Deserialize)]
pub struct Request<'a> {
    #[serde(borrow, rename = "type", default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub topic: Option<Cow<'a, str>>,
    /// The publisher's sequence number, echoed in `published`.
    #[serde(default)]
    pub seq: Option<Number>,
    /// A publish that wants a `published` answer.
    #[serde(default)]
    pub ack: bool,
}

impl Request<'_> {
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("")
    }
}

/// Decodes a request from a text or binary frame's bytes.
pub fn decode(bytes: &[u8]) -> Result<Request<'_>, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// The answer to `subscribe` or `unsubscribe` (`kind` is [`SUBSCRIBED`] or [`UNSUBSCRIBED`]).
pub fn confirmed(kind: &str, topic: &str) -> String {
    json!({"type": kind, "topic": topic}).to_string()
}

/// The answer to a publish with `"ack":true`: `subscribers` is how many subscribers the topic
/// had when the publish was fanned out (each then delivered, dropped or lost, as counted).
pub fn published(topic: &str, seq: Option<&Number>, subscribers: u64) -> String {
    json!({"type": PUBLISHED, "topic": topic, "seq": seq, "subscribers": subscribers}).to_string()
}

/// The answer to a request the server cannot act on.
pub fn error(message: &str) -> String {
    json!({"type": "error", "message": message}).to_string()
}

/// One message of the server's ticker: a publish to `topic` as a client would send it, `ts` the
/// intended publish instant in microseconds since the Unix epoch, `data` `pad` bytes of `x`.
pub fn tick(topic: &str, seq: u64, ts_us: u64, pad: &str) -> String {
    // Ticker topics are `t<N>`: nothing to escape, so a format is enough and cheaper.
    format!(r#"{{"type":"publish","topic":"{topic}","seq":{seq},"ts":{ts_us},"data":"{pad}"}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_decode_and_skip_the_payload() {
        let r = decode(
            br#"{"type":"publish","topic":"a\"b","seq":7,"ts":1,"ack":true,"data":{"x":[1,2]}}"#,
        )
        .expect("publish");
        assert_eq!(r.kind(), PUBLISH);
        assert_eq!(r.topic.as_deref(), Some("a\"b"));
        assert_eq!(r.seq.map(|n| n.to_string()), Some("7".into()));
        assert!(r.ack);
        let r = decode(br#"{"type":"subscribe","topic":"t1"}"#).expect("subscribe");
        assert_eq!(
            (r.kind(), r.topic.as_deref(), r.ack),
            (SUBSCRIBE, Some("t1"), false)
        );
        assert!(decode(b"[1]").is_err());
    }

    #[test]
    fn answers_and_ticks_are_json() {
        let v: serde_json::Value =
            serde_json::from_str(&published("t", Some(&Number::from(3)), 50)).expect("json");
        assert_eq!(
            v,
            json!({"type":"published","topic":"t","seq":3,"subscribers":50})
        );
        let v: serde_json::Value =
            serde_json::from_str(&confirmed(SUBSCRIBED, "q\"")).expect("json");
        assert_eq!(v, json!({"type":"subscribed","topic":"q\""}));
        let v: serde_json::Value =
            serde_json::from_str(&tick("t2", 9, 1_700_000_000_000_000, "xx")).expect("json");
        assert_eq!(
            v,
            json!({"type":"publish","topic":"t2","seq":9,"ts":1_700_000_000_000_000u64,"data":"xx"})
        );
    }
}
