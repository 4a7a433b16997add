//! On a GPU: the tensor-parallel kernels (vocabulary-parallel cross-entropy and embedding,
//! positions added to a rank's rows) against a float64 reference on the CPU, with the
//! ranks' shares laid side by side on one GPU as the all-gather lays them. Without a GPU it
//! prints SKIPPED and passes.

mod common;

use common::gpu_or_skip;
use planc_compiler::plan::Precision;
use planc_runtime::device::cuda::Arg;

/// Values uniform in [-4, 4).
fn values(n: usize, seed: u64) -> Vec<f32> {
    common::values(n, seed, 4.0, 0.0)
}

#[test]
fn vocabulary_parallel_cross_entropy_matches_the_whole_vocabulary() {
    let Some(mut gpu) = gpu_or_skip("tensor-parallel kernel test", Precision::Fp32) else {
        return;
    };
    let (n, v, ranks) = (6usize, 300usize, 3usize);
    let vl = v / ranks;
    let logits = values(n * v, 7);
    let targets: Vec<i32> = (0..n).map(|i| ((i * 131 + 17) % v) as i32).collect();
    let dscale = 0.25f32;
    // float64 reference: loss and (softmax − onehot)·dscale.
    let mut want_loss = vec![0f64; n];
    let mut want_grad = vec![0f64; n * v];
    for r in 0..n {
        let row = &logits[r * v..(r + 1) * v];
        let mx = row.iter().fold(f64::MIN, |m, &x| m.max(x as f64));
        let s: f64 = row.iter().map(|&x| (x as f64 - mx).exp()).sum();
        let lse = mx + s.ln();
        want_loss[r] = lse - row[targets[r] as usize] as f64;
        for j in 0..v {
            let p = (row[j] as f64 - lse).exp();
            want_grad[r * v + j] = (p - f64::from(j == targets[r] as usize)) * dscale as f64;
        }
    }
    let tg = gpu.alloc(n * 4).unwrap();
    gpu.upload(tg, &targets).unwrap();
    let all = gpu.alloc(ranks * n * 3 * 4).unwrap();
    let (lse, loss) = (gpu.alloc(n * 4).unwrap(), gpu.alloc(n * 4).unwrap());
    let mut shares = Vec::new();
    for r in 0..ranks {
        let share: Vec<f32> = (0..n)
            .flat_map(|i| logits[i * v + r * vl..i * v + (r + 1) * vl].to_vec())
            .collect();
        let b = gpu.alloc(n * vl * 4).unwrap();
        gpu.upload(b, &share).unwrap();
        gpu.launch(
            "ce_stats",
            (n as u32, 1),
            1024,
            &[
                Arg::P(b),
                Arg::P(all.at(r * n * 3, 4)),
                Arg::P(tg),
                Arg::I(vl as i32),
                Arg::I((r * vl) as i32),
            ],
        )
        .unwrap();
        shares.push(b);
    }
    gpu.launch(
        "ce_combine",
        (1, 1),
        256,
        &[
            Arg::P(all),
            Arg::P(lse),
            Arg::P(loss),
            Arg::L(n as i64),
            Arg::I(ranks as i32),
        ],
    )
    .unwrap();
    let got: Vec<f32> = gpu.download(loss, n).unwrap();
    for r in 0..n {
        let e = (got[r] as f64 - want_loss[r]).abs() / want_loss[r].abs().max(1.0);
        assert!(
            e < 1e-5,
            "row {r}: loss {} against {}",
            got[r],
            want_loss[r]
        );
    }
    for (r, &b) in shares.iter().enumerate() {
        gpu.launch(
            "ce_grad",
            (n as u32, 1),
            1024,
            &[
                Arg::P(b),
                Arg::P(lse),
                Arg::P(tg),
                Arg::I(vl as i32),
                Arg::I((r * vl) as i32),
                Arg::F(dscale),
            ],
        )
        .unwrap();
        let g: Vec<f32> = gpu.download(b, n * vl).unwrap();
        for i in 0..n {
            for j in 0..vl {
                let w = want_grad[i * v + r * vl + j];
                let e = (g[i * vl + j] as f64 - w).abs();
                assert!(
                    e < 1e-6,
                    "rank {r} row {i} column {j}: {} against {w}",
                    g[i * vl + j]
                );
            }
        }
    }
}

#[test]
fn vocabulary_parallel_lookups_sum_to_the_embedding_plus_positions() {
    let Some(mut gpu) = gpu_or_skip("tensor-parallel kernel test", Precision::Fp32) else {
        return;
    };
    let (v, c, s, ranks) = (64usize, 16usize, 8usize, 2usize);
    let (b, vl) = (2usize, v / ranks);
    let n = b * s;
    let wte = values(v * c, 3);
    let wpe = values(s * c, 5);
    let tokens: Vec<i32> = (0..n).map(|i| ((i * 37 + 5) % v) as i32).collect();
    let tok = gpu.alloc(n * 4).unwrap();
    gpu.upload(tok, &tokens).unwrap();
    let out = gpu.alloc(n * c * 4).unwrap();
    let mut sum = vec![0f32; n * c];
    for r in 0..ranks {
        let table = gpu.alloc(vl * c * 4).unwrap();
        gpu.upload(table, &wte[r * vl * c..(r + 1) * vl * c])
            .unwrap();
        gpu.launch_n(
            "embed_vocab_fwd",
            n * c,
            &[
                Arg::P(out),
                Arg::P(tok),
                Arg::P(table),
                Arg::L(n as i64),
                Arg::I(c as i32),
                Arg::I((r * vl) as i32),
                Arg::I(vl as i32),
            ],
        )
        .unwrap();
        let part: Vec<f32> = gpu.download(out, n * c).unwrap();
        for (a, p) in sum.iter_mut().zip(&part) {
            *a += p;
        }
    }
    // A sequence-parallel rank's rows: the second half of the batch's tokens, whose
    // positions start mid-sequence when s does not divide the split.
    let (row0, rows) = (5usize, n - 5);
    let x = gpu.alloc(rows * c * 4).unwrap();
    gpu.upload(x, &sum[row0 * c..]).unwrap();
    let pe = gpu.alloc(s * c * 4).unwrap();
    gpu.upload(pe, &wpe).unwrap();
    gpu.launch_n(
        "add_positions",
        rows * c,
        &[
            Arg::P(x),
            Arg::P(pe),
            Arg::L(rows as i64),
            Arg::L(row0 as i64),
            Arg::I(s as i32),
            Arg::I(c as i32),
        ],
    )
    .unwrap();
    let got: Vec<f32> = gpu.download(x, rows * c).unwrap();
    for i in 0..rows {
        let row = row0 + i;
        for k in 0..c {
            let want = wte[tokens[row] as usize * c + k] + wpe[(row % s) * c + k];
            assert_eq!(got[i * c + k], want, "row {row} column {k}");
        }
    }
}
