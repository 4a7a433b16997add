//! Discrete-event execution of a step graph.
//!
//! Tasks become ready when everything before them has finished; among ready tasks the
//! earliest starts first. A task that needs shared links (a rank's network send and
//! receive) shares them with the other transfers on them: a link's bandwidth is split
//! equally between the transfers it carries, and a transfer progresses at the share of its
//! most contended link (processor sharing, as a NIC serves the queue pairs of concurrent
//! NCCL operations). So a pipeline send issued while a gradient reduction is under way
//! slows both instead of waiting for the whole reduction, and overlap and contention come
//! out of the run rather than from a formula.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use petgraph::graph::NodeIndex;
use petgraph::Direction;

use crate::graph::{StepGraph, Task};

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

/// A transfer under way: its task and links, the seconds it would still take alone as of
/// `since`, the share of its most contended link it has had since then, and so when it
/// ends if nothing changes.
struct Flow {
    task: u32,
    links: [u32; 4],
    link_count: u8,
    remaining: f64,
    since: f64,
    share: f64,
    ends: f64,
}

impl Flow {
    fn links(&self) -> &[u32] {
        &self.links[..self.link_count as usize]
    }
}

/// The transfers under way and how many each link carries. A transfer's share changes only
/// when one on a link of its starts or ends, so only those are brought up to date then
/// (a step has far more passes than transfers, and a transfer few neighbours).
struct Flows {
    list: Vec<Flow>,
    on_link: Vec<u32>,
    /// The next transfer to finish at the current shares: when, and its index.
    next: Option<(f64, usize)>,
}

impl Flows {
    /// Gives every transfer that shares a link with `links` its share as of `now`.
    fn reshare(&mut self, links: &[u32], now: f64) {
        for f in &mut self.list {
            if !f.links().iter().any(|l| links.contains(l)) {
                continue;
            }
            let busiest = f
                .links()
                .iter()
                .map(|&l| self.on_link[l as usize])
                .max()
                .unwrap_or(1)
                .max(1);
            let share = 1.0 / busiest as f64;
            if share != f.share {
                f.remaining -= (now - f.since) * f.share;
                f.since = now;
                f.share = share;
                f.ends = now + f.remaining / share;
            }
        }
        self.next = self
            .list
            .iter()
            .enumerate()
            .map(|(k, f)| (f.ends, k))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    }

    fn start(&mut self, task: &Task, id: u32, now: f64) {
        for &l in task.links() {
            self.on_link[l as usize] += 1;
        }
        self.list.push(Flow {
            task: id,
            links: task.links,
            link_count: task.link_count,
            remaining: task.duration,
            since: now,
            share: 1.0,
            ends: now + task.duration,
        });
        self.reshare(task.links(), now);
    }

    /// Ends transfer `k` at `now`; returns its task.
    fn finish(&mut self, k: usize, now: f64) -> u32 {
        let f = self.list.swap_remove(k);
        for &l in f.links() {
            self.on_link[l as usize] -= 1;
        }
        self.reshare(f.links(), now);
        f.task
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
    let mut heap: BinaryHeap<Reverse<(Time, u32)>> = BinaryHeap::with_capacity(n / 4 + 1);
    for (i, &w) in waiting.iter().enumerate() {
        if w == 0 {
            heap.push(Reverse((Time(0.0), i as u32)));
        }
    }
    let mut flows = Flows {
        list: Vec::new(),
        on_link: vec![0u32; sg.links.len()],
        next: None,
    };
    let mut now = 0.0f64;
    let mut step: f64 = 0.0;
    let mut done = |i: u32,
                    e: f64,
                    heap: &mut BinaryHeap<Reverse<(Time, u32)>>,
                    end: &mut Vec<f64>,
                    finished: &mut Vec<bool>| {
        end[i as usize] = e;
        finished[i as usize] = true;
        step = step.max(e);
        let idx = NodeIndex::new(i as usize);
        for next in g.neighbors_directed(idx, Direction::Outgoing) {
            let j = next.index();
            ready_at[j] = ready_at[j].max(e);
            waiting[j] -= 1;
            if waiting[j] == 0 {
                heap.push(Reverse((Time(ready_at[j]), j as u32)));
            }
        }
    };
    loop {
        // The next transfer to finish at the current shares, or the next task to start.
        let next_ready = heap.peek().map(|Reverse((Time(t), _))| *t);
        let (t, finishing) = match (flows.next, next_ready) {
            (None, None) => break,
            (Some((te, k)), Some(tr)) if te <= tr => (te, Some(k)),
            (Some((te, k)), None) => (te, Some(k)),
            (_, Some(tr)) => (tr, None),
        };
        now = now.max(t);
        if let Some(k) = finishing {
            let task = flows.finish(k, now);
            done(task, now, &mut heap, &mut end, &mut finished);
            continue;
        }
        let Some(Reverse((Time(ready), i))) = heap.pop() else {
            break;
        };
        let task = &g[NodeIndex::new(i as usize)];
        start[i as usize] = ready;
        if task.links().is_empty() || task.duration <= 0.0 {
            done(i, ready + task.duration, &mut heap, &mut end, &mut finished);
        } else {
            flows.start(task, i, ready);
        }
    }
    Run {
        start,
        end,
        finished,
        step_s: step,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Lane, Task, TaskKind};
    use crate::program::CollectiveOp;
    use petgraph::graph::DiGraph;

    /// A transfer of `seconds` (alone on its links) on link 0, after `after` (a compute task
    /// of that length, so it starts then).
    fn graph(transfers: &[(f64, f64)]) -> (StepGraph, Vec<usize>) {
        let mut g = DiGraph::new();
        let mut ids = Vec::new();
        for &(after, seconds) in transfers {
            let wait = g.add_node(Task {
                rank: 0,
                lane: Lane::Compute,
                kind: TaskKind::Optimizer,
                duration: after,
                comm: 0.0,
                links: [0; 4],
                link_count: 0,
            });
            let t = g.add_node(Task {
                rank: 0,
                lane: Lane::Comm,
                kind: TaskKind::Collective(CollectiveOp::EmbeddingSync),
                duration: seconds,
                comm: 0.0,
                links: [0; 4],
                link_count: 1,
            });
            g.add_edge(wait, t, ());
            ids.push(t.index());
        }
        let sg = StepGraph {
            graph: g,
            ranks: 1,
            links: vec!["rank 0 send".into()],
        };
        (sg, ids)
    }

    #[test]
    fn transfers_on_one_link_share_its_bandwidth() {
        // A 10 s reduction under way when a 1 s send arrives at 2 s: at half the link each,
        // the send ends at 4 s and the reduction at 11 s. First come, first served would
        // have kept the send waiting until 10 s.
        let (sg, ids) = graph(&[(0.0, 10.0), (2.0, 1.0)]);
        let run = execute(&sg);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(
            close(run.end[ids[1]], 4.0),
            "send ends at {}",
            run.end[ids[1]]
        );
        assert!(
            close(run.end[ids[0]], 11.0),
            "reduction ends at {}",
            run.end[ids[0]]
        );
        assert!(close(run.step_s, 11.0));
    }

    #[test]
    fn transfers_on_separate_links_do_not_slow_each_other() {
        let (mut sg, ids) = graph(&[(0.0, 3.0), (0.0, 3.0)]);
        sg.graph[NodeIndex::new(ids[1])].links[0] = 1;
        sg.links.push("rank 1 send".into());
        let run = execute(&sg);
        assert!((run.end[ids[0]] - 3.0).abs() < 1e-9 && (run.end[ids[1]] - 3.0).abs() < 1e-9);
    }
}
