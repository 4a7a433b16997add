//! The published rows of the accuracy bench, shared by `benches/accuracy.rs` and
//! `tests/published_rows.rs`: the data files of this folder, the original Korthikanti et al.
//! rows, turning a source's figure into a step time, and checking a row's plan.

use planc_compiler::check::{check_source, Checked};
use serde::Deserialize;

/// The data files: (family, file, text). A family is a source and the stack it ran on.
pub const FILES: &[(&str, &str, &str)] = &[
    (
        "Megatron-LM 2021, A100",
        "megatron-2021.toml",
        include_str!("megatron-2021.toml"),
    ),
    (
        "Megatron-DeepSpeed, A100",
        "bloom.toml",
        include_str!("bloom.toml"),
    ),
    (
        "PyTorch FSDP, H100/A100",
        "fsdp-mpt.toml",
        include_str!("fsdp-mpt.toml"),
    ),
    (
        "Megatron-Core/NeMo, H100 fp8",
        "nemo-h100.toml",
        include_str!("nemo-h100.toml"),
    ),
    (
        "Megatron-Core/NeMo, H100 bf16",
        "nemo-h100-bf16.toml",
        include_str!("nemo-h100-bf16.toml"),
    ),
    (
        "Megatron-Core/NeMo 25.02, H100 fp8",
        "nemo-h100-fp8-2025.toml",
        include_str!("nemo-h100-fp8-2025.toml"),
    ),
    (
        "Llama 3 405B (Meta), H100",
        "llama3-405b.toml",
        include_str!("llama3-405b.toml"),
    ),
    (
        "Megatron-Bridge 26.04, H100 fp8",
        "bridge-h100.toml",
        include_str!("bridge-h100.toml"),
    ),
    (
        "NeMo 24.12 MoE (Grok-1), H100",
        "dgxc-grok1.toml",
        include_str!("dgxc-grok1.toml"),
    ),
];

pub const CONSTANTS: &str = include_str!("constants.toml");

/// Where a constant of `constants.toml` comes from, in the order the bench prints them.
pub const ORIGINS: &[&str] = &[
    "row",
    "row-guided",
    "unsourced",
    "measurement",
    "source",
    "datasheet",
];

/// The original visible rows' family.
pub const KORTHIKANTI: &str = "Megatron-LM 2022, A100";

/// Families whose rows were added with the leave-one-out column (the new rows' figure);
/// the Llama 3 405B rows were already printed beside the original ones.
pub const NEW: &[&str] = &[
    "Megatron-LM 2021, A100",
    "Megatron-DeepSpeed, A100",
    "PyTorch FSDP, H100/A100",
    "Megatron-Core/NeMo, H100 fp8",
];

