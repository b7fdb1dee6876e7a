//! The schema, its embedded numbered migrations, and the settings of every
//! connection.
//!
//! The schema version is `PRAGMA user_version`: migration *n* (1-based)
//! takes a database from version *n − 1* to *n*, inside one `BEGIN
//! IMMEDIATE` transaction that re-reads the version first, so concurrent
//! openers migrate once. A database whose version is greater than
//! [`SCHEMA_VERSION`] was written by a newer cairn-sqlite and is refused
//! unchanged. `PRAGMA application_id` marks the file as cairn's, so an
//! unrelated SQLite database is refused too.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::error::SqliteError;

/// `PRAGMA application_id` of cairn databases: "crn1" in ASCII.
pub const APPLICATION_ID: i64 = 0x6372_6e31;

/// How long a connection waits for another connection's write transaction
/// before failing with "database is locked". Transactions are short (one
/// append), so waiting this long means something is wrong.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The first columns of `records` since migration 3: the key (see [`key`])
/// and the columns taken from the line.
macro_rules! record_key_columns {
    () => {
        "        key     INTEGER PRIMARY KEY,
        session INTEGER NOT NULL,
        seq     INTEGER NOT NULL,
        kind    TEXT    NOT NULL,
        id      TEXT,
        parent  TEXT,
        crc     INTEGER NOT NULL,
"
    };
}

/// The rule of a `records` key since migration 3 ([`key`]: `session << 32 |
/// seq`, within [`SID_LIMIT`] and [`SEQ_LIMIT`]), checked on every row.
macro_rules! record_key_check {
    () => {
        "        CHECK (session BETWEEN 0 AND 2147483647 AND seq BETWEEN 0 AND 4294967295
               AND key = (session << 32) | seq)
"
    };
}

