//! How the shards' results become the test's figures and verdict: merged with the same code as
//! `wsload merge`, so a cluster run and a local run of the same spec report alike.

use std::collections::BTreeMap;
use wsload_control::Conductor;
use wsload_report::{CellResult, Figures, Percentiles as ReportPercentiles, RunResult, ShardClock};
use wsload_spec::LoadTestSpec;
use wsload_spec::status::{
    FanoutTier, LoadTestStatus, MAX_FINDING_BYTES, MAX_FINDINGS, MAX_LISTED, MAX_REASON_BYTES,
    Percentiles, ReconnectTier, ThresholdResult, TierFigures, Verdict,
};

/// What the shards' results add up to.
pub struct Summary {
    pub tiers: Vec<TierFigures>,
    pub tiers_omitted: u32,
    pub thresholds: Vec<ThresholdResult>,
    pub thresholds_omitted: u32,
    pub verdict: Option<Verdict>,
    pub verdict_message: String,
    pub achieved_rate: Option<String>,
    pub p99: Option<String>,
    /// The merged result's findings as the report prints them, the first [`MAX_FINDINGS`].
    pub findings: Vec<String>,
    pub findings_omitted: u32,
    /// The merged result, gzip-compressed JSON, as stored.
    pub merged: Vec<u8>,
    /// The same as `wsload report --html` writes, gzip-compressed.
    pub report: Vec<u8>,
}

impl Summary {
    pub fn apply(&self, st: &mut LoadTestStatus) {
        st.tiers = self.tiers.clone();
        st.tiers_omitted = self.tiers_omitted;
        st.thresholds = self.thresholds.clone();
        st.thresholds_omitted = self.thresholds_omitted;
        st.verdict = self.verdict;
        st.achieved_rate = self.achieved_rate.clone();
        st.p99 = self.p99.clone();
        st.findings = self.findings.clone();
        st.findings_omitted = self.findings_omitted;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("shard {index}'s result is not a wsload result: {source}")]
    Parse {
        index: u32,
        source: wsload_report::stored::StoredError,
    },
    #[error("shard {index}'s result does not merge: {source}")]
    Merge {
        index: u32,
        #[source]
        source: wsload_report::MergeError,
    },
    #[error("no shard result to merge")]
    Empty,
    #[error("cannot store the merged result: {0}")]
    Serialize(wsload_report::stored::StoredError),
}

/// The shards' results folded into one as they are read, in any order: histograms and counts
/// add, so the fold stays about one result's size whatever the number of shards.
#[derive(Default)]
pub struct Merging {
    merged: Option<RunResult>,
    shards: usize,
}

impl Merging {
    /// Adds shard `index`'s stored result (gzip-compressed or plain JSON), its instants moved
    /// onto the operator's clock when the shard's `clock` was measured.
    pub fn add(
        &mut self,
        index: u32,
        stored: &[u8],
        clock: Option<ShardClock>,
    ) -> Result<(), SummaryError> {
        let mut r = wsload_report::stored::decode(stored)
            .map_err(|source| SummaryError::Parse { index, source })?;
        if let Some(c) = clock {
            r.on_conductor_clock(c);
        }
        match self.merged.as_mut() {
            None => self.merged = Some(r),
            Some(m) => m
                .merge(&r)
                .map_err(|source| SummaryError::Merge { index, source })?,
        }
        self.shards += 1;
        Ok(())
    }

    /// How many results were added.
    pub fn shards(&self) -> usize {
        self.shards
    }

    pub fn finish(self) -> Result<RunResult, SummaryError> {
        self.merged.ok_or(SummaryError::Empty)
    }
}

