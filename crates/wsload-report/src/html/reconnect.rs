//! The reconnect section of the HTML report: per cell and disruption, what dropped, what came
//! back and how fast, what the attempts met, and the reconnections' handshakes beside the
//! first connections'.

use super::table;
use crate::escape::escape;
use crate::numbers::{ms, num};
use crate::result::RunResult;
use std::fmt::Write as _;

/// The section, when any cell has reconnect figures.
pub(super) fn storms(o: &mut String, r: &RunResult) {
    let cells: Vec<_> = r
        .cells
        .iter()
        .filter_map(|c| Some((c, c.measure.reconnect.as_ref()?)))
        .collect();
    let Some((_, first)) = cells.first() else {
        return;
    };
    o.push_str("<section id=\"reconnects\"><h2>Reconnects</h2>");
    let _ = write!(
        o,
        "<p>Policy: {}. A drop, its attempts and its return belong to the window it dropped in: before any disruption, or from a disruption to the next.</p>",
        escape(&first.policy)
    );
    let n = |v: u64| num(v as f64);
    let fanout = cells.iter().any(|(c, _)| c.measure.counts.fanout.is_some());
    let rows: Vec<Vec<String>> = cells
        .iter()
        .flat_map(|(c, rc)| {
            let first_p99 = ms(c.measure.hists.connect.percentile(99.0));
            rc.storms
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.what.is_empty() || s.dropped > 0)
                .map(move |(i, s)| {
                    let failed: Vec<String> = s
                        .failed
                        .iter()
                        .map(|(k, v)| format!("{} x{}", k.label(), num(*v as f64)))
                        .collect();
                    let all_back = if s.reconnected > 0 && s.never_back() == 0 {
                        ms(s.last_back_ms as f64 / 1e3)
                    } else {
                        "-".into()
                    };
                    let mut row = vec![
                        c.label.clone(),
                        if s.what.is_empty() {
                            "before any".into()
                        } else {
                            s.what.clone()
                        },
                        n(s.dropped),
                        n(s.reconnected),
                        n(s.never_back()),
                        n(s.gave_up),
                        n(s.attempts),
                        match rc.peak_server_accepts(s.from_ms, rc.window_end(i)) {
                            Some(admitted) => format!(
                                "{} (replicas admitting {})",
                                n(rc.peak_attempts(s.from_ms, rc.window_end(i))),
                                n(admitted)
                            ),
                            None => n(rc.peak_attempts(s.from_ms, rc.window_end(i))),
                        },
                        if failed.is_empty() {
                            "-".into()
                        } else {
                            failed.join(", ")
                        },
                        all_back,
                        format!(
                            "{} / {} / {}",
                            ms(s.downtime.percentile(50.0)),
                            ms(s.downtime.percentile(99.0)),
                            ms(s.downtime.max())
                        ),
                        format!("{} ({first_p99})", ms(s.handshake.percentile(99.0))),
                    ];
                    if fanout {
                        row.push(match c.measure.counts.fanout {
                            Some(_) => crate::reconnect_text::gaps(s),
                            None => "-".into(),
                        });
                    }
                    row
                })
        })
        .collect();
    let mut head = vec![
        "Cell",
        "Disruption",
        "Dropped",
        "Back",
        "Never back",
        "Gave up",
        "Attempts",
        "Peak attempts/s",
        "Failed attempts",
        "All back within",
        "Downtime p50 / p99 / max",
        "Reconnect handshake p99 (first connections')",
    ];
    if fanout {
        head.push("Missed by its dropped subscribers");
    }
    table(o, &head, &rows);
    if fanout {
        // The gaps no disruption explains: what a server lost on its own.
        for (c, rc) in cells
            .iter()
            .filter(|(c, _)| c.measure.counts.fanout.is_some())
        {
            let _ = write!(
                o,
                "<p>{}: gaps no drop explains (in subscribers' deliveries before any drop of theirs): {}.</p>",
                escape(&c.label),
                n(rc.gaps_undropped)
            );
        }
    }
    for (c, rc) in cells.iter().filter(|(_, rc)| rc.replicas_held.len() > 1) {
        let _ = write!(
            o,
            "<p>{}: {}.</p>",
            escape(&c.label),
            escape(&crate::reconnect_text::held(rc))
        );
    }
    o.push_str("</section>");
}
