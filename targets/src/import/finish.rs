//! What needs every input: batch sizes over the world size, steps from samples, warm-up
//! from a fraction, the frameworks' defaults where their inputs were silent, the model's
//! sequence length when only a `config.json` gives one.

use super::cluster::Hint;
use super::draft::{float_text, Origin, V};
use super::Ctx;

/// Values the formats leave for the end.
#[derive(Debug, Default)]
pub struct Pending {
    /// A Megatron-LM command was read (from this file): its defaults apply.
    pub megatron: Option<String>,
    pub gqa: bool,
    pub max_positions: Option<(u64, Origin)>,
    pub shared_expert_size: Option<(u64, Origin)>,
    pub dropout: Vec<(f64, Origin)>,
    pub layers_per_chunk: Option<(u64, Origin)>,
    pub fsdp: bool,
    pub train_samples: Option<(u64, Origin)>,
    pub lr_decay_seen: bool,
    pub warmup_fraction: Option<(f64, Origin)>,
    pub warmup_samples: Option<(u64, Origin)>,
    pub tokenizer_vocab: Option<(u64, Origin)>,
    pub hints: Vec<Hint>,
    pub hostfiles: Vec<(String, Origin)>,
    /// Variables a launcher exports by name (`mpirun -x NAME`).
    pub exported: Vec<String>,
    /// The job runs under Slurm (sbatch directives or srun).
    pub slurm: Option<Origin>,
    /// Gradient accumulation steps (DeepSpeed, Hugging Face).
    pub accum: Option<(u64, Origin)>,
    /// `train.min_lr` as a fraction of `train.lr`.
    pub min_lr_ratio: Option<(f64, Origin)>,
    /// A DeepSpeed config was read: its defaults where it is silent.
    pub deepspeed: Option<DsDefaults>,
    /// The context length of a model config (`max_position_embeddings`), the sequence
    /// length when nothing else gives one.
    pub context: Option<(u64, Origin)>,
    /// GPUs of the cluster, once known.
    pub world: Option<u64>,
    /// LLaMA-Factory's `freeze` tuning: the last layers that train, which become
    /// `train.frozen_layers` once the model's layers are known.
    pub freeze_trainable: Option<(i64, Origin)>,
    /// DeepSpeed configs a command names (`--deepspeed_config`), read after it.
    pub deepspeed_files: Vec<(String, Origin)>,
    /// Megatron-LM's `--make-vocab-size-divisible-by`.
    pub vocab_divisor: Option<u64>,
    /// A torchtitan job file was read (this one): its defaults apply.
    pub titan: Option<String>,
    /// torchtitan's model name and flavor.
    pub titan_model: Option<(String, Origin)>,
    pub titan_flavor: Option<(String, Origin)>,
    /// torchtitan's local batch, when no global batch is given (global = local × dp).
    pub titan_local_batch: Option<(u64, Origin)>,
}

#[derive(Debug, Default, Clone)]
pub struct DsDefaults {
    pub file: String,
    pub scheduler: bool,
    pub precision: bool,
    pub overlap: bool,
    pub stage: u64,
}

/// Gradient accumulation from `from`; an earlier one is listed as replaced.
pub fn set_accum(cx: &mut Ctx, n: u64, from: Origin) {
    if let Some((old, o)) = cx.pending.accum.take() {
        cx.draft.unplaced(
            o,
            Some(old.to_string()),
            format!("gradient accumulation is {n} from {from}, which comes later"),
        );
    }
    cx.pending.accum = Some((n, from));
}

pub fn finish(cx: &mut Ctx) {
    super::megatron::defaults(cx);
    super::deepspeed::defaults(cx);
    super::torchtitan::finish(cx);
    model(cx);
    frozen_layers(cx);
    dropout(cx);
    schedule(cx);
    batch(cx);
    let d = &mut cx.draft;
    if !d.has("parallel", "dp") {
        d.set(
            "parallel",
            "dp",
            V::Ident("auto".into()),
            Origin::new("derived", None, "world size / (tp × pp × cp)"),
        );
    }
    if let Some(o) = cx.pending.slurm.clone() {
        d.assume(
            "job",
            "scheduler",
            V::Ident("slurm".into()),
            o,
            "a Slurm job (#SBATCH or srun)",
        );
    }
}

