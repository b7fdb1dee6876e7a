//! [`SqliteBackend`]: the core's [`Backend`] over one SQLite database —
//! create, open (lease, then one ordered scan of the session's records),
//! list, stamp, remove, and the listing cache made from the `sessions`
//! table and each session's last record. The SQL-only lookups are in
//! `queries.rs`.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use cairn::OpPhase;
use cairn::{Access, Backend, Catalog, IndexStore, Log};
use cairn::{IoFailure, OpenError, SessionId, StoreError};
use cairn::{Opening, Stamp, Visitor};
use cairn_sql::summary::{self, Summary, count};
use cairn_sql::{Lease, Scan, Scanned, SqlStore, Writer};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::error::{SqliteError, io, open_err, store_err};
use crate::lease;
use crate::log::{SqliteLog, SqliteRows};
use crate::schema::{self, STAMP_COLUMNS, SUMMARY_COLUMNS, SUMMARY_FROM};

/// Many sessions in one SQLite database (WAL, `synchronous=FULL`). See the
/// crate docs for the schema, durability and the writer lease.
#[derive(Debug)]
pub struct SqliteBackend {
    path: PathBuf,
    /// For listing, stamps, leases and removal; each open session has its own.
    conn: Mutex<Connection>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SqliteBackend {
    /// Opens (creating if needed) the database at `path`: checks it is a
    /// cairn database of a schema this build knows, turns on WAL mode and
    /// applies pending migrations.
    ///
    /// # Errors
    ///
    /// [`SqliteError::NewerSchema`] for a database written by a newer
    /// cairn-sqlite, [`SqliteError::NotCairn`] for another application's
    /// database, [`SqliteError::NoWal`], or SQLite errors.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use std::sync::Arc;
    /// use cairn::{EntryBody, Message, NewSession, Role, Store};
    ///
    /// let backend = cairn_sqlite::SqliteBackend::open(dir.path().join("cairn.db"))?;
    /// let store = Store::with_backend(Arc::new(backend));
    /// let s = store.create(NewSession::default())?;
    /// s.append(EntryBody::Message(Message::text(Role::User, "hello")))?;
    /// assert_eq!(store.list()?[0].records, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(path: impl Into<PathBuf>) -> Result<SqliteBackend, SqliteError> {
        let path = path.into();
        let mut conn = schema::connect(&path)?;
        schema::prepare(&mut conn, &path)?;
        Ok(SqliteBackend {
            path,
            conn: Mutex::new(conn),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        lock(&self.conn)
    }

    fn new_conn(&self, location: &str) -> Result<Connection, OpenError> {
        schema::connect(&self.path).map_err(|e| {
            OpenError::Io(IoFailure::new(
                "connect to",
                location.to_owned(),
                std::io::Error::other(e),
            ))
        })
    }

    pub(crate) fn sid(conn: &Connection, id: &SessionId) -> rusqlite::Result<Option<i64>> {
        conn.prepare_cached("SELECT sid FROM sessions WHERE id = ?1")?
            .query_row([id.as_str()], |r| r.get(0))
            .optional()
    }

    /// The row id of a session that must exist ([`OpenError::NotFound`] if not).
    fn existing_sid(
        &self,
        conn: &Connection,
        id: &SessionId,
        err: impl Fn(rusqlite::Error) -> OpenError,
    ) -> Result<i64, OpenError> {
        Self::sid(conn, id)
            .map_err(err)?
            .ok_or_else(|| OpenError::NotFound {
                session: id.to_string(),
                location: self.describe(),
            })
    }

    pub(crate) fn no_such(&self, id: &SessionId) -> StoreError {
        StoreError::NoSuchSession {
            query: id.to_string(),
            store: self.describe(),
        }
    }

    /// Reads the summary a writer continues from: the `sessions` row's
    /// fields, the counters of the session's last record.
    pub(crate) fn summary_of(conn: &Connection, sid: i64) -> rusqlite::Result<Summary> {
        conn.prepare_cached(&format!(
            "SELECT {SUMMARY_COLUMNS} FROM {SUMMARY_FROM} WHERE s.sid = ?1"
        ))?
        .query_row([sid], |r| summary_at(r, 0))
    }

    /// In a write transaction of the caller's: the key of session `id`
    /// (which must exist) and its lease, if one is recorded.
    pub(crate) fn leased(
        &self,
        tx: &Connection,
        id: &SessionId,
        err: impl Fn(rusqlite::Error) -> StoreError,
    ) -> Result<(i64, Option<Lease>), StoreError> {
        let sid = Self::sid(tx, id)
            .map_err(&err)?
            .ok_or_else(|| self.no_such(id))?;
        Ok((sid, lease::get(tx, sid).map_err(&err)?))
    }
}

/// The summary columns `updated, title, first_message, op_state, entries,
/// records, bytes` of a row, from column `at` on.
pub(crate) fn summary_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Summary> {
    Ok(Summary::from_columns(
        r.get(at)?,
        r.get(at + 1)?,
        r.get(at + 2)?,
        r.get_ref(at + 3)?.as_str()?,
        [r.get(at + 4)?, r.get(at + 5)?, r.get(at + 6)?],
    ))
}

/// The stamp columns `bytes, records` of a row, from column `at` on.
fn stamp_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Stamp> {
    Ok(summary::stamp(r.get(at)?, r.get(at + 1)?))
}

/// The bounds of every key of session `sid`'s records.
pub(crate) fn whole(sid: i64) -> [i64; 2] {
    let (lo, hi) = schema::keys(sid, 0, schema::SEQ_LIMIT);
    [lo, hi]
}

/// The open path's SQLite side (`cairn_sql::open_from`): each open has a
/// connection of its own, which its log handle keeps.
impl SqlStore for SqliteBackend {
    type Conn = Connection;

    fn connect(&self, location: &str) -> Result<Connection, OpenError> {
        self.new_conn(location)
    }

    /// Takes the lease in a write transaction, replacing a dead holder's.
    fn take_lease(
        &self,
        conn: &mut Connection,
        id: &SessionId,
        location: &str,
    ) -> Result<(i64, i64), OpenError> {
        let err = open_err("lock", location);
        // The lease is committed without a sync of its own: it is made
        // durable by the writer's first append (the WAL is synced in order),
        // and one lost to a power cut was held by a process the cut ended.
        // A token it handed out can come back only if no append with it
        // was ever durable.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(&err)?;
        let taken = (|| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&err)?;
            let sid = self.existing_sid(&tx, id, &err)?;
            if let Some(held) = lease::get(&tx, sid).map_err(&err)?.filter(Lease::holds) {
                return Err(held.in_use(id));
            }
            let token = lease::acquire(&tx, sid).map_err(&err)?;
            tx.commit().map_err(&err)?;
            Ok((sid, token))
        })();
        // Every append of this connection syncs its commit again.
        if let Err(e) = conn.pragma_update(None, "synchronous", "FULL") {
            if let Ok((sid, token)) = taken {
                let _ = lease::release(conn, sid, id.as_str(), token);
            }
            return Err(err(e));
        }
        taken
    }

