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
use sha2::{Digest, Sha256};

use crate::error::Invalid;
use crate::id::{EntryId, SessionId};
use crate::projection::{CheckError, Context, EntrySource, Projector};
use crate::record::{Body, EffectClass, Entry, EntryBody, OpRecord, Outcome, Role, ToolDispatched};
use crate::tree::Tree;

/// Code of a tool result recorded when a tool started but its outcome is unknown.
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";
/// Code of a tool result recorded for a call that never started.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";

/// The idempotency key of a tool call: the same for the same session,
/// operation and call id, after any number of restarts. Pass it downstream
/// (e.g. as an `Idempotency-Key` HTTP header) so a re-run is recognised.
///
/// It is `ik-` followed by the first 32 hex digits of SHA-256 over the UTF-8
/// bytes of `session`, `op` and `call_id`, each followed by a 0x00 byte.
pub fn idempotency_key(session: &SessionId, op: &str, call_id: &str) -> String {
    let mut h = Sha256::new();
    for part in [session.as_str(), op, call_id] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut out = String::with_capacity(35);
    out.push_str("ik-");
    for b in &digest[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// SHA-256, as 64 lower-case hex digits, of the canonical JSON of a tool's
/// arguments (`docs/FORMAT.md` §5, "Argument hash", is the exact form):
///
/// - no whitespace; arrays in order; object members sorted by key, comparing
///   the keys' UTF-8 bytes (that is, by Unicode code point);
/// - strings escape `"` and `\`, write U+0008, U+0009, U+000A, U+000C and
///   U+000D as `\b`, `\t`, `\n`, `\f`, `\r` and the other controls below
///   U+0020 as `\u00xx` (lower-case hex); everything else, `/` and non-ASCII
///   included, is its own UTF-8 bytes;
/// - an integer (a number written without fraction or exponent that fits in
///   an `i64` or a `u64`) is its decimal digits; any other number is the
///   nearest `f64` in its shortest round-trip digits, positional with at
///   least one fractional digit when it is 0 or 1e-5 ≤ |x| < 1e16 (`100.0`,
///   `0.00001`, `-0.0`), else `d[.ddd]e±n` (`1e+16`, `1.5e-7`).
///
/// This is not RFC 8785 (JCS), which sorts keys by UTF-16 code units and
/// writes numbers as ECMAScript does (`1`, not `1.0`); the hash is on disk, so
/// the form stays as it is. cairn writes the hash and never checks it.
pub fn args_hash(arguments: &Value) -> String {
    let mut canonical = Vec::new();
    write_canonical(arguments, &mut canonical);
    let digest = Sha256::digest(&canonical);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, k);
                out.push(b':');
                write_canonical(&m[*k], out);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(x, out);
            }
            out.push(b']');
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            let _ = serde_json::to_writer(&mut *out, v);
        }
    }
}

/// A tool call that was dispatched (T1 is on disk) but has no result (no T2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingCall {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// Hash of its arguments.
    pub args_hash: String,
    /// Its effect class.
    pub effect: EffectClass,
    /// Its idempotency key.
    pub key: String,
    /// The preallocated id of its result entry.
    pub result_entry: EntryId,
}

impl From<&ToolDispatched> for PendingCall {
    fn from(t: &ToolDispatched) -> PendingCall {
        PendingCall {
            call_id: t.call_id.clone(),
            tool: t.tool.clone(),
            args_hash: t.args_hash.clone(),
            effect: t.effect,
            key: t.key.clone(),
            result_entry: t.result_entry.clone(),
        }
    }
}

