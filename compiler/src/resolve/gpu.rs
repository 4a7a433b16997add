//! `gpu NAME { ... }` blocks to devices, and the cluster's `gpu = NAME` to one.
//!
//! A block may start from a built-in GPU (`preset = H100_SXM_80GB`): every attribute it
//! does not write is the preset's, nested `intra_node` attribute by attribute, and so are
//! the figures a plan cannot write (compute capability, the measured attention rates and
//! pair bandwidth, the sustained clock, the NVLink domain), scaled where the block changed
//! what they were measured against.

use std::collections::HashMap;

use planc_lang::codes;
use planc_lang::syntax::ExprKind;
use planc_lang::units::Dimension;
use planc_lang::Diagnostic;

use super::Resolver;
use crate::catalog::Catalog;
use crate::plan::{FlashRates, Gpu, Link, LinkKind, NodeGroup, Precision};
use crate::schema::did_you_mean;
use crate::value::{fmt_num, Value};

/// What a `gpu` block without a preset or an `intra_node` block gets: PCIe, achievable.
const DEFAULT_LINK: Link = Link {
    kind: LinkKind::Pcie,
    bandwidth: 25e9,
    latency: 8e-6,
};

impl<'a> Resolver<'a> {
    pub(super) fn lower_gpu_blocks(&mut self) -> HashMap<String, Gpu> {
        let mut out = HashMap::new();
        let ids: Vec<(String, usize)> = self
            .gpu_blocks
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for (name, n) in ids {
            if let Some(g) = self.lower_gpu(n, &name) {
                out.insert(name, g);
            }
        }
        out
    }

    fn lower_gpu(&mut self, n: usize, name: &str) -> Option<Gpu> {
        // A preset that names no built-in GPU was reported; the block is still checked, as
        // one without a preset, so that its other errors show too.
        let preset = self.gpu_preset(n);
        // What a preset that names nothing would have given is not missing: one error.
        let broken_preset = preset.is_none() && self.find_attr(n, "preset").is_some();
        let memory = match &preset {
            Some(p) if self.find_attr(n, "memory").is_none() => Some(p.memory),
            _ if broken_preset => self.quantity(n, "memory", Dimension::Bytes),
            _ => self.require(n, "memory", |r| r.quantity(n, "memory", Dimension::Bytes)),
        };
        let hbm = match &preset {
            Some(p) if self.find_attr(n, "hbm_bandwidth").is_none() => Some(p.hbm_bandwidth),
            _ if broken_preset => self.quantity(n, "hbm_bandwidth", Dimension::Bandwidth),
            _ => self.require(n, "hbm_bandwidth", |r| {
                r.quantity(n, "hbm_bandwidth", Dimension::Bandwidth)
            }),
        };
        self.decimal_memory(n, preset.as_ref());
        let mut peak = preset.as_ref().map_or_else(Vec::new, |p| p.peak.clone());
        for p in Precision::ALL {
            if let Some(v) = self.quantity(n, p.as_str(), Dimension::ComputeRate) {
                peak.retain(|(q, _)| q != p);
                peak.push((*p, v));
            }
        }
        if peak.is_empty() && !broken_preset {
            let (file, span) = (self.nodes[n].file, self.nodes[n].block.header_span());
            self.report(
                codes::P0206,
                format!("GPU `{name}` gives no compute rate"),
                file,
                span,
                "no precision defined",
            )
            .with_help(
                "give the dense peak of at least one precision (`bf16 = 1307 TFLOPS`), or start \
                 from a built-in GPU: `preset = H100_SXM_80GB`",
            );
        }
        let gemm_efficiency = self
            .number(n, "gemm_efficiency", 0.01, 1.0)
            .or(preset.as_ref().map(|p| p.gemm_efficiency))
            .unwrap_or(0.75);
        let memory_efficiency = self
            .number(n, "memory_efficiency", 0.01, 1.0)
            .or(preset.as_ref().map(|p| p.memory_efficiency))
            .unwrap_or(0.85);
        let base_link = preset
            .as_ref()
            .map_or(DEFAULT_LINK, |p| p.intra_node.clone());
        let intra_node = self.lower_link(n, "intra_node", &base_link);
        let host_link = self.quantity(n, "host_link", Dimension::Bandwidth);
        let host_memory_bandwidth = self.quantity(n, "host_memory_bandwidth", Dimension::Bandwidth);
        let nvlink_domain = self.count(n, "nvlink_domain", 1);
        let gpu = Gpu {
            profile: None,
            name: name.to_string(),
            memory: memory?,
            hbm_bandwidth: hbm?,
            peak,
            gemm_efficiency,
            memory_efficiency,
            intra_node,
            compute_capability: None,
            pair_bus_bandwidth: None,
            flash_attention: None,
            cudnn_attention: None,
            // A plan's own device states its rates as it measured them.
            sustained_clock: 1.0,
            fp8_gemm_efficiency: None,
            fp8_sustained_clock: None,
            host_link,
            host_memory_bandwidth,
            nvlink_domain,
            power_slowdown: None,
        };
        Some(match preset {
            Some(p) => inherit(gpu, &p),
            None => gpu,
        })
    }

