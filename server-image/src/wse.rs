//! The `wse` profile: authenticate after the upgrade, greet with `server_ready`, answer
//! `client_hello` and `ping`, act on topic requests (`subscribe`, `unsubscribe`, `publish`,
//! with the topic in `p`), and decode (so as to count) every other message.
//!
//! The WSE protocol has no client message for topics (its own server subscribes connections
//! server-side), so the envelope carries the names of `wsload_proto::pubsub`:
//! `{"t":"subscribe","p":{"topic":"T"}}`, `{"t":"publish","p":{"topic":"T","seq":N,...}}`, in
//! any format the profile reads (JSON text, `M:` MsgPack, `C:` zlib). A publish reaches the
//! subscribers as the publisher's frame, unchanged.

use crate::config::Profile;
use crate::handshake::HandshakeInfo;
use crate::session::{self, Handler, Ws};
use crate::state::ServerState;
use crate::stats::Closed;
use crate::topics::{Source, Subscriber};
use futures_util::SinkExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use wsload_proto::envelope::{self, CLOSE_AUTH_FAILED};
use wsload_proto::frame::{self, Format, FrameError, Inbound};
use wsload_proto::jwt;
use wsload_proto::pubsub::{PUBLISH, SUBSCRIBE, SUBSCRIBED, UNSUBSCRIBE, UNSUBSCRIBED};

/// Per-connection protocol state.
pub struct Wse<'a> {
    shared: &'a ServerState,
    connection_id: String,
    seq: u64,
    /// Answer in `M:` MsgPack (the client connected with `format=msgpack`).
    msgpack: bool,
    subscriber: Subscriber<'a>,
}

impl<'a> Wse<'a> {
    fn new(shared: &'a ServerState, msgpack: bool, subscriber: Subscriber<'a>) -> Self {
        Wse {
            shared,
            connection_id: uuid::Uuid::new_v4().to_string(),
            seq: 0,
            msgpack,
            subscriber,
        }
    }

    fn next_ids(&mut self) -> (String, u64) {
        self.seq += 1;
        (uuid::Uuid::new_v4().to_string(), self.seq)
    }

    fn encode(&self, value: &Value) -> Message {
        if self.msgpack {
            match frame::encode_msgpack(value) {
                Ok(bytes) => return Message::Binary(bytes.into()),
                // Unreachable for JSON values; fall back to text rather than drop the reply.
                Err(e) => tracing::warn!(error = %e, "msgpack encoding failed; answering in JSON"),
            }
        }
        Message::Text(value.to_string().into())
    }

    /// The answer to a topic request (`msg` is the frame, delivered as is by a publish).
    fn topic_request(&mut self, kind: &str, inbound: &Inbound<'_>, msg: &Message) -> Option<Value> {
        let p = inbound.p.as_ref();
        let Some(topic) = p.and_then(|p| p.topic.as_deref()).filter(|t| !t.is_empty()) else {
            let (id, seq) = self.next_ids();
            return Some(envelope::error(
                &id,
                seq,
                "BAD_REQUEST",
                &format!("{kind} needs a non-empty p.topic"),
            ));
        };
        let confirmed = match kind {
            SUBSCRIBE => {
                self.subscriber.subscribe(topic);
                SUBSCRIBED
            }
            UNSUBSCRIBE => {
                self.subscriber.unsubscribe(topic);
                UNSUBSCRIBED
            }
            _ => {
                let subscribers = self
                    .subscriber
                    .registry()
                    .publish(topic, msg, Source::Client);
                let p = p?;
                if !p.ack {
                    return None;
                }
                let (id, seq) = self.next_ids();
                return Some(envelope::published(
                    &id,
                    seq,
                    topic,
                    p.seq.as_ref(),
                    subscribers,
                ));
            }
        };
        let (id, seq) = self.next_ids();
        Some(envelope::topic_confirmed(confirmed, &id, seq, topic))
    }

