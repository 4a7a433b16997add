//! On a GPU with PyTorch: each training kernel's forward and backward against PyTorch
//! autograd (`runtime/tests/gpu/autograd.py`, float64): norms (LayerNorm, RMSNorm, the
//! vectorised and the scalar kernels), GELU, SwiGLU, the causal softmax, cross-entropy,
//! the qkv split with rope and grouped-query heads and its gradient merge (pack-a-thread
//! and per-element kernels), the fused attention, and AdamW's update over a range (with and without decay). The kernels run in
//! fp32 so that the comparison is tight (the flash kernel also in bf16, whose tensor-core
//! path training uses, at a bf16 tolerance). Without a GPU, or without python3 with torch
//! and safetensors, it prints SKIPPED and passes.

use std::path::Path;

mod common;

use common::autograd::{python_with_torch, Case};
use common::{up, Rng};
use half::bf16;
use planc_compiler::plan::{Mlp, Precision};
use planc_runtime::device::activation::Activation;
use planc_runtime::device::attention::{self, Grads, Heads};
use planc_runtime::device::cuda::{Arg, Buf, Gpu};
use planc_runtime::device::gelu_products::GeluProducts;
use planc_runtime::device::heads::{qkv_kernel, QkvPass};
use planc_runtime::device::optimizer::{self, AdamW, Range};
use planc_runtime::device::rows::{self, norm_packs, norm_partials, NormGrads, NormSaved, Norms};

fn down(gpu: &Gpu, b: Buf, n: usize) -> Vec<f32> {
    gpu.download(b, n).unwrap()
}

/// `v` rounded to bf16, and uploaded: the rounded values and the buffer.
fn up_bf16(gpu: &mut Gpu, v: Vec<f32>) -> (Vec<f32>, Buf) {
    let r: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
    let bytes: Vec<u8> = r.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect();
    let buf = gpu.alloc(bytes.len()).unwrap();
    gpu.upload(buf, &bytes).unwrap();
    (r.iter().map(|x| x.to_f32()).collect(), buf)
}

/// `n` bf16 values of `b`, as f32.
fn down_bf16(gpu: &Gpu, b: Buf, n: usize) -> Vec<f32> {
    let raw: Vec<u16> = gpu.download(b, n).unwrap();
    raw.into_iter()
        .map(|x| bf16::from_bits(x).to_f32())
        .collect()
}

fn norms(gpu: &mut Gpu, py: &str, dir: &Path, rng: &mut Rng) {
    // C 256 takes the vectorised kernels (64 packs of 4), C 102 (not whole packs) the
    // scalar ones.
    for (c, vectorised) in [(256usize, true), (102, false)] {
        for rms in [false, true] {
            let rows = 24;
            let eps = 1e-5f32;
            let x = rng.vec(rows * c, 2.0, 0.3);
            let w = rng.vec(c, 0.5, 1.0);
            let b = rng.vec(c, 0.2, 0.0);
            let dy = rng.vec(rows * c, 1.0, 0.0);
            let dinp0 = rng.vec(rows * c, 0.1, 0.0);
            let (xb, wb, dyb, dinp) = (up(gpu, &x), up(gpu, &w), up(gpu, &dy), up(gpu, &dinp0));
            let bb = if rms { Buf::NULL } else { up(gpu, &b) };
            let out = gpu.alloc(rows * c * 4).unwrap();
            let (mean, rstd) = (gpu.alloc(rows * 4).unwrap(), gpu.alloc(rows * 4).unwrap());
            let (dw, db) = (up(gpu, &vec![0.0; c]), up(gpu, &vec![0.0; c]));
            // Launched as training launches them: the vectorised or the scalar kernels by
            // the width.
            let norm = Norms {
                rows,
                width: c,
                xsz: 4,
                eps,
                rms,
            };
            assert_eq!(norm_packs(c, 4).is_some(), vectorised);
            norm.forward(gpu, out, mean, rstd, xb, wb, bb).unwrap();
            let part = gpu.alloc(norm_partials(rows, c) * 4).unwrap();
            let grads = NormGrads { dinp, dw, db };
            let saved = NormSaved {
                inp: xb,
                mean,
                rstd,
            };
            norm.backward(gpu, part, grads, dyb, wb, saved).unwrap();
            let mut k = Case::default();
            k.put("x", &x, &[rows, c]);
            k.put("w", &w, &[c]);
            k.put("dy", &dy, &[rows, c]);
            k.put("dinp0", &dinp0, &[rows, c]);
            k.put("eps", &[eps], &[1]);
            k.put("out.y", &down(gpu, out, rows * c), &[rows, c]);
            k.put("out.dx", &down(gpu, dinp, rows * c), &[rows, c]);
            k.put("out.dw", &down(gpu, dw, c), &[c]);
            if !rms {
                k.put("b", &b, &[c]);
                k.put("out.db", &down(gpu, db, c), &[c]);
            }
            let name = if rms { "rmsnorm" } else { "layernorm" };
            k.check(py, &format!("{name}:{c}"), dir);
        }
    }
}

