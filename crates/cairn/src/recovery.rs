//! Recovery: the one loop that resolves a session's [`Verdict`] by appending
//! real results, so that no tool call on the branch is left without one.
//!
//! [`recover_with`] drives a [`Resolver`], which decides each pending item
//! ([`Pending`]): re-run, mark unknown, provide an outcome, run, deny, close
//! as not started, or leave it. [`Policy`] decides without asking anyone; the
//! CLI's prompt and the agent's prompt are resolvers too. The loop repeats
//! until nothing is pending, the verdict stops changing, or
//! [`MAX_RECOVERY_ROUNDS`] rounds ran.
//!
//! Tools run only through the resolver's [`ToolRunner`] and only under an
//! open operation (T1 before the tool). After `op_finished` (or with no
//! operation at all) nothing can be dispatched: a call that never started is
//! closed `TOOL_NOT_STARTED` and an indeterminate call recorded
//! `TOOL_OUTCOME_UNKNOWN`, whatever the resolver asked.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::commit::Durability;
use crate::error::AppendError;
use crate::id::EntryId;
use crate::journal::{self, NotStarted, PendingApproval, Verdict};
use crate::operation::{self, Operation, ToolOutput};
use crate::projection::Context;
use crate::record::{EffectClass, Entry, EntryBody, ToolDispatched};
use crate::session::{Appended, Session};

/// The most rounds [`recover_with`] runs. Each round resolves every item of
/// the verdict; a round can reveal the next verdict (a denied approval leaves
/// the other calls of its message not started), so a few rounds reach the
/// fixed point.
pub const MAX_RECOVERY_ROUNDS: usize = 8;

/// The result text of a call a person denied.
pub const DENIED_BY_PERSON: &str = "A person denied this call; it was not run.";

/// The result text of a call whose approval prompt was interrupted and that
/// recovery denied.
pub const APPROVAL_INTERRUPTED: &str =
    "The approval prompt for this call was interrupted, so the call was denied; it was not run.";

/// Runs tools for recovery: the host's tool implementations. `run` is
/// called for calls that never started (and re-runs of indeterminate ones);
/// it must apply the host's own rules (validation), as the loop would have.
pub trait ToolRunner {
    /// The effect class the host declares for `tool`.
    fn effect(&self, tool: &str) -> EffectClass;
    /// Runs `tool` with `arguments`, passing `key` downstream as its
    /// idempotency key.
    fn run(&mut self, call_id: &str, tool: &str, arguments: &Value, key: &str) -> ToolOutput;
}

/// One pending item of the verdict, for a [`Resolver`] to decide.
#[derive(Debug, Clone, Copy)]
pub enum Pending<'a> {
    /// A dispatched call with no result: it may have run.
    Indeterminate {
        /// The call.
        call: &'a ToolDispatched,
        /// Its arguments.
        arguments: &'a Value,
    },
    /// A call whose approval was asked and never answered.
    Approval {
        /// The call.
        call: &'a PendingApproval,
        /// Its arguments.
        arguments: &'a Value,
    },
    /// A call on the branch that never started.
    NotStarted(&'a NotStarted),
}

impl Pending<'_> {
    /// The call id.
    pub fn call_id(&self) -> &str {
        match self {
            Pending::Indeterminate { call, .. } => &call.call_id,
            Pending::Approval { call, .. } => &call.call_id,
            Pending::NotStarted(c) => &c.call_id,
        }
    }

    /// The tool.
    pub fn tool(&self) -> &str {
        match self {
            Pending::Indeterminate { call, .. } => &call.tool,
            Pending::Approval { call, .. } => &call.tool,
            Pending::NotStarted(c) => &c.tool,
        }
    }
}

/// What to do with one pending item.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Decision {
    /// Indeterminate: run it again with its recorded key and result id. A
    /// `SideEffect` call needs `by`, who decided it (recorded as an approval).
    Rerun {
        /// Who decided a `SideEffect` re-run (`None` for safe calls).
        by: Option<String>,
    },
    /// Indeterminate: record its outcome as `TOOL_OUTCOME_UNKNOWN`.
    MarkUnknown,
    /// Indeterminate: record what a person says happened.
    Outcome(ToolOutput),
    /// Not started, or awaiting approval: run it now. `approved_by` records
    /// an approval (always recorded for an awaited approval).
    Run {
        /// Who approved it, if an approval is to be recorded.
        approved_by: Option<String>,
    },
    /// Not started, or awaiting approval: answer it without running it.
    /// `by` records the denial as an approval answer.
    Deny {
        /// Who denied it, if the denial is to be recorded as an approval answer.
        by: Option<String>,
        /// The result text the model sees.
        reason: String,
    },
    /// Not started: close it as `TOOL_NOT_STARTED`.
    CloseNotStarted,
    /// Leave it pending.
    Skip,
    /// Stop recovering: nothing more is appended.
    Stop(String),
}

