//! The simulator against answers known in closed form: bubbles of uniform pipelines,
//! overlap of a gradient reduction with backward, and planted hangs.

use planc_simulator::graph::Costs;
use planc_simulator::program::{build, Instr, StepOptions};
use planc_simulator::schedule::{Pass, ScheduleKind};
use planc_simulator::simulate_program;

/// Uniform stages: forward `f`, backward `b` (of which `w` weight gradient) per chunk.
fn uniform(ranks: u32, chunks: u32, f: f64, b: f64, w: f64) -> Costs {
    let v = (ranks * chunks) as usize;
    Costs {
        forward: vec![(f, 0.0); v],
        backward: vec![(b, 0.0); v],
        weight_grad: vec![w; v],
        grad_reduce: vec![0.0; v],
        param_gather: vec![0.0; v],
        optimizer: vec![0.0; ranks as usize],
        ..Costs::default()
    }
}

fn bubble(kind: ScheduleKind, ranks: u32, m: u32, costs: &Costs) -> (f64, f64) {
    let program = build(kind, ranks, m, StepOptions::default());
    let sim = simulate_program(program, costs).expect("no hang");
    (sim.breakdown.bubble_fraction(), sim.breakdown.step_s)
}

#[test]
fn gpipe_and_1f1b_bubbles_are_p_minus_1_over_m_plus_p_minus_1() {
    for kind in [ScheduleKind::Gpipe, ScheduleKind::OneFOneB] {
        for (p, m) in [(2, 1), (4, 4), (4, 16), (8, 8), (8, 64), (16, 192)] {
            let (fraction, step) = bubble(kind, p, m, &uniform(p, 1, 1.0, 2.0, 1.0));
            let want = (p - 1) as f64 / (m + p - 1) as f64;
            assert!(
                (fraction - want).abs() < 1e-9,
                "{kind:?} p {p} m {m}: {fraction} vs {want}"
            );
            assert!(
                (step - 3.0 * (m + p - 1) as f64).abs() < 1e-9,
                "{kind:?} p {p} m {m}: step {step}"
            );
        }
    }
}

#[test]
fn interleaving_divides_the_bubble_by_the_chunks() {
    for (p, v, m) in [(4, 2, 8), (4, 3, 16), (8, 2, 16), (8, 4, 64)] {
        // A chunk holds 1/v of the rank's layers.
        let costs = uniform(p, v, 1.0 / v as f64, 2.0 / v as f64, 0.0);
        let (fraction, _) = bubble(ScheduleKind::Interleaved { vpp: v }, p, m, &costs);
        let want = (p - 1) as f64 / (v * m + p - 1) as f64;
        assert!(
            (fraction - want).abs() < 1e-9,
            "p {p} v {v} m {m}: {fraction} vs {want}"
        );
    }
}

#[test]
fn zero_bubble_h1_removes_the_weight_gradients_from_the_bubble() {
    // F = B = W = 1: 1F1B idles (p − 1)(F + B + W); ZB-H1 idles (p − 1)(F + B − W).
    for (p, m) in [(4, 8), (8, 16), (8, 64)] {
        let costs = uniform(p, 1, 1.0, 2.0, 1.0);
        let (_, one_f_one_b) = bubble(ScheduleKind::OneFOneB, p, m, &costs);
        let (_, zb) = bubble(ScheduleKind::ZeroBubbleH1, p, m, &costs);
        let work = 3.0 * m as f64;
        assert!((one_f_one_b - work - 3.0 * (p - 1) as f64).abs() < 1e-9);
        assert!(
            (zb - work - (p - 1) as f64).abs() < 1e-9,
            "p {p} m {m}: ZB-H1 step {zb}, work {work}"
        );
    }
}

