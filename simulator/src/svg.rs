//! The pipeline timeline as SVG: a row per pipeline rank (compute above, communication
//! below), passes coloured by kind, idle time left pale so the bubble is visible.

use std::fmt::Write;

use crate::breakdown::Breakdown;
use crate::engine::Run;
use crate::graph::{Lane, StepGraph, TaskKind};
use crate::label::{category, label};

const WIDTH: f64 = 1400.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 70.0;
const COMPUTE_H: f64 = 22.0;
const COMM_H: f64 = 9.0;
const ROW_GAP: f64 = 6.0;

fn colour(category: &str) -> &'static str {
    match category {
        "forward" => "#4e79a7",
        "backward" => "#59a14f",
        "weight-grad" => "#8cd17d",
        "layer-comm" => "#f28e2b",
        "p2p" => "#b07aa1",
        "grad-reduce" => "#e15759",
        "param-gather" => "#ff9d9a",
        "optimizer" => "#79706e",
        _ => "#bab0ac",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A tick spacing of 1, 2 or 5 × 10^k giving about eight ticks.
fn tick(step: f64) -> f64 {
    let raw = step / 8.0;
    let base = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|k| k * base)
        .find(|&t| t >= raw)
        .unwrap_or(raw)
}

pub fn timeline_svg(
    sg: &StepGraph,
    run: &Run,
    rank_names: &[String],
    title: &str,
    b: &Breakdown,
) -> String {
    let g = &sg.graph;
    let row = COMPUTE_H + COMM_H + ROW_GAP;
    let height = TOP + row * sg.ranks as f64 + 40.0;
    let span = run.step_s.max(1e-12);
    let x = |t: f64| LEFT + (WIDTH - LEFT - RIGHT) * t / span;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="38">step {:.3} s on rank {}: compute {:.1} %, exposed communication {:.1} %, bubble {:.1} %</text>"#,
        b.step_s,
        b.rank,
        100.0 * b.compute_s / b.step_s,
        100.0 * b.exposed_comm_s / b.step_s,
        100.0 * b.bubble_s / b.step_s
    );
    let legend = [
        ("forward", "forward"),
        ("backward", "backward"),
        ("weight-grad", "weight gradient"),
        ("layer-comm", "TP/CP/EP collectives"),
        ("p2p", "pipeline send"),
        ("grad-reduce", "DP gradient reduce"),
        ("param-gather", "parameter gather"),
        ("optimizer", "optimizer"),
    ];
    let mut lx = 10.0;
    for (cat, name) in legend {
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="48" width="10" height="10" fill="{}"/><text x="{}" y="57">{name}</text>"#,
            colour(cat),
            lx + 14.0
        );
        lx += 26.0 + 6.5 * name.len() as f64;
    }
    let _ = writeln!(
        s,
        r##"<rect x="{lx}" y="48" width="10" height="10" fill="#eeeeee" stroke="#cccccc"/><text x="{}" y="57">idle</text>"##,
        lx + 14.0
    );
    for r in 0..sg.ranks {
        let y = TOP + row * r as f64;
        let name = rank_names
            .get(r as usize)
            .cloned()
            .unwrap_or_else(|| format!("rank {r}"));
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}">{}</text>"#,
            y + 15.0,
            escape(&name)
        );
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y:.1}" width="{:.1}" height="{COMPUTE_H}" fill="#eeeeee"/>"##,
            WIDTH - LEFT - RIGHT
        );
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{:.1}" width="{:.1}" height="{COMM_H}" fill="#f6f6f6"/>"##,
            y + COMPUTE_H,
            WIDTH - LEFT - RIGHT
        );
    }
    for n in g.node_indices() {
        let t = &g[n];
        if !run.finished[n.index()] || t.duration <= 0.0 {
            continue;
        }
        let (y, h) = match t.lane {
            Lane::Compute => (TOP + row * t.rank as f64, COMPUTE_H),
            Lane::Comm => (TOP + row * t.rank as f64 + COMPUTE_H, COMM_H),
        };
        let x0 = x(run.start[n.index()]);
        // Compute passes stay visible however short; communication is drawn to scale, so
        // that thousands of small sends do not paint the lane solid.
        let w = x(run.end[n.index()]) - x0;
        let w = if t.lane == Lane::Compute {
            w.max(0.3)
        } else {
            w
        };
        if w < 0.05 {
            continue;
        }
        let name = label(&t.kind);
        // A transfer that shared its link took longer than it would have alone.
        let took = run.end[n.index()] - run.start[n.index()];
        let time = if took > t.duration * 1.001 {
            format!("{:.3} ms, {:.3} ms alone", took * 1e3, t.duration * 1e3)
        } else {
            format!("{:.3} ms", t.duration * 1e3)
        };
        let _ = writeln!(
            s,
            r#"<rect x="{x0:.2}" y="{y:.1}" width="{w:.2}" height="{h}" fill="{}"><title>{} ({time})</title></rect>"#,
            colour(category(&t.kind)),
            escape(&name),
        );
        if t.comm > 0.0 {
            let c0 = x(run.end[n.index()] - t.comm);
            let _ = writeln!(
                s,
                r#"<rect x="{c0:.2}" y="{y:.1}" width="{:.2}" height="{h}" fill="{}"/>"#,
                (x(run.end[n.index()]) - c0).max(0.2),
                colour("layer-comm")
            );
        }
        if let TaskKind::Pass(work) = t.kind {
            if w > 16.0 && t.lane == Lane::Compute {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" fill="white" text-anchor="middle" font-size="9">{work}</text>"#,
                    x0 + w / 2.0,
                    y + 14.0
                );
            }
        }
    }
    let axis_y = TOP + row * sg.ranks as f64 + 4.0;
    let dt = tick(span);
    let unit = if span < 1.0 { ("ms", 1e3) } else { ("s", 1.0) };
    let mut t = 0.0;
    while t <= span * 1.0001 {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{axis_y:.1}" stroke="#00000022"/><text x="{0:.1}" y="{1:.1}" text-anchor="middle">{2} {3}</text>"##,
            x(t),
            axis_y + 14.0,
            format_tick(t * unit.1),
            unit.0
        );
        t += dt;
    }
    s.push_str("</svg>\n");
    s
}

fn format_tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round())
    } else {
        format!("{v:.2}")
    }
}
