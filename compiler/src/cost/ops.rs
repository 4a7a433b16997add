//! One transformer layer lowered to the operations one GPU runs for one micro-batch.
//!
//! This list is the unit every later consumer shares: the closed-form time model sums it,
//! the simulator will schedule it on compute and communication streams, and the runtime
//! will execute it with cuBLAS and NCCL. Sizes are per GPU (after tp/sp/cp/ep sharding).

use super::comm::Collective;
pub use super::op_id::OpId;
use super::standard_attention::Core;
pub use super::time::FusedKernel;
use crate::plan::{
    planc_fuses_gelu, Attention, AttentionKernel, Framework, LoraTarget, Mlp, Plan, Position,
    Recompute,
};

/// Which parallel group a collective runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Tp,
    Cp,
    Ep,
}

#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// A matrix product `m×k · k×n`.
    Gemm { m: f64, n: f64, k: f64 },
    /// `count` products of `m×k · k×n` in one grouped kernel (an MoE layer's local experts,
    /// each over the tokens routed to it): many small products, each at the efficiency of
    /// its own shape, not one large one.
    GroupedGemm { count: f64, m: f64, n: f64, k: f64 },
    /// The attention core (scores, softmax, weighted sum) as one fused kernel: its causal
    /// forward FLOPs, the sequence and head size a measured rate depends on, and whether
    /// planc's own kernel runs it (`job.framework = planc`: a device profile measured that
    /// one) or a FlashAttention-class kernel (the other frameworks).
    FlashAttention {
        flops: f64,
        seq: f64,
        head_dim: f64,
        kernel: FusedKernel,
    },
    /// The standard attention core: its batched products and the memory passes over the
    /// scores between them, as whoever runs the plan executes them
    /// ([`super::standard_attention`]), forward and backward.
    StandardAttention(Core),
    /// A memory-bound kernel moving `bytes` through HBM (additions, rope, dropout, the loss).
    Memory { bytes: f64 },
    /// A norm over rows of `width`, moving `bytes` in forward (the rows read and written):
    /// a row reduction, priced as a profile measured the kernel where it measured the one
    /// that runs (`planc_kernel`: planc's own), else as a memory-bound kernel.
    Norm {
        bytes: f64,
        width: f64,
        planc_kernel: bool,
    },
    /// The MLP's activation `mlp` over rows of `width` (F on this GPU), moving `bytes` in
    /// forward ([`activation_bytes`]): priced as a profile measured the kernel where it
    /// measured the one that runs (`planc_kernel`: planc's own), else as a memory-bound
    /// kernel.
    Activation {
        bytes: f64,
        width: f64,
        mlp: Mlp,
        planc_kernel: bool,
    },
    /// A change of layout planc's runtime makes around its attention kernels, which take
    /// q, k and v heads-major: `bytes` in forward, `backward_bytes` in backward (not
    /// twice the forward's, as a kernel's backward usually is).
    Layout { bytes: f64, backward_bytes: f64 },
    /// A GELU MLP's activation applied in its products' epilogues (`planc run` in 16-bit,
    /// `plan::planc_fuses_gelu`): what the up product writes beyond its output (GELU's
    /// input, kept for backward), `bytes`, and what the down product's input gradient reads
    /// (the same), `backward_bytes`; the activation's own passes are gone.
    Epilogue { bytes: f64, backward_bytes: f64 },
    /// fp8 casts (and transposes) around a product that runs in fp8 (`cost::fp8`): `bytes`
    /// in forward (its input, and its share of the weights' cast), `backward_bytes` in
    /// backward (its output gradient).
    Cast { bytes: f64, backward_bytes: f64 },
    /// A collective over `bytes`: the full buffer the group exchanges, but for an
    /// all-to-all the buffer each rank sends (its own, nccl-tests' size).
    Collective {
        op: Collective,
        bytes: f64,
        group: Group,
    },
    /// Exchange of keys and values around the context-parallel ring, overlapped with the
    /// attention core.
    RingExchange { bytes: f64, steps: u64 },
    /// An operation a framework runs unfused (`job.kernels = eager`): its kernels forward
    /// and backward, each priced on its own (`cost::eager`).
    Unfused(super::eager::Passes),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub id: OpId,
    pub kind: OpKind,
}

impl Op {
    /// The operation's name in reports ([`OpId::name`]).
    pub fn name(&self) -> &'static str {
        self.id.name()
    }
}

fn op(id: OpId, kind: OpKind) -> Op {
    Op { id, kind }
}

/// The forward operations of one layer for one micro-batch on one GPU: the model's usual
/// layer, a mixture of experts in an MoE model.
pub fn layer_forward(plan: &Plan) -> Vec<Op> {
    layer_ops(plan, plan.model.is_moe())
}

/// The forward operations of a layer with a dense MLP of `ffn_hidden` (an MoE model's
/// `first_dense_layers`; any layer of a dense model).
pub fn dense_layer_forward(plan: &Plan) -> Vec<Op> {
    layer_ops(plan, false)
}

/// The busiest expert-parallel rank's routed tokens over the balanced load, which the
/// grouped products and the all-to-all's receiving side carry (the slowest rank paces the
/// group: the all-to-all waits for it).
///
/// - `model.capacity_factor = c`: every expert's buffer padded to `c` times the balanced
///   load (GShard; Switch Transformer, Fedus et al. 2021, §2.2; Megatron-Core's
///   `--moe-expert-capacity-factor` with `--moe-pad-expert-input-to-capacity`): `c`.
/// - else `model.moe_imbalance`, a measured figure the plan states.
/// - else dropless routing whose router is balanced in expectation (what the load-balancing
///   loss aims at): each rank's load is then a binomial draw of the group's routed tokens,
///   and the largest of `ep` of them exceeds the mean `μ` by about `√(2 μ ln ep)` (balls into
///   bins, Raab & Steger 1998, m ≫ n log n), with `μ` the tokens × top_k an expert-parallel
///   rank computes. A lower bound: real routers are less even than their expectation.
pub fn expert_load_factor(plan: &Plan) -> f64 {
    let m = &plan.model;
    let p = &plan.parallel;
    if let Some(c) = m.capacity_factor {
        return c;
    }
    if let Some(x) = m.moe_imbalance {
        return x;
    }
    if p.ep <= 1 {
        return 1.0;
    }
    let ep = p.ep as f64;
    let mean = p.micro_batch as f64 * (m.seq_len / p.cp) as f64 * m.top_k as f64;
    1.0 + (2.0 * ep.ln() * (1.0 - 1.0 / ep) / mean.max(1.0)).sqrt()
}

