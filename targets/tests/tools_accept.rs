//! The real tools accept what planc emits: DeepSpeed loads every `ds_config.json` through its
//! own `DeepSpeedConfig`, Megatron-LM parses every launch script's arguments and runs
//! `validate_args`, and every PyTorchJob validates against the Kubernetes and Kubeflow schemas.
//! (`slurm_accepts.rs` does the same with `sbatch --test-only`.)
//!
//! Each test needs its tool in the Python that `PLANC_CONFORMANCE_PYTHON` names (default
//! `python3`) and, for Megatron-LM, a checkout in `PLANC_MEGATRON_LM`. Where the tool is
//! missing the test prints `SKIPPED <tool>: <reason>` and passes, so that a machine without
//! it still runs the rest; where the tool is present a rejected artifact fails the test with
//! the tool's own message. docs/guide/emitting.md ("Conformance tests") says how to install each.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use planc_compiler::check::Checked;
use planc_targets::{render_checked, write_artifacts, Artifact, Target};

fn python() -> String {
    std::env::var("PLANC_CONFORMANCE_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(name)
}

/// Written to the process's stderr directly, past the test harness's capture, so that a
/// skip shows in a plain `cargo test` run.
fn skip(tool: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {tool} conformance: {reason}; see docs/guide/emitting.md, \"Conformance tests\""
    );
}

/// Runs `python -c "import <modules>"` and returns why it failed, if it did.
fn missing_modules(modules: &str, pythonpath: Option<&Path>) -> Option<String> {
    let mut cmd = Command::new(python());
    cmd.arg("-c").arg(format!("import {modules}"));
    if let Some(p) = pythonpath {
        cmd.env("PYTHONPATH", p);
    }
    match cmd.output() {
        Err(e) => Some(format!("cannot run {}: {e}", python())),
        Ok(o) if o.status.success() => None,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("").to_string();
            Some(format!("`import {modules}` failed in {}: {last}", python()))
        }
    }
}

/// Plans beyond the examples, so that each tool sees the settings the examples leave out:
/// every ZeRO stage, offload, fp16, full recompute, interleaving, context and expert
/// parallelism.
fn extra_plans() -> Vec<(String, Checked)> {
    let variants = [
        (
            "zero0-fp16",
            "fp16",
            "tp = 1, pp = 1, zero = 0, recompute = none",
            "",
        ),
        (
            "zero2-offload",
            "bf16",
            "tp = 1, pp = 1, zero = 2, offload = optimizer, recompute = full",
            "",
        ),
        (
            "zero3-offload-params",
            "bf16",
            "tp = 1, pp = 1, zero = 3, offload = params, recompute = selective",
            "",
        ),
        (
            "tp2-zero1-full",
            "bf16",
            "tp = 2, pp = 1, zero = 1, recompute = full, sequence_parallel = true",
            "",
        ),
        (
            "interleaved",
            "bf16",
            "tp = 2, pp = 2, vpp = 2, schedule = interleaved, zero = 1, recompute = selective",
            "",
        ),
        (
            "cp2",
            "bf16",
            "tp = 1, pp = 2, cp = 2, zero = 1, recompute = selective",
            "",
        ),
        (
            "moe-ep4",
            "bf16",
            "tp = 1, pp = 1, ep = 4, zero = 1",
            ", experts = 8, top_k = 2",
        ),
        (
            "zero3-gelu-learned",
            "bf16",
            "tp = 2, pp = 1, zero = 3, recompute = full",
            ", mlp = gelu, position = learned, norm = layernorm",
        ),
    ];
    variants
        .iter()
        .map(|(name, precision, parallel, model_extra)| {
            let text = format!(
                r#"
cluster c {{
    nodes = 2
    gpus_per_node = 8
    gpu = A100_SXM_80GB
    inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s, latency = 5 us }}
}}
model m {{ layers = 8, hidden = 1024, heads = 16, vocab = 32000, seq_len = 2048{model_extra} }}
train {{ global_batch = 128, precision = {precision}, optimizer = adamw }}
parallel {{ dp = auto, micro_batch = 2, {parallel} }}
job {{ name = "conformance-{name}", image = "nvcr.io/nvidia/pytorch:24.05-py3", checkpoint_dir = "/ckpt/{name}", retries = 1 }}
"#
            );
            (name.to_string(), common::checked(&text))
        })
        .collect()
}

