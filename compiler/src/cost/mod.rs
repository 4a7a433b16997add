//! The cost model: parameters, FLOPs, memory and time of one training step.

pub mod comm;
pub mod memory;
pub mod ops;
pub mod params;
pub mod time;
