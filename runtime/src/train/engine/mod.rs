//! The model on one GPU: the engine's state (the stage's memory plan as typed handles: the
//! flat buffers of weights, gradients and optimizer state, an activation set per
//! micro-batch in flight, the workspace) and the passes the step's program runs on it:
//! forward of a micro-batch (through the loss), backward, and the optimizer.
//!
//! One room per concern: `buffers` (the compiler's list of buffers allocated, `Engine::new`),
//! `inputs` (a micro-batch's tokens and targets, from the host or staged), `forward` and
//! `backward` (the passes and a layer's forward and backward), `loss` (the loss head),
//! `attention` (the fused and standard attention cores), `linear` (the linear products,
//! fp8's among them), `elementwise` (norms, biases, residuals, the MLP's activation),
//! `tensor_parallel` (its collectives inside the passes), `marks` (the trace's spans),
//! `optimizer` (the update and the gradient's sums of squares). This file holds the state
//! and what every room reads of it.
//!
//! What each layer keeps for its backward pass follows `parallel.recompute` and
//! `train.attention`: with `none` every layer keeps its norms' outputs, q/k/v, the attention
//! output, the MLP input and activation (and with `standard` attention the s×s
//! probabilities); `selective` keeps everything but the probabilities, which backward
//! recomputes from q and k; `flash` attention never forms them (fused kernels, see
//! `attention`) and keeps each row's logsumexp instead; `full` keeps only each layer's
//! input and runs the layer's forward again just before its backward.
//!
//! The loss head (final norm, logits, cross-entropy) runs forward and backward at the end
//! of a micro-batch's forward pass: its logits are the largest tensor of the step and are
//! never kept, only the gradient they send into the last layer.

mod attention;
mod backward;
mod buffers;
mod elementwise;
mod forward;
mod inputs;
mod linear;
mod loss;
mod marks;
mod optimizer;
mod tensor_parallel;

use super::model::{LayerTensor, Params, Tensor};
use crate::device::attention_cudnn::Sdpa;
use crate::device::blas::Blas;
use crate::device::cuda::{Arg, Buf, Gpu};
use crate::device::dist::Comm;
use crate::device::fp8::{Fp8, Linear};
use crate::device::gelu_products::GeluProducts;
use crate::error::RunError;
use cudarc::nccl::sys::ncclDataType_t;
use planc_compiler::cost::kinds::WorkKind;
use planc_simulator::program::Payload;
use std::collections::BTreeMap;
use std::sync::Arc;

pub use attention::{softmax_causal_fwd, standard_core_bwd, StandardGrads};
pub use buffers::rope_table;
use inputs::Staged;
pub use inputs::{token_order, HostBatch, Input};

type Res = Result<(), RunError>;

/// What the engine is built for: one rank of one pipeline stage (the compiler's, which
/// lists the buffers it allocates: `planc_compiler::cost::buffers`).
pub use planc_compiler::cost::buffers::Shape;

/// Which way a pipeline message goes, seen from this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Send,
    Recv,
}

/// One layer's kept activations.
#[derive(Clone, Copy, Default)]
struct LayerActs {
    ln1: Buf,
    ln1_mean: Buf,
    ln1_rstd: Buf,
    q: Buf,
    k: Buf,
    v: Buf,
    /// Softmax probabilities [B, H, T, T]; NULL when recomputed or under flash attention.
    p: Buf,
    /// Flash attention: each row's logsumexp, fp32 [B, H, T]; NULL otherwise.
    lse: Buf,
    a: Buf,
    x2: Buf,
    ln2: Buf,
    ln2_mean: Buf,
    ln2_rstd: Buf,
    h: Buf,
    act: Buf,
}

/// Everything kept for one in-flight micro-batch.
#[derive(Default)]
struct ActSet {
    /// Layer inputs; `xs[layers]` is the last layer's output.
    xs: Vec<Buf>,
    /// Per layer, or one shared set under full recompute.
    layers: Vec<LayerActs>,
    /// Gradient of the last layer's output, from the loss head.
    dx_top: Buf,
    tokens: Buf,
    /// Host-sorted positions of each distinct token (for the embedding gradient).
    uniq: Buf,
    start: Buf,
    pos: Buf,
}

