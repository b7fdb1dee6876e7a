//! Typed errors, one enum per operation family. Every message says what is
//! wrong and, where there is one, what to do about it.
//!
//! One convention for causes: a message never prints its cause; the cause
//! (an OS error, say) is returned by `source()`, and whoever shows the error
//! to a person prints the chain (the `cairn` CLI joins it with `: `).
//!
//! Every I/O variant carries an [`IoFailure`], the one "cannot ACTION
//! LOCATION" shape; [`Invalid`] has one variant per rule an append breaks;
//! [`Damage`] says what an open found and where. [`with_causes`] joins the
//! chain where one line must carry it (the CLI's `error:` lines, fsck's
//! reasons, a poisoned handle, the agent's tool errors).

use std::io;

use crate::id::InvalidId;

/// An error and its causes as one line, joined with `: ` (for a message
/// that must carry a whole error as text, such as a poisoned handle's cause).
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// Damage found in a stored session: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The session file (or database and session) that holds it.
    pub location: String,
    /// 1-based line (record `seq` + 1 where seq is intact).
    pub line: u64,
    /// Byte offset of the line's first byte (0 for backends without offsets).
    pub offset: u64,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is damaged at line {} (byte offset {}): {}. The file was left untouched; \
             `cairn fsck` reports every problem and `cairn fsck --salvage OUT` writes a repaired copy",
            self.location, self.line, self.offset, self.problem
        )
    }
}