#[derive(Deserialize)]
pub struct DataFile {
    row: Vec<DataRow>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataRow {
    name: String,
    source: String,
    plan: Option<String>,
    plan_file: Option<String>,
    step_s: Option<f64>,
    tokens_per_s: Option<f64>,
    tokens_per_s_per_gpu: Option<f64>,
    tflops_per_gpu: Option<f64>,
    flops: Option<String>,
}

#[derive(Deserialize)]
pub struct ConstantsFile {
    pub constant: Vec<Constant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constant {
    pub name: String,
    pub file: String,
    pub needle: String,
    pub origin: String,
    pub note: String,
}

/// What a source states about a run, before it is turned into a step time.
#[derive(Clone, Copy, Debug)]
pub enum Measured {
    Step(f64),
    /// Tokens per second over all GPUs.
    Tokens(f64),
    TokensPerGpu(f64),
    /// TFLOP/s per GPU, counted as the source counts them.
    Tflops(f64, FlopCount),
}

#[derive(Clone, Copy, Debug)]
pub enum FlopCount {
    /// Narayanan et al. 2021, eq. (3), with activation recomputation:
    /// 96 B s l h² (1 + s/(6h) + V/(16 l h)).
    MegatronRecompute,
    /// planc's own model FLOPs (the source states no formula).
    Planc,
}

pub struct Case {
    pub name: String,
    pub family: &'static str,
    pub source: String,
    pub text: String,
    pub measured: Measured,
}

pub struct Korthikanti {
    pub name: &'static str,
    pub heads: u64,
    pub hidden: u64,
    pub layers: u64,
    pub tp: u64,
    pub pp: u64,
    pub vpp: u64,
    pub gpus: u64,
    pub batch: u64,
    pub micro: u64,
    pub full_s: f64,
    pub selective_s: f64,
    pub mfu: f64,
}

/// Korthikanti et al. 2022 (MLSys 2023, arXiv 2205.05198), model table and end-to-end
/// results, as shared/data/published.md copies them.
pub const KORTHIKANTI_ROWS: &[Korthikanti] = &[
    Korthikanti {
        name: "22B",
        heads: 64,
        hidden: 6144,
        layers: 48,
        tp: 8,
        pp: 1,
        vpp: 1,
        gpus: 8,
        batch: 4,
        micro: 4,
        full_s: 1.42,
        selective_s: 1.10,
        mfu: 0.415,
    },
    Korthikanti {
        name: "175B",
        heads: 96,
        hidden: 12288,
        layers: 96,
        tp: 8,
        pp: 8,
        vpp: 3,
        gpus: 64,
        batch: 64,
        micro: 1,
        full_s: 18.13,
        selective_s: 13.75,
        mfu: 0.514,
    },
    Korthikanti {
        name: "530B",
        heads: 128,
        hidden: 20480,
        layers: 105,
        tp: 8,
        pp: 35,
        vpp: 3,
        gpus: 280,
        batch: 280,
        micro: 1,
        full_s: 49.05,
        selective_s: 37.83,
        mfu: 0.560,
    },
    Korthikanti {
        name: "1T",
        heads: 160,
        hidden: 25600,
        layers: 128,
        tp: 8,
        pp: 64,
        vpp: 1,
        gpus: 512,
        batch: 512,
        micro: 1,
        full_s: 94.42,
        selective_s: 71.49,
        mfu: 0.563,
    },
];

pub fn korthikanti_plan(r: &Korthikanti, recompute: &str, sp: bool) -> String {
    let schedule = if r.vpp > 1 { "interleaved" } else { "1f1b" };
    format!(
        "cluster dgx {{
    nodes = {nodes}
    gpus_per_node = 8
    gpu = A100_SXM_80GB
    inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s, latency = 5 us }}
}}
model {{ layers = {l}, hidden = {h}, heads = {a}, vocab = 51200, seq_len = 2048 }}
train {{ global_batch = {b}, precision = fp16, optimizer = adam, attention = standard, dropout = 0.1 }}
parallel {{
    tp = {tp}
    pp = {pp}
    dp = 1
    vpp = {vpp}
    micro_batch = {mb}
    schedule = {schedule}
    overlap_p2p = false
    grad_accumulation_fusion = false
    scatter_gather_p2p = true
    sequence_parallel = {sp}
    zero = 0
    recompute = {recompute}
}}
",
        nodes = r.gpus.div_ceil(8),
        l = r.layers,
        h = r.hidden,
        a = r.heads,
        b = r.batch,
        tp = r.tp,
        pp = r.pp,
        vpp = r.vpp,
        mb = r.micro,
    )
}

/// Megatron-LM's theoretical_memory_usage.py: weights + gradients + optimizer of the most
/// loaded GPU, 18 bytes per parameter without the distributed optimizer.
pub fn megatron_state_bytes(r: &Korthikanti) -> f64 {
    let (l, h, v) = (r.layers as f64, r.hidden as f64, 51200.0);
    let transformer = 2.0 * l * h * h * (2.0 + 4.0 + 2.0 / h + 1.0 / (l * h));
    let embedding = h * v;
    let most_loaded = (transformer / r.pp as f64 + embedding) / r.tp as f64;
    most_loaded * 18.0
}

pub fn korthikanti_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for r in KORTHIKANTI_ROWS {
        for (setting, recompute, sp, published) in [
            ("full recompute", "full", false, r.full_s),
            ("SP + selective", "selective", true, r.selective_s),
        ] {
            cases.push(Case {
                name: format!("GPT {}, {}", r.name, setting),
                family: KORTHIKANTI,
                source: format!(
                    "Korthikanti et al. 2022, end-to-end results: {} on {} A100, {} s",
                    r.name, r.gpus, published
                ),
                text: korthikanti_plan(r, recompute, sp),
                measured: Measured::Step(published),
            });
        }
    }
    cases
}

