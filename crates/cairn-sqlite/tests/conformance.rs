//! The core's backend conformance suite (`cairn::testkit`) run against
//! SQLite, with hooks that go behind the backend's back through a plain
//! SQLite connection: an interrupted append is a transaction that never
//! commits, a failing disk is a trigger that aborts every insert, damage is
//! a flipped byte in a stored payload.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use cairn::Backend;
use cairn::SessionId;
use cairn::testkit::{Fixture, Interrupted};
use cairn_sqlite::SqliteBackend;
use rusqlite::{Connection, params};

struct SqliteFixture {
    backend: Arc<SqliteBackend>,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SqliteFixture {
    fn new() -> SqliteFixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.db");
        let backend = Arc::new(SqliteBackend::open(&path).unwrap());
        SqliteFixture {
            backend,
            path,
            _dir: dir,
        }
    }

    /// A plain connection, as another program would have.
    fn raw(&self) -> Connection {
        let c = Connection::open(&self.path).unwrap();
        c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
        c
    }

    fn sid(&self, c: &Connection, id: &SessionId) -> i64 {
        c.query_row(
            "SELECT sid FROM sessions WHERE id = ?1",
            [id.as_str()],
            |r| r.get(0),
        )
        .unwrap()
    }
}

impl Fixture for SqliteFixture {
    fn name(&self) -> String {
        "sqlite".into()
    }

    fn backend(&self) -> Arc<dyn Backend> {
        self.backend.clone()
    }

    fn reopen(&self) -> Arc<dyn Backend> {
        Arc::new(SqliteBackend::open(&self.path).unwrap())
    }

    fn interrupt_append(&self, id: &SessionId, line: &[u8]) -> Interrupted {
        let mut c = self.raw();
        let sid = self.sid(&c, id);
        let seq: i64 = c
            .query_row(
                "SELECT count(*) FROM records WHERE key BETWEEN ?1 << 32 AND (?1 << 32) | 4294967295",
                [sid],
                |r| r.get(0),
            )
            .unwrap();
        let tx = c.transaction().unwrap();
        tx.execute(
            "INSERT INTO records (key, session, seq, kind, crc, payload)
             VALUES ((?1 << 32) | ?2, ?1, ?2, 'message', 0, ?3)",
            params![sid, seq, line],
        )
        .unwrap();
        // The process dies here: the transaction never commits.
        drop(tx);
        Interrupted::Atomic
    }

    fn fail_writes(&self, fail: bool) -> bool {
        let sql = if fail {
            "CREATE TRIGGER IF NOT EXISTS test_fail_writes BEFORE INSERT ON records
             BEGIN SELECT RAISE(ABORT, 'injected write failure'); END"
        } else {
            "DROP TRIGGER IF EXISTS test_fail_writes"
        };
        self.raw().execute_batch(sql).unwrap();
        true
    }

    fn corrupt(&self, id: &SessionId, seq: u64) -> bool {
        let c = self.raw();
        let sid = self.sid(&c, id);
        let mut payload: Vec<u8> = c
            .query_row(
                "SELECT payload FROM records WHERE session = ?1 AND seq = ?2",
                params![sid, seq as i64],
                |r| r.get(0),
            )
            .unwrap();
        let mid = payload.len() / 2;
        payload[mid] ^= 0x01;
        c.execute(
            "UPDATE records SET payload = ?3 WHERE session = ?1 AND seq = ?2",
            params![sid, seq as i64, payload],
        )
        .unwrap();
        true
    }
}

cairn::conformance_tests!(SqliteFixture::new);
