//! Tokens to a syntax tree, recovering from errors.
//!
//! Recursive descent over the token list. On a bad attribute the parser reports it, skips
//! to the end of that attribute (newline, `;`, `,` or the closing brace) and carries on, so
//! one run reports every syntax error in the file and still returns a tree for the rest:
//! that tree is what the compiler checks and what an editor shows.

use crate::codes;
use crate::diagnostic::Diagnostic;
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
    };
    let items = p.items();
    Parsed {
        file: SourceFile {
            items,
            comments: lexed.comments,
        },
        diagnostics: p.diagnostics,
    }
}

pub const RESERVED: &[&str] = &["import", "auto", "true", "false"];

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    file: FileId,
    diagnostics: Vec<Diagnostic>,
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
            .push(Diagnostic::new(codes::P0005, message).at(self.file, span, label));
        self.diagnostics.last_mut().expect("just pushed")
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
        if !self.at(&TokenKind::LBrace) {
            let d = self.expected(&format!("`{{` to open the `{}` block", kind.text));
            if matches!(d.message.as_str(), m if m.contains("`=`")) {
                d.help =
                    Some("attributes belong inside a block: `train { global_batch = 512 }`".into());
            }
            return None;
        }
        let open = self.bump().span;
        let entries = self.entries(open, &kind.text);
        let end = self.prev_span();
        Some(Block {
            span: kind.span.to(end),
            kind,
            name,
            entries,
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
            TokenKind::Ident(_)
                if matches!(self.tokens[self.pos - 1].kind, TokenKind::Number(_)) =>
            {
                let d = self.expected("the end of the attribute");
                d.help = Some("if this is a unit, it is not one planc knows; units: B KB MB GB TB KiB MiB GiB TiB, GB/s Gb/s Gbps, ns us ms s min h, TFLOPS PFLOPS, %".into());
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
        self.binary(0)
    }

    fn binary(&mut self, min_prec: u8) -> Expr {
        let mut lhs = self.unary();
        loop {
            let (op, prec) = match self.peek() {
                TokenKind::Plus => (BinOp::Add, 1),
                TokenKind::Minus => (BinOp::Sub, 1),
                TokenKind::Star => (BinOp::Mul, 2),
                TokenKind::Slash => (BinOp::Div, 2),
                _ => return lhs,
            };
            if prec < min_prec {
                return lhs;
            }
            self.bump();
            let rhs = self.binary(prec + 1);
            if matches!(rhs.kind, ExprKind::Error) {
                return rhs;
            }
            lhs = Expr {
                span: lhs.span.to(rhs.span),
                kind: ExprKind::Binary {
                    op,
                    lhs: Box::new(lhs),
                    rhs: Box::new(rhs),
                },
            };
        }
    }

    fn unary(&mut self) -> Expr {
        if self.at(&TokenKind::Minus) {
            let start = self.bump().span;
            let inner = self.unary();
            if matches!(inner.kind, ExprKind::Error) {
                return inner;
            }
            return Expr {
                span: start.to(inner.span),
                kind: ExprKind::Neg(Box::new(inner)),
            };
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
            TokenKind::LParen => {
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
                return Expr {
                    span: span.to(end),
                    kind: ExprKind::Paren(Box::new(inner)),
                };
            }
            TokenKind::LBracket => return self.list(),
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
            ExprKind::Binary {
                op: BinOp::Add,
                rhs,
                ..
            } => {
                assert!(matches!(rhs.kind, ExprKind::Binary { op: BinOp::Mul, .. }))
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
    fn unclosed_block_points_at_the_brace() {
        let src = "model m {\n layers = 2\n";
        let p = parse(src, FileId(0));
        assert_eq!(p.diagnostics.len(), 1);
        assert_eq!(p.diagnostics[0].code, "P0006");
        let span = p.diagnostics[0].primary.as_ref().unwrap().span;
        assert_eq!(&src[span.range()], "{");
    }

    #[test]
    fn imports() {
        let f = parse_ok("import \"common.tp\"\nmodel { layers = 1 }");
        assert!(matches!(&f.items[0], Item::Import(i) if i.path == "common.tp"));
    }
}
