//! The operation-journal commands: `cairn steps` (the numbered steps),
//! `cairn recover` (the recovery verdict, and its resolution by policy or by
//! asking), and `cairn memory` (the session memory derived from the branch).

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Result, bail};
use cairn::memory::MemoryConfig;
use cairn::steps::{Step, StepKind, StepStatus};
use cairn::{Access, Operation, PendingCall, Session, ToolOutput, Verdict};
use serde_json::json;

use super::Status;
use crate::args::{RecoverPolicy, SessionArg};
use crate::target::{self, Ctx};
use crate::term::{Lines, Out, Style, clean, fit, pad};

/// Runs `cairn steps`.
///
/// # Errors
///
/// Opening or reading the session, or writing output.
pub fn steps(ctx: &Ctx, arg: &SessionArg, last: Option<usize>, json: bool) -> Result<Status> {
    let (_, session) = target::open(ctx, &target::spec(arg)?, Access::Read)?;
    let all = session.steps()?;
    let skip = last.map_or(0, |n| all.len().saturating_sub(n));
    let shown = &all[skip..];
    let mut out = ctx.out();
    if json {
        out.json(&serde_json::to_value(shown)?)?;
        return Ok(Status::Ok);
    }
    if shown.is_empty() {
        out.line("no steps yet: steps come from operations (`cairn agent`, or op_* records)")?;
        return Ok(Status::Ok);
    }
    out.put(
        Style::Dim,
        "STEP   TYPE   NAME                         STATUS       TIME    TOKENS",
    )?;
    out.nl()?;
    for s in shown {
        step_line(&mut out, s)?;
    }
    out.flush()?;
    Ok(Status::Ok)
}

fn step_line(out: &mut Out<'_>, s: &Step) -> Result<()> {
    let kind = match s.kind {
        StepKind::Input => "input",
        StepKind::Model => "model",
        StepKind::Tool => "tool",
    };
    let indent = if s.parent.is_some() { "└ " } else { "" };
    let name = format!("{indent}{}", clean(&s.name, Lines::Flatten));
    let (status, style) = match s.status {
        StepStatus::Ok => ("ok", Style::Plain),
        StepStatus::Error => ("error", Style::Warn),
        StepStatus::Running => ("running", Style::Bold),
        StepStatus::Interrupted => ("interrupted", Style::Warn),
        StepStatus::Unknown => ("unknown", Style::Warn),
        StepStatus::NotStarted => ("not started", Style::Dim),
    };
    let time = s.duration_ms.map_or_else(|| "-".to_owned(), duration);
    let tokens = s
        .usage
        .as_ref()
        .map_or_else(|| "-".to_owned(), |u| format!("{}/{}", u.input, u.output));
    out.spans(&[
        (Style::Bold, &format!("{}  ", s.label())),
        (Style::Plain, &pad(kind, 7)),
        (Style::Plain, &pad(&fit(&name, 28), 29)),
        (style, &pad(status, 13)),
        (Style::Dim, &pad(&time, 8)),
        (Style::Dim, &tokens),
    ])?;
    Ok(())
}

fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// Runs `cairn recover`.
///
/// # Errors
///
/// Opening the session (a writer must not hold it), appending results, or
/// writing output.
pub fn recover(
    ctx: &Ctx,
    arg: &SessionArg,
    policy: Option<RecoverPolicy>,
    json: bool,
) -> Result<Status> {
    let spec = target::spec(arg)?;
    let interactive = policy.is_none() && std::io::stdin().is_terminal() && !json;
    let access = if policy.is_some() || interactive {
        Access::Write
    } else {
        Access::Read
    };
    let (_, session) = target::open(ctx, &spec, access)?;
    let before = session.verdict();
    let mut actions: Vec<String> = Vec::new();
    if (policy.is_some() || interactive)
        && let Some(op) = session.resume_operation()
    {
        resolve(&session, &op, policy, &mut actions)?;
    }
    let after = session.verdict();
    let mut out = ctx.out();
    if json {
        out.json(&json!({ "session": session.id(), "before": before, "actions": actions, "after": after }))?;
        return Ok(Status::Ok);
    }
    describe_verdict(&mut out, &before)?;
    for a in &actions {
        out.line(&format!("  done: {}", clean(a, Lines::Flatten)))?;
    }
    if !actions.is_empty() {
        out.put(Style::Bold, "now: ")?;
        describe_verdict(&mut out, &after)?;
    } else if needs_resolution(&before) && policy.is_none() {
        out.line("resolve it: `cairn recover SESSION --policy unknown`, or on a terminal")?;
        out.line("interactively, or resume the agent (`cairn agent --resume SESSION`),")?;
        out.line("which can also re-run read-only and idempotent tools")?;
    }
    out.flush()?;
    Ok(Status::Ok)
}

fn needs_resolution(v: &Verdict) -> bool {
    matches!(
        v,
        Verdict::IndeterminateTool { .. }
            | Verdict::AwaitingApproval { .. }
            | Verdict::ToolsNotStarted { .. }
    )
}

fn describe_verdict(out: &mut Out<'_>, v: &Verdict) -> Result<()> {
    out.put(Style::Bold, v.name())?;
    match v {
        Verdict::IndeterminateTool { op, calls } => {
            out.line(&format!(" (operation {op}): these tools started and have no result; they may have run:"))?;
            for c in calls {
                let effect = format!("{:?}", c.effect);
                out.line(&format!("  {} {} [{}] key {}", c.call_id, clean(&c.tool, Lines::Flatten), effect, c.key))?;
            }
        }
        Verdict::Finished { op, outcome } => {
            let outcome = serde_json::to_value(outcome)?;
            let outcome = outcome.as_str().unwrap_or("?");
            out.line(&format!(" (operation {op} ended: {outcome}): nothing to do"))?;
        }
        Verdict::AwaitingApproval { op, calls } => {
            out.line(&format!(" (operation {op}): a person was asked and never answered:"))?;
            for c in calls {
                out.line(&format!("  {} {}", c.call_id, clean(&c.tool, Lines::Flatten)))?;
            }
        }
        Verdict::ProviderInterrupted { op, attempt, .. } => out.line(&format!(
            " (operation {op}): model attempt {attempt} never got its reply; nothing external happened, retry it (`cairn agent --resume`)"
        ))?,
        Verdict::ToolsNotStarted { op, calls } => {
            out.line(&format!(" (operation {op}): the model asked for tools that never started:"))?;
            for c in calls {
                let denied = if c.denied { " (denied by a person)" } else { "" };
                out.line(&format!("  {} {}{denied}", c.call_id, clean(&c.tool, Lines::Flatten)))?;
            }
        }
        Verdict::Ready { op } => match op {
            Some(op) => out.line(&format!(" (operation {op} is open): nothing pending, the loop can continue"))?,
            None => out.line(": no operation yet, nothing to do")?,
        },
        _ => out.nl()?,
    }
    Ok(())
}