/// Buffers reused by every layer and micro-batch.
#[derive(Default)]
struct Scratch {
    qkv: Buf,
    /// Standard attention's output and its gradient [B, H, T, D] (flash reads and writes the
    /// merged layouts instead; NULL there, as are dq/dk/dv when flash writes into `dqkv`).
    o: Buf,
    /// Probabilities recomputed in backward (or computed in forward when not kept); NULL
    /// under flash attention, as is `dp`.
    p: Buf,
    tmp: Buf,
    dres: Buf,
    dln: Buf,
    dqkv: Buf,
    dq: Buf,
    dk: Buf,
    dv: Buf,
    dp: Buf,
    /// Flash attention's D_i = Σ O·dO, fp32 [B, H, T].
    dd: Buf,
    d_o: Buf,
    da: Buf,
    dh: Buf,
    dact: Buf,
    lnf: Buf,
    lnf_mean: Buf,
    lnf_rstd: Buf,
    logits: Buf,
    losses: Buf,
    targets: Buf,
    partials: Buf,
    /// A throwaway layer output for recomputed forwards.
    xout: Buf,
    /// Tensor parallelism: a whole-batch [N, C] activation gathered from the ranks' token
    /// shares (sequence parallelism), each token's logsumexp over the whole vocabulary,
    /// and this rank's and every rank's cross-entropy statistics. NULL on one rank.
    gath: Buf,
    lse: Buf,
    stats: Buf,
    stats_all: Buf,
}

/// Bytes by what they hold, as the memory plan allocated them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryPlan {
    pub weights: usize,
    pub gradients: usize,
    pub optimizer: usize,
    pub activations: usize,
    pub scratch: usize,
}

/// Where a traced span begins on the GPU's stream: its name (the trace's) and its kind of
/// work (what the step by kind sums it under; `None` ends the step's last span).
pub struct Mark {
    pub name: String,
    pub kind: Option<WorkKind>,
    pub event: crate::device::cuda::Event,
}

pub struct Engine {
    /// cuDNN's attention plans where they run (`attention_cudnn`), else planc's kernels.
    /// First, so they are dropped while the GPU's context still lives.
    attn: Option<Sdpa>,
    /// `precision = fp8`: the fp8 products' state (`device::fp8`; before `gpu`, so that
    /// cuBLASLt's handle goes while the context lives), and each layer's linear layers that
    /// run in fp8 by (layer, weight name); the others run in bf16.
    fp8: Option<Fp8>,
    fp8_linears: BTreeMap<(usize, LayerTensor), Linear>,
    /// A GELU MLP's activation in its products' epilogues, where
    /// `planc_compiler::plan::planc_fuses_gelu` and cuBLASLt allow (`device::gelu_products`;
    /// before `gpu`, as `fp8`); else planc's activation kernels.
    gelu: Option<GeluProducts>,
    /// Whether the rule wanted the epilogue products and cuBLASLt had none for this shape
    /// (the run says so: the cost model priced the epilogues).
    gelu_kernels: bool,
    pub gpu: Gpu,
    blas: Blas,
    pub shape: Shape,
    pub params: Params,
    xsz: usize,
    /// fp32 master weights, the compute copy (the same buffer in fp32), fp32 gradients,
    /// Adam's moments.
    pub w32: Buf,
    pub wx: Buf,
    pub grad: Buf,
    pub m: Buf,
    pub v: Buf,
    /// One byte per `model::ALIGN`-element block of the flat buffers: whether its tensor
    /// takes weight decay (the optimizer's single launch reads it).
    decay: Buf,
    sets: Vec<ActSet>,
    s: Scratch,
    /// One f32 per micro-batch: the sum of its token losses.
    pub loss_sums: Buf,
    pub memory: MemoryPlan,
    /// A few f32 for values reduced across ranks (loss, gradient norm).
    pub scalars: Buf,
    /// Rope's cosines and sines [T, D/2] (NULL without rope).
    rope_cos: Buf,
    rope_sin: Buf,
    /// Tracing: the marks; each span runs to the next mark.
    pub marks: Option<Vec<Mark>>,
    /// Each micro-batch's inputs in device memory, for steps replayed from a CUDA graph
    /// (`Input::Staged`); empty until such a step stages them.
    staged: Vec<Staged>,
    /// The tensor-parallel group's communicator (None on one rank of it).
    pub tpc: Option<Arc<Comm>>,
    /// The gradients a step zeroes before its passes: all but the layers' large linear
    /// weights, whose first gradient of the step overwrites them (`linear_bwd`).
    zeroed: Vec<Buf>,
    /// The layers' linear weights whose gradient this step has written (cleared by
    /// `zero_grads`): their next gradient adds to it.
    written: std::cell::RefCell<std::collections::HashSet<(usize, LayerTensor)>>,
    /// NCCL's name for the activations' element type.
    nty: ncclDataType_t,
}

