//! `planc emit`: launch artifacts from a checked plan.
//!
//! [`render`] fills minijinja templates (embedded from `targets/templates/`, one per
//! artifact, overridable by file name from a user directory) with a context built from the
//! plan: the chosen layout, the model, the cluster and the `job` block. [`write_artifacts`]
//! puts them on disk atomically and never overwrites a file unless asked to.
//!
//! What the plan implies for a framework (Megatron-LM's flags, DeepSpeed's config) is
//! computed in [`args`], so that every artifact carries the same flags; templates only lay
//! them out. Every string from the plan reaches an artifact through a quoting filter
//! ([`quote`]): `shell` in scripts, `yaml` in manifests (`kube` in a container's command and
//! environment), `json` in JSON.

pub mod args;
pub mod import;
pub mod quote;
pub mod script;
mod templates;
pub mod torchtitan;
pub mod torchtitan_v02;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use planc_compiler::check::Checked;
use planc_compiler::plan::{EntrypointArgs, Framework, Job, Plan, PlanSpec, Scheduler};
use planc_lang::codes::{self, Code};
use planc_lang::Diagnostic;
use serde::Serialize;

use crate::args::Arg;

/// A launcher planc writes artifacts for; the names are those of `--target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    Megatron,
    Deepspeed,
    Torchrun,
    Torchtitan,
    Slurm,
    K8s,
}

impl Target {
    pub const ALL: &'static [Target] = &[
        Target::Megatron,
        Target::Deepspeed,
        Target::Torchrun,
        Target::Torchtitan,
        Target::Slurm,
        Target::K8s,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Target::Megatron => "megatron",
            Target::Deepspeed => "deepspeed",
            Target::Torchrun => "torchrun",
            Target::Torchtitan => "torchtitan",
            Target::Slurm => "slurm",
            Target::K8s => "k8s",
        }
    }

    /// `planc-out/<target>`, where `planc emit` writes without `-o`.
    pub fn default_dir(self) -> PathBuf {
        Path::new("planc-out").join(self.as_str())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Target {
    type Err = EmitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Target::ALL
            .iter()
            .copied()
            .find(|t| t.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| EmitError::UnknownTarget(s.to_string()))
    }
}

/// One file to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// Relative to the output folder.
    pub path: PathBuf,
    pub contents: String,
    pub executable: bool,
}

#[derive(Debug)]
pub enum EmitError {
    /// The plan has errors (P0705); the diagnostics say which.
    PlanErrors(Vec<Diagnostic>),
    /// The target cannot express part of the plan (P0706), at the attribute that asks for it
    /// when one does (`(block, attribute)` as the plan's origins key it).
    Unsupported {
        target: Target,
        reason: String,
        at: Option<args::Attr>,
    },
    /// The target needs a `job` attribute the plan does not set (P0707).
    MissingJobAttribute {
        target: Target,
        attribute: &'static str,
    },
    /// A template failed to parse or render (P0708).
    Template { name: String, message: String },
    /// The `--templates` folder or a file in it could not be read (P0709).
    TemplateDir {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Files already exist and `force` was not given (P0710); nothing was written.
    Exists(Vec<PathBuf>),
    /// Writing an artifact failed (P0711).
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// `--target` names no target (P0712).
    UnknownTarget(String),
}

impl EmitError {
    pub fn code(&self) -> Code {
        match self {
            EmitError::PlanErrors(_) => codes::P0705,
            EmitError::Unsupported { .. } => codes::P0706,
            EmitError::MissingJobAttribute { .. } => codes::P0707,
            EmitError::Template { .. } => codes::P0708,
            EmitError::TemplateDir { .. } => codes::P0709,
            EmitError::Exists(_) => codes::P0710,
            EmitError::Io { .. } => codes::P0711,
            EmitError::UnknownTarget(_) => codes::P0712,
        }
    }
}

impl EmitError {
    /// The error as a diagnostic located at the plan's attribute, when it has one and the
    /// plan says where that attribute was written (else at the attribute's block).
    pub fn located(&self, spec: &PlanSpec) -> Option<Diagnostic> {
        let EmitError::Unsupported {
            at: Some((block, attr)),
            ..
        } = self
        else {
            return None;
        };
        let (file, span) = spec.origins.of(block, attr)?;
        let (block, attr) = (block.as_str(), attr.as_str());
        let label = if spec.origins.written(block, attr) {
            format!("{block}.{attr}")
        } else {
            format!("{block}.{attr} (its default)")
        };
        Some(Diagnostic::new(self.code(), self.to_string()).at(file, span, label))
    }
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmitError::PlanErrors(d) => {
                let errors = d.iter().filter(|d| d.is_error()).count();
                write!(
                    f,
                    "the plan has {errors} error{}; fix {} before emitting",
                    if errors == 1 { "" } else { "s" },
                    if errors == 1 { "it" } else { "them" }
                )?;
                if let Some(first) = d.iter().find(|d| d.is_error()) {
                    write!(f, " (first: {} {})", first.code, first.message)?;
                }
                Ok(())
            }
            EmitError::Unsupported { target, reason, .. } => {
                write!(f, "the {target} target cannot express this plan: {reason}")
            }
            EmitError::MissingJobAttribute { target, attribute } => write!(
                f,
                "the {target} target needs `job {{ {attribute} = ... }}` in the plan"
            ),
            EmitError::Template { name, message } => write!(f, "template `{name}`: {message}"),
            EmitError::TemplateDir { path, error } => {
                write!(f, "cannot read templates from {}: {error}", path.display())
            }
            EmitError::Exists(paths) => {
                let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                write!(
                    f,
                    "refusing to overwrite {} (use --force); nothing was written",
                    list.join(", ")
                )
            }
            EmitError::Io { path, error } => write!(f, "cannot write {}: {error}", path.display()),
            EmitError::UnknownTarget(s) => {
                let names = Target::ALL.iter().map(|t| t.as_str());
                match planc_compiler::schema::did_you_mean(s, names.clone()) {
                    Some(near) => write!(f, "unknown target `{s}`; did you mean `{near}`?")?,
                    None => write!(f, "unknown target `{s}`")?,
                }
                write!(f, " (targets: {})", names.collect::<Vec<_>>().join(", "))
            }
        }
    }
}

