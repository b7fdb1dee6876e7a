//! Resume: read the recovery verdict and act on it, through the operation
//! API, until the session is ready for new input.
//!
//! | verdict | what the agent does |
//! |---|---|
//! | `IndeterminateTool` | `ReadOnly`/`Idempotent` calls are re-run with their recorded idempotency key; for `SideEffect` calls the person decides (`--on-unknown`): re-run, mark `TOOL_OUTCOME_UNKNOWN`, or tell what happened |
//! | `AwaitingApproval` | the approval is asked again (the old prompt died with the process) |
//! | `ToolsNotStarted` | the calls run (validation and approval as usual); calls a person denied are answered as denied |
//! | `ProviderInterrupted` | the model call is retried, and the loop goes on |
//! | `Ready` with an open operation | the loop goes on |
//! | `Finished`, or no operation | nothing to do |

use std::sync::Arc;

use anyhow::{Result, bail};
use cairn::{EffectClass, Operation, PendingCall, Session, ToolOutput, Verdict};
use serde_json::Value;

use crate::agent::{Flow, OnUnknown, Runtime, TurnEnd, deny, drive, execute, run_call};
use crate::observer::Event;
use crate::prompt::{Approval, UnknownChoice};

/// What resuming did.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// The verdict found.
    pub before: Verdict,
    /// What was done, in words.
    pub actions: Vec<String>,
    /// How the resumed operation ended, when it was continued.
    pub end: Option<TurnEnd>,
}

/// The tool name and arguments of a call on the branch.
pub fn find_call(session: &Session, call_id: &str) -> Option<(String, Value)> {
    let ctx = session.context();
    ctx.messages().iter().rev().find_map(|m| {
        m.message()
            .tool_calls()
            .find(|(id, _, _)| *id == call_id)
            .map(|(_, name, args)| (name.to_owned(), args.clone()))
    })
}

fn act(rt: &mut Runtime, actions: &mut Vec<String>, what: String) {
    rt.observer.event(&Event::Recovery(&what));
    actions.push(what);
}

/// Acts on the session's verdict until nothing is pending.
///
/// # Errors
///
/// Append errors; with [`OnUnknown::Fail`], a side effect of unknown outcome.
pub fn resume(session: &Session, rt: &mut Runtime) -> Result<Resumed> {
    let before = session.verdict();
    if !matches!(
        before,
        Verdict::Ready { op: None } | Verdict::Finished { .. }
    ) {
        rt.observer.event(&Event::Verdict(&before));
    }
    let mut actions = Vec::new();
    for _ in 0..64 {
        let Some(op) = session.resume_operation() else {
            return Ok(Resumed {
                before,
                actions,
                end: None,
            });
        };
        let verdict = session.verdict();
        match &verdict {
            Verdict::IndeterminateTool { calls, .. } => {
                for call in calls {
                    resolve_indeterminate(&op, session, rt, call, &mut actions)?;
                }
            }
            Verdict::AwaitingApproval { calls, .. } => {
                for c in calls {
                    if reask(&op, session, rt, &c.call_id, &c.tool, &mut actions)?
                        == Flow::Interrupted
                    {
                        break;
                    }
                }
            }
            Verdict::ToolsNotStarted { calls, .. } => {
                for (i, c) in calls.iter().enumerate() {
                    if rt.interrupt.is_set() {
                        for rest in &calls[i..] {
                            deny(
                                &op,
                                rt,
                                &rest.call_id,
                                &rest.tool,
                                "Not run: the person interrupted the agent (Ctrl-C) before this call started.",
                            )?;
                        }
                        break;
                    }
                    if c.denied {
                        deny(
                            &op,
                            rt,
                            &c.call_id,
                            &c.tool,
                            "A person denied this call; it was not run.",
                        )?;
                        act(
                            rt,
                            &mut actions,
                            format!(
                                "answered {} ({}) as denied, as the person had decided",
                                c.call_id, c.tool
                            ),
                        );
                        continue;
                    }
                    act(
                        rt,
                        &mut actions,
                        format!("running {} ({}), which never started", c.call_id, c.tool),
                    );
                    run_call(&op, session, rt, &c.call_id, &c.tool, &c.arguments)?;
                }
            }
            Verdict::ProviderInterrupted { .. } | Verdict::Ready { .. } => {
                let what = if matches!(verdict, Verdict::ProviderInterrupted { .. }) {
                    "the model call was interrupted: asking again and continuing the operation"
                } else {
                    "continuing the open operation"
                };
                act(rt, &mut actions, what.to_owned());
                let end = drive(op, session, rt)?;
                return Ok(Resumed {
                    before,
                    actions,
                    end: Some(end),
                });
            }
            Verdict::Finished { .. } => {
                return Ok(Resumed {
                    before,
                    actions,
                    end: None,
                });
            }
            other => bail!(
                "cannot act on the verdict {}: this cairn-agent is older than the cairn library",
                other.name()
            ),
        }
        if session.verdict() == verdict && !rt.interrupt.is_set() {
            bail!(
                "recovery made no progress on the verdict {}",
                verdict.name()
            );
        }
    }
    bail!(
        "recovery did not settle (verdict {}); run `cairn recover` to inspect",
        session.verdict().name()
    )
}