/// Resolves the open operation once, by policy or by asking on the terminal.
fn resolve(
    session: &Session,
    op: &Operation<'_>,
    policy: Option<RecoverPolicy>,
    actions: &mut Vec<String>,
) -> Result<()> {
    // Every resolution changes the verdict; a few rounds reach a fixed point
    // (e.g. a denied approval leaves the other calls not started).
    for _ in 0..8 {
        let verdict = session.verdict();
        match &verdict {
            Verdict::IndeterminateTool { calls, .. } => {
                for c in calls {
                    match policy {
                        Some(RecoverPolicy::Unknown) => {
                            op.record_unknown(c)?;
                            actions.push(format!(
                                "recorded {} ({}) as TOOL_OUTCOME_UNKNOWN",
                                c.call_id, c.tool
                            ));
                        }
                        None => ask_indeterminate(op, c, actions)?,
                    }
                }
            }
            Verdict::AwaitingApproval { calls, .. } => {
                for c in calls {
                    let deny = match policy {
                        Some(RecoverPolicy::Unknown) => true,
                        None => {
                            ask(
                                &format!(
                                    "{} ({}) awaits approval: [d]eny, or [s]kip? ",
                                    c.call_id, c.tool
                                ),
                                &["d", "s"],
                            )? == "d"
                        }
                    };
                    if deny {
                        op.resolve_approval(&c.call_id, false, Some("cairn recover"))?;
                        op.deny(&c.call_id, "The approval prompt was interrupted and the call was denied; it was not run.")?;
                        actions.push(format!("denied {} ({})", c.call_id, c.tool));
                    }
                }
            }
            Verdict::ToolsNotStarted { calls, .. } => {
                for c in calls {
                    let close = match policy {
                        Some(RecoverPolicy::Unknown) => true,
                        None => {
                            ask(
                                &format!(
                                    "{} ({}) never started: [c]lose it as not started, or [s]kip? ",
                                    c.call_id, c.tool
                                ),
                                &["c", "s"],
                            )? == "c"
                        }
                    };
                    if close {
                        op.close_not_started(c)?;
                        actions.push(format!(
                            "closed {} ({}) as TOOL_NOT_STARTED",
                            c.call_id, c.tool
                        ));
                    }
                }
            }
            _ => return Ok(()),
        }
        if session.verdict() == verdict {
            return Ok(());
        }
    }
    Ok(())
}

fn ask_indeterminate(op: &Operation<'_>, c: &PendingCall, actions: &mut Vec<String>) -> Result<()> {
    let q = format!(
        "{} ({}) may or may not have run: mark [u]nknown, [t]ell what happened, or [s]kip? ",
        c.call_id, c.tool
    );
    match ask(&q, &["u", "t", "s"])?.as_str() {
        "u" => {
            op.record_unknown(c)?;
            actions.push(format!(
                "recorded {} ({}) as TOOL_OUTCOME_UNKNOWN",
                c.call_id, c.tool
            ));
        }
        "t" => {
            let text = ask_line("what happened? ")?;
            op.provide_outcome(
                c,
                ToolOutput::text(format!("(recorded by a person after a crash) {text}")),
            )?;
            actions.push(format!(
                "recorded what a person said happened to {} ({})",
                c.call_id, c.tool
            ));
        }
        _ => {}
    }
    Ok(())
}

fn ask(question: &str, answers: &[&str]) -> Result<String> {
    loop {
        let a = ask_line(question)?.to_lowercase();
        if let Some(found) = answers.iter().find(|x| a == **x || a.starts_with(**x)) {
            return Ok((*found).to_owned());
        }
    }
}

fn ask_line(question: &str) -> Result<String> {
    let mut err = std::io::stderr().lock();
    write!(err, "{question}")?;
    err.flush()?;
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        bail!("no answer (end of input)");
    }
    Ok(line.trim().to_owned())
}

/// Runs `cairn memory`.
///
/// # Errors
///
/// Opening or reading the session, or writing output.
pub fn memory(ctx: &Ctx, arg: &SessionArg, json: bool) -> Result<Status> {
    let (_, session) = target::open(ctx, &target::spec(arg)?, Access::Read)?;
    session.enable_memory(MemoryConfig::default())?;
    let memory = session.memory().unwrap_or_default();
    let mut out = ctx.out();
    if json {
        out.json(&json!({ "session": session.id(), "memory": memory, "text": memory.render() }))?;
        return Ok(Status::Ok);
    }
    if memory.is_empty() {
        out.line("nothing to remember yet")?;
        return Ok(Status::Ok);
    }
    for line in memory.render().lines() {
        out.line(&clean(line, Lines::Flatten))?;
    }
    out.flush()?;
    Ok(Status::Ok)
}
