//! Every target's artifacts for every example whose plan checks, as insta snapshots.

mod common;

use planc_targets::{render_checked, Target};

#[test]
fn every_target_for_every_example() {
    let examples = common::valid_examples();
    assert!(
        examples.len() >= 4,
        "expected the valid examples, got {}",
        examples.len()
    );
    for (stem, checked) in &examples {
        for &target in Target::ALL {
            let rendered = match render_checked(target, checked, None) {
                Ok(artifacts) => artifacts
                    .iter()
                    .map(|a| {
                        format!(
                            "===== {}{} =====\n{}",
                            a.path.display(),
                            if a.executable { " (executable)" } else { "" },
                            a.contents
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                Err(e) => format!("===== refused ({}) =====\n{e}\n", e.code().id),
            };
            insta::assert_snapshot!(format!("{stem}__{target}"), rendered);
        }
    }
}
