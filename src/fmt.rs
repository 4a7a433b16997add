//! `planc fmt`: files rewritten in the one layout, in place and atomically, or checked.
//!
//! A file that is not UTF-8 is refused like a file with syntax errors (the located P0103,
//! exit 1, nothing written): rewriting it would silently replace the bytes planc cannot read.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use codespan_reporting::term::termcolor::{ColorChoice, StandardStream};
use planc_compiler::source::FsLoader;
use planc_lang::format::{format, FormatError};

use crate::output;
use crate::render;

pub fn run(files: &[PathBuf], check: bool, color: ColorChoice) -> ExitCode {
    if files.is_empty() || files.iter().any(|f| f == Path::new("-")) {
        if files.len() > 1 {
            eprintln!("error: `-` (standard input) cannot be mixed with files");
            return ExitCode::from(2);
        }
        return stdin(check, color);
    }
    let mut worst = 0u8;
    for file in files {
        let code = one_file(file, check, color);
        worst = worst.max(code);
    }
    ExitCode::from(worst)
}

/// Formats standard input to standard output (what editors call).
fn stdin(check: bool, color: ColorChoice) -> ExitCode {
    let mut bytes = Vec::new();
    let limit = planc_compiler::source::MAX_FILE_BYTES;
    if let Err(e) = std::io::stdin().take(limit + 1).read_to_end(&mut bytes) {
        eprintln!("error: cannot read standard input: {e}");
        return ExitCode::from(2);
    }
    if bytes.len() as u64 > limit {
        eprintln!(
            "error: standard input is larger than the {} MiB planc reads",
            limit >> 20
        );
        return ExitCode::from(2);
    }
    let text = match utf8("<stdin>", bytes, color) {
        Ok(t) => t,
        Err(code) => return ExitCode::from(code),
    };
    match formatted("<stdin>", &text, color) {
        Err(code) => ExitCode::from(code),
        Ok(out) if check => ExitCode::from(u8::from(out != text)),
        Ok(out) => {
            let _ = std::io::stdout().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
    }
}

fn one_file(file: &Path, check: bool, color: ColorChoice) -> u8 {
    let bytes = match planc_compiler::source::FileLoader::load(&FsLoader, file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: cannot read `{}`: {e}", file.display());
            return 2;
        }
    };
    let name = file.display().to_string();
    let text = match utf8(&name, bytes, color) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let out = match formatted(&name, &text, color) {
        Ok(out) => out,
        Err(code) => return code,
    };
    if out == text {
        return 0;
    }
    if check {
        println!("would reformat {}", file.display());
        return 1;
    }
    // The user asked for this file to be rewritten; the formatter has checked that only
    // layout changes, and the write is atomic.
    match output::write_new(file, out.as_bytes(), true) {
        Ok(()) => {
            println!("formatted {}", file.display());
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

/// The text of a file that is UTF-8; otherwise the located error, and exit 1.
fn utf8(name: &str, bytes: Vec<u8>, color: ColorChoice) -> Result<String, u8> {
    let decoded = planc_lang::encoding::decode(bytes, planc_lang::FileId(0));
    let Some(error) = decoded.error else {
        return Ok(decoded.text);
    };
    let mut err = StandardStream::stderr(color);
    let files = [(name.to_string(), decoded.text)];
    let _ = render::diagnostics_in(&mut err, &files, &[error]);
    eprintln!("{name}: not formatted, it is not UTF-8");
    Err(1)
}

fn formatted(name: &str, text: &str, color: ColorChoice) -> Result<String, u8> {
    match format(text) {
        Ok(out) => Ok(out),
        Err(FormatError::Syntax(diagnostics)) => {
            let mut err = StandardStream::stderr(color);
            let files = [(name.to_string(), text.to_string())];
            let _ = render::diagnostics_in(&mut err, &files, &diagnostics);
            eprintln!("{name}: not formatted, it has syntax errors");
            Err(1)
        }
        Err(FormatError::Changed(why)) => {
            eprintln!(
                "error: {name}: not formatted: {why}. This is a bug in planc; the file is \
                 unchanged. Please report it with the file."
            );
            Err(1)
        }
    }
}
