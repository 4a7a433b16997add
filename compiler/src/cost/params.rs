//! Parameter counts and model FLOPs of a decoder-only transformer.
//!
//! FLOPs count multiply-adds as two and the attention score and value products over the
//! full (unmasked) sequence, as the published MFU figures do (Korthikanti et al. 2022:
//! 72·B·s·l·h²·(1 + s/6h + V/12lh) for GPT-3-shaped models).

use crate::plan::{Mlp, Model, Norm, Position};

/// Parameters of one transformer layer, split by what parallelism shards them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerParams {
    /// Attention projections (sharded by tp).
    pub attention: f64,
    /// The MLP of one routed expert, of `expert_ffn_hidden` (sharded by tp; experts spread
    /// by ep); a dense model's MLP.
    pub mlp_per_expert: f64,
    /// The shared experts' MLP (sharded by tp, on every expert-parallel rank).
    pub shared: f64,
    /// The MoE router (replicated).
    pub router: f64,
    /// Norm weights (replicated across tp).
    pub norms: f64,
    /// The MLP of a dense layer, of `ffn_hidden` (an MoE model's first dense layers).
    pub dense_mlp: f64,
}

impl LayerParams {
    /// A layer with `experts` of its routed experts (all of them, the active ones, or an
    /// expert-parallel rank's).
    pub fn total(&self, experts: u64) -> f64 {
        self.attention
            + self.mlp_per_expert * experts as f64
            + self.shared
            + self.router
            + self.norms
    }

    /// A layer whose MLP is dense.
    pub fn dense_total(&self) -> f64 {
        self.attention + self.dense_mlp + self.norms
    }
}

fn mlp_params(m: &Model, f: f64) -> f64 {
    let h = m.hidden as f64;
    let b = if m.bias { 1.0 } else { 0.0 };
    match m.mlp {
        Mlp::Gelu => 2.0 * h * f + b * (f + h),
        Mlp::Swiglu => 3.0 * h * f + b * (2.0 * f + h),
    }
}

pub fn layer_params(m: &Model) -> LayerParams {
    let h = m.hidden as f64;
    let q = m.attention_width() as f64;
    let kv = m.kv_width() as f64;
    let b = if m.bias { 1.0 } else { 0.0 };
    // Query, key and value projections from h, the output projection from the heads back
    // to h; q = h unless a head is not h/heads wide.
    let attention = h * q + 2.0 * h * kv + q * h + b * (q + 2.0 * kv + h);
    let dense_mlp = mlp_params(m, m.ffn_hidden as f64);
    let (mlp_per_expert, shared, router) = if m.is_moe() {
        let shared = if m.shared_experts > 0 {
            mlp_params(m, (m.shared_experts * m.expert_ffn_hidden) as f64)
        } else {
            0.0
        };
        (
            mlp_params(m, m.expert_ffn_hidden as f64),
            shared,
            h * m.experts as f64,
        )
    } else {
        (dense_mlp, 0.0, 0.0)
    };
    let norms = 2.0 * norm_params(m);
    LayerParams {
        attention,
        mlp_per_expert,
        shared,
        router,
        norms,
        dense_mlp,
    }
}

fn norm_params(m: &Model) -> f64 {
    match m.norm {
        Norm::Layernorm => 2.0 * m.hidden as f64,
        Norm::Rmsnorm => m.hidden as f64,
    }
}

/// Input embedding (word + learned positions).
pub fn embedding_params(m: &Model) -> f64 {
    let pos = if m.position == Position::Learned {
        m.seq_len * m.hidden
    } else {
        0
    };
    (m.vocab * m.hidden + pos) as f64
}

/// Output layer (a separate matrix only when embeddings are untied) and the final norm.
pub fn head_params(m: &Model) -> f64 {
    let out = if m.tied_embeddings {
        0
    } else {
        m.vocab * m.hidden
    };
    out as f64 + norm_params(m)
}

/// Layers whose MLP is dense: every layer of a dense model, an MoE model's first ones.
fn dense_layers(m: &Model) -> f64 {
    (m.layers - m.moe_layers()) as f64
}

/// All parameters: every expert of every MoE layer.
pub fn total_params(m: &Model) -> f64 {
    let lp = layer_params(m);
    lp.total(m.experts) * m.moe_layers() as f64
        + lp.dense_total() * dense_layers(m)
        + embedding_params(m)
        + head_params(m)
}

/// Parameters one token runs through: its `top_k` routed experts (and the shared ones) in
/// an MoE layer. Equal to [`total_params`] for a dense model.
pub fn active_params(m: &Model) -> f64 {
    let lp = layer_params(m);
    lp.total(m.top_k) * m.moe_layers() as f64
        + lp.dense_total() * dense_layers(m)
        + embedding_params(m)
        + head_params(m)
}

