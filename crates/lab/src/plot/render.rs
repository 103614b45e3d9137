//! Drawing a [`Chart`] (axes, labelled line series) to SVG or PNG with
//! plotters (<https://plotters-rs.github.io/>).
//!
//! Why this shape: plotters is built here without its defaults (no font-kit,
//! which wants the system's fontconfig, and no `image` crate), so
//! - text goes through plotters' `ab_glyph` font support with a bundled ASCII
//!   subset of DejaVu Sans (`DejaVuSans-lab.ttf`, 23 KB, license in
//!   `FONT-LICENSE.txt`): charts render the same on any machine, with no font
//!   installed (CI's fresh machine included);
//! - PNGs are drawn into an RGB buffer by plotters' bitmap backend and encoded
//!   by the `png` crate;
//! - SVGs come from plotters' SVG backend: text stays text (`<text>`, shown in
//!   the viewer's sans-serif font) and each series is one `<polyline>`.
//!
//! Tick labels speak the axis' unit (requests as 200k/1M, memory in binary
//! MB/GB like memcached's `-m`, latency in µs/ms, tail quantiles as 99.9%),
//! because raw floats on an axis are the first thing that makes a chart
//! unreadable.

use std::sync::OnceLock;

use anyhow::anyhow;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

/// DejaVu Sans, subset to printable ASCII and a few symbols (° µ · × – — … ≤ ≥).
static FONT: &[u8] = include_bytes!("DejaVuSans-lab.ttf");
const FAMILY: &str = "sans-serif";

/// How an axis' tick labels are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ticks {
    /// A plain number, trailing zeros trimmed.
    Number,
    /// A ratio in [0, 1].
    Ratio,
    /// A count: 200k, 1.5M.
    Count,
    /// Bytes in binary units: 512 KB, 64 MB.
    Bytes,
    /// Seconds: 1.5 s.
    Seconds,
    /// Microseconds: 80 µs, 1.2 ms.
    Micros,
    /// `1 / (1 - q)` on the axis, labelled as the quantile q: 90%, 99.9%.
    Tail,
}

/// One axis: its title, scale and label style, and optionally a fixed range.
#[derive(Clone, Debug, Serialize)]
pub struct Axis {
    pub label: String,
    pub log: bool,
    pub ticks: Ticks,
    /// Fixed bounds; None: from the data (with a margin).
    pub range: Option<(f64, f64)>,
    /// For a linear axis without fixed bounds: start at 0 rather than at the
    /// smallest value.
    pub from_zero: bool,
}

impl Axis {
    pub fn new(label: &str, ticks: Ticks) -> Axis {
        Axis {
            label: label.to_string(),
            log: false,
            ticks,
            range: None,
            from_zero: false,
        }
    }
    pub fn log(mut self, log: bool) -> Axis {
        self.log = log;
        self
    }
    pub fn range(mut self, lo: f64, hi: f64) -> Axis {
        self.range = Some((lo, hi));
        self
    }
    pub fn from_zero(mut self) -> Axis {
        self.from_zero = true;
        self
    }
}

/// One line of the chart.
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Draw a marker on every point (few points, e.g. only percentiles).
    pub markers: bool,
    /// A thin line (secondary curves such as per-class MRCs).
    pub thin: bool,
}

impl Series {
    pub fn line(label: String, points: Vec<(f64, f64)>) -> Series {
        Series {
            label,
            points,
            markers: false,
            thin: false,
        }
    }
}

/// Where the legend goes (away from where the curves usually are).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Legend {
    UpperLeft,
    UpperRight,
    LowerLeft,
    LowerRight,
}

/// Everything a chart shows.
#[derive(Clone, Debug, Serialize)]
pub struct Chart {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub legend: Legend,
    pub series: Vec<Series>,
}

