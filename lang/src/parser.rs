//! Tokens to a syntax tree, recovering from errors.
//!
//! Recursive descent over the token list. On a bad attribute the parser reports it, skips
//! to the end of that attribute (newline, `;`, `,` or the closing brace) and carries on, so
//! one run reports every syntax error in the file and still returns a tree for the rest:
//! that tree is what the compiler checks and what an editor shows.
//!
//! Hostile input must not exhaust the stack: blocks, brackets and signs nest at most
//! [`MAX_NESTING`] deep (deeper text is skipped and reported once, P0008), and operator
//! chains are read in a loop into flat [`ExprKind::Chain`] nodes, so the recursion here,
//! and in every later walk of the tree, is bounded by the limit and not by the input.

use crate::codes;
use crate::diagnostic::{Capped, Diagnostic};
use crate::lexer::{lex, Token, TokenKind};
use crate::span::{FileId, Span};
use crate::syntax::*;

pub struct Parsed {
    pub file: SourceFile,
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses one file. Never fails: the tree holds what could be read and `diagnostics` why
/// the rest could not.
pub fn parse(src: &str, file: FileId) -> Parsed {
    let lexed = lex(src, file);
    let mut p = Parser {
        tokens: lexed.tokens,
        pos: 0,
        file,
        diagnostics: lexed.diagnostics,
        depth: 0,
        brackets: 0,
        too_deep: false,
    };
    let items = p.items();
    Parsed {
        file: SourceFile {
            items,
            comments: lexed.comments,
        },
        diagnostics: p.diagnostics.into_vec(),
    }
}

/// One command-line setting, `PATH=VALUE` (`planc check plan.tp --set parallel.tp=4`): the
/// dotted path as written and the value, an expression of the language.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    /// At least one segment when parsed; which segments are blocks and which the attribute
    /// is the schema's business (the compiler's).
    pub path: Vec<Ident>,
    pub value: Expr,
}

/// Parses `PATH=VALUE` as a whole text (the flag's argument): spans are into `src`, so a
/// diagnostic shows the flag as it was typed. `None` when it is not of that form; the
/// diagnostics say why.
pub fn parse_setting(src: &str, file: FileId) -> (Option<Setting>, Vec<Diagnostic>) {
    let lexed = lex(src, file);
    let mut p = Parser {
        tokens: lexed.tokens,
        pos: 0,
        file,
        diagnostics: lexed.diagnostics,
        depth: 0,
        brackets: 0,
        too_deep: false,
    };
    let setting = p.setting();
    let diagnostics = p.diagnostics.into_vec();
    let setting = setting.filter(|_| !diagnostics.iter().any(Diagnostic::is_error));
    (setting, diagnostics)
}

pub const RESERVED: &[&str] = &["import", "auto", "true", "false"];

/// How deep blocks, brackets and signs may nest. Real plans nest three or four levels; the
/// limit is what keeps the recursion of the parser and of every walk of its tree within a
/// 2 MiB thread stack, even in a debug build.
pub const MAX_NESTING: usize = 256;

/// Syntax errors listed per file; a file of garbage would otherwise give one per byte.
pub const MAX_SYNTAX_ERRORS: usize = 100;

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    file: FileId,
    diagnostics: Capped,
    /// Blocks, brackets and signs open around the current token.
    depth: usize,
    /// Brackets (`(`, `[`) open in the current expression.
    brackets: usize,
    /// Whether P0008 was reported: one report per file is enough.
    too_deep: bool,
}

impl Parser {
    fn peek(&self) -> &TokenKind {
        &self.tokens[self.pos].kind
    }

    fn peek_at(&self, n: usize) -> &TokenKind {
        let i = (self.pos + n).min(self.tokens.len() - 1);
        &self.tokens[i].kind
    }

    fn span(&self) -> Span {
        self.tokens[self.pos].span
    }

    fn prev_span(&self) -> Span {
        self.tokens[self.pos.saturating_sub(1)].span
    }

