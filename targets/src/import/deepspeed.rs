//! DeepSpeed's JSON config (`deepspeed/runtime/config.py`, `zero/config.py`,
//! `lr_schedules.py`) and its hostfile (`host slots=N`). The config holds the batch sizes,
//! ZeRO, offload, precision, optimizer and schedule; the model lives in the training script,
//! and the cluster in the hostfile or the launch.

use serde_json::Value;

use super::cluster::Hint;
use super::draft::{Origin, V};
use super::finish::DsDefaults;
use super::flags::{Kind, To};
use super::launch::Means;
use super::{Ctx, ImportError, Input};

const TUNING: &str = "a DeepSpeed tuning knob planc does not price";
const LOGGING: &str = "logging and monitoring, not the step";

/// Keys by dotted path; `x.*` covers every key under `x` not named before it.
const TABLE: &[(&str, To)] = &[
    (
        "train_batch_size",
        To::Attr("train", "global_batch", Kind::Int),
    ),
    (
        "train_micro_batch_size_per_gpu",
        To::Attr("parallel", "micro_batch", Kind::Int),
    ),
    ("gradient_accumulation_steps", To::Special("accum")),
    (
        "gradient_clipping",
        To::Attr("train", "grad_clip", Kind::Float),
    ),
    (
        "zero_optimization.stage",
        To::Attr("parallel", "zero", Kind::Int),
    ),
    (
        "zero_optimization.offload_optimizer.device",
        To::Special("offload_optimizer"),
    ),
    (
        "zero_optimization.offload_param.device",
        To::Special("offload_param"),
    ),
    ("zero_optimization.cpu_offload", To::Special("cpu_offload")),
    (
        "zero_optimization.cpu_offload_params",
        To::Special("cpu_offload_params"),
    ),
    (
        "zero_optimization.overlap_comm",
        To::Special("overlap_comm"),
    ),
    (
        "zero_optimization.offload_optimizer.*",
        To::Skip("offload detail: planc prices the optimizer in host memory"),
    ),
    (
        "zero_optimization.offload_param.*",
        To::Skip("offload detail: planc prices the parameters in host memory"),
    ),
    ("zero_optimization.*", To::Skip(TUNING)),
    ("bf16.enabled", To::Special("bf16")),
    ("fp16.enabled", To::Special("fp16")),
    ("bf16.*", To::Skip("numerics of the precision planc prices")),
    (
        "fp16.*",
        To::Skip("loss scaling, numerics of the precision planc prices"),
    ),
    (
        "amp.*",
        To::Skip("Apex AMP: planc prices the precision of bf16/fp16"),
    ),
    ("optimizer.type", To::Special("optimizer")),
    ("optimizer.params.lr", To::Attr("train", "lr", Kind::Float)),
    ("optimizer.params.betas", To::Special("betas")),
    (
        "optimizer.params.eps",
        To::Attr("train", "adam_eps", Kind::Float),
    ),
    (
        "optimizer.params.weight_decay",
        To::Attr("train", "weight_decay", Kind::Float),
    ),
    ("optimizer.params.adam_w_mode", To::Special("adam_w_mode")),
    (
        "optimizer.params.*",
        To::Skip("an optimizer option planc's train block does not hold"),
    ),
    ("scheduler.type", To::Special("scheduler")),
    ("scheduler.params.*", To::Special("scheduler_param")),
    (
        "tensor_parallel.autotp_size",
        To::Attr("parallel", "tp", Kind::Int),
    ),
    (
        "tensor_parallel.tp_size",
        To::Attr("parallel", "tp", Kind::Int),
    ),
    ("tensor_parallel.*", To::Skip(TUNING)),
    (
        "activation_checkpointing.*",
        To::Special("activation_checkpointing"),
    ),
    ("data_types.grad_accum_dtype", To::Special("grad_dtype")),
    ("communication_data_type", To::Special("reduce_dtype")),
    (
        "steps_per_print",
        To::Skip("planc's launch derives it (from the steps)"),
    ),
    ("wall_clock_breakdown", To::Skip(LOGGING)),
    ("flops_profiler.*", To::Skip(LOGGING)),
    ("tensorboard.*", To::Skip(LOGGING)),
    ("wandb.*", To::Skip(LOGGING)),
    ("csv_monitor.*", To::Skip(LOGGING)),
    ("comms_logger.*", To::Skip(LOGGING)),
    ("memory_breakdown", To::Skip(LOGGING)),
    ("dump_state", To::Skip(LOGGING)),
    ("prescale_gradients", To::Skip(TUNING)),
    ("gradient_predivide_factor", To::Skip(TUNING)),
    ("sparse_gradients", To::Skip(TUNING)),
    ("zero_allow_untested_optimizer", To::Skip(TUNING)),
    ("zero_force_ds_cpu_optimizer", To::Skip(TUNING)),
    (
        "communication.*",
        To::Skip("not a DeepSpeed config section (DeepSpeed ignores it)"),
    ),
    ("aio.*", To::Skip(TUNING)),
    (
        "checkpoint.*",
        To::Skip("the checkpoint format, not the step"),
    ),
    ("elasticity.*", To::Skip(TUNING)),
    ("compile.*", To::Skip("planc prices the eager step")),
];

