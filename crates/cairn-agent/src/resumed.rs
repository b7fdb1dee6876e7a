//! What the agent records first when it resumes an operation its process
//! did not finish, before recovery runs anything:
//!
//! - a `cairn.resumed` marker ([`cairn::steps::RESUMED`], RECORDS.md §6), so
//!   steps tell a tool the process died under (`interrupted`) and leave the
//!   time no process ran out of their durations (shown apart as downtime);
//! - for each tool call that was dispatched and never answered, the
//!   workspace snapshot *after* it, at its preallocated result entry: what
//!   the tool may have written before the process died is on record, so a
//!   rewind to before the call brings those files back too. Only a call
//!   whose `before` snapshot exists gets one; changes made by hand between
//!   the crash and the resume count as the tool's.
//!
//! And once the resumed operation is over, the input queued during
//! operations (`input_queued`) and never delivered is delivered, in order
//! ([`Agent::deliver_queued`](crate::Agent::deliver_queued)).

use anyhow::Result;
use cairn::{OpRecord, Session, Unknown, Verdict};
use cairn_workspace::Phase;
use serde_json::{Value, json};

use crate::runtime::Runtime;
use crate::snapshot::after as snapshot_after;

/// Records the resume marker (when an operation is open) and the
/// workspace snapshot after each call of the verdict that may have run.
///
/// # Errors
///
/// When the verdict cannot be read or the marker cannot be appended (a
/// snapshot that fails is a notice: the next snapshot sees the changes).
pub(crate) fn record_crash(session: &Session, rt: &mut Runtime) -> Result<()> {
    if let Some(op) = session.resume_operation() {
        session.append_op(OpRecord::Ignored(Unknown {
            kind: cairn::steps::RESUMED.to_owned(),
            data: json!({ "op": op.id() }),
        }))?;
    }
    let Verdict::IndeterminateTool { calls, .. } = session.verdict()? else {
        return Ok(());
    };
    // Only a call snapshotted before it ran: without its pre-image, an
    // after snapshot would say the tool made every file it lists.
    let before: Vec<String> = cairn_workspace::read_all(session)?
        .into_iter()
        .filter(|(_, r)| r.phase == Phase::Before)
        .filter_map(|(_, r)| r.call_id)
        .collect();
    for call in calls.iter().filter(|c| before.contains(&c.call_id)) {
        let Some(tool) = rt.tools.get(&call.tool).cloned() else {
            continue;
        };
        let Some(arguments) = arguments_of(session, &call.call_id)? else {
            continue;
        };
        if let Some(touches) = tool.touches(&arguments, &rt.env) {
            snapshot_after(
                rt,
                session,
                call.result_entry.clone(),
                &call.call_id,
                &call.tool,
                &touches,
            );
        }
    }
    Ok(())
}

/// The arguments of tool call `call_id` on the session's branch.
fn arguments_of(session: &Session, call_id: &str) -> Result<Option<Value>> {
    let ctx = session.context();
    for m in ctx.messages().iter().rev() {
        let m = m.message()?;
        if let Some((_, _, args)) = m.tool_calls().find(|(id, _, _)| *id == call_id) {
            return Ok(Some(args.clone()));
        }
    }
    Ok(None)
}

/// The input queued during operations (`input_queued`) and not delivered
/// since, in order. A queued text is delivered by a later operation whose
/// input is that text while it is the first one waiting (the way
/// [`Agent::deliver_queued`](crate::Agent::deliver_queued) delivers them), so a crash in the middle of the
/// delivery leaves the rest waiting for the next resume.
///
/// # Errors
///
/// When a record cannot be read.
pub fn undelivered(session: &Session) -> Result<Vec<String>> {
    let ops = session.op_records();
    let queued = cairn::OpKind::InputQueued.name();
    if !ops.iter().any(|(_, kind)| kind == queued) {
        return Ok(Vec::new());
    }
    let started = cairn::OpKind::OpStarted.name();
    let mut waiting = std::collections::VecDeque::new();
    for (seq, kind) in ops {
        if kind != queued && kind != started {
            continue;
        }
        match session.record(seq)?.body {
            cairn::Body::Op(OpRecord::InputQueued(q)) => waiting.push_back(q.text),
            cairn::Body::Op(OpRecord::OpStarted(o)) if !waiting.is_empty() => {
                let Some(input) = o.input else { continue };
                let text = match session.entry(&input)? {
                    Some(cairn::Entry {
                        body: cairn::EntryBody::Message(m),
                        ..
                    }) => m.plain_text(),
                    _ => continue,
                };
                if waiting.front() == Some(&text) {
                    waiting.pop_front();
                }
            }
            _ => {}
        }
    }
    Ok(waiting.into())
}
