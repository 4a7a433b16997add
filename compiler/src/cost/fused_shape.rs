//! How the frameworks' fused attention kernels' rates move with the sequence length and the
//! head size: the shape factor a published rate is read through.
//!
//! The catalog's rates for FlashAttention-2 and cuDNN's fused attention (and the fallback
//! fraction of the product rate where a GPU has none) are each one point: FlashAttention-3's
//! paper measured them at 16k tokens and heads of 128, Dao 2023 quoted FlashAttention-2's
//! best case. Plans train at 2k to 8k tokens and at heads of 64 as often: a causal kernel at
//! 2k spends a larger share of its tiles on the diagonal and has fewer tiles a head to hide
//! its prologue and epilogue, and a head of 64 halves the work a loaded tile carries. On the
//! lent H200 at 2048 tokens and heads of 128, FlashAttention-2's backward ran at 0.72 of its
//! 16k rate, cuDNN's forward at 0.79.
//!
//! The factor is measured, not fitted: `runtime/tests/gpu/sdpa_rates.py` on the lent H200
//! (torch 2.11, PyTorch SDPA's FlashAttention-2 and cuDNN backends, causal, bf16, 32768
//! tokens a call, 4096 wide; 2026-11-28, `docs/measurements.md`), each rate over the same
//! kernel's rate at 16384 tokens and heads of 128. Between the measured points it is read
//! linearly in log2 of the length and linearly in the head size; outside them it keeps the
//! nearest point's value (heads wider than 128 and lengths over 16k are not measured). The
//! same factor is taken to hold on the other GPUs the catalog prices these kernels on (the
//! H100's published rates are the H200's within 1 %: the same GH100 die), and for the
//! fallback of GPUs with no published rate (FlashAttention-2 on Ampere), which is an
//! assumption, not a measurement.
//!
//! Under context parallelism each rank's calls cover s/cp queries; the factor is read at the
//! plan's whole sequence, which for the ring's blocks of s/cp overstates the rate by at most
//! 4 % over the measured lengths of 4k and more.

use super::time::FusedKernel;

/// Measured sequence lengths, in tokens.
const SEQ: [f64; 6] = [512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];

/// One kernel's measured rates, TFLOP/s (causal half counted; backward as 2.5 times the
/// forward's FLOPs): forward and backward, at heads of 64 and 128, over [`SEQ`].
struct Rates {
    forward_64: [f64; 6],
    forward_128: [f64; 6],
    backward_64: [f64; 6],
    backward_128: [f64; 6],
}

/// PyTorch SDPA's FlashAttention-2 backend on the lent H200 (2026-11-28).
const FLASH2: Rates = Rates {
    forward_64: [157.3, 224.6, 268.5, 287.9, 304.5, 306.9],
    forward_128: [180.4, 259.7, 300.9, 327.0, 336.1, 335.7],
    backward_64: [108.6, 156.5, 202.0, 238.5, 255.8, 275.5],
    backward_128: [123.6, 177.2, 227.7, 266.6, 294.1, 315.1],
};

/// PyTorch SDPA's cuDNN backend on the lent H200 (2026-11-28).
const CUDNN: Rates = Rates {
    forward_64: [237.3, 319.2, 389.5, 429.4, 457.7, 455.2],
    forward_128: [334.6, 454.8, 525.5, 595.6, 618.9, 662.5],
    backward_64: [175.2, 259.2, 333.5, 393.4, 408.2, 434.2],
    backward_128: [220.1, 333.8, 433.8, 508.7, 490.5, 506.1],
};

/// The rate of `kernel`'s forward (or `backward`) at `seq` tokens and heads of `head_dim`,
/// over its rate at 16k tokens and heads of 128 (where the catalog's figures were measured).
/// planc's own kernels are measured by `planc calibrate` at their shapes: 1.
pub fn factor(kernel: FusedKernel, backward: bool, seq: f64, head_dim: f64) -> f64 {
    let rates = match kernel {
        FusedKernel::Planc => return 1.0,
        // The Triton kernel's own rates are FlashAttention-2's slowed (`cost::time`).
        FusedKernel::FlashAttention2 | FusedKernel::Triton => &FLASH2,
        FusedKernel::Cudnn => &CUDNN,
    };
    let (narrow, wide) = if backward {
        (&rates.backward_64, &rates.backward_128)
    } else {
        (&rates.forward_64, &rates.forward_128)
    };
    let w = ((head_dim - 64.0) / 64.0).clamp(0.0, 1.0);
    let at = |s: f64| (1.0 - w) * along(narrow, s) + w * along(wide, s);
    at(seq) / wide[SEQ.len() - 1]
}

/// `row` read at `seq`, linearly in log2 of the length, clamped to the measured lengths.
fn along(row: &[f64; 6], seq: f64) -> f64 {
    let x = seq.max(SEQ[0]).min(SEQ[SEQ.len() - 1]).log2();
    for i in 1..SEQ.len() {
        let (x0, x1) = (SEQ[i - 1].log2(), SEQ[i].log2());
        if x <= x1 {
            let t = (x - x0) / (x1 - x0);
            return row[i - 1] + t * (row[i] - row[i - 1]);
        }
    }
    row[SEQ.len() - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_point_reads_one_and_shorter_sequences_run_slower() {
        for k in [FusedKernel::FlashAttention2, FusedKernel::Cudnn] {
            for backward in [false, true] {
                assert!((factor(k, backward, 16384.0, 128.0) - 1.0).abs() < 1e-12);
                let short = factor(k, backward, 2048.0, 128.0);
                assert!(short < 0.9, "{k:?} backward={backward}: {short}");
                // Narrower heads carry less work a tile.
                assert!(factor(k, backward, 2048.0, 64.0) < short);
            }
        }
        assert_eq!(factor(FusedKernel::Planc, true, 512.0, 64.0), 1.0);
    }

    #[test]
    fn between_points_the_factor_is_read_in_log_length_and_clamped_outside() {
        let f = |s| factor(FusedKernel::FlashAttention2, true, s, 128.0);
        // Halfway in log2 between 2048 and 4096.
        let mid = f(2048.0 * 2f64.sqrt());
        assert!((mid - (227.7 + 266.6) / 2.0 / 315.1).abs() < 1e-9, "{mid}");
        assert_eq!(f(100.0), f(512.0));
        assert_eq!(f(131072.0), 1.0);
        // Heads of 96: halfway between the two measured widths.
        let h96 = factor(FusedKernel::Cudnn, false, 4096.0, 96.0);
        assert!((h96 - (429.4 + 595.6) / 2.0 / 662.5).abs() < 1e-9, "{h96}");
    }
}
