//! Command-line flags as argparse reads them (`--flag value`, `--flag=value`, switches,
//! flags of several values), against a table of the flags a format places. The tables are
//! data (`megatron.rs`, `script.rs`, `llamafactory.rs`); a flag in none of them is listed
//! with the value it had.

use super::draft::{Draft, Origin, V};
use super::shell::Word;

/// How many values a flag takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arity {
    Switch,
    One,
    /// `nargs='+'`: every word up to the next flag.
    Many,
}

/// How a value becomes a plan value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Int,
    Float,
    Str,
    Bool,
}

/// Where a flag goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum To {
    /// `block.attr`, the value read as `Kind`.
    Attr(&'static str, &'static str, Kind),
    /// A switch that sets `block.attr` to a value (plan text: `true`, `bf16`, `1`).
    Set(&'static str, &'static str, &'static str),
    /// Placed by the format's own code, under this name.
    Special(&'static str),
    /// Known, and not placed: why.
    Skip(&'static str),
}

pub struct Flag {
    pub names: &'static [&'static str],
    pub arity: Arity,
    pub to: To,
}

pub const fn flag(names: &'static [&'static str], arity: Arity, to: To) -> Flag {
    Flag { names, arity, to }
}

/// One flag as given: its name, its values, the line it was written on.
#[derive(Clone, Debug, PartialEq)]
pub struct Given {
    pub key: String,
    pub values: Vec<String>,
    pub line: usize,
    pub unresolved: bool,
    /// How the input wrote it, where that is not the flag (a YAML config's `model.num_layers`
    /// for `--num-layers`): what the plan's origins name.
    pub shown: Option<String>,
}

impl Given {
    /// Where it came from, as the input wrote it.
    pub fn origin(&self, file: &str) -> Origin {
        Origin::new(
            file,
            Some(self.line),
            self.shown.clone().unwrap_or_else(|| self.key.clone()),
        )
    }

    pub fn value(&self) -> Option<&str> {
        self.values.first().map(String::as_str)
    }

    pub fn joined(&self) -> Option<String> {
        (!self.values.is_empty()).then(|| self.values.join(" "))
    }
}

pub fn lookup<'a>(table: &'a [Flag], key: &str) -> Option<&'a Flag> {
    table.iter().find(|f| f.names.contains(&key))
}

fn is_flag(w: &str) -> bool {
    w.starts_with('-') && w.len() > 1 && w.parse::<f64>().is_err()
}

/// The flags of `args`; words that belong to no flag are returned apart.
pub fn parse(args: &[Word], table: &[Flag]) -> (Vec<Given>, Vec<Word>) {
    let mut out = Vec::new();
    let mut loose = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let w = &args[i];
        if !is_flag(&w.text) {
            loose.push(w.clone());
            i += 1;
            continue;
        }
        let (key, inline) = match w.text.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (w.text.clone(), None),
        };
        let mut g = Given {
            key,
            values: inline.into_iter().collect(),
            line: w.line,
            unresolved: w.unresolved,
            shown: None,
        };
        i += 1;
        let arity = lookup(table, &g.key).map(|f| f.arity);
        if g.values.is_empty() {
            match arity {
                Some(Arity::Switch) => {}
                Some(Arity::One) => {
                    if let Some(n) = args.get(i) {
                        g.values.push(n.text.clone());
                        g.unresolved |= n.unresolved;
                        i += 1;
                    }
                }
                // Unknown flags take what follows up to the next flag, as `nargs='*'` would.
                Some(Arity::Many) | None => {
                    while let Some(n) = args.get(i).filter(|n| !is_flag(&n.text)) {
                        g.values.push(n.text.clone());
                        g.unresolved |= n.unresolved;
                        i += 1;
                    }
                }
            }
        }
        out.push(g);
    }
    (out, loose)
}

/// Places the flags whose table entry says where; returns the special ones for the format's
/// code. Unknown flags are listed as `unknown`.
pub fn place(
    given: Vec<Given>,
    table: &[Flag],
    draft: &mut Draft,
    file: &str,
    unknown: &str,
) -> Vec<(&'static str, Given)> {
    let mut special = Vec::new();
    for g in given {
        let from = g.origin(file);
        let Some(f) = lookup(table, &g.key) else {
            draft.unplaced(from, g.joined(), unknown);
            continue;
        };
        if g.unresolved {
            draft.unplaced(
                from,
                g.joined(),
                "its value is only known when the script runs (a command's output or a variable \
                 the script does not set)",
            );
            continue;
        }
        match f.to {
            To::Attr(block, attr, kind) => match g.value().and_then(|v| typed(v, kind)) {
                Some(v) => draft.set(block, attr, v, from),
                None => draft.unplaced(from, g.joined(), format!("not a value of {block}.{attr}")),
            },
            To::Set(block, attr, text) => draft.set(block, attr, plan_value(text), from),
            To::Special(name) => special.push((name, g)),
            To::Skip(why) => draft.unplaced(from, g.joined(), why),
        }
    }
    special
}

/// A flag's text as a value of `kind`.
pub fn typed(v: &str, kind: Kind) -> Option<V> {
    let v = v.trim();
    match kind {
        Kind::Int => int(v).map(V::Int),
        Kind::Float => v
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .map(V::Float),
        Kind::Str => Some(V::Str(v.to_string())),
        Kind::Bool => boolean(v).map(V::Bool),
    }
}

/// An integer, also when written as a float (`1e3`, `8.0`).
pub fn int(v: &str) -> Option<u64> {
    v.parse::<u64>().ok().or_else(|| {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x < 1e18)
            .map(|x| x as u64)
    })
}

pub fn boolean(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Plan text in a table (`true`, `bf16`, `1`) as a value.
pub fn plan_value(text: &str) -> V {
    if let Ok(n) = text.parse::<u64>() {
        V::Int(n)
    } else if let Some(b) = boolean(text).filter(|_| text == "true" || text == "false") {
        V::Bool(b)
    } else {
        V::Ident(text.to_string())
    }
}
