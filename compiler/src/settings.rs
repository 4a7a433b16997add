//! Command-line settings, `--set PATH=VALUE`: a plan changed without editing it.
//!
//! Each setting becomes a file of its own in the [`SourceMap`] (shown as `--set`, its text
//! the flag's argument) holding the one block the path names, and that file imports the
//! plan (or the setting before it). A block written again in a file that imports the plan
//! overrides it attribute by attribute (`resolve`), so a setting is exactly the override a
//! user could write in a file, and every diagnostic about its value points at the flag as
//! typed. Paths are checked against the schema here, with did-you-mean, before anything is
//! merged.
//!
//! The value is an expression of the language (`4`, `400 Gb/s`, `[2, 4]`, `auto`,
//! `H200_SXM_141GB`). Text that is not one (`nvcr.io/nvidia/pytorch:24.01-py3`), or a bare
//! word given to an attribute that takes text, is taken as a string, so the shell's quoting
//! is all a user needs; a number with an unknown unit stays an error with its suggestion.

use planc_lang::codes;
use planc_lang::parser::{parse_setting, Setting};
use planc_lang::syntax::{Attr, Block, Entry, Expr, ExprKind, Ident, Item, SourceFile};
use planc_lang::{Diagnostic, FileId, Span};

use crate::schema::{self, did_you_mean, BlockSchema, Naming};
use crate::source::SourceMap;

/// What diagnostics call the settings' files.
pub const DISPLAY: &str = "--set";

/// Adds one file per setting to `map`, each importing the one before it (the first imports
/// `root`), so a later setting of the same attribute wins. Returns the files in merge order
/// and the diagnostics of settings that could not be read; those add no block.
pub fn add(map: &mut SourceMap, root: FileId, sets: &[String]) -> (Vec<FileId>, Vec<Diagnostic>) {
    let mut files = Vec::new();
    let mut diagnostics = Vec::new();
    let mut last = root;
    for text in sets {
        let id = FileId(map.files.len() as u32);
        let (block, diags) = setting_block(text, id);
        diagnostics.extend(diags);
        let syntax = SourceFile {
            items: block.map(Item::Block).into_iter().collect(),
            comments: Vec::new(),
        };
        last = map.add_parsed(DISPLAY.to_string(), text.clone(), syntax, vec![last]);
        files.push(last);
    }
    (files, diagnostics)
}

/// The block one `--set` writes, or why there is none.
fn setting_block(text: &str, file: FileId) -> (Option<Block>, Vec<Diagnostic>) {
    let (parsed, diags) = parse_setting(text, file);
    let Some(Setting { path, value }) = parsed else {
        return match as_text(text, file, &diags) {
            Some(s) => setting_block_of(s, file),
            None => (None, diags),
        };
    };
    match shape(&path, file) {
        Ok(shape) => {
            let value = match &value.kind {
                ExprKind::Ident(word) if shape.takes_text() => Expr {
                    kind: ExprKind::Str(word.clone()),
                    span: value.span,
                },
                _ => value,
            };
            (Some(shape.build(value)), Vec::new())
        }
        Err(d) => (None, vec![*d]),
    }
}

/// A setting whose value is not an expression, read with its value as text: the path is
/// what precedes the first `=`. `None` when the path itself is bad, or the value's trouble
/// is a number (an unknown unit, a malformed exponent), which is worth its own error.
fn as_text(text: &str, file: FileId, diags: &[Diagnostic]) -> Option<Setting> {
    let eq = text.find('=')?;
    let number_trouble = diags
        .iter()
        .any(|d| d.code == codes::P0003.id || d.code == codes::P0004.id);
    if number_trouble {
        return None;
    }
    let (path, _) = parse_setting(&format!("{}=0", &text[..eq]), file);
    let path = path?.path;
    let value = text[eq + 1..].trim();
    if value.is_empty() {
        return None;
    }
    let start = eq + 1 + (text[eq + 1..].len() - text[eq + 1..].trim_start().len());
    Some(Setting {
        path,
        value: Expr {
            kind: ExprKind::Str(value.to_string()),
            span: Span::new(start, start + value.len()),
        },
    })
}

fn setting_block_of(s: Setting, file: FileId) -> (Option<Block>, Vec<Diagnostic>) {
    match shape(&s.path, file) {
        Ok(shape) => (Some(shape.build(s.value)), Vec::new()),
        Err(d) => (None, vec![*d]),
    }
}

/// A path checked against the schema: the blocks (each with its name, if it takes one)
/// and the attribute.
struct Shape<'p> {
    blocks: Vec<(&'p Ident, Option<&'p Ident>)>,
    attr: &'p Ident,
    kind: &'static str,
}

impl Shape<'_> {
    fn takes_text(&self) -> bool {
        schema::TEXT_ATTRS.contains(&(self.kind, self.attr.text.as_str()))
    }

    fn build(&self, value: Expr) -> Block {
        let attr = Attr {
            name: self.attr.clone(),
            span: self.attr.span.to(value.span),
            value,
        };
        let end = attr.span;
        let mut entry = Entry::Attr(attr);
        let mut block = None;
        for (kind, name) in self.blocks.iter().rev() {
            let b = Block {
                kind: (*kind).clone(),
                name: name.cloned(),
                entries: vec![entry],
                span: kind.span.to(end),
            };
            entry = Entry::Block(b.clone());
            block = Some(b);
        }
        block.expect("a path has a block")
    }
}

