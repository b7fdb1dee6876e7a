//! The operation-journal commands: `cairn recover` (the recovery verdict,
//! and its resolution by policy or by asking), and `cairn memory` (the session memory derived from the branch).
//!
//! Before a call that may have run is decided, the tool processes the agent
//! recorded for it are checked (`cairn_agent::running`): the verdict shows
//! one that still runs as *running*, and resolution waits for it or stops
//! it (`--on-running`) before it records anything — the resolver is
//! wrapped in `Fenced`, the same seam the agent's resume uses.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Result, bail};
use cairn::memory::MemoryConfig;
use cairn::{Access, Decision, Pending, Policy, Resolver, ToolOutput, Verdict, recover_with};
use cairn_agent::OnRunning;
use cairn_agent::running::{self, Fenced, Fencing};
use serde_json::json;

use super::Status;
use crate::args::{RecoverPolicy, SessionArg};
use crate::target::{self, Ctx};
use crate::term::{Lines, Out, Style, clean};

/// Runs `cairn recover --all --policy …`: claims interrupted sessions one
/// at a time (the backend's claim, so concurrent workers get different
/// ones; else the listing, skipping sessions another writer holds) and
/// resolves each under the policy.
///
/// # Errors
///
/// Opening the store or claiming; a session that fails to recover is
/// reported and the others are still recovered (exit 2 at the end).
pub fn recover_all(
    ctx: &Ctx,
    policy: RecoverPolicy,
    on_running: OnRunning,
    json: bool,
) -> Result<Status> {
    let store = ctx.store()?;
    let fencing = fencing(ctx, on_running)?;
    let mut seen: Vec<cairn::SessionId> = Vec::new();
    let mut recovered = Vec::new();
    let mut skipped = Vec::new();
    let mut failed = Vec::new();
    let mut listed: Option<Vec<cairn::SessionId>> = None;
    loop {
        let id = match store.backend().claim_interrupted(&seen)? {
            cairn::Claim::Claimed(id) => id,
            cairn::Claim::NoneLeft => break,
            cairn::Claim::Unsupported => {
                let queue = match &mut listed {
                    Some(q) => q,
                    None => listed.insert(
                        store
                            .list()?
                            .into_iter()
                            .filter(|s| s.status == cairn::Status::Interrupted)
                            .map(|s| s.id)
                            .rev()
                            .collect(),
                    ),
                };
                match queue.pop() {
                    Some(id) => id,
                    None => break,
                }
            }
        };
        seen.push(id.clone());
        let session = match store.open(&id, Access::Write) {
            Ok(s) => s,
            Err(cairn::OpenError::InUse { .. }) => {
                skipped.push(id);
                continue;
            }
            Err(e) => {
                failed.push((id, cairn::with_causes(&e)));
                continue;
            }
        };
        let resolved = match policy {
            RecoverPolicy::Unknown => {
                let tell = |w: &str| eprintln!("{id}: {}", clean(w, Lines::Flatten));
                let mut r = Fenced::new(Policy::close_all(), &session, fencing.clone(), tell);
                recover_with(&session, &mut r)
            }
        };
        match resolved {
            Ok(report) => recovered.push((id, report)),
            Err(e) => failed.push((id, cairn::with_causes(&e))),
        }
    }
    let mut out = ctx.out();
    if json {
        let recovered: Vec<_> = recovered
            .iter()
            .map(|(id, r)| {
                let actions: Vec<String> = r.actions.iter().map(ToString::to_string).collect();
                json!({"session": id, "actions": actions, "after": r.after})
            })
            .collect();
        let failed: Vec<_> = failed
            .iter()
            .map(|(id, e)| json!({"session": id, "error": e}))
            .collect();
        out.json(&json!({"recovered": recovered, "skipped": skipped, "failed": failed}))?;
    } else {
        for (id, r) in &recovered {
            out.line(&format!("{id}: {} action(s)", r.actions.len()))?;
            for a in &r.actions {
                out.line(&format!(
                    "  done: {}",
                    clean(&a.to_string(), Lines::Flatten)
                ))?;
            }
        }
        for id in &skipped {
            out.line(&format!("{id}: skipped, another writer holds it"))?;
        }
        for (id, e) in &failed {
            out.line(&format!("{id}: failed: {}", clean(e, Lines::Flatten)))?;
        }
        out.line(&format!(
            "recovered {} session(s), skipped {}, failed {}",
            recovered.len(),
            skipped.len(),
            failed.len()
        ))?;
    }
    out.flush()?;
    if !failed.is_empty() {
        bail!(
            "{} session(s) could not be recovered (listed above)",
            failed.len()
        );
    }
    Ok(Status::Ok)
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
    on_running: OnRunning,
    json: bool,
) -> Result<Status> {
    let spec = target::spec(arg)?;
    let interactive = policy.is_none() && std::io::stdin().is_terminal() && !json;
    let access = if policy.is_some() || interactive {
        Access::Write
    } else {
        Access::Read
    };
    let (store, session) = target::open(ctx, &spec, access)?;
    // A read-only look at a session another process holds: its open
    // operation is in progress, not interrupted.
    let running = access == Access::Read && store.status(session.id())? == cairn::Status::Running;
    // The tool processes of calls that may have run, shown before anything
    // is decided (a wait can take a while).
    let before = session.verdict()?;
    let processes: Vec<String> = running::survey(&session, &before)
        .iter()
        .map(running::Found::describe)
        .collect();
    let mut out = ctx.out();
    if !json {
        describe_verdict(&mut out, &before, running)?;
        for p in &processes {
            out.line(&format!("  {}", clean(p, Lines::Flatten)))?;
        }
        out.flush()?;
    }
    let mut told = Vec::new();
    let tell = |w: &str| {
        if !json {
            eprintln!("{}", clean(w, Lines::Flatten));
        }
        told.push(w.to_owned());
    };
    let fencing = fencing(ctx, on_running)?;
    let report = match policy {
        Some(RecoverPolicy::Unknown) => recover_with(
            &session,
            &mut Fenced::new(Policy::close_all(), &session, fencing, tell),
        )?,
        None if interactive => {
            recover_with(&session, &mut Fenced::new(Asker, &session, fencing, tell))?
        }
        None => cairn::RecoveryReport {
            before: before.clone(),
            actions: Vec::new(),
            after: before,
        },
    };
    if json {
        let actions: Vec<String> = report.actions.iter().map(ToString::to_string).collect();
        out.json(&json!({
            "session": session.id(),
            "running": running,
            "processes": processes,
            "before": report.before,
            "settled": told,
            "actions": actions,
            "after": report.after,
        }))?;
        return Ok(Status::Ok);
    }
    for a in &report.actions {
        out.line(&format!(
            "  done: {}",
            clean(&a.to_string(), Lines::Flatten)
        ))?;
    }
    if !report.actions.is_empty() {
        out.put(Style::Bold, "now: ")?;
        describe_verdict(&mut out, &report.after, running)?;
    } else if running {
        out.line("another process holds the session and is running this operation; wait for it,")?;
        out.line("or stop it and run `cairn recover` again")?;
    } else if needs_resolution(&report.before) && policy.is_none() {
        out.line("resolve it: `cairn recover SESSION --policy unknown`, or on a terminal")?;
        out.line("interactively, or resume the agent (`cairn agent --resume SESSION`),")?;
        out.line("which can also re-run read-only and idempotent tools")?;
    }
    out.flush()?;
    Ok(Status::Ok)
}

