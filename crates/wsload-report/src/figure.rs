//! The figure a threshold judges in a cell, or why the cell never measured it. A figure
//! computed from nothing (a loss of 0 out of 0 pings, no gap among no deliveries, a rate of
//! no messages) reads as a perfect score, so every threshold says here what its figure needs
//! from the counts, and a cell without it fails the check with that reason instead of passing
//! by absence:
//!
//! | metric | measured when |
//! |---|---|
//! | `errors` | a connection was attempted |
//! | `connect.*`, `connect_rate` | a connection was established |
//! | `survival` | a connection was established |
//! | `loss` | a connection was established and a message expecting an answer sent |
//! | `rtt.*`, `rtt_raw.*` | a round trip was answered |
//! | `throughput` | a message was sent in the measured time |
//! | `received_rate` | a message was received in the measured time |
//! | `delivery` | the servers' counter was read and a message was sent |
//! | `fanout.*`, `gaps`, `completeness`, `deliveries` | a subscriber received a delivery of the window |
//! | `limit` | a probe held (the run's, not a cell's) |

use crate::result::{CellResult, Probe};
use wsload_spec::Scenario;
use wsload_spec::scenario::Motion;
use wsload_spec::threshold::{Latency, Metric, Stat};

/// What is put before every reason a figure was not measured, in checks and reports.
pub const NOT_MEASURED: &str = "not measured: ";

/// Why `cell` established no connection: `0 connections were attempted`, or `no connection
/// was established (5 attempted: refused x5)`.
pub(crate) fn no_connection(cell: &CellResult) -> String {
    let c = &cell.measure.counts;
    if c.attempted == 0 {
        return "0 connections were attempted".to_string();
    }
    let why: Vec<String> = c
        .failed
        .iter()
        .map(|(k, v)| format!("{} x{v}", k.label()))
        .collect();
    format!(
        "no connection was established ({} attempted: {})",
        c.attempted,
        if why.is_empty() {
            "no reason recorded".to_string()
        } else {
            why.join(", ")
        }
    )
}

/// A cell whose every connection ended before a round trip was measured (none survived):
/// how many, and why they ended.
pub(crate) fn none_survived(cell: &CellResult) -> String {
    let c = &cell.measure.counts;
    let why: Vec<String> = c
        .dropped
        .iter()
        .map(|(k, v)| format!("{} x{v}", k.label()))
        .collect();
    format!(
        "no connection survived to measure: all {} ended before any round trip ({})",
        c.connected,
        if why.is_empty() {
            "no reason recorded".to_string()
        } else {
            why.join(", ")
        }
    )
}

/// A fanout cell whose subscribers received nothing of the window: why, as far as the
/// tallies tell (nothing published, or published and never delivered); `None` when something
/// was delivered.
pub(crate) fn nothing_delivered(cell: &CellResult) -> Option<String> {
    let f = cell.figures.fanout.as_ref();
    // A subscriber behind reads the window's time in what was published before it: measured
    // (and judged on its completeness), not nothing.
    if f.is_some_and(|f| f.delivered > 0 || f.read_per_sec > 0.0) {
        return None;
    }
    let (publishes, expected) = f.map_or((0, 0), |f| (f.publishes, f.expected));
    Some(if publishes == 0 {
        "no delivery was received and nothing was published in the measured window".to_string()
    } else {
        format!("no delivery was received ({publishes} publishes, {expected} deliveries expected)")
    })
}

/// What a scenario's measured message is called: pingLatency and sustainedHold send pings,
/// the others messages that expect an answer.
fn answered_message(scenario: Scenario) -> &'static str {
    match scenario.profile().motion {
        Motion::Pings | Motion::Hold | Motion::Probe => "pings",
        Motion::Close
        | Motion::Saturate
        | Motion::Blast
        | Motion::PingPong
        | Motion::Paced
        | Motion::Fanout => "messages expecting an answer",
    }
}

