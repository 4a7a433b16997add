//! The memory plan allocated: the compiler lists the stage's buffers with their sizes, in
//! order (`planc_compiler::cost::buffers::stage_buffers`); `Engine::new` allocates that list
//! as it stands through `device::cuda::Alloc` and puts each buffer in its typed handle
//! (`Handles`), computing no size of its own, then uploads what starts with values (the
//! weight-decay mask, rope's tables). A `Tally` walks the same allocation without a GPU,
//! which the tests hold to the list the report sums.

use super::{ActSet, Engine, LayerActs, MemoryPlan, Res, Scratch, Shape};
use crate::device::blas::Blas;
use crate::device::cuda::{Alloc, Buf, Gpu};
use crate::device::dist;
use crate::device::fp8::{self, Fp8, Fp8Bufs};
use crate::device::gelu_products::GeluProducts;
use crate::error::RunError;
use crate::train::model::{self, Dims, Params};
use planc_compiler::cost::buffers::model::zeroed_gradients;
use planc_compiler::cost::buffers::{stage_buffers, Bytes, Kept, Name, SetBuf, StageBuffers, Work};
use planc_compiler::plan::{planc_fuses_gelu, Attention, Position};
use std::collections::BTreeMap;

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
        let gelu = if planc_fuses_gelu(shape.precision, shape.dims.mlp, shape.dims.hidden as u64) {
            GeluProducts::new(&gpu, shape.precision, h.blas_workspace)?
        } else {
            None
        };
        let mut eng = Engine {
            attn: None,
            fp8,
            fp8_linears,
            gelu,
            gelu_kernels: false,
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
            zeroed: Vec::new(),
            written: Default::default(),
        };
        // Once, whole: alignment gaps and padding are never written, and stay zero.
        eng.gpu.zero(eng.grad)?;
        eng.zeroed = zeroed_each_step(&eng.shape, eng.grad);
        if eng.shape.attention == Attention::Flash {
            eng.plan_cudnn_attention()?;
        }
        if let Some(g) = eng.gelu.take() {
            eng.gelu = eng.gelu_products_run(g);
            eng.gelu_kernels = eng.gelu.is_none();
        }
        Ok(eng)
    }
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

/// The gradient ranges a step zeroes (`cost::buffers::model::zeroed_gradients`, whose bytes
/// the cost model prices): all but the large linear weights, whose first gradient of the
/// step overwrites them.
fn zeroed_each_step(shape: &Shape, grad: Buf) -> Vec<Buf> {
    zeroed_gradients(&shape.dims, &shape.stage, grad.bytes / 4)
        .into_iter()
        .map(|(lo, hi)| Buf {
            ptr: grad.ptr + 4 * lo as u64,
            bytes: 4 * (hi - lo),
        })
        .collect()
}

impl Engine {
    /// Whether cuBLASLt has the GELU epilogue products (`device::gelu_products`) for this
    /// stage's MLP, tried on its first layer and activation set; their plans are made here.
    /// Where it does not (an MLP width it takes no algorithm for), the activation kernels
    /// run instead, forward and backward alike.
    fn gelu_products_run(&self, g: GeluProducts) -> Option<GeluProducts> {
        let l = self.shape.stage.chunks.iter().flatten().next().copied()?;
        let a = self.sets.first().and_then(|s| s.layers.first())?;
        let w = |part| self.wx_of(model::Tensor::Layer(l, part));
        let (c, f) = self.linear_shape(model::LayerTensor::FcW);
        g.runs(
            (a.act, a.h),
            (
                a.ln2,
                w(model::LayerTensor::FcW),
                w(model::LayerTensor::FcB),
            ),
            (self.s.dh, self.s.dres, w(model::LayerTensor::Fc2W)),
            (self.rows(), c, f),
        )
        .then_some(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cuda::Tally;
    use crate::device::dist::World;
    use crate::train::model::Stage;
    use crate::train::model::{LayerTensor, Tensor};
    use crate::train::program::Program;
    use crate::train::ranks::Ranks;
    use crate::train::step::{engine_shape, refuse};
    use planc_compiler::cost::buffers::{self, Buffer, OVERWRITTEN_AT_LEAST};
    use planc_compiler::cost::memory::{in_flight_sets, PLANC_RECEIVES_AHEAD};
    use planc_compiler::plan::{Framework, Plan, Recompute, Schedule};

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

    /// A step zeroes every gradient but the large linear weights' (which its first weight
    /// gradients overwrite), in ranges that are sorted, disjoint and inside the buffer, and
    /// the cost model prices the same share (`zeroed_gradient_share`), on every stage.
    #[test]
    fn a_step_zeroes_all_but_the_overwritten_linear_weights_and_is_priced_so() {
        let stages = runnable().into_iter().flat_map(|(name, plan)| {
            (0..plan.parallel.pp).map(move |s| (name.clone(), plan.clone(), s))
        });
        for (name, plan, stage) in stages {
            let name = format!("{name}, stage {stage}");
            let shape = buffers::Shape::of_plan(&plan, stage as usize, 1).expect("a shape");
            let params = Params::of_stage(&shape.dims, &shape.stage);
            let padded = shape.padded(params.total);
            let grad = Buf {
                ptr: 1 << 40,
                bytes: 4 * padded,
            };
            let ranges = zeroed_each_step(&shape, grad);
            let mut at = grad.ptr;
            for r in &ranges {
                assert!(r.ptr >= at && r.bytes > 0, "{name}: sorted and disjoint");
                at = r.ptr + r.bytes as u64;
            }
            assert!(
                at <= grad.ptr + grad.bytes as u64,
                "{name}: inside the buffer"
            );
            let zeroed = |i: usize| {
                let a = grad.ptr + 4 * i as u64;
                ranges
                    .iter()
                    .any(|r| a >= r.ptr && a < r.ptr + r.bytes as u64)
            };
            let linear: Vec<LayerTensor> = shape.dims.linear_shapes().iter().map(|s| s.0).collect();
            for p in &params.list {
                let big_linear = matches!(p.tensor, Tensor::Layer(_, part) if linear.contains(&part))
                    && p.numel() >= OVERWRITTEN_AT_LEAST;
                for i in [p.offset, p.offset + p.numel() - 1] {
                    assert_eq!(zeroed(i), !big_linear, "{name}: {}", p.name);
                }
            }
            let bytes: usize = ranges.iter().map(|r| r.bytes).sum();
            let share = buffers::zeroed_gradient_share(&plan, stage);
            let ours = bytes as f64 / (4 * padded) as f64;
            assert!(
                (ours - share).abs() < 0.01,
                "{name}: {ours} zeroed, {share} priced"
            );
        }
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
