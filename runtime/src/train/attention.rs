//! Fused causal attention (`train.attention = flash`): the launches of the flash kernels of
//! `kernels.cu`. Forward writes the output and each row's logsumexp; backward recomputes the
//! probabilities tile by tile, so no T×T tensor exists in either pass.
//!
//! bf16 and fp16 with head sizes 32, 64 or 128 and sequences a multiple of the 64-row tile
//! run the tensor-core kernels; anything else (fp32 above all, which must match a float32
//! reference closely) runs the scalar kernels, one warp a row.

use super::cuda::{Arg, Buf, Gpu};
use crate::RunError;

type Res = Result<(), RunError>;

/// Rows of a tensor-core tile (queries and keys alike) and threads of its block.
const TILE: usize = 64;
const TC_THREADS: u32 = 128;
/// The scalar kernels hold a row in registers, 8 elements a lane.
pub const MAX_HEAD_DIM: usize = 256;

/// The attention's shape: q, k, v and o are [b, h, t, d].
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    pub b: usize,
    pub h: usize,
    pub t: usize,
    pub d: usize,
    /// Bytes of the storage type (4: fp32).
    pub xsz: usize,
}

impl Heads {
    /// Whether the tensor-core kernels take this shape.
    pub fn tensor_cores(&self) -> bool {
        self.xsz == 2 && matches!(self.d, 32 | 64 | 128) && self.t.is_multiple_of(TILE)
    }

    fn rows(&self) -> usize {
        self.b * self.h * self.t
    }

    fn scale(&self) -> f32 {
        1.0 / (self.d as f32).sqrt()
    }

    /// Dynamic shared memory of the tensor-core kernels: `tiles` tiles of TILE rows of
    /// d + 8 elements (padding against bank conflicts), plus `floats` fp32 values.
    fn smem(&self, tiles: usize, floats: usize) -> u32 {
        (tiles * TILE * (self.d + 8) * self.xsz + floats * 4) as u32
    }
}

/// o = softmax(QKᵀ/√d, causal)·V and lse = each row's logsumexp ([b·h·t] fp32).
pub fn forward(
    gpu: &Gpu,
    hd: Heads,
    tc: bool,
    o: Buf,
    lse: Buf,
    (q, k, v): (Buf, Buf, Buf),
) -> Res {
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
                Arg::I(hd.d as i32),
                Arg::F(hd.scale()),
            ],
        )
    }
}

/// The buffers of attention's backward pass.
#[derive(Clone, Copy, Debug)]
pub struct Grads {
    pub dq: Buf,
    pub dk: Buf,
    pub dv: Buf,
    /// fp32 [b·h·t]: D_i = Σ O·dO, filled here.
    pub dd: Buf,
}

/// dq, dk, dv from dO [b, h, t, d]. `a` and `da` are the output and its gradient with the
/// heads merged ([b, t, h·d]), which is how the layer keeps them; D_i comes from those.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    gpu: &Gpu,
    hd: Heads,
    tc: bool,
    g: Grads,
    (q, k, v): (Buf, Buf, Buf),
    dout: Buf,
    lse: Buf,
    (a, da): (Buf, Buf),
) -> Res {
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
    if tc {
        let tiles = (hd.t / TILE) as u32;
        let bh = (hd.b * hd.h) as u32;
        gpu.launch_smem(
            &format!("flash_bwd_dkdv_tc{}", hd.d),
            (tiles, bh),
            TC_THREADS,
            hd.smem(6, 4 * TILE),
            &[
                Arg::P(g.dk),
                Arg::P(g.dv),
                Arg::P(q),
                Arg::P(k),
                Arg::P(v),
                Arg::P(dout),
                Arg::P(lse),
                Arg::P(g.dd),
                Arg::I(hd.t as i32),
                Arg::F(hd.scale()),
            ],
        )?;
        gpu.launch_smem(
            &format!("flash_bwd_dq_tc{}", hd.d),
            (tiles, bh),
            TC_THREADS,
            hd.smem(6, 0),
            &[
                Arg::P(g.dq),
                Arg::P(q),
                Arg::P(k),
                Arg::P(v),
                Arg::P(dout),
                Arg::P(lse),
                Arg::P(g.dd),
                Arg::I(hd.t as i32),
                Arg::F(hd.scale()),
            ],
        )
    } else {
        let grid = (hd.rows().div_ceil(8) as u32, 1);
        let common = |first: &[Arg]| -> Vec<Arg> {
            let mut args = first.to_vec();
            args.extend_from_slice(&[
                Arg::P(q),
                Arg::P(k),
                Arg::P(v),
                Arg::P(dout),
                Arg::P(lse),
                Arg::P(g.dd),
                Arg::I((hd.b * hd.h) as i32),
                Arg::I(hd.t as i32),
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
