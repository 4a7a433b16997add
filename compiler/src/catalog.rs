//! The built-in catalog of GPUs and model presets, read from the TOML files in `catalog/`.
//!
//! The data lives in TOML rather than code so that adding a device or a model is a data
//! change a reviewer can check against a datasheet. The files are compiled into the binary.
//! Every figure of a GPU names its source or says why it has none (`[[gpu.source]]`,
//! `[[gpu.unsourced]]`); a test keeps them complete.

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
    datasheet_memory_gb: f64,
    hbm_bandwidth_gbs: f64,
    fp32_tflops: f64,
    tf32_tflops: Option<f64>,
    fp16_tflops: Option<f64>,
    bf16_tflops: Option<f64>,
    fp8_tflops: Option<f64>,
    gemm_efficiency: f64,
    memory_efficiency: f64,
    intra_node_kind: String,
    /// What the vendor calls the link where planc prices it as another kind (MI300X:
    /// Infinity Fabric, priced as NVLink).
    intra_node_name: Option<String>,
    intra_node_bandwidth_gbs: f64,
    intra_node_latency_us: f64,
    /// CUDA's; absent for a device CUDA does not run (MI300X).
    compute_capability: Option<f64>,
    pair_bus_bandwidth_gbs: Option<f64>,
    flash_forward_tflops: Option<f64>,
    flash_backward_tflops: Option<f64>,
    cudnn_attention_forward_tflops: Option<f64>,
    cudnn_attention_backward_tflops: Option<f64>,
    sustained_clock: Option<f64>,
    fp8_gemm_efficiency: Option<f64>,
    fp8_sustained_clock: Option<f64>,
    host_link_gbs: Option<f64>,
    host_memory_gbs_per_gpu: Option<f64>,
    nvlink_domain: Option<u64>,
    #[serde(default)]
    source: Vec<Source>,
    #[serde(default)]
    unsourced: Vec<Unsourced>,
}

/// Where some of an entry's figures come from.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub fields: Vec<String>,
    pub cite: String,
}

/// Figures of an entry no source gives, and why.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Unsourced {
    pub fields: Vec<String>,
    pub why: String,
}

/// What the catalog knows of a GPU beyond the figures the cost model reads.
#[derive(Clone, Debug)]
pub struct GpuInfo {
    pub name: String,
    /// The capacity the part is sold as, in (decimal) GB: "80 GB" for an H100 that
    /// reports 79.6 GiB.
    pub datasheet_memory_gb: f64,
    pub sources: Vec<Source>,
    pub unsourced: Vec<Unsourced>,
    /// The GPU-to-GPU link's own name ("NVLink", "PCIe", "Infinity Fabric").
    pub link_name: String,
    /// The entry as `catalog/gpus.toml` writes it, figures in their units (`memory_gib`).
    pub entry: toml::Table,
}

impl GpuInfo {
    /// The figures of the entry no source gives (`[[gpu.unsourced]]`).
    pub fn estimated_fields(&self) -> Vec<&str> {
        self.unsourced
            .iter()
            .flat_map(|u| u.fields.iter().map(String::as_str))
            .collect()
    }

    /// No `sustained_clock`, measured or estimated: the cost model prices the products at
    /// the clock of a burst, which a board at its power limit does not hold.
    pub fn sustained_clock_unmeasured(&self) -> bool {
        !self.entry.contains_key("sustained_clock")
    }
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
    /// The tokens a windowed layer's query attends (Mistral 7B v0.1: 4096).
    pub sliding_window: Option<u64>,
    /// With a window, every Nth layer attends the whole sequence.
    pub full_attention_every: Option<u64>,
}

#[derive(Deserialize)]
struct ModelFile {
    model: Vec<ModelPreset>,
}

pub struct Catalog {
    pub gpus: Vec<(Vec<String>, Gpu)>,
    /// Beside `gpus`, in the same order.
    pub gpu_info: Vec<GpuInfo>,
    pub models: Vec<ModelPreset>,
}

