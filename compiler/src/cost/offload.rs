//! Host offload (`parallel.offload`): what crosses each GPU's PCIe link to its host, what
//! the CPU computes, and how much of it the frameworks hide.
//!
//! As DeepSpeed runs it (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840, §4; ZeRO-3's
//! `offload_param`, Rajbhandari et al. 2021, ZeRO-Infinity) and Megatron-Core's
//! `--optimizer-cpu-offload`:
//!
//! - `offload = optimizer`: the fp32 master weights and moments live in host memory and the
//!   CPU steps them. Each rank's gradient shard goes down (device to host) and its updated
//!   16-bit weights come back up. With ZeRO-2 and -3 the shard is sent after every
//!   micro-batch's backward, layer by layer as it is reduced (the copy runs beside the next
//!   layer's backward); with ZeRO-1 the gradients accumulate on the GPU and go down once,
//!   after the last backward. The step itself is DeepSpeed's CPU Adam, whose update of a tile
//!   overlaps the copy of the previous tile's 16-bit weights to the GPU
//!   (`ds_adam_step_plus_copy`): the longer of the two is exposed.
//! - `offload = params` (ZeRO-3 only): the weights live in host memory too. Each layer's
//!   shard comes up before its all-gather, in forward and again in backward (ZeRO-3 gathers
//!   a layer twice a micro-batch), prefetched one layer ahead like the gathers, so it hides
//!   behind the layer before; the updated weights stay on the host.
//!
//! The link is PCIe, full duplex (weights up and gradients down at once), separate from
//! NVLink and the NICs; its rate is the catalog's `host_link_gbs` at PCIe's achievable share.
//! The CPU's update streams its state through host memory at the node's bandwidth, shared
//! by the node's GPUs: it is bound by memory, not by the cores' vector units (an AVX-512
//! core does ~30 floating-point operations of Adam per parameter against 30 bytes moved).

use super::comm::link_efficiency;
use crate::plan::{Gpu, LinkKind, Offload, Optimizer, Plan};

/// PCIe 4.0 x16, per direction after 128b/130b encoding: the host link of a device the
/// catalog does not describe (a plan's own `gpu` block without `host_link`).
pub const DEFAULT_HOST_LINK: f64 = 31.5e9;
/// DGX A100's host memory (2 × 8 channels of DDR4-3200, 409.6 GB/s) over its 8 GPUs: the
/// host of a device the catalog does not describe.
pub const DEFAULT_HOST_MEMORY_PER_GPU: f64 = 51.2e9;

/// Bytes/s one GPU moves over its link to the host, one direction.
pub fn host_link_rate(gpu: &Gpu) -> f64 {
    gpu.host_link.unwrap_or(DEFAULT_HOST_LINK) * link_efficiency(LinkKind::Pcie)
}

/// Bytes/s of host memory one GPU's share of the CPUs streams.
pub fn host_memory_rate(gpu: &Gpu) -> f64 {
    gpu.host_memory_bandwidth
        .unwrap_or(DEFAULT_HOST_MEMORY_PER_GPU)
}

/// Bytes the CPU optimizer streams through host memory per parameter: DeepSpeed's CPU Adam
/// (`csrc/adam/cpu_adam_impl.cpp`, `Step_AVX`) reads the fp32 gradient, master weight and
/// two moments (16) and writes the master and the moments (12), and with a 16-bit model the
/// 16-bit copy it sends back (2); SGD keeps one moment.
fn host_bytes_per_param(plan: &Plan) -> f64 {
    let update = match plan.train.optimizer {
        Optimizer::Adam | Optimizer::Adamw => 28.0,
        Optimizer::Sgd => 20.0,
    };
    let copy = if plan.train.precision == crate::plan::Precision::Fp32 {
        0.0
    } else {
        plan.train.precision.bytes()
    };
    update + copy
}

/// Seconds of the CPU's optimizer step over `local` parameters (this rank's shard).
pub fn cpu_step(plan: &Plan, local: f64, gpu: &Gpu) -> f64 {
    local * host_bytes_per_param(plan) / host_memory_rate(gpu)
}

/// Seconds the step waits after the last backward for an offloaded optimizer over `local`
/// parameters: ZeRO-1's gradients going down, the CPU's step, and (without parameter
/// offload) the updated weights coming up beside it.
pub fn optimizer_tail(plan: &Plan, local: f64, gpu: &Gpu) -> f64 {
    let p = &plan.parallel;
    if p.offload == Offload::None {
        return 0.0;
    }
    let link = host_link_rate(gpu);
    let down = if p.zero >= 2 {
        0.0
    } else {
        local * plan.grad_bytes() / link
    };
    let up = if p.offload == Offload::Params {
        0.0
    } else {
        local * plan.train.precision.bytes() / link
    };
    down + cpu_step(plan, local, gpu).max(up)
}

/// Seconds of one layer's host traffic per micro-batch, as (forward, backward), for a layer
/// of `params` parameters on this GPU before sharding, `trained` of them trained: its
/// weight shard up before each gather (parameter offload) and its trained gradients' shard
/// down after its backward (ZeRO-2/3 with an offloaded optimizer). Both directions run at
/// once.
pub fn layer_traffic(plan: &Plan, params: f64, trained: f64, gpu: &Gpu) -> (f64, f64) {
    let p = &plan.parallel;
    if p.offload == Offload::None {
        return (0.0, 0.0);
    }
    let ranks = (p.dp * p.cp).max(1) as f64;
    let shard = params / ranks;
    let link = host_link_rate(gpu);
    let up = if p.offload == Offload::Params {
        shard * plan.train.precision.bytes() / link
    } else {
        0.0
    };
    let down = if p.zero >= 2 {
        trained / ranks * plan.grad_bytes() / link
    } else {
        0.0
    };
    (up, up.max(down))
}

