//! The training loop: the plan's step program executed on the engine, the learning-rate
//! schedule, clipping and fp16 loss scaling, checkpoints, metrics and the prediction the
//! run is compared with.
//!
//! The step is the simulator's per-rank program for this plan (`planc_simulator::lower`):
//! the runtime walks rank 0's instructions (forward and backward passes in the schedule's
//! order, then the optimizer) instead of deriving its own order, so what `planc simulate`
//! prices is what runs. On one GPU the program has no messages or collectives.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use planc_compiler::cost::kinds::WorkKind;
use planc_compiler::plan::{Framework, LrSchedule, Plan, Precision, RunSettings};
use planc_simulator::program::{CollectiveOp, Instr, Payload};
use planc_simulator::schedule::Pass;
use planc_simulator::schedule::ScheduleKind;
use serde::Serialize;

use super::engine::HostBatch;
use super::engine::{Dir, Engine, MemoryPlan, Shape};
use super::model::{Dims, Params, Stage, TpMap};
use super::stop::{self, Verdict};
use super::{checkpoint, data, predict};
use crate::device::cuda::Buf;
use crate::device::cuda::Gpu;
use crate::device::dist::{self, Comm, World};
use crate::device::trail;
use crate::error::RunError;

/// What the command line adds to the plan.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub steps: Option<u64>,
    pub save: Option<PathBuf>,
    pub save_every: Option<u64>,
    pub resume: Option<PathBuf>,
    pub layers: Option<usize>,
    /// The folder of the plan file (the token file is relative to it).
    pub plan_dir: PathBuf,
    /// A digest of the plan's text, kept in checkpoints.
    pub plan_hash: String,
    /// Record per-operation times for a trace.
    pub trace: bool,
}

/// One step's figures: the contract's metrics line.
#[derive(Clone, Debug, Serialize)]
pub struct StepMetrics {
    pub step: u64,
    pub loss: f64,
    pub grad_norm: f64,
    pub lr: f64,
    pub step_s: f64,
    pub tokens_per_s: f64,
    pub tflops_per_gpu: f64,
    pub mfu: f64,
    pub peak_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<bool>,
    /// On the last step only: planc's prediction for this plan on this device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_step_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_peak_bytes: Option<u64>,
}

/// A span of the real run, for the trace.
#[derive(Clone, Debug, Serialize)]
pub struct Span {
    pub step: u64,
    pub name: String,
    pub start_s: f64,
    pub dur_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub device: String,
    pub catalog_gpu: String,
    /// Which predicted figures came from a measured device profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub steps: Vec<StepMetrics>,
    /// Median step time over the steps after the first (which includes warm-up).
    pub measured_step_s: f64,
    pub predicted_step_s: f64,
    pub measured_peak_bytes: u64,
    pub predicted_peak_bytes: u64,
    pub memory: MemoryPlan,
    pub predicted_memory: predict::PredictedMemory,
    /// Device memory the CUDA context and libraries hold outside planc's buffers.
    pub context_bytes: u64,
    pub params: usize,
    pub tokens_per_step: u64,
    pub micro_batches: u64,
    pub checkpoints: Vec<PathBuf>,
    pub resumed_from: Option<PathBuf>,
    /// fp16 steps skipped because the scaled gradients overflowed (the loss scale halved).
    pub skipped_steps: u64,
    /// Set when a stop signal ended the run before its last step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Stopped>,
    #[serde(skip)]
    pub spans: Vec<Span>,
    /// The last step by kind of work, measured next to predicted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_kind: Vec<KindRow>,
    /// Seconds from the start of the run to its first step, by phase.
    pub startup: Vec<StartPhase>,
}

/// A run ended early by SIGTERM or SIGUSR1, after finishing a step and saving it: the
/// process exits with [`stop::PREEMPTED`].
#[derive(Clone, Debug, Serialize)]
pub struct Stopped {
    /// `SIGTERM` or `SIGUSR1` (of the first rank that saw one, when it is this one).
    pub signal: String,
    /// The last step finished, counted from 1: a resumed run starts after it.
    pub step: u64,
    /// Its checkpoint; none without `--save` (the run's work is then lost).
    pub checkpoint: Option<PathBuf>,
}

/// A phase of a rank's start: a slow start (a cold CUDA context, NCCL finding the
/// topology, reading a large checkpoint) is then named, not just waited out.
#[derive(Clone, Debug, Serialize)]
pub struct StartPhase {
    pub phase: &'static str,
    pub seconds: f64,
}

