//! The JSON shapes of sessions, contexts and records: what the HTTP API
//! answers, and what the CLI prints for `--json` and `export --format json`
//! (documented in the CLI's README and in `/openapi.json`; fields are only
//! ever added).

use std::cell::RefCell;

use crate::ViewError;
use crate::describe::entry_line;
use crate::tree::TreeView;
use cairn::{ActiveCompaction, Context, ContextMessage, ContextStream, Session, Source, Store};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Value, json};

/// `context --json`, and the `context` field of `show --json`.
///
/// # Errors
///
/// [`ViewError::Read`] when a message of the context cannot be read.
pub fn context(session: &Session, ctx: &Context) -> Result<Value, ViewError> {
    // Every message read first, so that the shape cannot fail half way.
    for m in ctx.messages() {
        m.message().map_err(ViewError::Read)?;
    }
    serde_json::to_value(ContextShape { session, ctx }).map_err(ViewError::Json)
}

/// The shape of [`context`], serialized as it is written (`context --json`
/// streams it: the messages are never copied into a `Value`).
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
        m.serialize_entry("compaction", &ctx.compaction().map(compaction_shape))?;
        m.end()
    }
}

fn compaction_shape(c: &ActiveCompaction) -> Value {
    json!({
        "entry": c.entry,
        "summary": c.summary,
        "first_kept": c.first_kept,
        "tokens_before": c.tokens_before,
    })
}

struct Messages<'a>(&'a Context);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.messages().iter().map(MessageShape::of))
    }
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
            &self.compaction.borrow().as_ref().map(compaction_shape),
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
                    && let Err(e) = seq.serialize_element(&MessageShape::of(m))
                {
                    failed = Some(e);
                }
            })
            .map_err(|e| serde::ser::Error::custom(format!("{e:#}")))?;
        if let Some(e) = failed {
            return Err(e);
        }
        *self.0.compaction.borrow_mut() = compaction;
        seq.end()
    }
}

/// One context message: `entry`, `source`, `namespace`, `message` (read
/// now if it was not yet; a message that cannot be read fails the
/// serialization with the reason).
struct MessageShape<'a>(&'a ContextMessage);

impl MessageShape<'_> {
    fn of(m: &ContextMessage) -> MessageShape<'_> {
        MessageShape(m)
    }
}

impl Serialize for MessageShape<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let message = m
            .message()
            .map_err(|e| serde::ser::Error::custom(cairn::with_causes(&e)))?;
        let (source, namespace) = source_name(m.source());
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry("entry", m.entry())?;
        map.serialize_entry("source", source)?;
        map.serialize_entry("namespace", &namespace)?;
        map.serialize_entry("message", message)?;
        map.end()
    }
}

/// The name of a context message's source, and the namespace of a custom one.
pub fn source_name(source: &Source) -> (&'static str, Option<&str>) {
    match source {
        Source::Message => ("message", None),
        Source::CompactionSummary => ("compaction_summary", None),
        Source::CheckoutSummary => ("checkout_summary", None),
        Source::Custom(ns) => ("custom", Some(ns.as_str())),
        _ => ("other", None),
    }
}

/// The `session` field of `show --json` and `export --format json`.
pub fn session(store: &Store, s: &Session) -> Value {
    let h = s.header();
    let torn = s.open_report().torn.as_ref().map(|t| {
        json!({
            "offset": t.offset,
            "len": t.len,
            "problem": t.problem,
            "cut": t.cut,
            "saved_to": t.saved_to,
        })
    });
    json!({
        "id": s.id(),
        "title": s.title(),
        "location": s.location(),
        "format": h.format,
        "writer": h.writer,
        "created": h.created,
        "updated": s.updated(),
        "cwd": h.cwd,
        "records": s.len(),
        "entries": s.entry_count(),
        "leaf": s.leaf(),
        "forked_from": h.lineage.forked_from.as_ref().map(|f| json!({"session": f.session, "entry": f.entry})),
        "spawned_by": h.lineage.parent.as_ref().map(|p| json!({
            "session": p.session, "call_id": p.call_id, "depth": p.depth,
        })),
        "in_use": store.backend().writer_active(s.id()),
        "torn_tail": torn,
    })
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

/// `tree --json`, and `GET /sessions/{id}/tree`: every entry with its one-line
/// summary, labels, children and whether it is on the active branch.
///
/// # Errors
///
/// [`ViewError::Json`] when an entry's record cannot be read back.
pub fn tree(session: &Session, view: &TreeView) -> Result<Value, ViewError> {
    serde_json::to_value(TreeShape { session, view }).map_err(ViewError::Json)
}

/// The shape of [`tree`], serialized as it is written (`tree --json` streams
/// it): each entry's record is read when its node is written and dropped
/// after, so memory holds the tree's structure and one body.
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
        for (i, n) in view.nodes.iter().enumerate() {
            let (body, ts) = view
                .read(session, i)
                .map_err(|e| serde::ser::Error::custom(format!("{e:#}")))?;
            let d = entry_line(&body);
            seq.serialize_element(&NodeShape {
                id: &n.id,
                parent: n.parent.map(|p| &view.nodes[p].id),
                seq: n.seq,
                ts: &ts,
                kind: body.kind(),
                summary: format!("{} {}", d.tag, d.text),
                labels: &n.labels,
                active: n.active,
                children: n.children.iter().map(|&c| &view.nodes[c].id).collect(),
            })?;
        }
        seq.end()
    }
}

#[derive(serde::Serialize)]
struct NodeShape<'a> {
    id: &'a cairn::EntryId,
    parent: Option<&'a cairn::EntryId>,
    seq: u64,
    ts: &'a str,
    kind: &'a str,
    summary: String,
    labels: &'a [String],
    active: bool,
    children: Vec<&'a cairn::EntryId>,
}

#[cfg(test)]
mod stream_tests {
    use super::*;
    use cairn::testkit::build::{assistant, calls, tool_result, user};
    use cairn::{Compaction, EntryBody, MemoryBackend, NewEntry, NewSession, Parent};

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
        assert_eq!(tree(&s, &view)?, tree_as_values(&s, &view)?);
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
