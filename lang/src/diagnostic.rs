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
    /// The text that fixes the problem where it stands in place of the primary label's span
    /// (a misspelt name's likely spelling): editors offer it as a quick fix.
    pub replacement: Option<String>,
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
            replacement: None,
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

    /// "did you mean `x`?", with `x` the [`Diagnostic::replacement`] of the primary span:
    /// only where that span is the misspelt text itself.
    pub fn suggest(self, x: &str) -> Self {
        self.help(format!("did you mean `{x}`?")).fix(x)
    }

    /// `x`, the text that fixes the problem in place of the primary span (what the help
    /// says to write there).
    pub fn fix(mut self, x: impl Into<String>) -> Self {
        self.replacement = Some(x.into());
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

/// Diagnostics listed per phase after syntax (resolution, validation, ...).
pub const MAX_DIAGNOSTICS: usize = 200;

/// A list of diagnostics that keeps the first `max` and counts the rest.
///
/// A file of garbage has a syntax error per byte, and a generated file a duplicate per line:
/// millions of diagnostics would take gigabytes and drown the first, which is the one to
/// fix. Pushing past the limit still hands back a diagnostic to finish (a help, a label),
/// which is then dropped; [`Capped::into_vec`] ends the list with a note (P0009) saying
/// how many were not shown and where the first of them was.
pub struct Capped {
    kept: Vec<Diagnostic>,
    max: usize,
    dropped: usize,
    first_dropped: Option<Label>,
    overflow: Option<Diagnostic>,
}

impl Capped {
    pub fn new(max: usize) -> Self {
        Capped {
            kept: Vec::new(),
            max,
            dropped: 0,
            first_dropped: None,
            overflow: None,
        }
    }

    pub fn push(&mut self, d: Diagnostic) -> &mut Diagnostic {
        if self.kept.len() < self.max {
            self.kept.push(d);
            return self.kept.last_mut().expect("just pushed");
        }
        if self.dropped == 0 {
            self.first_dropped = d.primary.clone();
        }
        self.dropped += 1;
        self.overflow.insert(d)
    }

    pub fn extend(&mut self, ds: impl IntoIterator<Item = Diagnostic>) {
        for d in ds {
            self.push(d);
        }
    }

    /// The first kept diagnostic that `pred` picks, to finish it with what a later phase
    /// knows (the parser's context for a character the lexer refused).
    pub fn find_mut(&mut self, pred: impl Fn(&Diagnostic) -> bool) -> Option<&mut Diagnostic> {
        self.kept.iter_mut().find(|d| pred(d))
    }

    /// Whether the next push will be dropped: the caller may skip the work of finishing it
    /// (a did-you-mean over thousands of names).
    pub fn is_full(&self) -> bool {
        self.kept.len() >= self.max
    }

    /// How many were pushed past the limit.
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    /// The kept diagnostics, then the note about the others, if any were dropped.
    pub fn into_vec(self) -> Vec<Diagnostic> {
        let mut out = self.kept;
        if self.dropped > 0 {
            let mut note = Diagnostic::new(
                crate::codes::P0009,
                format!(
                    "{} more diagnostic{} not shown",
                    self.dropped,
                    if self.dropped == 1 { "" } else { "s" }
                ),
            )
            .note(format!(
                "planc lists the first {} and counts the rest; fix these and check again",
                self.max
            ));
            // A diagnostic about no place is rare; the note then points at the last shown.
            let place = self
                .first_dropped
                .or_else(|| out.iter().rev().find_map(|d| d.primary.clone()));
            if let Some(l) = place {
                note = note.at(l.file, l.span, "the first not shown is here");
            }
            out.push(note);
        }
        out
    }
}

impl std::ops::Deref for Capped {
    type Target = [Diagnostic];

    fn deref(&self) -> &[Diagnostic] {
        &self.kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_keeps_the_first_and_says_how_many_more() {
        let mut c = Capped::new(2);
        for i in 0..5u32 {
            let span = Span::new(i as usize, i as usize + 1);
            c.push(Diagnostic::new(crate::codes::P0005, "x").at(FileId(0), span, ""));
        }
        assert_eq!(c.len(), 2);
        assert_eq!(c.dropped(), 3);
        let v = c.into_vec();
        assert_eq!(v.len(), 3);
        assert_eq!(v[2].code, "P0009");
        assert_eq!(v[2].message, "3 more diagnostics not shown");
        assert_eq!(v[2].primary.as_ref().unwrap().span, Span::new(2, 3));
    }
}
