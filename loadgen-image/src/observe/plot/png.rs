//! The run's timeline drawn as a PNG (`wsload run --plot`), with plotters: only in builds with
//! the `plot` feature, so that the shard image links no drawing code.

use super::{HEIGHT, PlotError, Point, QUANTILES, WIDTH};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// ASCII DejaVu Sans (see `assets/README.md`): the binary is static and its image has no
/// fonts, so the plot's text comes from here.
static FONT: &[u8] = include_bytes!("../../../assets/DejaVuSans-subset.ttf");

fn register_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok { Ok(()) } else { Err(PlotError::Font) }
}

fn plot_error(path: &Path, e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw {
        path: path.display().to_string(),
        why: e.to_string(),
    }
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
pub fn write_png(path: &Path, title: &str, samples: &[Point]) -> Result<(), PlotError> {
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

/// Both charts' legend, top right over a light box.
fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, CT>,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn latency_chart(area: &Area<'_>, samples: &[Point], end: f64) -> DrawResult {
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
    legend(&mut chart)
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

fn throughput_chart(area: &Area<'_>, samples: &[Point], end: f64) -> DrawResult {
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
        .y_label_formatter(&|v| wsload_report::report::num(*v))
        .light_line_style(RGBColor(238, 238, 238))
        .label_style(("sans-serif", 13))
        .draw()?;
    type Pick = fn(&Point) -> f64;
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
    legend(&mut chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_has_the_plot_size() {
        let dir = std::env::temp_dir().join(format!("wsload-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("plot.png");
        let samples: Vec<Point> = (1..=20)
            .map(|i| Point {
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