impl CellResult {
    /// The value threshold metric `m` judges in this cell of a `scenario` run, in canonical
    /// units, or why the cell did not measure it (without [`NOT_MEASURED`]).
    pub fn figure(&self, m: Metric, scenario: Scenario) -> Result<f64, String> {
        let f = &self.figures;
        let c = &self.measure.counts;
        let h = &self.measure.hists;
        // Only the share of attempts that failed is a figure of a cell that connected nothing.
        if c.connected == 0 && !matches!(m, Metric::Errors | Metric::Limit) {
            return Err(no_connection(self));
        }
        let timed = || match self.measured_secs {
            s if s <= 0.0 => Err("the cell had no measured time".to_string()),
            s if s < crate::result::MIN_RATE_SECS => Err(format!(
                "the cell measured for {:.1} ms, too short for a rate",
                s * 1000.0
            )),
            _ => Ok(()),
        };
        Ok(match m {
            Metric::Latency(which, stat) => {
                let hist = match which {
                    Latency::Rtt => &h.rtt,
                    Latency::RttRaw => &h.rtt_raw,
                    Latency::Connect => &h.connect,
                    Latency::Fanout => &h.fanout,
                };
                if hist.is_empty() {
                    return Err(match which {
                        Latency::Rtt | Latency::RttRaw if c.expected == 0 => {
                            format!("0 {} were sent", answered_message(scenario))
                        }
                        Latency::Rtt | Latency::RttRaw => format!(
                            "no round trip was answered ({} sent expecting an answer)",
                            c.expected
                        ),
                        Latency::Connect => "no handshake was timed".to_string(),
                        Latency::Fanout => nothing_delivered(self)
                            .unwrap_or_else(|| "no delivery was timed".to_string()),
                    });
                }
                match stat {
                    Stat::Min => hist.min(),
                    Stat::Mean => hist.mean(),
                    Stat::Max => hist.max(),
                    Stat::P(p) => hist.percentile(p),
                }
            }
            Metric::Throughput if c.sent == 0 => return Err("0 messages were sent".into()),
            Metric::Throughput => {
                timed()?;
                f.sent_per_sec
            }
            Metric::ReceivedRate if c.received == 0 => {
                return Err(format!("0 messages were received ({} sent)", c.sent));
            }
            Metric::ReceivedRate => {
                timed()?;
                f.received_per_sec
            }
            Metric::Errors if c.attempted == 0 => {
                return Err("0 connections were attempted".into());
            }
            Metric::Errors => f.errors,
            Metric::Loss if c.expected == 0 => {
                return Err(format!("0 {} were sent", answered_message(scenario)));
            }
            Metric::Loss => f.loss,
            Metric::Survival => f.survival,
            Metric::Delivery if self.server_received.is_none() => {
                return Err("the servers' message counter was not read".into());
            }
            Metric::Delivery if c.sent_with_warmup == 0 => {
                return Err("0 messages were sent".into());
            }
            Metric::Delivery => f.delivery.unwrap_or(0.0),
            Metric::ConnectRate if self.connect_secs <= 0.0 => {
                return Err("no time was spent connecting".into());
            }
            Metric::ConnectRate => f.connect_rate,
            Metric::Limit => return Err("limit is the run's figure, not a cell's".into()),
            Metric::Gaps | Metric::Completeness | Metric::Deliveries => {
                if let Some(why) = nothing_delivered(self) {
                    return Err(why);
                }
                let Some(fanout) = f.fanout.as_ref() else {
                    return Err("no fan-out was tallied".into());
                };
                match m {
                    Metric::Gaps => fanout.gaps as f64,
                    Metric::Deliveries => fanout.deliveries_per_sec,
                    _ => fanout
                        .completeness
                        .ok_or_else(|| "no delivery was expected".to_string())?,
                }
            }
        })
    }
}

