//! The buffers planc's runtime allocates for one pipeline stage on one GPU: the one memory
//! plan of `framework = planc`. Each buffer is listed by name, in the order the runtime
//! allocates it, with its bytes and the part of memory it counts under (weights, gradients,
//! optimizer state, activations, workspace). `planc run`'s engine walks this list to
//! allocate (it keeps only the allocation and the typed handles, and computes no size of
//! its own), and the report's memory for a plan planc's runtime runs is its sum
//! (`cost::memory::stage_memory`), so what `check` shows is what `planc run` holds.
//!
//! What a stage allocates:
//!
//! - cuBLAS's workspace, then the flat buffers of the stage's parameter table
//!   (`model::visit`, each tensor aligned): fp32 master weights, the compute copy (the
//!   master weights themselves in fp32), fp32 gradients, Adam's moments (this rank's shard
//!   under ZeRO; none under SGD). In mixed precision the fp32 master copy is optimizer
//!   state, as Megatron-LM counts it.
//! - One activation set per micro-batch in flight (`Shape::in_flight`, the sets the step's
//!   program keeps alive): every layer input of the longest chunk and the last one's
//!   output, each layer's kept activations ([`Kept`]: what `parallel.recompute` and
//!   `train.attention` keep; one shared layer under full recomputation), the loss head's
//!   gradient, the tokens and the embedding gradient's token order.
//! - Workspace reused by every layer and micro-batch ([`Work`]), the loss sums, the
//!   reduced scalars, the optimizer's weight-decay mask, rope's tables, and under fp8 the
//!   products' state ([`Fp8Buf`]: the weights' fp8 copies count as weights).
//!
//! cuDNN's attention workspace and the micro-batches staged for a replayed step are
//! allocated later, as they turn out to be needed, and are not listed.

pub mod launch;
pub mod model;

use model::LayerTensor;
use serde::Serialize;

use crate::plan::Recompute;
use crate::plan::{Attention, Framework, Optimizer, Plan, Position, Precision};
use launch::{
    fp8_supports, norm_partials, AMAX_HISTORY, BLAS_WORKSPACE, CHUNK_ROWS, FP8_META, FP8_WORKSPACE,
    MAX_HEAD_DIM, MIN_ALLOC, REP_BLOCKS, SCALARS,
};
pub use model::{Dims, Stage, OVERWRITTEN_AT_LEAST};

#[cfg(test)]
mod tests;

/// What the runtime's engine is built for: one rank of one pipeline stage.
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
    /// Pipeline stage `stage` of `plan` on its first rank, keeping `in_flight` activation
    /// sets, as `planc run` builds it; or why the runtime's model cannot take the plan.
    pub fn of_plan(plan: &Plan, stage: usize, in_flight: usize) -> Result<Shape, String> {
        let p = &plan.parallel;
        let dims = Dims::of(plan, None)?;
        let (tp, pp) = (p.tp.max(1) as usize, p.pp.max(1) as usize);
        let st = if pp > 1 {
            Stage::of(p, dims.layers, stage)
        } else {
            Stage::whole(dims.layers)
        };
        Ok(Shape {
            dims: dims.tensor_parallel(tp)?,
            batch: p.micro_batch as usize,
            precision: plan.train.precision,
            attention: plan.train.attention,
            recompute: p.recompute,
            optimizer: plan.train.optimizer,
            in_flight,
            dp: p.dp as usize,
            dp_rank: 0,
            zero: p.zero,
            tp,
            tp_rank: 0,
            sp: p.sequence_parallel && tp > 1,
            stage: st,
        })
    }

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

    /// Bytes of one stored activation (and compute-copy weight) element.
    pub fn xsz(&self) -> usize {
        if self.precision == Precision::Fp32 {
            4
        } else {
            2
        }
    }
}

/// The part of memory a buffer counts under (the report's and `planc run`'s split).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Part {
    Weights,
    Gradients,
    Optimizer,
    Activations,
    Workspace,
}