    fn find(&self, conn: &Connection, id: &SessionId, location: &str) -> Result<i64, OpenError> {
        self.existing_sid(conn, id, open_err("read", location))
    }

    fn load_summary(&self, conn: &Connection, sid: i64) -> std::io::Result<Summary> {
        Self::summary_of(conn, sid).map_err(io)
    }

    fn row(&self, conn: &Connection, sid: i64, seq: u64) -> std::io::Result<Option<Vec<u8>>> {
        if seq >= schema::SEQ_LIMIT {
            return Ok(None);
        }
        conn.prepare_cached("SELECT payload FROM records WHERE key = ?1")
            .and_then(|mut s| {
                s.query_row([schema::key(sid, seq)], |r| r.get(0))
                    .optional()
            })
            .map_err(io)
    }

    /// The rows by key range: each payload borrowed from SQLite, not copied.
    fn scan(
        &self,
        conn: &Connection,
        sid: i64,
        scan: &mut Scan<'_>,
        visit: &mut Visitor<'_>,
    ) -> Result<(), OpenError> {
        let err = |e| scan.failed(io(e));
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, payload FROM records WHERE key BETWEEN ?1 AND ?2 ORDER BY key",
            )
            .map_err(err)?;
        let (lo, hi) = schema::keys(sid, scan.next_index(), schema::SEQ_LIMIT);
        let mut rows = stmt.query([lo, hi]).map_err(err)?;
        while let Some(row) = rows.next().map_err(|e| scan.failed(io(e)))? {
            let seq: i64 = row.get(0).map_err(|e| scan.failed(io(e)))?;
            let bytes = row
                .get_ref(1)
                .map_err(|e| scan.failed(io(e)))?
                .as_blob()
                .map_err(|e| scan.damaged(format!("its payload is not a blob: {e}")))?;
            scan.row(seq, bytes, visit)?;
        }
        Ok(())
    }

    fn release(&self, conn: &Connection, sid: i64, id: &SessionId, token: i64) {
        let _ = lease::release(conn, sid, id.as_str(), token);
    }

    fn log(
        &self,
        location: String,
        conn: Connection,
        sid: i64,
        id: &SessionId,
        scanned: Scanned,
        writer: Option<Writer>,
    ) -> Box<dyn Log> {
        let stored = writer.as_ref().map(|w| &w.summary);
        let rows = SqliteRows::new(sid, id.as_str(), conn, stored);
        Box::new(SqliteLog::new(location, rows, scanned, writer))
    }
}

