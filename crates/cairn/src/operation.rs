//! The API an agent loop drives, so that it cannot get the order wrong: an
//! [`Operation`] announces model attempts (getting the id their assistant
//! entry must use), dispatches tools (T1, durable before the tool may start)
//! and records their results (T2) with the ticket dispatch returned. The
//! recovery loop that resolves a [`Verdict`] is in `recovery.rs`.

use serde_json::Value;

use crate::commit::Durability;
use crate::error::{AppendError, Invalid, ReadError};
use crate::id::EntryId;
use crate::journal::{self, NotStarted, Status, Verdict};
use crate::record::{
    ApprovalRequested, ApprovalResolved, Block, EffectClass, EntryBody, InputQueued, Message,
    ModelAttempted, OpFinished, OpRecord, OpStarted, Outcome, Role, ToolDispatched, Usage,
    UsageSettled,
};
use crate::session::{Appended, NewEntry, Parent, Session};

/// The id the assistant entry of a model attempt must use. Not `Clone`: one
/// attempt, one reply.
#[derive(Debug, PartialEq, Eq)]
pub struct ModelTicket {
    op: String,
    attempt: u32,
    entry: EntryId,
}

impl ModelTicket {
    /// The preallocated id of the assistant entry.
    pub fn entry(&self) -> &EntryId {
        &self.entry
    }
    /// The attempt number (from 1).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// Permission to run one tool call, returned once its T1 record is durable.
/// Not `Clone`: one dispatch, one result.
#[derive(Debug, PartialEq, Eq)]
pub struct ToolTicket {
    op: String,
    call_id: String,
    tool: String,
    key: String,
    effect: EffectClass,
    result_entry: EntryId,
}

impl ToolTicket {
    /// The call.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }
    /// The tool.
    pub fn tool(&self) -> &str {
        &self.tool
    }
    /// The idempotency key to pass downstream.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The tool's effect class.
    pub fn effect(&self) -> EffectClass {
        self.effect
    }
    /// The id the result entry will use.
    pub fn result_entry(&self) -> &EntryId {
        &self.result_entry
    }
}

/// What a tool returned.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Text, image or blob blocks.
    pub content: Vec<Block>,
    /// Whether the tool failed.
    pub is_error: bool,
    /// A machine-readable code, if any.
    pub code: Option<String>,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: vec![Block::Text { text: text.into() }],
            is_error: false,
            code: None,
        }
    }
    /// A failed text result.
    pub fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: vec![Block::Text { text: text.into() }],
            is_error: true,
            code: None,
        }
    }
}

/// An open operation of a session.
#[derive(Debug)]
pub struct Operation<'s> {
    session: &'s Session,
    id: String,
}

impl Session {
    /// Starts an operation for `input` (a user message, appended at the leaf
    /// first), recording `op_started`.
    ///
    /// # Errors
    ///
    /// Append errors; [`Invalid::OperationOpen`] if an operation is already
    /// open, [`Invalid::DispatchedWithoutResult`] if a call the last operation
    /// dispatched has no result (recover first).
    pub fn start_operation(&self, input: Message) -> Result<Operation<'_>, AppendError> {
        if let Some(open) = self.open_operation_id() {
            return Err(Invalid::OperationOpen(open).into());
        }
        if let Verdict::IndeterminateTool { op, calls } = self.verdict()? {
            let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
            return Err(Invalid::DispatchedWithoutResult {
                op,
                calls: ids.join(", "),
            }
            .into());
        }
        let entry = self.append(EntryBody::Message(input))?;
        let op = format!("op-{}", entry.seq + 1);
        self.append_op(OpRecord::OpStarted(OpStarted {
            op: op.clone(),
            input: entry.id,
        }))?;
        Ok(Operation {
            session: self,
            id: op,
        })
    }

    /// The open operation, to continue it (after a restart: resolve the
    /// verdict first).
    pub fn resume_operation(&self) -> Option<Operation<'_>> {
        self.open_operation_id()
            .map(|id| Operation { session: self, id })
    }

    /// The recovery verdict of the branch: a pure function of the log (the
    /// branch's unanswered tool calls, and the last operation's records).
    ///
    /// # Errors
    ///
    /// [`ReadError`] when a message of the context cannot be read (it is
    /// read here for the first time, and the file changed underneath).
    pub fn verdict(&self) -> Result<Verdict, ReadError> {
        let ctx = self.context();
        self.with_fold(|f| f.verdict_on(&ctx))
    }

    /// The log-derived phase of the last operation (see [`Session::status`]).
    pub fn phase(&self) -> journal::OpPhase {
        self.with_fold(journal::OpFold::phase)
    }

    /// The session's status as this handle sees it: a writer handle is the
    /// live writer, so an open operation is `Running`; a read-only handle
    /// cannot see the lock and reports `Interrupted` — use
    /// [`crate::Store::status`] for the truth about other processes.
    pub fn status(&self) -> Status {
        self.phase().status(self.is_writer())
    }
}

