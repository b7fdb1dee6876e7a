//! What only the SQLite backend has: the schema and its versions, the
//! writer lease with fencing and dead-holder takeover, and listing, status
//! and lookups by SQL without reading payloads.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use cairn::Backend;
use cairn::testkit::build::user;
use cairn::testkit::indexed;
use cairn::{
    Access, AppendError, EntryBody, Message, NewEntry, NewSession, OpenError, Outcome, Parent,
    Role, SessionId, Status, Store, StoreError,
};
use cairn_sqlite::{SCHEMA_VERSION, SqliteBackend, SqliteError, Takeover};
use pretty_assertions::assert_eq;
use rusqlite::{Connection, params};

fn setup() -> (tempfile::TempDir, Arc<SqliteBackend>, Store) {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(SqliteBackend::open(dir.path().join("cairn.db")).unwrap());
    let store = Store::with_backend(backend.clone());
    (dir, backend, store)
}

fn raw(b: &SqliteBackend) -> Connection {
    Connection::open(b.path()).unwrap()
}

// ---------------------------------------------------------------------------
// Schema
// ---------------------------------------------------------------------------

#[test]
fn a_new_database_is_at_the_latest_schema_in_wal_mode_and_marked_as_cairns() {
    let (_dir, b, _) = setup();
    let c = raw(&b);
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    let app: i64 = c
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        (version, mode.as_str(), app),
        (SCHEMA_VERSION, "wal", cairn_sqlite::APPLICATION_ID)
    );
    // Opening again (as another process would) migrates nothing and works.
    SqliteBackend::open(b.path()).unwrap();
}

#[test]
fn a_database_of_a_newer_schema_is_refused_unchanged() {
    let (_dir, b, store) = setup();
    store.create(NewSession::default()).unwrap();
    raw(&b)
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    let path = b.path().to_owned();
    drop((store, b));
    let before = std::fs::read(&path).unwrap();
    match SqliteBackend::open(&path) {
        Err(e @ SqliteError::NewerSchema { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("schema version {}", SCHEMA_VERSION + 1)),
                "{msg}"
            );
            assert!(msg.contains("upgrade cairn"), "{msg}");
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    assert!(
        std::fs::read(&path).unwrap() == before,
        "the database was not changed"
    );
}

#[test]
fn another_applications_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE notes (x)")
        .unwrap();
    match SqliteBackend::open(&path) {
        Err(SqliteError::NotCairn { .. }) => {}
        other => panic!("expected NotCairn, got {other:?}"),
    }
}

#[test]
fn two_writers_can_never_store_the_same_seq() {
    let (_dir, b, store) = setup();
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("one")).unwrap();
    let line = s.raw_record(1).unwrap();
    let c = raw(&b);
    let sid: i64 = c
        .query_row("SELECT sid FROM sessions", [], |r| r.get(0))
        .unwrap();
    let dup = c.execute(
        "INSERT INTO records (key, session, seq, kind, crc, payload)
         VALUES ((?1 << 32) | 1, ?1, 1, 'message', 0, ?2)",
        params![sid, line],
    );
    assert!(
        dup.is_err(),
        "the primary key (session << 32 | seq) refuses a second record 1"
    );
    // A row whose key is not its (session, seq) is refused too, so the
    // key cannot be left out to dodge it.
    // (The last: a seq past 2^32, whose bits `|` the key of session 1 would
    // not show.)
    assert_eq!(sid, 1);
    for (key, seq) in [
        ("NULL", 1),
        ("(?1 << 32) | 2", 3),
        ("(?1 << 32) | 7", (1i64 << 32) | 7),
    ] {
        let wrong = c.execute(
            &format!(
                "INSERT INTO records (key, session, seq, kind, crc, payload)
                 VALUES ({key}, ?1, {seq}, 'message', 0, ?2)"
            ),
            params![sid, line],
        );
        assert!(wrong.is_err(), "key {key}, seq {seq} stored");
    }
}

