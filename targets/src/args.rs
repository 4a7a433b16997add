//! What the plan implies for each framework: Megatron-LM's command-line flags and DeepSpeed's
//! configuration. Templates lay these out; they are computed here so that the shell script,
//! the sbatch script and the PyTorchJob carry exactly the same flags.
//!
//! Megatron-LM flag names are those of `megatron/training/arguments.py` (and the config
//! dataclasses of `megatron/training/config/` it turns into flags) in current Megatron-LM
//! (core_r0.13 and later); DeepSpeed's scheduler parameters those of
//! `deepspeed/runtime/lr_schedules.py`; the Hugging Face spellings those of transformers'
//! `TrainingArguments`.
//!
//! The training run (steps, rates, schedule, seed, data, checkpoints, logging) is computed
//! once, in [`RunValues`], and written in each framework's spelling: [`megatron`]'s flags,
//! [`deepspeed_config`]'s optimizer and scheduler, [`script_args`] (the flags planc's own
//! training scripts take, the contract with `job.entrypoint`) and [`hf_trainer_args`].

use planc_compiler::plan::{
    Attention, EntrypointArgs, Framework, LrSchedule, Mlp, Norm, Offload, Optimizer, Plan,
    PlanSpec, Position, Precision, Recompute, Schedule,
};
use serde::Serialize;
use serde_json::{json, Value};

use crate::{EmitError, Target};

/// One command-line argument: a flag planc writes, and an optional value. A value that is a
/// number stays a number (written bare); a string is always quoted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Arg {
    pub flag: &'static str,
    pub value: Option<Value>,
    /// The value names a file planc writes beside the launch script: shell templates prefix
    /// it with the script's folder, so the job finds it from wherever it starts.
    pub beside: bool,
}

impl Arg {
    pub fn switch(flag: &'static str) -> Arg {
        Arg {
            flag,
            value: None,
            beside: false,
        }
    }

    pub fn num(flag: &'static str, v: u64) -> Arg {
        Arg {
            flag,
            value: Some(json!(v)),
            beside: false,
        }
    }

    pub fn text(flag: &'static str, v: impl Into<String>) -> Arg {
        Arg {
            flag,
            value: Some(Value::String(v.into())),
            beside: false,
        }
    }

    pub fn float(flag: &'static str, v: f64) -> Arg {
        Arg {
            flag,
            value: Some(json!(tidy(v))),
            beside: false,
        }
    }

    /// A file planc writes beside the launch script, when `beside`.
    fn file(flag: &'static str, name: &str, beside: bool) -> Arg {
        Arg {
            beside,
            ..Arg::text(flag, name)
        }
    }
}

/// `v` to 12 significant digits: a value the plan derives (`min_lr` = `lr` / 10) is written
/// as the number meant (3e-5), not its binary neighbour (2.9999999999999997e-5).
pub fn tidy(v: f64) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    format!("{v:.11e}").parse().unwrap_or(v)
}

/// Checkpoints are written every this many iterations when the job names a checkpoint folder
/// (Megatron-LM refuses `--save` without `--save-interval`; `planc run` gets it as
/// `--save-every`, so both frameworks lose at most this many steps to a failure). A shorter
/// run saves at its end instead.
pub const SAVE_INTERVAL: u64 = 1000;

/// An attribute of the plan, `(block, name)` as `Origins` keys it, where a refusal points.
pub type Attr = (String, String);

/// The attribute `name` of `block`.
pub fn at(block: &str, name: &str) -> Attr {
    (block.to_string(), name.to_string())
}

/// The training run as every target carries it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunValues {
    /// Optimizer steps: `train.steps` when written, else those `train.tokens` takes, else
    /// `train.steps`' default.
    pub steps: u64,
    /// The attribute the steps come from (`steps` or `tokens`).
    pub steps_from: &'static str,
    /// `train.data` as the job reads it: relative to the directory the launch runs in, which
    /// is where `planc emit` ran (the plan names it relative to the plan file).
    pub data: Option<String>,
    pub checkpoint_dir: Option<String>,
    /// Iterations between checkpoints: [`SAVE_INTERVAL`], or the whole run when shorter.
    pub save_interval: u64,
    /// Iterations between log lines: a hundred lines a run, every step for short runs, at
    /// most every 100 steps (Megatron-LM's default).
    pub log_interval: u64,
}

impl RunValues {
    /// The run of a checked plan; `plan_file` is the plan's path as given to `planc emit`.
    pub fn new(spec: &PlanSpec, plan: &Plan, plan_file: &str) -> RunValues {
        let written = spec.origins.written("train", "steps");
        let (steps, steps_from) = match train_iters(plan) {
            Some(n) if !written => (n, "tokens"),
            _ => (plan.train.run.steps, "steps"),
        };
        let data = plan
            .train
            .run
            .data
            .as_deref()
            .map(|d| beside_plan(plan_file, d));
        let checkpoint_dir = spec.job.as_ref().and_then(|j| j.checkpoint_dir.clone());
        RunValues::with(steps, steps_from, data, checkpoint_dir)
    }

    /// The run of a plan alone: `train.steps`, no data file, no checkpoints.
    pub fn of_plan(plan: &Plan) -> RunValues {
        RunValues::with(plan.train.run.steps, "steps", None, None)
    }

    fn with(
        steps: u64,
        steps_from: &'static str,
        data: Option<String>,
        checkpoint_dir: Option<String>,
    ) -> RunValues {
        let steps = steps.max(1);
        RunValues {
            steps,
            steps_from,
            data,
            checkpoint_dir,
            save_interval: SAVE_INTERVAL.min(steps),
            log_interval: (steps / 100).clamp(1, 100),
        }
    }
}

