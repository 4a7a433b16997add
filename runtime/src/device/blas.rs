//! The matrix products of training through cuBLAS, in row-major terms.
//!
//! cuBLAS is column-major; a row-major `[r, c]` matrix is its column-major transpose, so
//! each product below is written as the transposed product cuBLAS computes. Inputs are in
//! the storage type (fp32, bf16 or fp16), accumulation is always fp32 (`COMPUTE_32F`, which
//! in fp32 means no TF32), and weight gradients may be written straight into fp32 buffers
//! with β = 1, which is how micro-batches accumulate.

use std::ffi::c_void;

use cudarc::cublas::result as cb;
use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasOperation_t, cudaDataType,
};
use planc_compiler::plan::Precision;

use super::cuda::{Buf, Gpu};
use crate::error::RunError;

pub struct Blas {
    handle: cublasHandle_t,
    /// The storage type of activations and compute weights.
    x: cudaDataType,
}

fn err(e: impl std::fmt::Debug) -> RunError {
    RunError::Cuda(format!("cuBLAS: {e:?}"))
}

/// cuBLAS's workspace for training: what its documentation recommends on Hopper (32 MiB;
/// 4 MiB elsewhere), the size its default pool takes there (the memory plan's figure).
pub use planc_compiler::cost::buffers::launch::BLAS_WORKSPACE as WORKSPACE;

/// Whether a product's output is in the storage type or fp32.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Out {
    X,
    F32,
}

const N: cublasOperation_t = cublasOperation_t::CUBLAS_OP_N;
const T: cublasOperation_t = cublasOperation_t::CUBLAS_OP_T;

