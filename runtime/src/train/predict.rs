//! What planc predicts for the run it is about to make: the same plan, priced for the GPU
//! that runs it (the catalog entry of the local device's family) with the layers that run
//! and planc's own kernels (`job.framework = planc`), by the cost model and the simulator
//! that `planc check` uses.

use planc_compiler::catalog::Catalog;
use planc_compiler::cost::estimate;
use planc_compiler::cost::kinds::{stage_by_kind, WorkKind};
use planc_compiler::plan::{Gpu, Plan};
use serde::Serialize;

#[derive(Clone, Debug, Default, Serialize)]
pub struct PredictedMemory {
    pub weights: f64,
    pub gradients: f64,
    pub optimizer: f64,
    pub activations: f64,
    pub other: f64,
}

#[derive(Clone, Debug)]
pub struct Prediction {
    pub catalog_gpu: String,
    /// Which figures came from a measured device profile (as `planc check` says it).
    pub profile: Option<String>,
    /// What ran the fused attention the profile timed (its provenance; older profiles
    /// timed planc's kernels), where a profile prices the run.
    pub attention_timed_on: Option<String>,
    /// The fingerprint of planc's kernels the pricing profile timed, where it records one.
    pub kernels_timed: Option<String>,
    pub step_s: f64,
    pub peak_bytes: f64,
    pub memory: PredictedMemory,
    /// The model FLOPs of a step that fall to one GPU (the step's over the plan's GPUs), so
    /// a rank's measured step gives its TFLOP/s and MFU against its own peak.
    pub flops_per_gpu_step: f64,
    /// Dense peak of one GPU at the plan's precision (for MFU).
    pub peak_flops: f64,
    /// The step of stage 0 by kind of work, from the profile where the plan has one.
    pub by_kind: ByKind,
    /// The same from the catalog's constants, where a profile priced `by_kind`.
    pub by_kind_constants: Option<ByKind>,
    /// Where the profile measured the power limit (`cost::power`): how hard the step drives
    /// the tensor cores (a share of their burst rate) and how much slower that makes its
    /// products and memory-bound kernels than the profile's bursts.
    pub power: Option<Power>,
    /// Bytes per layer and the layer-independent rest, for `--layers` advice.
    per_layer: f64,
    fixed: f64,
}

