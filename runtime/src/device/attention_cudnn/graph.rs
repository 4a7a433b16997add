//! The operation graphs of cuDNN's fused attention as plain data: tensors (unique ids,
//! dimensions, strides, types, which are virtual) and operations, built without touching
//! cuDNN, so their construction is checked on any machine and printed when cuDNN refuses
//! one.
//!
//! The graphs are those cuDNN's own frontend builds for `sdpa` and `sdpa_backward`
//! (NVIDIA/cudnn-frontend, `CompositeSDPANode` and `CompositeSDPABackwardNode`), causal
//! with the mask top-left aligned, no bias, no dropout, the softmax statistics (each row's
//! logsumexp) written by forward and read by backward. cuDNN recognises these patterns and
//! runs its fused flash-attention kernels on them; anything else it would run op by op or
//! refuse. Every tensor is 4-D: [batch, heads, rows, columns].

use std::fmt;

/// Element types the graphs use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    F32,
    Bf16,
    F16,
    I32,
    Bool,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
            Dtype::I32 => "i32",
            Dtype::Bool => "bool",
        }
    }
}

/// Pointwise modes (cuDNN's `cudnnPointwiseMode_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pw {
    Mul,
    Sub,
    Add,
    Div,
    Exp,
    Log,
    Identity,
    /// Each element's index along an axis.
    GenIndex(i64),
    CmpGe,
    /// y = t ? x : b.
    BinarySelect,
}

/// Reductions to the output's shape (cuDNN's `cudnnReduceTensorOp_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Red {
    Add,
    Max,
}

pub type Uid = i64;

/// The unique ids of the tensors a caller supplies (the variant pack); virtual tensors,
/// which never exist in memory, are numbered from [`FIRST_VIRTUAL`] on.
pub mod uid {
    use super::Uid;
    pub const Q: Uid = 1;
    pub const K: Uid = 2;
    pub const V: Uid = 3;
    pub const O: Uid = 4;
    /// Each row's logsumexp of the scaled, masked scores (fp32 [b, h, t, 1]).
    pub const STATS: Uid = 5;
    pub const D_O: Uid = 6;
    pub const DQ: Uid = 7;
    pub const DK: Uid = 8;
    pub const DV: Uid = 9;
    /// 1/√d, passed by value.
    pub const SCALE: Uid = 10;
    /// What masked scores become, passed by value.
    pub const NEG_INF: Uid = 11;
    /// 1.0 by value (backward: Σ dO·O scaled by the absent dropout's keep probability).
    pub const ONE: Uid = 12;
    /// Backward's D_i = Σ dO·O, fp32 [b, h, t, 1]: planc's `Grads::dd`.
    pub const SOFTMAX_SUM: Uid = 13;
    /// fp32 accumulator of dq (the non-deterministic backward only), in the workspace.
    pub const DQ_ACCUM: Uid = 14;
}

pub const FIRST_VIRTUAL: Uid = 100;

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub uid: Uid,
    pub name: &'static str,
    pub dims: [i64; 4],
    pub strides: [i64; 4],
    pub dtype: Dtype,
    pub is_virtual: bool,
    /// A host scalar passed by value at execution (dims and strides all 1).
    pub by_value: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// c = a·b over the last two dimensions, batched over the first two (b's heads may
    /// divide a's: grouped-query attention).
    Matmul { a: Uid, b: Uid, c: Uid },
    /// y = mode(x, b, t) computed in `prec`; b and t broadcast to y.
    Pointwise {
        mode: Pw,
        prec: Dtype,
        x: Uid,
        b: Option<Uid>,
        t: Option<Uid>,
        y: Uid,
    },
    /// y = x reduced over the dimensions where y is 1 (or over a group of heads).
    Reduction { mode: Red, x: Uid, y: Uid },
    /// The same elements viewed with other dimensions and strides (a transpose here).
    Reshape { x: Uid, y: Uid },
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub tensors: Vec<Tensor>,
    pub ops: Vec<Op>,
}

