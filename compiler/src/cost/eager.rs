//! The frameworks' unfused paths (`job.kernels = eager`): the PyTorch kernels a layer, the
//! output layer, the embedding and the optimizer launch when nothing fuses them, each a pass
//! of its own over its tensors in the type PyTorch gives them.
//!
//! The fused operation list (`cost::ops`) prices what a site with Transformer Engine and
//! apex runs. Without them, or in a script that runs `transformers`' modules uncompiled,
//! every elementwise operation is a kernel that reads its inputs and writes its output
//! through HBM; a backward is the autograd graph's own kernels, not twice the forward's;
//! mixed precision adds casts. [`layer`], [`head`] and [`embedding`] rewrite the fused
//! operations into [`OpKind::Unfused`] operations whose kernels are listed here, forward and
//! backward, and `cost::time` prices each kernel on its own (a product over the attention's
//! score square as `cost::standard_attention`'s are, its math then the square's traffic; a
//! pass at the memory-bound curve, no faster than a launch, and where PyTorch runs it on a
//! slower elementwise path, a cast that widens, a broadcast, a concatenation, at that path's
//! measured share of it: `cost::torch_rates`). Which kernels run is the framework's path
//! ([`Path`]):
//!
//! - [`Path::Local`], Megatron-LM's `--transformer-impl local` without Transformer Engine
//!   or apex (Megatron-LM d98e8a6, `megatron/core/transformer`): the norms are
//!   `torch.nn.LayerNorm`/`RMSNorm` (`WrappedTorchNorm`); the query-key-value product adds
//!   its bias in a kernel of its own (`tensor_parallel/layers.py`,
//!   `LinearWithGradAccumulationAndAsyncCommunication`: `output = output + bias`); the
//!   bias-GELU/SwiGLU and bias-dropout-add stay fused (`jit_fuser` is `torch.compile`,
//!   `megatron/core/jit.py`); rope is `_apply_rotary_pos_emb_bshd`'s multiplies, halves and
//!   concatenation; the core attention is `DotProductAttention` with
//!   `FusedScaleMaskSoftmax.forward_torch_softmax` (`--no-masked-softmax-fusion`): the
//!   scores upcast to fp32 (`attention_softmax_in_fp32`, on by default), masked in place
//!   (`attention_mask_func`: `masked_fill_`), the softmax, the probabilities cast back; the
//!   weight gradients are not accumulated inside the products
//!   (`--no-gradient-accumulation-fusion`: `main_grad.add_(grad)` a parameter); the
//!   optimizer is `torch.optim.AdamW` (`megatron/core/optimizer/__init__.py` falls back to
//!   it) with `local_multi_tensor_l2_norm` and `local_multi_tensor_scale`
//!   (`megatron/core/utils.py`): a norm a tensor, each copied to the host, and a multiply
//!   and a copy a tensor.
//! - [`Path::Autocast`], the `train.py` planc writes (`targets/templates/train.py.j2`)
//!   under DDP (`zero` 0 or 1) in bf16 or fp16: fp32 parameters under
//!   `torch.autocast` (transformers 5.17, `models/gpt2`, `models/llama`): every product
//!   casts its fp32 input (the residual stream and the norms are fp32) and its weight;
//!   `layer_norm`, `pow`, `softmax` run in fp32 (autocast's fp32 list) and a 16-bit tensor
//!   added to an fp32 one gives fp32, so GPT-2's `NewGELUActivation` (`0.5 * x * (1 +
//!   tanh(√(2/π) (x + 0.044715 x³)))`, eight kernels) and the attention's mask and softmax
//!   run partly in fp32; the loss is `F.cross_entropy(logits.float())`; the optimizer is
//!   `torch.optim.AdamW` with its default `foreach` implementation (eight passes over the
//!   parameters, `torch/optim/adam.py`, `_multi_tensor_adam`) after
//!   `clip_grad_norm_` (`_foreach_norm`, `_foreach_mul_`), and DDP copies each gradient into
//!   its bucket and back (`gradient_as_bucket_view=False`).
//! - [`Path::Module`], the same script with the module in the training type: FSDP2
//!   (`zero` 2 or 3, `MixedPrecisionPolicy(param_dtype=bf16)`), DeepSpeed's engine (its
//!   bf16 module, `FusedAdam` under its bf16 optimizer's fp32 master copy), or fp32: no
//!   autocast casts, but `LlamaRMSNorm`'s fp32 upcast, its pow, mean and multiplies, and
//!   the eager Llama softmax's fp32 remain.
//! - [`Path::Titan`], torchtitan without `torch.compile` (planc writes
//!   `compile.enable = false`): `nn.RMSNorm` (PyTorch's fused `_fused_rms_norm`), SwiGLU as
//!   `silu` and a multiply, rope in complex fp32 (`view_as_complex`, a multiply, `type_as`),
//!   grouped keys and values repeated (`repeat_kv`), the loss on fp32 logits, fused AdamW.
//!
//! The host dispatches every one of those kernels: Python, PyTorch's dispatcher and, forward,
//! the autograd node it records ([`HOST_FORWARD_OP_S`], [`HOST_BACKWARD_OP_S`], measured).
//! The GPU's queue lets the host run ahead while kernels are longer than their dispatch, and
//! drains where the pass waits (a pipeline transfer, the optimizer's host round trips), so
//! `cost::time` takes each pass, a layer's forward or backward, the embedding's, the output
//! layer's, as the larger of its kernels' time and the host's dispatch of its operations
//! ([`forward_dispatches`], [`backward_dispatches`]): the GPU time where the kernels are
//! long, the host's where they are short (a small model, a small micro-batch). The
//! optimizers' per-tensor loops pay the host's time a kernel. Left out: the host's own
//! stalls (a `.item()` or a `torch.tensor` of device values outside the optimizer), the
//! hooks of DeepSpeed's ZeRO-3 and FSDP around each parameter, and Python's time between
//! operations beyond the measured op.
//!
//! The fused attention (`attention = flash`) stays one kernel (PyTorch's SDPA, FlexAttention):
//! only Megatron-LM's local path has none (`check` prices it as standard, P0327).
//!
//! Left out: dropout's masks beyond the attention's, the MoE layers' own kernels (priced as
//! fused), and the activations the unfused path keeps (memory is the fused path's).

use super::ops::{Op, OpId, OpKind};
use super::time::Device;
use super::torch_rates::SlowPath;

use crate::plan::{Framework, Mlp, Norm, Plan, Position, Precision};

/// One kernel of an unfused path: a batched product over the attention's score square, or
/// a memory-bound pass (`cost::standard_attention`'s kernels, priced alike).
pub use super::standard_attention::Pass;

/// The kernels of one operation, forward and backward.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Passes {
    pub forward: Vec<Pass>,
    pub backward: Vec<Pass>,
}

impl Passes {
    fn fwd(mut self, bytes: f64) -> Self {
        self.forward.push(Pass::Memory { bytes });
        self
    }

    fn bwd(mut self, bytes: f64) -> Self {
        self.backward.push(Pass::Memory { bytes });
        self
    }

    /// A forward kernel on one of PyTorch's slower paths (`cost::torch_rates`).
    fn fwd_on(mut self, bytes: f64, path: SlowPath) -> Self {
        self.forward.push(Pass::Slow { bytes, path });
        self
    }

    fn bwd_on(mut self, bytes: f64, path: SlowPath) -> Self {
        self.backward.push(Pass::Slow { bytes, path });
        self
    }

    /// FLOPs of the products among `passes`.
    pub fn flops(passes: &[Pass]) -> f64 {
        passes
            .iter()
            .map(|p| match p {
                Pass::Product { batch, m, n, k, .. } => 2.0 * batch * m * n * k,
                Pass::Memory { .. } | Pass::Slow { .. } => 0.0,
            })
            .sum()
    }

    /// Bytes the memory passes among `passes` move.
    pub fn bytes(passes: &[Pass]) -> f64 {
        passes
            .iter()
            .map(|p| match p {
                Pass::Memory { bytes } | Pass::Slow { bytes, .. } => *bytes,
                Pass::Product { .. } => 0.0,
            })
            .sum()
    }
}