impl Prediction {
    /// The most layers whose predicted memory fits in `bytes`.
    pub fn layers_that_fit(&self, bytes: f64) -> u64 {
        if self.per_layer <= 0.0 {
            return 0;
        }
        ((bytes - self.fixed) / self.per_layer).max(0.0).floor() as u64
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Power {
    pub utilisation: f64,
    pub products: f64,
    pub memory: f64,
}

/// The line a run prints where the power limit priced it.
pub fn power_note(pred: &Prediction) -> Option<String> {
    let p = pred.power?;
    Some(format!(
        "note: this step drives the tensor cores at {:.0} % of their burst rate; at the board's \
         power limit the profile's power curve prices its products {:.2}× and memory-bound \
         kernels {:.2}× their burst times",
        p.utilisation * 100.0,
        p.products,
        p.memory
    ))
}

/// Seconds of a step by kind of work.
pub type ByKind = Vec<(WorkKind, f64)>;

/// `plan`'s step on `stage` by kind of work, and again without device profiles where
/// the plan has one (what the prediction was before calibration). `step`: the plan's
/// simulated step, where it simulated.
fn by_kind(plan: &Plan, stage: u64, step: Option<f64>) -> (ByKind, Option<ByKind>) {
    let mb = plan.parallel.grad_accum(plan.train.global_batch).max(1);
    let with = with_wait(plan, stage_by_kind(plan, stage, mb), step);
    if plan.cluster.groups.iter().all(|g| g.gpu.profile.is_none()) {
        return (with, None);
    }
    let mut bare = plan.clone();
    for g in &mut bare.cluster.groups {
        g.gpu.profile = None;
    }
    // The constants price the stages differently, so their step is their own.
    let bare_step = if bare.parallel.pp > 1 {
        planc_simulator::simulate(&bare)
            .ok()
            .map(|s| s.breakdown.step_s)
    } else {
        None
    };
    let bare_kinds = with_wait(&bare, stage_by_kind(&bare, stage, mb), bare_step);
    (with, Some(bare_kinds))
}

/// Under a pipeline, the kinds and the stage's wait for its neighbours: the step less its
/// own work, which is the bubble and also, where another stage has more work (the output
/// layer, the embedding), the wait for it; `planc run` measures it in its transfers. (On
/// two H200s Llama 1B's stage 0 waited 74.6 ms of a 192.7 ms step, its bubble 28.4.)
fn with_wait(plan: &Plan, mut kinds: ByKind, step: Option<f64>) -> ByKind {
    if let (true, Some(step)) = (plan.parallel.pp > 1, step) {
        let busy: f64 = kinds.iter().map(|(_, s)| s).sum();
        kinds.push((WorkKind::PipelineWait, (step - busy).max(0.0)));
    }
    kinds
}

/// How a profile's provenance names planc's own attention kernels (or says nothing).
pub const PLANC_KERNELS: &str = "planc's kernels";

/// The note a run prints when its flash attention runs on cuDNN while the profile that
/// prices it timed planc's own kernels: the prediction's attention is the other path's
/// (cuDNN's took 0.58-0.60x of it on two H200s, 2026-11-27).
pub fn attention_path_note(pred: &Prediction, on_cudnn: bool) -> Option<String> {
    let timed_on = pred.attention_timed_on.as_deref()?;
    (on_cudnn && timed_on == PLANC_KERNELS).then(|| {
        format!(
            "note: flash attention runs on cuDNN's fused attention, but the profile that prices \
             this run ({}) timed planc's own attention kernels, so the predicted attention is \
             theirs; `planc calibrate` times the path a run takes",
            pred.profile.as_deref().unwrap_or("the device's")
        )
    })
}

/// A short fingerprint of planc's kernels' source (`device::cuda::SOURCE`; the first 12 hex
/// digits of the hash the checkpoints take of a plan, [`super::plan_hash`]): what a profile
/// records of the kernels it timed.
pub fn kernels_fingerprint() -> String {
    let mut h = super::plan_hash(crate::device::cuda::SOURCE);
    h.truncate(12);
    h
}

/// The note a run prints when the profile that prices it timed planc's kernels of another
/// build (`current` is this build's fingerprint): its norm, activation, attention and
/// optimizer points are that build's (GPT-2's activations moved 3.7 % of its step between
/// two builds, 2026-11-28). Silent where the profile records no fingerprint (profiles from
/// before it did), or none prices the run.
pub fn kernels_note(pred: &Prediction, current: &str) -> Option<String> {
    let timed = pred.kernels_timed.as_deref()?;
    (timed != current).then(|| {
        format!(
            "note: the profile that prices this run ({}) timed planc's kernels of another build \
             (kernels {timed}; this build's are {current}), so its predictions for the norms, \
             activations, attention and optimizer are that build's; `planc calibrate` times \
             this build's",
            pred.profile.as_deref().unwrap_or("the device's")
        )
    })
}

/// `plan` as the run prices it: on the local device's catalog GPU with its profile and
/// planc's own kernels.
fn as_run(plan: &Plan, device_name: &str) -> (Plan, Gpu, Option<Power>) {
    let mut p = plan.clone();
    let mut gpu = catalog_gpu_for(device_name, &p.cluster.groups[0].gpu);
    // Without a measured profile of this device, planc's shipped one for it (said so in
    // the prediction's profile note): the constants do not describe planc's kernels.
    if gpu.profile.is_none() {
        gpu.profile = planc_compiler::profile::shipped(&gpu.name, p.train.precision.as_str());
    }
    for g in &mut p.cluster.groups {
        g.gpu = gpu.clone();
    }
    // What runs is planc's own kernels, whatever framework the plan's job names.
    p.framework = planc_compiler::plan::Framework::Planc;
    // Priced on another GPU's profile than the plan named: the power limit settles anew.
    let utilisation = planc_compiler::cost::power::settle(&mut p);
    let power = utilisation.and_then(|u| {
        let (products, memory) = p.cluster.groups[0].gpu.power_slowdown?;
        Some(Power {
            utilisation: u,
            products,
            memory,
        })
    });
    (p, gpu, power)
}

pub fn predict(plan: &Plan, device_name: &str) -> Prediction {
    let (p, gpu, power) = as_run(plan, device_name);
    let est = estimate(&p);
    let sim = planc_simulator::simulate(&p).ok().map(|s| s.breakdown);
    let step_s = sim.as_ref().map_or(est.step_s, |b| b.step_s);
    let st = &est.stages[est.peak_stage].memory;
    // Memory is affine in the layer count: price one more layer to find the slope.
    let mut q = p.clone();
    q.model.layers += 1;
    let est1 = estimate(&q);
    let st1 = &est1.stages[est1.peak_stage].memory;
    let per_layer = (st1.total_bytes - st.total_bytes).max(0.0);
    let (by_kind, by_kind_constants) = by_kind(&p, 0, sim.map(|b| b.step_s));
    Prediction {
        by_kind,
        by_kind_constants,
        power,
        catalog_gpu: gpu.name.clone(),
        profile: planc_compiler::report::profile_note(&p),
        attention_timed_on: gpu.profile.as_ref().map(|pr| {
            pr.provenance
                .fused_attention
                .clone()
                .unwrap_or_else(|| PLANC_KERNELS.to_string())
        }),
        kernels_timed: gpu
            .profile
            .as_ref()
            .and_then(|pr| pr.provenance.kernels.clone()),
        step_s,
        peak_bytes: st.total_bytes,
        memory: PredictedMemory {
            weights: st.weights_bytes,
            gradients: st.gradients_bytes,
            optimizer: st.optimizer_bytes,
            activations: st.activations_bytes,
            other: st.other_bytes,
        },
        flops_per_gpu_step: est.flops_per_step / est.world_size.max(1) as f64,
        peak_flops: est.peak_flops_per_gpu,
        per_layer,
        fixed: st.total_bytes - per_layer * p.model.layers as f64,
    }
}

/// The catalog GPU that describes the local device: the plan's own when it is the same
/// family, else the catalog entry of the device's family (predictions must be for the card
/// that runs them), else the plan's with a note in the report.
pub fn catalog_gpu_for(device: &str, plan_gpu: &Gpu) -> Gpu {
    let family = |name: &str| name.split('_').next().unwrap_or(name).to_ascii_uppercase();
    // Whole words of the device's name ("NVIDIA H200", "NVIDIA A100-SXM4-80GB"): the H20's
    // family is a prefix of the H200's, and the B200's a suffix of the GB200's.
    let device_upper = device.to_ascii_uppercase();
    let words: Vec<&str> = device_upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .collect();
    let is_family = |name: &str| words.contains(&family(name).as_str());
    if is_family(&plan_gpu.name) {
        return plan_gpu.clone();
    }
    Catalog::builtin()
        .gpus
        .iter()
        .map(|(_, g)| g)
        .filter(|g| is_family(&g.name))
        .max_by(|a, b| a.memory.total_cmp(&b.memory))
        .cloned()
        .unwrap_or_else(|| plan_gpu.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_device_is_matched_by_its_whole_family_name() {
        let c = Catalog::builtin();
        let h100 = c.gpu("H100_SXM_80GB").unwrap();
        let pick = |device| catalog_gpu_for(device, h100).name;
        assert_eq!(pick("NVIDIA H200"), "H200_SXM_141GB");
        assert_eq!(pick("NVIDIA H20"), "H20_96GB");
        assert_eq!(pick("NVIDIA B200"), "B200");
        assert_eq!(pick("NVIDIA GB200"), "GB200");
        assert_eq!(pick("NVIDIA H100 80GB HBM3"), "H100_SXM_80GB");
        assert_eq!(pick("NVIDIA A100-SXM4-80GB"), "A100_SXM_80GB");
        // A plan's H20 on an H200 is not the H200's family.
        let h20 = c.gpu("H20_96GB").unwrap();
        assert_eq!(catalog_gpu_for("NVIDIA H200", h20).name, "H200_SXM_141GB");
    }

    #[test]
    fn an_fp16_run_is_priced_from_the_shipped_16_bit_profile() {
        // GPT-2 flash on one H200, the speed plan, in bf16 and fp16: the same kernels at 16
        // bits and one tensor-core peak, so one profile prices both (fp16 adds its loss
        // scale's norm and checks).
        let gpt2 = |precision: &str| {
            let text = std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../examples/gpt2-124m-1gpu.tp"),
            )
            .unwrap()
            .replace("attention = standard", "attention = flash")
            .replace("precision = bf16", &format!("precision = {precision}"));
            let c = planc_compiler::check::check_source("t.tp", &text);
            c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics))
        };
        let bf16 = predict(&gpt2("bf16"), "NVIDIA H200");
        let fp16 = predict(&gpt2("fp16"), "NVIDIA H200");
        assert_eq!(fp16.profile, bf16.profile);
        assert!(fp16.profile.is_some());
        let ratio = fp16.step_s / bf16.step_s;
        assert!((1.0..1.1).contains(&ratio), "fp16 / bf16 {ratio}");
    }

