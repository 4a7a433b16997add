//! The forward pass of a micro-batch through this rank's chunk: the embedding on the first
//! virtual stage, each layer's forward keeping what `parallel.recompute` and
//! `train.attention` keep, and the loss head on the last (`loss`).

use super::{Engine, Input, LayerActs, Res};
use crate::device::cuda::{Arg, Buf};
use crate::device::heads::{qkv_kernel, QkvPass};
use crate::train::model::{LayerTensor, Tensor};
use crate::train::spans::{Part, Span};
use planc_compiler::cost::op_id::OpId;
use planc_compiler::plan::{Position, Recompute};

impl Engine {
    /// Forward of micro-batch `j` (activation set `set`) through the loss; the loss head's
    /// backward runs here too (see the module comment). `dscale` scales the loss gradient:
    /// 1 / (tokens of the step), times the fp16 loss scale.
    ///
    /// Under a pipeline the pass covers model chunk `chunk` of this rank: it starts from the
    /// embedding only on the first virtual stage (otherwise from the activation received
    /// into `p2p_buf(set, Recv, Activation)`), and ends in the loss head only on the last
    /// (otherwise at `p2p_buf(set, Send, Activation)`, which the step sends on).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &mut self,
        set: usize,
        j: usize,
        chunk: usize,
        input: Input,
        dscale: f32,
    ) -> Res {
        let (first, last) = self.ends(chunk);
        let layers = self.shape.stage.chunks[chunk].clone();
        if last && !first {
            self.feed(set, j, (first, last), input)?;
        }
        if first {
            self.embed_fwd(set, j, input, last)?;
        }
        let full = self.shape.recompute == Recompute::Full;
        for (i, &l) in layers.iter().enumerate() {
            let st = &self.sets[set];
            let (xi, xo) = (st.xs[i], st.xs[i + 1]);
            let a = st.layers[if full { 0 } else { i }];
            self.layer_fwd(l, xi, xo, a)?;
        }
        if !last {
            return Ok(());
        }
        self.loss_head(set, j, layers.len(), dscale)
    }

    /// The embedding of micro-batch `j` into activation set `set`'s first layer input,
    /// after its tokens (and with the loss head on this rank, its targets) are fed in.
    pub(super) fn embed_fwd(&mut self, set: usize, j: usize, input: Input, last: bool) -> Res {
        let d = self.shape.dims.clone();
        let n = self.rows();
        let c = d.hidden;
        let v0 = self.shape.tp_rank * d.vocab;
        self.mark_span(Span::MicroBatch {
            j,
            op: OpId::Embedding,
            part: Part::Forward,
        })?;
        self.feed(set, j, (true, last), input)?;
        let (x0, tokens) = (self.sets[set].xs[0], self.sets[set].tokens);
        if self.tp_comm().is_none() {
            return self.gpu.launch_n(
                "embed_fwd",
                n * c,
                &[
                    Arg::P(x0),
                    Arg::P(tokens),
                    Arg::P(self.wx_of(Tensor::Wte)),
                    Arg::P(self.wx_of(Tensor::Wpe)),
                    Arg::L(n as i64),
                    Arg::I(c as i32),
                    Arg::I(d.seq_len as i32),
                ],
            );
        }
        // Each rank looks up the tokens of its rows of the table (zero for the others);
        // the sum over ranks is the embedding (exact: one term is not zero). Positions
        // are added after, to this rank's rows, rounding once as on one GPU.
        let whole = if self.split_tokens() { self.s.gath } else { x0 };
        self.gpu.launch_n(
            "embed_vocab_fwd",
            n * c,
            &[
                Arg::P(whole),
                Arg::P(tokens),
                Arg::P(self.wx_of(Tensor::Wte)),
                Arg::L(n as i64),
                Arg::I(c as i32),
                Arg::I(v0 as i32),
                Arg::I(d.vocab as i32),
            ],
        )?;
        let mine = self.tp_reduce_rows(whole)?;
        if self.split_tokens() {
            self.gpu.copy(x0, mine, self.lrows() * c * self.xsz)?;
        }
        if d.position == Position::Learned {
            let nl = self.lrows();
            self.gpu.launch_n(
                "add_positions",
                nl * c,
                &[
                    Arg::P(x0),
                    Arg::P(self.wx_of(Tensor::Wpe)),
                    Arg::L(nl as i64),
                    Arg::L(self.row0() as i64),
                    Arg::I(d.seq_len as i32),
                    Arg::I(c as i32),
                ],
            )?;
        }
        Ok(())
    }

    /// One layer forward: `x_out` = layer(`x_in`), keeping what `a` holds. Under tensor
    /// parallelism the products are Megatron-LM's: q, k, v and the MLP's first product
    /// column-parallel (this rank's heads and share of F), the projections after them
    /// row-parallel, their partial sums made whole before the bias and the residual; under
    /// sequence parallelism the norms and the residual run on this rank's tokens, gathered
    /// before the column-parallel products and scattered after the row-parallel ones.
    pub(super) fn layer_fwd(&mut self, l: usize, x_in: Buf, x_out: Buf, a: LayerActs) -> Res {
        let d = self.shape.dims.clone();
        let n = self.rows();
        let nl = self.lrows();
        let w = |s: &Self, part: LayerTensor| s.wx_of(Tensor::Layer(l, part));
        let (c, qr, fr) = (d.hidden, d.qkv_rows(), d.fc_rows());
        self.mark_span(Span::Layer {
            l,
            op: OpId::InputNorm,
            part: Part::Forward,
        })?;
        self.norm_fwd(
            a.ln1,
            a.ln1_mean,
            a.ln1_rstd,
            x_in,
            w(self, LayerTensor::Ln1W),
            w(self, LayerTensor::Ln1B),
        )?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::QkvProj,
            part: Part::Forward,
        })?;
        let ln1 = self.tp_gather_rows(a.ln1)?;
        self.linear(l, LayerTensor::QkvW, self.s.qkv, ln1, n)?;
        let (b, t, h, g, dd) = self.attn_args();
        let (split, threads) = qkv_kernel(QkvPass::Split, dd, self.xsz, b * h * t * dd);
        let mut args = vec![
            Arg::P(a.q),
            Arg::P(a.k),
            Arg::P(a.v),
            Arg::P(self.s.qkv),
            Arg::I(b as i32),
            Arg::I(t as i32),
            Arg::I(h as i32),
            Arg::I(g as i32),
            Arg::I(dd as i32),
            Arg::P(self.rope_cos),
            Arg::P(self.rope_sin),
        ];
        // The pack-a-thread split adds the bias as it reads; the per-element one needs it
        // added first.
        self.mark_span(Span::Layer {
            l,
            op: OpId::QkvSplit,
            part: Part::Forward,
        })?;
        if split == "qkv_split_v" {
            args.push(Arg::P(w(self, LayerTensor::QkvB)));
        } else {
            self.add_bias(self.s.qkv, w(self, LayerTensor::QkvB), n, qr)?;
        }
        args.push(Arg::I(i32::from(self.kv_grouped())));
        self.gpu.launch_n(split, threads, &args)?;
        self.attention_fwd(l, a)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::AttentionOutProj,
            part: Part::Forward,
        })?;
        self.linear(l, LayerTensor::ProjW, self.s.tmp, a.a, n)?;
        let proj = self.tp_reduce_rows(self.s.tmp)?;
        self.add_residual(a.x2, x_in, proj, w(self, LayerTensor::ProjB), nl, c)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpNorm,
            part: Part::Forward,
        })?;
        self.norm_fwd(
            a.ln2,
            a.ln2_mean,
            a.ln2_rstd,
            a.x2,
            w(self, LayerTensor::Ln2W),
            w(self, LayerTensor::Ln2B),
        )?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpUpProj,
            part: Part::Forward,
        })?;
        let ln2 = self.tp_gather_rows(a.ln2)?;
        if let Some(g) = &self.gelu {
            // GELU and the bias in the product's epilogue: `h` is kept with the bias.
            let (c, f) = self.linear_shape(LayerTensor::FcW);
            let (fc_w, fc_b) = (w(self, LayerTensor::FcW), w(self, LayerTensor::FcB));
            g.up(&self.gpu, (a.act, a.h), ln2, fc_w, fc_b, (n, c, f))?;
            self.mark_span(Span::Layer {
                l,
                op: OpId::MlpActivation,
                part: Part::Forward,
            })?;
        } else {
            self.linear(l, LayerTensor::FcW, a.h, ln2, n)?;
            // GELU adds the bias as it reads (and its backward again): `h` is kept without
            // it.
            let fc_bias = self.activation_bias(l);
            if fc_bias == Buf::NULL {
                self.add_bias(a.h, w(self, LayerTensor::FcB), n, fr)?;
            }
            self.mark_span(Span::Layer {
                l,
                op: OpId::MlpActivation,
                part: Part::Forward,
            })?;
            self.activation().forward(&self.gpu, a.act, a.h, fc_bias)?;
        }
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpDownProj,
            part: Part::Forward,
        })?;
        self.linear(l, LayerTensor::Fc2W, self.s.tmp, a.act, n)?;
        let down = self.tp_reduce_rows(self.s.tmp)?;
        self.add_residual(x_out, a.x2, down, w(self, LayerTensor::Fc2B), nl, c)
    }
}
