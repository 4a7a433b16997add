//! Whatever a user (or an editor mid-keystroke) hands to `check`, planc answers with
//! diagnostics, never a panic. Three generators reach different depths: raw text stresses
//! the lexer, token soup the parser's recovery, and mutated real plans the resolver,
//! validation and the cost model. Hostile shapes (deep nesting, long chains, huge files,
//! NUL bytes, bytes that are not UTF-8) must not exhaust the stack either: they run on a
//! thread with the 2 MiB stack of the LSP's and rayon's threads, and every error they give
//! points at a place in the file.

use planc_compiler::check::{check_bytes, check_source, Checked};
use planc_lang::Severity;
use proptest::prelude::*;

const PLAN: &str = include_str!("../../examples/gpt3-175b.tp");

const TOKENS: &[&str] = &[
    "cluster",
    "model",
    "train",
    "parallel",
    "job",
    "search",
    "gpu",
    "group",
    "import",
    "inter_node",
    "intra_node",
    "env",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    "=",
    ",",
    ";",
    "\n",
    "+",
    "-",
    "*",
    "/",
    ".",
    "auto",
    "true",
    "false",
    "\"x\"",
    "\"",
    "0",
    "1",
    "8",
    "-3",
    "1e400",
    "0.5",
    "1_000",
    "80 GiB",
    "200 Gb/s",
    "5 us",
    "10 %",
    "nodes",
    "gpus_per_node",
    "gpu",
    "A100_SXM_80GB",
    "T4",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "vocab",
    "seq_len",
    "experts",
    "top_k",
    "preset",
    "\"llama3-70b\"",
    "global_batch",
    "precision",
    "bf16",
    "fp16",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "micro_batch",
    "schedule",
    "1f1b",
    "interleaved",
    "zero",
    "recompute",
    "full",
    "offload",
    "optimizer",
    "model.hidden",
    "#",
    "é",
    "\t",
];

fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..80).prop_map(|t| t.join(" "))
}

/// The example with one numeric literal replaced: zeros, huge values, fractions and
/// negative numbers flow into the cost model.
fn mutated_plan() -> impl Strategy<Value = String> {
    let numbers: Vec<(usize, usize)> = {
        let bytes = PLAN.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()) {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'_') {
                    i += 1;
                }
                out.push((start, i));
            } else {
                i += 1;
            }
        }
        out
    };
    let replacements = prop::sample::select(vec![
        "0",
        "1",
        "2",
        "3",
        "7",
        "1000000",
        "1e30",
        "0.5",
        "-8",
        "4294967296",
        "auto",
        "[1, 2]",
    ]);
    (prop::sample::select(numbers), replacements)
        .prop_map(|((s, e), r)| format!("{}{}{}", &PLAN[..s], r, &PLAN[e..]))
}

fn has_null(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::Array(a) => a.iter().any(has_null),
        serde_json::Value::Object(o) => o.values().any(has_null),
        _ => false,
    }
}

#[test]
fn the_mutation_generator_reaches_the_cost_model() {
    // Guards the property above against vacuity: the unmutated plan is costed.
    let checked = check_source("fuzz.tp", PLAN);
    assert!(checked.estimate.is_some());
    assert!(!has_null(&serde_json::to_value(checked.report()).unwrap()));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn raw_text_never_panics(text in "\\PC{0,200}") {
        let _ = check_source("fuzz.tp", &text);
        let _ = planc_lang::format::format(&text);
    }

    #[test]
    fn token_soup_never_panics(text in token_soup()) {
        let checked = check_source("fuzz.tp", &text);
        // Whatever it is, it is either a costed plan or explained by diagnostics.
        prop_assert!(checked.ok() || !checked.diagnostics.is_empty());
        // The formatter either refuses (syntax errors) or keeps the meaning, and is stable;
        // `FormatError::Changed` would be a formatter bug.
        match planc_lang::format::format(&text) {
            Ok(once) => prop_assert_eq!(planc_lang::format::format(&once).ok(), Some(once)),
            Err(planc_lang::format::FormatError::Syntax(_)) => {}
            Err(e) => prop_assert!(false, "{text:?}: {e:?}"),
        }
    }

    #[test]
    fn mutated_plans_never_panic(text in mutated_plan()) {
        let checked = check_source("fuzz.tp", &text);
        if let Err(e @ planc_lang::format::FormatError::Changed(_)) = planc_lang::format::format(&text) {
            prop_assert!(false, "{text:?}: {e:?}");
        }
        // serde_json writes NaN and infinity as `null`: a null anywhere in the report means
        // a formula divided by zero or overflowed.
        let report = serde_json::to_value(checked.report()).unwrap();
        prop_assert!(!has_null(&report), "{text}\n{report:#}");
        if let Some(e) = &checked.estimate {
            prop_assert!(e.step_s.is_finite() && e.step_s > 0.0, "step {}", e.step_s);
        }
    }
}

