//! The model on one GPU: the memory plan allocated (the compiler lists the buffers, weights,
//! gradients, optimizer state, activations per in-flight micro-batch and workspace, with
//! their sizes: `planc_compiler::cost::buffers`; the engine allocates that list in its
//! order and keeps typed handles to it), and the passes the step's program runs on it:
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

use planc_compiler::cost::buffers::launch::REP_BLOCKS;
use planc_compiler::cost::buffers::{stage_buffers, Bytes, Kept, Name, SetBuf, StageBuffers, Work};
use planc_compiler::cost::kinds::WorkKind;
use planc_compiler::cost::op_id::OpId;
use planc_compiler::plan::{Attention, Norm, Optimizer, Position, Precision, Recompute};

use super::model::{self, Dims, Params};
use super::spans::{Part, Span};
use crate::device::activation::Activation;
use crate::device::attention::{self, Grads, Heads, Kernels};
use crate::device::attention_cudnn::{self, Sdpa};
use crate::device::blas::Blas;
use crate::device::cuda::{Alloc, Arg, Buf, Gpu};
use crate::device::dist::{self, Comm};
use crate::device::fp8::{self, Fp8, Fp8Bufs, Linear};
use crate::device::rows::{self, NormGrads, NormSaved, Norms, CHUNK_ROWS};
use crate::device::trail;
use crate::error::RunError;
use cudarc::nccl::sys::ncclDataType_t;
use planc_simulator::program::Payload;
use std::collections::BTreeMap;
use std::sync::Arc;

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

impl MemoryPlan {
    /// The memory plan's bytes by part (its workspace as scratch).
    fn of(b: &Bytes) -> MemoryPlan {
        MemoryPlan {
            weights: b.weights,
            gradients: b.gradients,
            optimizer: b.optimizer,
            activations: b.activations,
            scratch: b.workspace,
        }
    }
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

impl LayerActs {
    fn put(&mut self, what: Kept, b: Buf) {
        let slot = match what {
            Kept::Ln1 => &mut self.ln1,
            Kept::Ln1Mean => &mut self.ln1_mean,
            Kept::Ln1Rstd => &mut self.ln1_rstd,
            Kept::Q => &mut self.q,
            Kept::K => &mut self.k,
            Kept::V => &mut self.v,
            Kept::P => &mut self.p,
            Kept::Lse => &mut self.lse,
            Kept::A => &mut self.a,
            Kept::X2 => &mut self.x2,
            Kept::Ln2 => &mut self.ln2,
            Kept::Ln2Mean => &mut self.ln2_mean,
            Kept::Ln2Rstd => &mut self.ln2_rstd,
            Kept::H => &mut self.h,
            Kept::Act => &mut self.act,
        };
        *slot = b;
    }
}

impl ActSet {
    fn put(&mut self, what: SetBuf, b: Buf) {
        match what {
            SetBuf::Input(i) => {
                if self.xs.len() <= i {
                    self.xs.resize(i + 1, Buf::NULL);
                }
                self.xs[i] = b;
            }
            SetBuf::Kept(k, kept) => {
                if self.layers.len() <= k {
                    self.layers.resize(k + 1, LayerActs::default());
                }
                self.layers[k].put(kept, b);
            }
            SetBuf::OutputGrad => self.dx_top = b,
            SetBuf::Tokens => self.tokens = b,
            SetBuf::TokenRows => self.uniq = b,
            SetBuf::TokenStarts => self.start = b,
            SetBuf::TokenPositions => self.pos = b,
        }
    }
}

impl Scratch {
    fn put(&mut self, what: Work, b: Buf) {
        let slot = match what {
            Work::Qkv => &mut self.qkv,
            Work::O => &mut self.o,
            Work::P => &mut self.p,
            Work::Tmp => &mut self.tmp,
            Work::Dres => &mut self.dres,
            Work::Dln => &mut self.dln,
            Work::Dqkv => &mut self.dqkv,
            Work::Dq => &mut self.dq,
            Work::Dk => &mut self.dk,
            Work::Dv => &mut self.dv,
            Work::Dp => &mut self.dp,
            Work::Dd => &mut self.dd,
            Work::DO => &mut self.d_o,
            Work::Da => &mut self.da,
            Work::Dh => &mut self.dh,
            Work::Dact => &mut self.dact,
            Work::Lnf => &mut self.lnf,
            Work::LnfMean => &mut self.lnf_mean,
            Work::LnfRstd => &mut self.lnf_rstd,
            Work::Logits => &mut self.logits,
            Work::Losses => &mut self.losses,
            Work::Targets => &mut self.targets,
            Work::Partials => &mut self.partials,
            Work::Xout => &mut self.xout,
            Work::Gath => &mut self.gath,
            Work::Lse => &mut self.lse,
            Work::Stats => &mut self.stats,
            Work::StatsAll => &mut self.stats_all,
        };
        *slot = b;
    }
}

/// The stage's memory plan allocated: every buffer the compiler lists, in its place (NULL
/// where the list has none).
#[derive(Default)]
struct Handles {
    blas_workspace: Buf,
    /// fp32 master weights, the compute copy (the same buffer in fp32), fp32 gradients,
    /// Adam's moments (this rank's shard of them under ZeRO).
    w32: Buf,
    wx: Buf,
    grad: Buf,
    m: Buf,
    v: Buf,
    sets: Vec<ActSet>,
    s: Scratch,
    loss_sums: Buf,
    scalars: Buf,
    decay: Buf,
    rope_cos: Buf,
    rope_sin: Buf,
    fp8: Fp8Bufs,
}

impl Handles {
    /// Allocates every buffer of `list` with `a`, in the list's order, each where it
    /// belongs: the sizes and their order are the compiler's.
    fn alloc(a: &mut impl Alloc, list: &StageBuffers) -> Result<Handles, RunError> {
        let mut h = Handles {
            sets: (0..list.sets).map(|_| ActSet::default()).collect(),
            ..Handles::default()
        };
        for b in list.iter() {
            h.put(b.name, a.alloc(b.bytes)?);
        }
        if h.wx == Buf::NULL {
            // fp32 lists no compute copy: the master weights are it.
            h.wx = h.w32;
        }
        Ok(h)
    }