/// The attention's shape: batch, query heads, key/value heads, sequence, head size, and
/// the storage type of q, k, v, o and their gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub b: i64,
    pub h: i64,
    pub g: i64,
    pub t: i64,
    pub d: i64,
    pub x: Dtype,
}

impl Shape {
    /// Query heads a key/value head serves.
    pub fn rep(&self) -> i64 {
        self.h / self.g
    }
}

/// Strides in elements, in [batch, head, row, column] order, of the tensors the graphs
/// read and write: q, o, dO and dq have `h` heads, k, v, dk and dv `g`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    pub q: [i64; 4],
    pub k: [i64; 4],
    pub v: [i64; 4],
    pub o: [i64; 4],
    pub d_o: [i64; 4],
    pub dq: [i64; 4],
    pub dk: [i64; 4],
    pub dv: [i64; 4],
}

impl Layout {
    /// planc's buffers: q, k and v [b, h, t, d] with each key/value head stored once per
    /// query head it serves (the qkv split repeats them), read by grouped descriptors
    /// that skip the copies; o and dO in the merged layout [b, t, h·d] the projection
    /// after attention reads; dq, dk and dv at `grads` = (batch, head, row) strides (the
    /// engine's `Grads`), a key/value head's gradient at its first query head's place.
    pub fn planc(s: &Shape, grads: (i64, i64, i64)) -> Layout {
        let (h, t, d, rep) = (s.h, s.t, s.d, s.rep());
        let heads = [h * t * d, t * d, d, 1];
        let grouped = [h * t * d, rep * t * d, d, 1];
        let merged = [t * h * d, d, h * d, 1];
        let (bs, hs, rs) = grads;
        Layout {
            q: heads,
            k: grouped,
            v: grouped,
            o: merged,
            d_o: merged,
            dq: [bs, hs, rs, 1],
            dk: [bs, hs * rep, rs, 1],
            dv: [bs, hs * rep, rs, 1],
        }
    }
}

/// Two spellings of the same graphs, which cuDNN should match alike: the one its frontend
/// builds today (`CompositeSDPANode`, NVIDIA/cudnn-frontend 1.x), and the one of its cuDNN
/// 8.9-era flash-attention samples (`f16_flash_mha_sample.cpp`): index generators writing
/// fp32 rather than int32, K's transpose back in the storage type rather than fp32, and
/// dO·O laid out as dO. A shape whose first spelling cuDNN refuses is tried in the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavor {
    Frontend,
    Sample,
}

impl Flavor {
    pub const ALL: [Flavor; 2] = [Flavor::Frontend, Flavor::Sample];
}

/// Swaps the last two dimensions: K read as Kᵀ.
fn transposed(x: [i64; 4]) -> [i64; 4] {
    [x[0], x[1], x[3], x[2]]
}

struct Builder {
    g: Graph,
    next: Uid,
    flavor: Flavor,
}

impl Builder {
    fn new(flavor: Flavor) -> Builder {
        Builder {
            g: Graph::default(),
            next: FIRST_VIRTUAL,
            flavor,
        }
    }

    fn tensor(&mut self, t: Tensor) -> Uid {
        let uid = t.uid;
        self.g.tensors.push(t);
        uid
    }

    fn real(
        &mut self,
        uid: Uid,
        name: &'static str,
        dims: [i64; 4],
        strides: [i64; 4],
        dtype: Dtype,
    ) -> Uid {
        self.tensor(Tensor {
            uid,
            name,
            dims,
            strides,
            dtype,
            is_virtual: false,
            by_value: false,
        })
    }

    fn scalar(&mut self, uid: Uid, name: &'static str) -> Uid {
        self.tensor(Tensor {
            uid,
            name,
            dims: [1; 4],
            strides: [1; 4],
            dtype: Dtype::F32,
            is_virtual: false,
            by_value: true,
        })
    }

    fn virt(&mut self, name: &'static str, dims: [i64; 4], strides: [i64; 4], dtype: Dtype) -> Uid {
        let uid = self.next;
        self.next += 1;
        self.tensor(Tensor {
            uid,
            name,
            dims,
            strides,
            dtype,
            is_virtual: true,
            by_value: false,
        })
    }

