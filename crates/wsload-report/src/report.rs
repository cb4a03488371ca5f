//! The result of a run: JSON with every count and serialized histogram (so shards merge
//! exactly), figures derived from them, the threshold verdict, and seed-style tables.

use crate::hist::Hist;
use crate::measure::Measure;
use crate::timeline::{self, Sample};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use wsload_spec::threshold::{Latency, Metric, Stat};
use wsload_spec::{Scenario, Threshold};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
    pub count: u64,
}

impl Percentiles {
    fn of(h: &Hist) -> Self {
        Percentiles {
            p50: h.percentile(50.0),
            p90: h.percentile(90.0),
            p95: h.percentile(95.0),
            p99: h.percentile(99.0),
            p999: h.percentile(99.9),
            max: h.max(),
            mean: h.mean(),
            count: h.len(),
        }
    }
}

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
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

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
        let frac = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
        self.figures = Figures {
            sent_per_sec: per(c.sent, self.measured_secs),
            received_per_sec: per(c.received, self.measured_secs),
            bytes_sent_per_sec: per(c.bytes_sent, self.measured_secs),
            connect_rate: per(c.connected, self.connect_secs),
            // A connection the server refused after the upgrade, or dropped later, failed too.
            errors: frac(c.failed_total() + c.dropped_total(), c.attempted),
            loss: frac(c.lost, c.expected),
            survival: frac(c.survived, c.connected),
            delivery: self.server_received.map(|s| frac(s, c.sent_with_warmup)),
            connect: Percentiles::of(&h.connect),
            rtt: Percentiles::of(&h.rtt),
            rtt_raw: Percentiles::of(&h.rtt_raw),
        };
    }

    /// The value a threshold judges, in canonical units.
    pub fn value(&self, m: Metric) -> Option<f64> {
        let f = &self.figures;
        let h = &self.measure.hists;
        Some(match m {
            Metric::Latency(which, stat) => {
                let hist = match which {
                    Latency::Rtt => &h.rtt,
                    Latency::RttRaw => &h.rtt_raw,
                    Latency::Connect => &h.connect,
                };
                if hist.is_empty() {
                    return None;
                }
                match stat {
                    Stat::Min => hist.min(),
                    Stat::Mean => hist.mean(),
                    Stat::Max => hist.max(),
                    Stat::P(p) => hist.percentile(p),
                }
            }
            Metric::Throughput => f.sent_per_sec,
            Metric::ReceivedRate => f.received_per_sec,
            Metric::Errors => f.errors,
            Metric::Loss => f.loss,
            Metric::Survival => f.survival,
            Metric::Delivery => f.delivery?,
            Metric::ConnectRate => f.connect_rate,
            Metric::Limit => return None,
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub threshold: String,
    pub cell: String,
    pub actual: Option<f64>,
    pub passed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub passed: bool,
    pub checks: Vec<Check>,
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

impl RunResult {
    /// The spread of the shards' start instants (microseconds), when more than one recorded it.
    pub fn start_skew_micros(&self) -> Option<u64> {
        let starts = self.shard_info.iter().map(|s| s.started_at_micros);
        let (min, max) = (starts.clone().min()?, starts.max()?);
        (self.shard_info.len() > 1).then_some(max - min)
    }

    pub fn judge(&mut self) {
        if self.thresholds.is_empty() {
            self.verdict = None;
            return;
        }
        let mut checks = Vec::new();
        for t in &self.thresholds {
            if t.metric == Metric::Limit {
                let actual = self.limit.map(f64::from);
                checks.push(Check {
                    threshold: t.text.clone(),
                    cell: "all".into(),
                    actual,
                    passed: actual.is_some_and(|a| t.holds(a)),
                });
                continue;
            }
            for c in &self.cells {
                let actual = c.value(t.metric);
                // A figure that was never measured cannot pass.
                checks.push(Check {
                    threshold: t.text.clone(),
                    cell: c.label.clone(),
                    actual,
                    passed: actual.is_some_and(|a| t.holds(a)),
                });
            }
        }
        self.verdict = Some(Verdict {
            passed: checks.iter().all(|c| c.passed),
            checks,
        });
    }

    /// Adds another shard's result of the same test: counts and histograms add exactly.
    pub fn merge(&mut self, other: &RunResult) -> Result<(), String> {
        if other.test != self.test
            || other.scenario != self.scenario
            || other.cells.len() != self.cells.len()
        {
            return Err(format!(
                "results of different tests or plans: {} ({} cells) vs {} ({} cells)",
                self.test,
                self.cells.len(),
                other.test,
                other.cells.len()
            ));
        }
        for s in &other.shards {
            if self.shards.contains(s) {
                return Err(format!("shard {s} is in both results"));
            }
        }
        self.shards.extend(&other.shards);
        self.shards.sort_unstable();
        for (a, b) in self.cells.iter_mut().zip(&other.cells) {
            if a.label != b.label {
                return Err(format!("cell {:?} does not match {:?}", a.label, b.label));
            }
            a.measure.add(&b.measure);
            a.connect_secs = a.connect_secs.max(b.connect_secs);
            a.measured_secs = a.measured_secs.max(b.measured_secs);
            a.start_skew_us = a.start_skew_us.max(b.start_skew_us);
            // What the servers received is the conductor's to read, over all shards at once
            // (wsload_control::assemble); a shard's own reading would count the others'.
            a.server_received = None;
            a.started_first_micros = match (a.started_first_micros, b.started_first_micros) {
                (0, x) | (x, 0) => x,
                (x, y) => x.min(y),
            };
            a.started_last_micros = a.started_last_micros.max(b.started_last_micros);
            timeline::merge(
                &mut a.timeline,
                &mut a.timeline_step_ms,
                &b.timeline,
                b.timeline_step_ms,
            );
            a.loadgen_cpu = match (a.loadgen_cpu, b.loadgen_cpu) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            };
            a.compute();
        }
        self.notes.extend(other.notes.iter().cloned());
        self.shard_info.extend(other.shard_info.iter().cloned());
        self.shard_info.sort_by_key(|s| s.index);
        self.started_at_unix_ms = self.started_at_unix_ms.min(other.started_at_unix_ms);
        if self.spec.is_none() {
            self.spec = other.spec.clone();
        }
        self.judge();
        Ok(())
    }

    /// What a check measured, in its threshold's units (`not measured` when nothing was).
    pub fn actual(&self, c: &Check) -> String {
        let metric = self
            .thresholds
            .iter()
            .find(|t| t.text == c.threshold)
            .map(|t| t.metric);
        match (c.actual, metric) {
            (Some(a), Some(m)) => in_units(m, a),
            _ => "not measured".to_string(),
        }
    }

    /// What ran against what: `echo against ws://x, shards [0, 1] of 2`.
    pub(crate) fn headline(&self) -> String {
        let shards = if self.shard_count > 1 {
            format!(", shards {:?} of {}", self.shards, self.shard_count)
        } else {
            String::new()
        };
        format!("{} against {}{shards}", self.scenario.as_str(), self.target)
    }

    /// Tables in the style of the seed reports, and the verdict.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "\n{} — {}\n", self.test, self.headline());
        let table = table(self);
        o.push_str(&table);
        let findings = crate::findings::findings(self);
        if !findings.is_empty() {
            o.push('\n');
            for f in &findings {
                let _ = writeln!(o, "{f}");
            }
        }
        if !self.probes.is_empty() {
            let _ = writeln!(o, "\n| Probe | Error rate | Result |\n|---|---|---|");
            for p in &self.probes {
                let _ = writeln!(
                    o,
                    "| {} | {:.2}% | {} |",
                    num(f64::from(p.connections)),
                    p.error_rate * 100.0,
                    if p.passed { "held" } else { "failed" }
                );
            }
            let _ = writeln!(
                o,
                "\nLimit: {}",
                self.limit.map_or("none held".into(), |l| format!(
                    "{} connections",
                    num(f64::from(l))
                ))
            );
        }
        if self.shard_count > 1 && self.cells.iter().any(|c| c.shard_skew_ms().is_some()) {
            let _ = writeln!(
                o,
                "\nShards began each cell together (released per cell); start skew per cell:"
            );
            let skews: Vec<String> = self
                .cells
                .iter()
                .filter_map(|c| c.shard_skew_ms().map(|s| format!("{} {s:.1} ms", c.label)))
                .collect();
            let _ = writeln!(o, "  {}", skews.join(", "));
        }
        for n in &self.notes {
            let _ = writeln!(o, "note: {n}");
        }
        if let Some(v) = &self.verdict {
            let _ = writeln!(o, "\nThresholds:");
            for c in &v.checks {
                let actual = self.actual(c);
                let _ = writeln!(
                    o,
                    "  {} {} [{}] actual {actual}",
                    if c.passed { "PASS" } else { "FAIL" },
                    c.threshold,
                    c.cell
                );
            }
            let _ = writeln!(o, "\nVerdict: {}", if v.passed { "PASS" } else { "FAIL" });
        }
        o
    }
}

/// A threshold's figure in the units it is written in.
pub fn in_units(m: Metric, v: f64) -> String {
    match m {
        Metric::Latency(..) => ms(v),
        Metric::Errors | Metric::Loss | Metric::Survival | Metric::Delivery => {
            format!("{:.3}%", v * 100.0)
        }
        Metric::Throughput | Metric::ReceivedRate => format!("{} msg/s", num(v)),
        Metric::ConnectRate => format!("{} conn/s", num(v)),
        Metric::Limit => num(v),
    }
}

/// A duration given in seconds, in the unit that reads best: `71 us`, `4.63 ms`, `1.20 s`
/// (`-` for zero: nothing measured).
pub fn ms(s: f64) -> String {
    if s == 0.0 {
        "-".into()
    } else if s < 0.001 {
        format!("{:.0} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// A message rate for people: `1.23M msg/s`, `45.6K msg/s`, `789 msg/s`.
pub fn human_rate(msg_per_s: f64) -> String {
    format!("{} msg/s", num(msg_per_s))
}

/// A count for a table: `1.23M`, `45.6K`, `789`.
pub fn num(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A cell table's columns and rows, as the text and the HTML report print them.
pub(crate) struct Table {
    pub head: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

fn table(r: &RunResult) -> String {
    let t = cell_table(r);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "| {} |\n|{}",
        t.head.join(" | "),
        "---|".repeat(t.head.len())
    );
    for cells in &t.rows {
        let _ = writeln!(o, "| {} |", cells.join(" | "));
    }
    o
}

pub(crate) fn cell_table(r: &RunResult) -> Table {
    let mut rows = Vec::new();
    let head: Vec<&'static str>;
    use Scenario::*;
    match r.scenario {
        ConnectionStorm | ConnectionLimit => {
            head = vec![
                "Connections",
                "Accept rate",
                "p50",
                "p95",
                "p99",
                "p99.9",
                "Failed",
            ];
            for c in &r.cells {
                let f = &c.figures;
                // Connections the server closed right after the upgrade (over its cap) failed too.
                let failed = c.measure.counts.failed_total() + c.measure.counts.dropped_total();
                rows.push(vec![
                    c.label.clone(),
                    format!("{}/s", num(f.connect_rate)),
                    ms(f.connect.p50),
                    ms(f.connect.p95),
                    ms(f.connect.p99),
                    ms(f.connect.p999),
                    failed.to_string(),
                ]);
            }
        }
        PingLatency | SustainedHold | Pingpong => {
            let surv = r.scenario == SustainedHold;
            head = vec![
                "Connections",
                "Pings",
                "p50",
                "p95",
                "p99",
                "p99.9",
                "max",
                "Lost",
                if surv { "Survival" } else { "Errors" },
            ];
            for c in &r.cells {
                let f = &c.figures;
                let last = if surv {
                    format!("{:.2}%", f.survival * 100.0)
                } else {
                    c.measure.counts.failed_total().to_string()
                };
                rows.push(vec![
                    c.label.clone(),
                    num(f.rtt.count as f64),
                    ms(f.rtt.p50),
                    ms(f.rtt.p95),
                    ms(f.rtt.p99),
                    ms(f.rtt.p999),
                    ms(f.rtt.max),
                    c.measure.counts.lost.to_string(),
                    last,
                ]);
            }
        }
        Throughput | PayloadMatrix | FormatComparison | Blast => {
            head = vec![
                "Cell",
                "Msg/s",
                "MB/s",
                "Per-conn msg/s",
                "Echoes/s",
                "Server received",
                "Errors",
            ];
            for c in &r.cells {
                let f = &c.figures;
                let server = match (c.server_received, f.delivery) {
                    (Some(s), Some(d)) => format!("{} ({:.2}%)", num(s as f64), d * 100.0),
                    _ => "-".into(),
                };
                let errors = c.measure.counts.failed_total() + c.measure.counts.dropped_total();
                rows.push(vec![
                    c.label.clone(),
                    num(f.sent_per_sec),
                    format!("{:.1}", f.bytes_sent_per_sec / 1e6),
                    num(f.sent_per_sec / f64::from(c.connections.max(1))),
                    num(f.received_per_sec),
                    server,
                    errors.to_string(),
                ]);
            }
        }
        Echo | ConstantRate => {
            head = vec![
                "Connections",
                "Target/s",
                "Sent/s",
                "Received/s",
                "p50",
                "p99",
                "p99.9",
                "raw p99",
                "Loss",
            ];
            for c in &r.cells {
                let f = &c.figures;
                rows.push(vec![
                    c.label.clone(),
                    num(c.target_rate),
                    num(f.sent_per_sec),
                    num(f.received_per_sec),
                    ms(f.rtt.p50),
                    ms(f.rtt.p99),
                    ms(f.rtt.p999),
                    ms(f.rtt_raw.p99),
                    format!("{:.2}%", f.loss * 100.0),
                ]);
            }
        }
    }
    Table { head, rows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;
    use crate::measure::ConnectError;

    #[test]
    fn two_shards_merge_to_exact_counts_and_histograms() {
        // Shard 1's p99 alone fails the threshold; after the merge its samples are 1/3 of the
        // whole, so the merged p99 is still 10 ms: the verdict comes from the merged histogram.
        let a = shard(0, 2000, 1, 1_000_000_000);
        let b = shard(1, 1000, 10, 1_000_012_345);
        assert!(a.verdict.as_ref().is_some_and(|v| v.passed));
        // Through JSON, as the operator gets them.
        let a: RunResult =
            serde_json::from_str(&serde_json::to_string(&a).expect("ser")).expect("de");
        let b: RunResult =
            serde_json::from_str(&serde_json::to_string(&b).expect("ser")).expect("de");
        let mut merged = b.clone();
        merged.merge(&a).expect("merge");
        let c = &merged.cells[0];
        assert_eq!(merged.shards, vec![0, 1]);
        assert_eq!(c.measure.counts.sent, 3000);
        assert_eq!(c.measure.counts.sent_with_warmup, 3020);
        assert_eq!(c.measure.counts.attempted, 200);
        assert_eq!(c.measure.counts.connected, 198);
        assert_eq!(c.measure.counts.failed[&ConnectError::Refused], 2);
        assert_eq!(c.measure.hists.rtt.len(), 3000);
        assert_eq!(c.figures.rtt.count, 3000);
        // 2000 samples at 1 ms, 1000 at 10 ms: the exact p50 and p99 of the union.
        assert!(
            (c.figures.rtt.p50 - 0.001).abs() < 1e-5,
            "{}",
            c.figures.rtt.p50
        );
        assert!(
            (c.figures.rtt.p99 - 0.010).abs() < 1e-4,
            "{}",
            c.figures.rtt.p99
        );
        // The longer window of the two is the one rates are computed over.
        assert_eq!(c.measured_secs, 11.0);
        assert_eq!(c.figures.sent_per_sec, 3000.0 / 11.0);
        let v = merged.verdict.as_ref().expect("judged");
        assert!(!v.passed, "{v:?}");
        assert_eq!(merged.started_at_unix_ms, 1_000_000);
        assert_eq!(
            merged
                .shard_info
                .iter()
                .map(|s| s.index)
                .collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(merged.start_skew_micros(), Some(12_345));
        // Each cell's skew: the spread of the shards' starts of that cell.
        assert_eq!(c.shard_skew_ms(), Some(12.345));
        assert!(
            merged.render().contains("100 12.3 ms"),
            "{}",
            merged.render()
        );
        // A merge of shard results never claims a delivery: the conductor reads the servers.
        assert_eq!(c.server_received, None);
        // A shard merged twice is refused, not double-counted.
        assert!(merged.merge(&a).is_err());
        assert_eq!(merged.cells[0].measure.counts.sent, 3000);
    }

    #[test]
    fn results_without_shard_info_still_merge() {
        let mut a = shard(0, 10, 1, 0);
        a.shard_info.clear();
        let json = serde_json::to_string(&a).expect("ser");
        assert!(!json.contains("shardInfo"), "{json}");
        let a: RunResult = serde_json::from_str(&json).expect("de");
        let mut b = shard(1, 10, 1, 7);
        b.merge(&a).expect("merge");
        assert_eq!(b.cells[0].measure.counts.sent, 20);
        assert_eq!(b.start_skew_micros(), None);
    }

    #[test]
    fn merge_adds_timelines_by_step_and_keeps_the_busiest_cpu() {
        use crate::timeline::{Recorder, Totals};
        let with_samples = |index, per_step: u64, steps: u32, cpu| {
            let mut r = shard(index, 10, 1, 1);
            let mut rec = Recorder::new(Totals::default(), 100);
            for s in 0..steps {
                let n = per_step * u64::from(s + 1);
                rec.tick(
                    s,
                    Totals {
                        sent: n,
                        received: n,
                        open: 3,
                        ..Totals::default()
                    },
                    None,
                );
            }
            (r.cells[0].timeline_step_ms, r.cells[0].timeline) = rec.finish();
            r.cells[0].loadgen_cpu = cpu;
            // Through JSON, as the operator gets shard results.
            let json = serde_json::to_string(&r).expect("ser");
            serde_json::from_str::<RunResult>(&json).expect("de")
        };
        let mut a = with_samples(0, 100, 3, Some(0.4));
        a.merge(&with_samples(1, 10, 4, Some(0.95))).expect("merge");
        let t = &a.cells[0].timeline;
        let got: Vec<(u32, u64, u64)> = t.iter().map(|s| (s.at, s.sent, s.open)).collect();
        assert_eq!(got, vec![(0, 110, 6), (1, 110, 6), (2, 110, 6), (3, 10, 3)]);
        assert_eq!(a.cells[0].loadgen_cpu, Some(0.95));
        // A shard that recorded neither leaves the others' as they were.
        let mut old = shard(2, 10, 1, 1);
        old.shard_count = 3;
        a.merge(&old).expect("merge");
        assert_eq!(a.cells[0].timeline.len(), 4);
        assert_eq!(a.cells[0].loadgen_cpu, Some(0.95));
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

    #[test]
    fn formats() {
        assert_eq!(human_rate(1_234_567.0), "1.23M msg/s");
        assert_eq!(human_rate(45_600.0), "45.6K msg/s");
        assert_eq!(human_rate(789.4), "789 msg/s");
        assert_eq!(ms(0.000_071), "71 us");
        assert_eq!(ms(0.004_63), "4.63 ms");
        assert_eq!(ms(1.2), "1.20 s");
        assert_eq!(ms(0.0), "-");
    }
}
