//! The trained model's parameter table: every tensor the runtime keeps, by planc's internal
//! name, shape and place in the one flat fp32 buffer of master weights, its seeded
//! initialisation, and a tensor-parallel rank's share of the whole model (`TpMap`).
//!
//! The dimensions (`Dims`), a pipeline rank's layers (`Stage`) and the table's order and
//! shapes come from the compiler (`planc_compiler::cost::buffers::model`), which sizes the
//! memory plan from the same table. Checkpoints translate to Hugging Face names and layouts
//! (`checkpoint.rs`); nothing else outside this file depends on the order of the table.

use planc_compiler::cost::buffers::model::{aligned, visit};
pub use planc_compiler::cost::buffers::model::{Dims, Init, LayerTensor, Stage, Tensor, ALIGN};
use planc_compiler::plan::Mlp;

/// One tensor of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// The tensor's place in the model: what the passes look it up by.
    pub tensor: Tensor,
    /// Internal name (the tensor's `Display`): `wte`, `wpe`, `lnf_w`, `lnf_b`, `lm_head`, or
    /// `h.{l}.{part}` with part one of `ln1_w ln1_b qkv_w qkv_b proj_w proj_b ln2_w ln2_b
    /// fc_w fc_b fc2_w fc2_b`: what checkpoints translate to Hugging Face names.
    pub name: String,
    pub shape: Vec<usize>,
    /// Offset in elements into the flat buffers (weights, gradients, optimizer moments).
    pub offset: usize,
    /// Weight decay applies to 2-D tensors only.
    pub decay: bool,
    /// Initial values: normal(0, std), or a constant.
    pub init: Init,
}

impl Param {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The whole table, in storage order. Offsets are rounded up to 64 elements so every
/// tensor starts 256-byte aligned in fp32 and 128-byte aligned in bf16.
#[derive(Clone, Debug)]
pub struct Params {
    pub list: Vec<Param>,
    pub total: usize,
    /// Tensor → position in `list`: how the passes find their weights.
    by_tensor: std::collections::HashMap<Tensor, usize>,
}

impl Params {
    pub fn new(d: &Dims) -> Params {
        Params::of_stage(d, &Stage::whole(d.layers))
    }

    /// The tensors of one pipeline rank (all of them for `Stage::whole`), named as in the
    /// whole model.
    pub fn of_stage(d: &Dims, stage: &Stage) -> Params {
        let mut list = Vec::new();
        let mut total = 0usize;
        visit(d, stage, |tensor, shape, init| {
            let p = Param {
                tensor,
                name: tensor.to_string(),
                shape: shape.to_vec(),
                offset: total,
                decay: shape.len() == 2,
                init,
            };
            total += aligned(p.numel());
            list.push(p);
        });
        let by_tensor = list
            .iter()
            .enumerate()
            .map(|(i, p)| (p.tensor, i))
            .collect();
        Params {
            list,
            total,
            by_tensor,
        }
    }

    /// The entry named `name` (a checkpoint's or a test's lookup, off the hot path: the
    /// passes go by [`Self::of`]).
    pub fn get(&self, name: &str) -> Option<&Param> {
        self.list.iter().find(|p| p.name == name)
    }

    /// The table's entry of `t`, if this rank holds it.
    pub fn of(&self, t: Tensor) -> Option<&Param> {
        self.by_tensor.get(&t).map(|&i| &self.list[i])
    }

    /// The flat-buffer range `[lo, hi)` of layer `l`'s tensors (a layer's tensors are
    /// contiguous, so its gradients can be reduced as one bucket).
    pub fn layer_range(&self, l: usize) -> (usize, usize) {
        let of_layer = |p: &&Param| matches!(p.tensor, Tensor::Layer(x, _) if x == l);
        let lo = self
            .list
            .iter()
            .find(of_layer)
            .map(|p| p.offset)
            .unwrap_or(0);
        let hi = self
            .list
            .iter()
            .find(|p| p.offset > lo && !of_layer(p))
            .map(|p| p.offset)
            .unwrap_or(self.total);
        (lo, hi)
    }

