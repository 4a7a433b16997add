//! The training loop: the plan's step program executed on the engine, step after step,
//! with what a run keeps (checkpoints, metrics, the trace) and the prediction it is
//! compared with.
//!
//! The step is the simulator's per-rank program for this plan (`program`): the runtime
//! walks this rank's instructions (`executor`: forward and backward passes in the
//! schedule's order, the pipeline's messages), then sums across ranks (`reduce`) and
//! updates (`update`), instead of deriving its own order, so what `planc simulate` prices
//! is what runs. On one GPU the program has no messages or collectives. Where a run starts
//! from is `resume`, what it saves `save`, what it reports `metrics`.

use std::path::PathBuf;
use std::time::Instant;

use planc_compiler::plan::{Framework, Plan};

use super::data;
use super::engine::{Engine, Shape};
use super::executor::{Batches, StepIo};
use super::metrics::{self, Event, Phases, Span, StepMetrics, Stopped, Summary};
use super::model::{Dims, Params, Stage, TpMap};
use super::predict::{self, Prediction};
use super::program::Program;
use super::ranks::{Comms, Ranks};
use super::reduce::{Fault, Reduction};
use super::replay::{self, Replay};
use super::resume::{self, Share};
use super::save::Saver;
use super::stop::{self, Verdict};
use super::update::{self, learning_rate, LossScale};
use crate::device::cuda::{Gpu, GIB};
use crate::device::dist::{Watchdog, World};
use crate::device::trail;
use crate::error::RunError;