/// The run's largest connection count that held, or why there is none: a search whose
/// probes never held measured no limit.
pub(crate) fn limit(limit: Option<u32>, probes: &[Probe]) -> Result<f64, String> {
    match limit {
        Some(l) => Ok(f64::from(l)),
        None if probes.is_empty() => Err("no probe ran".into()),
        None => Err(format!(
            "none of the {} probes held its connections",
            probes.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;
    use crate::measure::{ConnectError, Measure};

    /// A metric by its name in a threshold (`loss`, `rtt.p99`).
    fn metric(name: &str) -> Metric {
        let unit = match name {
            n if n.contains('.') => "1ms",
            "throughput" | "received_rate" | "connect_rate" | "deliveries" => "1/s",
            _ => "1",
        };
        let t: wsload_spec::Threshold = format!("{name} < {unit}").parse().expect("threshold");
        t.metric
    }

    /// The fixture's cell, its counts replaced by `measure`.
    fn cell(measure: Measure) -> CellResult {
        let mut c = shard(0, 10, 1, 0).cells.remove(0);
        c.measure = measure;
        c.compute();
        c
    }

    fn connected(n: u64) -> Measure {
        let mut m = Measure::default();
        m.counts.attempted = n;
        m.counts.connected = n;
        m.counts.survived = n;
        m
    }

    #[test]
    fn figures_of_nothing_are_not_measured_and_say_what_was_missing() {
        let held = cell(connected(3));
        let why = |c: &CellResult, m: &str, s: Scenario| c.figure(metric(m), s).err();
        for (m, scenario, reason) in [
            ("loss", Scenario::SustainedHold, "0 pings were sent"),
            (
                "loss",
                Scenario::ConstantRate,
                "0 messages expecting an answer were sent",
            ),
            ("rtt.p99", Scenario::PingLatency, "0 pings were sent"),
            ("throughput", Scenario::Blast, "0 messages were sent"),
            (
                "received_rate",
                Scenario::Throughput,
                "0 messages were received (0 sent)",
            ),
            (
                "connect.p99",
                Scenario::ConnectionStorm,
                "no handshake was timed",
            ),
            (
                "gaps",
                Scenario::Fanout,
                "no delivery was received and nothing was published in the measured window",
            ),
            (
                "delivery",
                Scenario::Throughput,
                "the servers' message counter was not read",
            ),
        ] {
            assert_eq!(why(&held, m, scenario).as_deref(), Some(reason), "{m}");
        }
        // What was measured still is: three of three held.
        assert_eq!(
            held.figure(metric("survival"), Scenario::SustainedHold),
            Ok(1.0)
        );
        // Unanswered pings are a loss of 100%, measured; their latency is not.
        let mut unanswered = connected(3);
        unanswered.counts.expected = 9;
        unanswered.counts.lost = 9;
        let unanswered = cell(unanswered);
        assert_eq!(
            unanswered.figure(metric("loss"), Scenario::PingLatency),
            Ok(1.0)
        );
        assert_eq!(
            why(&unanswered, "rtt.p50", Scenario::PingLatency).as_deref(),
            Some("no round trip was answered (9 sent expecting an answer)")
        );
    }

    /// A throughput cell closed 2 ms in (issue 39: "Msg/s 61.6K" for 128 messages): no rate in
    /// the figures, `-` in the table, and a threshold on it not measured, saying why.
    #[test]
    fn a_window_too_short_for_a_rate_gives_none() {
        let mut m = connected(2);
        m.counts.sent = 128;
        m.counts.received = 128;
        m.counts.bytes_sent = 128 * 1024;
        let mut c = shard(0, 10, 1, 0).cells.remove(0);
        c.measure = m;
        c.measured_secs = 0.002;
        c.compute();
        assert_eq!(
            (c.figures.sent_per_sec, c.figures.received_per_sec),
            (0.0, 0.0)
        );
        assert_eq!(
            c.figure(metric("throughput"), Scenario::Throughput)
                .err()
                .as_deref(),
            Some("the cell measured for 2.0 ms, too short for a rate")
        );
        let mut r = shard(0, 10, 1, 0);
        r.scenario = Scenario::Throughput;
        r.cells = vec![c.clone()];
        let table = crate::table::cell_table(&r);
        assert_eq!(
            table.rows[0][1..5],
            ["-", "-", "-", "-"],
            "{:?}",
            table.rows
        );
        // A tenth of a second is a rate.
        c.measured_secs = 0.1;
        c.compute();
        assert_eq!(c.figures.sent_per_sec, 1280.0);
    }

    #[test]
    fn a_cell_that_connected_nothing_measured_only_its_errors() {
        let mut refused = Measure::default();
        refused.counts.attempted = 5;
        for _ in 0..5 {
            refused.counts.fail(ConnectError::Refused);
        }
        let c = cell(refused);
        assert_eq!(c.figure(metric("errors"), Scenario::PingLatency), Ok(1.0));
        for m in [
            "loss",
            "survival",
            "connect_rate",
            "connect.max",
            "throughput",
        ] {
            assert_eq!(
                c.figure(metric(m), Scenario::SustainedHold)
                    .err()
                    .as_deref(),
                Some("no connection was established (5 attempted: refused x5)"),
                "{m}"
            );
        }
        // Nothing attempted (a shard given no connections): not even errors.
        let none = cell(Measure::default());
        assert_eq!(
            none.figure(metric("errors"), Scenario::ConnectionStorm)
                .err()
                .as_deref(),
            Some("0 connections were attempted")
        );
    }
}
