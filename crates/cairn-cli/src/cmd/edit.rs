//! The commands that write a session's tree: `new`, `checkout` (alias
//! `rewind`), `fork` and `label`.

use anyhow::{Context as _, Result, bail};
use cairn::{Access, NewSession};
use serde_json::Value;

use super::Status;
use crate::args::SessionArg;
use crate::target::{self, Ctx};
use crate::term::Style;
use cairn_view::describe::compact;

/// Runs `cairn new`: prints the new session's id.
///
/// # Errors
///
/// Invalid `--state` JSON, or I/O errors creating the session.
pub fn new(ctx: &Ctx, title: Option<String>, state: Option<&str>) -> Result<Status> {
    let app_state = state
        .map(serde_json::from_str::<Value>)
        .transpose()
        .context("--state is not valid JSON (quote it for the shell: --state '{\"k\":1}')")?;
    let store = ctx.store()?;
    let session = store.create(NewSession {
        title,
        app_state,
        ..NewSession::default()
    })?;
    let mut out = ctx.out();
    out.line(session.id().as_str())?;
    Ok(Status::Ok)
}

/// Runs `cairn checkout`: moves the leaf and prints what the context is now.
///
/// # Errors
///
/// Unknown session or entry, session in use, I/O errors.
pub fn checkout(
    ctx: &Ctx,
    arg: &SessionArg,
    rest: &[String],
    summary: Option<String>,
) -> Result<Status> {
    let (spec, rest) = target::split(arg, rest, 1)?;
    let (_, session) = target::open(ctx, &spec, Access::Write)?;
    let to = target::entry(&session, &rest[0])?;
    let done = session.checkout(to.as_ref(), summary)?;
    let context = session.context();
    let mut out = ctx.out();
    let target_text = to.as_ref().map_or_else(
        || "the start (before the first entry)".to_owned(),
        |t| t.to_string(),
    );
    let labels: Vec<String> = context
        .labels()
        .iter()
        .filter(|(_, id)| Some(*id) == to.as_ref())
        .map(|(name, _)| name.clone())
        .collect();
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!(" [{}]", labels.join(", "))
    };
    let moved = if done.is_some() {
        "moved the leaf to "
    } else {
        "the leaf is already at "
    };
    out.spans(&[
        (Style::Bold, moved),
        (Style::Active, &target_text),
        (Style::Label, &labels),
    ])?;
    match done
        .as_ref()
        .and_then(|d| d.id.as_ref().map(|id| (id, d.seq)))
    {
        Some((id, seq)) => out.spans(&[(
            Style::Dim,
            &format!("recorded as checkout entry {id} (seq {seq})"),
        )])?,
        None if done.is_none() => out.spans(&[(Style::Dim, "nothing recorded")])?,
        None => {}
    }
    let n = context.messages().len();
    out.line(&format!(
        "context: {n} message{}",
        if n == 1 { "" } else { "s" }
    ))?;
    let state = compact(context.app_state());
    if crate::term::width(&state) + 11 <= out.look.width {
        out.line(&format!("app state: {state}"))?;
    } else {
        out.line("app state:")?;
        let pretty = serde_json::to_string_pretty(context.app_state())?;
        for l in pretty.lines() {
            out.line(&format!("  {l}"))?;
        }
    }
    Ok(Status::Ok)
}

/// Runs `cairn fork`: prints the new session's id.
///
/// # Errors
///
/// Unknown session or entry, I/O errors.
pub fn fork(ctx: &Ctx, arg: &SessionArg, rest: &[String], title: Option<String>) -> Result<Status> {
    let (spec, rest) = target::split(arg, rest, 1)?;
    let (store, source) = target::open(ctx, &spec, Access::Read)?;
    let at = target::entry(&source, &rest[0])?;
    let fork = store.fork(&source, at.as_ref(), title)?;
    let mut out = ctx.out();
    out.line(fork.id().as_str())?;
    Ok(Status::Ok)
}

/// Runs `cairn label`: sets, removes or lists labels.
///
/// # Errors
///
/// Unknown session or entry, an invalid label name, removing a label that
/// does not exist, session in use, I/O errors.
pub fn label(
    ctx: &Ctx,
    arg: &SessionArg,
    rest: &[String],
    delete: bool,
    json: bool,
) -> Result<Status> {
    let total = arg.session.iter().count() + rest.len();
    let given = if arg.last {
        total
    } else {
        total.saturating_sub(1)
    };
    let want = if delete {
        1
    } else if given == 0 {
        0
    } else {
        2
    };
    let (spec, rest) = target::split(arg, rest, want)?;
    if want == 0 {
        return list(ctx, &spec, json);
    }
    if json {
        bail!("--json is only for listing labels (`cairn label SESSION --json`)");
    }
    let (_, session) = target::open(ctx, &spec, Access::Write)?;
    let mut out = ctx.out();
    if delete {
        let name = &rest[0];
        session.label(name, None)?;
        out.spans(&[(Style::Plain, "removed label "), (Style::Label, name)])?;
    } else {
        let (entry, name) = (&rest[0], &rest[1]);
        let Some(id) = target::entry(&session, entry)? else {
            bail!("a label marks an entry; `root` is not one");
        };
        session.label(name, Some(&id))?;
        out.spans(&[
            (Style::Plain, "label "),
            (Style::Label, name),
            (Style::Plain, &format!(" → {id}")),
        ])?;
    }
    Ok(Status::Ok)
}

fn list(ctx: &Ctx, spec: &target::Spec, json: bool) -> Result<Status> {
    let (_, session) = target::open(ctx, spec, Access::Read)?;
    let labels = session.labels();
    let mut out = ctx.out();
    if json {
        out.json(&serde_json::to_value(&labels)?)?;
        return Ok(Status::Ok);
    }
    if labels.is_empty() {
        out.spans(&[(
            Style::Dim,
            "no labels; `cairn label SESSION ENTRY NAME` sets one",
        )])?;
    }
    for (name, id) in &labels {
        out.spans(&[(Style::Label, name), (Style::Plain, &format!(" → {id}"))])?;
    }
    Ok(Status::Ok)
}
