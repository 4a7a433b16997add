//! On a GPU with libcudnn 9: cuDNN's fused attention as planc plans it
//! (`device::attention_cudnn`) against PyTorch autograd in float64 (`gpu/autograd.py`'s
//! `sdpa` case): causal forward (output and logsumexp) and backward, multi-head and
//! grouped-query, head sizes 64 and 128 (and Llama-small's 32), bf16 and fp16, gradients
//! into separate head buffers and into the merged qkv gradient, the deterministic backward
//! checked bit for bit over two runs. `speed` (with PLANC_ATTENTION_SPEED=1) times it beside
//! planc's tensor-core kernels at the shape (4 × 4096, 32 heads of 128) and the
//! example models', in TFLOP/s (the causal half; backward as 2.5 × forward).
//!
//! Without a GPU, or without libcudnn, it prints SKIPPED and passes; with
//! PLANC_CUDNN_ATTENTION=require (what runtime/tests/gpu/attention_cudnn.sh sets) a
//! missing libcudnn fails it. Every refusal prints the graphs cuDNN was given.

mod common;

use common::autograd::{python_with_torch, Case};
use common::Rng;
use half::{bf16, f16};
use planc_compiler::plan::Precision;
use planc_runtime::device::attention::{self, Grads, Heads, Kernels};
use planc_runtime::device::attention_cudnn::graph::{self, Flavor, Layout, Shape};
use planc_runtime::device::attention_cudnn::{backend, dtype_of, Sdpa};
use planc_runtime::device::cuda::{Buf, Gpu};

/// One configuration to check.
#[derive(Clone, Copy, Debug)]
struct Trial {
    name: &'static str,
    b: usize,
    h: usize,
    g: usize,
    t: usize,
    d: usize,
    precision: Precision,
    /// dq, dk, dv into the merged qkv gradient (multi-head only), else [b, h, t, d] buffers.
    qkv: bool,
    deterministic: bool,
    /// cuDNN may refuse it (planc's kernels would run): reported, not failed.
    may_refuse: bool,
}

const fn trial(name: &'static str, (b, h, g, t, d): (usize, usize, usize, usize, usize)) -> Trial {
    Trial {
        name,
        b,
        h,
        g,
        t,
        d,
        precision: Precision::Bf16,
        qkv: false,
        deterministic: true,
        may_refuse: false,
    }
}

fn trials() -> Vec<Trial> {
    vec![
        trial("mha-d64", (2, 4, 4, 256, 64)),
        trial("mha-d128", (2, 4, 4, 256, 128)),
        Trial {
            qkv: true,
            ..trial("mha-d64-into-qkv", (2, 4, 4, 256, 64))
        },
        trial("gqa-d64", (2, 8, 2, 256, 64)),
        trial("gqa-d128", (2, 8, 4, 192, 128)),
        // Llama-small of numerics.sh: 8 heads of 32 sharing 4.
        trial("gqa-d32", (2, 8, 4, 256, 32)),
        Trial {
            precision: Precision::Fp16,
            ..trial("mha-d64-fp16", (2, 4, 4, 256, 64))
        },
        Trial {
            deterministic: false,
            ..trial("mha-d128-nondeterministic", (2, 4, 4, 256, 128))
        },
        Trial {
            may_refuse: true,
            ..trial("gqa-d64-t200", (2, 8, 2, 200, 64))
        },
    ]
}

fn shape_of(tr: &Trial) -> Shape {
    Shape {
        b: tr.b as i64,
        h: tr.h as i64,
        g: tr.g as i64,
        t: tr.t as i64,
        d: tr.d as i64,
        x: dtype_of(tr.precision).expect("16-bit trials"),
    }
}

/// Values rounded to the storage type: (the rounded values, their bits).
fn round(p: Precision, v: &[f32]) -> (Vec<f32>, Vec<u16>) {
    v.iter()
        .map(|&x| match p {
            Precision::Fp16 => {
                let h = f16::from_f32(x);
                (h.to_f32(), h.to_bits())
            }
            _ => {
                let h = bf16::from_f32(x);
                (h.to_f32(), h.to_bits())
            }
        })
        .unzip()
}

