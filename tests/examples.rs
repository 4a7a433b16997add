//! Every plan in `examples/` checks as documented: its human output and its JSON report are
//! pinned by snapshots, and its exit status matches whether it is meant to fit.

mod common;

use common::{planc, plans_in, stem};

#[test]
fn every_example_has_a_pinned_human_and_json_report() {
    let examples = plans_in("examples");
    assert!(examples.len() >= 6, "the issue asks for six examples");
    // Plans with holes are solved by `check` (P0502 says how).
    let solved = planc(&["check", "examples/llama3-70b-solve.tp"]);
    assert!(
        solved
            .stderr
            .contains("note[P0502]: holes filled by planc solve"),
        "{}",
        solved.stderr
    );
    for path in &examples {
        let human = planc(&["check", path, "--color", "never"]);
        let json = planc(&["check", path, "--format", "json"]);
        let report: serde_json::Value =
            serde_json::from_str(&json.stdout).expect("the JSON report parses");

        // `oom-*` plans must not fit and `infeasible-*` plans have no valid layout; all
        // others must check.
        let meant_to_fail = stem(path).starts_with("oom-") || stem(path).starts_with("infeasible-");
        assert_eq!(human.code, if meant_to_fail { 1 } else { 0 }, "{path}");
        assert_eq!(
            json.code, human.code,
            "{path}: both formats agree on the status"
        );
        assert_eq!(report["ok"], !meant_to_fail, "{path}");
        if !stem(path).starts_with("infeasible-") {
            assert!(report["time"]["step_s"].as_f64().unwrap() > 0.0, "{path}");
        }

        insta::assert_snapshot!(format!("{}-human", stem(path)), human.transcript());
        insta::assert_json_snapshot!(format!("{}-json", stem(path)), report);
    }
}

#[test]
fn the_plan_that_does_not_fit_says_why() {
    let run = planc(&["check", "examples/oom-llama3-70b-8xa100.tp"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("error[P0401]"), "{}", run.stderr);
    assert!(
        run.stderr.contains("A100_SXM_40GB has 40.00 GiB"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("help:"),
        "the error says what to change"
    );
}

#[test]
fn an_infeasible_plan_names_the_conflicting_rules() {
    let run = planc(&["check", "examples/infeasible-llama2-13b-t4.tp"]);
    assert_eq!(run.code, 1);
    for needle in [
        "error[P0801]",
        "tp must divide heads = 40",
        "only with tp × pp ≥ 16",
        "`pp = 1` as written",
        "help: let planc choose `pp`",
    ] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
}
