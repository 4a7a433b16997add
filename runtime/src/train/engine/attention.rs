//! The attention core: the fused (flash) kernels, cuDNN's where they were planned
//! (`plan_cudnn_attention`) or planc's, and the standard core's batched products, causal
//! softmax and their backward (also what `planc calibrate`'s probe launches), with the
//! splits and merges of the heads around them.

use super::{Engine, LayerActs, Res};
use crate::device::attention::{self, Grads, Heads, Kernels};
use crate::device::attention_cudnn::{self, Sdpa};
use crate::device::blas::Blas;
use crate::device::cuda::{Arg, Buf, Gpu};
use crate::device::heads::{qkv_kernel, QkvPass};
use crate::train::spans::{Part, Span};
use planc_compiler::cost::op_id::OpId;
use planc_compiler::plan::{Attention, Position};

impl Engine {
    /// Plans cuDNN's attention for this shape as `PLANC_CUDNN_ATTENTION` asks; where it
    /// cannot run, planc's kernels do, and the first rank says why in one line.
    pub(super) fn plan_cudnn_attention(&mut self) -> Res {
        let (b, t, h, g, dd) = self.attn_args();
        let hd = self.heads();
        // The layout backward will write: only the strides matter here.
        let grads = if self.flash_into_qkv() {
            Grads::qkv(hd, self.s.dqkv, self.s.dd)
        } else {
            Grads::heads(hd, (self.s.dq, self.s.dk, self.s.dv), self.s.dd)
        };
        let sh = &self.shape;
        let lead = sh.dp_rank == 0 && sh.tp_rank == 0 && sh.stage.first;
        let precision = sh.precision;
        self.attn =
            attention_cudnn::choose(&mut self.gpu, precision, (b, h, g, t, dd), &grads, lead)?;
        self.memory.scratch += self.attn.as_ref().map_or(0, Sdpa::bytes);
        Ok(())
    }

    /// Whether this engine's flash attention runs on cuDNN's fused attention.
    pub fn attention_on_cudnn(&self) -> bool {
        self.attn.is_some()
    }

    /// What cuDNN's fused attention holds beyond the memory plan (its workspace), where it
    /// runs the attention.
    pub fn attention_workspace_bytes(&self) -> Option<usize> {
        self.attn.as_ref().map(|a| a.workspace_bytes())
    }

    /// Whether a key/value head is kept once per group, at its first query head, between
    /// the qkv split and the merge of the gradients: cuDNN's attention reads it there
    /// through strides and leaves the group's whole gradient there. planc's kernels and the
    /// standard core's products read every query head's copy.
    pub(super) fn kv_grouped(&self) -> bool {
        self.attention_on_cudnn()
    }

