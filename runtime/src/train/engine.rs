//! The model on one GPU: the memory plan (weights, gradients, optimizer state, activations
//! per in-flight micro-batch, scratch), and the passes the step's program runs on it:
//! forward of a micro-batch (through the loss), backward, and the optimizer.
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

use planc_compiler::cost::kinds::WorkKind;
use planc_compiler::cost::op_id::OpId;
use planc_compiler::plan::{Attention, Norm, Optimizer, Position, Precision, Recompute};

use super::model::{self, Dims, Params, Stage};
use super::spans::{Part, Span};
use crate::device::activation::Activation;
use crate::device::attention::{self, Grads, Heads, Kernels};
use crate::device::attention_cudnn::{self, Sdpa};
use crate::device::blas::{self, Blas};
use crate::device::cuda::{Arg, Buf, Gpu, MIN_ALLOC};
use crate::device::dist::{self, Comm};
use crate::device::fp8::{self, Fp8, Linear};
use crate::device::rows::{self, norm_partials, NormGrads, NormSaved, Norms, CHUNK_ROWS};
use crate::device::trail;
use crate::error::RunError;
use cudarc::nccl::sys::ncclDataType_t;
use planc_simulator::program::Payload;
use std::collections::BTreeMap;
use std::sync::Arc;

type Res = Result<(), RunError>;

/// What the engine is built for.
#[derive(Clone, Debug)]
pub struct Shape {
    pub dims: Dims,
    /// Sequences per micro-batch.
    pub batch: usize,
    pub precision: Precision,
    pub attention: Attention,
    pub recompute: Recompute,
    pub optimizer: Optimizer,
    /// Micro-batches whose activations are alive at once (from the step's program).
    pub in_flight: usize,
    /// Data-parallel size and this rank's place in it; with `zero ≥ 1` the optimizer state
    /// (Adam's moments) is this rank's shard of the flat buffer only.
    pub dp: usize,
    pub dp_rank: usize,
    pub zero: u64,
    /// Tensor-parallel size and this rank's place in it (`dims` is then this rank's share,
    /// see `Dims::tensor_parallel`), and whether the norms and residual stream are split
    /// by token (sequence parallelism).
    pub tp: usize,
    pub tp_rank: usize,
    pub sp: bool,
    /// The layers of this pipeline rank's chunks and whether it holds the embedding and
    /// the loss head (`Stage::whole` without a pipeline).
    pub stage: Stage,
}

impl Shape {
    /// The flat buffers' length: the table's, padded so `dp` equal shards tile it.
    pub fn padded(&self, total: usize) -> usize {
        total.div_ceil(64 * self.dp) * 64 * self.dp
    }

    /// This rank's shard `[lo, hi)` of the flat buffers under ZeRO, else everything.
    pub fn shard(&self, total: usize) -> (usize, usize) {
        let padded = self.padded(total);
        if self.zero >= 1 && self.dp > 1 {
            let n = padded / self.dp;
            (n * self.dp_rank, n * (self.dp_rank + 1))
        } else {
            (0, padded)
        }
    }
}

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
    fp8_linears: BTreeMap<(usize, &'static str), Linear>,
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
    /// NCCL's name for the activations' element type.
    nty: ncclDataType_t,
}

/// The flat buffers: fp32 master weights, the compute copy (the same buffer in fp32), fp32
/// gradients and Adam's moments (this rank's shard of them under ZeRO).
struct State {
    w32: Buf,
    wx: Buf,
    grad: Buf,
    m: Buf,
    v: Buf,
}

impl State {
    /// (weights, gradients, optimizer state) bytes, counted as the cost model counts them
    /// (Megatron's convention): in mixed precision the compute copy is the weights and the
    /// fp32 master copy is optimizer state.
    fn bytes(shape: &Shape, params: &Params, xsz: usize) -> (usize, usize, usize) {
        let total = shape.padded(params.total);
        let (lo, hi) = shape.shard(params.total);
        let moments = if shape.optimizer == Optimizer::Sgd {
            0
        } else {
            (hi - lo) * 8
        };
        let master = if xsz == 4 { 0 } else { total * 4 };
        (total * xsz, total * 4, moments + master)
    }

    fn alloc(
        gpu: &mut Gpu,
        shape: &Shape,
        params: &Params,
        xsz: usize,
        mem: &mut MemoryPlan,
    ) -> Result<State, RunError> {
        let total = shape.padded(params.total);
        let (lo, hi) = shape.shard(params.total);
        let w32 = gpu.alloc(total * 4)?;
        let wx = if xsz == 4 {
            w32
        } else {
            gpu.alloc(total * xsz)?
        };
        let grad = gpu.alloc(total * 4)?;
        let (m, v) = if shape.optimizer == Optimizer::Sgd {
            (Buf::NULL, Buf::NULL)
        } else {
            (gpu.alloc((hi - lo) * 4)?, gpu.alloc((hi - lo) * 4)?)
        };
        (mem.weights, mem.gradients, mem.optimizer) = State::bytes(shape, params, xsz);
        Ok(State {
            w32,
            wx,
            grad,
            m,
            v,
        })
    }
}

/// The element counts the activation sets and scratch are sized by, for one micro-batch on
/// this rank, and what the plan keeps.
struct Sizes {
    d: Dims,
    xsz: usize,
    /// Tokens of the micro-batch, and rows of the residual stream and the norms on this
    /// rank: a share of the tokens under sequence parallelism, all of them otherwise.
    n: usize,
    nl: usize,
    tp: usize,
    bhtd: usize,
    bhtt: usize,
    bht: usize,
    flash: bool,
    /// Standard attention's probabilities kept for backward.
    keep_p: bool,
    /// Activation sets serve any chunk: sized for the longest.
    chunk_len: usize,
}

impl Sizes {
    /// The sizes, or why the runtime's kernels cannot take them.
    fn new(shape: &Shape, xsz: usize) -> Result<Sizes, RunError> {
        let d = shape.dims.clone();
        let chunk_len = shape.stage.chunks.iter().map(Vec::len).max().unwrap_or(0);
        let (b, t) = (shape.batch, d.seq_len);
        let n = b * t;
        let tp = shape.tp.max(1);
        debug_assert!(
            !shape.sp || n.is_multiple_of(tp),
            "step::refuse rejects token counts sequence parallelism cannot split"
        );
        let nl = if shape.sp { n / tp } else { n };
        let flash = shape.attention == Attention::Flash;
        // The permutation kernels index in 32 bits.
        let scores = if flash { 0 } else { b * d.heads * t * t };
        let largest = (n * d.qkv_rows()).max(scores);
        if largest >= 1 << 31 {
            return Err(RunError::Plan(format!(
                "a micro-batch of {b} × {t} tokens makes tensors of {largest} elements; the \
                 runtime's kernels index up to 2^31: lower micro_batch"
            )));
        }
        let (hh, dd) = (d.heads, d.head_dim);
        if flash && dd > attention::MAX_HEAD_DIM {
            return Err(RunError::Plan(format!(
                "flash attention takes head sizes up to {}, not {dd}: use attention = standard",
                attention::MAX_HEAD_DIM
            )));
        }
        Ok(Sizes {
            xsz,
            n,
            nl,
            tp,
            bhtd: b * hh * t * dd,
            bhtt: b * hh * t * t,
            bht: b * hh * t,
            flash,
            keep_p: shape.attention == Attention::Standard && shape.recompute == Recompute::None,
            chunk_len,
            d,
        })
    }
}

/// Bytes of each buffer of one layer's kept activations ([`LayerActs`]): 0 where none is
/// kept (NULL).
struct LayerBytes {
    ln1: usize,
    ln1_mean: usize,
    ln1_rstd: usize,
    q: usize,
    k: usize,
    v: usize,
    p: usize,
    lse: usize,
    a: usize,
    x2: usize,
    ln2: usize,
    ln2_mean: usize,
    ln2_rstd: usize,
    h: usize,
    act: usize,
}

impl Sizes {
    fn layer_bytes(&self) -> LayerBytes {
        let (d, xsz, n, nl) = (&self.d, self.xsz, self.n, self.nl);
        let c = d.hidden;
        LayerBytes {
            ln1: nl * c * xsz,
            ln1_mean: nl * 4,
            ln1_rstd: nl * 4,
            q: self.bhtd * xsz,
            k: self.bhtd * xsz,
            v: self.bhtd * xsz,
            p: if self.keep_p { self.bhtt * xsz } else { 0 },
            lse: if self.flash { self.bht * 4 } else { 0 },
            a: n * d.attn_width() * xsz,
            x2: nl * c * xsz,
            ln2: nl * c * xsz,
            ln2_mean: nl * 4,
            ln2_rstd: nl * 4,
            h: n * d.fc_rows() * xsz,
            act: n * d.ffn * xsz,
        }
    }

    /// Layers whose activations a set keeps: every layer of the longest chunk, or one
    /// shared set under full recompute.
    fn kept_layers(&self, shape: &Shape) -> usize {
        if shape.recompute == Recompute::Full {
            1
        } else {
            self.chunk_len
        }
    }

