//! Steps: the numbered list of what happened (user inputs, model calls, tool
//! calls), derived from the records — so numbers are stable across restarts.
//! A tool step's parent is the model step whose reply requested the call.

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use serde::Serialize;

use crate::id::EntryId;
use crate::journal::{TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN};
use crate::record::{Block, Body, EntryBody, OpRecord, Record, Role, Usage};
use crate::time;

/// What a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// A user input that started an operation.
    Input,
    /// A model call.
    Model,
    /// A tool call.
    Tool,
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// It completed.
    Ok,
    /// It completed with an error (a tool error, a failed model call).
    Error,
    /// It has not completed and its operation is still open.
    Running,
    /// A model call whose reply never came (crash, interruption).
    Interrupted,
    /// A tool that started and whose outcome is unknown.
    Unknown,
    /// A tool call that never started (closed as such, or answered without
    /// running: invalid, interrupted).
    NotStarted,
    /// A tool call a person (or the host's approval rule) denied: never run.
    Denied,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// 1-based number; displayed as `s0001`.
    pub number: u32,
    /// What it is.
    pub kind: StepKind,
    /// The input's text excerpt, the model's name, or the tool's name.
    pub name: String,
    /// How it ended.
    pub status: StepStatus,
    /// The operation it belongs to.
    pub op: String,
    /// When it started, as its record's `ts` says.
    pub started: String,
    /// `started` as an instant (`None` when that `ts` is not RFC 3339).
    #[serde(skip)]
    pub started_at: Option<Timestamp>,
    /// How long it took, when it ended.
    pub duration_ms: Option<u64>,
    /// Tokens used (model steps).
    pub usage: Option<Usage>,
    /// The step that caused it (a tool step's model step).
    pub parent: Option<u32>,
    /// The tool call id (tool steps).
    pub call_id: Option<String>,
    /// The entry it produced (the input, the reply, the tool result).
    pub entry: Option<EntryId>,
}

impl Step {
    /// The step's label, `s0001`.
    pub fn label(&self) -> String {
        format!("s{:04}", self.number)
    }
}

/// Milliseconds from `from` to the instant `to` names; `None` when either is
/// not a time or `to` is earlier.
fn elapsed(from: Option<Timestamp>, to: &str) -> Option<u64> {
    let d = time::parse(to)?.duration_since(from?);
    u64::try_from(d.as_millis()).ok()
}

