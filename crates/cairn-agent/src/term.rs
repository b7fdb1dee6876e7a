//! Terminal safety: everything a model or a tool produced is untrusted and
//! may carry escape sequences that would recolour, retitle or hide text in
//! the terminal. [`clean`] makes every control character (C0, DEL, C1, so
//! ESC, CSI and OSC introducers among them) and every bidirectional-override
//! character visible and inert (`\x1b`, `\u{202e}`), keeping newlines and
//! tabs. The same rule as the CLI's `term::clean`.

use std::borrow::Cow;

/// Neutralises control characters and escape sequences in untrusted text.
/// `\n` and `\t` are kept; carriage return is escaped (it would let text
/// overwrite the start of its line).
pub fn clean(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !needs_escape(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:04x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

/// [`clean`], then newlines and tabs flattened to spaces: for one-line
/// contexts (tool-call summaries, tree rows).
pub fn clean_line(text: &str) -> String {
    clean(text).replace(['\n', '\t'], " ")
}

fn needs_escape(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
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
    fn newlines_are_kept_and_bidi_escaped() {
        assert_eq!(clean("a\nb\tc"), "a\nb\tc");
        assert_eq!(clean("a\u{202e}b"), "a\\u{202e}b");
        assert_eq!(clean_line("a\nb"), "a b");
        assert!(matches!(clean("héllo ✓"), Cow::Borrowed(_)));
    }
}
