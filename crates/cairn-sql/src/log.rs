//! One session's log in a SQL database, whatever the database: the core's
//! [`Log`] over a [`Db`] that stores and fetches rows.
//!
//! - **Append.** Each line is verified (framing, checksum, the `seq` it must
//!   have) and parsed once for its columns and the listing summary; the
//!   database then stores the rows and the session's new summary in one
//!   transaction fenced by the writer's token ([`Db::append`]). A refused
//!   fence or a failed transaction poisons the handle: its outcome may be
//!   unknown, so nothing retries it; the next open reads what is there.
//! - **Reads** go through a read-ahead window: first the last records the
//!   open's scan kept ([`crate::Scanned`]), then, at each miss, the next
//!   records fetched in one query (16 at first, doubling up to 1024 while
//!   reads stay sequential, and never much more than 4 MiB). So an open
//!   whose context needs every message costs no query per record. A read
//!   takes its line out of the window (the open reads each record it needs
//!   once; a second read of it queries again), so the window's memory goes
//!   as the open reads, and nothing is copied. The window is dropped at the
//!   first append if it is larger than a refill.
//! - **Drop** gives the writer's lease back ([`Db::release`]).

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cairn::frame::{self, Frame};
use cairn::{AppendError, Damage, Log, ReadError};

use crate::scan::Scanned;
use crate::summary::{self, Summary};

/// The first read-ahead of a miss that does not continue the window.
const READ_AHEAD_MIN: usize = 16;
/// The largest read-ahead, in records (a sequential reader's misses ask
/// for twice the last one's records, up to this).
pub const READ_AHEAD_MAX: usize = 1024;
/// A read-ahead stops after the record that reaches this many bytes.
pub const READ_AHEAD_BYTES: u64 = 4 << 20;

/// One record to insert: its line and the columns taken from it.
#[derive(Debug, Clone, Copy)]
pub struct NewRow<'a> {
    /// Its `seq`.
    pub seq: u64,
    /// Its kind.
    pub kind: &'a str,
    /// Its entry id (entries only).
    pub id: Option<&'a str>,
    /// Its parent (entries only; `None` for a root).
    pub parent: Option<&'a str>,
    /// The CRC-32C of its trailer.
    pub crc: i64,
    /// The exact line, newline included.
    pub payload: &'a [u8],
}

/// One append: the lines' rows, the fence they need and the summary after
/// them.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// The writer's fencing token.
    pub token: i64,
    /// The records the session must hold before these.
    pub before: u64,
    /// The records to insert.
    pub rows: &'a [NewRow<'a>],
    /// The session's summary after them.
    pub summary: &'a Summary,
}

/// Whether an append's fence let it through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// The rows and the summary are committed.
    Passed,
    /// Nothing was written: the writer no longer holds the lease (why, as
    /// "was taken over by …", "expired at …").
    Refused(String),
}

/// What a SQL backend does for one session's log (it knows the session's
/// key).
pub trait Db: Send + Sync + fmt::Debug {
    /// Records `from..to` in `seq` order, stopping after the one that
    /// reaches `max_bytes` (at least one, if there is one).
    ///
    /// # Errors
    ///
    /// The database failed.
    fn fetch(&self, from: u64, to: u64, max_bytes: u64) -> io::Result<Vec<(u64, Vec<u8>)>>;

    /// In one transaction: checks that the lease still carries the batch's
    /// token and that the session holds `before` records, then inserts its
    /// rows and stores its summary with the session. A transaction
    /// that committed returns [`Fence::Passed`].
    ///
    /// # Errors
    ///
    /// The database failed (the append may or may not have committed).
    fn append(&self, batch: Batch<'_>) -> io::Result<Fence>;

    /// Gives the lease back if it still carries `token` (best effort: the
    /// handle is being dropped).
    fn release(&self, token: i64);

    /// Replaces the session's persisted index (`docs/STORES.md` §4) with
    /// `bytes`. Best effort: it is only a cache, checked against the rows at
    /// every open.
    fn save_index(&self, bytes: &[u8]);
}

/// The writer's part of a log: its fencing token and the summary columns.
#[derive(Debug)]
pub struct Writer {
    /// The fencing token every append carries.
    pub token: i64,
    /// The summary columns as of the last append.
    pub summary: Summary,
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

/// An open log's state.
#[derive(Debug)]
struct LogState {
    /// Offset of every line, as if the lines were one file.
    offsets: Vec<u64>,
    end: u64,
    writer: Option<Writer>,
    poisoned: Option<String>,
}

impl LogState {
    fn writable(&mut self, location: &str) -> Result<&mut Writer, AppendError> {
        if let Some(cause) = &self.poisoned {
            return Err(AppendError::Poisoned {
                session: location.to_owned(),
                cause: cause.clone(),
            });
        }
        self.writer.as_mut().ok_or_else(|| AppendError::ReadOnly {
            session: location.to_owned(),
        })
    }

