//! The generated `train.py` trains: the torchrun launch planc emits runs it for 3 steps on
//! the CPU with gloo, 2 processes, and the loss is finite and the closing JSON line printed.
//!
//! Needs `torch`, `transformers` and `numpy` in the Python that `PLANC_CONFORMANCE_PYTHON`
//! names (default `python3`), with `torchrun` beside it; without them each test prints
//! `SKIPPED` and passes (docs/guide/emitting.md, "Conformance tests").

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use planc_targets::{render_checked, write_artifacts, Target};

fn python() -> String {
    std::env::var("PLANC_CONFORMANCE_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn skip(reason: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED train.py conformance: {reason}; see docs/guide/emitting.md, \"Conformance tests\""
    );
}

/// Why the Python cannot run the script, if it cannot.
fn missing() -> Option<String> {
    match Command::new(python())
        .args(["-c", "import torch, transformers, numpy"])
        .output()
    {
        Err(e) => Some(format!("cannot run {}: {e}", python())),
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`import torch, transformers, numpy` failed in {}: {}",
            python(),
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
    }
}

/// PATH with the Python's own folder first, where pip puts `torchrun`.
fn path_with_python() -> String {
    let py = PathBuf::from(python());
    let mut dirs = Vec::new();
    if let Some(dir) = py.parent().filter(|d| !d.as_os_str().is_empty()) {
        dirs.push(dir.display().to_string());
    }
    dirs.push(std::env::var("PATH").unwrap_or_default());
    dirs.join(":")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(29511)
}

/// A tiny model on one node of 2 GPUs (dp 2, 2 micro-batches a step), framework `framework`.
fn plan(model: &str, parallel: &str, job: &str) -> String {
    format!(
        r#"
cluster c {{ nodes = 1, gpus_per_node = 2, gpu = H100_SXM_80GB }}
model m {{ {model} }}
train {{ global_batch = 8, precision = bf16, optimizer = adamw, steps = 3, lr = 1e-3, warmup_steps = 1 }}
parallel {{ tp = 1, pp = 1, dp = 2, micro_batch = 2, {parallel} }}
job {{ {job} }}
"#
    )
}

const GPT: &str = "layers = 2, hidden = 64, heads = 4, vocab = 512, seq_len = 32, mlp = gelu, \
                   norm = layernorm, position = learned";
const LLAMA: &str = "layers = 2, hidden = 64, heads = 4, kv_heads = 2, ffn_hidden = 128, \
                     vocab = 512, seq_len = 32, mlp = swiglu, norm = rmsnorm, position = rope";

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("planc-train-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Emits the torchrun target of `text` into a fresh folder and runs its launch script with
/// `extra` arguments for the training script; returns (stdout, the folder).
fn launch(name: &str, text: &str, extra: &[&str]) -> (String, PathBuf) {
    let checked = common::checked(text);
    let artifacts = render_checked(Target::Torchrun, &checked, None).expect("emits");
    let dir = tmpdir(name);
    write_artifacts(&dir, &artifacts, false).unwrap();
    // Started from another folder: the launch finds train.py beside itself.
    let out = Command::new("bash")
        .arg(dir.join("launch-torchrun.sh"))
        .args(["--device", "cpu"])
        .args(extra)
        .current_dir(std::env::temp_dir())
        .env("PATH", path_with_python())
        .env("MASTER_PORT", free_port().to_string())
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name}: the launch failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (stdout, dir)
}

/// The closing JSON line of the script's output.
fn summary(stdout: &str) -> serde_json::Value {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in:\n{stdout}"));
    serde_json::from_str(line).unwrap()
}

