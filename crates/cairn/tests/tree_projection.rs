//! The session tree and its projection, from the outside.
//!
//! A property test drives random histories (messages with tool calls and
//! results, app-state sets and merge patches, settings, compactions, moves,
//! labels, custom entries, explicit parents, forks, reopens) against a model
//! kept here and checks after every step that the session's incremental
//! context is [`Context::fold`] of the model, and that the fold agrees with an
//! independent projection written in this file. Deterministic tests pin the
//! seed's rewind scenario, every append-time invariant, lookup, compaction
//! projection, forks and the immutability of handed-out contexts.

// Test helpers panic on purpose: a panic is a failed test.
#![allow(clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use cairn::ForkOrigin;
use cairn::testkit::build::{assistant, tool_results, user};
use cairn::{
    Access, AppStateChange, AppendError, Appended, Block, Checkout, Compaction, Context, Custom,
    Durability, Entry, EntryBody, EntryId, Invalid, LookupError, MemoryBackend, Message, NewEntry,
    NewSession, OpenError, Parent, Role, Session, SessionId, SessionInfo, Settings, Source, Store,
    StoreError,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn eid(s: &str) -> EntryId {
    EntryId::parse(s).expect("test ids are valid")
}

fn calls(text: &str, call_ids: &[&str]) -> EntryBody {
    let mut m = Message::text(Role::Assistant, text);
    for c in call_ids {
        m.content.push(Block::ToolCall {
            call_id: (*c).to_owned(),
            name: "generate_image".to_owned(),
            arguments: json!({"prompt": "pig hero", "cost": 10}),
        });
    }
    EntryBody::Message(m)
}

fn results(call_ids: &[&str]) -> EntryBody {
    let texts: Vec<String> = call_ids.iter().map(|c| format!("result of {c}")).collect();
    let answers: Vec<(&str, &str)> = call_ids
        .iter()
        .copied()
        .zip(texts.iter().map(String::as_str))
        .collect();
    tool_results(&answers)
}

fn set_state(v: Value) -> EntryBody {
    EntryBody::AppState(AppStateChange::Set(v))
}

fn patch_state(v: Value) -> EntryBody {
    EntryBody::AppState(AppStateChange::Patch(v))
}

fn compaction(summary: &str, first_kept: Option<&str>) -> EntryBody {
    EntryBody::Compaction(Compaction {
        summary: summary.to_owned(),
        first_kept: first_kept.map(eid),
        tokens_before: Some(1000),
    })
}

/// Appends at the leaf with an explicit id.
fn add(s: &Session, id: &str, body: EntryBody) -> EntryId {
    let a = s
        .append_entry(NewEntry {
            id: Some(eid(id)),
            parent: Parent::Leaf,
            body,
        })
        .unwrap_or_else(|e| panic!("appending {id}: {e}"));
    a.id.expect("entries have ids")
}

/// u (a request), a1 (a tool call, call-1) and r1 (its result).
fn drawn(s: &Session) {
    add(s, "u", user("draw"));
    add(s, "a1", calls("drawing", &["call-1"]));
    add(s, "r1", results(&["call-1"]));
}

/// u1 "one", a1 "one" (its answer) and u2 "two".
fn two_questions(s: &Session) {
    add(s, "u1", user("one"));
    add(s, "a1", assistant("one"));
    add(s, "u2", user("two"));
}

/// Appends under an explicit parent (`None`: a new root) with an explicit id.
fn put(s: &Session, id: &str, parent: Option<&str>, body: EntryBody) -> EntryId {
    let parent = parent.map_or(Parent::Root, |p| Parent::Entry(eid(p)));
    let a = s
        .append_entry(NewEntry {
            id: Some(eid(id)),
            parent,
            body,
        })
        .unwrap_or_else(|e| panic!("appending {id}: {e}"));
    a.id.expect("entries have ids")
}

fn checkout(s: &Session, target: Option<&str>) -> EntryId {
    let target = target.map(eid);
    let a = s
        .checkout(target.as_ref(), None)
        .unwrap_or_else(|e| panic!("checkout: {e}"))
        .expect("the checkout moves the leaf");
    a.id.expect("entries have ids")
}

/// The entry ids of the context's messages, as strings.
fn message_ids(ctx: &Context) -> Vec<String> {
    ctx.messages()
        .iter()
        .map(|m| m.entry().to_string())
        .collect()
}

fn branch_ids(s: &Session) -> Vec<String> {
    s.branch().iter().map(ToString::to_string).collect()
}

fn file_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    (Store::open_dir(dir.path()), dir)
}

/// A new, empty session of files (buffered, titled "test", app state `{}`).
fn empty_session() -> (tempfile::TempDir, Store, Session) {
    let (store, dir) = file_store();
    let s = new_session(&store, json!({}));
    (dir, store, s)
}

fn mem_store() -> (Store, MemoryBackend) {
    let backend = MemoryBackend::new();
    (Store::with_backend(Arc::new(backend.clone())), backend)
}

fn new_session(store: &Store, app_state: Value) -> Session {
    let s = store
        .create(NewSession {
            title: Some("test".into()),
            app_state: Some(app_state),
            ..NewSession::default()
        })
        .expect("create session");
    s.set_durability(Durability::Buffered);
    s
}

/// Every entry of a session, decoded, in append order.
fn all_entries(s: &Session) -> Vec<Entry> {
    s.nodes()
        .iter()
        .map(|n| s.entry(&n.id).expect("readable").expect("present"))
        .collect()
}

/// Asserts the session's incremental context is the plain fold of its entries.
fn assert_context_is_fold(s: &Session) {
    let entries = all_entries(s);
    let want = Context::fold(&s.header().app_state, &entries, s.leaf().as_ref());
    assert_eq!(*s.context(), want);
}

/// Runs an append on a file-backed session that must be rejected as
/// [`AppendError::Invalid`] and checks that nothing changed: record count,
/// entry count, the bytes of the file, the leaf and the context.
fn assert_rejected(
    s: &Session,
    attempt: impl FnOnce(&Session) -> Result<Appended, AppendError>,
) -> (Invalid, String) {
    let len = s.len();
    let count = s.entry_count();
    let bytes = std::fs::read(s.location()).expect("read session file");
    let leaf = s.leaf();
    let ctx = s.context();
    let err = match attempt(s) {
        Ok(a) => panic!("the append should have been rejected, but it wrote {a:?}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    let AppendError::Invalid(invalid) = err else {
        panic!("expected AppendError::Invalid, got: {msg}");
    };
    assert!(
        msg.ends_with("; nothing was written"),
        "message does not say nothing was written: {msg}"
    );
    assert_eq!(s.len(), len, "record count changed after a rejected append");
    assert_eq!(s.entry_count(), count);
    assert_eq!(
        std::fs::read(s.location()).expect("read session file"),
        bytes,
        "the file changed"
    );
    assert_eq!(s.leaf(), leaf);
    assert_eq!(
        *s.context(),
        *ctx,
        "the context changed after a rejected append"
    );
    (invalid, msg)
}

// ---------------------------------------------------------------------------
// The rewind scenario of the README's storyboard: the hero's buff
// ---------------------------------------------------------------------------

fn power_up() -> Value {
    json!({"buff": "power-up (super lollipop)", "skill": "ten-palm strike"})
}

fn exhausted() -> Value {
    json!({"buff": "exhausted (expired pill)", "skill": "none"})
}

/// e0 → e1 (state) → e2 → e3 (state changed) → e4, then a checkout to e2 and
/// a new message e6 on the rewound branch. Returns the checkout's id.
fn seed_rewind(s: &Session) -> EntryId {
    add(
        s,
        "e0",
        user("Eat the super lollipop and face Super Strong Man in the ring!"),
    );
    add(s, "e1", set_state(power_up()));
    add(s, "e2", assistant("Panel 1: lollipop in the ring (v1.png)"));
    add(s, "e3", set_state(exhausted()));
    add(
        s,
        "e4",
        assistant("Side panel: clutching his stomach (funny.png)"),
    );
    assert_eq!(s.context().app_state(), &exhausted());
    let e5 = checkout(s, Some("e2"));
    add(
        s,
        "e6",
        user("Use the ten-palm strike and send Super Strong Man flying!"),
    );
    e5
}

#[test]
fn rewind_to_e2_restores_the_app_state_of_e1() {
    let (_dir, _store, s) = empty_session();
    let e5 = seed_rewind(&s);
    let ctx = s.context();
    assert_eq!(
        ctx.app_state(),
        &power_up(),
        "rewind must bring the state back with the messages"
    );
    assert_eq!(message_ids(&ctx), ["e0", "e2", "e6"]);
    assert_eq!(branch_ids(&s), ["e0", "e1", "e2", e5.as_str(), "e6"]);
    assert_eq!(s.leaf(), Some(eid("e6")));
    assert_context_is_fold(&s);
}

#[test]
fn rewound_side_branch_stays_in_the_file_and_a_checkout_brings_its_state_back() {
    let (_dir, _store, s) = empty_session();
    let e5 = seed_rewind(&s);

    // The side branch is still in the file, byte for byte as written.
    let text = std::fs::read_to_string(s.location()).expect("read file");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let line_of = |id: &str| {
        lines
            .iter()
            .find(|l| l["id"] == id)
            .unwrap_or_else(|| panic!("{id} not in file"))
    };
    assert_eq!(line_of("e3")["parent"], "e2");
    assert_eq!(line_of("e3")["data"]["set"], exhausted());
    assert_eq!(line_of("e4")["parent"], "e3");
    assert_eq!(line_of(e5.as_str())["parent"], "e2");
    assert_eq!(line_of(e5.as_str())["kind"], "checkout");
    assert_eq!(line_of(e5.as_str())["data"]["from"], "e4");
    let nodes: Vec<(String, Option<String>)> = s
        .nodes()
        .iter()
        .map(|n| (n.id.to_string(), n.parent.as_ref().map(ToString::to_string)))
        .collect();
    let expect_nodes: Vec<(String, Option<String>)> = vec![
        ("e0".into(), None),
        ("e1".into(), Some("e0".into())),
        ("e2".into(), Some("e1".into())),
        ("e3".into(), Some("e2".into())),
        ("e4".into(), Some("e3".into())),
        (e5.to_string(), Some("e2".into())),
        ("e6".into(), Some(e5.to_string())),
    ];
    assert_eq!(nodes, expect_nodes);
    assert_eq!(s.children(Some(&eid("e2"))), vec![eid("e3"), e5.clone()]);

    // A checkout to the side branch's leaf brings back its state and messages.
    let back = checkout(&s, Some("e4"));
    let ctx = s.context();
    assert_eq!(ctx.app_state(), &exhausted());
    assert_eq!(message_ids(&ctx), ["e0", "e2", "e4"]);
    assert_eq!(
        branch_ids(&s),
        ["e0", "e1", "e2", "e3", "e4", back.as_str()]
    );
    assert_context_is_fold(&s);
}

#[test]
fn after_reopen_the_leaf_is_the_checkout_appended_last() {
    let (_dir, store, s) = empty_session();
    seed_rewind(&s);
    let back = checkout(&s, Some("e2"));
    let before = s.context();
    let id = s.id().clone();
    drop(s);
    for access in [Access::Read, Access::Write] {
        let s = store.open(&id, access).expect("reopen");
        assert_eq!(
            s.leaf(),
            Some(back.clone()),
            "the leaf is the entry appended last, not a guess"
        );
        assert_eq!(*s.context(), *before);
        assert_eq!(s.context().app_state(), &power_up());
        assert_eq!(message_ids(&s.context()), ["e0", "e2"]);
    }
}

// ---------------------------------------------------------------------------
// Append-time invariants
// ---------------------------------------------------------------------------

#[test]
fn append_under_a_missing_parent_is_rejected_and_writes_nothing() {
    let (_dir, _store, s) = empty_session();
    add(&s, "a", user("hi"));
    let (inv, msg) = assert_rejected(&s, |s| {
        s.append_entry(NewEntry {
            id: None,
            parent: Parent::Entry(eid("ghost")),
            body: user("lost"),
        })
    });
    assert_eq!(inv, Invalid::MissingParent("ghost".into()));
    assert!(
        msg.contains("parent ghost is not an entry of this session"),
        "{msg}"
    );
}

#[test]
fn checkout_to_a_missing_target_is_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "a", user("hi"));
    let (inv, msg) = assert_rejected(&s, |s| {
        s.checkout(Some(&eid("nowhere")), None)
            .map(|a| a.expect("a checkout that is no refusal moves"))
    });
    assert_eq!(inv, Invalid::MissingParent("nowhere".into()));
    assert!(msg.contains("nowhere"), "{msg}");
}