    /// Parameters as a model counts them (without alignment padding).
    pub fn count(&self) -> usize {
        self.list.iter().map(Param::numel).sum()
    }

    /// The initial weights, drawn in table order from one generator seeded by `seed`, as
    /// if on one GPU, so every layout of a plan starts from the same values.
    ///
    /// The generator is counter-based (SplitMix64): the n-th draw is a function of n, so
    /// each tensor's values are computed from their place in the sequence, on every core,
    /// and equal what drawing them one after another gives.
    pub fn init(&self, seed: u64) -> Vec<f32> {
        use rayon::prelude::*;
        let mut w = vec![0f32; self.total];
        for (p, first) in self.list.iter().zip(self.draws_before()) {
            let dst = &mut w[p.offset..p.offset + p.numel()];
            dst.par_chunks_mut(DRAW_CHUNK)
                .enumerate()
                .for_each(|(c, part)| {
                    draw(p.init, first + (c * DRAW_CHUNK) as u64, part, seed);
                });
        }
        w
    }

    /// For each tensor, how many normal values the tensors before it draw (two generator
    /// draws each): where its own values start in the sequence.
    fn draws_before(&self) -> Vec<u64> {
        let mut first = 0u64;
        self.list
            .iter()
            .map(|p| {
                let at = first;
                if matches!(p.init, Init::Normal(_)) {
                    first += p.numel() as u64;
                }
                at
            })
            .collect()
    }
}

/// Values a core draws at a time.
const DRAW_CHUNK: usize = 1 << 16;

/// A tensor's initial values into `dst`, whose first element is normal value `first` of the
/// sequence (a constant tensor draws none).
fn draw(init: Init, first: u64, dst: &mut [f32], seed: u64) {
    match init {
        Init::Const(v) => dst.fill(v),
        Init::Normal(std) => {
            for (i, x) in dst.iter_mut().enumerate() {
                *x = Rng::normal_at(seed, first + i as u64) * std;
            }
        }
    }
}

/// Whether a tensor is split across tensor-parallel ranks; the others (norms, the
/// row-parallel layers' biases, learned positions) are whole on every rank.
pub fn tp_split(t: Tensor) -> bool {
    use LayerTensor as L;
    match t {
        Tensor::Wte | Tensor::LmHead => true,
        Tensor::Layer(_, part) => matches!(
            part,
            L::QkvW | L::QkvB | L::FcW | L::FcB | L::ProjW | L::Fc2W
        ),
        Tensor::Wpe | Tensor::LnfW | Tensor::LnfB => false,
    }
}

/// Whether a whole (not split) tensor's gradient is a partial sum on each tensor-parallel
/// rank under sequence parallelism: the norms and the row-parallel biases see only the
/// rank's share of the tokens. (Learned positions are added after the embedding's
/// reduction and their gradient taken from every token, so it is whole.)
pub fn sp_partial(t: Tensor) -> bool {
    !tp_split(t) && t != Tensor::Wpe
}

/// Where one tensor-parallel rank's tensors sit in the whole model's flat buffer: runs of
/// `(local offset, whole offset, length)` covering the rank's table exactly once. Loading,
/// initialising and saving go through it, so every layout of a plan starts from, and
/// writes, the one-GPU model.
#[derive(Clone, Debug)]
pub struct TpMap {
    pub runs: Vec<(usize, usize, usize)>,
    pub local_total: usize,
    pub whole_total: usize,
}

impl TpMap {
    /// Tensor-parallel rank `rank`'s share of pipeline stage `stage`.
    pub fn of_stage(whole: &Dims, tp: usize, rank: usize, stage: &Stage) -> Result<TpMap, String> {
        let local = whole.tensor_parallel(tp)?;
        let (wp, lp) = (Params::new(whole), Params::of_stage(&local, stage));
        let mut runs = Vec::new();
        for p in &lp.list {
            let q = wp
                .of(p.tensor)
                .ok_or_else(|| format!("{} is not in the whole model", p.name))?;
            let (lo, wo) = (p.offset, q.offset);
            // Row blocks of a [rows, cols] tensor: (whole first row, rows).
            let cols = if p.shape.len() == 2 { p.shape[1] } else { 1 };
            let mut rows = |blocks: &[(usize, usize)]| {
                let mut at = lo;
                for &(first, n) in blocks {
                    runs.push((at, wo + first * cols, n * cols));
                    at += n * cols;
                }
            };
            let dd = whole.head_dim;
            use LayerTensor as L;
            match p.tensor {
                Tensor::Layer(_, L::QkvW | L::QkvB) => {
                    let (hl, gl) = (local.heads * dd, local.kv_heads * dd);
                    let (h, g) = (whole.heads * dd, whole.kv_heads * dd);
                    rows(&[
                        (rank * hl, hl),
                        (h + rank * gl, gl),
                        (h + g + rank * gl, gl),
                    ]);
                }
                Tensor::Layer(_, L::FcW | L::FcB) => {
                    let fl = local.ffn;
                    match whole.mlp {
                        Mlp::Gelu => rows(&[(rank * fl, fl)]),
                        Mlp::Swiglu => rows(&[(rank * fl, fl), (whole.ffn + rank * fl, fl)]),
                    }
                }
                Tensor::Wte | Tensor::LmHead => rows(&[(rank * local.vocab, local.vocab)]),
                Tensor::Layer(_, L::ProjW | L::Fc2W) => {
                    // [C, in]: each row's share of the input columns.
                    let (il, iw) = (p.shape[1], q.shape[1]);
                    for r in 0..p.shape[0] {
                        runs.push((lo + r * il, wo + r * iw + rank * il, il));
                    }
                }
                _ => runs.push((lo, wo, p.numel())),
            }
        }
        Ok(TpMap {
            runs,
            local_total: lp.total,
            whole_total: wp.total,
        })
    }

