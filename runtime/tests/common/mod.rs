//! What the GPU kernel tests share: a deterministic generator, opening GPU 0 or skipping
//! cleanly without one, uploading f32 values, and the bridge to PyTorch autograd.

#![allow(dead_code)] // each test binary uses its part

pub mod autograd;

use planc_compiler::plan::Precision;
use planc_runtime::device::cuda::{Buf, Gpu};
use planc_runtime::RunError;

/// A tiny deterministic generator (xorshift).
pub struct Rng(pub u64);

impl Rng {
    /// `n` values uniform in [offset − scale, offset + scale).
    pub fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                (((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale + offset
            })
            .collect()
    }
}

/// `n` values of a fresh generator seeded with `seed`.
pub fn values(n: usize, seed: u64, scale: f32, offset: f32) -> Vec<f32> {
    Rng(seed).vec(n, scale, offset)
}

/// GPU 0 with kernels for `p`, or None (and a SKIPPED line naming `test`) without one.
pub fn gpu_or_skip(test: &str, p: Precision) -> Option<Gpu> {
    match Gpu::open(0, p) {
        Err(RunError::NoDriver | RunError::NoGpu) => {
            println!("SKIPPED {test}: no GPU");
            None
        }
        r => Some(r.unwrap()),
    }
}

/// `v` in a new device buffer.
pub fn up(gpu: &mut Gpu, v: &[f32]) -> Buf {
    let b = gpu.alloc(v.len().max(1) * 4).unwrap();
    gpu.upload(b, v).unwrap();
    b
}
