//! The JSON shapes of sessions, contexts, trees and records: what the HTTP
//! API answers, and what the CLI prints for `--json` and `export --format
//! json` (documented in the CLI's README and in `/openapi.json`, whose
//! schemas are derived from these types; fields are only ever added).
//!
//! Each shape is a type ([`SessionJson`], [`ContextJson`], [`TreeJson`]).
//! The CLI writes large contexts and trees as it reads them
//! ([`ContextShape`], [`ContextStreamShape`], [`TreeShape`], in `stream.rs`:
//! one message or one entry's record in memory at a time); their bytes are
//! those of the type's.

mod stream;

use std::borrow::Cow;
use std::collections::BTreeMap;

use cairn::{
    ActiveCompaction, Context, ContextMessage, EntryId, Message, Session, SessionId, Source, Store,
};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::ViewError;
use crate::describe::entry_line;
use crate::tree::TreeView;

pub use stream::{ContextShape, ContextStreamShape, TreeShape};

/// A session's context as the model sees it, with the app state, settings
/// and labels: `context --json`, the `context` field of `show --json`, and
/// `GET /sessions/{id}/context`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Context)]
pub struct ContextJson<'a> {
    /// The session.
    #[schema(value_type = String)]
    pub session: SessionId,
    /// The entry the context is as of.
    #[schema(value_type = Option<String>)]
    pub leaf: Option<EntryId>,
    /// The messages, oldest first.
    pub messages: Vec<ContextMessageJson<'a>>,
    /// The application state.
    pub app_state: Value,
    /// The settings.
    #[schema(value_type = Object)]
    pub settings: Map<String, Value>,
    /// The labels: name → entry.
    #[schema(value_type = BTreeMap<String, String>)]
    pub labels: BTreeMap<String, EntryId>,
    /// The compaction in force.
    pub compaction: Option<CompactionJson>,
}

/// One message of a context.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ContextMessage)]
pub struct ContextMessageJson<'a> {
    /// The entry it comes from.
    #[schema(value_type = String)]
    pub entry: EntryId,
    /// What made it.
    pub source: MessageSource,
    /// The namespace of a custom entry's message.
    pub namespace: Option<String>,
    /// The message.
    #[schema(value_type = cairn::Message)]
    pub message: Cow<'a, Message>,
}

/// What made a context message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageSource {
    /// A message entry.
    Message,
    /// The summary of the compaction in force.
    CompactionSummary,
    /// The summary a checkout left.
    CheckoutSummary,
    /// A custom entry shown to the model.
    Custom,
    /// A source this version does not name.
    Other,
}

impl MessageSource {
    /// Its name, as the JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageSource::Message => "message",
            MessageSource::CompactionSummary => "compaction_summary",
            MessageSource::CheckoutSummary => "checkout_summary",
            MessageSource::Custom => "custom",
            MessageSource::Other => "other",
        }
    }
}

/// The compaction in force in a context.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Compaction)]
pub struct CompactionJson {
    /// The compaction entry.
    #[schema(value_type = String)]
    pub entry: EntryId,
    /// Its summary.
    pub summary: String,
    /// The first entry it keeps.
    #[schema(value_type = Option<String>)]
    pub first_kept: Option<EntryId>,
    /// The context's tokens before it.
    pub tokens_before: Option<u64>,
}

impl CompactionJson {
    /// The shape of `c`.
    pub fn of(c: &ActiveCompaction) -> CompactionJson {
        CompactionJson {
            entry: c.entry.clone(),
            summary: c.summary.clone(),
            first_kept: c.first_kept.clone(),
            tokens_before: c.tokens_before,
        }
    }
}

