//! One transformer layer lowered to the operations one GPU runs for one micro-batch.
//!
//! This list is the unit every later consumer shares: the closed-form time model sums it,
//! the simulator will schedule it on compute and communication streams, and the runtime
//! will execute it with cuBLAS and NCCL. Sizes are per GPU (after tp/sp/cp/ep sharding).

use super::comm::Collective;
use crate::plan::{Attention, Framework, Mlp, Plan, Position};

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
    /// The attention core (scores, softmax, weighted sum) as one fused kernel: its causal
    /// forward FLOPs, the sequence and head size a measured rate depends on, and whether
    /// planc's own kernel runs it (`job.framework = planc`: a device profile measured that
    /// one) or a FlashAttention-class kernel (the other frameworks).
    FlashAttention {
        flops: f64,
        seq: f64,
        head_dim: f64,
        planc_kernel: bool,
    },
    /// The standard attention core: the scores `batch_heads·seq × seq_full × head_dim`
    /// (batched products), the masked softmax over `softmax_bytes`, and the weighted sum,
    /// one operation so that a profile's measurement of the three together can price it.
    StandardAttention {
        batch_heads: f64,
        seq: f64,
        seq_full: f64,
        head_dim: f64,
        softmax_bytes: f64,
    },
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
    /// A collective over `bytes` (the full buffer the group exchanges).
    Collective {
        op: Collective,
        bytes: f64,
        group: Group,
    },
    /// Exchange of keys and values around the context-parallel ring, overlapped with the
    /// attention core.
    RingExchange { bytes: f64, steps: u64 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub name: &'static str,
    pub kind: OpKind,
}

fn op(name: &'static str, kind: OpKind) -> Op {
    Op { name, kind }
}

