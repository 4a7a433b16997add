//! Whatever a user (or an editor mid-keystroke) hands to `check`, planc answers with
//! diagnostics, never a panic. Three generators reach different depths: raw text stresses
//! the lexer, token soup the parser's recovery, and mutated real plans the resolver,
//! validation and the cost model.

use planc_compiler::check::check_source;
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
