//! The settings a launch artifact carries, as `key → value`, so that two plans' artifacts
//! can be compared setting by setting rather than line by line.
//!
//! What counts as a setting, by the artifact's kind: in JSON every leaf (`zero_optimization.
//! stage`); in TOML every `section.key`; elsewhere (shell scripts, Slurm batch files,
//! Kubernetes YAML, Python modules) every command-line flag with the word after it
//! (`--tensor-model-parallel-size 8`; a flag followed by another flag is a switch) and every
//! assignment at the start of a line (`NNODES=8`, `export NCCL_DEBUG="WARN"`, `LAYERS = 16`).
//! Code the templates write the same way for every plan yields the same pairs on both sides
//! and drops out of the comparison; what remains is what the plans changed.

use std::collections::BTreeMap;

/// Settings by key; a key seen more than once (a flag in two containers, a shell variable
/// set twice) keeps each distinct value, in order.
pub type Settings = BTreeMap<String, Vec<String>>;

pub fn settings(path: &str, contents: &str) -> Settings {
    let mut out = Settings::new();
    if path.ends_with(".json") {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(contents) {
            flatten("", &v, &mut out);
            return out;
        }
    }
    if path.ends_with(".toml") {
        toml_settings(contents, &mut out);
        return out;
    }
    // A flag's value is the next word on its line; in YAML, where a command is a list of
    // one word a line, the next item.
    let runs: Vec<Vec<String>> = if path.ends_with(".yaml") || path.ends_with(".yml") {
        vec![contents.lines().flat_map(line_words).collect()]
    } else {
        contents.lines().map(line_words).collect()
    };
    for words in &runs {
        flags(words, &mut out);
    }
    for line in contents.lines() {
        if let Some((k, v)) = assignment(line) {
            add(&mut out, k, v);
        }
    }
    out
}

fn flags(words: &[String], out: &mut Settings) {
    for (i, w) in words.iter().enumerate() {
        if !w.starts_with("--") || w.len() < 3 {
            continue;
        }
        let (flag, value) = match w.split_once('=') {
            Some((f, v)) => (f.to_string(), v.to_string()),
            None => {
                let next = words.get(i + 1).filter(|n| !n.starts_with("--"));
                (w.clone(), next.cloned().unwrap_or_default())
            }
        };
        add(out, flag, value);
    }
}

fn add(out: &mut Settings, key: String, value: String) {
    let values = out.entry(key).or_default();
    if !values.contains(&value) {
        values.push(value);
    }
}

fn flatten(prefix: &str, v: &serde_json::Value, out: &mut Settings) {
    let key = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                flatten(&key(k), v, out);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&key(&i.to_string()), v, out);
            }
        }
        serde_json::Value::String(s) => add(out, prefix.to_string(), s.clone()),
        other => add(out, prefix.to_string(), other.to_string()),
    }
}

fn toml_settings(contents: &str, out: &mut Settings) {
    let mut section = String::new();
    for line in contents.lines() {
        let line = line.trim();
        if line.starts_with('[') && line.ends_with(']') {
            section = line.trim_matches(['[', ']']).trim().to_string();
            continue;
        }
        if let Some((k, v)) = line.split_once('=').filter(|_| !line.starts_with('#')) {
            let k = k.trim();
            let key = if section.is_empty() {
                k.to_string()
            } else {
                format!("{section}.{k}")
            };
            add(out, key, unquote(strip_comment(v.trim())));
        }
    }
}

/// The words of one line as a shell reads them (quotes removed), without a comment, a line
/// continuation or a YAML list marker.
fn line_words(line: &str) -> Vec<String> {
    let line = line.trim();
    let line = line.strip_prefix("- ").unwrap_or(line);
    if line.starts_with('#') {
        return Vec::new();
    }
    let words = shlex::split(line).unwrap_or_else(|| {
        line.split_whitespace()
            .map(|w| unquote(w.trim_end_matches(',')))
            .collect()
    });
    words
        .into_iter()
        .take_while(|w| !w.starts_with('#'))
        .filter(|w| w != "\\")
        .map(|w| w.trim_end_matches(',').to_string())
        .collect()
}

