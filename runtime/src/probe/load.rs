//! Sustained load for timing the attention as training runs it. A training step keeps a
//! GPU at its power limit, where the clock sits well below its boost: on an H100, 1680 MHz
//! median (1530 at the lowest, 699 W) through Llama 3.2 1B's steps against 1980 MHz while
//! a probe's short bursts ran. The products set that state themselves (timed in bursts
//! they ran as fast as in training, and behind load 4 % slower than in training), but a
//! kernel that follows them inherits their clock: the fused attention, timed in bursts,
//! ran 1.10x (GPT-2) to 1.2x (Llama 1B) slower in training than in its probe at the same
//! shape; timed behind load, 1.01x on GPT-2. So the attention probes queue large products
//! before every timed launch.

use planc_compiler::plan::Precision;

use crate::device::blas::Blas;
use crate::device::cuda::{Buf, Gpu};
use crate::error::RunError;

/// Rows and width of the square products that load the GPU.
const SIDE: usize = 8192;
/// Load queued before the first timed launch (for the power limiter to settle) and
/// before each of the others.
const SETTLE_S: f64 = 0.2;
const BETWEEN_S: f64 = 0.004;

pub struct Load {
    blas: Blas,
    bufs: [Buf; 3],
    product_s: f64,
}

impl Load {
    pub fn new(gpu: &mut Gpu, precision: Precision) -> Result<Load, RunError> {
        let blas = Blas::new(gpu, precision)?;
        let bytes = SIDE * SIDE * precision.bytes() as usize;
        let bufs = [gpu.alloc(bytes)?, gpu.alloc(bytes)?, gpu.alloc(bytes)?];
        let mut load = Load {
            blas,
            bufs,
            product_s: 1e-3,
        };
        load.product()?;
        let a = gpu.event()?;
        for _ in 0..4 {
            load.product()?;
        }
        let b = gpu.event()?;
        load.product_s = (a.ms_to(&b)? as f64 / 4e3).max(1e-5);
        Ok(load)
    }

    fn product(&self) -> Result<(), RunError> {
        let [a, b, c] = self.bufs;
        self.blas.linear(c, a, b, SIDE, SIDE, SIDE)
    }

    /// Queues about `seconds` of products on the GPU's stream.
    fn run(&self, seconds: f64) -> Result<(), RunError> {
        for _ in 0..(seconds / self.product_s).ceil() as usize {
            self.product()?;
        }
        Ok(())
    }

    /// Load for the power limiter to settle, before a probe's first launch.
    pub fn settle(&self) -> Result<(), RunError> {
        self.run(SETTLE_S)
    }

    /// Load before each timed launch.
    pub fn between(&self) -> Result<(), RunError> {
        self.run(BETWEEN_S)
    }

    pub fn free(self, gpu: &mut Gpu) -> Result<(), RunError> {
        for b in self.bufs {
            gpu.free(b)?;
        }
        Ok(())
    }
}