/// `path` (relative to the plan file, as `train.data` is) relative to where the plan file's
/// path is relative to.
fn beside_plan(plan_file: &str, path: &str) -> String {
    let p = std::path::Path::new(path);
    let dir = std::path::Path::new(plan_file).parent();
    match dir {
        Some(d) if !p.is_absolute() && !d.as_os_str().is_empty() => {
            d.join(p).to_string_lossy().into_owned()
        }
        _ => path.to_string(),
    }
}

/// The Megatron-LM arguments of the plan, grouped as the launch script prints them:
/// (group name, arguments).
pub fn megatron(
    plan: &Plan,
    run: &RunValues,
    notes: &mut Vec<String>,
) -> Result<Vec<(&'static str, Vec<Arg>)>, EmitError> {
    let m = &plan.model;
    let p = &plan.parallel;
    let t = &plan.train;
    let unsupported = |(b, a): (&str, &str), reason: String| EmitError::Unsupported {
        target: Target::Megatron,
        reason,
        at: Some(at(b, a)),
    };

    let mut model = vec![
        Arg::num("--num-layers", m.layers),
        Arg::num("--hidden-size", m.hidden),
        Arg::num("--ffn-hidden-size", m.ffn_hidden),
        Arg::num("--num-attention-heads", m.heads),
    ];
    if m.attention_width() != m.hidden {
        // Megatron-LM's head size (`kv_channels`), hidden / heads unless given.
        model.push(Arg::num("--kv-channels", m.head_dim));
    }
    if m.kv_heads < m.heads {
        model.push(Arg::switch("--group-query-attention"));
        model.push(Arg::num("--num-query-groups", m.kv_heads));
    }
    model.push(Arg::num("--seq-length", m.seq_len));
    model.push(Arg::num("--max-position-embeddings", m.seq_len));
    if m.windowed_layers() > 0 {
        // (left, right): a query attends the window behind it, no key after it.
        let w = m.sliding_window.unwrap_or_default();
        model.push(Arg::text("--window-size", format!("{w},0")));
        if let Some(n) = m.full_attention_every {
            model.push(Arg::num("--window-attn-skip-freq", n));
        }
    }
    if m.mlp == Mlp::Swiglu {
        model.push(Arg::switch("--swiglu"));
    }
    model.push(Arg::text(
        "--position-embedding-type",
        match m.position {
            Position::Rope => "rope",
            Position::Learned => "learned_absolute",
        },
    ));
    model.push(Arg::text(
        "--normalization",
        match m.norm {
            Norm::Rmsnorm => "RMSNorm",
            Norm::Layernorm => "LayerNorm",
        },
    ));
    if !m.bias {
        model.push(Arg::switch("--disable-bias-linear"));
    }
    if !m.tied_embeddings {
        model.push(Arg::switch("--untie-embeddings-and-output-weights"));
    }
    if m.experts > 1 {
        model.push(Arg::num("--num-experts", m.experts));
        model.push(Arg::num("--moe-router-topk", m.top_k));
        // What planc prices: the all-to-all dispatcher, the experts' own width, the shared
        // experts as one MLP, the dense first layers, capacity buffers padded.
        model.push(Arg::text("--moe-token-dispatcher-type", "alltoall"));
        model.push(Arg::num("--moe-ffn-hidden-size", m.expert_ffn_hidden));
        if m.shared_experts > 0 {
            let shared = m.shared_experts * m.expert_ffn_hidden;
            model.push(Arg::num("--moe-shared-expert-intermediate-size", shared));
        }
        if m.first_dense_layers > 0 {
            let (dense, moe) = (m.first_dense_layers, m.moe_layers());
            model.push(Arg::text(
                "--moe-layer-freq",
                format!("([0]*{dense}+[1]*{moe})"),
            ));
        }
        if let Some(c) = m.capacity_factor {
            model.push(Arg::text("--moe-expert-capacity-factor", c.to_string()));
            model.push(Arg::switch("--moe-pad-expert-input-to-capacity"));
        }
    }
    if t.attention == Attention::Standard {
        model.push(Arg::text("--attention-backend", "unfused"));
    }
    // Stated even when 0: Megatron-LM's own default is 0.1, and the memory planc predicts
    // depends on it (dropout keeps masks). The fused loss keeps logits in bf16, as priced.
    model.push(Arg::float("--attention-dropout", t.dropout));
    model.push(Arg::float("--hidden-dropout", t.dropout));
    model.push(Arg::switch("--cross-entropy-loss-fusion"));

    let mut parallel = vec![
        Arg::num("--tensor-model-parallel-size", p.tp),
        Arg::num("--pipeline-model-parallel-size", p.pp),
        Arg::num("--context-parallel-size", p.cp),
    ];
    if m.experts > 1 || p.ep > 1 {
        parallel.push(Arg::num("--expert-model-parallel-size", p.ep));
    }
    let interleaved = p.schedule == Schedule::Interleaved && p.vpp > 1;
    // Uneven interleaved stages whose ends do not split into equal chunks need the general
    // layout; otherwise the first/last flags say it (Megatron-LM gives an unset end the
    // middle stages' share, as planc does).
    let layout = interleaved
        && p.is_uneven()
        && (0..p.pp).any(|s| !plan.stage_layers(s).is_multiple_of(p.vpp));
    if layout {
        parallel.push(Arg::text(
            "--pipeline-model-parallel-layout",
            pipeline_layout(plan),
        ));
    } else if p.pp > 1 {
        if let Some(n) = p.first_stage_layers {
            parallel.push(Arg::num("--decoder-first-pipeline-num-layers", n));
        }
        if let Some(n) = p.last_stage_layers {
            parallel.push(Arg::num("--decoder-last-pipeline-num-layers", n));
        }
    }
    match p.schedule {
        Schedule::Interleaved if p.vpp > 1 => {
            if layout {
                // The layout gives vpp (its stages over pp).
            } else if p.is_uneven() {
                // Megatron-LM takes the chunk count, not the chunk size, with uneven ends.
                parallel.push(Arg::num("--num-virtual-stages-per-pipeline-rank", p.vpp));
            } else {
                let per_chunk = plan.stage_layers(0) / p.vpp.max(1);
                parallel.push(Arg::num(
                    "--num-layers-per-virtual-pipeline-stage",
                    per_chunk,
                ));
            }
            if !p.overlaps_p2p() {
                if p.pp <= 2 {
                    return Err(unsupported(
                        ("parallel", "overlap_p2p"),
                        format!(
                            "Megatron-LM's interleaved schedule without p2p overlap needs pp > 2 \
                         (pp = {}): remove `overlap_p2p = false` or raise pp",
                            p.pp
                        ),
                    ));
                }
                parallel.push(Arg::switch("--no-overlap-p2p-communication"));
            }
        }
        Schedule::Gpipe if p.pp > 1 => notes.push(
            "Megatron-LM has no GPipe schedule: it runs 1F1B, with the same bubble and fewer \
             micro-batches in flight"
                .into(),
        ),
        Schedule::ZeroBubble if p.pp > 1 => {
            return Err(unsupported(
                ("parallel", "schedule"),
                "Megatron-LM has no ZB-H1 schedule; use `schedule = 1f1b` or `interleaved`".into(),
            ))
        }
        _ => {}
    }
    if p.sequence_parallel && p.tp > 1 {
        parallel.push(Arg::switch("--sequence-parallel"));
    }
    match p.zero {
        0 => {}
        1 => parallel.push(Arg::switch("--use-distributed-optimizer")),
        2 if p.pp > 1 => {
            // Gradients sharded under a pipeline (FSDP with pipelines, as in Meta's own
            // framework): planc has not verified Megatron-LM's FSDP with pipeline stages.
            return Err(unsupported(
                ("parallel", "zero"),
                "zero = 2 with pipeline parallelism: planc does not emit Megatron-LM's FSDP with \
                 pipeline stages; use `zero = 1` (the distributed optimizer) for Megatron-LM"
                    .into(),
            ));
        }
        z => {
            parallel.push(Arg::switch("--use-megatron-fsdp"));
            parallel.push(Arg::text(
                "--data-parallel-sharding-strategy",
                if z == 2 {
                    "optim_grads"
                } else {
                    "optim_grads_params"
                },
            ));
            parallel.push(Arg::text("--ckpt-format", "fsdp_dtensor"));
        }
    }
    if p.scatter_gather_p2p && !p.sequence_parallel && p.tp > 1 && p.pp > 1 {
        notes.push(
            "Megatron-LM no longer splits pipeline transfers over the tensor-parallel ranks \
             (Megatron-core's p2p_communication.py sends whole activations): \
             `scatter_gather_p2p = true` prices Megatron-LM of 2022, not the run emitted"
                .into(),
        );
    }
    if p.tp > 1 && !p.overlaps_tp_backward(plan.framework()) {
        notes.push(
            "Megatron-LM always runs the column-parallel layers' backward collectives beside \
             their gradient products (megatron/core/tensor_parallel/layers.py): \
             `overlap_tp_backward = false` prices Megatron-LM before 2021-09, not the run emitted"
                .into(),
        );
    }
    if plan.eager() && plan.framework() == Framework::Megatron {
        // A site without Transformer Engine or apex (`job.kernels = eager` under megatron,
        // as `cost::eager` prices it): the local layers, PyTorch's norms and softmax.
        model.push(Arg::text("--transformer-impl", "local"));
        model.push(Arg::switch("--no-persist-layer-norm"));
        model.push(Arg::switch("--no-masked-softmax-fusion"));
    }
    if !planc_compiler::cost::eager::accumulates_in_products(plan) {
        parallel.push(Arg::switch("--no-gradient-accumulation-fusion"));
    }
    if p.dp > 1 && p.zero <= 1 && p.overlap_grad_reduce {
        parallel.push(Arg::switch("--overlap-grad-reduce"));
        if p.zero == 1 {
            parallel.push(Arg::switch("--overlap-param-gather"));
        }
    }
    match p.recompute {
        Recompute::None => {}
        Recompute::Selective => parallel.push(Arg::text("--recompute-granularity", "selective")),
        Recompute::Full => {
            parallel.push(Arg::text("--recompute-granularity", "full"));
            parallel.push(Arg::text("--recompute-method", "uniform"));
            parallel.push(Arg::num("--recompute-num-layers", 1));
        }
    }
    match p.offload {
        Offload::None => {}
        Offload::Optimizer => {
            parallel.push(Arg::switch("--optimizer-cpu-offload"));
            parallel.push(Arg::switch("--use-precision-aware-optimizer"));
        }
        Offload::Params => {
            return Err(unsupported(
                ("parallel", "offload"),
                "Megatron-LM cannot offload parameters; use `offload = optimizer` or the \
                 deepspeed target"
                    .into(),
            ))
        }
    }

    let mut training = vec![
        Arg::num("--micro-batch-size", p.micro_batch),
        Arg::num("--global-batch-size", t.global_batch),
    ];
    match t.precision {
        Precision::Bf16 => training.push(Arg::switch("--bf16")),
        Precision::Fp16 => training.push(Arg::switch("--fp16")),
        Precision::Fp8 => {
            training.push(Arg::switch("--bf16"));
            training.push(Arg::text("--fp8-format", "hybrid"));
        }
        Precision::Fp32 => {}
    }
    training.push(Arg::text(
        "--optimizer",
        match t.optimizer {
            Optimizer::Adam | Optimizer::Adamw => "adam",
            Optimizer::Sgd => "sgd",
        },
    ));
    let r = &t.run;
    training.push(Arg::num("--train-iters", run.steps));
    training.push(Arg::float("--lr", r.lr));
    training.push(Arg::float("--min-lr", r.min_lr));
    training.push(Arg::text(
        "--lr-decay-style",
        match r.lr_schedule {
            LrSchedule::Constant => "constant",
            LrSchedule::Cosine => "cosine",
        },
    ));
    // Megatron-LM decays from the end of warm-up to --lr-decay-iters, which defaults to
    // --train-iters: planc's schedule.
    training.push(Arg::num("--lr-warmup-iters", r.warmup_steps));
    training.push(Arg::float("--weight-decay", r.weight_decay));
    training.push(Arg::float("--clip-grad", r.grad_clip));
    if t.optimizer != Optimizer::Sgd {
        training.push(Arg::float("--adam-beta1", r.adam_beta1));
        training.push(Arg::float("--adam-beta2", r.adam_beta2));
        training.push(Arg::float("--adam-eps", r.adam_eps));
    }
    training.push(Arg::num("--seed", r.seed));
    training.push(Arg::num("--log-interval", run.log_interval));
    // The plan has no evaluation: none during the run (the interval is the whole run; current
    // Megatron-LM divides by it) and none after it.
    training.push(Arg::num("--eval-interval", run.steps));
    training.push(Arg::num("--eval-iters", 0));
    if let Some(dir) = &run.checkpoint_dir {
        training.push(Arg::text("--save", dir.clone()));
        training.push(Arg::text("--load", dir.clone()));
        training.push(Arg::num("--save-interval", run.save_interval));
    }

    let mut data = Vec::new();
    match &run.data {
        Some(path) => {
            // Megatron-LM reads an indexed dataset by its prefix (PREFIX.bin + PREFIX.idx, as
            // its tools/preprocess_data.py writes them), all of it for training.
            let prefix = path.strip_suffix(".bin").unwrap_or(path);
            data.push(Arg::text("--data-path", prefix));
            data.push(Arg::text("--split", "100,0,0"));
            notes.push(format!(
                "Megatron-LM reads train.data as an indexed dataset, {prefix}.bin and \
                 {prefix}.idx (tools/preprocess_data.py writes them; planc run's flat token \
                 file is not one); the null tokenizer takes the token ids as they are: replace \
                 --tokenizer-type with the tokenizer the data was prepared with"
            ));
        }
        None => data.push(Arg::switch("--mock-data")),
    }
    data.push(Arg::text("--tokenizer-type", "NullTokenizer"));
    data.push(Arg::num("--vocab-size", m.vocab));

    Ok(vec![
        ("model", model),
        ("parallel", parallel),
        ("training", training),
        ("data", data),
    ])
}

