//! The shell scripts parse (`bash -n`), the injection attempts stay data when the scripts
//! run with the launchers stubbed, and `write_artifacts` never overwrites without `force`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use planc_targets::{render, render_checked, write_artifacts, Artifact, Target};

fn is_shell(a: &Artifact) -> bool {
    let p = a.path.to_string_lossy();
    p.ends_with(".sh") || p.ends_with(".sbatch")
}

#[test]
fn every_script_passes_bash_n() {
    let mut checked_scripts = 0;
    for (stem, checked) in common::valid_examples() {
        for &target in Target::ALL {
            let Ok(artifacts) = render_checked(target, &checked, None) else {
                continue;
            };
            for a in artifacts.iter().filter(|a| is_shell(a)) {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join(&a.path);
                std::fs::write(&path, &a.contents).unwrap();
                let out = Command::new("bash").arg("-n").arg(&path).output().unwrap();
                assert!(
                    out.status.success(),
                    "bash -n {stem}/{target}/{}: {}",
                    a.path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                checked_scripts += 1;
            }
        }
    }
    assert!(checked_scripts >= 10, "{checked_scripts} scripts");
}

/// A marker the injected commands would create; `MARK` is replaced by its path.
const INJECTIONS: &[&str] = &[
    "x\"; touch MARK; echo \"",
    "x'; touch MARK; echo '",
    "$(touch MARK)",
    "`touch MARK`",
    "x\n touch MARK",
];

/// The payload as environment values, where `check` lets it through: a value that runs a
/// command (`$(...)`, backquotes) is refused at the value (P0713), which is asserted here.
fn env_block(payload: &str, lit: &str) -> String {
    let block = format!("env {{ NCCL_DEBUG = \"{lit}\", NCCL_IB_HCA = \"{lit}\" }}");
    if planc_compiler::nccl_env::env_value(payload).is_ok() {
        return block;
    }
    let c = planc_compiler::check::check_source(
        "t.tp",
        &common::plan_with_job(&format!("name = \"e\"\n{block}")),
    );
    assert!(
        c.diagnostics.iter().any(|d| d.code == "P0713"),
        "{payload:?} in job.env is not refused"
    );
    String::new()
}

fn stub(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/bash\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Stubs for every launcher: each writes its arguments, one per line, to `$LOG/<name>`.
fn stubs(bin: &Path) {
    for name in [
        "srun",
        "sbatch",
        "torchrun",
        "python",
        "python3",
        "deepspeed",
    ] {
        stub(
            bin,
            name,
            &format!("printf '%s\\n' \"$@\" > \"$LOG/{name}\"\nif [ \"$1\" != --fail ]; then :; fi\nexit 0"),
        );
    }
    stub(bin, "scontrol", "echo node-a; echo node-b");
}

#[test]
fn injected_commands_never_run() {
    for (i, attempt) in INJECTIONS.iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join(format!("INJECTED-{i}"));
        let payload = attempt.replace("MARK", &marker.to_string_lossy());
        // Strings in .tp files escape only `"` and `\`.
        let lit = payload.replace('\\', "\\\\").replace('"', "\\\"");
        if lit.contains('\n') {
            continue; // the lexer rejects a line break inside a string
        }
        let job = format!(
            "name = \"{lit}\"\n partition = \"{lit}\"\n entrypoint = \"{lit}\"\n \
             checkpoint_dir = \"{lit}\"\n image = \"{lit}\"\n retries = 2\n {}",
            env_block(&payload, &lit)
        );
        let checked = common::checked(&common::plan_with_job(&job));
        let bin = tmp.path().join("bin");
        let log = tmp.path().join("log");
        let out_dir = tmp.path().join("out");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&log).unwrap();
        stubs(&bin);
        for target in [Target::Slurm, Target::Torchrun, Target::Megatron] {
            let artifacts = render_checked(target, &checked, None).unwrap();
            let dir = out_dir.join(target.as_str());
            let written = write_artifacts(&dir, &artifacts, false).unwrap();
            let script = written
                .iter()
                .find(|p| p.extension().is_some_and(|e| e == "sh" || e == "sbatch"))
                .unwrap();
            let status = Command::new("bash")
                .arg(script)
                .current_dir(tmp.path())
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env("LOG", &log)
                .env("MASTER_ADDR", "node-a")
                .env("SLURM_JOB_NODELIST", "node-[a-b]")
                .env("SLURM_JOB_NUM_NODES", "2")
                .env("SLURM_JOB_ID", "42")
                .output()
                .unwrap();
            assert!(
                status.status.success(),
                "{target} script failed ({:?}): {}{}",
                status.status,
                String::from_utf8_lossy(&status.stdout),
                String::from_utf8_lossy(&status.stderr)
            );
            assert!(
                !marker.exists(),
                "{target}: injected command ran for {payload:?}"
            );
            // The launcher got the entrypoint as one argument, unchanged.
            let launcher = if target == Target::Slurm {
                "srun"
            } else {
                "torchrun"
            };
            let argv = std::fs::read_to_string(log.join(launcher)).unwrap();
            assert!(
                argv.lines().any(|l| l == payload),
                "{target}: entrypoint not passed verbatim in {argv}"
            );
        }
        // YAML and JSON carry the strings as data.
        let k8s = render_checked(Target::K8s, &checked, None).unwrap();
        let yaml = &k8s[0].contents;
        assert!(yaml.contains(&planc_targets::quote::yaml(&payload)));
        assert!(!yaml.contains(&format!("name: {payload}")));
        // In the container's command and environment, `$` is doubled: the kubelet would
        // expand `$(NAME)` there.
        let kube = planc_targets::quote::yaml(&planc_targets::quote::kube_literal(&payload));
        assert!(yaml.contains(&format!("- {kube}")), "{yaml}");
        if planc_compiler::nccl_env::env_value(&payload).is_ok() {
            assert!(yaml.contains(&format!("value: {kube}")), "{yaml}");
        }
    }
}

