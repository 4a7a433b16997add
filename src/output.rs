//! Writing files for the user: never over an existing file unless asked, and atomically
//! (a temporary file in the same directory, then a rename), so that an interrupted run
//! leaves either the old file or the new one, never half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum WriteError {
    Exists(PathBuf),
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Exists(p) => {
                write!(f, "`{}` exists; pass --force to replace it", p.display())
            }
            WriteError::Io(p, e) => write!(f, "cannot write `{}`: {e}", p.display()),
        }
    }
}

pub fn write_new(path: &Path, bytes: &[u8], force: bool) -> Result<(), WriteError> {
    if path.exists() && !force {
        return Err(WriteError::Exists(path.to_path_buf()));
    }
    let io = |e| WriteError::Io(path.to_path_buf(), e);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.planc-{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}
