//! The rules a layout must satisfy, each written once with its sentence, the attributes it
//! is about (for spans), a predicate (for enumeration) and a z3 encoding (for explaining
//! an empty space with an unsat core). A test checks that the predicates agree with
//! `validate`, so `check` and `solve` accept exactly the same layouts.

use z3::ast::{Bool, Int};

use crate::capability;
use crate::plan::{Framework, Offload, Parallel, PlanSpec, Recompute, Schedule};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    WorldSize,
    HeadsByTp,
    KvHeadsByTp,
    LayersByStages,
    BatchByDp,
    ExpertsByEp,
    EpWithinDp,
    SequenceParallelNeedsTp,
    SequenceSplits,
    InterleavedNeedsVpp,
    InterleavedNeedsPp,
    GroupsHoldStages,
    PrecisionSupported,
    OffloadNeedsZero,
    ZeroShardsWithoutPipeline,
    /// What `job.framework` runs as planc emits it (`crate::capability`); last, so that a
    /// layout counted against it breaks no other rule. `validate` warns of it (P0330) rather
    /// than refusing, so it is the one rule a fixed layout may break.
    FrameworkRuns,
    MemoryFits,
}

pub const ALL: &[Rule] = &[
    Rule::WorldSize,
    Rule::HeadsByTp,
    Rule::KvHeadsByTp,
    Rule::LayersByStages,
    Rule::BatchByDp,
    Rule::ExpertsByEp,
    Rule::EpWithinDp,
    Rule::SequenceParallelNeedsTp,
    Rule::SequenceSplits,
    Rule::InterleavedNeedsVpp,
    Rule::InterleavedNeedsPp,
    Rule::GroupsHoldStages,
    Rule::PrecisionSupported,
    Rule::OffloadNeedsZero,
    Rule::ZeroShardsWithoutPipeline,
    Rule::FrameworkRuns,
];

impl Rule {
    /// The rule in words, with the plan's numbers.
    pub fn sentence(self, spec: &PlanSpec) -> String {
        let m = &spec.model;
        let world = spec.cluster.world_size();
        match self {
            Rule::WorldSize => format!("tp × pp × cp × dp must equal the {world} GPUs"),
            Rule::HeadsByTp => format!("tp must divide heads = {}", m.heads),
            Rule::KvHeadsByTp => format!("tp must divide kv_heads = {}", m.kv_heads),
            Rule::LayersByStages => match uneven_ends(spec) {
                Some(ends) => format!(
                    "with {ends}, pp must be > 1, the other stages must share the rest of the {} layers evenly, and with vpp > 1 their share must split into vpp equal chunks",
                    m.layers
                ),
                None => format!("pp × vpp must divide layers = {}", m.layers),
            },
            Rule::BatchByDp => format!(
                "dp × micro_batch must divide global_batch = {}",
                spec.train.global_batch
            ),
            Rule::ExpertsByEp => format!("ep must divide experts = {}", m.experts),
            Rule::EpWithinDp => "ep must divide dp × cp".into(),
            Rule::SequenceParallelNeedsTp => "sequence parallelism needs tp > 1".into(),
            Rule::SequenceSplits => format!(
                "seq_len = {} must split evenly over 2 × cp (× tp with sequence parallelism)",
                m.seq_len
            ),
            Rule::InterleavedNeedsVpp => "the interleaved schedule needs vpp > 1, and vpp > 1 needs it".into(),
            Rule::InterleavedNeedsPp => "the interleaved schedule needs pp > 1".into(),
            Rule::GroupsHoldStages => "every group's GPU count must be a multiple of tp × dp × cp".into(),
            Rule::PrecisionSupported => format!(
                "every GPU of the cluster must support precision = {}",
                spec.train.precision
            ),
            Rule::OffloadNeedsZero => "optimizer offload needs zero ≥ 1, parameter offload zero = 3".into(),
            Rule::ZeroShardsWithoutPipeline => "zero = 3 needs pp = 1 (no pipeline engine but torchtitan's gathers every chunk's parameters before every pass)".into(),
            Rule::FrameworkRuns => match capability::framework_of(spec) {
                Some(f) => capability::sentence(f, capability::generates_script(spec)),
                None => "the framework runs the layout".into(),
            },
            Rule::MemoryFits => {
                let g = &spec.cluster.groups[0].gpu;
                format!(
                    "the peak memory per GPU must fit {} with {:.0} % headroom",
                    g.name,
                    spec.search.memory_headroom * 100.0
                )
            }
        }
    }