    /// Bytes of one activation set's buffers besides its layers': the layer inputs (and the
    /// last one's output), the loss gradient, the tokens and the embedding gradient's
    /// order.
    fn set_buffers(&self) -> Vec<usize> {
        let (n, nl, c, xsz) = (self.n, self.nl, self.d.hidden, self.xsz);
        let mut v = vec![nl * c * xsz; self.chunk_len + 1];
        v.extend([nl * c * xsz, n * 4, n * 4, (n + 1) * 4, n * 4]);
        v
    }
}

impl LayerBytes {
    fn all(&self) -> [usize; 15] {
        [
            self.ln1,
            self.ln1_mean,
            self.ln1_rstd,
            self.q,
            self.k,
            self.v,
            self.p,
            self.lse,
            self.a,
            self.x2,
            self.ln2,
            self.ln2_mean,
            self.ln2_rstd,
            self.h,
            self.act,
        ]
    }
}

/// Device bytes of the activation sets the engine allocates for `shape` (as
/// `MemoryPlan::activations` counts them: each buffer at least `cuda::MIN_ALLOC` bytes),
/// without a GPU: what `planc run` holds, for the memory model to be checked against.
pub fn activation_bytes(shape: &Shape) -> Result<usize, RunError> {
    let xsz = if shape.precision == Precision::Fp32 {
        4
    } else {
        2
    };
    let z = Sizes::new(shape, xsz)?;
    let held = |b: usize| if b == 0 { 0 } else { b.max(MIN_ALLOC) };
    let layer: usize = z.layer_bytes().all().into_iter().map(held).sum();
    let rest: usize = z.set_buffers().into_iter().map(held).sum();
    Ok(shape.in_flight.max(1) * (layer * z.kept_layers(shape) + rest))
}

/// The engine's memory plan for `shape` and `micro_batches`, without a GPU: what
/// `Engine::new` allocates and reports (`Engine::memory`), fp8's weight copies and casts
/// aside (`device::fp8`).
pub fn memory_plan(shape: &Shape, micro_batches: usize) -> Result<MemoryPlan, RunError> {
    let xsz = if shape.precision == Precision::Fp32 {
        4
    } else {
        2
    };
    let params = Params::of_stage(&shape.dims, &shape.stage);
    let (weights, gradients, optimizer) = State::bytes(shape, &params, xsz);
    let z = Sizes::new(shape, xsz)?;
    let held = |b: usize| if b == 0 { 0 } else { b.max(MIN_ALLOC) };
    let total = shape.padded(params.total);
    let rope = if shape.dims.position == Position::Rope {
        2 * held(shape.dims.seq_len * (shape.dims.head_dim / 2) * 4)
    } else {
        0
    };
    let scratch = ScratchBytes::of(shape, &z, &params)
        .all()
        .into_iter()
        .map(held)
        .sum::<usize>()
        // cuBLAS's workspace, the loss sums, the reduced scalars, the weight-decay mask,
        // rope's tables.
        + held(blas::WORKSPACE)
        + held(micro_batches.max(1) * 4)
        + held(64 * 4)
        + held(total.div_ceil(model::ALIGN))
        + rope;
    // Under fp8: the weights' fp8 copies (weights, as the cost model counts them) and the
    // casts' scratch, cuBLASLt's workspace and the scales' state.
    let (fp8_weights, fp8_scratch) = if shape.precision == Precision::Fp8 {
        let shapes: Vec<(usize, usize)> = fp8_linears(shape, z.n)
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        fp8::bytes(&shapes, z.n, held)
    } else {
        (0, 0)
    };
    Ok(MemoryPlan {
        weights: weights + fp8_weights,
        gradients,
        optimizer,
        activations: activation_bytes(shape)?,
        scratch: scratch + fp8_scratch,
    })
}

/// A buffer of `bytes`, or NULL for none.
fn alloc_or_null(gpu: &mut Gpu, bytes: usize) -> Result<Buf, RunError> {
    if bytes == 0 {
        Ok(Buf::NULL)
    } else {
        gpu.alloc(bytes)
    }
}

/// One activation set for each micro-batch in flight: every layer input, each layer's kept
/// activations (one shared set under full recompute), the loss gradient and the tokens.
fn alloc_act_sets(gpu: &mut Gpu, shape: &Shape, z: &Sizes) -> Result<Vec<ActSet>, RunError> {
    let lb = z.layer_bytes();
    let mut sets = Vec::new();
    for _ in 0..shape.in_flight.max(1) {
        let rest = z.set_buffers();
        let (xs_bytes, tail) = rest.split_at(z.chunk_len + 1);
        let mut xs = Vec::new();
        for &b in xs_bytes {
            xs.push(gpu.alloc(b)?);
        }
        let mut layers = Vec::new();
        for _ in 0..z.kept_layers(shape) {
            layers.push(LayerActs {
                ln1: gpu.alloc(lb.ln1)?,
                ln1_mean: gpu.alloc(lb.ln1_mean)?,
                ln1_rstd: gpu.alloc(lb.ln1_rstd)?,
                q: gpu.alloc(lb.q)?,
                k: gpu.alloc(lb.k)?,
                v: gpu.alloc(lb.v)?,
                p: alloc_or_null(gpu, lb.p)?,
                lse: alloc_or_null(gpu, lb.lse)?,
                a: gpu.alloc(lb.a)?,
                x2: gpu.alloc(lb.x2)?,
                ln2: gpu.alloc(lb.ln2)?,
                ln2_mean: gpu.alloc(lb.ln2_mean)?,
                ln2_rstd: gpu.alloc(lb.ln2_rstd)?,
                h: gpu.alloc(lb.h)?,
                act: gpu.alloc(lb.act)?,
            });
        }
        let [dx_top, tokens, uniq, start, pos] = tail else {
            unreachable!("set_buffers lists five buffers after the layer inputs")
        };
        sets.push(ActSet {
            xs,
            layers,
            dx_top: gpu.alloc(*dx_top)?,
            tokens: gpu.alloc(*tokens)?,
            uniq: gpu.alloc(*uniq)?,
            start: gpu.alloc(*start)?,
            pos: gpu.alloc(*pos)?,
        });
    }
    Ok(sets)
}

/// Bytes of each scratch buffer ([`Scratch`]): 0 where there is none (NULL).
struct ScratchBytes {
    qkv: usize,
    o: usize,
    p: usize,
    tmp: usize,
    dres: usize,
    dln: usize,
    dqkv: usize,
    dq: usize,
    dk: usize,
    dv: usize,
    dp: usize,
    dd: usize,
    d_o: usize,
    da: usize,
    dh: usize,
    dact: usize,
    lnf: usize,
    lnf_mean: usize,
    lnf_rstd: usize,
    logits: usize,
    losses: usize,
    targets: usize,
    partials: usize,
    xout: usize,
    gath: usize,
    lse: usize,
    stats: usize,
    stats_all: usize,
}

impl ScratchBytes {
    fn of(shape: &Shape, z: &Sizes, params: &Params) -> ScratchBytes {
        let Sizes {
            ref d,
            xsz,
            n,
            nl,
            tp,
            bhtd,
            bhtt,
            bht,
            flash,
            keep_p,
            ..
        } = *z;
        let c = d.hidden;
        let max_cols = c.max(d.qkv_rows()).max(d.fc_rows());
        // Flash attention reads and writes the merged layouts, and without rope or shared
        // key/value heads writes dq, dk, dv into the merged qkv gradient.
        let heads_bufs = !flash;
        let grad_bufs = !flash || d.kv_heads != d.heads || d.position == Position::Rope;
        let when = |keep: bool, bytes: usize| if keep { bytes } else { 0 };
        ScratchBytes {
            qkv: n * d.qkv_rows() * xsz,
            o: when(heads_bufs, bhtd * xsz),
            p: when(!(keep_p || flash), bhtt * xsz),
            tmp: n * c * xsz,
            dres: n * c * xsz,
            dln: n * c * xsz,
            dqkv: n * d.qkv_rows() * xsz,
            dq: when(grad_bufs, bhtd * xsz),
            dk: when(grad_bufs, bhtd * xsz),
            dv: when(grad_bufs, bhtd * xsz),
            dp: when(!flash, bhtt * xsz),
            dd: when(flash, bht * 4),
            d_o: when(heads_bufs, bhtd * xsz),
            da: n * d.attn_width() * xsz,
            dh: n * d.fc_rows() * xsz,
            dact: n * d.ffn * xsz,
            lnf: nl * c * xsz,
            lnf_mean: nl * 4,
            lnf_rstd: nl * 4,
            // The logits only where the output layer is: under a pipeline, the last stage
            // (a micro-batch's logits are the largest tensor of a large-vocabulary model).
            logits: when(shape.stage.last, n * d.vocab * xsz),
            losses: n * 4,
            targets: n * 4,
            partials: (2 * n.div_ceil(CHUNK_ROWS) * max_cols)
                .max(norm_partials(nl, c))
                .max(1024)
                .max(REP_BLOCKS * params.list.len())
                * 4,
            xout: nl * c * xsz,
            gath: when(tp > 1 && shape.sp, n * c * xsz),
            lse: when(tp > 1, n * 4),
            stats: when(tp > 1, n * 3 * 4),
            stats_all: when(tp > 1, tp * n * 3 * 4),
        }
    }

