//! Pass/fail thresholds: `rtt.p99 < 5ms`, `errors < 0.1%`, `throughput > 1M msg/s`.
//!
//! A threshold names a figure of the report, a comparison and a value with a unit. Values are
//! held in canonical units (seconds, fractions, per second) so a report never converts.

use crate::units::{Percent, PercentError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Statistic of a latency distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stat {
    Min,
    Mean,
    Max,
    /// A percentile, 0..100 (e.g. 99.9).
    P(f64),
}

impl Stat {
    fn parse(s: &str) -> Option<Stat> {
        match s {
            "min" => Some(Stat::Min),
            "mean" | "avg" => Some(Stat::Mean),
            "max" => Some(Stat::Max),
            _ => {
                let p: f64 = s.strip_prefix('p')?.parse().ok()?;
                (p > 0.0 && p < 100.0).then_some(Stat::P(p))
            }
        }
    }
}

impl fmt::Display for Stat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stat::Min => f.write_str("min"),
            Stat::Mean => f.write_str("mean"),
            Stat::Max => f.write_str("max"),
            Stat::P(p) => write!(f, "p{p}"),
        }
    }
}

/// A latency distribution the report keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Latency {
    /// Round trip; from the intended send time in open-loop scenarios (coordinated-omission
    /// corrected), from the actual send time otherwise.
    Rtt,
    /// Round trip from the actual send time, always.
    RttRaw,
    /// Whole handshake: TCP connect + HTTP upgrade + ready.
    Connect,
    /// A fan-out delivery, from its intended publish instant to its receipt.
    Fanout,
}

impl Latency {
    pub fn name(self) -> &'static str {
        match self {
            Latency::Rtt => "rtt",
            Latency::RttRaw => "rtt_raw",
            Latency::Connect => "connect",
            Latency::Fanout => "fanout",
        }
    }
}

/// What a threshold judges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    Latency(Latency, Stat),
    /// Messages sent per second by the clients.
    Throughput,
    /// Messages received per second by the clients (echoes, pongs, broadcasts).
    ReceivedRate,
    /// Failed connection attempts over attempts.
    Errors,
    /// Unanswered pings or echoes over those sent.
    Loss,
    /// Connections that lived through the test over those opened.
    Survival,
    /// Server-counted messages over client-sent messages.
    Delivery,
    /// Established connections per second during the connect phase.
    ConnectRate,
    /// Largest connection count held (connectionLimit).
    Limit,
    /// Fan-out deliveries expected and never received (a count).
    Gaps,
    /// Fan-out deliveries received over those expected.
    Completeness,
    /// Fan-out deliveries per second, over subscribers.
    Deliveries,
}

/// The unit family a metric's value is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Time,
    Fraction,
    Rate,
    Count,
}

impl Metric {
    /// Every metric name, for error messages.
    pub const NAMES: &'static str = "rtt.<stat>, rtt_raw.<stat>, connect.<stat>, fanout.<stat> (stat: p50, p90, p99, p99.9, min, mean, max), \
         throughput, received_rate, errors, loss, survival, delivery, connect_rate, limit, gaps, completeness, deliveries";

    fn parse(s: &str) -> Option<Metric> {
        if let Some((dist, stat)) = s.split_once('.') {
            let latency = match dist {
                "rtt" => Latency::Rtt,
                "rtt_raw" => Latency::RttRaw,
                "connect" => Latency::Connect,
                "fanout" => Latency::Fanout,
                _ => return None,
            };
            return Stat::parse(stat).map(|st| Metric::Latency(latency, st));
        }
        Some(match s {
            "throughput" => Metric::Throughput,
            "received_rate" => Metric::ReceivedRate,
            "errors" => Metric::Errors,
            "loss" => Metric::Loss,
            "survival" => Metric::Survival,
            "delivery" => Metric::Delivery,
            "connect_rate" => Metric::ConnectRate,
            "limit" => Metric::Limit,
            "gaps" => Metric::Gaps,
            "completeness" => Metric::Completeness,
            "deliveries" => Metric::Deliveries,
            _ => return None,
        })
    }

