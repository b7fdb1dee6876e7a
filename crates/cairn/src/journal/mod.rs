//! The operation journal as a pure fold: what the last operation did, the
//! recovery [`Verdict`] over the branch's unanswered tool calls and the last
//! operation (`docs/DESIGN.md` §4, `docs/FORMAT.md` §5), and the session
//! [`Status`] (`docs/DESIGN.md` §5).
//!
//! Everything here is a function of decoded records — no I/O — so it is
//! deterministic and property-testable. The session feeds it the records of
//! its last operation at open and every record it appends afterwards.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

use crate::error::ReadError;
use crate::id::EntryId;
use crate::projection::{Context, Projector};
use crate::record::{Body, Entry, EntryBody, Message, OpRecord, Outcome, ToolDispatched};

mod checks;
mod keys;

pub(crate) use checks::{check_branch_point, unanswered_at};
pub use keys::{args_hash, idempotency_key};

/// Code of a tool result recorded when a tool started but its outcome is unknown.
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";
/// Code of a tool result recorded for a call that never started.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";

/// A tool call requested by the model that never started.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct NotStarted {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
    /// A person denied it: recovery answers it as denied and never runs it.
    pub denied: bool,
}

/// An approval that was asked for and never answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct PendingApproval {
    /// The call awaiting approval.
    pub call_id: String,
    /// The tool.
    pub tool: String,
}

/// What the log says about the last operation, and the right next step.
/// Variants are checked in this order of precedence.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
#[non_exhaustive]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Verdict {
    /// Tools were dispatched and have no result on the branch: they may have
    /// run (or, while a writer holds the session, may still be running).
    /// Never re-run blindly (see each call's effect class).
    IndeterminateTool {
        /// The operation.
        op: String,
        /// The calls' `tool_dispatched` records (T1), in dispatch order.
        calls: Vec<ToolDispatched>,
    },
    /// The operation finished: nothing to do.
    Finished {
        /// The operation.
        op: String,
        /// How it ended.
        outcome: Outcome,
    },
    /// A human was asked to approve and never answered: ask again.
    AwaitingApproval {
        /// The operation.
        op: String,
        /// The unanswered approvals.
        calls: Vec<PendingApproval>,
    },
    /// A provider request was made and its assistant entry is missing: retry;
    /// nothing external happened.
    ProviderInterrupted {
        /// The operation.
        op: String,
        /// The interrupted attempt number.
        attempt: u32,
        /// The id that attempt's assistant entry would have used.
        entry: EntryId,
    },
    /// Tool calls on the branch have no result and were never dispatched:
    /// they never started (on this branch); run them (or close them as not
    /// started). Also covers calls with no operation records at all.
    ToolsNotStarted {
        /// The last operation, if any.
        op: Option<String>,
        /// The calls.
        calls: Vec<NotStarted>,
    },
    /// Nothing is pending: continue the loop (or there is no operation yet).
    Ready {
        /// The last operation, if any.
        op: Option<String>,
    },
}

impl Verdict {
    /// The verdict's name, as `docs/DESIGN.md` §4 writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::IndeterminateTool { .. } => "IndeterminateTool",
            Verdict::Finished { .. } => "Finished",
            Verdict::AwaitingApproval { .. } => "AwaitingApproval",
            Verdict::ProviderInterrupted { .. } => "ProviderInterrupted",
            Verdict::ToolsNotStarted { .. } => "ToolsNotStarted",
            Verdict::Ready { .. } => "Ready",
        }
    }
}

/// The session's status, derived from the log and the writer lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Status {
    /// No operation yet.
    Init,
    /// An operation is open and a writer holds the session.
    Running,
    /// An operation is open and nobody holds the session: the process died.
    Interrupted,
    /// The last operation awaits a human's approval.
    Paused,
    /// The last operation completed.
    Succeeded,
    /// The last operation failed, was aborted or hit its step limit.
    Failed,
}

impl Status {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Init => "init",
            Status::Running => "running",
            Status::Interrupted => "interrupted",
            Status::Paused => "paused",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
        }
    }
}

/// The log-derived part of the status (the lock decides Running vs Interrupted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum OpPhase {
    /// No operation yet.
    None,
    /// An operation is open.
    Open,
    /// The open operation awaits approval.
    AwaitingApproval,
    /// The last operation finished so.
    Finished(Outcome),
}

