//! Models as their configs describe them: a Hugging Face `config.json` (Llama, Mistral,
//! Mixtral, Qwen, Gemma, GPT-2 and DeepSeek field names), the model of planc's own
//! generated `train.py` (`MODEL_CONFIG`, the same fields) and of its torchtitan flavor module
//! (`DIM`, `LAYERS`, …), and published model names (`meta-llama/Llama-2-70b-hf`) as planc's
//! presets.

use serde_json::Value;

use super::draft::{ident, Origin, V};
use super::{Ctx, ImportError, Input};

/// `block.attr` a config.json key goes to.
type Place = Option<(&'static str, &'static str)>;

/// Keys of a config.json: where each goes (`None`: read by the code under that name, or
/// listed with the reason).
const KEYS: &[(&str, Place, &str)] = &[
    ("hidden_size", Some(("model", "hidden")), ""),
    ("n_embd", Some(("model", "hidden")), ""),
    ("num_hidden_layers", Some(("model", "layers")), ""),
    ("n_layer", Some(("model", "layers")), ""),
    ("num_attention_heads", Some(("model", "heads")), ""),
    ("n_head", Some(("model", "heads")), ""),
    ("num_key_value_heads", Some(("model", "kv_heads")), ""),
    ("intermediate_size", Some(("model", "ffn_hidden")), ""),
    ("n_inner", Some(("model", "ffn_hidden")), ""),
    ("vocab_size", Some(("model", "vocab")), ""),
    ("head_dim", Some(("model", "head_dim")), ""),
    ("rope_theta", Some(("model", "rope_theta")), ""),
    ("num_local_experts", Some(("model", "experts")), ""),
    ("num_experts", Some(("model", "experts")), ""),
    ("n_routed_experts", Some(("model", "experts")), ""),
    ("num_experts_per_tok", Some(("model", "top_k")), ""),
    (
        "moe_intermediate_size",
        Some(("model", "expert_ffn_hidden")),
        "",
    ),
    ("n_shared_experts", Some(("model", "shared_experts")), ""),
    (
        "first_k_dense_replace",
        Some(("model", "first_dense_layers")),
        "",
    ),
    ("max_position_embeddings", None, "context"),
    ("n_positions", None, "context"),
    ("hidden_act", None, "act"),
    ("activation_function", None, "act"),
    ("rms_norm_eps", None, "rms"),
    ("layer_norm_eps", None, "ln"),
    ("layer_norm_epsilon", None, "ln"),
    ("tie_word_embeddings", None, "tie"),
    ("attention_bias", None, "bias"),
    ("mlp_bias", None, "bias"),
    ("shared_expert_intermediate_size", None, "shared"),
    ("attention_dropout", None, "dropout"),
    ("resid_pdrop", None, "dropout"),
    ("embd_pdrop", None, "dropout"),
    ("attn_pdrop", None, "dropout"),
    ("hidden_dropout", None, "dropout"),
    ("model_type", None, "read"),
    ("architectures", None, "read"),
    (
        "torch_dtype",
        None,
        "the stored weights' type, not the training precision (train.precision)",
    ),
    (
        "dtype",
        None,
        "the stored weights' type, not the training precision (train.precision)",
    ),
    (
        "rope_scaling",
        None,
        "rope scaling changes positions, not the step's cost",
    ),
    ("sliding_window", None, "window"),
    ("use_sliding_window", None, "window"),
    ("max_window_layers", None, "window"),
    ("layer_types", None, "window"),
    ("sliding_window_pattern", None, "window"),
];

/// Fields of a config.json that name no architecture (token ids, initialisation, caching).
const IGNORED: &[&str] = &[
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "initializer_range",
    "use_cache",
    "transformers_version",
    "pretraining_tp",
    "_name_or_path",
    "output_router_logits",
    "router_aux_loss_coef",
    "router_jitter_noise",
    "scale_attn_weights",
    "summary_type",
    "summary_use_proj",
    "summary_activation",
    "summary_proj_to_labels",
    "summary_first_dropout",
    "task_specific_params",
    "reorder_and_upcast_attn",
    "scale_attn_by_inverse_layer_idx",
    "n_ctx",
    "decoder_sparse_step",
    "norm_topk_prob",
    "routed_scaling_factor",
    "topk_method",
    "n_group",
    "topk_group",
    "scoring_func",
    "aux_loss_alpha",
    "seq_aux",
    "ep_size",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "num_nextn_predict_layers",
    "quantization_config",
    "mlp_only_layers",
    "final_logit_softcapping",
    "attn_logit_softcapping",
    "query_pre_attn_scalar",
    "layer_types",
    "auto_map",
    "model_name",
    "tokenizer_class",
    "is_decoder",
    "id2label",
    "label2id",
];