fn widen(p: Precision, bits: &[u16]) -> Vec<f32> {
    bits.iter()
        .map(|&x| match p {
            Precision::Fp16 => f16::from_bits(x).to_f32(),
            _ => bf16::from_bits(x).to_f32(),
        })
        .collect()
}

fn up16(gpu: &mut Gpu, bits: &[u16]) -> Buf {
    let b = gpu.alloc(bits.len() * 2).unwrap();
    gpu.upload(b, bits).unwrap();
    b
}

/// [b, g, t, d] → [b, h, t, d] as the grouped qkv split leaves a key/value head for
/// cuDNN: at its group's first query head, the other heads holding what was there before
/// (garbage here, 2.0, which a graph reading them would turn into wrong outputs).
fn group_heads(x: &[u16], tr: &Trial) -> Vec<u16> {
    let (rep, td) = (tr.h / tr.g, tr.t * tr.d);
    let mut out = vec![0x4000u16; tr.b * tr.h * td];
    for b in 0..tr.b {
        for g in 0..tr.g {
            let (src, dst) = ((b * tr.g + g) * td, (b * tr.h + g * rep) * td);
            out[dst..dst + td].copy_from_slice(&x[src..src + td]);
        }
    }
    out
}

/// [b, h, t, d] → [b, g, t, d]: each group's first query head, where cuDNN leaves the
/// group's gradient and the merge reads it.
fn first_heads(x: &[f32], tr: &Trial) -> Vec<f32> {
    let (rep, td) = (tr.h / tr.g, tr.t * tr.d);
    let mut out = Vec::with_capacity(tr.b * tr.g * td);
    for b in 0..tr.b {
        for g in 0..tr.g {
            let at = (b * tr.h + g * rep) * td;
            out.extend_from_slice(&x[at..at + td]);
        }
    }
    out
}

/// Part `part` (0 q, 1 k, 2 v) of the merged gradient [b, t, 3·h·d] as [b, h, t, d].
fn from_qkv(x: &[f32], tr: &Trial, part: usize) -> Vec<f32> {
    let w = tr.h * tr.d;
    let mut out = vec![0.0; tr.b * tr.h * tr.t * tr.d];
    for b in 0..tr.b {
        for h in 0..tr.h {
            for t in 0..tr.t {
                let src = (b * tr.t + t) * 3 * w + part * w + h * tr.d;
                let dst = ((b * tr.h + h) * tr.t + t) * tr.d;
                out[dst..dst + tr.d].copy_from_slice(&x[src..src + tr.d]);
            }
        }
    }
    out
}

/// The graphs as cuDNN was given them (the frontend's spelling; the sample's differs in
/// the types and strides of four virtual tensors, `graph::Flavor`): at the first refusal
/// only, as the next ones differ in their shapes alone.
fn print_graphs(s: &Shape, grads: (i64, i64, i64), deterministic: bool) {
    static PRINTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if PRINTED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let l = Layout::planc(s, grads);
    let f = Flavor::Frontend;
    println!("forward graph:\n{}", graph::forward(s, &l, f));
    println!(
        "backward graph:\n{}",
        graph::backward(s, &l, deterministic, f)
    );
}

/// Where the trial's backward writes: gradient buffers filled with garbage, which the
/// gradients must overwrite (at each group's first query head where heads are grouped).
struct Out {
    grads: Grads,
    bufs: Vec<Buf>,
}

fn outputs(gpu: &mut Gpu, tr: &Trial, hd: Heads) -> Out {
    let n = tr.b * tr.h * tr.t * tr.d;
    let dd = gpu.alloc(tr.b * tr.h * tr.t * 4).unwrap();
    if tr.qkv {
        let dqkv = gpu.alloc(3 * n * 2).unwrap();
        return Out {
            grads: Grads::qkv(hd, dqkv, dd),
            bufs: vec![dqkv],
        };
    }
    let garbage = vec![0x4000u16; n]; // 2.0 in bf16 and in fp16
    let bufs: Vec<Buf> = (0..3).map(|_| up16(gpu, &garbage)).collect();
    Out {
        grads: Grads::heads(hd, (bufs[0], bufs[1], bufs[2]), dd),
        bufs,
    }
}

