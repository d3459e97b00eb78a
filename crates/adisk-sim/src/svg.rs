//! Minimal SVG line/bar charts written by hand (no plotting dependency): one chart per
//! experiment, x = a sweep axis, one line per series.

use std::fmt::Write as _;

/// A series: label and (x label, y) points.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points: x category and value.
    pub points: Vec<(String, f64)>,
}

const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A chart's canvas: its size, its margins and the plot area inside them.
struct Frame {
    w: f64,
    h: f64,
    ml: f64,
    mt: f64,
    /// Plot width.
    pw: f64,
    /// Plot height.
    ph: f64,
}

impl Frame {
    /// A `w` × `h` canvas with left, right, top and bottom margins.
    fn new((w, h): (f64, f64), (ml, mr, mt, mb): (f64, f64, f64, f64)) -> Frame {
        Frame {
            w,
            h,
            ml,
            mt,
            pw: w - ml - mr,
            ph: h - mt - mb,
        }
    }

    /// The opening `<svg>` tag, white background, title and the two axes.
    fn open(&self, s: &mut String, font_size: u32, title_size: u32, title: &str) {
        let Frame {
            w,
            h,
            ml,
            mt,
            pw,
            ph,
        } = *self;
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="{font_size}">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="20" text-anchor="middle" font-size="{title_size}">{}</text>"#,
            ml + pw / 2.0,
            esc(title)
        );
        let _ = writeln!(
            s,
            r#"<line x1="{ml}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
            mt + ph,
            ml + pw,
            mt + ph
        );
        let _ = writeln!(
            s,
            r#"<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{}" stroke="black"/>"#,
            mt + ph
        );
    }

    /// Six horizontal grid lines, bottom to top, each labelled by `label(k)`.
    fn grid(&self, s: &mut String, label: impl Fn(usize) -> String) {
        let Frame { ml, mt, pw, ph, .. } = *self;
        for k in 0..=5 {
            let y = mt + ph - ph * k as f64 / 5.0;
            let _ = writeln!(
                s,
                r##"<line x1="{ml}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##,
                ml + pw
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                ml - 5.0,
                y + 4.0,
                label(k)
            );
        }
    }

    /// The x axis' label under the plot, and the y axis' label 20 px from the left edge.
    fn axis_labels(&self, s: &mut String, x_label: &str, y_label: &str) {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            self.ml + self.pw / 2.0,
            self.h - 15.0,
            esc(x_label)
        );
        self.y_label(s, 20, y_label);
    }

    /// The y axis' label, rotated, `x` from the left edge.
    fn y_label(&self, s: &mut String, x: u32, label: &str) {
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{}" text-anchor="middle" transform="rotate(-90 {x} {})">{}</text>"#,
            self.mt + self.ph / 2.0,
            self.mt + self.ph / 2.0,
            esc(label)
        );
    }
}

/// The x categories of `series`, in first-seen order.
fn categories(series: &[Series]) -> Vec<String> {
    let mut xs: Vec<String> = Vec::new();
    for s in series {
        for (x, _) in &s.points {
            if !xs.contains(x) {
                xs.push(x.clone());
            }
        }
    }
    xs
}

/// A value on the y axis' scale: its log10 on a log axis.
fn y_scaled(v: f64, log_y: bool) -> f64 {
    if log_y { v.max(1e-12).log10() } else { v }
}

/// The y axis' range (scaled) over the finite values of `series`: from 0 on a linear axis,
/// never empty.
fn y_range(series: &[Series], log_y: bool) -> (f64, f64) {
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .collect();
    let tf = |v: f64| y_scaled(v, log_y);
    let mut ymin = ys.iter().cloned().map(tf).fold(f64::INFINITY, f64::min);
    let mut ymax = ys.iter().cloned().map(tf).fold(f64::NEG_INFINITY, f64::max);
    if !ymin.is_finite() || !ymax.is_finite() {
        ymin = 0.0;
        ymax = 1.0;
    }
    if !log_y {
        ymin = ymin.min(0.0);
    }
    if (ymax - ymin).abs() < 1e-12 {
        ymax = ymin + 1.0;
    }
    (ymin, ymax)
}

