//! Session memory and the model view: the incremental memory always equals
//! the memory derived from scratch for the same branch (property test across
//! appends, checkouts and reopens); a realistic session's memory reads well
//! and stays under its bound (golden test); the view puts memory right after
//! the system prompt and reports when it passes its budget.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use cairn::MemoryBackend;
use cairn::memory::{MemoryConfig, SessionMemory};
use cairn::view::{Part, ViewBuilder};
use cairn::{
    Access, AppStateChange, AppendError, Block, Custom, EntryBody, EntryId, Invalid, Message,
    NewEntry, NewSession, Parent, Role, Session, Settings,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::{Value, json};

fn small_config() -> MemoryConfig {
    MemoryConfig {
        max_items: 3,
        max_chars: 700,
        checkpoint_every: 4,
        ..MemoryConfig::default()
    }
}

fn branch_memory(s: &Session, config: &MemoryConfig) -> SessionMemory {
    let leaf = s.context().leaf().cloned();
    let entries: Vec<_> = s
        .branch_entries(leaf.as_ref())
        .unwrap()
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    SessionMemory::derive(&entries, config)
}

fn call(id: &str, tool: &str, args: Value) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![Block::ToolCall {
            call_id: id.into(),
            name: tool.into(),
            arguments: args,
        }],
        usage: None,
        model: None,
        stop_reason: None,
    }
}

fn result(id: &str, text: &str, is_error: bool) -> Message {
    Message {
        role: Role::Tool,
        content: vec![Block::ToolResult {
            call_id: id.into(),
            content: vec![Block::Text { text: text.into() }],
            is_error,
            code: None,
        }],
        usage: None,
        model: None,
        stop_reason: None,
    }
}

#[derive(Debug, Clone)]
enum Op {
    User(String),
    Tool {
        tool: &'static str,
        arg: &'static str,
        ok: bool,
    },
    Todos(Vec<(String, bool)>),
    PatchTodos(Option<Vec<String>>),
    Setting(&'static str),
    Decision(String),
    Checkout(usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => "[a-z ]{1,30}".prop_map(Op::User),
        4 => (
            prop_oneof![Just("bash"), Just("write_file"), Just("read_file"), Just("edit_file")],
            prop_oneof![Just("cargo test"), Just("ls -la"), Just("src/lib.rs"), Just("make build")],
            any::<bool>()
        ).prop_map(|(tool, arg, ok)| Op::Tool { tool, arg, ok }),
        1 => prop::collection::vec(("[a-z]{1,8}", any::<bool>()), 0..4).prop_map(Op::Todos),
        1 => prop::option::of(prop::collection::vec("[a-z]{1,8}", 0..3)).prop_map(Op::PatchTodos),
        1 => prop_oneof![Just("model-a"), Just("model-b")].prop_map(Op::Setting),
        1 => "[a-z ]{1,20}".prop_map(Op::Decision),
        2 => (0usize..64).prop_map(Op::Checkout),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("CAIRN_PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64)
    ))]

    #[test]
    fn incremental_memory_equals_memory_derived_from_scratch(ops in prop::collection::vec(op(), 1..60)) {
        let backend = MemoryBackend::new();
        let config = small_config();
        let mut s = Session::create(&backend, NewSession::default()).unwrap();
        let id = s.id().clone();
        s.enable_memory(config.clone()).unwrap();
        let mut n = 0;
        for op in ops {
            match op {
                Op::User(t) => { s.append(EntryBody::Message(Message::text(Role::User, t))).unwrap(); }
                Op::Tool { tool, arg, ok } => {
                    n += 1;
                    let cid = format!("c{n}");
                    let args = if tool == "bash" { json!({"command": arg}) } else { json!({"path": arg}) };
                    s.append(EntryBody::Message(call(&cid, tool, args))).unwrap();
                    s.append(EntryBody::Message(result(&cid, if ok { "ok" } else { "error: 2 tests failed\nmore" }, !ok))).unwrap();
                }
                Op::Todos(items) => {
                    let list: Vec<Value> = items.into_iter().map(|(t, done)| json!({"text": t, "done": done})).collect();
                    s.append(EntryBody::AppState(AppStateChange::Set(json!({"todos": list, "other": 1})))).unwrap();
                }
                Op::PatchTodos(items) => {
                    let v = items.map_or(Value::Null, |i| json!(i));
                    s.append(EntryBody::AppState(AppStateChange::Patch(json!({"todos": v})))).unwrap();
                }
                Op::Setting(m) => {
                    let mut values = serde_json::Map::new();
                    values.insert("model".into(), json!(m));
                    s.append(EntryBody::Settings(Settings { values })).unwrap();
                }
                Op::Decision(t) => {
                    s.append(EntryBody::Custom(Custom { namespace: "host.decision".into(), visible: false, content: json!(t) })).unwrap();
                }
                Op::Checkout(i) => {
                    let nodes = s.nodes();
                    let target: Option<EntryId> = if nodes.is_empty() || i % 7 == 0 { None } else { Some(nodes[i % nodes.len()].id.clone()) };
                    // A checkout between a call and its result is refused.
                    match s.checkout(target.as_ref(), Some("left a side plot".into())) {
                        Ok(_) | Err(AppendError::Invalid(Invalid::UnansweredCalls { .. })) => {}
                        Err(e) => panic!("checkout: {e}"),
                    }
                }
                Op::Reopen => {
                    drop(s);
                    s = Session::open(&backend, &id, Access::Write).unwrap();
                    s.enable_memory(config.clone()).unwrap();
                }
            }
            let incremental = s.memory().unwrap();
            prop_assert_eq!(&incremental, &branch_memory(&s, &config));
            prop_assert!(incremental.render().chars().count() <= config.max_chars + 400, "far over the bound");
        }
    }
}