fn layer_ops(plan: &Plan, moe: bool) -> Vec<Op> {
    let m = &plan.model;
    let p = &plan.parallel;
    let e = plan.train.precision.bytes();
    let t = p.tp as f64;
    let h = m.hidden as f64;
    // The query heads' width, `hidden` unless a head is not hidden/heads wide (Qwen3).
    let q = m.attention_width() as f64;
    let kv = m.kv_width() as f64;
    let f = m.ffn_hidden as f64;
    let s_full = m.seq_len as f64;
    let s = s_full / p.cp as f64;
    let tokens = p.micro_batch as f64 * s;
    let sp = if p.sequence_parallel { t } else { 1.0 };
    let act = tokens * h * e; // one activation tensor of the layer
    let planc_kernel = plan.framework() == Framework::Planc;
    let mut ops = Vec::new();
    let (gather, scatter) = if p.sequence_parallel {
        (Some(Collective::AllGather), Collective::ReduceScatter)
    } else {
        (None, Collective::AllReduce)
    };
    let tp_comm = |ops: &mut Vec<Op>, name, c: Collective| {
        if p.tp > 1 {
            // The norm's output is gathered in fp8 before the fp8 products (`cost::fp8`).
            let bytes = if c == Collective::AllGather {
                act / e * super::fp8::gathered_bytes(plan)
            } else {
                act
            };
            ops.push(op(
                name,
                OpKind::Collective {
                    op: c,
                    bytes,
                    group: Group::Tp,
                },
            ));
        }
    };

    ops.push(op(
        OpId::InputNorm,
        OpKind::Norm {
            bytes: 2.0 * act / sp,
            width: h,
            planc_kernel,
        },
    ));
    if let Some(g) = gather {
        tp_comm(&mut ops, OpId::AttentionAllGather, g);
    }
    ops.push(op(
        OpId::QkvProj,
        OpKind::Gemm {
            m: tokens,
            n: (q + 2.0 * kv) / t,
            k: h,
        },
    ));
    for target in [LoraTarget::Q, LoraTarget::K, LoraTarget::V] {
        adapter(&mut ops, plan, target, tokens, 1.0, m.ffn_hidden as f64);
    }
    if planc_kernel {
        // planc's split reads the fused projection and writes q, k and v [B, H, T, D]
        // (keys and values repeated for each query head of a group, rope applied on the
        // way); backward sums them back into the fused gradient, unless the fused
        // attention wrote it there itself (every head its own key/value head, no rope).
        let fused = tokens * (q + 2.0 * kv) / t * e;
        let split = 3.0 * tokens * q / t * e;
        let into_fused = plan.train.attention == Attention::Flash
            && m.kv_heads == m.heads
            && m.position != Position::Rope;
        ops.push(op(
            OpId::QkvSplit,
            OpKind::Layout {
                bytes: fused + split,
                backward_bytes: if into_fused { 0.0 } else { fused + split },
            },
        ));
    } else if m.position == Position::Rope {
        ops.push(op(
            OpId::Rope,
            OpKind::Memory {
                bytes: 2.0 * tokens * (q + kv) / t * e,
            },
        ));
    }
    if p.cp > 1 {
        ops.push(op(
            OpId::CpKvExchange,
            OpKind::RingExchange {
                bytes: 2.0 * tokens * kv / t * e,
                steps: p.cp - 1,
            },
        ));
    }
    let heads = m.heads as f64 / t;
    let d = m.head_dim as f64;
    match plan.train.attention {
        Attention::Flash => {
            // Causal masking lets the fused kernel skip the upper triangle, and a sliding
            // window the blocks behind it.
            let flops = 4.0 * p.micro_batch as f64 * heads * s * d * fused_keys(m, s_full);
            ops.push(op(
                OpId::Attention,
                OpKind::FlashAttention {
                    flops,
                    seq: s_full,
                    head_dim: d,
                    kernel: fused_kernel(plan),
                },
            ));
        }
        Attention::Standard => {
            ops.push(op(
                OpId::AttentionCore,
                OpKind::StandardAttention(Core {
                    batch_heads: p.micro_batch as f64 * heads,
                    seq: s,
                    seq_full: s_full,
                    head_dim: d,
                    element: e,
                    dropout: plan.train.dropout > 0.0,
                    planc: planc_kernel,
                    recomputes_probs: planc_kernel && p.recompute != Recompute::None,
                }),
            ));
            if planc_kernel {
                // The weighted sum's heads back to rows, and the output gradient's to heads.
                ops.push(op(
                    OpId::AttentionHeadsMerge,
                    OpKind::Layout {
                        bytes: 2.0 * tokens * q / t * e,
                        backward_bytes: 2.0 * tokens * q / t * e,
                    },
                ));
            }
        }
    }
    ops.push(op(
        OpId::AttentionOutProj,
        OpKind::Gemm {
            m: tokens,
            n: h,
            k: q / t,
        },
    ));
    adapter(
        &mut ops,
        plan,
        LoraTarget::O,
        tokens,
        1.0,
        m.ffn_hidden as f64,
    );
    tp_comm(&mut ops, OpId::AttentionReduce, scatter);
    ops.push(op(
        OpId::AttentionResidual,
        OpKind::Memory {
            bytes: 4.0 * act / sp,
        },
    ));
    ops.push(op(
        OpId::MlpNorm,
        OpKind::Norm {
            bytes: 2.0 * act / sp,
            width: h,
            planc_kernel,
        },
    ));
    if moe {
        moe_mlp(&mut ops, plan, tokens, planc_kernel);
        // Under sequence parallelism the experts' tensor-parallel exchanges ran on their
        // rows; without it, the partial sums of every output are reduced here as a dense
        // MLP's are (after the shared experts').
        if !p.sequence_parallel {
            tp_comm(&mut ops, OpId::MlpReduce, scatter);
        }
    } else {
        if let Some(g) = gather {
            tp_comm(&mut ops, OpId::MlpAllGather, g);
        }
        mlp_products(&mut ops, plan, Mlps::Dense, tokens, f, planc_kernel);
        tp_comm(&mut ops, OpId::MlpReduce, scatter);
    }
    ops.push(op(
        OpId::MlpResidual,
        OpKind::Memory {
            bytes: 4.0 * act / sp,
        },
    ));
    if super::fp8::on(plan) {
        let casts = super::fp8::casts(plan, &ops);
        ops.extend(casts);
    }
    match super::eager::path(plan) {
        Some(path) => super::eager::layer(plan, path, ops),
        None => ops,
    }
}

