//! Helpers shared by the emit tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use planc_compiler::check::{check_file, check_source, Checked};
use planc_compiler::source::FsLoader;

pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Every example whose plan checks without errors, by file stem.
pub fn valid_examples() -> Vec<(String, Checked)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tp"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let mut checked = check_file(&p, &FsLoader).unwrap();
            // Artifacts of framework planc name the plan by the path it was checked under:
            // the one a user at the repository's root types, not this machine's.
            checked.sources.files[0].display =
                format!("examples/{}", p.file_name().unwrap().to_string_lossy());
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            (checked.ok() && checked.plan.is_some()).then_some((stem, checked))
        })
        .collect()
}

pub fn checked(text: &str) -> Checked {
    let c = check_source("test.tp", text);
    assert!(
        c.ok(),
        "test plan has errors: {:?}",
        c.diagnostics
            .iter()
            .map(|d| format!("{} {}", d.code, d.message))
            .collect::<Vec<_>>()
    );
    c
}

/// A small valid plan (2 nodes × 4 GPUs) with the given `job` block body.
pub fn plan_with_job(job: &str) -> String {
    format!(
        r#"
cluster c {{
    nodes = 2
    gpus_per_node = 4
    gpu = A100_SXM_80GB
    inter_node {{ kind = infiniband, nics_per_node = 4, bandwidth = 200 Gb/s, latency = 5 us }}
}}
model m {{ layers = 8, hidden = 1024, heads = 16, vocab = 32000, seq_len = 2048 }}
train {{ global_batch = 64, precision = bf16, optimizer = adamw }}
parallel {{ tp = 2, pp = 2, dp = auto, micro_batch = 1, schedule = 1f1b, zero = 1, recompute = selective }}
job {{
{job}
}}
"#
    )
}

/// [`checked`] under the file name `name` (the path the artifacts of framework planc read the
/// plan from).
pub fn checked_named(name: &str, text: &str) -> Checked {
    let c = check_source(name, text);
    assert!(
        c.ok(),
        "test plan has errors: {:?}",
        c.diagnostics
            .iter()
            .map(|d| format!("{} {}", d.code, d.message))
            .collect::<Vec<_>>()
    );
    c
}

/// A data-parallel plan that `planc run` trains (2 nodes × 4 GPUs, dp 8, 500 steps), with
/// the given `job` block body after `framework = planc`.
pub fn planc_plan_with_job(job: &str) -> String {
    format!(
        r#"
cluster c {{
    nodes = 2
    gpus_per_node = 4
    gpu = H100_SXM_80GB
    inter_node {{ kind = infiniband, nics_per_node = 4, bandwidth = 400 Gb/s, latency = 5 us }}
}}
model m {{ layers = 4, hidden = 512, heads = 8, vocab = 32000, seq_len = 1024 }}
train {{ global_batch = 64, precision = bf16, optimizer = adamw, steps = 500 }}
parallel {{ tp = 1, pp = 1, dp = 8, micro_batch = 4, zero = 1, recompute = none }}
job {{
framework = planc
{job}
}}
"#
    )
}