impl Engine {
    /// Uploads fp32 master weights and refreshes the compute copy.
    pub fn set_weights(&mut self, w: &[f32]) -> Res {
        self.gpu.upload(self.w32, w)?;
        self.refresh_compute_copy()
    }

    pub fn refresh_compute_copy(&self) -> Res {
        if self.xsz != 4 {
            let n = self.params.total;
            self.gpu.launch_n(
                "cast_to_x",
                n,
                &[Arg::P(self.wx), Arg::P(self.w32), Arg::L(n as i64)],
            )?;
        }
        Ok(())
    }

    /// `t`'s weights in the storage type (`Buf::NULL` where this rank has none).
    fn wx_of(&self, t: Tensor) -> Buf {
        match self.params.of(t) {
            Some(p) => self.wx.at(p.offset, self.xsz),
            None => Buf::NULL,
        }
    }

    /// `t`'s fp32 gradient (`Buf::NULL` where this rank has none).
    fn g_of(&self, t: Tensor) -> Buf {
        match self.params.of(t) {
            Some(p) => self.grad.at(p.offset, 4),
            None => Buf::NULL,
        }
    }

    /// Readies the gradients for a step: each linear weight's first gradient overwrites
    /// it, so only the rest is zeroed (for GPT 6.6B, 0.8 of its 26.6 GB of fp32 gradients).
    pub fn zero_grads(&self) -> Res {
        self.written.borrow_mut().clear();
        for b in &self.zeroed {
            self.gpu.zero(*b)?;
        }
        Ok(())
    }

    /// Whether the next gradient of layer `l`'s linear weight `part` adds to the one this
    /// step already wrote (and notes that it will have written one).
    fn accumulates(&self, l: usize, part: LayerTensor) -> bool {
        !self.written.borrow_mut().insert((l, part))
    }

    /// Tokens of a micro-batch: the rows of the products and of attention.
    fn rows(&self) -> usize {
        self.shape.batch * self.shape.dims.seq_len
    }

    /// Rows of the residual stream and the norms on this rank: its share of the tokens
    /// under sequence parallelism.
    fn lrows(&self) -> usize {
        if self.split_tokens() {
            self.rows() / self.shape.tp
        } else {
            self.rows()
        }
    }

    /// The first of this rank's rows (of the micro-batch's [B·S] tokens).
    fn row0(&self) -> usize {
        if self.split_tokens() {
            self.shape.tp_rank * self.lrows()
        } else {
            0
        }
    }

    fn split_tokens(&self) -> bool {
        self.shape.sp && self.shape.tp > 1
    }

    /// Whether chunk `chunk` of this rank is the model's first virtual stage (embedding) and
    /// its last (loss head).
    fn ends(&self, chunk: usize) -> (bool, bool) {
        let st = &self.shape.stage;
        (
            st.first && chunk == 0,
            st.last && chunk + 1 == st.chunks.len(),
        )
    }

    /// Where a pipeline message of activation set `set` is received into or sent from, and
    /// its length in elements of the activation type (this rank's token rows × C).
    pub fn p2p_buf(&self, set: usize, dir: Dir, payload: Payload, chunk: usize) -> (Buf, usize) {
        let b = match (dir, payload) {
            (Dir::Recv, Payload::Activation) => self.sets[set].xs[0],
            (Dir::Send, Payload::Activation) => {
                self.sets[set].xs[self.shape.stage.chunks[chunk].len()]
            }
            (Dir::Recv, Payload::Gradient) => self.sets[set].dx_top,
            // The chunk's input gradient, left in scratch by its backward (no set).
            (Dir::Send, Payload::Gradient) => self.s.dres,
        };
        (b, self.lrows() * self.shape.dims.hidden)
    }

    /// NCCL's element type of the activations.
    pub fn activation_type(&self) -> ncclDataType_t {
        self.nty
    }

    /// The summed token losses of micro-batches 0..k.
    pub fn loss_sum(&self, k: usize) -> Result<f64, RunError> {
        let v: Vec<f32> = self.gpu.download(self.loss_sums, k)?;
        Ok(v.iter().map(|&x| x as f64).sum())
    }

    /// The flat-buffer range `[lo, hi)` of layer `l`'s tensors.
    pub fn layer_range(&self, l: usize) -> (usize, usize) {
        self.params.layer_range(l)
    }
}