impl std::error::Error for EmitError {}

/// [`render`] for the result of `planc_compiler::check`: refuses when it has any error
/// (including out-of-memory), else renders its plan. The plan file is the checked root file,
/// by the path it was checked under.
pub fn render_checked(
    target: Target,
    checked: &Checked,
    templates: Option<&Path>,
) -> Result<Vec<Artifact>, EmitError> {
    let plan_file = checked
        .sources
        .files
        .first()
        .map(|f| f.display.as_str())
        .unwrap_or_default();
    match (&checked.spec, &checked.plan) {
        (Some(spec), Some(plan)) if checked.ok() => {
            render(target, spec, plan, plan_file, templates)
        }
        _ => Err(EmitError::PlanErrors(
            checked
                .diagnostics
                .iter()
                .filter(|d| d.is_error())
                .cloned()
                .collect(),
        )),
    }
}

/// The artifacts of `target` for a plan. Refuses a layout that breaks the rules of
/// `planc check` (the layout is validated again here, so no caller can skip it).
/// `plan_file` is where the job reads the plan when the framework is planc (`planc run
/// PLAN_FILE`); artifacts carry it verbatim, so a relative path stays relative.
pub fn render(
    target: Target,
    spec: &PlanSpec,
    plan: &Plan,
    plan_file: &str,
    templates: Option<&Path>,
) -> Result<Vec<Artifact>, EmitError> {
    let errors: Vec<Diagnostic> = planc_compiler::validate::validate(spec, &plan.parallel)
        .into_iter()
        .filter(Diagnostic::is_error)
        .collect();
    if !errors.is_empty() {
        return Err(EmitError::PlanErrors(errors));
    }
    let ctx = context(target, spec, plan, plan_file)?;
    let sources = templates::sources(templates)?;
    let env = environment(&sources)?;
    let framework = ctx.job.framework;
    let mut out = Vec::new();
    let with_script = ctx.script.is_some();
    for spec in templates::artifacts(
        target,
        framework,
        !ctx.env.is_empty(),
        with_script,
        ctx.titan02.is_some(),
    ) {
        let tmpl = env
            .get_template(spec.template)
            .map_err(|e| template_error(spec.template, e))?;
        let contents = tmpl
            .render(&ctx)
            .map_err(|e| template_error(spec.template, e))?;
        out.push(Artifact {
            path: PathBuf::from(spec.output),
            contents,
            executable: spec.executable,
        });
    }
    Ok(out)
}