    /// The built-in GPU a block's `preset` names, or `None` (reported) when it names none.
    fn gpu_preset(&mut self, n: usize) -> Option<Gpu> {
        let (v, span) = self.get(n, "preset")?;
        let name = match &v {
            Value::Enum(s) | Value::Str(s) => s.clone(),
            other => {
                self.type_error(
                    n,
                    span,
                    "preset",
                    "a built-in GPU such as `H100_SXM_80GB`",
                    other,
                );
                return None;
            }
        };
        let catalog = Catalog::builtin();
        if let Some(g) = catalog.gpu(&name) {
            return Some(g.clone());
        }
        let file = self.file_of(n, "preset");
        let mut d = Diagnostic::new(codes::P0214, format!("unknown built-in GPU `{name}`")).at(
            file,
            span,
            "not in the catalog",
        );
        if self.gpu_blocks.contains_key(&name) {
            d = d.help(format!(
                "`{name}` is a `gpu` block of this plan, and a preset is a built-in GPU: give \
                 this block the preset `{name}` starts from, and write what differs"
            ));
            self.diagnostics.push(d);
        } else {
            self.unknown_gpu(d, &name, &[]);
        }
        None
    }

    /// `memory = 80 GB`: decimal units, 74.5 GiB, which is almost never what was meant. Taken
    /// as written, with a warning that says what a GPU sold as that size reports (P0220).
    fn decimal_memory(&mut self, n: usize, preset: Option<&Gpu>) {
        let Some((file, attr)) = self.written(n, "memory") else {
            return;
        };
        let ExprKind::Quantity { value, unit } = &attr.value.kind else {
            return;
        };
        if !matches!(unit.symbol, "KB" | "MB" | "GB" | "TB") {
            return;
        }
        let bytes = value * unit.to_base;
        let (gb, gib) = (bytes / 1e9, bytes / GIB);
        let written = format!("{} {}", fmt_num(*value), unit.symbol);
        let catalog = Catalog::builtin();
        let sold_as_written = |name: &str| {
            catalog
                .gpu_info(name)
                .is_some_and(|i| (i.datasheet_memory_gb - gb).abs() < 0.5)
        };
        // What the help suggests writing instead, for an editor's quick fix.
        let mut fix = None;
        let help = match preset.filter(|p| sold_as_written(&p.name)) {
            Some(p) => {
                fix = Some(format!("{} GiB", gib_text(p.memory)));
                format!(
                    "`{}` is sold as {written} and reports {} GiB: leave `memory` out to take the \
                     preset's, or write `memory = {} GiB`",
                    p.name,
                    gib_text(p.memory),
                    gib_text(p.memory)
                )
            }
            None => {
                // The built-in GPUs sold as this size, by what they report, least first: the
                // suggestion never counts memory a device of that size may lack.
                let mut reported: Vec<(String, Vec<&str>)> = Vec::new();
                let mut sold: Vec<&Gpu> = catalog
                    .gpus
                    .iter()
                    .map(|(_, g)| g)
                    .filter(|g| sold_as_written(&g.name))
                    .collect();
                sold.sort_by(|a, b| a.memory.total_cmp(&b.memory));
                for g in sold {
                    let text = gib_text(g.memory);
                    match reported.iter_mut().find(|(t, _)| *t == text) {
                        Some((_, names)) => names.push(&g.name),
                        None => reported.push((text, vec![&g.name])),
                    }
                }
                match reported.first() {
                    Some((least, _)) => {
                        fix = Some(format!("{least} GiB"));
                        format!(
                            "a GPU sold as {written} reports {}: write `memory = {least} GiB`, \
                         the GiB the device reports",
                            reported
                                .iter()
                                .map(|(t, names)| format!("{t} GiB ({})", names.join(", ")))
                                .collect::<Vec<_>>()
                                .join(" or ")
                        )
                    }
                    None => format!(
                        "memory is sold in binary gigabytes under the name GB: a GPU sold as \
                         {written} has about {} GiB, less what it reserves; write the GiB it \
                         reports (nvidia-smi's MiB / 1024)",
                        fmt_num(gb)
                    ),
                }
            }
        };
        let d = Diagnostic::new(
            codes::P0220,
            format!(
                "`memory = {written}` is {} GiB, less than a GPU sold as {written} has",
                gib_text(bytes)
            ),
        )
        .at(
            file,
            attr.value.span,
            format!("decimal units: {gib:.1} GiB"),
        );
        let d = d.help(help);
        self.diagnostics.push(match fix {
            Some(x) => d.fix(x),
            None => d,
        });
    }

