//! `planc diff A [B] [--set PATH=VALUE]...`: two plans side by side, each checked as
//! `planc check` checks it (the step simulated), and the launch settings of one target that
//! differ between them.
//!
//! B is a second file, or A itself with the `--set` settings over it (the settings apply to
//! B). The human form is one aligned table with B's change against A; `--format json` gives
//! both reports, the rows and the settings for scripts.

pub mod flags;
pub mod rows;

use std::path::Path;
use std::process::ExitCode;

use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};
use planc_compiler::check::Checked;
use planc_compiler::plan::{Framework, Scheduler};
use planc_lang::Severity;
use planc_targets::Target;
use serde::Serialize;
use serde_json::json;

use crate::{load, render};
use rows::{Kind, Row};

pub struct Args<'a> {
    pub a: &'a Path,
    pub b: Option<&'a Path>,
    pub sets: &'a [String],
    pub target: Option<Target>,
    pub json: bool,
    pub color: ColorChoice,
}

/// The launch settings of one target that differ between the two plans.
#[derive(Debug, Serialize)]
pub struct FlagDiff {
    /// The target rendered, or null when the plans' framework has none to pick by default.
    pub target: Option<&'static str>,
    /// Why a side could not be rendered (a plan with errors, a layout the target refuses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_error: Option<String>,
    pub differ: Vec<ArtifactDiff>,
}

#[derive(Debug, Serialize)]
pub struct ArtifactDiff {
    pub artifact: String,
    pub settings: Vec<flags::Differs>,
}

