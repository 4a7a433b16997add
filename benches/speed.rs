//! Speed of `planc check`: prints figures, asserts nothing (the target is < 10 ms wall for
//! one plan, release build, on a 2-core machine).
//!
//!     cargo bench --bench speed
//!
//! Two figures per example: the library call (`check_file`: parse, resolve, validate, cost)
//! and the whole command as a user runs it (process start, catalog load, rendering).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use planc_compiler::check::check_file;
use planc_compiler::source::FsLoader;

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn measure(runs: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    f(); // warm: the catalog is parsed once per process
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut examples: Vec<_> = std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tp"))
        .collect();
    examples.sort();
    let bin = env!("CARGO_BIN_EXE_planc");
    println!("planc check speed (median / p99); target: whole command < 10 ms\n");
    println!(
        "{:<32} {:>22} {:>24}",
        "example", "library check_file", "`planc check` process"
    );
    let mut worst = Duration::ZERO;
    for path in &examples {
        let (lib50, lib99) = measure(200, || {
            let c = check_file(path, &FsLoader).expect("readable");
            std::hint::black_box(c);
        });
        let (cmd50, cmd99) = measure(50, || {
            let out = Command::new(bin)
                .arg("check")
                .arg(path)
                .output()
                .expect("planc runs");
            std::hint::black_box(out);
        });
        worst = worst.max(cmd99);
        println!(
            "{:<32} {:>10} / {:<10} {:>11} / {:<10}",
            path.file_name().unwrap().to_string_lossy(),
            ms(lib50),
            ms(lib99),
            ms(cmd50),
            ms(cmd99)
        );
    }
    println!(
        "\nworst p99 of the whole command: {} ({} the 10 ms target)",
        ms(worst),
        if worst < Duration::from_millis(10) {
            "meets"
        } else {
            "MISSES"
        }
    );
}