fn model(cx: &mut Ctx) {
    let p = &mut cx.pending;
    let d = &mut cx.draft;
    let missing: Vec<&str> = ["layers", "hidden", "heads", "vocab", "seq_len"]
        .into_iter()
        .filter(|a| !d.has("model", a))
        .collect();
    if !d.has("model", "preset") && missing.len() == 5 && p.context.is_none() {
        d.note("model: no input describes the model; pass its Hugging Face config.json to planc import, or write `preset = \"...\"` in the model block");
    }
    if !d.has("model", "seq_len") && !d.has("model", "preset") {
        if let Some((n, o)) = p.context.take() {
            d.set("model", "seq_len", V::Int(n), o);
            d.note(format!(
                "model.seq_len = {n}: the model's context length (max_position_embeddings); no input gives the training sequence length"
            ));
        }
    }
    if let Some((n, o)) = p.max_positions.take() {
        match d.u64("model", "seq_len") {
            Some(s) if s == n => d.unplaced(
                o,
                Some(n.to_string()),
                "the position table of seq_len, as given",
            ),
            _ if !d.has("model", "seq_len") => d.set("model", "seq_len", V::Int(n), o),
            _ => d.unplaced(
                o,
                Some(n.to_string()),
                "planc sizes positions by seq_len (learned positions: seq_len rows)",
            ),
        }
    }
    if !d.has("model", "vocab") && !d.has("model", "preset") {
        if let Some((n, o)) = p.tokenizer_vocab.take() {
            // Megatron-LM pads the tokenizer's vocabulary to a multiple of
            // --make-vocab-size-divisible-by (128) × tp (`_vocab_size_with_padding`).
            let multiple =
                p.vocab_divisor.unwrap_or(128).max(1) * d.u64("parallel", "tp").unwrap_or(1).max(1);
            let padded = n.div_ceil(multiple) * multiple;
            let whose = if n == 50257 {
                "GPT-2's BPE".to_string()
            } else {
                format!("{}'s", o.key)
            };
            d.set("model", "vocab", V::Int(padded), o);
            d.note(format!("model.vocab = {padded}: {whose} vocabulary of {n}, padded by Megatron-LM to a multiple of {multiple}"));
        }
    }
    if let Some((size, o)) = p.shared_expert_size.take() {
        let width = d
            .u64("model", "expert_ffn_hidden")
            .or_else(|| d.u64("model", "ffn_hidden"));
        match width {
            Some(w) if w > 0 && size % w == 0 => d.set("model", "shared_experts", V::Int(size / w), o),
            _ => d.unplaced(o, Some(size.to_string()), "shared experts are counted in experts of expert_ffn_hidden; this size is not a multiple of it"),
        }
    }
}

/// `train.frozen_layers` from the layers that train (LLaMA-Factory's
/// `freeze_trainable_layers`): the model's layers less them, where the model says how many
/// it has (its `config.json`, or the preset it was named by).
fn frozen_layers(cx: &mut Ctx) {
    let Some((trainable, from)) = cx.pending.freeze_trainable.take() else {
        return;
    };
    let d = &mut cx.draft;
    let layers = d
        .u64("model", "layers")
        .or_else(|| match d.get("model", "preset") {
            Some(V::Str(p)) => planc_compiler::catalog::Catalog::builtin()
                .model(p)
                .map(|m| m.layers),
            _ => None,
        });
    match layers {
        Some(l) if (trainable as u64) < l => {
            d.set("train", "frozen_layers", V::Int(l - trainable as u64), from);
            d.note(format!(
                "train.frozen_layers = {}: the model's {l} layers less the {trainable} that train",
                l - trainable as u64
            ));
        }
        _ => {
            // Without the layers nothing says how many are frozen: full training, said so.
            d.unplaced(from, Some(trainable.to_string()), "the layers that train, of a model whose layers no input gives: the plan prices full training");
            if let Some((_, o)) = d.remove("train", "method") {
                d.unplaced(o, Some("freeze".into()), "freeze tuning, whose frozen layers are not known without the model's layers: the plan prices full training");
            }
        }
    }
}

fn dropout(cx: &mut Ctx) {
    let all = std::mem::take(&mut cx.pending.dropout);
    let Some((first, o)) = all.first().cloned() else {
        return;
    };
    let max = all.iter().map(|x| x.0).fold(first, f64::max);
    if all.iter().any(|x| x.0 != first) {
        cx.draft.note(format!(
            "train.dropout = {max}: planc has one dropout for attention and hidden; the inputs give {}",
            all.iter().map(|(v, o)| format!("{v} ({})", o.key)).collect::<Vec<_>>().join(", ")
        ));
    }
    let o = all.iter().find(|x| x.0 == max).map_or(o, |x| x.1.clone());
    // The others are listed, so that none is dropped without a line.
    for (v, other) in all.iter().filter(|x| x.1 != o) {
        cx.draft.unplaced(
            other.clone(),
            Some(float_text(*v)),
            format!(
                "planc has one dropout for attention and hidden: train.dropout = {} from {o}",
                float_text(max)
            ),
        );
    }
    cx.draft.set("train", "dropout", V::Float(max), o);
}

