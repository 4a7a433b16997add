//! `planc gpus [NAME]`: the built-in GPU catalog as planc prices it, and, for one GPU,
//! where each of its figures comes from (or why no source gives it).

use std::process::ExitCode;

use planc_compiler::catalog::{Catalog, GpuInfo};
use planc_compiler::plan::{Gpu, Precision};
use planc_compiler::schema::did_you_mean;

use crate::Format;

pub fn run(name: Option<&str>, format: Format) -> ExitCode {
    let catalog = Catalog::builtin();
    let Some(name) = name else {
        match format {
            Format::Human => print!("{}", table(catalog)),
            Format::Json => {
                let all: Vec<&toml::Table> = catalog.gpu_info.iter().map(|i| &i.entry).collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&all).expect("TOML is JSON")
                );
            }
        }
        return ExitCode::SUCCESS;
    };
    let Some(info) = catalog.gpu_info(name) else {
        let names: Vec<&str> = catalog.gpu_names().collect();
        let hint = match did_you_mean(name, names.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None => format!("built-in GPUs: {}", names.join(", ")),
        };
        eprintln!("error: no built-in GPU `{name}`; {hint}");
        return ExitCode::from(2);
    };
    match format {
        Format::Human => print!("{}", provenance(info)),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&info.entry).expect("TOML is JSON")
        ),
    }
    ExitCode::SUCCESS
}

/// One line per GPU: what planc prices it with.
fn table(catalog: &Catalog) -> String {
    let mut out = format!(
        "{:<15} {:>8} {:>10} {:>9} {:>8} {:>6} {:>20} {:>6}\n",
        "gpu", "sold as", "memory", "16-bit", "fp8", "HBM", "GPU link", "domain"
    );
    for ((_, g), info) in catalog.gpus.iter().zip(&catalog.gpu_info) {
        out.push_str(&row(g, info));
    }
    out.push_str(
        "\nmemory as the device reports it; dense peaks in TFLOPS; HBM in TB/s; the link per \
         GPU, one direction, in GB/s; domain: GPUs one NVLink fabric joins.\n\
         `planc gpus NAME` shows where each figure comes from.\n",
    );
    out
}

fn row(g: &Gpu, info: &GpuInfo) -> String {
    let tflops = |p| {
        g.peak(p)
            .map_or("—".to_string(), |f| format!("{}", f / 1e12))
    };
    let sixteen = match g.peak(Precision::Bf16) {
        Some(_) => tflops(Precision::Bf16),
        None => format!("{} fp16", tflops(Precision::Fp16)),
    };
    let link = &info.link_name;
    format!(
        "{:<15} {:>5} GB {:>6.2} GiB {:>9} {:>8} {:>6} {:>20} {:>6}\n",
        g.name,
        info.datasheet_memory_gb,
        g.memory / 1024f64.powi(3),
        sixteen,
        tflops(Precision::Fp8),
        g.hbm_bandwidth / 1e12,
        format!("{} {link}", g.intra_node.bandwidth / 1e9),
        g.nvlink_domain.map_or("—".to_string(), |d| d.to_string()),
    )
}

/// A GPU's figures under the source each comes from, then those no source gives.
fn provenance(info: &GpuInfo) -> String {
    let figure = |f: &str| {
        let v = info.entry.get(f).map_or(String::new(), |v| v.to_string());
        format!("  {f} = {v}\n")
    };
    let aliases: Vec<String> = info
        .entry
        .get("aliases")
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let mut out = info.name.clone();
    if !aliases.is_empty() {
        out.push_str(&format!(" (also {})", aliases.join(", ")));
    }
    out.push_str(" in compiler/catalog/gpus.toml\n");
    for s in &info.sources {
        out.push_str(&format!("\nsource: {}\n", s.cite));
        out.extend(s.fields.iter().map(|f| figure(f)));
    }
    for u in &info.unsourced {
        out.push_str(&format!("\nno source: {}\n", u.why));
        out.extend(u.fields.iter().map(|f| figure(f)));
    }
    if info.sustained_clock_unmeasured() {
        out.push_str(
            "\nnot measured: sustained_clock, the share of its burst clock the board keeps \
             through hours of training at its power limit; its products are priced at a \
             burst's clock\n",
        );
    }
    out
}
