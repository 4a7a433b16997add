//! The optimizer's step over this rank's shard of the flat buffers (AdamW or SGD, one launch
//! with the weight-decay mask), and the gradient's sums of squares for the norm.

use super::{Engine, Res};
use crate::device::cuda::{Arg, Buf};
use crate::device::optimizer::{self, AdamW, Range};
use crate::error::RunError;
use crate::train::model::{self, Tensor};
use planc_compiler::cost::buffers::launch::REP_BLOCKS;
use planc_compiler::plan::Optimizer;

/// Blocks of the gradient buffer's sum of squares (the gradient norm).
const SUMSQ_BLOCKS: usize = 1024;

impl Engine {
    /// One optimizer update over this rank's shard `[lo, hi)` of the flat buffers (all of
    /// them without ZeRO); `gscale` multiplies the gradients first (clipping, loss-scale
    /// removal); `t` counts updates from 1. Adam's moments are indexed from `lo`. Where
    /// `nonfinite` is not null the update sets that f32 to 1 on a gradient that is not
    /// finite (a step that took no norm).
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &self,
        lr: f32,
        wd: f32,
        (b1, b2, eps): (f32, f32, f32),
        t: u64,
        gscale: f32,
        (lo, hi): (usize, usize),
        nonfinite: Buf,
    ) -> Res {
        let n = hi - lo;
        if n == 0 {
            return Ok(());
        }
        let r = Range {
            w: self.w32.at(lo, 4),
            wx: if self.xsz == 4 {
                Buf::NULL
            } else {
                self.wx.at(lo, self.xsz)
            },
            g: self.grad.at(lo, 4),
            n,
            lo,
            decay: self.decay,
            nonfinite,
        };
        if self.shape.optimizer == Optimizer::Sgd {
            optimizer::sgd(&self.gpu, r, lr, wd, gscale)
        } else {
            let h = AdamW::at_step(lr, (b1, b2, eps), wd, t, gscale);
            optimizer::adamw(&self.gpu, r, self.m, self.v, &h)
        }
    }

    /// Σ g² over the tensors in `[lo, hi)` that every tensor-parallel rank holds whole
    /// (one f32 at `out`): the gradient norm counts them once, not once per rank.
    pub fn whole_sumsq(&self, range: (usize, usize), out: Buf) -> Result<(), RunError> {
        self.sumsq_of(range, out, |t| !model::tp_split(t))
    }

    /// Σ g² over the tensors `keep` takes within `[lo, hi)` (one f32 at `out`).
    pub fn sumsq_of(
        &self,
        (lo, hi): (usize, usize),
        out: Buf,
        keep: impl Fn(Tensor) -> bool,
    ) -> Result<(), RunError> {
        let mut k = 0usize;
        for p in self.params.list.iter().filter(|p| keep(p.tensor)) {
            let (a, b) = (p.offset.max(lo), (p.offset + p.numel()).min(hi));
            if a >= b {
                continue;
            }
            self.gpu.launch(
                "sumsq_partial",
                (REP_BLOCKS as u32, 1),
                256,
                &[
                    Arg::P(self.s.partials.at(k * REP_BLOCKS, 4)),
                    Arg::P(self.grad.at(a, 4)),
                    Arg::L((b - a) as i64),
                ],
            )?;
            k += 1;
        }
        if k == 0 {
            return self.gpu.zero(Buf { bytes: 4, ..out });
        }
        self.gpu.launch(
            "sum_partial",
            (1, 1),
            1024,
            &[
                Arg::P(out),
                Arg::P(self.s.partials),
                Arg::L((k * REP_BLOCKS) as i64),
            ],
        )
    }

    /// Σ g² over `[lo, hi)` of the gradient buffer, on the device (one f32 at `out`).
    pub fn grad_sumsq(&self, (lo, hi): (usize, usize), out: Buf) -> Result<(), RunError> {
        let blocks = SUMSQ_BLOCKS;
        self.gpu.launch(
            "sumsq_partial",
            (blocks as u32, 1),
            256,
            &[
                Arg::P(self.s.partials),
                Arg::P(self.grad.at(lo, 4)),
                Arg::L((hi - lo) as i64),
            ],
        )?;
        self.gpu.launch(
            "sum_partial",
            (1, 1),
            1024,
            &[Arg::P(out), Arg::P(self.s.partials), Arg::L(blocks as i64)],
        )
    }
}
