//! The report's solver section: every valid layout `solve` costed as a point (peak memory
//! against step time, the two objectives), the Pareto front joined, the chosen plan
//! ringed; and the table `planc solve` prints.

use std::fmt::Write;

use planc_compiler::cost::TimeMethod;
use planc_compiler::solve::{Candidate, Solution};
use planc_simulator::svg::escape;
use serde::Serialize;

use crate::solve::{layout_words, peak_bytes};

const WIDTH: f64 = 1400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 40.0;
const PLOT_H: f64 = 380.0;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// Points drawn at most (best first); the rest are counted under the chart.
pub const MAX_POINTS: usize = 5000;

/// A row of the candidates table.
#[derive(Serialize)]
pub struct Row {
    pub rank: usize,
    pub layout: String,
    pub memory: String,
    pub step: String,
    pub mfu: String,
    /// Per million tokens: money with `cluster.price`, else GPU-hours (the heading says).
    pub cost: String,
    pub limited_by: &'static str,
    pub pareto: bool,
    pub chosen: bool,
}

pub fn rows(s: &Solution, top: usize) -> Vec<Row> {
    let mut shown: Vec<usize> = (0..s.ranked.len().min(top)).collect();
    for &i in &s.pareto {
        if !shown.contains(&i) {
            shown.push(i);
        }
    }
    shown.sort();
    // With the cluster's size a hole, a layout is named with its GPUs.
    let world = |c: &Candidate| c.plan.cluster.world_size();
    let sized = s.ranked.iter().any(|c| world(c) != world(&s.ranked[0]));
    shown
        .into_iter()
        .map(|i| {
            let c = &s.ranked[i];
            Row {
                rank: i + 1,
                layout: if sized {
                    format!("{} GPUs: {}", world(c), layout_words(c))
                } else {
                    layout_words(c)
                },
                memory: format!(
                    "{:.1} GiB ({:.0} %)",
                    peak_bytes(c) / GIB,
                    c.memory_fraction * 100.0
                ),
                step: format!(
                    "{:.3} s{}",
                    c.estimate.step_s,
                    if c.estimate.method == TimeMethod::Simulated {
                        ""
                    } else {
                        " †"
                    }
                ),
                mfu: format!("{:.1} %", c.estimate.mfu * 100.0),
                cost: crate::solve::cost_cell(c),
                limited_by: c.limiter.as_str(),
                pareto: s.pareto.contains(&i),
                chosen: i == 0,
            }
        })
        .collect()
}

fn nice(max: f64) -> f64 {
    let raw = max / 6.0;
    let base = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|k| k * base)
        .find(|&t| t >= raw)
        .unwrap_or(raw)
}

