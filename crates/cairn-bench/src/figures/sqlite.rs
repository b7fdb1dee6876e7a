//! The SQLite backend (`cairn-sqlite`): durable append and open + context,
//! each against the file backend and against raw SQLite doing the same with
//! the same bytes, all measured in this group.
//!
//! - **Append.** One `Session::append` (`Durability::Sync`) per record with
//!   the SQLite backend, the file backend, and a raw rusqlite connection
//!   (WAL and `synchronous=FULL`, the durability cairn-sqlite sets) doing one
//!   `INSERT` of the same line per transaction into a plain
//!   `(session, seq, payload)` table. Each side keeps one store (one
//!   database for each SQLite side, as a real store holding many sessions)
//!   and appends to a new session per round, so WAL checkpoints are spread
//!   over the rounds as in steady use. Within a round the sides take turns
//!   by chunks of a few records (the first rotating), so a disk that slows
//!   down for a moment (other tenants' I/O) slows every side alike; a
//!   side's round rate is its records over the sum of its chunks' times,
//!   and its figure the median of its rounds' rates.
//! - **Open + context.** The open figure's linear session (same plan and
//!   seed as `open.rs`) is written as a file, copied line for line into the
//!   SQLite store (`cairn_stores::copy_session`), and its lines inserted
//!   into the raw table (this runs first, and also brings both WALs to their
//!   working size). Both databases are checkpointed, the page cache is
//!   warmed, then each repeat opens the session for writing and takes its
//!   context with each backend, and reads the raw rows in `seq` order; each
//!   side keeps its best time. A reader's SQLite open (no lease transaction)
//!   is timed beside them for the notes.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use cairn::{Access, Durability, EntryBody, FileBackend, Session, SessionId, Store};
use cairn_sqlite::SqliteBackend;
use cairn_stores::{CopyOutcome, copy_session};
use rusqlite::{Connection, TransactionBehavior, params};

use super::Bench;
use super::append::{mean_line, new_session_in, rounds_note};
use super::open::{open_context_read as open_context, read_every_message};
use crate::config::issue;
use crate::fixture::{self, Plan};
use crate::measure::{best, median, timed};
use crate::report::{Figure, Target, Unit, thousands};
use crate::workload;

/// The raw baseline's table: what a program storing the lines in SQLite
/// itself would start from.
const RAW_TABLE: &str = "CREATE TABLE IF NOT EXISTS records (
    session TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    payload BLOB    NOT NULL,
    PRIMARY KEY (session, seq)
)";

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    let dir = b.sub("sqlite")?;
    let db = Arc::new(
        SqliteBackend::open(dir.join("cairn.db")).context("opening the cairn-sqlite database")?,
    );
    let store = Store::with_backend(db.clone());
    let mut raw = Raw::open(&dir.join("raw.db"))?;
    // Open first: loading its session into both databases also grows their
    // WALs to their working size, so the append rounds measure SQLite in
    // steady use (a WAL reused from its start after each checkpoint), not a
    // new file growing.
    let open = open_figures(b, &dir, &db, &store, &mut raw)?;
    let mut figures = append_figures(b, &dir, &store, &mut raw)?;
    figures.extend(open);
    Ok(figures)
}

/// Records each side appends before the next side's turn.
const CHUNK: usize = 25;

