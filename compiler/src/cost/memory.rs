//! Memory per GPU of each pipeline stage: weights, gradients, optimizer state,
//! activations of the micro-batches in flight, and runtime overhead.
//!
//! Weights/gradients/optimizer follow Megatron-LM's accounting (bf16 weight 2 B, fp32 main
//! gradient 4 B, fp32 master weight and two Adam moments 12 B; ZeRO stages shard them over
//! the data-parallel group). Activations follow Korthikanti et al. 2022, Table 2,
//! generalised to grouped-query attention, SwiGLU and any FFN width.
//!
//! Under `framework = planc`, where planc's runtime runs the plan, a stage's memory is not
//! modelled but listed: the sum of the buffers the runtime allocates (`cost::buffers`).

use serde::Serialize;

use super::params::{embedding_params, head_params, layer_params};
use crate::plan::{Attention, Framework, Mlp, Offload, Optimizer, Plan, Recompute, Schedule};

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StageMemory {
    pub stage: u64,
    pub weights_bytes: f64,
    pub gradients_bytes: f64,
    pub optimizer_bytes: f64,
    pub activations_bytes: f64,
    pub other_bytes: f64,
    pub total_bytes: f64,
    /// Parameters held by one GPU of this stage (before ZeRO sharding), LoRA's adapters
    /// included.
    pub params: f64,
    /// Of `params`, those that train (`train.method`): with gradients, optimizer state and
    /// a data-parallel reduction. All of them under full training.
    pub trained_params: f64,
}

/// CUDA context, cuBLAS workspace and NCCL buffers: present on every GPU whatever the
/// model. ~1 GiB is what `nvidia-smi` shows for an idle PyTorch process with NCCL up.
pub const RUNTIME_OVERHEAD_BYTES: f64 = 1024.0 * 1024.0 * 1024.0;

/// Parameters on one GPU of stage `stage`: its layers (uneven stages hold their own
/// count; an MoE model's first dense layers their own MLP), the embedding on the first
/// stage, the output layer on the last (a tied embedding is kept on both ends).
pub fn stage_params(plan: &Plan, stage: u64) -> f64 {
    let m = &plan.model;
    let p = &plan.parallel;
    let tp = p.tp as f64;
    let mut total = stage_layer_params(plan, stage);
    let vocab_h = (m.vocab * m.hidden) as f64 / tp;
    if stage == 0 {
        total += embedding_params(m) - (m.vocab * m.hidden) as f64 + vocab_h;
    }
    if stage == p.pp - 1 {
        total += head_params(m)
            - if m.tied_embeddings {
                0.0
            } else {
                (m.vocab * m.hidden) as f64
            };
        if !m.tied_embeddings || p.pp > 1 {
            total += vocab_h;
        }
    }
    total
}

/// Of [`stage_layer_params`], the linear layers' weights (what runs in fp8): all but the
/// norms and the routers.
pub fn stage_linear_params(plan: &Plan, stage: u64) -> f64 {
    let lp = layer_params(&plan.model);
    let layers = plan.stage_layers(stage) as f64;
    let moe = plan.stage_moe_layers(stage) as f64;
    stage_layer_params(plan, stage) - layers * lp.norms - moe * lp.router
}

/// Parameters of stage `stage`'s transformer layers on one GPU (its MoE and dense layers).
pub fn stage_layer_params(plan: &Plan, stage: u64) -> f64 {
    let moe = plan.stage_moe_layers(stage);
    let dense = plan.stage_layers(stage) - moe;
    layer_params_per_gpu(plan) * moe as f64 + dense_layer_params_per_gpu(plan) * dense as f64
}

/// Of [`stage_params`], the routed experts' parameters: sharded and reduced over the expert
/// data-parallel group, not the data-parallel one.
pub fn stage_expert_params(plan: &Plan, stage: u64) -> f64 {
    layer_expert_params_per_gpu(plan) * plan.stage_moe_layers(stage) as f64
}

/// Parameters of one transformer layer held by one GPU (its tensor-parallel shard, its
/// experts): an MoE layer in an MoE model.
pub fn layer_params_per_gpu(plan: &Plan) -> f64 {
    let m = &plan.model;
    let p = &plan.parallel;
    let lp = layer_params(m);
    let tp = p.tp as f64;
    let experts_here = (m.experts / p.ep.max(1)) as f64;
    lp.attention / tp
        + lp.mlp_per_expert * experts_here / tp
        + lp.shared / tp
        + lp.router
        + lp.norms
}

/// Parameters of a layer with a dense MLP held by one GPU.
pub fn dense_layer_params_per_gpu(plan: &Plan) -> f64 {
    let lp = layer_params(&plan.model);
    (lp.attention + lp.dense_mlp) / plan.parallel.tp as f64 + lp.norms
}

/// Of [`layer_params_per_gpu`], the routed experts' (zero in a dense model). Their tensor
/// parallelism is tp (Megatron-Core's default expert tensor parallelism).
pub fn layer_expert_params_per_gpu(plan: &Plan) -> f64 {
    let m = &plan.model;
    if !m.is_moe() {
        return 0.0;
    }
    let p = &plan.parallel;
    layer_params(m).mlp_per_expert * (m.experts / p.ep.max(1)) as f64 / p.tp as f64
}

