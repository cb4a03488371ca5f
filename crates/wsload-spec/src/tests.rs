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
    assert_eq!(server.replicas, 1);
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
    let again = crate::yaml::to_string(&lt).expect("serialize");
    assert_eq!(parse(&again).expect("reparse"), lt);
}

#[test]
fn unknown_and_mistyped_fields_are_named() {
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  conections: [5]",
    ));
    // The field's path, then the parser's message and where in the file.
    assert!(
        e.contains("test.yaml: spec.conections: unknown field `conections`")
            && e.ends_with("at line 8, column 3"),
        "{e}"
    );
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
    // A key given twice belongs to the mapping that holds it, not to an unnamed `spec.?`.
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  scenario: pingpong",
    ));
    assert!(
        e.contains("test.yaml: spec: duplicate mapping key `scenario`"),
        "{e}"
    );
    // YAML 1.2 booleans: `yes` is not `true`.
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  tls: {insecureSkipVerify: yes}",
    ));
    assert!(
        e.contains("spec.tls.insecureSkipVerify: invalid boolean"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  connections: [1, x]",
    ));
    assert!(e.contains("spec.connections[1]: invalid u32"), "{e}");
    let e = errors("");
    assert!(
        e.contains("test.yaml: document: unexpected end of file"),
        "{e}"
    );
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
fn connections_are_bounded_by_sane_limits_not_one_machine() {
    // No host's open-file limit is a spec rule: a shard checks its own at run time.
    let lt = parse(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  connections: [100000]",
    ))
    .expect("100000 connections on one shard are valid");
    assert_eq!((lt.spec.connections[0], lt.spec.shards), (100_000, 1));
    let max_share = cel::MAX_SHARD_SHARE;
    assert!(
        parse(&MINIMAL.replace(
            "scenario: throughput",
            &format!("scenario: throughput\n  connections: [{max_share}]"),
        ))
        .is_ok()
    );

    // One shard's share above the bound: the fix is more shards.
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  connections: [25000000]\n  shards: 2",
    ));
    assert!(
        e.contains("spec.shards: the largest tier (25000000 connections) over 2 shard(s) is 12500000 per shard, above the 10000000 one process may hold; use shards: 3 or more"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: connectionLimit\n  limit: {max: 20000001}",
    ));
    assert!(
        e.contains("spec.shards: limit.max (20000001 connections)")
            && e.contains("use shards: 3 or more"),
        "{e}"
    );

    // A tier, limit.max and shards have bounds of their own.
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  connections: [100000001]\n  shards: 20",
    ));
    assert!(
        e.contains("spec.connections[0]: 100000001 connections; at most 100000000 in one tier"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: connectionLimit\n  limit: {max: 100000001}\n  shards: 20",
    ));
    assert!(
        e.contains("spec.limit.max: 100000001 connections; at most 100000000"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  connections: [10000]\n  shards: 5001",
    ));
    assert!(
        e.contains("spec.shards: 5001 shards; at most 5000 (status keeps one entry per shard)"),
        "{e}"
    );
    assert!(
        parse(&MINIMAL.replace(
            "scenario: throughput",
            "scenario: throughput\n  connections: [100000000]\n  shards: 5000",
        ))
        .is_ok(),
        "the largest tier on the most shards"
    );

    // Ephemeral ports per source address are real: that rule stays.
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
fn server_replicas_default_to_one_and_are_bounded() {
    let lt = parse(MINIMAL).expect("valid");
    let server = lt.spec.target.server.as_ref().expect("server");
    assert_eq!(server.replicas, 1);
    let lt = parse(&MINIMAL.replace("target: {server: {}}", "target: {server: {replicas: 8}}"))
        .expect("valid");
    assert_eq!(lt.spec.target.server.map(|s| s.replicas), Some(8));
    let e = errors(&MINIMAL.replace("target: {server: {}}", "target: {server: {replicas: 0}}"));
    assert!(
        e.contains("spec.target.server.replicas: must be at least 1"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace("target: {server: {}}", "target: {server: {replicas: 1001}}"));
    assert!(
        e.contains("spec.target.server.replicas: 1001 replicas; at most 1000"),
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

#[test]
fn cluster_fields_default_and_parse() {
    let lt = parse(MINIMAL).expect("valid");
    let (lg, run) = (&lt.spec.loadgen, &lt.spec.run);
    assert_eq!(lg.image, cluster::DEFAULT_LOADGEN_IMAGE);
    assert!(lg.separate_from_server);
    assert_eq!(lg.spread, Spread::OnePerNode);
    assert_eq!(run.deadlines.scheduling, Dur::secs(300));
    assert_eq!(run.deadlines.run, None);
    assert_eq!(run.start_delay, Dur::secs(3));
    assert_eq!(
        (run.shard_failure, run.cleanup),
        (ShardFailurePolicy::Fail, Cleanup::Delete)
    );

    let yaml = MINIMAL.replace(
        "target: {server: {}}",
        "target:
    server:
      imagePullPolicy: IfNotPresent
      resources: {requests: {cpu: '2', memory: 1Gi}, limits: {cpu: '2'}}
      placement: {nodeSelector: {role: server}}
  loadgen:
    image: registry.test/loadgen:dev
    imagePullPolicy: Always
    placement:
      tolerations: [{key: dedicated, operator: Equal, value: load, effect: NoSchedule}]
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [load]}]}]
    spread: preferred
    separateFromServer: false
    sysctls: {net.ipv4.ip_local_port_range: '1024 65535'}
    tuning: {sysctls: {net.core.somaxconn: '65535'}}
    env: [{name: JWT_SECRET, value: s}]
    serviceAccountName: loadgen
  run:
    deadlines: {scheduling: 1m, run: 10m}
    startDelay: 5s
    shardFailure: continue
    cleanup: keep
    ttlAfterFinished: 1h",
    );
    let lt = parse(&yaml).expect("valid");
    let s = &lt.spec;
    let server = s.target.server.as_ref().expect("server");
    assert_eq!(server.image_pull_policy, Some(PullPolicy::IfNotPresent));
    assert!(server.resources.is_some());
    assert_eq!(server.placement.node_selector.len(), 1);
    assert_eq!(s.loadgen.placement.tolerations.len(), 1);
    assert!(s.loadgen.placement.affinity.is_some());
    assert_eq!(s.loadgen.spread, Spread::Preferred);
    assert!(!s.loadgen.separate_from_server);
    assert_eq!(s.loadgen.tuning.as_ref().map(|t| t.sysctls.len()), Some(1));
    assert_eq!(s.run.deadlines.run, Some(Dur::secs(600)));
    assert_eq!(s.run.deadlines.ready, Dur::secs(300), "unset stays default");
    assert_eq!(s.run.ttl_after_finished, Some(Dur::secs(3600)));
    // The document a shard reads is the one the operator serializes: it must read back.
    let again = crate::yaml::to_string(&lt).expect("serialize");
    assert_eq!(parse(&again).expect("reparse"), lt);

    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  loadgen: {spread: everywhere}",
    ));
    assert!(
        e.contains("spec.loadgen.spread") && e.contains("unknown variant `everywhere`"),
        "{e}"
    );
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  run: {deadlines: {collect: 0s}}\n  loadgen: {sysctls: {'bad name': '1'}}",
    ));
    assert!(
        e.contains("spec.run.deadlines.collect: must be above zero"),
        "{e}"
    );
    assert!(e.contains("spec.loadgen.sysctls.bad name"), "{e}");
}