    fn respond(&mut self, inbound: &Inbound<'_>, msg: &Message) -> Option<Value> {
        match inbound.kind() {
            kind @ (SUBSCRIBE | UNSUBSCRIBE | PUBLISH) => self.topic_request(kind, inbound, msg),
            "client_hello" => {
                let (id, seq) = self.next_ids();
                Some(envelope::server_hello(&id, seq, &self.connection_id))
            }
            "ping" | "PING" => {
                let (id, seq) = self.next_ids();
                let ts = inbound.p.as_ref().and_then(|p| p.client_timestamp.as_ref());
                Some(envelope::pong(&id, seq, ts))
            }
            _ => None,
        }
    }

    fn decode_and_respond(
        &mut self,
        msg: &Message,
        format: Format,
    ) -> Result<Option<Value>, FrameError> {
        match (msg, format) {
            (Message::Text(text), _) => Ok(self.respond(&frame::decode_text(text)?, msg)),
            (Message::Binary(b), Format::Msgpack) => {
                Ok(self.respond(&frame::decode_msgpack(&b[2..])?, msg))
            }
            (Message::Binary(b), Format::Zlib) => {
                let inner = frame::inflate(&b[2..], self.shared.config.max_message_size)?;
                Ok(self.respond(&frame::decode_inflated(&inner)?, msg))
            }
            // Counted as received; without a key exchange there is nothing to decode.
            (_, Format::Encrypted) => Ok(None),
            _ => Err(FrameError::Opaque),
        }
    }
}

impl Handler for Wse<'_> {
    fn on_message(&mut self, msg: Message, format: Format, out: &mut Vec<Message>) {
        match self.decode_and_respond(&msg, format) {
            Ok(Some(reply)) => out.push(self.encode(&reply)),
            Ok(None) => {}
            Err(e) => {
                self.shared.stats.malformed(Profile::Wse, format);
                tracing::debug!(error = %e, format = format.label(), "malformed WSE frame");
            }
        }
    }
}

/// Who the token says the client is, or why it is refused: (error code, metric reason, text).
fn authenticate(
    shared: &ServerState,
    token: Option<&str>,
) -> Result<String, (&'static str, &'static str, String)> {
    let cfg = &shared.config;
    // Config validation guarantees anonymous access was asked for when there is no secret.
    let Some(secret) = &cfg.jwt_secret else {
        return Ok("anonymous".into());
    };
    match token {
        None if cfg.wse_allow_anonymous => Ok("anonymous".into()),
        None => Err((
            "AUTH_REQUIRED",
            "missing",
            "an access_token cookie or Bearer token is required".into(),
        )),
        Some(token) => match jwt::verify(token, secret, &shared.validation) {
            Ok(claims) => Ok(claims
                .get("sub")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_string()),
            Err(e) => Err(("AUTH_FAILED", e.reason(), e.to_string())),
        },
    }
}

/// Serves one admitted `wse` connection.
pub async fn serve(ws: &mut Ws, shared: &ServerState, info: HandshakeInfo) -> Closed {
    let (subscriber, outbox) = shared.topics.connect();
    let mut wse = Wse::new(shared, info.msgpack, subscriber);
    let user = match authenticate(shared, info.token.as_deref()) {
        Ok(user) => user,
        Err((code, reason, text)) => {
            shared.stats.auth_failure(reason);
            tracing::debug!(code, reason, %text, "WSE authentication refused");
            let (id, seq) = wse.next_ids();
            let msg = wse.encode(&envelope::error(&id, seq, code, &text));
            if session::feed(ws, shared, Profile::Wse, msg).await.is_ok() {
                let _ = ws.flush().await;
            }
            session::close(ws, CloseCode::from(CLOSE_AUTH_FAILED), code).await;
            return Closed::AuthFailed;
        }
    };
    let (id, seq) = wse.next_ids();
    let ready = wse.encode(&envelope::server_ready(&id, seq, &wse.connection_id, &user));
    if let Err(e) = session::feed(ws, shared, Profile::Wse, ready).await {
        return session::fail(ws, e).await;
    }
    if let Err(e) = ws.flush().await {
        return session::fail(ws, e).await;
    }
    session::run(ws, shared, Profile::Wse, &mut wse, None, Some(outbox)).await
}