/// Seconds of one kernel on `dev`: a product over the score square as
/// [`Device::square_product`] prices it (its math, then the square's traffic), a pass at the
/// memory-bound curve (a slower path at its share of it).
pub fn seconds(dev: &Device, p: &Pass) -> f64 {
    dev.pass(*p)
}

/// Seconds of `passes` one after the other.
pub fn total(dev: &Device, passes: &[Pass]) -> f64 {
    passes.iter().map(|p| seconds(dev, p)).sum()
}

/// The unfused path a plan's framework takes (`job.kernels = eager`), if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Megatron-LM's `--transformer-impl local` without Transformer Engine or apex.
    Local,
    /// planc's `train.py` under DDP: fp32 parameters, `torch.autocast` to 16 bits.
    Autocast,
    /// planc's `train.py` with the module in its training type (FSDP2's parameter type,
    /// DeepSpeed's bf16 module, or fp32).
    Module,
    /// torchtitan, uncompiled.
    Titan,
}

pub fn path(plan: &Plan) -> Option<Path> {
    if !plan.eager() {
        return None;
    }
    let sixteen = matches!(
        plan.train.precision,
        Precision::Bf16 | Precision::Fp16 | Precision::Fp8
    );
    match plan.framework() {
        Framework::Planc => None,
        Framework::Megatron => Some(Path::Local),
        Framework::Torchtitan => Some(Path::Titan),
        Framework::Torch if plan.parallel.zero < 2 && sixteen => Some(Path::Autocast),
        Framework::Torch | Framework::Deepspeed => Some(Path::Module),
    }
}

/// Sizes of one layer's tensors on one GPU, in elements, and the types they are kept in.
struct Dims {
    /// The residual stream (the norms' rows): tokens × hidden, over tp under sequence
    /// parallelism.
    x: f64,
    /// Queries, and keys (or values), after the projections.
    q: f64,
    kv: f64,
    /// The MLP's inner activation (F on this GPU) and its up product's output (2F for SwiGLU).
    f: f64,
    /// Scores of the attention core: micro-batch × heads × seq × seq.
    scores: f64,
    batch_heads: f64,
    seq: f64,
    seq_full: f64,
    head_dim: f64,
    /// Bytes of a 16-bit tensor (the products' outputs); 4 in fp32 training.
    e: f64,
    /// Bytes of an element of the residual stream: fp32 under autocast, else `e`.
    u: f64,
}

fn dims(plan: &Plan, path: Path) -> Dims {
    let m = &plan.model;
    let p = &plan.parallel;
    let t = p.tp as f64;
    let s_full = m.seq_len as f64;
    let s = s_full / p.cp as f64;
    let tokens = p.micro_batch as f64 * s;
    let sp = if p.sequence_parallel { t } else { 1.0 };
    let e = plan.train.precision.bytes();
    let heads = m.heads as f64 / t;
    Dims {
        x: tokens * m.hidden as f64 / sp,
        q: tokens * m.attention_width() as f64 / t,
        kv: tokens * m.kv_width() as f64 / t,
        f: tokens * m.ffn_hidden as f64 / t,
        scores: p.micro_batch as f64 * heads * s * s_full,
        batch_heads: p.micro_batch as f64 * heads,
        seq: s,
        seq_full: s_full,
        head_dim: m.head_dim as f64,
        e,
        u: if path == Path::Autocast { 4.0 } else { e },
    }
}

/// transformers' GPT-2 (learned positions, LayerNorm, GELU, fused query-key-value
/// product), else its Llama (rope, RMSNorm, SwiGLU, separate projections).
fn gpt2(plan: &Plan) -> bool {
    plan.model.position == Position::Learned
}

fn unfused(id: OpId, passes: Passes) -> Op {
    Op {
        id,
        kind: OpKind::Unfused(passes),
    }
}

/// A layer's fused forward operations `ops` as `path` runs them.
pub fn layer(plan: &Plan, path: Path, ops: Vec<Op>) -> Vec<Op> {
    let d = dims(plan, path);
    let mut out = Vec::with_capacity(ops.len() + 8);
    for o in ops {
        match (o.id, &o.kind) {
            (OpId::InputNorm | OpId::MlpNorm, OpKind::Norm { .. }) => {
                out.push(unfused(o.id, norm(plan, path, &d)));
                if path == Path::Autocast {
                    let (cast, consumers) = if o.id == OpId::InputNorm {
                        (OpId::QkvInputCast, if gpt2(plan) { 1.0 } else { 3.0 })
                    } else {
                        (OpId::MlpInputCast, if gpt2(plan) { 1.0 } else { 2.0 })
                    };
                    out.push(unfused(cast, input_casts(&d, d.x, consumers)));
                }
            }
            (OpId::QkvProj, OpKind::Gemm { n, m, .. }) => {
                out.push(o.clone());
                if path == Path::Local && plan.model.bias {
                    // `output = output + bias`: read and write the product's output.
                    out.push(unfused(
                        OpId::QkvBias,
                        Passes::default().fwd(2.0 * d.e * m * n),
                    ));
                }
            }
            (OpId::Rope, OpKind::Memory { .. }) => out.push(unfused(OpId::Rope, rope(path, &d))),
            (_, OpKind::FlashAttention { .. }) => {
                out.push(o.clone());
                if path == Path::Titan && d.kv < d.q {
                    // `repeat_kv`: keys and values copied to every query head; backward sums
                    // the copies back.
                    let copies = 2.0 * d.e * (d.kv + d.q);
                    out.push(unfused(
                        OpId::AttentionHeads,
                        Passes::default().fwd(copies).bwd(copies),
                    ));
                }
            }
            (_, OpKind::StandardAttention { .. }) => {
                out.push(unfused(OpId::AttentionCore, core(plan, path, &d)));
                out.push(unfused(OpId::AttentionHeads, heads(plan, path, &d)));
            }
            (OpId::AttentionResidual | OpId::MlpResidual, OpKind::Memory { .. }) => {
                out.push(unfused(o.id, residual(plan, path, &d)));
            }
            (OpId::MlpActivation, OpKind::Activation { mlp, .. }) if path != Path::Local => {
                out.push(unfused(o.id, activation(*mlp, path, &d)));
                if path == Path::Autocast && *mlp == Mlp::Gelu {
                    // The GELU's fp32 output cast for the down product.
                    out.push(unfused(OpId::MlpDownInputCast, input_casts(&d, d.f, 1.0)));
                }
            }
            _ => out.push(o),
        }
    }
    if path == Path::Autocast {
        out.push(unfused(OpId::WeightCasts, weight_casts(plan)));
    }
    out
}

/// The output layer's fused operations as `path` runs them (the final norm, the logits, the
/// loss).
pub fn head(plan: &Plan, path: Path, ops: Vec<Op>) -> Vec<Op> {
    let d = dims(plan, path);
    let m = &plan.model;
    let t = plan.parallel.tp as f64;
    let tokens = (plan.parallel.micro_batch * m.seq_len / plan.parallel.cp) as f64;
    let logits = tokens * m.vocab as f64 / t;
    let mut out = Vec::with_capacity(ops.len() + 2);
    for o in ops {
        match (o.id, &o.kind) {
            (OpId::FinalNorm, OpKind::Norm { .. }) => {
                out.push(unfused(o.id, norm(plan, path, &d)));
                if path == Path::Autocast {
                    out.push(unfused(OpId::LogitsInputCast, input_casts(&d, d.x, 1.0)));
                    // The output layer's weight cast each forward, its gradient cast back.
                    let w = (4.0 + d.e) * m.vocab as f64 * m.hidden as f64 / t;
                    out.push(unfused(
                        OpId::LogitsWeightCast,
                        Passes::default().fwd(w).bwd(w),
                    ));
                }
            }
            (OpId::CrossEntropy, OpKind::Memory { .. }) if path != Path::Local => {
                out.push(unfused(o.id, loss(&d, logits)));
            }
            _ => out.push(o),
        }
    }
    out
}