/// Decides pending items for [`recover_with`].
pub trait Resolver {
    /// The decision for `item`. `can_run` says whether a tool can run now (an
    /// operation is open and [`Resolver::runner`] gives one); when it is
    /// false, `Rerun` is recorded as unknown and `Run` closes the call as
    /// not started.
    fn decide(&mut self, item: Pending<'_>, can_run: bool) -> Decision;

    /// The tools, to run calls (none by default).
    fn runner(&mut self) -> Option<&mut dyn ToolRunner> {
        None
    }

    /// Told of each action once it is on disk.
    fn done(&mut self, _action: &Action) {}
}

/// How [`recover`] resolves each verdict without asking anyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Re-run indeterminate `ReadOnly`/`Idempotent` calls (with their key)
    /// when a runner is given; otherwise record them as unknown.
    pub rerun_safe: bool,
    /// Run calls that never started when a runner is given; otherwise close
    /// them as `TOOL_NOT_STARTED`.
    pub run_not_started: bool,
    /// Deny approvals that were never answered (instead of leaving them).
    pub deny_pending_approvals: bool,
}

impl Default for Policy {
    /// Re-run what is safe, run what never started, deny unanswered approvals;
    /// `SideEffect` calls are always recorded as unknown.
    fn default() -> Policy {
        Policy {
            rerun_safe: true,
            run_not_started: true,
            deny_pending_approvals: true,
        }
    }
}

impl Policy {
    /// Marks everything unknown or not started and denies unanswered
    /// approvals: runs nothing.
    pub fn close_all() -> Policy {
        Policy {
            rerun_safe: false,
            run_not_started: false,
            deny_pending_approvals: true,
        }
    }
}

impl Resolver for Policy {
    fn decide(&mut self, item: Pending<'_>, can_run: bool) -> Decision {
        match item {
            Pending::Indeterminate { call, .. } => {
                let safe = matches!(call.effect, EffectClass::ReadOnly | EffectClass::Idempotent);
                if safe && self.rerun_safe && can_run {
                    Decision::Rerun { by: None }
                } else {
                    Decision::MarkUnknown
                }
            }
            Pending::Approval { .. } if self.deny_pending_approvals => Decision::Deny {
                by: Some("cairn recover".to_owned()),
                reason: APPROVAL_INTERRUPTED.to_owned(),
            },
            Pending::Approval { .. } => Decision::Skip,
            Pending::NotStarted(c) if c.denied => Decision::Deny {
                by: None,
                reason: DENIED_BY_PERSON.to_owned(),
            },
            Pending::NotStarted(_) if self.run_not_started && can_run => {
                Decision::Run { approved_by: None }
            }
            Pending::NotStarted(_) => Decision::CloseNotStarted,
        }
    }
}

struct WithRunner<'r> {
    policy: Policy,
    runner: Option<&'r mut dyn ToolRunner>,
}

impl Resolver for WithRunner<'_> {
    fn decide(&mut self, item: Pending<'_>, can_run: bool) -> Decision {
        self.policy.decide(item, can_run)
    }

    fn runner(&mut self) -> Option<&mut dyn ToolRunner> {
        match &mut self.runner {
            Some(r) => Some(&mut **r),
            None => None,
        }
    }
}

/// What recovery did to one call.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ActionKind {
    /// Re-ran an indeterminate call with its key.
    Reran {
        /// The idempotency key passed to the tool.
        key: String,
    },
    /// Recorded an indeterminate call as `TOOL_OUTCOME_UNKNOWN`.
    RecordedUnknown,
    /// Recorded what a person said happened.
    RecordedOutcome,
    /// Ran a call that had never started (or whose approval was awaited).
    Ran,
    /// Answered a call as denied.
    Denied {
        /// The result text.
        reason: String,
    },
    /// Closed a call as `TOOL_NOT_STARTED`.
    ClosedNotStarted,
}

