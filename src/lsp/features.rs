//! What the editor asks for: diagnostics, hover, completion, the outline, inlay hints,
//! quick fixes, formatting. Each works on the
//! same `Checked` value `planc check` prints, so the editor and the command line never
//! disagree.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lsp_types::{
    CodeAction, CodeActionKind, CodeActionOrCommand, CompletionItem, CompletionItemKind,
    Diagnostic as LspDiagnostic, DiagnosticRelatedInformation, DiagnosticSeverity, DocumentSymbol,
    Hover, HoverContents, InlayHint, InlayHintLabel, InlayHintTooltip, Location, MarkupContent,
    MarkupKind, NumberOrString, SymbolKind, TextEdit, Url, WorkspaceEdit,
};
use planc_compiler::catalog::Catalog;
use planc_compiler::check::Checked;
use planc_compiler::schema;
use planc_lang::syntax::{Block, Entry, Item, SourceFile};
use planc_lang::{FileId, Severity, Span};

use super::position::{offset, range};
use crate::load::Overlay;
use crate::render;

/// Checks a document as `planc check` would, through the same front door (simulated step
/// time included).
pub fn analyze(path: &Path, open: &HashMap<PathBuf, String>) -> Option<Checked> {
    let opened = crate::load::open_with(path, &Overlay { open }, &[], &|_, _| {}).ok()?;
    Some(opened.checked)
}

/// The diagnostics of every file the check read, by file, so that an error in an import
/// shows in that file too.
pub fn diagnostics(checked: &Checked) -> Vec<(PathBuf, Vec<LspDiagnostic>)> {
    let files = &checked.sources.files;
    let mut by_file: Vec<Vec<LspDiagnostic>> = vec![Vec::new(); files.len()];
    for d in &checked.diagnostics {
        let (file, span) = d
            .primary
            .as_ref()
            .map_or((0, Span::new(0, 0)), |l| (l.file.0 as usize, l.span));
        let Some(entry) = files.get(file) else {
            continue;
        };
        let mut message = d.message.clone();
        if let Some(label) = d
            .primary
            .as_ref()
            .filter(|l| !l.message.is_empty() && !d.message.contains(&l.message))
        {
            message = format!("{message}: {}", label.message);
        }
        for n in &d.notes {
            message.push_str(&format!("\nnote: {n}"));
        }
        if let Some(h) = &d.help {
            message.push_str(&format!("\nhelp: {h}"));
        }
        let related: Vec<DiagnosticRelatedInformation> = d
            .secondary
            .iter()
            .filter_map(|l| {
                let f = files.get(l.file.0 as usize)?;
                Some(DiagnosticRelatedInformation {
                    location: Location::new(
                        Url::from_file_path(&f.path).ok()?,
                        range(&f.text, &f.lines, l.span),
                    ),
                    message: l.message.clone(),
                })
            })
            .collect();
        by_file[file].push(LspDiagnostic {
            range: range(&entry.text, &entry.lines, span),
            severity: Some(match d.severity {
                Severity::Error => DiagnosticSeverity::ERROR,
                Severity::Warning => DiagnosticSeverity::WARNING,
                Severity::Note => DiagnosticSeverity::INFORMATION,
            }),
            code: Some(NumberOrString::String(d.code.to_string())),
            source: Some("planc".into()),
            message,
            related_information: (!related.is_empty()).then_some(related),
            // Sent back with the editor's code-action request (LSP 3.16), so the quick fix
            // needs no second check of the plan.
            data: d
                .replacement
                .as_ref()
                .map(|r| serde_json::json!({ "replacement": r })),
            ..Default::default()
        });
    }
    files
        .iter()
        .zip(by_file)
        .map(|(f, ds)| (f.path.clone(), ds))
        .collect()
}

fn markdown(value: String) -> Hover {
    Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value,
        }),
        range: None,
    }
}

/// The innermost block around `at`, with the blocks enclosing it.
fn blocks_at(file: &SourceFile, at: usize) -> Vec<&Block> {
    let inside = |s: Span| (s.start as usize) <= at && at <= (s.end as usize);
    let mut chain = Vec::new();
    let mut entries: Vec<&Block> = file
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Block(b) => Some(b),
            Item::Import(_) => None,
        })
        .collect();
    while let Some(b) = entries.iter().copied().find(|b| inside(b.span)) {
        chain.push(b);
        entries = b.blocks().collect();
    }
    chain
}

