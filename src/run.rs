//! `planc run`: the checked plan's layer operations timed on the local GPU, next to the
//! cost model's predictions, and the efficiencies that would make them agree.

use std::path::Path;
use std::process::ExitCode;

use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};
use planc_runtime::{measure, RunError, RunReport};

use crate::{load, render};

pub fn run(
    file: &Path,
    sets: &[String],
    repeats: usize,
    json: bool,
    color: ColorChoice,
) -> ExitCode {
    // Holes filled as `check` fills them (the simulator re-ranks the finalists), so the
    // operations timed are those of the layout `check` shows.
    let checked = match load::checked_with(file, sets) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut err = StandardStream::stderr(color);
    let _ = render::diagnostics(&mut err, &checked);
    let Some(plan) = checked.plan.as_ref().filter(|_| checked.ok()) else {
        eprintln!("{}: not running a plan with errors", file.display());
        return ExitCode::from(1);
    };
    let report = match measure(plan, repeats) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(match e {
                RunError::NoDriver | RunError::NoGpu | RunError::NoCublas => 2,
                _ => 1,
            });
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serialises")
        );
    } else {
        print!("{}", human(&report));
    }
    ExitCode::SUCCESS
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

fn human(r: &RunReport) -> String {
    let mut out = format!(
        "device   {} (predicted as the catalog's {}), median of {} runs per operation\n\
         one layer's forward operations (and the fused attention's backward) on one GPU, as the plan shards them:\n\n",
        r.device, r.catalog_gpu, r.repeats
    );
    out += &format!(
        "  {:<18} {:<10} {:>22} {:>12} {:>12} {:>7}\n",
        "operation", "kind", "shape", "predicted", "measured", "ratio"
    );
    for o in &r.ops {
        let (measured, ratio) = match (o.measured_s, o.predicted_s) {
            (Some(m), Some(p)) => (ms(m), format!("{:.2}", m / p)),
            (Some(m), None) => (ms(m), String::new()),
            (None, _) => ("-".into(), String::new()),
        };
        out += &format!(
            "  {:<18} {:<10} {:>22} {:>12} {:>12} {:>7}{}\n",
            o.name,
            o.kind,
            o.shape,
            o.predicted_s.map_or("-".into(), ms),
            measured,
            ratio,
            o.note
                .as_deref()
                .filter(|_| o.measured_s.is_none())
                .map(|n| format!("  ({n})"))
                .unwrap_or_default()
        );
    }
    out += "\n";
    if let (Some(ratio), Some(eff)) = (r.gemm_ratio, r.measured_gemm_efficiency) {
        out += &format!(
            "products took {ratio:.2}× the prediction: gemm_efficiency {eff:.2} on this device \
             (catalog: {:.2})\n",
            r.catalog_gemm_efficiency
        );
    }
    if let (Some(ratio), Some(eff)) = (r.memory_ratio, r.measured_memory_efficiency) {
        out += &format!(
            "memory-bound kernels took {ratio:.2}× the prediction: memory_efficiency {eff:.2} \
             (catalog: {:.2})\n",
            r.catalog_memory_efficiency
        );
    }
    if r.profiled {
        out += "predictions from the plan's measured device profile (cluster.profile)";
        if let (Some(g), Some(m)) = (r.gemm_ratio_constants, r.memory_ratio_constants) {
            out += &format!(
                "; from the catalog's constants the products took {g:.2}× and the memory-bound \
                 kernels {m:.2}× their predictions"
            );
        }
        out += "\n";
    }
    if let Some(ratio) = r.collective_ratio {
        out += &format!("collectives took {ratio:.2}× the prediction (NCCL over the local GPUs)\n");
    }
    out
}
