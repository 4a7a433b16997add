//! Why no layout is valid, in words with spans: the rules and the plan's own choices are
//! z3 assertions, each behind a tracking literal; the unsat core (shrunk to a minimal one)
//! names the ones that conflict. Then the smallest changes that make a layout valid are
//! found by solving modified plans.

use planc_lang::{FileId, Span};
use z3::ast::{Bool, Int};
use z3::{SatResult, Solver};

use super::rules::{self, encode, offload_index, recompute_index, Rule, Vars};
use super::space::Space;
use super::{memory_fraction, search, Solution};
use crate::plan::{Hole, PlanSpec, Schedule};

/// One conflicting rule or choice of the plan.
#[derive(Clone, Debug)]
pub struct Conflict {
    pub sentence: String,
    /// Where in the plan it comes from.
    pub places: Vec<(FileId, Span)>,
}

#[derive(Clone, Debug, Default)]
pub struct Explanation {
    pub conflicts: Vec<Conflict>,
    /// Changes that make a layout valid, smallest first.
    pub suggestions: Vec<String>,
}

enum Item {
    Rule(Rule),
    Domain(&'static str),
    Memory,
}

fn list<T: std::fmt::Display>(v: &[T]) -> String {
    let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// How the plan fixes an attribute, in words.
fn domain_sentence<T: std::fmt::Display + Clone>(
    spec: &PlanSpec,
    name: &str,
    hole: &Hole<T>,
    values: &[T],
) -> String {
    match hole {
        Hole::Fixed(v) if spec.origins.written("parallel", name) => {
            format!("`{name} = {v}` as written")
        }
        Hole::Fixed(v) => format!("`{name} = {v}` (the default)"),
        Hole::Candidates(c) => format!("`{name}` is one of {} as written", list(c)),
        Hole::Auto => format!("`{name} = auto` ranges over {}", list(values)),
    }
}

struct Builder {
    solver: Solver,
    literals: Vec<(Bool, Item)>,
}

impl Builder {
    fn track(&mut self, item: Item, formula: Bool) {
        let lit = Bool::new_const(format!("track{}", self.literals.len()));
        self.solver.assert(lit.implies(&formula));
        self.literals.push((lit, item));
    }

    fn member(&self, v: &Int, values: &[i64]) -> Bool {
        let eqs: Vec<Bool> = values.iter().map(|x| v.eq(Int::from_i64(*x))).collect();
        Bool::or(&eqs.iter().collect::<Vec<_>>())
    }
}

/// How long z3 may take over one question (ms). Its nonlinear search over `tp × pp × … =
/// world` answers in milliseconds for real clusters but ran for over ten minutes on one of
/// 524288 GPUs (`compiler/tests/no_panic.rs`'s large numbers); an unanswered question keeps
/// its rule in the explanation, or says that none was found.
const CHECK_MS: u32 = 1000;

pub fn explain(spec: &PlanSpec, solution: &Solution) -> Explanation {
    let space = Space::of(spec);
    let v = Vars::new();
    let mut b = Builder {
        solver: Solver::new(),
        literals: Vec::new(),
    };
    let mut params = z3::Params::new();
    params.set_u32("timeout", CHECK_MS);
    b.solver.set_params(&params);
    let ints = |x: &[u64]| x.iter().map(|&y| y as i64).collect::<Vec<_>>();

    // Every variable is positive, whatever the plan says.
    for name in ["tp", "pp", "cp", "dp", "ep", "vpp", "micro_batch"] {
        let var = v.int(name).expect("a layout variable");
        b.solver.assert(var.ge(Int::from_i64(1)));
    }
    // Bounds implied by the cluster and the batch, asserted untracked: they are facts, not
    // choices, and without them z3's nonlinear search over `tp × pp × … = world` can take
    // a hundred times longer to find a model once a literal is dropped.
    let world_i = spec.cluster.world_size() as i64;
    for name in ["tp", "pp", "cp", "dp", "ep"] {
        let var = v.int(name).expect("a layout variable");
        b.solver.assert(var.le(Int::from_i64(world_i)));
    }
    b.solver.assert(
        v.micro_batch
            .le(Int::from_i64((spec.train.global_batch as i64).max(1))),
    );
    b.solver
        .assert(v.vpp.le(Int::from_i64(spec.model.layers as i64)));
    let ps = &spec.parallel;
    let domains: [(&'static str, &Hole<u64>, &Vec<u64>); 7] = [
        ("tp", &ps.tp, &space.tp),
        ("pp", &ps.pp, &space.pp),
        ("cp", &ps.cp, &space.cp),
        ("ep", &ps.ep, &space.ep),
        ("vpp", &ps.vpp, &space.vpp),
        ("micro_batch", &ps.micro_batch, &space.micro_batch),
        ("zero", &ps.zero, &space.zero),
    ];
    for (name, _, values) in domains {
        let f = b.member(v.int(name).expect("a layout variable"), &ints(values));
        b.track(Item::Domain(name), f);
    }
    if space.zero_with_pipeline_max < 2 {
        // `zero = auto` proposes ZeRO-2 and 3 only without a pipeline.
        let f = v
            .zero
            .ge(Int::from_i64(space.zero_with_pipeline_max as i64 + 1))
            .implies(v.pp.eq(Int::from_i64(1)));
        b.track(Item::Domain("zero"), f);
    }
    if !space.dp.is_empty() {
        let f = b.member(&v.dp, &ints(&space.dp));
        b.track(Item::Domain("dp"), f);
    }
    let has_inter = space.schedule.contains(&Schedule::Interleaved);
    let has_flat = space.schedule.iter().any(|s| *s != Schedule::Interleaved);
    if !(has_inter && has_flat) {
        b.track(
            Item::Domain("schedule"),
            v.interleaved.eq(Bool::from_bool(has_inter)),
        );
    }
    if space.sequence_parallel.is_empty() {
        let f = v.sequence_parallel.eq(v.tp.gt(Int::from_i64(1)));
        b.track(Item::Domain("sequence_parallel"), f);
    } else if space.sequence_parallel.len() == 1 {
        let f = v
            .sequence_parallel
            .eq(Bool::from_bool(space.sequence_parallel[0]));
        b.track(Item::Domain("sequence_parallel"), f);
    }
    let rc: Vec<i64> = space
        .recompute
        .iter()
        .map(|r| recompute_index(*r))
        .collect();
    let f = b.member(&v.recompute, &rc);
    b.track(Item::Domain("recompute"), f);
    let off: Vec<i64> = space.offload.iter().map(|o| offload_index(*o)).collect();
    let f = b.member(&v.offload, &off);
    b.track(Item::Domain("offload"), f);
    for &r in rules::ALL {
        b.track(Item::Rule(r), encode(r, spec, &v));
    }

    // Memory: which (tp, pp) pairs can fit at all, with the most frugal other choices. The
    // table spans every tp and pp, not only the plan's, so that a written `pp = 1` or the
    // tp range shows up in the core as what conflicts with memory.
    let headroom = spec.search.memory_headroom;
    let world = spec.cluster.world_size();
    let mut relaxed = spec.clone();
    relaxed.parallel.tp =
        Hole::Candidates((0..=6).map(|k| 1u64 << k).filter(|t| *t <= world).collect());
    relaxed.parallel.pp = Hole::Auto;
    let mut pairs: Vec<((u64, u64), f64)> = Vec::new();
    for p in Space::of(&relaxed).layouts(world) {
        let f = memory_fraction(&spec.plan_with(p.clone()));
        match pairs.iter_mut().find(|(k, _)| *k == (p.tp, p.pp)) {
            Some((_, best)) => *best = best.min(f),
            None => pairs.push(((p.tp, p.pp), f)),
        }
    }
    let fitting: Vec<(u64, u64)> = pairs
        .iter()
        .filter(|(_, f)| *f <= 1.0 - headroom)
        .map(|(k, _)| *k)
        .collect();
    let memory_sentence = memory_words(spec, &pairs, &fitting);
    // Forbid the pairs known not to fit; pairs never costed (they do not tile the
    // cluster) are left to the world-size rule to explain.
    let too_big: Vec<Bool> = pairs
        .iter()
        .filter(|(_, f)| *f > 1.0 - headroom)
        .map(|((t, p), _)| {
            Bool::and(&[
                &v.tp.eq(Int::from_i64(*t as i64)),
                &v.pp.eq(Int::from_i64(*p as i64)),
            ])
            .not()
        })
        .collect();
    if !too_big.is_empty() {
        let f = Bool::and(&too_big.iter().collect::<Vec<_>>());
        b.track(Item::Memory, f);
    }

    let mut conflicts = Vec::new();
    // Shrinking drops literals in this order, so what the user wrote is kept in the
    // explanation when a rule or a default could stand for it.
    let weight = |item: &Item| match item {
        Item::Domain(name) if spec.origins.written("parallel", name) => 2,
        Item::Domain(_) => 0,
        Item::Rule(_) | Item::Memory => 1,
    };
    b.literals.sort_by_key(|(_, item)| weight(item));
    let lits: Vec<Bool> = b.literals.iter().map(|(l, _)| l.clone()).collect();
    let first = b.solver.check_assumptions(&lits);
    if first == SatResult::Unknown {
        conflicts.push(Conflict {
            sentence: format!(
                "planc could not find which rules conflict within {} s: the cluster or the \
                 batch is too large for its search; write tp, pp, cp and dp as values whose \
                 product is the cluster's GPU count, or check the plan on fewer nodes first",
                CHECK_MS / 1000
            ),
            places: vec![spec.origins.of("parallel", "").unwrap_or_default()],
        });
    } else if first == SatResult::Unsat {
        let mut core: Vec<Bool> = b.solver.get_unsat_core();
        core.sort_by_key(|c| lits.iter().position(|l| l == c));
        // Shrink to a minimal core: drop each literal that is not needed.
        let mut i = 0;
        while i < core.len() {
            let mut without = core.clone();
            without.remove(i);
            if b.solver.check_assumptions(&without) == SatResult::Unsat {
                core = without;
            } else {
                i += 1;
            }
        }
        for (lit, item) in &b.literals {
            if !core.iter().any(|c| c == lit) {
                continue;
            }
            conflicts.push(conflict(spec, item, &space, &memory_sentence));
        }
    } else {
        // Each rule can be met and memory can fit, but not by one layout at once.
        let closest = closest(spec, solution);
        conflicts.push(Conflict {
            sentence: format!(
                "every rule can be met, and the model can fit, but not by the same layout{closest}"
            ),
            places: vec![spec.origins.of("parallel", "").unwrap_or_default()],
        });
    }
    Explanation {
        conflicts,
        suggestions: suggestions(spec),
    }
}

fn memory_words(spec: &PlanSpec, pairs: &[((u64, u64), f64)], fitting: &[(u64, u64)]) -> String {
    let gpu = &spec.cluster.groups[0].gpu;
    let headroom = spec.search.memory_headroom;
    if let Some(min) = fitting.iter().map(|(t, p)| t * p).min() {
        return format!(
            "the model fits in {} ({:.0} % headroom) only with tp × pp ≥ {min}",
            gpu.name,
            headroom * 100.0
        );
    }
    match pairs.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
        Some(((t, p), f)) => format!(
            "no tp × pp in the space fits the model in {} with {:.0} % headroom: the smallest footprint (tp = {t}, pp = {p}) needs {:.0} % of its memory",
            gpu.name,
            headroom * 100.0,
            f * 100.0
        ),
        None => format!("the model must fit in {}", gpu.name),
    }
}

fn conflict(spec: &PlanSpec, item: &Item, space: &Space, memory_sentence: &str) -> Conflict {
    let at = |attr: &str| spec.origins.of("parallel", attr).unwrap_or_default();
    let ps = &spec.parallel;
    match item {
        Item::Rule(r) => {
            let mut places: Vec<(FileId, Span)> = r
                .attrs()
                .iter()
                .filter(|a| spec.origins.written("parallel", a))
                .map(|a| at(a))
                .collect();
            if places.is_empty() {
                places.push(match r {
                    Rule::HeadsByTp
                    | Rule::KvHeadsByTp
                    | Rule::SequenceSplits
                    | Rule::LayersByStages => spec.origins.of("model", "").unwrap_or_default(),
                    Rule::BatchByDp => spec.origins.of("train", "global_batch").unwrap_or_default(),
                    Rule::PrecisionSupported => {
                        spec.origins.of("train", "precision").unwrap_or_default()
                    }
                    Rule::WorldSize | Rule::GroupsHoldStages => {
                        spec.origins.of("cluster", "").unwrap_or_default()
                    }
                    _ => at(""),
                });
            }
            Conflict {
                sentence: r.sentence(spec),
                places,
            }
        }
        Item::Memory => Conflict {
            sentence: memory_sentence.to_string(),
            places: vec![spec.origins.of("cluster", "").unwrap_or_default()],
        },
        Item::Domain(name) => {
            let sentence = match *name {
                "tp" => domain_sentence(spec, name, &ps.tp, &space.tp),
                "pp" => domain_sentence(spec, name, &ps.pp, &space.pp),
                "cp" => domain_sentence(spec, name, &ps.cp, &space.cp),
                "dp" => domain_sentence(spec, name, &ps.dp, &space.dp),
                "ep" => domain_sentence(spec, name, &ps.ep, &space.ep),
                "vpp" => domain_sentence(spec, name, &ps.vpp, &space.vpp),
                "micro_batch" => domain_sentence(spec, name, &ps.micro_batch, &space.micro_batch),
                "zero" => domain_sentence(spec, name, &ps.zero, &space.zero),
                "schedule" => domain_sentence(spec, name, &ps.schedule, &space.schedule),
                "recompute" => domain_sentence(spec, name, &ps.recompute, &space.recompute),
                "offload" => domain_sentence(spec, name, &ps.offload, &space.offload),
                "sequence_parallel" if space.sequence_parallel.is_empty() => {
                    "`sequence_parallel = auto` is on exactly when tp > 1".to_string()
                }
                _ => domain_sentence(spec, name, &ps.sequence_parallel, &space.sequence_parallel),
            };
            Conflict {
                sentence,
                places: vec![at(name)],
            }
        }
    }
}

fn closest(spec: &PlanSpec, _solution: &Solution) -> String {
    let space = Space::of(spec);
    let best = space
        .layouts(spec.cluster.world_size())
        .into_iter()
        .filter(|p| super::broken_rule(spec, p).is_none())
        .map(|p| {
            let f = memory_fraction(&spec.plan_with(p.clone()));
            (p, f)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match best {
        Some((p, f)) => format!(
            "; the valid layout closest to fitting (tp = {}, pp = {}, dp = {}, micro_batch = {}, zero = {}, recompute = {}) needs {:.0} % of the GPU's memory",
            p.tp, p.pp, p.dp, p.micro_batch, p.zero, p.recompute, f * 100.0
        ),
        None => String::new(),
    }
}

/// Single changes to the plan that make some layout valid, tried in order of size.
fn suggestions(spec: &PlanSpec) -> Vec<String> {
    let quiet = |_: usize, _: usize| {};
    let mut out = Vec::new();
    let describe = |s: &Solution| {
        s.best().map(|c| {
            let p = &c.plan.parallel;
            format!(
                "tp = {}, pp = {}, dp = {}, micro_batch = {}, recompute = {}, zero = {} fits at {:.0} % of memory, step {:.2} s",
                p.tp, p.pp, p.dp, p.micro_batch, p.recompute, p.zero, c.memory_fraction * 100.0, c.estimate.step_s
            )
        })
    };
    // Free one written attribute.
    let written: Vec<&str> = [
        "tp",
        "pp",
        "cp",
        "ep",
        "vpp",
        "micro_batch",
        "zero",
        "recompute",
        "schedule",
        "offload",
        "dp",
    ]
    .into_iter()
    .filter(|a| spec.origins.written("parallel", a))
    .collect();
    for attr in written {
        let mut s = spec.clone();
        let ps = &mut s.parallel;
        match attr {
            "tp" => ps.tp = Hole::Auto,
            "pp" => ps.pp = Hole::Auto,
            "cp" => ps.cp = Hole::Auto,
            "ep" => ps.ep = Hole::Auto,
            "vpp" => ps.vpp = Hole::Auto,
            "micro_batch" => ps.micro_batch = Hole::Auto,
            "zero" => ps.zero = Hole::Auto,
            "recompute" => ps.recompute = Hole::Auto,
            "schedule" => ps.schedule = Hole::Auto,
            "offload" => ps.offload = Hole::Auto,
            _ => ps.dp = Hole::Auto,
        }
        if let Some(d) = describe(&search(&s, &quiet)) {
            out.push(format!(
                "let planc choose `{attr}` (write `{attr} = auto`): then {d}"
            ));
        }
        if out.len() >= 2 {
            break;
        }
    }
    // More GPUs, for a uniform cluster.
    if spec.cluster.groups.len() == 1 {
        for factor in [2, 4, 8] {
            let mut s = spec.clone();
            s.cluster.groups[0].nodes *= factor;
            if s.cluster.groups[0].nodes > 1 && s.cluster.inter_node.is_none() {
                break;
            }
            if let Some(d) = describe(&search(&s, &quiet)) {
                let g = &s.cluster.groups[0];
                out.push(format!(
                    "use {} nodes ({} GPUs): then {d}",
                    g.nodes,
                    g.gpus()
                ));
                break;
            }
        }
    }
    out
}