#[test]
fn slurm_script_requeues_until_retries_are_spent() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    std::fs::create_dir_all(ckpt.join("iter_0000100")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::create_dir_all(ckpt.join("iter_0000200")).unwrap();
    let job = format!(
        "name = \"r\"\n framework = torch\n retries = 2\n checkpoint_dir = \"{}\"",
        ckpt.display()
    );
    let checked = common::checked(&common::plan_with_job(&job));
    let artifacts = render_checked(Target::Slurm, &checked, None).unwrap();
    let dir = tmp.path().join("out");
    let written = write_artifacts(&dir, &artifacts, false).unwrap();
    let bin = tmp.path().join("bin");
    let log = tmp.path().join("log");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&log).unwrap();
    stub(
        &bin,
        "srun",
        "env | grep '^PLANC_RESUME_FROM=' > \"$LOG/resume\"; exit 3",
    );
    stub(
        &bin,
        "scontrol",
        "if [ \"$1\" = requeue ]; then echo \"$2\" > \"$LOG/requeued\"; else echo node-a; fi",
    );
    let run = |restart: &str| {
        let _ = std::fs::remove_file(log.join("requeued"));
        Command::new("bash")
            .arg(&written[0])
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("LOG", &log)
            .env("SLURM_JOB_NODELIST", "node-a")
            .env("SLURM_JOB_NUM_NODES", "2")
            .env("SLURM_JOB_ID", "7")
            .env("SLURM_RESTART_COUNT", restart)
            .output()
            .unwrap()
    };
    let first = run("0");
    assert_eq!(first.status.code(), Some(3));
    assert_eq!(
        std::fs::read_to_string(log.join("requeued"))
            .unwrap()
            .trim(),
        "7"
    );
    let resume = std::fs::read_to_string(log.join("resume")).unwrap();
    assert!(resume.trim().ends_with("iter_0000200"), "{resume}");
    let last = run("2");
    assert_eq!(last.status.code(), Some(3));
    assert!(
        !log.join("requeued").exists(),
        "no retries left, but requeued"
    );
    let over = run("3");
    assert_eq!(over.status.code(), Some(1));
}

#[test]
fn write_artifacts_refuses_to_overwrite_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let checked = common::checked(&common::plan_with_job("name = \"w\""));
    let artifacts = render_checked(Target::Deepspeed, &checked, None);
    // The test plan has pp = 2, which DeepSpeed's config cannot express.
    assert_eq!(artifacts.unwrap_err().code().id, "P0706");
    let artifacts = render_checked(Target::Slurm, &checked, None).unwrap();
    let dir = tmp.path().join("out");
    let written = write_artifacts(&dir, &artifacts, false).unwrap();
    let mode = std::fs::metadata(&written[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    // An existing file is left alone, and nothing else is written either.
    std::fs::write(&written[0], "old contents").unwrap();
    let two = vec![
        Artifact {
            path: "new-file".into(),
            contents: "new".into(),
            executable: false,
        },
        artifacts[0].clone(),
    ];
    let err = write_artifacts(&dir, &two, false).unwrap_err();
    assert_eq!(err.code().id, "P0710");
    assert!(err.to_string().contains("job.sbatch"));
    assert_eq!(
        std::fs::read_to_string(&written[0]).unwrap(),
        "old contents"
    );
    assert!(!dir.join("new-file").exists());
    // With force, it is replaced, and no temporary file is left behind.
    write_artifacts(&dir, &two, true).unwrap();
    assert_eq!(
        std::fs::read_to_string(&written[0]).unwrap(),
        artifacts[0].contents
    );
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains("planc-tmp")), "{names:?}");
}

#[test]
fn refuses_plans_with_errors_and_missing_attributes() {
    let oom = planc_compiler::check::check_file(
        &common::examples_dir().join("oom-llama3-70b-8xa100.tp"),
        &planc_compiler::source::FsLoader,
    )
    .unwrap();
    let err = render_checked(Target::Megatron, &oom, None).unwrap_err();
    assert_eq!(err.code().id, "P0705");
    assert!(err.to_string().contains("P0401"), "{err}");
    // A layout that breaks a rule is refused by `render` itself.
    let ok = common::checked(&common::plan_with_job("name = \"v\""));
    let mut plan = ok.plan.clone().unwrap();
    plan.parallel.tp = 3;
    let err = render(
        Target::Torchrun,
        ok.spec.as_ref().unwrap(),
        &plan,
        "test.tp",
        None,
    )
    .unwrap_err();
    assert_eq!(err.code().id, "P0705");
    // k8s needs an image.
    let err = render_checked(Target::K8s, &ok, None).unwrap_err();
    assert_eq!(err.code().id, "P0707");
}

