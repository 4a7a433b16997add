//! The cost model: parameters, FLOPs, memory and time of one training step.
//!
//! [`estimate`] is the entry point: it maps pipeline stages onto the cluster's node groups,
//! costs each stage's memory and time, and composes the step with the pipeline schedule.

pub mod buffers;
pub mod comm;
pub mod eager;
pub mod fp8;
pub mod fused_shape;
pub mod kinds;
pub mod launch_blocking;
pub mod memory;
pub mod method;
pub mod offload;
pub mod op_id;
pub mod ops;
pub mod params;
pub mod power;
pub mod standard_attention;
pub mod time;
pub mod torch_rates;
pub mod tp_overlap;

use serde::Serialize;

use crate::plan::{NodeGroup, Plan, Recompute};
use memory::{stage_memory, StageMemory};
use time::{dp_exposed_parts, optimizer_time, placement, stage_time, Device, StageTime};

#[derive(Clone, Debug, Serialize)]
pub struct StageEstimate {
    pub memory: StageMemory,
    pub time: StageTime,
    pub gpu: String,
    pub capacity_bytes: f64,
    pub dp_exposed_s: f64,
    /// Of `dp_exposed_s`, what the passes lost beside the hidden reduction (measured
    /// contention, `time::dp_contention`). Where the reduction runs once a step it lengthens
    /// the stage's last backward passes, so it also delays the drain of every earlier
    /// pipeline stage ([`drain_contention`]).
    pub dp_contention_s: f64,
    pub optimizer_s: f64,
    /// Of the step, the seconds this stage's GPUs compute (its passes, recomputation and
    /// optimizer step).
    pub busy_s: f64,
    /// Of the step, the seconds they wait for their own communication (tensor-, context-
    /// and expert-parallel collectives, pipeline transfers, the exposed data-parallel part).
    pub comm_s: f64,
    /// Of the step, the seconds they wait for other stages: the pipeline's fill and drain,
    /// and a slower stage's pace. A stage can idle here while the step's bubble (measured
    /// on the busiest stage) is zero.
    pub wait_s: f64,
}

/// Of a stage's contention (`StageEstimate::dp_contention_s`), what lengthens its last
/// backward passes, which the earlier stages' drain waits for: all of it where the
/// gradients are reduced once a step, one micro-batch's share where ZeRO-2 and -3 reduce
/// (and gather) beside every micro-batch's passes, whose other shares lengthen this stage's
/// own passes only.
pub fn drain_contention(plan: &Plan, stage: &StageEstimate, micro_batches: u64) -> f64 {
    if plan.parallel.zero >= 2 && plan.overlaps_grad_reduce() {
        stage.dp_contention_s / micro_batches.max(1) as f64
    } else {
        stage.dp_contention_s
    }
}

impl StageEstimate {
    /// The share of the step this stage computes.
    pub fn busy_fraction(&self, step_s: f64) -> f64 {
        self.busy_s / step_s
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    pub params: f64,
    /// Of the model's parameters and any adapters, those that train (`train.method`).
    pub trained_params: f64,
    pub flops_per_step: f64,
    pub hw_flops_per_step: f64,
    pub micro_batches: u64,
    pub stages: Vec<StageEstimate>,
    pub step_s: f64,
    pub compute_s: f64,
    pub exposed_comm_s: f64,
    pub bubble_s: f64,
    pub tokens_per_s: f64,
    pub samples_per_s: f64,
    pub model_tflops_per_gpu: f64,
    pub hw_tflops_per_gpu: f64,
    pub mfu: f64,
    /// Index of the stage with the largest memory use.
    pub peak_stage: usize,
    /// How `step_s` and its split were obtained.
    pub method: TimeMethod,
    /// The closed-form step time, kept as a cross-check when the simulator retimes.
    pub closed_form_step_s: f64,
    /// Average dense peak of the plan's GPUs at its precision (for MFU).
    pub peak_flops_per_gpu: f64,
    pub global_batch: u64,
    pub seq_len: u64,
    pub world_size: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeMethod {
    ClosedForm,
    Simulated,
}

impl TimeMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeMethod::ClosedForm => "closed form",
            TimeMethod::Simulated => "simulated",
        }
    }
}

impl Estimate {
    /// How unevenly the pipeline stages are loaded: the largest stage's own work (compute
    /// and its own communication) over the stages' mean, less one. 0 for one stage or
    /// stages of equal work; 0.5 when the slowest stage works 1.5× the mean.
    pub fn stage_imbalance(&self) -> f64 {
        let work: Vec<f64> = self.stages.iter().map(|s| s.busy_s + s.comm_s).collect();
        let mean = work.iter().sum::<f64>() / work.len().max(1) as f64;
        let max = work.iter().copied().fold(0.0, f64::max);
        if mean > 0.0 {
            (max / mean - 1.0).max(0.0)
        } else {
            0.0
        }
    }

