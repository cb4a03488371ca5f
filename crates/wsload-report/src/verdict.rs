//! The verdict: every threshold checked against every cell's figure (or the run's limit), and,
//! thresholds or not, every cell measured what its scenario measures: a run in which nothing
//! connected, or no answer came back, never passes.

use crate::result::{CellResult, Check, RunResult, Unmeasured, Verdict};
use wsload_spec::Scenario;
use wsload_spec::scenario::{Cells, Measures};
use wsload_spec::threshold::{Latency, Metric, Stat};

/// What `cell` of a `scenario` run was to measure and did not, if anything.
fn missing(scenario: Scenario, cell: &CellResult) -> Option<String> {
    let c = &cell.measure.counts;
    if c.attempted > 0 && c.connected == 0 {
        let why: Vec<String> = c
            .failed
            .iter()
            .map(|(k, v)| format!("{} x{v}", k.label()))
            .collect();
        return Some(format!(
            "no connection was established ({} attempted: {})",
            c.attempted,
            if why.is_empty() {
                "no reason recorded".to_string()
            } else {
                why.join(", ")
            }
        ));
    }
    if c.connected == 0 {
        // This part was given no connections (a shard's empty share): nothing was asked.
        return None;
    }
    match scenario.profile().measures {
        Measures::RoundTrips { .. } | Measures::PacedRoundTrips
            if c.expected > 0 && cell.measure.hists.rtt.is_empty() =>
        {
            Some(format!(
                "no round trip was answered ({} sent expecting an answer)",
                c.expected
            ))
        }
        Measures::Echoes
            if c.sent > 0 && c.received == 0 && cell.server_received.unwrap_or(0) == 0 =>
        {
            Some(format!(
                "no echo came back and no server counted a message ({} sent)",
                c.sent
            ))
        }
        Measures::Echoes | Measures::Sends if c.sent == 0 => Some("no message was sent".into()),
        Measures::Deliveries => nothing_delivered(cell),
        Measures::Connects
        | Measures::Limit
        | Measures::RoundTrips { .. }
        | Measures::PacedRoundTrips
        | Measures::Echoes
        | Measures::Sends => None,
    }
}

/// A fanout cell whose subscribers received nothing of the window: why, as far as the
/// tallies tell (nothing published, or published and never delivered).
fn nothing_delivered(cell: &CellResult) -> Option<String> {
    let f = cell.figures.fanout.as_ref();
    // A subscriber behind reads the window's time in what was published before it: measured
    // (and judged on its completeness), not nothing.
    if f.is_some_and(|f| f.delivered > 0 || f.read_per_sec > 0.0) {
        return None;
    }
    let (publishes, expected) = f.map_or((0, 0), |f| (f.publishes, f.expected));
    Some(if publishes == 0 {
        "no delivery was received and nothing was published in the measured window".to_string()
    } else {
        format!("no delivery was received ({publishes} publishes, {expected} deliveries expected)")
    })
}

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
                    Latency::Fanout => &h.fanout,
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
            Metric::Gaps => f.fanout.as_ref()?.gaps as f64,
            Metric::Completeness => f.fanout.as_ref()?.completeness?,
            Metric::Deliveries => f.fanout.as_ref()?.deliveries_per_sec,
        })
    }
}

