//! The machine-readable report: the JSON contract of `docs/spec/report.md`.
//!
//! Keys here are a promise to scripts and dashboards: add freely, never rename or drop.

use serde::Serialize;

use planc_lang::Diagnostic;

use crate::cost::Estimate;
use crate::plan::Plan;
use crate::source::SourceMap;

#[derive(Serialize, Debug, Clone)]
pub struct JsonDiagnostic {
    pub severity: &'static str,
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    /// Text that fixes the problem in place of `line:column`-`end_line:end_column`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    pub file: Option<String>,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub end_line: Option<usize>,
    pub end_column: Option<usize>,
}

#[derive(Serialize, Debug, Clone)]
pub struct PlanSection {
    pub world_size: u64,
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    pub cp: u64,
    pub ep: u64,
    pub vpp: u64,
    pub micro_batch: u64,
    pub grad_accum: u64,
    pub global_batch: u64,
    pub schedule: &'static str,
    pub zero: u64,
    pub recompute: &'static str,
    pub sequence_parallel: bool,
    pub offload: &'static str,
    pub precision: &'static str,
    /// Extension, present when the plan sets it: layers of the first pipeline stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_stage_layers: Option<u64>,
    /// Extension, present when the plan sets it: layers of the last pipeline stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_stage_layers: Option<u64>,
    /// Extension, present when the framework runs its unfused path (`job.kernels =
    /// eager`): `"eager"`, the kernels the step was priced as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<&'static str>,
    /// Extension, present when the job states it (`job.attention_kernel`): the fused
    /// attention kernel the step was priced with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention_kernel: Option<&'static str>,
}

#[derive(Serialize, Debug, Clone)]
pub struct ModelSection {
    pub name: String,
    pub params: u64,
    pub flops_per_step: f64,
    pub hw_flops_per_step: f64,
    /// Extension, present when the plan does not train every weight (`train.method`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<MethodSection>,
}

/// What trains, when not every weight does.
#[derive(Serialize, Debug, Clone)]
pub struct MethodSection {
    /// `lora` or `frozen`.
    pub name: &'static str,
    /// Parameters with gradients and optimizer state (LoRA's adapters; the trained layers).
    pub trained_params: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_rank: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_targets: Option<Vec<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen_layers: Option<u64>,
}

fn method_section(plan: &Plan, e: &Estimate) -> Option<MethodSection> {
    use crate::plan::TrainMethod;
    let (lora_rank, lora_targets, frozen_layers) = match &plan.train.method {
        TrainMethod::Full => return None,
        TrainMethod::Lora(l) => (
            Some(l.rank),
            Some(l.targets.iter().map(|t| t.as_str()).collect()),
            None,
        ),
        TrainMethod::Frozen { frozen_layers } => (None, None, Some(*frozen_layers)),
    };
    Some(MethodSection {
        name: plan.train.method.method().as_str(),
        trained_params: e.trained_params.round() as u64,
        lora_rank,
        lora_targets,
        frozen_layers,
    })
}

#[derive(Serialize, Debug, Clone)]
pub struct StageSection {
    pub stage: u64,
    pub gpu: String,
    /// Extension: transformer layers on this stage (they differ with uneven stages).
    pub layers: u64,
    pub weights_bytes: u64,
    pub gradients_bytes: u64,
    pub optimizer_bytes: u64,
    pub activations_bytes: u64,
    pub other_bytes: u64,
    pub total_bytes: u64,
    pub capacity_bytes: u64,
}

#[derive(Serialize, Debug, Clone)]
pub struct MemorySection {
    pub peak_bytes: u64,
    pub capacity_bytes: u64,
    pub stages: Vec<StageSection>,
}

