//! LLaMA-Factory's training arguments (`src/llamafactory/hparams/`: model, data, finetuning
//! arguments, and transformers' `Seq2SeqTrainingArguments`), from its YAML file
//! (`llamafactory-cli train x.yaml`) or as command-line flags (`src/train.py`, the older
//! `src/train_bash.py`). A `deepspeed:` file is read too. Hugging Face's defaults (linear
//! decay, β2 0.999, no weight decay, fp32) apply where the arguments are silent, and
//! LLaMA-Factory's own (`FinetuningArguments`: LoRA of rank 8 on every linear layer) for the
//! fine-tuning method, which becomes `train.method`.

use yaml_rust2::{Yaml, YamlLoader};

use super::draft::{Origin, V};
use super::flags::{Kind, To};
use super::{Ctx, Format, ImportError, Input};

const DATA: &str = "the dataset and its preprocessing: planc prices the step, whatever the data";
const EVAL: &str = "evaluation: planc plans no evaluation";
const LOGGING: &str = "logging, saving and run control: planc's launch derives them";
/// LLaMA-Factory's `finetuning_type` when the arguments do not say (`FinetuningArguments`).
const DEFAULT_METHOD: &str = "lora";
/// `freeze_trainable_layers`' default: the last two layers train.
const DEFAULT_TRAINABLE_LAYERS: i64 = 2;

const TABLE: &[(&str, To)] = &[
    ("model_name_or_path", To::Special("model")),
    ("stage", To::Special("stage")),
    ("finetuning_type", To::Special("method")),
    ("per_device_train_batch_size", To::Attr("parallel", "micro_batch", Kind::Int)),
    ("gradient_accumulation_steps", To::Special("accum")),
    ("cutoff_len", To::Attr("model", "seq_len", Kind::Int)),
    ("learning_rate", To::Attr("train", "lr", Kind::Float)),
    ("max_steps", To::Special("max_steps")),
    ("lr_scheduler_type", To::Special("scheduler")),
    ("warmup_steps", To::Attr("train", "warmup_steps", Kind::Int)),
    ("warmup_ratio", To::Special("warmup_ratio")),
    ("weight_decay", To::Attr("train", "weight_decay", Kind::Float)),
    ("max_grad_norm", To::Attr("train", "grad_clip", Kind::Float)),
    ("adam_beta1", To::Attr("train", "adam_beta1", Kind::Float)),
    ("adam_beta2", To::Attr("train", "adam_beta2", Kind::Float)),
    ("adam_epsilon", To::Attr("train", "adam_eps", Kind::Float)),
    ("seed", To::Attr("train", "seed", Kind::Int)),
    ("bf16", To::Special("bf16")),
    ("fp16", To::Special("fp16")),
    ("pure_bf16", To::Special("bf16")),
    ("optim", To::Special("optim")),
    ("deepspeed", To::Special("deepspeed")),
    ("output_dir", To::Attr("job", "checkpoint_dir", Kind::Str)),
    ("flash_attn", To::Special("flash_attn")),
    ("disable_gradient_checkpointing", To::Special("no_checkpointing")),
    ("gradient_checkpointing", To::Special("checkpointing")),
    ("num_train_epochs", To::Skip("epochs: planc counts steps (train.steps), and an epoch's steps depend on the dataset's size")),
    ("lora_rank", To::Special("method")),
    ("lora_alpha", To::Special("method")),
    ("lora_target", To::Special("method")),
    ("lora_dropout", To::Special("method")),
    ("additional_target", To::Special("method")),
    ("use_rslora", To::Special("method")),
    ("use_dora", To::Special("method")),
    ("freeze_trainable_layers", To::Special("method")),
    ("freeze_trainable_modules", To::Special("method")),
    ("freeze_extra_modules", To::Special("method")),
    ("quantization_bit", To::Skip("quantised weights (QLoRA): planc prices weights in the training precision")),
    ("do_train", To::Skip("the run trains: what planc prices")),
    ("template", To::Skip(DATA)),
    ("dataset", To::Skip(DATA)),
    ("dataset_dir", To::Skip(DATA)),
    ("max_samples", To::Skip(DATA)),
    ("overwrite_cache", To::Skip(DATA)),
    ("preprocessing_num_workers", To::Skip(DATA)),
    ("dataloader_num_workers", To::Skip(DATA)),
    ("packing", To::Skip(DATA)),
    ("streaming", To::Skip(DATA)),
    ("tokenized_path", To::Skip(DATA)),
    ("trust_remote_code", To::Skip(DATA)),
    ("cache_dir", To::Skip(DATA)),
    ("val_size", To::Skip(EVAL)),
    ("per_device_eval_batch_size", To::Skip(EVAL)),
    ("eval_strategy", To::Skip(EVAL)),
    ("evaluation_strategy", To::Skip(EVAL)),
    ("eval_steps", To::Skip(EVAL)),
    ("do_eval", To::Skip(EVAL)),
    ("load_best_model_at_end", To::Skip(EVAL)),
    ("logging_steps", To::Skip(LOGGING)),
    ("save_steps", To::Skip(LOGGING)),
    ("save_strategy", To::Skip(LOGGING)),
    ("save_total_limit", To::Skip(LOGGING)),
    ("save_only_model", To::Skip(LOGGING)),
    ("plot_loss", To::Skip(LOGGING)),
    ("overwrite_output_dir", To::Skip(LOGGING)),
    ("report_to", To::Skip(LOGGING)),
    ("run_name", To::Skip(LOGGING)),
    ("logging_dir", To::Skip(LOGGING)),
    ("resume_from_checkpoint", To::Skip(LOGGING)),
    ("ddp_timeout", To::Skip(LOGGING)),
    ("include_num_input_tokens_seen", To::Skip(LOGGING)),
];

