//! Checkpoints of `planc run` (the "Checkpoints" section of `docs/spec/run.md`): the
//! translation between planc's parameter table and Hugging Face's tensors, and the folder
//! protocol that keeps `DIR/latest` on a complete checkpoint whatever moment a run dies.
//!
//! # Folder
//!
//! `DIR/step-NNNNNNN/` (the step in at least 7 digits) holds:
//! - `model.safetensors`: the whole model in fp32 (the master weights), unsharded, under
//!   the names and layouts of `GPT2LMHeadModel` or `LlamaForCausalLM`, with
//! - `config.json`, so `transformers` loads the folder as it is;
//! - `optimizer/rank-00000.safetensors`: planc's own, the AdamW moments of every parameter
//!   as `m.<internal name>` and `v.<internal name>` in fp32 and internal shapes, and in the
//!   header's metadata the optimizer's `step` and fp16 `loss_scale`. The moments are the
//!   whole (gathered) state, so any layout of the same model resumes from them;
//! - `planc.json`: [`Meta`].
//!
//! A checkpoint is written into `DIR/.tmp-step-NNNNNNN-<pid>`, every file and folder
//! fsynced, renamed into place (an older folder of the same step is first renamed aside and
//! deleted after), `DIR` fsynced, and only then `DIR/latest` (a line `step-NNNNNNN`)
//! replaced by a synced rename. [`latest`] trusts `DIR/latest` only when it names a
//! complete folder, so a run killed at any point leaves the previous checkpoint reachable.
//!
//! # Layouts
//!
//! Internal linear weights are `[out, in]`. GPT-2's are `Conv1D`, `[in, out]`: every GPT-2
//! matrix is the transpose of the internal one, and `c_attn` is the whole fused `qkv_w`
//! (columns q, k, v). Llama keeps `[out, in]`, and the fused tensors split by rows:
//! `qkv_w` into `q_proj`, `k_proj`, `v_proj`, and SwiGLU's `fc_w` into `gate_proj` then
//! `up_proj`. The mapping assumes what both libraries assume of the engine's kernels:
//! heads are contiguous row blocks (head h is rows h·hd .. (h+1)·hd of its projection),
//! query head h reads key/value head h / (heads / kv_heads), GPT-2's activation is the tanh
//! GELU (`gelu_new`), and rope rotates element i of a head with element i + hd/2 (Hugging
//! Face's `rotate_half`, not the interleaved pairs of Meta's original code).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use planc_compiler::plan::{Mlp, Norm, Position};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors, View};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::model::{Dims, Param, Params};

/// The Hugging Face model a checkpoint is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `GPT2LMHeadModel`: layernorm, learned positions, GELU, biases, no grouped attention.
    Gpt2,
    /// `LlamaForCausalLM`: rmsnorm, rope, SwiGLU (biases and grouped attention allowed).
    Llama,
}

impl Layout {
    /// The layout of `dims`' model, or why it has none.
    pub fn of(dims: &Dims) -> Result<Layout, CheckpointError> {
        let unsupported = |clash: String| {
            Err(CheckpointError::Unsupported(format!(
                "{clash}: Hugging Face checkpoints are written for GPT-2 models \
                 (norm=layernorm, position=learned, mlp=gelu, bias=true, kv_heads=heads) \
                 and Llama models (norm=rmsnorm, position=rope, mlp=swiglu)"
            )))
        };
        match dims.norm {
            Norm::Layernorm => {
                if dims.position != Position::Learned {
                    return unsupported(format!(
                        "norm=layernorm (GPT-2) with position={}",
                        dims.position
                    ));
                }
                if dims.mlp != Mlp::Gelu {
                    return unsupported(format!("norm=layernorm (GPT-2) with mlp={}", dims.mlp));
                }
                if !dims.bias {
                    return unsupported("norm=layernorm (GPT-2) with bias=false".into());
                }
                if dims.kv_heads != dims.heads {
                    return unsupported(format!(
                        "norm=layernorm (GPT-2) with kv_heads={} unlike heads={}",
                        dims.kv_heads, dims.heads
                    ));
                }
                Ok(Layout::Gpt2)
            }
            Norm::Rmsnorm => {
                if dims.position != Position::Rope {
                    return unsupported(format!(
                        "norm=rmsnorm (Llama) with position={}",
                        dims.position
                    ));
                }
                if dims.mlp != Mlp::Swiglu {
                    return unsupported(format!("norm=rmsnorm (Llama) with mlp={}", dims.mlp));
                }
                Ok(Layout::Llama)
            }
        }
    }

    /// The `architectures` entry of `config.json`.
    pub fn architecture(self) -> &'static str {
        match self {
            Layout::Gpt2 => "GPT2LMHeadModel",
            Layout::Llama => "LlamaForCausalLM",
        }
    }
}

/// AdamW's state over the flat buffer (`params.total` elements each, the table's offsets).
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerState {
    /// Updates applied so far (Adam's bias correction); with fp16 it can trail the training
    /// step by the steps skipped on overflow.
    pub step: u64,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// fp16's dynamic loss scale (1 for the other precisions).
    pub loss_scale: f32,
}

impl OptimizerState {
    /// The state before the first update.
    pub fn new(params: &Params) -> OptimizerState {
        OptimizerState {
            step: 0,
            m: vec![0.0; params.total],
            v: vec![0.0; params.total],
            loss_scale: 1.0,
        }
    }
}

/// `planc.json`: where the run stood when the checkpoint was taken.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Optimizer steps completed; names the folder.
    pub step: u64,
    /// Samples of the token stream consumed (the data position to resume from).
    pub samples_consumed: u64,
    /// Hex digest of the plan's text (`train::plan_hash`).
    pub plan_hash: String,
    /// The parallel layout that wrote the checkpoint, for people (loading ignores it).
    pub layout: String,
    pub planc_version: String,
}

