//! Overrides: a block written again in a file that imports the plan, and `--set PATH=VALUE`,
//! change single attributes; anything else written twice is still P0202.

use std::path::Path;

use planc_compiler::check::{check_file, check_file_with, Checked};
use planc_compiler::plan::Hole;
use planc_compiler::source::MemoryLoader;

const BASE: &str = "cluster c {
    nodes = 2
    gpus_per_node = 8
    gpu = H100_SXM_80GB
    inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s }
}
model m { layers = 8, hidden = 1024, heads = 16, vocab = 32000, seq_len = 2048, ffn_hidden = 4 * hidden }
train { global_batch = 64, precision = bf16 }
parallel { tp = 8, pp = 1, micro_batch = 2, zero = 1 }
";

fn loader(files: &[(&str, &str)]) -> MemoryLoader {
    let mut l = MemoryLoader::default();
    for (p, t) in files {
        l.insert(Path::new(p), t.as_bytes().to_vec());
    }
    l
}

fn check(files: &[(&str, &str)], root: &str) -> Checked {
    check_file(Path::new(root), &loader(files)).unwrap()
}

fn with_sets(files: &[(&str, &str)], root: &str, sets: &[&str]) -> Checked {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    check_file_with(Path::new(root), &loader(files), &sets, &|_, _| {}).unwrap()
}

fn codes(c: &Checked) -> Vec<&'static str> {
    c.diagnostics.iter().map(|d| d.code).collect()
}

/// The file and text a diagnostic's primary label points at.
fn at(c: &Checked, code: &str) -> (String, String) {
    let d = c
        .diagnostics
        .iter()
        .find(|d| d.code == code)
        .unwrap_or_else(|| panic!("no {code}: {:?}", c.diagnostics));
    let l = d.primary.as_ref().unwrap();
    let f = c.sources.get(l.file);
    (f.display.clone(), f.text[l.span.range()].to_string())
}

#[test]
fn an_importing_file_overrides_single_attributes() {
    let c = check(
        &[
            ("base.tp", BASE),
            (
                "what.tp",
                "import \"base.tp\"\nparallel { tp = 4 }\nmodel { hidden = 2048 }\n",
            ),
        ],
        "what.tp",
    );
    assert!(c.ok(), "{:?}", c.diagnostics);
    let plan = c.plan.as_ref().unwrap();
    assert_eq!(plan.parallel.tp, 4);
    // The rest of the block stays as imported.
    assert_eq!(plan.parallel.micro_batch, 2);
    assert_eq!(plan.parallel.zero, 1);
    assert_eq!(plan.parallel.dp, 4);
    // The imported file's references read the overridden value.
    assert_eq!(plan.model.hidden, 2048);
    assert_eq!(plan.model.ffn_hidden, 8192);
    assert_eq!(plan.model.layers, 8);
    // Where the checked value came from.
    let spec = c.spec.as_ref().unwrap();
    let (f, _) = spec.origins.of("parallel", "tp").unwrap();
    assert_eq!(c.sources.get(f).display, "what.tp");
    let (f, _) = spec.origins.of("parallel", "micro_batch").unwrap();
    assert_eq!(c.sources.get(f).display, "base.tp");
}

#[test]
fn nested_blocks_merge_and_new_blocks_are_added() {
    let c = check(
        &[
            ("base.tp", BASE),
            (
                "what.tp",
                "import \"base.tp\"\ncluster { inter_node { bandwidth = 100 Gb/s } }\nsearch { top = 3 }\n",
            ),
        ],
        "what.tp",
    );
    assert!(c.ok(), "{:?}", c.diagnostics);
    let spec = c.spec.as_ref().unwrap();
    let net = spec.cluster.inter_node.as_ref().unwrap();
    assert_eq!(net.link.bandwidth, 100e9 / 8.0);
    assert_eq!(net.nics_per_node, 8);
    assert_eq!(spec.search.top, 3);
}