#[derive(Serialize, Debug, Clone)]
pub struct TimeSection {
    pub step_s: f64,
    pub compute_s: f64,
    pub exposed_comm_s: f64,
    pub bubble_s: f64,
    pub bubble_fraction: f64,
    /// Extension: of `compute_s`, the optimizer step (the longest of the stages', after
    /// their last backward pass).
    pub optimizer_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_train_s: Option<f64>,
    /// Extension: `simulated` (event-driven, the default of `planc check`) or `closed form`.
    pub method: &'static str,
    /// Extension: the closed-form step time, as a cross-check of the simulation.
    pub closed_form_step_s: f64,
    /// Extension: where measured curves (`cluster.profile`) replaced the catalog's constants:
    /// which figures, and the device and date of the measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Extension: the built-in GPUs' figures that price the step without a measurement or a
    /// source behind them (`catalog/gpus.toml`'s `[[gpu.unsourced]]`), and a sustained clock
    /// nobody measured, where no profile prices the plan.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub estimates: Vec<String>,
    /// Extension: each pipeline stage's split of the step. `bubble_s` is the busiest
    /// stage's; a faster stage waits for it beyond that, which `wait_s` shows.
    pub stages: Vec<StageTimeSection>,
    /// Extension: the largest stage's own work (busy + its communication) over the stages'
    /// mean, less one: 0 when the stages are balanced.
    pub stage_imbalance: f64,
}

#[derive(Serialize, Debug, Clone)]
pub struct StageTimeSection {
    pub stage: u64,
    pub gpu: String,
    /// Seconds of the step its GPUs compute (passes, recomputation, optimizer).
    pub busy_s: f64,
    /// `busy_s / step_s`.
    pub busy_fraction: f64,
    /// Seconds they wait for their own communication.
    pub comm_s: f64,
    /// Seconds they wait for other stages (pipeline fill and drain, a slower stage's pace).
    pub wait_s: f64,
}

#[derive(Serialize, Debug, Clone)]
pub struct ThroughputSection {
    pub tokens_per_s: f64,
    pub samples_per_s: f64,
    pub model_tflops_per_gpu: f64,
    pub hw_tflops_per_gpu: f64,
    pub mfu: f64,
}

/// Extension: what the plan costs (`crate::pricing`). GPU-hours always; the training run
/// with `train.tokens` or a written `train.steps`; money with `cluster.price`.
#[derive(Serialize, Debug, Clone)]
pub struct CostSection {
    /// GPUs billed: the whole cluster (a layout uses every GPU).
    pub gpus: u64,
    pub gpu_hours_per_step: f64,
    pub gpu_hours_per_million_tokens: f64,
    /// Tokens of the training run, and the attribute they come from (`tokens`, `steps`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_tokens: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_tokens_from: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_hours_to_train: Option<f64>,
    /// ISO 4217 code of the amounts below, present with a price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<&'static str>,
    /// Of one GPU (the mean over the cluster's where groups differ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_per_gpu_hour: Option<f64>,
    /// Of the whole cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_per_hour: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_step: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_million_tokens: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_to_train: Option<f64>,
}

impl CostSection {
    pub fn of(b: &crate::pricing::Bill) -> CostSection {
        let m = b.money.as_ref();
        CostSection {
            gpus: b.gpus,
            gpu_hours_per_step: b.gpu_hours_per_step,
            gpu_hours_per_million_tokens: b.gpu_hours_per_million_tokens,
            train_tokens: b.run.map(|r| r.tokens),
            train_tokens_from: b.run.map(|r| r.from),
            gpu_hours_to_train: b.gpu_hours_to_train,
            currency: m.map(|m| m.currency.code()),
            price_per_gpu_hour: m.map(|m| m.price_per_gpu_hour),
            price_per_hour: m.map(|m| m.per_hour),
            cost_per_step: m.map(|m| m.per_step),
            cost_per_million_tokens: m.map(|m| m.per_million_tokens),
            cost_to_train: m.and_then(|m| m.to_train),
        }
    }
}

#[derive(Serialize, Debug, Clone)]
pub struct Report {
    pub version: u32,
    pub ok: bool,
    pub diagnostics: Vec<JsonDiagnostic>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanSection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<TimeSection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput: Option<ThroughputSection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostSection>,
}

