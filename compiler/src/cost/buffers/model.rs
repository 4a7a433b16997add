//! The model as planc's runtime holds it: its dimensions (`Dims`, checked for what the
//! runtime's kernels run), a pipeline rank's layers (`Stage`), and the parameter table's
//! order and shapes (`visit`), which the runtime's flat buffers follow (`planc_runtime`'s
//! `train::model::Params`) and the memory plan sizes.
//!
//! Internally every linear weight is `[out, in]` row-major (as `torch.nn.Linear`), and the
//! query, key and value projections are one fused tensor (`qkv_w`, rows q then k then v) so
//! one product computes all three; a SwiGLU layer's gate and up projections are likewise one
//! `fc_w` (gate rows first).

use std::fmt;

use crate::plan::{Mlp, Norm, Parallel, Plan, Position};

/// What the runtime needs of the plan's `model` block, checked for what it can run.
#[derive(Clone, Debug, PartialEq)]
pub struct Dims {
    pub layers: usize,
    /// `C`
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// `F`
    pub ffn: usize,
    pub vocab: usize,
    /// `S`, the trained sequence length (and the size of the learned position table).
    pub seq_len: usize,
    pub mlp: Mlp,
    pub norm: Norm,
    pub position: Position,
    /// Biases on the linear layers (norm biases follow `norm`: layernorm has them).
    pub bias: bool,
    pub tied: bool,
    pub norm_eps: f32,
    pub rope_theta: f32,
}

impl Dims {
    /// The model of `plan`, with `layers` overriding the layer count (`--layers K`).
    pub fn of(plan: &Plan, layers: Option<usize>) -> Result<Dims, String> {
        let m = &plan.model;
        if m.experts > 1 {
            return Err(format!(
                "`planc run` trains dense models; this one has {} experts",
                m.experts
            ));
        }
        if m.heads == 0 || !m.hidden.is_multiple_of(m.heads) {
            return Err(format!(
                "hidden ({}) must be a multiple of heads ({})",
                m.hidden, m.heads
            ));
        }
        if m.kv_heads == 0 || !m.heads.is_multiple_of(m.kv_heads) {
            return Err(format!(
                "heads ({}) must be a multiple of kv_heads ({})",
                m.heads, m.kv_heads
            ));
        }
        if m.head_dim * m.heads != m.hidden {
            // The engine's kernels and checkpoints take the attention's width to be the
            // hidden size; the check's P0331 says the same before any rank starts.
            return Err(format!(
                "`planc run` trains heads of hidden / heads = {} wide; this model's are \
                 head_dim = {} (heads × head_dim = {} ≠ hidden = {})",
                m.hidden / m.heads,
                m.head_dim,
                m.heads * m.head_dim,
                m.hidden
            ));
        }
        let head_dim = m.head_dim as usize;
        if m.position == Position::Rope && !head_dim.is_multiple_of(2) {
            return Err(format!("rope needs an even head dimension, not {head_dim}"));
        }
        Ok(Dims {
            layers: layers.unwrap_or(m.layers as usize),
            hidden: m.hidden as usize,
            heads: m.heads as usize,
            kv_heads: m.kv_heads as usize,
            head_dim,
            ffn: m.ffn_hidden as usize,
            vocab: m.vocab as usize,
            seq_len: m.seq_len as usize,
            mlp: m.mlp,
            norm: m.norm,
            position: m.position,
            bias: m.bias,
            tied: m.tied_embeddings,
            norm_eps: 1e-5,
            rope_theta: m.rope_theta as f32,
        })
    }

    /// Rows of the fused query/key/value projection: `(heads + 2·kv_heads)·head_dim`.
    pub fn qkv_rows(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }

    /// Width of the attention output, `heads·head_dim` (= hidden).
    pub fn attn_width(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Rows of the first MLP product: `F`, or `2F` for SwiGLU (gate then up).
    pub fn fc_rows(&self) -> usize {
        match self.mlp {
            Mlp::Gelu => self.ffn,
            Mlp::Swiglu => 2 * self.ffn,
        }
    }

    pub fn norm_has_bias(&self) -> bool {
        self.norm == Norm::Layernorm
    }

    /// One tensor-parallel rank's share of the model, as Megatron-LM splits it: its
    /// `heads / tp` query heads and `kv_heads / tp` key/value heads (column-parallel q, k,
    /// v, row-parallel projection), `ffn / tp` of the MLP (column- then row-parallel) and
    /// `vocab / tp` rows of the embedding and the output layer (vocabulary-parallel).
    pub fn tensor_parallel(&self, tp: usize) -> Result<Dims, String> {
        if tp <= 1 {
            return Ok(self.clone());
        }
        for (what, n) in [
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("ffn_hidden", self.ffn),
            ("vocab", self.vocab),
        ] {
            if !n.is_multiple_of(tp) {
                return Err(format!(
                    "tensor parallelism splits {what} ({n}) over tp = {tp} ranks: it must be a \
                     multiple of {tp}"
                ));
            }
        }
        Ok(Dims {
            heads: self.heads / tp,
            kv_heads: self.kv_heads / tp,
            ffn: self.ffn / tp,
            vocab: self.vocab / tp,
            ..self.clone()
        })
    }

    /// A layer's linear weights on a rank of these dimensions: (name, inputs, outputs).
    pub fn linear_shapes(&self) -> [(LayerTensor, usize, usize); 4] {
        [
            (LayerTensor::QkvW, self.hidden, self.qkv_rows()),
            (LayerTensor::ProjW, self.attn_width(), self.hidden),
            (LayerTensor::FcW, self.hidden, self.fc_rows()),
            (LayerTensor::Fc2W, self.ffn, self.hidden),
        ]
    }
}

/// What one pipeline rank holds: the transformer layers of each of its model chunks (by
/// global index, in execution order), and whether it holds the first virtual stage (the
/// embedding) and the last (final norm, output layer, loss). One GPU holds everything.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub chunks: Vec<Vec<usize>>,
    pub first: bool,
    pub last: bool,
}

impl Stage {
    pub fn whole(layers: usize) -> Stage {
        Stage {
            chunks: vec![(0..layers).collect()],
            first: true,
            last: true,
        }
    }

    /// Pipeline rank `rank` of `p` over `layers` layers, as Megatron-LM assigns them:
    /// virtual stage v = chunk·pp + rank takes the next `chunk_layers` layers in v's order
    /// (the plan's one split function, uneven end stages included).
    pub fn of(p: &Parallel, layers: usize, rank: usize) -> Stage {
        let (pp, vpp) = (p.pp.max(1) as usize, p.vpp.max(1) as usize);
        let count =
            |v: usize| p.chunk_layers(layers as u64, (v % pp) as u64, (v / pp) as u64) as usize;
        let mut chunks = Vec::new();
        for c in 0..vpp {
            let v = c * pp + rank;
            let start: usize = (0..v).map(count).sum();
            chunks.push((start..start + count(v)).collect());
        }
        Stage {
            chunks,
            first: rank == 0,
            last: rank == pp - 1,
        }
    }

    /// Whether this rank holds a copy of the tied embedding that the first stage owns (the
    /// output layer of the last stage): its gradient is summed with the first stage's, and
    /// the gradient norm and checkpoints count the first stage's only.
    pub fn holds_tied_copy(&self, d: &Dims) -> bool {
        d.tied && self.last && !self.first
    }

    /// Every layer this rank holds, chunk after chunk.
    pub fn layers(&self) -> impl Iterator<Item = usize> + '_ {
        self.chunks.iter().flatten().copied()
    }

    /// Layers of its longest chunk (what an activation set is sized for).
    pub fn longest_chunk(&self) -> usize {
        self.chunks.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// A tensor of the parameter table, by its place in the model: how the runtime's passes
/// find their weights (no name is built or parsed for a lookup).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tensor {
    Wte,
    Wpe,
    Layer(usize, LayerTensor),
    LnfW,
    LnfB,
    LmHead,
}

/// A transformer layer's tensors, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayerTensor {
    Ln1W,
    Ln1B,
    QkvW,
    QkvB,
    ProjW,
    ProjB,
    Ln2W,
    Ln2B,
    FcW,
    FcB,
    Fc2W,
    Fc2B,
}

impl LayerTensor {
    /// The part of the runtime's internal name after `h.{l}.`.
    pub fn name(self) -> &'static str {
        match self {
            LayerTensor::Ln1W => "ln1_w",
            LayerTensor::Ln1B => "ln1_b",
            LayerTensor::QkvW => "qkv_w",
            LayerTensor::QkvB => "qkv_b",
            LayerTensor::ProjW => "proj_w",
            LayerTensor::ProjB => "proj_b",
            LayerTensor::Ln2W => "ln2_w",
            LayerTensor::Ln2B => "ln2_b",
            LayerTensor::FcW => "fc_w",
            LayerTensor::FcB => "fc_b",
            LayerTensor::Fc2W => "fc2_w",
            LayerTensor::Fc2B => "fc2_b",
        }
    }
}

/// The runtime's internal name: `wte`, `wpe`, `lnf_w`, `lnf_b`, `lm_head`, or `h.{l}.{part}`.
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tensor::Wte => f.write_str("wte"),
            Tensor::Wpe => f.write_str("wpe"),
            Tensor::Layer(l, t) => write!(f, "h.{l}.{}", t.name()),
            Tensor::LnfW => f.write_str("lnf_w"),
            Tensor::LnfB => f.write_str("lnf_b"),
            Tensor::LmHead => f.write_str("lm_head"),
        }
    }
}

