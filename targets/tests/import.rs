//! `planc import` on real inputs (`tests/import/`): the launch scripts and configs of the
//! seed documents (`/work/shared/seeds/*.txt`, copied with their origin in each file's head)
//! and sample jobs in the shapes Megatron-LM, DeepSpeed, torchtitan, LLaMA-Factory, NeMo and
//! Megatron Bridge ship.
//! Every flag, key and exported variable of an input is placed or listed; the samples emit
//! again with the same flags and keys; the imported plans are snapshots.

use std::path::{Path, PathBuf};

use planc_compiler::check::check_source;
use planc_targets::import::{flags, import, launch, megatron, shell, Imported, Input, Options};
use planc_targets::{render_checked, Target};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import")
}

fn input(name: &str) -> Input {
    let path = dir().join(name);
    Input {
        name: name.to_string(),
        text: std::fs::read_to_string(&path).unwrap(),
        path,
    }
}

fn run(names: &[&str], opts: &Options) -> Imported {
    let inputs: Vec<Input> = names.iter().map(|n| input(n)).collect();
    import(&inputs, opts, &|p: &Path| std::fs::read_to_string(p).ok()).unwrap()
}

fn gpus(nodes: u64, gpu: &str) -> Options {
    Options {
        nodes: Some(nodes),
        gpu: Some(gpu.into()),
        ..Options::default()
    }
}

/// Whether the import says where `key` went: placed, or listed.
fn accounted(i: &Imported, key: &str) -> bool {
    let hit =
        |k: &str| k == key || k.ends_with(&format!(" {key}")) || k.starts_with(&format!("{key}["));
    i.placed.iter().any(|p| hit(&p.from.key)) || i.unplaced.iter().any(|u| hit(&u.from.key))
}

/// The flags (`--x`, `-x`) of a script's commands and the variables it exports.
fn script_keys(text: &str) -> Vec<String> {
    let s = shell::parse(text);
    let mut keys = Vec::new();
    for c in &s.commands {
        let l = launch::launch(&c.words, c.line);
        for said in &l.said {
            // `-x NAME=value` exports NAME: the variable is what is placed.
            match (&said.means, &said.value) {
                (launch::Means::Env, Some(v)) => {
                    keys.push(v.split('=').next().unwrap_or(v).to_string())
                }
                _ => keys.push(said.key.clone()),
            }
        }
        let (given, _) = flags::parse(&l.args, megatron::TABLE);
        keys.extend(given.into_iter().map(|g| g.key));
    }
    for a in s.assignments.iter().filter(|a| a.exported) {
        keys.push(a.name.clone());
    }
    keys
}

/// The leaf keys of a JSON file (arrays are leaves).
fn json_keys(text: &str) -> Vec<String> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => o.iter().for_each(|(k, v)| {
                walk(
                    &if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    },
                    v,
                    out,
                )
            }),
            _ => out.push(prefix.to_string()),
        }
    }
    let mut out = Vec::new();
    walk("", &serde_json::from_str(text).unwrap(), &mut out);
    out
}

fn assert_all_accounted(i: &Imported, keys: &[String], what: &str) {
    let missing: Vec<&String> = keys.iter().filter(|k| !accounted(i, k)).collect();
    assert!(
        missing.is_empty(),
        "{what}: neither placed nor listed: {missing:?}\n{}",
        i.plan
    );
}

#[test]
fn the_seed_documents_launch_scripts_import_with_every_value_placed_or_listed() {
    let cases: &[(&[&str], Options)] = &[
        (&["seed000_vccl_megatron.sh"], gpus(16, "A100_SXM_80GB")),
        (&["seed000_slurm.sh"], Options::default()),
        (&["seed002_debug_env.sh"], Options::default()),
        (&["seed004_slurm_3d.sh"], Options::default()),
        (&["seed004_multinode_env.sh"], Options::default()),
        (&["seed001_ds_config.json"], gpus(1, "A100_SXM_40GB")),
        (
            &["seed003_launch_multi_machine.sh"],
            Options {
                gpu: Some("A100_SXM_80GB".into()),
                ..Options::default()
            },
        ),
    ];
    for (names, opts) in cases {
        let i = run(names, opts);
        for n in *names {
            let text = std::fs::read_to_string(dir().join(n)).unwrap();
            let keys = if n.ends_with(".json") {
                json_keys(&text)
            } else {
                script_keys(&text)
            };
            assert!(!keys.is_empty(), "{n} has nothing to import");
            assert_all_accounted(&i, &keys, n);
        }
        assert!(
            planc_lang::format::format(&i.plan).is_ok_and(|f| f == i.plan),
            "{names:?}: not formatted"
        );
    }
}