/// Writes `artifacts` under `dir` (created if missing). Refuses before writing anything if
/// any file exists and `force` is false. Each file is written to a temporary file in the
/// same folder and renamed over its name, so a reader never sees half a file. Returns the
/// paths written.
pub fn write_artifacts(
    dir: &Path,
    artifacts: &[Artifact],
    force: bool,
) -> Result<Vec<PathBuf>, EmitError> {
    let targets: Vec<PathBuf> = artifacts.iter().map(|a| dir.join(&a.path)).collect();
    if !force {
        let existing: Vec<PathBuf> = targets
            .iter()
            .filter(|p| p.symlink_metadata().is_ok())
            .cloned()
            .collect();
        if !existing.is_empty() {
            return Err(EmitError::Exists(existing));
        }
    }
    for (a, path) in artifacts.iter().zip(&targets) {
        let parent = path.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent).map_err(|error| EmitError::Io {
            path: parent.to_path_buf(),
            error,
        })?;
        write_atomically(path, a).map_err(|error| EmitError::Io {
            path: path.clone(),
            error,
        })?;
    }
    Ok(targets)
}

fn write_atomically(path: &Path, a: &Artifact) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut n = 0u32;
    let (tmp, mut file) = loop {
        let tmp = parent.join(format!(".{name}.planc-tmp-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
            Err(e) => return Err(e),
        }
    };
    let result = (|| {
        file.write_all(a.contents.as_bytes())?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = if a.executable { 0o755 } else { 0o644 };
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn template_error(name: &str, e: minijinja::Error) -> EmitError {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    EmitError::Template {
        name: name.to_string(),
        message,
    }
}

// ----- the template context ------------------------------------------------------------

#[derive(Serialize)]
struct Context<'a> {
    target: &'static str,
    planc_version: &'static str,
    job: JobCtx,
    cluster: ClusterCtx,
    model: &'a planc_compiler::plan::Model,
    train: &'a planc_compiler::plan::Train,
    parallel: &'a planc_compiler::plan::Parallel,
    derived: Derived,
    /// `job.env`, in the order written.
    env: Vec<EnvVar>,
    /// Whether a value refers to a variable the kubelet does not know (the image's or the
    /// node's): the PyTorchJob's container then exports the environment from its shell.
    shell_env: bool,
    /// Whether the job crosses nodes over RDMA (InfiniBand or RoCE, or `NCCL_IB_*` set): the
    /// PyTorchJob's pods then ask for an RDMA device and may lock memory.
    rdma: bool,
    /// Whether any value goes in the container's `env` list.
    kube_env: bool,
    /// The training run (steps, data, checkpoints, logging) as every target carries it.
    run: args::RunValues,
    /// Megatron-LM flags by group (model, parallel, training, data); empty unless the
    /// framework (or target) is Megatron-LM.
    megatron_args: Vec<ArgGroup>,
    /// What every rank runs: the script and its arguments, for the job's framework.
    program: Program,
    /// DeepSpeed's config, when the framework (or target) is DeepSpeed.
    ds_config: Option<serde_json::Value>,
    /// The generated `train.py`, when the target writes one ([`script::wanted`]).
    script: Option<script::Script>,
    /// torchtitan's run module, for the torchtitan target.
    titan: Option<torchtitan::Titan>,
    /// The same run for torchtitan 0.2.x (a TOML job file and a model flavor), which the
    /// launch runs when the installed torchtitan is 0.2.x.
    titan02: Option<torchtitan_v02::TitanV02>,
    /// Why torchtitan 0.2.x cannot run a plan that torchtitan 0.3 can (the launch says it).
    titan02_refused: Option<String>,
    /// Things the reader of an artifact should know (printed as comments).
    notes: Vec<String>,
    /// The plan as `planc run` is given it (framework planc): the path given to `planc
    /// emit`, as given.
    plan_file: String,
}

#[derive(Serialize)]
struct JobCtx {
    name: String,
    /// `name` as a Kubernetes object name.
    k8s_name: String,
    /// `name` as a plain word (letters, digits, `._-`) for `#SBATCH` lines and file names.
    word: String,
    framework: Framework,
    scheduler: Scheduler,
    partition: Option<String>,
    /// `partition` as a plain word for `#SBATCH`.
    partition_word: Option<String>,
    time_limit_s: Option<u64>,
    /// `D-HH:MM:SS`, as sbatch's `--time` takes it.
    slurm_time: Option<String>,
    image: Option<String>,
    checkpoint_dir: Option<String>,
    retries: u64,
    entrypoint: Option<String>,
    entrypoint_args: EntrypointArgs,
    volume: Option<String>,
}

#[derive(Serialize)]
struct ClusterCtx {
    name: String,
    nodes: u64,
    gpus_per_node: u64,
    world_size: u64,
    gpu: String,
    /// Node groups of different GPUs: each is placed on its own nodes with fixed node ranks,
    /// in the order written (the order the plan priced the pipeline stages on).
    mixed: bool,
    groups: Vec<GroupCtx>,
}

#[derive(Serialize)]
struct GroupCtx {
    name: String,
    /// `name` as a Slurm node feature (`--constraint`).
    word: String,
    nodes: u64,
    gpu: String,
    /// The node rank of the group's first node; its nodes take the ranks after it.
    first_node_rank: u64,
    last_node_rank: u64,
    /// The pipeline stages whose ranks the group holds (first, last).
    stages: (u64, u64),
}

#[derive(Serialize)]
struct Derived {
    /// The schedule as written in plans (`1f1b`, not serde's `onefoneb`).
    schedule: &'static str,
    grad_accum: u64,
    /// Of a middle stage (uneven ends may split unevenly; see `Parallel::chunk_layers`).
    layers_per_virtual_stage: u64,
    /// Transformer layers of each pipeline stage, first to last.
    stage_layers: Vec<u64>,
    train_iters: Option<u64>,
    master_port: u16,
    save_interval: u64,
}

#[derive(Serialize)]
struct EnvVar {
    name: String,
    /// As written in the plan.
    value: String,
    /// The right-hand side of a shell export (double-quoted).
    shell: String,
    /// The value for a container's `env` list (before YAML quoting), or `None` when it refers
    /// to a variable the kubelet cannot expand.
    kube: Option<String>,
    /// A `.deepspeed_env` value, as DeepSpeed's launcher re-exports it.
    deepspeed: String,
}

#[derive(Serialize)]
struct ArgGroup {
    name: &'static str,
    args: Vec<Arg>,
}

#[derive(Serialize)]
struct Program {
    entrypoint: String,
    args: Vec<Arg>,
    /// The entrypoint is the generated script beside the launch script: it is named by the
    /// launch script's own folder, wherever the job is started from.
    beside: bool,
}

fn context<'a>(
    target: Target,
    spec: &PlanSpec,
    plan: &'a Plan,
    plan_file: &str,
) -> Result<Context<'a>, EmitError> {
    let default_job = Job {
        name: None,
        framework: match target {
            Target::Deepspeed => Framework::Deepspeed,
            Target::Torchtitan => Framework::Torchtitan,
            _ => Framework::Megatron,
        },
        scheduler: Scheduler::None,
        partition: None,
        time_limit: None,
        image: None,
        checkpoint_dir: None,
        retries: 0,
        entrypoint: None,
        env: Vec::new(),
        entrypoint_args: EntrypointArgs::Planc,
        volume: None,
        kernels: None,
        attention_kernel: None,
    };
    let job = spec.job.as_ref().unwrap_or(&default_job);
    let unsupported =
        |reason: String, at: Option<args::Attr>| EmitError::Unsupported { target, reason, at };
    if job.framework == Framework::Planc {
        // `planc run` is its own launcher (one process per GPU, its own rendezvous): only a
        // scheduler's artifacts, which start one `planc run` per node, can carry it. The
        // megatron and deepspeed targets would silently train with another framework.
        let why = match target {
            Target::Megatron | Target::Deepspeed | Target::Torchtitan => Some(format!(
                "this target's script runs {} instead of `planc run`; emit with --target slurm \
                 or k8s (or set job.framework = {target})",
                match target {
                    Target::Megatron => "Megatron-LM",
                    Target::Deepspeed => "DeepSpeed",
                    _ => "torchtitan",
                }
            )),
            Target::Torchrun => Some(
                "`planc run` starts one process per GPU and meets the other nodes itself, so \
                 there is nothing for torchrun to start; run `planc run PLAN --nnodes N \
                 --node-rank R --master HOST:PORT` on each node, or emit with --target slurm \
                 or k8s"
                    .to_string(),
            ),
            Target::Slurm | Target::K8s => None,
        };
        if let Some(why) = why {
            return Err(unsupported(
                format!("job.framework = planc, and {why}"),
                Some(args::at("job", "framework")),
            ));
        }
    }
    // The megatron, deepspeed and torchtitan targets are those frameworks, whatever the job
    // says.
    let framework = match target {
        Target::Megatron => Framework::Megatron,
        Target::Deepspeed => Framework::Deepspeed,
        Target::Torchtitan => Framework::Torchtitan,
        _ => job.framework,
    };
    // LoRA and frozen layers need the training code to apply them (`train.method`).
    if let Some(l) = planc_compiler::capability::method_limit(framework, &plan.train) {
        return Err(unsupported(l.reason, Some(args::at(l.block, l.attr))));
    }
    if job.entrypoint_args == EntrypointArgs::HfTrainer
        && !matches!(framework, Framework::Deepspeed | Framework::Torch)
    {
        return Err(unsupported(
            format!(
                "entrypoint_args = hf_trainer is for DeepSpeed and torch scripts built on Hugging \
                 Face's Trainer; the {framework} framework's entrypoint takes its own flags"
            ),
            Some(args::at("job", "entrypoint_args")),
        ));
    }
    if framework == Framework::Torchtitan && target != Target::Torchtitan {
        // torchtitan's run is a Python module its own trainer loads: only its target writes
        // it.
        return Err(unsupported(
            "job.framework = torchtitan: its run is the module --target torchtitan writes; \
             emit with --target torchtitan"
                .into(),
            Some(args::at("job", "framework")),
        ));
    }
    let cluster = &plan.cluster;
    if cluster.is_mixed() {
        let per_node: Vec<u64> = cluster.groups.iter().map(|g| g.gpus_per_node).collect();
        if per_node.iter().any(|&n| n != per_node[0]) {
            let launcher = if framework == Framework::Planc {
                "planc run"
            } else {
                "torchrun"
            };
            return Err(unsupported(
                format!(
                    "the node groups have different GPU counts per node ({per_node:?}); \
                     {launcher} starts the same number of processes on every node"
                ),
                None,
            ));
        }
    }
    if target == Target::K8s && job.image.is_none() {
        return Err(EmitError::MissingJobAttribute {
            target,
            attribute: "image",
        });
    }
    let env = env_vars(target, job)?;
    if target == Target::K8s {
        if let Some(dir) = &job.checkpoint_dir {
            if job.volume.is_some() && !dir.starts_with('/') {
                return Err(unsupported(
                    format!(
                        "the volume is mounted at checkpoint_dir, and a container's mount path \
                         is absolute: `{dir}` is not"
                    ),
                    Some(args::at("job", "checkpoint_dir")),
                ));
            }
        } else if job.volume.is_some() {
            return Err(unsupported(
                "the volume is mounted at job.checkpoint_dir, which the plan does not set".into(),
                Some(args::at("job", "volume")),
            ));
        }
    }

    let run = args::RunValues::new(spec, plan, plan_file);
    let mut notes = Vec::new();
    let megatron_groups = if framework == Framework::Megatron {
        Some(args::megatron(plan, &run, &mut notes)?)
    } else {
        None
    };
    let ds_config = if framework == Framework::Deepspeed {
        Some(args::deepspeed_config(plan, &run, target, &mut notes)?)
    } else {
        None
    };
    if job.entrypoint_args == EntrypointArgs::HfTrainer && job.entrypoint.is_none() {
        return Err(unsupported(
            "entrypoint_args = hf_trainer passes Hugging Face TrainingArguments to your Trainer \
             script: name it with job.entrypoint (planc's generated train.py takes planc's flags)"
                .into(),
            Some(args::at("job", "entrypoint_args")),
        ));
    }
    let script = if script::wanted(target, framework, job.entrypoint.as_deref()) {
        Some(script::script(
            plan,
            framework,
            target,
            job.checkpoint_dir.as_deref(),
            plan_file,
        )?)
    } else {
        None
    };
    let titan = if target == Target::Torchtitan {
        let name = job.name.clone().unwrap_or_else(|| plan.model.name.clone());
        Some(torchtitan::titan(
            plan,
            &quote::plain_word(&name),
            job.checkpoint_dir.as_deref(),
            plan_file,
        )?)
    } else {
        None
    };
    // torchtitan 0.2.x runs less than 0.3 (no tie under FSDP, no planc token files): its
    // refusal leaves the 0.3 form alone, and the launch says it when 0.2.x is installed.
    let (titan02, titan02_refused) = if target == Target::Torchtitan {
        let name = job.name.clone().unwrap_or_else(|| plan.model.name.clone());
        match torchtitan_v02::job(plan, target, &name, &run) {
            Ok(t) => (Some(t), None),
            Err(EmitError::Unsupported { reason, .. }) => (None, Some(reason)),
            Err(e) => return Err(e),
        }
    } else {
        (None, None)
    };
    // DeepSpeed's config is found beside the launch script, wherever the job starts from
    // (the PyTorchJob mounts it from a ConfigMap).
    let (ds_path, beside) = match target {
        Target::K8s => ("/etc/planc/ds_config.json", false),
        _ => ("ds_config.json", true),
    };
    let (entrypoint, prog_args) = args::program(
        plan,
        &run,
        framework,
        job.entrypoint_args,
        job.entrypoint.as_deref(),
        megatron_groups.as_deref(),
        (ds_path, beside),
        target,
    )?;
    if cluster.is_mixed() {
        notes.push(format!(
            "the cluster mixes {}: node ranks are fixed, group by group in the order written, \
             so that each pipeline stage runs on the GPUs the plan priced it on",
            cluster
                .groups
                .iter()
                .map(|g| format!("{}×{}", g.nodes * g.gpus_per_node, g.gpu.name))
                .collect::<Vec<_>>()
                .join(" and ")
        ));
        if target == Target::K8s {
            notes.push(
                "a PyTorchJob assigns node ranks Master first, then Workers in index order, and \
                 cannot pin a Worker to a node group: label the groups' nodes and add a \
                 nodeSelector or use the slurm target"
                    .into(),
            );
        }
    }

    if target == Target::K8s {
        notes.extend(warnings(target, spec));
    }
    let rdma = rdma(plan, job);
    let name = job.name.clone().unwrap_or_else(|| plan.model.name.clone());
    let time_limit_s = job.time_limit.map(|t| t.max(60.0).ceil() as u64);
    let p = &plan.parallel;
    Ok(Context {
        target: target.as_str(),
        planc_version: env!("CARGO_PKG_VERSION"),
        job: JobCtx {
            k8s_name: quote::dns_label(&name),
            word: quote::plain_word(&name),
            name,
            framework,
            scheduler: job.scheduler,
            partition_word: job.partition.as_deref().map(quote::plain_word),
            partition: job.partition.clone(),
            time_limit_s,
            slurm_time: time_limit_s.map(slurm_time),
            image: job.image.clone(),
            checkpoint_dir: job.checkpoint_dir.clone(),
            retries: job.retries,
            entrypoint: job.entrypoint.clone(),
            entrypoint_args: job.entrypoint_args,
            volume: job.volume.clone(),
        },
        cluster: ClusterCtx {
            name: cluster.name.clone(),
            nodes: cluster.nodes(),
            gpus_per_node: cluster.gpus_per_node(),
            world_size: cluster.world_size(),
            gpu: cluster
                .groups
                .iter()
                .map(|g| g.gpu.name.clone())
                .collect::<Vec<_>>()
                .join("+"),
            mixed: cluster.is_mixed(),
            groups: groups(plan),
        },
        model: &plan.model,
        train: &plan.train,
        parallel: &plan.parallel,
        derived: Derived {
            schedule: p.schedule.as_str(),
            grad_accum: p.grad_accum(plan.train.global_batch),
            layers_per_virtual_stage: p.middle_stage_layers(plan.model.layers) / p.vpp.max(1),
            stage_layers: (0..p.pp).map(|s| plan.stage_layers(s)).collect(),
            train_iters: Some(run.steps),
            master_port: 29500,
            save_interval: run.save_interval,
        },
        run,
        rdma,
        shell_env: env.iter().any(|e| e.kube.is_none()),
        kube_env: env.iter().any(|e| e.kube.is_some()),
        env,
        megatron_args: megatron_groups
            .unwrap_or_default()
            .into_iter()
            .map(|(name, args)| ArgGroup { name, args })
            .collect(),
        program: Program {
            entrypoint,
            args: prog_args,
            beside: script.is_some(),
        },
        ds_config,
        script,
        titan,
        titan02,
        titan02_refused,
        notes,
        plan_file: plan_file.to_string(),
    })
}

