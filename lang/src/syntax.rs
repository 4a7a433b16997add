//! The syntax tree of a `.tp` file. Every node keeps its span; nothing is resolved here.
//!
//! The tree is never deeper than [`crate::parser::MAX_NESTING`] blocks, brackets and signs
//! (the parser reports P0008 beyond it), and operator chains are flat lists, so code that
//! walks it may recurse without risking the stack, whatever the input.

use crate::lexer::Comment;
use crate::span::Span;
use crate::units::Unit;

#[derive(Clone, Debug, PartialEq)]
pub struct SourceFile {
    pub items: Vec<Item>,
    pub comments: Vec<Comment>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Import(Import),
    Block(Block),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Import {
    pub path: String,
    pub path_span: Span,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub text: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub kind: Ident,
    pub name: Option<Ident>,
    pub entries: Vec<Entry>,
    /// From the kind to the closing brace.
    pub span: Span,
}

impl Block {
    pub fn attrs(&self) -> impl Iterator<Item = &Attr> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Attr(a) => Some(a),
            Entry::Block(_) => None,
        })
    }

    pub fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Block(b) => Some(b),
            Entry::Attr(_) => None,
        })
    }

    /// The span a diagnostic about the whole block points at: its header.
    pub fn header_span(&self) -> Span {
        match &self.name {
            Some(n) => self.kind.span.to(n.span),
            None => self.kind.span,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    Attr(Attr),
    Block(Block),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Attr {
    pub name: Ident,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Number(f64),
    /// `value` as written, in `unit`.
    Quantity {
        value: f64,
        unit: Unit,
    },
    Str(String),
    Bool(bool),
    Auto,
    /// An enumeration value or a reference to an attribute of the same block.
    Ident(String),
    /// `model.hidden`: a reference to another block's attribute.
    Path(Vec<Ident>),
    List(Vec<Expr>),
    /// Operands of one precedence joined left to right: `a + b - c`, `4 * hidden / 2`.
    /// Flat rather than nested, so that a chain of 100,000 terms is a long list and not a
    /// tree 100,000 deep, which every walk (and `Drop`) would recurse through.
    Chain {
        first: Box<Expr>,
        /// At least one: a single operand is not a chain.
        rest: Vec<(BinOp, Expr)>,
    },
    Neg(Box<Expr>),
    Paren(Box<Expr>),
    /// Where the parser could not read a value; already reported.
    Error,
}