/// The ranks a distributed optimizer (ZeRO) shards (dense, expert) parameters over: the
/// data-parallel group (dp × cp) and the expert data-parallel group (dp × cp / ep), as
/// Megatron-Core's distributed optimizer shards each buffer over the group that reduces it.
pub fn shard_groups(plan: &Plan) -> (f64, f64) {
    let p = &plan.parallel;
    let dense = (p.dp * p.cp) as f64;
    (dense, (dense / p.ep.max(1) as f64).max(1.0))
}

/// Activation bytes of one layer (an MoE layer in an MoE model) for one micro-batch on one
/// GPU.
pub fn layer_activation_bytes(plan: &Plan) -> f64 {
    activation_bytes_of(plan, plan.model.is_moe())
}

/// Activation bytes of one layer of stage `stage` on average, its MoE and dense layers
/// together.
pub fn stage_layer_activation_bytes(plan: &Plan, stage: u64) -> f64 {
    let layers = plan.stage_layers(stage);
    if layers == 0 {
        return 0.0;
    }
    let moe = plan.stage_moe_layers(stage) as f64;
    let dense = layers as f64 - moe;
    (activation_bytes_of(plan, true) * moe + activation_bytes_of(plan, false) * dense)
        / layers as f64
}

fn activation_bytes_of(plan: &Plan, moe: bool) -> f64 {
    let m = &plan.model;
    let p = &plan.parallel;
    let elem = plan.train.precision.bytes() / 2.0; // Table 2 counts 2-byte elements
    let s = (m.seq_len / p.cp) as f64;
    let b = p.micro_batch as f64;
    let h = m.hidden as f64;
    let t = p.tp as f64;
    // Key and value heads as stored: grouped-query attention keeps `kv_heads` of them
    // (FlashAttention and cuDNN take the groups as they are); planc's runtime keeps them
    // repeated to every query head, which its attention kernels index one to one (on two
    // H200s, Llama 3.2 1B's activations measured 10.08 GiB where 9.28 counted the groups).
    let kv_heads = if plan.framework() == Framework::Planc {
        m.heads
    } else {
        m.kv_heads
    };
    let kv = (kv_heads * m.head_dim) as f64;
    let q = m.attention_width() as f64;
    let sbh = s * b * h;
    if p.recompute == Recompute::Full {
        // Only the layer input is kept; sharded by sequence parallelism.
        let shard = if p.sequence_parallel { t } else { 1.0 };
        return 2.0 * sbh / shard * elem;
    }
    let dropout = plan.train.dropout > 0.0;
    // The inputs the fp8 products keep for their weight gradients take one byte where
    // Table 2 counts two (`cost::fp8`): the QKV, FC1, attention-output and FC2 inputs.
    let fp8 = if super::fp8::keeps_fp8_inputs(plan) {
        0.5
    } else {
        1.0
    };
    // A product's input is kept for its weight gradient: under LoRA, only where an adapter
    // reads the same input (`A·x`); a frozen product's input gradient needs its weight,
    // not its input (`cost::method`).
    let keeps = Keeps::of(plan);
    let (qkv_in, fc1_in, fc2_in) = (
        f64::from(u8::from(keeps.qkv_in)),
        f64::from(u8::from(keeps.fc1_in)),
        f64::from(u8::from(keeps.fc2_in)),
    );
    // Sequence-parallel-shardable: norm inputs (4·sbh), QKV and FC1 inputs (2·sbh each; an
    // MoE layer's router input in the FC1 input's place), and with dropout its two 1-byte
    // masks (2·sbh in Table 2's 2-byte units).
    let replicated = (if dropout { 6.0 } else { 4.0 } + 2.0 * fp8 * (qkv_in + fc1_in)) * sbh;
    // The MLP's intermediates: FC1's output (the activation's input) and the activation's
    // output, FC2's input.
    let mid = |f: f64| match m.mlp {
        Mlp::Gelu => (2.0 + 2.0 * fp8 * fc2_in) * s * b * f,
        Mlp::Swiglu => (4.0 + 2.0 * fp8 * fc2_in) * s * b * f,
    };
    let replicated_div = if p.sequence_parallel { t } else { 1.0 };
    // Tensor-parallel-split: Q, K, V, attention output, MLP intermediates.
    let qkv = 2.0 * s * b * (q + 2.0 * kv);
    let attn_out = 2.0 * s * b * q;
    let (mlp_mid, whole) = if moe {
        // The experts' rows (each token's top_k copies, at the busiest rank's load): their
        // products' input, gathered over tp, kept whole; their intermediates split by tp;
        // the rows combined back, kept for the router probabilities' gradient (this rank's
        // own tokens' copies). The shared experts as a dense MLP: its input gathered from the
        // sequence-parallel shard in backward, as the dense MLP's.
        let rows = m.top_k as f64 * super::ops::expert_load_factor(plan);
        let shared = (m.shared_experts * m.expert_ffn_hidden) as f64;
        let shared_in = if m.shared_experts > 0 {
            2.0 * fp8 * sbh * fc1_in
        } else {
            0.0
        };
        (
            mid(m.expert_ffn_hidden as f64 * rows) + mid(shared),
            2.0 * fp8 * sbh * rows * fc1_in + (2.0 * sbh * rows + shared_in) / replicated_div,
        )
    } else {
        (mid(m.ffn_hidden as f64), 0.0)
    };
    let attn_out = if keeps.attn_out { attn_out } else { 0.0 };
    let split = qkv + fp8 * attn_out + mlp_mid + keeps.adapter_rows(plan, moe) * s * b * 2.0;
    // The s×s attention matrix: the softmax output (2), and with dropout its mask (1) and
    // the dropped probabilities (2); gone with flash attention or selective recompute.
    let a = m.heads as f64;
    let full_seq = m.seq_len as f64;
    let core = if plan.train.attention == Attention::Standard && p.recompute == Recompute::None {
        (if dropout { 5.0 } else { 2.0 }) * a * s * full_seq * b
    } else {
        0.0
    };
    (replicated / replicated_div + split / t + core / t + whole) * elem
}

