//! How long a test should take, from its spec alone: the operator's default Running deadline
//! (`spec.run.deadlines.run` unset) is this x 1.5 + 2 minutes.
//!
//! Mirrors the load generator's plan (`loadgen-image/src/model/plan.rs`): cells run one after
//! another, as the scenario's profile says ([`crate::scenario`]); each connects its share in
//! batches, then lasts its length. Shards run in parallel, so a cell's connect phase is that
//! of the largest share.

use crate::scenario::{Cells, Length};
use crate::spec::LoadTestSpec;
use std::time::Duration;

/// Payload sizes and formats the load generator uses when the spec lists none (its
/// `DEFAULT_SIZES` / `DEFAULT_FORMATS`): only their number matters here.
const DEFAULT_MATRIX_SIZES: usize = 6;
const DEFAULT_COMPARISON_FORMATS: usize = 3;

/// Slack over the expected duration before the Running phase fails: the server counter
/// settling after each cell, slow handshakes, closing.
pub const RUN_DEADLINE_FACTOR: f64 = 1.5;
pub const RUN_DEADLINE_MARGIN: Duration = Duration::from_secs(120);

/// The time a spec's load should take from the start barrier to the last cell's end, or
/// `None` when it is not known in advance (connectionLimit: the search decides how many
/// probes run).
pub fn expected_duration(spec: &LoadTestSpec) -> Option<Duration> {
    let tiers = &spec.connections;
    let cells: Vec<u32> = match spec.scenario.profile().cells {
        Cells::Search => return None,
        Cells::SizesByTiers => {
            let sizes = if spec.sizes.is_empty() {
                DEFAULT_MATRIX_SIZES
            } else {
                spec.sizes.len()
            };
            repeat(tiers, sizes)
        }
        Cells::FormatsByTiers => {
            let formats = if spec.formats.is_empty() {
                DEFAULT_COMPARISON_FORMATS
            } else {
                spec.formats.len()
            };
            repeat(tiers, formats)
        }
        Cells::Tiers => tiers.clone(),
    };
    Some(
        cells
            .iter()
            .map(|&n| connect_time(spec, n) + cell_length(spec))
            .sum(),
    )
}

/// The Running deadline: the spec's own, else expected x 1.5 + 2 min; `None` when neither is
/// known (a connectionLimit search without `run.deadlines.run`).
pub fn run_deadline(spec: &LoadTestSpec) -> Option<Duration> {
    if let Some(d) = spec.run.deadlines.run {
        return Some(d.get());
    }
    expected_duration(spec).map(|d| d.mul_f64(RUN_DEADLINE_FACTOR) + RUN_DEADLINE_MARGIN)
}

fn repeat(tiers: &[u32], times: usize) -> Vec<u32> {
    (0..times).flat_map(|_| tiers.iter().copied()).collect()
}

/// Opening the largest shard's share of `connections`: batches start `batchInterval` apart.
fn connect_time(spec: &LoadTestSpec, connections: u32) -> Duration {
    let share = connections.div_ceil(spec.shards.max(1));
    let batches = share.div_ceil(spec.connect.batch_size.max(1));
    spec.connect.batch_interval.get() * batches
}

