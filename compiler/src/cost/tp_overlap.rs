//! The tensor-parallel collectives a column-parallel product's backward runs beside its own
//! gradient products, where the framework issues them asynchronously
//! (`parallel.overlap_tp_backward`).
//!
//! Megatron-LM's `LinearWithGradAccumulationAndAsyncCommunication` (since f3e57f6fee,
//! 2021-09; `megatron/mpu/layers.py` at 739cb43dae) and Transformer Engine's `Linear` /
//! `LayerNormLinear` (Megatron-Core's column-parallel layers) start the backward's
//! collectives on their own stream and compute while they run:
//!
//! - without sequence parallelism, the input gradient's all-reduce runs beside the
//!   weight-gradient product;
//! - with it, the input's re-gather (the forward kept only its own shard) runs beside the
//!   input-gradient product, and the input gradient's reduce-scatter beside the
//!   weight-gradient product.
//!
//! The row-parallel products' backward collective (the all-gather of the output gradient
//! under sequence parallelism; none without it) stays exposed: nothing computes before the
//! gradient arrives. A collective beside a product takes its SMs and memory bandwidth for
//! as long as it runs ([`super::time::group_contention`]), so the product loses that share
//! of the overlapped time, and what outlasts the (lengthened) product waits.
//!
//! Without the attribute, the backward keeps the forward's collectives, exposed, as
//! Megatron-LM ran before 2021-09 (Narayanan et al.'s runs).

use super::comm::{collective_time, Collective};
use super::method::trains_weight;
use super::op_id::OpId;
use super::ops::{Op, OpKind};
use super::time::{group_contention, Device, Placement};
use crate::plan::Plan;

/// What the overlap changes in a layer's backward: `comm`, added to its exposed
/// collectives (negative: it hides what the forward's mirror charged), and `lost`, added
/// to its compute: each column-parallel product's share beside the collectives.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Overlap {
    pub comm: f64,
    pub lost: Vec<(OpId, f64)>,
}

impl Overlap {
    pub fn lost(&self) -> f64 {
        self.lost.iter().map(|l| l.1).sum()
    }
}

/// The column-parallel products, each with the gather before it (under sequence
/// parallelism) and its block's closing reduction.
const BLOCKS: [(OpId, OpId, OpId); 2] = [
    (
        OpId::QkvProj,
        OpId::AttentionAllGather,
        OpId::AttentionReduce,
    ),
    (OpId::MlpUpProj, OpId::MlpAllGather, OpId::MlpReduce),
];

/// [`Overlap`] of the backward of `ops` (a layer's forward operations, or some of them).
pub(crate) fn backward(plan: &Plan, ops: &[Op], dev: &Device, pl: &Placement) -> Overlap {
    let mut out = Overlap::default();
    if !plan.parallel.overlaps_tp_backward(plan.framework()) || pl.tp.size <= 1 {
        return out;
    }
    let find = |id: OpId| ops.iter().find(|o| o.id == id);
    let time = |c, bytes| collective_time(c, bytes, pl.tp, &pl.fabric);
    let share = |c| group_contention(dev.gpu, pl.tp, &pl.fabric, c);
    for (product, gather, reduce) in BLOCKS {
        let (Some(p), Some(r)) = (find(product), find(reduce)) else {
            continue;
        };
        let (OpKind::Gemm { m, n, k }, OpKind::Collective { op: rop, bytes, .. }) =
            (&p.kind, &r.kind)
        else {
            continue;
        };
        let pdev = dev.for_op(p.id);
        // Input gradient (tokens × n by n × k) and weight gradient (n × tokens by tokens × k).
        let dgrad = pdev.product(*m, *k, *n, false);
        let wgrad = if trains_weight(plan, p) {
            pdev.product(*n, *k, *m, false)
        } else {
            0.0
        };
        // The forward's collectives, which the backward's mirror charged exposed.
        let closing = time(*rop, *bytes);
        match find(gather).map(|g| &g.kind) {
            Some(OpKind::Collective {
                op: gop,
                bytes: gbytes,
                ..
            }) => {
                let regather = time(*gop, *gbytes);
                let (e1, l1) = beside(regather, dgrad, share(Collective::AllGather));
                // The input gradient's reduce-scatter: the closing one's size and kind.
                let (e2, l2) = beside(closing, wgrad, share(Collective::ReduceScatter));
                // The closing reduce-scatter's gradient: an all-gather, exposed.
                let exposed = time(Collective::AllGather, *bytes);
                out.comm += exposed + e1 + e2 - regather - closing;
                out.lost.push((product, l1 + l2));
            }
            _ => {
                let (e, l) = beside(closing, wgrad, share(Collective::AllReduce));
                out.comm += e - closing;
                out.lost.push((product, l));
            }
        }
    }
    out
}

/// The output layer's backward without sequence parallelism: its input's gradient summed
/// over the tensor-parallel group, which no forward collective mirrors (the vocabulary-
/// parallel logits take the whole input). Megatron-LM's `parallel_lm_logits`
/// (`copy_to_tensor_model_parallel_region`, asynchronous beside the weight gradient since
/// 83b1e42f30) and Megatron-Core's output layer, and planc's runtime (`tp_reduce_rows` after
/// the weight gradient, `loss_head`). Returns (exposed seconds, the logits' lost compute).
pub(crate) fn head_backward(plan: &Plan, dev: &Device, pl: &Placement) -> (f64, f64) {
    let p = &plan.parallel;
    if pl.tp.size <= 1 || p.sequence_parallel {
        return (0.0, 0.0);
    }
    let m = &plan.model;
    let tokens = (p.micro_batch * m.seq_len / p.cp) as f64;
    let h = m.hidden as f64;
    let bytes = tokens * h * plan.train.precision.bytes();
    let all_reduce = collective_time(Collective::AllReduce, bytes, pl.tp, &pl.fabric);
    if !p.overlaps_tp_backward(plan.framework()) {
        return (all_reduce, 0.0);
    }
    let wgrad = if plan.train.method.trains_ends() {
        let v = m.vocab as f64 / pl.tp.size as f64;
        dev.for_op(OpId::Logits).product(v, h, tokens, false)
    } else {
        0.0
    };
    let share = group_contention(dev.gpu, pl.tp, &pl.fabric, Collective::AllReduce);
    beside(all_reduce, wgrad, share)
}

