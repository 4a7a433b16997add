//! On a GPU: a run whose steps are replayed from a CUDA graph (`train::replay`) trains
//! exactly as one that launches every kernel from the host: the same losses and gradient
//! norms, bit for bit, step after step, for the model shapes and precisions planc runs
//! (GPT-2 style with flash and standard attention, Llama style with rope, grouped keys and
//! values, RMSNorm and SwiGLU; fp32, bf16, fp16, whose loss scale keys the graph, and fp8,
//! whose scales change every step), over
//! several micro-batches a step. Without a GPU it prints SKIPPED and passes.

use std::io::Write;

use planc_compiler::check::check_source;
use planc_runtime::device::dist::World;
use planc_runtime::train::metrics::Summary;
use planc_runtime::train::step::{train, Options};
use planc_runtime::RunError;

const STEPS: u64 = 6;

fn run(text: &str, no_graphs: bool) -> Result<Summary, RunError> {
    let checked = check_source("graphs.tp", text);
    let plan = checked
        .plan
        .as_ref()
        .filter(|_| checked.ok())
        .unwrap_or_else(|| panic!("{text}: {:#?}", checked.diagnostics));
    let opts = Options {
        steps: Some(STEPS),
        plan_dir: ".".into(),
        plan_hash: "graphs-test".into(),
        no_graphs,
        ..Options::default()
    };
    train(plan, &opts, &World::ONE, |_| {})
}

fn plan(model: &str, train: &str) -> String {
    format!(
        "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }}
         model m {{ {model} }}
         train {{ global_batch = 8, steps = {STEPS}, lr = 1e-3, warmup_steps = 2, {train} }}
         parallel {{ tp = 1, pp = 1, dp = 1, micro_batch = 2, recompute = none }}"
    )
}

/// One run on the GPU at a time: the tests' threads would otherwise share it.
static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Trains `text` launched kernel by kernel and replayed; panics where they differ.
/// Returns false when there is no GPU.
fn same_losses(name: &str, text: &str) -> bool {
    let _one = GPU.lock().unwrap_or_else(|e| e.into_inner());
    let eager = match run(text, true) {
        Err(RunError::NoDriver | RunError::NoGpu) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED GPU test: no GPU");
            return false;
        }
        r => r.unwrap_or_else(|e| panic!("{name}, --no-graphs: {e}")),
    };
    let replayed = run(text, false).unwrap_or_else(|e| panic!("{name}, graphs: {e}"));
    assert_eq!(eager.graphs.replayed_steps, 0, "{name}: {:?}", eager.graphs);
    // The first step warms up and the last is timed: the four between replay.
    assert_eq!(
        (
            replayed.graphs.replayed_steps,
            replayed.graphs.off.as_deref()
        ),
        (STEPS - 2, None),
        "{name}: the graph did not replay"
    );
    assert_eq!(eager.steps.len(), replayed.steps.len(), "{name}");
    for (e, r) in eager.steps.iter().zip(&replayed.steps) {
        assert!(
            e.loss.is_finite(),
            "{name}: step {}: loss {}",
            e.step,
            e.loss
        );
        assert_eq!(
            (e.loss.to_bits(), e.grad_norm.map(f64::to_bits)),
            (r.loss.to_bits(), r.grad_norm.map(f64::to_bits)),
            "{name}: step {}: kernel by kernel loss {} norm {:?}, replayed loss {} norm {:?}",
            e.step,
            e.loss,
            e.grad_norm,
            r.loss,
            r.grad_norm
        );
    }
    let ms = |s: &Summary| s.measured_step_s * 1e3;
    eprintln!(
        "{name}: {} steps identical; median step {:.2} ms kernel by kernel, {:.2} ms replayed",
        STEPS,
        ms(&eager),
        ms(&replayed)
    );
    true
}

const GPT: &str = "layers = 2, hidden = 256, heads = 4, vocab = 1024, seq_len = 256";

#[test]
fn gpt_bf16_flash_replayed_trains_as_launched() {
    same_losses(
        "gpt bf16 flash",
        &plan(GPT, "precision = bf16, attention = flash"),
    );
}

#[test]
fn gpt_fp16_standard_replayed_trains_as_launched() {
    same_losses(
        "gpt fp16 standard",
        &plan(GPT, "precision = fp16, attention = standard"),
    );
}

#[test]
fn gpt_fp32_replayed_trains_as_launched() {
    same_losses(
        "gpt fp32 standard",
        &plan(GPT, "precision = fp32, attention = standard"),
    );
}

#[test]
fn gpt_fp8_replayed_trains_as_launched() {
    // fp8's scales move with its amax history every step, outside the recorded program.
    same_losses(
        "gpt fp8 flash",
        &plan(GPT, "precision = fp8, attention = flash"),
    );
}

#[test]
fn llama_bf16_flash_replayed_trains_as_launched() {
    same_losses(
        "llama bf16 flash",
        &plan(
            "preset = \"llama3.2-1b\", layers = 2, seq_len = 256",
            "precision = bf16, attention = flash",
        ),
    );
}
