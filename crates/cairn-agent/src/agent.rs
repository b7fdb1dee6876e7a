//! The agent loop. It drives only the operation API — it never writes
//! operation records around it — in this order, for each step:
//!
//! 1. compact the context if the view passed its budget ([`crate::compaction`]);
//! 2. `model_attempt` (the reply's entry id is preallocated), stream the
//!    reply, `record_assistant` (with usage), `settle_usage`; transient
//!    errors are retried with backoff, each retry a new attempt;
//! 3. for each tool call: validate the arguments against the tool's schema
//!    (invalid: `deny`, never dispatched); for a `SideEffect` tool ask the
//!    person (`request_approval` / `resolve_approval`) unless `--yes`;
//!    `dispatch_tool` (T1, fsynced before it returns); run the tool with the
//!    ticket's idempotency key; `record_result` (T2);
//! 4. repeat until a reply has no tool calls or the step limit; `finish`.
//!
//! Ctrl-C while the model streams records the partial reply with stop
//! reason `interrupted`; Ctrl-C during a tool stops it and records an error
//! result saying so, and the calls after it are answered as not run.
//! Either way the operation finishes `aborted`. SIGTERM and SIGHUP interrupt
//! the same way, and the caller then exits ([`crate::interrupt`]).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result};
use cairn::view::ViewBuilder;
use cairn::{Message, Operation, Outcome, Role, Session, Store, ToolTicket};
use serde_json::Value;

use crate::compaction;
use crate::observer::Event;
use crate::prompt::Approval;
use crate::provider::{ChatRequest, Purpose};
use crate::recovery::{self, Next};
use crate::runtime::{Backoff, backoff};
use crate::snapshot;
use crate::stream::{Streamed, stream_traced};
use crate::tools::{Tool, ToolCall};

pub use crate::runtime::{
    AfterToolEffect, AgentConfig, DEFAULT_SYSTEM_PROMPT, OnRunning, OnUnknown, Runtime,
};

/// What resuming did.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// The verdict found.
    pub before: cairn::Verdict,
    /// What was done, in words.
    pub actions: Vec<String>,
    /// How the resumed operation ended, when it was continued.
    pub end: Option<TurnEnd>,
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnEnd {
    /// The operation.
    pub op: String,
    /// Its outcome.
    pub outcome: Outcome,
    /// The error, if any.
    pub error: Option<String>,
}

/// Whether the loop goes on after a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Interrupted,
}

enum Step {
    Reply(Message),
    Interrupted,
    Failed(String),
}

/// An agent: a store, the session it works in, and its runtime.
pub struct Agent {
    store: Store,
    session: Session,
    rt: Runtime,
}

impl Agent {
    /// An agent on `session` (a writer handle). Enables session memory when configured.
    ///
    /// # Errors
    ///
    /// When the session's branch cannot be read for memory.
    pub fn new(store: Store, session: Session, rt: Runtime) -> Result<Agent> {
        if rt.config.memory {
            session
                .enable_memory(cairn::memory::MemoryConfig::default())
                .context("reading the branch for session memory")?;
        }
        Ok(Agent { store, session, rt })
    }

    /// The session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The runtime.
    pub fn runtime(&mut self) -> &mut Runtime {
        &mut self.rt
    }

    /// Works in another session from now on (after a fork).
    ///
    /// # Errors
    ///
    /// As [`Agent::new`].
    pub fn switch_session(&mut self, session: Session) -> Result<()> {
        if self.rt.config.memory {
            session.enable_memory(cairn::memory::MemoryConfig::default())?;
        }
        self.session = session;
        Ok(())
    }