#[test]
fn user_templates_override_by_file_name() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("torchrun.sh.j2"),
        "#!/bin/sh\necho {{ job.name | shell }} {{ parallel.tp }}\n",
    )
    .unwrap();
    let ok = common::checked(&common::plan_with_job("name = \"it's\""));
    let a = render_checked(Target::Torchrun, &ok, Some(tmp.path())).unwrap();
    assert_eq!(a[0].contents, "#!/bin/sh\necho 'it'\\''s' 2\n");
    std::fs::write(tmp.path().join("torchrun.sh.j2"), "{{ nope.x }}").unwrap();
    let err = render_checked(Target::Torchrun, &ok, Some(tmp.path())).unwrap_err();
    assert_eq!(err.code().id, "P0708");
    let err = render_checked(Target::Torchrun, &ok, Some(&tmp.path().join("missing"))).unwrap_err();
    assert_eq!(err.code().id, "P0709");
}

// ----- framework planc: `planc run` on every node -------------------------------------------

/// An srun that runs its command as the task of node 1 of 2 would: srun's own options are
/// dropped, and SLURM_NODEID and SLURM_NNODES are the task's.
const SRUN_AS_NODE_1: &str = r#"while [ "${1#--}" != "$1" ]; do shift; done
export SLURM_NODEID=1 SLURM_NNODES=2
exec "$@""#;

/// A `planc` that logs its arguments (one per line) and the torchrun rank variables it sees,
/// and exits with `$PLANC_STATUS` (0 unless set).
fn planc_stub(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        path,
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$LOG/planc\"\n\
         env | grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK)=' > \"$LOG/planc-env\"\n\
         exit \"${PLANC_STATUS:-0}\"\n",
    )
    .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// What `planc run` is given on node 1 of 2, before the checkpoint options.
fn node_1_args(plan: &str, master: &str) -> Vec<String> {
    [
        "run",
        plan,
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master",
        master,
    ]
    .map(String::from)
    .to_vec()
}

/// The first container's command of a PyTorchJob, item by item: the `- "..."` items are
/// JSON strings (the `yaml` and `kube` filters write JSON), the `- |` item a block scalar.
fn container_command(yaml: &str) -> Vec<String> {
    let mut it = yaml
        .lines()
        .skip_while(|l| l.trim() != "command:")
        .skip(1)
        .peekable();
    let mut out = Vec::new();
    while let Some(line) = it.next() {
        let item = line.trim_start();
        if line.len() - item.len() < 16 {
            break;
        }
        if item.starts_with('#') {
            continue;
        }
        if item == "- |" {
            let mut block = String::new();
            while let Some(b) = it.next_if(|b| b.is_empty() || b.starts_with(&" ".repeat(18))) {
                block.push_str(b.get(18..).unwrap_or(""));
                block.push('\n');
            }
            out.push(block);
        } else {
            let json = item.strip_prefix("- ").expect("a list item");
            out.push(serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}")));
        }
    }
    out
}

