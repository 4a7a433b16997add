//! The `.tp` plan language: source text to a syntax tree with spans.
//!
//! Start at [`parse`]. It never fails: it returns the tree it could read and a diagnostic for
//! every syntax error, so that the compiler and editors work on broken files too.

pub mod codes;
pub mod diagnostic;
pub mod encoding;
pub mod format;
pub mod lexer;
pub mod parser;
pub mod span;
pub mod syntax;
pub mod units;

pub use diagnostic::{Diagnostic, Label, Severity};
pub use parser::{parse, Parsed};
pub use span::{FileId, LineIndex, Span};
