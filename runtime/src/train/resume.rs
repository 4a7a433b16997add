//! Where a run starts: the seed's weights, or the newest checkpoint's with the optimizer's
//! moments, step and loss scale; and the refusal to write into a folder of checkpoints that
//! the run does not continue.

use std::path::PathBuf;

use planc_compiler::plan::{Precision, RunSettings};

use super::checkpoint;
use super::engine::Engine;
use super::model::{Dims, Params, TpMap};
use super::options::Options;
use crate::error::RunError;

/// Nothing is overwritten silently: a folder that holds checkpoints is only written by the
/// run that resumes from it.
pub fn refuse_overwrite(opts: &Options) -> Result<(), RunError> {
    let Some(dir) = &opts.save else {
        return Ok(());
    };
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
    Ok(())
}

/// The state a run starts from. The weights are this rank's share, for
/// `Engine::set_weights`; the moments are already on the engine.
pub struct Start {
    pub weights: Vec<f32>,
    /// Steps already done (0 for a fresh run).
    pub step: u64,
    /// Optimizer updates already made (Adam's bias correction counts them).
    pub opt_step: u64,
    pub loss_scale: f32,
    pub from: Option<PathBuf>,
}

/// What this rank's share of the layout needs to start from.
pub struct Share<'a> {
    pub dims: &'a Dims,
    /// The whole model's table, which checkpoints and the initialisation are written in.
    pub whole: &'a Params,
    pub tp_map: &'a TpMap,
    /// Whether the rank holds the whole model (tp = pp = 1).
    pub whole_model: bool,
    /// This rank's range of the optimizer's moments (all of them without ZeRO).
    pub shard: (usize, usize),
}

impl Share<'_> {
    fn take(&self, w: Vec<f32>) -> Vec<f32> {
        if self.whole_model {
            w
        } else {
            self.tp_map.take(&w)
        }
    }
}

/// The seed's weights, or (with `--resume`) the newest checkpoint's, whose moments are
/// uploaded to `eng` here.
pub fn start(
    opts: &Options,
    settings: &RunSettings,
    precision: Precision,
    share: &Share,
    eng: &mut Engine,
) -> Result<Start, RunError> {
    let loss_scale: f32 = if precision == Precision::Fp16 {
        65536.0
    } else {
        1.0
    };
    let Some(dir) = &opts.resume else {
        // A rank draws only its share (as the whole model's draw would give it).
        let weights = if share.whole_model {
            share.whole.init(settings.seed)
        } else {
            share.tp_map.init_share(share.whole, settings.seed)
        };
        return Ok(Start {
            weights,
            step: 0,
            opt_step: 0,
            loss_scale,
            from: None,
        });
    };
    let Some(path) = checkpoint::latest(dir).map_err(|e| RunError::Plan(e.to_string()))? else {
        return Err(RunError::Usage(format!(
            "--resume {}: no complete checkpoint there (a folder `planc run --save` wrote)",
            dir.display()
        )));
    };
    let (w, opt, meta) = checkpoint::load(&path, share.dims, share.whole)
        .map_err(|e| RunError::Plan(e.to_string()))?;
    let mut start = Start {
        weights: Vec::new(),
        step: meta.step,
        opt_step: 0,
        loss_scale,
        from: None,
    };
    if let Some(o) = opt {
        if eng.m.ptr != 0 {
            // This rank's shard of the moments (all of them without ZeRO).
            let (om, ov) = (share.take(o.m), share.take(o.v));
            let (lo, hi) = share.shard;
            let hi_n = hi.min(om.len());
            if lo < hi_n {
                eng.gpu.upload(eng.m, &om[lo..hi_n])?;
                eng.gpu.upload(eng.v, &ov[lo..hi_n])?;
            }
        }
        start.opt_step = o.step;
        if o.loss_scale > 0.0 {
            start.loss_scale = o.loss_scale;
        }
    }
    start.from = Some(path);
    start.weights = share.take(w);
    Ok(start)
}
