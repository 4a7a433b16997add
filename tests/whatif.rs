//! What-if without editing: `--set PATH=VALUE` on every command that reads a plan, and the
//! override file it stands for.

mod common;

use common::planc;

const BASE: &str = "examples/llama3-70b-64xh100.tp";
/// `BASE` with its `parallel` block overridden in a file that imports it.
const TP4: &str = "examples/llama3-70b-64xh100-tp4.tp";
const TP4_SETS: [&str; 8] = [
    "--set",
    "parallel.tp=4",
    "--set",
    "parallel.pp=8",
    "--set",
    "parallel.vpp=1",
    "--set",
    "parallel.schedule=1f1b",
];

fn json(args: &[&str]) -> serde_json::Value {
    let run = planc(args);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.transcript()))
}

#[test]
fn settings_report_what_the_override_file_reports() {
    let mut args = vec!["check", BASE, "--format", "json"];
    args.extend(TP4_SETS);
    let set = json(&args);
    let file = json(&["check", TP4, "--format", "json"]);
    assert_eq!(set["ok"], true, "{set:#}");
    assert_eq!(set["plan"]["tp"], 4);
    for key in ["plan", "model", "memory", "time", "throughput"] {
        assert_eq!(set[key], file[key], "{key}");
    }
    let base = json(&["check", BASE, "--format", "json"]);
    assert_ne!(set["time"], base["time"]);
}

