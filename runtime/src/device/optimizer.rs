//! The optimizer's update kernels (`adamw_flat`, `sgd_flat` in kernels.cu) behind typed
//! launchers: the engine's step, `planc calibrate`'s optimizer probe and the kernel tests
//! launch the same update with the same arguments, so none of them can fall behind the
//! kernel's parameter list.

use super::cuda::{Arg, Buf, Gpu};
use crate::error::RunError;

/// One flat range of the optimizer's buffers: `n` elements starting at element `lo` of the
/// whole buffer (`lo` picks the weight-decay mask's blocks and the vectorised path).
#[derive(Clone, Copy, Debug)]
pub struct Range {
    /// fp32 master weights, updated in place.
    pub w: Buf,
    /// The compute copy written after the update (16-bit training), or `Buf::NULL`.
    pub wx: Buf,
    /// fp32 gradients, read.
    pub g: Buf,
    pub n: usize,
    pub lo: usize,
    /// One byte per 64-element block of the whole buffer: 1 where weight decay applies.
    pub decay: Buf,
    /// An f32 the update sets to 1 where a gradient is not finite, or `Buf::NULL`: a step
    /// that took no gradient norm (`grad_clip = 0`) finds a diverged run here.
    pub nonfinite: Buf,
}

/// AdamW's hyper-parameters for one update; `bc1` and `bc2` are the bias corrections
/// 1 − β^t; `gscale` multiplies each gradient first (clipping, loss-scale removal).
#[derive(Clone, Copy, Debug)]
pub struct AdamW {
    pub lr: f32,
    pub b1: f32,
    pub b2: f32,
    pub eps: f32,
    pub wd: f32,
    pub bc1: f64,
    pub bc2: f64,
    pub gscale: f32,
}

impl AdamW {
    /// The bias corrections of update `t` (counted from 1).
    pub fn at_step(lr: f32, (b1, b2, eps): (f32, f32, f32), wd: f32, t: u64, gscale: f32) -> AdamW {
        AdamW {
            lr,
            b1,
            b2,
            eps,
            wd,
            bc1: 1.0 - (b1 as f64).powi(t as i32),
            bc2: 1.0 - (b2 as f64).powi(t as i32),
            gscale,
        }
    }
}

/// AdamW over `r`, with its moments `m` and `v` indexed from the range's start: four
/// elements a thread, as 16-byte accesses where `lo` is a multiple of four.
pub fn adamw(gpu: &Gpu, r: Range, m: Buf, v: Buf, h: &AdamW) -> Result<(), RunError> {
    gpu.launch_n(
        "adamw_flat",
        r.n.div_ceil(4),
        &[
            Arg::P(r.w),
            Arg::P(r.wx),
            Arg::P(r.g),
            Arg::P(m),
            Arg::P(v),
            Arg::L(r.n as i64),
            Arg::L(r.lo as i64),
            Arg::P(r.decay),
            Arg::F(h.lr),
            Arg::F(h.b1),
            Arg::F(h.b2),
            Arg::F(h.eps),
            Arg::F(h.wd),
            Arg::F(h.bc1 as f32),
            Arg::F(h.bc2.sqrt() as f32),
            Arg::F(h.gscale),
            Arg::I(r.lo.is_multiple_of(4) as i32),
            Arg::P(r.nonfinite),
        ],
    )
}

/// SGD with decoupled weight decay over `r`.
pub fn sgd(gpu: &Gpu, r: Range, lr: f32, wd: f32, gscale: f32) -> Result<(), RunError> {
    gpu.launch_n(
        "sgd_flat",
        r.n,
        &[
            Arg::P(r.w),
            Arg::P(r.wx),
            Arg::P(r.g),
            Arg::L(r.n as i64),
            Arg::L(r.lo as i64),
            Arg::P(r.decay),
            Arg::F(lr),
            Arg::F(wd),
            Arg::F(gscale),
            Arg::P(r.nonfinite),
        ],
    )
}
