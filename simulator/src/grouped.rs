//! Programs as planc's runtime issues them: consecutive sends and receives go to NCCL as
//! one group (`train::executor`), which deadlocks the interleaved schedule's programs as
//! `program::build` orders them. [`regroup`] orders their messages so that grouping cannot
//! deadlock; `lower` gives `framework = planc`'s interleaved plans that order, so the hang
//! checks and the timing run on the program the runtime executes. [`play`] plays programs
//! with that grouping (the tests' check that it holds).

use std::collections::{HashMap, HashSet};

use crate::program::{Instr, Message};

/// The pipeline programs reordered so that grouping consecutive sends and receives into
/// one NCCL group cannot deadlock, for any schedule (the interleaved one needs it).
///
/// A run in which sends never wait gives every message a level: the order in which it was
/// sent. Each rank keeps its passes in program order and issues its messages in level
/// order, a receive as late as the next pass that needs it allows and a send as soon as
/// the pass that produced it has run. Then the pending message of least level is the next
/// operation of both its ranks once they finish the passes before it, and those passes
/// only need messages of lower level: the programs run to the end. Messages of equal
/// level do not exist, so each group pairs one for one with its peers' groups.
pub fn regroup(programs: &[Vec<Instr>]) -> Vec<Vec<Instr>> {
    let level = send_order(programs);
    programs
        .iter()
        .map(|prog| {
            // Each message with its level and its place among the passes (how many come
            // before it): a send goes out after that many passes, a receive before the next.
            let mut msgs: Vec<(usize, bool, usize, &Instr)> = Vec::new();
            let mut passes: Vec<&Instr> = Vec::new();
            for ins in prog {
                match ins {
                    Instr::Send { message, .. } | Instr::Recv { message, .. } => {
                        let lv = level.get(message).copied().unwrap_or(usize::MAX);
                        let send = matches!(ins, Instr::Send { .. });
                        msgs.push((lv, send, passes.len(), ins));
                    }
                    _ => passes.push(ins),
                }
            }
            msgs.sort_by_key(|m| m.0);
            let mut out = Vec::with_capacity(prog.len());
            let mut next = 0usize;
            // Issues messages in level order until none that `due` names is left.
            let mut issue = |out: &mut Vec<Instr>, due: &dyn Fn(bool, usize) -> bool| {
                while msgs[next..].iter().any(|m| due(m.1, m.2)) {
                    out.push(*msgs[next].3);
                    next += 1;
                }
            };
            for (k, pass) in passes.iter().enumerate() {
                issue(&mut out, &|send, at| !send && at <= k);
                out.push(**pass);
                issue(&mut out, &|send, at| send && at <= k + 1);
            }
            issue(&mut out, &|_, _| true);
            out
        })
        .collect()
}

/// Each message's place in a run of `programs` in which sends never wait and a receive
/// waits for its send: the order of the sends.
fn send_order(programs: &[Vec<Instr>]) -> HashMap<Message, usize> {
    let mut level = HashMap::new();
    let mut pc = vec![0usize; programs.len()];
    loop {
        let mut progress = false;
        for (r, prog) in programs.iter().enumerate() {
            while let Some(ins) = prog.get(pc[r]) {
                match ins {
                    Instr::Send { message, .. } => {
                        let n = level.len();
                        level.insert(*message, n);
                    }
                    Instr::Recv { message, .. } if !level.contains_key(message) => break,
                    _ => {}
                }
                pc[r] += 1;
                progress = true;
            }
        }
        if !progress {
            return level;
        }
    }
}

