//! The one front door: every command that reads a plan, and the editor, go through
//! [`open_with`]: load, apply the command line's `--set PATH=VALUE` settings over it, check
//! (the holes filled), then simulate (the simulator re-ranks the finalists and its step time
//! replaces the closed form's), so every front end shows, prices and runs the same layout.
//! On the command line a progress bar appears when filling the plan's holes outlives half a
//! second, and a file that cannot be read is exit 2.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use planc_compiler::check::{check_file_with, Checked};
use planc_compiler::source::{FileLoader, FsLoader};
use planc_simulator::Simulation;

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

/// Texts held in memory first (an editor's open documents, a plan given as a string), the
/// file system for the rest (the imports nobody holds).
pub struct Overlay<'a> {
    pub open: &'a HashMap<PathBuf, String>,
}

impl FileLoader for Overlay<'_> {
    fn load(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        match self.open.get(path) {
            Some(text) => Ok(text.clone().into_bytes()),
            None => FsLoader.load(path),
        }
    }
}

/// A plan through the front door.
pub struct Opened {
    pub checked: Checked,
    /// The simulated step; none when the plan does not check or is too large (P0602).
    pub simulation: Option<Simulation>,
    /// How long the simulation took.
    pub simulated_in: Duration,
}

/// Loads the plan at `path` through `loader` with `sets` applied over it, checks it and
/// simulates its step. `Err` only when the root file cannot be read.
pub fn open_with(
    path: &Path,
    loader: &dyn FileLoader,
    sets: &[String],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> std::io::Result<Opened> {
    let mut checked = check_file_with(path, loader, sets, progress)?;
    let started = Instant::now();
    let simulation = planc_simulator::retime(&mut checked);
    Ok(Opened {
        checked,
        simulation,
        simulated_in: started.elapsed(),
    })
}

/// [`open_with`] from the file system, with the progress bar; the exit code after saying
/// why the file could not be read.
pub fn open(file: &Path, sets: &[String]) -> Result<Opened, ExitCode> {
    let progress = Progress::new();
    let opened = open_with(file, &FsLoader, sets, &|d, t| progress.update(d, t));
    progress.finish();
    opened.map_err(|e| {
        eprintln!("error: cannot read `{}`: {e}", file.display());
        ExitCode::from(2)
    })
}

/// The checked (and simulated) plan with `--set` settings applied over it, or the exit
/// code after saying why the file could not be read.
pub fn checked_with(file: &Path, sets: &[String]) -> Result<Checked, ExitCode> {
    open(file, sets).map(|o| o.checked)
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