impl<'a> ContextMessageJson<'a> {
    /// The shape of `m`, reading its message now if it was not yet.
    ///
    /// # Errors
    ///
    /// [`ViewError::Read`] when the message cannot be read.
    pub fn of(m: &'a ContextMessage) -> Result<ContextMessageJson<'a>, ViewError> {
        let (source, namespace) = source_of(m.source());
        Ok(ContextMessageJson {
            entry: m.entry().clone(),
            source,
            namespace: namespace.map(str::to_owned),
            message: Cow::Borrowed(m.message().map_err(ViewError::Read)?),
        })
    }
}

/// The context `ctx` of `session` as its shape, every message read now.
///
/// # Errors
///
/// [`ViewError::Read`] when a message of the context cannot be read.
pub fn context<'a>(session: &Session, ctx: &'a Context) -> Result<ContextJson<'a>, ViewError> {
    Ok(ContextJson {
        session: session.id().clone(),
        leaf: ctx.leaf().cloned(),
        messages: ctx
            .messages()
            .iter()
            .map(ContextMessageJson::of)
            .collect::<Result<_, _>>()?,
        app_state: ctx.app_state().clone(),
        settings: ctx.settings().clone(),
        labels: ctx.labels().clone(),
        compaction: ctx.compaction().map(CompactionJson::of),
    })
}

fn source_of(source: &Source) -> (MessageSource, Option<&str>) {
    match source {
        Source::Message => (MessageSource::Message, None),
        Source::CompactionSummary => (MessageSource::CompactionSummary, None),
        Source::CheckoutSummary => (MessageSource::CheckoutSummary, None),
        Source::Custom(ns) => (MessageSource::Custom, Some(ns.as_str())),
        _ => (MessageSource::Other, None),
    }
}

/// The name of a context message's source, and the namespace of a custom one.
pub fn source_name(source: &Source) -> (&'static str, Option<&str>) {
    let (s, ns) = source_of(source);
    (s.as_str(), ns)
}

/// A session's metadata: the `session` field of `show --json` and `export
/// --format json`, and (with its status) what the HTTP API answers for a
/// session.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = SessionMeta)]
pub struct SessionJson {
    /// Its id.
    #[schema(value_type = String)]
    pub id: SessionId,
    /// Its title.
    pub title: Option<String>,
    /// Where it is stored.
    pub location: String,
    /// The format version of its log.
    pub format: u32,
    /// What wrote its header.
    pub writer: String,
    /// When it was created (RFC 3339).
    pub created: String,
    /// When its last record was written (RFC 3339).
    pub updated: String,
    /// The working directory it was created in.
    pub cwd: Option<String>,
    /// Number of records, header included.
    pub records: u64,
    /// Number of entries.
    pub entries: usize,
    /// The current leaf.
    #[schema(value_type = Option<String>)]
    pub leaf: Option<EntryId>,
    /// The session and entry it was forked from.
    pub forked_from: Option<ForkedFromJson>,
    /// The session and call that spawned it (a subagent).
    pub spawned_by: Option<SpawnedByJson>,
    /// Whether a writer holds it now.
    pub in_use: bool,
    /// The torn tail the open cut or found.
    pub torn_tail: Option<TornTailJson>,
}

/// Where a fork came from.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ForkedFrom)]
pub struct ForkedFromJson {
    /// The session.
    #[schema(value_type = String)]
    pub session: SessionId,
    /// The entry the fork holds the branch up to.
    #[schema(value_type = Option<String>)]
    pub entry: Option<EntryId>,
}

/// What spawned a subagent's session.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = SpawnedBy)]
pub struct SpawnedByJson {
    /// The parent session.
    #[schema(value_type = String)]
    pub session: SessionId,
    /// The tool call that spawned it.
    pub call_id: String,
    /// How deep it is below the top session.
    pub depth: u32,
}

/// A torn tail found when the session was opened.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = TornTail)]
pub struct TornTailJson {
    /// Where it starts, in bytes.
    pub offset: u64,
    /// How long it is, in bytes.
    pub len: u64,
    /// What is wrong with it.
    pub problem: String,
    /// Whether it was cut.
    pub cut: bool,
    /// Where its bytes were saved.
    pub saved_to: Option<String>,
}

/// The shape of session `s` of `store`.
pub fn session(store: &Store, s: &Session) -> SessionJson {
    let h = s.header();
    SessionJson {
        id: s.id().clone(),
        title: s.title(),
        location: s.location().to_owned(),
        format: h.format,
        writer: h.writer.clone(),
        created: h.created.clone(),
        updated: s.updated(),
        cwd: h.cwd.clone(),
        records: s.len(),
        entries: s.entry_count(),
        leaf: s.leaf(),
        forked_from: h.lineage.forked_from.as_ref().map(|f| ForkedFromJson {
            session: f.session.clone(),
            entry: f.entry.clone(),
        }),
        spawned_by: h.lineage.parent.as_ref().map(|p| SpawnedByJson {
            session: p.session.clone(),
            call_id: p.call_id.clone(),
            depth: p.depth,
        }),
        in_use: store.backend().writer_active(s.id()),
        torn_tail: s.open_report().torn.as_ref().map(|t| TornTailJson {
            offset: t.offset,
            len: t.len,
            problem: t.problem.clone(),
            cut: t.cut,
            saved_to: t.saved_to.clone(),
        }),
    }
}