pub fn hover(checked: &Checked, path: &Path, text: &str, at: usize) -> Option<Hover> {
    let file = checked.sources.files.iter().position(|f| f.path == path)?;
    // A diagnostic under the cursor: its code explained.
    for d in &checked.diagnostics {
        let Some(l) = &d.primary else { continue };
        if l.file == FileId(file as u32)
            && (l.span.start as usize) <= at
            && at <= (l.span.end as usize)
        {
            if let Some(c) = planc_lang::codes::lookup(d.code) {
                return Some(markdown(format!(
                    "**{}** ({}): {}\n\n{}",
                    c.id,
                    c.severity.as_str(),
                    c.title,
                    c.explanation
                )));
            }
        }
    }
    let syntax = &checked.sources.files[file].syntax;
    let chain = blocks_at(syntax, at);
    let block = *chain.last()?;
    let on = |s: Span| (s.start as usize) <= at && at <= (s.end as usize);
    // A block's header: what planc predicts for the plan.
    if chain.len() == 1 && on(block.header_span()) {
        let summary = render::summary(checked)?;
        return Some(markdown(format!("```text\n{summary}```")));
    }
    // An attribute's name: what the checked plan made of it.
    let attr = block.attrs().find(|a| on(a.name.span))?;
    let written = text.get(attr.value.span.range()).unwrap_or_default();
    let mut value = format!("`{}.{}` = `{written}`", block.kind.text, attr.name.text);
    let about = match block.kind.text.as_str() {
        "env" => planc_compiler::nccl_env::lookup(&attr.name.text).map(|v| {
            let mut s = v.description.clone();
            if let Some(r) = &v.replacement {
                s.push_str(&format!(" (now `{r}`)"));
            }
            s
        }),
        kind => planc_compiler::attr_docs::doc(kind, &attr.name.text).map(str::to_string),
    };
    if let Some(about) = about {
        value.push_str(&format!("\n\n{about}"));
    }
    // A built-in GPU named here (`cluster.gpu`, `group.gpu`, a `gpu` block's preset): the
    // figures the plan gets from the catalog.
    let names_a_gpu = matches!(
        (block.kind.text.as_str(), attr.name.text.as_str()),
        ("cluster" | "group", "gpu") | ("gpu", "preset")
    );
    if let Some(g) = names_a_gpu
        .then(|| Catalog::builtin().gpu(written.trim_matches('"')))
        .flatten()
    {
        value.push_str(&format!("\n\n`{}`: {}", g.name, gpu_summary(g)));
    }
    if block.kind.text == "parallel" {
        let report = serde_json::to_value(checked.report()).ok()?;
        if let Some(v) = decided(&report, &attr.name.text, written) {
            value.push_str(&format!(
                "\n\nin the checked plan: `{} = {v}`",
                attr.name.text
            ));
        }
    }
    Some(markdown(value))
}

/// The entry the cursor is in, from its start to the cursor: from the start of the line or
/// the last `{`, `}`, `,` or `;` on it outside brackets (`parallel { tp = 8, |`). `None`
/// in a comment.
fn entry_prefix(text: &str, at: usize) -> Option<&str> {
    use planc_lang::lexer::{lex, TokenKind};
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = &text[line_start..at];
    let lexed = lex(line, FileId(0));
    if !lexed.comments.is_empty() {
        return None;
    }
    let mut depth = 0usize;
    let mut start = 0;
    for t in &lexed.tokens {
        match t.kind {
            TokenKind::LParen | TokenKind::LBracket => depth += 1,
            TokenKind::RParen | TokenKind::RBracket => depth = depth.saturating_sub(1),
            TokenKind::LBrace | TokenKind::RBrace | TokenKind::Comma | TokenKind::Semi
                if depth == 0 =>
            {
                start = t.span.end as usize;
            }
            _ => {}
        }
    }
    Some(&line[start..])
}

/// A built-in GPU's figures in one line, as the catalog has them.
fn gpu_summary(g: &planc_compiler::plan::Gpu) -> String {
    use planc_compiler::plan::{LinkKind, Precision};
    let sixteen = g
        .peak(Precision::Bf16)
        .or(g.peak(Precision::Fp16))
        .unwrap_or(0.0);
    let link = Catalog::builtin().gpu_info(&g.name).map_or(
        match g.intra_node.kind {
            LinkKind::Pcie => "PCIe",
            _ => "NVLink",
        },
        |i| i.link_name.as_str(),
    );
    let domain = g
        .nvlink_domain
        .map_or(String::new(), |n| format!(", {n} GPUs a domain"));
    format!(
        "{:.1} GiB, {} TFLOPS 16-bit, {} TB/s HBM, {} GB/s {link} a direction{domain}",
        g.memory / 1024f64.powi(3),
        sixteen / 1e12,
        g.hbm_bandwidth / 1e12,
        g.intra_node.bandwidth / 1e9
    )
}

