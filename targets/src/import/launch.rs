//! Launchers around the training program (`torchrun`, `python -m torch.distributed.run`,
//! `deepspeed`, `mpirun`, `srun`, `#SBATCH`): what they say about the cluster (nodes, GPUs
//! per node, world size, a hostfile, exported variables, the Slurm job), and the program
//! with its own arguments. Each launcher's options are a table; an option planc does not
//! place is listed with why.

use super::shell::Word;

/// What a launcher option means for the plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Means {
    Nodes,
    GpusPerNode,
    /// Tasks per node: GPUs per node when no other option says so.
    TasksPerNode,
    World,
    Hostfile,
    /// `-x NAME[=value]`: a variable exported to every rank.
    Env,
    Partition,
    Time,
    JobName,
    /// `--gres=gpu:8`, `--gres=gpu:h100:8`.
    Gres,
    /// `--map-by ppr:8:node`.
    MapBy,
    /// `-H a:8,b:8`.
    Hosts,
    /// Site and rendezvous settings planc's launch scripts write themselves.
    Site,
}

struct Opt {
    names: &'static [&'static str],
    value: bool,
    means: Means,
}

const fn opt(names: &'static [&'static str], value: bool, means: Means) -> Opt {
    Opt {
        names,
        value,
        means,
    }
}

/// torchrun and `python -m torch.distributed.run|launch` (torch/distributed/run.py).
const TORCHRUN: &[Opt] = &[
    opt(
        &["--nproc_per_node", "--nproc-per-node"],
        true,
        Means::GpusPerNode,
    ),
    opt(&["--nnodes"], true, Means::Nodes),
    opt(
        &[
            "--node_rank",
            "--node-rank",
            "--master_addr",
            "--master-addr",
            "--master_port",
            "--master-port",
            "--rdzv_backend",
            "--rdzv-backend",
            "--rdzv_endpoint",
            "--rdzv-endpoint",
            "--rdzv_id",
            "--rdzv-id",
            "--rdzv_conf",
            "--rdzv-conf",
            "--max_restarts",
            "--max-restarts",
            "--monitor_interval",
            "--monitor-interval",
            "--start_method",
            "--start-method",
            "--role",
            "--log_dir",
            "--log-dir",
            "-r",
            "--redirects",
            "-t",
            "--tee",
            "--local_addr",
            "--local-addr",
            "--logs_specs",
            "--logs-specs",
            "--local_ranks_filter",
            "--local-ranks-filter",
        ],
        true,
        Means::Site,
    ),
    opt(
        &[
            "--standalone",
            "--use_env",
            "--use-env",
            "--no_python",
            "--no-python",
            "--run_path",
            "--run-path",
        ],
        false,
        Means::Site,
    ),
];

/// DeepSpeed's launcher (deepspeed/launcher/runner.py).
const DEEPSPEED: &[Opt] = &[
    opt(&["--num_gpus", "--num-gpus"], true, Means::GpusPerNode),
    opt(&["--num_nodes", "--num-nodes"], true, Means::Nodes),
    opt(&["--hostfile", "-H"], true, Means::Hostfile),
    opt(
        &[
            "--include",
            "-i",
            "--exclude",
            "-e",
            "--master_addr",
            "--master_port",
            "--launcher",
            "--launcher_args",
            "--min_elastic_nodes",
            "--max_elastic_nodes",
            "--ssh_port",
            "--bind_core_list",
            "--save_pid",
            "--venv_script",
            "--comment",
            "--autotuning",
            "--node_rank",
        ],
        true,
        Means::Site,
    ),
    opt(
        &[
            "--force_multi",
            "--elastic_training",
            "--no_local_rank",
            "--no_python",
            "--bind_cores_to_rank",
            "--enable_each_rank_log",
            "--no_ssh",
            "--no_ssh_check",
        ],
        false,
        Means::Site,
    ),
];

