//! Terminal safety: everything a model or a tool produced is untrusted and
//! may carry escape sequences that would recolour, retitle or hide text in
//! the terminal. [`sanitize`] is the one rule, used by the agent and by the
//! `cairn` CLI alike: every control character (C0, DEL, C1, so ESC, CSI and
//! OSC introducers among them) and every bidirectional-override character
//! becomes visible and inert (`\x1b`, `\u{202e}`); newlines and tabs are
//! kept ([`Lines::Keep`]) or flattened to spaces ([`Lines::Flatten`]).

use std::borrow::Cow;

/// Whether newlines and tabs may pass through [`sanitize`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Newline and tab are kept (text blocks).
    Keep,
    /// Newline and tab become a space (one-line contexts: tables, trees).
    Flatten,
}

/// The look of a piece of output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// No styling.
    Plain,
    /// Less important: ids, times, tree lines.
    Dim,
    /// Headings.
    Bold,
    /// The person.
    User,
    /// The model.
    Assistant,
    /// Tools and their results.
    Tool,
    /// Labels, bookmarks.
    Label,
    /// The leaf and the active path.
    Active,
    /// Warnings and damage.
    Warn,
}

impl Style {
    /// The SGR parameters of its colour (`None`: plain).
    pub fn sgr(self) -> Option<&'static str> {
        match self {
            Style::Plain => None,
            Style::Dim => Some("2"),
            Style::Bold => Some("1"),
            Style::User => Some("1;36"),
            Style::Assistant => Some("1;35"),
            Style::Tool => Some("33"),
            Style::Label => Some("1;33"),
            Style::Active => Some("1;32"),
            Style::Warn => Some("1;31"),
        }
    }
}

/// Neutralises control characters and escape sequences in untrusted text.
///
/// C0 controls, DEL and C1 controls become `\xNN`; Unicode bidirectional
/// controls (which can reorder what is displayed) become `\u{NNNN}`. With
/// [`Lines::Keep`], `\n` and `\t` are kept; with [`Lines::Flatten`] they
/// become a space. Carriage return is always escaped: it would let text
/// overwrite the start of its line.
pub fn sanitize(text: &str, lines: Lines) -> Cow<'_, str> {
    if !text.chars().any(|c| needs_escape(c, lines)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !needs_escape(c, lines) {
            out.push(c);
        } else if matches!(c, '\n' | '\t') {
            out.push(' ');
        } else if (c as u32) < 0x100 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:04x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

/// [`sanitize`] keeping newlines and tabs: for text blocks.
pub fn clean(text: &str) -> Cow<'_, str> {
    sanitize(text, Lines::Keep)
}

/// [`sanitize`] flattening newlines and tabs to spaces: for one-line
/// contexts (tool-call summaries, tree rows).
pub fn clean_line(text: &str) -> String {
    sanitize(text, Lines::Flatten).into_owned()
}

fn needs_escape(c: char, lines: Lines) -> bool {
    match c {
        '\n' | '\t' => lines == Lines::Flatten,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Bidirectional embeddings, overrides and isolates ("Trojan Source").
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}' => {
            true
        }
        _ => false,
    }
}

/// The first line of `text`, whitespace collapsed, cut to `max` characters
/// (with `…` when cut), cleaned.
pub fn excerpt(text: &str, max: usize) -> String {
    clean_line(&cairn::excerpt(text, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_made_visible_and_inert() {
        let hostile = "ok\x1b[2J\x1b]0;pwned\x07 \u{9b}31m \x08\x7f\rX";
        let cleaned = clean(hostile);
        assert_eq!(
            cleaned,
            "ok\\x1b[2J\\x1b]0;pwned\\x07 \\x9b31m \\x08\\x7f\\x0dX"
        );
        assert!(!cleaned.chars().any(char::is_control));
    }

    #[test]
    fn newlines_and_tabs_are_kept_or_flattened() {
        assert_eq!(clean("a\nb\tc"), "a\nb\tc");
        assert_eq!(sanitize("a\nb\tc", Lines::Flatten), "a b c");
        assert_eq!(clean_line("a\nb"), "a b");
        assert_eq!(clean("over\rwrite"), "over\\x0dwrite");
    }

    #[test]
    fn bidi_overrides_are_escaped() {
        assert_eq!(clean("a\u{202e}b\u{2066}"), "a\\u{202e}b\\u{2066}");
    }

    #[test]
    fn plain_text_is_borrowed_untouched() {
        assert!(matches!(
            sanitize("héllo wörld ✓", Lines::Flatten),
            Cow::Borrowed(_)
        ));
        assert!(matches!(clean("héllo ✓"), Cow::Borrowed(_)));
    }
}
