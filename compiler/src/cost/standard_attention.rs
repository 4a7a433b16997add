//! The standard (unfused) attention core as the kernels that run it execute it: the
//! batched products over the `batch_heads × seq × seq_full` scores and the memory passes
//! over those scores between them, forward and backward.
//!
//! The backward is not twice the forward: it runs four products where the forward ran two
//! (one writing an s×s tensor, three reading one, against one and one), and its softmax
//! reads two s×s tensors where the forward's read one. Each pass is listed here so that
//! `cost::time::Device` prices it as what it is: a product at cuBLAS's efficiency for its
//! shape (no faster than its operands' bytes through memory), a pass at the memory-bound
//! curve. The kernels are those of whoever runs the plan:
//!
//! - planc's runtime (`job.framework = planc`; `runtime/src/train/engine/attention.rs`,
//!   `attention_core_bwd`, and `kernels.cu`'s `softmax_causal_fwd`/`_bwd`): cuBLAS's
//!   strided-batched products over the whole s×s square, and a warp-a-row softmax that
//!   reads a row's causal part twice (its maximum and sum, then the output) and writes the
//!   whole row, zeros above the diagonal; its backward reads the probabilities and their
//!   gradient twice (Σ P·dP, then the output) and writes the whole row. It keeps the
//!   probabilities only without recomputation; otherwise its backward first recomputes the
//!   scores and the softmax (whatever else the recomputation redoes). No dropout.
//! - every other framework: Megatron-LM's local path (`--attention-backend unfused`,
//!   `DotProductAttention` with `FusedScaleMaskSoftmax`): `baddbmm` for the scaled scores,
//!   with masked-softmax fusion on (its default) the causal softmax of
//!   `scaled_upper_triang_masked_softmax_cuda`, which holds a row in registers, reads its
//!   causal part once and writes the whole row (backward: reads the gradient's and the
//!   probabilities' causal parts, writes the whole row), then PyTorch's dropout (reads the
//!   probabilities, writes them and a byte-a-score mask; backward reads the gradient and the
//!   mask, writes the gradient). Past the fused kernel's longest row (2048 in Megatron-LM
//!   of 2022, 16384 since) Megatron-LM falls back to PyTorch's unfused scale, mask and
//!   softmax, which is not modelled here; nor is transformers' eager attention (the
//!   generated `train.py` under `torch` and `deepspeed`), which runs the scale, the mask
//!   and an fp32 softmax as passes of their own.

use super::torch_rates::SlowPath;

/// One standard attention core on one GPU for one micro-batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Core {
    /// Micro-batch × this GPU's heads: the products' batch.
    pub batch_heads: f64,
    /// Query rows of a head on this GPU.
    pub seq: f64,
    /// Keys a query sees (the whole sequence).
    pub seq_full: f64,
    pub head_dim: f64,
    /// Bytes of one score (the storage type: attention runs 16-bit under fp8 too).
    pub element: f64,
    /// Whether dropout runs on the probabilities (`train.dropout > 0`).
    pub dropout: bool,
    /// Whether planc's runtime runs it (`job.framework = planc`), else Megatron-LM's path.
    pub planc: bool,
    /// Whether its backward recomputes the scores and the softmax first: planc's runtime
    /// keeps the probabilities only without recomputation.
    pub recomputes_probs: bool,
}

/// One kernel of the core.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pass {
    /// `batch` products `m×k · k×n` in one strided-batched call, writing or reading the
    /// score square (`square` bytes: its output or one of its operands).
    Product {
        batch: f64,
        m: f64,
        n: f64,
        k: f64,
        square: f64,
    },
    /// A memory-bound kernel moving `bytes` (read plus written).
    Memory { bytes: f64 },
    /// A memory-bound PyTorch kernel on a path slower than a copy (`cost::torch_rates`):
    /// the unfused paths of `cost::eager` only.
    Slow { bytes: f64, path: SlowPath },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub name: &'static str,
    pub pass: Pass,
}

fn step(name: &'static str, pass: Pass) -> Step {
    Step { name, pass }
}

impl Core {
    /// Scores of the square: `batch_heads · seq · seq_full`.
    pub fn scores(&self) -> f64 {
        self.batch_heads * self.seq * self.seq_full
    }