/// The node groups with their node ranks and the pipeline stages on them. Ranks follow
/// Megatron-LM's order (tensor fastest, pipeline slowest): node rank n holds global ranks
/// n·G … n·G + G − 1, and stage s the ranks s·(world / pp) onwards.
fn groups(plan: &Plan) -> Vec<GroupCtx> {
    let per_stage = (plan.cluster.world_size() / plan.parallel.pp.max(1)).max(1);
    let mut first = 0;
    plan.cluster
        .groups
        .iter()
        .map(|g| {
            let gpn = g.gpus_per_node.max(1);
            let first_rank = first * gpn;
            let last_rank = (first + g.nodes) * gpn - 1;
            let ctx = GroupCtx {
                name: g.name.clone(),
                word: quote::plain_word(&g.name),
                nodes: g.nodes,
                gpu: g.gpu.name.clone(),
                first_node_rank: first,
                last_node_rank: first + g.nodes - 1,
                stages: (first_rank / per_stage, last_rank / per_stage),
            };
            first += g.nodes;
            ctx
        })
        .collect()
}

/// Whether the job's nodes talk over RDMA: more than one node, and an InfiniBand or RoCE
/// inter-node link or NCCL's InfiniBand settings in `job.env` (unless it disables them).
fn rdma(plan: &Plan, job: &Job) -> bool {
    use planc_compiler::plan::LinkKind;
    let disabled = job
        .env
        .iter()
        .any(|(n, v)| n == "NCCL_IB_DISABLE" && v.trim() == "1");
    let link = plan
        .cluster
        .inter_node
        .as_ref()
        .is_some_and(|i| matches!(i.link.kind, LinkKind::Infiniband | LinkKind::Roce));
    let ib_env = job.env.iter().any(|(n, _)| n.starts_with("NCCL_IB_"));
    plan.cluster.nodes() > 1 && !disabled && (link || ib_env)
}

