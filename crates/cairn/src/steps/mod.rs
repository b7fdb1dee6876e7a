//! Steps: the numbered list of what happened (user inputs, model calls, tool
//! calls), derived from the records — so numbers are stable across restarts.
//! A tool step's parent is the model step whose reply requested the call.
//!
//! Operation records give steps their timing and status; messages no
//! operation accounts for (a fork's copied branch, sessions written with
//! `cairn append` or by another host) are steps too, derived from the
//! entries alone, so every session has steps and the same records always
//! give the same numbers.

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use serde::Serialize;

use crate::id::{EntryId, SessionId};
use crate::journal::{TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN};
use crate::record::{Block, Body, EntryBody, Message, OpRecord, Record, ResultBlock, Role, Usage};
use crate::time;

mod resolve;

pub use resolve::resolve;

/// The kind of the ignorable, log-only record a host appends when it
/// resumes an operation its process did not finish (RECORDS.md §6): tool
/// steps still running then were interrupted, and the time between the
/// record before it and it is downtime, not part of any step's duration.
pub const RESUMED: &str = "cairn.resumed";

/// What a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// A user input (that started an operation, or a user message).
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
    /// A model call whose reply never came (crash, interruption), or a tool
    /// whose process died before its result: a host resumed the operation
    /// (a [`RESUMED`] record), re-ran the call, or — told by the caller
    /// ([`interrupt_running`]) — nobody holds the session any more.
    Interrupted,
    /// A tool that started and whose outcome is unknown.
    Unknown,
    /// A tool call that never started (closed as such, or answered without
    /// running: invalid, interrupted).
    NotStarted,
    /// A tool call a person (or the host's approval rule) denied: never run.
    Denied,
}

impl StepStatus {
    /// The status as written in `--json` (`ok`, `not_started`, …).
    pub fn name(self) -> &'static str {
        match self {
            StepStatus::Ok => "ok",
            StepStatus::Error => "error",
            StepStatus::Running => "running",
            StepStatus::Interrupted => "interrupted",
            StepStatus::Unknown => "unknown",
            StepStatus::NotStarted => "not_started",
            StepStatus::Denied => "denied",
        }
    }
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
    /// The operation it belongs to (`None`: derived from entries no
    /// operation accounts for).
    pub op: Option<String>,
    /// When it started, as its record's `ts` says.
    pub started: String,
    /// `started` as an instant (`None` when that `ts` is not RFC 3339).
    #[serde(skip)]
    pub started_at: Option<Timestamp>,
    /// How long it took, when it ended: for a step its process died under,
    /// until the last record that process wrote.
    pub duration_ms: Option<u64>,
    /// Time no process ran while the step was under way (from the last
    /// record of the process that died to the [`RESUMED`] record of the
    /// one that took over), never part of `duration_ms`.
    pub downtime_ms: Option<u64>,
    /// Tokens used (model steps).
    pub usage: Option<Usage>,
    /// The step that caused it (a tool step's model step).
    pub parent: Option<u32>,
    /// The tool call id (tool steps).
    pub call_id: Option<String>,
    /// The entry it produced (the input, the reply, the tool result): the
    /// state right after the step ends there.
    pub entry: Option<EntryId>,
    /// What went in, whole: the user's text (input steps) or the tool's
    /// arguments as JSON (tool steps).
    pub input: Option<String>,
    /// What came out, whole: the reply's text, or the calls it asked for
    /// (model steps); the result's text (tool steps).
    pub output: Option<String>,
    /// The subagent session a tool step delegated to (from the
    /// `cairn:session/<id>` blob in its result).
    pub child: Option<SessionId>,
}

impl Step {
    /// The step's label, `s0001`.
    pub fn label(&self) -> String {
        label(self.number)
    }
}

/// The label of step `number`, `s0001`.
pub fn label(number: u32) -> String {
    format!("s{number:04}")
}

/// The step number a label names: `s` then at least four digits (`s0005`,
/// `s12345`), the form [`Step::label`] writes; `None` for anything else.
pub fn parse_label(query: &str) -> Option<u32> {
    let digits = query.strip_prefix('s')?;
    if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&n| n > 0)
}

/// Milliseconds from `from` to the instant `to` names; `None` when either is
/// not a time or `to` is earlier.
fn elapsed(from: Option<Timestamp>, to: &str) -> Option<u64> {
    let d = time::parse(to)?.duration_since(from?);
    u64::try_from(d.as_millis()).ok()
}