#[test]
fn duplicate_entry_id_is_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "a", user("hi"));
    add(&s, "b", assistant("hello"));
    let (inv, msg) = assert_rejected(&s, |s| {
        s.append_entry(NewEntry {
            id: Some(eid("a")),
            parent: Parent::Leaf,
            body: user("again"),
        })
    });
    assert_eq!(inv, Invalid::DuplicateId("a".into()));
    assert!(msg.contains("entry id a is already used"), "{msg}");
    // Also as a new root: the id is checked before anything else.
    let (inv, _) = assert_rejected(&s, |s| {
        s.append_entry(NewEntry {
            id: Some(eid("b")),
            parent: Parent::Root,
            body: user("again"),
        })
    });
    assert_eq!(inv, Invalid::DuplicateId("b".into()));
}

#[test]
fn tool_result_without_any_call_is_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "u", user("draw"));
    let (inv, msg) = assert_rejected(&s, |s| s.append(results(&["call-1"])));
    assert_eq!(inv, Invalid::NoSuchCall("call-1".into()));
    assert!(
        msg.contains("\"call-1\"") && msg.contains("current branch"),
        "{msg}"
    );
}

#[test]
fn tool_result_for_a_call_that_exists_only_on_another_branch_is_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "u", user("draw"));
    add(&s, "a1", calls("drawing", &["call-1"]));
    checkout(&s, Some("u"));
    let (inv, msg) = assert_rejected(&s, |s| s.append(results(&["call-1"])));
    assert_eq!(inv, Invalid::NoSuchCall("call-1".into()));
    assert!(
        msg.contains("answers no tool call on the current branch"),
        "{msg}"
    );
    // With an explicit parent on the branch that has the call, it is valid,
    // and the leaf moves there.
    put(&s, "r1", Some("a1"), results(&["call-1"]));
    assert_eq!(branch_ids(&s), ["u", "a1", "r1"]);
    assert_eq!(message_ids(&s.context()), ["u", "a1", "r1"]);
    assert_context_is_fold(&s);
}

#[test]
fn rejected_append_under_an_explicit_parent_leaves_the_context_at_the_leaf() {
    let (store, _dir) = file_store();
    let s = new_session(&store, json!({"n": 0}));
    drawn(&s);
    add(&s, "st", patch_state(json!({"n": 1})));
    // Under `u` the call is not on the branch: the projection moved there to
    // check and must come back.
    let (inv, _) = assert_rejected(&s, |s| {
        s.append_entry(NewEntry {
            id: None,
            parent: Parent::Entry(eid("u")),
            body: results(&["call-1"]),
        })
    });
    assert_eq!(inv, Invalid::NoSuchCall("call-1".into()));
    assert_eq!(s.context().app_state(), &json!({"n": 1}));
    assert_context_is_fold(&s);
}

#[test]
fn second_result_for_the_same_call_is_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "u", user("draw"));
    add(&s, "a1", calls("drawing", &["call-1", "call-2"]));
    add(&s, "r1", results(&["call-1"]));
    let (inv, msg) = assert_rejected(&s, |s| s.append(results(&["call-1"])));
    assert_eq!(inv, Invalid::AlreadyAnswered("call-1".into()));
    assert!(
        msg.contains("tool call \"call-1\" already has a result"),
        "{msg}"
    );
    // Two results for one call in the same message.
    let (inv, _) = assert_rejected(&s, |s| s.append(results(&["call-2", "call-2"])));
    assert_eq!(inv, Invalid::AlreadyAnswered("call-2".into()));
    add(&s, "r2", results(&["call-2"]));
    assert_context_is_fold(&s);
}

#[test]
fn reusing_a_tool_call_id_on_the_branch_is_rejected() {
    let (_dir, _store, s) = empty_session();
    drawn(&s);
    let (inv, msg) = assert_rejected(&s, |s| s.append(calls("again", &["call-1"])));
    assert!(matches!(inv, Invalid::CallIdReused(_)), "{inv:?}");
    assert!(msg.contains("\"call-1\" is already used"), "{msg}");
    let (_, msg) = assert_rejected(&s, |s| s.append(calls("twice", &["call-9", "call-9"])));
    assert!(msg.contains("\"call-9\" is already used"), "{msg}");
    // On another branch the id is free.
    checkout(&s, Some("u"));
    add(&s, "a2", calls("drawing again", &["call-1"]));
    add(&s, "r2", results(&["call-1"]));
    assert_context_is_fold(&s);
}

#[test]
fn compaction_keeping_from_an_entry_off_the_branch_is_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "u1", user("one"));
    add(&s, "side", assistant("side reply"));
    checkout(&s, Some("u1"));
    add(&s, "main", assistant("main reply"));
    let (inv, msg) = assert_rejected(&s, |s| s.append(compaction("sum", Some("side"))));
    assert_eq!(inv, Invalid::FirstKeptOffBranch("side".into()));
    assert!(
        msg.contains("compaction keeps from side, which is not on the current branch"),
        "{msg}"
    );
    let (inv, _) = assert_rejected(&s, |s| s.append(compaction("sum", Some("missing"))));
    assert_eq!(inv, Invalid::FirstKeptOffBranch("missing".into()));
    // Keeping from an entry of the branch is fine.
    add(&s, "c", compaction("sum", Some("main")));
    assert_eq!(message_ids(&s.context()), ["c", "main"]);
}

#[test]
fn compaction_that_separates_a_tool_call_from_its_result_is_rejected() {
    let (_dir, _store, s) = empty_session();
    drawn(&s);
    add(&s, "a2", assistant("done"));
    let (inv, msg) = assert_rejected(&s, |s| s.append(compaction("sum", Some("r1"))));
    assert_eq!(
        inv,
        Invalid::SplitsToolCall {
            first_kept: "r1".into(),
            call_id: "call-1".into()
        }
    );
    assert!(
        msg.contains(
            "would separate tool call \"call-1\" from its result; keep from the call instead"
        ),
        "{msg}"
    );

    // A call with no result yet cannot be dropped either: its result would
    // then answer nothing.
    add(&s, "a3", calls("again", &["call-2"]));
    let (inv, _) = assert_rejected(&s, |s| s.append(compaction("sum", None)));
    assert!(
        matches!(&inv, Invalid::SplitsToolCall { call_id, .. } if call_id == "call-2"),
        "{inv:?}"
    );
    add(
        &s,
        "x",
        EntryBody::Custom(Custom {
            namespace: "app".into(),
            visible: false,
            content: json!(1),
        }),
    );
    let (inv, _) = assert_rejected(&s, |s| s.append(compaction("sum", Some("x"))));
    assert!(
        matches!(&inv, Invalid::SplitsToolCall { call_id, .. } if call_id == "call-2"),
        "{inv:?}"
    );

    // Keeping from the call is fine, and so is keeping from before both.
    add(&s, "c1", compaction("sum", Some("a3")));
    assert_eq!(message_ids(&s.context()), ["c1", "a3"]);
    add(&s, "r2", results(&["call-2"]));
    add(&s, "c2", compaction("sum", Some("a1")));
    assert_eq!(
        message_ids(&s.context()),
        ["c2", "a1", "r1", "a2", "a3", "r2"]
    );
    assert_context_is_fold(&s);
}

#[test]
fn compaction_reaching_back_past_an_older_one_may_not_split_a_pair() {
    let (_dir, _store, s) = empty_session();
    drawn(&s);
    add(&s, "a2", assistant("done"));
    add(&s, "c1", compaction("first", Some("a2")));
    // Keeping from r1 reaches back into history the first compaction dropped,
    // and r1's call is before it.
    let (inv, _) = assert_rejected(&s, |s| s.append(compaction("second", Some("r1"))));
    assert_eq!(
        inv,
        Invalid::SplitsToolCall {
            first_kept: "r1".into(),
            call_id: "call-1".into()
        }
    );
    add(&s, "c2", compaction("second", Some("a1")));
    assert_eq!(message_ids(&s.context()), ["c2", "a1", "r1", "a2"]);
    assert_context_is_fold(&s);
}

#[test]
fn call_dropped_by_a_compaction_can_no_longer_be_answered() {
    let (_dir, _store, s) = empty_session();
    drawn(&s);
    add(&s, "c", compaction("sum", None));
    assert_eq!(message_ids(&s.context()), ["c"]);
    let (inv, _) = assert_rejected(&s, |s| s.append(results(&["call-1"])));
    assert_eq!(inv, Invalid::NoSuchCall("call-1".into()));
    // And its id may be used again, since the provider no longer sees it.
    add(&s, "a2", calls("drawing", &["call-1"]));
    add(&s, "r2", results(&["call-1"]));
    assert_context_is_fold(&s);
}

#[test]
fn label_on_a_missing_target_is_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "a", user("hi"));
    let (inv, msg) = assert_rejected(&s, |s| s.label("best", Some(&eid("nope"))));
    assert!(
        matches!(&inv, Invalid::Label { name, .. } if name == "best"),
        "{inv:?}"
    );
    assert!(
        msg.contains("label \"best\": its target nope is not an entry of this session"),
        "{msg}"
    );
}

#[test]
fn removing_a_label_that_does_not_exist_is_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "a", user("hi"));
    let (_, msg) = assert_rejected(&s, |s| s.label("best", None));
    assert!(
        msg.contains("label \"best\": there is no such label to remove"),
        "{msg}"
    );
    s.label("best", Some(&eid("a"))).expect("set label");
    s.label("best", None).expect("remove label");
    let (_, msg) = assert_rejected(&s, |s| s.label("best", None));
    assert!(msg.contains("no such label"), "{msg}");
    assert!(s.labels().is_empty());
}