/// What the artifacts of `target` will do that the user may not expect, for `planc emit` to
/// print (the artifacts say it too, as notes).
pub fn warnings(target: Target, spec: &PlanSpec) -> Vec<String> {
    let mut out = Vec::new();
    let Some(job) = &spec.job else { return out };
    if target == Target::K8s && job.checkpoint_dir.is_some() && job.volume.is_none() {
        out.push(
            "job.checkpoint_dir without job.volume: the checkpoints are written to the pod's \
             own disk and lost with it; set job.volume to a PersistentVolumeClaim"
                .to_string(),
        );
    }
    out
}

/// `job.env` in each syntax the artifacts write it in: one meaning (`$NAME` and `${NAME}`
/// from the node's environment, the rest literal), checked again here so that `render`
/// callers who skipped `check` cannot run a command.
fn env_vars(target: Target, job: &Job) -> Result<Vec<EnvVar>, EmitError> {
    let mut out: Vec<EnvVar> = Vec::new();
    for (name, value) in &job.env {
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let at = Some(args::at("job.env", name));
        if !valid {
            return Err(EmitError::Unsupported {
                target,
                reason: format!("`{name}` is not a valid environment variable name"),
                at,
            });
        }
        let pieces =
            planc_compiler::nccl_env::env_value(value).map_err(|bad| EmitError::Unsupported {
                target,
                reason: format!("the value of {name}: {} (P0713)", bad.what),
                at: at.clone(),
            })?;
        if target == Target::Deepspeed && (value.trim() != value || value.contains(['\n', '\r'])) {
            // The launcher reads .deepspeed_env line by line and strips each value.
            return Err(EmitError::Unsupported {
                target,
                reason: format!(
                    "the value of {name} starts or ends with white space or holds a line \
                     break, which DeepSpeed's .deepspeed_env cannot carry"
                ),
                at,
            });
        }
        let defined: Vec<&str> = out
            .iter()
            .filter(|e| e.kube.is_some())
            .map(|e| e.name.as_str())
            .collect();
        out.push(EnvVar {
            name: name.clone(),
            value: value.clone(),
            shell: quote::shell_env(&pieces),
            kube: quote::kube_env(&pieces, &defined),
            deepspeed: quote::deepspeed_env(&pieces),
        });
    }
    Ok(out)
}