/// What a reply says, whole: its text, else the calls it asked for.
fn reply_output(m: &Message) -> Option<String> {
    let text = m.plain_text();
    if !text.trim().is_empty() {
        return Some(text);
    }
    let calls: Vec<&str> = m.tool_calls().map(|(_, name, _)| name).collect();
    (!calls.is_empty()).then(|| format!("asked for {}", calls.join(", ")))
}

/// A tool result's content as text: its text blocks, and what its images
/// and blobs are.
fn result_output(content: &[Block]) -> (String, Option<SessionId>) {
    let mut parts = Vec::new();
    let mut child = None;
    for b in content {
        match b {
            Block::Text { text } => parts.push(text.clone()),
            Block::Blob { uri, .. } => {
                child = child.or_else(|| crate::reference::referenced_session(b));
                parts.push(format!("[{uri}]"));
            }
            Block::Image { media_type, .. } => parts.push(format!("[image {media_type}]")),
            Block::Thinking { .. } | Block::ToolCall { .. } | Block::ToolResult { .. } => {}
        }
    }
    (parts.join("\n"), child)
}

/// The step a tool call's model step recorded: its number, operation, tool
/// and arguments.
struct Asked {
    number: u32,
    op: Option<String>,
    tool: String,
    arguments: String,
}

/// Derives the steps from a session's records, in `seq` order. Pure.
pub fn derive(records: &[Record]) -> Vec<Step> {
    let mut d = Deriving::new(records);
    let mut prev_ts: Option<&str> = None;
    for r in records {
        let alive = prev_ts.replace(&r.ts);
        match &r.body {
            Body::Header(_) => {}
            Body::Op(op) => d.op(r, op, alive),
            Body::Entry(e) => {
                if let EntryBody::Message(m) = &e.body {
                    d.message(r, &e.id, m);
                }
            }
        }
    }
    d.finish()
}

/// The state of [`derive`] as it goes through the records.
struct Deriving<'r> {
    steps: Vec<Step>,
    /// Messages an operation accounts for: its inputs…
    op_inputs: HashSet<&'r EntryId>,
    /// … and its attempts' replies.
    attempted: HashSet<&'r EntryId>,
    user_text: HashMap<EntryId, String>,
    model_by_entry: HashMap<EntryId, usize>,
    asked: HashMap<String, Asked>,
    tool_by_call: HashMap<String, usize>,
    /// Each operation seen, and whether it is still open.
    open_ops: HashMap<String, bool>,
    /// Calls whose approval was answered no.
    denied: HashSet<String>,
    /// Tool steps their process died under, whose later result settles them.
    cut: HashSet<usize>,
}

