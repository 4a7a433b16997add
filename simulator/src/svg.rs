//! The pipeline timeline as SVG: a row per pipeline rank (its compute stream above, its
//! communication lane below), passes coloured by kind, exposed communication in orange
//! (a pass's in-layer collectives solid, waiting on a transfer striped), the bubble left
//! pale. A step of many micro-batches has its steady state folded into a labelled band
//! (`fold`), so the ends stay readable at 512 micro-batches.
//!
//! The drawing sits in a nested `<svg id="timeline-plot">` whose `viewBox` a page may
//! narrow to zoom along time (`planc report` does); its text carries class `k` so that
//! such a page can keep it upright.

use std::fmt::Write;

use crate::breakdown::{compute_streams, Breakdown, Piece, Use};
use crate::engine::Run;
use crate::fold::{self, piece_category, Axis, Fold, SHARE_ORDER};
use crate::graph::{Lane, StepGraph, TaskKind};
use crate::label::{category, label};

const WIDTH: f64 = 1400.0;
const LEFT: f64 = 170.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 84.0;
/// Above the first row, inside the plot: the fold bands' labels.
const BAND_HEAD: f64 = 30.0;
const COMPUTE_H: f64 = 22.0;
const COMM_H: f64 = 9.0;
const ROW_GAP: f64 = 6.0;
const ROW: f64 = COMPUTE_H + COMM_H + ROW_GAP;
/// Width of a folded stretch.
const FOLD_W: f64 = 130.0;
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
/// Passes at least this wide carry their name (`F12`, `B3.1`).
const LABEL_W: f64 = 16.0;

pub fn colour(category: &str) -> &'static str {
    match category {
        "forward" => "#4e79a7",
        "backward" => "#59a14f",
        "weight-grad" => "#8cd17d",
        "layer-comm" => "#f28e2b",
        "comm-wait" => "url(#comm-wait)",
        "p2p" => "#b07aa1",
        "grad-reduce" => "#e15759",
        "param-gather" => "#ff9d9a",
        "optimizer" => "#79706e",
        "bubble" => "#eeeeee",
        _ => "#bab0ac",
    }
}

/// What the legend calls each category, in its order.
pub const LEGEND: [(&str, &str); 10] = [
    ("forward", "forward"),
    ("backward", "backward"),
    ("weight-grad", "weight gradient"),
    ("optimizer", "optimizer"),
    ("layer-comm", "TP/CP/EP collectives (exposed)"),
    ("comm-wait", "waiting on a transfer (exposed)"),
    ("bubble", "idle (bubble)"),
    ("p2p", "pipeline send"),
    ("grad-reduce", "DP gradient reduce"),
    ("param-gather", "parameter gather"),
];

/// Text for SVG and HTML, element content or a quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A tick spacing of 1, 2 or 5 × 10^k giving about eight ticks.
pub fn tick(step: f64) -> f64 {
    let raw = step / 8.0;
    let base = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|k| k * base)
        .find(|&t| t >= raw)
        .unwrap_or(raw)
}

/// Seconds as the axis and the bands say them.
pub fn seconds(t: f64) -> String {
    if t >= 1.0 {
        format!("{t:.2} s")
    } else {
        format!("{:.2} ms", t * 1e3)
    }
}

