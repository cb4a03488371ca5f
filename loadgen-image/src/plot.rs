//! The run's own timeline and its plot (`wsload run --plot FILE.png`): RTT percentiles and
//! messages per second over time, the two main panels of the LoadTest overview dashboard,
//! for people who have no Grafana.
//!
//! Nothing here runs per message. The background thread that turns the sent counter into the
//! achieved-rate gauge once a second also hands [`Timeline::record`] the sums of the live
//! counters and of the RTT histogram's buckets; a sample is the difference from the previous
//! one. Percentiles are interpolated inside the buckets the way Prometheus'
//! `histogram_quantile` does, so the plot and the dashboard agree on the same data.
//!
//! The timeline is always kept; drawing it (plot/png.rs) needs the `plot` feature, a default one.

use crate::{Error, Result};
use std::time::Instant;
use wsload_http::LATENCY_BUCKETS;

#[cfg(feature = "plot")]
mod png;
#[cfg(feature = "plot")]
pub use png::write_png;

/// Latency buckets plus one for observations above the last bound.
pub const BUCKETS: usize = LATENCY_BUCKETS.len() + 1;

/// The percentiles plotted, as in the dashboard's RTT panel.
pub const QUANTILES: [(f64, &str); 4] =
    [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9")];

/// Past this many samples (5.5 hours at one a second) every other one is dropped and the
/// interval doubles, so a run of days still costs well under a megabyte.
const MAX_SAMPLES: usize = 20_000;

/// Plot size in pixels.
pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 900;

/// The running sums a sample is taken from.
#[derive(Debug, Clone)]
pub struct Totals {
    pub sent: u64,
    pub received: u64,
    /// Per-bucket RTT counts (not cumulative), see [`BUCKETS`].
    pub rtt: [u64; BUCKETS],
}

/// One interval of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// End of the interval, seconds since the first sample.
    pub secs: f64,
    pub sent_rate: f64,
    pub received_rate: f64,
    /// What the load model asked for (0: closed loop).
    pub target_rate: f64,
    pub active: u64,
    /// RTT at [`QUANTILES`], seconds; `None` when nothing was measured in the interval.
    pub rtt: Option<[f64; QUANTILES.len()]>,
}

#[derive(Debug)]
pub struct Timeline {
    start: Option<Instant>,
    prev: Option<(Instant, Totals)>,
    samples: Vec<Sample>,
    /// Record every `stride`-th call (doubles at each thinning).
    stride: u32,
    skipped: u32,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            start: None,
            prev: None,
            samples: Vec::new(),
            stride: 1,
            skipped: 0,
        }
    }
}

impl Timeline {
    /// Takes the sums at `now`; from the second call on, appends the interval since the last
    /// recorded one.
    pub fn record(&mut self, now: Instant, totals: Totals, target_rate: f64, active: u64) {
        let start = *self.start.get_or_insert(now);
        if self.prev.is_some() {
            self.skipped += 1;
            if self.skipped < self.stride {
                return;
            }
            self.skipped = 0;
        }
        let Some((then, prev)) = self.prev.replace((now, totals.clone())) else {
            return;
        };
        let dt = now.saturating_duration_since(then).as_secs_f64();
        if dt <= 0.0 {
            return;
        }
        let rtt = since(&totals.rtt, &prev.rtt);
        self.samples.push(Sample {
            secs: now.saturating_duration_since(start).as_secs_f64(),
            sent_rate: totals.sent.saturating_sub(prev.sent) as f64 / dt,
            received_rate: totals.received.saturating_sub(prev.received) as f64 / dt,
            target_rate,
            active,
            rtt: quantiles(&rtt),
        });
        if self.samples.len() >= MAX_SAMPLES {
            let kept: Vec<Sample> = self.samples.iter().skip(1).step_by(2).cloned().collect();
            self.samples = kept;
            self.stride = self.stride.saturating_mul(2);
        }
    }

    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }
}

/// Every plotted percentile of one interval's bucket counts.
fn quantiles(counts: &[u64; BUCKETS]) -> Option<[f64; QUANTILES.len()]> {
    let mut out = [0.0; QUANTILES.len()];
    for (o, (q, _)) in out.iter_mut().zip(QUANTILES) {
        *o = quantile(q, counts)?;
    }
    Some(out)
}