#[test]
fn a_bad_setting_is_an_error_at_the_flag_in_every_command() {
    let commands: [&[&str]; 5] = [
        &["check"],
        &["simulate"],
        &["solve"],
        &[
            "emit",
            "--target",
            "megatron",
            "-o",
            "/nonexistent/never-written",
        ],
        &["run"],
    ];
    for cmd in commands {
        let mut args = cmd.to_vec();
        args.extend([BASE, "--set", "parallel.micro_bach=2"]);
        let run = planc(&args);
        assert_eq!(run.code, 1, "{cmd:?}: {}", run.transcript());
        assert!(
            run.stderr
                .contains("error[P0204]: unknown attribute `micro_bach` in `parallel`")
                && run.stderr.contains("┌─ --set:1:10")
                && run.stderr.contains("did you mean `micro_batch`?"),
            "{cmd:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn bad_settings_render_with_the_flag_as_typed() {
    let run = planc(&[
        "check",
        BASE,
        "--set",
        "parallel.tp=four",
        "--set",
        "cluster.inter_node.bandwidth=400 Gbit/s",
        "--set",
        "tp=2",
        "--set",
        "cluster.inter_node=1",
    ]);
    assert_eq!(run.code, 1);
    insta::assert_snapshot!(run.transcript());
}

#[test]
fn settings_reach_simulate_solve_and_emit() {
    let mut args = vec!["simulate", BASE];
    args.extend(TP4_SETS);
    let sim = planc(&args);
    assert_eq!(sim.code, 0, "{}", sim.transcript());
    assert!(sim.stdout.contains("on 8 pipeline ranks"), "{}", sim.stdout);
    // A hole from the command line: solve searches it.
    let solve = json(&[
        "solve",
        BASE,
        "--set",
        "parallel.tp=[4, 8]",
        "--set",
        "parallel.vpp=1",
        "--set",
        "parallel.schedule=1f1b",
        "--set",
        "parallel.pp=auto",
        "--format",
        "json",
    ]);
    assert_eq!(solve["ok"], true, "{solve:#}");
    let tps: Vec<i64> = solve["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["plan"]["tp"].as_i64().unwrap())
        .collect();
    assert!(tps.iter().all(|t| [4, 8].contains(t)), "{tps:?}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m");
    let emit = planc(&[
        "emit",
        BASE,
        "--target",
        "megatron",
        "-o",
        out.to_str().unwrap(),
        "--set",
        "parallel.tp=4",
        "--set",
        "parallel.pp=8",
        "--set",
        "parallel.vpp=1",
        "--set",
        "parallel.schedule=1f1b",
        "--set",
        "job.image=nvcr.io/nvidia/pytorch:25.01-py3",
    ]);
    assert_eq!(emit.code, 0, "{}", emit.transcript());
    let script = std::fs::read_to_string(out.join("launch-megatron.sh")).unwrap();
    assert!(
        script.contains("--tensor-model-parallel-size 4"),
        "{script}"
    );
    assert!(
        script.contains("--pipeline-model-parallel-size 8"),
        "{script}"
    );
}

#[test]
fn emit_refuses_settings_a_planc_job_would_not_see() {
    let dir = tempfile::tempdir().unwrap();
    let run = planc(&[
        "emit",
        "examples/gpt2-124m-2x8-planc.tp",
        "--target",
        "slurm",
        "-o",
        dir.path().to_str().unwrap(),
        "--set",
        "train.global_batch=1024",
    ]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(run.stderr.contains("would not see"), "{}", run.stderr);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn diff_sets_two_plans_side_by_side() {
    let run = planc(&["diff", BASE, TP4]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    insta::assert_snapshot!(run.transcript());
}

#[test]
fn diff_of_a_plan_and_its_settings_for_scripts() {
    let mut args = vec!["diff", BASE, "--format", "json"];
    args.extend(TP4_SETS);
    let d = json(&args);
    assert_eq!(d["ok"], true);
    assert_eq!(d["b"]["file"], format!("{BASE} --set parallel.tp=4 --set parallel.pp=8 --set parallel.vpp=1 --set parallel.schedule=1f1b"));
    let row = |name: &str| {
        d["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no row {name}: {d:#}"))
            .clone()
    };
    assert_eq!(
        (row("tp")["a"].clone(), row("tp")["b"].clone()),
        (8.into(), 4.into())
    );
    let step = row("step");
    let (a, b) = (step["a"].as_f64().unwrap(), step["b"].as_f64().unwrap());
    assert_eq!(a, d["a"]["report"]["time"]["step_s"].as_f64().unwrap());
    assert!((step["relative"].as_f64().unwrap() - (b / a - 1.0)).abs() < 1e-12);
    // The same B as the override file.
    let file = json(&["check", TP4, "--format", "json"]);
    assert_eq!(d["b"]["report"]["time"], file["time"]);
    assert_eq!(d["flags"]["target"], "megatron");
    let settings = &d["flags"]["differ"][0]["settings"];
    let tp = settings
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "--tensor-model-parallel-size")
        .unwrap();
    assert_eq!((tp["a"].as_str(), tp["b"].as_str()), (Some("8"), Some("4")));
    // Nothing else the sets did not change.
    assert!(settings.as_array().unwrap().len() <= 4, "{settings:#}");
}

#[test]
fn diff_says_what_trains_on_each_side() {
    let lora = "examples/llama2-70b-lora-32xa100.tp";
    let d = json(&[
        "diff",
        lora,
        "--set",
        "train.method=full",
        "--format",
        "json",
    ]);
    let method = d["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "method")
        .unwrap_or_else(|| panic!("no method row: {d:#}"))
        .clone();
    let a = method["a"].as_str().unwrap();
    assert!(
        a.starts_with("lora r64 (") && a.ends_with(" B trained)"),
        "{a}"
    );
    assert_eq!(method["b"], "full");
}

#[test]
fn diff_shows_what_it_can_of_a_plan_with_errors_and_fails() {
    let run = planc(&[
        "diff",
        BASE,
        "--set",
        "parallel.vpp=2",
        "--set",
        "parallel.tp=4",
        "--set",
        "parallel.pp=8",
    ]);
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(run.stderr.contains("error[P0401]"), "{}", run.stderr);
    assert!(run.stdout.contains("memory   peak"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("B cannot be emitted for megatron: the plan has errors"),
        "{}",
        run.stdout
    );
    let run = planc(&["diff", BASE, "--target", "nccl"]);
    assert_eq!(run.code, 2);
}
