//! The file backend: one JSON-lines file per session in one directory.
//!
//! Layout (see `docs/STORES.md` §1): `<dir>/<id>.jsonl` is the
//! log, `<dir>/<id>.lock` the writer lock (holding the writer's pid), and
//! `<dir>/<id>.jsonl.torn-<time>` any torn tail cut at open. The catalog, a
//! listing cache, is `<dir>/../catalog.json`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::{
    Access, Backend, Catalog, IndexBytes, IndexStore, IndexedOpen, IndexedPrefix, Log, OpenFrom,
    Opened, Opening, Stamp, TornTail, Visitor,
};
use crate::error::{IoFailure, OpenError, StoreError};
use crate::id::SessionId;
use crate::vfs::{self, OpenMode, StdVfs, Vfs, VfsFile};

/// Sessions as JSON-lines files in one directory.
#[derive(Debug, Clone)]
pub struct FileBackend {
    dir: PathBuf,
    catalog: PathBuf,
    vfs: Arc<dyn Vfs>,
    /// Whether this backend has removed the temporaries of crashed creates
    /// (once, at its first write: `sweep_stale_creates`).
    swept: Arc<AtomicBool>,
}

mod lock;
mod log;
mod scan;

use lock::{
    forget_unsynced, remember_unsynced, rewrite, sweep_stale_creates, take_lock,
    unsynced_in_process, write_lock_note,
};
use log::FileLog;
use scan::{is_hole, read_exact_at, scan};

impl FileBackend {
    /// Sessions in `dir` on the real file system; the catalog is kept in
    /// `catalog.json` beside `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> FileBackend {
        FileBackend::with_vfs(dir, Arc::new(StdVfs))
    }

    /// Sessions in `dir` through the given I/O seam (for fault-injection tests).
    pub fn with_vfs(dir: impl Into<PathBuf>, vfs: Arc<dyn Vfs>) -> FileBackend {
        let dir = dir.into();
        let catalog = dir
            .parent()
            .map_or_else(|| dir.join("catalog.json"), |p| p.join("catalog.json"));
        FileBackend {
            dir,
            catalog,
            vfs,
            swept: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Creates the sessions directory (and missing parents) durably: each
    /// directory created is made permanent by syncing its parent, so the
    /// first session of a new store cannot vanish with its directory.
    fn ensure_dir(&self) -> io::Result<()> {
        let mut missing = Vec::new();
        let mut cur = Some(self.dir.as_path());
        while let Some(d) = cur.filter(|d| !d.as_os_str().is_empty()) {
            if self.vfs.metadata(d).is_ok() {
                break;
            }
            missing.push(d.to_path_buf());
            cur = d.parent();
        }
        if missing.is_empty() {
            return Ok(());
        }
        self.vfs.create_dir_all(&self.dir)?;
        for d in missing.iter().rev() {
            if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
                self.vfs.sync_dir(parent)?;
            }
        }
        Ok(())
    }

    /// The torn-tail rule of session files (`docs/FORMAT.md`, "Torn tail"),
    /// for tools that read a file themselves (`fsck`): whether the damage
    /// that begins with `first_damaged` — the first line that fails its
    /// framing, newline included if it has one, found at byte `offset` — is
    /// a torn tail that a writer cuts (and saves) and a reader ignores,
    /// rather than damage in the middle that refuses to open. It is when no
    /// intact line follows it (`intact_after` false), or when the line is a
    /// hole: it holds zeros where a write never reached the disk.
    ///
    /// ```
    /// use cairn::FileBackend;
    ///
    /// // A write lost at a power loss, then a later one that survived:
    /// let mut line = b"{\"seq\":3,\"ts\":".to_vec();
    /// line.extend_from_slice(&[0; 40]);
    /// line.extend_from_slice(b"{\"seq\":5,\"ts\":\"...\"}\n");
    /// assert!(FileBackend::is_torn_tail(&line, 1000, true));
    /// // A flipped bit in the middle of the file is not a torn tail.
    /// assert!(!FileBackend::is_torn_tail(b"{\"seq\":3,\"tz\":1}\n", 1000, true));
    /// ```
    pub fn is_torn_tail(first_damaged: &[u8], offset: u64, intact_after: bool) -> bool {
        !intact_after || is_hole(first_damaged, offset)
    }

    /// The directory holding the session files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of a session's log file.
    pub fn path(&self, id: &SessionId) -> PathBuf {
        self.dir.join(format!("{id}.jsonl"))
    }

    /// The path of a session's writer lock file.
    pub(crate) fn lock_path(&self, id: &SessionId) -> PathBuf {
        self.dir.join(format!("{id}.lock"))
    }

    /// Removes the temporary files of crashed creates, once per backend,
    /// at its first write ([`sweep_stale_creates`]).
    fn sweep_stale_creates_once(&self) {
        if !self.swept.swap(true, std::sync::atomic::Ordering::Relaxed) {
            sweep_stale_creates(&*self.vfs, &self.dir, |id| self.lock_path(id));
        }
    }
}

