//! `planc._planc`: the Rust half of the Python module. Each function hands a plan (a path,
//! or text known by that path) to crate `planc`'s [`planc::api`] with the interpreter's lock
//! released, and returns its JSON as text for `planc/__init__.py` to load, so a dict from
//! Python is byte for byte what the command line prints. `_cli` runs the command line in this
//! process for the console script. What the command line calls misuse (exit status 2)
//! raises: an unreadable plan `OSError` (its subclass by errno), a file that exists
//! `FileExistsError`, a bad argument `ValueError`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use planc::api::{self, ApiError, Input};
use pyo3::exceptions::{PyFileExistsError, PyOSError, PyValueError};
use pyo3::prelude::*;

fn to_py(e: ApiError) -> PyErr {
    match e {
        // OSError(errno, strerror, filename) constructs the subclass the errno names
        // (FileNotFoundError, PermissionError, IsADirectoryError...).
        ApiError::Io { path, error } => match error.raw_os_error() {
            Some(errno) => {
                let message = error.to_string();
                let suffix = format!(" (os error {errno})");
                let strerror = message.strip_suffix(&suffix).unwrap_or(&message).to_owned();
                PyOSError::new_err((errno, strerror, path.display().to_string()))
            }
            None => PyOSError::new_err(format!("cannot read `{}`: {error}", path.display())),
        },
        e @ ApiError::Exists(_) => PyFileExistsError::new_err(e.to_string()),
        e @ ApiError::Usage(_) => PyValueError::new_err(e.to_string()),
    }
}

fn input<'a>(path: &'a Path, text: Option<&'a str>) -> Input<'a> {
    match text {
        Some(text) => Input::Text {
            name: path.to_str().unwrap_or("<text>"),
            text,
        },
        None => Input::Path(path),
    }
}

fn text(v: impl serde::Serialize) -> String {
    serde_json::to_string(&v).expect("the results serialise")
}

/// The report contract of `planc check --format json`, as JSON text.
#[pyfunction]
#[pyo3(signature = (path, text=None, sets=Vec::new()))]
fn check(
    py: Python<'_>,
    path: PathBuf,
    text: Option<String>,
    sets: Vec<String>,
) -> PyResult<String> {
    py.detach(|| api::check(input(&path, text.as_deref()), &sets))
        .map(self::text)
        .map_err(to_py)
}

/// What `planc solve --format json` prints, as JSON text.
#[pyfunction]
#[pyo3(signature = (path, text=None, sets=Vec::new(), top=None))]
fn solve(
    py: Python<'_>,
    path: PathBuf,
    text: Option<String>,
    sets: Vec<String>,
    top: Option<usize>,
) -> PyResult<String> {
    py.detach(|| api::solve(input(&path, text.as_deref()), &sets, top))
        .map(self::text)
        .map_err(to_py)
}

/// The simulated step (and the timeline's SVG and trace when asked), as JSON text.
#[pyfunction]
#[pyo3(signature = (path, text=None, sets=Vec::new(), svg=false, trace=false))]
fn simulate(
    py: Python<'_>,
    path: PathBuf,
    text: Option<String>,
    sets: Vec<String>,
    svg: bool,
    trace: bool,
) -> PyResult<String> {
    py.detach(|| api::simulate(input(&path, text.as_deref()), &sets, svg, trace))
        .map(self::text)
        .map_err(to_py)
}

/// The launch artifacts for `target`, written under `out` when given, as JSON text.
#[pyfunction]
#[pyo3(signature = (path, target, text=None, sets=Vec::new(), out=None, force=false))]
fn emit(
    py: Python<'_>,
    path: PathBuf,
    target: String,
    text: Option<String>,
    sets: Vec<String>,
    out: Option<PathBuf>,
    force: bool,
) -> PyResult<String> {
    py.detach(|| {
        let plan = input(&path, text.as_deref());
        api::emit(plan, &sets, &target, out.as_deref(), force)
    })
    .map(self::text)
    .map_err(to_py)
}

/// Runs the command line `argv` (the program's name first) in this process and returns its
/// exit status.
#[pyfunction]
fn _cli(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    let code = py.detach(|| planc::main_with_args(argv));
    // ExitCode keeps its number to itself; every status planc returns is one of these.
    (0..=u8::MAX)
        .find(|&n| ExitCode::from(n) == code)
        .unwrap_or(1)
}

#[pymodule]
fn _planc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(solve, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(emit, m)?)?;
    m.add_function(wrap_pyfunction!(_cli, m)?)?;
    Ok(())
}
