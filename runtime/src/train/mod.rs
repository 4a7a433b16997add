//! `planc run`: trains the plan's model on the local GPU (the device it runs on is
//! `crate::device`). `model` is the parameter table, `data` the token stream, `checkpoint`
//! the Hugging Face checkpoints, `engine` the memory plan and the passes, `step` the loop
//! (`options`: what the command line adds to the plan) and its rooms: `ranks` (the rank's place and communicators), `resume` and `save` (where
//! a run starts, what it keeps), `program` and `executor` (the step's program and its
//! execution, `replay` the same program recorded once as a CUDA graph and replayed),
//! `reduce` and `update` (the sums across ranks, the optimizer with its schedule, clipping
//! and loss scale), `metrics` (what a run reports), `spans` (the trace's spans by operation
//! id); `stop` when a run
//! ends early (divergence, a preemption signal) and how its ranks agree on it, `predict`
//! what planc expects of the run.

pub mod checkpoint;
pub mod data;
pub mod engine;
pub mod executor;
pub mod metrics;
pub mod model;
pub mod options;
pub mod predict;
pub mod program;
pub mod ranks;
pub mod reduce;
pub mod replay;
pub mod resume;
pub mod save;
pub mod spans;
pub mod step;
pub mod stop;
pub mod update;

use sha2::{Digest, Sha256};

/// The `plan_hash` of a checkpoint: SHA-256 of the plan's source text, in hex, so a resumed
/// run can tell whether the plan changed since the checkpoint.
pub fn plan_hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn plan_hash_is_sha256_hex() {
        assert_eq!(
            super::plan_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