impl Backend for FileBackend {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn location(&self, id: &SessionId) -> String {
        self.path(id).display().to_string()
    }

    fn create(&self, id: &SessionId, header: &[u8]) -> Result<Box<dyn Log>, OpenError> {
        self.create_with(id, &[header.to_vec()])
    }

    fn create_with(&self, id: &SessionId, lines: &[Vec<u8>]) -> Result<Box<dyn Log>, OpenError> {
        let path = self.path(id);
        let location = path.display().to_string();
        let io_err = |action, source| OpenError::Io(IoFailure::new(action, &location, source));
        if lines.is_empty() {
            return Err(OpenError::NotASession {
                location,
                problem: "a session needs at least its header".into(),
            });
        }
        self.ensure_dir()
            .map_err(|e| io_err("create the directory of", e))?;
        self.sweep_stale_creates_once();
        let (lock, _) = take_lock(&*self.vfs, &self.lock_path(id), id)?;
        let exists = || OpenError::AlreadyExists {
            session: id.to_string(),
            location: self.describe(),
        };
        if self.vfs.metadata(&path).is_ok() {
            return Err(exists());
        }
        // Every line is written and synced under a temporary name, then the
        // session's name is added atomically: a crash leaves either no
        // session or all of it — never an empty file that no one can open,
        // nor the prefix of a fork that looks complete.
        let tmp = self.dir.join(format!(".{id}.jsonl.new"));
        let _ = self.vfs.remove_file(&tmp); // left by a create that crashed
        let file = self
            .vfs
            .open(&tmp, OpenMode::CreateNew)
            .map_err(|e| io_err("create", e))?;
        let mut offsets = Vec::with_capacity(lines.len());
        let mut end = 0u64;
        let written = lines
            .iter()
            .try_for_each(|l| {
                offsets.push(end);
                file.write_all_at(l, end)?;
                end += l.len() as u64;
                Ok(())
            })
            .and_then(|()| file.sync_data())
            .map_err(|e| {
                let action = match lines.len() {
                    1 => "write the header of",
                    _ => "write the records of",
                };
                io_err(action, e)
            })
            .and_then(|()| match self.vfs.hard_link(&tmp, &path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(exists()),
                // Without hard links: under the writer lock, after checking
                // above that the name is free, a rename cannot replace a session.
                Err(e) if e.kind() == io::ErrorKind::Unsupported => self
                    .vfs
                    .rename(&tmp, &path)
                    .map_err(|e| io_err("create", e)),
                Err(e) => Err(io_err("create", e)),
            });
        drop(file);
        let _ = self.vfs.remove_file(&tmp);
        written?;
        self.vfs
            .sync_dir(&self.dir)
            .map_err(|e| io_err("sync the directory of", e))?;
        let file = self
            .vfs
            .open(&path, OpenMode::ReadWrite)
            .map_err(|e| io_err("open", e))?;
        Ok(Box::new(
            FileLog::new(location, file, Some(lock), None, offsets, end)
                .with_index(Arc::clone(&self.vfs), self.index_path(id)),
        ))
    }

    fn open(&self, id: &SessionId, access: Access, visit: &mut Visitor<'_>) -> Opening {
        match self.open_from(
            OpenFrom {
                id,
                access,
                prefix: None,
            },
            visit,
        )? {
            IndexedOpen::Opened(o) => Ok(o),
            // Without a prefix there is nothing to find stale.
            IndexedOpen::Stale(why) => Err(OpenError::NotASession {
                location: self.location(id),
                problem: why,
            }),
        }
    }

