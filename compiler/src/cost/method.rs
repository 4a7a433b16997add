//! What a step trains (`train.method`), and what that changes in its memory and time.
//!
//! A frozen weight has no gradient and no optimizer state: it is held in the training
//! precision only (no fp32 master copy), and its product's backward computes the input
//! gradient alone, which the earlier layers still need, not the weight gradient. Only
//! trained weights' gradients are reduced over the data-parallel group and stepped by the
//! optimizer.
//!
//! - `full`: every weight trains (the rest of `cost` as it stands).
//! - `lora` (Hu et al. 2021, arXiv 2106.09685; as PEFT runs it under LLaMA-Factory): every
//!   weight of the model is frozen, and each adapted `in × out` matrix `W` of every layer
//!   gains `B·A` (`A`: `rank × in`, `B`: `out × rank`), whose `rank × (in + out)` weights
//!   train with their own gradients and optimizer state. Forward runs `W·x` as before plus
//!   the two thin adapter products and the scaled addition; backward runs every base
//!   product's input gradient (the gradient must reach the first layer's adapters) and the
//!   adapters' input and weight gradients. For the linear layers that is ≈ 2/3 of full
//!   training's backward products turned into 1/3: a step of ≈ 4 instead of 6 FLOPs per
//!   parameter and token. The activations a base product kept only for its weight gradient
//!   are not kept unless its adapter reads the same input (`A·x` needs `x`).
//! - `frozen` (LLaMA-Factory's `freeze` tuning): the embedding, the first `frozen_layers`
//!   layers and the output layer are frozen, the later layers train whole. Nothing before
//!   the first trained layer needs a gradient, so the frozen prefix runs forward only and
//!   keeps no activations (autograd records nothing there); the frozen output layer still
//!   runs its input gradient. (LLaMA-Factory with gradient checkpointing makes the
//!   embedding's output require a gradient, `enable_input_require_grads`, so it runs the
//!   prefix's input gradients too: work this floor does not price.)
//!
//! MFU counts the FLOPs the method needs ([`model_flops_per_step`]): forward everywhere,
//! input gradients wherever a gradient must flow, weight gradients of trained weights only,
//! the adapters' products; recomputation is hardware FLOPs, as for full training.
//!
//! Not priced: LoRA's dropout (`lora_dropout` keeps a dropped copy of each adapted input),
//! the adapters' tensor-parallel exchanges (their shares are counted as 1/tp of the
//! adapter), quantised base weights (QLoRA).

use super::memory::{
    dense_layer_params_per_gpu, layer_expert_params_per_gpu, layer_params_per_gpu,
    stage_layer_params, stage_params,
};
use super::ops::{Op, OpKind};
use super::params::{flops_per_step, layer_forward_flops_per_token, layer_params};
use crate::plan::{Lora, LoraTarget, Mlp, Model, Plan, TrainMethod};

/// The adapter's scaled addition to its product's output (PEFT's `result +
/// lora_B(lora_A(x)) * scaling`), in passes over one output element: forward reads and
/// writes for the scale and reads two and writes one for the sum; backward passes the
/// output gradient through unchanged to the product and scales a copy of it for `B`
/// (read one, write one).
pub const ADAPTER_ADD_PASSES: f64 = 5.0;
pub const ADAPTER_ADD_BACKWARD_PASSES: f64 = 2.0;

/// LoRA's adapter weights of one layer, whole (before tensor parallelism), split as
/// [`super::params::LayerParams`] splits the layer's own.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AdapterParams {
    pub attention: f64,
    /// The adapters of one routed expert's MLP (a dense model's MLP).
    pub mlp_per_expert: f64,
    pub shared: f64,
    pub dense_mlp: f64,
}

/// The `(in, out)` of target `t` in a layer whose MLP is `f` wide.
pub fn target_shape(m: &Model, t: LoraTarget, f: f64) -> (f64, f64) {
    let h = m.hidden as f64;
    let q = m.attention_width() as f64;
    let kv = m.kv_width() as f64;
    match t {
        LoraTarget::Q => (h, q),
        LoraTarget::K | LoraTarget::V => (h, kv),
        LoraTarget::O => (q, h),
        LoraTarget::Gate | LoraTarget::Up => (h, f),
        LoraTarget::Down => (f, h),
    }
}