/// Runs `f` on a thread with a 2 MiB stack, the size the LSP's helper threads and rayon's
/// workers get (the main thread has 8 MiB), so that a debug build fails here first.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Checks and formats `bytes` on a small stack; returns the check, after asserting what
/// every answer must satisfy: a parseable report, `ok` false exactly when there is an
/// error, and every diagnostic located in a file the check read.
fn check_hostile(name: &str, bytes: Vec<u8>) -> Checked {
    let name = name.to_string();
    on_small_stack(move || {
        let checked = check_bytes(&name, &bytes);
        let report = serde_json::to_string(&checked.report()).unwrap();
        let report: serde_json::Value = serde_json::from_str(&report).unwrap();
        let has_error = checked
            .diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error);
        assert_eq!(report["ok"], !has_error, "{name}");
        for d in report["diagnostics"].as_array().unwrap() {
            assert!(d["line"].as_u64().is_some_and(|l| l >= 1), "{name}: {d}");
            assert!(d["column"].as_u64().is_some_and(|c| c >= 1), "{name}: {d}");
        }
        assert!(
            report["diagnostics"].as_array().unwrap().len() <= 400,
            "{name}"
        );
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e @ planc_lang::format::FormatError::Changed(_)) =
            planc_lang::format::format(&text)
        {
            panic!("{name}: {e:?}");
        }
        checked
    })
}

fn codes(c: &Checked) -> Vec<&'static str> {
    c.diagnostics.iter().map(|d| d.code).collect()
}

/// The example plan with `micro_batch`'s value replaced.
fn with_value(value: &str) -> Vec<u8> {
    PLAN.replace("micro_batch = 1", &format!("micro_batch = {value}"))
        .into_bytes()
}

#[test]
fn deep_nesting_is_located_p0008_for_every_kind_of_bracket() {
    for n in [20_000, 100_000] {
        let shapes = [
            format!("{}1{}", "(".repeat(n), ")".repeat(n)),
            format!("{}1{}", "[".repeat(n), "]".repeat(n)),
            format!("{}1", "-".repeat(n)),
            format!("{}1{}", "-(".repeat(n), ")".repeat(n)),
            format!("[1, {}2{}]", "[(".repeat(n), ")]".repeat(n)),
            "(".repeat(n),
            "[".repeat(n),
        ];
        for (i, value) in shapes.iter().enumerate() {
            let checked = check_hostile(&format!("nest{i}.tp"), with_value(value));
            assert!(!checked.ok());
            assert_eq!(
                codes(&checked).iter().filter(|c| **c == "P0008").count(),
                1,
                "{i}: {:?}",
                codes(&checked)
            );
        }
        let blocks = format!("{PLAN}\njob {}{}\n", "{ env ".repeat(n), "}".repeat(n));
        let checked = check_hostile("blocks.tp", blocks.into_bytes());
        assert!(codes(&checked).contains(&"P0008"), "{:?}", codes(&checked));
    }
}