/// A tensor's initial values: normal(0, std), or a constant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Normal(f32),
    Const(f32),
}

/// Every tensor starts on a block of this many elements (the optimizer's decay mask is one
/// flag a block): 256-byte aligned in fp32, 128-byte aligned in bf16.
pub const ALIGN: usize = 64;

/// Elements a tensor of `numel` takes in the flat buffers (its own, rounded up to [`ALIGN`]).
pub fn aligned(numel: usize) -> usize {
    numel.div_ceil(ALIGN) * ALIGN
}

/// The tensors of one pipeline rank (all of them for `Stage::whole`), in storage order:
/// `f(tensor, shape, init)` for each.
pub fn visit(d: &Dims, stage: &Stage, mut f: impl FnMut(Tensor, &[usize], Init)) {
    use LayerTensor as T;
    let std = 0.02f32;
    let resid = std / (2.0 * d.layers.max(1) as f32).sqrt();
    let (c, ffn) = (d.hidden, d.ffn);
    let (normal, one, zero) = (Init::Normal(std), Init::Const(1.0), Init::Const(0.0));
    if stage.first || (stage.last && d.tied) {
        f(Tensor::Wte, &[d.vocab, c], normal);
    }
    if stage.first && d.position == Position::Learned {
        f(Tensor::Wpe, &[d.seq_len, c], normal);
    }
    let (norm_bias, bias) = (d.norm_has_bias(), d.bias);
    for l in stage.layers() {
        let mut t = |part: T, shape: &[usize], init: Init, present: bool| {
            if present {
                f(Tensor::Layer(l, part), shape, init);
            }
        };
        t(T::Ln1W, &[c], one, true);
        t(T::Ln1B, &[c], zero, norm_bias);
        t(T::QkvW, &[d.qkv_rows(), c], normal, true);
        t(T::QkvB, &[d.qkv_rows()], zero, bias);
        t(T::ProjW, &[c, d.attn_width()], Init::Normal(resid), true);
        t(T::ProjB, &[c], zero, bias);
        t(T::Ln2W, &[c], one, true);
        t(T::Ln2B, &[c], zero, norm_bias);
        t(T::FcW, &[d.fc_rows(), c], normal, true);
        t(T::FcB, &[d.fc_rows()], zero, bias);
        t(T::Fc2W, &[c, ffn], Init::Normal(resid), true);
        t(T::Fc2B, &[c], zero, bias);
    }
    if stage.last {
        f(Tensor::LnfW, &[c], one);
        if norm_bias {
            f(Tensor::LnfB, &[c], zero);
        }
        if !d.tied {
            f(Tensor::LmHead, &[d.vocab, c], normal);
        }
    }
}

/// The smallest layer linear weight whose gradient `planc run` does not zero before a step:
/// the step's first gradient of it overwrites it (a cuBLAS product with beta 0), while a
/// smaller one is zeroed with its neighbours in one memset (1 Mi elements: its memset costs
/// less than a launch of its own).
pub const OVERWRITTEN_AT_LEAST: usize = 1 << 20;

/// The element ranges `[lo, hi)` of a stage's flat gradient buffer of `len` elements that a
/// step zeroes before its passes: everything but the layers' linear weights of at least
/// [`OVERWRITTEN_AT_LEAST`] elements (alignment gaps and padding included), sorted and
/// disjoint. The runtime zeroes them and the cost model prices their bytes.
pub fn zeroed_gradients(d: &Dims, stage: &Stage, len: usize) -> Vec<(usize, usize)> {
    let linear: Vec<LayerTensor> = d.linear_shapes().iter().map(|s| s.0).collect();
    let mut out = Vec::new();
    let (mut offset, mut at) = (0, 0);
    visit(d, stage, |t, shape, _| {
        let numel: usize = shape.iter().product();
        let overwritten = matches!(t, Tensor::Layer(_, part) if linear.contains(&part))
            && numel >= OVERWRITTEN_AT_LEAST;
        if overwritten {
            if offset > at {
                out.push((at, offset));
            }
            at = offset + numel;
        }
        offset += aligned(numel);
    });
    if len > at {
        out.push((at, len));
    }
    out
}

/// The table's length in the flat buffers (every tensor [`aligned`]) and its tensors.
pub fn table_size(d: &Dims, stage: &Stage) -> (usize, usize) {
    let (mut total, mut tensors) = (0, 0);
    visit(d, stage, |_, shape, _| {
        total += aligned(shape.iter().product());
        tensors += 1;
    });
    (total, tensors)
}