pub fn json_diagnostic(d: &Diagnostic, sources: &SourceMap) -> JsonDiagnostic {
    let (file, start, end) = match &d.primary {
        Some(l) if (l.file.0 as usize) < sources.files.len() => {
            let (s, e) = sources.line_cols(l.file, l.span);
            (Some(sources.get(l.file).display.clone()), Some(s), Some(e))
        }
        _ => (None, None, None),
    };
    JsonDiagnostic {
        severity: d.severity.as_str(),
        code: d.code,
        message: d.message.clone(),
        help: d.help.clone(),
        replacement: d.replacement.clone(),
        file,
        line: start.map(|s| s.0),
        column: start.map(|s| s.1),
        end_line: end.map(|e| e.0),
        end_column: end.map(|e| e.1),
    }
}

pub fn build(
    diags: &[Diagnostic],
    sources: &SourceMap,
    costed: Option<(&Plan, &Estimate)>,
) -> Report {
    let ok = !diags.iter().any(Diagnostic::is_error);
    let diagnostics = diags.iter().map(|d| json_diagnostic(d, sources)).collect();
    let mut r = Report {
        version: 1,
        ok,
        diagnostics,
        plan: None,
        model: None,
        memory: None,
        time: None,
        throughput: None,
        cost: None,
    };
    let Some((plan, e)) = costed else { return r };
    let bill = crate::pricing::bill(plan, e);
    let p = &plan.parallel;
    r.plan = Some(PlanSection {
        world_size: plan.cluster.world_size(),
        tp: p.tp,
        pp: p.pp,
        dp: p.dp,
        cp: p.cp,
        ep: p.ep,
        vpp: p.vpp,
        micro_batch: p.micro_batch,
        grad_accum: e.micro_batches,
        global_batch: plan.train.global_batch,
        schedule: p.schedule.as_str(),
        zero: p.zero,
        recompute: p.recompute.as_str(),
        sequence_parallel: p.sequence_parallel,
        offload: p.offload.as_str(),
        precision: plan.train.precision.as_str(),
        first_stage_layers: p.first_stage_layers,
        last_stage_layers: p.last_stage_layers,
        kernels: plan.eager().then_some(plan.kernels.as_str()),
        attention_kernel: plan.attention_kernel.map(|k| k.as_str()),
    });
    r.model = Some(ModelSection {
        name: plan.model.name.clone(),
        params: e.params.round() as u64,
        flops_per_step: e.flops_per_step,
        hw_flops_per_step: e.hw_flops_per_step,
        method: method_section(plan, e),
    });
    let stages: Vec<StageSection> = e
        .stages
        .iter()
        .map(|s| StageSection {
            stage: s.memory.stage,
            gpu: s.gpu.clone(),
            layers: plan.stage_layers(s.memory.stage),
            weights_bytes: s.memory.weights_bytes.round() as u64,
            gradients_bytes: s.memory.gradients_bytes.round() as u64,
            optimizer_bytes: s.memory.optimizer_bytes.round() as u64,
            activations_bytes: s.memory.activations_bytes.round() as u64,
            other_bytes: s.memory.other_bytes.round() as u64,
            total_bytes: s.memory.total_bytes.round() as u64,
            capacity_bytes: s.capacity_bytes.round() as u64,
        })
        .collect();
    let peak = &e.stages[e.peak_stage];
    r.memory = Some(MemorySection {
        peak_bytes: peak.memory.total_bytes.round() as u64,
        capacity_bytes: peak.capacity_bytes.round() as u64,
        stages,
    });
    r.time = Some(TimeSection {
        profile: profile_note(plan),
        estimates: estimates_note(plan),
        step_s: e.step_s,
        compute_s: e.compute_s,
        exposed_comm_s: e.exposed_comm_s,
        bubble_s: e.bubble_s,
        bubble_fraction: e.bubble_s / e.step_s,
        optimizer_s: e.stages.iter().map(|s| s.optimizer_s).fold(0.0, f64::max),
        time_to_train_s: bill.time_to_train_s,
        method: e.method.as_str(),
        closed_form_step_s: e.closed_form_step_s,
        stages: e
            .stages
            .iter()
            .map(|s| StageTimeSection {
                stage: s.memory.stage,
                gpu: s.gpu.clone(),
                busy_s: s.busy_s,
                busy_fraction: s.busy_fraction(e.step_s),
                comm_s: s.comm_s,
                wait_s: s.wait_s,
            })
            .collect(),
        stage_imbalance: e.stage_imbalance(),
    });
    r.throughput = Some(ThroughputSection {
        tokens_per_s: e.tokens_per_s,
        samples_per_s: e.samples_per_s,
        model_tflops_per_gpu: e.model_tflops_per_gpu,
        hw_tflops_per_gpu: e.hw_tflops_per_gpu,
        mfu: e.mfu,
    });
    r.cost = Some(CostSection::of(&bill));
    r
}

