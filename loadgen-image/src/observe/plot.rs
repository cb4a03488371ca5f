//! The run's plot (`wsload run --plot FILE.png`): RTT percentiles and messages per second
//! over time, the two main panels of the LoadTest overview dashboard, for people who have no
//! Grafana.
//!
//! It draws the run's own timeline (crate::observe::sampler, one step a second, recorded by the same
//! recorder as each cell's): a step's rates are its counts over its length, its percentiles
//! are interpolated inside its latency buckets the way Prometheus' `histogram_quantile` does,
//! so the plot and the dashboard agree on the same data.
//!
//! Drawing (plot/png.rs) needs the `plot` feature, a default one.

use crate::observe::sampler::RunStep;
use wsload_http::buckets;
use wsload_report::timeline::Sample;

#[cfg(feature = "plot")]
mod png;
#[cfg(feature = "plot")]
pub use png::write_png;

/// Why no plot could be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// This build has no drawing code: `--plot` is refused up front (the input's fault).
    #[error(
        "--plot: this wsload was built without the `plot` feature; use a default build \
         (`cargo build --release -p wsload`) to plot, or watch the run's metrics \
         (--metrics-listen)"
    )]
    NotBuilt,
    #[error("the bundled plot font does not load")]
    Font,
    /// plotters' errors are not all Send: the cause is kept as its text.
    #[error("cannot plot to {path}: {why}")]
    Draw { path: String, why: String },
}

/// The percentiles plotted, as in the dashboard's RTT panel.
pub const QUANTILES: [(f64, &str); 4] =
    [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9")];

/// At most this many points across the plot: a longer run's steps are coarsened (the plot is
/// 1200 pixels wide).
pub const MAX_POINTS: usize = 2_000;

/// Plot size in pixels.
pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 900;

/// One step of the run as drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// End of the step, seconds since the run's first reading.
    pub secs: f64,
    pub sent_rate: f64,
    pub received_rate: f64,
    /// What the load model asked for (0: closed loop).
    pub target_rate: f64,
    pub active: u64,
    /// RTT at [`QUANTILES`], seconds; `None` when nothing was measured in the step.
    pub rtt: Option<[f64; QUANTILES.len()]>,
}

/// The points of the run's timeline, of `step_ms` steps.
pub fn points(step_ms: u32, samples: &[Sample<RunStep>]) -> Vec<Point> {
    let step = f64::from(step_ms.max(1)) / 1e3;
    samples
        .iter()
        .map(|s| Point {
            secs: f64::from(s.at + 1) * step,
            sent_rate: s.sent as f64 / step,
            received_rate: s.received as f64 / step,
            target_rate: s.extra.target_rate,
            active: s.open,
            rtt: quantiles(&s.extra.rtt),
        })
        .collect()
}

/// Every plotted percentile of one step's bucket counts.
fn quantiles(counts: &buckets::Counts) -> Option<[f64; QUANTILES.len()]> {
    let mut out = [0.0; QUANTILES.len()];
    for (o, (q, _)) in out.iter_mut().zip(QUANTILES) {
        *o = buckets::quantile(q, counts)?;
    }
    Some(out)
}

/// Fails, saying why, in a build that cannot draw: `wsload run --plot` calls it before the run,
/// so that a build without the `plot` feature (the shard image) refuses the flag up front
/// rather than leaving no PNG after a long run.
pub fn ensure_available() -> Result<(), PlotError> {
    if cfg!(feature = "plot") {
        Ok(())
    } else {
        Err(PlotError::NotBuilt)
    }
}

/// Without the `plot` feature the drawing is the same refusal, for callers of the library that
/// set `Options::plot` themselves (the run notes it, as any plot that cannot be written).
#[cfg(not(feature = "plot"))]
pub fn write_png(
    _path: &std::path::Path,
    _title: &str,
    _points: &[Point],
) -> Result<(), PlotError> {
    ensure_available()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_drawn_as_rates_and_percentiles_of_its_own() {
        let mut rtt = buckets::EMPTY;
        // 100 round trips in (1 ms, 1.5 ms].
        rtt[9] = 100;
        let step = |at, sent, rtt| Sample {
            at,
            sent,
            received: sent / 2,
            open: 5,
            extra: RunStep {
                rtt,
                target_rate: 100.0,
            },
            ..Sample::default()
        };
        let p = points(2_000, &[step(0, 200, rtt), step(1, 600, buckets::EMPTY)]);
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[0].secs, p[0].sent_rate, p[0].received_rate),
            (2.0, 100.0, 50.0)
        );
        assert_eq!((p[0].target_rate, p[0].active), (100.0, 5));
        let r = p[0].rtt.expect("round trips in the first step");
        assert!((r[0] - 0.00125).abs() < 1e-12, "{r:?}");
        assert_eq!((p[1].secs, p[1].sent_rate), (4.0, 300.0));
        assert_eq!(p[1].rtt, None, "no round trip in that step");
    }
}
