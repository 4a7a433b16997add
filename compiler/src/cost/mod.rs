//! The cost model: parameters, FLOPs, memory and time of one training step.
//!
//! [`estimate`] is the entry point: it maps pipeline stages onto the cluster's node groups,
//! costs each stage's memory and time, and composes the step with the pipeline schedule.

pub mod comm;
pub mod kinds;
pub mod memory;
pub mod ops;
pub mod params;
pub mod time;

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
    /// contention; 0 without a profile that measured it). It lengthens the stage's last
    /// backward passes, so it also delays the drain of every earlier pipeline stage.
    pub dp_contention_s: f64,
    pub optimizer_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    pub params: f64,
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
        let experts = memory::stage_expert_params(plan, s);
        let opt = optimizer_time(plan, mem.params, experts, &dev);
        stages.push(StageEstimate {
            capacity_bytes: group.gpu.memory,
            gpu: group.gpu.name.clone(),
            memory: mem,
            time: t,
            dp_exposed_s: exposed + contention,
            dp_contention_s: contention,
            optimizer_s: opt,
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
            let later: f64 = stages[i + 1..].iter().map(|s| s.dp_contention_s).sum();
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

    let flops_per_step = params::flops_per_step(m, plan.train.global_batch);
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
            let e = estimate(&plan("1f1b", pp, m * 8 / pp));
            let pipeline = e.step_s
                - e.stages
                    .iter()
                    .map(|s| s.dp_exposed_s + s.optimizer_s)
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
}