/// What one cell does once connected.
/// How long one cell lasts from its warm-up's start to its end, its connect phase left out
/// (0 for a connectionLimit probe: the search decides).
pub fn cell_length(spec: &LoadTestSpec) -> Duration {
    let warmup = spec.warmup.get();
    let length = spec.scenario.profile().length;
    match length {
        // A search's probes are not known in advance (see `expected_duration`).
        Length::Nothing | Length::LimitHold => Duration::ZERO,
        // Pings one after another, `interval` apart; each answer takes a round trip, which
        // the deadline's margin covers.
        Length::Pings => {
            let gaps = spec.ping.count.saturating_sub(1);
            spec.ping.interval.map_or(Duration::ZERO, |i| i.get()) * gaps
        }
        Length::Rate { .. } | Length::RateThenDrain => {
            let staged: Duration = spec
                .rate
                .iter()
                .flat_map(|r| &r.stages)
                .map(|s| s.duration.get())
                .sum();
            // Stages replace `duration` (the load generator's `Schedule::from_spec`).
            let measured = if staged.is_zero() {
                spec.duration.get()
            } else {
                staged
            };
            // A fanout's subscribers read on for `drain` after the window; across shards its
            // measured phase waits until every shard had `connect.timeout` to connect.
            let drain = if length == Length::RateThenDrain {
                spec.fanout.drain.get() + spec.connect.timeout.get()
            } else {
                Duration::ZERO
            };
            warmup + measured + drain
        }
        Length::Duration => warmup + spec.duration.get(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LoadTest;

    fn spec(body: &str) -> LoadTestSpec {
        let doc = format!("apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nspec:\n{body}");
        LoadTest::from_yaml(&doc, "t").expect("valid").spec
    }

    /// Expected duration in milliseconds (Durations add exactly; floats would not).
    fn ms(body: &str) -> Option<u128> {
        expected_duration(&spec(body)).map(|d| d.as_millis())
    }

    #[test]
    fn timed_tiers_add_warmup_duration_and_batches() {
        // 2 tiers x (1s warmup + 3s) + batches: 100 -> 1 batch, 1000 -> 2 (500 each) x 10ms.
        let s = "  target: {server: {}}\n  scenario: throughput\n  connections: [100, 1000]\n  duration: 3s\n  warmup: 1s\n";
        assert_eq!(ms(s), Some(8_000 + 10 + 20));
        // Shards connect in parallel: 1000 over 2 shards is 500 each, one batch.
        assert_eq!(ms(&format!("{s}  shards: 2\n")), Some(8_000 + 10 + 10));
    }

    #[test]
    fn matrix_and_comparison_multiply_cells() {
        let m = "  target: {server: {}}\n  scenario: payloadMatrix\n  connections: [10, 20]\n  duration: 2s\n";
        assert_eq!(ms(m), Some(6 * 2 * (2_000 + 10)));
        let m = format!("{m}  sizes: [64, 128, 256]\n");
        assert_eq!(ms(&m), Some(3 * 2 * (2_000 + 10)));
        let f = "  target: {server: {}}\n  scenario: formatComparison\n  connections: [10]\n  duration: 1s\n  formats: [json, msgpack]\n";
        assert_eq!(ms(f), Some(2 * (1_000 + 10)));
    }

    #[test]
    fn stages_replace_duration_and_pings_count_intervals() {
        let r = "  target: {server: {}}\n  scenario: constantRate\n  connections: [10]\n  duration: 99s\n  rate: {stages: [{duration: 10s, target: 100}, {duration: 20s, target: 100}]}\n";
        assert_eq!(ms(r), Some(30_000 + 10));
        let c = "  target: {server: {}}\n  scenario: constantRate\n  connections: [10]\n  duration: 7s\n  warmup: 1s\n  rate: {messagesPerSecond: 100}\n";
        assert_eq!(ms(c), Some(8_000 + 10));
        let p = "  target: {server: {}}\n  scenario: pingLatency\n  connections: [10]\n  ping: {count: 11, interval: 100ms}\n";
        assert_eq!(ms(p), Some(1_000 + 10));
        let storm = "  target: {server: {}}\n  scenario: connectionStorm\n  connections: [5000]\n  connect: {batchSize: 100, batchInterval: 20ms}\n";
        assert_eq!(ms(storm), Some(50 * 20));
    }

    #[test]
    fn a_limit_search_has_no_expected_end_unless_given_one() {
        let l = "  target: {server: {}}\n  scenario: connectionLimit\n";
        assert_eq!(ms(l), None);
        assert_eq!(run_deadline(&spec(l)), None);
        let given = format!("{l}  run: {{deadlines: {{run: 10m}}}}\n");
        assert_eq!(run_deadline(&spec(&given)), Some(Duration::from_secs(600)));
        let t = "  target: {server: {}}\n  scenario: blast\n  connections: [10]\n  duration: 60s\n";
        // (60s + one 10ms batch) x 1.5 + 2m
        assert_eq!(
            run_deadline(&spec(t)).map(|d| d.as_millis()),
            Some(60_010 * 3 / 2 + 120_000)
        );
    }
}
