//! The plan being assembled by `planc import`: every value with the place in the inputs it
//! came from, every input value that found no place (with why), and every assumption made
//! where the inputs were silent. [`Draft::render`] writes it as `.tp` text (the formatter
//! then lays it out); nothing an input said is dropped without a line in the header.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// Where a value came from: the input file, its line when known, and the flag or key.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Origin {
    pub file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub key: String,
}

impl Origin {
    pub fn new(file: &str, line: Option<usize>, key: impl Into<String>) -> Origin {
        Origin {
            file: file.to_string(),
            line,
            key: key.into(),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{} ({}:{l})", self.key, self.file),
            None => write!(f, "{} ({})", self.key, self.file),
        }
    }
}

/// A value as the plan language writes it.
#[derive(Clone, Debug, PartialEq)]
pub enum V {
    Int(u64),
    Float(f64),
    Str(String),
    /// An enumeration value (`bf16`, `1f1b`, `rmsnorm`) or a catalog name (`H100_SXM_80GB`).
    Ident(String),
    Bool(bool),
    /// Text already in the plan language (a quantity such as `400 Gb/s`).
    Raw(String),
}

impl V {
    pub fn text(&self) -> String {
        match self {
            V::Int(n) => n.to_string(),
            V::Float(x) => float_text(*x),
            V::Str(s) => {
                let mut out = String::from("\"");
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        '\n' | '\r' => out.push(' '),
                        c => out.push(c),
                    }
                }
                out.push('"');
                out
            }
            V::Ident(s) | V::Raw(s) => s.clone(),
            V::Bool(b) => b.to_string(),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            V::Int(n) => Some(*n as f64),
            V::Float(x) => Some(*x),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            V::Int(n) => Some(*n),
            V::Float(x) if x.fract() == 0.0 && *x >= 0.0 => Some(*x as u64),
            _ => None,
        }
    }
}

/// A float as the plan language reads it back to the same value: Rust's shortest
/// round-trip form, which the lexer accepts (`0.0003`, `1e-8`, `20000000000.0`).
pub fn float_text(x: f64) -> String {
    format!("{x:?}")
}

impl fmt::Display for V {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// One attribute of the plan and where its value came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Placed {
    pub block: String,
    pub attr: String,
    pub value: String,
    pub from: Origin,
}

/// A flag or key of an input that is not in the plan, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unplaced {
    pub from: Origin,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub reason: String,
}

#[derive(Clone, Debug)]
struct Slot {
    value: V,
    from: Origin,
}

/// The plan under construction. Blocks are `cluster`, `model`, `train`, `parallel`, `job`
/// and `job.env`; a later input overrides an earlier one and the conflict is noted.
#[derive(Clone, Debug, Default)]
pub struct Draft {
    slots: BTreeMap<(String, String), Slot>,
    /// Insertion order of the attributes of each block, so the plan reads as the inputs did.
    order: Vec<(String, String)>,
    pub unplaced: Vec<Unplaced>,
    pub assumed: Vec<String>,
    /// Source text of a `cluster` block (and the `gpu` blocks it needs) taken from
    /// `--cluster`, written as it is instead of the cluster attributes.
    pub cluster_text: Option<String>,
    /// Name of the model block.
    pub model_name: Option<String>,
    /// The inputs, for the header.
    pub inputs: Vec<String>,
}

impl Draft {
    /// Sets `block.attr`; a different earlier value is replaced and the change noted.
    pub fn set(&mut self, block: &str, attr: &str, value: V, from: Origin) {
        let k = (block.to_string(), attr.to_string());
        if let Some(old) = self.slots.get(&k).cloned() {
            // The later input wins (a command line over the files it names); the earlier
            // value is listed with what replaced it.
            let reason = if old.value == value {
                format!("{block}.{attr} = {value}, which {from} says too")
            } else {
                format!(
                    "{block}.{attr} is {} from {from}, which comes later",
                    value.text()
                )
            };
            if old.from != from {
                self.unplaced(old.from, Some(old.value.text()), reason);
            }
        } else {
            self.order.push(k.clone());
        }
        self.slots.insert(k, Slot { value, from });
    }

    /// Sets `block.attr` only when no input did; says so in the header (`why`).
    pub fn assume(&mut self, block: &str, attr: &str, value: V, from: Origin, why: &str) {
        if self.has(block, attr) {
            return;
        }
        self.assumed
            .push(format!("{block}.{attr} = {}: {why}", value.text()));
        self.set(block, attr, value, from);
    }

    pub fn has(&self, block: &str, attr: &str) -> bool {
        self.slots
            .contains_key(&(block.to_string(), attr.to_string()))
    }

    pub fn get(&self, block: &str, attr: &str) -> Option<&V> {
        self.slots
            .get(&(block.to_string(), attr.to_string()))
            .map(|s| &s.value)
    }

    pub fn origin(&self, block: &str, attr: &str) -> Option<&Origin> {
        self.slots
            .get(&(block.to_string(), attr.to_string()))
            .map(|s| &s.from)
    }