/// Open MPI's and MPICH's mpirun.
const MPIRUN: &[Opt] = &[
    opt(&["-np", "-n", "--np", "-c"], true, Means::World),
    opt(
        &[
            "--hostfile",
            "-hostfile",
            "--machinefile",
            "-machinefile",
            "-f",
        ],
        true,
        Means::Hostfile,
    ),
    opt(&["-H", "--host", "-host"], true, Means::Hosts),
    opt(
        &["-N", "-npernode", "--npernode", "-ppn", "--ppn"],
        true,
        Means::TasksPerNode,
    ),
    opt(&["--map-by", "-map-by"], true, Means::MapBy),
    opt(&["-x"], true, Means::Env),
    opt(
        &[
            "--bind-to",
            "-bind-to",
            "--rank-by",
            "-wdir",
            "--wdir",
            "--prefix",
            "-genv",
            "--output-filename",
            "--display-map",
        ],
        true,
        Means::Site,
    ),
    opt(
        &[
            "--allow-run-as-root",
            "--oversubscribe",
            "--report-bindings",
            "--tag-output",
            "-tag-output",
            "--bind-to-core",
            "-bind-to-core",
            "--noprefix",
            "-v",
            "--verbose",
        ],
        false,
        Means::Site,
    ),
];

/// Slurm's srun, and `#SBATCH` directives (sbatch takes the same options).
const SRUN: &[Opt] = &[
    opt(&["-N", "--nodes"], true, Means::Nodes),
    opt(&["-n", "--ntasks"], true, Means::World),
    opt(&["--ntasks-per-node"], true, Means::TasksPerNode),
    opt(
        &["--gpus-per-node", "--gpus-per-task"],
        true,
        Means::GpusPerNode,
    ),
    opt(&["--gres"], true, Means::Gres),
    opt(&["-p", "--partition"], true, Means::Partition),
    opt(&["-t", "--time"], true, Means::Time),
    opt(&["-J", "--job-name"], true, Means::JobName),
    opt(
        &[
            "-c",
            "--cpus-per-task",
            "--mpi",
            "--container-image",
            "--container-mounts",
            "--container-workdir",
            "--container-name",
            "--export",
            "--mem",
            "--mem-per-gpu",
            "--mem-per-cpu",
            "-o",
            "--output",
            "-e",
            "--error",
            "-A",
            "--account",
            "-q",
            "--qos",
            "--gpus",
            "-G",
            "--cpu-bind",
            "--gpu-bind",
            "--kill-on-bad-exit",
            "-K",
            "--distribution",
            "-m",
            "--constraint",
            "-C",
            "--signal",
            "--reservation",
            "--dependency",
            "-d",
            "--mail-type",
            "--mail-user",
            "--chdir",
            "-D",
            "--nodelist",
            "-w",
            "--exclude",
            "-x",
            "--requeue",
            "--wait",
        ],
        true,
        Means::Site,
    ),
    opt(
        &[
            "-l",
            "--label",
            "-u",
            "--unbuffered",
            "--exclusive",
            "--overlap",
            "--no-kill",
        ],
        false,
        Means::Site,
    ),
];

/// One thing a launcher said.
#[derive(Clone, Debug, PartialEq)]
pub struct Said {
    pub launcher: &'static str,
    pub key: String,
    pub value: Option<String>,
    pub means: Means,
    pub line: usize,
}

/// What the training program is.
#[derive(Clone, Debug, PartialEq)]
pub enum Program {
    /// A script path (`pretrain_gpt.py`, `train.py`, `./run_train.sh`).
    Script(String),
    /// `python -m NAME` / `torchrun -m NAME`.
    Module(String),
    /// A command-line tool and its subcommand (`llamafactory-cli train`).
    Cli(String),
}

impl Program {
    pub fn name(&self) -> &str {
        match self {
            Program::Script(s) | Program::Module(s) | Program::Cli(s) => s,
        }
    }

    /// The file name of a script, the module or tool otherwise.
    pub fn base(&self) -> &str {
        let n = self.name();
        n.rsplit('/').next().unwrap_or(n)
    }
}

/// A command taken apart: its launchers' options and the program with its arguments.
#[derive(Clone, Debug)]
pub struct Launch {
    pub line: usize,
    pub launchers: Vec<&'static str>,
    pub said: Vec<Said>,
    pub program: Option<Program>,
    pub args: Vec<Word>,
}

