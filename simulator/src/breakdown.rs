//! Where a simulated step's time went, on the busiest rank: compute, communication that
//! the rank waited for, and pipeline bubble (waiting for other ranks' passes).

use petgraph::graph::NodeIndex;
use petgraph::Direction;
use serde::Serialize;

use crate::engine::Run;
use crate::graph::{Lane, StepGraph};

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Breakdown {
    pub rank: u32,
    pub step_s: f64,
    pub compute_s: f64,
    pub exposed_comm_s: f64,
    pub bubble_s: f64,
}

impl Breakdown {
    pub fn bubble_fraction(&self) -> f64 {
        self.bubble_s / self.step_s
    }
}

/// The step's split on its busiest rank (the one that computes longest): what `planc
/// check` reports as the step's compute, exposed communication and bubble.
pub fn breakdown(sg: &StepGraph, run: &Run) -> Breakdown {
    busiest(&per_rank(sg, run))
}

/// Of [`per_rank`]'s splits, the rank that computes longest (the last of equals).
pub fn busiest(ranks: &[Breakdown]) -> Breakdown {
    ranks
        .iter()
        .copied()
        .reduce(|best, b| {
            if b.compute_s >= best.compute_s {
                b
            } else {
                best
            }
        })
        .unwrap_or_default()
}

/// The step's split on every rank, in rank order: what each computed, what it waited for
/// on its links, and the rest, waiting for other ranks' passes (the pipeline's fill and
/// drain, and a slower stage's pace).
pub fn per_rank(sg: &StepGraph, run: &Run) -> Vec<Breakdown> {
    let g = &sg.graph;
    let mut lanes: Vec<Vec<NodeIndex>> = vec![Vec::new(); sg.ranks as usize];
    let mut compute = vec![0.0f64; sg.ranks as usize];
    for n in g.node_indices() {
        let t = &g[n];
        if t.lane == Lane::Compute {
            lanes[t.rank as usize].push(n);
            if !t.is_comm() {
                compute[t.rank as usize] += t.duration - t.comm;
            }
        }
    }
    lanes
        .into_iter()
        .enumerate()
        .map(|(rank, mut lane)| {
            let (comm, bubble) = waits(sg, run, &mut lane);
            Breakdown {
                rank: rank as u32,
                step_s: run.step_s,
                compute_s: compute[rank],
                exposed_comm_s: comm,
                bubble_s: bubble,
            }
        })
        .collect()
}

/// The gaps of one rank's compute lane, as (waiting on its links, waiting for other ranks).
fn waits(sg: &StepGraph, run: &Run, lane: &mut [NodeIndex]) -> (f64, f64) {
    let g = &sg.graph;
    lane.sort_by(|a, b| run.start[a.index()].total_cmp(&run.start[b.index()]));
    let mut comm = 0.0;
    let mut bubble = 0.0;
    let mut cursor = 0.0;
    for &n in lane.iter() {
        let t = &g[n];
        let gap = run.start[n.index()] - cursor;
        if gap > 0.0 {
            // The predecessor that finished last is what this pass waited for. When it is
            // communication, the rank waited on the network for as long as that transfer
            // and the communication it queued behind (a chain of parameter-gather buckets,
            // say) covered the gap; the rest was waiting for another rank's pass.
            let cause = g
                .neighbors_directed(n, Direction::Incoming)
                .max_by(|a, b| run.end[a.index()].total_cmp(&run.end[b.index()]));
            let waited_on_link = match cause {
                Some(c) if g[c].is_comm() => comm_cover(sg, run, c, cursor, run.start[n.index()]),
                _ => 0.0,
            };
            comm += waited_on_link;
            bubble += gap - waited_on_link;
        }
        comm += t.comm;
        cursor = cursor.max(run.end[n.index()]);
    }
    bubble += (run.step_s - cursor).max(0.0);
    (comm, bubble)
}

/// How much of `[from, to]` is covered by `last` and the communication tasks it waited for
/// (its predecessors through communication only).
fn comm_cover(sg: &StepGraph, run: &Run, last: NodeIndex, from: f64, to: f64) -> f64 {
    let g = &sg.graph;
    let mut intervals = Vec::new();
    let mut stack = vec![last];
    let mut seen = std::collections::HashSet::new();
    while let Some(c) = stack.pop() {
        if !seen.insert(c) || run.end[c.index()] <= from {
            continue;
        }
        intervals.push((run.start[c.index()].max(from), run.end[c.index()].min(to)));
        stack.extend(
            g.neighbors_directed(c, Direction::Incoming)
                .filter(|&p| g[p].is_comm()),
        );
    }
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut covered, mut reach) = (0.0, from);
    for (start, end) in intervals {
        let start = start.max(reach);
        if end > start {
            covered += end - start;
            reach = end;
        }
    }
    covered
}
