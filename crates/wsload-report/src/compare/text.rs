//! A comparison as the terminal shows it: how it was judged, a table per cell, the verdict
//! naming what regressed.

use super::{Change, Comparison, Figure, Kind};
use std::fmt::Write as _;

/// The whole comparison, ending with its verdict line.
pub fn render(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Each figure judged at {} confidence, a change counted from {}: percentiles by their \
         order-statistic intervals (a change when they do not overlap), rates by Welch's t over \
         one-second batches, shares of failures by a two-proportion z-test.",
        percent(c.confidence),
        percent(c.min_effect)
    );
    for cell in &c.cells {
        let _ = writeln!(out, "\ncell {}: {}", cell.label, cell.verdict.as_str());
        let _ = writeln!(
            out,
            "  {:<14} {:>11} {:>11} {:>8}  {:<9}  evidence",
            "figure", "base", "new", "change", "verdict"
        );
        for f in &cell.figures {
            let change = f.change.map_or_else(
                || {
                    if f.new == f.base {
                        "0%".to_string()
                    } else {
                        "new".to_string()
                    }
                },
                signed_percent,
            );
            let _ = writeln!(
                out,
                "  {:<14} {:>11} {:>11} {:>8}  {:<9}  {}",
                f.name,
                value(f, f.base),
                value(f, f.new),
                change,
                f.verdict.as_str(),
                f.evidence
            );
        }
    }
    let _ = writeln!(out, "\nverdict: {}", verdict_line(c));
    out
}

/// `Regressed (cell 1000: rtt p99, lost)`, or the verdict alone when nothing changed.
pub fn verdict_line(c: &Comparison) -> String {
    if c.verdict == Change::Same {
        return "Same".to_string();
    }
    let named: Vec<String> = c
        .cells
        .iter()
        .filter(|cell| cell.verdict == c.verdict)
        .map(|cell| {
            let which: Vec<&str> = cell
                .figures
                .iter()
                .filter(|f| f.verdict == c.verdict)
                .map(|f| f.name.as_str())
                .collect();
            format!("cell {}: {}", cell.label, which.join(", "))
        })
        .collect();
    format!("{} ({})", c.verdict.as_str(), named.join("; "))
}

fn value(f: &Figure, v: f64) -> String {
    match f.kind {
        Kind::Latency => crate::ms(v),
        Kind::Rate => crate::num(v),
        Kind::Failures => format!("{:.3}%", v * 100.0),
    }
}

/// A share as a percentage, with the decimals it needs (`25%`, `2.5%`, `99.9%`).
pub(super) fn percent(v: f64) -> String {
    let p = v * 100.0;
    let text = if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}")
    } else if (p * 10.0 - (p * 10.0).round()).abs() < 1e-9 || p >= 10.0 {
        format!("{p:.1}")
    } else {
        format!("{p:.2}")
    };
    format!("{text}%")
}

/// A change with its sign (`+12%`, `-3.5%`; `0%` for none shown).
fn signed_percent(v: f64) -> String {
    let shown = percent(v.abs());
    if shown.trim_start_matches(['0', '.']) == "%" {
        return "0%".to_string();
    }
    let sign = if v >= 0.0 { "+" } else { "-" };
    format!("{sign}{shown}")
}