pub fn timeline_svg(
    sg: &StepGraph,
    run: &Run,
    rank_names: &[String],
    title: &str,
    b: &Breakdown,
) -> String {
    let span = run.step_s.max(1e-12);
    let folds = fold::folds(sg, run, b.rank);
    let axis = Axis::new(span, &folds, PLOT_W, FOLD_W);
    let plot_h = BAND_HEAD + ROW * sg.ranks as f64 + 22.0;
    let height = TOP + plot_h + 6.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    header(&mut s, title, b, &folds, span);
    for r in 0..sg.ranks {
        let name = rank_names
            .get(r as usize)
            .cloned()
            .unwrap_or_else(|| format!("rank {r}"));
        // `stage 3 (8 GPUs, H100_SXM_80GB)`: the stage on the row, its GPUs below.
        let (stage, gpus) = match name.split_once(" (") {
            Some((a, b)) => (a, b.trim_end_matches(')')),
            None => (name.as_str(), ""),
        };
        let y = TOP + BAND_HEAD + ROW * r as f64;
        let _ = writeln!(
            s,
            r##"<text x="8" y="{:.1}" font-weight="bold">{}</text><text x="8" y="{:.1}" font-size="8.5" fill="#555">{}</text>"##,
            y + 12.0,
            escape(stage),
            y + COMPUTE_H + 5.0,
            escape(gpus)
        );
    }
    let _ = writeln!(
        s,
        r#"<svg id="timeline-plot" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{plot_h:.0}" viewBox="0 0 {PLOT_W} {plot_h:.0}" preserveAspectRatio="none" data-width="{PLOT_W}" data-span="{span}" data-segments="{}">"#,
        axis.segments
            .iter()
            .map(|g| format!("{} {} {:.3} {:.3} {}", g.0, g.1, g.2, g.3, u8::from(g.4)))
            .collect::<Vec<_>>()
            .join(";")
    );
    let streams = compute_streams(sg, run);
    for (r, stream) in (0..sg.ranks).zip(&streams) {
        let y = BAND_HEAD + ROW * r as f64;
        let _ = writeln!(
            s,
            r##"<rect x="0" y="{y:.1}" width="{PLOT_W}" height="{COMPUTE_H}" fill="#eeeeee"/><rect x="0" y="{:.1}" width="{PLOT_W}" height="{COMM_H}" fill="#f6f6f6"/>"##,
            y + COMPUTE_H,
        );
        pieces(&mut s, sg, run, &axis, stream, y);
        for f in &folds {
            band_row(&mut s, sg, run, &axis, stream, f, r, y, rank_names);
        }
    }
    comm_lane(&mut s, sg, run, &axis);
    for f in &folds {
        band_head(&mut s, &axis, f, span, plot_h);
    }
    ticks(&mut s, &axis, span, plot_h);
    s.push_str("</svg>\n</svg>\n");
    s
}