/// Prefix commands that run the next word.
const PASS_THROUGH: &[&str] = &[
    "exec", "nohup", "time", "sudo", "env", "command", "stdbuf", "numactl", "taskset",
];

/// Shell builtins and utilities: a command that starts with one runs no training program.
const NOT_PROGRAMS: &[&str] = &[
    "[[",
    "[",
    "test",
    "echo",
    "printf",
    "cd",
    "set",
    "source",
    ".",
    "mkdir",
    "cat",
    "exit",
    "return",
    "shift",
    "trap",
    "wait",
    "sleep",
    "true",
    "false",
    ":",
    "rm",
    "cp",
    "mv",
    "ln",
    "ls",
    "tee",
    "head",
    "tail",
    "grep",
    "sed",
    "awk",
    "git",
    "pip",
    "pip3",
    "conda",
    "module",
    "ulimit",
    "unset",
    "eval",
    "read",
    "nvidia-smi",
    "hostname",
    "date",
    "touch",
    "chmod",
    "scontrol",
    "sbatch",
    "squeue",
    "wget",
    "curl",
    "tar",
    "ssh",
    "scp",
    "ssh-copy-id",
    "ssh-keygen",
    "let",
    "shopt",
    "pushd",
    "popd",
    "umask",
    "ibstat",
    "ibping",
    "ldd",
    "which",
    "watch",
    "py-spy",
    "nsys",
    "strings",
    "find",
    "sort",
    "ps",
    "kill",
    "htop",
    "ping",
    "nc",
    "sysctl",
    "systemctl",
    "docker",
    "make",
    "apt-get",
    "apt",
    "export",
    "alias",
    "wc",
    "cut",
    "xargs",
    "dirname",
    "basename",
    "realpath",
    "readlink",
    "seq",
    "expr",
    "getopts",
    "ulimit",
];

/// Splits a command into its launchers and the program.
pub fn launch(words: &[Word], line: usize) -> Launch {
    let mut l = Launch {
        line,
        launchers: Vec::new(),
        said: Vec::new(),
        program: None,
        args: Vec::new(),
    };
    let mut i = 0;
    while i < words.len() {
        let w = &words[i].text;
        let base = w.rsplit('/').next().unwrap_or(w);
        match base {
            b if PASS_THROUGH.contains(&b) => {
                i += 1;
                // Their own options (`stdbuf -o0`, `numactl --interleave=all`), and `env`'s
                // assignments.
                while i < words.len()
                    && (words[i].text.starts_with('-')
                        || words[i].text.contains('=') && !words[i].text.starts_with("--"))
                {
                    i += 1;
                }
            }
            "torchrun" => {
                l.launchers.push("torchrun");
                i = options(words, i + 1, TORCHRUN, "torchrun", &mut l);
                i = module_flag(words, i, &mut l);
            }
            "deepspeed" => {
                l.launchers.push("deepspeed");
                i = options(words, i + 1, DEEPSPEED, "deepspeed", &mut l);
                i = module_flag(words, i, &mut l);
            }
            "mpirun" | "mpiexec" | "orterun" => {
                l.launchers.push("mpirun");
                i = options(words, i + 1, MPIRUN, "mpirun", &mut l);
            }
            "srun" => {
                l.launchers.push("srun");
                i = options(words, i + 1, SRUN, "srun", &mut l);
            }
            "accelerate" if words.get(i + 1).is_some_and(|w| w.text == "launch") => {
                l.launchers.push("accelerate");
                i += 2;
                while i < words.len() && words[i].text.starts_with('-') {
                    let (k, v) = split_eq(&words[i].text);
                    let takes =
                        v.is_none() && words.get(i + 1).is_some_and(|n| !n.text.starts_with('-'));
                    let value = v.or_else(|| takes.then(|| words[i + 1].text.clone()));
                    let means = match k.as_str() {
                        "--num_processes" | "--num-processes" => Means::World,
                        "--num_machines" | "--num-machines" => Means::Nodes,
                        _ => Means::Site,
                    };
                    l.said.push(Said {
                        launcher: "accelerate",
                        key: k,
                        value,
                        means,
                        line,
                    });
                    i += if takes { 2 } else { 1 };
                }
            }
            b if is_python(b) => {
                i += 1;
                while i < words.len() && words[i].text.starts_with('-') && words[i].text != "-m" {
                    let takes = matches!(words[i].text.as_str(), "-W" | "-X");
                    i += if takes { 2 } else { 1 };
                }
                if words.get(i).is_some_and(|w| w.text == "-m") {
                    let module = words.get(i + 1).map(|w| w.text.clone()).unwrap_or_default();
                    i += 2;
                    if matches!(
                        module.as_str(),
                        "torch.distributed.run" | "torch.distributed.launch"
                    ) {
                        l.launchers.push("torchrun");
                        i = options(words, i, TORCHRUN, "torchrun", &mut l);
                        i = module_flag(words, i, &mut l);
                    } else {
                        l.program = Some(Program::Module(module));
                        l.args = words[i..].to_vec();
                        return l;
                    }
                }
            }
            "bash" | "sh" if words.get(i + 1).is_some_and(|w| !w.text.starts_with('-')) => {
                i += 1;
            }
            b if NOT_PROGRAMS.contains(&b) => return l,
            _ => {
                if l.program.is_none() {
                    l.program = Some(if base.ends_with("-cli") || base == "lmf" {
                        Program::Cli(base.to_string())
                    } else {
                        Program::Script(w.clone())
                    });
                }
                l.args = words[i + 1..].to_vec();
                return l;
            }
        }
    }
    l
}