    fn all(&self) -> [usize; 28] {
        [
            self.qkv,
            self.o,
            self.p,
            self.tmp,
            self.dres,
            self.dln,
            self.dqkv,
            self.dq,
            self.dk,
            self.dv,
            self.dp,
            self.dd,
            self.d_o,
            self.da,
            self.dh,
            self.dact,
            self.lnf,
            self.lnf_mean,
            self.lnf_rstd,
            self.logits,
            self.losses,
            self.targets,
            self.partials,
            self.xout,
            self.gath,
            self.lse,
            self.stats,
            self.stats_all,
        ]
    }
}

impl Scratch {
    fn alloc(
        gpu: &mut Gpu,
        shape: &Shape,
        z: &Sizes,
        params: &Params,
    ) -> Result<Scratch, RunError> {
        let b = ScratchBytes::of(shape, z, params);
        // In the order they have always been allocated.
        let (o, d_o) = (alloc_or_null(gpu, b.o)?, alloc_or_null(gpu, b.d_o)?);
        let (dq, dk, dv) = (
            alloc_or_null(gpu, b.dq)?,
            alloc_or_null(gpu, b.dk)?,
            alloc_or_null(gpu, b.dv)?,
        );
        let gath = alloc_or_null(gpu, b.gath)?;
        let lse = alloc_or_null(gpu, b.lse)?;
        let stats = alloc_or_null(gpu, b.stats)?;
        let stats_all = alloc_or_null(gpu, b.stats_all)?;
        let logits = alloc_or_null(gpu, b.logits)?;
        Ok(Scratch {
            qkv: gpu.alloc(b.qkv)?,
            o,
            p: alloc_or_null(gpu, b.p)?,
            tmp: gpu.alloc(b.tmp)?,
            dres: gpu.alloc(b.dres)?,
            dln: gpu.alloc(b.dln)?,
            dqkv: gpu.alloc(b.dqkv)?,
            dq,
            dk,
            dv,
            dp: alloc_or_null(gpu, b.dp)?,
            dd: alloc_or_null(gpu, b.dd)?,
            d_o,
            da: gpu.alloc(b.da)?,
            dh: gpu.alloc(b.dh)?,
            dact: gpu.alloc(b.dact)?,
            lnf: gpu.alloc(b.lnf)?,
            lnf_mean: gpu.alloc(b.lnf_mean)?,
            lnf_rstd: gpu.alloc(b.lnf_rstd)?,
            logits,
            losses: gpu.alloc(b.losses)?,
            targets: gpu.alloc(b.targets)?,
            partials: gpu.alloc(b.partials)?,
            xout: gpu.alloc(b.xout)?,
            gath,
            lse,
            stats,
            stats_all,
        })
    }
}

/// One byte per `model::ALIGN`-element block of the flat buffers: whether its tensor takes
/// weight decay.
fn decay_mask(gpu: &mut Gpu, params: &Params, total: usize) -> Result<Buf, RunError> {
    let mut mask = vec![0u8; total.div_ceil(model::ALIGN)];
    for p in params.list.iter().filter(|p| p.decay) {
        let blocks = p.offset / model::ALIGN..(p.offset + p.numel()).div_ceil(model::ALIGN);
        mask[blocks].fill(1);
    }
    let b = gpu.alloc(mask.len())?;
    gpu.upload(b, &mask)?;
    Ok(b)
}

/// Rope's cosines and sines on the GPU (NULL without rope).
fn rope_buffers(gpu: &mut Gpu, d: &Dims) -> Result<(Buf, Buf), RunError> {
    if d.position != Position::Rope {
        return Ok((Buf::NULL, Buf::NULL));
    }
    let (c, s) = rope_table(d);
    let (bc, bs) = (gpu.alloc(c.len() * 4)?, gpu.alloc(s.len() * 4)?);
    gpu.upload(bc, &c)?;
    gpu.upload(bs, &s)?;
    Ok((bc, bs))
}

/// Blocks of the gradient buffer's sum of squares (the gradient norm).
const SUMSQ_BLOCKS: usize = 1024;
/// Blocks of a sum of squares taken tensor by tensor (the whole tensors' share of it).
const REP_BLOCKS: usize = 32;

impl Engine {
    pub fn new(gpu: Gpu, shape: Shape, micro_batches: usize) -> Result<Engine, RunError> {
        let mut gpu = gpu;
        let blas = Blas::new(&gpu, shape.precision)?;
        let blas_workspace = gpu.alloc(blas::WORKSPACE)?;
        blas.use_workspace(blas_workspace)?;
        let shape_precision = shape.precision;
        let d = shape.dims.clone();
        let params = Params::of_stage(&d, &shape.stage);
        let xsz = if shape.precision == Precision::Fp32 {
            4
        } else {
            2
        };
        let mut mem = MemoryPlan::default();
        let total = shape.padded(params.total);
        let state = State::alloc(&mut gpu, &shape, &params, xsz, &mut mem)?;
        let z = Sizes::new(&shape, xsz)?;
        let flash = z.flash;
        let before = gpu.held;
        let sets = alloc_act_sets(&mut gpu, &shape, &z)?;
        mem.activations = gpu.held - before;
        let before = gpu.held;
        let s = Scratch::alloc(&mut gpu, &shape, &z, &params)?;
        let loss_sums = gpu.alloc(micro_batches.max(1) * 4)?;
        let scalars = gpu.alloc(64 * 4)?;
        let decay = decay_mask(&mut gpu, &params, total)?;
        let (rope_cos, rope_sin) = rope_buffers(&mut gpu, &d)?;
        mem.scratch = gpu.held - before + blas_workspace.bytes;
        let (fp8, fp8_linears) = if shape.precision == Precision::Fp8 {
            fp8_products(&mut gpu, &shape, z.n)?
        } else {
            (None, BTreeMap::new())
        };
        if let Some(f) = &fp8 {
            // The weights' fp8 copies are weights, as the cost model counts them.
            mem.weights += f.weight_bytes;
            mem.scratch += f.scratch_bytes;
        }
        // What was allocated is what `memory_plan` lists without a GPU, which CPU tests
        // hold to the compiler's memory model (checked where GPU tests build in debug).
        #[cfg(debug_assertions)]
        {
            let listed = memory_plan(&shape, micro_batches)?;
            debug_assert_eq!(mem, listed, "the engine's allocations left memory_plan");
        }
        let State {
            w32,
            wx,
            grad,
            m,
            v,
        } = state;
        let mut eng = Engine {
            attn: None,
            fp8,
            fp8_linears,
            gpu,
            blas,
            shape,
            params,
            xsz,
            w32,
            wx,
            grad,
            m,
            v,
            decay,
            sets,
            s,
            loss_sums,
            memory: mem,
            scalars,
            rope_cos,
            rope_sin,
            marks: None,
            staged: Vec::new(),
            tpc: None,
            nty: dist::activation_type(shape_precision),
        };
        if flash {
            eng.plan_cudnn_attention()?;
        }
        Ok(eng)
    }

    /// Plans cuDNN's attention for this shape as `PLANC_CUDNN_ATTENTION` asks; where it
    /// cannot run, planc's kernels do, and the first rank says why in one line.
    fn plan_cudnn_attention(&mut self) -> Res {
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

    /// The kernels that run this engine's fused attention.
    fn kernels(&self, hd: Heads) -> Kernels<'_> {
        match &self.attn {
            Some(sdpa) => Kernels::Cudnn(sdpa),
            None => hd.tensor_cores().into(),
        }
    }

    /// Marks where a step's work outside the passes begins (traced runs), of `kind`.
    pub fn mark_step(&mut self, kind: WorkKind, name: &str) -> Res {
        self.mark(kind, || name.to_string())
    }

    /// Marks the end of a traced step's last span.
    pub fn mark_end(&mut self) -> Res {
        self.push_mark(None, || "end".to_string())
    }

    /// Names the operation that begins here, of `kind` (what the step by kind sums it
    /// under, the cost model's kind of the same work): a span of the trace (with `--trace`)
    /// and the plan's name for the collectives it queues (`trail`, with more than one rank).
    fn mark(&mut self, kind: WorkKind, name: impl FnOnce() -> String) -> Res {
        self.push_mark(Some(kind), name)
    }

    /// Marks where `span`, an operation's span, begins: of its operation's kind.
    fn mark_span(&mut self, span: Span) -> Res {
        self.mark(span.kind(), || span.name())
    }

    /// The attention core's operation: the fused kernel's, or the standard core's.
    fn core_op(&self) -> OpId {
        match self.shape.attention {
            Attention::Flash => OpId::Attention,
            Attention::Standard => OpId::AttentionCore,
        }
    }

    fn push_mark(&mut self, kind: Option<WorkKind>, name: impl FnOnce() -> String) -> Res {
        if self.marks.is_none() && !trail::is_on() {
            return Ok(());
        }
        let name = name();
        if trail::is_on() {
            trail::doing(name.clone());
        }
        if self.marks.is_some() {
            let e = self.gpu.event()?;
            if let Some(m) = self.marks.as_mut() {
                m.push(Mark {
                    name,
                    kind,
                    event: e,
                });
            }
        }
        Ok(())
    }

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

    fn wx_of(&self, name: &str) -> Buf {
        match self.params.get(name) {
            Some(p) => self.wx.at(p.offset, self.xsz),
            None => Buf::NULL,
        }
    }

