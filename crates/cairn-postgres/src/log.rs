//! One session's log in the database: reads by `(session, seq)`, and the
//! append — one statement, so one round trip and one transaction: fence
//! and summary update of the `sessions` row, then the records, inserted
//! only if the fence passed. It is durable when it returns
//! (`synchronous_commit = on`), so [`Log::sync`] has nothing left to do.
//!
//! Reads go through a read-ahead window: first the last records the open's
//! scan read (up to 32 MiB, dropped at the first append or the first read
//! outside them), then, at each miss, the next records fetched in one query
//! (16 at first, doubling up to 1024 while reads stay sequential, and never
//! much more than 4 MiB). So opening a session whose context needs every
//! message costs no round trip per record.
//!
//! A writer also runs a heartbeat thread that renews its lease every third
//! of the lease while it is idle; when a renewal finds the lease gone, the
//! handle is poisoned at once.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cairn::Log;
use cairn::frame::{self, Frame};
use cairn::{AppendError, Damage, ReadError};
use cairn_sqlite::rows::{LogState, Writer};
use cairn_sqlite::summary::{self, Summary};
use postgres::types::Type;

use crate::backend::Shared;
use crate::error::io;

/// Records read ahead: `lines[i]` is record `first + i`.
#[derive(Debug, Default)]
struct Window {
    first: u64,
    lines: Vec<Vec<u8>>,
    /// How many records the next sequential miss fetches.
    next: usize,
}

/// The first read-ahead of a miss that does not continue the window.
const READ_AHEAD_MIN: usize = 16;
/// The largest read-ahead, in records.
const READ_AHEAD_MAX: usize = 1024;
/// A read-ahead stops after the record that reaches this many bytes.
const READ_AHEAD_BYTES: i64 = 4 << 20;

/// An open session of a Postgres store.
#[derive(Debug)]
pub(crate) struct PgLog {
    location: String,
    sid: i64,
    shared: Arc<Shared>,
    state: Arc<Mutex<LogState>>,
    window: Mutex<Window>,
    /// Dropping it stops the heartbeat thread.
    heartbeat: Option<Sender<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why an append was refused although the database worked.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error(
        "the writer lease of this session {why}; this handle can no longer write (its fencing \
         token is {ours}): reopen the session"
    )]
    LeaseLost { ours: i64, why: String },
    #[error("line {seq} is not a record cairn can store: {problem}")]
    BadLine { seq: u64, problem: String },
}

enum Failure {
    Pg(postgres::Error),
    Refused(Refused),
}

impl From<postgres::Error> for Failure {
    fn from(e: postgres::Error) -> Failure {
        Failure::Pg(e)
    }
}

/// The columns of the records to insert, one array each.
#[derive(Default)]
struct Columns<'a> {
    seq: Vec<i64>,
    kind: Vec<String>,
    id: Vec<Option<String>>,
    parent: Vec<Option<String>>,
    crc: Vec<i64>,
    payload: Vec<&'a [u8]>,
}

impl PgLog {
    pub(crate) fn new(
        location: String,
        sid: i64,
        shared: Arc<Shared>,
        offsets: Vec<u64>,
        end: u64,
        writer: Option<Writer>,
    ) -> PgLog {
        let token = writer.as_ref().map(|w| w.token);
        let state = Arc::new(Mutex::new(LogState::new(offsets, end, writer)));
        let heartbeat = token.map(|token| spawn_heartbeat(&shared, &state, sid, token));
        PgLog {
            location,
            sid,
            shared,
            state,
            window: Mutex::new(Window::default()),
            heartbeat,
        }
    }