#[test]
fn seed_000s_megatron_launch_keeps_its_layout_and_environment() {
    let i = run(&["seed000_vccl_megatron.sh"], &gpus(16, "A100_SXM_80GB"));
    for line in [
        "micro_batch = 4",
        "global_batch = 512",
        "tp = 2",
        "pp = 4",
        "zero = 1",
        "recompute = selective",
        "gpus_per_node = 8",
        "nodes = 16",
        "NCCL_IB_HCA = \"mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1\"",
        "NCCL_DEBUG = \"WARN\"",
    ] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    // No model in the script: the plan says so, and the check names what is missing.
    assert!(
        i.assumed
            .iter()
            .any(|a| a.contains("no input describes the model")),
        "{:?}",
        i.assumed
    );
    assert!(!check_source("p.tp", &i.plan).ok());
    // The same document, escaped as it is in the seed, reads the same.
    let escaped = std::fs::read_to_string(dir().join("seed000_vccl_megatron.sh"))
        .unwrap()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    let e = import(
        &[Input {
            name: "seed000_vccl_megatron.sh".into(),
            path: dir().join("seed000_vccl_megatron.sh"),
            text: escaped,
        }],
        &gpus(16, "A100_SXM_80GB"),
        &|_: &Path| None,
    )
    .unwrap();
    assert_eq!(e.placed, i.placed);
}

#[test]
fn seed_003s_llama_factory_launch_reads_its_hostfile_and_deepspeed_config() {
    let i = run(
        &["seed003_launch_multi_machine.sh"],
        &Options {
            gpu: Some("A100_SXM_80GB".into()),
            ..Options::default()
        },
    );
    for line in [
        "nodes = 4",
        "gpus_per_node = 8",
        "preset = \"llama2-70b\"",
        "zero = 2",
        "micro_batch = 1",
        "global_batch = 1024",
    ] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    // The DeepSpeed file's accumulation (32) agrees with its batch; the command line's (64)
    // does not, and is listed with why.
    assert!(
        i.unplaced
            .iter()
            .any(|u| u.from.key == "--gradient_accumulation_steps"
                && u.reason.contains("gives 2048")),
        "{:#?}",
        i.unplaced
    );
    // The job's LoRA: rank 64 (alpha 128) on every linear layer of Llama's, named as
    // PEFT names them; its dropout is listed, not priced.
    for line in [
        "method = lora",
        "lora_rank = 64",
        "lora_alpha = 128",
        "lora_targets = [q, k, v, o, gate, up, down]",
    ] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    assert!(
        i.unplaced
            .iter()
            .any(|u| u.from.key == "--lora_dropout" && u.reason.contains("not priced")),
        "{:#?}",
        i.unplaced
    );
    // Priced as the job trains: the adapters' gradients and optimizer state only, and its
    // ZeRO-2 keeps the frozen bf16 weights whole: 137.8 GiB a GPU where full training
    // would need 168, still more than an 80 GB A100 holds.
    let c = check_source("p.tp", &i.plan);
    let plan = c.plan.as_ref().expect("a plan");
    let e = c.estimate.as_ref().expect("an estimate");
    assert_eq!(
        plan.train.method.lora().map(|l| (l.rank, l.targets.len())),
        Some((64, 7))
    );
    assert_eq!(e.trained_params, 828_375_040.0);
    let gib = e.stages[0].memory.total_bytes / (1u64 << 30) as f64;
    assert!((gib - 137.76).abs() < 0.01, "{gib}");
    assert!(c.diagnostics.iter().any(|d| d.code == "P0401"));
    let keys =
        json_keys(&std::fs::read_to_string(dir().join("ds_config_multi_machine.json")).unwrap());
    assert_all_accounted(&i, &keys, "ds_config_multi_machine.json");
}

