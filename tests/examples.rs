//! Every plan in `examples/` checks as documented: its human output and its JSON report are
//! pinned by snapshots, and its exit status matches whether it is meant to fit.

mod common;

use common::{planc, plans_in, stem};

#[test]
fn every_example_has_a_pinned_human_and_json_report() {
    let examples = plans_in("examples");
    assert!(examples.len() >= 6, "the issue asks for six examples");
    for path in &examples {
        let human = planc(&["check", path, "--color", "never"]);
        let json = planc(&["check", path, "--format", "json"]);
        let report: serde_json::Value =
            serde_json::from_str(&json.stdout).expect("the JSON report parses");

        // Examples named `oom-*` are the plans that must not fit; all others must.
        let meant_to_fail = stem(path).starts_with("oom-");
        assert_eq!(human.code, if meant_to_fail { 1 } else { 0 }, "{path}");
        assert_eq!(
            json.code, human.code,
            "{path}: both formats agree on the status"
        );
        assert_eq!(report["ok"], !meant_to_fail, "{path}");
        assert!(report["time"]["step_s"].as_f64().unwrap() > 0.0, "{path}");

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