impl RunResult {
    pub fn judge(&mut self) {
        let unmeasured = self.unmeasured();
        if self.thresholds.is_empty() && unmeasured.is_empty() {
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
            passed: unmeasured.is_empty() && checks.iter().all(|c| c.passed),
            checks,
            unmeasured,
        });
    }

    /// Every cell that measured nothing of what it was for. connectionLimit's probes search
    /// for where connections fail, so only a search in which none ever connected is one.
    fn unmeasured(&self) -> Vec<Unmeasured> {
        if self.scenario.profile().cells == Cells::Search {
            let attempted: u64 = self.cells.iter().map(|c| c.measure.counts.attempted).sum();
            let connected: u64 = self.cells.iter().map(|c| c.measure.counts.connected).sum();
            return if attempted > 0 && connected == 0 {
                vec![Unmeasured {
                    cell: "all".into(),
                    missing: format!(
                        "no connection was established in any probe ({attempted} attempted)"
                    ),
                }]
            } else {
                Vec::new()
            };
        }
        self.cells
            .iter()
            .filter_map(|c| {
                missing(self.scenario, c).map(|missing| Unmeasured {
                    cell: c.label.clone(),
                    missing,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::fixtures::shard;
    use crate::measure::{ConnectError, Measure};
    use wsload_spec::Scenario;

    /// A shard fixture with no thresholds, as `scenario`, its cell measured as `measure`.
    fn judged(scenario: Scenario, measure: Measure) -> crate::RunResult {
        let mut r = shard(0, 10, 1, 0);
        r.scenario = scenario;
        r.thresholds.clear();
        r.cells[0].measure = measure;
        r.cells[0].compute();
        r.judge();
        r
    }

    fn refused_all() -> Measure {
        let mut m = Measure::default();
        m.counts.attempted = 5;
        for _ in 0..5 {
            m.counts.fail(ConnectError::Refused);
        }
        m
    }

    #[test]
    fn a_run_that_connected_nothing_fails_without_thresholds() {
        for scenario in [
            Scenario::ConnectionStorm,
            Scenario::PingLatency,
            Scenario::Throughput,
            Scenario::ConnectionLimit,
        ] {
            let r = judged(scenario, refused_all());
            let v = r.verdict.expect("judged although no thresholds");
            assert!(!v.passed, "{scenario:?}");
            assert_eq!(v.unmeasured.len(), 1, "{scenario:?}");
            let missing = &v.unmeasured[0].missing;
            assert!(
                missing.contains("no connection was established")
                    && missing.contains("5 attempted"),
                "{scenario:?}: {missing}"
            );
            if scenario != Scenario::ConnectionLimit {
                assert_eq!(v.unmeasured[0].cell, "100");
                assert!(missing.contains("refused x5"), "{missing}");
            }
        }
    }

    #[test]
    fn a_cell_without_what_its_scenario_measures_fails() {
        let mut unanswered = Measure::default();
        unanswered.counts.attempted = 5;
        unanswered.counts.connected = 5;
        unanswered.counts.sent = 100;
        unanswered.counts.expected = 100;
        unanswered.counts.lost = 100;
        for scenario in [
            Scenario::PingLatency,
            Scenario::ConstantRate,
            Scenario::Echo,
        ] {
            let v = judged(scenario, unanswered.clone())
                .verdict
                .expect("judged");
            assert!(!v.passed);
            assert!(
                v.unmeasured[0]
                    .missing
                    .contains("no round trip was answered (100 sent")
            );
        }
        let v = judged(Scenario::Throughput, unanswered.clone())
            .verdict
            .expect("judged");
        assert!(v.unmeasured[0].missing.contains("no echo came back"));
        // Connections were the point: a storm that connected measured what it is for.
        assert!(
            judged(Scenario::ConnectionStorm, unanswered)
                .verdict
                .is_none()
        );
    }

    /// Subscribers behind a server faster than they read take in deliveries published before
    /// the window: none of the window's, but read: measured (completeness judges it), not
    /// nothing.
    #[test]
    fn a_fanout_that_read_only_older_deliveries_is_measured() {
        use crate::fanout::{Fanout, TopicTally};
        let mut m = Measure::default();
        (m.counts.attempted, m.counts.connected) = (4, 4);
        m.counts.fanout = Some(Fanout {
            topics: vec![TopicTally {
                subscribers: 4,
                published: 50,
                ..TopicTally::default()
            }],
            read_in_window: 1_000,
            outside: 1_000,
            ..Fanout::default()
        });
        let r = judged(Scenario::Fanout, m.clone());
        assert!(
            r.verdict.as_ref().is_none_or(|v| v.unmeasured.is_empty()),
            "{:?}",
            r.verdict
        );
        assert_eq!(
            r.cells[0].figures.fanout.as_ref().map(|f| f.read_per_sec),
            Some(100.0)
        );
        m.counts.fanout.as_mut().expect("tally").read_in_window = 0;
        let v = judged(Scenario::Fanout, m).verdict.expect("judged");
        assert_eq!(v.unmeasured.len(), 1);
    }

    #[test]
    fn a_fanout_that_delivered_nothing_fails_and_one_that_did_is_judged() {
        use crate::fanout::{Fanout, TopicTally};
        let mut m = Measure::default();
        m.counts.attempted = 4;
        m.counts.connected = 4;
        let mut tally = TopicTally {
            subscribers: 4,
            published: 50,
            ..TopicTally::default()
        };
        m.counts.fanout = Some(Fanout {
            topics: vec![tally],
            ..Fanout::default()
        });
        let v = judged(Scenario::Fanout, m.clone()).verdict.expect("judged");
        assert!(!v.passed);
        assert_eq!(
            v.unmeasured[0].missing,
            "no delivery was received (50 publishes, 200 deliveries expected)"
        );
        let mut none = m.clone();
        none.counts.fanout = None;
        let v = judged(Scenario::Fanout, none).verdict.expect("judged");
        assert_eq!(
            v.unmeasured[0].missing,
            "no delivery was received and nothing was published in the measured window"
        );
        tally.delivered = 199;
        m.counts.fanout = Some(Fanout {
            topics: vec![tally],
            ..Fanout::default()
        });
        for _ in 0..199 {
            m.hists.fanout.record(std::time::Duration::from_millis(3));
        }
        let mut r = shard(0, 10, 1, 0);
        r.scenario = Scenario::Fanout;
        r.thresholds = [
            "fanout.p99 < 50ms",
            "gaps == 0",
            "completeness > 99%",
            "deliveries > 10/s",
        ]
        .iter()
        .map(|t| t.parse().expect("threshold"))
        .collect();
        r.cells[0].measure = m;
        r.cells[0].compute();
        r.judge();
        let v = r.verdict.as_ref().expect("judged");
        assert!(v.unmeasured.is_empty());
        let results: Vec<(bool, Option<f64>)> =
            v.checks.iter().map(|c| (c.passed, c.actual)).collect();
        assert_eq!(results[1], (false, Some(1.0)), "one gap");
        assert_eq!(results[2], (true, Some(0.995)));
        assert!(results[0].0 && results[3].0, "{results:?}");
        assert_eq!(r.actual(&v.checks[1]), "1");
        assert_eq!(r.actual(&v.checks[2]), "99.500%");
        assert_eq!(r.actual(&v.checks[3]), "19.9 deliveries/s");
    }

    #[test]
    fn a_run_that_measured_passes_as_before() {
        let mut r = shard(0, 10, 1, 0);
        let v = r.verdict.take().expect("thresholds");
        assert!(v.passed && v.unmeasured.is_empty());
        r.thresholds.clear();
        r.judge();
        assert!(r.verdict.is_none());
    }
}
