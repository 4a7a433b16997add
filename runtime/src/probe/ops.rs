//! `planc run --ops`: the plan's own operations executed on a local GPU and timed, next to
//! what the cost model predicts for them.
//!
//! The operations are the compiler's per-layer list (`cost::ops::layer_forward`): the same
//! matrix products, at the same per-GPU shapes after tensor/sequence/context sharding, that
//! the closed form and the simulator price. Matrix products run through cuBLAS in the
//! plan's precision; the norms, the MLP activation and the attention core run on the
//! training kernels; other memory-bound kernels are stood in for by a device-to-device copy
//! of the same bytes; collectives run with NCCL across the local GPUs (see `collectives`).
//! The measured/predicted ratios give the device's achievable efficiencies, the two
//! constants the catalog takes from datasheets.
//!
//! CUDA is loaded when a run starts (cudarc's dynamic loading), so planc builds and runs
//! everywhere; without a driver, [`measure`] returns [`RunError::NoDriver`].

use planc_compiler::cost::comm::Collective;
use planc_compiler::cost::ops::{layer_forward, FusedKernel, Group, OpKind};
use planc_compiler::cost::standard_attention::Core;
use planc_compiler::cost::time::Device;
use planc_compiler::plan::{Attention, Gpu, Mlp, Plan, Precision};
use serde::Serialize;

use super::{calibrate, collectives, gpu};
use crate::device;
use crate::error::RunError;
use crate::train::predict::catalog_gpu_for;

#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    pub name: &'static str,
    /// `gemm`, `memory`, `attention` or `collective`.
    pub kind: &'static str,
    /// `m×n×k` for products, bytes for the rest.
    pub shape: String,
    /// None where the model prices the operation elsewhere (collectives are placed on the
    /// fabric by the group they run over, which one GPU does not see).
    pub predicted_s: Option<f64>,
    /// With a device profile: what the catalog's constants alone predict (the "before
    /// calibration" of `predicted_s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_constants_s: Option<f64>,
    /// None where the operation is not run (see `note`).
    pub measured_s: Option<f64>,
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// As the driver names it.
    pub device: String,
    /// The catalog entry the predictions use.
    pub catalog_gpu: String,
    pub repeats: usize,
    pub ops: Vec<Measured>,
    /// Σ measured / Σ predicted over the operations of each kind that ran.
    pub gemm_ratio: Option<f64>,
    pub memory_ratio: Option<f64>,
    pub collective_ratio: Option<f64>,
    /// With a device profile: the same ratios against the constants' predictions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gemm_ratio_constants: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_ratio_constants: Option<f64>,
    /// Whether the predictions come from a measured device profile.
    pub profiled: bool,
    /// The catalog's efficiencies corrected by the ratios: what this device reaches.
    pub measured_gemm_efficiency: Option<f64>,
    pub measured_memory_efficiency: Option<f64>,
    pub catalog_gemm_efficiency: f64,
    pub catalog_memory_efficiency: f64,
}

/// An operation listed with its prediction but not executed, and why.
fn not_run(
    name: &'static str,
    kind: &'static str,
    shape: String,
    predicted_s: Option<f64>,
    why: impl Into<String>,
) -> Measured {
    Measured {
        name,
        kind,
        shape,
        predicted_s,
        predicted_constants_s: None,
        measured_s: None,
        note: Some(why.into()),
    }
}

/// Runs one layer's forward operations of `plan` (and the attention core's backward) on
/// GPU 0, `repeats` times each, and reports the median time of each next to the
/// prediction.
pub fn measure(plan: &Plan, repeats: usize) -> Result<RunReport, RunError> {
    let precision = plan.train.precision;
    if !matches!(
        precision,
        Precision::Bf16 | Precision::Fp16 | Precision::Fp32
    ) {
        return Err(RunError::Precision(precision));
    }
    let mut runner = gpu::Runner::open(precision)?;
    let catalog = catalog_gpu_for(&runner.device_name, &plan.cluster.groups[0].gpu);
    let mut bare = catalog.clone();
    bare.profile = None;
    let prices = Prices {
        dev: Device {
            gpu: &catalog,
            precision,
        },
        constants: Device {
            gpu: &bare,
            precision,
        },
        profiled: catalog.profile.is_some(),
    };
    let repeats = repeats.max(3);
    let mut nccl = Communicators::new();
    let mut layer = Layer::default();
    for op in layer_forward(plan) {
        let name = op.name();
        let m = match op.kind {
            OpKind::Collective {
                op: c,
                bytes,
                group,
            } => {
                let local_gpus = runner.gpu_count;
                time_collective(
                    plan,
                    name,
                    (c, bytes, group),
                    local_gpus,
                    &mut nccl,
                    repeats,
                )?
            }
            kind => layer.list(name, kind, &prices, &mut runner, repeats)?,
        };
        layer.ops.push(m);
    }
    let device = runner.device_name.clone();
    // The attention core's, the norms' and the activation's forwards at the plan's
    // per-GPU shape, as training launches them (their own context: the products' runner
    // and the communicators go first).
    drop(nccl);
    drop(runner);
    layer.time_on_training_kernels(plan, precision)?;
    Ok(report(
        device,
        &catalog,
        repeats,
        layer.ops,
        prices.profiled,
    ))
}