    fn g_of(&self, name: &str) -> Buf {
        match self.params.get(name) {
            Some(p) => self.grad.at(p.offset, 4),
            None => Buf::NULL,
        }
    }

    pub fn zero_grads(&self) -> Res {
        self.gpu.zero(self.grad)
    }

    /// What a step does before its passes: under fp8, the scales set from the amax
    /// histories and the weights cast to fp8 for the step (`device::fp8`).
    pub fn begin_step(&mut self) -> Res {
        if self.fp8.is_none() {
            return Ok(());
        }
        self.mark(WorkKind::Linear, || "fp8 weight casts".to_string())?;
        let weights: Vec<(Linear, Buf)> = self
            .fp8_linears
            .iter()
            .map(|(&(l, name), lin)| (*lin, self.wx_of(&format!("h.{l}.{name}"))))
            .collect();
        let fp8 = self.fp8.as_mut().expect("checked above");
        fp8.begin_step(&self.gpu, &weights)
    }

    /// How many of this engine's products run in fp8.
    pub fn fp8_products(&self) -> usize {
        self.fp8_linears.len()
    }

    /// Under `precision = fp8`, a line when some of the layers' products run in bf16
    /// (dimensions cuBLASLt's fp8 products do not take).
    pub fn fp8_note(&self) -> Option<String> {
        if self.shape.precision != Precision::Fp8 {
            return None;
        }
        let layers = self.shape.stage.chunks.iter().map(Vec::len).sum::<usize>();
        let all = 4 * layers;
        let bf16: Vec<String> = linear_shapes(&self.shape.dims)
            .iter()
            .filter(|(_, i, o)| !fp8::supports(self.rows(), *i, *o))
            .map(|(name, i, o)| format!("{name} ({i} → {o})"))
            .collect();
        (self.fp8_products() < all).then(|| {
            format!(
                "note: precision = fp8 runs {} of the layers' {all} linear products in fp8; \
                 {} stay bf16 (fp8 products need the tokens of a micro-batch, {}, and each \
                 side to be multiples of 16)",
                self.fp8_products(),
                bf16.join(", "),
                self.rows()
            )
        })
    }

    /// `out[rows, o] = inp[rows, i] · Wᵀ` for layer `l`'s weight `name`: in fp8 where it
    /// runs so, else through cuBLAS in the storage type.
    fn linear(&self, l: usize, name: &'static str, out: Buf, inp: Buf, rows: usize) -> Res {
        let (i, o) = self.linear_shape(name);
        match (&self.fp8, self.fp8_linears.get(&(l, name))) {
            (Some(f), Some(lin)) => f.forward(&self.gpu, lin, out, inp, rows),
            _ => {
                let w = self.wx_of(&format!("h.{l}.{name}"));
                self.blas.linear(out, inp, w, rows, i, o)
            }
        }
    }

    /// Backward of `linear`: `dinp = dout · W` and the weight gradient `+= doutᵀ · inp`.
    fn linear_bwd(
        &self,
        l: usize,
        name: &'static str,
        dinp: Buf,
        dout: Buf,
        inp: Buf,
        rows: usize,
    ) -> Res {
        let (i, o) = self.linear_shape(name);
        let gw = self.g_of(&format!("h.{l}.{name}"));
        match (&self.fp8, self.fp8_linears.get(&(l, name))) {
            (Some(f), Some(lin)) => f.backward(&self.gpu, lin, dinp, gw, dout, inp, rows),
            _ => {
                let w = self.wx_of(&format!("h.{l}.{name}"));
                self.blas.linear_dinp(dinp, dout, w, rows, i, o)?;
                self.blas.linear_dw(gw, dout, inp, rows, i, o)
            }
        }
    }

    /// (inputs, outputs) of a layer's linear weight `name` on this rank.
    fn linear_shape(&self, name: &str) -> (usize, usize) {
        linear_shapes(&self.shape.dims)
            .into_iter()
            .find(|s| s.0 == name)
            .map(|s| (s.1, s.2))
            .expect("a layer's linear weight")
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

    fn tp_comm(&self) -> Option<&Comm> {
        self.tpc.as_deref().filter(|_| self.shape.tp > 1)
    }

    /// A row-parallel product's partial sums `[N, C]` at `x`, made whole: summed over the
    /// tensor-parallel ranks (all-reduce), or summed and split by token (reduce-scatter,
    /// in place: this rank's rows end at `x.at(row0·C)`). Returns where the rows are.
    fn tp_reduce_rows(&mut self, x: Buf) -> Result<Buf, RunError> {
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

    /// Opens a span of its own for a tensor-parallel collective inside an operation's span,
    /// so the trace and the step by kind show it as communication, not as the product or
    /// norm around it; returns the operation's name, to go on with after (`resume_span`).
    fn collective_span(&mut self, what: &str) -> Result<Option<(String, WorkKind)>, RunError> {
        let Some((current, kind)) = self
            .marks
            .as_ref()
            .and_then(|m| m.last())
            .map(|m| (m.name.clone(), m.kind.unwrap_or(WorkKind::Linear)))
        else {
            return Ok(None);
        };
        self.mark(WorkKind::Communication, || format!("{current}: {what}"))?;
        Ok(Some((current, kind)))
    }

    fn resume_span(&mut self, span: Option<(String, WorkKind)>) -> Res {
        match span {
            Some((name, kind)) => self.mark(kind, || name),
            None => Ok(()),
        }
    }

    /// The whole micro-batch's `[N, C]` from this rank's rows `x` (sequence parallelism:
    /// all-gathered into the gather buffer); `x` itself otherwise.
    fn tp_gather_rows(&mut self, x: Buf) -> Result<Buf, RunError> {
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
                .filter(|p| model::sp_partial(&p.name))
            {
                comm.all_reduce_sum(self.grad.at(p.offset, 4), p.numel(), stream)?;
            }
            Ok(())
        })
    }

    /// Of a per-element kernel and its pack-a-thread variant, the one to launch over
    /// `elems` elements and its thread count: the variant where a head and its rope halves
    /// are whole 16-byte packs.
    fn per_pack(
        &self,
        (element, pack): (&'static str, &'static str),
        elems: usize,
    ) -> (&'static str, usize) {
        let vec = 16 / self.xsz;
        if self.shape.dims.head_dim.is_multiple_of(2 * vec) {
            (pack, elems / vec)
        } else {
            (element, elems)
        }
    }

    fn norms(&self) -> Norms {
        let d = &self.shape.dims;
        Norms {
            rows: self.lrows(),
            width: d.hidden,
            xsz: self.xsz,
            eps: d.norm_eps,
            rms: d.norm == Norm::Rmsnorm,
        }
    }

    /// Normalizes this rank's rows (`lrows`).
    fn norm_fwd(&self, out: Buf, mean: Buf, rstd: Buf, inp: Buf, w: Buf, b: Buf) -> Res {
        self.norms().forward(&self.gpu, out, mean, rstd, inp, w, b)
    }

    /// dinp += norm backward; dw, db += the weight gradients.
    #[allow(clippy::too_many_arguments)]
    fn norm_bwd(
        &self,
        dinp: Buf,
        dout: Buf,
        inp: Buf,
        w: Buf,
        mean: Buf,
        rstd: Buf,
        dw: Buf,
        db: Buf,
    ) -> Res {
        let grads = NormGrads { dinp, dw, db };
        let saved = NormSaved { inp, mean, rstd };
        self.norms()
            .backward(&self.gpu, self.s.partials, grads, dout, w, saved)
    }

    fn sum_partials(&self, out: Buf, part: Buf, chunks: usize, cols: usize) -> Res {
        rows::sum_partials(&self.gpu, out, part, chunks, cols)
    }

    /// db[cols] += Σ_rows x[rows, cols]
    fn bias_grad(&self, db: Buf, x: Buf, rows: usize, cols: usize) -> Res {
        if db == Buf::NULL {
            return Ok(());
        }
        let chunks = rows.div_ceil(CHUNK_ROWS);
        self.gpu.launch(
            "colsum_partial",
            (cols.div_ceil(256) as u32, chunks as u32),
            256,
            &[
                Arg::P(self.s.partials),
                Arg::P(x),
                Arg::L(rows as i64),
                Arg::I(cols as i32),
                Arg::I(CHUNK_ROWS as i32),
            ],
        )?;
        self.sum_partials(db, self.s.partials, chunks, cols)
    }

    fn add_bias(&self, x: Buf, b: Buf, rows: usize, cols: usize) -> Res {
        if b == Buf::NULL {
            return Ok(());
        }
        self.gpu.launch_v(
            "add_bias",
            rows * cols,
            &[
                Arg::P(x),
                Arg::P(b),
                Arg::L(rows as i64),
                Arg::I(cols as i32),
            ],
        )
    }

    fn attn_args(&self) -> (usize, usize, usize, usize, usize) {
        let d = &self.shape.dims;
        (self.shape.batch, d.seq_len, d.heads, d.kv_heads, d.head_dim)
    }

    fn heads(&self) -> Heads {
        let d = &self.shape.dims;
        Heads {
            b: self.shape.batch,
            h: d.heads,
            t: d.seq_len,
            d: d.head_dim,
            xsz: self.xsz,
        }
    }