/// What one layer's host traffic leaves exposed, as (forward, backward) seconds per
/// micro-batch: prefetched one layer ahead, it hides behind a layer's compute (`fwd`,
/// `bwd`: one layer's passes) and waits only where the link is slower.
pub fn layer_exposed(
    plan: &Plan,
    params: f64,
    trained: f64,
    gpu: &Gpu,
    fwd: f64,
    bwd: f64,
) -> (f64, f64) {
    let (up, both) = layer_traffic(plan, params, trained, gpu);
    ((up - fwd).max(0.0), (both - bwd).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_source;

    /// A 13B-class model (40 × 5120) on one node of eight H100s under ZeRO-3.
    fn plan(offload: &str, zero: u64) -> Plan {
        plan_of(offload, zero, 2048)
    }

    fn plan_of(offload: &str, zero: u64, seq: u64) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
             model m {{ layers = 40, hidden = 5120, heads = 40, vocab = 50432, seq_len = {seq} }}
             train {{ global_batch = 64, precision = bf16, optimizer = adamw, attention = flash }}
             parallel {{ tp = 1, pp = 1, dp = 8, micro_batch = 2, zero = {zero}, offload = {offload} }}
             job j {{ framework = deepspeed }}"
        );
        let c = check_source("t.tp", &text);
        c.plan.unwrap_or_else(|| panic!("{:#?}", c.diagnostics))
    }

    #[test]
    fn the_host_link_and_memory_come_from_the_dgx_datasheets() {
        let p = plan("optimizer", 2);
        let gpu = &p.cluster.groups[0].gpu;
        // PCIe Gen5 x16: 63 GB/s a direction at PCIe's achievable share.
        assert!((host_link_rate(gpu) - 63e9 * 0.85).abs() < 1.0);
        // DGX H100: 2 × 8 channels of DDR5-4800 over 8 GPUs.
        assert!((host_memory_rate(gpu) - 76.8e9).abs() < 1.0);
    }

    #[test]
    fn an_offloaded_adam_step_streams_30_bytes_a_parameter_through_host_memory() {
        let p = plan("optimizer", 2);
        let gpu = &p.cluster.groups[0].gpu;
        let local = 1e9;
        assert!((cpu_step(&p, local, gpu) - 30.0 * local / 76.8e9).abs() < 1e-12);
        // ZeRO-2: the gradients went down during backward; the weights come up beside the
        // update, which is longer.
        let up = 2.0 * local / host_link_rate(gpu);
        assert!(up < cpu_step(&p, local, gpu));
        assert_eq!(optimizer_tail(&p, local, gpu), cpu_step(&p, local, gpu));
        // ZeRO-1: the fp32 gradients go down after backward first.
        let z1 = plan("optimizer", 1);
        let down = 4.0 * local / host_link_rate(gpu);
        assert!((optimizer_tail(&z1, local, gpu) - down - cpu_step(&p, local, gpu)).abs() < 1e-12);
        // Nothing offloaded, nothing on the host.
        assert_eq!(optimizer_tail(&plan("none", 2), local, gpu), 0.0);
    }

    #[test]
    fn offloaded_parameters_come_up_twice_a_micro_batch_and_hide_behind_a_layer() {
        let p = plan("params", 3);
        let gpu = &p.cluster.groups[0].gpu;
        let params = 12.0 * 5120.0 * 5120.0;
        let (up, both) = layer_traffic(&p, params, params, gpu);
        let link = host_link_rate(gpu);
        assert!((up - params / 8.0 * 2.0 / link).abs() < 1e-12);
        // Backward: weights up and fp32 gradients down at once, the longer counts.
        assert!((both - params / 8.0 * 4.0 / link).abs() < 1e-12);
        assert_eq!(layer_exposed(&p, params, params, gpu, 1.0, 1.0), (0.0, 0.0));
        let (f, b) = layer_exposed(&p, params, params, gpu, up / 2.0, 0.0);
        assert!((f - up / 2.0).abs() < 1e-12 && (b - both).abs() < 1e-12);
        // Optimizer offload alone moves no weights in the passes.
        assert_eq!(
            layer_traffic(&plan("optimizer", 3), params, params, gpu).0,
            0.0
        );
    }

    #[test]
    fn offloading_parameters_costs_more_than_offloading_the_optimizer_which_costs_more_than_neither(
    ) {
        // Short sequences: a layer's passes are too short to hide its shard's trip up.
        let step = |offload: &str| crate::cost::estimate(&plan_of(offload, 3, 128)).step_s;
        let (none, optimizer, params) = (step("none"), step("optimizer"), step("params"));
        assert!(optimizer > none, "{optimizer} vs {none}");
        assert!(params > optimizer, "{params} vs {optimizer}");
        // Long ones hide it: the weights' trips cost nothing more than the optimizer's.
        let long = |offload: &str| crate::cost::estimate(&plan(offload, 3)).step_s;
        assert_eq!(long("params"), long("optimizer"));
        // The CPU's step is in the optimizer's time, not the GPU's passes.
        let e = crate::cost::estimate(&plan("optimizer", 3));
        let gpu = &plan("optimizer", 3).cluster.groups[0].gpu;
        let local = e.stages[0].memory.params / 8.0;
        assert!(e.stages[0].optimizer_s >= cpu_step(&plan("optimizer", 3), local, gpu));
    }
}