/// Migration *n* (1-based) brings a database from version *n − 1* to *n*.
/// Never edit a released migration (nor the pieces above that two of them
/// share): append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: sessions, records, leases.
    "
    CREATE TABLE sessions (
        sid           INTEGER PRIMARY KEY,
        id            TEXT    NOT NULL UNIQUE,
        header        TEXT    NOT NULL,
        created       TEXT    NOT NULL,
        updated       TEXT    NOT NULL,
        title         TEXT,
        first_message TEXT,
        forked_from   TEXT,
        parent        TEXT,
        phase         TEXT    NOT NULL,
        op_state      TEXT    NOT NULL,
        entries       INTEGER NOT NULL,
        records       INTEGER NOT NULL,
        bytes         INTEGER NOT NULL,
        lease_epoch   INTEGER NOT NULL
    );
    CREATE INDEX sessions_by_updated ON sessions (updated DESC, id DESC);
    CREATE INDEX sessions_by_fork ON sessions (forked_from) WHERE forked_from IS NOT NULL;
    CREATE INDEX sessions_by_parent ON sessions (parent) WHERE parent IS NOT NULL;

    CREATE TABLE records (
        session INTEGER NOT NULL REFERENCES sessions (sid),
        seq     INTEGER NOT NULL,
        kind    TEXT    NOT NULL,
        id      TEXT,
        parent  TEXT,
        crc     INTEGER NOT NULL,
        payload BLOB    NOT NULL,
        PRIMARY KEY (session, seq)
    );
    CREATE UNIQUE INDEX records_by_id ON records (session, id) WHERE id IS NOT NULL;
    CREATE INDEX records_by_parent ON records (session, parent) WHERE id IS NOT NULL;

    CREATE TABLE leases (
        session    INTEGER PRIMARY KEY REFERENCES sessions (sid),
        token      INTEGER NOT NULL,
        pid        INTEGER NOT NULL,
        machine    TEXT    NOT NULL,
        boot       TEXT    NOT NULL,
        pid_ns     TEXT    NOT NULL,
        started    INTEGER NOT NULL,
        acquired   TEXT    NOT NULL,
        heartbeat  TEXT    NOT NULL
    );
    ",
    // 2: fewer pages written per append. No index on `sessions.updated`,
    // which every append changes (listings sort in memory); none on
    // `records.parent` (`children` reads the session's rows by its key).
    // The core's persisted index of each session (a cache of its rows).
    "
    DROP INDEX sessions_by_updated;
    DROP INDEX records_by_parent;
    CREATE TABLE indexes (
        session INTEGER PRIMARY KEY REFERENCES sessions (sid),
        bytes   BLOB    NOT NULL
    );
    ",
    // 3: one page fewer per append. `records` is keyed by one integer,
    // its rowid (`session << 32 | seq`: see `key`), instead of a
    // `(session, seq)` primary key kept in an index of its own. Every row
    // is copied as it was, then the old table (and its indexes) dropped.
    // No foreign key to `sessions`: without an index led by `session`,
    // its check would read every record of the database at each removal
    // of a session (`remove` deletes the session's records by key range in
    // the same transaction; an append's fence needs the session's row).
    concat!(
        "
    CREATE TABLE records_v3 (
",
        record_key_columns!(),
        "        payload BLOB    NOT NULL,
",
        record_key_check!(),
        "    );
    INSERT INTO records_v3 (key, session, seq, kind, id, parent, crc, payload)
        SELECT (session << 32) | seq, session, seq, kind, id, parent, crc, payload
        FROM records ORDER BY session, seq;
    DROP TABLE records;
    ALTER TABLE records_v3 RENAME TO records;
    CREATE UNIQUE INDEX records_by_id ON records (session, id) WHERE id IS NOT NULL;
    "
    ),
    // 4: one page fewer per append. The last record of each append carries
    // the session's listing counters after it (`updated`: the last record's
    // time; `entries`; `bytes`; the record count is its `seq` + 1), so an
    // append leaves the `sessions` row alone unless a field kept there
    // alone (title, first message, phase, operation state) changes. The
    // counters come *before* `payload`: SQLite reads a row's columns in
    // order, and a payload that spills into overflow pages would otherwise
    // be walked to its end by every listing and stamp. So the table is
    // rebuilt (every row copied as it was), and each session's last record
    // takes the counters its `sessions` row held (which every append of
    // versions 1-3 kept current). A session whose last record carries none
    // (its `sessions` row counts other records, or a version-3 process
    // appended it) is summarized by its `sessions` row: see `SUMMARY_FROM`.
    concat!(
        "
    CREATE TABLE records_v4 (
",
        record_key_columns!(),
        "        updated TEXT,
        entries INTEGER,
        bytes   INTEGER,
        payload BLOB    NOT NULL,
",
        record_key_check!(),
        "    );
    INSERT INTO records_v4
        (key, session, seq, kind, id, parent, crc, updated, entries, bytes, payload)
        SELECT r.key, r.session, r.seq, r.kind, r.id, r.parent, r.crc,
               s.updated, s.entries, s.bytes, r.payload
        FROM records r LEFT JOIN sessions s ON s.sid = r.session AND s.records = r.seq + 1
        ORDER BY r.key;
    DROP TABLE records;
    ALTER TABLE records_v4 RENAME TO records;
    CREATE UNIQUE INDEX records_by_id ON records (session, id) WHERE id IS NOT NULL;
    "
    ),
];

/// The listing summary of each session `s`: its `sessions` row joined with
/// its last record `r` (one seek by key; no column after `r.bytes` is read,
/// so a payload in overflow pages is not). Its columns are
/// [`SUMMARY_COLUMNS`].
pub(crate) const SUMMARY_FROM: &str = "sessions s LEFT JOIN records r ON r.key =
    (SELECT key FROM records WHERE key BETWEEN s.sid << 32 AND (s.sid << 32) | 4294967295
     ORDER BY key DESC LIMIT 1)";

/// The summary columns `updated, title, first_message, op_state, entries,
/// records, bytes` (as the backend's `summary_at` reads them) over
/// [`SUMMARY_FROM`]. The counters are the last record's when it carries
/// them, else the `sessions` row's (see migration 4); `updated` is never
/// earlier than the session's creation (a fork's copied records keep their
/// times), as in the core's `Session::updated`: both are RFC 3339 in one
/// format, so they compare as text.
pub(crate) const SUMMARY_COLUMNS: &str = "
    CASE WHEN r.entries IS NULL THEN s.updated ELSE max(r.updated, s.created) END,
    s.title, s.first_message, s.op_state,
    CASE WHEN r.entries IS NULL THEN s.entries ELSE r.entries END,
    CASE WHEN r.entries IS NULL THEN s.records ELSE r.seq + 1 END,
    CASE WHEN r.entries IS NULL THEN s.bytes ELSE r.bytes END";

/// The stamp columns `bytes, records` over [`SUMMARY_FROM`], as in
/// [`SUMMARY_COLUMNS`].
pub(crate) const STAMP_COLUMNS: &str = "
    CASE WHEN r.entries IS NULL THEN s.bytes ELSE r.bytes END,
    CASE WHEN r.entries IS NULL THEN s.records ELSE r.seq + 1 END";

/// The bits of a `records` key that hold the `seq`: a session holds at
/// most 2^32 records, and a database at most 2^31 sessions (`sid`s from 0
/// to 2^31 − 1), so that every key is a non-negative `i64`.
const SEQ_BITS: u32 = 32;

/// The first `seq` a session cannot hold.
pub(crate) const SEQ_LIMIT: u64 = 1 << SEQ_BITS;

/// The first `sid` a database cannot hold.
pub(crate) const SID_LIMIT: i64 = 1 << 31;

/// The key of record `seq` of session `sid` in `records`: its rowid, which
/// orders a session's records by `seq` and keeps them together. `seq` must
/// be below [`SEQ_LIMIT`] and `sid` below [`SID_LIMIT`] (the table's
/// `CHECK` refuses any other row).
pub(crate) fn key(sid: i64, seq: u64) -> i64 {
    debug_assert!((0..SID_LIMIT).contains(&sid) && seq < SEQ_LIMIT);
    (sid << SEQ_BITS) | seq as i64
}

/// The keys of session `sid`'s records `from..to`, as an inclusive range
/// for `key BETWEEN ?lo AND ?hi` (empty, `lo > hi`, when `from..to` is).
pub(crate) fn keys(sid: i64, from: u64, to: u64) -> (i64, i64) {
    let to = to.min(SEQ_LIMIT);
    if from >= to {
        return (1, 0);
    }
    (key(sid, from), key(sid, to - 1))
}

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

fn sqlite(action: &'static str, path: &Path) -> impl Fn(rusqlite::Error) -> SqliteError {
    move |source| SqliteError::Sqlite {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Opens a connection with cairn's settings: `synchronous=FULL` (in WAL
/// mode, `NORMAL` syncs the WAL only at checkpoints, so a committed
/// transaction can be lost on power loss; `FULL` syncs it at every commit),
/// `fullfsync` (a real flush of the drive's cache on macOS), foreign keys,
/// and the busy timeout.
pub(crate) fn connect(path: &Path) -> Result<Connection, SqliteError> {
    create_private(path).map_err(|source| SqliteError::Io {
        action: "create",
        path: path.to_owned(),
        source,
    })?;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite("open", path))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite("configure", path))?;
    conn.execute_batch(
        "PRAGMA synchronous = FULL;
         PRAGMA fullfsync = ON;
         PRAGMA checkpoint_fullfsync = ON;
         PRAGMA foreign_keys = ON;",
    )
    .map_err(sqlite("configure", path))?;
    Ok(conn)
}

/// Creates a missing database file with mode 0600 (and its directory with
/// 0700), as the file backend does for sessions: SQLite gives the `-wal`
/// and `-shm` files the database file's mode, so sessions stay private.
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if path.exists() {
        return Ok(());
    }
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

fn versions(conn: &Connection, path: &Path) -> Result<(i64, i64), SqliteError> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sqlite("read the schema version of", path))?;
    let app: i64 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(sqlite("read the application id of", path))?;
    Ok((version, app))
}