fn is_mlp(t: LoraTarget) -> bool {
    matches!(t, LoraTarget::Gate | LoraTarget::Up | LoraTarget::Down)
}

/// `rank × (in + out)` of each adapted matrix, summed over the MLP's (of width `f`) or the
/// attention's targets.
fn adapters(m: &Model, l: &Lora, mlp: bool, f: f64) -> f64 {
    l.targets
        .iter()
        .filter(|t| is_mlp(**t) == mlp)
        // A GELU MLP has no gate (`resolve` refuses it; a preset changed under it).
        .filter(|t| m.mlp == Mlp::Swiglu || **t != LoraTarget::Gate)
        .map(|t| {
            let (i, o) = target_shape(m, *t, f);
            l.rank as f64 * (i + o)
        })
        .sum()
}

/// The adapters of one layer (PEFT adapts every expert's matrices of the named kinds, and
/// the shared experts' as one MLP; never the router).
pub fn adapter_params(m: &Model, l: &Lora) -> AdapterParams {
    let shared = if m.is_moe() && m.shared_experts > 0 {
        adapters(m, l, true, (m.shared_experts * m.expert_ffn_hidden) as f64)
    } else {
        0.0
    };
    let dense_mlp = adapters(m, l, true, m.ffn_hidden as f64);
    AdapterParams {
        attention: adapters(m, l, false, 0.0),
        mlp_per_expert: if m.is_moe() {
            adapters(m, l, true, m.expert_ffn_hidden as f64)
        } else {
            dense_mlp
        },
        shared,
        dense_mlp,
    }
}

/// Adapter weights one GPU holds of one layer (an MoE layer when `moe`), as (all, of them
/// the routed experts'): 1/tp of each, the experts of its expert-parallel rank.
pub fn layer_adapter_params_per_gpu(plan: &Plan, moe: bool) -> (f64, f64) {
    let Some(l) = plan.train.method.lora() else {
        return (0.0, 0.0);
    };
    let m = &plan.model;
    let t = plan.parallel.tp as f64;
    let a = adapter_params(m, l);
    if moe && m.is_moe() {
        let experts = a.mlp_per_expert * (m.experts / plan.parallel.ep.max(1)) as f64 / t;
        ((a.attention + a.shared) / t + experts, experts)
    } else {
        ((a.attention + a.dense_mlp) / t, 0.0)
    }
}

/// Adapter weights on one GPU of stage `stage`, as (all, routed experts').
pub fn stage_adapter_params(plan: &Plan, stage: u64) -> (f64, f64) {
    let moe = plan.stage_moe_layers(stage) as f64;
    let dense = plan.stage_layers(stage) as f64 - moe;
    let (a, ae) = layer_adapter_params_per_gpu(plan, true);
    let (d, _) = layer_adapter_params_per_gpu(plan, false);
    (a * moe + d * dense, ae * moe)
}

/// Trained parameters of one layer that trains (outside a frozen prefix) on one GPU, an
/// MoE layer when `moe`, as (all, routed experts'): the layer's own, or its adapters.
pub fn layer_trained_params(plan: &Plan, moe: bool) -> (f64, f64) {
    match plan.train.method {
        TrainMethod::Lora(_) => layer_adapter_params_per_gpu(plan, moe),
        _ if moe && plan.model.is_moe() => (
            layer_params_per_gpu(plan),
            layer_expert_params_per_gpu(plan),
        ),
        _ => (dense_layer_params_per_gpu(plan), 0.0),
    }
}

/// Parameters one GPU holds of one layer (the model's and any adapters), an MoE layer when
/// `moe`.
pub fn layer_held_params(plan: &Plan, moe: bool) -> f64 {
    let own = if moe && plan.model.is_moe() {
        layer_params_per_gpu(plan)
    } else {
        dense_layer_params_per_gpu(plan)
    };
    own + layer_adapter_params_per_gpu(plan, moe).0
}

