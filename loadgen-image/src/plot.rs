//! The run's own timeline and its plot (`wsload run --plot FILE.png`): RTT percentiles and
//! messages per second over time, the two main panels of the LoadTest overview dashboard,
//! for people who have no Grafana.
//!
//! Nothing here runs per message. The background thread that turns the sent counter into the
//! achieved-rate gauge once a second also hands [`Timeline::record`] the sums of the live
//! counters and of the RTT histogram's buckets; a sample is the difference from the previous
//! one. Percentiles are interpolated inside the buckets the way Prometheus'
//! `histogram_quantile` does, so the plot and the dashboard agree on the same data.

use crate::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;
use wsload_http::LATENCY_BUCKETS;

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
        let mut rtt = [0u64; BUCKETS];
        for (d, (a, b)) in rtt.iter_mut().zip(totals.rtt.iter().zip(prev.rtt.iter())) {
            *d = a.saturating_sub(*b);
        }
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

/// ASCII DejaVu Sans (see `assets/README.md`): the binary is static and its image has no
/// fonts, so the plot's text comes from here.
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");

fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Io("the bundled plot font does not load".into()))
    }
}

fn plot_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io(format!("cannot plot to {}: {e}", path.display()))
}

const LATENCY_COLORS: [RGBColor; QUANTILES.len()] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
];
const SENT: RGBColor = RGBColor(31, 119, 180);
const RECEIVED: RGBColor = RGBColor(44, 160, 44);
const TARGET: RGBColor = RGBColor(90, 90, 90);

/// Writes the two plots of `samples` to `path` (PNG, [`WIDTH`] x [`HEIGHT`]).
pub fn write_png(path: &Path, title: &str, samples: &[Sample]) -> Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let root = root
        .titled(title, ("sans-serif", 24))
        .map_err(|e| plot_error(path, e))?;
    let (top, bottom) = root.split_vertically(HEIGHT / 2 - 20);
    let end = samples.last().map_or(1.0, |s| s.secs).max(1.0);
    latency_chart(&top, samples, end).map_err(|e| plot_error(path, e))?;
    throughput_chart(&bottom, samples, end).map_err(|e| plot_error(path, e))?;
    root.present().map_err(|e| plot_error(path, e))?;
    Ok(())
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
type DrawResult = std::result::Result<(), Box<dyn std::error::Error + 'static>>;

fn latency_chart(area: &Area<'_>, samples: &[Sample], end: f64) -> DrawResult {
    // Milliseconds on a log axis: p50 and p99.9 are often two decades apart.
    let values = samples
        .iter()
        .filter_map(|s| s.rtt)
        .flat_map(|r| r.into_iter().map(|v| v * 1e3))
        .filter(|v| *v > 0.0);
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let (lo, hi) = if hi > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.01, 10.0)
    };
    let mut chart = ChartBuilder::on(area)
        .caption(
            "RTT percentiles (ms, log scale; per second)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc("ms")
        .y_label_formatter(&|v| ms_label(*v))
        .light_line_style(RGBColor(238, 238, 238))
        .label_style(("sans-serif", 13))
        .draw()?;
    for (i, (_, name)) in QUANTILES.iter().enumerate() {
        let color = LATENCY_COLORS[i];
        let mut labelled = false;
        // One line per stretch of seconds with measurements: no line across a gap.
        for run in samples.split(|s| s.rtt.is_none()) {
            let points: Vec<(f64, f64)> = run
                .iter()
                .filter_map(|s| s.rtt.map(|r| (s.secs, (r[i] * 1e3).max(lo))))
                .collect();
            if points.is_empty() {
                continue;
            }
            let series = chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
            if !labelled {
                series
                    .label(*name)
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
                labelled = true;
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Milliseconds with as many decimals as a log axis' ticks need, no trailing zeros.
fn ms_label(v: f64) -> String {
    let text = if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

fn throughput_chart(area: &Area<'_>, samples: &[Sample], end: f64) -> DrawResult {
    let top = samples
        .iter()
        .map(|s| s.sent_rate.max(s.received_rate).max(s.target_rate))
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(
            "messages per second (achieved vs target)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc("msg/s")
        .y_label_formatter(&|v| crate::report::num(*v))
        .light_line_style(RGBColor(238, 238, 238))
        .label_style(("sans-serif", 13))
        .draw()?;
    type Pick = fn(&Sample) -> f64;
    // Sent wide and received narrow on top: against an echo server they coincide, and both
    // must stay visible.
    let lines: [(&str, RGBColor, u32, Pick); 3] = [
        ("sent", SENT, 4, |s| s.sent_rate),
        ("received", RECEIVED, 1, |s| s.received_rate),
        ("target", TARGET, 2, |s| s.target_rate),
    ];
    for (name, color, width, pick) in lines {
        if name == "target" && samples.iter().all(|s| s.target_rate <= 0.0) {
            // Closed-loop scenarios have no target: no flat line at zero.
            continue;
        }
        chart
            .draw_series(LineSeries::new(
                samples.iter().map(|s| (s.secs, pick(s))),
                color.stroke_width(width),
            ))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
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

    #[test]
    fn png_has_the_plot_size() {
        let dir = std::env::temp_dir().join(format!("wsload-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("plot.png");
        let samples: Vec<Sample> = (1..=20)
            .map(|i| Sample {
                secs: f64::from(i),
                sent_rate: 1000.0 * f64::from(i.min(10)),
                received_rate: 990.0 * f64::from(i.min(10)),
                target_rate: 10_000.0,
                active: 10,
                rtt: (i != 7).then_some([0.0004, 0.0009, 0.002, 0.008]),
            })
            .collect();
        write_png(&path, "test: constantRate", &samples).expect("plot");
        let bytes = std::fs::read(&path).expect("png");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width and height, big-endian, at bytes 16..24.
        let w = u32::from_be_bytes(bytes[16..20].try_into().expect("w"));
        let h = u32::from_be_bytes(bytes[20..24].try_into().expect("h"));
        assert_eq!((w, h), (WIDTH, HEIGHT));
        // Lines, labels and legends: far more than a blank canvas compresses to.
        assert!(bytes.len() > 20_000, "{} bytes", bytes.len());
        // An empty run still plots (axes only) instead of failing the run.
        write_png(&path, "empty", &[]).expect("empty plot");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
