//! Source text to tokens, with nom.
//!
//! The lexer never stops at a bad character: it reports it, skips it and goes on, so that
//! the parser sees the whole file and can report every error in one run. Newlines are
//! tokens because they end attributes.
//!
//! Text from the outside world is accepted as it comes: a byte order mark at the start is
//! skipped, `\r` (CRLF line ends) is a space, and a run of characters that start no token
//! (NUL bytes, control characters, a pasted binary) is one diagnostic, not one per byte.

use nom::bytes::complete::{tag, take_while, take_while1};
use nom::character::complete::{char, digit1, one_of};
use nom::combinator::{opt, recognize};
use nom::sequence::pair;
use nom::{IResult, Parser};

use crate::codes;
use crate::diagnostic::{Capped, Diagnostic};
use crate::span::{FileId, Span};
use crate::units::{self, Unit};

#[derive(Clone, Debug, PartialEq)]
pub enum TokenKind {
    Ident(String),
    Number(f64),
    /// A number with a unit; `value` is in the unit as written, not yet in base units.
    Quantity {
        value: f64,
        unit: Unit,
        unit_span: Span,
    },
    Str(String),
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    LParen,
    RParen,
    Eq,
    Comma,
    Semi,
    Plus,
    Minus,
    Star,
    Slash,
    Dot,
    Newline,
    /// Stands where a bad token was, so the parser can skip it like any other value.
    Error,
    Eof,
}

