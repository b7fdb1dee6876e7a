//! `cairn show` (the session's metadata and current context) and
//! `cairn context` (the context alone): what the model would see.

use anyhow::Result;
use cairn::{Access, Block, Context, ResultBlock, Session, Store};
use serde_json::{Value, json};

use super::Status;
use super::list::short_time;
use crate::args::SessionArg;
use crate::target::{self, Ctx};
use crate::term::{Out, Style};
use cairn_view::describe::{compact, flat, role_style};
use cairn_view::shapes;

/// Runs `cairn show`.
///
/// # Errors
///
/// Opening the session, or writing output.
pub fn show(ctx: &Ctx, arg: &SessionArg, json: bool, with_memory: bool) -> Result<Status> {
    let (store, session) = target::open(ctx, &target::spec(arg)?, Access::Read)?;
    let context = session.context();
    let memory = if with_memory {
        session.enable_memory(cairn::memory::MemoryConfig::default())?;
        session.memory()
    } else {
        None
    };
    let mut out = ctx.out();
    if json {
        let children: Vec<_> = store
            .children(session.id())?
            .into_iter()
            .map(|(c, origin)| json!({"id": c.id, "call_id": origin.call_id, "title": c.title, "status": c.status.as_str()}))
            .collect();
        let mut v = json!({
            "session": shapes::session(&store, &session),
            "children": children,
            "context": shapes::context(&session, &context)?,
        });
        if let Some(m) = &memory {
            v["memory"] = json!({ "memory": m, "text": m.render() });
        }
        out.json(&v)?;
        return Ok(Status::Ok);
    }
    metadata(&mut out, &store, &session)?;
    out.nl()?;
    if let Some(m) = memory.filter(|m| !m.is_empty()) {
        for line in m.render().lines() {
            out.line(&crate::term::clean(line, crate::term::Lines::Flatten))?;
        }
        out.nl()?;
    }
    render_context(&mut out, &context)?;
    Ok(Status::Ok)
}

/// Runs `cairn context`.
///
/// # Errors
///
/// Opening the session, or writing output.
pub fn context(ctx: &Ctx, arg: &SessionArg, json: bool) -> Result<Status> {
    let mut out = ctx.out();
    if json {
        // Each message is read, written and dropped in turn.
        let (store, id) = target::locate(ctx, &target::spec(arg)?)?;
        let stream = store.open_context_stream(&id)?;
        out.json_stream(&shapes::ContextStreamShape::new(&stream))?;
        return Ok(Status::Ok);
    }
    let (_, session) = target::open(ctx, &target::spec(arg)?, Access::Read)?;
    render_context(&mut out, &session.context())?;
    Ok(Status::Ok)
}

fn field(out: &mut Out<'_>, name: &str, value: &str) -> std::io::Result<()> {
    out.spans(&[(Style::Dim, &format!("{name:<9}")), (Style::Plain, value)])
}

fn metadata(out: &mut Out<'_>, store: &Store, s: &Session) -> std::io::Result<()> {
    let h = s.header();
    field(out, "session", s.id().as_str())?;
    if let Some(t) = s.title() {
        field(out, "title", &cairn_view::describe::flat(&t))?;
    }
    field(out, "file", s.location())?;
    field(out, "created", &format!("{} UTC", short_time(&h.created)))?;
    field(out, "updated", &format!("{} UTC", short_time(&s.updated())))?;
    let leaf = s.leaf().map_or_else(
        || "none (before the first entry)".to_owned(),
        |l| l.to_string(),
    );
    field(
        out,
        "records",
        &format!("{} ({} entries) · leaf {leaf}", s.len(), s.entry_count()),
    )?;
    if let Some(f) = &h.lineage.forked_from {
        let at = f.entry.as_ref().map_or_else(
            || "before its first entry".to_owned(),
            |e| format!("at {e}"),
        );
        field(out, "forked", &format!("from {} {at}", f.session))?;
    }
    if let Some(p) = &h.lineage.parent {
        field(
            out,
            "parent",
            &format!(
                "{} spawned it (tool call {}, depth {})",
                p.session,
                flat(&p.call_id),
                p.depth
            ),
        )?;
    }
    // A listing that fails leaves the children out; the rest still shows.
    for (child, origin) in store.children(s.id()).unwrap_or_default() {
        let title = child.title.as_deref().map(flat).unwrap_or_default();
        field(
            out,
            "child",
            &format!(
                "{} (tool call {}, {}) {title}",
                child.id,
                flat(&origin.call_id),
                child.status.as_str()
            ),
        )?;
    }
    if store.backend().writer_active(s.id()) {
        field(
            out,
            "status",
            "in use by a writer (this view is a snapshot)",
        )?;
    }
    if let Some(t) = &s.open_report().torn {
        field(
            out,
            "tail",
            &format!(
                "an incomplete last record ({} bytes) was ignored: a write in progress, or a crash a writer will repair",
                t.len
            ),
        )?;
    }
    for f in target::torn_files(s.location()) {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        field(
            out,
            "crash",
            "a torn tail was cut from the end and saved beside the file as",
        )?;
        field(out, "", &name)?;
    }
    Ok(())
}