/// The embedding's fused operations as `path` runs them: transformers' and torchtitan's
/// `nn.Embedding` (GPT-2 adds its learned positions), in the residual stream's type.
pub fn embedding(plan: &Plan, path: Path, ops: Vec<Op>) -> Vec<Op> {
    if path == Path::Local {
        return ops;
    }
    let d = dims(plan, path);
    let m = &plan.model;
    let table = (m.vocab * m.hidden) as f64 / plan.parallel.tp as f64;
    ops.into_iter()
        .map(|o| {
            if o.id != OpId::Embedding {
                return o;
            }
            let u = d.u;
            // The rows gathered (read, written); GPT-2 adds the positions' rows.
            let mut p = Passes::default().fwd(2.0 * u * d.x);
            if gpt2(plan) {
                p = p.fwd(3.0 * u * d.x);
            }
            // `embedding_dense_backward`: the table's gradient zeroed, the rows' gradients
            // summed into it; a tied table adds the output layer's gradient to it.
            p = p.bwd(u * table).bwd(3.0 * u * d.x);
            if m.tied_embeddings {
                p = p.bwd(3.0 * u * table);
            }
            unfused(o.id, p)
        })
        .collect()
}

/// A norm and its backward.
///
/// - `torch.nn.LayerNorm` (transformers' GPT-2, Megatron-LM's local path) and PyTorch's
///   fused `rms_norm` (torchtitan's `nn.RMSNorm`, Megatron-LM's `WrappedTorchNorm`): one
///   kernel forward (read, write); backward one for the input's gradient (the output's
///   gradient and the input read, the gradient written) and one for the weights' (both read
///   again). In fp32 under autocast (`layer_norm` is on autocast's fp32 list).
/// - `LlamaRMSNorm` (transformers): `to(float32)`, `pow(2)`, `mean`, a multiply by the
///   reciprocal root, `to(input_dtype)`, the weight's multiply; backward the autograd
///   graph's multiplies, the mean's expansion, `pow`'s backward (`self.pow(1)`, `× 2`,
///   `× grad`), the reductions to the weight and to the variance, and the sum of the two
///   gradients of its input.
fn norm(plan: &Plan, path: Path, d: &Dims) -> Passes {
    let u = d.u;
    let composite =
        plan.model.norm == Norm::Rmsnorm && matches!(path, Path::Autocast | Path::Module);
    if !composite {
        // `torch.nn.LayerNorm`'s kernels run at `layer_norm`'s measured share; a fused
        // RMSNorm (torchtitan's `nn.RMSNorm`) is unmeasured and priced as a copy.
        if plan.model.norm == Norm::Layernorm {
            let back = SlowPath::LayerNormBackward;
            return Passes::default()
                .fwd_on(2.0 * u * d.x, SlowPath::LayerNorm)
                .bwd_on(3.0 * u * d.x, back)
                .bwd_on(2.0 * u * d.x, back);
        }
        return Passes::default()
            .fwd(2.0 * u * d.x)
            .bwd(3.0 * u * d.x)
            .bwd(2.0 * u * d.x);
    }
    let x = d.x;
    let mut p = Passes::default();
    let (widen, row, vector) = (
        SlowPath::Widening,
        SlowPath::RowBroadcast,
        SlowPath::VectorBroadcast,
    );
    if u != 4.0 {
        p = p.fwd_on((u + 4.0) * x, widen); // to(float32)
    }
    p = p
        .fwd(8.0 * x) // pow(2)
        .fwd(4.0 * x) // mean
        .fwd_on(8.0 * x, row); // × rsqrt(variance + eps)
    if u != 4.0 {
        p = p.fwd((4.0 + u) * x); // to(input_dtype)
    }
    p = p.fwd_on(2.0 * u * x, vector); // weight ×

    // Backward, in the order autograd runs it.
    p = p
        .bwd_on(2.0 * u * x, vector) // grad × weight
        .bwd(3.0 * u * x) // grad × normed, for the weight
        .bwd(u * x); // summed over tokens
    if u != 4.0 {
        p = p.bwd_on((u + 4.0) * x, widen);
    }
    p = p
        .bwd_on(8.0 * x, row) // grad × rsqrt
        .bwd(12.0 * x) // grad × x, for the variance
        .bwd(4.0 * x) // summed over the row
        .bwd(4.0 * x) // mean's expansion
        .bwd(8.0 * x) // x.pow(1)
        .bwd(8.0 * x) // × 2
        .bwd(12.0 * x) // × grad
        .bwd(12.0 * x); // the two gradients of x summed
    if u != 4.0 {
        p = p.bwd((4.0 + u) * x);
    }
    p
}

/// Autocast's casts of an fp32 tensor of `n` elements for each of `consumers` products
/// (autocast caches only the weights' casts); backward each 16-bit gradient cast to fp32
/// and the consumers' gradients summed in fp32.
fn input_casts(d: &Dims, n: f64, consumers: f64) -> Passes {
    let mut p = Passes::default();
    for _ in 0..consumers as usize {
        p = p
            .fwd((4.0 + d.e) * n)
            .bwd_on((d.e + 4.0) * n, SlowPath::Widening);
    }
    for _ in 1..consumers as usize {
        p = p.bwd(12.0 * n);
    }
    p
}

/// The layer's weights (and biases) cast to 16 bits each forward under autocast, and their
/// 16-bit gradients cast back to fp32: a kernel a tensor.
fn weight_casts(plan: &Plan) -> Passes {
    let m = &plan.model;
    let t = plan.parallel.tp as f64;
    let (h, q, kv, f) = (
        m.hidden as f64,
        m.attention_width() as f64,
        m.kv_width() as f64,
        m.ffn_hidden as f64,
    );
    let up = if m.mlp == Mlp::Swiglu { 2.0 } else { 1.0 };
    let mut tensors = vec![h * (q + 2.0 * kv) / t, q * h / t, up * h * f / t, f * h / t];
    if m.bias {
        tensors.extend([(q + 2.0 * kv) / t, h, up * f / t, h]);
    }
    let e = plan.train.precision.bytes();
    tensors.into_iter().fold(Passes::default(), |p, n| {
        p.fwd((4.0 + e) * n)
            .bwd_on((e + 4.0) * n, SlowPath::Widening)
    })
}

/// Rope over the queries and keys (`n` elements).
fn rope(path: Path, d: &Dims) -> Passes {
    let n = d.q + d.kv;
    let e = d.e;
    // cos and sin broadcast over the batch and heads; under autocast the fp32 cos and sin
    // widen the 16-bit queries and keys (`cost::torch_rates`).
    let (vector, widen) = (SlowPath::VectorBroadcast, SlowPath::Widening);
    match path {
        // `_apply_rotary_pos_emb_bshd`: t·cos, the halves (`chunk`) negated and
        // concatenated, ·sin, the sum; backward the two products' gradients, the
        // negation's, the halves' concatenation, the sum of t's two gradients.
        Path::Local => Passes::default()
            .fwd_on(2.0 * e * n, vector)
            .fwd(e * n)
            .fwd_on(2.0 * e * n, SlowPath::Concat)
            .fwd_on(2.0 * e * n, vector)
            .fwd(3.0 * e * n)
            .bwd_on(2.0 * e * n, vector)
            .bwd(e * n)
            .bwd(2.0 * e * n)
            .bwd_on(2.0 * e * n, vector)
            .bwd(3.0 * e * n),
        // transformers' `apply_rotary_pos_emb` in the module's type: the same kernels, but
        // `rotate_half` slices (each slice's backward writes a whole zeroed tensor) and
        // three gradients of q summed.
        Path::Module => Passes::default()
            .fwd_on(2.0 * e * n, vector)
            .fwd(e * n)
            .fwd_on(2.0 * e * n, SlowPath::Concat)
            .fwd_on(2.0 * e * n, vector)
            .fwd(3.0 * e * n)
            .bwd_on(2.0 * e * n, vector)
            .bwd(e * n)
            .bwd(4.0 * e * n)
            .bwd_on(2.0 * e * n, vector)
            .bwd(6.0 * e * n),
        // Under autocast cos and sin are fp32 (the embeddings' type), so q·cos, ·sin and
        // their sum are fp32, and the attention casts q and k back to 16 bits.
        Path::Autocast => Passes::default()
            .fwd_on((e + 4.0) * n, widen)
            .fwd(e * n)
            .fwd_on(2.0 * e * n, SlowPath::Concat)
            .fwd_on((e + 4.0) * n, widen)
            .fwd(12.0 * n)
            .fwd((4.0 + e) * n)
            .bwd_on((e + 4.0) * n, widen)
            .bwd(8.0 * n)
            .bwd((4.0 + e) * n)
            .bwd(e * n)
            .bwd(4.0 * e * n)
            .bwd(8.0 * n)
            .bwd((4.0 + e) * n)
            .bwd(6.0 * e * n),
        // torchtitan's `apply_rotary_emb`: `float()`, a complex multiply, `type_as`.
        // The complex multiply broadcasts `freqs_cis` over the batch and heads.
        Path::Titan => Passes::default()
            .fwd_on((e + 4.0) * n, widen)
            .fwd_on(8.0 * n, vector)
            .fwd((4.0 + e) * n)
            .bwd_on((e + 4.0) * n, widen)
            .bwd_on(8.0 * n, vector)
            .bwd((4.0 + e) * n),
    }
}

