//! The step's program as this rank runs it: the simulator's per-rank program for the plan
//! (`planc_simulator::lower`, which orders `framework = planc`'s interleaved messages so
//! that consecutive sends and receives go to NCCL as one group without deadlock:
//! `planc_simulator::grouped`), executed as it stands, and the activation sets it keeps
//! alive at once.

use planc_compiler::plan::{Framework, Plan};
use planc_simulator::program::{live_sets, Instr};
use planc_simulator::schedule::Pass;

use crate::error::RunError;

/// This rank's instructions for one step.
pub struct Program {
    pub instrs: Vec<Instr>,
    pub micro_batches: usize,
    /// Activation sets alive at once: a forward's (or the receive's before it) until its
    /// backward.
    pub in_flight: usize,
    /// The (micro-batch, chunk) of the step's first forward, prepared ahead on the host.
    pub first_forward: Option<(usize, usize)>,
}

impl Program {
    /// Pipeline rank `pp_rank`'s program of `plan` (with the layers that run).
    pub fn of(plan: &Plan, pp_rank: usize, pp: usize) -> Result<Program, RunError> {
        // What runs is planc's runtime, whatever framework the plan's job names.
        let mut planc = plan.clone();
        planc.framework = Framework::Planc;
        let program = planc_simulator::lower::lower(&planc).0;
        if program.schedule.splits_backward() {
            return Err(RunError::NotRunYet(format!(
                "`planc run` runs the gpipe, 1f1b and interleaved schedules; this plan's {:?} \
                 splits backward into input and weight passes (change `schedule` in the \
                 `parallel` block)",
                program.schedule
            )));
        }
        // The program the simulator checked and timed: `lower` ordered it for planc's
        // grouped sends and receives.
        let instrs = program.ranks[pp_rank].clone();
        let first_forward = instrs.iter().find_map(|i| match i {
            Instr::Run(w) if w.pass == Pass::Forward => {
                Some((w.micro_batch as usize, w.chunk as usize))
            }
            _ => None,
        });
        Ok(Program {
            in_flight: live_sets(&instrs, pp),
            micro_batches: program.micro_batches as usize,
            instrs,
            first_forward,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use planc_compiler::check::check_source;
    use planc_simulator::grouped::play;

    fn plan(schedule: &str, framework: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ layers = 8, hidden = 256, heads = 4, vocab = 512, seq_len = 128 }}
             train {{ global_batch = 16, precision = bf16 }}
             parallel {{ tp = 1, pp = 4, dp = 2, micro_batch = 1, {schedule} }}
             job j {{ framework = {framework} }}"
        );
        let c = check_source("t.tp", &text);
        c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics))
    }

    #[test]
    fn the_runtime_executes_the_program_the_simulator_checked_and_timed() {
        for schedule in [
            "schedule = interleaved, vpp = 2",
            "schedule = 1f1b",
            "schedule = gpipe",
        ] {
            let p = plan(schedule, "planc");
            let pp = p.parallel.pp as usize;
            let sim = planc_simulator::simulate(&p)
                .unwrap_or_else(|h| panic!("{schedule}: {h:?}"))
                .program;
            let ran: Vec<Vec<Instr>> = (0..pp)
                .map(|r| Program::of(&p, r, pp).expect("runs").instrs)
                .collect();
            assert_eq!(ran, sim.ranks, "{schedule}");
            // And runs without deadlock as the runtime groups its messages.
            assert_eq!(play(&ran), Ok(()), "{schedule}");
        }
        // Another framework's interleaved program is Megatron-LM's order, which planc's
        // grouping would deadlock: the simulator gives planc's runtime its own.
        let megatron =
            planc_simulator::lower::lower(&plan("schedule = interleaved, vpp = 2", "megatron")).0;
        assert!(play(&megatron.ranks).is_err());
    }
}
