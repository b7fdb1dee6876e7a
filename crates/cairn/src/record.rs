//! The record model: what one line of a session holds, decoded.
//!
//! A session is a sequence of records. Record 0 is the [`Header`]; the rest are
//! [`Entry`] records (tree nodes with `id` and `parent`), [`OpRecord`]s (the
//! operation journal: log-only bookkeeping, never in the model's context), or
//! records of a kind this version does not know, kept only when they say
//! `"ignorable": true`. The byte-level framing is in `frame.rs`; the format is
//! specified in `docs/FORMAT.md`.
//!
//! A tool result is read through [`ResultBlock`], borrowed from its message:
//! how every reader of results (memory, steps, the renderers) takes one.

use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::id::{EntryId, SessionId};

/// The record format's major version written by this build. A reader refuses a
/// header with a greater major version.
pub const FORMAT_VERSION: u32 = 1;

/// A decoded record body.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// Record 0.
    Header(Header),
    /// A tree entry.
    Entry(Entry),
    /// An operation-journal record.
    Op(OpRecord),
}

/// A decoded record with its position and time.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Position in the session.
    pub seq: u64,
    /// When it was written.
    pub ts: String,
    /// What it holds.
    pub body: Body,
}

/// Record 0 of every session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Major format version ([`FORMAT_VERSION`] when written by this build).
    pub format: u32,
    /// The session's id.
    pub session: SessionId,
    /// When the session was created (RFC 3339, UTC).
    pub created: String,
    /// The working directory of the creating process, if known.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The session's title at creation (later titles come from `session_info`).
    #[serde(default)]
    pub title: Option<String>,
    /// The application state before any `app_state` entry.
    #[serde(default = "empty_object")]
    pub app_state: Value,
    /// Where the session came from, if it was forked or spawned.
    #[serde(default, deserialize_with = "null_is_default")]
    pub lineage: Lineage,
    /// The software that created the session, e.g. `cairn/0.1.0`.
    pub writer: String,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// Where a session came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    /// Set when the session was forked from another one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// Set when the session is a subagent spawned by a tool call of another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<SpawnOrigin>,
    /// Set when the session was imported from another tool's session file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_from: Option<Box<ImportOrigin>>,
}

/// The source of an imported session: another tool's session file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportOrigin {
    /// The source format, e.g. `pi`, `claude-code`, `codex`.
    pub format: String,
    /// The source file's path, as the importer resolved it.
    pub path: String,
    /// SHA-256 (64 lower-case hex digits) of the source bytes first imported.
    pub sha256: String,
    /// The source's own session id, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_id: Option<String>,
}

/// The session and entry a fork was taken from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// The source session.
    pub session: SessionId,
    /// The source entry: the fork holds the branch up to and including it
    /// (`None`: forked from before the first entry).
    pub entry: Option<EntryId>,
}

/// The session and tool call that spawned a subagent session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnOrigin {
    /// The parent session.
    pub session: SessionId,
    /// The tool call in the parent that spawned this session.
    pub call_id: String,
    /// Delegation depth: 1 for a child of a top-level session.
    #[serde(deserialize_with = "depth")]
    pub depth: u32,
}

/// A tree node: a record with an `id` and a `parent`.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Unique within the session.
    pub id: EntryId,
    /// An earlier entry's id, or `None` for a root.
    pub parent: Option<EntryId>,
    /// What the entry records.
    pub body: EntryBody,
}

/// The payload of an entry, by kind. Matches on this are exhaustive on
/// purpose: a new kind must be handled everywhere.
#[derive(Debug, Clone, PartialEq)]
pub enum EntryBody {
    /// A conversation message.
    Message(Message),
    /// A change to the host application's state.
    AppState(AppStateChange),
    /// A summary replacing the context before `first_kept`.
    Compaction(Compaction),
    /// A move of the leaf to this entry's parent.
    Checkout(Checkout),
    /// Host settings changed mid-session.
    Settings(Settings),
    /// A bookmark set or removed.
    Label(Label),
    /// Display metadata.
    SessionInfo(SessionInfo),
    /// A host or plugin record.
    Custom(Custom),
    /// A record of a kind this version does not know, marked ignorable: kept
    /// in the tree, skipped by every projection.
    Ignored(Unknown),
}