/// Seconds as sbatch's `D-HH:MM:SS`.
fn slurm_time(s: u64) -> String {
    let (d, rest) = (s / 86_400, s % 86_400);
    format!(
        "{d}-{:02}:{:02}:{:02}",
        rest / 3600,
        (rest % 3600) / 60,
        rest % 60
    )
}

// ----- the template environment --------------------------------------------------------

fn environment(sources: &BTreeMap<String, String>) -> Result<Environment<'_>, EmitError> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_keep_trailing_newline(true);
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.add_filter("shell", filters::shell);
    env.add_filter("shell_word", filters::shell_word);
    env.add_filter("yaml", filters::yaml);
    env.add_filter("json", filters::json);
    env.add_filter("kube", filters::kube);
    env.add_filter("kube_literal", filters::kube_literal);
    env.add_filter("py", filters::py);
    for (name, text) in sources {
        env.add_template(name, text)
            .map_err(|e| template_error(name, e))?;
    }
    Ok(env)
}

mod filters {
    use minijinja::value::{Value, ValueKind};
    use minijinja::{Error, ErrorKind};

    use crate::quote;

    fn scalar(v: &Value) -> Option<String> {
        match v.kind() {
            ValueKind::Number | ValueKind::Bool => Some(v.to_string()),
            _ => None,
        }
    }

