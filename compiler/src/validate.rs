//! The rules a parallel layout must follow, each with its code and the place to change.
//!
//! Runs on a [`PlanSpec`] with a chosen [`Parallel`]; holes are resolved before this.
//! Memory limits are checked after costing (`cost`), not here.

use planc_lang::codes::{self, Code};
use planc_lang::{Diagnostic, FileId, Span};

use crate::plan::*;

struct V<'a> {
    spec: &'a PlanSpec,
    out: Vec<Diagnostic>,
}

impl V<'_> {
    fn at(&self, block: &str, attr: &str) -> (FileId, Span) {
        self.spec.origins.of(block, attr).unwrap_or_default()
    }

    fn push(
        &mut self,
        code: Code,
        msg: String,
        block: &str,
        attr: &str,
        label: &str,
        help: String,
    ) {
        let (f, s) = self.at(block, attr);
        self.out
            .push(Diagnostic::new(code, msg).at(f, s, label).help(help));
    }

    /// The text that fixes the diagnostic just pushed, in place of `block.attr`'s value:
    /// only where the value is written (else its place is the block's).
    fn fix_last(&mut self, block: &str, attr: &str, x: String) {
        if self.spec.origins.written(block, attr) {
            if let Some(d) = self.out.last_mut() {
                d.replacement = Some(x);
            }
        }
    }
}