    /// This rank's share of a whole-model buffer.
    pub fn take(&self, whole: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; self.local_total];
        for &(l, w, n) in &self.runs {
            out[l..l + n].copy_from_slice(&whole[w..w + n]);
        }
        out
    }

    /// This rank's share of the initial weights (`whole.init(seed)`, then `take`), drawn
    /// without drawing the rest: each value from its place in the generator's sequence.
    /// A rank of a large model would otherwise hold and draw the whole model.
    pub fn init_share(&self, whole: &Params, seed: u64) -> Vec<f32> {
        use rayon::prelude::*;
        let firsts = whole.draws_before();
        let mut out = vec![0f32; self.local_total];
        let mut pieces: Vec<(&mut [f32], usize)> = Vec::new();
        let mut rest: &mut [f32] = &mut out;
        let mut at = 0;
        let mut runs = self.runs.clone();
        runs.sort_unstable();
        for (l, w, n) in runs {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(l - at);
            let (run, tail) = tail.split_at_mut(n);
            for (c, part) in run.chunks_mut(DRAW_CHUNK).enumerate() {
                pieces.push((part, w + c * DRAW_CHUNK));
            }
            rest = tail;
            at = l + n;
        }
        pieces.into_par_iter().for_each(|(part, w)| {
            // A run is a block of rows of one tensor.
            let i = whole.list.partition_point(|p| p.offset <= w) - 1;
            let p = &whole.list[i];
            debug_assert!(
                w + part.len() <= p.offset + p.numel(),
                "{} overruns",
                p.name
            );
            draw(p.init, firsts[i] + (w - p.offset) as u64, part, seed);
        });
        out
    }