/// Completes the merge of every shard's result with what only the conductor knows
/// (`received[i]`: what every server replica counted during cell i; connectionLimit's probes
/// and limit) and judges the spec's thresholds once, over it all.
pub fn summarize(
    spec: &LoadTestSpec,
    mut merged: RunResult,
    received: &[Option<u64>],
    conductor: &Conductor,
) -> Result<Summary, SummaryError> {
    // Thresholds come from the spec the operator holds, not from what a shard echoed back.
    merged.thresholds = spec.thresholds.clone();
    // Cells past the recorded ones (a run cut short) keep no server count: shards never read
    // one.
    for c in &mut merged.cells {
        c.server_received = None;
        c.compute();
    }
    wsload_control::assemble::complete(&mut merged, received, conductor);
    let mut tiers: Vec<TierFigures> = merged.cells.iter().map(tier).collect();
    let mut thresholds = merged
        .verdict
        .iter()
        .flat_map(|v| &v.checks)
        .map(|c| ThresholdResult {
            threshold: if merged.cells.len() > 1 {
                format!("{} [{}]", c.threshold, c.cell)
            } else {
                c.threshold.clone()
            },
            actual: c.actual,
            pass: c.passed,
            reason: c
                .reason
                .as_deref()
                .map(|why| crate::text::truncate(why, MAX_REASON_BYTES)),
        })
        .collect::<Vec<_>>();
    let verdict = merged.verdict.as_ref().map(|v| {
        if v.passed {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    });
    // A check that failed for want of a figure says so: `loss < 1% (not measured: 0 pings
    // were sent)`.
    let failed: Vec<String> = thresholds
        .iter()
        .filter(|t| !t.pass)
        .map(|t| match &t.reason {
            Some(why) => format!("{} ({why})", t.threshold),
            None => t.threshold.clone(),
        })
        .collect();
    let unmeasured: Vec<String> = merged
        .verdict
        .iter()
        .flat_map(|v| &v.unmeasured)
        .map(|u| format!("[{}] {}", u.cell, u.missing))
        .collect();
    let verdict_message = match verdict {
        _ if !unmeasured.is_empty() => {
            format!("measured nothing: {}", crate::text::listed(&unmeasured, 10))
        }
        None => "no thresholds".to_string(),
        Some(Verdict::Pass) => format!("all {} threshold checks passed", thresholds.len()),
        Some(Verdict::Fail) => format!(
            "{} of {} threshold checks failed: {}",
            failed.len(),
            thresholds.len(),
            crate::text::listed(&failed, 10)
        ),
    };
    // Status lists so much and no more; the merged result holds every check and tier.
    thresholds.sort_by_key(|t| t.pass);
    let thresholds_omitted = omit_past(&mut thresholds, MAX_LISTED);
    let tiers_omitted = omit_past(&mut tiers, MAX_LISTED);
    // The headline figures come from the largest tier, the one the test is about.
    let headline = merged.cells.iter().max_by_key(|c| c.connections);
    let achieved_rate = headline.and_then(headline_rate);
    let p99 = headline.and_then(|c| headline_p99(&c.figures));
    let (findings, findings_omitted) = findings(&merged);
    let report = wsload_report::stored::compress(wsload_report::html(&merged).as_bytes())
        .map_err(SummaryError::Serialize)?;
    let merged = wsload_report::stored::encode(&merged).map_err(SummaryError::Serialize)?;
    Ok(Summary {
        tiers,
        tiers_omitted,
        thresholds,
        thresholds_omitted,
        verdict,
        verdict_message,
        achieved_rate,
        p99,
        findings,
        findings_omitted,
        merged,
        report,
    })
}

/// The merged result's findings for status, as the report prints them (the servers' counts
/// completed first: some findings judge them): the first [`MAX_FINDINGS`], each cut at
/// [`MAX_FINDING_BYTES`], and how many more there are.
fn findings(merged: &RunResult) -> (Vec<String>, u32) {
    let mut all: Vec<String> = wsload_report::findings(merged)
        .iter()
        .map(|f| crate::text::truncate(&f.to_string(), MAX_FINDING_BYTES))
        .collect();
    let omitted = omit_past(&mut all, MAX_FINDINGS);
    (all, omitted)
}

/// Cuts `list` to `max` entries; how many went.
fn omit_past<T>(list: &mut Vec<T>, max: usize) -> u32 {
    let omitted = list.len().saturating_sub(max);
    list.truncate(max);
    u32::try_from(omitted).unwrap_or(u32::MAX)
}

/// The rate column: a fan-out's deliveries, any other scenario's messages sent or received.
fn headline_rate(c: &CellResult) -> Option<String> {
    if let Some(f) = &c.figures.fanout {
        return (f.deliveries_per_sec > 0.0)
            .then(|| format!("{} deliveries/s", wsload_report::num(f.deliveries_per_sec)));
    }
    let f = &c.figures;
    Some(f.sent_per_sec.max(f.received_per_sec))
        .filter(|r| *r > 0.0)
        .map(wsload_report::human_rate)
}

/// The P99 column: a fan-out's delivery latency, the round trip's, or, where the scenario
/// times none (storms, throughput saturation), the handshake's, marked so that nobody reads
/// it as a round trip.
fn headline_p99(f: &Figures) -> Option<String> {
    if let Some(fanout) = f.fanout.as_ref().filter(|f| f.latency.count > 0) {
        Some(format!(
            "{} delivery",
            wsload_report::ms(fanout.latency.p99)
        ))
    } else if f.rtt.count > 0 {
        Some(wsload_report::ms(f.rtt.p99))
    } else if f.connect.count > 0 {
        Some(format!("{} connect", wsload_report::ms(f.connect.p99)))
    } else {
        None
    }
}

fn pct(p: &ReportPercentiles) -> Option<Percentiles> {
    (p.count > 0).then_some(Percentiles {
        p50: p.p50 * 1e3,
        p90: p.p90 * 1e3,
        p99: p.p99 * 1e3,
        p999: p.p999 * 1e3,
        max: p.max * 1e3,
    })
}

fn tier(c: &CellResult) -> TierFigures {
    let f = &c.figures;
    let counts = &c.measure.counts;
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for (prefix, map) in [
        ("connect", serde_json::to_value(&counts.failed)),
        ("dropped", serde_json::to_value(&counts.dropped)),
    ] {
        if let Ok(serde_json::Value::Object(m)) = map {
            for (k, v) in m {
                if let Some(n) = v.as_u64().filter(|n| *n > 0) {
                    errors.insert(format!("{prefix}/{k}"), n);
                }
            }
        }
    }
    TierFigures {
        label: c.label.clone(),
        connections: c.connections,
        messages_per_second: f.sent_per_sec,
        bytes_per_second: f.bytes_sent_per_sec,
        connects_per_second: f.connect_rate,
        connected: counts.connected,
        survived: counts.survived,
        survival: (counts.connected > 0).then_some(f.survival),
        connect_seconds: c.connect_secs,
        connect: pct(&f.connect),
        rtt: pct(&f.rtt),
        rtt_raw: pct(&f.rtt_raw),
        errors,
        loss: (counts.expected > 0).then_some(f.loss),
        delivery: f.delivery,
        fanout: f.fanout.as_ref().map(fanout_tier),
        reconnect: c
            .measure
            .reconnect
            .as_ref()
            .map(|r| reconnect_tier(r, f.fanout.is_some())),
    }
}

/// A tier's reconnect figures for status: every window summed, the histograms merged; a
/// fanout's gaps too.
fn reconnect_tier(r: &wsload_report::reconnect::Reconnects, fanout: bool) -> ReconnectTier {
    let mut downtime = wsload_report::hist::Hist::new();
    let mut t = ReconnectTier::default();
    let mut all_back: Option<u64> = None;
    for (i, s) in r.storms.iter().enumerate() {
        t.dropped += s.dropped;
        t.never_back += s.never_back();
        t.peak_attempts_per_second = t
            .peak_attempts_per_second
            .max(r.peak_attempts(s.from_ms, r.window_end(i)));
        if !s.what.is_empty() {
            let accepts = r.peak_server_accepts(s.from_ms, r.window_end(i));
            t.peak_server_accepts_per_second = t.peak_server_accepts_per_second.max(accepts);
        }
        downtime.add(&s.downtime);
        if s.reconnected > 0 && s.never_back() == 0 {
            all_back = Some(all_back.unwrap_or(0).max(s.last_back_ms));
        }
    }
    t.downtime_p99 = (!downtime.is_empty()).then(|| downtime.percentile(99.0) * 1e3);
    t.all_back_after = all_back.map(|v| v as f64);
    if fanout {
        t.gaps_of_dropped = Some(r.storms.iter().map(|s| s.gaps).sum());
        t.gaps_of_undropped = Some(r.gaps_undropped);
        let recovered: u64 = r.storms.iter().map(|s| s.recovered).sum();
        t.recovered = (recovered > 0).then_some(recovered);
    }
    t
}

/// A fan-out tier's figures for status: rates, completeness and latency, no per-topic lists.
fn fanout_tier(f: &wsload_report::fanout_figures::FanoutFigures) -> FanoutTier {
    let timed = (f.latency.count > 0).then_some(&f.latency);
    FanoutTier {
        deliveries_per_second: f.deliveries_per_sec,
        completeness: f.completeness,
        gaps: f.gaps,
        duplicates: f.duplicates,
        out_of_order: f.out_of_order,
        p50: timed.map(|l| l.p50 * 1e3),
        p99: timed.map(|l| l.p99 * 1e3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_report::fixtures::shard;

    fn spec(yaml: &str) -> LoadTestSpec {
        wsload_spec::yaml::parse(yaml).expect("spec")
    }

    #[test]
    fn a_fanout_tier_shows_its_deliveries_in_status() {
        let s = spec(
            "target: {server: {profile: pubsub}}\nscenario: fanout\nconnections: [100]\nthresholds: ['gaps == 0']\n",
        );
        let mut r = wsload_report::fixtures::fanout();
        r.shard_count = 1;
        r.shards = vec![0];
        let merged = merge(&[(0, &r)]).expect("merge");
        let sum = summary(&s, merged, &[None]);
        let f = sum.tiers[0].fanout.expect("fanout figures");
        assert_eq!(f.deliveries_per_second, 9_999.5);
        assert_eq!((f.gaps, f.duplicates, f.out_of_order), (5, 2, 3));
        assert_eq!(f.completeness, Some(0.999_95));
        let (p50, p99) = (f.p50.expect("p50"), f.p99.expect("p99"));
        assert!(
            (5.0..6.0).contains(&p50) && (9.0..10.1).contains(&p99),
            "{f:?}"
        );
        assert_eq!(sum.achieved_rate.as_deref(), Some("10000 deliveries/s"));
        assert!(
            sum.p99
                .as_deref()
                .is_some_and(|p| p.ends_with(" ms delivery")),
            "{:?}",
            sum.p99
        );
        assert_eq!(sum.verdict, Some(Verdict::Fail), "{}", sum.verdict_message);
        let yaml = serde_json::to_value(&sum.tiers[0]).expect("json");
        assert_eq!(yaml["fanout"]["deliveriesPerSecond"], 9_999.5);
        assert_eq!(yaml["fanout"]["outOfOrder"], 3);
        // An echo tier has none.
        let echo = tier(&shard(0, 10, 1, 1).cells[0]);
        assert!(echo.fanout.is_none());
        assert!(serde_json::to_string(&echo).is_ok_and(|j| !j.contains("fanout")));
    }

    #[test]
    fn a_tier_that_reconnected_shows_it_in_status_over_every_window_and_shard() {
        use std::time::Duration;
        let windows = [(5_000, "kill 1 replica at 5s".to_string())];
        let shard_with = |index: u32, back_ms: u64| {
            let mut r = shard(index, 10, 1, 1);
            let mut rc =
                wsload_report::reconnect::Reconnects::new("immediate".into(), false, &windows);
            for i in 0..50 {
                rc.dropped(1);
                rc.attempt(1, 5_000 + i);
                rc.failed(1, wsload_report::measure::ConnectError::Refused);
                rc.attempt(1, 5_100 + i);
                rc.back(
                    1,
                    back_ms,
                    Duration::from_millis(back_ms - 5_000),
                    Duration::from_millis(2),
                );
            }
            // One that never came back, dropped before the kill.
            rc.dropped(0);
            r.cells[0].measure.reconnect = Some(rc);
            r
        };
        let (a, b) = (shard_with(0, 5_200), shard_with(1, 5_900));
        let merged = merge(&[(0, &a), (1, &b)]).expect("merge");
        let t = tier(&merged.cells[0]).reconnect.expect("reconnect figures");
        assert_eq!((t.dropped, t.never_back), (102, 2));
        // 2 x 50 attempts begun within 100 ms of each other: 1,000 a second at the peak.
        assert_eq!(t.peak_attempts_per_second, 1_000);
        // The window of the kill: all back 900 ms after it; the one before it never was.
        assert_eq!(t.all_back_after, Some(900.0));
        let p99 = t.downtime_p99.expect("downtime");
        assert!((895.0..=905.0).contains(&p99), "{t:?}");
        let json = serde_json::to_value(tier(&merged.cells[0])).expect("json");
        assert_eq!(json["reconnect"]["neverBack"], 2);
        assert_eq!(json["reconnect"]["peakAttemptsPerSecond"], 1_000);
        assert!(tier(&shard(0, 10, 1, 1).cells[0]).reconnect.is_none());
    }

    #[test]
    fn the_p99_column_says_when_it_is_the_handshake() {
        let mut f = Figures::default();
        assert_eq!(headline_p99(&f), None);
        f.connect.count = 5;
        f.connect.p99 = 0.002;
        assert_eq!(headline_p99(&f).as_deref(), Some("2.00 ms connect"));
        f.rtt.count = 5;
        f.rtt.p99 = 0.0005;
        assert_eq!(headline_p99(&f), Some(wsload_report::ms(0.0005)));
    }

    /// A two-shard echo test of 200 connections judged by `thresholds` (a YAML list's items).
    fn echo_of_two(thresholds: &str) -> LoadTestSpec {
        spec(&format!(
            "target: {{server: {{}}}}\nscenario: echo\nconnections: [200]\nshards: 2\nthresholds: [{thresholds}]\n"
        ))
    }

    /// `merged` summed up for `s`, the servers having counted `received` in each cell.
    fn summary(s: &LoadTestSpec, merged: RunResult, received: &[Option<u64>]) -> Summary {
        summarize(s, merged, received, &Conductor::new(s)).expect("summary")
    }

    /// Folds results as the operator does, each gzip-compressed as stored.
    fn merge(results: &[(u32, &RunResult)]) -> Result<RunResult, SummaryError> {
        let mut m = Merging::default();
        for (i, r) in results {
            m.add(*i, &wsload_report::stored::encode(r).expect("encode"), None)?;
        }
        m.finish()
    }

    /// The fixture's shards time their echoes but send none expecting an answer one by one
    /// (`expected` 0): their loss was never measured, and status says so beside the check.
    #[test]
    fn a_threshold_never_measured_fails_in_status_with_its_reason() {
        let s = echo_of_two(r#""loss < 1%", "rtt.p99 < 5ms""#);
        let merged = merge(&[(0, &shard(0, 100, 1, 1)), (1, &shard(1, 100, 1, 2))]).expect("merge");
        let sum = summary(&s, merged, &[]);
        assert_eq!(sum.verdict, Some(Verdict::Fail));
        let why = "not measured: 0 messages expecting an answer were sent";
        assert_eq!(
            sum.thresholds,
            [
                ThresholdResult {
                    threshold: "loss < 1%".into(),
                    actual: None,
                    pass: false,
                    reason: Some(why.into()),
                },
                ThresholdResult {
                    threshold: "rtt.p99 < 5ms".into(),
                    actual: sum.thresholds[1].actual,
                    pass: true,
                    reason: None,
                },
            ]
        );
        assert_eq!(
            sum.verdict_message,
            format!("1 of 2 threshold checks failed: loss < 1% ({why})")
        );
        let json = serde_json::to_value(&sum.thresholds).expect("json");
        assert_eq!(json[0]["reason"], why);
        assert!(json[1].get("reason").is_none(), "{json}");
    }

    #[test]
    fn summarize_merges_exactly_and_judges_with_the_spec_thresholds() {
        // 2000 samples at 1 ms and 1000 at 10 ms: p99 of the union is 10 ms, which fails
        // "rtt.p99 < 5ms" (the spec's), although shard 0 alone would pass.
        let a = shard(0, 2000, 1, 1_000_000);
        let b = shard(1, 1000, 10, 1_000_500);
        let s = echo_of_two(r#""rtt.p99 < 5ms", "errors < 5%""#);
        let merged = merge(&[(0, &a), (1, &b)]).expect("merge");
        let sum = summary(&s, merged, &[]);
        assert_eq!(sum.verdict, Some(Verdict::Fail));
        let failed: Vec<_> = sum.thresholds.iter().filter(|t| !t.pass).collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].threshold, "rtt.p99 < 5ms");
        assert!(sum.verdict_message.contains("rtt.p99 < 5ms"));
        let t = &sum.tiers[0];
        let rtt = t.rtt.as_ref().expect("rtt");
        assert!(
            (rtt.p50 - 1.0).abs() < 0.01 && (rtt.p99 - 10.0).abs() < 0.1,
            "{rtt:?}"
        );
        assert_eq!(t.errors.get("connect/refused"), Some(&2), "{:?}", t.errors);
        assert_eq!(
            sum.p99.as_deref(),
            Some(wsload_report::ms(rtt.p99 / 1e3).as_str())
        );
        let merged = wsload_report::stored::decode(&sum.merged).expect("merged");
        assert_eq!(merged.cells[0].measure.counts.sent, 3000);
        assert_eq!(merged.shards, [0, 1]);
        // A broken shard result is named, not skipped.
        let mut m = Merging::default();
        m.add(0, &wsload_report::stored::encode(&a).expect("encode"), None)
            .expect("add");
        let err = m.add(3, b"{}", None).expect_err("not a result");
        assert!(err.to_string().starts_with("shard 3"), "{err}");
        assert!(matches!(
            Merging::default().finish(),
            Err(SummaryError::Empty)
        ));
    }

    /// A test in which nothing connected fails in status although it has no thresholds,
    /// saying which cell measured nothing and why (the verdict `wsload run` exits 4 for).
    #[test]
    fn a_test_that_connected_nothing_fails_without_thresholds() {
        let refused = |index| {
            let mut r = shard(index, 0, 1, 1_000_000);
            let m = &mut r.cells[0].measure;
            m.counts = Default::default();
            m.hists.rtt = Default::default();
            m.counts.attempted = 100;
            for _ in 0..100 {
                m.counts.fail(wsload_report::measure::ConnectError::Refused);
            }
            r
        };
        let (a, b) = (refused(0), refused(1));
        let s = echo_of_two("");
        let sum = summary(&s, merge(&[(0, &a), (1, &b)]).expect("merge"), &[]);
        assert_eq!(sum.verdict, Some(Verdict::Fail));
        assert!(sum.thresholds.is_empty());
        assert_eq!(
            sum.verdict_message,
            "measured nothing: [100] no connection was established (200 attempted: refused x200)"
        );
    }

    /// Delivery is every replica's count (summed by the conductor) over every shard's sends,
    /// judged once on the merge.
    #[test]
    fn delivery_is_the_summed_count_over_the_summed_sends() {
        // Each fixture shard sends n + 10 with warm-up: 2010 + 1010 in all.
        let a = shard(0, 2000, 1, 1_000_000);
        let b = shard(1, 1000, 1, 1_000_500);
        let s = echo_of_two(r#""delivery > 99%""#);
        let both = || merge(&[(0, &a), (1, &b)]).expect("merge");
        let all = summary(&s, both(), &[Some(3020)]);
        assert_eq!(all.tiers[0].delivery, Some(1.0));
        assert_eq!(all.verdict, Some(Verdict::Pass));
        let short = summary(&s, both(), &[Some(2010)]);
        let d = short.tiers[0].delivery.expect("delivery");
        assert!((d - 2010.0 / 3020.0).abs() < 1e-9, "{d}");
        assert_eq!(short.verdict, Some(Verdict::Fail));
        let unknown = summary(&s, both(), &[None]);
        assert_eq!(unknown.tiers[0].delivery, None);
    }

    /// The merge of many shards is about one shard's size: histograms add, they do not
    /// append.
    #[test]
    fn the_merge_of_many_shards_stays_about_one_shards_size() {
        let one = shard(0, 2000, 3, 1_000_000);
        let one_size = wsload_report::stored::encode(&one).expect("encode").len();
        let mut m = Merging::default();
        for i in 0..200 {
            let mut r = one.clone();
            r.shards = vec![i];
            r.shard_info.iter_mut().for_each(|s| s.index = i);
            m.add(i, &wsload_report::stored::encode(&r).expect("encode"), None)
                .expect("add");
        }
        let merged = m.finish().expect("merged");
        assert_eq!(merged.cells[0].measure.counts.sent, 200 * 2000);
        let merged_size = wsload_report::stored::encode(&merged)
            .expect("encode")
            .len();
        // Only the per-shard list (index, skew) grows with the count.
        assert!(
            merged_size < one_size + 200 * 64,
            "{merged_size} bytes merged vs {one_size} for one shard"
        );
    }

    /// Status lists the merged result's findings as the report prints them: here the fixture's
    /// refusals, and the listen overflows the kernel counted in each shard pod's namespace,
    /// summed over both.
    #[test]
    fn status_lists_the_findings_of_the_merged_result() {
        use wsload_report::fixtures::kernel;
        let mut a = shard(0, 2000, 1, 1_000_000);
        a.cells[0].kernel = vec![kernel(0, 4026532001, 3)];
        let mut b = shard(1, 1000, 1, 1_000_500);
        b.cells[0].kernel = vec![kernel(1, 4026532002, 4)];
        let s = echo_of_two("");
        let sum = summary(&s, merge(&[(0, &a), (1, &b)]).expect("merge"), &[]);
        let mut st = LoadTestStatus::default();
        sum.apply(&mut st);
        assert_eq!(
            st.findings,
            [
                "finding [100]: connections were refused: nothing listening, or the server's accept queue overflowed (refused: 2 of 200 attempts)",
                "finding [100]: the kernel dropped connections at a full accept queue (ListenOverflows): the server accepted more slowly than connections arrived; raise its listen backlog and net.core.somaxconn, add server replicas, or open connections more slowly (a smaller connect.batchSize, a longer connect.batchInterval) (TcpExtListenOverflows +7, TcpExtListenDrops +7 in 2 namespaces (net:[4026532001] of shard 0, net:[4026532002] of shard 1))",
            ]
        );
        assert_eq!(st.findings_omitted, 0);
        let json = serde_json::to_value(&st).expect("json");
        assert_eq!(json["findings"].as_array().map(Vec::len), Some(2));
        assert!(json.get("findingsOmitted").is_none(), "{json}");
    }

    /// Past [`MAX_FINDINGS`] the rest are counted; a finding past [`MAX_FINDING_BYTES`] is cut.
    #[test]
    fn status_findings_are_capped_in_number_and_length() {
        let mut r = shard(0, 100, 1, 1_000_000);
        let one = r.cells[0].clone();
        r.cells = (0..12)
            .map(|i| {
                let mut c = one.clone();
                c.label = if i == 0 {
                    "x".repeat(2000)
                } else {
                    format!("cell {i}")
                };
                c
            })
            .collect();
        let (listed, omitted) = findings(&r);
        assert_eq!((listed.len(), omitted), (MAX_FINDINGS, 2));
        assert_eq!(listed[0].len(), MAX_FINDING_BYTES + "...".len());
        assert!(listed[0].ends_with("xx..."), "{}", listed[0]);
        assert_eq!(
            listed[1],
            "finding [cell 1]: connections were refused: nothing listening, or the server's accept queue overflowed (refused: 1 of 100 attempts)"
        );
    }

    /// Status at the largest spec the schema admits (5,000 shards, 2,048 cells, 32
    /// thresholds each), every shard collected with its clock probed as in any real run, stays
    /// below etcd's 1.5 MiB object limit, with room left for the object's spec and metadata.
    #[test]
    fn status_stays_bounded_at_the_largest_spec() {
        use wsload_spec::status::{CellStatus, DisruptionStatus, Percentiles as P, ShardState};
        let s = spec(&format!(
            "target: {{server: {{}}}}\nscenario: echo\nconnections: [200]\nshards: {}\n",
            wsload_spec::cel::MAX_SHARDS
        ));
        let mut st = LoadTestStatus {
            shards: crate::shard_entries::pending(&s),
            ..Default::default()
        };
        for i in 0..wsload_spec::cel::MAX_SHARDS {
            // Every shard failed with a long reason of its own: the reasons' budget holds.
            let why = format!("shard {i}: {}", "x".repeat(1000));
            crate::shard_entries::set(&mut st.shards, i, ShardState::Failed, Some(why));
        }
        for e in &mut st.shards {
            // The longest state's name, for the largest entry.
            e.state = ShardState::Collected;
            e.started_at_micros = Some(1_764_000_000_123_456);
            // A node's clock a day off, probed over a slow round trip.
            e.clock = Some(wsload_spec::status::ShardClock {
                offset_micros: -86_400_000_123,
                uncertainty_micros: 1_234_567,
                samples: 16,
            });
        }
        let cells = wsload_spec::status::MAX_CELLS;
        st.cells = (0..cells)
            .map(|i| CellStatus {
                index: u32::try_from(i).expect("index"),
                label: format!("100000 conns x 1 MiB msgpack-deflate {i}"),
                connections: 100_000,
                start_at_millis: 1_764_000_000_123,
                // Only the first MAX_MEASURE_CELLS keep their measure instant once done.
                measure_at_millis: (i < wsload_spec::status::MAX_MEASURE_CELLS)
                    .then_some(1_764_000_060_123),
                done: true,
                shards: 5000,
                attempted: 100_000,
                failed: 1,
                sent: 123_456_789,
                server_received: Some(123_456_789),
                // Only a fanout's cells keep topic counters: one per tier (below).
                server_topics: None,
                // Only the first MAX_CONNECTION_CELLS keep connection counters (below).
                server_connections: None,
                started_at_millis: Some(1_764_000_000_124),
                start_skew_millis: Some(12.345),
                // Kill and restart disruptions need one shard (validation): sized below.
                disruptions: Vec::new(),
            })
            .collect();
        for c in st.cells.iter_mut().take(wsload_spec::cel::MAX_TIERS) {
            c.server_topics = Some(wsload_spec::fanout::ServerTopics {
                published: 123_456_789,
                fanout: 123_456_789_012,
                delivered: 123_456_789_012,
                dropped_slow_consumer: 123_456_789,
                dropped_closed: 123_456_789,
            });
        }
        // Every reason wsload-server counts, at counts of a long run, on the most replicas.
        let counted = |all: &[&str]| {
            all.iter()
                .map(|r| (r.to_string(), 123_456_789_012))
                .collect()
        };
        let connections = wsload_spec::server_connections::ServerConnections {
            replicas: wsload_spec::cel::MAX_SERVER_REPLICAS,
            accepted: 123_456_789_012,
            rejected: counted(&wsload_contract::server_metrics::rejected::ALL),
            closed: counted(&wsload_contract::server_metrics::closed::ALL),
            accepted_min: Some(123_456_789),
            accepted_max: Some(123_456_789),
            busiest: Some(format!(
                "{}-server-999",
                "t".repeat(wsload_spec::cel::MAX_NAME_LEN)
            )),
        };
        st.server_connections_baseline = Some(connections.clone());
        for c in st
            .cells
            .iter_mut()
            .take(wsload_spec::status::MAX_CONNECTION_CELLS)
        {
            c.server_connections = Some(connections.clone());
        }
        let p = P {
            p50: 1.234,
            p90: 2.345,
            p99: 3.456,
            p999: 4.567,
            max: 5.678,
        };
        let tier = TierFigures {
            label: "100000 conns x 1 MiB msgpack-deflate".into(),
            connections: 100_000,
            messages_per_second: 1_234_567.8,
            bytes_per_second: 1.2e9,
            connects_per_second: 12_345.6,
            connected: 100_000,
            survived: 100_000,
            survival: Some(1.0),
            connect_seconds: 12.3,
            connect: Some(p),
            rtt: Some(p),
            rtt_raw: Some(p),
            errors: BTreeMap::from([("connect/refused".to_string(), 12)]),
            loss: Some(0.0),
            delivery: Some(1.0),
            fanout: Some(FanoutTier {
                deliveries_per_second: 12_345_678.9,
                completeness: Some(0.999_999),
                gaps: 123_456,
                duplicates: 12,
                out_of_order: 34,
                p50: Some(1.234),
                p99: Some(3.456),
            }),
            // A fanout's subscribers may reconnect: a tier can hold both.
            reconnect: Some(ReconnectTier {
                dropped: 100_000_000,
                never_back: 1,
                peak_attempts_per_second: 1_000_000_000,
                peak_server_accepts_per_second: Some(1_000_000_000),
                downtime_p99: Some(12_345.678),
                all_back_after: Some(123_456.0),
                gaps_of_dropped: Some(123_456_789_012),
                gaps_of_undropped: Some(123_456_789_012),
                recovered: Some(123_456_789_012),
            }),
        };
        let mut tiers = vec![tier; cells];
        let mut checks = vec![
            ThresholdResult {
                threshold: format!("{:>128}", "rtt.p99 < 5ms [100000 conns x 1 MiB]"),
                actual: None,
                pass: false,
                reason: Some("r".repeat(MAX_REASON_BYTES + 3)),
            };
            cells * wsload_spec::cel::MAX_THRESHOLDS
        ];
        st.tiers_omitted = omit_past(&mut tiers, MAX_LISTED);
        st.thresholds_omitted = omit_past(&mut checks, MAX_LISTED);
        st.tiers = tiers;
        st.thresholds = checks;
        st.findings = vec!["x".repeat(MAX_FINDING_BYTES + 3); MAX_FINDINGS];
        st.findings_omitted = 12_345;
        let bytes = serde_json::to_vec(&st).expect("json").len();
        let shards_only = serde_json::to_vec(&st.shards).expect("json").len();
        eprintln!("largest status: {bytes} bytes, of which shards[] {shards_only}");
        // etcd's default --max-request-bytes; the spec and metadata (a few KB) need the rest.
        let etcd_limit = 1536 * 1024;
        assert!(bytes < etcd_limit - 64 * 1024, "status of {bytes} bytes");
        assert_eq!(st.tiers_omitted as usize, cells - MAX_LISTED);

        // Kill and restart disruptions run with one shard: the most they record is 16 per
        // cell on the first MAX_MEASURE_CELLS cells, 16 replicas each once the cell is done
        // (reconcile::disrupt), and in the cell under way the replicas held down and their
        // pods' UIDs: at most every replica but one, as a kill picks only replicas up.
        let replicas = wsload_spec::cel::MAX_SERVER_REPLICAS;
        st.shards.truncate(1);
        let entry = |index: u32, replicas: Vec<u32>| {
            DisruptionStatus {
            index,
            began_at_millis: 1_764_000_060_123,
            replicas,
            deleted_pods: Vec::new(),
            ready_at_millis: Some(1_764_000_060_123),
            generation: Some(1_764_000_060_123),
            ended_at_millis: Some(1_764_000_060_123),
            message: "replicas [0, 1, 2] deleted with no grace period 12 ms after the instant; created again and ready 2s 345ms after; the cell ended first".into(),
        }
        };
        for c in st
            .cells
            .iter_mut()
            .take(wsload_spec::status::MAX_MEASURE_CELLS)
        {
            c.disruptions = (0..16).map(|i| entry(i, (0..16).collect())).collect();
        }
        if let Some(last) = st.cells.last_mut() {
            last.disruptions = (0..16).map(|i| entry(i, vec![i])).collect();
            last.disruptions[0].replicas = (0..replicas - 1).collect();
            last.disruptions[0].deleted_pods =
                vec!["0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into(); replicas as usize - 1];
        }
        let bytes = serde_json::to_vec(&st).expect("json").len();
        eprintln!("largest status with disruptions: {bytes} bytes");
        assert!(bytes < etcd_limit - 64 * 1024, "status of {bytes} bytes");
    }
}
