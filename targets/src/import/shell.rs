//! The shell layer of `planc import`: a launch script (or one command line) read the way
//! bash would run it, as far as that can be done without running anything.
//!
//! Line continuations, quotes, comments, here-documents and redirections are lexed; then the
//! script is walked top to bottom: assignments (`VAR=…`, `export`, `declare`, `local`,
//! arrays `A=( … )` and `A+=( … )`) set variables, and every command's words are expanded
//! with them: `$VAR`, `${VAR}`, `${VAR:-default}` (and `-`, `:=`, `=`, `:+`, `+`),
//! `"${A[@]}"`, `${A[0]}`, `$((arithmetic))`. Unquoted expansions are split into words
//! (by `shlex`, so a variable holding `--flag 'a b'` gives what its author meant). What
//! cannot be known without running the script (`$(command)`, a variable the script never
//! sets, a positional parameter) is kept as written and marked unresolved. Control flow is
//! not followed: every branch's assignments are applied in the order written, so the last
//! one wins, which the caller reports when it matters.

use std::collections::HashMap;

/// One expanded word of a command.
#[derive(Clone, Debug, PartialEq)]
pub struct Word {
    pub text: String,
    /// It holds something only running the script would tell (`$(…)`, an unset variable).
    pub unresolved: bool,
    /// The line the text was written on: the word's own, or the assignment's (an array
    /// element's) for a variable's value.
    pub line: usize,
}

impl Word {
    pub fn new(text: impl Into<String>, line: usize) -> Word {
        Word {
            text: text.into(),
            unresolved: false,
            line,
        }
    }
}

/// A simple command after expansion, with the line it starts on (1-based).
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    pub line: usize,
    pub words: Vec<Word>,
}

/// One assignment the script makes.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub name: String,
    pub value: String,
    pub line: usize,
    pub exported: bool,
    pub unresolved: bool,
}

/// A here-document: its body and the file it is written to, when it is (`cat > f <<EOF`).
#[derive(Clone, Debug, PartialEq)]
pub struct Heredoc {
    pub line: usize,
    pub target: Option<String>,
    pub body: String,
}

#[derive(Clone, Debug, Default)]
pub struct Script {
    pub commands: Vec<Command>,
    pub assignments: Vec<Assignment>,
    /// `#SBATCH` directives: line and words.
    pub sbatch: Vec<(usize, Vec<String>)>,
    pub heredocs: Vec<Heredoc>,
    /// The text was a string escaped for a document (`\"` and `\\` at line ends) and was
    /// unescaped before reading.
    pub unescaped: bool,
}

impl Script {
    /// The last value the script gives `name`, if it gives one.
    pub fn var(&self, name: &str) -> Option<&Assignment> {
        self.assignments.iter().rev().find(|a| a.name == name)
    }
}

// ----- lexing ---------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Part {
    /// Unquoted text (escapes removed).
    Lit(String),
    /// Quoted text: not split, not expanded.
    Quoted(String),
    /// `"…"`: its parts are expanded but not split.
    Double(Vec<Part>),
    Var(VarRef),
    Arith(String),
    /// `$(…)` or backquotes, as written.
    Cmd(String),
}

#[derive(Clone, Debug, PartialEq)]
struct VarRef {
    name: String,
    /// `[@]`, `[*]`, `[0]`.
    index: Option<String>,
    /// `:-`, `-`, `:=`, `=`, `:+`, `+`, or another operator kept as unresolved.
    op: Option<(String, Vec<Part>)>,
    length: bool,
    /// As written, for an unresolved expansion.
    raw: String,
}

#[derive(Clone, Debug, PartialEq)]
enum RawWord {
    Parts(Vec<Part>),
    /// `NAME=( … )` or `NAME+=( … )`: the `NAME=` prefix and the elements with their lines.
    Array(String, Vec<(usize, Vec<Part>)>),
}

#[derive(Clone, Debug)]
struct RawCommand {
    line: usize,
    /// Each word with the line it starts on.
    words: Vec<(usize, RawWord)>,
    /// Redirect targets of the command (`> file`), for here-documents.
    redirect_to: Option<Vec<Part>>,
    heredoc: Option<String>,
}

struct Lexer {
    c: Vec<char>,
    pos: usize,
    line: usize,
    sbatch: Vec<(usize, Vec<String>)>,
    heredocs: Vec<(usize, Option<Vec<Part>>, String)>,
}

const OPERATOR_CHARS: &[char] = &[';', '&', '|', '(', ')', '\n'];

impl Lexer {
    fn peek(&self) -> Option<char> {
        self.c.get(self.pos).copied()
    }

    fn peek_at(&self, k: usize) -> Option<char> {
        self.c.get(self.pos + k).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let ch = self.peek()?;
        self.pos += 1;
        if ch == '\n' {
            self.line += 1;
        }
        Some(ch)
    }