#[test]
fn invalid_label_names_are_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "a", user("hi"));
    let long = "x".repeat(65);
    for name in ["", "has space", "slash/y", "ünïcode", long.as_str()] {
        let (inv, msg) = assert_rejected(&s, |s| s.label(name, Some(&eid("a"))));
        assert!(matches!(inv, Invalid::Label { .. }), "{name:?}: {inv:?}");
        assert!(msg.contains("a label name is 1 to 64 characters"), "{msg}");
    }
}

#[test]
fn invalid_ids_are_refused_with_the_rule_in_the_message() {
    let long = "a".repeat(65);
    for bad in ["", "two words", "semi;colon", "ütf", long.as_str()] {
        let err = EntryId::parse(bad).expect_err(bad);
        let msg = err.to_string();
        assert!(msg.starts_with("invalid entry id"), "{msg}");
        assert!(
            msg.contains("1 to 64 characters of A-Z, a-z, 0-9, '-', '_' and '.'"),
            "{msg}"
        );
    }
    assert_eq!(
        EntryId::parse(&"a".repeat(64)).map(|i| i.as_str().len()),
        Ok(64)
    );
    for bad in [
        "",
        "../../etc/passwd",
        "01HZZZZZZZZZZZZZZZZZZZZZZZ",
        "0123456789abcdefghjkmnpqrs0",
    ] {
        let msg = SessionId::parse(bad).expect_err(bad).to_string();
        assert!(msg.starts_with("invalid session id"), "{msg}");
        assert!(msg.contains("26 characters"), "{msg}");
    }
    // An invalid reference never resolves to anything.
    let (_dir, _store, s) = empty_session();
    add(&s, "a", user("hi"));
    assert_eq!(
        s.resolve("two words"),
        Err(LookupError::NotFound("two words".into()))
    );
}

#[test]
fn custom_entry_without_a_namespace_is_rejected() {
    let (_dir, _store, s) = empty_session();
    add(&s, "a", user("hi"));
    let (inv, msg) = assert_rejected(&s, |s| {
        s.append(EntryBody::Custom(Custom {
            namespace: String::new(),
            visible: true,
            content: json!("x"),
        }))
    });
    assert!(matches!(inv, Invalid::NoNamespace), "{inv:?}");
    assert!(msg.contains("needs a namespace"), "{msg}");
}

#[test]
fn read_only_session_refuses_appends() {
    let (_dir, store, s) = empty_session();
    add(&s, "a", user("hi"));
    let id = s.id().clone();
    drop(s);
    let r = store.open(&id, Access::Read).expect("open read-only");
    let err = r.append(user("no")).expect_err("read-only");
    assert!(matches!(err, AppendError::ReadOnly { .. }), "{err}");
    assert!(err.to_string().contains("open it for writing"), "{err}");
    assert_eq!(r.len(), 2);
}

#[test]
fn rejected_appends_leave_no_trace_after_reopen() {
    let (_dir, store, s) = empty_session();
    add(&s, "u", user("draw"));
    add(&s, "a1", calls("drawing", &["call-1"]));
    type Attempt = Box<dyn Fn(&Session) -> Result<Appended, AppendError>>;
    let attempts: Vec<Attempt> = vec![
        Box::new(|s: &Session| {
            s.append_entry(NewEntry {
                id: None,
                parent: Parent::Entry(eid("zz")),
                body: user("x"),
            })
        }),
        Box::new(|s: &Session| {
            s.append_entry(NewEntry {
                id: Some(eid("u")),
                parent: Parent::Leaf,
                body: user("x"),
            })
        }),
        Box::new(|s: &Session| s.append(results(&["call-7"]))),
        Box::new(|s: &Session| s.append(compaction("s", Some("zz")))),
        Box::new(|s: &Session| s.append(compaction("s", None))),
        Box::new(|s: &Session| s.label("l", Some(&eid("zz")))),
        Box::new(|s: &Session| s.label("l", None)),
    ];
    for attempt in &attempts {
        assert_rejected(&s, attempt);
    }
    let before = s.context();
    let id = s.id().clone();
    drop(s);
    let s = store.open(&id, Access::Write).expect("reopen");
    assert_eq!(s.len(), 3);
    assert_eq!(s.entry_count(), 2);
    assert_eq!(*s.context(), *before);
    // The call is still open and can be answered.
    add(&s, "r1", results(&["call-1"]));
}

// ---------------------------------------------------------------------------
// Lookup
// ---------------------------------------------------------------------------

#[test]
fn resolve_finds_full_ids_unique_prefixes_and_labels() {
    let (_dir, store, s) = empty_session();
    add(&s, "abc1", user("one"));
    add(&s, "abc2", assistant("two"));
    add(&s, "xyz9", user("three"));
    let generated = s.append(assistant("four")).expect("append").id.expect("id");
    assert_eq!(s.resolve("abc1"), Ok(eid("abc1")));
    assert_eq!(s.resolve("x"), Ok(eid("xyz9")));
    assert_eq!(s.resolve("xyz"), Ok(eid("xyz9")));
    assert_eq!(s.resolve(&generated.as_str()[..6]), Ok(generated.clone()));
    s.label("hero-panel", Some(&eid("abc2"))).expect("label");
    assert_eq!(s.resolve("hero-panel"), Ok(eid("abc2")));
    // A label works wherever an entry is expected: here, as a checkout target.
    let target = s.resolve("hero-panel").expect("resolve");
    s.checkout(Some(&target), None)
        .expect("checkout to a label");
    assert_eq!(message_ids(&s.context()), ["abc1", "abc2"]);
    // Labels survive a reopen.
    let id = s.id().clone();
    drop(s);
    let s = store.open(&id, Access::Read).expect("reopen");
    assert_eq!(s.resolve("hero-panel"), Ok(eid("abc2")));
    assert_eq!(
        s.labels(),
        BTreeMap::from([("hero-panel".to_owned(), eid("abc2"))])
    );
    assert_eq!(s.context().labels(), &s.labels());
}

