//! The step's program replayed from a CUDA graph (`device::graph`) instead of launched
//! kernel by kernel.
//!
//! A small model's step is bound by the host: hundreds of launches of a few microseconds,
//! some longer than the kernels they start. Between a step's first forward and its last
//! backward the host decides nothing (the batches, the program's order, every kernel's
//! arguments are known before the step starts), so that stretch is recorded once and each
//! later step is one launch. What needs the host stays outside, launched as before: the
//! loss and the gradient norm read back, the stop and overflow verdicts, the learning rate
//! and clipping scale, the update, checkpoints, and fp8's scales and weight casts before
//! the program (`Engine::begin_step`: their amax history slot moves every step).
//!
//! The recorded work reads its micro-batches from device buffers of their own
//! (`Batches::stage`), filled before each replay, since a graph cannot read the host; its
//! only other host value, the loss gradient's scale (fp16's loss scale changes it), keys
//! the graph, which is recorded again when it changes. Replayed, the same kernels run with
//! the same arguments in the same order, so the losses are the eager run's bit for bit
//! (`runtime/tests/graphs.rs`).
//!
//! Launched kernel by kernel instead:
//! - the run's first step, which warms up what loads on first use (cuBLAS's and cuDNN's
//!   kernels, the driver's lazily loaded modules), so nothing loads during a capture;
//! - every step timed operation by operation (the last, for the step by kind, and all of
//!   them with `--trace`): their CUDA events name each span on the host;
//! - runs of several ranks, whose steps hold NCCL operations and the data-parallel hooks
//!   (NCCL can be captured, but not yet here);
//! - `planc run --no-graphs`;
//! - a step the driver, cuBLAS or cuDNN refuses to record: the run says why, once, and
//!   goes on kernel by kernel.

use super::engine::Engine;
use super::executor::{self, Batches, Inputs, StepIo};
use super::metrics::Graphs;
use super::program::Program;
use crate::device::graph::Graph;
use crate::error::RunError;

/// A run's recorded step program, or why its steps are launched kernel by kernel.
pub struct Replay {
    /// Why no step of this run is replayed, once known.
    off: Option<String>,
    graph: Option<Recorded>,
    /// Whether a step ran kernel by kernel before (everything that loads on first use is
    /// loaded).
    warm: bool,
    replayed: u64,
}

/// The step's program as recorded.
struct Recorded {
    graph: Graph,
    /// The loss gradient's scale it was recorded with (its bits).
    dscale: u32,
    /// The gradient ranges its program reduced over the data-parallel group.
    reduced: Vec<(usize, usize)>,
}

/// Why a run launches every step kernel by kernel, before it starts; None when its steps
/// can be replayed.
pub fn off_reason(no_graphs: bool, ranks: usize, trace: bool) -> Option<String> {
    if no_graphs {
        Some("--no-graphs".into())
    } else if ranks > 1 {
        Some(format!(
            "{ranks} ranks: NCCL operations are not recorded yet"
        ))
    } else if trace {
        Some("--trace times every step operation by operation".into())
    } else {
        None
    }
}

impl Replay {
    pub fn new(off: Option<String>) -> Replay {
        Replay {
            off,
            graph: None,
            warm: false,
            replayed: 0,
        }
    }

    /// Runs `step`'s program (`executor::run`): replayed from the recorded graph where
    /// this step can be, recorded first where none fits, else launched kernel by kernel.
    /// Returns the gradient ranges already reduced over the data-parallel group.
    pub fn program(
        &mut self,
        eng: &mut Engine,
        prog: &Program,
        io: &StepIo,
        batches: &mut Batches,
    ) -> Result<Vec<(usize, usize)>, RunError> {
        let timed = eng.marks.is_some();
        if self.off.is_some() || timed || !self.warm {
            self.warm = true;
            return executor::run(eng, prog, io, Inputs::Host(batches));
        }
        batches.stage(eng, prog, io.step)?;
        let key = io.dscale.to_bits();
        let fresh = self.graph.as_ref().map(|g| g.dscale) != Some(key);
        if fresh {
            // Recorded again (fp16's loss scale moved): the old one goes first.
            self.graph = None;
            let stream = eng.gpu.stream as u64;
            let mut reduced = Vec::new();
            let captured = Graph::capture(stream, || {
                reduced = executor::run(eng, prog, io, Inputs::Staged)?;
                Ok(())
            });
            match captured {
                Ok(graph) => {
                    self.graph = Some(Recorded {
                        graph,
                        dscale: key,
                        reduced,
                    })
                }
                Err(why) => {
                    return self.give_up(eng, prog, io, format!("recording the step failed: {why}"))
                }
            }
        }
        let rec = self.graph.as_ref().expect("recorded above");
        match rec.graph.launch(eng.gpu.stream as u64) {
            Ok(()) => {
                self.replayed += 1;
                Ok(rec.reduced.clone())
            }
            // A graph the driver will not launch the first time: nothing of it ran.
            Err(e) if fresh => self.give_up(
                eng,
                prog,
                io,
                format!("launching the recorded step failed: {e}"),
            ),
            Err(e) => Err(e),
        }
    }

    /// Launches this step (its micro-batches staged) and the rest of the run kernel by
    /// kernel, saying why once.
    fn give_up(
        &mut self,
        eng: &mut Engine,
        prog: &Program,
        io: &StepIo,
        why: String,
    ) -> Result<Vec<(usize, usize)>, RunError> {
        eprintln!(
            "note: this run's steps are launched kernel by kernel: the step was not replayed \
             from a CUDA graph ({why}); --no-graphs does so without trying"
        );
        self.graph = None;
        self.off = Some(why);
        executor::run(eng, prog, io, Inputs::Staged)
    }

    /// Whether the next step not timed operation by operation will be replayed.
    pub fn on(&self) -> bool {
        self.off.is_none() && self.warm
    }

    /// How the run's steps were launched, for its summary.
    pub fn summary(&self) -> Graphs {
        Graphs {
            replayed_steps: self.replayed,
            off: self.off.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_that_cannot_replay_say_why_and_a_plain_one_rank_run_replays() {
        assert_eq!(off_reason(false, 1, false), None);
        assert_eq!(off_reason(true, 1, false).as_deref(), Some("--no-graphs"));
        assert!(off_reason(false, 2, false).unwrap().contains("2 ranks"));
        assert!(off_reason(false, 1, true).unwrap().contains("--trace"));
        // The flag is named first: it is what the user asked for.
        assert_eq!(off_reason(true, 8, true).as_deref(), Some("--no-graphs"));
    }
}
