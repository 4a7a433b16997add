//! `planc report`: one self-contained HTML page of a plan for people who will not read a
//! terminal: the summary numbers, the simulated timeline (zoomable, its steady state
//! folded), memory per stage against capacity, the solver's candidates and Pareto front,
//! and the diagnostics with their source lines. Everything is inline (CSS, JavaScript,
//! SVG): the page works offline and can be mailed as one file.
//!
//! The page is `page.html` (a minijinja template, escaping everything it is given) around
//! SVG drawn here and in `planc_simulator::svg`, which escape their own text.

mod candidates;
mod html_color;
mod memory;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};
use minijinja::{context, Environment, Value};
use serde::Serialize;

use planc_compiler::check::{holes, Checked};
use planc_compiler::cost::TimeMethod;
use planc_simulator::Simulation;

use crate::output::write_new;
use crate::render::{self, gib};

const PAGE: &str = include_str!("page.html");
const CSS: &str = include_str!("report.css");
const JS: &str = include_str!("report.js");

/// Where the page goes without `-o`: `<plan stem>.report.html` in the current folder.
pub fn default_output(file: &Path) -> PathBuf {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plan".into());
    PathBuf::from(format!("{stem}.report.html"))
}

pub fn run(
    file: &Path,
    sets: &[String],
    out: Option<&Path>,
    force: bool,
    color: ColorChoice,
) -> ExitCode {
    let out = out.map_or_else(|| default_output(file), Path::to_path_buf);
    // Refuse before the work, not after it.
    if out.exists() && !force {
        eprintln!(
            "error: `{}` exists; pass --force to replace it",
            out.display()
        );
        return ExitCode::from(2);
    }
    let (checked, sim) = match crate::load::open(file, sets) {
        Ok(o) => (o.checked, o.simulation),
        Err(code) => return code,
    };
    let _ = render::diagnostics(&mut StandardStream::stderr(color), &checked);
    let html = page(&file.display().to_string(), &checked, sim.as_ref());
    if let Err(e) = write_new(&out, html.as_bytes(), force) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    println!("wrote    {} (open it in a browser)", out.display());
    if checked.ok() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "{}: the plan has errors; the page shows them",
            file.display()
        );
        ExitCode::from(1)
    }
}

#[derive(Serialize)]
struct Card {
    label: &'static str,
    value: String,
    note: String,
}

fn pct(part: f64, whole: f64) -> String {
    format!("{:.1} %", 100.0 * part / whole)
}

/// The summary numbers, as cards.
fn cards(checked: &Checked) -> Vec<Card> {
    let (Some(plan), Some(e)) = (&checked.plan, &checked.estimate) else {
        return Vec::new();
    };
    let card = |label, value: String, note: String| Card { label, value, note };
    let peak = &e.stages[e.peak_stage];
    let mut v = vec![
        card("step time", format!("{:.3} s", e.step_s), {
            let how = if e.method == TimeMethod::Simulated {
                format!(
                    "simulated event by event (closed form {:.3} s)",
                    e.closed_form_step_s
                )
            } else {
                "closed form".into()
            };
            // What the figure rests on travels with it to people who see only the page.
            let estimates = planc_compiler::report::estimates_note(plan);
            if estimates.is_empty() {
                how
            } else {
                format!("{how}; estimates {}", estimates.join("; "))
            }
        }),
        card(
            "throughput",
            format!("{:.0} tokens/s", e.tokens_per_s),
            format!("{:.2} samples/s", e.samples_per_s),
        ),
        card(
            "MFU",
            format!("{:.1} %", e.mfu * 100.0),
            format!("{:.1} model TFLOP/s per GPU", e.model_tflops_per_gpu),
        ),
        card(
            "compute",
            pct(e.compute_s, e.step_s),
            format!("{:.3} s of the step", e.compute_s),
        ),
        card(
            "exposed communication",
            pct(e.exposed_comm_s, e.step_s),
            format!("{:.3} s not hidden behind compute", e.exposed_comm_s),
        ),
        card(
            "bubble",
            pct(e.bubble_s, e.step_s),
            format!("{:.3} s idle in the pipeline", e.bubble_s),
        ),
        card(
            "peak memory",
            gib(peak.memory.total_bytes),
            format!(
                "stage {}, {} of {}",
                e.peak_stage,
                pct(peak.memory.total_bytes, peak.capacity_bytes),
                gib(peak.capacity_bytes)
            ),
        ),
        card(
            "GPUs",
            plan.cluster.world_size().to_string(),
            format!(
                "tp {} · pp {} · dp {} · cp {} · ep {}",
                plan.parallel.tp,
                plan.parallel.pp,
                plan.parallel.dp,
                plan.parallel.cp,
                plan.parallel.ep
            ),
        ),
    ];
    let bill = planc_compiler::pricing::bill(plan, e);
    let amount = planc_lang::units::amount;
    v.push(match &bill.money {
        Some(m) => card(
            "cost a step",
            format!("{} {}", amount(m.per_step), m.currency),
            format!(
                "{} GPU-hours at {} {} a GPU; {} {} per million tokens",
                amount(bill.gpu_hours_per_step),
                amount(m.price_per_gpu_hour),
                m.currency.per_hour(),
                amount(m.per_million_tokens),
                m.currency
            ),
        ),
        None => card(
            "GPU-hours a step",
            amount(bill.gpu_hours_per_step),
            format!(
                "{} per million tokens (no cluster.price)",
                amount(bill.gpu_hours_per_million_tokens)
            ),
        ),
    });
    if let (Some(run), Some(t), Some(h)) = (bill.run, bill.time_to_train_s, bill.gpu_hours_to_train)
    {
        let days = format!("{:.1} days", t / 86400.0);
        let money = bill
            .money
            .as_ref()
            .and_then(|m| {
                m.to_train
                    .map(|c| format!(", {} {}", amount(c), m.currency))
            })
            .unwrap_or_default();
        v.push(card(
            "training time",
            days,
            format!(
                "{:.3e} tokens (train.{}): {} GPU-hours{money}",
                run.tokens,
                run.from,
                amount(h)
            ),
        ));
    }
    v
}