#[test]
fn positional_parameters_stay_unresolved_and_a_bpe_vocabulary_is_padded_as_megatron_does() {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpt3-175b.tp"),
    )
    .unwrap();
    let i = run(
        &["megatron_gpt3_175b.sh"],
        &Options {
            cluster: Some(("gpt3-175b.tp".into(), example)),
            ..Options::default()
        },
    );
    // 50257 padded to a multiple of 128 × tp 8.
    assert!(i.plan.contains("vocab = 51200"), "{}", i.plan);
    for flag in [
        "--save",
        "--load",
        "--data-path",
        "--vocab-file",
        "--tensorboard-dir",
    ] {
        let u = i
            .unplaced
            .iter()
            .find(|u| u.from.key == flag)
            .unwrap_or_else(|| panic!("{flag}\n{}", i.plan));
        assert!(
            u.reason.contains("only known when the script runs"),
            "{flag}: {}",
            u.reason
        );
    }
    assert!(!i.plan.contains("checkpoint_dir"), "{}", i.plan);
    // 0.1 % of 500000 steps.
    assert!(i.plan.contains("warmup_steps = 500"), "{}", i.plan);
    assert!(check_source("p.tp", &i.plan).ok());
}

/// The flags of the training command of a script, by name (values joined).
fn flags_of(text: &str) -> Vec<(String, String)> {
    let s = shell::parse(text);
    let best = s
        .commands
        .iter()
        .map(|c| launch::launch(&c.words, c.line))
        .max_by_key(|l| l.args.len())
        .unwrap();
    flags::parse(&best.args, megatron::TABLE)
        .0
        .into_iter()
        .map(|g| (g.key, g.values.join(" ")))
        .collect()
}

fn same_value(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
        _ => a == b,
    }
}

fn emitted(plan: &str, target: Target, file: &str) -> String {
    let c = check_source("imported.tp", plan);
    assert!(c.ok(), "{:?}\n{plan}", c.diagnostics);
    let a = render_checked(target, &c, None).unwrap();
    a.into_iter()
        .find(|a| a.path == Path::new(file))
        .unwrap()
        .contents
}

#[test]
fn a_megatron_launch_emits_again_with_the_same_flags() {
    let i = run(
        &["megatron_llama2_7b.sh"],
        &Options {
            gpu: Some("H100_SXM_80GB".into()),
            ..Options::default()
        },
    );
    let before = flags_of(&std::fs::read_to_string(dir().join("megatron_llama2_7b.sh")).unwrap());
    let after = flags_of(&emitted(&i.plan, Target::Megatron, "launch-megatron.sh"));
    // Placed flags come back with their values; --use-flash-attn is written as the attention
    // backend of current Megatron-LM, --data-path as the prefix it was.
    let renamed = ["--use-flash-attn"];
    let mut differ = Vec::new();
    for (k, v) in &before {
        let placed = i.placed.iter().any(|p| &p.from.key == k);
        if !placed || renamed.contains(&k.as_str()) {
            continue;
        }
        match after.iter().find(|(a, _)| a == k) {
            Some((_, w)) if same_value(v, w) => {}
            other => differ.push(format!("{k} {v} -> {other:?}")),
        }
    }
    assert!(differ.is_empty(), "{differ:#?}");
}