/// A collective of `c` seconds issued beside a product of `w`: (what waits past the
/// product, what the product loses). The product loses `share` of the time they run
/// together and so runs that much longer, which hides that much more of the collective.
fn beside(c: f64, w: f64, share: f64) -> (f64, f64) {
    let lost = share * c.min(w);
    ((c - w - lost).max(0.0), lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;
    use crate::cost::ops::layer_forward;
    use crate::cost::time::{layer_backward, time_ops};

    fn plan(framework: &str, parallel: &str) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ preset = \"llama3-70b\" }}
             train {{ global_batch = 16, precision = bf16, attention = flash }}
             parallel {{ tp = 8, pp = 1, dp = 1, micro_batch = 1, {parallel} }}
             job j {{ framework = {framework} }}"
        );
        let checked = check_source("t.tp", &text);
        checked
            .plan
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
    }

    /// (backward comm, backward compute) of one layer.
    fn backward_of(p: &Plan) -> (f64, f64) {
        let (dev, pl) = crate::cost::first_group(p);
        let ops = layer_forward(p);
        let b = layer_backward(p, &ops, time_ops(&ops, &dev, &pl), &dev, &pl);
        (b.comm, b.compute)
    }

    #[test]
    fn megatron_hides_the_column_products_backward_collectives_at_the_cost_of_their_sms() {
        for sp in [false, true] {
            let on = plan("megatron", &format!("sequence_parallel = {sp}"));
            let off = plan(
                "megatron",
                &format!("sequence_parallel = {sp}, overlap_tp_backward = false"),
            );
            let ((comm_on, compute_on), (comm_off, compute_off)) =
                (backward_of(&on), backward_of(&off));
            assert!(comm_on < comm_off, "sp {sp}: {comm_on} !< {comm_off}");
            // The products lose a share of what they hide: slower, but by less than it hid.
            assert!(compute_on > compute_off, "sp {sp}");
            assert!(compute_on - compute_off < comm_off - comm_on, "sp {sp}");
            if sp {
                // The row-parallel products' output gradients are gathered before anything
                // can compute: those two all-gathers stay exposed.
                assert!(comm_on > 0.0);
            } else {
                // Without sequence parallelism only what outlasts the weight gradients
                // waits: the MLP's all-reduce hides whole, the attention's (its grouped
                // query product is small) in part.
                assert!(comm_on < 0.5 * comm_off, "{comm_on} vs {comm_off}");
            }
        }
    }

    #[test]
    fn other_frameworks_issue_the_backward_collectives_in_order_unless_told() {
        let torch = plan("torch", "sequence_parallel = true");
        let megatron_off = plan(
            "megatron",
            "sequence_parallel = true, overlap_tp_backward = false",
        );
        assert_eq!(backward_of(&torch).0, backward_of(&megatron_off).0);
        let torch_on = plan(
            "torch",
            "sequence_parallel = true, overlap_tp_backward = true",
        );
        assert!(backward_of(&torch_on).0 < backward_of(&torch).0);
    }

    #[test]
    fn a_collective_beside_a_longer_product_only_slows_it() {
        let (exposed, lost) = beside(1.0, 3.0, 0.3);
        assert_eq!(exposed, 0.0);
        assert!((lost - 0.3).abs() < 1e-12);
    }

    #[test]
    fn what_outlasts_the_lengthened_product_waits() {
        let (exposed, lost) = beside(3.0, 1.0, 0.25);
        assert!((lost - 0.25).abs() < 1e-12);
        assert!((exposed - 1.75).abs() < 1e-12);
        // Nothing to hide behind: all of it waits.
        assert_eq!(beside(2.0, 0.0, 0.3), (2.0, 0.0));
    }

    #[test]
    fn the_output_layer_sums_its_input_gradient_without_sequence_parallelism() {
        let tokens = 8192.0; // llama3-70b's sequence, micro-batch 1
        let sp = plan("megatron", "sequence_parallel = true");
        let (dev, pl) = crate::cost::first_group(&sp);
        let whole = collective_time(
            Collective::AllReduce,
            tokens * 8192.0 * 2.0,
            pl.tp,
            &pl.fabric,
        );
        // Under sequence parallelism the input's gather (and its gradient's reduce-scatter)
        // is the head's forward collective, mirrored: nothing more here.
        assert_eq!(head_backward(&sp, &dev, &pl), (0.0, 0.0));
        // In order (planc's runtime, Megatron-LM before 2021-09): the whole all-reduce waits.
        let off = plan("megatron", "overlap_tp_backward = false");
        assert_eq!(head_backward(&off, &dev, &pl), (whole, 0.0));
        assert_eq!(head_backward(&plan("planc", ""), &dev, &pl).0, whole);
        // Beside the logits' weight gradient (128256 / 8 x 8192 x 8192, far longer): hidden,
        // the product slowed by its share.
        let (exposed, lost) = head_backward(&plan("megatron", ""), &dev, &pl);
        assert_eq!(exposed, 0.0);
        assert!(lost > 0.0 && lost < whole, "{lost} {whole}");
    }
}
