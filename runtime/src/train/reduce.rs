//! The step's sums across ranks after its program: the gradients over the data-parallel
//! group (what the layers' hooks did not cover, or the distributed optimizer's
//! reduce-scatter), the loss over the pipeline and the data-parallel group, and the
//! gradient norm with every rank's stop flags, so that every rank stops, or not, after the
//! same step.

use super::engine::Engine;
use super::model::Tensor;
use super::ranks::{Comms, Ranks};
use super::stop;
use crate::device::cuda::Buf;
use crate::device::trail;
use crate::error::RunError;
use planc_compiler::cost::kinds::WorkKind;

/// Where the step's reductions run and over what.
pub struct Reduction<'a> {
    pub comms: &'a Comms,
    pub ranks: Ranks,
    pub zero: u64,
    /// This rank's range of the gradients under ZeRO (all of them without).
    pub shard: (usize, usize),
    pub micro_batches: usize,
    /// The fault the tests plant on this rank (`PLANC_FAULT`), read when the run starts.
    pub fault: Fault,
    /// Whether this rank's stage holds the last stage's copy of a tied embedding.
    pub tied_copy: bool,
}

/// The gradient norm and the flags summed over every rank.
pub struct Sums {
    /// Ranks that saw a stop signal.
    pub signals: f32,
    /// Ranks whose loss was not finite.
    pub losses_not_finite: f32,
    /// The norm of the (still loss-scaled) gradients over the whole model; `None` where
    /// the step took none (`planc_compiler::plan::planc_takes_grad_norm`).
    pub raw_norm: Option<f64>,
}

