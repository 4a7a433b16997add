//! The simulator on real plans, against the compiler's closed form where that is exact.

use planc_compiler::check::check_source;
use planc_compiler::plan::Plan;

fn plan(parallel: &str, vocab: u64, nodes: u64) -> Plan {
    let inter = if nodes > 1 {
        "inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us }"
    } else {
        ""
    };
    let text = format!(
        "cluster c {{ nodes = {nodes}, gpus_per_node = 8, gpu = H100_SXM_80GB
             {inter} }}
         model m {{ layers = 32, hidden = 4096, heads = 32, vocab = {vocab}, seq_len = 4096, tied_embeddings = false }}
         train {{ global_batch = 64, precision = bf16, optimizer = adam }}
         parallel {{ dp = auto, micro_batch = 1, {parallel} }}"
    );
    let checked = check_source("t.tp", &text);
    checked
        .plan
        .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
}

fn both(p: &Plan) -> (f64, f64) {
    let closed = planc_compiler::cost::estimate(p).step_s;
    let sim = planc_simulator::simulate(p).expect("no hang");
    (closed, sim.breakdown.step_s)
}

#[test]
fn closed_form_and_simulation_agree_on_uniform_gpipe_and_1f1b() {
    // A tiny vocabulary makes the end stages as heavy as the others; one node keeps the
    // pipeline sends on NVLink, where they are small next to the passes.
    for schedule in ["gpipe", "1f1b"] {
        for pp in [2, 4, 8] {
            let p = plan(&format!("tp = 1, pp = {pp}, schedule = {schedule}"), 8, 1);
            let (closed, sim) = both(&p);
            let diff = (sim - closed).abs() / closed;
            assert!(
                diff < 0.01,
                "{schedule} pp {pp}: closed {closed} vs simulated {sim}"
            );
        }
    }
}

#[test]
fn interleaving_shrinks_the_simulated_bubble() {
    let flat = planc_simulator::simulate(&plan("tp = 2, pp = 4, schedule = 1f1b", 8, 1)).unwrap();
    let inter = planc_simulator::simulate(&plan(
        "tp = 2, pp = 4, schedule = interleaved, vpp = 2",
        8,
        1,
    ))
    .unwrap();
    assert!(inter.breakdown.bubble_s < 0.6 * flat.breakdown.bubble_s);
    let zb = planc_simulator::simulate(&plan("tp = 2, pp = 4, schedule = zb_h1", 8, 1)).unwrap();
    assert!(zb.breakdown.bubble_s < flat.breakdown.bubble_s);
}

#[test]
fn the_end_stages_carry_the_embedding_and_the_logits() {
    // With a real vocabulary the last stage is the slowest, and the simulation accounts
    // for it exactly where the closed form approximates.
    let p = plan("tp = 1, pp = 4, schedule = 1f1b", 128_256, 1);
    let sim = planc_simulator::simulate(&p).unwrap();
    assert_eq!(sim.breakdown.rank, 3);
    let (closed, simulated) = both(&p);
    assert!(
        (simulated - closed).abs() / closed < 0.05,
        "{closed} vs {simulated}"
    );
}

#[test]
fn data_parallel_reduction_is_simulated_across_nodes() {
    let p = plan("tp = 8, pp = 1, zero = 0", 32_000, 4);
    let sim = planc_simulator::simulate(&p).unwrap();
    // dp = 4 across nodes: some of the last bucket's all-reduce shows after the backward.
    assert!(sim.breakdown.exposed_comm_s > 0.0);
    let (closed, simulated) = both(&p);
    assert!(
        (simulated - closed).abs() / closed < 0.03,
        "{closed} vs {simulated}"
    );
}

