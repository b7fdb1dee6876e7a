//! `cairn append`'s input: one JSON line `{"kind", "data", "id"?, "parent"?,
//! "ignorable"?}` decoded by `cairn::decode_input` (the function
//! `crates/cairn-cli/src/cmd/append.rs` calls; its `data` goes through
//! `cairn::decode_data`, the decoder that reads logs), its parent resolved in
//! the session as the CLI resolves it, then appended. No panic; an appended
//! record reads back as what was decoded.

#![no_main]

use std::sync::Arc;

use cairn::{
    Body, EntryBody, InputParent, InputRecord, MemoryBackend, NewEntry, NewSession, OpRecord,
    Parent, Store,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    let s = store.create(NewSession::default()).expect("create");
    for line in text.lines().take(16) {
        let Ok(decoded) = cairn::decode_input(line.trim()) else {
            continue;
        };
        let appended = match decoded {
            InputRecord::Entry { id, parent, body } => {
                let parent = match parent {
                    InputParent::Leaf => Parent::Leaf,
                    InputParent::Root => Parent::Root,
                    InputParent::Reference(q) => match s.resolve(&q) {
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
            InputRecord::Op(op) => s.append_op(op.clone()).ok().map(|a| (a, Expected::Op(op))),
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
