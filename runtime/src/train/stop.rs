//! When a run ends before its last step, and how every rank agrees on it.
//!
//! - A loss or gradient norm that is not finite ends the run (exit 1) at the step it
//!   appeared, naming the first non-finite tensor, and no checkpoint of such weights is
//!   written: a run that diverged is not trained on to its last step. A step that takes no
//!   norm (`grad_clip = 0` outside fp16: nothing to clip, so no pass over the gradients
//!   before the update) learns of non-finite gradients from the update itself, which flags
//!   them; the run ends there as well, its updated weights not saved. Under fp16 a
//!   non-finite gradient norm is an overflow of the loss scale: the step is skipped, the
//!   scale halved, and the skipped steps counted (a non-finite *loss* is not the scale's
//!   doing, and ends an fp16 run too).
//! - SIGTERM and SIGUSR1, the warnings Slurm (`--signal`, preemption) and Kubernetes (pod
//!   deletion, with its grace period) give before they kill a job, finish the current step,
//!   write a checkpoint (with `--save`) and end the process with [`PREEMPTED`], which the
//!   emitted job scripts read as "requeue", not as a failure.
//!
//! The handlers only set an atomic (all a signal handler may safely do); the loop reads it
//! once a step. Ranks must stop after the same step, or the others wait forever in the next
//! step's first collective: each rank puts its flags (a signal seen here, a loss that is not
//! finite here) into the step's scalar sums, which every group sums in turn
//! ([`scalar_sums`]), so every rank decides on the world's totals.

use std::ops::Range;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use planc_compiler::plan::Precision;

use super::model::Params;

/// The exit status of a run stopped by SIGTERM or SIGUSR1 after saving its work: 75,
/// `EX_TEMPFAIL` of sysexits.h ("try again later"). The Slurm and Kubernetes scripts requeue
/// on it without counting an attempt against `job.retries`.
pub const PREEMPTED: u8 = 75;

/// The last stop signal received (0: none) and how many were received.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
static RECEIVED: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Atomics only: async-signal-safe.
    SIGNAL.store(sig, Ordering::SeqCst);
    RECEIVED.fetch_add(1, Ordering::SeqCst);
}

/// Catches SIGTERM and SIGUSR1 for the rest of the process (idempotent). Interrupted
/// system calls restart (`SA_RESTART`), so a signal during a read or a wait changes nothing
/// but the flag.
pub fn install() -> std::io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGUSR1] {
        // SAFETY: a zeroed sigaction is valid; the handler only touches atomics.
        let rc = unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The stop signal received so far, if any.
pub fn requested() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// How many stop signals have arrived (the launcher forwards each new one).
pub fn received() -> u32 {
    RECEIVED.load(Ordering::SeqCst)
}

/// `SIGTERM`, `SIGUSR1`, or the number.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGUSR1 => "SIGUSR1".into(),
        libc::SIGINT => "SIGINT".into(),
        s => format!("signal {s}"),
    }
}

/// Slots of the step's scalars (f32, on the device): Σ g² of this rank's tensors, of the
/// tensors every tensor-parallel rank holds whole, of the last stage's copy of a tied
/// embedding; then the flags.
pub const NORM_SLOTS: Range<usize> = 0..3;
pub const FLAG_SLOTS: Range<usize> = 3..5;
pub const SLOTS: usize = 5;
/// The f32 the update sets where a gradient is not finite, in a step that took no norm
/// (beside the step's sums, which are summed before the update; this one after it).
pub const UPDATE_FLAG: usize = SLOTS;

/// What one rank puts into the flag slots (1 or 0: sums of a few thousand ranks' flags are
/// exact in f32).
pub fn flags(signal_seen: bool, loss_finite: bool) -> [f32; 2] {
    [
        f32::from(u8::from(signal_seen)),
        f32::from(u8::from(!loss_finite)),
    ]
}

/// A kind of group the step's scalars are summed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    Tensor,
    Pipeline,
    Data,
}