#[test]
fn every_example_simulates_without_a_hang() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let checked =
            planc_compiler::check::check_file(&path, &planc_compiler::source::FsLoader).unwrap();
        if let Some(p) = &checked.plan {
            let sim = planc_simulator::simulate(p)
                .unwrap_or_else(|h| panic!("{}: {h:?}", path.display()));
            let closed = checked.estimate.as_ref().unwrap().step_s;
            // Every rank's split covers the step: what it computed, waited for on its links,
            // and waited for other ranks; the reported one is the busiest's.
            for b in &sim.ranks {
                let sum = b.compute_s + b.exposed_comm_s + b.bubble_s;
                assert!(
                    (sum - b.step_s).abs() < 1e-6 * b.step_s,
                    "{} rank {}: {sum} vs {}",
                    path.display(),
                    b.rank,
                    b.step_s
                );
                assert!(b.compute_s <= sim.breakdown.compute_s);
            }
            assert_eq!(sim.ranks.len() as u64, p.parallel.pp);
            let diff = (sim.breakdown.step_s - closed).abs() / closed;
            assert!(
                diff < 0.05,
                "{}: closed {closed} vs simulated {}",
                path.display(),
                sim.breakdown.step_s
            );
        }
    }
}

#[test]
fn without_a_pipeline_waiting_for_parameter_gathers_is_communication_not_bubble() {
    // ZeRO-3 across 4 nodes: every pass waits for its parameters, gathered bucket by bucket
    // behind each other on the network. With pp = 1 there is no other stage to wait for.
    for zero in [1, 3] {
        let p = plan(
            &format!("tp = 1, pp = 1, zero = {zero}, recompute = full"),
            32000,
            4,
        );
        let b = planc_simulator::simulate(&p).unwrap().breakdown;
        assert_eq!(b.bubble_s, 0.0, "zero {zero}: {b:?}");
        let parts = b.compute_s + b.exposed_comm_s + b.bubble_s;
        assert!(
            (parts - b.step_s).abs() < 1e-9 * b.step_s,
            "zero {zero}: parts {parts} vs step {}",
            b.step_s
        );
        if zero == 3 {
            assert!(b.exposed_comm_s > 0.0, "{b:?}");
        }
    }
}

/// Llama 3 405B on 16 nodes (tp 8, pp 16, dp 1) with the given end stages.
fn llama405(first: u64, last: u64) -> Plan {
    let text = format!(
        "cluster c {{ nodes = 16, gpus_per_node = 8, gpu = H100_SXM_80GB
             inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us }} }}
         model m {{ preset = \"llama3-405b\" }}
         train {{ global_batch = 64, precision = bf16, optimizer = adamw }}
         parallel {{ tp = 8, pp = 16, dp = auto, micro_batch = 1, sequence_parallel = true, zero = 1,
                     recompute = full, first_stage_layers = {first}, last_stage_layers = {last} }}"
    );
    let checked = check_source("t.tp", &text);
    checked
        .plan
        .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
}

#[test]
fn uneven_stages_lower_to_per_rank_durations_that_follow_the_layer_counts() {
    use planc_compiler::cost::stage_group;
    use planc_compiler::cost::time::{pieces, placement, Device};
    let p = llama405(7, 7);
    let (_, costs) = planc_simulator::lower::lower(&p);
    let group = stage_group(&p, 0);
    let dev = Device {
        gpu: &group.gpu,
        precision: p.train.precision,
    };
    let pc = pieces(&p, &dev, &placement(&p, group));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b;
    // 7 + 14 × 8 + 7: every middle rank runs 8 layers, the ends 7 and their extra work.
    for rank in 1..15 {
        assert!(close(costs.forward[rank].0, 8.0 * pc.layer_fwd.compute));
        assert!(close(costs.backward[rank].0, 8.0 * pc.layer_bwd.compute));
    }
    assert!(close(
        costs.forward[0].0,
        7.0 * pc.layer_fwd.compute + pc.embedding_fwd.compute
    ));
    assert!(close(
        costs.forward[15].0,
        7.0 * pc.layer_fwd.compute + pc.head_fwd.compute
    ));
    assert!(close(
        costs.backward[15].0,
        7.0 * pc.layer_bwd.compute + pc.head_bwd.compute
    ));
}

