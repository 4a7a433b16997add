//! The CUDA side: one context on GPU 0, a stream, a cuBLAS handle, and timed kernels.
//! Times are taken with CUDA events around each launch, after warm-up launches, each
//! launch queued behind a short spin so its interval is the kernel's and not the host's
//! time to issue it ([`SPIN`]), and the median of the repeats is reported. Inputs are
//! random, never zeros (a product of zeros runs faster than real data).

use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, DriverError, LaunchConfig,
    PushKernelArg,
};
use half::{bf16, f16};
use planc_compiler::plan::Precision;

use crate::error::RunError;

fn cuda(e: DriverError) -> RunError {
    RunError::Cuda(e.to_string())
}

/// One SM held for a number of clock cycles, nothing else: the `spin` of planc's kernels
/// (`device/spin.cu`), compiled here on its own, since the runner loads none of the training
/// kernels. Queued before each timed launch for [`super::timing::SPIN_CYCLES`] cycles: on an
/// idle stream the start event ran while the host was still issuing the cuBLAS call (5-20
/// µs), which priced small products 10-15 % slow.
const SPIN: &str = include_str!("../device/spin.cu");

pub struct Runner {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    spin: CudaFunction,
    precision: Precision,
    pub device_name: String,
    pub gpu_count: usize,
    seed: u64,
}

impl Runner {
    pub fn open(precision: Precision) -> Result<Runner, RunError> {
        // SAFETY: only probes whether the shared libraries load.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(RunError::NoDriver);
        }
        let gpu_count = CudaContext::device_count().map_err(cuda)?;
        if gpu_count < 1 {
            return Err(RunError::NoGpu);
        }
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(RunError::NoCublas);
        }
        let ctx = CudaContext::new(0).map_err(cuda)?;
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone()).map_err(|e| RunError::Cuda(e.to_string()))?;
        let device_name = ctx.name().map_err(cuda)?;
        let ptx = cudarc::nvrtc::compile_ptx(SPIN)
            .map_err(|e| RunError::Cuda(format!("NVRTC, compiling the timing spin: {e}")))?;
        let spin = ctx
            .load_module(ptx)
            .and_then(|m| m.load_function("spin"))
            .map_err(cuda)?;
        Ok(Runner {
            ctx,
            stream,
            blas,
            spin,
            precision,
            device_name,
            gpu_count: gpu_count as usize,
            seed: 0x9E37_79B9_7F4A_7C15,
        })
    }

    /// Uniform values in [-1, 1), from a small generator: reproducible and never all zero.
    fn random(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 7;
                self.seed ^= self.seed << 17;
                (self.seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn upload<T: DeviceRepr>(
        &mut self,
        n: usize,
        conv: fn(f32) -> T,
    ) -> Result<CudaSlice<T>, RunError> {
        let host: Vec<T> = self.random(n).into_iter().map(conv).collect();
        self.stream.memcpy_stod(&host).map_err(cuda)
    }

    /// Median seconds of `launch` over `repeats`, after two warm-up launches.
    fn time(
        &self,
        repeats: usize,
        mut launch: impl FnMut() -> Result<(), RunError>,
    ) -> Result<f64, RunError> {
        for _ in 0..2 {
            launch()?;
        }
        let mut times = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let start = self
                .ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(cuda)?;
            let end = self
                .ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(cuda)?;
            let mut spin = self.stream.launch_builder(&self.spin);
            spin.arg(&super::timing::SPIN_CYCLES);
            let one = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: `spin` takes one i64, passed above, and touches no memory.
            unsafe { spin.launch(one) }.map_err(cuda)?;
            start.record(&self.stream).map_err(cuda)?;
            launch()?;
            end.record(&self.stream).map_err(cuda)?;
            end.synchronize().map_err(cuda)?;
            times.push(start.elapsed_ms(&end).map_err(cuda)? as f64 / 1e3);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    }

    /// Times `C (m×n) = A (m×k) · B (k×n)` in the plan's precision.
    pub fn gemm(&mut self, m: usize, n: usize, k: usize, repeats: usize) -> Result<f64, RunError> {
        match self.precision {
            Precision::Bf16 => self.gemm_as(m, n, k, repeats, bf16::from_f32),
            Precision::Fp16 => self.gemm_as(m, n, k, repeats, f16::from_f32),
            _ => self.gemm_as(m, n, k, repeats, |x| x),
        }
    }

    fn gemm_as<T>(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        repeats: usize,
        conv: fn(f32) -> T,
    ) -> Result<f64, RunError>
    where
        T: DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy,
        CudaBlas: Gemm<T>,
    {
        let a = self.upload(m * k, conv)?;
        let b = self.upload(k * n, conv)?;
        let mut c = self.stream.alloc_zeros::<T>(m * n).map_err(cuda)?;
        let cfg = config(m, n, k, conv);
        let blas = &self.blas;
        self.time(repeats, || {
            // SAFETY: the buffers hold m×k, k×n and m×n elements, as `cfg` says.
            unsafe { blas.gemm(cfg, &a, &b, &mut c) }.map_err(|e| RunError::Cuda(e.to_string()))
        })
    }

    /// Times a device-to-device copy that reads and writes `bytes` in total.
    pub fn copy(&mut self, bytes: usize, repeats: usize) -> Result<f64, RunError> {
        let n = (bytes / 2).max(1);
        let src = self.upload(n, |x| (x * 127.0) as i8 as u8)?;
        let mut dst = self.stream.alloc_zeros::<u8>(n).map_err(cuda)?;
        let stream = self.stream.clone();
        self.time(repeats, || stream.memcpy_dtod(&src, &mut dst).map_err(cuda))
    }
}

/// Column-major `C = A·B` with no transposes, as cuBLAS counts.
pub(crate) fn config<T>(m: usize, n: usize, k: usize, conv: fn(f32) -> T) -> GemmConfig<T> {
    GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: m as i32,
        n: n as i32,
        k: k as i32,
        alpha: conv(1.0),
        lda: m as i32,
        ldb: k as i32,
        beta: conv(0.0),
        ldc: m as i32,
    }
}