/// The durable-append figures: SQLite vs the file backend's `Sync`, and
/// SQLite vs raw SQLite inserts.
fn append_figures(b: &Bench, dir: &Path, store: &Store, raw: &mut Raw) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let files = Store::open_dir(dir.join("files"));
    let (mut sqlite, mut file, mut rawr) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..s.sqlite_rounds {
        let bodies = workload::bodies(400 + r as u64, "call-", s.sqlite_cycles);
        let records = bodies.len() as f64;
        let lines = fixture::encode_chain(&bodies, 1);
        // A new session per side and round, in the same stores.
        let on_sqlite = new_session_in(store, Durability::Sync)?;
        let on_file = new_session_in(&files, Durability::Sync)?;
        let raw_id = SessionId::generate();
        raw.begin_session(&raw_id)?;
        let mut t = [0.0f64; 3];
        for (c, (chunk, raw_lines)) in bodies.chunks(CHUNK).zip(lines.chunks(CHUNK)).enumerate() {
            // The sides take turns by chunks, the first rotating, so a disk
            // that slows down (other tenants' I/O) slows every side alike.
            // (Copying a chunk's bodies happens before the clock starts.)
            for side in (0..3).map(|k| (k + c + r) % 3) {
                let dt = match side {
                    0 => append_chunk(&on_sqlite, chunk.to_vec())?,
                    1 => append_chunk(&on_file, chunk.to_vec())?,
                    _ => raw.append_chunk(&raw_id, 1 + (c * CHUNK) as i64, raw_lines)?,
                };
                t[side] += dt;
            }
        }
        sqlite.push(records / t[0]);
        file.push(records / t[1]);
        rawr.push(records / t[2]);
    }
    let notes = [
        format!(
            "{} records per round and side, one Session::append (Durability::Sync) each; the sides take turns by chunks of {CHUNK} records (a new session each per round, in one store each); median of {} rounds (mean {} B per line)",
            s.sqlite_cycles * 4,
            s.sqlite_rounds,
            mean_line(&fixture::encode_chain(&workload::bodies(1, "c", 50), 1))
        ),
        "cairn-sqlite commits one transaction per append (WAL, synchronous=FULL: the WAL is synced at every commit): the fence (a read of the session's id, the lease's token and the session's last key), the INSERT of the line with kind/id/parent/crc and the listing counters into `records` (one secondary index, on entry id), the session's row only when its title, first message or operation state changes; the lease's heartbeat at most every 10 s".to_owned(),
    ];
    let vs_file = rounds_note(&sqlite, &file);
    let vs_raw = rounds_note(&sqlite, &rawr);
    let (sqlite, file, rawr) = (median(sqlite), median(file), median(rawr));
    Ok(vec![
        Figure::new(
            "sqlite_append_vs_file",
            "durable append, SQLite backend vs file backend",
            Unit::RecordsPerSec,
            sqlite,
            "the file backend's durable append (Sync), same records, same run",
            file,
            None,
        )
        .note(notes[0].clone())
        .note("a comparison of two backends' commit paths (WAL frames + fsync of the WAL vs write + fdatasync of the session file): informational")
        .note(vs_file),
        Figure::new(
            "sqlite_append",
            "durable append, SQLite backend",
            Unit::RecordsPerSec,
            sqlite,
            "raw SQLite: one INSERT of the same line per transaction (WAL, synchronous=FULL) into (session, seq, payload)",
            rawr,
            Some(Target::AtLeast(0.85)),
        )
        .note(notes[0].clone())
        .note(notes[1].clone())
        .note(vs_raw),
    ])
}