/// Llama 3 405B as Meta ran it: 16 stages of 8 one-layer chunks, 7 + 14 × 8 + 7.
fn llama405_interleaved(vpp: u64) -> Plan {
    let text = format!(
        "cluster c {{ nodes = 16, gpus_per_node = 8, gpu = H100_SXM_80GB
             inter_node {{ kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us }} }}
         model m {{ preset = \"llama3-405b\" }}
         train {{ global_batch = 32, precision = bf16, optimizer = adamw }}
         parallel {{ tp = 8, pp = 16, dp = auto, micro_batch = 1, sequence_parallel = true, zero = 1,
                     schedule = interleaved, vpp = {vpp}, recompute = full,
                     first_stage_layers = 7, last_stage_layers = 7 }}"
    );
    let checked = check_source("t.tp", &text);
    checked
        .plan
        .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
}

#[test]
fn interleaved_uneven_chunks_lower_to_their_own_layers() {
    use planc_compiler::cost::stage_group;
    use planc_compiler::cost::time::{pieces, placement, Device};
    let p = llama405_interleaved(8);
    let (program, costs) = planc_simulator::lower::lower(&p);
    assert_eq!(program.chunks(), 8);
    let group = stage_group(&p, 0);
    let dev = Device {
        gpu: &group.gpu,
        precision: p.train.precision,
    };
    let pc = pieces(&p, &dev, &placement(&p, group));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.max(1e-12);
    // Virtual stage v = chunk · 16 + rank. The first chunk of rank 0 is the embedding
    // alone, the last chunk of rank 15 the output layer and loss alone; every other chunk
    // is one layer.
    assert!(close(costs.forward[0].0, pc.embedding_fwd.compute));
    assert!(close(costs.forward[127].0, pc.head_fwd.compute));
    assert!(close(costs.backward[127].0, pc.head_bwd.compute));
    for v in 1..127 {
        assert!(
            close(costs.forward[v].0, pc.layer_fwd.compute),
            "virtual stage {v}"
        );
    }
    // The step runs without a hang, and taking a layer off each end beats the same model
    // interleaved without uneven ends (impossible: 126 is not a multiple of 16 × 8), so
    // compare against 2 chunks of 4 layers with the same ends.
    let sim = planc_simulator::simulate(&p).expect("no hang").breakdown;
    let coarse = planc_simulator::simulate(&llama405_interleaved(2))
        .expect("no hang")
        .breakdown;
    assert!(sim.bubble_s < coarse.bubble_s, "{sim:?} vs {coarse:?}");
}

#[test]
fn lighter_end_stages_balance_a_model_whose_ends_are_heavy() {
    // The output layer and loss of a 128k vocabulary make the last stage of an even split
    // the slowest. 7 + 14 × 8 + 7 (as Meta trained Llama 3 405B) takes a layer off each
    // end; 14 + 14 × 7 + 14 piles them on. The pipeline runs at its slowest stage.
    let light = llama405(7, 7);
    let heavy = llama405(14, 14);
    let sim_light = planc_simulator::simulate(&light).unwrap().breakdown;
    let sim_heavy = planc_simulator::simulate(&heavy).unwrap().breakdown;
    assert!(
        sim_light.step_s < 0.8 * sim_heavy.step_s,
        "light ends {} s vs heavy ends {} s",
        sim_light.step_s,
        sim_heavy.step_s
    );
    // Light ends leave a middle rank on the critical path; heavy ends an end rank.
    assert!((1..15).contains(&sim_light.rank), "{sim_light:?}");
    assert!([0, 15].contains(&sim_heavy.rank), "{sim_heavy:?}");
    // The closed form agrees on both, per-stage times and all.
    for (p, sim) in [(&light, &sim_light), (&heavy, &sim_heavy)] {
        let closed = planc_compiler::cost::estimate(p).step_s;
        assert!(
            (sim.step_s - closed).abs() / closed < 0.05,
            "closed {closed} vs simulated {}",
            sim.step_s
        );
    }
}