impl Reduction<'_> {
    /// The gradients and the loss, summed; `reduced` are the ranges the layers' hooks
    /// already all-reduced. `step` counts from 0.
    pub fn gradients(
        &self,
        eng: &mut Engine,
        mut reduced: Vec<(usize, usize)>,
        step: u64,
    ) -> Result<(), RunError> {
        eng.mark_step(WorkKind::Communication, "gradient reduction")?;
        trail::doing(format!(
            "step {}: the loss and the gradient reduction after the last backward",
            step + 1
        ));
        let (stream, comm_stream) = (eng.gpu.stream as u64, eng.gpu.comm as u64);
        // The loss is the last stage's: summed over the pipeline (zero elsewhere).
        if let Some(c) = &self.comms.pp {
            c.all_reduce_sum(eng.loss_sums, self.micro_batches, stream)?;
        }
        if let Some(c) = &self.comms.dp {
            let padded = eng.shape.padded(eng.params.total);
            if self.zero == 0 {
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
                let (lo, hi) = self.shard;
                c.reduce_scatter_sum(eng.grad, eng.grad.at(lo, 4), hi - lo, stream)?;
            }
            // The hang test's planted stall (`Fault::Stall`).
            if self.fault == Fault::Stall(step + 1) {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                }
            }
            c.all_reduce_sum(eng.loss_sums, self.micro_batches, stream)?;
        }
        // The norms' and row-parallel biases' gradients of a sequence-parallel rank cover
        // its tokens only (a sum: before or after the data-parallel one alike).
        eng.tp_reduce_partial_grads()
    }

    /// Queues the gradient norm's sums (where `norm`, `planc_takes_grad_norm`) and this rank's
    /// flags (a stop signal seen, a loss not finite) on the GPU; [`Reduction::read`] reads
    /// them.
    pub fn queue_norm(
        &self,
        eng: &mut Engine,
        loss_finite: bool,
        step: u64,
        norm: bool,
    ) -> Result<(), RunError> {
        let total = eng.params.total;
        // The norm over the whole model: of this rank's shard under ZeRO, summed over ranks.
        let norm_range = if self.comms.dp.is_some() && self.zero >= 1 {
            self.shard
        } else {
            (0, total)
        };
        // Σ g² of this rank's tensors [0], of those every tensor-parallel rank holds whole
        // [1], and of the last stage's copy of a tied embedding [2]; summed over the
        // groups whose ranks hold different tensors, each tensor then counted once:
        // Σ(all) − (tp − 1)/tp · Σ(whole) − Σ(copy).
        eng.mark_step(WorkKind::Optimizer, "optimizer")?;
        trail::doing(format!(
            "step {}: the gradient norm and the update",
            step + 1
        ));
        // The sums' slots and the update's flag.
        eng.gpu.zero(Buf {
            bytes: (stop::UPDATE_FLAG + 1) * 4,
            ..eng.scalars
        })?;
        if norm {
            eng.grad_sumsq(norm_range, eng.scalars)?;
            if self.ranks.tp > 1 {
                eng.whole_sumsq(norm_range, eng.scalars.at(1, 4))?;
            }
            if self.tied_copy {
                eng.sumsq_of(norm_range, eng.scalars.at(2, 4), |t| t == Tensor::Wte)?;
            }
        }
        // This rank's flags join the sums, so that every rank stops, or not, after this
        // same step.
        let flags = stop::flags(stop::requested().is_some(), loss_finite);
        eng.gpu
            .upload(eng.scalars.at(stop::FLAG_SLOTS.start, 4), &flags)?;
        let (r, stream) = (&self.ranks, eng.gpu.stream as u64);
        for (axis, slots) in stop::scalar_sums(r.tp, r.pp, r.dp, self.zero) {
            let c = self.comms.of_axis(axis);
            c.all_reduce_sum(eng.scalars.at(slots.start, 4), slots.len(), stream)?;
        }
        Ok(())
    }

    /// The sums [`Reduction::queue_norm`] queued, with the norm where it took one (`norm`;
    /// waits for the GPU).
    pub fn read(&self, eng: &Engine, norm: bool) -> Result<Sums, RunError> {
        let tp = self.ranks.tp;
        let sums: Vec<f32> = eng.gpu.download(eng.scalars, stop::SLOTS)?;
        let (signals, losses_not_finite) = (sums[stop::FLAG_SLOTS][0], sums[stop::FLAG_SLOTS][1]);
        let whole_part = sums[1] as f64 * (tp - 1) as f64 / tp as f64 + sums[2] as f64;
        Ok(Sums {
            signals,
            losses_not_finite,
            raw_norm: norm.then(|| (sums[0] as f64 - whole_part).max(0.0).sqrt()),
        })
    }

    /// Where the update flags non-finite gradients in a step that took no norm (`norm`
    /// false), the f32 it sets (zeroed by `queue_norm`); null otherwise.
    pub fn update_flag(eng: &Engine, norm: bool) -> Buf {
        match norm {
            true => Buf::NULL,
            false => eng.scalars.at(stop::UPDATE_FLAG, 4),
        }
    }

    /// After an update that flagged its gradients ([`Reduction::update_flag`]): how many
    /// ranks found one not finite, summed along every axis so that all stop alike (waits
    /// for the GPU).
    pub fn update_flags(&self, eng: &Engine) -> Result<f32, RunError> {
        let flag = eng.scalars.at(stop::UPDATE_FLAG, 4);
        self.sum_over_world(eng, flag)?;
        Ok(eng.gpu.download::<f32>(flag, 1)?[0])
    }

    /// A barrier after a stop's checkpoint: no rank ends (and no launcher such as srun
    /// --kill-on-bad-exit kills the rest) before rank 0 has written it.
    pub fn barrier(&self, eng: &Engine) -> Result<(), RunError> {
        self.sum_over_world(eng, eng.scalars.at(stop::FLAG_SLOTS.start, 4))?;
        eng.gpu.sync()
    }

    /// Queues the sum of the f32 at `x` over every rank: summed along every axis in turn,
    /// every rank's result needs every rank's part.
    fn sum_over_world(&self, eng: &Engine, x: Buf) -> Result<(), RunError> {
        let (r, stream) = (&self.ranks, eng.gpu.stream as u64);
        for (axis, _) in stop::scalar_sums(r.tp, r.pp, r.dp, self.zero) {
            self.comms.of_axis(axis).all_reduce_sum(x, 1, stream)?;
        }
        Ok(())
    }
}