    /// Delivers the input queued and never delivered ([`crate::resumed::undelivered`]), in
    /// order, each as a request of its own — after a crash, the input a host
    /// queued while the operation ran is not lost. Call it once the session's
    /// open operation is resumed (an operation still open is resumed first).
    ///
    /// # Errors
    ///
    /// As [`Agent::prompt`].
    pub fn deliver_queued(&mut self) -> Result<Vec<TurnEnd>> {
        let mut ends = Vec::new();
        for text in crate::resumed::undelivered(self.session())? {
            self.runtime().observer.event(&Event::Recovery(&format!(
                "delivering input queued before the process stopped: {}",
                cairn_view::term::excerpt(&text, 60)
            )));
            ends.push(self.prompt(&text)?);
        }
        Ok(ends)
    }

    /// Acts on the recovery verdict ([`recovery::resolve`]), then carries
    /// on the open operation when there is one (retrying an interrupted
    /// model call).
    ///
    /// # Errors
    ///
    /// Append errors; `--on-unknown fail` with a side effect of unknown
    /// outcome (the session is left unchanged); a verdict recovery could
    /// not settle.
    pub fn resume(&mut self) -> Result<Resumed> {
        let recovered = recovery::resolve(&self.session, &mut self.rt)?;
        let mut actions = recovered.actions;
        let end = match recovered.next {
            Next::Continue {
                provider_interrupted,
            } => {
                let what = if provider_interrupted {
                    "the model call was interrupted: asking again and continuing the operation"
                } else {
                    "continuing the open operation"
                };
                self.rt.observer.event(&Event::Recovery(what));
                actions.push(what.to_owned());
                match self.session.resume_operation() {
                    Some(op) => Some(drive(op, &self.session, &mut self.rt)?),
                    None => None,
                }
            }
            Next::Nothing => None,
        };
        Ok(Resumed {
            before: recovered.before,
            actions,
            end,
        })
    }

    /// Runs one operation for the person's `text` (resuming first if an
    /// operation is still open or a tool call on the branch has no result).
    ///
    /// # Errors
    ///
    /// Append errors (provider errors end the operation as failed instead).
    pub fn prompt(&mut self, text: &str) -> Result<TurnEnd> {
        // An open operation, or calls without a result on the branch (from
        // any writer): recover first, so no provider receives them.
        let pending = matches!(
            self.session.verdict()?,
            cairn::Verdict::IndeterminateTool { .. }
                | cairn::Verdict::AwaitingApproval { .. }
                | cairn::Verdict::ToolsNotStarted { .. }
        );
        if pending || self.session.resume_operation().is_some() {
            self.resume()?;
        }
        self.rt.interrupt.clear();
        let op = self
            .session
            .start_operation(Message::text(Role::User, text))?;
        let input = self.session.leaf();
        self.rt.observer.event(&Event::OpStarted {
            op: op.id(),
            input: input.as_ref(),
        });
        drive(op, &self.session, &mut self.rt)
    }

    /// Compacts the context now, if there is anything before the recent part.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn compact(&mut self) -> Result<Option<cairn::EntryId>> {
        compaction::compact(&self.session, &mut self.rt)
    }
}

/// Runs the loop of an open operation to its end.
fn drive(op: Operation<'_>, session: &Session, rt: &mut Runtime) -> Result<TurnEnd> {
    let mut steps = 0u32;
    loop {
        if rt.interrupt.is_set() {
            return finish(
                op,
                rt,
                Outcome::Aborted,
                Some(format!("interrupted by {}", rt.interrupt.cause())),
            );
        }
        if conversation_done(session)? {
            return finish(op, rt, Outcome::Completed, None);
        }
        if steps >= rt.config.max_steps {
            return finish(
                op,
                rt,
                Outcome::MaxSteps,
                Some(format!(
                    "stopped after {steps} model calls (the step limit)"
                )),
            );
        }
        steps += 1;
        compaction::maybe_compact(session, rt)?;
        match model_step(&op, session, rt)? {
            Step::Reply(message) => {
                let calls: Vec<(String, String, Value)> = message
                    .tool_calls()
                    .map(|(id, name, args)| (id.to_owned(), name.to_owned(), args.clone()))
                    .collect();
                if calls.is_empty() {
                    return finish(op, rt, Outcome::Completed, None);
                }
                if run_calls(&op, session, rt, &calls)? == Flow::Interrupted {
                    return finish(
                        op,
                        rt,
                        Outcome::Aborted,
                        Some(format!(
                            "interrupted by {} while a tool ran",
                            rt.interrupt.cause()
                        )),
                    );
                }
            }
            Step::Interrupted => {
                return finish(
                    op,
                    rt,
                    Outcome::Aborted,
                    Some(format!(
                        "interrupted by {} while the model answered",
                        rt.interrupt.cause()
                    )),
                );
            }
            Step::Failed(error) => return finish(op, rt, Outcome::Failed, Some(error)),
        }
    }
}

