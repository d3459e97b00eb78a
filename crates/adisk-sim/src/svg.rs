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

/// Render a line chart over categorical x values (in first-seen order).
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> String {
    let (w, h) = (820.0, 480.0);
    let (ml, mr, mt, mb) = (80.0, 200.0, 40.0, 60.0);
    let mut xs: Vec<String> = Vec::new();
    for s in series {
        for (x, _) in &s.points {
            if !xs.contains(x) {
                xs.push(x.clone());
            }
        }
    }
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .collect();
    let tf = |v: f64| if log_y { v.max(1e-12).log10() } else { v };
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
    let pw = w - ml - mr;
    let ph = h - mt - mb;
    let xpos = |i: usize| {
        ml + if xs.len() <= 1 {
            pw / 2.0
        } else {
            pw * i as f64 / (xs.len() - 1) as f64
        }
    };
    let ypos = |v: f64| mt + ph - (tf(v) - ymin) / (ymax - ymin) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
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
    for k in 0..=5 {
        let t = ymin + (ymax - ymin) * k as f64 / 5.0;
        let y = mt + ph - ph * k as f64 / 5.0;
        let label = if log_y {
            format!("{:.3}", 10f64.powf(t))
        } else {
            format!("{:.3}", t)
        };
        let _ = writeln!(
            s,
            r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##,
            ml,
            ml + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            ml - 5.0,
            y + 4.0,
            label
        );
    }
    for (i, x) in xs.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            xpos(i),
            mt + ph + 18.0,
            esc(x)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        ml + pw / 2.0,
        h - 15.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">{}</text>"#,
        mt + ph / 2.0,
        mt + ph / 2.0,
        esc(y_label)
    );
    for (si, ser) in series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        let mut pts = String::new();
        for (x, y) in &ser.points {
            if !y.is_finite() {
                continue;
            }
            if let Some(i) = xs.iter().position(|v| v == x) {
                let _ = write!(pts, "{:.1},{:.1} ", xpos(i), ypos(*y));
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    xpos(i),
                    ypos(*y)
                );
            }
        }
        let _ = writeln!(
            s,
            r#"<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>"#
        );
        let ly = mt + 14.0 * si as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{}" width="10" height="10" fill="{color}"/>"#,
            ml + pw + 10.0,
            ly
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            ml + pw + 25.0,
            ly + 9.0,
            esc(&ser.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// One bar of a stacked chart: series label and stacked segment values.
pub struct Bar {
    /// Series (e.g. the architecture).
    pub label: String,
    /// Segment values, bottom to top.
    pub segments: Vec<f64>,
}

/// Grouped stacked bars (memik-… style): one group per x category, one bar per series,
/// segments stacked (e.g. computation / I/O / communication of a normalized time).
pub fn stacked_bars(
    title: &str,
    y_label: &str,
    segment_names: &[&str],
    groups: &[(String, Vec<Bar>)],
) -> String {
    let (w, h) = (900.0, 500.0);
    let (ml, mr, mt, mb) = (70.0, 170.0, 40.0, 90.0);
    let pw = w - ml - mr;
    let ph = h - mt - mb;
    let ymax = groups
        .iter()
        .flat_map(|(_, bars)| {
            bars.iter()
                .map(|b| b.segments.iter().filter(|v| v.is_finite()).sum::<f64>())
        })
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.05;
    let seg_colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="13">{}</text>"#,
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
    for k in 0..=5 {
        let v = ymax * k as f64 / 5.0;
        let y = mt + ph - ph * k as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##,
            ml + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{:.2}</text>"#,
            ml - 5.0,
            y + 4.0,
            v
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
        mt + ph / 2.0,
        mt + ph / 2.0,
        esc(y_label)
    );
    let ng = groups.len().max(1) as f64;
    let gw = pw / ng;
    for (gi, (gx, bars)) in groups.iter().enumerate() {
        let nb = bars.len().max(1) as f64;
        let bw = gw * 0.8 / nb;
        let x0 = ml + gi as f64 * gw + gw * 0.1;
        for (bi, bar) in bars.iter().enumerate() {
            let x = x0 + bi as f64 * bw;
            let mut y = mt + ph;
            for (si, v) in bar.segments.iter().enumerate() {
                if !v.is_finite() || *v <= 0.0 {
                    continue;
                }
                let hgt = v / ymax * ph;
                y -= hgt;
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}" stroke="white" stroke-width="0.5"/>"#,
                    x,
                    y,
                    bw * 0.95,
                    hgt,
                    seg_colors[si % seg_colors.len()]
                );
            }
            let lx = x + bw * 0.45;
            let ly = mt + ph + 8.0;
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
            h - 12.0,
            esc(gx)
        );
    }
    for (si, name) in segment_names.iter().enumerate() {
        let ly = mt + 16.0 * si as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{}" width="10" height="10" fill="{}"/>"#,
            ml + pw + 15.0,
            ly,
            seg_colors[si % seg_colors.len()]
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            ml + pw + 30.0,
            ly + 9.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}