#[test]
fn a_session_past_the_keys_records_can_hold_is_refused_and_nothing_is_stored() {
    let (_dir, b, store) = setup();
    // The last session key a record key has room for (2^31 - 1): the
    // next session created would get 2^31.
    raw(&b)
        .execute_batch(
            "INSERT INTO sessions VALUES (2147483647, 'x', '{}', 't', 't', NULL, NULL, NULL,
                 NULL, '\"none\"', '{}', 0, 0, 0, 0)",
        )
        .unwrap();
    let refused = store.create(NewSession::default()).map(drop);
    match refused {
        Err(OpenError::Io(e)) => {
            let why = e.source.to_string();
            assert!(why.contains("session keys below"), "{why}");
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    let rows: (i64, i64) = raw(&b)
        .query_row(
            "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM records)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(rows, (1, 0));
}

// ---------------------------------------------------------------------------
// Lease and fencing
// ---------------------------------------------------------------------------

#[test]
fn a_writer_whose_lease_was_broken_cannot_append() {
    let (_dir, b, store) = setup();
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("before")).unwrap();
    let id = s.id().clone();
    let broken = b.break_lease(&id, Takeover::Force).unwrap().unwrap();
    assert_eq!(broken.holder.pid, std::process::id());
    match s.append(user("fenced")) {
        Err(AppendError::Io { source, .. }) => {
            assert!(source.to_string().contains("lease"), "{source}");
        }
        other => panic!("expected a fenced append to fail, got {other:?}"),
    }
    assert!(matches!(
        s.append(user("again")),
        Err(AppendError::Poisoned { .. })
    ));
    drop(s);
    let again = store.open(&id, Access::Read).unwrap();
    assert_eq!(again.len(), 2, "nothing of the fenced writer was stored");
}

#[test]
fn a_lease_taken_over_by_a_new_writer_fences_the_old_one() {
    let (_dir, b, store) = setup();
    let old = store.create(NewSession::default()).unwrap();
    let id = old.id().clone();
    let first = b.lease(&id).unwrap().unwrap().token;
    b.break_lease(&id, Takeover::Force).unwrap();
    let new = store.open(&id, Access::Write).unwrap();
    let second = b.lease(&id).unwrap().unwrap().token;
    assert!(second > first, "tokens only grow: {first} then {second}");
    new.append(user("the new writer")).unwrap();
    match old.append(user("the old writer")) {
        Err(AppendError::Io { source, .. }) => {
            let msg = source.to_string();
            assert!(
                msg.contains(&format!("token {second}"))
                    && msg.contains(&format!("token is {first}")),
                "{msg}"
            );
        }
        other => panic!("expected the old writer to be fenced, got {other:?}"),
    }
    // The old writer going away does not release the new writer's lease.
    drop(old);
    assert!(b.writer_active(&id));
    new.append(user("still the new writer")).unwrap();
    assert_eq!(new.len(), 3);
}

#[test]
fn a_writer_whose_session_gained_records_behind_its_back_is_fenced_and_stores_nothing() {
    let (_dir, b, store) = setup();
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("one")).unwrap();
    let line = s.raw_record(1).unwrap();
    // A record 2 this handle does not know of (its lease is still its own).
    raw(&b)
        .execute(
            "INSERT INTO records (key, session, seq, kind, crc, payload)
             SELECT (sid << 32) | 2, sid, 2, 'message', 0, ?1 FROM sessions",
            [&line],
        )
        .unwrap();
    match s.append(user("two")) {
        Err(AppendError::Io { source, .. }) => {
            let msg = source.to_string();
            assert!(msg.contains("holds other records"), "{msg}");
        }
        other => panic!("expected the append to be fenced, got {other:?}"),
    }
    let stored: i64 = raw(&b)
        .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 3, "the header, record 1 and the planted record 2");
}