    fn put(&mut self, name: Name, b: Buf) {
        let slot = match name {
            Name::BlasWorkspace => &mut self.blas_workspace,
            Name::Master => &mut self.w32,
            Name::Compute => &mut self.wx,
            Name::Gradients => &mut self.grad,
            Name::Moment1 => &mut self.m,
            Name::Moment2 => &mut self.v,
            Name::Set(set, what) => return self.sets[set].put(what, b),
            Name::Scratch(what) => return self.s.put(what, b),
            Name::LossSums => &mut self.loss_sums,
            Name::Scalars => &mut self.scalars,
            Name::DecayMask => &mut self.decay,
            Name::RopeCos => &mut self.rope_cos,
            Name::RopeSin => &mut self.rope_sin,
            Name::Fp8(what) => return self.fp8.put(what, b),
        };
        *slot = b;
    }
}

/// Uploads the weight-decay mask into `mask`: one byte per `model::ALIGN`-element block of
/// the flat buffers, whether its tensor takes weight decay.
fn upload_decay_mask(gpu: &Gpu, mask: Buf, params: &Params, total: usize) -> Res {
    let mut host = vec![0u8; total.div_ceil(model::ALIGN)];
    for p in params.list.iter().filter(|p| p.decay) {
        let blocks = p.offset / model::ALIGN..(p.offset + p.numel()).div_ceil(model::ALIGN);
        host[blocks].fill(1);
    }
    gpu.upload(mask, &host)
}

/// Uploads rope's cosines and sines (nothing without rope).
fn upload_rope(gpu: &Gpu, d: &Dims, (cos, sin): (Buf, Buf)) -> Res {
    if d.position != Position::Rope {
        return Ok(());
    }
    let (c, s) = rope_table(d);
    gpu.upload(cos, &c)?;
    gpu.upload(sin, &s)
}

/// Blocks of the gradient buffer's sum of squares (the gradient norm).
const SUMSQ_BLOCKS: usize = 1024;

impl Engine {
    /// The engine for `shape` over steps of `micro_batches`: the stage's memory plan (the
    /// compiler's list of buffers, `cost::buffers::stage_buffers`) allocated in its order.
    pub fn new(gpu: Gpu, shape: Shape, micro_batches: usize) -> Result<Engine, RunError> {
        let mut gpu = gpu;
        let blas = Blas::new(&gpu, shape.precision)?;
        let list = stage_buffers(&shape, micro_batches).map_err(RunError::Plan)?;
        if !list.fp8.is_empty() {
            fp8::check_device(&gpu)?;
        }
        let before = gpu.held;
        let h = Handles::alloc(&mut gpu, &list)?;
        let memory = MemoryPlan::of(&list.bytes());
        debug_assert_eq!(gpu.held - before, list.bytes().total(), "the plan's bytes");
        blas.use_workspace(h.blas_workspace)?;
        let d = shape.dims.clone();
        let params = Params::of_stage(&d, &shape.stage);
        debug_assert_eq!((params.total, params.list.len()), list.table);
        upload_decay_mask(&gpu, h.decay, &params, shape.padded(params.total))?;
        upload_rope(&gpu, &d, (h.rope_cos, h.rope_sin))?;
        let (fp8, fp8_linears) = if list.fp8.is_empty() {
            (None, BTreeMap::new())
        } else {
            let shapes: Vec<(usize, usize)> = list.fp8.iter().map(|l| (l.i, l.o)).collect();
            let (f, linears) = Fp8::with_buffers(&mut gpu, &shapes, h.fp8)?;
            let keys = list.fp8.iter().map(|l| (l.layer, l.weight));
            (Some(f), keys.zip(linears).collect())
        };
        let mut eng = Engine {
            attn: None,
            fp8,
            fp8_linears,
            gpu,
            blas,
            xsz: shape.xsz(),
            nty: dist::activation_type(shape.precision),
            shape,
            params,
            w32: h.w32,
            wx: h.wx,
            grad: h.grad,
            m: h.m,
            v: h.v,
            decay: h.decay,
            sets: h.sets,
            s: h.s,
            loss_sums: h.loss_sums,
            memory,
            scalars: h.scalars,
            rope_cos: h.rope_cos,
            rope_sin: h.rope_sin,
            marks: None,
            staged: Vec::new(),
            tpc: None,
        };
        if eng.shape.attention == Attention::Flash {
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
        let bf16: Vec<String> = self
            .shape
            .dims
            .linear_shapes()
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
        self.shape
            .dims
            .linear_shapes()
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
    use super::super::model::Stage;
    use super::super::program::Program;
    use super::super::ranks::Ranks;
    use super::super::step::{engine_shape, refuse};
    use super::*;
    use crate::device::cuda::Tally;
    use crate::device::dist::World;
    use planc_compiler::cost::buffers::{self, Buffer};
    use planc_compiler::cost::memory::{in_flight_sets, PLANC_RECEIVES_AHEAD};
    use planc_compiler::plan::{Framework, Plan, Schedule};

    /// The plans `planc run` runs (it refuses none of them) among the examples and the GPU
    /// checks' plans, as `framework = planc`.
    fn runnable() -> Vec<(String, Plan)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in ["../examples", "tests/gpu"] {
            let found = std::fs::read_dir(root.join(dir))
                .expect("a folder of plans")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "tp"));
            files.extend(found);
        }
        files.sort();
        let mut out = Vec::new();
        for f in files {
            let c = planc_compiler::check::check_file(&f, &planc_compiler::source::FsLoader)
                .expect("readable");
            let Some(mut plan) = c.plan else {
                continue;
            };
            plan.framework = Framework::Planc;
            let world = World {
                size: plan.cluster.world_size() as usize,
                ..World::ONE
            };
            if refuse(&plan, &world).is_ok() {
                out.push((f.display().to_string(), plan));
            }
        }
        out
    }

