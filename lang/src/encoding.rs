//! The bytes of a plan file to its text.
//!
//! Plans are UTF-8. A file that is not (a comment saved in Latin-1 or GBK, a file saved as
//! UTF-16) is an error in the plan, located at its first bad byte like any other, not a
//! failure to read the file: every front end (check, fmt, the LSP's imports) decodes here,
//! so they all say the same thing. The text handed on replaces each bad sequence with
//! U+FFFD, so that the rest of the file is still parsed and checked; lines and the columns
//! before the first bad byte are those of the file.

use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::span::{FileId, Span};

pub struct Decoded {
    /// The file's text, each sequence that is not UTF-8 replaced with U+FFFD.
    pub text: String,
    /// P0103 at the first bad byte, when there is one.
    pub error: Option<Diagnostic>,
}

/// Decodes a file's bytes; never fails.
pub fn decode(bytes: Vec<u8>, file: FileId) -> Decoded {
    let (bytes, first) = match String::from_utf8(bytes) {
        Ok(text) => return Decoded { text, error: None },
        Err(e) => {
            let first = e.utf8_error().valid_up_to();
            (e.into_bytes(), first)
        }
    };
    // The prefix before the first bad byte is the same in both texts, so the offset of the
    // first bad byte is also where its U+FFFD stands.
    let lossy = String::from_utf8_lossy(&bytes).into_owned();
    let bad = bytes[first];
    let span = Span::new(first, first + '\u{fffd}'.len_utf8());
    let utf16 = bytes.starts_with(&[0xff, 0xfe]) || bytes.starts_with(&[0xfe, 0xff]);
    let mut d = Diagnostic::new(
        codes::P0103,
        format!("the file is not UTF-8: byte 0x{bad:02X} here does not form a UTF-8 character"),
    )
    .at(file, span, "not UTF-8")
    .help(if utf16 {
        "the file is UTF-16 (it starts with a UTF-16 byte order mark): save it as UTF-8".to_string()
    } else {
        "save the file as UTF-8 (in most editors: \"Save with Encoding\" or \"Reopen with \
         Encoding\", then UTF-8); planc reads plans only as UTF-8"
            .to_string()
    });
    if !utf16 && bad >= 0xa0 {
        // Latin-1 and Windows-1252 agree above 0x9F: name the character the user probably
        // typed, so that the place is recognisable.
        let latin1 = char::from(bad);
        d = d.note(format!(
            "read as Latin-1 (ISO-8859-1) or Windows-1252, this byte is `{latin1}`; in another \
             encoding (GBK, Shift-JIS) it starts a character of two bytes"
        ));
    }
    let more = bytes
        .utf8_chunks()
        .filter(|c| !c.invalid().is_empty())
        .count()
        - 1;
    if more > 0 {
        d = d.note(format!(
            "{more} more place{} in the file {} not UTF-8",
            if more == 1 { "" } else { "s" },
            if more == 1 { "is" } else { "are" }
        ));
    }
    Decoded {
        text: lossy,
        error: Some(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::span::LineIndex;

    #[test]
    fn utf8_passes_through() {
        let d = decode("a = \"é\"\n".as_bytes().to_vec(), FileId(0));
        assert!(d.error.is_none());
        assert_eq!(d.text, "a = \"é\"\n");
    }

    #[test]
    fn the_first_bad_byte_is_located_and_named() {
        let bytes = b"model m {\n    # caf\xe9 au lait\n    layers = 1 # na\xefve\n}\n".to_vec();
        let d = decode(bytes, FileId(3));
        let e = d.error.unwrap();
        assert_eq!(e.code, "P0103");
        let l = e.primary.unwrap();
        assert_eq!(l.file, FileId(3));
        let idx = LineIndex::new(&d.text);
        assert_eq!(idx.line_col(&d.text, l.span.start as usize), (2, 10));
        assert_eq!(&d.text[l.span.range()], "\u{fffd}");
        assert!(e.message.contains("0xE9"), "{}", e.message);
        assert!(e.notes[0].contains("`é`"), "{:?}", e.notes);
        assert_eq!(e.notes[1], "1 more place in the file is not UTF-8");
        assert!(d.text.contains("layers = 1"));
    }

    #[test]
    fn utf16_is_recognised() {
        let bytes: Vec<u8> = [0xff, 0xfe]
            .into_iter()
            .chain("a = 1".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        let e = decode(bytes, FileId(0)).error.unwrap();
        assert!(e.help.unwrap().contains("UTF-16"));
    }
}