#[test]
fn long_chains_are_evaluated_without_recursion() {
    // The chain sums to 1 (1 + 1 + ... micro-batches would not divide the batch): the
    // arithmetic itself must come out right.
    let value = format!("1{}", " + 0".repeat(100_000));
    let checked = check_hostile("chain.tp", with_value(&value));
    assert!(checked.ok(), "{:?}", codes(&checked));
    assert_eq!(checked.plan.unwrap().parallel.micro_batch, 1);
    let value = format!("64{}", " * 2 / 2".repeat(20_000));
    let checked = check_hostile("product.tp", with_value(&format!("{value} / 64")));
    assert_eq!(checked.plan.unwrap().parallel.micro_batch, 1);
    // An error at the end of a long chain is reported, once.
    let value = format!("1{} + 1 GiB", " + 1".repeat(20_000));
    let checked = check_hostile("bad-chain.tp", with_value(&value));
    assert_eq!(codes(&checked), vec!["P0216"]);
}

#[test]
fn a_long_chain_of_references_is_located_p0008() {
    let n = 20_000;
    let mut env = String::from("job {\n    env {\n");
    for i in 0..n {
        env += &format!("        R{i} = R{}\n", i + 1);
    }
    env += &format!("        R{n} = \"end\"\n    }}\n}}\n");
    let checked = check_hostile("refs.tp", format!("{PLAN}\n{env}").into_bytes());
    assert_eq!(codes(&checked), vec!["P0008"]);
}

#[test]
fn huge_files_and_long_lines_are_checked() {
    // 10 MB: one comment; 2 MB: garbage, a block of 60,000 entries (10 MB of either takes
    // a second or more in a debug build, too long for a test).
    let comment = format!("{PLAN}# {}\n", "x".repeat(10 << 20));
    assert!(check_hostile("comment.tp", comment.into_bytes()).ok());
    let mut env = String::from("job {\n    env {\n");
    let mut i = 0;
    while env.len() < 2 << 20 {
        env += &format!("        VAR_{i} = \"value {i}\"\n");
        i += 1;
    }
    env += "    }\n}\n";
    let checked = check_hostile("env.tp", format!("{PLAN}\n{env}").into_bytes());
    assert!(checked.ok(), "{:?}", codes(&checked));
    let garbage: Vec<u8> = (0..2u32 << 20)
        .map(|i| (i.wrapping_mul(7919) >> 3) as u8)
        .collect();
    let checked = check_hostile("garbage.tp", garbage);
    assert_eq!(codes(&checked)[0], "P0103");
    assert!(codes(&checked).contains(&"P0009"));

    // One line of a megabyte: the plan without comments, entries separated by `;`, and
    // many errors on the line.
    let one_line: String = PLAN
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            if l.ends_with('{') {
                format!("{l} ")
            } else {
                format!("{l}; ")
            }
        })
        .collect();
    let extra = "dp = 8; ".repeat(140_000);
    let text = one_line.replacen("parallel { ", &format!("parallel {{ {extra}"), 1);
    assert!(text.len() > 1 << 20 && !text.contains('\n'));
    let checked = check_hostile("line.tp", text.into_bytes());
    assert!(codes(&checked).contains(&"P0205"));
    assert!(codes(&checked).contains(&"P0009"));
}

