//! cuBLASLt (libcublasLt, opened at run time beside libcublas): the products cuBLAS's plain
//! API cannot express. fp8 operands with per-tensor scales (`fp8`), and products whose
//! epilogue applies the MLP's GELU with its bias, or GELU's gradient (`gelu_products`), so
//! that the activation makes no pass over memory of its own.
//!
//! A handle, a workspace, and per shape a plan: the descriptors and the algorithm the
//! heuristic chose, made on first use and kept (a CUDA graph records the products, so
//! nothing here may allocate on the device after the first step).

use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;

use super::cuda::{Buf, Gpu};
use crate::error::RunError;

/// An operand's or output's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// fp8, 4 exponent bits (weights, activations).
    E4m3,
    /// fp8, 5 exponent bits (gradients).
    E5m2,
    Bf16,
    F16,
    F32,
}

impl Ty {
    fn lt(self) -> sys::cudaDataType {
        use sys::cudaDataType as T;
        match self {
            Ty::E4m3 => T::CUDA_R_8F_E4M3,
            Ty::E5m2 => T::CUDA_R_8F_E5M2,
            Ty::Bf16 => T::CUDA_R_16BF,
            Ty::F16 => T::CUDA_R_16F,
            Ty::F32 => T::CUDA_R_32F,
        }
    }

    fn is_fp8(self) -> bool {
        matches!(self, Ty::E4m3 | Ty::E5m2)
    }
}

/// What the product's epilogue does after `α·op(A)·B (+ β·D)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// Nothing.
    None,
    /// `aux = x + bias` (bias optional), `D = GELU(aux)` (the tanh form, GPT-2's).
    GeluAux { bias: bool },
    /// `D = x · GELU'(aux)`.
    Dgelu,
}

impl Epilogue {
    fn lt(self) -> sys::cublasLtEpilogue_t {
        use sys::cublasLtEpilogue_t as E;
        match self {
            Epilogue::None => E::CUBLASLT_EPILOGUE_DEFAULT,
            Epilogue::GeluAux { bias: false } => E::CUBLASLT_EPILOGUE_GELU_AUX,
            Epilogue::GeluAux { bias: true } => E::CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
            Epilogue::Dgelu => E::CUBLASLT_EPILOGUE_DGELU,
        }
    }

    fn takes_bias(self) -> bool {
        self == Epilogue::GeluAux { bias: true }
    }

    fn takes_aux(self) -> bool {
        self != Epilogue::None
    }
}

/// An operand: its buffer, type, and (fp8) the device float cuBLASLt multiplies the
/// product by, its inverse scale (NULL for none).
#[derive(Clone, Copy, Debug)]
pub struct Operand {
    pub buf: Buf,
    pub ty: Ty,
    pub scale: Buf,
}

/// One product in cuBLASLt's column-major terms: `D (m × n) = α·op(A)·B + β·D`, B stored
/// `k × n` (leading dimension k); A stored `k × m` and transposed where `trans_a` (the "TN"
/// form Hopper's fp8 products take), else `m × k`. D's leading dimension is m, and so are
/// the epilogue's aux matrix's; the bias is m long.
#[derive(Clone, Copy, Debug)]
pub struct Product {
    pub mnk: (usize, usize, usize),
    pub trans_a: bool,
    pub a: Operand,
    pub b: Operand,
    pub d: (Buf, Ty),
    pub accumulate: bool,
    /// fp8's fast accumulation (Transformer Engine's forward products take it).
    pub fast: bool,
    pub epilogue: Epilogue,
    /// The bias (`GeluAux { bias: true }`) and its type.
    pub bias: (Buf, Ty),
    /// The epilogue's matrix: written by `GeluAux`, read by `Dgelu`; D's type.
    pub aux: Buf,
}

/// What one product's plan depends on.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    mnk: (usize, usize, usize),
    trans_a: bool,
    types: (Ty, Ty, Ty),
    fast: bool,
    epilogue: Epilogue,
    bias: Ty,
    /// The operands' common alignment in bytes (16 to 256): the heuristic only offers
    /// kernels that work at it.
    align: u32,
}

/// A product's descriptors and the algorithm cuBLASLt's heuristic chose, made once a shape.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

