//! fp8 training's products (`precision = fp8`): the transformer layers' linear layers in
//! fp8 through cuBLASLt, everything else as bf16 training runs it.
//!
//! What runs in fp8 and how, as Transformer Engine's `DelayedScaling` recipe runs it
//! (`Format.HYBRID`) and `compiler/src/cost/fp8.rs` prices it:
//!
//! - **Which products**: a layer's qkv, attention output, MLP up (gate and up together) and
//!   down products, forward and both backward products. The output layer (logits), the
//!   attention core, norms, activations and the optimizer keep bf16; master weights,
//!   gradients and moments stay fp32. A product whose rows, inputs or outputs are not
//!   multiples of 16 (cuBLASLt's fp8 alignment) runs in bf16 ([`supports`]).
//! - **Formats**: weights and activations E4M3 (max 448), output gradients E5M2 (max 57344).
//!   Forward `Y = X·Wᵀ` takes X and W in E4M3; the input gradient `dX = dY·W` takes dY in
//!   E5M2 and W in E4M3; the weight gradient `dW += dYᵀ·X` takes both from their transposed
//!   copies and accumulates into the fp32 gradient (β = 1). Outputs are bf16 (fp32 for dW).
//! - **Layout**: Hopper's fp8 products take only the "TN" form (A transposed, B not, both
//!   K-major), so each product reads operands whose contraction dimension is contiguous: W
//!   `[o, i]` (forward) and its transpose `[i, o]` (input gradient); X `[rows, i]` (forward)
//!   and its transpose `[i, rows]` (weight gradient); dY `[rows, o]` and its transpose
//!   `[o, rows]`. One cast kernel writes a tensor's fp8 copy and transposed copy together.
//! - **Scaling**: one scale per tensor (X, W and dY of each product) from its amax history,
//!   delayed: the cast kernel folds each tensor's max |x| into its amax as it casts; at a
//!   step's start ([`Fp8::begin_step`]) the step before's amax joins a ring of the last
//!   [`AMAX_HISTORY`] and the scale becomes `format max / max(history)` (margin 0; kept when
//!   that max is 0 or not finite). A step's casts and products all use the scale fixed at
//!   its start. The very first step has no history: its casts scale from the amax of what
//!   has been cast so far, the tensor included (an amax pass before the cast), where
//!   Transformer Engine starts from scale 1 (which would flush most first-step gradients,
//!   ~1e-5, below E5M2's smallest value). cuBLASLt multiplies the product by the inverse
//!   scales of both operands (`A_SCALE_POINTER`, `B_SCALE_POINTER`, device pointers).
//! - **What is cast when**: the weights once a step, after the update (fp8 copy and
//!   transpose, 2 bytes a parameter, kept for the step's micro-batches); a product's input in
//!   forward (the fp8 copy, into scratch) and again in backward from the 16-bit input the
//!   layer kept anyway (the transposed copy): planc keeps its 16-bit inputs, so fp8 adds no
//!   activation memory; the output gradient in backward (copy and transpose, scratch).
//!
//! Differences from Transformer Engine, on purpose or not yet done: amaxes are not reduced
//! over the tensor- or data-parallel group (each rank scales its own tensors); the history
//! is not saved in checkpoints (a resumed run's first step scales as a first step does);
//! the norm and activation do not write fp8 themselves (a separate cast pass each).

use super::cuda::{Arg, Buf, Gpu};
use super::lt::{Epilogue, Lt, Operand, Product, Ty};
use crate::error::RunError;

use planc_compiler::cost::buffers::launch::FP8_META as META;
/// Amaxes a tensor's scale looks back over, floats of state a tensor (inverse scale,
/// scale, amax, the format's largest value), and which products fp8 takes: the memory
/// plan's figures (`planc_compiler::cost::buffers::launch`), which sizes this state.
pub use planc_compiler::cost::buffers::launch::{fp8_supports as supports, AMAX_HISTORY};
use planc_compiler::cost::buffers::{fp8_buffers, Fp8Buf, Name};

/// The two fp8 formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// 4 exponent bits, 3 mantissa bits: weights and activations.
    E4m3,
    /// 5 exponent bits, 2 mantissa bits: gradients.
    E5m2,
}

