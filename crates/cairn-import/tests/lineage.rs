//! Forks and subagents of imported sessions are linked as cairn's own are:
//! the child's header names the parent's session (and the entry it was
//! forked at, or the call that started it); a parent not imported yet is
//! imported first; one that cannot be found is reported.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::{Access, ForkOrigin, MemoryBackend, Session, SessionId, Store};
use cairn_import::{FileReport, Ledger, NoteKind, Options, Outcome, import_file};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn write(path: &Path, records: &[Value]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

fn pi_header(id: &str, parent: Option<&Path>) -> Value {
    let mut h = json!({"type": "session", "version": 3, "id": id,
        "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/w"});
    if let Some(p) = parent {
        h["parentSession"] = json!(p.display().to_string());
    }
    h
}

fn pi_message(id: &str, parent: Option<&str>, role: &str, text: &str) -> Value {
    let message = if role == "assistant" {
        json!({"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1})
    } else {
        json!({"role": role, "content": text, "timestamp": 1})
    };
    json!({"type": "message", "id": id, "parentId": parent,
        "timestamp": "2025-01-01T00:00:01.000Z", "message": message})
}

fn empty() -> (Store, Ledger) {
    (
        Store::with_backend(Arc::new(MemoryBackend::new())),
        Ledger::in_memory(),
    )
}

fn open(store: &Store, r: &FileReport) -> Session {
    store
        .open(&SessionId::parse(&r.session).unwrap(), Access::Read)
        .unwrap()
}

/// A pi session with two branches from `b`, and a session branched from it
/// at `e` (pi copies the branch, same ids, into the new file).
fn pi_family(dir: &Path) -> (PathBuf, PathBuf) {
    let parent = dir.join("parent.jsonl");
    write(
        &parent,
        &[
            pi_header("p", None),
            pi_message("a0000001", None, "user", "hello"),
            pi_message("b0000001", Some("a0000001"), "assistant", "hi"),
            pi_message("c0000001", Some("b0000001"), "user", "first way"),
            pi_message("d0000001", Some("c0000001"), "assistant", "ok"),
            pi_message("e0000001", Some("b0000001"), "user", "second way"),
        ],
    );
    let child = dir.join("child.jsonl");
    write(
        &child,
        &[
            pi_header("c", Some(&parent)),
            pi_message("a0000001", None, "user", "hello"),
            pi_message("b0000001", Some("a0000001"), "assistant", "hi"),
            pi_message("e0000001", Some("b0000001"), "user", "second way"),
            pi_message("f0000001", Some("e0000001"), "assistant", "going on here"),
        ],
    );
    (parent, child)
}

/// A pi parent and its branched child in a temporary directory, and a
/// store to import them into.
struct Family {
    _dir: tempfile::TempDir,
    parent: PathBuf,
    child: PathBuf,
    store: Store,
    ledger: Ledger,
}

impl Family {
    fn new() -> Family {
        let dir = tempfile::tempdir().unwrap();
        let (parent, child) = pi_family(dir.path());
        let (store, ledger) = empty();
        Family {
            _dir: dir,
            parent,
            child,
            store,
            ledger,
        }
    }

    fn import(&mut self, path: &Path) -> FileReport {
        import_file(&self.store, &mut self.ledger, path, &Options::default()).unwrap()
    }

    /// The session `r` names and the fork origin its header records.
    fn forked(&self, r: &FileReport) -> (Session, ForkOrigin) {
        let s = open(&self.store, r);
        let origin = s.header().lineage.forked_from.clone().expect("linked");
        (s, origin)
    }
}

#[test]
fn a_pi_session_branched_from_another_is_a_fork_at_the_end_of_the_copied_branch() {
    let mut f = Family::new();
    let p = f.import(&f.parent.clone());
    let c = f.import(&f.child.clone());
    assert!(c.also.is_empty(), "the parent was imported already");
    let (s, origin) = f.forked(&c);
    assert_eq!(origin.session.to_string(), p.session);
    assert_eq!(
        origin.entry.map(|e| e.to_string()).as_deref(),
        Some("e0000001")
    );
    assert_eq!(s.leaf().unwrap().to_string(), "f0000001");
}

#[test]
fn a_fork_imported_before_its_parent_imports_the_parent_first() {
    let mut f = Family::new();
    let c = f.import(&f.child.clone());
    assert_eq!(c.also.len(), 1);
    assert_eq!(c.also[0].outcome, Outcome::New);
    let (_, origin) = f.forked(&c);
    assert_eq!(origin.session.to_string(), c.also[0].session);
    // Importing the parent now finds it done.
    let again = f.import(&f.parent.clone());
    assert_eq!(again.outcome, Outcome::Unchanged);
    assert_eq!(again.session, c.also[0].session);
    // And the child's own re-import too.
    assert_eq!(f.import(&f.child.clone()).outcome, Outcome::Unchanged);
}

/// Imports, alone into a new store, a one-message pi session at `child`
/// whose header names `parent`.
fn import_orphan(child: &Path, parent: &Path) -> (Store, Ledger, FileReport) {
    write(
        child,
        &[
            pi_header("c", Some(parent)),
            pi_message("a0000001", None, "user", "hello"),
        ],
    );
    let (store, mut ledger) = empty();
    let r = import_file(&store, &mut ledger, child, &Options::default()).unwrap();
    assert_eq!(open(&store, &r).header().lineage.forked_from, None);
    (store, ledger, r)
}

#[test]
fn a_fork_whose_parent_is_nowhere_is_imported_unlinked_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone.jsonl");
    let child = dir.path().join("child.jsonl");
    let (store, mut ledger, r) = import_orphan(&child, &gone);
    let note = r
        .notes
        .iter()
        .find(|n| n.message.contains("not linked"))
        .expect("the dangling reference is reported");
    assert_eq!(note.kind, NoteKind::Kept);
    assert!(note.message.contains(&gone.display().to_string()), "{note}");
    assert!(
        note.message.contains("neither imported nor found"),
        "{note}"
    );
    // The parent turns up later: its import says which session stays
    // unlinked.
    write(&gone, &[pi_header("g", None)]);
    let p = import_file(&store, &mut ledger, &gone, &Options::default()).unwrap();
    let note = p
        .notes
        .iter()
        .find(|n| n.message.contains("names it as its parent"))
        .expect("the late parent's report names the unlinked child");
    assert!(note.message.contains(&r.session), "{note}");
    assert!(note.message.contains("child.jsonl"), "{note}");
}

#[test]
fn a_pi_session_that_names_itself_as_parent_is_not_linked_to_itself() {
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("self.jsonl");
    let (_, _, r) = import_orphan(&child, &child);
    assert!(r.notes.iter().any(|n| n.message.contains("not linked")));
}

fn claude_line(uuid: &str, parent: Option<&str>, ty: &str, content: Value) -> Value {
    json!({"parentUuid": parent, "isSidechain": true, "agentId": "a1", "type": ty,
        "uuid": uuid, "sessionId": "s1", "timestamp": "2025-01-01T00:00:01.000Z",
        "message": {"role": ty, "content": content}})
}

#[test]
fn a_claude_code_subagent_whose_call_is_named_only_in_the_parents_result_is_linked() {
    // No .meta.json: the call is the tool result naming the agent.
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("s1.jsonl");
    let child = dir.path().join("s1/subagents/agent-a1.jsonl");
    let main = |uuid: &str, parent: Option<&str>, ty: &str, content: Value| {
        let mut v = claude_line(uuid, parent, ty, content);
        v["isSidechain"] = json!(false);
        v.as_object_mut().unwrap().remove("agentId");
        v
    };
    let mut result = main(
        "u2",
        Some("a1"),
        "user",
        json!([{"type": "tool_result", "tool_use_id": "toolu_T", "content": "done"}]),
    );
    result["toolUseResult"] = json!({"agentId": "a1", "status": "completed"});
    write(
        &parent,
        &[
            main("u1", None, "user", json!("delegate it")),
            main(
                "a1",
                Some("u1"),
                "assistant",
                json!([{"type": "tool_use", "id": "toolu_T", "name": "Task", "input": {"prompt": "do it"}}]),
            ),
            result,
        ],
    );
    write(
        &child,
        &[
            claude_line("x1", None, "user", json!("do it")),
            claude_line(
                "x2",
                Some("x1"),
                "assistant",
                json!([{"type": "text", "text": "done"}]),
            ),
        ],
    );
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    let mut ledger = Ledger::in_memory();
    let p = import_file(&store, &mut ledger, &parent, &Options::default()).unwrap();
    let c = import_file(&store, &mut ledger, &child, &Options::default()).unwrap();
    let s = open(&store, &c);
    let spawn = s.header().lineage.parent.clone().expect("linked");
    assert_eq!(spawn.session.to_string(), p.session);
    assert_eq!(spawn.call_id, "toolu_T");
    assert_eq!(spawn.depth, 1);
    let origin = s.header().lineage.imported_from.clone().unwrap();
    assert_eq!(origin.source_id.as_deref(), Some("a1"));
}

#[test]
fn a_pi_session_forked_whole_is_a_fork_at_the_last_entry_it_copied() {
    // pi's forkFrom copies every entry, branches included, and goes on from
    // the last.
    let mut f = Family::new();
    let whole = f.parent.with_file_name("whole.jsonl");
    let mut records: Vec<Value> = std::fs::read_to_string(&f.parent)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    records.insert(0, pi_header("w", Some(&f.parent)));
    records.push(pi_message("g0000001", Some("e0000001"), "assistant", "on"));
    write(&whole, &records);
    let r = f.import(&whole);
    let (_, origin) = f.forked(&r);
    assert_eq!(
        origin.entry.map(|e| e.to_string()).as_deref(),
        Some("e0000001")
    );
}

#[test]
fn a_pi_fork_moved_with_its_parent_finds_the_parent_beside_it() {
    // parentSession names where the parent was; both files moved since.
    let mut f = Family::new();
    let moved = f.parent.with_file_name("moved");
    std::fs::create_dir(&moved).unwrap();
    let child = moved.join("child.jsonl");
    std::fs::copy(&f.parent, moved.join("parent.jsonl")).unwrap();
    std::fs::copy(&f.child, &child).unwrap();
    std::fs::remove_file(&f.parent).unwrap();
    let c = f.import(&child);
    assert_eq!(c.also.len(), 1);
    assert!(c.also[0].path.ends_with("moved/parent.jsonl"));
    assert!(f.forked(&c).1.entry.is_some());
}

#[test]
fn regression_a_fork_of_a_parent_grown_since_its_import_was_linked_at_an_older_entry() {
    // The parent was imported, then grew (e0000001 appended) and was
    // branched from at that new entry: linking the fork to the parent's old
    // import put the fork point at b0000001, for good (a header is written
    // once), and the copies of the newer entries became the fork's own.
    let mut f = Family::new();
    let full = std::fs::read_to_string(&f.parent).unwrap();
    let lines: Vec<&str> = full.lines().collect();
    std::fs::write(&f.parent, format!("{}\n", lines[..5].join("\n"))).unwrap();
    let p = f.import(&f.parent.clone());
    std::fs::write(&f.parent, &full).unwrap();
    let c = f.import(&f.child.clone());
    let (_, origin) = f.forked(&c);
    assert_eq!(origin.session.to_string(), p.session);
    assert_eq!(
        origin.entry.map(|e| e.to_string()).as_deref(),
        Some("e0000001")
    );
    assert!(
        open(&f.store, &p).resolve("e0000001").is_ok(),
        "the parent's import, grown, holds the fork point"
    );
}