/// The per-bucket counts observed between two readings of running counts (saturating: a
/// reading torn against a reset must not wrap).
pub fn since(now: &[u64; BUCKETS], before: &[u64; BUCKETS]) -> [u64; BUCKETS] {
    let mut d = [0u64; BUCKETS];
    for (d, (now, before)) in d.iter_mut().zip(now.iter().zip(before.iter())) {
        *d = now.saturating_sub(*before);
    }
    d
}

/// The `q` quantile of per-bucket counts over [`LATENCY_BUCKETS`], interpolated linearly
/// inside its bucket as Prometheus' `histogram_quantile` does (the first bucket starts at 0;
/// the overflow bucket answers the last finite bound). `None` without observations.
pub fn quantile(q: f64, counts: &[u64; BUCKETS]) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let last = LATENCY_BUCKETS[LATENCY_BUCKETS.len() - 1];
    let mut below = 0u64;
    for (i, &n) in counts.iter().enumerate() {
        let upto = below + n;
        if upto as f64 >= rank && n > 0 {
            let Some(&upper) = LATENCY_BUCKETS.get(i) else {
                return Some(last);
            };
            let lower = if i == 0 { 0.0 } else { LATENCY_BUCKETS[i - 1] };
            return Some(lower + (upper - lower) * (rank - below as f64) / n as f64);
        }
        below = upto;
    }
    Some(last)
}

/// Fails, saying why, in a build that cannot draw: `wsload run --plot` calls it before the run,
/// so that a build without the `plot` feature (the shard image) refuses the flag up front
/// rather than leaving no PNG after a long run.
pub fn ensure_available() -> Result<()> {
    if cfg!(feature = "plot") {
        Ok(())
    } else {
        Err(Error::Spec(
            "--plot: this wsload was built without the `plot` feature; use a default build \
             (`cargo build --release -p wsload`) to plot, or watch the run's metrics \
             (--metrics-listen)"
                .into(),
        ))
    }
}

/// Without the `plot` feature the drawing is the same refusal, for callers of the library that
/// set `Options::plot` themselves (the run notes it, as any plot that cannot be written).
#[cfg(not(feature = "plot"))]
pub fn write_png(_path: &std::path::Path, _title: &str, _samples: &[Sample]) -> Result<()> {
    ensure_available()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn counts(pairs: &[(usize, u64)]) -> [u64; BUCKETS] {
        let mut c = [0; BUCKETS];
        for &(i, n) in pairs {
            c[i] = n;
        }
        c
    }

    #[test]
    fn quantile_interpolates_like_prometheus() {
        // 100 observations in (1ms, 1.5ms]: bucket 9 (le 0.0015), below it le 0.001.
        let c = counts(&[(9, 100)]);
        let p50 = quantile(0.5, &c).expect("p50");
        assert!((p50 - 0.00125).abs() < 1e-12, "{p50}");
        // 90 in the first bucket (0, 50us], 10 above the last bound.
        let c = counts(&[(0, 90), (BUCKETS - 1, 10)]);
        assert!((quantile(0.5, &c).expect("p50") - 0.000_05 * 50.0 / 90.0).abs() < 1e-12);
        assert_eq!(quantile(0.99, &c), Some(10.0));
        assert_eq!(quantile(0.5, &[0; BUCKETS]), None);
    }

    #[test]
    fn timeline_diffs_sums_and_thins_itself() {
        let mut t = Timeline::default();
        let t0 = Instant::now();
        let totals = |sent, rtt_n| Totals {
            sent,
            received: sent / 2,
            rtt: counts(&[(9, rtt_n)]),
        };
        t.record(t0, totals(0, 0), 100.0, 5);
        assert!(t.samples().is_empty(), "the first call only takes the sums");
        t.record(t0 + Duration::from_secs(1), totals(100, 10), 100.0, 5);
        t.record(t0 + Duration::from_secs(3), totals(300, 10), 100.0, 5);
        let s = t.samples();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].sent_rate, 100.0);
        assert_eq!(s[0].received_rate, 50.0);
        assert!(s[0].rtt.is_some());
        assert_eq!(s[1].sent_rate, 100.0, "rates divide by the real interval");
        assert_eq!(s[1].rtt, None, "no RTT measured in that interval");
        assert_eq!(s[1].secs, 3.0);

        let mut t = Timeline::default();
        for i in 0..=(MAX_SAMPLES as u64 + 10) {
            t.record(t0 + Duration::from_secs(i), totals(i, i), 0.0, 0);
        }
        assert!(t.samples().len() < MAX_SAMPLES);
        assert_eq!(t.stride, 2);
    }
}