/// dq, dk, dv as the reference wants them: [b, h, t, d], [b, g, t, d], [b, g, t, d].
fn gradients(gpu: &Gpu, tr: &Trial, out: &Out) -> ([Vec<f32>; 3], Vec<u16>) {
    let n = tr.b * tr.h * tr.t * tr.d;
    let raw: Vec<u16> = out
        .bufs
        .iter()
        .flat_map(|&b| {
            gpu.download::<u16>(b, if tr.qkv { 3 * n } else { n })
                .unwrap()
        })
        .collect();
    let all = widen(tr.precision, &raw);
    let g = if tr.qkv {
        [0, 1, 2].map(|p| from_qkv(&all, tr, p))
    } else {
        [0, 1, 2].map(|p| all[p * n..(p + 1) * n].to_vec())
    };
    let [dq, dk, dv] = g;
    ([dq, first_heads(&dk, tr), first_heads(&dv, tr)], raw)
}

/// Runs one trial; Err says what disagreed or failed.
fn run_trial(
    gpu: &mut Gpu,
    tr: &Trial,
    py: &str,
    dir: &std::path::Path,
    rng: &mut Rng,
) -> Result<String, String> {
    let s = shape_of(tr);
    let hd = Heads {
        b: tr.b,
        h: tr.h,
        t: tr.t,
        d: tr.d,
        xsz: 2,
    };
    let out = outputs(gpu, tr, hd);
    // A line before each step, so a crash inside cuDNN shows where it happened.
    println!("  {}: planning {s:?}", tr.name);
    let sdpa = match Sdpa::new(gpu, s, out.grads.strides(), tr.deterministic) {
        Ok(s) => s,
        Err(e) => {
            print_graphs(&s, out.grads.strides(), tr.deterministic);
            return Err(format!("refused: {e}"));
        }
    };
    println!("  {}: {}", tr.name, sdpa.describe());
    let n = tr.b * tr.h * tr.t * tr.d;
    let ng = tr.b * tr.g * tr.t * tr.d;
    let (q, qb) = round(tr.precision, &rng.vec(n, 1.0, 0.0));
    let (k, kb) = round(tr.precision, &rng.vec(ng, 1.0, 0.0));
    let (v, vb) = round(tr.precision, &rng.vec(ng, 1.0, 0.0));
    let (dout, db) = round(tr.precision, &rng.vec(n, 1.0, 0.0));
    let (qd, kd, vd, dod) = (
        up16(gpu, &qb),
        up16(gpu, &group_heads(&kb, tr)),
        up16(gpu, &group_heads(&vb, tr)),
        up16(gpu, &db),
    );
    let o = gpu.alloc(n * 2).unwrap();
    let lse = gpu.alloc(tr.b * tr.h * tr.t * 4).unwrap();
    let k_ = Kernels::Cudnn(&sdpa);
    let fail = |e: planc_runtime::RunError| format!("{e}");
    println!("  {}: forward", tr.name);
    attention::forward(gpu, hd, k_, o, lse, (qd, kd, vd)).map_err(fail)?;
    gpu.sync().map_err(fail)?;
    println!("  {}: backward", tr.name);
    attention::backward(gpu, hd, k_, out.grads, (qd, kd, vd), lse, (o, dod)).map_err(fail)?;
    gpu.sync().map_err(fail)?;
    let (grads, first) = gradients(gpu, tr, &out);
    // Backward again on the same inputs: the deterministic plan must repeat every bit.
    attention::backward(gpu, hd, k_, out.grads, (qd, kd, vd), lse, (o, dod)).map_err(fail)?;
    let (_, second) = gradients(gpu, tr, &out);
    let same = first == second;
    let mut c = Case::default();
    c.put("q", &q, &[tr.b, tr.h, tr.t, tr.d]);
    c.put("k", &k, &[tr.b, tr.g, tr.t, tr.d]);
    c.put("v", &v, &[tr.b, tr.g, tr.t, tr.d]);
    c.put("dout", &dout, &[tr.b, tr.t, tr.h * tr.d]);
    let o_got = widen(tr.precision, &gpu.download::<u16>(o, n).unwrap());
    c.put("out.o", &o_got, &[tr.b, tr.t, tr.h * tr.d]);
    c.put(
        "out.lse",
        &gpu.download::<f32>(lse, tr.b * tr.h * tr.t).unwrap(),
        &[tr.b, tr.h, tr.t],
    );
    let [dq, dk, dv] = grads;
    c.put("out.dq", &dq, &[tr.b, tr.h, tr.t, tr.d]);
    c.put("out.dk", &dk, &[tr.b, tr.g, tr.t, tr.d]);
    c.put("out.dv", &dv, &[tr.b, tr.g, tr.t, tr.d]);
    c.put("tol", &[2e-2], &[1]);
    c.compare(py, &format!("sdpa:{}", tr.name), dir)?;
    sdpa.release(gpu).map_err(fail)?;
    match (tr.deterministic, same) {
        (true, false) => Err("the deterministic backward differed between two runs".into()),
        (true, true) => Ok("matches autograd; backward bit-identical over two runs".into()),
        (false, s) => Ok(format!(
            "matches autograd; non-deterministic backward {} over two runs",
            if s { "happened to repeat" } else { "differed" }
        )),
    }
}