fn activations(gpu: &mut Gpu, py: &str, dir: &Path, rng: &mut Rng) {
    let (rows, f) = (16usize, 96usize);
    let n = rows * f;
    let h = rng.vec(n, 3.0, 0.0);
    let d = rng.vec(n, 1.0, 0.0);
    let (hb, db) = (up(gpu, &h), up(gpu, &d));
    let (act, dh) = (gpu.alloc(n * 4).unwrap(), gpu.alloc(n * 4).unwrap());
    let activation = |mlp| Activation {
        mlp,
        rows,
        width: f,
    };
    activation(Mlp::Gelu)
        .forward(gpu, act, hb, Buf::NULL)
        .unwrap();
    activation(Mlp::Gelu)
        .backward(gpu, dh, hb, Buf::NULL, db)
        .unwrap();
    let mut k = Case::default();
    k.put("h", &h, &[rows, f]);
    k.put("dout", &d, &[rows, f]);
    k.put("out.act", &down(gpu, act, n), &[rows, f]);
    k.put("out.dh", &down(gpu, dh, n), &[rows, f]);
    k.check(py, "gelu", dir);
    // The first MLP product's bias, added by the activation as it reads (training's path).
    let bias = rng.vec(f, 1.0, 0.0);
    let bb = up(gpu, &bias);
    activation(Mlp::Gelu).forward(gpu, act, hb, bb).unwrap();
    activation(Mlp::Gelu).backward(gpu, dh, hb, bb, db).unwrap();
    let mut k = Case::default();
    k.put("h", &h, &[rows, f]);
    k.put("b", &bias, &[f]);
    k.put("dout", &d, &[rows, f]);
    k.put("out.act", &down(gpu, act, n), &[rows, f]);
    k.put("out.dh", &down(gpu, dh, n), &[rows, f]);
    k.check(py, "gelu_bias", dir);

    let h2 = rng.vec(2 * n, 3.0, 0.0);
    let hb = up(gpu, &h2);
    let dh2 = gpu.alloc(2 * n * 4).unwrap();
    activation(Mlp::Swiglu)
        .forward(gpu, act, hb, Buf::NULL)
        .unwrap();
    activation(Mlp::Swiglu)
        .backward(gpu, dh2, hb, Buf::NULL, db)
        .unwrap();
    let mut k = Case::default();
    k.put("h", &h2, &[rows, 2 * f]);
    k.put("dout", &d, &[rows, f]);
    k.put("out.act", &down(gpu, act, n), &[rows, f]);
    k.put("out.dh", &down(gpu, dh2, 2 * n), &[rows, 2 * f]);
    k.check(py, "swiglu", dir);
}