    fn unit(self) -> Unit {
        match self {
            Metric::Latency(..) => Unit::Time,
            Metric::Errors
            | Metric::Loss
            | Metric::Survival
            | Metric::Delivery
            | Metric::Completeness => Unit::Fraction,
            Metric::Throughput
            | Metric::ReceivedRate
            | Metric::ConnectRate
            | Metric::Deliveries => Unit::Rate,
            Metric::Limit | Metric::Gaps => Unit::Count,
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Metric::Latency(l, s) => write!(f, "{}.{s}", l.name()),
            Metric::Throughput => f.write_str("throughput"),
            Metric::ReceivedRate => f.write_str("received_rate"),
            Metric::Errors => f.write_str("errors"),
            Metric::Loss => f.write_str("loss"),
            Metric::Survival => f.write_str("survival"),
            Metric::Delivery => f.write_str("delivery"),
            Metric::ConnectRate => f.write_str("connect_rate"),
            Metric::Limit => f.write_str("limit"),
            Metric::Gaps => f.write_str("gaps"),
            Metric::Completeness => f.write_str("completeness"),
            Metric::Deliveries => f.write_str("deliveries"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    /// Equal: for counts (`gaps == 0`).
    Eq,
}

impl Op {
    pub fn holds(self, actual: f64, bound: f64) -> bool {
        match self {
            Op::Lt => actual < bound,
            Op::Le => actual <= bound,
            Op::Gt => actual > bound,
            Op::Ge => actual >= bound,
            Op::Eq => actual == bound,
        }
    }
    fn as_str(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Eq => "==",
        }
    }
}

/// One parsed threshold; `value` is in canonical units (seconds, fraction, per second).
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub metric: Metric,
    pub op: Op,
    pub value: f64,
    /// As the user wrote it.
    pub text: String,
}

impl Threshold {
    pub fn holds(&self, actual: f64) -> bool {
        self.op.holds(actual, self.value)
    }
}

/// Splits `1.5M` into 1_500_000; also `K`, `G`.
fn scaled(num: &str) -> Option<f64> {
    let (n, mult) = match num.chars().last()? {
        'k' | 'K' => (&num[..num.len() - 1], 1e3),
        'M' => (&num[..num.len() - 1], 1e6),
        'G' => (&num[..num.len() - 1], 1e9),
        _ => (num, 1.0),
    };
    n.parse::<f64>().ok().map(|v| v * mult)
}

/// Why a threshold as written is none.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ThresholdError {
    #[error("{text:?} has no comparison; write METRIC < VALUE, e.g. \"rtt.p99 < 5ms\"")]
    NoComparison { text: String },
    #[error("unknown metric {name:?} in {text:?}; known: {}", Metric::NAMES)]
    UnknownMetric { name: String, text: String },
    #[error("in {text:?}: {source}")]
    Value {
        text: String,
        #[source]
        source: ValueError,
    },
}

/// Why a threshold's value does not read in its metric's unit (`raw`: the value as written).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    #[error("{raw:?} needs a time unit: us, ms or s")]
    NoTimeUnit { raw: String },
    #[error("{raw:?} is not a number with a unit")]
    NotANumberWithAUnit { raw: String },
    #[error("unknown time unit {unit:?}: use us, ms or s")]
    UnknownTimeUnit { unit: String },
    #[error(transparent)]
    Percent(#[from] PercentError),
    #[error("{raw:?} is not a number (write e.g. 100000, 1.5M, 20K msg/s)")]
    NotANumber { raw: String },
}

fn parse_value(metric: Metric, raw: &str) -> Result<f64, ValueError> {
    let raw = raw.trim();
    match metric.unit() {
        Unit::Time => {
            let split = raw
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(|| ValueError::NoTimeUnit {
                    raw: raw.to_string(),
                })?;
            let (n, unit) = raw.split_at(split);
            let n: f64 = n.parse().map_err(|_| ValueError::NotANumberWithAUnit {
                raw: raw.to_string(),
            })?;
            let scale = match unit.trim() {
                "us" | "µs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                other => {
                    return Err(ValueError::UnknownTimeUnit {
                        unit: other.to_string(),
                    });
                }
            };
            Ok(n * scale)
        }
        Unit::Fraction => Ok(Percent::parse(raw)?.0),
        Unit::Rate | Unit::Count => {
            let num = raw
                .trim_end_matches("msg/s")
                .trim_end_matches("deliveries/s")
                .trim_end_matches("conn/s")
                .trim_end_matches("/s")
                .trim_end_matches("connections")
                .trim();
            scaled(num).ok_or_else(|| ValueError::NotANumber {
                raw: raw.to_string(),
            })
        }
    }
}

impl FromStr for Threshold {
    type Err = ThresholdError;