/// A cuBLASLt handle, its workspace and the plans made so far.
pub struct Lt {
    handle: sys::cublasLtHandle_t,
    workspace: Buf,
    plans: RefCell<HashMap<Key, Plan>>,
}

fn lt_err(what: &str) -> impl Fn(lt::CublasError) -> RunError + '_ {
    move |e| RunError::Cuda(format!("cuBLASLt ({what}): {e:?}"))
}

/// Whether libcublasLt loads with every symbol.
pub fn present() -> bool {
    // SAFETY: probes whether the shared library loads.
    unsafe { sys::is_culib_present() }
}

impl Lt {
    /// A handle whose products use `workspace` (which outlives it; products on one stream
    /// may share it with cuBLAS's handle, since they run one after another).
    pub fn new(gpu: &Gpu, workspace: Buf) -> Result<Lt, RunError> {
        gpu.ctx.bind_to_thread().map_err(super::cuda::err)?;
        let handle = lt::create_handle().map_err(lt_err("create"))?;
        Ok(Lt {
            handle,
            workspace,
            plans: RefCell::new(HashMap::new()),
        })
    }

    /// The plan of product `p`: made (descriptors and the heuristic's algorithm) on its
    /// first shape, types and alignment, kept after. An error where cuBLASLt has no
    /// algorithm for it, which callers may take to run the product another way.
    pub fn prepare(&self, p: &Product) -> Result<(), RunError> {
        self.prepared(&Self::key(p)?)
    }

    fn prepared(&self, key: &Key) -> Result<(), RunError> {
        if let Entry::Vacant(v) = self.plans.borrow_mut().entry(*key) {
            v.insert(self.plan(key)?);
        }
        Ok(())
    }

    fn key(p: &Product) -> Result<Key, RunError> {
        // The aux matrix counts only where the epilogue reads or writes it.
        let aux = if p.epilogue.takes_aux() { p.aux } else { p.d.0 };
        let align = [p.a.buf, p.b.buf, p.d.0, aux]
            .iter()
            .map(|b| 1u32 << b.ptr.trailing_zeros().min(8))
            .min()
            .unwrap_or(256);
        if align < 16 {
            return Err(RunError::Cuda(format!(
                "a cuBLASLt product's operand is {align}-byte aligned; it needs 16"
            )));
        }
        Ok(Key {
            mnk: p.mnk,
            trans_a: p.trans_a,
            types: (p.a.ty, p.b.ty, p.d.1),
            fast: p.fast,
            epilogue: p.epilogue,
            bias: p.bias.1,
            align,
        })
    }

