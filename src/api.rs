//! The commands as calls for programs (the Python module, `python/`): each takes what its
//! command takes, goes through the same front door ([`crate::load::open_with`]), prints
//! nothing, and returns JSON. `check` returns the report contract (docs/spec/report.md) that
//! `planc check --format json` prints and `solve` what `planc solve --format json` prints;
//! `simulate` and `emit` return what their commands show (docs/guide/python.md lists the
//! keys). What the command line calls misuse (exit status 2: an unreadable file, an unknown
//! target, a file that exists) is an [`ApiError`]; a plan with errors (exit status 1) comes
//! back with `"ok": false` and its diagnostics.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use planc_compiler::report::Report;
use planc_compiler::source::FsLoader;
use planc_targets::{render_checked, write_artifacts, EmitError, Target};

use crate::load::{open_with, Opened, Overlay};

/// Where the plan comes from.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// A `.tp` file; its imports are read relative to it.
    Path(&'a Path),
    /// Plan text held by the caller, known as `name` in diagnostics; its imports are read
    /// from the file system relative to `name`'s folder (the working directory for a bare
    /// name).
    Text { name: &'a str, text: &'a str },
}

/// A call the command line would have refused with exit status 2.
#[derive(Debug)]
pub enum ApiError {
    /// The plan (or a path given with it) cannot be read.
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// An argument the command does not take (an unknown target).
    Usage(String),
    /// Files that exist where the call would write, without `force`.
    Exists(Vec<PathBuf>),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Io { path, error } => write!(f, "cannot read `{}`: {error}", path.display()),
            ApiError::Usage(why) => f.write_str(why),
            ApiError::Exists(paths) => {
                let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                write!(f, "{} exists; pass force to replace it", names.join(", "))
            }
        }
    }
}

impl std::error::Error for ApiError {}

fn open(input: Input, sets: &[String]) -> Result<Opened, ApiError> {
    let none = |_: usize, _: usize| {};
    match input {
        Input::Path(path) => {
            open_with(path, &FsLoader, sets, &none).map_err(|error| ApiError::Io {
                path: path.to_path_buf(),
                error,
            })
        }
        Input::Text { name, text } => {
            let open: HashMap<PathBuf, String> = [(PathBuf::from(name), text.to_owned())].into();
            Ok(
                open_with(Path::new(name), &Overlay { open: &open }, sets, &none)
                    .expect("the text is held in memory"),
            )
        }
    }
}

/// `planc check --format json`: the report contract (serialised, its keys in the
/// contract's order).
pub fn check(input: Input, sets: &[String]) -> Result<Report, ApiError> {
    Ok(open(input, sets)?.checked.report())
}

/// `planc solve --format json`: the best plan's report, the first `top` candidates (the
/// plan's `search.top` when none), the Pareto front and the search's counts.
pub fn solve(input: Input, sets: &[String], top: Option<usize>) -> Result<Value, ApiError> {
    let opened = open(input, sets)?;
    let top = crate::solve::top_of(&opened.checked, top);
    Ok(crate::solve::to_json(&opened.checked, top))
}