    /// The `parallel` attributes (or other `block.attribute`) the rule is about, for spans.
    pub fn attrs(self) -> &'static [&'static str] {
        match self {
            Rule::WorldSize => &["tp", "pp", "cp", "dp"],
            Rule::HeadsByTp | Rule::KvHeadsByTp => &["tp"],
            Rule::LayersByStages => &["pp", "vpp", "first_stage_layers", "last_stage_layers"],
            Rule::BatchByDp => &["dp", "micro_batch"],
            Rule::ExpertsByEp | Rule::EpWithinDp => &["ep"],
            Rule::SequenceParallelNeedsTp => &["sequence_parallel", "tp"],
            Rule::SequenceSplits => &["cp", "sequence_parallel"],
            Rule::InterleavedNeedsVpp | Rule::InterleavedNeedsPp => &["schedule", "vpp"],
            Rule::GroupsHoldStages => &["tp", "dp", "cp"],
            Rule::PrecisionSupported => &[],
            Rule::OffloadNeedsZero => &["offload", "zero"],
            Rule::ZeroShardsWithoutPipeline => &["zero", "pp"],
            Rule::FrameworkRuns => &["pp", "cp", "ep", "tp", "schedule", "zero", "offload"],
            Rule::MemoryFits => &["tp", "pp"],
        }
    }

    pub fn holds(self, spec: &PlanSpec, p: &Parallel) -> bool {
        let m = &spec.model;
        match self {
            Rule::WorldSize => {
                p.tp.saturating_mul(p.pp)
                    .saturating_mul(p.cp)
                    .saturating_mul(p.dp)
                    == spec.cluster.world_size()
            }
            Rule::HeadsByTp => m.heads.is_multiple_of(p.tp),
            Rule::KvHeadsByTp => m.kv_heads.is_multiple_of(p.tp),
            Rule::LayersByStages if super::balance::has_auto_ends(spec) => {
                super::balance::has_split(spec, p)
            }
            Rule::LayersByStages => p.split_error(m.layers).is_none(),
            Rule::BatchByDp => spec.train.global_batch.is_multiple_of(p.dp * p.micro_batch),
            Rule::ExpertsByEp => m.experts.is_multiple_of(p.ep),
            Rule::EpWithinDp => p.ep == 1 || (p.dp * p.cp).is_multiple_of(p.ep),
            Rule::SequenceParallelNeedsTp => !p.sequence_parallel || p.tp > 1,
            Rule::SequenceSplits => {
                let div = 2 * p.cp * if p.sequence_parallel { p.tp } else { 1 };
                !(p.cp > 1 || p.sequence_parallel) || m.seq_len.is_multiple_of(div)
            }
            Rule::InterleavedNeedsVpp => (p.schedule == Schedule::Interleaved) == (p.vpp > 1),
            Rule::InterleavedNeedsPp => p.schedule != Schedule::Interleaved || p.pp > 1,
            Rule::GroupsHoldStages => {
                !spec.cluster.is_mixed()
                    || spec.cluster.groups.iter().all(|g| {
                        g.gpus()
                            .is_multiple_of(p.tp.saturating_mul(p.dp).saturating_mul(p.cp))
                    })
            }
            Rule::PrecisionSupported => spec
                .cluster
                .groups
                .iter()
                .all(|g| g.gpu.peak(spec.train.precision).is_some()),
            Rule::OffloadNeedsZero => match p.offload {
                Offload::None => true,
                Offload::Optimizer => p.zero >= 1,
                Offload::Params => p.zero == 3,
            },
            Rule::ZeroShardsWithoutPipeline => p.zero < 3 || p.pp == 1 || fsdp_in_stages(spec),
            Rule::FrameworkRuns => capability::limit(spec, p).is_none(),
            Rule::MemoryFits => true, // decided by the cost model, per candidate
        }
    }
}

