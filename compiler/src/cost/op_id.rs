//! The operations' ids: every operation the cost model lists for a layer, the output layer
//! and the embedding (`cost::ops`, with what `cost::fp8` and `cost::eager` add), once, as an
//! enum. The cost model, the by-kind table (`cost::kinds`) and the runtime's trace spans
//! name an operation by its id and match on it; [`OpId::name`] is the text reports and
//! `planc run --ops` print.

use serde::{Serialize, Serializer};

/// One operation of the lists in `cost::ops`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpId {
    // A layer's operations, in the order `layer_forward` lists them (a dense MLP).
    InputNorm,
    AttentionAllGather,
    QkvProj,
    QkvSplit,
    Rope,
    CpKvExchange,
    Attention,
    AttentionCore,
    AttentionHeadsMerge,
    AttentionOutProj,
    AttentionReduce,
    AttentionResidual,
    MlpNorm,
    MlpAllGather,
    MlpUpProj,
    MlpActivation,
    MlpDownProj,
    MlpReduce,
    MlpResidual,
    // An MoE layer's MLP (`moe_mlp`).
    Router,
    RouterTopk,
    MoePermute,
    MoeDispatch,
    MoeTpAllGather,
    ExpertUpProj,
    ExpertActivation,
    ExpertDownProj,
    MoeTpReduceScatter,
    MoeCombine,
    MoeUnpermute,
    // An MoE layer's shared experts.
    SharedAllGather,
    SharedUpProj,
    SharedActivation,
    SharedDownProj,
    SharedReduce,
    // LoRA's adapter beside an adapted product (`adapter`).
    LoraA,
    LoraB,
    LoraAdd,
    // fp8 casts around the products that run in fp8 (`cost::fp8`).
    QkvProjFp8Cast,
    AttentionOutProjFp8Cast,
    MlpUpProjFp8Cast,
    MlpDownProjFp8Cast,
    SharedUpProjFp8Cast,
    SharedDownProjFp8Cast,
    ExpertUpProjFp8Cast,
    ExpertDownProjFp8Cast,
    // What a framework's unfused path launches beside the fused list (`cost::eager`).
    QkvInputCast,
    MlpInputCast,
    QkvBias,
    AttentionHeads,
    MlpDownInputCast,
    WeightCasts,
    // The output layer and the loss (`head_forward`).
    FinalNorm,
    HeadAllGather,
    Logits,
    CrossEntropy,
    LogitsInputCast,
    LogitsWeightCast,
    // The embedding (`embedding_forward`).
    Embedding,
    EmbeddingReduce,
}

impl OpId {
    /// Every id, in declaration order.
    pub const ALL: [OpId; 60] = [
        OpId::InputNorm,
        OpId::AttentionAllGather,
        OpId::QkvProj,
        OpId::QkvSplit,
        OpId::Rope,
        OpId::CpKvExchange,
        OpId::Attention,
        OpId::AttentionCore,
        OpId::AttentionHeadsMerge,
        OpId::AttentionOutProj,
        OpId::AttentionReduce,
        OpId::AttentionResidual,
        OpId::MlpNorm,
        OpId::MlpAllGather,
        OpId::MlpUpProj,
        OpId::MlpActivation,
        OpId::MlpDownProj,
        OpId::MlpReduce,
        OpId::MlpResidual,
        OpId::Router,
        OpId::RouterTopk,
        OpId::MoePermute,
        OpId::MoeDispatch,
        OpId::MoeTpAllGather,
        OpId::ExpertUpProj,
        OpId::ExpertActivation,
        OpId::ExpertDownProj,
        OpId::MoeTpReduceScatter,
        OpId::MoeCombine,
        OpId::MoeUnpermute,
        OpId::SharedAllGather,
        OpId::SharedUpProj,
        OpId::SharedActivation,
        OpId::SharedDownProj,
        OpId::SharedReduce,
        OpId::LoraA,
        OpId::LoraB,
        OpId::LoraAdd,
        OpId::QkvProjFp8Cast,
        OpId::AttentionOutProjFp8Cast,
        OpId::MlpUpProjFp8Cast,
        OpId::MlpDownProjFp8Cast,
        OpId::SharedUpProjFp8Cast,
        OpId::SharedDownProjFp8Cast,
        OpId::ExpertUpProjFp8Cast,
        OpId::ExpertDownProjFp8Cast,
        OpId::QkvInputCast,
        OpId::MlpInputCast,
        OpId::QkvBias,
        OpId::AttentionHeads,
        OpId::MlpDownInputCast,
        OpId::WeightCasts,
        OpId::FinalNorm,
        OpId::HeadAllGather,
        OpId::Logits,
        OpId::CrossEntropy,
        OpId::LogitsInputCast,
        OpId::LogitsWeightCast,
        OpId::Embedding,
        OpId::EmbeddingReduce,
    ];

