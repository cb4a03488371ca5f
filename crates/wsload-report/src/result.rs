//! The result of a run as it is stored and sent: JSON with every count and serialized histogram
//! (so shards merge exactly), and the figures derived from them.

use crate::fanout_figures::FanoutFigures;
use crate::measure::Measure;
use crate::percentiles::Percentiles;
use crate::timeline::{self, Sample};
use serde::{Deserialize, Serialize};
/// A shard's clock against its conductor's: one type for the result and the LoadTest status.
pub use wsload_spec::status::ShardClock;
use wsload_spec::{Scenario, Threshold};

/// Figures of one cell, derived from its counts and histograms (seconds, fractions, per second).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    pub sent_per_sec: f64,
    pub received_per_sec: f64,
    pub bytes_sent_per_sec: f64,
    pub connect_rate: f64,
    pub errors: f64,
    pub loss: f64,
    pub survival: f64,
    pub delivery: Option<f64>,
    pub connect: Percentiles,
    pub rtt: Percentiles,
    pub rtt_raw: Percentiles,
    /// The fanout scenario's deliveries (absent in other scenarios and in results written
    /// before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fanout: Option<FanoutFigures>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CellResult {
    pub label: String,
    pub connections: u32,
    pub size: u32,
    pub format: String,
    pub target_rate: f64,
    pub connect_secs: f64,
    pub measured_secs: f64,
    pub start_skew_us: u64,
    #[serde(flatten)]
    pub measure: Measure,
    /// Messages the servers counted during the cell: every replica's counter's increase,
    /// summed by the conductor once every shard finished the cell. A shard never sets it.
    pub server_received: Option<u64>,
    /// What the servers' topic counters say of the cell (a fanout against wsload-server):
    /// every replica's increase, summed by the conductor like `server_received`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_topics: Option<crate::fanout::ServerTopics>,
    /// What the server replicas counted of their connections during the cell (wsload-server's
    /// connection counters, their increase, summed, with how admissions spread over the
    /// replicas), read by the conductor like `server_received`; unset when unread or the
    /// server has no such counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_connections: Option<crate::server_connections::ServerConnections>,
    /// When the first and the last shard began the cell, Unix microseconds (0: not recorded).
    /// Cells begin at one instant released to every shard; the spread is the skew.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub started_first_micros: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub started_last_micros: u64,
    pub figures: Figures,
    /// The measured phase sampled every `timeline_step_ms` (empty in results written before,
    /// and for cells no sampler fed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Sample>,
    /// How long each sample of `timeline` covers, milliseconds.
    #[serde(default = "timeline::legacy_step_ms")]
    pub timeline_step_ms: u32,
    /// How busy the busiest load generator was during the cell: CPU time over the wall time
    /// and cores it may use, 0..1 (not recorded: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loadgen_cpu: Option<f64>,
    /// What the kernel counted over the cell, one entry per network namespace the shards ran
    /// in (empty in results written before, and where /proc could not be read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel: Vec<crate::kernel::KernelFigures>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The shortest measured time a message rate is given for: over less, a rate is one burst's
/// size over a few milliseconds (128 messages over 2 ms read as 61.6K/s), so it is 0 in the
/// figures, `-` in the tables, and a threshold on it is not measured.
pub const MIN_RATE_SECS: f64 = 0.1;

impl CellResult {
    /// How far apart the shards began this cell, milliseconds (when more than one did).
    pub fn shard_skew_ms(&self) -> Option<f64> {
        (self.started_first_micros > 0 && self.started_last_micros >= self.started_first_micros)
            .then(|| (self.started_last_micros - self.started_first_micros) as f64 / 1000.0)
    }