/// What the kubelet does to a container's command before starting it: `$(NAME)` becomes
/// the value of a variable the container defines, `$$` one `$`.
fn kubelet_expand(s: &str, env: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(r) = rest.strip_prefix("$$") {
            out.push('$');
            rest = r;
        } else if let Some((name, value)) = rest
            .strip_prefix("$(")
            .and_then(|r| r.split_once(')'))
            .and_then(|(n, _)| env.iter().find(|(k, _)| *k == n))
        {
            out.push_str(value);
            rest = &rest[2 + name.len() + 1..];
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Runs a PyTorchJob's pod command as the kubelet would on the pod of node 1 (a Worker),
/// in `dir`, with the training operator's variables set.
fn run_pod(yaml: &str, dir: &Path, log: &Path) -> std::process::Output {
    let env = [
        ("MASTER_ADDR", "job-master-0"),
        ("MASTER_PORT", "23456"),
        ("WORLD_SIZE", "8"),
        ("RANK", "1"),
        ("PET_NODE_RANK", "1"),
        ("PET_NNODES", "2"),
    ];
    let command: Vec<String> = container_command(yaml)
        .iter()
        .map(|c| kubelet_expand(c, &env))
        .collect();
    assert_eq!(command[..2], ["/bin/sh", "-c"], "{command:?}");
    Command::new(&command[0])
        .args(&command[1..])
        .current_dir(dir)
        .envs(env)
        .env("LOG", log)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
}

#[test]
fn planc_framework_passes_injected_strings_as_data() {
    // And one the kubelet would expand in a container's command: variables it defines.
    let kubelet = ["$(RANK)$(MASTER_ADDR)-MARK"];
    for (i, attempt) in INJECTIONS.iter().chain(&kubelet).enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join(format!("INJECTED-{i}"));
        let payload = attempt.replace("MARK", &marker.to_string_lossy());
        let lit = payload.replace('\\', "\\\\").replace('"', "\\\"");
        if lit.contains('\n') {
            continue; // the lexer rejects a line break inside a string
        }
        // The plan's own path, the planc binary and the checkpoint folder all carry the
        // payload; they are relative, so they live in `work`, where the job starts.
        let plan_path = format!("{payload}.tp");
        let ckpt = format!("{payload}-ckpt");
        let job = format!(
            "name = \"{lit}\"\n partition = \"{lit}\"\n entrypoint = \"{lit}\"\n \
             checkpoint_dir = \"{lit}-ckpt\"\n image = \"{lit}\"\n retries = 1\n {}",
            env_block(&payload, &lit)
        );
        let text = common::planc_plan_with_job(&job);
        let checked = common::checked_named(&plan_path, &text);
        let work = tmp.path().join("work");
        let (bin, log) = (tmp.path().join("bin"), tmp.path().join("log"));
        for d in [&work, &bin, &log] {
            std::fs::create_dir_all(d).unwrap();
        }
        let plan_file = work.join(&plan_path);
        std::fs::create_dir_all(plan_file.parent().unwrap()).unwrap();
        std::fs::write(&plan_file, &text).unwrap();
        planc_stub(&work.join(&payload));
        stub(&bin, "srun", SRUN_AS_NODE_1);
        stub(&bin, "scontrol", "echo node-a; echo node-b");
        let mut expected = node_1_args(&plan_path, "node-a:29500");
        expected.extend([
            "--save".into(),
            ckpt.clone(),
            "--save-every".into(),
            "1000".into(),
        ]);

        let artifacts = render_checked(Target::Slurm, &checked, None).unwrap();
        let written = write_artifacts(&tmp.path().join("out"), &artifacts, false).unwrap();
        let run = Command::new("bash")
            .arg(&written[0])
            .current_dir(&work)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("LOG", &log)
            .env("SLURM_JOB_NODELIST", "node-[a-b]")
            .env("SLURM_JOB_NUM_NODES", "2")
            .env("SLURM_JOB_ID", "42")
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "slurm script failed ({:?}): {}{}",
            run.status,
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(
            !marker.exists(),
            "slurm: injected command ran for {payload:?}"
        );
        assert_eq!(lines(&log.join("planc")), expected, "slurm, {payload:?}");

        let k8s = render_checked(Target::K8s, &checked, None).unwrap();
        let yaml = &k8s[0].contents;
        assert!(!yaml.contains(&format!("name: {payload}")));
        std::fs::remove_file(log.join("planc")).unwrap();
        let pod = run_pod(yaml, &work, &log);
        assert!(
            pod.status.success(),
            "pod command failed ({:?}): {}{}",
            pod.status,
            String::from_utf8_lossy(&pod.stdout),
            String::from_utf8_lossy(&pod.stderr)
        );
        assert!(
            !marker.exists(),
            "k8s: injected command ran for {payload:?}"
        );
        let mut expected = node_1_args(&plan_path, "job-master-0:23456");
        expected.extend([
            "--save".into(),
            ckpt.clone(),
            "--save-every".into(),
            "1000".into(),
        ]);
        assert_eq!(lines(&log.join("planc")), expected, "k8s, {payload:?}");
        assert_eq!(
            lines(&log.join("planc-env")),
            Vec::<String>::new(),
            "planc run must not see the operator's RANK and WORLD_SIZE"
        );
    }
}

/// A complete checkpoint folder, as `planc run --save` leaves one.
fn checkpoint(dir: &Path, name: &str, complete: bool) {
    let f = dir.join(name);
    std::fs::create_dir_all(f.join("optimizer")).unwrap();
    for file in ["model.safetensors", "config.json"] {
        std::fs::write(f.join(file), "").unwrap();
    }
    if complete {
        std::fs::write(f.join("planc.json"), "{}").unwrap();
    }
}

#[test]
fn planc_jobs_resume_for_the_steps_left() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    let job = format!(
        "name = \"r\"\n retries = 2\n image = \"img\"\n checkpoint_dir = \"{}\"",
        ckpt.display()
    );
    let text = common::planc_plan_with_job(&job);
    let checked = common::checked_named("plan.tp", &text);
    let work = tmp.path().join("work");
    let (bin, log) = (tmp.path().join("bin"), tmp.path().join("log"));
    for d in [&work, &bin, &log] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(work.join("plan.tp"), &text).unwrap();
    planc_stub(&bin.join("planc"));
    stub(&bin, "srun", SRUN_AS_NODE_1);
    stub(
        &bin,
        "scontrol",
        "if [ \"$1\" = requeue ]; then echo \"$2\" > \"$LOG/requeued\"; else echo node-a; fi",
    );
    let sbatch = write_artifacts(
        &tmp.path().join("out"),
        &render_checked(Target::Slurm, &checked, None).unwrap(),
        false,
    )
    .unwrap()
    .remove(0);
    let yaml = render_checked(Target::K8s, &checked, None).unwrap()[0]
        .contents
        .clone();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let slurm = |status: &str| {
        for f in ["planc", "requeued"] {
            let _ = std::fs::remove_file(log.join(f));
        }
        Command::new("bash")
            .arg(&sbatch)
            .current_dir(&work)
            .env("PATH", &path)
            .env("LOG", &log)
            .env("PLANC_STATUS", status)
            .env("SLURM_JOB_NODELIST", "node-a")
            .env("SLURM_JOB_NUM_NODES", "2")
            .env("SLURM_JOB_ID", "7")
            .env("SLURM_RESTART_COUNT", "0")
            .output()
            .unwrap()
    };
    // The pod's planc is found on PATH: the default entrypoint.
    let pod = || {
        let _ = std::fs::remove_file(log.join("planc"));
        let mut yaml = yaml.clone();
        yaml = yaml.replacen("- \"planc\"", &format!("- {:?}", bin.join("planc")), 1);
        run_pod(&yaml, &work, &log)
    };
    let ckpt_s = ckpt.display().to_string();
    let save = ["--save", &ckpt_s, "--save-every", "1000"].map(String::from);
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v = node_1_args("plan.tp", "node-a:29500");
        v.extend(save.iter().cloned());
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let resume = |steps: &str| with(&["--resume", &ckpt_s, "--steps", steps]);

    // The first attempt: no checkpoint yet.
    let out = slurm("0");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lines(&log.join("planc")), with(&[]));

    // DIR/latest names a complete checkpoint: 500 − 200 steps are left.
    checkpoint(&ckpt, "step-0000100", true);
    checkpoint(&ckpt, "step-0000200", true);
    std::fs::write(ckpt.join("latest"), "step-0000200\n").unwrap();
    slurm("0");
    assert_eq!(lines(&log.join("planc")), resume("300"));
    let out = pod();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut expected = resume("300");
    expected[7] = "job-master-0:23456".into();
    assert_eq!(lines(&log.join("planc")), expected, "the pod resumes too");

    // DIR/latest names a folder left incomplete, and a higher one is incomplete too:
    // `planc run --resume` takes the highest complete one.
    checkpoint(&ckpt, "step-0000300", false);
    std::fs::write(ckpt.join("latest"), "step-0000300\n").unwrap();
    checkpoint(&ckpt, "step-0000250", false);
    slurm("0");
    assert_eq!(lines(&log.join("planc")), resume("300"));
    std::fs::remove_file(ckpt.join("latest")).unwrap();
    slurm("0");
    assert_eq!(lines(&log.join("planc")), resume("300"));

    // A failed attempt is requeued, and resumes on its next run.
    let out = slurm("3");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(lines(&log.join("requeued")), ["7"]);

    // A preempted attempt (planc run's 75) is requeued without using up a retry: the
    // next one, at Slurm's restart count 1, still counts as the first.
    let out = slurm("75");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lines(&log.join("requeued")), ["7"]);
    assert_eq!(lines(&work.join(".planc-7.preemptions")), ["1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not counted against retries"));

    // The checkpoint of the last step ends the run: nothing is started.
    checkpoint(&ckpt, "step-0000500", true);
    std::fs::write(ckpt.join("latest"), "step-0000500\n").unwrap();
    let out = slurm("0");
    assert!(out.status.success());
    assert!(!log.join("planc").exists(), "srun ran after the last step");
    let out = pod();
    assert!(out.status.success());
    assert!(
        !log.join("planc").exists(),
        "the pod ran after the last step"
    );

    // A plan the job cannot find stops the job before srun, without a requeue.
    std::fs::remove_file(work.join("plan.tp")).unwrap();
    let out = slurm("0");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no plan at plan.tp"));
    assert!(!log.join("requeued").exists());
}