impl Meta {
    /// `planc_version` is this build's.
    pub fn new(step: u64, samples_consumed: u64, plan_hash: &str, layout: &str) -> Meta {
        Meta {
            step,
            samples_consumed,
            plan_hash: plan_hash.into(),
            layout: layout.into(),
            planc_version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

#[derive(Debug)]
pub enum CheckpointError {
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A file that is not a checkpoint of this model.
    Invalid { path: PathBuf, problem: String },
    /// The model has no Hugging Face layout.
    Unsupported(String),
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            CheckpointError::Invalid { path, problem } => {
                write!(f, "{}: {problem}", path.display())
            }
            CheckpointError::Unsupported(why) => {
                write!(f, "no Hugging Face checkpoint for this model: {why}")
            }
        }
    }
}

impl std::error::Error for CheckpointError {}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |error| CheckpointError::Io {
        path: path.to_path_buf(),
        error,
    }
}

fn invalid(path: &Path, problem: impl Into<String>) -> CheckpointError {
    CheckpointError::Invalid {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

const MODEL: &str = "model.safetensors";
const CONFIG: &str = "config.json";
const META: &str = "planc.json";
const OPTIMIZER_DIR: &str = "optimizer";
const OPTIMIZER: &str = "optimizer/rank-00000.safetensors";
const LATEST: &str = "latest";

/// Which part of an internal tensor a Hugging Face tensor is.
#[derive(Clone, Copy, Debug)]
enum Part {
    Whole,
    /// A 2-D tensor transposed (GPT-2's Conv1D weights).
    Transposed,
    /// Rows `a..b` of the first dimension.
    Rows(usize, usize),
}

/// One Hugging Face tensor: its name, its shape and where it lives in the table.
struct Entry<'p> {
    name: String,
    param: &'p Param,
    part: Part,
    shape: Vec<usize>,
}

impl Entry<'_> {
    fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The internal tensor's row length and the element range this entry covers (the
    /// whole tensor for `Whole` and `Transposed`).
    fn range(&self) -> std::ops::Range<usize> {
        let p = self.param;
        match self.part {
            Part::Whole | Part::Transposed => p.offset..p.offset + p.numel(),
            Part::Rows(a, b) => {
                let row = p.numel() / p.shape[0];
                p.offset + a * row..p.offset + b * row
            }
        }
    }

    /// This tensor's values, in its own (Hugging Face) order, from the flat buffer.
    fn gather(&self, flat: &[f32]) -> Vec<f32> {
        let src = &flat[self.range()];
        match self.part {
            Part::Transposed => {
                let (r, c) = (self.param.shape[0], self.param.shape[1]);
                let mut out = Vec::with_capacity(r * c);
                for j in 0..c {
                    out.extend((0..r).map(|i| src[i * c + j]));
                }
                out
            }
            _ => src.to_vec(),
        }
    }

    /// Writes `values` (Hugging Face order) into the flat buffer.
    fn scatter(&self, values: &[f32], flat: &mut [f32]) {
        let range = self.range();
        let dst = &mut flat[range];
        match self.part {
            Part::Transposed => {
                let (r, c) = (self.param.shape[0], self.param.shape[1]);
                for j in 0..c {
                    for i in 0..r {
                        dst[i * c + j] = values[j * r + i];
                    }
                }
            }
            _ => dst.copy_from_slice(values),
        }
    }
}