/// Which of a layer's product inputs its backward keeps (Korthikanti's Table 2 keeps them
/// all, for the weight gradients), and the adapters' own.
struct Keeps {
    qkv_in: bool,
    fc1_in: bool,
    fc2_in: bool,
    /// The attention's output, the output projection's input: also what the fused
    /// attention's backward reads (FlashAttention keeps `O` with its log-sum-exp).
    attn_out: bool,
}

impl Keeps {
    fn of(plan: &Plan) -> Keeps {
        use crate::plan::LoraTarget as T;
        let Some(l) = plan.train.method.lora() else {
            return Keeps {
                qkv_in: true,
                fc1_in: true,
                fc2_in: true,
                attn_out: true,
            };
        };
        let has = |t: &[T]| l.targets.iter().any(|x| t.contains(x));
        Keeps {
            qkv_in: has(&[T::Q, T::K, T::V]),
            fc1_in: has(&[T::Gate, T::Up]),
            fc2_in: has(&[T::Down]),
            attn_out: has(&[T::O]) || plan.train.attention == Attention::Flash,
        }
    }

    /// The adapters' intermediates `A·x` (rank wide, kept for `B`'s gradient) of one token
    /// of a layer (an MoE layer's routed rows at their load), in 2-byte units' elements.
    fn adapter_rows(&self, plan: &Plan, moe: bool) -> f64 {
        let Some(l) = plan.train.method.lora() else {
            return 0.0;
        };
        let m = &plan.model;
        let rows = if moe && m.is_moe() {
            m.top_k as f64 * super::ops::expert_load_factor(plan)
                + f64::from(u8::from(m.shared_experts > 0))
        } else {
            1.0
        };
        l.targets
            .iter()
            .map(|t| {
                let mlp = matches!(
                    t,
                    crate::plan::LoraTarget::Gate
                        | crate::plan::LoraTarget::Up
                        | crate::plan::LoraTarget::Down
                );
                l.rank as f64 * if mlp { rows } else { 1.0 }
            })
            .sum()
    }
}

/// Micro-batches whose activations stage `stage` holds at its peak, in units of the
/// stage's layers (so interleaving's partial chunks count fractionally).
pub fn in_flight(plan: &Plan, stage: u64, micro_batches: u64) -> f64 {
    let layers = plan.stage_layers(stage);
    if layers == 0 {
        return 0.0;
    }
    in_flight_layers(plan, stage, micro_batches) / layers as f64
}

/// Layer activations (one micro-batch through one layer = 1) stage `stage` holds at its
/// peak: the forward passes it has run and not yet run backward when its first backward
/// starts ([`in_flight_sets`] of its chunks).
pub fn in_flight_layers(plan: &Plan, stage: u64, micro_batches: u64) -> f64 {
    let p = &plan.parallel;
    let pp = p.pp;
    let layers = plan.stage_layers(stage) as f64;
    let sets = in_flight_sets(plan, stage, micro_batches);
    match p.schedule {
        Schedule::Gpipe | Schedule::OneFOneB | Schedule::ZeroBubble => sets as f64 * layers,
        Schedule::Interleaved => {
            // Forwards visit the chunks in groups of pp micro-batches, so with uneven
            // chunks the sum follows that order.
            let v = p.vpp.max(1);
            if !p.is_uneven() {
                return sets as f64 * layers / v as f64;
            }
            (0..sets)
                .map(|i| p.chunk_layers(plan.model.layers, stage, (i / pp.max(1)) % v) as f64)
                .sum()
        }
    }
}