/// torchtitan runs FSDP inside each pipeline stage, so ZeRO-3 with pp > 1 is a layout it runs.
fn fsdp_in_stages(spec: &PlanSpec) -> bool {
    spec.framework() == Framework::Torchtitan
}

/// `first_stage_layers = 7 and last_stage_layers = 7` when the plan writes either.
fn uneven_ends(spec: &PlanSpec) -> Option<String> {
    let ps = &spec.parallel;
    let parts: Vec<String> = [
        ("first_stage_layers", ps.first_stage_layers),
        ("last_stage_layers", ps.last_stage_layers),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} = {v}")))
    .collect();
    (!parts.is_empty()).then(|| parts.join(" and "))
}

/// The layout's variables as z3 integers (booleans as 0/1, enumerations as small ints).
pub struct Vars {
    pub tp: Int,
    pub pp: Int,
    pub cp: Int,
    pub dp: Int,
    pub ep: Int,
    pub vpp: Int,
    pub micro_batch: Int,
    pub sequence_parallel: Bool,
    pub interleaved: Bool,
    pub zero: Int,
    /// 0 none, 1 optimizer, 2 params.
    pub offload: Int,
    /// 0 none, 1 selective, 2 full.
    pub recompute: Int,
}

impl Default for Vars {
    fn default() -> Self {
        Self::new()
    }
}

impl Vars {
    pub fn new() -> Self {
        let i = |n: &str| Int::new_const(n);
        Vars {
            tp: i("tp"),
            pp: i("pp"),
            cp: i("cp"),
            dp: i("dp"),
            ep: i("ep"),
            vpp: i("vpp"),
            micro_batch: i("micro_batch"),
            sequence_parallel: Bool::new_const("sequence_parallel"),
            interleaved: Bool::new_const("interleaved"),
            zero: i("zero"),
            offload: i("offload"),
            recompute: i("recompute"),
        }
    }

    pub fn int(&self, name: &str) -> Option<&Int> {
        Some(match name {
            "tp" => &self.tp,
            "pp" => &self.pp,
            "cp" => &self.cp,
            "dp" => &self.dp,
            "ep" => &self.ep,
            "vpp" => &self.vpp,
            "micro_batch" => &self.micro_batch,
            "zero" => &self.zero,
            "offload" => &self.offload,
            "recompute" => &self.recompute,
            _ => return None,
        })
    }
}

pub fn recompute_index(r: Recompute) -> i64 {
    match r {
        Recompute::None => 0,
        Recompute::Selective => 1,
        Recompute::Full => 2,
    }
}

pub fn offload_index(o: Offload) -> i64 {
    match o {
        Offload::None => 0,
        Offload::Optimizer => 1,
        Offload::Params => 2,
    }
}

fn divides(d: &Int, n: i64) -> Bool {
    Int::from_i64(n).modulo(d).eq(Int::from_i64(0))
}

fn divides_expr(d: &Int, n: &Int) -> Bool {
    n.modulo(d).eq(Int::from_i64(0))
}

