//! Every training kernel compiles with NVRTC for every precision, on any machine that has
//! libnvrtc (a GPU is not needed): a kernel that does not compile fails here, not in the
//! middle of a GPU run. `.ci/run` installs NVRTC from PyPI (`nvidia-cuda-nvrtc`); without
//! it the test prints SKIPPED and passes.

use planc_compiler::plan::Precision;
use planc_runtime::device::cuda::{compile, compile_cached_in, compile_cubin, KERNELS};

#[test]
fn every_kernel_compiles_for_every_precision() {
    // SAFETY: only probes whether the shared library loads.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("SKIPPED kernel compilation: libnvrtc not found (see .ci/run)");
        return;
    }
    for p in [Precision::Fp32, Precision::Bf16, Precision::Fp16] {
        for arch in ["compute_80", "compute_90"] {
            let ptx = compile(p, Some(arch)).unwrap_or_else(|e| panic!("{p} {arch}: {e}"));
            for k in KERNELS {
                assert!(
                    ptx.contains(&format!(".entry {k}(")),
                    "{p} {arch}: kernel {k} missing from the PTX"
                );
            }
        }
    }
}

/// On GPUs before Ampere (the catalog's T4 is sm_75) the kernels still build to machine
/// code: the tensor-core attention kernels, whose cp.async and 16-bit m16n8k16 products
/// need sm_80, are empty entry points there, and the scalar kernels run instead
/// (`Heads::tensor_cores`).
#[test]
fn the_kernels_compile_for_turing() {
    // SAFETY: only probes whether the shared library loads.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("SKIPPED sm_75 compilation: libnvrtc not found (see .ci/run)");
        return;
    }
    for p in [Precision::Fp16, Precision::Bf16] {
        let cubin = compile_cubin(p, "sm_75").unwrap_or_else(|e| panic!("{p} sm_75: {e}"));
        assert_eq!(&cubin[..4], b"\x7fELF");
    }
}

/// fp8's casts convert with Hopper's instructions (the stub is for GPUs without fp8).
#[test]
fn the_fp8_casts_convert_in_hardware_on_hopper() {
    // SAFETY: only probes whether the shared library loads.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("SKIPPED fp8 cast compilation: libnvrtc not found (see .ci/run)");
        return;
    }
    let ptx = compile(Precision::Fp8, Some("compute_90")).unwrap_or_else(|e| panic!("{e}"));
    for cvt in ["cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32"] {
        assert!(ptx.contains(cvt), "{cvt} missing from the PTX");
    }
    let old = compile(Precision::Fp8, Some("compute_80")).unwrap_or_else(|e| panic!("{e}"));
    assert!(!old.contains("e4m3x2"));
}

/// The machine code the runtime loads where it can (no JIT in every process): an ELF image
/// for the real architecture, with every kernel in it.
#[test]
fn the_kernels_compile_to_machine_code_for_hopper() {
    // SAFETY: only probes whether the shared library loads.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("SKIPPED CUBIN compilation: libnvrtc not found (see .ci/run)");
        return;
    }
    let cubin = compile_cubin(Precision::Bf16, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&cubin[..4], b"\x7fELF");
    for k in KERNELS {
        let name = k.as_bytes();
        assert!(
            cubin
                .windows(name.len() + 1)
                .any(|w| &w[..name.len()] == name && w[name.len()] == 0),
            "kernel {k} missing from the CUBIN"
        );
    }
    // A compile error is an error with NVRTC's log, not a panic.
    assert!(compile_cubin(Precision::Bf16, "sm_1").is_err());
}

/// Every kernel the runtime launches by name is one the module loads (a misspelt or
/// unlisted name would only fail on a GPU): the names after `launch…(` in the sources.
#[test]
fn every_launched_kernel_is_loaded() {
    let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    let mut launched = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            launches(&path, &mut launched);
        }
    }
    assert!(launched.len() > 30, "found the launches: {launched:?}");
    for (file, k) in &launched {
        assert!(
            KERNELS.contains(&k.as_str()),
            "{file} launches {k}, not in cuda::KERNELS"
        );
    }
    for k in [
        "ce_stats",
        "ce_combine",
        "ce_grad",
        "embed_vocab_fwd",
        "add_positions",
    ] {
        assert!(launched.iter().any(|(_, l)| l == k), "{k} is launched");
    }
}

#[test]
fn a_broken_kernel_is_reported_with_its_line() {
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("SKIPPED kernel compilation: libnvrtc not found (see .ci/run)");
        return;
    }
    let bad = cudarc::nvrtc::compile_ptx("extern \"C\" __global__ void k() { undefined_thing; }");
    let msg = format!("{:?}", bad.expect_err("an undefined name must not compile"));
    assert!(msg.contains("undefined_thing"), "{msg}");
}

#[test]
fn compiled_kernels_are_cached_by_precision_and_architecture() {
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("SKIPPED kernel cache: libnvrtc not found (see .ci/run)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let first = compile_cached_in(dir.path(), Precision::Bf16, "compute_90").unwrap();
    let files = || std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(files(), 1, "one PTX file cached");
    let again = compile_cached_in(dir.path(), Precision::Bf16, "compute_90").unwrap();
    assert_eq!(first, again);
    assert_eq!(files(), 1, "the second start reads the cache");
    compile_cached_in(dir.path(), Precision::Fp32, "compute_90").unwrap();
    compile_cached_in(dir.path(), Precision::Bf16, "compute_80").unwrap();
    assert_eq!(files(), 3, "precision and architecture are part of the key");
    // An unwritable cache still compiles.
    let blocked = dir.path().join("file-not-dir");
    std::fs::write(&blocked, "x").unwrap();
    assert!(compile_cached_in(&blocked, Precision::Bf16, "compute_90")
        .unwrap()
        .contains(".entry"));
}

/// The kernels `path` launches by name: the names after `launch…(`.
fn launches(path: &std::path::Path, launched: &mut Vec<(String, String)>) {
    let text = std::fs::read_to_string(path).unwrap();
    for (at, _) in text.match_indices(".launch") {
        let rest = &text[at..];
        let Some(open) = rest.find('(') else { continue };
        let args = rest[open + 1..].trim_start();
        if let Some(name) = args.strip_prefix('"') {
            let name = &name[..name.find('"').unwrap()];
            launched.push((
                path.file_name().unwrap().to_string_lossy().to_string(),
                name.to_string(),
            ));
        }
    }
}