    /// Replaces each stage's split of the step (busy, own communication, waiting for other
    /// stages), in stage order, by a simulation's.
    pub fn retime_stages(&mut self, split: &[(f64, f64, f64)]) {
        for (s, &(busy, comm, wait)) in self.stages.iter_mut().zip(split) {
            s.busy_s = busy;
            s.comm_s = comm;
            s.wait_s = wait;
        }
    }

    /// Replaces the step time and its split (by a simulation of the same work) and
    /// recomputes everything derived from it.
    pub fn retime(&mut self, step_s: f64, compute_s: f64, exposed_comm_s: f64, bubble_s: f64) {
        self.step_s = step_s;
        self.compute_s = compute_s;
        self.exposed_comm_s = exposed_comm_s;
        self.bubble_s = bubble_s;
        self.method = TimeMethod::Simulated;
        let world = self.world_size as f64;
        self.samples_per_s = self.global_batch as f64 / step_s;
        self.tokens_per_s = self.samples_per_s * self.seq_len as f64;
        self.model_tflops_per_gpu = self.flops_per_step / step_s / world / 1e12;
        self.hw_tflops_per_gpu = self.hw_flops_per_step / step_s / world / 1e12;
        self.mfu = self.model_tflops_per_gpu * 1e12 / self.peak_flops_per_gpu;
    }
}

/// The node group that hosts pipeline stage `stage` (stages fill groups in order).
pub fn stage_group(plan: &Plan, stage: u64) -> &NodeGroup {
    let per_stage = plan.parallel.tp * plan.parallel.cp * plan.parallel.dp;
    let first_rank = stage * per_stage;
    let mut offset = 0;
    for g in &plan.cluster.groups {
        if first_rank < offset + g.gpus() {
            return g;
        }
        offset += g.gpus();
    }
    plan.cluster.groups.last().expect("a cluster has a group")
}

