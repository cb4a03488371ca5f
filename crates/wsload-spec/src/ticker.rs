//! wsload-server's ticker as a managed server runs it for a fanout the server publishes: whether
//! it runs, and the arguments that start it. Read from the whole spec (scenario, fanout, rate,
//! message, the server's own args and env), so it stands above both the spec and its fanout.

use crate::fanout::{DEFAULT_RATE_PER_TOPIC, Publisher};
use crate::scenario::Motion;
use crate::spec::{LoadTestSpec, ManagedServer, RateSpec};

/// The ticker's flags: set one in `target.server.args` and wsload leaves the ticker to you.
const TICKER_TOPICS_FLAG: &str = "--ticker-topics";

/// Whether the managed server runs its ticker for this fanout: `publisher: server` against
/// `target.server`, unless the server's args or env already start a ticker of their own.
pub fn managed_ticker(spec: &LoadTestSpec) -> Option<&ManagedServer> {
    let server = spec.target.server.as_ref()?;
    let own = server.args.iter().any(|a| {
        a == TICKER_TOPICS_FLAG
            || a.strip_prefix(TICKER_TOPICS_FLAG)
                .is_some_and(|rest| rest.starts_with('='))
    }) || server
        .env
        .iter()
        .any(|e| e.name == wsload_contract::env::SERVER_TICKER_TOPICS);
    (spec.scenario.profile().motion == Motion::Fanout
        && spec.fanout.publisher == Publisher::Server
        && !own)
        .then_some(server)
}

/// The arguments that start a managed wsload-server's ticker over the fanout's topics (empty
/// when it runs none, see [`managed_ticker`]): `rate` spread evenly over the topics (its last
/// stage's target when it ramps: the ticker has one rate), `message.size` bytes of padding.
/// Every place a managed server starts (one machine, a cluster) passes these before the
/// user's `target.server.args`.
pub fn ticker_args(spec: &LoadTestSpec) -> Vec<String> {
    if managed_ticker(spec).is_none() {
        return Vec::new();
    }
    let topics = spec.fanout.topics.max(1);
    let per_topic = spec
        .rate
        .as_ref()
        .and_then(RateSpec::target)
        .map_or(DEFAULT_RATE_PER_TOPIC, |total| total / f64::from(topics));
    vec![
        TICKER_TOPICS_FLAG.to_string(),
        topics.to_string(),
        "--ticker-rate".to_string(),
        per_topic.to_string(),
        "--ticker-payload-size".to_string(),
        spec.message.size.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(body: &str) -> LoadTestSpec {
        crate::yaml::parse(body).expect("spec")
    }

    #[test]
    fn a_managed_server_ticks_the_fanouts_topics_at_its_rate() {
        let s = spec(
            "target: {server: {profile: pubsub}}\nscenario: fanout\nfanout: {topics: 4, publisher: server}\nrate: {messagesPerSecond: 200}\nmessage: {size: 32}\n",
        );
        assert_eq!(
            ticker_args(&s),
            [
                "--ticker-topics",
                "4",
                "--ticker-rate",
                "50",
                "--ticker-payload-size",
                "32"
            ]
        );
        // No rate: the default per topic; a ramp: its last target.
        let s = spec(
            "target: {server: {profile: pubsub}}\nscenario: fanout\nfanout: {topics: 3, publisher: server}\n",
        );
        assert_eq!(ticker_args(&s)[3], "10");
        let s = spec(
            "target: {server: {profile: pubsub}}\nscenario: fanout\nfanout: {topics: 2, publisher: server}\nrate: {stages: [{duration: 1s, target: 10}, {duration: 1s, target: 5}]}\n",
        );
        assert_eq!(ticker_args(&s)[3], "2.5");
    }

    #[test]
    fn no_ticker_for_wsloads_publishers_an_external_server_or_the_users_own() {
        for body in [
            "target: {server: {profile: pubsub}}\nscenario: fanout\n",
            "target: {url: 'ws://127.0.0.1:1/'}\nscenario: fanout\nfanout: {publisher: server}\n",
            "target: {server: {profile: pubsub, args: [--ticker-topics, '2']}}\nscenario: fanout\nfanout: {publisher: server}\n",
            "target: {server: {profile: pubsub, args: ['--ticker-topics=2']}}\nscenario: fanout\nfanout: {publisher: server}\n",
            "target: {server: {profile: pubsub, env: [{name: WSLOAD_SERVER_TICKER_TOPICS, value: '2'}]}}\nscenario: fanout\nfanout: {publisher: server}\n",
            "target: {server: {profile: pubsub}}\nscenario: echo\n",
        ] {
            assert_eq!(ticker_args(&spec(body)), Vec::<String>::new(), "{body}");
        }
    }
}