    /// Skips blanks and line continuations (not newlines).
    fn blanks(&mut self) {
        loop {
            match self.peek() {
                Some(' ' | '\t' | '\r') => {
                    self.bump();
                }
                Some('\\') if self.peek_at(1) == Some('\n') => {
                    self.bump();
                    self.bump();
                }
                _ => break,
            }
        }
    }

    fn comment(&mut self) {
        let start = self.pos;
        let line = self.line;
        while let Some(ch) = self.peek() {
            if ch == '\n' {
                break;
            }
            self.bump();
        }
        let text: String = self.c[start..self.pos].iter().collect();
        if let Some(rest) = text.strip_prefix("#SBATCH") {
            let words = shlex::split(rest)
                .unwrap_or_else(|| rest.split_whitespace().map(str::to_string).collect());
            self.sbatch.push((line, words));
        }
    }

    /// The commands of the whole text.
    fn commands(&mut self) -> Vec<RawCommand> {
        let mut out = Vec::new();
        while self.peek().is_some() {
            if let Some(c) = self.command() {
                out.push(c);
            }
        }
        out
    }

    /// One simple command, up to an operator or the end of its line.
    fn command(&mut self) -> Option<RawCommand> {
        let mut cmd = RawCommand {
            line: self.line,
            words: Vec::new(),
            redirect_to: None,
            heredoc: None,
        };
        let mut pending_heredoc: Option<(String, bool)> = None;
        // Inside `[[ … ]]`, `&&`, `||` and parentheses belong to the test.
        let mut in_test = false;
        loop {
            self.blanks();
            if cmd.words.is_empty() {
                cmd.line = self.line;
            }
            let Some(ch) = self.peek() else { break };
            if ch == '#' {
                self.comment();
                continue;
            }
            if let Some((target, heredoc)) = self.redirect() {
                if let Some(h) = heredoc {
                    pending_heredoc = Some(h);
                } else if target.is_some() {
                    cmd.redirect_to = target;
                }
                continue;
            }
            if in_test && ch != '\n' && OPERATOR_CHARS.contains(&ch) {
                self.bump();
                cmd.words.push((
                    self.line,
                    RawWord::Parts(vec![Part::Quoted(ch.to_string())]),
                ));
                continue;
            }
            if OPERATOR_CHARS.contains(&ch) {
                self.bump();
                if ch == '\n' {
                    if let Some((delim, strip)) = pending_heredoc.take() {
                        let body = self.heredoc_body(&delim, strip);
                        cmd.heredoc = Some(body.clone());
                        self.heredocs
                            .push((cmd.line, cmd.redirect_to.clone(), body));
                    }
                }
                if ch == '(' && cmd.words.is_empty() {
                    continue;
                }
                break;
            }
            let line = self.line;
            let w = self.word();
            match bare(&w) {
                Some("[[") => in_test = true,
                Some("]]") => in_test = false,
                _ => {}
            }
            cmd.words.push((line, w));
        }
        if let Some((delim, strip)) = pending_heredoc {
            let body = self.heredoc_body(&delim, strip);
            self.heredocs
                .push((cmd.line, cmd.redirect_to.clone(), body));
        }
        (!cmd.words.is_empty()).then_some(cmd)
    }