    /// Every buffer a handle holds (the compute copy once in fp32, where it is the master
    /// weights).
    fn held(h: &Handles) -> Vec<Buf> {
        let mut v = vec![h.blas_workspace, h.w32, h.grad, h.m, h.v];
        if h.wx != h.w32 {
            v.push(h.wx);
        }
        for set in &h.sets {
            v.extend(&set.xs);
            for a in &set.layers {
                v.extend([
                    a.ln1, a.ln1_mean, a.ln1_rstd, a.q, a.k, a.v, a.p, a.lse, a.a, a.x2, a.ln2,
                    a.ln2_mean, a.ln2_rstd, a.h, a.act,
                ]);
            }
            v.extend([set.dx_top, set.tokens, set.uniq, set.start, set.pos]);
        }
        let s = &h.s;
        v.extend([
            s.qkv,
            s.o,
            s.p,
            s.tmp,
            s.dres,
            s.dln,
            s.dqkv,
            s.dq,
            s.dk,
            s.dv,
            s.dp,
            s.dd,
            s.d_o,
            s.da,
            s.dh,
            s.dact,
            s.lnf,
            s.lnf_mean,
            s.lnf_rstd,
            s.logits,
            s.losses,
            s.targets,
            s.partials,
            s.xout,
            s.gath,
            s.lse,
            s.stats,
            s.stats_all,
        ]);
        v.extend([h.loss_sums, h.scalars, h.decay, h.rope_cos, h.rope_sin]);
        v.extend([
            h.fp8.workspace,
            h.fp8.meta,
            h.fp8.hist,
            h.fp8.xq,
            h.fp8.gq,
            h.fp8.gqt,
        ]);
        v.extend(h.fp8.weights.iter().flat_map(|&(w, t)| [w, t]));
        v.retain(|b| *b != Buf::NULL);
        v
    }

