//! `planc run FILE`: trains the plan's model on the local GPU (`planc_runtime::train`),
//! with a live line per step, `--metrics` JSON lines, `--trace`, checkpoints, and at the end
//! the measured step time and peak memory next to planc's prediction for this plan here.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};
use planc_runtime::device::dist::World;
use planc_runtime::train::metrics::{Event, StepMetrics, Summary};
use planc_runtime::train::step::{refuse, train, Options};
use planc_runtime::RunError;
use serde_json::json;

use crate::render::gib;
use crate::{launch, load, output, render};

pub struct Args {
    /// `--set` settings over the plan.
    pub sets: Vec<String>,
    pub steps: Option<u64>,
    pub save: Option<PathBuf>,
    pub save_every: Option<u64>,
    pub resume: Option<PathBuf>,
    pub metrics: Option<PathBuf>,
    pub trace: Option<PathBuf>,
    pub layers: Option<usize>,
    pub json: bool,
    pub force: bool,
    /// `--no-graphs`: every step's kernels launched from the host.
    pub no_graphs: bool,
    pub nnodes: Option<usize>,
    pub node_rank: Option<usize>,
    pub master: Option<String>,
}

pub fn run(file: &Path, args: Args, color: ColorChoice) -> ExitCode {
    if args.save_every.is_some() && args.save.is_none() {
        eprintln!("error: --save-every needs --save DIR");
        return ExitCode::from(2);
    }
    if let Some(t) = &args.trace {
        if t.exists() && !args.force {
            eprintln!(
                "error: `{}` exists; pass --force to replace it",
                t.display()
            );
            return ExitCode::from(2);
        }
    }
    // `--layers K` is the plan with K layers, checked as such: a model that does not fit
    // whole is measured K layers at a time (its memory, prediction, trace and by-kind
    // table are those of the K layers that run).
    let mut sets = args.sets.clone();
    if let Some(k) = args.layers {
        sets.push(format!("model.layers={k}"));
    }
    // Holes are filled as `check` and `emit` fill them (the simulator re-ranks the
    // finalists), so the run trains the layout they show.
    let checked = match load::checked_with(file, &sets) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // A rank started by planc's own launcher: the launcher has shown the diagnostics.
    let launched = std::env::var_os("PLANC_RANK").is_some();
    if !launched {
        let mut err = StandardStream::stderr(color);
        let _ = render::diagnostics(&mut err, &checked);
    }
    let Some(plan) = checked.plan.as_ref().filter(|_| checked.ok()) else {
        eprintln!("{}: not running a plan with errors", file.display());
        return ExitCode::from(1);
    };
    let world = match World::from_env() {
        Some(w) => w,
        None if plan.cluster.world_size() > 1 => {
            let size = plan.cluster.world_size() as usize;
            let all = World {
                rank: 0,
                size,
                local_rank: 0,
                master: String::new(),
            };
            if let Err(e) = refuse(plan, &all) {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
            let nodes = launch::Nodes::resolve(args.nnodes, args.node_rank, args.master.clone());
            let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
            let plan_nodes = plan.cluster.groups.iter().map(|g| g.nodes).sum();
            return launch::launch(size, plan_nodes, &nodes, &argv);
        }
        None => World::ONE,
    };
    // Only rank 0 reports; the others train and stay quiet unless they fail.
    let lead = world.rank == 0;
    if let (Some(t), false, true) = (&args.trace, args.force, lead) {
        // The other ranks' traces, refused before any step as rank 0's is above.
        if let Some(p) = (1..world.size)
            .map(|r| rank_trace_path(t, r))
            .find(|p| p.exists())
        {
            eprintln!(
                "error: `{}` exists; pass --force to replace it",
                p.display()
            );
            return ExitCode::from(2);
        }
    }
    // The text `check` already read (the root file is the first source), with the settings
    // over it: a checkpoint records the plan that trained it.
    let mut text = checked
        .sources
        .files
        .first()
        .map(|f| f.text.clone())
        .unwrap_or_default();
    for s in &args.sets {
        text.push_str(&format!("\n# --set {s}"));
    }
    let opts = Options {
        steps: args.steps,
        save: args.save.clone(),
        save_every: args.save_every,
        resume: args.resume.clone(),
        layers: args.layers,
        plan_dir: file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
        plan_hash: planc_runtime::train::plan_hash(&text),
        trace: args.trace.is_some(),
        no_graphs: args.no_graphs,
    };
    let metrics_path = args.metrics.as_ref().filter(|_| lead);
    let mut metrics = match metrics_path {
        Some(p) => match OpenOptions::new().create(true).append(true).open(p) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("error: cannot open `{}`: {e}", p.display());
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let total = args.steps.unwrap_or(plan.train.run.steps);
    let mut metrics_error = None;
    let mut started = 0.0;
    let result = train(plan, &opts, &world, |event: Event| {
        if !lead {
            return;
        }
        let m = match event {
            Event::Started(p) => {
                // Only a slow phase is worth a line before the first step; the summary
                // has them all.
                started += p.seconds;
                if let Some(line) = slow_phase_line(p, started) {
                    eprintln!("{line}");
                }
                return;
            }
            Event::Step(m) => m,
        };
        eprintln!("{}", step_line(m, total));
        if let Some(f) = metrics.as_mut() {
            let line = serde_json::to_string(m).expect("metrics serialise");
            if let Err(e) = writeln!(f, "{line}").and_then(|_| f.flush()) {
                metrics_error.get_or_insert(e);
            }
        }
    });
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(match e {
                RunError::NoDriver | RunError::NoGpu | RunError::NoCublas | RunError::Usage(_) => 2,
                _ => 1,
            });
        }
    };
    // Every rank writes its own trace: rank 0's where --trace says, the others' beside it.
    if let Some(t) = &args.trace {
        let path = if lead {
            t.clone()
        } else {
            rank_trace_path(t, world.rank)
        };
        let trace = chrome_trace(&summary, file, world.rank);
        let bytes = serde_json::to_vec(&trace).expect("the trace serialises");
        if let Err(e) = output::write_new(&path, &bytes, args.force) {
            eprintln!("error: rank {}: {e}", world.rank);
            return ExitCode::from(1);
        }
        if lead {
            let others = if world.size > 1 {
                format!(
                    "; ranks 1-{} beside it as {}",
                    world.size - 1,
                    rank_trace_path(t, "N").display()
                )
            } else {
                String::new()
            };
            eprintln!(
                "trace    {} ({} spans){others}",
                t.display(),
                summary.spans.len()
            );
        }
    }
    // A stopped run's status tells the job scripts to requeue it (run contract).
    let status = match &summary.stopped {
        Some(_) => ExitCode::from(planc_runtime::train::stop::PREEMPTED),
        None => ExitCode::SUCCESS,
    };
    if !lead {
        return status;
    }
    if let Some(e) = metrics_error {
        eprintln!("warning: writing the metrics failed: {e}");
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).expect("the summary serialises")
        );
    } else {
        print!("{}", human(&summary));
    }
    if let Some(line) = stopped_line(&summary) {
        eprintln!("{line}");
    }
    status
}

