//! The step graph: a petgraph DAG of one training step. Nodes are tasks with a duration,
//! the rank and lane (compute or communication stream) they run on, and the shared links
//! they occupy; edges are "must finish before". Lane order is expressed as edges too, so
//! the engine needs nothing but the graph.

use std::collections::HashMap;

use petgraph::graph::{DiGraph, NodeIndex};
use serde::Serialize;

use crate::program::{CollectiveOp, GroupKind, Instr, Message, Program, Rank};
use crate::schedule::{Pass, Work};

/// Durations of everything a program does, in seconds.
#[derive(Clone, Debug, Default)]
pub struct Costs {
    /// Per virtual stage: forward compute, and its exposed in-layer communication
    /// (tensor/sequence/context/expert-parallel collectives).
    pub forward: Vec<(f64, f64)>,
    /// Per virtual stage: backward compute (all of it), and its in-layer communication.
    pub backward: Vec<(f64, f64)>,
    /// Per virtual stage: the weight-gradient part of the backward compute.
    pub weight_grad: Vec<f64>,
    /// One pipeline message.
    pub p2p: f64,
    /// Per virtual stage: reducing that chunk's gradients over data parallelism, whole.
    pub grad_reduce: Vec<f64>,
    /// Per virtual stage: gathering that chunk's parameters (ZeRO).
    pub param_gather: Vec<f64>,
    pub embedding_sync: f64,
    /// Per rank.
    pub optimizer: Vec<f64>,
    /// Per rank: the share of the passes' rate a data-parallel reduction and a parameter
    /// gather take while they run beside them (`contention`); empty: none.
    pub contention: Vec<(f64, f64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Lane {
    Compute,
    Comm,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum TaskKind {
    /// A pass (or a bucket-sized piece of one). Its in-layer collectives (tensor-,
    /// context-, expert-parallel) are serialized with it on the compute stream, so they
    /// are part of the task: the last `comm` seconds of its duration.
    Pass(Work),
    Transfer(Message),
    Collective(CollectiveOp),
    Optimizer,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Task {
    pub rank: Rank,
    pub lane: Lane,
    pub kind: TaskKind,
    pub duration: f64,
    /// Of `duration`, the in-layer communication at its end (passes only).
    pub comm: f64,
    /// Shared links it occupies (indices into [`StepGraph::links`]); at most four.
    #[serde(skip)]
    pub links: [u32; 4],
    #[serde(skip)]
    pub link_count: u8,
}

impl Task {
    pub fn links(&self) -> &[u32] {
        &self.links[..self.link_count as usize]
    }

    pub fn is_comm(&self) -> bool {
        !matches!(self.kind, TaskKind::Pass(_) | TaskKind::Optimizer)
    }
}

pub struct StepGraph {
    pub graph: DiGraph<Task, ()>,
    pub ranks: u32,
    /// Link names, e.g. `rank 3 send`.
    pub links: Vec<String>,
}

/// A chunk's gradient reduction runs as at most this many tasks, so that huge chunks do
/// not make huge graphs. The last task is always exactly one bucket (what is exposed
/// after the backward pass ends); the others share the rest.
const MAX_BUCKET_TASKS: u32 = 16;

/// Fractions of a chunk's gradients in each reduction task, for `buckets` real buckets.
fn bucket_fractions(buckets: u32) -> Vec<f64> {
    let n = buckets.max(1);
    let k = n.min(MAX_BUCKET_TASKS);
    if k == 1 {
        return vec![1.0];
    }
    let last = 1.0 / n as f64;
    let mut f = vec![(1.0 - last) / (k - 1) as f64; k as usize - 1];
    f.push(last);
    f
}

/// Parameter gathers in the order the forward pass needs them: the first bucket is what
/// the pass waits for before it can start, so it is one real bucket; the rest share.
fn gather_fractions(buckets: u32) -> Vec<f64> {
    let mut f = bucket_fractions(buckets);
    f.reverse();
    f
}

fn tx(rank: Rank) -> u32 {
    rank * 2
}

fn rx(rank: Rank) -> u32 {
    rank * 2 + 1
}

struct Builder<'a> {
    g: DiGraph<Task, ()>,
    costs: &'a Costs,
    ranks: u32,
}

impl Builder<'_> {
    fn add(
        &mut self,
        rank: Rank,
        lane: Lane,
        kind: TaskKind,
        duration: f64,
        links: &[u32],
    ) -> NodeIndex {
        let mut l = [0u32; 4];
        l[..links.len()].copy_from_slice(links);
        self.g.add_node(Task {
            rank,
            lane,
            kind,
            duration,
            comm: 0.0,
            links: l,
            link_count: links.len() as u8,
        })
    }

    fn edge(&mut self, a: Option<NodeIndex>, b: NodeIndex) {
        if let Some(a) = a {
            self.g.add_edge(a, b, ());
        }
    }

    fn pass_costs(&self, work: Work, rank: Rank, split: bool) -> (f64, f64) {
        let v = (work.chunk * self.ranks + rank) as usize;
        let c = self.costs;
        match work.pass {
            Pass::Forward => c.forward[v],
            Pass::Backward if split => (c.backward[v].0 - c.weight_grad[v], c.backward[v].1),
            Pass::Backward => c.backward[v],
            Pass::WeightGrad => (c.weight_grad[v], 0.0),
        }
    }
}

/// Builds the DAG of `program` with `costs`. Pipeline messages are matched in order per
/// (sender, receiver) pair, as NCCL matches them; the deadlock checker has already made
/// sure that order agrees on both sides.
pub fn build(program: &Program, costs: &Costs) -> StepGraph {
    let ranks = program.pipeline_ranks();
    let split = program.schedule.splits_backward();
    let mut b = Builder {
        g: DiGraph::with_capacity(0, 0),
        costs,
        ranks,
    };
    // (from, to) → transfers in send order; receives waiting for them: (from, to) → runs.
    // Indexed by from · ranks + to: pipeline channels are dense and hashing them per
    // message was a tenth of the simulation's time.
    let channel = |from: Rank, to: Rank| (from * ranks + to) as usize;
    let mut sends: Vec<Vec<NodeIndex>> = vec![Vec::new(); (ranks * ranks) as usize];
    let mut receivers: Vec<Vec<NodeIndex>> = vec![Vec::new(); (ranks * ranks) as usize];
    let mut shared: HashMap<(GroupKind, usize), Vec<NodeIndex>> = HashMap::new();
    for (rank, instrs) in program.ranks.iter().enumerate() {
        let rank = rank as Rank;
        let mut last_compute: Option<NodeIndex> = None;
        let mut last_comm: Option<NodeIndex> = None;
        // What the next pass must wait for: blocking sends, gathers of its chunk.
        let mut gates: Vec<NodeIndex> = Vec::new();
        // Gather tasks (in bucket order) the next pass of a chunk consumes.
        let mut gathers: Vec<(Vec<NodeIndex>, Vec<f64>)> =
            vec![(Vec::new(), Vec::new()); program.chunks() as usize];
        let mut pending_recvs: Vec<usize> = Vec::new();
        // Pieces of the most recent pass, for bucketed gradient reduction.
        let mut last_pieces: Vec<NodeIndex> = Vec::new();
        let mut group_seen: HashMap<GroupKind, usize> = HashMap::new();
        for (i, instr) in instrs.iter().enumerate() {
            match *instr {
                Instr::Run(work) => {
                    let (compute, comm) = b.pass_costs(work, rank, split);
                    // Split the pass when its gradients are reduced in buckets right after,
                    // or when it consumes its parameters bucket by bucket as they arrive.
                    // (Messages may sit between: a regrouped program's, `grouped`.)
                    let reduce_buckets = instrs[i + 1..]
                        .iter()
                        .find(|x| !matches!(x, Instr::Send { .. } | Instr::Recv { .. }))
                        .map_or(1, |x| match x {
                            Instr::Collective {
                                op: CollectiveOp::GradReduce { buckets, .. },
                                ..
                            } => *buckets,
                            _ => 1,
                        });
                    let (gather, gather_split) = std::mem::take(&mut gathers[work.chunk as usize]);
                    let fractions = if reduce_buckets > 1 || gather.len() <= 1 {
                        bucket_fractions(reduce_buckets)
                    } else {
                        gather_split
                    };
                    let per_piece_gather = fractions.len() == gather.len() && gather.len() > 1;
                    last_pieces.clear();
                    for (p, fraction) in fractions.iter().enumerate() {
                        let n = b.add(
                            rank,
                            Lane::Compute,
                            TaskKind::Pass(work),
                            compute * fraction,
                            &[],
                        );
                        b.edge(last_compute, n);
                        if per_piece_gather {
                            b.g.add_edge(gather[p], n, ());
                        }
                        if p == 0 {
                            for gate in gates.drain(..) {
                                b.g.add_edge(gate, n, ());
                            }
                            if !per_piece_gather {
                                for &g in &gather {
                                    b.g.add_edge(g, n, ());
                                }
                            }
                            for key in pending_recvs.drain(..) {
                                receivers[key].push(n);
                            }
                        }
                        last_compute = Some(n);
                        last_pieces.push(n);
                    }
                    if let Some(&last) = last_pieces.last() {
                        b.g[last].duration += comm;
                        b.g[last].comm = comm;
                    }
                }
                Instr::Send { to, message } => {
                    let n = b.add(
                        rank,
                        Lane::Comm,
                        TaskKind::Transfer(message),
                        costs.p2p,
                        &[tx(rank), rx(to)],
                    );
                    b.edge(last_compute, n);
                    sends[channel(rank, to)].push(n);
                    // Without overlap, Megatron waits for its sends before the next pass.
                    if !program.overlap_p2p {
                        gates.push(n);
                    }
                }
                Instr::Recv { from, .. } => pending_recvs.push(channel(from, rank)),
                Instr::Collective { group, op } => {
                    let index = group_seen.entry(group).or_insert(0);
                    let key = (group, *index);
                    *index += 1;
                    let members = program.members(group);
                    let links: Vec<u32> = members
                        .iter()
                        .flat_map(|&m| [tx(m), rx(m)])
                        .take(4)
                        .collect();
                    let chain = shared.entry(key).or_insert_with(|| {
                        let (d, fractions) = match op {
                            CollectiveOp::GradReduce { chunk, buckets } => (
                                costs.grad_reduce[(chunk * ranks + rank) as usize],
                                bucket_fractions(buckets),
                            ),
                            CollectiveOp::ParamGather { chunk, buckets } => (
                                costs.param_gather[(chunk * ranks + rank) as usize],
                                gather_fractions(buckets),
                            ),
                            CollectiveOp::EmbeddingSync => (costs.embedding_sync, vec![1.0]),
                        };
                        let first = b.add(
                            rank,
                            Lane::Comm,
                            TaskKind::Collective(op),
                            d * fractions[0],
                            &links,
                        );
                        let mut chain = vec![first];
                        let mut prev = first;
                        {
                            // One task per bucket group; a reduction's bucket follows the
                            // piece of the pass that produced its gradients.
                            for (k, fraction) in fractions.iter().enumerate().skip(1) {
                                let nk = b.add(
                                    rank,
                                    Lane::Comm,
                                    TaskKind::Collective(op),
                                    d * fraction,
                                    &links,
                                );
                                b.g.add_edge(prev, nk, ());
                                if matches!(op, CollectiveOp::GradReduce { .. }) {
                                    if let Some(&piece) = last_pieces.get(k) {
                                        b.g.add_edge(piece, nk, ());
                                    }
                                }
                                chain.push(nk);
                                prev = nk;
                            }
                        }
                        chain
                    });
                    let n = chain[0];
                    let tail = *chain.last().expect("a chain has a task");
                    let chain = chain.clone();
                    // The collective joins this member's lane order.
                    b.edge(last_comm, n);
                    match op {
                        CollectiveOp::GradReduce { .. } => {
                            if let Some(&piece) = last_pieces.first() {
                                b.g.add_edge(piece, n, ());
                            }
                            // The lane continues after the last bucket.
                            last_comm = Some(tail);
                        }
                        CollectiveOp::ParamGather { chunk, buckets } => {
                            gathers[chunk as usize] = (chain, gather_fractions(buckets));
                            last_comm = Some(tail);
                        }
                        CollectiveOp::EmbeddingSync => {
                            b.edge(last_compute, n);
                            last_comm = Some(n);
                        }
                    }
                }
                Instr::Optimizer => {
                    let n = b.add(
                        rank,
                        Lane::Compute,
                        TaskKind::Optimizer,
                        costs.optimizer[rank as usize],
                        &[],
                    );
                    b.edge(last_compute, n);
                    b.edge(last_comm, n);
                    for gate in gates.drain(..) {
                        b.g.add_edge(gate, n, ());
                    }
                    last_compute = Some(n);
                }
            }
        }
    }
    for (transfers, runs) in sends.iter().zip(&receivers) {
        for (t, r) in transfers.iter().zip(runs) {
            b.g.add_edge(*t, *r, ());
        }
    }
    let links = (0..ranks)
        .flat_map(|r| [format!("rank {r} send"), format!("rank {r} receive")])
        .collect();
    StepGraph {
        graph: b.g,
        ranks,
        links,
    }
}
