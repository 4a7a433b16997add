//! `--target torchtitan`: what it writes, what it refuses, and (where `torchtitan` is
//! installed in the Python of `PLANC_CONFORMANCE_PYTHON`) torchtitan's own ConfigManager
//! loading every emitted module, so that a field torchtitan does not know fails here.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use planc_compiler::check::Checked;
use planc_targets::{render_checked, write_artifacts, Target};

fn python() -> String {
    std::env::var("PLANC_CONFORMANCE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// A Llama-style model on 2 nodes of 8 GPUs with the given `parallel` and `job` bodies.
fn plan(parallel: &str, job: &str) -> String {
    format!(
        r#"
cluster c {{
    nodes = 2
    gpus_per_node = 8
    gpu = H100_SXM_80GB
    inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us }}
}}
model m {{ layers = 8, hidden = 1024, heads = 16, kv_heads = 4, ffn_hidden = 2816, vocab = 32000, seq_len = 2048, mlp = swiglu, norm = rmsnorm, position = rope, bias = false }}
train {{ global_batch = 64, precision = bf16, optimizer = adamw, steps = 50, lr = 2e-4, min_lr = 2e-5, warmup_steps = 5 }}
parallel {{ {parallel} }}
job {{ framework = torchtitan {job} }}
"#
    )
}

/// Layouts torchtitan runs, each setting a different part of its config.
fn runnable() -> Vec<(&'static str, Checked)> {
    [
        ("fsdp", "tp = 1, pp = 1, dp = 16, micro_batch = 2, zero = 3, recompute = full", ", checkpoint_dir = \"/ckpt/fsdp\""),
        ("ddp", "tp = 1, pp = 1, dp = 16, micro_batch = 1, zero = 0, recompute = none", ""),
        ("tp-sp-zero2", "tp = 4, pp = 1, dp = 4, micro_batch = 1, zero = 2, sequence_parallel = true, recompute = selective", ""),
        ("zero3-pp", "tp = 2, pp = 2, dp = 4, micro_batch = 1, zero = 3, schedule = 1f1b, recompute = selective", ""),
        ("interleaved-uneven", "tp = 1, pp = 2, vpp = 2, dp = 8, micro_batch = 1, zero = 3, schedule = interleaved, first_stage_layers = 2, last_stage_layers = 6, recompute = none", ""),
        ("cp-offload", "tp = 1, pp = 1, cp = 2, dp = 8, micro_batch = 1, zero = 3, offload = params, recompute = full", ""),
    ]
    .into_iter()
    .map(|(name, parallel, job)| (name, common::checked(&plan(parallel, job))))
    .collect()
}

fn artifact<'a>(arts: &'a [planc_targets::Artifact], name: &str) -> &'a str {
    &arts
        .iter()
        .find(|a| a.path == Path::new(name))
        .unwrap_or_else(|| panic!("{name} written"))
        .contents
}

#[test]
fn the_module_carries_the_plan_in_torchtitans_fields() {
    let c = &runnable()[3].1;
    let arts = render_checked(Target::Torchtitan, c, None).expect("torchtitan runs zero 3 with pp");
    let module = artifact(&arts, "planc_torchtitan.py");
    for field in [
        "data_parallel_shard_degree=4,",
        "tensor_parallel_degree=2,",
        "pipeline_parallel_degree=2,",
        "pipeline_parallel_schedule=\"1F1B\",",
        "fsdp_reshard_after_forward=\"always\",",
        // The rank's 16 sequences as one pipeline step of micro-batches of 1.
        "local_batch_size=16,",
        "global_batch_size=64,",
        "pipeline_parallel_microbatch_size=1,",
        "module_fqns_per_model_part=[[\"tok_embeddings\", \"layers.0\", \"layers.1\", \"layers.2\", \"layers.3\"], [\"layers.4\", \"layers.5\", \"layers.6\", \"layers.7\", \"norm\", \"lm_head\"]],",
        "lr=0.0002,",
        "warmup_steps=5,",
        "decay_type=\"cosine\",",
        "min_lr_factor=0.1,",
        "steps=50,",
        "activation_checkpoint=SelectiveAC.Config(),",
        "KV_HEADS = 4",
        "FFN = 2816",
    ] {
        assert!(module.contains(field), "{field} missing:\n{module}");
    }
    let launch = artifact(&arts, "launch-torchtitan.sh");
    assert!(launch.contains("-m torchtitan.train"), "{launch}");
    // The job is named after the model, `m`.
    assert!(launch.contains("--config planc_m \\"), "{launch}");
    // Uneven interleaved stages: 2 + 6 layers over 2 chunks each, in looped order.
    let arts = render_checked(Target::Torchtitan, &runnable()[4].1, None).unwrap();
    let module = artifact(&arts, "planc_torchtitan.py");
    assert!(
        module.contains("[[\"tok_embeddings\", \"layers.0\"], [\"layers.1\", \"layers.2\", \"layers.3\"], [\"layers.4\"], [\"layers.5\", \"layers.6\", \"layers.7\", \"norm\", \"lm_head\"]]"),
        "{module}"
    );
}