    /// Runs the product `p` on the GPU's compute stream.
    pub fn matmul(&self, gpu: &Gpu, p: &Product) -> Result<(), RunError> {
        let key = Self::key(p)?;
        self.prepared(&key)?;
        let plans = self.plans.borrow();
        let plan = &plans[&key];
        let set = |attr, ptr: &u64| {
            // SAFETY: the descriptor is live; the attribute is a device pointer (8 bytes).
            unsafe {
                lt::set_matmul_desc_attribute(
                    plan.desc,
                    attr,
                    ptr as *const u64 as *const c_void,
                    std::mem::size_of::<u64>(),
                )
            }
            .map_err(lt_err("pointer"))
        };
        use sys::cublasLtMatmulDescAttributes_t as D;
        if p.a.scale != Buf::NULL {
            set(D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.a.scale.ptr)?;
        }
        if p.b.scale != Buf::NULL {
            set(D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.b.scale.ptr)?;
        }
        if p.epilogue.takes_bias() {
            set(D::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias.0.ptr)?;
        }
        if p.epilogue.takes_aux() {
            set(D::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux.ptr)?;
        }
        let (alpha, beta) = (1.0f32, if p.accumulate { 1.0f32 } else { 0.0 });
        // SAFETY: the buffers are live device allocations of the sizes the layouts describe
        // (the caller sized them from the same dimensions); C is D (β = 1 reads it).
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                p.a.buf.ptr as *const c_void,
                plan.a,
                p.b.buf.ptr as *const c_void,
                plan.b,
                p.d.0.ptr as *const c_void,
                plan.d,
                p.d.0.ptr as *mut c_void,
                plan.d,
                &plan.algo,
                self.workspace.ptr as *mut c_void,
                self.workspace.bytes,
                gpu.stream as sys::cudaStream_t,
            )
        }
        .map_err(lt_err("matmul"))
    }

    /// The descriptors of a product and the heuristic's fastest algorithm for it.
    fn plan(&self, key: &Key) -> Result<Plan, RunError> {
        use sys::cublasLtMatmulDescAttributes_t as D;
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        let (m, n, k) = key.mnk;
        let (ta, tb, td) = key.types;
        let desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(lt_err("descriptor"))?;
        // SAFETY (every call below): live descriptors, attribute values of the documented
        // types and sizes (cublasOperation_t and the epilogue are 32-bit enums,
        // cudaDataType a 32-bit enum, FAST_ACCUM an int8_t, the aux leading dimension an
        // int64_t, the workspace size a size_t, the alignments uint32_t).
        let set = |attr, v: *const c_void, size: usize| unsafe {
            lt::set_matmul_desc_attribute(desc, attr, v, size).map_err(lt_err("descriptor"))
        };
        let transa = key.trans_a as i32; // CUBLAS_OP_T is 1, CUBLAS_OP_N 0
        let nn = 0i32;
        set(
            D::CUBLASLT_MATMUL_DESC_TRANSA,
            &transa as *const i32 as _,
            4,
        )?;
        set(D::CUBLASLT_MATMUL_DESC_TRANSB, &nn as *const i32 as _, 4)?;
        if ta.is_fp8() || tb.is_fp8() {
            let fast = key.fast as i8;
            set(
                D::CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                &fast as *const i8 as _,
                1,
            )?;
        }
        if key.epilogue != Epilogue::None {
            let e = key.epilogue.lt();
            set(
                D::CUBLASLT_MATMUL_DESC_EPILOGUE,
                &e as *const sys::cublasLtEpilogue_t as _,
                std::mem::size_of::<sys::cublasLtEpilogue_t>(),
            )?;
            let ld = m as i64;
            set(
                D::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                &ld as *const i64 as _,
                8,
            )?;
        }
        if key.epilogue.takes_bias() {
            let bt = key.bias.lt();
            set(
                D::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                &bt as *const sys::cudaDataType as _,
                std::mem::size_of::<sys::cudaDataType>(),
            )?;
        }
        let layout = |ty: Ty, rows: usize, cols: usize| {
            lt::create_matrix_layout(ty.lt(), rows as u64, cols as u64, rows as i64)
                .map_err(lt_err("layout"))
        };
        let a = if key.trans_a {
            layout(ta, k, m)?
        } else {
            layout(ta, m, k)?
        };
        let b = layout(tb, k, n)?;
        let d = layout(td, m, n)?;
        let pref = lt::create_matmul_pref().map_err(lt_err("preference"))?;
        let ws = self.workspace.bytes;
        let setp = |attr, v: *const c_void, size: usize| unsafe {
            lt::set_matmul_pref_attribute(pref, attr, v, size).map_err(lt_err("preference"))
        };
        setp(
            P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &ws as *const usize as _,
            std::mem::size_of::<usize>(),
        )?;
        for attr in [
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
        ] {
            setp(attr, &key.align as *const u32 as _, 4)?;
        }
        // SAFETY: every descriptor is live.
        let found = unsafe { lt::get_matmul_algo_heuristic(self.handle, desc, a, b, d, d, pref) };
        // SAFETY: created above, not used after.
        unsafe {
            let _ = lt::destroy_matmul_pref(pref);
        }
        let algo = found
            .map_err(|e| {
                RunError::Cuda(format!(
                    "cuBLASLt has no product for m={m} n={n} k={k} ({ta:?} × {tb:?} → {td:?}, \
                     epilogue {:?}): {e:?}",
                    key.epilogue
                ))
            })?
            .algo;
        Ok(Plan {
            desc,
            a,
            b,
            d,
            algo,
        })
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        // SAFETY: everything here was created by this Lt and is not used after.
        unsafe {
            for (_, p) in self.plans.borrow_mut().drain() {
                let _ = lt::destroy_matrix_layout(p.a);
                let _ = lt::destroy_matrix_layout(p.b);
                let _ = lt::destroy_matrix_layout(p.d);
                let _ = lt::destroy_matmul_desc(p.desc);
            }
            let _ = lt::destroy_handle(self.handle);
        }
    }
}
