//! Runs the built `planc` binary the way a user would, from the repository root, so that
//! paths in its output are the relative paths a user types.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Everything a user sees, in one text for a snapshot.
    pub fn transcript(&self) -> String {
        format!(
            "exit: {}\n--- stderr\n{}--- stdout\n{}",
            self.code, self.stderr, self.stdout
        )
    }
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn planc(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_planc"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .output()
        .expect("the planc binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

/// The `.tp` files of a folder under the repository root, sorted, as relative paths.
pub fn plans_in(dir: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tp"))
        .map(|p| format!("{dir}/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    files.sort();
    files
}

pub fn stem(path: &str) -> String {
    Path::new(path)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}