    /// The append statement. Nothing of it is visible unless it commits.
    fn transact(
        &self,
        token: i64,
        first_seq: u64,
        lines: &[Vec<u8>],
        summary: &mut Summary,
    ) -> Result<(), Failure> {
        let mut cols = Columns::default();
        for (i, line) in lines.iter().enumerate() {
            let seq = first_seq + i as u64;
            let bad = |problem: String| Failure::Refused(Refused::BadLine { seq, problem });
            frame::check(line).map_err(|e| bad(e.to_string()))?;
            let f = Frame::parse(line).map_err(|e| bad(e.to_string()))?;
            if f.seq != seq {
                return Err(bad(format!("its seq is {}, not {seq}", f.seq)));
            }
            cols.seq.push(i64::try_from(seq).unwrap_or(i64::MAX));
            cols.kind.push(f.kind.clone().into_owned());
            cols.id.push(f.id.as_ref().map(|i| i.as_str().to_owned()));
            cols.parent.push(
                f.parent
                    .as_ref()
                    .and_then(|p| p.as_ref())
                    .map(|p| p.as_str().to_owned()),
            );
            cols.crc.push(summary::crc_of(line));
            cols.payload.push(line);
            summary.apply(&f, line.len());
        }
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let before = count(first_seq);
        let lease = self.shared.url.lease.as_secs_f64();
        let phase = summary::phase_json(summary.fold.op.phase());
        let op_state = summary::op_state_json(&summary.fold.op);
        let (entries, records, bytes) = (
            count(summary.fold.entries),
            count(summary.fold.records),
            count(summary.bytes),
        );
        let mut conn = self.shared.pool.get()?;
        let result = conn.query_typed_one(
            &self.shared.sql.append,
            &[
                (&self.sid, Type::INT8),
                (&token, Type::INT8),
                (&summary.fold.updated, Type::TEXT),
                (&summary.fold.title, Type::TEXT),
                (&summary.fold.first_message, Type::TEXT),
                (&phase, Type::TEXT),
                (&op_state, Type::TEXT),
                (&entries, Type::INT8),
                (&records, Type::INT8),
                (&bytes, Type::INT8),
                (&lease, Type::FLOAT8),
                (&before, Type::INT8),
                (&cols.seq, Type::INT8_ARRAY),
                (&cols.kind, Type::TEXT_ARRAY),
                (&cols.id, Type::TEXT_ARRAY),
                (&cols.parent, Type::TEXT_ARRAY),
                (&cols.crc, Type::INT8_ARRAY),
                (&cols.payload, Type::BYTEA_ARRAY),
            ],
        );
        let row = match result {
            Ok(row) => row,
            Err(e) => {
                if crate::pool::connection_lost(&e) {
                    conn.discard();
                }
                return Err(Failure::Pg(e));
            }
        };
        let fenced: i64 = row.try_get(0)?;
        if fenced == 1 {
            return Ok(());
        }
        drop(conn);
        Err(Failure::Refused(Refused::LeaseLost {
            ours: token,
            why: self.why_fenced(token, before),
        }))
    }

    /// Makes `lines` (records `first..`) the read-ahead window: the open's
    /// scan hands over what it read. The window is dropped at the first
    /// append or the first read outside it.
    pub(crate) fn keep(&self, first: u64, lines: Vec<Vec<u8>>) {
        *lock(&self.window) = Window {
            first,
            lines,
            next: READ_AHEAD_MIN,
        };
    }

    /// Record `seq` from the read-ahead window, refilled on a miss (see the
    /// module docs); `None` if the database no longer has it.
    fn read_ahead(&self, seq: u64) -> Result<Option<Vec<u8>>, postgres::Error> {
        let mut w = lock(&self.window);
        if let Some(line) = seq
            .checked_sub(w.first)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| w.lines.get(i))
        {
            return Ok(Some(line.clone()));
        }
        let sequential = seq == w.first + w.lines.len() as u64 && !w.lines.is_empty();
        let want = if sequential { w.next } else { READ_AHEAD_MIN };
        let (from, to) = (
            i64::try_from(seq).unwrap_or(i64::MAX),
            i64::try_from(seq.saturating_add(want as u64)).unwrap_or(i64::MAX),
        );
        let rows = self.shared.pool.run(|c| {
            c.query_typed(
                &self.shared.sql.read_ahead,
                &[
                    (&self.sid, Type::INT8),
                    (&from, Type::INT8),
                    (&to, Type::INT8),
                    (&READ_AHEAD_BYTES, Type::INT8),
                ],
            )
        })?;
        let mut lines = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let at: i64 = row.try_get(0)?;
            if at != from + i as i64 {
                break;
            }
            lines.push(row.try_get::<_, Vec<u8>>(1)?);
        }
        let first = lines.first().cloned();
        *w = Window {
            first: seq,
            lines,
            next: (want * 2).min(READ_AHEAD_MAX),
        };
        Ok(first)
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
                l.expires
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

