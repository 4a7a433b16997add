//! Folding a long step's steady state: which stretch folds, what the band says, and that
//! the timeline drawn from the pieces agrees with the breakdown's numbers.

use planc_simulator::breakdown::{compute_stream, Use};
use planc_simulator::fold::{self, Axis, FOLD_ABOVE, SHOWN};
use planc_simulator::graph::Costs;
use planc_simulator::program::{build, StepOptions};
use planc_simulator::schedule::ScheduleKind;
use planc_simulator::{simulate_program, Simulation};

/// Uniform stages: forward 1, backward 2; in-layer communication `comm` of each pass.
fn run(kind: ScheduleKind, ranks: u32, m: u32, comm: f64) -> Simulation {
    let v = (ranks * kind.chunks()) as usize;
    let costs = Costs {
        forward: vec![(1.0, comm); v],
        backward: vec![(2.0, comm); v],
        weight_grad: vec![1.0; v],
        grad_reduce: vec![0.0; v],
        param_gather: vec![0.0; v],
        optimizer: vec![0.5; ranks as usize],
        p2p: 0.05,
        ..Costs::default()
    };
    simulate_program(build(kind, ranks, m, StepOptions::default()), &costs).expect("no hang")
}

#[test]
fn a_1f1b_step_of_512_micro_batches_folds_its_steady_state_once() {
    let sim = run(ScheduleKind::OneFOneB, 8, 512, 0.2);
    let folds = fold::folds(&sim.graph, &sim.run, sim.breakdown.rank);
    assert_eq!(folds.len(), 1, "{folds:?}");
    let f = &folds[0];
    // The pipeline's fill and drain and the first and last micro-batches stay drawn: the
    // fold starts after the last rank has run micro-batch SHOWN - 1 forward and backward,
    // and the fold holds nearly every micro-batch.
    assert!(f.start > (8 + 2 * SHOWN) as f64 * 3.0 * 0.5, "{f:?}");
    assert!(f.end < sim.run.step_s - 8.0 * 3.0, "{f:?}");
    assert!(
        f.micro_batches > 512 - 2 * (8 + SHOWN) && f.micro_batches < 512,
        "{f:?}"
    );
    assert!(f.len() > 0.9 * sim.run.step_s, "{f:?}");
}

#[test]
fn small_steps_are_drawn_whole_and_gpipe_folds_each_half() {
    let small = run(ScheduleKind::OneFOneB, 4, FOLD_ABOVE, 0.0);
    assert!(fold::folds(&small.graph, &small.run, 0).is_empty());
    // All forwards, then all backwards: the turn between them is drawn, each half folds.
    let gpipe = run(ScheduleKind::Gpipe, 4, 256, 0.0);
    let folds = fold::folds(&gpipe.graph, &gpipe.run, 0);
    assert_eq!(folds.len(), 2, "{folds:?}");
    assert!(folds[0].end < folds[1].start);
    assert!(folds.iter().all(|f| f.micro_batches > 200), "{folds:?}");
}

#[test]
fn the_compute_stream_adds_up_to_the_breakdown() {
    for kind in [
        ScheduleKind::OneFOneB,
        ScheduleKind::Interleaved { vpp: 2 },
        ScheduleKind::ZeroBubbleH1,
    ] {
        let sim = run(kind, 4, 64, 0.3);
        let b = sim.breakdown;
        let pieces = compute_stream(&sim.graph, &sim.run, b.rank);
        let sum = |u: Use| -> f64 {
            pieces
                .iter()
                .filter(|p| p.what == u)
                .map(|p| p.end - p.start)
                .sum()
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b.max(1.0);
        assert!(close(sum(Use::Compute), b.compute_s), "{kind:?}");
        assert!(close(sum(Use::Comm), b.exposed_comm_s), "{kind:?}");
        assert!(close(sum(Use::Bubble), b.bubble_s), "{kind:?}");
        // Pieces tile the step from 0 to its end.
        assert!(pieces.windows(2).all(|w| close(w[0].end, w[1].start)));
        assert!(close(pieces.last().unwrap().end, b.step_s));
    }
}

#[test]
fn a_fold_share_covers_the_fold_on_every_rank() {
    let sim = run(ScheduleKind::OneFOneB, 8, 512, 0.2);
    let f = &fold::folds(&sim.graph, &sim.run, sim.breakdown.rank)[0];
    for r in 0..8 {
        let stream = compute_stream(&sim.graph, &sim.run, r);
        let share = fold::share(&sim.graph, &sim.run, r, &stream, f);
        let (compute, comm, bubble) = share.split();
        assert!((compute + comm + bubble - f.len()).abs() < 1e-6 * f.len());
        // In the steady state a micro-batch is a forward of 1 and a backward of 2, each
        // with its 0.2 of collectives and followed by a send of 0.05 that the next pass
        // waits for (sends do not overlap by default; the end ranks send one way only):
        // the band shows that share, which a uniform stripe of 512 micro-batches could not.
        let sends = if r == 0 || r == 7 { 1.0 } else { 2.0 };
        let want = (0.4 + 0.05 * sends) / 3.5;
        assert!(
            (comm / f.len() - want).abs() < 0.01,
            "rank {r}: {comm} of {}",
            f.len()
        );
        assert!(bubble / f.len() < 0.05, "rank {r}: {bubble}");
        assert!(share.comm_lane_busy > 0.0, "the sends run on the lane");
    }
}

#[test]
fn the_svg_of_a_long_step_is_folded_and_small() {
    let sim = run(ScheduleKind::OneFOneB, 8, 512, 0.2);
    let names: Vec<String> = (0..8).map(|r| format!("stage {r} <&>")).collect();
    let svg = planc_simulator::svg::timeline_svg(
        &sim.graph,
        &sim.run,
        &names,
        "a \"title\" <b>",
        &sim.breakdown,
    );
    assert!(svg.contains(r#"class="fold""#), "a band");
    assert!(svg.contains("micro-batches ⋯"));
    assert!(svg.contains("stage 3 &lt;&amp;&gt;") && svg.contains("a &quot;title&quot; &lt;b&gt;"));
    assert!(!svg.contains("<b>"));
    // Far fewer shapes than tasks: the steady state is one bar a rank.
    let rects = svg.matches("<rect").count();
    assert!(
        rects < sim.graph.graph.node_count() / 4,
        "{rects} rects for {} tasks",
        sim.graph.graph.node_count()
    );
    // The axis maps the step's end to the plot's right edge.
    let folds = fold::folds(&sim.graph, &sim.run, sim.breakdown.rank);
    let axis = Axis::new(sim.run.step_s, &folds, 1000.0, 100.0);
    assert!((axis.x(sim.run.step_s) - 1000.0).abs() < 1e-9);
}