/// The forward operations of one layer for one micro-batch on one GPU.
pub fn layer_forward(plan: &Plan) -> Vec<Op> {
    let m = &plan.model;
    let p = &plan.parallel;
    let e = plan.train.precision.bytes();
    let t = p.tp as f64;
    let h = m.hidden as f64;
    let kv = (m.kv_heads * m.head_dim()) as f64;
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

    ops.push(op(
        "input_norm",
        OpKind::Norm {
            bytes: 2.0 * act / sp,
            width: h,
            planc_kernel,
        },
    ));
    if let Some(g) = gather {
        tp_comm(&mut ops, "attention_all_gather", g);
    }
    ops.push(op(
        "qkv_proj",
        OpKind::Gemm {
            m: tokens,
            n: (h + 2.0 * kv) / t,
            k: h,
        },
    ));
    if planc_kernel {
        // planc's split reads the fused projection and writes q, k and v [B, H, T, D]
        // (keys and values repeated for each query head of a group, rope applied on the
        // way); backward sums them back into the fused gradient, unless the fused
        // attention wrote it there itself (every head its own key/value head, no rope).
        let fused = tokens * (h + 2.0 * kv) / t * e;
        let split = 3.0 * act / t;
        let into_fused = plan.train.attention == Attention::Flash
            && m.kv_heads == m.heads
            && m.position != Position::Rope;
        ops.push(op(
            "qkv_split",
            OpKind::Layout {
                bytes: fused + split,
                backward_bytes: if into_fused { 0.0 } else { fused + split },
            },
        ));
    } else if m.position == Position::Rope {
        ops.push(op(
            "rope",
            OpKind::Memory {
                bytes: 2.0 * tokens * (h + kv) / t * e,
            },
        ));
    }
    if p.cp > 1 {
        ops.push(op(
            "cp_kv_exchange",
            OpKind::RingExchange {
                bytes: 2.0 * tokens * kv / t * e,
                steps: p.cp - 1,
            },
        ));
    }
    let heads = m.heads as f64 / t;
    let d = m.head_dim() as f64;
    match plan.train.attention {
        Attention::Flash => {
            // Causal masking lets the fused kernel skip the upper triangle.
            let flops = 4.0 * p.micro_batch as f64 * heads * s * s_full * d * 0.5;
            ops.push(op(
                "attention",
                OpKind::FlashAttention {
                    flops,
                    seq: s_full,
                    head_dim: d,
                    planc_kernel,
                },
            ));
        }
        Attention::Standard => {
            // Write scores, softmax read+write, read by the weighted sum: 8 bytes per score
            // at 2-byte precision; dropout adds read+write+mask: 5 more.
            let batch_heads = p.micro_batch as f64 * heads;
            let scores = batch_heads * s * s_full;
            ops.push(op(
                "attention_core",
                OpKind::StandardAttention {
                    batch_heads,
                    seq: s,
                    seq_full: s_full,
                    head_dim: d,
                    softmax_bytes: 4.0 * scores * e,
                },
            ));
            if planc_kernel {
                // The weighted sum's heads back to rows, and the output gradient's to heads.
                ops.push(op(
                    "attention_heads_merge",
                    OpKind::Layout {
                        bytes: 2.0 * act / t,
                        backward_bytes: 2.0 * act / t,
                    },
                ));
            }
            if plan.train.dropout > 0.0 {
                ops.push(op(
                    "attention_dropout",
                    OpKind::Memory {
                        bytes: 2.5 * scores * e,
                    },
                ));
            }
        }
    }
    ops.push(op(
        "attention_out_proj",
        OpKind::Gemm {
            m: tokens,
            n: h,
            k: h / t,
        },
    ));
    tp_comm(&mut ops, "attention_reduce", scatter);
    ops.push(op(
        "attention_residual",
        OpKind::Memory {
            bytes: 4.0 * act / sp,
        },
    ));
    ops.push(op(
        "mlp_norm",
        OpKind::Norm {
            bytes: 2.0 * act / sp,
            width: h,
            planc_kernel,
        },
    ));
    if let Some(g) = gather {
        tp_comm(&mut ops, "mlp_all_gather", g);
    }
    let moe = m.experts > 1;
    let routed = if moe { tokens * m.top_k as f64 } else { tokens };
    if moe {
        ops.push(op(
            "router",
            OpKind::Gemm {
                m: tokens,
                n: m.experts as f64,
                k: h,
            },
        ));
        if p.ep > 1 {
            ops.push(op(
                "moe_dispatch",
                OpKind::Collective {
                    op: Collective::AllToAll,
                    bytes: routed * h * e * p.ep as f64,
                    group: Group::Ep,
                },
            ));
        }
    }
    let up = match m.mlp {
        Mlp::Gelu => f,
        Mlp::Swiglu => 2.0 * f,
    };
    ops.push(op(
        "mlp_up_proj",
        OpKind::Gemm {
            m: routed,
            n: up / t,
            k: h,
        },
    ));
    ops.push(op(
        "mlp_activation",
        OpKind::Activation {
            bytes: activation_bytes(m.mlp, routed, f / t, e),
            width: f / t,
            mlp: m.mlp,
            planc_kernel,
        },
    ));
    ops.push(op(
        "mlp_down_proj",
        OpKind::Gemm {
            m: routed,
            n: h,
            k: f / t,
        },
    ));
    if moe && p.ep > 1 {
        ops.push(op(
            "moe_combine",
            OpKind::Collective {
                op: Collective::AllToAll,
                bytes: routed * h * e * p.ep as f64,
                group: Group::Ep,
            },
        ));
    }
    tp_comm(&mut ops, "mlp_reduce", scatter);
    ops.push(op(
        "mlp_residual",
        OpKind::Memory {
            bytes: 4.0 * act / sp,
        },
    ));
    ops
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
        "final_norm",
        OpKind::Norm {
            bytes: 2.0 * tokens * h * e / sp,
            width: h,
            planc_kernel: plan.framework() == Framework::Planc,
        },
    )];
    if p.sequence_parallel && p.tp > 1 {
        ops.push(op(
            "head_all_gather",
            OpKind::Collective {
                op: Collective::AllGather,
                bytes: tokens * h * e,
                group: Group::Tp,
            },
        ));
    }
    ops.push(op(
        "logits",
        OpKind::Gemm {
            m: tokens,
            n: v / t,
            k: h,
        },
    ));
    ops.push(op(
        "cross_entropy",
        OpKind::Memory {
            bytes: cross_entropy_bytes(plan) * tokens * v / t,
        },
    ));
    ops
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
        ops.retain(|o| o.name != "cross_entropy");
    }
    ops
}