pub fn completion(text: &str, at: usize) -> Vec<CompletionItem> {
    let syntax = planc_lang::parse(text, FileId(0)).file;
    let Some(prefix) = entry_prefix(text, at) else {
        return Vec::new();
    };
    let word = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let item = |label: &str, kind: CompletionItemKind, detail: &str| CompletionItem {
        label: label.to_string(),
        kind: Some(kind),
        detail: (!detail.is_empty()).then(|| detail.to_string()),
        ..Default::default()
    };
    let chain = blocks_at(&syntax, at);
    // `name = |`: values.
    if let Some((name, value)) = prefix.split_once('=') {
        let name = name.trim();
        let value = value.trim_start();
        if !word(name) || !(word(value) || value.starts_with('"')) {
            return Vec::new();
        }
        let catalog = Catalog::builtin();
        let in_gpu = chain.last().is_some_and(|b| b.kind.text == "gpu");
        return match name {
            "gpu" => catalog
                .gpu_names()
                .map(|g| item(g, CompletionItemKind::ENUM_MEMBER, "built-in GPU"))
                .collect(),
            "preset" if in_gpu => catalog
                .gpus
                .iter()
                .map(|(_, g)| {
                    let about = gpu_summary(g);
                    item(&g.name, CompletionItemKind::ENUM_MEMBER, &about)
                })
                .collect(),
            "preset" => catalog
                .models
                .iter()
                .map(|m| {
                    let mut i = item(&m.name, CompletionItemKind::ENUM_MEMBER, "model preset");
                    if !value.starts_with('"') {
                        i.insert_text = Some(format!("\"{}\"", m.name));
                    }
                    i
                })
                .collect(),
            "sequence_parallel" | "tied_embeddings" | "bias" => ["true", "false"]
                .iter()
                .map(|v| item(v, CompletionItemKind::KEYWORD, ""))
                .collect(),
            _ if chain.last().is_some_and(|b| b.kind.text == "parallel") => {
                vec![item(
                    "auto",
                    CompletionItemKind::KEYWORD,
                    "let planc solve choose",
                )]
            }
            _ => Vec::new(),
        };
    }
    if !word(prefix.trim_start()) {
        return Vec::new();
    }
    // The start of an entry: the names this block accepts, less those already written.
    let Some(block) = chain.last() else {
        let mut items: Vec<CompletionItem> = schema::TOP_LEVEL
            .iter()
            .map(|k| item(k, CompletionItemKind::MODULE, "block"))
            .collect();
        items.push(item("import", CompletionItemKind::KEYWORD, ""));
        return items;
    };
    let Some(s) = schema::lookup(&block.kind.text) else {
        return Vec::new();
    };
    let written: Vec<&str> = block
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::Attr(a)
                if !((a.name.span.start as usize) <= at && at <= a.name.span.end as usize) =>
            {
                Some(a.name.text.as_str())
            }
            _ => None,
        })
        .collect();
    let detail = format!("{} attribute", block.kind.text);
    s.attrs
        .iter()
        .filter(|a| !written.contains(a))
        .map(|a| {
            let about = planc_compiler::attr_docs::doc(&block.kind.text, a);
            item(a, CompletionItemKind::FIELD, about.unwrap_or(&detail))
        })
        .chain(
            s.blocks
                .iter()
                .map(|b| item(b, CompletionItemKind::MODULE, "block")),
        )
        .collect()
}

/// The document's outline: each block (`cluster c`, `parallel`) with its attributes and
/// the blocks inside it, as the editor's outline and breadcrumbs show them.
pub fn symbols(text: &str) -> Vec<DocumentSymbol> {
    // The parser reads what it can of a broken file: the outline follows the typing.
    let file = planc_lang::parse(text, FileId(0)).file;
    let lines = planc_lang::LineIndex::new(text);
    let range = |s: Span| super::position::range(text, &lines, s);
    fn block(b: &Block, range: &dyn Fn(Span) -> lsp_types::Range, text: &str) -> DocumentSymbol {
        let name = match &b.name {
            Some(n) => format!("{} {}", b.kind.text, n.text),
            None => b.kind.text.clone(),
        };
        let children = b
            .entries
            .iter()
            .map(|e| match e {
                Entry::Attr(a) => symbol(
                    a.name.text.clone(),
                    text.get(a.value.span.range()).map(str::to_string),
                    SymbolKind::FIELD,
                    range(a.span),
                    range(a.name.span),
                    None,
                ),
                Entry::Block(b) => block(b, range, text),
            })
            .collect();
        symbol(
            name,
            None,
            SymbolKind::STRUCT,
            range(b.span),
            range(b.header_span()),
            Some(children),
        )
    }
    file.items
        .iter()
        .filter_map(|i| match i {
            Item::Block(b) => Some(block(b, &range, text)),
            Item::Import(_) => None,
        })
        .collect()
}

