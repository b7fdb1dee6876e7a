//! The storage seam: a [`Backend`] holds many sessions, each a [`Log`] of
//! framed lines (the same bytes whatever the backend). The core decodes lines
//! and enforces every invariant; a backend stores, locks and syncs.
//!
//! Implementations: [`FileBackend`] (one JSON-lines file per session, the
//! embedded default) and [`MemoryBackend`] (tests and ephemeral hosts).

mod file;
mod memory;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use file::FileBackend;
pub use memory::MemoryBackend;

use crate::error::{AppendError, IoFailure, OpenError, ReadError, StoreError};
use crate::id::SessionId;
pub use crate::index::{IndexBytes, IndexedPrefix};
pub use crate::source::{LineAt, LineReader};
use crate::summary::SessionSummary;

/// Whether an open may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Takes the session's writer lock and repairs a torn tail.
    Write,
    /// Takes no lock, never repairs, and ignores an incomplete tail.
    Read,
}

/// One stored line handed to the open-time visitor.
#[derive(Debug, Clone, Copy)]
pub struct RawLine<'a> {
    /// Position in the log, from 0 (the record's `seq` if intact).
    pub index: u64,
    /// Byte offset of the line (0 where the backend has no offsets).
    pub offset: u64,
    /// The line, newline included, with its checksum already verified.
    pub bytes: &'a [u8],
}

/// A torn tail found at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Byte offset where the torn bytes began (the log's new length).
    pub offset: u64,
    /// How many bytes were torn.
    pub len: u64,
    /// Where the cut bytes were saved (writers only; readers cut nothing).
    pub saved_to: Option<String>,
    /// Whether the bytes were cut from the log (writers) or only ignored (readers).
    pub cut: bool,
    /// Why the first torn line is not a record.
    pub problem: String,
}

/// What [`Backend::open`] returns.
#[derive(Debug)]
pub struct Opened {
    /// The session's log.
    pub log: Box<dyn Log>,
    /// The torn tail that was cut (writers) or ignored (readers), if any.
    pub torn: Option<TornTail>,
}

/// What [`Backend::open`] returns: the opened log, or why it could not be
/// opened.
pub type Opening = Result<Opened, OpenError>;

/// What [`IndexStore::open_from`] found.
#[derive(Debug)]
pub enum IndexedOpen {
    /// The log still begins with the indexed lines: it is open, and the
    /// visitor saw only the lines after them.
    Opened(Opened),
    /// The index does not describe the log (why, for the open report);
    /// nothing was opened or locked, the caller opens the whole log.
    Stale(String),
}

/// Cheap facts about a stored session, used to validate cached listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stamp {
    /// Size of the log (bytes for files).
    pub len: u64,
    /// Modification time in nanoseconds (0 where unknown).
    pub modified_ns: u128,
}

/// The visitor [`Backend::open`] calls for each intact line, in order.
pub type Visitor<'v> = dyn FnMut(RawLine<'_>) -> Result<(), OpenError> + 'v;

/// A backend's persisted indexes (`docs/STORES.md` §4): a cache per
/// session, derived from its log, that lets an open skip parsing the lines
/// it describes. Deleting one is always safe.
pub trait IndexStore {
    /// The session's index, if it exists.
    fn load_index(&self, id: &SessionId) -> Option<Vec<u8>>;

    /// The session's index as an open reads it: a range at a time, only
    /// the blocks it needs. The default loads the whole index
    /// ([`IndexStore::load_index`]); a backend that can read part of it in
    /// place (a file) overrides it.
    fn open_index(&self, id: &SessionId) -> Option<Arc<dyn IndexBytes>> {
        self.load_index(id)
            .map(|b| Arc::new(b) as Arc<dyn IndexBytes>)
    }

    /// Opens a session like [`Backend::open`] when `from.prefix` is `None`;
    /// given one, trusting that the log still begins with the lines it
    /// describes: the backend checks that the log is at least `prefix.end`
    /// long and that its last indexed line is intact with the CRC-32C
    /// `prefix.last_line_crc`, then verifies and hands to `visit` only the
    /// lines after the prefix (their `index` continuing from
    /// `prefix.records`), cutting or ignoring a torn tail after it as `open`
    /// does. When the check fails it returns [`IndexedOpen::Stale`] having
    /// opened and locked nothing.
    ///
    /// # Errors
    ///
    /// As [`Backend::open`].
    fn open_from(
        &self,
        from: OpenFrom<'_>,
        visit: &mut Visitor<'_>,
    ) -> Result<IndexedOpen, OpenError>;
}