/// The Hugging Face tensors of the model, each tied to its place in `params`.
fn entries<'p>(
    layout: Layout,
    dims: &Dims,
    params: &'p Params,
) -> Result<Vec<Entry<'p>>, CheckpointError> {
    let by_name: HashMap<&str, &Param> = params.list.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut out = Vec::new();
    let mut add = |name: String, internal: &str, part: Part| -> Result<(), CheckpointError> {
        let param = *by_name.get(internal).ok_or_else(|| {
            CheckpointError::Unsupported(format!(
                "the parameter table has no `{internal}` (is it the table of these dims?)"
            ))
        })?;
        let mut shape = param.shape.clone();
        match part {
            Part::Whole => {}
            Part::Transposed => shape.reverse(),
            Part::Rows(a, b) => shape[0] = b - a,
        }
        out.push(Entry {
            name,
            param,
            part,
            shape,
        });
        Ok(())
    };
    match layout {
        Layout::Gpt2 => {
            add("transformer.wte.weight".into(), "wte", Part::Whole)?;
            add("transformer.wpe.weight".into(), "wpe", Part::Whole)?;
            for l in 0..dims.layers {
                let hf = |s: &str| format!("transformer.h.{l}.{s}");
                let int = |s: &str| format!("h.{l}.{s}");
                for (h, i, part) in [
                    ("ln_1.weight", "ln1_w", Part::Whole),
                    ("ln_1.bias", "ln1_b", Part::Whole),
                    ("attn.c_attn.weight", "qkv_w", Part::Transposed),
                    ("attn.c_attn.bias", "qkv_b", Part::Whole),
                    ("attn.c_proj.weight", "proj_w", Part::Transposed),
                    ("attn.c_proj.bias", "proj_b", Part::Whole),
                    ("ln_2.weight", "ln2_w", Part::Whole),
                    ("ln_2.bias", "ln2_b", Part::Whole),
                    ("mlp.c_fc.weight", "fc_w", Part::Transposed),
                    ("mlp.c_fc.bias", "fc_b", Part::Whole),
                    ("mlp.c_proj.weight", "fc2_w", Part::Transposed),
                    ("mlp.c_proj.bias", "fc2_b", Part::Whole),
                ] {
                    add(hf(h), &int(i), part)?;
                }
            }
            add("transformer.ln_f.weight".into(), "lnf_w", Part::Whole)?;
            add("transformer.ln_f.bias".into(), "lnf_b", Part::Whole)?;
        }
        Layout::Llama => {
            let (q, kv, f) = (
                dims.heads * dims.head_dim,
                dims.kv_heads * dims.head_dim,
                dims.ffn,
            );
            add("model.embed_tokens.weight".into(), "wte", Part::Whole)?;
            for l in 0..dims.layers {
                let hf = |s: &str| format!("model.layers.{l}.{s}");
                let int = |s: &str| format!("h.{l}.{s}");
                let mut parts = vec![
                    ("input_layernorm.weight", "ln1_w", Part::Whole),
                    ("self_attn.q_proj.weight", "qkv_w", Part::Rows(0, q)),
                    ("self_attn.k_proj.weight", "qkv_w", Part::Rows(q, q + kv)),
                    (
                        "self_attn.v_proj.weight",
                        "qkv_w",
                        Part::Rows(q + kv, q + 2 * kv),
                    ),
                    ("self_attn.o_proj.weight", "proj_w", Part::Whole),
                    ("post_attention_layernorm.weight", "ln2_w", Part::Whole),
                    ("mlp.gate_proj.weight", "fc_w", Part::Rows(0, f)),
                    ("mlp.up_proj.weight", "fc_w", Part::Rows(f, 2 * f)),
                    ("mlp.down_proj.weight", "fc2_w", Part::Whole),
                ];
                if dims.bias {
                    parts.extend([
                        ("self_attn.q_proj.bias", "qkv_b", Part::Rows(0, q)),
                        ("self_attn.k_proj.bias", "qkv_b", Part::Rows(q, q + kv)),
                        (
                            "self_attn.v_proj.bias",
                            "qkv_b",
                            Part::Rows(q + kv, q + 2 * kv),
                        ),
                        ("self_attn.o_proj.bias", "proj_b", Part::Whole),
                        ("mlp.gate_proj.bias", "fc_b", Part::Rows(0, f)),
                        ("mlp.up_proj.bias", "fc_b", Part::Rows(f, 2 * f)),
                        ("mlp.down_proj.bias", "fc2_b", Part::Whole),
                    ]);
                }
                for (h, i, part) in parts {
                    add(hf(h), &int(i), part)?;
                }
            }
            add("model.norm.weight".into(), "lnf_w", Part::Whole)?;
        }
    }
    if !dims.tied {
        add("lm_head.weight".into(), "lm_head", Part::Whole)?;
    }
    Ok(out)
}

/// The `config.json` that makes `transformers` build the model of `dims`.
pub fn config(dims: &Dims) -> Result<serde_json::Value, CheckpointError> {
    Ok(match Layout::of(dims)? {
        Layout::Gpt2 => {
            // GPT-2's tokenizer puts <|endoftext|> at 50256; smaller vocabularies have none.
            let special = if dims.vocab > 50256 { 50256 } else { 0 };
            json!({
                "model_type": "gpt2",
                "architectures": [Layout::Gpt2.architecture()],
                "vocab_size": dims.vocab,
                "n_embd": dims.hidden,
                "n_head": dims.heads,
                "n_layer": dims.layers,
                "n_positions": dims.seq_len,
                "n_ctx": dims.seq_len,
                "n_inner": (dims.ffn != 4 * dims.hidden).then_some(dims.ffn),
                "layer_norm_epsilon": dims.norm_eps,
                "activation_function": "gelu_new",
                "resid_pdrop": 0.0,
                "embd_pdrop": 0.0,
                "attn_pdrop": 0.0,
                "summary_first_dropout": 0.0,
                "scale_attn_weights": true,
                "tie_word_embeddings": dims.tied,
                "initializer_range": 0.02,
                "bos_token_id": special,
                "eos_token_id": special,
                "torch_dtype": "float32",
            })
        }
        Layout::Llama => json!({
            "model_type": "llama",
            "architectures": [Layout::Llama.architecture()],
            "vocab_size": dims.vocab,
            "hidden_size": dims.hidden,
            "intermediate_size": dims.ffn,
            "num_attention_heads": dims.heads,
            "num_key_value_heads": dims.kv_heads,
            "num_hidden_layers": dims.layers,
            "head_dim": dims.head_dim,
            "max_position_embeddings": dims.seq_len,
            "rms_norm_eps": dims.norm_eps,
            "rope_theta": dims.rope_theta,
            "rope_scaling": null,
            "hidden_act": "silu",
            "attention_bias": dims.bias,
            "mlp_bias": dims.bias,
            "attention_dropout": 0.0,
            "tie_word_embeddings": dims.tied,
            "initializer_range": 0.02,
            "torch_dtype": "float32",
        }),
    })
}

/// A tensor for `safetensors` to write, produced only when it is written, so saving needs
/// one tensor's worth of memory beyond the weights.
struct Out<'a> {
    entry: &'a Entry<'a>,
    flat: &'a [f32],
}