pub use super::options::Options;

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
    if let Some(l) = planc_compiler::capability::method_limit(Framework::Planc, &plan.train) {
        return Err(RunError::NotRunYet(format!(
            "{} (`{}.{}` in the plan)",
            l.reason, l.block, l.attr
        )));
    }
    // The layouts `planc run` executes: the compiler's table, which `check` warns from
    // (P0330) and `solve` keeps to when the plan's job says `framework = planc`.
    if let Some(l) = planc_compiler::capability::layout_limit(Framework::Planc, false, p) {
        return Err(RunError::NotRunYet(format!(
            "{} (`parallel.{}` in the plan)",
            l.reason, l.attr
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

/// Trains `plan` as rank `world.rank`, reporting each phase of the start and each step to
/// `on_event`.
pub fn train(
    plan: &Plan,
    opts: &Options,
    world: &World,
    mut on_event: impl FnMut(Event<'_>),
) -> Result<Summary, RunError> {
    let mut phases = Phases::start();
    // A misspelt test fault fails here, before the GPU is opened.
    let fault = Fault::from_env(world.rank)?;
    let part = Part::of(plan, opts, world)?;
    let gpu = Gpu::open(world.local_rank, plan.train.precision)?;
    on_event(Event::Started(
        phases.mark("GPU (CUDA context, kernels, cuBLAS)"),
    ));
    let fingerprint = fingerprint(plan, opts, &part.dims, world);
    let comms = Comms::open(
        world,
        &part.ranks,
        part.dims.tied,
        &part.stage,
        &fingerprint,
    )?;
    if world.size > 1 {
        on_event(Event::Started(phases.mark("NCCL communicators")));
    }
    let watchdog = Watchdog::start(world.rank, comms.all.clone());
    let (free0, total) = gpu.mem_info()?;
    let context_bytes = (total - free0) as u64;
    if let Some(note) = foreign_memory_note(context_bytes, world.local_rank) {
        eprintln!("{note}");
    }
    let mut run_plan = plan.clone();
    if let Some(k) = opts.layers {
        run_plan.model.layers = k as u64;
    }
    let prediction = predict::predict(&run_plan, &gpu.name);
    fits(&prediction, total, &gpu.name)?;
    let prog = Program::of(&run_plan, part.ranks.pp_rank, part.ranks.pp)?;
    let mut eng = Engine::new(gpu, part.shape(plan, prog.in_flight), prog.micro_batches)?;
    if world.rank == 0 {
        if let Some(note) = predict::attention_path_note(&prediction, eng.attention_on_cudnn()) {
            eprintln!("{note}");
        }
        if let Some(note) = predict::power_note(&prediction) {
            eprintln!("{note}");
        }
        let fingerprint = predict::kernels_fingerprint();
        if let Some(note) = predict::kernels_note(&prediction, &fingerprint) {
            eprintln!("{note}");
        }
        let counted = planc_compiler::cost::buffers::cudnn_attention_bytes(
            &run_plan,
            part.ranks.pp_rank as u64,
        );
        if let Some(note) = eng
            .attention_workspace_bytes()
            .and_then(|held| workspace_note(held, counted))
        {
            eprintln!("{note}");
        }
        for note in [eng.fp8_note(), eng.gelu_note()].into_iter().flatten() {
            eprintln!("{note}");
        }
    }
    eng.tpc = comms.tp.clone();
    if let Some(c) = &comms.pp {
        watchdog.waiting("connecting the pipeline group to its neighbouring stages".into());
        c.connect_neighbours(eng.scalars, eng.gpu.stream as u64)?;
        eng.gpu.sync()?;
        watchdog.done();
    }
    on_event(Event::Started(phases.mark("buffers")));
    // The whole model's table, which checkpoints and the initialisation are written in.
    let whole = Params::new(&part.dims);
    let (start, batches) = part.load(plan, opts, &whole, &mut eng)?;
    on_event(Event::Started(phases.mark(if start.from.is_some() {
        "data and the checkpoint"
    } else {
        "data and initial weights"
    })));
    let shard = eng.shape.shard(eng.params.total);
    let saver = part.saver(plan, opts, world.rank, &comms, &whole, shard);
    let reduction = part.reduction(plan, fault, &comms, shard, prog.micro_batches);
    let ctx = Ctx {
        comms: &comms,
        watchdog: &watchdog,
        saver: &saver,
        reduction: &reduction,
        context_bytes,
    };
    let steps = opts.steps.unwrap_or(plan.train.run.steps);
    let mut run = Steps::new(plan, opts, world, &prog, &prediction, batches, start, steps);
    run.all(&mut eng, &ctx, &mut on_event)?;
    Ok(run.summary(&eng, &whole, context_bytes, phases))
}

/// This rank's part of the plan: the model's dimensions (and its share of them under
/// tensor parallelism), its place in the layout, its pipeline stage and where its tensors
/// sit in the whole model. Refuses what does not run before anything starts.
struct Part {
    dims: Dims,
    local: Dims,
    ranks: Ranks,
    stage: Stage,
    tp_map: TpMap,
}

impl Part {
    fn of(plan: &Plan, opts: &Options, world: &World) -> Result<Part, RunError> {
        let dims = Dims::of(plan, opts.layers).map_err(RunError::Plan)?;
        refuse(plan, world)?;
        // From here a stop signal is a request to finish the step and save, not an end.
        stop::install().map_err(|e| RunError::Plan(format!("cannot catch SIGTERM: {e}")))?;
        resume::refuse_overwrite(opts)?;
        let ranks = Ranks::of(plan, world);
        let local = dims.tensor_parallel(ranks.tp).map_err(RunError::Plan)?;
        let stage = if ranks.pp > 1 {
            Stage::of(&plan.parallel, dims.layers, ranks.pp_rank)
        } else {
            Stage::whole(dims.layers)
        };
        let tp_map =
            TpMap::of_stage(&dims, ranks.tp, ranks.tp_rank, &stage).map_err(RunError::Plan)?;
        Ok(Part {
            dims,
            local,
            ranks,
            stage,
            tp_map,
        })
    }

    /// The engine's shape for a program that keeps `in_flight` activation sets.
    fn shape(&self, plan: &Plan, in_flight: usize) -> Shape {
        engine_shape(plan, &self.local, &self.ranks, &self.stage, in_flight)
    }
}

/// The engine's shape of rank `r` of `plan` (its share `local` of the model, its pipeline
/// stage) for a program that keeps `in_flight` activation sets.
pub(crate) fn engine_shape(
    plan: &Plan,
    local: &Dims,
    r: &Ranks,
    stage: &Stage,
    in_flight: usize,
) -> Shape {
    Shape {
        dims: local.clone(),
        batch: plan.parallel.micro_batch as usize,
        precision: plan.train.precision,
        attention: plan.train.attention,
        recompute: plan.parallel.recompute,
        optimizer: plan.train.optimizer,
        in_flight,
        dp: r.dp,
        dp_rank: r.dp_rank,
        zero: plan.parallel.zero,
        tp: r.tp,
        tp_rank: r.tp_rank,
        sp: r.sp,
        stage: stage.clone(),
    }
}

impl Part {
    /// The token stream and the weights to start from (the seed's or the newest
    /// checkpoint's, set on the engine with the checkpoint's moments).
    fn load(
        &self,
        plan: &Plan,
        opts: &Options,
        whole: &Params,
        eng: &mut Engine,
    ) -> Result<(resume::Start, Batches), RunError> {
        let (dims, ranks) = (&self.dims, self.ranks);
        let source = data::open(&opts.plan_dir, &plan.train.run, dims.vocab, dims.seq_len)
            .map_err(|e| RunError::Plan(e.to_string()))?;
        let share = Share {
            dims,
            whole,
            tp_map: &self.tp_map,
            whole_model: ranks.tp == 1 && ranks.pp == 1,
            shard: eng.shape.shard(eng.params.total),
        };
        let precision = plan.train.precision;
        let mut start = resume::start(opts, &plan.train.run, precision, &share, eng)?;
        eng.set_weights(&std::mem::take(&mut start.weights))?;
        let batches = Batches {
            source,
            global_batch: plan.train.global_batch as usize,
            dp: ranks.dp,
            dp_rank: ranks.dp_rank,
            micro_batch: plan.parallel.micro_batch as usize,
            seq_len: dims.seq_len,
            ahead: Vec::new(),
        };
        Ok((start, batches))
    }

    fn saver<'a>(
        &'a self,
        plan: &'a Plan,
        opts: &'a Options,
        rank: usize,
        comms: &'a Comms,
        whole: &'a Params,
        shard: (usize, usize),
    ) -> Saver<'a> {
        Saver {
            plan,
            opts,
            rank,
            ranks: self.ranks,
            comms,
            dims: &self.dims,
            whole,
            stage: &self.stage,
            tp_map: &self.tp_map,
            tied_copy: self.stage.holds_tied_copy(&self.dims),
            shard,
        }
    }

    fn reduction<'a>(
        &self,
        plan: &Plan,
        fault: Fault,
        comms: &'a Comms,
        shard: (usize, usize),
        micro_batches: usize,
    ) -> Reduction<'a> {
        Reduction {
            comms,
            ranks: self.ranks,
            zero: plan.parallel.zero,
            shard,
            micro_batches,
            fault,
            tied_copy: self.stage.holds_tied_copy(&self.dims),
        }
    }
}

/// What must be the same on every rank for their programs to match.
fn fingerprint(plan: &Plan, opts: &Options, dims: &Dims, world: &World) -> String {
    format!(
        "planc {}, plan text sha256 {}, {} steps, {} layers, {} ranks",
        env!("CARGO_PKG_VERSION"),
        &opts.plan_hash[..opts.plan_hash.len().min(12)],
        opts.steps.unwrap_or(plan.train.run.steps),
        opts.layers.unwrap_or(dims.layers),
        world.size
    )
}

/// Refuses a plan whose predicted memory does not fit this GPU's `total` bytes.
fn fits(prediction: &Prediction, total: usize, gpu: &str) -> Result<(), RunError> {
    if prediction.peak_bytes > total as f64 * 0.98 {
        return Err(RunError::Plan(format!(
            "the plan needs {:.1} GiB per GPU (predicted), this {} has {:.1} GiB; run fewer \
             layers with `--layers K` to measure the per-layer truth (K = {} fits)",
            prediction.peak_bytes / GIB,
            gpu,
            total as f64 / GIB,
            prediction.layers_that_fit(total as f64 * 0.9).max(1)
        )));
    }
    Ok(())
}

/// What the steps share with the rest of the run.
struct Ctx<'a> {
    comms: &'a Comms,
    watchdog: &'a Watchdog,
    saver: &'a Saver<'a>,
    reduction: &'a Reduction<'a>,
    /// Device memory the CUDA context and libraries hold outside planc's buffers.
    context_bytes: u64,
}

