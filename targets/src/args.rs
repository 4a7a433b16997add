//! What the plan implies for each framework: Megatron-LM's command-line flags and DeepSpeed's
//! configuration. Templates lay these out; they are computed here so that the shell script,
//! the sbatch script and the PyTorchJob carry exactly the same flags.
//!
//! Megatron-LM flag names are those of `megatron/training/arguments.py` (and the config
//! dataclasses it turns into flags) in current Megatron-LM (core_r0.13 and later).

use planc_compiler::plan::{
    Attention, Framework, Mlp, Norm, Offload, Optimizer, Plan, Position, Precision, Recompute,
    Schedule,
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
}

impl Arg {
    fn switch(flag: &'static str) -> Arg {
        Arg { flag, value: None }
    }

    fn num(flag: &'static str, v: u64) -> Arg {
        Arg {
            flag,
            value: Some(json!(v)),
        }
    }

    fn text(flag: &'static str, v: impl Into<String>) -> Arg {
        Arg {
            flag,
            value: Some(Value::String(v.into())),
        }
    }
}

/// Checkpoints are written every this many iterations when the job names a checkpoint folder
/// (Megatron-LM refuses `--save` without `--save-interval`; `planc run` gets it as
/// `--save-every`, so both frameworks lose at most this many steps to a failure).
pub const SAVE_INTERVAL: u64 = 1000;

/// The Megatron-LM arguments of the plan, grouped as the launch script prints them:
/// (group name, arguments).
pub fn megatron(
    plan: &Plan,
    checkpoint_dir: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<Vec<(&'static str, Vec<Arg>)>, EmitError> {
    let m = &plan.model;
    let p = &plan.parallel;
    let t = &plan.train;
    let unsupported = |reason: String| EmitError::Unsupported {
        target: Target::Megatron,
        reason,
    };

    let mut model = vec![
        Arg::num("--num-layers", m.layers),
        Arg::num("--hidden-size", m.hidden),
        Arg::num("--ffn-hidden-size", m.ffn_hidden),
        Arg::num("--num-attention-heads", m.heads),
    ];
    if m.kv_heads < m.heads {
        model.push(Arg::switch("--group-query-attention"));
        model.push(Arg::num("--num-query-groups", m.kv_heads));
    }
    model.push(Arg::num("--seq-length", m.seq_len));
    model.push(Arg::num("--max-position-embeddings", m.seq_len));
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
    }
    if t.attention == Attention::Standard {
        model.push(Arg::text("--attention-backend", "unfused"));
    }
    // Stated even when 0: Megatron-LM's own default is 0.1, and the memory planc predicts
    // depends on it (dropout keeps masks). The fused loss keeps logits in bf16, as priced.
    let dropout = format!("{}", t.dropout);
    model.push(Arg::text("--attention-dropout", dropout.clone()));
    model.push(Arg::text("--hidden-dropout", dropout));
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
                    return Err(unsupported(format!(
                        "Megatron-LM's interleaved schedule without p2p overlap needs pp > 2 \
                         (pp = {}): remove `overlap_p2p = false` or raise pp",
                        p.pp
                    )));
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
    if !p.grad_accumulation_fusion {
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
    if let Some(iters) = train_iters(plan) {
        training.push(Arg::num("--train-iters", iters));
    }
    if let Some(dir) = checkpoint_dir {
        training.push(Arg::text("--save", dir));
        training.push(Arg::text("--load", dir));
        training.push(Arg::num("--save-interval", SAVE_INTERVAL));
    }

    let data = vec![
        Arg::switch("--mock-data"),
        Arg::text("--tokenizer-type", "NullTokenizer"),
        Arg::num("--vocab-size", m.vocab),
    ];

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
pub fn deepspeed_config(plan: &Plan, target: Target) -> Result<Value, EmitError> {
    let p = &plan.parallel;
    let t = &plan.train;
    let refuse = |what: &str| {
        Err(EmitError::Unsupported {
            target,
            reason: format!(
                "{what}: DeepSpeed's config cannot express it (the model code must); use the \
                 megatron framework or set it to 1"
            ),
        })
    };
    if p.pp > 1 {
        return refuse(&format!("pp = {}", p.pp));
    }
    if p.cp > 1 {
        return refuse(&format!("cp = {}", p.cp));
    }
    if p.ep > 1 {
        return refuse(&format!("ep = {}", p.ep));
    }
    if t.precision == Precision::Fp8 {
        return Err(EmitError::Unsupported {
            target,
            reason: "DeepSpeed's config has no fp8 training; use bf16".into(),
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
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "optimizer": match t.optimizer {
            Optimizer::Adamw => json!({ "type": "AdamW", "params": {} }),
            Optimizer::Adam => json!({ "type": "Adam", "params": { "adam_w_mode": false } }),
            Optimizer::Sgd => json!({ "type": "SGD", "params": {} }),
        },
        "steps_per_print": 100,
        "wall_clock_breakdown": false,
    });
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
pub fn program(
    framework: Framework,
    entrypoint: Option<&str>,
    checkpoint_dir: Option<&str>,
    megatron_args: Option<&[(&'static str, Vec<Arg>)]>,
) -> (String, Vec<Arg>) {
    match framework {
        Framework::Megatron => (
            entrypoint.unwrap_or("pretrain_gpt.py").to_string(),
            megatron_args
                .map(|g| g.iter().flat_map(|(_, a)| a.iter().cloned()).collect())
                .unwrap_or_default(),
        ),
        Framework::Deepspeed => (
            entrypoint.unwrap_or("train.py").to_string(),
            vec![
                Arg::switch("--deepspeed"),
                Arg::text("--deepspeed_config", "ds_config.json"),
            ],
        ),
        Framework::Torch => (entrypoint.unwrap_or("train.py").to_string(), Vec::new()),
        Framework::Planc => (
            entrypoint.unwrap_or("planc").to_string(),
            checkpoint_dir
                .map(|dir| {
                    vec![
                        Arg::text("--save", dir),
                        Arg::num("--save-every", SAVE_INTERVAL),
                    ]
                })
                .unwrap_or_default(),
        ),
    }
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
        megatron(p, None, &mut Vec::new())
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
        assert!(megatron(&p, None, &mut Vec::new()).is_err());
    }

    #[test]
    fn unfused_gradient_accumulation_is_asked_for() {
        let mut p = plan("first_stage_layers = 7, last_stage_layers = 7");
        assert!(has(&flags(&p), "--no-gradient-accumulation-fusion").is_none());
        p.parallel.grad_accumulation_fusion = false;
        assert!(has(&flags(&p), "--no-gradient-accumulation-fusion").is_some());
    }
}