/// The step's scalar sums, in the order the loop issues them: which group sums which slots.
/// The norm's partial sums go over the groups whose ranks hold different gradients (the
/// tensor- and pipeline-parallel ones, and the data-parallel one under ZeRO, where each rank
/// holds its shard); without ZeRO data-parallel ranks hold the same reduced gradients
/// already. The flags go over every axis: summed along the three in turn, every rank holds
/// the world's total, so all decide alike.
pub fn scalar_sums(tp: usize, pp: usize, dp: usize, zero: u64) -> Vec<(Axis, Range<usize>)> {
    let mut out = Vec::new();
    if tp > 1 {
        out.push((Axis::Tensor, 0..SLOTS));
    }
    if pp > 1 {
        out.push((Axis::Pipeline, 0..SLOTS));
    }
    if dp > 1 {
        out.push((Axis::Data, if zero >= 1 { 0..SLOTS } else { FLAG_SLOTS }));
    }
    out
}

/// What the step does with its gradients, decided from figures every rank shares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    Update,
    /// fp16: the scaled gradients overflowed; skip the step, halve the scale.
    SkipOverflow,
    /// The loss or the gradient norm is not finite: end the run here.
    Diverged,
    /// A step without a norm: its update found gradients that are not finite (and applied
    /// them); end the run here, its weights not saved.
    DivergedInUpdate,
}

/// `losses_not_finite`: the world's sum of the "loss not finite" flag; `grad_norm` the
/// gradient norm after the sums (unscaled), `None` in a step that took none
/// (`planc_compiler::plan::planc_takes_grad_norm`: the update judges its gradients then).
pub fn judge(precision: Precision, losses_not_finite: f32, grad_norm: Option<f64>) -> Verdict {
    match grad_norm {
        _ if losses_not_finite > 0.0 => Verdict::Diverged,
        None => Verdict::Update,
        Some(n) if n.is_finite() => Verdict::Update,
        Some(_) if precision == Precision::Fp16 => Verdict::SkipOverflow,
        Some(_) => Verdict::Diverged,
    }
}

/// Whether the run stops after step `done` (counted from 1) of its last, `end`, given the
/// world's sum of the "signal seen" flag. A run whose work is done ends normally.
pub fn stop_after(signals: f32, done: u64, end: u64) -> bool {
    signals > 0.0 && done < end
}

/// The first tensor of `params` (in their order) with a value that is not finite in `flat`
/// (a flat buffer laid out as `params`): its name, the element's index in it, and the value.
pub fn first_non_finite(params: &Params, flat: &[f32]) -> Option<(String, usize, f32)> {
    params.list.iter().find_map(|p| {
        let end = (p.offset + p.numel()).min(flat.len());
        let values = flat.get(p.offset..end)?;
        values
            .iter()
            .position(|x| !x.is_finite())
            .map(|i| (p.name.clone(), i, values[i]))
    })
}

