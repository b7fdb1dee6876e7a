//! One session's rows in the database, for the log handle every SQL backend
//! shares ([`cairn_sql::SqlLog`]): range reads, and the append — one call
//! of the schema's `append_one` function for a single record (migration 3)
//! or `append` for several (migration 2), so one round trip and
//! one transaction: fence and summary update of the `sessions` row, then
//! the records, inserted only if the fence passed. It is durable when it
//! returns (`synchronous_commit = on`).
//!
//! A reader that goes on reading sequentially past the open's rows (an
//! open from the persisted index reads the context's records this way) has
//! its next read-ahead window fetched on an idle pooled connection (never a
//! new one) while it decodes the last one, so the server's scan and the transfer overlap the
//! client's work (two cores: the reader's and the server's).
//!
//! A writer also runs a heartbeat thread that renews its lease every third
//! of the lease while it is idle; when a renewal finds the lease gone, the
//! handle is poisoned at once.

use std::io;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_sql::summary::{self, count, uncount};
use cairn_sql::{Batch, Db, Fence, Poisoner, READ_AHEAD_MAX, SqlLog};
use postgres::types::{ToSql, Type};

use crate::error::io;
use crate::shared::Shared;

/// An open session of a Postgres store.
pub(crate) type PgLog = SqlLog<PgRows>;

/// One session's rows, through the backend's pool.
#[derive(Debug)]
pub(crate) struct PgRows {
    sid: i64,
    shared: Arc<Shared>,
    /// Dropping it stops the heartbeat thread.
    heartbeat: Mutex<Option<Sender<()>>>,
    /// The read-ahead being fetched in the background, if any.
    ahead: Mutex<Option<Ahead>>,
}

/// A read-ahead fetched on another connection while the reader decodes the
/// last one: the rows of [`Db::fetch`] for `range` (`from`, `to`,
/// `max_bytes`), or `None` when no connection was idle.
#[derive(Debug)]
struct Ahead {
    range: (u64, u64, u64),
    rows: JoinHandle<Option<io::Result<Rows>>>,
}

/// Records read: `(seq, line)`, in `seq` order.
type Rows = Vec<(u64, Vec<u8>)>;

/// The smallest read-ahead after which the next one is fetched in the
/// background: a reader has then read this many records in a row already
/// (its misses ask for 16, 32, 64, … records), so the next window is likely
/// wanted, and a reader that stops wastes one window of at most twice this.
const PREFETCH_AFTER: u64 = 128;

/// Whether `rows` answer all of read-ahead `range`: as many records as it
/// asked for, or enough to reach its byte bound. Rows that do not may have
/// stopped at the end of the session *as it was then*.
fn whole((from, to, max_bytes): (u64, u64, u64), rows: &[(u64, Vec<u8>)]) -> bool {
    let bytes: u64 = rows.iter().map(|(_, l)| l.len() as u64).sum();
    rows.len() as u64 >= to.saturating_sub(from) || bytes >= max_bytes
}

/// Records `from ≤ seq < to` of session `sid`, stopping after the one that
/// reaches `max_bytes` (at least one), read on `c`.
fn query_rows(
    c: &mut postgres::Client,
    shared: &Shared,
    sid: i64,
    (from, to, max_bytes): (u64, u64, u64),
) -> Result<Rows, postgres::Error> {
    let (from, to, max) = (count(from), count(to), count(max_bytes));
    c.query_typed(
        &shared.sql.read_ahead,
        &[
            (&sid, Type::INT8),
            (&from, Type::INT8),
            (&to, Type::INT8),
            (&max, Type::INT8),
        ],
    )?
    .iter()
    .map(|r| Ok((uncount(r.try_get(0)?), r.try_get(1)?)))
    .collect()
}

/// [`query_rows`] on a pooled connection, retried once on a new one when a
/// reused one turned out dead.
fn fetch_rows(shared: &Shared, sid: i64, range: (u64, u64, u64)) -> io::Result<Rows> {
    shared
        .pool
        .run(|c| query_rows(c, shared, sid, range))
        .map_err(io)
}

/// [`query_rows`] on an idle pooled connection, for a read-ahead in the
/// background: `None` (nothing read) when no connection is idle, so that a
/// read-ahead never opens a connection of its own.
fn fetch_rows_if_idle(
    shared: &Shared,
    sid: i64,
    range: (u64, u64, u64),
) -> Option<io::Result<Rows>> {
    let mut conn = shared.pool.idle()?;
    let rows = query_rows(&mut conn, shared, sid, range);
    if let Err(e) = &rows
        && crate::pool::connection_lost(e)
    {
        conn.discard();
    }
    Some(rows.map_err(io))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The columns of the records to insert, one array each.
#[derive(Default)]
struct Columns<'a> {
    seq: Vec<i64>,
    kind: Vec<&'a str>,
    id: Vec<Option<&'a str>>,
    parent: Vec<Option<&'a str>>,
    crc: Vec<i64>,
    payload: Vec<&'a [u8]>,
}