pub fn read_yaml(cx: &mut Ctx, input: &Input) -> Result<(), ImportError> {
    let docs = YamlLoader::load_from_str(&input.text)
        .map_err(|e| ImportError::Invalid(input.name.clone(), format!("not YAML: {e}")))?;
    let Some(Yaml::Hash(h)) = docs.into_iter().next() else {
        return Err(ImportError::Unknown(
            input.name.clone(),
            "a YAML file that is not a mapping: planc reads LLaMA-Factory's arguments, and NeMo's and Megatron Bridge's configs (a `model` section of Megatron-Core's fields)".into(),
        ));
    };
    let mut entries = Vec::new();
    for (k, v) in h {
        let Some(k) = k.as_str().map(str::to_string) else {
            continue;
        };
        let line = input
            .text
            .lines()
            .position(|l| l.trim_start().starts_with(&format!("{k}:")))
            .map(|i| i + 1);
        entries.push((
            k.clone(),
            super::yaml::text(&v),
            Origin::new(&input.name, line, k),
        ));
    }
    if !entries.iter().any(|e| TABLE.iter().any(|t| t.0 == e.0)) {
        return Err(ImportError::Unknown(
            input.name.clone(),
            "a YAML file with none of LLaMA-Factory's arguments, and not a NeMo or Megatron Bridge config (no `model` section with `num_layers`, `hidden_size` or `tensor_model_parallel_size`)".into(),
        ));
    }
    apply(cx, entries, input, true);
    Ok(())
}

/// Flags of a LLaMA-Factory command line (`--key value`, `--key` alone for true).
pub fn read_flags(cx: &mut Ctx, args: &[super::shell::Word], input: &Input) {
    let (given, loose) = super::flags::parse(args, &[]);
    let mut entries = Vec::new();
    for g in given {
        let key = g.key.trim_start_matches('-').replace('-', "_");
        let value = if g.values.is_empty() {
            Some("true".to_string())
        } else {
            g.joined()
        };
        let from = Origin::new(&input.name, Some(g.line), g.key.clone());
        if g.unresolved {
            cx.draft
                .unplaced(from, value, "its value is only known when the script runs");
            continue;
        }
        entries.push((key, value, from));
    }
    for w in loose {
        if w.text.ends_with(".yaml") || w.text.ends_with(".yml") {
            cx.follow(
                input,
                &w.text,
                Origin::new(&input.name, Some(w.line), "config file"),
                Format::LlamaFactory,
            );
        } else if w.text != "train" {
            cx.draft.unplaced(
                Origin::new(&input.name, Some(w.line), w.text.clone()),
                None,
                "a word that belongs to no flag",
            );
        }
    }
    apply(cx, entries, input, false);
}

