//! What an overlapped data-parallel collective costs the passes it hides behind: NCCL's
//! kernels hold SMs and memory bandwidth, so while a gradient reduction or a parameter
//! gather runs beside a pass, the pass runs at a measured share of its rate less
//! (`cost::time::dp_contention`: the device's profile, or on NVLink the stand-in measured on
//! two H200s; across nodes, the SMs NCCL's ring channels hold, measured on one H200).
//!
//! After a first run, each pass is lengthened by that share of the time a reduction or a
//! gather of its rank overlapped it, and the step is run again, so the longer passes hide
//! more of a link that outlasts them. One correction, not a fixed point: the longer passes
//! move the collectives they hide little. The closed form charges the same share of the
//! hidden time and counts the longer passes as hiding as much more of such a link.

use crate::engine::Run;
use crate::graph::{Lane, StepGraph, TaskKind};
use crate::program::CollectiveOp;

/// Lengthens the passes of `sg` by `shares[rank]` (reduction, gather) of the time `run`
/// had that rank's reductions and gathers beside them. Returns whether any pass changed.
pub fn charge(sg: &mut StepGraph, run: &Run, shares: &[(f64, f64)]) -> bool {
    if shares.iter().all(|&(r, g)| r <= 0.0 && g <= 0.0) {
        return false;
    }
    let g = &mut sg.graph;
    // Per rank: the intervals its collectives ran, with the share each costs.
    let mut beside: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); sg.ranks as usize];
    for n in g.node_indices() {
        let t = &g[n];
        let Some(&(reduce, gather)) = shares.get(t.rank as usize) else {
            continue;
        };
        let share = match t.kind {
            TaskKind::Collective(CollectiveOp::GradReduce { .. }) => reduce,
            TaskKind::Collective(CollectiveOp::ParamGather { .. }) => gather,
            _ => continue,
        };
        if share > 0.0 {
            beside[t.rank as usize].push((run.start[n.index()], run.end[n.index()], share));
        }
    }
    for b in &mut beside {
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
    }
    let mut changed = false;
    let nodes: Vec<_> = g.node_indices().collect();
    for n in nodes {
        let t = &g[n];
        if t.lane != Lane::Compute || !matches!(t.kind, TaskKind::Pass(_)) {
            continue;
        }
        let (s, e) = (run.start[n.index()], run.end[n.index()]);
        let mut extra = 0.0;
        for &(bs, be, share) in &beside[t.rank as usize] {
            if bs >= e {
                break;
            }
            extra += share * (be.min(e) - bs.max(s)).max(0.0);
        }
        if extra > 0.0 {
            g[n].duration += extra;
            changed = true;
        }
    }
    changed
}