#[test]
fn planc_framework_is_refused_by_targets_that_launch_something_else() {
    let checked = common::checked(&common::planc_plan_with_job("name = \"p\""));
    for target in [Target::Megatron, Target::Deepspeed, Target::Torchrun] {
        let err = render_checked(target, &checked, None).unwrap_err();
        assert_eq!(err.code().id, "P0706", "{target}");
        let text = err.to_string();
        assert!(text.contains("job.framework = planc"), "{text}");
        assert!(text.contains("--target slurm or k8s"), "{text}");
    }
    // job.entrypoint names the planc binary.
    let checked = common::checked(&common::planc_plan_with_job(
        "entrypoint = \"/opt/planc/bin/planc\"",
    ));
    let sbatch = &render_checked(Target::Slurm, &checked, None).unwrap()[0].contents;
    assert!(sbatch.contains("PLANC='/opt/planc/bin/planc'"), "{sbatch}");
}

#[test]
fn planc_pod_without_a_checkpoint_folder_starts_planc_run() {
    let tmp = tempfile::tempdir().unwrap();
    let text = common::planc_plan_with_job("image = \"img\"");
    let checked = common::checked_named("plans/p.tp", &text);
    let log = tmp.path().join("log");
    std::fs::create_dir_all(&log).unwrap();
    planc_stub(&tmp.path().join("bin/planc"));
    let yaml = render_checked(Target::K8s, &checked, None).unwrap()[0]
        .contents
        .replacen(
            "- \"planc\"",
            &format!("- {:?}", tmp.path().join("bin/planc")),
            1,
        );
    let out = run_pod(&yaml, tmp.path(), &log);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        lines(&log.join("planc")),
        node_1_args("plans/p.tp", "job-master-0:23456")
    );
}