#[test]
fn memory_follows_the_branch_after_a_checkout() {
    let backend = MemoryBackend::new();
    let s = Session::create(&backend, NewSession::default()).unwrap();
    s.enable_memory(MemoryConfig::default()).unwrap();
    let first = s
        .append(EntryBody::Message(Message::text(
            Role::User,
            "draw panel 1",
        )))
        .unwrap();
    s.append(EntryBody::Message(Message::text(
        Role::User,
        "side plot: the wrong pill",
    )))
    .unwrap();
    assert_eq!(
        s.memory().unwrap().goal.unwrap().text,
        "side plot: the wrong pill"
    );
    s.checkout(first.id.as_ref(), None).unwrap();
    let m = s.memory().unwrap();
    assert_eq!(m.goal.unwrap().text, "draw panel 1");
    assert_eq!(m.decisions.items.len(), 1, "the rewind is a decision");
}

/// A realistic session: a to-do list, edits, a failing then passing test run,
/// a decision, and a rewind that abandons a side branch.
#[test]
fn golden_memory_of_a_realistic_session_reads_well_and_stays_bounded() {
    let backend = MemoryBackend::new();
    let s = Session::create(&backend, NewSession::default()).unwrap();
    let config = MemoryConfig::default();
    s.enable_memory(config.clone()).unwrap();
    let add = |id: &str, body: EntryBody| {
        s.append_entry(NewEntry {
            id: Some(EntryId::parse(id).unwrap()),
            parent: Parent::Leaf,
            body,
        })
        .unwrap();
    };
    let msg = |m: Message| EntryBody::Message(m);
    add(
        "u1",
        msg(Message::text(
            Role::User,
            "Fix the off-by-one in the pager and make the tests pass",
        )),
    );
    add(
        "s1",
        EntryBody::AppState(AppStateChange::Set(json!({"todos": [
            {"text": "reproduce the bug", "done": false},
            {"text": "fix pager.rs", "done": false},
            {"text": "run the tests", "done": false}
        ]}))),
    );
    add(
        "a1",
        msg(call("c1", "read_file", json!({"path": "src/pager.rs"}))),
    );
    add("r1", msg(result("c1", "fn page(...)", false)));
    add(
        "a2",
        msg(call("c2", "edit_file", json!({"path": "src/pager.rs"}))),
    );
    add("r2", msg(result("c2", "applied 1 edit", false)));
    add(
        "a3",
        msg(call("c3", "bash", json!({"command": "cargo test"}))),
    );
    add(
        "r3",
        msg(result(
            "c3",
            "test pager::last_page ... FAILED\n1 failed",
            true,
        )),
    );
    add(
        "d1",
        EntryBody::Custom(Custom {
            namespace: "agent.decision".into(),
            visible: false,
            content: json!("use saturating_sub instead of a manual check"),
        }),
    );
    add(
        "a4",
        msg(call("c4", "edit_file", json!({"path": "src/pager.rs"}))),
    );
    add("r4", msg(result("c4", "applied 1 edit", false)));
    // A side branch: an experiment that gets abandoned.
    add(
        "a5",
        msg(call("c5", "bash", json!({"command": "rm -rf target"}))),
    );
    add("r5", msg(result("c5", "", false)));
    s.checkout(
        Some(&EntryId::parse("r4").unwrap()),
        Some("cleaning target/ was not needed".into()),
    )
    .unwrap();
    let checkout = s.leaf().unwrap();
    add(
        "a6",
        msg(call("c6", "bash", json!({"command": "cargo test"}))),
    );
    add("r6", msg(result("c6", "test result: ok. 12 passed", false)));
    add(
        "s2",
        EntryBody::AppState(AppStateChange::Patch(json!({"todos": [
            {"text": "reproduce the bug", "done": true},
            {"text": "fix pager.rs", "done": true},
            {"text": "run the tests", "done": true}
        ]}))),
    );
    let m = s.memory().unwrap();
    assert_eq!(m, branch_memory(&s, &config));
    let expected = format!(
        "Session memory (derived from the session log; [ids] are entries):
Goal: Fix the off-by-one in the pager and make the tests pass [u1]
To-do:
- [x] reproduce the bug [s2]
- [x] fix pager.rs [s2]
- [x] run the tests [s2]
Completed:
- edit_file src/pager.rs [a2, r2]
- edit_file src/pager.rs [a4, r4]
- bash `cargo test` [a6, r6]
Failed attempts:
- bash `cargo test` failed: test pager::last_page ... FAILED [a3, r3]
Decisions:
- use saturating_sub instead of a manual check [d1]
- rewound to entry r4 from r5: cleaning target/ was not needed [{checkout}]
Verification: bash `cargo test` passed [a6, r6]
"
    );
    assert_eq!(m.render(), expected);
    assert!(m.render().chars().count() <= config.max_chars);
    assert!(
        !m.render().contains("rm -rf"),
        "the abandoned branch does not leak into memory"
    );
}