fn require() -> bool {
    std::env::var("PLANC_CUDNN_ATTENTION").is_ok_and(|v| v.contains("require"))
}

/// libcudnn, or None after SKIPPED (a failure under `require`).
fn cudnn_or_skip(test: &str) -> Option<&'static backend::Lib> {
    match backend::lib() {
        Ok(lib) => {
            println!(
                "cuDNN {} from {}",
                backend::version_string(lib.version),
                lib.path
            );
            Some(lib)
        }
        Err(e) if require() => panic!("{test}: PLANC_CUDNN_ATTENTION=require but {e}"),
        Err(e) => {
            println!("SKIPPED {test}: {e}");
            None
        }
    }
}

#[test]
fn cudnn_attention_matches_pytorch_autograd() {
    let test = "cuDNN attention against PyTorch autograd";
    let Some(mut gpu) = common::gpu_or_skip(test, Precision::Bf16) else {
        return;
    };
    if cudnn_or_skip(test).is_none() {
        return;
    }
    let Some(py) = python_with_torch() else {
        assert!(!require(), "{test}: no python3 with torch and safetensors");
        println!("SKIPPED {test}: no python3 with torch and safetensors");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x5eed_c0de_a77e_0001);
    let mut failed = Vec::new();
    let mut fp16 = None;
    for tr in trials() {
        let g = if tr.precision == Precision::Fp16 {
            fp16.get_or_insert_with(|| Gpu::open(0, Precision::Fp16).unwrap())
        } else {
            &mut gpu
        };
        match run_trial(g, &tr, &py, dir.path(), &mut rng) {
            Ok(what) => println!("ok     {:<28} {what}", tr.name),
            Err(e) if tr.may_refuse && e.starts_with("refused") => {
                println!("note   {:<28} planc's kernels would run: {e}", tr.name)
            }
            Err(e) => {
                println!("FAIL   {:<28} {e}", tr.name);
                failed.push(tr.name);
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{test}: {} failed: {failed:?}",
        failed.len()
    );
}

/// `n` elements of random storage-type values: a 16M-element block drawn on the host,
/// repeated on the device.
fn random(gpu: &mut Gpu, p: Precision, n: usize, seed: u64) -> Buf {
    let block = n.min(1 << 24);
    let (_, bits) = round(p, &Rng(seed).vec(block, 1.0, 0.0));
    let src = up16(gpu, &bits);
    let buf = gpu.alloc(n * 2).unwrap();
    for at in (0..n).step_by(block) {
        gpu.copy(buf.at(at, 2), src, block.min(n - at) * 2).unwrap();
    }
    gpu.free(src).unwrap();
    buf
}

/// Mean milliseconds of `f` over 20 calls after 3 warm-up ones.
fn time(gpu: &Gpu, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let start = gpu.event().unwrap();
    for _ in 0..20 {
        f();
    }
    let end = gpu.event().unwrap();
    start.ms_to(&end).unwrap() as f64 / 20.0
}

#[test]
fn speed() {
    let test = "cuDNN attention speed";
    if std::env::var("PLANC_ATTENTION_SPEED").as_deref() != Ok("1") {
        println!("SKIPPED {test}: set PLANC_ATTENTION_SPEED=1");
        return;
    }
    let Some(mut gpu) = common::gpu_or_skip(test, Precision::Bf16) else {
        return;
    };
    if cudnn_or_skip(test).is_none() {
        return;
    }
    // (label, b, h, g, t, d, into qkv as the engine writes it: no rope, one key/value head
    // a query head).
    let shapes = [
        ("issue: 4x4096, 32 heads of 128", 4, 32, 32, 4096, 128, true),
        (
            "GPT 6.6B: 1x2048, 32 heads of 128",
            1,
            32,
            32,
            2048,
            128,
            true,
        ),
        (
            "GPT-2 124M: 16x1024, 12 heads of 64",
            16,
            12,
            12,
            1024,
            64,
            true,
        ),
        (
            "Llama 3.2 1B: 4x2048, 32 of 64, 8 kv",
            4,
            32,
            8,
            2048,
            64,
            false,
        ),
    ];
    for (label, b, h, g, t, d, qkv) in shapes {
        let tr = Trial {
            qkv,
            ..trial(label, (b, h, g, t, d))
        };
        let hd = Heads { b, h, t, d, xsz: 2 };
        let n = b * h * t * d;
        let (q, k, v, dout) = (
            random(&mut gpu, tr.precision, n, 1),
            random(&mut gpu, tr.precision, n, 2),
            random(&mut gpu, tr.precision, n, 3),
            random(&mut gpu, tr.precision, n, 4),
        );
        let o = gpu.alloc(n * 2).unwrap();
        let lse = gpu.alloc(b * h * t * 4).unwrap();
        let out = outputs(&mut gpu, &tr, hd);
        let flops = 4.0 * (b * h * t * t * d) as f64 / 2.0;
        let mut runs: Vec<(String, Option<Sdpa>)> = Vec::new();
        for det in [true, false] {
            match Sdpa::new(&mut gpu, shape_of(&tr), out.grads.strides(), det) {
                Ok(s) => {
                    println!("  {label}: {}", s.describe());
                    let name = format!(
                        "cuDNN {}",
                        if det {
                            "deterministic"
                        } else {
                            "non-deterministic"
                        }
                    );
                    runs.push((name, Some(s)));
                }
                Err(e) => println!(
                    "  {label}: cuDNN refused ({}): {e}",
                    if det {
                        "deterministic"
                    } else {
                        "non-deterministic"
                    }
                ),
            }
        }
        // planc's tensor-core kernels index key/value heads one to one: they run the
        // repeated heads of a group, as the engine gives them.
        runs.push(("planc tensor cores".into(), None));
        for (name, sdpa) in &runs {
            let kernels = match sdpa {
                Some(s) => Kernels::Cudnn(s),
                None => hd.tensor_cores(gpu.sm).into(),
            };
            let fwd = time(&gpu, || {
                attention::forward(&gpu, hd, kernels, o, lse, (q, k, v)).unwrap()
            });
            let bwd = time(&gpu, || {
                attention::backward(&gpu, hd, kernels, out.grads, (q, k, v), lse, (o, dout))
                    .unwrap()
            });
            println!(
                "speed {label:<38} {name:<24} forward {:>6.1} TFLOP/s ({fwd:.3} ms)  backward {:>6.1} TFLOP/s ({bwd:.3} ms)",
                flops / fwd / 1e9,
                2.5 * flops / bwd / 1e9
            );
        }
        for s in runs.into_iter().filter_map(|(_, s)| s) {
            s.release(&mut gpu).unwrap();
        }
        for buf in [q, k, v, dout, o, lse, out.grads.dd]
            .into_iter()
            .chain(out.bufs)
        {
            gpu.free(buf).unwrap();
        }
    }
}
