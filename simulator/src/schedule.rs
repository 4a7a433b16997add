//! Pipeline schedules: the order in which one pipeline rank runs the forward and backward
//! passes of its micro-batches and model chunks.
//!
//! A schedule is only an order. Dependencies between ranks (an activation must arrive
//! before its forward runs) are added when the order is lowered to a step graph, and the
//! event-driven engine finds the waiting; nothing here assumes a bubble formula.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Pass {
    Forward,
    /// The whole backward pass, or only its input-gradient half when the schedule splits
    /// weight gradients out (zero-bubble schedules).
    Backward,
    /// The weight-gradient half of a split backward pass.
    WeightGrad,
}

impl Pass {
    pub fn letter(self) -> &'static str {
        match self {
            Pass::Forward => "F",
            Pass::Backward => "B",
            Pass::WeightGrad => "W",
        }
    }
}

/// One pass of one micro-batch through one model chunk of a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Work {
    pub pass: Pass,
    pub micro_batch: u32,
    pub chunk: u32,
}

impl std::fmt::Display for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.pass.letter(), self.micro_batch)?;
        if self.chunk > 0 {
            write!(f, ".{}", self.chunk)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ScheduleKind {
    Gpipe,
    OneFOneB,
    /// Megatron's interleaved 1F1B with `vpp` chunks per rank.
    Interleaved {
        vpp: u32,
    },
    /// Zero-bubble ZB-H1 (Qi et al. 2023): 1F1B with weight gradients split out and
    /// deferred into the cool-down, at 1F1B's activation memory.
    ZeroBubbleH1,
}

impl ScheduleKind {
    pub fn chunks(self) -> u32 {
        match self {
            ScheduleKind::Interleaved { vpp } => vpp.max(1),
            _ => 1,
        }
    }

    pub fn splits_backward(self) -> bool {
        self == ScheduleKind::ZeroBubbleH1
    }
}

fn f(mb: u32, chunk: u32) -> Work {
    Work {
        pass: Pass::Forward,
        micro_batch: mb,
        chunk,
    }
}

fn b(mb: u32, chunk: u32) -> Work {
    Work {
        pass: Pass::Backward,
        micro_batch: mb,
        chunk,
    }
}

fn w(mb: u32, chunk: u32) -> Work {
    Work {
        pass: Pass::WeightGrad,
        micro_batch: mb,
        chunk,
    }
}

/// The order of work on pipeline rank `rank` of `ranks`, for `m` micro-batches.
pub fn order(kind: ScheduleKind, ranks: u32, rank: u32, m: u32) -> Vec<Work> {
    match kind {
        ScheduleKind::Gpipe => (0..m)
            .map(|i| f(i, 0))
            .chain((0..m).map(|i| b(i, 0)))
            .collect(),
        ScheduleKind::OneFOneB => one_f_one_b(ranks, rank, m),
        ScheduleKind::Interleaved { vpp } => interleaved(ranks, rank, m, vpp.max(1)),
        ScheduleKind::ZeroBubbleH1 => zero_bubble_h1(ranks, rank, m),
    }
}

fn one_f_one_b(ranks: u32, rank: u32, m: u32) -> Vec<Work> {
    let warmup = (ranks - rank - 1).min(m);
    let mut out: Vec<Work> = (0..warmup).map(|i| f(i, 0)).collect();
    for i in 0..m - warmup {
        out.push(f(warmup + i, 0));
        out.push(b(i, 0));
    }
    out.extend((m - warmup..m).map(|i| b(i, 0)));
    out
}

/// Megatron-LM's interleaved order: micro-batches go through the chunks in groups of
/// `ranks`; rank r warms up with (ranks − r − 1)·2 + (vpp − 1)·ranks forwards.
fn interleaved(ranks: u32, rank: u32, m: u32, vpp: u32) -> Vec<Work> {
    let mut forwards = Vec::new();
    let mut backwards = Vec::new();
    let mut group_start = 0;
    while group_start < m {
        let group = group_start..(group_start + ranks).min(m);
        for chunk in 0..vpp {
            forwards.extend(group.clone().map(|i| f(i, chunk)));
        }
        for chunk in (0..vpp).rev() {
            backwards.extend(group.clone().map(|i| b(i, chunk)));
        }
        group_start += ranks;
    }
    let total = forwards.len();
    let warmup = (((ranks - rank - 1) * 2 + (vpp - 1) * ranks) as usize).min(total);
    let mut out: Vec<Work> = forwards[..warmup].to_vec();
    for i in 0..total - warmup {
        out.push(forwards[warmup + i]);
        out.push(backwards[i]);
    }
    out.extend_from_slice(&backwards[total - warmup..]);
    out
}

/// 1F1B with each backward split into B (input gradient, on the critical path) and W
/// (weight gradient, needed only by the optimizer). Rank r runs each W r backward passes
/// late: after its last B it still holds r + 1 of them, exactly enough to fill the time
/// the last gradients take to travel the r hops back to rank 0, so the cool-down has no
/// bubble and only the warm-up's (p − 1)·B remains, i.e. (p−1)(F+B−W) when F = B = W.
fn zero_bubble_h1(ranks: u32, rank: u32, m: u32) -> Vec<Work> {
    let defer = rank as usize;
    let mut out = Vec::new();
    let mut pending = std::collections::VecDeque::new();
    for work in one_f_one_b(ranks, rank, m) {
        out.push(work);
        if work.pass == Pass::Backward {
            pending.push_back(work.micro_batch);
            if pending.len() > defer {
                let mb = pending.pop_front().expect("not empty");
                out.push(w(mb, 0));
            }
        }
    }
    out.extend(pending.into_iter().map(|mb| w(mb, 0)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &[Work]) -> String {
        v.iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn one_f_one_b_warms_up_by_distance_to_the_last_rank() {
        assert_eq!(
            text(&order(ScheduleKind::OneFOneB, 4, 0, 6)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5"
        );
        assert_eq!(
            text(&order(ScheduleKind::OneFOneB, 4, 3, 6)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"
        );
        // Fewer micro-batches than ranks: warm-up is cut to what exists.
        assert_eq!(text(&order(ScheduleKind::OneFOneB, 4, 0, 2)), "F0 F1 B0 B1");
    }

    #[test]
    fn interleaved_cycles_chunks_in_groups_of_ranks() {
        // 2 ranks, 2 chunks, 4 micro-batches: rank 0 warms up with 2 + 2 = 4 forwards.
        assert_eq!(
            text(&order(ScheduleKind::Interleaved { vpp: 2 }, 2, 0, 4)),
            "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3"
        );
    }

    #[test]
    fn every_schedule_runs_every_pass_once() {
        for kind in [
            ScheduleKind::Gpipe,
            ScheduleKind::OneFOneB,
            ScheduleKind::Interleaved { vpp: 3 },
            ScheduleKind::ZeroBubbleH1,
        ] {
            for (ranks, m) in [(1, 1), (4, 4), (4, 7), (8, 3), (3, 12)] {
                for rank in 0..ranks {
                    let o = order(kind, ranks, rank, m);
                    let passes = if kind.splits_backward() { 3 } else { 2 };
                    let mut set: Vec<Work> = o.clone();
                    set.sort_by_key(|w| (w.pass as u8, w.micro_batch, w.chunk));
                    set.dedup();
                    assert_eq!(set.len(), o.len(), "{kind:?} duplicates");
                    assert_eq!(
                        o.len() as u32,
                        passes * m * kind.chunks(),
                        "{kind:?} {ranks} {rank} {m}"
                    );
                }
            }
        }
    }

    #[test]
    fn zero_bubble_defers_weight_gradients_on_late_ranks() {
        assert_eq!(
            text(&order(ScheduleKind::ZeroBubbleH1, 3, 0, 4)),
            "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3"
        );
        assert_eq!(
            text(&order(ScheduleKind::ZeroBubbleH1, 3, 2, 3)),
            "F0 B0 F1 B1 F2 B2 W0 W1 W2"
        );
    }
}
