//! Human output: diagnostics with source snippets (codespan-reporting) and the summary.

use codespan_reporting::diagnostic::{
    Diagnostic as CsDiagnostic, Label, LabelStyle, Severity as CsSeverity,
};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::{self, termcolor::WriteColor};

use planc_compiler::check::Checked;
use planc_lang::units::{format_quantity, Dimension};
use planc_lang::{Diagnostic, Severity};

pub fn diagnostics(out: &mut dyn WriteColor, checked: &Checked) -> std::io::Result<()> {
    diagnostics_of(out, checked, &checked.diagnostics)
}

/// `diagnostics` (given ones, e.g. a target's refusal located in the plan) over the checked
/// plan's files.
pub fn diagnostics_of(
    out: &mut dyn WriteColor,
    checked: &Checked,
    diagnostics: &[Diagnostic],
) -> std::io::Result<()> {
    let files: Vec<(String, String)> = checked
        .sources
        .files
        .iter()
        .map(|f| (f.display.clone(), f.text.clone()))
        .collect();
    diagnostics_in(out, &files, diagnostics)
}

/// Diagnostics over files given by name and text, in `FileId` order.
pub fn diagnostics_in(
    out: &mut dyn WriteColor,
    sources: &[(String, String)],
    diagnostics: &[Diagnostic],
) -> std::io::Result<()> {
    let mut files = SimpleFiles::new();
    for (name, text) in sources {
        files.add(name.clone(), printable(text));
    }
    let config = term::Config::default();
    let lines: Vec<planc_lang::LineIndex> = sources
        .iter()
        .map(|(_, text)| planc_lang::LineIndex::new(text))
        .collect();
    for d in diagnostics {
        let mut cs = to_codespan(d);
        if let Some(place) = too_long_to_show(sources, &lines, d) {
            // A snippet repeats its whole line: a megabyte per diagnostic on a generated
            // one-line file. The place is said in words instead.
            cs.labels.clear();
            cs.notes.insert(0, place);
        }
        term::emit(out, &config, &files, &cs).map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    Ok(())
}

/// The text as a terminal may show it: control characters (an escape sequence would recolour
/// or garble the terminal, a NUL has no width to put a caret under) become `?`, one per
/// byte, so that every span still points at the same place. Line ends stay.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => out.push(c),
            c if c.is_control() => out.extend(std::iter::repeat_n('?', c.len_utf8())),
            c => out.push(c),
        }
    }
    out
}

/// Lines longer than this are not shown under a diagnostic.
const MAX_SNIPPET_LINE: usize = 1000;

/// `at FILE:LINE:COLUMN (...)` when a label of the diagnostic sits on a line too long to
/// show.
fn too_long_to_show(
    sources: &[(String, String)],
    lines: &[planc_lang::LineIndex],
    d: &Diagnostic,
) -> Option<String> {
    let long = |l: &planc_lang::Label| {
        let (_, text) = sources.get(l.file.0 as usize)?;
        let at = (l.span.start as usize).min(text.len());
        let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        (end - start > MAX_SNIPPET_LINE).then_some(end - start)
    };
    let labels = || d.primary.iter().chain(&d.secondary);
    let width = labels().find_map(long)?;
    let l = d.primary.as_ref()?;
    let (name, text) = sources.get(l.file.0 as usize)?;
    let (line, column) = lines[l.file.0 as usize].line_col(text, l.span.start as usize);
    Some(format!(
        "at {name}:{line}:{column} (the line is {width} bytes long, too long to show)"
    ))
}

fn to_codespan(d: &Diagnostic) -> CsDiagnostic<usize> {
    let severity = match d.severity {
        Severity::Error => CsSeverity::Error,
        Severity::Warning => CsSeverity::Warning,
        Severity::Note => CsSeverity::Note,
    };
    let mut labels = Vec::new();
    if let Some(l) = &d.primary {
        labels.push(
            Label::new(LabelStyle::Primary, l.file.0 as usize, l.span.range())
                .with_message(printable(&l.message)),
        );
    }
    for l in &d.secondary {
        labels.push(
            Label::new(LabelStyle::Secondary, l.file.0 as usize, l.span.range())
                .with_message(printable(&l.message)),
        );
    }
    // Context notes, then the help, then alternatives to the help ("or: ...").
    let (alternatives, mut notes): (Vec<String>, Vec<String>) =
        d.notes.iter().cloned().partition(|n| n.starts_with("or: "));
    if let Some(h) = &d.help {
        notes.push(format!("help: {h}"));
    }
    notes.extend(alternatives);
    // Messages quote the plan (a string value, a name): its control characters too.
    for n in &mut notes {
        *n = printable(n);
    }
    CsDiagnostic::new(severity)
        .with_code(d.code)
        .with_message(printable(&d.message))
        .with_labels(labels)
        .with_notes(notes)
}

