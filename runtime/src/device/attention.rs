//! Fused causal attention (`train.attention = flash`): the launches of the flash kernels of
//! `kernels.cu`. Forward writes the output and each row's logsumexp; backward recomputes the
//! probabilities tile by tile, so no T×T tensor exists in either pass.
//!
//! q, k and v are [b, h, t, d]; the output and its gradient are in the layout the projection
//! after attention uses, [b, t, h·d], so no kernel permutes them; dq, dk and dv go where
//! [`Grads`] says, which with as many key/value heads as query heads and no rope can be the
//! merged qkv gradient itself.
//!
//! bf16 and fp16 with head sizes 32, 64 or 128 and sequences a multiple of the 64-row tile
//! run the tensor-core kernels; anything else (fp32 above all, which must match a float32
//! reference closely) runs the scalar kernels, one warp a row. Where cuDNN's fused
//! attention was planned for the shape (`attention_cudnn`), it runs instead ([`Kernels`]).

use super::attention_cudnn::Sdpa;
use super::cuda::{Arg, Buf, Gpu};
use super::heads::TILE;
pub use super::heads::{Grads, Heads};
use crate::error::RunError;

/// Which kernels run the attention: planc's scalar or tensor-core ones, or cuDNN's plans.
/// A bool converts to planc's (`true`: tensor cores), as `Heads::tensor_cores` answers.
#[derive(Clone, Copy)]
pub enum Kernels<'a> {
    Scalar,
    TensorCores,
    Cudnn(&'a Sdpa),
}

impl From<bool> for Kernels<'_> {
    fn from(tc: bool) -> Self {
        if tc {
            Kernels::TensorCores
        } else {
            Kernels::Scalar
        }
    }
}

type Res = Result<(), RunError>;

/// Threads of a tensor-core tile's block.
const TC_THREADS: u32 = 128;
/// The scalar kernels hold a row in registers, 8 elements a lane: up to this head size
/// (the memory plan refuses larger ones under flash attention).
pub use planc_compiler::cost::buffers::launch::MAX_HEAD_DIM;

/// o = softmax(QKᵀ/√d, causal)·V, into `o` [b, t, h·d], and lse = each row's logsumexp
/// ([b·h·t] fp32).
pub fn forward<'a>(
    gpu: &Gpu,
    hd: Heads,
    kernels: impl Into<Kernels<'a>>,
    o: Buf,
    lse: Buf,
    (q, k, v): (Buf, Buf, Buf),
) -> Res {
    let tc = match kernels.into() {
        Kernels::Cudnn(sdpa) => return sdpa.forward(hd, o, lse, (q, k, v)),
        k => matches!(k, Kernels::TensorCores),
    };
    if tc {
        let tiles = hd.t / TILE;
        gpu.launch_smem(
            &format!("flash_fwd_tc{}", hd.d),
            (tiles as u32, (hd.b * hd.h) as u32),
            TC_THREADS,
            hd.smem(5, 0),
            &[
                Arg::P(o),
                Arg::P(lse),
                Arg::P(q),
                Arg::P(k),
                Arg::P(v),
                Arg::I(hd.t as i32),
                Arg::I(hd.h as i32),
                Arg::F(hd.scale()),
            ],
        )
    } else {
        gpu.launch(
            "flash_fwd",
            (hd.rows().div_ceil(8) as u32, 1),
            256,
            &[
                Arg::P(o),
                Arg::P(lse),
                Arg::P(q),
                Arg::P(k),
                Arg::P(v),
                Arg::I((hd.b * hd.h) as i32),
                Arg::I(hd.t as i32),
                Arg::I(hd.h as i32),
                Arg::I(hd.d as i32),
                Arg::F(hd.scale()),
            ],
        )
    }
}

/// dq, dk, dv from the output `a` and its gradient `da`, both [b, t, h·d].
#[allow(clippy::too_many_arguments)]
pub fn backward<'a>(
    gpu: &Gpu,
    hd: Heads,
    kernels: impl Into<Kernels<'a>>,
    g: Grads,
    (q, k, v): (Buf, Buf, Buf),
    lse: Buf,
    (a, da): (Buf, Buf),
) -> Res {
    let tc = match kernels.into() {
        Kernels::Cudnn(sdpa) => return sdpa.backward(gpu, hd, &g, (q, k, v), lse, (a, da)),
        k => matches!(k, Kernels::TensorCores),
    };
    if tc {
        let tiles = (hd.t / TILE) as u32;
        let bh = (hd.b * hd.h) as u32;
        // dq first: it computes D_i on the way, which dk/dv read.
        gpu.launch_smem(
            &format!("flash_bwd_dq_tc{}", hd.d),
            (tiles, bh),
            TC_THREADS,
            hd.smem(6, 0),
            &[
                Arg::P(g.dq),
                Arg::L(g.bs),
                Arg::I(g.hs),
                Arg::I(g.rs),
                Arg::P(q),
                Arg::P(k),
                Arg::P(v),
                Arg::P(da),
                Arg::P(a),
                Arg::P(lse),
                Arg::P(g.dd),
                Arg::I(hd.t as i32),
                Arg::I(hd.h as i32),
                Arg::F(hd.scale()),
            ],
        )?;
        gpu.launch_smem(
            &format!("flash_bwd_dkdv_tc{}", hd.d),
            (tiles, bh),
            TC_THREADS,
            hd.smem(6, 4 * TILE),
            &[
                Arg::P(g.dk),
                Arg::P(g.dv),
                Arg::L(g.bs),
                Arg::I(g.hs),
                Arg::I(g.rs),
                Arg::P(q),
                Arg::P(k),
                Arg::P(v),
                Arg::P(da),
                Arg::P(lse),
                Arg::P(g.dd),
                Arg::I(hd.t as i32),
                Arg::I(hd.h as i32),
                Arg::F(hd.scale()),
            ],
        )
    } else {
        gpu.launch(
            "flash_bwd_dot",
            (hd.rows().div_ceil(8) as u32, 1),
            256,
            &[
                Arg::P(g.dd),
                Arg::P(a),
                Arg::P(da),
                Arg::I(hd.b as i32),
                Arg::I(hd.t as i32),
                Arg::I(hd.h as i32),
                Arg::I(hd.d as i32),
            ],
        )?;
        let grid = (hd.rows().div_ceil(8) as u32, 1);
        let common = |first: &[Arg]| -> Vec<Arg> {
            let mut args = first.to_vec();
            args.extend_from_slice(&[
                Arg::L(g.bs),
                Arg::I(g.hs),
                Arg::I(g.rs),
                Arg::P(q),
                Arg::P(k),
                Arg::P(v),
                Arg::P(da),
                Arg::P(lse),
                Arg::P(g.dd),
                Arg::I((hd.b * hd.h) as i32),
                Arg::I(hd.t as i32),
                Arg::I(hd.h as i32),
                Arg::I(hd.d as i32),
                Arg::F(hd.scale()),
            ]);
            args
        };
        gpu.launch(
            "flash_bwd_dkdv",
            grid,
            256,
            &common(&[Arg::P(g.dk), Arg::P(g.dv)]),
        )?;
        gpu.launch("flash_bwd_dq", grid, 256, &common(&[Arg::P(g.dq)]))
    }
}
