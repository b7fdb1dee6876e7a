//! The JSON shapes of sessions, contexts and records: what the HTTP API
//! answers, and what the CLI prints for `--json` and `export --format json`
//! (documented in the CLI's README and in `/openapi.json`; fields are only
//! ever added).

use cairn::{Context, Session, Source, Store};
use cairn_agent::describe::entry_line;
use cairn_agent::tree::TreeView;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};

/// `context --json`, and the `context` field of `show --json`.
pub fn context(session: &Session, ctx: &Context) -> Value {
    serde_json::to_value(ContextShape { session, ctx }).unwrap_or(Value::Null)
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
        m.serialize_entry(
            "compaction",
            &ctx.compaction().map(|c| {
                json!({
                    "entry": c.entry,
                    "summary": c.summary,
                    "first_kept": c.first_kept,
                    "tokens_before": c.tokens_before,
                })
            }),
        )?;
        m.end()
    }
}

struct Messages<'a>(&'a Context);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.messages().iter().map(|m| {
            let (source, namespace) = source_name(m.source());
            MessageShape {
                entry: m.entry(),
                source,
                namespace,
                message: m.message(),
            }
        }))
    }
}

#[derive(serde::Serialize)]
struct MessageShape<'a> {
    entry: &'a cairn::EntryId,
    source: &'static str,
    namespace: Option<&'a str>,
    message: &'a cairn::Message,
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
/// When the stored line is not a JSON object (it verified at open, so only
/// if the file changed underneath).
pub fn record(raw: &[u8]) -> anyhow::Result<Value> {
    let mut v: Value = serde_json::from_slice(raw)?;
    if let Value::Object(m) = &mut v {
        m.remove("crc");
    }
    Ok(v)
}

/// `tree --json`, and `GET /sessions/{id}/tree`: every entry with its one-line
/// summary, labels, children and whether it is on the active branch.
pub fn tree(session: &Session, view: &TreeView) -> Value {
    let nodes: Vec<Value> = view
        .nodes
        .iter()
        .map(|n| {
            let d = entry_line(&n.body);
            json!({
                "id": n.id,
                "parent": n.parent.map(|p| &view.nodes[p].id),
                "seq": n.seq,
                "ts": n.ts,
                "kind": n.body.kind(),
                "summary": format!("{} {}", d.tag, d.text),
                "labels": n.labels,
                "active": n.active,
                "children": n.children.iter().map(|&c| &view.nodes[c].id).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "session": session.id(),
        "leaf": session.leaf(),
        "active": session.branch(),
        "labels": session.labels(),
        "nodes": nodes,
    })
}

#[cfg(test)]
mod stream_tests {
    use super::*;
    use cairn::testkit::build::{assistant, user};
    use cairn::{Compaction, EntryBody, MemoryBackend, NewSession};

    /// The shape as it was built before it streamed: a `Value` per message.
    fn as_values(session: &Session, ctx: &Context) -> Value {
        let messages: Vec<Value> = ctx
            .messages()
            .iter()
            .map(|m| {
                let (source, namespace) = source_name(m.source());
                json!({"entry": m.entry(), "source": source, "namespace": namespace, "message": m.message()})
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
    fn streamed_context_json_is_byte_identical_to_the_value_it_replaced() -> anyhow::Result<()> {
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
}