/// Whether the branch ends with a reply that asks for nothing more.
fn conversation_done(session: &Session) -> Result<bool, cairn::ReadError> {
    let ctx = session.context();
    let Some(last) = ctx.messages().last() else {
        return Ok(false);
    };
    let m = last.message()?;
    Ok(m.role == Role::Assistant && m.tool_calls().next().is_none())
}

fn finish(
    op: Operation<'_>,
    rt: &mut Runtime,
    outcome: Outcome,
    error: Option<String>,
) -> Result<TurnEnd> {
    let id = op.id().to_owned();
    op.finish(outcome, error.clone())?;
    rt.observer.event(&Event::Finished {
        op: &id,
        outcome,
        error: error.as_deref(),
    });
    if outcome == Outcome::Aborted {
        rt.interrupt.clear();
    }
    Ok(TurnEnd {
        op: id,
        outcome,
        error,
    })
}

/// The messages a provider receives: system prompt, memory, context.
///
/// # Errors
///
/// The context holds a tool call without a result (recover first).
pub(crate) fn view_messages(session: &Session, rt: &Runtime) -> Result<Vec<Message>> {
    let ctx = session.context();
    let memory = if rt.config.memory {
        session.memory()
    } else {
        None
    };
    Ok(ViewBuilder::new(rt.config.system_prompt.clone())
        .build(memory.as_ref(), &ctx)?
        .messages
        .into_iter()
        .map(|(_, m)| m)
        .collect())
}

fn model_step(op: &Operation<'_>, session: &Session, rt: &mut Runtime) -> Result<Step> {
    let messages = view_messages(session, rt)?;
    let tools = rt.tools.specs();
    let mut retry = 0u32;
    loop {
        let ticket = op.model_attempt(Some(rt.provider.name()), Some(rt.provider.model()))?;
        rt.observer.event(&Event::ModelRequest {
            attempt: ticket.attempt(),
        });
        let request = ChatRequest {
            messages: messages.clone(),
            tools: tools.clone(),
            purpose: Purpose::Turn,
            reply_id: Some(ticket.entry().to_string()),
        };
        let started = Instant::now();
        let observer = &mut rt.observer;
        let (streamed, exchange) = stream_traced(
            &rt.provider,
            request,
            &rt.interrupt,
            &mut |ev| observer.event(&Event::Delta(ev)),
            rt.config.trace.is_some(),
        );
        let traced = crate::trace::Request {
            op: Some(op.id()),
            purpose: Purpose::Turn,
            attempt: Some(ticket.attempt()),
            entry: Some(ticket.entry()),
            retry,
        };
        crate::trace::record_streamed(
            session,
            rt.config.trace,
            &rt.env.blob_dir,
            traced,
            &streamed,
            exchange.as_ref(),
        )?;
        match streamed {
            Streamed::Done(Ok(reply)) => {
                let latency = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let usage = reply.usage.clone().unwrap_or_default();
                let mut reply = reply;
                unique_call_ids(&mut reply, session, ticket.entry())?;
                let message = reply.into_message(rt.provider.model());
                let entry = ticket.entry().clone();
                op.record_assistant(ticket, message.clone())?;
                op.settle_usage(&entry, usage, Some(latency))?;
                rt.observer.event(&Event::Assistant {
                    entry: &entry,
                    message: &message,
                });
                return Ok(Step::Reply(message));
            }
            Streamed::Done(Err(e)) => match backoff(rt, &mut retry, &e) {
                Backoff::Retry => {}
                Backoff::Interrupted => return Ok(Step::Interrupted),
                Backoff::GiveUp => {
                    return Ok(Step::Failed(format!("model request failed: {e}")));
                }
            },
            Streamed::Interrupted { text, thinking } => {
                let mut content = Vec::new();
                if !thinking.is_empty() {
                    content.push(cairn::Block::Thinking {
                        thinking,
                        signature: None,
                    });
                }
                if !text.is_empty() {
                    content.push(cairn::Block::Text { text });
                }
                let message = Message {
                    role: Role::Assistant,
                    content,
                    usage: None,
                    model: Some(rt.provider.model().to_owned()),
                    stop_reason: Some("interrupted".into()),
                };
                let entry = ticket.entry().clone();
                op.record_assistant(ticket, message.clone())?;
                rt.observer.event(&Event::Assistant {
                    entry: &entry,
                    message: &message,
                });
                return Ok(Step::Interrupted);
            }
        }
    }
}