    /// The kernels that run this engine's fused attention.
    pub(super) fn kernels(&self, hd: Heads) -> Kernels<'_> {
        match &self.attn {
            Some(sdpa) => Kernels::Cudnn(sdpa),
            None => hd.tensor_cores(self.gpu.sm).into(),
        }
    }

    pub(super) fn attn_args(&self) -> (usize, usize, usize, usize, usize) {
        let d = &self.shape.dims;
        (self.shape.batch, d.seq_len, d.heads, d.kv_heads, d.head_dim)
    }

    pub(super) fn heads(&self) -> Heads {
        let d = &self.shape.dims;
        Heads {
            b: self.shape.batch,
            h: d.heads,
            t: d.seq_len,
            d: d.head_dim,
            xsz: self.xsz,
        }
    }

    pub(super) fn softmax_fwd(&self, p: Buf) -> Res {
        let (b, t, h, _, dd) = self.attn_args();
        softmax_causal_fwd(&self.gpu, p, b * h * t, t, dd)
    }

    /// The attention core's forward of layer `l` from the q, k, v it keeps: the fused
    /// kernels straight into the merged layout the projection reads, or the standard
    /// core's scores, softmax, product with v and merge of the heads.
    pub(super) fn attention_fwd(&mut self, l: usize, a: LayerActs) -> Res {
        let (b, t, h, _, dd) = self.attn_args();
        self.mark_span(Span::Layer {
            l,
            op: self.core_op(),
            part: Part::Forward,
        })?;
        if self.shape.attention == Attention::Flash {
            let hd = self.heads();
            // Straight into the merged layout the projection reads.
            attention::forward(&self.gpu, hd, self.kernels(hd), a.a, a.lse, (a.q, a.k, a.v))?;
        } else {
            let p = if a.p != Buf::NULL { a.p } else { self.s.p };
            self.blas.scores(p, a.q, a.k, b * h, t, dd)?;
            self.softmax_fwd(p)?;
            self.blas.attend(self.s.o, p, a.v, b * h, t, dd)?;
            self.gpu.launch_n(
                "heads_merge",
                b * t * h * dd,
                &[
                    Arg::P(a.a),
                    Arg::P(self.s.o),
                    Arg::I(b as i32),
                    Arg::I(t as i32),
                    Arg::I(h as i32),
                    Arg::I(dd as i32),
                ],
            )?;
        }
        Ok(())
    }

    /// The attention core's backward of layer `l`: from the gradient of its merged output
    /// (`da`) to the merged qkv gradient (`dqkv`), written there by the fused kernels or
    /// merged from dq, dk, dv.
    pub(super) fn attention_bwd(&mut self, l: usize, a: LayerActs) -> Res {
        let (b, t, h, _, dd) = self.attn_args();
        self.mark_span(Span::Layer {
            l,
            op: self.core_op(),
            part: Part::Backward,
        })?;
        let into_qkv = self.flash_into_qkv();
        if self.shape.attention == Attention::Flash {
            let hd = self.heads();
            let s = &self.s;
            let grads = if into_qkv {
                Grads::qkv(hd, s.dqkv, s.dd)
            } else {
                Grads::heads(hd, (s.dq, s.dk, s.dv), s.dd)
            };
            attention::backward(
                &self.gpu,
                hd,
                self.kernels(hd),
                grads,
                (a.q, a.k, a.v),
                a.lse,
                (a.a, s.da),
            )?;
        } else {
            let s = &self.s;
            self.gpu.launch_n(
                "heads_split",
                b * t * h * dd,
                &[
                    Arg::P(s.d_o),
                    Arg::P(s.da),
                    Arg::I(b as i32),
                    Arg::I(t as i32),
                    Arg::I(h as i32),
                    Arg::I(dd as i32),
                ],
            )?;
            self.attention_core_bwd(l, a)?;
        }
        if !into_qkv {
            self.mark_span(Span::Layer {
                l,
                op: OpId::QkvSplit,
                part: Part::Backward,
            })?;
            self.qkv_merge_grad()?;
        }
        Ok(())
    }

    /// Whether flash attention's backward writes dq, dk and dv straight into the merged qkv
    /// gradient: it can when each query head has its own key/value head and no rope turns
    /// them (the merge would then only permute).
    pub(super) fn flash_into_qkv(&self) -> bool {
        let d = &self.shape.dims;
        self.shape.attention == Attention::Flash
            && d.kv_heads == d.heads
            && d.position != Position::Rope
    }

    /// dq, dk, dv [B, H, T, D] → the merged qkv gradient (rope undone, the query heads of
    /// a key/value head summed).
    pub(super) fn qkv_merge_grad(&self) -> Res {
        let (b, t, h, g, dd) = self.attn_args();
        let n = self.rows();
        let qr = self.shape.dims.qkv_rows();
        let s = &self.s;
        let (merge, threads) = qkv_kernel(QkvPass::Merge, dd, self.xsz, n * qr);
        self.gpu.launch_n(
            merge,
            threads,
            &[
                Arg::P(s.dqkv),
                Arg::P(s.dq),
                Arg::P(s.dk),
                Arg::P(s.dv),
                Arg::I(b as i32),
                Arg::I(t as i32),
                Arg::I(h as i32),
                Arg::I(g as i32),
                Arg::I(dd as i32),
                Arg::P(self.rope_cos),
                Arg::P(self.rope_sin),
                Arg::I(i32::from(self.kv_grouped())),
            ],
        )
    }

    /// Standard attention's core backward: d_o → dq, dk, dv through the probabilities
    /// (kept, or recomputed here) and the score gradient in `dp`.
    pub(super) fn attention_core_bwd(&mut self, l: usize, a: LayerActs) -> Res {
        let (b, t, h, _, dd) = self.attn_args();
        let p = if a.p != Buf::NULL {
            a.p
        } else {
            self.mark_span(Span::Layer {
                l,
                op: OpId::AttentionCore,
                part: Part::ProbabilitiesRecompute,
            })?;
            let s = &self.s;
            self.blas.scores(s.p, a.q, a.k, b * h, t, dd)?;
            self.softmax_fwd(s.p)?;
            s.p
        };
        self.mark_span(Span::Layer {
            l,
            op: OpId::AttentionCore,
            part: Part::BackwardProducts,
        })?;
        let s = &self.s;
        standard_core_bwd(
            &self.gpu,
            &self.blas,
            StandardGrads {
                dq: s.dq,
                dk: s.dk,
                dv: s.dv,
                dp: s.dp,
            },
            (a.q, a.k, a.v, p, s.d_o),
            (b * h, t, dd),
        )
    }
}

