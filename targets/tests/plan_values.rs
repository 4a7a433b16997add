//! A plan that sets every `train` attribute: each value reaches each target's artifacts in
//! the framework's own spelling (Megatron-LM's flags, DeepSpeed's config, planc's script
//! flags, Hugging Face's TrainingArguments), and what a form cannot carry is refused at the
//! attribute.

mod common;

use planc_targets::{render_checked, Artifact, Target};
use serde_json::Value;

const TRAIN: &str = "global_batch = 64, precision = bf16, optimizer = adamw, lr = 2e-5, \
    min_lr = 2e-6, lr_schedule = cosine, warmup_steps = 100, steps = 1000, \
    weight_decay = 0.01, grad_clip = 0.5, adam_beta1 = 0.85, adam_beta2 = 0.97, \
    adam_eps = 1e-7, seed = 7";

/// One node of 8 GPUs, data parallel (so DeepSpeed's config can carry it), with `train`'s
/// extra attributes and the `job` block's body.
fn plan(train_extra: &str, job: &str) -> String {
    format!(
        r#"
cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
model m {{ layers = 4, hidden = 512, heads = 8, vocab = 32000, seq_len = 1024 }}
train {{ {TRAIN} {train_extra} }}
parallel {{ tp = 1, pp = 1, dp = 8, micro_batch = 2, zero = 1, recompute = none }}
job {{
image = "img"
checkpoint_dir = "ckpt"
{job}
}}
"#
    )
}