    pub fn compute(&mut self) {
        let c = &self.measure.counts;
        let h = &self.measure.hists;
        let per = |n: u64, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let rate = |n: u64| {
            if self.measured_secs >= MIN_RATE_SECS {
                per(n, self.measured_secs)
            } else {
                0.0
            }
        };
        let frac = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
        self.figures = Figures {
            sent_per_sec: rate(c.sent),
            received_per_sec: rate(c.received),
            bytes_sent_per_sec: rate(c.bytes_sent),
            connect_rate: per(c.connected, self.connect_secs),
            // A connection the server refused after the upgrade, or dropped later, failed too
            // (not one wsload dropped itself for a close disruption).
            errors: frac(c.errors_total(), c.attempted),
            loss: frac(c.lost, c.expected),
            survival: frac(c.survived, c.connected),
            delivery: self.server_received.map(|s| frac(s, c.sent_with_warmup)),
            connect: Percentiles::of(&h.connect),
            rtt: Percentiles::of(&h.rtt),
            rtt_raw: Percentiles::of(&h.rtt_raw),
            fanout: c
                .fanout
                .as_ref()
                .map(|f| FanoutFigures::of(f, &h.fanout, self.measured_secs)),
        };
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub threshold: String,
    pub cell: String,
    /// The figure judged; unset when the cell never measured it (the check then fails).
    pub actual: Option<f64>,
    pub passed: bool,
    /// Why the check has no figure: `not measured: 0 pings were sent` (unset when it has one,
    /// and in results written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub passed: bool,
    pub checks: Vec<Check>,
    /// Cells that could not measure what their scenario measures: the run fails whatever the
    /// thresholds say (`wsload run` exits 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmeasured: Vec<Unmeasured>,
}

/// A cell that measured nothing of what it was for, and what was missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unmeasured {
    pub cell: String,
    pub missing: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    pub connections: u32,
    pub error_rate: f64,
    pub passed: bool,
}

/// One shard's run in wall-clock time (Unix microseconds): the operator's start skew is the
/// spread of `started_at_micros` over the shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardInfo {
    pub index: u32,
    /// When the load began: after the shard slept until the common start instant.
    pub started_at_micros: u64,
    pub finished_at_micros: u64,
    /// Why the shard's run ended early; its cells are what it measured until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The shard's clock against the conductor's, as the conductor measured it (absent from a
    /// shard's own result, from a single-process run, and from results written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ShardClock>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    pub test: String,
    pub scenario: Scenario,
    pub target: String,
    /// Shards whose results are in this one.
    pub shards: Vec<u32>,
    pub shard_count: u32,
    pub started_at_unix_ms: u64,
    pub cells: Vec<CellResult>,
    /// connectionLimit: every probe, and the largest count that passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    pub thresholds: Vec<Threshold>,
    pub verdict: Option<Verdict>,
    /// Problems worth a reader's attention (file limits, a failed server scrape...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Per shard, when its load ran (`wsload shard`; empty for `wsload run` and for results
    /// written before shards recorded it, which still merge).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shard_info: Vec<ShardInfo>,
    /// The LoadTest's spec as run, secrets redacted ([`RunResult::set_spec`]). Kept as JSON, not
    /// as `LoadTestSpec`, so a stored result still reads after the spec's schema changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<serde_json::Value>,
}

/// Which shard a result is of: its index among how many (the whole test is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub index: u32,
    pub count: u32,
}

impl RunResult {
    /// A run's (or one shard's) result before its first cell: which test, against what,
    /// judged by which thresholds. One process running the whole test names every shard the
    /// spec has; a shard of several names itself. Its cells, notes and shard record are the
    /// run's to add.
    pub fn begun(
        test: &str,
        spec: &wsload_spec::LoadTestSpec,
        target: &str,
        part: Part,
        started_at_unix_ms: u64,
    ) -> RunResult {
        let (shards, shard_count) = if part.count > 1 {
            (vec![part.index], part.count)
        } else {
            ((0..spec.shards).collect(), spec.shards)
        };
        RunResult {
            test: test.to_string(),
            scenario: spec.scenario,
            target: target.to_string(),
            shards,
            shard_count,
            started_at_unix_ms,
            cells: Vec::new(),
            probes: Vec::new(),
            limit: None,
            thresholds: spec.thresholds.clone(),
            verdict: None,
            notes: Vec::new(),
            shard_info: Vec::new(),
            spec: None,
        }
    }

    /// One shard's result moved onto its conductor's clock: every instant the shard stamped
    /// (its start and end, each cell's start) less the shard's measured offset, so spreads
    /// over shards compare one clock's readings; the clock is kept in its shard record.
    /// Applied once, by the conductor, before the merge.
    pub fn on_conductor_clock(&mut self, clock: ShardClock) {
        let at = |micros: u64| {
            if micros == 0 {
                0
            } else {
                clock.to_conductor(micros)
            }
        };
        for s in &mut self.shard_info {
            s.started_at_micros = at(s.started_at_micros);
            s.finished_at_micros = at(s.finished_at_micros);
            s.clock = Some(clock);
        }
        for c in &mut self.cells {
            c.started_first_micros = at(c.started_first_micros);
            c.started_last_micros = at(c.started_last_micros);
        }
        self.started_at_unix_ms = at(self.started_at_unix_ms.saturating_mul(1000)) / 1000;
    }