/// A fault the tests plant (`PLANC_FAULT=KIND:RANK:STEP`, steps counted from 1) on the rank
/// it names; `Fault::None` on the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    #[default]
    None,
    /// `stall:RANK:STEP`: the rank stops taking part before the step's loss reduction,
    /// holding its GPU, as a rank stuck in I/O or a debugger would (the hang test; skipping
    /// one collective instead is not a hang: NCCL pairs the rank's next collective with the
    /// peers' skipped one and completes both, with mismatched counts).
    Stall(u64),
    /// `nan-grad:RANK:STEP`: a NaN in the rank's first gradient of its shard after the
    /// step's reductions, as an overflow in backward would leave it, so that the stop is
    /// tested with and without the norm (`grad_clip = 0`, where only the update can find it;
    /// runtime/tests/gpu/keep.sh `diverge0`).
    NanGrad(u64),
}

impl Fault {
    /// Rank `rank`'s fault in `PLANC_FAULT`'s value `spec`; an error naming the forms it
    /// takes for anything else, so that a misspelt fault fails the test that set it instead
    /// of planting nothing.
    pub fn parse(spec: &str, rank: usize) -> Result<Fault, String> {
        let bad = || {
            format!(
                "PLANC_FAULT={spec} is not a fault planc plants: set stall:RANK:STEP or \
                 nan-grad:RANK:STEP (steps from 1), or unset it"
            )
        };
        let mut parts = spec.split(':');
        let (kind, on, step) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(k), Some(r), Some(s), None) => (k, r.parse::<usize>(), s.parse::<u64>()),
            _ => return Err(bad()),
        };
        let (on, step) = match (on, step) {
            (Ok(r), Ok(s)) if s >= 1 => (r, s),
            _ => return Err(bad()),
        };
        let fault = match kind {
            "stall" => Fault::Stall(step),
            "nan-grad" => Fault::NanGrad(step),
            _ => return Err(bad()),
        };
        Ok(if on == rank { fault } else { Fault::None })
    }

    /// This rank's fault from the environment (`Fault::None` where `PLANC_FAULT` is unset).
    pub fn from_env(rank: usize) -> Result<Fault, RunError> {
        match std::env::var("PLANC_FAULT") {
            Ok(spec) => Fault::parse(&spec, rank).map_err(RunError::Usage),
            Err(_) => Ok(Fault::None),
        }
    }
}

/// Plants a `Fault::NanGrad` of step `step` (counted from 0), after its reductions.
pub fn plant_nan_grad(eng: &Engine, red: &Reduction, step: u64) -> Result<(), RunError> {
    if red.fault == Fault::NanGrad(step + 1) {
        eng.gpu.upload(eng.grad.at(red.shard.0, 4), &[f32::NAN])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Fault;

    #[test]
    fn a_planted_fault_is_read_once_for_the_rank_it_names_and_a_misspelt_one_refused() {
        assert_eq!(Fault::parse("stall:1:3", 1), Ok(Fault::Stall(3)));
        assert_eq!(Fault::parse("stall:1:3", 0), Ok(Fault::None));
        assert_eq!(Fault::parse("nan-grad:0:3", 0), Ok(Fault::NanGrad(3)));
        for bad in [
            "nan_grad:0:3",
            "stall:1",
            "stall:x:3",
            "stall:0:0",
            "stall:0:3:1",
            "",
        ] {
            let e = Fault::parse(bad, 0).unwrap_err();
            assert!(e.contains("stall:RANK:STEP") && e.contains(bad), "{e}");
        }
    }
}