#[test]
fn ambiguous_prefix_lists_every_candidate() {
    let (_dir, _store, s) = empty_session();
    add(&s, "abc1", user("one"));
    add(&s, "abc2", assistant("two"));
    add(&s, "abd3", user("three"));
    let err = s.resolve("ab").expect_err("ambiguous");
    assert_eq!(
        err,
        LookupError::Ambiguous {
            query: "ab".into(),
            candidates: vec!["abc1".into(), "abc2".into(), "abd3".into()]
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("\"ab\" is ambiguous: it matches abc1, abc2, abd3; type more characters"),
        "{msg}"
    );
    assert_eq!(
        s.resolve("abc"),
        Err(LookupError::Ambiguous {
            query: "abc".into(),
            candidates: vec!["abc1".into(), "abc2".into()]
        })
    );
    assert_eq!(s.resolve("abc2"), Ok(eid("abc2")));
}

#[test]
fn unknown_reference_is_not_found_with_a_hint() {
    let (_dir, _store, s) = empty_session();
    add(&s, "abc1", user("one"));
    for q in ["zzz", "", "abc12"] {
        let err = s.resolve(q).expect_err(q);
        assert_eq!(err, LookupError::NotFound(q.to_owned()));
        assert!(
            err.to_string().contains("`cairn tree` shows the entries"),
            "{err}"
        );
    }
}

#[test]
fn full_id_wins_over_a_label_and_a_label_over_a_prefix() {
    let (_dir, _store, s) = empty_session();
    add(&s, "a", user("one"));
    add(&s, "b", assistant("two"));
    add(&s, "abc", user("three"));
    // A label named like another entry's id does not shadow that entry.
    s.label("b", Some(&eid("a"))).expect("label");
    assert_eq!(s.resolve("b"), Ok(eid("b")));
    // A label named like a unique prefix of an id wins over the prefix.
    s.label("ab", Some(&eid("b"))).expect("label");
    assert_eq!(s.resolve("ab"), Ok(eid("b")));
    // Moving a label re-targets it.
    s.label("ab", Some(&eid("a"))).expect("label");
    assert_eq!(s.resolve("ab"), Ok(eid("a")));
}

#[test]
fn children_lists_direct_children_in_append_order() {
    let (_dir, _store, s) = empty_session();
    add(&s, "r", user("root"));
    add(&s, "c1", assistant("one"));
    put(&s, "c2", Some("r"), assistant("two"));
    add(&s, "g", user("grandchild"));
    put(&s, "c3", Some("r"), assistant("three"));
    put(&s, "r2", None, user("second root"));
    assert_eq!(
        s.children(Some(&eid("r"))),
        vec![eid("c1"), eid("c2"), eid("c3")]
    );
    assert_eq!(s.children(Some(&eid("c2"))), vec![eid("g")]);
    assert_eq!(s.children(Some(&eid("g"))), Vec::<EntryId>::new());
    assert_eq!(s.children(Some(&eid("missing"))), Vec::<EntryId>::new());
    assert_eq!(s.children(None), vec![eid("r"), eid("r2")]);
    assert_eq!(branch_ids(&s), ["r2"]);
    assert_context_is_fold(&s);
}

#[test]
fn checkout_before_the_first_entry_gives_an_empty_context_with_the_initial_state() {
    let (store, _dir) = file_store();
    let initial = json!({"buff": "none", "level": 1});
    let s = new_session(&store, initial.clone());
    add(&s, "u", user("hi"));
    add(&s, "st", set_state(json!({"buff": "power-up"})));
    s.append(EntryBody::Settings(Settings {
        values: Map::from_iter([("model".to_owned(), json!("m1"))]),
    }))
    .expect("settings");
    let co = checkout(&s, None);
    let ctx = s.context();
    assert_eq!(ctx.messages().len(), 0);
    assert_eq!(ctx.app_state(), &initial);
    assert!(ctx.settings().is_empty());
    assert_eq!(ctx.compaction(), None);
    assert_eq!(ctx.leaf(), Some(&co));
    assert_eq!(branch_ids(&s), [co.as_str()]);
    // The checkout is a new root and everything else is still there.
    assert_eq!(s.children(None), vec![eid("u"), co.clone()]);
    assert_eq!(s.entry_count(), 4);
    // Continuing from there starts a fresh conversation.
    add(&s, "fresh", user("again"));
    assert_eq!(message_ids(&s.context()), ["fresh"]);
    assert_eq!(s.context().app_state(), &initial);
    assert_context_is_fold(&s);
    // The plain fold of no entry at all is the same empty context, without a leaf.
    assert_eq!(
        Context::fold(&initial, &[], None),
        Context::empty(initial.clone())
    );
}

// ---------------------------------------------------------------------------
// Projection rules
// ---------------------------------------------------------------------------

#[test]
fn only_the_newest_compaction_on_the_branch_counts() {
    let (_dir, _store, s) = empty_session();
    two_questions(&s);
    add(&s, "a2", assistant("two"));
    add(&s, "c1", compaction("first summary", Some("u2")));
    add(&s, "u3", user("three"));
    add(&s, "a3", assistant("three"));
    let ctx = s.context();
    assert_eq!(message_ids(&ctx), ["c1", "u2", "a2", "u3", "a3"]);
    assert_eq!(ctx.messages()[0].source(), &Source::CompactionSummary);
    assert!(
        ctx.messages()[0]
            .message()
            .expect("read the message")
            .plain_text()
            .ends_with("first summary")
    );
    add(&s, "c2", compaction("second summary", Some("u3")));
    add(&s, "u4", user("four"));
    let ctx = s.context();
    assert_eq!(message_ids(&ctx), ["c2", "u3", "a3", "u4"]);
    let sources: Vec<Source> = ctx.messages().iter().map(|m| m.source().clone()).collect();
    assert_eq!(
        sources,
        [
            Source::CompactionSummary,
            Source::Message,
            Source::Message,
            Source::Message
        ]
    );
    assert!(
        ctx.messages()[0]
            .message()
            .expect("read the message")
            .plain_text()
            .ends_with("second summary")
    );
    assert_eq!(
        ctx.messages()[0].message().expect("read the message").role,
        Role::User
    );
    let active = ctx.compaction().expect("a compaction is in force");
    assert_eq!(
        (active.entry.as_str(), active.summary.as_str()),
        ("c2", "second summary")
    );
    assert_eq!(active.first_kept, Some(eid("u3")));
    assert_eq!(active.tokens_before, Some(1000));
    assert_context_is_fold(&s);
}

#[test]
fn newer_compaction_may_keep_from_before_the_older_one() {
    let (_dir, store, s) = empty_session();
    two_questions(&s);
    add(&s, "c1", compaction("first", Some("u2")));
    add(&s, "a2", assistant("two"));
    add(&s, "c2", compaction("second", Some("a1")));
    // From a1 on, with the older compaction's summary gone.
    assert_eq!(message_ids(&s.context()), ["c2", "a1", "u2", "a2"]);
    assert_context_is_fold(&s);
    let id = s.id().clone();
    drop(s);
    let s = store.open(&id, Access::Read).expect("reopen");
    assert_eq!(message_ids(&s.context()), ["c2", "a1", "u2", "a2"]);
}

#[test]
fn compaction_keeping_nothing_leaves_its_summary_and_what_follows() {
    let (_dir, _store, s) = empty_session();
    add(&s, "u1", user("one"));
    add(&s, "a1", assistant("one"));
    add(&s, "c", compaction("all of it", None));
    assert_eq!(message_ids(&s.context()), ["c"]);
    add(&s, "u2", user("two"));
    assert_eq!(message_ids(&s.context()), ["c", "u2"]);
    assert_context_is_fold(&s);
}

#[test]
fn compaction_on_another_branch_does_not_leak() {
    let (_dir, _store, s) = empty_session();
    two_questions(&s);
    add(&s, "c", compaction("side summary", Some("u2")));
    add(&s, "side", assistant("side"));
    put(&s, "main", Some("u2"), assistant("main"));
    let ctx = s.context();
    assert_eq!(message_ids(&ctx), ["u1", "a1", "u2", "main"]);
    assert_eq!(ctx.compaction(), None);
    assert_context_is_fold(&s);
    checkout(&s, Some("side"));
    assert_eq!(message_ids(&s.context()), ["c", "u2", "side"]);
    assert_context_is_fold(&s);
}

#[test]
fn checkout_to_before_a_compaction_restores_the_full_messages() {
    let (_dir, _store, s) = empty_session();
    two_questions(&s);
    add(&s, "a2", assistant("two"));
    add(&s, "c1", compaction("first", Some("u2")));
    add(&s, "u3", user("three"));
    add(&s, "c2", compaction("second", None));
    add(&s, "u4", user("four"));
    assert_eq!(message_ids(&s.context()), ["c2", "u4"]);
    // Back to between the two compactions: the first one is in force again.
    let co = checkout(&s, Some("u3"));
    assert_eq!(message_ids(&s.context()), ["c1", "u2", "a2", "u3"]);
    assert_eq!(
        s.context().compaction().map(|c| c.entry.to_string()),
        Some("c1".into())
    );
    assert_context_is_fold(&s);
    // Back to before both.
    checkout(&s, Some("a2"));
    assert_eq!(message_ids(&s.context()), ["u1", "a1", "u2", "a2"]);
    assert_eq!(s.context().compaction(), None);
    assert_context_is_fold(&s);
    assert!(s.branch().iter().all(|e| e != &co));
}

#[test]
fn app_state_patches_and_settings_fold_along_the_branch() {
    let (store, _dir) = file_store();
    let s = new_session(
        &store,
        json!({"hero": {"hp": 10, "buff": "none"}, "mode": "story"}),
    );
    add(&s, "u", user("go"));
    add(
        &s,
        "p1",
        patch_state(json!({"hero": {"buff": "power-up", "items": ["lollipop"]}})),
    );
    add(
        &s,
        "p2",
        patch_state(json!({"hero": {"hp": null}, "mode": null, "panel": 1})),
    );
    let set = |k: &str, v: Value| {
        EntryBody::Settings(Settings {
            values: Map::from_iter([(k.to_owned(), v)]),
        })
    };
    add(&s, "s1", set("model", json!("big")));
    add(&s, "s2", set("effort", json!("high")));
    add(&s, "s3", set("model", Value::Null));
    let ctx = s.context();
    assert_eq!(
        ctx.app_state(),
        &json!({"hero": {"buff": "power-up", "items": ["lollipop"]}, "panel": 1})
    );
    assert_eq!(
        ctx.settings(),
        &Map::from_iter([("effort".to_owned(), json!("high"))])
    );
    assert_context_is_fold(&s);
    checkout(&s, Some("p1"));
    let ctx = s.context();
    assert_eq!(
        ctx.app_state(),
        &json!({"hero": {"hp": 10, "buff": "power-up", "items": ["lollipop"]}, "mode": "story"})
    );
    assert!(ctx.settings().is_empty());
    checkout(&s, Some("s2"));
    assert_eq!(
        s.context().settings(),
        &Map::from_iter([
            ("model".to_owned(), json!("big")),
            ("effort".to_owned(), json!("high"))
        ])
    );
    assert_context_is_fold(&s);
}

#[test]
fn long_app_state_history_rewinds_exactly_to_every_point() {
    // More patches than the projection keeps between snapshots, so moves
    // replay from a snapshot as well as from the initial state.
    let (store, backend) = mem_store();
    let s = new_session(&store, json!({"n": 0}));
    let mut ids = Vec::new();
    for i in 1..=40 {
        let body = if i % 7 == 0 {
            set_state(json!({"n": i, "reset": true}))
        } else {
            patch_state(json!({"n": i, format!("k{}", i % 5): i, "reset": null}))
        };
        ids.push(s.append(body).expect("append").id.expect("id"));
    }
    let mut want = json!({"n": 0});
    let mut expected = Vec::new();
    for e in all_entries(&s) {
        if let EntryBody::AppState(change) = &e.body {
            cairn::apply_state(&mut want, change);
        }
        expected.push(want.clone());
    }
    for (i, id) in ids
        .iter()
        .enumerate()
        .rev()
        .step_by(3)
        .chain([(0, &ids[0])])
    {
        s.checkout(Some(id), None).expect("checkout");
        assert_eq!(
            s.context().app_state(),
            &expected[i],
            "after checkout to patch {}",
            i + 1
        );
        assert_context_is_fold(&s);
    }
    assert_eq!(backend.raw(s.id()).map(|l| l.len()), Some(s.len() as usize));
}

#[test]
fn checkout_summaries_and_visible_custom_entries_reach_the_context() {
    let (_dir, _store, s) = empty_session();
    add(&s, "u", user("one"));
    add(&s, "a", assistant("one"));
    add(
        &s,
        "hidden",
        EntryBody::Custom(Custom {
            namespace: "app.notes".into(),
            visible: false,
            content: json!("secret"),
        }),
    );
    add(
        &s,
        "shown",
        EntryBody::Custom(Custom {
            namespace: "app.notes".into(),
            visible: true,
            content: json!("a note"),
        }),
    );
    add(
        &s,
        "obj",
        EntryBody::Custom(Custom {
            namespace: "app.data".into(),
            visible: true,
            content: json!({"k": 1}),
        }),
    );
    add(
        &s,
        "info",
        EntryBody::SessionInfo(SessionInfo {
            title: Some("Pig hero".into()),
        }),
    );
    s.label("here", Some(&eid("a"))).expect("label");
    let co = s
        .append_entry(NewEntry {
            id: Some(eid("co")),
            parent: Parent::Entry(eid("u")),
            body: EntryBody::Checkout(Checkout {
                from: Some(eid("obj")),
                summary: Some("we tried notes".into()),
            }),
        })
        .expect("checkout with summary");
    assert_eq!(co.id, Some(eid("co")));
    checkout(&s, Some("obj"));
    let ctx = s.context();
    let got: Vec<(String, Source)> = ctx
        .messages()
        .iter()
        .map(|m| (m.entry().to_string(), m.source().clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("u".to_owned(), Source::Message),
            ("a".to_owned(), Source::Message),
            ("shown".to_owned(), Source::Custom("app.notes".into())),
            ("obj".to_owned(), Source::Custom("app.data".into())),
        ]
    );
    assert_eq!(
        ctx.messages()[2]
            .message()
            .expect("read the message")
            .plain_text(),
        "a note"
    );
    assert_eq!(
        ctx.messages()[3]
            .message()
            .expect("read the message")
            .plain_text(),
        r#"{"k":1}"#
    );
    assert_eq!(s.title().as_deref(), Some("Pig hero"));
    checkout(&s, Some("co"));
    let ctx = s.context();
    assert_eq!(message_ids(&ctx), ["u", "co"]);
    assert_eq!(ctx.messages()[1].source(), &Source::CheckoutSummary);
    assert!(
        ctx.messages()[1]
            .message()
            .expect("read the message")
            .plain_text()
            .ends_with("we tried notes")
    );
    // Labels are session-wide, whatever the branch.
    assert_eq!(
        ctx.labels(),
        &BTreeMap::from([("here".to_owned(), eid("a"))])
    );
    assert_context_is_fold(&s);
}

#[test]
fn context_snapshot_is_unchanged_by_later_appends_and_moves() {
    let (store, _dir) = file_store();
    let s = new_session(&store, json!({"v": 1}));
    add(&s, "u", user("one"));
    add(&s, "a1", calls("drawing", &["call-1"]));
    s.label("l", Some(&eid("u"))).expect("label");
    let snapshot = s.context();
    let copy: Context = (*snapshot).clone();
    add(&s, "r1", results(&["call-1"]));
    add(&s, "st", set_state(json!({"v": 2})));
    s.label("l", Some(&eid("a1"))).expect("label");
    add(&s, "c", compaction("sum", Some("a1")));
    checkout(&s, None);
    assert_ne!(*s.context(), copy);
    drop(s);
    assert_eq!(
        *snapshot, copy,
        "a handed-out context changed after appends"
    );
    assert_eq!(snapshot.app_state(), &json!({"v": 1}));
    assert_eq!(message_ids(&snapshot), ["u", "a1"]);
    assert_eq!(snapshot.labels().get("l"), Some(&eid("u")));
    assert_eq!(snapshot.compaction(), None);
}

// ---------------------------------------------------------------------------
// Fork
// ---------------------------------------------------------------------------

#[test]
fn fork_copies_the_branch_names_its_origin_and_leaves_the_source_untouched() {
    let (store, _dir) = file_store();
    let s = new_session(&store, json!({"mode": "start"}));
    seed_rewind(&s);
    s.label("lollipop", Some(&eid("e1"))).expect("label");
    s.label("sidepanel", Some(&eid("e4"))).expect("label");
    let source_bytes = std::fs::read(s.location()).expect("read");
    let source_ctx = s.context();
    let fork = store
        .fork(&s, Some(&eid("e3")), Some("what if".into()))
        .expect("fork");
    assert_eq!(
        fork.header().lineage.forked_from,
        Some(ForkOrigin {
            session: s.id().clone(),
            entry: Some(eid("e3"))
        })
    );
    assert_ne!(fork.id(), s.id());
    assert_eq!(fork.title().as_deref(), Some("what if"));
    assert_eq!(branch_ids(&fork), ["e0", "e1", "e2", "e3"]);
    assert_eq!(fork.leaf(), Some(eid("e3")));
    assert_eq!(fork.context().app_state(), &exhausted());
    assert_eq!(message_ids(&fork.context()), ["e0", "e2"]);
    // Labels on the copied branch whose target was copied would be kept; these
    // were set after the fork point, so the fork has none.
    assert!(fork.labels().is_empty());
    let copied: Vec<Entry> = s
        .branch_entries(Some(&eid("e3")))
        .expect("branch")
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(all_entries(&fork), copied);
    assert_eq!(
        *fork.context(),
        Context::fold(&json!({"mode": "start"}), &copied, Some(&eid("e3")))
    );
    // The source is untouched.
    assert_eq!(std::fs::read(s.location()).expect("read"), source_bytes);
    assert_eq!(*s.context(), *source_ctx);
    // The fork is a session of its own, listed, and can go on.
    add(&fork, "f1", user("and then?"));
    assert_eq!(std::fs::read(s.location()).expect("read"), source_bytes);
    let listed = store.list().expect("list");
    assert!(
        listed
            .iter()
            .any(|l| &l.id == fork.id() && l.forked_from.as_ref() == Some(s.id()))
    );
}

#[test]
fn fork_before_the_first_entry_is_empty() {
    let (store, _dir) = mem_store();
    let s = new_session(&store, json!({"x": 1}));
    add(&s, "u", user("one"));
    let fork = store.fork(&s, None, None).expect("fork");
    assert_eq!(fork.entry_count(), 0);
    assert_eq!(*fork.context(), Context::empty(json!({"x": 1})));
    assert_eq!(
        fork.header().lineage.forked_from,
        Some(ForkOrigin {
            session: s.id().clone(),
            entry: None
        })
    );
    assert_eq!(fork.title().as_deref(), Some("test"));
}

#[test]
fn fork_as_uses_the_callers_id_and_refuses_one_that_is_taken() {
    let (store, _dir) = mem_store();
    let s = new_session(&store, json!({}));
    let u = add(&s, "u", user("one"));
    let id = SessionId::parse("01jfxrk0000000000000000000").expect("id");
    let fork = store.fork_as(&s, Some(&u), None, id.clone()).expect("fork");
    assert_eq!(fork.id(), &id);
    assert_eq!(fork.branch(), vec![u.clone()]);
    drop(fork);
    let again = store.fork_as(&s, Some(&u), None, id.clone());
    assert!(
        matches!(
            again,
            Err(StoreError::Open(OpenError::AlreadyExists { .. }))
        ),
        "{again:?}"
    );
    assert_eq!(
        store.open(&id, Access::Read).expect("open").entry_count(),
        1
    );
}

/// Regression: a fork drops labels whose target it does not copy, but then
/// copied the later removal of such a label, which the fork's own append
/// check rejected ("there is no such label to remove"), so the whole fork
/// failed.
#[test]
fn regression_fork_failed_on_removal_of_a_label_it_had_dropped() {
    let (_dir, store, s) = empty_session();
    add(&s, "u1", user("one"));
    add(&s, "side", assistant("side"));
    checkout(&s, Some("u1"));
    add(&s, "main", assistant("main"));
    // Set on this branch, pointing at the other one: not copied.
    s.label("x", Some(&eid("side"))).expect("label");
    s.label("x", None).expect("unlabel");
    // Set on the other branch, removed on this one.
    put(&s, "side2", Some("side"), assistant("side again"));
    s.label("y", Some(&eid("side2"))).expect("label");
    put(&s, "main2", Some("main"), user("back on main"));
    s.label("y", None).expect("unlabel");
    // A label kept by the fork, set and removed on the branch, then set again.
    s.label("z", Some(&eid("u1"))).expect("label");
    s.label("z", None).expect("unlabel");
    s.label("z", Some(&eid("main"))).expect("label");
    let at = s.leaf().expect("leaf");
    let fork = store.fork(&s, Some(&at), None).expect("fork");
    assert_eq!(
        fork.labels(),
        BTreeMap::from([("z".to_owned(), eid("main"))])
    );
    assert_eq!(message_ids(&fork.context()), ["u1", "main", "main2"]);
    assert_eq!(fork.leaf(), Some(at));
    assert_context_is_fold(&fork);
}

/// Regression: a fork drops labels whose target it does not copy, but a
/// compaction on the branch whose `first_kept` was such a label then kept
/// from an entry the fork did not have, and the fork failed ("not on the
/// current branch").
#[test]
fn regression_fork_failed_when_a_compaction_kept_from_a_dropped_label() {
    let (_dir, store, s) = empty_session();
    add(&s, "u1", user("one"));
    add(&s, "side", assistant("side"));
    checkout(&s, Some("u1"));
    add(&s, "a1", assistant("main"));
    let dropped = s
        .label("x", Some(&eid("side")))
        .expect("label")
        .id
        .expect("id");
    add(&s, "u2", user("two"));
    add(&s, "c1", compaction("first", Some(dropped.as_str())));
    let dropped2 = s
        .label("y", Some(&eid("side")))
        .expect("label")
        .id
        .expect("id");
    add(&s, "c2", compaction("second", Some(dropped2.as_str())));
    add(&s, "u3", user("three"));
    assert_eq!(message_ids(&s.context()), ["c2", "u3"]);
    let fork = store.fork(&s, Some(&eid("u3")), None).expect("fork");
    assert_eq!(message_ids(&fork.context()), ["c2", "u3"]);
    checkout(&fork, Some("c1"));
    assert_eq!(message_ids(&fork.context()), ["c1", "u2"]);
    assert!(fork.labels().is_empty());
    assert_context_is_fold(&fork);
}

/// Regression: a label whose target is a label entry the fork dropped was
/// copied (its target is on the branch) and then rejected by the fork's own
/// check ("its target is not an entry"), so the fork failed.
#[test]
fn regression_fork_failed_on_a_label_targeting_a_dropped_label() {
    let (_dir, store, s) = empty_session();
    add(&s, "u1", user("one"));
    add(&s, "side", assistant("side"));
    checkout(&s, Some("u1"));
    let dropped = s
        .label("x", Some(&eid("side")))
        .expect("label")
        .id
        .expect("id");
    s.label("y", Some(&dropped)).expect("label");
    s.label("z", Some(&eid("u1"))).expect("label");
    add(&s, "u2", user("two"));
    let fork = store.fork(&s, Some(&eid("u2")), None).expect("fork");
    assert_eq!(fork.labels(), BTreeMap::from([("z".to_owned(), eid("u1"))]));
    assert_eq!(message_ids(&fork.context()), ["u1", "u2"]);
    assert_context_is_fold(&fork);
}

/// Regression: `Store::fork` with an explicit title wrote it in the fork's
/// header, but a `session_info` title copied from the branch then overrode
/// it, so the fork did not have the title asked for.
#[test]
fn regression_fork_lost_its_explicit_title_to_a_copied_session_info() {
    let (_dir, store, s) = empty_session();
    add(&s, "u1", user("one"));
    add(
        &s,
        "info",
        EntryBody::SessionInfo(SessionInfo {
            title: Some("Pig hero, day 1".into()),
        }),
    );
    add(&s, "a1", assistant("one"));
    let fork = store
        .fork(&s, Some(&eid("a1")), Some("What if".into()))
        .expect("fork");
    assert_eq!(fork.title().as_deref(), Some("What if"));
    assert_eq!(message_ids(&fork.context()), ["u1", "a1"]);
    let id = fork.id().clone();
    drop(fork);
    let again = store.open(&id, Access::Read).expect("reopen");
    assert_eq!(again.title().as_deref(), Some("What if"));
    let listed = store.list().expect("list");
    let summary = listed.iter().find(|l| l.id == id).expect("listed");
    assert_eq!(summary.title.as_deref(), Some("What if"));
    // Without a title, the fork keeps the title of its branch.
    let plain = store.fork(&s, Some(&eid("a1")), None).expect("fork");
    assert_eq!(plain.title().as_deref(), Some("Pig hero, day 1"));
}

// ---------------------------------------------------------------------------
// Property test: random histories against a model
// ---------------------------------------------------------------------------

/// Where an append attaches.
#[derive(Debug, Clone)]
enum At {
    Leaf,
    Entry(Index),
    Root,
    Missing,
}

/// Which id an append asks for.
#[derive(Debug, Clone)]
enum IdSpec {
    Generated,
    Named(u8),
    Duplicate(Index),
}

/// Which calls a tool-result message answers.
#[derive(Debug, Clone)]
enum Answer {
    /// One or two open calls of the parent's context.
    Open(Index, Option<Index>),
    /// A call id nobody made.
    Unknown,
    /// A call of the context that already has a result.
    Answered(Index),
    /// A call made somewhere in the session but not in the parent's context.
    Elsewhere(Index),
    /// The same open call twice in one message.
    Twice(Index),
}

#[derive(Debug, Clone)]
enum FirstKept {
    Nothing,
    OnBranch(Index),
    Anywhere(Index),
    Missing,
}

#[derive(Debug, Clone)]
enum BodySpec {
    User(String),
    /// An assistant message with 0–2 new calls, maybe reusing a call id made
    /// somewhere in the session.
    Assistant {
        new_calls: u8,
        reuse: Option<Index>,
    },
    Results(Answer),
    AppState(AppStateChange),
    Settings(Map<String, Value>),
    Compaction {
        first_kept: FirstKept,
        summary: String,
    },
    Custom {
        namespace: bool,
        visible: bool,
        content: Value,
    },
    Title(String),
}

#[derive(Debug, Clone)]
enum Op {
    Append {
        at: At,
        id: IdSpec,
        body: BodySpec,
    },
    Checkout {
        to: Option<Index>,
        summary: Option<String>,
    },
    Label {
        name: &'static str,
        target: Option<Option<Index>>,
    },
    Burst(Vec<AppStateChange>),
    /// A tool round at the leaf: an assistant message with 1–3 calls, then a
    /// tool message answering all of them, or only the first.
    Turn {
        calls: u8,
        all: bool,
    },
    Fork(Option<Index>),
    Reopen,
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..50).prop_map(Value::from),
        "[a-z猪]{0,5}".prop_map(Value::String),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(&["a", "b", "c", "buff", "skill"][..]).prop_map(str::to_owned)
}