fn assert_trained(name: &str, stdout: &str, framework: &str) {
    let s = summary(stdout);
    assert_eq!(s["framework"], framework, "{name}: {s}");
    assert_eq!(s["steps"], 3, "{name}: {s}");
    let loss = s["final_loss"].as_f64().expect("a number");
    // 3 steps from a random init over a 512-token vocabulary: about ln 512 = 6.2.
    assert!(loss.is_finite() && loss > 1.0 && loss < 8.0, "{name}: {s}");
    assert!(s["step_ms_median"].as_f64().unwrap() > 0.0, "{name}: {s}");
    // One line a step (log interval 1 for short runs), each with the step time and rate.
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(lines.len(), 3, "{name}:\n{stdout}");
    assert!(lines[2].contains("ms |") && lines[2].ends_with("tokens/s"));
}

#[test]
fn the_generated_script_trains_under_torchrun_with_ddp_and_fsdp2() {
    if let Some(why) = missing() {
        return skip(&why);
    }
    let (out, _) = launch(
        "gpt-ddp",
        &plan(GPT, "zero = 0", "framework = torch"),
        &["--steps", "3", "--mock-data"],
    );
    assert_trained("gpt-ddp", &out, "torch-ddp-zero0");

    let ckpt = tmpdir("ckpt");
    let job = format!("framework = torch, checkpoint_dir = \"{}\"", ckpt.display());
    let (out, dir) = launch(
        "llama-fsdp",
        &plan(LLAMA, "zero = 3", &job),
        &["--mock-data"],
    );
    assert_trained("llama-fsdp", &out, "torch-fsdp2-zero3");
    // Written where the plan says, at the last step.
    let latest = std::fs::read_to_string(ckpt.join("latest")).expect("a checkpoint");
    assert_eq!(latest, "step-3");
    assert!(ckpt.join("step-3/step.json").is_file());
    let _ = std::fs::remove_dir_all(&ckpt);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_generated_script_reads_a_token_file_as_planc_run_does() {
    if let Some(why) = missing() {
        return skip(&why);
    }
    // 4096 uint16 tokens cycling through 0..512: a corpus a model learns fast.
    let dir = tmpdir("data");
    let data = dir.join("tokens.bin");
    let bytes: Vec<u8> = (0..4096u16).flat_map(|i| (i % 512).to_le_bytes()).collect();
    std::fs::write(&data, bytes).unwrap();
    let d = data.display().to_string();
    let (out, emitted) = launch(
        "zero1",
        &plan(GPT, "zero = 1", "framework = torch"),
        &["--data", &d],
    );
    assert_trained("zero1", &out, "torch-ddp-zero1");
    let _ = std::fs::remove_dir_all(emitted);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_script_is_written_only_where_it_is_launched() {
    let text = plan(GPT, "zero = 0", "framework = torch");
    let checked = common::checked(&text);
    let names = |t: Target| -> Vec<String> {
        render_checked(t, &checked, None)
            .unwrap()
            .iter()
            .map(|a| a.path.display().to_string())
            .collect()
    };
    assert!(names(Target::Torchrun).contains(&"train.py".to_string()));
    let launch = render_checked(Target::Torchrun, &checked, None).unwrap();
    let sh = &launch
        .iter()
        .find(|a| a.path == Path::new("launch-torchrun.sh"))
        .unwrap()
        .contents;
    assert!(sh.contains("\"$HERE\"/'train.py'"), "{sh}");
    // A named entrypoint is the user's own script: nothing is generated.
    let own = common::checked(&plan(
        GPT,
        "zero = 0",
        "framework = torch, entrypoint = \"mine.py\"",
    ));
    let arts = render_checked(Target::Torchrun, &own, None).unwrap();
    assert!(arts.iter().all(|a| a.path != Path::new("train.py")));
    // Model parallelism is refused with the way out, not run as data parallelism.
    let tp = common::checked(
        &plan(GPT, "zero = 0", "framework = torch")
            .replace("tp = 1, pp = 1, dp = 2", "tp = 2, pp = 1, dp = 1"),
    );
    let e = render_checked(Target::Torchrun, &tp, None).unwrap_err();
    assert_eq!(e.code().id, "P0706");
    assert!(e.to_string().contains("tp = 2"), "{e}");
    assert!(e.to_string().contains("entrypoint"), "{e}");
}
