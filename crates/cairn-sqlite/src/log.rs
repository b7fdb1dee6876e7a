//! One session's rows in the database, for the log handle every SQL backend
//! shares ([`cairn_sql::SqlLog`]): range reads, and the append transaction —
//! the fence (one read of the session's id, the lease's token and the
//! session's last key), the session's row only when a field kept there
//! alone changes, one `INSERT` per line (the last with the listing
//! counters), commit — which is durable when it returns
//! (`synchronous=FULL`).

use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cairn::LastOperation;
use cairn_sql::summary::{self, Summary, count};
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
    /// The session's id: `sid` is reused once a session is removed, so
    /// every write of this handle checks that `sid` is still this session.
    id: String,
    conn: Mutex<Connection>,
    /// When this handle last wrote the lease's heartbeat.
    beat: Mutex<Option<Instant>>,
    /// The `sessions` row's own fields as stored (`None`: not known).
    listed: Mutex<Option<Listed>>,
}

/// The fields of a session's listing summary that only its `sessions` row
/// keeps (the counters go with its last record): an append rewrites the row
/// when one of them changes.
#[derive(Debug, PartialEq, Eq)]
struct Listed {
    title: Option<String>,
    first_message: Option<String>,
    op: LastOperation,
}

impl Listed {
    fn of(summary: &Summary) -> Listed {
        Listed {
            title: summary.fold.title.clone(),
            first_message: summary.fold.first_message.clone(),
            op: summary.fold.op.clone(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SqliteRows {
    /// The rows of session `id` (key `sid`); `stored` is the summary its
    /// `sessions` row holds now, as a writer read or created it (`None`
    /// for a reader).
    pub(crate) fn new(
        sid: i64,
        id: &str,
        conn: Connection,
        stored: Option<&Summary>,
    ) -> SqliteRows {
        SqliteRows {
            sid,
            id: id.to_owned(),
            conn: Mutex::new(conn),
            // The lease was just acquired (or this is a reader).
            beat: Mutex::new(Some(Instant::now())),
            listed: Mutex::new(stored.map(Listed::of)),
        }
    }

    /// The append transaction. Nothing of it is visible unless it commits.
    ///
    /// It writes the rows, the last one carrying the session's listing
    /// counters after the append, and the session's `sessions` row only
    /// when a field kept there alone (title, first message, phase,
    /// operation state) changes.
    fn transact(&self, b: Batch<'_>) -> rusqlite::Result<Fence> {
        let (token, summary) = (b.token, b.summary);
        let mut conn = lock(&self.conn);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The fence: `sid` is still this session (a removed session's key
        // is given to the next one created, whose first token is 1 again),
        // the lease row still carries our token, and the session's last
        // record is the one this handle knows of. The transaction holds the
        // write lock from its start (`IMMEDIATE`), so nothing can change
        // any of them between this read and the commit.
        let (lo, hi) = keys(self.sid, 0, SEQ_LIMIT);
        let (id, held, last): (Option<String>, Option<i64>, Option<i64>) = tx
            .prepare_cached(
                "SELECT (SELECT id FROM sessions WHERE sid = ?1),
                        (SELECT token FROM leases WHERE session = ?1),
                        (SELECT key FROM records WHERE key BETWEEN ?2 AND ?3
                         ORDER BY key DESC LIMIT 1)",
            )?
            .query_row(params![self.sid, lo, hi], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        let expected = b.before.checked_sub(1).map(|seq| key(self.sid, seq));
        let why = match held {
            _ if id.as_deref() != Some(self.id.as_str()) => Some(match id {
                Some(other) => format!(
                    "was lost: the session was removed, and its key given to session {other}"
                ),
                None => "was lost: the session was removed".to_owned(),
            }),
            None => Some("was broken".to_owned()),
            Some(t) if t != token => Some(format!("was taken over by another writer (token {t})")),
            Some(_) if last != expected => Some(
                "is still ours, but the session holds other records than this handle expected"
                    .to_owned(),
            ),
            Some(_) => None,
        };
        if let Some(why) = why {
            return Ok(Fence::Refused(why));
        }
        let mut listed = lock(&self.listed);
        let changed = listed.as_ref() != Some(&Listed::of(summary));
        if changed {
            // The counters too, as of this append: the listing reads them
            // only for a session whose last record carries none (appended
            // by a version-3 process, whose fence reads them too).
            tx.prepare_cached(
                "UPDATE sessions SET updated = max(?2, created), title = ?3, first_message = ?4,
                     phase = ?5, op_state = ?6, entries = ?7, records = ?8, bytes = ?9
                 WHERE sid = ?1",
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
            ])?;
        }
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO records
                     (key, session, seq, kind, id, parent, crc, updated, entries, bytes, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?;
            let n = b.rows.len();
            for (i, r) in b.rows.iter().enumerate() {
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
                // The counters go with the append's last record only: the
                // listing reads each session's last record.
                let last = i + 1 == n;
                insert.execute(params![
                    key(self.sid, r.seq),
                    self.sid,
                    count(r.seq),
                    r.kind,
                    r.id,
                    r.parent,
                    r.crc,
                    last.then_some(summary.fold.updated.as_str()),
                    last.then(|| count(summary.fold.entries)),
                    last.then(|| count(summary.bytes)),
                    r.payload,
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
        if changed {
            *listed = Some(Listed::of(summary));
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
        let _ = lease::release(&lock(&self.conn), self.sid, &self.id, token);
    }

    fn save_index(&self, bytes: &[u8]) {
        // Best effort: it is only a cache. Not into the rows of another
        // session given this one's key since.
        let _ = lock(&self.conn).execute(
            "INSERT INTO indexes (session, bytes)
                 SELECT ?1, ?2 WHERE (SELECT id FROM sessions WHERE sid = ?1) = ?3
             ON CONFLICT (session) DO UPDATE SET bytes = excluded.bytes",
            params![self.sid, bytes, self.id],
        );
    }
}
