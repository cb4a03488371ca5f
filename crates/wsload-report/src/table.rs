//! A cell table's columns and rows for each kind of scenario, as the text and the HTML report
//! print them.

use crate::numbers::{ms, num};
use crate::result::{CellResult, RunResult};
use wsload_spec::scenario::Measures;

/// A cell table's columns and rows, as the text and the HTML report print them.
pub(crate) struct Table {
    pub head: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn of(
        head: Vec<&'static str>,
        cells: &[CellResult],
        row: impl Fn(&CellResult) -> Vec<String>,
    ) -> Table {
        Table {
            head,
            rows: cells.iter().map(row).collect(),
        }
    }
}

/// The columns that matter for what the scenario measures, one row per cell.
pub(crate) fn cell_table(r: &RunResult) -> Table {
    match r.scenario.profile().measures {
        Measures::Connects | Measures::Limit => handshakes(&r.cells),
        Measures::RoundTrips { survival } => pings(&r.cells, survival),
        Measures::Echoes | Measures::Sends => throughput(&r.cells),
        Measures::PacedRoundTrips => paced_echoes(&r.cells),
        Measures::Deliveries => fanout(&r.cells),
    }
}

/// Connection storms and limits: how fast connections were accepted and how long a handshake took.
fn handshakes(cells: &[CellResult]) -> Table {
    let head = vec![
        "Connections",
        "Accept rate",
        "p50",
        "p95",
        "p99",
        "p99.9",
        "Failed",
    ];
    Table::of(head, cells, |c| {
        let f = &c.figures;
        // Connections the server closed right after the upgrade (over its cap) failed too.
        let failed = c.measure.counts.errors_total();
        vec![
            c.label.clone(),
            format!("{}/s", num(f.connect_rate)),
            ms(f.connect.p50),
            ms(f.connect.p95),
            ms(f.connect.p99),
            ms(f.connect.p999),
            failed.to_string(),
        ]
    })
}

/// Ping scenarios: round trips, and survival where connections are held.
fn pings(cells: &[CellResult], survival: bool) -> Table {
    let head = vec![
        "Connections",
        "Pings",
        "p50",
        "p95",
        "p99",
        "p99.9",
        "max",
        "Lost",
        if survival { "Survival" } else { "Errors" },
    ];
    Table::of(head, cells, |c| {
        let f = &c.figures;
        let last = if survival {
            format!("{:.2}%", f.survival * 100.0)
        } else {
            c.measure.counts.failed_total().to_string()
        };
        vec![
            c.label.clone(),
            num(f.rtt.count as f64),
            ms(f.rtt.p50),
            ms(f.rtt.p95),
            ms(f.rtt.p99),
            ms(f.rtt.p999),
            ms(f.rtt.max),
            c.measure.counts.lost.to_string(),
            last,
        ]
    })
}

/// Unpaced sending: message and byte rates, and what the servers counted.
fn throughput(cells: &[CellResult]) -> Table {
    let head = vec![
        "Cell",
        "Msg/s",
        "MB/s",
        "Per-conn msg/s",
        "Echoes/s",
        "Server received",
        "Errors",
    ];
    Table::of(head, cells, |c| {
        let f = &c.figures;
        let server = match (c.server_received, f.delivery) {
            (Some(s), Some(d)) => format!("{} ({:.2}%)", num(s as f64), d * 100.0),
            _ => "-".into(),
        };
        let errors = c.measure.counts.errors_total();
        // Too short a window for a rate (see MIN_RATE_SECS): none shown.
        let rates = c.measured_secs >= crate::result::MIN_RATE_SECS;
        let rate = |text: String| if rates { text } else { "-".into() };
        vec![
            c.label.clone(),
            rate(num(f.sent_per_sec)),
            rate(format!("{:.1}", f.bytes_sent_per_sec / 1e6)),
            rate(num(f.sent_per_sec / f64::from(c.connections.max(1)))),
            rate(num(f.received_per_sec)),
            server,
            errors.to_string(),
        ]
    })
}

/// Fan-out: publishes against deliveries, what went missing or came twice or out of order,
/// and how long deliveries took from their intended publish instant.
fn fanout(cells: &[CellResult]) -> Table {
    let head = vec![
        "Subscribers",
        "Pub/s",
        "Deliveries/s",
        "Complete",
        "Gaps",
        "Dup",
        "Reorder",
        "p50",
        "p99",
        "p99.9",
        "max",
    ];
    Table::of(head, cells, |c| {
        let Some(f) = &c.figures.fanout else {
            let mut row = vec!["-".to_string(); 11];
            row[0] = c.label.clone();
            return row;
        };
        let l = &f.latency;
        vec![
            c.label.clone(),
            num(f.publishes_per_sec),
            num(f.deliveries_per_sec),
            f.completeness.map_or("-".into(), percent),
            num(f.gaps as f64),
            num(f.duplicates as f64),
            num(f.out_of_order as f64),
            ms(l.p50),
            ms(l.p99),
            ms(l.p999),
            ms(l.max),
        ]
    })
}

/// A share as a percentage with as many decimals as tell it from 100%: a single gap in a
/// million deliveries still shows.
pub(crate) fn percent(share: f64) -> String {
    if share >= 1.0 {
        return "100%".into();
    }
    let mut decimals = 2;
    while decimals < 6 && format!("{:.*}", decimals, share * 100.0).starts_with("100") {
        decimals += 1;
    }
    format!("{:.*}%", decimals, share * 100.0)
}

/// Paced echoes: the rate asked for against the rates reached, round trips and loss.
fn paced_echoes(cells: &[CellResult]) -> Table {
    let head = vec![
        "Connections",
        "Target/s",
        "Sent/s",
        "Received/s",
        "p50",
        "p99",
        "p99.9",
        "raw p99",
        "Loss",
    ];
    Table::of(head, cells, |c| {
        let f = &c.figures;
        vec![
            c.label.clone(),
            num(c.target_rate),
            num(f.sent_per_sec),
            num(f.received_per_sec),
            ms(f.rtt.p50),
            ms(f.rtt.p99),
            ms(f.rtt.p999),
            ms(f.rtt_raw.p99),
            format!("{:.2}%", f.loss * 100.0),
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completeness_short_of_whole_never_reads_as_100() {
        assert_eq!(percent(1.0), "100%");
        assert_eq!(percent(0.995), "99.50%");
        assert_eq!(percent(0.999_99), "99.999%");
        assert_eq!(percent(0.999_999), "99.9999%");
        assert_eq!(percent(0.0), "0.00%");
    }
}