/// Sets of activations (one micro-batch through one of the stage's chunks each) stage
/// `stage` holds at its peak, as the plan's framework orders its program: what planc's
/// runtime allocates (`live_sets` of the simulator's program, which a test holds equal on
/// every example).
pub fn in_flight_sets(plan: &Plan, stage: u64, micro_batches: u64) -> u64 {
    let p = &plan.parallel;
    let pp = p.pp;
    match p.schedule {
        Schedule::Gpipe => micro_batches,
        // ZB-H1 holds what 1F1B holds (its deferred W passes keep only weight inputs).
        Schedule::OneFOneB | Schedule::ZeroBubble => (pp - stage).min(micro_batches),
        Schedule::Interleaved => {
            // Megatron's warm-up for rank i: (pp − i − 1)·2 + (vpp − 1)·pp forwards, plus
            // the one its first backward follows.
            let v = p.vpp.max(1);
            let warmup = (pp - stage - 1) * 2 + (v - 1) * pp + 1;
            // planc's runtime posts a forward's receive before the backward ahead of it
            // (`planc_simulator::grouped`): up to two sets more (two with pp ≥ 4, vpp ≥ 3
            // and two micro-batches a rank or more; fewer on smaller pipelines).
            let ahead = if plan.framework() == Framework::Planc {
                PLANC_RECEIVES_AHEAD
            } else {
                0
            };
            (warmup + ahead).min(micro_batches * v)
        }
    }
}

/// Activation sets planc's runtime holds beyond Megatron's warm-up under the interleaved
/// schedule, at most (see [`in_flight_sets`]).
pub const PLANC_RECEIVES_AHEAD: u64 = 2;

/// Memory per GPU of stage `stage`. Under `framework = planc`, where planc's runtime runs
/// the plan, the sum of the buffers it allocates (`cost::buffers`, with the sets
/// [`in_flight_sets`] counts) and the CUDA context and NCCL's buffers it does not allocate
/// itself ([`RUNTIME_OVERHEAD_BYTES`]); otherwise [`modelled_stage_memory`].
pub fn stage_memory(plan: &Plan, stage: u64, micro_batches: u64) -> StageMemory {
    let modelled = modelled_stage_memory(plan, stage, micro_batches);
    if plan.framework() != Framework::Planc {
        return modelled;
    }
    match super::buffers::of_plan(plan, stage, micro_batches) {
        Some(buffers) => {
            let b = buffers.bytes();
            let cudnn = super::buffers::cudnn_attention_bytes(plan, stage) as f64;
            let other = RUNTIME_OVERHEAD_BYTES + b.workspace as f64 + cudnn;
            StageMemory {
                weights_bytes: b.weights as f64,
                gradients_bytes: b.gradients as f64,
                optimizer_bytes: b.optimizer as f64,
                activations_bytes: b.activations as f64,
                other_bytes: other,
                total_bytes: (b.total() - b.workspace) as f64 + other,
                ..modelled
            }
        }
        None => modelled,
    }
}

