//! The device training runs on: one CUDA context and its streams with counted buffers
//! (`cuda`, the kernels of `kernels.cu` compiled with NVRTC and launched), every matrix
//! product through cuBLAS (`blas`; under `precision = fp8` the linear layers' through
//! cuBLASLt, `fp8`), the launchers of the kernel families that take more than
//! one launch or a grid of their own (`attention` the fused attention, with
//! `attention_cudnn` cuDNN's fused attention where it runs, both on the shapes of `heads`, `rows` the norms and
//! their partial sums, `activation` the MLP's GELU and SwiGLU, `optimizer` the update),
//! each kernel's declared parameters checked at every launch (`signature`), and several GPUs (`dist`:
//! ranks, rendezvous, NCCL communicators and the watchdog; `trail`: the NCCL operations a
//! rank queued, for the watchdog to name the one the GPU is stuck in), and `graph`: stream
//! work recorded once as a CUDA graph and replayed with one launch.
//!
//! Nothing here knows the plan's model or step: `train` and `probe` build on it.

pub mod activation;
pub mod attention;
pub mod attention_cudnn;
pub mod blas;
pub mod cuda;
pub mod dist;
pub mod fp8;
pub mod gelu_products;
pub mod graph;
pub mod heads;
pub mod lt;
pub mod optimizer;
pub mod rows;
pub mod signature;
pub mod trail;

/// GPUs the CUDA driver shows here; 0 without a driver.
pub fn local_gpu_count() -> usize {
    // SAFETY: only probes whether the shared library loads.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return 0;
    }
    cudarc::driver::CudaContext::device_count()
        .unwrap_or(0)
        .max(0) as usize
}
