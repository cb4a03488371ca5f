//! Shares and results: how the load is split (recorded in status before any shard runs), and
//! how the shards' results become the test's figures and verdict (merged with the same code as
//! `wsload merge`, so a cluster run and a local run of the same spec report alike).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;
use wsload_control::Conductor;
use wsload_report::{CellResult, Figures, Percentiles as ReportPercentiles, RunResult};
use wsload_spec::LoadTestSpec;
use wsload_spec::shares::{count_share, rate_share};
use wsload_spec::status::{
    LoadTestStatus, Percentiles, ShardState, ShardStatus, ThresholdResult, TierFigures, Verdict,
};

/// Every shard's share: its part of the largest tier and of the rate.
pub fn shares(test: &str, spec: &LoadTestSpec) -> Vec<ShardStatus> {
    let peak = wsload_spec::validate::peak_connections(spec);
    let rate = spec.rate.as_ref().and_then(|r| {
        r.messages_per_second
            .or_else(|| r.stages.iter().map(|s| s.target).reduce(f64::max))
    });
    (0..spec.shards)
        .map(|i| ShardStatus {
            index: i,
            pod: crate::names::shard(test, i),
            connections: count_share(peak, i, spec.shards),
            rate: rate.map(|r| rate_share(r, spec.shards)),
            state: ShardState::Pending,
            started_at: None::<Time>,
            reason: None,
            restarts: 0,
        })
        .collect()
}

/// What the shards' results add up to.
pub struct Summary {
    pub tiers: Vec<TierFigures>,
    pub thresholds: Vec<ThresholdResult>,
    pub verdict: Option<Verdict>,
    pub verdict_message: String,
    pub achieved_rate: Option<String>,
    pub p99: Option<String>,
    pub merged_json: String,
}

impl Summary {
    pub fn apply(&self, st: &mut LoadTestStatus) {
        st.tiers = self.tiers.clone();
        st.thresholds = self.thresholds.clone();
        st.verdict = self.verdict;
        st.achieved_rate = self.achieved_rate.clone();
        st.p99 = self.p99.clone();
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("shard {index}'s result is not a wsload result: {source}")]
    Parse {
        index: u32,
        source: serde_json::Error,
    },
    #[error("shard {index}'s result does not merge: {message}")]
    Merge { index: u32, message: String },
    #[error("cannot serialize the merged result: {0}")]
    Serialize(serde_json::Error),
}

/// Merges the shards' results (index, JSON) exactly, completes the merge with what only the
/// conductor knows (`received[i]`: what every server replica counted during cell i;
/// connectionLimit's probes and limit) and judges the spec's thresholds once, over it all.
pub fn summarize(
    spec: &LoadTestSpec,
    results: &[(u32, &String)],
    received: &[Option<u64>],
    conductor: &Conductor,
) -> Result<Summary, SummaryError> {
    let mut merged: Option<RunResult> = None;
    for (index, json) in results {
        let r: RunResult = serde_json::from_str(json).map_err(|source| SummaryError::Parse {
            index: *index,
            source,
        })?;
        match merged.as_mut() {
            None => merged = Some(r),
            Some(m) => m.merge(&r).map_err(|message| SummaryError::Merge {
                index: *index,
                message,
            })?,
        }
    }
    let Some(mut merged) = merged else {
        return Err(SummaryError::Merge {
            index: 0,
            message: "no results".into(),
        });
    };
    // Thresholds come from the spec the operator holds, not from what a shard echoed back.
    merged.thresholds = spec.thresholds.clone();
    // Cells past the recorded ones (a run cut short) keep no server count: shards never read
    // one.
    for c in &mut merged.cells {
        c.server_received = None;
        c.compute();
    }
    wsload_control::assemble::complete(&mut merged, received, conductor);
    let tiers: Vec<TierFigures> = merged.cells.iter().map(tier).collect();
    let thresholds = merged
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
        })
        .collect::<Vec<_>>();
    let verdict = merged.verdict.as_ref().map(|v| {
        if v.passed {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    });
    let failed: Vec<&str> = thresholds
        .iter()
        .filter(|t| !t.pass)
        .map(|t| t.threshold.as_str())
        .collect();
    let verdict_message = match verdict {
        None => "no thresholds".to_string(),
        Some(Verdict::Pass) => format!("all {} threshold checks passed", thresholds.len()),
        Some(Verdict::Fail) => format!("failed: {}", failed.join(", ")),
    };
    // The headline figures come from the largest tier, the one the test is about.
    let headline = merged.cells.iter().max_by_key(|c| c.connections);
    let achieved_rate = headline
        .map(|c| c.figures.sent_per_sec.max(c.figures.received_per_sec))
        .filter(|r| *r > 0.0)
        .map(wsload_report::human_rate);
    let p99 = headline.and_then(|c| headline_p99(&c.figures));
    let merged_json = serde_json::to_string(&merged).map_err(SummaryError::Serialize)?;
    Ok(Summary {
        tiers,
        thresholds,
        verdict,
        verdict_message,
        achieved_rate,
        p99,
        merged_json,
    })
}