#[test]
fn nul_bytes_bom_crlf_and_encodings() {
    // A byte order mark and CRLF line ends change nothing.
    let bom = [b"\xef\xbb\xbf".as_slice(), PLAN.as_bytes()].concat();
    assert!(check_hostile("bom.tp", bom).ok());
    let crlf = PLAN.replace('\n', "\r\n").into_bytes();
    let checked = check_hostile("crlf.tp", crlf);
    assert!(checked.ok());
    let d = &checked.diagnostics[0];
    let plain = check_source("plain.tp", PLAN);
    assert_eq!(
        checked.sources.line_cols(
            d.primary.as_ref().unwrap().file,
            d.primary.as_ref().unwrap().span
        ),
        plain.sources.line_cols(
            plain.diagnostics[0].primary.as_ref().unwrap().file,
            plain.diagnostics[0].primary.as_ref().unwrap().span
        ),
    );
    // NUL bytes: one error per run, named, located.
    let nul = PLAN.replace("pp = 16", "pp = 16\0\0\0\0").into_bytes();
    let checked = check_hostile("nul.tp", nul);
    assert_eq!(codes(&checked), vec!["P0001"]);
    assert!(checked.diagnostics[0].message.contains("U+0000"));
    // Latin-1 in a comment, GBK, UTF-16: P0103 at the first bad byte.
    let latin1 = PLAN
        .replacen("# ", "# caf\u{e9} ", 1)
        .replace('\u{e9}', "\u{fffd}");
    let latin1 = latin1
        .replace('\u{fffd}', "\x01")
        .into_bytes()
        .into_iter()
        .map(|b| if b == 1 { 0xe9 } else { b })
        .collect();
    let checked = check_hostile("latin1.tp", latin1);
    assert_eq!(codes(&checked), vec!["P0103"]);
    let gbk = [PLAN.as_bytes(), b"# \xc4\xe3\xba\xc3\n"].concat();
    assert_eq!(codes(&check_hostile("gbk.tp", gbk)), vec!["P0103"]);
    let utf16: Vec<u8> = [0xff, 0xfe]
        .into_iter()
        .chain(PLAN.encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    let checked = check_hostile("utf16.tp", utf16);
    assert_eq!(codes(&checked)[0], "P0103");
}

/// A hostile fragment: deep or long shapes of a random size, control characters, bytes that
/// are not UTF-8.
fn hostile_fragment() -> impl Strategy<Value = Vec<u8>> {
    let n = 1usize..3000;
    prop_oneof![
        n.clone()
            .prop_map(|n| format!("{}1{}", "(".repeat(n), ")".repeat(n)).into_bytes()),
        n.clone().prop_map(|n| "[".repeat(n).into_bytes()),
        n.clone()
            .prop_map(|n| format!("{}1", "- ".repeat(n)).into_bytes()),
        n.clone()
            .prop_map(|n| format!("1{}", " + x * 2".repeat(n)).into_bytes()),
        n.clone().prop_map(|n| "a { ".repeat(n).into_bytes()),
        n.prop_map(|n| "}".repeat(n).into_bytes()),
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::vec(
            prop::sample::select(vec![
                0u8, 7, 8, 11, 12, 13, 27, 127, 0x80, 0xc3, 0xe9, 0xef, 0xbb, 0xbf, 0xff, 0xfe
            ]),
            0..64
        ),
    ]
}

/// The example with two or three numbers replaced by values near planc's limits, where
/// products of counts would overflow 64 bits if nothing bounded them.
fn large_numbers_plan() -> impl Strategy<Value = String> {
    let plan = include_str!("../../examples/llama3-70b-solve.tp");
    let numbers: Vec<(usize, usize)> = plan
        .match_indices(|c: char| c.is_ascii_digit())
        .map(|(i, _)| i)
        .filter(|&i| i == 0 || !plan.as_bytes()[i - 1].is_ascii_alphanumeric())
        .map(|i| {
            let end = plan[i..]
                .find(|c: char| !c.is_ascii_digit() && c != '_')
                .map_or(plan.len(), |e| i + e);
            (i, end)
        })
        .collect();
    let value = prop::sample::select(vec![
        "16777216",
        "16777215",
        "1099511627776",
        "4294967296",
        "65536",
        "0",
    ]);
    prop::collection::vec((prop::sample::select(numbers), value), 2..4).prop_map(
        move |mut edits| {
            edits.sort_by_key(|((s, _), _)| std::cmp::Reverse(*s));
            edits.dedup_by_key(|((s, _), _)| *s);
            let mut text = plan.to_string();
            for ((s, e), v) in edits {
                text.replace_range(s..e, v);
            }
            text
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Large counts in pairs and triples: no overflow, no hang (the solver refuses a space
    /// too large, P0802), every diagnostic located.
    #[test]
    fn large_numbers_never_overflow(text in large_numbers_plan()) {
        check_hostile("large.tp", text.into_bytes());
    }

    /// A hostile fragment spliced into a real plan anywhere: no panic, no overflow, every
    /// diagnostic located.
    #[test]
    fn hostile_fragments_in_a_plan_never_abort(fragment in hostile_fragment(), at in 0usize..PLAN.len()) {
        let at = (0..=at).rev().find(|&i| PLAN.is_char_boundary(i)).unwrap();
        let bytes = [&PLAN.as_bytes()[..at], &fragment, &PLAN.as_bytes()[at..]].concat();
        check_hostile("fragment.tp", bytes);
    }
}
