//! The Markdown transcript: the current branch from its root to the leaf,
//! messages as sections, tool calls and results as fenced blocks, and the
//! other entries (state changes, checkouts, compactions, labels) as notes.

use std::fmt::Write as _;

use anyhow::Result;
use cairn::{AppStateChange, EntryBody, ResultBlock, Session};

use super::Sink;
use super::blocks::{BlockFormat, Blocks};
use crate::cmd::list::short_time;
use cairn_view::describe::{compact, entry_line};
use cairn_view::tree::TreeView;

/// Writes the transcript to `sink` as it renders it, an entry at a time.
///
/// # Errors
///
/// When a record cannot be read, or the output cannot be written.
pub fn render(session: &Session, sink: &mut Sink<'_>) -> Result<()> {
    let view = TreeView::load(session);
    let branch: Vec<usize> = view.branch().collect();
    let mut md = String::new();
    let title = session
        .title()
        .unwrap_or_else(|| format!("Session {}", session.id()));
    let _ = writeln!(md, "# {}\n", one_line(&title));
    let _ = writeln!(md, "- Session: `{}`", session.id());
    let _ = writeln!(
        md,
        "- Created: {} UTC",
        short_time(&session.header().created)
    );
    let _ = writeln!(md, "- Updated: {} UTC", short_time(&session.updated()));
    let leaf = session
        .leaf()
        .map_or_else(|| "(none)".to_owned(), |l| format!("`{l}`"));
    let _ = writeln!(
        md,
        "- Branch: {} of {} entries, ending at the leaf {leaf}\n",
        branch.len(),
        session.entry_count()
    );
    sink.emit(&mut md)?;
    let mut blocks = Blocks::default();
    for n in branch {
        let id = &view.nodes[n].id;
        let (body, ts) = view.read(session, n)?;
        match &body {
            EntryBody::Message(m) => {
                let role = m.role.as_str();
                let mut heading = format!("## {}{}", role[..1].to_uppercase(), &role[1..]);
                if let Some(model) = &m.model {
                    let _ = write!(heading, " ({})", one_line(model));
                }
                let _ = writeln!(
                    md,
                    "{heading}\n\n<sub>`{id}` · {} UTC</sub>\n",
                    short_time(&ts)
                );
                for b in &m.content {
                    blocks.write::<Markdown>(&mut md, b);
                }
            }
            EntryBody::AppState(AppStateChange::Set(v)) => {
                let _ = writeln!(md, "> **App state** set to `{}`\n", code(&compact(v)));
            }
            EntryBody::AppState(AppStateChange::Patch(v)) => {
                let _ = writeln!(md, "> **App state** patched with `{}`\n", code(&compact(v)));
            }
            EntryBody::Compaction(c) => {
                let _ = writeln!(
                    md,
                    "> **Compaction** — the model sees this summary instead of what came before:\n>"
                );
                for line in c.summary.lines() {
                    let _ = writeln!(md, "> {line}");
                }
                md.push('\n');
            }
            EntryBody::Checkout(c) => {
                let from = c
                    .from
                    .as_ref()
                    .map_or_else(|| "the start".to_owned(), |f| format!("`{f}`"));
                let _ = writeln!(md, "> **Checkout** — returned here from {from}.");
                if let Some(s) = &c.summary {
                    let _ = writeln!(md, "> Summary of that branch: {}", one_line(s));
                }
                md.push('\n');
            }
            EntryBody::Settings(_)
            | EntryBody::Label(_)
            | EntryBody::SessionInfo(_)
            | EntryBody::Custom(_)
            | EntryBody::Ignored(_) => {
                let d = entry_line(&body);
                let _ = writeln!(md, "> *{}* {}\n", d.tag, d.text);
            }
        }
        sink.emit(&mut md)?;
    }
    let labels = session.labels();
    if !labels.is_empty() {
        let _ = writeln!(
            md,
            "---\n\n**Labels:** {}",
            labels
                .iter()
                .map(|(n, id)| format!("`{n}` → `{id}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    sink.emit(&mut md)?;
    Ok(())
}

/// The Markdown of a transcript's blocks.
struct Markdown;

impl BlockFormat for Markdown {
    fn text(md: &mut String, text: &str) {
        let _ = writeln!(md, "{}\n", text.trim_end());
    }

    fn thinking(md: &mut String, thinking: &str) {
        let _ = writeln!(
            md,
            "<details><summary>Thinking</summary>\n\n{}\n\n</details>\n",
            thinking.trim_end()
        );
    }

    fn call(md: &mut String, name: &str, call_id: &str, arguments: &str) {
        let _ = writeln!(
            md,
            "**Tool call** `{}` (`{}`):\n",
            code(name),
            code(call_id)
        );
        fenced(md, "json", arguments);
    }

    fn result_head(md: &mut String, tool: Option<&str>, r: ResultBlock<'_>) {
        let name = tool
            .map(|n| format!(" of `{}`", code(n)))
            .unwrap_or_default();
        let status = if r.is_error { " (error)" } else { "" };
        let outcome = r
            .code
            .map(|c| format!(" `{}`", code(c)))
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "**Result**{name} (`{}`){status}{outcome}:\n",
            code(r.call_id)
        );
    }

    fn result_text(md: &mut String, text: &str) {
        fenced(md, "", text);
    }

    fn result_end(_: &mut String) {}

    fn image(md: &mut String, media_type: &str, data: &str) {
        let _ = writeln!(
            md,
            "*[image {}, {} bytes of base64]*\n",
            one_line(media_type),
            data.len()
        );
    }

    fn blob(md: &mut String, uri: &str) {
        let _ = writeln!(md, "*[blob {}]*\n", one_line(uri));
    }
}

/// A fenced code block whose fence is longer than any backtick run inside.
fn fenced(md: &mut String, lang: &str, text: &str) {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = writeln!(md, "{fence}{lang}\n{}\n{fence}\n", text.trim_end());
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Text for an inline code span (backticks would end it).
fn code(text: &str) -> String {
    one_line(text).replace('`', "'")
}