/// Which dense MLP [`mlp_products`] lists: a layer's, or an MoE layer's shared experts.
#[derive(Clone, Copy)]
enum Mlps {
    Dense,
    Shared,
}

/// A dense MLP of inner size `f` over `rows` tokens (split by tp): its up product (gate
/// and up together for SwiGLU), activation and down product, `which`'s ids.
/// Key tiles a fused attention kernel takes at once (FlashAttention-2's and cuDNN's
/// `kBlockN` at head sizes 64-128): the kernel computes whole tiles and masks inside them.
const ATTENTION_KEY_TILE: f64 = 128.0;

/// What a block of queries costs besides its key tiles (loading the queries, writing the
/// output and its statistics, the backward's extra passes), in keys: 3.25 tiles. Measured
/// with runtime/tests/gpu/window_attention.py on the lent H200 (FlexAttention's kernels,
/// their GPU time under torch.profiler, forward and backward): windowed layers of 128-4096
/// keys over 4096 and 8192 tokens ran (k + 416) / (s / 2 + 416) of a causal layer's time,
/// within 5 % at heads of 64 and of 128, where k is the keys their tiles hold.
const ATTENTION_BLOCK_FIXED_KEYS: f64 = 3.25 * ATTENTION_KEY_TILE;

/// Keys a query's row of the fused kernel computes, on average over the queries and the
/// layers of `m` over `seq` tokens, as a causal layer's rate prices them: `seq / 2` under
/// the causal mask in a full layer (the kernel skips the tiles above the diagonal, and the
/// measured rates hold its fixed costs). In a layer of a `w`-token window a query attends
/// `w - w^2 / (2 seq)` keys, rounded out to the tiles a block of queries touches (one more
/// than the window), and its block pays the same fixed cost as a causal layer's over far
/// fewer keys.
fn fused_keys(m: &crate::plan::Model, seq: f64) -> f64 {
    let full = seq / 2.0;
    let fixed = ATTENTION_BLOCK_FIXED_KEYS;
    let in_window = m.sliding_window.map_or(full, |w| {
        let w = (w as f64).min(seq);
        let tiles = w - w * w / (2.0 * seq) + ATTENTION_KEY_TILE;
        ((tiles + fixed) * full / (full + fixed)).min(full)
    });
    m.mean_over_layers(full, in_window)
}

fn mlp_products(ops: &mut Vec<Op>, plan: &Plan, which: Mlps, rows: f64, f: f64, planc: bool) {
    let m = &plan.model;
    let t = plan.parallel.tp as f64;
    let e = plan.train.precision.bytes();
    let h = m.hidden as f64;
    let up = match m.mlp {
        Mlp::Gelu => f,
        Mlp::Swiglu => 2.0 * f,
    };
    let (up_name, act_name, down_name) = match which {
        Mlps::Dense => (OpId::MlpUpProj, OpId::MlpActivation, OpId::MlpDownProj),
        Mlps::Shared => (
            OpId::SharedUpProj,
            OpId::SharedActivation,
            OpId::SharedDownProj,
        ),
    };
    ops.push(op(
        up_name,
        OpKind::Gemm {
            m: rows,
            n: up / t,
            k: h,
        },
    ));
    for target in [LoraTarget::Gate, LoraTarget::Up] {
        adapter(ops, plan, target, rows, 1.0, f);
    }
    let dense = matches!(which, Mlps::Dense);
    let kind = if planc && dense && planc_fuses_gelu(plan.train.precision, m.mlp, m.hidden) {
        let aux = rows * f / t * e;
        OpKind::Epilogue {
            bytes: aux,
            backward_bytes: aux,
        }
    } else {
        OpKind::Activation {
            bytes: activation_bytes(m.mlp, rows, f / t, e),
            width: f / t,
            mlp: m.mlp,
            planc_kernel: planc,
        }
    };
    ops.push(op(act_name, kind));
    ops.push(op(
        down_name,
        OpKind::Gemm {
            m: rows,
            n: h,
            k: f / t,
        },
    ));
    adapter(ops, plan, LoraTarget::Down, rows, 1.0, f);
}

