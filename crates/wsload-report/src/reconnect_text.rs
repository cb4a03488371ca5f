//! A cell's reconnect figures as lines of the text report: per window (before any
//! disruption, then each disruption), what dropped, what came back and how fast, what the
//! attempts met, and the reconnections' handshakes against the first connections'.

use crate::numbers::{ms, num};
use crate::reconnect::{Reconnects, Storm};
use crate::result::CellResult;

/// The lines of `c`'s reconnect figures; none when the cell neither reconnects nor disrupts.
pub fn lines(c: &CellResult) -> Vec<String> {
    let Some(r) = &c.measure.reconnect else {
        return Vec::new();
    };
    let mut out = vec![format!("reconnect [{}]: policy {}", c.label, r.policy)];
    let first = c.measure.hists.connect.percentile(99.0);
    let fanout = c.measure.counts.fanout.is_some();
    for (i, s) in r.storms.iter().enumerate() {
        // The window before any disruption says something only when something dropped.
        if s.what.is_empty() && s.dropped == 0 {
            continue;
        }
        out.push(format!("  {}", window(r, i, s, first, fanout)));
    }
    if fanout {
        out.push(format!(
            "  gaps no drop explains: {}",
            num(r.gaps_undropped as f64)
        ));
    }
    if r.replicas_held.len() > 1 {
        out.push(format!("  {}", held(r)));
    }
    out
}

/// What each replica held at the window's end.
pub fn held(r: &Reconnects) -> String {
    let each: Vec<String> = r
        .replicas_held
        .iter()
        .map(|n| n.map_or_else(|| "- (down)".to_string(), |n| num(n as f64)))
        .collect();
    format!(
        "replicas at the window's end held {} connections",
        each.join(", ")
    )
}

fn window(r: &Reconnects, i: usize, s: &Storm, first_p99: f64, fanout: bool) -> String {
    let what = if s.what.is_empty() {
        "before any disruption".to_string()
    } else {
        s.what.clone()
    };
    let mut parts = vec![format!(
        "{} dropped, {} back",
        num(s.dropped as f64),
        num(s.reconnected as f64)
    )];
    if s.reconnected > 0 && s.never_back() == 0 {
        parts[0].push_str(&format!(
            " (all within {} of it)",
            ms(s.last_back_ms as f64 / 1e3)
        ));
    }
    if s.never_back() > 0 {
        let gave_up = if s.gave_up > 0 {
            format!(
                ", {} after the policy's last attempt",
                num(s.gave_up as f64)
            )
        } else {
            String::new()
        };
        parts.push(format!(
            "{} never back{gave_up}",
            num(s.never_back() as f64)
        ));
    }
    if !s.downtime.is_empty() {
        parts.push(format!(
            "downtime p50 {}, p99 {}, max {}",
            ms(s.downtime.percentile(50.0)),
            ms(s.downtime.percentile(99.0)),
            ms(s.downtime.max())
        ));
    }
    if s.attempts > 0 {
        let failed: Vec<String> = s
            .failed
            .iter()
            .map(|(k, v)| format!("{} x{}", k.label(), num(*v as f64)))
            .collect();
        let failed = if failed.is_empty() {
            String::new()
        } else {
            format!(", failed: {}", failed.join(", "))
        };
        let accepted = match r.peak_server_accepts(s.from_ms, r.window_end(i)) {
            Some(peak) => format!(", the replicas admitting at most {}/s", num(peak as f64)),
            None => String::new(),
        };
        parts.push(format!(
            "{} attempts (peak {}/s over 100 ms{accepted}){failed}",
            num(s.attempts as f64),
            num(r.peak_attempts(s.from_ms, r.window_end(i)) as f64)
        ));
    }
    if !s.handshake.is_empty() {
        parts.push(format!(
            "reconnect handshake p99 {} (first connections' {})",
            ms(s.handshake.percentile(99.0)),
            ms(first_p99)
        ));
    }
    if fanout {
        parts.push(gaps(s));
    }
    format!("{what}: {}", parts.join("; "))
}

/// What the window's dropped subscribers missed of what was published while they were away.
/// With subscribers that resume, what the server replayed of it beside.
pub fn gaps(s: &Storm) -> String {
    let lost = format!(
        "fan-out gaps {} (after {} of its drops)",
        num(s.gaps as f64),
        num(s.gapped as f64)
    );
    let lost = if s.unfed == 0 {
        lost
    } else {
        format!("{lost}; {} back read nothing after", num(s.unfed as f64))
    };
    if s.recovered == 0 {
        return lost;
    }
    format!("{} recovered, {lost}", num(s.recovered as f64))
}
