//! The core's backend conformance suite (`cairn::testkit`) run against
//! Postgres, each fixture in a schema of its own, with hooks that go behind
//! the backend's back through a plain connection: an interrupted append is
//! a transaction that never commits, a failing disk is a trigger that
//! aborts every insert, damage is a flipped byte in a stored payload.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use cairn::Backend;
use cairn::SessionId;
use cairn::testkit::{Fixture, Interrupted, MemoryFixture};
use cairn_postgres::PostgresBackend;
use cairn_postgres::scratch::Scratch;

enum PgFixture {
    Pg {
        backend: Arc<PostgresBackend>,
        scratch: Scratch,
    },
    /// The run skips the Postgres tests (`CAIRN_SKIP_POSTGRES=1`), and
    /// these, ignored then, were run anyway (`--include-ignored`): the
    /// scratch wrote `skipped: <test>` to stderr, and the check runs on
    /// memory, which tests nothing of Postgres and is named so.
    Skipped(MemoryFixture),
}

impl PgFixture {
    fn new() -> PgFixture {
        match Scratch::new("conf") {
            Some(scratch) => PgFixture::Pg {
                backend: Arc::new(PostgresBackend::open(&scratch.url).unwrap()),
                scratch,
            },
            None => PgFixture::Skipped(MemoryFixture::new()),
        }
    }

    fn sid(&self, c: &mut postgres::Client, id: &SessionId) -> i64 {
        let PgFixture::Pg { scratch, .. } = self else {
            unreachable!()
        };
        c.query_one(
            &format!("SELECT sid FROM {}.sessions WHERE id = $1", scratch.schema),
            &[&id.as_str()],
        )
        .unwrap()
        .get(0)
    }
}

impl Fixture for PgFixture {
    fn name(&self) -> String {
        match self {
            PgFixture::Pg { .. } => "postgres".into(),
            PgFixture::Skipped(m) => format!("{} (postgres skipped)", m.name()),
        }
    }

    fn backend(&self) -> Arc<dyn Backend> {
        match self {
            PgFixture::Pg { backend, .. } => backend.clone(),
            PgFixture::Skipped(m) => m.backend(),
        }
    }

    fn reopen(&self) -> Arc<dyn Backend> {
        match self {
            PgFixture::Pg { scratch, .. } => Arc::new(PostgresBackend::open(&scratch.url).unwrap()),
            PgFixture::Skipped(m) => m.reopen(),
        }
    }

    fn interrupt_append(&self, id: &SessionId, line: &[u8]) -> Interrupted {
        let PgFixture::Pg { scratch, .. } = self else {
            let PgFixture::Skipped(m) = self else {
                unreachable!()
            };
            return m.interrupt_append(id, line);
        };
        let mut c = scratch.raw();
        let sid = self.sid(&mut c, id);
        let s = &scratch.schema;
        let mut tx = c.transaction().unwrap();
        let seq: i64 = tx
            .query_one(
                &format!("SELECT records FROM {s}.sessions WHERE sid = $1"),
                &[&sid],
            )
            .unwrap()
            .get(0);
        tx.execute(
            &format!(
                "INSERT INTO {s}.records (session, seq, kind, crc, payload, writer)
                 VALUES ($1, $2, 'message', 0, $3, 0)"
            ),
            &[&sid, &seq, &line],
        )
        .unwrap();
        // The process dies here: the transaction never commits.
        drop(tx);
        Interrupted::Atomic
    }

    fn fail_writes(&self, fail: bool) -> bool {
        let PgFixture::Pg { scratch, .. } = self else {
            return false;
        };
        let s = &scratch.schema;
        let sql = if fail {
            format!(
                "CREATE OR REPLACE FUNCTION {s}.test_fail() RETURNS trigger LANGUAGE plpgsql AS
                   $$ BEGIN RAISE EXCEPTION 'injected write failure'; END $$;
                 CREATE TRIGGER test_fail_writes BEFORE INSERT ON {s}.records
                   FOR EACH ROW EXECUTE FUNCTION {s}.test_fail();"
            )
        } else {
            format!("DROP TRIGGER IF EXISTS test_fail_writes ON {s}.records")
        };
        scratch.raw().batch_execute(&sql).unwrap();
        true
    }

    fn corrupt(&self, id: &SessionId, seq: u64) -> bool {
        let PgFixture::Pg { scratch, .. } = self else {
            return false;
        };
        let mut c = scratch.raw();
        let sid = self.sid(&mut c, id);
        let s = &scratch.schema;
        let seq = seq as i64;
        let mut payload: Vec<u8> = c
            .query_one(
                &format!("SELECT payload FROM {s}.records WHERE session = $1 AND seq = $2"),
                &[&sid, &seq],
            )
            .unwrap()
            .get(0);
        let mid = payload.len() / 2;
        payload[mid] ^= 0x01;
        c.execute(
            &format!("UPDATE {s}.records SET payload = $3 WHERE session = $1 AND seq = $2"),
            &[&sid, &seq, &payload],
        )
        .unwrap();
        true
    }
}

cairn::conformance_tests!(
    PgFixture::new,
    #[cfg_attr(skip_postgres, ignore = "CAIRN_SKIP_POSTGRES=1")]
);
