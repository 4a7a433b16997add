//! torchtitan's job TOML (0.2.x, `torchtitan/config/job_config.py`, as `torchtitan_v02.rs`
//! writes it) and the `--section.option value` flags of its launch, which override the file.
//! Data-parallel degrees become `dp` and `zero` (FSDP shards: zero 2 or 3 by
//! `fsdp_reshard_after_forward`; replicas alone: DDP); a model named by torchtitan's flavor
//! becomes planc's preset, or the flavor module beside the file gives its dimensions.

use super::draft::{Origin, V};
use super::flags::{Kind, To};
use super::{Ctx, Format, ImportError, Input};

const LOGGING: &str = "logging and monitoring, not the step";
const DATA: &str = "the dataset and tokenizer: planc prices the step, whatever the data";
const TUNING: &str = "an implementation choice planc does not price";

const TABLE: &[(&str, To)] = &[
    ("job.description", To::Special("description")),
    ("job.config_file", To::Special("config_file")),
    (
        "job.dump_folder",
        To::Skip("where torchtitan writes its outputs"),
    ),
    ("job.print_args", To::Skip(LOGGING)),
    ("job.custom_config_module", To::Skip(TUNING)),
    ("model.name", To::Special("model_name")),
    ("model.flavor", To::Special("flavor")),
    ("model.converters", To::Special("converters")),
    ("model.hf_assets_path", To::Skip(DATA)),
    ("model.tokenizer_path", To::Skip(DATA)),
    ("model.print_after_conversion", To::Skip(LOGGING)),
    ("optimizer.name", To::Special("optimizer")),
    ("optimizer.lr", To::Attr("train", "lr", Kind::Float)),
    (
        "optimizer.beta1",
        To::Attr("train", "adam_beta1", Kind::Float),
    ),
    (
        "optimizer.beta2",
        To::Attr("train", "adam_beta2", Kind::Float),
    ),
    ("optimizer.eps", To::Attr("train", "adam_eps", Kind::Float)),
    (
        "optimizer.weight_decay",
        To::Attr("train", "weight_decay", Kind::Float),
    ),
    ("optimizer.implementation", To::Skip(TUNING)),
    ("optimizer.early_step_in_backward", To::Skip(TUNING)),
    (
        "lr_scheduler.warmup_steps",
        To::Attr("train", "warmup_steps", Kind::Int),
    ),
    ("lr_scheduler.decay_ratio", To::Special("decay_ratio")),
    ("lr_scheduler.decay_type", To::Special("decay_type")),
    ("lr_scheduler.min_lr_factor", To::Special("min_lr_factor")),
    ("lr_scheduler.lr_min", To::Special("min_lr_factor")),
    ("training.local_batch_size", To::Special("local_batch")),
    ("training.batch_size", To::Special("local_batch")),
    ("training.global_batch_size", To::Special("global_batch")),
    ("training.seq_len", To::Attr("model", "seq_len", Kind::Int)),
    ("training.max_norm", To::Special("max_norm")),
    ("training.steps", To::Attr("train", "steps", Kind::Int)),
    (
        "training.warmup_steps",
        To::Attr("train", "warmup_steps", Kind::Int),
    ),
    ("training.mixed_precision_param", To::Special("param_dtype")),
    (
        "training.mixed_precision_reduce",
        To::Special("reduce_dtype"),
    ),
    (
        "training.dtype",
        To::Skip("master weights' type: planc keeps fp32 master weights and optimizer state"),
    ),
    ("training.enable_cpu_offload", To::Special("cpu_offload")),
    ("training.seed", To::Attr("train", "seed", Kind::Int)),
    ("training.dataset", To::Skip(DATA)),
    ("training.dataset_path", To::Skip(DATA)),
    ("training.gc_freq", To::Skip(TUNING)),
    ("training.deterministic", To::Skip(TUNING)),
    ("training.compile", To::Skip("planc prices the eager step")),
    (
        "training.data_parallel_replicate_degree",
        To::Special("replicate"),
    ),
    ("training.data_parallel_shard_degree", To::Special("shard")),
    (
        "training.tensor_parallel_degree",
        To::Attr("parallel", "tp", Kind::Int),
    ),
    (
        "parallelism.data_parallel_replicate_degree",
        To::Special("replicate"),
    ),
    (
        "parallelism.data_parallel_shard_degree",
        To::Special("shard"),
    ),
    (
        "parallelism.fsdp_reshard_after_forward",
        To::Special("reshard"),
    ),
    (
        "parallelism.tensor_parallel_degree",
        To::Attr("parallel", "tp", Kind::Int),
    ),
    (
        "parallelism.pipeline_parallel_degree",
        To::Attr("parallel", "pp", Kind::Int),
    ),
    (
        "parallelism.pipeline_parallel_schedule",
        To::Special("schedule"),
    ),
    (
        "parallelism.pipeline_parallel_microbatch_size",
        To::Attr("parallel", "micro_batch", Kind::Int),
    ),
    (
        "parallelism.module_fqns_per_model_part",
        To::Special("parts"),
    ),
    (
        "parallelism.pipeline_parallel_layers_per_stage",
        To::Skip("planc splits layers by first_stage_layers, last_stage_layers and vpp"),
    ),
    (
        "parallelism.context_parallel_degree",
        To::Attr("parallel", "cp", Kind::Int),
    ),
    (
        "parallelism.expert_parallel_degree",
        To::Attr("parallel", "ep", Kind::Int),
    ),
    ("parallelism.disable_loss_parallel", To::Skip(TUNING)),
    ("parallelism.enable_async_tensor_parallel", To::Skip(TUNING)),
    ("parallelism.enable_compiled_autograd", To::Skip(TUNING)),
    (
        "parallelism.context_parallel_rotate_method",
        To::Skip(TUNING),
    ),
    (
        "parallelism.pipeline_parallel_split_points",
        To::Skip("planc splits layers by first_stage_layers, last_stage_layers and vpp"),
    ),
    ("activation_checkpoint.mode", To::Special("ac_mode")),
    (
        "activation_checkpoint.selective_ac_option",
        To::Special("ac_option"),
    ),
    (
        "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns",
        To::Skip(TUNING),
    ),
    ("checkpoint.enable", To::Special("ckpt_enable")),
    ("checkpoint.enable_checkpoint", To::Special("ckpt_enable")),
    ("checkpoint.folder", To::Special("ckpt_folder")),
    (
        "checkpoint.interval",
        To::Skip("planc's launch derives it (from the steps)"),
    ),
    (
        "checkpoint.*",
        To::Skip("the checkpoint format, not the step"),
    ),
    ("metrics.*", To::Skip(LOGGING)),
    ("profiling.*", To::Skip(LOGGING)),
    (
        "comm.*",
        To::Skip("collective timeouts and tracing, not the step"),
    ),
    ("compile.enable", To::Special("compile")),
    ("compile.*", To::Skip("planc prices the eager step")),
    (
        "float8.*",
        To::Skip("fp8 details: train.precision = fp8 prices it"),
    ),
    ("mx.*", To::Skip("MX formats: planc prices bf16 and fp8")),
    ("memory_estimation.*", To::Skip(TUNING)),
    ("experimental.custom_import", To::Special("custom_import")),
    ("experimental.*", To::Skip(TUNING)),
    ("fault_tolerance.*", To::Skip(TUNING)),
    (
        "validation.*",
        To::Skip("evaluation: planc plans no evaluation"),
    ),
    ("debug.seed", To::Attr("train", "seed", Kind::Int)),
    ("debug.*", To::Skip(TUNING)),
];