    fn get(&self, uid: Uid) -> &Tensor {
        self.g
            .tensors
            .iter()
            .find(|t| t.uid == uid)
            .expect("the builder only refers to tensors it made")
    }

    fn pointwise(&mut self, mode: Pw, prec: Dtype, ins: (Uid, Option<Uid>, Option<Uid>), y: Uid) {
        let (x, b, t) = ins;
        self.g.ops.push(Op::Pointwise {
            mode,
            prec,
            x,
            b,
            t,
            y,
        });
    }

    /// A pointwise op whose output is virtual, shaped like `x`.
    fn pw(&mut self, name: &'static str, mode: Pw, x: Uid, b: Option<Uid>, dtype: Dtype) -> Uid {
        let (dims, strides) = {
            let t = self.get(x);
            (t.dims, t.strides)
        };
        let y = self.virt(name, dims, strides, dtype);
        let prec = if mode == Pw::CmpGe {
            Dtype::Bool
        } else {
            Dtype::F32
        };
        self.pointwise(mode, prec, (x, b, None), y);
        y
    }

    fn matmul(&mut self, a: Uid, b: Uid, c: Uid) {
        self.g.ops.push(Op::Matmul { a, b, c });
    }

    fn reduction(&mut self, mode: Red, x: Uid, y: Uid) {
        self.g.ops.push(Op::Reduction { mode, x, y });
    }

    fn reshape(&mut self, x: Uid, y: Uid) {
        self.g.ops.push(Op::Reshape { x, y });
    }

    /// The causal mask, top-left aligned: a score stays where its row (query) index is at
    /// least its column (key) index and becomes `NEG_INF` elsewhere (the frontend's
    /// `causal_mask` as a composite diagonal band: two index generators, a comparison, a
    /// select).
    fn causal(&mut self, score: Uid, neg_inf: Uid) -> Uid {
        let index = match self.flavor {
            Flavor::Frontend => Dtype::I32,
            Flavor::Sample => Dtype::F32,
        };
        let row = self.pw("row index", Pw::GenIndex(2), score, None, index);
        let col = self.pw("column index", Pw::GenIndex(3), score, None, index);
        let keep = self.pw("row >= column", Pw::CmpGe, row, Some(col), Dtype::Bool);
        let (dims, strides) = {
            let t = self.get(score);
            (t.dims, t.strides)
        };
        let masked = self.virt("masked scores", dims, strides, Dtype::F32);
        self.pointwise(
            Pw::BinarySelect,
            Dtype::F32,
            (score, Some(neg_inf), Some(keep)),
            masked,
        );
        masked
    }
}

/// [b, h, t, t] row-major: the scores as the frontend lays out its virtual tensors.
fn scores(s: &Shape) -> ([i64; 4], [i64; 4]) {
    let (b, h, t) = (s.b, s.h, s.t);
    ([b, h, t, t], [h * t * t, t * t, t, 1])
}

/// [b, h, t, 1]: one fp32 value a row (the statistics, D_i, max, Σexp).
fn rows(s: &Shape) -> ([i64; 4], [i64; 4]) {
    let (b, h, t) = (s.b, s.h, s.t);
    ([b, h, t, 1], [h * t, t, 1, 1])
}

