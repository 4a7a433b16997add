//! The simulator: one training step of a plan, lowered to per-rank programs, checked for
//! hangs, built into a petgraph DAG and executed event by event.
//!
//! ```text
//! Plan ──lower──▶ Program (per pipeline rank: passes, sends, receives, collectives)
//!      ──deadlock::check_order──▶ hangs?          (message and collective order)
//!      ──graph::build──▶ StepGraph (tasks, lanes, links)
//!      ──engine::execute──▶ Run (start/end of every task) ──▶ Breakdown, trace, SVG
//! ```
//!
//! Start at [`simulate`]. Ranks are pipeline ranks: the tensor-, context- and data-
//! parallel ranks of a stage run the same program, so the graph has pp programs however
//! many GPUs the plan uses.

pub mod breakdown;
pub mod contention;
pub mod deadlock;
pub mod engine;
pub mod fold;
pub mod graph;
pub mod grouped;
pub mod label;
pub mod lower;
pub mod program;
pub mod schedule;
pub mod svg;
pub mod trace;

use planc_compiler::check::Checked;
use planc_compiler::cost::stage_group;
use planc_compiler::plan::{Plan, PlanSpec};
use planc_compiler::solve::{self, Solution};
use planc_lang::{codes, Diagnostic};

pub use breakdown::Breakdown;
pub use deadlock::Hang;

use graph::{Costs, StepGraph};
use program::Program;

pub struct Simulation {
    pub program: Program,
    pub graph: StepGraph,
    pub run: engine::Run,
    pub breakdown: Breakdown,
    /// Every rank's split of the step (rank order); `breakdown` is the busiest's.
    pub ranks: Vec<Breakdown>,
}

impl Simulation {
    /// Each pipeline stage's (busy, own communication, waiting for other stages) seconds,
    /// for [`planc_compiler::cost::Estimate::retime_stages`].
    pub fn stage_split(&self) -> Vec<(f64, f64, f64)> {
        self.ranks
            .iter()
            .map(|b| (b.compute_s, b.exposed_comm_s, b.bubble_s))
            .collect()
    }
}

/// Checks `program` for hangs, then runs it with `costs`.
pub fn simulate_program(program: Program, costs: &Costs) -> Result<Simulation, Vec<Hang>> {
    let hangs = deadlock::check_order(&program);
    if !hangs.is_empty() {
        return Err(hangs);
    }
    let mut graph = graph::build(&program, costs);
    let mut run = engine::execute(&graph);
    if !run.complete() {
        return Err(vec![deadlock::explain_stall(&graph, &run)]);
    }
    if contention::charge(&mut graph, &run, &costs.contention) {
        run = engine::execute(&graph);
    }
    let ranks = breakdown::per_rank(&graph, &run);
    let breakdown = breakdown::busiest(&ranks);
    Ok(Simulation {
        program,
        graph,
        run,
        breakdown,
        ranks,
    })
}

/// Tasks above which a step is not simulated: the graph takes about 60 bytes and a
/// microsecond per task, so this bounds a simulation to ~100 MB and a second or two, while
/// real plans (thousands of micro-batches on a few dozen stages) stay far below it. A
/// `global_batch` of 10^12 would otherwise be a step graph too large for any machine.
pub const MAX_TASKS: f64 = 2e6;

/// About how many tasks the step graph of `plan` has (an upper bound): per pipeline rank
/// and model chunk, a forward, a backward, a weight gradient, a send and a receive per
/// micro-batch, and up to 16 gradient-reduction and parameter-gather pieces each.
pub fn tasks(plan: &Plan) -> f64 {
    let p = &plan.parallel;
    let chunks = if plan.parallel.schedule == planc_compiler::plan::Schedule::Interleaved {
        p.vpp.max(1) as f64
    } else {
        1.0
    };
    let micro_batches = p.grad_accum(plan.train.global_batch).max(1) as f64;
    p.pp as f64 * (chunks * (micro_batches * 5.0 + 32.0) + 1.0)
}

/// Whether [`simulate`] will take `plan` (see [`MAX_TASKS`]).
pub fn simulable(plan: &Plan) -> bool {
    tasks(plan) <= MAX_TASKS
}

