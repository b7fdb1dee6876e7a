//! `cairn export`: a session as a Markdown transcript, JSON, a
//! self-contained HTML page with the tree drawn as SVG, or a pi session file
//! (`cairn_import::export_pi`).

mod blocks;
mod html;
mod markdown;
mod svg;

use std::io::Write;
use std::path::Path;

use anyhow::{Context as _, Result};
use cairn::{Access, Entry, Session, Store};
use serde_json::{Value, json};

use super::Status;
use crate::args::{Format, SessionArg};
use crate::shapes;
use crate::target::{self, Ctx};
use crate::term::{Lines, clean};

/// Runs `cairn export`.
///
/// # Errors
///
/// Opening or reading the session, or writing the output.
pub fn run(ctx: &Ctx, arg: &SessionArg, format: Format, output: Option<&Path>) -> Result<Status> {
    let (store, session) = target::open(ctx, &target::spec(arg)?, Access::Read)?;
    let text = match format {
        Format::Md => markdown::render(&session)?,
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&json_export(&store, &session)?)?;
            s.push('\n');
            s
        }
        Format::Html => html::render(&session)?,
        Format::Pi => {
            let mut bytes = Vec::new();
            cairn_import::export_pi(&session, &mut bytes)?;
            String::from_utf8(bytes)?
        }
    };
    match output {
        Some(path) => {
            std::fs::write(path, text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "wrote {}", path.display());
        }
        None => {
            // Markdown and HTML are text for people: keep control characters
            // from reaching a terminal. JSON escapes them itself.
            let text = match format {
                Format::Json | Format::Pi => text,
                Format::Md | Format::Html if ctx.look.tty => clean(&text, Lines::Keep).into_owned(),
                Format::Md | Format::Html => text,
            };
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(Status::Ok)
}

/// The entries of the current branch, root first, with their times.
fn branch(session: &Session) -> Result<Vec<(Entry, String)>> {
    Ok(session.branch_entries(session.leaf().as_ref())?)
}

/// `export --format json`: the session, every entry and operation record as
/// stored (without checksums), and the current context.
fn json_export(store: &Store, session: &Session) -> Result<Value> {
    let mut entries = Vec::new();
    let mut operations = Vec::new();
    for seq in 1..session.len() {
        let rec = shapes::record(&session.raw_record(seq)?)?;
        if rec.get("id").is_some() {
            entries.push(rec);
        } else {
            operations.push(rec);
        }
    }
    Ok(json!({
        "format": "cairn-export",
        "version": 1,
        "session": shapes::session(store, session),
        "header": shapes::record(&session.raw_record(0)?)?.get("data").cloned(),
        "branch": session.branch(),
        "labels": session.labels(),
        "entries": entries,
        "operations": operations,
        "context": shapes::context(session, &session.context()),
    }))
}

/// Escapes text for HTML, with control characters made visible first.
pub fn escape_html(text: &str) -> String {
    let cleaned = clean(text, Lines::Keep);
    let mut out = String::with_capacity(cleaned.len());
    for c in cleaned.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape_html;

    #[test]
    fn html_escaping_defuses_markup_and_controls() {
        assert_eq!(
            escape_html("<script>alert('x')</script> & \x1b[2J"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; \\x1b[2J"
        );
    }
}