/// The run's steps and what they keep.
struct Steps<'a> {
    plan: &'a Plan,
    opts: &'a Options,
    world: &'a World,
    prog: &'a Program,
    prediction: &'a Prediction,
    batches: Batches,
    /// Steps already done before this run (a resumed run's), and where this run ends.
    first: u64,
    end: u64,
    tokens_per_step: u64,
    resumed_from: Option<PathBuf>,
    opt_step: u64,
    scale: LossScale,
    metrics: Vec<StepMetrics>,
    spans: Vec<Span>,
    checkpoints: Vec<PathBuf>,
    stopped: Option<Stopped>,
    trace_origin: Instant,
    replay: Replay,
}

/// What a step leaves for the decisions after it.
struct Outcome {
    verdict: Verdict,
    /// Ranks that saw a stop signal.
    signals: f32,
}

impl<'a> Steps<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        plan: &'a Plan,
        opts: &'a Options,
        world: &'a World,
        prog: &'a Program,
        prediction: &'a Prediction,
        batches: Batches,
        start: resume::Start,
        steps: u64,
    ) -> Steps<'a> {
        Steps {
            plan,
            opts,
            world,
            prog,
            prediction,
            tokens_per_step: plan.train.global_batch * batches.seq_len as u64,
            batches,
            first: start.step,
            end: start.step + steps,
            resumed_from: start.from,
            opt_step: start.opt_step,
            scale: LossScale::new(start.loss_scale),
            metrics: Vec::new(),
            spans: Vec::new(),
            checkpoints: Vec::new(),
            stopped: None,
            trace_origin: Instant::now(),
            replay: Replay::new(replay::off_reason(opts.no_graphs, world.size, opts.trace)),
        }
    }

    /// The run's summary, once its steps are done.
    fn summary(self, eng: &Engine, whole: &Params, context_bytes: u64, phases: Phases) -> Summary {
        let prediction = self.prediction;
        Summary {
            device: eng.gpu.name.clone(),
            catalog_gpu: prediction.catalog_gpu.clone(),
            profile: prediction.profile.clone(),
            measured_step_s: metrics::median_step_s(&self.metrics),
            predicted_step_s: prediction.step_s,
            measured_peak_bytes: eng.gpu.peak as u64 + context_bytes,
            predicted_peak_bytes: prediction.peak_bytes as u64,
            memory: eng.memory.clone(),
            predicted_memory: prediction.memory.clone(),
            context_bytes,
            params: whole.count(),
            tokens_per_step: self.tokens_per_step,
            micro_batches: self.prog.micro_batches as u64,
            checkpoints: self.checkpoints,
            resumed_from: self.resumed_from,
            skipped_steps: self.scale.skipped,
            stopped: self.stopped,
            by_kind: metrics::by_kind(&self.spans, prediction),
            spans: self.spans,
            steps: self.metrics,
            startup: phases.done,
            graphs: self.replay.summary(),
        }
    }

    /// Every step, with the checkpoints before the first and after the last.
    fn all(
        &mut self,
        eng: &mut Engine,
        ctx: &Ctx,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), RunError> {
        if self.opts.save.is_some() && self.resumed_from.is_none() {
            let saved = ctx.saver.save(eng, 0, 0, self.scale.scale)?;
            self.checkpoints.extend(saved);
        }
        self.trace_origin = Instant::now();
        if self.world.size > 1 {
            trail::enable();
        }
        for step in self.first..self.end {
            let (m, outcome) = self.step(eng, ctx, step)?;
            on_event(Event::Step(&m));
            self.metrics.push(m);
            if self.after(eng, ctx, step + 1, outcome)? {
                break;
            }
        }
        if self.opts.save.is_some() && self.stopped.is_none() {
            let saved = ctx
                .saver
                .save(eng, self.end, self.opt_step, self.scale.scale)?;
            self.checkpoints.extend(saved);
        }
        Ok(())
    }

    /// One step (`step` counts from 0): the program, the reductions, the update.
    fn step(
        &mut self,
        eng: &mut Engine,
        ctx: &Ctx,
        step: u64,
    ) -> Result<(StepMetrics, Outcome), RunError> {
        let (plan, settings) = (self.plan, &self.plan.train.run);
        let last = step + 1 == self.end;
        // The last step is always timed operation by operation (CUDA events, no host
        // waits), for the by-kind comparison at the end; every step with --trace. Timed
        // steps are launched kernel by kernel, the others replayed (`replay`).
        if self.opts.trace || last {
            eng.marks = Some(Vec::new());
        }
        trail::new_step();
        ctx.watchdog.step(step + 1);
        let t0 = Instant::now();
        // Under fp8, the scales from the amax histories and the weights' casts, launched
        // before the step's program (their history slot changes every step).
        eng.begin_step()?;
        let io = StepIo {
            comms: ctx.comms,
            pp: ctx.reduction.ranks.pp,
            zero: plan.parallel.zero,
            step,
            dscale: 1.0 / self.tokens_per_step as f32 * self.scale.scale,
        };
        let reduced = self
            .replay
            .program(eng, self.prog, &io, &mut self.batches)?;
        // A replayed step stages all its micro-batches before it starts: the next one's
        // are prepared while the GPU runs this one (the step after is timed when last).
        if self.replay.on() && step + 2 < self.end {
            self.batches.prepare_step_ahead(eng, self.prog, step + 1);
        }
        ctx.reduction.gradients(eng, reduced, step)?;
        super::reduce::plant_nan_grad(eng, ctx.reduction, step)?;
        ctx.watchdog.waiting(format!(
            "the step-{} gradient reduction ({})",
            step + 1,
            ctx.comms
                .dp
                .as_ref()
                .map(|c| c.name.as_str())
                .unwrap_or("one rank")
        ));
        let loss = eng.loss_sum(self.prog.micro_batches)? / self.tokens_per_step as f64;
        let precision = plan.train.precision;
        let norm = planc_compiler::plan::planc_takes_grad_norm(precision, settings.grad_clip);
        ctx.reduction
            .queue_norm(eng, loss.is_finite(), step, norm)?;
        if !last {
            self.batches
                .prepare_ahead(eng, step + 1, self.prog.first_forward);
        }
        let sums = ctx.reduction.read(eng, norm)?;
        ctx.watchdog.done();
        let grad_norm = sums.raw_norm.map(|n| n / self.scale.scale as f64);
        // The schedule spans `train.steps` whatever `--steps` says, so a run stopped and
        // resumed follows the same learning rates as one that never stopped.
        let lr = learning_rate(settings, step, settings.steps);
        let mut verdict = stop::judge(precision, sums.losses_not_finite, grad_norm);
        if verdict == Verdict::SkipOverflow {
            self.scale.overflowed();
        } else if verdict == Verdict::Update {
            self.opt_step += 1;
            let zero = plan.parallel.zero;
            let shard = ctx.reduction.shard;
            let figures = (lr, grad_norm, self.scale.scale);
            update::update(
                eng,
                ctx.comms,
                settings,
                zero,
                shard,
                figures,
                self.opt_step,
                Reduction::update_flag(eng, norm),
            )?;
            self.scale.updated(precision);
        }
        // The last span's end.
        eng.mark_end()?;
        ctx.watchdog
            .waiting(format!("the step-{} weight update", step + 1));
        eng.gpu.sync()?;
        // Without a norm the update judged the gradients; every rank reads the world's sum.
        if verdict == Verdict::Update && !norm && ctx.reduction.update_flags(eng)? > 0.0 {
            verdict = Verdict::DivergedInUpdate;
        }
        ctx.watchdog.done();
        ctx.watchdog.step_done();
        let step_s = t0.elapsed().as_secs_f64();
        if let Some(marks) = eng.marks.take() {
            let ended = self.trace_origin.elapsed().as_secs_f64();
            let spans = metrics::spans_of(&marks, step + 1, ended, step_s)?;
            self.spans.extend(spans);
        }
        let tflops = self.prediction.flops_per_gpu_step / step_s / 1e12;
        let m = StepMetrics {
            step: step + 1,
            loss,
            grad_norm,
            lr,
            step_s,
            tokens_per_s: self.tokens_per_step as f64 / step_s,
            tflops_per_gpu: tflops,
            mfu: tflops * 1e12 / self.prediction.peak_flops,
            peak_bytes: eng.gpu.peak as u64 + ctx.context_bytes,
            skipped: (verdict == Verdict::SkipOverflow).then_some(true),
            predicted_step_s: last.then_some(self.prediction.step_s),
            predicted_peak_bytes: last.then_some(self.prediction.peak_bytes as u64),
        };
        let signals = sums.signals;
        Ok((m, Outcome { verdict, signals }))
    }

    /// After step `done` (counted from 1): stop on divergence, save when it is time or a
    /// stop signal came; whether the run stops here.
    fn after(
        &mut self,
        eng: &mut Engine,
        ctx: &Ctx,
        done: u64,
        outcome: Outcome,
    ) -> Result<bool, RunError> {
        if matches!(
            outcome.verdict,
            Verdict::Diverged | Verdict::DivergedInUpdate
        ) {
            return Err(self.diverged(eng, done, outcome.verdict));
        }
        let preempt = stop::stop_after(outcome.signals, done, self.end);
        let periodic = self
            .opts
            .save_every
            .is_some_and(|k| k > 0 && done.is_multiple_of(k) && done != self.end);
        let saved = match self.opts.save.is_some() && (periodic || preempt) {
            true => ctx.saver.save(eng, done, self.opt_step, self.scale.scale)?,
            false => None,
        };
        self.checkpoints.extend(saved.clone());
        if preempt && self.world.size > 1 {
            ctx.reduction.barrier(eng)?;
        }
        if preempt {
            self.stopped = Some(Stopped {
                signal: stop::requested()
                    .map(stop::signal_name)
                    .unwrap_or_else(|| "a stop signal (on another rank)".into()),
                step: done,
                checkpoint: saved,
            });
        }
        Ok(preempt)
    }

    /// The error of a step whose loss or gradient norm is not finite (`verdict`
    /// `Diverged`), or whose update found non-finite gradients (`DivergedInUpdate`),
    /// naming where it shows first (only now, on the way out, the buffers are read).
    fn diverged(&self, eng: &Engine, done: u64, verdict: Verdict) -> RunError {
        let m = self.metrics.last().expect("the step's metrics are kept");
        let total = eng.params.total;
        let in_update = verdict == Verdict::DivergedInUpdate;
        let culprit = match (
            eng.gpu.download::<f32>(eng.w32, total),
            eng.gpu.download::<f32>(eng.grad, total),
        ) {
            // The update has applied the gradients: the weights show what they brought.
            (Ok(_), Ok(gr)) if in_update => match stop::first_non_finite(&eng.params, &gr) {
                Some((name, i, x)) => {
                    format!("the first non-finite gradient is {name}'s ({name}[{i}] = {x})")
                }
                None => "its gradients are not finite on another rank".into(),
            },
            (Ok(w), Ok(gr)) => stop::culprit(&eng.params, &w, &gr),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        let last = self
            .checkpoints
            .last()
            .map(|c: &PathBuf| format!("; the newest checkpoint is {}", c.display()))
            .unwrap_or_default();
        if in_update {
            return RunError::Diverged(format!(
                "step {done}: the loss is {} but the gradients are not finite (found by the \
                 update: with grad_clip = 0 the step takes no gradient norm): training \
                 diverged; on rank {}, {culprit}. Stopped without saving the weights the \
                 update wrote{last} (lower train.lr, lengthen warmup_steps, or set grad_clip)",
                m.loss, self.world.rank,
            ));
        }
        let norm = m
            .grad_norm
            .map_or_else(|| "not taken".to_string(), |n| n.to_string());
        RunError::Diverged(format!(
            "step {done}: the loss is {} and the gradient norm {norm}: training diverged; on \
             rank {}, {culprit}. Stopped without updating or saving these weights{last} \
             (lower train.lr, lengthen warmup_steps, or set grad_clip)",
            m.loss, self.world.rank,
        ))
    }
}

