//! How fast PyTorch's own elementwise kernels move their bytes, beside a copy.
//!
//! `cost::eager` prices each kernel of an unfused path as a memory-bound pass of the bytes
//! it reads and writes, at the rate a copy of those bytes reaches (the profile's memory
//! curve, else `memory_efficiency`). Most of PyTorch's elementwise kernels do reach it: a
//! same-type operation over contiguous tensors runs TensorIterator's vectorized loop. Some
//! do not, because TensorIterator sends them down a slower path, and a layer of
//! `transformers` launches many of them:
//!
//! - a cast to a wider type (bf16 to fp32), and an operation whose output type is wider than
//!   an input (a 16-bit tensor added to an fp32 one under autocast);
//! - an operand broadcast along rows (`x * rsqrt(variance)`, the variance one value a row);
//! - a vector broadcast over the leading dimensions (a norm's weight over the tokens, rope's
//!   `cos`/`sin` over the batch and heads);
//! - a concatenation (rope's `rotate_half`);
//! - `log_softmax` over rows as long as a vocabulary, forward and backward;
//! - `layer_norm`'s own kernels, forward and backward;
//! - the standard attention's mask added over the heads, its softmax in 16 bits, and the
//!   softmax's backward (at the scores' rows of 1024; other row lengths are not measured).
//!
//! The shares below are measured: `runtime/tests/gpu/eager_rates.py` on the lent H200 (torch
//! 2.11, 2026-11-29; docs/measurements.md, thirteenth session) timed each kernel at the
//! shapes of the one-GPU comparison plans beside a same-type copy of the same bytes. A cast
//! down (fp32 to bf16), `pow`, `silu`, `tanh`, a scalar multiply, a same-type add or product
//! and a row mean ran at 0.89-1.05 of the copy: those stay plain passes.

/// A slower path of PyTorch's elementwise kernels, with the share of the copy rate it
/// reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlowPath {
    /// A cast to a wider type, or an operation that promotes its output: bf16 to fp32 of
    /// 4 × 2048 × 2048 elements 0.524, the logits' `float()` (4 × 2048 × 128256) 0.496.
    Widening,
    /// An operand of one value a row: fp32 `[t, h] × [t, 1]` 0.640.
    RowBroadcast,
    /// A vector over the leading dimensions: `[h] × [t, h]` in bf16 0.427, rope's
    /// `[b, heads, s, d] × [1, 1, s, d]` 0.425.
    VectorBroadcast,
    /// `torch.cat` of two halves along the last dimension (rope's `rotate_half`): 0.279.
    Concat,
    /// `log_softmax` over rows of a vocabulary, fp32, forward: 0.494 (8192 × 128256).
    SoftmaxRows,
    /// Its backward (`_log_softmax_backward_data`, the same rows): 0.702.
    SoftmaxRowsBackward,
    /// `native_layer_norm` (fp32, 16 × 1024 rows of 768): 0.564.
    LayerNorm,
    /// `native_layer_norm_backward` with the weight's gradient (the same rows): 0.521.
    LayerNormBackward,
    /// An operand broadcast over the heads: the attention scores plus a mask of one
    /// `[s, s]` a sample, bf16 (GPT-2, 16 × 12 × 1024²): 0.376.
    HeadsBroadcast,
    /// The same with an fp32 mask, so fp32 out (autocast): 0.287.
    WideningHeadsBroadcast,
    /// `softmax` over the scores' rows (1024) in bf16: 0.636.
    Softmax16,
    /// Its backward (`_softmax_backward_data`, bf16): 0.435.
    Softmax16Backward,
    /// The fp32 softmax's backward over the same rows: 0.512 (its forward runs at a copy's
    /// rate, 0.961).
    Softmax32Backward,
}

impl SlowPath {
    /// The share of the copy rate this path reaches (measured; module doc).
    pub fn share(self) -> f64 {
        match self {
            SlowPath::Widening => 0.51,
            SlowPath::RowBroadcast => 0.64,
            SlowPath::VectorBroadcast => 0.43,
            SlowPath::Concat => 0.28,
            SlowPath::SoftmaxRows => 0.49,
            SlowPath::SoftmaxRowsBackward => 0.70,
            SlowPath::LayerNorm => 0.56,
            SlowPath::LayerNormBackward => 0.52,
            SlowPath::HeadsBroadcast => 0.38,
            SlowPath::WideningHeadsBroadcast => 0.29,
            SlowPath::Softmax16 => 0.64,
            SlowPath::Softmax16Backward => 0.44,
            SlowPath::Softmax32Backward => 0.51,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slow_path_is_slower_than_a_copy() {
        for p in [
            SlowPath::Widening,
            SlowPath::RowBroadcast,
            SlowPath::VectorBroadcast,
            SlowPath::Concat,
            SlowPath::SoftmaxRows,
            SlowPath::SoftmaxRowsBackward,
            SlowPath::LayerNorm,
            SlowPath::LayerNormBackward,
            SlowPath::HeadsBroadcast,
            SlowPath::WideningHeadsBroadcast,
            SlowPath::Softmax16,
            SlowPath::Softmax16Backward,
            SlowPath::Softmax32Backward,
        ] {
            assert!(p.share() > 0.0 && p.share() < 1.0, "{p:?}");
        }
    }
}