    /// Bytes of one s×s tensor (scores, probabilities, or a gradient of them).
    fn square(&self) -> f64 {
        self.scores() * self.element
    }

    /// Bytes of its causal part: a softmax reads only the scores a query sees.
    fn causal(&self) -> f64 {
        0.5 * self.square()
    }

    /// FLOPs of one product over the square (`2 · batch_heads · seq · seq_full · head_dim`):
    /// the products run over the whole square, masked scores included.
    pub fn product_flops(&self) -> f64 {
        2.0 * self.scores() * self.head_dim
    }

    /// The causal forward's FLOPs, the convention of a profile's attention points.
    pub fn causal_flops(&self) -> f64 {
        self.product_flops()
    }

    fn scores_product(&self) -> Pass {
        Pass::Product {
            batch: self.batch_heads,
            m: self.seq,
            n: self.seq_full,
            k: self.head_dim,
            square: self.square(),
        }
    }

    /// A product that reads the square: `m` rows of output `head_dim` wide, over `k`.
    fn reading_product(&self, m: f64, k: f64) -> Pass {
        Pass::Product {
            batch: self.batch_heads,
            m,
            n: self.head_dim,
            k,
            square: self.square(),
        }
    }

    fn softmax(&self) -> Pass {
        Pass::Memory {
            bytes: if self.planc {
                2.0 * self.causal() + self.square()
            } else {
                self.causal() + self.square()
            },
        }
    }

    fn softmax_backward(&self) -> Pass {
        Pass::Memory {
            bytes: if self.planc {
                2.0 * (2.0 * self.causal()) + self.square()
            } else {
                2.0 * self.causal() + self.square()
            },
        }
    }

    /// Dropout over the probabilities, or its backward over their gradient: one s×s tensor
    /// read and one written, and the byte-a-score mask written (backward: read).
    fn dropout_pass(&self) -> Pass {
        Pass::Memory {
            bytes: 2.0 * self.square() + self.scores(),
        }
    }

    /// The forward's kernels, in order.
    pub fn forward(&self) -> Vec<Step> {
        let mut v = vec![
            step("scores", self.scores_product()),
            step("softmax", self.softmax()),
        ];
        if self.dropout && !self.planc {
            v.push(step("dropout", self.dropout_pass()));
        }
        v.push(step(
            "weighted_sum",
            self.reading_product(self.seq, self.seq_full),
        ));
        v
    }

    /// The backward's kernels with the probabilities at hand, in order.
    pub fn backward(&self) -> Vec<Step> {
        let mut v = vec![
            step("probability_gradient", self.scores_product()),
            step(
                "value_gradient",
                self.reading_product(self.seq_full, self.seq),
            ),
        ];
        if self.dropout && !self.planc {
            v.push(step("dropout_backward", self.dropout_pass()));
        }
        v.push(step("softmax_backward", self.softmax_backward()));
        v.push(step(
            "query_gradient",
            self.reading_product(self.seq, self.seq_full),
        ));
        v.push(step(
            "key_gradient",
            self.reading_product(self.seq_full, self.seq),
        ));
        v
    }

    /// What the backward recomputes before [`Self::backward`]: the scores and the softmax
    /// where the forward did not keep the probabilities (planc's runtime under
    /// recomputation), else nothing. A framework's own recomputation (Megatron-LM's
    /// checkpointed core under `recompute = selective`) is the recompute policy's, not this.
    pub fn recompute(&self) -> Vec<Step> {
        if self.recomputes_probs {
            self.forward().into_iter().take(2).collect()
        } else {
            vec![]
        }
    }

