//! Line charts as inline SVG, drawn here so the HTML report needs no script or network.

use crate::escape::escape;
use std::fmt::Write as _;

/// Two charts side by side fit the report's 1040 px column.
const W: f64 = 480.0;
const H: f64 = 250.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 40.0;
/// Distinct in colour and in print (greyscale); series beyond these repeat them.
const COLOURS: [&str; 6] = [
    "#1f5fa8", "#d9480f", "#2b8a3e", "#862e9c", "#868e96", "#e8a100",
];

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct LineChart {
    pub title: String,
    /// Where to mark the x axis, and what to write there.
    pub x_ticks: Vec<(f64, String)>,
    pub x_label: String,
    /// Formats a y value for the axis.
    pub y_format: fn(f64) -> String,
    pub series: Vec<Series>,
    /// Instants to mark with a vertical line and a label (a disruption).
    pub markers: Vec<(f64, String)>,
}

/// A tick step of 1, 2 or 5 times a power of ten giving about four steps up to `max`.
pub(crate) fn nice_step(max: f64) -> f64 {
    let raw = max / 4.0;
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * pow)
}

impl LineChart {
    pub fn svg(&self) -> String {
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        // The ticks widen the range too: an axis marked from 0 starts at 0.
        let xs = || {
            points()
                .map(|p| p.0)
                .chain(self.x_ticks.iter().map(|t| t.0))
        };
        let x_min = xs().fold(f64::INFINITY, f64::min);
        let x_max = xs().fold(f64::NEG_INFINITY, f64::max);
        let y_data = points().map(|p| p.1).fold(0.0, f64::max);
        let (x_min, x_max) = if x_min.is_finite() && x_max > x_min {
            (x_min, x_max)
        } else {
            (0.0, 1.0)
        };
        let step = if y_data > 0.0 { nice_step(y_data) } else { 1.0 };
        let y_max = (y_data / step).ceil().max(1.0) * step;
        let px = |x: f64| LEFT + (x - x_min) / (x_max - x_min) * (W - LEFT - RIGHT);
        let py = |y: f64| H - BOTTOM - y / y_max * (H - TOP - BOTTOM);
        let mut o = String::new();
        let _ = write!(
            o,
            r#"<svg class="chart" role="img" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}"><title>{t}</title><text x="{LEFT}" y="16" class="ct">{t}</text>"#,
            t = escape(&self.title)
        );
        let mut y = 0.0;
        while y <= y_max + step / 2.0 {
            let _ = write!(
                o,
                r#"<line x1="{LEFT}" x2="{x2}" y1="{py}" y2="{py}" class="grid"/><text x="{tx}" y="{ty}" text-anchor="end">{label}</text>"#,
                x2 = W - RIGHT,
                py = py(y),
                tx = LEFT - 6.0,
                ty = py(y) + 4.0,
                label = escape(&(self.y_format)(y))
            );
            y += step;
        }
        for (x, label) in &self.x_ticks {
            let _ = write!(
                o,
                r#"<line x1="{x}" x2="{x}" y1="{y1}" y2="{y2}" class="axis"/><text x="{x}" y="{ty}" text-anchor="middle">{label}</text>"#,
                x = px(*x),
                y1 = H - BOTTOM,
                y2 = H - BOTTOM + 4.0,
                ty = H - BOTTOM + 16.0,
                label = escape(label)
            );
        }
        let _ = write!(
            o,
            r#"<line x1="{LEFT}" x2="{x2}" y1="{y}" y2="{y}" class="axis"/><text x="{cx}" y="{ly}" text-anchor="middle" class="xl">{xl}</text>"#,
            x2 = W - RIGHT,
            y = H - BOTTOM,
            cx = (LEFT + W - RIGHT) / 2.0,
            ly = H - 6.0,
            xl = escape(&self.x_label)
        );
        for (x, label) in &self.markers {
            let _ = write!(
                o,
                r##"<line x1="{x}" x2="{x}" y1="{y1}" y2="{y2}" class="marker" stroke="#b00" stroke-dasharray="3 3"/><text x="{tx}" y="{ty}" class="marker" fill="#b00">{label}</text>"##,
                x = px(*x),
                y1 = TOP,
                y2 = H - BOTTOM,
                tx = px(*x) + 3.0,
                ty = TOP + 10.0,
                label = escape(label)
            );
        }
        let mut legend_x = LEFT;
        for (i, s) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let path: Vec<String> = s
                .points
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            // A dash pattern per series as well as a colour: the chart still reads printed grey.
            let dash = ["", "6 3", "2 2", "8 3 2 3"][i % 4];
            let _ = write!(
                o,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>"#,
                path.join(" ")
            );
            if s.points.len() < 12 {
                for (x, y) in &s.points {
                    let _ = write!(
                        o,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{colour}"/>"#,
                        px(*x),
                        py(*y)
                    );
                }
            }
            let _ = write!(
                o,
                r#"<line x1="{legend_x}" x2="{lx2}" y1="28" y2="28" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{tx}" y="32">{name}</text>"#,
                lx2 = legend_x + 18.0,
                tx = legend_x + 22.0,
                name = escape(&s.name)
            );
            legend_x += 30.0 + 7.0 * s.name.chars().count() as f64;
        }
        o.push_str("</svg>");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round_and_cover_the_data() {
        assert_eq!(nice_step(100.0), 50.0);
        assert_eq!(nice_step(7.0), 2.0);
        assert_eq!(nice_step(0.0031), 0.001);
        let chart = LineChart {
            title: "a <b>".into(),
            x_ticks: vec![(0.0, "0".into()), (2.0, "2".into())],
            x_label: "s".into(),
            y_format: |v| format!("{v}"),
            series: vec![Series {
                name: "sent & acked".into(),
                points: vec![(0.0, 10.0), (1.0, 90.0), (2.0, 40.0)],
            }],
            markers: vec![(1.5, "kill 1 replica".into())],
        };
        let svg = chart.svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        assert!(svg.contains("a &lt;b&gt;") && svg.contains("sent &amp; acked"));
        // Data up to 90 with steps of 50: the axis goes to 100.
        assert!(
            svg.contains(">100</text>") && !svg.contains(">150</text>"),
            "{svg}"
        );
        assert_eq!(svg.matches("<circle").count(), 3);
        // The marker at 1.5 of an axis 0..2 across 400 px from 64: x = 364.
        assert!(
            svg.contains(r#"<line x1="364" x2="364""#) && svg.contains(">kill 1 replica</text>"),
            "{svg}"
        );
    }
}
