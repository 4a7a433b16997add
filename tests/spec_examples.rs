//! Every example of the language specification parses, and assembled into plans, checks
//! as written. The examples are vendored in `tests/spec/` as plan files; they are compared
//! with the specification (`docs/spec/language.md`, the repository's copy of the contract)
//! so that neither can drift from the other.

mod common;

use planc_compiler::check::check_source;
use planc_lang::{parse, FileId};

fn fragments() -> Vec<(String, String)> {
    common::plans_in("tests/spec")
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(common::root().join(&p)).unwrap();
            (p, text)
        })
        .collect()
}

fn fragment(name: &str) -> String {
    fragments()
        .into_iter()
        .find(|(p, _)| p.contains(name))
        .unwrap_or_else(|| panic!("no fragment {name}"))
        .1
}

#[test]
fn every_spec_example_parses_without_a_diagnostic() {
    let all = fragments();
    assert_eq!(all.len(), 9);
    for (path, text) in all {
        let parsed = parse(&text, FileId(0));
        assert!(
            parsed.diagnostics.is_empty(),
            "{path}: {:#?}",
            parsed.diagnostics
        );
    }
}

#[test]
fn the_spec_blocks_assembled_into_a_plan_check() {
    // Every single-block example at once: the MI300X definition, selene, the model, the
    // interleaved parallel block, the job and the search settings.
    let text = [
        "01-gpu",
        "02-cluster-selene",
        "04-model",
        "05-train",
        "06-parallel",
        "07-job",
        "08-search",
    ]
    .map(fragment)
    .join("\n");
    let checked = check_source("spec.tp", &text);
    assert!(checked.ok(), "{:#?}", checked.diagnostics);
    assert_eq!(checked.plan.unwrap().parallel.dp, 8);

    let whole = check_source("whole.tp", &fragment("09-whole-plan"));
    assert!(whole.ok(), "{:#?}", whole.diagnostics);
}

#[test]
fn the_mixed_cluster_example_checks_with_a_layout_that_fits_it() {
    let text = format!(
        "{}\nmodel m {{ preset = \"llama2-7b\" }}\ntrain {{ global_batch = 32, precision = fp16, optimizer = adam }}\nparallel {{ tp = 4, pp = 2, dp = auto, micro_batch = 1 }}",
        fragment("03-cluster-mixed")
    );
    let checked = check_source("mixed.tp", &text);
    assert!(checked.ok(), "{:#?}", checked.diagnostics);
    // Stage 0 lands on the A100 group, stage 1 on the V100 group.
    let e = checked.estimate.unwrap();
    assert_eq!(e.stages[0].gpu, "A100_SXM_80GB");
    assert_eq!(e.stages[1].gpu, "V100_SXM_32GB");
}

#[test]
fn the_vendored_examples_match_the_specification() {
    let spec = common::root().join("docs/spec/language.md");
    let text = std::fs::read_to_string(&spec).unwrap_or_else(|e| panic!("{}: {e}", spec.display()));
    for (path, fragment) in fragments() {
        assert!(
            text.contains(&fragment),
            "{path} differs from the specification"
        );
    }
}
