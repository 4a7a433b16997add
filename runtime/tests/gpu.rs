//! On a GPU: the timed cuBLAS product computes the right thing, and the measured times of a
//! plan's operations land near the model's. Without a CUDA driver (CI) the tests print
//! SKIPPED and pass; run them on a GPU machine (docs/guide/running.md, docs/guide/testing.md).

use std::io::Write;

use planc_compiler::check::check_source;
use planc_runtime::{measure, self_check, RunError};

fn skipped(e: &RunError) -> bool {
    if matches!(e, RunError::NoDriver | RunError::NoGpu) {
        let _ = writeln!(std::io::stderr(), "SKIPPED GPU test: {e}");
        return true;
    }
    false
}

#[test]
fn the_timed_product_is_the_product() {
    match self_check() {
        Err(e) if skipped(&e) => {}
        Err(e) => panic!("{e}"),
        Ok(rel) => assert!(rel < 1e-2, "relative error {rel}"),
    }
}

const PLAN: &str = "cluster c { nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }
model m { preset = \"llama3-8b\" }
train { global_batch = 64, precision = bf16, optimizer = adamw }
parallel { tp = 2, pp = 1, dp = auto, micro_batch = 2, sequence_parallel = true, recompute = selective }
";

#[test]
fn measured_operations_land_near_the_model() {
    let checked = check_source("gpu.tp", PLAN);
    let plan = checked.plan.as_ref().expect("the test plan checks");
    let report = match measure(plan, 10) {
        Err(e) if skipped(&e) => return,
        Err(e) => panic!("{e}"),
        Ok(r) => r,
    };
    let gemms: Vec<_> = report.ops.iter().filter(|o| o.kind == "gemm").collect();
    assert!(gemms.len() >= 4, "{report:#?}");
    for o in &gemms {
        let m = o.measured_s.expect("products run");
        assert!(m > 0.0 && m.is_finite(), "{o:?}");
    }
    let ratio = report.gemm_ratio.unwrap();
    assert!(
        (0.5..2.0).contains(&ratio),
        "products took {ratio}× the prediction: {report:#?}"
    );
    // With two GPUs or more, the tensor-parallel collectives run over NCCL.
    for o in report.ops.iter().filter(|o| o.kind == "collective") {
        if let Some(m) = o.measured_s {
            assert!(m > 0.0 && m.is_finite(), "{o:?}");
            assert!(o.predicted_s.is_some(), "{o:?}");
        }
    }
    eprintln!("{}", serde_json_like(&report));
}

fn serde_json_like(r: &planc_runtime::RunReport) -> String {
    format!(
        "{}: gemm ratio {:?} (efficiency {:?}), memory ratio {:?} (efficiency {:?}), collective ratio {:?}",
        r.device,
        r.gemm_ratio,
        r.measured_gemm_efficiency,
        r.memory_ratio,
        r.measured_memory_efficiency,
        r.collective_ratio
    )
}