#[allow(deprecated)] // `deprecated`, a field every DocumentSymbol still carries
fn symbol(
    name: String,
    detail: Option<String>,
    kind: SymbolKind,
    range: lsp_types::Range,
    selection_range: lsp_types::Range,
    children: Option<Vec<DocumentSymbol>>,
) -> DocumentSymbol {
    DocumentSymbol {
        name,
        detail,
        kind,
        tags: None,
        deprecated: None,
        range,
        selection_range,
        children,
    }
}

/// After each `parallel` attribute the check decided (`auto`, a list of candidates), the
/// value it became: `dp = auto` shows `= 32` beside it.
pub fn inlay_hints(checked: &Checked, path: &Path, text: &str) -> Vec<InlayHint> {
    let Some(file) = checked.sources.files.iter().position(|f| f.path == path) else {
        return Vec::new();
    };
    let Ok(report) = serde_json::to_value(checked.report()) else {
        return Vec::new();
    };
    let syntax = &checked.sources.files[file].syntax;
    let lines = planc_lang::LineIndex::new(text);
    let mut out = Vec::new();
    let parallel = syntax.items.iter().filter_map(|i| match i {
        Item::Block(b) if b.kind.text == "parallel" => Some(b),
        _ => None,
    });
    for b in parallel {
        for a in b.attrs() {
            let written = text.get(a.value.span.range()).unwrap_or_default();
            let Some(v) = decided(&report, &a.name.text, written) else {
                continue;
            };
            out.push(InlayHint {
                position: super::position::position_in(text, &lines, a.value.span.end as usize),
                label: InlayHintLabel::String(format!("= {v}")),
                kind: None,
                text_edits: None,
                tooltip: Some(InlayHintTooltip::String(format!(
                    "what the check made of `{}`",
                    a.name.text
                ))),
                padding_left: Some(true),
                padding_right: None,
                data: None,
            });
        }
    }
    out
}

/// Code actions that write what the check decided in place of `auto` or a candidate list:
/// one for each such `parallel` attribute on the lines of `range`, and one for all of them
/// in the block, so that a layout `planc check` chose can be pinned.
pub fn pin_actions(
    checked: &Checked,
    path: &Path,
    text: &str,
    uri: &Url,
    range: lsp_types::Range,
) -> Vec<CodeActionOrCommand> {
    let Some(file) = checked.sources.files.iter().position(|f| f.path == path) else {
        return Vec::new();
    };
    let Ok(report) = serde_json::to_value(checked.report()) else {
        return Vec::new();
    };
    let lines = planc_lang::LineIndex::new(text);
    let action = |title: String, edits: Vec<TextEdit>| {
        CodeActionOrCommand::CodeAction(CodeAction {
            title,
            kind: Some(CodeActionKind::REFACTOR_REWRITE),
            edit: Some(WorkspaceEdit::new(HashMap::from([(uri.clone(), edits)]))),
            ..Default::default()
        })
    };
    let mut out = Vec::new();
    for item in &checked.sources.files[file].syntax.items {
        let Item::Block(b) = item else { continue };
        if b.kind.text != "parallel" {
            continue;
        }
        let mut all = Vec::new();
        for a in b.attrs() {
            let written = text.get(a.value.span.range()).unwrap_or_default();
            let Some(v) = decided(&report, &a.name.text, written) else {
                continue;
            };
            let at = super::position::range(text, &lines, a.value.span);
            let edit = TextEdit::new(at, v.clone());
            if at.start.line >= range.start.line && at.start.line <= range.end.line {
                out.push(action(
                    format!("Write `{} = {v}` (what the check decided)", a.name.text),
                    vec![edit.clone()],
                ));
            }
            all.push(edit);
        }
        if all.len() > 1 {
            out.push(action(
                "Write every value the check decided in `parallel`".into(),
                all,
            ));
        }
    }
    out
}

/// The value the check gave the `parallel` attribute `name` where it differs from what is
/// written (`auto`, a list of candidates).
fn decided(report: &serde_json::Value, name: &str, written: &str) -> Option<String> {
    let v = report["plan"].get(name)?.to_string();
    let v = v.trim_matches('"');
    (v != written).then(|| v.to_string())
}