// ----- job.env: `$NAME` is the node's variable, everything else literal ----------------------

/// A literal value with every character a shell treats specially inside double quotes.
const LITERAL: &str = "a\"b\\c $5 'x' $ {y}";

fn env_plan(framework: &str) -> String {
    let lit = LITERAL.replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        r#"
cluster c {{ nodes = 1, gpus_per_node = 8, gpu = H100_SXM_80GB }}
model m {{ layers = 4, hidden = 512, heads = 8, vocab = 32000, seq_len = 1024 }}
train {{ global_batch = 64, precision = bf16, optimizer = adamw }}
parallel {{ tp = 1, pp = 1, dp = 8, micro_batch = 2, zero = 1, recompute = none }}
job {{
framework = {framework}
image = "img"
env {{ LD_LIBRARY_PATH = "/opt/vccl/lib:$LD_LIBRARY_PATH", MY_VAR = "{lit}", BOTH = "${{MY_VAR}}+$HOME" }}
}}
"#
    )
}

/// A launcher stub that logs the environment variables the test looks at.
fn env_stub(bin: &Path, name: &str) {
    stub(
        bin,
        name,
        "printf '%s\\n' \"$LD_LIBRARY_PATH\" \"$MY_VAR\" \"$BOTH\" > \"$LOG/env\"",
    );
}

fn expected_env(ld: &str, home: &str) -> Vec<String> {
    vec![
        format!("/opt/vccl/lib:{ld}"),
        LITERAL.to_string(),
        format!("{LITERAL}+{home}"),
    ]
}

#[test]
fn environment_references_expand_on_the_node() {
    for (framework, target, launcher) in [
        ("torch", Target::Torchrun, "torchrun"),
        ("megatron", Target::Megatron, "torchrun"),
        ("torch", Target::Slurm, "srun"),
        ("deepspeed", Target::Deepspeed, "deepspeed"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (bin, log) = (tmp.path().join("bin"), tmp.path().join("log"));
        for d in [&bin, &log] {
            std::fs::create_dir_all(d).unwrap();
        }
        env_stub(&bin, launcher);
        stub(&bin, "scontrol", "echo node-a");
        let checked = common::checked(&env_plan(framework));
        let artifacts = render_checked(target, &checked, None).unwrap();
        let written = write_artifacts(&tmp.path().join("out"), &artifacts, false).unwrap();
        let script = written.iter().find(|p| is_shell_path(p)).unwrap();
        let out = Command::new("bash")
            .arg(script)
            .current_dir(tmp.path())
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("LOG", &log)
            .env("LD_LIBRARY_PATH", "/x")
            .env("HOME", "/home/u")
            .env("SLURM_JOB_NODELIST", "node-a")
            .env("SLURM_JOB_NUM_NODES", "1")
            .env("SLURM_JOB_ID", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{target}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            lines(&log.join("env")),
            expected_env("/x", "/home/u"),
            "{target}"
        );
        // Unset on the node: the reference is empty, as in a shell without `set -u`.
        let out = Command::new("bash")
            .arg(script)
            .current_dir(tmp.path())
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("LOG", &log)
            .env("HOME", "/h")
            .env("SLURM_JOB_NODELIST", "node-a")
            .env("SLURM_JOB_NUM_NODES", "1")
            .env("SLURM_JOB_ID", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{target}, unset");
        assert_eq!(lines(&log.join("env"))[0], "/opt/vccl/lib:", "{target}");
    }
}

fn is_shell_path(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "sh" || e == "sbatch")
}

/// `.deepspeed_env` as DeepSpeed's pdsh runner sends it (runner.py reads `KEY=VAL` lines;
/// multinode_runner.py strips the value, double-quotes it when it holds anything but
/// `\w@%+=:,./-`, and runs `export KEY=VAL; ...` in each node's shell).
#[test]
fn deepspeed_env_expands_on_every_node() {
    let checked = common::checked(&env_plan("deepspeed"));
    let artifacts = render_checked(Target::Deepspeed, &checked, None).unwrap();
    let file = artifacts
        .iter()
        .find(|a| a.path.to_string_lossy() == ".deepspeed_env")
        .expect(".deepspeed_env");
    let mut exports = String::new();
    for line in file.contents.lines() {
        let (key, val) = line.split_once('=').unwrap();
        let val = val.trim();
        let plain = val
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || "@%+=:,./-".contains(c));
        let val = if plain {
            val.to_string()
        } else {
            format!("\"{val}\"")
        };
        exports.push_str(&format!("export {}={val}; ", key.trim()));
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{exports}printf '%s\\n' \"$LD_LIBRARY_PATH\" \"$MY_VAR\" \"$BOTH\""
        ))
        .env("LD_LIBRARY_PATH", "/y")
        .env("HOME", "/home/v")
        .output()
        .unwrap();
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(got, expected_env("/y", "/home/v"), "{}", file.contents);
}

