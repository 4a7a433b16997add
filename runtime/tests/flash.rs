//! On a GPU: the fused attention kernels (flash) against a float64 reference on the CPU, in
//! every storage precision, tensor-core and scalar kernels alike, and their times at GPT-2
//! small's shape (printed; run with --nocapture). Without a GPU it prints SKIPPED and passes.

use half::{bf16, f16};
use planc_compiler::plan::Precision;
use planc_runtime::device::attention::{self, Grads, Heads};
use planc_runtime::device::cuda::{Buf, Gpu};
use planc_runtime::RunError;

/// A tiny deterministic generator (xorshift), uniform in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

/// Values rounded to the storage type, and its bytes.
fn round(p: Precision, v: &[f32]) -> (Vec<f32>, Vec<u8>) {
    let mut bytes = Vec::new();
    let r = v
        .iter()
        .map(|&x| match p {
            Precision::Fp32 => {
                bytes.extend_from_slice(&x.to_ne_bytes());
                x
            }
            Precision::Fp16 => {
                let h = f16::from_f32(x);
                bytes.extend_from_slice(&h.to_bits().to_ne_bytes());
                h.to_f32()
            }
            _ => {
                let h = bf16::from_f32(x);
                bytes.extend_from_slice(&h.to_bits().to_ne_bytes());
                h.to_f32()
            }
        })
        .collect();
    (r, bytes)
}

fn fetch(gpu: &Gpu, p: Precision, b: Buf, n: usize) -> Vec<f32> {
    match p {
        Precision::Fp32 => gpu.download::<f32>(b, n).unwrap(),
        Precision::Fp16 => gpu
            .download::<u16>(b, n)
            .unwrap()
            .into_iter()
            .map(|x| f16::from_bits(x).to_f32())
            .collect(),
        _ => gpu
            .download::<u16>(b, n)
            .unwrap()
            .into_iter()
            .map(|x| bf16::from_bits(x).to_f32())
            .collect(),
    }
}

/// [b, h, t, d] → [b, t, w] at column `off` + h·d (w = h·d: the merged output; 3·h·d: the
/// merged qkv gradient), and back with `split`.
fn merge(x: &[f32], hd: Heads, w: usize, off: usize) -> Vec<f32> {
    let mut out = vec![0.0; hd.b * hd.t * w];
    for b in 0..hd.b {
        for h in 0..hd.h {
            for t in 0..hd.t {
                for d in 0..hd.d {
                    out[(b * hd.t + t) * w + off + h * hd.d + d] =
                        x[((b * hd.h + h) * hd.t + t) * hd.d + d];
                }
            }
        }
    }
    out
}

fn split(x: &[f32], hd: Heads, w: usize, off: usize) -> Vec<f32> {
    let mut out = vec![0.0; hd.b * hd.h * hd.t * hd.d];
    for b in 0..hd.b {
        for h in 0..hd.h {
            for t in 0..hd.t {
                for d in 0..hd.d {
                    out[((b * hd.h + h) * hd.t + t) * hd.d + d] =
                        x[(b * hd.t + t) * w + off + h * hd.d + d];
                }
            }
        }
    }
    out
}

/// The float64 reference for head `bh`: o, lse, dq, dk, dv.
#[allow(clippy::type_complexity)]
fn reference(
    hd: Heads,
    bh: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let (t, d) = (hd.t, hd.d);
    let at = |x: &[f32], i: usize, c: usize| x[(bh * t + i) * d + c] as f64;
    let scale = 1.0 / (d as f64).sqrt();
    let mut o = vec![0.0; t * d];
    let mut lse = vec![0.0; t];
    let (mut dq, mut dk, mut dv) = (vec![0.0; t * d], vec![0.0; t * d], vec![0.0; t * d]);
    for i in 0..t {
        let s: Vec<f64> = (0..=i)
            .map(|j| (0..d).map(|c| at(q, i, c) * at(k, j, c)).sum::<f64>() * scale)
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
        lse[i] = m + z.ln();
        let p: Vec<f64> = s.iter().map(|x| (x - m).exp() / z).collect();
        for c in 0..d {
            o[i * d + c] = (0..=i).map(|j| p[j] * at(v, j, c)).sum();
        }
        let dp: Vec<f64> = (0..=i)
            .map(|j| (0..d).map(|c| at(g, i, c) * at(v, j, c)).sum())
            .collect();
        let di: f64 = (0..=i).map(|j| p[j] * dp[j]).sum();
        for j in 0..=i {
            let ds = p[j] * (dp[j] - di) * scale;
            for c in 0..d {
                dq[i * d + c] += ds * at(k, j, c);
                dk[j * d + c] += ds * at(q, i, c);
                dv[j * d + c] += p[j] * at(g, i, c);
            }
        }
    }
    (o, lse, dq, dk, dv)
}

