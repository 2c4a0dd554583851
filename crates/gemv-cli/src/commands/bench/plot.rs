//! `--plot FILE.svg`: effective bandwidth against M, one line per (shape, tier), a dashed line at
//! the nominal peak. Plain SVG, no dependencies.

use super::Measurement;
use std::fmt::Write;

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// Renders and writes the plot.
pub fn write(path: &std::path::Path, rows: &[Measurement], peak: Option<f64>) -> std::io::Result<()> {
    std::fs::write(path, render(rows, peak))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The SVG text.
pub fn render(rows: &[Measurement], peak: Option<f64>) -> String {
    let (width, height, left, right, top, bottom) = (760.0, 440.0, 70.0, 220.0, 30.0, 50.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let max_m = rows.iter().map(|r| r.m).max().unwrap_or(1).max(2) as f64;
    let min_m = rows.iter().map(|r| r.m).min().unwrap_or(1) as f64;
    let top_gbps = rows.iter().map(|r| r.gbps).fold(peak.unwrap_or(0.0), f64::max).max(1e-9) * 1.1;
    let x = |m: f64| left + (m - min_m) / (max_m - min_m).max(1.0) * plot_w;
    let y = |g: f64| top + plot_h - g / top_gbps * plot_h;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(svg, r#"<text x="{}" y="18" font-size="14">effective bandwidth vs M</text>"#, left);
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        top + plot_h,
        left + plot_w,
        top + plot_h
    );
    let _ = writeln!(svg, r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>"#, top + plot_h);
    for m in (min_m as usize)..=(max_m as usize) {
        let _ =
            writeln!(svg, r#"<text x="{}" y="{}" text-anchor="middle">{m}</text>"#, x(m as f64), top + plot_h + 16.0);
    }
    let _ = writeln!(svg, r#"<text x="{}" y="{}" text-anchor="middle">M</text>"#, left + plot_w / 2.0, height - 10.0);
    for i in 0..=5 {
        let g = top_gbps * i as f64 / 5.0;
        let _ = writeln!(svg, r#"<text x="{}" y="{}" text-anchor="end">{g:.0}</text>"#, left - 6.0, y(g) + 4.0);
        let _ = writeln!(svg, r##"<line x1="{left}" y1="{0}" x2="{1}" y2="{0}" stroke="#eee"/>"##, y(g), left + plot_w);
    }
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {0})" text-anchor="middle">GB/s</text>"#,
        top + plot_h / 2.0
    );
    if let Some(p) = peak {
        let _ = writeln!(
            svg,
            r#"<line x1="{left}" y1="{0}" x2="{1}" y2="{0}" stroke="gray" stroke-dasharray="6 4"/>"#,
            y(p),
            left + plot_w
        );
        let _ = writeln!(svg, r#"<text x="{}" y="{}" fill="gray">peak {p:.0} GB/s</text>"#, left + 4.0, y(p) - 4.0);
    }
    let mut series: Vec<(String, Vec<&Measurement>)> = Vec::new();
    for r in rows {
        let key = format!("{} {}", r.shape, r.tier);
        match series.iter_mut().find(|(k, _)| *k == key) {
            Some((_, points)) => points.push(r),
            None => series.push((key, vec![r])),
        }
    }
    for (i, (key, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = points.iter().map(|r| format!("{:.1},{:.1}", x(r.m as f64), y(r.gbps))).collect();
        let _ =
            writeln!(svg, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, path.join(" "));
        for r in points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"><title>{} M={} {:.1} GB/s</title></circle>"#,
                x(r.m as f64),
                y(r.gbps),
                escape(&r.kernels),
                r.m,
                r.gbps
            );
        }
        let ly = top + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{0}" y1="{ly}" x2="{1}" y2="{ly}" stroke="{color}" stroke-width="2"/>"#,
            left + plot_w + 12.0,
            left + plot_w + 32.0
        );
        let _ = writeln!(svg, r#"<text x="{}" y="{}">{}</text>"#, left + plot_w + 38.0, ly + 4.0, escape(key));
    }
    let _ = writeln!(svg, "</svg>");
    svg
}