/// Checks the layout `p` against the plan. Returns every violation found.
pub fn validate(spec: &PlanSpec, p: &Parallel) -> Vec<Diagnostic> {
    let mut v = V {
        spec,
        out: Vec::new(),
    };
    let m = &spec.model;
    let world = spec.cluster.world_size();
    let product =
        p.tp.saturating_mul(p.pp)
            .saturating_mul(p.dp)
            .saturating_mul(p.cp);
    if product != world {
        v.push(
            codes::P0301,
            format!("tp × pp × dp × cp = {} × {} × {} × {} = {product}, but the cluster has {world} GPUs", p.tp, p.pp, p.dp, p.cp),
            "parallel",
            if spec.origins.written("parallel", "dp") { "dp" } else { "pp" },
            "does not match the world size",
            if world.is_multiple_of(p.tp.saturating_mul(p.pp).saturating_mul(p.cp)) {
                format!("set `dp = {}` (or `dp = auto`)", world / (p.tp.saturating_mul(p.pp).saturating_mul(p.cp)))
            } else {
                format!("tp × pp × cp = {} does not divide {world}: change tp, pp or cp, or the cluster size", p.tp.saturating_mul(p.pp).saturating_mul(p.cp))
            },
        );
    }
    if p.ep > 1 && !(p.dp * p.cp).is_multiple_of(p.ep) {
        v.push(
            codes::P0302,
            format!("ep = {} does not divide dp × cp = {}", p.ep, p.dp * p.cp),
            "parallel",
            "ep",
            "expert parallelism is carved out of data parallelism",
            "choose ep among the divisors of dp × cp".into(),
        );
    }
    if !m.experts.is_multiple_of(p.ep) {
        v.push(
            codes::P0316,
            format!("ep = {} does not divide the {} experts", p.ep, m.experts),
            "parallel",
            "ep",
            "experts cannot be split evenly",
            format!("choose ep among the divisors of {}", m.experts),
        );
    }
    if m.top_k > m.experts {
        v.push(
            codes::P0319,
            format!(
                "top_k = {} but the model has {} experts",
                m.top_k, m.experts
            ),
            "model",
            "top_k",
            "more than the experts",
            format!("set top_k ≤ {}", m.experts),
        );
    }
    if !m.heads.is_multiple_of(p.tp) {
        v.push(
            codes::P0303,
            format!("tp = {} does not divide heads = {}", p.tp, m.heads),
            "parallel",
            "tp",
            "heads cannot be split evenly",
            format!(
                "choose tp among {}",
                divisors_upto(m.heads, spec.cluster.gpus_per_node().max(8))
            ),
        );
    }
    if !m.heads.is_multiple_of(m.kv_heads) {
        v.push(
            codes::P0313,
            format!(
                "kv_heads = {} does not divide heads = {}",
                m.kv_heads, m.heads
            ),
            "model",
            "kv_heads",
            "not a divisor of heads",
            "kv_heads must divide heads".into(),
        );
    } else if !m.kv_heads.is_multiple_of(p.tp) && m.heads.is_multiple_of(p.tp) {
        v.push(
            codes::P0304,
            format!("tp = {} does not divide kv_heads = {}", p.tp, m.kv_heads),
            "parallel",
            "tp",
            "key/value heads cannot be split evenly",
            format!("choose tp among {}", divisors_upto(m.kv_heads, 64)),
        );
    }
    if let Some(e) = p.split_error(m.layers) {
        split_diagnostic(&mut v, p, m.layers, e);
    }
    let per_step = p.dp * p.micro_batch;
    if !spec.train.global_batch.is_multiple_of(per_step) {
        let next = round_up(spec.train.global_batch, per_step);
        v.push(
            codes::P0306,
            format!(
                "global_batch = {} is not a multiple of dp × micro_batch = {} × {} = {per_step}",
                spec.train.global_batch, p.dp, p.micro_batch
            ),
            "train",
            "global_batch",
            "gradient accumulation would not be whole",
            format!("use a global_batch that is a multiple of {per_step}, e.g. {next}"),
        );
        v.fix_last("train", "global_batch", next.to_string());
    }
    match (p.schedule, p.vpp) {
        (Schedule::Interleaved, 1) => v.push(
            codes::P0307,
            "the interleaved schedule needs vpp > 1".into(),
            "parallel",
            "schedule",
            "interleaved with vpp = 1",
            "set `vpp = 2` (or more), or use `schedule = 1f1b`".into(),
        ),
        (Schedule::Interleaved, _) if p.pp == 1 => v.push(
            codes::P0307,
            "the interleaved schedule needs pp > 1".into(),
            "parallel",
            "schedule",
            "no pipeline to interleave",
            "use `schedule = 1f1b` or raise pp".into(),
        ),
        (s, vpp) if vpp > 1 && s != Schedule::Interleaved => v.push(
            codes::P0307,
            format!("vpp = {vpp} needs `schedule = interleaved`"),
            "parallel",
            "vpp",
            "model chunks without interleaving",
            "set `schedule = interleaved`, or `vpp = 1`".into(),
        ),
        _ => {}
    }
    if p.sequence_parallel && p.tp == 1 {
        v.push(
            codes::P0308,
            "sequence_parallel needs tp > 1".into(),
            "parallel",
            "sequence_parallel",
            "nothing to split",
            "set `sequence_parallel = false` or raise tp".into(),
        );
    }
    let seq_div = 2 * p.cp * if p.sequence_parallel { p.tp } else { 1 };
    if (p.cp > 1 || p.sequence_parallel) && !m.seq_len.is_multiple_of(seq_div.max(1)) {
        v.push(
            codes::P0312,
            format!("seq_len = {} is not divisible by {seq_div}", m.seq_len),
            "model",
            "seq_len",
            "the sequence cannot be split evenly",
            format!("use a seq_len that is a multiple of {seq_div}"),
        );
    }
    let mut tp_spans_reported: Vec<u64> = Vec::new();
    for g in &spec.cluster.groups {
        if g.gpu.peak(spec.train.precision).is_none() {
            let alt = [Precision::Bf16, Precision::Fp16]
                .into_iter()
                .find(|q| g.gpu.peak(*q).is_some())
                .unwrap_or(Precision::Fp32);
            v.push(
                codes::P0309,
                format!("{} has no {} support", g.gpu.name, spec.train.precision),
                "train",
                "precision",
                "unsupported by the device",
                format!("use `precision = {alt}` on {}", g.gpu.name),
            );
        }
        if p.tp > g.gpus_per_node
            && spec.cluster.nodes() > 1
            && !tp_spans_reported.contains(&g.gpus_per_node)
        {
            tp_spans_reported.push(g.gpus_per_node);
            let (f, s) = v.at("parallel", "tp");
            v.out.push(
                Diagnostic::new(
                    codes::P0310,
                    format!("tp = {} spans nodes of {} GPUs", p.tp, g.gpus_per_node),
                )
                .at(
                    f,
                    s,
                    "tensor-parallel collectives would cross the inter-node network",
                )
                .help(format!(
                    "keep tp ≤ {} and use pp for the rest",
                    g.gpus_per_node
                )),
            );
        }
    }
    if spec.train.precision == Precision::Fp32 {
        let (f, s) = v.at("train", "precision");
        v.out.push(
            Diagnostic::new(
                codes::P0320,
                "fp32 training runs far below the tensor-core peak",
            )
            .at(f, s, "fp32")
            .help("use bf16 (or fp16 on pre-Ampere GPUs) mixed precision"),
        );
    }
    let stage_ranks = p.tp.saturating_mul(p.cp).saturating_mul(p.dp);
    if spec.cluster.is_mixed() {
        let misfits: Vec<String> = spec
            .cluster
            .groups
            .iter()
            .filter(|g| !g.gpus().is_multiple_of(stage_ranks))
            .map(|g| format!("`{}` has {}", g.name, g.gpus()))
            .collect();
        if !misfits.is_empty() {
            v.push(
                codes::P0315,
                format!(
                    "a pipeline stage needs tp × dp × cp = {stage_ranks} GPUs of one kind, but group {}",
                    misfits.join(" and group ")
                ),
                "parallel",
                "tp",
                "a pipeline stage would straddle two kinds of GPU",
                "choose tp × dp × cp dividing every group's GPU count, and pp to cover the groups"
                    .into(),
            );
        }
    }
    let m_count = p.grad_accum(spec.train.global_batch);
    if p.pp > 1
        && m_count < p.pp
        && per_step > 0
        && spec.train.global_batch.is_multiple_of(per_step)
    {
        let (f, s) = v.at("train", "global_batch");
        v.out.push(
            Diagnostic::new(
                codes::P0311,
                format!("{m_count} micro-batches for {} pipeline stages", p.pp),
            )
            .at(f, s, "too few micro-batches")
            .help(format!(
                "raise global_batch to at least {} or lower micro_batch or pp",
                p.pp.saturating_mul(per_step)
            )),
        );
    }
    // ZeRO-2 under a pipeline reduce-scatters each micro-batch's gradients into their
    // shards (FSDP sharding gradients, as Meta trained Llama 3 405B): priced, and allowed.
    // ZeRO-3 would also gather every chunk's parameters before every pass; torchtitan runs
    // it (FSDP2 inside each pipeline stage), the other frameworks do not.
    if p.zero >= 3 && p.pp > 1 && spec.framework() != crate::plan::Framework::Torchtitan {
        let (f, s) = v.at("parallel", "zero");
        v.out.push(
            Diagnostic::new(
                codes::P0317,
                format!("ZeRO-{} with pipeline parallelism (pp = {})", p.zero, p.pp),
            )
            .at(f, s, format!("zero = {} and pp > 1", p.zero))
            .help("use zero = 1 (Megatron's distributed optimizer) or 2 (gradients sharded too) with pp > 1, or pp = 1, or job.framework = torchtitan (FSDP inside each stage)"),
        );
    }
    if p.overlap_p2p == Some(true) && !p.overlaps_p2p() {
        let (f, s) = v.at("parallel", "overlap_p2p");
        v.out.push(
            Diagnostic::new(
                codes::P0324,
                format!(
                    "`overlap_p2p = true` has no effect with the {} schedule",
                    p.schedule
                ),
            )
            .at(f, s, "pipeline transfers stay on the critical path")
            .help("Megatron-LM overlaps pipeline transfers only in the interleaved schedule (vpp > 1): use `schedule = interleaved`, or remove `overlap_p2p`"),
        );
    }
    if p.scatter_gather_p2p && (p.pp <= 1 || p.tp <= 1 || p.sequence_parallel) {
        let why = if p.pp <= 1 {
            "with one pipeline stage there are no pipeline transfers"
        } else if p.tp <= 1 {
            "with one tensor-parallel rank there is nothing to split over"
        } else {
            "under sequence parallelism each rank already sends 1/tp of the tokens"
        };
        v.push(
            codes::P0326,
            "`scatter_gather_p2p = true` has no effect here".into(),
            "parallel",
            "scatter_gather_p2p",
            why,
            "remove `scatter_gather_p2p`, or use it where tp > 1 and pp > 1 without sequence parallelism".into(),
        );
    }
    match p.offload {
        Offload::Optimizer if p.zero == 0 => v.push(
            codes::P0318,
            "`offload = optimizer` needs zero ≥ 1".into(),
            "parallel",
            "offload",
            "needs ZeRO",
            "set `zero = 1` or more".into(),
        ),
        Offload::Params if p.zero != 3 => v.push(
            codes::P0318,
            "`offload = params` needs zero = 3".into(),
            "parallel",
            "offload",
            "needs ZeRO-3",
            "set `zero = 3`".into(),
        ),
        _ => {}
    }
    if let Some(limit) = crate::capability::limit(spec, p) {
        v.push(
            codes::P0330,
            if limit.framework == "planc" {
                "`planc run` does not run this layout (job.framework = planc)".to_string()
            } else {
                format!(
                    "planc cannot emit this layout for job.framework = {}",
                    limit.framework
                )
            },
            "parallel",
            limit.attr,
            &limit.reason,
            format!(
                "change `{}`, or the framework (`planc solve` searches only what {} runs)",
                limit.attr, limit.framework
            ),
        );
    }
    v.out
}

