//! `planc run`: trains the plan's model on the local GPU. `model` is the parameter table,
//! `data` the token stream, `checkpoint` the Hugging Face checkpoints; the CUDA side lives
//! in `kernels.cu` (compiled with NVRTC) and `engine`.

pub mod data;
pub mod model;
