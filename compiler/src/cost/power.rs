//! The board's power limit, applied to a plan priced from a profile. A profile's products
//! and kernels were timed in bursts; a training step that drives the tensor cores hard
//! holds the GPU at its power limit, at a lower clock, for as long as it trains (Llama 3 8B's
//! layers on an H200: 1515 MHz against the bursts' 1980, products 1.16x their burst
//! times); GPT-2 124M's small products reach it too once the step runs long enough (600
//! steps, 20 s: 695 W and 1710 MHz; its first second, 30 steps, drew 516 W).
//! `planc calibrate` measures how much slower products and memory-bound kernels run in a
//! steady mix that drives the tensor cores at a given share of their burst rate
//! ([`crate::profile::PowerCurve`]); [`settle`] reads that curve at the share the plan's
//! own step drives them at, its executed FLOPs over its step's time less the optimizer's, both at burst rates.

use super::stage_group;
use super::time::{placement, stage_time, Device};
use crate::plan::{NodeGroup, Plan};
use crate::profile::PowerCurve;

fn curve(g: &NodeGroup) -> Option<&PowerCurve> {
    g.gpu.profile.as_deref()?.power.as_ref()
}

/// How hard `plan`'s busiest stage drives its tensor cores: the FLOPs it executes in a step
/// over the step's time less its optimizer pass, both at burst rates, as a share of the
/// curve's burst product rate. The board's limiter holds its average power over windows of
/// tens of milliseconds: the optimizer streams HBM as the calibration mix's copies do (left
/// out, as the mix has no idle time), while exposed collectives and a pipeline stage's wait
/// leave the SMs idle and lower the power the products run at (a tensor-parallel Llama 3.2
/// 1B on two H200s spends a fifth of its step in collectives, and its products ran in 0.82x
/// the time priced from its compute alone, 2026-11-28).
pub fn utilisation(plan: &Plan) -> Option<f64> {
    if plan
        .cluster
        .groups
        .iter()
        .all(|g| g.gpu.power_slowdown.is_none())
    {
        return share_at_burst(plan);
    }
    let mut burst = plan.clone();
    for g in &mut burst.cluster.groups {
        g.gpu.power_slowdown = None;
    }
    share_at_burst(&burst)
}

/// [`utilisation`] of a plan already priced at burst rates (no power slowdown set).
fn share_at_burst(plan: &Plan) -> Option<f64> {
    let mut est = None;
    let micro_batches = plan.parallel.grad_accum(plan.train.global_batch).max(1) as f64;
    let mut u: Option<f64> = None;
    for s in 0..plan.parallel.pp {
        let group = stage_group(plan, s);
        let Some(c) = curve(group) else { continue };
        let dev = Device {
            gpu: &group.gpu,
            precision: plan.train.precision,
        };
        let t = stage_time(plan, s, &dev, &placement(plan, group));
        let e = est.get_or_insert_with(|| super::estimate(plan));
        let busy = e.step_s - e.stages[s as usize].optimizer_s;
        if busy > 0.0 && c.product_tflops > 0.0 {
            let flops = (t.forward.flops + t.backward.flops) * micro_batches;
            let share = flops / busy / (c.product_tflops * 1e12);
            u = Some(u.map_or(share, |x| x.max(share)));
        }
    }
    u
}

