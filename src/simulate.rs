//! `planc simulate`: the event-driven step, its breakdown, and the timeline files.

use std::path::Path;
use std::process::ExitCode;

use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};

use crate::output::write_new;
use crate::{load, render};
use planc_lang::units::{format_quantity, Dimension};

pub fn run(
    file: &Path,
    sets: &[String],
    trace: Option<&Path>,
    svg: Option<&Path>,
    force: bool,
    color: ColorChoice,
) -> ExitCode {
    // Refuse before the work, not after it.
    for p in [trace, svg].into_iter().flatten() {
        if p.exists() && !force {
            eprintln!(
                "error: `{}` exists; pass --force to replace it",
                p.display()
            );
            return ExitCode::from(2);
        }
    }
    let (checked, sim, elapsed) = match load::open(file, sets) {
        Ok(o) => (o.checked, o.simulation, o.simulated_in),
        Err(code) => return code,
    };
    let mut err = StandardStream::stderr(color);
    let _ = render::diagnostics(&mut err, &checked);
    let (Some(sim), Some(plan), Some(est)) = (sim, &checked.plan, &checked.estimate) else {
        if checked.ok() && checked.plan.is_some() {
            eprintln!(
                "{}: too large to simulate event by event (see P0602)",
                file.display()
            );
        } else {
            eprintln!(
                "{}: nothing to simulate until the plan checks",
                file.display()
            );
        }
        return ExitCode::from(1);
    };
    let b = sim.breakdown;
    let names = planc_simulator::rank_names(plan);
    println!(
        "simulated {} tasks on {} pipeline rank{} ({} GPU{} by symmetry) in {:.1} ms",
        sim.graph.graph.node_count(),
        sim.graph.ranks,
        if sim.graph.ranks == 1 { "" } else { "s" },
        plan.cluster.world_size(),
        if plan.cluster.world_size() == 1 {
            ""
        } else {
            "s"
        },
        elapsed.as_secs_f64() * 1e3
    );
    println!(
        "step     {:.3} s on {} (the busiest): compute {:.1} %, exposed communication {:.1} %, bubble {:.1} %",
        b.step_s,
        names[b.rank as usize],
        100.0 * b.compute_s / b.step_s,
        100.0 * b.exposed_comm_s / b.step_s,
        100.0 * b.bubble_s / b.step_s
    );
    println!(
        "check    closed form {:.3} s ({:+.1} % from the simulation); MFU {:.1} %",
        est.closed_form_step_s,
        (est.closed_form_step_s / b.step_s - 1.0) * 100.0,
        est.mfu * 100.0
    );
    println!(
        "{}",
        by_kind(plan, b.rank as u64, est.micro_batches, b.step_s)
    );
    let title = format!(
        "{}: {} {} schedule, pp {} × {} micro-batches",
        file.display(),
        plan.model.name,
        plan.parallel.schedule,
        plan.parallel.pp,
        est.micro_batches
    );
    if let Some(path) = trace {
        let json = planc_simulator::trace::chrome_trace(&sim.graph, &sim.run, &names);
        let text = serde_json::to_vec(&json).expect("a trace serialises");
        if let Err(e) = write_new(path, &text, force) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
        println!(
            "wrote    {} (open at ui.perfetto.dev or chrome://tracing)",
            path.display()
        );
    }
    if let Some(path) = svg {
        let text = planc_simulator::svg::timeline_svg(&sim.graph, &sim.run, &names, &title, &b);
        if let Err(e) = write_new(path, text.as_bytes(), force) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
        println!("wrote    {} (open it in a browser)", path.display());
    }
    if checked.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The busiest stage's step by kind of work, largest first, so a user sees what to attack
/// (and what a measurement by kind, `planc run --trace`, should be compared with).
fn by_kind(
    plan: &planc_compiler::plan::Plan,
    stage: u64,
    micro_batches: u64,
    step_s: f64,
) -> String {
    let mut kinds = planc_compiler::cost::kinds::stage_by_kind(plan, stage, micro_batches);
    kinds.sort_by(|a, b| b.1.total_cmp(&a.1));
    let parts: Vec<String> = kinds
        .iter()
        .map(|(k, s)| {
            format!(
                "{} {} ({:.0} %)",
                k.label(),
                format_quantity(*s, Dimension::Time),
                100.0 * s / step_s
            )
        })
        .collect();
    format!("kinds    {}", parts.join(", "))
}
