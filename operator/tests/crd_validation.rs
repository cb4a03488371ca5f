//! The CRD against a real API server (`support::cluster`): nonsense is rejected with a message
//! naming the field, `wsload validate` (the Rust checker) rejects the same input for the same
//! reason, every example is accepted and reads back exactly as `wsload run` reads it, and a
//! started test's spec cannot change.

mod support;

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wsload_spec::{LoadTest, LoadTestResource, cel};

/// One bad input: a spec (the lines under `spec:`), the field the error must name, and a
/// phrase each checker's message must contain.
struct Case {
    what: &'static str,
    name: &'static str,
    spec: &'static str,
    field: &'static str,
    server: &'static str,
    /// What `wsload validate` says; `None` where only the cluster refuses (see docs).
    rust: Option<(&'static str, &'static str)>,
}

const SERVER: &str = "  target: {server: {}}\n";

const fn case(
    what: &'static str,
    spec: &'static str,
    field: &'static str,
    server: &'static str,
    rust: Option<(&'static str, &'static str)>,
) -> Case {
    Case {
        what,
        name: "bad",
        spec,
        field,
        server,
        rust,
    }
}

fn cases() -> Vec<Case> {
    let same = |field, phrase| Some((field, phrase));
    vec![
        case(
            "zero shards",
            "  target: {server: {}}\n  scenario: throughput\n  shards: 0\n",
            "spec.shards",
            "should be greater than or equal to 1",
            same("spec.shards", "must be at least 1"),
        ),
        case(
            "empty target",
            "  target: {}\n  scenario: throughput\n",
            "spec.target",
            "set url (e.g. ws://host:8080/) or server: {} for the reference server",
            same("spec.target", "set url (e.g. ws://host:8080/) or server"),
        ),
        case(
            "both url and managed server",
            "  target: {url: 'ws://h:1/', server: {}}\n  scenario: throughput\n",
            "spec.target",
            "set either url (an external server) or server (a managed one), not both",
            same("spec.target", "set either url"),
        ),
        case(
            "url scheme not ws:// or wss://",
            "  target: {url: 'http://h:1/'}\n  scenario: throughput\n",
            "spec.target.url",
            "\"http://h:1/\" must start with ws:// or wss://",
            same("spec.target.url", "must start with ws:// or wss://"),
        ),
        case(
            "url port out of range",
            "  target: {url: 'ws://h:99999/'}\n  scenario: throughput\n",
            "spec.target.url",
            "is not a target URL",
            same("spec.target.url", "has port \"99999\""),
        ),
        case(
            "url with an unclosed IPv6 bracket",
            "  target: {url: 'ws://[::1/'}\n  scenario: throughput\n",
            "spec.target.url",
            "is not a target URL",
            same("spec.target.url", "without its closing ']'"),
        ),
        case(
            "url without a host",
            "  target: {url: 'ws:///x'}\n  scenario: throughput\n",
            "spec.target.url",
            "\"ws:///x\" has no host",
            same("spec.target.url", "has no host"),
        ),
        case(
            "threshold on an unknown metric",
            "  target: {server: {}}\n  scenario: throughput\n  thresholds: ['p99 < 5ms']\n",
            "spec.thresholds[0]",
            "unknown metric in \"p99 < 5ms\"; known: rtt.<stat>",
            same("spec.thresholds[0]", "unknown metric \"p99\""),
        ),
        case(
            "threshold without a comparison",
            "  target: {server: {}}\n  scenario: throughput\n  thresholds: ['rtt.p99 5ms']\n",
            "spec.thresholds[0]",
            "has no comparison; write METRIC < VALUE",
            same("spec.thresholds[0]", "has no comparison"),
        ),
        case(
            "latency threshold without a unit",
            "  target: {server: {}}\n  scenario: throughput\n  thresholds: ['rtt.p99 < 5']\n",
            "spec.thresholds[0]",
            "needs a time unit: us, ms or s",
            same("spec.thresholds[0]", "needs a time unit"),
        ),
        case(
            "a shard's share above 10,000,000 connections",
            "  target: {server: {}}\n  scenario: throughput\n  connections: [25000000]\n  shards: 2\n",
            "spec.shards",
            "above 10000000 connections per shard",
            same(
                "spec.shards",
                "is 12500000 per shard, above the 10000000 one process may hold; use shards: 3",
            ),
        ),
        case(
            "a tier above 100,000,000 connections",
            "  target: {server: {}}\n  scenario: throughput\n  connections: [100000001]\n  shards: 20\n",
            "spec.connections[0]",
            "should be less than or equal to 100000000",
            same(
                "spec.connections[0]",
                "100000001 connections; at most 100000000 in one tier",
            ),
        ),
        case(
            "limit.max above 100,000,000 connections",
            "  target: {server: {}}\n  scenario: connectionLimit\n  limit: {max: 100000001}\n  shards: 20\n",
            "spec.limit.max",
            "should be less than or equal to 100000000",
            same("spec.limit.max", "100000001 connections; at most 100000000"),
        ),
        case(
            "more than 5,000 shards",
            "  target: {server: {}}\n  scenario: throughput\n  connections: [10000]\n  shards: 5001\n",
            "spec.shards",
            "should be less than or equal to 5000",
            same("spec.shards", "5001 shards; at most 5000"),
        ),
        case(
            "zero server replicas",
            "  target: {server: {replicas: 0}}\n  scenario: throughput\n",
            "spec.target.server.replicas",
            "should be greater than or equal to 1",
            same("spec.target.server.replicas", "must be at least 1"),
        ),
        case(
            "more than 1,000 server replicas",
            "  target: {server: {replicas: 1001}}\n  scenario: throughput\n",
            "spec.target.server.replicas",
            "should be less than or equal to 1000",
            same("spec.target.server.replicas", "1001 replicas; at most 1000"),
        ),
        case(
            "more connections than the listed source addresses carry",
            "  target: {server: {}}\n  scenario: throughput\n  connections: [5000]\n  sources: {addresses: [10.0.0.1], perAddress: 1000}\n",
            "spec.sources.addresses",
            "cannot carry the connections per shard",
            same(
                "spec.sources.addresses",
                "cannot carry 5000 connections per shard",
            ),
        ),
        case(
            "fewer connections than shards",
            "  target: {server: {}}\n  scenario: throughput\n  connections: [3]\n  shards: 4\n",
            "spec.connections",
            "cannot be split over more shards",
            same("spec.connections[0]", "cannot be split over 4 shards"),
        ),
        case(
            "a tier of zero connections",
            "  target: {server: {}}\n  scenario: throughput\n  connections: [0]\n",
            "spec.connections[0]",
            "should be greater than or equal to 1",
            same("spec.connections[0]", "must be at least 1"),
        ),
        case(
            "more than 64 tiers",
            "  target: {server: {}}\n  scenario: throughput\n  connections: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65]\n",
            "spec.connections",
            "must have at most 64 items",
            same("spec.connections", "65 tiers; at most 64"),
        ),
        case(
            "unknown scenario",
            "  target: {server: {}}\n  scenario: fast\n",
            "spec.scenario",
            "Unsupported value: \"fast\"",
            same("spec.scenario", "unknown variant `fast`"),
        ),
        case(
            "unknown spread",
            "  target: {server: {}}\n  scenario: throughput\n  loadgen: {spread: everywhere}\n",
            "spec.loadgen.spread",
            "Unsupported value: \"everywhere\"",
            same("spec.loadgen.spread", "unknown variant `everywhere`"),
        ),
        case(
            "unknown imagePullPolicy",
            "  target: {server: {imagePullPolicy: Sometimes}}\n  scenario: throughput\n",
            "spec.target.server.imagePullPolicy",
            "Unsupported value: \"Sometimes\"",
            same(
                "spec.target.server.imagePullPolicy",
                "unknown variant `Sometimes`",
            ),
        ),
        case(
            "misspelt field",
            "  target: {server: {}}\n  scenario: throughput\n  conections: [5]\n",
            "spec.conections",
            // Server-side apply's wording; `kubectl apply` (client side) gets
            // `strict decoding error: unknown field "spec.conections"`.
            "field not declared in schema",
            same("spec", "unknown field `conections`"),
        ),
        case(
            "duration that is not one",
            "  target: {server: {}}\n  scenario: throughput\n  duration: soon\n",
            "spec.duration",
            "should match",
            same("spec.duration", "is not a duration"),
        ),
        case(
            "negative duration",
            "  target: {server: {}}\n  scenario: throughput\n  duration: -5\n",
            "spec.duration",
            "should be greater than or equal to 0",
            same("spec.duration", "negative"),
        ),
        case(
            "bare fraction for a percentage",
            "  target: {server: {}}\n  scenario: connectionLimit\n  limit: {maxErrorRate: 0.05}\n",
            "spec.limit.maxErrorRate",
            "must be of type integer,string",
            None,
        ),
        case(
            "limit.max below limit.start",
            "  target: {server: {}}\n  scenario: connectionLimit\n  limit: {start: 5000, max: 100}\n",
            "spec.limit.max",
            "must be at least limit.start",
            same("spec.limit.max", "must be at least limit.start (5000)"),
        ),
        case(
            "protocol not matching the managed server",
            "  target: {server: {profile: wse}}\n  scenario: throughput\n",
            "spec.protocol",
            "does not match the managed server's profile",
            same(
                "spec.protocol",
                "does not match the managed server's profile \"wse\"",
            ),
        ),
        case(
            "constantRate without a rate",
            "  target: {server: {}}\n  scenario: constantRate\n",
            "spec.rate",
            "constantRate needs rate.messagesPerSecond or rate.stages",
            same("spec.rate", "constantRate needs rate.messagesPerSecond"),
        ),
        case(
            "zero rate",
            "  target: {server: {}}\n  scenario: constantRate\n  rate: {messagesPerSecond: 0}\n",
            "spec.rate.messagesPerSecond",
            "should be greater than 0",
            same("spec.rate.messagesPerSecond", "must be a positive number"),
        ),
        case(
            "JWT secret from nowhere",
            "  target: {server: {}}\n  scenario: throughput\n  auth: {jwt: {secret: {}}}\n",
            "spec.auth.jwt.secret",
            "set exactly one of value, fromEnv or secretRef",
            same(
                "spec.auth.jwt.secret",
                "set exactly one of value, fromEnv or secretRef",
            ),
        ),
        case(
            "TLS settings on a ws:// url",
            "  target: {url: 'ws://h:1/'}\n  scenario: throughput\n  tls: {insecureSkipVerify: true}\n",
            "spec.tls",
            "TLS settings need a wss:// target url",
            same("spec.tls", "TLS settings need a wss:// target url"),
        ),
        case(
            "payload size 0",
            "  target: {server: {}}\n  scenario: throughput\n  message: {size: 0}\n",
            "spec.message.size",
            "should be greater than or equal to 1",
            same("spec.message.size", "must be at least 1 byte"),
        ),
        case(
            "compression level 10",
            "  target: {server: {}}\n  scenario: throughput\n  message: {compressionLevel: 10}\n",
            "spec.message.compressionLevel",
            "should be less than or equal to 9",
            same("spec.message.compressionLevel", "must be 0-9"),
        ),
        case(
            "a step that both sends and expects",
            "  target: {server: {}}\n  scenario: sustainedHold\n  conversation:\n    open:\n    - {name: a, send: {text: x}, expect: {prefix: y}}\n",
            "spec.conversation.open[0]",
            cel::MSG_STEP_KIND,
            same("spec.conversation.open[0]", "set send or expect, not both"),
        ),
        case(
            "a message both text and binary",
            "  target: {server: {}}\n  scenario: sustainedHold\n  conversation:\n    open:\n    - {name: a, send: {text: x, binary: y}}\n",
            "spec.conversation.open[0].send",
            cel::MSG_ONE_PAYLOAD,
            same("spec.conversation.open[0].send", "set exactly one of text"),
        ),
        case(
            "a capture on a step that only sends",
            "  target: {server: {}}\n  scenario: sustainedHold\n  conversation:\n    open:\n    - {name: a, send: {text: x}, capture: {sid: {json: sid}}}\n",
            "spec.conversation.open[0].capture",
            cel::MSG_CAPTURE_NEEDS_EXPECT,
            same(
                "spec.conversation.open[0].capture",
                "captures read the expected message",
            ),
        ),
        case(
            "a reply to every message",
            "  target: {server: {}}\n  scenario: sustainedHold\n  conversation:\n    replies:\n    - {when: {}, send: {text: '3'}}\n",
            "spec.conversation.replies[0].when",
            cel::MSG_MATCH_EMPTY,
            same("spec.conversation.replies[0].when", cel::MSG_MATCH_EMPTY),
        ),
        case(
            "an answer id the message does not carry",
            "  target: {server: {}}\n  scenario: pingpong\n  conversation:\n    message: {text: '{\"id\":1}', answer: {id: {json: id}}}\n",
            "spec.conversation.message.answer.id",
            cel::MSG_ID_NEEDS_SEQ,
            same("spec.conversation.message.answer.id", "carries no ${seq}"),
        ),
        case(
            "two steps of one name",
            "  target: {server: {}}\n  scenario: sustainedHold\n  conversation:\n    open:\n    - {name: a, send: {text: x}}\n    - {name: a, send: {text: y}}\n",
            "spec.conversation.open",
            cel::MSG_STEP_NAMES,
            same("spec.conversation.open[1].name", "give each step its own"),
        ),
        case(
            "a conversation over the WSE protocol",
            "  target: {url: 'ws://h:1/'}\n  protocol: wse\n  scenario: sustainedHold\n  conversation:\n    open:\n    - {name: a, send: {text: x}}\n",
            "spec.protocol",
            cel::MSG_CONVERSATION_WSE,
            same(
                "spec.protocol",
                "the wse protocol has a conversation of its own",
            ),
        ),
        case(
            "a subprotocol that is not a token",
            "  target: {server: {}}\n  scenario: throughput\n  subprotocols: ['graphql ws']\n",
            "spec.subprotocols[0]",
            "should match",
            same("spec.subprotocols[0]", "is not a token (RFC 6455 4.1"),
        ),
        case(
            "a subprotocol listed twice",
            "  target: {server: {}}\n  scenario: throughput\n  subprotocols: [v12.stomp, v12.stomp]\n",
            // Server-side apply refuses a set with duplicates before validation.
            "spec.subprotocols",
            "duplicate entries",
            same("spec.subprotocols[1]", "is listed twice"),
        ),
        case(
            "a client compression window zlib cannot use",
            "  target: {server: {}}\n  scenario: throughput\n  compression: {clientMaxWindowBits: 8}\n",
            "spec.compression.clientMaxWindowBits",
            "should be greater than or equal to 9",
            same("spec.compression.clientMaxWindowBits", "8: must be 9-15"),
        ),
        // A valid object name (a DNS subdomain) but not a DNS label: `<name>-server` could not
        // be a Service.
        Case {
            name: "v1.2-run",
            ..case(
                "a name no Service can carry",
                SERVER,
                "metadata.name",
                "metadata.name must be lowercase letters, digits and '-'",
                same("metadata.name", "must be lowercase letters"),
            )
        },
    ]
}