impl Format {
    /// The largest finite value.
    pub fn max(self) -> f32 {
        match self {
            Format::E4m3 => 448.0,
            Format::E5m2 => 57344.0,
        }
    }

    fn ty(self) -> Ty {
        match self {
            Format::E4m3 => Ty::E4m3,
            Format::E5m2 => Ty::E5m2,
        }
    }
}

/// The scale delayed scaling sets from an amax history (what `fp8_roll` computes on the
/// device): `max / amax` over the history's largest amax, or `current` when that is 0 or
/// not finite.
pub fn scale_from_history(format: Format, history: &[f32], current: f32) -> f32 {
    let amax = history.iter().copied().fold(0.0f32, f32::max);
    if amax > 0.0 && amax.is_finite() {
        (format.max() / amax).min(3.0e38)
    } else {
        current
    }
}

/// Whether a GPU of compute capability `major.minor` multiplies in fp8 (Ada and Hopper on).
pub fn device_runs_fp8(major: i32, minor: i32) -> bool {
    (major, minor) >= (8, 9)
}

/// The buffers of an fp8 state, allocated as the memory plan lists them
/// (`planc_compiler::cost::buffers::fp8_buffers`).
#[derive(Clone, Debug, Default)]
pub struct Fp8Bufs {
    pub workspace: Buf,
    pub meta: Buf,
    pub hist: Buf,
    pub xq: Buf,
    pub gq: Buf,
    pub gqt: Buf,
    /// Each linear layer's weight copy and its transpose.
    pub weights: Vec<(Buf, Buf)>,
}

impl Fp8Bufs {
    /// Puts the buffer the plan names `which` where it belongs.
    pub fn put(&mut self, which: Fp8Buf, b: Buf) {
        match which {
            Fp8Buf::Workspace => self.workspace = b,
            Fp8Buf::Meta => self.meta = b,
            Fp8Buf::History => self.hist = b,
            Fp8Buf::Input => self.xq = b,
            Fp8Buf::Grad => self.gq = b,
            Fp8Buf::GradT => self.gqt = b,
            Fp8Buf::Weight(k) => self.weight(k).0 = b,
            Fp8Buf::WeightT(k) => self.weight(k).1 = b,
        }
    }

    fn weight(&mut self, k: usize) -> &mut (Buf, Buf) {
        if self.weights.len() <= k {
            self.weights.resize(k + 1, (Buf::NULL, Buf::NULL));
        }
        &mut self.weights[k]
    }

    fn all(&self) -> Vec<Buf> {
        let mut v = vec![
            self.workspace,
            self.meta,
            self.hist,
            self.xq,
            self.gq,
            self.gqt,
        ];
        v.extend(self.weights.iter().flat_map(|&(w, t)| [w, t]));
        v
    }
}

/// One linear layer's fp8 state: its weight's cached copies (`[o, i]` and `[i, o]`), the
/// indices of its input's, weight's and output gradient's scales, and its shape.
#[derive(Clone, Copy, Debug)]
pub struct Linear {
    pub w8: Buf,
    pub wt8: Buf,
    x: usize,
    w: usize,
    g: usize,
    pub i: usize,
    pub o: usize,
}

/// The fp8 products of one engine: cuBLASLt, the scales and amax histories of every
/// tensor, the weights' fp8 copies and the casts' scratch.
pub struct Fp8 {
    lt: Lt,
    /// `META` floats a tensor (see `fp8.cu`).
    meta: Buf,
    /// `AMAX_HISTORY` floats a tensor.
    hist: Buf,
    tensors: usize,
    /// Steps begun; the first has no history (`fresh`).
    steps: u64,
    fresh: bool,
    /// A product's input in fp8 (forward) or its transpose (backward), the output gradient
    /// in fp8 and its transpose.
    xq: Buf,
    gq: Buf,
    gqt: Buf,
    /// Every buffer allocated for it, for `release`.
    owned: Vec<Buf>,
}

