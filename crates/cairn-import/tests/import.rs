//! Damaged input, repairs and the ledger, on pi files built by hand.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;

use cairn::{
    Access, Block, EntryBody, MemoryBackend, Role, SessionId, Store, TOOL_OUTCOME_UNKNOWN,
    unanswered_calls,
};
use cairn_import::{Error, Ledger, NoteKind, Options, Outcome, REFUSED_KIND, import_file};
use serde_json::{Value, json};

const HEADER: &str = r#"{"type":"session","version":3,"id":"src","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}"#;

fn msg(id: &str, parent: Option<&str>, m: Value) -> String {
    json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2025-01-01T00:00:01.500Z", "message": m}).to_string()
}

fn user(id: &str, parent: Option<&str>, text: &str) -> String {
    msg(
        id,
        parent,
        json!({"role": "user", "content": text, "timestamp": 1}),
    )
}

fn call(id: &str, parent: Option<&str>, calls: &[&str]) -> String {
    let content: Vec<Value> = calls
        .iter()
        .map(|c| json!({"type": "toolCall", "id": c, "name": "bash", "arguments": {"c": c}}))
        .collect();
    msg(
        id,
        parent,
        json!({"role": "assistant", "content": content, "model": "m", "stopReason": "toolUse", "timestamp": 2}),
    )
}

fn result(id: &str, parent: Option<&str>, call: &str) -> String {
    msg(
        id,
        parent,
        json!({"role": "toolResult", "toolCallId": call, "toolName": "bash", "content": [{"type": "text", "text": "ok"}], "isError": false, "timestamp": 3}),
    )
}

fn write(path: &Path, lines: &[String]) {
    let mut text = String::new();
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

struct Env {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    store: Store,
    ledger: Ledger,
}

impl Env {
    fn new(lines: &[String]) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        write(&path, lines);
        Env {
            _dir: dir,
            path,
            store: Store::with_backend(Arc::new(MemoryBackend::new())),
            ledger: Ledger::in_memory(),
        }
    }

    fn import(&mut self, opts: &Options) -> Result<cairn_import::FileReport, Error> {
        import_file(&self.store, &mut self.ledger, &self.path, opts)
    }

    fn session(&self, id: &str) -> cairn::Session {
        self.store
            .open(&SessionId::parse(id).unwrap(), Access::Read)
            .unwrap()
    }
}

/// The text of each message of the session's context.
fn texts(s: &cairn::Session) -> Vec<String> {
    support::texts(&s.context())
}

fn kinds(notes: &[cairn_import::Note], kind: NoteKind) -> Vec<u64> {
    notes
        .iter()
        .filter(|n| n.kind == kind)
        .filter_map(|n| n.line)
        .collect()
}

