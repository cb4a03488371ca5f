//! A shard's result with known counts and latencies, for tests here and in the operator
//! (feature `fixtures`): one source of truth for what a merge must add up to.

use crate::kernel::{KernelFigures, Netns};
use crate::measure::{ConnectError, Measure};
use crate::result::{CellResult, Figures, RunResult, ShardInfo};
use crate::server_connections::ReplicaConnections;
use crate::timeline::{Recorder, Totals};
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
        server_topics: None,
        server_connections: None,
        started_first_micros: started_at_micros,
        started_last_micros: started_at_micros,
        figures: Figures::default(),
        timeline: Vec::new(),
        timeline_step_ms: crate::timeline::FINEST_STEP_MS,
        loadgen_cpu: None,
        kernel: Vec::new(),
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
            clock: None,
        }],
        spec: None,
    };
    r.judge();
    r
}

/// Shard `shard`'s reading of network namespace `inode` over a cell: `overflows` listen
/// overflows and drops, 100 connections opened, 200 sockets in use of a quiet machine.
pub fn kernel(shard: u32, inode: u64, overflows: u64) -> KernelFigures {
    use crate::kernel as k;
    let increases = [
        (k::LISTEN_OVERFLOWS, overflows),
        (k::LISTEN_DROPS, overflows),
        (k::ACTIVE_OPENS, 100),
        (k::OUT_RSTS, 0),
    ];
    let gauges = [
        (k::TCP_INUSE, 200),
        (k::TCP_MEM, 118),
        (k::TCP_MEM_MIN, 287_898),
        (k::TCP_MEM_PRESSURE, 383_867),
        (k::TCP_MEM_MAX, 575_796),
    ];
    KernelFigures {
        netns: Some(Netns {
            inode,
            boot: "2f5a3c1e-0000-4000-8000-000000000001".into(),
        }),
        machine_wide: false,
        shards: vec![shard],
        summed: Default::default(),
        increases: increases.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        gauges: gauges.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
    }
}

/// A whole report to look at: two shards merged, two cells with per-second samples, the spec,
/// a failed threshold and a finding (shard 1's CPU). What the HTML tests and the browser
/// check render.
pub fn report() -> RunResult {
    let start = 1_795_930_482_000_000;
    let mut parts = [shard(0, 2000, 1, start), shard(1, 1000, 10, start + 12_345)];
    for (i, r) in parts.iter_mut().enumerate() {
        let mut big = r.cells[0].clone();
        big.label = "1000".into();
        big.connections = 2000;
        for ms in 1..=400 {
            big.measure.hists.rtt.record(Duration::from_micros(ms * 60));
        }
        big.compute();
        r.cells.push(big);
        for (n, cell) in r.cells.iter_mut().enumerate() {
            let rate = 100 * (n as u64 + 1) * (i as u64 + 1);
            // Ten seconds in steps of a second: something for the chart to show.
            let mut rec = Recorder::new(Totals::default(), 1_000);
            let mut t = Totals::default();
            for second in 0..10u32 {
                // A ramp, then a dip at second 6.
                let k = u64::from(second.min(3) + 1) * rate / 4;
                let k = if second == 6 { k / 3 } else { k };
                t.sent += k;
                t.received += k - k / 50;
                t.open = u64::from(cell.connections) / 2 - u64::from(second == 6) * 5;
                // The dip is a stall: its round trips are slow.
                let p99_us = 800 * (n as u64 + 1) + u64::from(second == 6) * 40_000;
                rec.tick(second, t, Some(p99_us));
            }
            (cell.timeline_step_ms, cell.timeline) = rec.finish();
        }
        r.cells[1].loadgen_cpu = Some(if i == 1 { 0.97 } else { 0.6 });
    }
    let [mut merged, other] = parts;
    let lt = wsload_spec::LoadTest::from_spec_yaml(
        "  target: {url: 'ws://x'}\n  scenario: echo\n  connections: [100, 1000]\n  shards: 2\n  thresholds: ['rtt.p99 < 5ms']\n",
        "fixture.yaml",
    )
    .expect("fixture spec");
    merged.set_spec(&lt.spec).expect("spec as JSON");
    merged.merge(&other).expect("merge");
    merged
}

/// A fan-out run to look at: 100 subscribers over 2 topics of 1,000 publishes each (2
/// publishers), one subscriber 5 short on topic 1, 2 duplicates and 3 arrivals out of order,
/// deliveries of 1 to 10 ms, per-second samples of the deliveries and their p99, and the
/// server's counters (which say it delivered 100 more than were received).
pub fn fanout() -> RunResult {
    use crate::fanout::{Fanout, ServerTopics, SubscriberTally, TopicTally};
    let mut r = shard(0, 0, 1, 1_795_930_482_000_000);
    r.scenario = Scenario::Fanout;
    r.thresholds = vec![
        "fanout.p99 < 50ms".parse().expect("threshold"),
        "gaps == 0".parse().expect("threshold"),
    ];
    let c = &mut r.cells[0];
    c.measured_secs = 10.0;
    let m = &mut c.measure;
    (m.counts.attempted, m.counts.connected) = (100, 100);
    m.counts.failed.clear();
    let topic = |delivered, duplicates, out_of_order| TopicTally {
        subscribers: 50,
        published: 1000,
        first_seq: 1,
        last_seq: 1000,
        delivered,
        duplicates,
        out_of_order,
        ..TopicTally::default()
    };
    let fanout = Fanout {
        topics: vec![topic(50_000, 0, 0), topic(49_995, 2, 3)],
        slowest: vec![SubscriberTally {
            conn: 17,
            topic: 1,
            delivered: 995,
            max_latency_us: 42_000,
        }],
        outside: 40,
        publishers: 2,
        ..Fanout::default()
    };
    let delivered = 99_995;
    m.counts.received = delivered;
    for i in 0..delivered {
        m.hists
            .fanout
            .record(Duration::from_micros(1_000 + (i % 9_000)));
    }
    m.counts.fanout = Some(fanout);
    c.server_topics = Some(ServerTopics {
        published: 2_008,
        fanout: 100_400,
        delivered: 100_137,
        dropped_slow_consumer: 0,
        dropped_closed: 0,
    });
    let mut rec = Recorder::new(Totals::default(), 1_000);
    let mut t = Totals::default();
    for second in 0..10u32 {
        t.sent += 200;
        t.received += 10_000 - u64::from(second == 4) * 5;
        t.open = 102;
        rec.tick(second, t, Some(9_000 + u64::from(second == 4) * 30_000));
    }
    (c.timeline_step_ms, c.timeline) = rec.finish();
    c.compute();
    r.judge();
    r
}

/// One server replica's connection counters: `accepted`, and `(reason, count)` pairs of the
/// refused and the closed.
pub fn replica(
    name: &str,
    accepted: u64,
    rejected: &[(&str, u64)],
    closed: &[(&str, u64)],
) -> ReplicaConnections {
    let map = |p: &[(&str, u64)]| p.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    ReplicaConnections {
        replica: name.into(),
        accepted,
        rejected: map(rejected),
        closed: map(closed),
    }
}

/// xorshift64*: reproducible numbers (histograms, results) without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Log-uniform in 1..=hi: every octave as likely, as latencies spread.
    pub fn spread(&mut self, hi: u64) -> u64 {
        let bits = 1 + self.below(u64::from(64 - hi.leading_zeros()));
        (self.next_u64() >> (64 - bits)).clamp(1, hi)
    }
}
