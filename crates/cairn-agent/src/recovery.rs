//! Resume: the agent's [`Resolver`] for cairn's one recovery loop
//! ([`cairn::recover_with`]). [`resolve`] settles the verdict and says what
//! comes next ([`Next`]); the loop ([`crate::agent::Agent::resume`]) then
//! carries on the open operation — recovery never calls back into it.
//!
//! | verdict | what the agent decides |
//! |---|---|
//! | `IndeterminateTool` | first, the tool processes recorded for each call are checked ([`crate::running`]): one that still runs is shown as *running* and waited for or stopped (`--on-running`), and one that ran to its end gives the call its own output as the result; then `ReadOnly`/`Idempotent` calls are re-run with their recorded idempotency key; for `SideEffect` calls the person decides (`--on-unknown`): re-run, mark `TOOL_OUTCOME_UNKNOWN`, or tell what happened (never a re-run while a process of the call cannot be checked) |
//! | `AwaitingApproval` | the approval is asked again (the old prompt died with the process) |
//! | `ToolsNotStarted` | the calls run (validation and approval as usual); calls a person denied are answered as denied; after the operation ended, or with no operation, they are closed `TOOL_NOT_STARTED` |
//! | `ProviderInterrupted` | [`Next::Continue`]: the model call is retried, and the loop goes on |
//! | `Ready` with an open operation | [`Next::Continue`]: the loop goes on |
//! | `Finished`, or no operation | [`Next::Nothing`] |
//!
//! [`resolve`] runs in this order: the verdict is shown, then the recorded
//! tool processes of its calls (so a person sees *running* before anything
//! is decided), then the core's loop drives the agent's resolver, then the
//! verdict after it decides [`Next`].

use std::sync::Arc;

use anyhow::{Result, bail};
use cairn::DENIED_BY_PERSON;
use cairn::{
    Action, ActionKind, Decision, EffectClass, Pending, RecoveryError, Resolver, Session,
    ToolOutput, ToolRunner, Verdict,
};
use serde_json::Value;

use crate::observer::Event;
use crate::prompt::{Approval, UnknownChoice};
use crate::running::{self, Fencing};
use crate::runtime::{OnUnknown, Runtime};
use crate::snapshot;
use crate::tools::{Tool, ToolCall};

/// The result text of a call not run because the person interrupted the agent.
const INTERRUPTED: &str =
    "Not run: the person interrupted the agent (Ctrl-C) before this call started.";

/// What the loop does once recovery settled the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Carry on the open operation; `provider_interrupted`: its last model
    /// call never got its reply, so the loop asks again.
    Continue {
        /// The last model call was interrupted.
        provider_interrupted: bool,
    },
    /// Nothing is open: take new input.
    Nothing,
}

/// What recovery did, and what comes next.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    /// The verdict found.
    pub before: Verdict,
    /// What was done, in words.
    pub actions: Vec<String>,
    /// What the loop does now.
    pub next: Next,
}

/// Resolves the session's verdict through cairn's recovery loop, after
/// settling the tool processes of calls that may have run, and says what
/// the loop does next.
///
/// # Errors
///
/// Append errors; with [`OnUnknown::Fail`], a side effect of unknown
/// outcome (the session is left unchanged); a verdict recovery could not
/// settle.
pub fn resolve(session: &Session, rt: &mut Runtime) -> Result<Recovered> {
    crate::resumed::record_crash(session, rt)?;
    let before = session.verdict()?;
    if !matches!(
        before,
        Verdict::Ready { op: None } | Verdict::Finished { .. }
    ) {
        rt.observer.event(&Event::Verdict(&before));
    }
    let mut actions = Vec::new();
    for found in running::survey(session, &before) {
        let what = found.describe();
        rt.observer.event(&Event::Recovery(&what));
        actions.push(what);
    }
    let mut agent = AgentResolver {
        session,
        rt: &mut *rt,
        actions,
    };
    let report = cairn::recover_with(session, &mut agent);
    let actions = agent.actions;
    match report {
        Ok(_) => {}
        Err(RecoveryError::Stopped(why)) => bail!("{why}"),
        Err(e) => return Err(e.into()),
    }
    let after = session.verdict()?;
    let next = match (&after, session.resume_operation().is_some()) {
        (
            Verdict::IndeterminateTool { .. }
            | Verdict::AwaitingApproval { .. }
            | Verdict::ToolsNotStarted { .. },
            _,
        ) => bail!(
            "recovery did not settle (verdict {}); run `cairn recover` to inspect",
            after.name()
        ),
        (Verdict::ProviderInterrupted { .. }, true) => Next::Continue {
            provider_interrupted: true,
        },
        (Verdict::Ready { .. }, true) => Next::Continue {
            provider_interrupted: false,
        },
        _ => Next::Nothing,
    };
    Ok(Recovered {
        before,
        actions,
        next,
    })
}

/// How the agent settles tool processes: its `--on-running`, its interrupt
/// flag, its blob store and output cap.
pub fn fencing(rt: &Runtime) -> Fencing {
    Fencing {
        on_running: rt.config.on_running,
        by: format!("cairn-agent --on-running {}", rt.config.on_running.name()),
        interrupt: rt.interrupt.clone(),
        blob_dir: rt.env.blob_dir.clone(),
        output_cap: rt.env.output_cap,
    }
}