#[test]
fn torn_line_is_reported_with_its_line_and_skipped() {
    let mut lines = vec![HEADER.to_owned(), user("a1", None, "hi")];
    lines.push(r#"{"type":"message","id":"a2","parentId":"a1","mess"#.to_owned());
    lines.push(user("a3", Some("a1"), "again"));
    let mut env = Env::new(&lines);
    let r = env.import(&Options::default()).unwrap();
    assert_eq!(kinds(&r.notes, NoteKind::Damaged), vec![3]);
    assert!(r.notes[0].message.contains("not JSON"), "{}", r.notes[0]);
    let s = env.session(&r.session);
    assert_eq!(s.context().messages().len(), 2);
}

#[test]
fn strict_refuses_a_damaged_file_and_writes_nothing() {
    let lines = vec![
        HEADER.to_owned(),
        user("a1", None, "hi"),
        "{not json".to_owned(),
    ];
    let mut env = Env::new(&lines);
    let err = env
        .import(&Options {
            strict: true,
            ..Options::default()
        })
        .unwrap_err();
    let Error::Strict { notes, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(notes[0].line, Some(3));
    assert!(err.to_string().contains("drop --strict"), "{err}");
    assert!(env.store.list().unwrap().is_empty(), "nothing was written");
}

#[test]
fn unterminated_last_line_is_torn_and_read_once_complete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let done = format!("{HEADER}\n{}\n", user("a1", None, "hi"));
    let partial = user("a2", Some("a1"), "second");
    std::fs::write(&path, format!("{done}{}", &partial[..20])).unwrap();
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    let mut ledger = Ledger::in_memory();
    let r = import_file(&store, &mut ledger, &path, &Options::default()).unwrap();
    assert_eq!(kinds(&r.notes, NoteKind::Damaged), vec![3]);
    std::fs::write(&path, format!("{done}{partial}\n")).unwrap();
    let r2 = import_file(&store, &mut ledger, &path, &Options::default()).unwrap();
    assert_eq!(r2.outcome, Outcome::Grown);
    assert_eq!(r2.session, r.session);
    let s = store
        .open(&SessionId::parse(&r.session).unwrap(), Access::Read)
        .unwrap();
    assert_eq!(s.context().messages().len(), 2);
}

#[test]
fn phantom_parent_becomes_a_root_and_is_reported() {
    let lines = vec![
        HEADER.to_owned(),
        user("a1", None, "hi"),
        user("a2", Some("gone"), "orphan"),
    ];
    let mut env = Env::new(&lines);
    let r = env.import(&Options::default()).unwrap();
    assert_eq!(kinds(&r.notes, NoteKind::Repaired), vec![3]);
    assert!(r.notes[0].message.contains("phantom parent"));
    let s = env.session(&r.session);
    let a2 = s.resolve("a2").unwrap();
    assert_eq!(s.entry(&a2).unwrap().unwrap().parent, None);
    // pi walks from the leaf to the root it can reach: the orphan alone.
    assert_eq!(s.context().messages().len(), 1);
}

#[test]
fn missing_results_are_answered_unknown_and_listed() {
    // a2 asks for c1 and c2; only c1 is answered before the person speaks
    // again; at the end c3 is left open too.
    let lines = vec![
        HEADER.to_owned(),
        user("a1", None, "go"),
        call("a2", Some("a1"), &["c1", "c2"]),
        result("a3", Some("a2"), "c1"),
        user("a4", Some("a3"), "what happened?"),
        call("a5", Some("a4"), &["c3"]),
    ];
    let mut env = Env::new(&lines);
    let r = env.import(&Options::default()).unwrap();
    let repairs: Vec<&str> = r
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::Repaired)
        .map(|n| n.message.as_str())
        .collect();
    assert_eq!(repairs.len(), 2, "{repairs:?}");
    assert!(
        repairs[0].contains("c2") && repairs[1].contains("c3"),
        "{repairs:?}"
    );
    let s = env.session(&r.session);
    let ctx = s.context();
    assert!(unanswered_calls(&ctx).unwrap().is_empty());
    let unknown: Vec<String> = ctx
        .messages()
        .iter()
        .flat_map(|m| m.message().expect("read the message").content.clone())
        .filter_map(|b| match b {
            Block::ToolResult {
                call_id,
                code: Some(c),
                ..
            } if c == TOOL_OUTCOME_UNKNOWN => Some(call_id),
            _ => None,
        })
        .collect();
    assert_eq!(unknown, vec!["c2", "c3"]);
}

#[test]
fn watch_leaves_the_last_calls_open_for_their_results() {
    let lines = vec![
        HEADER.to_owned(),
        user("a1", None, "go"),
        call("a2", Some("a1"), &["c1"]),
    ];
    let mut env = Env::new(&lines);
    let live = Options {
        live: true,
        ..Options::default()
    };
    let r = env.import(&live).unwrap();
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    let mut more = lines.clone();
    more.push(result("a3", Some("a2"), "c1"));
    write(&env.path, &more);
    let r2 = env.import(&live).unwrap();
    assert_eq!(r2.outcome, Outcome::Grown);
    assert!(
        r2.notes.is_empty(),
        "the real result arrived: nothing to repair ({:?})",
        r2.notes
    );
    let s = env.session(&r.session);
    assert!(unanswered_calls(&s.context()).unwrap().is_empty());
}

#[test]
fn a_result_after_the_import_answered_its_call_is_kept_not_lost() {
    let lines = vec![
        HEADER.to_owned(),
        user("a1", None, "go"),
        call("a2", Some("a1"), &["c1"]),
    ];
    let mut env = Env::new(&lines);
    let r = env.import(&Options::default()).unwrap();
    assert_eq!(kinds(&r.notes, NoteKind::Repaired).len(), 1);
    let mut more = lines.clone();
    more.push(result("a3", Some("a2"), "c1"));
    more.push(user("a4", Some("a3"), "thanks"));
    write(&env.path, &more);
    let r2 = env.import(&Options::default()).unwrap();
    assert_eq!(r2.outcome, Outcome::Grown);
    let s = env.session(&r.session);
    // The late result starts a branch at the call, answering it for real.
    let ctx = s.context();
    assert!(unanswered_calls(&ctx).unwrap().is_empty());
    let texts = texts(&s);
    assert_eq!(texts.last().unwrap(), "thanks");
    let results: Vec<bool> = ctx
        .messages()
        .iter()
        .filter(|m| m.message().expect("read the message").role == Role::Tool)
        .map(|m| {
            matches!(
                &m.message().expect("read the message").content[0],
                Block::ToolResult { code: None, .. }
            )
        })
        .collect();
    assert_eq!(results, vec![true], "the branch holds the real result only");
}

#[test]
fn duplicate_ids_get_new_ids_and_children_follow_the_latest() {
    let lines = vec![
        HEADER.to_owned(),
        user("a1", None, "first"),
        user("a1", Some("a1"), "second, same id"),
        user("a2", Some("a1"), "child"),
    ];
    let mut env = Env::new(&lines);
    let r = env.import(&Options::default()).unwrap();
    assert_eq!(kinds(&r.notes, NoteKind::Repaired), vec![3]);
    assert!(r.notes[0].message.contains("used twice"));
    let s = env.session(&r.session);
    let texts = texts(&s);
    assert_eq!(texts, vec!["first", "second, same id", "child"]);
}