/// The launch artifacts' text (the generated train.py, whose defaults are the plan's too,
/// is left out: its docs name the flags).
fn all_text(a: &[Artifact]) -> String {
    a.iter()
        .filter(|a| a.path.extension().is_none_or(|e| e != "py"))
        .map(|a| a.contents.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The words of the artifacts outside comments, quotes and YAML list dashes dropped: a
/// flag's value is the word after it, in a shell script and in a PyTorchJob's command list
/// alike.
fn words(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .filter(|w| *w != "-")
        .map(|w| {
            w.trim_start_matches("\"$HERE\"/")
                .trim_matches(|c| c == '"' || c == '\'')
                .to_string()
        })
        .collect()
}

/// Every value that follows `flag` in `text`.
fn values_of(text: &str, flag: &str) -> Vec<String> {
    let w = words(text);
    w.windows(2)
        .filter(|p| p[0] == flag)
        .map(|p| p[1].clone())
        .collect()
}

fn assert_flag(text: &str, what: &str, flag: &str, expected: &str) {
    let found = values_of(text, flag);
    assert!(!found.is_empty(), "{what}: no {flag}");
    for v in &found {
        let same = match (v.parse::<f64>(), expected.parse::<f64>()) {
            (Ok(a), Ok(b)) => (a - b).abs() <= 1e-12 * b.abs().max(1e-30),
            _ => v == expected,
        };
        assert!(same, "{what}: {flag} {v}, expected {expected}");
    }
}

fn assert_switch(text: &str, what: &str, flag: &str) {
    assert!(words(text).iter().any(|w| w == flag), "{what}: no {flag}");
}

const MEGATRON: &[(&str, &str)] = &[
    ("--micro-batch-size", "2"),
    ("--global-batch-size", "64"),
    ("--lr", "2e-5"),
    ("--min-lr", "2e-6"),
    ("--lr-decay-style", "cosine"),
    ("--lr-warmup-iters", "100"),
    ("--train-iters", "1000"),
    ("--weight-decay", "0.01"),
    ("--clip-grad", "0.5"),
    ("--adam-beta1", "0.85"),
    ("--adam-beta2", "0.97"),
    ("--adam-eps", "1e-7"),
    ("--seed", "7"),
    ("--attention-dropout", "0.05"),
    ("--hidden-dropout", "0.05"),
    ("--data-path", "data/tokens"),
    ("--save", "ckpt"),
    ("--load", "ckpt"),
    ("--save-interval", "1000"),
    ("--log-interval", "10"),
];

const CONTRACT: &[(&str, &str)] = &[
    ("--micro-batch-size", "2"),
    ("--global-batch-size", "64"),
    ("--lr", "2e-5"),
    ("--min-lr", "2e-6"),
    ("--lr-schedule", "cosine"),
    ("--warmup-steps", "100"),
    ("--steps", "1000"),
    ("--weight-decay", "0.01"),
    ("--grad-clip", "0.5"),
    ("--adam-beta1", "0.85"),
    ("--adam-beta2", "0.97"),
    ("--adam-eps", "1e-7"),
    ("--seed", "7"),
    ("--precision", "bf16"),
    ("--dropout", "0.05"),
    ("--data", "data/tokens.bin"),
    ("--save", "ckpt"),
    ("--save-interval", "1000"),
    ("--log-interval", "10"),
];

const HF: &[(&str, &str)] = &[
    ("--per_device_train_batch_size", "2"),
    ("--gradient_accumulation_steps", "4"),
    ("--max_steps", "1000"),
    ("--learning_rate", "2e-5"),
    ("--lr_scheduler_type", "cosine_with_min_lr"),
    ("--warmup_steps", "100"),
    ("--weight_decay", "0.01"),
    ("--max_grad_norm", "0.5"),
    ("--adam_beta1", "0.85"),
    ("--adam_beta2", "0.97"),
    ("--adam_epsilon", "1e-7"),
    ("--seed", "7"),
    ("--output_dir", "ckpt"),
    ("--save_steps", "1000"),
    ("--logging_steps", "10"),
];

fn ds_config(a: &[Artifact]) -> Value {
    let text = a
        .iter()
        .find(|a| a.path.to_string_lossy() == "ds_config.json")
        .map(|a| a.contents.clone())
        .or_else(|| {
            // The PyTorchJob carries it in a ConfigMap, as a JSON string.
            let yaml = &a[0].contents;
            let line = yaml
                .lines()
                .find(|l| l.trim_start().starts_with("ds_config.json:"))?;
            let quoted = line
                .trim_start()
                .trim_start_matches("ds_config.json:")
                .trim();
            serde_json::from_str::<String>(quoted).ok()
        })
        .expect("a DeepSpeed config");
    serde_json::from_str(&text).unwrap()
}

fn assert_ds_config(cfg: &Value, what: &str) {
    let close = |v: &Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-15;
    let o = &cfg["optimizer"];
    assert_eq!(o["type"], "AdamW", "{what}");
    assert!(close(&o["params"]["lr"], 2e-5), "{what}: {o}");
    assert!(close(&o["params"]["betas"][0], 0.85), "{what}: {o}");
    assert!(close(&o["params"]["betas"][1], 0.97), "{what}: {o}");
    assert!(close(&o["params"]["eps"], 1e-7), "{what}: {o}");
    assert!(close(&o["params"]["weight_decay"], 0.01), "{what}: {o}");
    let s = &cfg["scheduler"];
    assert_eq!(s["type"], "WarmupCosineLR", "{what}");
    assert_eq!(s["params"]["total_num_steps"], 1000, "{what}");
    assert_eq!(s["params"]["warmup_num_steps"], 100, "{what}");
    assert!(close(&s["params"]["cos_min_ratio"], 0.1), "{what}: {s}");
    assert_eq!(s["params"]["warmup_type"], "linear", "{what}");
    assert!(close(&cfg["gradient_clipping"], 0.5), "{what}");
    assert_eq!(cfg["bf16"]["enabled"], true, "{what}");
    assert_eq!(cfg["steps_per_print"], 10, "{what}");
    assert_eq!(cfg["train_micro_batch_size_per_gpu"], 2, "{what}");
    assert_eq!(cfg["train_batch_size"], 64, "{what}");
}

#[test]
fn every_train_value_reaches_every_target() {
    let extra = ", dropout = 0.05, data = \"data/tokens.bin\"";
    for framework in ["megatron", "torch", "deepspeed"] {
        let text = plan(extra, &format!("framework = {framework}"));
        let checked = common::checked(&text);
        for &target in Target::ALL {
            if target == Target::Torchtitan {
                // A Llama-only target with no ZeRO-1: `torchtitan_carries_every_train_value`.
                continue;
            }
            let fw = match target {
                Target::Megatron => "megatron",
                Target::Deepspeed => "deepspeed",
                _ => framework,
            };
            let what = format!("{target} target, framework {framework}");
            let artifacts =
                render_checked(target, &checked, None).unwrap_or_else(|e| panic!("{what}: {e}"));
            let text = all_text(&artifacts);
            match fw {
                "megatron" => {
                    for (flag, v) in MEGATRON {
                        assert_flag(&text, &what, flag, v);
                    }
                    assert_switch(&text, &what, "--bf16");
                    assert!(!words(&text).contains(&"--mock-data".to_string()), "{what}");
                }
                _ => {
                    for (flag, v) in CONTRACT {
                        assert_flag(&text, &what, flag, v);
                    }
                    if fw == "deepspeed" {
                        assert_switch(&text, &what, "--deepspeed");
                        assert_ds_config(&ds_config(&artifacts), &what);
                    }
                }
            }
        }
    }
}

#[test]
fn hugging_face_trainer_form() {
    let hf = "framework = deepspeed\nentrypoint_args = hf_trainer\nentrypoint = \"src/train.py\"";
    let text = plan("", hf);
    let checked = common::checked(&text);
    for target in [
        Target::Deepspeed,
        Target::Torchrun,
        Target::Slurm,
        Target::K8s,
    ] {
        let what = format!("{target}, hf_trainer");
        let artifacts = render_checked(target, &checked, None).unwrap();
        let text = all_text(&artifacts);
        for (flag, v) in HF {
            assert_flag(&text, &what, flag, v);
        }
        assert_switch(&text, &what, "--bf16");
        let kwargs = values_of(&text, "--lr_scheduler_kwargs");
        let kwargs: Value = serde_json::from_str(&kwargs[0].replace("\\\"", "\"")).unwrap();
        assert!((kwargs["min_lr"].as_f64().unwrap() - 2e-6).abs() < 1e-18);
        // Trainer's own form: `--deepspeed FILE`, never the launcher's `--deepspeed_config`.
        let ds = values_of(&text, "--deepspeed");
        assert!(
            ds.iter().all(|v| v.ends_with("ds_config.json")),
            "{what}: {ds:?}"
        );
        assert!(values_of(&text, "--deepspeed_config").is_empty(), "{what}");
        assert_ds_config(&ds_config(&artifacts), &what);
    }
    // TrainingArguments carry neither data nor dropout: refused at the attribute.
    for (extra, attr) in [
        (", data = \"tokens.bin\"", "train.data"),
        (", dropout = 0.1", "train.dropout"),
    ] {
        let checked = common::checked(&plan(extra, hf));
        let err = render_checked(Target::Deepspeed, &checked, None).unwrap_err();
        assert_eq!(err.code().id, "P0706");
        let d = err
            .located(checked.spec.as_ref().unwrap())
            .expect("located");
        let label = d.primary.as_ref().unwrap();
        let written =
            &checked.sources.files[0].text[label.span.start as usize..label.span.end as usize];
        assert!(
            extra.contains(written),
            "{attr}: points at {written:?}, not the attribute's value"
        );
        assert_eq!(label.message, attr);
    }
    // Megatron-LM's entrypoint takes its own flags.
    let checked = common::checked(&plan("", "entrypoint_args = hf_trainer"));
    let err = render_checked(Target::Slurm, &checked, None).unwrap_err();
    assert_eq!(
        err.located(checked.spec.as_ref().unwrap())
            .unwrap()
            .primary
            .unwrap()
            .message,
        "job.entrypoint_args"
    );
}

#[test]
fn steps_come_from_tokens_unless_written_and_data_from_beside_the_plan() {
    // 64 sequences of 1024 tokens a step: 6.5536e6 tokens are 100 steps.
    let text = plan("", "framework = torch")
        .replace("steps = 1000,", "")
        .replace(
            "seed = 7",
            "seed = 7, tokens = 6.5536e6, data = \"tokens.bin\"",
        );
    let checked = common::checked_named("plans/p.tp", &text);
    let a = render_checked(Target::Torchrun, &checked, None).unwrap();
    assert_flag(&a[0].contents, "tokens", "--steps", "100");
    assert_flag(&a[0].contents, "tokens", "--data", "plans/tokens.bin");
    let checked =
        common::checked(&text.replace("tokens = 6.5536e6", "tokens = 6.5536e6, steps = 20"));
    let a = render_checked(Target::Torchrun, &checked, None).unwrap();
    assert_flag(&a[0].contents, "steps", "--steps", "20");
    // A short run saves at its end: the save interval is the run.
    assert_flag(&a[0].contents, "steps", "--save-interval", "20");
    assert_flag(&a[0].contents, "steps", "--log-interval", "1");
}

#[test]
fn without_data_the_frameworks_mock_it() {
    let checked = common::checked(&plan("", "framework = torch"));
    for target in [Target::Megatron, Target::Torchrun] {
        let text = all_text(&render_checked(target, &checked, None).unwrap());
        assert_switch(&text, target.as_str(), "--mock-data");
    }
}

#[test]
fn torchtitan_carries_every_train_value() {
    let text = plan(", data = \"data/tokens.bin\"", "framework = torchtitan")
        .replace(
            "seq_len = 1024 }",
            "seq_len = 1024, mlp = swiglu, norm = rmsnorm, position = rope, bias = false }",
        )
        .replace("zero = 1", "zero = 3");
    let checked = common::checked(&text);
    let a = render_checked(Target::Torchtitan, &checked, None).expect("torchtitan runs it");
    let module = &a[0].contents;
    for field in [
        "lr=2e-5,",
        "betas=(0.85, 0.97),",
        "eps=1e-7,",
        "weight_decay=0.01,",
        "warmup_steps=100,",
        "decay_type=\"cosine\",",
        "min_lr_factor=0.1",
        "steps=1000,",
        "max_norm=0.5,",
        "mixed_precision_param=\"bfloat16\",",
        "SEED = 7",
        "DATA = \"data/tokens.bin\"",
        "folder=\"ckpt\",",
        "local_batch_size=2,",
        "global_batch_size=64,",
    ] {
        assert!(module.contains(field), "{field}:\n{module}");
    }
    // What torchtitan cannot carry is refused at the attribute.
    let e = render_checked(
        Target::Torchtitan,
        &common::checked(&text.replace("seed = 7", "seed = 7, dropout = 0.1")),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("dropout"), "{e}");
}