/// What `vpp = n` means next to Megatron-LM's most used flag, which counts the other way:
/// `--num-layers-per-virtual-pipeline-stage n` is n layers per chunk, `vpp` is n chunks per
/// stage. A user who copied n from that flag meant the `vpp` this says, when there is one.
fn vpp_as_megatron(layers: u64, pp: u64, vpp: u64) -> String {
    let lead = format!(
        "vpp counts chunks per stage, while Megatron-LM's \
         `--num-layers-per-virtual-pipeline-stage {vpp}` counts layers per chunk"
    );
    if pp == 0 || !layers.is_multiple_of(pp) {
        return lead;
    }
    let per_stage = layers / pp;
    // Chunk sizes that split a stage into two chunks or more, nearest to `vpp` layers.
    let nearest = (1..per_stage)
        .filter(|&c| per_stage.is_multiple_of(c))
        .min_by_key(|&c| (c.abs_diff(vpp), c));
    match nearest {
        Some(c) if c == vpp => format!(
            "{lead}: for chunks of {vpp} layers ({per_stage} per stage), write `vpp = {}`",
            per_stage / c
        ),
        Some(c) => format!(
            "{lead}: the {per_stage} layers of a stage do not split into chunks of {vpp} \
             layers; the nearest, chunks of {c}, is `vpp = {}`",
            per_stage / c
        ),
        None => lead,
    }
}