/// max |x − ref| / max |ref| over head `bh`.
fn rel(x: &[f32], r: &[f64], bh: usize, per: usize) -> f64 {
    let x = &x[bh * per..(bh + 1) * per];
    let mut num: f64 = 0.0;
    let mut den: f64 = 1e-30;
    for (a, b) in x.iter().zip(r) {
        if !a.is_finite() {
            return f64::INFINITY;
        }
        num = num.max((*a as f64 - b).abs());
        den = den.max(b.abs());
    }
    num / den
}

struct Bufs {
    q: Buf,
    k: Buf,
    v: Buf,
    lse: Buf,
    a: Buf,
    da: Buf,
    /// dq, dk, dv [b, h, t, d], and the merged qkv gradient [b, t, 3·h·d].
    dqkv: (Buf, Buf, Buf),
    merged: Buf,
    dd: Buf,
}

fn alloc(gpu: &mut Gpu, hd: Heads) -> Bufs {
    let n = hd.b * hd.h * hd.t * hd.d * hd.xsz;
    let r = hd.b * hd.h * hd.t * 4;
    let mut a = || gpu.alloc(n).unwrap();
    let (q, k, v, am, da) = (a(), a(), a(), a(), a());
    let dqkv = (a(), a(), a());
    Bufs {
        q,
        k,
        v,
        a: am,
        da,
        dqkv,
        merged: gpu.alloc(3 * n).unwrap(),
        lse: gpu.alloc(r).unwrap(),
        dd: gpu.alloc(r).unwrap(),
    }
}

impl Bufs {
    fn grads(&self, hd: Heads, into_qkv: bool) -> Grads {
        if into_qkv {
            Grads::qkv(hd, self.merged, self.dd)
        } else {
            Grads::heads(hd, self.dqkv, self.dd)
        }
    }
}

/// Runs one shape through the kernels (tensor-core or scalar) and checks heads `check`
/// against the reference; returns the worst relative error. `into_qkv`: the gradients go
/// to the merged qkv gradient.
fn case(
    gpu: &mut Gpu,
    p: Precision,
    hd: Heads,
    (tc, into_qkv): (bool, bool),
    check: &[usize],
    tol: f64,
) -> f64 {
    let n = hd.b * hd.h * hd.t * hd.d;
    let mut rng = Rng(0x9e3779b97f4a7c15 ^ (hd.d * 1000 + hd.t) as u64);
    // Scores of a few units, as trained attention has: some rows peaked, some flat.
    let (q, qb) = round(p, &rng.vec(n, 1.5));
    let (k, kb) = round(p, &rng.vec(n, 1.5));
    let (v, vb) = round(p, &rng.vec(n, 1.0));
    let (g, _) = round(p, &rng.vec(n, 1.0));
    let bufs = alloc(gpu, hd);
    gpu.upload(bufs.q, &qb).unwrap();
    gpu.upload(bufs.k, &kb).unwrap();
    gpu.upload(bufs.v, &vb).unwrap();
    let w = hd.h * hd.d;
    gpu.upload(bufs.da, &round(p, &merge(&g, hd, w, 0)).1)
        .unwrap();
    attention::forward(gpu, hd, tc, bufs.a, bufs.lse, (bufs.q, bufs.k, bufs.v)).unwrap();
    let o = split(&fetch(gpu, p, bufs.a, n), hd, w, 0);
    let lse: Vec<f32> = gpu.download(bufs.lse, hd.b * hd.h * hd.t).unwrap();
    let grads = bufs.grads(hd, into_qkv);
    attention::backward(
        gpu,
        hd,
        tc,
        grads,
        (bufs.q, bufs.k, bufs.v),
        bufs.lse,
        (bufs.a, bufs.da),
    )
    .unwrap();
    let (dq, dk, dv) = if into_qkv {
        let m = fetch(gpu, p, bufs.merged, 3 * n);
        (
            split(&m, hd, 3 * w, 0),
            split(&m, hd, 3 * w, w),
            split(&m, hd, 3 * w, 2 * w),
        )
    } else {
        (
            fetch(gpu, p, bufs.dqkv.0, n),
            fetch(gpu, p, bufs.dqkv.1, n),
            fetch(gpu, p, bufs.dqkv.2, n),
        )
    };
    let per = hd.t * hd.d;
    let mut worst: f64 = 0.0;
    for &bh in check {
        let (ro, rl, rdq, rdk, rdv) = reference(hd, bh, &q, &k, &v, &g);
        let el = (0..hd.t)
            .map(|i| (lse[bh * hd.t + i] as f64 - rl[i]).abs())
            .fold(0.0, f64::max);
        let e = [
            rel(&o, &ro, bh, per),
            el,
            rel(&dq, &rdq, bh, per),
            rel(&dk, &rdk, bh, per),
            rel(&dv, &rdv, bh, per),
        ];
        let path = format!(
            "{p:>5} {} {}",
            if tc { "tc    " } else { "scalar" },
            if into_qkv { "qkv  " } else { "heads" }
        );
        let shape = format!("b{} h{} t{:4} d{:3} head {bh:3}", hd.b, hd.h, hd.t, hd.d);
        let ok = if e.iter().all(|&x| x < tol) {
            ""
        } else {
            "  FAIL"
        };
        println!(
            "{path} {shape}: o {:.2e} lse {:.2e} dq {:.2e} dk {:.2e} dv {:.2e}{ok}",
            e[0], e[1], e[2], e[3], e[4]
        );
        worst = e.iter().cloned().fold(worst, f64::max);
    }
    worst
}

