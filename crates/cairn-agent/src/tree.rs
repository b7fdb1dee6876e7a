//! A plain text drawing of a session's tree, for `/tree` and the demo:
//! a chain of entries is drawn flat, a branch point indents its children;
//! `*` marks the active branch, labels are shown in brackets.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use anyhow::Result;
use cairn::{AppStateChange, Block, Body, EntryBody, EntryId, Role, Session};

use crate::term::{clean_line, excerpt};

/// Draws a session's tree (the CLI may pass its own, richer one).
pub type TreePrinter = Arc<dyn Fn(&Session, &mut dyn Write) -> Result<()> + Send + Sync>;

/// A one-line description of an entry.
pub fn describe(body: &EntryBody) -> String {
    match body {
        EntryBody::Message(m) => {
            let text = excerpt(&m.plain_text(), 60);
            match m.role {
                Role::Tool => {
                    let mut parts = Vec::new();
                    for b in &m.content {
                        if let Block::ToolResult {
                            call_id,
                            content,
                            is_error,
                            code,
                        } = b
                        {
                            let status = match (is_error, code) {
                                (false, _) => "ok".to_owned(),
                                (true, Some(c)) => c.clone(),
                                (true, None) => "error".to_owned(),
                            };
                            let first = excerpt(&crate::provider::result_text(content), 50);
                            parts.push(format!("result {} {status}: {first}", clean_line(call_id)));
                        }
                    }
                    parts.join("; ")
                }
                Role::Assistant => {
                    let calls: Vec<String> = m
                        .tool_calls()
                        .map(|(_, name, _)| clean_line(name))
                        .collect();
                    let stop = if m.stop_reason.as_deref() == Some("interrupted") {
                        " (interrupted)"
                    } else {
                        ""
                    };
                    if calls.is_empty() {
                        format!("assistant: {text}{stop}")
                    } else {
                        format!("assistant: {text} → {}{stop}", calls.join(", "))
                    }
                }
                other => format!("{}: {text}", other.as_str()),
            }
        }
        EntryBody::AppState(AppStateChange::Patch(p)) => {
            format!("state patch {}", excerpt(&p.to_string(), 60))
        }
        EntryBody::AppState(AppStateChange::Set(v)) => {
            format!("state set {}", excerpt(&v.to_string(), 60))
        }
        EntryBody::Compaction(c) => format!("compaction: {}", excerpt(&c.summary, 60)),
        EntryBody::Checkout(c) => match &c.from {
            Some(f) => format!("rewind to here (from {f})"),
            None => "rewind to here".to_owned(),
        },
        EntryBody::Settings(s) => format!(
            "settings {}",
            excerpt(&serde_json::Value::Object(s.values.clone()).to_string(), 60)
        ),
        EntryBody::Label(l) => match &l.target {
            Some(t) => format!("label {} → {t}", clean_line(&l.name)),
            None => format!("label {} removed", clean_line(&l.name)),
        },
        EntryBody::SessionInfo(i) => {
            format!("title {}", excerpt(i.title.as_deref().unwrap_or(""), 60))
        }
        EntryBody::Custom(c) => format!("custom {}", clean_line(&c.namespace)),
        EntryBody::Ignored(u) => format!("({} record)", clean_line(&u.kind)),
    }
}

/// Draws the tree of `session` to `out`.
///
/// # Errors
///
/// Read errors, write errors.
pub fn render(session: &Session, out: &mut dyn Write) -> Result<()> {
    let nodes = session.nodes();
    let active: HashSet<EntryId> = session.branch().into_iter().collect();
    let leaf = session.leaf();
    let mut labels: BTreeMap<EntryId, Vec<String>> = BTreeMap::new();
    for (name, target) in session.labels() {
        labels.entry(target).or_default().push(name);
    }
    let mut children: HashMap<Option<EntryId>, Vec<usize>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        children.entry(n.parent.clone()).or_default().push(i);
    }
    let mut lines = Vec::new();
    // (node, prefix for its line, prefix for what follows it)
    let mut stack: Vec<(usize, String, String)> = Vec::new();
    for &r in children.get(&None).into_iter().flatten().rev() {
        stack.push((r, String::new(), String::new()));
    }
    while let Some((i, first, rest)) = stack.pop() {
        let n = &nodes[i];
        let desc = match session.record(n.seq)?.body {
            Body::Entry(e) => describe(&e.body),
            Body::Header(_) | Body::Op(_) => String::new(),
        };
        let mark = if active.contains(&n.id) { "*" } else { "o" };
        let tags = labels
            .get(&n.id)
            .map(|l| {
                format!(
                    " [{}]",
                    l.iter()
                        .map(|x| clean_line(x))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .unwrap_or_default();
        let here = if leaf.as_ref() == Some(&n.id) {
            "  ← leaf"
        } else {
            ""
        };
        lines.push(format!("{first}{mark} {} {desc}{tags}{here}", n.id));
        let kids = children
            .get(&Some(n.id.clone()))
            .cloned()
            .unwrap_or_default();
        match kids.len() {
            0 => {}
            1 => stack.push((kids[0], rest.clone(), rest)),
            k => {
                for (j, &c) in kids.iter().enumerate().rev() {
                    let last = j == k - 1;
                    let connector = if last { "└─ " } else { "├─ " };
                    let cont = if last { "   " } else { "│  " };
                    stack.push((c, format!("{rest}{connector}"), format!("{rest}{cont}")));
                }
            }
        }
    }
    for l in lines {
        writeln!(out, "{l}")?;
    }
    Ok(())
}