/// Which figures came from a device profile, for the report; None without one.
pub fn profile_note(plan: &crate::plan::Plan) -> Option<String> {
    let g = plan
        .cluster
        .groups
        .iter()
        .find_map(|g| g.gpu.profile.as_ref().map(|p| (g, p)))?;
    let (group, p) = g;
    let v = &p.provenance;
    let at_precision = crate::profile::prices(&v.precision, plan.train.precision.as_str());
    let shipped = crate::profile::shipped_name(p)
        .map(|name| format!("planc's shipped profile {name}, "))
        .unwrap_or_default();
    Some(if at_precision {
        // Where the profile measured the power limit (`cost::power`): how much slower the
        // plan's busy step makes its kernels than the profile's bursts.
        let power = group
            .gpu
            .power_slowdown
            .map(|(products, memory)| {
                format!(
                    "; at the power limit its step reaches, products {products:.2}× and \
                     memory-bound kernels {memory:.2}× the profile's bursts"
                )
            })
            .unwrap_or_default();
        format!(
            "{} of {} from {shipped}the profile measured on {} ({}, planc calibrate, {}){power}",
            measured_parts(
                p,
                plan.framework() == crate::plan::Framework::Planc,
                plan.train.attention
            ),
            group.gpu.name,
            v.device,
            v.precision,
            date(v.measured_at_unix_s)
        )
    } else {
        format!(
            "the profile of {} was measured in {}, the plan trains in {}: constants used",
            v.device, v.precision, plan.train.precision
        )
    })
}

/// Which figures pricing the plan are estimates, for the report: one sentence a GPU, empty
/// where each built-in GPU it runs on without a profile has sourced or measured figures (a
/// GPU of the plan's own `gpu` block is the user's word, and a profile replaces the
/// catalog's rates).
///
/// The bench lists the same figures as unsourced (`benches/published/constants.toml`); a
/// user reading a step time should not have to know that list to know how much it rests on.
pub fn estimates_note(plan: &crate::plan::Plan) -> Vec<String> {
    let catalog = crate::catalog::Catalog::builtin();
    let mut named: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for g in plan
        .cluster
        .groups
        .iter()
        .filter(|g| g.gpu.profile.is_none())
    {
        let name = g.gpu.name.as_str();
        if named.contains(&name) {
            continue;
        }
        named.push(name);
        let (Some(builtin), Some(info)) = (catalog.gpu(name), catalog.gpu_info(name)) else {
            continue;
        };
        // A plan's own block under a built-in name, with rates of its own: the user's figures.
        if builtin.gemm_efficiency != g.gpu.gemm_efficiency
            || builtin.memory_efficiency != g.gpu.memory_efficiency
        {
            continue;
        }
        let fields: Vec<&str> = info
            .estimated_fields()
            .into_iter()
            .filter(|f| prices(f, plan))
            .collect();
        let mut said = Vec::new();
        if !fields.is_empty() {
            said.push(format!(
                "{} {} no source",
                and_list(&fields),
                if fields.len() == 1 { "has" } else { "have" }
            ));
        }
        if info.sustained_clock_unmeasured() {
            said.push("its sustained clock is not measured".to_string());
        }
        if !said.is_empty() {
            out.push(format!("{name}: {} (planc gpus {name})", said.join("; ")));
        }
    }
    out
}

