//! `spec.reconnect` and `spec.disruptions`: a policy's values that mean something for it, and
//! disruptions that can be done to this target within the measured phase.

use super::Errors;
use crate::fanout::Publisher;
use crate::reconnect::{MAX_DISRUPTIONS, ReconnectPolicy};
use crate::spec::{LoadTestSpec, Scenario};

pub(super) fn check(spec: &LoadTestSpec, e: &mut Errors) {
    policy(spec, e);
    disruptions(spec, e);
}

/// A Kubernetes object name (DNS-1123 subdomain): dot-separated labels of lowercase letters,
/// digits and '-', each starting and ending with a letter or digit; at most 253 characters.
fn is_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn policy(spec: &LoadTestSpec, e: &mut Errors) {
    let r = &spec.reconnect;
    let p = r.policy;
    let set = [
        ("delay", r.delay.is_some()),
        ("maxDelay", r.max_delay.is_some()),
        ("jitter", r.jitter.is_some()),
        ("delays", !r.delays.is_empty()),
        ("maxAttempts", r.max_attempts.is_some()),
    ];
    // Which fields each policy reads: any other one set is a mistake the user should hear of.
    let reads: &[&str] = match p {
        ReconnectPolicy::None => &[],
        ReconnectPolicy::Immediate => &["maxAttempts"],
        ReconnectPolicy::Fixed => &["delay", "jitter", "maxAttempts"],
        ReconnectPolicy::Exponential => &["delay", "maxDelay", "jitter", "maxAttempts"],
        ReconnectPolicy::Steps => &["delays", "maxAttempts"],
        ReconnectPolicy::Socketio | ReconnectPolicy::Signalr | ReconnectPolicy::Centrifuge => &[],
    };
    for (field, is_set) in set {
        if !is_set || reads.contains(&field) {
            continue;
        }
        let why = match p {
            ReconnectPolicy::None => {
                "no reconnect policy is named, so nothing reads it; set reconnect.policy (e.g. exponential)".to_string()
            }
            p if p.is_preset() => format!(
                "the {} policy is that client library's defaults and sets every delay itself; remove it, or name policy exponential, fixed or steps",
                p.as_str()
            ),
            p => format!("the {} policy does not read it; remove it", p.as_str()),
        };
        e.add(format!("reconnect.{field}"), why);
    }
    if p == ReconnectPolicy::Steps && r.delays.is_empty() {
        e.add(
            "reconnect.delays",
            "the steps policy needs its delays, e.g. [0s, 2s, 10s, 30s]",
        );
    }
    if let (Some(d), Some(m)) = (r.delay, r.max_delay)
        && m < d
    {
        e.add(
            "reconnect.maxDelay",
            format!(
                "{} is below reconnect.delay ({}); raise it or lower delay",
                humantime::format_duration(m.get()),
                humantime::format_duration(d.get())
            ),
        );
    }
    let replicas = spec.target.server.as_ref().map_or(1, |s| s.replicas);
    if r.enabled()
        && spec.scenario == Scenario::Fanout
        && spec.fanout.publisher == Publisher::Server
        && replicas > 1
    {
        e.add(
            "reconnect.policy",
            format!(
                "a subscriber back may reach another of the {replicas} replicas, whose ticker numbers its publishes from its own start (fanout.publisher: server), so its deliveries could not be followed across the drop; use target.server.replicas: 1, or fanout.publisher: wsload"
            ),
        );
    }
    if r.enabled() && !reconnects(spec.scenario) {
        e.add(
            "reconnect.policy",
            format!(
                "only sustainedHold's and fanout's connections reconnect in this version (the scenario is {}); use one of them, or policy none",
                spec.scenario.as_str()
            ),
        );
    }
}

/// The scenarios whose connections stay open for the measured phase, and so can be dropped
/// and come back.
fn reconnects(s: Scenario) -> bool {
    matches!(s, Scenario::SustainedHold | Scenario::Fanout)
}

