//! `cairn ls`: the sessions of a store, most recently updated first.

use anyhow::Result;
use cairn::SessionSummary;
use serde_json::{Value, json};

use super::Status;
use crate::target::Ctx;
use crate::term::{Style, fit, pad};
use cairn_view::describe::flat;

/// How many sessions `ls` shows without `--all`.
pub const DEFAULT_LIMIT: usize = 20;

/// Runs `cairn ls`: subagent sessions under the session that spawned
/// them, unless `flat`.
///
/// # Errors
///
/// I/O errors listing the store or writing output.
pub fn run(ctx: &Ctx, all: bool, flat_list: bool, json: bool) -> Result<Status> {
    let store = ctx.store()?;
    let sessions = store.list()?;
    let total = sessions.len();
    let shown = if all { total } else { total.min(DEFAULT_LIMIT) };
    // The status is derived from each session's log (and, for an open
    // operation, from whether a writer holds it); "unreadable" when the
    // session could not be read at all.
    let status = |s: &SessionSummary| {
        if s.records == 0 {
            "unreadable"
        } else {
            s.status.as_str()
        }
    };
    let statuses: Vec<&str> = sessions[..shown].iter().map(status).collect();
    let mut out = ctx.out();
    if json {
        let rows: Vec<Value> = sessions[..shown]
            .iter()
            .zip(&statuses)
            .map(|(s, st)| row_json(s, st))
            .collect();
        out.json(&Value::Array(rows))?;
        return Ok(Status::Ok);
    }
    if total == 0 {
        out.line(&format!(
            "no sessions in {}; `cairn new` creates one, `cairn demo` shows around",
            store.backend().describe()
        ))?;
        return Ok(Status::Ok);
    }
    let idw = unique_prefix_len(&sessions);
    let fixed = idw + 2 + 16 + 2 + 7 + 2 + 11 + 2;
    let textw = ctx.look.width.saturating_sub(fixed).max(16);
    out.spans(&[(
        Style::Bold,
        &format!(
            "{}  {}  {}  {}  TITLE · FIRST MESSAGE",
            pad("ID", idw),
            pad("UPDATED (UTC)", 16),
            "ENTRIES",
            pad("STATUS", 11)
        ),
    )])?;
    let rows = if flat_list {
        (0..total).map(|i| (i, 0)).collect()
    } else {
        nested(&sessions)
    };
    // The limit counts top-level rows; each keeps its subagents.
    let mut tops = 0;
    let rows: Vec<(usize, usize)> = rows
        .into_iter()
        .take_while(|&(_, depth)| {
            tops += usize::from(depth == 0);
            all || tops <= DEFAULT_LIMIT
        })
        .collect();
    let listed = rows.len();
    for (i, depth) in rows {
        let s = &sessions[i];
        let status = status(s);
        let id = &s.id.as_str()[..idw];
        let indent = if depth == 0 {
            String::new()
        } else {
            format!("{}└ ", "  ".repeat(depth - 1))
        };
        let text = format!("{indent}{}", describe(s));
        out.spans(&[
            (Style::Dim, id),
            (Style::Plain, "  "),
            (Style::Plain, &pad(&short_time(&s.updated), 16)),
            (Style::Plain, &format!("  {:>7}  ", s.entries)),
            (status_style(status), &pad(status, 11)),
            (Style::Plain, "  "),
            (Style::Plain, &fit(&text, textw)),
        ])?;
    }
    if listed < total {
        out.spans(&[(
            Style::Dim,
            &format!(
                "… {} older; `cairn ls --all` lists every session",
                total - listed
            ),
        )])?;
    }
    Ok(Status::Ok)
}

/// The listing's rows in display order, each with its nesting depth: every
/// session followed by the subagent sessions it spawned (oldest first, to
/// any depth); a session whose parent is not in the store stands at the top.
fn nested(sessions: &[SessionSummary]) -> Vec<(usize, usize)> {
    let index: std::collections::HashMap<&cairn::SessionId, usize> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.id, i))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); sessions.len()];
    let mut tops = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        match s.parent.as_ref().and_then(|p| index.get(p)) {
            Some(&p) if p != i => children[p].push(i),
            Some(_) | None => tops.push(i),
        }
    }
    for c in &mut children {
        c.sort_by(|&a, &b| {
            sessions[a]
                .created
                .cmp(&sessions[b].created)
                .then(a.cmp(&b))
        });
    }
    let mut rows = Vec::with_capacity(sessions.len());
    let mut seen = vec![false; sessions.len()];
    let mut stack: Vec<(usize, usize)> = tops.into_iter().rev().map(|i| (i, 0)).collect();
    while let Some((i, depth)) = stack.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        rows.push((i, depth));
        stack.extend(children[i].iter().rev().map(|&c| (c, depth + 1)));
    }
    // A cycle of parents (only a hand-made store has one) is listed flat.
    rows.extend((0..sessions.len()).filter(|&i| !seen[i]).map(|i| (i, 0)));
    rows
}

fn status_style(status: &str) -> Style {
    match status {
        "interrupted" | "failed" | "unreadable" => Style::Warn,
        "running" | "paused" => Style::Bold,
        _ => Style::Plain,
    }
}

fn row_json(s: &SessionSummary, status: &str) -> Value {
    json!({
        "id": s.id,
        "title": s.title,
        "status": status,
        "created": s.created,
        "updated": s.updated,
        "entries": s.entries,
        "records": s.records,
        "first_message": s.first_message,
        "forked_from": s.forked_from,
        "parent": s.parent,
    })
}

/// The title and first message, flattened, with the status in front.
fn describe(s: &SessionSummary) -> String {
    let mut parts = Vec::new();
    let title = s.title.as_deref().map(flat).filter(|t| !t.is_empty());
    let first = s
        .first_message
        .as_deref()
        .map(flat)
        .filter(|t| !t.is_empty());
    match (title, first) {
        (Some(t), Some(f)) => parts.push(format!("{t} · {f}")),
        (Some(t), None) => parts.push(t),
        (None, Some(f)) => parts.push(f),
        (None, None) => parts.push("(no messages)".to_owned()),
    }
    parts.join(" ")
}

/// `YYYY-MM-DD HH:MM` from an RFC 3339 time (as is if it is not one).
pub fn short_time(ts: &str) -> String {
    match (ts.get(..10), ts.get(11..16)) {
        (Some(d), Some(t)) if ts.as_bytes().get(10) == Some(&b'T') => format!("{d} {t}"),
        _ => flat(ts),
    }
}

/// The shortest prefix length (at least 10) that tells every session apart.
fn unique_prefix_len(sessions: &[SessionSummary]) -> usize {
    let mut ids: Vec<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
    ids.sort_unstable();
    let common = ids
        .windows(2)
        .map(|w| {
            w[0].bytes()
                .zip(w[1].bytes())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    (common + 1).clamp(10, cairn::SessionId::LEN)
}