    /// FLOPs the products of `steps` run.
    pub fn flops(steps: &[Step]) -> f64 {
        steps
            .iter()
            .map(|s| match s.pass {
                Pass::Product { batch, m, n, k, .. } => 2.0 * batch * m * n * k,
                Pass::Memory { .. } | Pass::Slow { .. } => 0.0,
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT 1.3B's core on one GPU: micro-batch 8 × 16 heads, 2048 tokens, heads of 128,
    /// bf16 (issue 27's plan).
    fn core(planc: bool, dropout: bool, recomputes_probs: bool) -> Core {
        Core {
            batch_heads: 128.0,
            seq: 2048.0,
            seq_full: 2048.0,
            head_dim: 128.0,
            element: 2.0,
            dropout,
            planc,
            recomputes_probs,
        }
    }

    fn names(steps: &[Step]) -> Vec<&'static str> {
        steps.iter().map(|s| s.name).collect()
    }

    /// Bytes the memory passes of `steps` move, in units of one s×s tensor.
    fn squares(c: &Core, steps: &[Step]) -> f64 {
        let bytes: f64 = steps
            .iter()
            .map(|s| match s.pass {
                Pass::Memory { bytes } | Pass::Slow { bytes, .. } => bytes,
                Pass::Product { .. } => 0.0,
            })
            .sum();
        bytes / (c.scores() * c.element)
    }

    fn products(steps: &[Step]) -> Vec<(f64, f64, f64)> {
        steps
            .iter()
            .filter_map(|s| match s.pass {
                Pass::Product { m, n, k, .. } => Some((m, n, k)),
                Pass::Memory { .. } | Pass::Slow { .. } => None,
            })
            .collect()
    }

    #[test]
    fn plancs_runtime_runs_two_products_and_a_softmax_forward_four_and_its_backward_back() {
        let c = core(true, false, false);
        assert_eq!(names(&c.forward()), ["scores", "softmax", "weighted_sum"]);
        let (t, d) = (2048.0, 128.0);
        // QKᵀ writes the square (k = head size); PV reads it (k = the sequence).
        assert_eq!(products(&c.forward()), [(t, t, d), (t, d, t)]);
        // softmax_causal_fwd: the causal half read twice, the whole row written.
        assert_eq!(squares(&c, &c.forward()), 2.0);
        assert_eq!(
            names(&c.backward()),
            [
                "probability_gradient",
                "value_gradient",
                "softmax_backward",
                "query_gradient",
                "key_gradient"
            ]
        );
        // dP = dO·Vᵀ writes the square; dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q read it.
        assert_eq!(
            products(&c.backward()),
            [(t, t, d), (t, d, t), (t, d, t), (t, d, t)]
        );
        // softmax_causal_bwd: P's and dP's causal halves read twice, dS written whole.
        assert_eq!(squares(&c, &c.backward()), 3.0);
        assert!(c.recompute().is_empty());
        // Twice the forward's products' FLOPs, as the rule of two has it.
        assert_eq!(Core::flops(&c.backward()), 2.0 * Core::flops(&c.forward()));
        assert_eq!(Core::flops(&c.forward()), 2.0 * c.product_flops());
        // planc's runtime has no dropout (it refuses train.dropout > 0).
        assert_eq!(core(true, true, false).forward(), c.forward());
    }

    #[test]
    fn plancs_runtime_recomputes_the_scores_and_softmax_it_did_not_keep() {
        let c = core(true, false, true);
        assert_eq!(names(&c.recompute()), ["scores", "softmax"]);
        assert_eq!(squares(&c, &c.recompute()), 2.0);
        assert_eq!(Core::flops(&c.recompute()), c.product_flops());
    }

    #[test]
    fn megatrons_fused_softmax_reads_a_row_once_and_dropout_adds_its_mask() {
        let c = core(false, false, false);
        assert_eq!(names(&c.forward()), ["scores", "softmax", "weighted_sum"]);
        // The causal half read once, the row written.
        assert_eq!(squares(&c, &c.forward()), 1.5);
        // The gradient's and the probabilities' causal halves read, the row written.
        assert_eq!(squares(&c, &c.backward()), 2.0);
        let d = core(false, true, false);
        assert_eq!(
            names(&d.forward()),
            ["scores", "softmax", "dropout", "weighted_sum"]
        );
        // P read, P dropped out written, a byte-a-score mask written: 2.5 squares at bf16.
        assert_eq!(squares(&d, &d.forward()), 1.5 + 2.5);
        assert_eq!(squares(&d, &d.backward()), 2.0 + 2.5);
        assert_eq!(d.backward()[2].name, "dropout_backward");
        assert_eq!(products(&d.backward()), products(&c.backward()));
    }
}