#[test]
fn a_trace_row_shows_one_span_at_a_time_though_transfers_share_links() {
    // Data-parallel reductions and pipeline transfers share each rank's links and run at
    // once; the trace gives the communication lane as many rows as it needs.
    let p = plan(
        "tp = 1, pp = 4, zero = 2, recompute = none, schedule = 1f1b",
        8192,
        1,
    );
    let sim = planc_simulator::simulate(&p).expect("simulates");
    let names = planc_simulator::rank_names(&p);
    let trace = planc_simulator::trace::chrome_trace(&sim.graph, &sim.run, &names);
    let mut rows: std::collections::HashMap<(u64, u64), Vec<(f64, f64)>> = Default::default();
    for e in trace["traceEvents"].as_array().unwrap() {
        if e["ph"] == "X" {
            let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
            rows.entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
                .or_default()
                .push((ts, ts + dur));
        }
    }
    let mut comm_rows = 0;
    for (&(_, tid), spans) in rows.iter_mut() {
        comm_rows += usize::from(tid >= 1);
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            assert!(
                w[1].0 >= w[0].1 - 1e-3,
                "tid {tid}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
    assert!(
        comm_rows > 4,
        "some rank's transfers overlapped ({comm_rows} rows)"
    );
}

/// dp 2 on one H200 node, zero `zero`, the device profiled with products that lose
/// `slowdown` of each second a 2-GPU `op` runs beside them (`[[overlap]]`).
fn dp2_contended(zero: u64, op: &str, slowdown: f64, pp: u64) -> Plan {
    use planc_compiler::profile::{OverlapPoint, Profile};
    let text = format!(
        "cluster c {{ nodes = 1, gpus_per_node = {gpus}, gpu = H200_SXM_141GB }}
         model m {{ layers = 12, hidden = 768, heads = 12, vocab = 50304, seq_len = 1024 }}
         train {{ global_batch = 64, precision = bf16, optimizer = adamw, attention = flash }}
         parallel {{ tp = 1, pp = {pp}, dp = 2, micro_batch = 8, zero = {zero}, recompute = none }}",
        gpus = 2 * pp
    );
    let checked = check_source("t.tp", &text);
    let mut plan = checked
        .plan
        .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics));
    let base = planc_compiler::profile::Profile::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../compiler/catalog/profiles/h200_sxm_141gb.bf16.toml"),
    )
    .unwrap();
    let overlap = vec![OverlapPoint {
        op: op.into(),
        gpus: 2,
        bytes: 64 << 20,
        m: 16384,
        n: 3072,
        k: 768,
        products_alone_s: 1e-3,
        products_beside_s: 1e-3 + slowdown * 2e-4,
        collective_alone_s: 2e-4,
        collective_beside_s: 2e-4,
    }];
    plan.cluster.groups[0].gpu.profile = Some(std::sync::Arc::new(Profile { overlap, ..base }));
    plan
}

#[test]
fn passes_beside_a_reduction_lose_the_measured_share_in_simulation_as_in_the_closed_form() {
    for (zero, op, pp) in [
        (0, "AllReduce", 1),
        (1, "ReduceScatter", 1),
        (0, "AllReduce", 2),
        // ZeRO-2 reduces beside every micro-batch: the longer passes hide more of it.
        (2, "ReduceScatter", 1),
        (2, "ReduceScatter", 2),
    ] {
        let (closed0, sim0) = both(&dp2_contended(zero, op, 0.0, pp));
        let (closed1, sim1) = both(&dp2_contended(zero, op, 0.8, pp));
        assert!(
            sim1 > sim0 && closed1 > closed0,
            "{op}: {sim0} -> {sim1}, {closed0} -> {closed1}"
        );
        // Both charge the same share of the hidden time, so they move alike; under a
        // pipeline both also delay the earlier stages' drain by a later stage's loss. The
        // closed form takes the hidden time from its bucket model, the simulation from
        // where the collectives ran (ZeRO-2's, beside every micro-batch: a third apart).
        let (ds, dc) = (sim1 - sim0, closed1 - closed0);
        assert!(
            (ds - dc).abs() <= 0.35 * dc.max(ds),
            "zero {zero}, pp {pp}: simulation +{ds}, closed form +{dc}"
        );
        assert!(
            (sim1 - closed1).abs() / closed1 < 0.05,
            "{sim1} vs {closed1}"
        );
    }
}
