//! The fan-out's own section of the HTML report: what each cell's subscribers were owed and
//! received (gaps, duplicates, reordering), the subscribers that missed most, and the server's
//! topic counters beside them.

use super::table;
use crate::numbers::{ms, num};
use crate::result::RunResult;
use crate::table::percent;

/// The section, when any cell has fan-out figures.
pub(super) fn deliveries(o: &mut String, r: &RunResult) {
    let cells: Vec<_> = r
        .cells
        .iter()
        .filter_map(|c| Some((c, c.figures.fanout.as_ref()?)))
        .collect();
    if cells.is_empty() {
        return;
    }
    o.push_str("<section id=\"deliveries\"><h2>Deliveries</h2>");
    let n = |v: u64| num(v as f64);
    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|(c, f)| {
            let outside = c.measure.counts.fanout.as_ref().map_or(0, |t| t.outside);
            vec![
                c.label.clone(),
                n(f.publishes),
                n(f.subscriptions),
                n(f.expected),
                n(f.delivered),
                n(f.gaps),
                n(f.duplicates),
                n(f.out_of_order),
                n(f.too_late),
                n(outside),
                f.completeness.map_or("-".into(), percent),
            ]
        })
        .collect();
    table(
        o,
        &[
            "Cell",
            "Publishes",
            "Subscriptions",
            "Expected",
            "Delivered",
            "Gaps",
            "Duplicates",
            "Out of order",
            "Too late",
            "Outside window",
            "Completeness",
        ],
        &rows,
    );
    let slow: Vec<Vec<String>> = cells
        .iter()
        .flat_map(|(c, f)| {
            f.slowest.iter().map(|s| {
                vec![
                    c.label.clone(),
                    s.conn.to_string(),
                    s.topic.to_string(),
                    n(s.delivered),
                    n(s.gaps),
                    ms(s.max_latency_us as f64 / 1e6),
                ]
            })
        })
        .collect();
    if !slow.is_empty() {
        o.push_str("<h3>Slowest subscribers</h3>");
        table(
            o,
            &[
                "Cell",
                "Connection",
                "Topic",
                "Delivered",
                "Gaps",
                "Slowest delivery",
            ],
            &slow,
        );
    }
    let server: Vec<Vec<String>> = cells
        .iter()
        .filter_map(|(c, f)| {
            let s = c.server_topics?;
            Some(vec![
                c.label.clone(),
                n(s.published),
                n(s.fanout),
                n(s.delivered),
                n(s.dropped_slow_consumer),
                n(s.dropped_closed),
                n(f.delivered),
                n(crate::fanout_text::received_outside(c)),
            ])
        })
        .collect();
    if !server.is_empty() {
        o.push_str("<h3>The server's topic counters beside what the subscribers received</h3>");
        table(
            o,
            &[
                "Cell",
                "Published",
                "Owed",
                "Delivered",
                "Dropped (slow consumer)",
                "Dropped (closed)",
                "Received in window",
                "Received outside",
            ],
            &server,
        );
    }
    o.push_str("</section>");
}
