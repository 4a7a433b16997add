//! `planc fmt`: the one layout of a `.tp` file.
//!
//! The formatter prints the syntax tree again in one layout: four-space indentation, one
//! entry per line, one blank line between top-level blocks, single spaces around `=` and
//! operators. Every leaf (number, quantity, string, name) is copied from the source as
//! written, so `1_536` stays `1_536` and `80GiB` becomes `80 GiB`, never `85899345920`.
//! Comments stay where they were: one after an entry stays after it, one on its own line
//! stays between the same entries; blank lines the user left between entries are kept (one
//! at most). A block written on one line stays on one line when it fits, the way plans write
//! `inter_node { kind = infiniband, ... }`.
//!
//! A file with syntax errors is not formatted: its tree is incomplete, and printing it would
//! drop what the parser skipped. The output is checked before it is returned: it must parse
//! to the same tree and keep every comment, in order; otherwise [`format`] refuses rather
//! than lose anything.

use crate::diagnostic::Diagnostic;
use crate::lexer::Comment;
use crate::parser::parse;
use crate::span::{FileId, Span};
use crate::syntax::*;

const INDENT: &str = "    ";
/// Lines a one-line block may take before it is laid out over several.
const WIDTH: usize = 100;

#[derive(Debug)]
pub enum FormatError {
    /// The file has syntax errors (the diagnostics say which); it is left as it is.
    Syntax(Vec<Diagnostic>),
    /// The formatted text would not mean the same as the source. A bug in planc, reported
    /// instead of writing anything.
    Changed(String),
}

/// Formats a whole file.
pub fn format(src: &str) -> Result<String, FormatError> {
    let parsed = parse(src, FileId(0));
    let errors: Vec<Diagnostic> = parsed
        .diagnostics
        .into_iter()
        .filter(Diagnostic::is_error)
        .collect();
    if !errors.is_empty() {
        return Err(FormatError::Syntax(errors));
    }
    let mut p = Printer {
        src,
        comments: &parsed.file.comments,
        next_comment: 0,
        lines: Vec::new(),
    };
    p.items(&parsed.file.items);
    let mut out = render_lines(&p.lines);
    while out.ends_with('\n') {
        out.pop();
    }
    if !out.is_empty() {
        out.push('\n');
    }
    verify(&parsed.file, &out)?;
    // Line ends and a byte order mark are the editor's business: they stay as they were
    // (the first line end decides), so that formatting a Windows file changes only layout.
    if src.find('\n').is_some_and(|i| src[..i].ends_with('\r')) {
        out = out.replace('\n', "\r\n");
    }
    if src.starts_with('\u{feff}') {
        out.insert(0, '\u{feff}');
    }
    Ok(out)
}

/// The promise that formatting changes only layout: same tree, same comments.
fn verify(before: &SourceFile, text: &str) -> Result<(), FormatError> {
    let after = parse(text, FileId(0));
    if after.diagnostics.iter().any(Diagnostic::is_error) {
        return Err(FormatError::Changed("the output does not parse".into()));
    }
    if shape::items(&before.items) != shape::items(&after.file.items) {
        return Err(FormatError::Changed(
            "the output parses to another tree".into(),
        ));
    }
    // Trailing spaces are layout; everything else in a comment must survive.
    let texts = |f: &SourceFile| {
        f.comments
            .iter()
            .map(|c| c.text.trim_end().to_string())
            .collect::<Vec<_>>()
    };
    if texts(before) != texts(&after.file) {
        return Err(FormatError::Changed("a comment moved or was lost".into()));
    }
    Ok(())
}

struct Printer<'a> {
    src: &'a str,
    comments: &'a [Comment],
    next_comment: usize,
    lines: Vec<Line>,
}

/// An output line: code, and the comment that ends it, if any.
#[derive(Default)]
struct Line {
    code: String,
    comment: Option<String>,
}

