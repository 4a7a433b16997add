//! From a plan to a program and its costs: the schedule and message flow come from the
//! parallel layout, every duration from the compiler's cost model (`cost::time::pieces`),
//! so the simulator and the closed form price the same work and differ only in how they
//! compose it. The program is the one the plan's framework runs: `framework = planc`'s
//! interleaved programs in the order its runtime issues their messages (`grouped`).

use planc_compiler::cost::memory::{
    dense_layer_params_per_gpu, layer_expert_params_per_gpu, layer_params_per_gpu,
    stage_layer_params, stage_params,
};
use planc_compiler::cost::method::{chunk_trained_params, stage_trained_params};
use planc_compiler::cost::stage_group;
use planc_compiler::cost::time::{
    dp_collectives, dp_contention, embedding_sync_time, optimizer_time, pieces, placement,
    reduction_tail, Device, BUCKET_PARAMS,
};
use planc_compiler::plan::{Framework, Plan, Schedule};

use crate::graph::Costs;
use crate::grouped::regroup;
use crate::program::{build, Program, StepOptions};
use crate::schedule::ScheduleKind;

pub fn schedule_kind(plan: &Plan) -> ScheduleKind {
    match plan.parallel.schedule {
        Schedule::Gpipe => ScheduleKind::Gpipe,
        Schedule::OneFOneB => ScheduleKind::OneFOneB,
        Schedule::Interleaved => ScheduleKind::Interleaved {
            vpp: plan.parallel.vpp as u32,
        },
        Schedule::ZeroBubble => ScheduleKind::ZeroBubbleH1,
    }
}

pub fn lower(plan: &Plan) -> (Program, Costs) {
    let p = &plan.parallel;
    let m = &plan.model;
    let ranks = p.pp as u32;
    let kind = schedule_kind(plan);
    let chunks = kind.chunks();
    let stages = (ranks * chunks) as usize;
    let micro_batches = p.grad_accum(plan.train.global_batch).max(1) as u32;
    let data_parallel = p.dp * p.cp > 1;

    let mut costs = Costs {
        forward: vec![(0.0, 0.0); stages],
        backward: vec![(0.0, 0.0); stages],
        weight_grad: vec![0.0; stages],
        grad_reduce: vec![0.0; stages],
        param_gather: vec![0.0; stages],
        optimizer: vec![0.0; ranks as usize],
        contention: vec![(0.0, 0.0); ranks as usize],
        ..Costs::default()
    };
    let mut max_chunk_params: f64 = 0.0;
    let mut first_chunk_params: f64 = 0.0;
    for rank in 0..ranks {
        let group = stage_group(plan, rank as u64);
        let dev = Device {
            gpu: &group.gpu,
            precision: plan.train.precision,
        };
        let pl = placement(plan, group);
        let pc = pieces(plan, &dev, &pl);
        let params = stage_params(plan, rank as u64);
        // The optimizer steps the trained weights only (`cost::method`).
        let (trained, trained_experts) = stage_trained_params(plan, rank as u64);
        costs.optimizer[rank as usize] =
            optimizer_time(plan, rank as u64, trained, trained_experts, &dev);
        if data_parallel && plan.overlaps_grad_reduce() {
            costs.contention[rank as usize] = dp_contention(plan, rank as u64, &pl);
        }
        // Each chunk holds its own layers (uneven end stages split unevenly, see
        // `Parallel::chunk_layers`); the embedding sits in the first chunk of the first
        // stage, the output layer in the last chunk of the last.
        let per_layer_params = layer_params_per_gpu(plan);
        let dense_layer_params = dense_layer_params_per_gpu(plan);
        let expert_layer_params = layer_expert_params_per_gpu(plan);
        let end_params = params - stage_layer_params(plan, rank as u64);
        let end_chunk = if rank == 0 { 0 } else { chunks - 1 };
        for chunk in 0..chunks {
            let v = (chunk * ranks + rank) as usize;
            let layers_per_chunk = p.chunk_layers(m.layers, rank as u64, chunk as u64) as f64;
            // An MoE model's first dense layers in their chunks (a dense model's layers are
            // all "dense", each of the layer's own parameters).
            let dense = if m.is_moe() {
                plan.chunk_dense_layers(rank as u64, chunk as u64) as f64
            } else {
                layers_per_chunk
            };
            let moe = layers_per_chunk - dense;
            let chunk_params = per_layer_params * moe
                + dense_layer_params * dense
                + if chunk == end_chunk { end_params } else { 0.0 };
            let chunk_experts = expert_layer_params * moe;
            // Only trained weights' gradients are reduced (`cost::method`), in buckets.
            let ends = if chunk == end_chunk { end_params } else { 0.0 };
            let trained = chunk_trained_params(plan, rank as u64, chunk as u64, ends);
            max_chunk_params = max_chunk_params.max(trained.0);
            if v == 0 {
                first_chunk_params = trained.0;
            }
            // A frozen prefix's layers run forward only (`cost::method`).
            let (mut fwd, mut bwd, mut wgrad) = pc.chunk_layers(plan, rank as u64, chunk as u64);
            if v == 0 {
                fwd.add(pc.embedding_fwd);
                bwd.add(pc.embedding_bwd);
            }
            if v == stages - 1 {
                fwd.add(pc.head_fwd);
                bwd.add(pc.head_bwd);
                wgrad += pc.head_wgrad;
            }
            costs.forward[v] = (fwd.compute, fwd.comm);
            costs.backward[v] = (bwd.compute, bwd.comm);
            costs.weight_grad[v] = wgrad;
            if data_parallel {
                let (reduce, gather) =
                    dp_collectives(plan, (chunk_params, chunk_experts), trained, &pl);
                costs.grad_reduce[v] = reduce;
                costs.param_gather[v] = gather;
            }
        }
        if rank == 0 {
            costs.p2p = pc.p2p;
            costs.embedding_sync = embedding_sync_time(plan, &pl);
        }
    }
    // One bucket count for every rank: the first stage's last piece (its embedding's
    // gradients, ready when its backward ends) is the one on the step's critical path.
    let tail = reduction_tail(plan, 0);
    let mut buckets = ((max_chunk_params / BUCKET_PARAMS).ceil() as u32).max(1);
    if p.zero >= 3 {
        // FSDP gathers and reduces a layer at a time (`cost::time::zero3_exposed`).
        buckets = (p.chunk_layers(m.layers, 0, 0) as u32).max(1);
    }
    if tail > 0.0 {
        buckets = buckets.min(((first_chunk_params / tail).floor() as u32).max(1));
    }
    let opts = StepOptions {
        zero: p.zero as u8,
        data_parallel,
        // Without overlap the reduction waits for the whole backward pass: one piece.
        buckets: if plan.overlaps_grad_reduce() {
            buckets
        } else {
            1
        },
        tied_embedding: m.tied_embeddings,
        overlap_grad_reduce: plan.overlaps_grad_reduce(),
        overlap_p2p: p.overlaps_p2p(),
    };
    let mut program = build(kind, ranks, micro_batches, opts);
    if plan.framework() == Framework::Planc && matches!(kind, ScheduleKind::Interleaved { .. }) {
        // planc's runtime groups consecutive sends and receives, which deadlocks the
        // interleaved programs in their built order: it runs them regrouped, and so are
        // they checked and timed.
        program.ranks = regroup(&program.ranks);
    }
    (program, costs)
}