/// Where a diverged run's trouble shows, for its error: the first non-finite weight, else
/// the first non-finite gradient, else that both are finite (the forward overflowed).
pub fn culprit(params: &Params, weights: &[f32], grads: &[f32]) -> String {
    if let Some((name, i, x)) = first_non_finite(params, weights) {
        return format!("the weights are not finite (first: {name}[{i}] = {x})");
    }
    match first_non_finite(params, grads) {
        Some((name, i, x)) => format!(
            "the weights are finite; the first non-finite gradient is {name}'s ({name}[{i}] = {x})"
        ),
        None => "the weights and gradients are finite: the forward overflowed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::dist;

    /// The scalars of every rank after the sums `scalar_sums` lists, each over the groups
    /// of its axis as the communicators are made.
    fn sum_over_world(
        tp: usize,
        pp: usize,
        dp: usize,
        zero: u64,
        mut scalars: Vec<[f32; SLOTS]>,
    ) -> Vec<[f32; SLOTS]> {
        let world = tp * pp * dp;
        for (axis, slots) in scalar_sums(tp, pp, dp, zero) {
            let groups = match axis {
                Axis::Tensor => dist::tensor_parallel_groups(world, tp),
                Axis::Pipeline => dist::pipeline_groups(world, tp, dp),
                Axis::Data => dist::data_parallel_groups(world, tp, dp),
            };
            for g in groups {
                for s in slots.clone() {
                    let total: f32 = g.iter().map(|&r| scalars[r][s]).sum();
                    for &r in &g {
                        scalars[r][s] = total;
                    }
                }
            }
        }
        scalars
    }

    const LAYOUTS: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (2, 1, 1),
        (1, 2, 1),
        (1, 1, 2),
        (2, 2, 2),
        (4, 2, 1),
        (1, 4, 2),
        (2, 1, 4),
        (8, 4, 2),
    ];

    /// The step at which each rank stops when `signalled` ranks see the signal from step
    /// `at` on (each reads its flag once a step, before the sums).
    fn stops(
        (tp, pp, dp): (usize, usize, usize),
        zero: u64,
        signalled: &[usize],
        at: u64,
        end: u64,
    ) -> Vec<u64> {
        let world = tp * pp * dp;
        let mut stopped = vec![end; world];
        for done in 1..=end {
            let scalars = (0..world)
                .map(|r| {
                    let [s, l] = flags(signalled.contains(&r) && done >= at, true);
                    [1.0, 0.0, 0.0, s, l]
                })
                .collect();
            let summed = sum_over_world(tp, pp, dp, zero, scalars);
            let mut any = false;
            for (r, s) in summed.iter().enumerate() {
                if stopped[r] == end && stop_after(s[3], done, end) {
                    stopped[r] = done;
                    any = true;
                }
            }
            if any {
                break;
            }
        }
        stopped
    }

    #[test]
    fn a_signal_on_any_rank_stops_every_rank_after_the_same_step() {
        for &(tp, pp, dp) in LAYOUTS {
            let world = tp * pp * dp;
            for zero in [0, 1] {
                for signalled in [
                    vec![0],
                    vec![world - 1],
                    vec![world / 2],
                    (0..world).collect(),
                ] {
                    let got = stops((tp, pp, dp), zero, &signalled, 7, 20);
                    assert_eq!(
                        got,
                        vec![7; world],
                        "tp {tp} pp {pp} dp {dp} zero {zero}, signal on {signalled:?}"
                    );
                }
            }
        }
        // The last step done is a finished run, not a preempted one.
        assert_eq!(stops((2, 2, 2), 0, &[3], 20, 20), vec![20; 8]);
        // No signal: no stop.
        assert_eq!(stops((2, 2, 2), 0, &[], 1, 20), vec![20; 8]);
    }

    #[test]
    fn the_flags_reach_every_rank_and_the_norm_keeps_its_sums() {
        for &(tp, pp, dp) in LAYOUTS {
            let world = tp * pp * dp;
            for zero in [0, 1] {
                // Each rank's partial Σ g² is 1; one rank's loss is not finite.
                let scalars = (0..world)
                    .map(|r| {
                        let [s, l] = flags(false, r != world - 1);
                        [1.0, 1.0, 0.0, s, l]
                    })
                    .collect();
                let summed = sum_over_world(tp, pp, dp, zero, scalars);
                // The norm's sums: over tp × pp without ZeRO (dp replicas hold the same
                // gradients), over the world with it, as before the flags joined them.
                let norm = if zero >= 1 { world } else { tp * pp } as f32;
                for s in &summed {
                    assert_eq!(s[0], norm, "tp {tp} pp {pp} dp {dp} zero {zero}");
                    assert_eq!(s[1], norm);
                    assert_eq!(s[4], 1.0, "every rank sees the one non-finite loss");
                    assert_eq!(
                        judge(Precision::Bf16, s[4], Some(1.0)),
                        Verdict::Diverged,
                        "tp {tp} pp {pp} dp {dp}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_non_finite_loss_or_norm_stops_the_run_and_fp16_skips_its_overflows() {
        for p in [Precision::Bf16, Precision::Fp32] {
            assert_eq!(judge(p, 0.0, Some(1.5)), Verdict::Update);
            assert_eq!(judge(p, 0.0, Some(f64::NAN)), Verdict::Diverged);
            assert_eq!(judge(p, 0.0, Some(f64::INFINITY)), Verdict::Diverged);
            assert_eq!(judge(p, 1.0, Some(1.5)), Verdict::Diverged);
        }
        // fp16: an overflowed norm is the loss scale's doing, skipped; a non-finite loss
        // is not.
        assert_eq!(
            judge(Precision::Fp16, 0.0, Some(f64::INFINITY)),
            Verdict::SkipOverflow
        );
        assert_eq!(
            judge(Precision::Fp16, 0.0, Some(f64::NAN)),
            Verdict::SkipOverflow
        );
        assert_eq!(
            judge(Precision::Fp16, 2.0, Some(f64::NAN)),
            Verdict::Diverged
        );
        assert_eq!(judge(Precision::Fp16, 0.0, Some(3.0)), Verdict::Update);
        // A step that took no norm updates unless its loss is not finite (the update then
        // judges the gradients).
        assert_eq!(judge(Precision::Bf16, 0.0, None), Verdict::Update);
        assert_eq!(judge(Precision::Bf16, 1.0, None), Verdict::Diverged);
        // The flag a rank puts in for a NaN or infinite loss.
        assert_eq!(flags(false, f64::NAN.is_finite()), [0.0, 1.0]);
        assert_eq!(flags(true, true), [1.0, 0.0]);
    }

    #[test]
    fn the_culprit_is_the_first_non_finite_tensor_in_the_models_order() {
        use super::super::model::Dims;
        let plan = planc_compiler::check::check_source(
            "t.tp",
            "cluster c { nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }
             model m { layers = 2, hidden = 64, heads = 4, vocab = 128, seq_len = 16 }
             train { global_batch = 4, precision = bf16 }
             parallel { micro_batch = 1, tp = 1, pp = 1, dp = 1 }",
        )
        .plan
        .unwrap();
        let params = Params::new(&Dims::of(&plan, None).unwrap());
        let mut w = vec![0.5f32; params.total];
        let mut g = vec![0.1f32; params.total];
        assert_eq!(first_non_finite(&params, &w), None);
        assert!(culprit(&params, &w, &g).contains("forward overflowed"));
        let last = params.list.last().unwrap();
        let l1 = params
            .list
            .iter()
            .find(|p| p.name.starts_with("h.1."))
            .unwrap();
        g[last.offset] = f32::INFINITY;
        g[l1.offset + 3] = f32::NAN;
        let (name, i, _) = first_non_finite(&params, &g).unwrap();
        assert_eq!((name.as_str(), i), (l1.name.as_str(), 3));
        assert!(
            culprit(&params, &w, &g).contains(&format!("gradient is {}'s", l1.name)),
            "{}",
            culprit(&params, &w, &g)
        );
        // Non-finite weights are named first.
        w[last.offset + 1] = f32::NEG_INFINITY;
        assert!(culprit(&params, &w, &g).starts_with(&format!(
            "the weights are not finite (first: {}[1] = -inf)",
            last.name
        )));
    }

    #[test]
    fn a_stop_signal_sets_the_flag_and_counts() {
        install().unwrap();
        let before = received();
        // SAFETY: raising a signal this process handles.
        unsafe {
            libc::raise(libc::SIGUSR1);
        }
        assert_eq!(requested(), Some(libc::SIGUSR1));
        assert_eq!(received(), before + 1);
        assert_eq!(signal_name(libc::SIGUSR1), "SIGUSR1");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
    }
}
