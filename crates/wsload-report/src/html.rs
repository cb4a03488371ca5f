//! The result as one self-contained HTML file to share: styles inline, charts as inline SVG,
//! no script and nothing fetched, so it opens offline and prints as it shows.

use crate::chart::{LineChart, Series, nice_step};
use crate::escape::escape;
use crate::numbers::{ms, num};
use crate::result::RunResult;
use crate::table::cell_table;
use serde_json::Value;
use std::fmt::Write as _;
use wsload_spec::scenario::Measures;

mod fanout;
mod reconnect;

const STYLE: &str = "
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#212529;max-width:1040px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dee2e6;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 4px}
.sub{color:#495057;margin:0}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #ced4da;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#f1f3f5}td:first-child,th:first-child{text-align:left}td.l,th.l{text-align:left;white-space:normal}
.pass{color:#2b8a3e;font-weight:600}.fail{color:#c92a2a;font-weight:600}
.verdict{display:inline-block;font-size:18px;padding:2px 12px;border:2px solid currentColor;border-radius:4px}
ul.findings{padding-left:20px}ul.findings li{margin:2px 0}
.charts{display:flex;flex-wrap:wrap;gap:8px}
svg.chart{max-width:100%;height:auto;font-size:11px;font-family:inherit;border:1px solid #e9ecef}
svg .grid{stroke:#e9ecef}svg .axis{stroke:#868e96}svg .ct{font-weight:600;font-size:12px}
.spec{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}.spec td{font-size:12px}.spec td:last-child,.spec th:last-child{text-align:left;white-space:normal}
.muted{color:#868e96}
summary{cursor:pointer;margin:8px 0;color:#495057}
@media print{body{margin:0;max-width:none}h2{break-after:avoid}svg.chart,table{break-inside:avoid}}
";

/// Unix microseconds as `2026-11-24 05:24:42.123 UTC` (civil-from-days, proleptic Gregorian).
fn utc(micros: u64) -> String {
    let secs = micros / 1_000_000;
    let days = (secs / 86_400) as i64;
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}.{:03} UTC",
        micros % 1_000_000 / 1000
    )
}

fn table(o: &mut String, head: &[&str], rows: &[Vec<String>]) {
    o.push_str("<table><thead><tr>");
    for h in head {
        let _ = write!(o, "<th>{}</th>", escape(h));
    }
    o.push_str("</tr></thead><tbody>");
    for r in rows {
        o.push_str("<tr>");
        for c in r {
            let _ = write!(o, "<td>{}</td>", escape(c));
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table>");
}

/// The whole report as one HTML document.
pub fn html(r: &RunResult) -> String {
    let mut o = String::with_capacity(64 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>wsload: {}</title><style>{STYLE}</style></head><body>",
        escape(&r.test)
    );
    header(&mut o, r);
    verdict(&mut o, r);
    cells(&mut o, r);
    fanout::deliveries(&mut o, r);
    reconnect::storms(&mut o, r);
    latency_chart(&mut o, r);
    throughput_charts(&mut o, r);
    shards(&mut o, r);
    spec(&mut o, r);
    let _ = writeln!(
        o,
        "<footer class=\"muted\"><p>wsload-report {}</p></footer></body></html>",
        env!("CARGO_PKG_VERSION")
    );
    o
}

fn header(o: &mut String, r: &RunResult) {
    let _ = write!(
        o,
        "<header><h1>{}</h1><p class=\"sub\">{}; started {}</p></header>",
        escape(&r.test),
        escape(&r.headline()),
        utc(r.started_at_unix_ms * 1000)
    );
}

fn verdict(o: &mut String, r: &RunResult) {
    o.push_str("<section id=\"verdict\"><h2>Verdict</h2>");
    let Some(v) = &r.verdict else {
        o.push_str("<p>No thresholds: nothing to judge.</p></section>");
        return;
    };
    let (class, word) = if v.passed {
        ("pass", "PASS")
    } else {
        ("fail", "FAIL")
    };
    let _ = write!(o, "<p><span class=\"verdict {class}\">{word}</span></p>");
    for u in &v.unmeasured {
        let _ = write!(
            o,
            "<p class=\"fail\">Measured nothing in cell {}: {}</p>",
            escape(&u.cell),
            escape(&u.missing)
        );
    }
    o.push_str(
        "<table><thead><tr><th>Result</th><th class=\"l\">Threshold</th><th>Cell</th><th>Actual</th></tr></thead><tbody>",
    );
    for c in &v.checks {
        let actual = r.actual(c);
        let (class, word) = if c.passed {
            ("pass", "PASS")
        } else {
            ("fail", "FAIL")
        };
        let _ = write!(
            o,
            "<tr><td class=\"{class}\">{word}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(&c.threshold),
            escape(&c.cell),
            escape(&actual)
        );
    }
    o.push_str("</tbody></table></section>");
}

fn cells(o: &mut String, r: &RunResult) {
    o.push_str("<section id=\"cells\"><h2>Results</h2>");
    let t = cell_table(r);
    table(o, &t.head, &t.rows);
    let findings = crate::findings::findings(r);
    if !findings.is_empty() {
        o.push_str("<h3>Findings</h3><ul class=\"findings\">");
        for f in &findings {
            let _ = write!(
                o,
                "<li><b>[{}]</b> {} <span class=\"muted\">({})</span></li>",
                escape(&f.cell),
                escape(&f.cause),
                escape(&f.evidence)
            );
        }
        o.push_str("</ul>");
    }
    kernel(o, r);
    if !r.probes.is_empty() {
        o.push_str("<h3>Connection limit probes</h3>");
        let rows: Vec<Vec<String>> = r
            .probes
            .iter()
            .map(|p| {
                vec![
                    num(f64::from(p.connections)),
                    format!("{:.2}%", p.error_rate * 100.0),
                    if p.passed { "held" } else { "failed" }.to_string(),
                ]
            })
            .collect();
        table(o, &["Probe", "Error rate", "Result"], &rows);
        let limit = r.limit.map_or("none held".into(), |l| {
            format!("{} connections", num(f64::from(l)))
        });
        let _ = write!(o, "<p>Limit: {}</p>", escape(&limit));
    }
    for n in &r.notes {
        let _ = write!(o, "<p>Note: {}</p>", escape(n));
    }
    o.push_str("</section>");
}

/// What the kernel counted, a row per namespace per cell.
fn kernel(o: &mut String, r: &RunResult) {
    if r.cells.iter().all(|c| c.kernel.is_empty()) {
        return;
    }
    o.push_str("<h3>Kernel</h3><p class=\"muted\">TCP counters that grew over each cell (nstat names) and the sockets, memory and connection tracking at its end, per network namespace the shards ran in.</p>");
    o.push_str("<table><thead><tr><th>Cell</th><th class=\"l\">Namespace</th><th class=\"l\">Read by</th><th class=\"l\">Counters grown</th><th class=\"l\">At the end</th></tr></thead><tbody>");
    for c in &r.cells {
        for e in &c.kernel {
            let grown = e.grown();
            let grown = if grown.is_empty() {
                "none".to_string()
            } else {
                grown.join(", ")
            };
            let _ = write!(
                o,
                "<tr><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
                escape(&c.label),
                escape(&format!("{}{}", e.place(), e.scope())),
                escape(&e.readers()),
                escape(&grown),
                escape(&e.gauges_line())
            );
        }
    }
    o.push_str("</tbody></table>");
}

/// Round trips where the scenario times them, the handshake otherwise (connection storms).
fn latency_chart(o: &mut String, r: &RunResult) {
    const PS: [(f64, &str); 6] = [
        (50.0, "p50"),
        (90.0, "p90"),
        (95.0, "p95"),
        (99.0, "p99"),
        (99.9, "p99.9"),
        (100.0, "max"),
    ];
    let fanout = r.scenario.profile().measures == Measures::Deliveries;
    let rtt = r.cells.iter().any(|c| !c.measure.hists.rtt.is_empty());
    let series: Vec<Series> = r
        .cells
        .iter()
        .filter_map(|c| {
            let h = if fanout {
                &c.measure.hists.fanout
            } else if rtt {
                &c.measure.hists.rtt
            } else {
                &c.measure.hists.connect
            };
            (!h.is_empty()).then(|| Series {
                name: c.label.clone(),
                points: PS
                    .iter()
                    .enumerate()
                    .map(|(i, (p, _))| (i as f64, h.percentile(*p)))
                    .collect(),
            })
        })
        .collect();
    o.push_str("<section id=\"latency\"><h2>Latency percentiles</h2>");
    if series.is_empty() {
        o.push_str("<p class=\"muted\">No latency was measured.</p></section>");
        return;
    }
    let chart = LineChart {
        title: if fanout {
            "Delivery latency by percentile, per cell".into()
        } else if rtt {
            "Round trip by percentile, per cell".into()
        } else {
            "Connection handshake by percentile, per cell".into()
        },
        x_ticks: PS
            .iter()
            .enumerate()
            .map(|(i, (_, n))| (i as f64, n.to_string()))
            .collect(),
        x_label: "percentile".into(),
        y_format: axis_ms,
        series,
        markers: Vec::new(),
    };
    let _ = write!(o, "<div class=\"charts\">{}</div></section>", chart.svg());
}

fn throughput_charts(o: &mut String, r: &RunResult) {
    o.push_str("<section id=\"throughput\"><h2>Throughput over time</h2>");
    // A fan-out's sends are its publishes, what arrives its deliveries, timed from the
    // intended publish instant.
    let fanout = r.scenario.profile().measures == Measures::Deliveries;
    let (sent, received, what, latency) = if fanout {
        (
            "publishes/s",
            "deliveries/s",
            "publishes and deliveries per second",
            "delivery latency p99 per sample",
        )
    } else {
        (
            "sent/s",
            "received/s",
            "messages per second",
            "round-trip p99 per sample",
        )
    };
    // A line needs two points: a cell sampled once (a burst of pings) has none to draw.
    let timed: Vec<_> = r.cells.iter().filter(|c| c.timeline.len() >= 2).collect();
    if timed.is_empty() {
        // Every cell has fewer than two: sampled once, or too short to be sampled at all.
        let why = if r
            .cells
            .iter()
            .all(|c| !c.timeline.is_empty() || c.measured_secs < 0.3)
        {
            "no cell was measured long enough to be sampled twice"
        } else {
            "written by a load generator that did not record them"
        };
        let _ = write!(
            o,
            "<p class=\"muted\">This result has no samples over time ({why}).</p></section>"
        );
        return;
    }
    for c in timed {
        // One row per cell: its charts side by side under its name.
        let name = if c.label == c.connections.to_string() {
            format!("{} connections", c.label)
        } else {
            c.label.clone()
        };
        let _ = write!(o, "<h3>{}</h3><div class=\"charts\">", escape(&name));
        let t = &c.timeline;
        let step = f64::from(c.timeline_step_ms.max(1)) / 1000.0;
        // A sample covers [at, at + 1) steps: drawn at its end, the axis from 0 to the last.
        let x = |s: &crate::timeline::Sample| f64::from(s.at + 1) * step;
        let end = t.last().map_or(step, x);
        let every = nice_step(end);
        let x_ticks = (0..)
            .map(|i| f64::from(i) * every)
            .take_while(|v| *v <= end + every * 1e-9)
            .map(|v| (v, seconds(v)))
            .collect();
        let line = |name: &str, f: fn(&crate::timeline::Sample) -> u64| Series {
            name: name.into(),
            // Counts per step as rates per second.
            points: t.iter().map(|s| (x(s), f(s) as f64 / step)).collect(),
        };
        let mut series = vec![line(sent, |s| s.sent), line(received, |s| s.received)];
        if t.iter().any(|s| s.pings_answered + s.pings_lost > 0) {
            series.push(line("pings answered/s", |s| s.pings_answered));
            series.push(line("pings lost/s", |s| s.pings_lost));
        }
        let x_label = format!(
            "seconds into the measured phase (a sample every {})",
            if c.timeline_step_ms < 1000 {
                format!("{} ms", c.timeline_step_ms)
            } else {
                format!("{} s", seconds(step))
            }
        );
        // The disruptions' instants on every chart of the cell: where the storm began.
        let markers: Vec<(f64, String)> = c
            .measure
            .reconnect
            .iter()
            .flat_map(|r| r.storms.iter().filter(|s| !s.what.is_empty()))
            .map(|s| (s.from_ms as f64 / 1000.0, s.what.clone()))
            .collect();
        let rates = LineChart {
            title: format!("{}: {what}", c.label),
            x_ticks,
            x_label,
            y_format: num,
            series,
            markers: markers.clone(),
        };
        o.push_str(&rates.svg());
        // The cell's other charts share the rates chart's axis, with one line each.
        let beside = |what: &str, name: &str, y_format: fn(f64) -> String, points| LineChart {
            title: format!("{}: {what}", c.label),
            x_ticks: rates.x_ticks.clone(),
            x_label: rates.x_label.clone(),
            y_format,
            series: vec![Series {
                name: name.into(),
                points,
            }],
            markers: markers.clone(),
        };
        let open = beside(
            "open connections",
            "open",
            num,
            t.iter().map(|s| (x(s), s.open as f64)).collect(),
        );
        // Where a stall shows first: the round trips of each step, not of the whole cell.
        let p99: Vec<(f64, f64)> = t
            .iter()
            .filter_map(|s| s.p99_us.map(|us| (x(s), us as f64 / 1e6)))
            .collect();
        if p99.len() >= 2 {
            let latency = beside(latency, "p99", axis_ms, p99);
            o.push_str(&latency.svg());
        }
        // Rates and p99 side by side, where a stall shows in both; then the connections.
        o.push_str(&open.svg());
        o.push_str("</div>");
    }
    o.push_str("</section>");
}

/// Seconds as milliseconds on an axis. ms() writes "-" for zero (nothing measured); on an
/// axis zero is zero.
fn axis_ms(v: f64) -> String {
    if v == 0.0 { "0".into() } else { ms(v) }
}

/// Seconds on an axis: `0.2`, `1`, `1.5`, `30`.
fn seconds(v: f64) -> String {
    let rounded = (v * 1000.0).round() / 1000.0;
    format!("{rounded}")
}

fn shards(o: &mut String, r: &RunResult) {
    o.push_str("<section id=\"shards\"><h2>Shards</h2>");
    if r.shard_info.is_empty() {
        let text = if r.shard_count <= 1 {
            "One process ran every connection (a single-process run): no shards to align.".into()
        } else {
            let which: Vec<String> = r.shards.iter().map(u32::to_string).collect();
            format!(
                "Shard {} of {}; their start times were not recorded (one shard's own result).",
                which.join(", "),
                r.shard_count
            )
        };
        let _ = write!(o, "<p>{}</p>", escape(&text));
    } else {
        let first = r
            .shard_info
            .iter()
            .map(|s| s.started_at_micros)
            .min()
            .unwrap_or(0);
        let rows: Vec<Vec<String>> = r
            .shard_info
            .iter()
            .map(|s| {
                vec![
                    s.index.to_string(),
                    utc(s.started_at_micros),
                    format!("+{:.3} ms", (s.started_at_micros - first) as f64 / 1000.0),
                    utc(s.finished_at_micros),
                    ms(s.finished_at_micros.saturating_sub(s.started_at_micros) as f64 / 1e6),
                    s.error.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        table(
            o,
            &[
                "Shard",
                "Load began",
                "After the first",
                "Finished",
                "Ran",
                "Error",
            ],
            &rows,
        );
        if let Some(skew) = r.start_skew_micros() {
            let _ = write!(
                o,
                "<p>Start skew over the shards: {:.3} ms.</p>",
                skew as f64 / 1000.0
            );
        }
    }
    let skews: Vec<Vec<String>> = r
        .cells
        .iter()
        .filter_map(|c| {
            c.shard_skew_ms()
                .map(|s| vec![c.label.clone(), format!("{s:.1} ms")])
        })
        .collect();
    if r.shard_count > 1 && !skews.is_empty() {
        o.push_str("<h3>Start skew per cell</h3><p>Shards begin measuring each cell at one instant, named once every shard has opened its share (a fanout cell at an instant computed from its release); the skew is how far apart their measured phases actually began.</p>");
        table(o, &["Cell", "Skew"], &skews);
    }
    let clocks = r.clock_lines();
    if !clocks.is_empty() {
        o.push_str("<h3>Shard clocks</h3><p>Each shard's wall clock against the conductor's (offset ± uncertainty, probes taken); the instants above are on the conductor's clock.</p><ul>");
        for line in &clocks {
            let _ = write!(o, "<li>{}</li>", escape(line));
        }
        o.push_str("</ul>");
    }
    o.push_str("</section>");
}

/// The spec as dotted paths and values (`connect.batchSize  500`), in two columns: shorter
/// than the JSON and easier to scan.
fn spec(o: &mut String, r: &RunResult) {
    o.push_str("<section id=\"spec\"><h2>Test spec</h2>");
    match &r.spec {
        Some(spec) => {
            let mut rows = Vec::new();
            flatten(spec, "", &mut rows);
            let defaulted = crate::spec_copy::defaulted(spec);
            // A row is a default when its field or a section holding it is.
            let is_default = |path: &str| {
                defaulted.iter().any(|d| {
                    path.strip_prefix(d.as_str())
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
                })
            };
            let (left, set): (Vec<_>, Vec<_>) = rows.into_iter().partition(|r| is_default(&r[0]));
            o.push_str("<p class=\"muted\">As run; secrets redacted.</p>");
            spec_tables(o, &set);
            if !left.is_empty() {
                let _ = write!(
                    o,
                    "<details open><summary>Left at their defaults ({} fields; some serve other scenarios)</summary>",
                    left.len()
                );
                spec_tables(o, &left);
                o.push_str("</details>");
            }
        }
        None => o.push_str("<p class=\"muted\">This result does not carry its spec.</p>"),
    }
    o.push_str("</section>");
}

/// Field and value rows side by side in two tables.
fn spec_tables(o: &mut String, rows: &[Vec<String>]) {
    o.push_str("<div class=\"spec\">");
    let half = rows.len().div_ceil(2).max(1);
    for part in rows.chunks(half) {
        table(o, &["Field", "Value"], part);
    }
    o.push_str("</div>");
}

fn flatten(v: &Value, path: &str, rows: &mut Vec<Vec<String>>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, child) in map {
                flatten(child, &join(k), rows);
            }
        }
        Value::Array(items) if items.iter().any(|i| i.is_object() || i.is_array()) => {
            for (i, child) in items.iter().enumerate() {
                flatten(child, &format!("{path}[{i}]"), rows);
            }
        }
        Value::Array(items) => rows.push(vec![
            path.to_string(),
            items.iter().map(scalar).collect::<Vec<_>>().join(", "),
        ]),
        other => rows.push(vec![path.to_string(), scalar(other)]),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(_) => "{}".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{report, shard};

    #[test]
    fn every_part_is_there() {
        let page = html(&report());
        for part in [
            "<!DOCTYPE html>",
            "id=\"verdict\"",
            "id=\"cells\"",
            "id=\"latency\"",
            "id=\"throughput\"",
            "id=\"shards\"",
            "id=\"spec\"",
            "<table>",
            "rtt.p99 &lt; 5ms",
            "Findings",
            "Start skew over the shards: 12.345 ms",
            "</html>",
        ] {
            assert!(page.contains(part), "{part} missing");
        }
        // A latency chart, and three per cell with samples (rates, open connections, p99).
        assert_eq!(page.matches("<svg").count(), 1 + 3 * 2, "{page}");
        // Self-contained: nothing to fetch, nothing to run.
        for external in ["<script", "<link", "src=", "@import", "url("] {
            assert!(!page.contains(external), "{external} in the page");
        }
    }

    #[test]
    fn reconnects_are_tabled_per_disruption_and_marked_on_the_charts() {
        let mut r = crate::fixtures::report();
        let mut rc = crate::reconnect::Reconnects::new(
            "exponential (100ms..5s doubling, full jitter)".into(),
            true,
            &[(4_000, "kill 1 replica at 4s".into())],
        );
        for i in 0..250 {
            rc.dropped(1);
            rc.attempt(1, 4_000 + i);
            rc.back(
                1,
                4_010 + i,
                std::time::Duration::from_millis(120),
                std::time::Duration::from_millis(3),
            );
        }
        r.cells[1].measure.reconnect = Some(rc);
        let page = html(&r);
        for part in [
            "id=\"reconnects\"",
            "Policy: exponential (100ms..5s doubling, full jitter).",
            "<td>kill 1 replica at 4s</td><td>250</td><td>250</td><td>0</td><td>0</td><td>250</td>",
            // The busiest 100 ms held 100 attempts: 1,000 a second.
            "<td>1000</td>",
            ">kill 1 replica at 4s</text>",
        ] {
            assert!(page.contains(part), "{part} missing");
        }
        // On each of the cell's three charts over time, none of the other cell's.
        assert_eq!(page.matches(">kill 1 replica at 4s</text>").count(), 3);
        // Not a fanout: no gaps to show.
        assert!(
            !page.contains("Missed by its dropped subscribers"),
            "{page}"
        );
    }

    #[test]
    fn a_fanouts_reconnects_show_what_its_dropped_subscribers_missed() {
        let mut r = crate::fixtures::fanout();
        let mut rc = crate::reconnect::Reconnects::new(
            "fixed (every 300ms)".into(),
            false,
            &[(1_000, "close 50% at 1s".into())],
        );
        for _ in 0..17 {
            rc.dropped(1);
            rc.gaps(Some(1), 31);
        }
        rc.gaps(None, 0);
        r.cells[0].measure.reconnect = Some(rc);
        let page = html(&r);
        for part in [
            "<th>Missed by its dropped subscribers</th>",
            "<td>fan-out gaps 527 (after 17 of its drops)</td>",
            "gaps no drop explains (in subscribers' deliveries before any drop of theirs): 0.",
        ] {
            assert!(page.contains(part), "{part} missing");
        }
    }

    #[test]
    fn a_fanout_shows_its_deliveries_gaps_and_latency_over_time() {
        let page = html(&crate::fixtures::fanout());
        for part in [
            "<th>Deliveries/s</th>",
            "<td>10000</td>",
            "<td>99.995%</td>",
            "id=\"deliveries\"",
            "<th>Gaps</th>",
            "<th>Duplicates</th>",
            "Slowest subscribers",
            "<td>17</td>",
            "<td>42.00 ms</td>",
            "The server's topic counters",
            "<td>100.1K</td>",
            "Delivery latency by percentile, per cell",
            "publishes and deliveries per second",
            "deliveries/s",
            "delivery latency p99 per sample",
            "gaps == 0",
            "the server counted 100 deliveries that no subscriber received",
        ] {
            assert!(page.contains(part), "{part} missing");
        }
        // The percentile chart, and the cell's rates, p99 and open connections.
        assert_eq!(page.matches("<svg").count(), 1 + 3, "{page}");
        assert!(
            !page.contains("round-trip p99"),
            "a fan-out times no round trip"
        );
    }

    #[test]
    fn the_kernel_figures_and_their_finding_are_on_the_page() {
        let mut r = shard(0, 10, 1, 1);
        assert!(
            !html(&r).contains("<h3>Kernel</h3>"),
            "none read, none shown"
        );
        r.cells[0].kernel = vec![crate::fixtures::kernel(0, 4026531840, 3)];
        let page = html(&r);
        for part in [
            "<h3>Kernel</h3>",
            "<td class=\"l\">net:[4026531840]</td><td class=\"l\">shard 0</td><td class=\"l\">TcpExtListenOverflows +3, TcpExtListenDrops +3, TcpActiveOpens +100</td>",
            "the kernel dropped connections at a full accept queue (ListenOverflows)",
        ] {
            assert!(page.contains(part), "{part} missing");
        }
    }

    #[test]
    fn user_text_is_escaped() {
        let mut r = shard(0, 10, 1, 1);
        r.test = "<script>alert(1)</script>".into();
        r.target = "ws://x/?a=1&b=\"2\"".into();
        r.cells[0].label = "<b>".into();
        // No finding, whose own markup is bold: any `<b>` would be the label unescaped.
        r.cells[0].measure.counts.failed.clear();
        r.notes.push("it's <i>".into());
        r.spec = Some(serde_json::json!({"target": {"url": "</td><img src=x>"}}));
        let page = html(&r);
        assert!(!page.contains("<script>") && !page.contains("<img") && !page.contains("<b>"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("ws://x/?a=1&amp;b=&quot;2&quot;"));
        assert!(page.contains("it&#39;s &lt;i&gt;"));
    }

    /// A failure's evidence is the server's text (a body line, a header): it reaches the
    /// page as a finding, escaped.
    #[test]
    fn failure_evidence_is_shown_escaped() {
        let mut r = shard(0, 10, 1, 1);
        r.cells[0]
            .measure
            .counts
            .witness("refused", "HTTP 500 <script>alert(\"x\")</script> & more");
        let page = html(&r);
        assert!(!page.contains("<script>"), "{page}");
        assert!(
            page.contains(
                "refused: 1 of 100 attempts; e.g. HTTP 500 &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more"
            ),
            "{page}"
        );
    }

    #[test]
    fn a_result_without_samples_or_spec_still_renders() {
        let r = shard(1, 10, 1, 1);
        assert!(r.cells.iter().all(|c| c.timeline.is_empty()) && r.spec.is_none());
        let page = html(&r);
        assert!(page.contains("no samples over time"));
        assert!(page.contains("does not carry its spec"));
        assert_eq!(page.matches("<svg").count(), 1);
        assert!(page.ends_with("</html>\n"));
    }

    #[test]
    fn a_short_cell_is_charted_in_steps_of_its_timeline() {
        use crate::timeline::{Recorder, Totals};
        let mut r = shard(0, 10, 1, 1);
        // Half a second of pings in 100 ms steps: 20 answered a step, 200 a second.
        let mut rec = Recorder::new(Totals::default(), 100);
        for at in 0..5u32 {
            let n = 20 * u64::from(at + 1);
            rec.tick(
                at,
                Totals {
                    sent: n,
                    received: n,
                    open: 10,
                    pings_answered: n,
                    pings_lost: 0,
                },
                None,
            );
        }
        (r.cells[0].timeline_step_ms, r.cells[0].timeline) = rec.finish();
        let page = html(&r);
        assert_eq!(page.matches("<svg").count(), 1 + 2, "{page}");
        assert!(page.contains("a sample every 100 ms"), "{page}");
        // The axis is marked in seconds, at fractions of one.
        assert!(page.contains(">0.2<") && page.contains(">0.4<"), "{page}");
        // Rates per second, not per step: the axis reaches 200/s.
        assert!(page.contains(">200<"), "{page}");
        // Sampled once, a cell has no line to draw, and the page says why.
        let mut once = shard(0, 10, 1, 1);
        once.cells[0].timeline.truncate(0);
        once.cells[0].timeline.push(r.cells[0].timeline[0].clone());
        let page = html(&once);
        assert!(page.contains("long enough to be sampled twice"), "{page}");
    }

    #[test]
    fn the_spec_reads_as_dotted_fields() {
        let mut rows = Vec::new();
        let spec = serde_json::json!({
            "connections": [100, 1000],
            "connect": {"batchSize": 500, "timeout": "10s"},
            "loadgen": {"env": [{"name": "A", "value": "(redacted)"}], "tuning": {}},
            "target": {"url": "ws://x"}
        });
        flatten(&spec, "", &mut rows);
        let text: Vec<String> = rows.iter().map(|r| r.join(" = ")).collect();
        assert_eq!(
            text,
            vec![
                "connect.batchSize = 500",
                "connect.timeout = 10s",
                "connections = 100, 1000",
                "loadgen.env[0].name = A",
                "loadgen.env[0].value = (redacted)",
                "loadgen.tuning = {}",
                "target.url = ws://x",
            ]
        );
    }

    #[test]
    fn the_spec_shows_what_was_set_before_the_defaults() {
        let page = html(&report());
        let set = page.find("connections</td>").expect("connections listed");
        let defaults = page.find("<details open>").expect("the defaults, after");
        let duration = page.find(">duration</td>").expect("duration listed");
        assert!(set < defaults && defaults < duration, "{page}");
    }

    #[test]
    fn a_single_process_run_has_no_shards_to_align() {
        let mut r = shard(0, 10, 1, 1);
        r.shard_info.clear();
        r.shard_count = 1;
        assert!(html(&r).contains("One process ran every connection"));
        r.shard_count = 2;
        assert!(html(&r).contains("Shard 0 of 2"));
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc(1_795_930_482_123_456), "2026-11-29 05:34:42.123 UTC");
        assert_eq!(utc(951_782_400_000_000), "2000-02-29 00:00:00.000 UTC");
    }
}
