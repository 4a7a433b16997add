//! Byte ranges into one source file, and the identity of that file.
//!
//! Every syntax node carries a [`Span`] so that any later phase (resolution, validation,
//! the cost model, the LSP) can point back at the text the user wrote.

use std::ops::Range;

/// Which loaded file a span belongs to. Assigned by whoever loads files (the compiler's
/// source map); the parser only passes it through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// A half-open byte range `start..end` in one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    pub fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

/// Converts byte offsets to 1-based line and column (columns count characters, as
/// editors and the JSON report expect).
pub struct LineIndex {
    line_starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { line_starts }
    }

    /// The 0-based line of a byte offset and the offset where that line starts.
    pub fn line_start(&self, offset: usize) -> (usize, usize) {
        let line = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        (line, self.line_starts[line])
    }

    /// 1-based (line, column) of a byte offset.
    pub fn line_col(&self, text: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(text.len());
        let (line, start) = self.line_start(offset);
        let column = text
            .get(start..offset)
            .map(|s| {
                if s.is_ascii() {
                    s.len()
                } else {
                    s.chars().count()
                }
            })
            .unwrap_or(offset - start);
        (line + 1, column + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one_and_in_characters() {
        let text = "ab\ncé d\n";
        let idx = LineIndex::new(text);
        assert_eq!(idx.line_col(text, 0), (1, 1));
        assert_eq!(idx.line_col(text, 3), (2, 1));
        // 'é' is two bytes; 'd' is the fourth character of line 2.
        assert_eq!(idx.line_col(text, 7), (2, 4));
        assert_eq!(idx.line_col(text, text.len()), (3, 1));
    }
}