fn lookup(path: &str) -> Option<&'static To> {
    TABLE
        .iter()
        .find(|(k, _)| *k == path)
        .or_else(|| {
            TABLE.iter().find(|(k, _)| {
                k.strip_suffix(".*")
                    .is_some_and(|pre| path.split_once('.').is_some_and(|(s, _)| s == pre))
            })
        })
        .map(|(_, t)| t)
}

/// What a job's values become only together (degrees, batch sizes).
#[derive(Debug, Default)]
struct Titan {
    replicate: Option<(i64, Origin)>,
    shard: Option<(i64, Origin)>,
    reshard: Option<(String, Origin)>,
    local_batch: Option<(u64, Origin)>,
    global_batch: Option<(i64, Origin)>,
    parts: Option<(usize, Vec<usize>, Origin)>,
    checkpoint: (Option<bool>, Option<(String, Origin)>),
}

pub fn read_toml(cx: &mut Ctx, input: &Input) -> Result<(), ImportError> {
    let v: toml::Value = toml::from_str(&input.text)
        .map_err(|e| ImportError::Invalid(input.name.clone(), format!("not TOML: {e}")))?;
    let mut entries = Vec::new();
    if let toml::Value::Table(t) = v {
        for (section, sv) in t {
            match sv {
                toml::Value::Table(keys) => {
                    let header = format!("[{section}]");
                    let start = input
                        .text
                        .lines()
                        .position(|l| l.trim() == header)
                        .unwrap_or(0);
                    for (k, kv) in keys {
                        let line = input
                            .text
                            .lines()
                            .enumerate()
                            .skip(start)
                            .find(|(_, l)| {
                                l.trim_start().starts_with(&format!("{k} "))
                                    || l.trim_start().starts_with(&format!("{k}="))
                            })
                            .map(|(i, _)| i + 1);
                        entries.push((
                            format!("{section}.{k}"),
                            kv,
                            Origin::new(&input.name, line, format!("{section}.{k}")),
                        ));
                    }
                }
                other => entries.push((
                    section.clone(),
                    other,
                    Origin::new(&input.name, None, section),
                )),
            }
        }
    }
    if !entries.iter().any(|e| lookup(&e.0).is_some()) {
        return Err(ImportError::Unknown(
            input.name.clone(),
            "a TOML file that is not a torchtitan job file".into(),
        ));
    }
    apply(cx, entries, input);
    Ok(())
}