/// The diagnostic for layers that do not split over the stages (P0305, P0321–P0323).
fn split_diagnostic(v: &mut V, p: &Parallel, layers: u64, e: SplitError) {
    // Uneven-stage diagnostics point at the attribute the user wrote first.
    let end_attr = if v.spec.origins.written("parallel", "first_stage_layers") {
        "first_stage_layers"
    } else {
        "last_stage_layers"
    };
    let ends = describe_ends(p);
    match e {
        SplitError::NotDivisible => {
            let chunks = p.pp * p.vpp;
            let what = if p.vpp > 1 {
                format!("pp × vpp = {} × {} = {chunks}", p.pp, p.vpp)
            } else {
                format!("pp = {}", p.pp)
            };
            let divisors = divisors_upto(layers, layers);
            let help = match suggest_uneven(layers, p.pp) {
                Some((first, last)) if p.vpp == 1 => {
                    let middle = (layers - first - last) / (p.pp - 2).max(1);
                    let others = if p.pp > 2 {
                        format!(" ({middle} on each of the {} other stages)", p.pp - 2)
                    } else {
                        String::new()
                    };
                    format!(
                        "choose pp among the divisors of {layers}: {divisors}; or keep pp = {} with uneven stages: \
                         `first_stage_layers = {first}` and `last_stage_layers = {last}`{others}",
                        p.pp
                    )
                }
                _ => format!("choose pp × vpp among the divisors of {layers}: {divisors}"),
            };
            let help = if p.vpp > 1 {
                format!("{help}; {}", vpp_as_megatron(layers, p.pp, p.vpp))
            } else {
                help
            };
            v.push(
                codes::P0305,
                format!("{what} does not divide layers = {layers}"),
                "parallel",
                if p.vpp > 1 { "vpp" } else { "pp" },
                "stages would get unequal layers",
                help,
            );
        }
        SplitError::UnevenWithoutPipeline => v.push(
            codes::P0321,
            format!("{ends} with pp = 1"),
            "parallel",
            end_attr,
            "there is only one pipeline stage",
            "remove `first_stage_layers` and `last_stage_layers`, or raise pp".into(),
        ),
        SplitError::UnevenChunks { middle, vpp } => {
            let (f, s) = v.at(
                "parallel",
                if v.spec.origins.written("parallel", "vpp") {
                    "vpp"
                } else {
                    "schedule"
                },
            );
            let (ef, es) = v.at("parallel", end_attr);
            let chunk_divisors = divisors_upto(middle, middle);
            v.out.push(
                Diagnostic::new(
                    codes::P0323,
                    format!(
                        "{ends} leave {middle} layers on each other stage, which do not split into vpp = {vpp} equal chunks"
                    ),
                )
                .at(f, s, format!("{vpp} chunks per stage"))
                .also(ef, es, "uneven stages")
                .help(format!(
                    "choose vpp among the divisors of {middle}: {chunk_divisors}; or change the ends so that the other stages' share divides by {vpp}"
                )),
            );
        }
        SplitError::UnevenRest { rest, stages } => {
            let msg = match rest {
                None => format!("{ends} add up to more than the model's {layers} layers"),
                Some(r) if stages == 0 => format!(
                    "{ends} hold {} of the {layers} layers, and pp = {} leaves no other stage for the rest",
                    layers - r,
                    p.pp
                ),
                Some(r) => format!(
                    "{ends} leave {r} layers for the {stages} other stage{}, which cannot share them evenly",
                    if stages == 1 { "" } else { "s" }
                ),
            };
            let help = match nearest_split(p, layers) {
                Some(q) => {
                    let mut sets = Vec::new();
                    if let Some(f) = q.first_stage_layers {
                        sets.push(format!("`first_stage_layers = {f}`"));
                    }
                    if let Some(l) = q.last_stage_layers {
                        sets.push(format!("`last_stage_layers = {l}`"));
                    }
                    let others = if stages > 0 {
                        format!(
                            " ({} on each of the {stages} other stage{})",
                            q.middle_stage_layers(layers),
                            if stages == 1 { "" } else { "s" }
                        )
                    } else {
                        String::new()
                    };
                    format!("set {}{others}", sets.join(" and "))
                }
                None => format!(
                    "the other stages need at least one layer each: lower pp (now {})",
                    p.pp
                ),
            };
            let (f, s) = v.at("parallel", end_attr);
            let (pf, ps) = v.at("parallel", "pp");
            let mut d = Diagnostic::new(codes::P0322, msg)
                .at(f, s, "stages do not add up to the model's layers")
                .also(pf, ps, format!("{} stages", p.pp));
            if end_attr == "first_stage_layers"
                && v.spec.origins.written("parallel", "last_stage_layers")
            {
                let (lf, ls) = v.at("parallel", "last_stage_layers");
                d = d.also(lf, ls, "");
            }
            v.out.push(d.help(help));
        }
    }
}