/// Bytes as `check` prints them (GiB, MiB, …): `run` uses it too, so the two agree.
pub fn gib(x: f64) -> String {
    format_quantity(x, Dimension::Bytes)
}

fn secs(x: f64) -> String {
    format_quantity(x, Dimension::Time)
}

/// The pipeline stages' busy shares and imbalance: `stages   busy 0: 47 %, 1: 90 %;
/// imbalance 31 %, stage 0 waits 5.92 s for the others`. The step's bubble is the busiest
/// stage's; this line shows the stages that idle beyond it.
fn stages_line(e: &planc_compiler::cost::Estimate) -> String {
    let busy = |i: usize| e.stages[i].busy_fraction(e.step_s) * 100.0;
    let n = e.stages.len();
    let shares = if n <= 4 {
        (0..n)
            .map(|i| format!("{i}: {:.0} %", busy(i)))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        let by = |a: &usize, b: &usize| busy(*a).total_cmp(&busy(*b));
        let least = (0..n).min_by(by).unwrap_or(0);
        let most = (0..n).max_by(by).unwrap_or(0);
        format!(
            "{:.0} % (stage {least}) to {:.0} % (stage {most})",
            busy(least),
            busy(most)
        )
    };
    let mut line = format!(
        "stages   busy {shares}; imbalance {:.0} %",
        e.stage_imbalance() * 100.0
    );
    let (idle, wait) = e
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| (i, s.wait_s))
        .fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
    // Worth naming when a stage waits well beyond the pipeline's own fill and drain.
    if wait > e.bubble_s + 0.05 * e.step_s {
        line += &format!(", stage {idle} waits {} for the others", secs(wait));
    }
    line + "\n"
}

/// Layers per stage, runs of equal stages folded: `7 + 14 × 8 + 7 layers`.
fn stage_layers_words(plan: &planc_compiler::plan::Plan) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for s in 0..plan.parallel.pp {
        let n = plan.stage_layers(s);
        match runs.last_mut() {
            Some((count, layers)) if *layers == n => *count += 1,
            _ => runs.push((1, n)),
        }
    }
    let parts: Vec<String> = runs
        .iter()
        .map(|&(count, n)| {
            if count == 1 {
                n.to_string()
            } else {
                format!("{count} × {n}")
            }
        })
        .collect();
    format!("{} layers", parts.join(" + "))
}

/// What the plan costs: GPU-hours always, money with a price, the run with tokens or steps:
///
/// ```text
/// cost     0.160 GPU-hours a step (16 GPUs), 0.610 GPU-hours per million tokens
///          at 2.50 USD/h a GPU: 0.400 USD a step, 1.53 USD per million tokens
/// train    1.000e9 tokens (train.tokens) in 1.6 days: 610 GPU-hours, 1,526 USD
/// ```
pub fn cost_lines(b: &planc_compiler::pricing::Bill) -> String {
    use planc_lang::units::amount;
    let mut s = format!(
        "cost     {} GPU-hours a step ({} GPU{}), {} GPU-hours per million tokens\n",
        amount(b.gpu_hours_per_step),
        b.gpus,
        if b.gpus == 1 { "" } else { "s" },
        amount(b.gpu_hours_per_million_tokens)
    );
    if let Some(m) = &b.money {
        s += &format!(
            "         at {} {} a GPU: {} {c} a step, {} {c} per million tokens\n",
            amount(m.price_per_gpu_hour),
            m.currency.per_hour(),
            amount(m.per_step),
            amount(m.per_million_tokens),
            c = m.currency
        );
    }
    if let (Some(run), Some(t), Some(h)) = (b.run, b.time_to_train_s, b.gpu_hours_to_train) {
        s += &format!(
            "train    {:.3e} tokens (train.{}) in {}: {} GPU-hours",
            run.tokens,
            run.from,
            duration_words(t),
            amount(h)
        );
        if let Some(m) = &b.money {
            if let Some(c) = m.to_train {
                s += &format!(", {} {}", amount(c), m.currency);
            }
        }
        s += "\n";
    }
    s
}

/// A run's length as people plan one: days from two days on, else hours, minutes, seconds.
fn duration_words(seconds: f64) -> String {
    if seconds >= 2.0 * 86400.0 {
        format!("{:.1} days", seconds / 86400.0)
    } else if seconds >= 3600.0 {
        format!("{:.1} hours", seconds / 3600.0)
    } else if seconds >= 60.0 {
        format!("{:.1} minutes", seconds / 60.0)
    } else {
        format!("{seconds:.1} s")
    }
}