impl<'s> Operation<'s> {
    /// The operation's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The session.
    pub fn session(&self) -> &'s Session {
        self.session
    }

    /// Announces a provider request (`model_attempted`); the reply must be
    /// recorded with [`Operation::record_assistant`] and this ticket.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn model_attempt(
        &self,
        provider: Option<&str>,
        model: Option<&str>,
    ) -> Result<ModelTicket, AppendError> {
        let attempt = self
            .session
            .with_fold(|f| f.open().map_or(0, |p| p.attempts.len() as u32))
            + 1;
        let entry = self.session.fresh_entry_id();
        self.session
            .append_op(OpRecord::ModelAttempted(ModelAttempted {
                op: self.id.clone(),
                attempt,
                entry: entry.clone(),
                provider: provider.map(str::to_owned),
                model: model.map(str::to_owned),
            }))?;
        Ok(ModelTicket {
            op: self.id.clone(),
            attempt,
            entry,
        })
    }

    /// Records the assistant's reply under the attempt's preallocated id.
    ///
    /// # Errors
    ///
    /// [`Invalid::NotAnAssistantReply`] if the message is not an assistant
    /// message, [`Invalid::WrongOperation`] if the ticket is another
    /// operation's; append errors.
    pub fn record_assistant(
        &self,
        ticket: ModelTicket,
        message: Message,
    ) -> Result<Appended, AppendError> {
        self.own(&ticket.op)?;
        if message.role != Role::Assistant {
            return Err(Invalid::NotAnAssistantReply.into());
        }
        self.session.append_entry(NewEntry {
            id: Some(ticket.entry),
            parent: Parent::Leaf,
            body: EntryBody::Message(message),
        })
    }

    /// Records the usage of a completed model response.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn settle_usage(
        &self,
        entry: &EntryId,
        usage: Usage,
        latency_ms: Option<u64>,
    ) -> Result<(), AppendError> {
        let r = UsageSettled {
            op: self.id.clone(),
            entry: entry.clone(),
            usage,
            latency_ms,
        };
        self.session.append_op(OpRecord::UsageSettled(r)).map(drop)
    }

    /// Records that a human is being asked to approve a tool call.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn request_approval(&self, call_id: &str, tool: &str) -> Result<(), AppendError> {
        let r = ApprovalRequested {
            op: self.id.clone(),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
        };
        self.session
            .append_op(OpRecord::ApprovalRequested(r))
            .map(drop)
    }

    /// Records the human's answer. A denied call still needs a result: see
    /// [`Operation::deny`].
    ///
    /// # Errors
    ///
    /// [`Invalid::NoApprovalRequested`] if no approval was requested for the
    /// call; append errors.
    pub fn resolve_approval(
        &self,
        call_id: &str,
        approved: bool,
        by: Option<&str>,
    ) -> Result<(), AppendError> {
        let r = ApprovalResolved {
            op: self.id.clone(),
            call_id: call_id.to_owned(),
            approved,
            by: by.map(str::to_owned),
        };
        self.session
            .append_op(OpRecord::ApprovalResolved(r))
            .map(drop)
    }

    /// Dispatches a tool call of the current branch (T1): returns only once
    /// `tool_dispatched` is durable (fsynced), whatever the session's
    /// durability. Only then may the tool start.
    ///
    /// # Errors
    ///
    /// [`Invalid::CallNotOnBranch`] if the call is not an unanswered call on
    /// the branch, [`Invalid::AlreadyDispatched`] if it was dispatched;
    /// append errors.
    pub fn dispatch_tool(
        &self,
        call_id: &str,
        effect: EffectClass,
    ) -> Result<ToolTicket, AppendError> {
        let (tool, arguments) = self
            .session
            .find_call(call_id)?
            .ok_or_else(|| AppendError::from(Invalid::CallNotOnBranch(call_id.to_owned())))?;
        let key = journal::idempotency_key(self.session.id(), &self.id, call_id);
        let result_entry = self.session.fresh_entry_id();
        self.dispatch(call_id, &tool, &arguments, effect, key, result_entry)
    }

    fn dispatch(
        &self,
        call_id: &str,
        tool: &str,
        arguments: &Value,
        effect: EffectClass,
        key: String,
        result_entry: EntryId,
    ) -> Result<ToolTicket, AppendError> {
        let t = ToolDispatched {
            op: self.id.clone(),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            args_hash: journal::args_hash(arguments),
            effect,
            key: key.clone(),
            result_entry: result_entry.clone(),
        };
        self.session
            .append_op_at(OpRecord::ToolDispatched(t), None, Some(Durability::Sync))?;
        Ok(ToolTicket {
            op: self.id.clone(),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            key,
            effect,
            result_entry,
        })
    }

    /// Records a tool's result (T2) under its preallocated id; durable
    /// (fsynced) before this returns.
    ///
    /// # Errors
    ///
    /// [`Invalid`] if the ticket is another operation's or its call already
    /// has a result; append errors.
    pub fn record_result(
        &self,
        ticket: ToolTicket,
        output: ToolOutput,
    ) -> Result<Appended, AppendError> {
        self.record_result_with(ticket, output, Durability::Sync)
    }

    /// [`Operation::record_result`] with another durability for T2.
    ///
    /// # Errors
    ///
    /// As [`Operation::record_result`].
    pub fn record_result_with(
        &self,
        ticket: ToolTicket,
        output: ToolOutput,
        d: Durability,
    ) -> Result<Appended, AppendError> {
        self.own(&ticket.op)?;
        self.append_result(Some(ticket.result_entry), &ticket.call_id, output, d)
    }

    fn append_result(
        &self,
        id: Option<EntryId>,
        call_id: &str,
        output: ToolOutput,
        d: Durability,
    ) -> Result<Appended, AppendError> {
        append_result(self.session, id, call_id, output, d)
    }

    /// Answers a call that was denied approval (or that the loop chose not
    /// to run) with an error result saying why. The call must not have been
    /// dispatched.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn deny(&self, call_id: &str, reason: &str) -> Result<Appended, AppendError> {
        self.append_result(None, call_id, ToolOutput::error(reason), Durability::Sync)
    }

    /// Closes a call that never started with a `TOOL_NOT_STARTED` result.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn close_not_started(&self, call: &NotStarted) -> Result<Appended, AppendError> {
        close_not_started(self.session, &call.call_id, &call.tool)
    }

    /// Re-dispatches an indeterminate call to run it again with the same
    /// idempotency key and result entry. Only for `ReadOnly` and `Idempotent`
    /// tools; a `SideEffect` call needs [`Operation::rerun_side_effect`].
    ///
    /// # Errors
    ///
    /// [`Invalid::SideEffectRerun`] for a `SideEffect` call,
    /// [`Invalid::CallNotOnBranch`] for a call that is not pending; append
    /// errors.
    pub fn rerun(&self, call: &ToolDispatched) -> Result<ToolTicket, AppendError> {
        if call.effect == EffectClass::SideEffect {
            return Err(Invalid::SideEffectRerun {
                call_id: call.call_id.clone(),
                tool: call.tool.clone(),
            }
            .into());
        }
        self.redispatch(call)
    }

    /// Re-runs an indeterminate `SideEffect` call because a person decided
    /// so; the decision is recorded (`approval_resolved` by `decided_by`).
    ///
    /// # Errors
    ///
    /// As [`Operation::rerun`], less the effect-class check.
    pub fn rerun_side_effect(
        &self,
        call: &ToolDispatched,
        decided_by: &str,
    ) -> Result<ToolTicket, AppendError> {
        self.request_approval(&call.call_id, &call.tool)?;
        self.resolve_approval(&call.call_id, true, Some(decided_by))?;
        self.redispatch(call)
    }

    fn redispatch(&self, call: &ToolDispatched) -> Result<ToolTicket, AppendError> {
        let (tool, arguments) = self
            .session
            .find_call(&call.call_id)?
            .ok_or_else(|| AppendError::from(Invalid::CallNotOnBranch(call.call_id.clone())))?;
        self.dispatch(
            &call.call_id,
            &tool,
            &arguments,
            call.effect,
            call.key.clone(),
            call.result_entry.clone(),
        )
    }

    /// Records that an indeterminate call's outcome is unknown: a tool result
    /// with code `TOOL_OUTCOME_UNKNOWN` telling the model what it can do.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn record_unknown(&self, call: &ToolDispatched) -> Result<Appended, AppendError> {
        record_unknown(self.session, call)
    }

    /// Records what a person says happened to an indeterminate call.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn provide_outcome(
        &self,
        call: &ToolDispatched,
        output: ToolOutput,
    ) -> Result<Appended, AppendError> {
        self.append_result(
            Some(call.result_entry.clone()),
            &call.call_id,
            output,
            Durability::Sync,
        )
    }

    /// Records input that arrived while the operation ran.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn queue_input(&self, text: &str) -> Result<(), AppendError> {
        let r = InputQueued {
            op: self.id.clone(),
            text: text.to_owned(),
        };
        self.session.append_op(OpRecord::InputQueued(r)).map(drop)
    }

    /// Ends the operation.
    ///
    /// # Errors
    ///
    /// Append errors.
    pub fn finish(self, outcome: Outcome, error: Option<String>) -> Result<(), AppendError> {
        let r = OpFinished {
            op: self.id.clone(),
            outcome,
            error,
        };
        self.session.append_op(OpRecord::OpFinished(r)).map(drop)
    }

    fn own(&self, op: &str) -> Result<(), AppendError> {
        if op != self.id {
            return Err(Invalid::WrongOperation {
                ticket: op.to_owned(),
                operation: self.id.clone(),
            }
            .into());
        }
        Ok(())
    }
}