pub fn is_config(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    [
        "hidden_size",
        "num_hidden_layers",
        "n_embd",
        "n_layer",
        "model_type",
        "architectures",
    ]
    .iter()
    .any(|k| o.contains_key(*k))
}

pub fn read(cx: &mut Ctx, input: &Input) -> Result<(), ImportError> {
    let v: Value = serde_json::from_str(input.text.trim_start_matches('\u{feff}'))
        .map_err(|e| ImportError::Invalid(input.name.clone(), format!("not JSON: {e}")))?;
    let Some(o) = v.as_object() else {
        return Err(ImportError::Invalid(
            input.name.clone(),
            "not a JSON object".into(),
        ));
    };
    let fields: Vec<(String, Value, Option<usize>)> = o
        .iter()
        .map(|(k, v)| {
            let line = input
                .text
                .lines()
                .position(|l| l.contains(&format!("\"{k}\"")))
                .map(|i| i + 1);
            (k.clone(), v.clone(), line)
        })
        .collect();
    model(cx, &fields, &input.name);
    Ok(())
}

/// The model block from a config's fields (name, value, line).
pub fn model(cx: &mut Ctx, fields: &[(String, Value, Option<usize>)], file: &str) {
    let get = |k: &str| fields.iter().find(|f| f.0 == k).map(|f| &f.1);
    let model_type = get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let gpt2 = model_type == "gpt2" || get("n_embd").is_some();
    let mut dropout = Vec::new();
    for (k, v, line) in fields {
        let from = Origin::new(file, *line, k.clone());
        let shown = Some(match v {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        });
        let d = &mut cx.draft;
        let Some((_, to, why)) = KEYS.iter().find(|x| x.0 == k) else {
            let why = if IGNORED.contains(&k.as_str()) {
                "not the architecture's size or shape (token ids, initialisation, routing details)"
            } else {
                "a config.json field planc does not read"
            };
            d.unplaced(from, shown, why);
            continue;
        };
        if let Some((b, a)) = to {
            match v {
                Value::Null if *a == "ffn_hidden" => {
                    d.unplaced(from, shown, "unset: 4 × hidden, planc's default")
                }
                Value::Number(n) if *a == "rope_theta" => {
                    d.set(b, a, V::Float(n.as_f64().unwrap_or(10000.0)), from)
                }
                Value::Number(n) if n.as_u64().is_some() => {
                    d.set(b, a, V::Int(n.as_u64().unwrap_or(0)), from)
                }
                _ => d.unplaced(from, shown, format!("not a value of {b}.{a}")),
            }
            continue;
        }
        match *why {
            "context" => match v.as_u64() {
                Some(n) => cx.pending.context = Some((n, from)),
                None => d.unplaced(from, shown, "not a length"),
            },
            "act" => match v.as_str().unwrap_or("") {
                "silu" | "swish" if !gpt2 => d.set("model", "mlp", V::Ident("swiglu".into()), from),
                a if a.starts_with("gelu") => {
                    // Gemma's MLP is gated (GeGLU): priced as SwiGLU, the same products.
                    let gated = model_type.starts_with("gemma");
                    d.set(
                        "model",
                        "mlp",
                        V::Ident(if gated { "swiglu" } else { "gelu" }.into()),
                        from,
                    );
                    if gated {
                        d.note("model.mlp = swiglu: Gemma's GeGLU is gated like SwiGLU (three products), priced as it");
                    }
                }
                _ => d.unplaced(from, shown, "planc prices GELU and SwiGLU MLPs"),
            },
            "rms" => d.set("model", "norm", V::Ident("rmsnorm".into()), from),
            "ln" => d.set("model", "norm", V::Ident("layernorm".into()), from),
            "tie" => match v.as_bool() {
                Some(b) => d.set("model", "tied_embeddings", V::Bool(b), from),
                None => d.unplaced(from, shown, "not a boolean"),
            },
            "bias" => match v.as_bool() {
                Some(b) => d.set("model", "bias", V::Bool(b), from),
                None => d.unplaced(from, shown, "not a boolean"),
            },
            "shared" => cx.pending.shared_expert_size = v.as_u64().map(|n| (n, from)),
            "dropout" => {
                if let Some(x) = v.as_f64() {
                    dropout.push(x);
                }
                d.unplaced(from, shown, "the model's dropout in its config; train.dropout is the plan's (set it when training with it)");
            }
            "read" => d.unplaced(from, shown, "read for the family's defaults"),
            "window" => {} // with the other window fields, below
            why => d.unplaced(from, shown, why),
        }
    }
    window(cx, fields, &model_type, file);
    family_defaults(cx, &model_type, gpt2, file);
    if cx.draft.model_name.is_none() && !model_type.is_empty() {
        cx.draft.model_name = Some(ident(&model_type));
    }
    let _ = dropout;
}

