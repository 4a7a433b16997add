//! Launch scripts: the shell layer's commands, the launchers around the training program,
//! and which program it is (Megatron-LM, NeMo or Megatron Bridge with Hydra's overrides,
//! torchtitan, LLaMA-Factory, or planc's own
//! `train.py`, whose flags are `args::script_args`). Exported NCCL/CUDA/PyTorch variables go
//! to `job.env`; the other exports and commands are listed.

use super::draft::{Origin, V};
use super::flags::{flag, Arity::*, Flag, Kind::*, To::*};
use super::launch::{self, Launch, Program};
use super::shell::{self, Script};
use super::{cluster, llamafactory, megatron, torchtitan, Ctx, Format, ImportError, Input};

const DERIVED: &str = "planc's launch derives it (from the steps)";

/// planc's training-script flags (`args::script_args`), written by the torchrun and
/// DeepSpeed targets.
pub const TABLE: &[Flag] = &[
    flag(
        &["--micro-batch-size"],
        One,
        Attr("parallel", "micro_batch", Int),
    ),
    flag(
        &["--global-batch-size"],
        One,
        Attr("train", "global_batch", Int),
    ),
    flag(&["--lr"], One, Attr("train", "lr", Float)),
    flag(&["--min-lr"], One, Attr("train", "min_lr", Float)),
    flag(&["--lr-schedule"], One, Special("lr_schedule")),
    flag(&["--warmup-steps"], One, Attr("train", "warmup_steps", Int)),
    flag(&["--steps"], One, Attr("train", "steps", Int)),
    flag(
        &["--weight-decay"],
        One,
        Attr("train", "weight_decay", Float),
    ),
    flag(&["--grad-clip"], One, Attr("train", "grad_clip", Float)),
    flag(&["--adam-beta1"], One, Attr("train", "adam_beta1", Float)),
    flag(&["--adam-beta2"], One, Attr("train", "adam_beta2", Float)),
    flag(&["--adam-eps"], One, Attr("train", "adam_eps", Float)),
    flag(&["--seed"], One, Attr("train", "seed", Int)),
    flag(&["--precision"], One, Special("precision")),
    flag(&["--dropout"], One, Attr("train", "dropout", Float)),
    flag(&["--data"], One, Attr("train", "data", Str)),
    flag(
        &["--mock-data"],
        Switch,
        Skip("synthetic data: planc's default when train.data is unset"),
    ),
    flag(&["--save"], One, Attr("job", "checkpoint_dir", Str)),
    flag(
        &["--load"],
        One,
        Skip("checkpoints are loaded from where they are saved (--save)"),
    ),
    flag(&["--save-interval", "--log-interval"], One, Skip(DERIVED)),
    flag(
        &["--deepspeed"],
        Switch,
        Set("job", "framework", "deepspeed"),
    ),
    flag(&["--deepspeed_config"], One, Special("ds_config")),
    flag(
        &["--device", "--local_rank", "--local-rank"],
        One,
        Skip("a site option of the script"),
    ),
];

/// Reads a launch script or a command line.
pub fn read_script(cx: &mut Ctx, input: &Input) -> Result<(), ImportError> {
    let script = shell::parse(&input.text);
    let file = input.name.as_str();
    if script.unescaped {
        cx.draft.note(format!("{file}: read as a script escaped for a document (\\\" and \\\\ at line ends), unescaped"));
    }
    cluster::said(cx, &launch::sbatch(&script.sbatch), file);
    heredocs(cx, &script, input);
    let launches: Vec<Launch> = script
        .commands
        .iter()
        .map(|c| launch::launch(&c.words, c.line))
        .collect();
    let chosen = choose(&launches);
    for (i, l) in launches.iter().enumerate() {
        if Some(i) == chosen {
            continue;
        }
        if let Some(p) = &l.program {
            if kind(l) != Kind::Other || !l.launchers.is_empty() {
                cx.draft.unplaced(
                    Origin::new(file, Some(l.line), p.name().to_string()),
                    Some(l.args.iter().map(|w| w.text.as_str()).collect::<Vec<_>>().join(" ")),
                    "another command of the script: planc imports one training command (the one with the most flags it knows)",
                );
            }
        }
    }
    if let Some(i) = chosen {
        read_command(cx, &launches[i], input);
    }
    exports(cx, &script, file);
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Megatron,
    /// A NeMo or Megatron Bridge script driven by Hydra's overrides.
    Nemo,
    Torchtitan,
    LlamaFactory,
    PlancScript,
    Other,
}