impl Fp8 {
    /// The fp8 state for linear layers of shapes `(i, o)` over micro-batches of `rows`
    /// tokens, its buffers allocated here; returns each layer's [`Linear`] in order. Every
    /// shape must be [`supports`]ed.
    pub fn new(
        gpu: &mut Gpu,
        shapes: &[(usize, usize)],
        rows: usize,
    ) -> Result<(Fp8, Vec<Linear>), RunError> {
        check_device(gpu)?;
        assert!(shapes.iter().all(|&(i, o)| supports(rows, i, o)));
        let mut bufs = Fp8Bufs::default();
        for b in fp8_buffers(shapes, rows) {
            if let Name::Fp8(which) = b.name {
                bufs.put(which, gpu.alloc(b.bytes)?);
            }
        }
        Fp8::with_buffers(gpu, shapes, bufs)
    }

    /// The fp8 state for linear layers of shapes `(i, o)` in buffers allocated as
    /// `fp8_buffers` lists them for those shapes (the engine's memory plan); returns each
    /// layer's [`Linear`] in order. Call [`check_device`] before allocating them.
    pub fn with_buffers(
        gpu: &mut Gpu,
        shapes: &[(usize, usize)],
        bufs: Fp8Bufs,
    ) -> Result<(Fp8, Vec<Linear>), RunError> {
        assert_eq!(bufs.weights.len(), shapes.len(), "a weight copy a layer");
        let lt = Lt::new(gpu, bufs.workspace)?;
        let tensors = 3 * shapes.len();
        let mut state = Vec::with_capacity(tensors * META);
        for _ in shapes {
            for f in [Format::E4m3, Format::E4m3, Format::E5m2] {
                state.extend_from_slice(&[1.0f32, 1.0, 0.0, f.max()]);
            }
        }
        gpu.upload(bufs.meta, &state)?;
        let linears = shapes
            .iter()
            .zip(&bufs.weights)
            .enumerate()
            .map(|(k, (&(i, o), &(w8, wt8)))| Linear {
                w8,
                wt8,
                x: 3 * k,
                w: 3 * k + 1,
                g: 3 * k + 2,
                i,
                o,
            })
            .collect();
        let f = Fp8 {
            lt,
            meta: bufs.meta,
            hist: bufs.hist,
            tensors,
            steps: 0,
            fresh: true,
            xq: bufs.xq,
            gq: bufs.gq,
            gqt: bufs.gqt,
            owned: bufs.all(),
        };
        Ok((f, linears))
    }

    /// Frees every buffer of this state (its layers' weight copies too).
    pub fn release(self, gpu: &mut Gpu) -> Result<(), RunError> {
        for b in &self.owned {
            gpu.free(*b)?;
        }
        Ok(())
    }

    /// The state of tensor `t` (inverse scale first: what cuBLASLt reads).
    fn meta_of(&self, t: usize) -> Buf {
        self.meta.at(META * t, 4)
    }

    /// A step begins: the step before's amaxes join the histories and set the scales
    /// (from the second step on), then the weights `(layer, its bf16 weight [o, i])` are
    /// cast to their fp8 copies for the step.
    pub fn begin_step(&mut self, gpu: &Gpu, weights: &[(Linear, Buf)]) -> Result<(), RunError> {
        if self.steps > 0 {
            let slot = ((self.steps - 1) % AMAX_HISTORY as u64) as i32;
            gpu.launch(
                "fp8_roll",
                (self.tensors as u32, 1),
                256,
                &[
                    Arg::P(self.meta),
                    Arg::P(self.hist),
                    Arg::I(AMAX_HISTORY as i32),
                    Arg::I(slot),
                ],
            )?;
            self.fresh = false;
        }
        self.steps += 1;
        for (lin, w) in weights {
            self.cast(
                gpu,
                lin.w,
                Format::E4m3,
                *w,
                (lin.o, lin.i),
                lin.w8,
                lin.wt8,
            )?;
        }
        Ok(())
    }