/// Megatron-LM's `--pipeline-model-parallel-layout` for the plan: its pp × vpp virtual
/// stages in order (virtual stage chunk · pp + rank), `|` between them, `E` the embedding,
/// `t` a transformer layer, `L` the output layer and loss, `t*k` and `(…|)*n` repeats.
/// Llama 3 405B as Meta ran it is `E|(t|)*126L`.
pub fn pipeline_layout(plan: &Plan) -> String {
    let p = &plan.parallel;
    let (pp, vpp) = (p.pp.max(1), p.vpp.max(1));
    let total = pp * vpp;
    let stages: Vec<String> = (0..total)
        .map(|v| {
            let (chunk, rank) = (v / pp, v % pp);
            let layers = p.chunk_layers(plan.model.layers, rank, chunk);
            let mut s = String::new();
            if v == 0 {
                s.push('E');
            }
            match layers {
                0 => {}
                1 => s.push('t'),
                k => s.push_str(&format!("t*{k}")),
            }
            if v == total - 1 {
                s.push('L');
            }
            s
        })
        .collect();
    // Runs of identical stages as `(X|)*n`, which unrolls to `X|X|…X|`; the last stage
    // takes no trailing `|`.
    let mut out = String::new();
    let mut i = 0;
    while i < stages.len() {
        let mut j = i;
        while j + 1 < stages.len() && stages[j + 1] == stages[i] {
            j += 1;
        }
        let last_run = j == stages.len() - 1;
        let run = j - i + 1 - usize::from(last_run);
        match run {
            0 => {}
            1 => {
                out.push_str(&stages[i]);
                out.push('|');
            }
            n => out.push_str(&format!("({}|)*{n}", stages[i])),
        }
        if last_run {
            out.push_str(&stages[j]);
        }
        i = j + 1;
    }
    out
}