/// Starts the thread that renews the lease every third of its length until
/// the returned sender is dropped, poisoning the log if the lease is lost.
fn spawn_heartbeat(
    shared: &Arc<Shared>,
    state: &Arc<Mutex<LogState>>,
    sid: i64,
    token: i64,
) -> Sender<()> {
    let (stop, stopped) = mpsc::channel::<()>();
    let shared = Arc::clone(shared);
    let state = Arc::clone(state);
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
                        lock(&state).poison(format!(
                            "the writer lease was lost (expired or taken over) while this handle \
                             was idle (its fencing token was {token}): reopen the session"
                        ));
                        return;
                    }
                    // Unreachable for now: the next append decides.
                    Err(_) => {}
                }
            }
        });
    if spawned.is_err() {
        // Without a heartbeat the lease expires while idle; appends still
        // renew it, and the fence refuses them once it has expired.
    }
    stop
}

impl Log for PgLog {
    fn location(&self) -> &str {
        &self.location
    }

    fn len(&self) -> u64 {
        lock(&self.state).len()
    }

    fn read(&self, seq: u64) -> Result<Vec<u8>, ReadError> {
        let offset = lock(&self.state).offset_of(seq)?;
        let damaged = |problem: String| {
            ReadError::Damaged(Box::new(Damage {
                location: self.location.clone(),
                line: seq + 1,
                offset,
                problem,
            }))
        };
        let line = self.read_ahead(seq).map_err(|e| ReadError::Io {
            location: self.location.clone(),
            source: io(e),
        })?;
        let Some(line) = line else {
            return Err(damaged(
                "the record vanished after the session was opened".into(),
            ));
        };
        frame::check(&line).map_err(|d| {
            damaged(format!(
                "{d} (it verified when the session was opened: the database changed underneath)"
            ))
        })?;
        Ok(line)
    }

    fn append(&self, lines: &[Vec<u8>]) -> Result<(), AppendError> {
        // The open is over: what it kept to read is no longer needed.
        {
            let mut w = lock(&self.window);
            if w.lines.len() > READ_AHEAD_MAX {
                *w = Window::default();
            }
        }
        let mut st = lock(&self.state);
        let first_seq = st.len();
        let writer = st.writable(&self.location)?;
        let token = writer.token;
        let mut summary = writer.summary.clone();
        match self.transact(token, first_seq, lines, &mut summary) {
            Ok(()) => {
                st.appended(lines, summary);
                Ok(())
            }
            Err(failure) => {
                let source = match failure {
                    Failure::Pg(e) => io(e),
                    Failure::Refused(r) => std::io::Error::other(r),
                };
                Err(st.failed(&self.location, source))
            }
        }
    }

    fn sync(&self) -> Result<(), AppendError> {
        // Every append committed with synchronous_commit on: nothing pending.
        lock(&self.state).writable(&self.location).map(drop)
    }

    fn is_writer(&self) -> bool {
        lock(&self.state).token().is_some()
    }

    fn byte_len(&self) -> u64 {
        lock(&self.state).byte_len()
    }

    fn offset(&self, seq: u64) -> u64 {
        lock(&self.state).offset(seq)
    }

    fn poisoned(&self) -> Option<String> {
        lock(&self.state).poisoned()
    }
}

impl Drop for PgLog {
    fn drop(&mut self) {
        drop(self.heartbeat.take());
        let token = lock(&self.state).token();
        if let Some(token) = token {
            // Best effort: a lease left behind expires, or is taken over
            // once its holder is known to be dead.
            let _ = self.shared.pool.run(|c| {
                c.execute_typed(
                    &self.shared.sql.release,
                    &[(&self.sid, Type::INT8), (&token, Type::INT8)],
                )
            });
        }
    }
}