impl View for Out<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }

    fn shape(&self) -> &[usize] {
        &self.entry.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        let values = self.entry.gather(self.flat);
        Cow::Owned(values.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    fn data_len(&self) -> usize {
        self.entry.numel() * 4
    }
}

fn folder_name(step: u64) -> String {
    format!("step-{step:07}")
}

/// The step of a folder named `step-NNNNNNN`.
fn folder_step(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn sync_path(path: &Path) -> Result<(), CheckpointError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let mut f = File::create(path).map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

fn write_safetensors(
    path: &Path,
    tensors: Vec<(String, Out<'_>)>,
    metadata: HashMap<String, String>,
) -> Result<(), CheckpointError> {
    safetensors::serialize_to_file(tensors, Some(metadata), path)
        .map_err(|e| invalid(path, format!("cannot write: {e}")))?;
    // serialize_to_file renames its own temporary file into place without syncing it.
    sync_path(path)
}

/// Writes the checkpoint of `meta.step` under `dir` (see the module doc for the protocol)
/// and points `DIR/latest` at it; returns the step folder.
pub fn save(
    dir: &Path,
    dims: &Dims,
    params: &Params,
    weights: &[f32],
    optimizer: &OptimizerState,
    meta: &Meta,
) -> Result<PathBuf, CheckpointError> {
    let layout = Layout::of(dims)?;
    let table = entries(layout, dims, params)?;
    for (what, len) in [
        ("weights", weights.len()),
        ("optimizer.m", optimizer.m.len()),
        ("optimizer.v", optimizer.v.len()),
    ] {
        if len != params.total {
            return Err(invalid(
                dir,
                format!(
                    "{what} has {len} elements, the parameter table {}",
                    params.total
                ),
            ));
        }
    }
    fs::create_dir_all(dir).map_err(io(dir))?;
    let name = folder_name(meta.step);
    let pid = std::process::id();
    let tmp = dir.join(format!(".tmp-{name}-{pid}"));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    fs::create_dir_all(tmp.join(OPTIMIZER_DIR)).map_err(io(&tmp))?;

    let model: Vec<_> = table
        .iter()
        .map(|e| {
            let out = Out {
                entry: e,
                flat: weights,
            };
            (e.name.clone(), out)
        })
        .collect();
    // `transformers` refuses safetensors files whose metadata names another framework.
    let pt = HashMap::from([("format".to_string(), "pt".to_string())]);
    write_safetensors(&tmp.join(MODEL), model, pt)?;

    let config = config(dims)?;
    let text = serde_json::to_string_pretty(&config).expect("a JSON value serializes");
    write_synced(&tmp.join(CONFIG), format!("{text}\n").as_bytes())?;

    let whole: Vec<Entry> = params
        .list
        .iter()
        .map(|p| Entry {
            name: p.name.clone(),
            param: p,
            part: Part::Whole,
            shape: p.shape.clone(),
        })
        .collect();
    let mut moments = Vec::new();
    for e in &whole {
        let m = Out {
            entry: e,
            flat: &optimizer.m,
        };
        let v = Out {
            entry: e,
            flat: &optimizer.v,
        };
        moments.push((format!("m.{}", e.name), m));
        moments.push((format!("v.{}", e.name), v));
    }
    let info = HashMap::from([
        ("format".to_string(), "planc-adamw".to_string()),
        ("step".to_string(), optimizer.step.to_string()),
        ("loss_scale".to_string(), optimizer.loss_scale.to_string()),
    ]);
    write_safetensors(&tmp.join(OPTIMIZER), moments, info)?;

    let text = serde_json::to_string_pretty(meta).expect("Meta serializes");
    write_synced(&tmp.join(META), format!("{text}\n").as_bytes())?;
    sync_path(&tmp.join(OPTIMIZER_DIR))?;
    sync_path(&tmp)?;

    let dest = dir.join(&name);
    let trash = dir.join(format!(".trash-{name}-{pid}"));
    let replaced = dest.exists();
    if replaced {
        // rename() cannot replace a non-empty folder: move the old one aside first. Until
        // the new one is in place, `latest` may name a missing folder, which `latest()`
        // treats like an incomplete one.
        if trash.exists() {
            fs::remove_dir_all(&trash).map_err(io(&trash))?;
        }
        fs::rename(&dest, &trash).map_err(io(&dest))?;
    }
    fs::rename(&tmp, &dest).map_err(io(&dest))?;
    sync_path(dir)?;
    if replaced {
        fs::remove_dir_all(&trash).map_err(io(&trash))?;
    }

    let pointer = dir.join(format!(".{LATEST}.tmp-{pid}"));
    write_synced(&pointer, format!("{name}\n").as_bytes())?;
    let latest = dir.join(LATEST);
    fs::rename(&pointer, &latest).map_err(io(&latest))?;
    sync_path(dir)?;
    Ok(dest)
}

/// Whether `folder` has everything a finished save writes.
fn complete(folder: &Path) -> bool {
    [MODEL, CONFIG, META]
        .iter()
        .all(|f| folder.join(f).is_file())
        && folder.join(OPTIMIZER_DIR).is_dir()
}

/// The newest complete checkpoint in `dir`: the one `DIR/latest` names if it is complete,
/// else the complete `step-*` folder of the highest step; `None` when there is none (or no
/// `dir`).
pub fn latest(dir: &Path) -> Result<Option<PathBuf>, CheckpointError> {
    if !dir.exists() {
        return Ok(None);
    }
    let pointer = dir.join(LATEST);
    match fs::read_to_string(&pointer) {
        Ok(text) => {
            let name = text.trim();
            if folder_step(name).is_some() && complete(&dir.join(name)) {
                return Ok(Some(dir.join(name)));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&pointer)(e)),
    }
    let mut best: Option<(u64, PathBuf)> = None;
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let Some(step) = entry.file_name().to_str().and_then(folder_step) else {
            continue;
        };
        let path = entry.path();
        if complete(&path) && best.as_ref().is_none_or(|(s, _)| step > *s) {
            best = Some((step, path));
        }
    }
    Ok(best.map(|(_, p)| p))
}

/// The file mapped read-only.
fn map(path: &Path) -> Result<memmap2::Mmap, CheckpointError> {
    let file = File::open(path).map_err(io(path))?;
    // SAFETY: read-only; a checkpoint folder is never written after its rename into place
    // (a re-save replaces the folder, it does not write into it).
    unsafe { memmap2::Mmap::map(&file) }.map_err(io(path))
}

fn parse_safetensors<'a>(path: &Path, bytes: &'a [u8]) -> Result<SafeTensors<'a>, CheckpointError> {
    SafeTensors::deserialize(bytes)
        .map_err(|e| invalid(path, format!("not a safetensors file: {e}")))
}

