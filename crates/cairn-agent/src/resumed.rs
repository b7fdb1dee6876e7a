//! What the agent records first when it resumes an operation its process
//! did not finish, before recovery runs anything:
//!
//! - a `cairn.resumed` marker ([`cairn::steps::RESUMED`], FORMAT.md §19), so
//!   steps tell a tool the process died under (`interrupted`) and leave the
//!   time no process ran out of their durations (shown apart as downtime);
//! - for each tool call that was dispatched and never answered, the
//!   workspace snapshot *after* it, at its preallocated result entry: what
//!   the tool may have written before the process died is on record, so a
//!   rewind to before the call brings those files back too. Only a call
//!   whose `before` snapshot exists gets one; changes made by hand between
//!   the crash and the resume count as the tool's.

use anyhow::Result;
use cairn::{OpRecord, Session, Unknown, Verdict};
use cairn_workspace::Phase;
use serde_json::{Value, json};

use crate::agent::{Runtime, snapshot_after};

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
