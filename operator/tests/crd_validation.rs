//! The CRD against a real API server (`support::cluster`): nonsense (the list of refused
//! inputs, `crds/tests/refused.yaml`) is rejected with a message naming the field, `wsload
//! validate` (the Rust checker) rejects the same input for the same reason, every example is accepted and reads back exactly as `wsload run` reads it, and a
//! started test's spec cannot change.

mod support;

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wsload_spec::refused::{self, RefusedInput, RefusedInputs};
use wsload_spec::{LoadTest, LoadTestResource};

/// The refused inputs (`crds/tests/refused.yaml`, shared with `wsload validate`'s test and the
/// docs' table).
fn cases() -> Vec<RefusedInput> {
    let path = support::cluster::workspace_root().join(refused::PATH);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    RefusedInputs::parse(&text)
        .unwrap_or_else(|e| panic!("{e}"))
        .cases
}

const SERVER: &str = "  target: {server: {}}\n";

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
        let doc = c.document();
        let server = api
            .patch(
                &c.name,
                &apply_params(true),
                &Patch::Apply(yaml_value(&doc)),
            )
            .await;
        match (&c.server, server) {
            (Some(want), Err(e)) => {
                let server = api_message(&e);
                if !(server.contains(&want.field) && server.contains(&want.says)) {
                    failures.push(format!(
                        "{}: the API server's message lacks {:?} / {:?}:\n{server}",
                        c.what, want.field, want.says
                    ));
                }
                table.push((c.what.clone(), naming(&server, &want.field)));
            }
            (Some(_), Ok(_)) => {
                failures.push(format!("{}: the API server accepted\n{doc}", c.what));
            }
            (None, Err(e)) => failures.push(format!(
                "{}: marked validate-only, but the API server refuses it too (add server: to {}): {}",
                c.what,
                refused::PATH,
                api_message(&e)
            )),
            (None, Ok(_)) => {}
        }
        // The Rust checker, as `wsload validate` runs it (its own test runs the binary).
        match (&c.validate, LoadTest::from_yaml(&doc, "case.yaml")) {
            (Some(want), Err(e)) => {
                let e = e.to_string();
                if !(e.contains(&want.field) && e.contains(&want.says)) {
                    failures.push(format!(
                        "{}: wsload validate's message lacks {:?} / {:?}:\n{e}",
                        c.what, want.field, want.says
                    ));
                }
            }
            (Some(_), Ok(_)) => failures.push(format!("{}: wsload validate accepted\n{doc}", c.what)),
            (None, Err(e)) => failures.push(format!(
                "{}: marked cluster-only, but wsload validate rejects it too (add validate: to {}): {e}",
                c.what,
                refused::PATH
            )),
            (None, Ok(_)) => {}
        }
    }

    // The API server's whole messages, for a reader comparing them with the docs' phrases.
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
