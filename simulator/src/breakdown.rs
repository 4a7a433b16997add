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
    let mut compute = vec![0.0f64; sg.ranks as usize];
    for n in g.node_indices() {
        let t = &g[n];
        if t.lane == Lane::Compute && !t.is_comm() {
            compute[t.rank as usize] += t.duration - t.comm;
        }
    }
    lanes(sg)
        .into_iter()
        .enumerate()
        .map(|(rank, lane)| {
            let (comm, bubble) = waits(sg, run, lane);
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
fn waits(sg: &StepGraph, run: &Run, lane: Vec<NodeIndex>) -> (f64, f64) {
    let g = &sg.graph;
    let mut comm = 0.0;
    let mut bubble = 0.0;
    let mut cursor = 0.0;
    for (n, gap) in stream(sg, run, lane) {
        if let Some(gap) = gap {
            let covered: f64 = gap.cover.iter().map(|(a, b)| b - a).sum();
            comm += covered;
            bubble += gap.to - gap.from - covered;
        }
        comm += g[n].comm;
        cursor = f64::max(cursor, run.end[n.index()]);
    }
    bubble += (run.step_s - cursor).max(0.0);
    (comm, bubble)
}

/// What a rank's compute stream is doing: computing, communicating where the rank
/// waits for it (a pass's in-layer collectives, a transfer a pass waits on), or idle
/// in the pipeline bubble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Use {
    Compute,
    Comm,
    Bubble,
}

/// A stretch of a rank's compute stream; `task` is the pass or optimizer step it belongs
/// to (`None` for waiting).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Piece {
    pub start: f64,
    pub end: f64,
    pub what: Use,
    pub task: Option<NodeIndex>,
}

/// A rank's compute stream from the step's start to its end, cut the way [`per_rank`]
/// counts it: timelines draw these pieces, so the picture and the numbers agree.
pub fn compute_stream(sg: &StepGraph, run: &Run, rank: u32) -> Vec<Piece> {
    let g = &sg.graph;
    let lane = g
        .node_indices()
        .filter(|&n| g[n].lane == Lane::Compute && g[n].rank == rank)
        .collect();
    pieces_of(sg, run, lane)
}

/// [`compute_stream`] of every rank, in rank order (one pass over the graph).
pub fn compute_streams(sg: &StepGraph, run: &Run) -> Vec<Vec<Piece>> {
    lanes(sg)
        .into_iter()
        .map(|lane| pieces_of(sg, run, lane))
        .collect()
}

fn pieces_of(sg: &StepGraph, run: &Run, lane: Vec<NodeIndex>) -> Vec<Piece> {
    let g = &sg.graph;
    let mut pieces = Vec::new();
    let mut cursor = 0.0;
    for (n, gap) in stream(sg, run, lane) {
        if let Some(gap) = gap {
            let mut from = gap.from;
            for &(a, b) in &gap.cover {
                if a > from {
                    pieces.push(piece(from, a, Use::Bubble, None));
                }
                pieces.push(piece(a, b, Use::Comm, None));
                from = b;
            }
            if gap.to > from {
                pieces.push(piece(from, gap.to, Use::Bubble, None));
            }
        }
        let (start, end, comm) = (run.start[n.index()], run.end[n.index()], g[n].comm);
        pieces.push(piece(start, end - comm, Use::Compute, Some(n)));
        if comm > 0.0 {
            pieces.push(piece(end - comm, end, Use::Comm, Some(n)));
        }
        cursor = f64::max(cursor, end);
    }
    if run.step_s > cursor {
        pieces.push(piece(cursor, run.step_s, Use::Bubble, None));
    }
    pieces
}

fn piece(start: f64, end: f64, what: Use, task: Option<NodeIndex>) -> Piece {
    Piece {
        start,
        end,
        what,
        task,
    }
}

/// Idle time on a compute stream before a task, and the parts of it that communication
/// the task waited for covered (sorted, disjoint).
struct Gap {
    from: f64,
    to: f64,
    cover: Vec<(f64, f64)>,
}

/// Every rank's compute-stream tasks, in graph order.
fn lanes(sg: &StepGraph) -> Vec<Vec<NodeIndex>> {
    let g = &sg.graph;
    let mut lanes: Vec<Vec<NodeIndex>> = vec![Vec::new(); sg.ranks as usize];
    for n in g.node_indices() {
        if g[n].lane == Lane::Compute {
            lanes[g[n].rank as usize].push(n);
        }
    }
    lanes
}

/// A compute stream's tasks in order of start, each with the gap before it.
fn stream(sg: &StepGraph, run: &Run, mut lane: Vec<NodeIndex>) -> Vec<(NodeIndex, Option<Gap>)> {
    let g = &sg.graph;
    lane.sort_by(|a, b| run.start[a.index()].total_cmp(&run.start[b.index()]));
    let mut out = Vec::with_capacity(lane.len());
    let mut cursor = 0.0;
    for n in lane {
        let start = run.start[n.index()];
        let gap = (start - cursor > 0.0).then(|| {
            // The predecessor that finished last is what this pass waited for. When it is
            // communication, the rank waited on the network for as long as that transfer
            // and the communication it queued behind (a chain of parameter-gather buckets,
            // say) covered the gap; the rest was waiting for another rank's pass.
            let cause = g
                .neighbors_directed(n, Direction::Incoming)
                .max_by(|a, b| run.end[a.index()].total_cmp(&run.end[b.index()]));
            let cover = match cause {
                Some(c) if g[c].is_comm() => comm_cover(sg, run, c, cursor, start),
                _ => Vec::new(),
            };
            Gap {
                from: cursor,
                to: start,
                cover,
            }
        });
        out.push((n, gap));
        cursor = f64::max(cursor, run.end[n.index()]);
    }
    out
}

/// The parts of `[from, to]` covered by `last` and the communication tasks it waited for
/// (its predecessors through communication only), sorted and disjoint.
fn comm_cover(sg: &StepGraph, run: &Run, last: NodeIndex, from: f64, to: f64) -> Vec<(f64, f64)> {
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
    let mut covered = Vec::new();
    let mut reach = from;
    for (start, end) in intervals {
        let start = start.max(reach);
        if end > start {
            covered.push((start, end));
            reach = end;
        }
    }
    covered
}
