//! `planc import` as a user runs it: the plan on standard output or in `-o` (never over a
//! file without `--force`), the summary and the check's diagnostics on standard error, JSON
//! with the placed and unplaced values, exit 1 for a plan that does not check, 2 for an
//! input planc cannot read.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

const FIXTURES: &str = "targets/tests/import";

#[test]
fn a_megatron_script_imports_to_a_plan_that_checks() {
    let r = common::planc(&[
        "import",
        &format!("{FIXTURES}/megatron_llama2_7b.sh"),
        "--gpu",
        "H100_SXM_80GB",
    ]);
    assert_eq!(r.code, 0, "{}", r.transcript());
    assert!(r.stdout.contains("layers = 32"), "{}", r.stdout);
    assert!(r.stdout.contains("# Not placed"), "{}", r.stdout);
    assert!(r.stderr.contains("the plan checks"), "{}", r.stderr);
}

#[test]
fn out_is_not_overwritten_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.tp");
    std::fs::write(&out, "mine").unwrap();
    let args = [
        "import",
        &format!("{FIXTURES}/llama3_lora_sft.yaml"),
        "-o",
        out.to_str().unwrap(),
    ];
    let r = common::planc(&args);
    assert_eq!(r.code, 2, "{}", r.transcript());
    assert!(r.stderr.contains("--force"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine");
    let mut forced = args.to_vec();
    forced.push("--force");
    let r = common::planc(&forced);
    // Llama 3 8B with rank-8 LoRA adapters (train.method = lora) fits without ZeRO; the
    // check says that no launch planc writes carries the method.
    assert_eq!(r.code, 0, "{}", r.transcript());
    assert!(r.stderr.contains("the plan checks"), "{}", r.stderr);
    assert!(r.stderr.contains("P0331"), "{}", r.stderr);
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("preset = \"llama3-8b\""));
    assert!(
        r.stdout.is_empty(),
        "the plan went to the file: {}",
        r.stdout
    );
}

#[test]
fn json_lists_placed_and_unplaced_values_and_the_check() {
    let r = common::planc(&[
        "import",
        &format!("{FIXTURES}/seed001_ds_config.json"),
        "--format",
        "json",
    ]);
    // No model in a DeepSpeed config: written, but it does not check.
    assert_eq!(r.code, 1, "{}", r.transcript());
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(j["plan"].as_str().unwrap().contains("zero = 3"));
    let placed = j["placed"].as_array().unwrap();
    assert!(placed
        .iter()
        .any(|p| p["from"]["key"] == "zero_optimization.stage" && p["attr"] == "zero"));
    let unplaced = j["unplaced"].as_array().unwrap();
    assert!(unplaced
        .iter()
        .any(|u| u["from"]["key"] == "scheduler.params.warmup_min_lr"));
    assert_eq!(j["check"]["ok"], false);
    assert!(j["check"]["errors"].as_u64().unwrap() > 0);
}

#[test]
fn a_command_line_on_standard_input_imports() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_planc"))
        .args(["import", "-", "--nodes", "1", "--gpus-per-node", "8"])
        .current_dir(common::root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --vocab-size 50304 --micro-batch-size 4 --global-batch-size 64 --bf16\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("global_batch = 64"), "{stdout}");
}

#[test]
fn an_unknown_input_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("notes.json");
    std::fs::write(&f, "{\"hello\": 1}").unwrap();
    let r = common::planc(&["import", f.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.transcript());
    assert!(
        r.stderr
            .contains("neither a DeepSpeed config nor a Hugging Face config.json"),
        "{}",
        r.stderr
    );
    let r = common::planc(&["import", "no/such/file.sh"]);
    assert_eq!(r.code, 2, "{}", r.transcript());
}