/// The rule as a z3 formula over `v`. `MemoryFits` is encoded by the caller, which knows
/// which (tp, pp) pairs can fit.
pub fn encode(rule: Rule, spec: &PlanSpec, v: &Vars) -> Bool {
    let m = &spec.model;
    let k = |x: u64| Int::from_i64(x as i64);
    let one = k(1);
    match rule {
        Rule::WorldSize => Int::mul(&[&v.tp, &v.pp, &v.cp, &v.dp]).eq(k(spec.cluster.world_size())),
        Rule::HeadsByTp => divides(&v.tp, m.heads as i64),
        Rule::KvHeadsByTp => divides(&v.tp, m.kv_heads as i64),
        Rule::LayersByStages if super::balance::has_auto_ends(spec) => encode_auto_ends(spec, v),
        Rule::LayersByStages => {
            let ps = &spec.parallel;
            if ps.first_stage_layers.is_none() && ps.last_stage_layers.is_none() {
                return divides(&Int::mul(&[&v.pp, &v.vpp]), m.layers as i64);
            }
            // The same split as `Parallel::split_error`: the ends the plan fixes, and the
            // other pp − ends stages sharing the rest evenly, at least one layer each.
            let fixed = ps.first_stage_layers.unwrap_or(0) + ps.last_stage_layers.unwrap_or(0);
            let Some(rest) = m.layers.checked_sub(fixed) else {
                return Bool::from_bool(false);
            };
            let ends = u64::from(ps.first_stage_layers.is_some())
                + u64::from(ps.last_stage_layers.is_some());
            let others = Int::sub(&[&v.pp, &k(ends)]);
            let rest = k(rest);
            let shared = others.eq(k(0)).ite(
                &rest.eq(k(0)),
                &Bool::and(&[&rest.ge(&others), &divides_expr(&others, &rest)]),
            );
            // Interleaved: the middle stages' share (rest / others) splits into vpp chunks.
            let chunks = Bool::or(&[
                &v.vpp.eq(&one),
                &others.eq(k(0)),
                &divides_expr(&v.vpp, &rest.div(&others)),
            ]);
            Bool::and(&[&v.pp.ge(k(2)), &shared, &chunks])
        }
        Rule::BatchByDp => divides(
            &Int::mul(&[&v.dp, &v.micro_batch]),
            spec.train.global_batch as i64,
        ),
        Rule::ExpertsByEp => divides(&v.ep, m.experts as i64),
        Rule::EpWithinDp => Bool::or(&[
            &v.ep.eq(&one),
            &divides_expr(&v.ep, &Int::mul(&[&v.dp, &v.cp])),
        ]),
        Rule::SequenceParallelNeedsTp => v.sequence_parallel.implies(v.tp.gt(&one)),
        Rule::SequenceSplits => {
            let two_cp = Int::mul(&[&k(2), &v.cp]);
            let with_tp = Int::mul(&[&two_cp, &v.tp]);
            let div = v.sequence_parallel.ite(&with_tp, &two_cp);
            let active = Bool::or(&[&v.cp.gt(&one), &v.sequence_parallel]);
            active.implies(divides(&div, m.seq_len as i64))
        }
        Rule::InterleavedNeedsVpp => v.interleaved.eq(v.vpp.gt(&one)),
        Rule::InterleavedNeedsPp => v.interleaved.implies(v.pp.gt(&one)),
        Rule::GroupsHoldStages => {
            if !spec.cluster.is_mixed() {
                return Bool::from_bool(true);
            }
            let stage = Int::mul(&[&v.tp, &v.dp, &v.cp]);
            let all: Vec<Bool> = spec
                .cluster
                .groups
                .iter()
                .map(|g| divides(&stage, g.gpus() as i64))
                .collect();
            Bool::and(&all.iter().collect::<Vec<_>>())
        }
        Rule::PrecisionSupported => {
            Bool::from_bool(Rule::PrecisionSupported.holds(spec, &Parallel::neutral()))
        }
        Rule::OffloadNeedsZero => Bool::and(&[
            &v.offload.eq(k(1)).implies(v.zero.ge(&one)),
            &v.offload.eq(k(2)).implies(v.zero.eq(k(3))),
        ]),
        Rule::ZeroShardsWithoutPipeline => {
            if fsdp_in_stages(spec) {
                return Bool::from_bool(true);
            }
            v.zero.ge(k(3)).implies(v.pp.eq(&one))
        }
        Rule::FrameworkRuns => encode_framework(spec, v),
        Rule::MemoryFits => Bool::from_bool(true),
    }
}