/// Errors creating or opening a session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// No session by that id or path.
    #[error("no session {session} in {location}; `cairn ls` lists the sessions there")]
    NotFound {
        /// The session asked for.
        session: String,
        /// Where it was looked for.
        location: String,
    },
    /// A session with that id already exists.
    #[error("session {session} already exists in {location}")]
    AlreadyExists {
        /// The session.
        session: String,
        /// Where.
        location: String,
    },
    /// Another writer holds the session.
    #[error(
        "session {session} is in use by {}; wait for it to finish, or open it read-only",
        holder.map_or_else(|| "another process".to_owned(), |p| format!("process {p}"))
    )]
    InUse {
        /// The session.
        session: String,
        /// The holder's process id, when known.
        holder: Option<u32>,
    },
    /// A record other than a torn last one is damaged.
    #[error("{0}")]
    Damaged(Box<Damage>),
    /// The session was written by a newer format version.
    #[error(
        "{location} uses record format version {found}, but this cairn reads versions up to {supported}; \
         upgrade cairn to open it (the file was not changed)"
    )]
    NewerFormat {
        /// The session file.
        location: String,
        /// The version in its header.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The path or id cannot name a session.
    #[error(transparent)]
    InvalidId(#[from] InvalidId),
    /// The file is not a session (empty, or its first record is not a header).
    #[error("{location} is not a cairn session: {problem} (the file was not changed)")]
    NotASession {
        /// The file.
        location: String,
        /// Why.
        problem: String,
    },
    /// An I/O error on the session's file or database (the OS error is the
    /// `source()`).
    #[error(transparent)]
    Io(IoFailure),
}

/// Errors appending to a session (entries, checkouts, operation records, sync).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// An earlier write or sync failed; the handle refuses further writes.
    #[error(
        "session {session} refuses writes after an earlier I/O failure ({cause}); reopen it: \
         acknowledged records are safe and any torn tail is cut on reopen"
    )]
    Poisoned {
        /// The session.
        session: String,
        /// The failure that poisoned the handle.
        cause: String,
    },
    /// The session was opened read-only.
    #[error("session {session} is open read-only; open it for writing to append")]
    ReadOnly {
        /// The session.
        session: String,
    },
    /// The record breaks an invariant; nothing was written. (The message
    /// includes the [`Invalid`]'s: it is what the error is, not its cause.)
    #[error("{0}; nothing was written")]
    Invalid(Invalid),
    /// A write or sync failed; the handle is now poisoned (the OS error is
    /// the `source()`).
    #[error("cannot {action} {location} (the session refuses further writes until reopened)")]
    Io {
        /// "write" or "sync".
        action: &'static str,
        /// The session file.
        location: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Reading a record needed to update the context failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

impl From<Invalid> for AppendError {
    fn from(i: Invalid) -> AppendError {
        AppendError::Invalid(i)
    }
}

/// A record rejected at append time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Invalid {
    /// The parent is not an entry of the session.
    #[error("parent {0} is not an entry of this session")]
    MissingParent(String),
    /// The id is already used.
    #[error("entry id {0} is already used in this session")]
    DuplicateId(String),
    /// The id was preallocated for another record.
    #[error("entry id {0} is reserved for {1}")]
    Reserved(String, String),
    /// A tool result answers no open call on the branch.
    #[error("tool result for call {0:?} answers no tool call on the current branch")]
    NoSuchCall(String),
    /// A tool result answers a call that already has one.
    #[error("tool call {0:?} already has a result on the current branch")]
    AlreadyAnswered(String),
    /// A compaction's `first_kept` is not on the branch.
    #[error("compaction keeps from {0}, which is not on the current branch")]
    FirstKeptOffBranch(String),
    /// A compaction would separate a tool call from its result.
    #[error(
        "compaction keeping from {first_kept} would separate tool call {call_id:?} from its result; keep from the call instead"
    )]
    SplitsToolCall {
        /// The proposed first kept entry.
        first_kept: String,
        /// The call that would be separated.
        call_id: String,
    },
    /// A label's target is not an entry, or its name is not valid.
    #[error("label {name:?}: {problem}")]
    Label {
        /// The label name.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// A `tool_dispatched` record's idempotency key is not the documented
    /// derivation (`journal::idempotency_key`).
    #[error(
        "tool_dispatched for call {call_id:?} has idempotency key {found:?}, expected {expected:?} (derived from the session, operation and call ids; see FORMAT.md section 5)"
    )]
    IdempotencyKey {
        /// The call.
        call_id: String,
        /// The key in the record.
        found: String,
        /// The derived key.
        expected: String,
    },
    /// The entry would start a branch (a checkout, a fork, an explicit
    /// parent) at a point where tool calls have no result: a provider would
    /// receive them unanswered.
    #[error(
        "{at} leaves tool call(s) {} without a result on its branch; {hint}",
        calls.join(", ")
    )]
    UnansweredCalls {
        /// The entry the branch would start at.
        at: String,
        /// The unanswered calls.
        calls: Vec<String>,
        /// What to do instead (the nearest safe entries).
        hint: String,
    },
    /// An id does not follow the id rules.
    #[error(transparent)]
    Id(#[from] InvalidId),
    /// A tool call id is used twice on the branch.
    #[error("tool call id {0:?} is already used on the current branch; call ids must be unique")]
    CallIdReused(String),
    /// A `custom` entry without a namespace.
    #[error("a custom entry needs a namespace (who owns it, e.g. \"myapp.notes\")")]
    NoNamespace,
    /// A tool result whose content holds a block other than text, image or blob.
    #[error(
        "a tool_result's content holds only text, image and blob blocks: put tool calls and results at the top level of a message"
    )]
    ResultContent,
    /// An operation is open: another cannot start.
    #[error(
        "operation {0} is still open: finish it (or recover the session) before starting another"
    )]
    OperationOpen(String),
    /// An operation id that an earlier operation used.
    #[error("operation id {0} is already used")]
    OperationIdUsed(String),
    /// An operation record of an operation that is not the open one.
    #[error("operation {0} is not the open operation; start it first")]
    NotTheOpenOperation(String),
    /// A ticket of another operation.
    #[error("the ticket belongs to operation {ticket}, not {operation}")]
    WrongOperation {
        /// The ticket's operation.
        ticket: String,
        /// The operation it was given to.
        operation: String,
    },
    /// An id to preallocate is already an entry or reserved.
    #[error("entry id {0} is already used or reserved")]
    IdTaken(String),
    /// A record that must use a preallocated id uses another.
    #[error("{record} must use its preallocated id {expected}, not {found}")]
    NotPreallocated {
        /// What must use it, e.g. "the assistant entry of model attempt 1".
        record: String,
        /// The preallocated id.
        expected: String,
        /// The id used.
        found: String,
    },
    /// A new operation while calls of the last one were dispatched and have
    /// no result.
    #[error(
        "tool call(s) {calls} of operation {op} were dispatched and have no result: recover the session (`cairn recover`) before starting another operation"
    )]
    DispatchedWithoutResult {
        /// The operation.
        op: String,
        /// The calls, comma-separated.
        calls: String,
    },
    /// A model attempt's reply that is not an assistant message.
    #[error("a model attempt's reply is an assistant message")]
    NotAnAssistantReply,
    /// A tool call that is not an unanswered call of the current branch.
    #[error("tool call {0:?} is not on the current branch")]
    CallNotOnBranch(String),
    /// A tool call dispatched before.
    #[error("tool call {0:?} was already dispatched")]
    AlreadyDispatched(String),
    /// An approval answer without a request.
    #[error("no approval was requested for tool call {0:?}")]
    NoApprovalRequested(String),
    /// A call with side effects cannot be re-run without a person.
    #[error(
        "tool call {call_id:?} ({tool}) has side effects and may already have run: re-running it needs a person's decision (rerun_side_effect), or record the outcome as unknown"
    )]
    SideEffectRerun {
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
    },
    /// A subagent session beyond the maximum delegation depth.
    #[error(
        "spawning from session {session} would reach delegation depth {depth}, beyond the maximum {max}"
    )]
    TooDeep {
        /// The parent session.
        session: String,
        /// The depth the child would have.
        depth: u32,
        /// The maximum.
        max: u32,
    },
}