#[test]
fn old_items_are_dropped_and_counted_to_stay_under_the_bound() {
    let backend = MemoryBackend::new();
    let s = Session::create(&backend, NewSession::default()).unwrap();
    let config = MemoryConfig {
        max_items: 4,
        max_chars: 500,
        ..MemoryConfig::default()
    };
    s.enable_memory(config.clone()).unwrap();
    for i in 0..40 {
        let cid = format!("c{i}");
        s.append(EntryBody::Message(call(
            &cid,
            "write_file",
            json!({"path": format!("src/file_{i}_with_a_long_name.rs")}),
        )))
        .unwrap();
        s.append(EntryBody::Message(result(&cid, "ok", false)))
            .unwrap();
    }
    let m = s.memory().unwrap();
    assert!(
        m.render().chars().count() <= config.max_chars,
        "{}",
        m.render()
    );
    assert_eq!(m.completed.items.len() as u64 + m.completed.dropped, 40);
    assert!(
        m.completed.items.back().unwrap().text.contains("file_39"),
        "the newest items are kept"
    );
    assert!(m.render().contains("earlier not shown"));
}

#[test]
fn the_view_puts_memory_after_the_system_prompt_and_reports_the_budget() {
    let backend = MemoryBackend::new();
    let s = Session::create(&backend, NewSession::default()).unwrap();
    s.enable_memory(MemoryConfig::default()).unwrap();
    s.append(EntryBody::Message(Message::text(
        Role::User,
        "hello ".repeat(100),
    )))
    .unwrap();
    let memory = s.memory().unwrap();
    let ctx = s.context();
    let calls = Arc::new(std::sync::Mutex::new(0));
    let seen = calls.clone();
    let mut builder = ViewBuilder::new(Some("You are a careful agent.".into()))
        .budget(100)
        .on_over_budget(move |_| *seen.lock().unwrap() += 1);
    let view = builder.build(Some(&memory), &ctx).unwrap();
    let parts: Vec<Part> = view.messages.iter().map(|(p, _)| *p).collect();
    assert_eq!(parts, vec![Part::System, Part::Memory, Part::Context]);
    assert_eq!(view.messages[1].1.role, Role::Developer);
    assert!(
        view.tokens.context >= 150,
        "600 characters are about 150 tokens: {:?}",
        view.tokens
    );
    assert!(view.over_budget());
    assert_eq!(*calls.lock().unwrap(), 1);
    let mut roomy = ViewBuilder::new(None).budget(10_000);
    assert!(!roomy.build(Some(&memory), &ctx).unwrap().over_budget());
}