/// Joins the lines, aligning the trailing comments of consecutive lines at one column (as
/// gofmt does), so that a column of remarks survives entries changing length.
fn render_lines(lines: &[Line]) -> String {
    // Columns are counted in characters: a value may hold `×`.
    let indent = |l: &Line| l.code.len() - l.code.trim_start().len();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let mut j = i + 1;
        if lines[i].comment.is_some() && !lines[i].code.is_empty() {
            while j < lines.len()
                && lines[j].comment.is_some()
                && !lines[j].code.is_empty()
                && indent(&lines[j]) == indent(&lines[i])
                && !lines[j].code.ends_with('{')
                && !lines[i].code.ends_with('{')
            {
                j += 1;
            }
        }
        let column = lines[i..j]
            .iter()
            .map(|l| l.code.chars().count())
            .max()
            .unwrap_or(0);
        for l in &lines[i..j] {
            out.push_str(&l.code);
            if let Some(c) = &l.comment {
                if !l.code.is_empty() {
                    out.push_str(&" ".repeat(column - l.code.chars().count() + 2));
                }
                out.push_str(c);
            }
            out.push('\n');
        }
        i = j;
    }
    out
}

/// What the entries of a block or file are laid out between.
struct Frame {
    depth: usize,
    /// Where the previous thing printed at this level ends in the source.
    prev_end: u32,
    /// Whether anything has been printed at this level yet.
    started: bool,
}