/// `planc simulate`: the report, then the simulated step (`simulation`: its busiest rank's
/// split and every pipeline rank's), or `null` with `not_simulated` saying why; with `svg`
/// the timeline as SVG text, with `trace` the Chrome trace as JSON.
pub fn simulate(input: Input, sets: &[String], svg: bool, trace: bool) -> Result<Value, ApiError> {
    let Opened {
        checked,
        simulation,
        simulated_in,
    } = open(input, sets)?;
    let report = checked.report();
    let mut out = json!({
        "version": report.version,
        "ok": report.ok,
        "diagnostics": report.diagnostics,
        "report": report,
        "simulation": null,
    });
    let (Some(sim), Some(plan), Some(est)) = (simulation, &checked.plan, &checked.estimate) else {
        out["not_simulated"] = json!(if checked.ok() && checked.plan.is_some() {
            "too large to simulate event by event (P0602)"
        } else {
            "nothing to simulate until the plan checks"
        });
        return Ok(out);
    };
    let names = planc_simulator::rank_names(plan);
    let b = sim.breakdown;
    let split = |b: &planc_simulator::Breakdown| {
        json!({
            "rank": names[b.rank as usize],
            "step_s": b.step_s,
            "compute_s": b.compute_s,
            "exposed_comm_s": b.exposed_comm_s,
            "bubble_s": b.bubble_s,
        })
    };
    out["simulation"] = json!({
        "tasks": sim.graph.graph.node_count(),
        "pipeline_ranks": sim.graph.ranks,
        "world_size": plan.cluster.world_size(),
        "busiest": split(&b),
        "ranks": sim.ranks.iter().map(split).collect::<Vec<_>>(),
        "closed_form_step_s": est.closed_form_step_s,
        "elapsed_s": seconds(simulated_in),
    });
    if svg {
        let title = format!(
            "{}: {} {} schedule, pp {} × {} micro-batches",
            input_name(input),
            plan.model.name,
            plan.parallel.schedule,
            plan.parallel.pp,
            est.micro_batches
        );
        let text = planc_simulator::svg::timeline_svg(&sim.graph, &sim.run, &names, &title, &b);
        out["svg"] = json!(text);
    }
    if trace {
        out["trace"] = planc_simulator::trace::chrome_trace(&sim.graph, &sim.run, &names);
    }
    Ok(out)
}

/// `planc emit`: the launch artifacts for `target` (`artifacts`: path relative to the
/// output folder, contents, executable), written under `out` when given (`written`), never
/// over an existing file unless `force`. A plan with errors, or one the target cannot
/// express, comes back with `ok` false, its diagnostics and `error`, and nothing written.
pub fn emit(
    input: Input,
    sets: &[String],
    target: &str,
    out: Option<&Path>,
    force: bool,
) -> Result<Value, ApiError> {
    let target: Target = target
        .parse()
        .map_err(|e: EmitError| ApiError::Usage(format!("{e} [{}]", e.code().id)))?;
    let checked = open(input, sets)?.checked;
    let report = checked.report();
    let mut result = json!({
        "version": report.version,
        "ok": report.ok,
        "diagnostics": report.diagnostics,
        "target": target.to_string(),
    });
    let refuse = |mut result: Value, code: Option<&str>, message: String| {
        result["ok"] = json!(false);
        result["error"] = json!({ "code": code, "message": message });
        result
    };
    if !checked.ok() {
        let code = EmitError::PlanErrors(Vec::new()).code().id;
        let why = "not emitting a plan with errors".to_owned();
        return Ok(refuse(result, Some(code), why));
    }
    if let Some(why) = crate::emit::settings_refusal(&checked) {
        return Ok(refuse(result, None, why.into()));
    }
    let artifacts = match render_checked(target, &checked, None) {
        Ok(a) => a,
        Err(e) => {
            // A refusal that names an attribute is a diagnostic at it, as on the command line.
            if let Some(d) = checked.spec.as_ref().and_then(|s| e.located(s)) {
                let located = planc_compiler::report::json_diagnostic(&d, &checked.sources);
                result["diagnostics"]
                    .as_array_mut()
                    .expect("diagnostics are a list")
                    .push(json!(located));
            }
            return Ok(refuse(result, Some(e.code().id), e.to_string()));
        }
    };
    result["warnings"] = json!(crate::emit::warnings(&checked, target));
    result["artifacts"] = artifacts
        .iter()
        .map(|a| json!({ "path": a.path, "contents": a.contents, "executable": a.executable }))
        .collect();
    if let Some(dir) = out {
        match write_artifacts(dir, &artifacts, force) {
            Ok(paths) => result["written"] = json!(paths),
            Err(EmitError::Exists(paths)) => return Err(ApiError::Exists(paths)),
            Err(e) => return Ok(refuse(result, Some(e.code().id), e.to_string())),
        }
    }
    Ok(result)
}

fn input_name(input: Input) -> String {
    match input {
        Input::Path(p) => p.display().to_string(),
        Input::Text { name, .. } => name.to_owned(),
    }
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}