/// What an operation is predicted to take: by the plan's device (with its profile where
/// it has one) and by the catalog's constants alone.
struct Prices<'a> {
    dev: Device<'a>,
    constants: Device<'a>,
    profiled: bool,
}

impl Prices<'_> {
    /// The constants' prediction, shown only beside a profile's.
    fn before(&self, t: f64) -> Option<f64> {
        self.profiled.then_some(t)
    }
}

/// NCCL's communicators by group size, opened when a collective first needs one (None:
/// NCCL is not installed).
type Communicators = std::collections::HashMap<usize, Option<collectives::Collectives>>;

/// The layer's operations as listed, and where those timed later on the training kernels
/// sit in the list.
#[derive(Default)]
struct Layer {
    ops: Vec<Measured>,
    attention_at: Option<usize>,
    attention_backward: Option<Measured>,
    norms_at: Vec<usize>,
    activation_at: Option<(usize, Mlp)>,
}

impl Layer {
    /// One operation of the layer other than a collective: products and copies timed
    /// now, the training kernels' operations noted to be timed later.
    fn list(
        &mut self,
        name: &'static str,
        kind: OpKind,
        prices: &Prices,
        runner: &mut gpu::Runner,
        repeats: usize,
    ) -> Result<Measured, RunError> {
        let (dev, constants) = (&prices.dev, &prices.constants);
        let before = |t: f64| prices.before(t);
        Ok(match kind {
            OpKind::Gemm { m, n, k } => {
                let (mi, ni, ki) = (m.round() as usize, n.round() as usize, k.round() as usize);
                Measured {
                    name,
                    kind: "gemm",
                    shape: format!("{mi}×{ni}×{ki}"),
                    predicted_s: Some(dev.gemm(m, n, k)),
                    predicted_constants_s: before(constants.gemm(m, n, k)),
                    measured_s: Some(runner.gemm(mi, ni, ki, repeats)?),
                    note: None,
                }
            }
            OpKind::GroupedGemm { count, m, n, k } => {
                let (mi, ni, ki) = (m.round() as usize, n.round() as usize, k.round() as usize);
                // One expert's product timed, as many times as there are local experts.
                Measured {
                    name,
                    kind: "gemm",
                    shape: format!("{count}×({mi}×{ni}×{ki})"),
                    predicted_s: Some(count * dev.gemm(m, n, k)),
                    predicted_constants_s: before(count * constants.gemm(m, n, k)),
                    measured_s: Some(count * runner.gemm(mi, ni, ki, repeats)?),
                    note: Some("one expert's product timed, times the local experts".into()),
                }
            }
            OpKind::Memory { bytes }
            | OpKind::Layout { bytes, .. }
            | OpKind::Epilogue { bytes, .. }
            | OpKind::Cast { bytes, .. } => Measured {
                name,
                kind: "memory",
                shape: format!("{:.0} B", bytes),
                predicted_s: Some(dev.memory(bytes)),
                predicted_constants_s: before(constants.memory(bytes)),
                measured_s: Some(runner.copy(bytes as usize, repeats)?),
                note: Some("timed as a device-to-device copy of the same bytes".into()),
            },
            OpKind::Norm { bytes, width, .. } => {
                // Timed later, on the training kernels' own context.
                self.norms_at.push(self.ops.len());
                Measured {
                    name,
                    kind: "norm",
                    shape: format!("{:.0} B", bytes),
                    // What runs here is planc's kernel, whatever the plan's framework.
                    predicted_s: Some(dev.norm(bytes, width, true)),
                    predicted_constants_s: before(constants.norm(bytes, width, true)),
                    measured_s: None,
                    note: None,
                }
            }
            OpKind::Activation {
                bytes, width, mlp, ..
            } => {
                // Timed later, on the training kernels' own context.
                self.activation_at = Some((self.ops.len(), mlp));
                Measured {
                    name,
                    kind: "activation",
                    shape: format!("{:.0} B", bytes),
                    // What runs here is planc's kernel, whatever the plan's framework.
                    predicted_s: Some(dev.activation(bytes, width, mlp, true)),
                    predicted_constants_s: before(constants.activation(bytes, width, mlp, true)),
                    measured_s: None,
                    note: None,
                }
            }
            OpKind::StandardAttention(core) => self.list_standard_attention(name, core, prices),
            OpKind::FlashAttention {
                flops,
                seq,
                head_dim,
                ..
            } => {
                // Timed later, on the training kernels' own context, with its backward
                // (the larger share of the attention's step, priced by its own points).
                self.attention_at = Some(self.ops.len());
                self.attention_backward = Some(Measured {
                    name: "attention_backward",
                    kind: "attention",
                    shape: format!("{flops:.3e} FLOP"),
                    predicted_s: Some(dev.flash_backward(flops, seq, head_dim, FusedKernel::Planc)),
                    predicted_constants_s: before(constants.flash_backward(
                        flops,
                        seq,
                        head_dim,
                        FusedKernel::Planc,
                    )),
                    measured_s: None,
                    note: None,
                });
                Measured {
                    name,
                    kind: "attention",
                    shape: format!("{flops:.3e} FLOP"),
                    // What runs here is planc's kernel, whatever the plan's framework.
                    predicted_s: Some(dev.flash(flops, seq, head_dim, FusedKernel::Planc)),
                    predicted_constants_s: before(constants.flash(
                        flops,
                        seq,
                        head_dim,
                        FusedKernel::Planc,
                    )),
                    measured_s: None,
                    note: None,
                }
            }
            OpKind::Collective { .. } => unreachable!("collectives are timed by time_collective"),
            OpKind::RingExchange { bytes, .. } => not_run(
                name,
                "collective",
                format!("{bytes:.0} B"),
                None,
                "not run: the context-parallel ring is not driven yet",
            ),
            // planc's own runtime has no unfused path (`job.kernels` is its own there).
            OpKind::Unfused(_) => not_run(
                name,
                "unfused",
                String::new(),
                None,
                "not run: a framework's unfused kernels, not planc's",
            ),
        })
    }

