//! The built-in catalog of GPUs and model presets, read from the TOML files in `catalog/`.
//!
//! The data lives in TOML rather than code so that adding a device or a model is a data
//! change a reviewer can check against a datasheet. The files are compiled into the binary.

use std::sync::OnceLock;

use serde::Deserialize;

use crate::plan::{FlashRates, Gpu, Link, LinkKind, Precision};

const GPUS_TOML: &str = include_str!("../catalog/gpus.toml");
const MODELS_TOML: &str = include_str!("../catalog/models.toml");

#[derive(Deserialize)]
struct GpuFile {
    gpu: Vec<GpuEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuEntry {
    name: String,
    #[serde(default)]
    aliases: Vec<String>,
    memory_gib: f64,
    hbm_bandwidth_gbs: f64,
    fp32_tflops: f64,
    tf32_tflops: Option<f64>,
    fp16_tflops: Option<f64>,
    bf16_tflops: Option<f64>,
    fp8_tflops: Option<f64>,
    gemm_efficiency: f64,
    memory_efficiency: f64,
    intra_node_kind: String,
    intra_node_bandwidth_gbs: f64,
    intra_node_latency_us: f64,
    compute_capability: f64,
    pair_bus_bandwidth_gbs: Option<f64>,
    flash_forward_tflops: Option<f64>,
    flash_backward_tflops: Option<f64>,
    sustained_clock: Option<f64>,
    host_link_gbs: Option<f64>,
    host_memory_gbs_per_gpu: Option<f64>,
}

/// A model preset: every field optional except the name, as in a `model` block.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct ModelPreset {
    pub name: String,
    pub source: String,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: Option<u64>,
    /// A head's width where it is not hidden / heads (Qwen3-32B: 128 on 5120 / 64).
    pub head_dim: Option<u64>,
    pub ffn_hidden: Option<u64>,
    pub vocab: u64,
    pub seq_len: u64,
    pub mlp: String,
    pub norm: String,
    pub position: String,
    pub bias: bool,
    pub tied_embeddings: bool,
    pub experts: Option<u64>,
    pub top_k: Option<u64>,
    pub rope_theta: Option<f64>,
}

#[derive(Deserialize)]
struct ModelFile {
    model: Vec<ModelPreset>,
}

pub struct Catalog {
    pub gpus: Vec<(Vec<String>, Gpu)>,
    pub models: Vec<ModelPreset>,
}

impl Catalog {
    /// The built-in catalog, parsed once.
    pub fn builtin() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            let gpus: GpuFile = toml::from_str(GPUS_TOML).expect("catalog/gpus.toml is valid");
            let models: ModelFile =
                toml::from_str(MODELS_TOML).expect("catalog/models.toml is valid");
            Catalog {
                gpus: gpus.gpu.into_iter().map(gpu_from_entry).collect(),
                models: models.model,
            }
        })
    }

    /// A GPU by name or alias, case-insensitively.
    pub fn gpu(&self, name: &str) -> Option<&Gpu> {
        self.gpus
            .iter()
            .find(|(names, _)| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
            .map(|(_, g)| g)
    }

    pub fn gpu_names(&self) -> impl Iterator<Item = &str> {
        self.gpus.iter().map(|(_, g)| g.name.as_str())
    }

    pub fn model(&self, name: &str) -> Option<&ModelPreset> {
        self.models
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(name))
    }
}

fn gpu_from_entry(e: GpuEntry) -> (Vec<String>, Gpu) {
    const T: f64 = 1e12;
    let mut peak = vec![(Precision::Fp32, e.fp32_tflops * T)];
    for (p, v) in [
        (Precision::Fp16, e.fp16_tflops),
        (Precision::Bf16, e.bf16_tflops),
        (Precision::Fp8, e.fp8_tflops),
    ] {
        if let Some(v) = v {
            peak.push((p, v * T));
        }
    }
    let _ = e.tf32_tflops; // kept in the data for a future `fp32 = tf32` option
    let mut names = vec![e.name.clone()];
    names.extend(e.aliases);
    let gpu = Gpu {
        profile: None,
        name: e.name,
        memory: e.memory_gib * 1024f64.powi(3),
        hbm_bandwidth: e.hbm_bandwidth_gbs * 1e9,
        peak,
        gemm_efficiency: e.gemm_efficiency,
        memory_efficiency: e.memory_efficiency,
        intra_node: Link {
            kind: LinkKind::parse(&e.intra_node_kind).expect("catalog link kind is valid"),
            bandwidth: e.intra_node_bandwidth_gbs * 1e9,
            latency: e.intra_node_latency_us * 1e-6,
        },
        compute_capability: Some(e.compute_capability),
        pair_bus_bandwidth: e.pair_bus_bandwidth_gbs.map(|b| b * 1e9),
        flash_attention: e.flash_forward_tflops.zip(e.flash_backward_tflops).map(
            |(forward, backward)| FlashRates {
                forward: forward * T,
                backward: backward * T,
            },
        ),
        sustained_clock: e.sustained_clock.unwrap_or(1.0),
        host_link: e.host_link_gbs.map(|b| b * 1e9),
        host_memory_bandwidth: e.host_memory_gbs_per_gpu.map(|b| b * 1e9),
    };
    (names, gpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_has_the_devices_the_spec_names() {
        let c = Catalog::builtin();
        for name in [
            "T4",
            "V100_SXM_32GB",
            "A100_SXM_40GB",
            "A100_SXM_80GB",
            "H100_SXM_80GB",
            "H200_SXM_141GB",
            "B200",
            "L40S",
            "RTX_4090",
        ] {
            assert!(c.gpu(name).is_some(), "{name} missing");
        }
        let v100 = c.gpu("V100_SXM_32GB").unwrap();
        assert!(v100.peak(Precision::Bf16).is_none());
        assert_eq!(c.gpu("a100_80gb").unwrap().name, "A100_SXM_80GB");
        // A bare family name is ambiguous between memory sizes: never guessed.
        assert!(c.gpu("A100").is_none());
        assert_eq!(
            c.gpu("A100_SXM_80GB").unwrap().peak(Precision::Bf16),
            Some(312e12)
        );
    }

    #[test]
    fn catalog_has_the_presets_the_issue_names() {
        let c = Catalog::builtin();
        for name in [
            "gpt3-175b",
            "llama2-7b",
            "llama2-13b",
            "llama2-70b",
            "llama3-8b",
            "llama3-70b",
            "llama3-405b",
            "mixtral-8x7b",
        ] {
            assert!(c.model(name).is_some(), "{name} missing");
        }
        assert_eq!(c.model("llama3-70b").unwrap().kv_heads, Some(8));
    }
}
