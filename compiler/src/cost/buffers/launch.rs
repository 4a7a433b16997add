//! The figures of planc's runtime that its buffers' sizes follow: the smallest allocation,
//! the libraries' workspaces, the kernels' grids that leave partial sums, fp8's scale
//! state, what the kernels refuse. The runtime reads them from here, so the memory plan and
//! the kernels it sizes cannot drift apart.

/// The fewest bytes a buffer takes (the runtime's allocator rounds up to it).
pub const MIN_ALLOC: usize = 256;

/// cuBLAS's workspace, set once for every product (recorded graphs must not allocate).
pub const BLAS_WORKSPACE: usize = 32 << 20;

/// Rows a chunk of the scalar row reductions takes (a block and a partial each).
pub const CHUNK_ROWS: usize = 256;

/// Chunks of rows the vectorised norm backward splits `rows` into (a block each, with a
/// partial weight gradient each): enough blocks to fill the GPU, partials of at most 16 MiB.
pub fn norm_chunks(rows: usize, c: usize) -> usize {
    rows.min(1024)
        .min(((2usize << 20) / c.max(1)).max(1))
        .max(1)
}

/// Floats of partials the norm backward of `rows` rows of `c` needs (weight and bias).
pub fn norm_partials(rows: usize, c: usize) -> usize {
    2 * c * norm_chunks(rows, c).max(rows.div_ceil(CHUNK_ROWS))
}

/// Blocks of a sum of squares taken tensor by tensor (the whole tensors' share of the
/// gradient norm): each tensor's partials sit side by side in the partials' buffer.
pub const REP_BLOCKS: usize = 32;

/// Floats a step reduces across ranks (loss, gradient norm, stop flags).
pub const SCALARS: usize = 64;

/// The largest head the fused (flash) attention kernels take.
pub const MAX_HEAD_DIM: usize = 256;

/// Why cuDNN's fused attention does not take `h` query heads over `g` key/value heads of
/// size `d` on a GPU of compute capability `cc` (major, minor), before asking cuDNN; None
/// where it may. The runtime refuses by it (`device::attention_cudnn`), and the memory plan
/// counts cuDNN's workspace only where it does not (`cudnn_attention_bytes`).
pub fn cudnn_attention_refusal(h: usize, g: usize, d: usize, cc: (i32, i32)) -> Option<String> {
    if cc.0 < 8 {
        return Some(format!(
            "it needs compute capability 8.0 or newer, this GPU has {}.{}",
            cc.0, cc.1
        ));
    }
    if !d.is_multiple_of(8) || d > 256 {
        return Some(format!(
            "it takes head sizes that are multiples of 8 up to 256, not {d}"
        ));
    }
    if g < 1 || !h.is_multiple_of(g) {
        return Some(format!(
            "{h} query heads do not share {g} key/value heads evenly"
        ));
    }
    None
}

/// The workspace cuDNN's fused attention holds for `b` sequences of `h` query heads, `t`
/// tokens and head size `d`, stored in `xsz`-byte elements, under planc's default
/// deterministic backward (`runtime::device::attention_cudnn`): that backward materialises
/// dP, the probabilities' gradient [b, h, t, t] in the storage type, and accumulates dQ
/// [b, h, t, d] in fp32. Measured: 4.13 GiB reported by cuDNN for 1 × 32 × 8192 × 128 in
/// bf16 on an H200 (2026-11-28), 4.43e9 bytes against the 4.43e9 this counts.
pub fn cudnn_attention_workspace(b: usize, h: usize, t: usize, d: usize, xsz: usize) -> usize {
    b * h * t * t * xsz + b * h * t * d * 4
}

/// cuBLASLt's workspace for the fp8 products (its guidance for Hopper: 32 MiB).
pub const FP8_WORKSPACE: usize = 32 << 20;
/// Amaxes an fp8 tensor's scale looks back over (Transformer Engine's `DelayedScaling`
/// default).
pub const AMAX_HISTORY: usize = 1024;
/// Floats of state an fp8 tensor: inverse scale, scale, amax, the format's largest value.
pub const FP8_META: usize = 4;

/// Whether a product of `rows` tokens from `i` to `o` features can run in fp8: cuBLASLt's
/// fp8 products need every dimension a multiple of 16 (16-byte aligned fp8 rows), and the
/// cast kernel 8-element chunks.
pub fn fp8_supports(rows: usize, i: usize, o: usize) -> bool {
    [rows, i, o].iter().all(|d| *d > 0 && d.is_multiple_of(16))
}