/// The key (`sid`) of session `id`.
fn sid_of(b: &SqliteBackend, id: &SessionId) -> i64 {
    raw(b)
        .query_row(
            "SELECT sid FROM sessions WHERE id = ?1",
            [id.as_str()],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn a_writer_of_a_removed_session_is_fenced_from_the_new_session_given_its_key_and_token() {
    let (_dir, b, store) = setup();
    // A writer of a session with its header alone, fenced by a forced
    // break; the session is then removed.
    let stale = store.create(NewSession::default()).unwrap();
    let gone = stale.id().clone();
    let (sid, token) = (sid_of(&b, &gone), b.lease(&gone).unwrap().unwrap().token);
    b.break_lease(&gone, Takeover::Force).unwrap();
    store.remove(&gone).unwrap();
    // The next session created gets the removed one's key (SQLite reuses
    // the largest rowid) and, as a new session, the same first token; it
    // holds its header alone, as the stale writer knows its own.
    let new = store.create(NewSession::default()).unwrap();
    assert_eq!(sid_of(&b, new.id()), sid);
    assert_eq!(b.lease(new.id()).unwrap().unwrap().token, token);
    match stale.append(user("the stale writer")) {
        Err(AppendError::Io { source, .. }) => {
            let msg = source.to_string();
            assert!(
                msg.contains("the session was removed")
                    && msg.contains(&format!("given to session {}", new.id())),
                "{msg}"
            );
        }
        other => panic!("expected the stale writer to be fenced, got {other:?}"),
    }
    // Nor does it give the new session's lease back when it goes.
    drop(stale);
    assert!(b.writer_active(new.id()));
    new.append(user("the new writer")).unwrap();
    let id = new.id().clone();
    drop(new);
    let again = store.open(&id, Access::Read).unwrap();
    assert_eq!(again.len(), 2, "nothing of the stale writer was stored");
    assert_eq!(
        again.context().messages()[0]
            .message()
            .unwrap()
            .plain_text(),
        "the new writer"
    );
}

#[test]
fn breaking_a_live_holders_lease_needs_force() {
    let (_dir, b, store) = setup();
    let s = store.create(NewSession::default()).unwrap();
    match b.break_lease(s.id(), Takeover::IfAbandoned) {
        Err(StoreError::Open(OpenError::InUse { holder, .. })) => {
            assert_eq!(holder, Some(std::process::id()))
        }
        other => panic!("expected InUse, got {other:?}"),
    }
    s.append(user("still mine")).unwrap();
}

/// A pid that ran on this machine and has exited (and was reaped).
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn plant_lease(b: &SqliteBackend, id: &SessionId, pid: u32, machine: Option<&str>) {
    let me = cairn_sqlite::Holder::me();
    let c = raw(b);
    c.execute(
        "INSERT OR REPLACE INTO leases (session, token, pid, machine, boot, pid_ns, started, acquired, heartbeat)
         SELECT sid, lease_epoch + 1, ?2, ?3, ?4, ?5, 12345, 'then', 'then' FROM sessions WHERE id = ?1",
        params![id.as_str(), pid, machine.unwrap_or(&me.machine), me.boot, me.pid_ns],
    )
    .unwrap();
    c.execute(
        "UPDATE sessions SET lease_epoch = lease_epoch + 1 WHERE id = ?1",
        [id.as_str()],
    )
    .unwrap();
}

#[test]
fn a_killed_writers_lease_is_taken_over_by_the_next_writer() {
    let (_dir, b, store) = setup();
    let s = store.create(NewSession::default()).unwrap();
    let id = s.id().clone();
    drop(s);
    plant_lease(&b, &id, dead_pid(), None);
    assert!(!b.writer_active(&id), "a dead holder holds nothing");
    assert_eq!(b.status(&id).unwrap(), Status::Init);
    let s = store.open(&id, Access::Write).unwrap();
    assert_eq!(
        b.lease(&id).unwrap().unwrap().holder.pid,
        std::process::id()
    );
    s.append(user("after the takeover")).unwrap();
}

#[test]
fn a_holder_on_another_machine_is_never_presumed_dead() {
    let (_dir, b, store) = setup();
    let s = store.create(NewSession::default()).unwrap();
    let id = s.id().clone();
    drop(s);
    plant_lease(&b, &id, dead_pid(), Some("another-machine"));
    assert!(b.writer_active(&id));
    match store.open(&id, Access::Write) {
        Err(OpenError::InUse { .. }) => {}
        other => panic!("expected InUse, got {other:?}"),
    }
    assert!(matches!(
        b.break_lease(&id, Takeover::IfAbandoned),
        Err(StoreError::Open(OpenError::InUse { .. }))
    ));
    b.break_lease(&id, Takeover::Force).unwrap();
    store.open(&id, Access::Write).unwrap();
}

// ---------------------------------------------------------------------------
// Listing, status and lookups by SQL
// ---------------------------------------------------------------------------

/// Replaces every payload of a session but its header with junk: whatever
/// still works afterwards reads no payload.
fn spoil_payloads(b: &SqliteBackend, id: &SessionId) {
    raw(b)
        .execute(
            "UPDATE records SET payload = x'00' WHERE seq > 0
             AND session = (SELECT sid FROM sessions WHERE id = ?1)",
            [id.as_str()],
        )
        .unwrap();
}

#[test]
fn listing_and_status_come_from_sql_without_reading_payloads() {
    let (_dir, b, store) = setup();
    let s = store
        .create(NewSession {
            title: Some("t".into()),
            ..NewSession::default()
        })
        .unwrap();
    let op = s
        .start_operation(Message::text(Role::User, "first words"))
        .unwrap();
    op.finish(Outcome::Completed, None).unwrap();
    s.append(EntryBody::SessionInfo(cairn::SessionInfo {
        title: Some("later title".into()),
    }))
    .unwrap();
    let id = s.id().clone();
    let expected = cairn::summary_of(&s).unwrap();
    drop(s);
    spoil_payloads(&b, &id);
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 1);
    let mut want = expected.clone();
    want.status = Status::Succeeded;
    assert_eq!(listed[0], want);
    assert_eq!(b.summaries().unwrap()[0], want);
    assert_eq!(b.status(&id).unwrap(), Status::Succeeded);
    // The session itself does not open: its payloads really are gone.
    assert!(matches!(
        store.open(&id, Access::Read),
        Err(OpenError::Damaged(_))
    ));
}

/// The `sessions` row of session `id`, every column.
fn sessions_row(b: &SqliteBackend, id: &SessionId) -> Vec<rusqlite::types::Value> {
    let c = raw(b);
    let mut stmt = c.prepare("SELECT * FROM sessions WHERE id = ?1").unwrap();
    let n = stmt.column_count();
    stmt.query_row([id.as_str()], |r| (0..n).map(|i| r.get(i)).collect())
        .unwrap()
}

#[test]
fn an_append_that_changes_no_listed_field_leaves_the_sessions_row_as_it_was() {
    let (_dir, b, store) = setup();
    let s = store.create(NewSession::default()).unwrap();
    let id = s.id().clone();
    s.append(user("the first message")).unwrap();
    let before = sessions_row(&b, &id);
    s.append(EntryBody::Message(Message::text(
        Role::Assistant,
        "a reply",
    )))
    .unwrap();
    s.append(user("a second message")).unwrap();
    assert_eq!(
        sessions_row(&b, &id),
        before,
        "the counters went with the records"
    );
    // Yet the listing counts every record, from the session's last one.
    let mut want = cairn::summary_of(&s).unwrap();
    want.status = Status::Init;
    assert_eq!((want.entries, want.records), (3, 4));
    assert_eq!(b.summaries().unwrap()[0], want);
    let bytes: usize = (0..s.len())
        .map(|seq| s.raw_record(seq).unwrap().len())
        .sum();
    assert_eq!(b.stamp(&id).unwrap().len, bytes as u64);
    assert_eq!(b.stamps().unwrap(), [(id.clone(), b.stamp(&id).unwrap())]);
    // A new title is kept in the row alone: that append rewrites it.
    s.append(EntryBody::SessionInfo(cairn::SessionInfo {
        title: Some("a title".into()),
    }))
    .unwrap();
    let titled = sessions_row(&b, &id);
    assert_ne!(titled, before);
    assert_eq!(titled[5], rusqlite::types::Value::Text("a title".into()));
    assert_eq!(b.summaries().unwrap()[0].title.as_deref(), Some("a title"));
    // A writer reopening the session continues from the same counters,
    // and its first plain append leaves the row alone too.
    drop(s);
    let s = store.open(&id, Access::Write).unwrap();
    let reopened = sessions_row(&b, &id);
    assert_ne!(reopened, titled, "the lease's epoch is in the row");
    s.append(user("after reopening")).unwrap();
    assert_eq!(sessions_row(&b, &id), reopened);
    let mut want = cairn::summary_of(&s).unwrap();
    drop(s);
    want.status = Status::Init;
    assert_eq!(store.list().unwrap()[0], want);
    assert_eq!(want.records, 6);
}

#[test]
fn stamps_are_every_sessions_stamp_in_one_pass() {
    let (_dir, b, store) = setup();
    let mut ids = Vec::new();
    for i in 0..5 {
        let s = store.create(NewSession::default()).unwrap();
        for j in 0..i {
            s.append(user(&format!("m{j}"))).unwrap();
        }
        ids.push(s.id().clone());
    }
    let gone = ids.remove(2);
    store.remove(&gone).unwrap();
    let mut stamps = b.stamps().unwrap();
    stamps.sort_by(|x, y| x.0.cmp(&y.0));
    let mut each: Vec<_> = ids
        .iter()
        .map(|id| (id.clone(), b.stamp(id).unwrap()))
        .collect();
    each.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(stamps, each);
    // A stamp is the bytes and the records stored.
    for (id, stamp) in &stamps {
        let lines = b.stored_lines(id).unwrap();
        let bytes: usize = lines.iter().map(Vec::len).sum();
        assert_eq!(
            (stamp.len, stamp.modified_ns),
            (bytes as u64, lines.len() as u128)
        );
    }
}

/// The pages of `records` that hold the overflow of its payloads.
fn overflow_pages(c: &Connection) -> Vec<i64> {
    c.prepare("SELECT pageno FROM dbstat WHERE name = 'records' AND pagetype = 'overflow'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn regression_listing_walked_the_overflow_pages_of_every_sessions_large_last_line() {
    // The first migration 4 added the listing counters after `payload`, so
    // reading them walked every overflow page of a session's last line
    // when it spilled (3,000 sessions ending in 200 KB lines: 147,058
    // preads). Here those pages are zeroed in the database file: a listing
    // or stamp that reads one fails (the overflow chain is broken) or
    // lists something else.
    let (dir, b, store) = setup();
    let mut ids = Vec::new();
    for i in 0..10 {
        let s = store
            .create(NewSession {
                title: Some(format!("session {i}")),
                ..NewSession::default()
            })
            .unwrap();
        s.append(user("a short question")).unwrap();
        s.append(EntryBody::Message(Message::text(
            Role::Assistant,
            "z".repeat(200_000),
        )))
        .unwrap();
        ids.push(s.id().clone());
    }
    let sorted = |mut v: Vec<(SessionId, cairn::Stamp)>| {
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    };
    let (list, summaries, stamps) = (
        store.list().unwrap(),
        b.summaries().unwrap(),
        sorted(b.stamps().unwrap()),
    );
    assert_eq!(list.len(), 10);
    assert!(list.iter().all(|l| l.records == 3));
    assert!(stamps.iter().all(|(_, s)| s.len > 200_000));
    let path = b.path().to_owned();
    drop((store, b));

    // Everything in the database file, then each overflow page zeroed.
    let c = Connection::open(&path).unwrap();
    let busy: i64 = c
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .unwrap();
    assert_eq!(busy, 0);
    let page: u64 = c
        .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
        .unwrap() as u64;
    let pages = overflow_pages(&c);
    assert!(
        pages.len() as u64 >= 10 * (200_000 / page),
        "{} overflow pages",
        pages.len()
    );
    drop(c);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let zeros = vec![0u8; page as usize];
        for p in pages {
            f.write_all_at(&zeros, (p as u64 - 1) * page).unwrap();
        }
        f.sync_all().unwrap();
    }

    let b = Arc::new(SqliteBackend::open(&path).unwrap());
    let store = Store::with_backend(b.clone());
    assert_eq!(sorted(b.stamps().unwrap()), stamps);
    for (id, stamp) in &stamps {
        assert_eq!(b.stamp(id).unwrap(), *stamp);
        assert_eq!(b.status(id).unwrap(), Status::Init);
    }
    assert_eq!(b.summaries().unwrap(), summaries);
    assert_eq!(store.list().unwrap(), list);
    // The pages really are gone: the sessions whose lines they held no
    // longer read.
    assert!(store.open(&ids[0], Access::Read).is_err());
    drop(dir);
}

#[test]
fn status_by_sql_follows_the_writer_and_the_operation() {
    let (_dir, b, store) = setup();
    let s = store.create(NewSession::default()).unwrap();
    let id = s.id().clone();
    assert_eq!(b.status(&id).unwrap(), Status::Init);
    let op = s.start_operation(Message::text(Role::User, "go")).unwrap();
    assert_eq!(b.status(&id).unwrap(), Status::Running);
    op.request_approval("c1", "tool").unwrap();
    assert_eq!(b.status(&id).unwrap(), Status::Paused);
    op.resolve_approval("c1", false, None).unwrap();
    drop(op);
    drop(s);
    assert_eq!(b.status(&id).unwrap(), Status::Interrupted);
    assert_eq!(
        store.status(&id).unwrap(),
        Status::Interrupted,
        "the core agrees"
    );
}

#[test]
fn entry_and_children_lookups_use_the_index() {
    let (_dir, b, store) = setup();
    let s = store.create(NewSession::default()).unwrap();
    let a = s.append(user("a")).unwrap().id.unwrap();
    let b1 = s.append(user("b1")).unwrap().id.unwrap();
    let b2 = s
        .append_entry(NewEntry {
            id: None,
            parent: Parent::Entry(a.clone()),
            body: user("b2"),
        })
        .unwrap()
        .id
        .unwrap();
    let root2 = s
        .append_entry(NewEntry {
            id: None,
            parent: Parent::Root,
            body: user("r"),
        })
        .unwrap()
        .id
        .unwrap();
    let id = s.id().clone();
    assert_eq!(
        b.children(&id, Some(&a)).unwrap(),
        vec![b1.clone(), b2.clone()]
    );
    assert_eq!(b.children(&id, Some(&a)).unwrap(), s.children(Some(&a)));
    assert_eq!(b.children(&id, None).unwrap(), vec![a.clone(), root2]);
    assert_eq!(b.entry_seq(&id, &b2).unwrap(), Some(3));
    assert_eq!(
        b.entry_seq(&id, &cairn::EntryId::parse("nope").unwrap())
            .unwrap(),
        None
    );
    let unknown = SessionId::generate();
    assert!(matches!(
        b.children(&unknown, None),
        Err(StoreError::NoSuchSession { .. })
    ));
    let c = raw(&b);
    let plan: String = c
        .query_row(
            "EXPLAIN QUERY PLAN SELECT seq FROM records WHERE session = 1 AND id = 'x'",
            [],
            |r| r.get(3),
        )
        .unwrap();
    assert!(
        plan.contains("records_by_id"),
        "id lookups use the index: {plan}"
    );
}

#[test]
fn a_removed_sessions_rows_are_all_gone() {
    let (_dir, b, store) = setup();
    let id = long_session(&store, 1100);
    drop(store.open(&id, Access::Write).unwrap());
    store.remove(&id).unwrap();
    let c = raw(&b);
    for table in ["sessions", "records", "leases", "indexes"] {
        let n: i64 = c
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0, "{table} is empty");
    }
}