impl Chart {
    /// The points of a series that the axes can show (finite, and positive
    /// on a log axis).
    fn visible<'a>(&self, s: &'a Series) -> impl Iterator<Item = (f64, f64)> + 'a {
        let (xlog, ylog) = (self.x.log, self.y.log);
        s.points.iter().copied().filter(move |&(x, y)| {
            x.is_finite() && y.is_finite() && (!xlog || x > 0.0) && (!ylog || y > 0.0)
        })
    }

    /// The axis bounds: fixed, or the data's extent with a margin.
    fn bounds(&self) -> ((f64, f64), (f64, f64)) {
        let pts: Vec<(f64, f64)> = self.series.iter().flat_map(|s| self.visible(s)).collect();
        let xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
        let ys: Vec<f64> = pts.iter().map(|p| p.1).collect();
        (bounds(&self.x, &xs), bounds(&self.y, &ys))
    }
}

fn bounds(axis: &Axis, vals: &[f64]) -> (f64, f64) {
    if let Some(r) = axis.range {
        return r;
    }
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        // No data: an empty but valid frame.
        return if axis.log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if axis.log {
        let (lo, hi) = if hi / lo < 1.5 {
            (lo / 1.5, hi * 1.5)
        } else {
            (lo, hi)
        };
        return (lo / 1.1, hi * 1.1);
    }
    let lo = if axis.from_zero { lo.min(0.0) } else { lo };
    let span = if hi > lo {
        hi - lo
    } else {
        hi.abs().max(1.0) * 0.1
    };
    let mut lo = if axis.from_zero && lo >= 0.0 {
        lo
    } else {
        lo - span * 0.05
    };
    let mut hi = hi + span * 0.05;
    if axis.ticks == Ticks::Ratio {
        // Ratios live in [0, 1]: no margin past the ends.
        lo = lo.max(0.0);
        hi = hi.min(1.0);
        if hi <= lo {
            (lo, hi) = ((lo - 0.05).max(0.0), (hi + 0.05).min(1.0));
        }
    }
    (lo, hi)
}

/// The chart as an SVG document.
pub fn svg(chart: &Chart, size: (u32, u32)) -> anyhow::Result<String> {
    register_font()?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        draw(&root, chart)?;
        root.present().map_err(drawing)?;
    }
    Ok(out)
}

/// The chart as a PNG file's bytes (8-bit RGB).
pub fn png(chart: &Chart, size: (u32, u32)) -> anyhow::Result<Vec<u8>> {
    register_font()?;
    let (w, h) = size;
    let mut pixels = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area();
        draw(&root, chart)?;
        root.present().map_err(drawing)?;
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header()?;
        writer.write_image_data(&pixels)?;
        writer.finish()?;
    }
    Ok(out)
}

fn register_font() -> anyhow::Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(anyhow!("the bundled font does not load"))
    }
}

fn drawing<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing the chart: {e}")
}

/// Tableau's 10 colours: distinct, and readable by most colour-blind readers.
const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// The colour of the i-th series.
pub fn color(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// How an axis is drawn: values are divided by `div` before plotting, so
/// that plotters' round tick values are round in the unit shown (a byte axis
/// in MB ticks at 50 MB, not at 47.7 MB = 50,000,000 bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Drawn {
    div: f64,
    unit: Option<&'static str>,
    ticks: Ticks,
}

