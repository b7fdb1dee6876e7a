//! The projection over arbitrary sequences of entries: a session built by
//! appends (on the memory backend; rejected appends write nothing) always
//! has the context `Context::fold` computes from its entries read back —
//! after every append, after a reopen, and in a fork. No panic.

#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use cairn::testkit;
use cairn::{Compaction, Custom, SessionInfo, Settings};
use cairn::{
    Access, AppStateChange, Block, EntryBody, EntryId, MemoryBackend, Message, NewEntry,
    NewSession, Parent, Role, Session, Store,
};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

#[derive(Arbitrary, Debug)]
enum Action {
    Message {
        role: u8,
        text: String,
        calls: u8,
    },
    Result {
        call: u8,
        error: bool,
    },
    State {
        set: bool,
        key: u8,
        value: Option<u8>,
    },
    Settings {
        key: u8,
        value: Option<u8>,
    },
    Checkout {
        target: Option<u16>,
        summary: Option<String>,
    },
    Attach {
        parent: Option<u16>,
        text: String,
    },
    Label {
        name: u8,
        target: Option<u16>,
    },
    Compaction {
        first_kept: Option<u16>,
        summary: String,
    },
    Custom {
        visible: bool,
        text: String,
    },
    Info {
        title: Option<String>,
    },
    Reopen,
    Fork {
        at: Option<u16>,
    },
}

fn pick(s: &Session, i: Option<u16>) -> Option<EntryId> {
    let nodes = s.nodes();
    let i = i?;
    if nodes.is_empty() {
        return None;
    }
    Some(nodes[usize::from(i) % nodes.len()].id.clone())
}

fuzz_target!(|actions: Vec<Action>| {
    let backend = MemoryBackend::new();
    let store = Store::with_backend(Arc::new(backend));
    let mut s = store
        .create(NewSession {
            app_state: Some(json!({"a": 1})),
            ..NewSession::default()
        })
        .expect("create");
    let mut calls: Vec<String> = Vec::new();
    let mut forks = 0;
    for a in actions.into_iter().take(48) {
        let body = match a {
            Action::Message {
                role,
                text,
                calls: n,
            } => {
                let role = [Role::User, Role::Assistant, Role::System, Role::Developer]
                    [usize::from(role) % 4];
                let mut content = vec![Block::Text { text }];
                if role == Role::Assistant {
                    for _ in 0..(n % 3) {
                        let id = format!("c{}", calls.len());
                        content.push(Block::ToolCall {
                            call_id: id.clone(),
                            name: "t".into(),
                            arguments: json!({}),
                        });
                        calls.push(id);
                    }
                }
                Some(EntryBody::Message(Message {
                    role,
                    content,
                    usage: None,
                    model: None,
                    stop_reason: None,
                }))
            }
            Action::Result { call, error } => {
                calls.get(usize::from(call) % calls.len().max(1)).map(|c| {
                    EntryBody::Message(Message {
                        role: Role::Tool,
                        content: vec![Block::ToolResult {
                            call_id: c.clone(),
                            content: vec![Block::Text { text: "r".into() }],
                            is_error: error,
                            code: None,
                        }],
                        usage: None,
                        model: None,
                        stop_reason: None,
                    })
                })
            }
            Action::State { set, key, value } => {
                let k = format!("k{}", key % 4);
                let v = value.map_or(serde_json::Value::Null, |v| json!(v));
                Some(EntryBody::AppState(if set {
                    AppStateChange::Set(json!({ k: v }))
                } else {
                    AppStateChange::Patch(json!({ k: v }))
                }))
            }
            Action::Settings { key, value } => {
                let mut values = serde_json::Map::new();
                values.insert(
                    format!("s{}", key % 3),
                    value.map_or(serde_json::Value::Null, |v| json!(v)),
                );
                Some(EntryBody::Settings(Settings { values }))
            }
            Action::Checkout { target, summary } => {
                let t = pick(&s, target);
                let _ = s.checkout(t.as_ref(), summary);
                None
            }
            Action::Attach { parent, text } => {
                let p = pick(&s, parent).map_or(Parent::Root, Parent::Entry);
                let _ = s.append_entry(NewEntry {
                    id: None,
                    parent: p,
                    body: EntryBody::Message(Message::text(Role::User, text)),
                });
                None
            }
            Action::Label { name, target } => {
                let t = pick(&s, target);
                let _ = s.label(["a", "b", "c"][usize::from(name) % 3], t.as_ref());
                None
            }
            Action::Compaction {
                first_kept,
                summary,
            } => {
                let branch = s.branch();
                let fk = first_kept
                    .and_then(|i| branch.get(usize::from(i) % branch.len().max(1)).cloned());
                Some(EntryBody::Compaction(Compaction {
                    summary,
                    first_kept: fk,
                    tokens_before: None,
                }))
            }
            Action::Custom { visible, text } => Some(EntryBody::Custom(Custom {
                namespace: "fz".into(),
                visible,
                content: json!(text),
            })),
            Action::Info { title } => Some(EntryBody::SessionInfo(SessionInfo { title })),
            Action::Reopen => {
                let before = s.context();
                let id = s.id().clone();
                drop(s);
                s = store.open(&id, Access::Write).expect("reopen");
                assert_eq!(*before, *s.context(), "reopening changed the context");
                None
            }
            Action::Fork { at } => {
                if forks < 3 {
                    forks += 1;
                    let at = pick(&s, at);
                    if let Ok(f) = store.fork(&s, at.as_ref(), None) {
                        testkit::assert_folds("projection", &f, "in a fork");
                    }
                }
                None
            }
        };
        if let Some(body) = body {
            let _ = s.append(body);
        }
        testkit::assert_folds("projection", &s, "after an action");
    }
});