impl<'a> Printer<'a> {
    fn slice(&self, span: Span) -> &'a str {
        &self.src[span.start as usize..span.end as usize]
    }

    fn newlines_between(&self, from: u32, to: u32) -> usize {
        if to <= from {
            return 0;
        }
        self.src[from as usize..to as usize].matches('\n').count()
    }

    fn push(&mut self, depth: usize, text: &str) {
        let code = format!("{}{text}", INDENT.repeat(depth));
        self.lines.push(Line {
            code,
            comment: None,
        });
    }

    fn blank(&mut self) {
        if self
            .lines
            .last()
            .is_some_and(|l| !l.code.is_empty() || l.comment.is_some())
        {
            self.lines.push(Line::default());
        }
    }

    /// Prints the comments that start before `until`: after the previous entry on its
    /// line, or on lines of their own.
    fn comments_before(&mut self, until: u32, f: &mut Frame) {
        while let Some(c) = self.comments.get(self.next_comment) {
            if c.span.start >= until {
                break;
            }
            self.next_comment += 1;
            let text = c.text.trim_end();
            let gap = self.newlines_between(f.prev_end, c.span.start);
            let trailing = gap == 0
                && c.span.start >= f.prev_end
                && self
                    .lines
                    .last()
                    .is_some_and(|l| l.comment.is_none() && !l.code.is_empty());
            if trailing {
                self.lines.last_mut().unwrap().comment = Some(text.to_string());
            } else {
                if gap >= 2 && f.started {
                    self.blank();
                }
                self.lines.push(Line {
                    code: String::new(),
                    comment: Some(format!("{}{text}", INDENT.repeat(f.depth))),
                });
                f.started = true;
            }
            f.prev_end = f.prev_end.max(c.span.end);
        }
    }

    /// Prints what comes before an entry starting at `start`: the comments above it, and
    /// the blank line the user left before it.
    fn leading(&mut self, start: u32, f: &mut Frame) {
        self.comments_before(start, f);
        if f.started && self.newlines_between(f.prev_end, start) >= 2 {
            self.blank();
        }
    }

    /// Prints the next comment after the previous entry if it is on that entry's line.
    fn trailing_comment(&mut self, f: &mut Frame) {
        if !f.started {
            return;
        }
        if let Some(c) = self.comments.get(self.next_comment) {
            if c.span.start >= f.prev_end && self.newlines_between(f.prev_end, c.span.start) == 0 {
                self.comments_before(c.span.end, f);
            }
        }
    }

    fn items(&mut self, items: &[Item]) {
        let mut f = Frame {
            depth: 0,
            prev_end: 0,
            started: false,
        };
        let mut prev_was_block = false;
        for item in items {
            let span = match item {
                Item::Import(i) => i.span,
                Item::Block(b) => b.span,
            };
            let is_block = matches!(item, Item::Block(_));
            self.trailing_comment(&mut f);
            // Blocks are set apart, together with the comments right above them.
            if f.started
                && (is_block
                    || prev_was_block
                    || self.newlines_between(f.prev_end, span.start) >= 2)
            {
                self.blank();
            }
            self.leading(span.start, &mut f);
            match item {
                Item::Import(i) => {
                    self.comments_before(span.end, &mut f);
                    self.push(0, &format!("import {}", self.slice(i.path_span)));
                }
                Item::Block(b) => self.block(b, 0),
            }
            f.started = true;
            f.prev_end = span.end;
            prev_was_block = is_block;
        }
        self.comments_before(u32::MAX, &mut f);
    }

    fn block(&mut self, b: &Block, depth: usize) {
        let header = header(b);
        let has_comment_inside = self
            .comments
            .get(self.next_comment)
            .is_some_and(|c| c.span.start < b.span.end);
        if !has_comment_inside && !self.slice(b.span).contains('\n') {
            let inline = format!("{header} {}", self.inline_body(b));
            if INDENT.len() * depth + inline.len() <= WIDTH {
                self.push(depth, &inline);
                return;
            }
        }
        self.push(depth, &format!("{header} {{"));
        let open = self.src[b.span.start as usize..b.span.end as usize]
            .find('{')
            .map_or(b.span.start, |i| b.span.start + i as u32 + 1);
        let mut f = Frame {
            depth: depth + 1,
            prev_end: open,
            started: false,
        };
        for entry in &b.entries {
            let span = match entry {
                Entry::Attr(a) => a.span,
                Entry::Block(b) => b.span,
            };
            self.leading(span.start, &mut f);
            match entry {
                Entry::Attr(a) => {
                    // A comment inside an attribute (in a list written over several lines)
                    // moves above it.
                    self.comments_before(span.end, &mut f);
                    let line = format!("{} = {}", a.name.text, self.expr(&a.value));
                    self.push(depth + 1, &line);
                }
                Entry::Block(inner) => self.block(inner, depth + 1),
            }
            f.started = true;
            f.prev_end = span.end;
        }
        let close = b.span.end.saturating_sub(1);
        self.comments_before(close, &mut f);
        self.push(depth, "}");
    }

    fn inline_body(&self, b: &Block) -> String {
        if b.entries.is_empty() {
            return "{}".into();
        }
        let parts: Vec<String> = b
            .entries
            .iter()
            .map(|e| match e {
                Entry::Attr(a) => format!("{} = {}", a.name.text, self.expr(&a.value)),
                Entry::Block(inner) => format!("{} {}", header(inner), self.inline_body(inner)),
            })
            .collect();
        format!("{{ {} }}", parts.join(", "))
    }

    fn expr(&self, e: &Expr) -> String {
        let mut out = String::new();
        self.write_expr(e, &mut out);
        out
    }

    /// Into one buffer: a chain of 100,000 terms is one pass, not 100,000 copies.
    fn write_expr(&self, e: &Expr, out: &mut String) {
        match &e.kind {
            ExprKind::Quantity { .. } => out.push_str(&quantity(self.slice(e.span))),
            ExprKind::Path(parts) => {
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        out.push('.');
                    }
                    out.push_str(&p.text);
                }
            }
            ExprKind::List(items) => {
                out.push('[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.write_expr(x, out);
                }
                out.push(']');
            }
            ExprKind::Chain { first, rest } => {
                self.write_expr(first, out);
                for (op, x) in rest {
                    out.push(' ');
                    out.push_str(op.symbol());
                    out.push(' ');
                    self.write_expr(x, out);
                }
            }
            ExprKind::Neg(x) => {
                out.push('-');
                self.write_expr(x, out);
            }
            ExprKind::Paren(x) => {
                out.push('(');
                self.write_expr(x, out);
                out.push(')');
            }
            ExprKind::Number(_)
            | ExprKind::Str(_)
            | ExprKind::Bool(_)
            | ExprKind::Auto
            | ExprKind::Ident(_)
            | ExprKind::Error => out.push_str(self.slice(e.span)),
        }
    }
}