pub fn run(args: &Args) -> ExitCode {
    let a = match load::checked_with(args.a, &[]) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let b = match load::checked_with(args.b.unwrap_or(args.a), args.sets) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let names = (args.a.display().to_string(), b_name(args));
    if !args.json {
        // Notes (what `auto` became) are `check`'s business; errors and warnings say why a
        // side has no figures or what to doubt in them.
        let mut err = StandardStream::stderr(args.color);
        for c in [&a, &b] {
            let shown: Vec<_> = c
                .diagnostics
                .iter()
                .filter(|d| d.severity != Severity::Note)
                .cloned()
                .collect();
            let _ = render::diagnostics_of(&mut err, c, &shown);
        }
    }
    let (ra, rb) = (a.report(), b.report());
    let rows = rows::rows(&ra, &rb);
    let target = args
        .target
        .or_else(|| default_target(&a).or_else(|| default_target(&b)));
    let flags = flag_diff(target, &a, &b);
    let ok = a.ok() && b.ok();
    if args.json {
        let out = json!({
            "version": 1,
            "ok": ok,
            "a": { "file": names.0, "report": ra },
            "b": { "file": names.1, "sets": args.sets, "report": rb },
            "rows": rows,
            "flags": flags,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("the diff serialises")
        );
    } else {
        print!("{}", human(&names, &rows, &flags));
    }
    for (c, name) in [(&a, &names.0), (&b, &names.1)] {
        let errors = c.diagnostics.iter().filter(|d| d.is_error()).count();
        if errors > 0 && !args.json {
            eprintln!(
                "{name} has {errors} error{}",
                if errors == 1 { "" } else { "s" }
            );
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn b_name(args: &Args) -> String {
    let file = args.b.unwrap_or(args.a).display().to_string();
    let sets: Vec<String> = args.sets.iter().map(|s| format!(" --set {s}")).collect();
    format!("{file}{}", sets.concat())
}

/// The target `planc emit` would be asked for the plan's framework: its own launcher, or
/// for a planc job the scheduler's.
fn default_target(c: &Checked) -> Option<Target> {
    let spec = c.spec.as_ref()?;
    Some(match spec.framework() {
        Framework::Megatron => Target::Megatron,
        Framework::Deepspeed => Target::Deepspeed,
        Framework::Torch => Target::Torchrun,
        Framework::Torchtitan => Target::Torchtitan,
        Framework::Planc => match spec.job.as_ref().map(|j| j.scheduler) {
            Some(Scheduler::Slurm) => Target::Slurm,
            Some(Scheduler::K8s) => Target::K8s,
            _ => return None,
        },
    })
}

fn flag_diff(target: Option<Target>, a: &Checked, b: &Checked) -> FlagDiff {
    let Some(target) = target else {
        return FlagDiff {
            target: None,
            a_error: None,
            b_error: None,
            differ: Vec::new(),
        };
    };
    let render = |c: &Checked| {
        planc_targets::render_checked(target, c, None).map_err(|e| match e {
            planc_targets::EmitError::PlanErrors(_) => "the plan has errors".to_string(),
            e => format!("{e} [{}]", e.code().id),
        })
    };
    let (ra, rb) = (render(a), render(b));
    let mut differ = Vec::new();
    if let (Ok(xa), Ok(xb)) = (&ra, &rb) {
        let mut paths: Vec<String> = xa
            .iter()
            .chain(xb.iter())
            .map(|x| x.path.display().to_string())
            .collect();
        paths.sort();
        paths.dedup();
        for path in paths {
            let of = |xs: &[planc_targets::Artifact]| {
                xs.iter()
                    .find(|x| x.path.display().to_string() == path)
                    .map(|x| flags::settings(&path, &x.contents))
                    .unwrap_or_default()
            };
            let settings = flags::differences(&of(xa), &of(xb));
            if !settings.is_empty() {
                differ.push(ArtifactDiff {
                    artifact: path,
                    settings,
                });
            }
        }
    }
    FlagDiff {
        target: Some(target.as_str()),
        a_error: ra.err(),
        b_error: rb.err(),
        differ,
    }
}

/// A value as the human table shows it.
fn shown(kind: Kind, v: &serde_json::Value) -> String {
    if v.is_null() {
        return "—".into();
    }
    let Some(x) = v.as_f64() else {
        return v.as_str().map_or_else(|| v.to_string(), str::to_string);
    };
    match kind {
        Kind::Text | Kind::Count => v.to_string(),
        Kind::Bytes => render::gib(x),
        Kind::Seconds if x >= 2.0 * 86_400.0 => format!("{:.1} days", x / 86_400.0),
        Kind::Seconds => planc_lang::units::format_quantity(x, planc_lang::units::Dimension::Time),
        Kind::Rate if x >= 100.0 => format!("{x:.0}"),
        Kind::Rate => format!("{x:.1}"),
        Kind::Share => format!("{:.1} %", x * 100.0),
        Kind::Amount => planc_lang::units::amount(x),
    }
}

/// B against A: relative for quantities, percentage points for shares.
fn change(r: &Row) -> String {
    match r.kind {
        Kind::Text | Kind::Count => String::new(),
        Kind::Share => r
            .delta
            .map_or(String::new(), |d| format!("{:+.1} pt", d * 100.0)),
        _ => match (r.relative, r.delta) {
            (Some(x), _) if x.abs() < 5e-4 => "=".into(),
            (Some(x), _) => format!("{:+.1} %", x * 100.0),
            (None, Some(d)) if d != 0.0 => "new".into(),
            _ => String::new(),
        },
    }
}

fn human(names: &(String, String), rows: &[Row], flags: &FlagDiff) -> String {
    // The layout's equal rows fold into one line; every figure is shown.
    let folds = |r: &&Row| r.section == "layout" && r.same() && !r.a.is_null();
    let same: Vec<&Row> = rows.iter().filter(folds).collect();
    let table: Vec<(&Row, [String; 3])> = rows
        .iter()
        .filter(|r| !folds(r))
        .map(|r| {
            let cell = |v: &serde_json::Value, note: &str| {
                let s = shown(r.kind, v);
                if note.is_empty() {
                    s
                } else {
                    format!("{s} {note}")
                }
            };
            (
                r,
                [cell(&r.a, &r.notes.0), cell(&r.b, &r.notes.1), change(r)],
            )
        })
        .collect();
    let wn = table
        .iter()
        .map(|(r, _)| r.name.chars().count())
        .max()
        .unwrap_or(0);
    let column = |i: usize| {
        table
            .iter()
            .map(|(_, c)| c[i].chars().count())
            .max()
            .unwrap_or(0)
            .max(1)
    };
    let (wa, wb) = (column(0), column(1));
    let line = |section: &str, name: &str, a: &str, b: &str, change: &str| {
        let l = format!("{section:<8} {name:<wn$}  {a:<wa$}  {b:<wb$}  {change}");
        format!("{}\n", l.trim_end())
    };
    let mut s = format!("A        {}\nB        {}\n", names.0, names.1);
    s += &line("", "", "A", "B", "B vs A");
    let mut last = "";
    for (r, c) in &table {
        if last == "layout" && r.section != "layout" && !same.is_empty() {
            s += &same_line(&same, "");
        }
        if last.is_empty() && r.section != "layout" && !same.is_empty() {
            s += &same_line(&same, "layout");
        }
        let section = if r.section == last { "" } else { r.section };
        last = r.section;
        s += &line(section, &r.name, &c[0], &c[1], &c[2]);
    }
    s += &flags_human(flags);
    s
}

/// The layout rows both plans share, wrapped at about 100 columns.
fn same_line(same: &[&Row], label: &str) -> String {
    let mut out = String::new();
    let mut line = format!("{label:<8} same:");
    for r in same {
        let word = format!("{}={}", r.name, shown(r.kind, &r.a));
        if line.chars().count() + 1 + word.chars().count() > 100 && !line.ends_with(':') {
            out += &line;
            out.push('\n');
            line = format!("{:<14}", "");
        }
        line.push(' ');
        line += &word;
    }
    out += &line;
    out.push('\n');
    out
}

fn flags_human(f: &FlagDiff) -> String {
    let indent = 8;
    let Some(target) = f.target else {
        return format!(
            "{:<indent$} none compared: a planc job without a scheduler has no launch to emit (pass --target)\n",
            "flags"
        );
    };
    let mut s = String::new();
    for (side, e) in [("A", &f.a_error), ("B", &f.b_error)] {
        if let Some(e) = e {
            s += &format!(
                "{:<indent$} {side} cannot be emitted for {target}: {e}\n",
                "flags"
            );
        }
    }
    if f.a_error.is_some() || f.b_error.is_some() {
        return s;
    }
    if f.differ.is_empty() {
        return format!("{:<indent$} {target}: the same launch settings\n", "flags");
    }
    let keys = f
        .differ
        .iter()
        .flat_map(|d| &d.settings)
        .map(|d| d.key.chars().count())
        .max()
        .unwrap_or(0);
    let vals = |pick: &dyn Fn(&flags::Differs) -> &Option<String>| {
        f.differ
            .iter()
            .flat_map(|d| &d.settings)
            .map(|d| pick(d).as_deref().map_or(1, flag_width))
            .max()
            .unwrap_or(1)
    };
    let wa = vals(&|d| &d.a).max(1);
    for (i, d) in f.differ.iter().enumerate() {
        let label = if i == 0 { "flags" } else { "" };
        s += &format!("{label:<indent$} {target}: {}\n", d.artifact);
        for x in &d.settings {
            let line = format!(
                "{:<indent$}   {:<keys$}  {:<wa$}  {}",
                "",
                x.key,
                flag_value(&x.a),
                flag_value(&x.b)
            );
            s += line.trim_end();
            s.push('\n');
        }
    }
    s
}

fn flag_width(v: &str) -> usize {
    flag_value(&Some(v.to_string())).chars().count()
}

/// A setting's value as shown: a switch as `on`, an absent one as `—`.
fn flag_value(v: &Option<String>) -> String {
    match v.as_deref() {
        None => "—".into(),
        Some("") => "on".into(),
        Some(v) => v.to_string(),
    }
}