    /// A node of more GPUs than its GPU's NVLink domain, or of fewer where the domain spans
    /// hosts (an NVL72 rack), is priced on the wrong link (P0221).
    pub(super) fn node_against_domain(&mut self, n: usize, g: &NodeGroup) {
        let Some(domain) = g.gpu.nvlink_domain else {
            return;
        };
        let Some((file, attr)) = self.written(n, "gpus_per_node") else {
            return;
        };
        let (per, gpu) = (g.gpus_per_node, &g.gpu.name);
        if g.intra_node.kind != LinkKind::Nvlink {
            return;
        }
        let d = if per > domain {
            Diagnostic::new(
                codes::P0221,
                format!("a node of {per} {gpu} is more than one NVLink domain of {domain}"),
            )
            .at(file, attr.value.span, "priced as one NVLink domain")
            .help(format!(
                "planc prices all the GPUs of a node on `intra_node`: write the machine as \
                 nodes of {domain} (`gpus_per_node = {domain}`, `nodes` as many as there are \
                 domains), so that traffic between domains crosses `inter_node`"
            ))
        } else if per < domain && RACK_SCALE < domain && g.nodes > 1 {
            Diagnostic::new(
                codes::P0221,
                format!(
                    "{gpu}'s NVLink domain is {domain} GPUs: nodes of {per} price the traffic \
                     inside it on `inter_node`"
                ),
            )
            .at(file, attr.value.span, "part of one NVLink domain")
            .help(format!(
                "write each NVLink domain as one node: `gpus_per_node = {domain}`, `nodes` the \
                 number of domains, `inter_node`'s `nics_per_node` the NICs of a whole domain; \
                 for a part whose domain is {per} GPUs, say so: `gpu mine {{ preset = {gpu}, \
                 nvlink_domain = {per} }}`"
            ))
        } else {
            return;
        };
        self.diagnostics.push(d);
    }

