//! `planc solve`: the ranked layouts for a plan's holes, the Pareto front, and the best
//! plan's report; or, when nothing is valid, the conflicting rules and the fixes.

use std::path::Path;
use std::process::ExitCode;

use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};
use serde_json::json;

use planc_compiler::check::{holes, Checked};
use planc_compiler::cost::TimeMethod;
use planc_compiler::solve::{Candidate, Solution};

use crate::{load, render};

fn layout(c: &Candidate) -> String {
    let p = &c.plan.parallel;
    format!(
        "{:>3} {:>3} {:>4} {:>3} {:>3} {:>4} {:>3}  {:<12} {:>4}  {:<10} {:<5}",
        p.tp,
        p.pp,
        p.dp,
        p.cp,
        p.ep,
        p.vpp,
        p.micro_batch,
        p.schedule.to_string(),
        p.zero,
        p.recompute.to_string(),
        p.sequence_parallel
    )
}

fn gib(b: f64) -> f64 {
    b / (1u64 << 30) as f64
}

pub(crate) fn peak_bytes(c: &Candidate) -> f64 {
    c.estimate.stages[c.estimate.peak_stage].memory.total_bytes
}

fn candidate_json(rank: usize, c: &Candidate) -> serde_json::Value {
    let p = &c.plan.parallel;
    let bill = planc_compiler::pricing::bill(&c.plan, &c.estimate);
    json!({
        "rank": rank,
        "plan": {
            "tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "ep": p.ep, "vpp": p.vpp,
            "micro_batch": p.micro_batch, "schedule": p.schedule.to_string(),
            "sequence_parallel": p.sequence_parallel, "zero": p.zero,
            "recompute": p.recompute.to_string(), "offload": p.offload.to_string(),
        },
        "peak_memory_bytes": peak_bytes(c).round() as u64,
        "memory_fraction": c.memory_fraction,
        "step_s": c.estimate.step_s,
        "time_method": c.estimate.method.as_str(),
        "tokens_per_s": c.estimate.tokens_per_s,
        "mfu": c.estimate.mfu,
        "limited_by": c.limiter.as_str(),
        "gpus": bill.gpus,
        "gpu_hours_per_million_tokens": bill.gpu_hours_per_million_tokens,
        "cost_per_million_tokens": bill.money.as_ref().map(|m| m.per_million_tokens),
    })
}

/// What a candidate costs per million tokens, as the table's column shows it: money with a
/// price, else GPU-hours.
pub(crate) fn cost_cell(c: &Candidate) -> String {
    let b = planc_compiler::pricing::bill(&c.plan, &c.estimate);
    planc_lang::units::amount(
        b.money
            .map_or(b.gpu_hours_per_million_tokens, |m| m.per_million_tokens),
    )
}

/// The cost column's heading: `USD/Mtok` with a price, else `GPU-h/Mtok`.
pub(crate) fn cost_heading(s: &Solution) -> String {
    let priced = s
        .ranked
        .first()
        .and_then(|c| c.plan.cluster.price_per_hour());
    match priced {
        Some((_, currency)) => format!("{currency}/Mtok"),
        None => "GPU-h/Mtok".into(),
    }
}

/// A layout in one line of words: `tp=4 pp=1 dp=8 ... recompute=none`.
pub(crate) fn layout_words(c: &Candidate) -> String {
    let p = &c.plan.parallel;
    format!(
        "tp={} pp={} dp={} cp={} ep={} vpp={} mb={} {} zero={} recompute={}",
        p.tp, p.pp, p.dp, p.cp, p.ep, p.vpp, p.micro_batch, p.schedule, p.zero, p.recompute
    )
}

/// One line when `job.framework` kept a better layout out: which, how much better, and why.
pub(crate) fn left_out_line(s: &Solution) -> Option<String> {
    let l = s.left_out.as_ref()?;
    let c = &l.candidate;
    let named = layout_words(c);
    let than = match s.best() {
        Some(best) => format!(
            "{:.3} s a step against {:.3} s",
            c.estimate.step_s, best.estimate.step_s
        ),
        None => format!("{:.3} s a step, where it runs none", c.estimate.step_s),
    };
    Some(format!(
        "job.framework = {} left out a better layout ({}): {} ({})",
        l.limit.framework, named, than, l.limit.reason
    ))
}

pub(crate) fn search_line(s: &Solution) -> String {
    let rejected: usize = s.rejected.iter().map(|(_, n)| *n).sum();
    let rate = s.layouts as f64 / s.elapsed.as_secs_f64().max(1e-9);
    format!(
        "searched {} layouts (space {}) in {:.1} ms: {} break a rule, {} do not fit, {} valid ({:.0} layouts/s)",
        s.layouts,
        s.space_size,
        s.elapsed.as_secs_f64() * 1e3,
        rejected,
        s.over_memory,
        s.ranked.len(),
        rate
    )
}

/// How many candidates to list: the command line's `--top`, else the plan's `search.top`.
pub(crate) fn top_of(checked: &Checked, top: Option<usize>) -> usize {
    top.or(checked.spec.as_ref().map(|s| s.search.top as usize))
        .unwrap_or(5)
        .max(1)
}

