//! The operator's own Prometheus metrics, served with `/healthz` and `/readyz` on one port.
//!
//! Ordinary prometheus-client metrics in one registry: reconciles are rare (a few per second
//! at most), so their short locks cost nothing, and a scrape never blocks a reconcile.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};
use wsload_http::prometheus_client::collector::Collector;
use wsload_http::prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use wsload_http::prometheus_client::metrics::counter::Counter;
use wsload_http::prometheus_client::metrics::family::Family;
use wsload_http::prometheus_client::metrics::gauge::Gauge;
use wsload_http::prometheus_client::metrics::histogram::Histogram;
use wsload_http::prometheus_client::registry::Registry;
use wsload_http::{Exposition, LATENCY_BUCKETS};

/// One label and its value, e.g. `phase="Running"`.
type Label = [(&'static str, &'static str); 1];

pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    failures: Family<Label, Counter>,
    duration: Histogram,
    /// Last known phase of every LoadTest, by uid; the gauge counts them.
    phases: Mutex<BTreeMap<String, &'static str>>,
    loadtests: Family<Label, Gauge>,
    transitions: Family<Label, Counter>,
    leader: Gauge,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reconciles = Counter::default();
        let failures = Family::<Label, Counter>::default();
        let duration = Histogram::new(LATENCY_BUCKETS);
        let loadtests = Family::<Label, Gauge>::default();
        let transitions = Family::<Label, Counter>::default();
        let leader = Gauge::default();
        // Every phase from the start, so both show zeros instead of missing series.
        for phase in PHASES {
            loadtests.get_or_create(&[("phase", phase)]).set(0);
            transitions.get_or_create(&[("phase", phase)]).inc_by(0);
        }
        // The registry appends the full stop to each help text.
        registry.register(
            "wsload_operator_reconciles",
            "Reconciles started",
            reconciles.clone(),
        );
        registry.register_collector(Box::new(AlwaysDescribed {
            name: "wsload_operator_reconcile_errors",
            help: "Reconciles that ended in an error, by error kind.",
            family: failures.clone(),
        }));
        registry.register(
            "wsload_operator_reconcile_duration_seconds",
            "Time one reconcile took",
            duration.clone(),
        );
        registry.register(
            "wsload_operator_loadtests",
            "LoadTests by phase, as this operator last saw them",
            loadtests.clone(),
        );
        registry.register(
            "wsload_operator_phase_transitions",
            "LoadTests that entered each phase",
            transitions.clone(),
        );
        registry.register(
            "wsload_operator_leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        Metrics {
            registry,
            reconciles,
            failures,
            duration,
            phases: Mutex::default(),
            loadtests,
            transitions,
            leader,
            ready: AtomicBool::new(false),
        }
    }
}

/// A family with its `# HELP` and `# TYPE` even before its first series: the registry leaves
/// an empty family out, and Prometheus should know the error counter before the first error.
#[derive(Debug)]
struct AlwaysDescribed {
    name: &'static str,
    help: &'static str,
    family: Family<Label, Counter>,
}

impl Collector for AlwaysDescribed {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let metric =
            encoder.encode_descriptor(self.name, self.help, None, self.family.metric_type())?;
        self.family.encode(metric)
    }
}

/// Observes one reconcile's duration when dropped, however the reconcile ends.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics.observe_duration(self.start.elapsed());
    }
}

impl Metrics {
    pub fn reconcile_started(&self) -> ReconcileTimer<'_> {
        self.reconciles.inc();
        ReconcileTimer {
            metrics: self,
            start: Instant::now(),
        }
    }

    pub fn reconcile_failed(&self, label: &'static str) {
        self.failures.get_or_create(&[("error", label)]).inc();
    }

    /// Records the phase a LoadTest is in; `None` forgets it (deleted).
    pub fn set_phase(&self, uid: &str, phase: Option<&'static str>) {
        let Ok(mut p) = self.phases.lock() else {
            return;
        };
        match phase {
            Some(ph) => {
                if p.insert(uid.to_string(), ph) != Some(ph) {
                    self.transitions.get_or_create(&[("phase", ph)]).inc();
                }
            }
            None => {
                p.remove(uid);
            }
        }
        // Recounted under the lock, so the gauges always agree with the map.
        for phase in PHASES {
            let n = p.values().filter(|v| **v == phase).count();
            self.loadtests
                .get_or_create(&[("phase", phase)])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Relaxed);
    }

    pub fn observe_duration(&self, d: Duration) {
        self.duration.observe(d.as_secs_f64());
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
        wsload_http::encode(&self.registry)
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
        assert!(
            m.render()
                .contains("# TYPE wsload_operator_reconcile_errors counter\n"),
            "described before the first error"
        );
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
        assert!(text.contains("wsload_operator_reconcile_duration_seconds_count 1\n"));
        assert!(text.contains("wsload_operator_loadtests{phase=\"Failed\"} 0\n"));
        assert!(text.contains("wsload_operator_phase_transitions_total{phase=\"Failed\"} 0\n"));
        assert!(text.contains("# TYPE wsload_operator_leader gauge\nwsload_operator_leader 0\n"));
        assert!(
            !text.contains("error=\"other\""),
            "only errors seen are exposed"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        m.set_phase("b", None);
        assert!(
            m.render()
                .contains("wsload_operator_loadtests{phase=\"Running\"} 0")
        );
    }
}