/// The causal softmax of the scores `p` (`rows` rows of `t`, head size `head_dim`), in
/// place, as training and `planc calibrate`'s standard-attention probe launch it.
pub fn softmax_causal_fwd(gpu: &Gpu, p: Buf, rows: usize, t: usize, head_dim: usize) -> Res {
    gpu.launch(
        "softmax_causal_fwd",
        (rows.div_ceil(8) as u32, 1),
        256,
        &[
            Arg::P(p),
            Arg::L(rows as i64),
            Arg::I(t as i32),
            Arg::F(1.0 / (head_dim as f32).sqrt()),
        ],
    )
}

/// Where standard attention's backward writes: the query, key and value gradients
/// [B·H, T, D], and the score gradient [B·H, T, T] (dP, then dS in place).
#[derive(Clone, Copy)]
pub struct StandardGrads {
    pub dq: Buf,
    pub dk: Buf,
    pub dv: Buf,
    pub dp: Buf,
}

/// Standard attention's core backward from `(q, k, v, p, d_o)` (the probabilities kept or
/// recomputed) at `(batch × heads, t, head_dim)`, as training and `planc calibrate`'s
/// probe launch it: dP = dO·Vᵀ, dV = Pᵀ·dO, the softmax's backward into dS in place, dQ =
/// dS·K, dK = dSᵀ·Q.
pub fn standard_core_bwd(
    gpu: &Gpu,
    blas: &Blas,
    g: StandardGrads,
    (q, k, v, p, d_o): (Buf, Buf, Buf, Buf, Buf),
    (bh, t, dd): (usize, usize, usize),
) -> Res {
    blas.d_probs(g.dp, d_o, v, bh, t, dd)?;
    blas.d_values(g.dv, p, d_o, bh, t, dd)?;
    let rows = bh * t;
    gpu.launch(
        "softmax_causal_bwd",
        (rows.div_ceil(8) as u32, 1),
        256,
        &[
            Arg::P(g.dp),
            Arg::P(p),
            Arg::L(rows as i64),
            Arg::I(t as i32),
            Arg::F(1.0 / (dd as f32).sqrt()),
        ],
    )?;
    blas.d_queries(g.dq, g.dp, k, bh, t, dd)?;
    blas.d_keys(g.dk, g.dp, q, bh, t, dd)
}