/// A record whose kind this version does not know and which says
/// `"ignorable": true`.
#[derive(Debug, Clone, PartialEq)]
pub struct Unknown {
    /// The record's kind.
    pub kind: String,
    /// The record's `data`, untouched.
    pub data: Value,
}

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Role {
    /// The person.
    User,
    /// The model.
    Assistant,
    /// Tool results.
    Tool,
    /// System instructions.
    System,
    /// Developer instructions.
    Developer,
}

impl Role {
    /// The role's name as written in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::System => "system",
            Role::Developer => "developer",
        }
    }
}

/// A conversation message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The content blocks, in order.
    pub content: Vec<Block>,
    /// Token usage of the model call that produced it (assistant messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Described as any value: serde also reads a struct from an array of its
    // fields (`[1, 2]`), which the schema of an object would call invalid.
    #[cfg_attr(feature = "schema", schema(value_type = Option<serde_json::Value>))]
    pub usage: Option<Usage>,
    /// The model that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Why the model stopped (`end_turn`, `tool_use`, `max_tokens`, `interrupted`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

impl Message {
    /// A message with a single text block.
    pub fn text(role: Role, text: impl Into<String>) -> Message {
        Message {
            role,
            content: vec![Block::Text { text: text.into() }],
            usage: None,
            model: None,
            stop_reason: None,
        }
    }

    /// The concatenated text blocks.
    pub fn plain_text(&self) -> String {
        let mut out = String::new();
        for b in &self.content {
            if let Block::Text { text } = b {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls in this message.
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolCall {
                call_id,
                name,
                arguments,
            } => Some((call_id.as_str(), name.as_str(), arguments)),
            Block::Text { .. }
            | Block::Thinking { .. }
            | Block::ToolResult { .. }
            | Block::Image { .. }
            | Block::Blob { .. } => None,
        })
    }

    /// Whether every tool result in this message holds only the blocks a
    /// result may hold ([`Block::fits_in_a_tool_result`]).
    pub fn results_hold_only_content(&self) -> bool {
        self.content.iter().all(|b| match b {
            Block::ToolResult { content, .. } => content.iter().all(Block::fits_in_a_tool_result),
            Block::Text { .. }
            | Block::Thinking { .. }
            | Block::ToolCall { .. }
            | Block::Image { .. }
            | Block::Blob { .. } => true,
        })
    }

    /// The call ids this message answers with tool results.
    pub fn tool_results(&self) -> impl Iterator<Item = &str> {
        self.results().map(|r| r.call_id)
    }

    /// The tool-result blocks of this message, borrowed.
    pub fn results(&self) -> impl Iterator<Item = ResultBlock<'_>> {
        self.content.iter().filter_map(Block::as_result)
    }
}

/// A tool-result block, borrowed ([`Block::as_result`], [`Message::results`]):
/// what every reader of results (memory, steps, the renderers) takes.
#[derive(Debug, Clone, Copy)]
pub struct ResultBlock<'a> {
    /// The call it answers.
    pub call_id: &'a str,
    /// What the tool returned.
    pub content: &'a [Block],
    /// Whether the tool failed.
    pub is_error: bool,
    /// Its code (`TOOL_OUTCOME_UNKNOWN`, …), if any.
    pub code: Option<&'a str>,
}

/// One block of message content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Block {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// Model reasoning.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// Provider signature, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A tool call requested by the model.
    ToolCall {
        /// The provider's call id; a tool result answers it.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The arguments (usually an object).
        arguments: Value,
    },
    /// The result of a tool call.
    ToolResult {
        /// The call this answers.
        call_id: String,
        /// The result's content (text, image or blob blocks).
        #[serde(deserialize_with = "result_content")]
        #[cfg_attr(feature = "schema", schema(no_recursion))]
        content: Vec<Block>,
        /// Whether the tool failed (null reads as false).
        #[serde(default, deserialize_with = "null_is_default")]
        #[cfg_attr(feature = "schema", schema(value_type = Option<bool>))]
        is_error: bool,
        /// A machine-readable outcome code, e.g. `TOOL_OUTCOME_UNKNOWN`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    /// An inline image.
    Image {
        /// MIME type, e.g. `image/png`.
        media_type: String,
        /// Base64 data.
        data: String,
    },
    /// A reference to content stored outside the session.
    Blob {
        /// Where the content lives (a path or URI).
        uri: String,
        /// MIME type.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media_type: Option<String>,
        /// Size in bytes (any 64-bit unsigned integer).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schema", schema(minimum = 0, format = "uint64"))]
        size: Option<u64>,
        /// SHA-256 of the content, hex.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
    },
}