    /// The standard attention core, timed later on the training kernels' own context with
    /// its backward (four products and the softmax's backward: not twice the forward) from
    /// kept probabilities. What runs here is planc's kernels, whatever the plan's framework.
    fn list_standard_attention(
        &mut self,
        name: &'static str,
        core: Core,
        prices: &Prices,
    ) -> Measured {
        let (dev, constants) = (&prices.dev, &prices.constants);
        let core = Core {
            planc: true,
            recomputes_probs: false,
            ..core
        };
        self.attention_at = Some(self.ops.len());
        let shape = format!("{:.3e} FLOP", core.causal_flops());
        self.attention_backward = Some(Measured {
            name: "attention_core_backward",
            kind: "attention",
            shape: shape.clone(),
            predicted_s: Some(dev.standard_attention_backward(&core)),
            predicted_constants_s: prices.before(constants.standard_attention_backward(&core)),
            measured_s: None,
            note: None,
        });
        Measured {
            name,
            kind: "attention",
            shape,
            predicted_s: Some(dev.standard_attention(&core)),
            predicted_constants_s: prices.before(constants.standard_attention(&core)),
            measured_s: None,
            note: None,
        }
    }

    /// The attention core's, the norms' and the activation's forwards at the plan's
    /// per-GPU shape, as training launches them, written into the operations listed.
    fn time_on_training_kernels(
        &mut self,
        plan: &Plan,
        precision: Precision,
    ) -> Result<(), RunError> {
        let p = &plan.parallel;
        let m = &plan.model;
        let mut gpu = device::cuda::Gpu::open(0, precision)?;
        if !self.norms_at.is_empty() {
            let sp = if p.sequence_parallel { p.tp } else { 1 };
            let rows = (p.micro_batch * m.seq_len / p.cp / sp) as usize;
            let width = m.hidden as usize;
            let fwd = calibrate::norm_points(&mut gpu, precision, rows, width)?
                .into_iter()
                .next();
            for &i in &self.norms_at {
                self.ops[i].measured_s = fwd.as_ref().map(|n| n.seconds);
                self.ops[i].shape = format!("{rows} rows × {width}");
            }
        }
        if let Some((i, mlp)) = self.activation_at {
            // Every token of the micro-batch (gathered under sequence parallelism), this
            // rank's share of F.
            let rows = (p.micro_batch * m.seq_len / p.cp) as usize;
            let width = (m.ffn_hidden / p.tp) as usize;
            let probe = calibrate::ActivationProbe::new(&mut gpu, precision, rows * width)?;
            let fwd = probe.points(&gpu, mlp, rows, width)?.into_iter().next();
            probe.free(&mut gpu)?;
            self.ops[i].measured_s = fwd.map(|a| a.seconds);
            self.ops[i].shape = format!("{rows} rows × {width}");
        }
        if let Some(i) = self.attention_at {
            let (bh, t, d) = (
                (p.micro_batch * m.heads / p.tp) as usize,
                (m.seq_len / p.cp) as usize,
                m.head_dim as usize,
            );
            // Forward and backward points.
            let mut both = match plan.train.attention {
                Attention::Flash => calibrate::flash_points(&mut gpu, precision, bh, t, d)?.0,
                Attention::Standard => {
                    let blas = device::blas::Blas::new(&gpu, precision)?;
                    calibrate::standard_points(&mut gpu, &blas, precision, bh, t, d)?
                }
            };
            if let (Some(mut b), Some(p)) = (self.attention_backward.take(), both.pop()) {
                b.measured_s = Some(p.seconds);
                b.shape = format!("{bh} heads × {t} × {d}");
                self.ops.insert(i + 1, b);
            }
            let point = both.into_iter().next();
            self.ops[i].measured_s = point.map(|a| a.seconds);
            self.ops[i].shape = format!("{bh} heads × {t} × {d}");
        }
        Ok(())
    }
}