impl Drawn {
    fn of(axis: &Axis, hi: f64) -> Drawn {
        let plain = Drawn {
            div: 1.0,
            unit: None,
            ticks: axis.ticks,
        };
        if axis.ticks != Ticks::Bytes || axis.log {
            return plain;
        }
        // The largest binary unit that the axis' end reaches.
        let units = [(1u64 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB")];
        units
            .iter()
            .find(|(u, _)| hi.abs() >= *u as f64)
            .map(|&(u, name)| Drawn {
                div: u as f64,
                unit: Some(name),
                ..plain
            })
            .unwrap_or(Drawn {
                unit: Some("B"),
                ..plain
            })
    }

    fn label(&self, v: f64) -> String {
        match self.unit {
            Some(u) => format!("{} {u}", trim(format!("{v:.2}"))),
            None => tick(self.ticks, v),
        }
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> anyhow::Result<()> {
    root.fill(&WHITE).map_err(drawing)?;
    let ((x0, x1), (y0, y1)) = chart.bounds();
    let (dx, dy) = (Drawn::of(&chart.x, x1), Drawn::of(&chart.y, y1));
    let (x0, x1, y0, y1) = (x0 / dx.div, x1 / dx.div, y0 / dy.div, y1 / dy.div);
    let d = (dx, dy);
    match (chart.x.log, chart.y.log) {
        (false, false) => draw_in(root, chart, d, x0..x1, y0..y1),
        (true, false) => draw_in(root, chart, d, (x0..x1).log_scale(), y0..y1),
        (false, true) => draw_in(root, chart, d, x0..x1, (y0..y1).log_scale()),
        (true, true) => draw_in(root, chart, d, (x0..x1).log_scale(), (y0..y1).log_scale()),
    }
}

fn draw_in<DB, X, Y>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
    (dx, dy): (Drawn, Drawn),
    x: X,
    y: Y,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut cc = ChartBuilder::on(root)
        .caption(&chart.title, (FAMILY, 22))
        .margin(16)
        // Room for the last x tick label, centred on the axis' end.
        .margin_right(48)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)
        .map_err(drawing)?;
    let xf = move |v: &f64| dx.label(*v);
    let yf = move |v: &f64| dy.label(*v);
    cc.configure_mesh()
        .x_desc(chart.x.label.as_str())
        .y_desc(chart.y.label.as_str())
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .x_labels(8)
        .y_labels(8)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 15))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(drawing)?;
    for (i, s) in chart.series.iter().enumerate() {
        let c = color(i);
        let width = if s.thin { 1 } else { 2 };
        let pts: Vec<(f64, f64)> = chart
            .visible(s)
            .map(|(x, y)| (x / dx.div, y / dy.div))
            .collect();
        cc.draw_series(LineSeries::new(pts.clone(), c.stroke_width(width)))
            .map_err(drawing)?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(2)));
        if s.markers {
            cc.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(drawing)?;
        }
    }
    if chart.series.iter().any(|s| !s.label.is_empty()) {
        let pos = match chart.legend {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
            Legend::LowerLeft => SeriesLabelPosition::LowerLeft,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        };
        cc.configure_series_labels()
            .position(pos)
            .label_font((FAMILY, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .draw()
            .map_err(drawing)?;
    }
    Ok(())
}

/// A tick label for a value on an axis of this kind.
pub fn tick(kind: Ticks, v: f64) -> String {
    match kind {
        Ticks::Number => trim(format!("{v:.3}")),
        Ticks::Ratio => trim(format!("{v:.3}")),
        Ticks::Count => scaled(v, 1000.0, &["", "k", "M", "G", "T"]),
        Ticks::Bytes => scaled(v, 1024.0, &[" B", " KB", " MB", " GB", " TB"]),
        Ticks::Seconds => format!("{} s", trim(format!("{v:.2}"))),
        Ticks::Micros => {
            if v.abs() >= 1e6 {
                format!("{} s", trim(format!("{:.2}", v / 1e6)))
            } else if v.abs() >= 1e3 {
                format!("{} ms", trim(format!("{:.2}", v / 1e3)))
            } else {
                format!("{} µs", trim(format!("{v:.2}")))
            }
        }
        Ticks::Tail => {
            if v <= 1.0 {
                return "0%".to_string();
            }
            // v = 1 / (1 - q): as many decimals as the nines need, and more
            // if rounding would say 100% of a quantile below 1.
            let pct = 100.0 * (1.0 - 1.0 / v);
            let mut decimals = (v.log10().ceil() as i32 - 2).clamp(0, 12) as usize;
            loop {
                let s = trim(format!("{pct:.decimals$}"));
                if s != "100" || decimals >= 12 {
                    return format!("{s}%");
                }
                decimals += 1;
            }
        }
    }
}

/// `v` in the largest unit of `units` (each `base` times the previous) that
/// keeps it at least 1, with at most one decimal.
fn scaled(v: f64, base: f64, units: &[&str]) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    let mut x = v;
    let mut i = 0;
    while x.abs() >= base && i + 1 < units.len() {
        x /= base;
        i += 1;
    }
    let unit = units.get(i).copied().unwrap_or("");
    format!("{}{unit}", trim(format!("{x:.1}")))
}

