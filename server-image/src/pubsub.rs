//! The `pubsub` profile: topics in plain JSON (`wsload_proto::pubsub`). A client subscribes,
//! unsubscribes and publishes; each publish goes to the topic's subscribers as the publisher's
//! frame, unchanged (text or binary, as sent), and never back to the publisher unless it
//! subscribed to the topic too.

use crate::config::Profile;
use crate::session::{self, Handler, Ws};
use crate::state::ServerState;
use crate::stats::Closed;
use crate::topics::{Source, Subscriber};
use tokio_tungstenite::tungstenite::Message;
use wsload_proto::frame::Format;
use wsload_proto::pubsub::{self, PUBLISH, SUBSCRIBE, SUBSCRIBED, UNSUBSCRIBE, UNSUBSCRIBED};

/// One connection's topics.
struct PubSub<'a> {
    shared: &'a ServerState,
    subscriber: Subscriber<'a>,
}

impl PubSub<'_> {
    /// The answer to one request, if any.
    fn answer(&mut self, msg: &Message, bytes: &[u8], format: Format) -> Option<String> {
        let req = match pubsub::decode(bytes) {
            Ok(req) => req,
            Err(e) => {
                self.shared.stats.malformed(Profile::Pubsub, format);
                return Some(pubsub::error(&format!("not a topic request: {e}")));
            }
        };
        let topic = match req.topic.as_deref() {
            Some(t) if !t.is_empty() => t,
            _ => return Some(pubsub::error("a topic request needs a non-empty \"topic\"")),
        };
        match req.kind() {
            SUBSCRIBE => {
                self.subscriber.subscribe(topic);
                Some(pubsub::confirmed(SUBSCRIBED, topic))
            }
            UNSUBSCRIBE => {
                self.subscriber.unsubscribe(topic);
                Some(pubsub::confirmed(UNSUBSCRIBED, topic))
            }
            PUBLISH => {
                let registry = self.subscriber.registry();
                let subscribers = registry.publish(topic, msg, Source::Client);
                req.ack
                    .then(|| pubsub::published(topic, req.seq.as_ref(), subscribers))
            }
            other => Some(pubsub::error(&format!(
                "unknown type {other:?}: use subscribe, unsubscribe or publish"
            ))),
        }
    }
}

impl Handler for PubSub<'_> {
    fn on_message(&mut self, msg: Message, format: Format, out: &mut Vec<Message>) {
        let bytes: &[u8] = match &msg {
            Message::Text(t) => t.as_bytes(),
            Message::Binary(b) => b,
            _ => return,
        };
        if let Some(answer) = self.answer(&msg, bytes, format) {
            out.push(Message::Text(answer.into()));
        }
    }
}

/// Serves one admitted `pubsub` connection.
pub async fn serve(ws: &mut Ws, shared: &ServerState) -> Closed {
    let (subscriber, outbox) = shared.topics.connect();
    let mut handler = PubSub { shared, subscriber };
    session::run(
        ws,
        shared,
        Profile::Pubsub,
        &mut handler,
        None,
        Some(outbox),
    )
    .await
}
