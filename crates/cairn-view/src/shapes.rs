//! The JSON shapes of sessions, contexts, trees and records: what the HTTP
//! API answers, and what the CLI prints for `--json` and `export --format
//! json` (documented in the CLI's README and in `/openapi.json`, whose
//! schemas are derived from these types; fields are only ever added).
//!
//! Each shape is a type ([`SessionJson`], [`ContextJson`], [`TreeJson`]).
//! The CLI writes large contexts and trees as it reads them
//! ([`ContextShape`], [`ContextStreamShape`], [`TreeShape`]: one message or
//! one entry's record in memory at a time); their bytes are those of the
//! type's (tested below).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;

use cairn::{
    ActiveCompaction, Context, ContextMessage, ContextStream, EntryId, Message, Session, SessionId,
    Source, Store,
};
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::ViewError;
use crate::describe::entry_line;
use crate::schema;
use crate::tree::TreeView;

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
    #[schema(value_type = schema::Message)]
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

/// [`ContextJson`] written as it is read (`show --json`, the JSON export):
/// the messages are not collected first.
pub struct ContextShape<'a> {
    /// The session.
    pub session: &'a Session,
    /// Its context.
    pub ctx: &'a Context,
}

impl Serialize for ContextShape<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ctx = self.ctx;
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("session", self.session.id())?;
        m.serialize_entry("leaf", &ctx.leaf())?;
        m.serialize_entry("messages", &Messages(ctx))?;
        m.serialize_entry("app_state", ctx.app_state())?;
        m.serialize_entry("settings", ctx.settings())?;
        m.serialize_entry("labels", ctx.labels())?;
        m.serialize_entry("compaction", &ctx.compaction().map(CompactionJson::of))?;
        m.end()
    }
}

struct Messages<'a>(&'a Context);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.messages().len()))?;
        for m in self.0.messages().iter() {
            seq.serialize_element(&message_json(m)?)?;
        }
        seq.end()
    }
}

/// A context message's shape, a message that cannot be read failing the
/// serialization with the reason.
fn message_json<E: serde::ser::Error>(m: &ContextMessage) -> Result<ContextMessageJson<'_>, E> {
    ContextMessageJson::of(m).map_err(|e| E::custom(cairn::with_causes(&e)))
}

/// [`ContextShape`] of a [`ContextStream`]: the same bytes, with each
/// message read, written and dropped in turn (`context --json`).
pub struct ContextStreamShape<'a> {
    /// The session's context, to be read once.
    pub stream: &'a ContextStream,
    /// The compaction in force, learned while the messages are written.
    compaction: RefCell<Option<ActiveCompaction>>,
}

impl<'a> ContextStreamShape<'a> {
    /// The shape of `stream`'s context.
    pub fn new(stream: &'a ContextStream) -> ContextStreamShape<'a> {
        ContextStreamShape {
            stream,
            compaction: RefCell::new(None),
        }
    }
}

impl Serialize for ContextStreamShape<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let st = self.stream;
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("session", st.id())?;
        m.serialize_entry("leaf", &st.leaf())?;
        m.serialize_entry("messages", &StreamedMessages(self))?;
        m.serialize_entry("app_state", st.app_state())?;
        m.serialize_entry("settings", st.settings())?;
        m.serialize_entry("labels", st.labels())?;
        m.serialize_entry(
            "compaction",
            &self.compaction.borrow().as_ref().map(CompactionJson::of),
        )?;
        m.end()
    }
}

struct StreamedMessages<'a>(&'a ContextStreamShape<'a>);

impl Serialize for StreamedMessages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        let mut failed = None;
        let compaction = self
            .0
            .stream
            .each_message(&mut |m| {
                if failed.is_none()
                    && let Err(e) = message_json(m).and_then(|j| seq.serialize_element(&j))
                {
                    failed = Some(e);
                }
            })
            .map_err(|e| serde::ser::Error::custom(cairn::with_causes(&e)))?;
        if let Some(e) = failed {
            return Err(e);
        }
        *self.0.compaction.borrow_mut() = compaction;
        seq.end()
    }
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

/// [`TreeJson`] written as it is read (`tree --json`): each entry's record
/// is read when its node is written and dropped after, so memory holds the
/// tree's structure and one body.
pub struct TreeShape<'a> {
    /// The session.
    pub session: &'a Session,
    /// Its tree.
    pub view: &'a TreeView,
}

impl Serialize for TreeShape<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let session = self.session;
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("session", session.id())?;
        m.serialize_entry("leaf", &session.leaf())?;
        m.serialize_entry("active", &session.branch())?;
        m.serialize_entry("labels", &session.labels())?;
        m.serialize_entry("nodes", &TreeNodes(self))?;
        m.end()
    }
}

struct TreeNodes<'a>(&'a TreeShape<'a>);

