//! What a run reports: each step's metrics line, the spans of a traced step, the start by
//! phase, the summary at the end, and the last step's time by kind of work beside the cost
//! model's (`cost::kinds`).

use std::path::PathBuf;

use planc_compiler::cost::kinds::WorkKind;
use serde::Serialize;

use super::engine::{Mark, MemoryPlan};
use super::predict;
use crate::error::RunError;

/// One step's figures: the contract's metrics line.
#[derive(Clone, Debug, Serialize)]
pub struct StepMetrics {
    pub step: u64,
    pub loss: f64,
    /// `None` (JSON null) where the step took no norm: `grad_clip = 0` outside fp16.
    pub grad_norm: Option<f64>,
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
    /// What the step by kind sums it under, as the engine marked it (the trace's content
    /// stays the names and times).
    #[serde(skip)]
    pub kind: Option<WorkKind>,
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
    /// How the steps were launched: replayed from a CUDA graph, or kernel by kernel.
    pub graphs: Graphs,
}

/// How a run's steps were launched (`train::replay`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Graphs {
    /// Steps whose program was replayed from one CUDA graph (the others, the first and
    /// the timed ones, launched it kernel by kernel).
    pub replayed_steps: u64,
    /// Why no step was replayed (or, after a failed recording, none after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off: Option<String>,
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
pub(super) struct Phases {
    last: std::time::Instant,
    pub(super) done: Vec<StartPhase>,
}

impl Phases {
    pub(super) fn start() -> Phases {
        Phases {
            last: std::time::Instant::now(),
            done: Vec::new(),
        }
    }

    pub(super) fn mark(&mut self, phase: &'static str) -> &StartPhase {
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

/// The last step's spans summed by kind, next to the prediction's kinds.
pub(super) fn by_kind(spans: &[Span], prediction: &predict::Prediction) -> Vec<KindRow> {
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
        let Some(kind) = sp.kind else {
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

/// The spans between a traced step's marks (the last mark ends the last span), placed on
/// the run's clock: the step ended `ended_s` after the trace's origin and took `step_s`.
pub(super) fn spans_of(
    marks: &[Mark],
    step: u64,
    ended_s: f64,
    step_s: f64,
) -> Result<Vec<Span>, RunError> {
    let base = ended_s - step_s;
    let mut spans = Vec::new();
    for w in marks.windows(2) {
        let dur = w[0].event.ms_to(&w[1].event)? as f64 / 1e3;
        let at = marks[0].event.ms_to(&w[0].event)? as f64 / 1e3;
        spans.push(Span {
            step,
            name: w[0].name.clone(),
            kind: w[0].kind,
            start_s: base + at,
            dur_s: dur,
        });
    }
    Ok(spans)
}

/// Median step time over the steps after the first (which includes warm-up).
pub(super) fn median_step_s(steps: &[StepMetrics]) -> f64 {
    let mut times: Vec<f64> = steps.iter().skip(1).map(|m| m.step_s).collect();
    if times.is_empty() {
        times = steps.iter().map(|m| m.step_s).collect();
    }
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use planc_compiler::cost::kinds::WorkKind as K;

    fn span(name: &str, kind: Option<K>, dur_s: f64) -> Span {
        Span {
            step: 3,
            name: name.into(),
            kind,
            start_s: 0.0,
            dur_s,
        }
    }

    #[test]
    fn the_step_by_kind_sums_spans_by_the_kind_they_were_marked_with_not_their_names() {
        let prediction = predict::predict(&tiny_plan(), "NVIDIA H100 80GB HBM3");
        let spans = [
            span("L0 attention norm", Some(K::Norms), 0.001),
            // A collective inside a product's span: communication, whatever its name says.
            span(
                "L0 attention projection: tensor-parallel all-reduce",
                Some(K::Communication),
                0.002,
            ),
            span("L1 mlp norm", Some(K::Norms), 0.004),
            // Named like a norm, marked as a product: the mark decides.
            span("L1 mlp norm-like product", Some(K::Linear), 0.008),
            span("end", None, 0.5),
        ];
        let rows = by_kind(&spans, &prediction);
        let measured = |k| rows.iter().find(|r| r.kind == k).map(|r| r.measured_s);
        assert_eq!(measured(K::Norms), Some(0.005));
        assert_eq!(measured(K::Communication), Some(0.002));
        assert_eq!(measured(K::Linear), Some(0.008));
        let total: f64 = rows.iter().map(|r| r.measured_s).sum();
        assert!(
            (total - 0.015).abs() < 1e-12,
            "the end mark ends a span, adds none: {total}"
        );
    }

    fn tiny_plan() -> planc_compiler::plan::Plan {
        let text = "cluster c { nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }
             model m { layers = 2, hidden = 256, heads = 4, vocab = 512, seq_len = 128 }
             train { global_batch = 2, precision = bf16 }
             parallel { micro_batch = 1 }";
        let c = planc_compiler::check::check_source("t.tp", text);
        c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics))
    }
}
