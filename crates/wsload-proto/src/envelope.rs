//! Messages the WSE server sends. The shapes follow `shared/reference/wse-protocol.md`.

use serde_json::{Value, json};
use std::time::{SystemTime, UNIX_EPOCH};

/// Envelope version carried in `v`.
pub const VERSION: u32 = 1;
/// Protocol version announced in `server_ready`.
pub const PROTOCOL_VERSION: u32 = 1;
/// Close code for failed or missing authentication.
pub const CLOSE_AUTH_FAILED: u16 = 4401;

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn envelope(t: &str, id: &str, seq: u64, p: Value) -> Value {
    json!({"c": "WSE", "t": t, "id": id, "ts": now_millis(), "seq": seq, "p": p, "v": VERSION})
}

/// The first message on every authenticated connection.
pub fn server_ready(id: &str, seq: u64, connection_id: &str, user_id: &str) -> Value {
    envelope(
        "server_ready",
        id,
        seq,
        json!({
            "message": "Connection established",
            "details": {
                "version": PROTOCOL_VERSION,
                "features": {"msgpack": true, "compression": true, "encryption": false, "ping": true},
                "connection_id": connection_id,
                "server_time": now_millis(),
                "user_id": user_id,
            }
        }),
    )
}

/// The answer to `client_hello`.
pub fn server_hello(id: &str, seq: u64, connection_id: &str) -> Value {
    envelope(
        "server_hello",
        id,
        seq,
        json!({"protocol_version": PROTOCOL_VERSION, "connection_id": connection_id}),
    )
}

/// The answer to an application `ping`; `latency` is server time minus client time, in ms.
pub fn pong(id: &str, seq: u64, client_timestamp: Option<&serde_json::Number>) -> Value {
    let server_timestamp = now_millis();
    let latency = client_timestamp
        .and_then(serde_json::Number::as_f64)
        .map(|c| server_timestamp as f64 - c);
    envelope(
        "PONG",
        id,
        seq,
        json!({"client_timestamp": client_timestamp, "server_timestamp": server_timestamp, "latency": latency}),
    )
}

/// An error message; sent before closing, e.g. `AUTH_FAILED` then close 4401.
pub fn error(id: &str, seq: u64, code: &str, message: &str) -> Value {
    envelope("error", id, seq, json!({"code": code, "message": message}))
}

/// The answer to `subscribe` or `unsubscribe`: `t` is `subscribed` or `unsubscribed`.
pub fn topic_confirmed(t: &str, id: &str, seq: u64, topic: &str) -> Value {
    envelope(t, id, seq, json!({"topic": topic}))
}

/// The answer to a `publish` whose payload asked with `"ack":true`; `subscribers` as in
/// [`crate::pubsub::published`].
pub fn published(
    id: &str,
    seq: u64,
    topic: &str,
    publish_seq: Option<&serde_json::Number>,
    subscribers: u64,
) -> Value {
    envelope(
        crate::pubsub::PUBLISHED,
        id,
        seq,
        json!({"topic": topic, "seq": publish_seq, "subscribers": subscribers}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pong_echoes_client_timestamp_and_reports_latency() {
        let n = serde_json::Number::from(now_millis() - 7);
        let p = pong("id-1", 3, Some(&n));
        assert_eq!(p["t"], "PONG");
        assert_eq!(p["c"], "WSE");
        assert_eq!(p["seq"], 3);
        assert_eq!(p["p"]["client_timestamp"], Value::Number(n));
        let latency = p["p"]["latency"].as_f64().expect("latency");
        assert!((7.0..10_000.0).contains(&latency), "latency {latency}");
    }

    #[test]
    fn server_ready_carries_connection_details() {
        let r = server_ready("id", 1, "conn-9", "user-2");
        assert_eq!(r["t"], "server_ready");
        assert_eq!(r["seq"], 1);
        assert_eq!(r["v"], VERSION);
        assert_eq!(r["p"]["details"]["connection_id"], "conn-9");
        assert_eq!(r["p"]["details"]["user_id"], "user-2");
    }
}
