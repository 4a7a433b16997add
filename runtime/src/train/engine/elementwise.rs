//! A layer's memory-bound kernels as the engine launches them on this rank's rows: the
//! norms and their gradients, bias additions and bias gradients (partial sums per chunk of
//! rows), residual additions, and the MLP's activation.

use super::{Engine, Res};
use crate::device::activation::Activation;
use crate::device::cuda::{Arg, Buf};
use crate::device::rows::{self, NormGrads, NormSaved, Norms};
use crate::train::model::{LayerTensor, Tensor};
use planc_compiler::plan::{Mlp, Norm};

impl Engine {
    pub(super) fn norms(&self) -> Norms {
        let d = &self.shape.dims;
        Norms {
            rows: self.lrows(),
            width: d.hidden,
            xsz: self.xsz,
            eps: d.norm_eps,
            rms: d.norm == Norm::Rmsnorm,
        }
    }

    /// Normalizes this rank's rows (`lrows`).
    pub(super) fn norm_fwd(&self, out: Buf, mean: Buf, rstd: Buf, inp: Buf, w: Buf, b: Buf) -> Res {
        self.norms().forward(&self.gpu, out, mean, rstd, inp, w, b)
    }

    /// dinp += norm backward; dw, db += the weight gradients.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn norm_bwd(
        &self,
        dinp: Buf,
        dout: Buf,
        inp: Buf,
        w: Buf,
        mean: Buf,
        rstd: Buf,
        dw: Buf,
        db: Buf,
    ) -> Res {
        let grads = NormGrads { dinp, dw, db };
        let saved = NormSaved { inp, mean, rstd };
        self.norms()
            .backward(&self.gpu, self.s.partials, grads, dout, w, saved)
    }

    /// db[cols] += Σ_rows x[rows, cols]
    pub(super) fn bias_grad(&self, db: Buf, x: Buf, rows: usize, cols: usize) -> Res {
        if db == Buf::NULL {
            return Ok(());
        }
        rows::bias_grad(&self.gpu, (db, x, self.s.partials), rows, cols)
    }

    pub(super) fn add_bias(&self, x: Buf, b: Buf, rows: usize, cols: usize) -> Res {
        if b == Buf::NULL {
            return Ok(());
        }
        self.gpu.launch_v(
            "add_bias",
            rows * cols,
            &[
                Arg::P(x),
                Arg::P(b),
                Arg::L(rows as i64),
                Arg::I(cols as i32),
            ],
        )
    }

    /// `out[rows, cols] = a + b + bias` (bias may be null): the residual stream after a
    /// row-parallel product, its bias added in the same pass.
    pub(super) fn add_residual(
        &self,
        out: Buf,
        a: Buf,
        b: Buf,
        bias: Buf,
        rows: usize,
        cols: usize,
    ) -> Res {
        if !cols.is_multiple_of(16 / self.xsz) {
            self.add_bias(b, bias, rows, cols)?;
            return self.add(out, a, b, rows * cols);
        }
        self.gpu.launch_v(
            "add_bias_residual",
            rows * cols,
            &[
                Arg::P(out),
                Arg::P(a),
                Arg::P(b),
                Arg::P(bias),
                Arg::L(rows as i64),
                Arg::I(cols as i32),
            ],
        )
    }

    pub(super) fn add(&self, out: Buf, a: Buf, b: Buf, n: usize) -> Res {
        self.gpu.launch_v(
            "add_x",
            n,
            &[Arg::P(out), Arg::P(a), Arg::P(b), Arg::L(n as i64)],
        )
    }

    /// The first MLP product's bias where the activation adds it (GELU), else null (no
    /// bias, or SwiGLU, whose bias is added to the product's output in a pass before).
    pub(super) fn activation_bias(&self, l: usize) -> Buf {
        if self.shape.dims.mlp != Mlp::Gelu {
            return Buf::NULL;
        }
        self.wx_of(Tensor::Layer(l, LayerTensor::FcB))
    }

    /// The MLP's activation over a micro-batch's tokens (gathered under sequence
    /// parallelism) and this rank's share of F.
    pub(super) fn activation(&self) -> Activation {
        Activation {
            mlp: self.shape.dims.mlp,
            rows: self.rows(),
            width: self.shape.dims.ffn,
        }
    }
}