/// Memory per GPU of stage `stage` as the model counts it: Megatron-LM's state bytes,
/// Korthikanti's activations, the runtime's overhead.
pub fn modelled_stage_memory(plan: &Plan, stage: u64, micro_batches: u64) -> StageMemory {
    let p = &plan.parallel;
    let m = &plan.model;
    // Held: the model's weights and LoRA's adapters, in the training precision. Trained
    // (`cost::method`): what has a gradient and optimizer state; a frozen weight has
    // neither, nor an fp32 master copy (the optimizer's state, `Plan::optimizer_state_bytes`,
    // covers trained weights only).
    let (adapters, adapter_experts) = super::method::stage_adapter_params(plan, stage);
    let params = stage_params(plan, stage) + adapters;
    let experts = stage_expert_params(plan, stage) + adapter_experts;
    let (trained, trained_experts) = super::method::stage_trained_params(plan, stage);
    let w = plan.train.precision.bytes();
    // The optimizer's state as the framework holds it (`parallel.optimizer_dtype`).
    let (master, moments) = plan.optimizer_state_bytes();
    let o = master + moments;
    // The buffer as the framework holds it (`parallel.grad_dtype`).
    let g = plan.grad_bytes();
    // The routed experts' state is sharded over their own (smaller) data-parallel group.
    let (shard, expert_shard) = shard_groups(plan);
    let sharded = |(all, experts): (f64, f64), bytes: f64, on: bool| {
        if on {
            (all - experts) * bytes / shard + experts * bytes / expert_shard
        } else {
            all * bytes
        }
    };
    // ZeRO-3 (DeepSpeed's, FSDP's) shards frozen weights as it shards the rest.
    let weights = sharded((params, experts), w, p.zero >= 3);
    let gradients = sharded((trained, trained_experts), g, p.zero >= 2);
    let mut optimizer = if plan.framework() == Framework::Planc {
        // planc's runtime shards Adam's moments under ZeRO but keeps the fp32 master
        // weights whole: each rank updates its shard into the one flat buffer, which the
        // ZeRO gather then reads (`runtime/src/train/update.rs`). Its SGD keeps no
        // momentum.
        let moments = if plan.train.optimizer == Optimizer::Sgd {
            0.0
        } else {
            moments
        };
        sharded((trained, trained_experts), moments, p.zero >= 1) + trained * master
    } else {
        sharded((trained, trained_experts), o, p.zero >= 1)
    };
    let mut weights_on_gpu = weights;
    let mut gradients = gradients;
    if p.offload != Offload::None {
        optimizer = 0.0;
        gradients = offloaded_gradients(plan, gradients);
    }
    if p.offload == Offload::Params {
        weights_on_gpu = 0.0;
    }
    let per_layer = stage_layer_activation_bytes(plan, stage);
    // A frozen prefix's layers keep nothing (no gradient flows there): the stage keeps its
    // trained layers' share of what it holds in flight (exact for 1F1B; under interleaving
    // the frozen layers sit in particular chunks, which the share averages over).
    let layers = plan.stage_layers(stage);
    let (frozen_moe, frozen_dense) = plan.stage_frozen_layers(stage);
    let trained_share = if layers == 0 {
        0.0
    } else {
        (layers - frozen_moe - frozen_dense) as f64 / layers as f64
    };
    let mut activations = per_layer * in_flight_layers(plan, stage, micro_batches) * trained_share;
    let elem = plan.train.precision.bytes();
    // In 128 bits: three counts of up to 2^24 overflow 64.
    let sbh =
        (u128::from(m.seq_len / p.cp) * u128::from(p.micro_batch) * u128::from(m.hidden)) as f64;
    if p.recompute == Recompute::Full && trained_share > 0.0 {
        // One layer's full activations exist while it is recomputed.
        let mut full = plan.clone();
        full.parallel.recompute = Recompute::Selective;
        activations += layer_activation_bytes(&full);
    }
    if stage == 0 && plan.train.dropout > 0.0 && plan.train.method.trains_ends() {
        // The embedding's dropout output and mask, per micro-batch in flight (without
        // dropout the embedding output is the first layer's input, counted there). A frozen
        // embedding needs no gradient through its dropout.
        let shard = if p.sequence_parallel {
            p.tp as f64
        } else {
            1.0
        };
        activations += 1.5 * sbh * elem / shard * in_flight(plan, 0, micro_batches);
    }
    if stage == p.pp - 1 {
        // The final norm's input. The logits are held in the training precision only while
        // the fused cross-entropy turns them into their gradient (planc's runtime, Megatron's
        // --cross-entropy-loss-fusion): transient, below.
        activations += 2.0 * sbh / p.tp as f64;
    }
    let mut other = RUNTIME_OVERHEAD_BYTES;
    if stage == p.pp - 1 {
        let s_b = (m.seq_len / p.cp * p.micro_batch) as f64;
        other += elem * s_b * m.vocab as f64 / p.tp as f64;
    }
    if plan.train.attention == Attention::Standard {
        // Backward's gradient of one layer's s×s scores, alive while that layer runs.
        let a = m.heads as f64;
        other += elem * a * (m.seq_len / p.cp * m.seq_len * p.micro_batch) as f64 / p.tp as f64;
    }
    if p.zero >= 3 {
        // Gathered parameters of the layer in use and the one prefetched.
        let lp = layer_params(m);
        other += 2.0 * lp.total(m.experts / p.ep.max(1)) / p.tp as f64 * w;
    }
    if super::fp8::on(plan) {
        // The fp8 copies of the linear layers' weights and their transposes, cached for the
        // step: the stage's (ZeRO-3: the gathered layers', under `other`).
        let cache = super::fp8::WEIGHT_CACHE_BYTES * stage_linear_params(plan, stage);
        if p.zero >= 3 {
            let layers = plan.stage_layers(stage).max(1) as f64;
            other += 2.0 * cache / layers;
        } else {
            weights_on_gpu += cache;
        }
    }
    let total = weights_on_gpu + gradients + optimizer + activations + other;
    StageMemory {
        stage,
        weights_bytes: weights_on_gpu,
        gradients_bytes: gradients,
        optimizer_bytes: optimizer,
        activations_bytes: activations,
        other_bytes: other,
        total_bytes: total,
        params,
        trained_params: trained,
    }
}

/// DeepSpeed's `reduce_bucket_size` default (elements; planc's emitted `ds_config.json`
/// leaves it): the gradient buckets a ZeRO optimizer reduces through.
pub const DEEPSPEED_REDUCE_BUCKET: f64 = 5e8;