    /// A redirection at the cursor: its target word, or a here-document's delimiter.
    #[allow(clippy::type_complexity)]
    fn redirect(&mut self) -> Option<(Option<Vec<Part>>, Option<(String, bool)>)> {
        let mut k = 0;
        while self.peek_at(k).is_some_and(|c| c.is_ascii_digit()) {
            k += 1;
        }
        let first = self.peek_at(k)?;
        let amp_gt = first == '&' && self.peek_at(k + 1) == Some('>');
        if !(first == '<' || first == '>' || amp_gt) {
            return None;
        }
        for _ in 0..k {
            self.bump();
        }
        let mut op = String::new();
        while let Some(ch) = self.peek() {
            if matches!(ch, '<' | '>' | '&') {
                op.push(ch);
                self.bump();
            } else {
                break;
            }
        }
        if op.starts_with("<<") && op != "<<<" {
            let strip = self.peek() == Some('-');
            if strip {
                self.bump();
            }
            self.blanks();
            let delim = self.word();
            let text = literal_text(&delim);
            return Some((None, Some((text, strip))));
        }
        if op.ends_with('&') && self.peek().is_some_and(|c| c.is_ascii_digit() || c == '-') {
            while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '-') {
                self.bump();
            }
            return Some((None, None));
        }
        self.blanks();
        let target = match self.word() {
            RawWord::Parts(p) => p,
            RawWord::Array(..) => Vec::new(),
        };
        Some((Some(target), None))
    }

    fn heredoc_body(&mut self, delim: &str, strip: bool) -> String {
        let mut body = String::new();
        while self.peek().is_some() {
            let start = self.pos;
            while self.peek().is_some_and(|c| c != '\n') {
                self.bump();
            }
            let line: String = self.c[start..self.pos].iter().collect();
            self.bump();
            let cmp = if strip {
                line.trim_start_matches('\t')
            } else {
                line.as_str()
            };
            if cmp.trim_end_matches('\r') == delim {
                break;
            }
            body.push_str(&line);
            body.push('\n');
        }
        body
    }

    /// One word: its quoted and unquoted parts, up to a blank or an operator.
    fn word(&mut self) -> RawWord {
        let mut parts = Vec::new();
        let mut lit = String::new();
        while let Some(ch) = self.peek() {
            match ch {
                ' ' | '\t' | '\r' => break,
                c if OPERATOR_CHARS.contains(&c) => {
                    if c == '(' && is_array_prefix(&parts, &lit) {
                        self.bump();
                        let prefix = lit.clone();
                        return RawWord::Array(prefix, self.array_elements());
                    }
                    break;
                }
                '\\' => {
                    self.bump();
                    match self.bump() {
                        Some('\n') | None => {}
                        Some(e) => lit.push(e),
                    }
                }
                '\'' => {
                    flush(&mut parts, &mut lit);
                    self.bump();
                    let mut s = String::new();
                    while let Some(c) = self.bump() {
                        if c == '\'' {
                            break;
                        }
                        s.push(c);
                    }
                    parts.push(Part::Quoted(s));
                }
                '"' => {
                    flush(&mut parts, &mut lit);
                    self.bump();
                    parts.push(Part::Double(self.double_quoted()));
                }
                '$' | '`' => {
                    if let Some(p) = self.dollar() {
                        flush(&mut parts, &mut lit);
                        parts.push(p);
                    } else {
                        self.bump();
                        lit.push('$');
                    }
                }
                _ => {
                    self.bump();
                    lit.push(ch);
                }
            }
        }
        flush(&mut parts, &mut lit);
        RawWord::Parts(parts)
    }

    fn array_elements(&mut self) -> Vec<(usize, Vec<Part>)> {
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => break,
                Some(' ' | '\t' | '\r' | '\n') => {
                    self.bump();
                }
                Some('\\') if self.peek_at(1) == Some('\n') => {
                    self.bump();
                    self.bump();
                }
                Some('#') => self.comment(),
                Some(')') => {
                    self.bump();
                    break;
                }
                Some(_) => match (self.line, self.word()) {
                    (line, RawWord::Parts(p)) if !p.is_empty() => out.push((line, p)),
                    (_, RawWord::Parts(_)) => {
                        // An operator character inside the array: skip it.
                        self.bump();
                    }
                    (_, RawWord::Array(..)) => {}
                },
            }
        }
        out
    }

    fn double_quoted(&mut self) -> Vec<Part> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        while let Some(ch) = self.peek() {
            match ch {
                '"' => {
                    self.bump();
                    break;
                }
                '\\' => {
                    self.bump();
                    match self.bump() {
                        Some('\n') => {}
                        Some(e @ ('"' | '\\' | '$' | '`')) => lit.push(e),
                        Some(e) => {
                            lit.push('\\');
                            lit.push(e);
                        }
                        None => {}
                    }
                }
                '$' | '`' => {
                    if let Some(p) = self.dollar() {
                        if !lit.is_empty() {
                            parts.push(Part::Quoted(std::mem::take(&mut lit)));
                        }
                        parts.push(p);
                    } else {
                        self.bump();
                        lit.push('$');
                    }
                }
                _ => {
                    self.bump();
                    lit.push(ch);
                }
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Quoted(lit));
        }
        parts
    }

    /// An expansion at the cursor (`$…` or a backquote), or None for a lone `$`.
    fn dollar(&mut self) -> Option<Part> {
        if self.peek() == Some('`') {
            self.bump();
            let mut s = String::new();
            while let Some(c) = self.bump() {
                if c == '`' {
                    break;
                }
                s.push(c);
            }
            return Some(Part::Cmd(format!("`{s}`")));
        }
        let next = self.peek_at(1)?;
        match next {
            '(' if self.peek_at(2) == Some('(') => {
                self.pos += 3;
                let inner = self.balanced('(', ')');
                // The second closing parenthesis of `$(( … ))`.
                if self.peek() == Some(')') {
                    self.bump();
                }
                Some(Part::Arith(inner))
            }
            '(' => {
                self.pos += 2;
                let inner = self.balanced('(', ')');
                Some(Part::Cmd(format!("$({inner})")))
            }
            '{' => {
                self.pos += 2;
                let inner = self.balanced('{', '}');
                Some(Part::Var(parse_braced(&inner)))
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                self.bump();
                let mut name = String::new();
                while let Some(c) = self.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        name.push(c);
                        self.bump();
                    } else {
                        break;
                    }
                }
                Some(Part::Var(VarRef {
                    raw: format!("${name}"),
                    name,
                    index: None,
                    op: None,
                    length: false,
                }))
            }
            c if c.is_ascii_digit() || "@*#?$!-".contains(c) => {
                self.pos += 2;
                Some(Part::Var(VarRef {
                    name: c.to_string(),
                    index: None,
                    op: None,
                    length: false,
                    raw: format!("${c}"),
                }))
            }
            _ => None,
        }
    }

    /// Text up to the `close` that balances an already consumed `open`, quotes respected.
    fn balanced(&mut self, open: char, close: char) -> String {
        let mut depth = 1;
        let mut s = String::new();
        let mut quote: Option<char> = None;
        while let Some(c) = self.bump() {
            match quote {
                Some(q) => {
                    if c == q {
                        quote = None;
                    } else if c == '\\' && q == '"' {
                        s.push(c);
                        if let Some(e) = self.bump() {
                            s.push(e);
                        }
                        continue;
                    }
                }
                None if c == '\'' || c == '"' => quote = Some(c),
                None if c == open => depth += 1,
                None if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                None => {}
            }
            s.push(c);
        }
        s
    }
}