#[test]
fn unknown_types_and_refused_records_are_kept_as_ignorable_records() {
    let lines = vec![
        HEADER.to_owned(),
        user("a1", None, "hi"),
        json!({"type": "future", "id": "a2", "parentId": "a1", "x": [1, 2]}).to_string(),
        result("a3", Some("a2"), "nobody-asked"),
        user("a4", Some("a3"), "after"),
    ];
    let mut env = Env::new(&lines);
    let r = env.import(&Options::default()).unwrap();
    assert_eq!(kinds(&r.notes, NoteKind::Kept), vec![3, 4]);
    let s = env.session(&r.session);
    let a2 = s.entry(&s.resolve("a2").unwrap()).unwrap().unwrap();
    let EntryBody::Ignored(u) = a2.body else {
        panic!()
    };
    assert_eq!(u.kind, "pi.future");
    assert_eq!(u.data["x"], json!([1, 2]));
    let a3 = s.entry(&s.resolve("a3").unwrap()).unwrap().unwrap();
    let EntryBody::Ignored(u) = a3.body else {
        panic!()
    };
    assert_eq!(u.kind, REFUSED_KIND);
    assert!(u.data["refused"].as_str().unwrap().contains("nobody-asked"));
    let texts = texts(&s);
    assert_eq!(texts, vec!["hi", "after"]);
}

#[test]
fn source_fields_and_times_are_kept_in_the_entry() {
    let lines = vec![HEADER.to_owned(), user("a1", None, "hi")];
    let mut env = Env::new(&lines);
    let r = env.import(&Options::default()).unwrap();
    let s = env.session(&r.session);
    let seq = s.nodes()[0].seq;
    let raw = String::from_utf8(s.raw_record(seq).unwrap()).unwrap();
    assert!(raw.contains(r#""ts":"2025-01-01T00:00:01.500Z""#), "{raw}");
    let data: Value = serde_json::from_str(
        cairn::frame::Frame::parse(raw.as_bytes())
            .unwrap()
            .data
            .get(),
    )
    .unwrap();
    assert_eq!(
        data["source"],
        json!({"type": "message", "timestamp": "2025-01-01T00:00:01.500Z", "message": {"role": "user", "timestamp": 1}})
    );
    let origin = s.header().lineage.imported_from.clone().unwrap();
    assert_eq!(origin.format, "pi");
    assert_eq!(origin.source_id.as_deref(), Some("src"));
    assert_eq!(
        origin.sha256,
        cairn_import::sha256_hex(&std::fs::read(&env.path).unwrap())
    );
}

#[test]
fn ledger_makes_reimport_idempotent() {
    let lines = vec![HEADER.to_owned(), user("a1", None, "hi")];
    let mut env = Env::new(&lines);
    let first = env.import(&Options::default()).unwrap();
    assert_eq!(first.outcome, Outcome::New);
    let len = env.session(&first.session).len();
    let again = env.import(&Options::default()).unwrap();
    assert_eq!(again.outcome, Outcome::Unchanged);
    assert_eq!(again.written, 0);
    assert_eq!(env.session(&first.session).len(), len);
    assert_eq!(env.store.list().unwrap().len(), 1);
    // Grown: only the new part is appended.
    let mut more = lines.clone();
    more.push(user("a2", Some("a1"), "more"));
    write(&env.path, &more);
    let grown = env.import(&Options::default()).unwrap();
    assert_eq!(
        (grown.outcome, grown.written, grown.lines),
        (Outcome::Grown, 1, 1)
    );
    assert_eq!(env.session(&first.session).len(), len + 1);
    // Rewritten (pi migrates a file by rewriting it): a new session.
    write(&env.path, &[HEADER.to_owned(), user("b1", None, "other")]);
    let rewritten = env.import(&Options::default()).unwrap();
    assert_eq!(rewritten.outcome, Outcome::Rewritten);
    assert_ne!(rewritten.session, first.session);
}

#[test]
fn ledger_survives_in_a_file_and_ignores_a_removed_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    write(&path, &[HEADER.to_owned(), user("a1", None, "hi")]);
    let home = dir.path().join("store");
    let store = Store::open_dir(&home);
    let mut ledger = Ledger::open(&home).unwrap();
    let first = import_file(&store, &mut ledger, &path, &Options::default()).unwrap();
    let mut reread = Ledger::open(&home).unwrap();
    let again = import_file(&store, &mut reread, &path, &Options::default()).unwrap();
    assert_eq!(again.outcome, Outcome::Unchanged);
    store
        .remove(&SessionId::parse(&first.session).unwrap())
        .unwrap();
    let back = import_file(&store, &mut reread, &path, &Options::default()).unwrap();
    assert_eq!(back.outcome, Outcome::New);
}
