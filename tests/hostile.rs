//! Hostile files through the commands a user runs: `check`, `fmt`, `solve`, `simulate` and
//! `emit` never abort or panic, every error is located, exit codes keep the contract (0
//! valid, 1 the plan has errors, 2 misuse) and the JSON always parses. Also the contracts
//! this work pinned down: a file that is not UTF-8 is a plan error, `solve --format json`
//! has `ok` and `diagnostics` at the top, human reports and diagnostics stay on separate
//! lines.

mod common;

use std::path::{Path, PathBuf};

use common::{planc, root, Run};
use serde_json::Value;

const PLAN: &str = include_str!("../examples/t4-pcie-box.tp");

/// The hostile files, written into `dir`: name, bytes.
fn hostile_files(dir: &Path) -> Vec<PathBuf> {
    let value = |v: &str| PLAN.replace("micro_batch = 4", &format!("micro_batch = {v}"));
    let mut files: Vec<(&str, Vec<u8>)> = vec![
        (
            "parens-20k.tp",
            value(&format!("{}4{}", "(".repeat(20_000), ")".repeat(20_000))).into_bytes(),
        ),
        (
            "parens-100k.tp",
            value(&format!("{}4{}", "(".repeat(100_000), ")".repeat(100_000))).into_bytes(),
        ),
        (
            "lists-20k.tp",
            value(&format!("{}4{}", "[".repeat(20_000), "]".repeat(20_000))).into_bytes(),
        ),
        (
            "signs-100k.tp",
            value(&format!("{}4", "- ".repeat(100_000))).into_bytes(),
        ),
        ("unclosed.tp", value(&"(".repeat(100_000)).into_bytes()),
        (
            "blocks-20k.tp",
            format!(
                "{PLAN}job {}{}",
                "{ env ".repeat(20_000),
                "}".repeat(20_000)
            )
            .into_bytes(),
        ),
        (
            "chain-20k.tp",
            value(&format!("4{}", " + 1 - 1".repeat(20_000))).into_bytes(),
        ),
        (
            "chain-error.tp",
            value(&format!("4{} + 1 GiB", " + 1".repeat(20_000))).into_bytes(),
        ),
        (
            "nul.tp",
            PLAN.replace("zero = 1", "zero = 1\0\0\0").into_bytes(),
        ),
        (
            "controls.tp",
            PLAN.replace("pp = 1", "pp\u{7}\u{1b}[31m = 1\u{200b}")
                .into_bytes(),
        ),
        (
            "bom.tp",
            [b"\xef\xbb\xbf".as_slice(), PLAN.as_bytes()].concat(),
        ),
        ("crlf.tp", PLAN.replace('\n', "\r\n").into_bytes()),
        (
            "latin1.tp",
            PLAN.replace("no NVLink", "no NVLink \u{1}").into_bytes(),
        ),
        (
            "gbk.tp",
            [PLAN.as_bytes(), b"# \xc4\xe3\xba\xc3\n"].concat(),
        ),
        (
            "utf16.tp",
            [0xff, 0xfe]
                .into_iter()
                .chain(PLAN.encode_utf16().flat_map(u16::to_le_bytes))
                .collect(),
        ),
        (
            "comment-10mb.tp",
            format!("{PLAN}# {}\n", "x".repeat(10 << 20)).into_bytes(),
        ),
        (
            "garbage-1mb.tp",
            (0..1u32 << 20)
                .map(|i| (i.wrapping_mul(7919) >> 3) as u8)
                .collect(),
        ),
        (
            "line-1mb.tp",
            PLAN.replace(
                "micro_batch = 4",
                &format!("micro_batch = 4, {}", "foo = 1, ".repeat(120_000)),
            )
            .into_bytes(),
        ),
    ];
    // Latin-1: a `\u{1}` placeholder becomes the single byte of `é`.
    for (name, bytes) in &mut files {
        if *name == "latin1.tp" {
            *bytes = bytes
                .iter()
                .map(|&b| if b == 1 { 0xe9 } else { b })
                .collect();
        }
    }
    files
        .into_iter()
        .map(|(name, bytes)| {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect()
}

fn no_panic(what: &str, run: &Run) {
    assert!(
        !run.stderr.contains("panicked") && !run.stderr.contains("overflow"),
        "{what}: {}",
        &run.stderr[..run.stderr.len().min(2000)]
    );
}

/// The report's promises: parses, `ok` agrees with the exit status and the diagnostics,
/// every diagnostic is located.
fn report(what: &str, run: &Run) -> Value {
    no_panic(what, run);
    assert!(run.code == 0 || run.code == 1, "{what}: exit {}", run.code);
    let v: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{what}: the JSON does not parse: {e}"));
    let diags = v["diagnostics"].as_array().expect("diagnostics");
    let has_error = diags.iter().any(|d| d["severity"] == "error");
    assert_eq!(v["ok"], !has_error, "{what}");
    assert_eq!(run.code, i32::from(has_error), "{what}");
    for d in diags {
        assert!(d["line"].as_u64().is_some_and(|l| l >= 1), "{what}: {d}");
        assert!(d["file"].is_string(), "{what}: {d}");
    }
    v
}

fn codes(v: &Value) -> Vec<String> {
    v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn hostile_files_never_abort_and_every_error_is_located() {
    let dir = tempfile::tempdir().unwrap();
    for path in hostile_files(dir.path()) {
        let p = path.to_str().unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        let started = std::time::Instant::now();
        let check = report(name, &planc(&["check", p, "--format", "json"]));
        let expected: &[&str] = match name {
            n if n.starts_with("parens") || n.starts_with("lists") || n.starts_with("signs") => {
                &["P0008"]
            }
            "unclosed.tp" | "blocks-20k.tp" => &["P0008"],
            "chain-error.tp" => &["P0216"],
            "nul.tp" | "controls.tp" => &["P0001"],
            "latin1.tp" | "gbk.tp" | "utf16.tp" | "garbage-1mb.tp" => &["P0103"],
            "line-1mb.tp" => &["P0204", "P0009"],
            _ => &[],
        };
        for code in expected {
            assert!(
                codes(&check).contains(&code.to_string()),
                "{name}: {:?}",
                codes(&check)
            );
        }
        if expected.is_empty() {
            assert_eq!(check["ok"], true, "{name}: {:?}", codes(&check));
        }
        let human = planc(&["check", p, "--color", "never"]);
        no_panic(name, &human);
        assert_eq!(
            human.code,
            check["ok"].as_bool().map_or(2, |ok| i32::from(!ok))
        );
        assert!(
            human.stderr.len() < 1 << 20,
            "{name}: {} bytes of diagnostics",
            human.stderr.len()
        );
        // The plan's control characters reach no terminal.
        assert!(!human.stderr.contains(['\u{1b}', '\0', '\u{7}']), "{name}");

        let fmt = planc(&["fmt", "--check", p]);
        no_panic(name, &fmt);
        assert!(
            fmt.code == 0 || fmt.code == 1,
            "{name}: fmt exit {}",
            fmt.code
        );
        if expected.contains(&"P0103") {
            assert!(
                fmt.stderr.contains("error[P0103]"),
                "{name}: {}",
                fmt.stderr
            );
        }
        // The big files take a second per command in a debug build: the other commands
        // read them the same way.
        if name.contains("mb") {
            continue;
        }
        let solve = report(name, &planc(&["solve", p, "--format", "json"]));
        assert_eq!(solve["ok"], check["ok"], "{name}");
        assert_eq!(solve["diagnostics"], solve["best"]["diagnostics"], "{name}");
        let sim = planc(&["simulate", p]);
        no_panic(name, &sim);
        assert_eq!(sim.code, human.code, "{name}: {}", sim.stderr);
        let out = dir.path().join(format!("{name}.out"));
        let emit = planc(&[
            "emit",
            p,
            "--target",
            "torchrun",
            "-o",
            out.to_str().unwrap(),
        ]);
        no_panic(name, &emit);
        assert_eq!(emit.code, human.code, "{name}: {}", emit.stderr);
        // The page is written whatever the plan, its diagnostics escaped.
        let page = dir.path().join(format!("{name}.html"));
        let html = planc(&["report", p, "-o", page.to_str().unwrap()]);
        no_panic(name, &html);
        assert_eq!(html.code, human.code, "{name}: {}", html.stderr);
        let text = std::fs::read_to_string(&page).unwrap_or_default();
        assert!(text.contains(r#"data-report="loading""#), "{name}: a page");
        // Debug build, six commands: a hostile file must not take long either.
        assert!(
            started.elapsed().as_secs() < 60,
            "{name}: {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn a_file_that_is_not_utf8_is_a_plan_error_not_misuse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.tp");
    let text = PLAN.replace("no NVLink", "no NVLink \u{1}");
    let bytes: Vec<u8> = text
        .bytes()
        .map(|b| if b == 1 { 0xe9 } else { b })
        .collect();
    std::fs::write(&path, &bytes).unwrap();
    let p = path.to_str().unwrap();

    let json = planc(&["check", p, "--format", "json"]);
    assert_eq!(json.code, 1, "{}", json.stderr);
    let v = report("check", &json);
    let d = &v["diagnostics"][0];
    assert_eq!(d["code"], "P0103");
    // `# t4-pcie-box.tp: a workstation with two T4s on PCIe 3.0 x16 (no NVLink ` is 72
    // characters: the bad byte is the 73rd.
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(1), Some(73)),
        "{d}"
    );
    assert!(d["help"].as_str().unwrap().contains("UTF-8"));

    let human = planc(&["check", p]);
    assert_eq!(human.code, 1);
    assert!(human.stderr.contains("error[P0103]"), "{}", human.stderr);
    assert!(
        human.stderr.contains(&format!("{p}:1:73")),
        "{}",
        human.stderr
    );

    // fmt refuses it, writes nothing, and says where.
    for args in [vec!["fmt", p], vec!["fmt", "--check", p]] {
        let run = planc(&args);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(run.stderr.contains(&format!("{p}:1:73")), "{}", run.stderr);
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
    let piped = std::process::Command::new(env!("CARGO_BIN_EXE_planc"))
        .arg("fmt")
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    assert_eq!(piped.status.code(), Some(1));
    assert!(piped.stdout.is_empty());
    assert!(String::from_utf8_lossy(&piped.stderr).contains("<stdin>:1:73"));

    for cmd in ["solve", "simulate"] {
        let run = planc(&[cmd, p]);
        assert_eq!(run.code, 1, "{cmd}: {}", run.stderr);
        assert!(run.stderr.contains("error[P0103]"), "{cmd}: {}", run.stderr);
    }
    let out = dir.path().join("out");
    let emit = planc(&[
        "emit",
        p,
        "--target",
        "torchrun",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(emit.code, 1, "{}", emit.stderr);
    assert!(!out.exists());

    // Misuse stays misuse.
    assert_eq!(
        planc(&["check", "no/such/plan.tp", "--format", "json"]).code,
        2
    );
    assert_eq!(planc(&["fmt", "no/such/plan.tp"]).code, 2);
}

#[test]
fn solve_json_has_ok_and_located_diagnostics_at_the_top() {
    let run = planc(&[
        "solve",
        "examples/infeasible-llama2-13b-t4.tp",
        "--format",
        "json",
    ]);
    let v = report("infeasible", &run);
    assert_eq!(run.code, 1);
    assert_eq!(v["ok"], false);
    assert_eq!(v["version"], 1);
    let d = &v["diagnostics"][0];
    assert_eq!(d["code"], "P0801");
    assert_eq!(d["file"], "examples/infeasible-llama2-13b-t4.tp");
    assert!(d["line"].as_u64().unwrap() > 1 && d["column"].as_u64().unwrap() >= 1);
    assert_eq!(v["best"]["ok"], false, "`best` is kept as it was");

    let run = planc(&["solve", "examples/llama3-70b-solve.tp", "--format", "json"]);
    let v = report("feasible", &run);
    assert_eq!(v["ok"], true);
    assert!(codes(&v).contains(&"P0502".to_string()));
}

#[test]
fn reports_and_diagnostics_stay_on_their_own_lines() {
    // Notes (P0501, P0502) and a report on the same run, read as a terminal shows them
    // (both streams into one) and as scripts read them (each alone).
    for args in [
        vec!["check", "examples/t4-pcie-box.tp"],
        vec!["check", "examples/llama3-70b-solve.tp"],
        vec!["solve", "examples/llama3-70b-solve.tp"],
        vec!["solve", "examples/t4-pcie-box.tp"],
        vec!["simulate", "examples/t4-pcie-box.tp"],
    ] {
        let merged = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "'{}' {} 2>&1",
                env!("CARGO_BIN_EXE_planc"),
                args.join(" ")
            ))
            .current_dir(root())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let merged = String::from_utf8(merged.stdout).unwrap();
        let run = planc(&args);
        for text in [
            &merged,
            &run.stdout,
            &run.stderr,
            &format!("{}{}", run.stdout, run.stderr),
        ] {
            for line in text.lines() {
                let joined = ["note[", "warning[", "error["]
                    .iter()
                    .any(|tag| line.find(tag).is_some_and(|i| i > 0));
                assert!(
                    !joined,
                    "{args:?}: a diagnostic runs on from a line: {line:?}"
                );
            }
        }
        assert!(run.stdout.ends_with('\n'), "{args:?}");
        assert!(merged.contains("note["), "{args:?}: {merged}");
    }
}

#[test]
fn the_svg_title_is_the_path_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("t.svg");
    let run = planc(&[
        "simulate",
        "./examples/t4-pcie-box.tp",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.contains(">./examples/t4-pcie-box.tp: "),
        "{}",
        &picture[..500]
    );
    assert!(!picture.contains(root().to_str().unwrap()));
}