fn flush(parts: &mut Vec<Part>, lit: &mut String) {
    if !lit.is_empty() {
        parts.push(Part::Lit(std::mem::take(lit)));
    }
}

/// `NAME=` or `NAME+=` so far, with nothing quoted: the start of an array assignment.
fn is_array_prefix(parts: &[Part], lit: &str) -> bool {
    parts.is_empty() && assignment_name(lit).is_some_and(|(_, rest, _)| rest.is_empty())
}

/// `NAME=rest` or `NAME+=rest`: (name, rest, append).
fn assignment_name(s: &str) -> Option<(&str, &str, bool)> {
    let eq = s.find('=')?;
    let (name, append) = match s[..eq].strip_suffix('+') {
        Some(n) => (n, true),
        None => (&s[..eq], false),
    };
    let mut chars = name.chars();
    let first = chars.next()?;
    if !(first.is_ascii_alphabetic() || first == '_')
        || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return None;
    }
    Some((name, &s[eq + 1..], append))
}

/// `${…}`'s inside: `#NAME`, `NAME[idx]`, `NAME:-word`, ….
fn parse_braced(inner: &str) -> VarRef {
    let raw = format!("${{{inner}}}");
    let (length, body) = match inner.strip_prefix('#') {
        Some(b) if !b.is_empty() => (true, b),
        _ => (false, inner),
    };
    let name_end = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || "@*?$!".contains(c)))
        .unwrap_or(body.len());
    let name = body[..name_end].to_string();
    let mut rest = &body[name_end..];
    let mut index = None;
    if rest.starts_with('[') {
        if let Some(close) = rest.find(']') {
            index = Some(rest[1..close].to_string());
            rest = &rest[close + 1..];
        }
    }
    let op = if rest.is_empty() {
        None
    } else {
        let ops = [
            ":-", ":=", ":+", ":?", "-", "=", "+", "?", "%%", "%", "##", "#", "//", "/",
        ];
        let o = ops
            .iter()
            .find(|o| rest.starts_with(**o))
            .map(|o| o.to_string())
            .unwrap_or_else(|| rest.to_string());
        let word = rest.get(o.len()..).unwrap_or("");
        let mut lx = Lexer {
            c: word.chars().collect(),
            pos: 0,
            line: 0,
            sbatch: Vec::new(),
            heredocs: Vec::new(),
        };
        let parts = match lx.word_all() {
            RawWord::Parts(p) => p,
            RawWord::Array(..) => Vec::new(),
        };
        Some((o, parts))
    };
    VarRef {
        name,
        index,
        op,
        length,
        raw,
    }
}

impl Lexer {
    /// The whole remaining text as one word (a `${VAR:-word}` default, spaces included).
    fn word_all(&mut self) -> RawWord {
        let mut parts = Vec::new();
        while self.peek().is_some() {
            match self.word() {
                RawWord::Parts(p) => parts.extend(p),
                a => return a,
            }
            if let Some(c) = self.peek() {
                self.bump();
                parts.push(Part::Quoted(c.to_string()));
            }
        }
        RawWord::Parts(parts)
    }
}

fn literal_text(w: &RawWord) -> String {
    match w {
        RawWord::Parts(parts) => parts
            .iter()
            .map(|p| match p {
                Part::Lit(s) | Part::Quoted(s) => s.clone(),
                Part::Double(inner) => literal_text(&RawWord::Parts(inner.clone())),
                _ => String::new(),
            })
            .collect(),
        RawWord::Array(p, _) => p.clone(),
    }
}

// ----- expansion ----------------------------------------------------------------------------

/// A variable's value, with the line each part was written on.
#[derive(Clone, Debug)]
enum Val {
    /// The text, its line, and whether it holds something unresolved.
    Scalar(String, usize, bool),
    Array(Vec<(String, usize, bool)>),
}