#[test]
fn an_override_through_a_chain_of_imports_and_the_last_one_wins() {
    let c = check(
        &[
            ("base.tp", BASE),
            ("mid.tp", "import \"base.tp\"\nparallel { tp = 4 }\n"),
            ("top.tp", "import \"mid.tp\"\nparallel { tp = 2 }\n"),
        ],
        "top.tp",
    );
    assert!(c.ok(), "{:?}", c.diagnostics);
    assert_eq!(c.plan.as_ref().unwrap().parallel.tp, 2);
}

#[test]
fn errors_in_an_override_point_into_the_overriding_file() {
    let c = check(
        &[
            ("base.tp", BASE),
            (
                "what.tp",
                "import \"base.tp\"\nparallel { tp = \"four\" }\n",
            ),
        ],
        "what.tp",
    );
    assert!(!c.ok());
    let (file, text) = at(&c, "P0207");
    assert_eq!((file.as_str(), text.as_str()), ("what.tp", "\"four\""));
}

#[test]
fn the_same_block_twice_in_one_file_or_in_sibling_imports_is_still_p0202() {
    let twice = format!("{BASE}parallel {{ tp = 4 }}\n");
    let c = check(&[("a.tp", &twice)], "a.tp");
    assert_eq!(codes(&c), ["P0202"], "{:?}", c.diagnostics);
    let siblings = check(
        &[
            ("base.tp", BASE),
            ("x.tp", "parallel { tp = 2 }\n"),
            ("root.tp", "import \"base.tp\"\nimport \"x.tp\"\n"),
        ],
        "root.tp",
    );
    assert_eq!(codes(&siblings), ["P0202"], "{:?}", siblings.diagnostics);
    let help = siblings.diagnostics[0].help.clone().unwrap();
    assert!(help.contains("neither imports the other"), "{help}");
    // Inside an override, an attribute written twice is P0205 as anywhere.
    let c = check(
        &[
            ("base.tp", BASE),
            (
                "what.tp",
                "import \"base.tp\"\nparallel { tp = 4, tp = 2 }\n",
            ),
        ],
        "what.tp",
    );
    assert_eq!(codes(&c), ["P0205"], "{:?}", c.diagnostics);
}

#[test]
fn an_override_keeps_the_blocks_name() {
    let c = check(
        &[
            ("base.tp", BASE),
            ("same.tp", "import \"base.tp\"\nmodel m { layers = 4 }\n"),
            (
                "other.tp",
                "import \"base.tp\"\nmodel llama { layers = 4 }\n",
            ),
        ],
        "same.tp",
    );
    assert!(c.ok(), "{:?}", c.diagnostics);
    let c = check(
        &[
            ("base.tp", BASE),
            (
                "other.tp",
                "import \"base.tp\"\nmodel llama { layers = 4 }\n",
            ),
        ],
        "other.tp",
    );
    assert_eq!(codes(&c), ["P0202"]);
    let help = c.diagnostics[0].help.clone().unwrap();
    assert!(help.contains("repeats the block's name `m`"), "{help}");
}

#[test]
fn settings_override_the_plan_and_its_imports() {
    let files = [
        ("base.tp", BASE),
        ("what.tp", "import \"base.tp\"\nparallel { tp = 4 }\n"),
    ];
    let c = with_sets(
        &files,
        "what.tp",
        &[
            "parallel.tp=2",
            "cluster.inter_node.bandwidth=200Gb/s",
            "parallel.pp=[1, 2]",
            "parallel.tp=1",
            "job.name=nightly",
        ],
    );
    assert!(c.ok(), "{:?}", c.diagnostics);
    let spec = c.spec.as_ref().unwrap();
    // The later setting of the same attribute wins.
    assert_eq!(spec.parallel.tp, Hole::Fixed(1));
    assert_eq!(spec.parallel.pp, Hole::Candidates(vec![1, 2]));
    assert_eq!(
        spec.cluster.inter_node.as_ref().unwrap().link.bandwidth,
        25e9
    );
    assert_eq!(spec.job.as_ref().unwrap().name.as_deref(), Some("nightly"));
    let (f, span) = spec.origins.of("parallel", "tp").unwrap();
    assert_eq!(c.sources.get(f).display, "--set");
    assert_eq!(&c.sources.get(f).text[span.range()], "1");
}

