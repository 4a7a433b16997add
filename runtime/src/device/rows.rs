//! Reductions over rows: the norms (forward and backward, vectorised where a row is whole
//! 16-byte packs), the bias gradients' column sums, the sums of per-chunk partials they and
//! the norms leave, and the loss over a row of logits. One place launches them, so
//! training, `planc calibrate`'s norm probe and the kernel tests run the same kernels with
//! the same grids.

use super::cuda::{Arg, Buf, Gpu};
use crate::error::RunError;

type Res = Result<(), RunError>;

/// Rows a chunk of the scalar row reductions takes, and the partials the norm backward
/// leaves: the memory plan sizes the partials' buffer from them
/// (`planc_compiler::cost::buffers::launch`).
pub use planc_compiler::cost::buffers::launch::{norm_chunks, norm_partials, CHUNK_ROWS};

/// How the vectorised norm kernels take a row of `c` elements of `xsz` bytes: packs of 16
/// bytes a thread (1, 2 or 4, the kernel's suffix) and threads a row (≤ 256, whole warps).
/// None where the row is not whole packs or needs more than 4 a thread (c > 1024 packs):
/// the scalar kernels take those.
pub fn norm_packs(c: usize, xsz: usize) -> Option<(usize, u32)> {
    let vec = 16 / xsz;
    if !c.is_multiple_of(vec) {
        return None;
    }
    let packs = c / vec;
    let np = [1usize, 2, 4]
        .into_iter()
        .find(|np| packs.div_ceil(*np) <= 256)?;
    let threads = packs.div_ceil(np).div_ceil(32) * 32;
    Some((np, threads as u32))
}

/// Packs a lane of the one-warp-a-row norm forward (1, 2, 4, 8 or 16: the kernel's
/// suffix) for a row of `c` elements of `xsz` bytes; None where the row is not whole
/// 16-byte packs or needs more than 16 a lane (the block-a-row kernel takes those, and
/// every backward).
pub fn norm_warp_packs(c: usize, xsz: usize) -> Option<usize> {
    let vec = 16 / xsz;
    if !c.is_multiple_of(vec) {
        return None;
    }
    let packs = c / vec;
    [1usize, 2, 4, 8, 16]
        .into_iter()
        .find(|np| np * 32 >= packs)
}

/// Threads a block of the one-warp-a-row forward: four rows at a time.
const WARP_BLOCK: u32 = 128;

/// The norm of `rows` rows of `width` elements of `xsz` bytes (LayerNorm, or RMSNorm).
#[derive(Clone, Copy, Debug)]
pub struct Norms {
    pub rows: usize,
    pub width: usize,
    pub xsz: usize,
    pub eps: f32,
    pub rms: bool,
}

/// What the norm's forward kept for its backward: the input and each row's statistics.
#[derive(Clone, Copy, Debug)]
pub struct NormSaved {
    pub inp: Buf,
    pub mean: Buf,
    pub rstd: Buf,
}

/// Where the norm's backward adds its gradients (`db` may be `Buf::NULL`: no bias).
#[derive(Clone, Copy, Debug)]
pub struct NormGrads {
    pub dinp: Buf,
    pub dw: Buf,
    pub db: Buf,
}

