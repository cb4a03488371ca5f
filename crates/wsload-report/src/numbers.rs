//! How the reports write numbers: durations, counts, rates, and a threshold's figure in the
//! units it is written in.

use wsload_spec::threshold::Metric;

/// A threshold's figure in the units it is written in.
pub fn in_units(m: Metric, v: f64) -> String {
    match m {
        Metric::Latency(..) => ms(v),
        Metric::Errors
        | Metric::Loss
        | Metric::Survival
        | Metric::Delivery
        | Metric::Completeness => format!("{:.3}%", v * 100.0),
        Metric::Throughput | Metric::ReceivedRate => format!("{} msg/s", num(v)),
        Metric::ConnectRate => format!("{} conn/s", num(v)),
        Metric::Limit | Metric::Gaps => num(v),
        Metric::Deliveries => format!("{} deliveries/s", rate(v)),
    }
}

/// A duration given in seconds, in the unit that reads best: `71 us`, `4.63 ms`, `1.20 s`
/// (`-` for zero: nothing measured).
pub fn ms(s: f64) -> String {
    if s == 0.0 {
        "-".into()
    } else if s < 0.001 {
        format!("{:.0} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// A message rate for people: `1.23M msg/s`, `45.6K msg/s`, `789 msg/s`.
pub fn human_rate(msg_per_s: f64) -> String {
    format!("{} msg/s", num(msg_per_s))
}

/// A rate that may be below one a second, for a threshold's figure.
fn rate(v: f64) -> String {
    if v < 100.0 { format!("{v:.1}") } else { num(v) }
}

/// A count for a table: `1.23M`, `45.6K`, `789`.
pub fn num(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(human_rate(1_234_567.0), "1.23M msg/s");
        assert_eq!(human_rate(45_600.0), "45.6K msg/s");
        assert_eq!(human_rate(789.4), "789 msg/s");
        assert_eq!(ms(0.000_071), "71 us");
        assert_eq!(ms(0.004_63), "4.63 ms");
        assert_eq!(ms(1.2), "1.20 s");
        assert_eq!(ms(0.0), "-");
    }
}
