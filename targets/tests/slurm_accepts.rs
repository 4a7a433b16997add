//! Conformance with a real Slurm: every sbatch script emitted for the examples is accepted by
//! `sbatch --test-only` (a will-run query) against a local slurmctld with enough fake GPU
//! nodes, started by `targets/tests/conformance/start-local-slurm.sh`.
//!
//! The controller's configuration is `$PLANC_SLURM_CONF` (default
//! `/tmp/planc-slurm/slurm.conf`). Without `sbatch` on PATH, or without a controller that
//! answers `scontrol ping`, the test prints a SKIPPED line and passes; with one, a script
//! that sbatch refuses fails the test with sbatch's message. A mixed cluster's script
//! constrains each component to a node feature (its group's name); the test labels disjoint
//! runs of fake nodes with those features first, as a site's administrator would.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use planc_targets::{render_checked, write_artifacts, EmitError, Target};

const DEFAULT_CONF: &str = "/tmp/planc-slurm/slurm.conf";
const START_SCRIPT: &str = "targets/tests/conformance/start-local-slurm.sh";

/// Written to the process's stderr directly, past the test harness's capture, so that a
/// skip shows in a plain `cargo test` run.
fn skip(reason: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED slurm conformance: {reason}; run {START_SCRIPT}"
    );
}

fn slurm(cmd: &str, conf: &Path) -> Command {
    let mut c = Command::new(cmd);
    c.env("SLURM_CONF", conf);
    c
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .trim()
    .to_string()
}

/// The controller's configuration when sbatch exists and the controller answers, else why not.
fn controller() -> Result<PathBuf, String> {
    if let Err(e) = Command::new("sbatch").arg("--version").output() {
        return Err(format!("sbatch not runnable ({e})"));
    }
    let conf = std::env::var_os("PLANC_SLURM_CONF")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONF));
    if !conf.is_file() {
        return Err(format!("no Slurm configuration at {}", conf.display()));
    }
    let out = slurm("scontrol", &conf)
        .arg("ping")
        .output()
        .map_err(|e| format!("scontrol not runnable ({e})"))?;
    let answer = text(&out);
    if !out.status.success() || !answer.contains("is UP") {
        return Err(format!(
            "no controller answers scontrol ping with SLURM_CONF={} ({})",
            conf.display(),
            answer.lines().next().unwrap_or("no output")
        ));
    }
    Ok(conf)
}

/// The processor count of sbatch's "Job N to start at T using P processors on nodes ..." line.
fn processors(answer: &str) -> Option<u64> {
    let line = answer.lines().find(|l| l.contains(" to start at "))?;
    let rest = &line[line.find(" using ")? + " using ".len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// The most nodes any partition of the controller has (its `TotalNodes`).
fn controller_nodes(conf: &Path) -> Option<u64> {
    let out = slurm("scontrol", conf)
        .args(["show", "partition", "-o"])
        .output()
        .ok()?;
    text(&out)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("TotalNodes=")?.parse().ok())
        .max()
}

/// The `(nodes, feature)` of each component of a heterogeneous script: its `--constraint`
/// lines and the `--nodes` written before each.
fn constrained_components(script: &str) -> Vec<(u64, String)> {
    let mut nodes = 0;
    let mut out = Vec::new();
    for line in script.lines() {
        if let Some(n) = line.strip_prefix("#SBATCH --nodes=") {
            nodes = n.trim().parse().unwrap_or(0);
        } else if let Some(f) = line.strip_prefix("#SBATCH --constraint=") {
            out.push((nodes, f.trim().to_string()));
        }
    }
    out
}

/// A site declares the node features its scripts constrain on; the fake controller is that
/// site, so each constrained component's feature is given to its own run of nodes (from
/// `gpu0001` on, disjoint), as an administrator would label a mixed cluster's node kinds.
fn label_nodes(conf: &Path, components: &[(u64, String)]) -> Result<(), String> {
    let mut first = 1;
    for (nodes, feature) in components {
        let last = first + nodes.max(&1) - 1;
        let list = format!("gpu[{first:04}-{last:04}]");
        let out = slurm("scontrol", conf)
            .args([
                "update",
                &format!("NodeName={list}"),
                &format!("AvailableFeatures={feature}"),
                &format!("ActiveFeatures={feature}"),
            ])
            .output()
            .map_err(|e| format!("scontrol not runnable ({e})"))?;
        if !out.status.success() {
            return Err(format!(
                "scontrol update of {list} to feature {feature}: {}",
                text(&out)
            ));
        }
        first = last + 1;
    }
    Ok(())
}

/// The `#SBATCH` lines of a script, for the failure message.
fn sbatch_options(script: &Path) -> String {
    std::fs::read_to_string(script)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("#SBATCH"))
        .map(|l| format!("    {l}\n"))
        .collect()
}

