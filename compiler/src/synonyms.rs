//! What other tools call a value that planc names otherwise: a framework by the product
//! built on it (NeMo, Composer), a dtype by PyTorch's spelling, an attention kernel by its
//! library. Read only by the error's help: planc still refuses the other name, so that a
//! plan reads the same wherever it goes, and says which of its own to write and why.
//! A typo of planc's own names is `schema::did_you_mean`'s.

/// planc's value for `text` written as `attribute`'s value, and why, where `text` is
/// another tool's name for it.
pub fn planc_name(attribute: &str, text: &str) -> Option<(&'static str, &'static str)> {
    let key = text.to_ascii_lowercase().replace('-', "_");
    let found = SYNONYMS
        .iter()
        .find(|(attr, names, ..)| *attr == attribute && names.contains(&key.as_str()))?;
    Some((found.2, found.3))
}

type Synonym = (
    &'static str,
    &'static [&'static str],
    &'static str,
    &'static str,
);

/// (attribute, other names with `-` written `_`, planc's name, why).
const SYNONYMS: &[Synonym] = &[
    (
        "framework",
        &[
            "nemo",
            "nemo2",
            "nemo_framework",
            "megatron_core",
            "mcore",
            "megatron_bridge",
            "mbridge",
            "megatron_lm",
        ],
        "megatron",
        "NeMo and Megatron Bridge train through Megatron-Core; `megatron` prices Megatron-Core \
         and Megatron-LM and emits Megatron-LM's launch",
    ),
    (
        "framework",
        &["megatron_deepspeed"],
        "deepspeed",
        "Megatron-DeepSpeed runs Megatron's model under DeepSpeed's engine",
    ),
    (
        "framework",
        &[
            "pytorch",
            "fsdp",
            "fsdp1",
            "fsdp2",
            "ddp",
            "composer",
            "llm_foundry",
            "accelerate",
            "lightning",
            "transformers",
            "hf_trainer",
        ],
        "torch",
        "PyTorch's own DDP and FSDP, and what is built on them (Composer, Accelerate, \
         Lightning, the Hugging Face Trainer), are `torch`; FSDP's full sharding is \
         `parallel.zero = 3`",
    ),
    (
        "precision",
        &["bfloat16", "bf16_mixed", "bf16mixed"],
        "bf16",
        "mixed precision in bf16; the optimizer's copy is `parallel.optimizer_dtype`",
    ),
    (
        "precision",
        &["float16", "half", "16", "fp16_mixed", "16_mixed"],
        "fp16",
        "mixed precision in fp16; the optimizer's copy is `parallel.optimizer_dtype`",
    ),
    (
        "precision",
        &["float32", "single", "32", "tf32"],
        "fp32",
        "training in fp32 (TF32 is how its products run)",
    ),
    (
        "precision",
        &[
            "float8",
            "fp8_hybrid",
            "fp8_e4m3",
            "e4m3",
            "fp8_cs",
            "fp8_delayed",
            "fp8_mixed",
            "hybrid",
        ],
        "fp8",
        "the linear products in fp8 (Transformer Engine's recipes), everything else in bf16",
    ),
    (
        "attention",
        &[
            "fused",
            "flash_attn",
            "flash_attention",
            "flash2",
            "fa2",
            "fa3",
            "sdpa",
            "cudnn",
            "te",
            "triton",
        ],
        "flash",
        "a fused kernel that never stores the scores is `attention = flash`; which one runs \
         is `job.attention_kernel` (flash2, cudnn, triton)",
    ),
    (
        "attention",
        &["eager", "unfused", "math", "naive", "local", "torch"],
        "standard",
        "attention that stores the scores and the softmax is `standard`",
    ),
    (
        "schedule",
        &["one_f_one_b", "pipedream", "pipedream_flush"],
        "1f1b",
        "one forward, one backward (PipeDream-Flush)",
    ),
    (
        "schedule",
        &["interleaved_1f1b", "virtual", "vpp"],
        "interleaved",
        "the interleaved 1F1B schedule, its chunks counted by `parallel.vpp`",
    ),
    (
        "schedule",
        &["zero_bubble", "zb", "zbh1", "zb_h"],
        "zb_h1",
        "zero-bubble ZB-H1 (Qi et al. 2023)",
    ),
    (
        "mlp",
        &["geglu", "silu", "swish", "gated", "glu"],
        "swiglu",
        "a gated MLP of three products; the gate's function does not change its price",
    ),
    (
        "mlp",
        &[
            "relu",
            "gelu_new",
            "gelu_tanh",
            "gelu_pytorch_tanh",
            "squared_relu",
        ],
        "gelu",
        "an ungated MLP of two products; the activation's function does not change its price",
    ),
    (
        "norm",
        &["layer_norm", "ln"],
        "layernorm",
        "planc spells LayerNorm `layernorm`",
    ),
    (
        "norm",
        &["rms_norm", "rms"],
        "rmsnorm",
        "planc spells RMSNorm `rmsnorm`",
    ),
    (
        "position",
        &["rotary", "rope_scaling", "yarn", "rotary_embedding"],
        "rope",
        "rotary position embeddings (any scaling prices the same)",
    ),
    (
        "position",
        &["absolute", "learned_absolute", "learnable"],
        "learned",
        "a learned table of absolute positions is `learned`",
    ),
    ("kind", &["ib"], "infiniband", "planc spells InfiniBand out"),
    (
        "kind",
        &["nvswitch", "nvl"],
        "nvlink",
        "NVSwitch switches NVLink; planc prices the link, through a switch or direct",
    ),
    (
        "kind",
        &["rocev2", "roce_v2"],
        "roce",
        "planc calls RDMA over Converged Ethernet (v1 or v2) `roce`",
    ),
    (
        "kind",
        &["eth", "tcp", "socket"],
        "ethernet",
        "planc calls plain Ethernet (TCP sockets) `ethernet`",
    ),
    (
        "scheduler",
        &["kubernetes", "kubeflow", "pytorchjob"],
        "k8s",
        "planc calls Kubernetes `k8s`",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_tools_names_map_to_plancs_and_others_do_not() {
        assert_eq!(planc_name("framework", "NeMo").unwrap().0, "megatron");
        assert_eq!(
            planc_name("framework", "megatron-core").unwrap().0,
            "megatron"
        );
        assert_eq!(planc_name("framework", "FSDP2").unwrap().0, "torch");
        assert_eq!(
            planc_name("framework", "Megatron-DeepSpeed").unwrap().0,
            "deepspeed"
        );
        assert_eq!(planc_name("precision", "bfloat16").unwrap().0, "bf16");
        assert_eq!(planc_name("attention", "sdpa").unwrap().0, "flash");
        assert_eq!(planc_name("kind", "IB").unwrap().0, "infiniband");
        // The name belongs to one attribute only.
        assert_eq!(planc_name("precision", "nemo"), None);
        assert_eq!(planc_name("framework", "jax"), None);
    }

    #[test]
    fn every_planc_name_is_a_value_of_its_attribute() {
        use crate::plan::*;
        for (attr, names, value, _) in SYNONYMS {
            let valid = match *attr {
                "framework" => Framework::NAMES,
                "precision" => Precision::NAMES,
                "attention" => Attention::NAMES,
                "schedule" => Schedule::NAMES,
                "mlp" => Mlp::NAMES,
                "norm" => Norm::NAMES,
                "position" => Position::NAMES,
                "kind" => LinkKind::NAMES,
                "scheduler" => Scheduler::NAMES,
                other => panic!("no values known for `{other}`"),
            };
            assert!(valid.contains(value), "{attr} = {value}");
            // A synonym that were planc's own name would never reach the help.
            for n in *names {
                assert!(!valid.contains(n), "{attr}: `{n}` is planc's own");
            }
        }
    }
}