/// The open + context figures: SQLite vs the file backend, and SQLite vs
/// raw SQLite reading the same rows.
fn open_figures(
    b: &Bench,
    dir: &Path,
    db: &Arc<SqliteBackend>,
    store: &Store,
    raw: &mut Raw,
) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let home = dir.join("open");
    // The open figure's session (same plan and seed), as a file...
    let w = fixture::write_session(&home, &Plan::linear(s.open_entries, 11), true)?;
    let records = w.entries + 1;
    // ...copied line for line into the SQLite store...
    let files = FileBackend::new(home.join("sessions"));
    match copy_session(&files, &**db, &w.id)
        .with_context(|| format!("copying session {} into SQLite", w.id))?
    {
        CopyOutcome::Copied(c) if c.records == records && c.bytes == w.bytes => {}
        other => bail!("copying the fixture into SQLite gave {other:?}, not {records} records"),
    }
    // ...and into the raw table.
    let lines = split_lines(&std::fs::read(&w.path)?);
    raw.insert_all(w.id.as_str(), &lines)?;
    drop(lines);
    // Leave both databases as a store at rest: everything checkpointed into
    // the database file (the next write restarts the WAL from its start).
    checkpoint(&raw.conn)?;
    checkpoint(&Connection::open(db.path())?)?;

    // Warm the page cache and check every side once, untimed.
    for (name, n) in [
        ("file", open_context(&home, &w.id)?.1),
        (
            "SQLite",
            sqlite_open_context(store, &w.id, Access::Write)?.1,
        ),
        (
            "SQLite (reader)",
            sqlite_open_context(store, &w.id, Access::Read)?.1,
        ),
    ] {
        if n != w.context_messages {
            bail!(
                "the {name} session's context has {n} messages, {} expected",
                w.context_messages
            );
        }
    }
    let check_raw = |(n, bytes): (u64, u64)| -> Result<()> {
        if n != records || bytes != w.bytes {
            bail!(
                "raw SQLite read {n} rows of {bytes} B, {records} rows of {} B were stored",
                w.bytes
            );
        }
        Ok(())
    };
    check_raw(raw.read_all(w.id.as_str())?)?;

    let (mut sqlite_ms, mut file_ms, mut raw_ms) = (Vec::new(), Vec::new(), Vec::new());
    // Also a reader's open (no lease), to show what the lease commit costs.
    let mut reader_ms = Vec::new();
    for r in 0..s.sqlite_open_repeats {
        for side in (0..4).map(|k| (k + r) % 4) {
            match side {
                0 => {
                    let (t, _) = timed(|| sqlite_open_context(store, &w.id, Access::Write))?;
                    sqlite_ms.push(t * 1e3);
                }
                3 => {
                    let (t, _) = timed(|| sqlite_open_context(store, &w.id, Access::Read))?;
                    reader_ms.push(t * 1e3);
                }
                1 => {
                    let (t, _) = timed(|| open_context(&home, &w.id))?;
                    file_ms.push(t * 1e3);
                }
                _ => {
                    let (t, got) = timed(|| raw.read_all(w.id.as_str()))?;
                    check_raw(got)?;
                    raw_ms.push(t * 1e3);
                }
            }
        }
    }
    let times = format!(
        "runs (ms): SQLite {}; file {}; raw SQLite {}; SQLite reader open (no lease) {}, best {:.1}",
        show(&sqlite_ms),
        show(&file_ms),
        show(&raw_ms),
        show(&reader_ms),
        best(reader_ms.clone())
    );
    let (sqlite, file, rawt) = (best(sqlite_ms), best(file_ms), best(raw_ms));
    let scaled = s.scaled("entries", s.open_entries as u64, issue::OPEN_ENTRIES as u64);
    let n = thousands(w.entries);
    let what = w.open_note(
        "writer open (for SQLite: a lease transaction, committed with a WAL sync); warm page cache, databases checkpointed",
        s.sqlite_open_repeats,
    );
    Ok(vec![
        Figure::new(
            "sqlite_open_context_vs_file",
            format!("open + context, SQLite vs file backend, {n} entries"),
            Unit::Millis,
            sqlite,
            "the file backend's open + context of the same records, every message read on both sides",
            file,
            Some(Target::AtMost(1.25)),
        )
        .scaled(scaled.clone())
        .note(what.clone())
        .note(times.clone()),
        Figure::new(
            "sqlite_open_context",
            format!("open + context, SQLite backend, {n} entries"),
            Unit::Millis,
            sqlite,
            "raw SQLite: SELECT payload … ORDER BY seq of the same lines",
            rawt,
            None,
        )
        .scaled(scaled)
        .note(what)
        .note("the floor of any SQLite reader; cairn also parses every frame, checks the tree and decodes every message, as figure 4's file open does: informational")
        .note(times),
    ])
}

