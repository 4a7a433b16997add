//! The embedded templates, which artifacts each target writes, and `--templates` overrides.

use std::collections::BTreeMap;
use std::path::Path;

use planc_compiler::plan::Framework;

use crate::{EmitError, Target};

/// Every embedded template, by file name (the name a `--templates` folder overrides).
pub const EMBEDDED: &[(&str, &str)] = &[
    ("macros.j2", include_str!("../templates/macros.j2")),
    (
        "megatron.sh.j2",
        include_str!("../templates/megatron.sh.j2"),
    ),
    (
        "deepspeed.sh.j2",
        include_str!("../templates/deepspeed.sh.j2"),
    ),
    (
        "ds_config.json.j2",
        include_str!("../templates/ds_config.json.j2"),
    ),
    ("hostfile.j2", include_str!("../templates/hostfile.j2")),
    (
        "deepspeed_env.j2",
        include_str!("../templates/deepspeed_env.j2"),
    ),
    (
        "torchrun.sh.j2",
        include_str!("../templates/torchrun.sh.j2"),
    ),
    (
        "slurm.sbatch.j2",
        include_str!("../templates/slurm.sbatch.j2"),
    ),
    ("train.py.j2", include_str!("../templates/train.py.j2")),
    ("tokens.py.j2", include_str!("../templates/tokens.py.j2")),
    (
        "torchtitan_v02.toml.j2",
        include_str!("../templates/torchtitan_v02.toml.j2"),
    ),
    (
        "torchtitan_flavor.py.j2",
        include_str!("../templates/torchtitan_flavor.py.j2"),
    ),
    (
        "torchtitan.sh.j2",
        include_str!("../templates/torchtitan.sh.j2"),
    ),
    (
        "torchtitan.py.j2",
        include_str!("../templates/torchtitan.py.j2"),
    ),
    (
        "pytorchjob.yaml.j2",
        include_str!("../templates/pytorchjob.yaml.j2"),
    ),
];

pub struct ArtifactSpec {
    pub template: &'static str,
    pub output: &'static str,
    pub executable: bool,
}

const fn a(template: &'static str, output: &'static str, executable: bool) -> ArtifactSpec {
    ArtifactSpec {
        template,
        output,
        executable,
    }
}

/// The artifacts of a target, in the order they are written. Targets that launch the job's
/// framework add DeepSpeed's config beside the script when the framework is DeepSpeed (the
/// PyTorchJob carries it in a ConfigMap instead). The deepspeed target writes `.deepspeed_env`
/// when the plan sets environment variables: DeepSpeed's launcher exports what it lists to
/// every node. `train.py` comes with the torchrun and deepspeed launches that start it
/// (`crate::script`). The torchtitan target adds torchtitan 0.2.x's job file and model
/// module when 0.2.x can run the plan (`crate::torchtitan_v02`).
pub fn artifacts(
    target: Target,
    framework: Framework,
    has_env: bool,
    with_script: bool,
    titan02: bool,
) -> Vec<ArtifactSpec> {
    let mut v = launch_artifacts(target, framework, has_env);
    if with_script {
        v.push(a("train.py.j2", "train.py", true));
    }
    if target == Target::Torchtitan && titan02 {
        v.push(a("torchtitan_v02.toml.j2", "torchtitan-job.toml", false));
        v.push(a("torchtitan_flavor.py.j2", "planc_flavor.py", false));
    }
    v
}

fn launch_artifacts(target: Target, framework: Framework, has_env: bool) -> Vec<ArtifactSpec> {
    let ds = framework == Framework::Deepspeed;
    match target {
        Target::Megatron => vec![a("megatron.sh.j2", "launch-megatron.sh", true)],
        Target::Deepspeed => {
            let mut v = vec![
                a("ds_config.json.j2", "ds_config.json", false),
                a("hostfile.j2", "hostfile", false),
                a("deepspeed.sh.j2", "launch-deepspeed.sh", true),
            ];
            if has_env {
                v.push(a("deepspeed_env.j2", ".deepspeed_env", false));
            }
            v
        }
        Target::Torchrun => {
            let mut v = vec![a("torchrun.sh.j2", "launch-torchrun.sh", true)];
            if ds {
                v.push(a("ds_config.json.j2", "ds_config.json", false));
            }
            v
        }
        Target::Slurm => {
            let mut v = vec![a("slurm.sbatch.j2", "job.sbatch", true)];
            if ds {
                v.push(a("ds_config.json.j2", "ds_config.json", false));
            }
            v
        }
        Target::Torchtitan => vec![
            a("torchtitan.py.j2", "planc_torchtitan.py", false),
            a("torchtitan.sh.j2", "launch-torchtitan.sh", true),
        ],
        Target::K8s => vec![a("pytorchjob.yaml.j2", "pytorchjob.yaml", false)],
    }
}

/// The template sources: the embedded ones, with any file of the same name in `dir`
/// replacing its embedded namesake (other files in `dir` are added, for `include`/`import`).
pub fn sources(dir: Option<&Path>) -> Result<BTreeMap<String, String>, EmitError> {
    let mut map: BTreeMap<String, String> = EMBEDDED
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    let Some(dir) = dir else { return Ok(map) };
    let entries = std::fs::read_dir(dir).map_err(|error| EmitError::TemplateDir {
        path: dir.to_path_buf(),
        error,
    })?;
    for entry in entries {
        let entry = entry.map_err(|error| EmitError::TemplateDir {
            path: dir.to_path_buf(),
            error,
        })?;
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.ends_with(".j2") {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|error| EmitError::TemplateDir {
            path: path.clone(),
            error,
        })?;
        map.insert(name.to_string(), text);
    }
    Ok(map)
}
