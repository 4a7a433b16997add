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
pub mod deadlock;
pub mod engine;
pub mod graph;
pub mod label;
pub mod lower;
pub mod program;
pub mod schedule;
pub mod svg;
pub mod trace;

use planc_compiler::cost::stage_group;
use planc_compiler::plan::Plan;

pub use breakdown::Breakdown;
pub use deadlock::Hang;

use graph::{Costs, StepGraph};
use program::Program;

pub struct Simulation {
    pub program: Program,
    pub graph: StepGraph,
    pub run: engine::Run,
    pub breakdown: Breakdown,
}

/// Checks `program` for hangs, then runs it with `costs`.
pub fn simulate_program(program: Program, costs: &Costs) -> Result<Simulation, Vec<Hang>> {
    let hangs = deadlock::check_order(&program);
    if !hangs.is_empty() {
        return Err(hangs);
    }
    let graph = graph::build(&program, costs);
    let run = engine::execute(&graph);
    if !run.complete() {
        return Err(vec![deadlock::explain_stall(&graph, &run)]);
    }
    let breakdown = breakdown::breakdown(&graph, &run);
    Ok(Simulation {
        program,
        graph,
        run,
        breakdown,
    })
}

/// Simulates one step of a valid plan.
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