/// Whether a catalog figure prices this plan's step or memory. Left out: the intra-node
/// latency, which starts a point-to-point message inside a node (microseconds; NCCL's own
/// latency tables price the collectives), and the figures of a precision, a kernel or a
/// host link the plan does not use.
fn prices(field: &str, plan: &crate::plan::Plan) -> bool {
    use crate::plan::{Attention, Offload, Precision};
    match field {
        "intra_node_latency_us" => false,
        f if f.starts_with("fp8_") => plan.train.precision == Precision::Fp8,
        f if f.starts_with("flash_") || f.starts_with("cudnn_attention_") => {
            plan.train.attention == Attention::Flash
        }
        "host_link_gbs" | "host_memory_gbs_per_gpu" => plan.parallel.offload != Offload::None,
        _ => true,
    }
}

/// "a, b and c".
fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// What a profile prices, in the words of the report: "products, memory-bound kernels,
/// norms, activations, fused attention and collectives". Its norms, activations and
/// attention (the fused kernel's, or the standard core's, whichever `attention` the plan
/// runs) are planc's kernels, which price only a plan that planc runs.
fn measured_parts(
    p: &crate::profile::Profile,
    planc_kernels: bool,
    attention: crate::plan::Attention,
) -> String {
    let mut parts = vec!["products", "memory-bound kernels"];
    if planc_kernels && !p.norms.is_empty() {
        parts.push("norms");
    }
    if planc_kernels && !p.activations.is_empty() {
        parts.push("activations");
    }
    let (kind, words) = match attention {
        crate::plan::Attention::Flash => ("flash", "fused attention"),
        crate::plan::Attention::Standard => ("standard", "standard attention"),
    };
    if planc_kernels && p.attention.iter().any(|a| a.kind.starts_with(kind)) {
        parts.push(words);
    }
    if !p.collectives.is_empty() {
        parts.push("collectives");
    }
    if !p.overlap.is_empty() {
        parts.push("products beside collectives");
    }
    and_list(&parts)
}