/// What a stopped run says last: the step it reached and where its work is.
fn stopped_line(s: &Summary) -> Option<String> {
    let st = s.stopped.as_ref()?;
    let code = planc_runtime::train::stop::PREEMPTED;
    Some(match &st.checkpoint {
        Some(c) => format!(
            "stopped  by {} after step {}, saved in {}; `--resume` continues from it (exit {code}: preempted, requeue)",
            st.signal,
            st.step,
            c.display()
        ),
        None => format!(
            "stopped  by {} after step {}; nothing saved (no --save): a requeued run starts again from step 0 (exit {code})",
            st.signal, st.step
        ),
    })
}

fn step_line(m: &StepMetrics, total: u64) -> String {
    // grad_clip = 0 outside fp16 takes no norm (docs/spec/run.md).
    let norm = m
        .grad_norm
        .map_or_else(|| "-".to_string(), |n| format!("{n:.3}"));
    format!(
        "step {:>4}/{total}  loss {:.4}  grad_norm {norm}  lr {:.2e}  {:.1} ms  {:.0} tok/s  MFU {:.1} %  mem {}{}",
        m.step,
        m.loss,
        m.lr,
        m.step_s * 1e3,
        m.tokens_per_s,
        m.mfu * 100.0,
        gib(m.peak_bytes as f64),
        if m.skipped == Some(true) {
            "  (skipped: fp16 overflow, loss scale halved)"
        } else {
            ""
        }
    )
}