impl PgRows {
    pub(crate) fn new(sid: i64, shared: Arc<Shared>) -> PgRows {
        PgRows {
            sid,
            shared,
            heartbeat: Mutex::new(None),
            ahead: Mutex::new(None),
        }
    }

    /// After `rows` of a read-ahead of `range`: when the reader reads on
    /// sequentially and the session may hold more, fetches on another
    /// connection what its next miss will ask for (`SqlLog`'s: the records
    /// after these, twice as many up to [`READ_AHEAD_MAX`]), so the server's
    /// scan and the rows' transfer overlap the reader's decoding of these.
    /// Records never change once written, so rows read ahead stay true.
    fn read_ahead_after(&self, range: (u64, u64, u64), rows: &[(u64, Vec<u8>)]) {
        let (from, to, max_bytes) = range;
        let asked = to.saturating_sub(from);
        let Some(&(last, _)) = rows.last() else {
            return;
        };
        if asked < PREFETCH_AFTER || !whole(range, rows) {
            return;
        }
        let next = last + 1;
        let range = (
            next,
            next.saturating_add(asked.saturating_mul(2).min(READ_AHEAD_MAX as u64)),
            max_bytes,
        );
        let (shared, sid) = (Arc::clone(&self.shared), self.sid);
        let spawned = std::thread::Builder::new()
            .name("cairn-pg-read-ahead".into())
            .spawn(move || fetch_rows_if_idle(&shared, sid, range));
        if let Ok(rows) = spawned {
            *lock(&self.ahead) = Some(Ahead { range, rows });
        }
    }

    /// Starts the thread that renews lease `token` every third of its
    /// length until the log is dropped, poisoning the log if the lease is
    /// lost.
    pub(crate) fn start_heartbeat(&self, token: i64, log: Poisoner) {
        let (stop, stopped) = mpsc::channel::<()>();
        let shared = Arc::clone(&self.shared);
        let sid = self.sid;
        let every = shared.url.lease / 3;
        let spawned = std::thread::Builder::new()
            .name("cairn-pg-lease".into())
            .spawn(move || {
                loop {
                    match stopped.recv_timeout(every.max(Duration::from_millis(100))) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                    let lease = shared.url.lease.as_secs_f64();
                    let renewed = shared.pool.run(|c| {
                        c.query_typed_opt(
                            &shared.sql.renew,
                            &[
                                (&sid, Type::INT8),
                                (&token, Type::INT8),
                                (&lease, Type::FLOAT8),
                            ],
                        )
                    });
                    match renewed {
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            log.poison(format!(
                                "the writer lease was lost (expired or taken over) while this \
                                 handle was idle (its fencing token was {token}): reopen the \
                                 session"
                            ));
                            return;
                        }
                        // Unreachable for now: the next append decides.
                        Err(_) => {}
                    }
                }
            });
        // Without a heartbeat the lease expires while idle; appends still
        // renew it, and the fence refuses them once it has expired.
        if spawned.is_ok() {
            *lock(&self.heartbeat) = Some(stop);
        }
    }

    /// The append call: `append_one` for a single record, else `append`
    /// with one array per column. Nothing of it is visible unless it
    /// commits.
    fn transact(&self, b: Batch<'_>) -> Result<bool, postgres::Error> {
        let (token, summary) = (b.token, b.summary);
        let before = count(b.before);
        let lease = self.shared.url.lease.as_secs_f64();
        let phase = summary::phase_json(summary.fold.op.phase());
        let op_state = summary::op_state_json(&summary.fold.op);
        let (entries, records, bytes) = (
            count(summary.fold.entries),
            count(summary.fold.records),
            count(summary.bytes),
        );
        let fence: [(&(dyn ToSql + Sync), Type); 12] = [
            (&self.sid, Type::INT8),
            (&token, Type::INT8),
            (&before, Type::INT8),
            (&lease, Type::FLOAT8),
            (&summary.fold.updated, Type::TEXT),
            (&summary.fold.title, Type::TEXT),
            (&summary.fold.first_message, Type::TEXT),
            (&phase, Type::TEXT),
            (&op_state, Type::TEXT),
            (&entries, Type::INT8),
            (&records, Type::INT8),
            (&bytes, Type::INT8),
        ];
        let mut conn = self.shared.pool.get()?;
        let result = if let [r] = b.rows {
            let seq = count(r.seq);
            let one: [(&(dyn ToSql + Sync), Type); 6] = [
                (&seq, Type::INT8),
                (&r.kind, Type::TEXT),
                (&r.id, Type::TEXT),
                (&r.parent, Type::TEXT),
                (&r.crc, Type::INT8),
                (&r.payload, Type::BYTEA),
            ];
            let params: Vec<_> = fence.iter().chain(&one).cloned().collect();
            conn.query_typed_one(&self.shared.sql.append_one, &params)
        } else {
            let mut cols = Columns::default();
            for r in b.rows {
                cols.seq.push(count(r.seq));
                cols.kind.push(r.kind);
                cols.id.push(r.id);
                cols.parent.push(r.parent);
                cols.crc.push(r.crc);
                cols.payload.push(r.payload);
            }
            let many: [(&(dyn ToSql + Sync), Type); 6] = [
                (&cols.seq, Type::INT8_ARRAY),
                (&cols.kind, Type::TEXT_ARRAY),
                (&cols.id, Type::TEXT_ARRAY),
                (&cols.parent, Type::TEXT_ARRAY),
                (&cols.crc, Type::INT8_ARRAY),
                (&cols.payload, Type::BYTEA_ARRAY),
            ];
            let params: Vec<_> = fence.iter().chain(&many).cloned().collect();
            conn.query_typed_one(&self.shared.sql.append, &params)
        };
        match result {
            Ok(row) => row.try_get(0),
            Err(e) => {
                if crate::pool::connection_lost(&e) {
                    conn.discard();
                }
                Err(e)
            }
        }
    }

    /// Why the fence refused an append (read after the fact, for the message).
    fn why_fenced(&self, token: i64, records: i64) -> String {
        let row = self
            .shared
            .pool
            .run(|c| c.query_typed_opt(&self.shared.sql.lease_of, &[(&self.sid, Type::INT8)]));
        let Ok(Some(row)) = row else {
            return "could not be checked (the session is gone or unreachable)".into();
        };
        let lease = crate::lease::from_row(&row, 0).ok().flatten();
        let stored: i64 = row.try_get(10).unwrap_or(records);
        match lease {
            Some(l) if l.token != token => format!(
                "was taken over by another writer (pid {} on {}, token {})",
                l.holder.pid, l.holder.machine, l.token
            ),
            Some(l) if l.expired => format!(
                "expired at {} by the database's clock: this writer was paused or cut off for \
                 longer than the lease",
                l.expires.unwrap_or_default()
            ),
            Some(_) if stored != records => format!(
                "is still ours, but the session holds {stored} records where this handle \
                 expected {records}"
            ),
            Some(_) => "refused the append for no reason cairn can see".into(),
            None => "was broken or released (no writer holds it now)".into(),
        }
    }
}