/// `kind name` of a block, or `kind` alone.
fn header(b: &Block) -> String {
    match &b.name {
        Some(n) => format!("{} {}", b.kind.text, n.text),
        None => b.kind.text.clone(),
    }
}

/// `80GiB` and `80   GiB` as `80 GiB`: the number and the unit as written, one space apart.
fn quantity(text: &str) -> String {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_' || b[i] == b'.') {
        i += 1;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            i = j;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
    }
    format!("{} {}", &text[..i], text[i..].trim())
}

/// The tree without its spans, to compare a file before and after formatting.
mod shape {
    use std::fmt::Write;

    use crate::syntax::*;

    pub fn items(items: &[Item]) -> String {
        let mut s = String::new();
        for item in items {
            match item {
                Item::Import(i) => {
                    let _ = write!(s, "import {:?};", i.path);
                }
                Item::Block(b) => block(b, &mut s),
            }
        }
        s
    }

    fn block(b: &Block, s: &mut String) {
        *s += &b.kind.text;
        if let Some(n) = &b.name {
            *s += " ";
            *s += &n.text;
        }
        *s += "{";
        for e in &b.entries {
            match e {
                Entry::Attr(a) => {
                    *s += &a.name.text;
                    *s += "=";
                    expr(&a.value, s);
                    *s += ";";
                }
                Entry::Block(inner) => block(inner, s),
            }
        }
        *s += "}";
    }