/// Derives the steps from a session's records, in `seq` order. Pure.
pub fn derive(records: &[Record]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut user_text: HashMap<EntryId, String> = HashMap::new();
    let mut model_by_entry: HashMap<EntryId, usize> = HashMap::new();
    let mut model_by_call: HashMap<String, (u32, String)> = HashMap::new();
    let mut tool_by_call: HashMap<String, usize> = HashMap::new();
    let mut open_ops: HashMap<String, bool> = HashMap::new();
    // Calls whose approval was answered no.
    let mut denied: HashSet<String> = HashSet::new();
    let mut current_op = String::new();
    for r in records {
        match &r.body {
            Body::Header(_) => {}
            Body::Op(op) => match op {
                OpRecord::OpStarted(s) => {
                    current_op = s.op.clone();
                    open_ops.insert(s.op.clone(), true);
                    let name = s
                        .input
                        .as_ref()
                        .and_then(|i| user_text.get(i))
                        .cloned()
                        .unwrap_or_default();
                    push(
                        &mut steps,
                        StepKind::Input,
                        name,
                        StepStatus::Ok,
                        &s.op,
                        &r.ts,
                        None,
                        s.input.clone(),
                        None,
                    );
                }
                OpRecord::ModelAttempted(m) => {
                    let name = m.model.clone().unwrap_or_else(|| "model".into());
                    push(
                        &mut steps,
                        StepKind::Model,
                        name,
                        StepStatus::Running,
                        &m.op,
                        &r.ts,
                        None,
                        Some(m.entry.clone()),
                        None,
                    );
                    model_by_entry.insert(m.entry.clone(), steps.len() - 1);
                }
                OpRecord::UsageSettled(u) => {
                    if let Some(&i) = model_by_entry.get(&u.entry) {
                        steps[i].usage = Some(u.usage.clone());
                        if u.latency_ms.is_some() {
                            steps[i].duration_ms = u.latency_ms;
                        }
                    }
                }
                OpRecord::ToolDispatched(t) => {
                    let parent = model_by_call.get(&t.call_id).map(|(n, _)| *n);
                    push(
                        &mut steps,
                        StepKind::Tool,
                        t.tool.clone(),
                        StepStatus::Running,
                        &t.op,
                        &r.ts,
                        parent,
                        Some(t.result_entry.clone()),
                        Some(t.call_id.clone()),
                    );
                    tool_by_call.insert(t.call_id.clone(), steps.len() - 1);
                }
                OpRecord::OpFinished(f) => {
                    open_ops.insert(f.op.clone(), false);
                }
                OpRecord::ApprovalResolved(a) => {
                    if a.approved {
                        denied.remove(&a.call_id);
                    } else {
                        denied.insert(a.call_id.clone());
                    }
                }
                OpRecord::ApprovalRequested(_)
                | OpRecord::InputQueued(_)
                | OpRecord::Ignored(_) => {}
            },
            Body::Entry(e) => {
                let EntryBody::Message(m) = &e.body else {
                    continue;
                };
                if m.role == Role::User {
                    user_text.insert(e.id.clone(), crate::summary::excerpt(&m.plain_text(), 60));
                }
                if let Some(&i) = model_by_entry.get(&e.id) {
                    let s = &mut steps[i];
                    s.status = if m.stop_reason.as_deref() == Some("interrupted") {
                        StepStatus::Interrupted
                    } else if m.stop_reason.as_deref() == Some("error") {
                        StepStatus::Error
                    } else {
                        StepStatus::Ok
                    };
                    if s.duration_ms.is_none() {
                        s.duration_ms = elapsed(s.started_at, &r.ts);
                    }
                    if s.usage.is_none() {
                        s.usage = m.usage.clone();
                    }
                    let number = s.number;
                    for (call_id, tool, _) in m.tool_calls() {
                        model_by_call.insert(call_id.to_owned(), (number, tool.to_owned()));
                    }
                }
                for b in &m.content {
                    let Block::ToolResult {
                        call_id,
                        is_error,
                        code,
                        ..
                    } = b
                    else {
                        continue;
                    };
                    let status = match code.as_deref() {
                        Some(TOOL_OUTCOME_UNKNOWN) => StepStatus::Unknown,
                        Some(TOOL_NOT_STARTED) => StepStatus::NotStarted,
                        _ if *is_error => StepStatus::Error,
                        _ => StepStatus::Ok,
                    };
                    match tool_by_call
                        .get(call_id)
                        .copied()
                        .filter(|&i| steps[i].status == StepStatus::Running)
                    {
                        Some(i) => {
                            let s = &mut steps[i];
                            s.status = status;
                            s.duration_ms = elapsed(s.started_at, &r.ts);
                        }
                        None => {
                            // Answered without a dispatch: denied, closed as never
                            // started, or run by a host outside the operation API.
                            // Only calls a recorded model step asked for are steps.
                            let Some((parent, tool)) = model_by_call.get(call_id).cloned() else {
                                continue;
                            };
                            let status = match status {
                                StepStatus::Error if denied.contains(call_id) => StepStatus::Denied,
                                StepStatus::Error => StepStatus::NotStarted,
                                other @ (StepStatus::Ok
                                | StepStatus::Running
                                | StepStatus::Interrupted
                                | StepStatus::Unknown
                                | StepStatus::NotStarted
                                | StepStatus::Denied) => other,
                            };
                            push(
                                &mut steps,
                                StepKind::Tool,
                                tool,
                                status,
                                &current_op,
                                &r.ts,
                                Some(parent),
                                Some(e.id.clone()),
                                Some(call_id.clone()),
                            );
                        }
                    }
                }
            }
        }
    }
    // A model step still waiting once its operation ended, or once a later
    // attempt was made, was interrupted.
    let mut later_model_in_op: HashMap<String, bool> = HashMap::new();
    for s in steps.iter_mut().rev() {
        if s.kind != StepKind::Model {
            continue;
        }
        let later = later_model_in_op
            .insert(s.op.clone(), true)
            .unwrap_or(false);
        if s.status == StepStatus::Running && (later || open_ops.get(&s.op) == Some(&false)) {
            s.status = StepStatus::Interrupted;
        }
    }
    for s in &mut steps {
        if s.kind == StepKind::Tool
            && s.status == StepStatus::Running
            && open_ops.get(&s.op) == Some(&false)
        {
            s.status = StepStatus::Unknown;
        }
    }
    steps
}

