//! `planc import`: the jobs users already run, as plans.
//!
//! ```text
//! inputs ──detect──▶ script │ DeepSpeed JSON │ hostfile │ torchtitan TOML │ LLaMA-Factory YAML
//!                    │ NeMo / Megatron Bridge YAML │ Hugging Face config.json
//!                    │ planc's own train.py / torchtitan flavor module
//!        ──each format's module──▶ Draft (values with origins, unplaced keys, assumptions)
//!        ──finish (cluster, derived values, frameworks' defaults)──▶ .tp text ──format──▶ plan
//! ```
//!
//! One module per format (`megatron`, `deepspeed`, `torchtitan`, `llamafactory`, `nemo`,
//! `hf`, `planc_script`), `shell` and `launch` for scripts and their launchers, `flags` for
//! argparse-style flags against each format's table, `cluster` for the cluster block and
//! `finish` for what needs every input (batch sizes over the world size, steps from
//! samples, frameworks' defaults). Every value placed keeps its origin (a comment beside it
//! in the plan); every value that is not placed is listed at the top with why.

pub mod cluster;
pub mod deepspeed;
pub mod draft;
mod finish;
pub mod flags;
pub mod hf;
pub mod launch;
pub mod llamafactory;
pub mod megatron;
pub mod nemo;
pub mod planc_script;
pub mod shell;
pub mod torchtitan;
mod yaml;

use std::path::{Path, PathBuf};

use serde::Serialize;

use draft::{Draft, Origin, Placed, Unplaced};

/// One input file.
#[derive(Clone, Debug)]
pub struct Input {
    /// As the user named it (shown in origins).
    pub name: String,
    pub path: PathBuf,
    pub text: String,
}

/// What the formats do not hold: the cluster.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// A plan whose `cluster` block (and `gpu` blocks) the import takes: (its name, its text).
    pub cluster: Option<(String, String)>,
    pub nodes: Option<u64>,
    pub gpus_per_node: Option<u64>,
    pub gpu: Option<String>,
}

/// The imported plan.
#[derive(Clone, Debug, Serialize)]
pub struct Imported {
    /// The plan, formatted.
    pub plan: String,
    pub placed: Vec<Placed>,
    pub unplaced: Vec<Unplaced>,
    pub assumed: Vec<String>,
}

#[derive(Debug)]
pub enum ImportError {
    /// A file in no format planc reads.
    Unknown(String, String),
    /// A file that is not valid in its format (JSON, TOML, YAML syntax).
    Invalid(String, String),
    /// The `--cluster` plan has no cluster block, or does not parse.
    Cluster(String),
    /// The assembled text did not format (a bug in planc).
    Format(String),
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImportError::Unknown(n, why) => write!(f, "{n}: {why}"),
            ImportError::Invalid(n, why) => write!(f, "{n}: {why}"),
            ImportError::Cluster(why) => write!(f, "--cluster: {why}"),
            ImportError::Format(why) => write!(
                f,
                "the imported plan did not format (a bug in planc): {why}"
            ),
        }
    }
}

/// The formats `planc import` reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Format {
    Script,
    Deepspeed,
    Hostfile,
    Torchtitan,
    LlamaFactory,
    /// NeMo 1.0's or Megatron Bridge's YAML config (Megatron-Core's settings).
    Nemo,
    HfConfig,
    /// A Python module holding a model's dimensions: planc's generated `train.py`
    /// (`MODEL_CONFIG`) or torchtitan flavor module (`planc_flavor.py`).
    PythonModel,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Script => "launch script",
            Format::Deepspeed => "DeepSpeed config",
            Format::Hostfile => "hostfile",
            Format::Torchtitan => "torchtitan job file",
            Format::LlamaFactory => "LLaMA-Factory config",
            Format::Nemo => "NeMo or Megatron Bridge config",
            Format::HfConfig => "Hugging Face config.json",
            Format::PythonModel => "model module",
        }
    }
}

/// Reads files named by the inputs (a `--deepspeed ds.json`, a hostfile, a torchtitan job
/// file), relative to the input that names them; None when they cannot be read.
pub type Reader<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// The state of one import.
pub struct Ctx<'a> {
    pub draft: Draft,
    pub pending: finish::Pending,
    read: Reader<'a>,
    /// Files read so far (by path), so that one named twice is read once.
    seen: Vec<PathBuf>,
}