/// What [`IndexStore::open_from`] opens: session `id` for `access`, whole
/// (`prefix` is `None`) or after the prefix a persisted index describes.
#[derive(Debug, Clone)]
pub struct OpenFrom<'a> {
    /// The session.
    pub id: &'a SessionId,
    /// Reading or writing.
    pub access: Access,
    /// The indexed prefix to open after, if any.
    pub prefix: Option<IndexedPrefix>,
}

/// Storage for many sessions.
pub trait Backend: Send + Sync + fmt::Debug {
    /// A description of the store for messages, e.g. its directory.
    fn describe(&self) -> String;

    /// Where a session lives, for messages (its file path, for files).
    fn location(&self, id: &SessionId) -> String;

    /// Creates a session whose first line is `header`, durably (the header and
    /// the session's existence survive power loss when this returns), and
    /// returns it open for writing with its writer lock held.
    ///
    /// # Errors
    ///
    /// [`OpenError::AlreadyExists`], or I/O errors.
    fn create(&self, id: &SessionId, header: &[u8]) -> Result<Box<dyn Log>, OpenError>;

    /// Creates a session holding `lines` (the header first) and returns it
    /// open for writing, like [`Backend::create`]: when this returns every
    /// line is durable. Used by `Store::fork`, whose copy must never be seen
    /// half made. The default creates, appends and syncs; a backend that can
    /// publish the session only once it is complete (the file backend, under
    /// a temporary name) overrides it, so a crash leaves no partial session.
    ///
    /// # Errors
    ///
    /// As [`Backend::create`]; an append or sync failure as [`OpenError::Io`].
    fn create_with(&self, id: &SessionId, lines: &[Vec<u8>]) -> Result<Box<dyn Log>, OpenError> {
        let (header, rest) = lines.split_first().ok_or_else(|| OpenError::NotASession {
            location: self.location(id),
            problem: "a session needs at least its header".into(),
        })?;
        let log = self.create(id, header)?;
        log.append(rest).and_then(|()| log.sync()).map_err(|e| {
            OpenError::Io(IoFailure::new(
                "write the records of",
                self.location(id),
                std::io::Error::other(e),
            ))
        })?;
        Ok(log)
    }