/// Bytes each bias gradient of the products among a layer's `ops` reads in backward: the
/// sum over tokens of the product's output gradient, one reduction per product with a bias (the frameworks fuse
/// the bias into the forward product, not its gradient into the backward ones). A
/// row-parallel product's bias sums this rank's tokens under sequence parallelism.
pub fn layer_bias_gradients(plan: &Plan, ops: &[Op]) -> Vec<f64> {
    if !plan.model.bias {
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
        .filter_map(|o| match (o.name, &o.kind) {
            ("qkv_proj" | "mlp_up_proj", OpKind::Gemm { m, n, .. }) => Some(m * n * e),
            ("attention_out_proj" | "mlp_down_proj", OpKind::Gemm { m, n, .. }) => {
                Some(m * n * e / sp)
            }
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
    let mut ops = vec![op("embedding", OpKind::Memory { bytes: 2.0 * act })];
    if p.tp > 1 {
        let c = if p.sequence_parallel {
            Collective::ReduceScatter
        } else {
            Collective::AllReduce
        };
        ops.push(op(
            "embedding_reduce",
            OpKind::Collective {
                op: c,
                bytes: act,
                group: Group::Tp,
            },
        ));
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;

    fn plan(model: &str, attention: &str, framework: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }}
             model m {{ preset = \"{model}\" }}
             train {{ global_batch = 8, precision = bf16, attention = {attention} }}
             parallel {{ tp = 1, pp = 1, dp = 1, micro_batch = 8 }}
             job j {{ framework = {framework} }}"
        );
        let checked = check_source("t.tp", &text);
        checked
            .plan
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
    }

    fn layouts(p: &Plan) -> Vec<(&'static str, f64, f64)> {
        layer_forward(p)
            .into_iter()
            .filter_map(|o| match o.kind {
                OpKind::Layout {
                    bytes,
                    backward_bytes,
                } => Some((o.name, bytes, backward_bytes)),
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
        assert_eq!(layouts(&gpt), vec![("qkv_split", 6.0 * act, 0.0)]);
        // Standard attention: the gradients are summed back, and the output's heads moved.
        let std = plan("gpt2-124m", "standard", "planc");
        assert_eq!(
            layouts(&std),
            vec![
                ("qkv_split", 6.0 * act, 6.0 * act),
                ("attention_heads_merge", 2.0 * act, 2.0 * act)
            ]
        );
        // Llama: grouped keys and values repeated per query head, rope in the split (no
        // rope operation of its own), the gradients merged back.
        let llama = plan("llama3.2-1b", "flash", "planc");
        let m = &llama.model;
        let tokens = 8.0 * m.seq_len as f64;
        let fused = tokens * (m.hidden + 2 * m.kv_heads * m.head_dim()) as f64 * e;
        let split = 3.0 * tokens * m.hidden as f64 * e;
        assert_eq!(
            layouts(&llama),
            vec![("qkv_split", fused + split, fused + split)]
        );
        assert!(layer_forward(&llama).iter().all(|o| o.name != "rope"));
        // Megatron-LM's layouts are views and its rope a kernel of its own.
        let megatron = plan("llama3.2-1b", "flash", "megatron");
        assert!(layouts(&megatron).is_empty());
        assert!(layer_forward(&megatron).iter().any(|o| o.name == "rope"));
    }
}
