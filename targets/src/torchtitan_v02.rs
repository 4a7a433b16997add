//! torchtitan 0.2.x: the plan as a TOML job file (`torchrun -m torchtitan.train
//! --job.config_file FILE`) and a Python module, named by the job file's
//! `experimental.custom_import`, that registers a model flavor with the plan's dimensions.
//!
//! torchtitan 0.3 replaced the TOML files by a Python function returning its `Trainer.Config`;
//! 0.2.2 (February 2026) is the last release with TOML job files, and the one that imports on
//! torch 2.11 (0.3.0 needs a newer torch). The torchtitan target writes both forms and its
//! launch script runs the one the installed torchtitan reads.
//!
//! Names are those of `torchtitan/config/job_config.py` at tag v0.2.2. Every value the plan
//! holds and torchtitan has a field for is written; what torchtitan's Llama 3 cannot run (GELU
//! MLPs, LayerNorm, learned positions, biases, dropout, experts, ZeRO-1, fp16, ZB-H1) is
//! refused here rather than trained as something else.

use planc_compiler::capability;
use planc_compiler::plan::{
    Attention, Framework, LrSchedule, Mlp, Norm, Offload, Optimizer, Plan, Position, Precision,
    Recompute, Schedule,
};
use serde::Serialize;
use serde_json::{json, Value};

use crate::args::{self, at};
use crate::{EmitError, Target};

/// The module the job file imports (`experimental.custom_import`), written beside it.
pub const FLAVOR_MODULE: &str = "planc_flavor";
/// The train spec the module registers: torchtitan's Llama 3 with the plan's flavor.
pub const MODEL_NAME: &str = "planc_llama3";
/// The flavor the module registers.
pub const FLAVOR: &str = "planc";
/// The job file's name in the output folder.
pub const JOB_FILE: &str = "torchtitan-job.toml";
/// torchtitan's RMSNorm epsilon, and planc's (`runtime::train::model`): the plan has no
/// attribute for it.
pub const NORM_EPS: f64 = 1e-5;