fn has(l: &Launch, flags: &[&str]) -> usize {
    l.args
        .iter()
        .filter(|w| {
            flags
                .iter()
                .any(|f| w.text == *f || w.text.starts_with(&format!("{f}=")))
        })
        .count()
}

fn kind(l: &Launch) -> Kind {
    let Some(p) = &l.program else {
        return Kind::Other;
    };
    let base = p.base();
    let megatron_flags = l
        .args
        .iter()
        .filter(|w| {
            super::flags::lookup(megatron::TABLE, w.text.split('=').next().unwrap_or("")).is_some()
        })
        .count();
    // Before Megatron-LM's: Megatron Bridge's recipes are `pretrain_*.py` too.
    if super::nemo::is_override_command(&l.args) {
        return Kind::Nemo;
    }
    if base.starts_with("pretrain_") && base.ends_with(".py") {
        return Kind::Megatron;
    }
    if matches!(p, Program::Module(m) if m == "torchtitan.train")
        || base == "run_train.sh"
        || p.name().contains("torchtitan/train")
        || has(l, &["--job.config_file", "--job.config-file"]) > 0
    {
        return Kind::Torchtitan;
    }
    if matches!(p, Program::Cli(c) if c == "llamafactory-cli" || c == "lmf")
        || base == "train_bash.py"
        || has(l, &["--stage", "--finetuning_type", "--model_name_or_path"]) > 0
    {
        return Kind::LlamaFactory;
    }
    if has(
        l,
        &["--precision", "--steps", "--lr-schedule", "--mock-data"],
    ) >= 2
    {
        return Kind::PlancScript;
    }
    if megatron_flags >= 3 {
        return Kind::Megatron;
    }
    Kind::Other
}

/// The training command: a known program's, with the most arguments; else the first
/// launched one.
fn choose(launches: &[Launch]) -> Option<usize> {
    let known = launches
        .iter()
        .enumerate()
        .filter(|(_, l)| kind(l) != Kind::Other)
        .max_by_key(|(i, l)| (l.args.len(), usize::MAX - i))
        .map(|(i, _)| i);
    known.or_else(|| {
        launches
            .iter()
            .position(|l| !l.launchers.is_empty() && l.program.is_some())
    })
}

fn read_command(cx: &mut Ctx, l: &Launch, input: &Input) {
    let file = input.name.as_str();
    cluster::said(cx, &l.said, file);
    let hostfiles = std::mem::take(&mut cx.pending.hostfiles);
    for (h, o) in hostfiles {
        cx.follow(input, &h, o, Format::Hostfile);
    }
    let program = l
        .program
        .as_ref()
        .map(|p| p.name().to_string())
        .unwrap_or_default();
    match kind(l) {
        Kind::Megatron => {
            megatron::read(cx, &l.args, file);
            for (path, from) in std::mem::take(&mut cx.pending.deepspeed_files) {
                cx.follow(input, &path, from, Format::Deepspeed);
            }
        }
        Kind::Nemo => super::nemo::read_overrides(cx, &l.args, input),
        Kind::Torchtitan => torchtitan::read_flags(cx, &l.args, input),
        Kind::LlamaFactory => llamafactory::read_flags(cx, &l.args, input),
        Kind::PlancScript => planc_flags(cx, l, input),
        Kind::Other => {
            cx.draft.note(format!("{file}:{}: {program} is not a training program planc knows (Megatron-LM, torchtitan, LLaMA-Factory, planc's train.py): its flags are listed, not placed", l.line));
            let (given, loose) = super::flags::parse(&l.args, &[]);
            for g in given {
                cx.draft.unplaced(
                    Origin::new(file, Some(g.line), g.key.clone()),
                    g.joined(),
                    format!("a flag of {program}"),
                );
            }
            for w in loose {
                cx.draft.unplaced(
                    Origin::new(file, Some(w.line), w.text.clone()),
                    None,
                    format!("an argument of {program}"),
                );
            }
        }
    }
    if l.launchers.contains(&"deepspeed") {
        cx.draft.assume(
            "job",
            "framework",
            V::Ident("deepspeed".into()),
            Origin::new(file, Some(l.line), "deepspeed"),
            "launched by DeepSpeed",
        );
    }
}

