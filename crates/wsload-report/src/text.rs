//! The result as text for a terminal or a Markdown file: the cell table, findings, probes,
//! shard skew, notes and the verdict, in the style of the seed reports.

use crate::findings::signed_ms;
use crate::measure::NEGOTIATED;
use crate::numbers::{in_units, ms, num};
use crate::result::{Check, RunResult};
use crate::table::cell_table;
use std::fmt::Write as _;

/// Namespaces a cell lists in the text report (every one is in the JSON and the HTML page).
pub const KERNEL_LINES: usize = 8;

impl RunResult {
    /// What a check measured, in its threshold's units; when nothing was, why (`not measured:
    /// 0 pings were sent`).
    pub fn actual(&self, c: &Check) -> String {
        let metric = self
            .thresholds
            .iter()
            .find(|t| t.text == c.threshold)
            .map(|t| t.metric);
        match (c.actual, metric, &c.reason) {
            (Some(a), Some(m), _) => in_units(m, a),
            (_, _, Some(why)) => why.clone(),
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

    /// `shard 1 +50.012 ms ± 0.09 ms (12)` for each shard whose clock the conductor measured.
    pub(crate) fn clock_lines(&self) -> Vec<String> {
        self.shard_info
            .iter()
            .filter_map(|s| {
                let c = s.clock?;
                Some(format!(
                    "shard {} {} ± {} ({})",
                    s.index,
                    signed_ms(c.offset_micros),
                    ms(c.uncertainty_micros as f64 / 1e6),
                    c.samples
                ))
            })
            .collect()
    }

    /// One line per namespace per cell of what the kernel counted: `kernel [100]
    /// net:[4026531840] (machine-wide) (shards 0-3): TcpExtListenOverflows +12, ...; TCP 1002
    /// in use, ...`;
    /// at most [`KERNEL_LINES`] a cell, then how many more the result holds.
    pub(crate) fn kernel_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.cells {
            for e in c.kernel.iter().take(KERNEL_LINES) {
                let who = if self.shard_count > 1 {
                    format!(" ({})", e.readers())
                } else {
                    String::new()
                };
                let grown = e.grown();
                let grown = if grown.is_empty() {
                    "no counter grew".to_string()
                } else {
                    grown.join(", ")
                };
                let gauges = e.gauges_line();
                let gauges = if gauges.is_empty() {
                    String::new()
                } else {
                    format!("; {gauges}")
                };
                out.push(format!(
                    "kernel [{}] {}{}{who}: {grown}{gauges}",
                    c.label,
                    e.place(),
                    e.scope()
                ));
            }
            if c.kernel.len() > KERNEL_LINES {
                out.push(format!(
                    "kernel [{}]: {} more namespaces in the result's JSON",
                    c.label,
                    c.kernel.len() - KERNEL_LINES
                ));
            }
        }
        out
    }

    /// Tables in the style of the seed reports, and the verdict.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "\n{} — {}\n", self.test, self.headline());
        o.push_str(&markdown_table(self));
        let fanout: Vec<String> = self
            .cells
            .iter()
            .flat_map(crate::fanout_text::lines)
            .collect();
        if !fanout.is_empty() {
            o.push('\n');
            for line in &fanout {
                let _ = writeln!(o, "{line}");
            }
        }
        let reconnect: Vec<String> = self
            .cells
            .iter()
            .flat_map(crate::reconnect_text::lines)
            .collect();
        if !reconnect.is_empty() {
            o.push('\n');
            for line in &reconnect {
                let _ = writeln!(o, "{line}");
            }
        }
        let findings = crate::findings::findings(self);
        if !findings.is_empty() {
            o.push('\n');
            for f in &findings {
                let _ = writeln!(o, "{f}");
            }
        }
        let kernel = self.kernel_lines();
        if !kernel.is_empty() {
            o.push('\n');
            for line in &kernel {
                let _ = writeln!(o, "{line}");
            }
        }
        let talk: Vec<String> = self
            .cells
            .iter()
            .flat_map(|c| [conversation_line(c), closing_line(c)])
            .flatten()
            .collect();
        if !talk.is_empty() {
            o.push('\n');
            for line in &talk {
                let _ = writeln!(o, "{line}");
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
                "\nShards began measuring each cell together; start skew per cell (how far apart their measured phases began):"
            );
            let skews: Vec<String> = self
                .cells
                .iter()
                .filter_map(|c| c.shard_skew_ms().map(|s| format!("{} {s:.1} ms", c.label)))
                .collect();
            let _ = writeln!(o, "  {}", skews.join(", "));
        }
        let clocks = self.clock_lines();
        if !clocks.is_empty() {
            let _ = writeln!(
                o,
                "\nShard clocks against the conductor's (offset ± uncertainty, probes; the instants above are on the conductor's clock):"
            );
            let _ = writeln!(o, "  {}", clocks.join(", "));
        }
        for n in &self.notes {
            let _ = writeln!(o, "note: {n}");
        }
        if let Some(v) = &self.verdict {
            if !v.unmeasured.is_empty() {
                let _ = writeln!(o, "\nMeasured nothing:");
                for u in &v.unmeasured {
                    let _ = writeln!(o, "  FAIL [{}] {}", u.cell, u.missing);
                }
            }
            if !v.checks.is_empty() {
                let _ = writeln!(o, "\nThresholds:");
            }
            for c in &v.checks {
                // A figure never measured says why in place of one.
                let actual = match (&c.reason, c.actual) {
                    (Some(why), None) => why.clone(),
                    _ => format!("actual {}", self.actual(c)),
                };
                let _ = writeln!(
                    o,
                    "  {} {} [{}] {actual}",
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

/// The cell table as Markdown, as the seed reports have it.
/// What a cell's conversation did beside the measured messages: pushes received, replies
/// sent, and what the upgrade negotiated; `None` when there is nothing of it.
fn conversation_line(c: &crate::result::CellResult) -> Option<String> {
    let n = &c.measure.counts;
    let mut parts = Vec::new();
    if !n.pushes.is_empty() || !n.pushes_by_name.is_empty() {
        // Each named rule's count, those that matched nothing too (a mistyped rule shows).
        let by_name: String = n
            .pushes_by_name
            .iter()
            .map(|(name, t)| format!(", {name} {}", num(t.frames as f64)))
            .collect();
        parts.push(format!(
            "{} pushes received ({}/s, {} bytes{})",
            num(n.pushes.frames as f64),
            num(n.pushes.frames as f64 / c.measured_secs.max(1e-9)),
            num(n.pushes.bytes as f64),
            by_name.replacen(", ", "; ", 1)
        ));
    }
    if n.replies > 0 {
        parts.push(format!("{} automatic replies sent", num(n.replies as f64)));
    }
    if let Some(agreed) = n.evidence.get(NEGOTIATED) {
        parts.push(format!("negotiated: {agreed}"));
    }
    (!parts.is_empty()).then(|| format!("conversation [{}]: {}", c.label, parts.join("; ")))
}

/// Connections whose server never finished the closing handshake: each held the cell's end
/// up to the bound past its duration.
fn closing_line(c: &crate::result::CellResult) -> Option<String> {
    let n = &c.measure.counts;
    (n.close_unanswered > 0).then(|| {
        format!(
            "closing handshake [{}]: {} of {} closes unanswered within {} s (its bound: the cell's end waited that long past its duration)",
            c.label,
            num(n.close_unanswered as f64),
            num(n.survived as f64),
            crate::measure::CLOSING_HANDSHAKE_BOUND.as_secs()
        )
    })
}

fn markdown_table(r: &RunResult) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;
    use crate::measure::FrameTally;

    #[test]
    fn a_fanout_prints_its_table_slowest_subscribers_and_the_servers_account() {
        let text = crate::fixtures::fanout().render();
        let head = "| Subscribers | Pub/s | Deliveries/s | Complete | Gaps | Dup | Reorder | p50 | p99 | p99.9 | max |";
        assert!(text.contains(head), "{text}");
        assert!(head.len() <= 100, "{} columns", head.len());
        assert!(
            text.contains("| 100 | 200 | 10000 | 99.995% | 5 | 2 | 3 | 5."),
            "{text}"
        );
        assert!(
            text.contains("slowest subscribers [100]: conn 17 on topic 1: 995 delivered, 5 gaps, slowest 42.00 ms"),
            "{text}"
        );
        assert!(
            text.contains("server topics [100]: published 2008, owed 100.4K deliveries, delivered 100.1K, dropped 0 for slow consumers and 0 to closed connections; subscribers received 100.0K of the window and 40 outside it"),
            "{text}"
        );
        assert!(text.contains("FAIL gaps == 0 [100] actual 5"), "{text}");
        assert!(
            text.contains("PASS fanout.p99 < 50ms [100] actual 9."),
            "{text}"
        );
    }

    #[test]
    fn a_conversation_says_its_pushes_replies_and_what_was_negotiated() {
        let mut r = shard(0, 100, 1, 1);
        assert!(
            !r.render().contains("conversation ["),
            "none without a conversation"
        );
        let c = &mut r.cells[0];
        c.measured_secs = 10.0;
        c.measure.counts.pushes.frames = 28_400;
        c.measure.counts.pushes.bytes = 1_136_000;
        c.measure.counts.replies = 6_000;
        c.measure
            .counts
            .witness(NEGOTIATED, "subprotocol \"graphql-transport-ws\"");
        let line = conversation_line(&r.cells[0]).expect("a line");
        assert_eq!(
            line,
            format!(
                "conversation [{}]: 28.4K pushes received (2840/s, 1.14M bytes); 6000 automatic replies sent; negotiated: subprotocol \"graphql-transport-ws\"",
                r.cells[0].label
            )
        );
        assert!(r.render().contains(&line));
        // Named push rules: each one's count, one that matched nothing too.
        let n = &mut r.cells[0].measure.counts;
        for (name, frames) in [("next", 27_400), ("complete", 1_000), ("error", 0)] {
            n.pushes_by_name.insert(
                name.into(),
                FrameTally {
                    frames,
                    bytes: frames * 40,
                },
            );
        }
        let line = conversation_line(&r.cells[0]).expect("a line");
        assert!(
            line.contains(
                "28.4K pushes received (2840/s, 1.14M bytes; complete 1000, error 0, next 27.4K)"
            ),
            "{line}"
        );
    }
}