/// A tensor's values as f32 (Hugging Face checkpoints of other origins may be bf16 or fp16).
fn values(path: &Path, name: &str, t: &TensorView<'_>) -> Result<Vec<f32>, CheckpointError> {
    let d = t.data();
    Ok(match t.dtype() {
        Dtype::F32 => d
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::BF16 => d
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::F16 => d
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => {
            return Err(invalid(
                path,
                format!("tensor `{name}` is {other:?}; planc reads F32, BF16 and F16"),
            ))
        }
    })
}

/// Tensors a Hugging Face file may hold that planc does not keep: GPT-2's causal-mask
/// buffers, and a tied output head saved anyway.
fn ignorable(name: &str, dims: &Dims) -> bool {
    (name.starts_with("transformer.h.")
        && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias")))
        || (dims.tied && name == "lm_head.weight")
}

/// Reads the checkpoint folder `path` into the flat buffer of `params`: the weights, the
/// optimizer state when the folder has one, and `planc.json`. Names and shapes are checked
/// against the table; the folder may come from any layout of the same model.
pub fn load(
    path: &Path,
    dims: &Dims,
    params: &Params,
) -> Result<(Vec<f32>, Option<OptimizerState>, Meta), CheckpointError> {
    let layout = Layout::of(dims)?;
    let table = entries(layout, dims, params)?;

    let meta_path = path.join(META);
    let text = fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
    let meta: Meta = serde_json::from_str(&text).map_err(|e| invalid(&meta_path, e.to_string()))?;

    let model_path = path.join(MODEL);
    let bytes = map(&model_path)?;
    let file = parse_safetensors(&model_path, &bytes)?;
    let expected: HashMap<&str, &Entry> = table.iter().map(|e| (e.name.as_str(), e)).collect();
    for name in file.names() {
        if !expected.contains_key(name) && !ignorable(name, dims) {
            return Err(invalid(
                &model_path,
                format!(
                    "unexpected tensor `{name}`: not part of this {} model",
                    layout.architecture()
                ),
            ));
        }
    }
    let mut weights = vec![0f32; params.total];
    for e in &table {
        let t = file.tensor(&e.name).map_err(|_| {
            invalid(
                &model_path,
                format!("missing tensor `{}` (shape {:?})", e.name, e.shape),
            )
        })?;
        if t.shape() != e.shape.as_slice() {
            return Err(invalid(
                &model_path,
                format!(
                    "tensor `{}` has shape {:?}, the model needs {:?}",
                    e.name,
                    t.shape(),
                    e.shape
                ),
            ));
        }
        e.scatter(&values(&model_path, &e.name, &t)?, &mut weights);
    }

    let opt_path = path.join(OPTIMIZER);
    let optimizer = if opt_path.exists() {
        Some(load_optimizer(&opt_path, params)?)
    } else {
        None
    };
    Ok((weights, optimizer, meta))
}

fn load_optimizer(path: &Path, params: &Params) -> Result<OptimizerState, CheckpointError> {
    let bytes = map(path)?;
    let file = parse_safetensors(path, &bytes)?;
    let (_, header) = SafeTensors::read_metadata(&bytes)
        .map_err(|e| invalid(path, format!("not a safetensors file: {e}")))?;
    let info = header.metadata().clone().unwrap_or_default();
    let field = |key: &str| {
        info.get(key)
            .ok_or_else(|| invalid(path, format!("no `{key}` in the header's metadata")))
    };
    let step = field("step")?
        .parse()
        .map_err(|e| invalid(path, format!("`step`: {e}")))?;
    let loss_scale = field("loss_scale")?
        .parse()
        .map_err(|e| invalid(path, format!("`loss_scale`: {e}")))?;
    let mut state = OptimizerState {
        step,
        loss_scale,
        ..OptimizerState::new(params)
    };
    let names: usize = file.names().len();
    if names != 2 * params.list.len() {
        return Err(invalid(
            path,
            format!(
                "{names} tensors; the model's optimizer state has {} (m and v of {} parameters)",
                2 * params.list.len(),
                params.list.len()
            ),
        ));
    }
    for p in &params.list {
        for (moment, flat) in [("m", &mut state.m), ("v", &mut state.v)] {
            let name = format!("{moment}.{}", p.name);
            let t = file
                .tensor(&name)
                .map_err(|_| invalid(path, format!("missing tensor `{name}`")))?;
            if t.shape() != p.shape.as_slice() {
                return Err(invalid(
                    path,
                    format!(
                        "tensor `{name}` has shape {:?}, the model needs {:?}",
                        t.shape(),
                        p.shape
                    ),
                ));
            }
            if t.dtype() != Dtype::F32 {
                return Err(invalid(path, format!("tensor `{name}` is not F32")));
            }
            flat[p.offset..p.offset + p.numel()].copy_from_slice(&values(path, &name, &t)?);
        }
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::model::Rng;

    fn gpt2() -> Dims {
        Dims {
            layers: 2,
            hidden: 8,
            heads: 2,
            kv_heads: 2,
            head_dim: 4,
            ffn: 32,
            vocab: 11,
            seq_len: 5,
            mlp: Mlp::Gelu,
            norm: Norm::Layernorm,
            position: Position::Learned,
            bias: true,
            tied: true,
            norm_eps: 1e-5,
            rope_theta: 10000.0,
        }
    }

    fn llama() -> Dims {
        Dims {
            layers: 2,
            hidden: 16,
            heads: 4,
            kv_heads: 2,
            head_dim: 4,
            ffn: 24,
            vocab: 13,
            seq_len: 6,
            mlp: Mlp::Swiglu,
            norm: Norm::Rmsnorm,
            position: Position::Rope,
            bias: false,
            tied: false,
            norm_eps: 1e-6,
            rope_theta: 500000.0,
        }
    }

    /// Random values in every parameter (norms and biases too), zeros in the padding.
    fn random(params: &Params, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        let mut w = vec![0f32; params.total];
        for p in &params.list {
            for x in &mut w[p.offset..p.offset + p.numel()] {
                *x = rng.normal();
            }
        }
        w
    }

    fn optimizer(params: &Params) -> OptimizerState {
        OptimizerState {
            step: 41,
            m: random(params, 2),
            v: random(params, 3).iter().map(|x| x * x).collect(),
            loss_scale: 32768.0,
        }
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    fn meta(step: u64) -> Meta {
        Meta::new(
            step,
            step * 8,
            &crate::train::plan_hash("plan"),
            "tp1 pp1 dp1",
        )
    }

    /// Saves random weights of `dims` at `step` in `dir`, returning them.
    fn save_random(dir: &Path, dims: &Dims, step: u64) -> (Params, Vec<f32>, PathBuf) {
        let params = Params::new(dims);
        let w = random(&params, step + 1);
        let path = save(dir, dims, &params, &w, &optimizer(&params), &meta(step)).unwrap();
        (params, w, path)
    }

    /// A tensor of a saved safetensors file, as f32.
    fn tensor(file: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
        let bytes = fs::read(file).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let t = st.tensor(name).unwrap();
        (t.shape().to_vec(), values(file, name, &t).unwrap())
    }

    fn round_trip(dims: &Dims) {
        let dir = tempfile::tempdir().unwrap();
        let (params, w, path) = save_random(dir.path(), dims, 3);
        assert_eq!(path, dir.path().join("step-0000003"));
        let (back, opt, m) = load(&path, dims, &params).unwrap();
        assert_eq!(bits(&back), bits(&w));
        let opt = opt.unwrap();
        let want = optimizer(&params);
        assert_eq!((opt.step, opt.loss_scale), (41, 32768.0));
        assert_eq!(bits(&opt.m), bits(&want.m));
        assert_eq!(bits(&opt.v), bits(&want.v));
        assert_eq!(m, meta(3));
        assert_eq!(m.planc_version, env!("CARGO_PKG_VERSION"));
        assert_eq!(latest(dir.path()).unwrap(), Some(path));
        // Every element of every parameter is in the file exactly once.
        let table = entries(Layout::of(dims).unwrap(), dims, &params).unwrap();
        let stored: usize = table.iter().map(Entry::numel).sum();
        assert_eq!(stored, params.count());
    }

    #[test]
    fn gpt2_round_trips_bit_for_bit() {
        round_trip(&gpt2());
        round_trip(&Dims {
            tied: false,
            ffn: 24,
            ..gpt2()
        });
    }

    #[test]
    fn llama_round_trips_bit_for_bit() {
        round_trip(&llama());
        round_trip(&Dims {
            bias: true,
            tied: true,
            ..llama()
        });
    }

    #[test]
    fn gpt2_matrices_are_transposed() {
        let dims = gpt2();
        let dir = tempfile::tempdir().unwrap();
        let (params, w, path) = save_random(dir.path(), &dims, 0);
        let file = path.join(MODEL);
        let at = |name: &str, r: usize, c: usize| {
            let p = params.get(name).unwrap();
            w[p.offset + r * p.shape[1] + c]
        };
        // c_attn.weight is [C, 3C]: element [i][j] is qkv_w[j][i]. Column 13 is a key
        // column (C = 8).
        let (shape, v) = tensor(&file, "transformer.h.1.attn.c_attn.weight");
        assert_eq!(shape, vec![8, 24]);
        assert_eq!(v[5 * 24 + 13], at("h.1.qkv_w", 13, 5));
        let (shape, v) = tensor(&file, "transformer.h.0.mlp.c_fc.weight");
        assert_eq!(shape, vec![8, 32]);
        assert_eq!(v[3 * 32 + 30], at("h.0.fc_w", 30, 3));
        let (shape, v) = tensor(&file, "transformer.h.0.mlp.c_proj.weight");
        assert_eq!(shape, vec![32, 8]);
        assert_eq!(v[30 * 8 + 3], at("h.0.fc2_w", 3, 30));
        let (shape, v) = tensor(&file, "transformer.h.0.attn.c_proj.weight");
        assert_eq!(shape, vec![8, 8]);
        assert_eq!(v[2 * 8 + 7], at("h.0.proj_w", 7, 2));
        let (_, v) = tensor(&file, "transformer.wpe.weight");
        assert_eq!(v[4 * 8 + 1], at("wpe", 4, 1));
        // Tied: no lm_head.
        let bytes = fs::read(&file).unwrap();
        let names = SafeTensors::deserialize(&bytes).unwrap().names().len();
        assert_eq!(names, 2 + 12 * 2 + 2);
    }

    #[test]
    fn llama_splits_grouped_qkv_and_gate_up_by_rows() {
        let dims = Dims {
            bias: true,
            ..llama()
        };
        let dir = tempfile::tempdir().unwrap();
        let (params, w, path) = save_random(dir.path(), &dims, 0);
        let file = path.join(MODEL);
        let at = |name: &str, i: usize| w[params.get(name).unwrap().offset + i];
        let c = 16;
        // heads 4 × hd 4 = 16 query rows, then 2 × 4 = 8 key rows, then 8 value rows.
        let (shape, q) = tensor(&file, "model.layers.1.self_attn.q_proj.weight");
        assert_eq!(shape, vec![16, 16]);
        assert_eq!(q[15 * c + 2], at("h.1.qkv_w", 15 * c + 2));
        let (shape, k) = tensor(&file, "model.layers.1.self_attn.k_proj.weight");
        assert_eq!(shape, vec![8, 16]);
        assert_eq!(k[3 * c + 9], at("h.1.qkv_w", (16 + 3) * c + 9));
        let (shape, v) = tensor(&file, "model.layers.1.self_attn.v_proj.weight");
        assert_eq!(shape, vec![8, 16]);
        assert_eq!(v[7 * c], at("h.1.qkv_w", (24 + 7) * c));
        let (shape, kb) = tensor(&file, "model.layers.1.self_attn.k_proj.bias");
        assert_eq!(shape, vec![8]);
        assert_eq!(kb[5], at("h.1.qkv_b", 16 + 5));
        // F = 24: gate rows 0..24, up rows 24..48 of fc_w.
        let (shape, up) = tensor(&file, "model.layers.0.mlp.up_proj.weight");
        assert_eq!(shape, vec![24, 16]);
        assert_eq!(up[c + 4], at("h.0.fc_w", (24 + 1) * c + 4));
        let (_, gate) = tensor(&file, "model.layers.0.mlp.gate_proj.weight");
        assert_eq!(gate[c + 4], at("h.0.fc_w", c + 4));
        let (shape, _) = tensor(&file, "model.layers.0.mlp.down_proj.weight");
        assert_eq!(shape, vec![16, 24]);
        let (shape, _) = tensor(&file, "model.layers.0.self_attn.o_proj.weight");
        assert_eq!(shape, vec![16, 16]);
        // Untied (llama() is): lm_head is stored.
        let dir = tempfile::tempdir().unwrap();
        let (params, w, path) = save_random(dir.path(), &llama(), 0);
        let (shape, head) = tensor(&path.join(MODEL), "lm_head.weight");
        assert_eq!(shape, vec![13, 16]);
        assert_eq!(head[20], w[params.get("lm_head").unwrap().offset + 20]);
    }

    #[test]
    fn config_json_describes_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let (_, _, path) = save_random(dir.path(), &gpt2(), 0);
        let text = fs::read_to_string(path.join(CONFIG)).unwrap();
        let c: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(c["model_type"], "gpt2");
        assert_eq!(c["architectures"], json!(["GPT2LMHeadModel"]));
        for (key, value) in [
            ("n_embd", json!(8)),
            ("n_head", json!(2)),
            ("n_layer", json!(2)),
            ("n_positions", json!(5)),
            ("n_ctx", json!(5)),
            ("vocab_size", json!(11)),
            ("n_inner", json!(null)),
            ("layer_norm_epsilon", json!(1e-5f32)),
            ("activation_function", json!("gelu_new")),
            ("resid_pdrop", json!(0.0)),
            ("embd_pdrop", json!(0.0)),
            ("attn_pdrop", json!(0.0)),
            ("summary_first_dropout", json!(0.0)),
            ("tie_word_embeddings", json!(true)),
            ("scale_attn_weights", json!(true)),
            ("torch_dtype", json!("float32")),
            ("bos_token_id", json!(0)),
            ("eos_token_id", json!(0)),
        ] {
            assert_eq!(c[key], value, "{key}");
        }
        let c = config(&Dims {
            ffn: 24,
            vocab: 50257,
            ..gpt2()
        })
        .unwrap();
        assert_eq!(
            (c["n_inner"].clone(), c["eos_token_id"].clone()),
            (json!(24), json!(50256))
        );

        let c = config(&llama()).unwrap();
        assert_eq!(c["model_type"], "llama");
        assert_eq!(c["architectures"], json!(["LlamaForCausalLM"]));
        for (key, value) in [
            ("hidden_size", json!(16)),
            ("intermediate_size", json!(24)),
            ("num_attention_heads", json!(4)),
            ("num_key_value_heads", json!(2)),
            ("num_hidden_layers", json!(2)),
            ("head_dim", json!(4)),
            ("vocab_size", json!(13)),
            ("max_position_embeddings", json!(6)),
            ("rms_norm_eps", json!(1e-6f32)),
            ("rope_theta", json!(500000.0)),
            ("rope_scaling", json!(null)),
            ("hidden_act", json!("silu")),
            ("attention_bias", json!(false)),
            ("mlp_bias", json!(false)),
            ("tie_word_embeddings", json!(false)),
            ("attention_dropout", json!(0.0)),
            ("torch_dtype", json!("float32")),
            ("initializer_range", json!(0.02)),
        ] {
            assert_eq!(c[key], value, "{key}");
        }
    }

    #[test]
    fn models_of_neither_family_are_refused_by_attribute() {
        let refuse = |d: Dims| Layout::of(&d).unwrap_err().to_string();
        let e = refuse(Dims {
            position: Position::Rope,
            ..gpt2()
        });
        assert!(
            e.contains("norm=layernorm (GPT-2) with position=rope"),
            "{e}"
        );
        assert!(refuse(Dims {
            mlp: Mlp::Swiglu,
            ..gpt2()
        })
        .contains("with mlp=swiglu"));
        assert!(refuse(Dims {
            bias: false,
            ..gpt2()
        })
        .contains("with bias=false"));
        assert!(refuse(Dims {
            kv_heads: 1,
            ..gpt2()
        })
        .contains("kv_heads=1 unlike heads=2"));
        assert!(refuse(Dims {
            position: Position::Learned,
            ..llama()
        })
        .contains("norm=rmsnorm (Llama) with position=learned"));
        assert!(refuse(Dims {
            mlp: Mlp::Gelu,
            ..llama()
        })
        .contains("with mlp=gelu"));
        // save refuses before writing anything.
        let dir = tempfile::tempdir().unwrap();
        let d = Dims {
            mlp: Mlp::Gelu,
            ..llama()
        };
        let params = Params::new(&d);
        let w = vec![0.0; params.total];
        assert!(save(
            dir.path(),
            &d,
            &params,
            &w,
            &OptimizerState::new(&params),
            &meta(0)
        )
        .is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn latest_skips_interrupted_writes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(latest(&d.join("absent")).unwrap(), None);
        assert_eq!(latest(d).unwrap(), None);
        let dims = gpt2();
        save_random(d, &dims, 1);
        let (_, _, two) = save_random(d, &dims, 2);
        // A run died while writing step 3 (no planc.json yet) after pointing `latest` at
        // it (which save never does, but a hand-edited or damaged folder might), and
        // another died before renaming its temporary folder.
        let (_, _, three) = save_random(d, &dims, 3);
        fs::remove_file(three.join(META)).unwrap();
        fs::create_dir_all(d.join(".tmp-step-0000004-999/optimizer")).unwrap();
        for f in [MODEL, CONFIG, META] {
            fs::write(d.join(".tmp-step-0000004-999").join(f), "x").unwrap();
        }
        fs::write(d.join(LATEST), "step-0000003\n").unwrap();
        assert_eq!(latest(d).unwrap(), Some(two.clone()));
        // Without `latest`, the highest complete step wins.
        fs::remove_file(d.join(LATEST)).unwrap();
        assert_eq!(latest(d).unwrap(), Some(two.clone()));
        // A `latest` naming something other than a step folder is not followed.
        fs::write(d.join(LATEST), "../elsewhere").unwrap();
        assert_eq!(latest(d).unwrap(), Some(two));
        // `latest` wins over higher steps when it names a complete folder.
        fs::write(d.join(LATEST), "step-0000001").unwrap();
        assert_eq!(latest(d).unwrap(), Some(d.join("step-0000001")));
    }

    #[test]
    fn saving_a_step_again_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let dims = llama();
        let (params, _, path) = save_random(dir.path(), &dims, 5);
        let w = random(&params, 99);
        let again = save(
            dir.path(),
            &dims,
            &params,
            &w,
            &optimizer(&params),
            &meta(5),
        )
        .unwrap();
        assert_eq!(again, path);
        assert_eq!(bits(&load(&path, &dims, &params).unwrap().0), bits(&w));
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let mut left = left;
        left.sort();
        assert_eq!(left, vec!["latest", "step-0000005"]);
        assert_eq!(
            fs::read_to_string(dir.path().join(LATEST)).unwrap(),
            "step-0000005\n"
        );
    }

    #[test]
    fn loading_another_model_names_the_tensor_and_shapes() {
        let dir = tempfile::tempdir().unwrap();
        let (_, _, path) = save_random(dir.path(), &gpt2(), 0);
        let err = |d: Dims| {
            let params = Params::new(&d);
            load(&path, &d, &params).unwrap_err().to_string()
        };
        let e = err(Dims { ffn: 16, ..gpt2() });
        assert!(
            e.contains(
                "`transformer.h.0.mlp.c_fc.weight` has shape [8, 32], the model needs [8, 16]"
            ),
            "{e}"
        );
        let e = err(Dims {
            layers: 3,
            ..gpt2()
        });
        assert!(
            e.contains("missing tensor `transformer.h.2.ln_1.weight`"),
            "{e}"
        );
        let e = err(Dims {
            layers: 1,
            ..gpt2()
        });
        assert!(e.contains("unexpected tensor `transformer.h.1."), "{e}");
        let e = err(llama());
        assert!(
            e.contains("unexpected tensor") && e.contains("LlamaForCausalLM"),
            "{e}"
        );
    }

    #[test]
    fn half_precision_hugging_face_weights_load() {
        // A checkpoint from elsewhere: the same names in bf16, no optimizer state.
        let dims = gpt2();
        let dir = tempfile::tempdir().unwrap();
        let (params, w, path) = save_random(dir.path(), &dims, 0);
        let bytes = fs::read(path.join(MODEL)).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let converted: Vec<(String, Vec<u8>, Vec<usize>)> = st
            .tensors()
            .into_iter()
            .map(|(name, t)| {
                let v = values(&path, &name, &t).unwrap();
                let b = v
                    .iter()
                    .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
                    .collect();
                (name, b, t.shape().to_vec())
            })
            .collect();
        let views: Vec<_> = converted
            .iter()
            .map(|(n, b, s)| {
                (
                    n.clone(),
                    TensorView::new(Dtype::BF16, s.clone(), b).unwrap(),
                )
            })
            .collect();
        safetensors::serialize_to_file(views, None, &path.join(MODEL)).unwrap();
        fs::remove_dir_all(path.join(OPTIMIZER_DIR)).unwrap();
        let (back, opt, _) = load(&path, &dims, &params).unwrap();
        assert!(opt.is_none());
        for p in &params.list {
            for i in p.offset..p.offset + p.numel() {
                assert_eq!(back[i], half::bf16::from_f32(w[i]).to_f32(), "{}", p.name);
            }
        }
    }
}
