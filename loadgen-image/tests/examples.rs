//! Every file in examples/ is a valid LoadTest that plans into cells, its conversation
//! compiled: users copy these.

use wsload::model::Shard;
use wsload::model::plan::Plan;
use wsload_spec::{LoadTest, Scenario};

#[test]
fn every_example_is_valid_and_plans() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).expect("examples/ exists") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let name = path.display().to_string();
        let lt = LoadTest::from_file(&name).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.trim_start().starts_with('#'),
            "{name}: say in a comment what it reproduces and what to expect"
        );
        // Planned as a run plans it: its conversation compiled, its cells made.
        let cells = Plan::new(&lt.spec, Shard::WHOLE)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .cells();
        if lt.spec.scenario != Scenario::ConnectionLimit {
            assert!(!cells.is_empty(), "{name}: plans no cell");
        }
        assert!(
            !lt.spec.thresholds.is_empty(),
            "{name}: examples carry thresholds"
        );
        seen += 1;
    }
    assert!(seen >= 12, "only {seen} examples");
}

#[test]
fn quickstart_is_small_enough_for_a_laptop() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/quickstart.yaml");
    let lt = LoadTest::from_file(path).expect("valid");
    assert!(
        lt.spec.target.server.is_some(),
        "runs against the managed server"
    );
    assert!(lt.spec.connections.iter().all(|&n| n <= 1000));
    assert!(lt.spec.duration.get().as_secs() <= 10);
}