/// What a run reports as it goes: each phase of its start as it ends (a start can take
/// half a minute), then each step.
pub enum Event<'a> {
    Started(&'a StartPhase),
    Step(&'a StepMetrics),
}

/// Splits the time since the last mark into named phases.
struct Phases {
    last: std::time::Instant,
    done: Vec<StartPhase>,
}

impl Phases {
    fn start() -> Phases {
        Phases {
            last: std::time::Instant::now(),
            done: Vec::new(),
        }
    }

    fn mark(&mut self, phase: &'static str) -> &StartPhase {
        let now = std::time::Instant::now();
        self.done.push(StartPhase {
            phase,
            seconds: (now - self.last).as_secs_f64(),
        });
        self.last = now;
        self.done.last().expect("just pushed")
    }
}

/// One kind of work in the last traced step.
#[derive(Clone, Debug, Serialize)]
pub struct KindRow {
    pub kind: WorkKind,
    pub measured_s: f64,
    pub predicted_s: f64,
    /// From the catalog's constants, where the plan's prediction came from a profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_constants_s: Option<f64>,
}

/// The kind of work of a traced span, by the names the engine and the step mark.
fn kind_of_span(name: &str) -> Option<WorkKind> {
    let op = name.split_once(' ').map_or(name, |(_, rest)| rest);
    Some(match name {
        "zero gradients" | "optimizer" => WorkKind::Optimizer,
        "gradient reduction" | "embedding gradient sum" => WorkKind::Communication,
        "end" => return None,
        _ if name.starts_with("pipeline transfer") => WorkKind::PipelineWait,
        _ if name.contains(": tensor-parallel") => WorkKind::Communication,
        _ if op.starts_with("embedding") => WorkKind::Embedding,
        _ if op.starts_with("loss head") => WorkKind::Head,
        _ if op.starts_with("attention norm") || op.starts_with("mlp norm") => WorkKind::Norms,
        // The core, its probabilities' recompute, and the heads-major layout around it
        // (the qkv split, the gradients' merge).
        _ if op.starts_with("attention core")
            || op.starts_with("attention qkv")
            || op.starts_with("attention probabilities") =>
        {
            WorkKind::Attention
        }
        _ if op.starts_with("mlp activation") => WorkKind::Activation,
        // The products' spans, and a layer's recompute mark (its forward's spans follow).
        _ => WorkKind::Linear,
    })
}

/// The last step's spans summed by kind, next to the prediction's kinds.
fn by_kind(spans: &[Span], prediction: &predict::Prediction) -> Vec<KindRow> {
    let Some(last) = spans.last().map(|s| s.step) else {
        return Vec::new();
    };
    let mut rows: Vec<KindRow> = prediction
        .by_kind
        .iter()
        .map(|&(kind, predicted_s)| KindRow {
            kind,
            measured_s: 0.0,
            predicted_s,
            predicted_constants_s: prediction
                .by_kind_constants
                .as_ref()
                .map(|c| c.iter().find(|(k, _)| *k == kind).map_or(0.0, |(_, s)| *s)),
        })
        .collect();
    for sp in spans.iter().filter(|s| s.step == last) {
        let Some(kind) = kind_of_span(&sp.name) else {
            continue;
        };
        match rows.iter_mut().find(|r| r.kind == kind) {
            Some(r) => r.measured_s += sp.dur_s,
            None => rows.push(KindRow {
                kind,
                measured_s: sp.dur_s,
                predicted_s: 0.0,
                predicted_constants_s: prediction.by_kind_constants.as_ref().map(|_| 0.0),
            }),
        }
    }
    rows.sort_by_key(|r| r.kind);
    rows
}

/// The learning rate of step `s` (0-based) of `steps`: linear warm-up over `warmup_steps`,
/// then constant or cosine from `lr` down to `min_lr` at the last step.
pub fn learning_rate(r: &RunSettings, s: u64, steps: u64) -> f64 {
    if s < r.warmup_steps {
        return r.lr * (s + 1) as f64 / r.warmup_steps as f64;
    }
    match r.lr_schedule {
        LrSchedule::Constant => r.lr,
        LrSchedule::Cosine => {
            let span = steps.saturating_sub(1).saturating_sub(r.warmup_steps);
            if span == 0 {
                return r.lr;
            }
            let x = ((s - r.warmup_steps) as f64 / span as f64).min(1.0);
            r.min_lr + 0.5 * (r.lr - r.min_lr) * (1.0 + (std::f64::consts::PI * x).cos())
        }
    }
}

/// Refuses what this runtime cannot run (yet), with the way out.
pub fn refuse(plan: &Plan, world: &World) -> Result<(), RunError> {
    let p = &plan.parallel;
    let size = plan.cluster.world_size() as usize;
    if let Some(l) =
        planc_compiler::capability::framework_model_limit(Framework::Planc, &plan.model)
    {
        return Err(RunError::NotRunYet(format!(
            "{} (`{}.{}` in the plan)",
            l.reason, l.block, l.attr
        )));
    }
    if plan.train.dropout > 0.0 {
        return Err(RunError::NotRunYet(format!(
            "`planc run` trains without dropout; the plan sets train.dropout = {} (set it to 0)",
            plan.train.dropout
        )));
    }
    let unsupported: Vec<String> = [("cp", p.cp), ("ep", p.ep)]
        .iter()
        .filter(|(_, v)| *v > 1)
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    if !unsupported.is_empty() {
        return Err(RunError::NotRunYet(format!(
            "`planc run` runs tensor (with or without sequence_parallel), pipeline (gpipe, \
             1f1b, interleaved) and data parallelism (zero 0 and 1) so far; this plan also \
             sets {} in its `parallel` block (context and expert parallelism are not run \
             yet): set them to 1 to run it here",
            unsupported.join(", ")
        )));
    }
    if p.schedule == planc_compiler::plan::Schedule::ZeroBubble {
        return Err(RunError::NotRunYet(
            "`planc run` runs the gpipe, 1f1b and interleaved schedules; this plan's \
             zero-bubble schedule splits backward into input and weight passes (change \
             `schedule` in the `parallel` block)"
                .into(),
        ));
    }
    if p.zero >= 2 {
        return Err(RunError::NotRunYet(format!(
            "`planc run` runs zero 0 and 1; the plan sets zero = {} in its `parallel` block",
            p.zero
        )));
    }
    let tp = p.tp as usize;
    if tp > 1 {
        let dims = Dims::of(plan, None).map_err(RunError::Plan)?;
        dims.tensor_parallel(tp)
            .map_err(|e| RunError::Plan(format!("{e} (`model` block)")))?;
        let tokens = p.micro_batch as usize * dims.seq_len;
        if p.sequence_parallel && !tokens.is_multiple_of(tp) {
            return Err(RunError::Plan(format!(
                "sequence parallelism splits a micro-batch's {tokens} tokens over tp = {tp} \
                 ranks: micro_batch × seq_len must be a multiple of {tp}, or set \
                 sequence_parallel = false in the `parallel` block"
            )));
        }
    }
    if world.size != size {
        return Err(RunError::Plan(format!(
            "the plan's layout has {size} GPUs but {} ranks were started: start one rank per \
             GPU of the plan's cluster (nodes × gpus_per_node), or let `planc run` start them",
            world.size
        )));
    }
    Ok(())
}

pub fn train(
    plan: &Plan,
    opts: &Options,
    world: &World,
    mut on_event: impl FnMut(Event<'_>),
) -> Result<Summary, RunError> {
    let mut phases = Phases::start();
    let dims = Dims::of(plan, opts.layers).map_err(RunError::Plan)?;
    let settings = &plan.train.run;
    let precision = plan.train.precision;
    if precision == Precision::Fp8 {
        return Err(RunError::Precision(precision));
    }
    refuse(plan, world)?;
    // From here a stop signal is a request to finish the step and save, not an end.
    stop::install().map_err(|e| RunError::Plan(format!("cannot catch SIGTERM: {e}")))?;
    // Nothing is overwritten silently: a folder that holds checkpoints is only written by
    // the run that resumes from it.
    if let Some(dir) = &opts.save {
        let same = opts
            .resume
            .as_ref()
            .is_some_and(|r| std::fs::canonicalize(r).ok() == std::fs::canonicalize(dir).ok());
        if !same {
            if let Ok(Some(newest)) = checkpoint::latest(dir) {
                return Err(RunError::Usage(format!(
                    "--save {}: it already holds checkpoints (newest {}); continue them with \
                     `--resume {0} --save {0}`, or save into another folder",
                    dir.display(),
                    newest.display()
                )));
            }
        }
    }
    // Ranks as `planc check` places them: tensor-parallel innermost, then data, then
    // pipeline.
    let (tp, dp) = (plan.parallel.tp as usize, plan.parallel.dp as usize);
    let pp = plan.parallel.pp.max(1) as usize;
    let (tp_rank, dp_rank) = (world.rank % tp, (world.rank / tp) % dp);
    let pp_rank = world.rank / (tp * dp);
    let sp = plan.parallel.sequence_parallel && tp > 1;
    let local = dims.tensor_parallel(tp).map_err(RunError::Plan)?;
    let stage = if pp > 1 {
        Stage::of(&plan.parallel, dims.layers, pp_rank)
    } else {
        Stage::whole(dims.layers)
    };
    let tp_map = TpMap::of_stage(&dims, tp, tp_rank, &stage).map_err(RunError::Plan)?;
    let tied_copy = stage.holds_tied_copy(&dims);
    let gpu = Gpu::open(world.local_rank, precision)?;
    on_event(Event::Started(
        phases.mark("GPU (CUDA context, kernels, cuBLAS)"),
    ));
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    if tp > 1 {
        for g in dist::tensor_parallel_groups(world.size, tp) {
            groups.push(("tensor-parallel", g));
        }
    }
    if dp > 1 {
        for g in dist::data_parallel_groups(world.size, tp, dp) {
            groups.push(("data-parallel", g));
        }
    }
    let pipeline_groups = dist::pipeline_groups(world.size, tp, dp);
    if pp > 1 {
        for g in &pipeline_groups {
            groups.push(("pipeline", g.clone()));
        }
        if dims.tied {
            // The first and last stage both hold the tied embedding.
            for g in &pipeline_groups {
                groups.push(("embedding", vec![g[0], g[pp - 1]]));
            }
        }
    }
    let comms: Vec<Arc<Comm>> = if world.size > 1 {
        // What must be the same on every rank for their programs to match.
        let fingerprint = format!(
            "planc {}, plan text sha256 {}, {} steps, {} layers, {} ranks",
            env!("CARGO_PKG_VERSION"),
            &opts.plan_hash[..opts.plan_hash.len().min(12)],
            opts.steps.unwrap_or(settings.steps),
            opts.layers.unwrap_or(dims.layers),
            world.size
        );
        dist::communicators(world, &groups, &fingerprint)?
            .into_iter()
            .map(Arc::new)
            .collect()
    } else {
        Vec::new()
    };
    if world.size > 1 {
        on_event(Event::Started(phases.mark("NCCL communicators")));
    }
    // One communicator of each kind this rank is in, in the order of `groups`.
    let mut kinds = comms.iter().cloned();
    let tpc = if tp > 1 { kinds.next() } else { None };
    let dpc = if dp > 1 { kinds.next() } else { None };
    let ppc = if pp > 1 { kinds.next() } else { None };
    let embc = if pp > 1 && dims.tied && (stage.first || stage.last) {
        kinds.next()
    } else {
        None
    };
    let watchdog = dist::Watchdog::start(world.rank, comms.clone());
    let (free0, total) = gpu.mem_info()?;
    let context_bytes = (total - free0) as u64;

    let mut run_plan = plan.clone();
    if let Some(k) = opts.layers {
        run_plan.model.layers = k as u64;
    }
    let prediction = predict::predict(&run_plan, &gpu.name);
    if prediction.peak_bytes > total as f64 * 0.98 {
        return Err(RunError::Plan(format!(
            "the plan needs {:.1} GiB per GPU (predicted), this {} has {:.1} GiB; run fewer \
             layers with `--layers K` to measure the per-layer truth (K = {} fits)",
            prediction.peak_bytes / crate::device::cuda::GIB,
            gpu.name,
            total as f64 / crate::device::cuda::GIB,
            prediction.layers_that_fit(total as f64 * 0.9).max(1)
        )));
    }

    let program = planc_simulator::lower::lower(&run_plan).0;
    if program.schedule.splits_backward() {
        return Err(RunError::NotRunYet(format!(
            "`planc run` runs the gpipe, 1f1b and interleaved schedules; this plan's {:?} \
             splits backward into input and weight passes (change `schedule` in the \
             `parallel` block)",
            program.schedule
        )));
    }
    // The interleaved programs deadlock with their transfers grouped as they stand: they
    // run regrouped by the order of a run in which sends never wait (`regroup`).
    let interleaved = matches!(program.schedule, ScheduleKind::Interleaved { .. });
    let instrs = if interleaved {
        regroup(&program.ranks).swap_remove(pp_rank)
    } else {
        program.ranks[pp_rank].clone()
    };
    let micro_batches = program.micro_batches as usize;
    // Activation sets alive at once: a forward's (or the receive's before it) until its
    // backward.
    let in_flight = live_sets(&instrs, pp);
    let shape = Shape {
        dims: local.clone(),
        batch: plan.parallel.micro_batch as usize,
        precision,
        attention: plan.train.attention,
        recompute: plan.parallel.recompute,
        optimizer: plan.train.optimizer,
        in_flight,
        dp,
        dp_rank,
        zero: plan.parallel.zero,
        tp,
        tp_rank,
        sp,
        stage: stage.clone(),
    };
    let mut eng = Engine::new(gpu, shape, micro_batches)?;
    eng.tpc = tpc.clone();
    if let Some(c) = &ppc {
        watchdog.waiting("connecting the pipeline group to its neighbouring stages".into());
        c.connect_neighbours(eng.scalars, eng.gpu.stream as u64)?;
        eng.gpu.sync()?;
        watchdog.done();
    }
    on_event(Event::Started(phases.mark("buffers")));
    // This rank's table (its share under tensor parallelism) and the whole model's, which
    // checkpoints and the initialisation are written in.
    let params = eng.params.clone();
    let whole = Params::new(&dims);
    let share = |w: Vec<f32>| {
        if tp == 1 && pp == 1 {
            w
        } else {
            tp_map.take(&w)
        }
    };
    let source = data::open(&opts.plan_dir, settings, dims.vocab, dims.seq_len)
        .map_err(|e| RunError::Plan(e.to_string()))?;

    // Weights: the seed's, or the newest checkpoint's.
    let mut start_step = 0u64;
    let mut opt_step = 0u64;
    let mut loss_scale: f32 = if precision == Precision::Fp16 {
        65536.0
    } else {
        1.0
    };
    let mut resumed_from = None;
    let shard = eng.shape.shard(params.total);
    let weights = match &opts.resume {
        Some(dir) => match checkpoint::latest(dir).map_err(|e| RunError::Plan(e.to_string()))? {
            Some(path) => {
                let (w, opt, meta) = checkpoint::load(&path, &dims, &whole)
                    .map_err(|e| RunError::Plan(e.to_string()))?;
                if let Some(o) = opt {
                    if eng.m.ptr != 0 {
                        // This rank's shard of the moments (all of them without ZeRO).
                        let (om, ov) = (share(o.m), share(o.v));
                        let (lo, hi) = shard;
                        let hi_n = hi.min(om.len());
                        if lo < hi_n {
                            eng.gpu.upload(eng.m, &om[lo..hi_n])?;
                            eng.gpu.upload(eng.v, &ov[lo..hi_n])?;
                        }
                    }
                    opt_step = o.step;
                    if o.loss_scale > 0.0 {
                        loss_scale = o.loss_scale;
                    }
                }
                start_step = meta.step;
                resumed_from = Some(path);
                share(w)
            }
            None => {
                return Err(RunError::Usage(format!(
                    "--resume {}: no complete checkpoint there (a folder `planc run --save` wrote)",
                    dir.display()
                )))
            }
        },
        // A rank draws only its share (as the whole model's draw would give it).
        None if tp == 1 && pp == 1 => whole.init(settings.seed),
        None => tp_map.init_share(&whole, settings.seed),
    };
    eng.set_weights(&weights)?;
    drop(weights);
    on_event(Event::Started(phases.mark(if resumed_from.is_some() {
        "data and the checkpoint"
    } else {
        "data and initial weights"
    })));

    let steps = opts.steps.unwrap_or(settings.steps);
    let g = plan.train.global_batch;
    let s_len = dims.seq_len;
    let tokens_per_step = g * s_len as u64;
    let dscale = 1.0 / tokens_per_step as f32;
    let mut summary_steps = Vec::new();
    let mut checkpoints = Vec::new();
    let mut spans = Vec::new();
    let mut good_steps = 0u64;
    let mut skipped_steps = 0u64;
    let mut stopped = None;
    let end = start_step + steps;
    // Every rank takes part (the moments of a ZeRO shard are gathered first); rank 0 writes.
    let save = |eng: &mut Engine,
                step: u64,
                opt_step: u64,
                loss_scale: f32|
     -> Result<Option<PathBuf>, RunError> {
        let padded = eng.shape.padded(params.total);
        let (lo, hi) = shard;
        let gathered = |eng: &mut Engine, b: Buf| -> Result<Vec<f32>, RunError> {
            if b.ptr == 0 {
                return Ok(vec![0.0; params.total]);
            }
            match (&dpc, hi - lo < padded) {
                (Some(c), true) => {
                    let full = eng.gpu.alloc(padded * 4)?;
                    c.all_gather(b, full, hi - lo, 4, eng.gpu.stream as u64)?;
                    let v = eng.gpu.download(full, params.total)?;
                    eng.gpu.free(full)?;
                    Ok(v)
                }
                _ => eng.gpu.download(b, params.total),
            }
        };
        let (m, v) = (gathered(eng, eng.m)?, gathered(eng, eng.v)?);
        let w: Vec<f32> = eng.gpu.download(eng.w32, params.total)?;
        // Every rank's share put together in the whole model: the tensor-parallel shares
        // gathered, then the pipeline stages summed (each tensor is non-zero on the one
        // stage that owns it; the last stage's copy of a tied embedding is left out).
        let mut to_whole = |local: Vec<f32>| -> Result<Vec<f32>, RunError> {
            if tpc.is_none() && ppc.is_none() {
                return Ok(local);
            }
            let n = params.total;
            let mut out = vec![0f32; whole.total];
            match &tpc {
                Some(c) => {
                    let (mine, all) = (eng.gpu.alloc(n * 4)?, eng.gpu.alloc(tp * n * 4)?);
                    eng.gpu.upload(mine, &local)?;
                    c.all_gather(mine, all, n, 4, eng.gpu.stream as u64)?;
                    let shares: Vec<f32> = eng.gpu.download(all, tp * n)?;
                    eng.gpu.free(all)?;
                    eng.gpu.free(mine)?;
                    for r in 0..tp {
                        TpMap::of_stage(&dims, tp, r, &stage)
                            .map_err(RunError::Plan)?
                            .put(&shares[r * n..(r + 1) * n], &mut out);
                    }
                }
                None => tp_map.put(&local, &mut out),
            }
            if let Some(c) = &ppc {
                if tied_copy {
                    if let Some(p) = whole.get("wte") {
                        out[p.offset..p.offset + p.numel()].fill(0.0);
                    }
                }
                let buf = eng.gpu.alloc(whole.total * 4)?;
                eng.gpu.upload(buf, &out)?;
                c.all_reduce_sum(buf, whole.total, eng.gpu.stream as u64)?;
                out = eng.gpu.download(buf, whole.total)?;
                eng.gpu.free(buf)?;
            }
            Ok(out)
        };
        let (w, m, v) = (to_whole(w)?, to_whole(m)?, to_whole(v)?);
        if world.rank != 0 {
            return Ok(None);
        }
        // Diverged weights are never saved: the newest checkpoint stays one to resume from.
        if let Some((name, i, x)) = stop::first_non_finite(&whole, &w) {
            return Err(RunError::Diverged(format!(
                "step {step}: the weights to save are not finite ({name}[{i}] = {x}); no \
                 checkpoint written"
            )));
        }
        {
            let state = checkpoint::OptimizerState {
                step: opt_step,
                m,
                v,
                loss_scale,
            };
            let meta = checkpoint::Meta {
                step,
                samples_consumed: step * g,
                plan_hash: opts.plan_hash.clone(),
                layout: format!("tp{tp}-pp{pp}-dp{dp}-zero{}", plan.parallel.zero),
                planc_version: env!("CARGO_PKG_VERSION").into(),
            };
            let dir = opts.save.as_ref().expect("saving needs --save");
            checkpoint::save(dir, &dims, &whole, &w, &state, &meta)
                .map(Some)
                .map_err(|e| RunError::Plan(format!("checkpoint: {e}")))
        }
    };
    if opts.save.is_some() && resumed_from.is_none() {
        checkpoints.extend(save(&mut eng, 0, 0, loss_scale)?);
    }
    let flops = prediction.flops_per_step;
    let peak_flops = prediction.peak_flops;
    let trace_origin = Instant::now();
    if world.size > 1 {
        trail::enable();
    }
    // A micro-batch read and prepared on the host; the next step's first one is prepared
    // (`ahead`) while the GPU still runs the step before it.
    let mb = plan.parallel.micro_batch as usize;
    let prepare = |eng: &Engine, step: u64, j: usize, chunk: usize| {
        let (inp, tgt) = source.micro_batch(step, g as usize, dp, dp_rank, mb, j, s_len);
        eng.host_batch(chunk, &inp, &tgt)
    };
    let first_forward = instrs.iter().find_map(|i| match i {
        Instr::Run(w) if w.pass == Pass::Forward => {
            Some((w.micro_batch as usize, w.chunk as usize))
        }
        _ => None,
    });
    let mut ahead: Option<((u64, usize, usize), HostBatch)> = None;
    for step in start_step..end {
        // The last step is always timed operation by operation (CUDA events, no host
        // waits), for the by-kind comparison at the end; every step with --trace.
        if opts.trace || step + 1 == start_step + steps {
            eng.marks = Some(Vec::new());
        }
        trail::new_step();
        watchdog.step(step + 1);
        let t0 = Instant::now();
        eng.mark_step("zero gradients")?;
        eng.zero_grads()?;
        eng.gpu.zero(eng.loss_sums)?;
        // The activation set of each (micro-batch, chunk) between its forward (or the
        // receive before it) and its backward.
        let mut set_of: std::collections::HashMap<(usize, usize), usize> = Default::default();
        let mut free: Vec<usize> = (0..in_flight).rev().collect();
        let chunks = stage.chunks.len();
        let mut backwards = vec![0usize; chunks];
        let zero = plan.parallel.zero;
        let (stream, comm_stream) = (eng.gpu.stream as u64, eng.gpu.comm as u64);
        let mut reduced = Vec::new();
        // Consecutive sends and receives go to NCCL as one group: a stage that sends its
        // activation and receives a gradient, facing one that does the reverse, must not
        // wait for the other's receive first.
        let mut p2p: Vec<(bool, usize, Buf, usize, String)> = Vec::new();
        let flush = |p2p: &mut Vec<(bool, usize, Buf, usize, String)>,
                     eng: &mut Engine|
         -> Result<(), RunError> {
            if p2p.is_empty() {
                return Ok(());
            }
            // A span of its own: the stage's wait for its neighbour lands here, not in
            // the operation before it.
            eng.mark_step("pipeline transfer")?;
            if trail::is_on() {
                let names: Vec<&str> = p2p.iter().map(|m| m.4.as_str()).collect();
                trail::doing(format!("step {}: {}", step + 1, names.join(" and ")));
            }
            let c = ppc
                .as_ref()
                .expect("pipeline messages need the pipeline group");
            let ty = eng.activation_type();
            dist::grouped(|| {
                for &(send, peer, buf, count, _) in p2p.iter() {
                    if send {
                        c.send(buf, count, ty, peer, stream)?;
                    } else {
                        c.recv(buf, count, ty, peer, stream)?;
                    }
                }
                Ok(())
            })?;
            p2p.clear();
            Ok(())
        };
        for ins in &instrs {
            match ins {
                Instr::Send { to, message } => {
                    // The sender's virtual stage: before the consumer (activations) or
                    // after it (gradients).
                    let act = message.payload == Payload::Activation;
                    let v = message.virtual_stage as usize;
                    let mine = if act { v - 1 } else { v + 1 };
                    let (j, chunk) = (message.micro_batch as usize, mine / pp);
                    let set = match set_of.get(&(j, chunk)) {
                        Some(&s) => s,
                        // A gradient leaves from the engine's scratch after its set is free.
                        None => usize::MAX,
                    };
                    let (buf, count) = eng.p2p_buf(set, Dir::Send, message.payload, chunk);
                    p2p.push((
                        true,
                        *to as usize,
                        buf,
                        count,
                        format!("the send of the {message}"),
                    ));
                    continue;
                }
                Instr::Recv { from, message } => {
                    let (j, chunk) = (
                        message.micro_batch as usize,
                        message.virtual_stage as usize / pp,
                    );
                    let set = *set_of.entry((j, chunk)).or_insert_with(|| {
                        free.pop()
                            .expect("the program keeps within its in-flight count")
                    });
                    let (buf, count) = eng.p2p_buf(set, Dir::Recv, message.payload, chunk);
                    p2p.push((
                        false,
                        *from as usize,
                        buf,
                        count,
                        format!("the receive of the {message}"),
                    ));
                    continue;
                }
                _ => flush(&mut p2p, &mut eng)?,
            }
            match ins {
                Instr::Run(w) => {
                    let (j, chunk) = (w.micro_batch as usize, w.chunk as usize);
                    match w.pass {
                        Pass::Forward => {
                            let set = *set_of.entry((j, chunk)).or_insert_with(|| {
                                free.pop()
                                    .expect("the program keeps within its in-flight count")
                            });
                            let batch = match ahead.take() {
                                Some((at, b)) if at == (step, j, chunk) => b,
                                _ => prepare(&eng, step, j, chunk),
                            };
                            eng.forward(set, j, chunk, &batch, dscale * loss_scale)?;
                        }
                        Pass::Backward | Pass::WeightGrad => {
                            let set = set_of
                                .remove(&(j, chunk))
                                .expect("a backward pass follows its forward");
                            backwards[chunk] += 1;
                            let last = backwards[chunk] == micro_batches;
                            // Without ZeRO, each layer's gradients are all-reduced as soon
                            // as the chunk's last backward has produced them, on the
                            // communication stream, while backward goes on.
                            let mut hook = |e: &Engine, l: usize| -> Result<(), RunError> {
                                if let (Some(c), true, 0) = (&dpc, last, zero) {
                                    let (lo, hi) = e.layer_range(l);
                                    trail::doing(format!(
                                        "step {}: the data-parallel reduction of layer {l}'s gradients",
                                        step + 1
                                    ));
                                    e.gpu.comm_after_compute()?;
                                    c.all_reduce_sum(e.grad.at(lo, 4), hi - lo, comm_stream)?;
                                    reduced.push((lo, hi));
                                }
                                Ok(())
                            };
                            eng.backward(set, j, chunk, &mut hook)?;
                            free.push(set);
                        }
                    }
                }
                Instr::Collective {
                    op: CollectiveOp::EmbeddingSync,
                    ..
                } => {
                    // The tied embedding's gradient: the first stage's (input) and the last
                    // stage's (output layer) summed, so both copies take the same update.
                    let wte = eng.params.get("wte").map(|p| (p.offset, p.numel()));
                    if let (Some(c), Some((offset, n))) = (&embc, wte) {
                        eng.mark_step("embedding gradient sum")?;
                        trail::doing(format!(
                            "step {}: the tied embedding's gradient sum",
                            step + 1
                        ));
                        c.all_reduce_sum(eng.grad.at(offset, 4), n, stream)?;
                    }
                }
                // The data-parallel reductions run in the hooks above and below; the
                // optimizer after the loop.
                _ => {}
            }
        }
        flush(&mut p2p, &mut eng)?;
        eng.mark_step("gradient reduction")?;
        trail::doing(format!(
            "step {}: the loss and the gradient reduction after the last backward",
            step + 1
        ));
        // The loss is the last stage's: summed over the pipeline (zero elsewhere).
        if let Some(c) = &ppc {
            c.all_reduce_sum(eng.loss_sums, micro_batches, stream)?;
        }
        if let Some(c) = &dpc {
            let padded = eng.shape.padded(params.total);
            if zero == 0 {
                // What the layers' reductions did not cover: embeddings, final norm, head.
                reduced.sort();
                let mut at = 0;
                let mut rest = Vec::new();
                for &(lo, hi) in &reduced {
                    if lo > at {
                        rest.push((at, lo));
                    }
                    at = at.max(hi);
                }
                rest.push((at, padded));
                eng.gpu.comm_after_compute()?;
                for (lo, hi) in rest {
                    c.all_reduce_sum(eng.grad.at(lo, 4), hi - lo, comm_stream)?;
                }
                eng.gpu.compute_after_comm()?;
            } else {
                // The distributed optimizer: each rank keeps the sum of its shard.
                let (lo, hi) = shard;
                c.reduce_scatter_sum(eng.grad, eng.grad.at(lo, 4), hi - lo, stream)?;
            }
            // Fault injection for the hang test: PLANC_FAULT=skip-collective:RANK:STEP makes
            // that rank skip the loss reduction of that step, as a rank running another
            // program would.
            if !fault_skips(world.rank, step + 1) {
                c.all_reduce_sum(eng.loss_sums, micro_batches, stream)?;
            }
        }
        // The norms' and row-parallel biases' gradients of a sequence-parallel rank cover
        // its tokens only (a sum: before or after the data-parallel one alike).
        eng.tp_reduce_partial_grads()?;
        watchdog.waiting(format!(
            "the step-{} gradient reduction ({})",
            step + 1,
            dpc.as_ref().map(|c| c.name.as_str()).unwrap_or("one rank")
        ));
        let loss = eng.loss_sum(micro_batches)? / tokens_per_step as f64;
        // The norm over the whole model: of this rank's shard under ZeRO, summed over ranks.
        let norm_range = if dpc.is_some() && zero >= 1 {
            shard
        } else {
            (0, params.total)
        };
        // Σ g² of this rank's tensors [0], of those every tensor-parallel rank holds whole
        // [1], and of the last stage's copy of a tied embedding [2]; summed over the
        // groups whose ranks hold different tensors, each tensor then counted once:
        // Σ(all) − (tp − 1)/tp · Σ(whole) − Σ(copy).
        eng.mark_step("optimizer")?;
        trail::doing(format!(
            "step {}: the gradient norm and the update",
            step + 1
        ));
        eng.gpu.zero(Buf {
            bytes: stop::SLOTS * 4,
            ..eng.scalars
        })?;
        eng.grad_sumsq(norm_range, eng.scalars)?;
        if tp > 1 {
            eng.whole_sumsq(norm_range, eng.scalars.at(1, 4))?;
        }
        if tied_copy {
            eng.sumsq_of(norm_range, eng.scalars.at(2, 4), |n| n == "wte")?;
        }
        // This rank's flags (a stop signal seen, a loss not finite) join the sums, so that
        // every rank stops, or not, after this same step.
        let flags = stop::flags(stop::requested().is_some(), loss.is_finite());
        eng.gpu
            .upload(eng.scalars.at(stop::FLAG_SLOTS.start, 4), &flags)?;
        for (axis, slots) in stop::scalar_sums(tp, pp, dp, zero) {
            let c = axis_comm(axis, &tpc, &ppc, &dpc);
            c.all_reduce_sum(eng.scalars.at(slots.start, 4), slots.len(), stream)?;
        }
        if let (Some((j, chunk)), true) = (first_forward, step + 1 < start_step + steps) {
            ahead = Some(((step + 1, j, chunk), prepare(&eng, step + 1, j, chunk)));
        }
        let sums: Vec<f32> = eng.gpu.download(eng.scalars, stop::SLOTS)?;
        let (signals, losses_not_finite) = (sums[stop::FLAG_SLOTS][0], sums[stop::FLAG_SLOTS][1]);
        let whole_part = sums[1] as f64 * (tp - 1) as f64 / tp as f64 + sums[2] as f64;
        let raw_norm = (sums[0] as f64 - whole_part).max(0.0).sqrt();
        watchdog.done();
        let grad_norm = raw_norm / loss_scale as f64;
        // The schedule spans `train.steps` whatever `--steps` says, so a run stopped and
        // resumed follows the same learning rates as one that never stopped.
        let lr = learning_rate(settings, step, settings.steps);
        let mut skipped = None;
        let verdict = stop::judge(precision, losses_not_finite, grad_norm);
        if verdict == Verdict::SkipOverflow {
            loss_scale = (loss_scale / 2.0).max(1.0);
            good_steps = 0;
            skipped = Some(true);
            skipped_steps += 1;
        } else if verdict == Verdict::Update {
            let clip = if settings.grad_clip > 0.0 && grad_norm > settings.grad_clip {
                settings.grad_clip / (grad_norm + 1e-6)
            } else {
                1.0
            };
            opt_step += 1;
            eng.update(
                lr as f32,
                settings.weight_decay as f32,
                (
                    settings.adam_beta1 as f32,
                    settings.adam_beta2 as f32,
                    settings.adam_eps as f32,
                ),
                opt_step,
                (clip / loss_scale as f64) as f32,
                shard,
            )?;
            if let (Some(c), true) = (&dpc, zero >= 1) {
                // Every rank's updated shard of the master weights, to every rank.
                let (lo, hi) = shard;
                c.all_gather(eng.w32.at(lo, 4), eng.w32, hi - lo, 4, stream)?;
                eng.refresh_compute_copy()?;
            }
            if precision == Precision::Fp16 {
                good_steps += 1;
                if good_steps.is_multiple_of(1000) {
                    loss_scale *= 2.0;
                }
            }
        }
        // The last span's end.
        eng.mark_step("end")?;
        watchdog.waiting(format!("the step-{} weight update", step + 1));
        eng.gpu.sync()?;
        watchdog.done();
        watchdog.step_done();
        let step_s = t0.elapsed().as_secs_f64();
        if let Some(marks) = eng.marks.take() {
            let base = trace_origin.elapsed().as_secs_f64() - step_s;
            for w in marks.windows(2) {
                let dur = w[0].1.ms_to(&w[1].1)? as f64 / 1e3;
                let at = marks[0].1.ms_to(&w[0].1)? as f64 / 1e3;
                spans.push(Span {
                    step: step + 1,
                    name: w[0].0.clone(),
                    start_s: base + at,
                    dur_s: dur,
                });
            }
        }
        let tps = tokens_per_step as f64 / step_s;
        let tflops = flops / step_s / 1e12;
        let m = StepMetrics {
            step: step + 1,
            loss,
            grad_norm,
            lr,
            step_s,
            tokens_per_s: tps,
            tflops_per_gpu: tflops,
            mfu: tflops * 1e12 / peak_flops,
            peak_bytes: eng.gpu.peak as u64 + context_bytes,
            skipped,
            predicted_step_s: (step + 1 == start_step + steps).then_some(prediction.step_s),
            predicted_peak_bytes: (step + 1 == start_step + steps)
                .then_some(prediction.peak_bytes as u64),
        };
        on_event(Event::Step(&m));
        summary_steps.push(m);
        let done = step + 1;
        if verdict == Verdict::Diverged {
            // Only now, on the way out, the buffers are read to say where it shows.
            let w: Vec<f32> = eng.gpu.download(eng.w32, params.total)?;
            let gr: Vec<f32> = eng.gpu.download(eng.grad, params.total)?;
            let last = checkpoints
                .last()
                .map(|c: &PathBuf| format!("; the newest checkpoint is {}", c.display()))
                .unwrap_or_default();
            return Err(RunError::Diverged(format!(
                "step {done}: the loss is {loss} and the gradient norm {grad_norm}: training \
                 diverged; on rank {}, {}. Stopped without updating or saving these \
                 weights{last} (lower train.lr, lengthen warmup_steps, or set grad_clip)",
                world.rank,
                stop::culprit(&params, &w, &gr)
            )));
        }
        let preempt = stop::stop_after(signals, done, end);
        let periodic = opts
            .save_every
            .is_some_and(|k| k > 0 && done % k == 0 && done != end);
        let saved = match opts.save.is_some() && (periodic || preempt) {
            true => save(&mut eng, done, opt_step, loss_scale)?,
            false => None,
        };
        checkpoints.extend(saved.clone());
        if preempt && world.size > 1 {
            // A barrier: no rank ends (and no launcher such as srun --kill-on-bad-exit kills
            // the rest) before rank 0 has written the checkpoint. Summed along every axis in
            // turn, every rank's result needs every rank's part.
            for (axis, _) in stop::scalar_sums(tp, pp, dp, zero) {
                let c = axis_comm(axis, &tpc, &ppc, &dpc);
                c.all_reduce_sum(eng.scalars.at(stop::FLAG_SLOTS.start, 4), 1, stream)?;
            }
            eng.gpu.sync()?;
        }
        if preempt {
            stopped = Some(Stopped {
                signal: stop::requested()
                    .map(stop::signal_name)
                    .unwrap_or_else(|| "a stop signal (on another rank)".into()),
                step: done,
                checkpoint: saved,
            });
            break;
        }
    }
    if opts.save.is_some() && stopped.is_none() {
        checkpoints.extend(save(&mut eng, end, opt_step, loss_scale)?);
    }
    let mut times: Vec<f64> = summary_steps.iter().skip(1).map(|m| m.step_s).collect();
    if times.is_empty() {
        times = summary_steps.iter().map(|m| m.step_s).collect();
    }
    times.sort_by(f64::total_cmp);
    let measured_step_s = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok(Summary {
        device: eng.gpu.name.clone(),
        catalog_gpu: prediction.catalog_gpu.clone(),
        profile: prediction.profile.clone(),
        steps: summary_steps,
        measured_step_s,
        predicted_step_s: prediction.step_s,
        measured_peak_bytes: eng.gpu.peak as u64 + context_bytes,
        predicted_peak_bytes: prediction.peak_bytes as u64,
        memory: eng.memory.clone(),
        predicted_memory: prediction.memory.clone(),
        context_bytes,
        params: whole.count(),
        tokens_per_step,
        micro_batches: micro_batches as u64,
        checkpoints,
        resumed_from,
        skipped_steps,
        stopped,
        by_kind: by_kind(&spans, &prediction),
        spans,
        startup: phases.done,
    })
}

/// The communicator of a summed axis (`stop::scalar_sums` names only axes whose group exists).
fn axis_comm<'a, C>(
    axis: stop::Axis,
    tpc: &'a Option<C>,
    ppc: &'a Option<C>,
    dpc: &'a Option<C>,
) -> &'a C {
    match axis {
        stop::Axis::Tensor => tpc,
        stop::Axis::Pipeline => ppc,
        stop::Axis::Data => dpc,
    }
    .as_ref()
    .expect("a group for every summed axis")
}