/// The flags planc's training scripts take (the contract with `job.entrypoint` when the job
/// names one; the torchrun and DeepSpeed targets pass them):
///
/// `--micro-batch-size N --global-batch-size N --lr X --min-lr X --lr-schedule constant|cosine
/// --warmup-steps N --steps N --weight-decay X --grad-clip X --adam-beta1 X --adam-beta2 X
/// --adam-eps X --seed N --precision fp32|fp16|bf16|fp8 --dropout X (--data PATH | --mock-data)
/// [--save DIR --save-interval N] --log-interval N`
pub fn script_args(plan: &Plan, run: &RunValues) -> Vec<Arg> {
    let t = &plan.train;
    let r = &t.run;
    let mut v = vec![
        Arg::num("--micro-batch-size", plan.parallel.micro_batch),
        Arg::num("--global-batch-size", t.global_batch),
        Arg::float("--lr", r.lr),
        Arg::float("--min-lr", r.min_lr),
        Arg::text("--lr-schedule", r.lr_schedule.as_str()),
        Arg::num("--warmup-steps", r.warmup_steps),
        Arg::num("--steps", run.steps),
        Arg::float("--weight-decay", r.weight_decay),
        Arg::float("--grad-clip", r.grad_clip),
        Arg::float("--adam-beta1", r.adam_beta1),
        Arg::float("--adam-beta2", r.adam_beta2),
        Arg::float("--adam-eps", r.adam_eps),
        Arg::num("--seed", r.seed),
        Arg::text("--precision", t.precision.as_str()),
        Arg::float("--dropout", t.dropout),
    ];
    match &run.data {
        Some(path) => v.push(Arg::text("--data", path.clone())),
        None => v.push(Arg::switch("--mock-data")),
    }
    if let Some(dir) = &run.checkpoint_dir {
        v.push(Arg::text("--save", dir.clone()));
        v.push(Arg::num("--save-interval", run.save_interval));
    }
    v.push(Arg::num("--log-interval", run.log_interval));
    v
}

