//! The runtime's modules depend on each other one way: no module imports one that imports it,
//! directly or around a longer loop (a module's own submodules count as part of it). Read from the source (the `crate::`, `super::` and
//! `self::` paths each file names outside its tests), so a new import that closes a loop
//! fails here, on any machine, with the loop spelled out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module a file under `src` defines, as its path segments (`device/cuda.rs`:
/// [device, cuda]; `device/mod.rs`: [device]; `lib.rs`: []).
fn module_of(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
        segs.pop();
    }
    segs
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The paths `text` names from `prefix` on (`crate::a::b`, `super::{a, b::c}`), each as its
/// segments after the prefix; a brace group gives one path per item.
fn paths_after(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(at) = text[from..].find(prefix) {
        let start = from + at;
        from = start + prefix.len();
        let ident_before =
            start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        if ident_before {
            continue;
        }
        let mut head = Vec::new();
        let mut i = from;
        loop {
            let len = text[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(text.len() - i);
            if len == 0 {
                break;
            }
            head.push(text[i..i + len].to_string());
            i += len;
            if text[i..].starts_with("::") && !text[i + 2..].starts_with('{') {
                i += 2;
            } else {
                break;
            }
        }
        let group = if text[i..].starts_with("::{") {
            Some(i + 3)
        } else if head.is_empty() && text[i..].starts_with('{') {
            Some(i + 1)
        } else {
            None
        };
        if let Some(g) = group {
            let end = text[g..].find('}').map_or(text.len(), |e| g + e);
            for item in text[g..end].split(',') {
                let mut p = head.clone();
                p.extend(
                    item.trim()
                        .split("::")
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty() && s != "self" && s != "{"),
                );
                out.push(p);
            }
        } else if !head.is_empty() {
            out.push(head);
        }
    }
    out
}

/// `text` with `super::` inside each inline `mod name { … }` read as `self::`: the inline
/// module's parent is the file's own module.
fn inline_super(text: &str) -> String {
    let mut out = text.to_string();
    let mut from = 0;
    while let Some(at) = out[from..].find("mod ") {
        let start = from + at;
        from = start + 4;
        let rest = &out[from..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len == 0 || !rest[len..].trim_start().starts_with('{') {
            continue;
        }
        let open = from + len + rest[len..].find('{').unwrap();
        let mut depth = 0;
        let mut close = out.len();
        for (i, c) in out[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = out[open..close].replace("super::", "self::");
        out.replace_range(open..close, &body);
        from = open + body.len();
    }
    out
}

/// The runtime's module graph: each module's imports of other modules (the longest prefix
/// of each path that names a module; a path to an item of the crate root is the root).
fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut fs = Vec::new();
    files(&src, &mut fs);
    let texts: Vec<(Vec<String>, String)> = fs
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            // A file's tests may reach anywhere: they are not the module's dependencies.
            let text = inline_super(text.split("#[cfg(test)]").next().unwrap());
            (module_of(f.strip_prefix(&src).unwrap()), text)
        })
        .collect();
    let modules: BTreeSet<Vec<String>> = texts.iter().map(|(m, _)| m.clone()).collect();
    let resolve = |mut p: Vec<String>| -> Vec<String> {
        while !p.is_empty() && !modules.contains(&p) {
            p.pop();
        }
        p
    };
    let mut g = BTreeMap::new();
    for (m, text) in &texts {
        let parent = &m[..m.len().saturating_sub(1)];
        let mut deps = BTreeSet::new();
        // `use child::x` inside a module names its own child without a prefix (lib.rs's
        // re-exports): read as `self::child::x`.
        let mut text = text.clone();
        for c in modules
            .iter()
            .filter(|c| c.len() == m.len() + 1 && c.starts_with(m))
        {
            let child = c.last().unwrap();
            text = text.replace(&format!("use {child}::"), &format!("use self::{child}::"));
        }
        for (prefix, base) in [
            ("crate::", &[][..]),
            ("super::", parent),
            ("self::", &m[..]),
        ] {
            for p in paths_after(&text, prefix) {
                let mut full = base.to_vec();
                full.extend(p);
                let d = resolve(full);
                // A module's files below it are part of it (the engine's passes are its
                // `impl Engine` split by concern): a child reaching its ancestor's items is
                // not an import between modules. The crate root is no such parent: it is the
                // façade that re-exports the rooms.
                if d.is_empty() || !m.starts_with(&d) {
                    deps.insert(d);
                }
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

/// A loop of imports, if any: the modules around it, first repeated at the end.
fn find_loop(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit(
        m: &Vec<String>,
        g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<String>> {
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for d in g.get(m).into_iter().flatten() {
            match state.get(d) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == d).unwrap();
                    let mut cycle: Vec<String> = stack[at..].iter().map(|s| name(s)).collect();
                    cycle.push(name(d));
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(d, g, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in g.keys() {
        if !state.contains_key(m) {
            if let Some(c) = visit(m, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

#[test]
fn no_module_imports_one_that_imports_it() {
    let g = graph();
    assert!(g.len() > 40, "read only {} modules", g.len());
    if let Some(l) = find_loop(&g) {
        panic!("the runtime's imports go round: {}", l.join(" -> "));
    }
}

#[test]
fn the_rooms_point_from_probe_to_train_to_device() {
    let g = graph();
    let room = |m: &Vec<String>| m.first().cloned().unwrap_or_default();
    let rank = |r: &str| match r {
        "probe" => 3,
        "train" => 2,
        "device" => 1,
        "error" => 0,
        _ => 4,
    };
    for (m, deps) in &g {
        for d in deps {
            if m.is_empty() || room(m) == room(d) {
                continue;
            }
            assert!(
                rank(&room(m)) > rank(&room(d)),
                "{} imports {}: the rooms point probe -> train -> device -> error",
                name(m),
                name(d)
            );
        }
    }
}

#[test]
fn the_reader_sees_group_imports_and_refuses_a_planted_loop() {
    let p = paths_after("use super::{checkpoint, engine::Engine};", "super::");
    assert_eq!(
        p,
        vec![
            vec!["checkpoint".to_string()],
            vec!["engine".into(), "Engine".into()]
        ]
    );
    let mut g = BTreeMap::new();
    let (a, b) = (vec!["a".to_string()], vec!["b".to_string()]);
    g.insert(a.clone(), BTreeSet::from([b.clone()]));
    g.insert(b.clone(), BTreeSet::from([a.clone()]));
    assert_eq!(
        find_loop(&g),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
