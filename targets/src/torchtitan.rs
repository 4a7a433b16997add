//! `--target torchtitan`: the plan as torchtitan's own run description. Current torchtitan
//! (0.3 on PyPI) reads no TOML: a run is a Python function returning its `Trainer.Config`,
//! chosen with `--module`/`--config`. planc writes that module (`templates/torchtitan.py.j2`:
//! torchtitan's Llama 3 with the plan's dimensions, a data loader of planc's token stream)
//! and a torchrun launch of `torchtitan.train`.
//!
//! The mapping, once: data parallelism is FSDP2 (`data_parallel_shard_degree`) for ZeRO-3
//! and ZeRO-2 (parameters kept gathered after forward: `fsdp_reshard_after_forward =
//! "never"`), DDP (`data_parallel_replicate_degree`) for ZeRO-0; tp, pp (with the plan's
//! layers per virtual stage as `module_fqns_per_model_part`) and cp map to their degrees.
//! What torchtitan has no setting for is refused (P0706) by [`limits`]: the layout's limits
//! are `planc_compiler::capability`'s, which `check` and `solve` ask too, so that a solved
//! layout always emits.

use planc_compiler::capability;
use planc_compiler::plan::{
    Attention, Framework, LrSchedule, Mlp, Norm, Offload, Plan, Position, Precision, Recompute,
    Schedule,
};
use serde::Serialize;

use crate::script::py_str;
use crate::{args, EmitError, Target};