fn document(name: &str, spec: &str) -> String {
    let spec = if spec.contains("scenario:") {
        spec.to_string()
    } else {
        format!("{spec}  scenario: throughput\n")
    };
    format!(
        "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

fn yaml_value(doc: &str) -> Value {
    wsload_spec::yaml::parse(doc).unwrap_or_else(|e| panic!("test input is not YAML: {e}\n{doc}"))
}

/// Server-side apply, strict field validation (as `kubectl apply` does), dry run unless asked.
fn apply_params(dry_run: bool) -> PatchParams {
    let mut p = PatchParams::apply("wsload-crd-test").validation_strict();
    p.dry_run = dry_run;
    p
}

/// The message of an API error, without the `LoadTest.wsload.dev "x" is invalid:` preamble.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => panic!("expected an API error, got {other}"),
    }
}

/// The error of a (possibly multi-error) message that names `field`, for the table. Several
/// errors come as `[a: ..., b: ...]`, each starting with a path and a colon.
fn naming(message: &str, field: &str) -> String {
    // `... is invalid: <errors>`, or server-side apply's `failed to create typed patch object
    // (<object>): <error>`.
    let body = message
        .split_once(" is invalid: ")
        .or_else(|| message.split_once("): "))
        .map_or(message, |(_, rest)| rest)
        .trim();
    let body = body
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .unwrap_or(body);
    let mut errors: Vec<String> = Vec::new();
    for piece in body.split(", ") {
        let starts_error = piece
            .split_once(": ")
            .is_some_and(|(path, _)| !path.is_empty() && !path.contains(' '));
        match errors.last_mut() {
            Some(last) if !starts_error => {
                last.push_str(", ");
                last.push_str(piece);
            }
            _ => errors.push(piece.to_string()),
        }
    }
    errors
        .into_iter()
        .find(|e| e.contains(field))
        .unwrap_or_else(|| body.to_string())
}

