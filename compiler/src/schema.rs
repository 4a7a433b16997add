//! Which blocks exist, where they may appear, and which attributes each accepts.
//!
//! Types and defaults live with the code that lowers each block (`resolve.rs`); this table
//! only says what names are legal, so that unknown ones get a did-you-mean.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    Required,
    Optional,
    Forbidden,
}

pub struct BlockSchema {
    pub kind: &'static str,
    pub naming: Naming,
    pub attrs: &'static [&'static str],
    pub blocks: &'static [&'static str],
    /// Any attribute name is accepted (environment variables).
    pub free_attrs: bool,
}

const fn schema(
    kind: &'static str,
    naming: Naming,
    attrs: &'static [&'static str],
    blocks: &'static [&'static str],
) -> BlockSchema {
    BlockSchema {
        kind,
        naming,
        attrs,
        blocks,
        free_attrs: false,
    }
}

pub const TOP_LEVEL: &[&str] = &[
    "cluster", "model", "train", "parallel", "job", "search", "gpu",
];

pub const SCHEMAS: &[BlockSchema] = &[
    schema(
        "cluster",
        Naming::Optional,
        &["nodes", "gpus_per_node", "gpu", "profile", "price"],
        &["intra_node", "inter_node", "group"],
    ),
    schema(
        "intra_node",
        Naming::Forbidden,
        &["kind", "bandwidth", "latency"],
        &[],
    ),
    schema(
        "inter_node",
        Naming::Forbidden,
        &["kind", "nics_per_node", "bandwidth", "latency"],
        &[],
    ),
    schema(
        "group",
        Naming::Required,
        &["nodes", "gpus_per_node", "gpu", "price"],
        &["intra_node"],
    ),
    schema(
        "model",
        Naming::Optional,
        &[
            "preset",
            "layers",
            "hidden",
            "heads",
            "kv_heads",
            "head_dim",
            "ffn_hidden",
            "vocab",
            "seq_len",
            "mlp",
            "norm",
            "position",
            "bias",
            "tied_embeddings",
            "experts",
            "top_k",
            "expert_ffn_hidden",
            "shared_experts",
            "first_dense_layers",
            "capacity_factor",
            "moe_imbalance",
            "rope_theta",
            "sliding_window",
            "full_attention_every",
        ],
        &[],
    ),
    schema(
        "train",
        Naming::Optional,
        &[
            "global_batch",
            "precision",
            "optimizer",
            "tokens",
            "method",
            "lora_rank",
            "lora_alpha",
            "lora_targets",
            "frozen_layers",
            "attention",
            "dropout",
            "data",
            "seed",
            "steps",
            "lr",
            "min_lr",
            "lr_schedule",
            "warmup_steps",
            "weight_decay",
            "grad_clip",
            "adam_beta1",
            "adam_beta2",
            "adam_eps",
        ],
        &[],
    ),
    schema(
        "parallel",
        Naming::Optional,
        &[
            "tp",
            "pp",
            "dp",
            "cp",
            "ep",
            "vpp",
            "micro_batch",
            "schedule",
            "sequence_parallel",
            "zero",
            "recompute",
            "offload",
            "first_stage_layers",
            "last_stage_layers",
            "overlap_grad_reduce",
            "overlap_p2p",
            "overlap_tp_backward",
            "grad_accumulation_fusion",
            "scatter_gather_p2p",
            "grad_dtype",
            "optimizer_dtype",
            "reduce_dtype",
        ],
        &[],
    ),
    schema(
        "job",
        Naming::Optional,
        &[
            "name",
            "framework",
            "scheduler",
            "partition",
            "time_limit",
            "image",
            "checkpoint_dir",
            "retries",
            "entrypoint",
            "entrypoint_args",
            "volume",
            "kernels",
            "attention_kernel",
        ],
        &["env"],
    ),
    BlockSchema {
        kind: "env",
        naming: Naming::Forbidden,
        attrs: &[],
        blocks: &[],
        free_attrs: true,
    },
    schema(
        "search",
        Naming::Optional,
        &["objective", "memory_headroom", "top"],
        &[],
    ),
    schema(
        "gpu",
        Naming::Required,
        &[
            "preset",
            "memory",
            "hbm_bandwidth",
            "fp32",
            "fp16",
            "bf16",
            "fp8",
            "gemm_efficiency",
            "memory_efficiency",
            "host_link",
            "host_memory_bandwidth",
            "nvlink_domain",
        ],
        &["intra_node"],
    ),
];

/// The attributes whose value is text (a string in double quotes), by block: `--set`
/// takes a bare word there as the text (`--set job.name=nightly`). A test
/// (`compiler/tests/overrides.rs`) keeps the list equal to what the resolver reads as strings.
pub const TEXT_ATTRS: &[(&str, &str)] = &[
    ("cluster", "profile"),
    ("train", "data"),
    ("job", "name"),
    ("job", "partition"),
    ("job", "image"),
    ("job", "checkpoint_dir"),
    ("job", "entrypoint"),
    ("job", "volume"),
];

pub fn lookup(kind: &str) -> Option<&'static BlockSchema> {
    SCHEMAS.iter().find(|s| s.kind == kind)
}

/// The closest candidate to a misspelt name, if one is close enough to be a likely typo.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    // Jaro-Winkler costs the product of the lengths: a generated name of a megabyte
    // against another would take minutes. No real name is this long, and no real block
    // has thousands of names to choose from (a generated one would cost each of its
    // errors a pass over all of them).
    const LONGEST: usize = 100;
    const CANDIDATES: usize = 1000;
    if name.len() > LONGEST {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    candidates
        .into_iter()
        .take(CANDIDATES)
        .filter(|c| c.len() <= LONGEST)
        .map(|c| (strsim::jaro_winkler(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_for_typos() {
        assert_eq!(
            did_you_mean(
                "micro_bach",
                lookup("parallel").unwrap().attrs.iter().copied()
            ),
            Some("micro_batch")
        );
        assert_eq!(
            did_you_mean(
                "gpus_per_nod",
                lookup("cluster").unwrap().attrs.iter().copied()
            ),
            Some("gpus_per_node")
        );
        assert_eq!(
            did_you_mean("zzz", lookup("parallel").unwrap().attrs.iter().copied()),
            None
        );
    }

    #[test]
    fn every_nested_block_has_a_schema() {
        for s in SCHEMAS {
            for b in s.blocks {
                assert!(lookup(b).is_some(), "{b}");
            }
        }
        for t in TOP_LEVEL {
            assert!(lookup(t).is_some(), "{t}");
        }
    }
}