impl Norms {
    /// out = norm(inp) · w (+ b), and each row's mean and 1/σ for the backward.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        gpu: &Gpu,
        out: Buf,
        mean: Buf,
        rstd: Buf,
        inp: Buf,
        w: Buf,
        b: Buf,
    ) -> Res {
        let tensors = [out, mean, rstd, inp, w, b].map(Arg::P);
        let (c, eps, rms) = (
            Arg::I(self.width as i32),
            Arg::F(self.eps),
            Arg::I(i32::from(self.rms)),
        );
        if let Some(np) = norm_warp_packs(self.width, self.xsz) {
            // A block holds several rows, so the kernel is told where they end.
            let rows = Arg::L(self.rows as i64);
            let args: Vec<Arg> = tensors.into_iter().chain([rows, c, eps, rms]).collect();
            let rows_a_block = (WARP_BLOCK / 32) as usize;
            let grid = (self.rows.div_ceil(rows_a_block) as u32, 1);
            return gpu.launch(&format!("norm_fwd_w{np}"), grid, WARP_BLOCK, &args);
        }
        let args: Vec<Arg> = tensors.into_iter().chain([c, eps, rms]).collect();
        let grid = (self.rows as u32, 1);
        match norm_packs(self.width, self.xsz) {
            Some((np, threads)) => gpu.launch(&format!("norm_fwd_v{np}"), grid, threads, &args),
            None => gpu.launch("norm_fwd", grid, 256, &args),
        }
    }

    /// grads.dinp += the input gradient for `dout`; grads.dw, grads.db += the weight
    /// gradients, through `part` (at least [`norm_partials`] floats).
    pub fn backward(
        &self,
        gpu: &Gpu,
        part: Buf,
        grads: NormGrads,
        dout: Buf,
        w: Buf,
        saved: NormSaved,
    ) -> Res {
        let (rows, c, rms) = (self.rows, self.width, i32::from(self.rms));
        let NormGrads { dinp, dw, db } = grads;
        let NormSaved { inp, mean, rstd } = saved;
        if let Some((np, threads)) = norm_packs(c, self.xsz) {
            let chunks = norm_chunks(rows, c);
            gpu.launch(
                &format!("norm_bwd_v{np}"),
                (chunks as u32, 1),
                threads,
                &[
                    Arg::P(dinp),
                    Arg::P(part),
                    Arg::P(dout),
                    Arg::P(inp),
                    Arg::P(w),
                    Arg::P(mean),
                    Arg::P(rstd),
                    Arg::L(rows as i64),
                    Arg::I(c as i32),
                    Arg::I(rows.div_ceil(chunks) as i32),
                    Arg::I(rms),
                    Arg::I(i32::from(db != Buf::NULL)),
                ],
            )?;
            // The kernel's grid is `chunks` blocks, but the last may hold no rows when
            // chunks does not divide them: its partials are zeros, summed all the same.
            sum_partials_many(gpu, dw, part, chunks, c)?;
            if db != Buf::NULL {
                sum_partials_many(gpu, db, part.at(chunks * c, 4), chunks, c)?;
            }
            return Ok(());
        }
        gpu.launch(
            "norm_bwd_input",
            (rows as u32, 1),
            256,
            &[
                Arg::P(dinp),
                Arg::P(dout),
                Arg::P(inp),
                Arg::P(w),
                Arg::P(mean),
                Arg::P(rstd),
                Arg::I(c as i32),
                Arg::I(rms),
            ],
        )?;
        let tensors = [part, dout, inp, mean, rstd].map(Arg::P);
        let chunks = by_chunks(gpu, ("norm_bwd_params", 256), &tensors, rows, c)?;
        sum_partials(gpu, dw, part, chunks, c)?;
        if db != Buf::NULL {
            sum_partials(gpu, db, part.at(chunks * c, 4), chunks, c)?;
        }
        Ok(())
    }
}

/// out[cols] += Σ over `chunks` of part[chunk][cols], in chunk order.
pub fn sum_partials(gpu: &Gpu, out: Buf, part: Buf, chunks: usize, cols: usize) -> Res {
    gpu.launch(
        "sum_partials",
        (cols.div_ceil(256) as u32, 1),
        256,
        &[
            Arg::P(out),
            Arg::P(part),
            Arg::I(chunks as i32),
            Arg::I(cols as i32),
        ],
    )
}

/// The kernel of the bias gradients' partial column sums over rows of `cols` in
/// `xsz`-byte storage, and the columns a block of 256 threads takes: 32 packs of columns by 8
/// lanes of rows where a row is whole 16-byte packs (`colsum_partial_v`), else a column a
/// thread.
pub fn colsum_kernel(cols: usize, xsz: usize) -> (&'static str, usize) {
    let vec = 16 / xsz;
    if cols.is_multiple_of(vec) {
        ("colsum_partial_v", 32 * vec)
    } else {
        ("colsum_partial", 256)
    }
}

/// db[cols] += Σ over `rows` rows of x[rows, cols]: partial sums per chunk of `CHUNK_ROWS`
/// rows into `part`, then added in chunk order (a bias's gradient, the same whatever the
/// scheduling).
pub fn bias_grad(gpu: &Gpu, (db, x, part): (Buf, Buf, Buf), rows: usize, cols: usize) -> Res {
    let tensors = [part, x].map(Arg::P);
    let chunks = by_chunks(gpu, colsum_kernel(cols, gpu.xsz), &tensors, rows, cols)?;
    sum_partials(gpu, db, part, chunks, cols)
}

/// Launches `kernel`, which takes `tensors` then rows, columns and rows a chunk, over chunks
/// of `CHUNK_ROWS` rows (the grid's y) and `cols_a_block` columns a block of 256 threads
/// (its x); the number of chunks, whose partials it leaves.
fn by_chunks(
    gpu: &Gpu,
    (kernel, cols_a_block): (&str, usize),
    tensors: &[Arg],
    rows: usize,
    cols: usize,
) -> Result<usize, RunError> {
    let chunks = rows.div_ceil(CHUNK_ROWS);
    let shape = [
        Arg::L(rows as i64),
        Arg::I(cols as i32),
        Arg::I(CHUNK_ROWS as i32),
    ];
    let args: Vec<Arg> = tensors.iter().copied().chain(shape).collect();
    let grid = (cols.div_ceil(cols_a_block) as u32, chunks as u32);
    gpu.launch(kernel, grid, 256, &args)?;
    Ok(chunks)
}