impl<'r> Deriving<'r> {
    fn new(records: &'r [Record]) -> Deriving<'r> {
        let mut op_inputs = HashSet::new();
        let mut attempted = HashSet::new();
        for r in records {
            match &r.body {
                Body::Op(OpRecord::OpStarted(s)) => op_inputs.extend(s.input.as_ref()),
                Body::Op(OpRecord::ModelAttempted(m)) => {
                    attempted.insert(&m.entry);
                }
                Body::Header(_) | Body::Op(_) | Body::Entry(_) => {}
            }
        }
        Deriving {
            steps: Vec::new(),
            op_inputs,
            attempted,
            user_text: HashMap::new(),
            model_by_entry: HashMap::new(),
            asked: HashMap::new(),
            tool_by_call: HashMap::new(),
            open_ops: HashMap::new(),
            denied: HashSet::new(),
            cut: HashSet::new(),
        }
    }

    /// An operation record; `alive`: the `ts` of the record before it.
    fn op(&mut self, r: &Record, op: &OpRecord, alive: Option<&str>) {
        let steps = &mut self.steps;
        match op {
            OpRecord::OpStarted(s) => {
                self.open_ops.insert(s.op.clone(), true);
                let text = s
                    .input
                    .as_ref()
                    .and_then(|i| self.user_text.get(i))
                    .cloned();
                let i = push(steps, StepKind::Input, Some(&s.op), &r.ts);
                let step = &mut steps[i];
                step.name = text
                    .as_deref()
                    .map(|t| crate::summary::excerpt(t, 60))
                    .unwrap_or_default();
                step.status = StepStatus::Ok;
                step.entry = s.input.clone();
                step.input = text;
            }
            OpRecord::ModelAttempted(m) => {
                let i = push(steps, StepKind::Model, Some(&m.op), &r.ts);
                steps[i].name = m.model.clone().unwrap_or_else(|| "model".into());
                steps[i].entry = Some(m.entry.clone());
                self.model_by_entry.insert(m.entry.clone(), i);
            }
            OpRecord::UsageSettled(u) => {
                if let Some(&i) = self.model_by_entry.get(&u.entry) {
                    steps[i].usage = Some(u.usage.clone());
                    if u.latency_ms.is_some() {
                        steps[i].duration_ms = u.latency_ms;
                    }
                }
            }
            OpRecord::ToolDispatched(t) => {
                if let Some(&earlier) = self.tool_by_call.get(&t.call_id)
                    && steps[earlier].status == StepStatus::Running
                {
                    // Dispatched again: a re-run after its process died.
                    steps[earlier].status = StepStatus::Interrupted;
                }
                let i = push(steps, StepKind::Tool, Some(&t.op), &r.ts);
                let step = &mut steps[i];
                step.name = t.tool.clone();
                step.entry = Some(t.result_entry.clone());
                step.call_id = Some(t.call_id.clone());
                if let Some(a) = self.asked.get(&t.call_id) {
                    step.parent = Some(a.number);
                    step.input = Some(a.arguments.clone());
                }
                self.tool_by_call.insert(t.call_id.clone(), i);
            }
            OpRecord::OpFinished(f) => {
                self.open_ops.insert(f.op.clone(), false);
            }
            OpRecord::ApprovalResolved(a) => {
                if a.approved {
                    self.denied.remove(&a.call_id);
                } else {
                    self.denied.insert(a.call_id.clone());
                }
            }
            OpRecord::Ignored(u) if u.kind == RESUMED => {
                died(steps, &mut self.cut, alive, &r.ts);
            }
            OpRecord::ApprovalRequested(_) | OpRecord::InputQueued(_) | OpRecord::Ignored(_) => {}
        }
    }

    /// A message entry: an input, a reply (a model step), tool results.
    fn message(&mut self, r: &Record, id: &EntryId, m: &Message) {
        if m.role == Role::User {
            let text = m.plain_text();
            if !self.op_inputs.contains(id) && !is_only_results(m) {
                // A user message no operation started from: an input.
                let i = push(&mut self.steps, StepKind::Input, None, &r.ts);
                let step = &mut self.steps[i];
                step.name = crate::summary::excerpt(&text, 60);
                step.status = StepStatus::Ok;
                step.entry = Some(id.clone());
                step.input = Some(text.clone());
            }
            self.user_text.insert(id.clone(), text);
        }
        if m.role == Role::Assistant && !self.attempted.contains(id) {
            // A reply no model attempt announced: a model step of its own.
            let i = push(&mut self.steps, StepKind::Model, None, &r.ts);
            self.steps[i].name = m.model.clone().unwrap_or_else(|| "model".into());
            self.steps[i].entry = Some(id.clone());
            self.model_by_entry.insert(id.clone(), i);
        }
        if let Some(&i) = self.model_by_entry.get(id) {
            self.reply(i, r, m);
        }
        for res in m.results() {
            self.result(r, id, &res);
        }
    }

    /// The reply of model step `i`.
    fn reply(&mut self, i: usize, r: &Record, m: &Message) {
        let s = &mut self.steps[i];
        s.status = match m.stop_reason.as_deref() {
            Some("interrupted") => StepStatus::Interrupted,
            Some("error") => StepStatus::Error,
            _ => StepStatus::Ok,
        };
        if s.duration_ms.is_none() && s.op.is_some() {
            s.duration_ms = elapsed(s.started_at, &r.ts);
        }
        if s.usage.is_none() {
            s.usage = m.usage.clone();
        }
        s.output = reply_output(m);
        for (call_id, tool, arguments) in m.tool_calls() {
            self.asked.insert(
                call_id.to_owned(),
                Asked {
                    number: s.number,
                    op: s.op.clone(),
                    tool: tool.to_owned(),
                    arguments: arguments.to_string(),
                },
            );
        }
    }

    /// A tool result in entry `id`: it ends its dispatched step, or is a
    /// step of its own (a call answered without a dispatch).
    fn result(&mut self, r: &Record, id: &EntryId, res: &ResultBlock<'_>) {
        let status = match res.code {
            Some(TOOL_OUTCOME_UNKNOWN) => StepStatus::Unknown,
            Some(TOOL_NOT_STARTED) => StepStatus::NotStarted,
            _ if res.is_error => StepStatus::Error,
            _ => StepStatus::Ok,
        };
        let (output, child) = result_output(res.content);
        let steps = &mut self.steps;
        let cut = &mut self.cut;
        let dispatched = self.tool_by_call.get(res.call_id).copied().filter(|&i| {
            steps[i].status == StepStatus::Running
                || (steps[i].status == StepStatus::Interrupted && cut.contains(&i))
        });
        let i = match dispatched {
            Some(i) => {
                let s = &mut steps[i];
                s.status = status;
                if !cut.remove(&i) {
                    s.duration_ms = elapsed(s.started_at, &r.ts);
                }
                i
            }
            None => {
                // Answered without a dispatch: denied, closed as never
                // started, run by a host outside the operation API, or
                // written with no operation at all. Only calls a model step
                // asked for are steps.
                let Some(a) = self.asked.get(res.call_id) else {
                    return;
                };
                let status = match status {
                    StepStatus::Error if self.denied.contains(res.call_id) => StepStatus::Denied,
                    StepStatus::Error if a.op.is_some() => StepStatus::NotStarted,
                    other @ (StepStatus::Ok
                    | StepStatus::Error
                    | StepStatus::Running
                    | StepStatus::Interrupted
                    | StepStatus::Unknown
                    | StepStatus::NotStarted
                    | StepStatus::Denied) => other,
                };
                let i = push(steps, StepKind::Tool, a.op.as_deref(), &r.ts);
                let s = &mut steps[i];
                s.name = a.tool.clone();
                s.status = status;
                s.parent = Some(a.number);
                s.entry = Some(id.clone());
                s.call_id = Some(res.call_id.to_owned());
                s.input = Some(a.arguments.clone());
                i
            }
        };
        steps[i].output = Some(output);
        steps[i].child = child;
    }

    /// The steps, once every record is in: a model step still waiting once
    /// its operation ended, or once a later attempt was made, was
    /// interrupted; a tool step still running once its operation ended has
    /// an unknown outcome.
    fn finish(mut self) -> Vec<Step> {
        let mut later_model_in_op: HashSet<String> = HashSet::new();
        for s in self.steps.iter_mut().rev() {
            let (StepKind::Model, Some(op)) = (s.kind, &s.op) else {
                continue;
            };
            let later = !later_model_in_op.insert(op.clone());
            if s.status == StepStatus::Running && (later || self.open_ops.get(op) == Some(&false)) {
                s.status = StepStatus::Interrupted;
            }
        }
        for s in &mut self.steps {
            if s.kind == StepKind::Tool
                && s.status == StepStatus::Running
                && s.op.as_ref().and_then(|op| self.open_ops.get(op)) == Some(&false)
            {
                s.status = StepStatus::Unknown;
            }
        }
        self.steps
    }
}

/// A host resumed at `resumed` the operation its process left at
/// `alive` (the last record it wrote): every step still running was
/// interrupted there. A tool step lasted until `alive`, the time between
/// is its downtime, and its result, when recovery writes one, settles it
/// (`cut`).
fn died(steps: &mut [Step], cut: &mut HashSet<usize>, alive: Option<&str>, resumed: &str) {
    let alive_at = alive.and_then(time::parse);
    for (i, s) in steps.iter_mut().enumerate() {
        if s.status != StepStatus::Running {
            continue;
        }
        s.status = StepStatus::Interrupted;
        if s.kind == StepKind::Tool {
            s.duration_ms = alive.and_then(|a| elapsed(s.started_at, a));
            s.downtime_ms = elapsed(alive_at, resumed);
            cut.insert(i);
        }
    }
}

/// Marks the steps still running as interrupted: for a caller that knows
/// the session's process is gone (its status is `interrupted`: an open
/// operation nobody holds), which the records alone cannot tell.
pub fn interrupt_running(steps: &mut [Step]) {
    for s in steps {
        if s.status == StepStatus::Running {
            s.status = StepStatus::Interrupted;
        }
    }
}

/// Whether a user-role message holds tool results and nothing else (some
/// hosts put results in user messages): not an input.
fn is_only_results(m: &Message) -> bool {
    !m.content.is_empty()
        && m.content
            .iter()
            .all(|b| matches!(b, Block::ToolResult { .. }))
}

/// Appends a running step with nothing known yet but its kind, operation
/// and start; returns its index.
fn push(steps: &mut Vec<Step>, kind: StepKind, op: Option<&str>, started: &str) -> usize {
    steps.push(Step {
        number: steps.len() as u32 + 1,
        kind,
        name: String::new(),
        status: StepStatus::Running,
        op: op.map(str::to_owned),
        started: started.to_owned(),
        started_at: time::parse(started),
        duration_ms: None,
        downtime_ms: None,
        usage: None,
        parent: None,
        call_id: None,
        entry: None,
        input: None,
        output: None,
        child: None,
    });
    steps.len() - 1
}

#[cfg(test)]
mod tests;