/// Appends a tool result at the leaf (with or without an open operation).
pub(crate) fn append_result(
    session: &Session,
    id: Option<EntryId>,
    call_id: &str,
    output: ToolOutput,
    d: Durability,
) -> Result<Appended, AppendError> {
    let block = Block::ToolResult {
        call_id: call_id.to_owned(),
        content: output.content,
        is_error: output.is_error,
        code: output.code,
    };
    let message = Message {
        role: Role::Tool,
        content: vec![block],
        usage: None,
        model: None,
        stop_reason: None,
    };
    let new = NewEntry {
        id,
        parent: Parent::Leaf,
        body: EntryBody::Message(message),
    };
    session.append_entry_at(new, None, Some(d))
}

/// Closes a call that never started (on this branch) with a
/// `TOOL_NOT_STARTED` result.
pub(crate) fn close_not_started(
    session: &Session,
    call_id: &str,
    tool: &str,
) -> Result<Appended, AppendError> {
    let mut out = ToolOutput::error(format!(
        "The tool call {call_id} ({tool}) never started: the agent stopped before running it. It had no effect; request it again if it is still needed."
    ));
    out.code = Some(journal::TOOL_NOT_STARTED.to_owned());
    append_result(session, None, call_id, out, Durability::Sync)
}

/// Records an indeterminate call's outcome as unknown (`TOOL_OUTCOME_UNKNOWN`),
/// under its preallocated result id.
pub(crate) fn record_unknown(
    session: &Session,
    call: &ToolDispatched,
) -> Result<Appended, AppendError> {
    let advice = match call.effect {
        EffectClass::ReadOnly | EffectClass::Idempotent => "It is safe to run it again.",
        EffectClass::SideEffect => {
            "Do not assume it failed: check whether its effect happened before running it again."
        }
    };
    let mut out = ToolOutput::error(format!(
        "The tool call {} ({}) started but the agent stopped before its result was recorded, so its outcome is unknown. {advice}",
        call.call_id, call.tool
    ));
    out.code = Some(journal::TOOL_OUTCOME_UNKNOWN.to_owned());
    append_result(
        session,
        Some(call.result_entry.clone()),
        &call.call_id,
        out,
        Durability::Sync,
    )
}
