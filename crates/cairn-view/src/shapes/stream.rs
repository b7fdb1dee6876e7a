//! The streamed forms of the shapes: [`ContextShape`], [`ContextStreamShape`]
//! and [`TreeShape`] write a context or a tree as they read it (one message,
//! or one entry's record, in memory at a time); the bytes are those of
//! [`ContextJson`](super::ContextJson) and [`TreeJson`](super::TreeJson)
//! (tested below).

use std::cell::RefCell;

use cairn::{ActiveCompaction, Context, ContextMessage, ContextStream, Session};
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

use super::{CompactionJson, ContextMessageJson, NodeJson};
use crate::tree::TreeView;

/// [`ContextJson`](super::ContextJson) written as it is read (`show --json`, the JSON export):
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

/// [`TreeJson`](super::TreeJson) written as it is read (`tree --json`): each entry's record
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
mod tests {
    use super::super::{context, source_name, tree};
    use super::*;
    use crate::ViewError;
    use crate::describe::entry_line;
    use cairn::Store;
    use cairn::testkit::build::{assistant, calls, tool_result, user};
    use cairn::{Compaction, EntryBody, MemoryBackend, NewEntry, NewSession, Parent};
    use serde_json::Value;
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
