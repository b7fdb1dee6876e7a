//! The schemas of the core's types that the shapes carry. The core knows no
//! OpenAPI, so each type here only describes one of them (what its `serde`
//! form is) and is named after it in the document: a shape's field of type
//! `cairn::Verdict` says `#[schema(value_type = schema::Verdict)]`. The
//! server's conformance test checks real answers against them.

use std::borrow::Cow;

use serde::Serialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::{PartialSchema, ToSchema};

/// An entry id or label name: 1 to 64 of A-Z, a-z, 0-9, '-', '_' and '.'.
pub struct EntryId;

impl PartialSchema for EntryId {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some("^[A-Za-z0-9._-]{1,64}$"))
            .description(Some(
                "An entry id or label name: 1 to 64 of A-Z, a-z, 0-9, '-', '_' and '.'.",
            ))
            .into()
    }
}

impl ToSchema for EntryId {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("EntryId")
    }
}

/// A session's status: its last operation's phase, and whether a writer
/// holds it.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Status {
    /// No operation yet.
    Init,
    /// An operation is open and a writer holds the session.
    Running,
    /// An operation is open and nobody holds the session.
    Interrupted,
    /// The open operation awaits a person.
    Paused,
    /// The last operation completed.
    Succeeded,
    /// The last operation failed or was aborted.
    Failed,
}

/// Which recovery verdict a session is in.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Tools started and have no result.
    IndeterminateTool,
    /// The operation finished.
    Finished,
    /// A person was asked and never answered.
    AwaitingApproval,
    /// A model request got no reply.
    ProviderInterrupted,
    /// The model asked for tools that never started.
    ToolsNotStarted,
    /// Nothing pending.
    Ready,
}

/// The recovery verdict (docs/DESIGN.md §4): `verdict` names it, the other
/// members depend on it (`op`, `calls`, `outcome`, `attempt`, `entry`).
#[derive(ToSchema)]
pub struct Verdict {
    /// Which verdict.
    pub verdict: VerdictKind,
}

/// The last operation's phase: `none`, `open`, `awaiting_approval`, or
/// `{"finished": OUTCOME}`.
pub struct Phase;

impl PartialSchema for Phase {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .description(Some(
                "The last operation's phase: none, open, awaiting_approval, or {\"finished\": OUTCOME}.",
            ))
            .into()
    }
}

impl ToSchema for Phase {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Phase")
    }
}

/// What a listing shows of a session.
#[derive(ToSchema)]
pub struct Summary {
    /// The session.
    pub id: String,
    /// Its title.
    pub title: Option<String>,
    /// When it was created (RFC 3339).
    pub created: String,
    /// When its last record was written (RFC 3339).
    pub updated: String,
    /// Number of entries.
    pub entries: u64,
    /// Number of records, header included.
    pub records: u64,
    /// The first user message, cut to 80 characters.
    pub first_message: Option<String>,
    /// The session it was forked from.
    pub forked_from: Option<String>,
    /// The session that spawned it, if it is a subagent.
    pub parent: Option<String>,
    /// The last operation's phase.
    pub phase: Phase,
    /// Its status.
    pub status: Status,
}

/// One block of message content (docs/FORMAT.md §4).
#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// The model's reasoning.
    Thinking {
        /// The reasoning.
        thinking: String,
        /// The provider's signature of it.
        signature: Option<String>,
    },
    /// A request to run a tool.
    ToolCall {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        arguments: serde_json::Value,
    },
    /// A tool's result.
    ToolResult {
        /// The call it answers.
        call_id: String,
        /// Its content.
        #[schema(no_recursion)]
        content: Vec<Block>,
        /// Whether the tool failed.
        is_error: Option<bool>,
        /// A machine-readable outcome code.
        code: Option<String>,
    },
    /// An image, base64.
    Image {
        /// Its media type.
        media_type: String,
        /// Its bytes, base64.
        data: String,
    },
    /// Content kept in the blob store.
    Blob {
        /// Where it is.
        uri: String,
        /// Its media type.
        media_type: Option<String>,
        /// Its size in bytes (any 64-bit unsigned integer).
        #[schema(minimum = 0, format = "uint64")]
        size: Option<u64>,
    },
}

/// Who wrote a message.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Role {
    /// The person.
    User,
    /// The model.
    Assistant,
    /// A tool's results.
    Tool,
    /// The system prompt.
    System,
    /// The developer prompt.
    Developer,
}

/// A message (docs/FORMAT.md §4).
#[derive(ToSchema)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// What it says.
    pub content: Vec<Block>,
}

/// A stored record as history answers it: the line's fields without the
/// checksum (docs/FORMAT.md).
#[derive(ToSchema)]
pub struct Record {
    /// Its position in the log.
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    pub seq: u64,
    /// When it was written (RFC 3339).
    pub ts: String,
    /// Its kind.
    pub kind: String,
    /// Whether a reader that does not know the kind may skip it.
    pub ignorable: Option<bool>,
    /// The entry's id (entries only).
    pub id: Option<String>,
    /// The entry's parent (entries only).
    pub parent: Option<String>,
    /// The kind's payload.
    pub data: serde_json::Value,
}

/// One input record: what `cairn append` reads, one per line.
#[derive(ToSchema)]
pub struct InputRecord {
    /// An entry kind (message, app_state, settings, compaction, checkout,
    /// label, session_info, custom) or an operation kind; a kind of your own
    /// needs `ignorable`.
    pub kind: String,
    /// The kind's payload (docs/FORMAT.md).
    pub data: serde_json::Value,
    /// The entry's id (generated when left out).
    pub id: Option<String>,
    /// The parent: an entry, or null for a new root (the leaf when left out).
    pub parent: Option<String>,
    /// Whether a reader that does not know the kind may skip it.
    pub ignorable: Option<bool>,
}

/// How a batch is made durable before it is acknowledged.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Durability {
    /// Each record synced (the default).
    Sync,
    /// The batch written, then synced once.
    Group,
    /// Handed to the OS, not synced.
    Buffered,
}

/// How a tool affects the world.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Effect {
    /// No effect outside the process: safe to re-run.
    ReadOnly,
    /// Re-running with the same idempotency key has no further effect.
    Idempotent,
    /// Anything else: re-running needs a person's decision.
    SideEffect,
}

/// How an operation ended.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Outcome {
    /// The loop finished normally.
    Completed,
    /// An error ended it.
    Failed,
    /// It was aborted.
    Aborted,
    /// It ran out of steps.
    MaxSteps,
}