/// How `cairn recover` settles tool processes: `--on-running`, the store's
/// blob directory for a long output.
fn fencing(ctx: &Ctx, on_running: OnRunning) -> Result<Fencing> {
    Ok(Fencing {
        on_running,
        by: format!("cairn recover --on-running {}", on_running.name()),
        interrupt: cairn_agent::interrupt::Interrupt::new(),
        blob_dir: cairn_stores::blob_dir(&ctx.home()?),
        output_cap: 16 << 10,
    })
}

fn needs_resolution(v: &Verdict) -> bool {
    matches!(
        v,
        Verdict::IndeterminateTool { .. }
            | Verdict::AwaitingApproval { .. }
            | Verdict::ToolsNotStarted { .. }
    )
}

fn describe_verdict(out: &mut Out<'_>, v: &Verdict, running: bool) -> Result<()> {
    out.put(Style::Bold, v.name())?;
    let op_name = |op: &Option<String>| {
        op.as_ref().map_or_else(
            || "no operation records".to_owned(),
            |op| format!("operation {op}"),
        )
    };
    match v {
        Verdict::IndeterminateTool { op, calls } => {
            if running {
                out.line(&format!(" (operation {op}, in progress in another process): these tools are running:"))?;
            } else {
                out.line(&format!(" (operation {op}): these tools started and have no result; they may have run:"))?;
            }
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
            if running {
                out.line(&format!(" (operation {op}, in progress in another process): a person is being asked:"))?;
            } else {
                out.line(&format!(" (operation {op}): a person was asked and never answered:"))?;
            }
            for c in calls {
                out.line(&format!("  {} {}", c.call_id, clean(&c.tool, Lines::Flatten)))?;
            }
        }
        Verdict::ProviderInterrupted { op, attempt, .. } if running => out.line(&format!(
            " (operation {op}, in progress in another process): waiting for model attempt {attempt}'s reply"
        ))?,
        Verdict::ProviderInterrupted { op, attempt, .. } => out.line(&format!(
            " (operation {op}): model attempt {attempt} never got its reply; nothing external happened, retry it (`cairn agent --resume`)"
        ))?,
        Verdict::ToolsNotStarted { op, calls } => {
            let state = if running { ", in progress in another process" } else { "" };
            out.line(&format!(" ({}{state}): the model asked for tools that have not started:", op_name(op)))?;
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

/// Asks the person at the terminal about each pending item.
struct Asker;

impl Resolver for Asker {
    fn decide(&mut self, item: Pending<'_>, _can_run: bool) -> Decision {
        let (call_id, tool) = (item.call_id(), clean(item.tool(), Lines::Flatten));
        match ask_decision(item, call_id, &tool) {
            Ok(d) => d,
            Err(e) => Decision::Stop(format!("{e:#}")),
        }
    }
}

fn ask_decision(item: Pending<'_>, call_id: &str, tool: &str) -> Result<Decision> {
    Ok(match item {
        Pending::Indeterminate { .. } => {
            let q = format!(
                "{call_id} ({tool}) may or may not have run: mark [u]nknown, [t]ell what happened, or [s]kip? "
            );
            match ask(&q, &["u", "t", "s"])?.as_str() {
                "u" => Decision::MarkUnknown,
                "t" => {
                    let text = ask_line("what happened? ")?;
                    Decision::Outcome(ToolOutput::text(format!(
                        "The agent stopped before this call's result was recorded. The person reports what happened: {text}"
                    )))
                }
                _ => Decision::Skip,
            }
        }
        Pending::Approval { .. } => {
            let q = format!("{call_id} ({tool}) awaits approval: [d]eny, or [s]kip? ");
            match ask(&q, &["d", "s"])?.as_str() {
                "d" => Decision::Deny {
                    by: Some("person (cairn recover)".to_owned()),
                    reason: cairn::DENIED_BY_PERSON.to_owned(),
                },
                _ => Decision::Skip,
            }
        }
        Pending::NotStarted(c) if c.denied => Decision::Deny {
            by: None,
            reason: cairn::DENIED_BY_PERSON.to_owned(),
        },
        Pending::NotStarted(_) => {
            let q =
                format!("{call_id} ({tool}) never started: [c]lose it as not started, or [s]kip? ");
            match ask(&q, &["c", "s"])?.as_str() {
                "c" => Decision::CloseNotStarted,
                _ => Decision::Skip,
            }
        }
    })
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