/// One action of a recovery, on disk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// What was done.
    #[serde(flatten)]
    pub kind: ActionKind,
    /// The result entry appended.
    pub entry: Option<EntryId>,
    /// The tool's output, when it ran.
    #[serde(skip)]
    pub output: Option<ToolOutput>,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (call, tool) = (&self.call_id, &self.tool);
        match &self.kind {
            ActionKind::Reran { key } => write!(f, "re-ran {call} ({tool}) with key {key}"),
            ActionKind::RecordedUnknown => {
                write!(f, "recorded {call} ({tool}) as TOOL_OUTCOME_UNKNOWN")
            }
            ActionKind::RecordedOutcome => {
                write!(f, "recorded what a person said happened to {call} ({tool})")
            }
            ActionKind::Ran => write!(f, "ran {call} ({tool}), which had not run"),
            ActionKind::Denied { reason } => {
                write!(f, "answered {call} ({tool}) as denied: {reason}")
            }
            ActionKind::ClosedNotStarted => {
                write!(f, "closed {call} ({tool}) as TOOL_NOT_STARTED")
            }
        }
    }
}

/// What [`recover_with`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveryReport {
    /// The verdict before recovery.
    pub before: Verdict,
    /// The actions taken, in order.
    pub actions: Vec<Action>,
    /// The verdict after recovery.
    pub after: Verdict,
}

/// Errors of a recovery.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// Appending a record failed.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// The resolver stopped the recovery.
    #[error("recovery stopped: {0}")]
    Stopped(String),
    /// The resolver's decision does not apply to the item.
    #[error(
        "recovery cannot {decision} tool call {call_id:?} ({what}); this is a bug in the resolver"
    )]
    Unfit {
        /// The call.
        call_id: String,
        /// The decision, in words.
        decision: &'static str,
        /// What the item is.
        what: &'static str,
    },
}

/// Resolves the session's verdict under `policy`, running tools with
/// `runner` when the policy says so: [`recover_with`] with [`Policy`].
///
/// # Errors
///
/// As [`recover_with`].
pub fn recover(
    session: &Session,
    policy: Policy,
    runner: Option<&mut dyn ToolRunner>,
) -> Result<RecoveryReport, RecoveryError> {
    recover_with(session, &mut WithRunner { policy, runner })
}

/// Resolves the session's verdict with `resolver`, appending real results,
/// until no tool call on the branch is pending (or the resolver skips, or
/// [`MAX_RECOVERY_ROUNDS`] ran). `ProviderInterrupted`, `Ready` and
/// `Finished` need no resolution here (the agent loop retries or continues).
/// A second recovery after a complete one does nothing.
///
/// # Errors
///
/// Append errors; [`RecoveryError::Stopped`] when the resolver stops;
/// [`RecoveryError::Unfit`] for a decision that does not fit its item.
pub fn recover_with(
    session: &Session,
    resolver: &mut dyn Resolver,
) -> Result<RecoveryReport, RecoveryError> {
    let verdict_now = || session.verdict().map_err(AppendError::from);
    let before = verdict_now()?;
    let mut actions = Vec::new();
    for _ in 0..MAX_RECOVERY_ROUNDS {
        let verdict = verdict_now()?;
        let op = session.resume_operation();
        let mut r = Round {
            session,
            op: op.as_ref(),
            resolver: &mut *resolver,
            actions: &mut actions,
        };
        match &verdict {
            Verdict::IndeterminateTool { calls, .. } => {
                for call in calls {
                    r.indeterminate(call)?;
                }
            }
            Verdict::AwaitingApproval { calls, .. } => {
                for call in calls {
                    r.approval(call)?;
                }
            }
            Verdict::ToolsNotStarted { calls, .. } => {
                for call in calls {
                    r.not_started(call)?;
                }
            }
            Verdict::Finished { .. }
            | Verdict::ProviderInterrupted { .. }
            | Verdict::Ready { .. } => break,
        }
        if verdict_now()? == verdict {
            break;
        }
    }
    Ok(RecoveryReport {
        before,
        actions,
        after: verdict_now()?,
    })
}

/// One round of recovery: the session, the open operation (if any) and
/// where the actions go.
struct Round<'a, 's> {
    session: &'s Session,
    op: Option<&'a Operation<'s>>,
    resolver: &'a mut dyn Resolver,
    actions: &'a mut Vec<Action>,
}