/// What `torchtitan.py.j2` fills in; values are Python source already.
#[derive(Clone, Debug, Serialize)]
pub struct Titan {
    /// The config function's name (`--config`).
    pub function: String,
    pub rope_theta: String,
    pub tied: &'static str,
    pub seed: u64,
    pub data: String,
    pub token_dtype: &'static str,
    pub attention: &'static str,
    pub fp8: bool,
    pub dump_folder: String,
    pub adam: Vec<(&'static str, String)>,
    pub schedule: Vec<(&'static str, String)>,
    pub training: Vec<(&'static str, String)>,
    pub parallelism: Vec<(&'static str, String)>,
    pub activation_checkpoint: &'static str,
    pub checkpoint: Vec<(&'static str, String)>,
    pub log_freq: u64,
    pub notes: Vec<String>,
}

/// Why torchtitan cannot run the plan's layout or training settings, if it cannot: the one
/// statement of torchtitan's limits, for `emit` and for `solve`.
pub fn limits(plan: &Plan) -> Option<(String, Option<args::Attr>)> {
    let m = &plan.model;
    let p = &plan.parallel;
    let t = &plan.train;
    if let Some(l) = capability::layout_limit(Framework::Torchtitan, false, p) {
        return Some((l.reason, Some(args::at("parallel", l.attr))));
    }
    if (m.norm, m.position, m.mlp) != (Norm::Rmsnorm, Position::Rope, Mlp::Swiglu) || m.bias {
        let reason = format!(
            "norm = {}, position = {}, mlp = {}, bias = {}: torchtitan's dense model is Llama 3 \
             (rmsnorm, rope, swiglu, no biases)",
            m.norm, m.position, m.mlp, m.bias
        );
        return Some((reason, Some(args::at("model", "norm"))));
    }
    if let Some(l) = capability::framework_model_limit(Framework::Torchtitan, m) {
        return Some((l.reason, Some(args::at(l.block, l.attr))));
    }
    if m.experts > 1 {
        return Some((
            "a mixture of experts: torchtitan's Llama 3 is dense (its MoE models are \
             DeepSeek-V3 and Qwen3, which planc does not emit)"
                .into(),
            Some(args::at("model", "experts")),
        ));
    }
    if t.precision == Precision::Fp16 {
        return Some((
            "precision = fp16: torchtitan trains in bf16 (or fp32, or fp8 through torchao)".into(),
            Some(args::at("train", "precision")),
        ));
    }
    if t.dropout > 0.0 {
        return Some((
            format!(
                "train.dropout = {}: torchtitan's Llama 3 has no dropout; set it to 0",
                t.dropout
            ),
            Some(args::at("train", "dropout")),
        ));
    }
    None
}

/// The module's settings, or P0706 with [`limits`]' reason.
pub fn titan(
    plan: &Plan,
    job_word: &str,
    checkpoint_dir: Option<&str>,
    plan_file: &str,
) -> Result<Titan, EmitError> {
    if let Some((reason, at)) = limits(plan) {
        return Err(EmitError::Unsupported {
            target: Target::Torchtitan,
            reason,
            at,
        });
    }
    let m = &plan.model;
    let p = &plan.parallel;
    let t = &plan.train;
    let r = &t.run;
    let mut notes = Vec::new();
    let steps = if t.tokens.is_some() {
        args::train_iters(plan).unwrap_or(r.steps)
    } else {
        r.steps
    };
    if t.attention == Attention::Standard {
        notes.push(
            "attention = standard: torchtitan's language models run FlexAttention (fused, as \
             `flash` prices it)"
                .into(),
        );
    }
    if r.weight_decay > 0.0 {
        notes.push(
            "torchtitan's default AdamW group decays every parameter, norms included (planc \
             run decays 2-D weights only)"
                .into(),
        );
    }
    let adam = vec![
        ("lr", py_float(r.lr)),
        (
            "betas",
            format!("({}, {})", py_float(r.adam_beta1), py_float(r.adam_beta2)),
        ),
        ("eps", py_float(r.adam_eps)),
        ("weight_decay", py_float(r.weight_decay)),
    ];
    // Decay from the end of warm-up to the last step; a constant rate is a decay to itself.
    let min_factor = match r.lr_schedule {
        LrSchedule::Cosine if r.lr > 0.0 => r.min_lr / r.lr,
        _ => 1.0,
    };
    let schedule = vec![
        ("warmup_steps", r.warmup_steps.to_string()),
        (
            "decay_type",
            py_str(match r.lr_schedule {
                LrSchedule::Cosine => "cosine",
                LrSchedule::Constant => "linear",
            }),
        ),
        // 12 significant digits: 2e-6 / 2e-5 is 0.1, not 0.09999999999999999.
        (
            "min_lr_factor",
            py_float(format!("{min_factor:.11e}").parse().unwrap_or(min_factor)),
        ),
    ];
    // Without a pipeline a data-parallel rank takes one micro-batch at a time and torchtitan
    // accumulates global / (micro · dp) of them; with one, the rank's whole share is one
    // pipeline step cut into micro-batches.
    let local_batch = if p.pp > 1 {
        t.global_batch / p.dp.max(1)
    } else {
        p.micro_batch
    };
    let mut training = vec![
        ("local_batch_size", local_batch.to_string()),
        ("global_batch_size", t.global_batch.to_string()),
        ("seq_len", m.seq_len.to_string()),
        ("steps", steps.to_string()),
        ("max_norm", py_float(r.grad_clip)),
        (
            "mixed_precision_param",
            py_str(if t.precision == Precision::Fp32 {
                "float32"
            } else {
                "bfloat16"
            }),
        ),
    ];
    if p.offload == Offload::Params {
        training.push(("enable_cpu_offload", "True".into()));
    }
    if p.pp > 1 {
        // torchtitan refuses CUDA graphs under a pipeline.
        training.push(("disable_cuda_graphs", "True".into()));
    }
    let mut parallelism = vec![
        (
            "data_parallel_replicate_degree",
            if p.zero == 0 { p.dp } else { 1 }.to_string(),
        ),
        (
            "data_parallel_shard_degree",
            if p.zero >= 2 { p.dp } else { 1 }.to_string(),
        ),
        ("tensor_parallel_degree", p.tp.to_string()),
        (
            "enable_sequence_parallel",
            if p.sequence_parallel { "True" } else { "False" }.into(),
        ),
        ("context_parallel_degree", p.cp.to_string()),
        ("pipeline_parallel_degree", p.pp.to_string()),
    ];
    if p.cp > 1 {
        // The load balancer of FlexAttention, which torchtitan's language models run.
        parallelism.push(("context_parallel_load_balancer", py_str("ptrr")));
    }
    if p.zero >= 2 {
        // ZeRO-3 regathers parameters for backward (as planc prices it, pipeline or not);
        // ZeRO-2 keeps them from forward.
        parallelism.push((
            "fsdp_reshard_after_forward",
            py_str(if p.zero == 2 { "never" } else { "always" }),
        ));
    }
    if p.pp > 1 {
        let schedule = match p.schedule {
            Schedule::Gpipe => "GPipe",
            Schedule::Interleaved if p.vpp > 1 => "Interleaved1F1B",
            _ => "1F1B",
        };
        parallelism.push(("pipeline_parallel_schedule", py_str(schedule)));
        parallelism.push((
            "pipeline_parallel_microbatch_size",
            p.micro_batch.to_string(),
        ));
        parallelism.push(("module_fqns_per_model_part", stage_modules(plan)));
    }
    let checkpoint = match checkpoint_dir {
        Some(dir) => vec![
            ("enable", "True".into()),
            ("folder", py_str(dir)),
            ("interval", args::SAVE_INTERVAL.min(steps).to_string()),
            ("last_save_model_only", "False".into()),
        ],
        None => vec![("enable", "False".into())],
    };
    let function: String = format!("planc_{job_word}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    Ok(Titan {
        function,
        rope_theta: py_float(m.rope_theta),
        tied: if m.tied_embeddings { "True" } else { "False" },
        seed: r.seed,
        data: r.data.as_deref().map_or("None".into(), |d| {
            py_str(&crate::script::data_path(plan_file, d))
        }),
        token_dtype: if m.vocab <= 65_536 {
            "uint16"
        } else {
            "uint32"
        },
        attention: "flex",
        fp8: t.precision == Precision::Fp8,
        // Checkpoint folders are joined to it: "." keeps the plan's folder as written.
        dump_folder: py_str("."),
        adam,
        schedule,
        training,
        parallelism,
        activation_checkpoint: match p.recompute {
            Recompute::None => "None",
            Recompute::Selective => "SelectiveAC.Config()",
            Recompute::Full => "FullAC.Config()",
        },
        checkpoint,
        log_freq: if steps <= 100 { 1 } else { 10 },
        notes,
    })
}

/// The modules of every virtual pipeline stage, in torchtitan's stage order (stage v on
/// rank v mod pp, chunk v / pp, as Megatron-LM and torch's looped schedules number them),
/// with the plan's layers per chunk: the embedding on the first, the norm and output on the
/// last.
fn stage_modules(plan: &Plan) -> String {
    let p = &plan.parallel;
    let (pp, vpp) = (p.pp.max(1), p.vpp.max(1));
    let mut next = 0;
    let mut parts = Vec::new();
    for v in 0..pp * vpp {
        let n = p.chunk_layers(plan.model.layers, v % pp, v / pp);
        let mut names: Vec<String> = Vec::new();
        if v == 0 {
            names.push(py_str("tok_embeddings"));
        }
        names.extend((next..next + n).map(|i| py_str(&format!("layers.{i}"))));
        next += n;
        if v == pp * vpp - 1 {
            names.push(py_str("norm"));
            names.push(py_str("lm_head"));
        }
        parts.push(format!("[{}]", names.join(", ")));
    }
    format!("[{}]", parts.join(", "))
}

fn py_float(v: f64) -> String {
    crate::script::py_float(v)
}