/// [`Rule::LayersByStages`] when the plan leaves an end's layers `auto`: some split suits
/// the layout (`balance::splits`). With pp = 1, the even split (no end written). Otherwise
/// the `auto` ends take at least one layer each and the stages that share the rest evenly
/// (neither written nor `auto`) at least one each, a multiple of vpp with interleaving:
/// layers − written − auto ≥ vpp · (pp − written ends − auto ends).
fn encode_auto_ends(spec: &PlanSpec, v: &Vars) -> Bool {
    let ps = &spec.parallel;
    let k = |x: i64| Int::from_i64(x);
    let written = [ps.first_stage_layers, ps.last_stage_layers];
    let written_layers: u64 = written.iter().flatten().sum();
    let written_ends = written.iter().flatten().count() as i64;
    let auto_ends = i64::from(ps.auto_first_stage_layers) + i64::from(ps.auto_last_stage_layers);
    let one_stage = Bool::and(&[
        &v.pp.eq(k(1)),
        &Bool::from_bool(written_ends == 0),
        &divides(&v.vpp, spec.model.layers as i64),
    ]);
    let spare = spec.model.layers as i64 - written_layers as i64 - auto_ends;
    let sharing = Int::sub(&[&v.pp, &k(written_ends + auto_ends)]);
    let pipeline = Bool::and(&[&v.pp.ge(k(2)), &k(spare).ge(Int::mul(&[&v.vpp, &sharing]))]);
    Bool::or(&[&one_stage, &pipeline])
}

/// [`Rule::FrameworkRuns`] as a formula: `capability::layout_limit` over the variables.
/// The schedule is a variable only as interleaved or not; a plan that fixes `zb_h1` is
/// taken as such.
fn encode_framework(spec: &PlanSpec, v: &Vars) -> Bool {
    let k = |x: i64| Int::from_i64(x);
    let one = k(1);
    let zb = spec.parallel.schedule.fixed() == Some(Schedule::ZeroBubble);
    let no_zb = if zb {
        v.pp.eq(&one)
    } else {
        Bool::from_bool(true)
    };
    match capability::framework_of(spec) {
        Some(Framework::Deepspeed) => {
            let tp = if capability::generates_script(spec) {
                v.tp.eq(&one)
            } else {
                Bool::from_bool(true)
            };
            Bool::and(&[&v.pp.eq(&one), &v.cp.eq(&one), &v.ep.eq(&one), &tp])
        }
        Some(Framework::Megatron) => {
            let overlap_off = spec.parallel.overlap_p2p == Some(false);
            let interleave = if overlap_off {
                v.interleaved.implies(v.pp.gt(k(2)))
            } else {
                Bool::from_bool(true)
            };
            Bool::and(&[
                &no_zb,
                &v.zero.ge(k(2)).implies(v.pp.eq(&one)),
                &v.offload.eq(k(2)).not(),
                &interleave,
            ])
        }
        Some(Framework::Torchtitan) => Bool::and(&[
            &v.zero.eq(&one).not(),
            &v.offload.eq(k(1)).not(),
            &v.offload.eq(k(2)).implies(v.zero.ge(k(2))),
            &no_zb,
            &v.ep.eq(&one),
        ]),
        Some(Framework::Planc) => Bool::and(&[
            &v.cp.eq(&one),
            &v.ep.eq(&one),
            &v.zero.lt(k(2)),
            &v.offload.eq(k(0)),
            &Bool::from_bool(!zb),
        ]),
        _ => Bool::from_bool(true),
    }
}
