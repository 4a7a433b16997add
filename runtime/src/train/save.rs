//! Saving a checkpoint: every rank takes part (the moments of a ZeRO shard gathered, the
//! tensor-parallel shares put together, the pipeline stages summed) and rank 0 writes the
//! whole model, never weights that are not finite.

use std::path::PathBuf;

use planc_compiler::plan::Plan;

use super::checkpoint;
use super::engine::Engine;
use super::model::{Dims, Params, Stage, TpMap};
use super::options::Options;
use super::ranks::{Comms, Ranks};
use super::stop;
use crate::device::cuda::Buf;
use crate::error::RunError;

/// What a save needs to know of the run, borrowed for its length.
pub struct Saver<'a> {
    pub plan: &'a Plan,
    pub opts: &'a Options,
    pub rank: usize,
    pub ranks: Ranks,
    pub comms: &'a Comms,
    pub dims: &'a Dims,
    /// The whole model's table, which checkpoints are written in.
    pub whole: &'a Params,
    pub stage: &'a Stage,
    pub tp_map: &'a TpMap,
    /// Whether this rank's stage holds the last stage's copy of a tied embedding.
    pub tied_copy: bool,
    /// This rank's range of the optimizer's moments.
    pub shard: (usize, usize),
}

impl Saver<'_> {
    /// Saves step `step` into `--save`'s folder: its path on rank 0, `None` on the others.
    pub fn save(
        &self,
        eng: &mut Engine,
        step: u64,
        opt_step: u64,
        loss_scale: f32,
    ) -> Result<Option<PathBuf>, RunError> {
        let total = eng.params.total;
        let (m, v) = (self.gathered(eng, eng.m)?, self.gathered(eng, eng.v)?);
        let w: Vec<f32> = eng.gpu.download(eng.w32, total)?;
        let (w, m, v) = (
            self.to_whole(eng, w)?,
            self.to_whole(eng, m)?,
            self.to_whole(eng, v)?,
        );
        if self.rank != 0 {
            return Ok(None);
        }
        // Diverged weights are never saved: the newest checkpoint stays one to resume from.
        if let Some((name, i, x)) = stop::first_non_finite(self.whole, &w) {
            return Err(RunError::Diverged(format!(
                "step {step}: the weights to save are not finite ({name}[{i}] = {x}); no \
                 checkpoint written"
            )));
        }
        let r = &self.ranks;
        let state = checkpoint::OptimizerState {
            step: opt_step,
            m,
            v,
            loss_scale,
        };
        let meta = checkpoint::Meta {
            step,
            samples_consumed: step * self.plan.train.global_batch,
            plan_hash: self.opts.plan_hash.clone(),
            layout: format!(
                "tp{}-pp{}-dp{}-zero{}",
                r.tp, r.pp, r.dp, self.plan.parallel.zero
            ),
            planc_version: env!("CARGO_PKG_VERSION").into(),
        };
        let dir = self.opts.save.as_ref().expect("saving needs --save");
        checkpoint::save(dir, self.dims, self.whole, &w, &state, &meta)
            .map(Some)
            .map_err(|e| RunError::Plan(format!("checkpoint: {e}")))
    }

    /// A moment buffer of this rank's share, whole: gathered from the data-parallel ranks
    /// under ZeRO; zeros where the optimizer keeps none.
    fn gathered(&self, eng: &mut Engine, b: Buf) -> Result<Vec<f32>, RunError> {
        let total = eng.params.total;
        let padded = eng.shape.padded(total);
        let (lo, hi) = self.shard;
        if b.ptr == 0 {
            return Ok(vec![0.0; total]);
        }
        match (&self.comms.dp, hi - lo < padded) {
            (Some(c), true) => {
                let full = eng.gpu.alloc(padded * 4)?;
                c.all_gather(b, full, hi - lo, 4, eng.gpu.stream as u64)?;
                let v = eng.gpu.download(full, total)?;
                eng.gpu.free(full)?;
                Ok(v)
            }
            _ => eng.gpu.download(b, total),
        }
    }

    /// Every rank's share put together in the whole model: the tensor-parallel shares
    /// gathered, then the pipeline stages summed (each tensor is non-zero on the one stage
    /// that owns it; the last stage's copy of a tied embedding is left out).
    fn to_whole(&self, eng: &mut Engine, local: Vec<f32>) -> Result<Vec<f32>, RunError> {
        let (tpc, ppc) = (&self.comms.tp, &self.comms.pp);
        if tpc.is_none() && ppc.is_none() {
            return Ok(local);
        }
        let (n, tp, whole) = (eng.params.total, self.ranks.tp, self.whole);
        let mut out = vec![0f32; whole.total];
        match tpc {
            Some(c) => {
                let (mine, all) = (eng.gpu.alloc(n * 4)?, eng.gpu.alloc(tp * n * 4)?);
                eng.gpu.upload(mine, &local)?;
                c.all_gather(mine, all, n, 4, eng.gpu.stream as u64)?;
                let shares: Vec<f32> = eng.gpu.download(all, tp * n)?;
                eng.gpu.free(all)?;
                eng.gpu.free(mine)?;
                for r in 0..tp {
                    TpMap::of_stage(self.dims, tp, r, self.stage)
                        .map_err(RunError::Plan)?
                        .put(&shares[r * n..(r + 1) * n], &mut out);
                }
            }
            None => self.tp_map.put(&local, &mut out),
        }
        if let Some(c) = ppc {
            if self.tied_copy {
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
    }
}
