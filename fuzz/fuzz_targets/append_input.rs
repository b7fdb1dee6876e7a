//! `cairn append`'s input: one JSON line `{"kind", "data", "id"?, "parent"?,
//! "ignorable"?}` whose `data` is decoded by the library's record decoder
//! (`cairn::decode_data`, the function `crates/cairn-cli/src/cmd/append.rs`
//! calls), placed as the CLI places it (an unknown ignorable kind is an entry
//! when it has an id or parent), then appended to a session. No panic; an
//! appended record reads back as what was decoded.

#![no_main]

use std::sync::Arc;

use cairn::{
    Body, EntryBody, EntryId, MemoryBackend, NewEntry, NewSession, OpRecord, Parent, Payload, Store,
};
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde::de::Deserializer;
use serde_json::Value;

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

/// What the CLI decodes a line to, without the session lookup of `parent`.
enum Decoded {
    Entry(EntryBody, Option<EntryId>, Option<Option<String>>),
    Op(OpRecord),
}

fn decode(line: &str) -> Option<Decoded> {
    let input: Input = serde_json::from_str(line).ok()?;
    let has_place = input.id.is_some() || input.parent.is_some();
    let data = input.data.to_string();
    let body = match cairn::decode_data(&input.kind, input.ignorable, data.as_bytes()).ok()? {
        Payload::Header(_) => return None,
        Payload::Entry(body) => body,
        Payload::Op(_) if has_place => return None,
        Payload::Op(op) => return Some(Decoded::Op(op)),
        Payload::Unknown(u) if has_place => EntryBody::Ignored(u),
        Payload::Unknown(u) => return Some(Decoded::Op(OpRecord::Ignored(u))),
    };
    let id = match input.id.as_deref().map(EntryId::parse) {
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => return None,
        None => None,
    };
    Some(Decoded::Entry(body, id, input.parent))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    let s = store.create(NewSession::default()).expect("create");
    for line in text.lines().take(16) {
        let Some(decoded) = decode(line.trim()) else {
            continue;
        };
        let appended = match decoded {
            Decoded::Entry(body, id, parent) => {
                let parent = match parent {
                    None => Parent::Leaf,
                    Some(None) => Parent::Root,
                    Some(Some(q)) => match s.resolve(&q) {
                        Ok(p) => Parent::Entry(p),
                        Err(_) => continue,
                    },
                };
                s.append_entry(NewEntry {
                    id,
                    parent,
                    body: body.clone(),
                })
                .ok()
                .map(|a| (a, Expected::Entry(body)))
            }
            Decoded::Op(op) => s.append_op(op.clone()).ok().map(|a| (a, Expected::Op(op))),
        };
        if let Some((a, expected)) = appended {
            let back = s.record(a.seq).expect("an appended record reads back").body;
            match (back, expected) {
                (Body::Entry(b), Expected::Entry(e)) => {
                    assert_eq!(b.body, e, "the entry changed on its way to the log")
                }
                (Body::Op(b), Expected::Op(e)) => {
                    assert_eq!(b, e, "the record changed on its way to the log")
                }
                (b, _) => panic!("the record changed its class on its way to the log: {b:?}"),
            }
        }
    }
});

enum Expected {
    Entry(EntryBody),
    Op(OpRecord),
}
