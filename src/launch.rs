//! `planc run` of a plan with several GPUs: one process per local GPU, started here and
//! watched until they end. Each child is this same program with the same arguments and
//! `PLANC_RANK`, `PLANC_LOCAL_RANK`, `PLANC_WORLD_SIZE`, `PLANC_MASTER` set; rank 0 hosts
//! the rendezvous. When one child fails or is killed, the others are stopped at once and
//! the failure is named; children die with this process (no rank is left behind).
//!
//! SIGTERM and SIGUSR1 (a scheduler's warning before preemption or the time limit) are
//! forwarded to every rank, which finish their step, save and exit with
//! `stop::PREEMPTED`; the launcher keeps waiting for them and exits with that status too.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use planc_runtime::train::stop;

/// Where this node stands among the nodes of the run.
pub struct Nodes {
    pub nnodes: usize,
    pub node_rank: usize,
    /// `host:port` of rank 0; chosen here (loopback, a free port) on one node.
    pub master: Option<String>,
}

impl Nodes {
    /// The flags, else what Slurm sets (`SLURM_NNODES`, `SLURM_NODEID`, `MASTER_ADDR`,
    /// `MASTER_PORT`), else one node.
    pub fn resolve(
        nnodes: Option<usize>,
        node_rank: Option<usize>,
        master: Option<String>,
    ) -> Nodes {
        let env = |k: &str| std::env::var(k).ok();
        let nnodes = nnodes
            .or_else(|| env("SLURM_NNODES").and_then(|v| v.parse().ok()))
            .unwrap_or(1);
        let node_rank = node_rank
            .or_else(|| env("SLURM_NODEID").and_then(|v| v.parse().ok()))
            .unwrap_or(0);
        let master = master.or_else(|| match (env("MASTER_ADDR"), env("MASTER_PORT")) {
            (Some(a), Some(p)) => Some(format!("{a}:{p}")),
            _ => None,
        });
        Nodes {
            nnodes,
            node_rank,
            master,
        }
    }
}

fn free_port() -> Option<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .ok()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port())
}

/// Starts this node's ranks and waits for them.
pub fn launch(world: usize, plan_nodes: u64, nodes: &Nodes, args: &[OsString]) -> ExitCode {
    if nodes.nnodes == 0 || !world.is_multiple_of(nodes.nnodes) || nodes.node_rank >= nodes.nnodes {
        eprintln!(
            "error: {} nodes (node rank {}) cannot split the plan's {world} GPUs evenly",
            nodes.nnodes, nodes.node_rank
        );
        return ExitCode::from(2);
    }
    let local = world / nodes.nnodes;
    let master = match (&nodes.master, nodes.nnodes) {
        (Some(m), _) => m.clone(),
        (None, 1) => match free_port() {
            Some(p) => format!("127.0.0.1:{p}"),
            None => {
                eprintln!("error: no free port on loopback for the rendezvous");
                return ExitCode::from(1);
            }
        },
        (None, _) => {
            eprintln!("error: several nodes need --master HOST:PORT (the address of node 0)");
            return ExitCode::from(2);
        }
    };
    let gpus = planc_runtime::local_gpu_count();
    if gpus < local {
        eprintln!(
            "error: the plan places {local} GPUs on this node ({world} over {} node{}); this machine has {gpus}",
            nodes.nnodes,
            if nodes.nnodes == 1 { "" } else { "s" }
        );
        if plan_nodes > 1 && nodes.nnodes == 1 {
            eprintln!(
                "help: the plan has {plan_nodes} nodes: run `planc run PLAN --nnodes {plan_nodes} \
                 --node-rank R --master HOST:PORT` on each, R = 0..{}",
                plan_nodes - 1
            );
        }
        return ExitCode::from(1);
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: cannot find this program to start its ranks: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "launch   {local} ranks on this node (node {} of {}), {world} in all, rendezvous at {master}",
        nodes.node_rank, nodes.nnodes
    );
    // Caught before the ranks start, so that a warning during their start reaches them.
    if let Err(e) = stop::install() {
        eprintln!("error: cannot catch SIGTERM to forward it to the ranks: {e}");
        return ExitCode::from(1);
    }
    let mut children: Vec<(usize, Child)> = Vec::new();
    for i in 0..local {
        let rank = nodes.node_rank * local + i;
        let mut cmd = Command::new(&exe);
        cmd.args(args)
            .env("PLANC_RANK", rank.to_string())
            .env("PLANC_LOCAL_RANK", i.to_string())
            .env("PLANC_WORLD_SIZE", world.to_string())
            .env("PLANC_MASTER", &master)
            .env(
                "NCCL_NVLS_ENABLE",
                std::env::var("NCCL_NVLS_ENABLE").unwrap_or("0".into()),
            );
        // SAFETY: prctl in the child before exec only sets its death signal.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(c) => children.push((rank, c)),
            Err(e) => {
                eprintln!("error: cannot start rank {rank}: {e}");
                stop(&mut children);
                return ExitCode::from(1);
            }
        }
    }
    let mut seen = stop::received();
    let outcome = watch(&mut children, &mut || {
        let now = stop::received();
        if now == seen {
            return None;
        }
        seen = now;
        stop::requested()
    });
    match outcome {
        Outcome::Done => ExitCode::SUCCESS,
        Outcome::Preempted => ExitCode::from(stop::PREEMPTED),
        Outcome::Failed => ExitCode::from(1),
    }
}