fn fault_skips(rank: usize, step: u64) -> bool {
    std::env::var("PLANC_FAULT").is_ok_and(|f| f == format!("skip-collective:{rank}:{step}"))
}

/// The pipeline programs reordered so that grouping consecutive sends and receives into
/// one NCCL group cannot deadlock, for any schedule (the interleaved one needs it).
///
/// A run in which sends never wait gives every message a level: the order in which it was
/// sent. Each rank keeps its passes in program order and issues its messages in level
/// order, a receive as late as the next pass that needs it allows and a send as soon as
/// the pass that produced it has run. Then the pending message of least level is the next
/// operation of both its ranks once they finish the passes before it, and those passes
/// only need messages of lower level: the programs run to the end. Messages of equal
/// level do not exist, so each group pairs one for one with its peers' groups.
pub fn regroup(programs: &[Vec<Instr>]) -> Vec<Vec<Instr>> {
    let level = send_order(programs);
    programs
        .iter()
        .map(|prog| {
            // Each message with its level and its place among the passes (how many come
            // before it): a send goes out after that many passes, a receive before the next.
            let mut msgs: Vec<(usize, bool, usize, &Instr)> = Vec::new();
            let mut passes: Vec<&Instr> = Vec::new();
            for ins in prog {
                match ins {
                    Instr::Send { message, .. } | Instr::Recv { message, .. } => {
                        let lv = level.get(message).copied().unwrap_or(usize::MAX);
                        let send = matches!(ins, Instr::Send { .. });
                        msgs.push((lv, send, passes.len(), ins));
                    }
                    _ => passes.push(ins),
                }
            }
            msgs.sort_by_key(|m| m.0);
            let mut out = Vec::with_capacity(prog.len());
            let mut next = 0usize;
            // Issues messages in level order until none that `due` names is left.
            let mut issue = |out: &mut Vec<Instr>, due: &dyn Fn(bool, usize) -> bool| {
                while msgs[next..].iter().any(|m| due(m.1, m.2)) {
                    out.push(*msgs[next].3);
                    next += 1;
                }
            };
            for (k, pass) in passes.iter().enumerate() {
                issue(&mut out, &|send, at| !send && at <= k);
                out.push(**pass);
                issue(&mut out, &|send, at| send && at <= k + 1);
            }
            issue(&mut out, &|_, _| true);
            out
        })
        .collect()
}

