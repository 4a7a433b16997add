//! `planc run`: trains the plan's model on the local GPU. `model` is the parameter table,
//! `data` the token stream, `checkpoint` the Hugging Face checkpoints, `cuda` and `blas`
//! the device (kernels from `kernels.cu`, compiled with NVRTC, and cuBLAS products),
//! `attention` the fused (flash) attention's launches, `rows` the norms' and `activation`
//! the MLP activation's, `engine` the memory plan and the passes, `step` the loop that
//! executes the step's program, `stop` when a run ends early (divergence, a preemption
//! signal) and how its ranks agree on it, `predict` what planc expects of the run.

pub mod activation;
pub mod attention;
pub mod blas;
pub mod checkpoint;
pub mod cuda;
pub mod data;
pub mod dist;
pub mod engine;
pub mod model;
pub mod predict;
pub mod rows;
pub mod step;
pub mod stop;
pub mod trail;

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