fn resolve_indeterminate(
    op: &Operation<'_>,
    session: &Session,
    rt: &mut Runtime,
    call: &PendingCall,
    actions: &mut Vec<String>,
) -> Result<()> {
    let args = find_call(session, &call.call_id).map_or(Value::Null, |(_, a)| a);
    let tool = rt.tools.get(&call.tool).map(Arc::clone);
    let summary = tool
        .as_ref()
        .map_or_else(|| call.tool.clone(), |t| t.summary(&args));
    let choice = match (call.effect, &tool) {
        (_, None) => UnknownChoice::Mark,
        (EffectClass::ReadOnly | EffectClass::Idempotent, Some(_)) => UnknownChoice::Rerun,
        (EffectClass::SideEffect, Some(_)) => match rt.config.on_unknown {
            OnUnknown::Ask => rt
                .prompter
                .unknown_outcome(&summary)
                .unwrap_or(UnknownChoice::Mark),
            OnUnknown::Mark => UnknownChoice::Mark,
            OnUnknown::Rerun => UnknownChoice::Rerun,
            OnUnknown::Fail => bail!(
                "`{summary}` (call {}) may or may not have run, and --on-unknown fail stops here; the session is unchanged. Resume interactively, or with --on-unknown mark|rerun.",
                call.call_id
            ),
        },
    };
    match (choice, tool) {
        (UnknownChoice::Rerun, Some(tool)) => {
            let ticket = if call.effect == EffectClass::SideEffect {
                let by = if rt.config.on_unknown == OnUnknown::Rerun {
                    "cairn-agent --on-unknown rerun"
                } else {
                    "person"
                };
                act(
                    rt,
                    actions,
                    format!(
                        "`{summary}` may or may not have run: re-running it, as decided ({by})"
                    ),
                );
                op.rerun_side_effect(call, by)?
            } else {
                act(
                    rt,
                    actions,
                    format!(
                        "`{summary}` may or may not have run; it is {}: re-running it with its idempotency key {}",
                        effect_name(call.effect),
                        call.key
                    ),
                );
                op.rerun(call)?
            };
            execute(op, session, rt, ticket, &tool, &args)?;
        }
        (UnknownChoice::Rerun | UnknownChoice::Mark, _) => {
            op.record_unknown(call)?;
            act(
                rt,
                actions,
                format!(
                    "`{summary}` may or may not have run: recorded its outcome as TOOL_OUTCOME_UNKNOWN (not re-run)"
                ),
            );
        }
        (UnknownChoice::Tell(what), _) => {
            op.provide_outcome(
                call,
                ToolOutput::text(format!("The agent stopped before this call's result was recorded. The person reports what happened: {what}")),
            )?;
            act(
                rt,
                actions,
                format!("`{summary}`: recorded what the person said happened"),
            );
        }
    }
    Ok(())
}

fn effect_name(e: EffectClass) -> &'static str {
    match e {
        EffectClass::ReadOnly => "read-only",
        EffectClass::Idempotent => "idempotent",
        EffectClass::SideEffect => "a side effect",
    }
}

fn reask(
    op: &Operation<'_>,
    session: &Session,
    rt: &mut Runtime,
    call_id: &str,
    tool_name: &str,
    actions: &mut Vec<String>,
) -> Result<Flow> {
    let args = find_call(session, call_id).map_or(Value::Null, |(_, a)| a);
    let tool = match rt.tools.check(tool_name, &args) {
        Ok(t) => Arc::clone(t),
        Err(why) => {
            op.resolve_approval(call_id, false, Some("cairn-agent"))?;
            deny(op, rt, call_id, tool_name, &why)?;
            return Ok(Flow::Continue);
        }
    };
    let summary = tool.summary(&args);
    act(
        rt,
        actions,
        format!("asking again for approval of `{summary}` (the earlier prompt was interrupted)"),
    );
    let answer = if rt.config.auto_approve {
        Approval::Yes
    } else {
        rt.prompter.approve(&summary)
    };
    match answer {
        Approval::Yes | Approval::Always => {
            let by = if rt.config.auto_approve {
                "cairn-agent --yes"
            } else {
                "person"
            };
            if answer == Approval::Always {
                rt.config.auto_approve = true;
            }
            op.resolve_approval(call_id, true, Some(by))?;
            let ticket = op.dispatch_tool(call_id, tool.effect())?;
            execute(op, session, rt, ticket, &tool, &args)
        }
        Approval::No => {
            op.resolve_approval(call_id, false, Some("person"))?;
            deny(
                op,
                rt,
                call_id,
                tool_name,
                "The person denied this call; it was not run.",
            )?;
            Ok(Flow::Continue)
        }
        Approval::Interrupted => {
            op.resolve_approval(call_id, false, Some("person"))?;
            deny(
                op,
                rt,
                call_id,
                tool_name,
                "Not run: the person interrupted the agent (Ctrl-C) at the approval prompt.",
            )?;
            rt.interrupt.trigger();
            Ok(Flow::Interrupted)
        }
        Approval::NoOneToAsk => {
            op.resolve_approval(call_id, false, Some("cairn-agent: no one to ask"))?;
            deny(
                op,
                rt,
                call_id,
                tool_name,
                "Not run: this tool needs the person's approval and no one could be asked (resume with --yes to allow it).",
            )?;
            Ok(Flow::Continue)
        }
    }
}