    fn bump(&mut self) -> Token {
        let t = self.tokens[self.pos].clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn at(&self, kind: &TokenKind) -> bool {
        self.peek() == kind
    }

    fn skip_newlines(&mut self) {
        while matches!(
            self.peek(),
            TokenKind::Newline | TokenKind::Semi | TokenKind::Comma
        ) {
            self.bump();
        }
    }

    fn error(
        &mut self,
        message: impl Into<String>,
        span: Span,
        label: impl Into<String>,
    ) -> &mut Diagnostic {
        self.diagnostics
            .push(Diagnostic::new(codes::P0005, message).at(self.file, span, label))
    }

    fn expected(&mut self, what: &str) -> &mut Diagnostic {
        let found = self.peek().describe();
        let span = self.span();
        let help = match what {
            "a value" => "a value is a number, a quantity (`80 GiB`), a \"string\", `true`, `false`, `auto`, a name, a path (`model.hidden`) or a list (`[4, 8]`)".to_string(),
            _ => format!("the language reference (docs/language.md) shows the form; here planc needs {what}"),
        };
        self.error(
            format!("expected {what}, found {found}"),
            span,
            format!("expected {what}"),
        )
        .with_help(help)
    }

    /// Skips to the end of the current attribute or item, leaving a closing brace of the
    /// enclosing block in place. Brackets opened on the way are skipped whole.
    fn recover(&mut self) {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                TokenKind::Eof => return,
                TokenKind::Newline | TokenKind::Semi | TokenKind::Comma if depth == 0 => return,
                TokenKind::RBrace if depth == 0 => return,
                TokenKind::LBrace | TokenKind::LBracket | TokenKind::LParen => depth += 1,
                TokenKind::RBrace | TokenKind::RBracket | TokenKind::RParen => {
                    depth = depth.saturating_sub(1)
                }
                _ => {}
            }
            self.bump();
        }
    }

    /// Reports P0008 at the current token (the first that opens one level too many), once
    /// per file.
    fn too_deep(&mut self) {
        if self.too_deep {
            return;
        }
        self.too_deep = true;
        let span = self.span();
        self.diagnostics.push(
            Diagnostic::new(
                codes::P0008,
                format!("nested too deeply (limit {MAX_NESTING})"),
            )
            .at(
                self.file,
                span,
                format!("level {} opens here", MAX_NESTING + 1),
            )
            .help(format!(
                "planc reads at most {MAX_NESTING} levels of blocks, brackets and signs; \
                 write the value with fewer parentheses, or compute it in steps"
            )),
        );
    }

    /// Skips an expression nested too deeply: to the end of the brackets open around it,
    /// or of the attribute when none is. A `}` (never inside an expression) is left for the
    /// block. The enclosing expressions then return their error without reading further.
    fn skip_too_deep(&mut self) {
        let mut depth = self.brackets;
        loop {
            match self.peek() {
                TokenKind::Eof | TokenKind::RBrace => return,
                TokenKind::Newline | TokenKind::Semi | TokenKind::Comma if depth == 0 => return,
                TokenKind::LParen | TokenKind::LBracket => depth += 1,
                TokenKind::RParen | TokenKind::RBracket => {
                    if depth <= 1 {
                        if depth == 1 {
                            self.bump();
                        }
                        return;
                    }
                    depth -= 1;
                }
                _ => {}
            }
            self.bump();
        }
    }

    /// Skips a block nested too deeply, from its `{` to the matching `}` (or the end of
    /// the file).
    fn skip_block(&mut self) {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                TokenKind::Eof => return,
                TokenKind::LBrace => depth += 1,
                TokenKind::RBrace => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        self.bump();
                        return;
                    }
                }
                _ => {}
            }
            self.bump();
        }
    }

    fn items(&mut self) -> Vec<Item> {
        let mut items = Vec::new();
        loop {
            self.skip_newlines();
            match self.peek().clone() {
                TokenKind::Eof => return items,
                TokenKind::Ident(id) if id == "import" => {
                    if let Some(import) = self.import() {
                        items.push(Item::Import(import));
                    }
                }
                TokenKind::Ident(_) => match self.block() {
                    Some(b) => items.push(Item::Block(b)),
                    None => self.recover_top_level(),
                },
                TokenKind::RBrace => {
                    let span = self.span();
                    self.error("unmatched `}`", span, "no block is open here")
                        .help = Some("remove this brace".into());
                    self.bump();
                }
                TokenKind::Error => {
                    self.bump();
                }
                _ => {
                    self.expected(
                        "a block (`cluster`, `model`, `train`, `parallel`, ...) or `import`",
                    );
                    self.bump();
                    self.recover_top_level();
                }
            }
        }
    }

    /// `a.b.c = expr` to the end of the text.
    fn setting(&mut self) -> Option<Setting> {
        let mut path = Vec::new();
        loop {
            let Some(id) = self.ident() else {
                let what = if path.is_empty() {
                    "an attribute path such as `parallel.tp`"
                } else {
                    "a name after `.`"
                };
                self.expected(what).help =
                    Some("write PATH=VALUE: `--set parallel.tp=4`, `--set 'cluster.inter_node.bandwidth=400 Gb/s'`".into());
                return None;
            };
            path.push(id);
            if !self.at(&TokenKind::Dot) {
                break;
            }
            self.bump();
        }
        if !self.at(&TokenKind::Eq) {
            self.expected("`=` after the path").help =
                Some("write PATH=VALUE: `--set parallel.tp=4`".into());
            return None;
        }
        self.bump();
        let value = self.expr();
        if matches!(value.kind, ExprKind::Error) {
            return None;
        }
        while matches!(self.peek(), TokenKind::Newline) {
            self.bump();
        }
        if !self.at(&TokenKind::Eof) {
            let d = self.expected("the end of the value");
            d.help = Some(if matches!(value.kind, ExprKind::Number(_)) {
                "if this is a unit, it is not one planc knows; units: B KB MB GB TB KiB MiB GiB TiB, GB/s Gb/s Gbps, ns us ms s min h, TFLOPS PFLOPS, %, USD/h EUR/h GBP/h CNY/h JPY/h".into()
            } else {
                "one value per `--set`; a string goes in double quotes, which the shell needs quoted too: `--set 'job.image=\"nvcr.io/nvidia/pytorch:24.01-py3\"'`".into()
            });
            return None;
        }
        Some(Setting { path, value })
    }

    fn recover_top_level(&mut self) {
        self.recover();
        if self.at(&TokenKind::RBrace) {
            self.bump();
        }
    }

    fn import(&mut self) -> Option<Import> {
        let start = self.bump().span;
        match self.peek().clone() {
            TokenKind::Str(path) => {
                let path_span = self.bump().span;
                self.end_of_entry();
                Some(Import {
                    path,
                    path_span,
                    span: start.to(path_span),
                })
            }
            _ => {
                self.expected("a quoted path after `import`").help =
                    Some("write `import \"common.tp\"`".into());
                self.recover();
                None
            }
        }
    }

    fn ident(&mut self) -> Option<Ident> {
        match self.peek().clone() {
            TokenKind::Ident(text) => {
                let span = self.bump().span;
                Some(Ident { text, span })
            }
            _ => None,
        }
    }

    /// `KIND NAME? { entries }`; the caller checked that the current token is an identifier.
    fn block(&mut self) -> Option<Block> {
        let kind = self.ident()?;
        let name = match self.peek() {
            TokenKind::Ident(_) => self.ident(),
            _ => None,
        };
        let base = name
            .as_ref()
            .and_then(|name| self.base_after_colon(&kind, name));
        if !self.at(&TokenKind::LBrace) {
            let d = self.expected(&format!("`{{` to open the `{}` block", kind.text));
            if matches!(d.message.as_str(), m if m.contains("`=`")) {
                d.help =
                    Some("attributes belong inside a block: `train { global_batch = 512 }`".into());
            }
            return None;
        }
        if self.depth >= MAX_NESTING {
            self.too_deep();
            self.skip_block();
            return None;
        }
        let open = self.bump().span;
        self.depth += 1;
        let mut entries = self.entries(open, &kind.text);
        entries.splice(0..0, base.map(Entry::Attr));
        self.depth -= 1;
        let end = self.prev_span();
        Some(Block {
            span: kind.span.to(end),
            kind,
            name,
            entries,
        })
    }

    /// `gpu mine : H100_SXM_80GB {`: a block naming what it starts from after a colon, as
    /// other languages write inheritance. The lexer refused the `:` (P0001); its help says
    /// where the base goes in this language, and the block is read on as the help writes it
    /// (`preset = H100_SXM_80GB` for a `gpu` or `model`), so that what follows is checked
    /// against the base rather than reported missing.
    fn base_after_colon(&mut self, kind: &Ident, name: &Ident) -> Option<Attr> {
        let (TokenKind::Error, TokenKind::Ident(base), TokenKind::LBrace) =
            (self.peek(), self.peek_at(1), self.peek_at(2))
        else {
            return None;
        };
        let base = base.clone();
        let colon = self.span();
        let base_span = self.tokens[self.pos + 1].span;
        let (kind, name) = (kind.text.as_str(), name.text.as_str());
        let help = match kind {
            "gpu" => format!(
                "a `gpu` block starts from a built-in GPU with `preset` inside it: \
                 `gpu {name} {{ preset = {base} ... }}`, then only what differs"
            ),
            "model" => format!(
                "a `model` block starts from a built-in model with `preset` inside it: \
                 `model {name} {{ preset = \"{base}\" ... }}`"
            ),
            _ => format!("blocks are `{kind} {name} {{ ... }}`; remove `: {base}`"),
        };
        let file = self.file;
        if let Some(d) = self.diagnostics.find_mut(|d| {
            d.code == codes::P0001.id
                && d.primary
                    .as_ref()
                    .is_some_and(|l| l.file == file && l.span == colon)
        }) {
            d.help = Some(help);
        }
        self.bump();
        self.bump();
        let value = match kind {
            "gpu" => ExprKind::Ident(base),
            "model" => ExprKind::Str(base),
            _ => return None,
        };
        Some(Attr {
            name: Ident {
                text: "preset".into(),
                span: colon,
            },
            value: Expr {
                kind: value,
                span: base_span,
            },
            span: colon.to(base_span),
        })
    }

    fn entries(&mut self, open: Span, kind: &str) -> Vec<Entry> {
        let mut entries = Vec::new();
        loop {
            self.skip_newlines();
            match self.peek().clone() {
                TokenKind::RBrace => {
                    self.bump();
                    return entries;
                }
                TokenKind::Eof => {
                    self.diagnostics.push(
                        Diagnostic::new(codes::P0006, format!("unclosed `{kind}` block"))
                            .at(self.file, open, "this `{` is never closed")
                            .help("add `}` at the end of the block"),
                    );
                    return entries;
                }
                TokenKind::Ident(_) => match self.peek_at(1) {
                    TokenKind::Eq => {
                        if let Some(a) = self.attr() {
                            entries.push(Entry::Attr(a));
                        }
                    }
                    TokenKind::LBrace => self.nested_block(&mut entries),
                    TokenKind::Ident(_) if matches!(self.peek_at(2), TokenKind::LBrace) => {
                        self.nested_block(&mut entries)
                    }
                    // A stray character after the name, reported by the lexer already.
                    TokenKind::Error => {
                        self.bump();
                        self.recover();
                    }
                    _ => {
                        let name = self.bump();
                        let d = self.expected(&format!(
                            "`=` after `{}`",
                            name.kind.describe().trim_matches('`')
                        ));
                        d.help = Some("attributes are written `name = value`".into());
                        self.recover();
                    }
                },
                TokenKind::Error => {
                    self.recover();
                }
                _ => {
                    self.expected("an attribute name or `}`");
                    self.bump();
                    self.recover();
                }
            }
        }
    }

    fn nested_block(&mut self, entries: &mut Vec<Entry>) {
        match self.block() {
            Some(b) => entries.push(Entry::Block(b)),
            None => self.recover(),
        }
    }

    fn attr(&mut self) -> Option<Attr> {
        let name = self.ident()?;
        self.bump(); // `=`
        let value = self.expr();
        let span = name.span.to(value.span);
        if matches!(value.kind, ExprKind::Error) {
            self.recover();
        } else {
            self.end_of_entry();
        }
        Some(Attr { name, value, span })
    }

    /// After an attribute: a terminator or the closing brace must follow.
    fn end_of_entry(&mut self) {
        match self.peek() {
            TokenKind::Newline
            | TokenKind::Semi
            | TokenKind::Comma
            | TokenKind::RBrace
            | TokenKind::Eof => {}
            // The lexer reported it (stray bytes after a value); once is enough.
            TokenKind::Error => self.recover(),
            TokenKind::Ident(_)
                if matches!(self.tokens[self.pos - 1].kind, TokenKind::Number(_)) =>
            {
                let d = self.expected("the end of the attribute");
                d.help = Some("if this is a unit, it is not one planc knows; units: B KB MB GB TB KiB MiB GiB TiB, GB/s Gb/s Gbps, ns us ms s min h, TFLOPS PFLOPS, %, USD/h EUR/h GBP/h CNY/h JPY/h".into());
                self.recover();
            }
            _ => {
                let d = self.expected("the end of the attribute (a newline, `;` or `,`)");
                d.help = Some("put one attribute per line, or separate them with `,`".into());
                self.recover();
            }
        }
    }

    fn expr(&mut self) -> Expr {
        self.chain(1)
    }

    /// Operands of precedence `prec` (1: `+ -`, 2: `* /`) joined by its operators, read in
    /// a loop into one flat chain: `64 + 1 + 1 + ...` costs no stack per term.
    fn chain(&mut self, prec: u8) -> Expr {
        let operand = |p: &mut Self| if prec == 1 { p.chain(2) } else { p.unary() };
        let first = operand(self);
        if matches!(first.kind, ExprKind::Error) {
            return first;
        }
        let mut rest = Vec::new();
        loop {
            let op = match (prec, self.peek()) {
                (1, TokenKind::Plus) => BinOp::Add,
                (1, TokenKind::Minus) => BinOp::Sub,
                (2, TokenKind::Star) => BinOp::Mul,
                (2, TokenKind::Slash) => BinOp::Div,
                _ => break,
            };
            self.bump();
            let rhs = operand(self);
            if matches!(rhs.kind, ExprKind::Error) {
                return rhs;
            }
            rest.push((op, rhs));
        }
        let Some((_, last)) = rest.last() else {
            return first;
        };
        Expr {
            span: first.span.to(last.span),
            kind: ExprKind::Chain {
                first: Box::new(first),
                rest,
            },
        }
    }

    /// Runs `f` one level deeper, or reports P0008, skips the rest of the expression and
    /// returns an error when that level is one too many.
    fn nested(&mut self, bracket: bool, f: impl FnOnce(&mut Self) -> Expr) -> Expr {
        if self.depth >= MAX_NESTING {
            let span = self.span();
            self.too_deep();
            self.skip_too_deep();
            return self.error_expr(span);
        }
        self.depth += 1;
        self.brackets += usize::from(bracket);
        let e = f(self);
        self.depth -= 1;
        self.brackets -= usize::from(bracket);
        e
    }

    fn unary(&mut self) -> Expr {
        if self.at(&TokenKind::Minus) {
            return self.nested(false, |p| {
                let start = p.bump().span;
                let inner = p.unary();
                if matches!(inner.kind, ExprKind::Error) {
                    return inner;
                }
                Expr {
                    span: start.to(inner.span),
                    kind: ExprKind::Neg(Box::new(inner)),
                }
            });
        }
        self.primary()
    }

    fn primary(&mut self) -> Expr {
        let tok = self.peek().clone();
        let span = self.span();
        let kind = match tok {
            TokenKind::Number(v) => {
                self.bump();
                ExprKind::Number(v)
            }
            TokenKind::Quantity { value, unit, .. } => {
                self.bump();
                ExprKind::Quantity { value, unit }
            }
            TokenKind::Str(s) => {
                self.bump();
                ExprKind::Str(s)
            }
            TokenKind::Ident(id) => return self.ident_or_path(id),
            TokenKind::LParen => return self.nested(true, |p| p.paren(span)),
            TokenKind::LBracket => return self.nested(true, |p| p.list()),
            TokenKind::Error => {
                self.bump();
                return self.error_expr(span);
            }
            _ => {
                self.expected("a value");
                return self.error_expr(span);
            }
        };
        Expr { kind, span }
    }

    /// `( expr )`; the current token is the `(` at `span`.
    fn paren(&mut self, span: Span) -> Expr {
        self.bump();
        let inner = self.expr();
        if matches!(inner.kind, ExprKind::Error) {
            return inner;
        }
        if !self.at(&TokenKind::RParen) {
            let file = self.file;
            let d = self.expected("`)`");
            d.secondary.push(crate::diagnostic::Label {
                file,
                span,
                message: "to close this `(`".into(),
            });
            return self.error_expr(span);
        }
        let end = self.bump().span;
        Expr {
            span: span.to(end),
            kind: ExprKind::Paren(Box::new(inner)),
        }
    }

    fn error_expr(&self, span: Span) -> Expr {
        Expr {
            kind: ExprKind::Error,
            span,
        }
    }

    fn ident_or_path(&mut self, first: String) -> Expr {
        let first_span = self.bump().span;
        let kind = match first.as_str() {
            "auto" => ExprKind::Auto,
            "true" => ExprKind::Bool(true),
            "false" => ExprKind::Bool(false),
            _ => ExprKind::Ident(first.clone()),
        };
        if !self.at(&TokenKind::Dot) || !matches!(kind, ExprKind::Ident(_)) {
            return Expr {
                kind,
                span: first_span,
            };
        }
        let mut parts = vec![Ident {
            text: first,
            span: first_span,
        }];
        while self.at(&TokenKind::Dot) {
            self.bump();
            match self.ident() {
                Some(id) => parts.push(id),
                None => {
                    self.expected("an attribute name after `.`");
                    return self.error_expr(first_span);
                }
            }
        }
        let span = first_span.to(parts.last().expect("non-empty").span);
        Expr {
            kind: ExprKind::Path(parts),
            span,
        }
    }

    fn list(&mut self) -> Expr {
        let open = self.bump().span;
        let mut elems = Vec::new();
        loop {
            while self.at(&TokenKind::Newline) {
                self.bump();
            }
            if self.at(&TokenKind::RBracket) {
                let end = self.bump().span;
                return Expr {
                    kind: ExprKind::List(elems),
                    span: open.to(end),
                };
            }
            if matches!(self.peek(), TokenKind::Eof | TokenKind::RBrace) {
                self.diagnostics.push(
                    Diagnostic::new(codes::P0006, "unclosed list")
                        .at(self.file, open, "this `[` is never closed")
                        .help("close the list with `]`"),
                );
                return self.error_expr(open);
            }
            let e = self.expr();
            if matches!(e.kind, ExprKind::Error) {
                return e;
            }
            elems.push(e);
            while self.at(&TokenKind::Newline) {
                self.bump();
            }
            match self.peek() {
                TokenKind::Comma => {
                    self.bump();
                }
                TokenKind::RBracket => {}
                _ => {
                    self.expected("`,` or `]` in the list");
                    return self.error_expr(open);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(src: &str) -> SourceFile {
        let p = parse(src, FileId(0));
        assert!(p.diagnostics.is_empty(), "{:#?}", p.diagnostics);
        p.file
    }

    fn first_block(src: &str) -> Block {
        match parse_ok(src).items.remove(0) {
            Item::Block(b) => b,
            other => panic!("not a block: {other:?}"),
        }
    }

    #[test]
    fn nested_blocks_and_separators() {
        let b = first_block(
            "cluster c {\n nodes = 2; gpus_per_node = 8\n inter_node { kind = infiniband, bandwidth = 200 Gb/s }\n}",
        );
        assert_eq!(b.name.as_ref().unwrap().text, "c");
        assert_eq!(b.attrs().count(), 2);
        assert_eq!(b.blocks().next().unwrap().attrs().count(), 2);
    }

    #[test]
    fn precedence_of_operators() {
        let b = first_block("model { x = 1 + 2 * 3 }");
        let a = b.attrs().next().unwrap();
        match &a.value.kind {
            ExprKind::Chain { rest, .. } => {
                assert_eq!(rest.len(), 1);
                assert_eq!(rest[0].0, BinOp::Add);
                assert!(
                    matches!(&rest[0].1.kind, ExprKind::Chain { rest, .. } if rest[0].0 == BinOp::Mul)
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lists_paths_and_auto() {
        let b = first_block("parallel { pp = [4, 8, 16,], dp = auto, x = model.hidden }");
        let values: Vec<_> = b.attrs().map(|a| a.value.kind.clone()).collect();
        assert!(matches!(&values[0], ExprKind::List(v) if v.len() == 3));
        assert_eq!(values[1], ExprKind::Auto);
        assert!(matches!(&values[2], ExprKind::Path(p) if p.len() == 2));
    }

    #[test]
    fn spans_point_at_the_text() {
        let src = "train { global_batch = 1536 }";
        let b = first_block(src);
        let a = b.attrs().next().unwrap();
        assert_eq!(&src[a.name.span.range()], "global_batch");
        assert_eq!(&src[a.value.span.range()], "1536");
    }

    #[test]
    fn reports_every_error_and_keeps_the_rest() {
        let p = parse(
            "model { layers = , hidden = 4096 }\ntrain { global_batch 64\n precision = bf16 }\nparallel { tp = (2 }",
            FileId(0),
        );
        assert_eq!(p.diagnostics.len(), 3, "{:#?}", p.diagnostics);
        assert_eq!(p.file.items.len(), 3);
        let Item::Block(train) = &p.file.items[1] else {
            panic!()
        };
        assert_eq!(train.attrs().next().unwrap().name.text, "precision");
    }

    #[test]
    fn a_base_after_a_colon_is_one_error_saying_where_it_goes_and_the_block_is_read() {
        let p = parse(
            "gpu mine : H100_SXM_80GB {\n    memory = 70 GiB\n}\nmodel m : llama3 { layers = 2 }\n",
            FileId(0),
        );
        assert_eq!(codes(&p), ["P0001", "P0001"], "{:#?}", p.diagnostics);
        assert_eq!(
            p.diagnostics[0].help.as_deref(),
            Some(
                "a `gpu` block starts from a built-in GPU with `preset` inside it: \
                 `gpu mine { preset = H100_SXM_80GB ... }`, then only what differs"
            )
        );
        assert!(p.diagnostics[1]
            .help
            .as_deref()
            .unwrap()
            .contains("preset = \"llama3\""));
        // Both blocks are read as the help writes them, so what follows is checked against
        // the base.
        assert_eq!(p.file.items.len(), 2);
        let Item::Block(gpu) = &p.file.items[0] else {
            panic!()
        };
        assert_eq!(gpu.name.as_ref().unwrap().text, "mine");
        let attrs: Vec<(&str, &ExprKind)> = gpu
            .attrs()
            .map(|a| (a.name.text.as_str(), &a.value.kind))
            .collect();
        assert_eq!(
            attrs[0],
            ("preset", &ExprKind::Ident("H100_SXM_80GB".into()))
        );
        assert_eq!(attrs[1].0, "memory");
        // A colon elsewhere keeps the lexer's own help.
        let p = parse("train { global_batch: 8 }\n", FileId(0));
        assert!(p.diagnostics[0]
            .help
            .as_deref()
            .unwrap()
            .contains("`name = value`"));
    }

    #[test]
    fn unclosed_block_points_at_the_brace() {
        let src = "model m {\n layers = 2\n";
        let p = parse(src, FileId(0));
        assert_eq!(p.diagnostics.len(), 1);
        assert_eq!(p.diagnostics[0].code, "P0006");
        let span = p.diagnostics[0].primary.as_ref().unwrap().span;
        assert_eq!(&src[span.range()], "{");
    }

    /// Runs `f` on a thread with the 2 MiB stack the test harness, rayon and the LSP's
    /// helper threads get, so that a test fails here before a user's editor aborts.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap()
    }

    fn codes(p: &Parsed) -> Vec<&'static str> {
        p.diagnostics.iter().map(|d| d.code).collect()
    }

    #[test]
    fn deep_nesting_is_one_error_at_the_level_too_many_and_the_rest_parses() {
        for n in [20_000, 100_000] {
            let shapes = [
                format!("{}1{}", "(".repeat(n), ")".repeat(n)),
                format!("{}1{}", "[".repeat(n), "]".repeat(n)),
                format!("{}1", "-".repeat(n)),
                format!("{}1{}", "- (".repeat(n), ")".repeat(n)),
                format!("[{}1{}, 2]", "(".repeat(n), ")".repeat(n)),
                // Never closed: the rest of the block is skipped, the next block is read.
                "(".repeat(n),
            ];
            for value in shapes {
                let src =
                    format!("model m {{ layers = {value}\n hidden = 8 }}\ntrain {{ x = 1 }}\n");
                let p = on_small_stack(move || {
                    let p = parse(&src, FileId(0));
                    let found = codes(&p);
                    assert_eq!(found[0], "P0008", "{found:?}");
                    assert_eq!(found.iter().filter(|c| **c == "P0008").count(), 1);
                    let at = p.diagnostics[0].primary.as_ref().unwrap().span.start as usize;
                    // The block is level 1: the value may open 255 more.
                    let opened = src[..at].matches(['(', '[', '-']).count();
                    assert_eq!(opened, MAX_NESTING - 1, "{:?}", &src[at..at + 1]);
                    // The next attribute and the next block are read.
                    let Item::Block(m) = &p.file.items[0] else {
                        panic!()
                    };
                    let closed = !src.contains("((\n");
                    assert_eq!(m.attrs().any(|a| a.name.text == "hidden"), closed);
                    assert_eq!(p.file.items.len(), 2);
                    p
                });
                // Dropping the tree recurses too; it must be as shallow as the limit.
                on_small_stack(move || drop(p));
            }
        }
    }

    #[test]
    fn deep_blocks_are_one_error_and_the_next_block_parses() {
        let n = 100_000;
        let src = format!(
            "model m {}{}\ntrain {{ x = 1 }}\n",
            "{ a ".repeat(n),
            "}".repeat(n)
        );
        let p = on_small_stack(move || parse(&src, FileId(0)));
        assert_eq!(codes(&p)[0], "P0008");
        assert_eq!(p.diagnostics.len(), 1, "{:#?}", p.diagnostics);
        assert!(matches!(&p.file.items[1], Item::Block(b) if b.kind.text == "train"));
        on_small_stack(move || drop(p));
    }

    #[test]
    fn long_chains_are_flat() {
        let n = 100_000;
        let src = format!("model m {{ layers = 64{} }}", " + 1 * 2".repeat(n));
        let p = on_small_stack(move || parse(&src, FileId(0)));
        assert!(p.diagnostics.is_empty());
        let Item::Block(b) = &p.file.items[0] else {
            panic!()
        };
        let ExprKind::Chain { rest, .. } = &b.attrs().next().unwrap().value.kind else {
            panic!()
        };
        assert_eq!(rest.len(), n);
        assert!(matches!(&rest[0].1.kind, ExprKind::Chain { rest, .. } if rest.len() == 1));
        on_small_stack(move || drop(p));
    }

    #[test]
    fn a_file_of_garbage_gives_a_bounded_list_of_errors() {
        let src = "x\n".repeat(1_000_000);
        let p = parse(&src, FileId(0));
        assert_eq!(p.diagnostics.len(), MAX_SYNTAX_ERRORS + 1);
        assert_eq!(p.diagnostics.last().unwrap().code, "P0009");
    }

    #[test]
    fn imports() {
        let f = parse_ok("import \"common.tp\"\nmodel { layers = 1 }");
        assert!(matches!(&f.items[0], Item::Import(i) if i.path == "common.tp"));
    }
}