/// Each message's place in a run of `programs` in which sends never wait and a receive
/// waits for its send: the order of the sends.
fn send_order(
    programs: &[Vec<Instr>],
) -> std::collections::HashMap<planc_simulator::program::Message, usize> {
    let mut level = std::collections::HashMap::new();
    let mut pc = vec![0usize; programs.len()];
    loop {
        let mut progress = false;
        for (r, prog) in programs.iter().enumerate() {
            while let Some(ins) = prog.get(pc[r]) {
                match ins {
                    Instr::Send { message, .. } => {
                        let n = level.len();
                        level.insert(*message, n);
                    }
                    Instr::Recv { message, .. } if !level.contains_key(message) => break,
                    _ => {}
                }
                pc[r] += 1;
                progress = true;
            }
        }
        if !progress {
            return level;
        }
    }
}

/// Activation sets a rank's program holds at once: a micro-batch's chunk takes one at its
/// forward or at the receive before it (whichever comes first) and gives it back after
/// its backward.
pub fn live_sets(instrs: &[Instr], pp: usize) -> usize {
    let mut live = std::collections::HashSet::new();
    let mut most = 1;
    for i in instrs {
        match i {
            Instr::Recv { message, .. } => {
                live.insert((message.micro_batch, message.virtual_stage as usize / pp));
            }
            Instr::Run(w) if w.pass == Pass::Forward => {
                live.insert((w.micro_batch, w.chunk as usize));
            }
            Instr::Run(w) if w.pass == Pass::Backward => {
                live.remove(&(w.micro_batch, w.chunk as usize));
            }
            _ => {}
        }
        most = most.max(live.len());
    }
    most
}