/// Title, the busiest rank's split, the legend and the stripes' pattern.
fn header(s: &mut String, title: &str, b: &Breakdown, folds: &[Fold], span: f64) {
    let _ = writeln!(
        s,
        r##"<defs><pattern id="comm-wait" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fbd3a9"/><rect width="3" height="6" fill="#f28e2b"/></pattern></defs>"##
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let folded = if folds.is_empty() {
        String::new()
    } else {
        let t: f64 = folds.iter().map(Fold::len).sum();
        format!(
            "; {:.0} % of the step (the steady state) folded into the band{}",
            100.0 * t / span,
            if folds.len() > 1 { "s" } else { "" }
        )
    };
    let _ = writeln!(
        s,
        r#"<text x="10" y="38">step {} on rank {}: compute {:.1} %, exposed communication {:.1} %, bubble {:.1} %{}</text>"#,
        seconds(b.step_s),
        b.rank,
        100.0 * b.compute_s / b.step_s,
        100.0 * b.exposed_comm_s / b.step_s,
        100.0 * b.bubble_s / b.step_s,
        escape(&folded)
    );
    let mut lx = 10.0;
    let mut ly = 50.0;
    for (cat, name) in LEGEND {
        let w = 26.0 + 6.2 * name.len() as f64;
        if lx + w > WIDTH - RIGHT {
            lx = 10.0;
            ly += 15.0;
        }
        let _ = writeln!(
            s,
            r##"<rect x="{lx}" y="{ly}" width="10" height="10" fill="{}" stroke="#999" stroke-width="0.5"/><text x="{}" y="{}">{name}</text>"##,
            colour(cat),
            lx + 14.0,
            ly + 9.0
        );
        lx += w;
    }
}

/// A rank's compute stream where it is drawn: passes by kind, exposed communication.
fn pieces(s: &mut String, sg: &StepGraph, run: &Run, axis: &Axis, stream: &[Piece], y: f64) {
    let g = &sg.graph;
    for p in stream {
        if p.what == Use::Bubble || p.end <= p.start {
            continue;
        }
        let cat = piece_category(sg, p);
        for (x0, x1) in axis.visible(p.start, p.end) {
            // Compute stays visible however short; communication is drawn to scale.
            let w = if p.what == Use::Compute {
                (x1 - x0).max(0.3)
            } else {
                x1 - x0
            };
            if w < 0.05 {
                continue;
            }
            let tip = match p.task {
                Some(n) => {
                    let took = run.end[n.index()] - run.start[n.index()];
                    let what = if p.what == Use::Comm {
                        format!("{}: its TP/CP/EP collectives", label(&g[n].kind))
                    } else {
                        label(&g[n].kind)
                    };
                    format!(
                        "{what} ({:.3} ms of {:.3} ms)",
                        (p.end - p.start) * 1e3,
                        took * 1e3
                    )
                }
                None => format!("waiting on a transfer ({:.3} ms)", (p.end - p.start) * 1e3),
            };
            let _ = writeln!(
                s,
                r#"<rect x="{x0:.2}" y="{y:.1}" width="{w:.2}" height="{COMPUTE_H}" fill="{}"><title>{}</title></rect>"#,
                colour(cat),
                escape(&tip)
            );
            if let (Some(n), Use::Compute) = (p.task, p.what) {
                if let TaskKind::Pass(work) = g[n].kind {
                    // Too narrow to label at this scale: hidden, for a zooming page to show.
                    if w > 2.0 {
                        let _ = writeln!(
                            s,
                            r#"<text class="k pl" x="{:.1}" y="{:.1}" data-w="{w:.1}" fill="white" text-anchor="middle" font-size="9"{}>{work}</text>"#,
                            x0 + w / 2.0,
                            y + 14.0,
                            if w > LABEL_W {
                                ""
                            } else {
                                r#" visibility="hidden""#
                            }
                        );
                    }
                }
            }
        }
    }
}

/// Every rank's communication lane: transfers and collectives, to scale.
fn comm_lane(s: &mut String, sg: &StepGraph, run: &Run, axis: &Axis) {
    let g = &sg.graph;
    for n in g.node_indices() {
        let t = &g[n];
        if t.lane != Lane::Comm || !run.finished[n.index()] || t.duration <= 0.0 {
            continue;
        }
        let y = BAND_HEAD + ROW * t.rank as f64 + COMPUTE_H;
        let (start, end) = (run.start[n.index()], run.end[n.index()]);
        for (x0, x1) in axis.visible(start, end) {
            if x1 - x0 < 0.05 {
                continue;
            }
            // A transfer that shared its link took longer than it would have alone.
            let took = end - start;
            let time = if took > t.duration * 1.001 {
                format!("{:.3} ms, {:.3} ms alone", took * 1e3, t.duration * 1e3)
            } else {
                format!("{:.3} ms", t.duration * 1e3)
            };
            let _ = writeln!(
                s,
                r#"<rect x="{x0:.2}" y="{y:.1}" width="{:.2}" height="{COMM_H}" fill="{}"><title>{} ({time})</title></rect>"#,
                x1 - x0,
                colour(category(&t.kind)),
                escape(&label(&t.kind)),
            );
        }
    }
}

/// One rank's row of a fold: its time inside the fold by category, as one stacked bar.
#[allow(clippy::too_many_arguments)]
fn band_row(
    s: &mut String,
    sg: &StepGraph,
    run: &Run,
    axis: &Axis,
    stream: &[Piece],
    f: &Fold,
    rank: u32,
    y: f64,
    rank_names: &[String],
) {
    let share = fold::share(sg, run, rank, stream, f);
    let (x0, x1) = (axis.x(f.start), axis.x(f.end));
    let k = (x1 - x0) / f.len().max(1e-12);
    let _ = writeln!(
        s,
        r##"<rect x="{x0:.2}" y="{y:.1}" width="{:.2}" height="{:.1}" fill="#ffffff"/>"##,
        x1 - x0,
        COMPUTE_H + COMM_H
    );
    let mut x = x0;
    for &(cat, secs) in &share.by_category {
        let w = secs * k;
        if w > 0.0 {
            let _ = writeln!(
                s,
                r#"<rect x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{COMPUTE_H}" fill="{}"/>"#,
                colour(cat)
            );
        }
        x += w;
    }
    let _ = writeln!(
        s,
        r#"<rect x="{x0:.2}" y="{:.1}" width="{:.2}" height="{COMM_H}" fill="{}"/>"#,
        y + COMPUTE_H,
        share.comm_lane_busy * k,
        colour("p2p")
    );
    let (compute, comm, bubble) = share.split();
    let pct = |v: f64| 100.0 * v / f.len();
    let name = rank_names
        .get(rank as usize)
        .cloned()
        .unwrap_or_else(|| format!("rank {rank}"));
    let by: Vec<String> = SHARE_ORDER
        .iter()
        .zip(&share.by_category)
        .filter(|(_, (_, v))| *v > 0.0)
        .map(|(c, (_, v))| format!("{c} {:.1} %", pct(*v)))
        .collect();
    let _ = writeln!(
        s,
        r##"<rect x="{x0:.2}" y="{y:.1}" width="{:.2}" height="{COMPUTE_H}" fill="transparent" stroke="#333" stroke-width="0.5" vector-effect="non-scaling-stroke"><title>{}</title></rect>"##,
        x1 - x0,
        escape(&format!(
            "{name}, steady state ({}): compute {:.1} %, exposed communication {:.1} %, bubble {:.1} % ({})",
            seconds(f.len()),
            pct(compute),
            pct(comm),
            pct(bubble),
            by.join(", ")
        ))
    );
}

/// A fold's label above the rows and its edges down through them.
fn band_head(s: &mut String, axis: &Axis, f: &Fold, span: f64, plot_h: f64) {
    let (x0, x1) = (axis.x(f.start), axis.x(f.end));
    let mid = (x0 + x1) / 2.0;
    let _ = writeln!(
        s,
        r##"<g class="fold" data-start="{:.6}" data-end="{:.6}" data-micro-batches="{}"><line x1="{x0:.2}" y1="2" x2="{x0:.2}" y2="{:.1}" stroke="#333" stroke-dasharray="3 2" vector-effect="non-scaling-stroke"/><line x1="{x1:.2}" y1="2" x2="{x1:.2}" y2="{:.1}" stroke="#333" stroke-dasharray="3 2" vector-effect="non-scaling-stroke"/><text class="k" x="{mid:.1}" y="12" text-anchor="middle" font-weight="bold">⋯ {} micro-batches ⋯</text><text class="k" x="{mid:.1}" y="25" text-anchor="middle">{} folded ({:.0} %)</text></g>"##,
        f.start,
        f.end,
        f.micro_batches,
        plot_h - 20.0,
        plot_h - 20.0,
        f.micro_batches,
        seconds(f.len()),
        100.0 * f.len() / span
    );
}

/// Grid lines and time labels in the drawn stretches.
fn ticks(s: &mut String, axis: &Axis, span: f64, plot_h: f64) {
    let drawn: f64 = axis
        .segments
        .iter()
        .filter(|g| !g.4)
        .map(|g| g.1 - g.0)
        .sum();
    let dt = tick(drawn.max(1e-12));
    let bottom = plot_h - 20.0;
    let _ = writeln!(
        s,
        r#"<g class="ticks" data-top="{BAND_HEAD}" data-bottom="{bottom}">"#
    );
    for &(t0, t1, _, _, folded) in &axis.segments {
        if folded {
            continue;
        }
        let mut k = (t0 / dt).ceil();
        while k * dt <= t1 * 1.000001 && k * dt <= span * 1.000001 {
            let t = k * dt;
            let x = axis.x(t);
            // The first label starts at the axis rather than centring off the plot.
            let anchor = if x < 20.0 { "start" } else { "middle" };
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{BAND_HEAD}" x2="{x:.1}" y2="{bottom:.1}" stroke="#00000022" vector-effect="non-scaling-stroke"/><text class="k" x="{x:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"##,
                bottom + 14.0,
                tick_label(t, span)
            );
            k += 1.0;
        }
    }
    s.push_str("</g>\n");
}

fn tick_label(t: f64, span: f64) -> String {
    let (v, unit) = if span < 1.0 {
        (t * 1e3, "ms")
    } else {
        (t, "s")
    };
    if (v - v.round()).abs() < 1e-9 {
        format!("{} {unit}", v.round())
    } else {
        format!("{v:.2} {unit}")
    }
}