/// `sliding_window` with the fields that say which layers attend within it: Mistral's
/// window on every layer, Gemma 2's on every other one (transformers' `Gemma2DecoderLayer`:
/// the even layers), Gemma 3's `sliding_window_pattern`, and `layer_types` (GPT-OSS, later
/// Gemma and Qwen configs) where its full layers recur with a period.
fn window(cx: &mut Ctx, fields: &[(String, Value, Option<usize>)], model_type: &str, file: &str) {
    const WINDOW_KEYS: [&str; 5] = [
        "sliding_window",
        "use_sliding_window",
        "max_window_layers",
        "layer_types",
        "sliding_window_pattern",
    ];
    let get = |k: &str| fields.iter().find(|f| f.0 == k);
    let origin = |k: &str| Origin::new(file, get(k).and_then(|f| f.2), k.to_string());
    let shown = |k: &str| {
        get(k).map(|f| match &f.1 {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        })
    };
    let d = &mut cx.draft;
    // Every window field present and not placed, with one reason.
    let unplace_all = |d: &mut super::draft::Draft, why: &str| {
        for k in WINDOW_KEYS.iter().filter(|k| get(k).is_some()) {
            d.unplaced(origin(k), shown(k), why);
        }
    };
    let window = get("sliding_window").and_then(|f| f.1.as_u64());
    let Some(w) = window else {
        unplace_all(
            d,
            "no sliding window: every layer attends the whole sequence",
        );
        return;
    };
    if get("use_sliding_window").and_then(|f| f.1.as_bool()) == Some(false) {
        unplace_all(
            d,
            "use_sliding_window = false: every layer attends the whole sequence",
        );
        return;
    }
    if get("max_window_layers").is_some() {
        unplace_all(
            d,
            "Qwen2's max_window_layers splits the layers by depth, not by a period planc states: \
             priced as full attention",
        );
        return;
    }
    // Some(None): every layer windowed; Some(Some(n)): every nth full; None: no period.
    let (every, from) = if let Some(types) = get("layer_types").and_then(|f| f.1.as_array()) {
        let full: Vec<bool> = types
            .iter()
            .map(|t| t.as_str() == Some("full_attention"))
            .collect();
        let every = match full.iter().position(|&f| f) {
            None => Some(None),
            Some(first) => {
                let n = first + 1;
                full.iter()
                    .enumerate()
                    .all(|(i, &f)| f == ((i + 1) % n == 0))
                    .then_some(Some(n as u64))
            }
        };
        (every, Some("layer_types"))
    } else if let Some(n) = get("sliding_window_pattern").and_then(|f| f.1.as_u64()) {
        (Some(Some(n)), Some("sliding_window_pattern"))
    } else if model_type == "gemma2" {
        (Some(Some(2)), None)
    } else {
        (Some(None), None)
    };
    let Some(every) = every else {
        unplace_all(
            d,
            "layer_types mixes full and windowed layers with no period planc states: priced as \
             full attention",
        );
        return;
    };
    d.set(
        "model",
        "sliding_window",
        V::Int(w),
        origin("sliding_window"),
    );
    for k in [
        "use_sliding_window",
        "layer_types",
        "sliding_window_pattern",
    ] {
        if get(k).is_some() && (Some(k) != from || every.is_none()) {
            d.unplaced(origin(k), shown(k), "read with sliding_window");
        }
    }
    match (every, from) {
        (Some(n), Some(k)) => d.set("model", "full_attention_every", V::Int(n), origin(k)),
        (Some(n), None) => d.assume(
            "model",
            "full_attention_every",
            V::Int(n),
            Origin::new(
                file,
                None,
                format!("{model_type} default: every other layer"),
            ),
            "Gemma 2 attends within its window on the even layers, the whole sequence on the odd",
        ),
        (None, _) => {}
    }
}