    /// Pipeline rank `stage` of `plan` as `planc run` builds it (its first tensor- and
    /// data-parallel rank, the sets its program keeps alive): what `Engine::new` allocates,
    /// walked without a GPU, is the compiler's list for the report, byte for byte in
    /// order, every buffer in a handle of its own; and the program keeps alive the sets the
    /// memory model counts (`exact`), or under planc's interleaved programs at most
    /// `PLANC_RECEIVES_AHEAD` fewer (then the report's list is the one with the program's
    /// sets). Returns the number of sets.
    fn allocates_the_compilers_list(plan: &Plan, stage: usize, what: &str, exact: bool) -> usize {
        let p = &plan.parallel;
        let (tp, dp, pp) = (p.tp as usize, p.dp as usize, p.pp as usize);
        let world = World {
            rank: stage * tp * dp,
            size: plan.cluster.world_size() as usize,
            ..World::ONE
        };
        let ranks = Ranks::of(plan, &world);
        assert_eq!(ranks.pp_rank, stage);
        let dims = Dims::of(plan, None).expect("runs");
        let st = if pp > 1 {
            Stage::of(p, dims.layers, stage)
        } else {
            Stage::whole(dims.layers)
        };
        let local = dims.tensor_parallel(tp).expect("splits");
        let prog = Program::of(plan, stage, pp).expect("runs");
        let shape = engine_shape(plan, &local, &ranks, &st, prog.in_flight);
        let mb = prog.micro_batches as u64;
        let (live, model) = (
            prog.in_flight as u64,
            in_flight_sets(plan, stage as u64, mb),
        );
        let ours = stage_buffers(&shape, prog.micro_batches).expect("sizes");
        let report = if exact {
            assert_eq!(live, model, "{what}, stage {stage}: the sets kept alive");
            buffers::of_plan(plan, stage as u64, mb).expect("the report's list")
        } else {
            assert!(
                live <= model && model <= live + PLANC_RECEIVES_AHEAD,
                "{what}"
            );
            let sh = buffers::Shape::of_plan(plan, stage, prog.in_flight).expect("a shape");
            buffers::stage_buffers(&sh, prog.micro_batches).expect("sizes")
        };
        let listed: Vec<Buffer> = ours.iter().collect();
        assert!(
            listed == report.iter().collect::<Vec<_>>(),
            "{what}, stage {stage}: the runtime's buffers are the report's"
        );
        let mut tally = Tally::default();
        let h = Handles::alloc(&mut tally, &ours).expect("a tally allocates");
        let bytes: Vec<usize> = listed.iter().map(|b| b.bytes).collect();
        assert_eq!(tally.requests, bytes, "{what}, stage {stage}");
        let mut bufs = held(&h);
        assert_eq!(
            bufs.len(),
            listed.len(),
            "{what}: a handle for every buffer"
        );
        bufs.sort_by_key(|b| b.ptr);
        bufs.dedup();
        assert_eq!(bufs.len(), listed.len(), "{what}: no handle twice");
        let chunk = st.longest_chunk();
        for set in &h.sets {
            assert_eq!(set.xs.len(), chunk + 1);
            let kept = if p.recompute == Recompute::Full {
                1
            } else {
                chunk
            };
            assert_eq!(set.layers.len(), kept);
        }
        assert_eq!(h.sets.len(), prog.in_flight.max(1));
        prog.in_flight
    }