    fn indexes(&self) -> Option<&dyn IndexStore> {
        Some(self)
    }

    fn stored_lines(&self, id: &SessionId) -> Result<Vec<Vec<u8>>, OpenError> {
        let path = self.regular_file(id)?;
        let bytes = vfs::read_all(&*self.vfs, &path).map_err(|source| {
            OpenError::Io(IoFailure::new("read", path.display().to_string(), source))
        })?;
        Ok(bytes
            .split_inclusive(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect())
    }

    fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        let names = match self.vfs.read_dir(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            r => {
                r.map_err(|source| StoreError::Io(IoFailure::new("list", self.describe(), source)))?
            }
        };
        Ok(names
            .iter()
            .filter_map(|n| n.strip_suffix(".jsonl"))
            .filter_map(|n| SessionId::parse(n).ok())
            .collect())
    }

    fn stamps(&self) -> Result<Vec<(SessionId, Stamp)>, StoreError> {
        let want = |n: &str| n.ends_with(".jsonl");
        let entries = match self.vfs.read_dir_metadata(&self.dir, &want) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            r => {
                r.map_err(|source| StoreError::Io(IoFailure::new("list", self.describe(), source)))?
            }
        };
        Ok(entries
            .into_iter()
            .filter_map(|(name, m)| {
                let id = SessionId::parse(name.strip_suffix(".jsonl")?).ok()?;
                let m = m.ok()?;
                Some((
                    id,
                    Stamp {
                        len: m.len,
                        modified_ns: m.modified_ns,
                    },
                ))
            })
            .collect())
    }

    fn stamp(&self, id: &SessionId) -> Result<Stamp, StoreError> {
        match self.vfs.metadata(&self.path(id)) {
            Ok(m) => Ok(Stamp {
                len: m.len,
                modified_ns: m.modified_ns,
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StoreError::NoSuchSession {
                query: id.to_string(),
                store: self.describe(),
            }),
            Err(source) => Err(StoreError::Io(IoFailure::new(
                "inspect",
                self.location(id),
                source,
            ))),
        }
    }

    fn writer_active(&self, id: &SessionId) -> bool {
        let Ok(f) = self.vfs.open(&self.lock_path(id), OpenMode::Read) else {
            return false;
        };
        // Taking the lock and dropping it at once: if we could take it, nobody holds it.
        matches!(f.try_lock(), Ok(false))
    }

    fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        let path = self.path(id);
        if self.vfs.metadata(&path).is_err() {
            return Err(StoreError::NoSuchSession {
                query: id.to_string(),
                store: self.describe(),
            });
        }
        let (lock, _) = take_lock(&*self.vfs, &self.lock_path(id), id)?;
        self.vfs.remove_file(&path).map_err(|source| {
            StoreError::Io(IoFailure::new("remove", path.display().to_string(), source))
        })?;
        let _ = self.vfs.remove_file(&self.index_path(id));
        let _ = self.vfs.remove_file(&self.lock_path(id));
        drop(lock);
        self.vfs
            .sync_dir(&self.dir)
            .map_err(|source| StoreError::Io(IoFailure::new("sync", self.describe(), source)))
    }

    fn load_catalog(&self) -> Option<Catalog> {
        Catalog::from_bytes(&vfs::read_all(&*self.vfs, &self.catalog).ok()?)
    }

    fn save_catalog(&self, catalog: &Catalog) {
        // A cache validated entry by entry against the logs: not synced.
        let _ = vfs::replace_cache(&*self.vfs, &self.catalog, &catalog.to_bytes());
    }
}

/// A persisted index file, read in place a block at a time.
#[derive(Debug)]
struct IndexFile {
    file: Arc<dyn VfsFile>,
    len: u64,
    vfs: Arc<dyn Vfs>,
    path: PathBuf,
}

impl IndexBytes for IndexFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        read_exact_at(&*self.file, buf, offset)
    }

    fn discard(&self) -> bool {
        // A writer may have replaced it meanwhile with a good one: removing
        // that costs one rebuild, never a wrong record.
        self.vfs.remove_file(&self.path).is_ok()
    }
}

