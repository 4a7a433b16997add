//! Byte offsets (planc's spans) to LSP positions and back. LSP counts columns in UTF-16
//! code units, so a line with `×` or a CJK comment must be measured, not sliced.

use lsp_types::{Position, Range};
use planc_lang::{LineIndex, Span};

pub fn position(text: &str, offset: usize) -> Position {
    position_in(text, &LineIndex::new(text), offset)
}

/// [`position`] with the file's line index, so that a large file is not scanned from its
/// start for every diagnostic.
pub fn position_in(text: &str, lines: &LineIndex, offset: usize) -> Position {
    let offset = floor_char_boundary(text, offset.min(text.len()));
    let (line, line_start) = lines.line_start(offset);
    let before = &text[line_start..offset];
    let character: usize = if before.is_ascii() {
        before.len()
    } else {
        before.chars().map(char::len_utf16).sum()
    };
    Position::new(line as u32, character as u32)
}

pub fn range(text: &str, lines: &LineIndex, span: Span) -> Range {
    Range::new(
        position_in(text, lines, span.start as usize),
        position_in(text, lines, span.end as usize),
    )
}

/// The byte offset of an LSP position, clamped to the line and the text.
pub fn offset(text: &str, pos: Position) -> usize {
    let mut line_start = 0;
    for _ in 0..pos.line {
        match text[line_start..].find('\n') {
            Some(i) => line_start += i + 1,
            None => return text.len(),
        }
    }
    let line_end = text[line_start..]
        .find('\n')
        .map_or(text.len(), |i| line_start + i);
    let mut units = 0u32;
    for (i, c) in text[line_start..line_end].char_indices() {
        if units >= pos.character {
            return line_start + i;
        }
        units += c.len_utf16() as u32;
    }
    line_end
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_utf16_units() {
        let text = "a = 1\n# 7 × 8 😀 x\nb";
        let x = text.find(" x").unwrap() + 1;
        // `# 7 × 8 ` is 8 units, the emoji 2 more, then a space.
        assert_eq!(position(text, x), Position::new(1, 11));
        assert_eq!(offset(text, Position::new(1, 11)), x);
        assert_eq!(position(text, text.len()), Position::new(2, 1));
        assert_eq!(offset(text, Position::new(9, 0)), text.len());
        assert_eq!(offset(text, Position::new(0, 99)), 5);
    }
}