/// The `--section.option value` flags of a torchtitan launch.
pub fn read_flags(cx: &mut Ctx, args: &[super::shell::Word], input: &Input) {
    let (given, loose) = super::flags::parse(args, &[]);
    for w in loose {
        cx.draft.unplaced(
            Origin::new(&input.name, Some(w.line), w.text.clone()),
            None,
            "a word that belongs to no flag",
        );
    }
    // The job file first: the flags override it.
    let mut entries = Vec::new();
    for g in given {
        let key = g.key.trim_start_matches('-').replace('-', "_");
        let from = Origin::new(&input.name, Some(g.line), g.key.clone());
        if g.unresolved {
            cx.draft.unplaced(
                from,
                g.joined(),
                "its value is only known when the script runs",
            );
            continue;
        }
        if key == "job.config_file" {
            if let Some(f) = g.value() {
                cx.follow(input, f, from, Format::Torchtitan);
            }
            continue;
        }
        let value = match g.values.as_slice() {
            [] => toml::Value::Boolean(true),
            [one] => parse_scalar(one),
            many => toml::Value::Array(many.iter().map(|s| parse_scalar(s)).collect()),
        };
        entries.push((key, value, from));
    }
    apply(cx, entries, input);
}

fn parse_scalar(s: &str) -> toml::Value {
    if let Ok(n) = s.parse::<i64>() {
        toml::Value::Integer(n)
    } else if let Ok(x) = s.parse::<f64>() {
        toml::Value::Float(x)
    } else if let Some(b) = super::flags::boolean(s)
        .filter(|_| s == "true" || s == "false" || s == "True" || s == "False")
    {
        toml::Value::Boolean(b)
    } else {
        toml::Value::String(s.to_string())
    }
}