#[test]
fn an_empty_status_reads_and_a_full_one_round_trips() {
    let empty: LoadTestStatus = serde_json::from_str("{}").expect("empty status");
    assert_eq!(empty, LoadTestStatus::default());
    let status: LoadTestStatus = crate::yaml::parse(
        "
phase: Succeeded
observedGeneration: 1
conditions:
- {type: Verdict, status: 'True', reason: Passed, message: all thresholds held, lastTransitionTime: '2025-01-01T00:00:00Z'}
startAt: '2025-01-01T00:00:03Z'
startSkewMillis: 1.5
shards: [{index: 0, pod: t-shard-0, connections: 50, state: Collected, restarts: 0}]
tiers: [{label: '100', connections: 100, messagesPerSecond: 1e6, rtt: {p50: 0.1, p90: 0.2, p99: 1, p999: 2, max: 3}, errors: {refused: 2}}]
thresholds: [{threshold: 'rtt.p99 < 5ms', actual: 0.001, pass: true}]
verdict: Pass
achievedRate: 1.00M msg/s
p99: 1.0ms
",
    )
    .expect("status");
    assert_eq!(status.phase, Some(Phase::Succeeded));
    assert_eq!(status.shards[0].state, ShardState::Collected);
    assert_eq!(status.tiers[0].rtt.map(|p| p.p99), Some(1.0));
    let again: LoadTestStatus =
        serde_json::from_value(serde_json::to_value(&status).expect("ser")).expect("de");
    assert_eq!(again, status);
    assert!(Phase::Failed.is_finished() && !Phase::Collecting.is_finished());
}

#[test]
fn phase_and_verdict_names_are_their_serialized_form() {
    let json = |v: serde_json::Value| v.as_str().map(str::to_string);
    let phases = [
        Phase::Pending,
        Phase::Starting,
        Phase::Running,
        Phase::Collecting,
        Phase::Succeeded,
        Phase::Failed,
    ];
    for p in phases {
        assert_eq!(json(serde_json::json!(p)).as_deref(), Some(p.as_str()));
    }
    for v in [Verdict::Pass, Verdict::Fail] {
        assert_eq!(json(serde_json::json!(v)).as_deref(), Some(v.as_str()));
    }
}

