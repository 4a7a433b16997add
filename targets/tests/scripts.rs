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
             checkpoint_dir = \"{lit}\"\n image = \"{lit}\"\n retries = 2\n \
             env {{ NCCL_DEBUG = \"{lit}\", NCCL_IB_HCA = \"{lit}\" }}"
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
        assert!(yaml.contains(&format!("value: {kube}")), "{yaml}");
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
    let err = render(Target::Torchrun, ok.spec.as_ref().unwrap(), &plan, None).unwrap_err();
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