/// What a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    /// cuBLAS's workspace.
    BlasWorkspace,
    /// fp32 master weights (the weights themselves in fp32 training).
    Master,
    /// The weights in the compute type; absent in fp32 (the master weights are them).
    Compute,
    /// fp32 gradients.
    Gradients,
    /// Adam's moments (this rank's shard under ZeRO); absent under SGD.
    Moment1,
    Moment2,
    /// A buffer of activation set `set`.
    Set(usize, SetBuf),
    Scratch(Work),
    /// One f32 per micro-batch: the sum of its token losses.
    LossSums,
    /// [`launch::SCALARS`] floats reduced across ranks.
    Scalars,
    /// One byte per `model::ALIGN`-element block of the flat buffers: whether its tensor
    /// takes weight decay.
    DecayMask,
    /// Rope's cosines and sines [T, D/2] (absent without rope).
    RopeCos,
    RopeSin,
    Fp8(Fp8Buf),
}

/// One activation set's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetBuf {
    /// Layer input `i` of the chunk; input `layers` is the last layer's output.
    Input(usize),
    /// What kept layer `k` keeps (one shared layer under full recompute).
    Kept(usize, Kept),
    /// Gradient of the last layer's output, from the loss head.
    OutputGrad,
    Tokens,
    /// The embedding gradient's token order: the rows that occur, where each one's
    /// positions start, the positions.
    TokenRows,
    TokenStarts,
    TokenPositions,
}

/// What a layer keeps for its backward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    Ln1,
    Ln1Mean,
    Ln1Rstd,
    Q,
    K,
    V,
    /// Softmax probabilities [B, H, T, T]: standard attention without recomputation only.
    P,
    /// Flash attention: each row's logsumexp, fp32 [B, H, T].
    Lse,
    A,
    X2,
    Ln2,
    Ln2Mean,
    Ln2Rstd,
    H,
    Act,
}

/// Workspace reused by every layer and micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    Qkv,
    /// Standard attention's output and its gradient [B, H, T, D] (flash reads and writes
    /// the merged layouts instead).
    O,
    /// Probabilities recomputed in backward (or computed in forward when not kept).
    P,
    Tmp,
    Dres,
    Dln,
    Dqkv,
    /// Absent when flash attention writes into `Dqkv`.
    Dq,
    Dk,
    Dv,
    Dp,
    /// Flash attention's D_i = Σ O·dO, fp32 [B, H, T].
    Dd,
    DO,
    Da,
    Dh,
    Dact,
    Lnf,
    LnfMean,
    LnfRstd,
    /// Only where the output layer is.
    Logits,
    Losses,
    Targets,
    Partials,
    /// A throwaway layer output for recomputed forwards.
    Xout,
    /// Tensor parallelism: a whole-batch [N, C] activation gathered from the ranks' token
    /// shares (sequence parallelism), each token's logsumexp over the whole vocabulary,
    /// and this rank's and every rank's cross-entropy statistics.
    Gath,
    Lse,
    Stats,
    StatsAll,
}

/// fp8 products' buffers (`precision = fp8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Buf {
    /// cuBLASLt's workspace.
    Workspace,
    /// [`launch::FP8_META`] floats a tensor, and its amax history.
    Meta,
    History,
    /// A product's input in fp8 (or its transpose), the output gradient in fp8 and its
    /// transpose.
    Input,
    Grad,
    GradT,
    /// Linear `k`'s cached weight copy `[o, i]` and its transpose (weights).
    Weight(usize),
    WeightT(usize),
}

/// One buffer: what it holds, what it counts under, and the bytes asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub name: Name,
    pub part: Part,
    pub bytes: usize,
}

impl Buffer {
    /// The bytes the allocation holds (at least [`MIN_ALLOC`]).
    pub fn held(&self) -> usize {
        self.bytes.max(MIN_ALLOC)
    }
}

/// A linear layer whose products run in fp8: layer, weight name, inputs, outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8Linear {
    pub layer: usize,
    pub weight: LayerTensor,
    pub i: usize,
    pub o: usize,
}

/// Held bytes by part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Bytes {
    pub weights: usize,
    pub gradients: usize,
    pub optimizer: usize,
    pub activations: usize,
    pub workspace: usize,
}

impl Bytes {
    fn add(&mut self, b: &Buffer, times: usize) {
        let n = b.held() * times;
        match b.part {
            Part::Weights => self.weights += n,
            Part::Gradients => self.gradients += n,
            Part::Optimizer => self.optimizer += n,
            Part::Activations => self.activations += n,
            Part::Workspace => self.workspace += n,
        }
    }

    pub fn total(&self) -> usize {
        self.weights + self.gradients + self.optimizer + self.activations + self.workspace
    }
}

