//! What `CUDA_LAUNCH_BLOCKING` (set in `job.env`) costs a step: every kernel launch returns
//! only once its kernel has finished, so the host's dispatch of the next operation, and the
//! launch's round trip, sit between kernels instead of running ahead of them.
//!
//! It is a debugging setting (the error of an asynchronous kernel then points at the launch
//! that caused it) that training scripts keep by accident, and sometimes on purpose: BLOOM's
//! tr11 script exports it ("do not remove or the training will hang"). A pass then takes its
//! kernels' time plus a gap a kernel. The gaps are measured on the lent H200 host (torch 2.11,
//! `runtime/tests/gpu/launch_blocking.py`, 2026-11-28, `docs/measurements.md`): a 4096³ bf16
//! product took 170.7 µs a launch not blocking and 201.6 blocking, 30.9 µs more (the Python
//! call, cuBLAS's dispatch and the blocked return); a small eager op recorded for autograd
//! took 19.62 µs blocking, of which ~4 µs is its kernel ([`super::time`]'s launch floor),
//! and 12.10 µs in autograd's backward. Collectives block too: the data-parallel reduction
//! no longer overlaps the backward passes ([`crate::plan::Plan::overlaps_grad_reduce`]). Left
//! out: the pipeline transfers, which planc already prices as waited for where the
//! framework does not overlap them, and the optimizer's per-tensor launches.

use super::ops::{Op, OpKind};

/// What a blocked launch of a product adds to its kernel.
pub const BLOCKED_PRODUCT_S: f64 = 30.9e-6;
/// What a blocked launch of another forward operation adds to its kernel (19.62 µs a small
/// op, less its ~4 µs kernel).
pub const BLOCKED_FORWARD_OP_S: f64 = 15.6e-6;
/// The same in autograd's backward (12.10 µs a small op, less its kernel).
pub const BLOCKED_BACKWARD_OP_S: f64 = 8.1e-6;

/// The products `ops` launch forward (a grouped product's experts one each), and their other
/// kernels (an unfused operation's each, a ring exchange's steps).
fn launches(ops: &[Op]) -> (f64, f64) {
    ops.iter()
        .fold((0.0, 0.0), |(products, other), o| match &o.kind {
            OpKind::Gemm { .. } => (products + 1.0, other),
            OpKind::GroupedGemm { count, .. } => (products + count, other),
            _ => (
                products,
                other + super::eager::forward_dispatches(std::slice::from_ref(o)),
            ),
        })
}

/// The gaps blocked launches add to `ops`' forward.
pub fn forward_gaps(ops: &[Op]) -> f64 {
    let (products, other) = launches(ops);
    products * BLOCKED_PRODUCT_S + other * BLOCKED_FORWARD_OP_S
}

/// The gaps blocked launches add to `ops`' backward: two products for each forward product
/// whose weight `trains` (the input's gradient and the weight's), one for the others, and
/// each other kernel autograd runs.
pub fn backward_gaps(ops: &[Op], trains: impl Fn(&Op) -> bool) -> f64 {
    let all = super::eager::backward_dispatches(ops, &trains);
    let products: f64 = ops
        .iter()
        .map(|o| {
            let each = if trains(o) { 2.0 } else { 1.0 };
            match &o.kind {
                OpKind::Gemm { .. } => each,
                OpKind::GroupedGemm { count, .. } => count * each,
                _ => 0.0,
            }
        })
        .sum();
    products * BLOCKED_PRODUCT_S + (all - products) * BLOCKED_BACKWARD_OP_S
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::ops::layer_forward;

    fn plan(env: &str) -> crate::plan::Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ layers = 12, hidden = 768, heads = 12, vocab = 50304, seq_len = 1024 }}
             train {{ global_batch = 64, precision = bf16, optimizer = adamw, attention = flash }}
             parallel {{ tp = 1, pp = 1, dp = 8, micro_batch = 8 }}
             job j {{ framework = megatron {env} }}"
        );
        let c = crate::check::check_source("blocking.tp", &text);
        c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics))
    }

    #[test]
    fn a_layers_products_pay_the_blocked_products_gap_and_its_other_kernels_the_ops() {
        let p = plan("");
        let ops = layer_forward(&p);
        let products = ops
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Gemm { .. }))
            .count() as f64;
        assert!(products >= 4.0);
        let other = super::super::eager::forward_dispatches(&ops) - products;
        let f = forward_gaps(&ops);
        assert!((f - products * BLOCKED_PRODUCT_S - other * BLOCKED_FORWARD_OP_S).abs() < 1e-15);
        // Backward: each trained product twice.
        let b = backward_gaps(&ops, |o| matches!(o.kind, OpKind::Gemm { .. }));
        assert!(b > 2.0 * products * BLOCKED_PRODUCT_S);
    }

    #[test]
    fn only_a_set_variable_blocks_and_it_takes_the_overlap_of_the_reduction() {
        assert!(!plan("").launch_blocking);
        assert!(plan("").overlaps_grad_reduce());
        for off in ["\"0\"", "\"\"", "\"$DEBUG\""] {
            let p = plan(&format!(", env {{ CUDA_LAUNCH_BLOCKING = {off} }}"));
            assert!(!p.launch_blocking, "{off}");
        }
        let on = plan(", env { CUDA_LAUNCH_BLOCKING = 1 }");
        assert!(on.launch_blocking);
        assert!(!on.overlaps_grad_reduce());
    }

    #[test]
    fn a_blocking_step_is_slower_by_its_gaps() {
        let free = crate::cost::estimate(&plan(""));
        let blocked = crate::cost::estimate(&plan(", env { CUDA_LAUNCH_BLOCKING = 1 }"));
        // GPT-2 at 8 x 1024 a GPU: kernels of tens of microseconds, so the gaps are a large
        // share of the step.
        assert!(
            blocked.step_s > 1.2 * free.step_s,
            "{} against {}",
            blocked.step_s,
            free.step_s
        );
    }
}