#[test]
fn a_deepspeed_config_emits_again_with_the_same_keys() {
    let i = run(
        &["ds_zero2.json", "hostfile_2x8", "tinyllama_config.json"],
        &Options {
            gpu: Some("H100_SXM_80GB".into()),
            ..Options::default()
        },
    );
    let before: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("ds_zero2.json")).unwrap())
            .unwrap();
    let after: Value =
        serde_json::from_str(&emitted(&i.plan, Target::Deepspeed, "ds_config.json")).unwrap();
    let mut differ = Vec::new();
    for key in json_keys(&before.to_string()) {
        if !i
            .placed
            .iter()
            .any(|p| p.from.key == key || p.from.key.starts_with(&format!("{key}[")))
        {
            continue;
        }
        let at = |v: &Value| key.split('.').try_fold(v.clone(), |v, k| v.get(k).cloned());
        let (b, a) = (at(&before), at(&after));
        let equal = match (&b, &a) {
            (Some(Value::Number(x)), Some(Value::Number(y))) => {
                same_value(&x.to_string(), &y.to_string())
            }
            _ => b == a,
        };
        if !equal {
            differ.push(format!("{key}: {b:?} -> {a:?}"));
        }
    }
    assert!(differ.is_empty(), "{differ:#?}\n{}", i.plan);
}

#[test]
fn a_torchtitan_job_emits_again_with_the_same_values() {
    // Without the flavor module of a plan, torchtitan's 8B flavor is planc's preset; the
    // job file planc writes names its own flavor, with the same dimensions.
    let i = run(
        &["llama3_8b.toml"],
        &Options {
            nodes: Some(1),
            gpus_per_node: Some(8),
            gpu: Some("H100_SXM_80GB".into()),
            ..Options::default()
        },
    );
    let before: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir().join("llama3_8b.toml")).unwrap()).unwrap();
    let after: toml::Value =
        toml::from_str(&emitted(&i.plan, Target::Torchtitan, "torchtitan-job.toml")).unwrap();
    let keys = [
        "optimizer.name",
        "optimizer.lr",
        "optimizer.eps",
        "lr_scheduler.warmup_steps",
        "training.local_batch_size",
        "training.seq_len",
        "training.max_norm",
        "training.steps",
        "parallelism.tensor_parallel_degree",
        "parallelism.pipeline_parallel_degree",
        "parallelism.context_parallel_degree",
        "activation_checkpoint.mode",
        "activation_checkpoint.selective_ac_option",
    ];
    for k in keys {
        let (s, key) = k.split_once('.').unwrap();
        assert_eq!(before[s].get(key), after[s].get(key), "{k}");
    }
}

#[test]
fn a_llama_factory_yaml_with_finetuning_type_lora_imports_to_train_method_lora() {
    let i = run(
        &["llama3_lora_sft.yaml"],
        &Options {
            nodes: Some(1),
            gpus_per_node: Some(8),
            gpu: Some("A100_SXM_80GB".into()),
            ..Options::default()
        },
    );
    for line in ["method = lora", "lora_rank = 8", "lora_targets = all"] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    // Llama 3 8B with rank-8 adapters on its 7 × 32 matrices: 21 M parameters train, and
    // the plan fits one A100 without ZeRO (full training of the same needs 18 bytes a
    // parameter: 134 GiB).
    let c = check_source("p.tp", &i.plan);
    assert!(c.ok(), "{:#?}", c.diagnostics);
    let e = c.estimate.as_ref().unwrap();
    // q and o 4096 + 4096, k and v 4096 + 1024, gate, up and down 4096 + 14336 (PEFT's
    // 20,971,520 trainable parameters for this model).
    let per_layer = 8.0 * (2.0 * 8192.0 + 2.0 * 5120.0 + 3.0 * 18432.0);
    assert_eq!(e.trained_params, 32.0 * per_layer);
    assert!(e.stages[0].memory.gradients_bytes < 0.1 * (1u64 << 30) as f64);
    // No finetuning_type: LLaMA-Factory's default, LoRA, said so.
    let yaml = std::fs::read_to_string(dir().join("llama3_lora_sft.yaml"))
        .unwrap()
        .replace("finetuning_type: lora\n", "");
    let i = import(
        &[Input {
            name: "no_type.yaml".into(),
            path: dir().join("no_type.yaml"),
            text: yaml,
        }],
        &Options::default(),
        &|_: &Path| None,
    )
    .unwrap();
    assert!(i.plan.contains("method = lora"), "{}", i.plan);
    assert!(
        i.assumed
            .iter()
            .any(|a| a.contains("default finetuning_type")),
        "{:?}",
        i.assumed
    );
}