#[cfg(test)]
mod tests {

    use super::*;
    use planc_compiler::plan::{LrSchedule, RunSettings};
    use planc_simulator::program::{build, StepOptions};

    /// Plays the pipeline programs as `train` issues them: consecutive sends and receives
    /// as one NCCL group, which completes once the peer of each of its operations has
    /// posted the matching one; every other instruction runs on. Returns the ranks stuck
    /// if the programs deadlock.
    fn play(programs: &[Vec<Instr>]) -> Result<(), Vec<usize>> {
        type Op = (bool, usize, planc_simulator::program::Message);
        let steps: Vec<Vec<Vec<Op>>> = programs
            .iter()
            .map(|ins| {
                let mut out: Vec<Vec<Op>> = Vec::new();
                let mut open = false;
                for i in ins {
                    let op = match i {
                        Instr::Send { to, message } => Some((true, *to as usize, *message)),
                        Instr::Recv { from, message } => Some((false, *from as usize, *message)),
                        _ => None,
                    };
                    match op {
                        Some(op) if open => out.last_mut().unwrap().push(op),
                        Some(op) => {
                            out.push(vec![op]);
                            open = true;
                        }
                        None => {
                            out.push(Vec::new());
                            open = false;
                        }
                    }
                }
                out
            })
            .collect();
        // Each operation completes once its peer has posted the matching one (its group is
        // the peer's current one); a group ends when all its operations have completed.
        let mut at = vec![0usize; programs.len()];
        let mut completed: std::collections::HashSet<(usize, Op)> = Default::default();
        loop {
            if (0..at.len()).all(|r| at[r] == steps[r].len()) {
                return Ok(());
            }
            let mut progress = false;
            for r in 0..at.len() {
                let Some(g) = steps[r].get(at[r]) else {
                    continue;
                };
                for op in g {
                    let (send, peer, m) = *op;
                    let other = (!send, r, m);
                    if !completed.contains(&(r, *op))
                        && steps[peer]
                            .get(at[peer])
                            .is_some_and(|pg| pg.contains(&other))
                    {
                        completed.insert((r, *op));
                        completed.insert((peer, other));
                        progress = true;
                    }
                }
            }
            for r in 0..at.len() {
                if steps[r]
                    .get(at[r])
                    .is_some_and(|g| g.iter().all(|op| completed.contains(&(r, *op))))
                {
                    at[r] += 1;
                    progress = true;
                }
            }
            if !progress {
                return Err((0..at.len()).filter(|&r| at[r] < steps[r].len()).collect());
            }
        }
    }

