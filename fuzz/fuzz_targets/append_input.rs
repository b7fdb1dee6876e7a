//! `cairn append`'s input parser: one JSON line `{"kind", "data", "id"?,
//! "parent"?, "ignorable"?}` decoded the way `crates/cairn-cli/src/cmd/append.rs`
//! does (a frame synthesized around the input and decoded by the library's
//! record decoder; mirrored here because the CLI is a binary), then appended
//! to a session. No panic; an appended record reads back as what was decoded.

#![no_main]

use std::sync::Arc;

use cairn::frame::{self, ENTRY_KINDS, Frame, OP_KINDS};
use cairn::{Body, EntryId, MemoryBackend, NewEntry, NewSession, Parent, Store};
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde::de::Deserializer;
use serde_json::{Map, Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    kind: String,
    data: Value,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    parent: Option<Option<String>>,
    #[serde(default)]
    ignorable: bool,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// The CLI's decode, without the session lookup of `parent`.
fn decode(line: &str) -> Option<(Body, Option<EntryId>, Option<Option<String>>)> {
    let input: Input = serde_json::from_str(line).ok()?;
    let kind = input.kind.as_str();
    let is_entry = if kind == "header" {
        return None;
    } else if ENTRY_KINDS.contains(&kind) {
        true
    } else if OP_KINDS.contains(&kind) {
        if input.id.is_some() || input.parent.is_some() {
            return None;
        }
        false
    } else if input.ignorable {
        input.id.is_some() || input.parent.is_some()
    } else {
        return None;
    };
    let id = match input.id.as_deref().map(EntryId::parse) {
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => return None,
        None => None,
    };
    let mut f = Map::new();
    f.insert("seq".into(), json!(0));
    f.insert("ts".into(), json!(""));
    f.insert("kind".into(), json!(kind));
    if input.ignorable {
        f.insert("ignorable".into(), json!(true));
    }
    if is_entry {
        f.insert("id".into(), json!(id.as_ref().map_or("x", EntryId::as_str)));
        f.insert("parent".into(), Value::Null);
    }
    f.insert("data".into(), input.data);
    let synthesized = Value::Object(f).to_string();
    let parsed = Frame::parse(synthesized.as_bytes()).ok()?;
    let body = frame::decode_body(&parsed).ok()?;
    Some((body, id, input.parent))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    let s = store.create(NewSession::default()).expect("create");
    for line in text.lines().take(16) {
        let Some((body, id, parent)) = decode(line.trim()) else {
            continue;
        };
        let appended = match body {
            Body::Entry(e) => {
                let parent = match parent {
                    None => Parent::Leaf,
                    Some(None) => Parent::Root,
                    Some(Some(q)) => match s.resolve(&q) {
                        Ok(p) => Parent::Entry(p),
                        Err(_) => continue,
                    },
                };
                let body = e.body.clone();
                s.append_entry(NewEntry {
                    id,
                    parent,
                    body: e.body,
                })
                .ok()
                .map(|a| {
                    (
                        a,
                        Body::Entry(cairn::Entry {
                            id: e.id,
                            parent: None,
                            body,
                        }),
                    )
                })
            }
            Body::Op(op) => s.append_op(op.clone()).ok().map(|a| (a, Body::Op(op))),
            Body::Header(_) => None,
        };
        if let Some((a, expected)) = appended {
            let back = s.record(a.seq).expect("an appended record reads back").body;
            match (back, expected) {
                (Body::Entry(b), Body::Entry(e)) => {
                    assert_eq!(b.body, e.body, "the entry changed on its way to the log")
                }
                (b, e) => assert_eq!(b, e, "the record changed on its way to the log"),
            }
        }
    }
});
