//! `planc emit`: the launch artifacts of a checked plan, written without overwriting.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};

use planc_compiler::check::Checked;
use planc_compiler::plan::Framework;
use planc_runtime::device::dist::World;
use planc_targets::{render_checked, write_artifacts, EmitError, Target};

use crate::{load, render};

pub struct EmitArgs<'a> {
    pub target: Target,
    pub out: Option<&'a Path>,
    pub force: bool,
    pub templates: Option<&'a Path>,
}

/// Renders and writes the artifacts of an already checked (and retimed) plan.
pub fn emit_checked(checked: &Checked, args: &EmitArgs) -> ExitCode {
    if let Some(why) = settings_refusal(checked) {
        eprintln!("error: {why}");
        return ExitCode::from(1);
    }
    let target = args.target;
    let dir: PathBuf = args
        .out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| target.default_dir());
    let artifacts = match render_checked(target, checked, args.templates) {
        Ok(a) => a,
        Err(e) => {
            // A refusal that names an attribute is shown at it, with the plan's text.
            let located = checked.spec.as_ref().and_then(|s| e.located(s));
            match located {
                Some(d) => {
                    let mut err = StandardStream::stderr(ColorChoice::Auto);
                    if render::diagnostics_of(&mut err, checked, &[d]).is_err() {
                        eprintln!("error[{}]: {e}", e.code().id);
                    }
                }
                None => eprintln!("error[{}]: {e}", e.code().id),
            }
            return ExitCode::from(1);
        }
    };
    for w in warnings(checked, target) {
        eprintln!("warning: {w}");
    }
    match write_artifacts(&dir, &artifacts, args.force) {
        Ok(paths) => {
            for p in paths {
                println!("wrote    {}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error[{}]: {e}", e.code().id);
            ExitCode::from(if matches!(e, EmitError::Exists(_)) {
                2
            } else {
                1
            })
        }
    }
}

/// A job of framework planc runs what `planc run` can run today (tensor and data
/// parallelism): say at
/// emit time when it cannot, rather than when the job starts after its wait in the queue.
/// The artifacts are still written, for a `planc` on the cluster that may be newer.
pub(crate) fn planc_cannot_run(checked: &Checked) -> Option<String> {
    let (Some(spec), Some(plan)) = (&checked.spec, &checked.plan) else {
        return None;
    };
    if spec.job.as_ref().map(|j| j.framework) != Some(Framework::Planc) {
        return None;
    }
    let world = World {
        rank: 0,
        size: plan.cluster.world_size() as usize,
        local_rank: 0,
        master: String::new(),
    };
    planc_runtime::train::step::refuse(plan, &world)
        .err()
        .map(|e| format!("this planc cannot run the plan, so the job would stop at its start: {e}"))
}

/// What `planc emit` warns of besides the plan's diagnostics.
pub(crate) fn warnings(checked: &Checked, target: Target) -> Vec<String> {
    let mut out: Vec<String> = planc_cannot_run(checked).into_iter().collect();
    if let Some(spec) = &checked.spec {
        out.extend(planc_targets::warnings(target, spec));
    }
    out
}

/// A job of framework planc runs `planc run PLAN` on every node, which reads the file and
/// not this command line: its `--set` settings would be lost in the launch, so they are
/// refused there (the other frameworks' artifacts carry every value themselves).
pub(crate) fn settings_refusal(checked: &Checked) -> Option<&'static str> {
    let planc = checked
        .spec
        .as_ref()
        .and_then(|s| s.job.as_ref())
        .is_some_and(|j| j.framework == Framework::Planc);
    let set =
        checked.sources.files.iter().any(|f| {
            f.display == planc_compiler::settings::DISPLAY && f.path.as_os_str().is_empty()
        });
    (planc && set).then_some(
        "a job of framework planc runs `planc run` on the plan file, which would not see \
         --set; write the settings into a file that imports the plan (a block written again \
         there overrides single attributes, docs/language.md) and emit that file",
    )
}

pub fn run(file: &Path, sets: &[String], args: &EmitArgs, color: ColorChoice) -> ExitCode {
    let checked = match load::checked_with(file, sets) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut err = StandardStream::stderr(color);
    let _ = render::diagnostics(&mut err, &checked);
    if !checked.ok() {
        eprintln!("{}: not emitting a plan with errors", file.display());
        return ExitCode::from(1);
    }
    emit_checked(&checked, args)
}