/// Times in milliseconds, as a list for a note.
pub(super) fn show(v: &[f64]) -> String {
    v.iter()
        .map(|t| format!("{t:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Appends `bodies`, one `Session::append` each; seconds taken.
pub(super) fn append_chunk(session: &Session, bodies: Vec<EntryBody>) -> Result<f64> {
    let (t, ()) = timed(|| {
        for body in bodies {
            session.append(body)?;
        }
        Ok(())
    })?;
    Ok(t)
}

/// Opens a session of `store` (any backend) and takes its context, every
/// message read (as the file side, `open_context_read`, does): the session
/// (dropped by the caller after its clock stops: dropping a writer releases
/// its lease, another transaction) and the number of messages.
pub(super) fn sqlite_open_context(
    store: &Store,
    id: &SessionId,
    access: Access,
) -> Result<(Session, usize)> {
    let session = store
        .open(id, access)
        .with_context(|| format!("opening session {id} in {}", store.backend().describe()))?;
    let n = session.context().messages().len();
    read_every_message(&session)?;
    Ok((session, n))
}

/// The lines of a session file, newlines included (as cairn stores them).
pub(super) fn split_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|&c| c == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// Copies every WAL frame into the database file, so the next writer
/// restarts the WAL (which keeps its size, as in steady use).
fn checkpoint(conn: &Connection) -> Result<()> {
    let (busy, _, _): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .context("checkpointing")?;
    if busy != 0 {
        bail!("the checkpoint could not complete (another connection is busy)");
    }
    Ok(())
}

/// The raw SQLite baseline: one connection, WAL, `synchronous=FULL`.
struct Raw {
    conn: Connection,
}

impl Raw {
    fn open(path: &Path) -> Result<Raw> {
        let conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            bail!("{} cannot use WAL (journal mode {mode})", path.display());
        }
        conn.execute_batch("PRAGMA synchronous = FULL;")?;
        conn.execute_batch(RAW_TABLE)?;
        Ok(Raw { conn })
    }

    /// Writes `session`'s record 0 (as cairn's create writes the header).
    fn begin_session(&self, session: &SessionId) -> Result<()> {
        self.conn.execute(
            "INSERT INTO records (session, seq, payload) VALUES (?1, 0, ?2)",
            params![session.as_str(), b"{\"header\":true}\n".as_slice()],
        )?;
        Ok(())
    }

    /// Inserts `lines` as `session`'s records `first_seq`.., one transaction
    /// each; seconds taken.
    fn append_chunk(
        &mut self,
        session: &SessionId,
        first_seq: i64,
        lines: &[Vec<u8>],
    ) -> Result<f64> {
        let sid = session.as_str();
        let (t, ()) = timed(|| {
            for (i, line) in lines.iter().enumerate() {
                let tx = self
                    .conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.prepare_cached(
                    "INSERT INTO records (session, seq, payload) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![sid, first_seq + i as i64, line])?;
                tx.commit()?;
            }
            Ok(())
        })?;
        Ok(t)
    }

    /// Inserts `lines` as `session`'s records 0.. in one transaction.
    fn insert_all(&mut self, session: &str, lines: &[Vec<u8>]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut insert =
                tx.prepare("INSERT INTO records (session, seq, payload) VALUES (?1, ?2, ?3)")?;
            for (i, line) in lines.iter().enumerate() {
                insert.execute(params![session, i as i64, line])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Reads `session`'s payloads in `seq` order: rows and bytes read.
    fn read_all(&self, session: &str) -> Result<(u64, u64)> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT payload FROM records WHERE session = ?1 ORDER BY seq")?;
        let mut rows = stmt.query([session])?;
        let (mut n, mut bytes) = (0u64, 0u64);
        while let Some(row) = rows.next()? {
            bytes += row.get_ref(0)?.as_blob()?.len() as u64;
            n += 1;
        }
        Ok((n, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_rows_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut raw = Raw::open(&dir.path().join("raw.db")).unwrap();
        let lines = split_lines(b"a\nbb\nccc\n");
        assert_eq!(
            lines,
            vec![b"a\n".to_vec(), b"bb\n".to_vec(), b"ccc\n".to_vec()]
        );
        raw.insert_all("s", &lines).unwrap();
        assert_eq!(raw.read_all("s").unwrap(), (3, 9));
        let id = SessionId::generate();
        raw.begin_session(&id).unwrap();
        raw.append_chunk(&id, 1, &lines[..2]).unwrap();
        raw.append_chunk(&id, 3, &lines[2..]).unwrap();
        assert_eq!(raw.read_all(id.as_str()).unwrap(), (4, 16 + 9));
        checkpoint(&raw.conn).unwrap();
    }
}