/// Errors reading records of an open session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A record no longer reads back as it did at open.
    #[error("{0}")]
    Damaged(Box<Damage>),
    /// An I/O error (the OS error is the `source()`).
    #[error("cannot read {location}")]
    Io {
        /// The session file.
        location: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// No record with that seq.
    #[error("session has no record {0}")]
    NoSuchRecord(u64),
}

/// Errors resolving an entry reference (id, unique id prefix or label).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LookupError {
    /// Nothing matches.
    #[error("no entry, label or id prefix {0:?} in this session; `cairn tree` shows the entries")]
    NotFound(String),
    /// More than one entry id starts with the prefix.
    #[error("entry prefix {query:?} is ambiguous: it matches {}; type more characters", candidates.join(", "))]
    Ambiguous {
        /// The prefix.
        query: String,
        /// The matching ids (at most 10).
        candidates: Vec<String>,
    },
    /// A step label past the session's last step.
    #[error("no step {step} in this session (it has {last}); `cairn steps` lists them")]
    NoSuchStep {
        /// The label asked for.
        step: String,
        /// How many steps the session has.
        last: u32,
    },
    /// A step that produced no entry to go to.
    #[error(
        "step {step} ({status}) produced no entry to go to; pick the step before it or after it (`cairn steps`)"
    )]
    StepWithoutEntry {
        /// The step's label.
        step: String,
        /// Its status (`interrupted`, `running`, …).
        status: &'static str,
    },
    /// A step label that is also an entry id or a label.
    #[error(
        "{query:?} names both a step (entry {step_entry}) and an entry or label (entry {other}); use the entry id you mean"
    )]
    StepOrEntry {
        /// What was asked for.
        query: String,
        /// The entry the step produced.
        step_entry: String,
        /// The entry the id or label names.
        other: String,
    },
    /// A block of the session's persisted index failed its check after
    /// the open, so the lookup could not see every entry.
    #[error(
        "cannot resolve {query:?}: {problem}; open the session again (its index is rebuilt from the log)"
    )]
    IndexDamaged {
        /// What was asked for.
        query: String,
        /// What the index check found.
        problem: String,
    },
    /// The records needed to number the steps could not be read.
    #[error("cannot number the steps to resolve {query:?}: {problem}; run `cairn fsck`")]
    Unreadable {
        /// What was asked for.
        query: String,
        /// The read error and its causes.
        problem: String,
    },
}

/// Errors of store-wide operations: resolving, listing, removing, forking.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No session matches.
    #[error("no session matches {query:?} in {store}; `cairn ls` lists them")]
    NoSuchSession {
        /// What was asked for.
        query: String,
        /// The store.
        store: String,
    },
    /// More than one session id starts with the prefix.
    #[error("session prefix {query:?} is ambiguous: it matches {}; type more characters", candidates.join(", "))]
    Ambiguous {
        /// The prefix.
        query: String,
        /// The matching ids (at most 10).
        candidates: Vec<String>,
    },
    /// The store has no sessions (for "most recent").
    #[error("the store {0} has no sessions yet; `cairn new` creates one")]
    Empty(String),
    /// Opening a session failed.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Appending failed.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// Reading failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// An entry reference did not resolve.
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// An I/O error on the store itself (the OS error is the `source()`).
    #[error(transparent)]
    Io(IoFailure),
}

/// An operating-system failure while doing something to a named file,
/// directory or database: "cannot {action} {location}", with the OS error
/// as its `source()`.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {location}")]
pub struct IoFailure {
    /// What was being done ("open", "read", "lock", "list", …).
    pub action: &'static str,
    /// The file, directory or database.
    pub location: String,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

impl IoFailure {
    /// The failure to do `action` to `location`.
    pub fn new(action: &'static str, location: impl Into<String>, source: io::Error) -> IoFailure {
        IoFailure {
            action,
            location: location.into(),
            source,
        }
    }
}
