//! One session's rows in the database, for the log handle every SQL backend
//! shares ([`cairn_sql::SqlLog`]): range reads, and the append transaction —
//! the fenced update of the session's row, one `INSERT` per line, commit —
//! which is durable when it returns (`synchronous=FULL`).

use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cairn_sql::summary::{self, count};
use cairn_sql::{Batch, Db, Fence, SqlLog};
use rusqlite::{Connection, TransactionBehavior, params};

use crate::error::io;
use crate::lease;
use crate::schema::{SEQ_LIMIT, key, keys};

/// An open session of an SQLite database.
pub(crate) type SqliteLog = SqlLog<SqliteRows>;

/// The lease's heartbeat column is written by an append at most this often
/// (it only tells people when the holder last wrote; no rule reads it).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);

/// One session's rows, through the connection of its open handle.
#[derive(Debug)]
pub(crate) struct SqliteRows {
    sid: i64,
    conn: Mutex<Connection>,
    /// When this handle last wrote the lease's heartbeat.
    beat: Mutex<Option<Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SqliteRows {
    pub(crate) fn new(sid: i64, conn: Connection) -> SqliteRows {
        SqliteRows {
            sid,
            conn: Mutex::new(conn),
            // The lease was just acquired (or this is a reader).
            beat: Mutex::new(Some(Instant::now())),
        }
    }

    /// The append transaction. Nothing of it is visible unless it commits.
    fn transact(&self, b: Batch<'_>) -> rusqlite::Result<Fence> {
        let (token, summary) = (b.token, b.summary);
        let mut conn = lock(&self.conn);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The fence: the lease row still carries our token, and the session
        // holds the records this handle knows of. `updated` is the last
        // record's time, or the creation time when later (a fork's copied
        // records keep their times), as in the core's `Session::updated`;
        // both are RFC 3339 in one format, so they compare as text.
        let fenced = tx
            .prepare_cached(
                "UPDATE sessions SET updated = max(?2, created), title = ?3, first_message = ?4,
                     phase = ?5, op_state = ?6, entries = ?7, records = ?8, bytes = ?9
                 WHERE sid = ?1 AND records = ?10
                   AND (SELECT token FROM leases WHERE session = ?1) = ?11",
            )?
            .execute(params![
                self.sid,
                summary.fold.updated,
                summary.fold.title,
                summary.fold.first_message,
                summary::phase_json(summary.fold.op.phase()),
                summary::op_state_json(&summary.fold.op),
                count(summary.fold.entries),
                count(summary.fold.records),
                count(summary.bytes),
                count(b.before),
                token,
            ])?;
        if fenced != 1 {
            let why = match lease::current_token(&tx, self.sid)? {
                Some(t) if t != token => {
                    format!("was taken over by another writer (token {t})")
                }
                Some(_) => "is still ours, but the session holds other records than this \
                            handle expected"
                    .to_owned(),
                None => "was broken".to_owned(),
            };
            return Ok(Fence::Refused(why));
        }
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO records (key, session, seq, kind, id, parent, crc, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for r in b.rows {
                if r.seq >= SEQ_LIMIT {
                    return Err(rusqlite::Error::ToSqlConversionFailure(
                        format!(
                            "record {} is past the {SEQ_LIMIT} records a session of \
                             cairn-sqlite can hold",
                            r.seq
                        )
                        .into(),
                    ));
                }
                insert.execute(params![
                    key(self.sid, r.seq),
                    self.sid,
                    count(r.seq),
                    r.kind,
                    r.id,
                    r.parent,
                    r.crc,
                    r.payload
                ])?;
            }
        }
        let mut beat = lock(&self.beat);
        let due = beat.is_none_or(|t| t.elapsed() >= HEARTBEAT_EVERY);
        if due {
            tx.prepare_cached("UPDATE leases SET heartbeat = ?2 WHERE session = ?1")?
                .execute(params![self.sid, cairn::now_rfc3339()])?;
        }
        tx.commit()?;
        if due {
            *beat = Some(Instant::now());
        }
        Ok(Fence::Passed)
    }
}

impl Db for SqliteRows {
    fn fetch(&self, from: u64, to: u64, max_bytes: u64) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let conn = lock(&self.conn);
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, payload FROM records WHERE key BETWEEN ?1 AND ?2 ORDER BY key",
            )
            .map_err(io)?;
        let (lo, hi) = keys(self.sid, from, to);
        let mut rows = stmt.query(params![lo, hi]).map_err(io)?;
        let (mut out, mut bytes) = (Vec::new(), 0u64);
        while bytes < max_bytes
            && let Some(row) = rows.next().map_err(io)?
        {
            let seq = summary::uncount(row.get(0).map_err(io)?);
            let line: Vec<u8> = row.get(1).map_err(io)?;
            bytes += line.len() as u64;
            out.push((seq, line));
        }
        Ok(out)
    }

    fn append(&self, batch: Batch<'_>) -> io::Result<Fence> {
        self.transact(batch).map_err(io)
    }

    fn release(&self, token: i64) {
        let _ = lease::release(&lock(&self.conn), self.sid, token);
    }

    fn save_index(&self, bytes: &[u8]) {
        // Best effort: it is only a cache.
        let _ = lock(&self.conn).execute(
            "INSERT INTO indexes (session, bytes) VALUES (?1, ?2)
             ON CONFLICT (session) DO UPDATE SET bytes = excluded.bytes",
            params![self.sid, bytes],
        );
    }
}