fn time(gpu: &mut Gpu, hd: Heads) {
    let n = hd.b * hd.h * hd.t * hd.d;
    let b = alloc(gpu, hd);
    let mut rng = Rng(7);
    let p = if hd.xsz == 2 {
        Precision::Bf16
    } else {
        Precision::Fp32
    };
    for buf in [b.q, b.k, b.v, b.a, b.da] {
        gpu.upload(buf, &round(p, &rng.vec(n, 1.0)).1).unwrap();
    }
    let reps = 20;
    let run = |gpu: &Gpu, what: u32| {
        for _ in 0..reps {
            if what == 0 {
                attention::forward(gpu, hd, true, b.a, b.lse, (b.q, b.k, b.v)).unwrap();
            } else {
                attention::backward(
                    gpu,
                    hd,
                    true,
                    b.grads(hd, true),
                    (b.q, b.k, b.v),
                    b.lse,
                    (b.a, b.da),
                )
                .unwrap();
            }
        }
    };
    // Two products of T×T×D forward and seven backward (S and dP twice), each causal half
    // 2·T²·D / 2 flops.
    let mm = (hd.b * hd.h) as f64 * (hd.t * hd.t * hd.d) as f64;
    run(gpu, 0);
    run(gpu, 1);
    for (what, name, flops) in [(0, "forward", 2.0 * mm), (1, "backward", 7.0 * mm)] {
        let e0 = gpu.event().unwrap();
        run(gpu, what);
        let e1 = gpu.event().unwrap();
        let ms = e0.ms_to(&e1).unwrap() as f64 / reps as f64;
        println!(
            "time b{} h{} t{} d{}: {name} {ms:.3} ms ({:.0} TFLOP/s)",
            hd.b,
            hd.h,
            hd.t,
            hd.d,
            flops / ms / 1e9
        );
    }
}

#[test]
fn flash_attention_matches_the_reference() {
    let mut failed = Vec::new();
    for p in [Precision::Bf16, Precision::Fp16, Precision::Fp32] {
        let mut gpu = match Gpu::open(0, p) {
            Err(RunError::NoDriver | RunError::NoGpu) => {
                println!("SKIPPED flash attention test: no GPU");
                return;
            }
            r => r.unwrap(),
        };
        let xsz = if p == Precision::Fp32 { 4 } else { 2 };
        let tol = match p {
            Precision::Fp32 => 1e-5,
            Precision::Fp16 => 1e-2,
            _ => 4e-2,
        };
        let shapes = [
            (2, 3, 256, 64),
            (1, 2, 192, 32),
            (1, 2, 128, 128),
            (1, 2, 100, 48),
        ];
        for (b, h, t, d) in shapes {
            let hd = Heads { b, h, t, d, xsz };
            let mut paths = vec![false];
            if hd.tensor_cores(gpu.sm) {
                paths.push(true);
            }
            for tc in paths {
                let e = case(
                    &mut gpu,
                    p,
                    hd,
                    (tc, tc == (t == 256)),
                    &[0, b * h - 1],
                    tol,
                );
                if e >= tol || e.is_nan() {
                    failed.push(format!("{p} tc={tc} {hd:?}: {e:.2e}"));
                }
            }
        }
        if xsz == 2 {
            // GPT-2 small's shape: check the first and last heads, then time.
            let hd = Heads {
                b: 16,
                h: 12,
                t: 1024,
                d: 64,
                xsz,
            };
            let e = case(&mut gpu, p, hd, (true, true), &[0, 191], tol);
            if e >= tol || e.is_nan() {
                failed.push(format!("{p} large: {e:.2e}"));
            }
            if p == Precision::Bf16 {
                time(&mut gpu, hd);
                time(
                    &mut gpu,
                    Heads {
                        b: 4,
                        h: 16,
                        t: 2048,
                        d: 128,
                        xsz,
                    },
                );
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