fn schedule(cx: &mut Ctx) {
    let p = &mut cx.pending;
    let d = &mut cx.draft;
    if let Some((n, o)) = p.layers_per_chunk.take() {
        let (layers, pp) = (
            d.u64("model", "layers"),
            d.u64("parallel", "pp").unwrap_or(1),
        );
        match layers {
            Some(l) if n > 0 && pp > 0 && l % (pp * n) == 0 => {
                let vpp = l / (pp * n);
                d.set("parallel", "vpp", V::Int(vpp), o.clone());
                if vpp > 1 {
                    d.set("parallel", "schedule", V::Ident("interleaved".into()), o);
                }
            }
            _ => d.unplaced(o, Some(n.to_string()), "layers per chunk that do not divide the layers of each stage (or no layer count): set vpp"),
        }
    }
    let gb = d.u64("train", "global_batch");
    if let Some((n, o)) = p.train_samples.take() {
        match gb {
            Some(g) if g > 0 => d.set("train", "steps", V::Int(n.div_ceil(g)), o),
            _ => d.unplaced(
                o,
                Some(n.to_string()),
                "samples to steps needs the global batch",
            ),
        }
    }
    if let Some((n, o)) = p.warmup_samples.take() {
        match gb {
            Some(g) if g > 0 => d.set("train", "warmup_steps", V::Int(n.div_ceil(g)), o),
            _ => d.unplaced(
                o,
                Some(n.to_string()),
                "samples to steps needs the global batch",
            ),
        }
    }
    if let Some((f, o)) = p.warmup_fraction.take() {
        match d.u64("train", "steps") {
            Some(s) => d.set(
                "train",
                "warmup_steps",
                V::Int((f * s as f64).round() as u64),
                o,
            ),
            None => d.unplaced(
                o,
                Some(f.to_string()),
                "a fraction of the steps, which no input gives",
            ),
        }
    }
    if let Some((r, o)) = p.min_lr_ratio.take() {
        match d.f64("train", "lr") {
            Some(lr) => d.set("train", "min_lr", V::Float(crate::args::tidy(lr * r)), o),
            None => d.unplaced(
                o,
                Some(r.to_string()),
                "a fraction of the learning rate, which no input gives",
            ),
        }
    }
}

/// The global batch from micro-batch × accumulation × data-parallel size, or the
/// accumulation checked against it.
fn batch(cx: &mut Ctx) {
    let p = &mut cx.pending;
    let d = &mut cx.draft;
    let world = p.world;
    let split = d.u64("parallel", "tp").unwrap_or(1)
        * d.u64("parallel", "pp").unwrap_or(1)
        * d.u64("parallel", "cp").unwrap_or(1);
    let dp = d.u64("parallel", "dp").or_else(|| {
        world
            .filter(|w| split > 0 && w % split == 0)
            .map(|w| w / split)
    });
    let micro = d.u64("parallel", "micro_batch").unwrap_or(1);
    let accum = p.accum.take();
    if let (None, Some((lb, o)), Some(dp)) = (
        d.u64("train", "global_batch"),
        p.titan_local_batch.take(),
        dp,
    ) {
        d.set("train", "global_batch", V::Int(lb * dp), o);
        d.note(format!(
            "train.global_batch = {}: torchtitan's local batch {lb} × dp {dp}",
            lb * dp
        ));
    }
    match (d.u64("train", "global_batch"), accum, dp) {
        (None, Some((a, o)), Some(dp)) => {
            d.set("train", "global_batch", V::Int(micro * a * dp), o.clone());
            d.note(format!("train.global_batch = {}: micro-batch {micro} × {a} accumulation steps ({}) × dp {dp}", micro * a * dp, o));
        }
        (None, None, Some(dp)) if d.has("parallel", "micro_batch") => {
            d.set(
                "train",
                "global_batch",
                V::Int(micro * dp),
                Origin::new("derived", None, "micro_batch × dp"),
            );
            d.note(format!("train.global_batch = {}: micro-batch {micro} × dp {dp}, no gradient accumulation (no input gives the global batch)", micro * dp));
        }
        (Some(g), Some((a, o)), Some(dp)) if g != micro * a * dp => {
            d.unplaced(o, Some(a.to_string()), format!(
                "gradient accumulation: the plan derives it, global batch {g} / (micro-batch {micro} × dp {dp}); this says {a}, which gives {}",
                micro * a * dp
            ));
        }
        (_, Some((a, o)), _) => d.unplaced(
            o,
            Some(a.to_string()),
            "gradient accumulation: planc derives it from the global batch, the micro-batch and dp",
        ),
        _ => {}
    }
}
