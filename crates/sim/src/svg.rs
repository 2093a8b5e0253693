//! Charts as hand-written SVG: no plotting dependency, and the same bytes for the same run.

use std::fmt::Write as _;

use super::learn::CurvePoint;
use super::report::Sample;

const WIDTH: f64 = 980.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
/// Room on the right for the legend.
const RIGHT: f64 = 330.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

/// Maps data coordinates to the plot area.
struct Frame {
    x: (f64, f64),
    y: (f64, f64),
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        let span = (self.x.1 - self.x.0).max(f64::EPSILON);
        LEFT + (x - self.x.0) / span * (WIDTH - LEFT - RIGHT)
    }

    fn py(&self, y: f64) -> f64 {
        let span = (self.y.1 - self.y.0).max(f64::EPSILON);
        HEIGHT - BOTTOM - (y - self.y.0) / span * (HEIGHT - TOP - BOTTOM)
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The x ticks to label: every whole step when they are few, five otherwise.
fn x_ticks(frame: &Frame) -> Vec<f64> {
    let span = frame.x.1 - frame.x.0;
    if span <= 20.0 && frame.x.0.fract() == 0.0 {
        (0..=span as usize).map(|i| frame.x.0 + i as f64).collect()
    } else {
        (0..=4).map(|i| frame.x.0 + span * f64::from(i) / 4.0).collect()
    }
}

fn open(out: &mut String, title: &str, frame: &Frame, x_label: &str, y_label: &str, y_format: &dyn Fn(f64) -> String) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM);
    let _ = writeln!(out, r##"<path d="M{x0},{y0} V{y1} H{x1}" fill="none" stroke="#333"/>"##);
    for i in 0..=4 {
        let value = frame.y.0 + (frame.y.1 - frame.y.0) * f64::from(i) / 4.0;
        let y = frame.py(value);
        let _ = writeln!(out, r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/>"##);
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            x0 - 6.0,
            y + 4.0,
            y_format(value)
        );
    }
    for value in x_ticks(frame) {
        let x = frame.px(value);
        let _ = writeln!(out, r##"<line x1="{x:.1}" y1="{y1}" x2="{x:.1}" y2="{:.1}" stroke="#333"/>"##, y1 + 4.0);
        let _ = writeln!(out, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{value:.0}</text>"#, y1 + 17.0);
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 8.0,
        escape(x_label)
    );
    let _ = writeln!(
        out,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        escape(y_label)
    );
}

fn polyline(out: &mut String, points: &[(f64, f64)], colour: &str, dashed: bool) {
    let path: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let dash = if dashed { r#" stroke-dasharray="5,4""# } else { "" };
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
        path.join(" ")
    );
}

/// A second line under a legend entry.
fn legend_note(out: &mut String, row: usize, text: &str) {
    let y = TOP + 8.0 + 16.0 * row as f64;
    let _ =
        writeln!(out, r##"<text x="{}" y="{}" fill="#555">{}</text>"##, WIDTH - RIGHT + 46.0, y + 4.0, escape(text));
}

fn legend(out: &mut String, row: usize, colour: &str, text: &str, dashed: bool) {
    let y = TOP + 8.0 + 16.0 * row as f64;
    let x = WIDTH - RIGHT + 20.0;
    let dash = if dashed { r#" stroke-dasharray="5,4""# } else { "" };
    let _ = writeln!(
        out,
        r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>"#,
        x + 20.0
    );
    let _ = writeln!(out, r#"<text x="{}" y="{}">{}</text>"#, x + 26.0, y + 4.0, escape(text));
}

/// The bids of each sample negotiation by round, relative to its ask, so that negotiations over
/// different prices share one scale. Solid: the buyer's bids and the seller's (alternating rounds);
/// a dot marks the deal.
pub fn price_convergence(samples: &[Sample]) -> String {
    let rounds = samples.iter().map(|s| s.bids.len()).max().unwrap_or(1).max(2);
    let lowest =
        samples.iter().flat_map(|s| s.bids.iter().map(move |&b| b as f64 / s.ask as f64)).fold(1.0_f64, f64::min);
    let frame = Frame { x: (1.0, rounds as f64), y: ((lowest - 0.05).max(0.0), 1.05) };
    let mut out = String::new();
    open(&mut out, "Price convergence: bids per round, as a share of the ask", &frame, "round", "bid / ask", &|v| {
        format!("{:.0}%", v * 100.0)
    });
    for (i, sample) in samples.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let at = |round: usize, amount: i64| (frame.px(round as f64), frame.py(amount as f64 / sample.ask as f64));
        let side = |first: usize| -> Vec<(f64, f64)> {
            sample.bids.iter().enumerate().skip(first).step_by(2).map(|(r, &amount)| at(r + 1, amount)).collect()
        };
        polyline(&mut out, &side(0), colour, false);
        polyline(&mut out, &side(1), colour, true);
        if let Some(price) = sample.price {
            let (x, y) = at(sample.bids.len(), price);
            let _ = writeln!(out, r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{colour}"/>"#);
        }
        let deal = sample.price.map_or_else(|| "no deal".to_string(), |p| format!("deal {p}"));
        legend(&mut out, 2 * i, colour, &format!("{} buyer / {} seller", sample.buyer, sample.seller), false);
        legend_note(
            &mut out,
            2 * i + 1,
            &format!("value {}, cost {}, ask {}: {deal}", sample.value, sample.cost, sample.ask),
        );
    }
    legend(&mut out, 2 * samples.len(), "#333", "solid: buyer's bids; dashed: seller's", true);
    out.push_str("</svg>\n");
    out
}

/// Mean rewards (surplus / ask) per training cycle, and the agreement rate.
pub fn training_curves(curve: &[CurvePoint]) -> String {
    let last = curve.last().map_or(1, |p| p.episodes) as f64;
    let top = curve.iter().map(|p| p.buyer_reward.max(p.seller_reward).max(p.agreement_rate)).fold(0.0_f64, f64::max);
    let frame = Frame { x: (0.0, last), y: (0.0, (top * 1.1).max(0.1)) };
    let mut out = String::new();
    open(
        &mut out,
        "Q-learning: mean reward per cycle",
        &frame,
        "episodes",
        "reward (surplus / ask), agreement rate",
        &|v| format!("{v:.2}"),
    );
    type Series = (&'static str, &'static str, fn(&CurvePoint) -> f64, bool);
    let series: [Series; 3] = [
        ("buyer reward", COLOURS[0], |p| p.buyer_reward, false),
        ("seller reward", COLOURS[1], |p| p.seller_reward, false),
        ("agreement rate", COLOURS[2], |p| p.agreement_rate, true),
    ];
    for (row, (label, colour, value, dashed)) in series.into_iter().enumerate() {
        let points: Vec<(f64, f64)> = curve.iter().map(|p| (frame.px(p.episodes as f64), frame.py(value(p)))).collect();
        polyline(&mut out, &points, colour, dashed);
        legend(&mut out, row, colour, label, dashed);
    }
    out.push_str("</svg>\n");
    out
}

/// A ratio's mean and its interval's ends.
pub type Spread = (f64, f64, f64);

/// One strategy's ratios to its side's baseline: per opponent, the spread or nothing.
pub struct Bar {
    pub strategy: String,
    pub cells: Vec<(String, Option<Spread>)>,
}

/// Grouped bars, one group per opponent and one bar per strategy, with the 95 % interval as a
/// whisker; dashed lines mark 1 (the baseline) and 1.1.
pub fn ratio_bars(bars: &[Bar], title: &str) -> String {
    let groups: Vec<&str> = bars.first().map(|b| b.cells.iter().map(|(o, _)| o.as_str()).collect()).unwrap_or_default();
    let top = bars.iter().flat_map(|b| b.cells.iter().filter_map(|(_, c)| c.map(|c| c.2))).fold(1.2_f64, f64::max);
    let frame = Frame { x: (0.0, groups.len().max(1) as f64), y: (0.0, (top * 1.1 * 4.0).ceil() / 4.0) };
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM);
    let _ = writeln!(out, r##"<path d="M{x0},{y0} V{y1} H{x1}" fill="none" stroke="#333"/>"##);
    for i in 0..=4 {
        let value = frame.y.0 + (frame.y.1 - frame.y.0) * f64::from(i) / 4.0;
        let y = frame.py(value);
        let _ = writeln!(out, r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/>"##);
        let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{value:.2}</text>"#, x0 - 6.0, y + 4.0);
    }
    for (level, dash) in [(1.0, "2,3"), (1.1, "6,4")] {
        let y = frame.py(level);
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#333" stroke-dasharray="{dash}"/>"##
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">ratio to the baseline</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0
    );
    let slot = (frame.px(1.0) - frame.px(0.0)) * 0.8 / bars.len().max(1) as f64;
    for (g, group) in groups.iter().enumerate() {
        let left = frame.px(g as f64) + (frame.px(1.0) - frame.px(0.0)) * 0.1;
        for (b, bar) in bars.iter().enumerate() {
            let colour = COLOURS[b % COLOURS.len()];
            let Some((mean, low, high)) = bar.cells.get(g).and_then(|c| c.1) else { continue };
            let x = left + slot * b as f64;
            let (top_y, base_y) = (frame.py(mean.max(0.0)), frame.py(0.0));
            let _ = writeln!(
                out,
                r#"<rect x="{x:.1}" y="{top_y:.1}" width="{:.1}" height="{:.1}" fill="{colour}" fill-opacity="0.8"/>"#,
                slot * 0.9,
                base_y - top_y
            );
            let mid = x + slot * 0.45;
            let _ = writeln!(
                out,
                r##"<line x1="{mid:.1}" y1="{:.1}" x2="{mid:.1}" y2="{:.1}" stroke="#000"/>"##,
                frame.py(low.max(0.0)),
                frame.py(high.max(0.0))
            );
        }
        let centre = frame.px(g as f64 + 0.5);
        let _ = writeln!(
            out,
            r#"<text x="{centre:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            y1 + 17.0,
            escape(group)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">opponent</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 8.0
    );
    for (b, bar) in bars.iter().enumerate() {
        legend(&mut out, b, COLOURS[b % COLOURS.len()], &bar.strategy, false);
    }
    legend(&mut out, bars.len(), "#333", "1.1 (the goal)", true);
    out.push_str("</svg>\n");
    out
}
