//! The bridge to `runtime/tests/gpu/autograd.py`: a kernel test puts its inputs and what
//! the kernels returned into a [`Case`], which writes them to a safetensors file and has
//! the script recompute them with PyTorch autograd in float64.

use std::path::Path;
use std::process::Command;

use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// A case's tensors: inputs by name, outputs as `out.NAME`, all f32 with their shapes.
#[derive(Default)]
pub struct Case(Vec<(String, Vec<f32>, Vec<usize>)>);

impl Case {
    pub fn put(&mut self, name: &str, v: &[f32], shape: &[usize]) {
        assert_eq!(v.len(), shape.iter().product::<usize>(), "{name}");
        self.0.push((name.into(), v.to_vec(), shape.to_vec()));
    }

    /// Writes the tensors and runs autograd.py on them; the script's report is printed.
    pub fn check(&self, python: &str, case: &str, dir: &Path) {
        if let Err(e) = self.compare(python, case, dir) {
            panic!("{e}");
        }
    }

    /// [`Case::check`] that returns the disagreement instead of failing on it.
    pub fn compare(&self, python: &str, case: &str, dir: &Path) -> Result<(), String> {
        let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = self
            .0
            .iter()
            .map(|(n, v, s)| {
                (
                    n.clone(),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    s.clone(),
                )
            })
            .collect();
        let views: Vec<(String, TensorView)> = bytes
            .iter()
            .map(|(n, b, s)| {
                (
                    n.clone(),
                    TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
                )
            })
            .collect();
        let path = dir.join(format!("{case}.safetensors"));
        safetensors::serialize_to_file(views, None, &path).unwrap();
        let script = script();
        let out = Command::new(python)
            .arg(&script)
            .arg(case.split(':').next().unwrap())
            .arg(&path)
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&out.stdout));
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{case}: kernels disagree with PyTorch autograd\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// autograd.py: from the repository root the test runs in (a bundle carried to a GPU
/// machine, whose checkout is elsewhere than where it was built), else beside the sources.
fn script() -> std::path::PathBuf {
    let here = Path::new("runtime/tests/gpu/autograd.py");
    if here.exists() {
        return here.to_path_buf();
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu/autograd.py");
    assert!(
        built.exists(),
        "autograd.py not found: run from the repository root"
    );
    built
}

pub fn python_with_torch() -> Option<String> {
    let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import torch, safetensors"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}
