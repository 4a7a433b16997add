//! The training script planc writes beside the torchrun and DeepSpeed launches when the plan
//! names no `job.entrypoint` (`templates/train.py.j2`): the plan's model from `transformers`
//! (GPT-2 or Llama, the two layouts `planc run` also writes Hugging Face checkpoints for),
//! DDP, FSDP2 or the DeepSpeed engine as the plan's ZeRO stage and framework say, and the
//! plan's training values as the defaults of the flags the launch passes.
//!
//! The script runs data parallelism only (its model code has no tensor, pipeline, context or
//! expert split): a plan that needs more is refused here (P0706) with the way out, rather
//! than run as another layout than the one `planc check` priced.

use planc_compiler::plan::{
    Attention, Framework, Mlp, Norm, Offload, Plan, Position, Precision, Recompute,
};
use serde::Serialize;

use crate::{args, EmitError, Target};

/// What `train.py.j2` needs beyond the plan itself. Values destined for Python source are
/// Python literals already (`model_config`, `defaults`).
#[derive(Clone, Debug, Serialize)]
pub struct Script {
    /// `torch` or `deepspeed`.
    pub framework: &'static str,
    /// `gpt2` or `llama`.
    pub family: &'static str,
    pub family_class: &'static str,
    /// How the ranks share the model, in words for the script's doc.
    pub wrapper_text: &'static str,
    pub precision: &'static str,
    pub offload: &'static str,
    pub recompute: &'static str,
    /// transformers' `attn_implementation`.
    pub attention: &'static str,
    /// numpy's name for the token file's integers.
    pub token_dtype: &'static str,
    pub model_config: Vec<(&'static str, String)>,
    pub defaults: Vec<(&'static str, String)>,
    pub notes: Vec<String>,
}

/// Whether `target` writes `train.py` for a job of `framework` naming `entrypoint`.
pub fn wanted(target: Target, framework: Framework, entrypoint: Option<&str>) -> bool {
    entrypoint.is_none()
        && matches!(target, Target::Torchrun | Target::Deepspeed)
        && matches!(framework, Framework::Torch | Framework::Deepspeed)
}

/// The script's settings for the plan, or why the generated script cannot train it.
pub fn script(
    plan: &Plan,
    framework: Framework,
    target: Target,
    checkpoint_dir: Option<&str>,
    plan_file: &str,
) -> Result<Script, EmitError> {
    let m = &plan.model;
    let p = &plan.parallel;
    let t = &plan.train;
    let r = &t.run;
    let refuse = |what: String| {
        Err(EmitError::Unsupported {
            target,
            reason: format!(
                "{what}: the training script planc generates cannot run it; name your own \
                 script with `job {{ entrypoint = \"...\" }}`"
            ),
            at: None,
        })
    };
    for (name, v) in [("tp", p.tp), ("pp", p.pp), ("cp", p.cp), ("ep", p.ep)] {
        if v > 1 {
            return refuse(format!(
                "{name} = {v} (the generated script splits data only; --target torchtitan or \
                 megatron runs model parallelism)"
            ));
        }
    }
    if m.experts > 1 {
        return refuse(format!("a mixture of {} experts", m.experts));
    }
    if t.precision == Precision::Fp8 {
        return refuse("precision = fp8 (it needs Transformer Engine or torchao)".into());
    }
    if m.windowed_layers() > 0 {
        return refuse(format!(
            "sliding_window = {} (transformers' GPT-2 and Llama attend every layer over the \
             whole sequence)",
            m.sliding_window.unwrap_or_default()
        ));
    }
    if framework == Framework::Torch && p.offload == Offload::Optimizer {
        return refuse(
            "offload = optimizer with PyTorch (FSDP2 offloads parameters, gradients and the \
             optimizer together: `offload = params`, or the deepspeed framework)"
                .into(),
        );
    }
    if framework == Framework::Torch && p.offload == Offload::Params && p.zero < 2 {
        return refuse(format!(
            "offload = params with zero = {} (FSDP2 offloads sharded parameters: zero = 3)",
            p.zero
        ));
    }
    let family = match (m.norm, m.position, m.mlp) {
        (Norm::Layernorm, Position::Learned, Mlp::Gelu)
            if m.bias && m.kv_heads == m.heads && m.attention_width() == m.hidden =>
        {
            "gpt2"
        }
        (Norm::Rmsnorm, Position::Rope, Mlp::Swiglu) => "llama",
        _ => {
            return refuse(format!(
                "norm = {}, position = {}, mlp = {}, bias = {}, kv_heads {} of {} heads of {} \
                 (transformers' GPT-2 is layernorm + learned + gelu with biases, no grouped \
                 query attention and heads of hidden / heads; its Llama is rmsnorm + rope + \
                 swiglu)",
                m.norm, m.position, m.mlp, m.bias, m.kv_heads, m.heads, m.head_dim
            ))
        }
    };
    let mut notes = Vec::new();
    let b = |v: bool| if v { "True" } else { "False" }.to_string();
    let model_config = if family == "gpt2" {
        vec![
            ("vocab_size", m.vocab.to_string()),
            ("n_positions", m.seq_len.to_string()),
            ("n_embd", m.hidden.to_string()),
            ("n_layer", m.layers.to_string()),
            ("n_head", m.heads.to_string()),
            ("n_inner", m.ffn_hidden.to_string()),
            ("activation_function", "\"gelu_new\"".into()),
            ("layer_norm_epsilon", "1e-5".into()),
            ("tie_word_embeddings", b(m.tied_embeddings)),
        ]
    } else {
        if t.dropout > 0.0 {
            notes.push(
                "transformers' Llama has attention dropout only: the hidden dropout of the \
                 plan is not applied"
                    .into(),
            );
        }
        vec![
            ("vocab_size", m.vocab.to_string()),
            ("hidden_size", m.hidden.to_string()),
            ("intermediate_size", m.ffn_hidden.to_string()),
            ("num_hidden_layers", m.layers.to_string()),
            ("num_attention_heads", m.heads.to_string()),
            ("num_key_value_heads", m.kv_heads.to_string()),
            ("head_dim", m.head_dim.to_string()),
            ("max_position_embeddings", m.seq_len.to_string()),
            ("rope_theta", py_float(m.rope_theta)),
            ("rms_norm_eps", "1e-5".into()),
            ("hidden_act", "\"silu\"".into()),
            ("attention_bias", b(m.bias)),
            ("mlp_bias", b(m.bias)),
            ("tie_word_embeddings", b(m.tied_embeddings)),
        ]
    };
    if p.recompute == Recompute::Selective {
        // Megatron-LM's selective recompute redoes the attention core, whose s×s scores a
        // flash kernel never stores: with flash attention there is nothing left to recompute.
        notes.push(if t.attention == Attention::Flash {
            "recompute = selective: transformers has no selective recompute; with flash \
             attention (SDPA) the attention scores are not kept anyway"
                .to_string()
        } else {
            "recompute = selective: transformers has no selective recompute, so the script \
             keeps every activation (more memory than planc priced)"
                .to_string()
        });
    }
    if framework == Framework::Torch && p.zero == 2 {
        notes.push(
            "zero = 2 is FSDP2 with reshard_after_forward=False: parameters stay gathered \
             between forward and backward, gradients and optimizer state are sharded"
                .into(),
        );
    }
    let data = r.data.as_deref().map(|d| data_path(plan_file, d));
    let steps = if t.tokens.is_some() {
        args::train_iters(plan).unwrap_or(r.steps)
    } else {
        r.steps
    };
    let defaults = vec![
        ("micro_batch_size", p.micro_batch.to_string()),
        ("global_batch_size", t.global_batch.to_string()),
        ("lr", py_float(r.lr)),
        ("min_lr", py_float(r.min_lr)),
        ("lr_schedule", py_str(r.lr_schedule.as_str())),
        ("warmup_steps", r.warmup_steps.to_string()),
        ("steps", steps.to_string()),
        ("weight_decay", py_float(r.weight_decay)),
        ("grad_clip", py_float(r.grad_clip)),
        ("adam_beta1", py_float(r.adam_beta1)),
        ("adam_beta2", py_float(r.adam_beta2)),
        ("adam_eps", py_float(r.adam_eps)),
        ("seed", r.seed.to_string()),
        ("precision", py_str(t.precision.as_str())),
        ("dropout", py_float(t.dropout)),
        ("data", data.as_deref().map_or("None".into(), py_str)),
        ("save", checkpoint_dir.map_or("None".into(), py_str)),
        ("save_interval", args::SAVE_INTERVAL.min(steps).to_string()),
        (
            "log_interval",
            if steps <= 100 { 1 } else { 10 }.to_string(),
        ),
    ];
    Ok(Script {
        framework: if framework == Framework::Deepspeed {
            "deepspeed"
        } else {
            "torch"
        },
        family,
        family_class: if family == "gpt2" {
            "GPT2LMHeadModel"
        } else {
            "LlamaForCausalLM"
        },
        wrapper_text: match (framework, p.zero) {
            (Framework::Deepspeed, _) => "the DeepSpeed engine (ZeRO as ds_config.json says)",
            (_, 0) => "DistributedDataParallel",
            (_, 1) => "DistributedDataParallel and ZeroRedundancyOptimizer (ZeRO-1)",
            (_, 2) => "FSDP2 (fully_shard per block, parameters kept after forward: ZeRO-2)",
            _ => "FSDP2 (fully_shard per block, then the root: ZeRO-3)",
        },
        precision: t.precision.as_str(),
        offload: p.offload.as_str(),
        recompute: p.recompute.as_str(),
        attention: match t.attention {
            Attention::Flash => "sdpa",
            Attention::Standard => "eager",
        },
        token_dtype: if m.vocab <= 65_536 {
            "uint16"
        } else {
            "uint32"
        },
        model_config,
        defaults,
        notes,
    })
}

/// `train.data` is relative to the plan file; the script gets it as seen from where `planc
/// emit` was given the plan.
pub(crate) fn data_path(plan_file: &str, data: &str) -> String {
    let d = std::path::Path::new(data);
    if d.is_absolute() {
        return data.to_string();
    }
    match std::path::Path::new(plan_file).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(d).display().to_string(),
        _ => data.to_string(),
    }
}

/// A float as Python reads it back exactly (Rust's shortest round-trip form).
pub(crate) fn py_float(v: f64) -> String {
    if v.is_finite() {
        format!("{v:?}")
    } else if v.is_nan() {
        "float(\"nan\")".into()
    } else if v > 0.0 {
        "float(\"inf\")".into()
    } else {
        "float(\"-inf\")".into()
    }
}

/// A Python string literal (JSON's escapes are Python's).
pub fn py_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_literals() {
        assert_eq!(py_float(3e-4), "0.0003");
        assert_eq!(py_float(1e-8), "1e-8");
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_str("a\"b\\c\n"), r#""a\"b\\c\n""#);
        assert_eq!(data_path("examples/x.tp", "tok.bin"), "examples/tok.bin");
        assert_eq!(data_path("x.tp", "tok.bin"), "tok.bin");
        assert_eq!(data_path("examples/x.tp", "/d/tok.bin"), "/d/tok.bin");
    }
}
