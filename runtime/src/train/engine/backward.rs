//! The backward pass of a micro-batch through this rank's chunk: each layer's backward in
//! reverse (its forward run again first under full recomputation), a hook as each layer's
//! gradients complete (the data-parallel reduction), and the embedding's gradient on the
//! first virtual stage.

use super::{Engine, LayerActs, Res};
use crate::device::cuda::{Arg, Buf};
use crate::train::model::{LayerTensor, Tensor};
use crate::train::spans::{Part, Span};
use planc_compiler::cost::kinds::WorkKind;
use planc_compiler::cost::op_id::OpId;
use planc_compiler::plan::{Position, Recompute};

impl Engine {
    /// Backward of the micro-batch held in activation set `set`. `after_layer(self, l)`
    /// runs once layer `l`'s gradients are complete for this micro-batch (for the
    /// data-parallel reduction to start while backward goes on).
    ///
    /// Under a pipeline: of chunk `chunk`, from the loss head's gradient on the last virtual
    /// stage or the one received into `p2p_buf(set, Recv, Gradient)`; on other than the
    /// first virtual stage it ends with the gradient of the chunk's input at
    /// `p2p_buf(set, Send, Gradient)`.
    pub fn backward(
        &mut self,
        set: usize,
        j: usize,
        chunk: usize,
        after_layer: &mut dyn FnMut(&Engine, usize) -> Res,
    ) -> Res {
        let d = self.shape.dims.clone();
        let c = d.hidden;
        let full = self.shape.recompute == Recompute::Full;
        let (first, _) = self.ends(chunk);
        let layers = self.shape.stage.chunks[chunk].clone();
        self.gpu.copy(
            self.s.dres,
            self.sets[set].dx_top,
            self.lrows() * c * self.xsz,
        )?;
        for (i, &l) in layers.iter().enumerate().rev() {
            let st = &self.sets[set];
            let xi = st.xs[i];
            let a = st.layers[if full { 0 } else { i }];
            if full {
                self.mark(WorkKind::Linear, || format!("L{l} recompute"))?;
                let xout = self.s.xout;
                self.layer_fwd(l, xi, xout, a)?;
            }
            self.layer_bwd(l, xi, a)?;
            after_layer(self, l)?;
        }
        if !first {
            return Ok(());
        }
        self.mark_span(Span::MicroBatch {
            j,
            op: OpId::Embedding,
            part: Part::Backward,
        })?;
        // Every token's gradient (gathered under sequence parallelism): each rank sums the
        // tokens of its rows of the table, and every rank the whole position table.
        let dfull = self.tp_gather_rows(self.s.dres)?;
        let st = &self.sets[set];
        // A block per token of the batch, not per distinct one (`token_order`): the grid
        // stays the same from batch to batch, as a replayed graph has it.
        self.gpu.launch(
            "embed_bwd_tokens",
            (self.rows() as u32, 1),
            256,
            &[
                Arg::P(self.g_of(Tensor::Wte)),
                Arg::P(dfull),
                Arg::P(st.uniq),
                Arg::P(st.start),
                Arg::P(st.pos),
                Arg::I(c as i32),
            ],
        )?;
        if d.position == Position::Learned {
            let t = d.seq_len;
            self.gpu.launch_n(
                "embed_bwd_positions",
                t * c,
                &[
                    Arg::P(self.g_of(Tensor::Wpe)),
                    Arg::P(dfull),
                    Arg::I(self.shape.batch as i32),
                    Arg::I(t as i32),
                    Arg::I(c as i32),
                ],
            )?;
        }
        Ok(())
    }

    /// One layer backward: `dres` holds d(output) and becomes d(input).
    pub(super) fn layer_bwd(&mut self, l: usize, x_in: Buf, a: LayerActs) -> Res {
        let d = self.shape.dims.clone();
        let n = self.rows();
        let w = |s: &Self, part: LayerTensor| s.wx_of(Tensor::Layer(l, part));
        let gr = |s: &Self, part: LayerTensor| s.g_of(Tensor::Layer(l, part));
        let (c, qr, fr) = (d.hidden, d.qkv_rows(), d.fc_rows());
        let nl = self.lrows();
        let s = &self.s;
        let (dres, dln, dh, dact) = (s.dres, s.dln, s.dh, s.dact);
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpDownProj,
            part: Part::Backward,
        })?;
        let dfull = self.tp_gather_rows(dres)?;
        let fused = self.gelu.is_some();
        if let Some(g) = &self.gelu {
            // GELU's gradient in the epilogue of the down product's input gradient.
            let (f, _) = self.linear_shape(LayerTensor::Fc2W);
            let w2 = w(self, LayerTensor::Fc2W);
            g.down_dinp(&self.gpu, dh, (dfull, w2, a.h), (n, c, f))?;
            self.linear_dw(l, LayerTensor::Fc2W, dfull, a.act, n)?;
        } else {
            self.linear_bwd(l, LayerTensor::Fc2W, dact, dfull, a.act, n)?;
        }
        self.bias_grad(gr(self, LayerTensor::Fc2B), dres, nl, c)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpActivation,
            part: Part::Backward,
        })?;
        if !fused {
            let fc_bias = self.activation_bias(l);
            self.activation()
                .backward(&self.gpu, dh, a.h, fc_bias, dact)?;
        }
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpUpProj,
            part: Part::Backward,
        })?;
        let ln2 = self.tp_gather_rows(a.ln2)?;
        self.linear_bwd(l, LayerTensor::FcW, dln, dh, ln2, n)?;
        self.bias_grad(gr(self, LayerTensor::FcB), dh, n, fr)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpNorm,
            part: Part::Backward,
        })?;
        let dln_mine = self.tp_reduce_rows(dln)?;
        self.norm_bwd(
            dres,
            dln_mine,
            a.x2,
            w(self, LayerTensor::Ln2W),
            a.ln2_mean,
            a.ln2_rstd,
            gr(self, LayerTensor::Ln2W),
            gr(self, LayerTensor::Ln2B),
        )?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::AttentionOutProj,
            part: Part::Backward,
        })?;
        let dfull = self.tp_gather_rows(dres)?;
        self.linear_bwd(l, LayerTensor::ProjW, self.s.da, dfull, a.a, n)?;
        self.bias_grad(gr(self, LayerTensor::ProjB), dres, nl, c)?;
        self.attention_bwd(l, a)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::QkvProj,
            part: Part::Backward,
        })?;
        let ln1 = self.tp_gather_rows(a.ln1)?;
        self.linear_bwd(l, LayerTensor::QkvW, dln, self.s.dqkv, ln1, n)?;
        self.bias_grad(gr(self, LayerTensor::QkvB), self.s.dqkv, n, qr)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::InputNorm,
            part: Part::Backward,
        })?;
        let dln_mine = self.tp_reduce_rows(dln)?;
        self.norm_bwd(
            dres,
            dln_mine,
            x_in,
            w(self, LayerTensor::Ln1W),
            a.ln1_mean,
            a.ln1_rstd,
            gr(self, LayerTensor::Ln1W),
            gr(self, LayerTensor::Ln1B),
        )
    }
}
