//! The optimizer's step over this rank's shard of the flat buffers (AdamW or SGD, one launch
//! with the weight-decay mask), and the gradient's sums of squares for the norm.

use super::{Engine, Res};
use crate::device::cuda::{Arg, Buf};
use crate::error::RunError;
use crate::train::model;
use planc_compiler::cost::buffers::launch::REP_BLOCKS;
use planc_compiler::plan::Optimizer;

/// Blocks of the gradient buffer's sum of squares (the gradient norm).
const SUMSQ_BLOCKS: usize = 1024;

impl Engine {
    /// One optimizer update over this rank's shard `[lo, hi)` of the flat buffers (all of
    /// them without ZeRO); `gscale` multiplies the gradients first (clipping, loss-scale
    /// removal); `t` counts updates from 1. Adam's moments are indexed from `lo`.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &self,
        lr: f32,
        wd: f32,
        (b1, b2, eps): (f32, f32, f32),
        t: u64,
        gscale: f32,
        (lo, hi): (usize, usize),
    ) -> Res {
        let bc1 = 1.0 - (b1 as f64).powi(t as i32);
        let bc2 = 1.0 - (b2 as f64).powi(t as i32);
        let wx = if self.xsz == 4 {
            Buf::NULL
        } else {
            self.wx.at(lo, self.xsz)
        };
        let n = hi - lo;
        if n == 0 {
            return Ok(());
        }
        let (w, g) = (self.w32.at(lo, 4), self.grad.at(lo, 4));
        if self.shape.optimizer == Optimizer::Sgd {
            self.gpu.launch_n(
                "sgd_flat",
                n,
                &[
                    Arg::P(w),
                    Arg::P(wx),
                    Arg::P(g),
                    Arg::L(n as i64),
                    Arg::L(lo as i64),
                    Arg::P(self.decay),
                    Arg::F(lr),
                    Arg::F(wd),
                    Arg::F(gscale),
                ],
            )
        } else {
            // Four elements a thread; 16-byte accesses where the range starts on a multiple
            // of four (the buffers themselves are 256-byte aligned).
            self.gpu.launch_n(
                "adamw_flat",
                n.div_ceil(4),
                &[
                    Arg::P(w),
                    Arg::P(wx),
                    Arg::P(g),
                    Arg::P(self.m),
                    Arg::P(self.v),
                    Arg::L(n as i64),
                    Arg::L(lo as i64),
                    Arg::P(self.decay),
                    Arg::F(lr),
                    Arg::F(b1),
                    Arg::F(b2),
                    Arg::F(eps),
                    Arg::F(wd),
                    Arg::F(bc1 as f32),
                    Arg::F(bc2.sqrt() as f32),
                    Arg::F(gscale),
                    Arg::I((lo % 4 == 0) as i32),
                ],
            )
        }
    }

    /// Σ g² over the tensors in `[lo, hi)` that every tensor-parallel rank holds whole
    /// (one f32 at `out`): the gradient norm counts them once, not once per rank.
    pub fn whole_sumsq(&self, range: (usize, usize), out: Buf) -> Result<(), RunError> {
        self.sumsq_of(range, out, |name| !model::tp_split(name))
    }

    /// Σ g² over the tensors named `keep` within `[lo, hi)` (one f32 at `out`).
    pub fn sumsq_of(
        &self,
        (lo, hi): (usize, usize),
        out: Buf,
        keep: impl Fn(&str) -> bool,
    ) -> Result<(), RunError> {
        let mut k = 0usize;
        for p in self.params.list.iter().filter(|p| keep(&p.name)) {
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