/// `yaml`: the arguments are a LLaMA-Factory YAML file (command-line flags are
/// LLaMA-Factory's only where one of its own arguments says so, not only transformers').
fn apply(cx: &mut Ctx, entries: Vec<(String, Option<String>, Origin)>, input: &Input, yaml: bool) {
    let llamafactory = yaml
        || entries.iter().any(|(k, _, _)| {
            matches!(k.as_str(), "stage" | "finetuning_type" | "template")
                || k.starts_with("lora_")
                || k.starts_with("freeze_")
        });
    let mut checkpointing = true;
    let mut lr_schedule_seen = false;
    // The fine-tuning method's arguments, read once all are known (`method`).
    let mut method_args: Vec<(String, String, Origin)> = Vec::new();
    for (k, v, from) in entries {
        let Some((_, to)) = TABLE.iter().find(|t| t.0 == k) else {
            cx.draft
                .unplaced(from, v, "not an argument of LLaMA-Factory's planc reads");
            continue;
        };
        let Some(text) = v.clone() else {
            cx.draft.unplaced(from, v, "unset");
            continue;
        };
        let on = super::flags::boolean(&text);
        let d = &mut cx.draft;
        match *to {
            To::Attr(b, a, kind) => match super::flags::typed(&text, kind) {
                Some(x) => d.set(b, a, x, from),
                None => d.unplaced(from, v, format!("not a value of {b}.{a}")),
            },
            To::Set(b, a, t) => d.set(b, a, super::flags::plan_value(t), from),
            To::Skip(why) => d.unplaced(from, v, why),
            To::Special("model") => {
                if d.has("model", "layers") {
                    d.unplaced(from, v, "the model's config.json, given too, describes it");
                } else {
                    super::hf::model_name(cx, &text, from);
                }
            }
            To::Special("stage") => match text.as_str() {
                "pt" | "sft" => d.unplaced(from, v, "pre-training or supervised fine-tuning: one language-model step, as planc prices it"),
                _ => d.unplaced(from, v, "planc prices one language-model step; this stage runs more models (a reward or reference model)"),
            },
            To::Special("method") => method_args.push((k.clone(), text, from)),
            To::Special("accum") => match super::flags::int(&text) {
                Some(n) => super::finish::set_accum(cx, n, from),
                None => d.unplaced(from, v, "not a count"),
            },
            To::Special("max_steps") => match text.parse::<i64>() {
                Ok(n) if n > 0 => d.set("train", "steps", V::Int(n as u64), from),
                _ => d.unplaced(from, v, "no step limit: the epochs decide"),
            },
            To::Special("scheduler") => {
                lr_schedule_seen = true;
                match text.as_str() {
                    "cosine" | "cosine_with_min_lr" => d.set("train", "lr_schedule", V::Ident("cosine".into()), from),
                    "constant" | "constant_with_warmup" => d.set("train", "lr_schedule", V::Ident("constant".into()), from),
                    _ => d.unplaced(from, v, "planc's schedules are cosine and constant; the plan keeps cosine"),
                }
            }
            To::Special("warmup_ratio") => match text.parse::<f64>() {
                Ok(x) if x > 0.0 => cx.pending.warmup_fraction = Some((x, from)),
                _ => d.unplaced(from, v, "no warm-up"),
            },
            To::Special(p @ ("bf16" | "fp16")) => {
                if on == Some(true) {
                    d.set("train", "precision", V::Ident(p.into()), from);
                } else {
                    d.unplaced(from, v, "off");
                }
            }
            To::Special("optim") => match text.as_str() {
                t if t.starts_with("adamw") && !t.contains("8bit") && !t.contains("anyprecision") => d.set("train", "optimizer", V::Ident("adamw".into()), from),
                "sgd" => d.set("train", "optimizer", V::Ident("sgd".into()), from),
                _ => d.unplaced(from, v, "planc prices Adam, AdamW and SGD with fp32 state"),
            },
            To::Special("deepspeed") => cx.follow(input, &text, from, Format::Deepspeed),
            To::Special("flash_attn") => match text.as_str() {
                "disabled" => d.set("train", "attention", V::Ident("standard".into()), from),
                _ => d.set("train", "attention", V::Ident("flash".into()), from),
            },
            To::Special("no_checkpointing") => {
                checkpointing = on != Some(true);
                d.unplaced(from, v, "read: gradient checkpointing off");
            }
            To::Special("checkpointing") => {
                checkpointing = on == Some(true);
                d.unplaced(from, v, "read: gradient checkpointing");
            }
            To::Special(_) => d.unplaced(from, v, "planc has no attribute for it"),
        }
    }
    method(cx, method_args, input, llamafactory);
    hf_defaults(cx, input, checkpointing, lr_schedule_seen);
}

