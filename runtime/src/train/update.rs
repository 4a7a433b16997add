//! The update after a step's reductions: the learning-rate schedule, clipping, fp16 loss
//! scaling (a step whose scaled gradients overflowed is skipped and the scale halved), the
//! optimizer over this rank's shard, and the ZeRO gather of the updated master weights.

use planc_compiler::plan::{LrSchedule, Precision, RunSettings};

use super::engine::Engine;
use super::ranks::Comms;
use crate::device::cuda::Buf;
use crate::error::RunError;

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

/// fp16's loss scale: halved on an overflow (the step skipped), doubled after 1000 good
/// steps in a row. Other precisions keep 1.
pub struct LossScale {
    pub scale: f32,
    good_steps: u64,
    /// Steps skipped because the scaled gradients overflowed.
    pub skipped: u64,
}

impl LossScale {
    pub fn new(scale: f32) -> LossScale {
        LossScale {
            scale,
            good_steps: 0,
            skipped: 0,
        }
    }

    /// An overflowed step: skipped, the scale halved.
    pub fn overflowed(&mut self) {
        self.scale = (self.scale / 2.0).max(1.0);
        self.good_steps = 0;
        self.skipped += 1;
    }

    /// A step that updated the weights.
    pub fn updated(&mut self, precision: Precision) {
        if precision == Precision::Fp16 {
            self.good_steps += 1;
            if self.good_steps.is_multiple_of(1000) {
                self.scale *= 2.0;
            }
        }
    }
}

/// One optimizer update of this rank's `shard` with learning rate `lr`: the gradients
/// clipped to `settings.grad_clip` by their norm (`None` where the step took none, with
/// nothing to clip) and unscaled by `loss_scale`; `opt_step`
/// counts updates from 1; `nonfinite` (or null) the f32 the update sets on a gradient that
/// is not finite. Under ZeRO every rank's updated shard of the master weights goes to every
/// rank.
#[allow(clippy::too_many_arguments)]
pub fn update(
    eng: &Engine,
    comms: &Comms,
    settings: &RunSettings,
    zero: u64,
    shard: (usize, usize),
    (lr, grad_norm, loss_scale): (f64, Option<f64>, f32),
    opt_step: u64,
    nonfinite: Buf,
) -> Result<(), RunError> {
    let clip = match grad_norm {
        Some(n) if settings.grad_clip > 0.0 && n > settings.grad_clip => {
            settings.grad_clip / (n + 1e-6)
        }
        _ => 1.0,
    };
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
        nonfinite,
    )?;
    if let (Some(c), true) = (&comms.dp, zero >= 1) {
        // Every rank's updated shard of the master weights, to every rank.
        let (lo, hi) = shard;
        c.all_gather(
            eng.w32.at(lo, 4),
            eng.w32,
            hi - lo,
            4,
            eng.gpu.stream as u64,
        )?;
        eng.refresh_compute_copy()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
