//! An open session file ([`Log`]): the line index (the lines a persisted
//! index covers read from its length blocks, the offset of every line after
//! them kept), reads by sequence number, appends and syncs, and the
//! poisoning that refuses writes after a failed write or sync.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::super::{LineAt, LineReader, Log};
use super::lock::{remember_unsynced, write_lock_note};
use super::scan::read_exact_at;
use crate::error::{AppendError, Damage, ReadError};
use crate::frame;
use crate::index::LineTable;
use crate::vfs::{Vfs, VfsFile, write_atomic};

/// An open session file.
#[derive(Debug)]
pub(super) struct FileLog {
    location: String,
    file: Arc<dyn VfsFile>,
    /// Reads lines by position (shared with the contexts that keep
    /// messages to read later; holds no lock).
    lines: Arc<Lines>,
    lock: Option<Arc<dyn VfsFile>>,
    /// Where every line is; the end of the last is `end`.
    index: RwLock<Index>,
    /// Set by the first failed write or sync; refuses writes afterwards.
    poisoned: Mutex<Option<String>>,
    /// The end of what the last successful sync covered (at open: the
    /// whole file, whose dirty pages, if any, are still queued).
    synced_end: std::sync::atomic::AtomicU64,
    /// Where a writer saves the session's persisted index.
    index_file: Option<(Arc<dyn Vfs>, PathBuf)>,
}

/// The session file read by position: [`LineReader`].
#[derive(Debug)]
struct Lines {
    location: String,
    file: Arc<dyn VfsFile>,
}

impl LineReader for Lines {
    fn location(&self) -> &str {
        &self.location
    }

    fn read_at(&self, seq: u64, offset: u64, len: u64) -> Result<Vec<u8>, ReadError> {
        let len = usize::try_from(len).map_err(|_| ReadError::NoSuchRecord(seq))?;
        let mut buf = vec![0u8; len];
        read_exact_at(&*self.file, &mut buf, offset).map_err(|source| ReadError::Io {
            location: self.location.clone(),
            source,
        })?;
        frame::check(&buf).map_err(|d| {
            ReadError::Damaged(Box::new(Damage {
                location: self.location.clone(),
                line: seq + 1,
                offset,
                problem: format!(
                    "{d} (the line was checked when it was written, and again when an open \
                     parsed it; it is damaged on disk or was changed since: `cairn fsck` checks \
                     every line)"
                ),
            }))
        })?;
        Ok(buf)
    }
}

#[derive(Debug)]
struct Index {
    /// The first lines, as a persisted index gives them.
    base: Option<Arc<LineTable>>,
    /// Offsets of the lines after `base`.
    offsets: Vec<u64>,
    end: u64,
}

impl Index {
    fn base_records(&self) -> u64 {
        self.base.as_ref().map_or(0, |b| b.records())
    }

    fn len(&self) -> u64 {
        self.base_records() + self.offsets.len() as u64
    }

    /// Where line `seq` starts and ends; `Err` with why the persisted
    /// index cannot say (a damaged length block).
    fn span(&self, seq: u64) -> Option<Result<(u64, u64), String>> {
        let base = self.base_records();
        match &self.base {
            Some(b) if seq < base => Some(b.span(seq).map(|(at, len)| (at, at + len))),
            _ => {
                let i = usize::try_from(seq - base).ok()?;
                let start = *self.offsets.get(i)?;
                Some(Ok((
                    start,
                    self.offsets.get(i + 1).copied().unwrap_or(self.end),
                )))
            }
        }
    }
}

impl FileLog {
    pub(super) fn new(
        location: String,
        file: Arc<dyn VfsFile>,
        lock: Option<Arc<dyn VfsFile>>,
        base: Option<Arc<LineTable>>,
        offsets: Vec<u64>,
        end: u64,
    ) -> FileLog {
        FileLog {
            lines: Arc::new(Lines {
                location: location.clone(),
                file: Arc::clone(&file),
            }),
            location,
            file,
            lock,
            index: RwLock::new(Index { base, offsets, end }),
            poisoned: Mutex::new(None),
            synced_end: std::sync::atomic::AtomicU64::new(end),
            index_file: None,
        }
    }

    /// The log, saving the persisted index at `path` (writers only).
    pub(super) fn with_index(mut self, vfs: Arc<dyn Vfs>, path: PathBuf) -> FileLog {
        if self.lock.is_some() {
            self.index_file = Some((vfs, path));
        }
        self
    }