fn human(s: &Summary) -> String {
    let ratio = |m: f64, p: f64| {
        if p > 0.0 {
            format!("{:.2}×", m / p)
        } else {
            "-".into()
        }
    };
    let mem = &s.memory;
    let pm = &s.predicted_memory;
    let mut out = format!(
        "device   {} (predicted as the catalog's {})\n\
         model    {:.1} M parameters, {} tokens per step in {} micro-batches\n",
        s.device,
        s.catalog_gpu,
        s.params as f64 / 1e6,
        s.tokens_per_step,
        s.micro_batches
    );
    if let Some(p) = &s.profile {
        out += &format!("profile  {p}\n");
    }
    if let Some(r) = &s.resumed_from {
        out += &format!("resumed  from {}\n", r.display());
    }
    out += &startup_line(&s.startup);
    out += &format!(
        "time     step {:.1} ms measured (median after the first step), {:.1} ms predicted: {}\n",
        s.measured_step_s * 1e3,
        s.predicted_step_s * 1e3,
        ratio(s.measured_step_s, s.predicted_step_s)
    );
    out += &format!(
        "memory   peak {} measured, {} predicted: {}\n\
         \x20        {:<12} {:>11} {:>11}\n",
        gib(s.measured_peak_bytes as f64),
        gib(s.predicted_peak_bytes as f64),
        ratio(s.measured_peak_bytes as f64, s.predicted_peak_bytes as f64),
        "",
        "measured",
        "predicted"
    );
    for (name, m, p) in [
        ("weights", mem.weights as f64, pm.weights),
        ("gradients", mem.gradients as f64, pm.gradients),
        ("optimizer", mem.optimizer as f64, pm.optimizer),
        ("activations", mem.activations as f64, pm.activations),
        (
            "other",
            (mem.scratch as u64 + s.context_bytes) as f64,
            pm.other,
        ),
    ] {
        out += &format!("         {name:<12} {:>11} {:>11}\n", gib(m), gib(p));
    }
    if let Some(last) = s.steps.last() {
        // At the median step (the `time` line's): the last step is timed operation by
        // operation and launched kernel by kernel, slower than the replayed steps.
        let at = |x: f64| x * last.step_s / s.measured_step_s.max(1e-12);
        out += &format!(
            "speed    {:.0} tokens/s  {:.1} model TFLOP/s  MFU {:.1} %  (median step)\n",
            at(last.tokens_per_s),
            at(last.tflops_per_gpu),
            at(last.mfu) * 100.0
        );
    }
    out += &graphs_line(s);
    out += &by_kind(s);
    if s.skipped_steps > 0 {
        out += &format!(
            "skipped  {} step{} (fp16 overflow: loss scale halved, no update)\n",
            s.skipped_steps,
            if s.skipped_steps == 1 { "" } else { "s" }
        );
    }
    for c in &s.checkpoints {
        out += &format!("saved    {}\n", c.display());
    }
    out
}

/// How the steps were launched: how many replayed from a CUDA graph, or why none.
fn graphs_line(s: &Summary) -> String {
    let g = &s.graphs;
    match &g.off {
        Some(why) if g.replayed_steps == 0 => {
            format!("graphs   off ({why}): every step launched kernel by kernel\n")
        }
        _ => format!(
            "graphs   {} of {} steps replayed from one CUDA graph (the first and the timed \
             last launched kernel by kernel){}\n",
            g.replayed_steps,
            s.steps.len(),
            g.off
                .as_ref()
                .map(|w| format!("; then off: {w}"))
                .unwrap_or_default()
        ),
    }
}

/// The traced step by kind of work: measured, predicted, and (with a profile) what the
/// catalog's constants predicted, each with its measured/predicted ratio.
/// A start phase this long gets its line as it ends, not only in the summary.
const SLOW_START_S: f64 = 2.0;

/// A line for a start phase as it ends, when it was slow (`so_far`: the start until then).
fn slow_phase_line(p: &planc_runtime::train::metrics::StartPhase, so_far: f64) -> Option<String> {
    (p.seconds >= SLOW_START_S).then(|| {
        format!(
            "start    {}: {:.1} s ({so_far:.1} s so far)",
            p.phase, p.seconds
        )
    })
}

/// `start    4.2 s to the first step: GPU … 1.1 s, NCCL communicators 2.3 s, …`
fn startup_line(phases: &[planc_runtime::train::metrics::StartPhase]) -> String {
    if phases.is_empty() {
        return String::new();
    }
    let total: f64 = phases.iter().map(|p| p.seconds).sum();
    let parts: Vec<String> = phases
        .iter()
        .map(|p| format!("{} {:.1} s", p.phase, p.seconds))
        .collect();
    format!(
        "start    {total:.1} s to the first step (rank 0): {}\n",
        parts.join(", ")
    )
}