    /// On every example and GPU check `planc run` runs, each stage allocates what the
    /// report sums, with the activation sets its program keeps alive.
    #[test]
    fn every_plan_planc_runs_allocates_the_list_the_report_sums() {
        let plans = runnable();
        let names: Vec<&str> = plans.iter().map(|(n, _)| n.as_str()).collect();
        assert!(plans.len() >= 12, "{names:?}");
        let (mut pipelines, mut interleaved) = (0, 0);
        for (name, plan) in &plans {
            for stage in 0..plan.parallel.pp as usize {
                allocates_the_compilers_list(plan, stage, name, true);
            }
            pipelines += usize::from(plan.parallel.pp > 1);
            interleaved += usize::from(plan.parallel.schedule == Schedule::Interleaved);
        }
        assert!(pipelines >= 3 && interleaved >= 1, "{names:?}");
    }

    /// The same over what the examples leave out: fp8's products, fp32's single copy of
    /// the weights, SGD, sequence parallelism, full recomputation, standard attention,
    /// interleaving with rope (whose program here keeps a set fewer on its first stage
    /// than the memory model's bound counts).
    #[test]
    fn every_layout_allocates_the_list_the_report_sums() {
        for (model, train, par) in [
            ("gpt2-124m", "precision = fp8", "tp = 1, pp = 1"),
            (
                "llama3.2-1b",
                "precision = fp8",
                "tp = 2, pp = 2, sequence_parallel = true",
            ),
            (
                "gpt2-124m",
                "precision = fp32, optimizer = sgd",
                "tp = 2, pp = 1",
            ),
            (
                "gpt2-124m",
                "attention = standard",
                "tp = 1, pp = 2, recompute = full",
            ),
            (
                "llama3.2-1b",
                "attention = standard",
                "tp = 1, pp = 2, schedule = gpipe",
            ),
            (
                "llama3.2-1b",
                "precision = bf16",
                "tp = 1, pp = 4, schedule = interleaved, vpp = 2, recompute = selective",
            ),
        ] {
            let text = format!(
                "cluster c {{ nodes = 1, gpus_per_node = 4, gpu = H100_SXM_80GB }}
                 model m {{ preset = \"{model}\", seq_len = 512 }}
                 train {{ global_batch = 16, {train} }}
                 parallel {{ {par}, dp = auto, micro_batch = 2 }}
                 job j {{ framework = planc }}"
            );
            let c = planc_compiler::check::check_source("t.tp", &text);
            let plan = c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics));
            let what = format!("{model}, {train}, {par}");
            for stage in 0..plan.parallel.pp as usize {
                let exact = plan.parallel.schedule != Schedule::Interleaved;
                let sets = allocates_the_compilers_list(&plan, stage, &what, exact);
                assert!(sets >= 1);
            }
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