/// A piece of an expanded word: its text, whether it may be split, and whether it was
/// resolved. `Break` separates the fields of an array expansion.
#[derive(Clone, Debug)]
enum Piece {
    Text {
        s: String,
        split: bool,
        unresolved: bool,
        line: usize,
    },
    Break,
}

#[derive(Default)]
struct Env {
    vars: HashMap<String, Val>,
}

impl Env {
    fn scalar(&self, name: &str) -> Option<String> {
        match self.vars.get(name)? {
            Val::Scalar(s, _, _) => Some(s.clone()),
            Val::Array(a) => a.first().map(|e| e.0.clone()),
        }
    }

    fn pieces(&self, parts: &[Part], quoted: bool, line: usize) -> Vec<Piece> {
        let mut out = Vec::new();
        for p in parts {
            match p {
                Part::Lit(s) | Part::Quoted(s) => out.push(text(s, false, false, line)),
                Part::Double(inner) => {
                    // `""` is a word even when empty; `"$@"` and `"${A[@]}"` are one word per
                    // element, so none when there are none.
                    let spread = matches!(inner.as_slice(), [Part::Var(v)]
                        if v.name == "@" || v.name == "*"
                            || matches!(v.index.as_deref(), Some("@" | "*")));
                    if !spread {
                        out.push(text("", false, false, line));
                    }
                    out.extend(self.pieces(inner, true, line));
                }
                Part::Cmd(s) => out.push(text(s, false, true, line)),
                Part::Arith(expr) => match arith(expr, self) {
                    Some(n) => out.push(text(&n.to_string(), !quoted, false, line)),
                    None => out.push(text(&format!("$(({expr}))"), false, true, line)),
                },
                Part::Var(v) => out.extend(self.var(v, quoted, line)),
            }
        }
        out
    }

    fn var(&self, v: &VarRef, quoted: bool, line: usize) -> Vec<Piece> {
        let unresolved = || vec![text(&v.raw, false, true, line)];
        if v.name == "@" || v.name == "*" {
            // The script's own arguments: none when it is read, not run.
            return Vec::new();
        }
        let value = self.vars.get(&v.name);
        if v.length {
            let n = match value {
                Some(Val::Array(a)) if v.index.is_some() => a.len(),
                Some(_) => self.scalar(&v.name).unwrap_or_default().chars().count(),
                None => return unresolved(),
            };
            return vec![text(&n.to_string(), false, false, line)];
        }
        let all = matches!(v.index.as_deref(), Some("@" | "*"));
        let current: Option<Val> = match (value, v.index.as_deref()) {
            (Some(Val::Array(a)), Some(i)) if !all => i
                .trim()
                .parse::<usize>()
                .ok()
                .and_then(|i| a.get(i))
                .map(|(s, l, u)| Val::Scalar(s.clone(), *l, *u)),
            (Some(val), _) => Some(val.clone()),
            (None, _) => None,
        };
        let set_nonempty = match &current {
            Some(Val::Scalar(s, _, _)) => !s.is_empty(),
            Some(Val::Array(a)) => !a.is_empty(),
            None => false,
        };
        if let Some((op, word)) = &v.op {
            let word = || self.pieces(word, quoted, line);
            match op.as_str() {
                ":-" | ":=" if !set_nonempty => return word(),
                "-" | "=" if current.is_none() => return word(),
                ":+" => return if set_nonempty { word() } else { Vec::new() },
                "+" => {
                    return if current.is_some() {
                        word()
                    } else {
                        Vec::new()
                    }
                }
                ":-" | ":=" | "-" | "=" | ":?" | "?" => {}
                _ => return unresolved(),
            }
        }
        match current {
            None => unresolved(),
            Some(Val::Scalar(s, l, u)) => vec![text(&s, !quoted, u, l)],
            Some(Val::Array(a)) if all => {
                let mut out = Vec::new();
                for (i, (e, l, u)) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(Piece::Break);
                    }
                    out.push(text(e, !quoted, *u, *l));
                }
                out
            }
            Some(Val::Array(a)) => match a.first() {
                Some((e, l, u)) => vec![text(e, !quoted, *u, *l)],
                None => vec![text("", !quoted, false, line)],
            },
        }
    }

    /// The fields of a word (several when unquoted expansions split, none when they are
    /// empty and nothing else is there).
    fn fields(&self, parts: &[Part], line: usize) -> Vec<Word> {
        let mut out: Vec<Word> = Vec::new();
        let mut cur: Option<Word> = None;
        for piece in self.pieces(parts, false, line) {
            let Piece::Text {
                s,
                split,
                unresolved,
                line,
            } = piece
            else {
                out.extend(cur.take());
                continue;
            };
            if !split {
                let w = cur.get_or_insert(Word::new("", line));
                w.text.push_str(&s);
                w.unresolved |= unresolved;
                continue;
            }
            let words = shlex::split(&s)
                .unwrap_or_else(|| s.split_whitespace().map(str::to_string).collect());
            let lead = s.starts_with(char::is_whitespace);
            let trail = s.ends_with(char::is_whitespace);
            for (i, w) in words.iter().enumerate() {
                if i > 0 || lead {
                    out.extend(cur.take());
                }
                let c = cur.get_or_insert(Word::new("", line));
                c.text.push_str(w);
                // An unresolved value keeps what it could not expand as written (`$1`,
                // `$(…)`): the words holding it are the unresolved ones.
                c.unresolved |= unresolved && (w.contains('$') || w.contains('`'));
            }
            if trail || (words.is_empty() && !s.is_empty()) {
                out.extend(cur.take());
            }
        }
        out.extend(cur);
        out
    }

    /// An assignment's value: expanded, not split.
    fn value(&self, parts: &[Part], line: usize) -> Word {
        let mut w = Word::new("", line);
        for p in self.pieces(parts, true, line) {
            if let Piece::Text { s, unresolved, .. } = p {
                w.text.push_str(&s);
                w.unresolved |= unresolved;
            } else {
                w.text.push(' ');
            }
        }
        w
    }
}

