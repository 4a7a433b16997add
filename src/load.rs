//! Reading and checking a plan file, the same way for every command: the command line's
//! `--set PATH=VALUE` settings applied over it, a progress bar when filling the plan's holes
//! outlives half a second, and exit 2 when the file cannot be read.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use planc_compiler::check::{check_file_with, Checked};
use planc_compiler::source::FsLoader;

/// What every command that reads a plan takes besides the file: settings over it.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Sets {
    /// Change one attribute without editing the file (repeatable; the last of a path wins).
    /// PATH is block.attribute (`parallel.tp`, `cluster.inter_node.bandwidth`,
    /// `cluster.group.NAME.nodes`); VALUE is written as in the plan (`4`, `400Gb/s`,
    /// `[2, 4]`, `auto`, `H200_SXM_141GB`). Errors point at the flag.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
}

/// The checked plan with `--set` settings applied over it, or the exit code after saying
/// why the file could not be read.
pub fn checked_with(file: &Path, sets: &[String]) -> Result<Checked, ExitCode> {
    let progress = Progress::new();
    let checked = check_file_with(file, &FsLoader, sets, &|d, t| progress.update(d, t));
    progress.finish();
    checked.map_err(|e| {
        eprintln!("error: cannot read `{}`: {e}", file.display());
        ExitCode::from(2)
    })
}

/// A progress bar that appears only when the search outlives half a second.
struct Progress {
    started: Instant,
    bar: Mutex<Option<ProgressBar>>,
}

impl Progress {
    fn new() -> Self {
        Progress {
            started: Instant::now(),
            bar: Mutex::new(None),
        }
    }

    fn update(&self, done: usize, total: usize) {
        if self.started.elapsed() < Duration::from_millis(500) {
            return;
        }
        let mut bar = self.bar.lock().expect("progress lock");
        let b = bar.get_or_insert_with(|| {
            let b = ProgressBar::new(total as u64);
            b.set_style(
                ProgressStyle::with_template(
                    "costing layouts {bar:40} {pos}/{len} ({per_sec}, {eta} left)",
                )
                .expect("a valid template"),
            );
            b
        });
        b.set_position(done as u64);
    }

    fn finish(&self) {
        if let Some(b) = self.bar.lock().expect("progress lock").take() {
            b.finish_and_clear();
        }
    }
}
