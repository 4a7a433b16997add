//! NeMo's and Megatron Bridge's YAML configs. Both hold Megatron-Core's settings by the
//! names Megatron-LM's flags have, `_` for `-`: NeMo 1.0's `megatron_gpt_config.yaml` (and
//! the NeMo-Framework-Launcher's training configs) under `trainer` and `model`, Megatron
//! Bridge's `ConfigContainer` written as YAML (NeMo 2.0's successor) under `model`, `train`,
//! `ddp`, `optimizer`, `mixed_precision`, `comm_overlap`, ... Each key becomes the flag it
//! names and goes through `megatron::TABLE`, so a YAML config and a command line place alike;
//! this module renames what differs (NeMo 1.0's `encoder_seq_length`, its
//! `activations_checkpoint_*` and `optim`, the switches written `false`, the trainer's
//! cluster) and lists the sections that hold no step (data, logging, checkpointing's
//! details) once each.

use yaml_rust2::{Yaml, YamlLoader};

use super::cluster::Hint;
use super::draft::{Origin, V};
use super::flags::Given;
use super::launch::Means;
use super::shell::Word;
use super::yaml::{target, text};
use super::{Ctx, ImportError, Input};

/// Which of the two configs a YAML file is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dialect {
    /// NeMo 1.0: `trainer` and `model` (with `model.optim`).
    Nemo,
    /// Megatron Bridge's `ConfigContainer`: `model`, `train`, `ddp`, `optimizer`, ...
    Bridge,
}

/// Sections that hold no setting of the step, listed once each.
const NOT_THE_STEP: &[(&str, &str)] = &[
    ("data", "the dataset: planc prices the step, whatever the data"),
    ("dataset", "the dataset: planc prices the step, whatever the data"),
    ("tokenizer", "the tokenizer: model.vocab is the padded vocabulary"),
    ("logger", "logging, not the step"),
    ("exp_manager", "logging and checkpoint management, not the step"),
    ("profiling", "profiling, not the step"),
    ("nsys_profile", "profiling, not the step"),
    ("run", "the launcher's run settings: planc's launch writes its own"),
    ("dist", "the process group's setup: planc's launch writes its own"),
    ("ft", "fault tolerance, not the step"),
    ("straggler", "straggler detection, not the step"),
    ("nvrx_straggler", "straggler detection, not the step"),
    ("rerun_state_machine", "result validation, not the step"),
    ("inprocess_restart", "fault tolerance, not the step"),
    ("peft", "a fine-tuning method: write train.method"),
    ("defaults", "Hydra's composition of the config: the files it names are not read (pass the composed config to planc import)"),
    ("hydra", "Hydra's settings, not the step"),
];

/// NeMo's own keys, known and not placed: why.
const NEMO_KNOWN: &[(&str, &str)] = &[
    ("mcore_gpt", "Megatron-Core's GPT model: what planc prices"),
    ("megatron_amp_O2", "fp32 master weights beside 16-bit ones: planc's optimizer_dtype = fp32, its default"),
    ("native_amp_init_scale", "fp16's loss scaling: numerics, not the step"),
    ("native_amp_growth_interval", "fp16's loss scaling: numerics, not the step"),
    ("hysteresis", "fp16's loss scaling: numerics, not the step"),
    ("use_scaled_init_method", "initialisation, not the step"),
    ("persist_layer_norm", "a kernel choice planc does not price"),
    ("bias_activation_fusion", "a kernel choice planc does not price"),
    ("bias_dropout_add_fusion", "a kernel choice planc does not price"),
    ("masked_softmax_fusion", "a kernel choice planc does not price"),
    ("apply_rope_fusion", "a kernel choice planc does not price"),
    ("gradient_as_bucket_view", "an implementation choice planc does not price"),
    ("grad_allreduce_chunk_size_mb", "an implementation choice planc does not price"),
    ("grad_div_ar_fusion", "an implementation choice planc does not price"),
    ("sync_batch_comm", "an implementation choice planc does not price"),
    ("gc_interval", "Python's garbage collection, not the step"),
    ("wgrad_deferral_limit", "an implementation choice planc does not price"),
    ("ub_tp_comm_overlap_cfg", "Userbuffers' settings: planc does not price Userbuffers"),
    ("transformer_block_type", "pre-norm layers: what planc prices"),
    ("headscale", "an architecture detail planc does not price"),
    ("normalize_attention_scores", "numerics, not the step"),
    ("rotary_percentage", "numerics of rope, not the step"),
    ("attention_type", "causal self-attention: what planc prices"),
    ("fp16_lm_cross_entropy", "numerics of the loss, not the step"),
    ("pre_process", "the pipeline's ends, which planc places itself"),
    ("post_process", "the pipeline's ends, which planc places itself"),
    ("resume_from_checkpoint", "run control, not the step"),
    ("apex_transformer_log_level", "logging, not the step"),
    ("rampup_batch_size", "a batch-size ramp: planc prices the full global_batch"),
    ("ffn_dropout", "dropout of the MLP's hidden layer: planc's train.dropout is the residual and attention ones"),
    ("do_layer_norm_weight_decay", "the optimizer's weight-decay groups, not the step"),
    ("fp8_e4m3", "the fp8 format: planc prices fp8 whatever the format"),
    ("fp8_hybrid", "the fp8 format: planc prices fp8 whatever the format"),
    ("fp8_margin", "fp8's scaling: numerics of the precision planc prices"),
    ("fp8_interval", "fp8's scaling: numerics of the precision planc prices"),
    ("fp8_amax_history_len", "fp8's scaling: numerics of the precision planc prices"),
    ("fp8_amax_compute_algo", "fp8's scaling: numerics of the precision planc prices"),
    ("params_dtype", "the parameters' type: train.precision says it"),
    ("pipeline_dtype", "the pipeline's activations' type: train.precision says it"),
    ("autocast_dtype", "autocast's type: train.precision says it"),
    ("autocast_enabled", "autocast: train.precision says it"),
];

