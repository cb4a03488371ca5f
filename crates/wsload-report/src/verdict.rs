//! The verdict: every threshold checked against every cell's figure (or the run's limit), and,
//! thresholds or not, every cell measured what its scenario measures: a run in which nothing
//! connected, or no answer came back, never passes.

use crate::figure::{NOT_MEASURED, limit, no_connection, none_survived, nothing_delivered};
use crate::result::{CellResult, Check, RunResult, Unmeasured, Verdict};
use wsload_spec::Scenario;
use wsload_spec::scenario::{Cells, Measures};
use wsload_spec::threshold::Metric;

/// What `cell` of a `scenario` run was to measure and did not, if anything.
fn missing(scenario: Scenario, cell: &CellResult) -> Option<String> {
    let c = &cell.measure.counts;
    if c.attempted > 0 && c.connected == 0 {
        return Some(no_connection(cell));
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
        // Every connection gone before its first round trip (a server that closes with the
        // 101, a half-close, a frame past the limits): survival 0% of nothing measured.
        Measures::RoundTrips { .. } | Measures::PacedRoundTrips
            if c.survived == 0 && cell.measure.hists.rtt.is_empty() =>
        {
            Some(none_survived(cell))
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

/// A check of threshold `text` in `cell`: the figure judged, or failed with why it was never
/// measured.
fn check(
    text: &str,
    cell: &str,
    figure: Result<f64, String>,
    holds: impl Fn(f64) -> bool,
) -> Check {
    match figure {
        Ok(actual) => Check {
            threshold: text.to_string(),
            cell: cell.to_string(),
            actual: Some(actual),
            passed: holds(actual),
            reason: None,
        },
        Err(why) => Check {
            threshold: text.to_string(),
            cell: cell.to_string(),
            actual: None,
            passed: false,
            reason: Some(format!("{NOT_MEASURED}{why}")),
        },
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
            let holds = |a| t.holds(a);
            if t.metric == Metric::Limit {
                checks.push(check(
                    &t.text,
                    "all",
                    limit(self.limit, &self.probes),
                    holds,
                ));
                continue;
            }
            for c in &self.cells {
                // A figure that was never measured cannot pass: it fails, saying why.
                let figure = c.figure(t.metric, self.scenario);
                checks.push(check(&t.text, &c.label, figure, holds));
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
        judged_by(scenario, measure, &[])
    }

    /// The same, judged by `thresholds`.
    fn judged_by(scenario: Scenario, measure: Measure, thresholds: &[&str]) -> crate::RunResult {
        let mut r = shard(0, 10, 1, 0);
        r.scenario = scenario;
        r.thresholds = thresholds
            .iter()
            .map(|t| t.parse().expect("threshold"))
            .collect();
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

    /// Every connection gone before its first ping (a server that closes in the write of its
    /// 101, a half-close, a 1 GiB frame header): nothing measured, whatever survival says.
    /// Before: Survival 0.00%, no verdict, exit 0.
    #[test]
    fn a_cell_whose_connections_all_died_before_a_round_trip_fails() {
        let mut died = Measure::default();
        died.counts.attempted = 2;
        died.counts.connected = 2;
        died.counts.drop(crate::measure::Dropped::ServerClose);
        died.counts.drop(crate::measure::Dropped::MessageTooBig);
        for scenario in [
            Scenario::SustainedHold,
            Scenario::PingLatency,
            Scenario::Pingpong,
        ] {
            let v = judged(scenario, died.clone()).verdict.expect("judged");
            assert!(!v.passed, "{scenario:?}");
            assert_eq!(
                v.unmeasured[0].missing,
                "no connection survived to measure: all 2 ended before any round trip \
                 (server_close x1, message_too_big x1)",
                "{scenario:?}"
            );
        }
        // One that lived: its survival is a measured figure.
        let mut lived = died.clone();
        lived.counts.survived = 1;
        assert!(judged(Scenario::SustainedHold, lived).verdict.is_none());
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

    /// 3 connections held through a hold shorter than the ping interval: connected, survived,
    /// and not one ping sent.
    fn held_without_pings() -> Measure {
        let mut m = Measure::default();
        m.counts.attempted = 3;
        m.counts.connected = 3;
        m.counts.survived = 3;
        m
    }

    #[test]
    fn a_threshold_whose_figure_was_never_measured_fails_saying_why() {
        let r = judged_by(
            Scenario::SustainedHold,
            held_without_pings(),
            &["loss < 0.1%", "survival > 99%", "rtt.p99 < 50ms"],
        );
        let v = r.verdict.as_ref().expect("judged");
        // The cell measured what the scenario is for (connections held): a threshold failed
        // (exit 1), not "measured nothing" (exit 4).
        assert!(!v.passed && v.unmeasured.is_empty(), "{v:?}");
        let seen: Vec<(bool, Option<f64>, Option<&str>)> = v
            .checks
            .iter()
            .map(|c| (c.passed, c.actual, c.reason.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                (false, None, Some("not measured: 0 pings were sent")),
                (true, Some(1.0), None),
                (false, None, Some("not measured: 0 pings were sent")),
            ]
        );
        let text = r.render();
        assert!(
            text.contains("  FAIL loss < 0.1% [100] not measured: 0 pings were sent\n"),
            "{text}"
        );
        assert!(
            text.contains("  PASS survival > 99% [100] actual 100"),
            "{text}"
        );
        let html = crate::html(&r);
        assert!(
            html.contains("<td>not measured: 0 pings were sent</td>"),
            "{html}"
        );
        let json = serde_json::to_string(&r).expect("json");
        assert!(
            json.contains(
                r#""actual":null,"passed":false,"reason":"not measured: 0 pings were sent""#
            ),
            "{json}"
        );
        // A check with a figure has no reason in the JSON, as results written before.
        assert_eq!(json.matches(r#""reason""#).count(), 2, "{json}");
    }

    #[test]
    fn every_rate_and_count_of_nothing_fails_rather_than_passing_by_absence() {
        let mut silent = held_without_pings();
        silent.counts.attempted = 4;
        silent.counts.connected = 4;
        let fail = |scenario, m: &Measure, t: &str| {
            let r = judged_by(scenario, m.clone(), &[t]);
            let c = &r.verdict.expect("judged").checks[0];
            assert!(!c.passed && c.actual.is_none(), "{t}: {c:?}");
            c.reason.clone().unwrap_or_default()
        };
        assert_eq!(
            fail(Scenario::Blast, &silent, "throughput < 1M msg/s"),
            "not measured: 0 messages were sent"
        );
        assert_eq!(
            fail(Scenario::Echo, &silent, "received_rate < 1M msg/s"),
            "not measured: 0 messages were received (0 sent)"
        );
        assert_eq!(
            fail(Scenario::Echo, &silent, "loss < 1%"),
            "not measured: 0 messages expecting an answer were sent"
        );
        // A fanout whose subscribers received nothing has no gaps to count, nor a
        // completeness: it measured nothing (exit 4) and fails its thresholds with why.
        for t in [
            "gaps == 0",
            "completeness > 99%",
            "fanout.p99 < 50ms",
            "deliveries < 1M/s",
        ] {
            assert_eq!(
                fail(Scenario::Fanout, &silent, t),
                "not measured: no delivery was received and nothing was published in the measured window",
                "{t}"
            );
        }
        // A storm that opened nothing (a shard's empty share) measured no error rate either.
        assert_eq!(
            fail(
                Scenario::ConnectionStorm,
                &Measure::default(),
                "errors < 1%"
            ),
            "not measured: 0 connections were attempted"
        );
        // connectionLimit's limit: none held.
        let mut r = shard(0, 10, 1, 0);
        r.scenario = Scenario::ConnectionLimit;
        r.thresholds = vec!["limit >= 10".parse().expect("threshold")];
        r.probes = vec![crate::result::Probe {
            connections: 10,
            error_rate: 0.5,
            passed: false,
        }];
        r.judge();
        let c = &r.verdict.expect("judged").checks[0];
        assert_eq!(
            (c.passed, c.reason.as_deref()),
            (
                false,
                Some("not measured: none of the 1 probes held its connections")
            )
        );
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