/// The scatter; `None` without valid candidates.
pub fn pareto_svg(s: &Solution, headroom: f64) -> Option<String> {
    let best = s.ranked.first()?;
    let drawn = &s.ranked[..s.ranked.len().min(MAX_POINTS)];
    let mem = |c: &Candidate| peak_bytes(c) / GIB;
    let capacity = best.estimate.stages[best.estimate.peak_stage].capacity_bytes / GIB;
    let max_x = drawn.iter().map(mem).fold(capacity, f64::max) * 1.05;
    let max_y = drawn.iter().map(|c| c.estimate.step_s).fold(0.0, f64::max) * 1.08;
    let (max_x, max_y) = (max_x.max(1e-9), max_y.max(1e-12));
    let pw = WIDTH - LEFT - RIGHT;
    let x = |g: f64| LEFT + pw * g / max_x;
    let y = |t: f64| TOP + PLOT_H - PLOT_H * t / max_y;
    let height = TOP + PLOT_H + 44.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="pareto" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r##"<circle cx="{LEFT}" cy="17" r="3.5" fill="#4e79a7"/><text x="{}" y="21">simulated</text><circle cx="{}" cy="17" r="3.5" fill="none" stroke="#888"/><text x="{}" y="21">closed form</text><polyline points="{},17 {},17" stroke="#e15759" stroke-width="2" fill="none"/><text x="{}" y="21">Pareto front (no layout both smaller and faster)</text><circle cx="{}" cy="17" r="7" fill="none" stroke="#000" stroke-width="2"/><text x="{}" y="21">chosen</text><line x1="{}" y1="17" x2="{}" y2="17" stroke="#d62728" stroke-dasharray="5 3" stroke-width="2"/><text x="{}" y="21">GPU capacity, and less the headroom</text>"##,
        LEFT + 8.0,
        LEFT + 90.0,
        LEFT + 98.0,
        LEFT + 190.0,
        LEFT + 214.0,
        LEFT + 220.0,
        LEFT + 520.0,
        LEFT + 530.0,
        LEFT + 600.0,
        LEFT + 624.0,
        LEFT + 630.0
    );
    axes(&mut out, max_x, max_y, &x, &y);
    for (g, dash) in [(capacity, "5 3"), (capacity * (1.0 - headroom), "2 3")] {
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1}" stroke="#d62728" stroke-width="1.5" stroke-dasharray="{dash}"/>"##,
            x(g),
            TOP + PLOT_H
        );
    }
    for (i, c) in drawn.iter().enumerate().rev() {
        let simulated = c.estimate.method == TimeMethod::Simulated;
        let _ = writeln!(
            out,
            r##"<circle class="candidate" cx="{:.1}" cy="{:.1}" r="3.5" fill="{}" stroke="{}" fill-opacity="0.8"><title>#{} {}: {:.1} GiB, {:.3} s ({})</title></circle>"##,
            x(mem(c)),
            y(c.estimate.step_s),
            if simulated { "#4e79a7" } else { "none" },
            if simulated { "#4e79a7" } else { "#888" },
            i + 1,
            escape(&layout_words(c)),
            mem(c),
            c.estimate.step_s,
            c.estimate.method.as_str()
        );
    }
    let front: Vec<String> = s
        .pareto
        .iter()
        .map(|&i| &s.ranked[i])
        .map(|c| format!("{:.1},{:.1}", x(mem(c)), y(c.estimate.step_s)))
        .collect();
    let _ = writeln!(
        out,
        r##"<polyline class="front" points="{}" stroke="#e15759" stroke-width="2" fill="none"/>"##,
        front.join(" ")
    );
    let (bx, by) = (x(mem(best)), y(best.estimate.step_s));
    let _ = writeln!(
        out,
        r##"<circle class="chosen" cx="{bx:.1}" cy="{by:.1}" r="8" fill="none" stroke="#000" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-weight="bold" text-anchor="{}" stroke="white" stroke-width="3" paint-order="stroke">chosen: {}</text>"##,
        if bx > WIDTH / 2.0 {
            bx - 12.0
        } else {
            bx + 12.0
        },
        by - 12.0,
        if bx > WIDTH / 2.0 { "end" } else { "start" },
        escape(&layout_words(best))
    );
    out.push_str("</svg>\n");
    Some(out)
}

fn axes(out: &mut String, max_x: f64, max_y: f64, x: &dyn Fn(f64) -> f64, y: &dyn Fn(f64) -> f64) {
    let bottom = TOP + PLOT_H;
    let dx = nice(max_x);
    let mut g = 0.0;
    while g <= max_x {
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{bottom}" stroke="#00000014"/><text x="{0:.1}" y="{1}" text-anchor="middle">{2} GiB</text>"##,
            x(g),
            bottom + 16.0,
            g
        );
        g += dx;
    }
    let dy = nice(max_y);
    let mut t = 0.0;
    while t <= max_y {
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#00000014"/><text x="{2}" y="{3:.1}" text-anchor="end">{4} s</text>"##,
            y(t),
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(t) + 4.0,
            format_g(t)
        );
        t += dy;
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">peak memory of the fullest GPU</text><text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">step time</text>"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        bottom + 36.0,
        TOP + PLOT_H / 2.0,
        TOP + PLOT_H / 2.0
    );
}

fn format_g(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