/// Forward FLOPs of one MoE layer (the model's usual layer; a dense model's layer) for one
/// token, matrix products only, with the attention core over `seq` keys: the active
/// experts only.
pub fn layer_forward_flops_per_token(m: &Model, seq: f64) -> f64 {
    let p = layer_params(m);
    // Scores and weighted sum: 2 multiply-adds per key and query-head channel each, over
    // the keys a query attends (the whole sequence, or a sliding window).
    let core = 4.0 * m.mean_key_span(seq) * m.attention_width() as f64;
    if !m.is_moe() {
        return 2.0 * (p.attention + p.dense_mlp) + core;
    }
    2.0 * (p.attention + p.mlp_per_expert * m.top_k as f64 + p.shared + p.router) + core
}

/// Model FLOPs of one optimizer step (forward and backward, no recompute), from the active
/// parameters: MFU of an MoE model counts the experts a token runs, not all of them.
pub fn flops_per_step(m: &Model, global_batch: u64) -> f64 {
    let s = m.seq_len as f64;
    let tokens = global_batch as f64 * s;
    let p = layer_params(m);
    let dense =
        2.0 * (p.attention + p.dense_mlp) + 4.0 * m.mean_key_span(s) * m.attention_width() as f64;
    let layers = if m.is_moe() {
        layer_forward_flops_per_token(m, s) * m.moe_layers() as f64 + dense * dense_layers(m)
    } else {
        dense * m.layers as f64
    };
    let logits = 2.0 * (m.hidden * m.vocab) as f64;
    3.0 * tokens * (layers + logits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn gpt(layers: u64, hidden: u64, heads: u64) -> Model {
        Model {
            name: "gpt".into(),
            layers,
            hidden,
            heads,
            kv_heads: heads,
            head_dim: hidden / heads,
            ffn_hidden: 4 * hidden,
            vocab: 51200,
            seq_len: 2048,
            mlp: Mlp::Gelu,
            norm: Norm::Layernorm,
            position: Position::Learned,
            bias: true,
            tied_embeddings: true,
            experts: 1,
            top_k: 1,
            expert_ffn_hidden: 4 * hidden,
            shared_experts: 0,
            first_dense_layers: 0,
            capacity_factor: None,
            moe_imbalance: None,
            rope_theta: 10000.0,
            sliding_window: None,
            full_attention_every: None,
        }
    }

    #[test]
    fn gpt3_has_175_billion_parameters() {
        let p = total_params(&gpt(96, 12288, 96));
        assert!((p / 1e9 - 174.6).abs() < 0.5, "{p}");
    }

    #[test]
    fn flops_match_the_published_formula() {
        // 72·B·s·l·h²·(1 + s/6h + V/12lh), Korthikanti et al. 2022.
        let (b, s, l, h, v) = (64.0, 2048.0, 96.0, 12288.0, 51200.0);
        let expected = 72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h));
        let got = flops_per_step(&gpt(96, 12288, 96), 64);
        // Biases add a few parts per million; the formula ignores them.
        assert!((got / expected - 1.0).abs() < 1e-3, "{got} vs {expected}");
    }

    #[test]
    fn llama3_70b_and_mixtral_parameter_counts() {
        let c = Catalog::builtin();
        let to_model = |name: &str| {
            let p = c.model(name).unwrap();
            Model {
                name: p.name.clone(),
                layers: p.layers,
                hidden: p.hidden,
                heads: p.heads,
                kv_heads: p.kv_heads.unwrap_or(p.heads),
                head_dim: p.head_dim.unwrap_or(p.hidden / p.heads),
                ffn_hidden: p.ffn_hidden.unwrap(),
                vocab: p.vocab,
                seq_len: p.seq_len,
                mlp: Mlp::Swiglu,
                norm: Norm::Rmsnorm,
                position: Position::Rope,
                bias: false,
                tied_embeddings: false,
                experts: p.experts.unwrap_or(1),
                top_k: p.top_k.unwrap_or(1),
                expert_ffn_hidden: p.ffn_hidden.unwrap(),
                shared_experts: 0,
                first_dense_layers: 0,
                capacity_factor: None,
                moe_imbalance: None,
                rope_theta: 500000.0,
                sliding_window: None,
                full_attention_every: None,
            }
        };
        let l70 = total_params(&to_model("llama3-70b")) / 1e9;
        assert!((l70 - 70.55).abs() < 0.1, "{l70}");
        let l8 = total_params(&to_model("llama3-8b")) / 1e9;
        assert!((l8 - 8.03).abs() < 0.02, "{l8}");
        let mixtral = to_model("mixtral-8x7b");
        let mx = total_params(&mixtral) / 1e9;
        assert!((mx - 46.7).abs() < 0.1, "{mx}");
        // Two of eight experts a token: 12.9B active (Jiang et al. 2024, §2).
        let active = active_params(&mixtral) / 1e9;
        assert!((active - 12.9).abs() < 0.1, "{active}");
        assert_eq!(active_params(&to_model("llama3-8b")), l8 * 1e9);
    }

    /// A model as `check` resolves it from a `model` block.
    fn resolved(model: &str) -> Model {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ {model} }}
             train {{ global_batch = 8 }}
             parallel {{ tp = 8 }}"
        );
        let checked = crate::check::check_source("t.tp", &text);
        checked
            .spec
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
            .model
    }

    #[test]
    fn qwen3_32b_counts_heads_of_128_on_a_hidden_size_of_5120() {
        // Qwen/Qwen3-32B's model card: 32.8B parameters, 31.2B without the embeddings
        // (input and untied output). 64 heads of 128 make the attention 8192 wide, not the
        // 5120 that hidden / heads implies (which would give 29.5B).
        let m = resolved("preset = \"qwen3-32b\"");
        assert_eq!((m.head_dim, m.attention_width()), (128, 8192));
        let total = total_params(&m);
        let embeddings = 2.0 * (m.vocab * m.hidden) as f64;
        assert!((total / 1e9 - 32.8).abs() < 0.05, "{total}");
        assert!(((total - embeddings) / 1e9 - 31.2).abs() < 0.05, "{total}");
        // Only the q/k norms (2 × 128 weights a layer) are missing from the exact count
        // of the safetensors: 32,762,123,264.
        assert_eq!(total as u64 + 64 * 256, 32_762_123_264);
        // The attention core's FLOPs follow the heads' width too.
        let narrow = Model {
            head_dim: 80,
            ..m.clone()
        };
        let core = |m: &Model| {
            layer_forward_flops_per_token(m, 4096.0)
                - 2.0 * (layer_params(m).attention + layer_params(m).dense_mlp)
        };
        assert!((core(&m) / core(&narrow) - 128.0 / 80.0).abs() < 1e-12);
    }

    #[test]
    fn head_dim_defaults_to_hidden_over_heads_and_a_preset_keeps_its_own() {
        let m = resolved("layers = 2, hidden = 4096, heads = 32, vocab = 100, seq_len = 128");
        assert_eq!(m.head_dim, 128);
        let m = resolved(
            "layers = 2, hidden = 3072, heads = 16, head_dim = 256, vocab = 100, seq_len = 128",
        );
        assert_eq!(m.attention_width(), 4096);
        // The preset's 128 belongs to its 64 heads: other heads take hidden / heads.
        assert_eq!(resolved("preset = \"qwen3-32b\", heads = 32").head_dim, 160);
        assert_eq!(
            resolved("preset = \"qwen3-32b\", head_dim = 64").head_dim,
            64
        );
        assert_eq!(resolved("preset = \"llama3-8b\"").head_dim, 128);
    }

    #[test]
    fn a_deepseek_v3_shaped_model_counts_its_shared_experts_and_dense_layers() {
        // DeepSeek-V3 (arXiv 2412.19437, §4.2): 61 layers, hidden 7168, 256 routed experts
        // of 2048 and one shared, top 8, the first 3 layers dense with an MLP of 18432,
        // vocabulary 129280. Attention as 128 standard heads (MLA is not modelled: its
        // 187M parameters a layer become 4h² = 206M), so the totals land near the report's
        // 671B (37B active) rather than on them.
        let mut m = gpt(61, 7168, 128);
        m.vocab = 129280;
        m.seq_len = 4096;
        m.mlp = Mlp::Swiglu;
        m.norm = Norm::Rmsnorm;
        m.position = Position::Rope;
        m.bias = false;
        m.tied_embeddings = false;
        m.ffn_hidden = 18432;
        m.experts = 256;
        m.top_k = 8;
        m.expert_ffn_hidden = 2048;
        m.shared_experts = 1;
        m.first_dense_layers = 3;
        let (total, active) = (total_params(&m) / 1e9, active_params(&m) / 1e9);
        assert!((total - 672.0).abs() < 5.0, "{total}");
        assert!((active - 38.0).abs() < 2.0, "{active}");
        // The dense layers count their own MLP: three of them less 3 MoE layers' worth.
        let lp = layer_params(&m);
        let all_moe = lp.total(256) * 61.0 + embedding_params(&m) + head_params(&m);
        let want = all_moe - 3.0 * (lp.total(256) - lp.dense_total());
        assert!((total_params(&m) - want).abs() < 1.0);
        // Model FLOPs follow the active parameters: 6 per active parameter a token (the
        // norms' aside), plus the attention core.
        let tokens = 2.0 * 4096.0;
        let core = 3.0 * 4.0 * 4096.0 * 7168.0 * 61.0 * tokens;
        let six_n = 6.0 * (active_params(&m) - embedding_params(&m)) * tokens;
        assert!((flops_per_step(&m, 2) / (six_n + core) - 1.0).abs() < 1e-4);
    }
}