/// A JSON value as text for people and models: a string as it is, anything
/// else as JSON (how visible `custom` content is shown).
pub(crate) fn value_text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

impl Block {
    /// The block as a tool result, borrowed; `None` for any other block.
    ///
    /// ```
    /// use cairn::Block;
    ///
    /// let b = Block::ToolResult {
    ///     call_id: "c1".into(),
    ///     content: vec![Block::Text { text: "done".into() }],
    ///     is_error: false,
    ///     code: Some("TOOL_OUTCOME_UNKNOWN".into()),
    /// };
    /// let r = b.as_result().expect("a tool result");
    /// assert_eq!((r.call_id, r.code), ("c1", Some("TOOL_OUTCOME_UNKNOWN")));
    /// assert!(Block::Text { text: "hi".into() }.as_result().is_none());
    /// ```
    pub fn as_result(&self) -> Option<ResultBlock<'_>> {
        match self {
            Block::ToolResult {
                call_id,
                content,
                is_error,
                code,
            } => Some(ResultBlock {
                call_id,
                content,
                is_error: *is_error,
                code: code.as_deref(),
            }),
            Block::Text { .. }
            | Block::Thinking { .. }
            | Block::ToolCall { .. }
            | Block::Image { .. }
            | Block::Blob { .. } => None,
        }
    }

    /// Whether the block may appear in a tool result's content (text, image
    /// and blob blocks; FORMAT.md section 4).
    pub fn fits_in_a_tool_result(&self) -> bool {
        match self {
            Block::Text { .. } | Block::Image { .. } | Block::Blob { .. } => true,
            Block::Thinking { .. } | Block::ToolCall { .. } | Block::ToolResult { .. } => false,
        }
    }
}

// Value rules of FORMAT.md checked while decoding, so that open and fsck
// refuse the same records (and append refuses them first).

/// An optional field whose `null` reads as its default, like its absence
/// (FORMAT.md section 1, "Reading typed objects").
fn null_is_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn depth<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(D::Error::custom(
            "lineage.parent.depth is 0; it is 1 for a child of a top-level session",
        )),
        n => Ok(n),
    }
}

fn result_content<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Block>, D::Error> {
    let blocks = Vec::<Block>::deserialize(d)?;
    if blocks.iter().all(Block::fits_in_a_tool_result) {
        Ok(blocks)
    } else {
        Err(D::Error::custom(
            "a tool_result's content holds only text, image and blob blocks",
        ))
    }
}

fn label_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    if crate::id::is_name(&name) {
        Ok(name)
    } else {
        Err(D::Error::custom(format!(
            "label name {name:?} is not 1 to 64 characters of A-Z, a-z, 0-9, '-', '_' and '.'"
        )))
    }
}

fn namespace<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let namespace = String::deserialize(d)?;
    if namespace.is_empty() {
        Err(D::Error::custom("a custom entry's namespace is empty"))
    } else {
        Ok(namespace)
    }
}

/// Token usage of a model call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default, deserialize_with = "null_is_default")]
    pub input: u64,
    /// Output tokens.
    #[serde(default, deserialize_with = "null_is_default")]
    pub output: u64,
    /// Input tokens served from a cache.
    #[serde(default, deserialize_with = "null_is_default")]
    pub cached: u64,
    /// Cost in the host's currency unit, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

/// A change to the application state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AppStateChange {
    /// Replace the whole state.
    Set(Value),
    /// Apply an RFC 7386 JSON merge patch to the state so far.
    Patch(Value),
}

/// A summary that replaces the context before `first_kept`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    /// The summary shown to the model in place of the dropped history.
    pub summary: String,
    /// The first entry of the branch kept after the summary (`None`: keep
    /// nothing from before the compaction).
    pub first_kept: Option<EntryId>,
    /// Context size before the compaction, in tokens, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_before: Option<u64>,
}

/// A move of the leaf: the entry's parent is the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkout {
    /// The leaf before the move (informational; may name an entry that a
    /// fork did not copy).
    pub from: Option<EntryId>,
    /// A summary of the branch left behind, shown to the model if present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// Settings changed mid-session: merged key by key into the settings so far;
