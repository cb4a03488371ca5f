use super::*;

fn parse(yaml: &str) -> Result<LoadTest> {
    LoadTest::from_yaml(yaml, "test.yaml")
}

fn errors(yaml: &str) -> String {
    match parse(yaml) {
        Ok(_) => panic!("accepted:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

const MINIMAL: &str = "
apiVersion: wsload.dev/v1alpha1
kind: LoadTest
metadata: {name: tiny}
spec:
  target: {server: {}}
  scenario: throughput
";

#[test]
fn minimal_file_gets_defaults() {
    let lt = parse(MINIMAL).expect("valid");
    assert_eq!(lt.name(), "tiny");
    let s = &lt.spec;
    assert_eq!(s.connections, vec![100]);
    assert_eq!(s.duration, Dur::secs(10));
    assert_eq!(s.message.size, 64);
    assert_eq!(s.shards, 1);
    assert_eq!(s.sources.per_address, spec::DEFAULT_PER_ADDRESS);
    let server = s.target.server.as_ref().expect("server");
    assert_eq!(
        (server.port, server.metrics_port, server.path.as_str()),
        (8080, 9090, "/")
    );
    assert_eq!(server.image, spec::DEFAULT_SERVER_IMAGE);
}

#[test]
fn full_file_round_trips() {
    let yaml = "
apiVersion: wsload.dev/v1alpha1
kind: LoadTest
metadata: {name: full, namespace: perf}
spec:
  target: {url: 'wss://example.test:443/wse'}
  protocol: wse
  auth:
    jwt: {secret: {fromEnv: JWT_SECRET}, issuer: wse-bench, audience: wse-bench, ttl: 1h}
    sendAs: bearer
    headers: {X-Test: '1'}
  tls: {insecureSkipVerify: true}
  scenario: constantRate
  connections: [100, 1000]
  rate: {stages: [{duration: 10s, target: 1000}, {duration: 20s, target: 5000}]}
  message: {size: 256, format: msgpack}
  sources: {addresses: [127.0.0.1, 127.0.0.2]}
  shards: 2
  thresholds: ['rtt.p99 < 5ms', 'errors < 0.1%', 'throughput > 1K msg/s']
  serverMetrics: {url: 'http://example.test:9090/metrics', labels: {profile: wse}}
";
    let lt = parse(yaml).expect("valid");
    assert_eq!(lt.spec.thresholds.len(), 3);
    assert_eq!(lt.spec.rate.as_ref().map(|r| r.stages.len()), Some(2));
    let again = serde_yaml::to_string(&lt).expect("serialize");
    assert_eq!(parse(&again).expect("reparse"), lt);
}

#[test]
fn unknown_and_mistyped_fields_are_named() {
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  conections: [5]",
    ));
    assert!(e.contains("spec: unknown field `conections`"), "{e}");
    let e = errors(&MINIMAL.replace("scenario: throughput", "scenario: fast"));
    assert!(
        e.contains("spec.scenario") && e.contains("unknown variant `fast`"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  duration: soon",
    ));
    assert!(e.contains("spec.duration") && e.contains("500ms"), "{e}");
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  thresholds: ['p99 < 5ms']",
    ));
    assert!(
        e.contains("spec.thresholds[0]") && e.contains("unknown metric \"p99\""),
        "{e}"
    );
    let e = errors(&MINIMAL.replace("kind: LoadTest", "kind: Deployment"));
    assert!(e.contains("not a LoadTest"), "{e}");
}

#[test]
fn semantic_errors_are_all_reported_with_their_fix() {
    let yaml = "
apiVersion: wsload.dev/v1alpha1
kind: LoadTest
spec:
  target: {url: 'http://x', server: {}}
  scenario: sustainedHold
  connections: [0, 3]
  shards: 4
  thresholds: ['limit > 5', 'survival > 99%']
";
    let e = errors(yaml);
    for want in [
        "spec.target: set either url",
        "spec.connections[0]: must be at least 1",
        "spec.connections[1]: 3 connections cannot be split over 4 shards",
        "spec.thresholds[0]: \"limit > 5\": the sustainedHold scenario does not measure limit",
    ] {
        assert!(e.contains(want), "missing {want:?} in\n{e}");
    }
    assert!(
        !e.contains("thresholds[1]"),
        "survival is measured by sustainedHold:\n{e}"
    );
}

#[test]
fn capacity_errors_say_how_many_shards() {
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  connections: [100000]",
    ));
    assert!(e.contains("use shards: 6 or more"), "{e}");
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  connections: [5000]\n  sources: {addresses: [10.0.0.1], perAddress: 1000}",
    ));
    assert!(
        e.contains("spec.sources.addresses") && e.contains("add addresses"),
        "{e}"
    );
}

#[test]
fn scenario_requirements() {
    let e = errors(&MINIMAL.replace("throughput", "constantRate"));
    assert!(
        e.contains("spec.rate: constantRate needs rate.messagesPerSecond"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace("target: {server: {}}", "target: {server: {profile: wse}}"));
    assert!(
        e.contains("spec.protocol") && e.contains("does not match"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  auth: {jwt: {secret: {}}}",
    ));
    assert!(
        e.contains("spec.auth.jwt.secret: set exactly one of value, fromEnv or secretRef"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace("scenario: throughput", "scenario: throughput\n  thresholds: ['delivery > 99%']\n  target: {url: 'ws://h:1/'}").replace("  target: {server: {}}\n", ""));
    assert!(e.contains("delivery needs the server's counter"), "{e}");
}