impl Round<'_, '_> {
    fn can_run(&mut self) -> bool {
        self.op.is_some() && self.resolver.runner().is_some()
    }

    fn record(
        &mut self,
        call_id: &str,
        tool: &str,
        kind: ActionKind,
        appended: Appended,
        output: Option<ToolOutput>,
    ) {
        let action = Action {
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            kind,
            entry: appended.id,
            output,
        };
        self.resolver.done(&action);
        self.actions.push(action);
    }

    fn arguments(&self, call_id: &str) -> Result<Value, RecoveryError> {
        Ok(self
            .session
            .find_call(call_id)
            .map_err(AppendError::from)?
            .map_or(Value::Null, |(_, a)| a))
    }

    fn indeterminate(&mut self, call: &ToolDispatched) -> Result<(), RecoveryError> {
        let arguments = self.arguments(&call.call_id)?;
        let can_run = self.can_run();
        let item = Pending::Indeterminate {
            call,
            arguments: &arguments,
        };
        let unfit = |decision| RecoveryError::Unfit {
            call_id: call.call_id.clone(),
            decision,
            what: "it may have run",
        };
        match self.resolver.decide(item, can_run) {
            Decision::Rerun { by } if can_run => {
                let Some(op) = self.op else { return Ok(()) };
                let ticket = match by {
                    Some(by) if call.effect == EffectClass::SideEffect => {
                        op.rerun_side_effect(call, &by)?
                    }
                    _ => op.rerun(call)?,
                };
                let key = ticket.key().to_owned();
                let Some(runner) = self.resolver.runner() else {
                    return Ok(());
                };
                let out = runner.run(&call.call_id, &call.tool, &arguments, &key);
                let appended = op.record_result(ticket, out.clone())?;
                self.record(
                    &call.call_id,
                    &call.tool,
                    ActionKind::Reran { key },
                    appended,
                    Some(out),
                );
            }
            Decision::Rerun { .. } | Decision::MarkUnknown => {
                let appended = operation::record_unknown(self.session, call)?;
                self.record(
                    &call.call_id,
                    &call.tool,
                    ActionKind::RecordedUnknown,
                    appended,
                    None,
                );
            }
            Decision::Outcome(out) => {
                let appended = operation::append_result(
                    self.session,
                    Some(call.result_entry.clone()),
                    &call.call_id,
                    out,
                    Durability::Sync,
                )?;
                self.record(
                    &call.call_id,
                    &call.tool,
                    ActionKind::RecordedOutcome,
                    appended,
                    None,
                );
            }
            Decision::Skip => {}
            Decision::Stop(why) => return Err(RecoveryError::Stopped(why)),
            Decision::Run { .. } => return Err(unfit("run")),
            Decision::Deny { .. } => return Err(unfit("deny")),
            Decision::CloseNotStarted => return Err(unfit("close as not started")),
        }
        Ok(())
    }

    fn approval(&mut self, call: &PendingApproval) -> Result<(), RecoveryError> {
        let Some(op) = self.op else { return Ok(()) };
        let arguments = self.arguments(&call.call_id)?;
        let can_run = self.can_run();
        let item = Pending::Approval {
            call,
            arguments: &arguments,
        };
        match self.resolver.decide(item, can_run) {
            Decision::Run { approved_by } if can_run => {
                let by = approved_by.unwrap_or_else(|| "person".to_owned());
                op.resolve_approval(&call.call_id, true, Some(&by))?;
                self.run(op, &call.call_id, &call.tool, &arguments)?;
            }
            Decision::Run { .. } | Decision::Skip => {}
            Decision::Deny { by, reason } => {
                let by = by.unwrap_or_else(|| "person".to_owned());
                op.resolve_approval(&call.call_id, false, Some(&by))?;
                self.deny(&call.call_id, &call.tool, reason)?;
            }
            Decision::Stop(why) => return Err(RecoveryError::Stopped(why)),
            Decision::Rerun { .. } | Decision::MarkUnknown | Decision::Outcome(_) => {
                return Err(RecoveryError::Unfit {
                    call_id: call.call_id.clone(),
                    decision: "treat as possibly run",
                    what: "it awaits approval and never started",
                });
            }
            Decision::CloseNotStarted => {
                op.resolve_approval(&call.call_id, false, Some("cairn recover"))?;
                self.close(&call.call_id, &call.tool)?;
            }
        }
        Ok(())
    }