/// Simulates one step of a valid plan. Check [`simulable`] first: the time and memory
/// grow with the number of micro-batches and stages.
pub fn simulate(plan: &Plan) -> Result<Simulation, Vec<Hang>> {
    let (program, costs) = lower::lower(plan);
    simulate_program(program, &costs)
}

/// Row names for timelines: pipeline rank, the GPU ranks that run it, the device.
pub fn rank_names(plan: &Plan) -> Vec<String> {
    let p = &plan.parallel;
    let per_stage = p.tp * p.cp * p.dp;
    (0..p.pp)
        .map(|s| {
            let gpu = &stage_group(plan, s).gpu.name;
            if per_stage == 1 {
                format!("stage {s} (GPU {s}, {gpu})")
            } else {
                format!("stage {s} ({} GPUs, {gpu})", per_stage)
            }
        })
        .collect()
}

/// How many of the solver's best candidates (by the closed form) are simulated before the
/// best is chosen. The closed form is within a few percent of the simulation, so the true
/// best is among the first few; eight leaves margin at a few milliseconds to a tenth of a
/// second each (a thousand-GPU interleaved pipeline), simulated a core each.
pub const RERANK: usize = 8;

/// Simulates the first `k` candidates of a solution and ranks them by the simulated step.
pub fn rerank(spec: &PlanSpec, solution: &mut Solution, k: usize) {
    use rayon::prelude::*;
    let n = solution.ranked.len().min(k);
    // The candidates' simulations are independent: one a core (a large pipeline's takes a
    // tenth of a second, and the ranking waits for all of them).
    solution.ranked[..n].par_iter_mut().for_each(|c| {
        if !simulable(&c.plan) {
            return;
        }
        if let Ok(sim) = simulate(&c.plan) {
            let b = sim.breakdown;
            c.estimate
                .retime(b.step_s, b.compute_s, b.exposed_comm_s, b.bubble_s);
            c.estimate.retime_stages(&sim.stage_split());
            solve::reclassify(c, spec.search.memory_headroom);
        }
    });
    solve::rank(spec, &mut solution.ranked[..n]);
    solution.pareto = solve::pareto_front(&solution.ranked);
}

/// Retimes a checked plan with the simulator: the step time `planc check` reports. The
/// closed-form time stays in the estimate as a cross-check. Returns the simulation for
/// timelines; a hang becomes a P0601 error on the plan's `schedule`.
pub fn retime(checked: &mut Checked) -> Option<Simulation> {
    if let (Some(spec), Some(solution)) = (&checked.spec, checked.solution.as_mut()) {
        rerank(spec, solution, RERANK);
        let best = solution.best().map(|c| c.plan.parallel.clone());
        if let Some(best) = best {
            if checked.plan.as_ref().map(|p| &p.parallel) != Some(&best) {
                checked.adopt(best);
            }
        }
    }
    let plan = checked.plan.as_ref()?;
    if !simulable(plan) {
        let (file, span) = checked
            .spec
            .as_ref()
            .and_then(|s| s.origins.of("train", "global_batch"))
            .unwrap_or_default();
        checked.diagnostics.push(
            Diagnostic::new(
                codes::P0602,
                format!(
                    "the step is too large to simulate: about {:.0} tasks, more than {:.0}",
                    tasks(plan),
                    MAX_TASKS
                ),
            )
            .at(file, span, "this many micro-batches")
            .note("the step time is the closed form"),
        );
        return None;
    }
    match simulate(plan) {
        Ok(sim) => {
            let b = sim.breakdown;
            let est = checked.estimate.as_mut()?;
            est.retime(b.step_s, b.compute_s, b.exposed_comm_s, b.bubble_s);
            est.retime_stages(&sim.stage_split());
            Some(sim)
        }
        Err(hangs) => {
            let (file, span) = checked
                .spec
                .as_ref()
                .and_then(|s| {
                    s.origins
                        .of("parallel", "schedule")
                        .or(s.origins.of("parallel", "pp"))
                })
                .unwrap_or_default();
            for h in hangs {
                checked.diagnostics.push(
                    Diagnostic::new(codes::P0601, h.message)
                        .at(file, span, "this schedule")
                        .help("use a built-in schedule (gpipe, 1f1b, interleaved, zb_h1)"),
                );
            }
            None
        }
    }
}