    /// Single-quotes a string for the shell; numbers and booleans stay bare.
    pub fn shell(v: Value) -> Result<String, Error> {
        if let Some(s) = scalar(&v) {
            return Ok(s);
        }
        match v.as_str() {
            Some(s) => Ok(quote::shell(s)),
            None if v.is_none() || v.is_undefined() => Ok("''".into()),
            None => Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("`shell` quotes strings and numbers, not {}", v.kind()),
            )),
        }
    }

    /// Quotes a word only where the shell would read it differently (flags planc writes).
    pub fn shell_word(v: Value) -> Result<String, Error> {
        if let Some(s) = scalar(&v) {
            return Ok(s);
        }
        match v.as_str() {
            Some(s) => Ok(quote::shell_word(s)),
            None => shell(v),
        }
    }

    /// A YAML scalar: strings double-quoted with JSON escapes, numbers and booleans bare;
    /// sequences and maps as JSON flow collections (JSON is YAML).
    pub fn yaml(v: Value) -> Result<String, Error> {
        if let Some(s) = scalar(&v) {
            return Ok(s);
        }
        if let Some(s) = v.as_str() {
            return Ok(quote::yaml(s));
        }
        json(v, None)
    }

    /// A YAML string for a container's `command`, `args` or `env` value: `$` doubled (the
    /// kubelet would expand `$(NAME)`), numbers and booleans as strings (those lists hold
    /// strings only).
    pub fn kube(v: Value) -> Result<String, Error> {
        let text = match scalar(&v) {
            Some(s) => s,
            None => match v.as_str() {
                Some(s) => s.to_string(),
                None => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        format!("`kube` quotes strings and numbers, not {}", v.kind()),
                    ))
                }
            },
        };
        Ok(quote::yaml(&quote::kube_literal(&text)))
    }

    /// Text with `$` doubled, for a YAML block scalar in a container's command that
    /// planc's templates write themselves.
    pub fn kube_literal(v: Value) -> Result<String, Error> {
        match v.as_str() {
            Some(s) => Ok(quote::kube_literal(s)),
            None => Ok(quote::kube_literal(&v.to_string())),
        }
    }

    /// A Python literal: strings double-quoted with JSON's escapes (which Python reads
    /// alike), numbers bare, `True`/`False`/`None`.
    pub fn py(v: Value) -> Result<String, Error> {
        match v.kind() {
            ValueKind::Bool => Ok(if v.is_true() { "True" } else { "False" }.into()),
            ValueKind::None | ValueKind::Undefined => Ok("None".into()),
            ValueKind::Number => Ok(v.to_string()),
            _ => match v.as_str() {
                Some(s) => Ok(crate::script::py_str(s)),
                None => Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "`py` writes strings, numbers and booleans, not {}",
                        v.kind()
                    ),
                )),
            },
        }
    }

    /// JSON text of any value; `json(2)` indents.
    pub fn json(v: Value, indent: Option<usize>) -> Result<String, Error> {
        let r = match indent {
            Some(n) if n > 0 => {
                let mut buf = Vec::new();
                let ind = " ".repeat(n);
                let fmt = serde_json::ser::PrettyFormatter::with_indent(ind.as_bytes());
                let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
                serde::Serialize::serialize(&v, &mut ser)
                    .map(|_| String::from_utf8(buf).unwrap_or_default())
            }
            _ => serde_json::to_string(&v),
        };
        r.map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("json: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_print() {
        for t in Target::ALL {
            assert_eq!(t.as_str().parse::<Target>().unwrap(), *t);
        }
        let e = "slurmm".parse::<Target>().unwrap_err();
        assert_eq!(e.code().id, "P0712");
        assert!(e
            .to_string()
            .contains("megatron, deepspeed, torchrun, torchtitan, slurm, k8s"));
    }

    #[test]
    fn slurm_times() {
        assert_eq!(slurm_time(48 * 3600), "2-00:00:00");
        assert_eq!(slurm_time(90 * 60), "0-01:30:00");
        assert_eq!(slurm_time(61), "0-00:01:01");
    }
}
