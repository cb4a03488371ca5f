//! The verdict: every threshold checked against every cell's figure (or the run's limit).

use crate::result::{CellResult, Check, RunResult, Verdict};
use wsload_spec::threshold::{Latency, Metric, Stat};

impl CellResult {
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

impl RunResult {
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
}