/// A stage's buffers in allocation order: `head`, then `sets` copies of `set` (set `s`'s
/// names carry `s`), then `tail`. Buffers of no bytes are not listed.
#[derive(Clone, Debug)]
pub struct StageBuffers {
    head: Vec<Buffer>,
    /// Set 0's buffers.
    set: Vec<Buffer>,
    pub sets: usize,
    tail: Vec<Buffer>,
    /// The linear layers whose products run in fp8, in the order of their `Fp8Buf::Weight`.
    pub fp8: Vec<Fp8Linear>,
    /// The parameter table's length in the flat buffers, unpadded, and its tensors.
    pub table: (usize, usize),
}

impl StageBuffers {
    /// Every buffer, in the order the runtime allocates them.
    pub fn iter(&self) -> impl Iterator<Item = Buffer> + '_ {
        let sets = (0..self.sets).flat_map(move |s| {
            self.set.iter().map(move |b| match b.name {
                Name::Set(_, what) => Buffer {
                    name: Name::Set(s, what),
                    ..*b
                },
                _ => *b,
            })
        });
        self.head
            .iter()
            .copied()
            .chain(sets)
            .chain(self.tail.iter().copied())
    }

    /// Held bytes by part.
    pub fn bytes(&self) -> Bytes {
        let mut b = Bytes::default();
        for x in &self.head {
            b.add(x, 1);
        }
        for x in &self.set {
            b.add(x, self.sets);
        }
        for x in &self.tail {
            b.add(x, 1);
        }
        b
    }
}

/// The buffers of `shape` over a step of `micro_batches`, or why the runtime's kernels
/// cannot take its tensors.
pub fn stage_buffers(shape: &Shape, micro_batches: usize) -> Result<StageBuffers, String> {
    let z = Sizes::new(shape)?;
    let table = model::table_size(&shape.dims, &shape.stage);
    let total = shape.padded(table.0);
    let mut head = vec![buf(Name::BlasWorkspace, Part::Workspace, BLAS_WORKSPACE)];
    head.extend(state(shape, total));
    let mut tail: Vec<Buffer> = z
        .work(table.1)
        .into_iter()
        .map(|(w, bytes)| buf(Name::Scratch(w), Part::Workspace, bytes))
        .collect();
    let rope = if shape.dims.position == Position::Rope {
        shape.dims.seq_len * (shape.dims.head_dim / 2) * 4
    } else {
        0
    };
    tail.extend([
        buf(Name::LossSums, Part::Workspace, micro_batches.max(1) * 4),
        buf(Name::Scalars, Part::Workspace, SCALARS * 4),
        buf(
            Name::DecayMask,
            Part::Workspace,
            total.div_ceil(model::ALIGN),
        ),
        buf(Name::RopeCos, Part::Workspace, rope),
        buf(Name::RopeSin, Part::Workspace, rope),
    ]);
    let fp8 = if shape.precision == Precision::Fp8 {
        fp8_linears(shape, z.n)
    } else {
        Vec::new()
    };
    let shapes: Vec<(usize, usize)> = fp8.iter().map(|l| (l.i, l.o)).collect();
    tail.extend(fp8_buffers(&shapes, z.n));
    let keep = |v: Vec<Buffer>| v.into_iter().filter(|b| b.bytes > 0).collect();
    Ok(StageBuffers {
        head: keep(head),
        set: keep(z.set()),
        sets: shape.in_flight.max(1),
        tail: keep(tail),
        fp8,
        table,
    })
}

/// The buffers of stage `stage` of `plan` as planc's runtime would allocate them, with the
/// activation sets the memory model counts in flight (`memory::in_flight_sets`); `None`
/// where the runtime does not run the plan's layout or model as written.
pub fn of_plan(plan: &Plan, stage: u64, micro_batches: u64) -> Option<StageBuffers> {
    let p = &plan.parallel;
    // What `planc run` refuses (`capability`).
    let runs = crate::capability::layout_limit(Framework::Planc, false, p).is_none()
        && crate::capability::method_limit(Framework::Planc, &plan.train).is_none()
        && crate::capability::framework_model_limit(Framework::Planc, &plan.model).is_none();
    if !runs {
        return None;
    }
    let sets = super::memory::in_flight_sets(plan, stage, micro_batches);
    let shape = Shape::of_plan(plan, stage as usize, sets as usize).ok()?;
    stage_buffers(&shape, micro_batches as usize).ok()
}

