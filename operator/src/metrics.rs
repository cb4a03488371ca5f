//! The operator's own Prometheus metrics, served with `/healthz` and `/readyz` on one port.
//!
//! Counters are plain atomics: reconciles are rare (a few per second at most), so the only
//! point is that a scrape never blocks a reconcile.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use wsload_metrics::{AtomicHistogram, Exposition, header, render_histogram};

#[derive(Default)]
pub struct Metrics {
    reconciles: AtomicU64,
    failures: Mutex<BTreeMap<&'static str, u64>>,
    duration: AtomicHistogram,
    /// Last known phase of every LoadTest, by uid; the gauge counts them.
    phases: Mutex<BTreeMap<String, &'static str>>,
    transitions: Mutex<BTreeMap<&'static str, u64>>,
    leader: AtomicBool,
    ready: AtomicBool,
}

/// Observes one reconcile's duration when dropped, however the reconcile ends.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics.duration.observe(self.start.elapsed());
    }
}

impl Metrics {
    pub fn reconcile_started(&self) -> ReconcileTimer<'_> {
        self.reconciles.fetch_add(1, Relaxed);
        ReconcileTimer {
            metrics: self,
            start: Instant::now(),
        }
    }

    pub fn reconcile_failed(&self, label: &'static str) {
        if let Ok(mut f) = self.failures.lock() {
            *f.entry(label).or_default() += 1;
        }
    }

    /// Records the phase a LoadTest is in; `None` forgets it (deleted).
    pub fn set_phase(&self, uid: &str, phase: Option<&'static str>) {
        if let Ok(mut p) = self.phases.lock() {
            match phase {
                Some(ph) => {
                    if p.insert(uid.to_string(), ph) != Some(ph)
                        && let Ok(mut t) = self.transitions.lock()
                    {
                        *t.entry(ph).or_default() += 1;
                    }
                }
                None => {
                    p.remove(uid);
                }
            }
        }
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Relaxed);
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Relaxed);
    }

    pub fn observe_duration(&self, d: Duration) {
        self.duration.observe(d);
    }
}

/// Every phase, so the gauge shows zeros instead of missing series.
const PHASES: [&str; 6] = [
    "Pending",
    "Starting",
    "Running",
    "Collecting",
    "Succeeded",
    "Failed",
];

impl Exposition for Metrics {
    fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        header(
            &mut out,
            "wsload_operator_reconciles_total",
            "counter",
            "Reconciles started.",
        );
        let _ = writeln!(
            out,
            "wsload_operator_reconciles_total {}",
            self.reconciles.load(Relaxed)
        );
        header(
            &mut out,
            "wsload_operator_reconcile_errors_total",
            "counter",
            "Reconciles that ended in an error, by error kind.",
        );
        if let Ok(f) = self.failures.lock() {
            for (label, n) in f.iter() {
                let _ = writeln!(
                    out,
                    "wsload_operator_reconcile_errors_total{{error=\"{label}\"}} {n}"
                );
            }
        }
        header(
            &mut out,
            "wsload_operator_reconcile_duration_seconds",
            "histogram",
            "Time one reconcile took.",
        );
        render_histogram(
            &mut out,
            "wsload_operator_reconcile_duration_seconds",
            "",
            &[&self.duration],
        );
        header(
            &mut out,
            "wsload_operator_loadtests",
            "gauge",
            "LoadTests by phase, as this operator last saw them.",
        );
        if let Ok(p) = self.phases.lock() {
            for phase in PHASES {
                let n = p.values().filter(|v| **v == phase).count();
                let _ = writeln!(out, "wsload_operator_loadtests{{phase=\"{phase}\"}} {n}");
            }
        }
        header(
            &mut out,
            "wsload_operator_phase_transitions_total",
            "counter",
            "LoadTests that entered each phase.",
        );
        if let Ok(t) = self.transitions.lock() {
            for phase in PHASES {
                let n = t.get(phase).copied().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "wsload_operator_phase_transitions_total{{phase=\"{phase}\"}} {n}"
                );
            }
        }
        header(
            &mut out,
            "wsload_operator_leader",
            "gauge",
            "1 while this replica holds the leader lease.",
        );
        let _ = writeln!(
            out,
            "wsload_operator_leader {}",
            u8::from(self.leader.load(Relaxed))
        );
        out
    }

    fn ready(&self) -> bool {
        self.ready.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_counted_once_per_test_and_transitions_accumulate() {
        let m = Metrics::default();
        m.set_phase("a", Some("Running"));
        m.set_phase("a", Some("Running"));
        m.set_phase("b", Some("Running"));
        m.set_phase("a", Some("Succeeded"));
        m.reconcile_failed("kube");
        drop(m.reconcile_started());
        let text = m.render();
        assert!(text.contains("wsload_operator_loadtests{phase=\"Running\"} 1"));
        assert!(text.contains("wsload_operator_loadtests{phase=\"Succeeded\"} 1"));
        assert!(text.contains("wsload_operator_phase_transitions_total{phase=\"Running\"} 2"));
        assert!(text.contains("wsload_operator_reconcile_errors_total{error=\"kube\"} 1"));
        assert!(text.contains("wsload_operator_reconciles_total 1"));
        assert!(text.contains("wsload_operator_reconcile_duration_seconds_count{} 1"));
        m.set_phase("b", None);
        assert!(
            m.render()
                .contains("wsload_operator_loadtests{phase=\"Running\"} 0")
        );
    }
}