/// `first_stage_layers = 7 and last_stage_layers = 7`, as the plan sets them.
fn describe_ends(p: &Parallel) -> String {
    let mut parts = Vec::new();
    if let Some(f) = p.first_stage_layers {
        parts.push(format!("first_stage_layers = {f}"));
    }
    if let Some(l) = p.last_stage_layers {
        parts.push(format!("last_stage_layers = {l}"));
    }
    parts.join(" and ")
}

/// The valid uneven split closest to the written one, setting the same ends: fewest layers
/// moved, then the most balanced ends. Computed, not searched, since `layers` and `pp` may
/// be anything a user writes.
fn nearest_split(p: &Parallel, layers: u64) -> Option<Parallel> {
    let ends = u64::from(p.first_stage_layers.is_some()) + u64::from(p.last_stage_layers.is_some());
    if ends == 0 || p.pp < 2 || p.vpp > 1 {
        return None;
    }
    let stages = p.pp - ends;
    let fixed = p
        .first_stage_layers
        .unwrap_or(0)
        .saturating_add(p.last_stage_layers.unwrap_or(0));
    // What the ends hold together after the change: with other stages, the layers less
    // the multiple of their count nearest to what they have now (each end keeps one).
    let total = match layers.checked_sub(ends)?.checked_div(stages) {
        // No other stage: the ends hold every layer.
        None => layers,
        Some(shares) => {
            let top = shares * stages;
            if top == 0 {
                return None;
            }
            let rest = layers.saturating_sub(fixed);
            let down = (rest / stages * stages).clamp(stages, top);
            let up = (rest / stages)
                .saturating_add(1)
                .saturating_mul(stages)
                .clamp(stages, top);
            // On a tie, the larger rest: lighter ends.
            layers
                - if rest.abs_diff(down) < rest.abs_diff(up) {
                    down
                } else {
                    up
                }
        }
    };
    if total < ends {
        return None;
    }
    let mut q = p.clone();
    match (p.first_stage_layers, p.last_stage_layers) {
        (Some(f), Some(l)) => {
            let (f, l) = rebalance(f, l, total);
            q.first_stage_layers = Some(f);
            q.last_stage_layers = Some(l);
        }
        (Some(_), None) => q.first_stage_layers = Some(total),
        _ => q.last_stage_layers = Some(total),
    }
    q.split_error(layers).is_none().then_some(q)
}

