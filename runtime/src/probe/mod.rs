//! Timing the machine with the runtime's own code paths: one layer's operations of a plan
//! next to their predictions (`ops`, `planc run --ops`) and the device profile the cost
//! model reads (`calibrate`, `planc calibrate`). `gpu` and `collectives` time products,
//! copies and NCCL collectives through cudarc's safe API; `load` keeps the GPU at the clock
//! training runs it at while the attention is timed; `power` measures the power limit's
//! curve, with the clocks `nvml` reads; `timing` is how every probe times a launch.

pub mod calibrate;
mod collectives;
pub mod gpu;
mod load;
mod nvml;
pub mod ops;
mod power;
mod timing;