fn json_value() -> BoxedStrategy<Value> {
    scalar()
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
        .boxed()
}

fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(key(), json_value(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn state_change() -> impl Strategy<Value = AppStateChange> {
    prop_oneof![
        2 => json_object().prop_map(AppStateChange::Set),
        1 => json_value().prop_map(AppStateChange::Set),
        6 => json_object().prop_map(AppStateChange::Patch),
        1 => json_value().prop_map(AppStateChange::Patch),
    ]
}

fn settings_values() -> impl Strategy<Value = Map<String, Value>> {
    let k = prop::sample::select(&["model", "provider", "reasoning_effort", "temperature"][..]);
    let v = prop_oneof![
        Just(Value::Null),
        "[a-z]{1,4}".prop_map(Value::String),
        (0i64..3).prop_map(Value::from)
    ];
    prop::collection::btree_map(k.prop_map(str::to_owned), v, 0..3)
        .prop_map(|m| m.into_iter().collect())
}

fn text() -> impl Strategy<Value = String> {
    "[a-z 猪]{0,12}"
}

fn at() -> impl Strategy<Value = At> {
    prop_oneof![
        14 => Just(At::Leaf),
        4 => any::<Index>().prop_map(At::Entry),
        1 => Just(At::Root),
        1 => Just(At::Missing),
    ]
}

fn id_spec() -> impl Strategy<Value = IdSpec> {
    prop_oneof![
        14 => Just(IdSpec::Generated),
        3 => (0u8..24).prop_map(IdSpec::Named),
        1 => any::<Index>().prop_map(IdSpec::Duplicate),
    ]
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        10 => (any::<Index>(), prop::option::of(any::<Index>())).prop_map(|(a, b)| Answer::Open(a, b)),
        1 => Just(Answer::Unknown),
        1 => any::<Index>().prop_map(Answer::Answered),
        2 => any::<Index>().prop_map(Answer::Elsewhere),
        1 => any::<Index>().prop_map(Answer::Twice),
    ]
}

fn first_kept() -> impl Strategy<Value = FirstKept> {
    prop_oneof![
        2 => Just(FirstKept::Nothing),
        6 => any::<Index>().prop_map(FirstKept::OnBranch),
        2 => any::<Index>().prop_map(FirstKept::Anywhere),
        1 => Just(FirstKept::Missing),
    ]
}

fn body() -> impl Strategy<Value = BodySpec> {
    prop_oneof![
        5 => text().prop_map(BodySpec::User),
        5 => (0u8..=2, prop::option::weighted(0.15, any::<Index>()))
            .prop_map(|(new_calls, reuse)| BodySpec::Assistant { new_calls, reuse }),
        5 => answer().prop_map(BodySpec::Results),
        4 => state_change().prop_map(BodySpec::AppState),
        1 => settings_values().prop_map(BodySpec::Settings),
        3 => (first_kept(), text()).prop_map(|(first_kept, summary)| BodySpec::Compaction { first_kept, summary }),
        2 => (prop::bool::weighted(0.9), any::<bool>(), json_value())
            .prop_map(|(namespace, visible, content)| BodySpec::Custom { namespace, visible, content }),
        1 => text().prop_map(BodySpec::Title),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let label_name = prop::sample::select(
        &[
            "alpha", "beta", "gamma", "alpha", "beta", "gamma", "bad name", "",
        ][..],
    );
    let label_target = prop_oneof![
        6 => any::<Index>().prop_map(|i| Some(Some(i))),
        1 => Just(Some(None)),
        3 => Just(None),
    ];
    prop_oneof![
        12 => (at(), id_spec(), body()).prop_map(|(at, id, body)| Op::Append { at, id, body }),
        3 => (prop::option::weighted(0.85, any::<Index>()), prop::option::weighted(0.3, text()))
            .prop_map(|(to, summary)| Op::Checkout { to, summary }),
        2 => (label_name, label_target).prop_map(|(name, target)| Op::Label { name, target }),
        1 => prop::collection::vec(state_change(), 1..24).prop_map(Op::Burst),
        2 => (1u8..=3, prop::bool::weighted(0.8)).prop_map(|(calls, all)| Op::Turn { calls, all }),
        1 => prop::option::weighted(0.9, any::<Index>()).prop_map(Op::Fork),
        1 => Just(Op::Reopen),
    ]
}

fn history() -> impl Strategy<Value = (Value, Vec<Op>)> {
    (json_object(), prop::collection::vec(op(), 1..40))
}

fn proptest_config() -> ProptestConfig {
    let cases = std::env::var("CAIRN_PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..ProptestConfig::default()
    }
}

/// RFC 7386, written again here so the model does not lean on the library's.
fn rfc7386(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(t) = target else {
        unreachable!("just made an object")
    };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            rfc7386(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// What the model expects an append to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    DuplicateId,
    MissingParent,
    NoSuchCall,
    AlreadyAnswered,
    CallReused,
    FirstKeptOffBranch,
    SplitsToolCall,
    Label,
    NoNamespace,
    UnansweredCalls,
}

fn verdict_of(err: &AppendError) -> Verdict {
    let AppendError::Invalid(inv) = err else {
        panic!("a rejected append must be AppendError::Invalid, got: {err}");
    };
    match inv {
        Invalid::DuplicateId(_) => Verdict::DuplicateId,
        Invalid::MissingParent(_) => Verdict::MissingParent,
        Invalid::NoSuchCall(_) => Verdict::NoSuchCall,
        Invalid::AlreadyAnswered(_) => Verdict::AlreadyAnswered,
        Invalid::FirstKeptOffBranch(_) => Verdict::FirstKeptOffBranch,
        Invalid::SplitsToolCall { .. } => Verdict::SplitsToolCall,
        Invalid::Label { .. } => Verdict::Label,
        Invalid::UnansweredCalls { .. } => Verdict::UnansweredCalls,
        Invalid::CallIdReused(_) => Verdict::CallReused,
        Invalid::NoNamespace => Verdict::NoNamespace,
        other => panic!("unexpected rejection: {other}"),
    }
}

/// The model: every entry appended successfully, in order, plus what the
/// header says.
struct Model {
    initial: Value,
    entries: Vec<Entry>,
    title: String,
    next_call: u32,
}

/// The model's own projection of one branch.
struct View<'a> {
    path: Vec<&'a Entry>,
    /// Where the visible history starts on `path`.
    start: usize,
    compaction: Option<&'a Entry>,
    state: Value,
    settings: Map<String, Value>,
}

impl View<'_> {
    /// Tool calls and results visible to the model: call id → (position of
    /// the call, position of its result).
    fn calls(&self) -> HashMap<String, (usize, Option<usize>)> {
        let mut calls: HashMap<String, (usize, Option<usize>)> = HashMap::new();
        for (pos, e) in self.path.iter().enumerate().skip(self.start) {
            if let EntryBody::Message(m) = &e.body {
                for (c, _, _) in m.tool_calls() {
                    calls.insert(c.to_owned(), (pos, None));
                }
                for r in m.tool_results() {
                    if let Some(call) = calls.get_mut(r) {
                        call.1 = Some(pos);
                    }
                }
            }
        }
        calls
    }
}

impl Model {
    fn leaf(&self) -> Option<&EntryId> {
        self.entries.last().map(|e| &e.id)
    }

    fn get(&self, id: &EntryId) -> Option<&Entry> {
        self.entries.iter().find(|e| &e.id == id)
    }

    fn pick(&self, i: &Index) -> Option<EntryId> {
        (!self.entries.is_empty()).then(|| self.entries[i.index(self.entries.len())].id.clone())
    }

    fn path(&self, at: Option<&EntryId>) -> Vec<&Entry> {
        let mut path = Vec::new();
        let mut cur = at.and_then(|a| self.get(a));
        while let Some(e) = cur {
            path.push(e);
            cur = e.parent.as_ref().and_then(|p| self.get(p));
        }
        path.reverse();
        path
    }

    fn labels(&self) -> BTreeMap<String, EntryId> {
        let mut labels = BTreeMap::new();
        for e in &self.entries {
            if let EntryBody::Label(l) = &e.body {
                match &l.target {
                    Some(t) => labels.insert(l.name.clone(), t.clone()),
                    None => labels.remove(&l.name),
                };
            }
        }
        labels
    }

    fn all_call_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        for e in &self.entries {
            if let EntryBody::Message(m) = &e.body {
                ids.extend(m.tool_calls().map(|(c, _, _)| c.to_owned()));
            }
        }
        ids.sort();
        ids.dedup();
        ids
    }

    fn view(&self, at: Option<&EntryId>) -> View<'_> {
        let path = self.path(at);
        let mut state = self.initial.clone();
        let mut settings = Map::new();
        let mut newest = None;
        for (pos, e) in path.iter().enumerate() {
            match &e.body {
                EntryBody::AppState(AppStateChange::Set(v)) => state = v.clone(),
                EntryBody::AppState(AppStateChange::Patch(p)) => rfc7386(&mut state, p),
                EntryBody::Settings(s) => {
                    for (k, v) in &s.values {
                        if v.is_null() {
                            settings.remove(k);
                        } else {
                            settings.insert(k.clone(), v.clone());
                        }
                    }
                }
                EntryBody::Compaction(_) => newest = Some(pos),
                _ => {}
            }
        }
        let (start, compaction) = match newest {
            None => (0, None),
            Some(cpos) => {
                let EntryBody::Compaction(c) = &path[cpos].body else {
                    unreachable!("found as a compaction")
                };
                let start = c
                    .first_kept
                    .as_ref()
                    .and_then(|k| path.iter().position(|e| &e.id == k))
                    .unwrap_or(cpos + 1);
                (start, Some(path[cpos]))
            }
        };
        View {
            path,
            start,
            compaction,
            state,
            settings,
        }
    }

    /// The fate of appending `body` with `id` under `parent`, by the rules of
    /// `docs/DESIGN.md` §3.5 (`docs/FORMAT.md` §8), in the order the session checks them.
    fn verdict(&self, id: Option<&EntryId>, parent: Option<&EntryId>, body: &EntryBody) -> Verdict {
        match self.verdict_of_checks(id, parent, body) {
            Verdict::Ok if parent != self.leaf() => {
                // A branch may not start where a tool call has no result,
                // unless the entry itself answers every such call.
                let answers: Vec<&str> = match body {
                    EntryBody::Message(m) => m.tool_results().collect(),
                    _ => Vec::new(),
                };
                let dangling = self
                    .view(parent)
                    .calls()
                    .into_iter()
                    .any(|(c, (_, r))| r.is_none() && !answers.contains(&c.as_str()));
                if dangling {
                    Verdict::UnansweredCalls
                } else {
                    Verdict::Ok
                }
            }
            v => v,
        }
    }

    /// Whether a checkout to `target` (with `summary`) would change nothing.
    fn checkout_is_noop(&self, target: Option<&EntryId>, summary: Option<&String>) -> bool {
        if summary.is_some() {
            return false;
        }
        match self.entries.last() {
            None => target.is_none(),
            Some(leaf) if Some(&leaf.id) == target => true,
            Some(leaf) => {
                matches!(&leaf.body, EntryBody::Checkout(c) if c.summary.is_none() && leaf.parent.as_ref() == target)
            }
        }
    }

    fn verdict_of_checks(
        &self,
        id: Option<&EntryId>,
        parent: Option<&EntryId>,
        body: &EntryBody,
    ) -> Verdict {
        if id.is_some_and(|id| self.get(id).is_some()) {
            return Verdict::DuplicateId;
        }
        if parent.is_some_and(|p| self.get(p).is_none()) {
            return Verdict::MissingParent;
        }
        match body {
            EntryBody::Label(l) => {
                let name_ok = !l.name.is_empty()
                    && l.name.len() <= 64
                    && l.name
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c));
                let ok = name_ok
                    && match &l.target {
                        Some(t) => self.get(t).is_some(),
                        None => self.labels().contains_key(&l.name),
                    };
                if !ok {
                    return Verdict::Label;
                }
            }
            EntryBody::Custom(c) if c.namespace.is_empty() => return Verdict::NoNamespace,
            _ => {}
        }
        let view = self.view(parent);
        let visible = view.calls();
        match body {
            EntryBody::Message(m) => {
                let mut own: Vec<&str> = Vec::new();
                for (c, _, _) in m.tool_calls() {
                    if visible.contains_key(c) || own.contains(&c) {
                        return Verdict::CallReused;
                    }
                    own.push(c);
                }
                let mut answered: Vec<&str> = Vec::new();
                for r in m.tool_results() {
                    match visible.get(r) {
                        None if !own.contains(&r) => return Verdict::NoSuchCall,
                        Some((_, Some(_))) => return Verdict::AlreadyAnswered,
                        _ if answered.contains(&r) => return Verdict::AlreadyAnswered,
                        _ => answered.push(r),
                    }
                }
                Verdict::Ok
            }
            EntryBody::Compaction(c) => {
                let fk = match &c.first_kept {
                    None => view.path.len(),
                    Some(k) => match view.path.iter().position(|e| &e.id == k) {
                        Some(p) => p,
                        None => return Verdict::FirstKeptOffBranch,
                    },
                };
                // A visible call dropped by the compaction must have its result dropped too.
                for (call, result) in visible.values() {
                    if *call < fk && result.is_none_or(|r| r >= fk) {
                        return Verdict::SplitsToolCall;
                    }
                }
                // Every result kept must keep its call.
                let mut kept_calls: HashSet<&str> = HashSet::new();
                for e in &view.path[fk..] {
                    if let EntryBody::Message(m) = &e.body {
                        kept_calls.extend(m.tool_calls().map(|(c, _, _)| c));
                        if m.tool_results().any(|r| !kept_calls.contains(r)) {
                            return Verdict::SplitsToolCall;
                        }
                    }
                }
                Verdict::Ok
            }
            _ => Verdict::Ok,
        }
    }

    /// Builds the body an op asks for, resolved against the parent's branch.
    fn body(&mut self, spec: &BodySpec, parent: Option<&EntryId>) -> EntryBody {
        match spec {
            BodySpec::User(t) => user(t),
            BodySpec::Assistant { new_calls, reuse } => {
                let mut ids: Vec<String> = Vec::new();
                if let Some(i) = reuse {
                    let all = self.all_call_ids();
                    if !all.is_empty() {
                        ids.push(all[i.index(all.len())].clone());
                    }
                }
                for _ in 0..*new_calls {
                    self.next_call += 1;
                    ids.push(format!("call-{}", self.next_call));
                }
                let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                calls("on it", &refs)
            }
            BodySpec::Results(answer) => {
                let view = self.view(parent);
                let visible = view.calls();
                let mut open: Vec<&String> = visible
                    .iter()
                    .filter(|(_, v)| v.1.is_none())
                    .map(|(k, _)| k)
                    .collect();
                let mut done: Vec<&String> = visible
                    .iter()
                    .filter(|(_, v)| v.1.is_some())
                    .map(|(k, _)| k)
                    .collect();
                open.sort();
                done.sort();
                let elsewhere: Vec<String> = self
                    .all_call_ids()
                    .into_iter()
                    .filter(|c| !visible.contains_key(c))
                    .collect();
                let choose = |from: &[&String], i: &Index| from[i.index(from.len())].clone();
                let ids: Vec<String> = match answer {
                    Answer::Open(a, b) if !open.is_empty() => {
                        let mut ids = vec![choose(&open, a)];
                        if let Some(b) = b {
                            let second = choose(&open, b);
                            if second != ids[0] {
                                ids.push(second);
                            }
                        }
                        ids
                    }
                    Answer::Answered(i) if !done.is_empty() => vec![choose(&done, i)],
                    Answer::Elsewhere(i) if !elsewhere.is_empty() => {
                        vec![elsewhere[i.index(elsewhere.len())].clone()]
                    }
                    Answer::Twice(i) if !open.is_empty() => {
                        let c = choose(&open, i);
                        vec![c.clone(), c]
                    }
                    _ => vec!["call-nobody-made".to_owned()],
                };
                let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                results(&refs)
            }
            BodySpec::AppState(change) => EntryBody::AppState(change.clone()),
            BodySpec::Settings(values) => EntryBody::Settings(Settings {
                values: values.clone(),
            }),
            BodySpec::Compaction {
                first_kept,
                summary,
            } => {
                let path = self.path(parent);
                let first_kept = match first_kept {
                    FirstKept::Nothing => None,
                    FirstKept::OnBranch(i) if !path.is_empty() => {
                        Some(path[i.index(path.len())].id.clone())
                    }
                    FirstKept::OnBranch(_) => None,
                    FirstKept::Anywhere(i) => self.pick(i),
                    FirstKept::Missing => Some(eid("not-an-entry")),
                };
                EntryBody::Compaction(Compaction {
                    summary: summary.clone(),
                    first_kept,
                    tokens_before: None,
                })
            }
            BodySpec::Custom {
                namespace,
                visible,
                content,
            } => EntryBody::Custom(Custom {
                namespace: if *namespace {
                    "app.notes".into()
                } else {
                    String::new()
                },
                visible: *visible,
                content: content.clone(),
            }),
            BodySpec::Title(t) => EntryBody::SessionInfo(SessionInfo {
                title: Some(t.clone()),
            }),
        }
    }

    fn record(&mut self, entry: Entry) {
        if let EntryBody::SessionInfo(SessionInfo { title: Some(t) }) = &entry.body {
            self.title = t.clone();
        }
        self.entries.push(entry);
    }

    /// What a fork at `at` holds: the branch, re-linked, minus labels whose
    /// target is not copied and removals of labels the fork does not have; a
    /// compaction that kept from a dropped label keeps from the next copied
    /// entry (`None` if that is the compaction itself).
    fn fork_entries(&self, at: Option<&EntryId>) -> Vec<Entry> {
        let mut labels: BTreeSet<String> = BTreeSet::new();
        let mut dropped: Vec<EntryId> = Vec::new();
        let mut instead: HashMap<EntryId, Option<EntryId>> = HashMap::new();
        let mut out: Vec<Entry> = Vec::new();
        for e in self.path(at) {
            let mut body = e.body.clone();
            match &mut body {
                EntryBody::Label(l) => {
                    let kept = match &l.target {
                        Some(t) => out.iter().any(|o| &o.id == t),
                        None => labels.contains(&l.name),
                    };
                    if !kept {
                        dropped.push(e.id.clone());
                        continue;
                    }
                    match &l.target {
                        Some(_) => labels.insert(l.name.clone()),
                        None => labels.remove(&l.name),
                    };
                }
                EntryBody::Compaction(c) => {
                    if let Some(k) = &c.first_kept {
                        if dropped.contains(k) {
                            c.first_kept = None;
                        } else if let Some(i) = instead.get(k) {
                            c.first_kept = i.clone();
                        }
                    }
                }
                _ => {}
            }
            for d in dropped.drain(..) {
                instead.insert(d, Some(e.id.clone()));
            }
            let parent = out.last().map(|p| p.id.clone());
            out.push(Entry {
                id: e.id.clone(),
                parent,
                body,
            });
        }
        out
    }
}