/// "1.500" -> "1.5", "2.000" -> "2", "-0.000" -> "0".
fn trim(s: String) -> String {
    let t = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if t == "-0" {
        "0".to_string()
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_speak_the_unit() {
        assert_eq!(tick(Ticks::Ratio, 0.95), "0.95");
        assert_eq!(tick(Ticks::Ratio, 1.0), "1");
        assert_eq!(tick(Ticks::Count, 0.0), "0");
        assert_eq!(tick(Ticks::Count, 250_000.0), "250k");
        assert_eq!(tick(Ticks::Count, 1_500_000.0), "1.5M");
        assert_eq!(tick(Ticks::Bytes, 64.0 * 1048576.0), "64 MB");
        assert_eq!(tick(Ticks::Bytes, 512.0), "512 B");
        assert_eq!(tick(Ticks::Bytes, 1536.0), "1.5 KB");
        assert_eq!(tick(Ticks::Micros, 85.0), "85 µs");
        assert_eq!(tick(Ticks::Micros, 1250.0), "1.25 ms");
        assert_eq!(tick(Ticks::Seconds, 2.5), "2.5 s");
        assert_eq!(tick(Ticks::Tail, 1.0), "0%");
        assert_eq!(tick(Ticks::Tail, 2.0), "50%");
        assert_eq!(tick(Ticks::Tail, 10.0), "90%");
        assert_eq!(tick(Ticks::Tail, 100.0), "99%");
        assert_eq!(tick(Ticks::Tail, 1000.0), "99.9%");
        assert_eq!(tick(Ticks::Tail, 100_000.0), "99.999%");
        assert_eq!(tick(Ticks::Tail, 1.0 / (1.0 - 0.99999)), "99.999%");
        assert_eq!(tick(Ticks::Tail, 2.9e6), "99.99997%");
    }

    #[test]
    fn bounds_pad_the_data_and_keep_ratios_in_range() {
        let ratio = Axis::new("hit", Ticks::Ratio);
        let (lo, hi) = bounds(&ratio, &[0.90, 0.98]);
        assert!(lo < 0.90 && lo > 0.85, "{lo}");
        assert!((hi - 0.984).abs() < 1e-9, "{hi}");
        // A constant ratio at 1 still gets a visible frame.
        let (lo, hi) = bounds(&ratio, &[1.0, 1.0]);
        assert!(lo < 1.0 && hi == 1.0, "{lo} {hi}");
        let bytes = Axis::new("size", Ticks::Bytes).from_zero();
        assert_eq!(bounds(&bytes, &[100.0, 200.0]).0, 0.0);
        let log = Axis::new("us", Ticks::Micros).log(true);
        let (lo, hi) = bounds(&log, &[10.0, 1000.0]);
        assert!(lo < 10.0 && lo > 5.0 && hi > 1000.0 && hi < 2000.0);
        let fixed = Axis::new("q", Ticks::Ratio).range(0.0, 1.0);
        assert_eq!(bounds(&fixed, &[0.5]), (0.0, 1.0));
        assert_eq!(bounds(&Axis::new("empty", Ticks::Number), &[]), (0.0, 1.0));
    }

    #[test]
    fn byte_axes_are_drawn_in_the_unit_their_end_reaches() {
        let bytes = Axis::new("size", Ticks::Bytes);
        let d = Drawn::of(&bytes, 160.0 * 1048576.0);
        assert_eq!((d.div, d.unit), (1048576.0, Some("MB")));
        assert_eq!(d.label(50.0), "50 MB");
        assert_eq!(Drawn::of(&bytes, 3.0 * 1073741824.0).unit, Some("GB"));
        assert_eq!(Drawn::of(&bytes, 900.0).unit, Some("B"));
        // Other axes and log byte axes keep raw values and their own labels.
        let count = Drawn::of(&Axis::new("n", Ticks::Count), 5e6);
        assert_eq!((count.div, count.unit), (1.0, None));
        assert_eq!(count.label(2e6), "2M");
        assert_eq!(Drawn::of(&bytes.log(true), 1e9).div, 1.0);
    }
}