#[test]
fn the_database_path_is_where_it_was_asked_for() {
    let (dir, b, _) = setup();
    assert_eq!(b.path(), Path::new(&dir.path().join("cairn.db")));
    assert!(b.describe().starts_with("sqlite:"));
}

#[test]
fn regression_a_new_fork_was_listed_below_its_source_so_continue_opened_the_source() {
    let (_dir, _db, store) = setup();
    let source = store.create(NewSession::default()).unwrap();
    source.append(user("hello")).unwrap();
    let now = cairn::now_rfc3339();
    while cairn::now_rfc3339() == now {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let fork = store.fork(&source, source.leaf().as_ref(), None).unwrap();
    // The copy keeps the source's times; the fork was made now.
    let list = store.list().unwrap();
    assert_eq!(list[0].id, *fork.id(), "{list:#?}");
    assert!(list[0].updated >= list[0].created, "{:?}", list[0]);
    assert_eq!(store.latest().unwrap(), *fork.id());
}

// ---------------------------------------------------------------------------
// Persisted index
// ---------------------------------------------------------------------------

/// A session of `n` user messages.
fn long_session(store: &Store, n: usize) -> SessionId {
    let s = store.create(NewSession::default()).unwrap();
    for i in 0..n {
        s.append(user(&format!("m{i}"))).unwrap();
    }
    s.id().clone()
}

fn index_note(store: &Store, id: &SessionId, access: Access) -> (String, usize) {
    let s = store.open(id, access).unwrap();
    let note = s.open_report().index.clone().unwrap_or_default();
    (note, s.context().messages().len())
}

#[test]
fn a_long_session_is_reopened_from_its_index_with_the_same_context() {
    let (_dir, _b, store) = setup();
    let id = long_session(&store, 1100);
    // The writer that appended them saved the index when it closed.
    let (note, n) = index_note(&store, &id, Access::Write);
    assert!(note.starts_with("index used: 1101 records"), "{note}");
    assert_eq!(n, 1100);
    store
        .open(&id, Access::Write)
        .unwrap()
        .append(user("one more"))
        .unwrap();
    for access in [Access::Read, Access::Write] {
        let (note, n) = index_note(&store, &id, access);
        assert!(note.starts_with("index used"), "{note}");
        assert_eq!(n, 1101);
    }
}

#[test]
fn an_index_whose_last_row_changed_is_not_trusted_and_the_change_is_found() {
    let (_dir, b, store) = setup();
    let id = long_session(&store, 1100);
    drop(store.open(&id, Access::Write).unwrap());
    // The last indexed row is not the one indexed any more (as after a
    // session removed and copied back under its id with other records).
    let c = raw(&b);
    c.execute(
        "UPDATE records SET payload = (SELECT payload FROM records r WHERE r.seq = 5)
         WHERE seq = 1100",
        [],
    )
    .unwrap();
    let damaged = store.open(&id, Access::Write).map(drop);
    // The open that ignored the index then verified every row, and found the
    // one that changed.
    assert!(matches!(damaged, Err(OpenError::Damaged(_))), "{damaged:?}");
}

#[test]
fn a_stale_index_is_reported_and_replaced() {
    let (_dir, b, store) = setup();
    let id = long_session(&store, 1100);
    drop(store.open(&id, Access::Write).unwrap());
    let c = raw(&b);
    c.execute("UPDATE indexes SET bytes = x'00'", []).unwrap();
    let (note, n) = index_note(&store, &id, Access::Write);
    assert!(note.starts_with("index not used"), "{note}");
    assert!(note.contains("rebuilt"), "{note}");
    assert_eq!(n, 1100);
    let (note, _) = index_note(&store, &id, Access::Read);
    assert!(note.starts_with("index used"), "{note}");
}

#[test]
fn an_index_row_found_damaged_after_the_open_is_removed_and_the_next_open_rebuilds_it() {
    let (_dir, b, store) = setup();
    let (id, ids) = indexed::compacted_session(&store, 1100, 1090);
    let first = ids[0].clone();
    let (note, _) = index_note(&store, &id, Access::Write);
    assert!(note.starts_with("index used"), "{note}");
    // Flip a byte of the first row block: an open that walks only from the
    // leaf back to the compaction never reads it.
    let c = raw(&b);
    let mut idx: Vec<u8> = c
        .query_row("SELECT bytes FROM indexes", [], |r| r.get(0))
        .unwrap();
    let at = indexed::row_block_at(&idx, 0) + 2;
    idx[at] ^= 0x01;
    c.execute("UPDATE indexes SET bytes = ?1", [&idx]).unwrap();

    let s = store.open(&id, Access::Write).unwrap();
    assert!(
        s.open_report()
            .index
            .as_deref()
            .unwrap_or_default()
            .starts_with("index used")
    );
    assert!(
        s.checkout(Some(&first), None).is_err(),
        "a move through the damaged block"
    );
    let rows: i64 = c
        .query_row("SELECT count(*) FROM indexes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0, "the damaged index row was removed");
    drop(s);
    let s = store.open(&id, Access::Write).unwrap();
    s.checkout(Some(&first), None).unwrap();
    assert_eq!(s.context().messages().len(), 1);
}