/// The fold agrees with the model's own projection.
fn assert_fold_matches_view(ctx: &Context, view: &View<'_>) {
    let mut want: Vec<(EntryId, Source)> = Vec::new();
    if let Some(c) = view.compaction {
        want.push((c.id.clone(), Source::CompactionSummary));
    }
    for e in &view.path[view.start..] {
        match &e.body {
            EntryBody::Message(_) => want.push((e.id.clone(), Source::Message)),
            EntryBody::Checkout(Checkout {
                summary: Some(_), ..
            }) => {
                want.push((e.id.clone(), Source::CheckoutSummary));
            }
            EntryBody::Custom(c) if c.visible => {
                want.push((e.id.clone(), Source::Custom(c.namespace.clone())))
            }
            _ => {}
        }
    }
    let got: Vec<(EntryId, Source)> = ctx
        .messages()
        .iter()
        .map(|m| (m.entry().clone(), m.source().clone()))
        .collect();
    assert_eq!(got, want, "the fold's messages differ from the model's");
    for m in ctx.messages() {
        let entry = view
            .path
            .iter()
            .find(|e| &e.id == m.entry())
            .expect("message of the branch");
        match &entry.body {
            EntryBody::Message(want) => assert_eq!(m.message().expect("read the message"), want),
            EntryBody::Compaction(c) => assert!(
                m.message()
                    .expect("read the message")
                    .plain_text()
                    .ends_with(&c.summary)
            ),
            EntryBody::Checkout(Checkout {
                summary: Some(s), ..
            }) => {
                assert!(
                    m.message()
                        .expect("read the message")
                        .plain_text()
                        .ends_with(s.as_str())
                );
            }
            EntryBody::Custom(c) => {
                let text = c
                    .content
                    .as_str()
                    .map_or_else(|| c.content.to_string(), str::to_owned);
                assert_eq!(m.message().expect("read the message").plain_text(), text);
            }
            other => panic!("{other:?} contributed a message"),
        }
    }
    assert_eq!(ctx.app_state(), &view.state);
    assert_eq!(ctx.settings(), &view.settings);
    assert_eq!(ctx.leaf(), view.path.last().map(|e| &e.id));
    let active = ctx
        .compaction()
        .map(|a| (a.entry.clone(), a.summary.clone(), a.first_kept.clone()));
    let want_active = view.compaction.map(|e| match &e.body {
        EntryBody::Compaction(c) => (e.id.clone(), c.summary.clone(), c.first_kept.clone()),
        _ => unreachable!("a compaction"),
    });
    assert_eq!(active, want_active);
    // The context a provider receives never has a result without its call.
    let mut seen: HashSet<&str> = HashSet::new();
    let mut answered: HashSet<&str> = HashSet::new();
    for m in ctx
        .messages()
        .iter()
        .filter(|m| m.source() == &Source::Message)
    {
        seen.extend(
            m.message()
                .expect("read the message")
                .tool_calls()
                .map(|(c, _, _)| c),
        );
        for r in m.message().expect("read the message").tool_results() {
            assert!(
                seen.contains(r),
                "result for {r} without its call in the context"
            );
            assert!(answered.insert(r), "two results for {r} in the context");
        }
    }
}