    /// Opens a session, calling `visit` for each intact line in order. With
    /// [`Access::Write`] the writer lock is taken and a torn tail is cut (and
    /// saved); with [`Access::Read`] nothing is locked or changed.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotFound`], [`OpenError::InUse`], [`OpenError::Damaged`]
    /// for damage anywhere but the tail, errors returned by `visit`, or I/O errors.
    fn open(&self, id: &SessionId, access: Access, visit: &mut Visitor<'_>) -> Opening;

    /// Every stored line of a session as it is, damaged ones included (a
    /// last line without its newline too), for [`crate::fsck`], which lists
    /// every problem where an open stops at the first. Takes no lock and
    /// changes nothing; refuses what [`Backend::open`] refuses before it
    /// reads (no such session, a file that is not a regular file).
    ///
    /// The default collects the lines an open hands to its visitor, so it
    /// fails where the backend's own open fails; a backend that can store a
    /// damaged line should override it.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotFound`], [`OpenError::NotASession`] for a symlink or
    /// other non-file, or I/O errors.
    fn stored_lines(&self, id: &SessionId) -> Result<Vec<Vec<u8>>, OpenError> {
        let mut lines = Vec::new();
        self.open(id, Access::Read, &mut |raw| {
            lines.push(raw.bytes.to_vec());
            Ok(())
        })?;
        Ok(lines)
    }

    /// The backend's persisted indexes (`docs/STORES.md` §4), if it
    /// keeps them. The default keeps none.
    fn indexes(&self) -> Option<&dyn IndexStore> {
        None
    }

    /// The ids of all sessions, in no particular order.
    ///
    /// # Errors
    ///
    /// I/O errors reading the store.
    fn list(&self) -> Result<Vec<SessionId>, StoreError>;

    /// Cheap facts that change whenever the session's log changes.
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`] or I/O errors.
    fn stamp(&self, id: &SessionId) -> Result<Stamp, StoreError>;

    /// Every session with its [`Stamp`], in no particular order: what a
    /// listing checks its catalog against. A session whose stamp cannot be
    /// taken (removed meanwhile) is left out. The default is
    /// [`Backend::list`] then [`Backend::stamp`] of each.
    ///
    /// # Errors
    ///
    /// I/O errors reading the store.
    fn stamps(&self) -> Result<Vec<(SessionId, Stamp)>, StoreError> {
        Ok(self
            .list()?
            .into_iter()
            .filter_map(|id| self.stamp(&id).ok().map(|s| (id, s)))
            .collect())
    }

    /// Whether a writer currently holds the session.
    fn writer_active(&self, id: &SessionId) -> bool;

    /// Removes a session.
    ///
    /// # Errors
    ///
    /// [`OpenError::InUse`] (as [`StoreError::Open`]) when a writer holds it,
    /// [`StoreError::NoSuchSession`], or I/O errors.
    fn remove(&self, id: &SessionId) -> Result<(), StoreError>;

    /// Loads the listing cache, if the backend keeps one and it exists
    /// (`None` also for a stored catalog that does not read: the listing
    /// then rebuilds it from the logs).
    fn load_catalog(&self) -> Option<Catalog>;

    /// Replaces the listing cache (best effort: it is only a cache).
    fn save_catalog(&self, catalog: &Catalog);

    /// Claims, for this process, one session whose last operation was
    /// interrupted (open, no writer), other than those in `skip`, so that
    /// workers recovering at the same time each get a different one: the
    /// next [`Backend::open`] for writing of it in this process holds it.
    /// The default is [`Claim::Unsupported`]: callers then list the
    /// interrupted sessions and open each for writing, skipping those
    /// another writer holds ([`OpenError::InUse`]).
    ///
    /// # Errors
    ///
    /// I/O errors reading the store.
    fn claim_interrupted(&self, skip: &[SessionId]) -> Result<Claim, StoreError> {
        let _ = skip;
        Ok(Claim::Unsupported)
    }
}

/// What [`Backend::claim_interrupted`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// A session claimed for this process.
    Claimed(SessionId),
    /// No interrupted session is left to claim.
    NoneLeft,
    /// The backend cannot claim; list and open instead.
    Unsupported,
}

/// One session's log: framed lines, appended in order.
pub trait Log: Send + Sync + fmt::Debug {
    /// Where the log lives, for messages.
    fn location(&self) -> &str;

    /// Number of lines (records).
    fn len(&self) -> u64;

    /// Whether the log has no records (never true for an opened session).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads line `seq` (newline included), verifying its checksum.
    ///
    /// # Errors
    ///
    /// [`ReadError::NoSuchRecord`], [`ReadError::Damaged`] if it no longer
    /// verifies, or I/O errors.
    fn read(&self, seq: u64) -> Result<Vec<u8>, ReadError>;

    /// Writes complete lines at the end. They are visible to readers that
    /// open afterwards but durable only after [`Log::sync`] (or at once, for
    /// backends whose writes are durable).
    ///
    /// # Errors
    ///
    /// [`AppendError::ReadOnly`], [`AppendError::Poisoned`], or
    /// [`AppendError::Io`], which poisons the log.
    fn append(&self, lines: &[Vec<u8>]) -> Result<(), AppendError>;

    /// Takes complete lines for the end of the log, to be written by the
    /// next [`Log::sync`] — or sooner: by the next [`Log::append`], or when
    /// the lines waiting grow large (a read of one gives it from memory).
    /// For a caller that syncs before it acknowledges them (group commit):
    /// a batch is written with one call, and deferring appenders do not
    /// extend the file while a sync of it runs. Readers that open before
    /// the lines are written do not see them; a poisoned log never writes
    /// them. The default writes them at once.
    ///
    /// # Errors
    ///
    /// As [`Log::append`].
    fn defer(&self, lines: &[Vec<u8>]) -> Result<(), AppendError> {
        self.append(lines)
    }

    /// Makes every line written so far durable — the deferred ones
    /// ([`Log::defer`]) written first. May run concurrently with
    /// [`Log::append`]; covers at least the lines written or deferred before
    /// it was called.
    ///
    /// # Errors
    ///
    /// [`AppendError::Poisoned`] or [`AppendError::Io`], which poisons the log.
    fn sync(&self) -> Result<(), AppendError>;

    /// Whether this handle holds the writer lock.
    fn is_writer(&self) -> bool;

    /// Size of the log in bytes (lines, newlines included; deferred lines
    /// count, whether or not they are in the file yet).
    fn byte_len(&self) -> u64;

    /// Byte offset of line `seq`, for messages (0 where the backend has no
    /// offsets or no such line).
    fn offset(&self, seq: u64) -> u64 {
        let _ = seq;
        0
    }

    /// Where line `seq` is, with a reader of it that holds neither this
    /// handle nor its writer lock: what a context keeps to read a message
    /// only when it is first asked for ([`crate::ContextMessage::message`]).
    /// The default is `None`: the backend cannot read a line cheaply by
    /// position, and the open decodes the context's messages at once.
    fn line_at(&self, seq: u64) -> Option<LineAt> {
        let _ = seq;
        None
    }

    /// Makes the log refuse every later write and sync, as a failed sync
    /// does: for a sync that ended without an answer (it panicked), so
    /// nothing builds on what it may or may not have made durable, and no
    /// deferred line of a refused append is written later. The default
    /// does nothing (for backends whose syncs cannot fail).
    fn fail_sync(&self, cause: &str) {
        let _ = cause;
    }

    /// Why the log refuses writes, once a write or sync has failed (`None`
    /// while healthy, and always for backends whose writes cannot fail).
    fn poisoned(&self) -> Option<String> {
        None
    }

    /// Whether [`Log::save_index`] keeps a persisted index (a writer's log
    /// of a backend with an [`IndexStore`]). The default keeps none.
    fn keeps_index(&self) -> bool {
        false
    }

    /// Replaces the session's persisted index, atomically. Called only by
    /// the writer, for lines it knows are durable (so an index never
    /// describes lines a power loss could take): at an open, which made the
    /// whole log durable, or at close once every record is. Best effort:
    /// it is only a cache, checked against the log at every open.
    fn save_index(&self, bytes: &[u8]) {
        let _ = bytes;
    }
}

/// The version of the catalog format (`docs/STORES.md` §1, "Catalog").
const CATALOG_VERSION: u32 = 1;

/// The listing cache: each session's summary and the [`Stamp`] of the log
/// it was computed from. A backend stores it (files: `catalog.json`) or
/// makes it from summaries it keeps current (SQLite); it is never trusted
/// over the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// By session id.
    pub sessions: BTreeMap<SessionId, CatalogEntry>,
}

/// One session in the [`Catalog`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// The log's stamp when the summary was computed.
    pub stamp: Stamp,
    /// The summary.
    pub summary: SessionSummary,
}

#[derive(Serialize, Deserialize)]
struct CatalogFile {
    version: u32,
    sessions: BTreeMap<SessionId, CatalogEntry>,
}

impl Catalog {
    /// The catalog as stored (`{"version": 1, "sessions": {…}}`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let file = CatalogFile {
            version: CATALOG_VERSION,
            sessions: self.sessions.clone(),
        };
        // Serializing string-keyed maps of plain data cannot fail.
        serde_json::to_vec(&file).unwrap_or_default()
    }

    /// Reads a stored catalog; `None` when it does not parse or has another
    /// version (it is then rebuilt from the logs).
    pub fn from_bytes(bytes: &[u8]) -> Option<Catalog> {
        let file: CatalogFile = serde_json::from_slice(bytes).ok()?;
        (file.version == CATALOG_VERSION).then_some(Catalog {
            sessions: file.sessions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Catalog;

    #[test]
    fn a_catalog_of_another_version_is_not_read() {
        let c = Catalog::default();
        assert_eq!(Catalog::from_bytes(&c.to_bytes()), Some(c));
        assert_eq!(Catalog::from_bytes(br#"{"version":2,"sessions":{}}"#), None);
        assert_eq!(Catalog::from_bytes(b"not json"), None);
    }
}
