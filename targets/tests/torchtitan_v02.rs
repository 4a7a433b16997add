//! torchtitan 0.2.x accepts what the torchtitan target emits for it: every example and a
//! set of layouts the examples leave out (FSDP as zero 2 and 3, DDP, tensor, interleaved and
//! uneven pipelines, context parallelism, selective and full recompute, a constant schedule,
//! fp8, no clipping, tied embeddings on one GPU, a checkpoint folder) go through
//! `conformance/torchtitan_v02.py`: torchtitan's own ConfigManager parses the job file, the
//! flavor module registers its train spec, and the model built from it on the meta device
//! has planc's parameter count.
//!
//! It needs torchtitan 0.2.x and torch in the Python that `PLANC_TORCHTITAN_V02_PYTHON` names
//! (default `python3`; torchtitan 0.3 reads another form, so it usually lives in a venv of
//! its own: `pip install torch` then `pip install torchtitan==0.2.2`). Where it is missing the
//! test prints `SKIPPED` with the reason and passes.

mod common;

use std::path::Path;
use std::process::Command;

use planc_compiler::check::Checked;
use planc_targets::{render_checked, write_artifacts, Target};

fn python() -> String {
    std::env::var("PLANC_TORCHTITAN_V02_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Why torchtitan 0.2.x cannot be used here, if it cannot.
fn unavailable() -> Option<String> {
    let out = Command::new(python())
        .args([
            "-c",
            "import torch, importlib.metadata as m; print(m.version('torchtitan'))",
        ])
        .output();
    match out {
        Err(e) => Some(format!("cannot run {}: {e}", python())),
        Ok(o) if !o.status.success() => Some(format!(
            "torch or torchtitan does not import in {}: {}",
            python(),
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
        Ok(o) => {
            let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
            (!v.starts_with("0.2.")).then(|| {
                format!(
                    "{} has torchtitan {v}, not 0.2.x (set PLANC_TORCHTITAN_V02_PYTHON)",
                    python()
                )
            })
        }
    }
}

fn skip(reason: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED torchtitan 0.2.x conformance: {reason}"
    );
}

/// Llama-shaped plans on 8 GPUs beyond the examples, by name.
fn extra_plans() -> Vec<(String, Checked)> {
    let variants = [
        (
            "fsdp-zero3",
            "tp = 1, pp = 1, dp = 8, zero = 3, recompute = full",
            "",
        ),
        (
            "fsdp-zero2-tp2",
            "tp = 2, pp = 1, dp = 4, zero = 2, sequence_parallel = true, recompute = selective",
            "",
        ),
        (
            "ddp",
            "tp = 1, pp = 1, dp = 8, zero = 0",
            ", lr_schedule = constant, grad_clip = 0",
        ),
        (
            "pp2-interleaved",
            "tp = 2, pp = 2, dp = 2, zero = 2, schedule = interleaved, vpp = 2",
            "",
        ),
        (
            "pp4-1f1b-first-stage",
            "tp = 1, pp = 4, dp = 2, zero = 0, first_stage_layers = 2, last_stage_layers = 2",
            "",
        ),
        (
            "cp2-gpipe",
            "tp = 1, pp = 2, cp = 2, dp = 2, zero = 2, schedule = gpipe",
            "",
        ),
        ("fp8", "tp = 1, pp = 1, dp = 8, zero = 3", ""),
    ];
    let mut plans: Vec<(String, Checked)> = variants
        .iter()
        .map(|(name, parallel, train)| {
            let precision = if *name == "fp8" { "fp8" } else { "bf16" };
            let text = format!(
                r#"
cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
model m {{
    layers = 12, hidden = 1536, heads = 12, kv_heads = 4, ffn_hidden = 4096, vocab = 32000,
    seq_len = 2048, mlp = swiglu, norm = rmsnorm, position = rope, bias = false,
    tied_embeddings = false
}}
train {{ global_batch = 32, precision = {precision}, optimizer = adamw, warmup_steps = 10, steps = 100{train} }}
parallel {{ micro_batch = 1, {parallel} }}
job j {{ checkpoint_dir = "/ckpt/{name}" }}
"#
            );
            (name.to_string(), common::checked(&text))
        })
        .collect();
    // Tied embeddings on one GPU, where torchtitan keeps the tie.
    plans.push((
        "tied-one-gpu".into(),
        common::checked(
            r#"
cluster c { nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }
model m { preset = "llama3.2-1b", seq_len = 1024 }
train { global_batch = 8, precision = bf16, optimizer = adamw, steps = 20 }
parallel { tp = 1, pp = 1, dp = 1, micro_batch = 2 }
"#,
        ),
    ));
    plans
}

#[test]
fn torchtitan_02_reads_every_job_file_and_builds_every_flavor() {
    let mut plans = common::valid_examples();
    plans.extend(extra_plans());
    // Render first, so that a refusal of an extra plan fails even without torchtitan.
    let mut emitted = Vec::new();
    for (name, checked) in &plans {
        match render_checked(Target::Torchtitan, checked, None) {
            // Only plans with a 0.2.x form: an example that form cannot run (tied embeddings
            // under tp) says why in its launch script's snapshot.
            Ok(artifacts)
                if artifacts
                    .iter()
                    .any(|a| a.path.ends_with("torchtitan-job.toml")) =>
            {
                emitted.push((name, checked, artifacts))
            }
            Ok(_) | Err(_) if common::valid_examples().iter().any(|(n, _)| n == name) => {
                // Examples the target refuses (GPT-2's shapes, ZeRO-1) say why in the snapshots.
            }
            Ok(_) => panic!("{name}: no torchtitan 0.2.x form"),
            Err(e) => panic!("{name}: {e}"),
        }
    }
    // Most examples are not Llama-shaped or use what the 0.2.x form lacks (ZeRO-1, tied
    // embeddings under tp): these have it, and every extra plan did (else the loop panics).
    for name in ["llama3.2-1b-1gpu", "llama3-405b-meta-8k"] {
        assert!(
            emitted.iter().any(|(n, _, _)| n.as_str() == name),
            "{name} has a torchtitan 0.2.x form"
        );
    }
    if let Some(reason) = unavailable() {
        skip(&reason);
        return;
    }
    // One process for every folder: torch and torchtitan take seconds to import.
    let root = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(python());
    cmd.arg(script());
    for (name, checked, artifacts) in &emitted {
        let dir = root.path().join(name);
        write_artifacts(&dir, artifacts, false).unwrap();
        let world = checked.plan.as_ref().unwrap().cluster.world_size();
        cmd.arg(format!("{world}:{}", dir.display()));
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "torchtitan 0.2.x refused the files of {:?}:\n{stdout}\n{}",
        emitted.get(stdout.lines().count()).map(|e| e.0),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), emitted.len(), "{stdout}");
    // The one-GPU Llama 3.2 1B: the published 1.24 B parameters, tied.
    let llama = emitted
        .iter()
        .position(|e| e.0 == "llama3.2-1b-1gpu")
        .expect("the example emits");
    let line: serde_json::Value = serde_json::from_str(stdout.lines().nth(llama).unwrap()).unwrap();
    assert_eq!(line["params"], 1_235_814_400u64);
}

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/torchtitan_v02.py")
}

#[test]
fn a_key_torchtitan_does_not_know_fails_the_check() {
    if let Some(reason) = unavailable() {
        skip(&reason);
        return;
    }
    let (_, checked) = extra_plans().remove(0);
    let mut artifacts = render_checked(Target::Torchtitan, &checked, None).unwrap();
    let job = artifacts
        .iter_mut()
        .find(|a| a.path.ends_with("torchtitan-job.toml"))
        .unwrap();
    job.contents = job
        .contents
        .replace("[training]\n", "[training]\nmicro_batch_size = 2\n");
    let dir = tempfile::tempdir().unwrap();
    write_artifacts(dir.path(), &artifacts, false).unwrap();
    let out = Command::new(python())
        .arg(script())
        .arg(format!("8:{}", dir.path().display()))
        .output()
        .unwrap();
    assert!(!out.status.success(), "an unknown key was accepted");
}

/// A Llama plan that sets every `train` attribute torchtitan holds: each value is in the job
/// file, which parses as TOML, in torchtitan's own keys (without torchtitan installed).
#[test]
fn every_train_value_reaches_the_job_file() {
    let checked = common::checked(
        r#"
cluster c { nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }
model m {
    layers = 8, hidden = 1024, heads = 16, kv_heads = 4, ffn_hidden = 2816, vocab = 32000,
    seq_len = 1024, mlp = swiglu, norm = rmsnorm, position = rope, bias = false,
    tied_embeddings = false, rope_theta = 10000
}
train {
    global_batch = 64, precision = bf16, optimizer = adamw, lr = 2e-5, min_lr = 2e-6,
    lr_schedule = cosine, warmup_steps = 100, steps = 1000, weight_decay = 0.01,
    grad_clip = 0.5, adam_beta1 = 0.85, adam_beta2 = 0.97, adam_eps = 1e-7, seed = 7
}
parallel { tp = 2, pp = 1, dp = 4, micro_batch = 2, zero = 3, recompute = full, sequence_parallel = true }
job j { checkpoint_dir = "ckpt" }
"#,
    );
    let artifacts = render_checked(Target::Torchtitan, &checked, None).unwrap();
    let text = &artifacts
        .iter()
        .find(|a| a.path.ends_with("torchtitan-job.toml"))
        .unwrap()
        .contents;
    let job: toml::Table = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let get = |section: &str, key: &str| -> toml::Value {
        job[section]
            .get(key)
            .unwrap_or_else(|| panic!("[{section}] {key} missing:\n{text}"))
            .clone()
    };
    let close = |v: toml::Value, x: f64| (v.as_float().unwrap() - x).abs() < 1e-15;
    assert_eq!(get("optimizer", "name").as_str(), Some("AdamW"));
    assert!(close(get("optimizer", "lr"), 2e-5));
    assert!(close(get("optimizer", "beta1"), 0.85));
    assert!(close(get("optimizer", "beta2"), 0.97));
    assert!(close(get("optimizer", "eps"), 1e-7));
    assert!(close(get("optimizer", "weight_decay"), 0.01));
    assert_eq!(get("lr_scheduler", "warmup_steps").as_integer(), Some(100));
    assert_eq!(get("lr_scheduler", "decay_type").as_str(), Some("cosine"));
    assert!(close(get("lr_scheduler", "min_lr_factor"), 0.1));
    assert_eq!(get("training", "steps").as_integer(), Some(1000));
    assert!(close(get("training", "max_norm"), 0.5));
    assert_eq!(get("training", "local_batch_size").as_integer(), Some(2));
    assert_eq!(get("training", "global_batch_size").as_integer(), Some(64));
    assert_eq!(get("training", "seq_len").as_integer(), Some(1024));
    assert_eq!(
        get("training", "mixed_precision_param").as_str(),
        Some("bfloat16")
    );
    assert_eq!(get("debug", "seed").as_integer(), Some(7));
    assert_eq!(
        get("parallelism", "data_parallel_shard_degree").as_integer(),
        Some(4)
    );
    assert_eq!(
        get("parallelism", "tensor_parallel_degree").as_integer(),
        Some(2)
    );
    assert_eq!(get("activation_checkpoint", "mode").as_str(), Some("full"));
    assert_eq!(get("checkpoint", "folder").as_str(), Some("ckpt"));
    // A run of 1000 steps: a checkpoint every 1000, a log line every 10.
    assert_eq!(get("checkpoint", "interval").as_integer(), Some(1000));
    assert_eq!(get("metrics", "log_freq").as_integer(), Some(10));
    // The flavor's dimensions are the plan's.
    let flavor = &artifacts
        .iter()
        .find(|a| a.path.ends_with("planc_flavor.py"))
        .unwrap()
        .contents;
    for line in [
        "DIM = 1024",
        "LAYERS = 8",
        "HEADS = 16",
        "KV_HEADS = 4",
        "FFN_HIDDEN = 2816",
        "VOCAB = 32000",
        "ROPE_THETA = 10000.0",
    ] {
        assert!(flavor.contains(&format!("\n{line}\n")), "{line}:\n{flavor}");
    }
}