fn text(s: &str, split: bool, unresolved: bool, line: usize) -> Piece {
    Piece::Text {
        s: s.to_string(),
        split,
        unresolved,
        line,
    }
}

/// Integer arithmetic of `$(( … ))`: numbers, variables, `+ - * / %` and parentheses.
fn arith(expr: &str, env: &Env) -> Option<i64> {
    let tokens: Vec<String> = {
        let mut t = Vec::new();
        let mut cur = String::new();
        for c in expr.chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                cur.push(c);
            } else {
                if !cur.is_empty() {
                    t.push(std::mem::take(&mut cur));
                }
                if "+-*/%()".contains(c) {
                    t.push(c.to_string());
                } else if c != '$' && !c.is_whitespace() {
                    return None;
                }
            }
        }
        if !cur.is_empty() {
            t.push(cur);
        }
        t
    };
    let mut pos = 0;
    let v = arith_sum(&tokens, &mut pos, env, 0)?;
    (pos == tokens.len()).then_some(v)
}

fn arith_sum(t: &[String], pos: &mut usize, env: &Env, depth: usize) -> Option<i64> {
    let mut v = arith_product(t, pos, env, depth)?;
    while let Some(op) = t.get(*pos).filter(|o| *o == "+" || *o == "-") {
        let plus = op == "+";
        *pos += 1;
        let r = arith_product(t, pos, env, depth)?;
        v = if plus {
            v.checked_add(r)?
        } else {
            v.checked_sub(r)?
        };
    }
    Some(v)
}

fn arith_product(t: &[String], pos: &mut usize, env: &Env, depth: usize) -> Option<i64> {
    let mut v = arith_atom(t, pos, env, depth)?;
    while let Some(op) = t
        .get(*pos)
        .filter(|o| ["*", "/", "%"].contains(&o.as_str()))
    {
        let op = op.clone();
        *pos += 1;
        let r = arith_atom(t, pos, env, depth)?;
        v = match op.as_str() {
            "*" => v.checked_mul(r)?,
            "/" => v.checked_div(r)?,
            _ => v.checked_rem(r)?,
        };
    }
    Some(v)
}

fn arith_atom(t: &[String], pos: &mut usize, env: &Env, depth: usize) -> Option<i64> {
    if depth > 64 {
        return None;
    }
    let tok = t.get(*pos)?.clone();
    *pos += 1;
    match tok.as_str() {
        "(" => {
            let v = arith_sum(t, pos, env, depth + 1)?;
            (t.get(*pos)? == ")").then(|| *pos += 1)?;
            Some(v)
        }
        "-" => arith_atom(t, pos, env, depth + 1)?.checked_neg(),
        "+" => arith_atom(t, pos, env, depth + 1),
        s if s.chars().all(|c| c.is_ascii_digit()) => s.parse().ok(),
        name => env.scalar(name)?.trim().parse().ok(),
    }
}

// ----- the walk -----------------------------------------------------------------------------

/// Words that start or continue control flow, skipped before a command's first word.
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "{", "}", "!", "time",
    "function", "esac", ";;",
];

/// Reads a script (or a single command line).
pub fn parse(text: &str) -> Script {
    let (text, unescaped) = unescape_document(text);
    let mut lx = Lexer {
        c: text.replace("\r\n", "\n").chars().collect(),
        pos: 0,
        line: 1,
        sbatch: Vec::new(),
        heredocs: Vec::new(),
    };
    let raw = lx.commands();
    let mut env = Env::default();
    let mut script = Script {
        unescaped,
        ..Script::default()
    };
    for cmd in raw {
        walk(&cmd, &mut env, &mut script);
    }
    script.sbatch = lx.sbatch;
    script.heredocs = lx
        .heredocs
        .into_iter()
        .map(|(line, target, body)| Heredoc {
            line,
            target: target.map(|t| env.value(&t, line).text),
            body,
        })
        .collect();
    script
}

