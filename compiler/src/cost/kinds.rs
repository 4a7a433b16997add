//! A stage's step split by kind of work (the layers' linear layers, attention, norms,
//! activation; the output layer, the embedding, the optimizer; exposed communication), as
//! `planc run --trace` groups the operations it measures, so a run can say which kind of
//! work the prediction got wrong. The same operations and rules as [`super::time::pieces`]:
//! the kinds sum to its layer passes (a test pins that).

use serde::Serialize;

use super::memory::stage_memory;
use super::ops::{dense_layer_forward, layer_forward, Op, OpId, OpKind};
use super::time::{
    dp_exposed_parts, embedding_sync_time, host_exposed, layer_backward, optimizer_time, pieces,
    placement, sharded_param_copies, stage_time, time_ops, Device, PassTime,
};
use crate::plan::Plan;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkKind {
    /// The layers' products with what runs beside them: bias, rope, residual additions.
    Linear,
    /// The attention core: fused, or the products and softmax of the standard one.
    Attention,
    Norms,
    /// The MLP's activation (GELU, SwiGLU).
    Activation,
    /// The output layer and the loss.
    Head,
    Embedding,
    /// Zeroing gradients, the norm, the update.
    Optimizer,
    /// Tensor-parallel collectives, pipeline transfers, the data-parallel reduction's
    /// exposed part and the tied embedding's gradient sum: what the stage waits for.
    Communication,
    /// A pipeline stage waiting for its neighbours (the bubble, and a slower stage). Not a
    /// kind of work: the schedule's; `planc run` measures it as its transfers' spans and
    /// prices it as the simulated step less the stage's own work.
    PipelineWait,
}

impl WorkKind {
    pub fn label(self) -> &'static str {
        match self {
            WorkKind::Linear => "linear layers",
            WorkKind::Attention => "attention",
            WorkKind::Norms => "norms",
            WorkKind::Activation => "activation",
            WorkKind::Head => "output layer",
            WorkKind::Embedding => "embedding",
            WorkKind::Optimizer => "optimizer",
            WorkKind::Communication => "communication",
            WorkKind::PipelineWait => "pipeline wait",
        }
    }

    /// The kind of a layer's operation ([`layer_forward`]'s list): its id's, but for an
    /// activation applied in its products' epilogues (`OpKind::Epilogue`), whose time runs
    /// inside the products and is measured with them.
    pub fn of_op(op: &Op) -> WorkKind {
        match op.kind {
            OpKind::Epilogue { .. } => WorkKind::Linear,
            _ => WorkKind::of(op.id),
        }
    }

    /// The kind of work an operation is, whatever kernels run it (fused, or a framework's
    /// unfused ones): the one table the cost model's step by kind and `planc run --trace`'s
    /// spans both read.
    pub fn of(id: OpId) -> WorkKind {
        use OpId::*;
        match id {
            AttentionAllGather | AttentionReduce | MlpAllGather | MlpReduce | MoeDispatch
            | MoeTpAllGather | MoeTpReduceScatter | MoeCombine | SharedAllGather | SharedReduce
            | HeadAllGather | EmbeddingReduce => WorkKind::Communication,
            QkvSplit | CpKvExchange | Attention | AttentionCore | AttentionHeadsMerge
            | AttentionHeads => WorkKind::Attention,
            InputNorm | MlpNorm => WorkKind::Norms,
            MlpActivation | ExpertActivation | SharedActivation => WorkKind::Activation,
            FinalNorm | Logits | CrossEntropy | LogitsInputCast | LogitsWeightCast => {
                WorkKind::Head
            }
            Embedding => WorkKind::Embedding,
            QkvProj
            | Rope
            | AttentionOutProj
            | AttentionResidual
            | MlpUpProj
            | MlpDownProj
            | MlpResidual
            | Router
            | RouterTopk
            | MoePermute
            | ExpertUpProj
            | ExpertDownProj
            | MoeUnpermute
            | SharedUpProj
            | SharedDownProj
            | LoraA
            | LoraB
            | LoraAdd
            | QkvProjFp8Cast
            | AttentionOutProjFp8Cast
            | MlpUpProjFp8Cast
            | MlpDownProjFp8Cast
            | SharedUpProjFp8Cast
            | SharedDownProjFp8Cast
            | ExpertUpProjFp8Cast
            | ExpertDownProjFp8Cast
            | QkvInputCast
            | MlpInputCast
            | QkvBias
            | MlpDownInputCast
            | WeightCasts => WorkKind::Linear,
        }
    }
}