/// How the ranks of a node ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    Done,
    /// Every rank ended, at least one with `stop::PREEMPTED` and none failed.
    Preempted,
    Failed,
}

/// Waits for the ranks; forwards each stop signal `signal` reports to the ranks still
/// running and keeps waiting (they finish their step and save). A rank that fails or is
/// killed stops the others.
fn watch(children: &mut Vec<(usize, Child)>, signal: &mut dyn FnMut() -> Option<i32>) -> Outcome {
    let mut preempted = false;
    loop {
        if let Some(sig) = signal() {
            eprintln!(
                "launch   {}: forwarded to the ranks, which finish their step and save",
                stop::signal_name(sig)
            );
            for (_, c) in children.iter_mut() {
                if let Ok(None) = c.try_wait() {
                    // SAFETY: signalling our own child, not yet reaped.
                    unsafe {
                        libc::kill(c.id() as i32, sig);
                    }
                }
            }
        }
        let mut running = 0;
        for k in 0..children.len() {
            let (rank, child) = &mut children[k];
            match child.try_wait() {
                Ok(Some(status)) if status.success() => {}
                Ok(Some(status)) if status.code() == Some(stop::PREEMPTED.into()) => {
                    preempted = true;
                }
                Ok(Some(status)) => {
                    let why = match (status.code(), status.signal()) {
                        (Some(c), _) => format!("exited with status {c}"),
                        (None, Some(sig)) => format!("was killed by signal {sig}"),
                        _ => "ended abnormally".into(),
                    };
                    let rank = *rank;
                    eprintln!(
                        "error: rank {rank} (pid {}) {why}; stopping the other ranks",
                        child.id()
                    );
                    children.remove(k);
                    stop(children);
                    return Outcome::Failed;
                }
                Ok(None) => running += 1,
                Err(e) => {
                    eprintln!("error: cannot watch rank {rank}: {e}");
                    stop(children);
                    return Outcome::Failed;
                }
            }
        }
        if running == 0 {
            return if preempted {
                Outcome::Preempted
            } else {
                Outcome::Done
            };
        }
        // A signal reaches the ranks at most this late: a step of a small model takes a few
        // milliseconds, and at 100 ms two ranks stopped 26-31 steps after SIGTERM (two H200s,
        // 2026-11-28). The ranks still agree on the step at their next scalar sums.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SIGTERM to every child (a rank then finishes its step, unless it waits on the one that
/// failed), SIGKILL to those alive 5 s later, then reap them all.
fn stop(children: &mut [(usize, Child)]) {
    for (_, c) in children.iter() {
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
    }
    let until = Instant::now() + Duration::from_secs(5);
    for (_, c) in children.iter_mut() {
        while Instant::now() < until {
            if let Ok(Some(_)) = c.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank stand-in: exits `on_term` once SIGTERM arrives (after finishing its "step"),
    /// `otherwise` after about `secs` seconds.
    fn rank(on_term: u8, otherwise: u8, secs: u32) -> Child {
        let script = format!(
            "trap 'sleep 0.2; exit {on_term}' TERM; i=0; \
             while [ $i -lt {} ]; do sleep 0.05; i=$((i+1)); done; exit {otherwise}",
            secs * 20
        );
        Command::new("sh").args(["-c", &script]).spawn().unwrap()
    }

    #[test]
    fn a_stop_signal_is_forwarded_and_the_ranks_are_waited_for() {
        let mut children = vec![(0, rank(75, 0, 20)), (1, rank(75, 0, 20))];
        // Let the shells set their traps.
        std::thread::sleep(Duration::from_millis(300));
        let mut once = Some(libc::SIGTERM);
        let t = Instant::now();
        let got = watch(&mut children, &mut || once.take());
        assert_eq!(got, Outcome::Preempted);
        // Each ended through its trap (75), not killed: the launcher waited for them.
        for (_, c) in &mut children {
            assert_eq!(c.try_wait().unwrap().and_then(|s| s.code()), Some(75));
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn a_preempted_rank_is_not_a_failure_and_a_failed_one_stops_the_rest() {
        // One rank preempted early, the other finishing later: preempted, after both.
        let mut children = vec![(0, rank(1, 75, 0)), (1, rank(1, 0, 1))];
        assert_eq!(watch(&mut children, &mut || None), Outcome::Preempted);
        assert!(children
            .iter_mut()
            .all(|(_, c)| c.try_wait().unwrap().is_some()));
        // All finished: done.
        let mut children = vec![(0, rank(1, 0, 0)), (1, rank(1, 0, 0))];
        assert_eq!(watch(&mut children, &mut || None), Outcome::Done);
        // A failure stops the others at once.
        let mut children = vec![(0, rank(1, 3, 0)), (1, rank(9, 0, 60))];
        let t = Instant::now();
        assert_eq!(watch(&mut children, &mut || None), Outcome::Failed);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }
}