    fn offset_of(&self, seq: u64) -> Result<u64, ReadError> {
        usize::try_from(seq)
            .ok()
            .and_then(|i| self.offsets.get(i))
            .copied()
            .ok_or(ReadError::NoSuchRecord(seq))
    }

    fn poison(&mut self, cause: String) {
        self.poisoned.get_or_insert(cause);
    }

    fn token(&self) -> Option<i64> {
        self.writer.as_ref().map(|w| w.token)
    }
}

/// Records read ahead: `lines[i]` is record `first + i`.
#[derive(Debug, Default)]
struct Window {
    first: u64,
    lines: Vec<Vec<u8>>,
    /// How many records the next sequential miss fetches.
    next: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Poisons a log from elsewhere (a lease heartbeat that found the lease
/// gone); it does not keep the log open.
#[derive(Debug, Clone)]
pub struct Poisoner(std::sync::Weak<Mutex<LogState>>);

impl Poisoner {
    /// Refuses every later append of the log with `cause` (the first cause
    /// stays); nothing if the log is gone.
    pub fn poison(&self, cause: String) {
        if let Some(state) = self.0.upgrade() {
            lock(&state).poison(cause);
        }
    }
}

/// An open session of a SQL store.
#[derive(Debug)]
pub struct SqlLog<D: Db> {
    location: String,
    db: D,
    state: Arc<Mutex<LogState>>,
    window: Mutex<Window>,
}

impl<D: Db> SqlLog<D> {
    /// The log of a session just created (its header alone) or opened
    /// (what its scan found); `writer` for a writer.
    pub fn new(location: String, db: D, scanned: Scanned, writer: Option<Writer>) -> SqlLog<D> {
        SqlLog {
            location,
            db,
            state: Arc::new(Mutex::new(LogState {
                offsets: scanned.offsets,
                end: scanned.end,
                writer,
                poisoned: None,
            })),
            window: Mutex::new(Window {
                first: scanned.first_kept,
                lines: scanned.kept,
                next: READ_AHEAD_MIN,
            }),
        }
    }

    /// The database side.
    pub fn db(&self) -> &D {
        &self.db
    }

    /// A handle that poisons this log from elsewhere.
    pub fn poisoner(&self) -> Poisoner {
        Poisoner(Arc::downgrade(&self.state))
    }

    /// Record `seq` from the read-ahead window, refilled on a miss (see the
    /// module docs); `None` if the database no longer has it.
    fn read_ahead(&self, seq: u64) -> io::Result<Option<Vec<u8>>> {
        let mut w = lock(&self.window);
        // A line is handed over, not copied: the open reads each record it
        // needs once. A line already taken (left empty: no line is) is read
        // again from the database.
        if let Some(line) = seq
            .checked_sub(w.first)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| w.lines.get_mut(i))
            .filter(|l| !l.is_empty())
        {
            return Ok(Some(std::mem::take(line)));
        }
        let sequential = seq == w.first + w.lines.len() as u64 && !w.lines.is_empty();
        let want = if sequential { w.next } else { READ_AHEAD_MIN };
        let rows = self
            .db
            .fetch(seq, seq.saturating_add(want as u64), READ_AHEAD_BYTES)?;
        let mut lines = Vec::with_capacity(rows.len());
        for (at, line) in rows {
            if at != seq + lines.len() as u64 {
                break;
            }
            lines.push(line);
        }
        let first = lines.first().cloned();
        *w = Window {
            first: seq,
            lines,
            next: (want * 2).min(READ_AHEAD_MAX),
        };
        Ok(first)
    }

    /// Checks and parses `lines` (records `first_seq..`) into their rows,
    /// folding them into `summary`.
    fn rows<'l>(first_seq: u64, frames: &'l [Frame<'l>], lines: &'l [Vec<u8>]) -> Vec<NewRow<'l>> {
        frames
            .iter()
            .zip(lines)
            .enumerate()
            .map(|(i, (f, line))| NewRow {
                seq: first_seq + i as u64,
                kind: &f.kind,
                id: f.id.as_ref().map(|i| i.as_str()),
                parent: f
                    .parent
                    .as_ref()
                    .and_then(|p| p.as_ref())
                    .map(|p| p.as_str()),
                crc: summary::crc_of(line),
                payload: line,
            })
            .collect()
    }
}

/// Checks and parses each of `lines`, which must be records `first_seq..`.
fn frames(first_seq: u64, lines: &[Vec<u8>]) -> Result<Vec<Frame<'_>>, Refused> {
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let seq = first_seq + i as u64;
            let bad = |problem: String| Refused::BadLine { seq, problem };
            frame::check(line).map_err(|e| bad(e.to_string()))?;
            let f = Frame::parse(line).map_err(|e| bad(e.to_string()))?;
            if f.seq != seq {
                return Err(bad(format!("its seq is {}, not {seq}", f.seq)));
            }
            Ok(f)
        })
        .collect()
}