/// `sum_partials` for many chunks over few columns (a block per 32 columns).
fn sum_partials_many(gpu: &Gpu, out: Buf, part: Buf, chunks: usize, cols: usize) -> Res {
    gpu.launch(
        "sum_partials_2d",
        (cols.div_ceil(32) as u32, 1),
        512,
        &[
            Arg::P(out),
            Arg::P(part),
            Arg::I(chunks as i32),
            Arg::I(cols as i32),
        ],
    )
}

/// Threads of the loss kernel's block, a row a block: with 1024 a block filled an SM and
/// serialised a row's two passes; 256 ran Llama 3.2 1B's loss 1.98 -> 1.85 ms and GPT-2's
/// 1.59 -> 1.45 under ncu on an H200 (2026-11-28, docs/measurements.md).
const CE_THREADS: u32 = 256;

/// Each of `rows` rows of `logits` (`vocab` wide) to its token's loss at `losses`, and the
/// row overwritten by its gradient (softmax − onehot of `targets`) times `dscale`.
pub fn cross_entropy(
    gpu: &Gpu,
    (logits, losses, targets): (Buf, Buf, Buf),
    rows: usize,
    vocab: usize,
    dscale: f32,
) -> Res {
    gpu.launch(
        "cross_entropy",
        (rows as u32, 1),
        CE_THREADS,
        &[
            Arg::P(logits),
            Arg::P(losses),
            Arg::P(targets),
            Arg::I(vocab as i32),
            Arg::F(dscale),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::{colsum_kernel, norm_chunks, norm_packs, norm_partials, norm_warp_packs};

    #[test]
    fn bias_gradients_take_32_packs_of_columns_a_block_where_rows_are_whole_packs() {
        // bf16 packs of 8: GPT-2's 768 and 3072 columns are whole packs, 100 is not; fp32
        // packs of 4: 100 is.
        assert_eq!(colsum_kernel(768, 2), ("colsum_partial_v", 256));
        assert_eq!(colsum_kernel(3072, 2), ("colsum_partial_v", 256));
        assert_eq!(colsum_kernel(100, 2), ("colsum_partial", 256));
        assert_eq!(colsum_kernel(100, 4), ("colsum_partial_v", 128));
    }

    #[test]
    fn rows_up_to_16_packs_a_lane_go_one_warp_a_row() {
        // bf16: GPT-2's 768 is 96 packs (4 a lane, the last partly), Llama 3.2 1B's 2048 is
        // 256 (8), 4096 is 512 (16); 8192 is too wide, 100 is not whole packs.
        assert_eq!(norm_warp_packs(768, 2), Some(4));
        assert_eq!(norm_warp_packs(2048, 2), Some(8));
        assert_eq!(norm_warp_packs(4096, 2), Some(16));
        assert_eq!(norm_warp_packs(8192, 2), None);
        assert_eq!(norm_warp_packs(100, 2), None);
    }

    #[test]
    fn norm_rows_split_into_packs_a_thread_and_whole_warps() {
        // bf16: 8 elements a pack. GPT-2's 768 is 96 packs, one a thread in 3 warps.
        assert_eq!(norm_packs(768, 2), Some((1, 96)));
        assert_eq!(norm_packs(2048, 2), Some((1, 256)));
        assert_eq!(norm_packs(4096, 2), Some((2, 256)));
        assert_eq!(norm_packs(8192, 2), Some((4, 256)));
        // Too wide for 4 packs a thread, or not whole packs: the scalar kernels.
        assert_eq!(norm_packs(16384, 2), None);
        assert_eq!(norm_packs(100, 2), None);
        // fp32: 4 elements a pack; 50 packs take 2 warps, the second partly.
        assert_eq!(norm_packs(200, 4), Some((1, 64)));
    }

    #[test]
    fn norm_backward_chunks_fill_the_gpu_with_bounded_partials() {
        assert_eq!(norm_chunks(16384, 768), 1024);
        assert_eq!(norm_chunks(8192, 8192), 256);
        assert_eq!(norm_chunks(10, 768), 10);
        for (rows, c) in [(16384, 768), (8192, 8192), (4096, 16384), (3, 4096)] {
            assert!(2 * norm_chunks(rows, c) * c * 4 <= 16 << 20);
        }
    }

    #[test]
    fn partials_hold_either_backward() {
        // Vectorised: 1024 chunks of GPT-2's rows; scalar: a chunk per 256 rows.
        assert_eq!(norm_partials(16384, 768), 2 * 768 * 1024);
        assert_eq!(norm_partials(1 << 20, 100), 2 * 100 * 4096);
    }
}