    fn plan(parallel: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 2, gpu = H100_SXM_80GB }}
             model m {{ layers = 8, hidden = 512, heads = 8, vocab = 1024, seq_len = 256 }}
             train {{ global_batch = 8, precision = bf16 }}
             parallel {{ micro_batch = 1, {parallel} }}"
        );
        let c = planc_compiler::check::check_source("t.tp", &text);
        c.plan
            .unwrap_or_else(|| panic!("{text}: {:#?}", c.diagnostics))
    }

    fn wait(p: &Prediction) -> Option<f64> {
        p.by_kind
            .iter()
            .find(|(k, _)| *k == WorkKind::PipelineWait)
            .map(|&(_, s)| s)
    }

    #[test]
    fn a_run_on_cudnn_priced_by_a_profile_of_plancs_attention_says_so() {
        // The shipped H100 profile timed cuDNN's attention (2026-11-28): nothing to say.
        let shipped = predict(&plan("tp = 1, pp = 1, dp = 2"), "NVIDIA H100 80GB HBM3");
        let timed_on = shipped
            .attention_timed_on
            .clone()
            .expect("a shipped profile");
        assert!(timed_on.starts_with("cuDNN"), "{timed_on}");
        assert_eq!(attention_path_note(&shipped, true), None);
        // A profile measured before cuDNN's attention ran timed planc's own kernels.
        let mut pred = shipped;
        pred.attention_timed_on = Some(PLANC_KERNELS.into());
        let note = attention_path_note(&pred, true).expect("cuDNN against planc's kernels");
        assert!(
            note.contains("timed planc's own attention kernels"),
            "{note}"
        );
        assert_eq!(attention_path_note(&pred, false), None);
        let mut cudnn = pred;
        cudnn.attention_timed_on = Some("cuDNN 9.19.0, deterministic backward".into());
        assert_eq!(attention_path_note(&cudnn, true), None);
    }

    #[test]
    fn the_kernels_fingerprint_is_twelve_hex_digits_of_their_source() {
        let f = kernels_fingerprint();
        assert_eq!(f.len(), 12);
        assert!(f.chars().all(|c| c.is_ascii_hexdigit()), "{f}");
        assert!(super::super::plan_hash(crate::device::cuda::SOURCE).starts_with(&f));
    }

    #[test]
    fn a_profile_that_timed_another_builds_kernels_says_so() {
        // The shipped profiles predate the fingerprint: nothing can be said of them.
        let mut pred = predict(&plan("tp = 1, pp = 1, dp = 2"), "NVIDIA H100 80GB HBM3");
        assert_eq!(pred.kernels_timed, None);
        assert_eq!(kernels_note(&pred, "0123456789ab"), None);
        // A profile of this build's kernels is quiet; one of another build's is not.
        pred.kernels_timed = Some("0123456789ab".into());
        assert_eq!(kernels_note(&pred, "0123456789ab"), None);
        let note = kernels_note(&pred, "ba9876543210").expect("another build's kernels");
        assert!(note.contains("kernels 0123456789ab"), "{note}");
        assert!(note.contains("this build's are ba9876543210"), "{note}");
        assert!(note.contains("planc calibrate"), "{note}");
    }

    #[test]
    fn a_gpus_share_of_the_steps_flops_is_the_step_over_the_plans_gpus() {
        // Two GPUs of a data-parallel plan each do half of its model FLOPs: MFU counts one
        // GPU's measured rate against one GPU's peak, as `planc check` does.
        let p = plan("tp = 1, pp = 1, dp = 2");
        let two = predict(&p, "NVIDIA H100");
        let est = planc_compiler::cost::estimate(&p);
        assert!(
            (two.flops_per_gpu_step * 2.0 - est.flops_per_step).abs() < 1e-6 * est.flops_per_step
        );
        // At check's own step time, the rank's MFU is check's.
        let mfu = two.flops_per_gpu_step / est.step_s / est.peak_flops_per_gpu;
        assert!((mfu - est.mfu).abs() < 1e-9, "{mfu} vs {}", est.mfu);
    }

    #[test]
    fn a_pipelined_stage_waits_for_what_of_the_step_is_not_its_own_work() {
        let p = plan("tp = 1, pp = 2, dp = 1, schedule = gpipe");
        let piped = predict(&p, "NVIDIA H100");
        // As `predict` prices it: planc's own kernels, the device's shipped profile.
        let (q, _, _) = as_run(&p, "NVIDIA H100");
        let sim = planc_simulator::simulate(&q).unwrap().breakdown;
        let busy: f64 = piped
            .by_kind
            .iter()
            .filter(|(k, _)| *k != WorkKind::PipelineWait)
            .map(|(_, s)| s)
            .sum();
        let w = wait(&piped).unwrap();
        assert!(
            (w + busy - sim.step_s).abs() < 1e-12,
            "{w} + {busy} vs {}",
            sim.step_s
        );
        // Stage 0 has no output layer: it waits for more than the bubble.
        assert!(w > sim.bubble_s, "{w} vs bubble {}", sim.bubble_s);
        assert_eq!(
            wait(&predict(&plan("tp = 1, pp = 1, dp = 2"), "NVIDIA H100")),
            None
        );
    }
}
