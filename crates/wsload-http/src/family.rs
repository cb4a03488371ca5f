//! One call per metric family, for the custom collectors of the server and the load generator
//! (their counters are per-thread atomics, read at scrape time): the family's HELP and TYPE,
//! then one sample per label set, as prometheus-client's own metrics would write them.

use crate::AtomicHistogram;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
    MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::fmt;

/// A counter without labels.
pub fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: impl EncodeCounterValue,
) -> fmt::Result {
    unlabelled(encoder, name, help, ConstCounter::new(value))
}

/// A gauge without labels.
pub fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: impl EncodeGaugeValue,
) -> fmt::Result {
    unlabelled(encoder, name, help, ConstGauge::new(value))
}

/// A counter family: one sample per label set, in the order given.
pub fn counters<L: EncodeLabelSet, V: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let samples = samples.into_iter().map(|(l, v)| (l, ConstCounter::new(v)));
    family(encoder, name, help, MetricType::Counter, samples)
}

/// A gauge family: one sample per label set, in the order given.
pub fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let samples = samples.into_iter().map(|(l, v)| (l, ConstGauge::new(v)));
    family(encoder, name, help, MetricType::Gauge, samples)
}

/// A histogram family: per label set, the sum of some [`AtomicHistogram`]s (one per thread).
pub fn histograms<'h, L: EncodeLabelSet, H: AsRef<[&'h AtomicHistogram]>>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, H)>,
) -> fmt::Result {
    let samples = samples.into_iter().map(|(l, h)| (l, Sum(h)));
    family(encoder, name, help, MetricType::Histogram, samples)
}

fn unlabelled(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric: impl EncodeMetric,
) -> fmt::Result {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// The type is given, not taken from a sample: a family with no samples still has its HELP and
/// TYPE.
fn family<L: EncodeLabelSet, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric_type: MetricType,
    samples: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Histograms summed as they are encoded.
struct Sum<H>(H);

impl<'h, H: AsRef<[&'h AtomicHistogram]>> EncodeMetric for Sum<H> {
    fn encode(&self, encoder: MetricEncoder<'_>) -> fmt::Result {
        AtomicHistogram::encode_sum(self.0.as_ref(), encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::collector::Collector;
    use prometheus_client::registry::Registry;
    use std::time::Duration;

    /// Every helper once, with the empty and the labelled cases.
    #[derive(Debug)]
    struct Each(AtomicHistogram, AtomicHistogram);

    impl Collector for Each {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
            counter(&mut encoder, "c", "A counter.", 3u64)?;
            gauge(&mut encoder, "g", "A gauge.", 2.5)?;
            let reasons = [("a\"b", 1u64), ("c", 2)];
            counters(
                &mut encoder,
                "cs",
                "Counters.",
                reasons.map(|(r, v)| ([("reason", r)], v)),
            )?;
            gauges(
                &mut encoder,
                "none",
                "No samples.",
                [] as [([(&str, &str); 1], i64); 0],
            )?;
            histograms(
                &mut encoder,
                "h",
                "Histograms, summed.",
                [([("k", "v")], [&self.0, &self.1])],
            )
        }
    }

    #[test]
    fn families_are_written_as_prometheus_client_writes_them() {
        let each = Each(AtomicHistogram::default(), AtomicHistogram::default());
        each.0.observe(Duration::from_millis(2));
        each.1.observe(Duration::from_millis(2));
        each.1.observe(Duration::from_secs(60));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(each));
        let text = crate::encode(&registry);
        let lines: Vec<&str> = text.lines().collect();
        for want in [
            "# TYPE c counter",
            "c_total 3",
            "# TYPE g gauge",
            "g 2.5",
            "# HELP cs Counters.",
            r#"cs_total{reason="a\"b"} 1"#,
            r#"cs_total{reason="c"} 2"#,
            "# HELP none No samples.",
            "# TYPE none gauge",
            "# TYPE h histogram",
            r#"h_bucket{le="0.0015",k="v"} 0"#,
            r#"h_bucket{le="0.002",k="v"} 2"#,
            r#"h_bucket{le="+Inf",k="v"} 3"#,
            r#"h_count{k="v"} 3"#,
        ] {
            assert!(lines.contains(&want), "no line {want:?} in\n{text}");
        }
        // The empty family is a header alone: its TYPE line is followed by the next family's.
        let at = lines
            .iter()
            .position(|l| *l == "# TYPE none gauge")
            .expect("none");
        assert_eq!(lines[at + 1], "# HELP h Histograms, summed.");
    }
}