/// The PyTorchJob: the kubelet cannot expand the image's variables, so those values are
/// exported by the container's shell; a value referring to an earlier `job.env` variable
/// alone stays in the `env` list as `$(NAME)`.
#[test]
fn pytorchjob_environment_expands_in_the_container() {
    let tmp = tempfile::tempdir().unwrap();
    let (bin, log) = (tmp.path().join("bin"), tmp.path().join("log"));
    for d in [&bin, &log] {
        std::fs::create_dir_all(d).unwrap();
    }
    env_stub(&bin, "torchrun");
    let checked = common::checked(&env_plan("torch"));
    let yaml = render_checked(Target::K8s, &checked, None).unwrap()[0]
        .contents
        .clone();
    // MY_VAR is literal: it stays in the env list, its `$` doubled.
    assert!(yaml.contains("- name: \"MY_VAR\""), "{yaml}");
    assert!(!yaml.contains("- name: \"LD_LIBRARY_PATH\""), "{yaml}");
    let container_env = [("MY_VAR", LITERAL)];
    let command: Vec<String> = container_command(&yaml)
        .iter()
        .map(|c| kubelet_expand(c, &container_env))
        .collect();
    assert_eq!(command[..2], ["/bin/sh", "-c"], "{command:?}");
    let out = Command::new(&command[0])
        .args(&command[1..])
        .env_clear()
        .envs(container_env)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("LOG", &log)
        .env("LD_LIBRARY_PATH", "/usr/local/cuda/lib64")
        .env("HOME", "/root")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        lines(&log.join("env")),
        expected_env("/usr/local/cuda/lib64", "/root")
    );
}

// ----- site essentials: containers and node placement ------------------------------------------

/// An srun that runs its command as the task of the second node would (SLURM_PROCID 1),
/// after logging its own options.
const SRUN_AS_TASK_1: &str = r#"printf '%s\n' "$@" > "$LOG/srun"
while [ "${1#--}" != "$1" ]; do shift; done
export SLURM_PROCID=1 SLURM_NODEID=0
exec "$@""#;

#[test]
fn slurm_runs_the_image_through_pyxis_with_the_checkpoints_mounted() {
    let tmp = tempfile::tempdir().unwrap();
    let (bin, log) = (tmp.path().join("bin"), tmp.path().join("log"));
    for d in [&bin, &log] {
        std::fs::create_dir_all(d).unwrap();
    }
    stub(&bin, "srun", "printf '%s\\n' \"$@\" > \"$LOG/srun\"");
    stub(&bin, "scontrol", "echo node-a");
    let ckpt = tmp.path().join("elsewhere/ckpt");
    let job = format!(
        "name = \"c\"\n framework = torch\n image = \"nvcr.io/nvidia/pytorch:24.05-py3\"\n \
         checkpoint_dir = \"{}\"",
        ckpt.display()
    );
    let checked = common::checked(&common::plan_with_job(&job));
    let artifacts = render_checked(Target::Slurm, &checked, None).unwrap();
    let written = write_artifacts(&tmp.path().join("out"), &artifacts, false).unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = Command::new("bash")
        .arg(&written[0])
        .current_dir(&work)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("LOG", &log)
        .env("SLURM_JOB_NODELIST", "node-a")
        .env("SLURM_JOB_NUM_NODES", "2")
        .env("SLURM_JOB_ID", "3")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let argv = lines(&log.join("srun"));
    let work = work.canonicalize().unwrap();
    assert!(
        argv.contains(&"--container-image=nvcr.io/nvidia/pytorch:24.05-py3".to_string()),
        "{argv:?}"
    );
    assert!(
        argv.contains(&format!("--container-workdir={}", work.display())),
        "{argv:?}"
    );
    let mounts = format!(
        "--container-mounts={w}:{w},{c}:{c}",
        w = work.display(),
        c = ckpt.display()
    );
    assert!(argv.contains(&mounts), "{argv:?}");
    // Without an image, no container options.
    let checked = common::checked(&common::plan_with_job("name = \"n\"\n framework = torch"));
    let sbatch = &render_checked(Target::Slurm, &checked, None).unwrap()[0].contents;
    assert!(!sbatch.contains("--container-image"), "{sbatch}");
}

