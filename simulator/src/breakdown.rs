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

pub fn breakdown(sg: &StepGraph, run: &Run) -> Breakdown {
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
    let rank = (0..sg.ranks as usize)
        .max_by(|&a, &b| compute[a].total_cmp(&compute[b]))
        .unwrap_or(0);
    let lane = &mut lanes[rank];
    lane.sort_by(|a, b| run.start[a.index()].total_cmp(&run.start[b.index()]));
    let mut comm = 0.0;
    let mut bubble = 0.0;
    let mut cursor = 0.0;
    for &n in lane.iter() {
        let t = &g[n];
        let gap = run.start[n.index()] - cursor;
        if gap > 0.0 {
            // The predecessor that finished last is what this pass waited for.
            let cause = g
                .neighbors_directed(n, Direction::Incoming)
                .max_by(|a, b| run.end[a.index()].total_cmp(&run.end[b.index()]));
            match cause {
                Some(c) if g[c].is_comm() => {
                    let waited_on_link = gap.min(g[c].duration);
                    comm += waited_on_link;
                    bubble += gap - waited_on_link;
                }
                _ => bubble += gap,
            }
        }
        comm += t.comm;
        cursor = cursor.max(run.end[n.index()]);
    }
    bubble += (run.step_s - cursor).max(0.0);
    Breakdown {
        rank: rank as u32,
        step_s: run.step_s,
        compute_s: compute[rank],
        exposed_comm_s: comm,
        bubble_s: bubble,
    }
}