/// The same run as Hugging Face `TrainingArguments` spell it, for scripts built on its
/// `Trainer` (`job.entrypoint_args = hf_trainer`). `ds_config` is the DeepSpeed config's path
/// under the DeepSpeed framework (Trainer's `--deepspeed FILE`). TrainingArguments has no
/// data or dropout (the script's own arguments and the model's config hold them): a plan
/// that sets them is refused at the attribute rather than run without them.
pub fn hf_trainer_args(
    plan: &Plan,
    run: &RunValues,
    target: Target,
    ds_config: Option<(&str, bool)>,
) -> Result<Vec<Arg>, EmitError> {
    let t = &plan.train;
    let r = &t.run;
    let refuse = |(b, a): (&str, &str), reason: String| {
        Err(EmitError::Unsupported {
            target,
            reason,
            at: Some(at(b, a)),
        })
    };
    if r.data.is_some() {
        return refuse(
            ("train", "data"),
            "Hugging Face's TrainingArguments have no data path (each Trainer script names its \
             own, e.g. --dataset or --train_file): remove train.data and pass the script's data \
             option as an argument of the launch script"
                .into(),
        );
    }
    if t.dropout > 0.0 {
        return refuse(
            ("train", "dropout"),
            "Hugging Face's TrainingArguments have no dropout (the model's config holds it): \
             set it in the model's config and remove train.dropout"
                .into(),
        );
    }
    if t.precision == Precision::Fp8 {
        return refuse(
            ("train", "precision"),
            "Hugging Face's Trainer has no fp8 flag; use bf16".into(),
        );
    }
    let p = &plan.parallel;
    let mut v = vec![
        Arg::num("--per_device_train_batch_size", p.micro_batch),
        Arg::num(
            "--gradient_accumulation_steps",
            p.grad_accum(t.global_batch),
        ),
        Arg::num("--max_steps", run.steps),
        Arg::float("--learning_rate", r.lr),
    ];
    match r.lr_schedule {
        LrSchedule::Constant => v.push(Arg::text("--lr_scheduler_type", "constant_with_warmup")),
        LrSchedule::Cosine => {
            v.push(Arg::text("--lr_scheduler_type", "cosine_with_min_lr"));
            v.push(Arg::text(
                "--lr_scheduler_kwargs",
                json!({ "min_lr": tidy(r.min_lr) }).to_string(),
            ));
        }
    }
    // Under DeepSpeed the Trainer checks its warm-up against the config's scheduler, which
    // warms up for at least one step (see `deepspeed_config`).
    let warmup = match (ds_config, r.lr_schedule) {
        (Some(_), LrSchedule::Cosine) => r.warmup_steps.max(1),
        _ => r.warmup_steps,
    };
    v.push(Arg::num("--warmup_steps", warmup));
    v.push(Arg::float("--weight_decay", r.weight_decay));
    v.push(Arg::float("--max_grad_norm", r.grad_clip));
    v.push(Arg::float("--adam_beta1", r.adam_beta1));
    v.push(Arg::float("--adam_beta2", r.adam_beta2));
    v.push(Arg::float("--adam_epsilon", r.adam_eps));
    v.push(Arg::num("--seed", r.seed));
    match t.precision {
        Precision::Bf16 => v.push(Arg::switch("--bf16")),
        Precision::Fp16 => v.push(Arg::switch("--fp16")),
        Precision::Fp32 | Precision::Fp8 => {}
    }
    match &run.checkpoint_dir {
        Some(dir) => {
            v.push(Arg::text("--output_dir", dir.clone()));
            v.push(Arg::text("--save_strategy", "steps"));
            v.push(Arg::num("--save_steps", run.save_interval));
        }
        None => v.push(Arg::text("--save_strategy", "no")),
    }
    v.push(Arg::num("--logging_steps", run.log_interval));
    if let Some((path, beside)) = ds_config {
        v.push(Arg::file("--deepspeed", path, beside));
    }
    Ok(v)
}

/// Optimizer steps for `train.tokens`, when given.
pub fn train_iters(plan: &Plan) -> Option<u64> {
    let tokens = plan.train.tokens?;
    let per_step = (plan.train.global_batch * plan.model.seq_len) as f64;
    if tokens.is_nan() || tokens <= 0.0 || per_step <= 0.0 {
        return None;
    }
    Some((tokens / per_step).ceil().max(1.0) as u64)
}