impl Ctx<'_> {
    /// Reads a file an input names (`--deepspeed ds.json`) unless it was given or read
    /// already; says so when it cannot be read.
    pub fn follow(&mut self, from: &Input, named: &str, origin: Origin, expect: Format) {
        let base = from.path.parent().unwrap_or(Path::new(""));
        let candidates = [base.join(named), PathBuf::from(named)];
        let same_name =
            |p: &Path, s: &Path| s.file_name().is_some() && s.file_name() == p.file_name();
        if candidates
            .iter()
            .any(|c| self.seen.iter().any(|s| s == c || same_name(c, s)))
        {
            let why = format!(
                "the {} it names, among the inputs: its values are placed from it",
                expect.name()
            );
            self.draft.unplaced(origin, Some(named.to_string()), why);
            return;
        }
        for c in &candidates {
            let Some(text) = (self.read)(c) else { continue };
            let input = Input {
                name: named.to_string(),
                path: c.clone(),
                text,
            };
            self.draft.inputs.push(input.name.clone());
            self.seen.push(c.clone());
            let why = match read_as(self, &input, expect) {
                Err(e) => format!("{e}"),
                Ok(()) => format!(
                    "the {} it names, read: its values are placed from it",
                    expect.name()
                ),
            };
            self.draft.unplaced(origin, Some(named.to_string()), why);
            return;
        }
        self.draft.unplaced(
            origin,
            Some(named.to_string()),
            format!(
                "the {} it names was not among the inputs and could not be read; pass it to planc import",
                expect.name()
            ),
        );
    }
}

/// The format of a file, from its name and content.
pub fn detect(input: &Input) -> Result<Format, ImportError> {
    let name = input
        .path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_string())
        .unwrap_or_default();
    let text = input.text.trim_start_matches('\u{feff}');
    let unknown = |why: &str| Err(ImportError::Unknown(input.name.clone(), why.to_string()));
    match ext.as_str() {
        "json" => {
            let v: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| ImportError::Invalid(input.name.clone(), format!("not JSON: {e}")))?;
            if hf::is_config(&v) {
                Ok(Format::HfConfig)
            } else if deepspeed::is_config(&v) {
                Ok(Format::Deepspeed)
            } else {
                unknown(
                    "a JSON file that is neither a DeepSpeed config nor a Hugging Face config.json",
                )
            }
        }
        "toml" => Ok(Format::Torchtitan),
        "yaml" | "yml" if nemo::dialect(text).is_some() => Ok(Format::Nemo),
        "yaml" | "yml" => Ok(Format::LlamaFactory),
        "py" => {
            if hf::is_python_model(text) {
                Ok(Format::PythonModel)
            } else {
                unknown("a Python file that is not planc's train.py or a torchtitan flavor module planc wrote; pass the launch command and the configs instead")
            }
        }
        _ if name.contains("hostfile") || deepspeed::is_hostfile(text) => Ok(Format::Hostfile),
        _ => Ok(Format::Script),
    }
}

fn read_as(cx: &mut Ctx, input: &Input, format: Format) -> Result<(), ImportError> {
    match format {
        Format::Script => planc_script::read_script(cx, input),
        Format::Deepspeed => deepspeed::read(cx, input),
        Format::Hostfile => {
            deepspeed::read_hostfile(cx, input);
            Ok(())
        }
        Format::Torchtitan => torchtitan::read_toml(cx, input),
        Format::LlamaFactory => llamafactory::read_yaml(cx, input),
        Format::Nemo => nemo::read_yaml(cx, input),
        Format::HfConfig => hf::read(cx, input),
        Format::PythonModel => {
            hf::read_python(cx, input);
            Ok(())
        }
    }
}

/// Imports `inputs` into one plan. Data files are read before scripts, so that a command
/// line's flags override the files it names, as the frameworks do.
pub fn import(inputs: &[Input], opts: &Options, read: Reader) -> Result<Imported, ImportError> {
    let mut cx = Ctx {
        draft: Draft::default(),
        pending: finish::Pending::default(),
        read,
        seen: inputs.iter().map(|i| i.path.clone()).collect(),
    };
    let mut typed = Vec::new();
    for i in inputs {
        typed.push((detect(i)?, i));
        cx.draft.inputs.push(i.name.clone());
    }
    let rank = |f: Format| match f {
        Format::HfConfig | Format::PythonModel => 0,
        Format::Hostfile => 1,
        Format::Deepspeed => 2,
        Format::Torchtitan | Format::LlamaFactory | Format::Nemo => 3,
        Format::Script => 4,
    };
    typed.sort_by_key(|(f, _)| rank(*f));
    for (f, i) in typed {
        read_as(&mut cx, i, f)?;
    }
    cluster::assemble(&mut cx, opts)?;
    finish::finish(&mut cx);
    let text = cx.draft.render(env!("CARGO_PKG_VERSION"));
    let plan = planc_lang::format::format(&text).map_err(|e| match e {
        planc_lang::format::FormatError::Syntax(d) => ImportError::Format(
            d.iter()
                .map(|d| d.message.clone())
                .collect::<Vec<_>>()
                .join("; ")
                + "\n"
                + &text,
        ),
        planc_lang::format::FormatError::Changed(s) => ImportError::Format(s),
    })?;
    Ok(Imported {
        plan,
        placed: cx.draft.placed(),
        unplaced: cx.draft.unplaced.clone(),
        assumed: cx.draft.assumed.clone(),
    })
}
