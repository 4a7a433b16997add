//! Reading and checking a plan file, the same way for every command: a progress bar when
//! filling the plan's holes outlives half a second, and exit 2 when the file cannot be read.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use planc_compiler::check::{check_file_with_progress, Checked};
use planc_compiler::source::FsLoader;

/// The checked plan, or the exit code after saying why the file could not be read.
pub fn checked(file: &Path) -> Result<Checked, ExitCode> {
    let progress = Progress::new();
    let checked = check_file_with_progress(file, &FsLoader, &|d, t| progress.update(d, t));
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
