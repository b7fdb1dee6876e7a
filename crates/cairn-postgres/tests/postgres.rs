//! What only Postgres has: the schema's versioning, the lease timed by the
//! server's clock and its fencing, connections that die mid-append, claims
//! with `FOR UPDATE SKIP LOCKED`, and following a session. Each test has a
//! schema of its own; connection faults are made with
//! `pg_terminate_backend` on this test's own connections only, so the tests
//! run in parallel. The server restart test is `#[ignore]`d (it restarts
//! the shared server): `crates/cairn-postgres/fleet.sh` runs it.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn::testkit::build::{calls, user};
use cairn::testkit::indexed;
use cairn::{Access, AppendError, Backend, EffectClass, NewSession, OpenError, Session, Store};
use cairn_postgres::scratch::Scratch;
use cairn_postgres::{PgError, PostgresBackend, SCHEMA_VERSION, Takeover};

/// A scratch schema and a store on it (with `extra` URL parameters).
fn store(tag: &str, extra: &str) -> Option<(Scratch, Store, Arc<PostgresBackend>)> {
    let scratch = Scratch::new(tag)?;
    let url = format!("{}{extra}", scratch.url);
    let backend = Arc::new(PostgresBackend::open(&url).unwrap());
    let store = Store::with_backend(backend.clone());
    Some((scratch, store, backend))
}

