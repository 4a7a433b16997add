//! The report's memory chart: one stacked bar a pipeline stage (weights, gradients,
//! optimizer state, activations, the rest), against that stage's GPU capacity.

use std::fmt::Write;

use planc_compiler::cost::Estimate;
use planc_simulator::svg::escape;

use crate::render::gib;

const WIDTH: f64 = 1400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const PLOT_H: f64 = 300.0;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The parts of a stage's memory, bottom up: (name, colour, bytes).
pub fn parts(
    m: &planc_compiler::cost::memory::StageMemory,
) -> [(&'static str, &'static str, f64); 5] {
    [
        ("weights", "#4e79a7", m.weights_bytes),
        ("gradients", "#59a14f", m.gradients_bytes),
        ("optimizer state", "#edc948", m.optimizer_bytes),
        ("activations", "#f28e2b", m.activations_bytes),
        (
            "other (CUDA/NCCL runtime, workspace, logits)",
            "#bab0ac",
            m.other_bytes,
        ),
    ]
}

/// A round step for an axis of `max` split in about six.
fn step(max: f64) -> f64 {
    let raw = max / 6.0;
    let base = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|k| k * base)
        .find(|&t| t >= raw)
        .unwrap_or(raw)
}

pub fn memory_svg(e: &Estimate) -> String {
    let n = e.stages.len().max(1);
    let top_gib = e
        .stages
        .iter()
        .map(|s| s.capacity_bytes.max(s.memory.total_bytes))
        .fold(0.0, f64::max)
        / GIB
        * 1.1;
    let top_gib = top_gib.max(1e-9);
    let height = TOP + PLOT_H + 40.0;
    let pw = WIDTH - LEFT - RIGHT;
    let y = |g: f64| TOP + PLOT_H - PLOT_H * g / top_gib;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="memory" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let mut lx = LEFT;
    for (name, colour, _) in parts(&e.stages[0].memory) {
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="12" width="10" height="10" fill="{colour}"/><text x="{}" y="21">{}</text>"#,
            lx + 14.0,
            escape(name)
        );
        lx += 26.0 + 6.2 * name.len() as f64;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{lx}" y1="17" x2="{}" y2="17" stroke="#d62728" stroke-width="2" stroke-dasharray="5 3"/><text x="{}" y="21">GPU capacity</text>"##,
        lx + 20.0,
        lx + 24.0
    );
    let dy = step(top_gib);
    let mut g = 0.0;
    while g <= top_gib {
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#00000018"/><text x="{2}" y="{3:.1}" text-anchor="end">{4} GiB</text>"##,
            y(g),
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(g) + 4.0,
            g
        );
        g += dy;
    }
    let slot = pw / n as f64;
    let bar = (slot * 0.6).min(70.0);
    let label_every = (n as f64 / 32.0).ceil().max(1.0) as usize;
    for (i, st) in e.stages.iter().enumerate() {
        let cx = LEFT + slot * (i as f64 + 0.5);
        let x0 = cx - bar / 2.0;
        let mut base = 0.0;
        for (name, colour, bytes) in parts(&st.memory) {
            let h = bytes / GIB;
            let _ = writeln!(
                s,
                r#"<rect x="{x0:.1}" y="{:.1}" width="{bar:.1}" height="{:.1}" fill="{colour}"><title>stage {}: {} {}</title></rect>"#,
                y(base + h),
                y(base) - y(base + h),
                st.memory.stage,
                escape(name),
                escape(&gib(bytes))
            );
            base += h;
        }
        let cap = st.capacity_bytes / GIB;
        let pct = 100.0 * st.memory.total_bytes / st.capacity_bytes;
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}" stroke="#d62728" stroke-width="2" stroke-dasharray="5 3"><title>{3}: {4}</title></line>"##,
            cx - slot * 0.45,
            y(cap),
            cx + slot * 0.45,
            escape(&st.gpu),
            escape(&gib(st.capacity_bytes))
        );
        if slot >= 44.0 {
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="10">{:.0} %</text>"#,
                y(base) - 4.0,
                pct
            );
        }
        if i % label_every == 0 {
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                TOP + PLOT_H + 16.0,
                if slot >= 44.0 {
                    format!("stage {i}")
                } else {
                    i.to_string()
                }
            );
        }
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">pipeline stage (the peak is stage {})</text>"#,
        LEFT + pw / 2.0,
        TOP + PLOT_H + 34.0,
        e.peak_stage
    );
    s.push_str("</svg>\n");
    s
}