impl TokenKind {
    pub fn describe(&self) -> String {
        match self {
            TokenKind::Ident(s) => format!("`{s}`"),
            TokenKind::Number(_) => "a number".into(),
            TokenKind::Quantity { .. } => "a quantity".into(),
            TokenKind::Str(_) => "a string".into(),
            TokenKind::LBrace => "`{`".into(),
            TokenKind::RBrace => "`}`".into(),
            TokenKind::LBracket => "`[`".into(),
            TokenKind::RBracket => "`]`".into(),
            TokenKind::LParen => "`(`".into(),
            TokenKind::RParen => "`)`".into(),
            TokenKind::Eq => "`=`".into(),
            TokenKind::Comma => "`,`".into(),
            TokenKind::Semi => "`;`".into(),
            TokenKind::Plus => "`+`".into(),
            TokenKind::Minus => "`-`".into(),
            TokenKind::Star => "`*`".into(),
            TokenKind::Slash => "`/`".into(),
            TokenKind::Dot => "`.`".into(),
            TokenKind::Newline => "end of line".into(),
            TokenKind::Error => "an invalid token".into(),
            TokenKind::Eof => "end of file".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub kind: TokenKind,
    pub span: Span,
}

/// A `#` comment, kept so that the formatter can put it back.
#[derive(Clone, Debug, PartialEq)]
pub struct Comment {
    pub text: String,
    pub span: Span,
}

pub struct Lexed {
    pub tokens: Vec<Token>,
    pub comments: Vec<Comment>,
    pub diagnostics: Capped,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn identifier(i: &str) -> IResult<&str, &str> {
    recognize(pair(take_while1(is_ident_start), take_while(is_ident_char))).parse(i)
}

fn digits(i: &str) -> IResult<&str, &str> {
    recognize(pair(
        digit1,
        take_while(|c: char| c.is_ascii_digit() || c == '_'),
    ))
    .parse(i)
}

/// `42`, `1_536`, `0.5`, `1.5e9`, `2E-3`.
fn number_text(i: &str) -> IResult<&str, &str> {
    recognize((
        digits,
        opt(pair(char('.'), digits)),
        opt((one_of("eE"), opt(one_of("+-")), digit1)),
    ))
    .parse(i)
}

/// A unit symbol, longest first; it must not run on into an identifier (`4 hidden` is a
/// number and a name, not four hours).
fn unit_symbol(i: &str) -> IResult<&str, Unit> {
    for unit in units::UNITS {
        if let Ok((rest, _)) = tag::<_, _, nom::error::Error<&str>>(unit.symbol).parse(i) {
            let runs_on = rest.chars().next().is_some_and(is_ident_char);
            if !runs_on || unit.symbol == "%" {
                return Ok((rest, *unit));
            }
        }
    }
    Err(nom::Err::Error(nom::error::Error::new(
        i,
        nom::error::ErrorKind::Tag,
    )))
}

fn spaces(i: &str) -> IResult<&str, &str> {
    take_while(|c| c == ' ' || c == '\t' || c == '\r').parse(i)
}

fn punct(i: &str) -> IResult<&str, TokenKind> {
    let (rest, c) = one_of("{}[]()=,;+-*/.\n").parse(i)?;
    let kind = match c {
        '{' => TokenKind::LBrace,
        '}' => TokenKind::RBrace,
        '[' => TokenKind::LBracket,
        ']' => TokenKind::RBracket,
        '(' => TokenKind::LParen,
        ')' => TokenKind::RParen,
        '=' => TokenKind::Eq,
        ',' => TokenKind::Comma,
        ';' => TokenKind::Semi,
        '+' => TokenKind::Plus,
        '-' => TokenKind::Minus,
        '*' => TokenKind::Star,
        '/' => TokenKind::Slash,
        '.' => TokenKind::Dot,
        _ => TokenKind::Newline,
    };
    Ok((rest, kind))
}

struct Lexer<'a> {
    src: &'a str,
    file: FileId,
    out: Lexed,
}

impl<'a> Lexer<'a> {
    fn offset(&self, rest: &str) -> usize {
        self.src.len() - rest.len()
    }

    fn push(&mut self, kind: TokenKind, start: usize, end: usize) {
        self.out.tokens.push(Token {
            kind,
            span: Span::new(start, end),
        });
    }

    fn run(mut self) -> Lexed {
        // A byte order mark says "UTF-8" to editors that need telling; it is not text.
        let mut rest = self.src.strip_prefix('\u{feff}').unwrap_or(self.src);
        loop {
            rest = spaces(rest).map(|(r, _)| r).unwrap_or(rest);
            let start = self.offset(rest);
            let Some(c) = rest.chars().next() else {
                self.push(TokenKind::Eof, start, start);
                return self.out;
            };
            rest = if c == '#' {
                let end = rest.find('\n').unwrap_or(rest.len());
                self.out.comments.push(Comment {
                    text: rest[..end].to_string(),
                    span: Span::new(start, start + end),
                });
                &rest[end..]
            } else if c == '"' {
                self.string(rest)
            } else if c.is_ascii_digit() {
                self.number(rest)
            } else if let Ok((r, id)) = identifier(rest) {
                self.push(TokenKind::Ident(id.to_string()), start, self.offset(r));
                r
            } else if let Ok((r, kind)) = punct(rest) {
                self.push(kind, start, self.offset(r));
                r
            } else {
                self.unexpected(rest)
            };
        }
    }

    /// A run of characters that start no token, as one diagnostic and one error token.
    fn unexpected(&mut self, rest: &'a str) -> &'a str {
        let start = self.offset(rest);
        let c = rest.chars().next().expect("the caller saw a character");
        let len = rest
            .char_indices()
            .find(|&(_, x)| starts_token(x))
            .map_or(rest.len(), |(i, _)| i);
        let end = start + len;
        let count = rest[..len].chars().count();
        let message = if count == 1 {
            format!("unexpected character {}", show_char(c))
        } else {
            format!(
                "{count} unexpected characters, starting with {}",
                show_char(c)
            )
        };
        self.out.diagnostics.push(
            Diagnostic::new(codes::P0001, message)
                .at(self.file, Span::new(start, end), "not valid here")
                .help(help_for_char(c)),
        );
        self.push(TokenKind::Error, start, end);
        &rest[len..]
    }

    fn string(&mut self, rest: &'a str) -> &'a str {
        let start = self.offset(rest);
        let mut value = String::new();
        let mut chars = rest.char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.push(TokenKind::Str(value), start, start + i + 1);
                    return &rest[i + 1..];
                }
                '\\' => match chars.next() {
                    Some((_, e @ ('"' | '\\'))) => value.push(e),
                    Some((j, e)) => {
                        let s = start + i;
                        self.out.diagnostics.push(
                            Diagnostic::new(codes::P0007, format!("invalid escape `\\{e}`"))
                                .at(
                                    self.file,
                                    Span::new(s, start + j + e.len_utf8()),
                                    "not an escape",
                                )
                                .help("strings accept only `\\\"` and `\\\\`"),
                        );
                        value.push(e);
                    }
                    None => break,
                },
                '\n' => {
                    return self.unterminated(rest, start, i);
                }
                c => value.push(c),
            }
        }
        self.unterminated(rest, start, rest.len())
    }

    fn unterminated(&mut self, rest: &'a str, start: usize, len: usize) -> &'a str {
        self.out.diagnostics.push(
            Diagnostic::new(codes::P0002, "unterminated string")
                .at(
                    self.file,
                    Span::new(start, start + len),
                    "this string has no closing `\"`",
                )
                .help("close the string with `\"` before the end of the line"),
        );
        self.push(TokenKind::Error, start, start + len);
        &rest[len..]
    }

    fn number(&mut self, rest: &'a str) -> &'a str {
        let start = self.offset(rest);
        let (after, text) = number_text(rest).expect("caller checked for a digit");
        let end = self.offset(after);
        let cleaned: String = text.chars().filter(|&c| c != '_').collect();
        let value = match cleaned.parse::<f64>() {
            Ok(v) => v,
            Err(_) => {
                self.out.diagnostics.push(
                    Diagnostic::new(codes::P0004, format!("malformed number `{text}`")).at(
                        self.file,
                        Span::new(start, end),
                        "not a number",
                    ),
                );
                self.push(TokenKind::Error, start, end);
                return after;
            }
        };
        // A digit run straight into letters (`80GiBs`, `1.5x`) is a bad unit, not a name.
        let (after_space, _) = spaces(after).unwrap_or((after, ""));
        if let Ok((r, unit)) = unit_symbol(after_space) {
            let unit_start = self.offset(after_space);
            let unit_end = self.offset(r);
            self.push(
                TokenKind::Quantity {
                    value,
                    unit,
                    unit_span: Span::new(unit_start, unit_end),
                },
                start,
                unit_end,
            );
            return r;
        }
        if after.as_ptr() != after_space.as_ptr() {
            // `5 usec`: a spaced word that is nearly a unit was meant as one. Other names
            // after a number (`4 hidden`) are left to the parser.
            let (_, word) =
                take_while::<_, _, nom::error::Error<&str>>(|c: char| is_ident_char(c) || c == '/')
                    .parse(after_space)
                    .unwrap_or((after_space, ""));
            if let Some(s) = units::suggest_unit(word).filter(|_| !word.is_empty()) {
                let word_start = self.offset(after_space);
                let word_end = word_start + word.len();
                self.out.diagnostics.push(
                    Diagnostic::new(codes::P0003, format!("unknown unit `{word}`"))
                        .at(self.file, Span::new(word_start, word_end), "not a unit")
                        .suggest(s),
                );
                self.push(TokenKind::Error, start, word_end);
                return &after_space[word.len()..];
            }
        }
        if matches!(after.as_bytes(), [b'e' | b'E', rest @ ..] if !rest.first().is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_'))
        {
            self.out.diagnostics.push(
                Diagnostic::new(
                    codes::P0004,
                    format!("malformed number `{text}{}`", &after[..1]),
                )
                .at(
                    self.file,
                    Span::new(start, end + 1),
                    "the exponent has no digits",
                )
                .help(format!("write the exponent's digits, e.g. `{text}e3`")),
            );
            self.push(TokenKind::Error, start, end + 1);
            return &after[1..];
        }
        if after.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            let (r, word) =
                take_while::<_, _, nom::error::Error<&str>>(|c: char| is_ident_char(c) || c == '/')
                    .parse(after)
                    .unwrap_or((after, ""));
            let word_end = self.offset(r);
            // `1f1b` is a schedule name: digits running into a word that itself holds a
            // digit read as one identifier, not as a number with a bad unit.
            if after.as_ptr() == after_space.as_ptr()
                && word.chars().any(|c| c.is_ascii_digit())
                && !text.contains(['.', 'e', 'E'])
            {
                self.push(
                    TokenKind::Ident(self.src[start..word_end].to_string()),
                    start,
                    word_end,
                );
                return r;
            }
            let mut d = Diagnostic::new(codes::P0003, format!("unknown unit `{word}`")).at(
                self.file,
                Span::new(end, word_end),
                "not a unit",
            );
            d = match units::suggest_unit(word) {
                Some(s) => d.help(format!("did you mean `{s}`?")),
                None => d.help("units: B KB MB GB TB KiB MiB GiB TiB, GB/s Gb/s Gbps, ns us ms s min h, TFLOPS PFLOPS, %, USD/h EUR/h GBP/h CNY/h JPY/h"),
            };
            self.out.diagnostics.push(d);
            self.push(TokenKind::Error, start, word_end);
            return r;
        }
        self.push(TokenKind::Number(value), start, end);
        after
    }
}

/// Whether a character may begin a token, a comment or the space between them (where a
/// run of unexpected characters ends).
fn starts_token(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '#' | '"' | '_')
        || c.is_ascii_alphanumeric()
        || "{}[]()=,;+-*/.\n".contains(c)
}

/// Invisible characters would print as nothing (or garble a terminal): they are named by
/// their code point instead.
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2028}' | '\u{2029}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

fn show_char(c: char) -> String {
    if invisible(c) {
        format!("U+{:04X}", c as u32)
    } else {
        format!("`{c}`")
    }
}

fn help_for_char(c: char) -> String {
    match c {
        ':' => "attributes are written `name = value`, not `name: value`".into(),
        '\'' => "strings use double quotes: \"...\"".into(),
        '/' => "comments start with `#`".into(),
        '\0' => "remove it: a plan is text, and NUL bytes mean the file is binary or UTF-16; \
                  save it as UTF-8"
            .into(),
        '\u{feff}' => {
            "remove it: a byte order mark belongs only at the very start of a file".into()
        }
        '\u{fffd}' => "remove it: this stands for bytes that were not UTF-8".into(),
        c if invisible(c) => "remove it: an invisible or control character, perhaps pasted along \
                               with the text"
            .into(),
        _ => "remove it; comments start with `#`".into(),
    }
}

/// Splits a file into tokens. Never fails: problems become diagnostics and `Error` tokens.
pub fn lex(src: &str, file: FileId) -> Lexed {
    Lexer {
        src,
        file,
        out: Lexed {
            tokens: Vec::new(),
            comments: Vec::new(),
            diagnostics: Capped::new(crate::parser::MAX_SYNTAX_ERRORS),
        },
    }
    .run()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<TokenKind> {
        lex(src, FileId(0))
            .tokens
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn numbers_with_underscores_and_exponents() {
        assert_eq!(
            kinds("1_536 0.5 1.5e9"),
            vec![
                TokenKind::Number(1536.0),
                TokenKind::Number(0.5),
                TokenKind::Number(1.5e9),
                TokenKind::Eof
            ]
        );
    }

    #[test]
    fn quantities_with_and_without_space() {
        let toks = kinds("80 GiB 450GB/s 10 %");
        let units: Vec<&str> = toks
            .iter()
            .filter_map(|k| match k {
                TokenKind::Quantity { unit, .. } => Some(unit.symbol),
                _ => None,
            })
            .collect();
        assert_eq!(units, vec!["GiB", "GB/s", "%"]);
    }

    #[test]
    fn a_name_after_a_number_is_not_a_unit() {
        assert_eq!(
            kinds("4 * hidden 4 hidden"),
            vec![
                TokenKind::Number(4.0),
                TokenKind::Star,
                TokenKind::Ident("hidden".into()),
                TokenKind::Number(4.0),
                TokenKind::Ident("hidden".into()),
                TokenKind::Eof
            ]
        );
    }

    #[test]
    fn bad_unit_is_reported_with_suggestion() {
        let lexed = lex("x = 80Gib", FileId(0));
        assert_eq!(lexed.diagnostics.len(), 1);
        assert_eq!(lexed.diagnostics[0].code, "P0003");
        assert_eq!(
            lexed.diagnostics[0].help.as_deref(),
            Some("did you mean `GiB`?")
        );
    }

    #[test]
    fn schedule_names_starting_with_digits_are_identifiers() {
        assert_eq!(
            kinds("1f1b"),
            vec![TokenKind::Ident("1f1b".into()), TokenKind::Eof]
        );
    }

    #[test]
    fn strings_and_escapes() {
        assert_eq!(
            kinds(r#""a\"b\\c""#),
            vec![TokenKind::Str("a\"b\\c".into()), TokenKind::Eof]
        );
        let lexed = lex("\"open\nx", FileId(0));
        assert_eq!(lexed.diagnostics[0].code, "P0002");
    }

    #[test]
    fn comments_are_kept_aside() {
        let lexed = lex("a = 1 # one\n", FileId(0));
        assert_eq!(lexed.comments[0].text, "# one");
        assert_eq!(lexed.tokens.len(), 5);
    }

    #[test]
    fn every_bad_character_is_reported() {
        let lexed = lex("a = 1 @ b = 2 $", FileId(0));
        assert_eq!(lexed.diagnostics.len(), 2);
    }

    #[test]
    fn a_run_of_bad_characters_is_one_error_and_invisible_ones_are_named() {
        let src = "a = 1 \0\0\0\u{7}@ b";
        let lexed = lex(src, FileId(0));
        assert_eq!(lexed.diagnostics.len(), 1);
        let d = &lexed.diagnostics[0];
        assert_eq!(d.message, "5 unexpected characters, starting with U+0000");
        assert_eq!(
            &src[d.primary.as_ref().unwrap().span.range()],
            "\0\0\0\u{7}@"
        );
        assert_eq!(kinds(src).len(), 6);
    }

    #[test]
    fn a_byte_order_mark_at_the_start_is_skipped_and_crlf_is_space() {
        let src = "\u{feff}a = 1\r\n";
        let lexed = lex(src, FileId(0));
        assert!(lexed.diagnostics.is_empty());
        assert_eq!(lexed.tokens[0].span, Span::new(3, 4));
        let lexed = lex("a = \u{feff}1", FileId(0));
        assert_eq!(lexed.diagnostics[0].message, "unexpected character U+FEFF");
    }

    #[test]
    fn a_megabyte_of_garbage_is_a_bounded_list_of_errors() {
        let src = "@ ".repeat(500_000);
        let lexed = lex(&src, FileId(0));
        assert_eq!(lexed.diagnostics.len(), crate::parser::MAX_SYNTAX_ERRORS);
        assert_eq!(
            lexed.diagnostics.dropped(),
            500_000 - crate::parser::MAX_SYNTAX_ERRORS
        );
    }
}
