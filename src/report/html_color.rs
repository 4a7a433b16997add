//! Diagnostics as `planc check` prints them, as HTML: codespan-reporting writes through
//! this `WriteColor`, which escapes the text and turns its colours into `<span>` classes,
//! so the page shows the same snippets, carets and colours as the terminal.

use std::io::{self, Write};

use codespan_reporting::term::termcolor::{Color, ColorSpec, WriteColor};

use crate::render;

/// HTML text being built; `open` when a colour span is open.
#[derive(Default)]
pub struct HtmlWriter {
    pub html: String,
    open: bool,
}

impl Write for HtmlWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // codespan writes whole UTF-8 pieces; a split character would only cost a `?`.
        self.html
            .push_str(&planc_simulator::svg::escape(&String::from_utf8_lossy(buf)));
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl WriteColor for HtmlWriter {
    fn supports_color(&self) -> bool {
        true
    }

    fn set_color(&mut self, spec: &ColorSpec) -> io::Result<()> {
        self.reset()?;
        let mut classes = Vec::new();
        if let Some(c) = spec.fg() {
            classes.push(format!("fg-{}", colour_name(c)));
        }
        if spec.bold() {
            classes.push("bold".into());
        }
        if !classes.is_empty() {
            self.html
                .push_str(&format!(r#"<span class="{}">"#, classes.join(" ")));
            self.open = true;
        }
        Ok(())
    }

    fn reset(&mut self) -> io::Result<()> {
        if self.open {
            self.html.push_str("</span>");
            self.open = false;
        }
        Ok(())
    }
}

fn colour_name(c: &Color) -> &'static str {
    match c {
        Color::Red => "red",
        Color::Yellow => "yellow",
        Color::Green => "green",
        Color::Blue => "blue",
        Color::Cyan => "cyan",
        Color::Magenta => "magenta",
        Color::White => "white",
        Color::Black => "black",
        _ => "other",
    }
}

/// The checked plan's diagnostics with their source lines, as HTML (inside a `<pre>`).
pub fn diagnostics_html(checked: &planc_compiler::check::Checked) -> String {
    let mut w = HtmlWriter::default();
    let _ = render::diagnostics(&mut w, checked);
    let _ = w.reset();
    w.html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_text_is_escaped_and_colours_become_classes() {
        let checked = planc_compiler::check::check_source(
            "t.tp",
            "model m { layers = 2, hidden = 64, heads = 4, vocab = 10, seq_len = 8, bogus = 1 } # </pre><script>x()</script>\n",
        );
        let html = diagnostics_html(&checked);
        assert!(
            html.contains("&lt;/pre&gt;&lt;script&gt;x()&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            !html.contains("<script>") && !html.contains("</pre>"),
            "{html}"
        );
        assert!(
            html.contains(r#"<span class="fg-red bold">error"#),
            "{html}"
        );
        assert_eq!(
            html.matches("<span").count(),
            html.matches("</span>").count()
        );
    }
}
