//! Copying between backends: files → SQLite → files gives back the same
//! files byte for byte; copies resume, skip what is already there, refuse
//! to overwrite a different session, and one bad session does not stop
//! the others.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use cairn::testkit::build::user;
use cairn::{Access, Backend, RawLine};
use cairn::{
    EffectClass, FileBackend, Message, NewSession, Outcome, Role, SessionId, Store, ToolOutput,
};
use cairn_sqlite::SqliteBackend;
use cairn_stores::{CopyError, CopyOutcome, copy_session, copy_store};
use pretty_assertions::assert_eq;
use serde_json::json;

fn lines(b: &dyn Backend, id: &SessionId) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    b.open(id, Access::Read, &mut |raw: RawLine<'_>| {
        out.push(raw.bytes.to_vec());
        Ok(())
    })
    .unwrap();
    out
}

/// A file store in `dir/sessions`: the backend, and a store over it.
fn file_store(dir: &Path) -> (FileBackend, Store) {
    let files = FileBackend::new(dir.join("sessions"));
    let store = Store::with_backend(Arc::new(files.clone()));
    (files, store)
}

/// Every session of `ids` comes back from `back` as the same file it is in
/// `files`.
fn assert_same_files(files: &FileBackend, back: &FileBackend, ids: &[SessionId]) {
    for id in ids {
        let original = std::fs::read(files.path(id)).unwrap();
        let round_trip = std::fs::read(back.path(id)).unwrap();
        assert!(
            original == round_trip,
            "session {id} comes back as the same file"
        );
    }
}

/// A file store with a few varied sessions: an operation with tools, a
/// fork, a subagent, unicode, a big record.
fn sample_files(home: &Path) -> (FileBackend, Vec<SessionId>) {
    let (files, store) = file_store(home);
    let a = store
        .create(NewSession {
            title: Some("ünïcödé 🐖".into()),
            ..NewSession::default()
        })
        .unwrap();
    let op = a
        .start_operation(Message::text(Role::User, "charge and read"))
        .unwrap();
    let t = op.model_attempt(Some("p"), Some("m")).unwrap();
    let mut reply = Message::text(Role::Assistant, "");
    reply.content = vec![cairn::Block::ToolCall {
        call_id: "c1".into(),
        name: "charge".into(),
        arguments: json!({"n": 1}),
    }];
    op.record_assistant(t, reply).unwrap();
    let t1 = op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
    op.record_result(t1, ToolOutput::text("done")).unwrap();
    op.finish(Outcome::Completed, None).unwrap();
    a.append(user(&"big ".repeat(300_000))).unwrap();
    let fork = store
        .fork(&a, a.branch().first(), Some("fork".into()))
        .unwrap();
    let child = store.spawn_child(&a, "c1", None, 2).unwrap();
    child.append(user("child")).unwrap();
    let ids = vec![a.id().clone(), fork.id().clone(), child.id().clone()];
    (files, ids)
}

#[test]
fn files_to_sqlite_and_back_are_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (files, ids) = sample_files(&dir.path().join("a"));
    let db = SqliteBackend::open(dir.path().join("cairn.db")).unwrap();
    let report = copy_store(&files, &db).unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.copied.len(), 3);
    for id in &ids {
        assert!(
            lines(&db, id) == lines(&files, id),
            "session {id} is stored byte for byte"
        );
    }
    let back = FileBackend::new(dir.path().join("b").join("sessions"));
    let report = copy_store(&db, &back).unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_same_files(&files, &back, &ids);
    // Listings agree across backends.
    let l1 = Store::with_backend(Arc::new(files)).list().unwrap();
    let l2 = Store::with_backend(Arc::new(db)).list().unwrap();
    assert_eq!(l1, l2);
}

#[test]
fn copying_again_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (files, ids) = sample_files(dir.path());
    let db = SqliteBackend::open(dir.path().join("cairn.db")).unwrap();
    copy_store(&files, &db).unwrap();
    let again = copy_store(&files, &db).unwrap();
    assert_eq!((again.copied.len(), again.failed.len()), (0, 0));
    let mut unchanged = again.unchanged.clone();
    unchanged.sort();
    let mut ids = ids;
    ids.sort();
    assert_eq!(unchanged, ids);
}

#[test]
fn a_half_copied_session_is_completed() {
    let dir = tempfile::tempdir().unwrap();
    let (files, store) = file_store(dir.path());
    let s = store.create(NewSession::default()).unwrap();
    for i in 0..10 {
        s.append(user(&format!("{i}"))).unwrap();
    }
    let id = s.id().clone();
    drop(s);
    let all = lines(&files, &id);
    let db = SqliteBackend::open(dir.path().join("cairn.db")).unwrap();
    // An earlier copy stopped after 4 records.
    let log = db.create(&id, &all[0]).unwrap();
    log.append(&all[1..4]).unwrap();
    drop(log);
    match copy_session(&files, &db, &id).unwrap() {
        CopyOutcome::Copied(c) => assert_eq!((c.already_there, c.records), (4, 11)),
        other => panic!("expected a copy, got {other:?}"),
    }
    assert!(lines(&db, &id) == all);
}

