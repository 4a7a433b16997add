//! `first_stage_layers = auto` and `last_stage_layers = auto`: the split of the layers over
//! the pipeline stages that evens their work.
//!
//! The first stage also runs the embedding, the last the output layer and the loss, and on a
//! mixed cluster the stages run on different GPUs: an even split then leaves the lighter or
//! faster stages waiting for the slowest one every micro-batch (the report's `wait_s`). A
//! pipeline of m micro-batches takes about m · max_s T_s plus its fill and drain, where T_s
//! is stage s's forward and backward of one micro-batch (`cost::estimate`). Every split
//! runs the same layers, so the fill and drain (the other stages' T, over vpp) change little
//! and the split whose slowest stage is fastest gives the shortest step. Among splits whose
//! slowest stages are equally fast, the one with the least peak memory; a split that does
//! not fit in memory gives way to the next fastest that does.

use crate::cost::stage_group;
use crate::cost::time::{pieces, placement, Device, Pieces};
use crate::plan::{Parallel, Plan, PlanSpec};

/// Layers of the (first, last) stages; `None`: the middle stages' count.
pub type Ends = (Option<u64>, Option<u64>);

/// Whether the layout leaves an end's layers to the solver.
pub fn has_auto_ends(spec: &PlanSpec) -> bool {
    spec.parallel.auto_first_stage_layers || spec.parallel.auto_last_stage_layers
}

/// Every (first, last) end count `p` may take: an `auto` end ranges over 1..layers, a written
/// one keeps its count, an absent one shares the middle stages'. Only splits the layers rule
/// accepts ([`Parallel::split_error`]). With pp = 1 there are no ends to set: the even split.
pub fn splits(spec: &PlanSpec, p: &Parallel) -> Vec<Ends> {
    let ps = &spec.parallel;
    let layers = spec.model.layers;
    let (first_auto, last_auto) = (ps.auto_first_stage_layers, ps.auto_last_stage_layers);
    let keep = |first, last| {
        Parallel {
            first_stage_layers: first,
            last_stage_layers: last,
            ..p.clone()
        }
        .split_error(layers)
        .is_none()
    };
    if p.pp <= 1 || !(first_auto || last_auto) {
        // Without a pipeline an `auto` end has nothing to set; a written one stays (and
        // the rule refuses it).
        let fixed = (ps.first_stage_layers, ps.last_stage_layers);
        return if keep(fixed.0, fixed.1) {
            vec![fixed]
        } else {
            Vec::new()
        };
    }
    let mut out = Vec::new();
    match (first_auto, last_auto) {
        (true, true) => {
            // The middle stages' count fixes the ends' total; the ends share it.
            let middle_stages = p.pp - 2;
            let counts: Vec<u64> = match layers.checked_div(middle_stages) {
                None => vec![0],
                Some(most) => (1..=most).collect(),
            };
            for middle in counts {
                let ends = layers.saturating_sub(middle * middle_stages);
                for first in 1..ends {
                    if keep(Some(first), Some(ends - first)) {
                        out.push((Some(first), Some(ends - first)));
                    }
                }
            }
        }
        (true, false) => {
            for first in 1..layers {
                if keep(Some(first), ps.last_stage_layers) {
                    out.push((Some(first), ps.last_stage_layers));
                }
            }
        }
        _ => {
            for last in 1..layers {
                if keep(ps.first_stage_layers, Some(last)) {
                    out.push((ps.first_stage_layers, Some(last)));
                }
            }
        }
    }
    out
}

/// Whether some split of the layers suits `p` (the layers rule with `auto` ends).
pub fn has_split(spec: &PlanSpec, p: &Parallel) -> bool {
    !splits(spec, p).is_empty()
}

/// `p` with its `auto` ends set to the split that evens the stages' work (see the module
/// doc); `p` as it is when the plan leaves no end to the solver or no split suits it. An
/// auto end that comes out at the middle stages' count is left unset (the even split), so
/// the plan emits as it would without it.
pub fn balance(spec: &PlanSpec, p: Parallel) -> Parallel {
    if !has_auto_ends(spec) {
        return p;
    }
    let candidates = splits(spec, &p);
    if candidates.is_empty() {
        return p;
    }
    let mut plan = spec.plan_with(p);
    // The pieces of one stage's work on each stage's GPUs: they do not depend on the split.
    let stage_pieces: Vec<Pieces> = (0..plan.parallel.pp)
        .map(|s| {
            let group = stage_group(&plan, s);
            let dev = Device {
                gpu: &group.gpu,
                precision: plan.train.precision,
            };
            pieces(&plan, &dev, &placement(&plan, group))
        })
        .collect();
    let mut timed: Vec<(f64, Ends)> = candidates
        .into_iter()
        .map(|split| {
            set(&mut plan.parallel, split);
            (slowest_stage(&plan, &stage_pieces), split)
        })
        .collect();
    timed.sort_by(|a, b| a.0.total_cmp(&b.0));
    let headroom = spec.search.memory_headroom;
    let mut best: Option<Ends> = None;
    let mut i = 0;
    while i < timed.len() {
        // The splits whose slowest stage is as fast as this one's.
        let t = timed[i].0;
        let end = timed[i..]
            .iter()
            .position(|x| x.0 > t * (1.0 + 1e-9))
            .map_or(timed.len(), |n| i + n);
        let (fraction, split) = timed[i..end]
            .iter()
            .map(|&(_, split)| {
                set(&mut plan.parallel, split);
                (super::memory_fraction(&plan), split)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .expect("a non-empty group");
        best.get_or_insert(timed[0].1);
        if fraction <= 1.0 - headroom {
            best = Some(split);
            break;
        }
        i = end;
    }
    set(&mut plan.parallel, best.unwrap_or(timed[0].1));
    even_if_same(spec, plan.parallel)
}

fn set(p: &mut Parallel, (first, last): Ends) {
    p.first_stage_layers = first;
    p.last_stage_layers = last;
}

/// One micro-batch's forward and backward on the slowest stage under the split in `plan`.
fn slowest_stage(plan: &Plan, stage_pieces: &[Pieces]) -> f64 {
    let last = plan.parallel.pp - 1;
    (0..plan.parallel.pp)
        .map(|s| {
            let pc = &stage_pieces[s as usize];
            // A frozen prefix's layers run forward only (`cost::method`).
            let (mut fwd, mut bwd, _) = pc.stage_layers(plan, s);
            if s == 0 {
                fwd.add(pc.embedding_fwd);
                bwd.add(pc.embedding_bwd);
            }
            if s == last {
                fwd.add(pc.head_fwd);
                bwd.add(pc.head_bwd);
            }
            fwd.total() + bwd.total()
        })
        .fold(0.0, f64::max)
}

/// An `auto` end whose count equals the middle stages' is the even split: unset it when the
/// layout splits evenly without it.
fn even_if_same(spec: &PlanSpec, mut p: Parallel) -> Parallel {
    let layers = spec.model.layers;
    let ps = &spec.parallel;
    let mut q = p.clone();
    if ps.auto_first_stage_layers {
        q.first_stage_layers = None;
    }
    if ps.auto_last_stage_layers {
        q.last_stage_layers = None;
    }
    let same = (0..p.pp).all(|s| q.stage_layers(layers, s) == p.stage_layers(layers, s));
    if same && q.split_error(layers).is_none() {
        p = q;
    }
    p
}
