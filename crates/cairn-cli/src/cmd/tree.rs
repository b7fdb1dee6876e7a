//! `cairn tree`: every entry of a session as an indented tree. A chain of
//! single children stays in one column; a branch point opens `├─`/`└─`
//! branches. Entries on the active path are marked `●`, others `○`; the leaf
//! is marked `◀ leaf`; labels are shown in brackets. Lines are written as
//! they are drawn: the tree's structure is held, each entry's record is read
//! for its line and dropped after.

use anyhow::Result;
use cairn::{Access, EntryBody, Session};

use super::Status;
use crate::args::SessionArg;
use crate::target::{self, Ctx};
use crate::term::{Out, Style, fit, width};
use cairn_view::describe::entry_line;
use cairn_view::tree::{Connectors, TreeView};

/// The characters a tree is drawn with.
#[derive(Debug, Clone, Copy)]
pub struct Glyphs {
    lines: Connectors,
    on: &'static str,
    off: &'static str,
    leaf: &'static str,
    ascii: bool,
}

/// Box-drawing characters.
pub const UNICODE: Glyphs = Glyphs {
    lines: cairn_view::tree::BOX,
    on: "●",
    off: "○",
    leaf: "◀ leaf",
    ascii: false,
};
/// Plain ASCII.
pub const ASCII: Glyphs = Glyphs {
    lines: cairn_view::tree::ASCII,
    on: "*",
    off: "o",
    leaf: "<- leaf",
    ascii: true,
};

/// Runs `cairn tree`.
///
/// # Errors
///
/// Opening or reading the session, or writing output.
pub fn run(ctx: &Ctx, arg: &SessionArg, ascii: bool, depth: usize, json: bool) -> Result<Status> {
    let (store, session) = target::open(ctx, &target::spec(arg)?, Access::Read)?;
    let view = TreeView::load(&session);
    let mut out = ctx.out();
    if json {
        out.json_stream(&cairn_view::shapes::TreeShape {
            session: &session,
            view: &view,
        })?;
        return Ok(Status::Ok);
    }
    let title = session
        .title()
        .map(|t| format!(" {:?}", cairn_view::describe::flat(&t)))
        .unwrap_or_default();
    out.spans(&[
        (Style::Bold, &format!("session {}", session.id())),
        (Style::Plain, &title),
        (
            Style::Dim,
            &format!(
                "{}{} entries",
                if ascii { " | " } else { " · " },
                view.nodes.len()
            ),
        ),
    ])?;
    if view.nodes.is_empty() {
        out.spans(&[(Style::Dim, "(no entries yet)")])?;
    }
    let g = if ascii { ASCII } else { UNICODE };
    draw_nested(&mut out, &store, &session, &view, g, depth, "")?;
    Ok(Status::Ok)
}

/// Draws the tree with, under each tool result of a call that spawned a
/// subagent session (the result names it, or the child's header names the
/// call: an imported subagent), that session's tree, `depth` levels deep.
fn draw_nested(
    out: &mut Out<'_>,
    store: &cairn::Store,
    session: &Session,
    view: &TreeView,
    g: Glyphs,
    depth: usize,
    outer: &str,
) -> Result<()> {
    let spawned: std::collections::HashMap<String, cairn::SessionId> = store
        .children(session.id())?
        .into_iter()
        .map(|(s, origin)| (origin.call_id, s.id))
        .collect();
    for (n, prefix) in view.rows(g.lines) {
        let (body, _) = view.read(session, n)?;
        line(out, view, n, &body, &format!("{outer}{prefix}"), g)?;
        let cairn::EntryBody::Message(m) = &body else {
            continue;
        };
        let children = m.content.iter().flat_map(|b| match b {
            cairn::Block::ToolResult {
                call_id, content, ..
            } => {
                let named: Vec<_> = content
                    .iter()
                    .filter_map(cairn::referenced_session)
                    .collect();
                if named.is_empty() {
                    spawned.get(call_id).cloned().into_iter().collect()
                } else {
                    named
                }
            }
            _ => Vec::new(),
        });
        for child in children {
            let bar = if g.ascii { "|" } else { "│" };
            let inner = format!("{outer}{}  {bar} ", " ".repeat(width(&prefix)));
            let opened = (depth > 0)
                .then(|| store.open(&child, Access::Read))
                .transpose();
            let text = match &opened {
                Ok(Some(_)) => format!("subagent session {child}"),
                Ok(None) => format!("subagent session {child} (--depth shows its tree)"),
                Err(_) => format!("subagent session {child}: cannot be opened (run `cairn fsck`)"),
            };
            out.spans(&[
                (Style::Dim, &inner),
                (
                    Style::Bold,
                    &fit(&text, out.look.width.saturating_sub(width(&inner))),
                ),
            ])?;
            if let Ok(Some(session)) = opened {
                let child_view = TreeView::load(&session);
                draw_nested(out, store, &session, &child_view, g, depth - 1, &inner)?;
            }
        }
    }
    Ok(())
}

/// Draws the tree, one line per entry.
///
/// # Errors
///
/// Read errors, write errors.
pub fn draw(out: &mut Out<'_>, session: &Session, view: &TreeView, g: Glyphs) -> Result<()> {
    for (n, prefix) in view.rows(g.lines) {
        let (body, _) = view.read(session, n)?;
        line(out, view, n, &body, &prefix, g)?;
    }
    Ok(())
}

fn line(
    out: &mut Out<'_>,
    view: &TreeView,
    n: usize,
    body: &EntryBody,
    prefix: &str,
    g: Glyphs,
) -> std::io::Result<()> {
    let node = &view.nodes[n];
    let d = entry_line(body);
    let mark = if node.active { g.on } else { g.off };
    let id = format!("{:<8}", target::short_entry(&node.id));
    let labels = if node.labels.is_empty() {
        String::new()
    } else {
        format!(" [{}]", node.labels.join(", "))
    };
    let leaf = if view.leaf == Some(n) {
        format!(" {}", g.leaf)
    } else {
        String::new()
    };
    let head = format!("{prefix}{mark} {id} {} ", d.tag);
    let room = out
        .look
        .width
        .saturating_sub(width(&head) + width(&labels) + width(&leaf))
        .max(12);
    let text = if g.ascii {
        let plain = d
            .text
            .replace('→', "->")
            .replace('←', "<-")
            .replace('·', "|");
        fit(&plain, room.saturating_sub(2)).replace('…', "...")
    } else {
        fit(&d.text, room).into_owned()
    };
    let mark_style = if node.active {
        Style::Active
    } else {
        Style::Dim
    };
    out.spans(&[
        (Style::Dim, prefix),
        (mark_style, mark),
        (Style::Dim, &format!(" {id} ")),
        (d.style, &d.tag),
        (Style::Plain, " "),
        (Style::Plain, &text),
        (Style::Label, &labels),
        (Style::Active, &leaf),
    ])
}
