//! How the probes time a launch and fill their operands, shared by calibration's grid
//! (`calibrate`) and the power limit's mixes (`power`): the median of launches timed one by
//! one with events, each queued behind a short spin (or a sustained load) so the interval
//! holds the launch's own time and not the host's to issue it, and operands of random data.

use planc_compiler::plan::Precision;

use super::load::Load;
use crate::device::cuda::{Arg, Buf, Gpu};

/// Clock cycles of the spin queued before each launch timed alone: ~50 µs at 2 GHz,
/// longer than the host takes to issue a launch (a cuBLAS call, a norm's two kernels).
pub(crate) const SPIN_CYCLES: i64 = 100_000;
use crate::error::RunError;

/// `n` elements of the storage type, uniform in [−1, 1) (a fixed sequence): random data
/// draws the power real activations draw, zeros would not.
pub(crate) fn random_x(gpu: &mut Gpu, precision: Precision, n: usize) -> Result<Buf, RunError> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ n as u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let buf = gpu.alloc(n * precision.bytes() as usize)?;
    match precision {
        Precision::Fp32 => gpu.upload(buf, &(0..n).map(|_| next()).collect::<Vec<f32>>())?,
        Precision::Fp16 => gpu.upload(
            buf,
            &(0..n)
                .map(|_| half::f16::from_f32(next()).to_bits())
                .collect::<Vec<u16>>(),
        )?,
        _ => gpu.upload(
            buf,
            &(0..n)
                .map(|_| half::bf16::from_f32(next()).to_bits())
                .collect::<Vec<u16>>(),
        )?,
    }
    Ok(buf)
}

/// Median seconds of `f` over `repeats` launches after two, each timed alone.
pub(crate) fn time(
    gpu: &Gpu,
    repeats: usize,
    f: impl FnMut() -> Result<(), RunError>,
) -> Result<f64, RunError> {
    time_behind(None, gpu, repeats, f)
}

/// [`time`], each call behind `load` where there is one.
pub(crate) fn time_behind(
    load: Option<&Load>,
    gpu: &Gpu,
    repeats: usize,
    mut f: impl FnMut() -> Result<(), RunError>,
) -> Result<f64, RunError> {
    if let Some(l) = load {
        l.settle()?;
    }
    f()?;
    f()?;
    let mut t = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        match load {
            Some(l) => l.between()?,
            None => gpu.launch("spin", (1, 1), 1, &[Arg::L(SPIN_CYCLES)])?,
        }
        let a = gpu.event()?;
        f()?;
        let b = gpu.event()?;
        t.push(a.ms_to(&b)? as f64 / 1e3);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}