/// The dialect of a YAML mapping, if it is either config.
pub fn dialect(text: &str) -> Option<Dialect> {
    let docs = YamlLoader::load_from_str(text).ok()?;
    let Some(Yaml::Hash(h)) = docs.first() else {
        return None;
    };
    let has = |k: &str| h.contains_key(&Yaml::String(k.into()));
    let model = match h.get(&Yaml::String("model".into())) {
        Some(Yaml::Hash(m)) => m,
        _ => return None,
    };
    let megatron_core = ["num_layers", "hidden_size", "tensor_model_parallel_size"]
        .iter()
        .any(|k| model.contains_key(&Yaml::String((*k).into())));
    if !megatron_core {
        return None;
    }
    if has("trainer") {
        Some(Dialect::Nemo)
    } else if ["train", "ddp", "optimizer", "mixed_precision"]
        .iter()
        .any(|k| has(k))
    {
        Some(Dialect::Bridge)
    } else {
        None
    }
}

pub fn read_yaml(cx: &mut Ctx, input: &Input) -> Result<(), ImportError> {
    let dialect = dialect(&input.text).ok_or_else(|| {
        ImportError::Unknown(
            input.name.clone(),
            "a YAML file that is neither a NeMo nor a Megatron Bridge config".into(),
        )
    })?;
    let docs = YamlLoader::load_from_str(&input.text)
        .map_err(|e| ImportError::Invalid(input.name.clone(), format!("not YAML: {e}")))?;
    let Some(Yaml::Hash(top)) = docs.into_iter().next() else {
        unreachable!("dialect() read a mapping");
    };
    let mut r = Reader::new(input, top.clone());
    for (k, v) in &top {
        let Some(section) = k.as_str() else { continue };
        r.section(dialect, section, v);
    }
    r.finish(cx, dialect);
    Ok(())
}

/// The sections a NeMo or Megatron Bridge config has, which Hydra's overrides name first.
const SECTIONS: &[&str] = &[
    "trainer",
    "model",
    "train",
    "optimizer",
    "ddp",
    "scheduler",
    "mixed_precision",
    "comm_overlap",
    "checkpoint",
    "rng",
    "dataset",
    "logger",
    "tokenizer",
    "dist",
    "profiling",
    "exp_manager",
    "run",
    "peft",
];

/// A Hydra override (`model.tensor_model_parallel_size=4`, `+trainer.max_steps=10`): its
/// path and its value, where its first part is one of the configs' sections.
fn override_of(word: &str) -> Option<(Vec<&str>, &str)> {
    let (path, value) = word.trim_start_matches('+').split_once('=')?;
    let parts: Vec<&str> = path.split('.').collect();
    let ident =
        |p: &&str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (SECTIONS.contains(&parts[0]) && parts.iter().all(ident)).then_some((parts, value))
}