/// What a family's config leaves to its defaults (transformers' `LlamaConfig` and kin).
fn family_defaults(cx: &mut Ctx, model_type: &str, gpt2: bool, file: &str) {
    let from = |k: &str| Origin::new(file, None, format!("{model_type} default: {k}"));
    let d = &mut cx.draft;
    if gpt2 {
        d.assume(
            "model",
            "mlp",
            V::Ident("gelu".into()),
            from("activation"),
            "GPT-2's MLP",
        );
        d.assume(
            "model",
            "norm",
            V::Ident("layernorm".into()),
            from("layer norm"),
            "GPT-2's norm",
        );
        d.assume(
            "model",
            "position",
            V::Ident("learned".into()),
            from("wpe"),
            "GPT-2's learned positions",
        );
        d.assume(
            "model",
            "bias",
            V::Bool(true),
            from("bias"),
            "GPT-2's linear layers have biases",
        );
        d.assume(
            "model",
            "tied_embeddings",
            V::Bool(true),
            from("tie_word_embeddings"),
            "transformers' default",
        );
        return;
    }
    let llama_like = [
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "qwen2_moe",
        "qwen3_moe",
        "deepseek_v2",
        "deepseek_v3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi3",
        "olmo2",
        "granite",
    ];
    if llama_like.contains(&model_type)
        || d.get("model", "norm") == Some(&V::Ident("rmsnorm".into()))
    {
        d.assume(
            "model",
            "position",
            V::Ident("rope".into()),
            from("rotary embeddings"),
            "rotary positions, as the family uses",
        );
        d.assume(
            "model",
            "bias",
            V::Bool(false),
            from("attention_bias"),
            "no biases in the linear layers (the family's default)",
        );
        let tied = model_type.starts_with("gemma");
        d.assume(
            "model",
            "tied_embeddings",
            V::Bool(tied),
            from("tie_word_embeddings"),
            "the family's default",
        );
        if model_type.starts_with("qwen2") {
            d.note("model.bias: Qwen2 has biases on the query, key and value projections only; planc's bias is all or none, kept none");
        }
    }
}

/// planc's generated train.py (`MODEL_CONFIG = dict(…)`) or torchtitan flavor module.
pub fn is_python_model(text: &str) -> bool {
    text.contains("MODEL_CONFIG = dict(")
        || (text.contains("register_train_spec") && text.contains("\nDIM = "))
}

/// `NAME = value` lines of a Python module (numbers, strings, True/False).
fn constants(text: &str) -> Vec<(String, String, usize)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let (k, v) = l.split_once(" = ")?;
            let k = k.trim();
            let v = v.split("  #").next().unwrap_or(v).trim().trim_matches('"');
            (k.chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
                && !l.starts_with(' '))
            .then(|| (k.to_string(), v.to_string(), i + 1))
        })
        .collect()
}

