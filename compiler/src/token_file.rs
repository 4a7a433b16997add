//! The `train.data` lint: the token file `planc run` will read, looked at from `check`.
//!
//! The format is the run contract's (`docs/spec/run.md`, "Data"): a flat array of
//! little-endian token ids without a header, `uint16` when `model.vocab` ≤ 65536, else
//! `uint32`, read relative to the plan file. A file that is here but cannot be that (a size
//! that is not a whole number of tokens, fewer tokens than one sample, an id at or above the
//! vocabulary, which is what a `uint32` file read as `uint16` or a tokenizer of another
//! vocabulary gives) is a warning (P0105) at the attribute's value: the plan is still a
//! plan, but `planc run` would refuse it. A file that is not here is only a note (P0106):
//! it may live on the cluster the plan is for.
//!
//! `check` runs on every keystroke in an editor, so the ids are read from the file's first
//! [`SCAN_BYTES`] only; `planc run` checks the whole file when it starts.

use std::io::Read;
use std::path::{Path, PathBuf};

use planc_lang::codes;
use planc_lang::Diagnostic;

use crate::plan::PlanSpec;
use crate::source::SourceMap;

/// How much of the file `check` reads for out-of-range ids.
pub const SCAN_BYTES: usize = 16 << 20;

/// What is wrong with a token file, if anything (`None`: it looks right).
#[derive(Debug, PartialEq)]
pub enum Finding {
    Absent,
    /// The message says what is wrong and what the format is.
    Malformed(String),
}

/// Bytes per token id for a vocabulary of `vocab` tokens.
pub fn token_width(vocab: u64) -> u64 {
    if vocab <= 1 << 16 {
        2
    } else {
        4
    }
}

/// Looks at the token file at `path` for a model of `vocab` tokens and `seq_len` positions.
pub fn inspect(path: &Path, vocab: u64, seq_len: u64) -> Option<Finding> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(Finding::Absent),
        Err(e) => return Some(Finding::Malformed(format!("cannot be read: {e}"))),
    };
    if meta.is_dir() {
        return Some(Finding::Malformed("is a folder, not a token file".into()));
    }
    let bytes = meta.len();
    let width = token_width(vocab);
    let kind = if width == 2 { "uint16" } else { "uint32" };
    let bad = |what: String| Some(Finding::Malformed(what));
    if bytes == 0 {
        return bad("is empty".into());
    }
    if bytes % width != 0 {
        return bad(format!(
            "has {bytes} bytes, not a whole number of {kind} tokens (a vocabulary of {vocab} \
             is stored as {kind}, {width} bytes a token)"
        ));
    }
    if bytes / width < seq_len + 1 {
        return bad(format!(
            "holds {} tokens, fewer than one sample needs (seq_len + 1 = {})",
            bytes / width,
            seq_len + 1
        ));
    }
    let mut head = Vec::new();
    let read =
        std::fs::File::open(path).and_then(|f| f.take(SCAN_BYTES as u64).read_to_end(&mut head));
    if let Err(e) = read {
        return bad(format!("cannot be read: {e}"));
    }
    let ids: Box<dyn Iterator<Item = u64>> = if width == 2 {
        Box::new(
            head.chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]) as u64),
        )
    } else {
        Box::new(
            head.chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64),
        )
    };
    let scanned = head.len() as u64 / width;
    let (i, id) = ids.enumerate().find(|&(_, t)| t >= vocab)?;
    bad(format!(
        "holds token id {id} at token {i} (byte {}), not below the vocabulary of {vocab}{}: \
         a file of another tokenizer, or of {} ids read as {kind}",
        i as u64 * width,
        if scanned < bytes / width {
            format!(" (of the first {scanned} tokens read)")
        } else {
            String::new()
        },
        if width == 2 { "uint32" } else { "uint16" }
    ))
}