pub fn estimate(plan: &Plan) -> Estimate {
    let p = &plan.parallel;
    let m = &plan.model;
    let micro_batches = p.grad_accum(plan.train.global_batch).max(1);
    let mut stages = Vec::new();
    for s in 0..p.pp {
        let group = stage_group(plan, s);
        let dev = Device {
            gpu: &group.gpu,
            precision: plan.train.precision,
        };
        let pl = placement(plan, group);
        let mem = stage_memory(plan, s, micro_batches);
        let t = stage_time(plan, s, &dev, &pl);
        let (exposed, contention) = dp_exposed_parts(plan, s, mem.params, &t, &pl);
        // The optimizer steps the trained weights only (`cost::method`).
        let (trained, experts) = method::stage_trained_params(plan, s);
        let opt = optimizer_time(plan, s, trained, experts, &dev);
        stages.push(StageEstimate {
            capacity_bytes: group.gpu.memory,
            gpu: group.gpu.name.clone(),
            memory: mem,
            time: t,
            dp_exposed_s: exposed + contention,
            dp_contention_s: contention,
            optimizer_s: opt,
            busy_s: 0.0,
            comm_s: 0.0,
            wait_s: 0.0,
        });
    }
    // Pipeline: the slowest stage sets the pace for every micro-batch; filling and
    // draining the pipe costs the other stages' time once, divided by the chunks per
    // rank under interleaving.
    let per_mb: Vec<f64> = stages.iter().map(|s| s.time.per_microbatch()).collect();
    let (bottleneck, t_max) = per_mb
        .iter()
        .copied()
        .enumerate()
        .fold((0, 0.0), |acc, (i, t)| if t > acc.1 { (i, t) } else { acc });
    let fill: f64 = per_mb.iter().sum::<f64>() - t_max;
    let mb = micro_batches as f64;
    let b = &stages[bottleneck];
    let bubble_s = match p.schedule {
        // ZB-H1 fills the cool-down with deferred weight gradients: (p−1)(F+B−W).
        crate::plan::Schedule::ZeroBubble => fill * (1.0 - b.time.weight_grad / t_max),
        _ => fill / p.vpp as f64,
    };
    let compute_per_mb = b.time.forward.compute + b.time.backward.compute;
    let comm_per_mb = b.time.forward.comm + b.time.backward.comm + b.time.p2p;
    // After the last backward each stage reduces gradients and steps its optimizer; the
    // slowest of these ends the step. A stage's last backward waits for the later
    // stages', which their reductions' contention lengthened.
    let tails: Vec<f64> = (0..stages.len())
        .map(|i| {
            let later: f64 = stages[i + 1..]
                .iter()
                .map(|s| drain_contention(plan, s, micro_batches))
                .sum();
            stages[i].dp_exposed_s + later + stages[i].optimizer_s
        })
        .collect();
    let (tail_index, tail) = tails
        .iter()
        .copied()
        .enumerate()
        // The last of equal tails, as `max_by` picks.
        .fold(
            (0, f64::MIN),
            |acc, (i, t)| if t >= acc.1 { (i, t) } else { acc },
        );
    let tail_stage = &stages[tail_index];
    let compute_s = mb * compute_per_mb + tail_stage.optimizer_s;
    let exposed_comm_s = mb * comm_per_mb + (tail - tail_stage.optimizer_s);
    let step_s = compute_s + exposed_comm_s + bubble_s;
    debug_assert!((step_s - (mb * t_max + bubble_s + tail)).abs() < 1e-9 * step_s.max(1.0));
    // Each stage's own share: what it computes, what it waits for on its links, and the
    // rest of the step, spent waiting for the other stages.
    for s in &mut stages {
        let t = &s.time;
        s.busy_s =
            mb * (t.forward.compute + t.backward.compute) + s.optimizer_s + s.dp_contention_s;
        s.comm_s =
            mb * (t.forward.comm + t.backward.comm + t.p2p) + (s.dp_exposed_s - s.dp_contention_s);
        s.wait_s = (step_s - s.busy_s - s.comm_s).max(0.0);
    }

    // The FLOPs the training method needs (`cost::method::model_flops_per_step`: 6 per
    // parameter and token for full training, fewer where weights are frozen).
    let flops_per_step = method::model_flops_per_step(plan);
    let recompute_flops: f64 = {
        // Executed FLOPs beyond the model's: summed over all GPUs from the stage passes.
        let executed: f64 = stages
            .iter()
            .map(|s| s.time.forward.flops + s.time.backward.flops)
            .sum::<f64>()
            * mb
            * (p.dp * p.cp) as f64
            * p.tp as f64;
        let base = flops_per_step;
        match p.recompute {
            Recompute::None => 0.0,
            _ => (executed - base).max(0.0).min(base),
        }
    };
    let hw_flops_per_step = flops_per_step + recompute_flops;
    let world = plan.cluster.world_size() as f64;
    let model_tflops_per_gpu = flops_per_step / step_s / world / 1e12;
    let hw_tflops_per_gpu = hw_flops_per_step / step_s / world / 1e12;
    let peak_per_gpu: f64 = {
        let mut total = 0.0;
        for g in &plan.cluster.groups {
            let peak = g
                .gpu
                .peak(plan.train.precision)
                .or(g.gpu.peak(crate::plan::Precision::Fp32))
                .unwrap_or(1.0);
            total += peak * g.gpus() as f64;
        }
        total / world
    };
    let peak_stage = stages
        .iter()
        .enumerate()
        .max_by(|a, b| {
            (a.1.memory.total_bytes / a.1.capacity_bytes)
                .total_cmp(&(b.1.memory.total_bytes / b.1.capacity_bytes))
        })
        .map(|(i, _)| i)
        .unwrap_or(0);
    let samples_per_s = plan.train.global_batch as f64 / step_s;
    Estimate {
        params: params::total_params(m),
        trained_params: method::trained_params(plan),
        flops_per_step,
        hw_flops_per_step,
        micro_batches,
        peak_stage,
        stages,
        step_s,
        compute_s,
        exposed_comm_s,
        bubble_s,
        tokens_per_s: samples_per_s * m.seq_len as f64,
        samples_per_s,
        model_tflops_per_gpu,
        hw_tflops_per_gpu,
        mfu: model_tflops_per_gpu * 1e12 / peak_per_gpu,
        method: TimeMethod::ClosedForm,
        closed_form_step_s: step_s,
        peak_flops_per_gpu: peak_per_gpu,
        global_batch: plan.train.global_batch,
        seq_len: m.seq_len,
        world_size: plan.cluster.world_size(),
    }
}