/// LoRA's adapter beside the product of `target` over `rows` tokens (`count` products of
/// them, each over its own rows, for an MoE layer's local experts), in an MLP of width `f`,
/// where the plan adapts that matrix (`cost::method`): `A·x` (rank wide), `B·(A·x)`, and
/// the scaled addition to the product's output (`method::ADAPTER_ADD_PASSES`). One GPU's
/// share: a column-parallel product's adapter reads its whole input and writes its 1/tp of
/// the output, a row-parallel one's (`o`, `down`) reads its 1/tp of the input; the
/// rank-wide partial sums' exchange is not priced. The adapters' products are thin
/// (rank-wide): the roofline prices them near the memory bound.
fn adapter(ops: &mut Vec<Op>, plan: &Plan, target: LoraTarget, rows: f64, count: f64, f: f64) {
    let Some(l) = plan.train.method.lora() else {
        return;
    };
    if !l.targets.contains(&target) || (target == LoraTarget::Gate && plan.model.mlp != Mlp::Swiglu)
    {
        return;
    }
    let t = plan.parallel.tp as f64;
    let e = plan.train.precision.bytes();
    let r = l.rank as f64;
    let (input, output) = super::method::target_shape(&plan.model, target, f);
    let row_parallel = matches!(target, LoraTarget::O | LoraTarget::Down);
    let k = if row_parallel { input / t } else { input };
    let product = |m: f64, n: f64, k: f64| {
        if count > 1.0 {
            OpKind::GroupedGemm { count, m, n, k }
        } else {
            OpKind::Gemm { m, n, k }
        }
    };
    ops.push(op(OpId::LoraA, product(rows, r, k)));
    ops.push(op(OpId::LoraB, product(rows, output / t, r)));
    ops.push(op(
        OpId::LoraAdd,
        OpKind::Memory {
            bytes: super::method::ADAPTER_ADD_PASSES * count * rows * output / t * e,
        },
    ));
}

/// The MLP of an MoE layer as Megatron-Core runs it (`MoELayer` with the all-to-all token
/// dispatcher, `MoEAlltoAllTokenDispatcher`), for `tokens` tokens of the tensor-parallel
/// group (before sequence-parallel sharding):
///
/// - the router (`h × E` product) and its softmax and top-k over this rank's own tokens
///   (under sequence parallelism, its 1/tp of them);
/// - the permutation of each token's `top_k` copies by expert, and the dispatch all-to-all
///   over the expert-parallel group: each rank sends its own routed tokens, an equal share
///   to each rank of the group;
/// - under sequence parallelism with tp > 1, an all-gather of the received rows over the
///   tensor-parallel group (the experts' weights are split by tp: expert tensor
///   parallelism = tp, Megatron-Core's default), so each rank computes every row routed
///   to its experts with its 1/tp of their width;
/// - the local experts' products (`experts / ep` of them, each over its own rows: a grouped
///   product), their activation, and the way back (reduce-scatter, combine all-to-all,
///   un-permutation weighted by the router's probabilities);
/// - the shared experts, one MLP of `shared_experts × expert_ffn_hidden` on every token
///   (Megatron-Core's `SharedExpertMLP`), with the dense MLP's tensor-parallel exchanges.
///
/// Rows that the experts compute and the all-to-all delivers carry
/// [`expert_load_factor`]: the slowest rank paces the group.
fn moe_mlp(ops: &mut Vec<Op>, plan: &Plan, tokens: f64, planc: bool) {
    let m = &plan.model;
    let p = &plan.parallel;
    let e = plan.train.precision.bytes();
    let t = p.tp as f64;
    let h = m.hidden as f64;
    let k = m.top_k as f64;
    let sp = p.sequence_parallel && p.tp > 1;
    let local = if sp { tokens / t } else { tokens };
    let load = expert_load_factor(plan);
    let experts_here = (m.experts / p.ep.max(1)).max(1) as f64;
    ops.push(op(
        OpId::Router,
        OpKind::Gemm {
            m: local,
            n: m.experts as f64,
            k: h,
        },
    ));
    // The logits in fp32 (Megatron-Core's router upcasts them): softmax read and written,
    // top-k read.
    ops.push(op(
        OpId::RouterTopk,
        OpKind::Memory {
            bytes: 3.0 * local * m.experts as f64 * 4.0,
        },
    ));
    let routed_here = local * k; // rows this rank sends
    let received = routed_here * load; // rows the busiest rank receives
                                       // Each token read once and written as its top_k copies; after the all-to-all the
                                       // received rows sorted by local expert (read and write) where there are several.
    let sort = if experts_here > 1.0 && p.ep > 1 {
        2.0 * received * h * e
    } else {
        0.0
    };
    ops.push(op(
        OpId::MoePermute,
        OpKind::Memory {
            bytes: (local + routed_here) * h * e + sort,
        },
    ));
    let a2a = |ops: &mut Vec<Op>, name| {
        if p.ep > 1 {
            ops.push(op(
                name,
                OpKind::Collective {
                    op: Collective::AllToAll,
                    bytes: received * h * e,
                    group: Group::Ep,
                },
            ));
        }
    };
    let tp_rows = |ops: &mut Vec<Op>, name, c| {
        if sp {
            ops.push(op(
                name,
                OpKind::Collective {
                    op: c,
                    bytes: received * t * h * e,
                    group: Group::Tp,
                },
            ));
        }
    };
    a2a(ops, OpId::MoeDispatch);
    tp_rows(ops, OpId::MoeTpAllGather, Collective::AllGather);
    // Rows on this rank's experts: every token's routed copies that land here, over the
    // tensor-parallel group (gathered, or held whole without sequence parallelism).
    let rows = tokens * k * load;
    let per_expert = rows / experts_here;
    let f = m.expert_ffn_hidden as f64;
    let up = match m.mlp {
        Mlp::Gelu => f,
        Mlp::Swiglu => 2.0 * f,
    };
    ops.push(op(
        OpId::ExpertUpProj,
        OpKind::GroupedGemm {
            count: experts_here,
            m: per_expert,
            n: up / t,
            k: h,
        },
    ));
    for target in [LoraTarget::Gate, LoraTarget::Up] {
        adapter(ops, plan, target, per_expert, experts_here, f);
    }
    ops.push(op(
        OpId::ExpertActivation,
        OpKind::Activation {
            bytes: activation_bytes(m.mlp, rows, f / t, e),
            width: f / t,
            mlp: m.mlp,
            planc_kernel: planc,
        },
    ));
    ops.push(op(
        OpId::ExpertDownProj,
        OpKind::GroupedGemm {
            count: experts_here,
            m: per_expert,
            n: h,
            k: f / t,
        },
    ));
    adapter(ops, plan, LoraTarget::Down, per_expert, experts_here, f);
    tp_rows(ops, OpId::MoeTpReduceScatter, Collective::ReduceScatter);
    a2a(ops, OpId::MoeCombine);
    // The top_k rows of each token read, weighted and summed into it.
    ops.push(op(
        OpId::MoeUnpermute,
        OpKind::Memory {
            bytes: (routed_here * load + local) * h * e + sort,
        },
    ));
    if m.shared_experts > 0 {
        let shared = (m.shared_experts * m.expert_ffn_hidden) as f64;
        let act = tokens * h * e;
        let tp_shared = |ops: &mut Vec<Op>, name, c| {
            if sp {
                ops.push(op(
                    name,
                    OpKind::Collective {
                        op: c,
                        bytes: act,
                        group: Group::Tp,
                    },
                ));
            }
        };
        tp_shared(ops, OpId::SharedAllGather, Collective::AllGather);
        mlp_products(ops, plan, Mlps::Shared, tokens, shared, planc);
        tp_shared(ops, OpId::SharedReduce, Collective::ReduceScatter);
    }
}