impl Blas {
    pub fn new(gpu: &Gpu, precision: Precision) -> Result<Blas, RunError> {
        // SAFETY: probes the shared library only.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(RunError::NoCublas);
        }
        gpu.ctx.bind_to_thread().map_err(err)?;
        let handle = cb::create_handle().map_err(err)?;
        // SAFETY: the handle is fresh and the stream lives as long as the Gpu.
        unsafe { cb::set_stream(handle, gpu.stream as _) }.map_err(err)?;
        let x = match precision {
            Precision::Fp32 => cudaDataType::CUDA_R_32F,
            Precision::Fp16 => cudaDataType::CUDA_R_16F,
            Precision::Bf16 | Precision::Fp8 => cudaDataType::CUDA_R_16BF,
        };
        Ok(Blas { handle, x })
    }

    /// Gives cuBLAS `ws` as its workspace on this handle's stream, for good: a product
    /// recorded into a CUDA graph (`graph`) must not allocate, and cuBLAS's own pool may
    /// allocate on first use; training sets it whether it records graphs or not, so both
    /// ways choose the same algorithms. Set after the stream (`cublasSetStream` goes back to
    /// the default pool).
    pub fn use_workspace(&self, ws: Buf) -> Result<(), RunError> {
        // SAFETY: `ws` is a live device buffer of `ws.bytes` that outlives the handle's use
        // (the engine's, freed with its GPU).
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(self.handle, ws.ptr as *mut c_void, ws.bytes)
        }
        .result()
        .map_err(err)
    }

    /// Column-major `C (m×n) = α·op(A)·op(B) + β·C`, batched with strides (elements).
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        ta: cublasOperation_t,
        tb: cublasOperation_t,
        (m, n, k): (usize, usize, usize),
        a: Buf,
        lda: usize,
        sa: usize,
        b: Buf,
        ldb: usize,
        sb: usize,
        c: Buf,
        ldc: usize,
        sc: usize,
        out: Out,
        (alpha, beta): (f32, f32),
        batch: usize,
    ) -> Result<(), RunError> {
        let c_type = match out {
            Out::X => self.x,
            Out::F32 => cudaDataType::CUDA_R_32F,
        };
        let algo = cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
        let compute = cublasComputeType_t::CUBLAS_COMPUTE_32F;
        let (pa, pb, pc) = (
            a.ptr as *const c_void,
            b.ptr as *const c_void,
            c.ptr as *mut c_void,
        );
        let (al, be) = (
            &alpha as *const f32 as *const c_void,
            &beta as *const f32 as *const c_void,
        );
        // SAFETY: the buffers are live device allocations of the sizes the shapes imply
        // (the caller's shapes come from the same dimensions that sized the buffers).
        unsafe {
            if batch == 1 {
                cb::gemm_ex(
                    self.handle,
                    ta,
                    tb,
                    m as i32,
                    n as i32,
                    k as i32,
                    al,
                    pa,
                    self.x,
                    lda as i32,
                    pb,
                    self.x,
                    ldb as i32,
                    be,
                    pc,
                    c_type,
                    ldc as i32,
                    compute,
                    algo,
                )
            } else {
                cb::gemm_strided_batched_ex(
                    self.handle,
                    ta,
                    tb,
                    m as i32,
                    n as i32,
                    k as i32,
                    al,
                    pa,
                    self.x,
                    lda as i32,
                    sa as i64,
                    pb,
                    self.x,
                    ldb as i32,
                    sb as i64,
                    be,
                    pc,
                    c_type,
                    ldc as i32,
                    sc as i64,
                    batch as i32,
                    compute,
                    algo,
                )
            }
        }
        .map_err(err)
    }

    /// `out[rows, o] = inp[rows, i] · W[o, i]ᵀ`
    pub fn linear(&self, out: Buf, inp: Buf, w: Buf, rows: usize, i: usize, o: usize) -> Res {
        self.gemm(
            T,
            N,
            (o, rows, i),
            w,
            i,
            0,
            inp,
            i,
            0,
            out,
            o,
            0,
            Out::X,
            (1.0, 0.0),
            1,
        )
    }

    /// `dinp[rows, i] = dout[rows, o] · W[o, i]`
    pub fn linear_dinp(
        &self,
        dinp: Buf,
        dout: Buf,
        w: Buf,
        rows: usize,
        i: usize,
        o: usize,
    ) -> Res {
        self.gemm(
            N,
            N,
            (i, rows, o),
            w,
            i,
            0,
            dout,
            o,
            0,
            dinp,
            i,
            0,
            Out::X,
            (1.0, 0.0),
            1,
        )
    }

    /// `dW[o, i] += dout[rows, o]ᵀ · inp[rows, i]`, into fp32.
    pub fn linear_dw(&self, dw: Buf, dout: Buf, inp: Buf, rows: usize, i: usize, o: usize) -> Res {
        self.linear_dw_as(dw, dout, inp, (rows, i, o), true)
    }

    /// [`Self::linear_dw`], or `dw = doutᵀ · inp` where not `accumulate`: a step's first
    /// gradient of a weight overwrites it, so its buffer needs no zeroing first.
    pub fn linear_dw_as(
        &self,
        dw: Buf,
        dout: Buf,
        inp: Buf,
        (rows, i, o): (usize, usize, usize),
        accumulate: bool,
    ) -> Res {
        self.gemm(
            N,
            T,
            (i, o, rows),
            inp,
            i,
            0,
            dout,
            o,
            0,
            dw,
            i,
            0,
            Out::F32,
            (1.0, if accumulate { 1.0 } else { 0.0 }),
            1,
        )
    }

    /// Per (batch, head): `S[t, t] = Q[t, d] · K[t, d]ᵀ` (unscaled).
    pub fn scores(&self, s: Buf, q: Buf, k: Buf, bh: usize, t: usize, d: usize) -> Res {
        self.gemm(
            T,
            N,
            (t, t, d),
            k,
            d,
            t * d,
            q,
            d,
            t * d,
            s,
            t,
            t * t,
            Out::X,
            (1.0, 0.0),
            bh,
        )
    }

    /// `O[t, d] = P[t, t] · V[t, d]`
    pub fn attend(&self, o: Buf, p: Buf, v: Buf, bh: usize, t: usize, d: usize) -> Res {
        self.gemm(
            N,
            N,
            (d, t, t),
            v,
            d,
            t * d,
            p,
            t,
            t * t,
            o,
            d,
            t * d,
            Out::X,
            (1.0, 0.0),
            bh,
        )
    }

    /// `dP[t, t] = dO[t, d] · V[t, d]ᵀ`
    pub fn d_probs(&self, dp: Buf, dout: Buf, v: Buf, bh: usize, t: usize, d: usize) -> Res {
        self.gemm(
            T,
            N,
            (t, t, d),
            v,
            d,
            t * d,
            dout,
            d,
            t * d,
            dp,
            t,
            t * t,
            Out::X,
            (1.0, 0.0),
            bh,
        )
    }

    /// `dV[t, d] = P[t, t]ᵀ · dO[t, d]`
    pub fn d_values(&self, dv: Buf, p: Buf, dout: Buf, bh: usize, t: usize, d: usize) -> Res {
        self.gemm(
            N,
            T,
            (d, t, t),
            dout,
            d,
            t * d,
            p,
            t,
            t * t,
            dv,
            d,
            t * d,
            Out::X,
            (1.0, 0.0),
            bh,
        )
    }

    /// `dQ[t, d] = dS[t, t] · K[t, d]`
    pub fn d_queries(&self, dq: Buf, ds: Buf, k: Buf, bh: usize, t: usize, d: usize) -> Res {
        self.gemm(
            N,
            N,
            (d, t, t),
            k,
            d,
            t * d,
            ds,
            t,
            t * t,
            dq,
            d,
            t * d,
            Out::X,
            (1.0, 0.0),
            bh,
        )
    }

    /// `dK[t, d] = dS[t, t]ᵀ · Q[t, d]`
    pub fn d_keys(&self, dk: Buf, ds: Buf, q: Buf, bh: usize, t: usize, d: usize) -> Res {
        self.gemm(
            N,
            T,
            (d, t, t),
            q,
            d,
            t * d,
            ds,
            t,
            t * t,
            dk,
            d,
            t * d,
            Out::X,
            (1.0, 0.0),
            bh,
        )
    }
}

type Res = Result<(), RunError>;

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle is not used after.
        unsafe {
            let _ = cb::destroy_handle(self.handle);
        }
    }
}
