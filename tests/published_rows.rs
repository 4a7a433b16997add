//! The accuracy bench's published rows (benches/published/) stay usable as the language and
//! the cost model change: every plan checks, every figure turns into a step, the original
//! visible rows stay within the 4 % the project promises, and the list of constants still
//! names what is in the code.

#[allow(dead_code)]
#[path = "../benches/published/rows.rs"]
mod rows;

use rows::*;

#[test]
fn every_published_row_checks_and_gives_a_step() {
    let cases = data_cases();
    assert!(cases.len() >= 20, "{} rows", cases.len());
    for case in &cases {
        // A run that ran may be predicted not to fit (P0401, the false OOM); that is
        // the bench's finding, not a broken plan. Any other error is.
        let c = planc_compiler::check::check_source("row.tp", &case.text);
        let errors: Vec<_> = c
            .diagnostics
            .iter()
            .filter(|d| d.is_error() && d.code != "P0401")
            .map(|d| format!("{} {}", d.code, d.message))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", case.name);
        let step = measured_step(case.measured, &c);
        assert!(step.is_finite() && step > 0.0, "{}: {step}", case.name);
    }
}

#[test]
fn every_row_says_where_it_comes_from_and_what_the_source_left_out() {
    for case in data_cases() {
        assert!(case.source.len() > 20, "{}: no citation", case.name);
        assert!(!case.family.is_empty());
    }
    // The files that hold plans written for the bench mark what their source leaves out.
    for (_, file, text) in FILES {
        if text.contains("plan = '''") {
            assert!(text.contains("not stated in source"), "{file}");
        }
    }
}

#[test]
fn figures_turn_into_the_step_the_source_implies() {
    // BLOOM's logged step is taken as it is; MPT 7B on 8 H100s: 48 x 2048 tokens at 85144
    // tokens/s is 1.1546 s; Narayanan et al.'s 1T at 163 TFLOP/s on 3072 GPUs, eq. (3):
    // 96·3072·2048·128·25600²·(1 + 2048/153600 + 51200/(16·128·25600)) / (3072·163e12).
    let cases = data_cases();
    let step = |name: &str| {
        let case = cases.iter().find(|c| c.name == name).expect(name);
        let c = planc_compiler::check::check_source("row.tp", &case.text);
        measured_step(case.measured, &c)
    };
    assert_eq!(step("BLOOM 176B, 384 A100"), 104.70);
    assert!((step("MPT 7B, 8 H100, no AC") - 48.0 * 2048.0 / 85144.0).abs() < 1e-9);
    let (b, s, l, h, v) = (3072.0, 2048.0, 128.0, 25600.0_f64, 51200.0);
    let f = 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
    let want = f / (3072.0 * 163e12);
    assert!((step("GPT 1T, 3072 A100") - want).abs() < 1e-9 * want);
    assert!((want - 102.6).abs() < 0.1, "{want}");
}

#[test]
fn the_original_visible_rows_stay_within_four_percent() {
    let cases = korthikanti_cases();
    assert_eq!(cases.len(), 8);
    let mut errors = Vec::new();
    for case in &cases {
        let c = predict(case).unwrap_or_else(|why| panic!("{}: {why}", case.name));
        let e = c.estimate.as_ref().expect("estimated");
        let measured = measured_step(case.measured, &c);
        errors.push(((e.step_s - measured) / measured).abs());
    }
    let mae = errors.iter().sum::<f64>() / errors.len() as f64;
    assert!(
        mae <= 0.04,
        "step MAE {:.2} % over the 2022 rows",
        mae * 100.0
    );
}

#[test]
fn the_constants_list_names_what_is_in_the_code() {
    let root = env!("CARGO_MANIFEST_DIR");
    let list: ConstantsFile = toml::from_str(CONSTANTS).expect("constants.toml parses");
    assert!(list.constant.len() >= 20);
    for c in &list.constant {
        let text = std::fs::read_to_string(format!("{root}/{}", c.file))
            .unwrap_or_else(|e| panic!("{}: {}: {e}", c.name, c.file));
        assert!(
            text.contains(&c.needle),
            "{}: `{}` is no longer in {}: update benches/published/constants.toml",
            c.name,
            c.needle,
            c.file
        );
        assert!(
            ORIGINS.contains(&c.origin.as_str()),
            "{}: {}",
            c.name,
            c.origin
        );
    }
}

#[test]
fn assumptions_are_counted_from_marks_and_from_an_examples_list() {
    let plan = "parallel { micro_batch = 1  # not stated in source: micro-batch; assumed 1 }";
    assert_eq!(assumed(plan), 1);
    let example = "# Assumptions (what the paper leaves out, stated here):\n\
                   # - one layer per chunk: the paper's\n\
                   #   first chunk holds only the embedding;\n\
                   # - micro-batches of one sequence;\n\
                   cluster c { nodes = 1 }\n\
                   # - not a bullet of the block\n";
    assert_eq!(assumed(example), 2);
    let llama = data_cases()
        .into_iter()
        .find(|c| c.name == "Llama 3 405B, 8K H100")
        .expect("the 8K row");
    assert!(assumed(&llama.text) >= 4, "{}", assumed(&llama.text));
}