/// LLaMA-Factory's module names (`lora_target`) as the matrices `train.lora_targets` names:
/// Llama's (and Qwen's, Mistral's), Mixtral's experts (`w1` gate, `w3` up, `w2` down).
fn lora_target(module: &str) -> Option<&'static str> {
    Some(match module {
        "q_proj" => "q",
        "k_proj" => "k",
        "v_proj" => "v",
        "o_proj" => "o",
        "gate_proj" | "w1" => "gate",
        "up_proj" | "w3" => "up",
        "down_proj" | "w2" => "down",
        _ => return None,
    })
}

/// `finetuning_type` (LoRA unless the arguments say otherwise) and its settings into
/// `train.method`, `lora_rank`, `lora_alpha`, `lora_targets`; `freeze` tuning's trained
/// layers into `frozen_layers` once the model's layers are known (`finish`).
fn method(cx: &mut Ctx, args: Vec<(String, String, Origin)>, input: &Input, llamafactory: bool) {
    let d = &mut cx.draft;
    let read = match (d.get("train", "method"), d.origin("train", "method")) {
        (Some(V::Ident(m)), Some(o)) => Some((m.replace("frozen", "freeze"), o.clone())),
        _ => None,
    };
    let (kind, kind_from) = match (args.iter().find(|a| a.0 == "finetuning_type"), read) {
        (Some((_, v, o)), _) => (v.clone(), o.clone()),
        // A file these arguments came with (a YAML the command line names) said it.
        (None, Some(r)) => r,
        // transformers' own scripts (`--model_name_or_path` alone) train every weight.
        (None, None) if !llamafactory => return,
        (None, None) => {
            let o = Origin::new(
                &input.name,
                None,
                "LLaMA-Factory's default without finetuning_type",
            );
            d.note(format!(
                "train.method = lora: LLaMA-Factory's default finetuning_type ({DEFAULT_METHOD})"
            ));
            (DEFAULT_METHOD.to_string(), o)
        }
    };
    let method = match kind.as_str() {
        "full" => "full",
        "lora" => "lora",
        "freeze" => "frozen",
        _ => {
            for (_, v, o) in args {
                d.unplaced(o, Some(v), format!("finetuning_type {kind}: not one of LLaMA-Factory's (lora, freeze, full); the plan prices full training"));
            }
            return;
        }
    };
    d.set(
        "train",
        "method",
        V::Ident(method.into()),
        kind_from.clone(),
    );
    let belongs = |key: &str| match key {
        "lora_rank" | "lora_alpha" | "lora_target" | "lora_dropout" | "additional_target"
        | "use_rslora" | "use_dora" => "lora",
        _ => "frozen",
    };
    let mut trainable: Option<(i64, Origin)> = None;
    for (key, v, from) in args {
        if key == "finetuning_type" {
            continue;
        }
        if belongs(&key) != method {
            d.unplaced(from, Some(v), format!("a setting of finetuning_type {}, and the job's is {kind}: LLaMA-Factory ignores it", if belongs(&key) == "lora" { "lora" } else { "freeze" }));
            continue;
        }
        match key.as_str() {
            "lora_rank" => match super::flags::int(&v) {
                Some(r) if r >= 1 => d.set("train", "lora_rank", V::Int(r), from),
                _ => d.unplaced(from, Some(v), "not a rank"),
            },
            "lora_alpha" => match v.parse::<f64>() {
                Ok(a) if a >= 0.0 && a.fract() == 0.0 && a < 1e9 => {
                    d.set("train", "lora_alpha", V::Int(a as u64), from)
                }
                Ok(a) if a >= 0.0 => d.set("train", "lora_alpha", V::Float(a), from),
                _ => d.unplaced(from, Some(v), "not a number"),
            },
            "lora_target" => {
                let modules: Vec<&str> = v.split(',').map(str::trim).filter(|m| !m.is_empty()).collect();
                if modules.contains(&"all") {
                    d.set("train", "lora_targets", V::Ident("all".into()), from);
                    continue;
                }
                let mut known: Vec<&str> = modules.iter().filter_map(|m| lora_target(m)).collect();
                let unknown: Vec<&str> = modules.iter().copied().filter(|m| lora_target(m).is_none()).collect();
                // `train.lora_targets`' order, as `check` keeps it.
                let order = ["q", "k", "v", "o", "gate", "up", "down"];
                known.sort_by_key(|t| order.iter().position(|o| o == t));
                known.dedup();
                if known.is_empty() {
                    d.unplaced(from, Some(v), "modules planc does not name (it adapts q, k, v, o, gate, up, down): the plan adapts every linear layer (lora_targets = all)");
                    continue;
                }
                if !unknown.is_empty() {
                    d.unplaced(
                        from.clone(),
                        Some(unknown.join(",")),
                        "modules planc does not name (it adapts q, k, v, o, gate, up, down): priced without their adapters",
                    );
                }
                d.set("train", "lora_targets", V::Raw(format!("[{}]", known.join(", "))), from);
            }
            "lora_dropout" => d.unplaced(from, Some(v), "LoRA's dropout: not priced (each adapted input is kept once more)"),
            "use_rslora" => d.unplaced(from, Some(v), "rank-stabilised scaling (alpha / √rank): the same products and memory"),
            "use_dora" => d.unplaced(from, Some(v), "DoRA's weight decomposition: priced as LoRA, without its norms of the weights"),
            "additional_target" => d.unplaced(from, Some(v), "modules trained whole beside the adapters: planc's LoRA trains the adapters only"),
            "freeze_trainable_layers" => match v.parse::<i64>() {
                Ok(n) if n > 0 => trainable = Some((n, from)),
                _ => d.unplaced(from, Some(v), "the first layers train and the rest are frozen: planc freezes a prefix (frozen_layers), the plan keeps LLaMA-Factory's default of the last 2 training"),
            },
            "freeze_trainable_modules" if v == "all" => d.unplaced(from, Some(v), "every module of the trained layers, as planc's frozen method trains them"),
            "freeze_trainable_modules" => d.unplaced(from, Some(v), "planc's frozen method trains whole layers: priced with all their modules training"),
            "freeze_extra_modules" => d.unplaced(from, Some(v), "modules trained beside the layers: planc's frozen method keeps the embedding and the output layer frozen"),
            _ => d.unplaced(from, Some(v), "planc has no attribute for it"),
        }
    }
    if method == "frozen" {
        cx.pending.freeze_trainable = Some(trainable.unwrap_or_else(|| {
            (
                DEFAULT_TRAINABLE_LAYERS,
                Origin::new(
                    &input.name,
                    None,
                    "LLaMA-Factory's default without freeze_trainable_layers",
                ),
            )
        }));
    }
}

