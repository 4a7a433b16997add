//! `planc report` in a real browser: headless Chromium (Debian's `chromium`) loads the page
//! of a 512-micro-batch plan with no script error, a screenshot is taken of each part, and
//! the address's `#zoom=` narrows the timeline's viewBox. Without `chromium` on PATH the
//! test says SKIPPED and passes (.ci/run installs it).
//!
//! The screenshots stay in `target/report-browser/` for a person to look at.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{planc, root};

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

/// Chromium, headless, on `url`; its standard output (the DOM with --dump-dom) and error.
fn browse(chromium: &Path, args: &[&str], url: &str) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-extensions",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What reached the console, in Chromium's log (`INFO:CONSOLE:1] "message", source: ...`,
/// whatever the level: the page logs nothing when all is well), and uncaught errors.
fn console_errors(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect()
}

/// The attribute `name` of the element that has `id="id"` in a dumped DOM.
fn attribute<'a>(dom: &'a str, id: &str, name: &str) -> Option<&'a str> {
    let at = dom.find(&format!(r#"id="{id}""#))?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    let tag = &dom[start..end];
    let value = tag.split(&format!(r#" {name}=""#)).nth(1)?;
    value.split('"').next()
}

#[test]
fn the_report_opens_in_chromium_without_errors_and_zooms() {
    let Some(chromium) = chromium() else {
        eprintln!("SKIPPED: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let shots = root().join("target/report-browser");
    std::fs::create_dir_all(&shots).unwrap();
    let page = shots.join("gpt3-175b-batch4096.html");
    let run = planc(&[
        "report",
        "examples/gpt3-175b-batch4096.tp",
        "-o",
        page.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let url = format!("file://{}", page.display());

    // Loaded: the script ran to its end, no error reached window.onerror or the console.
    let (dom, log) = browse(&chromium, &["--dump-dom"], &url);
    assert!(
        dom.contains(r#"data-report="ready""#),
        "the page script did not finish:\n{log}"
    );
    assert!(
        !dom.contains("data-error="),
        "{}",
        dom.split("data-error=").nth(1).unwrap_or("")
    );
    assert!(
        console_errors(&log).is_empty(),
        "{:?}",
        console_errors(&log)
    );
    assert!(dom.contains("interactive"));
    let whole = attribute(&dom, "timeline-plot", "viewBox").expect("the plot's viewBox");
    let width = |vb: &str| -> f64 { vb.split(' ').nth(2).unwrap().parse().unwrap() };

    // Zoomed by the address: the viewBox is a quarter as wide, starting where it says.
    let (dom, log) = browse(&chromium, &["--dump-dom"], &format!("{url}#zoom=4&at=0.5"));
    assert!(dom.contains(r#"data-report="ready""#), "{log}");
    assert!(
        console_errors(&log).is_empty(),
        "{:?}",
        console_errors(&log)
    );
    let zoomed = attribute(&dom, "timeline-plot", "viewBox").expect("the zoomed viewBox");
    assert!(
        (width(whole) / width(zoomed) - 4.0).abs() < 1e-6,
        "{whole} → {zoomed}"
    );
    let left: f64 = zoomed.split(' ').next().unwrap().parse().unwrap();
    assert!((left / width(whole) - 0.5).abs() < 1e-3, "{zoomed}");
    assert_eq!(attribute(&dom, "timeline-plot", "data-zoom"), Some("4"));
    assert!(dom.contains("×4"), "the zoom level is shown");
    // Zoomed in, the passes' names show (they are hidden where too narrow to read).
    let shown = dom.matches(r#"visibility="visible""#).count();
    assert!(shown > 50, "{shown} pass names shown at ×4");

    // A screenshot of each part, alone on the page.
    for part in ["summary", "timeline", "memory", "solve", "diagnostics"] {
        let png = shots.join(format!("{part}.png"));
        let _ = std::fs::remove_file(&png);
        let shot = format!("--screenshot={}", png.display());
        let (_, log) = browse(
            &chromium,
            &[&shot, "--window-size=1500,1100"],
            &format!("{url}#only={part}"),
        );
        let bytes = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(bytes > 10_000, "{part}: a {bytes}-byte screenshot\n{log}");
    }
    let png = shots.join("timeline-zoom16.png");
    let shot = format!("--screenshot={}", png.display());
    browse(
        &chromium,
        &[&shot, "--window-size=1500,1100"],
        &format!("{url}#only=timeline&zoom=16&at=0.35"),
    );
    assert!(std::fs::metadata(&png).is_ok_and(|m| m.len() > 10_000));
    eprintln!("screenshots in {}", shots.display());
}