impl Catalog {
    /// The built-in catalog, parsed once.
    pub fn builtin() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            // The text parsed once (the parse is most of a `planc check`'s own time), the
            // typed entries read from its table.
            let table: toml::Table = toml::from_str(GPUS_TOML).expect("catalog/gpus.toml is valid");
            let gpus: GpuFile = toml::Value::Table(table.clone())
                .try_into()
                .expect("catalog/gpus.toml is valid");
            let models: ModelFile =
                toml::from_str(MODELS_TOML).expect("catalog/models.toml is valid");
            let raw = table["gpu"].as_array().expect("[[gpu]] entries").clone();
            let (gpus, gpu_info) = gpus
                .gpu
                .into_iter()
                .zip(raw)
                .map(|(e, raw)| {
                    let table = raw.as_table().cloned().unwrap_or_default();
                    gpu_from_entry(e, table)
                })
                .unzip();
            Catalog {
                gpus,
                gpu_info,
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

    /// The provenance and datasheet capacity of a GPU, by name or alias.
    pub fn gpu_info(&self, name: &str) -> Option<&GpuInfo> {
        self.gpus
            .iter()
            .position(|(names, _)| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
            .map(|i| &self.gpu_info[i])
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

fn gpu_from_entry(e: GpuEntry, entry: toml::Table) -> ((Vec<String>, Gpu), GpuInfo) {
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
        compute_capability: e.compute_capability,
        pair_bus_bandwidth: e.pair_bus_bandwidth_gbs.map(|b| b * 1e9),
        flash_attention: e.flash_forward_tflops.zip(e.flash_backward_tflops).map(
            |(forward, backward)| FlashRates {
                forward: forward * T,
                backward: backward * T,
            },
        ),
        cudnn_attention: e
            .cudnn_attention_forward_tflops
            .zip(e.cudnn_attention_backward_tflops)
            .map(|(forward, backward)| FlashRates {
                forward: forward * T,
                backward: backward * T,
            }),
        sustained_clock: e.sustained_clock.unwrap_or(1.0),
        fp8_gemm_efficiency: e.fp8_gemm_efficiency,
        fp8_sustained_clock: e.fp8_sustained_clock,
        host_link: e.host_link_gbs.map(|b| b * 1e9),
        host_memory_bandwidth: e.host_memory_gbs_per_gpu.map(|b| b * 1e9),
        nvlink_domain: e.nvlink_domain,
        power_slowdown: None,
    };
    let info = GpuInfo {
        name: gpu.name.clone(),
        datasheet_memory_gb: e.datasheet_memory_gb,
        sources: e.source,
        unsourced: e.unsourced,
        link_name: e.intra_node_name.unwrap_or_else(|| {
            match e.intra_node_kind.as_str() {
                "pcie" => "PCIe",
                _ => "NVLink",
            }
            .to_string()
        }),
        entry,
    };
    ((names, gpu), info)
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
            "H800_SXM_80GB",
            "H20_96GB",
            "GB200",
            "MI300X",
        ] {
            assert!(c.gpu(name).is_some(), "{name} missing");
        }
        let v100 = c.gpu("V100_SXM_32GB").unwrap();
        assert!(v100.peak(Precision::Bf16).is_none());
        assert_eq!(c.gpu("a100_80gb").unwrap().name, "A100_SXM_80GB");
        // A bare family name is ambiguous between memory sizes or form factors: never
        // guessed.
        for bare in ["A100", "H100", "H800", "H20", "V100"] {
            assert!(c.gpu(bare).is_none(), "{bare}");
        }
        assert_eq!(
            c.gpu("A100_SXM_80GB").unwrap().peak(Precision::Bf16),
            Some(312e12)
        );
    }

    #[test]
    fn the_new_parts_differ_from_their_siblings_where_their_datasheets_say() {
        let c = Catalog::builtin();
        let (h100, h800) = (c.gpu("H100_SXM_80GB").unwrap(), c.gpu("H800_80GB").unwrap());
        // The H800 is an H100 with fewer NVLinks (400 GB/s both ways against 900).
        assert_eq!(h800.peak(Precision::Bf16), h100.peak(Precision::Bf16));
        assert_eq!(h800.intra_node.bandwidth, 200e9);
        assert_eq!(h100.intra_node.bandwidth, 450e9);
        // The H20 keeps the NVLink and gains memory, at 15 % of the H100's products.
        let h20 = c.gpu("H20_SXM_96GB").unwrap();
        assert_eq!(h20.peak(Precision::Bf16), Some(148e12));
        assert!(h20.memory > h100.memory);
        // One NVL72 rack is one NVLink domain of 72 GPUs; HGX boards join 8.
        assert_eq!(c.gpu("GB200_NVL72").unwrap().nvlink_domain, Some(72));
        assert_eq!(c.gpu("B200").unwrap().nvlink_domain, Some(8));
        assert_eq!(c.gpu("L40S").unwrap().nvlink_domain, None);
        // CUDA does not run on the MI300X: no compute capability, fused attention kept.
        let mi300x = c.gpu("MI300X").unwrap();
        assert_eq!(mi300x.compute_capability, None);
        assert!(mi300x.has_fused_attention());
        assert_eq!(mi300x.peak(Precision::Fp8), Some(2614.9e12));
        // Memory is what the device reports, less than what it is sold as.
        for (names, g) in &c.gpus {
            let sold = c.gpu_info(&names[0]).unwrap().datasheet_memory_gb;
            let gib = g.memory / 1024f64.powi(3);
            assert!(
                gib <= sold && gib > 0.9 * sold,
                "{}: {gib} GiB sold as {sold} GB",
                g.name
            );
        }
    }

    /// Every figure of every GPU names a source or says why it has none, exactly once, and
    /// names only fields the entry has.
    #[test]
    fn every_catalog_figure_has_its_provenance() {
        let raw: toml::Value = toml::from_str(GPUS_TOML).unwrap();
        let not_figures = [
            "name",
            "aliases",
            "intra_node_kind",
            "intra_node_name",
            "source",
            "unsourced",
        ];
        for entry in raw["gpu"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            let table = entry.as_table().unwrap();
            let figures: Vec<&str> = table
                .keys()
                .map(String::as_str)
                .filter(|k| !not_figures.contains(k))
                .collect();
            let mut named: Vec<String> = Vec::new();
            for (list, text) in [("source", "cite"), ("unsourced", "why")] {
                for p in entry
                    .get(list)
                    .and_then(|v| v.as_array())
                    .into_iter()
                    .flatten()
                {
                    assert!(
                        p[text].as_str().is_some_and(|t| t.len() > 10),
                        "{name}: a {list} without its {text}"
                    );
                    for f in p["fields"].as_array().unwrap() {
                        let f = f.as_str().unwrap();
                        assert!(
                            figures.contains(&f),
                            "{name}: {list} names `{f}`, not a figure of it"
                        );
                        assert!(!named.iter().any(|n| n == f), "{name}: `{f}` named twice");
                        named.push(f.to_string());
                    }
                }
            }
            let missing: Vec<&&str> = figures
                .iter()
                .filter(|f| !named.iter().any(|n| n == *f))
                .collect();
            assert!(missing.is_empty(), "{name}: no provenance for {missing:?}");
            assert!(
                entry.get("source").is_some(),
                "{name}: every entry cites at least its datasheet"
            );
        }
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
