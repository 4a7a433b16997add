//! `planc run`: trains the plan's model on the local GPU. `model` is the parameter table,
//! `data` the token stream, `checkpoint` the Hugging Face checkpoints, `cuda` and `blas`
//! the device (kernels from `kernels.cu`, compiled with NVRTC, and cuBLAS products),
//! `engine` the memory plan and the passes, `step` the loop that executes the step's
//! program, `predict` what planc expects of the run.

pub mod blas;
pub mod cuda;
pub mod engine;
pub mod model;
pub mod predict;