/// The agent's decisions: its tools, its prompter and its flags.
struct AgentResolver<'a> {
    session: &'a Session,
    rt: &'a mut Runtime,
    actions: Vec<String>,
}

impl AgentResolver<'_> {
    fn say(&mut self, what: String) {
        self.rt.observer.event(&Event::Recovery(&what));
        self.actions.push(what);
    }

    /// Asks the person to approve `summary` (unless `--yes`); the decision
    /// to run or deny.
    fn approve(&mut self, summary: &str) -> Decision {
        let answer = if self.rt.config.auto_approve {
            Approval::Yes
        } else {
            self.rt.prompter.approve(summary)
        };
        let by = if self.rt.config.auto_approve {
            "cairn-agent --yes"
        } else {
            "person"
        };
        match answer {
            Approval::Yes | Approval::Always => {
                if answer == Approval::Always {
                    self.rt.config.auto_approve = true;
                }
                Decision::Run {
                    approved_by: Some(by.to_owned()),
                }
            }
            Approval::No => Decision::Deny {
                by: Some("person".to_owned()),
                reason: DENIED_BY_PERSON.to_owned(),
            },
            Approval::Interrupted => {
                self.rt.interrupt.trigger();
                Decision::Deny {
                    by: Some("person".to_owned()),
                    reason: "Not run: the person interrupted the agent (Ctrl-C) at the approval prompt.".to_owned(),
                }
            }
            Approval::NoOneToAsk => Decision::Deny {
                by: Some("cairn-agent: no one to ask".to_owned()),
                reason: "Not run: this tool needs the person's approval and no one could be asked (resume with --yes to allow it).".to_owned(),
            },
        }
    }

    /// A call that may have run: its recorded processes settled first
    /// ([`running::settle`]), then decided ([`AgentResolver::unknown`]).
    fn indeterminate(&mut self, call: &cairn::ToolDispatched, arguments: &Value) -> Decision {
        let fencing = fencing(self.rt);
        let session = self.session;
        match running::settle(session, &call.call_id, &fencing, &mut |w| {
            self.say(w.to_owned())
        }) {
            Ok(settled) => running::fenced_decision(settled, || self.unknown(call, arguments)),
            Err(e) => Decision::Stop(format!(
                "the record of what became of a tool process could not be written: {}",
                cairn::with_causes(&e)
            )),
        }
    }

    /// A call of unknown outcome none of whose processes runs.
    fn unknown(&mut self, call: &cairn::ToolDispatched, arguments: &Value) -> Decision {
        let tool = self.rt.tools.get(&call.tool).map(Arc::clone);
        let summary = tool
            .as_ref()
            .map_or_else(|| call.tool.clone(), |t| t.summary(arguments));
        let choice = match (call.effect, &tool) {
            (_, None) => UnknownChoice::Mark,
            (EffectClass::ReadOnly | EffectClass::Idempotent, Some(_)) => UnknownChoice::Rerun,
            (EffectClass::SideEffect, Some(_)) => match self.rt.config.on_unknown {
                OnUnknown::Ask => self
                    .rt
                    .prompter
                    .unknown_outcome(&summary)
                    .unwrap_or(UnknownChoice::Mark),
                OnUnknown::Mark => UnknownChoice::Mark,
                OnUnknown::Rerun => UnknownChoice::Rerun,
                OnUnknown::Fail => {
                    return Decision::Stop(format!(
                        "`{summary}` (call {}) may or may not have run, and --on-unknown fail stops here; the session is unchanged. Resume interactively, or with --on-unknown mark|rerun.",
                        call.call_id
                    ));
                }
            },
        };
        match choice {
            UnknownChoice::Rerun if call.effect == EffectClass::SideEffect => {
                let by = if self.rt.config.on_unknown == OnUnknown::Rerun {
                    "cairn-agent --on-unknown rerun"
                } else {
                    "person"
                };
                self.say(format!(
                    "`{summary}` may or may not have run: re-running it, as decided ({by})"
                ));
                Decision::Rerun {
                    by: Some(by.to_owned()),
                }
            }
            UnknownChoice::Rerun => {
                self.say(format!(
                    "`{summary}` may or may not have run; it is {}: re-running it with its idempotency key {}",
                    effect_name(call.effect),
                    call.key
                ));
                Decision::Rerun { by: None }
            }
            UnknownChoice::Mark => Decision::MarkUnknown,
            UnknownChoice::Tell(what) => Decision::Outcome(ToolOutput::text(format!(
                "The agent stopped before this call's result was recorded. The person reports what happened: {what}"
            ))),
        }
    }
}