#[test]
fn a_bucketed_gradient_reduction_hides_behind_the_last_backward() {
    // One rank, one micro-batch: F = 1, B = 2, reduction 1.6 in 4 buckets of 0.4 that start
    // as each quarter of the backward (0.5) finishes: buckets end at 0.9, 1.4, 1.9, 2.4
    // after the backward starts; only the last bucket's 0.4 shows after it.
    let mut costs = uniform(1, 1, 1.0, 2.0, 0.0);
    costs.grad_reduce = vec![1.6];
    let opts = StepOptions {
        zero: 0,
        data_parallel: true,
        buckets: 4,
        tied_embedding: false,
        ..StepOptions::default()
    };
    let sim = simulate_program(build(ScheduleKind::OneFOneB, 1, 1, opts), &costs).unwrap();
    assert!(
        (sim.breakdown.step_s - 3.4).abs() < 1e-9,
        "{}",
        sim.breakdown.step_s
    );
    assert!(
        (sim.breakdown.exposed_comm_s - 0.4).abs() < 1e-9,
        "{:?}",
        sim.breakdown
    );
    // A reduction longer than the backward leaves the rest exposed: 4 × 1.0, ready from
    // 1.5 on, queued on the link: ends at 1.5 + 4.0 = 5.5.
    costs.grad_reduce = vec![4.0];
    let sim = simulate_program(build(ScheduleKind::OneFOneB, 1, 1, opts), &costs).unwrap();
    assert!(
        (sim.breakdown.step_s - 5.5).abs() < 1e-9,
        "{}",
        sim.breakdown.step_s
    );
}

#[test]
fn a_reduction_after_backward_is_exposed_whole() {
    // As above (F = 1, B = 2, reduction 1.6 in 4 buckets) but the framework reduces after
    // the backward pass: all 1.6 shows, in one piece.
    let mut costs = uniform(1, 1, 1.0, 2.0, 0.0);
    costs.grad_reduce = vec![1.6];
    let opts = StepOptions {
        zero: 0,
        data_parallel: true,
        buckets: 1,
        tied_embedding: false,
        overlap_grad_reduce: false,
        ..StepOptions::default()
    };
    let sim = simulate_program(build(ScheduleKind::OneFOneB, 1, 1, opts), &costs).unwrap();
    assert!(
        (sim.breakdown.step_s - 4.6).abs() < 1e-9,
        "{:?}",
        sim.breakdown
    );
    assert!((sim.breakdown.exposed_comm_s - 1.6).abs() < 1e-9);
    // Interleaved: both chunks' reductions wait for the last backward of the step.
    let mut costs = uniform(2, 2, 1.0, 2.0, 0.0);
    costs.grad_reduce = vec![1.0; 4];
    let program = build(ScheduleKind::Interleaved { vpp: 2 }, 2, 4, opts);
    for rank in &program.ranks {
        let first_reduce = rank
            .iter()
            .position(|i| matches!(i, Instr::Collective { .. }))
            .unwrap();
        let last_run = rank
            .iter()
            .rposition(|i| matches!(i, Instr::Run(_)))
            .unwrap();
        assert!(first_reduce > last_run, "{rank:?}");
    }
    let after = simulate_program(program, &costs).unwrap();
    let overlapped = StepOptions {
        overlap_grad_reduce: true,
        buckets: 4,
        ..opts
    };
    let during = simulate_program(
        build(ScheduleKind::Interleaved { vpp: 2 }, 2, 4, overlapped),
        &costs,
    )
    .unwrap();
    assert!(after.breakdown.step_s > during.breakdown.step_s);
}

#[test]
fn overlapped_pipeline_transfers_leave_the_critical_path() {
    // Interleaved, 4 ranks, 2 chunks, 8 micro-batches, p2p as long as a quarter pass: when
    // ranks wait for their sends, every transfer adds to the step; overlapped, the next pass
    // runs while the message travels.
    let mut costs = uniform(4, 2, 1.0, 2.0, 0.0);
    costs.p2p = 0.25;
    let kind = ScheduleKind::Interleaved { vpp: 2 };
    let blocking = simulate_program(build(kind, 4, 8, StepOptions::default()), &costs).unwrap();
    let opts = StepOptions {
        overlap_p2p: true,
        ..StepOptions::default()
    };
    let overlapped = simulate_program(build(kind, 4, 8, opts), &costs).unwrap();
    assert!(
        overlapped.breakdown.step_s < blocking.breakdown.step_s - 1.0,
        "{} vs {}",
        overlapped.breakdown.step_s,
        blocking.breakdown.step_s
    );
    // Never faster than the work itself: 8 micro-batches × 2 chunks × (1 + 2).
    assert!(overlapped.breakdown.step_s >= 48.0);
}

