//! The search space: the values each `parallel` attribute may take. A written value is
//! its only value, a list its candidates, and `auto` a domain derived from the model and
//! cluster. The rules for `auto` are documented here because they are choices:
//!
//! - tp: powers of two up to the GPUs of a node (tensor parallelism across nodes is never
//!   the best plan on the networks planc models; list larger values to consider them);
//! - pp: the divisors of `layers`; with `first_stage_layers` or `last_stage_layers` written,
//!   the pp (2 or more) for which the other stages share the remaining layers evenly. The
//!   two keep what the plan writes, and with interleaving the layers rule also asks the
//!   middle stages' share to split into vpp equal chunks; with either `auto`, every pp
//!   some split suits, each layout's split chosen by `balance` to even the stages' work;
//! - overlap_grad_reduce, overlap_p2p, grad_accumulation_fusion, scatter_gather_p2p: never
//!   holes (they describe the framework), copied
//!   into every layout;
//! - cp: 1, 2, 4, 8; ep: the divisors of `experts`;
//! - vpp: 1, or 2–8 dividing the layers per stage (interleaved schedule only);
//! - micro_batch: 1, 2, 4, 8;
//! - schedule: 1f1b, interleaved (gpipe holds all micro-batches in flight for the same
//!   bubble, zb_h1 is not run by Megatron-LM or DeepSpeed; list them to consider them);
//! - sequence_parallel: on exactly when tp > 1 (it saves memory at the same communication);
//! - zero: 0–3 (1 is Megatron's distributed optimizer), and with pp > 1 only 0–1: ZeRO-2
//!   under a pipeline is what FSDP-based frameworks run (Meta's, for Llama 3), not
//!   Megatron-LM or DeepSpeed, so `auto` does not propose it (but for `job.framework =
//!   torchtitan`, which runs it); write or list it to consider it; recompute: none, selective, full
//!   (none and full with flash attention, where selective recomputes nothing);
//! - offload: none (list `optimizer` or `params` to consider offloading).

use crate::plan::{Attention, Hole, Offload, Parallel, PlanSpec, Recompute, Schedule};

#[derive(Clone, Debug)]
pub struct Space {
    pub tp: Vec<u64>,
    pub pp: Vec<u64>,
    pub cp: Vec<u64>,
    pub ep: Vec<u64>,
    /// Empty: derived as world / (tp·pp·cp).
    pub dp: Vec<u64>,
    pub vpp: Vec<u64>,
    pub micro_batch: Vec<u64>,
    pub schedule: Vec<Schedule>,
    /// Empty: on exactly when tp > 1.
    pub sequence_parallel: Vec<bool>,
    pub zero: Vec<u64>,
    /// The highest zero a layout with pp > 1 may take: 1 when zero is `auto` (see above).
    pub zero_with_pipeline_max: u64,
    pub recompute: Vec<Recompute>,
    pub offload: Vec<Offload>,
    /// As written; copied into every layout.
    pub first_stage_layers: Option<u64>,
    pub last_stage_layers: Option<u64>,
    pub overlap_grad_reduce: bool,
    pub overlap_p2p: Option<bool>,
    pub overlap_tp_backward: Option<bool>,
    pub grad_accumulation_fusion: bool,
    pub scatter_gather_p2p: bool,
    pub grad_dtype: Option<crate::plan::GradDtype>,
    pub optimizer_dtype: Option<crate::plan::OptimizerDtype>,
    pub reduce_dtype: Option<crate::plan::GradDtype>,
}

fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

fn pick<T: Clone>(hole: &Hole<T>, auto: impl FnOnce() -> Vec<T>) -> Vec<T> {
    match hole {
        Hole::Fixed(v) => vec![v.clone()],
        Hole::Candidates(c) => c.clone(),
        Hole::Auto => auto(),
    }
}