#[test]
fn sbatch_test_only_accepts_every_example() {
    let conf = match controller() {
        Ok(conf) => conf,
        Err(reason) => return skip(&reason),
    };
    let capacity = controller_nodes(&conf);
    let mut accepted = 0;
    let mut rejected = Vec::new();
    for (stem, checked) in common::valid_examples() {
        // A controller started with fewer fake nodes than an example needs would refuse it
        // for its size, not for its script.
        let nodes = checked.plan.as_ref().map_or(0, |p| p.cluster.nodes());
        if let Some(have) = capacity.filter(|&have| have < nodes) {
            skip(&format!(
                "{stem} asks for {nodes} nodes and the controller has {have}; restart it with PLANC_SLURM_NODES={nodes} or more"
            ));
            continue;
        }
        let artifacts = match render_checked(Target::Slurm, &checked, None) {
            Ok(a) => a,
            Err(e @ EmitError::Unsupported { .. }) => {
                eprintln!("{stem}: not rendered for slurm: {e}");
                continue;
            }
            Err(e) => panic!("{stem}: slurm target failed to render: {e}"),
        };
        let dir = tempfile::tempdir().unwrap();
        let paths = write_artifacts(dir.path(), &artifacts, false).unwrap();
        let scripts: Vec<&PathBuf> = paths
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "sbatch"))
            .collect();
        assert_eq!(scripts.len(), 1, "{stem}: artifacts {paths:?}");
        let components =
            constrained_components(&std::fs::read_to_string(scripts[0]).unwrap_or_default());
        if let Err(e) = label_nodes(&conf, &components) {
            rejected.push(format!("{stem}: {e}"));
            continue;
        }
        let out = slurm("sbatch", &conf)
            .arg("--test-only")
            .arg(scripts[0])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let answer = text(&out);
        eprintln!("{stem}: {answer}");
        // A zero-node request (e.g. --nodes=0) is "accepted" with 0 processors: not a real run.
        if out.status.success() && processors(&answer).is_some_and(|p| p > 0) {
            accepted += 1;
        } else {
            rejected.push(format!(
                "{stem} ({}): sbatch --test-only exited {}: {answer}\n{}",
                scripts[0].file_name().unwrap().to_string_lossy(),
                out.status,
                sbatch_options(scripts[0])
            ));
        }
    }
    assert!(
        rejected.is_empty(),
        "Slurm refused {} emitted script(s):\n{}",
        rejected.len(),
        rejected.join("\n\n")
    );
    assert!(
        accepted > 0,
        "the controller is up but no example was checked"
    );
    eprintln!(
        "slurm conformance: sbatch --test-only accepted {accepted} script(s) (SLURM_CONF={})",
        conf.display()
    );
}

#[test]
fn constrained_components_pairs_each_constraint_with_its_nodes() {
    let script = "#SBATCH --nodes=2\n#SBATCH --constraint=fast\n#SBATCH hetjob\n#SBATCH --nodes=1\n#SBATCH --constraint=slow\n";
    assert_eq!(
        constrained_components(script),
        vec![(2, "fast".to_string()), (1, "slow".to_string())]
    );
    assert!(constrained_components("#SBATCH --nodes=4\n").is_empty());
}

#[test]
fn processors_parses_the_will_run_answer() {
    let a = "sbatch: Job 2 to start at 2026-11-22T22:25:39 using 512 processors on nodes gpu[0001-0008] in partition h100";
    assert_eq!(processors(a), Some(512));
    assert_eq!(
        processors("sbatch: Job 7 to start at 2026-11-22T22:25:43 using 0 processors on nodes  in partition h100"),
        Some(0)
    );
    assert_eq!(
        processors("allocation failure: Invalid partition name specified"),
        None
    );
}
