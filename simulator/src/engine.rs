//! Discrete-event execution of a step graph.
//!
//! Tasks become ready when everything before them has finished; among ready tasks the
//! earliest starts first, and a task that needs a shared link waits until the link is
//! free (first come, first served). So overlap (a gradient reduction running beside
//! backward passes) and contention (pipeline sends and gradient reductions on one NIC)
//! come out of the run rather than from a formula.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use petgraph::graph::NodeIndex;
use petgraph::Direction;

use crate::graph::StepGraph;

/// Seconds, totally ordered (durations are never NaN; `total_cmp` keeps the heap sound
/// even if one were).
#[derive(Clone, Copy, Debug)]
struct Time(f64);

impl PartialEq for Time {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Time {}

impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Time {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// When each task ran. `finished == false` tasks never became ready: the program waits
/// on itself (see the deadlock checker).
pub struct Run {
    pub start: Vec<f64>,
    pub end: Vec<f64>,
    pub finished: Vec<bool>,
    pub step_s: f64,
}

impl Run {
    pub fn complete(&self) -> bool {
        self.finished.iter().all(|&f| f)
    }
}

pub fn execute(sg: &StepGraph) -> Run {
    let g = &sg.graph;
    let n = g.node_count();
    let mut waiting: Vec<u32> = vec![0; n];
    for e in g.raw_edges() {
        waiting[e.target().index()] += 1;
    }
    let mut ready_at = vec![0.0f64; n];
    let mut start = vec![0.0f64; n];
    let mut end = vec![0.0f64; n];
    let mut finished = vec![false; n];
    let mut link_free = vec![0.0f64; sg.links.len()];
    let mut heap: BinaryHeap<Reverse<(Time, u32)>> = BinaryHeap::with_capacity(n / 4 + 1);
    for (i, &w) in waiting.iter().enumerate() {
        if w == 0 {
            heap.push(Reverse((Time(0.0), i as u32)));
        }
    }
    let mut step: f64 = 0.0;
    while let Some(Reverse((Time(ready), i))) = heap.pop() {
        let idx = NodeIndex::new(i as usize);
        let task = &g[idx];
        let mut s = ready;
        for &l in task.links() {
            s = s.max(link_free[l as usize]);
        }
        let e = s + task.duration;
        for &l in task.links() {
            link_free[l as usize] = e;
        }
        start[i as usize] = s;
        end[i as usize] = e;
        finished[i as usize] = true;
        step = step.max(e);
        for next in g.neighbors_directed(idx, Direction::Outgoing) {
            let j = next.index();
            ready_at[j] = ready_at[j].max(e);
            waiting[j] -= 1;
            if waiting[j] == 0 {
                heap.push(Reverse((Time(ready_at[j]), j as u32)));
            }
        }
    }
    Run {
        start,
        end,
        finished,
        step_s: step,
    }
}