/// The diagnostic for the plan's `train.data`, if it needs one. Paths are relative to the
/// root plan file, as `planc run` reads them.
pub fn lint(spec: &PlanSpec, sources: &SourceMap) -> Option<Diagnostic> {
    let data = spec.train.run.data.as_ref()?;
    let base = sources
        .files
        .first()
        .and_then(|f| f.path.parent())
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let path: PathBuf = base.join(data);
    let finding = inspect(&path, spec.model.vocab, spec.model.seq_len)?;
    let (file, span) = spec.origins.of("train", "data")?;
    Some(match finding {
        Finding::Absent => Diagnostic::new(
            codes::P0106,
            format!("`{}` is not here", path.display()),
        )
        .at(file, span, "no such file on this machine")
        .help(
            "`planc run` reads it relative to the plan file where it runs; make sure it is \
             there (or drop `data` to train on the synthetic corpus)",
        ),
        Finding::Malformed(what) => Diagnostic::new(
            codes::P0105,
            format!("the token file `{}` {what}", path.display()),
        )
        .at(file, span, "`planc run` would refuse this file")
        .help(format!(
            "write a flat array of little-endian {} token ids without a header (the layout \
             nanoGPT's prepare.py writes), every id below model.vocab = {}",
            if token_width(spec.model.vocab) == 2 {
                "uint16"
            } else {
                "uint32"
            },
            spec.model.vocab
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn u16s(ids: &[u16]) -> Vec<u8> {
        ids.iter().flat_map(|t| t.to_le_bytes()).collect()
    }

    #[test]
    fn a_token_file_is_judged_by_size_width_and_ids() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let good = write(d, "good.bin", &u16s(&[1, 2, 3, 4, 5, 6, 7, 8, 9]));
        assert_eq!(inspect(&good, 50304, 8), None);
        assert_eq!(
            inspect(&d.join("none.bin"), 50304, 8),
            Some(Finding::Absent)
        );
        let odd = write(d, "odd.bin", &[0u8; 19]);
        let Some(Finding::Malformed(m)) = inspect(&odd, 50304, 8) else {
            panic!()
        };
        assert!(m.contains("19 bytes") && m.contains("uint16"), "{m}");
        // 18 bytes are whole uint16 tokens but not whole uint32 ones (vocab > 65536).
        let Some(Finding::Malformed(m)) = inspect(&write(d, "e.bin", &[0u8; 18]), 128256, 2) else {
            panic!()
        };
        assert!(m.contains("uint32"), "{m}");
        // Too short for one sample.
        let Some(Finding::Malformed(m)) = inspect(&good, 50304, 1024) else {
            panic!()
        };
        assert!(m.contains("seq_len + 1 = 1025"), "{m}");
        // An id at the vocabulary: named with its place.
        let over = write(d, "over.bin", &u16s(&[1, 2, 3, 4096, 5, 6, 7, 8, 9]));
        let Some(Finding::Malformed(m)) = inspect(&over, 4096, 8) else {
            panic!()
        };
        assert!(m.contains("id 4096 at token 3 (byte 6)"), "{m}");
        assert_eq!(inspect(&over, 4097, 8), None);
        assert!(matches!(
            inspect(&write(d, "empty.bin", &[]), 4096, 8),
            Some(Finding::Malformed(_))
        ));
        assert!(matches!(inspect(d, 4096, 8), Some(Finding::Malformed(_))));
    }

    #[test]
    fn check_warns_at_the_value_of_train_data() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "tokens.bin", &u16s(&[7; 40]));
        let plan = |data: &str| {
            format!(
                "cluster c {{ nodes = 1, gpus_per_node = 1, gpu = H100_SXM_80GB }}\n\
                 model m {{ layers = 2, hidden = 64, heads = 4, vocab = 4, seq_len = 16 }}\n\
                 train {{ global_batch = 4, precision = bf16, data = \"{data}\" }}\n\
                 parallel {{ micro_batch = 1, tp = 1, pp = 1, dp = 1 }}\n"
            )
        };
        let at = |data: &str| {
            let text = plan(data);
            let c = crate::check::check_source(d.join("p.tp").to_str().unwrap(), &text);
            let found: Vec<_> = c
                .diagnostics
                .iter()
                .filter(|x| x.code == "P0105" || x.code == "P0106")
                .map(|x| {
                    let span = x.primary.as_ref().unwrap().span;
                    let value = text[span.start as usize..span.end as usize].to_string();
                    (x.code, value, x.severity)
                })
                .collect::<Vec<_>>();
            (found, c.ok())
        };
        use planc_lang::Severity;
        // Token 7 is not below vocab 4: a warning, and the plan is still ok.
        assert_eq!(
            at("tokens.bin"),
            (
                vec![("P0105", "\"tokens.bin\"".to_string(), Severity::Warning)],
                true
            )
        );
        assert_eq!(
            at("elsewhere.bin"),
            (
                vec![("P0106", "\"elsewhere.bin\"".to_string(), Severity::Note)],
                true
            )
        );
    }
}
