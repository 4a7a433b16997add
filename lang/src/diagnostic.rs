//! Diagnostics: what every phase of planc reports about a plan.
//!
//! One type for all phases, so that the command line, the JSON report and (later) the LSP
//! render syntax errors, resolution errors and cost-model warnings the same way.

use crate::codes::Code;
use crate::span::{FileId, Span};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Note,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// A place in a file with a short message shown under it.
#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    pub file: FileId,
    pub span: Span,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: &'static str,
    pub message: String,
    /// Where the problem is. Every diagnostic about a file has one; diagnostics about the
    /// command itself (a missing file) may not.
    pub primary: Option<Label>,
    /// Other places that explain it (the first definition of a duplicated block).
    pub secondary: Vec<Label>,
    /// What to change.
    pub help: Option<String>,
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: code.severity,
            code: code.id,
            message: message.into(),
            primary: None,
            secondary: Vec::new(),
            help: None,
            notes: Vec::new(),
        }
    }

    pub fn at(mut self, file: FileId, span: Span, label: impl Into<String>) -> Self {
        self.primary = Some(Label {
            file,
            span,
            message: label.into(),
        });
        self
    }

    pub fn also(mut self, file: FileId, span: Span, label: impl Into<String>) -> Self {
        self.secondary.push(Label {
            file,
            span,
            message: label.into(),
        });
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Overrides the code's default severity (a memory check is an error over capacity and a
    /// warning inside the headroom, under one code each).
    pub fn severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    /// In-place forms of [`Diagnostic::help`] and [`Diagnostic::also`], for a diagnostic
    /// already pushed onto a list.
    pub fn with_help(&mut self, help: impl Into<String>) -> &mut Self {
        self.help = Some(help.into());
        self
    }

    pub fn with_also(&mut self, file: FileId, span: Span, label: impl Into<String>) -> &mut Self {
        self.secondary.push(Label {
            file,
            span,
            message: label.into(),
        });
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}