#[test]
fn what_torchtitan_cannot_run_is_refused_and_zero3_with_pp_is_not() {
    let refuse = |text: &str, why: &str| {
        let c = planc_compiler::check::check_source("t.tp", text);
        match (c.ok(), render_checked(Target::Torchtitan, &c, None)) {
            // check itself refuses the layout of a plan whose framework is torchtitan.
            (false, _) => assert!(
                c.diagnostics
                    .iter()
                    .any(|d| d.code == "P0330" && d.message.contains("torchtitan")),
                "{:?}",
                c.diagnostics
            ),
            (true, Err(e)) => {
                assert_eq!(e.code().id, "P0706", "{e}");
                assert!(e.to_string().contains(why), "{e}");
            }
            (true, Ok(_)) => panic!("emitted: {text}"),
        }
    };
    refuse(
        &plan("tp = 1, pp = 1, dp = 16, micro_batch = 1, zero = 1", ""),
        "zero = 1",
    );
    // The model and the training values are the target's own limits.
    let gpt = plan("tp = 1, pp = 1, dp = 16, micro_batch = 1, zero = 3", "").replace(
        "seq_len = 2048, mlp = swiglu, norm = rmsnorm, position = rope, bias = false }",
        "seq_len = 2048, mlp = gelu, norm = layernorm, position = learned, bias = true }",
    );
    refuse(&gpt, "Llama 3");
    refuse(
        &plan("tp = 1, pp = 1, dp = 16, micro_batch = 1, zero = 3", "")
            .replace("steps = 50", "steps = 50, dropout = 0.1"),
        "dropout",
    );
    // Heads of their own width: check warns (P0331), emit refuses at head_dim.
    let wide = plan("tp = 1, pp = 1, dp = 16, micro_batch = 1, zero = 3", "").replace(
        "heads = 16, kv_heads = 4",
        "heads = 16, kv_heads = 4, head_dim = 128",
    );
    let c = planc_compiler::check::check_source("t.tp", &wide);
    assert!(
        c.diagnostics.iter().any(|d| d.code == "P0331"),
        "{:?}",
        c.diagnostics
    );
    refuse(&wide, "head_dim = 128");
    // torchtitan's module under another target is refused with the way out.
    let c = &runnable()[0].1;
    let e = render_checked(Target::Torchrun, c, None).unwrap_err();
    assert!(e.to_string().contains("--target torchtitan"), "{e}");
    // ZeRO-3 with pp > 1: torchtitan's layout, P0317 under any other framework.
    let text = plan("tp = 2, pp = 2, dp = 4, micro_batch = 1, zero = 3", "");
    assert!(common::checked(&text).ok());
    let other = planc_compiler::check::check_source(
        "t.tp",
        &text.replace("framework = torchtitan", "framework = torch"),
    );
    assert!(other.diagnostics.iter().any(|d| d.code == "P0317"));
}

/// Why torchtitan's ConfigManager cannot be run here, if it cannot.
fn missing() -> Option<String> {
    match Command::new(python())
        .args(["-c", "import torchtitan.trainer"])
        .output()
    {
        Err(e) => Some(format!("cannot run {}: {e}", python())),
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`import torchtitan.trainer` failed in {}: {}",
            python(),
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
    }
}

#[test]
fn torchtitan_builds_every_emitted_configuration() {
    if let Some(why) = missing() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED torchtitan conformance: {why}; see README, \"Conformance tests\""
        );
        return;
    }
    let root = std::env::temp_dir().join(format!("planc-torchtitan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut plans: Vec<(String, Checked)> = common::valid_examples();
    plans.extend(runnable().into_iter().map(|(n, c)| (n.to_string(), c)));
    let mut args: Vec<String> = Vec::new();
    let mut emitted = 0;
    for (name, checked) in &plans {
        let Ok(arts) = render_checked(Target::Torchtitan, checked, None) else {
            continue;
        };
        let dir: PathBuf = root.join(name);
        write_artifacts(&dir, &arts, false).unwrap();
        let launch = artifact(&arts, "launch-torchtitan.sh");
        let function = launch
            .lines()
            .find_map(|l| l.trim().strip_prefix("--config "))
            .and_then(|l| l.split_whitespace().next())
            .expect("--config in the launch");
        args.push(dir.display().to_string());
        args.push(function.to_string());
        emitted += 1;
    }
    assert!(emitted >= 8, "{emitted} plans emitted");
    let out = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/torchtitan_config.py"))
        .args(&args)
        .output()
        .expect("python runs");
    let _ = std::fs::remove_dir_all(&root);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "torchtitan refused a module:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), emitted, "{stdout}");
    eprintln!("{stdout}");
}
