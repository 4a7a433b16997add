//! What the command line adds to a plan for one `planc run` (steps, checkpoints, `--layers`,
//! tracing): read by the loop (`step`) and by the checkpoints it saves and resumes from.

use std::path::PathBuf;

/// What the command line adds to the plan.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub steps: Option<u64>,
    pub save: Option<PathBuf>,
    pub save_every: Option<u64>,
    pub resume: Option<PathBuf>,
    pub layers: Option<usize>,
    /// The folder of the plan file (the token file is relative to it).
    pub plan_dir: PathBuf,
    /// A digest of the plan's text, kept in checkpoints.
    pub plan_hash: String,
    /// Record per-operation times for a trace.
    pub trace: bool,
    /// Launch every step's kernels from the host, never replaying a recorded CUDA graph
    /// (`replay`).
    pub no_graphs: bool,
}