fn lookup(path: &str) -> Option<&'static To> {
    TABLE
        .iter()
        .find(|(k, _)| *k == path)
        .or_else(|| {
            TABLE.iter().find(|(k, _)| {
                k.strip_suffix(".*")
                    .is_some_and(|pre| path.starts_with(pre) && path[pre.len()..].starts_with('.'))
            })
        })
        .map(|(_, t)| t)
}

pub fn is_config(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    [
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "zero_optimization",
        "gradient_accumulation_steps",
        "fp16",
        "bf16",
    ]
    .iter()
    .any(|k| o.contains_key(*k))
}

/// Leaves of a JSON object by dotted path; arrays are leaves.
fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&p, v, out);
            }
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

/// JSON text, the line of each top-level key where it can be found.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let last = key.rsplit('.').next()?;
    let needle = format!("\"{last}\"");
    text.lines()
        .position(|l| l.contains(&needle))
        .map(|i| i + 1)
}

pub fn read(cx: &mut Ctx, input: &Input) -> Result<(), ImportError> {
    let v: Value = serde_json::from_str(input.text.trim_start_matches('\u{feff}'))
        .map_err(|e| ImportError::Invalid(input.name.clone(), format!("not JSON: {e}")))?;
    read_value(cx, &v, &input.name, &input.text);
    Ok(())
}

