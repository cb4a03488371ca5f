//! The fanout scenario's checks: its topics, who publishes to what server, and that the
//! conversation says how a delivery carries what the subscribers count.

use super::Errors;
use crate::builtin;
use crate::fanout::{MAX_TOPICS, MAX_TOPICS_PER_SUBSCRIBER, Publisher, TICKER_PREFIX};
use crate::scenario::Motion;
use crate::spec::{LoadTestSpec, Protocol, ServerProfile};
use crate::template::{Part, Template};

pub(super) fn fanout(spec: &LoadTestSpec, e: &mut Errors) {
    if spec.scenario.profile().motion != Motion::Fanout {
        return;
    }
    let f = &spec.fanout;
    if f.topics == 0 || f.topics > MAX_TOPICS {
        e.add("fanout.topics", format!("must be 1 to {MAX_TOPICS}"));
    }
    if f.topics_per_subscriber == 0 || f.topics_per_subscriber > MAX_TOPICS_PER_SUBSCRIBER {
        e.add(
            "fanout.topicsPerSubscriber",
            format!("must be 1 to {MAX_TOPICS_PER_SUBSCRIBER}"),
        );
    }
    if f.topic_prefix.is_empty() || f.topic_prefix.len() > 64 {
        e.add("fanout.topicPrefix", "must be 1 to 64 characters");
    }
    if crate::ticker::managed_ticker(spec).is_some() && f.topic_prefix != TICKER_PREFIX {
        e.add(
            "fanout.topicPrefix",
            format!(
                "the managed server's ticker publishes to topics {TICKER_PREFIX}0, {TICKER_PREFIX}1, ...: set topicPrefix: {TICKER_PREFIX} (or leave it out), or start a ticker of your own in target.server.args"
            ),
        );
    }
    if spec.protocol == Protocol::Wse {
        e.add(
            "protocol",
            "the fanout scenario speaks the reference server's pubsub profile or your conversation; set protocol: echo (with target.server.profile: pubsub, or a conversation with subscribe and delivery)",
        );
        return;
    }
    if let Some(server) = &spec.target.server {
        if spec.conversation.is_none() && server.profile != ServerProfile::Pubsub {
            e.add(
                "target.server.profile",
                format!(
                    "the fanout scenario needs topics, which the {} profile has not; set profile: pubsub",
                    server.profile.as_str()
                ),
            );
        }
        if f.publisher == Publisher::Wsload && server.replicas > 1 {
            e.add(
                "target.server.replicas",
                "wsload's publishers reach one server process, and topics are not shared between replicas; set replicas: 1, or fanout.publisher: server (each replica's ticker publishes to its own subscribers)",
            );
        }
    }
    let Ok(c) = builtin::effective(spec.conversation.as_ref(), spec.protocol, spec.scenario) else {
        return;
    };
    let Some(delivery) = &c.delivery else {
        e.add(
            "conversation.delivery",
            "the fanout scenario counts deliveries by their sequence number: add delivery with sequence (e.g. {json: seq}) and publishedAt",
        );
        return;
    };
    if f.topics_per_subscriber > 1 && f.topics > 1 && delivery.topic.is_none() {
        e.add(
            "conversation.delivery.topic",
            "a subscriber of several topics tells their sequences apart by topic: add topic (e.g. {json: topic}), or set fanout.topicsPerSubscriber: 1",
        );
    }
    // Without subscribe steps the server decides on its own who gets what (it joins every
    // connection, or broadcasts): every subscriber then receives every topic, and is counted
    // against every one.
    if c.subscribe.is_empty() && f.topics_per_subscriber.min(f.topics) < f.topics {
        e.add(
            "fanout.topicsPerSubscriber",
            format!(
                "without conversation.subscribe no message tells the server which topics a subscriber takes, so each receives all {} of them: set topicsPerSubscriber: {} (every topic), or add subscribe steps (${{topic}} is the topic's name)",
                f.topics, f.topics
            ),
        );
    }
    if f.publisher == Publisher::Wsload {
        let written = c.message.as_ref().and_then(|m| m.written());
        let uses = |part: &Part| {
            written
                .and_then(|(w, t)| Template::parse_as(w, t, &["topic"]).ok())
                .is_some_and(|t| t.uses(part))
        };
        if !uses(&Part::Seq) {
            e.add(
                "conversation.message",
                "a fanout's publish must carry ${seq} (the topic's sequence number) where delivery.sequence reads it",
            );
        }
        if delivery.published_at.is_some() && !uses(&Part::SendTime) {
            e.add(
                "conversation.message",
                "delivery.publishedAt reads a publish instant: the publish must carry ${sendTime} there",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    /// What a file with this spec body is refused for (nothing: accepted).
    fn errors(body: &str) -> Vec<String> {
        match crate::LoadTest::from_spec_yaml(body, "t") {
            Ok(_) => Vec::new(),
            Err(crate::Error::Invalid { errors, .. }) => errors
                .into_iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect(),
            Err(other) => vec![other.to_string()],
        }
    }

    #[test]
    fn the_reference_server_needs_its_pubsub_profile_and_one_process() {
        let ok =
            "  target: {server: {profile: pubsub}}\n  scenario: fanout\n  fanout: {topics: 4}\n";
        assert_eq!(errors(ok), Vec::<String>::new());
        let e = errors("  target: {server: {}}\n  scenario: fanout\n");
        assert!(
            e.iter()
                .any(|e| e.starts_with("spec.target.server.profile:")
                    && e.contains("set profile: pubsub")),
            "{e:?}"
        );
        let e = errors("  target: {server: {profile: pubsub, replicas: 2}}\n  scenario: fanout\n");
        assert!(
            e.iter()
                .any(|e| e.starts_with("spec.target.server.replicas:")),
            "{e:?}"
        );
        let ticker = "  target: {server: {profile: pubsub, replicas: 2}}\n  scenario: fanout\n  fanout: {publisher: server}\n";
        assert_eq!(errors(ticker), Vec::<String>::new());
    }

    #[test]
    fn the_fanout_thresholds_are_for_fanout_only() {
        let judged = "  thresholds: ['fanout.p99 < 50ms', 'gaps == 0', 'completeness > 99.99%', 'deliveries > 1M/s']\n";
        let fanout = "  target: {server: {profile: pubsub}}\n  scenario: fanout\n";
        assert_eq!(errors(&format!("{fanout}{judged}")), Vec::<String>::new());
        let e = errors(&format!(
            "  target: {{server: {{}}}}\n  scenario: echo\n{judged}"
        ));
        assert_eq!(
            e,
            vec![
                "spec.thresholds[0]: \"fanout.p99 < 50ms\": the echo scenario does not measure fanout.p99",
                "spec.thresholds[1]: \"gaps == 0\": the echo scenario does not measure gaps",
                "spec.thresholds[2]: \"completeness > 99.99%\": the echo scenario does not measure completeness",
                "spec.thresholds[3]: \"deliveries > 1M/s\": the echo scenario does not measure deliveries",
            ]
        );
        // A fanout times no round trip.
        let e = errors(&format!("{fanout}  thresholds: ['rtt.p99 < 5ms']\n"));
        assert_eq!(
            e,
            vec![
                "spec.thresholds[0]: \"rtt.p99 < 5ms\": the fanout scenario does not measure rtt.p99"
            ]
        );
    }

    #[test]
    fn the_managed_tickers_topics_are_named_t() {
        let e = errors(
            "  target: {server: {profile: pubsub}}\n  scenario: fanout\n  fanout: {publisher: server, topicPrefix: room}\n",
        );
        assert!(
            e.iter()
                .any(|e| e.starts_with("spec.fanout.topicPrefix:")
                    && e.contains("set topicPrefix: t")),
            "{e:?}"
        );
        // wsload's publishers, or the user's own ticker: any prefix.
        for body in [
            "  target: {server: {profile: pubsub}}\n  scenario: fanout\n  fanout: {topicPrefix: room}\n",
            "  target: {server: {profile: pubsub, args: [--ticker-topics, '1']}}\n  scenario: fanout\n  fanout: {publisher: server, topicPrefix: room}\n",
        ] {
            assert_eq!(errors(body), Vec::<String>::new(), "{body}");
        }
    }

    /// A server that joins every connection or broadcasts on its own needs no subscribe
    /// message: its subscribers only read. Before, "add at least one" subscribe step.
    #[test]
    fn a_fanout_without_subscribe_steps_reads_what_the_server_sends_everyone() {
        let delivery = "  conversation:\n    delivery:\n      match: {json: {field: type, equals: tick}}\n      sequence: {json: seq}\n      publishedAt: {json: ts}\n";
        let target = "  target: {url: 'ws://127.0.0.1:1/'}\n  scenario: fanout\n";
        let server = format!("{target}  fanout: {{publisher: server}}\n{delivery}");
        assert_eq!(errors(&server), Vec::<String>::new());
        // wsload's publishes, broadcast by the server to every connection.
        let broadcast = format!(
            "{target}{delivery}    message: {{text: '{{\"type\":\"tick\",\"seq\":${{seq}},\"ts\":${{sendTime}}}}'}}\n"
        );
        assert_eq!(errors(&broadcast), Vec::<String>::new());
        // Every subscriber receives every topic: it is counted against every one.
        let e = errors(&format!(
            "{target}  fanout: {{publisher: server, topics: 3}}\n{delivery}"
        ));
        assert_eq!(
            e,
            vec![
                "spec.fanout.topicsPerSubscriber: without conversation.subscribe no message tells the server which topics a subscriber takes, so each receives all 3 of them: set topicsPerSubscriber: 3 (every topic), or add subscribe steps (${topic} is the topic's name)"
            ]
        );
        let all = format!(
            "{target}  fanout: {{publisher: server, topics: 3, topicsPerSubscriber: 3}}\n{delivery}      topic: {{json: topic}}\n"
        );
        assert_eq!(errors(&all), Vec::<String>::new());
    }

    #[test]
    fn a_conversation_must_say_how_deliveries_are_counted() {
        let base = "  target: {url: 'ws://127.0.0.1:1/'}\n  scenario: fanout\n  fanout: {topics: 3, topicsPerSubscriber: 2}\n";
        let c = format!(
            "{base}  conversation:\n    subscribe:\n      - name: join\n        send: {{text: 'join ${{topic}}'}}\n    message:\n      text: '{{\"room\":\"${{topic}}\",\"n\":${{seq}}}}'\n    delivery:\n      sequence: {{json: n}}\n      publishedAt: {{json: at}}\n"
        );
        let e = errors(&c);
        assert!(
            e.iter()
                .any(|e| e.starts_with("spec.conversation.delivery.topic:")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|e| e.starts_with("spec.conversation.message:") && e.contains("${sendTime}")),
            "{e:?}"
        );
        let e = errors(&format!("{base}  protocol: wse\n"));
        assert!(e.iter().any(|e| e.starts_with("spec.protocol:")), "{e:?}");
        let e = errors(
            "  target: {url: 'ws://127.0.0.1:1/'}\n  scenario: fanout\n  fanout: {topics: 0}\n",
        );
        assert!(
            e.iter().any(|e| e.starts_with("spec.fanout.topics:")),
            "{e:?}"
        );
    }
}