#[test]
fn a_different_session_under_the_same_id_is_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (files, store) = file_store(dir.path());
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("the source")).unwrap();
    let id = s.id().clone();
    drop(s);
    let db = Arc::new(SqliteBackend::open(dir.path().join("cairn.db")).unwrap());
    let other = Store::with_backend(db.clone())
        .create(NewSession {
            id: Some(id.clone()),
            ..NewSession::default()
        })
        .unwrap();
    other.append(user("something else")).unwrap();
    drop(other);
    let before = lines(&*db, &id);
    match copy_session(&files, &*db, &id) {
        Err(CopyError::Conflict { problem, .. }) => {
            assert!(problem.contains("differs"), "{problem}")
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(
        lines(&*db, &id) == before,
        "the destination was not changed"
    );
}

#[test]
fn a_session_that_does_not_verify_is_reported_and_the_others_are_copied() {
    let dir = tempfile::tempdir().unwrap();
    let (files, store) = file_store(dir.path());
    let good = store.create(NewSession::default()).unwrap();
    good.append(user("fine")).unwrap();
    let bad = store.create(NewSession::default()).unwrap();
    bad.append(user("one")).unwrap();
    bad.append(user("two")).unwrap();
    let (good_id, bad_id) = (good.id().clone(), bad.id().clone());
    drop((good, bad));
    // Drop record 1: every line still verifies, but seqs now have a gap.
    let path = files.path(&bad_id);
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, l)| l)
        .collect();
    std::fs::write(&path, format!("{}\n", kept.join("\n"))).unwrap();
    let db = SqliteBackend::open(dir.path().join("cairn.db")).unwrap();
    let report = copy_store(&files, &db).unwrap();
    assert_eq!(
        report
            .copied
            .iter()
            .map(|c| c.id.clone())
            .collect::<Vec<_>>(),
        vec![good_id]
    );
    assert_eq!(report.failed.len(), 1);
    assert_eq!(report.failed[0].0, bad_id);
    // SQLite refuses the out-of-order line at append; a file destination
    // would take it and fail verification. Either way it is reported.
    assert!(
        matches!(
            report.failed[0].1,
            CopyError::Verify { .. } | CopyError::Append(_)
        ),
        "{:?}",
        report.failed[0].1
    );
    // The cause (what the append or the verification found) is the source.
    let chain: Vec<String> =
        std::iter::successors(Some(&report.failed[0].1 as &dyn std::error::Error), |e| {
            e.source()
        })
        .map(ToString::to_string)
        .collect();
    assert!(chain.join(": ").contains("seq"), "{chain:?}");
    assert!(
        matches!(
            db.stamp(&bad_id),
            Err(cairn::StoreError::NoSuchSession { .. })
        ),
        "the bad copy was removed"
    );
}

#[test]
fn a_gap_in_the_sources_seqs_is_reported_and_nothing_is_copied() {
    let dir = tempfile::tempdir().unwrap();
    let db = SqliteBackend::open(dir.path().join("cairn.db")).unwrap();
    let s = Store::with_backend(Arc::new(SqliteBackend::open(db.path()).unwrap()))
        .create(NewSession::default())
        .unwrap();
    s.append(user("one")).unwrap();
    s.append(user("two")).unwrap();
    let id = s.id().clone();
    drop(s);
    rusqlite::Connection::open(db.path())
        .unwrap()
        .execute("DELETE FROM records WHERE seq = 1", [])
        .unwrap();
    let files = FileBackend::new(dir.path().join("sessions"));
    match copy_session(&db, &files, &id) {
        Err(CopyError::Source(cairn::OpenError::Damaged(d))) => assert_eq!(d.line, 2),
        other => panic!("expected the source's gap to be reported, got {other:?}"),
    }
    assert!(!files.path(&id).exists(), "no partial copy is left behind");
}

/// Every pair of the three backends: files → Postgres → SQLite →
/// Postgres (another schema) → files, each copy byte for byte, the last
/// one the same files as the first; listings agree everywhere.
#[test]
#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
fn files_sqlite_and_postgres_copy_into_each_other_byte_for_byte() {
    use cairn_postgres::PostgresBackend;
    use cairn_postgres::scratch::Scratch;
    let (Some(s1), Some(s2)) = (Scratch::new("copy"), Scratch::new("copy")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (files, ids) = sample_files(&dir.path().join("a"));
    let pg1 = PostgresBackend::open(&s1.url).unwrap();
    let db = SqliteBackend::open(dir.path().join("cairn.db")).unwrap();
    let pg2 = PostgresBackend::open(&s2.url).unwrap();
    let back = FileBackend::new(dir.path().join("b").join("sessions"));
    let chain: [(&dyn Backend, &dyn Backend); 4] =
        [(&files, &pg1), (&pg1, &db), (&db, &pg2), (&pg2, &back)];
    for (from, to) in chain {
        let report = copy_store(from, to).unwrap();
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        assert_eq!(
            report.copied.len(),
            ids.len(),
            "{} → {}",
            from.describe(),
            to.describe()
        );
        for id in &ids {
            assert!(
                lines(to, id) == lines(&files, id),
                "session {id} is stored byte for byte in {}",
                to.describe()
            );
        }
        // Again: nothing to do.
        assert_eq!(copy_store(from, to).unwrap().unchanged.len(), ids.len());
    }
    assert_same_files(&files, &back, &ids);
    let listing = |b: Arc<dyn Backend>| Store::with_backend(b).list().unwrap();
    let want = listing(Arc::new(files));
    assert_eq!(listing(Arc::new(pg1)), want);
    assert_eq!(listing(Arc::new(pg2)), want);
}
