//! `planc calibrate`: measures this machine (`planc_runtime::calibrate`) with a progress
//! bar, writes the device profile as TOML (never over an existing file without --force),
//! and prints what it found next to the catalog's constants.

use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use planc_compiler::plan::Precision;
use planc_runtime::probe::calibrate::{calibrate, Profile};
use planc_runtime::RunError;

use crate::output;

pub fn run(
    out: Option<PathBuf>,
    gpus: Option<usize>,
    precision: Precision,
    force: bool,
    json: bool,
) -> ExitCode {
    let bar = ProgressBar::new(1);
    bar.set_style(
        ProgressStyle::with_template("{spinner} calibrating [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template"),
    );
    let profile = calibrate(precision, gpus, &|done, total, what| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(what.to_string());
    });
    bar.finish_and_clear();
    let profile = match profile {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(match e {
                RunError::NoDriver | RunError::NoGpu | RunError::NoCublas => 2,
                _ => 1,
            });
        }
    };
    let path = out.unwrap_or_else(|| {
        PathBuf::from(format!(
            "{}.profile.toml",
            profile.provenance.catalog_gpu.to_ascii_lowercase()
        ))
    });
    // A plan would refuse the file; a disturbed timing is not worth writing down.
    if let Err(e) = profile.check() {
        eprintln!("error: a measurement came out impossible ({e}); run `planc calibrate` again");
        return ExitCode::from(1);
    }
    let text = match toml::to_string(&profile) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: the profile does not serialise: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = output::write_new(&path, text.as_bytes(), force) {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&profile).expect("serialises")
        );
    } else {
        print!("{}", summary(&profile));
    }
    eprintln!("wrote {}", path.display());
    ExitCode::SUCCESS
}