/// Seconds of one step on `stage` by kind, for `micro_batches` micro-batches: compute and
/// the communication the stage waits for (pipeline bubbles not included: the schedule's,
/// not a kind of work). The data-parallel reduction's exposed part is communication; what
/// it costs the passes it runs beside counts with the linear layers, whose products lose
/// most of it (on two H200s, GPT-2's mlp-down backward after each layer's reduction).
pub fn stage_by_kind(plan: &Plan, stage: u64, micro_batches: u64) -> Vec<(WorkKind, f64)> {
    let group = super::stage_group(plan, stage);
    let dev = Device {
        gpu: &group.gpu,
        precision: plan.train.precision,
    };
    let pl = placement(plan, group);
    let mb = micro_batches as f64;
    let moe = plan.stage_moe_layers(stage) as f64;
    let dense = plan.stage_layers(stage) as f64 - moe;
    let mut out: Vec<(WorkKind, f64)> = Vec::new();
    let mut add = |k: WorkKind, s: f64| match out.iter_mut().find(|(x, _)| *x == k) {
        Some(e) => e.1 += s,
        None => out.push((k, s)),
    };
    let (frozen_moe, frozen_dense) = plan.stage_frozen_layers(stage);
    // An MoE model's layers, and its first dense ones (every layer of a dense model); of
    // each, a frozen prefix's run forward only (`cost::method`).
    let dense_ops = if plan.model.is_moe() {
        dense_layer_forward(plan)
    } else {
        layer_forward(plan)
    };
    for (ops, layers, frozen, is_moe) in [
        (layer_forward(plan), moe, frozen_moe as f64, true),
        (dense_ops, dense, frozen_dense as f64, false),
    ] {
        if layers == 0.0 {
            continue;
        }
        let params = super::method::layer_held_params(plan, is_moe);
        let trained = super::method::layer_trained_params(plan, is_moe).0;
        let back = layers - frozen;
        let (mut layer_fwd, mut layer_bwd) = (PassTime::default(), PassTime::default());
        for (kind, fwd, bwd) in ops_by_kind(plan, &ops, &dev, &pl) {
            add(kind, mb * (layers * fwd.compute + back * bwd.compute));
            add(
                WorkKind::Communication,
                mb * (layers * fwd.comm + back * bwd.comm),
            );
            layer_fwd.add(fwd);
            layer_bwd.add(bwd);
        }
        // ZeRO-3's copies in and out of its collectives' buffers and the offloaded state's
        // host traffic: part of the layer passes (`pieces`), the data-parallel and host
        // traffic's work, not any of the layer's operations.
        let (copies_fwd, copies_bwd) = sharded_param_copies(plan, params, trained, &dev);
        let (host_fwd, host_bwd) = host_exposed(plan, params, trained, &dev, layer_fwd, layer_bwd);
        add(
            WorkKind::Communication,
            mb * (layers * (copies_fwd + host_fwd) + back * (copies_bwd + host_bwd)),
        );
    }
    let pc = pieces(plan, &dev, &pl);
    if stage == 0 {
        add(
            WorkKind::Embedding,
            mb * (pc.embedding_fwd.compute + pc.embedding_bwd.compute),
        );
    }
    if stage + 1 == plan.parallel.pp {
        add(
            WorkKind::Head,
            mb * (pc.head_fwd.compute + pc.head_bwd.compute),
        );
        add(
            WorkKind::Communication,
            mb * (pc.head_fwd.comm + pc.head_bwd.comm),
        );
    }
    add(WorkKind::Communication, mb * 2.0 * pc.p2p);
    if stage == 0 || stage + 1 == plan.parallel.pp {
        add(WorkKind::Communication, embedding_sync_time(plan, &pl));
    }
    let params = stage_memory(plan, stage, micro_batches).params;
    let st = stage_time(plan, stage, &dev, &pl);
    let (exposed, lost) = dp_exposed_parts(plan, stage, params, &st, &pl);
    add(WorkKind::Communication, exposed);
    add(WorkKind::Linear, lost);
    let (trained, experts) = super::method::stage_trained_params(plan, stage);
    add(
        WorkKind::Optimizer,
        optimizer_time(plan, stage, trained, experts, &dev),
    );
    out.retain(|(_, s)| *s > 0.0);
    out
}

/// One layer's forward and backward by kind, each kind's operations priced by the rules
/// [`pieces`] prices the whole layer by ([`layer_backward`]).
pub fn layer_by_kind(
    plan: &Plan,
    dev: &Device,
    pl: &super::time::Placement,
) -> Vec<(WorkKind, PassTime, PassTime)> {
    ops_by_kind(plan, &layer_forward(plan), dev, pl)
}