/// Gives every call of `reply` an id unused in the context: servers that
/// number calls per response (`call_0`, …) would otherwise repeat ids, and
/// cairn requires them unique on the branch. Results are sent back under
/// the recorded ids, so the rewrite is invisible to the model.
fn unique_call_ids(
    reply: &mut crate::provider::Reply,
    session: &Session,
    entry: &cairn::EntryId,
) -> Result<(), cairn::ReadError> {
    let ctx = session.context();
    let mut used: std::collections::HashSet<String> = std::collections::HashSet::new();
    for m in ctx.messages() {
        used.extend(m.message()?.tool_calls().map(|(id, _, _)| id.to_owned()));
    }
    for (i, c) in reply.tool_calls.iter_mut().enumerate() {
        if c.id.trim().is_empty() || used.contains(&c.id) {
            c.id = format!("call-{entry}-{}", i + 1);
        }
        used.insert(c.id.clone());
    }
    Ok(())
}

/// Handles the tool calls of one reply, in order.
pub(crate) fn run_calls(
    op: &Operation<'_>,
    session: &Session,
    rt: &mut Runtime,
    calls: &[(String, String, Value)],
) -> Result<Flow> {
    for (i, (id, name, args)) in calls.iter().enumerate() {
        // Calls not yet answered when an interrupt stops the loop.
        let rest = if rt.interrupt.is_set() {
            &calls[i..]
        } else if run_call(op, session, rt, id, name, args)? == Flow::Interrupted {
            &calls[i + 1..]
        } else {
            continue;
        };
        let reason = format!(
            "Not run: the agent was interrupted by {} before this call started.",
            rt.interrupt.cause()
        );
        for (call_id, tool, _) in rest {
            deny(op, rt, call_id, tool, &reason)?;
        }
        return Ok(Flow::Interrupted);
    }
    Ok(Flow::Continue)
}

/// Answers a call without running it.
pub(crate) fn deny(
    op: &Operation<'_>,
    rt: &mut Runtime,
    call_id: &str,
    tool: &str,
    reason: &str,
) -> Result<()> {
    let appended = op.deny(call_id, reason)?;
    rt.observer.event(&Event::Denied {
        call_id,
        tool,
        reason,
        entry: appended.id.as_ref(),
    });
    Ok(())
}

/// Records that `by` refused a call awaiting approval, and answers it as not run.
pub(crate) fn refuse(
    op: &Operation<'_>,
    rt: &mut Runtime,
    call_id: &str,
    tool: &str,
    by: &str,
    reason: &str,
) -> Result<()> {
    op.resolve_approval(call_id, false, Some(by))?;
    deny(op, rt, call_id, tool, reason)
}

