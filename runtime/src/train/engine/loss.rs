//! The loss head, forward and backward in one: the final norm, the logits (vocabulary-
//! parallel under tensor parallelism), the cross-entropy with each token's loss and the
//! logits' gradient in place, and the gradient sent into the last layer. The logits are
//! never kept.

use super::{Engine, Res};
use crate::device::cuda::Arg;
use crate::device::rows;
use crate::train::model::Tensor;
use crate::train::spans::{Part, Span};
use planc_compiler::cost::op_id::OpId;

impl Engine {
    /// The loss head of micro-batch `j`, forward and backward, from the chunk's last layer
    /// output (`xs[top]` of activation set `set`) to the gradient it sends into that layer.
    pub(super) fn loss_head(&mut self, set: usize, j: usize, top: usize, dscale: f32) -> Res {
        let d = self.shape.dims.clone();
        let n = self.rows();
        let c = d.hidden;
        self.mark_span(Span::MicroBatch {
            j,
            op: OpId::FinalNorm,
            part: Part::Forward,
        })?;
        let xl = self.sets[set].xs[top];
        let s = &self.s;
        self.norm_fwd(
            s.lnf,
            s.lnf_mean,
            s.lnf_rstd,
            xl,
            self.wx_of(Tensor::LnfW),
            self.wx_of(Tensor::LnfB),
        )?;
        let head = if d.tied { Tensor::Wte } else { Tensor::LmHead };
        // Under tensor parallelism the output layer is vocabulary-parallel: every token's
        // logits for this rank's rows of the vocabulary, a cross-entropy combined over the
        // ranks from each share's maximum, sum of exponentials and target logit.
        let lnf = self.tp_gather_rows(s.lnf)?;
        let s = &self.s;
        self.blas
            .linear(s.logits, lnf, self.wx_of(head), n, c, d.vocab)?;
        self.cross_entropy(dscale)?;
        let s = &self.s;
        self.gpu.launch(
            "sum_partial",
            (1, 1),
            1024,
            &[
                Arg::P(self.loss_sums.at(j, 4)),
                Arg::P(s.losses),
                Arg::L(n as i64),
            ],
        )?;
        self.blas
            .linear_dinp(s.dln, s.logits, self.wx_of(head), n, c, d.vocab)?;
        self.blas
            .linear_dw(self.g_of(head), s.logits, lnf, n, c, d.vocab)?;
        let dlnf = self.tp_reduce_rows(self.s.dln)?;
        let top = self.sets[set].dx_top;
        self.gpu.zero(top)?;
        let s = &self.s;
        self.norm_bwd(
            top,
            dlnf,
            xl,
            self.wx_of(Tensor::LnfW),
            s.lnf_mean,
            s.lnf_rstd,
            self.g_of(Tensor::LnfW),
            self.g_of(Tensor::LnfB),
        )
    }

    /// Cross-entropy over the logits: each token's loss, and the logits overwritten by
    /// their gradient scaled by `dscale`; under tensor parallelism combined over the
    /// vocabulary's shares.
    pub(super) fn cross_entropy(&self, dscale: f32) -> Res {
        let d = &self.shape.dims;
        let n = self.rows();
        let v0 = self.shape.tp_rank * d.vocab;
        let s = &self.s;
        let Some(comm) = self.tp_comm() else {
            return rows::cross_entropy(
                &self.gpu,
                (s.logits, s.losses, s.targets),
                n,
                d.vocab,
                dscale,
            );
        };
        self.gpu.launch(
            "ce_stats",
            (n as u32, 1),
            1024,
            &[
                Arg::P(s.logits),
                Arg::P(s.stats),
                Arg::P(s.targets),
                Arg::I(d.vocab as i32),
                Arg::I(v0 as i32),
            ],
        )?;
        comm.all_gather(s.stats, s.stats_all, n * 3, 4, self.gpu.stream as u64)?;
        self.gpu.launch(
            "ce_combine",
            (n.div_ceil(256) as u32, 1),
            256,
            &[
                Arg::P(s.stats_all),
                Arg::P(s.lse),
                Arg::P(s.losses),
                Arg::L(n as i64),
                Arg::I(self.shape.tp as i32),
            ],
        )?;
        self.gpu.launch(
            "ce_grad",
            (n as u32, 1),
            1024,
            &[
                Arg::P(s.logits),
                Arg::P(s.lse),
                Arg::P(s.targets),
                Arg::I(d.vocab as i32),
                Arg::I(v0 as i32),
                Arg::F(dscale),
            ],
        )
    }
}
