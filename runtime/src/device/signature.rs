//! Each kernel's parameter list, read from the CUDA source that NVRTC compiles, so a launch
//! whose arguments do not match its kernel's declaration fails on the host with the
//! kernel's name and both lists. The driver takes a launch's arguments as untyped pointers:
//! a missing or mistyped one is read as garbage on the GPU (the kernel tests once launched
//! the optimizer with one argument too few after the kernel gained one, and crashed with a
//! segmentation fault instead of an error, 2026-11-28).

use std::collections::HashMap;

/// One parameter of a kernel, as the launch passes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    Ptr,
    I32,
    I64,
    F32,
}

impl Param {
    fn name(self) -> &'static str {
        match self {
            Param::Ptr => "pointer",
            Param::I32 => "int",
            Param::I64 => "long",
            Param::F32 => "float",
        }
    }
}

/// One declared parameter, from its declaration text (`const X* q`, `long long gbs`):
/// `None` for a type the launches cannot pass.
fn param(decl: &str) -> Option<Param> {
    if decl.contains('*') {
        return Some(Param::Ptr);
    }
    let words: Vec<&str> = decl
        .split_whitespace()
        .filter(|w| !matches!(*w, "const" | "__restrict__"))
        .collect();
    let (_, ty) = words.split_last()?;
    match ty.join(" ").as_str() {
        "int" | "unsigned" | "unsigned int" => Some(Param::I32),
        "long" | "long long" | "long int" | "unsigned long" => Some(Param::I64),
        "float" => Some(Param::F32),
        _ => None,
    }
}

/// The index just past the `)` that closes the `(` at `open`.
fn close(s: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &c) in s.iter().enumerate().skip(open) {
        match c {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Every `__global__` function of `source`, by the name it is declared with (a macro's
/// `flash_fwd_tc##D` as written), with its parameters; a kernel with a parameter the
/// launches cannot pass is left out (unchecked rather than refused).
pub fn parse(source: &str) -> HashMap<String, Vec<Param>> {
    // Macro bodies continue their lines with a backslash.
    let text = source.replace("\\\n", " ");
    let s = text.as_bytes();
    let mut out = HashMap::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("__global__") {
        let mut i = from + at + "__global__".len();
        from = i;
        let rest = text[i..].trim_start();
        let Some(rest) = rest.strip_prefix("void") else {
            continue;
        };
        i = text.len() - rest.trim_start().len();
        if text[i..].starts_with("__launch_bounds__") {
            let Some(open) = text[i..].find('(').map(|o| i + o) else {
                continue;
            };
            let Some(end) = close(s, open) else { continue };
            i = text.len() - text[end..].trim_start().len();
        }
        let name_len = text[i..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '#'))
            .unwrap_or(0);
        let name = &text[i..i + name_len];
        let open = i + name_len;
        if name.is_empty() || s.get(open) != Some(&b'(') {
            continue;
        }
        let Some(end) = close(s, open) else { continue };
        let list = text[open + 1..end - 1].trim();
        let params: Option<Vec<Param>> = if list.is_empty() || list == "void" {
            Some(Vec::new())
        } else {
            list.split(',').map(param).collect()
        };
        if let Some(p) = params {
            out.insert(name.to_string(), p);
        }
        from = end;
    }
    out
}

/// The declaration `kernel` comes from: its own name, or a macro's `prefix##N` whose
/// expansion it is (`flash_fwd_tc64` from `flash_fwd_tc##D`).
fn declared<'a>(decls: &'a HashMap<String, Vec<Param>>, kernel: &str) -> Option<&'a [Param]> {
    if let Some(p) = decls.get(kernel) {
        return Some(p);
    }
    decls.iter().find_map(|(name, p)| {
        let (prefix, _) = name.split_once("##")?;
        let tail = kernel.strip_prefix(prefix)?;
        (!tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit())).then_some(p.as_slice())
    })
}

/// The parameters of each of `kernels`, read from `source`: the launch-time table.
pub fn table<'k>(source: &str, kernels: &[&'k str]) -> HashMap<&'k str, Vec<Param>> {
    let decls = parse(source);
    kernels
        .iter()
        .filter_map(|&k| Some((k, declared(&decls, k)?.to_vec())))
        .collect()
}

/// Whether a launch of `kernel` with arguments of kinds `got` matches the declared `want`
/// (`None`: a kernel whose parameters were not read, unchecked); the message names both.
/// Called at every launch: the match allocates nothing, only the error builds its lists.
pub fn check<I>(kernel: &str, want: Option<&[Param]>, got: I) -> Result<(), String>
where
    I: IntoIterator<Item = Param> + Clone,
{
    let Some(want) = want else {
        return Ok(());
    };
    if want.iter().copied().eq(got.clone()) {
        return Ok(());
    }
    let got: Vec<Param> = got.into_iter().collect();
    let list = |p: &[Param]| p.iter().map(|x| x.name()).collect::<Vec<_>>().join(", ");
    Err(format!(
        "kernel {kernel} was launched with {} arguments ({}) but declares {} ({}): a launch \
         site is out of date with kernels.cu",
        got.len(),
        list(&got),
        want.len(),
        list(want)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cuda::{KERNELS, SOURCE};
    use Param::*;

    fn of(k: &str) -> Option<Vec<Param>> {
        table(SOURCE, KERNELS).remove(k)
    }

    #[test]
    fn every_kernel_loaded_has_a_checked_parameter_list() {
        let t = table(SOURCE, KERNELS);
        let missing: Vec<&str> = KERNELS
            .iter()
            .copied()
            .filter(|k| !t.contains_key(k))
            .collect();
        assert!(missing.is_empty(), "no parameter list read for {missing:?}");
    }

    #[test]
    fn lists_come_from_plain_macro_and_launch_bounded_declarations() {
        assert_eq!(of("cast_to_x"), Some(vec![Ptr, Ptr, I64]));
        assert_eq!(
            of("norm_fwd_v4"),
            Some(vec![Ptr, Ptr, Ptr, Ptr, Ptr, Ptr, I32, F32, I32])
        );
        let dkdv = of("flash_bwd_dkdv_tc128").unwrap();
        assert_eq!(dkdv.len(), 14);
        assert_eq!(&dkdv[..5], &[Ptr, Ptr, I64, I32, I32]);
        assert_eq!(of("adamw_flat").map(|p| p.len()), Some(18));
    }

    #[test]
    fn a_launch_one_argument_short_is_refused_with_both_lists() {
        let want = of("cast_to_x");
        let e = check("cast_to_x", want.as_deref(), [Ptr, Ptr]).unwrap_err();
        assert!(e.contains("cast_to_x"), "{e}");
        assert!(e.contains("2 arguments (pointer, pointer)"), "{e}");
        assert!(e.contains("declares 3 (pointer, pointer, long)"), "{e}");
        assert_eq!(check("cast_to_x", want.as_deref(), [Ptr, Ptr, I64]), Ok(()));
        assert!(check("cast_to_x", want.as_deref(), [Ptr, Ptr, I32]).is_err());
        assert_eq!(check("unread", None, [Ptr]), Ok(()));
    }

    #[test]
    fn a_parameter_of_a_type_no_launch_passes_leaves_the_kernel_unchecked() {
        let decls = parse("extern \"C\" { __global__ void k(double x, int n) {} }");
        assert!(!decls.contains_key("k"));
        let decls = parse("__global__ void none() {}\n__global__ void one(int n) {}");
        assert_eq!(decls["none"], Vec::<Param>::new());
        assert_eq!(decls["one"], vec![I32]);
    }
}
