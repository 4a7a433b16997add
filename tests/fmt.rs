//! `planc fmt` on every plan the project has: only layout changes, nothing is lost, and the
//! result is stable. Plus the command itself: in place, --check, stdin, broken files.

mod common;

use std::path::PathBuf;

use common::{planc, root};
use planc_compiler::check::check_source;
use planc_lang::format::{format, FormatError};

fn plans() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["examples", "tests/bad", "tests/spec"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "tp") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_plan_formats_stably_and_keeps_its_comments() {
    let mut formatted = 0;
    for path in plans() {
        // The plans that are not UTF-8 on purpose are refused before formatting.
        let Ok(text) = String::from_utf8(std::fs::read(&path).unwrap()) else {
            continue;
        };
        let once = match format(&text) {
            Ok(t) => t,
            Err(FormatError::Syntax(_)) => continue, // the bad plans with syntax errors
            Err(e) => panic!("{}: {e:?}", path.display()),
        };
        assert_eq!(
            format(&once).unwrap(),
            once,
            "{}: not stable",
            path.display()
        );
        let comments = |t: &str| t.lines().filter(|l| l.contains('#')).count();
        assert_eq!(comments(&text), comments(&once), "{}", path.display());
        formatted += 1;
    }
    assert!(formatted >= 50, "only {formatted} plans formatted");
}

#[test]
fn formatting_does_not_change_what_a_plan_means() {
    for path in plans()
        .iter()
        .filter(|p| p.starts_with(root().join("examples")))
    {
        let text = std::fs::read_to_string(path).unwrap();
        let report = |t: &str| {
            let mut v = serde_json::to_value(check_source("plan.tp", t).report()).unwrap();
            // Diagnostics point at lines, which formatting may move.
            v.as_object_mut().unwrap().remove("diagnostics");
            v
        };
        assert_eq!(
            report(&text),
            report(&format(&text).unwrap()),
            "{}",
            path.display()
        );
    }
}

#[test]
fn fmt_rewrites_in_place_checks_and_reads_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plan.tp");
    let messy = "model m{layers=2;hidden=64  # tiny\n}\n";
    let tidy = "model m {\n    layers = 2\n    hidden = 64  # tiny\n}\n";
    std::fs::write(&file, messy).unwrap();
    let f = file.to_str().unwrap();

    let check = planc(&["fmt", "--check", f]);
    assert_eq!(check.code, 1, "{}", check.stderr);
    assert!(check.stdout.contains("would reformat"), "{}", check.stdout);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), messy);

    let run = planc(&["fmt", f]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), tidy);
    assert_eq!(planc(&["fmt", "--check", f]).code, 0);

    // A file with a syntax error is reported and left exactly as it was.
    let broken = "model m { layers = }\n";
    std::fs::write(&file, broken).unwrap();
    let run = planc(&["fmt", f]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("syntax errors"), "{}", run.stderr);
    assert!(run.stderr.contains("P00"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), broken);

    let missing = planc(&["fmt", "no-such-plan.tp"]);
    assert_eq!(missing.code, 2);
}

#[test]
fn fmt_formats_standard_input_for_editors() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_planc"))
        .arg("fmt")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"train{global_batch=8}")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "train { global_batch = 8 }\n"
    );
}

#[test]
fn the_examples_are_formatted() {
    let examples: Vec<String> = plans()
        .into_iter()
        .filter(|p| p.starts_with(root().join("examples")))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let mut args = vec!["fmt", "--check"];
    args.extend(examples.iter().map(String::as_str));
    let run = planc(&args);
    assert_eq!(
        run.code, 0,
        "run `planc fmt examples/*.tp`:\n{}",
        run.stdout
    );
}