fn summary(p: &Profile) -> String {
    let v = &p.provenance;
    let mut s = format!(
        "device   {} (catalog {}), driver {}, NVRTC {}, NCCL {}, {}; {:.0} s\n",
        v.device,
        v.catalog_gpu,
        v.driver_version,
        v.nvrtc_version,
        v.nccl_version.map(|n| n.to_string()).unwrap_or("-".into()),
        v.precision,
        v.seconds
    );
    let products = |s: &mut String, points: &[planc_compiler::profile::GemmPoint]| {
        for g in points {
            *s += &format!(
                "         {:>6}×{:>6}×{:>6} {:>8.1} {:>9.1} %\n",
                g.m,
                g.n,
                g.k,
                g.tflops,
                g.efficiency * 100.0
            );
        }
    };
    s += "products m×n×k            TFLOP/s  efficiency\n";
    products(&mut s, &p.gemm);
    if !p.fp8_gemm.is_empty() {
        s += "fp8 products m×n×k        TFLOP/s  efficiency (of the fp8 peak)\n";
        products(&mut s, &p.fp8_gemm);
    }
    s += "memory   bytes moved        GB/s  efficiency\n";
    for m in &p.memory {
        s += &format!(
            "         {:>14} {:>8.0} {:>9.1} %\n",
            m.bytes,
            m.gb_per_s,
            m.efficiency * 100.0
        );
    }
    // The optimizer beside the fastest memory-bound kernel: how much of the bandwidth a
    // plain copy reaches the update reaches.
    let copy = p.memory.iter().map(|m| m.gb_per_s).fold(0.0, f64::max);
    for o in &p.optimizer {
        s += &format!(
            "optimizer {} over {} parameters: {:.0} GB/s, {:.1} % of the memory-bound kernel's {:.0} GB/s\n",
            o.optimizer,
            o.params,
            o.gb_per_s,
            100.0 * o.gb_per_s / copy.max(f64::MIN_POSITIVE),
            copy
        );
    }
    if !p.norms.is_empty() {
        s += "norms    rows × width       forward GB/s  backward GB/s (the bytes the model counts)\n";
        for f in p.norms.iter().filter(|n| n.pass == "forward") {
            let bwd = p
                .norms
                .iter()
                .find(|b| b.pass == "backward" && b.rows == f.rows && b.width == f.width)
                .map_or("-".to_string(), |b| format!("{:.0}", b.gb_per_s));
            s += &format!(
                "         {:>6} × {:<6} {:>14.0} {:>14}\n",
                f.rows, f.width, f.gb_per_s, bwd
            );
        }
    }
    if !p.activations.is_empty() {
        s += &format!(
            "activation {:<6} {:>6} × {:<6} {:>12} {:>14} (the bytes the model counts)\n",
            "kind", "rows", "width", "forward GB/s", "backward GB/s"
        );
        for f in p.activations.iter().filter(|a| a.pass == "forward") {
            let bwd = p
                .activations
                .iter()
                .find(|b| {
                    b.pass == "backward"
                        && b.kind == f.kind
                        && b.rows == f.rows
                        && b.width == f.width
                })
                .map_or("-".to_string(), |b| format!("{:.0}", b.gb_per_s));
            s += &format!(
                "           {:<6} {:>6} × {:<6} {:>12.0} {:>14}\n",
                f.kind, f.rows, f.width, f.gb_per_s, bwd
            );
        }
    }
    s += &format!(
        "attention (causal; rate = the forward's FLOPs over the pass's time; {})\n",
        v.fused_attention.as_deref().unwrap_or("planc's kernels")
    );
    for a in &p.attention {
        let pass = match a.kind.as_str() {
            "flash" => "fused forward",
            "flash_backward" => "fused backward",
            "standard_backward" => "standard backward",
            _ => "standard forward",
        };
        s += &format!(
            "  {pass:>16} {} heads × {} × {}: {:.3} ms, {:.0} TFLOP/s\n",
            a.batch_heads,
            a.seq,
            a.head_dim,
            a.seconds * 1e3,
            a.tflops
        );
    }
    if let Some(c) = &p.power {
        let at = c
            .burst_clock_mhz
            .map(|m| format!(" at {m:.0} MHz"))
            .unwrap_or_default();
        s += &format!(
            "power    products ({:.0} TFLOP/s in a burst{at}) in a steady mix with copies: \
             how much slower each runs at the power limit\n",
            c.product_tflops
        );
        for pt in &c.points {
            let held = match (pt.clock_mhz, pt.power_w) {
                (Some(m), Some(w)) => format!(" ({m:.0} MHz, {w:.0} W)"),
                _ => String::new(),
            };
            s += &format!(
                "         at {:>3.0} % of the burst rate ({:>2} copies a product): products {:.3}×, copies {:.3}×{held}\n",
                pt.utilisation * 100.0,
                pt.copies,
                pt.product_slowdown,
                pt.memory_slowdown
            );
        }
    }
    if p.collectives.is_empty() {
        s += "collectives: one GPU here, none measured\n";
    } else {
        s += "collectives (NCCL; bus bandwidth as nccl-tests reports it)\n";
    }
    for c in &p.collectives {
        s += &format!(
            "         {:<13} {} GPUs {:>12} B  bus {:>6.1} GB/s\n",
            c.op, c.gpus, c.bytes, c.bus_gb_per_s
        );
    }
    if !p.overlap.is_empty() {
        s += "overlap  products with a collective issued beside them (what an overlapped reduction costs)\n";
    }
    for o in &p.overlap {
        s += &format!(
            "         {:>5}×{:>5}×{:>5} beside {:<13} {} GPUs {:>10} B: products {:.2} → {:.2} ms (they lose {:.0} % of the collective's time), collective {:.3} → {:.3} ms\n",
            o.m,
            o.n,
            o.k,
            o.op,
            o.gpus,
            o.bytes,
            o.products_alone_s * 1e3,
            o.products_beside_s * 1e3,
            o.slowdown() * 100.0,
            o.collective_alone_s * 1e3,
            o.collective_beside_s * 1e3
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::summary;
    use planc_compiler::profile::{ActivationPoint, Profile};
    use std::path::Path;

    #[test]
    fn the_summary_shows_every_part_the_shipped_profile_measured() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("compiler/catalog/profiles/h200_sxm_141gb.bf16.toml");
        let s = summary(&Profile::load(&path).unwrap());
        for part in ["products", "memory", "norms", "attention", "collectives"] {
            assert!(s.contains(part), "no {part} in\n{s}");
        }
        // A norm shape's line carries both passes.
        let line = s.lines().find(|l| l.contains("32768 × 768")).unwrap();
        assert_eq!(line.split_whitespace().count(), 5, "{line}");
    }

    #[test]
    fn the_summary_lists_the_activations_by_kind_and_shape_with_both_passes() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("compiler/catalog/profiles/h200_sxm_141gb.bf16.toml");
        let mut p = Profile::load(&path).unwrap();
        p.activations.clear();
        assert!(
            !summary(&p).contains("activation"),
            "a profile without them"
        );
        let point = |kind: &str, pass: &str, gb_per_s: f64| ActivationPoint {
            kind: kind.into(),
            pass: pass.into(),
            rows: 8192,
            width: 3072,
            seconds: 1e-4,
            gb_per_s,
        };
        p.activations = vec![
            point("gelu", "forward", 2411.0),
            point("gelu", "backward", 3207.0),
            point("swiglu", "forward", 2650.0),
        ];
        let s = summary(&p);
        let lines: Vec<&str> = s.lines().filter(|l| l.contains("8192 × 3072")).collect();
        assert_eq!(lines.len(), 2, "{s}");
        fn words(l: &str) -> Vec<&str> {
            l.split_whitespace().collect()
        }
        assert_eq!(
            words(lines[0]),
            ["gelu", "8192", "×", "3072", "2411", "3207"]
        );
        // A forward without its backward says so.
        assert_eq!(
            words(lines[1]),
            ["swiglu", "8192", "×", "3072", "2650", "-"]
        );
        // Between the norms and the attention, as calibrate measures them.
        let at = |part: &str| s.find(part).unwrap();
        assert!(at("norms") < at("activation") && at("activation") < at("attention"));
    }
}