fn all_plans() -> Vec<(String, Checked)> {
    let mut plans = common::valid_examples();
    plans.extend(extra_plans());
    // Framework planc without a checkpoint folder (the example has one): the other branch
    // of the pod's command.
    let planc = common::planc_plan_with_job(
        "name = \"conformance-planc\", image = \"registry.example.com/planc:latest\"",
    );
    plans.push(("planc-no-checkpoint".into(), common::checked(&planc)));
    plans
}

/// The plan's artifacts for `target` written into `dir`, or None where the target refuses
/// the plan (P0706: DeepSpeed has no pipeline parallelism, say).
fn emit(target: Target, checked: &Checked, dir: &Path) -> Option<Vec<Artifact>> {
    let artifacts = render_checked(target, checked, None).ok()?;
    write_artifacts(dir, &artifacts, false).unwrap();
    Some(artifacts)
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} was rejected ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

#[test]
fn deepspeed_loads_every_ds_config() {
    if let Some(reason) = missing_modules("deepspeed", None) {
        return skip("deepspeed", &reason);
    }
    let mut accepted = 0;
    for (name, checked) in all_plans() {
        let dir = tempfile::tempdir().unwrap();
        if emit(Target::Deepspeed, &checked, dir.path()).is_none() {
            continue;
        }
        let p = &checked.plan.as_ref().unwrap().parallel;
        let out = run(
            Command::new(python())
                .arg(script("ds_config.py"))
                .arg(dir.path().join("ds_config.json"))
                .arg(p.dp.to_string())
                .arg(p.tp.to_string())
                .current_dir(dir.path()),
            &format!("{name}: ds_config.json"),
        );
        eprintln!("{name}: {}", out.lines().last().unwrap_or("").trim());
        accepted += 1;
    }
    assert!(accepted >= 4, "only {accepted} DeepSpeed configs checked");

    // Not a rubber stamp: the same config on one more data-parallel rank breaks
    // train_batch_size = micro x accumulation x dp, which DeepSpeed refuses.
    let (_, checked) = extra_plans().remove(0);
    let dir = tempfile::tempdir().unwrap();
    emit(Target::Deepspeed, &checked, dir.path()).unwrap();
    let dp = checked.plan.as_ref().unwrap().parallel.dp;
    let out = Command::new(python())
        .arg(script("ds_config.py"))
        .arg(dir.path().join("ds_config.json"))
        .arg((dp + 1).to_string())
        .arg("1")
        .output()
        .unwrap();
    assert!(!out.status.success(), "DeepSpeed accepted dp + 1");
}

/// Compute capability, which `validate_args` asks the GPU for (bf16 and FP8 checks).
fn compute_capability(gpu: &str) -> &'static str {
    match gpu.split('_').next().unwrap_or(gpu) {
        "B200" | "GB200" => "10.0",
        "H100" | "H200" | "H800" | "GH200" => "9.0",
        "L4" | "L40S" | "L40" => "8.9",
        "A10" | "A10G" | "A40" => "8.6",
        "A100" | "A800" => "8.0",
        "T4" => "7.5",
        "V100" => "7.0",
        other => panic!("no compute capability known for {other}: add it here"),
    }
}