fn planc_flags(cx: &mut Ctx, l: &Launch, input: &Input) {
    let file = input.name.as_str();
    let (given, loose) = super::flags::parse(&l.args, TABLE);
    for w in loose {
        cx.draft.unplaced(
            Origin::new(file, Some(w.line), w.text.clone()),
            None,
            "a word that belongs to no flag",
        );
    }
    if let Some(p) = &l.program {
        if p.base() != "train.py" {
            cx.draft.set(
                "job",
                "entrypoint",
                V::Str(p.name().to_string()),
                Origin::new(file, Some(l.line), "program"),
            );
        }
    }
    let special = super::flags::place(
        given,
        TABLE,
        &mut cx.draft,
        file,
        "not a flag of planc's training script",
    );
    for (name, g) in special {
        let from = Origin::new(file, Some(g.line), g.key.clone());
        let v = g.value().unwrap_or("").to_string();
        match name {
            "lr_schedule" | "precision" => {
                let attr = if name == "precision" {
                    "precision"
                } else {
                    "lr_schedule"
                };
                cx.draft.set("train", attr, V::Ident(v), from);
            }
            "ds_config" => cx.follow(input, &v, from, Format::Deepspeed),
            _ => cx
                .draft
                .unplaced(from, Some(v), "planc has no attribute for it"),
        }
    }
    if !cx.draft.has("job", "framework") {
        cx.draft.set(
            "job",
            "framework",
            V::Ident("torch".into()),
            Origin::new(file, Some(l.line), "train.py under torchrun"),
        );
    }
}

/// Here-documents that write a DeepSpeed config (`cat > ds.json <<EOF`): read as one.
fn heredocs(cx: &mut Ctx, script: &Script, input: &Input) {
    for h in &script.heredocs {
        let Some(target) = &h.target else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&h.body) else {
            continue;
        };
        if super::deepspeed::is_config(&v) {
            let name = format!("{}:{} ({target})", input.name, h.line);
            super::deepspeed::read_value(cx, &v, &name, &h.body);
            cx.seen.push(std::path::PathBuf::from(target));
        }
    }
}

/// Exported variables: NCCL's, CUDA's and PyTorch's into `job.env`, the rest listed.
fn exports(cx: &mut Ctx, script: &Script, file: &str) {
    let mut names: Vec<&str> = Vec::new();
    for a in &script.assignments {
        let by_launcher = cx.pending.exported.iter().any(|n| n == &a.name);
        if (a.exported || by_launcher || cluster::carried(&a.name))
            && !names.contains(&a.name.as_str())
        {
            names.push(&a.name);
        }
    }
    for name in names {
        let all: Vec<&shell::Assignment> = script
            .assignments
            .iter()
            .filter(|a| a.name == name)
            .collect();
        let last = all[all.len() - 1];
        let values: Vec<&str> = all.iter().map(|a| a.value.as_str()).collect();
        if values.iter().any(|v| *v != last.value) {
            cx.draft.note(format!(
                "{name}: {file} sets it {} times ({}); kept the last, {}",
                values.len(),
                values.join(", "),
                last.value
            ));
        }
        let from = Origin::new(file, Some(last.line), name.to_string());
        if !last.exported
            && !cx.pending.exported.iter().any(|n| n == name)
            && !cluster::carried(name)
        {
            continue;
        }
        if name == "NNODES" || name == "NPROC_PER_NODE" || name == "NGPU" {
            launcher_env(cx, name, &last.value, from.clone());
        }
        cluster::place_env(cx, name, &last.value, last.unresolved, from);
    }
    // Variables read by LLaMA-Factory's and torchtitan's launchers, set without export.
    for name in ["NNODES", "NPROC_PER_NODE", "NGPU", "CONFIG_FILE"] {
        if let Some(a) = script.var(name).filter(|a| !a.exported) {
            let from = Origin::new(file, Some(a.line), name.to_string());
            launcher_env(cx, name, &a.value, from);
        }
    }
}

fn launcher_env(cx: &mut Ctx, name: &str, value: &str, from: Origin) {
    use super::cluster::Hint;
    use super::launch::Means;
    let Some(n) = super::flags::int(value) else {
        return;
    };
    let what = if name == "NNODES" {
        Means::Nodes
    } else {
        Means::GpusPerNode
    };
    cx.pending.hints.push(Hint {
        what,
        value: n,
        rank: 3,
        from,
    });
}
