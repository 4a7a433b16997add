//! Hang detection before anything runs: every send must meet its receive in the same
//! order on both sides, every member of a group must issue the group's collectives in the
//! same order, and the passes must not wait on each other in a circle.
//!
//! These are the hangs of seed 001's production stories (a rank that skips a collective,
//! two stages that both wait to receive first): NCCL gives no error, only a timeout.

use std::collections::HashMap;

use petgraph::graph::NodeIndex;
use petgraph::Direction;
use serde::Serialize;

use crate::engine::Run;
use crate::graph::{StepGraph, TaskKind};
use crate::program::{CollectiveOp, GroupKind, Instr, Message, Program, Rank};

/// A way the program would hang, with the ranks involved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hang {
    pub ranks: Vec<Rank>,
    pub message: String,
}

fn ordinal(i: usize) -> String {
    let n = i + 1;
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Static checks of message and collective order.
pub fn check_order(program: &Program) -> Vec<Hang> {
    let mut hangs = Vec::new();
    let ranks = program.pipeline_ranks();
    let channel = |from: Rank, to: Rank| (from * ranks + to) as usize;
    let mut sent: Vec<Vec<Message>> = vec![Vec::new(); (ranks * ranks) as usize];
    let mut received: Vec<Vec<Message>> = vec![Vec::new(); (ranks * ranks) as usize];
    let mut collectives: HashMap<GroupKind, HashMap<Rank, Vec<CollectiveOp>>> = HashMap::new();
    for (rank, instrs) in program.ranks.iter().enumerate() {
        let rank = rank as Rank;
        for instr in instrs {
            match *instr {
                Instr::Send { to, message } => sent[channel(rank, to)].push(message),
                Instr::Recv { from, message } => received[channel(from, rank)].push(message),
                Instr::Collective { group, op } => collectives
                    .entry(group)
                    .or_default()
                    .entry(rank)
                    .or_default()
                    .push(op),
                _ => {}
            }
        }
    }
    let pairs = (0..ranks).flat_map(|a| (0..ranks).map(move |b| (a, b)));
    for (a, b) in pairs {
        let s = &sent[channel(a, b)];
        let r = &received[channel(a, b)];
        if let Some(i) = (0..s.len().min(r.len())).find(|&i| s[i] != r[i]) {
            hangs.push(Hang {
                ranks: vec![a, b],
                message: format!(
                    "rank {a}'s {} send to rank {b} is the {}, but rank {b}'s {} receive from rank {a} expects the {}",
                    ordinal(i), s[i], ordinal(i), r[i]
                ),
            });
        } else if s.len() != r.len() {
            let (more, fewer) = if s.len() > r.len() {
                ("sends", "receives")
            } else {
                ("receives", "sends")
            };
            let (x, y) = if s.len() > r.len() {
                (s.len(), r.len())
            } else {
                (r.len(), s.len())
            };
            let extra = if s.len() > r.len() {
                s[r.len()]
            } else {
                r[s.len()]
            };
            hangs.push(Hang {
                ranks: vec![a, b],
                message: format!(
                    "rank {a} → rank {b}: {x} {more} but only {y} {fewer}; the {} ({extra}) is never matched",
                    ordinal(y)
                ),
            });
        }
    }
    let mut groups: Vec<_> = collectives.into_iter().collect();
    groups.sort_by_key(|(g, _)| format!("{g:?}"));
    for (group, by_rank) in groups {
        let members = program.members(group);
        let empty = Vec::new();
        let first = members[0];
        let reference = by_rank.get(&first).unwrap_or(&empty);
        for &m in &members[1..] {
            let other = by_rank.get(&m).unwrap_or(&empty);
            let i =
                (0..reference.len().max(other.len())).find(|&i| reference.get(i) != other.get(i));
            if let Some(i) = i {
                let say =
                    |x: Option<&CollectiveOp>| x.map_or("nothing".to_string(), |c| c.to_string());
                hangs.push(Hang {
                    ranks: vec![first, m],
                    message: format!(
                        "in the {group:?} group, rank {first}'s {} collective is the {} but rank {m}'s is {}",
                        ordinal(i),
                        say(reference.get(i)),
                        say(other.get(i)),
                    ),
                });
            }
        }
    }
    hangs
}

/// After a run that did not finish: which rank waits for what, around the cycle.
pub fn explain_stall(sg: &StepGraph, run: &Run) -> Hang {
    let g = &sg.graph;
    let describe = |n: NodeIndex| -> String {
        let t = &g[n];
        match t.kind {
            TaskKind::Pass(w) => format!("rank {} {w}", t.rank),
            TaskKind::Transfer(m) => format!("rank {}'s send of the {m}", t.rank),
            TaskKind::Collective(c) => format!("rank {}'s {c}", t.rank),
            TaskKind::Optimizer => format!("rank {}'s optimizer step", t.rank),
        }
    };
    // The first unfinished task of each rank, and the unfinished task it waits for.
    let mut lines = Vec::new();
    let mut ranks = Vec::new();
    for r in 0..sg.ranks {
        let Some(first) = g.node_indices().find(|&n| {
            g[n].rank == r && !run.finished[n.index()] && matches!(g[n].kind, TaskKind::Pass(_))
        }) else {
            continue;
        };
        let blocker = g
            .neighbors_directed(first, Direction::Incoming)
            .find(|&p| !run.finished[p.index()] && g[p].rank != r)
            .or_else(|| {
                g.neighbors_directed(first, Direction::Incoming)
                    .find(|&p| !run.finished[p.index()])
            });
        if let Some(b) = blocker {
            // A transfer is waiting for the pass that produces it.
            let cause = g
                .neighbors_directed(b, Direction::Incoming)
                .find(|&p| !run.finished[p.index()] && matches!(g[p].kind, TaskKind::Pass(_)));
            let what = match cause {
                Some(c) if matches!(g[b].kind, TaskKind::Transfer(_)) => {
                    format!("{} (after {})", describe(b), describe(c))
                }
                _ => describe(b),
            };
            lines.push(format!("{} waits for {what}", describe(first)));
            ranks.push(r);
        }
    }
    Hang {
        ranks,
        message: format!(
            "the passes wait on each other in a cycle: {}",
            lines.join("; ")
        ),
    }
}