/// The timeline section: the SVG, or why there is none.
fn timeline(file: &str, checked: &Checked, sim: Option<&Simulation>) -> (Option<String>, String) {
    let (Some(sim), Some(plan), Some(e)) = (sim, &checked.plan, &checked.estimate) else {
        let why = if checked.plan.is_some() && checked.ok() {
            "The step is too large to simulate event by event (P0602): the numbers are the closed form."
        } else {
            "Nothing to simulate until the plan checks: see the diagnostics below."
        };
        return (None, why.into());
    };
    let names = planc_simulator::rank_names(plan);
    let title = format!(
        "{file}: {} {} schedule, pp {} × {} micro-batches",
        plan.model.name, plan.parallel.schedule, plan.parallel.pp, e.micro_batches
    );
    let svg =
        planc_simulator::svg::timeline_svg(&sim.graph, &sim.run, &names, &title, &sim.breakdown);
    let note = format!(
        "{} tasks simulated on {} pipeline ranks ({} GPUs by symmetry); the busiest is {}.",
        sim.graph.graph.node_count(),
        sim.graph.ranks,
        plan.cluster.world_size(),
        names[sim.breakdown.rank as usize]
    );
    (Some(svg), note)
}

/// The solver section's values.
fn solver(file: &str, checked: &Checked) -> Value {
    let spec = checked.spec.as_ref();
    let Some(s) = &checked.solution else {
        let none = spec.is_some_and(|s| holes(s).is_empty());
        return context! { has_holes => !none };
    };
    let headroom = spec.map_or(0.1, |s| s.search.memory_headroom);
    let top = spec.map_or(5, |s| s.search.top as usize).max(10);
    let objective = spec.map_or("throughput".to_string(), |s| s.search.objective.to_string());
    context! {
        has_holes => true,
        solved => !s.ranked.is_empty(),
        search => crate::solve::search_line(s),
        left_out => crate::solve::left_out_line(s),
        svg => candidates::pareto_svg(s, headroom).map(Value::from_safe_string),
        rows => candidates::rows(s, top),
        drawn => s.ranked.len().min(candidates::MAX_POINTS),
        valid => s.ranked.len(),
        objective => objective,
        cost_heading => crate::solve::cost_heading(s),
        file => file,
    }
}

/// The whole page.
pub fn page(file: &str, checked: &Checked, sim: Option<&Simulation>) -> String {
    let mut env = Environment::new();
    env.add_template("page.html", PAGE)
        .expect("the report template parses");
    let (timeline_svg, timeline_note) = timeline(file, checked, sim);
    let count = |s: planc_lang::Severity| {
        checked
            .diagnostics
            .iter()
            .filter(|d| d.severity == s)
            .count()
    };
    let memory = checked.estimate.as_ref().map(|e| {
        let rows: Vec<Value> = e
            .stages
            .iter()
            .map(|st| {
                let m = &st.memory;
                context! {
                    stage => m.stage, gpu => st.gpu.clone(),
                    weights => gib(m.weights_bytes), gradients => gib(m.gradients_bytes),
                    optimizer => gib(m.optimizer_bytes), activations => gib(m.activations_bytes),
                    other => gib(m.other_bytes), total => gib(m.total_bytes),
                    capacity => gib(st.capacity_bytes),
                    fraction => pct(m.total_bytes, st.capacity_bytes),
                    over => m.total_bytes > st.capacity_bytes,
                }
            })
            .collect();
        context! { svg => Value::from_safe_string(memory::memory_svg(e)), rows => rows }
    });
    let ctx = context! {
        file => file,
        version => env!("CARGO_PKG_VERSION"),
        ok => checked.ok(),
        cards => cards(checked),
        check_text => render::summary(checked),
        timeline_svg => timeline_svg.map(Value::from_safe_string),
        timeline_note => timeline_note,
        memory => memory,
        solver => solver(file, checked),
        diagnostics => Value::from_safe_string(html_color::diagnostics_html(checked)),
        errors => count(planc_lang::Severity::Error),
        warnings => count(planc_lang::Severity::Warning),
        notes => count(planc_lang::Severity::Note),
        css => Value::from_safe_string(CSS.to_string()),
        js => Value::from_safe_string(JS.to_string()),
    };
    env.get_template("page.html")
        .and_then(|t| t.render(ctx))
        .expect("the report template renders")
}