/// o = softmax(QKᵀ·scale, causal)·V and each row's logsumexp.
pub fn forward(s: &Shape, l: &Layout, flavor: Flavor) -> Graph {
    let (b, h, g, t, d) = (s.b, s.h, s.g, s.t, s.d);
    let mut f = Builder::new(flavor);
    let q = f.real(uid::Q, "Q", [b, h, t, d], l.q, s.x);
    let kt = f.real(uid::K, "K (as Kᵀ)", [b, g, d, t], transposed(l.k), s.x);
    let v = f.real(uid::V, "V", [b, g, t, d], l.v, s.x);
    let o = f.real(uid::O, "O", [b, h, t, d], l.o, s.x);
    let (rd, rs) = rows(s);
    let stats = f.real(uid::STATS, "stats (logsumexp)", rd, rs, Dtype::F32);
    let scale = f.scalar(uid::SCALE, "scale");
    let neg_inf = f.scalar(uid::NEG_INF, "-inf");

    let (sd, ss) = scores(s);
    let s1 = f.virt("QKᵀ", sd, ss, Dtype::F32);
    f.matmul(q, kt, s1);
    let s2 = f.pw("scaled scores", Pw::Mul, s1, Some(scale), Dtype::F32);
    let s3 = f.causal(s2, neg_inf);
    // The softmax as the frontend's composite: max, subtract, exp, sum, then the
    // statistics (max + log Σ) and the probabilities (exp / Σ).
    let max = f.virt("row max", rd, rs, Dtype::F32);
    f.reduction(Red::Max, s3, max);
    let s4 = f.pw("scores - max", Pw::Sub, s3, Some(max), Dtype::F32);
    let e = f.pw("exp", Pw::Exp, s4, None, Dtype::F32);
    let sum = f.virt("row sum of exp", rd, rs, Dtype::F32);
    f.reduction(Red::Add, e, sum);
    let log = f.pw("log sum", Pw::Log, sum, None, Dtype::F32);
    f.pointwise(Pw::Add, Dtype::F32, (max, Some(log), None), stats);
    // The probabilities in the storage type: the second product's input type.
    let p = f.virt("probabilities", sd, ss, s.x);
    f.pointwise(Pw::Div, Dtype::F32, (e, Some(sum), None), p);
    f.matmul(p, v, o);
    f.g
}

/// dq, dk, dv from q, k, v, o, dO and forward's statistics. `deterministic` builds the
/// graph without the fp32 dq accumulator, which on Hopper selects cuDNN's deterministic
/// backward (the frontend's `set_deterministic_algorithm`); with it, dq is accumulated
/// with atomics in an order that varies from run to run.
pub fn backward(s: &Shape, l: &Layout, deterministic: bool, flavor: Flavor) -> Graph {
    let (b, h, g, t, d) = (s.b, s.h, s.g, s.t, s.d);
    let mut f = Builder::new(flavor);
    let q = f.real(uid::Q, "Q", [b, h, t, d], l.q, s.x);
    let kt = f.real(uid::K, "K (as Kᵀ)", [b, g, d, t], transposed(l.k), s.x);
    let vt = f.real(uid::V, "V (as Vᵀ)", [b, g, d, t], transposed(l.v), s.x);
    let o = f.real(uid::O, "O", [b, h, t, d], l.o, s.x);
    let d_o = f.real(uid::D_O, "dO", [b, h, t, d], l.d_o, s.x);
    let (rd, rs) = rows(s);
    let stats = f.real(uid::STATS, "stats (logsumexp)", rd, rs, Dtype::F32);
    let dq = f.real(uid::DQ, "dQ", [b, h, t, d], l.dq, s.x);
    let dk = f.real(uid::DK, "dK", [b, g, t, d], l.dk, s.x);
    let dv = f.real(uid::DV, "dV", [b, g, t, d], l.dv, s.x);
    let scale = f.scalar(uid::SCALE, "scale");
    let neg_inf = f.scalar(uid::NEG_INF, "-inf");
    let one = f.scalar(uid::ONE, "one");
    let sum = f.real(uid::SOFTMAX_SUM, "D = Σ dO·O", rd, rs, Dtype::F32);

    // D_i = Σ_d dO·O (the frontend gives this virtual product strides of its own, kept
    // as it has them: cuDNN matches the pattern, not the layout of what never reaches
    // memory).
    let dod_strides = match flavor {
        Flavor::Frontend => [h * t * d, t * d, h * d, 1],
        Flavor::Sample => l.d_o,
    };
    let dod = f.virt("dO·O", [b, h, t, d], dod_strides, Dtype::F32);
    f.pointwise(Pw::Mul, Dtype::F32, (d_o, Some(o), None), dod);
    let red = f.virt("Σ dO·O", rd, rs, Dtype::F32);
    f.reduction(Red::Add, dod, red);
    f.pointwise(Pw::Mul, Dtype::F32, (red, Some(one), None), sum);

    // P = exp(QKᵀ·scale − stats), masked.
    let (sd, ss) = scores(s);
    let transposed_scores = [h * t * t, t * t, 1, t];
    let s1 = f.virt("QKᵀ", sd, ss, Dtype::F32);
    f.matmul(q, kt, s1);
    let s2 = f.pw("scaled scores", Pw::Mul, s1, Some(scale), Dtype::F32);
    let s3 = f.pw("scores - stats", Pw::Sub, s2, Some(stats), Dtype::F32);
    let s4 = f.causal(s3, neg_inf);
    let p = f.pw("probabilities", Pw::Exp, s4, None, Dtype::F32);

    // dV = Pᵀ·dO, summed over the query heads of a group.
    let pt = f.virt("Pᵀ", sd, transposed_scores, s.x);
    f.reshape(p, pt);
    group_product(&mut f, s, pt, d_o, dv, "dV (every query head)");

    // dS = P ∘ (dO·Vᵀ − D) · scale.
    let dp = f.virt("dO·Vᵀ", sd, ss, Dtype::F32);
    f.matmul(d_o, vt, dp);
    let ds1 = f.pw("dP - D", Pw::Sub, dp, Some(sum), Dtype::F32);
    let ds2 = f.pw("P∘(dP - D)", Pw::Mul, ds1, Some(p), Dtype::F32);
    let ds = f.pw("dS", Pw::Mul, ds2, Some(scale), Dtype::F32);

    // dK = dSᵀ·Q, summed over the query heads of a group.
    let dst = f.virt("dSᵀ", sd, transposed_scores, s.x);
    f.reshape(ds, dst);
    group_product(&mut f, s, dst, q, dk, "dK (every query head)");

    // dQ = dS·K.
    let k_type = match flavor {
        Flavor::Frontend => Dtype::F32,
        Flavor::Sample => s.x,
    };
    let k = f.virt("K", [b, g, t, d], l.k, k_type);
    f.reshape(kt, k);
    if deterministic {
        f.matmul(ds, k, dq);
    } else {
        let acc = f.real(
            uid::DQ_ACCUM,
            "dQ accumulator",
            [b, h, t, d],
            [h * t * d, t * d, d, 1],
            Dtype::F32,
        );
        f.matmul(ds, k, acc);
        f.pointwise(Pw::Identity, Dtype::F32, (acc, None, None), dq);
    }
    f.g
}