#[test]
fn mixed_clusters_fix_each_groups_node_ranks() {
    let text = std::fs::read_to_string(common::examples_dir().join("mixed-a100-v100.tp"))
        .unwrap()
        .replace(
            "recompute = selective",
            "recompute = selective }\njob { framework = torch, entrypoint = \"train.py\"",
        );
    let checked = common::checked(&text);
    let tmp = tempfile::tempdir().unwrap();
    let (bin, log) = (tmp.path().join("bin"), tmp.path().join("log"));
    for d in [&bin, &log] {
        std::fs::create_dir_all(d).unwrap();
    }
    stub(&bin, "srun", SRUN_AS_TASK_1);
    stub(&bin, "scontrol", "echo node-fast");
    stub(
        &bin,
        "torchrun",
        "printf '%s\\n' \"$@\" > \"$LOG/torchrun\"",
    );
    let artifacts = render_checked(Target::Slurm, &checked, None).unwrap();
    let sbatch = &artifacts[0].contents;
    // One heterogeneous component per node group, in the plan's order.
    let fast = sbatch.find("#SBATCH --constraint=fast").expect("fast");
    let het = sbatch.find("#SBATCH hetjob").expect("hetjob");
    let slow = sbatch.find("#SBATCH --constraint=slow").expect("slow");
    assert!(fast < het && het < slow, "{sbatch}");
    let written = write_artifacts(&tmp.path().join("out"), &artifacts, false).unwrap();
    let out = Command::new("bash")
        .arg(&written[0])
        .current_dir(tmp.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("LOG", &log)
        .env("SLURM_JOB_NODELIST_HET_GROUP_0", "node-fast")
        .env("SLURM_JOB_NODELIST", "node-fast,node-slow")
        .env("SLURM_JOB_ID", "5")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(lines(&log.join("srun")).contains(&"--het-group=0-1".to_string()));
    // The second node's task is node rank 1: the V100 group, the second pipeline stage.
    let argv = lines(&log.join("torchrun"));
    let at = |flag: &str| argv[argv.iter().position(|a| a == flag).unwrap() + 1].clone();
    assert_eq!(at("--node-rank"), "1", "{argv:?}");
    assert_eq!(at("--master-addr"), "node-fast", "{argv:?}");
    assert_eq!(at("--nnodes"), "2", "{argv:?}");
    assert!(!argv.iter().any(|a| a.starts_with("--rdzv")), "{argv:?}");
    // torchrun's own script takes the node rank from NODE_RANK, and refuses to guess it.
    let t = render_checked(Target::Torchrun, &checked, None).unwrap();
    let script = write_artifacts(&tmp.path().join("t"), &t, false).unwrap();
    let run = |rank: Option<&str>| {
        let mut c = Command::new("bash");
        c.arg(&script[0])
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("LOG", &log)
            .env("MASTER_ADDR", "node-fast");
        if let Some(r) = rank {
            c.env("NODE_RANK", r);
        }
        c.output().unwrap()
    };
    assert!(!run(None).status.success());
    assert!(run(Some("1")).status.success());
    let argv = lines(&log.join("torchrun"));
    assert_eq!(at_in(&argv, "--node-rank"), "1");
}

fn at_in(argv: &[String], flag: &str) -> String {
    argv[argv.iter().position(|a| a == flag).unwrap() + 1].clone()
}

#[test]
fn pytorchjob_mounts_the_checkpoint_volume_and_asks_for_rdma() {
    let checked = common::checked(&common::plan_with_job(
        "name = \"k\"\n image = \"img\"\n checkpoint_dir = \"/ckpt\"\n volume = \"ckpt-pvc\"",
    ));
    let yaml = &render_checked(Target::K8s, &checked, None).unwrap()[0].contents;
    assert!(yaml.contains("claimName: \"ckpt-pvc\""), "{yaml}");
    assert!(yaml.contains("mountPath: \"/ckpt\""), "{yaml}");
    // The plan's nodes meet over InfiniBand.
    assert!(yaml.contains("rdma/rdma_shared_device_a: 1"), "{yaml}");
    assert!(yaml.contains("add: [\"IPC_LOCK\"]"), "{yaml}");
    assert!(planc_targets::warnings(Target::K8s, checked.spec.as_ref().unwrap()).is_empty());
    // Without a volume the checkpoints die with the pod: said, not refused.
    let checked = common::checked(&common::plan_with_job(
        "name = \"k\"\n image = \"img\"\n checkpoint_dir = \"/ckpt\"",
    ));
    assert_eq!(
        planc_targets::warnings(Target::K8s, checked.spec.as_ref().unwrap()).len(),
        1
    );
    // A volume needs an absolute checkpoint folder to be mounted at.
    let checked = common::checked(&common::plan_with_job(
        "name = \"k\"\n image = \"img\"\n checkpoint_dir = \"ckpt\"\n volume = \"v\"",
    ));
    let err = render_checked(Target::K8s, &checked, None).unwrap_err();
    let d = err.located(checked.spec.as_ref().unwrap()).unwrap();
    assert_eq!(d.primary.unwrap().message, "job.checkpoint_dir");
    // Ethernet between nodes, and no NCCL_IB_* settings: no RDMA device.
    let text = common::plan_with_job("name = \"k\"\n image = \"img\"")
        .replace("kind = infiniband", "kind = ethernet");
    let yaml = &render_checked(Target::K8s, &common::checked(&text), None).unwrap()[0].contents;
    assert!(!yaml.contains("rdma/"), "{yaml}");
    let with_ib = text.replace(
        "image = \"img\"",
        "image = \"img\"\n env { NCCL_IB_HCA = \"mlx5_0\" }",
    );
    let yaml = &render_checked(Target::K8s, &common::checked(&with_ib), None).unwrap()[0].contents;
    assert!(yaml.contains("rdma/rdma_shared_device_a"), "{yaml}");
}