    /// `x [rows, cols]` (the storage type) cast with tensor `t`'s scale into `q [rows, cols]`
    /// and `qt [cols, rows]` (either may be NULL), its amax folded into the tensor's.
    #[allow(clippy::too_many_arguments)]
    fn cast(
        &self,
        gpu: &Gpu,
        t: usize,
        format: Format,
        x: Buf,
        (rows, cols): (usize, usize),
        q: Buf,
        qt: Buf,
    ) -> Result<(), RunError> {
        cast(
            gpu,
            self.meta_of(t),
            format,
            x,
            (rows, cols),
            (q, qt),
            self.fresh,
        )
    }

    /// `out [rows, o] = x [rows, i] · Wᵀ` in fp8, out in the storage type (bf16).
    pub fn forward(
        &self,
        gpu: &Gpu,
        lin: &Linear,
        out: Buf,
        x: Buf,
        rows: usize,
    ) -> Result<(), RunError> {
        self.cast(
            gpu,
            lin.x,
            Format::E4m3,
            x,
            (rows, lin.i),
            self.xq,
            Buf::NULL,
        )?;
        self.product(gpu, lin, out, rows)
    }

    /// `forward`'s product alone, of the input `forward` cast last.
    pub fn product(&self, gpu: &Gpu, lin: &Linear, out: Buf, rows: usize) -> Result<(), RunError> {
        let (i, o) = (lin.i, lin.o);
        // Column-major: out (o × rows) = W8ᵀ (o × i) · X8 (i × rows), K = i contiguous in both.
        self.tn(
            gpu,
            (o, rows, i),
            (lin.w8, Format::E4m3, lin.w),
            (self.xq, Format::E4m3, lin.x),
            (out, Ty::Bf16, false),
            // Transformer Engine's forward products accumulate fast (`_2X_ACC_FPROP`
            // off); its gradients do not.
            true,
        )
    }

    /// Backward of `forward`: `dx [rows, i] = dy [rows, o] · W` (bf16) and `gw [o, i] +=
    /// dyᵀ · x` (fp32), from the kept 16-bit input `x`; `gw =` instead where `accumulate`
    /// is false (the step's first gradient of the weight, so `gw` needs no zeroing).
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        gpu: &Gpu,
        lin: &Linear,
        dx: Buf,
        gw: Buf,
        dy: Buf,
        x: Buf,
        rows: usize,
        accumulate: bool,
    ) -> Result<(), RunError> {
        let (i, o) = (lin.i, lin.o);
        self.cast(gpu, lin.g, Format::E5m2, dy, (rows, o), self.gq, self.gqt)?;
        // dx (i × rows) = Wt8ᵀ (i × o) · dY8 (o × rows).
        self.tn(
            gpu,
            (i, rows, o),
            (lin.wt8, Format::E4m3, lin.w),
            (self.gq, Format::E5m2, lin.g),
            (dx, Ty::Bf16, false),
            false,
        )?;
        self.cast(gpu, lin.x, Format::E4m3, x, (rows, i), Buf::NULL, self.xq)?;
        // dW (i × o, i.e. [o, i] row-major) += Xt8ᵀ (i × rows) · dYt8 (rows × o).
        self.tn(
            gpu,
            (i, o, rows),
            (self.xq, Format::E4m3, lin.x),
            (self.gqt, Format::E5m2, lin.g),
            (gw, Ty::F32, accumulate),
            false,
        )
    }

    /// One "TN" product in cuBLASLt's column-major terms: `D (m × n) = Aᵀ·B (+ D)`, A
    /// stored `k × m` and B `k × n` (both K-major), each operand with its format and the
    /// tensor whose inverse scale cuBLASLt multiplies by; D with its type and whether it
    /// accumulates.
    #[allow(clippy::too_many_arguments)]
    fn tn(
        &self,
        gpu: &Gpu,
        mnk: (usize, usize, usize),
        (a, fa, ta): (Buf, Format, usize),
        (b, fb, tb): (Buf, Format, usize),
        (d, td, accumulate): (Buf, Ty, bool),
        fast: bool,
    ) -> Result<(), RunError> {
        let operand = |buf, f: Format, t| Operand {
            buf,
            ty: f.ty(),
            scale: self.meta_of(t),
        };
        self.lt.matmul(
            gpu,
            &Product {
                mnk,
                trans_a: true,
                a: operand(a, fa, ta),
                b: operand(b, fb, tb),
                d: (d, td),
                accumulate,
                fast,
                epilogue: Epilogue::None,
                bias: (Buf::NULL, td),
                aux: Buf::NULL,
            },
        )
    }

    /// Every tensor's (inverse scale, scale, amax since the last roll), for tests.
    pub fn scales(&self, gpu: &Gpu) -> Result<Vec<[f32; 3]>, RunError> {
        let v: Vec<f32> = gpu.download(self.meta, self.tensors * META)?;
        Ok(v.chunks(META).map(|m| [m[0], m[1], m[2]]).collect())
    }
}