impl<D: Db> Log for SqlLog<D> {
    fn location(&self) -> &str {
        &self.location
    }

    fn len(&self) -> u64 {
        lock(&self.state).offsets.len() as u64
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
        let line = self.read_ahead(seq).map_err(|source| ReadError::Io {
            location: self.location.clone(),
            source,
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
        let first_seq = st.offsets.len() as u64;
        let writer = st.writable(&self.location)?;
        let token = writer.token;
        let mut summary = writer.summary.clone();
        let result = frames(first_seq, lines).and_then(|frames| {
            for (f, line) in frames.iter().zip(lines) {
                summary.apply(f, line.len());
            }
            let rows = Self::rows(first_seq, &frames, lines);
            let batch = Batch {
                token,
                before: first_seq,
                rows: &rows,
                summary: &summary,
            };
            match self.db.append(batch) {
                Ok(Fence::Passed) => Ok(Ok(())),
                Ok(Fence::Refused(why)) => Err(Refused::LeaseLost { ours: token, why }),
                Err(e) => Ok(Err(e)),
            }
        });
        let source = match result {
            Ok(Ok(())) => {
                if let Some(w) = st.writer.as_mut() {
                    w.summary = summary;
                }
                for l in lines {
                    let end = st.end;
                    st.offsets.push(end);
                    st.end += l.len() as u64;
                }
                return Ok(());
            }
            Ok(Err(e)) => e,
            Err(refused) => io::Error::other(refused),
        };
        st.poison(format!("an append failed: {}", cairn::with_causes(&source)));
        Err(AppendError::Io {
            action: "append to",
            location: self.location.clone(),
            source,
        })
    }

    fn sync(&self) -> Result<(), AppendError> {
        // Every append committed durably: nothing is pending.
        lock(&self.state).writable(&self.location).map(drop)
    }

    fn is_writer(&self) -> bool {
        lock(&self.state).token().is_some()
    }

    fn byte_len(&self) -> u64 {
        lock(&self.state).end
    }

    fn offset(&self, seq: u64) -> u64 {
        lock(&self.state).offset_of(seq).unwrap_or(0)
    }

    fn poisoned(&self) -> Option<String> {
        lock(&self.state).poisoned.clone()
    }

    fn keeps_index(&self) -> bool {
        let st = lock(&self.state);
        st.token().is_some() && st.poisoned.is_none()
    }

    fn save_index(&self, bytes: &[u8]) {
        if self.keeps_index() {
            self.db.save_index(bytes);
        }
    }
}

impl<D: Db> Drop for SqlLog<D> {
    fn drop(&mut self) {
        let token = lock(&self.state).token();
        if let Some(token) = token {
            // Best effort: a lease left behind expires, or is taken over
            // once its holder is known to be dead.
            self.db.release(token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn::{Entry, EntryBody, EntryId, Message, Role};

    /// A database in memory that counts its queries.
    #[derive(Debug, Default)]
    struct Rows {
        lines: Mutex<Vec<Vec<u8>>>,
        token: Mutex<i64>,
        fetches: Mutex<usize>,
    }

    impl Db for Rows {
        fn fetch(&self, from: u64, to: u64, max_bytes: u64) -> io::Result<Vec<(u64, Vec<u8>)>> {
            *lock(&self.fetches) += 1;
            let (mut out, mut bytes) = (Vec::new(), 0);
            for (seq, line) in lock(&self.lines).iter().enumerate().skip(from as usize) {
                if seq as u64 >= to || bytes >= max_bytes {
                    break;
                }
                bytes += line.len() as u64;
                out.push((seq as u64, line.clone()));
            }
            Ok(out)
        }

        fn append(&self, b: Batch<'_>) -> io::Result<Fence> {
            let mut lines = lock(&self.lines);
            if *lock(&self.token) != b.token || lines.len() as u64 != b.before {
                return Ok(Fence::Refused("was taken over by another writer".into()));
            }
            lines.extend(b.rows.iter().map(|r| r.payload.to_vec()));
            Ok(Fence::Passed)
        }

        fn release(&self, _token: i64) {}

        fn save_index(&self, _bytes: &[u8]) {}
    }

    fn line(seq: u64) -> Vec<u8> {
        let id = EntryId::parse(&format!("e{seq}")).unwrap();
        let parent = (seq > 1).then(|| EntryId::parse(&format!("e{}", seq - 1)).unwrap());
        let e = Entry {
            id,
            parent,
            body: EntryBody::Message(Message::text(Role::User, format!("message {seq}"))),
        };
        frame::encode_entry(seq, "2026-01-01T00:00:00.000Z", &e)
    }

    /// A log over `n` stored records (no header: the log does not care),
    /// of which the scan kept none.
    fn log_of(n: u64) -> SqlLog<Rows> {
        let lines: Vec<Vec<u8>> = (0..n).map(line).collect();
        let mut offsets = Vec::new();
        let mut end = 0;
        for l in &lines {
            offsets.push(end);
            end += l.len() as u64;
        }
        let rows = Rows {
            lines: Mutex::new(lines),
            token: Mutex::new(7),
            fetches: Mutex::new(0),
        };
        let scanned = Scanned {
            offsets,
            end,
            first_kept: n,
            kept: Vec::new(),
        };
        let writer = Writer {
            token: 7,
            summary: Summary::default(),
        };
        SqlLog::new("test".into(), rows, scanned, Some(writer))
    }

    #[test]
    fn reading_every_record_in_order_costs_a_query_per_window_not_per_record() {
        let log = log_of(5000);
        for seq in 0..5000 {
            assert_eq!(log.read(seq).unwrap(), line(seq));
        }
        // 16 + 32 + … + 1024, then windows of 1024.
        let fetches = *lock(&log.db().fetches);
        assert!(fetches <= 10, "{fetches} queries for 5,000 reads");
    }

    /// A log of 10 records whose scan kept records 4 to 9.
    fn log_keeping_the_last_six() -> SqlLog<Rows> {
        let mut log = log_of(10);
        log.window = Mutex::new(Window {
            first: 4,
            lines: (4..10).map(line).collect(),
            next: READ_AHEAD_MIN,
        });
        log
    }

    #[test]
    fn the_lines_the_scan_kept_are_read_without_a_query() {
        let log = log_keeping_the_last_six();
        for seq in 4..10 {
            assert_eq!(log.read(seq).unwrap(), line(seq));
        }
        assert_eq!(*lock(&log.db().fetches), 0);
    }

    #[test]
    fn a_kept_line_read_twice_is_read_again_from_the_database() {
        let log = log_keeping_the_last_six();
        assert_eq!(log.read(5).unwrap(), line(5));
        assert_eq!(log.read(5).unwrap(), line(5));
        assert_eq!(*lock(&log.db().fetches), 1);
    }

    #[test]
    fn an_appended_line_is_read_back_and_extends_the_offsets() {
        let log = log_of(3);
        let before = log.byte_len();
        log.append(&[line(3)]).unwrap();
        assert_eq!(log.len(), 4);
        assert_eq!(log.offset(3), before);
        assert_eq!(log.read(3).unwrap(), line(3));
    }

    #[test]
    fn a_refused_fence_poisons_the_handle_with_the_reason() {
        let log = log_of(3);
        *lock(&log.db().token) = 8;
        let err = log.append(&[line(3)]).unwrap_err();
        let text = cairn::with_causes(&err);
        assert!(text.contains("taken over by another writer"), "{text}");
        assert!(text.contains("fencing token is 7"), "{text}");
        assert_eq!(log.len(), 3);
        assert!(log.poisoned().is_some());
        *lock(&log.db().token) = 7;
        assert!(matches!(
            log.append(&[line(3)]),
            Err(AppendError::Poisoned { .. })
        ));
    }

    #[test]
    fn a_line_with_the_wrong_seq_is_refused_before_the_database_sees_it() {
        let log = log_of(3);
        let err = log.append(&[line(5)]).unwrap_err();
        assert!(cairn::with_causes(&err).contains("its seq is 5, not 3"));
        assert_eq!(lock(&log.db().lines).len(), 3);
    }

    #[test]
    fn a_poisoner_outlives_its_log_harmlessly() {
        let log = log_of(1);
        let p = log.poisoner();
        p.poison("lease lost".into());
        assert_eq!(log.poisoned().as_deref(), Some("lease lost"));
        drop(log);
        p.poison("again".into());
    }
}