#[tokio::test]
async fn the_api_server_rejects_nonsense_naming_the_field() {
    let cluster = support::shared().await;
    cluster.apply_crds().await;
    let ns = cluster.namespace("crd-bad").await;
    let api: Api<LoadTestResource> = Api::namespaced(cluster.client().await, &ns);

    let mut table = Vec::new();
    let mut failures = Vec::new();
    for c in cases() {
        let doc = document(c.name, c.spec);
        let server = match api
            .patch(c.name, &apply_params(true), &Patch::Apply(yaml_value(&doc)))
            .await
        {
            Ok(_) => {
                failures.push(format!("{}: the API server accepted\n{doc}", c.what));
                continue;
            }
            Err(e) => api_message(&e),
        };
        if !(server.contains(c.field) && server.contains(c.server)) {
            failures.push(format!(
                "{}: the API server's message lacks {:?} / {:?}:\n{server}",
                c.what, c.field, c.server
            ));
        }
        let rust = LoadTest::from_yaml(&doc, "case.yaml");
        match (c.rust, &rust) {
            (Some((field, phrase)), Err(e)) => {
                let e = e.to_string();
                if !(e.contains(field) && e.contains(phrase)) {
                    failures.push(format!(
                        "{}: wsload validate's message lacks {field:?} / {phrase:?}:\n{e}",
                        c.what
                    ));
                }
            }
            (Some(_), Ok(_)) => failures.push(format!("{}: wsload validate accepted\n{doc}", c.what)),
            (None, Err(e)) => failures.push(format!(
                "{}: marked cluster-only, but wsload validate rejects it too (update the case and the docs): {e}",
                c.what
            )),
            (None, Ok(_)) => {}
        }
        table.push((c.what, naming(&server, c.field)));
    }

    eprintln!("\n| bad input | the API server says |\n|---|---|");
    for (what, message) in &table {
        eprintln!("| {what} | `{}` |", message.replace('|', "\\|"));
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// One grammar for target URLs: every URL of `target_url::CORPUS` is accepted by the API
/// server exactly when `wsload validate`'s parser accepts it (the parser `wsload run` dials
/// with), and a refusal names `spec.target.url`.
#[tokio::test]
async fn the_api_server_and_wsload_agree_on_target_urls() {
    let cluster = support::shared().await;
    cluster.apply_crds().await;
    let ns = cluster.namespace("crd-urls").await;
    let api: Api<LoadTestResource> = Api::namespaced(cluster.client().await, &ns);

    let mut disagreements = Vec::new();
    for (url, good) in wsload_spec::target_url::CORPUS {
        assert_eq!(
            wsload_spec::TargetUrl::parse(url).is_ok(),
            *good,
            "the corpus says {url} is good={good}"
        );
        let doc = document("url", &format!("  target: {{url: {}}}\n", json!(url)));
        let server = api
            .patch("url", &apply_params(true), &Patch::Apply(yaml_value(&doc)))
            .await;
        match (good, server) {
            (true, Ok(_)) => {}
            (false, Err(e)) => {
                let message = api_message(&e);
                if !message.contains("spec.target.url") {
                    disagreements.push(format!(
                        "{url}: refused without naming the field: {message}"
                    ));
                }
            }
            (true, Err(e)) => disagreements.push(format!(
                "{url}: wsload accepts, the API server refuses: {}",
                api_message(&e)
            )),
            (false, Ok(_)) => {
                disagreements.push(format!("{url}: wsload refuses, the API server accepts"))
            }
        }
    }
    assert!(disagreements.is_empty(), "\n{}", disagreements.join("\n"));
}

/// The bounds are sane limits, not one machine's: a tier far above any one host's open-file
/// cap (100,000 connections on one shard) is accepted by both checkers, and so are the edges
/// of every bound (a shard checks its own open-file limit when it starts).
#[tokio::test]
async fn large_tests_within_the_bounds_are_accepted() {
    let cluster = support::shared().await;
    cluster.apply_crds().await;
    let ns = cluster.namespace("crd-large").await;
    let api: Api<LoadTestResource> = Api::namespaced(cluster.client().await, &ns);
    let specs = [
        (
            "one-shard",
            "  target: {server: {}}\n  scenario: throughput\n  connections: [100000]\n",
        ),
        (
            "full-share",
            "  target: {server: {}}\n  scenario: sustainedHold\n  connections: [10000000]\n",
        ),
        (
            "largest",
            "  target: {server: {replicas: 1000}}\n  scenario: throughput\n  connections: [100000000]\n  shards: 5000\n",
        ),
        (
            "limit-search",
            "  target: {server: {}}\n  scenario: connectionLimit\n  limit: {max: 10000000}\n",
        ),
    ];
    for (name, spec) in specs {
        let doc = document(name, spec);
        let local = LoadTest::from_yaml(&doc, "large.yaml")
            .unwrap_or_else(|e| panic!("wsload validate rejects\n{doc}\n{e}"));
        let stored = api
            .patch(name, &apply_params(true), &Patch::Apply(yaml_value(&doc)))
            .await
            .unwrap_or_else(|e| panic!("the API server rejects\n{doc}\n{}", api_message(&e)));
        assert_eq!(stored.spec, local.spec, "{doc}");
    }
    let stored = api
        .patch(
            "one-shard",
            &apply_params(true),
            &Patch::Apply(yaml_value(&document("one-shard", SERVER))),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", api_message(&e)));
    assert_eq!(
        stored.spec.target.server.map(|s| s.replicas),
        Some(1),
        "replicas defaults to 1"
    );
}

#[tokio::test]
async fn every_example_is_accepted_and_reads_back_as_wsload_run_reads_it() {
    let cluster = support::shared().await;
    cluster.apply_crds().await;
    let ns = cluster.namespace("crd-examples").await;
    let api: Api<LoadTestResource> = Api::namespaced(cluster.client().await, &ns);
    let dir = support::cluster::workspace_root().join("examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "examples/ has {} files", files.len());
    for file in files {
        let path = file.display().to_string();
        let local = LoadTest::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{path}: {e}"));
        let name = local.name().to_string();
        // Dry run first: the same call `kubectl apply --dry-run=server` makes.
        api.patch(&name, &apply_params(true), &Patch::Apply(yaml_value(&text)))
            .await
            .unwrap_or_else(|e| panic!("{path}: the API server rejects it: {}", api_message(&e)));
        // Then stored: the API server fills defaults from the schema, serde from the types;
        // both must give the spec `wsload run` runs, or operator and load generator differ.
        let stored = api
            .patch(
                &name,
                &apply_params(false),
                &Patch::Apply(yaml_value(&text)),
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {}", api_message(&e)));
        assert_eq!(
            stored.spec, local.spec,
            "{path}: the stored spec differs from what wsload run reads"
        );
    }
}

#[tokio::test]
async fn cluster_fields_are_accepted_with_kubernetes_types() {
    let cluster = support::shared().await;
    cluster.apply_crds().await;
    let ns = cluster.namespace("crd-cluster").await;
    let api: Api<LoadTestResource> = Api::namespaced(cluster.client().await, &ns);
    let doc = document(
        "placed",
        "  target:
    server:
      imagePullPolicy: IfNotPresent
      resources: {requests: {cpu: '2', memory: 1Gi}, limits: {cpu: 2, memory: 1Gi}}
      placement: {nodeSelector: {role: server}}
  scenario: throughput
  loadgen:
    image: registry.test/wsload/loadgen:dev
    imagePullPolicy: Always
    resources: {requests: {cpu: '4'}, limits: {cpu: '4'}}
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
    deadlines: {scheduling: 1m, ready: 2m, run: 10m, collect: 30s}
    startDelay: 5s
    shardFailure: continue
    cleanup: keep
    ttlAfterFinished: 1h
",
    );
    let local = LoadTest::from_yaml(&doc, "placed.yaml").unwrap_or_else(|e| panic!("{e}"));
    let stored = api
        .patch(
            "placed",
            &apply_params(false),
            &Patch::Apply(yaml_value(&doc)),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", api_message(&e)));
    assert_eq!(stored.spec, local.spec);
}

/// A `null` the API server stores must read back: one LoadTest the operator cannot
/// deserialize would break its whole watch. Nulls of fields with defaults are pruned and
/// defaulted; nulls of optional fields are kept and read as unset.
#[tokio::test]
async fn nulls_read_back_as_defaults_or_unset() {
    let cluster = support::shared().await;
    cluster.apply_crds().await;
    let ns = cluster.namespace("crd-nulls").await;
    let client = cluster.client().await;
    let resource = kube::core::ApiResource::erase::<LoadTestResource>(&());
    let raw: Api<kube::core::DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let object: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wsload.dev/v1alpha1",
        "kind": "LoadTest",
        "metadata": {"name": "nulls"},
        "spec": {
            "target": {"server": {"image": null, "port": null, "imagePullPolicy": null}},
            "scenario": "sustainedHold",
            "duration": null, "warmup": null, "shards": null, "auth": null, "rate": null,
            "connect": {"timeout": null, "batchSize": null},
            "limit": {"maxErrorRate": null},
            "ping": {"interval": null, "timeout": null},
            "loadgen": {"tuning": null, "placement": {"affinity": null, "tolerations": null}},
            "run": {"deadlines": {"run": null, "collect": null}, "ttlAfterFinished": null},
        },
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    raw.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create: {}", api_message(&e)));
    let typed: Api<LoadTestResource> = Api::namespaced(client, &ns);
    let stored = typed
        .get("nulls")
        .await
        .unwrap_or_else(|e| panic!("a stored LoadTest must deserialize: {e}"));
    let local = LoadTest::from_yaml(
        &document(
            "nulls",
            "  target: {server: {}}\n  scenario: sustainedHold\n",
        ),
        "nulls.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stored.spec, local.spec);
}

#[tokio::test]
async fn a_started_test_keeps_its_spec() {
    let cluster = support::shared().await;
    cluster.apply_crds().await;
    let ns = cluster.namespace("crd-immutable").await;
    let api: Api<LoadTestResource> = Api::namespaced(cluster.client().await, &ns);
    let doc = document(
        "frozen",
        "  target: {server: {}}\n  scenario: throughput\n  connections: [10]\n",
    );
    api.create(
        &PostParams::default(),
        &wsload_spec::yaml::parse::<LoadTestResource>(&doc).unwrap_or_else(|e| panic!("{e}")),
    )
    .await
    .unwrap_or_else(|e| panic!("create: {}", api_message(&e)));
    let change = |n: u32| Patch::Merge(json!({"spec": {"connections": [n]}}));
    let params = PatchParams::default();

    // New, and still Pending: the spec may change (nothing has run).
    api.patch("frozen", &params, &change(20))
        .await
        .unwrap_or_else(|e| panic!("a new test's spec must change: {}", api_message(&e)));
    let phase = |p: &str| Patch::Merge(json!({"status": {"phase": p}}));
    api.patch_status("frozen", &params, &phase("Pending"))
        .await
        .unwrap_or_else(|e| panic!("status: {}", api_message(&e)));
    api.patch("frozen", &params, &change(30))
        .await
        .unwrap_or_else(|e| panic!("a Pending test's spec must change: {}", api_message(&e)));

    api.patch_status("frozen", &params, &phase("Running"))
        .await
        .unwrap_or_else(|e| panic!("status: {}", api_message(&e)));
    let e = api
        .patch("frozen", &params, &change(40))
        .await
        .map(|_| ())
        .expect_err("a Running test's spec must not change");
    let message = api_message(&e);
    eprintln!(
        "| spec change on a started test | `{}` |",
        naming(&message, "spec")
    );
    assert!(
        message.contains("spec: Invalid value")
            && message.contains(
                "spec is immutable once the test has started (phase Running); delete and re-create the LoadTest to run it again"
            ),
        "{message}"
    );

    // What the operator and users still do to a running test: status, labels, the same spec.
    api.patch(
        "frozen",
        &params,
        &Patch::Merge(
            json!({"metadata": {"labels": {"team": "perf"}}, "spec": {"connections": [30]}}),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("labels and an unchanged spec: {}", api_message(&e)));
    api.patch_status(
        "frozen",
        &params,
        &Patch::Merge(json!({"status": {"phase": "Succeeded", "verdict": "Pass", "achievedRate": "1.00M msg/s", "p99": "1.2ms"}})),
    )
    .await
    .unwrap_or_else(|e| panic!("status after start: {}", api_message(&e)));
    let got = api.get("frozen").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.spec.connections, vec![30]);

    // The printer columns, as `kubectl get lt` shows them.
    let table = cluster.kubectl_ok(&["get", "lt", "-n", &ns]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "PHASE", "SCENARIO", "SHARDS", "RATE", "P99", "VERDICT", "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..8],
        [
            "frozen",
            "Succeeded",
            "throughput",
            "1",
            "1.00M",
            "msg/s",
            "1.2ms",
            "Pass"
        ],
        "{table}"
    );
}
