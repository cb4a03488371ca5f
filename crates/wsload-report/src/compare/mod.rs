//! Two results of one LoadTest compared cell by cell (`wsload compare BASE NEW`): each figure
//! side by side, its change, and a verdict that is more than a band around the base: a change
//! counts only when a statistical test puts it beyond the runs' own noise at the confidence
//! asked for *and* it is at least the minimum effect (with millions of samples a 1% shift is
//! significant, and irrelevant).
//!
//! - [`stats`]: the tests (a percentile's order-statistic interval, Welch's t on 1 s batch
//!   means of a rate, a two-proportion z-test of a share).
//! - [`text`]: the comparison as the terminal shows it.

pub mod stats;
pub mod text;

use crate::hist::Hist;
use crate::measure::Dropped;
use crate::result::{CellResult, RunResult};
use serde::Serialize;
use std::collections::BTreeMap;
use wsload_spec::Scenario;

/// What the user asks of a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The smallest relative change that counts (0.25: 25%; two runs of one Node echo server
    /// on a 2-core machine differed by up to 38% in their round trip's p99:
    /// bench/compare/README.md).
    pub min_effect: f64,
    /// Two-sided confidence of each test (0.99).
    pub confidence: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            min_effect: 0.25,
            confidence: 0.99,
        }
    }
}

/// A figure's, a cell's or the run's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Change {
    Same,
    Improved,
    Regressed,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Same => "Same",
            Change::Improved => "Improved",
            Change::Regressed => "Regressed",
        }
    }
}

/// What a figure measures, which way is better, and how it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    /// Seconds; lower is better.
    Latency,
    /// Per second; higher is better.
    Rate,
    /// A share of bad outcomes (0..1); lower is better.
    Failures,
}

/// One figure of one cell, in both runs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Figure {
    pub name: String,
    pub kind: Kind,
    pub base: f64,
    pub new: f64,
    /// New against base, relative (0.18: 18% more); `None` from a base of 0.
    pub change: Option<f64>,
    pub verdict: Change,
    /// What the verdict rests on: the test, its statistic or intervals (`intervals 1.18-1.22
    /// ms against 3.15-3.30 ms`), or why none could be made.
    pub evidence: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CellComparison {
    pub label: String,
    pub figures: Vec<Figure>,
    pub verdict: Change,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    pub min_effect: f64,
    pub confidence: f64,
    pub cells: Vec<CellComparison>,
    /// Regressed when any cell is, else Improved when any is, else Same.
    pub verdict: Change,
}

/// Why two results cannot be compared.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Incomparable {
    #[error("the scenarios differ: base {base}, new {new}")]
    Scenario { base: String, new: String },
    #[error(
        "the cells differ: base has {} ({}), new has {} ({}); compare runs of the same connections, sizes and rates",
        base.len(), base.join(", "), new.len(), new.join(", ")
    )]
    Cells { base: Vec<String>, new: Vec<String> },
    #[error(
        "cell {label} differs: base {base}, new {new}; compare runs of the same connections, sizes, formats and rates"
    )]
    Cell {
        label: String,
        base: String,
        new: String,
    },
    #[error("{which} measured nothing (no cell): a run that measured nothing is no baseline")]
    Empty { which: &'static str },
    #[error(
        "connectionLimit results are not compared yet: their cells are the search's probes, which differ as soon as the limit does; compare their limits (wsload report) or hold the limit found with sustainedHold and compare those"
    )]
    Search,
}