    pub fn remove(&mut self, block: &str, attr: &str) -> Option<(V, Origin)> {
        let k = (block.to_string(), attr.to_string());
        self.order.retain(|o| o != &k);
        self.slots.remove(&k).map(|s| (s.value, s.from))
    }

    pub fn u64(&self, block: &str, attr: &str) -> Option<u64> {
        self.get(block, attr).and_then(V::as_u64)
    }

    pub fn f64(&self, block: &str, attr: &str) -> Option<f64> {
        self.get(block, attr).and_then(V::as_f64)
    }

    pub fn unplaced(&mut self, from: Origin, value: Option<String>, reason: impl Into<String>) {
        self.unplaced.push(Unplaced {
            from,
            value,
            reason: reason.into(),
        });
    }

    pub fn note(&mut self, text: impl Into<String>) {
        let t = text.into();
        if !self.assumed.contains(&t) {
            self.assumed.push(t);
        }
    }

    /// Every placed value, in the order written.
    pub fn placed(&self) -> Vec<Placed> {
        self.order
            .iter()
            .map(|k| {
                let s = &self.slots[k];
                Placed {
                    block: k.0.clone(),
                    attr: k.1.clone(),
                    value: s.value.text(),
                    from: s.from.clone(),
                }
            })
            .collect()
    }

    fn block_attrs(&self, block: &str) -> Vec<(&str, &Slot)> {
        self.order
            .iter()
            .filter(|k| k.0 == block)
            .map(|k| (k.1.as_str(), &self.slots[k]))
            .collect()
    }

    /// The plan as `.tp` text, before formatting: the header comments, then the blocks.
    pub fn render(&self, version: &str) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "# Imported by `planc import` (planc {version}) from {}.\n",
            self.inputs.join(", ")
        ));
        out.push_str("# Each value's origin is the comment beside it.\n");
        if !self.assumed.is_empty() {
            out.push_str("#\n# Assumed, or decided between the inputs:\n");
            for a in &self.assumed {
                out.push_str(&format!("#   - {}\n", one_line(a)));
            }
        }
        if !self.unplaced.is_empty() {
            out.push_str(
                "#\n# Not placed (planc has no attribute for these, or derives them itself):\n",
            );
            for u in &self.unplaced {
                let value = u
                    .value
                    .as_deref()
                    .map(|v| format!(" {}", one_line(v)))
                    .unwrap_or_default();
                let at = match u.from.line {
                    Some(l) => format!("{}:{l}", u.from.file),
                    None => u.from.file.clone(),
                };
                out.push_str(&format!(
                    "#   - {at}: {}{value}: {}\n",
                    one_line(&u.from.key),
                    one_line(&u.reason)
                ));
            }
        }
        out.push('\n');
        match &self.cluster_text {
            Some(t) => {
                out.push_str(t);
                out.push_str("\n\n");
            }
            None => out.push_str(&self.block("cluster", "cluster imported", &["inter_node"])),
        }
        let model = format!(
            "model {}",
            self.model_name.clone().unwrap_or_else(|| "imported".into())
        );
        out.push_str(&self.block("model", &model, &[]));
        out.push_str(&self.block("train", "train", &[]));
        out.push_str(&self.block("parallel", "parallel", &[]));
        if !self.block_attrs("job").is_empty() || !self.block_attrs("job.env").is_empty() {
            out.push_str(&self.block("job", "job", &["env"]));
        }
        out
    }

    /// One block with its nested blocks (`cluster.inter_node`, `job.env`).
    fn block(&self, key: &str, header: &str, nested: &[&str]) -> String {
        let mut out = format!("{header} {{\n");
        for (attr, slot) in self.block_attrs(key) {
            out.push_str(&format!(
                "    {attr} = {}  # {}\n",
                slot.value.text(),
                one_line(&slot.from.to_string())
            ));
        }
        for n in nested {
            let inner = self.block_attrs(&format!("{key}.{n}"));
            if inner.is_empty() {
                continue;
            }
            out.push_str(&format!("    {n} {{\n"));
            for (attr, slot) in inner {
                out.push_str(&format!(
                    "        {attr} = {}  # {}\n",
                    slot.value.text(),
                    one_line(&slot.from.to_string())
                ));
            }
            out.push_str("    }\n");
        }
        out.push_str("}\n\n");
        out
    }
}

/// Text for a comment: one line, no control characters.
pub fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `name` as an identifier of the plan language (`Llama-2-70b-hf` → `llama_2_70b_hf`).
pub fn ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    while s.contains("__") {
        s = s.replace("__", "_");
    }
    let s = s.trim_matches('_').to_string();
    match s.chars().next() {
        None => "imported".into(),
        Some(c) if c.is_ascii_digit() => format!("m_{s}"),
        _ if ["import", "auto", "true", "false"].contains(&s.as_str()) => format!("{s}_model"),
        _ => s,
    }
}