/// Render a line chart over categorical x values (in first-seen order).
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> String {
    let f = Frame::new((820.0, 480.0), (80.0, 200.0, 40.0, 60.0));
    let xs = categories(series);
    let (ymin, ymax) = y_range(series, log_y);
    let mut s = String::new();
    f.open(&mut s, 12, 14, title);
    f.grid(&mut s, |k| {
        let t = ymin + (ymax - ymin) * k as f64 / 5.0;
        if log_y {
            format!("{:.3}", 10f64.powf(t))
        } else {
            format!("{:.3}", t)
        }
    });
    let xpos = |i: usize| {
        f.ml + if xs.len() <= 1 {
            f.pw / 2.0
        } else {
            f.pw * i as f64 / (xs.len() - 1) as f64
        }
    };
    for (i, x) in xs.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            xpos(i),
            f.mt + f.ph + 18.0,
            esc(x)
        );
    }
    f.axis_labels(&mut s, x_label, y_label);
    let ypos = |v: f64| f.mt + f.ph - (y_scaled(v, log_y) - ymin) / (ymax - ymin) * f.ph;
    for (si, ser) in series.iter().enumerate() {
        series_line(&mut s, &f, si, ser, |x, y| {
            xs.iter().position(|v| v == x).map(|i| (xpos(i), ypos(y)))
        });
    }
    s.push_str("</svg>\n");
    s
}

/// Series `si`: a dot per finite point that `at` places, the line through them and its
/// legend entry.
fn series_line(
    s: &mut String,
    f: &Frame,
    si: usize,
    ser: &Series,
    at: impl Fn(&str, f64) -> Option<(f64, f64)>,
) {
    let color = COLORS[si % COLORS.len()];
    let mut pts = String::new();
    for (x, y) in &ser.points {
        if !y.is_finite() {
            continue;
        }
        if let Some((px, py)) = at(x, *y) {
            let _ = write!(pts, "{px:.1},{py:.1} ");
            let _ = writeln!(
                s,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="3" fill="{color}"/>"#
            );
        }
    }
    let _ = writeln!(
        s,
        r#"<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>"#
    );
    let ly = f.mt + 14.0 * si as f64;
    let _ = writeln!(
        s,
        r#"<rect x="{}" y="{}" width="10" height="10" fill="{color}"/>"#,
        f.ml + f.pw + 10.0,
        ly
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}">{}</text>"#,
        f.ml + f.pw + 25.0,
        ly + 9.0,
        esc(&ser.label)
    );
}

/// One bar of a stacked chart: series label and stacked segment values.
pub struct Bar {
    /// Series (e.g. the architecture).
    pub label: String,
    /// Segment values, bottom to top.
    pub segments: Vec<f64>,
}

/// Colours of the stacked segments, bottom to top.
const SEGMENT_COLORS: [&str; 4] = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"];