#[test]
fn a_bad_setting_is_an_error_at_the_flag() {
    let files = [("base.tp", BASE)];
    let c = with_sets(&files, "base.tp", &["parallel.tp=four"]);
    let (file, text) = at(&c, "P0207");
    assert_eq!((file.as_str(), text.as_str()), ("--set", "four"));
    let c = with_sets(&files, "base.tp", &["parallel.micro_bach=4"]);
    let (file, text) = at(&c, "P0204");
    assert_eq!((file.as_str(), text.as_str()), ("--set", "micro_bach"));
    let help = c.diagnostics[0].help.clone().unwrap();
    assert!(help.contains("micro_batch"), "{help}");
    // A missing block is still reported at the plan, not at a setting.
    let c = with_sets(
        &[("p.tp", "model m { preset = \"gpt2-124m\" }\n")],
        "p.tp",
        &["parallel.tp=1"],
    );
    let d = c.diagnostics.iter().find(|d| d.code == "P0203").unwrap();
    assert_eq!(
        c.sources.get(d.primary.as_ref().unwrap().file).display,
        "p.tp"
    );
}

/// `--set` takes a bare word as text exactly where the resolver reads a string.
#[test]
fn text_attributes_are_the_ones_the_resolver_reads_as_strings() {
    use planc_compiler::schema::{lookup, TEXT_ATTRS, TOP_LEVEL};
    for kind in TOP_LEVEL.iter().filter(|k| **k != "gpu") {
        for attr in lookup(kind).unwrap().attrs {
            // Written as a bare word in the plan itself: a string attribute asks for quotes.
            let block = format!("{kind} {{ {attr} = someword }}\n");
            let text = BASE
                .lines()
                .filter(|l| !l.starts_with(kind) || *kind == "cluster")
                .collect::<Vec<_>>()
                .join("\n");
            let text = if *kind == "cluster" {
                format!("{BASE}\n").replace(
                    "gpu = H100_SXM_80GB",
                    &format!("gpu = H100_SXM_80GB\n{attr} = someword"),
                )
            } else {
                format!("{text}\n{block}")
            };
            let c = check(&[("t.tp", &text)], "t.tp");
            let wants_quotes = c
                .diagnostics
                .iter()
                .any(|d| d.message.contains("a string in double quotes"));
            assert_eq!(
                wants_quotes,
                TEXT_ATTRS.contains(&(kind, attr)),
                "{kind}.{attr}: {:?}",
                c.diagnostics
            );
        }
    }
}

#[test]
fn a_gpu_presets_block_is_overridden_and_set_like_any_other() {
    let mine = "import \"base.tp\"\ngpu mine { preset = H100_SXM_80GB, intra_node { bandwidth = 200 GB/s } }\ncluster { gpu = mine }\n";
    let files = [
        ("base.tp", BASE),
        ("mine.tp", mine),
        (
            "slower.tp",
            "import \"mine.tp\"\ngpu mine { bf16 = 700 TFLOPS }\n",
        ),
    ];
    let gpu = |c: &Checked| c.plan.as_ref().unwrap().cluster.groups[0].gpu.clone();
    // An override of the block keeps its preset and its link, and adds a peak.
    let c = check(&files, "slower.tp");
    assert!(c.ok(), "{:?}", c.diagnostics);
    let g = gpu(&c);
    assert_eq!(g.peak(planc_compiler::plan::Precision::Bf16), Some(700e12));
    assert_eq!(g.intra_node.bandwidth, 200e9);
    assert_eq!(g.compute_capability, Some(9.0));
    // `--set` swaps the preset; what the block writes stays.
    let c = with_sets(&files, "mine.tp", &["gpu.mine.preset=H200_SXM_141GB"]);
    assert!(c.ok(), "{:?}", c.diagnostics);
    let g = gpu(&c);
    assert!((g.memory / 1024f64.powi(3) - 140.4).abs() < 1e-9);
    assert_eq!(g.intra_node.bandwidth, 200e9);
    // A misspelt preset on the command line is an error at the flag.
    let c = with_sets(&files, "mine.tp", &["gpu.mine.preset=H200_SXM"]);
    assert_eq!(
        at(&c, "P0214"),
        ("--set".to_string(), "H200_SXM".to_string())
    );
}