    #[test]
    fn pipeline_programs_run_without_deadlock_as_the_runtime_groups_messages() {
        for kind in [ScheduleKind::Gpipe, ScheduleKind::OneFOneB] {
            for (ranks, micro_batches) in [(2, 4), (2, 8), (4, 4), (4, 8), (4, 16), (8, 8)] {
                let opts = StepOptions {
                    tied_embedding: true,
                    ..StepOptions::default()
                };
                let p = build(kind, ranks, micro_batches, opts);
                assert_eq!(
                    play(&p.ranks),
                    Ok(()),
                    "{kind:?} over {ranks} ranks, {micro_batches} micro-batches"
                );
            }
        }
        // Interleaved programs send a gradient, run a forward, then send an activation and
        // receive a gradient; grouped this way the two ranks wait on each other, which is
        // why `train` runs them regrouped (`regroup`; moving each send to the group of the
        // next receive does not help: the per-direction orders agree, but the two
        // directions interleave differently on the two ranks).
        let p = build(
            ScheduleKind::Interleaved { vpp: 2 },
            2,
            4,
            StepOptions::default(),
        );
        assert!(play(&p.ranks).is_err());
        // The check can fail: two ranks that both receive first never start.
        let m = planc_simulator::program::Message {
            payload: Payload::Activation,
            micro_batch: 0,
            virtual_stage: 1,
        };
        let stuck = vec![
            vec![
                Instr::Recv {
                    from: 1,
                    message: m,
                },
                Instr::Optimizer,
                Instr::Send { to: 1, message: m },
            ],
            vec![
                Instr::Recv {
                    from: 0,
                    message: m,
                },
                Instr::Optimizer,
                Instr::Send { to: 0, message: m },
            ],
        ];
        assert_eq!(play(&stuck), Err(vec![0, 1]));
    }