/// The standard attention core: its products and the passes over the scores between them.
fn core(plan: &Plan, path: Path, d: &Dims) -> Passes {
    let e = d.e;
    let s = d.scores;
    // The products read and write the square in the 16-bit type.
    let square = s * e;
    let scores = Pass::Product {
        batch: d.batch_heads,
        m: d.seq,
        n: d.seq_full,
        k: d.head_dim,
        square,
    };
    let reading = |m: f64, k: f64| Pass::Product {
        batch: d.batch_heads,
        m,
        n: d.head_dim,
        k,
        square,
    };
    // Passes over the scores between the products, forward and backward, in bytes a score,
    // each a copy (`C`) or a kernel on a slower path (`cost::torch_rates`): the mask added
    // broadcast over the heads (`Hb`; from fp32 under autocast, widening too: `Whb`), a cast
    // up (`W`), the softmax over the rows in 16 bits (`S16`, `S16b` backward) and its fp32
    // backward (`S32b`; the fp32 forward runs at a copy's rate).
    enum Score {
        C(f64),
        On(f64, SlowPath),
    }
    use Score::{On, C};
    use SlowPath::{
        HeadsBroadcast as Hb, Softmax16 as S16, Softmax16Backward as S16b,
        Softmax32Backward as S32b, Widening as W, WideningHeadsBroadcast as Whb,
    };
    let (fwd, bwd): (Vec<Score>, Vec<Score>) = match path {
        // `baddbmm` scales inside the product. With 16-bit scores: `float()`, `masked_fill_`
        // in place, the fp32 softmax, the cast back; backward the cast's, the softmax's,
        // the mask's (`masked_fill(mask, 0)`) and `float()`'s.
        Path::Local if e < 4.0 => (
            vec![On(e + 4.0, W), C(8.0), C(8.0), C(4.0 + e)],
            vec![On(e + 4.0, W), On(12.0, S32b), C(8.0), C(4.0 + e)],
        ),
        Path::Local => (vec![C(8.0), C(8.0)], vec![On(12.0, S32b), C(8.0)]),
        // `* scaling` on the 16-bit scores, `+ mask` with autocast's fp32 mask (fp32
        // out), the fp32 softmax, the cast to the values' type (GPT-2's `.type`, Llama's
        // product's autocast); backward: the cast's, the softmax's, the sum's cast to the
        // 16-bit scores' type, the scaling's.
        Path::Autocast => (
            vec![C(2.0 * e), On(e + 4.0, Whb), C(8.0), C(4.0 + e)],
            vec![On(e + 4.0, W), On(12.0, S32b), C(4.0 + e), C(2.0 * e)],
        ),
        // GPT-2 in the module's type: scale, mask and softmax in 16 bits; Llama's
        // `softmax(dtype=float32)` upcasts first and casts back.
        Path::Module | Path::Titan if e == 4.0 => (
            vec![C(8.0), On(8.0, Hb), C(8.0)],
            vec![On(12.0, S32b), C(8.0)],
        ),
        Path::Module | Path::Titan if gpt2(plan) => (
            vec![C(2.0 * e), On(2.0 * e, Hb), On(2.0 * e, S16)],
            vec![On(3.0 * e, S16b), C(2.0 * e)],
        ),
        Path::Module | Path::Titan => (
            vec![
                C(2.0 * e),
                On(2.0 * e, Hb),
                On(e + 4.0, W),
                C(8.0),
                C(4.0 + e),
            ],
            vec![On(e + 4.0, W), On(12.0, S32b), C(4.0 + e), C(2.0 * e)],
        ),
    };
    let mut p = Passes::default();
    p.forward.push(scores);
    for b in fwd {
        p = match b {
            C(b) => p.fwd(b * s),
            On(b, path) => p.fwd_on(b * s, path),
        };
    }
    // `native_dropout` over the 16-bit probabilities: read, write, a byte-a-score mask
    // written; backward reads the gradient and the mask, writes the gradient.
    let dropout = (2.0 * e + 1.0) * s;
    if plan.train.dropout > 0.0 {
        p = p.fwd(dropout);
    }
    p.forward.push(reading(d.seq, d.seq_full));
    // dP = dO·Vᵀ writes the square, dV = Pᵀ·dO reads it; the passes; dQ = dS·K and
    // dK = dSᵀ·Q read the square.
    p.backward.push(scores);
    p.backward.push(reading(d.seq_full, d.seq));
    if plan.train.dropout > 0.0 {
        p = p.bwd(dropout);
    }
    for b in bwd {
        p = match b {
            C(b) => p.bwd(b * s),
            On(b, path) => p.bwd_on(b * s, path),
        };
    }
    p.backward.push(reading(d.seq, d.seq_full));
    p.backward.push(reading(d.seq_full, d.seq));
    p
}

/// The copies of queries, keys and values around the standard core's batched products.
///
/// - Megatron-LM's views need none but the context's `permute(...).contiguous()` (and its
///   gradient's reshape), the split's backward (the concatenation of the three gradients),
///   and with grouped keys `repeat_interleave` of keys and values (backward: summed).
/// - transformers' `torch.matmul` of `[b, heads, s, d]` views of the projections' output
///   copies each operand into a batch (`expand(...).reshape(...)`), and its output's
///   `transpose(1, 2)` is copied for the output product; backward each copy's gradient is
///   reshaped (copied) back, and GPT-2's split of the fused projection concatenates the
///   three.
fn heads(plan: &Plan, path: Path, d: &Dims) -> Passes {
    let e = d.e;
    let merge = 2.0 * e * d.q;
    let split = 2.0 * e * (d.q + 2.0 * d.kv);
    match path {
        Path::Local => {
            let mut p = Passes::default().fwd(merge).bwd(merge).bwd(split);
            if d.kv < d.q {
                let repeat = 2.0 * e * (d.kv + d.q);
                p = p.fwd(repeat).bwd(repeat);
            }
            p
        }
        _ => {
            // Each of q, k, v read in its size and written at the queries' (keys and
            // values repeated to every query head).
            let operands = e * (d.q + 2.0 * d.kv) + 3.0 * e * d.q;
            let mut p = Passes::default()
                .fwd(operands)
                .fwd(merge)
                .bwd(merge)
                .bwd(operands);
            if gpt2(plan) {
                p = p.bwd(split);
            }
            p
        }
    }
}

/// A residual addition: forward the branch's output added to the stream; backward the
/// stream's two gradients (through the skip and through the next norm) summed, and under
/// autocast the fp32 gradient cast to the branch's 16-bit output.
///
/// Megatron-LM's bias-dropout-add is one compiled kernel (`bias_dropout_add_fused_train`);
/// with dropout its backward applies the mask in one more pass.
fn residual(plan: &Plan, path: Path, d: &Dims) -> Passes {
    let (e, u, x) = (d.e, d.u, d.x);
    match path {
        Path::Autocast => Passes::default()
            .fwd_on((e + 2.0 * u) * x, SlowPath::Widening)
            .bwd((u + e) * x)
            .bwd(3.0 * u * x),
        Path::Local if plan.train.dropout > 0.0 => Passes::default()
            .fwd((3.0 * e + 1.0) * x)
            .bwd((2.0 * e + 1.0) * x)
            .bwd(3.0 * e * x),
        _ => Passes::default().fwd(3.0 * e * x).bwd(3.0 * e * x),
    }
}