/// A collective of the layer, run with NCCL over as many of its group's GPUs as this
/// machine has (not run below two).
fn time_collective(
    plan: &Plan,
    name: &'static str,
    (c, bytes, group): (Collective, f64, Group),
    local_gpus: usize,
    nccl: &mut Communicators,
    repeats: usize,
) -> Result<Measured, RunError> {
    let g = collectives::group_size(plan, group) as usize;
    let k = g.min(local_gpus);
    let shape = format!("{bytes:.0} B");
    if k < 2 {
        return Ok(not_run(
            name,
            "collective",
            shape,
            None,
            format!("not run: a group of {g} needs {g} GPUs, this machine has {local_gpus}"),
        ));
    }
    if let std::collections::hash_map::Entry::Vacant(e) = nccl.entry(k) {
        e.insert(collectives::Collectives::open(k)?);
    }
    Ok(match &nccl[&k] {
        None => not_run(
            name,
            "collective",
            shape,
            None,
            "not run: NCCL (libnccl.so) not found",
        ),
        Some(comm) => Measured {
            name,
            kind: "collective",
            shape,
            predicted_s: Some(collectives::predict(plan, c, bytes, k)),
            predicted_constants_s: None,
            measured_s: Some(comm.time(c, bytes, repeats)?),
            note: (k < g).then(|| format!("over {k} of the group's {g} GPUs, predicted for {k}")),
        },
    })
}

/// The report: the operations with Σ measured / Σ predicted by kind, and the catalog's
/// efficiencies corrected by those ratios.
fn report(
    device: String,
    catalog: &Gpu,
    repeats: usize,
    ops: Vec<Measured>,
    profiled: bool,
) -> RunReport {
    let ratio_of = |kind: &str, pred: fn(&Measured) -> Option<f64>| {
        let (p, m) = ops
            .iter()
            .filter(|o| o.kind == kind)
            .filter_map(|o| Some((pred(o)?, o.measured_s?)))
            .fold((0.0, 0.0), |(p, m), (a, b)| (p + a, m + b));
        (p > 0.0 && m > 0.0).then_some(m / p)
    };
    let ratio = |kind: &str| ratio_of(kind, |o| o.predicted_s);
    let ratio_constants = |kind: &str| ratio_of(kind, |o| o.predicted_constants_s);
    let gemm_ratio_constants = ratio_constants("gemm");
    let memory_ratio_constants = ratio_constants("memory");
    let gemm_ratio = ratio("gemm");
    let memory_ratio = ratio("memory");
    let collective_ratio = ratio("collective");
    RunReport {
        device,
        catalog_gpu: catalog.name.clone(),
        repeats,
        ops,
        gemm_ratio,
        memory_ratio,
        collective_ratio,
        gemm_ratio_constants,
        memory_ratio_constants,
        profiled,
        measured_gemm_efficiency: gemm_ratio.map(|r| catalog.gemm_efficiency / r),
        measured_memory_efficiency: memory_ratio.map(|r| catalog.memory_efficiency / r),
        catalog_gemm_efficiency: catalog.gemm_efficiency,
        catalog_memory_efficiency: catalog.memory_efficiency,
    }
}