impl Backend for SqliteBackend {
    fn describe(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    fn location(&self, id: &SessionId) -> String {
        format!("sqlite:{}#{id}", self.path.display())
    }

    fn create(&self, id: &SessionId, header: &[u8]) -> Result<Box<dyn Log>, OpenError> {
        let location = self.location(id);
        let (info, summary) = summary::header_of(&location, header)?;
        let mut conn = self.new_conn(&location)?;
        let err = open_err("create", &location);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        if Self::sid(&tx, id).map_err(&err)?.is_some() {
            return Err(OpenError::AlreadyExists {
                session: id.to_string(),
                location: self.describe(),
            });
        }
        let sid: i64 = tx
            .query_row(
                "INSERT INTO sessions (id, header, created, updated, title, first_message,
                     forked_from, parent, phase, op_state, entries, records, bytes, lease_epoch)
                 VALUES (?1, ?2, ?3, ?4, ?5, NULL, ?6, ?7, ?8, ?9, 0, 1, ?10, 0)
                 RETURNING sid",
                params![
                    id.as_str(),
                    info.json,
                    info.created,
                    summary.fold.updated,
                    summary.fold.title,
                    info.forked_from,
                    info.parent,
                    summary::phase_json(OpPhase::None),
                    summary::op_state_json(&summary.fold.op),
                    count(summary.bytes),
                ],
                |r| r.get(0),
            )
            .map_err(&err)?;
        if !(0..schema::SID_LIMIT).contains(&sid) {
            return Err(OpenError::Io(IoFailure::new(
                "create",
                location.clone(),
                std::io::Error::other(format!(
                    "the database holds the most sessions cairn-sqlite can key \
                     (session keys below {}); this one would be {sid}",
                    schema::SID_LIMIT
                )),
            )));
        }
        // The header is the session's last record: it carries the counters.
        tx.execute(
            "INSERT INTO records
                 (key, session, seq, kind, id, parent, crc, updated, entries, bytes, payload)
             VALUES (?1, ?2, 0, 'header', NULL, NULL, ?3, ?4, 0, ?5, ?6)",
            params![
                schema::key(sid, 0),
                sid,
                summary::crc_of(header),
                summary.fold.updated,
                count(summary.bytes),
                header
            ],
        )
        .map_err(&err)?;
        let token = lease::acquire(&tx, sid).map_err(&err)?;
        tx.commit().map_err(&err)?;
        drop(err);
        let writer = Writer { token, summary };
        Ok(self.log(
            location,
            conn,
            sid,
            id,
            Scanned::created(header),
            Some(writer),
        ))
    }

    fn open(&self, id: &SessionId, access: Access, visit: &mut Visitor<'_>) -> Opening {
        cairn_sql::open(self, id, access, visit)
    }

    fn indexes(&self) -> Option<&dyn IndexStore> {
        Some(self)
    }

