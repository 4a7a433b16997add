//! Tensor parallelism's collectives inside the passes (Megatron-LM's): a row-parallel
//! product's partial sums made whole (all-reduce, or reduce-scatter by token under sequence
//! parallelism), a token share gathered before a column-parallel product, and the partial
//! gradients of the whole tensors summed once backward is done.

use super::{Engine, Res};
use crate::device::cuda::Buf;
use crate::device::dist::{self, Comm};
use crate::error::RunError;
use crate::train::model;

impl Engine {
    pub(super) fn tp_comm(&self) -> Option<&Comm> {
        self.tpc.as_deref().filter(|_| self.shape.tp > 1)
    }

    /// A row-parallel product's partial sums `[N, C]` at `x`, made whole: summed over the
    /// tensor-parallel ranks (all-reduce), or summed and split by token (reduce-scatter,
    /// in place: this rank's rows end at `x.at(row0·C)`). Returns where the rows are.
    pub(super) fn tp_reduce_rows(&mut self, x: Buf) -> Result<Buf, RunError> {
        let c = self.shape.dims.hidden;
        if self.tp_comm().is_none() {
            return Ok(x);
        }
        let split = self.split_tokens();
        let resume = self.collective_span(if split {
            "tensor-parallel reduce-scatter"
        } else {
            "tensor-parallel all-reduce"
        })?;
        let comm = self.tp_comm().expect("checked above");
        let stream = self.gpu.stream as u64;
        let out = if split {
            let mine = x.at(self.row0() * c, self.xsz);
            comm.reduce_scatter_typed(x, mine, self.lrows() * c, self.nty, stream)?;
            mine
        } else {
            comm.all_reduce_typed(x, self.rows() * c, self.nty, stream)?;
            x
        };
        self.resume_span(resume)?;
        Ok(out)
    }

    /// The whole micro-batch's `[N, C]` from this rank's rows `x` (sequence parallelism:
    /// all-gathered into the gather buffer); `x` itself otherwise.
    pub(super) fn tp_gather_rows(&mut self, x: Buf) -> Result<Buf, RunError> {
        let c = self.shape.dims.hidden;
        if self.tp_comm().is_none() || !self.split_tokens() {
            return Ok(x);
        }
        let resume = self.collective_span("tensor-parallel all-gather")?;
        let comm = self.tp_comm().expect("checked above");
        comm.all_gather(
            x,
            self.s.gath,
            self.lrows() * c,
            self.xsz,
            self.gpu.stream as u64,
        )?;
        self.resume_span(resume)?;
        Ok(self.s.gath)
    }

    /// Under sequence parallelism the whole tensors' gradients (norms, row-parallel
    /// biases) are sums over this rank's tokens only: sums them over the tensor-parallel
    /// group, in place, as one NCCL group. Call once the step's backward passes are done.
    pub fn tp_reduce_partial_grads(&self) -> Res {
        let Some(comm) = self.tp_comm().filter(|_| self.split_tokens()) else {
            return Ok(());
        };
        let stream = self.gpu.stream as u64;
        dist::grouped(|| {
            for p in self
                .params
                .list
                .iter()
                .filter(|p| model::sp_partial(p.tensor))
            {
                comm.all_reduce_sum(self.grad.at(p.offset, 4), p.numel(), stream)?;
            }
            Ok(())
        })
    }
}