/// The workspace cuDNN's fused attention will hold on stage `stage`'s GPUs when `planc run`
/// runs the plan, where it runs there (flash attention in bf16, fp16 or fp8's bf16
/// attention, head sizes a multiple of 8 up to 256, Ampere or newer); 0 elsewhere. It is
/// allocated by the attention once cuDNN's plans are built, not from this list, so it is
/// counted beside it (`cost::memory::stage_memory`).
pub fn cudnn_attention_bytes(plan: &Plan, stage: u64) -> usize {
    let Ok(shape) = Shape::of_plan(plan, stage as usize, 1) else {
        return 0;
    };
    let d = &shape.dims;
    // The catalog's compute capability as (major, minor); a GPU without one is taken as
    // new enough, as `Gpu::has_fused_attention` takes it.
    let cc = super::stage_group(plan, stage)
        .gpu
        .compute_capability
        .map_or((9, 0), |c| {
            (c.trunc() as i32, (c.fract() * 10.0).round() as i32)
        });
    let refused = launch::cudnn_attention_refusal(d.heads, d.kv_heads, d.head_dim, cc);
    if shape.attention != Attention::Flash
        || shape.precision == Precision::Fp32
        || refused.is_some()
    {
        return 0;
    }
    launch::cudnn_attention_workspace(shape.batch, d.heads, d.seq_len, d.head_dim, shape.xsz())
}

/// The share of pipeline stage `stage`'s gradient buffer `planc run` zeroes before each
/// step ([`model::zeroed_gradients`]).
pub fn zeroed_gradient_share(plan: &Plan, stage: u64) -> f64 {
    let Ok(shape) = Shape::of_plan(plan, stage as usize, 1) else {
        return 1.0;
    };
    let len = shape.padded(model::table_size(&shape.dims, &shape.stage).0);
    let zeroed: usize = model::zeroed_gradients(&shape.dims, &shape.stage, len)
        .iter()
        .map(|(lo, hi)| hi - lo)
        .sum();
    zeroed as f64 / len.max(1) as f64
}

fn buf(name: Name, part: Part, bytes: usize) -> Buffer {
    Buffer { name, part, bytes }
}

/// The flat buffers over a padded table of `total` elements.
fn state(shape: &Shape, total: usize) -> Vec<Buffer> {
    let xsz = shape.xsz();
    let (lo, hi) = shape.shard(total);
    let mut v = Vec::new();
    if xsz == 4 {
        v.push(buf(Name::Master, Part::Weights, total * 4));
    } else {
        v.push(buf(Name::Master, Part::Optimizer, total * 4));
        v.push(buf(Name::Compute, Part::Weights, total * xsz));
    }
    v.push(buf(Name::Gradients, Part::Gradients, total * 4));
    if shape.optimizer != Optimizer::Sgd {
        v.push(buf(Name::Moment1, Part::Optimizer, (hi - lo) * 4));
        v.push(buf(Name::Moment2, Part::Optimizer, (hi - lo) * 4));
    }
    v
}

/// The linear layers of the stage that run in fp8 over micro-batches of `rows` tokens:
/// those whose dimensions cuBLASLt's fp8 products take; the others run in bf16.
fn fp8_linears(shape: &Shape, rows: usize) -> Vec<Fp8Linear> {
    let mut out = Vec::new();
    for l in shape.stage.layers() {
        for (weight, i, o) in shape.dims.linear_shapes() {
            if fp8_supports(rows, i, o) {
                out.push(Fp8Linear {
                    layer: l,
                    weight,
                    i,
                    o,
                });
            }
        }
    }
    out
}