    pub(super) fn lookup_gpu(&mut self, n: usize, defined: &HashMap<String, Gpu>) -> Option<Gpu> {
        let (v, span) = self.get(n, "gpu")?;
        let name = match &v {
            Value::Enum(s) | Value::Str(s) => s.clone(),
            other => {
                self.type_error(n, span, "gpu", "a GPU name such as `H100_SXM_80GB`", other);
                return None;
            }
        };
        if let Some(g) = defined.get(&name) {
            return Some(g.clone());
        }
        if let Some(g) = Catalog::builtin().gpu(&name) {
            return Some(g.clone());
        }
        if self.gpu_blocks.contains_key(&name) {
            // The plan's block, which did not lower: its errors are reported there.
            return None;
        }
        let file = self.file_of(n, "gpu");
        let d = Diagnostic::new(codes::P0214, format!("unknown GPU `{name}`")).at(
            file,
            span,
            "not in the catalog",
        );
        let defined: Vec<&str> = defined.keys().map(String::as_str).collect();
        self.unknown_gpu(d, &name, &defined);
        None
    }

    /// Reports `d` about a GPU name found nowhere, with what was most likely meant among the
    /// built-in GPUs and `defined` (the plan's own).
    fn unknown_gpu(&mut self, d: Diagnostic, name: &str, defined: &[&str]) {
        if self.diagnostics.is_full() {
            self.diagnostics.push(d);
            return;
        }
        let names: Vec<&str> = Catalog::builtin()
            .gpu_names()
            .chain(defined.iter().copied())
            .collect();
        // `A100` or `V100` alone is ambiguous (40 and 80 GB, 16 and 32 GB parts differ in
        // memory and speed): list the variants instead of guessing one.
        let upper = name.to_ascii_uppercase();
        let variants: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.to_ascii_uppercase().starts_with(&upper))
            .collect();
        let d = match did_you_mean(name, names.iter().copied()) {
            _ if variants.len() > 1 => d.help(format!(
                "`{name}` comes in several variants: {}",
                variants
                    .iter()
                    .map(|v| format!("`{v}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(s) => d.suggest(s),
            None if defined.is_empty() => d.help(format!("built-in GPUs: {}", names.join(", "))),
            None => d.help(format!(
                "built-in GPUs: {}; or define it with a `gpu {name} {{ ... }}` block",
                names.join(", ")
            )),
        };
        self.diagnostics.push(d);
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The GPUs of one HGX or DGX board: a larger NVLink domain spans several hosts, so nodes
/// (hosts) smaller than it are still joined by NVLink.
const RACK_SCALE: u64 = 8;

/// Bytes as GiB the way a plan would write them: `79.6`, `95.58`, `80`.
fn gib_text(bytes: f64) -> String {
    fmt_num((bytes / GIB * 100.0).round() / 100.0)
}

/// `own`, a block's device as written over `preset`, with the figures a plan cannot write
/// taken from the preset. Those measured against what the block changed are scaled with it:
/// the attention kernel's rates with the 16-bit peak (it runs on the same tensor cores), the
/// pair bandwidth with the link's; both are dropped where the link is no longer NVLink.
fn inherit(own: Gpu, preset: &Gpu) -> Gpu {
    let sixteen = |g: &Gpu| g.peak(Precision::Bf16).or(g.peak(Precision::Fp16));
    let nvlink = own.intra_node.kind == LinkKind::Nvlink;
    let compute = match (sixteen(&own), sixteen(preset)) {
        (Some(a), Some(b)) => a / b,
        _ => 1.0,
    };
    let link = own.intra_node.bandwidth / preset.intra_node.bandwidth;
    Gpu {
        compute_capability: preset.compute_capability,
        pair_bus_bandwidth: preset
            .pair_bus_bandwidth
            .filter(|_| nvlink)
            .map(|b| b * link),
        flash_attention: preset.flash_attention.map(|f| FlashRates {
            forward: f.forward * compute,
            backward: f.backward * compute,
        }),
        cudnn_attention: preset.cudnn_attention.map(|f| FlashRates {
            forward: f.forward * compute,
            backward: f.backward * compute,
        }),
        sustained_clock: preset.sustained_clock,
        fp8_gemm_efficiency: preset.fp8_gemm_efficiency,
        fp8_sustained_clock: preset.fp8_sustained_clock,
        host_link: own.host_link.or(preset.host_link),
        host_memory_bandwidth: own.host_memory_bandwidth.or(preset.host_memory_bandwidth),
        nvlink_domain: own
            .nvlink_domain
            .or(preset.nvlink_domain.filter(|_| nvlink)),
        ..own
    }
}

#[cfg(test)]
mod tests {
    use crate::catalog::Catalog;
    use crate::check::{check_source, Checked};
    use crate::plan::{Gpu, LinkKind, Precision};

    fn check(gpu_block: &str) -> Checked {
        let text = format!(
            "{gpu_block}
             cluster c {{ nodes = 1, gpus_per_node = 8, gpu = mine }}
             model m {{ layers = 4, hidden = 1024, heads = 16, vocab = 32000, seq_len = 1024 }}
             train {{ global_batch = 8, precision = bf16 }}
             parallel {{ tp = 8, micro_batch = 1 }}"
        );
        check_source("t.tp", &text)
    }

    fn gpu(gpu_block: &str) -> Gpu {
        let c = check(gpu_block);
        assert!(c.ok(), "{:#?}", c.diagnostics);
        c.plan.unwrap().cluster.groups[0].gpu.clone()
    }

    fn codes(c: &Checked) -> Vec<&'static str> {
        c.diagnostics.iter().map(|d| d.code).collect()
    }

    #[test]
    fn a_block_with_a_preset_is_the_preset_but_for_what_it_writes() {
        let h100 = Catalog::builtin().gpu("H100_SXM_80GB").unwrap();
        let mine = gpu("gpu mine { preset = H100_SXM_80GB, intra_node { bandwidth = 200 GB/s } }");
        assert_eq!(mine.name, "mine");
        assert_eq!(mine.memory, h100.memory);
        assert_eq!(mine.hbm_bandwidth, h100.hbm_bandwidth);
        assert_eq!(mine.peak, h100.peak);
        assert_eq!(mine.gemm_efficiency, h100.gemm_efficiency);
        // `intra_node` merges attribute by attribute: the kind and latency stay.
        assert_eq!(mine.intra_node.bandwidth, 200e9);
        assert_eq!(mine.intra_node.kind, LinkKind::Nvlink);
        assert_eq!(mine.intra_node.latency, h100.intra_node.latency);
        // What a plan cannot write comes along; the pair bandwidth with the link's share,
        // which is how the catalog's H800 (an H100 with 200 GB/s of NVLink) got its own.
        assert_eq!(mine.compute_capability, Some(9.0));
        assert_eq!(mine.sustained_clock, h100.sustained_clock);
        assert_eq!(mine.flash_attention, h100.flash_attention);
        assert_eq!(mine.nvlink_domain, Some(8));
        let h800 = Catalog::builtin().gpu("H800_SXM_80GB").unwrap();
        let pair = mine.pair_bus_bandwidth.unwrap();
        assert!(
            (pair - h800.pair_bus_bandwidth.unwrap()).abs() < 0.1e9,
            "{pair}"
        );
        // Written with the quotes of a model preset, it is the same.
        assert_eq!(
            gpu("gpu mine { preset = \"H100_SXM_80GB\" }").peak,
            h100.peak
        );
    }

    #[test]
    fn a_written_peak_replaces_that_precision_and_scales_the_attention_rates() {
        let h100 = Catalog::builtin().gpu("H100_SXM_80GB").unwrap();
        let half = gpu("gpu mine { preset = H100_SXM_80GB, bf16 = 494.7 TFLOPS, memory = 70 GiB }");
        assert_eq!(half.peak(Precision::Bf16), Some(494.7e12));
        assert_eq!(half.peak(Precision::Fp8), h100.peak(Precision::Fp8));
        assert_eq!(half.memory, 70.0 * 1024f64.powi(3));
        let (was, now) = (h100.flash_attention.unwrap(), half.flash_attention.unwrap());
        assert!((now.forward / was.forward - 0.5).abs() < 1e-3);
        assert!((now.backward / was.backward - 0.5).abs() < 1e-3);
    }

    #[test]
    fn a_preset_over_pcie_has_no_nvlink_figures() {
        let pcie = gpu(
            "gpu mine { preset = H100_SXM_80GB, intra_node { kind = pcie, bandwidth = 50 GB/s } }",
        );
        assert_eq!(pcie.intra_node.kind, LinkKind::Pcie);
        assert_eq!(pcie.pair_bus_bandwidth, None);
        assert_eq!(pcie.nvlink_domain, None);
    }

    #[test]
    fn an_unknown_preset_is_one_error_at_its_value_with_the_closest_name() {
        let c = check("gpu mine { preset = H100_SXM_80G }");
        assert_eq!(codes(&c), ["P0214"], "{:#?}", c.diagnostics);
        let d = &c.diagnostics[0];
        let span = d.primary.as_ref().unwrap().span;
        assert_eq!(
            &c.sources.get(d.primary.as_ref().unwrap().file).text[span.range()],
            "H100_SXM_80G"
        );
        assert_eq!(d.help.as_deref(), Some("did you mean `H100_SXM_80GB`?"));
        // A family name lists its variants, as `cluster.gpu` does.
        let c = check("gpu mine { preset = H800 }");
        assert!(
            c.diagnostics[0]
                .help
                .as_deref()
                .is_some_and(|h| h.contains("`H800_SXM_80GB`")),
            "{:#?}",
            c.diagnostics
        );
    }

    #[test]
    fn a_preset_is_built_in_not_another_block_of_the_plan() {
        let c = check(
            "gpu base { preset = H100_SXM_80GB }
             gpu mine { preset = base }",
        );
        assert_eq!(codes(&c), ["P0214"], "{:#?}", c.diagnostics);
        assert!(c.diagnostics[0]
            .help
            .as_deref()
            .unwrap()
            .contains("`base` is a `gpu` block"));
    }

    #[test]
    fn memory_in_decimal_units_is_taken_as_written_and_says_what_was_meant() {
        let c = check("gpu mine { preset = H100_SXM_80GB, memory = 80 GB }");
        assert!(c.ok(), "a warning: {:#?}", c.diagnostics);
        assert_eq!(codes(&c), ["P0220"]);
        let d = &c.diagnostics[0];
        assert_eq!(
            d.message,
            "`memory = 80 GB` is 74.51 GiB, less than a GPU sold as 80 GB has"
        );
        assert_eq!(
            d.help.as_deref(),
            Some(
                "`H100_SXM_80GB` is sold as 80 GB and reports 79.6 GiB: leave `memory` out to \
                 take the preset's, or write `memory = 79.6 GiB`"
            )
        );
        let mem = c.plan.unwrap().cluster.groups[0].gpu.memory;
        assert_eq!(mem, 80e9, "taken as written");
        // Without a preset: the built-in GPUs sold as that size, least first.
        let c = check("gpu mine { memory = 80 GB, hbm_bandwidth = 3 TB/s, bf16 = 900 TFLOPS }");
        assert_eq!(codes(&c), ["P0220"]);
        assert_eq!(
            c.diagnostics[0].help.as_deref(),
            Some(
                "a GPU sold as 80 GB reports 79.6 GiB (H100_SXM_80GB, H800_SXM_80GB) or 80 GiB \
                 (A100_SXM_80GB): write `memory = 79.6 GiB`, the GiB the device reports"
            )
        );
        // A size no built-in GPU is sold as, in TB.
        let c = check("gpu mine { memory = 0.288 TB, hbm_bandwidth = 8 TB/s, bf16 = 2300 TFLOPS }");
        assert_eq!(codes(&c), ["P0220"]);
        assert!(c.diagnostics[0]
            .help
            .as_deref()
            .unwrap()
            .contains("about 288 GiB"));
        // Binary units, or a preset's own memory: nothing to say.
        assert!(
            check("gpu mine { preset = H100_SXM_80GB, memory = 79.6 GiB }")
                .diagnostics
                .is_empty()
        );
        assert!(check("gpu mine { preset = H100_SXM_80GB }")
            .diagnostics
            .is_empty());
    }

    fn on(gpu_block: &str, cluster: &str) -> Checked {
        let text = format!(
            "{gpu_block}
             cluster c {{ {cluster}
                 inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s }} }}
             model m {{ layers = 4, hidden = 1024, heads = 16, vocab = 32000, seq_len = 1024 }}
             train {{ global_batch = 144, precision = bf16 }}
             parallel {{ tp = 4, micro_batch = 1 }}"
        );
        check_source("t.tp", &text)
    }

    #[test]
    fn a_node_is_one_nvlink_domain() {
        let warned = |c: &Checked| {
            let d = c.diagnostics.iter().find(|d| d.code == "P0221")?;
            let l = d.primary.as_ref().unwrap();
            assert_eq!(
                &c.sources.get(l.file).text[l.span.range()],
                "4",
                "at gpus_per_node"
            );
            Some(d.message.clone())
        };
        // An NVL72 rack written as its trays of 4.
        let c = on("", "nodes = 36, gpus_per_node = 4, gpu = GB200");
        assert_eq!(
            warned(&c).as_deref(),
            Some("GB200's NVLink domain is 72 GPUs: nodes of 4 price the traffic inside it on `inter_node`")
        );
        // The rack as one node; or a part that says its domain is 4 (GB200 NVL4).
        assert!(warned(&on("", "nodes = 2, gpus_per_node = 72, gpu = GB200")).is_none());
        let nvl4 = on(
            "gpu mine { preset = GB200, nvlink_domain = 4 }",
            "nodes = 36, gpus_per_node = 4, gpu = mine",
        );
        assert!(nvl4.ok(), "{:#?}", nvl4.diagnostics);
        assert!(warned(&nvl4).is_none());
        // A board's domain is one host: four GPUs of an H100 board are no warning.
        assert!(warned(&on("", "nodes = 2, gpus_per_node = 4, gpu = H100_SXM_80GB")).is_none());
        // A node of two H100 boards is two domains.
        let c = on("", "nodes = 9, gpus_per_node = 16, gpu = H100_SXM_80GB");
        assert_eq!(
            c.diagnostics
                .iter()
                .find(|d| d.code == "P0221")
                .map(|d| d.message.as_str()),
            Some("a node of 16 H100_SXM_80GB is more than one NVLink domain of 8")
        );
        // Over PCIe, no NVLink domain to speak of.
        let c = on(
            "",
            "nodes = 9, gpus_per_node = 16, gpu = H100_SXM_80GB, intra_node { kind = pcie }",
        );
        assert!(
            c.diagnostics.iter().all(|d| d.code != "P0221"),
            "{:#?}",
            c.diagnostics
        );
    }

    #[test]
    fn without_a_preset_a_block_still_needs_its_figures() {
        let c = check("gpu mine { bf16 = 100 TFLOPS }");
        assert_eq!(codes(&c), ["P0206", "P0206"], "{:#?}", c.diagnostics);
        let c = check("gpu mine { memory = 10 GiB, hbm_bandwidth = 1 TB/s }");
        assert_eq!(codes(&c), ["P0206"], "{:#?}", c.diagnostics);
        assert!(c.diagnostics[0]
            .help
            .as_deref()
            .unwrap()
            .contains("preset = H100_SXM_80GB"));
    }
}