/// The index of `<id>.jsonl` is `<id>.idx` beside it.
impl IndexStore for FileBackend {
    fn load_index(&self, id: &SessionId) -> Option<Vec<u8>> {
        vfs::read_all(&*self.vfs, &self.index_path(id)).ok()
    }

    /// The index file itself, read a block at a time.
    fn open_index(&self, id: &SessionId) -> Option<Arc<dyn IndexBytes>> {
        let path = self.index_path(id);
        let file = self.vfs.open(&path, OpenMode::Read).ok()?;
        let len = file.len().ok()?;
        Some(Arc::new(IndexFile {
            file,
            len,
            vfs: Arc::clone(&self.vfs),
            path,
        }))
    }

    /// Opens a session, from the end of `prefix` when given.
    fn open_from(
        &self,
        from: OpenFrom<'_>,
        visit: &mut Visitor<'_>,
    ) -> Result<IndexedOpen, OpenError> {
        let OpenFrom { id, access, prefix } = from;
        let path = self.regular_file(id)?;
        let location = path.display().to_string();
        let io_err = |action, source| OpenError::Io(IoFailure::new(action, &location, source));
        let (lock, unsynced) = match access {
            Access::Write => {
                self.sweep_stale_creates_once();
                let (f, unsynced) = take_lock(&*self.vfs, &self.lock_path(id), id)?;
                (Some(f), unsynced)
            }
            Access::Read => (None, None),
        };
        let mode = if lock.is_some() {
            OpenMode::ReadWrite
        } else {
            OpenMode::Read
        };
        let file = self.vfs.open(&path, mode).map_err(|e| io_err("open", e))?;
        let (base, first, end) = match prefix {
            None => (None, 0, 0),
            Some(p) => match check_prefix(&*file, &p).map_err(|e| io_err("read", e))? {
                Some(why) => return Ok(IndexedOpen::Stale(why)),
                None => (Some(p.lines()), p.records, p.end),
            },
        };
        let scan = scan(&*file, &location, first, end, visit)?;
        let mut torn = None;
        if let Some(bad) = scan.bad {
            let len = scan.file_len - bad.offset;
            let problem = if bad.intact_after {
                format!(
                    "{}; it holds zeros where a write never reached the disk, so the \
                     records after it were never durable (a power loss kept a later \
                     unsynced write and lost an earlier one)",
                    bad.problem
                )
            } else {
                bad.problem
            };
            let mut tail = TornTail {
                offset: bad.offset,
                len,
                saved_to: None,
                cut: false,
                problem,
            };
            if lock.is_some() {
                let saved = self
                    .save_torn(&path, &*file, bad.offset, len)
                    .map_err(|e| io_err("save the torn tail of", e))?;
                file.set_len(bad.offset)
                    .map_err(|e| io_err("cut the torn tail of", e))?;
                file.sync_data().map_err(|e| io_err("sync", e))?;
                tail.saved_to = Some(saved.display().to_string());
                tail.cut = true;
            }
            torn = Some(tail);
        }
        if let Some(lock) = &lock {
            self.make_durable(
                &location,
                &*file,
                &**lock,
                unsynced,
                torn.is_some(),
                scan.end,
            )
            .map_err(|e| io_err("make durable again the unsynced part of", e))?;
        }
        let log = FileLog::new(location, file, lock, base, scan.offsets, scan.end)
            .with_index(Arc::clone(&self.vfs), self.index_path(id));
        Ok(IndexedOpen::Opened(Opened {
            log: Box::new(log),
            torn,
        }))
    }
}

impl FileBackend {
    /// The path of a session's persisted index.
    pub(crate) fn index_path(&self, id: &SessionId) -> PathBuf {
        self.dir.join(format!("{id}.idx"))
    }