/// The MLP's activation over F elements (`d.f`), as transformers and torchtitan run it.
///
/// - GELU is `NewGELUActivation` (`gelu_new`, what planc's GPT-2 config names): `pow(x,
///   3)`, `× 0.044715`, `x +`, `× √(2/π)`, `tanh`, `1 +`, `0.5 × x`, the product; under
///   autocast `pow` casts x to fp32 first and every sum with an fp32 term is fp32. Backward:
///   the product's two gradients, `0.5 ×`'s, `tanh`'s, the scalings', `pow`'s three
///   kernels (`self.pow(2)`, `× 3`, `× grad`), the casts back to x's type, and x's three
///   gradients summed.
/// - SwiGLU is `silu(gate) * up`: two kernels; backward the product's two gradients and
///   `silu`'s.
fn activation(mlp: Mlp, path: Path, d: &Dims) -> Passes {
    let (e, f) = (d.e, d.f);
    match mlp {
        Mlp::Swiglu => Passes::default()
            .fwd(2.0 * e * f)
            .fwd(3.0 * e * f)
            .bwd(3.0 * e * f)
            .bwd(3.0 * e * f)
            .bwd(3.0 * e * f),
        Mlp::Gelu if path == Path::Autocast => Passes::default()
            .fwd_on((e + 4.0) * f, SlowPath::Widening) // x to fp32 for pow
            .fwd(8.0 * f) // pow
            .fwd(8.0 * f) // × 0.044715
            .fwd_on((e + 8.0) * f, SlowPath::Widening) // x + (fp32)
            .fwd(8.0 * f) // × √(2/π)
            .fwd(8.0 * f) // tanh
            .fwd(8.0 * f) // 1 +
            .fwd(2.0 * e * f) // 0.5 × x
            .fwd_on((e + 8.0) * f, SlowPath::Widening) // (0.5x) × (fp32)
            .bwd(12.0 * f) // grad × the fp32 factor
            .bwd((4.0 + e) * f) // cast to 0.5x's type
            .bwd_on((4.0 + e + 4.0) * f, SlowPath::Widening) // grad × 0.5x
            .bwd(2.0 * e * f) // × 0.5
            .bwd(12.0 * f) // tanh_backward
            .bwd(8.0 * f) // × √(2/π)
            .bwd((4.0 + e) * f) // cast to x's type
            .bwd(8.0 * f) // × 0.044715
            .bwd(8.0 * f) // self.pow(2)
            .bwd(8.0 * f) // × 3
            .bwd(12.0 * f) // × grad
            .bwd((4.0 + e) * f) // pow's input cast back
            .bwd(3.0 * e * f) // x's gradients summed
            .bwd(3.0 * e * f),
        Mlp::Gelu => {
            let mut p = Passes::default();
            for b in [2.0, 2.0, 3.0, 2.0, 2.0, 2.0, 2.0, 3.0] {
                p = p.fwd(b * e * f);
            }
            for b in [3.0, 3.0, 2.0, 3.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0] {
                p = p.bwd(b * e * f);
            }
            p
        }
    }
}

/// `F.cross_entropy(logits.float(), ...)` over `n` logits: the cast, `log_softmax` and the
/// gather forward; backward `nll_loss`'s zeroed gradient and scatter, `log_softmax`'s
/// backward, the cast's.
fn loss(d: &Dims, n: f64) -> Passes {
    let e = d.e;
    let mut p = Passes::default();
    if e < 4.0 {
        p = p.fwd_on((e + 4.0) * n, SlowPath::Widening);
    }
    p = p
        .fwd_on(8.0 * n, SlowPath::SoftmaxRows)
        .bwd(4.0 * n)
        .bwd_on(12.0 * n, SlowPath::SoftmaxRowsBackward);
    if e < 4.0 {
        p = p.bwd((4.0 + e) * n);
    }
    p
}

/// How long the host takes to dispatch one small eager PyTorch operation forward, recorded
/// for autograd (Python, the dispatcher, the autograd node, the launch): 9.84 µs, and one
/// in autograd's backward: 11.77 µs. Measured on the lent H200 host, torch 2.11,
/// `runtime/tests/gpu/host_ops.py` (4000 chained `y * a + b` on a 64 × 64 tensor),
/// 2026-11-28. Under `no_grad` (the optimizers' loops) an op records no node, so there the
/// forward figure is an upper bound.
pub const HOST_FORWARD_OP_S: f64 = 9.84e-6;
pub const HOST_BACKWARD_OP_S: f64 = 11.77e-6;

/// The operations the host dispatches to run `ops` forward: each kernel an unfused operation
/// lists, each other operation one (a product, a kernel left fused, a collective), a grouped
/// product's experts one each, a ring exchange's steps.
pub fn forward_dispatches(ops: &[Op]) -> f64 {
    ops.iter()
        .map(|o| match &o.kind {
            OpKind::Unfused(p) => p.forward.len() as f64,
            OpKind::GroupedGemm { count, .. } => *count,
            OpKind::RingExchange { steps, .. } => *steps as f64,
            _ => 1.0,
        })
        .sum()
}

/// The operations autograd dispatches to run `ops` backward: each backward kernel an unfused
/// operation lists, a product's input gradient and, where `trains` says its weight trains,
/// its weight gradient, every other operation one.
pub fn backward_dispatches(ops: &[Op], trains: impl Fn(&Op) -> bool) -> f64 {
    ops.iter()
        .map(|o| {
            let products = if trains(o) { 2.0 } else { 1.0 };
            match &o.kind {
                OpKind::Unfused(p) => p.backward.len() as f64,
                OpKind::Gemm { .. } => products,
                OpKind::GroupedGemm { count, .. } => count * products,
                OpKind::RingExchange { steps, .. } => *steps as f64,
                _ => 1.0,
            }
        })
        .sum()
}

/// A host round trip a tensor: Megatron-LM's `local_multi_tensor_l2_norm` takes each
/// tensor's norm and copies it to the host (`torch.tensor` of the list of norms) before the
/// next: two launches on an idle stream, each as the shipped H200 profile measured a kernel
/// launched alone (7.4–7.6 µs, its `[[memory]]` points of 64 KiB to 4 MiB).
const HOST_ROUND_TRIP_S: f64 = 2.0 * 7.5e-6;

/// A kernel the host launches for each parameter tensor, when the tensor is small: no
/// faster than a launch on the GPU (`cost::time`'s floor, 4 µs), nor than the host's
/// dispatch of the op ([`HOST_FORWARD_OP_S`]): the host's, since the loop's kernels are
/// shorter than their dispatch.
const LAUNCH_S: f64 = if HOST_FORWARD_OP_S > 4e-6 {
    HOST_FORWARD_OP_S
} else {
    4e-6
};