#[test]
fn megatron_accepts_every_launch_script() {
    let Some(megatron) = std::env::var_os("PLANC_MEGATRON_LM").map(PathBuf::from) else {
        return skip(
            "megatron-lm",
            "PLANC_MEGATRON_LM is not set to a Megatron-LM checkout",
        );
    };
    if let Some(reason) = missing_modules("torch, megatron.training.arguments", Some(&megatron)) {
        return skip("megatron-lm", &reason);
    }
    let mut accepted = 0;
    for (name, checked) in all_plans() {
        let dir = tempfile::tempdir().unwrap();
        let Some(mut launch) = megatron_launch(&checked, dir.path(), &megatron) else {
            continue;
        };
        let out = run(&mut launch, &format!("{name}: launch-megatron.sh"));
        eprintln!("{name}: {}", out.lines().last().unwrap_or("").trim());
        accepted += 1;
    }
    assert!(accepted >= 8, "only {accepted} Megatron-LM scripts checked");

    // Not a rubber stamp: a tensor-parallel size that does not divide the world is refused.
    let (_, checked) = extra_plans().remove(3);
    let dir = tempfile::tempdir().unwrap();
    let mut launch = megatron_launch(&checked, dir.path(), &megatron).unwrap();
    let out = launch
        .args(["--tensor-model-parallel-size", "3"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "Megatron-LM accepted tp = 3 on 16 GPUs"
    );
}

/// The plan's Megatron-LM launch script, as a command whose `torchrun` hands the arguments to
/// Megatron-LM's parser instead of starting processes. Extra arguments given to the command
/// land after the plan's (the script appends `"$@"`).
fn megatron_launch(checked: &Checked, dir: &Path, megatron: &Path) -> Option<Command> {
    let artifacts = emit(Target::Megatron, checked, dir)?;
    let plan = checked.plan.as_ref().unwrap();
    let launch = artifacts
        .iter()
        .find(|a| a.path.extension().is_some_and(|e| e == "sh"))
        .expect("a launch script");
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let stub = bin.join("torchrun");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/bash\nexec {} {} {} {} \"$@\"\n",
            python(),
            script("megatron_args.py").display(),
            plan.cluster.world_size(),
            compute_capability(&plan.cluster.groups[0].gpu.name),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.arg(dir.join(&launch.path))
        .env("PATH", path)
        .env("PYTHONPATH", megatron)
        .env("MEGATRON_LM", megatron)
        .env("MASTER_ADDR", "localhost");
    Some(cmd)
}

#[test]
fn kubernetes_and_kubeflow_accept_every_pytorchjob() {
    if let Some(reason) = missing_modules("kubernetes_validate, kubeflow.training", None) {
        return skip("kubernetes", &reason);
    }
    let mut accepted = 0;
    for (name, checked) in all_plans() {
        let dir = tempfile::tempdir().unwrap();
        if emit(Target::K8s, &checked, dir.path()).is_none() {
            continue;
        }
        let out = run(
            Command::new(python())
                .arg(script("pytorchjob.py"))
                .arg(dir.path().join("pytorchjob.yaml")),
            &format!("{name}: pytorchjob.yaml"),
        );
        eprintln!("{name}: {}", out.lines().last().unwrap_or("").trim());
        accepted += 1;
    }
    assert!(accepted >= 6, "only {accepted} PyTorchJobs checked");
}

/// The schema check is not a rubber stamp: each planted mistake is refused.
#[test]
fn kubernetes_validator_rejects_planted_mistakes() {
    if missing_modules("kubernetes_validate, kubeflow.training", None).is_some() {
        return skip("kubernetes", "validator modules missing");
    }
    let (_, checked) = extra_plans().remove(3);
    let dir = tempfile::tempdir().unwrap();
    emit(Target::K8s, &checked, dir.path()).unwrap();
    let yaml = dir.path().join("pytorchjob.yaml");
    let good = std::fs::read_to_string(&yaml).unwrap();
    for (from, to) in [
        ("restartPolicy: OnFailure", "restartPolicy: Sometimes"),
        ("mountPath:", "mountPth:"),
        ("emptyDir:", "emptyDirectory:"),
        ("replicas: 1", "replicas: \"1\""),
    ] {
        assert!(good.contains(from), "{from} not in the PyTorchJob");
        std::fs::write(&yaml, good.replace(from, to)).unwrap();
        let out = Command::new(python())
            .arg(script("pytorchjob.py"))
            .arg(&yaml)
            .output()
            .unwrap();
        assert!(!out.status.success(), "`{to}` was accepted");
    }
}