fn softmax_and_loss(gpu: &mut Gpu, py: &str, dir: &Path, rng: &mut Rng) {
    let (bh, t) = (6usize, 40usize);
    let rows = bh * t;
    let scale = 0.125f32;
    let s = rng.vec(rows * t, 4.0, 0.0);
    let dp = rng.vec(rows * t, 1.0, 0.0);
    let (p, d) = (up(gpu, &s), up(gpu, &dp));
    let grid = (rows.div_ceil(8) as u32, 1);
    let fwd = [
        Arg::P(p),
        Arg::L(rows as i64),
        Arg::I(t as i32),
        Arg::F(scale),
    ];
    gpu.launch("softmax_causal_fwd", grid, 256, &fwd).unwrap();
    let bwd = [
        Arg::P(d),
        Arg::P(p),
        Arg::L(rows as i64),
        Arg::I(t as i32),
        Arg::F(scale),
    ];
    gpu.launch("softmax_causal_bwd", grid, 256, &bwd).unwrap();
    let mut k = Case::default();
    k.put("scores", &s, &[rows, t]);
    k.put("dp", &dp, &[rows, t]);
    k.put("scale", &[scale], &[1]);
    k.put("out.p", &down(gpu, p, rows * t), &[rows, t]);
    k.put("out.dscores", &down(gpu, d, rows * t), &[rows, t]);
    k.check(py, "softmax", dir);

    // V 1000: whole 16-byte packs, the pack-a-thread loops; 1003: element by element.
    for v in [1000usize, 1003] {
        let n = 12usize;
        let logits = rng.vec(n * v, 6.0, 0.0);
        let targets: Vec<i32> = (0..n).map(|i| ((i * 379 + 11) % v) as i32).collect();
        let dscale = 0.25f32;
        let lb = up(gpu, &logits);
        let tb = gpu.alloc(n * 4).unwrap();
        gpu.upload(tb, &targets).unwrap();
        let loss = gpu.alloc(n * 4).unwrap();
        // Training's launcher: the block size the step runs.
        rows::cross_entropy(gpu, (lb, loss, tb), n, v, dscale).unwrap();
        let mut k = Case::default();
        k.put("logits", &logits, &[n, v]);
        let tf: Vec<f32> = targets.iter().map(|&x| x as f32).collect();
        k.put("targets", &tf, &[n]);
        k.put("dscale", &[dscale], &[1]);
        k.put("out.loss", &down(gpu, loss, n), &[n]);
        k.put("out.dlogits", &down(gpu, lb, n * v), &[n, v]);
        k.check(py, "cross_entropy", dir);
    }
}

/// `x` [b, h, t, d] with each group's non-first heads replaced: by the group's first head
/// (`Some(None)`: the copies the ungrouped split writes), or by `fill` (`Some(Some(v))`).
fn regroup(x: &[f32], (b, h, g, td): (usize, usize, usize, usize), fill: Option<f32>) -> Vec<f32> {
    let rep = h / g;
    let mut out = x.to_vec();
    for bi in 0..b {
        for hi in (0..h).filter(|hi| hi % rep != 0) {
            let (at, first) = ((bi * h + hi) * td, (bi * h + hi / rep * rep) * td);
            for i in 0..td {
                out[at + i] = fill.unwrap_or(x[first + i]);
            }
        }
    }
    out
}

