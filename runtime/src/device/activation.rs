//! The MLP's activation (GELU, SwiGLU), forward and backward. One place launches them, so
//! training and `planc calibrate`'s activation probe run the same kernels with the same
//! grids.

use planc_compiler::plan::Mlp;

use super::cuda::{Arg, Buf, Gpu};
use crate::error::RunError;

type Res = Result<(), RunError>;

/// The activation `mlp` over `rows` rows of the MLP's width `width` (F, this rank's share
/// under tensor parallelism). Its input is the first MLP product's output: F a row for
/// GELU, the gate then the up projection (2F) for SwiGLU.
#[derive(Clone, Copy, Debug)]
pub struct Activation {
    pub mlp: Mlp,
    pub rows: usize,
    pub width: usize,
}

impl Activation {
    /// out[rows, F] = the activation of `h` plus `bias` (a row of F; null for none). Only
    /// GELU takes the bias here: SwiGLU's 2F-wide bias is added to `h` before.
    pub fn forward(&self, gpu: &Gpu, out: Buf, h: Buf, bias: Buf) -> Res {
        let n = self.rows * self.width;
        match self.mlp {
            Mlp::Gelu => gpu.launch_v(
                "gelu_fwd",
                n,
                &[
                    Arg::P(out),
                    Arg::P(h),
                    Arg::P(bias),
                    Arg::I(self.width as i32),
                    Arg::L(n as i64),
                ],
            ),
            Mlp::Swiglu => gpu.launch_v(
                "swiglu_fwd",
                n,
                &[
                    Arg::P(out),
                    Arg::P(h),
                    Arg::L(self.rows as i64),
                    Arg::I(self.width as i32),
                ],
            ),
        }
    }

    /// dh = the gradient of `h` (written, not added) for `dout`, the output's; `bias` as
    /// [`Activation::forward`] took it.
    pub fn backward(&self, gpu: &Gpu, dh: Buf, h: Buf, bias: Buf, dout: Buf) -> Res {
        let n = self.rows * self.width;
        match self.mlp {
            Mlp::Gelu => gpu.launch_v(
                "gelu_bwd",
                n,
                &[
                    Arg::P(dh),
                    Arg::P(h),
                    Arg::P(bias),
                    Arg::I(self.width as i32),
                    Arg::P(dout),
                    Arg::L(n as i64),
                ],
            ),
            Mlp::Swiglu => gpu.launch_v(
                "swiglu_bwd",
                n,
                &[
                    Arg::P(dh),
                    Arg::P(h),
                    Arg::P(dout),
                    Arg::L(self.rows as i64),
                    Arg::I(self.width as i32),
                ],
            ),
        }
    }
}
