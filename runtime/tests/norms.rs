//! On a GPU: the vectorised norm kernels (a row's 16-byte packs held in registers: the
//! forward one warp a row up to 16 packs a lane, else, and the backward, a block a row, 1,
//! 2 or 4 a thread) forward and backward, LayerNorm and RMSNorm, launched as training launches
//! them (`rows::Norms`), against a float64 reference on the CPU, with a row count that
//! leaves the backward's last chunk short. Without a GPU it
//! prints SKIPPED and passes.

mod common;

use common::{gpu_or_skip, up, values};
use planc_compiler::plan::Precision;
use planc_runtime::device::cuda::{Buf, Gpu};
use planc_runtime::device::rows::{norm_packs, norm_partials, NormGrads, NormSaved, Norms};

fn max_rel(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0f64, |m, w| m.max(w.abs())).max(1e-30);
    got.iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).abs() / scale)
        .fold(0.0, f64::max)
}

/// One shape through forward and backward; fp32 storage, so VEC is 4 elements a pack.
fn check(gpu: &mut Gpu, rows: usize, c: usize, rms: bool) {
    let np = norm_packs(c, 4).map_or(0, |(np, _)| np);
    let eps = 1e-5f32;
    let x = values(rows * c, 3 + c as u64, 2.0, 0.5);
    let w = values(c, 5, 0.5, 1.0);
    let b = values(c, 7, 0.3, 0.0);
    let dy = values(rows * c, 11, 1.0, 0.0);
    let dinp0 = values(rows * c, 13, 0.1, 0.0);
    // float64 reference.
    let (mut y, mut dx) = (vec![0f64; rows * c], vec![0f64; rows * c]);
    let (mut dw, mut db) = (vec![0f64; c], vec![0f64; c]);
    for r in 0..rows {
        let xr: Vec<f64> = x[r * c..(r + 1) * c].iter().map(|&v| v as f64).collect();
        let m = if rms {
            0.0
        } else {
            xr.iter().sum::<f64>() / c as f64
        };
        let var = xr.iter().map(|v| (v - m).powi(2)).sum::<f64>() / c as f64;
        let rs = 1.0 / (var + eps as f64).sqrt();
        let xh: Vec<f64> = xr.iter().map(|v| (v - m) * rs).collect();
        let dn: Vec<f64> = (0..c).map(|j| dy[r * c + j] as f64 * w[j] as f64).collect();
        let s1 = dn.iter().sum::<f64>() / c as f64;
        let s2 = dn.iter().zip(&xh).map(|(a, b)| a * b).sum::<f64>() / c as f64;
        for j in 0..c {
            y[r * c + j] = xh[j] * w[j] as f64 + if rms { 0.0 } else { b[j] as f64 };
            let g = if rms {
                dn[j] - xh[j] * s2
            } else {
                dn[j] - s1 - xh[j] * s2
            };
            dx[r * c + j] = dinp0[r * c + j] as f64 + g * rs;
            dw[j] += dy[r * c + j] as f64 * xh[j];
            db[j] += dy[r * c + j] as f64;
        }
    }
    let (xb, wb, dyb, dinp) = (up(gpu, &x), up(gpu, &w), up(gpu, &dy), up(gpu, &dinp0));
    let bb = if rms { Buf::NULL } else { up(gpu, &b) };
    let out = gpu.alloc(rows * c * 4).unwrap();
    let (mean, rstd) = (gpu.alloc(rows * 4).unwrap(), gpu.alloc(rows * 4).unwrap());
    // Through the launcher training uses, so the test runs training's grids.
    let norm = Norms {
        rows,
        width: c,
        xsz: 4,
        eps,
        rms,
    };
    norm.forward(gpu, out, mean, rstd, xb, wb, bb).unwrap();
    let part = gpu.alloc(norm_partials(rows, c) * 4).unwrap();
    // The sums add into what the gradients held: start them at 1.
    let (gw, gb) = (up(gpu, &vec![1.0; c]), up(gpu, &vec![1.0; c]));
    let grads = NormGrads {
        dinp,
        dw: gw,
        db: gb,
    };
    let saved = NormSaved {
        inp: xb,
        mean,
        rstd,
    };
    norm.backward(gpu, part, grads, dyb, wb, saved).unwrap();
    let got_y: Vec<f32> = gpu.download(out, rows * c).unwrap();
    let got_dx: Vec<f32> = gpu.download(dinp, rows * c).unwrap();
    let got_dw: Vec<f32> = gpu.download(gw, c).unwrap();
    let got_db: Vec<f32> = gpu.download(gb, c).unwrap();
    let plus1 = |v: &[f64]| v.iter().map(|x| x + 1.0).collect::<Vec<f64>>();
    let what = format!("rows {rows}, C {c}, {np} packs a thread, rms {rms}");
    for (name, got, want) in [
        ("output", &got_y, y),
        ("input gradient", &got_dx, dx),
        ("weight gradient", &got_dw, plus1(&dw)),
        ("bias gradient", &got_db, plus1(&db)),
    ] {
        let e = max_rel(got, &want);
        assert!(e < 1e-5, "{what}: {name} max relative error {e:.2e}");
    }
}

#[test]
fn vectorised_norms_match_float64() {
    let Some(mut gpu) = gpu_or_skip("norm kernel test", Precision::Fp32) else {
        return;
    };
    // fp32 packs are 4 elements. The forward one warp a row for C 256 (2 packs a lane),
    // 200 (2, the second partly), 1024 (8), 2048 (16); a block a row for 4096 (1024 packs,
    // 4 a thread). The backward a block a row: 256 (64 threads), 1024 (256 threads), 2048
    // (2 a thread), 4096 (4). 2500 rows make 1024 chunks of 3 (512 of 5 at C 4096): rows
    // loaded a row ahead, a last chunk of one row (C ≤ 2048), and chunks with none.
    for c in [256, 1024, 2048, 4096, 200] {
        assert!(
            norm_packs(c, 4).is_some(),
            "C {c} takes the vectorised kernels"
        );
        for rms in [false, true] {
            check(&mut gpu, 2500, c, rms);
        }
    }
}