fn by_kind(s: &Summary) -> String {
    if s.by_kind.is_empty() {
        return String::new();
    }
    let ms = |x: f64| format!("{:.2} ms", x * 1e3);
    let ratio = |m: f64, p: f64| {
        if p > 0.0 {
            format!("{:.2}×", m / p)
        } else {
            "-".into()
        }
    };
    let constants = s.by_kind.iter().any(|r| r.predicted_constants_s.is_some());
    let mut out = format!(
        "by kind  last step{:>17} {:>11} {:>6}{}\n",
        "measured",
        if constants { "profile" } else { "predicted" },
        "",
        if constants {
            format!(" {:>11} {:>6}", "constants", "")
        } else {
            String::new()
        }
    );
    for r in &s.by_kind {
        out += &format!(
            "         {:<16} {:>11} {:>11} {:>6}",
            r.kind.label(),
            ms(r.measured_s),
            ms(r.predicted_s),
            ratio(r.measured_s, r.predicted_s)
        );
        if let Some(c) = r.predicted_constants_s {
            out += &format!(" {:>11} {:>6}", ms(c), ratio(r.measured_s, c));
        }
        out += "\n";
    }
    out
}

/// A span of the passes row: a forward or backward pass of a micro-batch, or the step's
/// optimizer work, named as `planc simulate --trace` names them (F0, B0, optimizer).
#[derive(Debug, PartialEq)]
struct PassSpan {
    name: String,
    cat: &'static str,
    start_s: f64,
    dur_s: f64,
    step: u64,
}

/// The operation spans of a traced run merged into passes: consecutive forward operations
/// (F, the k-th of the step), backward operations (their names say backward or recompute:
/// B), and the zeroing, reduction and update around them (optimizer). The output layer's
/// span, which runs the loss's backward too, counts as forward, as the simulator draws it.
fn pass_spans(spans: &[planc_runtime::train::metrics::Span]) -> Vec<PassSpan> {
    let cat_of = |name: &str| {
        if matches!(name, "zero gradients" | "gradient reduction" | "optimizer") {
            "optimizer"
        } else if name.contains("backward") || name.ends_with("recompute") {
            "backward"
        } else {
            "forward"
        }
    };
    let mut out: Vec<PassSpan> = Vec::new();
    let (mut forwards, mut backwards, mut step) = (0, 0, 0);
    for sp in spans {
        if sp.step != step {
            (forwards, backwards, step) = (0, 0, sp.step);
        }
        let cat = cat_of(&sp.name);
        if let Some(last) = out.last_mut() {
            if last.cat == cat && last.step == sp.step {
                last.dur_s = sp.start_s + sp.dur_s - last.start_s;
                continue;
            }
        }
        let name = match cat {
            "forward" => {
                forwards += 1;
                format!("F{}", forwards - 1)
            }
            "backward" => {
                backwards += 1;
                format!("B{}", backwards - 1)
            }
            _ => "optimizer".to_string(),
        };
        out.push(PassSpan {
            name,
            cat,
            start_s: sp.start_s,
            dur_s: sp.dur_s,
            step: sp.step,
        });
    }
    out
}

/// Where rank `rank` writes its trace when rank 0's goes to `path`: `run.json` →
/// `run.rank3.json` in the same folder (`rank` "N" names them all).
fn rank_trace_path(path: &Path, rank: impl std::fmt::Display) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or("trace".into(), |s| s.to_string_lossy());
    let name = match path.extension() {
        Some(ext) => format!("{stem}.rank{rank}.{}", ext.to_string_lossy()),
        None => format!("{stem}.rank{rank}"),
    };
    path.with_file_name(name)
}