/// DeepSpeed's `ds_config.json` for the plan. DeepSpeed expresses data parallelism, ZeRO and
/// offload in its config; pipeline, context and expert parallelism live in the model code,
/// so a plan that needs them is refused here rather than silently run without them.
pub fn deepspeed_config(
    plan: &Plan,
    run: &RunValues,
    target: Target,
    notes: &mut Vec<String>,
) -> Result<Value, EmitError> {
    let p = &plan.parallel;
    let t = &plan.train;
    let r = &t.run;
    let refuse = |(b, a): (&str, &str), what: &str| {
        Err(EmitError::Unsupported {
            target,
            reason: format!(
                "{what}: DeepSpeed's config cannot express it (the model code must); use the \
                 megatron framework or set it to 1"
            ),
            at: Some(at(b, a)),
        })
    };
    if p.pp > 1 {
        return refuse(("parallel", "pp"), &format!("pp = {}", p.pp));
    }
    if p.cp > 1 {
        return refuse(("parallel", "cp"), &format!("cp = {}", p.cp));
    }
    if p.ep > 1 {
        return refuse(("parallel", "ep"), &format!("ep = {}", p.ep));
    }
    if t.precision == Precision::Fp8 {
        return Err(EmitError::Unsupported {
            target,
            reason: "DeepSpeed's config has no fp8 training; use bf16".into(),
            at: Some(at("train", "precision")),
        });
    }
    let grad_accum = p.grad_accum(t.global_batch);
    let mut zero = json!({
        "stage": p.zero,
        "overlap_comm": true,
        "contiguous_gradients": true,
    });
    if p.zero >= 2 {
        zero["reduce_scatter"] = json!(true);
    }
    if matches!(p.offload, Offload::Optimizer | Offload::Params) {
        zero["offload_optimizer"] = json!({ "device": "cpu", "pin_memory": true });
    }
    if p.offload == Offload::Params {
        zero["offload_param"] = json!({ "device": "cpu", "pin_memory": true });
    }
    let mut cfg = json!({
        "train_batch_size": t.global_batch,
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": tidy(r.grad_clip),
        "zero_optimization": zero,
        "optimizer": match t.optimizer {
            Optimizer::Adamw => json!({ "type": "AdamW", "params": {
                "lr": tidy(r.lr), "betas": [tidy(r.adam_beta1), tidy(r.adam_beta2)], "eps": tidy(r.adam_eps),
                "weight_decay": tidy(r.weight_decay),
            } }),
            Optimizer::Adam => json!({ "type": "Adam", "params": {
                "lr": tidy(r.lr), "betas": [tidy(r.adam_beta1), tidy(r.adam_beta2)], "eps": tidy(r.adam_eps),
                "weight_decay": tidy(r.weight_decay), "adam_w_mode": false,
            } }),
            Optimizer::Sgd => json!({ "type": "SGD", "params": {
                "lr": tidy(r.lr), "weight_decay": tidy(r.weight_decay),
            } }),
        },
        "steps_per_print": run.log_interval,
        "wall_clock_breakdown": false,
    });
    if r.weight_decay > 0.0 {
        notes.push(
            "DeepSpeed decays every parameter the training script gives its optimizer: \
             planc's plan decays 2-D weights only (give biases and norm weights a group of \
             their own with weight_decay 0)"
                .into(),
        );
    }
    // The schedule, from lr_schedules.py. Its warm-up ramps linearly from 0 over
    // max(2, warmup_num_steps) steps and must have at least one: a plan without warm-up
    // holds the full rate through it (warmup_min_ratio 1) and starts its cosine one step
    // late. DeepSpeed 0.19.8 on an H200 (2026-11-25), rate before each step of a 1000-step
    // run at 2e-5, min 2e-6: with 100 warm-up steps 0, 0, 2e-7, ... 1.96e-5 (step 99),
    // 2e-5 (101), 1.26e-5 (500), 2e-6 (999); without, 0, 2e-5, 2e-5, ... 1.1e-5 (500),
    // 2e-6 (999). Its first step runs at 0 either way (the scheduler sets the rate of
    // "before step 0" at construction); the Trainer accepts the config beside
    // TrainingArguments of the same values (HfTrainerDeepSpeedConfig, transformers 5.17).
    match (r.lr_schedule, r.warmup_steps) {
        (LrSchedule::Constant, 0) => {}
        (LrSchedule::Constant, n) => {
            cfg["scheduler"] = json!({ "type": "WarmupLR", "params": {
                "warmup_min_lr": 0.0, "warmup_max_lr": tidy(r.lr), "warmup_num_steps": n,
                "warmup_type": "linear",
            } });
        }
        (LrSchedule::Cosine, n) => {
            let min_ratio = if r.lr > 0.0 { r.min_lr / r.lr } else { 0.0 };
            cfg["scheduler"] = json!({ "type": "WarmupCosineLR", "params": {
                "total_num_steps": run.steps, "warmup_num_steps": n.max(1),
                "warmup_min_ratio": if n == 0 { 1.0 } else { 0.0 },
                "cos_min_ratio": tidy(min_ratio), "warmup_type": "linear",
            } });
        }
    }
    match t.precision {
        Precision::Bf16 => cfg["bf16"] = json!({ "enabled": true }),
        Precision::Fp16 => {
            cfg["fp16"] = json!({
                "enabled": true,
                "loss_scale": 0,
                "initial_scale_power": 16,
                "loss_scale_window": 1000,
                "hysteresis": 2,
                "min_loss_scale": 1
            })
        }
        Precision::Fp32 | Precision::Fp8 => {}
    }
    if p.tp > 1 {
        // AutoTP training (DeepSpeed ≥ 0.16.4).
        cfg["tensor_parallel"] = json!({ "autotp_size": p.tp });
    }
    if p.recompute != Recompute::None {
        cfg["activation_checkpointing"] = json!({
            "partition_activations": p.tp > 1,
            "cpu_checkpointing": p.offload == Offload::Params,
            "contiguous_memory_optimization": false,
            "number_checkpoints": Value::Null,
            "synchronize_checkpoint_boundary": false,
            "profile": false
        });
    }
    Ok(cfg)
}