/// What the templates lay out.
#[derive(Clone, Debug, Serialize)]
pub struct TitanV02 {
    /// The job file, section by section, in the order written.
    pub sections: Vec<Section>,
    pub flavor: Flavor,
    pub module: &'static str,
    pub model_name: &'static str,
    pub flavor_name: &'static str,
    pub job_file: &'static str,
    /// Where torchtitan 0.2.x runs the plan differently from planc's pricing (comments in
    /// the job file).
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Section {
    pub name: &'static str,
    pub keys: Vec<Key>,
}

/// One `key = value` line; `why` becomes a comment above it.
#[derive(Clone, Debug, Serialize)]
pub struct Key {
    pub key: &'static str,
    pub value: Value,
    pub why: Option<String>,
}

/// The dimensions of the flavor the module registers (`TransformerModelArgs` of
/// `torchtitan.models.llama3`), and planc's parameter count for them.
#[derive(Clone, Debug, Serialize)]
pub struct Flavor {
    pub dim: u64,
    pub n_layers: u64,
    pub n_heads: u64,
    pub n_kv_heads: u64,
    /// The SwiGLU's hidden width; the module derives `multiple_of` and
    /// `ffn_dim_multiplier` from it (torchtitan computes the width from those).
    pub ffn_hidden: u64,
    pub vocab_size: u64,
    pub rope_theta: f64,
    pub norm_eps: f64,
    /// The output layer shares the embedding's matrix.
    pub tied: bool,
    /// planc's count (`cost::params::total_params`); the module's model must have as many.
    pub params: u64,
}

fn key(key: &'static str, value: Value) -> Key {
    Key {
        key,
        value,
        why: None,
    }
}

fn key_why(key: &'static str, value: Value, why: impl Into<String>) -> Key {
    Key {
        key,
        value,
        why: Some(why.into()),
    }
}

/// The job file and flavor of a plan, or why torchtitan 0.2.x cannot run it.
pub fn job(
    plan: &Plan,
    target: Target,
    job_name: &str,
    run: &args::RunValues,
) -> Result<TitanV02, EmitError> {
    let mut notes = Vec::new();
    let checkpoint_dir = run.checkpoint_dir.as_deref();
    let m = &plan.model;
    let p = &plan.parallel;
    let t = &plan.train;
    let r = &t.run;
    // Each refusal points at the attribute that asks for what torchtitan cannot run.
    let refuse = |(block, attr): (&str, &str), reason: String| EmitError::Unsupported {
        target,
        reason,
        at: Some(at(block, attr)),
    };

    // torchtitan's Llama 3 is the only dense decoder of 0.2.x with planc's shapes: RMSNorm,
    // rope, SwiGLU, no biases, no dropout.
    let mut not_llama = Vec::new();
    if m.mlp != Mlp::Swiglu {
        not_llama.push(("mlp", "mlp = swiglu"));
    }
    if m.norm != Norm::Rmsnorm {
        not_llama.push(("norm", "norm = rmsnorm"));
    }
    if m.position != Position::Rope {
        not_llama.push(("position", "position = rope"));
    }
    if m.bias {
        not_llama.push(("bias", "bias = false"));
    }
    if !not_llama.is_empty() {
        return Err(refuse(
            ("model", not_llama[0].0),
            format!(
                "torchtitan trains this plan as its Llama 3, which needs {} in the model block",
                not_llama
                    .iter()
                    .map(|(_, n)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if m.experts > 1 || p.ep > 1 {
        return Err(refuse(
            if m.experts > 1 {
                ("model", "experts")
            } else {
                ("parallel", "ep")
            },
            "experts: torchtitan's Llama 3 is dense (its MoE models are Llama 4 and \
             DeepSeek-V3, whose routers planc does not emit)"
                .into(),
        ));
    }
    if let Some(l) = capability::framework_model_limit(Framework::Torchtitan, m) {
        return Err(refuse((l.block, l.attr), l.reason));
    }
    if t.dropout > 0.0 {
        return Err(refuse(
            ("train", "dropout"),
            format!(
                "dropout = {}: torchtitan's Llama 3 has no dropout; set dropout = 0",
                t.dropout
            ),
        ));
    }
    if t.attention == Attention::Standard {
        notes.push(
            "attention = standard: torchtitan's Llama 3 runs PyTorch's fused attention (sdpa), \
             as `flash` prices it"
                .into(),
        );
    }
    if !m.hidden.is_multiple_of(m.heads.max(1)) || !m.heads.is_multiple_of(m.kv_heads.max(1)) {
        return Err(refuse(
            ("model", "kv_heads"),
            format!(
            "heads = {} and kv_heads = {} do not divide hidden = {} into whole heads and groups",
            m.heads, m.kv_heads, m.hidden
        ),
        ));
    }
    if let Some(data) = &run.data {
        return Err(refuse(
            ("train", "data"),
            format!(
                "train.data = {data:?}: torchtitan reads Hugging Face datasets, not planc's token \
             files; remove train.data to train on torchtitan's c4_test (the launch script's \
             TORCHTITAN_ASSETS)"
            ),
        ));
    }

    let (replicate, shard, reshard) =
        match p.zero {
            _ if p.dp == 1 => (1, 1, None),
            0 => (p.dp, 1, None),
            1 => return Err(refuse(
                ("parallel", "zero"),
                "zero = 1: torchtitan shards gradients with the optimizer state (FSDP2), it has \
                 no ZeRO-1; use zero = 2 (FSDP without resharding after forward), 3 or 0 (DDP)"
                    .into(),
            )),
            2 => (1, p.dp, Some("never")),
            _ => (1, p.dp, Some("always")),
        };
    // Tied embeddings are one parameter in two modules: FSDP2 and tensor parallelism wrap
    // the embedding and the output layer separately, and pipeline stages hold them apart.
    let fsdp = shard > 1 || p.cp > 1;
    if m.tied_embeddings && (fsdp || p.tp > 1 || p.pp > 1) {
        return Err(refuse(
            ("model", "tied_embeddings"),
            format!(
            "tied_embeddings = true with {}: torchtitan shards or places the embedding and the \
             output layer separately, which unties them; set tied_embeddings = false or train \
             on DDP or one GPU",
            [
                (shard > 1, "FSDP (zero 2 or 3 over dp > 1)"),
                (p.cp > 1, "cp > 1"),
                (p.tp > 1, "tp > 1"),
                (p.pp > 1, "pp > 1"),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, what)| *what)
            .collect::<Vec<_>>()
            .join(", ")
        ),
        ));
    }
    let (param_dtype, converters) =
        match t.precision {
            Precision::Bf16 => ("bfloat16", None),
            Precision::Fp32 => ("float32", None),
            Precision::Fp8 => ("bfloat16", Some(json!(["quantize.linear.float8"]))),
            Precision::Fp16 => return Err(refuse(
                ("train", "precision"),
                "precision = fp16: torchtitan trains in bf16 or fp32 (it has no loss scaling); \
                 use bf16"
                    .into(),
            )),
        };
    let optimizer = match t.optimizer {
        Optimizer::Adamw => "AdamW",
        Optimizer::Adam => "Adam",
        Optimizer::Sgd => {
            return Err(refuse(
                ("train", "optimizer"),
                "optimizer = sgd: torchtitan builds Adam or AdamW".into(),
            ))
        }
    };
    if p.offload == Offload::Optimizer {
        return Err(refuse(
            ("parallel", "offload"),
            "offload = optimizer: torchtitan offloads parameters, gradients and optimizer state \
             together (training.enable_cpu_offload); use offload = params"
                .into(),
        ));
    }
    if p.offload == Offload::Params && !fsdp {
        return Err(refuse(
            ("parallel", "offload"),
            "offload = params: torchtitan offloads through FSDP2's CPUOffloadPolicy, which needs \
             zero = 2 or 3 with dp > 1"
                .into(),
        ));
    }

    // --- model -----------------------------------------------------------------------
    let mut model = vec![
        key("name", json!(MODEL_NAME)),
        key_why(
            "flavor",
            json!(FLAVOR),
            format!(
                "{}.py registers it: {} layers, hidden {}, {} heads ({} kv), ffn {}, vocab {}",
                FLAVOR_MODULE, m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab
            ),
        ),
        key_why(
            "hf_assets_path",
            json!("assets/tokenizer"),
            "torchtitan's test tokenizer (2002 tokens, tests/assets/tokenizer of its \
             repository); the launch script replaces it with $TORCHTITAN_ASSETS/tokenizer",
        ),
    ];
    if let Some(c) = converters {
        model.push(key_why(
            "converters",
            c,
            "fp8: torchao's Float8Linear (torchao must be installed)",
        ));
    }

    // --- optimizer and schedule ------------------------------------------------------
    let optimizer = vec![
        key("name", json!(optimizer)),
        key("lr", json!(r.lr)),
        key("beta1", json!(r.adam_beta1)),
        key("beta2", json!(r.adam_beta2)),
        key("eps", json!(r.adam_eps)),
        key("weight_decay", json!(r.weight_decay)),
    ];
    if r.weight_decay > 0.0 {
        notes.push(
            "torchtitan's AdamW decays every parameter, norm weights included (planc decays the \
             2-D weights only)"
                .into(),
        );
    }
    let mut lr_scheduler = vec![key("warmup_steps", json!(r.warmup_steps))];
    match r.lr_schedule {
        LrSchedule::Constant => lr_scheduler.push(key_why(
            "decay_ratio",
            json!(0.0),
            "constant: no decay after the warm-up",
        )),
        LrSchedule::Cosine => {
            lr_scheduler.push(key("decay_type", json!("cosine")));
            lr_scheduler.push(key_why(
                "min_lr_factor",
                json!(if r.lr > 0.0 { r.min_lr / r.lr } else { 0.0 }),
                "train.min_lr / train.lr",
            ));
        }
    }

    // --- batch and steps -----------------------------------------------------------------
    let steps = run.steps;
    let dp = replicate * shard;
    // Under a pipeline every micro-batch of a step goes through one schedule (torchtitan's
    // local batch, split into pipeline micro-batches); without one, torchtitan accumulates
    // gradients over local batches of a micro-batch each.
    let local_batch = if p.pp > 1 {
        t.global_batch / dp.max(1)
    } else {
        p.micro_batch
    };
    let mut training = vec![
        key("dataset", json!("c4_test")),
        key_why(
            "dataset_path",
            json!("assets/c4_test"),
            "the launch script replaces it with $TORCHTITAN_ASSETS/c4_test",
        ),
        key("local_batch_size", json!(local_batch)),
        key("global_batch_size", json!(t.global_batch)),
        key("seq_len", json!(m.seq_len)),
        if r.grad_clip > 0.0 {
            key("max_norm", json!(r.grad_clip))
        } else {
            // torchtitan always clips, and a bound of 0 would zero every gradient.
            key_why("max_norm", json!(f64::MAX), "grad_clip = 0: no clipping")
        },
        key_why(
            "steps",
            json!(steps),
            if run.steps_from == "tokens" {
                "train.tokens over tokens per step"
            } else {
                "train.steps"
            },
        ),
        key_why(
            "dtype",
            json!("float32"),
            "fp32 master weights and optimizer state",
        ),
        key("mixed_precision_param", json!(param_dtype)),
        key("mixed_precision_reduce", json!("float32")),
    ];
    if p.offload == Offload::Params {
        training.push(key("enable_cpu_offload", json!(true)));
    }

    // --- parallelism -----------------------------------------------------------------
    let mut parallelism = vec![
        key_why(
            "data_parallel_replicate_degree",
            json!(replicate),
            format!("dp {} with zero {}", p.dp, p.zero),
        ),
        key("data_parallel_shard_degree", json!(shard)),
    ];
    if let Some(policy) = reshard {
        parallelism.push(key_why(
            "fsdp_reshard_after_forward",
            json!(policy),
            if policy == "never" {
                "zero 2: parameters stay gathered from forward to backward"
            } else {
                "zero 3: parameters are gathered again for backward"
            },
        ));
    }
    parallelism.push(key("tensor_parallel_degree", json!(p.tp)));
    if p.tp > 1 && !p.sequence_parallel {
        notes.push(
            "torchtitan always runs tensor parallelism with sequence parallelism (the norms and \
             the residual stream split by tokens); the plan says sequence_parallel = false"
                .into(),
        );
    }
    parallelism.push(key("pipeline_parallel_degree", json!(p.pp)));
    if p.pp > 1 {
        let schedule = match p.schedule {
            Schedule::OneFOneB => "1F1B",
            Schedule::Gpipe => "GPipe",
            Schedule::Interleaved if p.vpp > 1 => "Interleaved1F1B",
            Schedule::Interleaved => "1F1B",
            Schedule::ZeroBubble => {
                return Err(refuse(
                    ("parallel", "schedule"),
                    "schedule = zb_h1: torch's pipelining has zero-bubble schedules only with \
                     several stages per rank (InterleavedZeroBubble, ZBVZeroBubble); use 1f1b or \
                     interleaved"
                        .into(),
                ))
            }
        };
        parallelism.push(key("pipeline_parallel_schedule", json!(schedule)));
        parallelism.push(key(
            "pipeline_parallel_microbatch_size",
            json!(p.micro_batch),
        ));
        parallelism.push(key_why(
            "module_fqns_per_model_part",
            json!(model_parts(plan)),
            "the plan's split: one list per virtual stage, stage v on rank v mod pp",
        ));
    }
    parallelism.push(key("context_parallel_degree", json!(p.cp)));

    // --- recompute, checkpoints, logging, seed ---------------------------------------
    let mut activation = vec![key(
        "mode",
        json!(match p.recompute {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
        }),
    )];
    if p.recompute == Recompute::Selective {
        activation.push(key_why(
            "selective_ac_option",
            json!("op"),
            "per operation, as Megatron-LM's selective recompute (not every n-th layer)",
        ));
    }

    let mut sections = vec![Section {
        name: "job",
        keys: {
            let mut k = vec![key("description", json!(job_name))];
            if checkpoint_dir.is_some() {
                k.push(key_why(
                    "dump_folder",
                    json!("."),
                    "checkpoint.folder is the plan's checkpoint_dir, as given",
                ));
            }
            k
        },
    }];
    sections.push(Section {
        name: "model",
        keys: model,
    });
    sections.push(Section {
        name: "optimizer",
        keys: optimizer,
    });
    sections.push(Section {
        name: "lr_scheduler",
        keys: lr_scheduler,
    });
    sections.push(Section {
        name: "training",
        keys: training,
    });
    sections.push(Section {
        name: "parallelism",
        keys: parallelism,
    });
    sections.push(Section {
        name: "activation_checkpoint",
        keys: activation,
    });
    if let Some(dir) = checkpoint_dir {
        sections.push(Section {
            name: "checkpoint",
            keys: vec![
                key("enable", json!(true)),
                key_why(
                    "folder",
                    json!(dir),
                    "job.checkpoint_dir; torchtitan resumes from the newest step there",
                ),
                key("interval", json!(run.save_interval)),
                key_why(
                    "last_save_model_only",
                    json!(false),
                    "the last step's checkpoint keeps the optimizer, so the run can resume",
                ),
            ],
        });
    }
    sections.push(Section {
        name: "metrics",
        keys: vec![key_why(
            "log_freq",
            json!(run.log_interval),
            "a hundred lines a run, every step for short runs",
        )],
    });
    sections.push(Section {
        name: "compile",
        keys: vec![key_why(
            "enable",
            json!(false),
            "eager, as planc prices the framework",
        )],
    });
    sections.push(Section {
        name: "experimental",
        keys: vec![key_why(
            "custom_import",
            json!(FLAVOR_MODULE),
            "registers the plan's flavor; the launch script puts its folder on PYTHONPATH",
        )],
    });
    sections.push(Section {
        name: "debug",
        keys: vec![key("seed", json!(r.seed))],
    });

    Ok(TitanV02 {
        sections,
        flavor: Flavor {
            dim: m.hidden,
            n_layers: m.layers,
            n_heads: m.heads,
            n_kv_heads: m.kv_heads,
            ffn_hidden: m.ffn_hidden,
            vocab_size: m.vocab,
            rope_theta: m.rope_theta,
            norm_eps: NORM_EPS,
            tied: m.tied_embeddings,
            params: planc_compiler::cost::params::total_params(m).round() as u64,
        },
        module: FLAVOR_MODULE,
        model_name: MODEL_NAME,
        flavor_name: FLAVOR,
        job_file: JOB_FILE,
        notes,
    })
}

/// torchtitan's `module_fqns_per_model_part` for the plan's pipeline: its pp × vpp virtual
/// stages in order (virtual stage chunk · pp + rank, as torchtitan's looped schedules place
/// them), each the modules it holds. The first holds the embedding, the last the final norm
/// and the output layer.
pub fn model_parts(plan: &Plan) -> Vec<Vec<String>> {
    let p = &plan.parallel;
    let (pp, vpp) = (p.pp.max(1), p.vpp.max(1));
    let total = pp * vpp;
    let mut next = 0;
    (0..total)
        .map(|v| {
            let (chunk, rank) = (v / pp, v % pp);
            let layers = p.chunk_layers(plan.model.layers, rank, chunk);
            let mut part = Vec::new();
            if v == 0 {
                part.push("tok_embeddings".to_string());
            }
            for l in next..next + layers {
                part.push(format!("layers.{l}"));
            }
            next += layers;
            if v == total - 1 {
                part.push("norm".to_string());
                part.push("output".to_string());
            }
            part
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use planc_compiler::check::check_source;

    fn plan(model: &str, train: &str, parallel: &str, gpus: u64) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = {gpus}, gpu = H100_SXM_80GB }}
             model m {{ {model} }}
             train {{ global_batch = 16, precision = bf16, optimizer = adamw, {train} }}
             parallel {{ {parallel} }}"
        );
        let c = check_source("t.tp", &text);
        assert!(c.ok(), "{:?}", c.diagnostics);
        c.plan.expect("a plan")
    }

    fn run(p: &Plan, checkpoint_dir: Option<&str>) -> args::RunValues {
        args::RunValues {
            checkpoint_dir: checkpoint_dir.map(str::to_string),
            ..args::RunValues::of_plan(p)
        }
    }

    const LLAMA: &str = "layers = 8, hidden = 1024, heads = 16, kv_heads = 4, ffn_hidden = 4096, \
         vocab = 32000, seq_len = 1024, mlp = swiglu, norm = rmsnorm, position = rope, \
         bias = false, tied_embeddings = false";

    fn value<'a>(j: &'a TitanV02, section: &str, k: &str) -> Option<&'a Value> {
        j.sections
            .iter()
            .find(|s| s.name == section)?
            .keys
            .iter()
            .find(|x| x.key == k)
            .map(|x| &x.value)
    }

    #[test]
    fn zero_stages_become_fsdp_or_ddp_degrees() {
        for (zero, replicate, shard, reshard) in [
            (0, 4, 1, None),
            (2, 1, 4, Some("never")),
            (3, 1, 4, Some("always")),
        ] {
            let p = plan(
                LLAMA,
                "",
                &format!("tp = 1, pp = 1, dp = 4, micro_batch = 2, zero = {zero}"),
                4,
            );
            let j = job(&p, Target::Torchtitan, "j", &run(&p, None)).unwrap();
            assert_eq!(
                value(&j, "parallelism", "data_parallel_replicate_degree"),
                Some(&json!(replicate))
            );
            assert_eq!(
                value(&j, "parallelism", "data_parallel_shard_degree"),
                Some(&json!(shard))
            );
            assert_eq!(
                value(&j, "parallelism", "fsdp_reshard_after_forward"),
                reshard.map(|r| json!(r)).as_ref()
            );
            // Two micro-batches of 2 on each of 4 ranks: torchtitan accumulates 2.
            assert_eq!(value(&j, "training", "local_batch_size"), Some(&json!(2)));
            assert_eq!(value(&j, "training", "global_batch_size"), Some(&json!(16)));
        }
        let p = plan(LLAMA, "", "tp = 1, pp = 1, dp = 4, zero = 1", 4);
        let e = job(&p, Target::Torchtitan, "j", &run(&p, None)).unwrap_err();
        assert!(e.to_string().contains("no ZeRO-1"), "{e}");
    }

    #[test]
    fn the_pipeline_split_is_the_plans() {
        // 8 layers over pp 2 × vpp 2: four chunks of 2, chunk v on rank v mod 2.
        let p = plan(
            LLAMA,
            "",
            "tp = 1, pp = 2, dp = 1, micro_batch = 1, schedule = interleaved, vpp = 2",
            2,
        );
        let j = job(&p, Target::Torchtitan, "j", &run(&p, None)).unwrap();
        let parts = model_parts(&p);
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0], ["tok_embeddings", "layers.0", "layers.1"]);
        assert_eq!(parts[3], ["layers.6", "layers.7", "norm", "output"]);
        let layers: usize = parts
            .iter()
            .map(|p| p.iter().filter(|m| m.starts_with("layers.")).count())
            .sum();
        assert_eq!(layers, 8);
        assert_eq!(
            value(&j, "parallelism", "pipeline_parallel_schedule"),
            Some(&json!("Interleaved1F1B"))
        );
        // Every micro-batch of the step in one schedule: 16 sequences on the one dp rank.
        assert_eq!(value(&j, "training", "local_batch_size"), Some(&json!(16)));
        assert_eq!(
            value(&j, "parallelism", "pipeline_parallel_microbatch_size"),
            Some(&json!(1))
        );
    }

    #[test]
    fn uneven_ends_are_listed_as_the_plan_splits_them() {
        let p = plan(
            LLAMA,
            "",
            "tp = 1, pp = 2, dp = 1, micro_batch = 1, first_stage_layers = 3",
            2,
        );
        let parts = model_parts(&p);
        assert_eq!(parts[0].len(), 1 + 3);
        assert_eq!(parts[1].len(), 5 + 2);
        assert_eq!(parts[1][0], "layers.3");
    }

    #[test]
    fn what_llama_3_cannot_run_is_refused() {
        let gpt = "layers = 4, hidden = 256, heads = 4, vocab = 1000, seq_len = 256, mlp = gelu, \
                   norm = layernorm, position = learned, bias = true";
        let p = plan(gpt, "", "tp = 1, pp = 1, dp = 1", 1);
        let e = job(&p, Target::Torchtitan, "j", &run(&p, None)).unwrap_err();
        // Located at the first attribute to change.
        assert!(
            matches!(&e, EmitError::Unsupported { at: Some((b, a)), .. } if b == "model" && a == "mlp"),
            "{e:?}"
        );
        let s = e.to_string();
        for need in [
            "mlp = swiglu",
            "norm = rmsnorm",
            "position = rope",
            "bias = false",
        ] {
            assert!(s.contains(need), "{s}");
        }
        let tied = LLAMA.replace("tied_embeddings = false", "tied_embeddings = true");
        // One GPU keeps the tie; FSDP over 2 ranks would break it.
        let p = plan(&tied, "", "tp = 1, pp = 1, dp = 1", 1);
        assert!(job(&p, Target::Torchtitan, "j", &run(&p, None)).is_ok());
        let p = plan(&tied, "", "tp = 1, pp = 1, dp = 2, zero = 3", 2);
        let e = job(&p, Target::Torchtitan, "j", &run(&p, None)).unwrap_err();
        assert!(e.to_string().contains("FSDP"), "{e}");
        let p = plan(&tied, "", "tp = 1, pp = 1, dp = 2, zero = 0", 2);
        assert!(job(&p, Target::Torchtitan, "j", &run(&p, None)).is_ok());
        let p = plan(LLAMA, "", "tp = 1, pp = 1, dp = 1", 1);
        let p = Plan {
            train: planc_compiler::plan::Train {
                precision: Precision::Fp16,
                ..p.train.clone()
            },
            ..p
        };
        assert!(job(&p, Target::Torchtitan, "j", &run(&p, None)).is_err());
    }

    #[test]
    fn the_schedule_and_its_constants_are_the_plans() {
        let p = plan(
            LLAMA,
            "lr = 2e-5, min_lr = 2e-6, warmup_steps = 100, steps = 1000, weight_decay = 0.01, \
             grad_clip = 0.5, seed = 7",
            "tp = 1, pp = 1, dp = 1",
            1,
        );
        let j = job(&p, Target::Torchtitan, "j", &run(&p, Some("/ck"))).unwrap();
        assert_eq!(value(&j, "optimizer", "lr"), Some(&json!(2e-5)));
        assert_eq!(value(&j, "optimizer", "weight_decay"), Some(&json!(0.01)));
        assert_eq!(value(&j, "lr_scheduler", "warmup_steps"), Some(&json!(100)));
        assert_eq!(
            value(&j, "lr_scheduler", "decay_type"),
            Some(&json!("cosine"))
        );
        let f = value(&j, "lr_scheduler", "min_lr_factor")
            .and_then(Value::as_f64)
            .unwrap();
        assert!((f - 0.1).abs() < 1e-12, "{f}");
        assert_eq!(value(&j, "training", "steps"), Some(&json!(1000)));
        assert_eq!(value(&j, "training", "max_norm"), Some(&json!(0.5)));
        assert_eq!(value(&j, "debug", "seed"), Some(&json!(7)));
        assert_eq!(value(&j, "checkpoint", "folder"), Some(&json!("/ck")));
        assert_eq!(value(&j, "job", "dump_folder"), Some(&json!(".")));
    }
}