    /// The MLP's activation over a micro-batch's tokens (gathered under sequence
    /// parallelism) and this rank's share of F.
    fn activation(&self) -> Activation {
        Activation {
            mlp: self.shape.dims.mlp,
            rows: self.rows(),
            width: self.shape.dims.ffn,
        }
    }

    fn softmax_fwd(&self, p: Buf) -> Res {
        let (b, t, h, _, dd) = self.attn_args();
        softmax_causal_fwd(&self.gpu, p, b * h * t, t, dd)
    }

    /// One layer forward: `x_out` = layer(`x_in`), keeping what `a` holds. Under tensor
    /// parallelism the products are Megatron-LM's: q, k, v and the MLP's first product
    /// column-parallel (this rank's heads and share of F), the projections after them
    /// row-parallel, their partial sums made whole before the bias and the residual; under
    /// sequence parallelism the norms and the residual run on this rank's tokens, gathered
    /// before the column-parallel products and scattered after the row-parallel ones.
    fn layer_fwd(&mut self, l: usize, x_in: Buf, x_out: Buf, a: LayerActs) -> Res {
        let d = self.shape.dims.clone();
        let n = self.rows();
        let nl = self.lrows();
        let w = |s: &Self, part: &str| s.wx_of(&format!("h.{l}.{part}"));
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
            w(self, "ln1_w"),
            w(self, "ln1_b"),
        )?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::QkvProj,
            part: Part::Forward,
        })?;
        let ln1 = self.tp_gather_rows(a.ln1)?;
        self.linear(l, "qkv_w", self.s.qkv, ln1, n)?;
        let (b, t, h, g, dd) = self.attn_args();
        let (split, threads) = self.per_pack(("qkv_split", "qkv_split_v"), b * h * t * dd);
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
            args.push(Arg::P(w(self, "qkv_b")));
        } else {
            self.add_bias(self.s.qkv, w(self, "qkv_b"), n, qr)?;
        }
        self.gpu.launch_n(split, threads, &args)?;
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
        self.mark_span(Span::Layer {
            l,
            op: OpId::AttentionOutProj,
            part: Part::Forward,
        })?;
        self.linear(l, "proj_w", self.s.tmp, a.a, n)?;
        let proj = self.tp_reduce_rows(self.s.tmp)?;
        self.add_residual(a.x2, x_in, proj, w(self, "proj_b"), nl, c)?;
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
            w(self, "ln2_w"),
            w(self, "ln2_b"),
        )?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpUpProj,
            part: Part::Forward,
        })?;
        let ln2 = self.tp_gather_rows(a.ln2)?;
        self.linear(l, "fc_w", a.h, ln2, n)?;
        self.add_bias(a.h, w(self, "fc_b"), n, fr)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpActivation,
            part: Part::Forward,
        })?;
        self.activation().forward(&self.gpu, a.act, a.h)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpDownProj,
            part: Part::Forward,
        })?;
        self.linear(l, "fc2_w", self.s.tmp, a.act, n)?;
        let down = self.tp_reduce_rows(self.s.tmp)?;
        self.add_residual(x_out, a.x2, down, w(self, "fc2_b"), nl, c)
    }

    /// `out[rows, cols] = a + b + bias` (bias may be null): the residual stream after a
    /// row-parallel product, its bias added in the same pass.
    fn add_residual(&self, out: Buf, a: Buf, b: Buf, bias: Buf, rows: usize, cols: usize) -> Res {
        if !cols.is_multiple_of(16 / self.xsz) {
            self.add_bias(b, bias, rows, cols)?;
            return self.add(out, a, b, rows * cols);
        }
        self.gpu.launch_v(
            "add_bias_residual",
            rows * cols,
            &[
                Arg::P(out),
                Arg::P(a),
                Arg::P(b),
                Arg::P(bias),
                Arg::L(rows as i64),
                Arg::I(cols as i32),
            ],
        )
    }

    fn add(&self, out: Buf, a: Buf, b: Buf, n: usize) -> Res {
        self.gpu.launch_v(
            "add_x",
            n,
            &[Arg::P(out), Arg::P(a), Arg::P(b), Arg::L(n as i64)],
        )
    }

    /// One layer backward: `dres` holds d(output) and becomes d(input).
    fn layer_bwd(&mut self, l: usize, x_in: Buf, a: LayerActs) -> Res {
        let d = self.shape.dims.clone();
        let n = self.rows();
        let w = |s: &Self, part: &str| s.wx_of(&format!("h.{l}.{part}"));
        let gr = |s: &Self, part: &str| s.g_of(&format!("h.{l}.{part}"));
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
        self.linear_bwd(l, "fc2_w", dact, dfull, a.act, n)?;
        self.bias_grad(gr(self, "fc2_b"), dres, nl, c)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpActivation,
            part: Part::Backward,
        })?;
        self.activation().backward(&self.gpu, dh, a.h, dact)?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::MlpUpProj,
            part: Part::Backward,
        })?;
        let ln2 = self.tp_gather_rows(a.ln2)?;
        self.linear_bwd(l, "fc_w", dln, dh, ln2, n)?;
        self.bias_grad(gr(self, "fc_b"), dh, n, fr)?;
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
            w(self, "ln2_w"),
            a.ln2_mean,
            a.ln2_rstd,
            gr(self, "ln2_w"),
            gr(self, "ln2_b"),
        )?;
        self.mark_span(Span::Layer {
            l,
            op: OpId::AttentionOutProj,
            part: Part::Backward,
        })?;
        let dfull = self.tp_gather_rows(dres)?;
        self.linear_bwd(l, "proj_w", self.s.da, dfull, a.a, n)?;
        self.bias_grad(gr(self, "proj_b"), dres, nl, c)?;
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
        self.mark_span(Span::Layer {
            l,
            op: OpId::QkvProj,
            part: Part::Backward,
        })?;
        let ln1 = self.tp_gather_rows(a.ln1)?;
        self.linear_bwd(l, "qkv_w", dln, self.s.dqkv, ln1, n)?;
        self.bias_grad(gr(self, "qkv_b"), self.s.dqkv, n, qr)?;
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
            w(self, "ln1_w"),
            a.ln1_mean,
            a.ln1_rstd,
            gr(self, "ln1_w"),
            gr(self, "ln1_b"),
        )
    }

    /// Whether flash attention's backward writes dq, dk and dv straight into the merged qkv
    /// gradient: it can when each query head has its own key/value head and no rope turns
    /// them (the merge would then only permute).
    fn flash_into_qkv(&self) -> bool {
        let d = &self.shape.dims;
        self.shape.attention == Attention::Flash
            && d.kv_heads == d.heads
            && d.position != Position::Rope
    }

    /// dq, dk, dv [B, H, T, D] → the merged qkv gradient (rope undone, the query heads of
    /// a key/value head summed).
    fn qkv_merge_grad(&self) -> Res {
        let (b, t, h, g, dd) = self.attn_args();
        let n = self.rows();
        let qr = self.shape.dims.qkv_rows();
        let s = &self.s;
        let (merge, threads) = self.per_pack(("qkv_merge_grad", "qkv_merge_grad_v"), n * qr);
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
            ],
        )
    }

    /// Standard attention's core backward: d_o → dq, dk, dv through the probabilities
    /// (kept, or recomputed here) and the score gradient in `dp`.
    fn attention_core_bwd(&mut self, l: usize, a: LayerActs) -> Res {
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

    /// A micro-batch's tokens and targets as `forward` copies them to the GPU, with the
    /// embedding gradient's token order. Host work: the step loop prepares the next step's
    /// first micro-batch while the GPU still runs this one, so a step does not start with
    /// the GPU waiting for the host.
    pub fn host_batch(&self, chunk: usize, inputs: &[u32], targets: &[u32]) -> HostBatch {
        let d = &self.shape.dims;
        let (first, last) = self.ends(chunk);
        let as_i32 = |x: &[u32]| x.iter().map(|&t| t as i32).collect::<Vec<i32>>();
        // The embedding gradient sums each token's positions in a fixed order; a
        // tensor-parallel rank sums the tokens of its rows of the table only: tokens
        // [v0, v0 + vocab) (vocabulary-parallel under tensor parallelism).
        let (uniq, start, pos) = if first {
            token_order(
                &inputs[..self.rows()],
                self.shape.tp_rank * d.vocab,
                d.vocab,
            )
        } else {
            Default::default()
        };
        HostBatch {
            tokens: if first { as_i32(inputs) } else { Vec::new() },
            targets: if last { as_i32(targets) } else { Vec::new() },
            uniq,
            start,
            pos,
        }
    }

    /// Copies the step's micro-batches (`(j, batch)`: micro-batch `j`'s) into device
    /// memory of their own, in one upload, for a step whose forwards read them with
    /// `Input::Staged` (a replayed CUDA graph cannot read the host). Allocates on first
    /// use: call it outside a graph capture.
    pub fn stage(&mut self, batches: &[(usize, HostBatch)]) -> Res {
        let n = self.rows();
        // Each micro-batch's tokens, token order (uniq, start, pos) and targets, in a row.
        let lens = [n, n, n + 1, n, n];
        let per: usize = lens.iter().sum();
        let count = batches.iter().map(|(j, _)| j + 1).max().unwrap_or(0);
        if self.staged.len() < count {
            let all = self.gpu.alloc(count * per * 4)?;
            self.memory.scratch += all.bytes;
            self.staged = (0..count)
                .map(|j| {
                    let mut at = j * per;
                    let mut next = |len: usize| {
                        let b = Buf {
                            bytes: len * 4,
                            ..all.at(at, 4)
                        };
                        at += len;
                        b
                    };
                    Staged {
                        tokens: next(lens[0]),
                        uniq: next(lens[1]),
                        start: next(lens[2]),
                        pos: next(lens[3]),
                        targets: next(lens[4]),
                    }
                })
                .collect();
        }
        let mut host = vec![0i32; count * per];
        for (j, b) in batches {
            let mut at = j * per;
            for (part, len) in [&b.tokens, &b.uniq, &b.start, &b.pos, &b.targets]
                .into_iter()
                .zip(lens)
            {
                host[at..at + part.len()].copy_from_slice(part);
                at += len;
            }
        }
        let first = self.staged[0].tokens;
        self.gpu.upload(
            Buf {
                bytes: count * per * 4,
                ..first
            },
            &host,
        )
    }

    /// Micro-batch `j`'s tokens and token order into activation set `set`, and its targets
    /// where this chunk ends in the loss head: uploaded from the host, or copied from where
    /// `stage` put them.
    fn feed(&mut self, set: usize, j: usize, (first, last): (bool, bool), input: Input) -> Res {
        let st = &self.sets[set];
        let mut pairs = Vec::new();
        if first {
            pairs.extend([(st.tokens, 0), (st.uniq, 1), (st.start, 2), (st.pos, 3)]);
        }
        if last {
            pairs.push((self.s.targets, 4));
        }
        match input {
            Input::Host(batch) => {
                let host = [
                    &batch.tokens[..],
                    &batch.uniq[..],
                    &batch.start[..],
                    &batch.pos[..],
                    &batch.targets[..],
                ];
                let copies: Vec<(Buf, &[i32])> = pairs.iter().map(|&(b, k)| (b, host[k])).collect();
                self.gpu.upload_all(&copies)
            }
            Input::Staged => {
                let sg = self.staged[j];
                let dev = [sg.tokens, sg.uniq, sg.start, sg.pos, sg.targets];
                for (b, k) in pairs {
                    self.gpu.copy(b, dev[k], b.bytes.min(dev[k].bytes))?;
                }
                Ok(())
            }
        }
    }

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
    fn embed_fwd(&mut self, set: usize, j: usize, input: Input, last: bool) -> Res {
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
                    Arg::P(self.wx_of("wte")),
                    Arg::P(self.wx_of("wpe")),
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
                Arg::P(self.wx_of("wte")),
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
                    Arg::P(self.wx_of("wpe")),
                    Arg::L(nl as i64),
                    Arg::L(self.row0() as i64),
                    Arg::I(d.seq_len as i32),
                    Arg::I(c as i32),
                ],
            )?;
        }
        Ok(())
    }

    /// The loss head of micro-batch `j`, forward and backward, from the chunk's last layer
    /// output (`xs[top]` of activation set `set`) to the gradient it sends into that layer.
    fn loss_head(&mut self, set: usize, j: usize, top: usize, dscale: f32) -> Res {
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
            self.wx_of("lnf_w"),
            self.wx_of("lnf_b"),
        )?;
        let head = if d.tied { "wte" } else { "lm_head" };
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
            self.wx_of("lnf_w"),
            s.lnf_mean,
            s.lnf_rstd,
            self.g_of("lnf_w"),
            self.g_of("lnf_b"),
        )
    }

    /// Cross-entropy over the logits: each token's loss, and the logits overwritten by
    /// their gradient scaled by `dscale`; under tensor parallelism combined over the
    /// vocabulary's shares.
    fn cross_entropy(&self, dscale: f32) -> Res {
        let d = &self.shape.dims;
        let n = self.rows();
        let v0 = self.shape.tp_rank * d.vocab;
        let s = &self.s;
        let Some(comm) = self.tp_comm() else {
            return self.gpu.launch(
                "cross_entropy",
                (n as u32, 1),
                1024,
                &[
                    Arg::P(s.logits),
                    Arg::P(s.losses),
                    Arg::P(s.targets),
                    Arg::I(d.vocab as i32),
                    Arg::F(dscale),
                ],
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
                Arg::P(self.g_of("wte")),
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
                    Arg::P(self.g_of("wpe")),
                    Arg::P(dfull),
                    Arg::I(self.shape.batch as i32),
                    Arg::I(t as i32),
                    Arg::I(c as i32),
                ],
            )?;
        }
        Ok(())
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

    /// One optimizer update over this rank's shard `[lo, hi)` of the flat buffers (all of
    /// them without ZeRO); `gscale` multiplies the gradients first (clipping, loss-scale
    /// removal); `t` counts updates from 1. Adam's moments are indexed from `lo`.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &self,
        lr: f32,
        wd: f32,
        (b1, b2, eps): (f32, f32, f32),
        t: u64,
        gscale: f32,
        (lo, hi): (usize, usize),
    ) -> Res {
        let bc1 = 1.0 - (b1 as f64).powi(t as i32);
        let bc2 = 1.0 - (b2 as f64).powi(t as i32);
        let wx = if self.xsz == 4 {
            Buf::NULL
        } else {
            self.wx.at(lo, self.xsz)
        };
        let n = hi - lo;
        if n == 0 {
            return Ok(());
        }
        let (w, g) = (self.w32.at(lo, 4), self.grad.at(lo, 4));
        if self.shape.optimizer == Optimizer::Sgd {
            self.gpu.launch_n(
                "sgd_flat",
                n,
                &[
                    Arg::P(w),
                    Arg::P(wx),
                    Arg::P(g),
                    Arg::L(n as i64),
                    Arg::L(lo as i64),
                    Arg::P(self.decay),
                    Arg::F(lr),
                    Arg::F(wd),
                    Arg::F(gscale),
                ],
            )
        } else {
            // Four elements a thread; 16-byte accesses where the range starts on a multiple
            // of four (the buffers themselves are 256-byte aligned).
            self.gpu.launch_n(
                "adamw_flat",
                n.div_ceil(4),
                &[
                    Arg::P(w),
                    Arg::P(wx),
                    Arg::P(g),
                    Arg::P(self.m),
                    Arg::P(self.v),
                    Arg::L(n as i64),
                    Arg::L(lo as i64),
                    Arg::P(self.decay),
                    Arg::F(lr),
                    Arg::F(b1),
                    Arg::F(b2),
                    Arg::F(eps),
                    Arg::F(wd),
                    Arg::F(bc1 as f32),
                    Arg::F(bc2.sqrt() as f32),
                    Arg::F(gscale),
                    Arg::I((lo % 4 == 0) as i32),
                ],
            )
        }
    }

    /// Σ g² over the tensors in `[lo, hi)` that every tensor-parallel rank holds whole
    /// (one f32 at `out`): the gradient norm counts them once, not once per rank.
    pub fn whole_sumsq(&self, range: (usize, usize), out: Buf) -> Result<(), RunError> {
        self.sumsq_of(range, out, |name| !model::tp_split(name))
    }

    /// Σ g² over the tensors named `keep` within `[lo, hi)` (one f32 at `out`).
    pub fn sumsq_of(
        &self,
        (lo, hi): (usize, usize),
        out: Buf,
        keep: impl Fn(&str) -> bool,
    ) -> Result<(), RunError> {
        let mut k = 0usize;
        for p in self.params.list.iter().filter(|p| keep(&p.name)) {
            let (a, b) = (p.offset.max(lo), (p.offset + p.numel()).min(hi));
            if a >= b {
                continue;
            }
            self.gpu.launch(
                "sumsq_partial",
                (REP_BLOCKS as u32, 1),
                256,
                &[
                    Arg::P(self.s.partials.at(k * REP_BLOCKS, 4)),
                    Arg::P(self.grad.at(a, 4)),
                    Arg::L((b - a) as i64),
                ],
            )?;
            k += 1;
        }
        if k == 0 {
            return self.gpu.zero(Buf { bytes: 4, ..out });
        }
        self.gpu.launch(
            "sum_partial",
            (1, 1),
            1024,
            &[
                Arg::P(out),
                Arg::P(self.s.partials),
                Arg::L((k * REP_BLOCKS) as i64),
            ],
        )
    }

    /// Σ g² over `[lo, hi)` of the gradient buffer, on the device (one f32 at `out`).
    pub fn grad_sumsq(&self, (lo, hi): (usize, usize), out: Buf) -> Result<(), RunError> {
        let blocks = SUMSQ_BLOCKS;
        self.gpu.launch(
            "sumsq_partial",
            (blocks as u32, 1),
            256,
            &[
                Arg::P(self.s.partials),
                Arg::P(self.grad.at(lo, 4)),
                Arg::L((hi - lo) as i64),
            ],
        )?;
        self.gpu.launch(
            "sum_partial",
            (1, 1),
            1024,
            &[Arg::P(out), Arg::P(self.s.partials), Arg::L(blocks as i64)],
        )
    }
}

