//! A shard's result with known counts and latencies, for tests here and in the operator
//! (feature `fixtures`): one source of truth for what a merge must add up to.

use crate::measure::{ConnectError, Measure};
use crate::report::{CellResult, Figures, RunResult, ShardInfo};
use std::time::Duration;
use wsload_spec::Scenario;

/// Shard `index` of two: 100 connections, `sent` messages each echoed, RTTs of `rtt_ms`.
pub fn shard(index: u32, sent: u64, rtt_ms: u64, started_at_micros: u64) -> RunResult {
    let mut m = Measure::default();
    m.counts.attempted = 100;
    m.counts.connected = 99;
    m.counts.fail(ConnectError::Refused);
    m.counts.sent = sent;
    m.counts.sent_with_warmup = sent + 10;
    m.counts.received = sent;
    for _ in 0..sent {
        m.hists.rtt.record(Duration::from_millis(rtt_ms));
    }
    let mut cell = CellResult {
        label: "100".into(),
        connections: 200,
        size: 64,
        format: "text".into(),
        target_rate: 0.0,
        connect_secs: 1.0,
        measured_secs: 10.0 + f64::from(index),
        start_skew_us: 5,
        measure: m,
        server_received: None,
        started_first_micros: started_at_micros,
        started_last_micros: started_at_micros,
        figures: Figures::default(),
    };
    cell.compute();
    let mut r = RunResult {
        test: "t".into(),
        scenario: Scenario::Echo,
        target: "ws://x".into(),
        shards: vec![index],
        shard_count: 2,
        started_at_unix_ms: started_at_micros / 1000,
        cells: vec![cell],
        probes: Vec::new(),
        limit: None,
        thresholds: vec!["rtt.p99 < 5ms".parse().expect("threshold")],
        verdict: None,
        notes: Vec::new(),
        shard_info: vec![ShardInfo {
            index,
            started_at_micros,
            finished_at_micros: started_at_micros + 10_000_000,
            error: None,
        }],
    };
    r.judge();
    r
}