fn text_of(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn apply(cx: &mut Ctx, entries: Vec<(String, toml::Value, Origin)>, input: &Input) {
    let mut t = Titan::default();
    for (path, value, from) in entries {
        let shown = Some(text_of(&value));
        let Some(to) = lookup(&path) else {
            cx.draft
                .unplaced(from, shown, "not a torchtitan option planc knows");
            continue;
        };
        match *to {
            To::Attr(b, a, kind) => match super::flags::typed(&text_of(&value), kind) {
                Some(x) => cx.draft.set(b, a, x, from),
                None => cx
                    .draft
                    .unplaced(from, shown, format!("not a value of {b}.{a}")),
            },
            To::Set(b, a, text) => cx.draft.set(b, a, super::flags::plan_value(text), from),
            To::Skip(why) => cx.draft.unplaced(from, shown, why),
            To::Special(name) => special(cx, &mut t, name, &value, from, input),
        }
    }
    degrees(cx, t);
    cx.draft.assume(
        "job",
        "framework",
        V::Ident("torchtitan".into()),
        Origin::new(&input.name, None, "torchtitan"),
        "a torchtitan job",
    );
}

fn special(
    cx: &mut Ctx,
    t: &mut Titan,
    name: &str,
    value: &toml::Value,
    from: Origin,
    input: &Input,
) {
    let s = text_of(value);
    let shown = Some(s.clone());
    let int = value.as_integer();
    let d = &mut cx.draft;
    match name {
        "description" => d.set("job", "name", V::Str(s), from),
        "config_file" => cx.follow(input, &s, from, Format::Torchtitan),
        "model_name" => {
            cx.pending.titan_model = Some((s, from));
        }
        "flavor" => cx.pending.titan_flavor = Some((s, from)),
        "converters" => {
            let list = value
                .as_array()
                .map(|a| a.iter().map(text_of).collect::<Vec<_>>())
                .unwrap_or_else(|| vec![s.clone()]);
            if list.iter().any(|c| c.contains("float8")) {
                d.set("train", "precision", V::Ident("fp8".into()), from);
            } else {
                d.unplaced(from, shown, "a model converter planc does not price");
            }
        }
        "optimizer" => match s.as_str() {
            "AdamW" => d.set("train", "optimizer", V::Ident("adamw".into()), from),
            "Adam" => d.set("train", "optimizer", V::Ident("adam".into()), from),
            _ => d.unplaced(from, shown, "planc prices Adam, AdamW and SGD"),
        },
        "decay_ratio" => match value.as_float().or(int.map(|n| n as f64)) {
            Some(0.0) => d.set("train", "lr_schedule", V::Ident("constant".into()), from),
            _ => d.unplaced(
                from,
                shown,
                "a stable phase before the decay (WSD): planc decays right after the warm-up",
            ),
        },
        "decay_type" => match s.as_str() {
            "cosine" => d.set("train", "lr_schedule", V::Ident("cosine".into()), from),
            _ => d.unplaced(
                from,
                shown,
                "planc's schedules are cosine and constant; the plan keeps cosine",
            ),
        },
        "min_lr_factor" => match value.as_float().or(int.map(|n| n as f64)) {
            Some(r) => cx.pending.min_lr_ratio = Some((r, from)),
            None => d.unplaced(from, shown, "not a fraction"),
        },
        "local_batch" => t.local_batch = int.map(|n| (n.max(0) as u64, from)),
        "global_batch" => t.global_batch = int.map(|n| (n, from)),
        "max_norm" => match value.as_float().or(int.map(|n| n as f64)) {
            // The emitted "no clipping" is f64::MAX.
            Some(x) if x >= 1e300 => d.set("train", "grad_clip", V::Float(0.0), from),
            Some(x) => d.set("train", "grad_clip", V::Float(x), from),
            None => d.unplaced(from, shown, "not a norm"),
        },
        "param_dtype" => match s.as_str() {
            "bfloat16" => d.set("train", "precision", V::Ident("bf16".into()), from),
            "float32" => d.set("train", "precision", V::Ident("fp32".into()), from),
            _ => d.unplaced(from, shown, "not bfloat16 or float32"),
        },
        "reduce_dtype" => match s.as_str() {
            "float32" => d.set("parallel", "reduce_dtype", V::Ident("fp32".into()), from),
            "bfloat16" => d.set("parallel", "reduce_dtype", V::Ident("bf16".into()), from),
            _ => d.unplaced(from, shown, "not bfloat16 or float32"),
        },
        "cpu_offload" => {
            if value.as_bool() == Some(true) {
                d.set("parallel", "offload", V::Ident("params".into()), from);
            } else {
                d.unplaced(from, shown, "off");
            }
        }
        "replicate" => t.replicate = int.map(|n| (n, from)),
        "shard" => t.shard = int.map(|n| (n, from)),
        "reshard" => t.reshard = Some((s, from)),
        "schedule" => match s.as_str() {
            "1F1B" => d.set("parallel", "schedule", V::Ident("1f1b".into()), from),
            "GPipe" => d.set("parallel", "schedule", V::Ident("gpipe".into()), from),
            "Interleaved1F1B" | "LoopedBFS" => {
                d.set("parallel", "schedule", V::Ident("interleaved".into()), from)
            }
            _ => d.unplaced(
                from,
                shown,
                "planc's schedules are gpipe, 1f1b, interleaved and zb_h1",
            ),
        },
        "parts" => match value.as_array() {
            Some(parts) => {
                let layers: Vec<usize> = parts
                    .iter()
                    .map(|p| {
                        p.as_array().map_or(0, |a| {
                            a.iter()
                                .filter(|m| m.as_str().is_some_and(|m| m.starts_with("layers.")))
                                .count()
                        })
                    })
                    .collect();
                t.parts = Some((parts.len(), layers, from));
            }
            None => d.unplaced(from, shown, "not a list of stages"),
        },
        "ac_mode" => match s.as_str() {
            "none" | "selective" | "full" => d.set("parallel", "recompute", V::Ident(s), from),
            _ => d.unplaced(from, shown, "planc recomputes none, selective or full"),
        },
        "ac_option" => match s.as_str() {
            "op" => d.unplaced(from, shown, "per operation, as planc's selective recompute"),
            _ => d.unplaced(
                from,
                shown,
                "every n-th layer checkpointed: planc's selective recompute is per operation",
            ),
        },
        "ckpt_enable" => t.checkpoint.0 = value.as_bool(),
        "ckpt_folder" => t.checkpoint.1 = Some((s, from)),
        "compile" => d.unplaced(from, shown, "planc prices the eager step"),
        "custom_import" => cx.follow(
            input,
            &format!("{}.py", s.replace('.', "/")),
            from,
            Format::PythonModel,
        ),
        _ => d.unplaced(from, shown, "planc has no attribute for it"),
    }
}

/// dp and zero from the data-parallel degrees; the batch; the pipeline's split.
fn degrees(cx: &mut Ctx, t: Titan) {
    let d = &mut cx.draft;
    let (replicate, shard) = (
        t.replicate.as_ref().map_or(1, |r| r.0),
        t.shard.as_ref().map_or(-1, |s| s.0),
    );
    let dp_from = t.shard.clone().or(t.replicate.clone()).map(|x| x.1);
    let fsdp = shard != 1;
    if let Some(o) = dp_from.clone() {
        if shard >= 1 && replicate >= 1 {
            d.set(
                "parallel",
                "dp",
                V::Int((replicate * shard) as u64),
                o.clone(),
            );
        }
        if fsdp {
            // FSDP2 reshards after forward by default except for the last stage of a
            // pipeline; `never` keeps the parameters gathered (ZeRO-2).
            let never = t.reshard.as_ref().is_some_and(|r| r.0 == "never");
            let o = t.reshard.clone().map_or(o.clone(), |r| r.1);
            d.set("parallel", "zero", V::Int(if never { 2 } else { 3 }), o);
            if replicate > 1 {
                d.note("parallel.zero: torchtitan's HSDP (replicas of FSDP shards) is priced as FSDP over the whole dp");
            }
        } else {
            d.set("parallel", "zero", V::Int(0), o);
        }
    } else if let Some((r, o)) = t.reshard {
        d.unplaced(
            o,
            Some(r),
            "without data-parallel degrees: torchtitan's default FSDP over the remaining GPUs",
        );
    }
    let pp = d.u64("parallel", "pp").unwrap_or(1);
    if let Some((n, layers, o)) = t.parts {
        if pp > 0 && (n as u64).is_multiple_of(pp) {
            let vpp = n as u64 / pp;
            if vpp > 1 {
                d.set("parallel", "vpp", V::Int(vpp), o.clone());
            }
            // Stage r holds parts r, r + pp, …: its layers are theirs.
            let stage = |r: usize| {
                (0..vpp as usize)
                    .map(|c| layers.get(c * pp as usize + r).copied().unwrap_or(0))
                    .sum::<usize>()
            };
            let (first, last) = (stage(0), stage(pp as usize - 1));
            let mid: Vec<usize> = (1..(pp as usize).saturating_sub(1)).map(stage).collect();
            let even = mid.first().copied();
            if pp == 2 && first != last {
                d.set(
                    "parallel",
                    "first_stage_layers",
                    V::Int(first as u64),
                    o.clone(),
                );
                d.set("parallel", "last_stage_layers", V::Int(last as u64), o);
            } else if pp > 2 && mid.iter().all(|m| Some(*m) == even) {
                if even != Some(first) {
                    d.set(
                        "parallel",
                        "first_stage_layers",
                        V::Int(first as u64),
                        o.clone(),
                    );
                }
                if even != Some(last) {
                    d.set("parallel", "last_stage_layers", V::Int(last as u64), o);
                }
            } else if pp > 2 {
                d.unplaced(
                    o,
                    None,
                    "middle stages of different sizes: planc's middle stages are even",
                );
            }
        } else {
            d.unplaced(
                o,
                None,
                "model parts that are not a multiple of the pipeline degree",
            );
        }
    }
    // Without a pipeline torchtitan accumulates local batches; with one, the local batch is
    // split into pipeline micro-batches.
    if let Some((lb, o)) = t.local_batch {
        if pp <= 1 {
            d.set("parallel", "micro_batch", V::Int(lb), o.clone());
        }
        if t.global_batch.as_ref().is_none_or(|g| g.0 <= 0) {
            cx.pending.titan_local_batch = Some((lb, o));
        } else {
            d.unplaced(
                o,
                Some(lb.to_string()),
                "the local batch: the global batch and micro-batch say it",
            );
        }
    }
    if let Some((g, o)) = t.global_batch {
        if g > 0 {
            d.set("train", "global_batch", V::Int(g as u64), o);
        } else {
            d.unplaced(o, Some(g.to_string()), "the local batch × dp");
        }
    }
    match t.checkpoint {
        (Some(true), Some((f, o))) => d.set("job", "checkpoint_dir", V::Str(f), o),
        (Some(true), None) => d.note("checkpoint.enable: torchtitan saves under its dump folder's checkpoint/; the plan names no checkpoint_dir"),
        (_, Some((f, o))) => d.unplaced(o, Some(f), "checkpoints are off (checkpoint.enable)"),
        _ => {}
    }
}

/// torchtitan's model and flavor as planc's preset, when the dimensions are not given;
/// sequence parallelism with tensor parallelism, as torchtitan always runs it.
pub fn finish(cx: &mut Ctx) {
    if let Some(file) = cx.pending.titan.clone() {
        let from = |k: &str| Origin::new(&file, None, format!("torchtitan's default without {k}"));
        let d = &mut cx.draft;
        d.assume(
            "train",
            "precision",
            V::Ident("bf16".into()),
            from("training.mixed_precision_param"),
            "torchtitan's default, bfloat16 parameters under FSDP",
        );
        d.assume(
            "train",
            "warmup_steps",
            V::Int(200),
            from("lr_scheduler.warmup_steps"),
            "torchtitan's default",
        );
        if cx.pending.min_lr_ratio.is_none() {
            d.assume(
                "train",
                "min_lr",
                V::Float(0.0),
                from("lr_scheduler.min_lr_factor"),
                "torchtitan's default (min_lr_factor 0)",
            );
        }
        if !d.has("train", "lr_schedule") {
            d.note("train.lr_schedule: torchtitan decays linearly without lr_scheduler.decay_type, a schedule planc does not have; the plan keeps cosine");
        }
    }
    let d = &mut cx.draft;
    if d.get("job", "framework") == Some(&V::Ident("torchtitan".into()))
        && d.u64("parallel", "tp").unwrap_or(1) > 1
    {
        let from = d
            .origin("parallel", "tp")
            .cloned()
            .unwrap_or_else(|| Origin::new("torchtitan", None, "tensor_parallel_degree"));
        d.assume(
            "parallel",
            "sequence_parallel",
            V::Bool(true),
            from,
            "torchtitan runs tensor parallelism with sequence parallelism",
        );
    }
    model(cx);
}

fn model(cx: &mut Ctx) {
    let name = cx.pending.titan_model.take();
    let flavor = cx.pending.titan_flavor.take();
    let d = &mut cx.draft;
    let given = d.has("model", "layers") && d.has("model", "hidden");
    let Some((n, no)) = name else {
        if let Some((f, o)) = flavor {
            d.unplaced(o, Some(f), "a flavor without a model name");
        }
        return;
    };
    let fl = flavor;
    let f = fl.as_ref().map(|x| x.0.clone()).unwrap_or_default();
    if given {
        d.unplaced(no, Some(n), "the flavor module gives the dimensions");
        if let Some((f, o)) = fl {
            d.unplaced(o, Some(f), "the flavor module gives the dimensions");
        }
        return;
    }
    let preset = match (n.as_str(), f.to_ascii_uppercase().as_str()) {
        ("llama3", "8B") => Some("llama3-8b"),
        ("llama3", "70B") => Some("llama3-70b"),
        ("llama3", "405B") => Some("llama3-405b"),
        ("qwen3", "32B") => Some("qwen3-32b"),
        _ => None,
    };
    match preset {
        Some(p) => {
            let o = fl.map(|x| x.1).unwrap_or(no.clone());
            d.set("model", "preset", V::Str(p.into()), o);
            d.unplaced(no, Some(n), "with its flavor, planc's preset");
            d.model_name.get_or_insert_with(|| super::draft::ident(p));
        }
        None => {
            d.unplaced(no, Some(format!("{n} {f}")), "a torchtitan model and flavor planc has no preset of: pass the model's config.json to planc import");
        }
    }
}