#[test]
fn freeze_tuning_imports_to_a_frozen_prefix_of_the_models_layers() {
    let i = run(&["llama3_freeze_sft.yaml"], &gpus(1, "H100_SXM_80GB"));
    // Llama 3 8B's 32 layers, the last 8 training: the first 24 frozen.
    for line in ["method = frozen", "frozen_layers = 24"] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    // A LoRA setting under freeze tuning changes nothing in LLaMA-Factory: listed.
    assert!(
        i.unplaced
            .iter()
            .any(|u| u.from.key == "lora_rank" && u.reason.contains("finetuning_type lora")),
        "{:#?}",
        i.unplaced
    );
    let c = check_source("p.tp", &i.plan);
    let e = c.estimate.as_ref().expect("an estimate");
    let plan = c.plan.as_ref().unwrap();
    let layer = planc_compiler::cost::params::layer_params(&plan.model).dense_total();
    assert_eq!(e.trained_params, 8.0 * layer);
    // transformers' own script (`--model_name_or_path` alone) keeps full training.
    let i = import(
        &[Input {
            name: "run_clm.sh".into(),
            path: dir().join("run_clm.sh"),
            text: "torchrun --nproc_per_node 8 run_clm.py --model_name_or_path \
                   meta-llama/Meta-Llama-3-8B --per_device_train_batch_size 2 --bf16\n"
                .into(),
        }],
        &Options::default(),
        &|_: &Path| None,
    )
    .unwrap();
    assert!(!i.plan.contains("method ="), "{}", i.plan);
}

#[test]
fn imported_plans() {
    let cases: &[(&str, &[&str], Options)] = &[
        (
            "megatron",
            &["megatron_llama2_7b.sh"],
            Options {
                gpu: Some("H100_SXM_80GB".into()),
                ..Options::default()
            },
        ),
        (
            "deepspeed",
            &["ds_zero2.json", "hostfile_2x8", "tinyllama_config.json"],
            Options {
                gpu: Some("H100_SXM_80GB".into()),
                ..Options::default()
            },
        ),
        (
            "torchtitan",
            &["run_llama3_8b.sh"],
            Options {
                gpu: Some("H100_SXM_80GB".into()),
                ..Options::default()
            },
        ),
        (
            "llamafactory",
            &["llama3_lora_sft.yaml"],
            Options {
                nodes: Some(1),
                gpus_per_node: Some(8),
                gpu: Some("A100_SXM_80GB".into()),
                ..Options::default()
            },
        ),
        (
            "nemo",
            &["nemo_llama3_70b.yaml"],
            Options {
                gpu: Some("H100_SXM_80GB".into()),
                ..Options::default()
            },
        ),
        (
            "megatron_bridge",
            &["bridge_qwen3_30b_a3b.yaml"],
            Options {
                nodes: Some(2),
                gpus_per_node: Some(8),
                gpu: Some("H100_SXM_80GB".into()),
                ..Options::default()
            },
        ),
        (
            "config_json",
            &["qwen3_32b_config.json"],
            Options {
                nodes: Some(4),
                gpus_per_node: Some(8),
                gpu: Some("H100_SXM_80GB".into()),
                ..Options::default()
            },
        ),
    ];
    for (name, files, opts) in cases {
        let i = run(files, opts);
        insta::assert_snapshot!(format!("import__{name}"), i.plan);
    }
}

#[test]
fn megatron_of_2021_without_async_tensor_parallel_communication_imports_as_overlap_tp_backward_false(
) {
    let text = "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 8 \
                --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 \
                --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 8 \
                --vocab-size 32000 --bf16 --no-async-tensor-model-parallel-allreduce\n";
    let imported = |text: &str| {
        import(
            &[Input {
                name: "launch.sh".into(),
                path: "launch.sh".into(),
                text: text.into(),
            }],
            &gpus(1, "A100_SXM_80GB"),
            &|_: &Path| None,
        )
        .unwrap()
    };
    let i = imported(text);
    assert!(i.plan.contains("overlap_tp_backward = false"), "{}", i.plan);
    let c = check_source("p.tp", &i.plan);
    let plan = c.plan.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
    assert!(!plan.parallel.overlaps_tp_backward(plan.framework()));
    // Without the flag Megatron-LM runs it: the plan leaves the default.
    let current = imported(&text.replace(" --no-async-tensor-model-parallel-allreduce", ""));
    assert!(
        !current.plan.contains("overlap_tp_backward"),
        "{}",
        current.plan
    );
}

