//! What a fanout cell says under its table row: its slowest subscribers, and the server's own
//! topic counters beside what the subscribers received. One wording for the text and the HTML
//! report.

use crate::fanout::ServerTopics;
use crate::fanout_figures::FanoutFigures;
use crate::numbers::{ms, num};
use crate::result::CellResult;

/// Most slow subscribers named on a line.
const NAMED: usize = 5;

/// The lines of `c`, none when it is no fanout cell.
pub(crate) fn lines(c: &CellResult) -> Vec<String> {
    let Some(f) = &c.figures.fanout else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(line) = slowest(f) {
        out.push(format!("slowest subscribers [{}]: {line}", c.label));
    }
    if let Some(server) = &c.server_topics {
        out.push(format!(
            "server topics [{}]: {}",
            c.label,
            beside(server, f, received_outside(c))
        ));
    }
    out
}

/// `conn 12 on topic 3: 95 delivered, 5 gaps, slowest 120 ms; ...`, for the subscribers that
/// missed most.
fn slowest(f: &FanoutFigures) -> Option<String> {
    if f.slowest.is_empty() {
        return None;
    }
    let named: Vec<String> = f
        .slowest
        .iter()
        .take(NAMED)
        .map(|s| {
            let mut one = format!(
                "conn {} on topic {}: {} delivered, {} gaps",
                s.conn,
                s.topic,
                num(s.delivered as f64),
                num(s.gaps as f64)
            );
            if s.max_latency_us > 0 {
                one.push_str(&format!(", slowest {}", ms(s.max_latency_us as f64 / 1e6)));
            }
            one
        })
        .collect();
    Some(named.join("; "))
}

/// Deliveries the subscribers read of messages published outside the window (warm-up,
/// drain): the server counted those too.
pub(crate) fn received_outside(c: &CellResult) -> u64 {
    c.measure.counts.fanout.as_ref().map_or(0, |f| f.outside)
}

/// The server's account beside the subscribers'.
fn beside(s: &ServerTopics, f: &FanoutFigures, outside: u64) -> String {
    format!(
        "published {}, owed {} deliveries, delivered {}, dropped {} for slow consumers and {} to closed connections; subscribers received {} of the window and {} outside it",
        num(s.published as f64),
        num(s.fanout as f64),
        num(s.delivered as f64),
        num(s.dropped_slow_consumer as f64),
        num(s.dropped_closed as f64),
        num(f.delivered as f64),
        num(outside as f64)
    )
}