/// Percentiles compared, with the names the tables give them.
const PERCENTILES: [(f64, &str); 4] =
    [(50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p99.9")];
/// A percentile is tested only with at least this many samples beyond it on each side: an
/// interval's edge otherwise rests on one or two values (the p90 of 10 connections is the
/// slowest but one).
const BEYOND: u64 = 10;
/// A rate's batches: the timeline's steps summed over this long. Steps of 100 ms follow each
/// other too closely to be independent samples of the rate; seconds are closer to it.
const BATCH_MS: u32 = 1000;

/// Compares `new` with `base`, cell by cell.
pub fn compare(
    base: &RunResult,
    new: &RunResult,
    settings: &Settings,
) -> Result<Comparison, Incomparable> {
    if base.scenario != new.scenario {
        return Err(Incomparable::Scenario {
            base: base.scenario.as_str().to_string(),
            new: new.scenario.as_str().to_string(),
        });
    }
    if base.scenario == Scenario::ConnectionLimit {
        return Err(Incomparable::Search);
    }
    for (which, r) in [("base", base), ("new", new)] {
        if r.cells.is_empty() {
            return Err(Incomparable::Empty { which });
        }
    }
    let labels = |r: &RunResult| r.cells.iter().map(|c| c.label.clone()).collect::<Vec<_>>();
    if labels(base) != labels(new) {
        return Err(Incomparable::Cells {
            base: labels(base),
            new: labels(new),
        });
    }
    for (b, n) in base.cells.iter().zip(&new.cells) {
        let shape = |c: &CellResult| {
            format!(
                "{} connections, {} B {}, {} msg/s",
                c.connections, c.size, c.format, c.target_rate
            )
        };
        if shape(b) != shape(n) {
            return Err(Incomparable::Cell {
                label: b.label.clone(),
                base: shape(b),
                new: shape(n),
            });
        }
    }
    let connects = base.scenario == Scenario::ConnectionStorm;
    let cells: Vec<CellComparison> = base
        .cells
        .iter()
        .zip(&new.cells)
        .map(|(b, n)| cell(b, n, connects, settings))
        .collect();
    let verdict = overall(cells.iter().map(|c| c.verdict));
    Ok(Comparison {
        min_effect: settings.min_effect,
        confidence: settings.confidence,
        cells,
        verdict,
    })
}

/// Regressed over Improved over Same.
fn overall(verdicts: impl Iterator<Item = Change>) -> Change {
    verdicts.max().unwrap_or(Change::Same)
}

fn cell(b: &CellResult, n: &CellResult, connects: bool, s: &Settings) -> CellComparison {
    let mut figures = Vec::new();
    let (bc, nc) = (&b.measure.counts, &n.measure.counts);
    if bc.received > 0 || nc.received > 0 {
        figures.push(rate(
            "received/s",
            (b.figures.received_per_sec, n.figures.received_per_sec),
            (batches(b), batches(n)),
            s,
        ));
    }
    let (bh, nh) = (&b.measure.hists, &n.measure.hists);
    for (name, hb, hn) in [
        ("rtt", &bh.rtt, &nh.rtt),
        ("delivery", &bh.fanout, &nh.fanout),
        ("connect", &bh.connect, &nh.connect),
    ] {
        // How long connecting took is what a storm measures; elsewhere it is the cell's
        // setup, opened in batches whose timing varies between runs far more than any figure
        // the scenario measures (up to twice as long between runs of one server:
        // bench/compare/README.md).
        if name == "connect" && !connects {
            continue;
        }
        if hb.is_empty() && hn.is_empty() {
            continue;
        }
        for (p, label) in PERCENTILES {
            figures.push(percentile(&format!("{name} {label}"), hb, hn, p, s));
        }
    }
    if bc.attempted > 0 || nc.attempted > 0 {
        let failed = |c: &crate::measure::Counts| c.attempted.saturating_sub(c.connected);
        figures.push(failures(
            "not connected",
            (failed(bc), bc.attempted),
            (failed(nc), nc.attempted),
            s,
        ));
    }
    if bc.connected > 0 || nc.connected > 0 {
        // Ended by the server or the network, not by wsload's own disruptions.
        let dropped = |c: &crate::measure::Counts| {
            let all: u64 = c.dropped.values().sum();
            all - c.dropped.get(&Dropped::Disrupted).copied().unwrap_or(0)
        };
        figures.push(failures(
            "dropped",
            (dropped(bc), bc.connected),
            (dropped(nc), nc.connected),
            s,
        ));
    }
    if bc.expected > 0 || nc.expected > 0 {
        figures.push(failures(
            "lost",
            (bc.lost, bc.expected),
            (nc.lost, nc.expected),
            s,
        ));
    }
    let verdict = overall(figures.iter().map(|f| f.verdict));
    CellComparison {
        label: b.label.clone(),
        figures,
        verdict,
    }
}

fn relative(base: f64, new: f64) -> Option<f64> {
    (base != 0.0).then(|| (new - base) / base)
}

/// Worse when the test says `worse`, better when it says `better`; either only past the
/// minimum effect (a change from 0 is past any).
fn judged(change: Option<f64>, worse: bool, better: bool, s: &Settings) -> Change {
    let big = |c: Option<f64>| c.is_none_or(|c| c.abs() >= s.min_effect);
    match (worse, better) {
        (true, _) if big(change) => Change::Regressed,
        (_, true) if big(change) => Change::Improved,
        _ => Change::Same,
    }
}

/// A percentile of two histograms: changed when their intervals at the confidence asked for
/// do not overlap.
fn percentile(name: &str, b: &Hist, n: &Hist, p: f64, s: &Settings) -> Figure {
    let (base, new) = (b.percentile(p), n.percentile(p));
    let change = relative(base, new);
    let figure = |verdict, evidence| Figure {
        name: name.to_string(),
        kind: Kind::Latency,
        base,
        new,
        change,
        verdict,
        evidence,
    };
    if b.is_empty() || n.is_empty() {
        let (empty, verdict) = if b.is_empty() {
            ("base", Change::Same)
        } else {
            ("new", Change::Regressed)
        };
        return figure(verdict, format!("the {empty} run measured none"));
    }
    let fewest = b.len().min(n.len());
    // Samples above the percentile's rank, counted in whole samples.
    let beyond = fewest - ((fewest as f64 * p / 100.0).ceil() as u64).min(fewest);
    if beyond < BEYOND {
        return figure(
            Change::Same,
            format!("untested: {fewest} samples leave fewer than {BEYOND} beyond the percentile"),
        );
    }
    let (bl, bh) = stats::percentile_interval(b, p, s.confidence);
    let (nl, nh) = stats::percentile_interval(n, p, s.confidence);
    figure(
        judged(change, nl > bh, nh < bl, s),
        format!(
            "{} intervals {}..{} against {}..{}",
            text::percent(s.confidence),
            crate::ms(bl),
            crate::ms(bh),
            crate::ms(nl),
            crate::ms(nh)
        ),
    )
}

/// A cell's timeline summed into batches of [`BATCH_MS`] (or of its step, when coarser), as
/// rates per second, by each sample's instant (a late sample skips one); a batch its samples
/// do not cover whole is left out. With the batches' length, ms.
fn batches(c: &CellResult) -> (Vec<f64>, u32) {
    let step = c.timeline_step_ms.max(1);
    let per = (BATCH_MS / step).max(1);
    let mut sums: BTreeMap<u32, (u64, u32)> = BTreeMap::new();
    for sample in &c.timeline {
        let e = sums.entry(sample.at / per).or_default();
        e.0 += sample.received;
        e.1 += 1;
    }
    let length = per * step;
    let rates = sums
        .values()
        .filter(|(_, n)| *n == per)
        .map(|(sum, _)| *sum as f64 * 1000.0 / f64::from(length))
        .collect();
    (rates, length)
}

/// A rate: changed when Welch's t of the batch means passes the confidence asked for.
fn rate(
    name: &str,
    (base, new): (f64, f64),
    ((b, b_ms), (n, n_ms)): ((Vec<f64>, u32), (Vec<f64>, u32)),
    s: &Settings,
) -> Figure {
    let change = relative(base, new);
    let length = |ms: u32| crate::ms(f64::from(ms) / 1e3);
    let (verdict, evidence) = match stats::welch(&b, &n) {
        Some((t, df)) => {
            let critical = stats::t_quantile(0.5 + s.confidence / 2.0, df.max(1.0));
            let verdict = judged(change, t < -critical, t > critical, s);
            let batches = if b_ms == n_ms {
                format!("{} and {} batches of {}", b.len(), n.len(), length(b_ms))
            } else {
                format!(
                    "{} batches of {} and {} of {}",
                    b.len(),
                    length(b_ms),
                    n.len(),
                    length(n_ms)
                )
            };
            (
                verdict,
                format!("Welch's t {t:.1} over {batches} (critical {critical:.2})"),
            )
        }
        None => (
            Change::Same,
            "untested: fewer than 2 whole batches on a side".to_string(),
        ),
    };
    Figure {
        name: name.to_string(),
        kind: Kind::Rate,
        base,
        new,
        change,
        verdict,
        evidence,
    }
}

/// A share of failures (`bad` of `all`): changed when the two-proportion z passes the
/// confidence asked for. The minimum effect applies to the share itself: 0.10% lost against
/// 0.102% is the same; any loss against none, significant, is not.
fn failures(name: &str, (bx, bn): (u64, u64), (nx, nn): (u64, u64), s: &Settings) -> Figure {
    let share = |x: u64, n: u64| if n == 0 { 0.0 } else { x as f64 / n as f64 };
    let (base, new) = (share(bx, bn), share(nx, nn));
    let change = relative(base, new);
    let z = stats::two_proportions(bx, bn, nx, nn);
    let critical = stats::normal_quantile(0.5 + s.confidence / 2.0);
    let verdict = judged(change, z > critical, z < -critical, s);
    Figure {
        name: name.to_string(),
        kind: Kind::Failures,
        base,
        new,
        change,
        verdict,
        evidence: format!(
            "two-proportion z {z:.1} ({bx} of {bn} against {nx} of {nn}; critical {critical:.2})"
        ),
    }
}

#[cfg(test)]
mod tests;