/// out = a·b for each query head; with grouped key/value heads, the product of every query
/// head first (virtual) and its sum over each group after.
fn group_product(f: &mut Builder, s: &Shape, a: Uid, b: Uid, out: Uid, name: &'static str) {
    if s.h == s.g {
        f.matmul(a, b, out);
        return;
    }
    let (h, t, d) = (s.h, s.t, s.d);
    let full = f.virt(name, [s.b, h, t, d], [h * t * d, t * d, d, 1], s.x);
    f.matmul(a, b, full);
    f.reduction(Red::Add, full, out);
}

impl Graph {
    pub fn tensor(&self, uid: Uid) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.uid == uid)
    }

    /// The tensors a caller supplies at execution, by unique id.
    pub fn supplied(&self) -> Vec<Uid> {
        self.tensors
            .iter()
            .filter(|t| !t.is_virtual)
            .map(|t| t.uid)
            .collect()
    }

    /// Structural checks cuDNN would otherwise answer with a bare BAD_PARAM: unique ids,
    /// every operand defined, products' and reductions' shapes, broadcasts, strides.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for t in &self.tensors {
            if !seen.insert(t.uid) {
                return Err(format!("uid {} is used twice", t.uid));
            }
            if t.dims.iter().any(|&x| x < 1) || t.strides.iter().any(|&x| x < 0) {
                return Err(format!(
                    "{} has dims {:?} strides {:?}",
                    t.name, t.dims, t.strides
                ));
            }
            if t.by_value && (t.dims != [1; 4] || t.is_virtual) {
                return Err(format!("scalar {} is not a [1,1,1,1] value", t.name));
            }
        }
        for op in &self.ops {
            self.check_op(op)
                .map_err(|e| format!("{}: {e}", self.describe_op(op)))?;
        }
        Ok(())
    }

    fn get(&self, uid: Uid) -> Result<&Tensor, String> {
        self.tensor(uid)
            .ok_or_else(|| format!("uid {uid} is not a tensor of the graph"))
    }

    fn check_op(&self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Matmul { a, b, c } => {
                let (a, b, c) = (self.get(a)?.dims, self.get(b)?.dims, self.get(c)?.dims);
                let ok = a[0] == c[0]
                    && b[0] == c[0]
                    && a[1] == c[1]
                    && c[1] % b[1] == 0
                    && a[2] == c[2]
                    && b[3] == c[3]
                    && a[3] == b[2];
                ok.then_some(())
                    .ok_or(format!("{a:?} · {b:?} is not {c:?}"))
            }
            Op::Pointwise {
                x, b, t, y, mode, ..
            } => {
                let yd = self.get(y)?.dims;
                for u in [Some(x), b, t].into_iter().flatten() {
                    let xd = self.get(u)?.dims;
                    if (0..4).any(|i| xd[i] != yd[i] && xd[i] != 1) {
                        return Err(format!("{xd:?} does not broadcast to {yd:?}"));
                    }
                }
                let want = match mode {
                    Pw::BinarySelect => (true, true),
                    Pw::Mul | Pw::Sub | Pw::Add | Pw::Div | Pw::CmpGe => (true, false),
                    _ => (false, false),
                };
                if (b.is_some(), t.is_some()) != want {
                    return Err(format!("{mode:?} takes {want:?} (b, t) operands"));
                }
                Ok(())
            }
            Op::Reduction { x, y, .. } => {
                let (xd, yd) = (self.get(x)?.dims, self.get(y)?.dims);
                let ok =
                    (0..4).all(|i| yd[i] == xd[i] || yd[i] == 1 || (i == 1 && xd[1] % yd[1] == 0));
                ok.then_some(())
                    .ok_or(format!("{xd:?} does not reduce to {yd:?}"))
            }
            Op::Reshape { x, y } => {
                let (xd, yd) = (self.get(x)?.dims, self.get(y)?.dims);
                let n = |d: [i64; 4]| d.iter().product::<i64>();
                (n(xd) == n(yd))
                    .then_some(())
                    .ok_or(format!("{xd:?} has not the elements of {yd:?}"))
            }
        }
    }

    fn name(&self, uid: Uid) -> String {
        self.tensor(uid)
            .map_or_else(|| format!("#{uid}?"), |t| format!("{}#{}", t.name, t.uid))
    }

    fn describe_op(&self, op: &Op) -> String {
        match *op {
            Op::Matmul { a, b, c } => format!(
                "matmul {} · {} → {}",
                self.name(a),
                self.name(b),
                self.name(c)
            ),
            Op::Pointwise {
                mode,
                prec,
                x,
                b,
                t,
                y,
            } => {
                let mut args = vec![self.name(x)];
                args.extend(b.map(|u| self.name(u)));
                args.extend(t.map(|u| self.name(u)));
                format!(
                    "pointwise {mode:?} ({}) in {} → {}",
                    args.join(", "),
                    prec.name(),
                    self.name(y)
                )
            }
            Op::Reduction { mode, x, y } => {
                format!("reduce {mode:?} {} → {}", self.name(x), self.name(y))
            }
            Op::Reshape { x, y } => format!("reshape {} → {}", self.name(x), self.name(y)),
        }
    }
}

/// The graph as cuDNN is given it: each tensor, then each operation in order.
impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.tensors {
            let kind = match (t.is_virtual, t.by_value) {
                (true, _) => "virtual",
                (_, true) => "by value",
                _ => "memory",
            };
            writeln!(
                f,
                "  tensor {:>3} {:<22} dims {:?} strides {:?} {} {kind}",
                t.uid,
                t.name,
                t.dims,
                t.strides,
                t.dtype.name()
            )?;
        }
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "  op {i:>2} {}", self.describe_op(op))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
