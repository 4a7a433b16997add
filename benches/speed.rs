//! Speed of `planc check`: prints figures, asserts nothing (the target is < 10 ms wall for
//! one plan, release build, on a 2-core machine).
//!
//!     cargo bench --bench speed
//!
//! Two figures per example: the library call (`check_file`: parse, resolve, validate, cost)
//! and the whole command as a user runs it (process start, catalog load, simulation,
//! rendering). Then the simulator alone on two large plans (target < 50 ms each).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use planc_compiler::check::{check_file, check_source};
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
    simulator_speed();
    solver_speed();
}

const GPT3_1024: &str = "
cluster c { nodes = 128, gpus_per_node = 8, gpu = A100_SXM_80GB
    inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s, latency = 5 us } }
model m { preset = \"gpt3-175b\" }
train { global_batch = 1536, precision = bf16, optimizer = adam }
parallel { tp = 8, pp = 16, dp = auto, micro_batch = 1, schedule = 1f1b, sequence_parallel = true, zero = 1, recompute = selective }
";

const GPT_1T_3072: &str = "
cluster c { nodes = 384, gpus_per_node = 8, gpu = A100_SXM_80GB
    inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s, latency = 5 us } }
model m { preset = \"gpt-1t\" }
train { global_batch = 3072, precision = bf16, optimizer = adam }
parallel { tp = 8, pp = 64, dp = auto, micro_batch = 1, schedule = 1f1b, sequence_parallel = true, zero = 1, recompute = selective }
";

fn simulator_speed() {
    println!("\nsimulator: one step, event by event (median / p99); target < 50 ms each\n");
    for (name, text) in [
        ("GPT-3 175B, 1024 A100, 192 micro-batches", GPT3_1024),
        ("GPT 1T, 3072 A100, 512 micro-batches", GPT_1T_3072),
    ] {
        let checked = check_source("bench.tp", text);
        let plan = checked
            .plan
            .unwrap_or_else(|| panic!("{name}: {:?}", checked.diagnostics));
        let sim = planc_simulator::simulate(&plan).expect("no hang");
        let tasks = sim.graph.graph.node_count();
        let (p50, p99) = measure(20, || {
            std::hint::black_box(planc_simulator::simulate(&plan).expect("no hang"));
        });
        println!(
            "{name:<44} {tasks:>7} tasks  {} / {}  ({:.1} M tasks/s)",
            ms(p50),
            ms(p99),
            tasks as f64 / p50.as_secs_f64() / 1e6
        );
    }
}

const GPT_1T_3072_HOLES: &str = "
cluster c { nodes = 384, gpus_per_node = 8, gpu = A100_SXM_80GB
    inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 200 Gb/s, latency = 5 us } }
model m { preset = \"gpt-1t\" }
train { global_batch = 3072, precision = bf16, optimizer = adam }
parallel { tp = auto, pp = auto, dp = auto, cp = auto, vpp = auto, micro_batch = auto, schedule = auto, sequence_parallel = auto, zero = auto, recompute = auto }
";

const LLAMA3_405B_16384_HOLES: &str = "
cluster c { nodes = 2048, gpus_per_node = 8, gpu = H100_SXM_80GB
    inter_node { kind = infiniband, nics_per_node = 8, bandwidth = 400 Gb/s, latency = 5 us } }
model m { preset = \"llama3-405b\" }
train { global_batch = 2048, precision = bf16, optimizer = adamw }
parallel { tp = auto, pp = auto, dp = auto, cp = auto, vpp = auto, micro_batch = auto, schedule = auto, sequence_parallel = auto, zero = auto, recompute = auto }
";

fn solver_speed() {
    println!("\nsolver: the whole space of every hole (median of 5); target < 1 s each\n");
    for (name, text) in [
        ("GPT 1T on 3072 A100", GPT_1T_3072_HOLES),
        ("Llama-3 405B on 16384 H100", LLAMA3_405B_16384_HOLES),
    ] {
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..5 {
            let t = Instant::now();
            let mut checked = check_source("bench.tp", text);
            planc_simulator::retime(&mut checked);
            times.push(t.elapsed());
            last = Some(checked);
        }
        times.sort();
        let checked = last.expect("ran");
        let s = checked.solution.as_ref().expect("a search ran");
        let best =
            checked
                .plan
                .as_ref()
                .map(|p| {
                    let q = &p.parallel;
                    format!(
                    "tp={} pp={} dp={} cp={} vpp={} mb={} {} zero={} recompute={}, step {:.2} s",
                    q.tp, q.pp, q.dp, q.cp, q.vpp, q.micro_batch, q.schedule, q.zero, q.recompute,
                    checked.estimate.as_ref().map_or(0.0, |e| e.step_s)
                )
                })
                .unwrap_or_else(|| "no valid layout".into());
        println!(
            "{name:<28} space {:>8}, {:>6} tile the cluster, {:>5} valid; {} total ({:.0} layouts/s in the search)",
            s.space_size,
            s.layouts,
            s.ranked.len(),
            ms(times[times.len() / 2]),
            s.layouts as f64 / s.elapsed.as_secs_f64()
        );
        println!("{:<28} best: {best}", "");
    }
}