/// The buffers of the fp8 products of linear layers of shapes `(i, o)` over `rows` tokens,
/// in allocation order (none without a layer).
pub fn fp8_buffers(shapes: &[(usize, usize)], rows: usize) -> Vec<Buffer> {
    if shapes.is_empty() {
        return Vec::new();
    }
    let tensors = 3 * shapes.len();
    let max_i = shapes.iter().map(|s| s.0).max().unwrap_or(0);
    let max_o = shapes.iter().map(|s| s.1).max().unwrap_or(0);
    let w = |b: Fp8Buf, bytes| buf(Name::Fp8(b), Part::Workspace, bytes);
    let mut v = vec![
        w(Fp8Buf::Workspace, FP8_WORKSPACE),
        w(Fp8Buf::Meta, tensors * FP8_META * 4),
        w(Fp8Buf::History, tensors * AMAX_HISTORY * 4),
        w(Fp8Buf::Input, rows * max_i),
        w(Fp8Buf::Grad, rows * max_o),
        w(Fp8Buf::GradT, rows * max_o),
    ];
    for (k, &(i, o)) in shapes.iter().enumerate() {
        // Each copy its own allocation: 256-byte aligned, as cuBLASLt's fastest kernels
        // want.
        v.push(buf(Name::Fp8(Fp8Buf::Weight(k)), Part::Weights, i * o));
        v.push(buf(Name::Fp8(Fp8Buf::WeightT(k)), Part::Weights, i * o));
    }
    v
}

/// The element counts the activation sets and workspace are sized by, for one micro-batch
/// on this rank, and what the plan keeps.
struct Sizes {
    d: Dims,
    xsz: usize,
    /// Tokens of the micro-batch, and rows of the residual stream and the norms on this
    /// rank: a share of the tokens under sequence parallelism, all of them otherwise.
    n: usize,
    nl: usize,
    tp: usize,
    sp: bool,
    last: bool,
    bhtd: usize,
    bhtt: usize,
    bht: usize,
    flash: bool,
    /// Standard attention's probabilities kept for backward.
    keep_p: bool,
    /// Activation sets serve any chunk: sized for the longest.
    chunk_len: usize,
    /// Layers whose activations a set keeps: every layer of the longest chunk, or one
    /// shared set under full recompute.
    kept_layers: usize,
}

impl Sizes {
    /// The sizes, or why the runtime's kernels cannot take them.
    fn new(shape: &Shape) -> Result<Sizes, String> {
        let d = shape.dims.clone();
        let chunk_len = shape.stage.longest_chunk();
        let (b, t) = (shape.batch, d.seq_len);
        let n = b * t;
        let tp = shape.tp.max(1);
        if shape.sp && !n.is_multiple_of(tp) {
            return Err(format!(
                "sequence parallelism splits a micro-batch's {n} tokens over tp = {tp} ranks: \
                 micro_batch × seq_len must be a multiple of {tp}"
            ));
        }
        let nl = if shape.sp { n / tp } else { n };
        let flash = shape.attention == Attention::Flash;
        // The permutation kernels index in 32 bits.
        let scores = if flash { 0 } else { b * d.heads * t * t };
        let largest = (n * d.qkv_rows()).max(scores);
        if largest >= 1 << 31 {
            return Err(format!(
                "a micro-batch of {b} × {t} tokens makes tensors of {largest} elements; the \
                 runtime's kernels index up to 2^31: lower micro_batch"
            ));
        }
        let (hh, dd) = (d.heads, d.head_dim);
        if flash && dd > MAX_HEAD_DIM {
            return Err(format!(
                "flash attention takes head sizes up to {MAX_HEAD_DIM}, not {dd}: use \
                 attention = standard"
            ));
        }
        Ok(Sizes {
            xsz: shape.xsz(),
            n,
            nl,
            tp,
            sp: shape.sp,
            last: shape.stage.last,
            bhtd: b * hh * t * dd,
            bhtt: b * hh * t * t,
            bht: b * hh * t,
            flash,
            keep_p: shape.attention == Attention::Standard && shape.recompute == Recompute::None,
            chunk_len,
            kept_layers: if shape.recompute == Recompute::Full {
                1
            } else {
                chunk_len
            },
            d,
        })
    }

    /// One layer's kept activations: 0 bytes where none is kept.
    fn kept(&self) -> [(Kept, usize); 15] {
        let (d, xsz, n, nl) = (&self.d, self.xsz, self.n, self.nl);
        let c = d.hidden;
        [
            (Kept::Ln1, nl * c * xsz),
            (Kept::Ln1Mean, nl * 4),
            (Kept::Ln1Rstd, nl * 4),
            (Kept::Q, self.bhtd * xsz),
            (Kept::K, self.bhtd * xsz),
            (Kept::V, self.bhtd * xsz),
            (Kept::P, if self.keep_p { self.bhtt * xsz } else { 0 }),
            (Kept::Lse, if self.flash { self.bht * 4 } else { 0 }),
            (Kept::A, n * d.attn_width() * xsz),
            (Kept::X2, nl * c * xsz),
            (Kept::Ln2, nl * c * xsz),
            (Kept::Ln2Mean, nl * 4),
            (Kept::Ln2Rstd, nl * 4),
            (Kept::H, n * d.fc_rows() * xsz),
            (Kept::Act, n * d.ffn * xsz),
        ]
    }

