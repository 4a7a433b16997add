//! `planc check` as a library call: load, resolve, choose the layout, validate, cost.
//!
//! The command line, tests, benchmarks and (later) the LSP all go through [`check_file`] /
//! [`check_source`], so that every front end reports exactly the same thing.

use std::path::Path;

use planc_lang::codes;
use planc_lang::units::{format_quantity, Dimension};
use planc_lang::{Diagnostic, Severity};

use crate::cost::{estimate, Estimate};
use crate::plan::{
    Attention, AttentionKernel, Framework, Hole, Kernels, Parallel, Plan, PlanSpec, Recompute,
};
use crate::report::{self, Report};
use crate::solve::{self, Solution};
use crate::source::{load_plan, FileLoader, MemoryLoader, SourceMap};
use crate::validate::validate;

pub struct Checked {
    pub sources: SourceMap,
    pub spec: Option<PlanSpec>,
    pub plan: Option<Plan>,
    pub estimate: Option<Estimate>,
    pub diagnostics: Vec<Diagnostic>,
    /// When the plan had holes: the search that filled them (ranked candidates).
    pub solution: Option<Solution>,
}

impl Checked {
    pub fn ok(&self) -> bool {
        !self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// Replaces the filled-in layout with `parallel` (another candidate of the solution,
    /// chosen after simulation) and redoes what depends on it: validation, cost, memory
    /// checks and the note that says what the holes were filled with.
    pub fn adopt(&mut self, parallel: Parallel) {
        if let Some(spec) = &mut self.spec {
            spec.cluster = spec.cluster_for(&parallel);
        }
        let Some(spec) = &self.spec else { return };
        self.diagnostics.retain(|d| {
            !(d.code.starts_with("P03") || d.code.starts_with("P04") || d.code == codes::P0502.id)
        });
        let plan = spec.plan_with(parallel.clone());
        self.diagnostics.extend(validate(spec, &parallel));
        let est = estimate(&plan);
        self.diagnostics.extend(memory_checks(spec, &plan, &est));
        let open = holes(spec);
        if !open.is_empty() {
            let valid = self.solution.as_ref().map_or(1, |s| s.ranked.len());
            self.diagnostics
                .push(holes_note(spec, &open, &parallel, valid));
        }
        self.plan = Some(plan);
        self.estimate = Some(est);
        self.diagnostics
            .sort_by_key(|d| std::cmp::Reverse(d.severity));
    }

    pub fn report(&self) -> Report {
        let costed = match (&self.plan, &self.estimate) {
            (Some(p), Some(e)) => Some((p, e)),
            _ => None,
        };
        report::build(&self.diagnostics, &self.sources, costed)
    }
}

/// Checks the plan at `path`. `Err` only when the root file cannot be read.
pub fn check_file(path: &Path, loader: &dyn FileLoader) -> std::io::Result<Checked> {
    check_file_with_progress(path, loader, &|_, _| {})
}

/// [`check_file`], reporting the progress of a hole search as (done, total) layouts.
pub fn check_file_with_progress(
    path: &Path,
    loader: &dyn FileLoader,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> std::io::Result<Checked> {
    check_file_with(path, loader, &[], progress)
}

/// [`check_file_with_progress`] with command-line settings (`--set PATH=VALUE`, see
/// [`crate::settings`]) applied over the plan, the last one winning.
pub fn check_file_with(
    path: &Path,
    loader: &dyn FileLoader,
    sets: &[String],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> std::io::Result<Checked> {
    let mut sources = SourceMap::default();
    let (mut order, mut diagnostics) = load_plan(path, loader, &mut sources)?;
    let root = order.last().copied().unwrap_or_default();
    let (set_files, set_diags) = crate::settings::add(&mut sources, root, sets);
    order.extend(set_files);
    diagnostics.extend(set_diags);
    let (spec, resolve_diags) = crate::resolve::resolve_rooted(&sources, &order, root);
    diagnostics.extend(resolve_diags);
    let mut checked = Checked {
        sources,
        spec: None,
        plan: None,
        estimate: None,
        diagnostics,
        solution: None,
    };
    if checked.diagnostics.iter().any(Diagnostic::is_error) {
        return Ok(checked);
    }
    let Some(mut spec) = spec else {
        return Ok(checked);
    };
    if let Some(d) = attach_profile(&mut spec, &checked.sources) {
        checked.diagnostics.push(d);
        return Ok(checked);
    }
    attach_shipped_profiles(&mut spec);
    checked.diagnostics.extend(device_attention(&mut spec));
    checked.diagnostics.extend(eager_attention(&mut spec));
    checked.diagnostics.extend(planc_kernels(&spec));
    checked.diagnostics.extend(attention_kernel_unused(&spec));
    checked.diagnostics.extend(framework_runs_model(&spec));
    checked.diagnostics.extend(crate::nccl_env::lint_env(&spec));
    checked
        .diagnostics
        .extend(crate::token_file::lint(&spec, &checked.sources));
    if let Some(parallel) = choose_layout(
        &spec,
        &mut checked.diagnostics,
        &mut checked.solution,
        progress,
    ) {
        spec.cluster = spec.cluster_for(&parallel);
        let layout_diags = validate(&spec, &parallel);
        let layout_ok = !layout_diags.iter().any(Diagnostic::is_error);
        checked.diagnostics.extend(layout_diags);
        if layout_ok {
            let mut plan = spec.plan_with(parallel);
            crate::cost::power::settle(&mut plan);
            let est = estimate(&plan);
            checked
                .diagnostics
                .extend(memory_checks(&spec, &plan, &est));
            checked.plan = Some(plan);
            checked.estimate = Some(est);
        }
    }
    checked.spec = Some(spec);
    checked
        .diagnostics
        .sort_by_key(|d| std::cmp::Reverse(d.severity));
    Ok(checked)
}

/// Fused (flash) attention needs Ampere or newer: on a cluster with older GPUs the plan is
/// priced, and launched, with standard attention, so memory, time and the emitted flags
/// agree. Said (P0325) where the plan wrote `attention = flash`; the default is quietly the
/// one the device can run.
fn device_attention(spec: &mut PlanSpec) -> Vec<Diagnostic> {
    if spec.train.attention != Attention::Flash {
        return Vec::new();
    }
    let mut old: Vec<&str> = spec
        .cluster
        .groups
        .iter()
        .filter(|g| !g.gpu.has_fused_attention())
        .map(|g| g.gpu.name.as_str())
        .collect();
    old.dedup();
    if old.is_empty() {
        return Vec::new();
    }
    let names = old.join(" and ");
    let written = spec.origins.written("train", "attention");
    let (f, s) = spec.origins.of("train", "attention").unwrap_or_default();
    spec.train.attention = Attention::Standard;
    if !written {
        return Vec::new();
    }
    vec![Diagnostic::new(
        codes::P0325,
        format!("{names} cannot run fused (flash) attention: priced as standard attention"),
    )
    .at(f, s, "no fused attention kernel before Ampere")
    .help("write `attention = standard` (the s×s scores are stored: recompute = selective drops them), or use Ampere or newer GPUs")]
}

/// Megatron-LM's unfused path has no fused attention (`DotProductAttention`, the local
/// spec's core attention, materialises the scores): a plan of `kernels = eager` under
/// `megatron` is priced with standard attention, as it runs. Said (P0327) where the plan
/// wrote `attention = flash`.
fn eager_attention(spec: &mut PlanSpec) -> Option<Diagnostic> {
    let eager = spec.job.as_ref().and_then(|j| j.kernels) == Some(Kernels::Eager);
    if spec.train.attention != Attention::Flash || spec.framework() != Framework::Megatron || !eager
    {
        return None;
    }
    spec.train.attention = Attention::Standard;
    if !spec.origins.written("train", "attention") {
        return None;
    }
    let (f, s) = spec.origins.of("train", "attention").unwrap_or_default();
    Some(
        Diagnostic::new(
            codes::P0327,
            "Megatron-LM's unfused path has no fused attention: priced as standard attention",
        )
        .at(f, s, "`--transformer-impl local` runs `DotProductAttention`")
        .help("write `attention = standard`, or `job.kernels = fused` where Transformer Engine is installed"),
    )
}

/// `kernels = eager` under `planc`, whose runtime has one set of kernels (P0332).
fn planc_kernels(spec: &PlanSpec) -> Option<Diagnostic> {
    let job = spec.job.as_ref()?;
    if job.framework != Framework::Planc || job.kernels != Some(Kernels::Eager) {
        return None;
    }
    let (f, s) = spec.origins.of("job", "kernels").unwrap_or_default();
    Some(
        Diagnostic::new(
            codes::P0332,
            "`planc run` runs its own kernels: `kernels = eager` has no effect",
        )
        .at(f, s, "priced with planc's kernels")
        .help("remove `kernels`, or name the framework whose unfused path runs the plan"),
    )
}

/// `job.attention_kernel` where it does not describe what runs (P0333): under `planc`, where
/// no fused attention runs, and `triton` where planc launches the framework's own code.
fn attention_kernel_unused(spec: &PlanSpec) -> Option<Diagnostic> {
    let job = spec.job.as_ref()?;
    let kernel = job.attention_kernel?;
    let (message, label, help) = if job.framework == Framework::Planc {
        (
            "`planc run` runs its own attention: `attention_kernel` has no effect".to_string(),
            "priced with planc's kernels",
            "remove `attention_kernel`",
        )
    } else if spec.train.attention != Attention::Flash {
        (
            format!(
                "no fused attention runs: `attention_kernel = {}` has no effect",
                kernel.as_str()
            ),
            "the attention is priced as standard",
            "remove `attention_kernel`, or write `attention = flash` where a fused kernel runs",
        )
    } else if kernel == AttentionKernel::Triton && job.entrypoint.is_none() {
        let runs = match job.framework {
            Framework::Megatron => "Megatron-LM runs Transformer Engine's attention or its own",
            _ => "the script planc launches runs PyTorch's SDPA",
        };
        (
            "the code planc launches does not run FlashAttention in Triton".to_string(),
            runs,
            "name the script that runs it (`job.entrypoint`), or remove `attention_kernel`",
        )
    } else {
        return None;
    };
    let (f, s) = spec
        .origins
        .of("job", "attention_kernel")
        .unwrap_or_default();
    Some(
        Diagnostic::new(codes::P0333, message)
            .at(f, s, label)
            .help(help),
    )
}

/// What the plan's framework has no code for in its model or training method (P0331), at
/// the attribute: the plan is still priced, `emit` and `planc run` refuse it.
fn framework_runs_model(spec: &PlanSpec) -> Option<Diagnostic> {
    let l = crate::capability::model_limit(spec)?;
    // Where the value came from: the attribute, else the preset that set it.
    let from = if !spec.origins.written(l.block, l.attr) && spec.origins.written(l.block, "preset")
    {
        "preset"
    } else {
        l.attr
    };
    let (f, s) = spec.origins.of(l.block, from).unwrap_or_default();
    Some(
        Diagnostic::new(
            codes::P0331,
            format!(
                "job.framework = {} does not run this {}",
                l.framework,
                match (l.block, l.attr) {
                    ("train", "method") => "training method",
                    ("train", _) => "training setting",
                    _ => "model",
                }
            ),
        )
        .at(f, s, l.reason)
        .help(if l.block == "train" && l.attr != "method" {
            format!(
                "the plan is priced as written, but `planc run` refuses it: set `{}.{} = 0` to \
                 run it with planc",
                l.block, l.attr
            )
        } else if l.block == "train" {
            // No launch planc writes carries a fine-tuning method (`capability::method_limit`).
            format!(
                "the plan is priced as written, but {} refuses it: launch the fine-tuning with \
                 your own tooling, or train every weight (`{}.{} = full`)",
                if l.framework == "planc" {
                    "`planc run`"
                } else {
                    "`planc emit`"
                },
                l.block,
                l.attr
            )
        } else {
            format!(
                "the plan is priced as written, but {} refuses it: change `{}.{}`, or the framework",
                if l.framework == "planc" {
                    "`planc run`"
                } else {
                    "`planc emit`"
                },
                l.block,
                l.attr
            )
        }),
    )
}

/// Checks plan text held in memory (tests, fuzzing, editors).
pub fn check_source(name: &str, text: &str) -> Checked {
    check_bytes(name, text.as_bytes())
}

/// Checks plan bytes held in memory, which need not be UTF-8 (hostile input, fuzzing).
pub fn check_bytes(name: &str, bytes: &[u8]) -> Checked {
    let mut loader = MemoryLoader::default();
    loader.insert(Path::new(name), bytes.to_vec());
    check_file(Path::new(name), &loader).expect("the in-memory file exists")
}

/// Fills `dp = auto` from the world size; other holes are for `planc solve`.
fn choose_layout(
    spec: &PlanSpec,
    diags: &mut Vec<Diagnostic>,
    solution: &mut Option<Solution>,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Option<Parallel> {
    let ps = &spec.parallel;
    let holes = holes(spec);
    if !holes.is_empty() {
        return fill_holes(spec, &holes, diags, solution, progress);
    }
    let fixed = |h: &Hole<u64>| h.fixed().expect("no holes left");
    let (tp, pp, cp) = (fixed(&ps.tp), fixed(&ps.pp), fixed(&ps.cp));
    let world = spec.cluster.world_size();
    let dp = match &ps.dp {
        Hole::Fixed(d) => *d,
        _ => {
            let denom = tp.saturating_mul(pp).saturating_mul(cp);
            if !world.is_multiple_of(denom) {
                let (f, s) = spec.origins.of("parallel", "tp").unwrap_or_default();
                diags.push(
                    Diagnostic::new(codes::P0301, format!("tp × pp × cp = {denom} does not divide the {world} GPUs, so `dp = auto` has no value"))
                        .at(f, s, "the layout does not tile the cluster")
                        .help(format!("choose tp, pp and cp whose product divides {world}")),
                );
                return None;
            }
            let dp = world / denom;
            if spec.origins.written("parallel", "dp") {
                let (f, s) = spec.origins.of("parallel", "dp").unwrap_or_default();
                diags.push(
                    Diagnostic::new(codes::P0501, format!("dp = auto resolved to {dp}"))
                        .at(f, s, format!("dp = {dp}"))
                        .severity(Severity::Note),
                );
            }
            dp
        }
    };
    Some(Parallel {
        tp,
        pp,
        dp,
        cp,
        ep: fixed(&ps.ep),
        vpp: fixed(&ps.vpp),
        micro_batch: fixed(&ps.micro_batch),
        schedule: ps.schedule.fixed().expect("no holes left"),
        sequence_parallel: ps.sequence_parallel.fixed().expect("no holes left"),
        zero: fixed(&ps.zero),
        recompute: ps.recompute.fixed().expect("no holes left"),
        offload: ps.offload.fixed().expect("no holes left"),
        first_stage_layers: ps.first_stage_layers,
        last_stage_layers: ps.last_stage_layers,
        overlap_grad_reduce: ps.overlap_grad_reduce,
        overlap_p2p: ps.overlap_p2p,
        overlap_tp_backward: ps.overlap_tp_backward,
        grad_accumulation_fusion: ps.grad_accumulation_fusion,
        scatter_gather_p2p: ps.scatter_gather_p2p,
        grad_dtype: ps.grad_dtype,
        optimizer_dtype: ps.optimizer_dtype,
        reduce_dtype: ps.reduce_dtype,
    })
}

/// Fills `auto` and candidate lists with the best layout of `planc solve`, and says so
/// where the first hole is written; explains with P0801 when no layout is valid.
fn fill_holes(
    spec: &PlanSpec,
    holes: &[&str],
    diags: &mut Vec<Diagnostic>,
    solution: &mut Option<Solution>,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Option<Parallel> {
    let found = solve::solve(spec, progress);
    let best = found.best().map(|c| c.plan.parallel.clone());
    match &best {
        Some(p) => diags.push(holes_note(spec, holes, p, found.ranked.len())),
        None if found.refused => diags.push(space_too_large(spec, found.space_size)),
        None => {
            if let Some(e) = &found.explanation {
                diags.push(no_layout(spec, e));
            }
        }
    }
    *solution = Some(found);
    best
}

/// The attributes the plan leaves open: `cluster.nodes` as a list, and the `parallel`
/// ones (`auto` or candidates; `dp = auto` alone is derived, not searched).
pub fn holes(spec: &PlanSpec) -> Vec<&'static str> {
    let ps = &spec.parallel;
    let mut out: Vec<&'static str> = [
        ("nodes", !spec.node_candidates.is_empty()),
        ("tp", ps.tp.is_hole()),
        ("pp", ps.pp.is_hole()),
        ("cp", ps.cp.is_hole()),
        ("ep", ps.ep.is_hole()),
        ("vpp", ps.vpp.is_hole()),
        ("micro_batch", ps.micro_batch.is_hole()),
        ("schedule", ps.schedule.is_hole()),
        ("sequence_parallel", ps.sequence_parallel.is_hole()),
        ("zero", ps.zero.is_hole()),
        ("recompute", ps.recompute.is_hole()),
        ("offload", ps.offload.is_hole()),
        ("first_stage_layers", ps.auto_first_stage_layers),
        ("last_stage_layers", ps.auto_last_stage_layers),
        ("dp", matches!(ps.dp, Hole::Candidates(_))),
    ]
    .into_iter()
    .filter(|(_, h)| *h)
    .map(|(n, _)| n)
    .collect();
    if !out.is_empty() && ps.dp == Hole::Auto && !out.contains(&"dp") {
        let after = out
            .iter()
            .take_while(|h| matches!(**h, "nodes" | "tp" | "pp"))
            .count();
        out.insert(after, "dp");
    }
    out
}

/// The P0502 note naming what the holes were filled with.
pub fn holes_note(spec: &PlanSpec, holes: &[&str], p: &Parallel, valid: usize) -> Diagnostic {
    let value = |h: &str| -> String {
        match h {
            "tp" => p.tp.to_string(),
            "pp" => p.pp.to_string(),
            "dp" => p.dp.to_string(),
            "cp" => p.cp.to_string(),
            "ep" => p.ep.to_string(),
            "vpp" => p.vpp.to_string(),
            "micro_batch" => p.micro_batch.to_string(),
            "schedule" => p.schedule.to_string(),
            "sequence_parallel" => p.sequence_parallel.to_string(),
            "zero" => p.zero.to_string(),
            "recompute" => p.recompute.to_string(),
            "first_stage_layers" => p.stage_layers(spec.model.layers, 0).to_string(),
            "last_stage_layers" => p
                .stage_layers(spec.model.layers, p.pp.saturating_sub(1))
                .to_string(),
            "nodes" => spec.cluster_for(p).nodes().to_string(),
            _ => p.offload.to_string(),
        }
    };
    let filled: Vec<String> = holes
        .iter()
        .map(|h| format!("{h} = {}", value(h)))
        .collect();
    let place = |h: &str| {
        let block = if h == "nodes" { "cluster" } else { "parallel" };
        spec.origins.of(block, h).unwrap_or_default()
    };
    let (f, s) = place(holes[0]);
    let mut d = Diagnostic::new(
        codes::P0502,
        format!("holes filled by planc solve: {}", filled.join(", ")),
    )
    .at(f, s, format!("{} = {}", holes[0], value(holes[0])))
    .severity(Severity::Note)
    .note(format!(
        "the best of {valid} valid layouts; `planc solve` ranks the alternatives"
    ));
    for h in &holes[1..] {
        let (f, s) = place(h);
        d = d.also(f, s, format!("{h} = {}", value(h)));
    }
    d
}

/// P0802 at the hole with the most candidates.
fn space_too_large(spec: &PlanSpec, size: u64) -> Diagnostic {
    let space = solve::space::Space::of(spec);
    let (name, n) = space
        .domains()
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .unwrap_or(("", 0));
    let (f, s) = spec.origins.of("parallel", name).unwrap_or_default();
    let size = if size == u64::MAX {
        "more than 2^64".to_string()
    } else {
        size.to_string()
    };
    Diagnostic::new(
        codes::P0802,
        format!(
            "the plan leaves {size} layouts to search, more than the {} planc searches",
            solve::MAX_SPACE
        ),
    )
    .at(f, s, format!("{n} values for `{name}`"))
    .help(format!(
        "list fewer candidates for `{name}` (or write its value), or write some of the other `auto` attributes"
    ))
}

/// P0801: the conflicting rules as labels, the smallest fixes as help.
pub fn no_layout(spec: &PlanSpec, e: &solve::explain::Explanation) -> Diagnostic {
    let sentences: Vec<&str> = e.conflicts.iter().map(|c| c.sentence.as_str()).collect();
    let mut d = Diagnostic::new(
        codes::P0801,
        format!("no layout satisfies this plan: {}", sentences.join("; ")),
    );
    let mut first = true;
    for c in &e.conflicts {
        for (k, &(f, s)) in c.places.iter().enumerate() {
            // The sentence once per conflict; its other places are only underlined.
            let label = if k == 0 {
                c.sentence.clone()
            } else {
                String::new()
            };
            d = if first {
                first = false;
                d.at(f, s, label)
            } else {
                d.also(f, s, label)
            };
        }
    }
    if first {
        let (f, s) = spec.origins.of("parallel", "").unwrap_or_default();
        d = d.at(f, s, "no valid layout");
    }
    let mut suggestions = e.suggestions.iter();
    d = match suggestions.next() {
        Some(s) => d.help(s.clone()),
        None => d.help("give the solver more room: more GPUs, `recompute = full`, a smaller micro_batch, or `auto` for a fixed attribute"),
    };
    for s in suggestions {
        d = d.note(format!("or: {s}"));
    }
    d
}

/// Over capacity is an error; inside the headroom a warning. The help names the change
/// that frees the most memory on the stage that overflows.
fn memory_checks(spec: &PlanSpec, plan: &Plan, est: &Estimate) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let headroom = spec.search.memory_headroom;
    let Some(worst) = est.stages.iter().max_by(|a, b| {
        (a.memory.total_bytes / a.capacity_bytes)
            .total_cmp(&(b.memory.total_bytes / b.capacity_bytes))
    }) else {
        return out;
    };
    let m = &worst.memory;
    let cap = worst.capacity_bytes;
    let gib = |x: f64| format_quantity(x, Dimension::Bytes);
    let breakdown = format!(
        "weights {}, gradients {}, optimizer {}, activations {}, other {}",
        gib(m.weights_bytes),
        gib(m.gradients_bytes),
        gib(m.optimizer_bytes),
        gib(m.activations_bytes),
        gib(m.other_bytes)
    );
    let (file, span) = spec.origins.of("parallel", "").unwrap_or_default();
    if m.total_bytes > cap {
        out.push(
            Diagnostic::new(
                codes::P0401,
                format!(
                    "stage {} needs {} per GPU but {} has {}",
                    m.stage,
                    gib(m.total_bytes),
                    worst.gpu,
                    gib(cap)
                ),
            )
            .at(file, span, "this layout does not fit")
            .note(breakdown)
            .help(memory_advice(plan, m)),
        );
    } else if m.total_bytes > cap * (1.0 - headroom) {
        out.push(
            Diagnostic::new(
                codes::P0402,
                format!(
                    "stage {} needs {} of {}'s {}, inside the {:.0} % headroom",
                    m.stage,
                    gib(m.total_bytes),
                    worst.gpu,
                    gib(cap),
                    headroom * 100.0
                ),
            )
            .at(file, span, "little memory to spare")
            .note(breakdown)
            .help(memory_advice(plan, m)),
        );
    }
    out
}

/// The P0401/P0402 hint: the largest term of the stage's memory, named, and what shrinks
/// it in this layout.
fn memory_advice(plan: &Plan, m: &crate::cost::memory::StageMemory) -> String {
    let p = &plan.parallel;
    let sharded = p.dp * p.cp > 1;
    let terms = [
        ("weights", m.weights_bytes),
        ("gradients", m.gradients_bytes),
        ("optimizer state", m.optimizer_bytes),
        ("activations", m.activations_bytes),
    ];
    let (largest, _) = terms
        .iter()
        .copied()
        .fold(("", f64::MIN), |a, t| if t.1 > a.1 { t } else { a });
    match largest {
        "activations" => match p.recompute {
            Recompute::None => "activations dominate: set `recompute = selective` (or `full`), or lower micro_batch".into(),
            Recompute::Selective => "activations dominate: set `recompute = full`, lower micro_batch, or raise tp/pp".into(),
            Recompute::Full => "activations dominate: lower micro_batch or seq_len, or raise tp, pp or cp".into(),
        },
        "optimizer state" if p.zero < 1 && sharded => {
            "optimizer state dominates: set `zero = 1` to shard it over data-parallel ranks".into()
        }
        "optimizer state" if p.offload == crate::plan::Offload::None => {
            "optimizer state dominates: shard it over more data-parallel ranks (more GPUs), raise tp or pp, or set `offload = optimizer` (or `optimizer_dtype = bf16` where the framework keeps it so)".into()
        }
        "gradients" if p.zero < 2 && sharded => {
            "gradients dominate: set `zero = 2`, or raise tp or pp (or `grad_dtype = bf16` where the framework keeps them so)".into()
        }
        "weights" if p.zero < 3 && sharded => {
            "weights dominate: set `zero = 3`, or raise tp or pp".into()
        }
        _ => "the model's state does not fit: raise tp or pp (or use more GPUs)".into(),
    }
}

/// Loads `cluster.profile` (relative to the file that names it) onto the groups of the GPU
/// it was measured on; an unreadable profile, or one of another GPU, is P0104.
fn attach_profile(spec: &mut PlanSpec, sources: &SourceMap) -> Option<Diagnostic> {
    let (path, file, span) = spec.cluster.profile.clone()?;
    let base = sources
        .get(file)
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let full = base.join(&path);
    let fail = |msg: String| {
        let mut d = Diagnostic::new(codes::P0104, msg).at(file, span, "this profile");
        d.with_help("measure the machine with `planc calibrate -o FILE`");
        Some(d)
    };
    let profile = match crate::profile::Profile::load(&full) {
        Ok(p) => std::sync::Arc::new(p),
        Err(e) => return fail(e),
    };
    let measured = profile.provenance.catalog_gpu.clone();
    let mut used = false;
    for g in &mut spec.cluster.groups {
        if g.gpu.name == measured {
            g.gpu.profile = Some(profile.clone());
            used = true;
        }
    }
    if !used {
        let gpus: Vec<&str> = spec
            .cluster
            .groups
            .iter()
            .map(|g| g.gpu.name.as_str())
            .collect();
        return fail(format!(
            "`{path}` was measured on {measured}; the plan's GPUs are {}",
            gpus.join(", ")
        ));
    }
    None
}

/// A plan that trains with planc's own kernels and names no profile is priced from the
/// profile planc ships for its GPU and precision, where there is one: the catalog's
/// constants describe other frameworks' kernels (a GPT 6.6B run on an H200 priced by them
/// was 1.35x off; by the shipped profile within 3 %). The report's `profile` note names it.
pub fn attach_shipped_profiles(spec: &mut PlanSpec) {
    if spec.cluster.profile.is_some() || spec.framework() != crate::plan::Framework::Planc {
        return;
    }
    let precision = spec.train.precision.as_str();
    for g in &mut spec.cluster.groups {
        if g.gpu.profile.is_none() {
            g.gpu.profile = crate::profile::shipped(&g.gpu.name, precision);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::FsLoader;

    #[test]
    fn plancs_own_kernels_without_a_profile_are_priced_from_the_shipped_one() {
        let plan = |gpu: &str, job: &str| {
            let text = format!(
                "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = {gpu} }}
                 model m {{ layers = 4, hidden = 1024, heads = 16, vocab = 32000, seq_len = 1024 }}
                 train {{ global_batch = 4, precision = bf16, attention = flash }}
                 parallel {{ micro_batch = 4 }}
                 {job}"
            );
            let c = check_source("t.tp", &text);
            assert!(c.ok(), "{:#?}", c.diagnostics);
            c.plan.unwrap()
        };
        let planc = plan("H200_SXM_141GB", "job j { framework = planc }");
        let note = crate::report::profile_note(&planc).expect("a profile note");
        assert!(
            note.contains("shipped profile h200_sxm_141gb.bf16.toml"),
            "{note}"
        );
        // Another framework's kernels, or a GPU planc ships no profile of: the constants.
        assert!(crate::report::profile_note(&plan("H200_SXM_141GB", "")).is_none());
        assert!(
            crate::report::profile_note(&plan("A100_SXM_80GB", "job j { framework = planc }"))
                .is_none()
        );
    }

    #[test]
    fn text_in_memory_may_be_named_by_any_spelling_of_a_path() {
        // Editors hand over paths such as `dir/../plan.tp`; the loader used to look the
        // file up under its cleaned spelling and panic when it was stored under another.
        for name in ["dir/../t.tp", "./t.tp", "a/b/../../t.tp"] {
            let c = check_source(name, "model m { preset = \"gpt2-124m\" }\n");
            assert_eq!(c.sources.files.len(), 1, "{name}: {:?}", c.diagnostics);
        }
    }

    #[test]
    fn the_gpt3_example_checks() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpt3-175b.tp");
        let c = check_file(&root, &FsLoader).unwrap();
        assert!(c.ok(), "{:?}", c.diagnostics);
        let plan = c.plan.unwrap();
        assert_eq!(plan.parallel.dp, 8);
        let e = c.estimate.unwrap();
        assert!(e.mfu > 0.2 && e.mfu < 0.7, "{}", e.mfu);
    }

    #[test]
    fn the_out_of_memory_hint_names_the_largest_term() {
        // Nemotron-4 340B as NeMo's table ran it on 128 H100s (dp 2): with fp32 gradients
        // the optimizer state (12 bytes a parameter over 2 ranks) is the largest term, not
        // the gradients, which ZeRO-2 would not shrink enough.
        let text = |grad: &str| {
            format!(
                "cluster c {{ nodes = 16, gpus_per_node = 8, gpu = H100_SXM_80GB
                     inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s }} }}
                 model m {{ layers = 96, hidden = 18432, heads = 96, kv_heads = 8, ffn_hidden = 73728,
                            vocab = 256000, seq_len = 4096, mlp = gelu, bias = false }}
                 train {{ global_batch = 32, precision = bf16, optimizer = adam }}
                 parallel {{ tp = 8, pp = 8, vpp = 12, dp = 2, micro_batch = 1, schedule = interleaved,
                             sequence_parallel = true, zero = 1, recompute = selective, grad_dtype = {grad} }}"
            )
        };
        let c = check_source("t.tp", &text("fp32"));
        let oom = c
            .diagnostics
            .iter()
            .find(|d| d.code == codes::P0401.id)
            .expect("refused");
        let help = format!("{:?}", oom.help);
        assert!(help.contains("optimizer state dominates"), "{help}");
        // NeMo keeps them in bf16: 10.75 GiB less on the first stage.
        let bf16 = check_source("t.tp", &text("bf16"));
        let fp32 = c.estimate.as_ref().unwrap().stages[0].memory.total_bytes;
        let half = bf16.estimate.as_ref().unwrap().stages[0].memory.total_bytes;
        assert!((fp32 - half) / (1u64 << 30) as f64 > 10.0);
    }
}