/// Trained parameters of chunk `chunk` of stage `stage` on one GPU, as (all, routed
/// experts'): its trained layers', and the embedding's or the output layer's where the
/// chunk holds them and they train (`ends`: the stage's parameters beyond its layers, when
/// this chunk holds them).
pub fn chunk_trained_params(plan: &Plan, stage: u64, chunk: u64, ends: f64) -> (f64, f64) {
    let (_, n) = plan.chunk_range(stage, chunk);
    let dense = if plan.model.is_moe() {
        plan.chunk_dense_layers(stage, chunk)
    } else {
        n
    };
    let moe = n - dense;
    let (frozen_moe, frozen_dense) = plan.chunk_frozen_layers(stage, chunk);
    let (lm, lme) = layer_trained_params(plan, true);
    let (ld, _) = layer_trained_params(plan, false);
    let (moe, dense) = ((moe - frozen_moe) as f64, (dense - frozen_dense) as f64);
    let ends = if plan.train.method.trains_ends() {
        ends
    } else {
        0.0
    };
    (lm * moe + ld * dense + ends, lme * moe)
}

/// Trained parameters on one GPU of stage `stage`, as (all, routed experts'): what has
/// gradients, optimizer state and a data-parallel reduction.
pub fn stage_trained_params(plan: &Plan, stage: u64) -> (f64, f64) {
    let ends = stage_params(plan, stage) - stage_layer_params(plan, stage);
    let (mut all, mut experts) = (0.0, 0.0);
    let last = plan.parallel.vpp.max(1) - 1;
    for c in 0..=last {
        // The embedding sits in the first chunk of the first stage, the output layer in the
        // last chunk of the last (`simulator::lower`); a stage's ends once either way.
        let here = if c == 0 { ends } else { 0.0 };
        let (a, e) = chunk_trained_params(plan, stage, c, here);
        all += a;
        experts += e;
    }
    (all, experts)
}

/// Whether `op` (a layer's operation) is a product whose weight trains: every product of
/// full training and of a trained layer, only the adapters' under LoRA.
pub fn trains_weight(plan: &Plan, op: &Op) -> bool {
    is_weight_product(op) && (plan.train.method.lora().is_none() || op.id.is_adapter())
}

/// A product of activations by a weight (not the attention core's).
pub fn is_weight_product(op: &Op) -> bool {
    matches!(op.kind, OpKind::Gemm { .. } | OpKind::GroupedGemm { .. })
}

/// Model FLOPs of one step under the plan's method (MFU's numerator): forward 2 per
/// parameter and token, an input gradient of 2 wherever a gradient flows (every layer
/// under full training and LoRA, the trained layers and the output layer under `frozen`),
/// a weight gradient of 2 for trained weights; the adapters' 6 per weight and token; the
/// attention core 3× its forward where the gradient flows through it. Full training's is
/// [`flops_per_step`] (6 per parameter and token).
pub fn model_flops_per_step(plan: &Plan) -> f64 {
    let m = &plan.model;
    let gb = plan.train.global_batch;
    if plan.train.method.is_full() {
        return flops_per_step(m, gb);
    }
    let s = m.seq_len as f64;
    let tokens = gb as f64 * s;
    let p = layer_params(m);
    // Forward FLOPs a token of one layer: products, and the attention core.
    let core = 4.0 * m.mean_key_span(s) * m.attention_width() as f64;
    let dense_products = 2.0 * (p.attention + p.dense_mlp);
    let moe_products = layer_forward_flops_per_token(m, s) - core;
    let moe_layers = m.moe_layers() as f64;
    let dense_layers = m.layers as f64 - moe_layers;
    let products = moe_products * moe_layers + dense_products * dense_layers;
    let logits = 2.0 * (m.hidden * m.vocab) as f64;
    match &plan.train.method {
        TrainMethod::Full => unreachable!("priced above"),
        TrainMethod::Lora(l) => {
            let a = adapter_params(m, l);
            let active = a.attention
                + if m.is_moe() {
                    a.mlp_per_expert * m.top_k as f64 + a.shared
                } else {
                    a.dense_mlp
                };
            let dense_adapters = a.attention + a.dense_mlp;
            let adapters = 2.0 * (active * moe_layers + dense_adapters * dense_layers);
            // Forward and input gradient of every product and of the output layer, the
            // core's forward and backward, the adapters' three products.
            tokens * (2.0 * products + 3.0 * core * m.layers as f64 + 2.0 * logits + 3.0 * adapters)
        }
        TrainMethod::Frozen { frozen_layers } => {
            let frozen = (*frozen_layers).min(m.layers) as f64;
            let per_layer = products / m.layers.max(1) as f64 + core;
            // The prefix forward only; the trained layers 3×; the output layer forward and
            // input gradient.
            tokens * (per_layer * (frozen + 3.0 * (m.layers as f64 - frozen)) + 2.0 * logits)
        }
    }
}