#[test]
fn cluster_limits_are_checked_here_too() {
    let e = errors(&MINIMAL.replace("name: tiny", "name: Tiny_Test"));
    assert!(
        e.contains("metadata.name: \"Tiny_Test\": must be lowercase letters"),
        "{e}"
    );
    let long = "a".repeat(cel::MAX_NAME_LEN + 1);
    assert!(
        errors(&MINIMAL.replace("name: tiny", &format!("name: {long}"))).contains("at most 56")
    );
    assert!(parse(&MINIMAL.replace("name: tiny", &format!("name: {}", &long[1..]))).is_ok());

    let tiers: Vec<String> = (1..=cel::MAX_TIERS + 1).map(|n| n.to_string()).collect();
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        &format!(
            "scenario: throughput\n  connections: [{}]",
            tiers.join(", ")
        ),
    ));
    assert!(e.contains("spec.connections: 65 tiers; at most 64"), "{e}");
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        &format!(
            "scenario: throughput\n  thresholds: ['errors <{}1%']",
            " ".repeat(cel::MAX_THRESHOLD_LEN)
        ),
    ));
    assert!(
        e.contains("spec.thresholds[0]: 138 characters; at most 128"),
        "{e}"
    );
}

#[test]
fn secret_env_names_are_shell_safe() {
    assert_eq!(
        secret_env_name("wse-jwt", "secret.key"),
        "WSLOAD_SECRET_WSE_JWT_SECRET_KEY"
    );
}

#[test]
fn write_timeout_defaults_to_10s_and_must_be_above_zero() {
    let lt = parse(MINIMAL).expect("valid");
    assert_eq!(lt.spec.write_timeout, Dur::secs(10));
    let lt = parse(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  writeTimeout: 500ms",
    ))
    .expect("valid");
    assert_eq!(lt.spec.write_timeout, Dur::millis(500));
    let e = errors(&MINIMAL.replace(
        "scenario: throughput",
        "scenario: throughput\n  writeTimeout: 0s",
    ));
    assert!(e.contains("spec.writeTimeout: must be above zero"), "{e}");
}

#[test]
fn connection_limits_default_to_the_old_fixed_ones_and_are_bounded() {
    let lt = parse(MINIMAL).expect("valid");
    let l = lt.spec.connect.limits;
    assert_eq!(
        (
            l.max_message_bytes,
            l.max_frame_bytes,
            l.max_pending_write_bytes
        ),
        (64 << 20, 16 << 20, 16 << 20)
    );
    assert_eq!(l.worst_case_bytes(), 160 << 20);
    let set = |limits: &str| {
        MINIMAL.replace(
            "scenario: throughput",
            &format!("scenario: throughput\n  connect: {{limits: {limits}}}"),
        )
    };
    let lt = parse(&set("{maxMessageBytes: 65536, maxFrameBytes: 4096}")).expect("valid");
    assert_eq!(lt.spec.connect.limits.max_frame_bytes, 4096);
    assert_eq!(lt.spec.connect.limits.max_pending_write_bytes, 16 << 20);
    let e = errors(&set("{maxFrameBytes: 100}"));
    assert!(
        e.contains("spec.connect.limits.maxFrameBytes: 100 bytes: must be 1024 (1 KiB) to 1073741824 (1 GiB)"),
        "{e}"
    );
    let e = errors(&set("{maxPendingWriteBytes: 2147483648}"));
    assert!(
        e.contains("spec.connect.limits.maxPendingWriteBytes: 2147483648 bytes: must be 1024"),
        "{e}"
    );
    let e = errors(&set("{maxMessageBytes: 4096, maxFrameBytes: 8192}"));
    assert!(
        e.contains(
            "spec.connect.limits.maxFrameBytes: 8192 bytes: must be at most maxMessageBytes"
        ),
        "{e}"
    );
}

/// `loss` is what was sent expecting an answer and never answered: only scenarios that await
/// each answer count it. Throughput and its kin count answers without awaiting any, so a loss
/// threshold there could never fail; it is refused, as every figure a scenario does not
/// measure is.
#[test]
fn loss_is_a_threshold_only_where_answers_are_awaited() {
    for scenario in crate::scenario::Scenario::ALL {
        let name = scenario.as_str();
        let yaml = MINIMAL.replace(
            "scenario: throughput",
            &format!(
                "scenario: {name}\n  rate: {{messagesPerSecond: 10}}\n  thresholds: ['loss < 1%']"
            ),
        );
        let refused = match parse(&yaml) {
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        let awaits = matches!(
            name,
            "pingLatency" | "sustainedHold" | "pingpong" | "echo" | "constantRate"
        );
        match refused {
            None => assert!(awaits, "{name}: accepted a loss threshold"),
            Some(e) => {
                assert!(!awaits, "{name}: refused: {e}");
                assert!(
                    e.contains(&format!(
                        "spec.thresholds[0]: \"loss < 1%\": the {name} scenario does not measure loss"
                    )),
                    "{name}: {e}"
                );
            }
        }
    }
}