/// The program every rank runs, and its arguments, for the job's framework. For planc it is
/// the `planc` binary, which every node runs once (`planc run PLAN`, written by the
/// templates with the node's place in the run); its arguments here are the checkpoint
/// options every attempt shares.
///
/// `ds_config` is where the job finds DeepSpeed's config (a file beside the script, or a
/// mounted one); `style` which flags a DeepSpeed or torch entrypoint takes.
#[allow(clippy::too_many_arguments)]
pub fn program(
    plan: &Plan,
    run: &RunValues,
    framework: Framework,
    style: EntrypointArgs,
    entrypoint: Option<&str>,
    megatron_args: Option<&[(&'static str, Vec<Arg>)]>,
    (ds_config, beside): (&str, bool),
    target: Target,
) -> Result<(String, Vec<Arg>), EmitError> {
    let script = || entrypoint.unwrap_or("train.py").to_string();
    Ok(match (framework, style) {
        (Framework::Megatron, _) => (
            entrypoint.unwrap_or("pretrain_gpt.py").to_string(),
            megatron_args
                .map(|g| g.iter().flat_map(|(_, a)| a.iter().cloned()).collect())
                .unwrap_or_default(),
        ),
        (Framework::Deepspeed, EntrypointArgs::Planc) => {
            let mut v = script_args(plan, run);
            v.push(Arg::switch("--deepspeed"));
            v.push(Arg::file("--deepspeed_config", ds_config, beside));
            (script(), v)
        }
        (Framework::Deepspeed, EntrypointArgs::HfTrainer) => (
            script(),
            hf_trainer_args(plan, run, target, Some((ds_config, beside)))?,
        ),
        (Framework::Torch, EntrypointArgs::Planc) => (script(), script_args(plan, run)),
        (Framework::Torch, EntrypointArgs::HfTrainer) => {
            (script(), hf_trainer_args(plan, run, target, None)?)
        }
        // Only the torchtitan target runs it, through `-m torchtitan.train`.
        (Framework::Torchtitan, _) => (
            entrypoint.unwrap_or("torchtitan.train").to_string(),
            Vec::new(),
        ),
        (Framework::Planc, _) => (
            entrypoint.unwrap_or("planc").to_string(),
            run.checkpoint_dir
                .as_deref()
                .map(|dir| {
                    vec![
                        Arg::text("--save", dir),
                        Arg::num("--save-every", SAVE_INTERVAL),
                    ]
                })
                .unwrap_or_default(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use planc_compiler::check::check_source;

    /// Llama 3 405B's layers on 16 nodes (tp 8, pp 16, dp 1) with the given `parallel`
    /// extras.
    fn plan(extra: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 16, gpus_per_node = 8, gpu = H100_SXM_80GB
                 inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us }} }}
             model m {{ preset = \"llama3-405b\" }}
             train {{ global_batch = 32, precision = bf16, optimizer = adamw }}
             parallel {{ tp = 8, pp = 16, dp = auto, micro_batch = 1, sequence_parallel = true,
                         zero = 1, recompute = full, {extra} }}"
        );
        let c = check_source("t.tp", &text);
        assert!(c.ok(), "{:?}", c.diagnostics);
        c.plan.expect("a plan")
    }

    fn flags(p: &Plan) -> Vec<(String, Option<Value>)> {
        megatron(p, &RunValues::of_plan(p), &mut Vec::new())
            .expect("expressible")
            .into_iter()
            .flat_map(|(_, args)| args)
            .map(|a| (a.flag.to_string(), a.value))
            .collect()
    }

    fn has(f: &[(String, Option<Value>)], flag: &str) -> Option<Option<Value>> {
        f.iter().find(|(n, _)| n == flag).map(|(_, v)| v.clone())
    }

    #[test]
    fn interleaved_ends_that_do_not_split_evenly_take_the_layout_flag() {
        // As Meta ran it: 16 stages of 8 one-layer chunks, one layer fewer on each end.
        let p =
            plan("schedule = interleaved, vpp = 8, first_stage_layers = 7, last_stage_layers = 7");
        assert_eq!(pipeline_layout(&p), "E|(t|)*126L");
        let f = flags(&p);
        assert_eq!(
            has(&f, "--pipeline-model-parallel-layout"),
            Some(Some(json!("E|(t|)*126L")))
        );
        for absent in [
            "--decoder-first-pipeline-num-layers",
            "--decoder-last-pipeline-num-layers",
            "--num-layers-per-virtual-pipeline-stage",
            "--num-virtual-stages-per-pipeline-rank",
            "--no-overlap-p2p-communication",
        ] {
            assert_eq!(has(&f, absent), None, "{absent}");
        }
    }

    #[test]
    fn the_layout_lists_every_virtual_stage_in_megatron_order() {
        // 2 chunks: virtual stage v = chunk · 16 + rank. Ends of 7 over 2 chunks are 3 + 4
        // (first stage, lighter chunk first) and 4 + 3 (last stage, lighter chunk last).
        let p =
            plan("schedule = interleaved, vpp = 2, first_stage_layers = 7, last_stage_layers = 7");
        let layout = pipeline_layout(&p);
        assert_eq!(layout, "Et*3|(t*4|)*30t*3L");
        // Unrolled as Megatron-LM parses it: 32 stages holding 126 layers.
        let mut unrolled = String::new();
        let mut rest = layout.as_str();
        while let Some(open) = rest.find('(') {
            unrolled.push_str(&rest[..open]);
            let close = rest[open..].find(")*").expect("a group") + open;
            let end = rest[close + 2..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(rest.len(), |e| e + close + 2);
            let n: usize = rest[close + 2..end].parse().unwrap();
            unrolled.push_str(&rest[open + 1..close].repeat(n));
            rest = &rest[end..];
        }
        unrolled.push_str(rest);
        let stages: Vec<usize> = unrolled
            .split('|')
            .map(|s| {
                let s = s.trim_start_matches('E').trim_end_matches('L');
                match s.split_once("t*") {
                    Some((_, k)) => k.parse().unwrap(),
                    None => s.matches('t').count(),
                }
            })
            .collect();
        assert_eq!(stages.len(), 32);
        assert_eq!(stages.iter().sum::<usize>(), 126);
        assert_eq!(
            (stages[0], stages[16], stages[15], stages[31]),
            (3, 4, 4, 3)
        );
    }

    #[test]
    fn evenly_splitting_ends_keep_the_first_and_last_flags() {
        // 126 = 7 + 14 × 8 + 7 over 16 stages of 1 chunk: the plain uneven flags.
        let f = flags(&plan("first_stage_layers = 7, last_stage_layers = 7"));
        assert_eq!(
            has(&f, "--decoder-first-pipeline-num-layers"),
            Some(Some(json!(7)))
        );
        assert_eq!(has(&f, "--pipeline-model-parallel-layout"), None);
        // 128 = 8 + 14 × 8 + 8 in 2 chunks each: every stage splits evenly.
        let text = |p: &Plan| {
            let mut q = p.clone();
            q.model.layers = 128;
            q.parallel.vpp = 2;
            q.parallel.schedule = Schedule::Interleaved;
            q.parallel.first_stage_layers = Some(8);
            q.parallel.last_stage_layers = Some(8);
            q
        };
        let q = text(&plan("first_stage_layers = 7, last_stage_layers = 7"));
        let f = flags(&q);
        assert_eq!(
            has(&f, "--num-virtual-stages-per-pipeline-rank"),
            Some(Some(json!(2)))
        );
        assert_eq!(
            has(&f, "--decoder-last-pipeline-num-layers"),
            Some(Some(json!(8)))
        );
        assert_eq!(has(&f, "--num-layers-per-virtual-pipeline-stage"), None);
    }

    #[test]
    fn overlap_flags_follow_the_plan() {
        let mut p =
            plan("schedule = interleaved, vpp = 2, first_stage_layers = 7, last_stage_layers = 7");
        p.parallel.dp = 2;
        let f = flags(&p);
        assert!(has(&f, "--overlap-grad-reduce").is_some());
        assert!(has(&f, "--no-overlap-p2p-communication").is_none());
        p.parallel.overlap_grad_reduce = false;
        p.parallel.overlap_p2p = Some(false);
        let f = flags(&p);
        assert!(has(&f, "--overlap-grad-reduce").is_none());
        assert!(has(&f, "--overlap-param-gather").is_none());
        assert!(has(&f, "--no-overlap-p2p-communication").is_some());
        // Megatron-LM's interleaved schedule without overlap needs pp > 2.
        p.parallel.pp = 2;
        assert!(megatron(&p, &RunValues::of_plan(&p), &mut Vec::new()).is_err());
    }

    #[test]
    fn unfused_gradient_accumulation_is_asked_for() {
        let mut p = plan("first_stage_layers = 7, last_stage_layers = 7");
        assert!(has(&flags(&p), "--no-gradient-accumulation-fusion").is_none());
        p.parallel.grad_accumulation_fusion = false;
        assert!(has(&flags(&p), "--no-gradient-accumulation-fusion").is_some());
    }

    #[test]
    fn backward_collectives_kept_in_order_are_noted_as_not_what_megatron_runs() {
        let notes = |p: &Plan| {
            let mut notes = Vec::new();
            megatron(p, &RunValues::of_plan(p), &mut notes).expect("expressible");
            notes
        };
        let mut p = plan("first_stage_layers = 7, last_stage_layers = 7");
        assert!(!notes(&p).iter().any(|n| n.contains("overlap_tp_backward")));
        p.parallel.overlap_tp_backward = Some(false);
        assert!(notes(&p).iter().any(|n| n.contains("overlap_tp_backward")));
    }

    #[test]
    fn an_eager_plan_runs_megatrons_local_layers() {
        let mut p = plan("first_stage_layers = 7, last_stage_layers = 7");
        assert!(has(&flags(&p), "--transformer-impl").is_none());
        p.kernels = planc_compiler::plan::Kernels::Eager;
        let f = flags(&p);
        assert_eq!(has(&f, "--transformer-impl"), Some(Some(json!("local"))));
        for switch in [
            "--no-persist-layer-norm",
            "--no-masked-softmax-fusion",
            "--no-gradient-accumulation-fusion",
        ] {
            assert!(has(&f, switch).is_some(), "{switch}");
        }
    }

    #[test]
    fn a_head_of_its_own_width_is_megatrons_kv_channels() {
        let mut p = plan("first_stage_layers = 7, last_stage_layers = 7");
        assert!(has(&flags(&p), "--kv-channels").is_none());
        p.model.head_dim = 256;
        assert_eq!(
            has(&flags(&p), "--kv-channels"),
            Some(Some(Value::from(256)))
        );
    }
}