/// Two ends moved to sum to `total` (≥ 2), each only in the direction of the change, evening
/// them out as far as it goes.
fn rebalance(first: u64, last: u64, total: u64) -> (u64, u64) {
    let (small, large) = (first.min(last), first.max(last));
    let sum = small.saturating_add(large);
    let (a, b) = if total >= sum {
        let d = total - sum;
        let fill = d.min(large - small);
        let rem = d - fill;
        (small + fill + rem / 2, large + rem - rem / 2)
    } else {
        let d = sum - total;
        let cut = d.min(large - small);
        let rem = d - cut;
        (small - rem / 2, large - cut - (rem - rem / 2))
    };
    if a.abs_diff(b) == 1 {
        // Evened out but for one layer: the first stage takes the lighter share, as it
        // holds the most micro-batches in flight.
        (a.min(b), a.max(b))
    } else if first <= last {
        (a, b)
    } else {
        (b, a)
    }
}

fn divisors_upto(n: u64, limit: u64) -> String {
    let d: Vec<String> = (1..=n.min(limit))
        .filter(|d| n.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect();
    d.join(", ")
}

fn round_up(x: u64, m: u64) -> u64 {
    let m = m.max(1);
    x.div_ceil(m) * m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(pp: u64, first: Option<u64>, last: Option<u64>) -> Parallel {
        Parallel {
            pp,
            first_stage_layers: first,
            last_stage_layers: last,
            ..Parallel::neutral()
        }
    }

    fn nearest(
        pp: u64,
        first: Option<u64>,
        last: Option<u64>,
        layers: u64,
    ) -> Option<(Option<u64>, Option<u64>)> {
        nearest_split(&ends(pp, first, last), layers)
            .map(|q| (q.first_stage_layers, q.last_stage_layers))
    }

    #[test]
    fn vpp_errors_speak_megatron_lms_layers_per_chunk() {
        // 32 layers over pp 4: 8 a stage. `vpp = 5` copied from
        // `--num-layers-per-virtual-pipeline-stage 5` splits nothing.
        let h = vpp_as_megatron(32, 4, 5);
        assert!(
            h.contains("--num-layers-per-virtual-pipeline-stage 5"),
            "{h}"
        );
        assert!(h.contains("chunks of 4, is `vpp = 2`"), "{h}");
        // 12 layers over pp 1 split into chunks of 3: `vpp = 4`.
        assert!(vpp_as_megatron(12, 1, 3).ends_with("write `vpp = 4`"));
    }

    #[test]
    fn the_nearest_uneven_split_moves_fewest_layers_and_evens_the_ends() {
        // 126 over 16: 7 + 8 leaves 111 for 14 stages; 7 + 7 leaves 112 = 14 × 8.
        assert_eq!(nearest(16, Some(7), Some(8), 126), Some((Some(7), Some(7))));
        assert_eq!(nearest(16, Some(9), Some(9), 126), Some((Some(7), Some(7))));
        assert_eq!(nearest(16, Some(1), Some(1), 126), Some((Some(7), Some(7))));
        // One end set: 30 − 5 = 25 over 3 others → 30 − 24 = 6.
        assert_eq!(nearest(4, Some(5), None, 30), Some((Some(6), None)));
        assert_eq!(nearest(4, None, Some(5), 30), Some((None, Some(6))));
        // Two stages: the ends must hold every layer.
        assert_eq!(
            nearest(2, Some(10), Some(10), 25),
            Some((Some(12), Some(13)))
        );
        assert_eq!(
            nearest(2, Some(20), Some(30), 25),
            Some((Some(12), Some(13)))
        );
        // Ends far beyond the model come down to what leaves one layer per other stage.
        assert_eq!(
            nearest(3, Some(20), Some(20), 30),
            Some((Some(14), Some(15)))
        );
        // More stages than layers: nothing works.
        assert_eq!(nearest(40, Some(1), Some(1), 30), None);
        // Huge numbers are computed, not searched.
        let big = 1_000_000_000_000_000;
        assert!(nearest(1_000, Some(7), Some(8), big).is_some());
        assert!(nearest(2, Some(big), Some(big), big).is_some());
    }

    #[test]
    fn every_nearest_split_is_valid() {
        for layers in 1..=40 {
            for pp in 2..=12 {
                for f in [None, Some(1), Some(5), Some(17), Some(50)] {
                    for l in [None, Some(1), Some(4), Some(50)] {
                        if let Some(q) = nearest_split(&ends(pp, f, l), layers) {
                            assert_eq!(q.split_error(layers), None, "{layers} {pp} {f:?} {l:?}");
                        }
                    }
                }
            }
        }
    }
}