    /// Where line `seq` begins and ends: `NoSuchRecord` past the end,
    /// `Damaged` when the persisted index's length block for it is damaged.
    fn span(&self, seq: u64) -> Result<(u64, u64), ReadError> {
        let span = self
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .span(seq)
            .ok_or(ReadError::NoSuchRecord(seq))?;
        span.map_err(|why| {
            ReadError::Damaged(Box::new(Damage {
                location: format!("{} (its persisted index)", self.location),
                line: seq + 1,
                offset: 0,
                problem: format!("the index {why}"),
            }))
        })
    }

    fn check_writable(&self) -> Result<(), AppendError> {
        if self.lock.is_none() {
            return Err(AppendError::ReadOnly {
                session: self.location.clone(),
            });
        }
        if let Some(cause) = self
            .poisoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            return Err(AppendError::Poisoned {
                session: self.location.clone(),
                cause: cause.clone(),
            });
        }
        Ok(())
    }

    fn poison(&self, action: &'static str, source: io::Error) -> AppendError {
        let mut p = self.poisoned.lock().unwrap_or_else(PoisonError::into_inner);
        if p.is_none() {
            *p = Some(format!("{action} failed: {source}"));
            // Tell the next writer what may not have reached the disk: in
            // this process, and in the lock file for other processes.
            if let Some(lock) = &self.lock {
                let from = self.synced_end.load(std::sync::atomic::Ordering::Acquire);
                remember_unsynced(&self.location, from);
                if write_lock_note(&**lock, Some(from)).is_err() && action == "sync" {
                    // No marker for another process: a failed sync may have
                    // dropped the pages after `from`, so keep none of them
                    // (records not yet acknowledged as durable, which a power
                    // loss could take anyway). Nothing more can be done if
                    // this fails too: the in-process marker remains.
                    let _ = self.file.set_len(from);
                }
            }
        }
        AppendError::Io {
            action,
            location: self.location.clone(),
            source,
        }
    }
}

impl Log for FileLog {
    fn location(&self) -> &str {
        &self.location
    }

    fn len(&self) -> u64 {
        self.index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn read(&self, seq: u64) -> Result<Vec<u8>, ReadError> {
        let (start, end) = self.span(seq)?;
        self.lines.read_at(seq, start, end - start)
    }

    fn append(&self, lines: &[Vec<u8>]) -> Result<(), AppendError> {
        self.check_writable()?;
        let mut idx = self.index.write().unwrap_or_else(PoisonError::into_inner);
        // One write call for the whole batch (a single line needs no copy).
        let joined;
        let buf: &[u8] = match lines {
            [one] => one,
            many => {
                joined = many.concat();
                &joined
            }
        };
        self.file
            .write_all_at(buf, idx.end)
            .map_err(|e| self.poison("write", e))?;
        for l in lines {
            let at = idx.end;
            idx.offsets.push(at);
            idx.end += l.len() as u64;
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), AppendError> {
        self.check_writable()?;
        let covers = self.byte_len();
        self.file.sync_data().map_err(|e| self.poison("sync", e))?;
        self.synced_end
            .fetch_max(covers, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    fn is_writer(&self) -> bool {
        self.lock.is_some()
    }

    fn byte_len(&self) -> u64 {
        self.index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .end
    }

    fn offset(&self, seq: u64) -> u64 {
        let idx = self.index.read().unwrap_or_else(PoisonError::into_inner);
        match idx.span(seq) {
            Some(Ok((at, _))) => at,
            Some(Err(_)) | None => 0,
        }
    }

    fn line_at(&self, seq: u64) -> Option<LineAt> {
        // A damaged length block: no place to keep; reading the record
        // (`read`) reports the damage.
        let (start, end) = self.span(seq).ok()?;
        Some(LineAt {
            reader: Arc::clone(&self.lines) as Arc<dyn LineReader>,
            offset: start,
            len: end - start,
        })
    }

    fn poisoned(&self) -> Option<String> {
        self.poisoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn keeps_index(&self) -> bool {
        self.index_file.is_some()
    }

    fn save_index(&self, bytes: &[u8]) {
        if let Some((vfs, path)) = &self.index_file {
            let _ = write_atomic(&**vfs, path, bytes);
        }
    }
}