#[test]
fn pipeline_sends_and_gradient_reductions_share_a_link() {
    // Two ranks; p2p = 0.5. With data parallelism the first rank's final reduction and
    // the sends compete for its link: the step can only get longer, never shorter.
    let mut costs = uniform(2, 1, 1.0, 2.0, 0.0);
    costs.p2p = 0.5;
    let plain = simulate_program(
        build(ScheduleKind::OneFOneB, 2, 4, StepOptions::default()),
        &costs,
    )
    .unwrap();
    costs.grad_reduce = vec![3.0, 3.0];
    let opts = StepOptions {
        zero: 0,
        data_parallel: true,
        buckets: 2,
        tied_embedding: false,
        ..StepOptions::default()
    };
    let with_dp = simulate_program(build(ScheduleKind::OneFOneB, 2, 4, opts), &costs).unwrap();
    assert!(with_dp.breakdown.step_s > plain.breakdown.step_s);
    assert!(with_dp.breakdown.exposed_comm_s > plain.breakdown.exposed_comm_s);
}

#[test]
fn a_swapped_receive_is_reported_with_both_ranks() {
    let mut program = build(ScheduleKind::OneFOneB, 2, 4, StepOptions::default());
    let recvs: Vec<usize> = program.ranks[1]
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, Instr::Recv { .. }))
        .map(|(k, _)| k)
        .take(2)
        .collect();
    let (a, b) = (recvs[0], recvs[1]);
    let (x, y) = (program.ranks[1][a], program.ranks[1][b]);
    program.ranks[1][a] = y;
    program.ranks[1][b] = x;
    let hangs = simulate_program(program, &uniform(2, 1, 1.0, 2.0, 0.0))
        .err()
        .expect("a hang");
    assert_eq!(hangs[0].ranks, vec![0, 1]);
    assert!(
        hangs[0].message.contains("1st send to rank 1"),
        "{}",
        hangs[0].message
    );
    assert!(
        hangs[0].message.contains("micro-batch 1"),
        "{}",
        hangs[0].message
    );
}

#[test]
fn a_skipped_collective_is_reported() {
    let opts = StepOptions {
        zero: 0,
        data_parallel: false,
        buckets: 1,
        tied_embedding: true,
        ..StepOptions::default()
    };
    let mut program = build(ScheduleKind::OneFOneB, 4, 4, opts);
    program.ranks[3].retain(|i| !matches!(i, Instr::Collective { .. }));
    let hangs = simulate_program(program, &uniform(4, 1, 1.0, 2.0, 0.0))
        .err()
        .expect("a hang");
    assert_eq!(hangs[0].ranks, vec![0, 3]);
    assert!(
        hangs[0]
            .message
            .contains("embedding gradient all-reduce but rank 3's is nothing"),
        "{}",
        hangs[0].message
    );
}

#[test]
fn passes_that_wait_on_each_other_are_a_cycle() {
    // Rank 0 insists on B0 before F1; rank 1 on F1 before B0. Message orders agree on
    // both sides, so only the run can find it.
    let mut program = build(ScheduleKind::Gpipe, 2, 2, StepOptions::default());
    let reorder = |instrs: &mut Vec<Instr>, want: &[(Pass, u32)]| {
        let mut out = Vec::new();
        for &(pass, mb) in want {
            // Each pass with the messages around it.
            let at = instrs
                .iter()
                .position(|i| matches!(i, Instr::Run(w) if w.pass == pass && w.micro_batch == mb))
                .unwrap();
            let mut start = at;
            while start > 0 && matches!(instrs[start - 1], Instr::Recv { .. }) {
                start -= 1;
            }
            let mut end = at + 1;
            while end < instrs.len() && matches!(instrs[end], Instr::Send { .. }) {
                end += 1;
            }
            out.extend_from_slice(&instrs[start..end]);
        }
        out.push(Instr::Optimizer);
        *instrs = out;
    };
    reorder(
        &mut program.ranks[0],
        &[
            (Pass::Forward, 0),
            (Pass::Backward, 0),
            (Pass::Forward, 1),
            (Pass::Backward, 1),
        ],
    );
    let hangs = simulate_program(program, &uniform(2, 1, 1.0, 2.0, 0.0))
        .err()
        .expect("a hang");
    let msg = &hangs[0].message;
    assert!(msg.contains("cycle"), "{msg}");
    assert!(
        msg.contains("rank 0 B0") && msg.contains("rank 1 B0"),
        "{msg}"
    );
}
