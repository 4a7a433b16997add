//! `solve` searches what the framework runs: with `job.framework` set, the layout `check`
//! and `solve` pick is one the framework's target emits, and a better layout the framework
//! cannot run is named with the reason (`planc_compiler::capability`).

use planc_compiler::check::check_source;
use planc_compiler::solve;
use planc_targets::{render_checked, Target};

/// examples/llama3-70b-solve.tp (every layout attribute a hole) with `job` appended.
fn solve_example(job: &str) -> String {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama3-70b-solve.tp"),
    )
    .unwrap();
    format!("{text}\njob {{ {job} }}\n")
}

/// examples/gpt3-175b.tp with the layout left to `solve`, and `job` appended: unconstrained,
/// its best layout pipelines over 16 stages, which DeepSpeed's config cannot.
fn gpt3(job: &str) -> String {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpt3-175b.tp"),
    )
    .unwrap();
    let start = text.find("parallel {").unwrap();
    format!(
        "{}parallel {{ tp = auto, pp = auto, dp = auto, micro_batch = 1, schedule = 1f1b, \
         sequence_parallel = true, zero = auto, recompute = auto }}\njob {{ {job} }}\n",
        &text[..start]
    )
}

#[test]
fn deepspeed_is_given_a_layout_its_target_emits_and_told_what_it_costs() {
    let free = check_source("free.tp", &gpt3("name = \"free\""));
    let free_best = free.plan.as_ref().expect("a plan").parallel.clone();
    assert!(free_best.pp > 1 || free_best.tp > 1, "{free_best:?}");

    let text = gpt3("framework = deepspeed, entrypoint = \"train.py\"");
    let c = check_source("ds.tp", &text);
    assert!(c.ok(), "{:?}", c.diagnostics);
    let p = &c.plan.as_ref().unwrap().parallel;
    assert_eq!((p.pp, p.cp, p.ep), (1, 1, 1), "{p:?}");
    render_checked(Target::Deepspeed, &c, None).expect("the deepspeed target emits it");

    let spec = c.spec.as_ref().unwrap();
    let found = solve::search(spec, &|_, _| {});
    let best = found.best().expect("a layout");
    assert_eq!(best.plan.parallel, *p, "check and solve pick the same plan");
    let left = found.left_out.as_ref().unwrap_or_else(|| {
        panic!(
            "no better layout left out: free {free_best:?} deepspeed {p:?} rejected {:?} step {} free step {}",
            found.rejected,
            best.estimate.step_s,
            free.estimate.as_ref().unwrap().step_s
        )
    });
    assert!(left.candidate.estimate.step_s < best.estimate.step_s);
    eprintln!(
        "deepspeed: {:?} at {:.3} s; left out {:?} at {:.3} s ({})",
        (p.tp, p.pp, p.dp, p.zero),
        best.estimate.step_s,
        {
            let q = &left.candidate.plan.parallel;
            (q.tp, q.pp, q.dp, q.zero)
        },
        left.candidate.estimate.step_s,
        left.limit.reason
    );
    assert_eq!(left.limit.framework, "deepspeed");
    assert!(
        left.limit.reason.contains("DeepSpeed's config"),
        "{:?}",
        left.limit
    );
    // Without an entrypoint, planc's script runs the job: data parallelism only.
    let c = check_source("ds.tp", &solve_example("framework = deepspeed"));
    if c.ok() {
        let p = &c.plan.as_ref().unwrap().parallel;
        assert_eq!(p.tp, 1, "{p:?}");
        render_checked(Target::Deepspeed, &c, None).expect("emits");
    }
}

#[test]
fn megatron_and_torchtitan_are_given_layouts_their_targets_emit() {
    for (framework, target) in [
        ("megatron", Target::Megatron),
        ("torchtitan", Target::Torchtitan),
    ] {
        let c = check_source("f.tp", &solve_example(&format!("framework = {framework}")));
        assert!(c.ok(), "{framework}: {:?}", c.diagnostics);
        if let Err(e) = render_checked(target, &c, None) {
            panic!(
                "{framework}: {:?} refused: {e}",
                c.plan.as_ref().unwrap().parallel
            );
        }
        let p = &c.plan.as_ref().unwrap().parallel;
        if framework == "torchtitan" {
            assert_ne!(p.zero, 1, "{p:?}");
        } else {
            assert!(p.zero <= 1 || p.pp == 1, "{p:?}");
        }
    }
}