fn refuse_foreign(
    conn: &Connection,
    path: &Path,
    version: i64,
    app: i64,
) -> Result<(), SqliteError> {
    if version > SCHEMA_VERSION {
        return Err(SqliteError::NewerSchema {
            path: path.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if app != 0 && app != APPLICATION_ID {
        return Err(SqliteError::NotCairn {
            path: path.to_owned(),
            why: format!("its application id is {app:#x}"),
        });
    }
    if app == 0 {
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .map_err(sqlite("inspect", path))?;
        if tables > 0 {
            return Err(SqliteError::NotCairn {
                path: path.to_owned(),
                why: format!("it already holds {tables} tables or indexes of another application"),
            });
        }
    }
    Ok(())
}

/// Checks the database is cairn's (or new), turns on WAL and brings the
/// schema to [`SCHEMA_VERSION`].
pub(crate) fn prepare(conn: &mut Connection, path: &Path) -> Result<(), SqliteError> {
    let (version, app) = versions(conn, path)?;
    refuse_foreign(conn, path, version, app)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(sqlite("set the journal mode of", path))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(SqliteError::NoWal {
            path: path.to_owned(),
            mode,
        });
    }
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite("migrate", path))?;
    // Another process may have migrated while we waited for the lock.
    let (version, app) = versions(&tx, path)?;
    refuse_foreign(&tx, path, version, app)?;
    let from = usize::try_from(version).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from) {
        tx.execute_batch(sql).map_err(sqlite("migrate", path))?;
        tx.pragma_update(None, "user_version", i as i64 + 1)
            .map_err(sqlite("migrate", path))?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(sqlite("migrate", path))?;
    tx.commit().map_err(sqlite("migrate", path))?;
    if from > 0 && from < 4 {
        // Migrations 3 and 4 copy every record through the WAL: give the space
        // back now rather than keep a WAL the size of the database. Best
        // effort: a reader holding the WAL only delays it to a later
        // checkpoint, and the migration is committed either way.
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn every_connection_syncs_fully_and_a_new_database_is_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let mut conn = connect(&path).unwrap();
        prepare(&mut conn, &path).unwrap();
        for c in [&conn, &connect(&path).unwrap()] {
            // 2 = FULL: the WAL is synced at every commit.
            let sync: i64 = c
                .pragma_query_value(None, "synchronous", |r| r.get(0))
                .unwrap();
            assert_eq!(sync, 2);
            let mode: String = c
                .pragma_query_value(None, "journal_mode", |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "wal");
            let fk: i64 = c
                .pragma_query_value(None, "foreign_keys", |r| r.get(0))
                .unwrap();
            assert_eq!(fk, 1);
        }
    }

    #[test]
    fn migrations_run_once_and_record_their_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        for _ in 0..2 {
            let mut conn = connect(&path).unwrap();
            prepare(&mut conn, &path).unwrap();
            assert_eq!(
                versions(&conn, &path).unwrap(),
                (SCHEMA_VERSION, APPLICATION_ID)
            );
        }
    }

    #[test]
    fn a_version_1_database_migrates_to_the_latest_version_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        {
            let conn = connect(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.execute_batch(
                "INSERT INTO sessions VALUES (1, 'S', '{}', 't', 't', NULL, NULL, NULL, NULL,
                     '\"none\"', '{}', 0, 1, 10, 0);
                 INSERT INTO records VALUES (1, 0, 'header', NULL, NULL, 0, x'0a');",
            )
            .unwrap();
        }
        let mut conn = connect(&path).unwrap();
        prepare(&mut conn, &path).unwrap();
        assert_eq!(
            versions(&conn, &path).unwrap(),
            (SCHEMA_VERSION, APPLICATION_ID)
        );
        let dropped: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'index'
                 AND name IN ('sessions_by_updated', 'records_by_parent')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(dropped, 0);
        let rows: (i64, i64) = conn
            .query_row(
                "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM records)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(rows, (1, 1));
        let header: (i64, i64, i64) = conn
            .query_row("SELECT key, session, seq FROM records", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!(header, (1 << 32, 1, 0));
    }

    #[test]
    fn removing_a_session_reads_none_of_the_other_sessions_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let mut conn = connect(&path).unwrap();
        prepare(&mut conn, &path).unwrap();
        for sid in 1..=3_i64 {
            conn.execute(
                "INSERT INTO sessions VALUES (?1, ?2, '{}', 't', 't', NULL, NULL, NULL, NULL,
                     '\"none\"', '{}', 0, 200, 2000, 0)",
                rusqlite::params![sid, format!("S{sid}")],
            )
            .unwrap();
            for seq in 0..200_u64 {
                conn.execute(
                    "INSERT INTO records (key, session, seq, kind, crc, payload)
                     VALUES (?1, ?2, ?3, 'entry', 0, x'0a')",
                    rusqlite::params![key(sid, seq), sid, seq],
                )
                .unwrap();
            }
        }
        // What `remove` runs once the session's records are gone.
        conn.execute(
            "DELETE FROM records WHERE key BETWEEN ?1 AND ?2",
            [key(2, 0), key(2, SEQ_LIMIT - 1)],
        )
        .unwrap();
        let mut delete = conn.prepare("DELETE FROM sessions WHERE sid = ?1").unwrap();
        delete.execute([2_i64]).unwrap();
        // A foreign key from `records` without an index led by `session`
        // would step through all 400 remaining records here.
        assert_eq!(
            delete.get_status(rusqlite::StatementStatus::FullscanStep),
            0
        );
        drop(delete);
        let left: i64 = conn
            .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 400);
    }

    /// Every row of `table`, every column, in the order of `order`.
    fn dump(conn: &Connection, table: &str, order: &str) -> Vec<Vec<rusqlite::types::Value>> {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY {order}"))
            .unwrap();
        let n = stmt.column_count();
        stmt.query_map([], |r| (0..n).map(|i| r.get(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// The columns a version-2 `records` row has, and the type of its payload.
    const V2_RECORDS: &str = "(SELECT session, seq, kind, id, parent, crc, payload,
        typeof(payload) FROM records)";

    fn schema_of(conn: &Connection) -> Vec<Vec<rusqlite::types::Value>> {
        dump(
            conn,
            "(SELECT type, name, tbl_name, sql FROM sqlite_schema)",
            "name",
        )
    }

    /// A database of schema `version` (1, 2 or 3) holding sessions as that
    /// version wrote them migrates to the latest with every row unchanged,
    /// and every session reads, lists and takes appends as before.
    fn an_old_database_migrates_with_every_row_byte_for_byte_and_reads_the_same(version: usize) {
        use cairn::testkit::build::user;
        use cairn::{Access, Backend, NewSession, Store};
        use cairn_sql::summary::count;
        use std::sync::Arc;

        let dir = tempfile::tempdir().unwrap();
        // Sessions written by the backend: a long one (its index saved by
        // a reopen), a short one with a branch and a title, one whose last
        // line spills into overflow pages, and a removed one (a gap in the
        // session keys).
        let now = dir.path().join("now.db");
        let backend = Arc::new(crate::SqliteBackend::open(&now).unwrap());
        let store = Store::with_backend(backend.clone());
        let s = store.create(NewSession::default()).unwrap();
        for i in 0..1100 {
            s.append(user(&format!("m{i}"))).unwrap();
        }
        let long = s.id().clone();
        drop(s);
        drop(store.open(&long, Access::Write).unwrap());
        let gone = store.create(NewSession::default()).unwrap().id().clone();
        let s = store.create(NewSession::default()).unwrap();
        let first = s.append(user("first")).unwrap().id.unwrap();
        s.append(user("second")).unwrap();
        s.append_entry(cairn::NewEntry {
            id: None,
            parent: cairn::Parent::Entry(first.clone()),
            body: user("branch"),
        })
        .unwrap();
        // A title, kept in the `sessions` row alone.
        s.append(cairn::EntryBody::SessionInfo(cairn::SessionInfo {
            title: Some("short".into()),
        }))
        .unwrap();
        let short = s.id().clone();
        drop(s);
        let s = store.create(NewSession::default()).unwrap();
        s.append(user("a question")).unwrap();
        s.append(user(&"x".repeat(200_000))).unwrap();
        let large = s.id().clone();
        drop(s);
        store.remove(&gone).unwrap();
        let ids = [&long, &short, &large];

        // The same rows in a database of schema `version`, as that version
        // wrote them: the columns it had, and the listing counters in each
        // `sessions` row (which every append of versions 1-3 kept current).
        let old = dir.path().join(format!("v{version}.db"));
        {
            let conn = connect(&old).unwrap();
            for m in &MIGRATIONS[..version] {
                conn.execute_batch(m).unwrap();
            }
            conn.pragma_update(None, "user_version", version as i64)
                .unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            conn.execute("ATTACH ?1 AS now", [now.to_str().unwrap()])
                .unwrap();
            let records = if version < 3 {
                "INSERT INTO records SELECT session, seq, kind, id, parent, crc, payload
                     FROM now.records ORDER BY key;"
            } else {
                "INSERT INTO records SELECT key, session, seq, kind, id, parent, crc, payload
                     FROM now.records ORDER BY key;"
            };
            let indexes = if version < 2 {
                ""
            } else {
                "INSERT INTO indexes SELECT * FROM now.indexes;"
            };
            conn.execute_batch(&format!(
                "INSERT INTO sessions SELECT * FROM now.sessions;
                 {records}
                 {indexes}
                 INSERT INTO leases SELECT * FROM now.leases;"
            ))
            .unwrap();
            let latest = connect(&now).unwrap();
            let sids: Vec<i64> = latest
                .prepare("SELECT sid FROM sessions")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(sids.len(), 3);
            for sid in sids {
                let sum = crate::SqliteBackend::summary_of(&latest, sid).unwrap();
                conn.execute(
                    "UPDATE sessions SET updated = ?2, entries = ?3, records = ?4, bytes = ?5
                     WHERE sid = ?1",
                    rusqlite::params![
                        sid,
                        sum.fold.updated,
                        count(sum.fold.entries),
                        count(sum.fold.records),
                        count(sum.bytes)
                    ],
                )
                .unwrap();
            }
        }
        let before = connect(&old).unwrap();
        let order = "1, 2";
        let mut tables = vec![
            (V2_RECORDS, order),
            ("sessions", "sid"),
            ("leases", "session"),
        ];
        if version >= 2 {
            tables.push(("indexes", "session"));
        }
        let rows: Vec<_> = tables.iter().map(|(t, o)| dump(&before, t, o)).collect();
        assert_eq!(rows[0].len(), 1100 + 1 + 4 + 1 + 2 + 1);
        if version >= 2 {
            assert_eq!(rows[3].len(), 1, "the long session's index");
        }
        // What versions 1-3 listed: the `sessions` row's summary columns.
        let listed_before = dump(
            &before,
            "(SELECT id, updated, title, first_message, op_state, entries, records, bytes
              FROM sessions)",
            "1",
        );
        drop(before);

        let migrated = Arc::new(crate::SqliteBackend::open(&old).unwrap());
        let after = connect(&old).unwrap();
        assert_eq!(
            versions(&after, &old).unwrap(),
            (SCHEMA_VERSION, APPLICATION_ID)
        );
        for ((t, o), rows) in tables.iter().zip(&rows) {
            assert!(dump(&after, t, o) == *rows, "the rows of {t} changed");
        }
        let keys: i64 = after
            .query_row(
                "SELECT count(*) FROM records WHERE key = (session << 32) | seq",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(keys, rows[0].len() as i64);
        // Each session's last record, and no other, took the counters.
        let counted: Vec<(i64, i64)> = after
            .prepare(
                "SELECT session, seq FROM records WHERE updated IS NOT NULL
                     OR entries IS NOT NULL OR bytes IS NOT NULL ORDER BY key",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(counted, [(1, 1100), (3, 4), (4, 2)]);
        // What the migrated database lists is what the old one did.
        let listed_after = dump(
            &after,
            &format!("(SELECT s.id, {SUMMARY_COLUMNS} FROM {SUMMARY_FROM})"),
            "1",
        );
        assert_eq!(listed_after, listed_before);
        // The schema is a new database's: no (session, seq) index is left,
        // and the counters come before the payload.
        assert_eq!(schema_of(&after), schema_of(&connect(&now).unwrap()));
        let check: String = after
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");

        // Every session reads and lists the same through both databases.
        let old_store = Store::with_backend(migrated.clone());
        for id in ids {
            assert_eq!(
                migrated.stored_lines(id).unwrap(),
                backend.stored_lines(id).unwrap()
            );
            let (a, b) = (
                old_store.open(id, Access::Read).unwrap(),
                store.open(id, Access::Read).unwrap(),
            );
            assert_eq!(a.context().messages(), b.context().messages());
            assert_eq!(
                migrated.children(id, None).unwrap(),
                backend.children(id, None).unwrap()
            );
            assert_eq!(migrated.stamp(id).unwrap(), backend.stamp(id).unwrap());
        }
        assert_eq!(migrated.children(&short, Some(&first)).unwrap().len(), 2);
        assert_eq!(
            migrated.entry_seq(&short, &first).unwrap(),
            backend.entry_seq(&short, &first).unwrap()
        );
        assert_eq!(migrated.summaries().unwrap(), backend.summaries().unwrap());
        assert_eq!(old_store.list().unwrap(), store.list().unwrap());
        assert_eq!(migrated.stamps().unwrap().len(), 3);
        // And the migrated database takes appends, and lists them.
        let s = old_store.open(&short, Access::Write).unwrap();
        s.append(user("after the migration")).unwrap();
        let mut want = cairn::summary_of(&s).unwrap();
        drop(s);
        let s = old_store.open(&short, Access::Read).unwrap();
        assert_eq!(s.context().messages().len(), 3);
        let listed = migrated.summaries().unwrap();
        let got = listed.iter().find(|l| l.id == short).unwrap();
        want.status = got.status;
        assert_eq!(*got, want);
        assert_eq!(want.records, 6);
    }

    #[test]
    fn a_version_1_database_migrates_with_every_row_byte_for_byte_and_reads_the_same() {
        an_old_database_migrates_with_every_row_byte_for_byte_and_reads_the_same(1);
    }

    #[test]
    fn a_version_2_database_migrates_with_every_row_byte_for_byte_and_reads_the_same() {
        an_old_database_migrates_with_every_row_byte_for_byte_and_reads_the_same(2);
    }

    #[test]
    fn a_version_3_database_migrates_with_every_row_byte_for_byte_and_reads_the_same() {
        an_old_database_migrates_with_every_row_byte_for_byte_and_reads_the_same(3);
    }

    #[test]
    fn a_new_database_and_its_wal_are_private_to_their_owner() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new").join("x.db");
        let mut conn = connect(&path).unwrap();
        prepare(&mut conn, &path).unwrap();
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&path.with_extension("db-wal")), 0o600);
    }
}