/// `YYYY-MM-DD` of a Unix time (the civil calendar from days since 1970-01-01).
fn date(unix_s: u64) -> String {
    let z = (unix_s / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use crate::profile::{ActivationPoint, AttentionPoint, NormPoint, Profile};

    #[test]
    fn the_report_names_planc_kernels_from_a_profile_only_for_plans_planc_runs() {
        use crate::plan::Attention::{Flash, Standard};
        let mut p = Profile::empty_for_tests();
        assert_eq!(
            super::measured_parts(&p, true, Flash),
            "products and memory-bound kernels"
        );
        p.norms.push(NormPoint {
            pass: "forward".into(),
            rows: 8192,
            width: 768,
            seconds: 1e-5,
            gb_per_s: 2000.0,
        });
        p.attention.push(AttentionPoint {
            kind: "flash".into(),
            batch_heads: 64,
            seq: 1024,
            head_dim: 64,
            seconds: 1e-4,
            tflops: 150.0,
        });
        assert_eq!(
            super::measured_parts(&p, true, Flash),
            "products, memory-bound kernels, norms and fused attention"
        );
        // The fused kernel's points do not price a standard core.
        assert_eq!(
            super::measured_parts(&p, true, Standard),
            "products, memory-bound kernels and norms"
        );
        p.attention.push(AttentionPoint {
            kind: "standard".into(),
            ..p.attention[0].clone()
        });
        assert_eq!(
            super::measured_parts(&p, true, Standard),
            "products, memory-bound kernels, norms and standard attention"
        );
        p.activations.push(ActivationPoint {
            kind: "gelu".into(),
            pass: "forward".into(),
            rows: 8192,
            width: 3072,
            seconds: 2e-5,
            gb_per_s: 2500.0,
        });
        assert_eq!(
            super::measured_parts(&p, true, Flash),
            "products, memory-bound kernels, norms, activations and fused attention"
        );
        assert_eq!(
            super::measured_parts(&p, false, Standard),
            "products and memory-bound kernels"
        );
    }

    #[test]
    fn the_report_says_which_built_in_figures_are_estimates() {
        let estimates = |gpu_block: &str, gpu: &str, precision: &str, job: &str| {
            let c = crate::check::check_source(
                "e.tp",
                &format!(
                    "{gpu_block}
                     cluster c {{ nodes = 1, gpus_per_node = 8, gpu = {gpu} }}
                     model m {{ layers = 4, hidden = 1024, heads = 16, vocab = 32000, seq_len = 1024 }}
                     train {{ global_batch = 8, precision = {precision}, attention = flash }}
                     parallel {{ micro_batch = 1 }}
                     {job}"
                ),
            );
            assert!(c.ok(), "{:#?}", c.diagnostics);
            super::estimates_note(c.plan.as_ref().unwrap())
        };
        // The A100's product and memory rates are the catalog's estimates, and nobody measured
        // its clock under load.
        let a100 = estimates("", "A100_SXM_80GB", "bf16", "");
        assert_eq!(
            a100,
            [
                "A100_SXM_80GB: gemm_efficiency and memory_efficiency have no source; its \
              sustained clock is not measured (planc gpus A100_SXM_80GB)"
            ]
        );
        // The B200's product rate has a source, its memory rate none.
        let b200 = estimates("", "B200", "bf16", "");
        assert!(!b200[0].contains("gemm_efficiency"), "{b200:?}");
        assert!(b200[0].contains("memory_efficiency"), "{b200:?}");
        // Every H100 figure a bf16 step rests on was measured or cited, its sustained clock
        // too; its fp8 rates are the H200's, which an fp8 plan is told.
        assert!(estimates("", "H100_SXM_80GB", "bf16", "").is_empty());
        assert_eq!(
            estimates("", "H100_SXM_80GB", "fp8", ""),
            [
                "H100_SXM_80GB: fp8_gemm_efficiency and fp8_sustained_clock have no source \
              (planc gpus H100_SXM_80GB)"
            ]
        );
        // A plan's own device is the user's word.
        let own = "gpu mine { memory = 80 GiB, bf16 = 312 TFLOPS, hbm_bandwidth = 2 TB/s }";
        assert!(estimates(own, "mine", "bf16", "").is_empty());
        // A profile prices the plan instead of the catalog's rates: planc's own runs on an
        // H200 take the shipped one.
        let planc = "job j { framework = planc }";
        assert!(estimates("", "H200_SXM_141GB", "bf16", planc).is_empty());
    }

    #[test]
    fn dates_of_unix_times() {
        assert_eq!(super::date(0), "1970-01-01");
        assert_eq!(super::date(1_795_432_805), "2026-11-23");
        assert_eq!(super::date(951_782_400), "2000-02-29");
    }
}

#[cfg(test)]
mod plan_section {
    /// The JSON report's `plan` of a one-node torch job whose `job` block adds `extra`.
    fn plan_json(extra: &str) -> serde_json::Value {
        let out = crate::check::check_source(
            "r.tp",
            &format!(
                "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
                 model m {{ preset = \"llama3-8b\", seq_len = 2048 }}
                 train {{ global_batch = 8, precision = bf16, optimizer = adamw, attention = flash }}
                 parallel {{ tp = 1, pp = 1, dp = 8, micro_batch = 1, zero = 3 }}
                 job j {{ framework = torch, kernels = fused{extra} }}"
            ),
        );
        serde_json::to_value(out.report()).unwrap()["plan"].clone()
    }

    #[test]
    fn the_plan_section_names_the_attention_kernel_only_where_the_job_states_it() {
        assert_eq!(
            plan_json(", attention_kernel = triton")["attention_kernel"],
            "triton"
        );
        assert!(plan_json("").get("attention_kernel").is_none());
    }
}