    #[test]
    fn traced_spans_fall_into_the_kinds_the_cost_model_prices() {
        use super::kind_of_span;
        use planc_compiler::cost::kinds::WorkKind as K;
        for (name, kind) in [
            ("zero gradients", Some(K::Optimizer)),
            ("optimizer", Some(K::Optimizer)),
            ("gradient reduction", Some(K::Communication)),
            ("embedding gradient sum", Some(K::Communication)),
            ("end", None),
            ("F0 embedding", Some(K::Embedding)),
            ("B3 embedding backward", Some(K::Embedding)),
            ("F2 loss head", Some(K::Head)),
            ("L0 attention norm", Some(K::Norms)),
            ("L11 mlp norm backward", Some(K::Norms)),
            ("L4 attention core", Some(K::Attention)),
            ("L4 attention core backward products", Some(K::Attention)),
            ("L4 attention probabilities recompute", Some(K::Attention)),
            ("L4 attention qkv split", Some(K::Attention)),
            ("L4 attention qkv gradient merge", Some(K::Attention)),
            ("L7 mlp activation backward", Some(K::Activation)),
            ("L7 qkv", Some(K::Linear)),
            ("L7 attention projection backward", Some(K::Linear)),
            ("L7 mlp down", Some(K::Linear)),
            ("L7 recompute", Some(K::Linear)),
            (
                "L3 attention projection: tensor-parallel all-reduce",
                Some(K::Communication),
            ),
            (
                "L3 mlp norm: tensor-parallel all-gather",
                Some(K::Communication),
            ),
            ("pipeline transfer", Some(K::PipelineWait)),
        ] {
            assert_eq!(kind_of_span(name), kind, "{name}");
        }
    }