/// The optimizer step of `path` over `params` parameters of this GPU, `local` of them in its
/// shard, in `tensors` parameter tensors: the update's passes as the framework's optimizer
/// runs them, the gradient norm and clipping, the copies its mixed precision makes.
pub fn optimizer_seconds(
    plan: &Plan,
    path: Path,
    params: f64,
    local: f64,
    tensors: f64,
    dev: &Device,
) -> f64 {
    let e = plan.train.precision.bytes();
    // `torch.optim.AdamW`'s foreach step: decay (read, write the weights), `lerp_` of the
    // first moment, `mul_` and `addcmul_` of the second, `sqrt`, `div_`, `add_` into a new
    // list, `addcdiv_` into the weights: 80 bytes a parameter.
    let foreach = 8.0 + 12.0 + 8.0 + 12.0 + 8.0 + 8.0 + 8.0 + 16.0;
    // `clip_grad_norm_`: `_foreach_norm`, then `_foreach_mul_` by the clamped coefficient;
    // the train.py planc writes calls it only where `grad_clip` is above 0.
    let clip = if plan.train.run.grad_clip > 0.0 {
        4.0 + 8.0
    } else {
        0.0
    };
    match path {
        Path::Autocast | Path::Module if plan.framework() == Framework::Deepspeed => {
            // DeepSpeed's bf16 optimizer: each 16-bit gradient cast and added into the fp32
            // gradient, the 16-bit one zeroed; the norm, the clip; `FusedAdam` (gradient
            // read, weights and moments read and written); the fp32 weights copied to the
            // 16-bit module; the fp32 gradients zeroed. Around them the engine and
            // `BF16_Optimizer` work a parameter at a time: DeepSpeed 0.19.8's step on GPT-2
            // (148 tensors) ran 2554 kernels in groups of 148 and 296 (copies, casts, `abs`,
            // reductions, the `isinf`/`isnan` checks and their logic, memsets) and 153
            // device-to-host copies (`torch_profile.py` on the lent H200, 2026-11-29): 17
            // launches and a round trip to the host a tensor, each shorter than its dispatch.
            let bytes = (e + 4.0) + 12.0 + e + 4.0 + 8.0 + 28.0 + (4.0 + e) + 4.0;
            dev.memory(local * bytes) + tensors * (HOST_ROUND_TRIP_S + 17.0 * LAUNCH_S)
        }
        Path::Autocast | Path::Module => {
            // DDP (zero < 2) copies every gradient into its bucket and back.
            let ddp = if plan.parallel.zero < 2 { 16.0 } else { 0.0 };
            dev.memory(local * (foreach + clip) + params * ddp)
        }
        Path::Titan => {
            // Fused AdamW and `clip_grad_norm_`.
            dev.memory(local * (28.0 + clip))
        }
        Path::Local => {
            // torch AdamW on the fp32 main weights; the norm a tensor at a time, each to the
            // host; the clip as a multiply and a copy a tensor; the main weights copied to
            // the 16-bit model (a multiply by 1 and a copy a tensor, or the distributed
            // optimizer's copy of its shard); the gradient buffer zeroed.
            let copy = if plan.parallel.zero >= 1 {
                4.0 + e
            } else {
                8.0 + 4.0 + e
            };
            let launches = if plan.parallel.zero >= 1 { 3.0 } else { 4.0 };
            dev.memory(local * (foreach + 4.0 + 16.0 + copy) + params * 4.0)
                + tensors * (HOST_ROUND_TRIP_S + launches * LAUNCH_S)
        }
    }
}

/// Parameter tensors of a stage holding `layers` layers (and the ends it holds): the
/// optimizer's per-tensor kernels launch once each.
pub fn parameter_tensors(plan: &Plan, layers: f64, first: bool, last: bool) -> f64 {
    let m = &plan.model;
    let norm = if m.norm == Norm::Layernorm && m.bias {
        2.0
    } else {
        1.0
    };
    let linears = match (m.mlp, gpt2(plan)) {
        (_, true) => 4.0,
        (Mlp::Swiglu, false) => 7.0,
        (Mlp::Gelu, false) => 6.0,
    };
    let per_layer = 2.0 * norm + linears * if m.bias { 2.0 } else { 1.0 };
    let mut n = layers * per_layer;
    if first {
        n += if m.position == Position::Learned {
            2.0
        } else {
            1.0
        };
    }
    if last {
        n += norm + if m.tied_embeddings { 0.0 } else { 1.0 };
    }
    n
}

