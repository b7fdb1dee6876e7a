//! Append-time checks against the operation journal: an entry that starts a
//! branch must answer the calls left unanswered at its parent, and the
//! records of an open operation must use the ids it preallocated and follow
//! its order. The fold and the verdict they read live in the parent module.

use std::collections::HashSet;

use super::{OpFold, OpenCall, idempotency_key, unanswered_calls};
use crate::error::Invalid;
use crate::id::{EntryId, SessionId};
use crate::projection::{CheckError, Context, Projector};
use crate::record::{Entry, EntryBody, OpRecord, Role, ToolDispatched};
use crate::source::EntrySource;
use crate::tree::Tree;

/// Checks an entry that starts a branch (its parent is not the leaf: a
/// checkout, an explicit parent) against `ctx`, the context at its parent:
/// every tool call unanswered there must be answered by the entry itself,
/// so that no branch starts with a call a provider would receive without a
/// result. The refusal names the nearest safe entries.
pub(crate) fn check_branch_point(
    ctx: &Context,
    entry: &Entry,
    tree: &Tree,
    src: &dyn EntrySource,
) -> Result<(), CheckError> {
    let answered: HashSet<&str> = entry
        .body
        .message()
        .map_or_else(HashSet::new, |m| m.tool_results().collect());
    let left: Vec<OpenCall> = unanswered_calls(ctx)?
        .into_iter()
        .filter(|c| !answered.contains(c.call_id.as_str()))
        .collect();
    if left.is_empty() {
        return Ok(());
    }
    let Some(at) = ctx.leaf() else {
        return Ok(());
    };
    let before = tree
        .get(&left[0].entry)
        .and_then(|n| tree.node(n).parent)
        .map(|n| tree.entry_id(n));
    let mut after = None;
    for child in tree.children(tree.get(at)) {
        if let EntryBody::Message(m) = src.entry(child)?.body {
            let results: HashSet<&str> = m.tool_results().collect();
            if left.iter().all(|c| results.contains(c.call_id.as_str())) {
                after = Some(tree.entry_id(child));
                break;
            }
        }
    }
    Err(unanswered_at(at, &left, before.as_ref(), after.as_ref()).into())
}

/// The refusal of a branch (checkout or fork) at `at`, where `left` are
/// unanswered; `before` is the entry before the first of them, `after` an
/// entry below `at` that answers them all.
pub(crate) fn unanswered_at(
    at: &EntryId,
    left: &[OpenCall],
    before: Option<&EntryId>,
    after: Option<&EntryId>,
) -> Invalid {
    let before = match before {
        Some(b) => format!("use {b} instead (the entry before the calls, to ask the model again)"),
        None => {
            "start from the beginning of the session instead (to ask the model again)".to_owned()
        }
    };
    let after = match after {
        Some(a) => format!(", or {a} (where they are answered)"),
        None => String::new(),
    };
    Invalid::UnansweredCalls {
        at: format!("entry {at}"),
        calls: left
            .iter()
            .map(|c| format!("{:?} ({})", c.call_id, c.tool))
            .collect(),
        hint: format!("{before}{after}"),
    }
}