fn records(b: &dyn Backend, id: &cairn::SessionId) -> Vec<Vec<u8>> {
    b.stored_lines(id).unwrap()
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn a_newer_schema_is_refused_unchanged() {
    let Some((scratch, _store, _b)) = store("newer", "") else {
        return;
    };
    let mut c = scratch.raw();
    c.batch_execute(&format!(
        "INSERT INTO {}.migrations (version) VALUES ({})",
        scratch.schema,
        SCHEMA_VERSION + 1
    ))
    .unwrap();
    let err = PostgresBackend::open(&scratch.url).unwrap_err();
    assert!(
        matches!(err, PgError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade cairn"), "{err}");
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn a_schema_of_another_application_is_refused() {
    let Some(scratch) = Scratch::new("foreign") else {
        return;
    };
    scratch
        .raw()
        .batch_execute(&format!(
            "CREATE SCHEMA {0}; CREATE TABLE {0}.users (id int)",
            scratch.schema
        ))
        .unwrap();
    let err = PostgresBackend::open(&scratch.url).unwrap_err();
    assert!(matches!(err, PgError::NotCairn { .. }), "{err}");
    assert!(err.to_string().contains("cairn_schema=NAME"), "{err}");
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn concurrent_openers_migrate_once() {
    let Some(scratch) = Scratch::new("migrate") else {
        return;
    };
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| PostgresBackend::open(&scratch.url).unwrap());
        }
    });
    let b = PostgresBackend::open(&scratch.url).unwrap();
    assert_eq!(b.schema_version().unwrap(), SCHEMA_VERSION);
    let n: i64 = scratch
        .raw()
        .query_one(
            &format!("SELECT count(*) FROM {}.migrations", scratch.schema),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, i64::from(SCHEMA_VERSION));
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    let err = PostgresBackend::open("postgres://nobody@127.0.0.1:1/none").unwrap_err();
    assert!(matches!(err, PgError::Connect { .. }), "{err}");
    assert!(err.to_string().contains("pg_isready"), "{err}");
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn commits_are_synchronous_on_cairns_connections() {
    let Some((_s, _store, b)) = store("sync", "") else {
        return;
    };
    assert_eq!(b.synchronous_commit().unwrap(), "on");
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn a_writer_paused_past_its_lease_is_fenced_and_a_takeover_continues_the_log() {
    let Some((scratch, store, b)) = store("paused", "&cairn_lease_secs=60") else {
        return;
    };
    let a = store.create(NewSession::default()).unwrap();
    a.append(user("one")).unwrap();
    let id = a.id().clone();
    assert!(b.writer_active(&id));
    // The writer stops renewing (SIGSTOP) and its lease runs out by the
    // server's clock.
    scratch
        .raw()
        .batch_execute(&format!(
            "UPDATE {}.sessions SET lease_expires = now() - interval '1 second'",
            scratch.schema
        ))
        .unwrap();
    assert!(!b.writer_active(&id));
    let err = a.append(user("two")).unwrap_err();
    let text = cairn::with_causes(&err);
    assert!(text.contains("expired"), "{text}");
    // Another worker takes over and continues; the old handle stays fenced.
    let other = Store::with_backend(Arc::new(PostgresBackend::open(&scratch.url).unwrap()));
    let b2 = other.open(&id, Access::Write).unwrap();
    b2.append(user("three")).unwrap();
    assert!(matches!(
        a.append(user("four")),
        Err(AppendError::Poisoned { .. })
    ));
    drop(a);
    // The old writer's drop did not release the new writer's lease.
    assert!(b.writer_active(&id));
    drop(b2);
    let lines = records(&*b, &id);
    assert_eq!(
        lines.len(),
        3,
        "header, one, three: nothing of the fenced writer"
    );
    let s = store.open(&id, Access::Read).unwrap();
    assert_eq!(s.context().messages().len(), 2);
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn a_forced_takeover_fences_a_live_writer_with_a_message_naming_it() {
    let Some((scratch, store, b)) = store("forced", "") else {
        return;
    };
    let a = store.create(NewSession::default()).unwrap();
    let id = a.id().clone();
    assert!(matches!(
        b.break_lease(&id, Takeover::IfAbandoned),
        Err(cairn::StoreError::Open(OpenError::InUse { .. }))
    ));
    let broken = b.break_lease(&id, Takeover::Force).unwrap().unwrap();
    let other = Store::with_backend(Arc::new(PostgresBackend::open(&scratch.url).unwrap()));
    let b2 = other.open(&id, Access::Write).unwrap();
    let now = b.lease(&id).unwrap().unwrap();
    assert!(
        now.token > broken.token,
        "tokens increase at every takeover"
    );
    let text = cairn::with_causes(&a.append(user("late")).unwrap_err());
    assert!(text.contains("taken over"), "{text}");
    b2.append(user("on time")).unwrap();
    drop((a, b2));
    assert_eq!(records(&*b, &id).len(), 2);
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn an_idle_writer_keeps_its_lease_by_heartbeat() {
    let Some((_scratch, store, b)) = store("heartbeat", "&cairn_lease_secs=1") else {
        return;
    };
    let a = store.create(NewSession::default()).unwrap();
    let first = b.lease(a.id()).unwrap().unwrap();
    // Three leases long, idle: the heartbeat renews it every third.
    std::thread::sleep(Duration::from_millis(3000));
    let later = b.lease(a.id()).unwrap().unwrap();
    assert!(later.holds(), "{later:?}");
    assert_eq!(later.token, first.token);
    assert!(later.expires > first.expires);
    a.append(user("still mine")).unwrap();
}

/// Terminates every connection of this test (by its application name).
fn terminate(scratch: &Scratch, app: &str) -> i64 {
    scratch
        .raw()
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .unwrap()
        .len() as i64
}

#[test]
fn a_connection_killed_mid_append_poisons_the_handle_and_loses_nothing_acknowledged() {
    let app = format!("cairn-test-kill-{}", std::process::id());
    let Some((scratch, store, b)) = store("killed", &format!("&application_name={app}")) else {
        return;
    };
    let a = store.create(NewSession::default()).unwrap();
    for i in 0..5 {
        a.append(user(&format!("acknowledged {i}"))).unwrap();
    }
    let id = a.id().clone();
    // Hold the session's row so the next append waits inside the server.
    let mut blocker = scratch.raw();
    let mut tx = blocker.transaction().unwrap();
    tx.execute(
        &format!(
            "SELECT 1 FROM {}.sessions WHERE id = $1 FOR UPDATE",
            scratch.schema
        ),
        &[&id.as_str()],
    )
    .unwrap();
    std::thread::scope(|s| {
        let pending = s.spawn(|| a.append(user("in flight")));
        // Wait until the append is blocked in the server, then kill it.
        let mut watcher = scratch.raw();
        loop {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE application_name = $1 AND wait_event_type = 'Lock'",
                    &[&app],
                )
                .unwrap()
                .get(0);
            if waiting > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(terminate(&scratch, &app) >= 1);
        let err = pending.join().unwrap().unwrap_err();
        let text = cairn::with_causes(&err);
        assert!(
            text.contains("append to") && text.contains(&id.to_string()),
            "{text}"
        );
    });
    tx.rollback().unwrap();
    assert!(matches!(
        a.append(user("after")),
        Err(AppendError::Poisoned { .. })
    ));
    drop(a);
    // The next open reconnects (the pool's connections were killed too).
    let s = store.open(&id, Access::Write).unwrap();
    assert_eq!(s.len(), 6, "the header and every acknowledged record");
    s.append(user("after reconnecting")).unwrap();
    drop(s);
    assert_eq!(records(&*b, &id).len(), 7);
}

#[test]
fn idle_connections_killed_under_a_reader_are_replaced() {
    let app = format!("cairn-test-idle-{}", std::process::id());
    let Some((scratch, store, _b)) = store("idle", &format!("&application_name={app}")) else {
        return;
    };
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("x")).unwrap();
    let id = s.id().clone();
    drop(s);
    terminate(&scratch, &app);
    // Reads retry once on a fresh connection.
    assert_eq!(store.list().unwrap().len(), 1);
    assert_eq!(store.open(&id, Access::Read).unwrap().len(), 2);
}

/// Leaves `n` sessions whose operation was interrupted: a tool dispatched,
/// then the writer gone.
fn interrupted(store: &Store, n: usize) -> Vec<cairn::SessionId> {
    (0..n)
        .map(|i| {
            let s = store.create(NewSession::default()).unwrap();
            let op = s
                .start_operation(cairn::Message::text(cairn::Role::User, "go"))
                .unwrap();
            let t = op.model_attempt(None, None).unwrap();
            op.record_assistant(
                t,
                calls("", &[("c1", "charge", serde_json::json!({"n": i}))]),
            )
            .unwrap();
            op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
            let id = s.id().clone();
            drop(op);
            drop(s);
            id
        })
        .collect()
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn concurrent_claims_hand_out_each_interrupted_session_once() {
    let Some((scratch, store, _b)) = store("claims", "") else {
        return;
    };
    let mut ids = interrupted(&store, 12);
    let claimed: Vec<Vec<cairn::SessionId>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let b = PostgresBackend::open(&scratch.url).unwrap();
                    let st = Store::with_backend(Arc::new(b));
                    let mut mine = Vec::new();
                    let mut held = Vec::new();
                    while let cairn::Claim::Claimed(id) =
                        st.backend().claim_interrupted(&[]).unwrap()
                    {
                        // The claim's lease is adopted by this open.
                        let s = st.open(&id, Access::Write).unwrap();
                        cairn::recover(&s, cairn::Policy::close_all(), None).unwrap();
                        // The worker carries the operation to its end, so
                        // the session no longer needs anyone.
                        let op = s.resume_operation().unwrap();
                        op.finish(cairn::Outcome::Failed, Some("recovered".into()))
                            .unwrap();
                        mine.push(id);
                        held.push(s);
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut all: Vec<_> = claimed.into_iter().flatten().collect();
    all.sort();
    ids.sort();
    assert_eq!(all, ids, "every session claimed exactly once");
    for id in &ids {
        let s = store.open(id, Access::Read).unwrap();
        assert_eq!(store.status(id).unwrap(), cairn::Status::Failed);
        assert!(s.context().messages().len() >= 3);
    }
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn a_reader_follows_new_records_without_rescanning() {
    let Some((_scratch, store, b)) = store("follow", "") else {
        return;
    };
    let s = store.create(NewSession::default()).unwrap();
    let id = s.id().clone();
    let reader = Session::open(&*b, &id, Access::Read).unwrap();
    let seen = reader.len();
    std::thread::scope(|t| {
        t.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            s.append(user("new")).unwrap();
        });
        let now = b
            .wait_for_records(
                &id,
                seen,
                Duration::from_millis(10),
                Duration::from_secs(60),
            )
            .unwrap();
        assert_eq!(now, seen + 1);
    });
    let new = b.records_since(&id, seen).unwrap();
    assert_eq!(new.len(), 1);
    assert!(String::from_utf8_lossy(&new[0]).contains("\"new\""));
}

/// Restarts the shared server (`pg_ctlcluster … main restart`) while a
/// writer is open: the next append fails with a poisoned handle, nothing
/// acknowledged is lost, and the next open reconnects. Run by
/// `crates/cairn-postgres/fleet.sh` (it disturbs every other test on the server).
#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
#[ignore = "restarts the shared Postgres server; run by crates/cairn-postgres/fleet.sh"]
fn a_server_restart_poisons_open_writers_and_the_next_open_reconnects() {
    let Some((_scratch, store, b)) = store("restart", "") else {
        return;
    };
    let a = store.create(NewSession::default()).unwrap();
    for i in 0..3 {
        a.append(user(&format!("acknowledged {i}"))).unwrap();
    }
    let id = a.id().clone();
    cairn_postgres::scratch::restart_local_server().unwrap();
    let err = a.append(user("after the restart")).unwrap_err();
    assert!(cairn::with_causes(&err).contains("append to"), "{err}");
    assert!(matches!(
        a.append(user("again")),
        Err(AppendError::Poisoned { .. })
    ));
    drop(a);
    let s = store.open(&id, Access::Write).unwrap();
    assert_eq!(s.len(), 4);
    s.append(user("reconnected")).unwrap();
    drop(s);
    assert_eq!(records(&*b, &id).len(), 5);
}

/// A session of `n` user messages.
fn long_session(store: &Store, n: usize) -> cairn::SessionId {
    let s = store.create(NewSession::default()).unwrap();
    for i in 0..n {
        s.append(user(&format!("m{i}"))).unwrap();
    }
    s.id().clone()
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn a_long_session_is_reopened_from_its_index_and_a_stale_index_is_replaced() {
    let Some((scratch, store, b)) = store("index", "") else {
        return;
    };
    let id = long_session(&store, 1100);
    // What the open report says of the index, and the context's length.
    let index_note = |access| {
        let s = store.open(&id, access).unwrap();
        let messages = s.context().messages().len();
        (s.open_report().index.clone().unwrap_or_default(), messages)
    };
    // The writer that appended them saved the index when it closed.
    let (note, _) = index_note(Access::Write);
    assert!(note.starts_with("index used: 1101 records"), "{note}");
    let s = &scratch.schema;
    let mut raw = scratch.raw();
    raw.batch_execute(&format!("UPDATE {s}.indexes SET bytes = '\\x00'"))
        .unwrap();
    let (note, n) = index_note(Access::Write);
    assert!(
        note.contains("not used") && note.contains("rebuilt"),
        "{note}"
    );
    assert_eq!(n, 1100);
    let (note, n) = index_note(Access::Read);
    assert!(note.starts_with("index used: 1101 records"), "{note}");
    assert_eq!(n, 1100);
    // The last indexed record replaced by another: not trusted, and the
    // open that reads every record finds the change.
    raw.batch_execute(&format!(
        "UPDATE {s}.records SET payload = (SELECT payload FROM {s}.records WHERE seq = 5)
          WHERE seq = 1100"
    ))
    .unwrap();
    assert!(matches!(
        store.open(&id, Access::Read).map(drop),
        Err(OpenError::Damaged(_))
    ));
    b.remove(&id).unwrap();
    let left: i64 = raw
        .query_one(&format!("SELECT count(*) FROM {s}.indexes"), &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the index went with its session");
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn an_index_row_found_damaged_after_the_open_is_removed_and_the_next_open_rebuilds_it() {
    let Some((scratch, store, _b)) = store("index_late", "") else {
        return;
    };
    let (id, ids) = indexed::compacted_session(&store, 1100, 1090);
    let first = ids[0].clone();
    let sch = &scratch.schema;
    let mut raw = scratch.raw();
    // Flip a byte of the first row block: an open that walks only from the
    // leaf back to the compaction never reads it.
    let mut idx: Vec<u8> = raw
        .query_one(&format!("SELECT bytes FROM {sch}.indexes"), &[])
        .unwrap()
        .get(0);
    let at = indexed::row_block_at(&idx, 0) + 2;
    idx[at] ^= 0x01;
    raw.execute(&format!("UPDATE {sch}.indexes SET bytes = $1"), &[&idx])
        .unwrap();

    let s = store.open(&id, Access::Write).unwrap();
    let note = s.open_report().index.clone().unwrap_or_default();
    assert!(note.starts_with("index used"), "{note}");
    assert!(
        s.checkout(Some(&first), None).is_err(),
        "a move through the damaged block"
    );
    let rows: i64 = raw
        .query_one(&format!("SELECT count(*) FROM {sch}.indexes"), &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "the damaged index row was removed");
    drop(s);
    let s = store.open(&id, Access::Write).unwrap();
    s.checkout(Some(&first), None).unwrap();
    assert_eq!(s.context().messages().len(), 1);
}

/// Rows of `table` whose session key is `sid`.
fn rows_of(scratch: &Scratch, table: &str, sid: i64) -> i64 {
    let s = &scratch.schema;
    scratch
        .raw()
        .query_one(
            &format!("SELECT count(*) FROM {s}.{table} WHERE session = $1"),
            &[&sid],
        )
        .unwrap()
        .get(0)
}

fn sid_of(scratch: &Scratch, id: &cairn::SessionId) -> i64 {
    let s = &scratch.schema;
    scratch
        .raw()
        .query_one(
            &format!("SELECT sid FROM {s}.sessions WHERE id = $1"),
            &[&id.as_str()],
        )
        .unwrap()
        .get(0)
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn removing_a_session_deletes_its_records_and_index_and_leaves_other_sessions_whole() {
    let Some((scratch, store, b)) = store("remove", "") else {
        return;
    };
    let gone = long_session(&store, 1100);
    let kept = long_session(&store, 3);
    let (gone_sid, kept_sid) = (sid_of(&scratch, &gone), sid_of(&scratch, &kept));
    assert_eq!(rows_of(&scratch, "records", gone_sid), 1101);
    assert_eq!(
        rows_of(&scratch, "indexes", gone_sid),
        1,
        "its index was saved"
    );
    let kept_lines = records(&*b, &kept);
    b.remove(&gone).unwrap();
    assert_eq!(rows_of(&scratch, "records", gone_sid), 0);
    assert_eq!(rows_of(&scratch, "indexes", gone_sid), 0);
    assert!(matches!(
        store.open(&gone, Access::Read).map(drop),
        Err(OpenError::NotFound { .. })
    ));
    assert_eq!(rows_of(&scratch, "records", kept_sid), 4);
    assert_eq!(records(&*b, &kept), kept_lines);
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn an_append_to_a_session_removed_under_its_writer_is_refused_and_stores_nothing() {
    let Some((scratch, store, b)) = store("removed", "") else {
        return;
    };
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("before")).unwrap();
    let id = s.id().clone();
    let sid = sid_of(&scratch, &id);
    // An operator breaks the lease and removes the session while its
    // writer still runs: no foreign key stands between the writer's next
    // append and the records table, only the fence.
    b.break_lease(&id, Takeover::Force).unwrap();
    b.remove(&id).unwrap();
    let text = cairn::with_causes(&s.append(user("after")).unwrap_err());
    assert!(text.contains("lease"), "{text}");
    assert_eq!(rows_of(&scratch, "records", sid), 0);
}

#[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
#[test]
fn a_reader_reading_far_past_the_open_gets_every_record_as_stored_in_and_out_of_order() {
    let Some((_scratch, _store, b)) = store("readahead", "") else {
        return;
    };
    // A session of 3,000 records, written as one batch: its reads go
    // through read-ahead windows of up to 1,024 records, the later ones
    // fetched in the background.
    let dir = tempfile::tempdir().unwrap();
    let files = Arc::new(cairn::FileBackend::new(dir.path().to_path_buf()));
    let s = Store::with_backend(files.clone())
        .create(NewSession::default())
        .unwrap();
    s.set_durability(cairn::Durability::Buffered);
    for i in 0..2999 {
        s.append(user(&format!("message {i} {}", "x".repeat(i % 300))))
            .unwrap();
    }
    s.sync().unwrap();
    let id = s.id().clone();
    drop(s);
    let lines = files.stored_lines(&id).unwrap();
    let log = b.create(&id, &lines[0]).unwrap();
    log.append(&lines[1..]).unwrap();
    drop(log);

    let log = b.open(&id, Access::Read, &mut |_| Ok(())).unwrap().log;
    let n = lines.len() as u64;
    // The open kept the rows it read: the first pass takes them, the
    // second and third miss every time, sequentially.
    for pass in 0..3 {
        for seq in 0..n {
            assert_eq!(
                log.read(seq).unwrap(),
                lines[seq as usize],
                "pass {pass}, {seq}"
            );
        }
    }
    // A reader that jumps while a read-ahead is on its way, back and forth.
    for seq in (0..n).rev().step_by(7).chain([5, 2990, 1500, 1501, 1502]) {
        assert_eq!(log.read(seq).unwrap(), lines[seq as usize], "{seq}");
    }
    for seq in 2000..n {
        assert_eq!(log.read(seq).unwrap(), lines[seq as usize], "{seq}");
    }
    assert!(log.read(n).is_err());
}