/// Memory in use on a GPU when this rank starts, beyond what its own CUDA context,
/// cuBLAS and NCCL communicators take (about 0.5-1.5 GiB on a Hopper GPU), belongs to
/// another process: it is counted in the measured peak (the GPU's whole use is all a rank
/// can read) and that process may share the GPU's time, so the run says so up front.
fn foreign_memory_note(in_use_at_start: u64, gpu: usize) -> Option<String> {
    const OWN_CONTEXT_AT_MOST: u64 = 3 << 30;
    (in_use_at_start > OWN_CONTEXT_AT_MOST).then(|| {
        format!(
            "warning: GPU {gpu} had {:.1} GiB in use when this rank started, more than its own \
             CUDA context and communicators take: another process holds memory on it (see \
             nvidia-smi); the measured peak memory counts it, and the measured step shares \
             the GPU with it",
            in_use_at_start as f64 / (1u64 << 30) as f64
        )
    })
}

/// The note a run prints where cuDNN's attention holds a workspace other than the one the
/// prediction counted (`cost::buffers::cudnn_attention_bytes`; the size is cuDNN's choice
/// for the shape, known only once its plans are built): one worth saying, 256 MiB apart.
fn workspace_note(held: usize, counted: usize) -> Option<String> {
    (held.abs_diff(counted) > 256 << 20).then(|| {
        let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
        format!(
            "note: cuDNN's fused attention holds a {:.2} GiB workspace for this shape; the \
             predicted memory counted {:.2} GiB for it",
            gib(held),
            gib(counted)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_in_use_beyond_a_context_at_start_is_named_as_another_process() {
        assert_eq!(foreign_memory_note(900 << 20, 0), None);
        let note = foreign_memory_note(26 << 30, 1).expect("26 GiB is not a context");
        assert!(note.contains("GPU 1 had 26.0 GiB in use"), "{note}");
        assert!(note.contains("another process"), "{note}");
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
            ("tp = 1, pp = 1, dp = 8, zero = 1, offload = optimizer", ""),
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
    fn a_cudnn_workspace_other_than_the_counted_one_is_said() {
        assert_eq!(workspace_note(64 << 20, 0), None);
        assert_eq!(workspace_note(5 << 30, (5 << 30) - (100 << 20)), None);
        let note = workspace_note(5 << 30, 1 << 30).expect("4 GiB apart is worth saying");
        assert!(
            note.contains("5.00 GiB") && note.contains("counted 1.00 GiB"),
            "{note}"
        );
    }
}
