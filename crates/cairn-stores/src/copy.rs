//! Copying sessions between any two backends (files, SQLite, Postgres),
//! record for record: the destination gets the exact lines of the source,
//! so checksums, `seq`s, ids and times are preserved byte for byte.
//!
//! Each session is read once from the source (read-only: nothing there is
//! changed or locked) and streamed into the destination in batches, then
//! the destination copy is verified by opening it as the core does. A copy
//! interrupted half-way is resumed by running it again: a destination
//! session that holds a prefix of the source gets the missing records; one
//! that holds exactly the source is left alone; one that differs is
//! reported and left untouched.

use cairn::{Access, Backend, Log, RawLine, TornTail};
use cairn::{AppendError, OpenError, ReadError, Session, SessionId, StoreError};

/// Lines per append transaction while copying.
const BATCH_LINES: usize = 512;
/// Bytes per append transaction while copying.
const BATCH_BYTES: usize = 4 << 20;

/// A session written to the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// The session.
    pub id: SessionId,
    /// Records in the destination now (all of the source's).
    pub records: u64,
    /// Bytes of those records.
    pub bytes: u64,
    /// Records the destination already had (a resumed copy), else 0.
    pub already_there: u64,
    /// A torn tail of the source that was not copied (it was never
    /// acknowledged, or a writer is appending it right now).
    pub torn_ignored: Option<TornTail>,
    /// Whether a writer held the source session while it was copied (the
    /// copy is the records acknowledged when it was read).
    pub was_live: bool,
}

/// What happened to one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyOutcome {
    /// Records were written to the destination.
    Copied(Copied),
    /// The destination already held exactly the source's records.
    Unchanged(SessionId),
}

/// What [`copy_store`] did, session by session.
#[derive(Debug, Default)]
pub struct CopyReport {
    /// Sessions written (wholly, or the records a resumed copy lacked).
    pub copied: Vec<Copied>,
    /// Sessions the destination already held identically.
    pub unchanged: Vec<SessionId>,
    /// Sessions that could not be copied, and why; the others were copied.
    pub failed: Vec<(SessionId, CopyError)>,
}