/// Bytes the MLP's activation moves in forward over `rows` rows of `width` (F) elements of
/// `e` bytes: GELU reads and writes F a row; SwiGLU reads its gate and up halves (2F) and
/// writes F. `planc calibrate` counts its activation points' bytes with this.
pub fn activation_bytes(mlp: Mlp, rows: f64, width: f64, e: f64) -> f64 {
    let per_element = match mlp {
        Mlp::Gelu => 2.0,
        Mlp::Swiglu => 3.0,
    };
    per_element * rows * width * e
}

/// The output layer and loss of the last stage, forward, for one micro-batch.
pub fn head_forward(plan: &Plan) -> Vec<Op> {
    let m = &plan.model;
    let p = &plan.parallel;
    let e = plan.train.precision.bytes();
    let t = p.tp as f64;
    let tokens = (p.micro_batch * m.seq_len / p.cp) as f64;
    let h = m.hidden as f64;
    let v = m.vocab as f64;
    let sp = if p.sequence_parallel { t } else { 1.0 };
    let mut ops = vec![op(
        OpId::FinalNorm,
        OpKind::Norm {
            bytes: 2.0 * tokens * h * e / sp,
            width: h,
            planc_kernel: plan.framework() == Framework::Planc,
        },
    )];
    if p.sequence_parallel && p.tp > 1 {
        ops.push(op(
            OpId::HeadAllGather,
            OpKind::Collective {
                op: Collective::AllGather,
                bytes: tokens * h * e,
                group: Group::Tp,
            },
        ));
    }
    ops.push(op(
        OpId::Logits,
        OpKind::Gemm {
            m: tokens,
            n: v / t,
            k: h,
        },
    ));
    ops.push(op(
        OpId::CrossEntropy,
        OpKind::Memory {
            bytes: cross_entropy_bytes(plan) * tokens * v / t,
        },
    ));
    match super::eager::path(plan) {
        Some(path) => super::eager::head(plan, path, ops),
        None => ops,
    }
}

/// Bytes per logit the loss moves in forward. Megatron-LM (and the frameworks that follow
/// it) upcast the vocab-parallel logits to fp32 and read, exponentiate and write them:
/// 3 × 4 bytes, and a backward of twice that. planc's own kernels work on the logits in
/// the storage type and write the gradient in place during forward (read + write; a third
/// pass, the shares' statistics, under tensor parallelism), leaving backward nothing to do:
/// see [`head_backward`].
fn cross_entropy_bytes(plan: &Plan) -> f64 {
    let e = plan.train.precision.bytes();
    match plan.framework() {
        Framework::Planc if plan.parallel.tp > 1 => 3.0 * e,
        Framework::Planc => 2.0 * e,
        _ => 3.0 * 4.0,
    }
}

/// The output layer's operations whose backward runs twice their forward work (the
/// products' input and weight gradients, the norm's): all of [`head_forward`] but a loss
/// that wrote its gradient during forward (planc's).
pub fn head_backward(plan: &Plan) -> Vec<Op> {
    let mut ops = head_forward(plan);
    if plan.framework() == Framework::Planc {
        ops.retain(|o| o.id != OpId::CrossEntropy);
    }
    ops
}

/// Bytes each bias gradient of the products among a layer's `ops` reads in backward: the
/// sum over tokens of the product's output gradient, one reduction per product with a bias (the frameworks fuse
/// the bias into the forward product, not its gradient into the backward ones). A
/// row-parallel product's bias sums this rank's tokens under sequence parallelism.
pub fn layer_bias_gradients(plan: &Plan, ops: &[Op]) -> Vec<f64> {
    // LoRA freezes the biases with the weights (`cost::method`).
    if !plan.model.bias || plan.train.method.lora().is_some() {
        return Vec::new();
    }
    let p = &plan.parallel;
    let sp = if p.sequence_parallel {
        p.tp as f64
    } else {
        1.0
    };
    let e = plan.train.precision.bytes();
    ops.iter()
        .filter_map(|o| match (o.id, &o.kind) {
            (OpId::QkvProj | OpId::MlpUpProj | OpId::SharedUpProj, OpKind::Gemm { m, n, .. }) => {
                Some(m * n * e)
            }
            (
                OpId::AttentionOutProj | OpId::MlpDownProj | OpId::SharedDownProj,
                OpKind::Gemm { m, n, .. },
            ) => Some(m * n * e / sp),
            // Each expert's bias sums its own rows (whole: the rows were gathered).
            (
                OpId::ExpertUpProj | OpId::ExpertDownProj,
                OpKind::GroupedGemm { count, m, n, .. },
            ) => Some(count * m * n * e),
            _ => None,
        })
        .collect()
}