/// Whether the framework's products accumulate the weight gradients themselves: not on
/// Megatron-LM's local path (`--no-gradient-accumulation-fusion`: the fusion is apex's or
/// Transformer Engine's).
pub fn accumulates_in_products(plan: &Plan) -> bool {
    plan.parallel.grad_accumulation_fusion && path(plan) != Some(Path::Local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;
    use crate::cost::ops::{head_forward, layer_forward};
    use crate::plan::Kernels;

    /// GPT-2 124M on one H200, 16 × 1024 tokens, bf16 (tests/frameworks/run.sh's plan), with
    /// `job` and `attention` as given.
    fn gpt2(job: &str, attention: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H200_SXM_141GB }}
             model m {{ preset = \"gpt2-124m\" }}
             train {{ global_batch = 16, precision = bf16, optimizer = adamw, attention = {attention} }}
             parallel {{ tp = 1, pp = 1, dp = 1, micro_batch = 16, recompute = none }}
             job j {{ {job} }}"
        );
        checked(&text)
    }

    /// The plan of a valid `text`.
    fn checked(text: &str) -> Plan {
        let c = check_source("t.tp", text);
        assert!(c.ok(), "{:#?}", c.diagnostics);
        c.plan.unwrap()
    }

    fn op(ops: &[Op], id: OpId) -> &Passes {
        match ops.iter().find(|o| o.id == id).map(|o| &o.kind) {
            Some(OpKind::Unfused(p)) => p,
            other => panic!("{id}: {other:?}"),
        }
    }

    fn names(ops: &[Op]) -> Vec<&'static str> {
        ops.iter().map(|o| o.name()).collect()
    }

    /// Bytes a memory pass of `passes` moves a unit of `n` elements, kernel by kernel.
    fn per(passes: &[Pass], n: f64) -> Vec<f64> {
        passes
            .iter()
            .filter_map(|p| match p {
                Pass::Memory { bytes } | Pass::Slow { bytes, .. } => Some(bytes / n),
                Pass::Product { .. } => None,
            })
            .collect()
    }

    const T: f64 = 16.0 * 1024.0;
    const H: f64 = 768.0;
    const F: f64 = 3072.0;
    const S: f64 = 16.0 * 12.0 * 1024.0 * 1024.0;

    #[test]
    fn each_framework_takes_its_path_by_default_and_a_plan_can_say_eager() {
        let kernels = |job: &str| gpt2(job, "standard").kernels;
        assert_eq!(kernels("framework = megatron"), Kernels::Fused);
        assert_eq!(kernels("framework = planc"), Kernels::Fused);
        // The train.py planc writes runs transformers uncompiled; a script of the job's own
        // is taken to be fused.
        assert_eq!(kernels("framework = torch"), Kernels::Eager);
        assert_eq!(kernels("framework = deepspeed"), Kernels::Eager);
        assert_eq!(
            kernels("framework = torch, entrypoint = \"mine.py\""),
            Kernels::Fused
        );
        assert_eq!(kernels("framework = torchtitan"), Kernels::Eager);
        assert_eq!(
            kernels("framework = megatron, kernels = eager"),
            Kernels::Eager
        );
        assert_eq!(
            kernels("framework = torch, kernels = fused"),
            Kernels::Fused
        );
        assert_eq!(
            path(&gpt2("framework = megatron, kernels = eager", "standard")),
            Some(Path::Local)
        );
        assert_eq!(
            path(&gpt2("framework = torch", "standard")),
            Some(Path::Autocast)
        );
        assert_eq!(
            path(&gpt2("framework = deepspeed", "standard")),
            Some(Path::Module)
        );
        assert_eq!(path(&gpt2("framework = megatron", "standard")), None);
    }

    #[test]
    fn a_fused_layer_is_left_as_it_was() {
        let fused = gpt2("framework = torch, kernels = fused", "standard");
        assert!(layer_forward(&fused)
            .iter()
            .all(|o| !matches!(o.kind, OpKind::Unfused(_))));
        let eager = gpt2("framework = torch", "standard");
        let ops = layer_forward(&eager);
        // The products are the fused path's; around them, the unfused kernels.
        let gemms = |ops: &[Op]| -> Vec<Op> {
            ops.iter()
                .filter(|o| matches!(o.kind, OpKind::Gemm { .. }))
                .cloned()
                .collect()
        };
        assert_eq!(gemms(&ops), gemms(&layer_forward(&fused)));
        assert_eq!(
            names(&ops),
            [
                "input_norm",
                "qkv_input_cast",
                "qkv_proj",
                "attention_core",
                "attention_heads",
                "attention_out_proj",
                "attention_residual",
                "mlp_norm",
                "mlp_input_cast",
                "mlp_up_proj",
                "mlp_activation",
                "mlp_down_input_cast",
                "mlp_down_proj",
                "mlp_residual",
                "weight_casts"
            ]
        );
    }

    #[test]
    fn transformers_gpt2_under_autocast_pass_by_pass() {
        let ops = layer_forward(&gpt2("framework = torch", "standard"));
        let x = T * H;
        // LayerNorm in fp32 (autocast's fp32 list), its fp32 output cast for c_attn.
        let ln = op(&ops, OpId::InputNorm);
        assert_eq!(per(&ln.forward, x), [8.0]);
        assert_eq!(per(&ln.backward, x), [12.0, 8.0]);
        let cast = op(&ops, OpId::QkvInputCast);
        assert_eq!(per(&cast.forward, x), [6.0]);
        assert_eq!(per(&cast.backward, x), [6.0]);
        // NewGELU: eight kernels, 70 bytes an element forward, 112 backward.
        let gelu = op(&ops, OpId::MlpActivation);
        assert_eq!(gelu.forward.len(), 9);
        assert_eq!(Passes::bytes(&gelu.forward) / (T * F), 70.0);
        assert_eq!(Passes::bytes(&gelu.backward) / (T * F), 112.0);
        // The core: the scale in bf16, the fp32 mask's sum, the fp32 softmax, the cast back;
        // backward the same in reverse with the softmax's two reads.
        let core = op(&ops, OpId::AttentionCore);
        assert_eq!(per(&core.forward, S), [4.0, 6.0, 8.0, 6.0]);
        assert_eq!(per(&core.backward, S), [6.0, 12.0, 6.0, 4.0]);
        // Two products forward, four backward, over the whole square.
        let flops = 2.0 * S * 64.0;
        assert_eq!(Passes::flops(&core.forward), 2.0 * flops);
        assert_eq!(Passes::flops(&core.backward), 4.0 * flops);
        // The residual stream is fp32: bf16 + fp32 in, the gradient cast back and the two
        // gradients of the stream summed.
        let res = op(&ops, OpId::AttentionResidual);
        assert_eq!(per(&res.forward, x), [10.0]);
        assert_eq!(per(&res.backward, x), [6.0, 12.0]);
        // The weights cast to bf16 a forward and their gradients back: 6 bytes a weight
        // each way, a kernel a tensor (four weights, four biases).
        let w = op(&ops, OpId::WeightCasts);
        assert_eq!(w.forward.len(), 8);
        assert_eq!(Passes::bytes(&w.forward), 6.0 * (12.0 * H * H + 9.0 * H));
    }

    #[test]
    fn deepspeeds_bf16_module_runs_the_same_kernels_in_16_bits() {
        let ops = layer_forward(&gpt2("framework = deepspeed", "standard"));
        let x = T * H;
        assert_eq!(per(&op(&ops, OpId::InputNorm).forward, x), [4.0]);
        assert!(ops.iter().all(|o| !matches!(
            o.id,
            OpId::QkvInputCast | OpId::MlpInputCast | OpId::MlpDownInputCast | OpId::WeightCasts
        )));
        let gelu = op(&ops, OpId::MlpActivation);
        assert_eq!(Passes::bytes(&gelu.forward) / (T * F), 36.0);
        assert_eq!(Passes::bytes(&gelu.backward) / (T * F), 56.0);
        let core = op(&ops, OpId::AttentionCore);
        assert_eq!(per(&core.forward, S), [4.0, 4.0, 4.0]);
        assert_eq!(per(&core.backward, S), [6.0, 4.0]);
    }

    #[test]
    fn megatrons_local_path_upcasts_masks_in_place_and_adds_the_bias_apart() {
        let p = gpt2("framework = megatron, kernels = eager", "standard");
        let ops = layer_forward(&p);
        let core = op(&ops, OpId::AttentionCore);
        // float(), masked_fill_, softmax, bfloat16(); backward the cast's, the softmax's,
        // the mask's, float()'s.
        assert_eq!(per(&core.forward, S), [6.0, 8.0, 8.0, 6.0]);
        assert_eq!(per(&core.backward, S), [6.0, 12.0, 8.0, 6.0]);
        assert_eq!(per(&op(&ops, OpId::QkvBias).forward, T * 3.0 * H), [4.0]);
        // torch's LayerNorm in bf16: its backward reads the gradient and the input twice.
        let ln = op(&ops, OpId::InputNorm);
        assert_eq!(per(&ln.backward, T * H), [6.0, 4.0]);
        // The bias-GELU stays one compiled kernel, the residual one bias-dropout-add.
        assert!(matches!(
            ops.iter()
                .find(|o| o.id == OpId::MlpActivation)
                .unwrap()
                .kind,
            OpKind::Activation { .. }
        ));
        assert_eq!(
            per(&op(&ops, OpId::AttentionResidual).forward, T * H),
            [6.0]
        );
        // Without apex the weight gradients are added into the fp32 buffer by a pass.
        assert!(!accumulates_in_products(&p));
        assert!(accumulates_in_products(&gpt2(
            "framework = megatron",
            "standard"
        )));
    }

    #[test]
    fn megatrons_local_path_has_no_flash_attention() {
        let c = check_source(
            "t.tp",
            "cluster c { nodes = 1, gpus_per_node = 1, gpu = H200_SXM_141GB }
             model m { preset = \"gpt2-124m\" }
             train { global_batch = 16, precision = bf16, attention = flash }
             parallel { tp = 1, pp = 1, dp = 1, micro_batch = 16 }
             job j { framework = megatron, kernels = eager }",
        );
        assert!(
            c.diagnostics.iter().any(|d| d.code == "P0327"),
            "{:#?}",
            c.diagnostics
        );
        let p = c.plan.unwrap();
        assert_eq!(p.train.attention, crate::plan::Attention::Standard);
        assert!(layer_forward(&p)
            .iter()
            .any(|o| o.id == OpId::AttentionCore));
    }

    #[test]
    fn the_loss_upcasts_the_logits_and_megatron_keeps_its_own() {
        let logits = T * 50304.0;
        let torch = head_forward(&gpt2("framework = torch", "standard"));
        let ce = op(&torch, OpId::CrossEntropy);
        assert_eq!(per(&ce.forward, logits), [6.0, 8.0]);
        assert_eq!(per(&ce.backward, logits), [4.0, 12.0, 6.0]);
        assert!(torch.iter().any(|o| o.id == OpId::LogitsWeightCast));
        let megatron = head_forward(&gpt2("framework = megatron, kernels = eager", "standard"));
        assert!(matches!(
            megatron
                .iter()
                .find(|o| o.id == OpId::CrossEntropy)
                .unwrap()
                .kind,
            OpKind::Memory { .. }
        ));
    }

    /// Which kernels PyTorch runs on a path slower than a copy, and that they are priced at
    /// its measured share.
    fn slow(passes: &[Pass]) -> Vec<Option<SlowPath>> {
        passes
            .iter()
            .filter_map(|p| match p {
                Pass::Memory { .. } => Some(None),
                Pass::Slow { path, .. } => Some(Some(*path)),
                Pass::Product { .. } => None,
            })
            .collect()
    }

    #[test]
    fn casts_up_broadcasts_and_the_vocabularys_softmax_run_slower_than_a_copy() {
        use crate::cost::time::Device;
        let (w, r, v) = (
            Some(SlowPath::Widening),
            Some(SlowPath::RowBroadcast),
            Some(SlowPath::VectorBroadcast),
        );
        // The loss: the logits' `float()` widens, `log_softmax` runs over vocabulary rows
        // both ways; `nll_loss`'s zeroed gradient and the cast back down are copies.
        let torch = head_forward(&gpt2("framework = torch", "standard"));
        let ce = op(&torch, OpId::CrossEntropy);
        assert_eq!(slow(&ce.forward), [w, Some(SlowPath::SoftmaxRows)]);
        assert_eq!(
            slow(&ce.backward),
            [None, Some(SlowPath::SoftmaxRowsBackward), None]
        );
        // Llama's composite RMSNorm in its module's bf16 (FSDP2): the upcast, the row's
        // rsqrt and the weight broadcast; pow, mean and the cast down are copies.
        let plan = checked(
            "cluster c { nodes = 1, gpus_per_node = 1, gpu = H200_SXM_141GB }
             model m { preset = \"llama3.2-1b\" }
             train { global_batch = 4, precision = bf16, optimizer = adamw, attention = flash }
             parallel { tp = 1, pp = 1, dp = 1, micro_batch = 4, zero = 3 }
             job j { framework = torch }",
        );
        assert_eq!(path(&plan), Some(Path::Module));
        let ops = layer_forward(&plan);
        let norm = op(&ops, OpId::InputNorm);
        assert_eq!(slow(&norm.forward), [w, None, None, r, None, v]);
        // Priced at the measured share of the copy rate.
        let dev = Device {
            gpu: &plan.cluster.groups[0].gpu,
            precision: plan.train.precision,
        };
        let up = norm.forward[0];
        let Pass::Slow { bytes, path } = up else {
            panic!("{up:?}")
        };
        assert_eq!(seconds(&dev, &up), dev.memory(bytes) / path.share());
        assert!(seconds(&dev, &up) > 1.9 * dev.memory(bytes));
        // GPT-2's standard core: under autocast the fp32 mask widens the scores as it is
        // added over the heads, the fp32 softmax runs at a copy's rate and its backward does
        // not; in DeepSpeed's bf16 module the mask and the softmax stay 16-bit, both slower.
        let (hb, whb) = (
            Some(SlowPath::HeadsBroadcast),
            Some(SlowPath::WideningHeadsBroadcast),
        );
        let ddp = layer_forward(&gpt2("framework = torch", "standard"));
        let core = op(&ddp, OpId::AttentionCore);
        assert_eq!(slow(&core.forward), [None, whb, None, None]);
        let s32b = Some(SlowPath::Softmax32Backward);
        assert_eq!(slow(&core.backward), [w, s32b, None, None]);
        let ds = layer_forward(&gpt2("framework = deepspeed", "standard"));
        let core = op(&ds, OpId::AttentionCore);
        assert_eq!(slow(&core.forward), [None, hb, Some(SlowPath::Softmax16)]);
        let s16b = Some(SlowPath::Softmax16Backward);
        assert_eq!(slow(&core.backward), [s16b, None]);
        // Rope's cos and sin broadcast over the heads, its halves concatenated.
        let rope = op(&ops, OpId::Rope);
        assert_eq!(
            slow(&rope.forward),
            [v, None, Some(SlowPath::Concat), v, None]
        );
    }

    #[test]
    fn the_unfused_layer_costs_more_than_the_fused_and_its_backward_is_its_own() {
        use crate::cost::time::{placement, time_ops, Device};
        for job in [
            "framework = torch",
            "framework = deepspeed",
            "framework = megatron, kernels = eager",
        ] {
            let eager = gpt2(job, "standard");
            let fused = Plan {
                kernels: Kernels::Fused,
                ..eager.clone()
            };
            let g = &eager.cluster.groups[0];
            let dev = Device {
                gpu: &g.gpu,
                precision: eager.train.precision,
            };
            let pl = placement(&eager, g);
            let step = |p: &Plan| {
                let ops = layer_forward(p);
                let f = time_ops(&ops, &dev, &pl);
                let b = crate::cost::time::layer_backward(p, &ops, f, &dev, &pl);
                (f.compute, b.compute)
            };
            let (ef, eb) = step(&eager);
            let (ff, fb) = step(&fused);
            assert!(ef > ff && eb > fb, "{job}: {ef} {eb} vs {ff} {fb}");
        }
        // An unfused operation's backward is priced from its own kernels.
        let p = gpt2("framework = torch", "standard");
        let g = &p.cluster.groups[0];
        let dev = Device {
            gpu: &g.gpu,
            precision: p.train.precision,
        };
        let pl = placement(&p, g);
        let gelu: Vec<Op> = layer_forward(&p)
            .into_iter()
            .filter(|o| o.id == OpId::MlpActivation)
            .collect();
        let OpKind::Unfused(ref passes) = gelu[0].kind else {
            unreachable!()
        };
        let f = time_ops(&gelu, &dev, &pl);
        let b = crate::cost::time::layer_backward(&p, &gelu, f, &dev, &pl);
        assert!((f.compute - total(&dev, &passes.forward)).abs() < 1e-12);
        assert!((b.compute - total(&dev, &passes.backward)).abs() < 1e-12);
    }

    /// A small GPT-2-shaped model on one H200 under `train.py`, `micro_batch` sequences of
    /// 128 tokens a micro-batch, with `dropout`.
    fn small(micro_batch: u64, seq: u64, dropout: f64) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H200_SXM_141GB }}
             model m {{ layers = 2, hidden = 64, heads = 2, vocab = 1000, seq_len = {seq}, position = learned, norm = layernorm, mlp = gelu, bias = true }}
             train {{ global_batch = {micro_batch}, precision = bf16, optimizer = adamw, attention = standard, dropout = {dropout} }}
             parallel {{ tp = 1, pp = 1, dp = 1, micro_batch = {micro_batch}, recompute = none }}
             job j {{ framework = torch }}"
        );
        checked(&text)
    }

    #[test]
    fn a_pass_of_short_kernels_waits_for_the_host_and_a_long_one_does_not() {
        use crate::cost::method::{is_weight_product, trains_weight};
        use crate::cost::time::{pieces, time_ops};
        let layer = |p: &Plan| {
            let (dev, pl) = crate::cost::first_group(p);
            let ops = layer_forward(p);
            let gpu = time_ops(&ops, &dev, &pl).total();
            let pc = pieces(p, &dev, &pl);
            let bwd = backward_dispatches(&ops, |o| is_weight_product(o) && trains_weight(p, o));
            (
                pc.layer_fwd.total(),
                pc.layer_bwd.total(),
                gpu,
                forward_dispatches(&ops),
                bwd,
            )
        };
        // One sequence of 128 tokens through a 64-wide layer: every kernel is shorter than
        // its dispatch, so the pass is the host's.
        let (fwd, bwd, gpu, n_fwd, n_bwd) = layer(&small(1, 128, 0.0));
        assert!(gpu < fwd, "{gpu} {fwd}");
        assert!(
            (fwd - n_fwd * HOST_FORWARD_OP_S).abs() < 1e-12,
            "{fwd} {n_fwd}"
        );
        assert!(
            (bwd - n_bwd * HOST_BACKWARD_OP_S).abs() < 1e-12,
            "{bwd} {n_bwd}"
        );
        // Dropout adds the attention's mask, a kernel each way: one dispatch more each.
        let (fwd_d, bwd_d, _, n_fwd_d, n_bwd_d) = layer(&small(1, 128, 0.1));
        assert_eq!((n_fwd_d, n_bwd_d), (n_fwd + 1.0, n_bwd + 1.0));
        assert!((fwd_d - fwd - HOST_FORWARD_OP_S).abs() < 1e-12);
        assert!((bwd_d - bwd - HOST_BACKWARD_OP_S).abs() < 1e-12);
        // 64 sequences of 2048: the kernels outrun the host, the GPU's price stands.
        let (fwd, _, gpu, n_fwd, _) = layer(&small(64, 2048, 0.0));
        assert!(n_fwd * HOST_FORWARD_OP_S < gpu);
        assert_eq!(fwd, gpu);
    }

    #[test]
    fn the_optimizers_passes_follow_the_framework() {
        use crate::cost::time::Device;
        let p = gpt2("framework = torch", "standard");
        let dev = Device {
            gpu: &p.cluster.groups[0].gpu,
            precision: p.train.precision,
        };
        let n = 124e6;
        // foreach AdamW (80 bytes a parameter), clip_grad_norm_ (12), DDP's bucket copies (16).
        let torch = optimizer_seconds(&p, Path::Autocast, n, n, 148.0, &dev);
        assert!((torch - dev.memory(108.0 * n)).abs() < 1e-12);
        // Megatron-LM's fallbacks: a host round trip and four launches a tensor on top.
        let m = gpt2("framework = megatron, kernels = eager", "standard");
        let local = optimizer_seconds(&m, Path::Local, n, n, 148.0, &dev);
        let bytes = dev.memory(n * (80.0 + 4.0 + 16.0 + 14.0) + n * 4.0);
        assert!((local - bytes - 148.0 * (HOST_ROUND_TRIP_S + 4.0 * LAUNCH_S)).abs() < 1e-12);
        assert_eq!(parameter_tensors(&m, 12.0, true, true), 148.0);
        // DeepSpeed's bf16 optimizer: its passes over the fp32 state, and a round trip and
        // 17 launches a tensor (the profiled step's per-tensor kernels).
        let d = gpt2("framework = deepspeed", "standard");
        let ds = optimizer_seconds(&d, Path::Module, n, n, 148.0, &dev);
        let bytes = dev.memory(n * (6.0 + 12.0 + 2.0 + 4.0 + 8.0 + 28.0 + 6.0 + 4.0));
        assert!((ds - bytes - 148.0 * (HOST_ROUND_TRIP_S + 17.0 * LAUNCH_S)).abs() < 1e-12);
    }
}