impl Resolver for AgentResolver<'_> {
    fn decide(&mut self, item: Pending<'_>, can_run: bool) -> Decision {
        match item {
            Pending::Indeterminate { call, arguments } => self.indeterminate(call, arguments),
            Pending::Approval { call, arguments } => {
                let tool = match self.rt.tools.check(&call.tool, arguments) {
                    Ok(t) => Arc::clone(t),
                    Err(why) => {
                        return Decision::Deny {
                            by: Some("cairn-agent".to_owned()),
                            reason: why,
                        };
                    }
                };
                let summary = tool.summary(arguments);
                self.say(format!(
                    "asking again for approval of `{summary}` (the earlier prompt was interrupted)"
                ));
                self.approve(&summary)
            }
            Pending::NotStarted(c) => {
                if self.rt.interrupt.is_set() {
                    return Decision::Deny {
                        by: None,
                        reason: INTERRUPTED.to_owned(),
                    };
                }
                if c.denied {
                    return Decision::Deny {
                        by: None,
                        reason: DENIED_BY_PERSON.to_owned(),
                    };
                }
                if !can_run {
                    return Decision::CloseNotStarted;
                }
                let tool = match self.rt.tools.check(&c.tool, &c.arguments) {
                    Ok(t) => Arc::clone(t),
                    Err(why) => {
                        return Decision::Deny {
                            by: None,
                            reason: why,
                        };
                    }
                };
                let summary = tool.summary(&c.arguments);
                self.say(format!(
                    "running `{summary}` ({}), which never started",
                    c.call_id
                ));
                if tool.effect() == EffectClass::SideEffect {
                    self.approve(&summary)
                } else {
                    Decision::Run { approved_by: None }
                }
            }
        }
    }

    fn runner(&mut self) -> Option<&mut dyn ToolRunner> {
        Some(self)
    }

    fn done(&mut self, action: &Action) {
        let (call_id, tool) = (action.call_id.as_str(), action.tool.as_str());
        match (&action.kind, &action.entry, &action.output) {
            (ActionKind::Reran { .. } | ActionKind::Ran, Some(entry), Some(output)) => {
                self.rt.observer.event(&Event::ToolResult {
                    call_id,
                    tool,
                    entry,
                    output,
                });
            }
            (ActionKind::Denied { reason }, entry, _) => self.rt.observer.event(&Event::Denied {
                call_id,
                tool,
                reason,
                entry: entry.as_ref(),
            }),
            _ => {}
        }
        self.say(action.to_string());
    }
}

impl ToolRunner for AgentResolver<'_> {
    fn effect(&self, tool: &str) -> EffectClass {
        self.rt
            .tools
            .get(tool)
            .map_or(EffectClass::SideEffect, |t| t.effect())
    }

    fn run(&mut self, call_id: &str, name: &str, arguments: &Value, key: &str) -> ToolOutput {
        let Some(tool) = self.rt.tools.get(name).map(Arc::clone) else {
            return ToolOutput::error(format!("Not run: there is no tool named {name:?}."));
        };
        self.rt.observer.event(&Event::Dispatched {
            call_id,
            tool: name,
            key,
        });
        let touches = tool.touches(arguments, &self.rt.env);
        if let Some(t) = &touches {
            // Its T1 is written already: the pre-image is synced here, so
            // it is durable before the tool starts.
            let before = snapshot::before(self.rt, self.session, call_id, t).and_then(|()| {
                self.session.sync().map_err(|e| {
                    format!(
                        "Not run: the workspace snapshot before it could not be made durable ({}).",
                        cairn::with_causes(&e)
                    )
                })
            });
            if let Err(why) = before {
                return ToolOutput::error(why);
            }
        }
        let output = run_tool(&tool, self.session, self.rt, call_id, arguments, key);
        if let Some(hook) = &self.rt.after_tool_effect {
            hook(name, call_id);
        }
        if let Some(t) = &touches {
            match dispatched_result_entry(self.session, call_id) {
                Some(at) => snapshot::after(self.rt, self.session, at, call_id, name, t),
                None => self.rt.observer.event(&Event::Notice(&format!(
                    "no workspace snapshot after {name}: its dispatch record was not found (the next snapshot sees its changes)"
                ))),
            }
        }
        output
    }
}

fn run_tool(
    tool: &Arc<dyn Tool>,
    session: &Session,
    rt: &Runtime,
    call_id: &str,
    arguments: &Value,
    key: &str,
) -> ToolOutput {
    tool.run(&ToolCall {
        call_id,
        arguments,
        key,
        session,
        env: &rt.env,
        interrupt: &rt.interrupt,
    })
}

/// The result entry the last dispatch of `call_id` preallocated (the core
/// hands a runner the key, not the ticket).
fn dispatched_result_entry(session: &Session, call_id: &str) -> Option<cairn::EntryId> {
    session.op_records().into_iter().rev().find_map(|(seq, _)| {
        match session.record(seq).ok()?.body {
            cairn::Body::Op(cairn::OpRecord::ToolDispatched(d)) if d.call_id == call_id => {
                Some(d.result_entry)
            }
            _ => None,
        }
    })
}

fn effect_name(e: EffectClass) -> &'static str {
    match e {
        EffectClass::ReadOnly => "read-only",
        EffectClass::Idempotent => "idempotent",
        EffectClass::SideEffect => "a side effect",
    }
}