/// The embedding lookup of the first stage, forward, for one micro-batch.
pub fn embedding_forward(plan: &Plan) -> Vec<Op> {
    let m = &plan.model;
    let p = &plan.parallel;
    let e = plan.train.precision.bytes();
    let tokens = (p.micro_batch * m.seq_len / p.cp) as f64;
    let act = tokens * m.hidden as f64 * e;
    let mut ops = vec![op(OpId::Embedding, OpKind::Memory { bytes: 2.0 * act })];
    if p.tp > 1 {
        let c = if p.sequence_parallel {
            Collective::ReduceScatter
        } else {
            Collective::AllReduce
        };
        ops.push(op(
            OpId::EmbeddingReduce,
            OpKind::Collective {
                op: c,
                bytes: act,
                group: Group::Tp,
            },
        ));
    }
    match super::eager::path(plan) {
        Some(path) => super::eager::embedding(plan, path, ops),
        None => ops,
    }
}

/// Whose fused attention `plan` runs: planc's own; the kernel `job.attention_kernel`
/// states; Megatron-Core's through Transformer Engine (cuDNN's on Hopper and later, where
/// the catalog measured it); or the other frameworks' FlashAttention-2 (PyTorch SDPA's
/// flash backend, flash-attn).
fn fused_kernel(plan: &Plan) -> FusedKernel {
    match (plan.framework(), plan.attention_kernel) {
        (Framework::Planc, _) => FusedKernel::Planc,
        (_, Some(AttentionKernel::Flash2)) => FusedKernel::FlashAttention2,
        (_, Some(AttentionKernel::Cudnn)) => FusedKernel::Cudnn,
        (_, Some(AttentionKernel::Triton)) => FusedKernel::Triton,
        (Framework::Megatron, None) if !plan.eager() => FusedKernel::Cudnn,
        (_, None) => FusedKernel::FlashAttention2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;

    /// The plan of a valid `text`.
    fn checked(text: &str) -> Plan {
        let checked = check_source("t.tp", text);
        checked
            .plan
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
    }

    fn plan(model: &str, attention: &str, framework: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }}
             model m {{ preset = \"{model}\" }}
             train {{ global_batch = 8, precision = bf16, attention = {attention} }}
             parallel {{ tp = 1, pp = 1, dp = 1, micro_batch = 8 }}
             job j {{ framework = {framework} }}"
        );
        checked(&text)
    }

    /// Mixtral 8x7B (seq 4096) on one node of eight, micro-batch 1, with `parallel` and
    /// `model` attributes added.
    fn mixtral(parallel: &str, model: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ preset = \"mixtral-8x7b\" {model} }}
             train {{ global_batch = 64, precision = bf16 }}
             parallel {{ pp = 1, micro_batch = 1, {parallel} }}"
        );
        checked(&text)
    }

    fn named(ops: &[Op], id: OpId) -> Vec<&OpKind> {
        ops.iter().filter(|o| o.id == id).map(|o| &o.kind).collect()
    }

    fn a2a_bytes(p: &Plan, id: OpId) -> f64 {
        match named(&layer_forward(p), id)[..] {
            [OpKind::Collective {
                op: Collective::AllToAll,
                bytes,
                group: Group::Ep,
            }] => *bytes,
            ref other => panic!("{id}: {other:?}"),
        }
    }

    /// GPT-2 (12 layers of 768, bias, GELU) on one GPU, micro-batch 16 of 1024, run by
    /// `framework` in `precision`.
    fn gpt2(precision: &str, framework: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H200_SXM_141GB }}
             model m {{ preset = \"gpt2-124m\" }}
             train {{ global_batch = 16, precision = {precision} }}
             parallel {{ micro_batch = 16 }}
             job {{ framework = {framework} }}"
        );
        checked(&text)
    }

    #[test]
    fn planc_runs_a_16_bit_gelu_in_its_products_epilogues() {
        // bf16: the activation is what the up product writes beyond its output (GELU's
        // input, kept) and what the down product's input gradient reads back, 16384 × 3072
        // × 2 bytes each way.
        let aux = 16384.0 * 3072.0 * 2.0;
        let ops = layer_forward(&gpt2("bf16", "planc"));
        assert_eq!(
            named(&ops, OpId::MlpActivation),
            [&OpKind::Epilogue {
                bytes: aux,
                backward_bytes: aux
            }]
        );
        // Its time runs inside the products, and the step by kind counts it there, as the
        // run's spans measure it.
        let epilogue = ops.iter().find(|o| o.id == OpId::MlpActivation).unwrap();
        assert_eq!(
            crate::cost::kinds::WorkKind::of_op(epilogue),
            crate::cost::kinds::WorkKind::Linear
        );
        // fp32 keeps planc's activation kernel; another framework its own activation; so
        // does a hidden size where the epilogue products were measured slower (GPT 6.6B's
        // 4096).
        let wide = |precision: &str, framework: &str| {
            let mut p = gpt2(precision, framework);
            p.model.hidden = 4096;
            p.model.ffn_hidden = 16384;
            p
        };
        for p in [
            gpt2("fp32", "planc"),
            gpt2("bf16", "megatron"),
            wide("bf16", "planc"),
        ] {
            let (precision, framework) = (p.train.precision, p.framework());
            let ops = layer_forward(&p);
            assert!(
                matches!(
                    named(&ops, OpId::MlpActivation)[..],
                    [OpKind::Activation { .. }]
                ),
                "{precision} {framework}"
            );
        }
    }

    #[test]
    fn the_dispatch_buffer_is_the_ranks_own_whatever_the_expert_group() {
        // The same 4096 tokens a rank over ep 2, 4 and 8: each rank sends its own 4096 × 2
        // routed rows whatever the group's size; what grows with ep is only the share that
        // leaves the rank, (ep − 1)/ep, which `comm::all_to_all_time` charges.
        let own = 4096.0 * 2.0 * 4096.0 * 2.0;
        let fabric = |p: &Plan| crate::cost::time::placement(p, &p.cluster.groups[0]);
        for ep in [2u64, 4, 8] {
            let p = mixtral(&format!("tp = 1, dp = 8, ep = {ep}"), ", moe_imbalance = 1");
            assert_eq!(a2a_bytes(&p, OpId::MoeDispatch), own, "ep {ep}");
            let pl = fabric(&p);
            let t =
                crate::cost::comm::collective_time(Collective::AllToAll, own, pl.ep, &pl.fabric);
            // (ep − 1)/ep of one buffer at the group's bus bandwidth, plus latencies of
            // microseconds: not ep buffers' worth.
            let leaves = (ep - 1) as f64 / ep as f64 * own / pl.fabric.intra_bus_bandwidth(ep);
            assert!(t > leaves && t < leaves + 1e-4, "ep {ep}: {t} vs {leaves}");
        }
    }

    #[test]
    fn each_rank_dispatches_its_own_routed_tokens_not_the_groups() {
        // ep 8, tp 1: a rank holds 4096 tokens, sends each to its top 2 experts: 4096 × 2
        // rows of 4096 in bf16, an eighth of it to itself. (The old formula sent the
        // group's whole buffer, ep times this.)
        let p = mixtral("tp = 1, dp = 8, ep = 8", ", moe_imbalance = 1");
        let own = 4096.0 * 2.0 * 4096.0 * 2.0;
        assert_eq!(a2a_bytes(&p, OpId::MoeDispatch), own);
        assert_eq!(a2a_bytes(&p, OpId::MoeCombine), own);
        // Under sequence parallelism a tp rank dispatches its own 1/tp of the tokens, then
        // gathers the rows it received over tp (the experts' weights are split by tp), and
        // scatters them back; the dense MLP's gather is not run.
        let sp = mixtral(
            "tp = 2, dp = 4, ep = 4, sequence_parallel = true",
            ", moe_imbalance = 1",
        );
        assert_eq!(a2a_bytes(&sp, OpId::MoeDispatch), own / 2.0);
        let ops = layer_forward(&sp);
        assert!(named(&ops, OpId::MlpAllGather).is_empty());
        assert_eq!(
            named(&ops, OpId::MoeTpAllGather),
            [&OpKind::Collective {
                op: Collective::AllGather,
                bytes: own,
                group: Group::Tp
            }]
        );
        assert_eq!(named(&ops, OpId::MoeTpReduceScatter).len(), 1);
    }

    #[test]
    fn the_experts_are_many_small_products_at_the_busiest_ranks_load() {
        let grouped = |p: &Plan| match named(&layer_forward(p), OpId::ExpertUpProj)[..] {
            [OpKind::GroupedGemm { count, m, n, k }] => (*count, *m, *n, *k),
            ref other => panic!("{other:?}"),
        };
        // ep 2: four experts a rank, each over a quarter of the rank's 4096 × 2 routed rows,
        // gate and up together (2 × 14336), no tensor parallelism.
        let p = mixtral("tp = 1, dp = 8, ep = 2", ", moe_imbalance = 1");
        assert_eq!(grouped(&p), (4.0, 2048.0, 28672.0, 4096.0));
        // Capacity factor 1.25: every expert's buffer padded to 1.25 × the balanced load,
        // and the all-to-all carries it.
        let cf = mixtral("tp = 1, dp = 8, ep = 2", ", capacity_factor = 1.25");
        assert_eq!(grouped(&cf), (4.0, 2560.0, 28672.0, 4096.0));
        assert_eq!(
            a2a_bytes(&cf, OpId::MoeDispatch),
            1.25 * a2a_bytes(&p, OpId::MoeDispatch)
        );
        // Dropless without a stated imbalance: the busiest of ep binomial loads, a little
        // above the mean for 8192 rows, none without expert parallelism.
        let dropless = mixtral("tp = 1, dp = 8, ep = 8", "");
        let mean = 8192.0;
        let want = 1.0 + (2.0 * 8f64.ln() * 7.0 / 8.0 / mean).sqrt();
        assert!((expert_load_factor(&dropless) - want).abs() < 1e-12);
        assert!(want > 1.02 && want < 1.05, "{want}");
        assert_eq!(
            expert_load_factor(&mixtral("tp = 1, dp = 8, ep = 1", "")),
            1.0
        );
        // Priced one expert at a time: eight products of 1024 rows take longer than one of
        // 8192 (tiles, thin rows), never less than eight times an eighth.
        let dev = crate::cost::time::Device {
            gpu: &p.cluster.groups[0].gpu,
            precision: p.train.precision,
        };
        let pl = crate::cost::time::placement(&p, &p.cluster.groups[0]);
        let t = |count, m| {
            crate::cost::time::time_ops(
                &[op(
                    OpId::ExpertUpProj,
                    OpKind::GroupedGemm {
                        count,
                        m,
                        n: 1000.0,
                        k: 4096.0,
                    },
                )],
                &dev,
                &pl,
            )
            .compute
        };
        assert!(t(8.0, 1000.0) > t(1.0, 8000.0));
    }

    #[test]
    fn shared_experts_run_on_every_token_and_dense_layers_keep_their_own_mlp() {
        let p = mixtral(
            "tp = 2, dp = 4, ep = 4, sequence_parallel = true",
            ", shared_experts = 2, expert_ffn_hidden = 1024, moe_imbalance = 1",
        );
        let ops = layer_forward(&p);
        // Two shared experts of 1024 as one MLP of 2048 (gate and up: 4096), split by tp,
        // over all 4096 tokens of the tensor-parallel group, between its own gather and
        // reduce-scatter.
        assert_eq!(
            named(&ops, OpId::SharedUpProj),
            [&OpKind::Gemm {
                m: 4096.0,
                n: 2048.0,
                k: 4096.0
            }]
        );
        assert_eq!(named(&ops, OpId::SharedAllGather).len(), 1);
        assert_eq!(named(&ops, OpId::SharedReduce).len(), 1);
        match named(&ops, OpId::ExpertDownProj)[..] {
            [OpKind::GroupedGemm { count, k, .. }] => assert_eq!((*count, *k), (2.0, 512.0)),
            ref other => panic!("{other:?}"),
        }
        // A dense layer of the same model: the MLP of ffn_hidden, no router.
        let dense = dense_layer_forward(&p);
        assert!(named(&dense, OpId::Router).is_empty());
        assert_eq!(
            named(&dense, OpId::MlpUpProj),
            [&OpKind::Gemm {
                m: 4096.0,
                n: 14336.0,
                k: 4096.0
            }]
        );
    }

    fn layouts(p: &Plan) -> Vec<(OpId, f64, f64)> {
        layer_forward(p)
            .into_iter()
            .filter_map(|o| match o.kind {
                OpKind::Layout {
                    bytes,
                    backward_bytes,
                } => Some((o.id, bytes, backward_bytes)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn plancs_runtime_pays_for_its_heads_major_layout_and_the_frameworks_do_not() {
        let gpt = plan("gpt2-124m", "flash", "planc");
        let (act, e) = (8.0 * 1024.0 * 768.0 * 2.0, 2.0);
        // Read the fused projection, write q, k, v; the fused attention's backward writes
        // the fused gradient itself (no rope, a key/value head per query head).
        assert_eq!(layouts(&gpt), vec![(OpId::QkvSplit, 6.0 * act, 0.0)]);
        // Standard attention: the gradients are summed back, and the output's heads moved.
        let std = plan("gpt2-124m", "standard", "planc");
        assert_eq!(
            layouts(&std),
            vec![
                (OpId::QkvSplit, 6.0 * act, 6.0 * act),
                (OpId::AttentionHeadsMerge, 2.0 * act, 2.0 * act)
            ]
        );
        // Llama: grouped keys and values repeated per query head, rope in the split (no
        // rope operation of its own), the gradients merged back.
        let llama = plan("llama3.2-1b", "flash", "planc");
        let m = &llama.model;
        let tokens = 8.0 * m.seq_len as f64;
        let fused = tokens * (m.hidden + 2 * m.kv_width()) as f64 * e;
        let split = 3.0 * tokens * m.hidden as f64 * e;
        assert_eq!(
            layouts(&llama),
            vec![(OpId::QkvSplit, fused + split, fused + split)]
        );
        assert!(layer_forward(&llama).iter().all(|o| o.id != OpId::Rope));
        // Megatron-LM's layouts are views and its rope a kernel of its own.
        let megatron = plan("llama3.2-1b", "flash", "megatron");
        assert!(layouts(&megatron).is_empty());
        assert!(layer_forward(&megatron).iter().any(|o| o.id == OpId::Rope));
    }

    #[test]
    fn a_sliding_window_prices_the_tiles_a_query_block_reaches_and_counts_its_keys() {
        // GPT-OSS's attention: 36 layers, 128-token windows on every other one, over 4096.
        let model = |extra: &str| {
            checked(&format!(
                "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }}
                 model m {{ layers = 36, hidden = 2880, heads = 64, kv_heads = 8, head_dim = 64,
                           vocab = 201088, seq_len = 4096, {extra} }}
                 train {{ global_batch = 1, precision = bf16, attention = flash }}
                 parallel {{ micro_batch = 1 }}
                 job j {{ framework = megatron }}"
            ))
        };
        let flash = |p: &Plan| {
            layer_forward(p)
                .iter()
                .find_map(|o| match o.kind {
                    OpKind::FlashAttention { flops, .. } => Some(flops),
                    _ => None,
                })
                .unwrap()
        };
        let full = model("");
        let gpt_oss = model("sliding_window = 128, full_attention_every = 2");
        assert_eq!(gpt_oss.model.windowed_layers(), 18);
        // A windowed layer's queries reach 128 keys back, less the first rows' shortfall,
        // in tiles of 128: one more tile than the window.
        let s = 4096.0;
        let tiles = 128.0 - 128.0 * 128.0 / (2.0 * s) + ATTENTION_KEY_TILE;
        let windowed = (tiles + 416.0) / (s / 2.0 + 416.0);
        assert!((windowed - 0.272).abs() < 1e-3, "{windowed}"); // measured: 0.267-0.270
        let expect = (1.0 + windowed) / 2.0;
        assert!((flash(&gpt_oss) / flash(&full) - expect).abs() < 1e-12);
        // Every layer windowed (Mistral), and a window over the whole sequence: no window.
        let mistral = model("sliding_window = 1024");
        assert_eq!(mistral.model.windowed_layers(), 36);
        assert!(flash(&mistral) < flash(&full) / 1.5);
        assert_eq!(flash(&model("sliding_window = 4096")), flash(&full));
        // Model FLOPs count the keys a query attends as the whole square counts them: the
        // window in a windowed layer.
        let core = |p: &Plan| 4.0 * 36.0 * p.model.mean_key_span(s) * (64.0 * 64.0) * s * 3.0;
        let drop = crate::cost::params::flops_per_step(&full.model, 1)
            - crate::cost::params::flops_per_step(&gpt_oss.model, 1);
        assert!((drop - (core(&full) - core(&gpt_oss))).abs() < 1e-3 * drop);
        assert_eq!(gpt_oss.model.mean_key_span(s), (s + 128.0) / 2.0);
        // Mistral 7B's preset carries its window, which a plan may widen away.
        let mistral = plan("mistral-7b", "flash", "megatron");
        assert_eq!(mistral.model.sliding_window, Some(4096));
        assert_eq!(mistral.model.windowed_layers(), 32);
        let widened = checked(
            "cluster c { nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }
             model m { preset = \"mistral-7b\", sliding_window = 8192 }
             train { global_batch = 8, precision = bf16, attention = flash }
             parallel { micro_batch = 1 }",
        );
        assert_eq!(widened.model.windowed_layers(), 0);
        // Gemma 2 9B windows every other layer: 21 of 42, at its published 9.24 B.
        let gemma = plan("gemma2-9b", "flash", "megatron");
        assert_eq!(gemma.model.windowed_layers(), 21);
        let params = crate::cost::params::total_params(&gemma.model) / 1e9;
        assert!((params - 9.24).abs() < 0.005, "{params}");
    }
}
