//! `planc solve`: fill the holes of a plan with the best layout.
//!
//! The space comes from the holes ([`space`]); every layout is checked against the rules
//! ([`rules`], the same ones `validate` applies), and the survivors are costed in parallel
//! (rayon) with the closed-form cost model, cheapest memory check first. When nothing
//! survives, [`explain`] asks z3 which rules conflict and tries the smallest changes.
//!
//! Ranking uses the closed form; the binary re-times the finalists with the simulator, so
//! that `solve` and `check` report the same step time for the plan they pick.

pub mod balance;
pub mod explain;
pub mod rules;
pub mod space;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde::Serialize;

use crate::cost::{estimate, memory::stage_memory, stage_group, Estimate};
use crate::plan::{Objective, Parallel, Plan, PlanSpec};
use rules::Rule;
use space::Space;

/// What limits a candidate most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limiter {
    Memory,
    Bubble,
    Communication,
    Compute,
}

impl Limiter {
    pub fn as_str(self) -> &'static str {
        match self {
            Limiter::Memory => "memory",
            Limiter::Bubble => "bubble",
            Limiter::Communication => "communication",
            Limiter::Compute => "compute",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Candidate {
    pub plan: Plan,
    pub estimate: Estimate,
    /// Peak memory over capacity, on the fullest stage.
    pub memory_fraction: f64,
    pub limiter: Limiter,
}

#[derive(Debug, Default)]
pub struct Solution {
    /// Product of the domain sizes: the space before any rule.
    pub space_size: u64,
    /// Layouts that tile the cluster.
    pub layouts: usize,
    /// Layouts rejected by each rule (first failing rule counts).
    pub rejected: Vec<(Rule, usize)>,
    pub over_memory: usize,
    /// Every valid candidate, best first by the objective.
    pub ranked: Vec<Candidate>,
    /// Indices into `ranked` of the memory/throughput Pareto front, least memory first.
    pub pareto: Vec<usize>,
    pub explanation: Option<explain::Explanation>,
    pub elapsed: Duration,
    /// The space is larger than [`MAX_SPACE`]: nothing was searched.
    pub refused: bool,
    /// The best layout that only `job.framework`'s limits kept out, when it beats the best
    /// layout the framework runs (or when the framework runs none).
    pub left_out: Option<LeftOut>,
}

/// A better layout the framework cannot run, and why.
#[derive(Clone, Debug)]
pub struct LeftOut {
    pub candidate: Candidate,
    pub limit: crate::capability::Limit,
}

/// The largest space searched. Real plans have thousands to a hundred thousand layouts; a
/// candidate list of a generated file would otherwise take all the memory there is (every
/// layout is held while it is costed).
pub const MAX_SPACE: u64 = 2_000_000;

impl Solution {
    pub fn best(&self) -> Option<&Candidate> {
        self.ranked.first()
    }
}

fn classify(e: &Estimate, memory_fraction: f64, headroom: f64) -> Limiter {
    let bubble = e.bubble_s / e.step_s;
    let comm = e.exposed_comm_s / e.step_s;
    if memory_fraction > 0.95 * (1.0 - headroom) {
        Limiter::Memory
    } else if bubble.max(comm) < 0.1 {
        Limiter::Compute
    } else if bubble > comm {
        Limiter::Bubble
    } else {
        Limiter::Communication
    }
}

/// Peak memory fraction of a layout (memory only: cheap).
pub fn memory_fraction(plan: &Plan) -> f64 {
    let p = &plan.parallel;
    let m = p.grad_accum(plan.train.global_batch).max(1);
    (0..p.pp)
        .map(|s| stage_memory(plan, s, m).total_bytes / stage_group(plan, s).gpu.memory)
        .fold(0.0, f64::max)
}

/// The first rule a layout breaks, if any (memory aside).
pub fn broken_rule(spec: &PlanSpec, p: &Parallel) -> Option<Rule> {
    rules::ALL.iter().copied().find(|r| !r.holds(spec, p))
}

/// Solves without explaining failure (used by `explain` to try changes). With
/// `cluster.nodes` a list, every size is searched and the candidates ranked together.
pub fn search(spec: &PlanSpec, progress: &(dyn Fn(usize, usize) + Sync)) -> Solution {
    if spec.node_candidates.is_empty() {
        return search_cluster(spec, progress);
    }
    let started = Instant::now();
    let mut all = Solution::default();
    let mut left_outs = Vec::new();
    for &n in &spec.node_candidates {
        let s = search_cluster(&spec.with_nodes(n), progress);
        all.space_size = all.space_size.saturating_add(s.space_size);
        all.layouts += s.layouts;
        for (r, k) in s.rejected {
            match all.rejected.iter_mut().find(|(x, _)| *x == r) {
                Some((_, m)) => *m += k,
                None => all.rejected.push((r, k)),
            }
        }
        all.over_memory += s.over_memory;
        all.refused |= s.refused;
        all.ranked.extend(s.ranked);
        left_outs.extend(s.left_out);
    }
    rank(spec, &mut all.ranked);
    all.pareto = pareto_front(&all.ranked);
    // The best layout a framework kept out, of any size, where it beats the best it runs.
    let mut blocked: Vec<Candidate> = left_outs.iter().map(|l| l.candidate.clone()).collect();
    rank(spec, &mut blocked);
    all.left_out = blocked.first().and_then(|best| {
        let beats = match all.ranked.first() {
            Some(runs) => {
                let mut pair = vec![runs.clone(), best.clone()];
                rank(spec, &mut pair);
                pair[0].plan.parallel == best.plan.parallel
            }
            None => true,
        };
        let l = left_outs
            .iter()
            .find(|l| l.candidate.plan.parallel == best.plan.parallel)?;
        beats.then(|| l.clone())
    });
    all.elapsed = started.elapsed();
    all
}

/// [`search`] on the cluster as written.
fn search_cluster(spec: &PlanSpec, progress: &(dyn Fn(usize, usize) + Sync)) -> Solution {
    let started = Instant::now();
    let space = Space::of(spec);
    if space.size() > MAX_SPACE {
        return Solution {
            space_size: space.size(),
            refused: true,
            elapsed: started.elapsed(),
            ..Solution::default()
        };
    }
    let world = spec.cluster.world_size();
    let layouts = space.layouts(world);
    let headroom = spec.search.memory_headroom;
    let total = layouts.len();
    let done = AtomicUsize::new(0);
    let mut rejected: Vec<(Rule, usize)> = Vec::new();
    let mut valid: Vec<Parallel> = Vec::new();
    // Layouts only the framework's limits reject (its rule is the last one asked), costed
    // apart to say what the framework costs.
    let mut framework_only: Vec<Parallel> = Vec::new();
    for p in &layouts {
        match broken_rule(spec, p) {
            Some(r) => {
                match rejected.iter_mut().find(|(x, _)| *x == r) {
                    Some((_, n)) => *n += 1,
                    None => rejected.push((r, 1)),
                }
                if r == Rule::FrameworkRuns {
                    framework_only.push(p.clone());
                }
            }
            None => valid.push(p.clone()),
        }
    }
    let cost = |p: Parallel| {
        let n = done.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(64) {
            progress(n.min(total), total);
        }
        let mut plan = spec.plan_with(balance::balance(spec, p));
        let fraction = memory_fraction(&plan);
        if fraction > 1.0 - headroom {
            return None;
        }
        // Each layout at the power limit its own step reaches, as `check` prices the one
        // chosen: a profiled plan's ranking is the report's.
        crate::cost::power::settle(&mut plan);
        let estimate = estimate(&plan);
        let limiter = classify(&estimate, fraction, headroom);
        Some(Candidate {
            plan,
            estimate,
            memory_fraction: fraction,
            limiter,
        })
    };
    let costed: Vec<Option<Candidate>> = valid.into_par_iter().map(cost).collect();
    let over_memory = costed.iter().filter(|c| c.is_none()).count();
    let mut ranked: Vec<Candidate> = costed.into_iter().flatten().collect();
    rank(spec, &mut ranked);
    let blocked: Vec<Candidate> = framework_only.into_par_iter().filter_map(cost).collect();
    let left_out = left_out(spec, &ranked, blocked);
    let pareto = pareto_front(&ranked);
    progress(total, total);
    Solution {
        space_size: space.size(),
        layouts: total,
        rejected,
        over_memory,
        ranked,
        pareto,
        explanation: None,
        elapsed: started.elapsed(),
        refused: false,
        left_out,
    }
}

/// The best of the layouts only the framework rejects, when it beats `ranked`'s best.
fn left_out(spec: &PlanSpec, ranked: &[Candidate], mut blocked: Vec<Candidate>) -> Option<LeftOut> {
    rank(spec, &mut blocked);
    let best = blocked.into_iter().next()?;
    if let Some(runs) = ranked.first() {
        let mut pair = vec![runs.clone(), best.clone()];
        rank(spec, &mut pair);
        if pair[0].plan.parallel == runs.plan.parallel {
            return None;
        }
    }
    let limit = crate::capability::limit(spec, &best.plan.parallel)?;
    Some(LeftOut {
        candidate: best,
        limit,
    })
}

/// Sorts candidates best first by the plan's objective (ties: simpler layouts first).
pub fn rank(spec: &PlanSpec, ranked: &mut [Candidate]) {
    let key = |c: &Candidate| match spec.search.objective {
        Objective::Throughput => (c.estimate.step_s, c.memory_fraction),
        Objective::Memory => (c.memory_fraction, c.estimate.step_s),
        Objective::Cost => (
            crate::pricing::cost_per_token(&c.plan, &c.estimate),
            c.memory_fraction,
        ),
    };
    ranked.sort_by(|a, b| {
        let (x, y) = (key(a), key(b));
        x.0.total_cmp(&y.0)
            .then(x.1.total_cmp(&y.1))
            .then_with(|| layout_order(&a.plan.parallel).cmp(&layout_order(&b.plan.parallel)))
    });
}

/// Re-derives what limits a candidate after its estimate changed (e.g. was simulated).
pub fn reclassify(c: &mut Candidate, headroom: f64) {
    c.limiter = classify(&c.estimate, c.memory_fraction, headroom);
}

/// A deterministic tie-break: simpler layouts first.
fn layout_order(p: &Parallel) -> (u64, u64, u64, u64, u64, u64, u64) {
    (
        p.tp.saturating_mul(p.pp).saturating_mul(p.cp),
        p.pp,
        p.tp,
        p.vpp,
        p.zero,
        p.micro_batch,
        p.recompute as u64,
    )
}

/// Candidates no other candidate beats on both memory and step time.
pub fn pareto_front(ranked: &[Candidate]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..ranked.len()).collect();
    idx.sort_by(|&a, &b| {
        ranked[a]
            .memory_fraction
            .total_cmp(&ranked[b].memory_fraction)
            .then(
                ranked[a]
                    .estimate
                    .step_s
                    .total_cmp(&ranked[b].estimate.step_s),
            )
    });
    let mut front = Vec::new();
    let mut best_time = f64::INFINITY;
    for i in idx {
        if ranked[i].estimate.step_s < best_time {
            best_time = ranked[i].estimate.step_s;
            front.push(i);
        }
    }
    front
}

/// Solves the plan's holes; explains with z3 when no layout is valid.
pub fn solve(spec: &PlanSpec, progress: &(dyn Fn(usize, usize) + Sync)) -> Solution {
    let mut solution = search(spec, progress);
    if solution.ranked.is_empty() && !solution.refused {
        solution.explanation = Some(explain::explain(spec, &solution));
    }
    solution
}