/// A layer's forward operations `ops` and their backward by kind.
fn ops_by_kind(
    plan: &Plan,
    ops: &[Op],
    dev: &Device,
    pl: &super::time::Placement,
) -> Vec<(WorkKind, PassTime, PassTime)> {
    let mut kinds: Vec<WorkKind> = ops.iter().map(WorkKind::of_op).collect();
    kinds.sort();
    kinds.dedup();
    // The tensor-parallel overlap pairs a product with a collective, two kinds: what it
    // hides goes to the collectives, what it costs to the products' kind.
    let overlap = super::tp_overlap::backward(plan, ops, dev, pl);
    kinds
        .into_iter()
        .map(|k| {
            let mine: Vec<Op> = ops
                .iter()
                .filter(|o| WorkKind::of_op(o) == k)
                .cloned()
                .collect();
            let fwd = time_ops(&mine, dev, pl);
            let mut bwd = layer_backward(plan, &mine, fwd, dev, pl);
            if k == WorkKind::Communication {
                bwd.comm += overlap.comm;
            }
            for (id, lost) in &overlap.lost {
                if mine.iter().any(|o| o.id == *id) {
                    bwd.compute += lost;
                }
            }
            (k, fwd, bwd)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::ops::OpKind;
    use super::*;
    use crate::check::check_source;
    use crate::plan::Recompute;

    fn plan(attention: &str) -> Plan {
        plan_of(attention, "megatron")
    }

    fn plan_of(attention: &str, framework: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ preset = \"llama3-8b\" }}
             train {{ global_batch = 32, precision = bf16, attention = {attention} }}
             parallel {{ tp = 2, pp = 1, dp = 4, micro_batch = 1 }}
             job j {{ framework = {framework} }}"
        );
        let checked = check_source("t.tp", &text);
        checked
            .plan
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
    }

    #[test]
    fn the_kinds_sum_to_the_layer_passes() {
        // planc's own runtime adds the layout changes around its attention kernels.
        for (attention, framework) in [
            ("flash", "megatron"),
            ("standard", "megatron"),
            ("flash", "planc"),
            ("standard", "planc"),
        ] {
            let mut p = plan_of(attention, framework);
            for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                p.parallel.recompute = recompute;
                let group = &p.cluster.groups[0];
                let dev = Device {
                    gpu: &group.gpu,
                    precision: p.train.precision,
                };
                let pl = placement(&p, group);
                let pc = pieces(&p, &dev, &pl);
                let kinds = layer_by_kind(&p, &dev, &pl);
                let what = format!("{attention}, {framework}, recompute {recompute:?}");
                let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
                let fwd: f64 = kinds.iter().map(|k| k.1.total()).sum();
                let bwd: f64 = kinds.iter().map(|k| k.2.total()).sum();
                assert!(close(fwd, pc.layer_fwd.total()), "{what}: forward");
                assert!(close(bwd, pc.layer_bwd.total()), "{what}: backward");
                // tp 2: the collectives are a kind of their own.
                let comm = kinds.iter().find(|k| k.0 == WorkKind::Communication);
                assert!(comm.is_some_and(|k| k.1.comm > 0.0), "{what}");
            }
        }
    }

    /// The kind the id table gives each operation agrees with what the operation computes:
    /// collectives are communication, the attention kernels attention, a layer's norms and
    /// activations theirs, the output layer's and the embedding's work their own.
    #[test]
    fn an_operations_kind_by_its_id_agrees_with_what_it_computes() {
        use super::super::ops::{embedding_forward, head_forward};
        let mut plans = 0;
        for model in ["gpt2-124m", "llama3-8b", "mixtral-8x7b"] {
            for framework in ["planc", "megatron", "torch", "deepspeed", "torchtitan"] {
                for train in [
                    "attention = flash",
                    "attention = standard",
                    "attention = flash, precision = fp8",
                    "attention = standard, method = lora, lora_rank = 8, \
                     lora_targets = [q, k, v, o, gate, up, down]",
                ] {
                    let text = format!(
                        "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
                         model m {{ preset = \"{model}\" }}
                         train {{ global_batch = 32, precision = bf16, {train} }}
                         parallel {{ tp = 2, pp = 1, dp = 4, micro_batch = 1,
                                     sequence_parallel = true }}
                         job j {{ framework = {framework} }}"
                    );
                    let Some(p) = check_source("t.tp", &text).plan else {
                        continue;
                    };
                    plans += 1;
                    let what = format!("{model}, {framework}, {train}");
                    for (ops, part) in [
                        (layer_forward(&p), None),
                        (head_forward(&p), Some(WorkKind::Head)),
                        (embedding_forward(&p), Some(WorkKind::Embedding)),
                    ] {
                        for o in &ops {
                            let computes = match o.kind {
                                OpKind::Collective { .. } => Some(WorkKind::Communication),
                                _ if part.is_some() => part,
                                OpKind::FlashAttention { .. }
                                | OpKind::StandardAttention(_)
                                | OpKind::RingExchange { .. }
                                | OpKind::Layout { .. } => Some(WorkKind::Attention),
                                OpKind::Norm { .. } => Some(WorkKind::Norms),
                                OpKind::Activation { .. } => Some(WorkKind::Activation),
                                OpKind::Gemm { .. }
                                | OpKind::GroupedGemm { .. }
                                | OpKind::Epilogue { .. } => Some(WorkKind::Linear),
                                _ => None,
                            };
                            if let Some(k) = computes {
                                assert_eq!(WorkKind::of_op(o), k, "{what}: {}", o.id);
                            }
                        }
                    }
                }
            }
        }
        assert!(plans >= 30, "{plans} plans checked");
    }

    #[test]
    fn a_one_stage_step_holds_every_kind_of_work_once() {
        let p = plan("flash");
        let kinds = stage_by_kind(&p, 0, 4);
        for k in [
            WorkKind::Linear,
            WorkKind::Attention,
            WorkKind::Norms,
            WorkKind::Activation,
            WorkKind::Head,
            WorkKind::Embedding,
            WorkKind::Optimizer,
            WorkKind::Communication,
        ] {
            assert_eq!(kinds.iter().filter(|x| x.0 == k).count(), 1, "{k:?}");
        }
    }

    #[test]
    fn the_pipeline_ends_sum_the_tied_embeddings_gradient_and_the_middle_does_not() {
        let comm = |p: &Plan, stage: u64| -> f64 {
            stage_by_kind(p, stage, 4)
                .iter()
                .filter(|k| k.0 == WorkKind::Communication)
                .map(|k| k.1)
                .sum()
        };
        let mut p = plan("flash");
        p.model.tied_embeddings = true;
        p.parallel.dp = 1;
        p.parallel.pp = 4;
        let pl = placement(&p, &p.cluster.groups[0]);
        let sync = embedding_sync_time(&p, &pl);
        assert!(sync > 0.0);
        assert!((comm(&p, 0) - comm(&p, 1) - sync).abs() < 1e-9 * sync);
        assert!(comm(&p, 3) > comm(&p, 2));
        p.model.tied_embeddings = false;
        assert_eq!(embedding_sync_time(&p, &pl), 0.0);
    }

    #[test]
    fn a_profiles_activations_price_a_planc_plans_activation_and_no_other_frameworks() {
        use crate::profile::{ActivationPoint, Profile};
        use std::sync::Arc;
        // llama3-8b at tp 2, one sequence of 8192: 8192 rows of SwiGLU over 7168.
        let (rows, width) = (8192usize, 14336usize / 2);
        let bytes = super::super::ops::activation_bytes(
            crate::plan::Mlp::Swiglu,
            rows as f64,
            width as f64,
            2.0,
        );
        let mut measured = Profile::empty_for_tests();
        for (pass, moved, gb_per_s) in [
            ("forward", bytes, 1500.0),
            ("backward", 2.0 * bytes, 1800.0),
        ] {
            measured.activations.push(ActivationPoint {
                kind: "swiglu".into(),
                pass: pass.into(),
                rows,
                width,
                seconds: moved / (gb_per_s * 1e9),
                gb_per_s,
            });
        }
        let unmeasured = Profile::empty_for_tests();
        let by_kind = |framework: &str, profile: &Profile| {
            let mut p = plan_of("flash", framework);
            p.parallel.recompute = Recompute::None;
            p.cluster.groups[0].gpu.profile = Some(Arc::new(profile.clone()));
            let group = &p.cluster.groups[0];
            let dev = Device {
                gpu: &group.gpu,
                precision: p.train.precision,
            };
            let pl = placement(&p, group);
            let memory = dev.memory(bytes);
            (layer_by_kind(&p, &dev, &pl), memory)
        };
        let activation = |kinds: &[(WorkKind, PassTime, PassTime)]| {
            let k = kinds.iter().find(|k| k.0 == WorkKind::Activation).unwrap();
            (k.1.compute, k.2.compute)
        };
        let (planc, _) = by_kind("planc", &measured);
        let (fwd, bwd) = activation(&planc);
        assert!((fwd - bytes / 1500e9).abs() < 1e-12, "{fwd}");
        assert!((bwd - 2.0 * bytes / 1800e9).abs() < 1e-12, "{bwd}");
        // The other kinds are as without the activation points.
        let (without, memory) = by_kind("planc", &unmeasured);
        assert_eq!(activation(&without), (memory, 2.0 * memory));
        for (with, without) in planc.iter().zip(&without) {
            if with.0 != WorkKind::Activation {
                assert_eq!(with, without, "{:?}", with.0);
            }
        }
        // Megatron-LM runs its own activation: a streaming kernel of its bytes, as without
        // the points.
        let (megatron, memory) = by_kind("megatron", &measured);
        assert_eq!(activation(&megatron), (memory, 2.0 * memory));
        assert_eq!(megatron, by_kind("megatron", &unmeasured).0);
    }
}
