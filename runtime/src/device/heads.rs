//! The attention's shapes, shared by planc's fused attention (`attention`) and cuDNN's
//! (`attention_cudnn`): the heads of q, k, v and o, where backward writes dq, dk and dv, and
//! which kernel splits qkv into heads (and merges their gradients back).

use super::cuda::Buf;

/// Rows of a tensor-core tile (queries and keys alike).
pub(super) const TILE: usize = 64;

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
    /// Whether the tensor-core kernels take this shape on a GPU of compute capability `sm`
    /// (major × 10 + minor, [`super::cuda::Gpu::sm`]): they need Ampere (sm 80) or later,
    /// and before it are built as empty entry points.
    pub fn tensor_cores(&self, sm: u32) -> bool {
        sm >= 80 && self.xsz == 2 && matches!(self.d, 32 | 64 | 128) && self.t.is_multiple_of(TILE)
    }

    pub(super) fn rows(&self) -> usize {
        self.b * self.h * self.t
    }

    pub(super) fn scale(&self) -> f32 {
        1.0 / (self.d as f32).sqrt()
    }

    /// Dynamic shared memory of the tensor-core kernels: `tiles` tiles of TILE rows of
    /// d + 8 elements (padding against bank conflicts), plus `floats` fp32 values.
    pub(super) fn smem(&self, tiles: usize, floats: usize) -> u32 {
        (tiles * TILE * (self.d + 8) * self.xsz + floats * 4) as u32
    }
}

/// Where backward writes dq, dk and dv: row `t` of head `h` of sequence `b` at
/// `b·bs + h·hs + t·rs` elements from each pointer.
#[derive(Clone, Copy, Debug)]
pub struct Grads {
    pub dq: Buf,
    pub dk: Buf,
    pub dv: Buf,
    pub(super) bs: i64,
    pub(super) hs: i32,
    pub(super) rs: i32,
    /// fp32 [b·h·t]: D_i = Σ O·dO, filled by backward.
    pub dd: Buf,
}

impl Grads {
    /// Where row `t` of head `h` of sequence `b` sits: (batch, head, row) strides in elements.
    pub fn strides(&self) -> (i64, i64, i64) {
        (self.bs, self.hs as i64, self.rs as i64)
    }

    /// Three [b, h, t, d] buffers.
    pub fn heads(hd: Heads, (dq, dk, dv): (Buf, Buf, Buf), dd: Buf) -> Grads {
        Grads {
            dq,
            dk,
            dv,
            bs: (hd.h * hd.t * hd.d) as i64,
            hs: (hd.t * hd.d) as i32,
            rs: hd.d as i32,
            dd,
        }
    }

    /// The merged gradient of the qkv projection, [b, t, 3·h·d] (q, k, v heads in turn):
    /// only with as many key/value heads as query heads and no rope.
    pub fn qkv(hd: Heads, dqkv: Buf, dd: Buf) -> Grads {
        let w = hd.h * hd.d;
        Grads {
            dq: dqkv,
            dk: dqkv.at(w, hd.xsz),
            dv: dqkv.at(2 * w, hd.xsz),
            bs: (hd.t * 3 * w) as i64,
            hs: hd.d as i32,
            rs: (3 * w) as i32,
            dd,
        }
    }
}

/// Splitting qkv into heads, or merging the heads' gradients back into qkv's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkvPass {
    Split,
    Merge,
}

/// The kernel of `pass` over `elems` elements of heads of `head_dim` in `xsz`-byte storage,
/// and its thread count: a rope pair of 16-byte packs a thread (the `_v` kernels: a pack of a
/// head's first half and its partner in the second) where a head's halves are whole packs,
/// else an element a thread. The engine and the kernel tests launch by it.
pub fn qkv_kernel(
    pass: QkvPass,
    head_dim: usize,
    xsz: usize,
    elems: usize,
) -> (&'static str, usize) {
    let (element, pair) = match pass {
        QkvPass::Split => ("qkv_split", "qkv_split_v"),
        QkvPass::Merge => ("qkv_merge_grad", "qkv_merge_grad_v"),
    };
    let vec = 16 / xsz;
    if head_dim.is_multiple_of(2 * vec) {
        (pair, elems / (2 * vec))
    } else {
        (element, elems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qkv_takes_a_rope_pair_of_packs_a_thread_where_a_heads_halves_are_whole_packs() {
        use QkvPass::{Merge, Split};
        // bf16 packs of 8: heads of 64 are four pairs a head; 36 is not whole pairs. fp32
        // packs of 4: 36 is not whole pairs of them either, 40 is.
        for (pass, d, xsz, elems, want) in [
            (Split, 64, 2, 4096, ("qkv_split_v", 256)),
            (Merge, 64, 2, 4096, ("qkv_merge_grad_v", 256)),
            (Split, 36, 2, 4096, ("qkv_split", 4096)),
            (Merge, 36, 4, 4096, ("qkv_merge_grad", 4096)),
            (Merge, 40, 4, 4000, ("qkv_merge_grad_v", 500)),
        ] {
            assert_eq!(
                qkv_kernel(pass, d, xsz, elems),
                want,
                "{pass:?} d {d} xsz {xsz}"
            );
        }
    }

    #[test]
    fn the_tensor_core_kernels_take_16_bit_heads_of_32_to_128_on_ampere_and_later() {
        let hd = |d, t, xsz| Heads {
            b: 1,
            h: 2,
            t,
            d,
            xsz,
        };
        assert!(hd(64, 1024, 2).tensor_cores(80));
        assert!(hd(128, 2048, 2).tensor_cores(90));
        // Turing (T4): no cp.async, no 16-bit m16n8k16; the scalar kernels run.
        assert!(!hd(64, 1024, 2).tensor_cores(75));
        assert!(!hd(64, 1024, 4).tensor_cores(90));
        assert!(!hd(48, 1024, 2).tensor_cores(90));
        assert!(!hd(64, 1000, 2).tensor_cores(90));
    }
}
