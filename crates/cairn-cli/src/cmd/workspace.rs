//! `cairn checkout --files` (alias `rewind --files`) and `cairn diff`: the
//! working directory's files rewound with the conversation, and the
//! difference between two entries, from the session's workspace snapshots
//! (`cairn_workspace`).

use anyhow::Result;
use cairn::Access;
use cairn_workspace::{Action, Change, FileState};
use serde_json::{Value, json};

use super::Status;
use crate::args::SessionArg;
use crate::target::{self, Ctx};
use crate::term::Style;

/// Runs `cairn checkout SESSION ENTRY --files [--force]`.
///
/// # Errors
///
/// Unknown session or entry, session in use, no snapshots, files changed
/// outside the agent (without `--force`; nothing is changed then), I/O
/// errors.
pub fn checkout(
    ctx: &Ctx,
    arg: &SessionArg,
    rest: &[String],
    summary: Option<String>,
    force: bool,
) -> Result<Status> {
    let (spec, rest) = target::split(arg, rest, 1)?;
    let (store, session) = target::open(ctx, &spec, Access::Write)?;
    let to = target::entry(&session, &rest[0])?;
    let blobs = ctx.blobs()?;
    let report =
        cairn_workspace::checkout_files(&store, &session, &blobs, to.as_ref(), summary, force)?;
    let mut out = ctx.out();
    let target_text = to
        .as_ref()
        .map_or_else(|| "the start".to_owned(), ToString::to_string);
    match &report.checkout {
        Some(id) => out.spans(&[
            (Style::Bold, "moved the leaf to "),
            (Style::Active, &target_text),
            (Style::Dim, &format!(" (checkout entry {id})")),
        ])?,
        None => out.spans(&[
            (Style::Bold, "the leaf is already at "),
            (Style::Active, &target_text),
        ])?,
    }
    for (label, paths) in [
        ("created", &report.created),
        ("restored", &report.restored),
        ("deleted", &report.deleted),
        ("already as at the entry", &report.already),
        (
            "overwritten (changed outside the agent; --force)",
            &report.overwritten,
        ),
    ] {
        for p in paths {
            out.line(&format!("  {label}: {p}"))?;
        }
    }
    for left in &report.unrestorable {
        out.line(&format!("  left as is: {} ({})", left.path, left.why))?;
    }
    let n = report.created.len() + report.restored.len() + report.deleted.len();
    out.line(&format!(
        "files: {n} changed, {} already in place",
        report.already.len()
    ))?;
    Ok(Status::Ok)
}

/// Runs `cairn diff SESSION A B`.
///
/// # Errors
///
/// Unknown session or entries, no snapshots, unreadable records.
pub fn diff(ctx: &Ctx, arg: &SessionArg, rest: &[String], json: bool) -> Result<Status> {
    let (spec, rest) = target::split(arg, rest, 2)?;
    let (store, session) = target::open(ctx, &spec, Access::Read)?;
    let a = target::entry(&session, &rest[0])?;
    let b = target::entry(&session, &rest[1])?;
    let changes = cairn_workspace::diff(&store, &session, a.as_ref(), b.as_ref())?;
    let mut out = ctx.out();
    if json {
        out.json(&Value::Array(changes.iter().map(change_json).collect()))?;
        return Ok(Status::Ok);
    }
    if changes.is_empty() {
        out.line("no differences")?;
    }
    for c in &changes {
        let (sign, style) = match c.action {
            Action::Create => ("+", Style::Active),
            Action::Delete => ("-", Style::Label),
            Action::Restore => ("M", Style::Bold),
        };
        out.spans(&[
            (style, sign),
            (Style::Plain, &format!(" {}", c.path)),
            (Style::Dim, &format!("  {}", describe(c))),
        ])?;
    }
    Ok(Status::Ok)
}

fn describe(c: &Change) -> String {
    let one = |s: &FileState| match &s.link {
        Some(l) => format!("symlink -> {l}"),
        None if s.dir => format!("directory, mode {:o}", s.mode),
        None => format!("{} bytes, mode {:o}", s.size, s.mode),
    };
    match (&c.from, &c.to) {
        (Some(f), Some(t)) => format!("{} => {}", one(f), one(t)),
        (None, Some(t)) => one(t),
        (Some(f), None) => format!("was {}", one(f)),
        (None, None) => String::new(),
    }
}

fn change_json(c: &Change) -> Value {
    json!({
        "path": c.path,
        "action": c.action.name(),
        "from": c.from,
        "to": c.to,
    })
}