pub fn read_value(cx: &mut Ctx, v: &Value, file: &str, text: &str) {
    let mut all = Vec::new();
    leaves("", v, &mut all);
    let mut ds = DsDefaults {
        file: file.to_string(),
        ..DsDefaults::default()
    };
    let mut sched: Option<String> = None;
    let mut sched_params: Vec<(String, Value, Origin)> = Vec::new();
    let mut ac = false;
    for (path, value) in all {
        let from = Origin::new(file, line_of(text, &path), path.clone());
        let shown = Some(compact(&value));
        if value.as_str() == Some("auto") {
            cx.draft.unplaced(from, shown, "\"auto\": the Hugging Face Trainer fills it from its own arguments (pass them too)");
            continue;
        }
        let Some(to) = lookup(&path) else {
            cx.draft
                .unplaced(from, shown, "not a DeepSpeed key planc knows");
            continue;
        };
        match *to {
            To::Attr(b, a, kind) => {
                match scalar(&value).and_then(|s| super::flags::typed(&s, kind)) {
                    Some(x) => cx.draft.set(b, a, x, from),
                    None => cx
                        .draft
                        .unplaced(from, shown, format!("not a value of {b}.{a}")),
                }
            }
            To::Set(b, a, t) => cx.draft.set(b, a, super::flags::plan_value(t), from),
            To::Skip(why) => cx.draft.unplaced(from, shown, why),
            To::Special("scheduler") => sched = value.as_str().map(str::to_string),
            To::Special("scheduler_param") => sched_params.push((
                path.trim_start_matches("scheduler.params.").to_string(),
                value,
                from,
            )),
            To::Special("activation_checkpointing") => {
                ac = true;
                cx.draft.unplaced(from, shown, "how DeepSpeed's checkpointing runs, once the model code calls it (the section is read as recompute = full)");
            }
            To::Special(name) => special(cx, &mut ds, name, &value, from),
        }
    }
    if ac {
        cx.draft.set(
            "parallel",
            "recompute",
            V::Ident("full".into()),
            Origin::new(
                file,
                line_of(text, "activation_checkpointing"),
                "activation_checkpointing",
            ),
        );
        cx.draft.note("parallel.recompute = full: DeepSpeed's activation checkpointing recomputes whole layers where the model code checkpoints them");
    }
    ds.scheduler = sched.is_some();
    if let Some(kind) = sched {
        scheduler(cx, &kind, sched_params, file, text);
    }
    cx.draft.assume(
        "job",
        "framework",
        V::Ident("deepspeed".into()),
        Origin::new(file, None, "DeepSpeed config"),
        "a DeepSpeed config",
    );
    cx.pending.deepspeed = Some(ds);
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn special(cx: &mut Ctx, ds: &mut DsDefaults, name: &str, value: &Value, from: Origin) {
    let shown = Some(compact(value));
    let d = &mut cx.draft;
    let on = value
        .as_bool()
        .or_else(|| value.as_str().and_then(super::flags::boolean));
    match name {
        "accum" => match value.as_u64() {
            Some(n) => super::finish::set_accum(cx, n, from),
            None => d.unplaced(from, shown, "not a count"),
        },
        "offload_optimizer" | "cpu_offload" => match (value.as_str(), on) {
            (Some("cpu" | "nvme"), _) | (None, Some(true)) => {
                if d.get("parallel", "offload") != Some(&V::Ident("params".into())) {
                    d.set("parallel", "offload", V::Ident("optimizer".into()), from);
                }
            }
            _ => d.unplaced(from, shown, "no offload"),
        },
        "offload_param" | "cpu_offload_params" => match (value.as_str(), on) {
            (Some("cpu" | "nvme"), _) | (None, Some(true)) => {
                d.set("parallel", "offload", V::Ident("params".into()), from)
            }
            _ => d.unplaced(from, shown, "no offload"),
        },
        "overlap_comm" => {
            ds.overlap = true;
            match on {
                Some(b) => d.set("parallel", "overlap_grad_reduce", V::Bool(b), from),
                None => d.unplaced(from, shown, "not a boolean"),
            }
        }
        "bf16" | "fp16" => {
            if on == Some(true) {
                ds.precision = true;
                d.set("train", "precision", V::Ident(name.into()), from);
            } else {
                d.unplaced(from, shown, "disabled");
            }
        }
        "optimizer" => {
            let t = value.as_str().unwrap_or("").to_ascii_lowercase();
            match t.as_str() {
                // DeepSpeed's Adam decouples weight decay unless adam_w_mode is false.
                "adam" | "fusedadam" | "cpuadam" | "deepspeedcpuadam" => {
                    d.set("train", "optimizer", V::Ident("adamw".into()), from)
                }
                "adamw" => d.set("train", "optimizer", V::Ident("adamw".into()), from),
                "sgd" => d.set("train", "optimizer", V::Ident("sgd".into()), from),
                _ => d.unplaced(
                    from,
                    shown,
                    "planc prices Adam, AdamW and SGD; the plan keeps its optimizer",
                ),
            }
        }
        "adam_w_mode" => {
            if on == Some(false) && d.get("train", "optimizer") == Some(&V::Ident("adamw".into())) {
                d.set("train", "optimizer", V::Ident("adam".into()), from);
            } else {
                d.unplaced(
                    from,
                    shown,
                    "AdamW's decoupled decay, as the optimizer says",
                );
            }
        }
        "betas" => match value
            .as_array()
            .map(|a| a.iter().map(Value::as_f64).collect::<Vec<_>>())
        {
            Some(b) if b.len() == 2 && b.iter().all(Option::is_some) => {
                d.set(
                    "train",
                    "adam_beta1",
                    V::Float(b[0].unwrap_or(0.9)),
                    Origin {
                        key: format!("{}[0]", from.key),
                        ..from.clone()
                    },
                );
                d.set(
                    "train",
                    "adam_beta2",
                    V::Float(b[1].unwrap_or(0.95)),
                    Origin {
                        key: format!("{}[1]", from.key),
                        ..from
                    },
                );
            }
            _ => d.unplaced(from, shown, "not two betas"),
        },
        "grad_dtype" | "reduce_dtype" => {
            let attr = if name == "grad_dtype" {
                "grad_dtype"
            } else {
                "reduce_dtype"
            };
            match value.as_str().map(str::to_ascii_lowercase).as_deref() {
                Some("fp32" | "float32" | "float") => {
                    d.set("parallel", attr, V::Ident("fp32".into()), from)
                }
                Some("bf16" | "bfloat16") => d.set("parallel", attr, V::Ident("bf16".into()), from),
                Some("fp16" | "float16" | "half") => {
                    d.set("parallel", attr, V::Ident("fp16".into()), from)
                }
                _ => d.unplaced(from, shown, "not fp32, bf16 or fp16"),
            }
        }
        _ => d.unplaced(from, shown, "planc has no attribute for it"),
    }
}

/// `scheduler`: WarmupLR (constant after a warm-up), WarmupCosineLR, WarmupDecayLR.
fn scheduler(
    cx: &mut Ctx,
    kind: &str,
    params: Vec<(String, Value, Origin)>,
    file: &str,
    text: &str,
) {
    let from = Origin::new(file, line_of(text, "scheduler.type"), "scheduler.type");
    let d = &mut cx.draft;
    let takes: &[&str] = match kind {
        "WarmupLR" => &[
            "warmup_min_lr",
            "warmup_max_lr",
            "warmup_num_steps",
            "warmup_type",
            "last_batch_iteration",
        ],
        "WarmupCosineLR" => &[
            "total_num_steps",
            "warmup_min_ratio",
            "warmup_num_steps",
            "cos_min_ratio",
            "warmup_type",
            "last_batch_iteration",
        ],
        "WarmupDecayLR" => &[
            "total_num_steps",
            "warmup_min_lr",
            "warmup_max_lr",
            "warmup_num_steps",
            "warmup_type",
            "last_batch_iteration",
        ],
        _ => {
            d.unplaced(
                from,
                Some(kind.to_string()),
                "planc's schedules are warm-up then cosine or constant",
            );
            for (_, v, o) in params {
                d.unplaced(o, Some(compact(&v)), format!("a parameter of {kind}"));
            }
            return;
        }
    };
    match kind {
        "WarmupLR" => d.set("train", "lr_schedule", V::Ident("constant".into()), from),
        "WarmupCosineLR" => d.set("train", "lr_schedule", V::Ident("cosine".into()), from),
        _ => d.unplaced(from, Some(kind.into()), "linear decay after the warm-up: planc's schedules are cosine and constant (the plan keeps cosine)"),
    }
    let get = |k: &str| params.iter().find(|p| p.0 == k).and_then(|p| p.1.as_f64());
    let full_rate_warmup = kind == "WarmupCosineLR" && get("warmup_min_ratio") == Some(1.0);
    for (k, v, o) in params.iter().cloned() {
        let shown = Some(compact(&v));
        if !takes.contains(&k.as_str()) {
            d.unplaced(
                o,
                shown,
                format!("{kind} takes no {k} (DeepSpeed's lr_schedules.py)"),
            );
            continue;
        }
        let x = v.as_f64();
        match (k.as_str(), x) {
            ("warmup_num_steps", Some(n)) if full_rate_warmup => d.unplaced(
                o,
                Some(n.to_string()),
                "a warm-up at the full rate (warmup_min_ratio 1): no warm-up",
            ),
            ("warmup_num_steps", Some(n)) => d.set("train", "warmup_steps", V::Int(n as u64), o),
            ("total_num_steps", Some(n)) => d.set("train", "steps", V::Int(n as u64), o),
            ("warmup_max_lr", Some(lr)) => d.set("train", "lr", V::Float(lr), o),
            ("cos_min_ratio", Some(r)) => cx.pending.min_lr_ratio = Some((r, o)),
            ("warmup_min_lr", Some(0.0)) | ("warmup_min_ratio", Some(0.0)) => {
                d.unplaced(o, shown, "warm-up from 0, as planc's")
            }
            ("warmup_min_ratio", Some(1.0)) => d.unplaced(o, shown, "no warm-up"),
            ("warmup_type", _) if v.as_str() == Some("linear") => {
                d.unplaced(o, shown, "linear warm-up, as planc's")
            }
            _ => d.unplaced(o, shown, "planc's warm-up is linear from 0"),
        }
    }
}

/// DeepSpeed's defaults where its config is silent.
pub fn defaults(cx: &mut Ctx) {
    let Some(ds) = cx.pending.deepspeed.clone() else {
        return;
    };
    let from = |k: &str| Origin::new(&ds.file, None, format!("DeepSpeed's default without {k}"));
    let d = &mut cx.draft;
    if !ds.precision {
        d.assume(
            "train",
            "precision",
            V::Ident("fp32".into()),
            from("bf16/fp16"),
            "DeepSpeed trains in fp32 unless bf16 or fp16 is enabled",
        );
    }
    let stage = d.u64("parallel", "zero").unwrap_or(0);
    if !ds.overlap && stage < 3 {
        d.assume("parallel", "overlap_grad_reduce", V::Bool(false), from("zero_optimization.overlap_comm"), "DeepSpeed reduces gradients after the backward pass unless overlap_comm is set (stages 0-2)");
    }
    if !ds.scheduler && !d.has("train", "lr_schedule") {
        d.assume("train", "lr_schedule", V::Ident("constant".into()), from("scheduler"), "DeepSpeed keeps the rate constant without a scheduler (the training script may set its own)");
    }
}

/// A hostfile's lines: `host slots=N`, comments with `#`.
pub fn is_hostfile(text: &str) -> bool {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    !lines.is_empty()
        && lines.iter().all(|l| {
            let mut w = l.split_whitespace();
            w.next().is_some() && w.all(|x| x.starts_with("slots="))
        })
        && lines.iter().any(|l| l.contains("slots="))
}

pub fn read_hostfile(cx: &mut Ctx, input: &Input) {
    let mut hosts = Vec::new();
    for (i, l) in input.text.lines().enumerate() {
        let l = l.split('#').next().unwrap_or("").trim();
        let mut w = l.split_whitespace();
        let Some(host) = w.next() else { continue };
        let slots = w
            .find_map(|x| x.strip_prefix("slots="))
            .and_then(super::flags::int);
        hosts.push((host.to_string(), slots, i + 1));
    }
    if hosts.is_empty() {
        return;
    }
    let from = |line: usize, key: &str| Origin::new(&input.name, Some(line), key.to_string());
    cx.pending.hints.push(Hint {
        what: Means::Nodes,
        value: hosts.len() as u64,
        rank: 6,
        from: from(hosts[0].2, "hosts"),
    });
    let slots: Vec<u64> = hosts.iter().filter_map(|h| h.1).collect();
    if let Some(&s) = slots.first() {
        if slots.iter().any(|&x| x != s) {
            cx.draft.note(format!("{}: hosts of different slot counts ({}); planc's cluster has one count a node, kept {s} (a mixed cluster takes `group` blocks: pass --cluster)", input.name, slots.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")));
        }
        cx.pending.hints.push(Hint {
            what: Means::GpusPerNode,
            value: s,
            rank: 6,
            from: from(hosts[0].2, "slots"),
        });
    }
}