/// a `null` value removes the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The changed settings (`model`, `provider`, `reasoning_effort`, or any host key).
    pub values: Map<String, Value>,
}

/// A bookmark: `name` now points at `target`, or is removed when `target` is `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Label {
    /// The label's name (same character rules as entry ids).
    #[serde(deserialize_with = "label_name")]
    pub name: String,
    /// The entry it marks, or `None` to remove the label.
    pub target: Option<EntryId>,
}

/// Display metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The session's title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// A host or plugin record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Custom {
    /// Who owns the record, e.g. `myapp.notes`.
    #[serde(deserialize_with = "namespace")]
    pub namespace: String,
    /// Whether `content` is shown to the model (as a user message).
    #[serde(default, deserialize_with = "null_is_default")]
    pub visible: bool,
    /// The payload; when visible, a string is shown as is and anything else as JSON.
    pub content: Value,
}

/// A record of the operation journal: bookkeeping of one run of the agent
/// loop, never a tree node, never in the model's context.
#[derive(Debug, Clone, PartialEq)]
pub enum OpRecord {
    /// The loop accepted an input.
    OpStarted(OpStarted),
    /// A provider request is about to be sent.
    ModelAttempted(ModelAttempted),
    /// A model response completed.
    UsageSettled(UsageSettled),
    /// A human was asked to approve a tool call.
    ApprovalRequested(ApprovalRequested),
    /// The human answered.
    ApprovalResolved(ApprovalResolved),
    /// T1: a tool is about to run. Durable before the tool starts.
    ToolDispatched(ToolDispatched),
    /// Input arrived while the operation ran.
    InputQueued(InputQueued),
    /// The operation ended.
    OpFinished(OpFinished),
    /// A log-only record of a kind this version does not know, marked ignorable.
    Ignored(Unknown),
}

/// `op_started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpStarted {
    /// The operation's id, unique in the session.
    pub op: String,
    /// The entry holding the input that started it.
    pub input: Option<EntryId>,
}

/// `model_attempted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelAttempted {
    /// The operation.
    pub op: String,
    /// Attempt number within the operation, from 1.
    pub attempt: u32,
    /// The id the assistant entry produced by this attempt must use.
    pub entry: EntryId,
    /// Provider name.
    #[serde(default)]
    pub provider: Option<String>,
    /// Model name.
    #[serde(default)]
    pub model: Option<String>,
}

/// `usage_settled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageSettled {
    /// The operation.
    pub op: String,
    /// The assistant entry the usage belongs to.
    pub entry: EntryId,
    /// Tokens and cost.
    pub usage: Usage,
    /// Time from request to complete response, in milliseconds.
    #[serde(default)]
    pub latency_ms: Option<u64>,
}

/// `approval_requested`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequested {
    /// The operation.
    pub op: String,
    /// The tool call awaiting approval.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
}

/// `approval_resolved`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalResolved {
    /// The operation.
    pub op: String,
    /// The tool call.
    pub call_id: String,
    /// Whether the call may run.
    pub approved: bool,
    /// Who decided.
    #[serde(default)]
    pub by: Option<String>,
}

/// How a tool affects the world, declared per tool by the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum EffectClass {
    /// No effect outside the process: safe to re-run.
    ReadOnly,
    /// Re-running with the same idempotency key has no further effect.
    Idempotent,
    /// Re-running may repeat the effect: never re-run without a human.
    SideEffect,
}

/// `tool_dispatched` (T1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ToolDispatched {
    /// The operation.
    pub op: String,
    /// The tool call.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// Hash of the canonical JSON of the arguments.
    pub args_hash: String,
    /// The tool's effect class.
    pub effect: EffectClass,
    /// The idempotency key to pass downstream.
    pub key: String,
    /// The id the tool-result entry must use.
    pub result_entry: EntryId,
}

/// `input_queued`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputQueued {
    /// The operation.
    pub op: String,
    /// The queued text.
    pub text: String,
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Outcome {
    /// The loop finished normally.
    Completed,
    /// An error ended it.
    Failed,
    /// The person stopped it.
    Aborted,
    /// The step limit was reached.
    MaxSteps,
}

/// `op_finished`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpFinished {
    /// The operation.
    pub op: String,
    /// How it ended.
    pub outcome: Outcome,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