/// Walks the path through the schema: a top-level block, its name where it needs one,
/// nested blocks (a `group` with its name), then one attribute.
fn shape(path: &[Ident], file: FileId) -> Result<Shape<'_>, Box<Diagnostic>> {
    let first = &path[0];
    let Some(top) = schema::TOP_LEVEL
        .contains(&first.text.as_str())
        .then(|| schema::lookup(&first.text))
        .flatten()
    else {
        return Err(Box::new(unknown_top(first, file)));
    };
    let mut blocks = Vec::new();
    let mut i = 1;
    let mut at: &BlockSchema = top;
    let mut kind_ident = first;
    loop {
        let name = if at.naming == Naming::Required {
            let Some(n) = path.get(i).filter(|_| i + 1 < path.len()) else {
                return Err(Box::new(incomplete(path, i, file, at, true)));
            };
            i += 1;
            Some(n)
        } else {
            None
        };
        blocks.push((kind_ident, name));
        let Some(seg) = path.get(i) else {
            return Err(Box::new(incomplete(path, i, file, at, false)));
        };
        if i + 1 == path.len() {
            return attribute(at, path, file).map(|kind| Shape {
                blocks,
                attr: seg,
                kind,
            });
        }
        match at.blocks.iter().find(|b| **b == seg.text) {
            Some(b) => {
                at = schema::lookup(b).expect("nested blocks have schemas");
                kind_ident = seg;
                i += 1;
            }
            None => return Err(Box::new(not_a_block(at, seg, file))),
        }
    }
}

/// The last segment must be an attribute of the block it ends in.
fn attribute(
    at: &BlockSchema,
    path: &[Ident],
    file: FileId,
) -> Result<&'static str, Box<Diagnostic>> {
    let seg = &path[path.len() - 1];
    let name = seg.text.as_str();
    if at.free_attrs || at.attrs.contains(&name) {
        return Ok(at.kind);
    }
    if at.blocks.contains(&name) {
        let first = schema::lookup(name)
            .and_then(|s| s.attrs.first().copied())
            .unwrap_or("ATTRIBUTE");
        let d = Diagnostic::new(
            codes::P0230,
            format!("`--set` names the block `{name}`, not an attribute"),
        )
        .at(file, seg.span, "a block")
        .help(format!(
            "name one of its attributes: `--set {}.{first}=VALUE`",
            joined(path)
        ));
        return Err(Box::new(d));
    }
    let d = Diagnostic::new(
        codes::P0204,
        format!("unknown attribute `{name}` in `{}`", at.kind),
    )
    .at(file, seg.span, "unknown attribute");
    Err(Box::new(
        match did_you_mean(name, at.attrs.iter().copied()) {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help(format!("`{}` accepts: {}", at.kind, at.attrs.join(", "))),
        },
    ))
}

fn unknown_top(first: &Ident, file: FileId) -> Diagnostic {
    let d = Diagnostic::new(codes::P0201, format!("unknown block `{}`", first.text)).at(
        file,
        first.span,
        "not a top-level block",
    );
    // `--set tp=4`: the attribute without its block.
    let owner = schema::SCHEMAS
        .iter()
        .filter(|s| schema::TOP_LEVEL.contains(&s.kind))
        .find(|s| s.attrs.contains(&first.text.as_str()));
    if let Some(s) = owner {
        return d.help(format!(
            "`{}` is an attribute of `{}`: `--set {}.{}=VALUE`",
            first.text, s.kind, s.kind, first.text
        ));
    }
    match did_you_mean(&first.text, schema::TOP_LEVEL.iter().copied()) {
        Some(s) => d.help(format!("did you mean `{s}`?")),
        None => d.help(format!(
            "a path starts with a block: {}",
            schema::TOP_LEVEL.join(", ")
        )),
    }
}

fn not_a_block(at: &BlockSchema, seg: &Ident, file: FileId) -> Diagnostic {
    let name = seg.text.as_str();
    let d = Diagnostic::new(
        codes::P0201,
        format!("unknown block `{name}` in `{}`", at.kind),
    )
    .at(file, seg.span, "not a block here");
    if at.attrs.contains(&name) {
        return d.help(format!(
            "`{name}` is an attribute of `{}`; the path ends with it",
            at.kind
        ));
    }
    let candidates = at.blocks.iter().chain(at.attrs.iter()).copied();
    match did_you_mean(name, candidates) {
        Some(s) => d.help(format!("did you mean `{s}`?")),
        None if at.blocks.is_empty() => d.help(format!(
            "`{}` holds no blocks; its attributes: {}",
            at.kind,
            at.attrs.join(", ")
        )),
        None => d.help(format!("`{}` may hold: {}", at.kind, at.blocks.join(", "))),
    }
}