impl Serialize for TreeNodes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let TreeShape { session, view } = *self.0;
        let mut seq = s.serialize_seq(Some(view.nodes.len()))?;
        for n in 0..view.nodes.len() {
            let node = NodeJson::read(session, view, n)
                .map_err(|e| serde::ser::Error::custom(cairn::with_causes(&e)))?;
            seq.serialize_element(&node)?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod stream_tests {
    use super::*;
    use cairn::testkit::build::{assistant, calls, tool_result, user};
    use cairn::{Compaction, EntryBody, MemoryBackend, NewEntry, NewSession, Parent};
    use serde_json::json;

    /// The shape as it was built before it streamed: a `Value` per message.
    fn as_values(session: &Session, ctx: &Context) -> Value {
        let messages: Vec<Value> = ctx
            .messages()
            .iter()
            .map(|m| {
                let (source, namespace) = source_name(m.source());
                json!({"entry": m.entry(), "source": source, "namespace": namespace, "message": m.message().unwrap()})
            })
            .collect();
        json!({
            "session": session.id(), "leaf": ctx.leaf(), "messages": messages,
            "app_state": ctx.app_state(), "settings": ctx.settings(), "labels": ctx.labels(),
            "compaction": ctx.compaction().map(|c| json!({
                "entry": c.entry, "summary": c.summary, "first_kept": c.first_kept,
                "tokens_before": c.tokens_before,
            })),
        })
    }

    #[test]
    fn streamed_context_json_is_byte_identical_to_the_value_it_replaced()
    -> Result<(), Box<dyn std::error::Error>> {
        let s = Session::create(&MemoryBackend::new(), NewSession::default())?;
        s.append(user("a \u{1b} \"quoted\" question"))?;
        let kept = s.append(assistant("an answer"))?.id;
        s.append(EntryBody::Compaction(Compaction {
            summary: "so far".into(),
            first_kept: kept,
            tokens_before: Some(12),
        }))?;
        s.label("here", s.leaf().as_ref())?;
        let ctx = s.context();
        let streamed = serde_json::to_string_pretty(&ContextShape {
            session: &s,
            ctx: &ctx,
        })?;
        assert_eq!(
            streamed,
            serde_json::to_string_pretty(&as_values(&s, &ctx))?
        );
        assert_eq!(streamed, serde_json::to_string_pretty(&context(&s, &ctx)?)?);
        Ok(())
    }

    /// The tree shape as it was built before it streamed: every body read
    /// first, then one `Value` per node.
    fn tree_as_values(
        session: &Session,
        view: &TreeView,
    ) -> Result<Value, Box<dyn std::error::Error>> {
        let read = (0..view.nodes.len())
            .map(|n| view.read(session, n))
            .collect::<Result<Vec<(EntryBody, String)>, ViewError>>()?;
        let nodes: Vec<Value> = view
            .nodes
            .iter()
            .zip(&read)
            .map(|(n, (body, ts))| {
                let d = entry_line(body);
                json!({
                    "id": n.id,
                    "parent": n.parent.map(|p| &view.nodes[p].id),
                    "seq": n.seq,
                    "ts": ts,
                    "kind": body.kind(),
                    "summary": format!("{} {}", d.tag, d.text),
                    "labels": n.labels,
                    "active": n.active,
                    "children": n.children.iter().map(|&c| &view.nodes[c].id).collect::<Vec<_>>(),
                })
            })
            .collect();
        Ok(json!({
            "session": session.id(),
            "leaf": session.leaf(),
            "active": session.branch(),
            "labels": session.labels(),
            "nodes": nodes,
        }))
    }

    #[test]
    fn streamed_tree_json_is_byte_identical_to_the_value_it_replaced()
    -> Result<(), Box<dyn std::error::Error>> {
        let s = Session::create(&MemoryBackend::new(), NewSession::default())?;
        let root = s
            .append(user("list the files"))?
            .id
            .ok_or("an entry has an id")?;
        s.append(EntryBody::Message(calls(
            "looking",
            &[("c1", "ls", json!({"dir": "."}))],
        )))?;
        s.append(tool_result("c1", "a\nb"))?;
        let answered = s.append(assistant("a and b"))?.id;
        s.append(EntryBody::Compaction(Compaction {
            summary: "listed".into(),
            first_kept: answered,
            tokens_before: Some(40),
        }))?;
        s.label("start", Some(&root))?;
        s.append_entry(NewEntry {
            id: None,
            parent: Parent::Entry(root),
            body: user("another way \u{1b}"),
        })?;
        s.append(assistant("on the second branch"))?;
        let view = TreeView::load(&s);
        let streamed = serde_json::to_string_pretty(&TreeShape {
            session: &s,
            view: &view,
        })?;
        assert_eq!(
            streamed,
            serde_json::to_string_pretty(&tree_as_values(&s, &view)?)?
        );
        assert_eq!(serde_json::to_string_pretty(&tree(&s, &view)?)?, streamed);
        Ok(())
    }

    #[test]
    fn streamed_context_of_an_indexed_session_is_byte_identical_to_the_context_shape()
    -> Result<(), Box<dyn std::error::Error>> {
        let home = tempfile::tempdir()?;
        let store = Store::open_dir(home.path());
        let s = store.create(NewSession::default())?;
        let root = s
            .append(user("a \u{1b} question"))?
            .id
            .ok_or("an entry has an id")?;
        let kept = s
            .append(EntryBody::Message(calls(
                "looking",
                &[("c1", "ls", json!({}))],
            )))?
            .id;
        s.append(tool_result("c1", "a b"))?;
        s.append(EntryBody::Compaction(Compaction {
            summary: "so far".into(),
            first_kept: kept,
            tokens_before: Some(12),
        }))?;
        s.append(assistant("after it"))?;
        s.checkout(Some(&root), Some("went back".into()))?;
        s.append(user("the other way"))?;
        s.label("here", s.leaf().as_ref())?;
        s.sync()?;
        let id = s.id().clone();
        for indexed in [false, true] {
            if indexed {
                assert!(s.save_index(), "the index is saved");
            }
            let read = store.open(&id, cairn::Access::Read)?;
            let whole = serde_json::to_string_pretty(&ContextShape {
                session: &read,
                ctx: &read.context(),
            })?;
            let stream = store.open_context_stream(&id)?;
            assert_eq!(
                serde_json::to_string_pretty(&ContextStreamShape::new(&stream))?,
                whole
            );
        }
        Ok(())
    }
}