/// The P99 column: the round trip's, or, where the scenario times none (storms, throughput
/// saturation), the handshake's, marked so that nobody reads it as a round trip.
fn headline_p99(f: &Figures) -> Option<String> {
    if f.rtt.count > 0 {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_report::fixtures::shard;

    fn spec(yaml: &str) -> LoadTestSpec {
        serde_yaml::from_str(yaml).expect("spec")
    }

    #[test]
    fn shares_split_the_largest_tier_and_the_rate_and_add_up() {
        let s = spec(
            "target: {server: {}}\nscenario: constantRate\nconnections: [10, 1001]\nshards: 4\nrate: {messagesPerSecond: 1000}\n",
        );
        let shares = shares("t", &s);
        let conns: Vec<u32> = shares.iter().map(|s| s.connections).collect();
        assert_eq!(conns, [251, 250, 250, 250]);
        assert!(shares.iter().all(|s| s.rate == Some(250.0)));
        assert_eq!(shares[3].pod, "t-shard-3");
        assert!(shares.iter().all(|s| s.state == ShardState::Pending));
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

    #[test]
    fn summarize_merges_exactly_and_judges_with_the_spec_thresholds() {
        // 2000 samples at 1 ms and 1000 at 10 ms: p99 of the union is 10 ms, which fails
        // "rtt.p99 < 5ms" (the spec's), although shard 0 alone would pass.
        let a = serde_json::to_string(&shard(0, 2000, 1, 1_000_000)).expect("json");
        let b = serde_json::to_string(&shard(1, 1000, 10, 1_000_500)).expect("json");
        let s = spec(
            "target: {server: {}}\nscenario: echo\nconnections: [200]\nshards: 2\nthresholds: [\"rtt.p99 < 5ms\", \"errors < 5%\"]\n",
        );
        let conductor = Conductor::new(&s);
        let sum = summarize(&s, &[(0, &a), (1, &b)], &[], &conductor).expect("summary");
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
        let merged: RunResult = serde_json::from_str(&sum.merged_json).expect("merged");
        assert_eq!(merged.cells[0].measure.counts.sent, 3000);
        // A broken shard result is named, not skipped.
        let bad = "{}".to_string();
        let err = summarize(&s, &[(0, &a), (3, &bad)], &[], &conductor)
            .err()
            .expect("error");
        assert!(err.to_string().starts_with("shard 3"), "{err}");
    }

    /// Delivery is every replica's count (summed by the conductor) over every shard's sends,
    /// judged once on the merge.
    #[test]
    fn delivery_is_the_summed_count_over_the_summed_sends() {
        // Each fixture shard sends n + 10 with warm-up: 2010 + 1010 in all.
        let a = serde_json::to_string(&shard(0, 2000, 1, 1_000_000)).expect("json");
        let b = serde_json::to_string(&shard(1, 1000, 1, 1_000_500)).expect("json");
        let s = spec(
            "target: {server: {}}\nscenario: echo\nconnections: [200]\nshards: 2\nthresholds: [\"delivery > 99%\"]\n",
        );
        let conductor = Conductor::new(&s);
        let all = summarize(&s, &[(0, &a), (1, &b)], &[Some(3020)], &conductor).expect("summary");
        assert_eq!(all.tiers[0].delivery, Some(1.0));
        assert_eq!(all.verdict, Some(Verdict::Pass));
        let short = summarize(&s, &[(0, &a), (1, &b)], &[Some(2010)], &conductor).expect("summary");
        let d = short.tiers[0].delivery.expect("delivery");
        assert!((d - 2010.0 / 3020.0).abs() < 1e-9, "{d}");
        assert_eq!(short.verdict, Some(Verdict::Fail));
        let unknown = summarize(&s, &[(0, &a), (1, &b)], &[None], &conductor).expect("summary");
        assert_eq!(unknown.tiers[0].delivery, None);
    }
}