    fn from_str(text: &str) -> Result<Self, ThresholdError> {
        let t = text.trim();
        let (pos, op_len, op) = ["==", "<=", ">=", "<", ">"]
            .iter()
            .find_map(|sym| t.find(sym).map(|i| (i, sym.len(), *sym)))
            .ok_or_else(|| ThresholdError::NoComparison {
                text: t.to_string(),
            })?;
        let op = match op {
            "==" => Op::Eq,
            "<=" => Op::Le,
            ">=" => Op::Ge,
            "<" => Op::Lt,
            _ => Op::Gt,
        };
        let name = t[..pos].trim();
        let metric = Metric::parse(name).ok_or_else(|| ThresholdError::UnknownMetric {
            name: name.to_string(),
            text: t.to_string(),
        })?;
        let value =
            parse_value(metric, &t[pos + op_len..]).map_err(|source| ThresholdError::Value {
                text: t.to_string(),
                source,
            })?;
        Ok(Threshold {
            metric,
            op,
            value,
            text: t.to_string(),
        })
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.metric, self.op.as_str(), self.value)
    }
}

impl Serialize for Threshold {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn th(s: &str) -> Threshold {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_the_documented_forms() {
        let t = th("rtt.p99 < 5ms");
        assert_eq!(
            (t.metric, t.op),
            (Metric::Latency(Latency::Rtt, Stat::P(99.0)), Op::Lt)
        );
        assert!((t.value - 0.005).abs() < 1e-12);
        assert_eq!(
            th("rtt_raw.p99.9<=250us").metric,
            Metric::Latency(Latency::RttRaw, Stat::P(99.9))
        );
        assert!((th("errors < 0.1%").value - 0.001).abs() < 1e-12);
        assert_eq!(th("throughput > 1M msg/s").value, 1e6);
        assert_eq!(th("connect_rate >= 2.5K conn/s").value, 2500.0);
        assert_eq!(th("connect.max < 2s").value, 2.0);
        assert_eq!(th("limit >= 10000").value, 10000.0);
        assert_eq!(th("survival >= 99.9%").op, Op::Ge);
    }

    #[test]
    fn the_fanout_figures_parse_and_judge() {
        let p99 = th("fanout.p99 < 50ms");
        assert_eq!(p99.metric, Metric::Latency(Latency::Fanout, Stat::P(99.0)));
        assert!(p99.holds(0.049) && !p99.holds(0.05));
        let gaps = th("gaps == 0");
        assert_eq!(
            (gaps.metric, gaps.op, gaps.value),
            (Metric::Gaps, Op::Eq, 0.0)
        );
        assert!(gaps.holds(0.0) && !gaps.holds(1.0));
        let complete = th("completeness > 99.99%");
        assert_eq!(complete.metric, Metric::Completeness);
        assert!(complete.holds(0.99995) && !complete.holds(0.9998));
        assert_eq!(th("deliveries >= 1.5M/s").value, 1.5e6);
        assert_eq!(th("deliveries > 20K deliveries/s").value, 20_000.0);
        assert_eq!(th("gaps <= 10").op, Op::Le);
        assert_eq!(th("fanout.max<=1s").metric.to_string(), "fanout.max");
        assert_eq!(th("gaps == 0").to_string(), "gaps == 0");
    }

    #[test]
    fn errors_say_what_to_write() {
        let e = |s: &str| s.parse::<Threshold>().expect_err(s).to_string();
        assert!(e("rtt.p99 5ms").contains("no comparison"));
        assert!(e("latency < 5ms").contains("unknown metric \"latency\""));
        assert!(e("latency < 5ms").contains("rtt.<stat>"));
        assert!(e("rtt.p100 < 5ms").contains("unknown metric"));
        assert!(e("rtt.p99 < 5").contains("time unit"));
        assert!(e("rtt.p99 < 5 days").contains("unknown time unit"));
        assert!(e("errors < lots").contains("percentage"));
        assert!(e("throughput > fast").contains("1.5M"));
        assert_eq!(
            e("rtt.p99 < 5 days"),
            "in \"rtt.p99 < 5 days\": unknown time unit \"days\": use us, ms or s"
        );
        assert_eq!(
            e("errors < lots"),
            "in \"errors < lots\": \"lots\" is not a percentage; write e.g. 5% or 0.05"
        );
        // The value's own error is kept as the source, for a caller that walks the chain.
        let value = "gaps < many"
            .parse::<Threshold>()
            .expect_err("not a number");
        let source = std::error::Error::source(&value).map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("\"many\" is not a number (write e.g. 100000, 1.5M, 20K msg/s)")
        );
    }

    #[test]
    fn comparisons_hold_as_written() {
        assert!(th("rtt.p99 < 5ms").holds(0.004));
        assert!(!th("rtt.p99 < 5ms").holds(0.005));
        assert!(th("rtt.p99 <= 5ms").holds(0.005));
        assert!(th("throughput > 1M").holds(1_000_001.0));
    }
}
