//! The `planc` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use planc_compiler::check::check_file;
use planc_compiler::source::FsLoader;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 || args[1] != "check" {
        eprintln!("usage: planc check FILE");
        return ExitCode::from(2);
    }
    let path = PathBuf::from(&args[2]);
    let checked = match check_file(&path, &FsLoader) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    for d in &checked.diagnostics {
        let place = d
            .primary
            .as_ref()
            .map(|l| {
                let ((line, col), _) = checked.sources.line_cols(l.file, l.span);
                format!("{}:{line}:{col}: ", checked.sources.get(l.file).display)
            })
            .unwrap_or_default();
        eprintln!("{place}{}[{}]: {}", d.severity.as_str(), d.code, d.message);
        if let Some(h) = &d.help {
            eprintln!("  help: {h}");
        }
    }
    match &checked.spec {
        Some(spec) => {
            println!(
                "plan ok: {} GPUs of {}, model {} ({} layers, hidden {})",
                spec.cluster.world_size(),
                spec.cluster.groups[0].gpu.name,
                spec.model.name,
                spec.model.layers,
                spec.model.hidden
            );
            println!("(cost model in progress)");
            ExitCode::SUCCESS
        }
        None => ExitCode::from(1),
    }
}
