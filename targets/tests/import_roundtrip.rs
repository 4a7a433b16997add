//! `import(emit(p))` checks to the same report as `p` given the same cluster, for every
//! example each target can express: the layout, the memory of every stage, the step's time
//! and its split, the parameter count. The emitted files are read as a user would hand them
//! to `planc import` (the launch script with the configs and the model module beside it),
//! with the example's own plan as `--cluster`.

mod common;

use std::path::{Path, PathBuf};

use planc_compiler::check::{check_file, Checked};
use planc_compiler::source::FsLoader;
use planc_targets::import::{import, Input, Options};
use planc_targets::{render_checked, Artifact, Target};
use serde_json::Value;

/// The report's sections that say what the plan is and costs.
fn costed(c: &Checked) -> Value {
    let r = serde_json::to_value(c.report()).unwrap();
    let mut time = r["time"].clone();
    // Time to train follows train.tokens, which a launch carries as steps.
    time.as_object_mut().map(|t| t.remove("time_to_train_s"));
    serde_json::json!({
        "plan": r["plan"],
        "params": r["model"]["params"],
        "memory": r["memory"],
        "time": time,
    })
}

/// Numbers equal to 12 significant digits, everything else exactly.
fn same(a: &Value, b: &Value, path: &str, diffs: &mut Vec<String>) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            if (x - y).abs() > 1e-12 * x.abs().max(y.abs()) {
                diffs.push(format!("{path}: {x} vs {y}"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                same(
                    &x.get(k).cloned().unwrap_or(Value::Null),
                    &y.get(k).cloned().unwrap_or(Value::Null),
                    &format!("{path}.{k}"),
                    diffs,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                same(p, q, &format!("{path}[{i}]"), diffs);
            }
        }
        _ if a != b => diffs.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

/// The plan with `job.framework` set to `fw`.
fn with_framework(text: &str, fw: &str) -> String {
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("framework ="))
        .collect();
    let text = kept.join("\n");
    match text.find("\njob") {
        Some(i) => {
            let open = i + text[i..].find('{').unwrap() + 1;
            format!("{} framework = {fw}\n{}", &text[..open], &text[open..])
        }
        None => format!("{text}\njob {{ framework = {fw} }}\n"),
    }
}

/// The files of `artifacts` that `planc import` is given (the rest it reaches by name).
fn inputs(artifacts: &[Artifact], names: &[&str]) -> Vec<Input> {
    names
        .iter()
        .filter_map(|n| artifacts.iter().find(|a| a.path == Path::new(n)))
        .map(|a| Input {
            name: a.path.display().to_string(),
            path: a.path.clone(),
            text: a.contents.clone(),
        })
        .collect()
}

/// Imports the target's artifacts of every example it can express, with the example as the
/// cluster, and checks the result beside the example (so that a profile it names is found).
fn round_trip(target: Target, framework: &str, names: &[&str]) -> usize {
    // Beside the examples' folder, so that a profile an example names (relative to it) is
    // found from the imported plan too.
    let tmp = tempfile::tempdir_in(common::examples_dir().join("..")).unwrap();
    let mut tried = 0;
    let mut failures = Vec::new();
    for (name, _) in common::valid_examples() {
        // The plan as the target's framework runs it: what its artifacts describe.
        let example =
            std::fs::read_to_string(common::examples_dir().join(format!("{name}.tp"))).unwrap();
        let example = with_framework(&example, framework);
        let path = tmp.path().join(format!("{name}.tp"));
        std::fs::write(&path, &example).unwrap();
        let checked = check_file(&path, &FsLoader).unwrap();
        if !checked.ok() {
            continue;
        }
        let Ok(artifacts) = render_checked(target, &checked, None) else {
            continue;
        };
        // torchtitan 0.2.x's job file is what imports (the 0.3 form is Python); the target
        // writes it when 0.2.x can run the plan.
        if !names
            .iter()
            .all(|n| artifacts.iter().any(|a| a.path == Path::new(n)))
        {
            continue;
        }
        tried += 1;
        let opts = Options {
            cluster: Some((format!("{name}.tp"), example)),
            ..Options::default()
        };
        let read = |p: &Path| {
            artifacts
                .iter()
                .find(|a| a.path == p)
                .map(|a| a.contents.clone())
        };
        let imported = match import(&inputs(&artifacts, names), &opts, &read) {
            Ok(i) => i,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let out: PathBuf = tmp.path().join(format!("{name}.imported.tp"));
        std::fs::write(&out, &imported.plan).unwrap();
        let back = check_file(&out, &FsLoader).unwrap();
        if !back.ok() {
            failures.push(format!(
                "{name}: the imported plan does not check: {:?}\n{}",
                back.diagnostics
                    .iter()
                    .map(|d| format!("{} {}", d.code, d.message))
                    .collect::<Vec<_>>(),
                imported.plan
            ));
            continue;
        }
        let mut diffs = Vec::new();
        same(&costed(&checked), &costed(&back), "", &mut diffs);
        if !diffs.is_empty() {
            failures.push(format!("{name}: {}\n{}", diffs.join("\n  "), imported.plan));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    tried
}

#[test]
fn megatron_launches_import_to_the_reports_of_their_plans() {
    let n = round_trip(Target::Megatron, "megatron", &["launch-megatron.sh"]);
    assert!(n >= 10, "only {n} examples emit for Megatron-LM");
}

#[test]
fn deepspeed_configs_import_to_the_reports_of_their_plans() {
    let n = round_trip(
        Target::Deepspeed,
        "deepspeed",
        &[
            "launch-deepspeed.sh",
            "ds_config.json",
            "hostfile",
            "train.py",
        ],
    );
    assert!(n >= 3, "only {n} examples emit for DeepSpeed");
}

#[test]
fn torchtitan_job_files_import_to_the_reports_of_their_plans() {
    let n = round_trip(
        Target::Torchtitan,
        "torchtitan",
        &[
            "launch-torchtitan.sh",
            "torchtitan-job.toml",
            "planc_flavor.py",
        ],
    );
    assert!(n >= 3, "only {n} examples emit for torchtitan");
}