/// The device and placement of a plan's first node group: the setup the cost tests share.
#[cfg(test)]
pub(crate) fn first_group(plan: &Plan) -> (time::Device<'_>, time::Placement) {
    let group = &plan.cluster.groups[0];
    let dev = time::Device {
        gpu: &group.gpu,
        precision: plan.train.precision,
    };
    (dev, time::placement(plan, group))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;

    fn plan(schedule: &str, pp: u64, global_batch: u64) -> Plan {
        // A tiny vocabulary keeps the first and last stages as heavy as the others, so
        // the stages are uniform and the textbook bubble formulas are exact.
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ layers = 32, hidden = 4096, heads = 32, vocab = 128, seq_len = 2048 }}
             train {{ global_batch = {global_batch}, precision = bf16, optimizer = adam }}
             parallel {{ tp = 1, pp = {pp}, dp = auto, micro_batch = 1, schedule = {schedule} }}"
        );
        let checked = check_source("t.tp", &text);
        checked
            .plan
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
    }

    #[test]
    fn the_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1() {
        for (pp, m) in [(2, 8), (4, 16), (8, 8), (8, 64)] {
            let p = plan("1f1b", pp, m * 8 / pp);
            let e = estimate(&p);
            // The tail after the last backward: a stage's own reduction and optimizer, and
            // what the later stages' reductions cost their passes (contention on NVLink).
            let pipeline = e.step_s
                - (0..e.stages.len())
                    .map(|i| {
                        let later: f64 = e.stages[i + 1..]
                            .iter()
                            .map(|s| drain_contention(&p, s, m))
                            .sum();
                        e.stages[i].dp_exposed_s + later + e.stages[i].optimizer_s
                    })
                    .fold(0.0, f64::max);
            let fraction = e.bubble_s / pipeline;
            let want = (pp - 1) as f64 / (m + pp - 1) as f64;
            assert!(
                (fraction - want).abs() < 0.01 * want,
                "pp {pp} m {m}: {fraction} vs {want}"
            );
        }
    }

    #[test]
    fn throughput_and_mfu_follow_from_the_step_time() {
        let e = estimate(&plan("1f1b", 4, 32));
        assert!((e.samples_per_s - 32.0 / e.step_s).abs() < 1e-9);
        assert!((e.tokens_per_s - e.samples_per_s * 2048.0).abs() < 1e-6);
        let peak = crate::catalog::Catalog::builtin()
            .gpu("H100_SXM_80GB")
            .and_then(|g| g.peak(crate::plan::Precision::Bf16))
            .unwrap();
        let mfu = e.flops_per_step / e.step_s / 8.0 / peak;
        assert!((e.mfu - mfu).abs() < 1e-12);
        assert!(e.mfu > 0.2 && e.mfu < 0.8, "{}", e.mfu);
    }

    /// Llama 2 7B over a node of A100s (stage 0) and a node of V100s (stage 1), `ends`
    /// written into the parallel block.
    fn mixed(ends: &str) -> Plan {
        let text = format!(
            "cluster c {{
                group fast {{ nodes = 1, gpus_per_node = 4, gpu = A100_SXM_80GB }}
                group slow {{ nodes = 1, gpus_per_node = 4, gpu = V100_SXM_32GB }}
                inter_node {{ kind = ethernet, nics_per_node = 1, bandwidth = 100 Gb/s, latency = 20 us }} }}
             model m {{ preset = \"llama2-7b\", seq_len = 2048 }}
             train {{ global_batch = 64, precision = fp16, optimizer = adamw }}
             parallel {{ tp = 4, pp = 2, dp = 1, micro_batch = 1, sequence_parallel = true,
                         zero = 1, recompute = selective {ends} }}"
        );
        let checked = check_source("t.tp", &text);
        checked
            .plan
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
    }

    #[test]
    fn a_faster_stage_waits_for_the_slower_and_the_report_says_so() {
        let e = estimate(&mixed(""));
        for s in &e.stages {
            let sum = s.busy_s + s.comm_s + s.wait_s;
            assert!(
                (sum - e.step_s).abs() < 1e-9 * e.step_s,
                "{sum} vs {}",
                e.step_s
            );
        }
        let (fast, slow) = (&e.stages[0], &e.stages[1]);
        // The V100 stage paces the pipeline: the step's bubble is its fill and drain, small,
        // while the A100 stage waits for it most of the step.
        assert!(e.bubble_s < 0.02 * e.step_s, "{}", e.bubble_s);
        assert!(fast.busy_fraction(e.step_s) < 0.5 * slow.busy_fraction(e.step_s));
        assert!(fast.wait_s > 0.4 * e.step_s, "{}", fast.wait_s);
        assert!(e.stage_imbalance() > 0.3, "{}", e.stage_imbalance());
        // Moving layers to the fast stage evens the work and shortens the step.
        let moved = estimate(&mixed(", first_stage_layers = 23, last_stage_layers = 9"));
        assert!(moved.stage_imbalance() < 0.1, "{}", moved.stage_imbalance());
        assert!(moved.step_s < 0.7 * e.step_s);
        // One stage has nothing to wait for.
        let one = estimate(&plan("1f1b", 1, 8));
        assert_eq!(one.stage_imbalance(), 0.0);
        assert!(one.stages[0].wait_s < 1e-9 * one.step_s);
    }
}
