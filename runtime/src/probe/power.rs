//! How the board's power limit slows a training step, as a curve over how hard the step
//! drives the tensor cores. A step that keeps them busy (Llama 3 8B's layers, ~650 TFLOP/s
//! on an H200) holds the GPU at its power limit, at 1515 MHz where a probe's bursts ran at
//! 1980, and its products run 1.16x slower than their burst times; GPT-2's small products
//! reach the limit as well once the step runs for more than a few seconds (695 W at 1710
//! MHz over 600 steps; 30 steps, a second, read 516 W: 2026-11-28, clocks sampled through
//! `planc run`). So calibration times the same square product in a burst, then
//! inside a steady mix of products and memory-bound copies, at several shares of the
//! products' burst rate, each mix run long enough for the limiter to settle: the product's
//! and the copies' slowdown at each share is what the cost model applies to a step that
//! drives the tensor cores as hard ([`planc_compiler::profile::PowerCurve`]).

use planc_compiler::plan::Precision;
use planc_compiler::profile::{PowerCurve, PowerPoint};

use super::timing::{random_x, time};
use crate::device::blas::Blas;
use crate::device::cuda::{Arg, Buf, Event, Gpu};
use crate::error::RunError;

/// The square product's side: large enough to reach the device's best product rate.
const SIDE: usize = 8192;
/// Bytes each memory-bound launch reads and writes: far past the L2, at the streaming
/// rate. The launch is training's residual add (`add_x`) on the SMs: a copy engine's
/// `cuMemcpy` left the SMs idle, and the mix drew 450-500 W where training drew 693.
const COPY_BYTES: usize = 256 << 20;
/// Shares of the products' burst rate the mixes drive (1: products alone).
pub const UTILISATIONS: [f64; 5] = [0.3, 0.5, 0.7, 0.85, 1.0];
/// How long each mix runs before its cycles are timed: the power limiter reacts within
/// milliseconds, the board's temperature over seconds; a step repeats for minutes.
const SETTLE_S: f64 = 3.0;
/// Cycles timed at the end of each mix.
const TIMED: usize = 12;

struct Mix {
    blas: Blas,
    bufs: [Buf; 3],
    /// The residual add's two inputs and output.
    adds: [Buf; 3],
    /// Elements each add reads twice and writes once.
    add_n: usize,
}

impl Mix {
    fn product(&self) -> Result<(), RunError> {
        let [a, b, c] = self.bufs;
        self.blas.linear(c, a, b, SIDE, SIDE, SIDE)
    }

    fn copies(&self, gpu: &Gpu, n: usize) -> Result<(), RunError> {
        let [out, a, b] = self.adds;
        for _ in 0..n {
            gpu.launch_v(
                "add_x",
                self.add_n,
                &[Arg::P(out), Arg::P(a), Arg::P(b), Arg::L(self.add_n as i64)],
            )?;
        }
        Ok(())
    }
}

fn median(mut t: Vec<f64>) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Copies a cycle holds so that the product is `u` of its burst time.
pub fn copies_for(u: f64, product_s: f64, copy_s: f64) -> usize {
    if u >= 1.0 {
        return 0;
    }
    (product_s * (1.0 - u) / (u * copy_s)).round().max(1.0) as usize
}

/// Measures the curve on `gpu` (bursts first, then the mixes from the lightest).
pub fn curve(gpu: &mut Gpu, precision: Precision) -> Result<PowerCurve, RunError> {
    let blas = Blas::new(gpu, precision)?;
    // Random operands: a product of zeros draws less power than training's.
    let random = |gpu: &mut Gpu, n| random_x(gpu, precision, n);
    let bufs = [
        random(gpu, SIDE * SIDE)?,
        random(gpu, SIDE * SIDE)?,
        random(gpu, SIDE * SIDE)?,
    ];
    let add_n = COPY_BYTES / (3 * gpu.xsz);
    let adds = [
        random(gpu, add_n)?,
        random(gpu, add_n)?,
        random(gpu, add_n)?,
    ];
    let mix = Mix {
        blas,
        bufs,
        adds,
        add_n,
    };
    let board = super::nvml::Nvml::open(&gpu.pci_bus_id()?);
    if let Err(why) = &board {
        eprintln!("note: calibration records no clocks: {why}");
    }
    let clock = || board.as_ref().ok().and_then(|b| b.sample());
    // Idle a moment, as a probe's burst follows a pause.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let product_s = time(gpu, 5, || mix.product())?;
    // The clock the burst ended at: the SM clock does not wait for NVML's power average.
    let burst_clock_mhz = clock().map(|(mhz, _)| mhz);
    let copy_s = time(gpu, 5, || mix.copies(gpu, 1))?;
    let mut points = Vec::new();
    for u in UTILISATIONS {
        let n = copies_for(u, product_s, copy_s);
        let cycle_s = product_s + n as f64 * copy_s;
        for _ in 0..(SETTLE_S / cycle_s).ceil() as usize {
            mix.product()?;
            mix.copies(gpu, n)?;
        }
        gpu.sync()?;
        // The settled mix's clock and power (NVML's power is a one-second average, over the
        // settling cycles just run).
        let held = clock();
        let mut marks: Vec<(Event, Event, Event)> = Vec::with_capacity(TIMED);
        for _ in 0..TIMED {
            let a = gpu.event()?;
            mix.product()?;
            let b = gpu.event()?;
            mix.copies(gpu, n)?;
            let c = gpu.event()?;
            marks.push((a, b, c));
        }
        let mut prod = Vec::with_capacity(TIMED);
        let mut copy = Vec::with_capacity(TIMED);
        for (a, b, c) in &marks {
            prod.push(a.ms_to(b)? as f64 / 1e3);
            copy.push(b.ms_to(c)? as f64 / 1e3);
        }
        points.push(PowerPoint {
            utilisation: u,
            copies: n,
            product_slowdown: median(prod) / product_s,
            memory_slowdown: if n == 0 {
                1.0
            } else {
                median(copy) / (n as f64 * copy_s)
            },
            clock_mhz: held.map(|(mhz, _)| mhz),
            power_w: held.map(|(_, w)| w),
        });
    }
    for b in bufs.into_iter().chain(adds) {
        gpu.free(b)?;
    }
    Ok(PowerCurve {
        product_tflops: 2.0 * (SIDE as f64).powi(3) / product_s / 1e12,
        burst_clock_mhz,
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_holds_the_copies_that_make_the_product_its_share_of_the_cycle() {
        // 1 ms products, 0.1 ms copies: at half the burst rate, 10 copies a product.
        assert_eq!(copies_for(0.5, 1e-3, 1e-4), 10);
        assert_eq!(copies_for(0.85, 1e-3, 1e-4), 2);
        assert_eq!(copies_for(1.0, 1e-3, 1e-4), 0);
        // Never a mix without a copy below full load.
        assert_eq!(copies_for(0.99, 1e-3, 1e-4), 1);
    }
}
