//! `planc lsp` in a real editor: Neovim's built-in LSP client opens a plan, shows planc's
//! diagnostics and formats the buffer through the server. Skips, saying why, where Neovim
//! is not installed (`apt-get install neovim`; `.ci/run` installs it).

use std::io::Write;
use std::process::Command;

#[test]
fn neovim_shows_diagnostics_and_formats_through_planc_lsp() {
    if Command::new("nvim").arg("--version").output().is_err() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED editor test: nvim not found (apt-get install neovim)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.tp");
    let out = dir.path().join("editor.txt");
    std::fs::write(
        &plan,
        "train{global_batch=8,precision=bf16}\nparallel { tp = 1, micro_bach = 1 }\n",
    )
    .unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/editor/nvim-lsp.lua");
    let run = Command::new("timeout")
        .args(["60", "nvim", "--headless", "--clean", "-c"])
        .arg(format!("luafile {script}"))
        .env("PLANC", env!("CARGO_BIN_EXE_planc"))
        .env("PLANC_NVIM_FILE", &plan)
        .env("PLANC_NVIM_OUT", &out)
        .output()
        .unwrap();
    let seen = std::fs::read_to_string(&out).unwrap_or_else(|e| {
        panic!(
            "nvim wrote nothing ({e}): {}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        )
    });
    assert!(run.status.success(), "{:?}\n{seen}", run.status);
    assert!(seen.contains("diagnostics received: true"), "{seen}");
    assert!(
        seen.contains("diagnostic 2:20 P0204 unknown attribute `micro_bach`"),
        "{seen}"
    );
    assert!(seen.contains("P0203"), "{seen}");
    // The server's quick fix for the misspelt attribute, applied by the editor.
    assert!(
        seen.contains("quick fix: Replace with `micro_batch`"),
        "{seen}"
    );
    assert!(
        seen.contains("buffer parallel { tp = 1, micro_batch = 1 }"),
        "{seen}"
    );
    assert!(
        seen.contains("buffer train { global_batch = 8, precision = bf16 }"),
        "{seen}"
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!stderr.contains("quit with exit code"), "{stderr}");
}
