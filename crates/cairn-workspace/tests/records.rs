//! The `cairn.workspace` record as RECORDS.md §4 writes it: the corpus
//! case decodes, and a record naming a path outside the working directory
//! is refused before anything is planned.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cairn::testkit::build::user;
use cairn::{Access, OpRecord, Store, Unknown};
use cairn_blobs::BlobStore;
use cairn_workspace::{KIND, Phase, Scope, WorkspaceError, plan, read_all};
use serde_json::json;

#[test]
fn the_corpus_case_decodes_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let case = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../cairn/tests/corpus/workspace_snapshot_records/01jf0000000000000000000057.jsonl"
    );
    std::fs::copy(case, sessions.join("01jf0000000000000000000057.jsonl")).unwrap();
    let store = Store::open_dir(dir.path());
    let id = store.resolve("01jf0000000000000000000057").unwrap();
    let session = store.open(&id, Access::Read).unwrap();
    let records = read_all(&session).unwrap();
    assert_eq!(records.len(), 2);
    let (before, after) = (&records[0].1, &records[1].1);
    assert_eq!((before.phase, before.scope), (Phase::Before, Scope::Tree));
    assert_eq!(before.files["a.txt"].as_ref().unwrap().size, 5);
    assert_eq!(before.files["gone.txt"], None);
    assert_eq!(
        after.files["link"].as_ref().unwrap().link.as_deref(),
        Some("a.txt")
    );
    assert!(after.truncated);
}

#[test]
fn a_record_naming_a_path_outside_the_working_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path().join("home"));
    for evil in ["../outside.txt", "/etc/passwd", ".git/config", "a/../../b"] {
        let session = store.create(cairn::NewSession::default()).unwrap();
        let first = session.append(user("x")).unwrap().id.unwrap();
        session
            .append_op(OpRecord::Ignored(Unknown {
                kind: KIND.to_owned(),
                data: json!({"at": first, "phase": "after", "root": dir.path(), "scope": "files",
                             "files": {evil: {"sha256": "0".repeat(64), "size": 1, "mode": 420}}}),
            }))
            .unwrap();
        let e = plan(
            &store,
            &session,
            &BlobStore::new(dir.path().join("blobs")),
            None,
        )
        .unwrap_err();
        assert!(matches!(e, WorkspaceError::BadRecord { .. }), "{evil}: {e}");
        let reopened = store.open(session.id(), Access::Read).unwrap();
        assert!(read_all(&reopened).is_err());
    }
    assert!(!dir.path().join("outside.txt").exists());
}