/// Casts `x [rows, cols]` with the scale in `meta` (a tensor's state) into `q [rows, cols]`
/// and `qt [cols, rows]` (either NULL), folding its amax into the state's; `fresh`: first
/// set the scale from the amax (no history yet). What training runs, and what the GPU test
/// checks bit by bit against [`quantize`].
pub fn cast(
    gpu: &Gpu,
    meta: Buf,
    format: Format,
    x: Buf,
    (rows, cols): (usize, usize),
    (q, qt): (Buf, Buf),
    fresh: bool,
) -> Result<(), RunError> {
    // A block casts four 64 × 64 tiles down a column of them (`FP8_TILES` in fp8.cu).
    let grid = (cols.div_ceil(64) as u32, rows.div_ceil(4 * 64) as u32);
    let e5m2 = (format == Format::E5m2) as i32;
    let args = |q: Buf, qt: Buf| {
        [
            Arg::P(q),
            Arg::P(qt),
            Arg::P(x),
            Arg::L(rows as i64),
            Arg::I(cols as i32),
            Arg::P(meta),
            Arg::I(e5m2),
        ]
    };
    if fresh {
        gpu.launch("fp8_cast_t", grid, 256, &args(Buf::NULL, Buf::NULL))?;
        gpu.launch("fp8_scale_now", (1, 1), 1, &[Arg::P(meta)])?;
    }
    gpu.launch("fp8_cast_t", grid, 256, &args(q, qt))
}

/// A fresh tensor state for [`cast`] (scale 1, no amax) in `format`, as floats to upload.
pub fn fresh_meta(format: Format) -> [f32; META] {
    [1.0, 1.0, 0.0, format.max()]
}

/// `x` rounded to `format` (nearest, ties to even, saturating at the largest finite value;
/// NaN stays NaN): the value the cast kernel's hardware conversion gives, for the host-side
/// checks.
pub fn quantize(format: Format, x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let (mant_bits, min_exp) = match format {
        Format::E4m3 => (3, -6),
        Format::E5m2 => (2, -14),
    };
    let a = x.abs();
    if a == 0.0 {
        return x;
    }
    // The spacing of representable values at a's binade (subnormals share the smallest).
    let e = (a.log2().floor() as i32).max(min_exp);
    let step = 2f64.powi(e - mant_bits);
    let q = (a as f64 / step).round_ties_even() * step;
    let q = (q as f32).min(format.max());
    q.copysign(x)
}

/// Whether `gpu` multiplies in fp8.
pub fn gpu_runs_fp8(gpu: &Gpu) -> Result<bool, RunError> {
    let (major, minor) = compute_capability(gpu)?;
    Ok(device_runs_fp8(major, minor))
}

/// Whether this GPU and its libraries run fp8 products: an fp8-capable GPU, and cuBLASLt
/// beside cuBLAS. Checked before any fp8 buffer is allocated.
pub fn check_device(gpu: &Gpu) -> Result<(), RunError> {
    let (major, minor) = compute_capability(gpu)?;
    if !device_runs_fp8(major, minor) {
        return Err(RunError::Plan(format!(
            "precision = fp8 needs a GPU that multiplies in fp8 (compute capability 8.9 \
             or later: Ada, Hopper); {} is {major}.{minor}: use precision = bf16",
            gpu.name
        )));
    }
    if !super::lt::present() {
        return Err(RunError::Cuda(
            "precision = fp8 runs its products through cuBLASLt, and libcublasLt (beside \
             libcublas) was not found: add its folder to LD_LIBRARY_PATH"
                .into(),
        ));
    }
    Ok(())
}

