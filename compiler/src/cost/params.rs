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
    /// The MLP of one expert (sharded by tp; experts spread by ep).
    pub mlp_per_expert: f64,
    /// The MoE router (replicated).
    pub router: f64,
    /// Norm weights (replicated across tp).
    pub norms: f64,
}

impl LayerParams {
    pub fn total(&self, experts: u64) -> f64 {
        self.attention + self.mlp_per_expert * experts as f64 + self.router + self.norms
    }
}

pub fn layer_params(m: &Model) -> LayerParams {
    let h = m.hidden as f64;
    let kv = (m.kv_heads * m.head_dim()) as f64;
    let f = m.ffn_hidden as f64;
    let b = if m.bias { 1.0 } else { 0.0 };
    let attention = h * h + 2.0 * h * kv + h * h + b * (h + 2.0 * kv + h);
    let mlp_per_expert = match m.mlp {
        Mlp::Gelu => 2.0 * h * f + b * (f + h),
        Mlp::Swiglu => 3.0 * h * f + b * (2.0 * f + h),
    };
    let router = if m.experts > 1 {
        h * m.experts as f64
    } else {
        0.0
    };
    let norms = 2.0 * norm_params(m);
    LayerParams {
        attention,
        mlp_per_expert,
        router,
        norms,
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

pub fn total_params(m: &Model) -> f64 {
    layer_params(m).total(m.experts) * m.layers as f64 + embedding_params(m) + head_params(m)
}

/// Forward FLOPs of one layer for one token, matrix products only, with the attention
/// core over `seq` keys.
pub fn layer_forward_flops_per_token(m: &Model, seq: f64) -> f64 {
    let p = layer_params(m);
    let h = m.hidden as f64;
    let proj = 2.0 * (p.attention + p.mlp_per_expert * m.top_k as f64 + p.router);
    let core = 4.0 * seq * h;
    proj + core
}

/// Model FLOPs of one optimizer step (forward and backward, no recompute).
pub fn flops_per_step(m: &Model, global_batch: u64) -> f64 {
    let s = m.seq_len as f64;
    let tokens = global_batch as f64 * s;
    let layers = layer_forward_flops_per_token(m, s) * m.layers as f64;
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
            rope_theta: 10000.0,
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
                rope_theta: 500000.0,
            }
        };
        let l70 = total_params(&to_model("llama3-70b")) / 1e9;
        assert!((l70 - 70.55).abs() < 0.1, "{l70}");
        let l8 = total_params(&to_model("llama3-8b")) / 1e9;
        assert!((l8 - 8.03).abs() < 0.02, "{l8}");
        let mx = total_params(&to_model("mixtral-8x7b")) / 1e9;
        assert!((mx - 46.7).abs() < 0.1, "{mx}");
    }
}