/// Grouped stacked bars (memik-… style): one group per x category, one bar per series,
/// segments stacked (e.g. computation / I/O / communication of a normalized time).
pub fn stacked_bars(
    title: &str,
    y_label: &str,
    segment_names: &[&str],
    groups: &[(String, Vec<Bar>)],
) -> String {
    let f = Frame::new((900.0, 500.0), (70.0, 170.0, 40.0, 90.0));
    let ymax = groups
        .iter()
        .flat_map(|(_, bars)| {
            bars.iter()
                .map(|b| b.segments.iter().filter(|v| v.is_finite()).sum::<f64>())
        })
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.05;
    let mut s = String::new();
    f.open(&mut s, 11, 13, title);
    f.grid(&mut s, |k| format!("{:.2}", ymax * k as f64 / 5.0));
    f.y_label(&mut s, 18, y_label);
    let gw = f.pw / groups.len().max(1) as f64;
    for (gi, (gx, bars)) in groups.iter().enumerate() {
        bar_group(&mut s, &f, ymax, gw, gi, gx, bars);
    }
    for (si, name) in segment_names.iter().enumerate() {
        let ly = f.mt + 16.0 * si as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{}" width="10" height="10" fill="{}"/>"#,
            f.ml + f.pw + 15.0,
            ly,
            SEGMENT_COLORS[si % SEGMENT_COLORS.len()]
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            f.ml + f.pw + 30.0,
            ly + 9.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Group `gi` (x category `gx`, `gw` wide) of a stacked chart: its bars, each with its label,
/// and the category under them.
fn bar_group(s: &mut String, f: &Frame, ymax: f64, gw: f64, gi: usize, gx: &str, bars: &[Bar]) {
    let nb = bars.len().max(1) as f64;
    let bw = gw * 0.8 / nb;
    let x0 = f.ml + gi as f64 * gw + gw * 0.1;
    for (bi, bar) in bars.iter().enumerate() {
        let x = x0 + bi as f64 * bw;
        let mut y = f.mt + f.ph;
        for (si, v) in bar.segments.iter().enumerate() {
            if !v.is_finite() || *v <= 0.0 {
                continue;
            }
            let hgt = v / ymax * f.ph;
            y -= hgt;
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}" stroke="white" stroke-width="0.5"/>"#,
                x,
                y,
                bw * 0.95,
                hgt,
                SEGMENT_COLORS[si % SEGMENT_COLORS.len()]
            );
        }
        let lx = x + bw * 0.45;
        let ly = f.mt + f.ph + 8.0;
        let _ = writeln!(
            s,
            r#"<text x="{lx:.1}" y="{ly:.1}" font-size="8" text-anchor="end" transform="rotate(-60 {lx:.1} {ly:.1})">{}</text>"#,
            esc(&bar.label)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="12">{}</text>"#,
        x0 + gw * 0.4,
        f.h - 12.0,
        esc(gx)
    );
}

/// A log-log scatter of (measured, predicted) pairs, one colour per series, with the line
/// predicted = measured and the ±25 % band around it (what `adisk validate` draws).
pub fn scatter(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let f = Frame::new((820.0, 560.0), (80.0, 200.0, 40.0, 60.0));
    let values = series
        .iter()
        .flat_map(|(_, p)| p.iter().flat_map(|(x, y)| [*x, *y]))
        .filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v.log10()), hi.max(v.log10()))
    });
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    } else {
        (lo.min(0.0) - 1.0, lo.max(0.0) + 1.0)
    };
    let pos = |v: f64, len: f64| (v.max(1e-12).log10() - lo) / (hi - lo) * len;
    let (px, py) = (
        |v: f64| f.ml + pos(v, f.pw),
        |v: f64| f.mt + f.ph - pos(v, f.ph),
    );
    let mut s = String::new();
    f.open(&mut s, 12, 14, title);
    f.grid(&mut s, |k| {
        format!("{:.3}", 10f64.powf(lo + (hi - lo) * k as f64 / 5.0))
    });
    for k in 0..=5 {
        let v = 10f64.powf(lo + (hi - lo) * k as f64 / 5.0);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{v:.3}</text>"#,
            px(v),
            f.mt + f.ph + 18.0
        );
    }
    let (a, b) = (10f64.powf(lo), 10f64.powf(hi));
    for (k, dash) in [(1.0, ""), (1.25, "4 4"), (0.75, "4 4")] {
        let _ = writeln!(
            s,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#888" stroke-dasharray="{dash}"/>"##,
            px(a),
            py(a * k),
            px(b),
            py(b * k)
        );
    }
    f.axis_labels(&mut s, x_label, y_label);
    for (si, (label, points)) in series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        for (x, y) in points.iter().filter(|(x, y)| *x > 0.0 && *y > 0.0) {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}" fill-opacity="0.8"/>"#,
                px(*x),
                py(*y)
            );
        }
        let ly = f.mt + 14.0 * si as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{ly}" width="10" height="10" fill="{color}"/><text x="{}" y="{}">{}</text>"#,
            f.ml + f.pw + 10.0,
            f.ml + f.pw + 25.0,
            ly + 9.0,
            esc(label)
        );
    }
    s.push_str("</svg>\n");
    s
}
