//! Terminal output: the one place human output is written, so the one place
//! untrusted text is neutralised.
//!
//! Everything a session holds came from a model, a tool or a host, and may
//! contain escape sequences that would recolour, retitle, hide text in or
//! otherwise drive the terminal. [`clean`] (`cairn_view::term::sanitize`,
//! the one rule the agent uses too) turns every control
//! character (C0, DEL, C1 — so ESC, CSI and OSC introducers among them) and
//! every bidirectional-override character into a visible escape such as
//! `\x1b` or `\u{202e}`. [`Out`] passes every piece of human output through
//! it; the only escape sequences that reach the terminal are the colours `Out`
//! adds itself.

use std::borrow::Cow;
use std::io::{self, IsTerminal, Write};

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::args::ColorChoice;

/// The sanitiser the agent uses too: `clean(text, Lines::Keep)` keeps
/// newlines and tabs, `Lines::Flatten` makes them spaces.
pub use cairn_view::term::{Lines, Style, sanitize as clean};

/// Escapes DEL and C1 controls in serialized JSON (which serde already
/// escapes below U+0020), so JSON printed to a terminal cannot drive it either.
/// The JSON value is unchanged.
pub fn clean_json(json: &str) -> Cow<'_, str> {
    if !json.chars().any(|c| matches!(c, '\u{7f}'..='\u{9f}')) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if matches!(c, '\u{7f}'..='\u{9f}') {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Display width of text in terminal columns.
pub fn width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}

/// Cuts text to at most `max` columns, ending with `…` when cut.
pub fn fit(text: &str, max: usize) -> Cow<'_, str> {
    if width(text) <= max {
        return Cow::Borrowed(text);
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        out.push(c);
        used += w;
    }
    if max > 0 {
        out.push('…');
    }
    Cow::Owned(out)
}

/// Wraps text at spaces into lines of at most `max` columns (a longer word
/// gets a line of its own).
pub fn wrap(text: &str, max: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && width(&line) + 1 + width(word) > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// Pads text with spaces to `cols` columns (no cut).
pub fn pad(text: &str, cols: usize) -> String {
    let w = width(text);
    let mut s = text.to_owned();
    s.extend(std::iter::repeat_n(' ', cols.saturating_sub(w)));
    s
}

/// How output is shaped: colour and width.
#[derive(Debug, Clone, Copy)]
pub struct Look {
    /// Whether to add colours.
    pub color: bool,
    /// The width to fit lines in.
    pub width: usize,
    /// Whether stdout is a terminal.
    pub tty: bool,
}

impl Look {
    /// Decides colour and width from the flag, the environment and stdout.
    pub fn detect(choice: ColorChoice) -> Look {
        let tty = io::stdout().is_terminal();
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        };
        let width = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.trim().parse::<usize>().ok())
            .filter(|w| *w >= 40)
            .unwrap_or(80);
        Look { color, width, tty }
    }
}

/// Human and JSON output to stdout (or any writer), with [`clean`] applied
/// to every piece of human text.
pub struct Out<'w> {
    w: Box<dyn Write + 'w>,
    /// Colour and width.
    pub look: Look,
}

impl<'w> Out<'w> {
    /// Output to `w`.
    pub fn new(w: impl Write + 'w, look: Look) -> Out<'w> {
        Out {
            w: Box::new(w),
            look,
        }
    }

    /// Writes text (cleaned, newlines kept) in a style.
    ///
    /// # Errors
    ///
    /// Write errors (a broken pipe among them).
    pub fn put(&mut self, style: Style, text: &str) -> io::Result<()> {
        let text = clean(text, Lines::Keep);
        match (self.look.color, style.sgr()) {
            (true, Some(sgr)) if !text.is_empty() => write!(self.w, "\x1b[{sgr}m{text}\x1b[0m"),
            _ => self.w.write_all(text.as_bytes()),
        }
    }

    /// Writes a line of plain text.
    ///
    /// # Errors
    ///
    /// Write errors.
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        self.put(Style::Plain, text)?;
        self.nl()
    }

    /// Ends a line.
    ///
    /// # Errors
    ///
    /// Write errors.
    pub fn nl(&mut self) -> io::Result<()> {
        self.w.write_all(b"\n")
    }

    /// Writes a line made of styled spans.
    ///
    /// # Errors
    ///
    /// Write errors.
    pub fn spans(&mut self, spans: &[(Style, &str)]) -> io::Result<()> {
        for (style, text) in spans {
            self.put(*style, text)?;
        }
        self.nl()
    }

    /// Writes a JSON value, pretty-printed, on its own lines.
    ///
    /// # Errors
    ///
    /// Write errors.
    pub fn json(&mut self, value: &serde_json::Value) -> io::Result<()> {
        let s = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
        self.json_line(&s)
    }

    /// Writes `value` as pretty JSON as it is serialized, without building
    /// it in memory first (the same bytes as [`Out::json`] of its `Value`).
    /// To a terminal it goes through [`Out::json_line`] to be escaped.
    ///
    /// # Errors
    ///
    /// Write errors.
    pub fn json_stream(&mut self, value: &impl serde::Serialize) -> io::Result<()> {
        if self.look.tty {
            let s = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
            return self.json_line(&s);
        }
        let mut w = io::BufWriter::with_capacity(1 << 16, &mut self.w);
        serde_json::to_writer_pretty(&mut w, value).map_err(io::Error::other)?;
        w.write_all(b"\n")?;
        w.flush()
    }

    /// Writes one line of serialized JSON, escaping DEL and C1 controls when
    /// stdout is a terminal (the bytes are kept verbatim for pipes and files).
    ///
    /// # Errors
    ///
    /// Write errors.
    pub fn json_line(&mut self, json: &str) -> io::Result<()> {
        let json = if self.look.tty {
            clean_json(json)
        } else {
            Cow::Borrowed(json)
        };
        self.w.write_all(json.trim_end_matches('\n').as_bytes())?;
        self.nl()
    }

    /// Flushes the writer.
    ///
    /// # Errors
    ///
    /// Write errors.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(color: bool) -> Look {
        Look {
            color,
            width: 80,
            tty: true,
        }
    }

    #[test]
    fn out_cleans_everything_and_adds_only_its_own_colours() {
        let mut buf = Vec::new();
        {
            let mut out = Out::new(&mut buf, look(true));
            out.spans(&[(Style::User, "user"), (Style::Plain, " \x1b[31mred")])
                .unwrap();
        }
        let s = String::from_utf8(buf).unwrap();
        assert_eq!(s, "\x1b[1;36muser\x1b[0m \\x1b[31mred\n");
    }

    #[test]
    fn json_to_a_terminal_escapes_c1_and_stays_valid() {
        let v = serde_json::json!({"t": "a\u{9b}b\u{1b}"});
        let mut buf = Vec::new();
        Out::new(&mut buf, look(false))
            .json_line(&v.to_string())
            .unwrap();
        let s = String::from_utf8(buf).unwrap();
        assert!(!s.trim_end().chars().any(|c| c.is_control()), "{s:?}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&s).unwrap(), v);
    }

    #[test]
    fn fit_cuts_by_columns() {
        assert_eq!(fit("hello", 5), "hello");
        assert_eq!(fit("hello world", 6), "hello…");
        assert_eq!(fit("日本語テキスト", 7), "日本語…");
        assert_eq!(pad("ab", 4), "ab  ");
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("", 5), [""]);
    }
}
