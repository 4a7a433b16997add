//! The micro-batches a stage holds at once, counted twice: by the compiler's memory model
//! (`cost::memory::in_flight_sets`, from the schedule's formula) and by the program the
//! plan's framework runs (`program::live_sets`, what planc's runtime allocates). They must
//! agree, or only a GPU run notices the memory the model left out.

use planc_compiler::check::{check_file, check_source};
use planc_compiler::cost::memory::{in_flight_sets, PLANC_RECEIVES_AHEAD};
use planc_compiler::plan::{Framework, Plan, Schedule};
use planc_compiler::source::FsLoader;
use planc_simulator::program::live_sets;

/// Each stage's (live sets of its program, the model's count) for `plan` as it stands.
fn counts(plan: &Plan) -> Vec<(u64, u64)> {
    let p = &plan.parallel;
    let micro_batches = p.grad_accum(plan.train.global_batch).max(1);
    let pp = p.pp as usize;
    let program = planc_simulator::lower::lower(plan).0;
    (0..pp)
        .map(|s| {
            let live = live_sets(&program.ranks[s], pp) as u64;
            (live, in_flight_sets(plan, s as u64, micro_batches))
        })
        .collect()
}

/// The model counts the program's sets: exactly, but for planc's interleaved programs,
/// whose receives posted ahead it counts at their most.
fn agree(plan: &Plan, what: &str) {
    let ahead =
        plan.framework() == Framework::Planc && plan.parallel.schedule == Schedule::Interleaved;
    for (stage, (live, model)) in counts(plan).into_iter().enumerate() {
        if ahead {
            assert!(
                live <= model && model <= live + PLANC_RECEIVES_AHEAD,
                "{what}, stage {stage}: the program holds {live} sets, the model counts {model}"
            );
        } else {
            assert_eq!(live, model, "{what}, stage {stage}");
        }
    }
}

#[test]
fn every_examples_stages_hold_the_sets_the_memory_model_counts() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tp"))
        .collect();
    files.sort();
    let (mut plans, mut interleaved) = (0, 0);
    for f in files {
        let c = check_file(&f, &FsLoader).expect("readable");
        let Some(mut plan) = c.plan else {
            continue;
        };
        let name = f.file_name().expect("a name").to_string_lossy().to_string();
        plans += 1;
        interleaved += usize::from(plan.parallel.schedule == Schedule::Interleaved);
        agree(&plan, &name);
        // And as `planc run` runs it: planc's own program.
        plan.framework = Framework::Planc;
        agree(&plan, &format!("{name} under planc's runtime"));
    }
    assert!(
        plans >= 20 && interleaved >= 3,
        "{plans} plans, {interleaved} interleaved"
    );
}

#[test]
fn pipelines_of_every_shape_hold_the_sets_the_memory_model_counts() {
    for framework in ["megatron", "planc"] {
        for schedule in [
            "gpipe",
            "1f1b",
            "interleaved, vpp = 2",
            "interleaved, vpp = 4",
        ] {
            for (pp, per_rank) in [(2, 1), (2, 4), (3, 2), (4, 1), (4, 2), (4, 8), (8, 2)] {
                let micro_batches = pp * per_rank;
                let text = format!(
                    "cluster c {{ nodes = 1, gpus_per_node = {pp}, gpu = H100_SXM_80GB }}
                     model m {{ layers = 96, hidden = 256, heads = 4, vocab = 512, seq_len = 128 }}
                     train {{ global_batch = {micro_batches}, precision = bf16 }}
                     parallel {{ tp = 1, pp = {pp}, dp = 1, micro_batch = 1, schedule = {schedule} }}
                     job j {{ framework = {framework} }}"
                );
                let c = check_source("t.tp", &text);
                let plan = c
                    .plan
                    .unwrap_or_else(|| panic!("{text}: {:#?}", c.diagnostics));
                let what =
                    format!("{framework}, {schedule}, pp {pp}, {micro_batches} micro-batches");
                agree(&plan, &what);
            }
        }
    }
    // The bound is met, not only kept: planc's interleaved program of a deep pipeline
    // holds exactly the two sets more that the model counts.
    let text = "cluster c { nodes = 1, gpus_per_node = 4, gpu = H100_SXM_80GB }
         model m { layers = 48, hidden = 256, heads = 4, vocab = 512, seq_len = 128 }
         train { global_batch = 16, precision = bf16 }
         parallel { tp = 1, pp = 4, dp = 1, micro_batch = 1, schedule = interleaved, vpp = 3 }
         job j { framework = planc }";
    let plan = check_source("t.tp", text).plan.expect("a plan");
    for (live, model) in counts(&plan) {
        assert_eq!(live, model);
    }
}