/// transformers' and LLaMA-Factory's defaults where the arguments are silent.
fn hf_defaults(cx: &mut Ctx, input: &Input, checkpointing: bool, lr_schedule_seen: bool) {
    let from = |k: &str| {
        Origin::new(
            &input.name,
            None,
            format!("Hugging Face's default without {k}"),
        )
    };
    let d = &mut cx.draft;
    if checkpointing {
        d.assume(
            "parallel",
            "recompute",
            V::Ident("full".into()),
            Origin::new(&input.name, None, "LLaMA-Factory's default"),
            "LLaMA-Factory checkpoints every layer unless disable_gradient_checkpointing",
        );
    }
    if cx.pending.deepspeed.is_none() && !d.has("job", "framework") {
        d.set(
            "job",
            "framework",
            V::Ident("torch".into()),
            Origin::new(&input.name, None, "Hugging Face Trainer (DDP)"),
        );
    }
    d.assume(
        "train",
        "lr",
        V::Float(5e-5),
        from("learning_rate"),
        "transformers' TrainingArguments default",
    );
    d.assume(
        "train",
        "weight_decay",
        V::Float(0.0),
        from("weight_decay"),
        "transformers' TrainingArguments default",
    );
    d.assume(
        "train",
        "adam_beta2",
        V::Float(0.999),
        from("adam_beta2"),
        "transformers' TrainingArguments default",
    );
    d.assume(
        "train",
        "seed",
        V::Int(42),
        from("seed"),
        "transformers' TrainingArguments default",
    );
    d.assume(
        "train",
        "optimizer",
        V::Ident("adamw".into()),
        from("optim"),
        "transformers' AdamW",
    );
    if !lr_schedule_seen && !d.has("train", "lr_schedule") {
        d.note("train.lr_schedule: transformers decays linearly without lr_scheduler_type, a schedule planc does not have; the plan keeps cosine");
    }
    if !d.has("train", "precision") && cx.pending.deepspeed.as_ref().is_none_or(|ds| !ds.precision)
    {
        d.assume(
            "train",
            "precision",
            V::Ident("fp32".into()),
            from("bf16/fp16"),
            "transformers trains in fp32 without bf16 or fp16",
        );
    }
}