#[allow(clippy::too_many_arguments)]
fn push(
    steps: &mut Vec<Step>,
    kind: StepKind,
    name: String,
    status: StepStatus,
    op: &str,
    started: &str,
    parent: Option<u32>,
    entry: Option<EntryId>,
    call_id: Option<String>,
) {
    steps.push(Step {
        number: steps.len() as u32 + 1,
        kind,
        name,
        status,
        op: op.to_owned(),
        started: started.to_owned(),
        started_at: time::parse(started),
        duration_ms: None,
        usage: None,
        parent,
        call_id,
        entry,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Entry, Message, ModelAttempted, OpStarted};

    fn op(seq: u64, ts: &str, op: OpRecord) -> Record {
        Record {
            seq,
            ts: ts.into(),
            body: Body::Op(op),
        }
    }

    fn reply(seq: u64, ts: &str, id: &EntryId) -> Record {
        Record {
            seq,
            ts: ts.into(),
            body: Body::Entry(Entry {
                id: id.clone(),
                parent: None,
                body: EntryBody::Message(Message::text(Role::Assistant, "done")),
            }),
        }
    }

    fn model_step(started: &str, answered: &str) -> Step {
        let entry = EntryId::parse("reply").unwrap();
        let records = [
            op(
                1,
                started,
                OpRecord::OpStarted(OpStarted {
                    op: "op-1".into(),
                    input: None,
                }),
            ),
            op(
                2,
                started,
                OpRecord::ModelAttempted(ModelAttempted {
                    op: "op-1".into(),
                    attempt: 1,
                    entry: entry.clone(),
                    provider: None,
                    model: Some("m".into()),
                }),
            ),
            reply(3, answered, &entry),
        ];
        let steps = derive(&records);
        assert_eq!(steps.len(), 2, "{steps:?}");
        steps[1].clone()
    }

    #[test]
    fn a_model_step_lasts_from_its_attempt_to_its_reply() {
        let s = model_step("2026-11-30T23:59:59.250Z", "2026-12-01T00:00:01.001Z");
        assert_eq!(s.status, StepStatus::Ok);
        assert_eq!(s.started, "2026-11-30T23:59:59.250Z", "as written");
        assert_eq!(s.started_at, time::parse("2026-11-30T23:59:59.250Z"));
        assert_eq!(s.duration_ms, Some(1751));
    }

    #[test]
    fn a_duration_is_unknown_when_a_time_is_not_rfc3339_or_runs_backwards() {
        let s = model_step("yesterday", "2026-12-01T00:00:01.001Z");
        assert_eq!((s.started.as_str(), s.started_at), ("yesterday", None));
        assert_eq!(s.duration_ms, None);
        let s = model_step("2026-12-01T00:00:01.001Z", "not a time");
        assert_eq!(s.duration_ms, None);
        let s = model_step("2026-12-01T00:00:01.001Z", "2026-12-01T00:00:00.000Z");
        assert_eq!(s.duration_ms, None, "the clock went back: no duration");
    }

    #[test]
    fn times_with_an_offset_are_compared_as_instants() {
        let s = model_step("2026-12-01T01:00:00+01:00", "2026-12-01T00:00:00.500Z");
        assert_eq!(s.duration_ms, Some(500));
    }
}