fn disruptions(spec: &LoadTestSpec, e: &mut Errors) {
    let list = &spec.disruptions;
    if list.is_empty() {
        return;
    }
    if list.len() > MAX_DISRUPTIONS {
        e.add(
            "disruptions",
            format!("{} disruptions; at most {MAX_DISRUPTIONS}", list.len()),
        );
    }
    if !reconnects(spec.scenario) {
        e.add(
            "disruptions",
            format!(
                "disruptions happen during a hold (scenario sustainedHold) or a fanout, not in {}",
                spec.scenario.as_str()
            ),
        );
    }
    let duration = spec.duration.get();
    let mut last = None;
    // Replicas killed with no restart, over the entries so far: each tier runs them all.
    let mut down_for_good = 0u32;
    for (i, d) in list.iter().enumerate() {
        let field = format!("disruptions[{i}]");
        if d.at.get() >= duration {
            e.add(
                format!("{field}.at"),
                format!(
                    "{} is not within the measured phase ({}); make it earlier or the duration longer",
                    humantime::format_duration(d.at.get()),
                    humantime::format_duration(duration)
                ),
            );
        }
        if last.is_some_and(|l| d.at < l) {
            e.add(
                format!("{field}.at"),
                "disruptions are listed in the order they happen; move this one up",
            );
        } else if last == Some(d.at) {
            e.add(
                format!("{field}.at"),
                "two disruptions at one instant would share one window of the figures; give them different instants (or kill more replicas in one)",
            );
        }
        last = Some(d.at);
        let actions = [d.kill.is_some(), d.restart.is_some(), d.close.is_some()];
        match actions.iter().filter(|a| **a).count() {
            0 => {
                e.add(
                    &field,
                    "says nothing to do; give it kill: {replicas: 1}, restart: {} or close: {share: 25%}",
                );
                continue;
            }
            1 => {}
            _ => {
                e.add(
                    &field,
                    "kill, restart and close are separate disruptions; give each its own entry",
                );
                continue;
            }
        }
        if let Some(c) = &d.close
            && c.share.0 <= 0.0
        {
            e.add(
                format!("{field}.close.share"),
                "closes no connection; give a share above 0%, e.g. 25%",
            );
        }
        let ticker =
            spec.scenario == Scenario::Fanout && spec.fanout.publisher == Publisher::Server;
        if ticker && (d.kill.is_some() || d.restart.is_some()) {
            e.add(
                &field,
                "a replica started again numbers its ticker's publishes from 1 again (fanout.publisher: server), so its subscribers' deliveries could not be followed across it; use fanout.publisher: wsload, or a close disruption",
            );
        }
        match d.restart.as_ref().map(|r| (r.deployment.as_deref(), r.pause.is_some())) {
            Some((None, _)) if spec.target.server.is_none() => e.add(
                format!("{field}.restart"),
                "only the managed server (target.server) can be restarted; roll your own Deployment with restart: {deployment: NAME}, or drop every connection from the client side with close: {share: 100%}",
            ),
            Some((Some(name), pause)) => {
                if spec.target.server.is_some() {
                    e.add(
                        format!("{field}.restart.deployment"),
                        "rolls your own Deployment, the one behind target.url; the managed server (target.server) is restarted with restart: {}",
                    );
                }
                if pause {
                    e.add(
                        format!("{field}.restart.pause"),
                        "the Deployment's own strategy paces its roll (minReadySeconds, maxUnavailable); remove pause",
                    );
                }
                if !is_subdomain(name) {
                    e.add(
                        format!("{field}.restart.deployment"),
                        format!("{name:?} is no Deployment name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"),
                    );
                }
            }
            _ => {}
        }
        let Some(kill) = &d.kill else {
            continue;
        };
        match &spec.target.server {
            None => e.add(
                format!("{field}.kill"),
                "only the managed server's replicas can be killed (target.server); an external target.url is not wsload's to kill",
            ),
            Some(s)
                if kill.restart_after.is_none()
                    && down_for_good + kill.replicas >= s.replicas.max(1) =>
            {
                e.add(
                    format!("{field}.kill.replicas"),
                    format!(
                        "{} of {} replicas killed for good (this kill and those before it in the tier) leaves nothing to reconnect to; kill fewer, run more (target.server.replicas) or give restartAfter",
                        down_for_good + kill.replicas,
                        s.replicas.max(1)
                    ),
                )
            }
            Some(s) if kill.replicas > s.replicas.max(1) => e.add(
                format!("{field}.kill.replicas"),
                format!(
                    "{} replicas killed, but the server runs {}",
                    kill.replicas,
                    s.replicas.max(1)
                ),
            ),
            Some(_) => {}
        }
        if kill.restart_after.is_none() {
            down_for_good += kill.replicas;
        }
        if kill.replicas == 0 {
            e.add(format!("{field}.kill.replicas"), "must be at least 1");
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::LoadTest;

    /// Every error of a hold against three managed replicas with `extra` in its spec.
    fn refused(extra: &str) -> String {
        let doc = format!(
            "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata: {{name: t}}\nspec:\n  target: {{server: {{replicas: 3}}}}\n  scenario: sustainedHold\n  duration: 10s\n{extra}"
        );
        match LoadTest::from_yaml(&doc, "t.yaml") {
            Ok(_) => panic!("accepted:\n{doc}"),
            Err(e) => e.to_string(),
        }
    }

    /// The errors of a hold against `target` with `disruptions` (none: accepted).
    fn of_target(target: &str, disruptions: &str) -> String {
        let doc = format!(
            "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata: {{name: t}}\nspec:\n  target: {target}\n  scenario: sustainedHold\n  duration: 10s\n  reconnect: {{policy: immediate}}\n  disruptions: {disruptions}\n"
        );
        LoadTest::from_yaml(&doc, "t.yaml")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn a_deployment_rolled_is_the_one_behind_an_external_url_paced_by_itself() {
        let url = "{url: 'ws://chat.default.svc:8080/ws'}";
        assert_eq!(
            of_target(url, "[{at: 2s, restart: {deployment: chat}}]"),
            ""
        );
        let e = of_target(url, "[{at: 2s, restart: {}}]");
        assert!(
            e.contains("spec.disruptions[0].restart: only the managed server")
                && e.contains("restart: {deployment: NAME}"),
            "{e}"
        );
        let e = of_target(
            "{server: {replicas: 2}}",
            "[{at: 2s, restart: {deployment: chat}}]",
        );
        assert!(
            e.contains("spec.disruptions[0].restart.deployment: rolls your own Deployment"),
            "{e}"
        );
        let e = of_target(url, "[{at: 2s, restart: {deployment: chat, pause: 1s}}]");
        assert!(
            e.contains("spec.disruptions[0].restart.pause: the Deployment's own strategy"),
            "{e}"
        );
        let e = of_target(url, "[{at: 2s, restart: {deployment: Chat_1}}]");
        assert!(
            e.contains("spec.disruptions[0].restart.deployment: \"Chat_1\" is no Deployment name"),
            "{e}"
        );
    }

    #[test]
    fn a_policy_and_its_disruptions_are_accepted_as_written() {
        let doc = "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata: {name: t}\nspec:\n  target: {server: {replicas: 3}}\n  scenario: sustainedHold\n  duration: 10s\n  reconnect: {policy: exponential, delay: 100ms, maxDelay: 5s, jitter: decorrelated, maxAttempts: 10}\n  disruptions:\n    - {at: 2s, kill: {replicas: 1}}\n    - {at: 5s, kill: {replicas: 3, restartAfter: 1s}}\n";
        let lt = LoadTest::from_yaml(doc, "t.yaml").expect("valid");
        assert_eq!(lt.spec.disruptions.len(), 2);
        // With several shards too: the operator times them (`wsload run` says it cannot).
        let sharded = doc.replace("  duration: 10s\n", "  duration: 10s\n  shards: 3\n");
        assert!(sharded.contains("shards: 3"));
        LoadTest::from_yaml(&sharded, "t.yaml").expect("valid with shards");
        assert_eq!(
            lt.spec.reconnect.describe(),
            "exponential (100ms..5s doubling, decorrelated jitter, at most 10 attempts)"
        );
    }

    #[test]
    fn fields_a_policy_does_not_read_are_named() {
        let e = refused("  reconnect: {policy: socketio, delay: 1s}\n");
        assert!(
            e.contains(
                "spec.reconnect.delay: the socketio policy is that client library's defaults"
            ),
            "{e}"
        );
        let e = refused("  reconnect: {jitter: full}\n");
        assert!(
            e.contains("spec.reconnect.jitter: no reconnect policy is named"),
            "{e}"
        );
        let e = refused("  reconnect: {policy: steps}\n");
        assert!(
            e.contains("spec.reconnect.delays: the steps policy needs its delays"),
            "{e}"
        );
        let e = refused("  reconnect: {policy: exponential, delay: 2s, maxDelay: 1s}\n");
        assert!(
            e.contains("spec.reconnect.maxDelay: 1s is below reconnect.delay (2s)"),
            "{e}"
        );
    }

    #[test]
    fn disruptions_that_cannot_happen_are_refused_with_their_fix() {
        let e = refused("  disruptions: [{at: 10s, kill: {}}]\n");
        assert!(
            e.contains("spec.disruptions[0].at: 10s is not within the measured phase (10s)"),
            "{e}"
        );
        let e = refused("  disruptions: [{at: 1s, kill: {replicas: 3}}]\n");
        assert!(
            e.contains(
                "spec.disruptions[0].kill.replicas: 3 of 3 replicas killed for good (this kill"
            ),
            "{e}"
        );
        let e = refused("  disruptions: [{at: 5s, kill: {}}, {at: 1s, kill: {}}]\n");
        assert!(
            e.contains("spec.disruptions[1].at: disruptions are listed in the order they happen"),
            "{e}"
        );
        let e = refused("  disruptions: [{at: 1s}]\n");
        assert!(e.contains("spec.disruptions[0]: says nothing to do"), "{e}");
        let e = refused("  disruptions: [{at: 1s, kill: {replicas: 2}}, {at: 2s, kill: {}}]\n");
        assert!(
            e.contains("spec.disruptions[1].kill.replicas: 3 of 3 replicas killed for good (this kill and those before it"),
            "{e}"
        );
        let e = refused("  disruptions: [{at: 1s, kill: {}}, {at: 1s, close: {share: 5%}}]\n");
        assert!(
            e.contains("spec.disruptions[1].at: two disruptions at one instant"),
            "{e}"
        );
        let e = refused("  disruptions: [{at: 1s, kill: {}, restart: {}}]\n");
        assert!(
            e.contains("spec.disruptions[0]: kill, restart and close are separate disruptions"),
            "{e}"
        );
        let e = refused("  disruptions: [{at: 1s, close: {share: 0%}}]\n");
        assert!(
            e.contains("spec.disruptions[0].close.share: closes no connection"),
            "{e}"
        );
        let doc = "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata: {name: t}\nspec:\n  target: {url: \"ws://127.0.0.1:9/\"}\n  scenario: throughput\n  reconnect: {policy: immediate}\n  disruptions: [{at: 1s, kill: {}}]\n";
        let e = LoadTest::from_yaml(doc, "t.yaml")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        for want in [
            "spec.reconnect.policy: only sustainedHold's and fanout's connections reconnect",
            "spec.disruptions: disruptions happen during a hold",
            "spec.disruptions[0].kill: only the managed server's replicas can be killed",
        ] {
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn a_fanout_reconnects_and_is_disrupted_but_not_its_tickers_replicas() {
        let fanout = |extra: &str| {
            format!(
                "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata: {{name: t}}\nspec:\n  target: {{server: {{profile: pubsub}}}}\n  scenario: fanout\n  duration: 10s\n  reconnect: {{policy: immediate}}\n{extra}"
            )
        };
        let doc = fanout(
            "  disruptions: [{at: 2s, close: {share: 25%}}, {at: 5s, kill: {replicas: 1, restartAfter: 1s}}]\n",
        );
        let lt = LoadTest::from_yaml(&doc, "t.yaml").expect("valid");
        assert_eq!(lt.spec.disruptions.len(), 2);
        let doc = fanout(
            "  fanout: {publisher: server}\n  disruptions: [{at: 2s, close: {share: 25%}}, {at: 5s, restart: {}}]\n",
        );
        let e = LoadTest::from_yaml(&doc, "t.yaml")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("spec.disruptions[1]: a replica started again numbers its ticker's publishes from 1 again"),
            "{e}"
        );
        assert!(!e.contains("spec.disruptions[0]"), "{e}");
        let doc = "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata: {name: t}\nspec:\n  target: {server: {profile: pubsub, replicas: 2}}\n  scenario: fanout\n  fanout: {publisher: server}\n  reconnect: {policy: immediate}\n";
        let e = LoadTest::from_yaml(doc, "t.yaml")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains(
                "spec.reconnect.policy: a subscriber back may reach another of the 2 replicas"
            ),
            "{e}"
        );
    }
}
