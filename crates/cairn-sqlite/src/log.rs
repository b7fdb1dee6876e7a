//! One session's log in the database: reads by `(session, seq)`, and the
//! append transaction — fencing check, one `INSERT` per line, the summary
//! columns, commit — which is durable when it returns (`synchronous=FULL`),
//! so [`Log::sync`] has nothing left to do.

use std::sync::{Mutex, MutexGuard, PoisonError};

use cairn::Log;
use cairn::frame::{self, Frame};
use cairn::{AppendError, Damage, ReadError};
use rusqlite::{Connection, TransactionBehavior, params};

use crate::error::io;
use crate::lease;
use crate::rows::{LogState, Writer};
use crate::summary::{self, Summary};

/// An open session of an SQLite database.
#[derive(Debug)]
pub(crate) struct SqliteLog {
    location: String,
    sid: i64,
    conn: Mutex<Connection>,
    state: Mutex<LogState>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why an append was refused although SQLite worked.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error(
        "the writer lease of this session was {}; this handle can no longer write (its fencing \
         token is {ours}): reopen the session",
        match .now { Some(t) => format!("taken over by another writer (token {t})"), None => "broken".to_owned() }
    )]
    LeaseLost { ours: i64, now: Option<i64> },
    #[error("line {seq} is not a record cairn can store: {problem}")]
    BadLine { seq: u64, problem: String },
}

enum Failure {
    Sqlite(rusqlite::Error),
    Refused(Refused),
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Failure {
        Failure::Sqlite(e)
    }
}

impl SqliteLog {
    pub(crate) fn new(
        location: String,
        sid: i64,
        conn: Connection,
        offsets: Vec<u64>,
        end: u64,
        writer: Option<Writer>,
    ) -> SqliteLog {
        SqliteLog {
            location,
            sid,
            conn: Mutex::new(conn),
            state: Mutex::new(LogState::new(offsets, end, writer)),
        }
    }

    /// The append transaction. Nothing of it is visible unless it commits.
    fn transact(
        &self,
        conn: &mut Connection,
        token: i64,
        first_seq: u64,
        lines: &[Vec<u8>],
        summary: &mut Summary,
    ) -> Result<(), Failure> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = lease::current_token(&tx, self.sid)?;
        if now != Some(token) {
            return Err(Failure::Refused(Refused::LeaseLost { ours: token, now }));
        }
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO records (session, seq, kind, id, parent, crc, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            for (i, line) in lines.iter().enumerate() {
                let seq = first_seq + i as u64;
                let bad = |problem: String| Failure::Refused(Refused::BadLine { seq, problem });
                frame::check(line).map_err(|e| bad(e.to_string()))?;
                let f = Frame::parse(line).map_err(|e| bad(e.to_string()))?;
                if f.seq != seq {
                    return Err(bad(format!("its seq is {}, not {seq}", f.seq)));
                }
                insert.execute(params![
                    self.sid,
                    i64::try_from(seq).unwrap_or(i64::MAX),
                    f.kind.as_ref(),
                    f.id.as_ref().map(|i| i.as_str()),
                    f.parent
                        .as_ref()
                        .and_then(|p| p.as_ref())
                        .map(|p| p.as_str()),
                    summary::crc_of(line),
                    line,
                ])?;
                summary.apply(&f, line.len());
            }
        }
        // `updated` is the last record's time, or the creation time when
        // later (a fork's copied records keep their times), as in the core's
        // `Session::updated`; both are RFC 3339 in one format, so they
        // compare as text.
        tx.prepare_cached(
            "UPDATE sessions SET updated = max(?2, created), title = ?3, first_message = ?4, phase = ?5,
                 op_state = ?6, entries = ?7, records = ?8, bytes = ?9
             WHERE sid = ?1",
        )?
        .execute(params![
            self.sid,
            summary.fold.updated,
            summary.fold.title,
            summary.fold.first_message,
            summary::phase_json(summary.fold.op.phase()),
            summary::op_state_json(&summary.fold.op),
            i64::try_from(summary.fold.entries).unwrap_or(i64::MAX),
            i64::try_from(summary.fold.records).unwrap_or(i64::MAX),
            i64::try_from(summary.bytes).unwrap_or(i64::MAX),
        ])?;
        tx.prepare_cached("UPDATE leases SET heartbeat = ?2 WHERE session = ?1")?
            .execute(params![self.sid, cairn::now_rfc3339()])?;
        tx.commit()?;
        Ok(())
    }
}

impl Log for SqliteLog {
    fn location(&self) -> &str {
        &self.location
    }

    fn len(&self) -> u64 {
        lock(&self.state).len()
    }

    fn read(&self, seq: u64) -> Result<Vec<u8>, ReadError> {
        let offset = lock(&self.state).offset_of(seq)?;
        let conn = lock(&self.conn);
        let line: Vec<u8> = conn
            .prepare_cached("SELECT payload FROM records WHERE session = ?1 AND seq = ?2")
            .and_then(|mut s| {
                s.query_row(params![self.sid, i64::try_from(seq).unwrap_or(-1)], |r| {
                    r.get(0)
                })
            })
            .map_err(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => ReadError::Damaged(Box::new(Damage {
                    location: self.location.clone(),
                    line: seq + 1,
                    offset,
                    problem: "the record vanished after the session was opened".into(),
                })),
                e => ReadError::Io {
                    location: self.location.clone(),
                    source: io(e),
                },
            })?;
        frame::check(&line).map_err(|d| {
            ReadError::Damaged(Box::new(Damage {
                location: self.location.clone(),
                line: seq + 1,
                offset,
                problem: format!(
                    "{d} (it verified when the session was opened: the database changed underneath)"
                ),
            }))
        })?;
        Ok(line)
    }

    fn append(&self, lines: &[Vec<u8>]) -> Result<(), AppendError> {
        let mut st = lock(&self.state);
        let first_seq = st.len();
        let writer = st.writable(&self.location)?;
        let token = writer.token;
        let mut summary = writer.summary.clone();
        let result = {
            let mut conn = lock(&self.conn);
            self.transact(&mut conn, token, first_seq, lines, &mut summary)
        };
        match result {
            Ok(()) => {
                st.appended(lines, summary);
                Ok(())
            }
            Err(failure) => {
                let source = match failure {
                    Failure::Sqlite(e) => io(e),
                    Failure::Refused(r) => std::io::Error::other(r),
                };
                Err(st.failed(&self.location, source))
            }
        }
    }

    fn sync(&self) -> Result<(), AppendError> {
        // Every append committed with synchronous=FULL: nothing is pending.
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

impl Drop for SqliteLog {
    fn drop(&mut self) {
        let token = lock(&self.state).token();
        if let Some(token) = token {
            // Best effort: a lease left behind is taken over once its holder
            // is known to be dead.
            let _ = lease::release(&lock(&self.conn), self.sid, token);
        }
    }
}
