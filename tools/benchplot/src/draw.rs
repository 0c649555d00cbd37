//! Drawing with plotters: the same figure on the SVG and the bitmap (PNG) backend. Text goes
//! through plotters' ab_glyph path with DejaVu Sans embedded by the `dejavu` crate, so neither
//! backend needs a system font.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::data::Plot;

/// Figure size in pixels (SVG user units).
const SIZE: (u32, u32) = (1200, 900);
/// One colour per series (read, write, ...).
const COLORS: [RGBColor; 4] = [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44), RGBColor(148, 103, 189)];
/// fio percentiles marked on the curve (dots, values in the legend).
const MARKED: [f64; 4] = [50.0, 99.0, 99.9, 99.99];

pub fn svg(p: &Plot, path: &Path) -> Result<(), String> {
    render(p, SVGBackend::new(path, SIZE).into_drawing_area()).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn png(p: &Plot, path: &Path) -> Result<(), String> {
    render(p, BitMapBackend::new(path, SIZE).into_drawing_area()).map_err(|e| format!("{}: {e}", path.display()))
}

/// DejaVu Sans as plotters' "sans-serif", registered once.
fn font() -> Result<(), String> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).is_ok());
    if ok {
        Ok(())
    } else {
        Err("the embedded DejaVu Sans font did not load".into())
    }
}

/// A latency given in µs as a tick label with its unit ("100 ns", "10 µs", "1 ms").
pub fn latency_label(us: f64) -> String {
    let (v, unit) = if us < 1.0 {
        (us * 1000.0, "ns")
    } else if us < 1000.0 {
        (us, "µs")
    } else if us < 1_000_000.0 {
        (us / 1000.0, "ms")
    } else {
        (us / 1_000_000.0, "s")
    };
    let r = (v * 1000.0).round() / 1000.0;
    format!("{r} {unit}")
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn render<DB: DrawingBackend>(p: &Plot, root: DrawingArea<DB, Shift>) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    font()?;
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(&format!("Completion latency (fio clat): {}", p.title), ("sans-serif", 26)).map_err(err)?;
    let (top, bottom) = root.split_vertically(SIZE.1 * 52 / 100);
    let (lo, hi) = p.axis_ns();
    let us = |ns: u64| ns as f64 / 1000.0;
    let mut ticks = Vec::new();
    let mut t = lo;
    while t <= hi {
        ticks.push(us(t));
        t = match t.checked_mul(10) {
            Some(n) => n,
            None => break,
        };
    }
    // A hair wider than the outer ticks so both are drawn.
    let x = || (us(lo) * 0.999..us(hi) * 1.001).log_scale().with_key_points(ticks.clone());

    // The histogram: I/Os per fio bucket.
    let max_count = p.series.iter().flat_map(|s| s.buckets.iter().map(|b| b.2)).max().unwrap_or(1);
    let mut ytop = 10u64;
    while ytop < max_count {
        ytop = ytop.saturating_mul(10);
    }
    let mut yticks = Vec::new();
    let mut t = 1u64;
    while t <= ytop {
        yticks.push(t as f64);
        t *= 10;
    }
    let mut ch = ChartBuilder::on(&top)
        .margin(12)
        .margin_right(48)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x(), (0.5..ytop as f64 * 1.001).log_scale().with_key_points(yticks))
        .map_err(err)?;
    ch.configure_mesh()
        .x_desc("completion latency (log scale)")
        .y_desc("I/Os per bucket (log scale)")
        .x_label_formatter(&|v| latency_label(*v))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(err)?;
    for (i, s) in p.series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        ch.draw_series(s.buckets.iter().map(|&(a, b, n)| Rectangle::new([(us(a), 0.5), (us(p.bucket_end(a, b)), n as f64)], c.mix(0.65).filled())))
            .map_err(err)?
            .label(format!("{} ({} I/Os)", s.name, s.total))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
    }
    ch.configure_series_labels()
        .label_font(("sans-serif", 16))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(err)?;

    // The percentile curve: share of I/Os completed within each bucket's upper edge.
    let mut ch = ChartBuilder::on(&bottom)
        .margin(12)
        .margin_right(48)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x(), 0.0..100.5)
        .map_err(err)?;
    ch.configure_mesh()
        .x_desc("completion latency (log scale)")
        .y_desc("percentile (%)")
        .x_label_formatter(&|v| latency_label(*v))
        .y_label_formatter(&|v| format!("{v:.0} %"))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(err)?;
    for (i, s) in p.series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let total = s.total.max(1) as f64;
        let mut acc = 0u64;
        let mut pts = vec![(us(s.buckets.first().map_or(lo, |b| b.0)), 0.0)];
        for &(a, b, n) in &s.buckets {
            acc += n;
            pts.push((us(p.bucket_end(a, b)), acc as f64 * 100.0 / total));
        }
        let marks: Vec<(f64, u64)> = s.percentiles.iter().copied().filter(|(q, _)| MARKED.iter().any(|m| (m - q).abs() < 1e-9)).collect();
        let mut label = s.name.clone();
        for (k, &(q, v)) in marks.iter().enumerate() {
            label.push_str(&format!("{} p{q} {}", if k == 0 { ":" } else { "," }, latency_label(us(v))));
        }
        ch.draw_series(LineSeries::new(pts, c.stroke_width(2))).map_err(err)?.label(label).legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], c.stroke_width(2)));
        ch.draw_series(marks.iter().map(|&(q, v)| Circle::new((us(v), q), 4, c.filled()))).map_err(err)?;
    }
    ch.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 16))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_carry_units() {
        assert_eq!(latency_label(0.1), "100 ns");
        assert_eq!(latency_label(1.0), "1 µs");
        assert_eq!(latency_label(100.0), "100 µs");
        assert_eq!(latency_label(10_000.0), "10 ms");
        assert_eq!(latency_label(1_000_000.0), "1 s");
        assert_eq!(latency_label(44.8), "44.8 µs");
    }
}