    /// Activation set 0's buffers in allocation order: the layer inputs (and the last
    /// one's output), each kept layer's activations, the loss gradient, the tokens and the
    /// embedding gradient's order.
    fn set(&self) -> Vec<Buffer> {
        let (n, nl, c, xsz) = (self.n, self.nl, self.d.hidden, self.xsz);
        let a = |what: SetBuf, bytes| buf(Name::Set(0, what), Part::Activations, bytes);
        let mut v: Vec<Buffer> = (0..=self.chunk_len)
            .map(|i| a(SetBuf::Input(i), nl * c * xsz))
            .collect();
        let kept = self.kept();
        for k in 0..self.kept_layers {
            v.extend(kept.iter().map(|&(what, b)| a(SetBuf::Kept(k, what), b)));
        }
        v.extend([
            a(SetBuf::OutputGrad, nl * c * xsz),
            a(SetBuf::Tokens, n * 4),
            a(SetBuf::TokenRows, n * 4),
            a(SetBuf::TokenStarts, (n + 1) * 4),
            a(SetBuf::TokenPositions, n * 4),
        ]);
        v
    }

    /// The workspace in allocation order (0 bytes where there is none), for a parameter
    /// table of `tensors` tensors.
    fn work(&self, tensors: usize) -> [(Work, usize); 28] {
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
        } = *self;
        let c = d.hidden;
        let max_cols = c.max(d.qkv_rows()).max(d.fc_rows());
        // Flash attention reads and writes the merged layouts, and without rope or shared
        // key/value heads writes dq, dk, dv into the merged qkv gradient.
        let heads_bufs = !flash;
        let grad_bufs = !flash || d.kv_heads != d.heads || d.position == Position::Rope;
        let when = |keep: bool, bytes: usize| if keep { bytes } else { 0 };
        let partials = (2 * n.div_ceil(CHUNK_ROWS) * max_cols)
            .max(norm_partials(nl, c))
            .max(1024)
            .max(REP_BLOCKS * tensors)
            * 4;
        // In the order they have always been allocated.
        [
            (Work::O, when(heads_bufs, bhtd * xsz)),
            (Work::DO, when(heads_bufs, bhtd * xsz)),
            (Work::Dq, when(grad_bufs, bhtd * xsz)),
            (Work::Dk, when(grad_bufs, bhtd * xsz)),
            (Work::Dv, when(grad_bufs, bhtd * xsz)),
            (Work::Gath, when(tp > 1 && self.sp, n * c * xsz)),
            (Work::Lse, when(tp > 1, n * 4)),
            (Work::Stats, when(tp > 1, n * 3 * 4)),
            (Work::StatsAll, when(tp > 1, tp * n * 3 * 4)),
            // The logits only where the output layer is: under a pipeline, the last stage
            // (a micro-batch's logits are the largest tensor of a large-vocabulary model).
            (Work::Logits, when(self.last, n * d.vocab * xsz)),
            (Work::Qkv, n * d.qkv_rows() * xsz),
            (Work::P, when(!(keep_p || flash), bhtt * xsz)),
            (Work::Tmp, n * c * xsz),
            (Work::Dres, n * c * xsz),
            (Work::Dln, n * c * xsz),
            (Work::Dqkv, n * d.qkv_rows() * xsz),
            (Work::Dp, when(!flash, bhtt * xsz)),
            (Work::Dd, when(flash, bht * 4)),
            (Work::Da, n * d.attn_width() * xsz),
            (Work::Dh, n * d.fc_rows() * xsz),
            (Work::Dact, n * d.ffn * xsz),
            (Work::Lnf, nl * c * xsz),
            (Work::LnfMean, nl * 4),
            (Work::LnfRstd, nl * 4),
            (Work::Losses, n * 4),
            (Work::Targets, n * 4),
            (Work::Partials, partials),
            (Work::Xout, nl * c * xsz),
        ]
    }
}