/// Validates, asks approval if needed, dispatches (T1), runs and records (T2) one call.
pub(crate) fn run_call(
    op: &Operation<'_>,
    session: &Session,
    rt: &mut Runtime,
    call_id: &str,
    name: &str,
    args: &Value,
) -> Result<Flow> {
    let tool = match rt.tools.check(name, args) {
        Ok(t) => Arc::clone(t),
        Err(why) => {
            rt.observer.event(&Event::ToolCall {
                call_id,
                summary: &format!(
                    "{name}: {}",
                    cairn_view::term::excerpt(&args.to_string(), 100)
                ),
            });
            deny(op, rt, call_id, name, &why)?;
            return Ok(Flow::Continue);
        }
    };
    let summary = tool.summary(args);
    rt.observer.event(&Event::ToolCall {
        call_id,
        summary: &summary,
    });
    if tool.effect() == cairn::EffectClass::SideEffect && !rt.config.auto_approve {
        op.request_approval(call_id, name)?;
        // Waiting for the person: a termination signal exits at once (recovery
        // asks again), there being nothing running to stop.
        rt.interrupt.set_idle(true);
        let approval = rt.prompter.approve(&summary);
        rt.interrupt.set_idle(false);
        match approval {
            Approval::Yes => op.resolve_approval(call_id, true, Some("person"))?,
            Approval::Always => {
                rt.config.auto_approve = true;
                op.resolve_approval(call_id, true, Some("person"))?;
            }
            Approval::No => {
                let why = cairn::DENIED_BY_PERSON;
                refuse(op, rt, call_id, name, "person", why)?;
                return Ok(Flow::Continue);
            }
            Approval::Interrupted => {
                let why =
                    "Not run: the person interrupted the agent (Ctrl-C) at the approval prompt.";
                refuse(op, rt, call_id, name, "person", why)?;
                rt.interrupt.trigger();
                return Ok(Flow::Interrupted);
            }
            Approval::NoOneToAsk => {
                let why = "Not run: this tool needs the person's approval and no one could be asked (run with --yes to allow it).";
                refuse(op, rt, call_id, name, "cairn-agent: no one to ask", why)?;
                return Ok(Flow::Continue);
            }
        }
    }
    if let Some(touches) = tool.touches(args, &rt.env)
        && let Err(why) = snapshot::before(rt, session, call_id, &touches)
    {
        deny(op, rt, call_id, name, &why)?;
        return Ok(Flow::Continue);
    }
    let ticket = op.dispatch_tool(call_id, tool.effect())?;
    execute(op, session, rt, ticket, &tool, args)
}

/// Runs a dispatched call with its ticket's key and records the result (T2).
pub(crate) fn execute(
    op: &Operation<'_>,
    session: &Session,
    rt: &mut Runtime,
    ticket: ToolTicket,
    tool: &Arc<dyn Tool>,
    args: &Value,
) -> Result<Flow> {
    let call_id = ticket.call_id().to_owned();
    let name = ticket.tool().to_owned();
    rt.observer.event(&Event::Dispatched {
        call_id: &call_id,
        tool: &name,
        key: ticket.key(),
    });
    let output = {
        let call = ToolCall {
            call_id: &call_id,
            arguments: args,
            key: ticket.key(),
            session,
            env: &rt.env,
            interrupt: &rt.interrupt,
        };
        tool.run(&call)
    };
    if let Some(hook) = &rt.after_tool_effect {
        hook(&name, &call_id);
    }
    if let Some(touches) = tool.touches(args, &rt.env) {
        // Before the result (T2), whose sync makes the record durable.
        let at = ticket.result_entry().clone();
        snapshot::after(rt, session, at, &call_id, &name, &touches);
    }
    let appended = op.record_result(ticket, output.clone())?;
    if let Some(entry) = &appended.id {
        rt.observer.event(&Event::ToolResult {
            call_id: &call_id,
            tool: &name,
            entry,
            output: &output,
        });
    }
    Ok(if rt.interrupt.is_set() {
        Flow::Interrupted
    } else {
        Flow::Continue
    })
}
