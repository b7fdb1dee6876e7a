//! `cairn steps`: the numbered steps of a session (what went in, what came
//! out, status, time, tokens), one step whole, and the steps of subagent
//! sessions nested under the call that spawned them.

use std::collections::HashMap;

use anyhow::{Result, bail};
use cairn::steps::{Step, StepKind};
use cairn::{Access, Session, SessionId, Store};
use cairn_view::describe::{StepCells, step_cells};
use serde_json::Value;

use super::Status;
use crate::args::SessionArg;
use crate::target::{self, Ctx};
use crate::term::{Lines, Out, Style, clean, clean_json, fit, pad};

/// What `cairn steps` was asked for.
pub struct Request<'a> {
    /// The session.
    pub target: &'a SessionArg,
    /// The positionals after it (a step label, or nothing).
    pub rest: &'a [String],
    /// Only the last N steps.
    pub last: Option<usize>,
    /// How many levels of subagents to nest.
    pub depth: usize,
    /// Print JSON.
    pub json: bool,
}

/// Runs `cairn steps`.
///
/// # Errors
///
/// Opening or reading the session, an unknown step, or writing output.
pub fn run(ctx: &Ctx, req: &Request<'_>) -> Result<Status> {
    let total = req.target.session.iter().count() + req.rest.len();
    let given = if req.target.last {
        total
    } else {
        total.saturating_sub(1)
    };
    let (spec, rest) = target::split(req.target, req.rest, given.min(1))?;
    let (store, session) = target::open(ctx, &spec, Access::Read)?;
    let all = steps_of(&store, &session)?;
    let mut out = ctx.out();
    if let Some(query) = rest.first() {
        let Some(number) = cairn::steps::parse_label(query) else {
            bail!(
                "{query:?} is not a step: steps are written s0001, s0002, … (`cairn steps` lists them)"
            );
        };
        let Some(step) = all.iter().find(|s| s.number == number) else {
            bail!(
                "no step {query} in session {} (it has {}); `cairn steps` lists them",
                session.id(),
                all.len()
            );
        };
        let children = children_by_call(&store, session.id(), &all)?;
        if req.json {
            out.json(&step_json(&store, step, &children, req.depth)?)?;
        } else {
            one_step(&mut out, &session, step, &children)?;
        }
        out.flush()?;
        return Ok(Status::Ok);
    }
    let skip = req.last.map_or(0, |n| all.len().saturating_sub(n));
    let shown = &all[skip..];
    let children = children_by_call(&store, session.id(), &all)?;
    if req.json {
        let rows = shown
            .iter()
            .map(|s| step_json(&store, s, &children, req.depth))
            .collect::<Result<Vec<_>>>()?;
        out.json(&Value::Array(rows))?;
        return Ok(Status::Ok);
    }
    if shown.is_empty() {
        out.line("no steps yet: steps are the session's user inputs, model calls and tool calls")?;
        return Ok(Status::Ok);
    }
    out.put(
        Style::Dim,
        "STEP   TYPE   NAME                         STATUS       TIME    TOKENS",
    )?;
    out.nl()?;
    let width = ctx.look.width.max(60);
    list(&mut out, &store, shown, &children, "", req.depth, width)?;
    out.flush()?;
    Ok(Status::Ok)
}

/// A session's steps; those still running are interrupted when nobody
/// holds the session (its process died: the records alone cannot tell).
fn steps_of(store: &Store, session: &Session) -> Result<Vec<Step>> {
    let mut steps = session.steps()?;
    if store.status(session.id())? == cairn::Status::Interrupted {
        cairn::steps::interrupt_running(&mut steps);
    }
    Ok(steps)
}

/// The subagent sessions a session spawned, by the call that spawned them,
/// for the calls none of whose `steps` has a result naming its child (a
/// call still running, or closed without the child's answer): the others
/// show their child under the step whose result names it, and nowhere else
/// (not under a dispatch that a crash cut short, for one).
fn children_by_call(
    store: &Store,
    id: &SessionId,
    steps: &[Step],
) -> Result<HashMap<String, SessionId>> {
    let named: std::collections::HashSet<&str> = steps
        .iter()
        .filter(|s| s.child.is_some())
        .filter_map(|s| s.call_id.as_deref())
        .collect();
    Ok(store
        .children(id)?
        .into_iter()
        .filter(|(_, origin)| !named.contains(origin.call_id.as_str()))
        .map(|(s, origin)| (origin.call_id, s.id))
        .collect())
}

/// The child of a tool step: named in its result, or by the child's own
/// header (see [`children_by_call`]).
fn child_of(step: &Step, children: &HashMap<String, SessionId>) -> Option<SessionId> {
    step.child.clone().or_else(|| {
        let call = step.call_id.as_ref()?;
        children.get(call).cloned()
    })
}