    /// The operation's name in reports and `planc run --ops` (snake case).
    pub fn name(self) -> &'static str {
        match self {
            OpId::InputNorm => "input_norm",
            OpId::AttentionAllGather => "attention_all_gather",
            OpId::QkvProj => "qkv_proj",
            OpId::QkvSplit => "qkv_split",
            OpId::Rope => "rope",
            OpId::CpKvExchange => "cp_kv_exchange",
            OpId::Attention => "attention",
            OpId::AttentionCore => "attention_core",
            OpId::AttentionHeadsMerge => "attention_heads_merge",
            OpId::AttentionOutProj => "attention_out_proj",
            OpId::AttentionReduce => "attention_reduce",
            OpId::AttentionResidual => "attention_residual",
            OpId::MlpNorm => "mlp_norm",
            OpId::MlpAllGather => "mlp_all_gather",
            OpId::MlpUpProj => "mlp_up_proj",
            OpId::MlpActivation => "mlp_activation",
            OpId::MlpDownProj => "mlp_down_proj",
            OpId::MlpReduce => "mlp_reduce",
            OpId::MlpResidual => "mlp_residual",
            OpId::Router => "router",
            OpId::RouterTopk => "router_topk",
            OpId::MoePermute => "moe_permute",
            OpId::MoeDispatch => "moe_dispatch",
            OpId::MoeTpAllGather => "moe_tp_all_gather",
            OpId::ExpertUpProj => "expert_up_proj",
            OpId::ExpertActivation => "expert_activation",
            OpId::ExpertDownProj => "expert_down_proj",
            OpId::MoeTpReduceScatter => "moe_tp_reduce_scatter",
            OpId::MoeCombine => "moe_combine",
            OpId::MoeUnpermute => "moe_unpermute",
            OpId::SharedAllGather => "shared_all_gather",
            OpId::SharedUpProj => "shared_up_proj",
            OpId::SharedActivation => "shared_activation",
            OpId::SharedDownProj => "shared_down_proj",
            OpId::SharedReduce => "shared_reduce",
            OpId::LoraA => "lora_a",
            OpId::LoraB => "lora_b",
            OpId::LoraAdd => "lora_add",
            OpId::QkvProjFp8Cast => "qkv_proj_fp8_cast",
            OpId::AttentionOutProjFp8Cast => "attention_out_proj_fp8_cast",
            OpId::MlpUpProjFp8Cast => "mlp_up_proj_fp8_cast",
            OpId::MlpDownProjFp8Cast => "mlp_down_proj_fp8_cast",
            OpId::SharedUpProjFp8Cast => "shared_up_proj_fp8_cast",
            OpId::SharedDownProjFp8Cast => "shared_down_proj_fp8_cast",
            OpId::ExpertUpProjFp8Cast => "expert_up_proj_fp8_cast",
            OpId::ExpertDownProjFp8Cast => "expert_down_proj_fp8_cast",
            OpId::QkvInputCast => "qkv_input_cast",
            OpId::MlpInputCast => "mlp_input_cast",
            OpId::QkvBias => "qkv_bias",
            OpId::AttentionHeads => "attention_heads",
            OpId::MlpDownInputCast => "mlp_down_input_cast",
            OpId::WeightCasts => "weight_casts",
            OpId::FinalNorm => "final_norm",
            OpId::HeadAllGather => "head_all_gather",
            OpId::Logits => "logits",
            OpId::CrossEntropy => "cross_entropy",
            OpId::LogitsInputCast => "logits_input_cast",
            OpId::LogitsWeightCast => "logits_weight_cast",
            OpId::Embedding => "embedding",
            OpId::EmbeddingReduce => "embedding_reduce",
        }
    }

    /// A product's fp8 cast (`cost::fp8`), for the products that run in fp8.
    pub fn fp8_cast(self) -> Option<OpId> {
        Some(match self {
            OpId::QkvProj => OpId::QkvProjFp8Cast,
            OpId::AttentionOutProj => OpId::AttentionOutProjFp8Cast,
            OpId::MlpUpProj => OpId::MlpUpProjFp8Cast,
            OpId::MlpDownProj => OpId::MlpDownProjFp8Cast,
            OpId::SharedUpProj => OpId::SharedUpProjFp8Cast,
            OpId::SharedDownProj => OpId::SharedDownProjFp8Cast,
            OpId::ExpertUpProj => OpId::ExpertUpProjFp8Cast,
            OpId::ExpertDownProj => OpId::ExpertDownProjFp8Cast,
            _ => return None,
        })
    }

    /// One of LoRA's adapter operations.
    pub fn is_adapter(self) -> bool {
        matches!(self, OpId::LoraA | OpId::LoraB | OpId::LoraAdd)
    }
}

impl std::fmt::Display for OpId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for OpId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_snake_case_and_all_lists_every_id_once() {
        let mut names: Vec<&str> = OpId::ALL.iter().map(|o| o.name()).collect();
        assert!(names.iter().all(|n| !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), OpId::ALL.len());
        let mut ids = OpId::ALL.to_vec();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), OpId::ALL.len());
        // Every variant, in declaration order (the last declared is the last listed).
        assert_eq!(OpId::ALL.len(), OpId::EmbeddingReduce as usize + 1);
        for (i, id) in OpId::ALL.iter().enumerate() {
            assert_eq!(*id as usize, i, "{id}");
        }
    }

    #[test]
    fn a_cast_is_named_after_its_product() {
        for id in OpId::ALL {
            if let Some(cast) = id.fp8_cast() {
                assert_eq!(cast.name(), format!("{}_fp8_cast", id.name()));
            }
        }
    }
}