/// The word when it is one unquoted literal (a keyword, a command name).
fn bare(w: &RawWord) -> Option<&str> {
    match w {
        RawWord::Parts(p) => match p.as_slice() {
            [Part::Lit(s)] => Some(s),
            _ => None,
        },
        RawWord::Array(..) => None,
    }
}

fn walk(cmd: &RawCommand, env: &mut Env, script: &mut Script) {
    let mut words: &[(usize, RawWord)] = &cmd.words;
    // Control-flow keywords, and `for`/`case` headers, which set nothing planc reads.
    while words
        .first()
        .and_then(|w| bare(&w.1))
        .is_some_and(|t| KEYWORDS.contains(&t))
    {
        words = &words[1..];
    }
    match words.first().and_then(|w| bare(&w.1)) {
        Some("for" | "case" | "select") => return,
        Some(t @ ("export" | "declare" | "typeset" | "local" | "readonly")) => {
            let exported = t == "export"
                || words
                    .iter()
                    .any(|w| bare(&w.1).is_some_and(|b| b.starts_with("-x")));
            for (line, w) in &words[1..] {
                if bare(w).is_some_and(|b| b.starts_with('-')) {
                    continue;
                }
                if !assign(w, env, script, *line, exported) && exported {
                    // `export NAME`: exported with the value it has.
                    let name = literal_text(w);
                    if let Some(a) = script.assignments.iter_mut().rev().find(|a| a.name == name) {
                        a.exported = true;
                    }
                }
            }
            return;
        }
        _ => {}
    }
    // Leading assignments: the shell's when alone, the command's environment otherwise
    // (both are recorded, and both are seen by later expansions here).
    let mut rest = words;
    let first = script.assignments.len();
    while let Some((line, w)) = rest.first() {
        if assign(w, env, script, *line, false) {
            rest = &rest[1..];
        } else {
            break;
        }
    }
    if !rest.is_empty() {
        // `NAME=value command`: exported to the command.
        for a in &mut script.assignments[first..] {
            a.exported = true;
        }
    }
    let mut expanded = Vec::new();
    for (line, w) in rest {
        match w {
            RawWord::Parts(p) => expanded.extend(env.fields(p, *line)),
            RawWord::Array(prefix, elems) => expanded.push(Word {
                text: format!("{prefix}({} words)", elems.len()),
                unresolved: true,
                line: *line,
            }),
        }
    }
    if !expanded.is_empty() {
        script.commands.push(Command {
            line: rest.first().map_or(cmd.line, |w| w.0),
            words: expanded,
        });
    }
}