/// A tool call requested by the model that never started.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
pub enum Verdict {
    /// Tools were dispatched and have no result on the branch: they may have
    /// run (or, while a writer holds the session, may still be running).
    /// Never re-run blindly (see each call's effect class).
    IndeterminateTool {
        /// The operation.
        op: String,
        /// The calls, in dispatch order.
        calls: Vec<PendingCall>,
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
    pub fn verdict_on(&self, ctx: &Context) -> Verdict {
        let unanswered = unanswered_calls(ctx);
        let op = self.last.as_ref().map(|p| p.id.clone());
        let Some(p) = &self.last else {
            return match not_started(unanswered, None) {
                calls if calls.is_empty() => Verdict::Ready { op },
                calls => Verdict::ToolsNotStarted { op, calls },
            };
        };
        // Dispatched by the last operation and answered nowhere: indeterminate.
        let pending: Vec<PendingCall> = p
            .dispatched
            .iter()
            .filter(|d| !d.answered && unanswered.iter().any(|c| c.call_id == d.record.call_id))
            .map(|d| PendingCall::from(&d.record))
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
    pub fn unresolved_dispatch(&self, proj: &Projector) -> Option<&ToolDispatched> {
        self.last.as_ref()?.dispatched.iter().find_map(|d| {
            (!d.answered && proj.call_state(&d.record.call_id) == Some(false)).then_some(&d.record)
        })
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
pub fn unanswered_calls(ctx: &Context) -> Vec<OpenCall> {
    // Borrowed while scanning; only the calls left open are copied.
    let mut open: Vec<(&str, &str, &Value, &EntryId)> = Vec::new();
    for cm in ctx.messages() {
        let m = cm.message();
        for (call_id, tool, arguments) in m.tool_calls() {
            open.push((call_id, tool, arguments, cm.entry()));
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
    let answered: HashSet<&str> = match &entry.body {
        EntryBody::Message(m) => m.tool_results().collect(),
        EntryBody::AppState(_)
        | EntryBody::Compaction(_)
        | EntryBody::Checkout(_)
        | EntryBody::Settings(_)
        | EntryBody::Label(_)
        | EntryBody::SessionInfo(_)
        | EntryBody::Custom(_)
        | EntryBody::Ignored(_) => HashSet::new(),
    };
    let left: Vec<OpenCall> = unanswered_calls(ctx)
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
        .map(|n| tree.node(n).id.clone());
    let mut after = None;
    for child in tree.children(tree.get(at)) {
        if let EntryBody::Message(m) = src.entry(child)?.body {
            let results: HashSet<&str> = m.tool_results().collect();
            if left.iter().all(|c| results.contains(c.call_id.as_str())) {
                after = Some(tree.node(child).id.clone());
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
        let message = match &e.body {
            EntryBody::Message(m) => Some(m),
            EntryBody::AppState(_)
            | EntryBody::Compaction(_)
            | EntryBody::Checkout(_)
            | EntryBody::Settings(_)
            | EntryBody::Label(_)
            | EntryBody::SessionInfo(_)
            | EntryBody::Custom(_)
            | EntryBody::Ignored(_) => None,
        };
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
                if let Some(d) = self.unresolved_dispatch(proj) {
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
                match proj.call_state(&t.call_id) {
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
    fold.verdict_on(&ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn idempotency_key_is_deterministic_and_distinct() {
        let s = SessionId::parse("01jdzq5m8k0000000000000000").unwrap();
        let a = idempotency_key(&s, "op-1", "call-1");
        assert_eq!(a, idempotency_key(&s, "op-1", "call-1"));
        assert_ne!(a, idempotency_key(&s, "op-1", "call-2"));
        assert_ne!(a, idempotency_key(&s, "op-2", "call-1"));
        assert_ne!(
            idempotency_key(&s, "op-1", "call-1x"),
            idempotency_key(&s, "op-1c", "all-1x")
        );
        assert_eq!(a.len(), 35);
        assert!(a.starts_with("ik-"));
    }

    #[test]
    fn args_hash_ignores_key_order() {
        assert_eq!(
            args_hash(&json!({"a":1,"b":[1,{"y":2,"x":1}]})),
            args_hash(&json!({"b":[1,{"x":1,"y":2}],"a":1}))
        );
        assert_ne!(args_hash(&json!({"a":1})), args_hash(&json!({"a":2})));
    }
    fn canonical(json_text: &str) -> String {
        let v: Value = serde_json::from_str(json_text).unwrap();
        let mut out = Vec::new();
        write_canonical(&v, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn canonical_json_sorts_keys_by_code_point_and_drops_whitespace() {
        // By code point: "ｚ" (U+FF5A) before "😀" (U+1F600); JCS, by UTF-16
        // code units (0xFF5A > 0xD83D), would put them the other way round.
        assert_eq!(
            canonical(
                r#"{ "b" : 1, "a" : { "y" : [ true , null ], "x" : false },
                "A": 3, "é": 4, "z": 5, "😀": 6, "": 7, "ｚ": 8, "aa": 9 }"#
            ),
            r#"{"":7,"A":3,"a":{"x":false,"y":[true,null]},"aa":9,"b":1,"z":5,"é":4,"ｚ":8,"😀":6}"#
        );
        assert_eq!(
            canonical(r#"{"k":1,"k":2}"#),
            r#"{"k":2}"#,
            "last duplicate"
        );
    }

    #[test]
    fn canonical_json_number_forms() {
        let cases = [
            ("0", "0"),
            ("-7", "-7"),
            ("18446744073709551615", "18446744073709551615"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("18446744073709551616", "1.8446744073709552e+19"),
            ("-0", "-0.0"),
            ("1.0", "1.0"),
            ("1e2", "100.0"),
            ("1E2", "100.0"),
            ("12e3", "12000.0"),
            ("0.1", "0.1"),
            ("100.0e-2", "1.0"),
            ("0.00001", "0.00001"),
            ("0.000001", "1e-6"),
            ("1.5e-7", "1.5e-7"),
            ("1e15", "1000000000000000.0"),
            ("1e16", "1e+16"),
            ("123456789012345678901234567890", "1.2345678901234568e+29"),
            ("2.5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ];
        for (text, form) in cases {
            assert_eq!(canonical(text), form, "{text}");
        }
    }

    #[test]
    fn canonical_json_string_escapes() {
        // In: every short escape, two other controls, an escaped solidus, DEL,
        // U+2028, a non-ASCII letter and a surrogate pair.
        let text = r#"["\u0000\u001f\b\f\n\r\t\"\\\/\u007f\u2028é\ud83d\ude00"]"#;
        let form = "[\"\\u0000\\u001f\\b\\f\\n\\r\\t\\\"\\\\/\u{7f}\u{2028}é😀\"]";
        assert_eq!(canonical(text), form);
    }

    #[test]
    fn args_hash_is_the_sha256_of_the_canonical_form() {
        // printf '{"a":1,"b":[1.0,"x"]}' | sha256sum
        assert_eq!(
            args_hash(&json!({"b": [1.0, "x"], "a": 1})),
            "f01ecc739f062d95c43a8287a4ea0f9cf3840e01f45010162764c0d2399923fb"
        );
    }
}