/// Writes a context as the model sees it.
///
/// # Errors
///
/// Write errors, or a message of the context that cannot be read.
pub fn render_context(out: &mut Out<'_>, ctx: &Context) -> Result<()> {
    let leaf = ctx
        .leaf()
        .map_or_else(|| "the start".to_owned(), |l| l.to_string());
    let n = ctx.messages().len();
    out.spans(&[(
        Style::Bold,
        &format!(
            "context at {leaf} · {n} message{}",
            if n == 1 { "" } else { "s" }
        ),
    )])?;
    if let Some(c) = ctx.compaction() {
        let keeps = c
            .first_kept
            .as_ref()
            .map_or_else(|| "nothing before it".to_owned(), |k| format!("from {k}"));
        let tokens = c
            .tokens_before
            .map(|t| format!(", {t} tokens before"))
            .unwrap_or_default();
        out.spans(&[(
            Style::Dim,
            &format!("compaction {} in force: keeps {keeps}{tokens}", c.entry),
        )])?;
    }
    for (i, m) in ctx.messages().iter().enumerate() {
        out.nl()?;
        let msg = m.message()?;
        let (source, ns) = shapes::source_name(m.source());
        let origin = match (source, ns) {
            ("message", _) => String::new(),
            ("custom", Some(ns)) => format!(" (custom {ns})"),
            (s, _) => format!(" ({})", s.replace('_', " ")),
        };
        out.spans(&[
            (Style::Dim, &format!("[{}] ", i + 1)),
            (role_style(msg.role), msg.role.as_str()),
            (Style::Dim, &format!(" · {}{origin}", m.entry())),
        ])?;
        for b in &msg.content {
            block(out, b, 4)?;
        }
        if let Some(u) = &msg.usage {
            out.spans(&[(
                Style::Dim,
                &format!(
                    "    tokens in {} out {} cached {}",
                    u.input, u.output, u.cached
                ),
            )])?;
        }
    }
    out.nl()?;
    out.spans(&[(Style::Bold, "app state")])?;
    indented(out, &pretty(ctx.app_state()), 2, Style::Plain)?;
    out.spans(&[(Style::Bold, "settings")])?;
    if ctx.settings().is_empty() {
        out.spans(&[(Style::Dim, "  (none)")])?;
    }
    for (k, v) in ctx.settings() {
        out.line(&format!("  {k} = {}", compact(v)))?;
    }
    out.spans(&[(Style::Bold, "labels")])?;
    if ctx.labels().is_empty() {
        out.spans(&[(Style::Dim, "  (none)")])?;
    }
    for (name, target) in ctx.labels() {
        out.spans(&[
            (Style::Plain, "  "),
            (Style::Label, name),
            (Style::Plain, &format!(" → {target}")),
        ])?;
    }
    Ok(())
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn indented(out: &mut Out<'_>, text: &str, by: usize, style: Style) -> std::io::Result<()> {
    let pad = " ".repeat(by);
    for line in text.lines() {
        if line.is_empty() {
            out.nl()?;
        } else {
            out.spans(&[(Style::Plain, &pad), (style, line)])?;
        }
    }
    if text.is_empty() {
        out.nl()?;
    }
    Ok(())
}

/// Writes a tool result and its content, indented.
fn result(out: &mut Out<'_>, r: ResultBlock<'_>, by: usize) -> std::io::Result<()> {
    let status = if r.is_error { " error" } else { "" };
    let code = r.code.map(|c| format!(" {c}")).unwrap_or_default();
    out.spans(&[
        (Style::Plain, &" ".repeat(by)),
        (
            if r.is_error { Style::Warn } else { Style::Tool },
            &format!("← result{status}{code}"),
        ),
        (Style::Dim, &format!(" [{}]", r.call_id)),
    ])?;
    for inner in r.content {
        block(out, inner, by + 2)?;
    }
    Ok(())
}

/// Writes one content block, indented.
fn block(out: &mut Out<'_>, b: &Block, by: usize) -> std::io::Result<()> {
    let pad = " ".repeat(by);
    match b {
        Block::Text { text } => indented(out, text, by, Style::Plain),
        Block::Thinking { thinking, .. } => {
            out.spans(&[(Style::Plain, &pad), (Style::Dim, "(thinking)")])?;
            indented(out, thinking, by + 2, Style::Dim)
        }
        Block::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            out.spans(&[
                (Style::Plain, &pad),
                (Style::Tool, &format!("→ call {name}")),
                (Style::Dim, &format!(" [{call_id}]")),
            ])?;
            indented(out, &pretty(arguments), by + 2, Style::Plain)
        }
        Block::ToolResult { .. } => b.as_result().map_or(Ok(()), |r| result(out, r, by)),
        Block::Image { media_type, data } => out.spans(&[
            (Style::Plain, &pad),
            (
                Style::Dim,
                &format!("[image {media_type}, {} bytes of base64]", data.len()),
            ),
        ]),
        Block::Blob {
            uri,
            media_type,
            size,
            ..
        } => {
            let mut s = format!("[blob {uri}");
            if let Some(m) = media_type {
                s.push_str(&format!(", {m}"));
            }
            if let Some(n) = size {
                s.push_str(&format!(", {n} bytes"));
            }
            s.push(']');
            out.spans(&[(Style::Plain, &pad), (Style::Dim, &s)])
        }
    }
}