pub fn read_python(cx: &mut Ctx, input: &Input) {
    let text = &input.text;
    if let Some(start) = text.find("MODEL_CONFIG = dict(") {
        // planc's train.py: the model's Hugging Face config as keyword arguments.
        let body = &text[start..];
        let end = body.find("\n)").unwrap_or(body.len());
        let first_line = text[..start].lines().count() + 1;
        let mut fields = Vec::new();
        for (i, l) in body[..end].lines().enumerate().skip(1) {
            let Some((k, v)) = l.trim().trim_end_matches(',').split_once('=') else {
                continue;
            };
            let v = match v.trim() {
                "True" => Value::Bool(true),
                "False" => Value::Bool(false),
                "None" => Value::Null,
                s => serde_json::from_str(s)
                    .unwrap_or(Value::String(s.trim_matches('"').to_string())),
            };
            fields.push((k.trim().to_string(), v, Some(first_line + i)));
        }
        model(cx, &fields, &input.name);
        for (k, v, line) in constants(text) {
            let from = Origin::new(&input.name, Some(line), k.clone());
            match k.as_str() {
                "RECOMPUTE" if v != "none" => {
                    cx.draft.set("parallel", "recompute", V::Ident(v), from)
                }
                "ZERO" => cx.draft.set(
                    "parallel",
                    "zero",
                    V::Int(super::flags::int(&v).unwrap_or(0)),
                    from,
                ),
                "OFFLOAD" if v != "none" => cx.draft.set("parallel", "offload", V::Ident(v), from),
                "SEQ_LEN" => cx.draft.set(
                    "model",
                    "seq_len",
                    V::Int(super::flags::int(&v).unwrap_or(0)),
                    from,
                ),
                "FRAMEWORK" => cx.draft.set("job", "framework", V::Ident(v), from),
                "ATTENTION" => {
                    let a = if v == "eager" { "standard" } else { "flash" };
                    cx.draft.set("train", "attention", V::Ident(a.into()), from);
                }
                _ => {}
            }
        }
        return;
    }
    // torchtitan flavor module.
    let map = [
        ("DIM", "hidden"),
        ("LAYERS", "layers"),
        ("HEADS", "heads"),
        ("KV_HEADS", "kv_heads"),
        ("FFN_HIDDEN", "ffn_hidden"),
        ("VOCAB", "vocab"),
    ];
    for (k, v, line) in constants(text) {
        let from = Origin::new(&input.name, Some(line), k.clone());
        if let Some((_, attr)) = map.iter().find(|m| m.0 == k) {
            match super::flags::int(&v) {
                Some(n) => cx.draft.set("model", attr, V::Int(n), from),
                None => cx.draft.unplaced(from, Some(v), "not a count"),
            }
        } else if k == "ROPE_THETA" {
            if let Ok(x) = v.parse::<f64>() {
                cx.draft.set("model", "rope_theta", V::Float(x), from);
            }
        } else if k == "TIED_EMBEDDINGS" {
            cx.draft
                .set("model", "tied_embeddings", V::Bool(v == "True"), from);
        }
    }
    let from = Origin::new(&input.name, None, "torchtitan's Llama 3");
    for (attr, val) in [("mlp", "swiglu"), ("norm", "rmsnorm"), ("position", "rope")] {
        cx.draft
            .set("model", attr, V::Ident(val.into()), from.clone());
    }
    cx.draft.set("model", "bias", V::Bool(false), from);
}

/// Published model names and planc's presets of them.
const NAMES: &[(&[&str], &str)] = &[
    (&["llama-2", "70b"], "llama2-70b"),
    (&["llama-2", "13b"], "llama2-13b"),
    (&["llama-2", "7b"], "llama2-7b"),
    (&["llama2", "70b"], "llama2-70b"),
    (&["llama2", "13b"], "llama2-13b"),
    (&["llama2", "7b"], "llama2-7b"),
    (&["llama-3.2", "1b"], "llama3.2-1b"),
    (&["llama3.2", "1b"], "llama3.2-1b"),
    (&["llama-3", "405b"], "llama3-405b"),
    (&["llama-3", "70b"], "llama3-70b"),
    (&["llama-3", "8b"], "llama3-8b"),
    (&["llama3", "405b"], "llama3-405b"),
    (&["llama3", "70b"], "llama3-70b"),
    (&["llama3", "8b"], "llama3-8b"),
    (&["mixtral", "8x7b"], "mixtral-8x7b"),
    // v0.1 only: v0.2 and later attend the whole 32k context (sliding_window null).
    (&["mistral-7b-v0.1"], "mistral-7b"),
    (&["gemma-2", "9b"], "gemma2-9b"),
    (&["qwen3", "32b"], "qwen3-32b"),
];

/// planc's preset of a published model name (`meta-llama/Llama-2-70b-hf`), if it has one.
pub fn preset(name: &str) -> Option<&'static str> {
    let base = name
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(name)
        .to_ascii_lowercase();
    if base == "gpt2" {
        return Some("gpt2-124m");
    }
    if let Some(m) = planc_compiler::catalog::Catalog::builtin().model(&base) {
        return Some(m.name.as_str());
    }
    NAMES
        .iter()
        .find(|(needles, _)| needles.iter().all(|n| base.contains(n)))
        .map(|(_, p)| *p)
}

/// Sets the model from a published name: a preset when planc has one.
pub fn model_name(cx: &mut Ctx, name: &str, from: Origin) {
    match preset(name) {
        Some(p) => {
            cx.draft.set("model", "preset", V::Str(p.into()), from);
            cx.draft.model_name.get_or_insert_with(|| ident(p));
        }
        None => {
            cx.draft
                .model_name
                .get_or_insert_with(|| ident(name.rsplit('/').next().unwrap_or(name)));
            cx.draft.unplaced(from, Some(name.to_string()), "a model planc has no preset of: pass its config.json to planc import for the model block");
        }
    }
}
