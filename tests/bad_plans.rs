//! The corpus of bad plans in `tests/bad/`: each file's second line says which diagnostic
//! it must produce and where (`# expect: P0303 line 12`, optionally `in lib/other.tp`).
//! The rendered diagnostics are pinned by snapshots, so a change in wording is reviewed.

mod common;

use common::{planc, plans_in, stem};

struct Expectation {
    code: String,
    line: u64,
    file: Option<String>,
}

fn expectation(path: &str) -> Expectation {
    // Read as bytes: some plans are not UTF-8 on purpose (P0103).
    let bytes = std::fs::read(common::root().join(path)).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let header = text
        .lines()
        .nth(1)
        .and_then(|l| l.strip_prefix("# expect: "))
        .unwrap_or_else(|| panic!("{path}: second line must be `# expect: CODE line N`"));
    let words: Vec<&str> = header.split_whitespace().collect();
    match words.as_slice() {
        [code, "line", n] => Expectation {
            code: code.to_string(),
            line: n.parse().unwrap(),
            file: None,
        },
        [code, "line", n, "in", f] => Expectation {
            code: code.to_string(),
            line: n.parse().unwrap(),
            file: Some(f.to_string()),
        },
        _ => panic!("{path}: cannot read `{header}`"),
    }
}

#[test]
fn every_bad_plan_reports_its_code_at_its_line() {
    let plans = plans_in("tests/bad");
    assert!(plans.len() >= 30, "the corpus has {} plans", plans.len());
    for path in &plans {
        let want = expectation(path);
        let run = planc(&["check", path, "--format", "json"]);
        let report: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{path}: JSON report does not parse: {e}"));
        let diags = report["diagnostics"].as_array().unwrap();
        let want_file = match &want.file {
            Some(f) => format!("tests/bad/{f}"),
            None => path.clone(),
        };
        let found = diags.iter().any(|d| {
            d["code"] == want.code.as_str()
                && d["line"] == want.line
                && d["file"].as_str().is_some_and(|f| f.ends_with(&want_file))
        });
        assert!(
            found,
            "{path}: no {} at line {}: {diags:#?}",
            want.code, want.line
        );

        // Every diagnostic names a code, says something, and points somewhere.
        for d in diags {
            assert!(
                d["code"].as_str().is_some_and(|c| c.starts_with('P')),
                "{path}"
            );
            assert!(!d["message"].as_str().unwrap().is_empty(), "{path}");
            assert!(d["line"].as_u64().is_some_and(|l| l >= 1), "{path}: {d}");
        }
        let has_error = diags.iter().any(|d| d["severity"] == "error");
        assert_eq!(report["ok"], !has_error, "{path}");
        assert_eq!(run.code, if has_error { 1 } else { 0 }, "{path}");
        // Errors say what to do.
        for d in diags.iter().filter(|d| d["severity"] == "error") {
            assert!(d["help"].is_string(), "{path}: error without help: {d}");
        }

        for d in diags.iter().filter(|d| d["replacement"].is_string()) {
            the_replacement_fixes_it(path, d);
        }

        let human = planc(&["check", path, "--color", "never"]);
        assert_eq!(human.code, run.code, "{path}");
        insta::assert_snapshot!(stem(path), human.stderr);
    }
}

/// A diagnostic's `replacement`, put in place of its range, leaves its line without that
/// diagnostic and without any error: the quick fix an editor offers fixes what it is
/// offered for.
fn the_replacement_fixes_it(path: &str, d: &serde_json::Value) {
    let text = std::fs::read_to_string(common::root().join(path)).unwrap();
    let offset = |line: &serde_json::Value, column: &serde_json::Value| {
        let (line, column) = (
            line.as_u64().unwrap() as usize,
            column.as_u64().unwrap() as usize,
        );
        let start: usize = text
            .split_inclusive('\n')
            .take(line - 1)
            .map(str::len)
            .sum();
        start
            + text[start..]
                .char_indices()
                .nth(column - 1)
                .map_or(text.len() - start, |(i, _)| i)
    };
    let (from, to) = (
        offset(&d["line"], &d["column"]),
        offset(&d["end_line"], &d["end_column"]),
    );
    let fixed = format!(
        "{}{}{}",
        &text[..from],
        d["replacement"].as_str().unwrap(),
        &text[to..]
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fixed.tp");
    std::fs::write(&file, &fixed).unwrap();
    let run = planc(&["check", file.to_str().unwrap(), "--format", "json"]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let still =
        report["diagnostics"].as_array().unwrap().iter().find(|e| {
            e["line"] == d["line"] && (e["code"] == d["code"] || e["severity"] == "error")
        });
    assert!(
        still.is_none(),
        "{path}: {d} replaced, the line still has {still:?}:\n{fixed}"
    );
}