/// Plays the pipeline programs as planc's runtime issues them (`train::executor`): consecutive sends and receives
/// as one NCCL group, which completes once the peer of each of its operations has
/// posted the matching one; every other instruction runs on. Returns the ranks stuck
/// if the programs deadlock.
pub fn play(programs: &[Vec<Instr>]) -> Result<(), Vec<usize>> {
    type Op = (bool, usize, Message);
    let steps: Vec<Vec<Vec<Op>>> = programs
        .iter()
        .map(|ins| {
            let mut out: Vec<Vec<Op>> = Vec::new();
            let mut open = false;
            for i in ins {
                let op = match i {
                    Instr::Send { to, message } => Some((true, *to as usize, *message)),
                    Instr::Recv { from, message } => Some((false, *from as usize, *message)),
                    _ => None,
                };
                match op {
                    Some(op) if open => out.last_mut().unwrap().push(op),
                    Some(op) => {
                        out.push(vec![op]);
                        open = true;
                    }
                    None => {
                        out.push(Vec::new());
                        open = false;
                    }
                }
            }
            out
        })
        .collect();
    // Each operation completes once its peer has posted the matching one (its group is
    // the peer's current one); a group ends when all its operations have completed.
    let mut at = vec![0usize; programs.len()];
    let mut completed: HashSet<(usize, Op)> = HashSet::new();
    loop {
        if (0..at.len()).all(|r| at[r] == steps[r].len()) {
            return Ok(());
        }
        let mut progress = false;
        for r in 0..at.len() {
            let Some(g) = steps[r].get(at[r]) else {
                continue;
            };
            for op in g {
                let (send, peer, m) = *op;
                let other = (!send, r, m);
                if !completed.contains(&(r, *op))
                    && steps[peer]
                        .get(at[peer])
                        .is_some_and(|pg| pg.contains(&other))
                {
                    completed.insert((r, *op));
                    completed.insert((peer, other));
                    progress = true;
                }
            }
        }
        for r in 0..at.len() {
            if steps[r]
                .get(at[r])
                .is_some_and(|g| g.iter().all(|op| completed.contains(&(r, *op))))
            {
                at[r] += 1;
                progress = true;
            }
        }
        if !progress {
            return Err((0..at.len()).filter(|&r| at[r] < steps[r].len()).collect());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{build, live_sets, Payload, StepOptions};
    use crate::schedule::{Pass, ScheduleKind};

    #[test]
    fn pipeline_programs_run_without_deadlock_as_the_runtime_groups_messages() {
        for kind in [ScheduleKind::Gpipe, ScheduleKind::OneFOneB] {
            for (ranks, micro_batches) in [(2, 4), (2, 8), (4, 4), (4, 8), (4, 16), (8, 8)] {
                let opts = StepOptions {
                    tied_embedding: true,
                    ..StepOptions::default()
                };
                let p = build(kind, ranks, micro_batches, opts);
                assert_eq!(
                    play(&p.ranks),
                    Ok(()),
                    "{kind:?} over {ranks} ranks, {micro_batches} micro-batches"
                );
            }
        }
        // Interleaved programs send a gradient, run a forward, then send an activation and
        // receive a gradient; grouped this way the two ranks wait on each other, which is
        // why planc's programs are regrouped (`regroup`; moving each send to the group of the
        // next receive does not help: the per-direction orders agree, but the two
        // directions interleave differently on the two ranks).
        let p = build(
            ScheduleKind::Interleaved { vpp: 2 },
            2,
            4,
            StepOptions::default(),
        );
        assert!(play(&p.ranks).is_err());
        // The check can fail: two ranks that both receive first never start.
        let m = Message {
            payload: Payload::Activation,
            micro_batch: 0,
            virtual_stage: 1,
        };
        let stuck = vec![
            vec![
                Instr::Recv {
                    from: 1,
                    message: m,
                },
                Instr::Optimizer,
                Instr::Send { to: 1, message: m },
            ],
            vec![
                Instr::Recv {
                    from: 0,
                    message: m,
                },
                Instr::Optimizer,
                Instr::Send { to: 0, message: m },
            ],
        ];
        assert_eq!(play(&stuck), Err(vec![0, 1]));
    }

    #[test]
    fn regrouped_programs_run_without_deadlock_for_every_schedule() {
        for kind in [
            ScheduleKind::Gpipe,
            ScheduleKind::OneFOneB,
            ScheduleKind::Interleaved { vpp: 2 },
            ScheduleKind::Interleaved { vpp: 3 },
            ScheduleKind::Interleaved { vpp: 4 },
            ScheduleKind::Interleaved { vpp: 8 },
        ] {
            for (ranks, micro_batches) in [
                (2, 2),
                (2, 4),
                (2, 8),
                (3, 6),
                (4, 4),
                (4, 8),
                (4, 16),
                (8, 8),
                (8, 16),
            ] {
                let opts = StepOptions {
                    tied_embedding: true,
                    ..StepOptions::default()
                };
                let p = build(kind, ranks, micro_batches, opts);
                let q = regroup(&p.ranks);
                let what = format!("{kind:?} over {ranks} ranks, {micro_batches} micro-batches");
                assert_eq!(play(&q), Ok(()), "{what}");
                for (orig, new) in p.ranks.iter().zip(&q) {
                    // Same instructions; passes in the same order; a send after the pass
                    // that produced it, a receive before the pass that needs it.
                    assert_eq!(orig.len(), new.len(), "{what}");
                    let passes = |v: &[Instr]| -> Vec<String> {
                        v.iter()
                            .filter(|i| !matches!(i, Instr::Send { .. } | Instr::Recv { .. }))
                            .map(|i| format!("{i:?}"))
                            .collect()
                    };
                    assert_eq!(passes(orig), passes(new), "{what}");
                    let place = |v: &[Instr]| {
                        let mut before = 0;
                        let mut at = std::collections::HashMap::new();
                        for i in v {
                            match i {
                                Instr::Send { message, .. } => {
                                    at.insert((true, *message), before);
                                }
                                Instr::Recv { message, .. } => {
                                    at.insert((false, *message), before);
                                }
                                _ => before += 1,
                            }
                        }
                        at
                    };
                    let (a, b) = (place(orig), place(new));
                    assert_eq!(a.len(), b.len(), "{what}");
                    for (k, &was) in &a {
                        let now = b[k];
                        if k.0 {
                            assert!(now >= was, "{what}: a send before its pass");
                        } else {
                            assert!(now <= was, "{what}: a receive after its pass");
                        }
                    }
                    // The sets the runtime allocates: as many as before for the schedules
                    // that ran before, at most two more (a receive posted before a
                    // backward returns one) for the interleaved one.
                    let r = ranks as usize;
                    let (was, now) = (live_sets(orig, r), live_sets(new, r));
                    if matches!(kind, ScheduleKind::Interleaved { .. }) {
                        assert!(now <= was + 2, "{what}: {was} -> {now} sets");
                    } else {
                        // As the forwards not yet matched by a backward count them (what
                        // the memory model counts).
                        let mut live = 0i64;
                        let mut most = 1i64;
                        for i in orig {
                            match i {
                                Instr::Run(w) if w.pass == Pass::Forward => live += 1,
                                Instr::Run(w) if w.pass == Pass::Backward => live -= 1,
                                _ => {}
                            }
                            most = most.max(live);
                        }
                        assert_eq!(was, most as usize, "{what}");
                    }
                }
            }
        }
    }
}