    /// The spread of the shards' start instants (microseconds), when more than one recorded it.
    pub fn start_skew_micros(&self) -> Option<u64> {
        let starts = self.shard_info.iter().map(|s| s.started_at_micros);
        let (min, max) = (starts.clone().min()?, starts.max()?);
        (self.shard_info.len() > 1).then_some(max - min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;

    /// Two shards that began together by the true clock, one of them 50 ms ahead: on the
    /// conductor's clock the skew is what it really was, and the clocks are kept and told.
    #[test]
    fn shard_instants_move_onto_the_conductors_clock_before_the_merge() {
        let start = 1_800_000_000_000_000;
        let mut a = shard(0, 10, 1, start + 120);
        let mut b = shard(1, 10, 1, start + 50_000);
        b.cells[0].started_first_micros = start + 50_000;
        b.cells[0].started_last_micros = start + 50_000;
        let on_time = ShardClock {
            offset_micros: -100,
            uncertainty_micros: 60,
            samples: 9,
        };
        let ahead = ShardClock {
            offset_micros: 49_950,
            uncertainty_micros: 2_400,
            samples: 11,
        };
        a.on_conductor_clock(on_time);
        b.on_conductor_clock(ahead);
        assert_eq!(b.shard_info[0].started_at_micros, start + 50);
        assert_eq!(b.shard_info[0].finished_at_micros, start + 50 + 10_000_000);
        assert_eq!(b.started_at_unix_ms, start / 1000);
        a.merge(&b).expect("merge");
        assert_eq!(a.start_skew_micros(), Some(170));
        assert_eq!(a.cells[0].shard_skew_ms(), Some(0.17));
        assert_eq!(a.shard_info[1].clock, Some(ahead));
        let json = serde_json::to_string(&a).expect("ser");
        assert!(
            json.contains(
                r#""clock":{"offsetMicros":49950,"uncertaintyMicros":2400,"samples":11}"#
            ),
            "{json}"
        );
        let text = a.render();
        assert!(
            text.contains("shard 0 -0.100 ms ± 60 us (9), shard 1 +49.950 ms ± 2.40 ms (11)"),
            "{text}"
        );
        // Only the loosely known clock is a finding.
        let found: Vec<String> = crate::findings::clock_uncertain(&a)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with(
                "finding [shard 1]: this shard's clock offset is known only to within 2.40 ms"
            ),
            "{found:?}"
        );
        assert!(text.contains(&found[0]), "{text}");
        assert!(crate::html(&a).contains("shard 1 +49.950 ms ± 2.40 ms (11)"));
    }

    #[test]
    fn fanout_figures_are_written_in_camel_case_and_results_without_them_still_read() {
        let r = crate::fixtures::fanout();
        let json = serde_json::to_string(&r).expect("ser");
        for field in [
            r#""deliveriesPerSec":9999.5"#,
            r#""outOfOrder":3"#,
            r#""gaps":5"#,
            r#""completeness":0.99995"#,
            r#""slowest":[{"conn":17,"topic":1,"delivered":995,"gaps":5,"maxLatencyUs":42000}]"#,
        ] {
            assert!(json.contains(field), "{field} in {json}");
        }
        let back: RunResult = serde_json::from_str(&json).expect("de");
        assert_eq!(back.cells[0].figures, r.cells[0].figures);
        let echo = serde_json::to_string(&shard(0, 10, 1, 1)).expect("ser");
        assert!(!echo.contains("\"fanout\""), "{echo}");
        let mut old: serde_json::Value = serde_json::from_str(&echo).expect("json");
        old["cells"][0]["figures"]
            .as_object_mut()
            .expect("figures")
            .remove("fanout");
        let back: RunResult = serde_json::from_value(old).expect("an echo result written before");
        assert!(back.cells[0].figures.fanout.is_none());
    }

    #[test]
    fn results_written_before_timelines_still_read() {
        let r = shard(0, 10, 1, 1);
        let json = serde_json::to_string(&r).expect("ser");
        for absent in ["\"timeline\"", "loadgenCpu", "\"spec\""] {
            assert!(!json.contains(absent), "{absent} in {json}");
        }
        let back: RunResult = serde_json::from_str(&json).expect("de");
        assert!(back.cells[0].timeline.is_empty() && back.spec.is_none());
    }
}