    fn not_started(&mut self, call: &NotStarted) -> Result<(), RecoveryError> {
        // A call the open operation already dispatched (answered on another
        // branch, in a log older than the branch-point rule) cannot be
        // dispatched again: it can only be closed.
        let dispatched = self.session.with_fold(|f| {
            f.open().is_some_and(|p| {
                p.dispatched
                    .iter()
                    .any(|d| d.record.call_id == call.call_id)
            })
        });
        let can_run = self.can_run() && !dispatched;
        match self.resolver.decide(Pending::NotStarted(call), can_run) {
            Decision::Run { approved_by } if can_run => {
                let Some(op) = self.op else { return Ok(()) };
                if let Some(by) = approved_by {
                    op.request_approval(&call.call_id, &call.tool)?;
                    op.resolve_approval(&call.call_id, true, Some(&by))?;
                }
                self.run(op, &call.call_id, &call.tool, &call.arguments)?;
            }
            Decision::Run { .. } | Decision::CloseNotStarted => {
                self.close(&call.call_id, &call.tool)?
            }
            Decision::Deny { by, reason } => {
                if let (Some(by), Some(op)) = (by, self.op) {
                    op.request_approval(&call.call_id, &call.tool)?;
                    op.resolve_approval(&call.call_id, false, Some(&by))?;
                }
                self.deny(&call.call_id, &call.tool, reason)?;
            }
            Decision::Skip => {}
            Decision::Stop(why) => return Err(RecoveryError::Stopped(why)),
            Decision::Rerun { .. } | Decision::MarkUnknown | Decision::Outcome(_) => {
                return Err(RecoveryError::Unfit {
                    call_id: call.call_id.clone(),
                    decision: "treat as possibly run",
                    what: "it never started",
                });
            }
        }
        Ok(())
    }

    fn run(
        &mut self,
        op: &Operation<'_>,
        call_id: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<(), RecoveryError> {
        let Some(runner) = self.resolver.runner() else {
            return Ok(());
        };
        let ticket = op.dispatch_tool(call_id, runner.effect(tool))?;
        let out = runner.run(call_id, tool, arguments, ticket.key());
        let appended = op.record_result(ticket, out.clone())?;
        self.record(call_id, tool, ActionKind::Ran, appended, Some(out));
        Ok(())
    }

    fn deny(&mut self, call_id: &str, tool: &str, reason: String) -> Result<(), RecoveryError> {
        let appended = operation::append_result(
            self.session,
            None,
            call_id,
            ToolOutput::error(reason.clone()),
            Durability::Sync,
        )?;
        self.record(call_id, tool, ActionKind::Denied { reason }, appended, None);
        Ok(())
    }

    fn close(&mut self, call_id: &str, tool: &str) -> Result<(), RecoveryError> {
        let appended = operation::close_not_started(self.session, call_id, tool)?;
        self.record(call_id, tool, ActionKind::ClosedNotStarted, appended, None);
        Ok(())
    }
}

impl Session {
    /// Refuses a fork whose copied branch (`entries`, from the root to `at`)
    /// would end with a tool call that has no result, naming the nearest
    /// safe entries instead.
    pub(crate) fn check_fork_point(
        &self,
        entries: &[(Entry, String)],
        at: Option<&EntryId>,
    ) -> Result<(), AppendError> {
        let Some(at) = at else { return Ok(()) };
        let copied: Vec<Entry> = entries.iter().map(|(e, _)| e.clone()).collect();
        let ctx = Context::fold(&self.header().app_state, &copied, Some(at));
        let left = journal::unanswered_calls(&ctx)?;
        let Some(first) = left.first() else {
            return Ok(());
        };
        let before = copied
            .iter()
            .find(|e| e.id == first.entry)
            .and_then(|e| e.parent.clone());
        let mut after = None;
        for child in self.children(Some(at)) {
            if let Some(Entry {
                body: EntryBody::Message(m),
                ..
            }) = self.entry(&child)?
                && left
                    .iter()
                    .all(|c| m.tool_results().any(|r| r == c.call_id))
            {
                after = Some(child);
                break;
            }
        }
        Err(journal::unanswered_at(at, &left, before.as_ref(), after.as_ref()).into())
    }
}