/// Whether a command's arguments are Hydra overrides of a NeMo or Megatron Bridge config.
pub fn is_override_command(args: &[Word]) -> bool {
    args.iter().any(|w| override_of(&w.text).is_some())
}

/// A NeMo or Megatron Bridge training command: the config file it names (Megatron Bridge's
/// `--config-file`, NeMo's `--config-path` and `--config-name`), then Hydra's overrides of
/// it (`model.tensor_model_parallel_size=4`), which win; its other arguments are listed.
pub fn read_overrides(cx: &mut Ctx, args: &[Word], input: &Input) {
    let file = input.name.as_str();
    let overrides: Vec<(Vec<&str>, &str, usize)> = args
        .iter()
        .filter_map(|w| override_of(&w.text).map(|(p, v)| (p, v, w.line)))
        .collect();
    let dialect = if overrides
        .iter()
        .any(|(p, ..)| matches!(p[0], "trainer" | "exp_manager") || p.get(1) == Some(&"optim"))
    {
        Dialect::Nemo
    } else {
        Dialect::Bridge
    };
    let (given, loose) = super::flags::parse(args, &[]);
    let value_of = |keys: &[&str]| given.iter().find(|g| keys.contains(&g.key.as_str()));
    let config = match (
        value_of(&["--config-file", "--config_file"]),
        value_of(&["--config-path", "--config_path"]),
        value_of(&["--config-name", "--config_name"]),
    ) {
        (Some(f), ..) => f.value().map(|v| (v.to_string(), f.origin(file))),
        (None, path, Some(name)) => name.value().map(|n| {
            let n = if n.ends_with(".yaml") {
                n.to_string()
            } else {
                format!("{n}.yaml")
            };
            let dir = path.and_then(|p| p.value()).unwrap_or(".");
            (format!("{dir}/{n}"), name.origin(file))
        }),
        _ => None,
    };
    if let Some((path, from)) = config {
        cx.follow(input, &path, from, super::Format::Nemo);
    }
    for g in &given {
        if !matches!(
            g.key.as_str(),
            "--config-file"
                | "--config_file"
                | "--config-path"
                | "--config_path"
                | "--config-name"
                | "--config_name"
        ) {
            cx.draft.unplaced(
                g.origin(file),
                g.joined(),
                "a flag of the script, not of its config",
            );
        }
    }
    for w in loose.iter().filter(|w| override_of(&w.text).is_none()) {
        cx.draft.unplaced(
            Origin::new(file, Some(w.line), w.text.clone()),
            None,
            "a word that belongs to no flag or override",
        );
    }
    let mut r = Reader::new(input, yaml_rust2::yaml::Hash::new());
    for (path, value, line) in overrides {
        r.at = Some(line);
        let v = YamlLoader::load_from_str(value)
            .ok()
            .and_then(|d| d.into_iter().next())
            .unwrap_or(Yaml::Null);
        r.overridden(dialect, &path, v);
    }
    r.finish(cx, dialect);
}

struct Reader<'a> {
    input: &'a Input,
    given: Vec<Given>,
    unplaced: Vec<(Origin, Option<String>, String)>,
    hints: Vec<Hint>,
    /// The vocabulary of the model the tokenizer is named after.
    vocab: Option<(u64, Origin)>,
    /// The line every key is on (a command line's override), instead of searching the text.
    at: Option<usize>,
    /// The whole config, which OmegaConf's interpolations (`${model.encoder_seq_length}`)
    /// read from; empty for a command line's overrides.
    top: yaml_rust2::yaml::Hash,
}