impl OpPhase {
    /// The status, given whether a writer holds the session.
    pub fn status(self, writer_active: bool) -> Status {
        match self {
            OpPhase::None => Status::Init,
            OpPhase::AwaitingApproval => Status::Paused,
            OpPhase::Open if writer_active => Status::Running,
            OpPhase::Open => Status::Interrupted,
            OpPhase::Finished(Outcome::Completed) => Status::Succeeded,
            OpPhase::Finished(Outcome::Failed | Outcome::Aborted | Outcome::MaxSteps) => {
                Status::Failed
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Attempt {
    pub attempt: u32,
    pub entry: EntryId,
    pub fulfilled: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dispatch {
    pub record: ToolDispatched,
    pub answered: bool,
}

/// The progress of one operation, folded from its records.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpProgress {
    pub id: String,
    pub finished: Option<Outcome>,
    pub attempts: Vec<Attempt>,
    pub approvals: Vec<(PendingApproval, Option<bool>)>,
    pub dispatched: Vec<Dispatch>,
    /// Calls answered by tool results during the operation.
    pub answered: HashSet<String>,
}

/// The fold over records that tracks the last operation.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OpFold {
    pub last: Option<OpProgress>,
}

impl OpFold {
    pub fn apply(&mut self, body: &Body) {
        match body {
            Body::Header(_) => {}
            Body::Op(op) => self.apply_op(op),
            Body::Entry(e) => self.apply_entry(e),
        }
    }

    pub fn apply_op(&mut self, op: &OpRecord) {
        if let OpRecord::OpStarted(s) = op {
            self.last = Some(OpProgress {
                id: s.op.clone(),
                finished: None,
                attempts: Vec::new(),
                approvals: Vec::new(),
                dispatched: Vec::new(),
                answered: HashSet::new(),
            });
            return;
        }
        let Some(p) = self.last.as_mut() else { return };
        match op {
            OpRecord::OpStarted(_)
            | OpRecord::UsageSettled(_)
            | OpRecord::InputQueued(_)
            | OpRecord::Ignored(_) => {}
            OpRecord::ModelAttempted(m) if m.op == p.id => {
                p.attempts.push(Attempt {
                    attempt: m.attempt,
                    entry: m.entry.clone(),
                    fulfilled: false,
                });
            }
            OpRecord::ApprovalRequested(a) if a.op == p.id => {
                p.approvals.retain(|(x, _)| x.call_id != a.call_id);
                p.approvals.push((
                    PendingApproval {
                        call_id: a.call_id.clone(),
                        tool: a.tool.clone(),
                    },
                    None,
                ));
            }
            OpRecord::ApprovalResolved(a) if a.op == p.id => {
                for (x, answer) in &mut p.approvals {
                    if x.call_id == a.call_id {
                        *answer = Some(a.approved);
                    }
                }
            }
            OpRecord::ToolDispatched(t) if t.op == p.id => {
                let answered = p.answered.contains(&t.call_id);
                p.dispatched.retain(|d| d.record.call_id != t.call_id);
                p.dispatched.push(Dispatch {
                    record: t.clone(),
                    answered,
                });
            }
            OpRecord::OpFinished(f) if f.op == p.id => p.finished = Some(f.outcome),
            OpRecord::ModelAttempted(_)
            | OpRecord::ApprovalRequested(_)
            | OpRecord::ApprovalResolved(_)
            | OpRecord::ToolDispatched(_)
            | OpRecord::OpFinished(_) => {}
        }
    }

    pub fn apply_entry(&mut self, e: &Entry) {
        // Results recorded after `op_finished` (by recovery) still count.
        let Some(p) = self.last.as_mut() else { return };
        let EntryBody::Message(m) = &e.body else {
            return;
        };
        for a in &mut p.attempts {
            if a.entry == e.id {
                a.fulfilled = true;
            }
        }
        for call_id in m.tool_results() {
            p.answered.insert(call_id.to_owned());
            for d in &mut p.dispatched {
                if d.record.call_id == call_id {
                    d.answered = true;
                }
            }
        }
    }

    /// The verdict for the branch whose context is `ctx`, given what the
    /// last operation recorded. Every tool call of the context without a
    /// result is pending, whether or not an operation record mentions it.
    ///
    /// # Errors
    ///
    /// [`ReadError`] when a message of the context cannot be read.
    pub fn verdict_on(&self, ctx: &Context) -> Result<Verdict, ReadError> {
        Ok(self.verdict_with(unanswered_calls(ctx)?))
    }

    /// [`OpFold::verdict_on`] with the context's unanswered calls found.
    fn verdict_with(&self, unanswered: Vec<OpenCall>) -> Verdict {
        let op = self.last.as_ref().map(|p| p.id.clone());
        let Some(p) = &self.last else {
            return match not_started(unanswered, None) {
                calls if calls.is_empty() => Verdict::Ready { op },
                calls => Verdict::ToolsNotStarted { op, calls },
            };
        };
        // Dispatched by the last operation and answered nowhere: indeterminate.
        let pending: Vec<ToolDispatched> = p
            .dispatched
            .iter()
            .filter(|d| !d.answered && unanswered.iter().any(|c| c.call_id == d.record.call_id))
            .map(|d| d.record.clone())
            .collect();
        let rest: Vec<OpenCall> = unanswered
            .into_iter()
            .filter(|c| !pending.iter().any(|d| d.call_id == c.call_id))
            .collect();
        if !pending.is_empty() {
            return Verdict::IndeterminateTool {
                op: p.id.clone(),
                calls: pending,
            };
        }
        if p.finished.is_none() {
            let waiting: Vec<PendingApproval> = p
                .approvals
                .iter()
                .filter(|(x, a)| a.is_none() && rest.iter().any(|c| c.call_id == x.call_id))
                .map(|(x, _)| x.clone())
                .collect();
            if !waiting.is_empty() {
                return Verdict::AwaitingApproval {
                    op: p.id.clone(),
                    calls: waiting,
                };
            }
        }
        let calls = not_started(rest, Some(p));
        if !calls.is_empty() {
            return Verdict::ToolsNotStarted { op, calls };
        }
        if let Some(outcome) = p.finished {
            return Verdict::Finished {
                op: p.id.clone(),
                outcome,
            };
        }
        if let Some(a) = p.attempts.last().filter(|a| !a.fulfilled) {
            return Verdict::ProviderInterrupted {
                op: p.id.clone(),
                attempt: a.attempt,
                entry: a.entry.clone(),
            };
        }
        Verdict::Ready { op }
    }

    /// The log-derived phase of the last operation.
    pub fn phase(&self) -> OpPhase {
        match &self.last {
            None => OpPhase::None,
            Some(p) => match p.finished {
                Some(o) => OpPhase::Finished(o),
                None if p.approvals.iter().any(|(_, a)| a.is_none()) => OpPhase::AwaitingApproval,
                None => OpPhase::Open,
            },
        }
    }

    /// A call the last operation dispatched that has no result and is still
    /// unanswered on the branch: a new operation would hide it from the
    /// verdict (which reads the last operation only).
    ///
    /// # Errors
    ///
    /// [`ReadError`] when a message of the context cannot be read.
    pub fn unresolved_dispatch(
        &self,
        proj: &Projector,
    ) -> Result<Option<&ToolDispatched>, ReadError> {
        let Some(last) = self.last.as_ref() else {
            return Ok(None);
        };
        for d in &last.dispatched {
            if !d.answered && proj.call_state(&d.record.call_id)? == Some(false) {
                return Ok(Some(&d.record));
            }
        }
        Ok(None)
    }

    /// The open (unfinished) operation, if any.
    pub fn open(&self) -> Option<&OpProgress> {
        self.last.as_ref().filter(|p| p.finished.is_none())
    }
}

/// A tool call of a context that has no result in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenCall {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
    /// The assistant entry holding the call.
    pub entry: EntryId,
}

/// The tool calls of `ctx` with no result in it, in order. A provider must
/// never receive one of these: recovery answers them, and the model view
/// refuses to hold them.
///
/// # Errors
///
/// [`ReadError`] when a message of the context cannot be read
/// ([`crate::ContextMessage::message`]).
pub fn unanswered_calls(ctx: &Context) -> Result<Vec<OpenCall>, ReadError> {
    let mut messages = Vec::with_capacity(ctx.messages().len());
    for cm in ctx.messages() {
        messages.push((cm.message()?, cm.entry()));
    }
    Ok(open_calls(messages))
}

/// The calls of `messages` (each with its entry) that have no result after them.
fn open_calls<'a>(messages: impl IntoIterator<Item = (&'a Message, &'a EntryId)>) -> Vec<OpenCall> {
    // Borrowed while scanning; only the calls left open are copied.
    let mut open: Vec<(&str, &str, &Value, &EntryId)> = Vec::new();
    for (m, entry) in messages {
        for (call_id, tool, arguments) in m.tool_calls() {
            open.push((call_id, tool, arguments, entry));
        }
        for answered in m.tool_results() {
            if let Some(i) = open.iter().position(|c| c.0 == answered) {
                open.remove(i);
            }
        }
    }
    open.into_iter()
        .map(|(call_id, tool, arguments, entry)| OpenCall {
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            arguments: arguments.clone(),
            entry: entry.clone(),
        })
        .collect()
}

/// The calls of `open` as never started, marked denied where the last
/// operation recorded a person's denial.
fn not_started(open: Vec<OpenCall>, last: Option<&OpProgress>) -> Vec<NotStarted> {
    open.into_iter()
        .map(|c| NotStarted {
            denied: last.is_some_and(|p| {
                p.approvals
                    .iter()
                    .any(|(a, answer)| a.call_id == c.call_id && *answer == Some(false))
            }),
            call_id: c.call_id,
            tool: c.tool,
            arguments: c.arguments,
        })
        .collect()
}

/// The recovery verdict of a session's records in `seq` order, for the
/// branch of the last entry. Pure.
pub fn verdict<'a>(records: impl IntoIterator<Item = &'a Body>) -> Verdict {
    let mut fold = OpFold::default();
    let mut entries = Vec::new();
    for r in records {
        fold.apply(r);
        if let Body::Entry(e) = r {
            entries.push(e.clone());
        }
    }
    let leaf = entries.last().map(|e| e.id.clone());
    let ctx = Context::fold(&Value::Object(Default::default()), &entries, leaf.as_ref());
    // A folded context holds every message decoded: none is left out.
    let messages = ctx
        .messages()
        .iter()
        .filter_map(|cm| Some((cm.decoded_message()?, cm.entry())));
    fold.verdict_with(open_calls(messages))
}