/// Sets each profiled GPU's power-limit slowdown for `plan` (`Gpu::power_slowdown`), from
/// its profile's curve at the plan's [`utilisation`] priced at burst rates, and returns
/// that utilisation. Plans whose GPUs' profiles measured no curve are left as they are.
pub fn settle(plan: &mut Plan) -> Option<f64> {
    if !plan.cluster.groups.iter().any(|g| curve(g).is_some()) {
        return None;
    }
    for g in &mut plan.cluster.groups {
        g.gpu.power_slowdown = None;
    }
    let u = share_at_burst(plan)?;
    for g in &mut plan.cluster.groups {
        g.gpu.power_slowdown = curve(g).map(|c| c.slowdown(u));
    }
    Some(u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::PowerPoint;

    fn h200_curve() -> PowerCurve {
        // The shape of a curve as calibration measures it: no slowdown until the mix
        // nears the limit, then products and copies slower.
        PowerCurve {
            product_tflops: 800.0,
            burst_clock_mhz: None,
            points: vec![
                PowerPoint {
                    utilisation: 0.3,
                    copies: 20,
                    product_slowdown: 1.0,
                    memory_slowdown: 1.0,
                    clock_mhz: None,
                    power_w: None,
                },
                PowerPoint {
                    utilisation: 0.5,
                    copies: 9,
                    product_slowdown: 1.0,
                    memory_slowdown: 1.0,
                    clock_mhz: None,
                    power_w: None,
                },
                PowerPoint {
                    utilisation: 0.7,
                    copies: 4,
                    product_slowdown: 1.05,
                    memory_slowdown: 1.02,
                    clock_mhz: None,
                    power_w: None,
                },
                PowerPoint {
                    utilisation: 1.0,
                    copies: 0,
                    product_slowdown: 1.2,
                    memory_slowdown: 1.0,
                    clock_mhz: None,
                    power_w: None,
                },
            ],
        }
    }

    fn plan(model: &str, micro_batch: u64, with_curve: bool) -> Plan {
        let text = format!(
            "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H200_SXM_141GB }}
             model m {{ {model} }}
             train {{ global_batch = {micro_batch}, precision = bf16, attention = flash }}
             parallel {{ micro_batch = {micro_batch} }}
             job {{ framework = planc }}"
        );
        let checked = crate::check::check_source("t.tp", &text);
        assert!(checked.ok(), "{:#?}", checked.diagnostics);
        let mut p = checked.plan.expect("a plan");
        let mut profile = (**p.cluster.groups[0].gpu.profile.as_ref().expect("shipped")).clone();
        profile.power = with_curve.then(h200_curve);
        p.cluster.groups[0].gpu.profile = Some(std::sync::Arc::new(profile));
        p.cluster.groups[0].gpu.power_slowdown = None;
        p
    }

    #[test]
    fn the_curve_is_read_between_its_points_and_never_speeds_a_kernel_up() {
        let c = h200_curve();
        assert_eq!(c.slowdown(0.1), (1.0, 1.0));
        let (g, m) = c.slowdown(0.85);
        assert!(
            (g - 1.125).abs() < 1e-9 && (m - 1.01).abs() < 1e-9,
            "{g} {m}"
        );
        assert_eq!(c.slowdown(1.4), (1.2, 1.0));
        let fast = PowerCurve {
            product_tflops: 800.0,
            burst_clock_mhz: None,
            points: vec![PowerPoint {
                utilisation: 0.5,
                copies: 9,
                product_slowdown: 0.97,
                memory_slowdown: 0.9,
                clock_mhz: None,
                power_w: None,
            }],
        };
        assert_eq!(fast.slowdown(0.5), (1.0, 1.0));
    }

    #[test]
    fn a_step_of_large_products_is_slowed_more_than_one_of_small_ones() {
        let big = "layers = 4, hidden = 4096, heads = 32, ffn_hidden = 14336, vocab = 32000, \
                   seq_len = 4096, mlp = swiglu, norm = rmsnorm, position = rope, bias = false";
        let small = "layers = 4, hidden = 768, heads = 12, vocab = 50304, seq_len = 1024";
        let (mut b, mut s) = (plan(big, 2, true), plan(small, 16, true));
        let (ub, us) = (utilisation(&b).unwrap(), utilisation(&s).unwrap());
        assert!(ub > us, "{ub} {us}");
        let before = crate::cost::estimate(&b).step_s;
        settle(&mut b);
        settle(&mut s);
        let (gb, _) = b.cluster.groups[0].gpu.power_slowdown.unwrap();
        let (gs, _) = s.cluster.groups[0].gpu.power_slowdown.unwrap();
        assert!(gb > gs, "{gb} {gs}");
        assert!(crate::cost::estimate(&b).step_s > before * 1.02);
    }

    #[test]
    fn a_pipeline_stage_waiting_in_its_bubble_drives_the_board_less_hard() {
        // The same stage's work a micro-batch, over 2 or 16 micro-batches: the fill and
        // drain are idle time, a larger share of the shorter step.
        let at = |global_batch: u64| {
            let text = format!(
                "cluster c {{ nodes = 1, gpus_per_node = 2, gpu = H200_SXM_141GB }}
                 model m {{ layers = 8, hidden = 4096, heads = 32, vocab = 32000, seq_len = 2048 }}
                 train {{ global_batch = {global_batch}, precision = bf16, attention = flash }}
                 parallel {{ pp = 2, micro_batch = 1, schedule = gpipe }}
                 job {{ framework = planc }}"
            );
            let checked = crate::check::check_source("t.tp", &text);
            assert!(checked.ok(), "{:#?}", checked.diagnostics);
            utilisation(checked.plan.as_ref().unwrap()).expect("the shipped curve")
        };
        let (few, many) = (at(2), at(16));
        assert!(few < 0.8 * many, "{few} vs {many}");
    }

    #[test]
    fn solve_ranks_each_layout_at_the_power_limit_check_prices_the_chosen_one_at() {
        // planc's own kernels on H200s are priced from the shipped profile, which measured
        // the power curve.
        let text = "cluster c { nodes = 1, gpus_per_node = 8, gpu = H200_SXM_141GB }
             model m { layers = 16, hidden = 4096, heads = 32, ffn_hidden = 14336, vocab = 32000,
                       seq_len = 4096, mlp = swiglu, norm = rmsnorm, position = rope, bias = false }
             train { global_batch = 64, precision = bf16, attention = flash }
             parallel { tp = auto, pp = 1, dp = auto, micro_batch = 1 }
             job { framework = planc }";
        let checked = crate::check::check_source("t.tp", text);
        assert!(checked.ok(), "{:#?}", checked.diagnostics);
        let plan = checked.plan.as_ref().unwrap();
        assert!(
            curve(&plan.cluster.groups[0]).is_some(),
            "the shipped H200 profile has a curve"
        );
        assert!(plan.cluster.groups[0].gpu.power_slowdown.is_some());
        let best = &checked.solution.as_ref().unwrap().ranked[0];
        assert_eq!(
            best.plan.cluster.groups[0].gpu.power_slowdown,
            plan.cluster.groups[0].gpu.power_slowdown
        );
        assert_eq!(
            best.estimate.step_s,
            checked.estimate.as_ref().unwrap().step_s
        );
    }

    #[test]
    fn the_limit_caps_the_products_throughput_and_slows_fp8_products_whole() {
        let mut gpu = plan(
            "layers = 2, hidden = 1024, heads = 16, vocab = 32000, seq_len = 1024",
            4,
            true,
        )
        .cluster
        .groups[0]
            .gpu
            .clone();
        let rate = curve_of(&gpu).product_tflops * 1e12;
        let time = |gpu: &crate::plan::Gpu, precision, (m, n, k): (f64, f64, f64)| {
            Device { gpu, precision }.gemm(m, n, k)
        };
        let (square, thin) = ((8192.0, 8192.0, 8192.0), (2048.0, 768.0, 768.0));
        let bf16 = crate::plan::Precision::Bf16;
        gpu.power_slowdown = None;
        let (square_burst, thin_burst) = (time(&gpu, bf16, square), time(&gpu, bf16, thin));
        gpu.power_slowdown = Some((1.2, 1.0));
        // The square product ran at the curve's burst rate: it runs at the cap, rate / 1.2.
        let flops = 2.0 * 8192f64.powi(3);
        assert!((time(&gpu, bf16, square) - flops * 1.2 / rate).abs() < 1e-12);
        assert!(time(&gpu, bf16, square) > square_burst);
        // A thin product's burst ran far under the cap: the limit leaves it as it was.
        assert!(2.0 * 2048.0 * 768.0 * 768.0 / thin_burst < rate / 1.2);
        assert_eq!(time(&gpu, bf16, thin), thin_burst);
        // fp8 products (priced from the catalog here: the shipped profile has no fp8 curve)
        // take the whole slowdown: the curve measured 16-bit products.
        let fp8 = crate::plan::Precision::Fp8;
        gpu.power_slowdown = None;
        let burst = time(&gpu, fp8, square);
        gpu.power_slowdown = Some((1.2, 1.0));
        assert!((time(&gpu, fp8, square) / burst - 1.2).abs() < 1e-9);
    }

    fn curve_of(gpu: &crate::plan::Gpu) -> &PowerCurve {
        gpu.profile.as_deref().unwrap().power.as_ref().unwrap()
    }

    #[test]
    fn a_profile_without_a_curve_leaves_the_plan_as_it_was() {
        let big = "layers = 4, hidden = 4096, heads = 32, vocab = 32000, seq_len = 4096";
        let mut p = plan(big, 2, false);
        let before = crate::cost::estimate(&p).step_s;
        settle(&mut p);
        assert_eq!(p.cluster.groups[0].gpu.power_slowdown, None);
        assert_eq!(crate::cost::estimate(&p).step_s, before);
    }
}