/// A layer's linear weights on a rank of dimensions `d`: (name, inputs, outputs).
fn linear_shapes(d: &Dims) -> [(&'static str, usize, usize); 4] {
    [
        ("qkv_w", d.hidden, d.qkv_rows()),
        ("proj_w", d.attn_width(), d.hidden),
        ("fc_w", d.hidden, d.fc_rows()),
        ("fc2_w", d.ffn, d.hidden),
    ]
}

type Fp8Products = (Option<Fp8>, BTreeMap<(usize, &'static str), Linear>);

/// The fp8 state of the stage's layers' linear layers over micro-batches of `rows` tokens:
/// those whose dimensions cuBLASLt's fp8 products take (`fp8::supports`); the others, if
/// any, run in bf16.
fn fp8_products(gpu: &mut Gpu, shape: &Shape, rows: usize) -> Result<Fp8Products, RunError> {
    let (keys, shapes): (Vec<_>, Vec<_>) = fp8_linears(shape, rows).into_iter().unzip();
    if shapes.is_empty() {
        return Ok((None, BTreeMap::new()));
    }
    let (f, linears) = Fp8::new(gpu, &shapes, rows)?;
    Ok((Some(f), keys.into_iter().zip(linears).collect()))
}

/// The stage's linear layers that run in fp8 over micro-batches of `rows` tokens, in the
/// order `fp8_products` allocates them: ((layer, weight name), (inputs, outputs)).
#[allow(clippy::type_complexity)]
fn fp8_linears(shape: &Shape, rows: usize) -> Vec<((usize, &'static str), (usize, usize))> {
    let mut out = Vec::new();
    for &l in shape.stage.chunks.iter().flatten() {
        for (name, i, o) in linear_shapes(&shape.dims) {
            if fp8::supports(rows, i, o) {
                out.push(((l, name), (i, o)));
            }
        }
    }
    out
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

/// Where a forward pass takes its micro-batch from: the host (uploaded as the pass is
/// queued) or the device copy `Engine::stage` made before a replayed step.
#[derive(Clone, Copy)]
pub enum Input<'a> {
    Host(&'a HostBatch),
    Staged,
}

/// A micro-batch's inputs staged in device memory (`Engine::stage`), each buffer the size
/// of its activation set's.
#[derive(Clone, Copy)]
struct Staged {
    tokens: Buf,
    uniq: Buf,
    start: Buf,
    pos: Buf,
    targets: Buf,
}

/// A micro-batch prepared on the host for `Engine::forward` (`Engine::host_batch`): the
/// tokens (first stage), the targets (last stage) and the embedding gradient's token order.
#[derive(Debug, Default)]
pub struct HostBatch {
    tokens: Vec<i32>,
    targets: Vec<i32>,
    uniq: Vec<i32>,
    start: Vec<i32>,
    pos: Vec<i32>,
}

/// The positions of each token of this rank's vocabulary rows `[v0, v0 + vocab)`, grouped
/// by token in token order, positions ascending within a token: the rows that occur
/// (`uniq`, relative to v0), where each one's positions start in `pos` (`start`, one more
/// at the end), and the positions. A counting sort: the host prepares this while the GPU
/// waits at the start of a step, and a comparison sort of a micro-batch's tokens took
/// most of that wait.
///
/// `uniq` and `start` are padded to one entry per input (and one more), the padding an
/// empty range at the end: the embedding gradient takes a block per input whatever the
/// number of distinct tokens, so its grid is the same for every batch (a replayed CUDA
/// graph fixes it), and its blocks past the distinct tokens do nothing.
pub fn token_order(inputs: &[u32], v0: usize, vocab: usize) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let mut count = vec![0u32; vocab + 1];
    for &t in inputs {
        let t = t as usize;
        if (v0..v0 + vocab).contains(&t) {
            count[t - v0 + 1] += 1;
        }
    }
    for r in 0..vocab {
        count[r + 1] += count[r];
    }
    let mut pos = vec![0i32; count[vocab] as usize];
    let mut next = count.clone();
    for (i, &t) in inputs.iter().enumerate() {
        let t = t as usize;
        if (v0..v0 + vocab).contains(&t) {
            pos[next[t - v0] as usize] = i as i32;
            next[t - v0] += 1;
        }
    }
    let (mut uniq, mut start) = (Vec::new(), Vec::new());
    for r in 0..vocab {
        if count[r + 1] > count[r] {
            uniq.push(r as i32);
            start.push(count[r] as i32);
        }
    }
    start.push(pos.len() as i32);
    uniq.resize(inputs.len(), 0);
    start.resize(inputs.len() + 1, pos.len() as i32);
    (uniq, start, pos)
}

/// Rope's table as Hugging Face's Llama computes it: inverse frequencies
/// `1 / theta^(2i/D)` and angles `t · inv` in fp32, their cosines and sines rounded to fp32.
pub fn rope_table(d: &Dims) -> (Vec<f32>, Vec<f32>) {
    let half = d.head_dim / 2;
    let mut c = Vec::with_capacity(d.seq_len * half);
    let mut s = Vec::with_capacity(d.seq_len * half);
    for t in 0..d.seq_len {
        for i in 0..half {
            let inv = 1.0f32 / d.rope_theta.powf((2 * i) as f32 / d.head_dim as f32);
            let angle = (t as f32 * inv) as f64;
            c.push(angle.cos() as f32);
            s.push(angle.sin() as f32);
        }
    }
    (c, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(dp: usize, dp_rank: usize, zero: u64) -> Shape {
        let plan = planc_compiler::check::check_source(
            "t.tp",
            "cluster c { nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }
             model m { preset = \"gpt2-124m\" }
             train { global_batch = 8, precision = bf16, optimizer = adamw }
             parallel { tp = 1, pp = 1, dp = 1, micro_batch = 8 }",
        )
        .plan
        .expect("a valid plan");
        Shape {
            dims: Dims::of(&plan, None).unwrap(),
            batch: 8,
            precision: Precision::Bf16,
            attention: Attention::Standard,
            recompute: Recompute::None,
            optimizer: Optimizer::Adamw,
            in_flight: 1,
            dp,
            dp_rank,
            zero,
            tp: 1,
            tp_rank: 0,
            sp: false,
            stage: Stage::whole(12),
        }
    }

    /// The engine's shape for pipeline rank `stage` of `plan` on tensor-parallel rank 0,
    /// as `planc run` builds it.
    fn run_shape(plan: &planc_compiler::plan::Plan, stage: usize) -> Shape {
        let p = &plan.parallel;
        let dims = Dims::of(plan, None).expect("runnable");
        let tp = p.tp as usize;
        let pp = p.pp as usize;
        let st = if pp > 1 {
            Stage::of(p, dims.layers, stage)
        } else {
            Stage::whole(dims.layers)
        };
        let prog = super::super::program::Program::of(plan, stage, pp).expect("runs");
        Shape {
            dims: dims.tensor_parallel(tp).expect("splits"),
            batch: p.micro_batch as usize,
            precision: plan.train.precision,
            attention: plan.train.attention,
            recompute: p.recompute,
            optimizer: plan.train.optimizer,
            in_flight: prog.in_flight,
            dp: p.dp as usize,
            dp_rank: 0,
            zero: p.zero,
            tp,
            tp_rank: 0,
            sp: p.sequence_parallel && tp > 1,
            stage: st,
        }
    }

    /// The runtime's activations over the memory model's (`cost::memory`, framework planc)
    /// for each stage of `plan`.
    fn activation_ratios(plan: &planc_compiler::plan::Plan) -> Vec<f64> {
        let mb = plan.parallel.grad_accum(plan.train.global_batch).max(1);
        (0..plan.parallel.pp as usize)
            .map(|stage| {
                let runtime = activation_bytes(&run_shape(plan, stage)).expect("sizes") as f64;
                let model = planc_compiler::cost::memory::stage_memory(plan, stage as u64, mb)
                    .activations_bytes;
                runtime / model
            })
            .collect()
    }

    /// The examples planc's runtime runs (dense models, no context or expert parallelism,
    /// full training, at most 16 GPUs), as it runs them.
    fn runnable_examples() -> Vec<(String, planc_compiler::plan::Plan)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("examples")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "tp"))
            .collect();
        files.sort();
        let mut out = Vec::new();
        for f in files {
            let c = planc_compiler::check::check_file(&f, &planc_compiler::source::FsLoader)
                .expect("readable");
            let Some(mut plan) = c.plan else {
                continue;
            };
            plan.framework = planc_compiler::plan::Framework::Planc;
            let runs = Dims::of(&plan, None).is_ok()
                && plan.parallel.cp == 1
                && plan.parallel.ep == 1
                && plan.train.dropout == 0.0
                && plan.cluster.world_size() <= 16
                && plan.train.method.is_full();
            if runs {
                out.push((f.display().to_string(), plan));
            }
        }
        assert!(out.len() >= 5, "{} examples planc runs", out.len());
        out
    }

    /// What `planc run` allocates for activations (sized on the CPU from the buffers
    /// `alloc_act_sets` allocates; Llama 3.2 1B's 10.08 GiB is what two H200s measured) is
    /// what `check` counts for the same plan, on every example it runs.
    #[test]
    fn the_runtimes_activations_are_what_the_memory_model_counts_on_every_example() {
        for (name, plan) in runnable_examples() {
            for r in activation_ratios(&plan) {
                assert!((r - 1.0).abs() < 0.01, "{name}: {r:.4}");
            }
        }
    }

    /// The weights, gradients and optimizer state `planc run` allocates (`memory_plan`,
    /// what the engine reports) are the model's, on every example it runs (under ZeRO:
    /// Adam's moments sharded, the fp32 master weights whole).
    #[test]
    fn the_runtimes_state_is_what_the_memory_model_counts_on_every_example() {
        for (name, plan) in runnable_examples() {
            let mb = plan.parallel.grad_accum(plan.train.global_batch).max(1);
            for stage in 0..plan.parallel.pp as usize {
                let rt = memory_plan(&run_shape(&plan, stage), mb as usize).expect("sizes");
                let m = planc_compiler::cost::memory::stage_memory(&plan, stage as u64, mb);
                let close = |a: usize, b: f64| (a as f64 - b).abs() <= 1e-3 * b;
                assert!(close(rt.weights, m.weights_bytes), "{name}: weights");
                assert!(close(rt.gradients, m.gradients_bytes), "{name}: gradients");
                assert!(close(rt.optimizer, m.optimizer_bytes), "{name}: optimizer");
                assert!(
                    (rt.activations as f64 - m.activations_bytes).abs()
                        < 0.01 * m.activations_bytes,
                    "{name}: activations"
                );
            }
        }
    }

    /// Under fp8 the weights' fp8 copies and transposes are weights to the runtime as to the
    /// model (2 bytes a parameter of the linear layers), over layouts.
    #[test]
    fn the_runtimes_fp8_weight_copies_are_what_the_memory_model_counts() {
        for (model, par) in [
            ("gpt2-124m", "tp = 1, pp = 1"),
            ("llama3.2-1b", "tp = 2, pp = 1, sequence_parallel = true"),
            ("llama3.2-1b", "tp = 1, pp = 2"),
        ] {
            let text = format!(
                "cluster c {{ nodes = 1, gpus_per_node = 4, gpu = H100_SXM_80GB }}
                 model m {{ preset = \"{model}\", seq_len = 1024 }}
                 train {{ global_batch = 16, precision = fp8 }}
                 parallel {{ {par}, dp = auto, micro_batch = 2 }}
                 job j {{ framework = planc }}"
            );
            let c = planc_compiler::check::check_source("t.tp", &text);
            let plan = c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics));
            let mb = plan.parallel.grad_accum(plan.train.global_batch).max(1);
            for stage in 0..plan.parallel.pp as usize {
                let shape = run_shape(&plan, stage);
                let rt = memory_plan(&shape, mb as usize).expect("sizes");
                let m = planc_compiler::cost::memory::stage_memory(&plan, stage as u64, mb);
                let close = |a: usize, b: f64| (a as f64 - b).abs() <= 1e-3 * b;
                assert!(
                    close(rt.weights, m.weights_bytes),
                    "{model}, {par}: {} vs {}",
                    rt.weights,
                    m.weights_bytes
                );
                let bf16 = Shape {
                    precision: Precision::Bf16,
                    ..shape
                };
                let plain = memory_plan(&bf16, mb as usize).expect("sizes");
                assert!(rt.weights > plain.weights && rt.scratch > plain.scratch);
            }
        }
    }

    /// The optimizer's state over optimizers and ZeRO: Adam's moments and SGD's none,
    /// sharded or not, beside the whole fp32 master copy.
    #[test]
    fn the_runtimes_optimizer_state_is_what_the_memory_model_counts() {
        for optimizer in ["adamw", "adam", "sgd"] {
            for (dp, zero) in [(1, 0), (4, 0), (4, 1)] {
                let text = format!(
                    "cluster c {{ nodes = 1, gpus_per_node = {dp}, gpu = H100_SXM_80GB }}
                     model m {{ preset = \"gpt2-124m\", seq_len = 512 }}
                     train {{ global_batch = 16, precision = bf16, optimizer = {optimizer} }}
                     parallel {{ tp = 1, pp = 1, dp = {dp}, micro_batch = 4, zero = {zero} }}
                     job j {{ framework = planc }}"
                );
                let c = planc_compiler::check::check_source("t.tp", &text);
                let plan = c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics));
                let mb = plan.parallel.grad_accum(plan.train.global_batch).max(1);
                let rt = memory_plan(&run_shape(&plan, 0), mb as usize).expect("sizes");
                let m = planc_compiler::cost::memory::stage_memory(&plan, 0, mb);
                let what = format!("{optimizer}, dp {dp}, zero {zero}");
                assert!(
                    (rt.optimizer as f64 - m.optimizer_bytes).abs() <= 1e-3 * m.optimizer_bytes,
                    "{what}: {} vs {}",
                    rt.optimizer,
                    m.optimizer_bytes
                );
            }
        }
    }

    /// The same over layouts: within 3 % (each set's layer inputs and tokens, which the
    /// model counts a layer at a time), 6 % under interleaving (sets sized for the longest
    /// chunk; the model's bound on receives posted ahead). Full recomputation with more
    /// than one set in flight is left out: the runtime keeps a layer's activations per
    /// set where the model counts one layer's (1.6× on a 2-stage 1F1B, 6× interleaved).
    #[test]
    fn the_runtimes_activations_are_what_the_memory_model_counts_over_layouts() {
        for model in ["gpt2-124m", "llama3.2-1b"] {
            for (par, within) in [
                ("tp = 1, pp = 1", 0.03),
                ("tp = 2, pp = 1, sequence_parallel = true", 0.03),
                ("tp = 1, pp = 2, schedule = 1f1b", 0.03),
                ("tp = 1, pp = 2, schedule = gpipe", 0.03),
                ("tp = 1, pp = 4, schedule = interleaved, vpp = 2", 0.06),
            ] {
                for recompute in ["none", "selective", "full"] {
                    for attention in ["flash", "standard"] {
                        let text = format!(
                            "cluster c {{ nodes = 1, gpus_per_node = 4, gpu = H100_SXM_80GB }}
                             model m {{ preset = \"{model}\", seq_len = 1024 }}
                             train {{ global_batch = 32, precision = bf16, attention = {attention} }}
                             parallel {{ {par}, dp = auto, micro_batch = 2, recompute = {recompute} }}
                             job j {{ framework = planc }}"
                        );
                        let c = planc_compiler::check::check_source("t.tp", &text);
                        // GPT-2's 12 layers do not split over 4 × 2 chunks.
                        let Some(plan) = c
                            .plan
                            .filter(|_| c.diagnostics.iter().all(|d| !d.is_error()))
                        else {
                            continue;
                        };
                        if recompute == "full" && plan.parallel.pp > 1 {
                            continue;
                        }
                        for r in activation_ratios(&plan) {
                            assert!(
                                (r - 1.0).abs() < within,
                                "{model}, {par}, recompute {recompute}, {attention}: {r:.4}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn zero_shards_tile_the_padded_buffer_and_nothing_else() {
        let total = Params::new(&shape(1, 0, 0).dims).total;
        for dp in [1, 2, 3, 8] {
            let shards: Vec<_> = (0..dp).map(|r| shape(dp, r, 1).shard(total)).collect();
            let padded = shape(dp, 0, 1).padded(total);
            assert!(padded >= total && padded.is_multiple_of(64 * dp));
            assert_eq!(shards[0].0, 0);
            assert_eq!(shards[dp - 1].1, padded);
            for w in shards.windows(2) {
                assert_eq!(w[0].1, w[1].0, "shards are contiguous");
            }
            // Without ZeRO every rank updates everything.
            assert_eq!(shape(dp, dp - 1, 0).shard(total), (0, padded));
        }
    }
}

#[cfg(test)]
mod host_tests {
    use super::token_order;

    #[test]
    fn token_order_groups_positions_by_token_as_a_sort_would() {
        let inputs: Vec<u32> = (0..5000u32).map(|i| (i * 7919 + i / 3) % 613).collect();
        for (v0, vocab) in [(0usize, 613usize), (200, 200), (0, 100)] {
            let (uniq, start, pos) = token_order(&inputs, v0, vocab);
            // The comparison sort it replaces.
            let mut order: Vec<u32> = (0..inputs.len() as u32)
                .filter(|&i| (v0..v0 + vocab).contains(&(inputs[i as usize] as usize)))
                .collect();
            order.sort_by_key(|&i| (inputs[i as usize], i));
            let want: Vec<i32> = order.iter().map(|&i| i as i32).collect();
            assert_eq!(pos, want);
            assert_eq!(uniq.len(), inputs.len());
            assert_eq!(start.len(), uniq.len() + 1);
            // Every distinct token's range, then empty ranges only (the padding).
            let distinct = start.windows(2).take_while(|w| w[1] > w[0]).count();
            let mut rows: Vec<u32> = inputs[..].to_vec();
            rows.retain(|&t| (v0..v0 + vocab).contains(&(t as usize)));
            rows.sort();
            rows.dedup();
            assert_eq!(distinct, rows.len(), "v0 {v0} vocab {vocab}");
            assert!(start[distinct..].iter().all(|&s| s == pos.len() as i32));
            for (k, &row) in uniq[..distinct].iter().enumerate() {
                for &p in &pos[start[k] as usize..start[k + 1] as usize] {
                    assert_eq!(inputs[p as usize] as usize, row as usize + v0);
                }
            }
        }
    }
}