impl OpFold {
    /// Checks an entry against the open operation: preallocated ids are used
    /// by the records they were allocated for, and only by them.
    pub fn check_entry(&self, e: &Entry) -> Result<(), Invalid> {
        let Some(p) = self.open() else { return Ok(()) };
        let message = e.body.message();
        for a in p.attempts.iter().filter(|a| !a.fulfilled) {
            let is_assistant = message.is_some_and(|m| m.role == Role::Assistant);
            if a.entry == e.id && !is_assistant {
                return Err(Invalid::Reserved(
                    e.id.to_string(),
                    format!("the assistant reply of model attempt {}", a.attempt),
                ));
            }
        }
        if let Some(a) = p.attempts.last().filter(|a| !a.fulfilled)
            && message.is_some_and(|m| m.role == Role::Assistant)
            && a.entry != e.id
        {
            return Err(Invalid::NotPreallocated {
                record: format!("the assistant entry of model attempt {}", a.attempt),
                expected: a.entry.to_string(),
                found: e.id.to_string(),
            });
        }
        for d in p.dispatched.iter().filter(|d| !d.answered) {
            let answers = message.is_some_and(|m| m.tool_results().any(|c| c == d.record.call_id));
            if d.record.result_entry == e.id && !answers {
                return Err(Invalid::Reserved(
                    e.id.to_string(),
                    format!("the result of tool call {:?}", d.record.call_id),
                ));
            }
            if answers && d.record.result_entry != e.id {
                return Err(Invalid::NotPreallocated {
                    record: format!("the result of dispatched tool call {:?}", d.record.call_id),
                    expected: d.record.result_entry.to_string(),
                    found: e.id.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Checks an operation record against the journal so far and the branch.
    pub fn check_op(
        &self,
        session: &SessionId,
        op: &OpRecord,
        tree: &Tree,
        proj: &Projector,
    ) -> Result<(), CheckError> {
        // What the checks read of the context (its messages, maybe not read yet).
        let unresolved = if let OpRecord::OpStarted(_) = op {
            self.unresolved_dispatch(proj)?
        } else {
            None
        };
        let call_state = if let OpRecord::ToolDispatched(t) = op {
            proj.call_state(&t.call_id)?
        } else {
            None
        };
        Ok(self.check_op_with(session, op, tree, unresolved, call_state)?)
    }

    /// [`OpFold::check_op`] with what it reads of the context: the last
    /// operation's dispatch left unanswered (for `op_started`), and the
    /// state of the call a `tool_dispatched` names.
    fn check_op_with(
        &self,
        session: &SessionId,
        op: &OpRecord,
        tree: &Tree,
        unresolved: Option<&ToolDispatched>,
        call_state: Option<bool>,
    ) -> Result<(), Invalid> {
        let open = self.open();
        let op_id = match op {
            OpRecord::OpStarted(s) => {
                if let Some(p) = open {
                    return Err(Invalid::OperationOpen(p.id.clone()));
                }
                if self.last.as_ref().is_some_and(|l| l.id == s.op) {
                    return Err(Invalid::OperationIdUsed(s.op.clone()));
                }
                if let Some(d) = unresolved {
                    return Err(Invalid::DispatchedWithoutResult {
                        op: d.op.clone(),
                        calls: format!("{:?} ({})", d.call_id, d.tool),
                    });
                }
                if let Some(input) = &s.input
                    && tree.get(input).is_none()
                {
                    return Err(Invalid::MissingParent(input.to_string()));
                }
                return Ok(());
            }
            OpRecord::Ignored(_) => return Ok(()),
            OpRecord::ModelAttempted(r) => &r.op,
            OpRecord::UsageSettled(r) => &r.op,
            OpRecord::ApprovalRequested(r) => &r.op,
            OpRecord::ApprovalResolved(r) => &r.op,
            OpRecord::ToolDispatched(r) => &r.op,
            OpRecord::InputQueued(r) => &r.op,
            OpRecord::OpFinished(r) => &r.op,
        };
        let Some(p) = open.filter(|p| &p.id == op_id) else {
            return Err(Invalid::NotTheOpenOperation(op_id.clone()));
        };
        let reserved = |id: &EntryId| {
            tree.get(id).is_some()
                || p.attempts.iter().any(|a| &a.entry == id)
                || p.dispatched.iter().any(|d| &d.record.result_entry == id)
        };
        match op {
            OpRecord::ModelAttempted(m) => {
                if reserved(&m.entry) {
                    return Err(Invalid::IdTaken(m.entry.to_string()));
                }
            }
            OpRecord::ToolDispatched(t) => {
                let expected = idempotency_key(session, &t.op, &t.call_id);
                if t.key != expected {
                    return Err(Invalid::IdempotencyKey {
                        call_id: t.call_id.clone(),
                        found: t.key.clone(),
                        expected,
                    });
                }
                match call_state {
                    None => {
                        return Err(Invalid::CallNotOnBranch(t.call_id.clone()));
                    }
                    Some(true) => {
                        return Err(Invalid::AlreadyAnswered(t.call_id.clone()));
                    }
                    Some(false) => {}
                }
                match p.dispatched.iter().find(|d| d.record.call_id == t.call_id) {
                    // A re-run of an indeterminate call: same key, same result entry.
                    Some(d)
                        if !d.answered
                            && d.record.key == t.key
                            && d.record.result_entry == t.result_entry => {}
                    Some(_) => {
                        return Err(Invalid::AlreadyDispatched(t.call_id.clone()));
                    }
                    None if reserved(&t.result_entry) => {
                        return Err(Invalid::IdTaken(t.result_entry.to_string()));
                    }
                    None => {}
                }
            }
            OpRecord::ApprovalResolved(a) => {
                if !p.approvals.iter().any(|(x, _)| x.call_id == a.call_id) {
                    return Err(Invalid::NoApprovalRequested(a.call_id.clone()));
                }
            }
            OpRecord::OpStarted(_)
            | OpRecord::UsageSettled(_)
            | OpRecord::ApprovalRequested(_)
            | OpRecord::InputQueued(_)
            | OpRecord::OpFinished(_)
            | OpRecord::Ignored(_) => {}
        }
        Ok(())
    }
}
