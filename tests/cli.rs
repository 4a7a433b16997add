//! The command line as a user meets it: help, exit codes, missing files, `explain`.

mod common;

use common::planc;

#[test]
fn help_teaches_the_commands() {
    let run = planc(&["--help"]);
    assert_eq!(run.code, 0);
    for word in [
        "check", "simulate", "solve", "emit", "fmt", "run", "lsp", "explain", "Usage",
    ] {
        assert!(run.stdout.contains(word), "{word}: {}", run.stdout);
    }
    let run = planc(&["check", "--help"]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("--format"), "{}", run.stdout);
    assert!(run.stdout.contains("Exit status"), "{}", run.stdout);
}

#[test]
fn a_missing_file_is_a_usage_error_not_a_panic() {
    let run = planc(&["check", "no/such/plan.tp"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("cannot read `no/such/plan.tp`"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"));
}

#[test]
fn an_unknown_flag_is_a_usage_error() {
    let run = planc(&["check", "examples/gpt3-175b.tp", "--fromat", "json"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("--format"),
        "clap suggests the flag: {}",
        run.stderr
    );
}

#[test]
fn json_goes_to_stdout_and_parses() {
    let run = planc(&["check", "examples/gpt3-175b.tp", "--format", "json"]);
    assert_eq!(run.code, 0);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["plan"]["dp"], 8);
}

#[test]
fn explain_knows_every_code_it_lists() {
    let list = planc(&["explain"]);
    assert_eq!(list.code, 0);
    let codes: Vec<&str> = list
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(codes.len() > 40);
    for code in codes {
        let one = planc(&["explain", code]);
        assert_eq!(one.code, 0, "{code}");
        assert!(one.stdout.starts_with(code), "{code}: {}", one.stdout);
    }
    let bad = planc(&["explain", "P9999"]);
    assert_eq!(bad.code, 2);
}

#[test]
fn gpus_lists_the_catalog_and_where_each_figure_comes_from() {
    let run = planc(&["gpus"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    for name in [
        "H100_SXM_80GB",
        "H800_SXM_80GB",
        "H20_96GB",
        "B200",
        "GB200",
        "MI300X",
    ] {
        assert!(run.stdout.contains(name), "{name}: {}", run.stdout);
    }
    assert!(run.stdout.contains("448 Infinity Fabric"), "{}", run.stdout);
    // One GPU, by alias: its figures under their sources, and those without one.
    let run = planc(&["gpus", "h800_80gb"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(
        run.stdout.starts_with("H800_SXM_80GB (also "),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("intra_node_bandwidth_gbs = 200.0"),
        "{}",
        run.stdout
    );
    let unsourced = run.stdout.split("\nno source: ").nth(1).unwrap_or_default();
    assert!(unsourced.contains("memory_gib = 79.6"), "{}", run.stdout);
    // The H800 carries the H100's sustained clock (among its unsourced figures); the A100
    // has none, measured or carried, so its products are priced at a burst's clock.
    assert!(!run.stdout.contains("not measured: sustained_clock"));
    let a100 = planc(&["gpus", "A100_SXM_80GB"]);
    assert!(
        a100.stdout.contains("\nnot measured: sustained_clock, "),
        "{}",
        a100.stdout
    );
    // JSON: the catalog's entries as written, provenance included.
    let run = planc(&["gpus", "--format", "json"]);
    let all: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let gb200 = all
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "GB200")
        .unwrap();
    assert_eq!(gb200["nvlink_domain"], 72);
    assert!(gb200["source"][0]["cite"].is_string(), "{gb200}");
    // A name the catalog lacks is a usage error with the closest one.
    let run = planc(&["gpus", "H20"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("did you mean `H20_96GB`?"),
        "{}",
        run.stderr
    );
}

#[test]
fn simulate_writes_a_trace_and_a_timeline_and_never_overwrites() {
    let dir = std::env::temp_dir().join(format!("planc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("step.svg");
    let trace = dir.join("step.json");
    let (svg_s, trace_s) = (svg.to_str().unwrap(), trace.to_str().unwrap());
    let run = planc(&[
        "simulate",
        "examples/gpt3-175b.tp",
        "--svg",
        svg_s,
        "--trace",
        trace_s,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("16 pipeline ranks (1024 GPUs by symmetry)"),
        "{}",
        run.stdout
    );
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.matches("<rect").count() > 1000);
    let events: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert!(events["traceEvents"].as_array().unwrap().len() > 1000);

    // A second run refuses to replace the files, before doing any work.
    std::fs::write(&svg, "mine").unwrap();
    let again = planc(&["simulate", "examples/gpt3-175b.tp", "--svg", svg_s]);
    assert_eq!(again.code, 2);
    assert!(again.stderr.contains("--force"), "{}", again.stderr);
    assert_eq!(std::fs::read_to_string(&svg).unwrap(), "mine");
    let forced = planc(&[
        "simulate",
        "examples/gpt3-175b.tp",
        "--svg",
        svg_s,
        "--force",
    ]);
    assert_eq!(forced.code, 0);
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn simulate_splits_the_busiest_stage_by_kind_of_work_largest_first() {
    let run = planc(&["simulate", "examples/gpt3-175b.tp"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("kinds "))
        .unwrap_or_else(|| panic!("no kinds line in\n{}", run.stdout));
    // "linear layers 12.345 s (61 %), attention ..." : the shares fall and the layers lead.
    let shares: Vec<f64> = line
        .split(" %")
        .filter_map(|part| part.rsplit('(').next()?.trim().parse().ok())
        .collect();
    assert!(shares.len() >= 5, "{line}");
    assert!(shares.windows(2).all(|w| w[0] >= w[1]), "{line}");
    assert!(
        line.contains("linear layers") && line.contains("communication"),
        "{line}"
    );
    let total: f64 = shares.iter().sum();
    assert!(
        (50.0..=101.0).contains(&total),
        "{line}: {total} % of the step"
    );
}

#[test]
fn solve_ranks_layouts_and_reports_the_best_plan() {
    let run = planc(&["solve", "examples/llama3-70b-solve.tp", "--top", "3"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("searched "), "{}", run.stdout);
    assert!(run.stdout.contains("Pareto front"), "{}", run.stdout);
    let ranks = run
        .stdout
        .lines()
        .filter(|l| l.starts_with(['1', '2', '3', '4']))
        .count();
    assert_eq!(ranks, 3, "--top 3 shows three layouts: {}", run.stdout);
    assert!(run
        .stdout
        .contains("the best plan, as `planc check` reports it"));

    let json = planc(&["solve", "examples/llama3-70b-solve.tp", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["best"]["ok"], true);
    assert_eq!(v["candidates"][0]["rank"], 1);
    // `check` on the same file picks the same plan as `solve`.
    let check = planc(&["check", "examples/llama3-70b-solve.tp", "--format", "json"]);
    let c: serde_json::Value = serde_json::from_str(&check.stdout).unwrap();
    assert_eq!(c["plan"]["tp"], v["candidates"][0]["plan"]["tp"]);
    assert_eq!(c["plan"]["pp"], v["candidates"][0]["plan"]["pp"]);
    assert_eq!(c["time"]["step_s"], v["candidates"][0]["step_s"]);
}

#[test]
fn solve_explains_an_infeasible_plan_and_fails() {
    let run = planc(&["solve", "examples/infeasible-llama2-13b-t4.tp"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("error[P0801]"), "{}", run.stderr);
    assert!(run.stderr.contains("no valid layout"), "{}", run.stderr);
}

#[test]
fn emit_writes_artifacts_and_never_overwrites_or_emits_a_bad_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let out_s = out.to_str().unwrap();
    let args = [
        "emit",
        "examples/t4-pcie-box.tp",
        "--target",
        "deepspeed",
        "-o",
        out_s,
    ];
    let run = planc(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for file in ["ds_config.json", "hostfile", "launch-deepspeed.sh"] {
        assert!(out.join(file).is_file(), "{file}: {}", run.stdout);
        assert!(run.stdout.contains(file), "{}", run.stdout);
    }
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("ds_config.json")).unwrap())
            .unwrap();
    assert_eq!(config["train_batch_size"], 32);

    // A second run writes nothing: not even the files that do not exist yet.
    std::fs::write(out.join("hostfile"), "mine").unwrap();
    std::fs::remove_file(out.join("ds_config.json")).unwrap();
    let again = planc(&args);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("P0710"), "{}", again.stderr);
    assert_eq!(
        std::fs::read_to_string(out.join("hostfile")).unwrap(),
        "mine"
    );
    assert!(!out.join("ds_config.json").exists());
    let forced = planc(&[&args[..], &["--force"]].concat());
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert_ne!(
        std::fs::read_to_string(out.join("hostfile")).unwrap(),
        "mine"
    );

    // A plan with errors is refused, and nothing is written.
    let bad = dir.path().join("bad");
    let run = planc(&[
        "emit",
        "examples/oom-llama3-70b-8xa100.tp",
        "--target",
        "megatron",
        "-o",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("not emitting a plan with errors"));
    assert!(!bad.exists());

    // A target that cannot express the plan says which part and why.
    let run = planc(&[
        "emit",
        "examples/gpt3-175b.tp",
        "--target",
        "deepspeed",
        "-o",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("P0706") && run.stderr.contains("pp = 16"));
    // At the attribute that asks for it.
    assert!(
        run.stderr.contains("gpt3-175b.tp:") && run.stderr.contains("parallel.pp"),
        "{}",
        run.stderr
    );
}

#[test]
fn emit_of_framework_planc_runs_planc_on_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("slurm");
    let run = planc(&[
        "emit",
        "examples/gpt2-124m-2x8-planc.tp",
        "--target",
        "slurm",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    let script = std::fs::read_to_string(out.join("job.sbatch")).unwrap();
    assert!(
        script.contains("PLAN='examples/gpt2-124m-2x8-planc.tp'"),
        "{script}"
    );
    assert!(script.contains("--node-rank \"$SLURM_NODEID\""), "{script}");
    let run = planc(&[
        "emit",
        "examples/gpt2-124m-2x8-planc.tp",
        "--target",
        "torchrun",
        "-o",
        dir.path().join("t").to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("error[P0706]"), "{}", run.stderr);

    // A layout this planc cannot run yet is written all the same, with a warning.
    let plan = dir.path().join("tp2.tp");
    let text = std::fs::read_to_string(common::root().join("examples/gpt2-124m-2x8-planc.tp"))
        .unwrap()
        .replace("zero = 1 ", "zero = 2 ");
    std::fs::write(&plan, text).unwrap();
    let run = planc(&[
        "emit",
        plan.to_str().unwrap(),
        "--target",
        "slurm",
        "-o",
        dir.path().join("tp2").to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("warning: this planc cannot run the plan")
            && run.stderr.contains("zero = 2"),
        "{}",
        run.stderr
    );
    assert!(dir.path().join("tp2/job.sbatch").is_file());
}

#[test]
fn solve_emits_the_best_plan_in_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let run = planc(&[
        "solve",
        "examples/llama3-70b-solve.tp",
        "--emit",
        "megatron",
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let script = std::fs::read_to_string(dir.path().join("launch-megatron.sh")).unwrap();
    // The layout solve chose (as check reports it) is the one in the script.
    let check = planc(&["check", "examples/llama3-70b-solve.tp", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&check.stdout).unwrap();
    let tp = v["plan"]["tp"].as_u64().expect("report has plan.tp");
    assert!(
        script.contains(&format!("--tensor-model-parallel-size {tp}\n")),
        "tp {tp} not in {script}"
    );
}

#[test]
fn run_says_plainly_when_there_is_no_gpu() {
    let run = planc(&[
        "run",
        "examples/llama3-8b-1x8h100.tp",
        "--ops",
        "--repeat",
        "3",
    ]);
    match run.code {
        // CI and most build machines: no CUDA driver.
        2 => assert!(
            run.stderr.contains("needs a machine with an NVIDIA GPU")
                || run.stderr.contains("cuBLAS"),
            "{}",
            run.stderr
        ),
        0 => assert!(
            run.stdout.contains("mlp_up_proj") && run.stdout.contains("gemm_efficiency"),
            "{}",
            run.stdout
        ),
        code => panic!("exit {code}: {}", run.stderr),
    }
    // Training: without a driver, exit 2 and say so; with one, the run trains.
    let train = planc(&["run", "examples/gpt2-124m-1gpu.tp", "--steps", "1"]);
    match train.code {
        2 => assert!(
            train.stderr.contains("needs a machine with an NVIDIA GPU"),
            "{}",
            train.stderr
        ),
        0 => assert!(train.stderr.contains("step    1/1"), "{}", train.stderr),
        code => panic!("exit {code}: {}", train.stderr),
    }
    // A folder that already holds checkpoints is not written over by a run that does not
    // resume from it: misuse, exit 2, before any GPU is touched.
    let ckpt = tempfile::tempdir().unwrap();
    let step = ckpt.path().join("step-0000004");
    std::fs::create_dir_all(step.join("optimizer")).unwrap();
    for f in ["model.safetensors", "config.json", "planc.json"] {
        std::fs::write(step.join(f), "{}").unwrap();
    }
    std::fs::write(ckpt.path().join("latest"), "step-0000004").unwrap();
    let dir = ckpt.path().to_str().unwrap();
    let again = planc(&["run", "examples/gpt2-124m-1gpu.tp", "--save", dir]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(
        again.stderr.contains("already holds checkpoints"),
        "{}",
        again.stderr
    );
    assert!(again.stderr.contains("--resume"), "{}", again.stderr);
    // A layout the runtime does not run yet is refused before any GPU is touched.
    let tp = planc(&["run", "examples/llama3-8b-1x8h100.tp"]);
    assert_eq!(tp.code, 1, "{}", tp.stderr);
    assert!(tp.stderr.contains("cp = 2"), "{}", tp.stderr);
    // Tensor parallelism runs, but only over a vocabulary it can split evenly: said
    // before any process or GPU is started.
    let odd = ckpt.path().join("tp-odd-vocab.tp");
    std::fs::write(
        &odd,
        "cluster c { nodes = 1, gpus_per_node = 2, gpu = H200_SXM_141GB }
         model m { preset = \"gpt2-124m\", vocab = 50257 }
         train { global_batch = 8, precision = bf16, optimizer = adamw }
         parallel { tp = 2, pp = 1, dp = 1, micro_batch = 8 }",
    )
    .unwrap();
    let tp = planc(&["run", odd.to_str().unwrap()]);
    assert_eq!(tp.code, 1, "{}", tp.stderr);
    assert!(
        tp.stderr.contains("vocab (50257) over tp = 2 ranks"),
        "{}",
        tp.stderr
    );
    // A data-parallel plan over two nodes, started without --nnodes on a machine without
    // its GPUs: the launcher says how many it needs and how to start each node.
    let nodes = planc(&["run", "examples/gpt2-124m-2x8-planc.tp"]);
    assert_eq!(nodes.code, 1, "{}", nodes.stderr);
    assert!(
        nodes.stderr.contains("places 16 GPUs on this node"),
        "{}",
        nodes.stderr
    );
    assert!(
        nodes.stderr.contains("--nnodes 2 --node-rank R"),
        "{}",
        nodes.stderr
    );
    let bad = planc(&["run", "examples/oom-llama3-70b-8xa100.tp"]);
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    assert!(bad.stderr.contains("not running a plan with errors"));
    // A model too large for the GPU whole: `--layers K` is checked as a K-layer model, so
    // the memory error of the whole is not raised; the run goes on to look for a GPU.
    let whole = ckpt.path().join("llama3-8b-1gpu.tp");
    std::fs::write(
        &whole,
        "cluster c { nodes = 1, gpus_per_node = 1, gpu = H200_SXM_141GB }
         model m { preset = \"llama3-8b\" }
         train { global_batch = 2, precision = bf16, optimizer = adamw, attention = flash }
         parallel { micro_batch = 1, recompute = full }",
    )
    .unwrap();
    let refused = planc(&["run", whole.to_str().unwrap(), "--steps", "1"]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("P0401"), "{}", refused.stderr);
    let two = planc(&[
        "run",
        whole.to_str().unwrap(),
        "--layers",
        "2",
        "--steps",
        "1",
    ]);
    assert!(!two.stderr.contains("P0401"), "{}", two.stderr);
    match two.code {
        2 => assert!(
            two.stderr.contains("needs a machine with an NVIDIA GPU"),
            "{}",
            two.stderr
        ),
        0 => assert!(two.stderr.contains("step    1/1"), "{}", two.stderr),
        code => panic!("exit {code}: {}", two.stderr),
    }
}

#[test]
fn solve_emits_with_the_users_own_templates() {
    let dir = tempfile::tempdir().unwrap();
    let templates = dir.path().join("templates");
    std::fs::create_dir(&templates).unwrap();
    let builtin = std::fs::read_to_string("targets/templates/slurm.sbatch.j2").unwrap();
    assert!(builtin.contains("#!/bin/bash\n"));
    std::fs::write(
        templates.join("slurm.sbatch.j2"),
        builtin.replacen(
            "#!/bin/bash\n",
            "#!/bin/bash\n#SBATCH --account=our-lab\n",
            1,
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let run = planc(&[
        "solve",
        "examples/llama3-70b-solve.tp",
        "--emit",
        "slurm",
        "--templates",
        templates.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let script = std::fs::read_to_string(out.join("job.sbatch")).unwrap();
    assert!(
        script.starts_with("#!/bin/bash\n#SBATCH --account=our-lab\n"),
        "{script}"
    );
    assert!(script.contains("--tensor-model-parallel-size"), "{script}");
}

#[test]
fn an_unknown_target_is_refused_before_the_plan_is_read() {
    let run = planc(&["emit", "no-such-plan.tp", "--target", "slrum"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("did you mean `slurm`?"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("cannot read"), "{}", run.stderr);
}

/// Llama 3 8B on one, two or four nodes of H100s at a price, the size left to `solve`.
const RENT: &str = "cluster c {
    nodes = [1, 2, 4]
    gpus_per_node = 8
    gpu = H100_SXM_80GB
    price = 2.49 USD/h
    inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us }
}
model m { preset = \"llama3-8b\" }
train { global_batch = 64, precision = bf16, optimizer = adamw, tokens = 1e9 }
parallel { tp = auto, pp = auto, dp = auto, micro_batch = auto, zero = auto, recompute = auto }
search { objective = cost }
";

#[test]
fn solve_rents_the_cheapest_cluster_size_and_prices_it_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("rent.tp");
    std::fs::write(&plan, RENT).unwrap();
    let plan = plan.to_str().unwrap();

    let run = planc(&["solve", plan]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let header = run.stdout.lines().find(|l| l.starts_with("rank")).unwrap();
    assert!(
        header.contains(" GPUs ") && header.contains("USD/Mtok"),
        "{header}"
    );
    assert!(run.stdout.contains("at 2.49 USD/h a GPU"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("train    1.000e9 tokens (train.tokens)"),
        "{}",
        run.stdout
    );

    let json = |sets: &[&str]| -> serde_json::Value {
        let mut args = vec!["solve", plan, "--format", "json"];
        args.extend_from_slice(sets);
        serde_json::from_str(&planc(&args).stdout).unwrap()
    };
    let cheap = json(&[]);
    let fast = json(&["--set", "search.objective=throughput"]);
    let gpus = |v: &serde_json::Value| v["best"]["plan"]["world_size"].as_u64().unwrap();
    assert_eq!(gpus(&fast), 32);
    assert!(gpus(&cheap) < 32, "cost rents {} GPUs", gpus(&cheap));
    assert_eq!(cheap["candidates"][0]["gpus"].as_u64(), Some(gpus(&cheap)));
    let per_m = |v: &serde_json::Value| {
        v["best"]["cost"]["cost_per_million_tokens"]
            .as_f64()
            .unwrap()
    };
    assert!(per_m(&cheap) < per_m(&fast));
    assert_eq!(cheap["best"]["cost"]["currency"], "USD");
    assert_eq!(cheap["best"]["cost"]["gpus"].as_u64(), Some(gpus(&cheap)));

    // The launch asks for the size chosen.
    let out = dir.path().join("slurm");
    let run = planc(&[
        "emit",
        plan,
        "--target",
        "slurm",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sbatch = std::fs::read_to_string(out.join("job.sbatch")).unwrap();
    let nodes = gpus(&cheap) / 8;
    assert!(
        sbatch.contains(&format!("#SBATCH --nodes={nodes}\n")),
        "{sbatch}"
    );
}