/// The gradients an offloaded optimizer leaves on the GPU, of `sharded` bytes it would hold
/// there otherwise. The host steps the shard, and its gradients live beside it:
/// - DeepSpeed's ZeRO-Offload copies each reduced partition into the CPU optimizer's fp32
///   gradients (Ren et al. 2021, ZeRO-Offload, §4: gradients and optimizer states on the
///   CPU), keeping on the GPU only its reduction buckets of `reduce_bucket_size` elements
///   in the training precision, two of them where `overlap_comm` double-buffers ZeRO-1/2's
///   (`stage_1_and_2.py`'s `ipg_buffer`), one under ZeRO-3;
/// - FSDP2's `CPUOffloadPolicy` (PyTorch's and torchtitan's jobs) moves each sharded
///   gradient to the host after its reduce-scatter;
/// - Megatron-Core's CPU optimizer copies the main gradients to the host but reduces them
///   in its GPU buffer first, which stays.
fn offloaded_gradients(plan: &Plan, sharded: f64) -> f64 {
    match plan.framework() {
        Framework::Deepspeed => {
            let buckets = if plan.parallel.zero >= 3 { 1.0 } else { 2.0 };
            let bucket = buckets * DEEPSPEED_REDUCE_BUCKET * plan.train.precision.bytes();
            sharded.min(bucket)
        }
        Framework::Torch | Framework::Torchtitan => 0.0,
        _ => sharded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;

    /// GPT-3 175B on 64 A100s as in Korthikanti et al. (tp 8, pp 8, dropout 0.1 as the
    /// paper trains), with knobs to vary.
    fn gpt3(parallel: &str, train: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 8, gpus_per_node = 8, gpu = A100_SXM_80GB
                inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s, latency = 5 us }} }}
             model gpt3 {{ preset = \"gpt3-175b\" }}
             train {{ global_batch = 64, precision = bf16, optimizer = adam, dropout = 0.1 {train} }}
             parallel {{ tp = 8, pp = 8, dp = auto, micro_batch = 1 {parallel} }}"
        );
        let checked = check_source("t.tp", &text);
        checked
            .plan
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
    }

    const S: f64 = 2048.0;
    const H: f64 = 12288.0;
    const A: f64 = 96.0;
    const T: f64 = 8.0;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs()
    }

    #[test]
    fn an_offloaded_optimizer_keeps_its_gradients_where_the_framework_does() {
        let plan = |framework: &str, zero: u64, offload: &str| {
            let text = format!(
                "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = A100_SXM_80GB }}
                 model m {{ preset = \"llama3-70b\" }}
                 train {{ global_batch = 64, precision = bf16, optimizer = adamw }}
                 parallel {{ tp = 1, pp = 1, dp = 8, micro_batch = 1, zero = {zero},
                             recompute = full, offload = {offload} }}
                 job j {{ framework = {framework} }}"
            );
            check_source("t.tp", &text).plan.expect("a plan")
        };
        let grads = |p: &Plan| stage_memory(p, 0, 8).gradients_bytes;
        let on_gpu = grads(&plan("deepspeed", 3, "none"));
        assert!(on_gpu > 30e9, "{on_gpu}: ZeRO-3's fp32 shard of 70B over 8");
        // DeepSpeed: its one ZeRO-3 bucket of 5e8 bf16 elements; two under ZeRO-2.
        assert_eq!(grads(&plan("deepspeed", 3, "optimizer")), 1e9);
        assert_eq!(grads(&plan("deepspeed", 2, "optimizer")), 2e9);
        // FSDP2 moves the sharded gradients to the host; Megatron's buffer stays.
        assert_eq!(grads(&plan("torch", 3, "params")), 0.0);
        let megatron = plan("megatron", 1, "optimizer");
        assert_eq!(grads(&megatron), grads(&plan("megatron", 1, "none")));
    }

    #[test]
    fn the_gradient_buffer_takes_the_grad_dtype() {
        // Megatron-LM keeps bf16 training's gradients in fp32 unless told otherwise;
        // NeMo's large recipes keep them in bf16 (`grad_dtype = bf16`).
        let fp32 = gpt3(", zero = 1", "");
        let bf16 = gpt3(", zero = 1, grad_dtype = bf16", "");
        let (a, b) = (stage_memory(&fp32, 3, 64), stage_memory(&bf16, 3, 64));
        assert!(close(a.gradients_bytes, 4.0 * a.params, 1e-12));
        assert!(close(b.gradients_bytes, 2.0 * b.params, 1e-12));
        assert_eq!(a.optimizer_bytes, b.optimizer_bytes);
        assert!(close(a.total_bytes - b.total_bytes, 2.0 * a.params, 1e-12));
        // The reduction follows the buffer unless written.
        assert_eq!(bf16.reduce_bytes(), 2.0);
    }

    #[test]
    fn the_optimizer_state_takes_the_optimizer_dtype() {
        // Megatron-LM's 12 bytes (fp32 master and moments) sharded over dp; NeMo's
        // distributed fused Adam keeps 2 + 8 with remainders, and 4 in bf16.
        let state = |dtype: &str| {
            let mut plan = gpt3(&format!(", zero = 1{dtype}"), "");
            plan.parallel.dp = 4;
            let m = stage_memory(&plan, 3, 64);
            m.optimizer_bytes / m.params
        };
        assert!(close(state(""), 12.0 / 4.0, 1e-12));
        assert!(close(state(", optimizer_dtype = fp32"), 12.0 / 4.0, 1e-12));
        assert!(close(
            state(", optimizer_dtype = fp32_remainders"),
            10.0 / 4.0,
            1e-12
        ));
        assert!(close(state(", optimizer_dtype = bf16"), 4.0 / 4.0, 1e-12));
    }

    #[test]
    fn a_middle_stage_holds_its_layers_split_by_tp() {
        let plan = gpt3(", sequence_parallel = true", "");
        // 12 layers of 12h² + 13h parameters; the two layer norms (4h) are not split by tp.
        let per_layer = (12.0 * H * H + 9.0 * H) / T + 4.0 * H;
        assert!(close(stage_params(&plan, 3), 12.0 * per_layer, 1e-9));
        // The first stage adds the vocabulary-parallel embedding (and positions).
        let embed = 51200.0 * H / T;
        assert!(stage_params(&plan, 0) > 12.0 * per_layer + embed);
    }

    #[test]
    fn uneven_stages_hold_their_own_layers_and_in_flight_activations() {
        // 96 layers over 8 stages as 9 + 6 × 13 + 9; dp = 1, so 64 micro-batches.
        let plan = gpt3(
            ", sequence_parallel = true, recompute = selective, first_stage_layers = 9, last_stage_layers = 9",
            "",
        );
        assert_eq!(
            (0..8).map(|s| plan.stage_layers(s)).collect::<Vec<_>>(),
            [9, 13, 13, 13, 13, 13, 13, 9]
        );
        let per_layer = (12.0 * H * H + 9.0 * H) / T + 4.0 * H;
        let vocab_h = 51200.0 * H / T;
        // Middle: 13 layers. First: 9 layers, the word embedding split by tp and the
        // learned positions (replicated). Last: 9 layers, the final layer norm and the
        // tied output layer split by tp.
        assert!(close(stage_params(&plan, 3), 13.0 * per_layer, 1e-12));
        assert!(close(
            stage_params(&plan, 0),
            9.0 * per_layer + vocab_h + S * H,
            1e-12
        ));
        assert!(close(
            stage_params(&plan, 7),
            9.0 * per_layer + 2.0 * H + vocab_h,
            1e-12
        ));
        // Activations, TP + SP + selective: 34·sbh/t bytes per layer and micro-batch;
        // stage i of 1F1B holds 8 − i micro-batches.
        let layer = 34.0 * S * H / T;
        let act = |s: u64| stage_memory(&plan, s, 64).activations_bytes;
        assert!(close(act(3), layer * 13.0 * 5.0, 1e-12));
        // First: 9 layers × 8 in flight, plus the embedding output and dropout mask
        // (1.5·sbh elements of 2 bytes, split by SP) per micro-batch.
        let embedding = 1.5 * S * H * 2.0 / T;
        assert!(close(act(0), (layer * 9.0 + embedding) * 8.0, 1e-12));
        // Last: 9 layers × 1 in flight and the final norm's input; the logits of one
        // micro-batch (2 bytes, split by tp) are transient, under `other`.
        assert!(close(act(7), layer * 9.0 + 2.0 * S * H / T, 1e-12));
        let logits = 2.0 * S * 51200.0 / T;
        let other = |s: u64| stage_memory(&plan, s, 64).other_bytes;
        assert!(close(other(7) - other(3), logits, 1e-12));
        // Against the even split (12 layers each), the first stage sheds 3 of its 12
        // layers' activations in every one of its 8 micro-batches.
        let even = gpt3(", sequence_parallel = true, recompute = selective", "");
        let even_act = stage_memory(&even, 0, 64).activations_bytes;
        assert!(close(even_act - act(0), layer * 3.0 * 8.0, 1e-12));
    }

    #[test]
    fn state_bytes_follow_megatron_18_bytes_and_the_distributed_optimizer() {
        let plan = gpt3(", sequence_parallel = true, zero = 0", "");
        let m = stage_memory(&plan, 3, 64);
        let p = stage_params(&plan, 3);
        assert!(close(
            m.weights_bytes + m.gradients_bytes + m.optimizer_bytes,
            18.0 * p,
            1e-12
        ));
        // zero = 1 (distributed optimizer) over dp: 6 + 12/dp bytes; dp is 1 here, so take
        // 128 nodes' worth of data parallelism instead.
        let mut sharded = plan.clone();
        sharded.parallel.dp = 16;
        sharded.parallel.zero = 1;
        let m = stage_memory(&sharded, 3, 64);
        assert!(close(
            m.weights_bytes + m.gradients_bytes + m.optimizer_bytes,
            (6.0 + 12.0 / 16.0) * p,
            1e-12
        ));
        sharded.parallel.zero = 3;
        let m = stage_memory(&sharded, 3, 64);
        assert!(close(
            m.weights_bytes + m.gradients_bytes + m.optimizer_bytes,
            18.0 / 16.0 * p,
            1e-12
        ));
    }

    #[test]
    fn the_experts_state_is_sharded_over_their_own_data_parallel_group() {
        // Mixtral 8x7B, pp 4 over 64 GPUs: dp 16, ep 8, so each expert's weights live on
        // 16 / 8 = 2 ranks, and the distributed optimizer shards their state over those 2,
        // the rest over 16 (Megatron-Core's expert data-parallel group).
        let text = "cluster c { nodes = 8, gpus_per_node = 8, gpu = H100_SXM_80GB
                inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s } }
             model m { preset = \"mixtral-8x7b\" }
             train { global_batch = 256, precision = bf16, optimizer = adamw }
             parallel { tp = 1, pp = 4, dp = 16, ep = 8, micro_batch = 1, zero = 1 }";
        let c = check_source("t.tp", text);
        let plan = c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics));
        let params = stage_params(&plan, 1);
        let experts = stage_expert_params(&plan, 1);
        // Eight layers of one expert each: 3 · 4096 · 14336 parameters an expert.
        assert!(close(experts, 8.0 * 3.0 * 4096.0 * 14336.0, 1e-12));
        let m = stage_memory(&plan, 1, 16);
        let want = (params - experts) * 12.0 / 16.0 + experts * 12.0 / 2.0;
        assert!(
            close(m.optimizer_bytes, want, 1e-12),
            "{}",
            m.optimizer_bytes
        );
    }

    #[test]
    fn without_dropout_no_masks_and_only_the_softmax_output_are_kept() {
        let sbh = S * H;
        let no_dropout = |parallel: &str, train: &str| {
            let mut p = gpt3(parallel, train);
            p.train.dropout = 0.0;
            p
        };
        // 34 − 2 (the two 1-byte masks): 32·sbh/t with TP + SP.
        let plan = no_dropout(", sequence_parallel = true, recompute = selective", "");
        assert!(close(layer_activation_bytes(&plan), 32.0 * sbh / T, 1e-12));
        // Standard attention keeps the softmax output only: 2as/h instead of 5as/h.
        let plan = no_dropout(
            ", sequence_parallel = true, recompute = none",
            ", attention = standard",
        );
        let want = sbh * (32.0 / T + 2.0 * A * S / (H * T));
        assert!(close(layer_activation_bytes(&plan), want, 1e-12));
    }

    #[test]
    fn grouped_key_value_heads_are_stored_grouped_except_by_plancs_own_runtime() {
        // Llama 3.2 1B's shape: 32 query heads of 64, 8 key/value heads, tp 2.
        let text = |job: &str| {
            format!(
                "cluster c {{ nodes = 1, gpus_per_node = 2, gpu = H200_SXM_141GB }}
                 model m {{ layers = 16, hidden = 2048, heads = 32, kv_heads = 8, ffn_hidden = 8192,
                            vocab = 128256, seq_len = 2048, mlp = swiglu, norm = rmsnorm, position = rope }}
                 train {{ global_batch = 4, precision = bf16, optimizer = adamw, attention = flash }}
                 parallel {{ tp = 2, pp = 1, dp = 1, micro_batch = 4, recompute = none }}
                 {job}"
            )
        };
        let plan = |job: &str| {
            let c = check_source("t.tp", &text(job));
            c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics))
        };
        let grouped = layer_activation_bytes(&plan(""));
        let repeated = layer_activation_bytes(&plan("job { framework = planc }"));
        // K and V for 32 − 8 more heads of 64, 2 bytes each, over 2048 × 4 tokens, split
        // over tp 2.
        let more = 2.0 * (32.0 - 8.0) * 64.0 * 2048.0 * 4.0 * 2.0 / 2.0;
        assert!(
            close(repeated - grouped, more, 1e-12),
            "{grouped} {repeated}"
        );
    }

    #[test]
    fn activations_per_layer_match_korthikanti_table_2() {
        let sbh = S * H; // b = 1
                         // TP + SP + selective recompute: 34·sbh/t.
        let plan = gpt3(", sequence_parallel = true, recompute = selective", "");
        assert!(close(layer_activation_bytes(&plan), 34.0 * sbh / T, 1e-12));
        // TP without SP: sbh·(10 + 24/t) (flash attention keeps no s×s scores).
        let plan = gpt3(", recompute = selective", "");
        assert!(close(
            layer_activation_bytes(&plan),
            sbh * (10.0 + 24.0 / T),
            1e-12
        ));
        // Standard attention, no recompute, TP + SP: sbh·(34/t + 5as/(ht)).
        let plan = gpt3(
            ", sequence_parallel = true, recompute = none",
            ", attention = standard",
        );
        let want = sbh * (34.0 / T + 5.0 * A * S / (H * T));
        assert!(close(layer_activation_bytes(&plan), want, 1e-12));
        // Full recompute keeps the layer input only: 2sbh, split by SP.
        let plan = gpt3(", sequence_parallel = true, recompute = full", "");
        assert!(close(layer_activation_bytes(&plan), 2.0 * sbh / T, 1e-12));
    }

    #[test]
    fn micro_batches_in_flight_per_schedule() {
        let mut plan = gpt3(", sequence_parallel = true", "");
        // 1F1B: stage i holds pp − i micro-batches; never more than there are.
        assert_eq!(in_flight(&plan, 0, 64), 8.0);
        assert_eq!(in_flight(&plan, 7, 64), 1.0);
        assert_eq!(in_flight(&plan, 0, 3), 3.0);
        plan.parallel.schedule = Schedule::Gpipe;
        assert_eq!(in_flight(&plan, 5, 64), 64.0);
        // Interleaved, pp 8, vpp 3, rank 0: (8−0−1)·2 + (3−1)·8 + 1 = 31 chunks of 1/3 of
        // the stage's layers.
        plan.parallel.schedule = Schedule::Interleaved;
        plan.parallel.vpp = 3;
        assert!(close(in_flight(&plan, 0, 64), 31.0 / 3.0, 1e-12));
    }
}