#[test]
fn sliding_windows_import_from_megatron_flags_and_config_json_and_emit_back() {
    let imported = |name: &str, text: &str| {
        import(
            &[Input {
                name: name.into(),
                path: name.into(),
                text: text.into(),
            }],
            &gpus(1, "H100_SXM_80GB"),
            &|_: &Path| None,
        )
        .unwrap()
    };
    // GPT-OSS's flags in Megatron-LM: a 128-token window, every second layer full.
    let launch = "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2880 \
                  --num-attention-heads 64 --seq-length 4096 --max-position-embeddings 4096 \
                  --micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 \
                  --window-size 128,0 --window-attn-skip-freq 2\n";
    let i = imported("launch.sh", launch);
    assert!(i.plan.contains("sliding_window = 128"), "{}", i.plan);
    assert!(i.plan.contains("full_attention_every = 2"), "{}", i.plan);
    let flags = flags_of(&emitted(&i.plan, Target::Megatron, "launch-megatron.sh"));
    let flag = |k: &str| flags.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
    assert_eq!(flag("--window-size").as_deref(), Some("128,0"));
    assert_eq!(flag("--window-attn-skip-freq").as_deref(), Some("2"));
    // A window that also looks ahead is not a causal one: listed, not placed.
    let i = imported("launch.sh", &launch.replace("128,0", "128,128"));
    assert!(!i.plan.contains("sliding_window"), "{}", i.plan);

    let config = |fields: &str| {
        imported(
            "config.json",
            &format!(
                "{{\"model_type\": \"{}\", \"hidden_size\": 2048, \"num_hidden_layers\": 4, \
                 \"num_attention_heads\": 16, \"intermediate_size\": 8192, \
                 \"vocab_size\": 32000, \"max_position_embeddings\": 8192, {} }}",
                fields.split('|').next().unwrap(),
                fields.split('|').nth(1).unwrap()
            ),
        )
        .plan
    };
    // layer_types with a period: GPT-OSS's alternation.
    let gpt_oss = config(
        "gpt_oss|\"sliding_window\": 128, \"layer_types\": [\"sliding_attention\", \
         \"full_attention\", \"sliding_attention\", \"full_attention\"]",
    );
    assert!(gpt_oss.contains("sliding_window = 128"), "{gpt_oss}");
    assert!(gpt_oss.contains("full_attention_every = 2"), "{gpt_oss}");
    // Gemma 2 alternates without saying so: an assumption the plan states.
    let gemma2 = config("gemma2|\"sliding_window\": 4096");
    assert!(gemma2.contains("full_attention_every = 2"), "{gemma2}");
    // Mistral's window on every layer.
    let mistral = config("mistral|\"sliding_window\": 4096");
    assert!(mistral.contains("sliding_window = 4096"), "{mistral}");
    assert!(!mistral.contains("full_attention_every"), "{mistral}");
    // A window the config turns off, a null one, and layers with no period: full attention.
    for off in [
        "qwen2|\"sliding_window\": 4096, \"use_sliding_window\": false",
        "mistral|\"sliding_window\": null",
        "gpt_oss|\"sliding_window\": 128, \"layer_types\": [\"full_attention\", \
         \"sliding_attention\", \"sliding_attention\", \"full_attention\"]",
    ] {
        let plan = config(off);
        // The fields are listed under "Not placed"; no attribute is written.
        let written = |attr: &str| {
            plan.lines()
                .any(|l| l.trim_start().starts_with(attr) && !l.trim_start().starts_with('#'))
        };
        assert!(!written("sliding_window"), "{off}: {plan}");
        assert!(!written("full_attention_every"), "{off}: {plan}");
        assert!(
            plan.contains("sliding_window"),
            "{off}: listed as not placed: {plan}"
        );
    }
    // Mistral 7B v0.1 by name is the preset with its window; v0.3 attends its whole context.
    use planc_targets::import::hf::preset;
    assert_eq!(preset("mistralai/Mistral-7B-v0.1"), Some("mistral-7b"));
    assert_eq!(preset("mistralai/Mistral-7B-v0.3"), None);
    assert_eq!(preset("google/gemma-2-9b"), Some("gemma2-9b"));
}

