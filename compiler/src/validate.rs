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
}

/// Checks the layout `p` against the plan. Returns every violation found.
pub fn validate(spec: &PlanSpec, p: &Parallel) -> Vec<Diagnostic> {
    let mut v = V {
        spec,
        out: Vec::new(),
    };
    let m = &spec.model;
    let world = spec.cluster.world_size();
    let product = p.tp * p.pp * p.dp * p.cp;
    if product != world {
        v.push(
            codes::P0301,
            format!("tp × pp × dp × cp = {} × {} × {} × {} = {product}, but the cluster has {world} GPUs", p.tp, p.pp, p.dp, p.cp),
            "parallel",
            if spec.origins.written("parallel", "dp") { "dp" } else { "pp" },
            "does not match the world size",
            if world.is_multiple_of(p.tp * p.pp * p.cp) {
                format!("set `dp = {}` (or `dp = auto`)", world / (p.tp * p.pp * p.cp))
            } else {
                format!("tp × pp × cp = {} does not divide {world}: change tp, pp or cp, or the cluster size", p.tp * p.pp * p.cp)
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
    let chunks = p.pp * p.vpp;
    if !m.layers.is_multiple_of(chunks) {
        let what = if p.vpp > 1 {
            format!("pp × vpp = {} × {} = {chunks}", p.pp, p.vpp)
        } else {
            format!("pp = {}", p.pp)
        };
        v.push(
            codes::P0305,
            format!("{what} does not divide layers = {}", m.layers),
            "parallel",
            if p.vpp > 1 { "vpp" } else { "pp" },
            "stages would get unequal layers",
            format!(
                "choose pp × vpp among the divisors of {}: {}",
                m.layers,
                divisors_upto(m.layers, m.layers)
            ),
        );
    }
    let per_step = p.dp * p.micro_batch;
    if !spec.train.global_batch.is_multiple_of(per_step) {
        v.push(
            codes::P0306,
            format!(
                "global_batch = {} is not a multiple of dp × micro_batch = {} × {} = {per_step}",
                spec.train.global_batch, p.dp, p.micro_batch
            ),
            "train",
            "global_batch",
            "gradient accumulation would not be whole",
            format!(
                "use a global_batch that is a multiple of {per_step}, e.g. {}",
                round_up(spec.train.global_batch, per_step)
            ),
        );
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
    let stage_ranks = p.tp * p.cp * p.dp;
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
                p.pp * per_step
            )),
        );
    }
    if p.zero >= 2 && p.pp > 1 {
        let (f, s) = v.at("parallel", "zero");
        v.out.push(
            Diagnostic::new(
                codes::P0317,
                format!("ZeRO-{} with pipeline parallelism (pp = {})", p.zero, p.pp),
            )
            .at(f, s, format!("zero = {} and pp > 1", p.zero))
            .help("use zero = 1 (Megatron's distributed optimizer) with pp > 1, or pp = 1"),
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
    v.out
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
