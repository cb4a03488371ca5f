//! The conversations wsload speaks without being told: `protocol: echo` and `protocol: wse`
//! are these, as data (`builtin/*.yaml`), compiled and run by the same code as a user's
//! `spec.conversation`; so is the fanout scenario's with `protocol: echo` (the reference
//! server's `pubsub` profile). docs/loadtest.md shows them as they are here.

use crate::conversation::Conversation;
use crate::scenario::Motion;
use crate::spec::{Protocol, Scenario};
use crate::yaml::{self, ParseError};

/// The echo protocol's conversation, as written.
pub const ECHO_YAML: &str = include_str!("builtin/echo.yaml");
/// The WSE protocol's conversation, as written.
pub const WSE_YAML: &str = include_str!("builtin/wse.yaml");

/// The fanout scenario's conversation with `protocol: echo`, as written.
pub const PUBSUB_YAML: &str = include_str!("builtin/pubsub.yaml");

/// The text of `protocol`'s conversation.
pub fn yaml_of(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Echo => ECHO_YAML,
        Protocol::Wse => WSE_YAML,
    }
}

/// `protocol`'s conversation.
pub fn conversation(protocol: Protocol) -> Result<Conversation, ParseError> {
    yaml::parse(yaml_of(protocol))
}

/// The conversation a scenario speaks by default with `protocol`: the fanout's, the
/// `pubsub` one with `protocol: echo`; else the protocol's.
pub fn for_scenario(protocol: Protocol, scenario: Scenario) -> Result<Conversation, ParseError> {
    match (protocol, scenario.profile().motion) {
        (Protocol::Echo, Motion::Fanout) => yaml::parse(PUBSUB_YAML),
        _ => conversation(protocol),
    }
}

/// What a LoadTest's connections say: its own conversation, else its scenario's with its
/// protocol ([`for_scenario`]); where its own has no measured message, that one's message (and
/// its ping, unless it has its own); in a fanout, where its own has no `subscribe` or
/// `delivery`, that one's.
pub fn effective(
    own: Option<&Conversation>,
    protocol: Protocol,
    scenario: Scenario,
) -> Result<Conversation, ParseError> {
    let builtin = for_scenario(protocol, scenario)?;
    Ok(match own {
        None => builtin,
        Some(c) => {
            let mut c = c.clone();
            if c.message.is_none() {
                c.message = builtin.message;
                if c.ping.is_none() {
                    c.ping = builtin.ping;
                }
            }
            if scenario.profile().motion == Motion::Fanout {
                if c.subscribe.is_empty() && c.delivery.is_none() {
                    c.subscribe = builtin.subscribe;
                }
                if c.delivery.is_none() {
                    c.delivery = builtin.delivery;
                }
            }
            c
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{Part, Template};

    #[test]
    fn both_parse_and_time_their_pings_by_seq() {
        for p in [Protocol::Echo, Protocol::Wse] {
            let c = conversation(p).expect("parses");
            let timed = c.ping.as_ref().or(c.message.as_ref()).expect("a message");
            let answer = timed.answer.as_ref().expect("answered");
            assert!(
                answer.id.is_some() || answer.echoed,
                "{p:?}: matched by the id it carries"
            );
            let text = timed.text.as_deref().expect("text");
            let t = Template::parse(text, &[]).expect("compiles");
            assert!(t.uses(&Part::Seq), "{p:?}");
        }
        let wse = conversation(Protocol::Wse).expect("parses");
        let names: Vec<_> = wse.open.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["server_ready", "client_hello", "server_hello"]);
        assert!(
            wse.message.and_then(|m| m.answer).is_none(),
            "trades are only received"
        );
    }

    /// docs/loadtest.md shows each as it is here, after its comment.
    #[test]
    fn the_docs_show_them_as_they_are() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/loadtest.md"
        ))
        .expect("docs/loadtest.md");
        for (name, yaml) in [
            ("echo", ECHO_YAML),
            ("wse", WSE_YAML),
            ("echo, scenario: fanout", PUBSUB_YAML),
        ] {
            let body: String = yaml
                .lines()
                .skip_while(|l| l.starts_with('#'))
                .map(|l| format!("{l}\n"))
                .collect();
            let shown = format!("```yaml\n# protocol: {name}\n{body}```");
            assert!(
                docs.contains(&shown),
                "docs/loadtest.md must show the {name} conversation as builtin/{name}.yaml has it:\n{shown}"
            );
        }
    }

    #[test]
    fn the_fanout_speaks_pubsub_with_echo_and_keeps_a_users_delivery() {
        let c = for_scenario(Protocol::Echo, Scenario::Fanout).expect("parses");
        assert_eq!(c.subscribe.len(), 2);
        let d = c.delivery.as_ref().expect("a delivery rule");
        assert_eq!(d.sequence.json.as_deref(), Some("seq"));
        let t = Template::parse(
            c.message
                .as_ref()
                .and_then(|m| m.text.as_deref())
                .expect("text"),
            &["topic"],
        )
        .expect("compiles");
        assert!(t.uses(&Part::Seq) && t.uses(&Part::SendTime));
        // A user's own subscription and delivery are kept; a user's subscription without a
        // delivery rule gets the built-in rule, not the built-in subscription.
        let own = Conversation {
            subscribe: vec![crate::conversation::Step {
                name: "join".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let e = effective(Some(&own), Protocol::Echo, Scenario::Fanout).expect("parses");
        assert_eq!(e.subscribe, own.subscribe);
        assert_eq!(e.delivery, c.delivery);
        assert_eq!(
            for_scenario(Protocol::Echo, Scenario::Throughput).expect("parses"),
            conversation(Protocol::Echo).expect("parses")
        );
    }

    #[test]
    fn a_conversation_without_a_message_sends_the_echo_messages() {
        let own = Conversation {
            push: Some(Default::default()),
            ..Default::default()
        };
        let c = effective(Some(&own), Protocol::Echo, Scenario::Throughput).expect("parses");
        let echo = conversation(Protocol::Echo).expect("parses");
        assert_eq!(c.message, echo.message);
        // Its timed scenarios send the echo ping, whose answers carry their ${seq}.
        assert_eq!(c.ping, echo.ping);
        assert!(c.push.is_some());
        // A conversation's own message goes alone: its answers are its own.
        let own = Conversation {
            message: echo.ping.clone(),
            ..Default::default()
        };
        let c = effective(Some(&own), Protocol::Echo, Scenario::Throughput).expect("parses");
        assert_eq!((c.message, c.ping), (echo.ping, None));
    }
}