/// What `planc solve --format json` prints (docs/spec/report.md): the best plan's report,
/// the first `top` candidates, the Pareto front and the search's counts.
pub(crate) fn to_json(checked: &Checked, top: usize) -> serde_json::Value {
    // `ok` and `diagnostics` at the top, as the report contract says: a script reads
    // why a plan has no layout (P0801, with its places) where it reads any other error.
    let best = checked.report();
    let mut out = json!({
        "version": best.version,
        "ok": best.ok,
        "diagnostics": best.diagnostics,
        "best": best,
    });
    if let Some(s) = &checked.solution {
        out["candidates"] = s
            .ranked
            .iter()
            .take(top)
            .enumerate()
            .map(|(i, c)| candidate_json(i + 1, c))
            .collect();
        out["pareto"] = s
            .pareto
            .iter()
            .map(|&i| candidate_json(i + 1, &s.ranked[i]))
            .collect();
        let rejected: serde_json::Map<String, serde_json::Value> = s
            .rejected
            .iter()
            .map(|(r, n)| (format!("{r:?}"), json!(n)))
            .collect();
        if let Some(l) = &s.left_out {
            out["left_out_by_framework"] = json!({
                "framework": l.limit.framework,
                "attribute": l.limit.attr,
                "reason": l.limit.reason,
                "candidate": candidate_json(0, &l.candidate),
            });
        }
        out["search"] = json!({
            "space": s.space_size,
            "layouts": s.layouts,
            "rejected_by_rule": rejected,
            "over_memory": s.over_memory,
            "valid": s.ranked.len(),
            "elapsed_s": s.elapsed.as_secs_f64(),
        });
    }
    out
}

pub fn run(
    file: &Path,
    sets: &[String],
    json_out: bool,
    top: Option<usize>,
    emit: Option<&crate::emit::EmitArgs>,
    color: ColorChoice,
) -> ExitCode {
    let checked: Checked = match load::checked_with(file, sets) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let ok = checked.ok();
    let top = top_of(&checked, top);
    if json_out {
        let out = to_json(&checked, top);
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialisable")
        );
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    let mut err = StandardStream::stderr(color);
    let _ = render::diagnostics(&mut err, &checked);
    let Some(solution) = &checked.solution else {
        if checked.spec.as_ref().is_some_and(|s| holes(s).is_empty()) {
            println!(
                "{} has no holes (`auto` or candidate lists) to fill; this is its check:\n",
                file.display()
            );
            if let Some(s) = render::summary(&checked) {
                print!("{s}");
            }
        }
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    };
    println!("{}", search_line(solution));
    if let Some(line) = left_out_line(solution) {
        println!("{line}");
    }
    if solution.ranked.is_empty() {
        let code = if solution.refused { "P0802" } else { "P0801" };
        eprintln!("{}: no valid layout (see {code} above)", file.display());
        return ExitCode::from(1);
    }
    // With `cluster.nodes` a list, each layout's cluster size leads its row.
    let sized = checked
        .spec
        .as_ref()
        .is_some_and(|s| !s.node_candidates.is_empty());
    let size = |c: &Candidate| {
        if sized {
            format!("{:>5} ", c.plan.cluster.world_size())
        } else {
            String::new()
        }
    };
    println!(
        "\nrank  {}{:>3} {:>3} {:>4} {:>3} {:>3} {:>4} {:>3}  {:<12} {:>4}  {:<10} {:<5}  {:>18}  {:>10}  {:>6}  {:>10}  limited by",
        if sized { " GPUs " } else { "" },
        "tp", "pp", "dp", "cp", "ep", "vpp", "mb", "schedule", "zero", "recompute", "sp", "memory", "step", "MFU",
        cost_heading(solution)
    );
    let mut any_closed = false;
    for (i, c) in solution.ranked.iter().take(top).enumerate() {
        let simulated = c.estimate.method == TimeMethod::Simulated;
        any_closed |= !simulated;
        println!(
            "{:<5} {}{}  {:>9.1} GiB {:>3.0} %  {:>8.3} s{}  {:>5.1} %  {:>10}  {}",
            i + 1,
            size(c),
            layout(c),
            gib(peak_bytes(c)),
            c.memory_fraction * 100.0,
            c.estimate.step_s,
            if simulated { " " } else { "†" },
            c.estimate.mfu * 100.0,
            cost_cell(c),
            c.limiter.as_str()
        );
    }
    if any_closed {
        println!("† closed form; the others are simulated event by event");
    }
    println!("\nPareto front, least memory first (no other layout is both smaller and faster):");
    for &i in &solution.pareto {
        let c = &solution.ranked[i];
        println!(
            "  #{:<4} {}{}  {:>7.1} GiB {:>3.0} %  {:>8.3} s",
            i + 1,
            size(c),
            layout(c),
            gib(peak_bytes(c)),
            c.memory_fraction * 100.0,
            c.estimate.step_s
        );
    }
    println!("\nthe best plan, as `planc check` reports it:");
    if let Some(s) = render::summary(&checked) {
        print!("{s}");
    }
    if let (Some(args), true) = (emit, ok) {
        println!();
        return crate::emit::emit_checked(&checked, args);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