    /// Writes this rank's share into a whole-model buffer.
    pub fn put(&self, local: &[f32], whole: &mut [f32]) {
        for &(l, w, n) in &self.runs {
            whole[w..w + n].copy_from_slice(&local[l..l + n]);
        }
    }
}

/// A small deterministic generator (splitmix64 with Box-Muller): the initialisation must
/// not depend on a crate's version.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// Uniform in (0, 1].
    pub fn uniform(&mut self) -> f64 {
        unit(self.next_u64())
    }

    pub fn normal(&mut self) -> f32 {
        let (u1, u2) = (self.uniform(), self.uniform());
        box_muller(u1, u2)
    }

    /// The `n`-th (from 0) value `normal` returns from `Rng::new(seed)`, without drawing
    /// the ones before it.
    pub fn normal_at(seed: u64, n: u64) -> f32 {
        let state = Rng::new(seed).0;
        let draw = |k: u64| mix(state.wrapping_add(GAMMA.wrapping_mul(k)));
        box_muller(unit(draw(2 * n + 1)), unit(draw(2 * n + 2)))
    }
}

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(x: u64) -> f64 {
    ((x >> 11) + 1) as f64 / (1u64 << 53) as f64
}

fn box_muller(u1: f64, u2: f64) -> f32 {
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use planc_compiler::check::check_source;

    fn dims(model: &str) -> Dims {
        let plan = check_source(
            "t.tp",
            &format!(
                "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }}
                 model m {{ {model} }}
                 train {{ global_batch = 8, precision = bf16, optimizer = adamw }}
                 parallel {{ tp = 1, pp = 1, dp = 1, micro_batch = 8 }}"
            ),
        )
        .plan
        .expect("a valid plan");
        Dims::of(&plan, None).unwrap()
    }

    #[test]
    fn the_table_counts_the_published_parameters() {
        // GPT-2 small with the padded vocabulary: 124.5 M (tied head).
        let g = Params::new(&dims("preset = \"gpt2-124m\""));
        assert_eq!(g.count(), 124_475_904);
        // Llama 3.2 1B: 1.236 B with tied embeddings.
        let l = Params::new(&dims("preset = \"llama3.2-1b\", seq_len = 2048"));
        assert_eq!(l.count(), 1_235_814_400);
    }

    #[test]
    fn layers_are_contiguous_buckets_between_embeddings_and_head() {
        let p = Params::new(&dims("preset = \"gpt2-124m\""));
        let ranges: Vec<_> = (0..12).map(|l| p.layer_range(l)).collect();
        assert!(ranges[0].0 > 0, "the embeddings come first");
        for w in ranges.windows(2) {
            assert_eq!(w[0].1, w[1].0);
        }
        for q in &p.list {
            let inside = ranges
                .iter()
                .any(|&(lo, hi)| q.offset >= lo && q.offset < hi);
            assert_eq!(inside, q.name.starts_with("h."), "{}", q.name);
        }
    }

    #[test]
    fn tensor_parallel_shares_tile_the_whole_model_exactly_once() {
        for model in [
            "preset = \"gpt2-124m\", layers = 2",
            "preset = \"llama3.2-1b\", layers = 2, seq_len = 64",
            "layers = 2, hidden = 64, heads = 8, kv_heads = 2, vocab = 256, seq_len = 32, \
             mlp = swiglu, norm = rmsnorm, position = rope, bias = true, \
             tied_embeddings = false",
        ] {
            let d = dims(model);
            let whole = Params::new(&d);
            let w: Vec<f32> = (0..whole.total).map(|i| i as f32).collect();
            for tp in [1, 2] {
                let mut seen = vec![0u32; whole.total];
                let mut back = vec![-1f32; whole.total];
                for r in 0..tp {
                    let m = TpMap::of_stage(&d, tp, r, &Stage::whole(d.layers)).unwrap();
                    let local = m.take(&w);
                    assert_eq!(local.len(), m.local_total);
                    m.put(&local, &mut back);
                    for &(_, o, n) in &m.runs {
                        for x in &mut seen[o..o + n] {
                            *x += 1;
                        }
                    }
                }
                for p in &whole.list {
                    let split = tp_split(p.tensor);
                    for i in p.offset..p.offset + p.numel() {
                        // Split tensors: each element on one rank; whole ones on every rank.
                        let want = if split { 1 } else { tp as u32 };
                        assert_eq!(seen[i], want, "{model}: {} element {i} at tp {tp}", p.name);
                        assert_eq!(back[i], w[i]);
                    }
                }
            }
        }
    }

    #[test]
    fn a_ranks_query_rows_are_its_heads_and_its_down_projection_its_columns() {
        let d = dims("layers = 1, hidden = 64, heads = 8, kv_heads = 2, vocab = 256, seq_len = 32");
        let whole = Params::new(&d);
        let w: Vec<f32> = (0..whole.total).map(|i| i as f32).collect();
        let m = TpMap::of_stage(&d, 2, 1, &Stage::whole(d.layers)).unwrap();
        let local = m.take(&w);
        let lp = Params::new(&d.tensor_parallel(2).unwrap());
        let (wq, lq) = (
            whole.get("h.0.qkv_w").unwrap(),
            lp.get("h.0.qkv_w").unwrap(),
        );
        // Rank 1's first query row is head 4's first row; its first key row is key head 1's.
        assert_eq!(local[lq.offset], w[wq.offset + 4 * 8 * 64]);
        assert_eq!(
            local[lq.offset + 4 * 8 * 64],
            w[wq.offset + (8 + 1) * 8 * 64]
        );
        let (wf, lf) = (
            whole.get("h.0.fc2_w").unwrap(),
            lp.get("h.0.fc2_w").unwrap(),
        );
        assert_eq!(lf.shape, vec![64, 128]);
        assert_eq!(local[lf.offset + 128 + 3], w[wf.offset + 256 + 128 + 3]);
        assert!(d.tensor_parallel(3).unwrap_err().contains("multiple of 3"));
    }

    fn parallel(gpus: u64, text: &str) -> planc_compiler::plan::Parallel {
        check_source(
            "t.tp",
            &format!(
                "cluster c {{ nodes = 1, gpus_per_node = {gpus}, gpu = H100_SXM_80GB }}
                 model m {{ layers = 8, hidden = 64, heads = 4, vocab = 256, seq_len = 32 }}
                 train {{ global_batch = 16, precision = bf16, optimizer = adamw }}
                 parallel {{ tp = 1, dp = 1, micro_batch = 1, {text} }}"
            ),
        )
        .plan
        .unwrap_or_else(|| panic!("a valid plan: {text}"))
        .parallel
    }

    #[test]
    fn pipeline_stages_take_megatrons_layers_in_virtual_stage_order() {
        let p = parallel(2, "pp = 2, schedule = interleaved, vpp = 2");
        let s0 = Stage::of(&p, 8, 0);
        let s1 = Stage::of(&p, 8, 1);
        assert_eq!(s0.chunks, vec![vec![0, 1], vec![4, 5]]);
        assert_eq!(s1.chunks, vec![vec![2, 3], vec![6, 7]]);
        assert!(s0.first && !s0.last && s1.last && !s1.first);
        let p = parallel(4, "pp = 4");
        let all: Vec<usize> = (0..4)
            .flat_map(|r| Stage::of(&p, 8, r).layers().collect::<Vec<_>>())
            .collect();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
        assert_eq!(
            Stage::of(&p, 8, 0),
            Stage {
                chunks: vec![vec![0, 1]],
                first: true,
                last: false
            }
        );
    }

    #[test]
    fn a_stage_holds_its_layers_and_its_end_of_the_model() {
        let d = dims("layers = 4, hidden = 64, heads = 4, vocab = 256, seq_len = 32");
        let p = parallel(2, "pp = 2");
        let (first, last) = (Stage::of(&p, 4, 0), Stage::of(&p, 4, 1));
        let names = |s: &Stage| -> Vec<String> {
            Params::of_stage(&d, s)
                .list
                .iter()
                .map(|p| p.name.clone())
                .collect()
        };
        let (f, l) = (names(&first), names(&last));
        assert!(
            f.contains(&"wte".into())
                && f.contains(&"wpe".into())
                && f.contains(&"h.1.fc_w".into())
        );
        assert!(!f
            .iter()
            .any(|n| n.starts_with("h.2.") || n.starts_with("lnf")));
        // Tied: the last stage keeps a copy of the embedding for its output layer.
        assert!(
            l.contains(&"wte".into()) && l.contains(&"lnf_w".into()) && !l.contains(&"wpe".into())
        );
        assert!(last.holds_tied_copy(&d) && !first.holds_tied_copy(&d));
        // Every stage's share comes from (and goes back to) the whole model by name.
        let whole = Params::new(&d);
        let w: Vec<f32> = (0..whole.total).map(|i| i as f32).collect();
        for s in [&first, &last] {
            let m = TpMap::of_stage(&d, 1, 0, s).unwrap();
            let local = m.take(&w);
            let lp = Params::of_stage(&d, s);
            let (a, b) = (
                lp.get("h.0.qkv_w").or(lp.get("h.3.qkv_w")).unwrap(),
                whole
                    .get(if s.first { "h.0.qkv_w" } else { "h.3.qkv_w" })
                    .unwrap(),
            );
            assert_eq!(local[a.offset + 5], w[b.offset + 5]);
        }
    }

    #[test]
    fn initialisation_drawn_in_parallel_equals_the_sequential_draws() {
        // Every checkpoint and every numerics run since the first drew the weights one after
        // another; the parallel draw must give the same values, bit for bit.
        let p = Params::new(&dims(
            "layers = 3, hidden = 192, heads = 4, vocab = 5000, seq_len = 64",
        ));
        let mut w = vec![0f32; p.total];
        let mut rng = Rng::new(11);
        for t in &p.list {
            let dst = &mut w[t.offset..t.offset + t.numel()];
            match t.init {
                Init::Const(v) => dst.fill(v),
                Init::Normal(std) => dst.iter_mut().for_each(|x| *x = rng.normal() * std),
            }
        }
        assert!(p.total > 1 << 17, "more than one chunk of a tensor");
        assert!(w
            .iter()
            .zip(p.init(11))
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    #[test]
    fn a_ranks_share_of_the_initial_weights_is_drawn_as_the_whole_models() {
        // vocab 3000 × 64 makes each tensor-parallel half of the embedding a run of more than
        // one drawing chunk.
        let d =
            dims("layers = 4, hidden = 64, heads = 8, kv_heads = 2, vocab = 3000, seq_len = 32");
        let whole = Params::new(&d);
        let w = whole.init(5);
        let p = parallel(2, "pp = 2");
        for s in [Stage::of(&p, 4, 0), Stage::of(&p, 4, 1)] {
            for r in 0..2 {
                let m = TpMap::of_stage(&d, 2, r, &s).unwrap();
                let share = m.init_share(&whole, 5);
                assert!(share
                    .iter()
                    .zip(m.take(&w))
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }

    #[test]
    fn initialisation_depends_on_the_seed_only() {
        let p = Params::new(&dims(
            "layers = 2, hidden = 64, heads = 4, vocab = 256, seq_len = 32",
        ));
        assert_eq!(p.init(7), p.init(7));
        assert_ne!(p.init(7), p.init(8));
        let w = p.init(7);
        let ln = p.get("h.0.ln1_w").unwrap();
        assert!(w[ln.offset..ln.offset + ln.numel()]
            .iter()
            .all(|&x| x == 1.0));
    }
}