fn compute_capability(gpu: &Gpu) -> Result<(i32, i32), RunError> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let err = super::cuda::err;
    Ok((
        gpu.ctx
            .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(err)?,
        gpu.ctx
            .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            .map_err(err)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_is_the_format_max_over_the_largest_amax_of_the_history() {
        let h = [0.5f32, 2.0, 1.0, 0.0];
        assert_eq!(scale_from_history(Format::E4m3, &h, 1.0), 224.0);
        assert_eq!(scale_from_history(Format::E5m2, &h, 1.0), 28672.0);
        // The largest of the window, not the latest: a spike holds the scale down until
        // it leaves the window.
        let later = [0.5f32, 0.25, 0.125];
        assert_eq!(scale_from_history(Format::E4m3, &later, 1.0), 896.0);
    }

    #[test]
    fn an_empty_or_overflowed_history_keeps_the_scale() {
        assert_eq!(scale_from_history(Format::E4m3, &[0.0; 8], 7.0), 7.0);
        assert_eq!(scale_from_history(Format::E4m3, &[], 7.0), 7.0);
        assert_eq!(
            scale_from_history(Format::E4m3, &[1.0, f32::INFINITY], 7.0),
            7.0
        );
        // NaN is ignored by the max (as fmaxf on the device).
        assert_eq!(
            scale_from_history(Format::E4m3, &[f32::NAN, 2.0], 7.0),
            224.0
        );
        // A tiny amax does not make an infinite scale.
        assert!(scale_from_history(Format::E5m2, &[1e-40], 1.0).is_finite());
    }

    #[test]
    fn quantize_rounds_to_the_formats_grid_and_saturates() {
        // E4M3: 3 mantissa bits, so 1.0625 (halfway between 1 and 1.125) rounds to even (1).
        assert_eq!(quantize(Format::E4m3, 1.0625), 1.0);
        assert_eq!(quantize(Format::E4m3, 1.07), 1.125);
        assert_eq!(quantize(Format::E4m3, 448.0), 448.0);
        assert_eq!(quantize(Format::E4m3, 1e6), 448.0);
        assert_eq!(quantize(Format::E4m3, -1e6), -448.0);
        // Smallest subnormal 2^-9.
        assert_eq!(quantize(Format::E4m3, 2f32.powi(-9)), 2f32.powi(-9));
        assert_eq!(quantize(Format::E4m3, 2f32.powi(-11)), 0.0);
        // E5M2: 2 mantissa bits, max 57344, smallest subnormal 2^-16.
        assert_eq!(quantize(Format::E5m2, 1.1), 1.0);
        assert_eq!(quantize(Format::E5m2, 1.2), 1.25);
        assert_eq!(quantize(Format::E5m2, 1e9), 57344.0);
        assert_eq!(quantize(Format::E5m2, 2f32.powi(-16)), 2f32.powi(-16));
        // Relative error at most half a step: 2^-4 (E4M3), 2^-3 (E5M2) for normal values.
        for k in 0..1000 {
            let x = 0.02 + k as f32 * 0.731;
            if x > 448.0 {
                break;
            }
            assert!(
                (quantize(Format::E4m3, x) - x).abs() <= x / 16.0 + 1e-6,
                "{x}"
            );
            assert!(
                (quantize(Format::E5m2, x) - x).abs() <= x / 8.0 + 1e-6,
                "{x}"
            );
        }
    }

    #[test]
    fn only_whole_multiples_of_16_run_in_fp8() {
        assert!(supports(2048, 4096, 12288));
        assert!(supports(16, 768, 2304));
        assert!(!supports(2048, 4096, 12290));
        assert!(!supports(100, 768, 768));
        assert!(!supports(0, 768, 768));
    }

    #[test]
    fn fp8_needs_ada_or_hopper() {
        assert!(device_runs_fp8(9, 0));
        assert!(device_runs_fp8(8, 9));
        assert!(device_runs_fp8(10, 0));
        assert!(!device_runs_fp8(8, 6));
        assert!(!device_runs_fp8(8, 0));
    }
}