    fn expr(e: &Expr, s: &mut String) {
        let _ = match &e.kind {
            ExprKind::Number(n) => write!(s, "{n:?}"),
            ExprKind::Quantity { value, unit } => write!(s, "{value:?}{unit:?}"),
            ExprKind::Str(x) => write!(s, "{x:?}"),
            ExprKind::Bool(x) => write!(s, "{x}"),
            ExprKind::Auto => write!(s, "auto"),
            ExprKind::Ident(x) => write!(s, "{x}"),
            ExprKind::Path(p) => {
                for (i, part) in p.iter().enumerate() {
                    if i > 0 {
                        *s += ".";
                    }
                    *s += &part.text;
                }
                Ok(())
            }
            ExprKind::List(xs) => {
                *s += "[";
                for x in xs {
                    expr(x, s);
                    *s += ",";
                }
                write!(s, "]")
            }
            ExprKind::Chain { first, rest } => {
                *s += "(";
                expr(first, s);
                for (op, x) in rest {
                    *s += op.symbol();
                    expr(x, s);
                }
                write!(s, ")")
            }
            ExprKind::Neg(x) => {
                *s += "(-";
                expr(x, s);
                write!(s, ")")
            }
            ExprKind::Paren(x) => {
                *s += "(";
                expr(x, s);
                write!(s, ")")
            }
            ExprKind::Error => write!(s, "<error>"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(src: &str) -> String {
        format(src).unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn lays_entries_out_one_per_line_and_keeps_leaves_as_written() {
        let src = "model m{layers=96;hidden = 12_288,heads=96\nseq_len=2048 }\n\
                   cluster c { nodes = 2\n  gpus_per_node=8\n bandwidth=400Gb/s\nx = (a+b)*-2 }";
        assert_eq!(
            fmt(src),
            "model m {\n    layers = 96\n    hidden = 12_288\n    heads = 96\n    seq_len = 2048\n}\n\
             \ncluster c {\n    nodes = 2\n    gpus_per_node = 8\n    bandwidth = 400 Gb/s\n    \
             x = (a + b) * -2\n}\n"
        );
    }

    #[test]
    fn keeps_comments_where_they_were_and_one_blank_line() {
        let src = "# a plan\n\ncluster c {   # the machines\n    nodes = 2 # two\n\n\n\n    \
                   # on its own line\n    gpus_per_node = 8\n    # before the brace\n}\n";
        assert_eq!(
            fmt(src),
            "# a plan\n\ncluster c {  # the machines\n    nodes = 2  # two\n\n    \
             # on its own line\n    gpus_per_node = 8\n    # before the brace\n}\n"
        );
    }

    #[test]
    fn a_one_line_block_stays_on_one_line_when_it_fits() {
        let src = "cluster c {\ninter_node {kind=infiniband,bandwidth=200 Gb/s}\n}\n\
                   train { global_batch = 8, precision = bf16 }\n";
        assert_eq!(
            fmt(src),
            "cluster c {\n    inter_node { kind = infiniband, bandwidth = 200 Gb/s }\n}\n\
             \ntrain { global_batch = 8, precision = bf16 }\n"
        );
        let long = format!("model m {{ {} }}\n", ["layers = 1000000"; 8].join(", "));
        assert!(fmt(&long).lines().count() > 3, "{}", fmt(&long));
    }

    #[test]
    fn a_comment_inside_a_list_moves_above_its_attribute() {
        let src = "parallel {\n    pp = [4, # small\n          8]\n}\n";
        assert_eq!(fmt(src), "parallel {\n    # small\n    pp = [4, 8]\n}\n");
    }

    #[test]
    fn imports_stay_together_and_blocks_are_set_apart() {
        let src = "import \"a.tp\"\nimport \"b.tp\"\nmodel m { layers = 1 }\n# the job\njob { name = \"x\" }";
        assert_eq!(
            fmt(src),
            "import \"a.tp\"\nimport \"b.tp\"\n\nmodel m { layers = 1 }\n\n# the job\njob { name = \"x\" }\n"
        );
    }

    #[test]
    fn formatting_twice_changes_nothing() {
        let src = "cluster c {nodes=2 # n\n# own\n group a { nodes = 1 }\n}\nmodel m { preset = \"gpt3_175b\" }";
        let once = fmt(src);
        assert_eq!(fmt(&once), once);
    }

    #[test]
    fn a_file_with_syntax_errors_is_left_alone() {
        assert!(matches!(
            format("model m { layers = }\n"),
            Err(FormatError::Syntax(d)) if !d.is_empty()
        ));
    }

    #[test]
    fn trailing_spaces_in_a_comment_are_layout() {
        assert_eq!(fmt("# \n"), "#\n");
        assert_eq!(
            fmt("model m { layers = 1 }  # x   \n"),
            "model m { layers = 1 }  # x\n"
        );
    }

    #[test]
    fn crlf_line_ends_and_a_byte_order_mark_are_kept() {
        let src = "\u{feff}# plan\r\nmodel m{layers=1}\r\ntrain { global_batch = 8 } # x\r\n";
        let once = fmt(src);
        assert_eq!(
            once,
            "\u{feff}# plan\r\nmodel m { layers = 1 }\r\n\r\ntrain { global_batch = 8 }  # x\r\n"
        );
        assert_eq!(fmt(&once), once);
    }

    #[test]
    fn long_chains_and_deep_nesting_format_without_recursing_per_term() {
        // Compared without assert_eq!, whose message would print megabytes.
        let terms = " + 1".repeat(100_000);
        let chain = format!("model m {{ layers = 64{terms} }}\n");
        assert!(fmt(&chain) == format!("model m {{\n    layers = 64{terms}\n}}\n"));
        let limit = crate::parser::MAX_NESTING - 1;
        let deep = format!(
            "model m {{\n    layers = {}1{}\n}}\n",
            "(".repeat(limit),
            ")".repeat(limit)
        );
        assert!(fmt(&deep) == deep);
        let too_deep = format!(
            "model m {{ layers = {}1{} }}\n",
            "(".repeat(20_000),
            ")".repeat(20_000)
        );
        assert!(matches!(format(&too_deep), Err(FormatError::Syntax(d)) if d[0].code == "P0008"));
    }

    #[test]
    fn quantities_get_one_space() {
        assert_eq!(quantity("80GiB"), "80 GiB");
        assert_eq!(quantity("1.5e9   B"), "1.5e9 B");
        assert_eq!(quantity("10%"), "10 %");
        assert_eq!(quantity("1_000 us"), "1_000 us");
    }
}