/// The leaves of a YAML config that say something (not null, false, zero, empty or
/// "none"), by dotted path, outside the sections listed whole (`data`, `tokenizer`, ...).
fn yaml_keys(text: &str) -> Vec<String> {
    use yaml_rust2::{Yaml, YamlLoader};
    const WHOLE: &[&str] = &[
        "defaults",
        "hydra",
        "run",
        "exp_manager",
        "data",
        "dataset",
        "tokenizer",
        "logger",
        "nsys_profile",
        "dist",
        "profiling",
    ];
    fn said(v: &Yaml) -> bool {
        match v {
            Yaml::Null | Yaml::BadValue => false,
            Yaml::Boolean(b) => *b,
            Yaml::Integer(n) => *n != 0,
            Yaml::Real(r) => r.parse::<f64>().is_ok_and(|x| x != 0.0),
            Yaml::String(s) => !s.is_empty() && !s.eq_ignore_ascii_case("none"),
            Yaml::Array(a) => !a.is_empty(),
            _ => true,
        }
    }
    fn walk(prefix: &str, v: &Yaml, out: &mut Vec<String>) {
        match v {
            Yaml::Hash(h) => {
                for (k, v) in h {
                    let k = k.as_str().unwrap();
                    let path = if prefix.is_empty() {
                        k.to_string()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    if WHOLE.contains(&k) && (prefix.is_empty() || matches!(v, Yaml::Hash(_))) {
                        out.push(path);
                    } else if let Some(true) = v
                        .as_hash()
                        .map(|h| h.contains_key(&Yaml::String("_target_".into())))
                    {
                        // A Python object the config builds: one setting.
                        out.push(path);
                    } else if k != "_target_" {
                        walk(&path, v, out);
                    }
                }
            }
            v if said(v) => out.push(prefix.to_string()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", &YamlLoader::load_from_str(text).unwrap()[0], &mut out);
    out
}

#[test]
fn nemo_and_megatron_bridge_configs_import_as_megatron_core_runs_with_every_setting_placed_or_listed(
) {
    // NeMo 1.0 (the launcher's conf/training shape): the trainer's cluster, model.optim's
    // distributed Adam, the tokenizer's vocabulary padded as Megatron-Core pads it.
    let i = run(&["nemo_llama3_70b.yaml"], &gpus(8, "H100_SXM_80GB"));
    for line in [
        "nodes = 8",
        "gpus_per_node = 8",
        "tp = 4",
        "pp = 4",
        "cp = 2",
        "vpp = 5",
        "schedule = interleaved",
        "sequence_parallel = true",
        "kv_heads = 8",
        "mlp = swiglu",
        "norm = rmsnorm",
        "tied_embeddings = false",
        "bias = false",
        "vocab = 128512",
        "precision = bf16",
        "zero = 1",
        "overlap_grad_reduce = true",
        "global_batch = 128",
        "framework = megatron",
        "kernels = fused",
        "lr_schedule = cosine",
        "min_lr = 1e-5",
    ] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    // Userbuffers is listed with what it means for the prediction.
    assert!(
        i.unplaced
            .iter()
            .any(|u| u.from.key == "model.ub_tp_comm_overlap" && u.reason.contains("Userbuffers")),
        "{:#?}",
        i.unplaced
    );
    assert_all_accounted(&i, &yaml_keys(&input("nemo_llama3_70b.yaml").text), "NeMo");
    let c = check_source("p.tp", &i.plan);
    assert!(!c.diagnostics.iter().any(|d| d.is_error()), "{}", i.plan);

    // Megatron Bridge: sections by group, the precision given thrice, the sharding strategy
    // that only Megatron-FSDP reads.
    let i = run(&["bridge_qwen3_30b_a3b.yaml"], &gpus(2, "H100_SXM_80GB"));
    for line in [
        "experts = 128",
        "top_k = 8",
        "expert_ffn_hidden = 768",
        "ep = 8",
        "head_dim = 128",
        "vocab = 151936",
        "zero = 1",
        "grad_dtype = bf16",
        "precision = bf16",
        "micro_batch = 1",
        "steps = 1000",
        "warmup_steps = 500",
        "attention = flash",
    ] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    assert!(
        i.unplaced
            .iter()
            .any(|u| u.from.key == "ddp.data_parallel_sharding_strategy"
                && u.reason.contains("Megatron-FSDP")),
        "{:#?}",
        i.unplaced
    );
    assert_all_accounted(
        &i,
        &yaml_keys(&input("bridge_qwen3_30b_a3b.yaml").text),
        "Bridge",
    );
    let c = check_source("p.tp", &i.plan);
    assert!(!c.diagnostics.iter().any(|d| d.is_error()), "{}", i.plan);
}

#[test]
fn hydra_overrides_on_a_nemo_or_bridge_command_line_override_the_config_it_names() {
    let i = run(&["bridge_pretrain.sh"], &gpus(2, "H100_SXM_80GB"));
    for line in [
        "nodes = 2",
        "gpus_per_node = 8",
        "ep = 16",
        "recompute = selective",
        "global_batch = 1024",
        "precision = bf16",
        "experts = 128",
        "top_k = 8",
    ] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    // The file's own values, overridden, are listed with what replaced them; the logger's
    // override is listed by its whole path.
    for key in [
        "model.expert_model_parallel_size",
        "train.global_batch_size",
        "logger.log_interval",
    ] {
        assert!(
            i.unplaced.iter().any(|u| u.from.key == key),
            "{key}: {:#?}",
            i.unplaced
        );
    }
    let c = check_source("p.tp", &i.plan);
    assert!(!c.diagnostics.iter().any(|d| d.is_error()), "{}", i.plan);

    let i = run(
        &["nemo_pretrain.sh"],
        &Options {
            gpu: Some("H100_SXM_80GB".into()),
            ..Options::default()
        },
    );
    for line in [
        "nodes = 16",
        "tp = 8",
        "lr = 0.0003",
        "warmup_steps = 100",
        "pp = 4",
    ] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    assert!(
        i.unplaced
            .iter()
            .any(|u| u.from.key == "trainer.num_nodes" && u.reason.contains("16")),
        "{:#?}",
        i.unplaced
    );
}

#[test]
fn omegaconfs_interpolations_are_followed_and_its_resolvers_listed() {
    let i = run(
        &["nemo_gpt_small.yaml"],
        &Options {
            gpu: Some("H100_SXM_80GB".into()),
            ..Options::default()
        },
    );
    // `precision: 16` is fp16; Megatron's GPT-2 tokenizer gives 50257, padded to 50304;
    // `${.encoder_seq_length}` is read from the model section.
    for line in [
        "precision = fp16",
        "vocab = 50304",
        "seq_len = 1024",
        "gpus_per_node = 8",
    ] {
        assert!(i.plan.contains(line), "{line}\n{}", i.plan);
    }
    let reason = |key: &str| {
        i.unplaced
            .iter()
            .find(|u| u.from.key == key)
            .map(|u| u.reason.clone())
            .unwrap_or_else(|| panic!("{key}: {:#?}", i.unplaced))
    };
    assert!(reason("model.max_position_embeddings").contains("position"));
    // A resolver is only known when NeMo runs: listed, not guessed (ffn_hidden then comes
    // from planc's default, 4 × hidden, which the plan says).
    assert!(reason("model.ffn_hidden_size").contains("resolver"));
    assert!(reason("name").contains("job.name"));
    let c = check_source("p.tp", &i.plan);
    assert!(!c.diagnostics.iter().any(|d| d.is_error()), "{}", i.plan);
}