fn is_python(b: &str) -> bool {
    b == "python"
        || b.strip_prefix("python")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// `-m MODULE` / `--module MODULE` after a launcher's options: the program is a module.
fn module_flag(words: &[Word], i: usize, l: &mut Launch) -> usize {
    match words.get(i).map(|w| w.text.as_str()) {
        Some("-m" | "--module") => {
            if let Some(m) = words.get(i + 1) {
                l.program = Some(Program::Module(m.text.clone()));
                l.args = words[i + 2..].to_vec();
                return words.len();
            }
            i + 1
        }
        _ => i,
    }
}

fn split_eq(w: &str) -> (String, Option<String>) {
    match w.split_once('=') {
        Some((k, v)) if k.starts_with('-') => (k.to_string(), Some(v.to_string())),
        _ => (w.to_string(), None),
    }
}

/// Reads a launcher's options from `i`; returns where they end.
fn options(
    words: &[Word],
    mut i: usize,
    table: &[Opt],
    launcher: &'static str,
    l: &mut Launch,
) -> usize {
    while i < words.len() {
        let w = &words[i].text;
        if !w.starts_with('-') || w == "-m" || w == "--module" || w == "--" {
            if w == "--" {
                i += 1;
            }
            break;
        }
        let (key, inline) = split_eq(w);
        // `-N4`, `-np8`: a short option with its value attached.
        let (key, inline) = match table.iter().find(|o| o.names.contains(&key.as_str())) {
            Some(_) => (key, inline),
            None => attached(&key, table).map_or((key.clone(), inline), |(k, v)| (k, Some(v))),
        };
        let o = table.iter().find(|o| o.names.contains(&key.as_str()));
        let takes = match o {
            Some(o) => o.value && inline.is_none(),
            // An unknown option takes the next word unless it is an option itself.
            None => {
                inline.is_none()
                    && words
                        .get(i + 1)
                        .is_some_and(|n| !n.text.starts_with('-') && !looks_like_program(&n.text))
            }
        };
        let mut value = inline;
        if takes {
            value = words.get(i + 1).map(|n| n.text.clone());
        }
        if launcher == "mpirun" && (key == "--mca" || key == "-mca") {
            // Two values: the parameter and its setting.
            let v = words
                .get(i + 1..i + 3)
                .map(|ws| format!("{} {}", ws[0].text, ws[1].text));
            l.said.push(Said {
                launcher,
                key,
                value: v,
                means: Means::Site,
                line: l.line,
            });
            i += 3;
            continue;
        }
        l.said.push(Said {
            launcher,
            key,
            value,
            means: o.map_or(Means::Site, |o| o.means),
            line: l.line,
        });
        i += if takes { 2 } else { 1 };
    }
    i
}

fn attached(key: &str, table: &[Opt]) -> Option<(String, String)> {
    if key.starts_with("--") {
        return None;
    }
    table
        .iter()
        .flat_map(|o| o.names.iter())
        .filter(|n| !n.starts_with("--") && key.len() > n.len() && key.starts_with(**n))
        .max_by_key(|n| n.len())
        .map(|n| (n.to_string(), key[n.len()..].to_string()))
}

fn looks_like_program(w: &str) -> bool {
    w.ends_with(".py") || w.ends_with(".sh") || is_python(w.rsplit('/').next().unwrap_or(w))
}

/// `#SBATCH` directives as launcher options.
pub fn sbatch(directives: &[(usize, Vec<String>)]) -> Vec<Said> {
    let mut l = Launch {
        line: 0,
        launchers: Vec::new(),
        said: Vec::new(),
        program: None,
        args: Vec::new(),
    };
    for (line, words) in directives {
        l.line = *line;
        let ws: Vec<Word> = words.iter().map(|t| Word::new(t.clone(), *line)).collect();
        let end = options(&ws, 0, SRUN, "#SBATCH", &mut l);
        let _ = end;
    }
    l.said
}

/// Slurm's time format (`minutes`, `HH:MM:SS`, `D-HH:MM:SS`, `MM:SS`) as a plan quantity.
pub fn slurm_time(t: &str) -> Option<String> {
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, t),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let minutes = match (days > 0, parts.as_slice()) {
        (false, [m]) => *m as f64,
        (false, [m, s]) => *m as f64 + *s as f64 / 60.0,
        (true, [h]) => *h as f64 * 60.0,
        (true, [h, m]) => *h as f64 * 60.0 + *m as f64,
        (_, [h, m, s]) => *h as f64 * 60.0 + *m as f64 + *s as f64 / 60.0,
        _ => return None,
    } + days as f64 * 24.0 * 60.0;
    Some(if minutes % 60.0 == 0.0 {
        format!("{} h", minutes / 60.0)
    } else {
        format!("{} min", minutes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::shell;

    fn first(s: &str) -> Launch {
        let sc = shell::parse(s);
        launch(&sc.commands[0].words, sc.commands[0].line)
    }

    #[test]
    fn torchrun_through_srun_gives_the_cluster_and_the_program() {
        let l = first("srun -N 4 --ntasks-per-node=1 torchrun --nproc_per_node=8 --nnodes 4 --rdzv-backend c10d pretrain_gpt.py --tp 2");
        assert_eq!(l.launchers, ["srun", "torchrun"]);
        assert_eq!(l.program, Some(Program::Script("pretrain_gpt.py".into())));
        assert_eq!(l.args.len(), 2);
        let gpn = l
            .said
            .iter()
            .find(|s| s.means == Means::GpusPerNode)
            .unwrap();
        assert_eq!(gpn.value.as_deref(), Some("8"));
        assert_eq!(l.said.iter().filter(|s| s.means == Means::Nodes).count(), 2);
    }

    #[test]
    fn python_m_torch_distributed_and_mpirun_are_launchers() {
        let l = first("python -m torch.distributed.run --nproc_per_node 8 -m torchtitan.train --job.config_file a.toml");
        assert_eq!(l.program, Some(Program::Module("torchtitan.train".into())));
        assert_eq!(l.args[0].text, "--job.config_file");
        let l = first("mpirun -np 16 --map-by ppr:8:node -x NCCL_DEBUG=WARN --allow-run-as-root python pretrain_gpt.py --bf16");
        assert_eq!(l.program, Some(Program::Script("pretrain_gpt.py".into())));
        assert!(l
            .said
            .iter()
            .any(|s| s.means == Means::Env && s.value.as_deref() == Some("NCCL_DEBUG=WARN")));
        assert!(l
            .said
            .iter()
            .any(|s| s.means == Means::World && s.value.as_deref() == Some("16")));
    }

    #[test]
    fn slurm_times_become_quantities() {
        assert_eq!(slurm_time("24:00:00").as_deref(), Some("24 h"));
        assert_eq!(slurm_time("2-00:00:00").as_deref(), Some("48 h"));
        assert_eq!(slurm_time("90").as_deref(), Some("90 min"));
    }
}