/// Where a property-test session lives.
enum Backing {
    Memory(MemoryBackend),
    Files(tempfile::TempDir),
}

impl Backing {
    fn store(&self) -> Store {
        match self {
            Backing::Memory(m) => Store::with_backend(Arc::new(m.clone())),
            Backing::Files(d) => Store::open_dir(d.path()),
        }
    }

    fn raw(&self, s: &Session) -> Vec<u8> {
        match self {
            Backing::Memory(m) => m.raw(s.id()).expect("session exists").concat(),
            Backing::Files(_) => std::fs::read(s.location()).expect("read session file"),
        }
    }
}

fn assert_session_matches_model(s: &Session, m: &Model) {
    let want = Context::fold(&m.initial, &m.entries, m.leaf());
    assert_eq!(
        *s.context(),
        want,
        "the incremental context differs from the plain fold"
    );
    assert_fold_matches_view(&want, &m.view(m.leaf()));
    assert_eq!(s.leaf().as_ref(), m.leaf());
    let branch: Vec<EntryId> = m.path(m.leaf()).iter().map(|e| e.id.clone()).collect();
    assert_eq!(s.branch(), branch);
    assert_eq!(s.entry_count(), m.entries.len());
    assert_eq!(s.labels(), m.labels());
    assert_eq!(want.labels(), &m.labels());
    assert_eq!(s.title().as_deref(), Some(m.title.as_str()));
}

