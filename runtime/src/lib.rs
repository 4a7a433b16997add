//! The plan on real GPUs, in three rooms whose dependencies point one way:
//!
//! - [`device`]: what training runs on (CUDA context and streams, the kernels of
//!   `kernels.cu` with their launchers, cuBLAS, NCCL communicators), knowing nothing of the
//!   plan's model;
//! - [`train`]: `planc run`, the plan's model trained by executing the simulator's program
//!   for this rank on the device;
//! - [`probe`]: timing the machine (`planc run --ops`, `planc calibrate`) with the device's
//!   and training's own code paths.
//!
//! CUDA is loaded when a run starts (cudarc's dynamic loading), so planc builds and runs
//! everywhere; without a driver, a run returns [`RunError::NoDriver`].

pub mod device;
mod error;
pub mod probe;
pub mod train;

pub use device::local_gpu_count;
pub use error::RunError;
pub use probe::gpu::self_check;
pub use probe::ops::{measure, Measured, RunReport};