/// The real run in the shape of `planc simulate --trace`: one process for the rank's GPU
/// (its id the rank, as the simulator's), one thread for its compute stream, an event per
/// operation.
fn chrome_trace(s: &Summary, plan: &Path, rank: usize) -> serde_json::Value {
    let pid = rank;
    let mut events = vec![
        json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": format!("rank {rank} (measured on {})", s.device)}}),
        json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "compute"}}),
    ];
    for sp in &s.spans {
        events.push(json!({
            "ph": "X",
            "name": sp.name,
            "cat": "measured",
            "pid": pid,
            "tid": 0,
            "ts": sp.start_s * 1e6,
            "dur": sp.dur_s * 1e6,
            "args": {"step": sp.step},
        }));
    }
    events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "passes (as planc simulate draws them)"}}));
    for p in pass_spans(&s.spans) {
        events.push(json!({
            "ph": "X",
            "name": p.name,
            "cat": p.cat,
            "pid": pid,
            "tid": 1,
            "ts": p.start_s * 1e6,
            "dur": p.dur_s * 1e6,
            "args": {"step": p.step},
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"plan": plan.display().to_string(), "source": "planc run"},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use planc_runtime::train::metrics::{Span, StartPhase};

    #[test]
    fn the_start_is_named_phase_by_phase() {
        let phases = [
            StartPhase {
                phase: "GPU (CUDA context, kernels, cuBLAS)",
                seconds: 1.14,
            },
            StartPhase {
                phase: "NCCL communicators",
                seconds: 2.31,
            },
        ];
        assert_eq!(
            startup_line(&phases),
            "start    3.5 s to the first step (rank 0): GPU (CUDA context, kernels, cuBLAS) \
             1.1 s, NCCL communicators 2.3 s\n"
        );
        assert_eq!(startup_line(&[]), "");
        // Only a slow phase is shown as it ends.
        assert_eq!(slow_phase_line(&phases[0], 1.14), None);
        assert_eq!(
            slow_phase_line(&phases[1], 3.45).as_deref(),
            Some("start    NCCL communicators: 2.3 s (3.5 s so far)")
        );
    }

    #[test]
    fn a_step_without_a_norm_says_so_on_its_line_and_as_json_null() {
        use planc_runtime::train::metrics::StepMetrics;
        let m = |grad_norm| StepMetrics {
            step: 3,
            loss: 2.5,
            grad_norm,
            lr: 3e-4,
            step_s: 0.031,
            tokens_per_s: 528_000.0,
            tflops_per_gpu: 450.0,
            mfu: 0.455,
            peak_bytes: 10 << 30,
            skipped: None,
            predicted_step_s: None,
            predicted_peak_bytes: None,
        };
        assert!(step_line(&m(Some(0.8125)), 10).contains("grad_norm 0.812 "));
        // grad_clip = 0 outside fp16: no norm taken (docs/spec/run.md).
        assert!(step_line(&m(None), 10).contains("grad_norm -  lr"));
        let json = serde_json::to_value(m(None)).unwrap();
        // Present and null: the metrics line keeps its fields whatever the step took.
        assert_eq!(
            json.get("grad_norm"),
            Some(&serde_json::Value::Null),
            "{json}"
        );
        assert_eq!(
            serde_json::to_value(m(Some(1.5))).unwrap()["grad_norm"],
            1.5
        );
    }

    #[test]
    fn every_rank_traces_beside_rank_zero() {
        use super::rank_trace_path;
        use std::path::Path;
        assert_eq!(
            rank_trace_path(Path::new("out/run.json"), 3),
            Path::new("out/run.rank3.json")
        );
        assert_eq!(
            rank_trace_path(Path::new("trace"), 1),
            Path::new("trace.rank1")
        );
        assert_eq!(
            rank_trace_path(Path::new("run.json"), "N"),
            Path::new("run.rankN.json")
        );
    }

    #[test]
    fn operation_spans_merge_into_the_passes_the_simulator_draws() {
        let names = [
            "zero gradients",
            "F0 embedding",
            "L0 qkv",
            "F0 loss head",
            "L0 qkv backward",
            "L0 recompute",
            "L0 attention norm backward",
            "B0 embedding backward",
            "F1 embedding",
            "L0 qkv",
            "L0 qkv backward",
            "gradient reduction",
            "optimizer",
        ];
        let spans: Vec<Span> = names
            .iter()
            .enumerate()
            .map(|(i, n)| Span {
                step: 1,
                name: n.to_string(),
                kind: None,
                start_s: i as f64,
                dur_s: 1.0,
            })
            .collect();
        let got: Vec<(String, f64, f64)> = pass_spans(&spans)
            .into_iter()
            .map(|p| (p.name, p.start_s, p.dur_s))
            .collect();
        let want = [
            ("optimizer", 0.0, 1.0),
            ("F0", 1.0, 3.0),
            ("B0", 4.0, 4.0),
            ("F1", 8.0, 2.0),
            ("B1", 10.0, 1.0),
            ("optimizer", 11.0, 2.0),
        ];
        assert_eq!(got, want.map(|(n, a, d)| (n.to_string(), a, d)).to_vec(),);
    }
}