/// Applies `w` when it is an assignment; false when it is not one.
fn assign(w: &RawWord, env: &mut Env, script: &mut Script, line: usize, exported: bool) -> bool {
    match w {
        RawWord::Array(prefix, elems) => {
            let Some((name, _, append)) = assignment_name(prefix) else {
                return false;
            };
            let mut values: Vec<(String, usize, bool)> = match (append, env.vars.get(name)) {
                (true, Some(Val::Array(a))) => a.clone(),
                (true, Some(Val::Scalar(s, l, u))) => vec![(s.clone(), *l, *u)],
                _ => Vec::new(),
            };
            let mut unresolved = false;
            for (l, e) in elems {
                for f in env.fields(e, *l) {
                    unresolved |= f.unresolved;
                    values.push((f.text, f.line, f.unresolved));
                }
            }
            script.assignments.push(Assignment {
                name: name.to_string(),
                value: values
                    .iter()
                    .map(|v| v.0.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                line,
                exported,
                unresolved,
            });
            env.vars.insert(name.to_string(), Val::Array(values));
            true
        }
        RawWord::Parts(parts) => {
            let Some(Part::Lit(first)) = parts.first() else {
                return false;
            };
            let Some((name, rest, append)) = assignment_name(first) else {
                return false;
            };
            let mut value_parts = Vec::new();
            if !rest.is_empty() {
                value_parts.push(Part::Lit(rest.to_string()));
            }
            value_parts.extend_from_slice(&parts[1..]);
            let mut v = env.value(&value_parts, line);
            if append {
                v.text = env.scalar(name).unwrap_or_default() + &v.text;
            }
            script.assignments.push(Assignment {
                name: name.to_string(),
                value: v.text.clone(),
                line,
                exported,
                unresolved: v.unresolved,
            });
            env.vars
                .insert(name.to_string(), Val::Scalar(v.text, line, v.unresolved));
            true
        }
    }
}

/// A script pasted into a document as an escaped string (`\"` for quotes, `\\` before each
/// line end) is unescaped first: read as it stands, every such line would end its command.
fn unescape_document(text: &str) -> (String, bool) {
    let lines: Vec<&str> = text.lines().collect();
    let ends_double = lines
        .iter()
        .filter(|l| {
            let t = l.trim_end();
            t.ends_with("\\\\") && !t.ends_with("\\\\\\")
        })
        .count();
    let ends_single = lines
        .iter()
        .filter(|l| {
            let t = l.trim_end();
            t.ends_with('\\') && !t.ends_with("\\\\")
        })
        .count();
    if ends_double >= 2 && ends_single == 0 {
        let out = text
            .replace("\\\\", "\u{0}")
            .replace("\\\"", "\"")
            .replace('\u{0}', "\\");
        (out, true)
    } else {
        (text.to_string(), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &Script, i: usize) -> Vec<String> {
        s.commands[i].words.iter().map(|w| w.text.clone()).collect()
    }

    #[test]
    fn variables_defaults_and_continuations_expand_as_bash_would() {
        let s = parse(
            "#!/bin/bash\nTP=2\nexport PP=${PP:-4}\nNAME=\"my run\"  # a comment\n\
             torchrun --nproc_per_node 8 \\\n  pretrain_gpt.py --tp $TP --pp \"${PP}\" --name \"$NAME\" \\\n  --x ${UNSET:-7} --y $((TP * PP)) $EXTRA_FLAGS \"$@\"\n",
        );
        assert_eq!(
            words(&s, 0),
            [
                "torchrun",
                "--nproc_per_node",
                "8",
                "pretrain_gpt.py",
                "--tp",
                "2",
                "--pp",
                "4",
                "--name",
                "my run",
                "--x",
                "7",
                "--y",
                "8",
                "$EXTRA_FLAGS"
            ]
        );
        assert!(s.commands[0].words.last().unwrap().unresolved);
        assert_eq!(s.commands[0].line, 5);
        let pp = s.var("PP").unwrap();
        assert!(pp.exported);
        assert_eq!(pp.value, "4");
    }

    #[test]
    fn arrays_and_unquoted_strings_split_into_flags() {
        let s = parse(
            "GPT_ARGS=(\n  --num-layers 24 # layers\n  --hidden-size 1024\n)\nGPT_ARGS+=(--bf16)\n\
             DATA=\"--data-path /d/x --split 9,1,0\"\npython pretrain_gpt.py \"${GPT_ARGS[@]}\" $DATA\n",
        );
        assert_eq!(
            words(&s, 0),
            [
                "python",
                "pretrain_gpt.py",
                "--num-layers",
                "24",
                "--hidden-size",
                "1024",
                "--bf16",
                "--data-path",
                "/d/x",
                "--split",
                "9,1,0"
            ]
        );
    }

    #[test]
    fn quoted_strings_with_continuations_split_when_expanded() {
        let s = parse("ARGS=\"\n    --micro-batch-size 4 \\\n    --use-distributed-optimizer \\\n\"\nmpirun -np 8 python pretrain_gpt.py $ARGS\n");
        assert_eq!(
            words(&s, 0),
            [
                "mpirun",
                "-np",
                "8",
                "python",
                "pretrain_gpt.py",
                "--micro-batch-size",
                "4",
                "--use-distributed-optimizer"
            ]
        );
    }

    #[test]
    fn command_substitution_is_kept_unresolved_and_heredocs_are_read() {
        let s = parse(
            "export MASTER_ADDR=$(scontrol show hostnames | head -n 1)\n\
             cat > ds.json <<EOF\n{\"train_batch_size\": 8}\nEOF\necho done 2>&1 > /dev/null\n",
        );
        let a = s.var("MASTER_ADDR").unwrap();
        assert!(a.unresolved);
        assert_eq!(s.heredocs.len(), 1);
        assert_eq!(s.heredocs[0].target.as_deref(), Some("ds.json"));
        assert!(s.heredocs[0].body.contains("train_batch_size"));
        assert_eq!(words(&s, 1), ["echo", "done"]);
    }

    #[test]
    fn sbatch_directives_are_collected() {
        let s = parse("#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --gres=gpu:8 # eight\nsrun true\n");
        assert_eq!(s.sbatch.len(), 2);
        assert_eq!(s.sbatch[0].1, ["--nodes=4"]);
    }

    #[test]
    fn a_document_escaped_string_is_unescaped() {
        let s = parse("ARGS=\\\"\n  --tp 2 \\\\\n  --pp 4 \\\\\n\\\"\nmpirun -np 8 \\\\\n  python pretrain_gpt.py $ARGS\n");
        assert!(s.unescaped);
        assert_eq!(
            words(&s, 0),
            [
                "mpirun",
                "-np",
                "8",
                "python",
                "pretrain_gpt.py",
                "--tp",
                "2",
                "--pp",
                "4"
            ]
        );
    }
}
