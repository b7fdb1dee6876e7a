//! `cairn::fsck` on a SQLite store: the same verification and salvage as on
//! session files, through the backend (`Backend::stored_lines`).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use cairn::fsck::{self, Severity};
use cairn::{Access, EntryBody, Message, NewSession, OpenError, Role, SessionId, Store};
use cairn_sqlite::SqliteBackend;
use rusqlite::{Connection, params};

fn setup() -> (tempfile::TempDir, Arc<SqliteBackend>, Store, SessionId) {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(SqliteBackend::open(dir.path().join("cairn.db")).unwrap());
    let store = Store::with_backend(backend.clone());
    let s = store.create(NewSession::default()).unwrap();
    for t in ["one", "two", "three"] {
        s.append(EntryBody::Message(Message::text(Role::User, t)))
            .unwrap();
    }
    let id = s.id().clone();
    drop(s);
    (dir, backend, store, id)
}

/// Rewrites the stored payload of record `seq`.
fn set_payload(b: &SqliteBackend, id: &SessionId, seq: i64, payload: &[u8]) {
    let c = Connection::open(b.path()).unwrap();
    let n = c
        .execute(
            "UPDATE records SET payload = ?1 WHERE seq = ?2
             AND session = (SELECT sid FROM sessions WHERE id = ?3)",
            params![payload, seq, id.as_str()],
        )
        .unwrap();
    assert_eq!(n, 1);
}

fn payload(b: &SqliteBackend, id: &SessionId, seq: i64) -> Vec<u8> {
    let c = Connection::open(b.path()).unwrap();
    c.query_row(
        "SELECT payload FROM records WHERE seq = ?1
         AND session = (SELECT sid FROM sessions WHERE id = ?2)",
        params![seq, id.as_str()],
        |r| r.get(0),
    )
    .unwrap()
}

/// `fsck` failed on a SQLite store with "cannot read sqlite:DB#ID": it read
/// the location as a file path.
#[test]
fn regression_fsck_could_not_read_a_sqlite_store() {
    let (_dir, backend, _store, id) = setup();
    let r = fsck::check(&*backend, &id).expect("fsck reads a SQLite session");
    assert!(r.is_clean(), "{r:?}");
    assert_eq!((r.records, r.entries), (4, 3));
    assert_eq!(
        r.location,
        format!("sqlite:{}#{id}", backend.path().display())
    );
}

#[test]
fn fsck_on_sqlite_reports_a_damaged_record_exactly_where_the_open_refuses_and_salvage_keeps_the_rest()
 {
    let (_dir, backend, store, id) = setup();
    let mut bad = payload(&backend, &id, 2);
    let at = bad.len() - 25;
    bad[at] ^= 0x20;
    set_payload(&backend, &id, 2, &bad);
    let e = store.open(&id, Access::Read).expect_err("damaged");
    let OpenError::Damaged(d) = e else {
        panic!("expected damage, got {e}")
    };
    let r = fsck::check(&*backend, &id).expect("fsck");
    let first = &r.problems[0];
    assert_eq!(
        (
            first.line,
            first.offset,
            first.severity,
            first.what.as_str()
        ),
        (d.line, d.offset, Severity::Damaged, d.problem.as_str())
    );
    assert!(r.refused.is_some());
    // Salvage from SQLite into a directory: the entry under the lost one
    // becomes a root.
    let out = tempfile::tempdir().unwrap();
    let s = fsck::salvage_session(&*backend, &id, out.path()).expect("salvage");
    assert_eq!((s.kept, s.reparented.len()), (3, 1));
    assert!(fsck::check_file(&s.written).unwrap().is_clean());
    assert_eq!(
        payload(&backend, &id, 2),
        bad,
        "the original is never touched"
    );
}

#[test]
fn fsck_on_sqlite_reports_parent_order_damage_under_a_valid_checksum() {
    let (_dir, backend, store, id) = setup();
    let line = payload(&backend, &id, 2);
    let text = std::str::from_utf8(&line).unwrap();
    let parent_at = text.find("\"parent\":\"").unwrap() + "\"parent\":\"".len();
    let parent_end = parent_at + text[parent_at..].find('"').unwrap();
    let covered_end = line.len() - 1 - cairn::frame::TRAILER_LEN;
    let mut covered = format!(
        "{}nosuchid{}",
        &text[..parent_at],
        &text[parent_end..covered_end]
    )
    .into_bytes();
    cairn::frame::seal(&mut covered);
    set_payload(&backend, &id, 2, &covered);
    assert!(store.open(&id, Access::Read).is_err());
    let r = fsck::check(&*backend, &id).expect("fsck");
    assert!(r.is_damaged(), "{r:?}");
    assert!(
        r.problems[0].what.contains("does not appear before it"),
        "{r:?}"
    );
}