/// Why a session could not be copied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// The source session could not be read.
    #[error("cannot read the source")]
    Source(#[source] OpenError),
    /// The destination session could not be created or opened.
    #[error("cannot write the destination")]
    Destination(#[source] OpenError),
    /// Writing to the destination failed.
    #[error("cannot write the destination")]
    Append(#[from] AppendError),
    /// Reading back the destination failed.
    #[error("cannot read the destination")]
    ReadBack(#[from] ReadError),
    /// The destination holds a different session under the same id.
    #[error(
        "{location} already holds session {session} with different records ({problem}); it was \
         left untouched: remove it or copy into another store"
    )]
    Conflict {
        /// The session.
        session: SessionId,
        /// The destination session's location.
        location: String,
        /// Where they differ.
        problem: String,
    },
    /// The copy does not open as a session (the source has damage only a
    /// full open detects, such as a gap in `seq`s).
    #[error("the copy at {location} does not verify, so it was removed")]
    Verify {
        /// The destination session's location.
        location: String,
        /// What opening it found.
        #[source]
        source: OpenError,
    },
}

/// Copies every session of `from` into `to`, byte for byte (see the module
/// docs): sessions already identical are skipped, half-copied ones are
/// completed, and one session's failure does not stop the others.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// use std::sync::Arc;
/// use cairn::{EntryBody, FileBackend, Message, NewSession, Role, Store};
/// use cairn_sqlite::SqliteBackend;
/// use cairn_stores::copy_store;
///
/// let files = FileBackend::new(dir.path().join("sessions"));
/// let s = Store::with_backend(Arc::new(files.clone())).create(NewSession::default())?;
/// s.append(EntryBody::Message(Message::text(Role::User, "hello")))?;
/// drop(s);
/// let db = SqliteBackend::open(dir.path().join("cairn.db"))?;
/// let report = copy_store(&files, &db)?;
/// assert_eq!((report.copied.len(), report.failed.len()), (1, 0));
/// // Running it again changes nothing.
/// assert_eq!(copy_store(&files, &db)?.unchanged.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// Only listing the source: per-session failures are in
/// [`CopyReport::failed`].
pub fn copy_store(from: &dyn Backend, to: &dyn Backend) -> Result<CopyReport, StoreError> {
    let mut ids = from.list()?;
    ids.sort();
    let mut report = CopyReport::default();
    for id in ids {
        match copy_session(from, to, &id) {
            Ok(CopyOutcome::Copied(c)) => report.copied.push(c),
            Ok(CopyOutcome::Unchanged(id)) => report.unchanged.push(id),
            Err(e) => report.failed.push((id, e)),
        }
    }
    Ok(report)
}

/// Copies one session of `from` into `to`, byte for byte (see the module docs).
///
/// # Errors
///
/// [`CopyError`]: the source cannot be read, the destination cannot be
/// written, holds a different session, or the copy does not verify (it is
/// then removed, if this call created it).
pub fn copy_session(
    from: &dyn Backend,
    to: &dyn Backend,
    id: &SessionId,
) -> Result<CopyOutcome, CopyError> {
    let was_live = from.writer_active(id);
    let mut dest: Option<Box<dyn Log>> = match to.open(id, Access::Write, &mut |_| Ok(())) {
        Ok(opened) => Some(opened.log),
        Err(OpenError::NotFound { .. }) => None,
        Err(e) => return Err(CopyError::Destination(e)),
    };
    let already_there = dest.as_ref().map_or(0, |d| d.len());
    let created = dest.is_none();
    let mut copy = Copier {
        to,
        id,
        dest: &mut dest,
        already_there,
        batch: Vec::new(),
        batch_bytes: 0,
        records: 0,
        bytes: 0,
        failure: None,
    };
    let scanned = from.open(id, Access::Read, &mut |raw| copy.line(raw));
    let result = match (scanned, copy.failure.take()) {
        (_, Some(failure)) => Err(failure),
        (Err(e), None) => Err(CopyError::Source(e)),
        (Ok(opened), None) => copy.finish().map(|()| opened.torn),
    };
    let (records, bytes) = (copy.records, copy.bytes);
    drop(dest);
    let torn_ignored = match result {
        Ok(torn) => torn,
        Err(e) => {
            if created {
                let _ = to.remove(id);
            }
            return Err(e);
        }
    };
    if records == already_there {
        return Ok(CopyOutcome::Unchanged(id.clone()));
    }
    let location = to.location(id);
    match Session::open(to, id, Access::Read) {
        Ok(s) if s.len() == records => {}
        Ok(s) => {
            return Err(CopyError::Conflict {
                session: id.clone(),
                location,
                problem: format!("{} records after copying {records}", s.len()),
            });
        }
        Err(source) => {
            if created {
                let _ = to.remove(id);
            }
            return Err(CopyError::Verify { location, source });
        }
    }
    Ok(CopyOutcome::Copied(Copied {
        id: id.clone(),
        records,
        bytes,
        already_there,
        torn_ignored,
        was_live,
    }))
}

/// The visitor's state while streaming one session.
struct Copier<'a> {
    to: &'a dyn Backend,
    id: &'a SessionId,
    dest: &'a mut Option<Box<dyn Log>>,
    already_there: u64,
    batch: Vec<Vec<u8>>,
    batch_bytes: usize,
    records: u64,
    bytes: u64,
    /// The first failure; the visitor then stops the scan.
    failure: Option<CopyError>,
}

impl Copier<'_> {
    fn line(&mut self, raw: RawLine<'_>) -> Result<(), OpenError> {
        match self.step(raw) {
            Ok(()) => {
                self.records += 1;
                self.bytes += raw.bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.failure = Some(e);
                // Stops the scan; the caller reports `failure` instead.
                Err(OpenError::NotASession {
                    location: self.to.location(self.id),
                    problem: "the copy stopped".into(),
                })
            }
        }
    }

    fn step(&mut self, raw: RawLine<'_>) -> Result<(), CopyError> {
        let conflict = |problem: String| CopyError::Conflict {
            session: self.id.clone(),
            location: self.to.location(self.id),
            problem,
        };
        let Some(dest) = self.dest.as_ref() else {
            // The first line: the header creates the session.
            *self.dest = Some(
                self.to
                    .create(self.id, raw.bytes)
                    .map_err(CopyError::Destination)?,
            );
            return Ok(());
        };
        if raw.index < self.already_there {
            if dest.read(raw.index)? != raw.bytes {
                return Err(conflict(format!("line {} differs", raw.index + 1)));
            }
            return Ok(());
        }
        self.batch.push(raw.bytes.to_vec());
        self.batch_bytes += raw.bytes.len();
        if self.batch.len() >= BATCH_LINES || self.batch_bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), CopyError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        if let Some(dest) = self.dest.as_ref() {
            dest.append(&self.batch)?;
        }
        self.batch.clear();
        self.batch_bytes = 0;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), CopyError> {
        self.flush()?;
        if self.records < self.already_there {
            return Err(CopyError::Conflict {
                session: self.id.clone(),
                location: self.to.location(self.id),
                problem: format!(
                    "it has {} records, the source only {}",
                    self.already_there, self.records
                ),
            });
        }
        if let Some(dest) = self.dest.as_ref() {
            dest.sync()?;
        }
        Ok(())
    }
}