/// The method in words, for the summary: `LoRA rank 64 (alpha 128) on q, k, v, o, gate,
/// up, down`, `the first 60 of 80 layers frozen`, `full`.
pub fn describe(plan: &Plan) -> String {
    match &plan.train.method {
        TrainMethod::Full => "full".into(),
        TrainMethod::Lora(l) => format!(
            "LoRA rank {} (alpha {}) on {}",
            l.rank,
            l.alpha,
            l.targets
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        TrainMethod::Frozen { frozen_layers } => format!(
            "the embedding, the first {frozen_layers} of {} layers and the output layer frozen",
            plan.model.layers
        ),
    }
}

/// All trained parameters of the model (every stage's, before tensor and expert
/// parallelism): the adapters under LoRA, the trained layers under `frozen`.
pub fn trained_params(plan: &Plan) -> f64 {
    let m = &plan.model;
    match &plan.train.method {
        TrainMethod::Full => super::params::total_params(m),
        TrainMethod::Lora(l) => {
            let a = adapter_params(m, l);
            let moe = m.moe_layers() as f64;
            (a.attention + a.mlp_per_expert * m.experts as f64 + a.shared) * moe
                + (a.attention + a.dense_mlp) * (m.layers as f64 - moe)
        }
        TrainMethod::Frozen { frozen_layers } => {
            let lp = layer_params(m);
            let dense_first = if m.is_moe() {
                m.first_dense_layers
            } else {
                m.layers
            };
            // The trained layers are the last ones: dense where they fall among the first
            // dense layers.
            (*frozen_layers..m.layers)
                .map(|i| {
                    if i < dense_first {
                        lp.dense_total()
                    } else {
                        lp.total(m.experts)
                    }
                })
                .sum()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;
    use crate::cost::memory::{layer_activation_bytes, stage_memory};
    use crate::cost::time::{dp_collectives, pieces, placement, stage_time, Device};

    /// Seed 003's job (LLaMA-Factory over DeepSpeed): Llama 2 70B on 4 × 8 A100 80GB, bf16,
    /// AdamW, micro-batch 1, global batch 1024, with `train` and `parallel` additions
    /// ([`SEED`]: its ZeRO-2 and gradient checkpointing).
    fn seed003(train: &str, parallel: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 4, gpus_per_node = 8, gpu = A100_SXM_80GB
                inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s, latency = 5 us }} }}
             model m {{ preset = \"llama2-70b\" }}
             train {{ global_batch = 1024, precision = bf16, optimizer = adamw {train} }}
             parallel {{ micro_batch = 1, dp = auto {parallel} }}
             job {{ framework = deepspeed, entrypoint = \"src/train_bash.py\" }}"
        );
        let c = check_source("t.tp", &text);
        c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics))
    }

    const SEED: &str = ", zero = 2, recompute = full";

    const LORA: &str =
        ", method = lora, lora_rank = 64, lora_alpha = 128, lora_targets = [q, k, v, o, gate, up, down]";

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-30)
    }

    #[test]
    fn lora_adapts_rank_times_in_plus_out_of_every_named_matrix() {
        // Llama 2 70B, rank 64 on every linear layer: 64 × (q 8192+8192, k and v 8192+1024,
        // o 8192+8192, gate and up 8192+28672, down 28672+8192) × 80 layers, PEFT's
        // `print_trainable_parameters` figure for this model.
        let plan = seed003(LORA, SEED);
        let per_layer = 64.0 * (16384.0 + 2.0 * 9216.0 + 16384.0 + 2.0 * 36864.0 + 36864.0);
        assert_eq!(trained_params(&plan), 80.0 * per_layer);
        assert_eq!(trained_params(&plan), 828_375_040.0);
        assert_eq!(stage_trained_params(&plan, 0), (828_375_040.0, 0.0));
        // q and v only (PEFT's default for Llama): 64 × (16384 + 9216) a layer.
        let qv = seed003(
            ", method = lora, lora_rank = 64, lora_targets = [v, q]",
            SEED,
        );
        assert_eq!(trained_params(&qv), 80.0 * 64.0 * 25600.0);
        assert_eq!(
            qv.train.method.lora().unwrap().targets,
            [LoraTarget::Q, LoraTarget::V]
        );
    }

    #[test]
    fn a_lora_70b_plan_keeps_no_gradients_or_optimizer_state_of_the_frozen_weights() {
        let full = seed003("", SEED);
        let lora = seed003(LORA, SEED);
        let (f, l) = (stage_memory(&full, 0, 32), stage_memory(&lora, 0, 32));
        let model = crate::cost::params::total_params(&full.model);
        let adapters = 828_375_040.0;
        let dp = 32.0;
        // Full training, ZeRO-2 over 32: bf16 weights whole, fp32 gradients and the
        // optimizer's fp32 master and moments sharded.
        assert!(close(f.weights_bytes, 2.0 * model, 1e-12));
        assert!(close(f.gradients_bytes, 4.0 * model / dp, 1e-12));
        assert!(close(f.optimizer_bytes, 12.0 * model / dp, 1e-12));
        // LoRA: the base weights in bf16 only, the adapters beside them; gradients and the
        // optimizer's state of the adapters alone.
        assert!(close(l.params, model + adapters, 1e-12));
        assert_eq!(l.trained_params, adapters);
        assert!(close(l.weights_bytes, 2.0 * (model + adapters), 1e-12));
        assert!(close(l.gradients_bytes, 4.0 * adapters / dp, 1e-12));
        assert!(close(l.optimizer_bytes, 12.0 * adapters / dp, 1e-12));
        // Every matrix adapted and every layer recomputed: the same layer inputs, and the
        // recomputed layer's seven rank-wide A·x (2·sr bytes each).
        assert!(close(
            l.activations_bytes - f.activations_bytes,
            7.0 * 2.0 * 4096.0 * 64.0,
            1e-9
        ));
        assert_eq!(l.other_bytes, f.other_bytes);
        let gib = |x: f64| x / (1u64 << 30) as f64;
        // 167.9 GiB a GPU priced as full training; LoRA drops 31 GiB of state, and the bf16
        // base weights (128.5 GiB) still do not fit one 80 GB GPU without ZeRO-3.
        assert!(
            (gib(f.total_bytes) - 167.9).abs() < 0.1,
            "{}",
            gib(f.total_bytes)
        );
        assert!(
            close(
                f.total_bytes - l.total_bytes,
                16.0 * model / dp
                    - 2.0 * adapters
                    - 16.0 * adapters / dp
                    - 7.0 * 2.0 * 4096.0 * 64.0,
                1e-9
            ),
            "{}",
            gib(l.total_bytes)
        );
        assert!(gib(l.total_bytes) > 80.0);
        // ZeRO-3 shards the frozen weights too: the job fits.
        let z3 = stage_memory(&seed003(LORA, ", zero = 3, recompute = full"), 0, 32);
        assert!(close(
            z3.weights_bytes,
            2.0 * (model + adapters) / dp,
            1e-12
        ));
        assert!(gib(z3.total_bytes) < 20.0, "{}", gib(z3.total_bytes));
    }

    #[test]
    fn lora_keeps_only_the_product_inputs_its_adapters_read() {
        // One layer, tp 1, selective recompute, flash attention, no dropout: Table 2's
        // terms in bytes (bf16) are 8·sbh for the norms' and the QKV and MLP inputs,
        // 2·sb·(q + 2kv) for q, k, v, 2·sbq for the attention's output (flash attention's
        // backward reads it too), 6·sbf for SwiGLU's gate, up and FC2 input.
        let sel = ", recompute = selective";
        let full = layer_activation_bytes(&seed003("", sel));
        let qv = layer_activation_bytes(&seed003(
            ", method = lora, lora_rank = 64, lora_targets = [q, v]",
            sel,
        ));
        let all = layer_activation_bytes(&seed003(LORA, sel));
        let (s, h, f, r) = (4096.0, 8192.0, 28672.0, 64.0);
        // q and v: no adapter reads the MLP's inputs (FC1's 2·sbh, FC2's 2·sbf), and two
        // adapters keep their rank-wide A·x (2·sbr each).
        assert!(close(
            full - qv,
            2.0 * s * h + 2.0 * s * f - 2.0 * 2.0 * s * r,
            1e-12
        ));
        // Every matrix: every input is kept, and seven A·x.
        assert!(close(all - full, 7.0 * 2.0 * s * r, 1e-12));
    }

    #[test]
    fn the_frozen_weights_backward_runs_the_input_gradient_only() {
        // No recompute, so backward is backward alone.
        let none = ", recompute = none, zero = 3";
        let full = seed003("", none);
        let lora = seed003(LORA, none);
        let group = &full.cluster.groups[0];
        let dev = Device {
            gpu: &group.gpu,
            precision: full.train.precision,
        };
        let pl = placement(&full, group);
        let (pf, pl_) = (
            pieces(&full, &dev, &pl),
            pieces(&lora, &dev, &placement(&lora, group)),
        );
        // Forward FLOPs a token: the base products (2 per weight), the core, and LoRA's
        // adapter products (2 per adapter weight).
        let tokens = 4096.0;
        let adapter = 2.0 * tokens * 828_375_040.0 / 80.0;
        assert!(close(
            pl_.layer_fwd.flops - pf.layer_fwd.flops,
            adapter,
            1e-9
        ));
        let lp = layer_params(&full.model);
        let products = 2.0 * tokens * (lp.attention + lp.dense_mlp);
        let core = pf.layer_fwd.flops - products;
        // Full: 2× the products and the fused attention's 2.5× its core. LoRA: the base
        // products' input gradients (1×), the adapters' input and weight gradients (2×).
        assert!(close(pf.layer_bwd.flops, 2.0 * products + 2.5 * core, 1e-9));
        assert!(close(
            pl_.layer_bwd.flops,
            products + 2.5 * core + 2.0 * adapter,
            1e-9
        ));
        // ≈ 2/3 of the linear layers' backward products became 1/3.
        let linear_bwd = |p: f64| p - 2.5 * core;
        let ratio =
            linear_bwd(pl_.layer_bwd.flops - 2.0 * adapter) / linear_bwd(pf.layer_bwd.flops);
        assert!(close(ratio, 0.5, 1e-9), "{ratio}");
        assert!(pl_.layer_bwd.compute < 0.75 * pf.layer_bwd.compute);
        // No weight gradient to defer but the adapters' (thin, memory-bound products).
        assert!(
            pl_.layer_wgrad < 0.1 * pf.layer_wgrad,
            "{} {}",
            pl_.layer_wgrad,
            pf.layer_wgrad
        );
        // The frozen embedding runs no backward, the frozen output layer its input gradient.
        assert_eq!(pl_.embedding_bwd.compute, 0.0);
        assert!(pl_.head_bwd.compute < pf.head_bwd.compute);
        assert_eq!(pl_.head_wgrad, 0.0);
    }

    #[test]
    fn the_data_parallel_reduction_carries_the_adapters_gradients_only() {
        let full = seed003("", SEED);
        let lora = seed003(LORA, SEED);
        let group = &full.cluster.groups[0];
        let pl = placement(&full, group);
        let model = stage_params(&full, 0);
        let (reduce_full, _) = dp_collectives(&full, (model, 0.0), (model, 0.0), &pl);
        let held = (model + 828_375_040.0, 0.0);
        let (reduce_lora, gather_lora) =
            dp_collectives(&lora, held, stage_trained_params(&lora, 0), &pl);
        let (reduce_adapters, gather_adapters) =
            dp_collectives(&full, (828_375_040.0, 0.0), (828_375_040.0, 0.0), &pl);
        assert_eq!(reduce_lora, reduce_adapters);
        // ZeRO-2 gathers the updated shards: the adapters'.
        assert_eq!(gather_lora, gather_adapters);
        assert!(reduce_lora < reduce_full / 50.0);
        // The estimate's optimizer steps the adapters alone.
        let (ef, el) = (crate::cost::estimate(&full), crate::cost::estimate(&lora));
        assert!(el.stages[0].optimizer_s < ef.stages[0].optimizer_s / 50.0);
        assert!(el.step_s < ef.step_s);
    }

    #[test]
    fn a_frozen_prefix_runs_forward_only_and_keeps_nothing() {
        // The first 60 of 80 layers frozen, on 4 pipeline stages of 20: stages 0-2 hold
        // frozen layers only.
        let pp = ", zero = 1, pp = 4, recompute = selective";
        let f = seed003(", method = frozen, frozen_layers = 60", pp);
        let full = seed003("", pp);
        assert_eq!(f.parallel.dp, 8);
        let group = &f.cluster.groups[0];
        let dev = Device {
            gpu: &group.gpu,
            precision: f.train.precision,
        };
        let pl = placement(&f, group);
        assert_eq!(f.stage_frozen_layers(1), (0, 20));
        assert_eq!(f.stage_frozen_layers(3), (0, 0));
        let (sf, sfull) = (
            stage_time(&f, 1, &dev, &pl),
            stage_time(&full, 1, &dev, &pl),
        );
        assert_eq!(sf.forward, sfull.forward);
        assert_eq!(sf.backward.compute, 0.0);
        assert_eq!(sf.weight_grad, 0.0);
        // The last stage trains its 20 layers; its output layer is frozen.
        let (lf, lfull) = (
            stage_time(&f, 3, &dev, &pl),
            stage_time(&full, 3, &dev, &pl),
        );
        assert!(lf.backward.compute < lfull.backward.compute);
        let head = pieces(&f, &dev, &pl);
        assert!(close(
            lfull.backward.compute - lf.backward.compute,
            pieces(&full, &dev, &pl).head_bwd.compute - head.head_bwd.compute,
            1e-9
        ));
        // Memory: a frozen stage keeps no activations, gradients or optimizer state.
        let m1 = stage_memory(&f, 1, 8);
        assert_eq!(m1.activations_bytes, 0.0);
        assert_eq!((m1.gradients_bytes, m1.optimizer_bytes), (0.0, 0.0));
        let m3 = stage_memory(&f, 3, 8);
        assert_eq!(
            m3.trained_params,
            20.0 * layer_params(&f.model).dense_total()
        );
        // Model FLOPs: 2 per parameter and token in the prefix, 6 in the trained layers,
        // 4 for the frozen output layer.
        let tokens = 1024.0 * 4096.0;
        let lp = layer_params(&f.model);
        let core = 4.0 * 4096.0 * 8192.0;
        let per_layer = 2.0 * (lp.attention + lp.dense_mlp) + core;
        let logits = 2.0 * 8192.0 * 32000.0;
        let want = tokens * (60.0 * per_layer + 3.0 * 20.0 * per_layer + 2.0 * logits);
        assert!(close(model_flops_per_step(&f), want, 1e-12));
    }

    #[test]
    fn auto_ends_give_a_frozen_prefix_more_layers() {
        // Llama 2 70B over 4 stages, its first 40 layers frozen: the even split leaves the
        // first two stages forward-only and waiting; the balanced split gives the first
        // stage more of the cheap frozen layers.
        let text = "cluster c { nodes = 4, gpus_per_node = 8, gpu = H100_SXM_80GB
                inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us } }
             model m { preset = \"llama2-70b\" }
             train { global_batch = 256, precision = bf16, optimizer = adamw, method = frozen, frozen_layers = 40 }
             parallel { tp = 8, pp = 4, dp = auto, micro_batch = 1, zero = 1, recompute = selective,
                        sequence_parallel = true, first_stage_layers = auto, last_stage_layers = auto }";
        let c = check_source("t.tp", text);
        let plan = c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics));
        let first = plan.stage_layers(0);
        assert!(
            first > 30,
            "{first}: {:?}",
            (0..4).map(|s| plan.stage_layers(s)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn mfu_counts_the_flops_lora_needs() {
        let full = seed003("", SEED);
        let lora = seed003(LORA, SEED);
        let tokens = 1024.0 * 4096.0;
        let lp = layer_params(&full.model);
        let products = 80.0 * 2.0 * (lp.attention + lp.dense_mlp);
        let logits = 2.0 * 8192.0 * 32000.0;
        // Full: 3× the forward. LoRA: no weight gradients of the frozen products and output
        // layer (one forward's worth of them), and the adapters' 6 a weight.
        let want = flops_per_step(&full.model, 1024) - tokens * (products + logits)
            + 6.0 * tokens * 828_375_040.0;
        assert!(close(model_flops_per_step(&lora), want, 1e-12));
        let e = crate::cost::estimate(&lora);
        assert_eq!(e.flops_per_step, model_flops_per_step(&lora));
        assert_eq!(e.trained_params, 828_375_040.0);
    }
}