/// The path stops at a block (or, at segment `i`, before a block's name).
fn incomplete(
    path: &[Ident],
    i: usize,
    file: FileId,
    at: &BlockSchema,
    needs_name: bool,
) -> Diagnostic {
    let span = path[0].span.to(path[path.len() - 1].span);
    let written = joined(&path[..i.min(path.len())]);
    // `gpu.memory=...`: the name is missing before an attribute the block has; say that one.
    let attr = path
        .get(i)
        .map(|p| p.text.as_str())
        .filter(|t| needs_name && at.attrs.contains(t))
        .or(at.attrs.first().copied())
        .unwrap_or("ATTRIBUTE");
    let (what, example) = if needs_name {
        (
            format!("a `{}` block needs its name in the path", at.kind),
            format!("{written}.NAME.{attr}=VALUE"),
        )
    } else {
        (
            format!("`{written}` is a block; `--set` names an attribute"),
            format!("{written}.{attr}=VALUE"),
        )
    };
    Diagnostic::new(codes::P0230, what)
        .at(file, span, "not an attribute")
        .help(format!("write `--set {example}`"))
}

fn joined(path: &[Ident]) -> String {
    let parts: Vec<&str> = path.iter().map(|i| i.text.as_str()).collect();
    parts.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> (Option<Block>, Vec<Diagnostic>) {
        setting_block(text, FileId(1))
    }

    fn attr_of(b: &Block) -> (Vec<String>, Attr) {
        let mut kinds = vec![b.kind.text.clone()];
        let mut b = b;
        loop {
            match &b.entries[0] {
                Entry::Attr(a) => return (kinds, a.clone()),
                Entry::Block(c) => {
                    kinds.push(c.kind.text.clone());
                    b = c;
                }
            }
        }
    }

    #[test]
    fn paths_become_nested_blocks_with_spans_into_the_flag() {
        let text = "cluster.inter_node.bandwidth=400Gb/s";
        let (b, d) = one(text);
        assert!(d.is_empty(), "{d:?}");
        let (kinds, a) = attr_of(&b.unwrap());
        assert_eq!(kinds, ["cluster", "inter_node"]);
        assert_eq!(a.name.text, "bandwidth");
        assert_eq!(&text[a.value.span.range()], "400Gb/s");
        let (b, _) = one("cluster.group.a100.nodes=4");
        let b = b.unwrap();
        let Entry::Block(g) = &b.entries[0] else {
            panic!()
        };
        assert_eq!(g.name.as_ref().unwrap().text, "a100");
        let (b, _) = one("gpu.MI300X.memory=192 GiB");
        assert_eq!(b.unwrap().name.unwrap().text, "MI300X");
    }

    #[test]
    fn text_that_is_not_an_expression_is_a_string_and_units_stay_errors() {
        let text = "job.image=nvcr.io/nvidia/pytorch:24.01-py3";
        let (b, d) = one(text);
        assert!(d.is_empty(), "{d:?}");
        let (_, a) = attr_of(&b.unwrap());
        assert_eq!(
            a.value.kind,
            ExprKind::Str("nvcr.io/nvidia/pytorch:24.01-py3".into())
        );
        assert_eq!(
            &text[a.value.span.range()],
            "nvcr.io/nvidia/pytorch:24.01-py3"
        );
        let (_, a) = attr_of(&one("job.name=nightly").0.unwrap());
        assert_eq!(a.value.kind, ExprKind::Str("nightly".into()));
        // An enumeration stays a name.
        let (_, a) = attr_of(&one("job.framework=deepspeed").0.unwrap());
        assert_eq!(a.value.kind, ExprKind::Ident("deepspeed".into()));
        let (b, d) = one("cluster.inter_node.bandwidth=400 Gbit/s");
        assert!(b.is_none());
        assert_eq!(d[0].code, "P0003", "{d:?}");
    }

    #[test]
    fn bad_paths_say_what_to_write() {
        let cases = [
            ("parallel.tpp=4", "P0204", "did you mean `tp`?"),
            ("tp=4", "P0201", "`--set parallel.tp=VALUE`"),
            ("paralel.tp=4", "P0201", "did you mean `parallel`?"),
            ("parallel=4", "P0230", "parallel.tp=VALUE"),
            (
                "cluster.inter_node=4",
                "P0230",
                "--set cluster.inter_node.kind=VALUE",
            ),
            ("gpu.memory=80 GB", "P0230", "--set gpu.NAME.memory=VALUE"),
            (
                "cluster.intra_nod.bandwidth=1 GB/s",
                "P0201",
                "did you mean `intra_node`?",
            ),
            ("parallel.tp.x=1", "P0201", "the path ends with it"),
            ("parallel.tp", "P0005", "PATH=VALUE"),
        ];
        for (text, code, help) in cases {
            let (b, d) = one(text);
            assert!(b.is_none(), "{text}");
            assert_eq!(d.len(), 1, "{text}: {d:?}");
            assert_eq!(d[0].code, code, "{text}: {d:?}");
            let h = d[0].help.clone().unwrap_or_default();
            assert!(h.contains(help), "{text}: {h}");
            assert_eq!(d[0].primary.as_ref().unwrap().file, FileId(1));
        }
    }
}