/// Proves the cuBLAS call computes the product it is timed as: a bf16 product of random
/// matrices against an f64 reference on the CPU. Returns the relative error
/// ‖C − C_ref‖ / ‖C_ref‖ (bf16 inputs land between 1e-3 and 1e-2).
pub fn self_check() -> Result<f64, RunError> {
    let mut r = Runner::open(Precision::Bf16)?;
    let (m, n, k) = (96, 80, 64);
    let a_host: Vec<bf16> = r.random(m * k).into_iter().map(bf16::from_f32).collect();
    let b_host: Vec<bf16> = r.random(k * n).into_iter().map(bf16::from_f32).collect();
    let a = r.stream.memcpy_stod(&a_host).map_err(cuda)?;
    let b = r.stream.memcpy_stod(&b_host).map_err(cuda)?;
    // Poisoned, so an unwritten element shows.
    let mut c = r
        .stream
        .memcpy_stod(&vec![bf16::from_f32(f32::NAN); m * n])
        .map_err(cuda)?;
    // SAFETY: sizes as in `config`.
    unsafe { r.blas.gemm(config(m, n, k, bf16::from_f32), &a, &b, &mut c) }
        .map_err(|e| RunError::Cuda(e.to_string()))?;
    let c_host = r.stream.memcpy_dtov(&c).map_err(cuda)?;
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for j in 0..n {
        for i in 0..m {
            let want: f64 = (0..k)
                .map(|p| a_host[i + p * m].to_f64() * b_host[p + j * k].to_f64())
                .sum();
            let got = c_host[i + j * m].to_f64();
            err += (got - want).powi(2);
            norm += want.powi(2);
        }
    }
    Ok((err / norm).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runner's own spin compiles with NVRTC (any machine with libnvrtc; `.ci/run`
    /// installs it) and spins on the SM clock: a runner that could not build it would fail
    /// calibration at its first product.
    #[test]
    fn the_timing_spin_compiles() {
        // SAFETY: only probes whether the shared library loads.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            println!("SKIPPED timing spin compilation: libnvrtc not found (see .ci/run)");
            return;
        }
        let ptx = cudarc::nvrtc::compile_ptx(SPIN).unwrap_or_else(|e| panic!("{e}"));
        let text = ptx.to_src();
        assert!(text.contains(".entry spin("), "{text}");
        assert!(text.contains("%clock64"), "{text}");
    }
}