    fn stored_lines(&self, id: &SessionId) -> Result<Vec<Vec<u8>>, OpenError> {
        let location = self.location(id);
        let err = open_err("read", &location);
        let conn = self.conn();
        let sid = self.existing_sid(&conn, id, &err)?;
        let mut stmt = conn
            .prepare_cached("SELECT payload FROM records WHERE key BETWEEN ?1 AND ?2 ORDER BY key")
            .map_err(&err)?;
        // Every payload as stored, text or blob: fsck judges it.
        let rows = stmt
            .query_map(whole(sid), |r| {
                Ok(r.get_ref(0)?
                    .as_bytes()
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default())
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(&err)
    }

    fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        let conn = self.conn();
        let describe = self.describe();
        let err = store_err("list", &describe);
        let mut stmt = conn
            .prepare_cached("SELECT id FROM sessions")
            .map_err(&err)?;
        let ids = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(&err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(&err)?;
        Ok(ids
            .iter()
            .filter_map(|i| SessionId::parse(i).ok())
            .collect())
    }

    fn stamp(&self, id: &SessionId) -> Result<Stamp, StoreError> {
        let conn = self.conn();
        let row: Option<Stamp> = conn
            .prepare_cached(&format!(
                "SELECT {STAMP_COLUMNS} FROM {SUMMARY_FROM} WHERE s.id = ?1"
            ))
            .and_then(|mut s| s.query_row([id.as_str()], |r| stamp_at(r, 0)).optional())
            .map_err(store_err("inspect", &self.location(id)))?;
        row.ok_or_else(|| self.no_such(id))
    }

    /// Every session's stamp in one query: the counters of each session's
    /// last record (no payload is read).
    fn stamps(&self) -> Result<Vec<(SessionId, Stamp)>, StoreError> {
        let conn = self.conn();
        let describe = self.describe();
        let err = store_err("list", &describe);
        let mut stmt = conn
            .prepare_cached(&format!("SELECT s.id, {STAMP_COLUMNS} FROM {SUMMARY_FROM}"))
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, stamp_at(r, 1)?)))
            .map_err(&err)?;
        let mut out = Vec::new();
        for row in rows {
            let (id, stamp) = row.map_err(&err)?;
            // Rows are written by cairn with valid ids; skip anything else.
            if let Ok(id) = SessionId::parse(&id) {
                out.push((id, stamp));
            }
        }
        Ok(out)
    }

    fn writer_active(&self, id: &SessionId) -> bool {
        let conn = self.conn();
        Self::sid(&conn, id)
            .ok()
            .flatten()
            .and_then(|sid| lease::get(&conn, sid).ok().flatten())
            .is_some_and(|l| l.holds())
    }

    fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let location = self.location(id);
        let err = store_err("remove", &location);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let (sid, held) = self.leased(&tx, id, &err)?;
        if let Some(held) = held.filter(Lease::holds) {
            return Err(held.in_use(id).into());
        }
        tx.execute(
            "DELETE FROM records WHERE key BETWEEN ?1 AND ?2",
            whole(sid),
        )
        .map_err(&err)?;
        for sql in [
            "DELETE FROM indexes WHERE session = ?1",
            "DELETE FROM leases WHERE session = ?1",
            "DELETE FROM sessions WHERE sid = ?1",
        ] {
            tx.execute(sql, [sid]).map_err(&err)?;
        }
        tx.commit().map_err(&err)
    }

    /// The listing cache, made on the fly from the `sessions` table and
    /// each session's last record (no payload is read): every session with the stamp [`Backend::stamp`]
    /// reports, so the core's listing trusts every entry.
    fn load_catalog(&self) -> Option<Catalog> {
        let rows = self.rows().ok()?;
        Some(summary::catalog(
            rows.into_iter().map(|(_, id, info, s)| (id, info, s)),
        ))
    }

    /// Nothing to save: the `sessions` table and the counters of each
    /// session's last record are the catalog, kept current by every append
    /// transaction.
    fn save_catalog(&self, _catalog: &Catalog) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_connection_syncs_every_commit_after_taking_its_lease() {
        let dir = tempfile::tempdir().unwrap();
        let backend = std::sync::Arc::new(SqliteBackend::open(dir.path().join("x.db")).unwrap());
        let store = cairn::Store::with_backend(backend.clone());
        let id = store
            .create(cairn::NewSession::default())
            .unwrap()
            .id()
            .clone();
        let mut conn = backend.new_conn("test").unwrap();
        SqlStore::take_lease(&*backend, &mut conn, &id, "test").unwrap();
        let sync: i64 = conn
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2, "FULL");
    }
}
