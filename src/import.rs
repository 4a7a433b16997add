//! `planc import`: a job's launch script and configs as a plan, checked, written without
//! overwriting (`planc_targets::import` does the reading).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use planc_compiler::check::check_source;
use planc_targets::import::{import, Imported, Input, Options};

use crate::output::{write_new, WriteError};

pub struct Args {
    pub files: Vec<PathBuf>,
    pub out: Option<PathBuf>,
    pub cluster: Option<PathBuf>,
    pub nodes: Option<u64>,
    pub gpus_per_node: Option<u64>,
    pub gpu: Option<String>,
    pub force: bool,
    pub json: bool,
}

/// Files planc reads: regular files of at most 64 MiB, as every other command.
const MAX_BYTES: u64 = 64 << 20;

fn read(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_BYTES {
        return Err("larger than 64 MiB".into());
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes)
        .map_err(|e| format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

pub fn run(a: Args) -> ExitCode {
    let mut inputs = Vec::new();
    for f in &a.files {
        let text = if f.as_os_str() == "-" {
            let mut s = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut s) {
                eprintln!("error: cannot read standard input: {e}");
                return ExitCode::from(2);
            }
            s
        } else {
            match read(f) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: cannot read `{}`: {e}", f.display());
                    return ExitCode::from(2);
                }
            }
        };
        let name = if f.as_os_str() == "-" {
            "stdin".to_string()
        } else {
            f.display().to_string()
        };
        let path = if f.as_os_str() == "-" {
            PathBuf::from("stdin.sh")
        } else {
            f.clone()
        };
        inputs.push(Input { name, path, text });
    }
    let cluster = match &a.cluster {
        Some(p) => match read(p) {
            Ok(t) => Some((p.display().to_string(), t)),
            Err(e) => {
                eprintln!("error: cannot read `{}`: {e}", p.display());
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let opts = Options {
        cluster,
        nodes: a.nodes,
        gpus_per_node: a.gpus_per_node,
        gpu: a.gpu.clone(),
    };
    let reader = |p: &Path| read(p).ok();
    let imported = match import(&inputs, &opts, &reader) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let name = a
        .out
        .as_ref()
        .map_or("imported.tp".to_string(), |p| p.display().to_string());
    let checked = check_source(&name, &imported.plan);
    let report = serde_json::to_value(checked.report()).unwrap_or_default();
    let diagnostics = report.get("diagnostics").cloned().unwrap_or_default();
    let count = |sev: &str| {
        diagnostics
            .as_array()
            .map_or(0, |d| d.iter().filter(|x| x["severity"] == sev).count())
    };
    let (errors, warnings) = (count("error"), count("warning"));
    if let Some(out) = &a.out {
        if let Err(e) = write_new(out, imported.plan.as_bytes(), a.force) {
            eprintln!("error: {e}");
            return ExitCode::from(if matches!(e, WriteError::Exists(_)) {
                2
            } else {
                1
            });
        }
    }
    if a.json {
        let j = serde_json::json!({
            "plan": imported.plan,
            "output": a.out.as_ref().map(|p| p.display().to_string()),
            "placed": imported.placed,
            "unplaced": imported.unplaced,
            "assumed": imported.assumed,
            "check": { "ok": checked.ok(), "errors": errors, "warnings": warnings, "diagnostics": diagnostics },
        });
        println!("{}", serde_json::to_string_pretty(&j).expect("serialises"));
    } else {
        if a.out.is_none() {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(imported.plan.as_bytes());
            let _ = out.flush();
        }
        summary(&imported, a.out.as_deref(), &diagnostics, errors, warnings);
    }
    if checked.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn summary(
    i: &Imported,
    out: Option<&Path>,
    diagnostics: &serde_json::Value,
    errors: usize,
    warnings: usize,
) {
    let to = out.map_or("standard output".to_string(), |p| {
        format!("`{}`", p.display())
    });
    eprintln!(
        "imported to {to}: {} values placed, {} not placed and {} assumptions listed at the top of the plan",
        i.placed.len(),
        i.unplaced.len(),
        i.assumed.len()
    );
    if errors == 0 {
        eprintln!(
            "the plan checks ({warnings} warning{})",
            if warnings == 1 { "" } else { "s" }
        );
    } else {
        eprintln!(
            "the plan does not check yet: {errors} error{}, {warnings} warning{} (written all the same; `planc check` shows them in place):",
            if errors == 1 { "" } else { "s" },
            if warnings == 1 { "" } else { "s" }
        );
    }
    for d in diagnostics.as_array().into_iter().flatten() {
        let line = d["line"]
            .as_u64()
            .map(|l| format!(" (line {l})"))
            .unwrap_or_default();
        eprintln!(
            "  {}[{}] {}{line}",
            d["severity"].as_str().unwrap_or(""),
            d["code"].as_str().unwrap_or(""),
            d["message"].as_str().unwrap_or("")
        );
    }
}