/// The compact summary of a costed plan.
pub fn summary(checked: &Checked) -> Option<String> {
    let plan = checked.plan.as_ref()?;
    let e = checked.estimate.as_ref()?;
    let p = &plan.parallel;
    let m = &plan.model;
    let mut s = String::new();
    let gpus: Vec<String> = plan
        .cluster
        .groups
        .iter()
        .map(|g| format!("{}×{}", g.gpus(), g.gpu.name))
        .collect();
    s += &format!(
        "plan     {} GPU{} ({})  tp={} pp={} dp={} cp={} ep={}  vpp={}  {} schedule\n",
        plan.cluster.world_size(),
        if plan.cluster.world_size() == 1 {
            ""
        } else {
            "s"
        },
        gpus.join(" + "),
        p.tp,
        p.pp,
        p.dp,
        p.cp,
        p.ep,
        p.vpp,
        p.schedule
    );
    s += &format!(
        "         micro_batch={} × {} micro-batches × dp {} = global batch {}  zero={} recompute={} sp={}\n",
        p.micro_batch, e.micro_batches, p.dp, plan.train.global_batch, p.zero, p.recompute, p.sequence_parallel
    );
    if p.is_uneven() {
        s += &format!("         uneven stages: {}\n", stage_layers_words(plan));
    }
    s += &format!(
        "model    {}: {:.2} B parameters, {:.3e} FLOPs per step, {} {}{}\n",
        m.name,
        e.params / 1e9,
        e.flops_per_step,
        plan.train.precision,
        plan.train.attention,
        if plan.eager() {
            format!(
                ", {}'s unfused kernels (job.kernels = eager)",
                plan.framework()
            )
        } else {
            String::new()
        }
    );
    if !plan.train.method.is_full() {
        // What trains, and which FLOPs the model FLOPs (and MFU) count.
        s += &format!(
            "method   {}: {:.3} B parameters train ({:.2} %); model FLOPs count no weight gradient of a frozen weight\n",
            planc_compiler::cost::method::describe(plan),
            e.trained_params / 1e9,
            e.trained_params / e.params * 100.0
        );
    }
    s += "memory   stage  weights    grads      optimizer  activations  other      total      of\n";
    let show: Vec<usize> = if e.stages.len() <= 4 {
        (0..e.stages.len()).collect()
    } else {
        let mut v = vec![0, 1, e.stages.len() - 1];
        if !v.contains(&e.peak_stage) {
            v.push(e.peak_stage);
        }
        v.sort();
        v
    };
    let mut last = None;
    for i in show {
        if let Some(l) = last {
            if i > l + 1 {
                s += "         ...\n";
            }
        }
        last = Some(i);
        let st = &e.stages[i];
        let mm = &st.memory;
        let pct = mm.total_bytes / st.capacity_bytes * 100.0;
        s += &format!(
            "         {:<6} {:<10} {:<10} {:<10} {:<12} {:<10} {:<10} {} ({:.0} %){}\n",
            mm.stage,
            gib(mm.weights_bytes),
            gib(mm.gradients_bytes),
            gib(mm.optimizer_bytes),
            gib(mm.activations_bytes),
            gib(mm.other_bytes),
            gib(mm.total_bytes),
            gib(st.capacity_bytes),
            pct,
            if i == e.peak_stage { "  ← peak" } else { "" }
        );
    }
    let pct = |x: f64| x / e.step_s * 100.0;
    s += &format!(
        "time     step {}  = compute {} ({:.0} %) + exposed comm {} ({:.0} %) + bubble {} ({:.0} %)\n",
        secs(e.step_s),
        secs(e.compute_s),
        pct(e.compute_s),
        secs(e.exposed_comm_s),
        pct(e.exposed_comm_s),
        secs(e.bubble_s),
        pct(e.bubble_s)
    );
    if e.method == planc_compiler::cost::TimeMethod::Simulated {
        s += &format!(
            "         simulated event by event; the closed form says {} ({:+.1} %)\n",
            secs(e.closed_form_step_s),
            (e.closed_form_step_s / e.step_s - 1.0) * 100.0
        );
    }
    if let Some(note) = checked
        .plan
        .as_ref()
        .and_then(planc_compiler::report::profile_note)
    {
        s += &format!("         {note}\n");
    }
    for note in checked
        .plan
        .as_ref()
        .map(planc_compiler::report::estimates_note)
        .unwrap_or_default()
    {
        s += &format!("         estimates {note}\n");
    }
    if e.stages.len() > 1 {
        s += &stages_line(e);
    }
    s += &format!(
        "speed    {:.0} tokens/s  {:.2} samples/s  {:.1} model TFLOP/s per GPU ({:.1} hardware)  MFU {:.1} %\n",
        e.tokens_per_s,
        e.samples_per_s,
        e.model_tflops_per_gpu,
        e.hw_tflops_per_gpu,
        e.mfu * 100.0
    );
    s += &cost_lines(&planc_compiler::pricing::bill(plan, e));
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_text_keeps_every_offset() {
        let text = "a\u{1b}[31m\0b\r\nc\u{85}d\re\tf";
        let shown = printable(text);
        assert_eq!(shown, "a?[31m?b\r\nc??d?e\tf");
        assert_eq!(shown.len(), text.len());
    }
}