fn rope(gpu: &mut Gpu, py: &str, dir: &Path, rng: &mut Rng) {
    // D 64: halves of whole packs (fp32: 4 elements), the pair kernels; D 36: per element.
    // Grouped (cuDNN's attention): a key/value head written and its gradient read at its
    // group's first query head only; the others hold garbage that must not leak in.
    for (d, grouped) in [(64usize, false), (36, false), (64, true), (36, true)] {
        let (b, t, h, g) = (2usize, 16usize, 4usize, 2usize);
        let w = (h + 2 * g) * d;
        let half = d / 2;
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for p in 0..t {
            for i in 0..half {
                let a = p as f64 / 10000f64.powf(2.0 * i as f64 / d as f64);
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        let qkv = rng.vec(b * t * w, 1.0, 0.0);
        let n = b * h * t * d;
        let (dq, mut dk, mut dv) = (
            rng.vec(n, 1.0, 0.0),
            rng.vec(n, 1.0, 0.0),
            rng.vec(n, 1.0, 0.0),
        );
        let shape = (b, h, g, t * d);
        let (dkb, dvb) = if grouped {
            let bufs = (
                up(gpu, &regroup(&dk, shape, Some(1e3))),
                up(gpu, &regroup(&dv, shape, Some(1e3))),
            );
            // The reference: a group's gradient is its first head's.
            dk = regroup(&dk, shape, Some(0.0));
            dv = regroup(&dv, shape, Some(0.0));
            bufs
        } else {
            (up(gpu, &dk), up(gpu, &dv))
        };
        let (cb, sb, qb) = (up(gpu, &cos), up(gpu, &sin), up(gpu, &qkv));
        let garbage = vec![1e3f32; n];
        let (q, k, v) = (up(gpu, &garbage), up(gpu, &garbage), up(gpu, &garbage));
        let dqb = up(gpu, &dq);
        let dqkv = gpu.alloc(b * t * w * 4).unwrap();
        let dims = [
            Arg::I(b as i32),
            Arg::I(t as i32),
            Arg::I(h as i32),
            Arg::I(g as i32),
            Arg::I(d as i32),
            Arg::P(cb),
            Arg::P(sb),
        ];
        // The engine's choice: a rope pair of 4-float packs a thread for D 64, per element
        // for 36.
        let (split_k, split_n) = qkv_kernel(QkvPass::Split, d, 4, n);
        let (merge_k, merge_n) = qkv_kernel(QkvPass::Merge, d, 4, b * t * w);
        assert_eq!(split_k.ends_with("_v"), d == 64, "{split_k}");
        let mut split = vec![Arg::P(q), Arg::P(k), Arg::P(v), Arg::P(qb)];
        split.extend_from_slice(&dims);
        if split_k.ends_with("_v") {
            // The pair kernel adds qkv's bias as it reads (none here).
            split.push(Arg::P(Buf::NULL));
        }
        split.push(Arg::I(i32::from(grouped)));
        let mut merge = vec![Arg::P(dqkv), Arg::P(dqb), Arg::P(dkb), Arg::P(dvb)];
        merge.extend_from_slice(&dims);
        merge.push(Arg::I(i32::from(grouped)));
        gpu.launch_n(split_k, split_n, &split).unwrap();
        gpu.launch_n(merge_k, merge_n, &merge).unwrap();
        let mut c = Case::default();
        c.put("qkv", &qkv, &[b, t, w]);
        c.put("hgd", &[h as f32, g as f32, d as f32], &[3]);
        c.put("cos", &cos, &[t, half]);
        c.put("sin", &sin, &[t, half]);
        for (name, x) in [("dq", &dq), ("dk", &dk), ("dv", &dv)] {
            c.put(name, x, &[b, h, t, d]);
        }
        c.put("out.q", &down(gpu, q, n), &[b, h, t, d]);
        for (name, x) in [("out.k", k), ("out.v", v)] {
            let got = down(gpu, x, n);
            // Grouped: the reference's copies are its first heads; so must ours be, once
            // the non-first heads (left as they were, garbage) take the first's values.
            let got = if grouped {
                regroup(&got, shape, None)
            } else {
                got
            };
            c.put(name, &got, &[b, h, t, d]);
        }
        c.put("out.dqkv", &down(gpu, dqkv, b * t * w), &[b, t, w]);
        let mode = if grouped { "grouped" } else { "copies" };
        c.check(py, &format!("rope:{d}:{mode}"), dir);
    }
}

/// The activations in bf16, which take the hardware exponential (`act_exp` in kernels.cu):
/// GELU with the first product's bias and SwiGLU, against autograd on the same rounded
/// inputs at a bf16 tolerance. Rows of 96 are whole packs of 8: the vector path training
/// takes.
fn activations_bf16(py: &str, dir: &Path, rng: &mut Rng) {
    let Some(mut gpu) =
        common::gpu_or_skip("kernel autograd test (bf16 activations)", Precision::Bf16)
    else {
        return;
    };
    let (rows, f) = (16usize, 96usize);
    let mut round = |v: Vec<f32>| up_bf16(&mut gpu, v);
    // The first row starts with inputs whose exponentials overflow or reach 2¹²⁶, where the
    // approximate division (`act_div`) gives 0 rather than the quotient: for GELU's input
    // and for SwiGLU's gate, whose quotients there are (nearly) 0.
    let mut hv = rng.vec(rows * 2 * f, 3.0, 0.0);
    hv[..8].copy_from_slice(&[-20.0, -10.5, -10.0, -9.6, 9.6, 10.0, -90.0, -87.5]);
    let (h, hb) = round(hv);
    let (d, db) = round(rng.vec(rows * f, 1.0, 0.0));
    let (bias, bb) = round(rng.vec(f, 1.0, 0.0));
    let act = gpu.alloc(rows * f * 2).unwrap();
    let dh = gpu.alloc(rows * 2 * f * 2).unwrap();
    let back = |b: Buf, n: usize| down_bf16(&gpu, b, n);
    let gelu = Activation {
        mlp: Mlp::Gelu,
        rows,
        width: f,
    };
    gelu.forward(&gpu, act, hb, bb).unwrap();
    gelu.backward(&gpu, dh, hb, bb, db).unwrap();
    let mut k = Case::default();
    k.put("h", &h[..rows * f], &[rows, f]);
    k.put("b", &bias, &[f]);
    k.put("dout", &d, &[rows, f]);
    k.put("out.act", &back(act, rows * f), &[rows, f]);
    k.put("out.dh", &back(dh, rows * f), &[rows, f]);
    k.put("tol", &[2e-2], &[1]);
    k.check(py, "gelu_bias:bf16", dir);
    let swiglu = Activation {
        mlp: Mlp::Swiglu,
        rows,
        width: f,
    };
    swiglu.forward(&gpu, act, hb, Buf::NULL).unwrap();
    swiglu.backward(&gpu, dh, hb, Buf::NULL, db).unwrap();
    let mut k = Case::default();
    k.put("h", &h, &[rows, 2 * f]);
    k.put("dout", &d, &[rows, f]);
    k.put("out.act", &back(act, rows * f), &[rows, f]);
    k.put("out.dh", &back(dh, rows * 2 * f), &[rows, 2 * f]);
    k.put("tol", &[2e-2], &[1]);
    k.check(py, "swiglu:bf16", dir);
}

/// A GELU MLP's products with the activation in cuBLASLt's epilogues, bf16 training's path
/// (`device::gelu_products`): the up product with its bias and GELU (keeping GELU's input),
/// and the down product's input gradient with GELU's gradient, against autograd in float64
/// on the same rounded inputs at a bf16 tolerance.
fn gelu_products_bf16(py: &str, dir: &Path, rng: &mut Rng) {
    let Some(mut gpu) =
        common::gpu_or_skip("kernel autograd test (GELU epilogues)", Precision::Bf16)
    else {
        return;
    };
    let (rows, c, f) = (64usize, 128usize, 256usize);
    let mut round = |v: Vec<f32>| up_bf16(&mut gpu, v);
    let (x, xb) = round(rng.vec(rows * c, 1.0, 0.0));
    let (w1, w1b) = round(rng.vec(f * c, 0.15, 0.0));
    let (b1, b1b) = round(rng.vec(f, 0.5, 0.0));
    let (w2, w2b) = round(rng.vec(c * f, 0.15, 0.0));
    let (dy, dyb) = round(rng.vec(rows * c, 1.0, 0.0));
    let ws = gpu.alloc(32 << 20).unwrap();
    let Some(g) = GeluProducts::new(&gpu, Precision::Bf16, ws).unwrap() else {
        println!("SKIPPED GELU epilogue products: no libcublasLt");
        return;
    };
    let (act, h, dh) = (
        gpu.alloc(rows * f * 2).unwrap(),
        gpu.alloc(rows * f * 2).unwrap(),
        gpu.alloc(rows * f * 2).unwrap(),
    );
    assert!(
        g.runs((act, h), (xb, w1b, b1b), (dh, dyb, w2b), (rows, c, f)),
        "cuBLASLt takes the GELU epilogues at bf16"
    );
    g.up(&gpu, (act, h), xb, w1b, b1b, (rows, c, f)).unwrap();
    g.down_dinp(&gpu, dh, (dyb, w2b, h), (rows, c, f)).unwrap();
    let back = |b: Buf, n: usize| down_bf16(&gpu, b, n);
    let mut k = Case::default();
    k.put("x", &x, &[rows, c]);
    k.put("w1", &w1, &[f, c]);
    k.put("b1", &b1, &[f]);
    k.put("w2", &w2, &[c, f]);
    k.put("dy", &dy, &[rows, c]);
    k.put("out.act", &back(act, rows * f), &[rows, f]);
    k.put("out.h", &back(h, rows * f), &[rows, f]);
    k.put("out.dh", &back(dh, rows * f), &[rows, f]);
    k.put("tol", &[2e-2], &[1]);
    k.check(py, "gelu_products:bf16", dir);
}

/// The fused attention in `p` (fp32: the scalar kernels; bf16: the tensor-core ones).
fn flash(p: Precision, py: &str, dir: &Path, rng: &mut Rng) {
    let Some(mut gpu) = common::gpu_or_skip("kernel autograd test (flash)", p) else {
        return;
    };
    let xsz = if p == Precision::Fp32 { 4 } else { 2 };
    let hd = Heads {
        b: 2,
        h: 3,
        t: 128,
        d: 64,
        xsz,
    };
    let n = hd.b * hd.h * hd.t * hd.d;
    let to_x = |v: &[f32]| -> (Vec<f32>, Vec<u8>) {
        if xsz == 4 {
            (v.to_vec(), v.iter().flat_map(|x| x.to_ne_bytes()).collect())
        } else {
            let r: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
            (
                r.iter().map(|x| x.to_f32()).collect(),
                r.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect(),
            )
        }
    };
    let mut inputs = Vec::new();
    let mut bufs = Vec::new();
    for _ in 0..4 {
        let (vals, bytes) = to_x(&rng.vec(n, 1.0, 0.0));
        let buf = gpu.alloc(bytes.len()).unwrap();
        gpu.upload(buf, &bytes).unwrap();
        inputs.push(vals);
        bufs.push(buf);
    }
    let (q, k, v, dout) = (bufs[0], bufs[1], bufs[2], bufs[3]);
    let o = gpu.alloc(n * xsz).unwrap();
    let (dq, dk, dv) = (
        gpu.alloc(n * xsz).unwrap(),
        gpu.alloc(n * xsz).unwrap(),
        gpu.alloc(n * xsz).unwrap(),
    );
    let rows = hd.b * hd.h * hd.t;
    let (lse, dd) = (gpu.alloc(rows * 4).unwrap(), gpu.alloc(rows * 4).unwrap());
    let tc = hd.tensor_cores(gpu.sm);
    attention::forward(&gpu, hd, tc, o, lse, (q, k, v)).unwrap();
    let grads = Grads::heads(hd, (dq, dk, dv), dd);
    attention::backward(&gpu, hd, tc, grads, (q, k, v), lse, (o, dout)).unwrap();
    let back = |b: Buf| -> Vec<f32> {
        if xsz == 4 {
            gpu.download(b, n).unwrap()
        } else {
            let raw: Vec<u16> = gpu.download(b, n).unwrap();
            raw.into_iter()
                .map(|x| bf16::from_bits(x).to_f32())
                .collect()
        }
    };
    let shape = [hd.b, hd.h, hd.t, hd.d];
    let mut c = Case::default();
    for (name, vals) in ["q", "k", "v"].iter().zip(&inputs) {
        c.put(name, vals, &shape);
    }
    c.put("dout", &inputs[3], &[hd.b, hd.t, hd.h * hd.d]);
    c.put("out.o", &back(o), &[hd.b, hd.t, hd.h * hd.d]);
    for (name, b) in [("out.dq", dq), ("out.dk", dk), ("out.dv", dv)] {
        c.put(name, &back(b), &shape);
    }
    if xsz == 2 {
        c.put("tol", &[2e-2], &[1]);
    }
    c.check(py, &format!("flash:{p}"), dir);
}

fn adamw(gpu: &mut Gpu, py: &str, dir: &Path, rng: &mut Rng) {
    // Not a multiple of four: the last element takes the kernel's scalar path.
    let n = 1001usize;
    let (lr, b1, b2, eps, wd, step) = (1e-3f32, 0.9f32, 0.95f32, 1e-8f32, 0.1f32, 3u32);
    let w = rng.vec(n, 1.0, 0.0);
    let g = rng.vec(n, 0.1, 0.0);
    let m = rng.vec(n, 0.01, 0.0);
    let v: Vec<f32> = rng.vec(n, 1e-4, 1e-4);
    let (wb, gb, mb, vb) = (up(gpu, &w), up(gpu, &g), up(gpu, &m), up(gpu, &v));
    let bc1 = 1.0 - (b1 as f64).powi(step as i32);
    let bc2 = 1.0 - (b2 as f64).powi(step as i32);
    // Decay on the first 512 elements (8 blocks of 64), none on the rest, as for a weight
    // followed by a bias; the kernel takes a range starting at block 0.
    let split = 512usize;
    let mask: Vec<u8> = (0..n.div_ceil(64))
        .map(|k| u8::from(k * 64 < split))
        .collect();
    let decay = gpu.alloc(mask.len()).unwrap();
    gpu.upload(decay, &mask).unwrap();
    // The engine's own launcher: lo = 0 takes the 16-byte path up to the last element.
    // The flag a step without a gradient norm reads: left 0 by finite gradients.
    let flag = up(gpu, &[0.0f32]);
    let r = Range {
        w: wb,
        wx: Buf::NULL,
        g: gb,
        n,
        lo: 0,
        decay,
        nonfinite: flag,
    };
    let h = AdamW {
        lr,
        b1,
        b2,
        eps,
        wd,
        bc1,
        bc2,
        gscale: 1.0,
    };
    optimizer::adamw(gpu, r, mb, vb, &h).unwrap();
    let mut c = Case::default();
    for (name, x) in [("w", &w), ("g", &g), ("m", &m), ("v", &v)] {
        c.put(name, x, &[n]);
    }
    c.put(
        "hyper",
        &[lr, b1, b2, eps, wd, step as f32, split as f32],
        &[7],
    );
    c.put("out.w_new", &down(gpu, wb, n), &[n]);
    c.put("out.m_new", &down(gpu, mb, n), &[n]);
    c.put("out.v_new", &down(gpu, vb, n), &[n]);
    c.check(py, "adamw", dir);
    assert_eq!(
        down(gpu, flag, 1),
        vec![0.0],
        "finite gradients set the flag"
    );
    // A non-finite gradient on the 16-byte path and one on the scalar path (the last
    // element) each set it.
    for bad in [7usize, n - 1] {
        let mut g2 = g.clone();
        g2[bad] = if bad == 7 { f32::INFINITY } else { f32::NAN };
        let (w2, g2b, m2, v2) = (up(gpu, &w), up(gpu, &g2), up(gpu, &m), up(gpu, &v));
        let flag = up(gpu, &[0.0f32]);
        let r = Range {
            w: w2,
            g: g2b,
            nonfinite: flag,
            ..r
        };
        optimizer::adamw(gpu, r, m2, v2, &h).unwrap();
        assert_eq!(down(gpu, flag, 1), vec![1.0], "gradient {bad} not finite");
    }
}

#[test]
fn every_kernel_pair_matches_pytorch_autograd() {
    let Some(mut gpu) = common::gpu_or_skip("kernel autograd test", Precision::Fp32) else {
        return;
    };
    let Some(py) = python_with_torch() else {
        println!("SKIPPED kernel autograd test: no python3 with torch and safetensors");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    norms(&mut gpu, &py, dir.path(), &mut rng);
    activations(&mut gpu, &py, dir.path(), &mut rng);
    softmax_and_loss(&mut gpu, &py, dir.path(), &mut rng);
    rope(&mut gpu, &py, dir.path(), &mut rng);
    adamw(&mut gpu, &py, dir.path(), &mut rng);
    drop(gpu);
    flash(Precision::Fp32, &py, dir.path(), &mut rng);
    flash(Precision::Bf16, &py, dir.path(), &mut rng);
    activations_bf16(&py, dir.path(), &mut rng);
    gelu_products_bf16(&py, dir.path(), &mut rng);
}
