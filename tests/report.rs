//! `planc report`: the page holds every part, is self-contained, escapes the plan's text,
//! and is never written over a file without --force. (tests/report_browser.rs opens it.)

mod common;

use common::planc;

fn report(plan: &str, out: &std::path::Path) -> (common::Run, String) {
    let run = planc(&["report", plan, "-o", out.to_str().unwrap(), "--force"]);
    let html = std::fs::read_to_string(out).unwrap_or_default();
    (run, html)
}

#[test]
fn the_page_of_a_512_micro_batch_plan_has_every_part() {
    let dir = tempfile::tempdir().unwrap();
    let (run, html) = report(
        "examples/gpt3-175b-batch4096.tp",
        &dir.path().join("r.html"),
    );
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(run.stdout.contains("wrote"), "{}", run.stdout);
    for id in ["summary", "timeline", "memory", "solve", "diagnostics"] {
        assert!(
            html.contains(&format!(r#"<section id="{id}">"#)),
            "section {id}"
        );
    }
    // The summary numbers.
    for label in [
        "step time",
        "throughput",
        "MFU",
        "exposed communication",
        "bubble",
        "peak memory",
    ] {
        assert!(html.contains(label), "{label}");
    }
    assert!(html.contains("512 micro-batches"));
    // The timeline, its steady state folded into one band that counts what it holds.
    assert!(html.contains(r#"id="timeline-plot""#));
    assert_eq!(html.matches(r#"<g class="fold""#).count(), 1);
    let count: u32 = html
        .split(r#"data-micro-batches=""#)
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .expect("the band's count");
    assert!((400..512).contains(&count), "{count}");
    // Memory: a bar segment per part per stage, and 16 capacity lines.
    assert!(html.contains(r#"class="memory""#));
    assert_eq!(html.matches("<title>stage 7: ").count(), 5);
    assert_eq!(
        html.matches(r#"stroke-dasharray="5 3"><title>A100_SXM_80GB"#)
            .count(),
        16
    );
    // No holes: said, not plotted.
    assert!(html.contains("has no holes"));
    assert!(!html.contains(r#"class="pareto""#));
    // The diagnostics, with the source line.
    assert!(html.contains("note[P0501]"));
    assert!(html.contains("dp = <span"), "the source line, coloured");
}

#[test]
fn a_plan_with_holes_shows_the_candidates_and_the_chosen_one() {
    let dir = tempfile::tempdir().unwrap();
    let (run, html) = report("examples/llama3-70b-solve.tp", &dir.path().join("s.html"));
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(html.contains(r#"class="pareto""#));
    assert!(html.contains(r#"class="front""#));
    assert_eq!(
        html.matches(r#"class="chosen""#).count(),
        2,
        "ringed and its row"
    );
    assert!(html.matches(r#"class="candidate""#).count() > 100);
    assert!(html.contains("searched "));
    assert!(html.contains("<td>1</td>"));
    // No price: the candidates' cost is in GPU-hours, and so is the step's.
    assert!(
        html.contains("<th>GPU-h&#x2f;Mtok</th>"),
        "the escaped heading"
    );
    assert!(html.contains("GPU-hours a step"));
}

#[test]
fn a_priced_plan_shows_its_cost_and_the_cost_to_train() {
    let dir = tempfile::tempdir().unwrap();
    let (run, html) = report("examples/llama3-70b-64xh100.tp", &dir.path().join("p.html"));
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(html.contains("cost a step"), "the cost card");
    assert!(html.contains("at 2.49 USD&#x2f;h a GPU"));
    assert!(
        html.contains("(train.tokens):"),
        "the training run's GPU-hours"
    );
    assert!(
        html.contains(" GPU-hours, ") && html.contains(" USD</div>"),
        "money to train"
    );
}

#[test]
fn the_page_is_self_contained() {
    let dir = tempfile::tempdir().unwrap();
    let (_, html) = report(
        "examples/gpt3-175b-batch4096.tp",
        &dir.path().join("r.html"),
    );
    // Only SVG's namespace names a URL; nothing is loaded from anywhere.
    let urls = html.matches("http://").count() + html.matches("https://").count();
    let namespaces = html.matches("http://www.w3.org/2000/svg").count();
    assert_eq!(urls, namespaces, "a URL other than the SVG namespace");
    for tag in [
        "<link",
        " src=",
        "@import",
        "url(http",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(!html.contains(tag), "{tag}");
    }
    assert!(html.contains("<style>") && html.contains("<script>"));
}

#[test]
fn the_plan_text_is_escaped_and_a_broken_plan_still_gets_its_page() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("bad <b>.tp");
    std::fs::write(
        &plan,
        "# </pre><script>alert(1)</script>\n\
         cluster c { nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }\n\
         model m { preset = \"llama3-8b\" }\n\
         train { global_batch = 64, precision = bf16, optimizer = adamw }\n\
         parallel { tp = 3, pp = 1, dp = 1, micro_batch = 1 } # <img onerror=x>\n",
    )
    .unwrap();
    let out = dir.path().join("bad.html");
    let (run, html) = report(plan.to_str().unwrap(), &out);
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(run.stderr.contains("the page shows them"), "{}", run.stderr);
    assert!(html.contains("error["), "the error is on the page");
    assert!(
        html.contains("&lt;img onerror=x&gt;"),
        "the source line, escaped"
    );
    assert!(html.contains("bad &lt;b&gt;.tp"), "the file name, escaped");
    assert!(!html.contains("<img") && !html.contains("<b>"));
    assert!(!html.contains("alert(1)</script>"));
    assert!(html.contains("Nothing to simulate until the plan checks"));
}

#[test]
fn an_existing_page_is_kept_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.html");
    std::fs::write(&out, "mine").unwrap();
    let run = planc(&[
        "report",
        "examples/gpt3-175b.tp",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--force"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine");
}

#[test]
fn simulate_svg_folds_the_same_steady_state() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("t.svg");
    let run = planc(&[
        "simulate",
        "examples/gpt3-175b-batch4096.tp",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg"));
    assert_eq!(picture.matches(r#"<g class="fold""#).count(), 1);
    assert!(picture.contains("folded into the band"));
    // The uniform stripe of before drew every one of the ~33 000 tasks.
    assert!(picture.matches("<rect").count() < 10_000);
}

#[test]
fn a_plan_without_a_valid_layout_says_so_on_its_page() {
    let dir = tempfile::tempdir().unwrap();
    let (run, html) = report(
        "examples/infeasible-llama2-13b-t4.tp",
        &dir.path().join("i.html"),
    );
    assert_eq!(run.code, 1, "{}", run.transcript());
    assert!(html.contains("No valid layout"));
    assert!(html.contains("error[P0801]"), "the rules that conflict");
    assert!(!html.contains(r#"class="pareto""#));
}