impl Db for PgRows {
    /// The rows from a read-ahead fetched in the background when it is the
    /// one asked for and answers all of it, else from a query now; then,
    /// while a reader goes on sequentially, the next read-ahead is fetched
    /// in the background.
    ///
    /// Records never change once written, so rows that answer the whole
    /// range are the ones a query now would return. Rows that do not may
    /// have stopped at the session's end when they were read, before an
    /// append this handle (or another writer) made since: they are read
    /// again, as is a failed background read (for its error).
    fn fetch(&self, from: u64, to: u64, max_bytes: u64) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let range = (from, to, max_bytes);
        let ahead = lock(&self.ahead).take();
        let rows = match ahead.filter(|a| a.range == range).map(|a| a.rows.join()) {
            Some(Ok(Some(Ok(rows)))) if whole(range, &rows) => rows,
            _ => fetch_rows(&self.shared, self.sid, range)?,
        };
        self.read_ahead_after(range, &rows);
        Ok(rows)
    }

    fn append(&self, batch: Batch<'_>) -> io::Result<Fence> {
        // The reads of the open are over: a read-ahead still on its way is
        // not waited for, and its rows go when it ends.
        drop(lock(&self.ahead).take());
        match self.transact(batch) {
            Ok(true) => Ok(Fence::Passed),
            Ok(false) => Ok(Fence::Refused(
                self.why_fenced(batch.token, count(batch.before)),
            )),
            Err(e) => Err(io(e)),
        }
    }

    fn release(&self, token: i64) {
        drop(lock(&self.heartbeat).take());
        let _ = self.shared.pool.run(|c| {
            c.execute_typed(
                &self.shared.sql.release,
                &[(&self.sid, Type::INT8), (&token, Type::INT8)],
            )
        });
    }

    fn save_index(&self, bytes: &[u8]) {
        let schema = &self.shared.url.schema;
        // Best effort: it is only a cache.
        let _ = self.shared.pool.run(|c| {
            c.execute_typed(
                &format!(
                    "INSERT INTO {schema}.indexes (session, bytes) VALUES ($1, $2)
                     ON CONFLICT (session) DO UPDATE SET bytes = excluded.bytes"
                ),
                &[(&self.sid, Type::INT8), (&bytes, Type::BYTEA)],
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(seqs: std::ops::Range<u64>, len: usize) -> Rows {
        seqs.map(|s| (s, vec![b'x'; len])).collect()
    }

    #[test]
    fn a_read_ahead_is_trusted_only_when_it_answers_its_whole_range() {
        // All 128 records asked for.
        assert!(whole((10, 138, 1 << 20), &rows(10..138, 100)));
        // Stopped at the byte bound: the rest is for the next window.
        assert!(whole((10, 138, 1_000), &rows(10..20, 100)));
        // Stopped short of both: the session ended there when it was read,
        // and may hold more now (an append since), so it is read again.
        assert!(!whole((10, 138, 1 << 20), &rows(10..100, 100)));
        assert!(!whole((10, 138, 1 << 20), &[]));
    }
}