pub fn data_cases() -> Vec<Case> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut cases = Vec::new();
    for (family, file, text) in FILES {
        let data: DataFile = toml::from_str(text)
            .unwrap_or_else(|e| panic!("benches/published/{file} does not parse: {e}"));
        for r in data.row {
            let text = match (&r.plan, &r.plan_file) {
                (Some(plan), None) => plan.clone(),
                (None, Some(path)) => std::fs::read_to_string(format!("{root}/{path}"))
                    .unwrap_or_else(|e| panic!("{file}, {}: {path}: {e}", r.name)),
                _ => panic!("{file}, {}: give one of plan and plan_file", r.name),
            };
            let measured = match (
                r.step_s,
                r.tokens_per_s,
                r.tokens_per_s_per_gpu,
                r.tflops_per_gpu,
                r.flops.as_deref(),
            ) {
                (Some(s), None, None, None, None) => Measured::Step(s),
                (None, Some(t), None, None, None) => Measured::Tokens(t),
                (None, None, Some(t), None, None) => Measured::TokensPerGpu(t),
                (None, None, None, Some(t), Some("megatron_recompute")) => {
                    Measured::Tflops(t, FlopCount::MegatronRecompute)
                }
                (None, None, None, Some(t), Some("planc")) => Measured::Tflops(t, FlopCount::Planc),
                _ => panic!(
                    "{file}, {}: give one figure (step_s, tokens_per_s, tokens_per_s_per_gpu, \
                     or tflops_per_gpu with flops = megatron_recompute | planc)",
                    r.name
                ),
            };
            cases.push(Case {
                name: r.name,
                family,
                source: r.source,
                text,
                measured,
            });
        }
    }
    cases
}

/// The step the source's figure stands for, from the plan's batch, sequence and size.
pub fn measured_step(m: Measured, c: &Checked) -> f64 {
    let e = c.estimate.as_ref().expect("estimated");
    let tokens = e.global_batch as f64 * e.seq_len as f64;
    let world = e.world_size as f64;
    match m {
        Measured::Step(s) => s,
        Measured::Tokens(t) => tokens / t,
        Measured::TokensPerGpu(t) => tokens / (t * world),
        Measured::Tflops(t, FlopCount::Planc) => e.flops_per_step / (t * 1e12 * world),
        Measured::Tflops(t, FlopCount::MegatronRecompute) => {
            let m = &c.plan.as_ref().expect("planned").model;
            let (b, s, l, h, v) = (
                e.global_batch as f64,
                m.seq_len as f64,
                m.layers as f64,
                m.hidden as f64,
                m.vocab as f64,
            );
            let flops = 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
            flops / (t * 1e12 * world)
        }
    }
}

/// Checks and simulates a plan; `None` with the reason where it does not check.
pub fn predict(case: &Case) -> Result<Checked, String> {
    let mut c = check_source("bench.tp", &case.text);
    if c.estimate.is_none() {
        let errors: Vec<String> = c
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| format!("{} {}", d.code, d.message))
            .collect();
        return Err(format!("plan did not check: {}", errors.join("; ")));
    }
    if planc_simulator::retime(&mut c).is_none() {
        return Err("simulation failed".into());
    }
    Ok(c)
}

/// How many settings a row's plan assumes because its source does not state them: each
/// `# not stated in source` mark, and each bullet of an example's "Assumptions (what the
/// paper leaves out" block (the Llama 3 405B examples list theirs that way).
pub fn assumed(text: &str) -> usize {
    let marks = text.matches("not stated in source").count();
    let mut in_block = false;
    let mut bullets = 0;
    for line in text.lines() {
        if line.contains("Assumptions (what the paper leaves out") {
            in_block = true;
        } else if in_block && line.starts_with("# - ") {
            bullets += 1;
        } else if in_block && !line.starts_with("#   ") {
            in_block = false;
        }
    }
    marks + bullets
}