    /// The path of a session's log, refused unless it is a regular file: a
    /// symlink in the store is never followed.
    fn regular_file(&self, id: &SessionId) -> Result<PathBuf, OpenError> {
        let path = self.path(id);
        match self.vfs.metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(OpenError::NotFound {
                session: id.to_string(),
                location: self.describe(),
            }),
            Err(source) => Err(OpenError::Io(IoFailure::new(
                "inspect",
                path.display().to_string(),
                source,
            ))),
            Ok(m) if m.is_symlink || !m.is_file => Err(OpenError::NotASession {
                location: path.display().to_string(),
                problem: "it is not a regular file (cairn does not follow symlinks in its store)"
                    .into(),
            }),
            Ok(_) => Ok(path),
        }
    }

    /// Before a writer builds on the file, makes everything in it durable,
    /// so that the whole file is covered by a good sync (`synced_end`):
    ///
    /// - after a previous writer's failed write or sync (a marker in the lock
    ///   file or in this process), the bytes from the marker on may be
    ///   readable here yet missing from the disk, and a sync would not write
    ///   them: they are written again in place, then synced;
    /// - otherwise the file is synced, because an earlier handle may have
    ///   left Buffered records unsynced; if that sync fails, pages of any
    ///   age may have been dropped, and everything is written again.
    ///
    /// On failure the marker is left (or set) for the next writer.
    fn make_durable(
        &self,
        location: &str,
        file: &dyn VfsFile,
        lock: &dyn VfsFile,
        marker: Option<u64>,
        synced: bool,
        end: u64,
    ) -> io::Result<()> {
        let from = match (marker, unsynced_in_process(location)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let from = match from {
            Some(from) => from.min(end),
            None if synced => return Ok(()),
            None => match file.sync_data() {
                Ok(()) => return Ok(()),
                Err(e) => {
                    remember_unsynced(location, 0);
                    let _ = write_lock_note(lock, Some(0));
                    return Err(e);
                }
            },
        };
        let rewritten = rewrite(file, from, end).and_then(|()| file.sync_data());
        if let Err(e) = rewritten {
            remember_unsynced(location, from);
            let _ = write_lock_note(lock, Some(from));
            return Err(e);
        }
        forget_unsynced(location);
        // Best effort: a marker left behind costs the next writer a rewrite.
        let _ = write_lock_note(lock, None);
        Ok(())
    }

    fn save_torn(
        &self,
        path: &Path,
        file: &dyn VfsFile,
        offset: u64,
        len: u64,
    ) -> io::Result<PathBuf> {
        let mut bytes = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
        read_exact_at(file, &mut bytes, offset)?;
        let stamp: String = crate::time::now_rfc3339()
            .chars()
            .filter(|c| !matches!(c, '-' | ':'))
            .collect();
        let mut target = PathBuf::from(format!("{}.torn-{stamp}", path.display()));
        let mut n = 1;
        while self.vfs.metadata(&target).is_ok() {
            target = PathBuf::from(format!("{}.torn-{stamp}-{n}", path.display()));
            n += 1;
        }
        let f = self.vfs.open(&target, OpenMode::CreateNew)?;
        f.write_all_at(&bytes, 0)?;
        f.sync_data()?;
        self.vfs.sync_dir(&self.dir)?;
        Ok(target)
    }
}

/// Whether the log in `file` still begins with the lines `prefix`
/// describes: `None` when it does, or why not. Checks the file's length and
/// the last indexed line (intact, the CRC-32C the index holds); the lines
/// before it are verified when they are read.
fn check_prefix(file: &dyn VfsFile, prefix: &IndexedPrefix) -> io::Result<Option<String>> {
    let len = file.len()?;
    let last = match prefix.last_offset() {
        Ok(last) => last,
        Err(why) => return Ok(Some(why)),
    };
    if len < prefix.end {
        return Ok(Some(format!(
            "the log is {len} bytes, shorter than the {} it indexes",
            prefix.end
        )));
    }
    let Some(n) = prefix
        .end
        .checked_sub(last)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n > 0)
    else {
        return Ok(Some("its last line has no length".into()));
    };
    let mut line = vec![0u8; n];
    read_exact_at(file, &mut line, last)?;
    if crate::frame::check(&line).is_err() || crc32c::crc32c(&line) != prefix.last_line_crc {
        return Ok(Some(format!(
            "the log's line {} is not the one it indexed",
            prefix.records
        )));
    }
    Ok(None)
}