impl Space {
    pub fn of(spec: &PlanSpec) -> Space {
        let ps = &spec.parallel;
        let m = &spec.model;
        let gpn = spec.cluster.gpus_per_node().max(1);
        Space {
            tp: pick(&ps.tp, || {
                (0..=10).map(|k| 1u64 << k).filter(|&t| t <= gpn).collect()
            }),
            pp: pick(&ps.pp, || {
                let uneven = Parallel {
                    first_stage_layers: ps.first_stage_layers,
                    last_stage_layers: ps.last_stage_layers,
                    ..Parallel::neutral()
                };
                if super::balance::has_auto_ends(spec) {
                    (1..=m.layers)
                        .filter(|&pp| {
                            super::balance::has_split(
                                spec,
                                &Parallel {
                                    pp,
                                    ..uneven.clone()
                                },
                            )
                        })
                        .collect()
                } else if uneven.is_uneven() {
                    (2..=m.layers)
                        .filter(|&pp| {
                            Parallel {
                                pp,
                                ..uneven.clone()
                            }
                            .split_error(m.layers)
                            .is_none()
                        })
                        .collect()
                } else {
                    divisors(m.layers)
                }
            }),
            cp: pick(&ps.cp, || vec![1, 2, 4, 8]),
            ep: pick(&ps.ep, || divisors(m.experts.max(1))),
            dp: match &ps.dp {
                Hole::Fixed(d) => vec![*d],
                Hole::Candidates(c) => c.clone(),
                Hole::Auto => Vec::new(),
            },
            vpp: pick(&ps.vpp, || (1..=8).collect()),
            micro_batch: pick(&ps.micro_batch, || vec![1, 2, 4, 8]),
            schedule: pick(&ps.schedule, || {
                vec![Schedule::OneFOneB, Schedule::Interleaved]
            }),
            sequence_parallel: match &ps.sequence_parallel {
                Hole::Auto => Vec::new(),
                h => pick(h, Vec::new),
            },
            zero: pick(&ps.zero, || vec![0, 1, 2, 3]),
            // torchtitan runs FSDP inside each pipeline stage: its `auto` proposes it.
            zero_with_pipeline_max: if ps.zero == Hole::Auto
                && spec.framework() != crate::plan::Framework::Torchtitan
            {
                1
            } else {
                3
            },
            // With flash attention, selective recompute has nothing to recompute (the
            // attention scores are never stored), so it is the same plan as none.
            recompute: pick(&ps.recompute, || match spec.train.attention {
                Attention::Flash => vec![Recompute::None, Recompute::Full],
                Attention::Standard => vec![Recompute::None, Recompute::Selective, Recompute::Full],
            }),
            offload: pick(&ps.offload, || vec![Offload::None]),
            first_stage_layers: ps.first_stage_layers,
            last_stage_layers: ps.last_stage_layers,
            overlap_grad_reduce: ps.overlap_grad_reduce,
            overlap_p2p: ps.overlap_p2p,
            overlap_tp_backward: ps.overlap_tp_backward,
            grad_accumulation_fusion: ps.grad_accumulation_fusion,
            scatter_gather_p2p: ps.scatter_gather_p2p,
            grad_dtype: ps.grad_dtype,
            optimizer_dtype: ps.optimizer_dtype,
            reduce_dtype: ps.reduce_dtype,
        }
    }

    /// The size of each attribute's domain, by name.
    pub fn domains(&self) -> [(&'static str, usize); 12] {
        [
            ("tp", self.tp.len()),
            ("pp", self.pp.len()),
            ("cp", self.cp.len()),
            ("ep", self.ep.len()),
            ("dp", self.dp.len()),
            ("vpp", self.vpp.len()),
            ("micro_batch", self.micro_batch.len()),
            ("schedule", self.schedule.len()),
            ("sequence_parallel", self.sequence_parallel.len()),
            ("zero", self.zero.len()),
            ("recompute", self.recompute.len()),
            ("offload", self.offload.len()),
        ]
    }

    /// Upper bound of the number of layouts (before any rule); saturates, for candidate
    /// lists of a generated file.
    pub fn size(&self) -> u64 {
        self.domains()
            .iter()
            .fold(1u64, |acc, (_, n)| acc.saturating_mul((*n).max(1) as u64))
    }

    /// Every layout of the space whose shape tiles the cluster (world size, dp derived).
    /// The other rules are checked by the caller, so that brute force and the solver see
    /// the same candidates.
    pub fn layouts(&self, world: u64) -> Vec<Parallel> {
        let mut out = Vec::new();
        for &tp in &self.tp {
            for &pp in &self.pp {
                for &cp in &self.cp {
                    let denom = tp * pp * cp;
                    if denom == 0 || !world.is_multiple_of(denom) {
                        continue;
                    }
                    let derived = world / denom;
                    let dps: Vec<u64> = if self.dp.is_empty() {
                        vec![derived]
                    } else {
                        self.dp.clone()
                    };
                    for dp in dps {
                        self.expand(&mut out, tp, pp, cp, dp);
                    }
                }
            }
        }
        out
    }

    fn expand(&self, out: &mut Vec<Parallel>, tp: u64, pp: u64, cp: u64, dp: u64) {
        let sps: Vec<bool> = if self.sequence_parallel.is_empty() {
            vec![tp > 1]
        } else {
            self.sequence_parallel.clone()
        };
        for &ep in &self.ep {
            for &schedule in &self.schedule {
                for &vpp in &self.vpp {
                    // vpp belongs to the interleaved schedule; other schedules take 1.
                    if (schedule == Schedule::Interleaved) != (vpp > 1) && self.vpp.len() > 1 {
                        continue;
                    }
                    for &micro_batch in &self.micro_batch {
                        for &sequence_parallel in &sps {
                            for &zero in &self.zero {
                                if pp > 1 && zero > self.zero_with_pipeline_max {
                                    continue;
                                }
                                for &recompute in &self.recompute {
                                    for &offload in &self.offload {
                                        out.push(Parallel {
                                            tp,
                                            pp,
                                            dp,
                                            cp,
                                            ep,
                                            vpp,
                                            micro_batch,
                                            schedule,
                                            sequence_parallel,
                                            zero,
                                            recompute,
                                            offload,
                                            first_stage_layers: self.first_stage_layers,
                                            last_stage_layers: self.last_stage_layers,
                                            overlap_grad_reduce: self.overlap_grad_reduce,
                                            overlap_p2p: self.overlap_p2p,
                                            overlap_tp_backward: self.overlap_tp_backward,
                                            grad_accumulation_fusion: self.grad_accumulation_fusion,
                                            scatter_gather_p2p: self.scatter_gather_p2p,
                                            grad_dtype: self.grad_dtype,
                                            optimizer_dtype: self.optimizer_dtype,
                                            reduce_dtype: self.reduce_dtype,
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