/// `NAME=value`, `export NAME="value"`, `name = value` at the start of a line.
fn assignment(line: &str) -> Option<(String, String)> {
    let line = line.trim();
    if line.starts_with('#') {
        return None;
    }
    let line = line.strip_prefix("export ").unwrap_or(line);
    let (name, value) = line.split_once('=')?;
    let name = name.trim();
    let ok = !name.is_empty()
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    // `==` is a comparison; `(` starts an array or a call, not a value.
    if !ok || value.starts_with('=') || value.trim_start().starts_with('(') {
        return None;
    }
    let value = strip_comment(value.trim()).trim_end_matches(',').trim();
    if value.is_empty() {
        return None;
    }
    Some((name.to_string(), unquote(value)))
}

/// `value  # note` → `value`, where the `#` is outside quotes.
fn strip_comment(v: &str) -> &str {
    let mut quote = None;
    for (i, c) in v.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if i > 0 && v[..i].ends_with(char::is_whitespace) => {
                return v[..i].trim_end()
            }
            _ => {}
        }
    }
    v
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

/// One setting that differs: its key and the values on each side (`None`: absent there).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Differs {
    pub key: String,
    pub a: Option<String>,
    pub b: Option<String>,
}

/// The settings whose values differ, in key order.
pub fn differences(a: &Settings, b: &Settings) -> Vec<Differs> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let shown = |v: Option<&Vec<String>>| v.map(|v| v.join(" | "));
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (a.get(k), b.get(k));
            (x != y).then(|| Differs {
                key: k.clone(),
                a: shown(x),
                b: shown(y),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(s: &'a Settings, k: &str) -> Vec<&'a str> {
        s.get(k)
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    #[test]
    fn shell_flags_switches_and_variables() {
        let s = settings(
            "launch.sh",
            "NNODES=8\nexport NCCL_DEBUG=\"WARN\"  # quiet\nARGS=(\n    --tensor-model-parallel-size 8\n    --sequence-parallel\n    --position-embedding-type 'rope'\n    --lr=0.0003\n)\nexec torchrun --nnodes \"$NNODES\" \\\n  \"$ENTRYPOINT\"\n",
        );
        assert_eq!(get(&s, "NNODES"), ["8"]);
        assert_eq!(get(&s, "NCCL_DEBUG"), ["WARN"]);
        assert_eq!(get(&s, "--tensor-model-parallel-size"), ["8"]);
        assert_eq!(get(&s, "--sequence-parallel"), [""]);
        assert_eq!(get(&s, "--position-embedding-type"), ["rope"]);
        assert_eq!(get(&s, "--lr"), ["0.0003"]);
        assert_eq!(get(&s, "--nnodes"), ["$NNODES"]);
        assert!(!s.contains_key("ARGS"));
    }

    #[test]
    fn yaml_lists_json_and_toml() {
        let s = settings(
            "job.yaml",
            "command:\n  - \"torchrun\"\n  - \"--nnodes\"\n  - \"8\"\n  - \"--swiglu\"\n  - \"--tp\"\n  - \"2\"\n",
        );
        assert_eq!(get(&s, "--nnodes"), ["8"]);
        assert_eq!(get(&s, "--swiglu"), [""]);
        let s = settings(
            "ds_config.json",
            r#"{"zero_optimization": {"stage": 1}, "bf16": {"enabled": true}, "x": [4, "a"]}"#,
        );
        assert_eq!(get(&s, "zero_optimization.stage"), ["1"]);
        assert_eq!(get(&s, "bf16.enabled"), ["true"]);
        assert_eq!(get(&s, "x.1"), ["a"]);
        let s = settings(
            "job.toml",
            "[parallelism]\ntensor_parallel_degree = 2  # tp\n[job]\ndump_folder = \"out\"\n",
        );
        assert_eq!(get(&s, "parallelism.tensor_parallel_degree"), ["2"]);
        assert_eq!(get(&s, "job.dump_folder"), ["out"]);
    }

    #[test]
    fn only_what_differs_is_listed() {
        let a = settings("a.sh", "--tp 8\n--pp 4\n--sp\nX=1\n");
        let b = settings("a.sh", "--tp 4\n--pp 4\nX=1\n--cp 2\n");
        let d = differences(&a, &b);
        let keys: Vec<&str> = d.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["--cp", "--sp", "--tp"]);
        assert_eq!(d[0].a, None);
        assert_eq!(d[1].b, None);
        assert_eq!(d[2].b.as_deref(), Some("4"));
    }
}