fn list(
    out: &mut Out<'_>,
    store: &Store,
    steps: &[Step],
    children: &HashMap<String, SessionId>,
    prefix: &str,
    depth: usize,
    width: usize,
) -> Result<()> {
    for s in steps {
        let c = step_cells(s);
        step_line(out, s, &c, prefix)?;
        let detail = format!("{prefix}       ");
        let room = width.saturating_sub(detail.chars().count() + 4);
        for (tag, text) in [("in ", &c.input), ("out", &c.output)] {
            if !text.is_empty() {
                out.spans(&[
                    (Style::Dim, &format!("{detail}{tag} ")),
                    (Style::Plain, &fit(&clean(text, Lines::Flatten), room)),
                ])?;
            }
        }
        let Some(child) = child_of(s, children) else {
            continue;
        };
        let nested = format!("{prefix}       │ ");
        if depth == 0 {
            out.put(
                Style::Dim,
                &format!("{nested}subagent {child} (--depth 1 shows its steps)"),
            )?;
            out.nl()?;
            continue;
        }
        let Ok(session) = store.open(&child, Access::Read) else {
            out.put(
                Style::Warn,
                &format!("{nested}subagent {child}: cannot be opened (run `cairn fsck {child}`)"),
            )?;
            out.nl()?;
            continue;
        };
        let title = session
            .title()
            .map(|t| format!(" \"{}\"", clean(&t, Lines::Flatten)))
            .unwrap_or_default();
        out.put(
            Style::Bold,
            &fit(&format!("{nested}subagent {child}{title}"), width),
        )?;
        out.nl()?;
        let steps = steps_of(store, &session)?;
        let grandchildren = children_by_call(store, &child, &steps)?;
        list(
            out,
            store,
            &steps,
            &grandchildren,
            &nested,
            depth - 1,
            width,
        )?;
    }
    Ok(())
}

fn step_line(out: &mut Out<'_>, s: &Step, c: &StepCells, prefix: &str) -> Result<()> {
    let indent = if s.parent.is_some() { "└ " } else { "" };
    let name = format!("{indent}{}", c.name);
    out.spans(&[
        (Style::Dim, prefix),
        (Style::Bold, &format!("{}  ", s.label())),
        (Style::Plain, &pad(c.kind, 7)),
        (Style::Plain, &pad(&fit(&name, 28), 29)),
        (c.style, &pad(c.status, 13)),
        (Style::Dim, &pad(&c.time, 8)),
        (Style::Dim, &c.tokens),
    ])?;
    Ok(())
}

/// One step whole: every field, the input and the output in full.
fn one_step(
    out: &mut Out<'_>,
    session: &Session,
    s: &Step,
    children: &HashMap<String, SessionId>,
) -> Result<()> {
    let c = step_cells(s);
    out.spans(&[
        (Style::Bold, &format!("step {}", s.label())),
        (Style::Plain, &format!("  {} {}  ", c.kind, c.name)),
        (c.style, c.status),
    ])?;
    let field = |out: &mut Out<'_>, name: &str, value: &str| -> Result<()> {
        out.spans(&[
            (Style::Dim, &pad(name, 11)),
            (Style::Plain, &clean(value, Lines::Flatten)),
        ])?;
        Ok(())
    };
    field(out, "session", session.id().as_str())?;
    field(
        out,
        "operation",
        s.op.as_deref().unwrap_or("none (derived from the entries)"),
    )?;
    field(out, "started", &s.started)?;
    field(out, "took", &c.time)?;
    if let Some(down) = s.downtime_ms {
        field(
            out,
            "downtime",
            &format!(
                "{} (no process ran: between the crash and the resume, not in `took`)",
                cairn_view::describe::duration(down)
            ),
        )?;
    }
    if let Some(u) = &s.usage {
        field(
            out,
            "tokens",
            &format!("{} in, {} out, {} cached", u.input, u.output, u.cached),
        )?;
    }
    if let Some(p) = s.parent {
        field(out, "asked by", &cairn::steps::label(p))?;
    }
    if let Some(call) = &s.call_id {
        field(out, "call", call)?;
    }
    match &s.entry {
        Some(e) if session.resolve(e.as_str()).is_err() => field(
            out,
            "entry",
            &format!(
                "{e}, not written: the {} step has no result yet (`cairn recover {}` records its outcome; then `cairn checkout {} {}` goes to the state right after it)",
                s.status.name(),
                session.id(),
                session.id(),
                s.label()
            ),
        )?,
        Some(e) => field(
            out,
            "entry",
            &format!(
                "{e} (`cairn checkout {} {}` goes to the state right after it)",
                session.id(),
                s.label()
            ),
        )?,
        None => field(out, "entry", "none")?,
    }
    if let Some(child) = child_of(s, children) {
        field(out, "subagent", &format!("{child} (`cairn steps {child}`)"))?;
    }
    for (name, text) in [("input", &s.input), ("output", &s.output)] {
        let Some(text) = text else { continue };
        out.put(Style::Dim, &format!("{name}:"))?;
        out.nl()?;
        let shown = match (s.kind, name) {
            (StepKind::Tool, "input") => serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|v| serde_json::to_string_pretty(&v).ok())
                .map_or_else(
                    || clean(text, Lines::Keep).into_owned(),
                    |j| clean_json(&j).into_owned(),
                ),
            _ => clean(text, Lines::Keep).into_owned(),
        };
        for line in shown.lines() {
            out.line(&format!("  {line}"))?;
        }
    }
    Ok(())
}

/// A step as JSON, with its subagent's steps (`child_steps`) to `depth`.
fn step_json(
    store: &Store,
    s: &Step,
    children: &HashMap<String, SessionId>,
    depth: usize,
) -> Result<Value> {
    let mut v = serde_json::to_value(s)?;
    let child = child_of(s, children);
    if let Value::Object(m) = &mut v {
        m.insert("label".into(), Value::String(s.label()));
        m.insert("child".into(), serde_json::to_value(&child)?);
        if let Some(child) = child.filter(|_| depth > 0)
            && let Ok(session) = store.open(&child, Access::Read)
        {
            let steps = steps_of(store, &session)?;
            let grandchildren = children_by_call(store, &child, &steps)?;
            let nested = steps
                .iter()
                .map(|c| step_json(store, c, &grandchildren, depth - 1))
                .collect::<Result<Vec<_>>>()?;
            m.insert("child_steps".into(), Value::Array(nested));
        }
    }
    Ok(v)
}