/// One record's acknowledgement: its seq, and its id when it is an entry
/// (what `cairn append` prints per record and the HTTP API answers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Ack {
    /// Its position in the log.
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    pub seq: u64,
    /// The entry's id (null for an operation record).
    #[schema(value_type = Option<String>)]
    pub id: Option<EntryId>,
}

impl Ack {
    /// The acknowledgement of `a`.
    pub fn of(a: &cairn::Appended) -> Ack {
        Ack {
            seq: a.seq,
            id: a.id.clone(),
        }
    }
}

/// A stored record as JSON: the line's fields without the checksum.
///
/// # Errors
///
/// [`ViewError::Record`] when the stored line is not a JSON object (it
/// verified at open, so only if the file changed underneath).
pub fn record(raw: &[u8]) -> Result<Value, ViewError> {
    let mut v: Value = serde_json::from_slice(raw).map_err(ViewError::Record)?;
    if let Value::Object(m) = &mut v {
        m.remove("crc");
    }
    Ok(v)
}

/// A session's tree: `tree --json` and `GET /sessions/{id}/tree`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Tree)]
pub struct TreeJson {
    /// The session.
    #[schema(value_type = String)]
    pub session: SessionId,
    /// The leaf.
    #[schema(value_type = Option<String>)]
    pub leaf: Option<EntryId>,
    /// The active branch, root first.
    #[schema(value_type = Vec<String>)]
    pub active: Vec<EntryId>,
    /// The labels: name → entry.
    #[schema(value_type = BTreeMap<String, String>)]
    pub labels: BTreeMap<String, EntryId>,
    /// Every entry, in append order.
    pub nodes: Vec<NodeJson>,
}

/// One entry of a tree, with its one-line summary.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = TreeNode)]
pub struct NodeJson {
    /// Its id.
    #[schema(value_type = String)]
    pub id: EntryId,
    /// Its parent.
    #[schema(value_type = Option<String>)]
    pub parent: Option<EntryId>,
    /// Its record's position in the log.
    pub seq: u64,
    /// When it was written (RFC 3339).
    pub ts: String,
    /// Its kind.
    pub kind: String,
    /// What it is, in one line.
    pub summary: String,
    /// The labels pointing at it.
    pub labels: Vec<String>,
    /// Whether it is on the active branch.
    pub active: bool,
    /// Its children, in append order.
    #[schema(value_type = Vec<String>)]
    pub children: Vec<EntryId>,
}

impl NodeJson {
    /// Node `n` of `view`, its record read now.
    ///
    /// # Errors
    ///
    /// [`ViewError`] when the entry's record cannot be read back.
    pub fn read(session: &Session, view: &TreeView, n: usize) -> Result<NodeJson, ViewError> {
        let node = &view.nodes[n];
        let (body, ts) = view.read(session, n)?;
        let d = entry_line(&body);
        Ok(NodeJson {
            id: node.id.clone(),
            parent: node.parent.map(|p| view.nodes[p].id.clone()),
            seq: node.seq,
            ts,
            kind: body.kind().to_owned(),
            summary: format!("{} {}", d.tag, d.text),
            labels: node.labels.clone(),
            active: node.active,
            children: node
                .children
                .iter()
                .map(|&c| view.nodes[c].id.clone())
                .collect(),
        })
    }
}

/// The tree of `session`, every entry's record read now.
///
/// # Errors
///
/// [`ViewError`] when an entry's record cannot be read back.
pub fn tree(session: &Session, view: &TreeView) -> Result<TreeJson, ViewError> {
    Ok(TreeJson {
        session: session.id().clone(),
        leaf: session.leaf(),
        active: session.branch(),
        labels: session.labels(),
        nodes: (0..view.nodes.len())
            .map(|n| NodeJson::read(session, view, n))
            .collect::<Result<_, _>>()?,
    })
}