/// A quick fix for each diagnostic the editor names that carries its replacement (a
/// misspelt name's likely spelling, another tool's name for a value): the text in place of
/// the diagnostic's range.
pub fn code_actions(uri: &Url, diagnostics: &[LspDiagnostic]) -> Vec<CodeActionOrCommand> {
    diagnostics
        .iter()
        .filter_map(|d| {
            let new = d.data.as_ref()?.get("replacement")?.as_str()?;
            let edit = TextEdit::new(d.range, new.to_string());
            Some(CodeActionOrCommand::CodeAction(CodeAction {
                title: format!("Replace with `{new}`"),
                kind: Some(CodeActionKind::QUICKFIX),
                diagnostics: Some(vec![d.clone()]),
                edit: Some(WorkspaceEdit::new(HashMap::from([(
                    uri.clone(),
                    vec![edit],
                )]))),
                is_preferred: Some(true),
                ..Default::default()
            }))
        })
        .collect()
}

/// The whole document in the one layout, or nothing when it has syntax errors (the editor
/// shows those already).
pub fn formatting(text: &str) -> Option<Vec<TextEdit>> {
    let formatted = planc_lang::format::format(text).ok()?;
    if formatted == text {
        return Some(Vec::new());
    }
    let end = super::position::position(text, text.len());
    Some(vec![TextEdit::new(
        lsp_types::Range::new(lsp_types::Position::new(0, 0), end),
        formatted,
    )])
}

/// The byte offset of an LSP position in `text`.
pub fn at(text: &str, pos: lsp_types::Position) -> usize {
    offset(text, pos)
}

/// Where the name under the cursor is defined: an import's file, the attribute a
/// reference (`ffn_hidden = 4 * hidden`, `model.hidden`) reads.
pub fn definition(checked: &Checked, path: &Path, at: usize) -> Option<Location> {
    let files = &checked.sources.files;
    let file = files.iter().position(|f| f.path == path)?;
    let syntax = &files[file].syntax;
    let on = |s: Span| (s.start as usize) <= at && at <= (s.end as usize);
    for item in &syntax.items {
        if let Item::Import(i) = item {
            if on(i.path_span) {
                let dir = path.parent().unwrap_or(Path::new("/"));
                let target = planc_compiler::source::normalize(&dir.join(&i.path));
                let start = lsp_types::Position::new(0, 0);
                return Some(Location::new(
                    Url::from_file_path(target).ok()?,
                    lsp_types::Range::new(start, start),
                ));
            }
        }
    }
    let block = *blocks_at(syntax, at).last()?;
    let attr = block.attrs().find(|a| on(a.value.span))?;
    let location = |i: usize, a: &planc_lang::syntax::Attr| {
        Some(Location::new(
            Url::from_file_path(&files[i].path).ok()?,
            range(&files[i].text, &files[i].lines, a.name.span),
        ))
    };
    match reference_at(&attr.value, at)? {
        Reference::Local(name) => {
            let a = block.attrs().find(|a| a.name.text == name)?;
            location(file, a)
        }
        // A path names a top-level block by kind, in any file the plan is made of.
        Reference::Path(kind, name) => files.iter().enumerate().find_map(|(i, f)| {
            f.syntax.items.iter().find_map(|item| match item {
                Item::Block(b) if b.kind.text == kind => {
                    location(i, b.attrs().find(|a| a.name.text == name)?)
                }
                _ => None,
            })
        }),
    }
}

enum Reference {
    /// `hidden` in `ffn_hidden = 4 * hidden`: an attribute of the same block.
    Local(String),
    /// `model.hidden`: a block kind and one of its attributes.
    Path(String, String),
}

fn reference_at(e: &planc_lang::syntax::Expr, at: usize) -> Option<Reference> {
    use planc_lang::syntax::ExprKind;
    let on = (e.span.start as usize) <= at && at <= (e.span.end as usize);
    if !on {
        return None;
    }
    match &e.kind {
        ExprKind::Ident(n) => Some(Reference::Local(n.clone())),
        ExprKind::Path(parts) if parts.len() == 2 => Some(Reference::Path(
            parts[0].text.clone(),
            parts[1].text.clone(),
        )),
        ExprKind::Chain { first, rest } => std::iter::once(&**first)
            .chain(rest.iter().map(|(_, x)| x))
            .find_map(|x| reference_at(x, at)),
        ExprKind::Neg(x) | ExprKind::Paren(x) => reference_at(x, at),
        ExprKind::List(xs) => xs.iter().find_map(|x| reference_at(x, at)),
        _ => None,
    }
}