impl<'a> Reader<'a> {
    fn new(input: &'a Input, top: yaml_rust2::yaml::Hash) -> Reader<'a> {
        Reader {
            input,
            given: Vec::new(),
            unplaced: Vec::new(),
            hints: Vec::new(),
            vocab: None,
            at: None,
            top,
        }
    }

    /// Hands what was read to the import: the framework, the cluster's hints, the listed
    /// keys, and the flags, which Megatron-LM's table places.
    fn finish(self, cx: &mut Ctx, dialect: Dialect) {
        let what = match dialect {
            Dialect::Nemo => "a NeMo 1.0 config: Megatron-Core under NeMo",
            Dialect::Bridge => "a Megatron Bridge config: Megatron-Core under Megatron Bridge",
        };
        cx.draft.assume(
            "job",
            "framework",
            V::Ident("megatron".into()),
            Origin::new(&self.input.name, None, "model"),
            what,
        );
        for (from, value, why) in self.unplaced {
            cx.draft.unplaced(from, value, why);
        }
        cx.pending.hints.extend(self.hints);
        if let Some(v) = self.vocab {
            cx.pending.tokenizer_vocab.get_or_insert(v);
        }
        super::megatron::place(cx, self.given, &self.input.name);
    }

    /// One override: the section's own reading of the key at its path (nested as the file
    /// would nest it).
    fn overridden(&mut self, dialect: Dialect, path: &[&str], v: Yaml) {
        if let Some((_, why)) = NOT_THE_STEP.iter().find(|(s, _)| *s == path[0]) {
            self.unplace(path, &v, *why);
            return;
        }
        let mut nested = v;
        for k in path[1..].iter().rev() {
            let mut h = yaml_rust2::yaml::Hash::new();
            h.insert(Yaml::String((*k).to_string()), nested);
            nested = Yaml::Hash(h);
        }
        self.section(dialect, path[0], &nested);
    }

    /// The line of `path`'s last key, searched after its section's own line.
    fn line(&self, path: &[&str]) -> Option<usize> {
        if self.at.is_some() {
            return self.at;
        }
        let mut from = 0;
        let lines: Vec<&str> = self.input.text.lines().collect();
        for key in path {
            let at = lines[from..]
                .iter()
                .position(|l| l.trim_start().starts_with(&format!("{key}:")))?;
            from += at;
        }
        Some(from + 1)
    }

    fn origin(&self, path: &[&str]) -> Origin {
        Origin::new(&self.input.name, self.line(path), path.join("."))
    }

    fn flag(&mut self, path: &[&str], flag: &str, values: Vec<String>) {
        self.given.push(Given {
            key: flag.to_string(),
            values,
            line: self.line(path).unwrap_or(0),
            unresolved: false,
            shown: Some(path.join(".")),
        });
    }

    fn unplace(&mut self, path: &[&str], v: &Yaml, why: impl Into<String>) {
        let o = self.origin(path);
        self.unplaced.push((o, text(v), why.into()));
    }

    fn section(&mut self, dialect: Dialect, name: &str, v: &Yaml) {
        if unset(v) {
            return;
        }
        if let Some((_, why)) = NOT_THE_STEP.iter().find(|(s, _)| *s == name) {
            if name == "tokenizer" {
                self.tokenizer(&[name], v);
            }
            self.unplace(&[name], &Yaml::Null, *why);
            return;
        }
        match (dialect, name, v) {
            (Dialect::Nemo, "trainer", Yaml::Hash(h)) => {
                for (k, v) in h {
                    if let Some(k) = k.as_str() {
                        self.trainer(k, v);
                    }
                }
            }
            (_, _, Yaml::Hash(h)) => {
                for (k, v) in h {
                    if let Some(k) = k.as_str() {
                        self.key(&[name, k], v);
                    }
                }
            }
            // Megatron Bridge's precision by its recipe's name (`bf16_mixed`).
            (Dialect::Bridge, "mixed_precision", Yaml::String(s)) => self.precision(&[name], s),
            (_, "name", Yaml::String(_)) => {
                self.unplace(&[name], v, "the run's name: job.name is the plan's")
            }
            (_, "restore_from_path" | "init_from_nemo_model" | "init_from_ptl_ckpt", _)
                if !unset(v) =>
            {
                self.unplace(&[name], v, "a checkpoint to start from: not the step")
            }
            _ => self.unplace(&[name], v, "not a section planc knows"),
        }
    }

    /// A tokenizer named after a published model (NeMo 1.0's `type`, Megatron Bridge's
    /// `tokenizer_model`): that model's vocabulary, which Megatron-Core pads.
    fn tokenizer(&mut self, path: &[&str], v: &Yaml) {
        let Yaml::Hash(h) = v else { return };
        for key in ["type", "tokenizer_model", "model_name"] {
            let Some(name) = h.get(&Yaml::String(key.into())).and_then(Yaml::as_str) else {
                continue;
            };
            // Megatron's own GPT-2 BPE tokenizer (NeMo's `library: megatron`).
            if name == "GPT2BPETokenizer" {
                let mut p = path.to_vec();
                p.push(key);
                self.vocab = Some((50257, self.origin(&p)));
                return;
            }
            let preset = super::hf::preset(name)
                .and_then(|p| planc_compiler::catalog::Catalog::builtin().model(p));
            if let Some(m) = preset {
                let mut p = path.to_vec();
                p.push(key);
                self.vocab = Some((m.vocab, self.origin(&p)));
                return;
            }
        }
    }

    /// `v` with OmegaConf's interpolation read (`${.encoder_seq_length}` from its own
    /// section, `${model.hidden_size}` from the root, the NeMo-Framework-Launcher's
    /// `${training.model...}` from this config); None, and the key listed, where only running
    /// NeMo would tell (a resolver such as `${multiply:...}`, `???`, a path not in the file).
    fn resolved(&mut self, path: &[&str], v: &Yaml) -> Option<Yaml> {
        let mut v = v.clone();
        for _ in 0..8 {
            let Some(s) = v.as_str() else { return Some(v) };
            if s == "???" {
                self.unplace(path, &v, "a value the run must be given (OmegaConf's ???)");
                return None;
            }
            let Some(inner) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}')) else {
                return Some(v);
            };
            if inner.contains(':') || inner.contains("${") {
                self.unplace(
                    path,
                    &v,
                    "an OmegaConf resolver: its value is only known when NeMo runs",
                );
                return None;
            }
            let target: Vec<String> = match inner.strip_prefix('.') {
                Some(rel) => path[..path.len() - 1]
                    .iter()
                    .map(|p| p.to_string())
                    .chain(rel.split('.').map(str::to_string))
                    .collect(),
                None => {
                    let parts: Vec<&str> = inner.split('.').collect();
                    // The launcher composes each config under its stage (`training`).
                    let rooted = match parts.first() {
                        Some(&"training")
                            if !self.top.contains_key(&Yaml::String("training".into())) =>
                        {
                            &parts[1..]
                        }
                        _ => &parts[..],
                    };
                    rooted.iter().map(|p| p.to_string()).collect()
                }
            };
            // Walked by reference: only the value found is copied.
            let found = target.iter().try_fold(None::<&Yaml>, |at, k| {
                let key = Yaml::String(k.clone());
                match at {
                    None => self.top.get(&key),
                    Some(y) => y.as_hash()?.get(&key),
                }
                .map(Some)
            });
            match found.flatten() {
                Some(x) => v = x.clone(),
                None => {
                    self.unplace(
                        path,
                        &v,
                        "an interpolation of a key this file does not hold",
                    );
                    return None;
                }
            }
        }
        self.unplace(path, &v, "interpolations nested too deep to follow");
        None
    }

    /// NeMo 1.0's PyTorch Lightning trainer: the cluster, the precision, the steps.
    fn trainer(&mut self, k: &str, v: &Yaml) {
        let path = ["trainer", k];
        let Some(v) = self.resolved(&path, v) else {
            return;
        };
        let v = &v;
        let n = v.as_i64().and_then(|n| u64::try_from(n).ok());
        match k {
            "num_nodes" | "devices" => match n {
                Some(value) => {
                    let what = if k == "num_nodes" {
                        Means::Nodes
                    } else {
                        Means::GpusPerNode
                    };
                    let from = self.origin(&path);
                    self.hints.push(Hint {
                        what,
                        value,
                        rank: 3,
                        from,
                    });
                }
                None => self.unplace(&path, v, "not a count planc can read"),
            },
            "precision" => {
                if let Some(p) = text(v) {
                    self.precision(&path, &p);
                }
            }
            "max_steps" => self.one(&path, "--train-iters", v),
            "gradient_clip_val" => self.one(&path, "--clip-grad", v),
            "accumulate_grad_batches" => {
                if !unset(v) {
                    self.unplace(&path, v, "NeMo's accumulation comes from the batch sizes (train.global_batch, parallel.micro_batch), as planc's does");
                }
            }
            "accelerator"
            | "strategy"
            | "logger"
            | "enable_checkpointing"
            | "use_distributed_sampler"
            | "max_epochs"
            | "max_time"
            | "log_every_n_steps"
            | "val_check_interval"
            | "limit_val_batches"
            | "limit_test_batches"
            | "num_sanity_val_steps"
            | "benchmark"
            | "enable_model_summary"
            | "enable_progress_bar"
            | "replace_sampler_ddp" => {
                if !unset(v) {
                    self.unplace(&path, v, "the trainer's run control, not the step");
                }
            }
            _ => self.unknown(&path, v),
        }
    }

    fn precision(&mut self, path: &[&str], p: &str) {
        let p = p.to_ascii_lowercase();
        if p.contains("bf16") {
            self.flag(path, "--bf16", vec![]);
        } else if p.starts_with("16") || p.contains("fp16") {
            self.flag(path, "--fp16", vec![]);
        } else if !(p.starts_with("32") || p.contains("fp32")) {
            self.unplace(
                path,
                &Yaml::String(p.clone()),
                "not a precision planc reads",
            );
        }
        if p.contains("fp8") {
            self.flag(path, "--fp8-format", vec!["hybrid".into()]);
        }
    }

    fn one(&mut self, path: &[&str], flag: &str, v: &Yaml) {
        if let Some(t) = text(v) {
            self.flag(path, flag, vec![t]);
        }
    }

    /// A switch's flag when `v` is true; nothing when false or unset (the flag's absence).
    fn switch(&mut self, path: &[&str], flag: &str, v: &Yaml) {
        if v.as_bool() == Some(true) {
            self.flag(path, flag, vec![]);
        }
    }

    /// A switch whose flag turns something off (`add_bias_linear: false` is
    /// `--disable-bias-linear`).
    fn switch_off(&mut self, path: &[&str], flag: &str, v: &Yaml) {
        match v.as_bool() {
            Some(false) => self.flag(path, flag, vec![]),
            Some(true) => self.unplace(path, v, "on: Megatron-Core's default, and planc's"),
            None => {}
        }
    }

    fn key(&mut self, path: &[&str], v: &Yaml) {
        let Some(v) = self.resolved(path, v) else {
            return;
        };
        let v = &v;
        let [section, k] = [path[0], path[path.len() - 1]];
        if unset(v) && NOT_THE_STEP.iter().any(|(s, _)| *s == k) {
            return;
        }
        if let Some((_, why)) = NOT_THE_STEP.iter().find(|(s, _)| *s == k) {
            if k == "tokenizer" {
                self.tokenizer(path, v);
            }
            self.unplace(path, &Yaml::Null, *why);
            return;
        }
        if let Some((_, why)) = NEMO_KNOWN.iter().find(|(s, _)| *s == k) {
            if !unset(v) {
                self.unplace(path, v, *why);
            }
            return;
        }
        match (section, k, v) {
            (_, "_target_", _) => {}
            (_, "optim", Yaml::Hash(h)) => self.optim(h),
            (_, "encoder_seq_length" | "seq_length", _) => self.one(path, "--seq-length", v),
            (_, "activations_checkpoint_granularity", _) => {
                self.one(path, "--recompute-granularity", v)
            }
            (_, "activations_checkpoint_method", _) => self.one(path, "--recompute-method", v),
            (_, "activations_checkpoint_num_layers", _) => {
                self.one(path, "--recompute-num-layers", v)
            }
            (_, "activation", _) => match v.as_str() {
                Some(a) if a.contains("swiglu") => self.flag(path, "--swiglu", vec![]),
                Some("gelu") => {}
                _ => self.unplace(path, v, "planc prices GELU and SwiGLU MLPs"),
            },
            (_, "gated_linear_unit", _) => self.switch(path, "--swiglu", v),
            (_, "activation_func", _) => self.unplace(
                path,
                &Yaml::String(target(v).unwrap_or_default()),
                "the activation's function: planc prices the MLP by whether it is gated (gated_linear_unit), whatever the function",
            ),
            (_, "bias" | "add_bias_linear", _) => self.switch_off(path, "--disable-bias-linear", v),
            (_, "share_embeddings_and_output_weights", _) => {
                self.switch_off(path, "--untie-embeddings-and-output-weights", v)
            }
            (_, "gradient_accumulation_fusion", _) => {
                self.switch_off(path, "--no-gradient-accumulation-fusion", v)
            }
            (_, "use_flash_attention", _) => self.switch(path, "--use-flash-attn", v),
            (_, "num_moe_experts", _) => self.one(path, "--num-experts", v),
            (_, "virtual_pipeline_model_parallel_size", _) => {
                self.one(path, "--num-virtual-stages-per-pipeline-rank", v)
            }
            (_, "num_query_groups", _) if !unset(v) => {
                self.flag(path, "--group-query-attention", vec![]);
                self.one(path, "--num-query-groups", v);
            }
            (_, "transformer_engine", _) => match v.as_bool() {
                Some(true) => self.flag(
                    path,
                    "--transformer-impl",
                    vec!["transformer_engine".into()],
                ),
                Some(false) => self.flag(path, "--transformer-impl", vec!["local".into()]),
                None => {}
            },
            (_, "attention_backend", _) => {
                // Written as the enum (`AttnBackend.flash`) or its name.
                if let Some(t) = text(v) {
                    let t = t.rsplit('.').next().unwrap_or(&t).to_string();
                    self.flag(path, "--attention-backend", vec![t]);
                }
            }
            // NeMo 1.0's fp8 is a switch, with the format a second switch; Megatron-Core's
            // (and Bridge's) names the format.
            (_, "fp8", Yaml::Boolean(true)) => {
                self.flag(path, "--fp8-format", vec!["hybrid".into()])
            }
            (_, "fp8", Yaml::Boolean(false)) => {}
            (_, "fp8", _) => self.one(path, "--fp8-format", v),
            (_, "bf16", _) => self.switch(path, "--bf16", v),
            (_, "fp16", _) => self.switch(path, "--fp16", v),
            (_, "ub_tp_comm_overlap" | "tp_comm_overlap", _) => {
                self.switch(path, "--tp-comm-overlap", v)
            }
            (_, "overlap_p2p_comm", _) => match v.as_bool() {
                Some(true) => self.flag(path, "--overlap-p2p-communication", vec![]),
                Some(false) => self.flag(path, "--no-overlap-p2p-communication", vec![]),
                None => {}
            },
            // Megatron-Core's DDP config reduces in fp32 unless told otherwise.
            ("ddp" | "mixed_precision", "grad_reduce_in_fp32", _) => {
                self.switch_off(path, "--grad-reduce-in-bf16", v)
            }
            ("ddp", "bucket_size", _) => self.one(path, "--ddp-bucket-size", v),
            ("ddp", "use_megatron_fsdp", _) => self.switch(path, "--use-megatron-fsdp", v),
            ("ddp", "average_in_collective", _) => {
                self.switch(path, "--ddp-average-in-collective", v)
            }
            ("rng", "seed", _) => self.one(path, "--seed", v),
            (_, "window_size", Yaml::Array(a)) => {
                let parts: Vec<String> = a.iter().filter_map(text).collect();
                self.flag(path, "--window-size", vec![parts.join(",")]);
            }
            (_, "moe_layer_freq", Yaml::Array(a)) => {
                let parts: Vec<String> = a.iter().filter_map(text).collect();
                self.flag(
                    path,
                    "--moe-layer-freq",
                    vec![format!("[{}]", parts.join(","))],
                );
            }
            _ => {
                let flag = format!("--{}", k.replace('_', "-"));
                match super::flags::lookup(super::megatron::TABLE, &flag).map(|f| f.arity) {
                    Some(super::flags::Arity::Switch) => self.switch(path, &flag, v),
                    // Zero is a value (a dropout of 0); null is not.
                    Some(_) if absent(v) || v.as_bool() == Some(false) => {}
                    Some(_) => self.one(path, &flag, v),
                    None => self.unknown(path, v),
                }
            }
        }
    }

    /// NeMo 1.0's `model.optim`: the optimizer, its schedule, its gradient reduction.
    fn optim(&mut self, h: &yaml_rust2::yaml::Hash) {
        for (k, v) in h {
            let Some(k) = k.as_str() else { continue };
            let path = ["model", "optim", k];
            match k {
                // NeMo's distributed Adam is Megatron-Core's distributed optimizer (ZeRO-1),
                // overlapping its reduction unless `overlap_grad_sync: false`.
                "name" => match v.as_str() {
                    Some("distributed_fused_adam" | "mcore_distributed_optim") => {
                        self.flag(&path, "--optimizer", vec!["adam".into()]);
                        self.flag(&path, "--use-distributed-optimizer", vec![]);
                        // Its own key, where written, says; else NeMo's default (on).
                        if !h.contains_key(&Yaml::String("overlap_grad_sync".into())) {
                            self.flag(&path, "--overlap-grad-reduce", vec![]);
                        }
                    }
                    Some("fused_adam" | "adam" | "adamw") => {
                        self.flag(&path, "--optimizer", vec!["adam".into()])
                    }
                    Some("sgd") => self.flag(&path, "--optimizer", vec!["sgd".into()]),
                    _ => self.unplace(&path, v, "planc prices Adam, AdamW and SGD"),
                },
                "lr" => self.one(&path, "--lr", v),
                "weight_decay" => self.one(&path, "--weight-decay", v),
                "eps" => self.one(&path, "--adam-eps", v),
                "betas" => match v {
                    Yaml::Array(b) if b.len() == 2 => {
                        self.one(&path, "--adam-beta1", &b[0]);
                        self.one(&path, "--adam-beta2", &b[1]);
                    }
                    _ => self.unplace(&path, v, "Adam's two betas"),
                },
                "overlap_grad_sync" => {
                    if v.as_bool() == Some(true) {
                        self.flag(&path, "--overlap-grad-reduce", vec![]);
                    }
                }
                "grad_sync_dtype" => match v.as_str() {
                    Some("bf16") => self.flag(&path, "--grad-reduce-in-bf16", vec![]),
                    Some("fp32") => {}
                    _ => self.unplace(&path, v, "planc reduces gradients in bf16 or fp32"),
                },
                "sched" => {
                    if let Yaml::Hash(s) = v {
                        for (sk, sv) in s {
                            let Some(sk) = sk.as_str() else { continue };
                            let sp = ["model", "optim", "sched", sk];
                            match sk {
                                "name" => match sv.as_str() {
                                    Some("CosineAnnealing") => self.flag(&sp, "--lr-decay-style", vec!["cosine".into()]),
                                    Some("Constant" | "constant") => self.flag(&sp, "--lr-decay-style", vec!["constant".into()]),
                                    _ => self.unplace(&sp, sv, "planc's schedules are cosine and constant; the plan keeps cosine"),
                                },
                                "warmup_steps" => self.one(&sp, "--lr-warmup-iters", sv),
                                "min_lr" => self.one(&sp, "--min-lr", sv),
                                "constant_steps" | "max_steps" | "warmup_ratio" => {
                                    if !unset(sv) {
                                        self.unplace(&sp, sv, "a schedule detail planc's train block does not hold")
                                    }
                                }
                                _ => self.unknown(&sp, sv),
                            }
                        }
                    }
                }
                "bucket_cap_mb"
                | "contiguous_grad_buffer"
                | "overlap_param_sync"
                | "contiguous_param_buffer"
                | "grad_sync_dtype_fp32"
                | "ddp_bucket_size" => {
                    if !unset(v) {
                        self.unplace(&path, v, "an implementation choice planc does not price")
                    }
                }
                _ => self.unknown(&path, v),
            }
        }
    }

    /// A key planc does not know: listed unless it is unset (null, false, zero or empty),
    /// which a config dumped whole holds by the hundred and which says nothing.
    fn unknown(&mut self, path: &[&str], v: &Yaml) {
        if unset(v) {
            return;
        }
        match target(v) {
            Some(t) => self.unplace(
                path,
                &Yaml::String(t),
                "a Python object the config builds, not a setting planc prices",
            ),
            None => self.unplace(path, v, "not a NeMo or Megatron-Core setting planc knows"),
        }
    }
}

/// No value at all: null, or an empty or `none` string.
fn absent(v: &Yaml) -> bool {
    match v {
        Yaml::Null | Yaml::BadValue => true,
        Yaml::String(s) => s.is_empty() || s.eq_ignore_ascii_case("none"),
        _ => false,
    }
}

/// No value, or one that says nothing beside a key planc does not place: false, zero or
/// empty as well.
fn unset(v: &Yaml) -> bool {
    match v {
        Yaml::Null | Yaml::BadValue => true,
        Yaml::Boolean(b) => !b,
        Yaml::Integer(n) => *n == 0,
        Yaml::Real(r) => r.parse::<f64>().is_ok_and(|x| x == 0.0),
        Yaml::String(s) => s.is_empty() || s.eq_ignore_ascii_case("none"),
        Yaml::Array(a) => a.is_empty(),
        Yaml::Hash(h) => h.is_empty(),
        _ => false,
    }
}