fn run_history(backing: &Backing, initial: Value, ops: &[Op]) {
    let store = backing.store();
    let mut s = new_session(&store, initial.clone());
    let id = s.id().clone();
    let mut m = Model {
        initial,
        entries: Vec::new(),
        title: "test".into(),
        next_call: 0,
    };
    assert_session_matches_model(&s, &m);
    for op in ops {
        match op {
            Op::Append {
                at,
                id: id_spec,
                body,
            } => {
                let (parent, param) = match at {
                    At::Leaf => (m.leaf().cloned(), Parent::Leaf),
                    At::Root => (None, Parent::Root),
                    At::Entry(i) => match m.pick(i) {
                        Some(p) => (Some(p.clone()), Parent::Entry(p)),
                        None => (None, Parent::Root),
                    },
                    At::Missing => (
                        Some(eid("no-such-parent")),
                        Parent::Entry(eid("no-such-parent")),
                    ),
                };
                let id = match id_spec {
                    IdSpec::Generated => None,
                    IdSpec::Named(n) => Some(eid(&format!("n{n}"))),
                    IdSpec::Duplicate(i) => m.pick(i),
                };
                let body = m.body(body, parent.as_ref());
                let verdict = m.verdict(id.as_ref(), parent.as_ref(), &body);
                let (len, raw) = (s.len(), backing.raw(&s));
                match s.append_entry(NewEntry {
                    id: id.clone(),
                    parent: param,
                    body: body.clone(),
                }) {
                    Ok(a) => {
                        assert_eq!(verdict, Verdict::Ok, "accepted {body:?} under {parent:?}");
                        assert_eq!(a.seq, len);
                        let got = a.id.expect("entries have ids");
                        if let Some(id) = id {
                            assert_eq!(got, id);
                        }
                        m.record(Entry {
                            id: got,
                            parent,
                            body,
                        });
                    }
                    Err(e) => {
                        assert_eq!(
                            verdict_of(&e),
                            verdict,
                            "rejected {body:?} under {parent:?}: {e}"
                        );
                        assert_eq!(s.len(), len);
                        assert_eq!(backing.raw(&s), raw, "a rejected append wrote something");
                    }
                }
            }
            Op::Checkout { to, summary } => {
                let target = to.as_ref().and_then(|i| m.pick(i));
                let noop = m.checkout_is_noop(target.as_ref(), summary.as_ref());
                let body = EntryBody::Checkout(Checkout {
                    from: m.leaf().cloned(),
                    summary: summary.clone(),
                });
                let verdict = m.verdict(None, target.as_ref(), &body);
                let (len, raw) = (s.len(), backing.raw(&s));
                let moved = match s.checkout(target.as_ref(), summary.clone()) {
                    Ok(Some(a)) => {
                        assert!(
                            !noop,
                            "a checkout to where the branch ends must write nothing"
                        );
                        assert_eq!(verdict, Verdict::Ok, "checkout to {target:?} accepted");
                        Some(a)
                    }
                    Ok(None) => {
                        assert!(noop, "checkout to {target:?} wrote nothing");
                        assert_eq!(s.len(), len);
                        None
                    }
                    Err(e) => {
                        assert!(!noop);
                        assert_eq!(verdict_of(&e), verdict, "checkout to {target:?}: {e}");
                        assert_eq!(backing.raw(&s), raw, "a rejected checkout wrote something");
                        None
                    }
                };
                let Some(a) = moved else {
                    assert_session_matches_model(&s, &m);
                    continue;
                };
                let from = m.leaf().cloned();
                m.record(Entry {
                    id: a.id.expect("id"),
                    parent: target,
                    body: EntryBody::Checkout(Checkout {
                        from,
                        summary: summary.clone(),
                    }),
                });
            }
            Op::Label { name, target } => {
                let target = match target {
                    None => None,
                    Some(None) => Some(eid("not-an-entry")),
                    Some(Some(i)) => Some(m.pick(i).unwrap_or_else(|| eid("not-an-entry"))),
                };
                let body = EntryBody::Label(cairn::Label {
                    name: (*name).to_owned(),
                    target: target.clone(),
                });
                let verdict = m.verdict(None, m.leaf(), &body);
                let (len, raw) = (s.len(), backing.raw(&s));
                match s.label(name, target.as_ref()) {
                    Ok(a) => {
                        assert_eq!(verdict, Verdict::Ok, "accepted {body:?}");
                        let parent = m.leaf().cloned();
                        m.record(Entry {
                            id: a.id.expect("id"),
                            parent,
                            body,
                        });
                    }
                    Err(e) => {
                        assert_eq!(verdict_of(&e), verdict, "rejected {body:?}: {e}");
                        assert_eq!(s.len(), len);
                        assert_eq!(backing.raw(&s), raw, "a rejected label wrote something");
                    }
                }
            }
            Op::Burst(changes) => {
                for change in changes {
                    let body = EntryBody::AppState(change.clone());
                    let a = s.append(body.clone()).expect("app_state at the leaf");
                    let parent = m.leaf().cloned();
                    m.record(Entry {
                        id: a.id.expect("id"),
                        parent,
                        body,
                    });
                }
            }
            Op::Turn { calls: n, all } => {
                let ids: Vec<String> = (0..*n)
                    .map(|_| {
                        m.next_call += 1;
                        format!("call-{}", m.next_call)
                    })
                    .collect();
                let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                let answered = if *all { &refs[..] } else { &refs[..1] };
                for body in [calls("calling tools", &refs), results(answered)] {
                    assert_eq!(m.verdict(None, m.leaf(), &body), Verdict::Ok);
                    let a = s.append(body.clone()).expect("a tool round");
                    let parent = m.leaf().cloned();
                    m.record(Entry {
                        id: a.id.expect("id"),
                        parent,
                        body,
                    });
                }
            }
            Op::Fork(at) => {
                let at = at.as_ref().and_then(|i| m.pick(i));
                let (len, raw, ctx) = (s.len(), backing.raw(&s), s.context());
                let dangling = at.is_some()
                    && m.view(at.as_ref())
                        .calls()
                        .values()
                        .any(|(_, r)| r.is_none());
                let fork = match store.fork(&s, at.as_ref(), None) {
                    Ok(f) => {
                        assert!(!dangling, "a fork at {at:?} left a call without a result");
                        f
                    }
                    Err(StoreError::Append(AppendError::Invalid(Invalid::UnansweredCalls {
                        ..
                    }))) if dangling => {
                        assert_eq!(
                            (s.len(), backing.raw(&s)),
                            (len, raw),
                            "fork changed its source"
                        );
                        assert_session_matches_model(&s, &m);
                        continue;
                    }
                    Err(e) => panic!("fork at {at:?} failed: {e}"),
                };
                let copied = m.fork_entries(at.as_ref());
                let want = Context::fold(&m.initial, &copied, copied.last().map(|e| &e.id));
                assert_eq!(*fork.context(), want, "fork context");
                assert_eq!(all_entries(&fork), copied, "fork entries");
                assert_eq!(
                    fork.header().lineage.forked_from,
                    Some(ForkOrigin {
                        session: id.clone(),
                        entry: at.clone()
                    })
                );
                assert_eq!(fork.header().app_state, m.initial);
                // The title at the fork point if the branch sets one, else the source's.
                let title = copied
                    .iter()
                    .rev()
                    .find_map(|e| match &e.body {
                        EntryBody::SessionInfo(SessionInfo { title: Some(t) }) => Some(t.clone()),
                        _ => None,
                    })
                    .unwrap_or_else(|| m.title.clone());
                assert_eq!(fork.title(), Some(title));
                // The source is untouched.
                assert_eq!(
                    (s.len(), backing.raw(&s)),
                    (len, raw),
                    "fork changed its source"
                );
                assert_eq!(*s.context(), *ctx);
                let fork_id = fork.id().clone();
                drop(fork);
                let again = store.open(&fork_id, Access::Read).expect("reopen fork");
                assert_eq!(*again.context(), want, "fork context after reopen");
            }
            Op::Reopen => {
                let (leaf, ctx) = (s.leaf(), s.context());
                // On files, the reopen goes through a persisted index and
                // its checkpoint, saved at this leaf.
                if let Backing::Files(_) = backing {
                    s.sync().expect("sync");
                    assert!(s.save_index(), "a synced writer saves its index");
                }
                drop(s);
                s = store.open(&id, Access::Write).expect("reopen");
                s.set_durability(Durability::Buffered);
                assert_eq!(s.leaf(), leaf, "leaf after reopen");
                assert_eq!(*s.context(), *ctx, "context after reopen");
                assert_eq!(all_entries(&s), m.entries, "entries read back after reopen");
                if let Backing::Files(_) = backing {
                    let note = s.open_report().index.clone().unwrap_or_default();
                    assert!(
                        note.starts_with("index used") && !note.contains("checkpoint"),
                        "{note}"
                    );
                }
            }
        }
        assert_session_matches_model(&s, &m);
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn random_histories_project_like_the_plain_fold_in_memory((initial, ops) in history()) {
        run_history(&Backing::Memory(MemoryBackend::new()), initial, &ops);
    }

    #[test]
    fn random_histories_project_like_the_plain_fold_on_files((initial, ops) in history()) {
        let dir = tempfile::tempdir().expect("temp dir");
        run_history(&Backing::Files(dir), initial, &ops);
    }
}
