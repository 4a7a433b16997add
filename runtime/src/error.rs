//! The runtime's one error type: every room returns it, and the binary turns it into an
//! exit status (2 for what the machine or the command line lacks, 1 for the rest).

use planc_compiler::plan::Precision;

#[derive(Debug)]
pub enum RunError {
    /// No CUDA driver (libcuda) could be loaded: not a GPU machine.
    NoDriver,
    /// The driver loaded but shows no GPU.
    NoGpu,
    /// cuBLAS could not be loaded.
    NoCublas,
    /// The plan's precision has no cuBLAS path here.
    Precision(Precision),
    Cuda(String),
    /// The plan cannot be run as written here (too big, too many GPUs, bad data): the
    /// message says why and what to change.
    Plan(String),
    /// The command line asks for something that cannot be done (exit 2): the message says
    /// which flag to change.
    Usage(String),
    /// The plan asks for what `planc run` does not run yet (P0901): never a fallback.
    NotRunYet(String),
    /// The loss or the gradient norm stopped being finite (exit 1): the message names the
    /// step and where it shows first.
    Diverged(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::NoDriver => write!(
                f,
                "no CUDA driver found (libcuda.so): this command needs a machine with an NVIDIA GPU"
            ),
            RunError::NoGpu => write!(f, "the CUDA driver sees no GPU"),
            RunError::NoCublas => write!(
                f,
                "cuBLAS (libcublas.so) not found; add the CUDA libraries to LD_LIBRARY_PATH"
            ),
            RunError::Precision(p) => write!(
                f,
                "`planc run` times bf16, fp16 and fp32 products; the plan's precision is {p:?}"
            ),
            RunError::Cuda(e) => write!(f, "CUDA error: {e}"),
            RunError::Plan(e) | RunError::Usage(e) | RunError::Diverged(e) => f.write_str(e),
            RunError::NotRunYet(e) => write!(f, "[P0901] {e} (`planc explain P0901`)"),
        }
    }
}