    #[test]
    fn regrouped_programs_run_without_deadlock_for_every_schedule() {
        for kind in [
            ScheduleKind::Gpipe,
            ScheduleKind::OneFOneB,
            ScheduleKind::Interleaved { vpp: 2 },
            ScheduleKind::Interleaved { vpp: 3 },
            ScheduleKind::Interleaved { vpp: 4 },
            ScheduleKind::Interleaved { vpp: 8 },
        ] {
            for (ranks, micro_batches) in [
                (2, 2),
                (2, 4),
                (2, 8),
                (3, 6),
                (4, 4),
                (4, 8),
                (4, 16),
                (8, 8),
                (8, 16),
            ] {
                let opts = StepOptions {
                    tied_embedding: true,
                    ..StepOptions::default()
                };
                let p = build(kind, ranks, micro_batches, opts);
                let q = regroup(&p.ranks);
                let what = format!("{kind:?} over {ranks} ranks, {micro_batches} micro-batches");
                assert_eq!(play(&q), Ok(()), "{what}");
                for (orig, new) in p.ranks.iter().zip(&q) {
                    // Same instructions; passes in the same order; a send after the pass
                    // that produced it, a receive before the pass that needs it.
                    assert_eq!(orig.len(), new.len(), "{what}");
                    let passes = |v: &[Instr]| -> Vec<String> {
                        v.iter()
                            .filter(|i| !matches!(i, Instr::Send { .. } | Instr::Recv { .. }))
                            .map(|i| format!("{i:?}"))
                            .collect()
                    };
                    assert_eq!(passes(orig), passes(new), "{what}");
                    let place = |v: &[Instr]| {
                        let mut before = 0;
                        let mut at = std::collections::HashMap::new();
                        for i in v {
                            match i {
                                Instr::Send { message, .. } => {
                                    at.insert((true, *message), before);
                                }
                                Instr::Recv { message, .. } => {
                                    at.insert((false, *message), before);
                                }
                                _ => before += 1,
                            }
                        }
                        at
                    };
                    let (a, b) = (place(orig), place(new));
                    assert_eq!(a.len(), b.len(), "{what}");
                    for (k, &was) in &a {
                        let now = b[k];
                        if k.0 {
                            assert!(now >= was, "{what}: a send before its pass");
                        } else {
                            assert!(now <= was, "{what}: a receive after its pass");
                        }
                    }
                    // The sets the runtime allocates: as many as before for the schedules
                    // that ran before, at most two more (a receive posted before a
                    // backward returns one) for the interleaved one.
                    let r = ranks as usize;
                    let (was, now) = (live_sets(orig, r), live_sets(new, r));
                    if matches!(kind, ScheduleKind::Interleaved { .. }) {
                        assert!(now <= was + 2, "{what}: {was} -> {now} sets");
                    } else {
                        // As the forwards not yet matched by a backward count them (what
                        // the memory model counts).
                        let mut live = 0i64;
                        let mut most = 1i64;
                        for i in orig {
                            match i {
                                Instr::Run(w) if w.pass == Pass::Forward => live += 1,
                                Instr::Run(w) if w.pass == Pass::Backward => live -= 1,
                                _ => {}
                            }
                            most = most.max(live);
                        }
                        assert_eq!(was, most as usize, "{what}");
                    }
                }
            }
        }
    }

    #[test]
    fn what_does_not_run_yet_is_refused_with_its_code_before_any_rank_starts() {
        let plan = |parallel: &str, train: &str| {
            // A `model` extra rides on the train one after a `|`.
            let (train, model) = train.split_once('|').unwrap_or((train, ""));
            let text = format!(
                "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
                 model m {{ layers = 8, hidden = 512, heads = 8, vocab = 1024, seq_len = 256 {model} }}
                 train {{ global_batch = 64, precision = bf16 {train} }}
                 parallel {{ micro_batch = 1, {parallel} }}"
            );
            let c = planc_compiler::check::check_source("t.tp", &text);
            c.plan
                .unwrap_or_else(|| panic!("{text}: {:#?}", c.diagnostics))
        };
        let world = World {
            rank: 0,
            size: 8,
            local_rank: 0,
            master: String::new(),
        };
        for (parallel, train) in [
            ("tp = 1, pp = 1, dp = 4, cp = 2", ""),
            ("tp = 1, pp = 1, dp = 8, zero = 2", ""),
            ("tp = 1, pp = 2, dp = 4, schedule = zb_h1", ""),
            ("tp = 1, pp = 1, dp = 8", ", dropout = 0.1"),
            ("tp = 1, pp = 1, dp = 8", "|, head_dim = 128"),
        ] {
            let e = refuse(&plan(parallel, train), &world).unwrap_err();
            assert!(matches!(e, RunError::NotRunYet(_)), "{parallel}: {e}");
            assert!(e.to_string().contains("P0901"), "{e}");
        }
        // What runs passes, the interleaved schedule included.
        for parallel in [
            "tp = 2, pp = 2, dp = 2",
            "tp = 1, pp = 2, dp = 4, schedule = interleaved, vpp = 2",
        ] {
            assert!(refuse(&plan(parallel, ""), &world).is_ok(), "{parallel}");
        }
    }

    #[test]
    fn warm_up_then_cosine_down_to_min_lr_at_the_last_step() {
        let r = RunSettings {
            lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 4,
            lr_schedule: LrSchedule::Cosine,
            ..RunSettings::default()
        };
        assert!((learning_rate(&r, 0, 20) - 2.5e-4).abs() < 1e-12);
        assert!((learning_rate(&r, 3, 20) - 1e-3).abs() < 1e-12);
        assert!((learning_rate(&r, 4, 20) - 1e-3).abs() < 1e-12);
        assert!((learning_rate(&r, 19, 20) - 1e-4).abs() < 1e-12);
        let mid = learning_rate(&r, 4 + 15 / 2, 20);
        assert!(mid < 1e-3 && mid > 1e-4);
        // Past the schedule (a run asked for more steps than train.steps): min_lr.
        assert!((learning_rate(&r, 40, 20) - 1e-4).abs() < 1e-12);
    }

    #[test]
    fn constant_schedule_is_constant_after_warm_up() {
        let r = RunSettings {
            lr: 3e-4,
            lr_schedule: LrSchedule::Constant,
            ..RunSettings::default()
        };
        for s in [0, 5, 1000] {
            assert_eq!(learning_rate(&r, s, 10), 3e-4);
        }
    }
}
