//! The file backend: one JSON-lines file per session in one directory.
//!
//! Layout (see `docs/FORMAT.md`, "Store layout"): `<dir>/<id>.jsonl` is the
//! log, `<dir>/<id>.lock` the writer lock (holding the writer's pid), and
//! `<dir>/<id>.jsonl.torn-<time>` any torn tail cut at open. The catalog, a
//! listing cache, is `<dir>/../catalog.json`.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::{Access, Backend, Catalog, Log, Opened, RawLine, Stamp, TornTail, Visitor};
use crate::error::{AppendError, Damage, OpenError, ReadError, StoreError};
use crate::frame;
use crate::id::SessionId;
use crate::vfs::{self, OpenMode, StdVfs, Vfs, VfsFile};

/// Sessions as JSON-lines files in one directory.
#[derive(Debug, Clone)]
pub struct FileBackend {
    dir: PathBuf,
    catalog: PathBuf,
    vfs: Arc<dyn Vfs>,
}

const READ_CHUNK: usize = 1 << 20;

/// The line a writer adds to its lock file when a write or sync of the log
/// fails: `unsynced-from <offset>`, the end of what its last successful sync
/// covered. On Linux a failed fsync can drop the dirty pages from the
/// write-back queue while they stay readable in the page cache, so a later
/// writer would build on bytes the disk never got and a later fsync would
/// not write them. The next writer reads the marker and rewrites the bytes
/// from that offset on (dirtying them again) and syncs before appending.
const UNSYNCED: &str = "unsynced-from ";

/// Writes the lock file's note: our pid, and the unsynced marker if any.
/// The note helps messages and recovery but is not the log: callers decide
/// what a failure means.
fn write_lock_note(f: &dyn VfsFile, unsynced: Option<u64>) -> io::Result<()> {
    let mut note = format!("{}\n", std::process::id());
    if let Some(x) = unsynced {
        note.push_str(&format!("{UNSYNCED}{x}\n"));
    }
    f.set_len(0)
        .and_then(|()| f.write_all_at(note.as_bytes(), 0))
}

/// The unsynced markers of this process, by session file: a copy of the
/// lock-file marker that survives when the lock file cannot be written
/// (the disk that failed the sync keeps failing, or is full), so a writer
/// reopened in the same process still rewrites what a failed sync may have
/// dropped.
static UNSYNCED_IN_PROCESS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

/// Records that the bytes of `location` from `from` on may not be on disk.
fn remember_unsynced(location: &str, from: u64) {
    let mut m = UNSYNCED_IN_PROCESS
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let e = m.entry(location.to_owned()).or_insert(from);
    *e = (*e).min(from);
}

/// The in-process marker of `location`, if any.
fn unsynced_in_process(location: &str) -> Option<u64> {
    UNSYNCED_IN_PROCESS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(location)
        .copied()
}

fn forget_unsynced(location: &str) {
    UNSYNCED_IN_PROCESS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(location);
}

/// How long to keep trying for the writer lock before reporting "in use",
/// in doubling waits from 1 ms (1 + 2 + … + 256 ≈ 0.5 s in all).
///
/// A writer that has just closed a session can still "hold" its lock for a
/// moment: a lock belongs to the open file description, and a process another
/// thread forks inherits it until the child calls exec; a listing's probe
/// (`writer_active`) also takes the lock for an instant. On a loaded machine
/// both last longer than a few milliseconds, so a reopen right after a close
/// saw "in use" from its own process (found as flaky CLI tests).
const LOCK_WAITS_MS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

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
        FileBackend { dir, catalog, vfs }
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

    /// Takes the writer lock of a session, writing our pid into the lock file.
    /// Takes the writer lock. Returns the lock file and, when the previous
    /// writer recorded a failed write or sync, the offset from which the log
    /// may not have reached the disk (see [`UNSYNCED`]).
    fn lock(&self, id: &SessionId) -> Result<(Arc<dyn VfsFile>, Option<u64>), OpenError> {
        let path = self.lock_path(id);
        let io_err = |action, source| OpenError::Io {
            action,
            location: path.display().to_string(),
            source,
        };
        let f = self
            .vfs
            .open(&path, OpenMode::CreateOrOpen)
            .map_err(|e| io_err("open lock file", e))?;
        // A probe or a forked child can hold the lock for an instant after
        // its writer let go (see `LOCK_WAITS_MS`): wait a little before
        // calling the session in use.
        let mut locked = f.try_lock().map_err(|e| io_err("lock", e))?;
        for ms in LOCK_WAITS_MS {
            if locked {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(ms));
            locked = f.try_lock().map_err(|e| io_err("lock", e))?;
        }
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).unwrap_or(0);
        let content = String::from_utf8_lossy(&buf[..n]).into_owned();
        if !locked {
            let holder = content.lines().next().and_then(|s| s.trim().parse().ok());
            return Err(OpenError::InUse {
                session: id.to_string(),
                holder,
            });
        }
        let unsynced = content
            .lines()
            .find_map(|l| l.strip_prefix(UNSYNCED))
            .and_then(|x| x.trim().parse().ok());
        // The pid is a courtesy for error messages; the marker must survive
        // until the writer has made the suspect bytes durable again (and it
        // is also kept in memory: see `UNSYNCED_IN_PROCESS`).
        let _ = write_lock_note(&*f, unsynced);
        Ok((f, unsynced))
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
        let io_err = |action, source| OpenError::Io {
            action,
            location: location.clone(),
            source,
        };
        if lines.is_empty() {
            return Err(OpenError::NotASession {
                location,
                problem: "a session needs at least its header".into(),
            });
        }
        self.ensure_dir()
            .map_err(|e| io_err("create the directory of", e))?;
        let (lock, _) = self.lock(id)?;
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
        Ok(Box::new(FileLog::new(
            location,
            file,
            Some(lock),
            offsets,
            end,
        )))
    }

    fn open(
        &self,
        id: &SessionId,
        access: Access,
        visit: &mut Visitor<'_>,
    ) -> Result<Opened, OpenError> {
        let path = self.regular_file(id)?;
        let location = path.display().to_string();
        let io_err = |action, source| OpenError::Io {
            action,
            location: location.clone(),
            source,
        };
        let (lock, unsynced) = match access {
            Access::Write => {
                let (f, unsynced) = self.lock(id)?;
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
        let scan = scan(&*file, &location, visit)?;
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
        let log = FileLog::new(location, file, lock, scan.offsets, scan.end);
        Ok(Opened {
            log: Box::new(log),
            torn,
        })
    }

    fn stored_lines(&self, id: &SessionId) -> Result<Vec<Vec<u8>>, OpenError> {
        let path = self.regular_file(id)?;
        let bytes = vfs::read_all(&*self.vfs, &path).map_err(|source| OpenError::Io {
            action: "read",
            location: path.display().to_string(),
            source,
        })?;
        Ok(bytes
            .split_inclusive(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect())
    }

    fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        let names = match self.vfs.read_dir(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            r => r.map_err(|source| StoreError::Io {
                action: "list",
                location: self.describe(),
                source,
            })?,
        };
        Ok(names
            .iter()
            .filter_map(|n| n.strip_suffix(".jsonl"))
            .filter_map(|n| SessionId::parse(n).ok())
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
            Err(source) => Err(StoreError::Io {
                action: "inspect",
                location: self.location(id),
                source,
            }),
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
        let (lock, _) = self.lock(id)?;
        self.vfs
            .remove_file(&path)
            .map_err(|source| StoreError::Io {
                action: "remove",
                location: path.display().to_string(),
                source,
            })?;
        let _ = self.vfs.remove_file(&self.lock_path(id));
        drop(lock);
        self.vfs
            .sync_dir(&self.dir)
            .map_err(|source| StoreError::Io {
                action: "sync",
                location: self.describe(),
                source,
            })
    }

    fn load_catalog(&self) -> Option<Catalog> {
        Catalog::from_bytes(&vfs::read_all(&*self.vfs, &self.catalog).ok()?)
    }

    fn save_catalog(&self, catalog: &Catalog) {
        let _ = vfs::write_atomic(&*self.vfs, &self.catalog, &catalog.to_bytes());
    }
}

impl FileBackend {
    /// The path of a session's log, refused unless it is a regular file: a
    /// symlink in the store is never followed.
    fn regular_file(&self, id: &SessionId) -> Result<PathBuf, OpenError> {
        let path = self.path(id);
        match self.vfs.metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(OpenError::NotFound {
                session: id.to_string(),
                location: self.describe(),
            }),
            Err(source) => Err(OpenError::Io {
                action: "inspect",
                location: path.display().to_string(),
                source,
            }),
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

/// Writes the bytes of `file` from `from` to `end` again, in place, a chunk
/// at a time (dirtying the pages a failed sync may have dropped).
fn rewrite(file: &dyn VfsFile, from: u64, end: u64) -> io::Result<()> {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut at = from;
    while at < end {
        let n = usize::try_from(end - at).map_or(READ_CHUNK, |n| n.min(READ_CHUNK));
        read_exact_at(file, &mut buf[..n], at)?;
        file.write_all_at(&buf[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

fn read_exact_at(file: &dyn VfsFile, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file is shorter than expected",
            ));
        }
        done += n;
    }
    Ok(())
}

struct Bad {
    offset: u64,
    index: u64,
    problem: String,
    /// The first damaged line is a hole ([`is_hole`]): the intact lines
    /// after it belong to the torn tail instead of making it an error.
    hole: bool,
    /// Intact lines follow the damage (only possible after a hole).
    intact_after: bool,
}

struct Scan {
    offsets: Vec<u64>,
    end: u64,
    file_len: u64,
    bad: Option<Bad>,
}

/// Reads the file in chunks, checking each line's framing. Intact lines are
/// handed to `visit` until the first damaged one. Everything from there to
/// the end of the file is a torn tail when no intact line follows, or when
/// the first damaged line is a hole ([`is_hole`]); otherwise an intact line
/// after damage is damage in the middle (a hard error).
fn scan(file: &dyn VfsFile, location: &str, visit: &mut Visitor<'_>) -> Result<Scan, OpenError> {
    let io_err = |source| OpenError::Io {
        action: "read",
        location: location.to_owned(),
        source,
    };
    let file_len = file.len().map_err(io_err)?;
    let mut lines = Lines {
        location,
        offsets: Vec::new(),
        bad: None,
        end: 0,
    };
    // A line split across chunks is joined in `carry`; whole lines are
    // handled in place.
    let mut carry: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut pos: u64 = 0; // file offset of the next line (of carry[0] if any)
    let mut read_off: u64 = 0;
    loop {
        // Never past the length measured above: a reader racing a writer's
        // append would otherwise see a tail beyond `file_len`.
        let want = file_len.saturating_sub(read_off).min(READ_CHUNK as u64) as usize;
        let n = if want > 0 {
            file.read_at(&mut chunk[..want], read_off).map_err(io_err)?
        } else {
            0
        };
        read_off += n as u64;
        let mut data = &chunk[..n];
        if !carry.is_empty() {
            match memchr::memchr(b'\n', data) {
                Some(nl) => {
                    carry.extend_from_slice(&data[..=nl]);
                    lines.line(&carry, pos, visit)?;
                    pos += carry.len() as u64;
                    carry.clear();
                    data = &data[nl + 1..];
                }
                None => {
                    carry.extend_from_slice(data);
                    data = &[];
                }
            }
        }
        let mut start = 0usize;
        while let Some(nl) = memchr::memchr(b'\n', &data[start..]) {
            let line = &data[start..start + nl + 1];
            lines.line(line, pos, visit)?;
            pos += line.len() as u64;
            start += nl + 1;
        }
        carry.extend_from_slice(&data[start..]);
        if n == 0 {
            if !carry.is_empty() && lines.bad.is_none() {
                lines.bad = Some(Bad {
                    offset: pos,
                    index: lines.offsets.len() as u64,
                    problem: frame::FrameDamage::Incomplete.to_string(),
                    hole: false,
                    intact_after: false,
                });
            }
            break;
        }
    }
    if lines.offsets.is_empty() {
        let problem = match &lines.bad {
            None => "the file is empty".to_owned(),
            Some(b) => format!("its header (line 1) is unreadable: {}", b.problem),
        };
        return Err(OpenError::NotASession {
            location: location.to_owned(),
            problem,
        });
    }
    Ok(Scan {
        offsets: lines.offsets,
        end: lines.end,
        file_len,
        bad: lines.bad,
    })
}

/// Bytes a 512-byte disk sector starts at: the smallest unit a disk writes,
/// so the zeros of a lost write end at a multiple of it (or where another
/// write begins, or at the end of the file).
const SECTOR: u64 = 512;

/// How every record line but the header begins (`docs/FORMAT.md`, "Framing").
const RECORD_START: &[u8] = b"{\"seq\":";

/// Whether a damaged line, starting at byte `offset` of the file, carries
/// the signature of a *hole*: bytes that never reached the disk. cairn never
/// writes a NUL byte (JSON escapes control characters), and a write lost at
/// a power loss reads back as zeros that end where the disk's write units
/// end: at the end of the file, at a sector boundary, or where a later write
/// (always a whole record) begins. So the line must hold a run of NUL bytes
/// ending in one of those places. A flipped bit can make one NUL, but not
/// one that ends so (a newline cannot become NUL in one flip); see
/// `docs/FORMAT.md`, "Torn tail", for why damage that starts with a hole is
/// cut as a torn tail.
fn is_hole(line: &[u8], offset: u64) -> bool {
    let mut i = 0;
    while let Some(z) = memchr::memchr(0, &line[i..]) {
        let start = i + z;
        let end = line[start..]
            .iter()
            .position(|&b| b != 0)
            .map_or(line.len(), |n| start + n);
        if end == line.len()
            || (offset + end as u64).is_multiple_of(SECTOR)
            || line[end..].starts_with(RECORD_START)
        {
            return true;
        }
        i = end;
    }
    false
}

/// The lines seen so far by [`scan`].
struct Lines<'l> {
    location: &'l str,
    offsets: Vec<u64>,
    bad: Option<Bad>,
    end: u64,
}

impl Lines<'_> {
    /// Checks one complete line: intact lines go to the visitor until the
    /// first damaged one; an intact line after damage is a hard error.
    fn line(&mut self, line: &[u8], offset: u64, visit: &mut Visitor<'_>) -> Result<(), OpenError> {
        let index = self.offsets.len() as u64;
        match frame::check(line) {
            Ok(()) => {
                if let Some(b) = &mut self.bad {
                    if b.hole {
                        b.intact_after = true;
                        return Ok(());
                    }
                    return Err(damaged(
                        self.location,
                        b.index,
                        b.offset,
                        format!(
                            "{}, and intact records follow it, so it is not a torn tail",
                            b.problem
                        ),
                    ));
                }
                visit(RawLine {
                    index,
                    offset,
                    bytes: line,
                })?;
                self.offsets.push(offset);
                self.end = offset + line.len() as u64;
            }
            Err(d) => {
                if self.bad.is_none() {
                    self.bad = Some(Bad {
                        offset,
                        index,
                        problem: d.to_string(),
                        hole: is_hole(line, offset),
                        intact_after: false,
                    });
                }
            }
        }
        Ok(())
    }
}

fn damaged(location: &str, index: u64, offset: u64, problem: String) -> OpenError {
    OpenError::Damaged(Box::new(Damage {
        location: location.to_owned(),
        line: index + 1,
        offset,
        problem,
    }))
}

/// An open session file.
#[derive(Debug)]
struct FileLog {
    location: String,
    file: Arc<dyn VfsFile>,
    lock: Option<Arc<dyn VfsFile>>,
    /// Offsets of every line; the end of the last is `end`.
    index: RwLock<Index>,
    /// Set by the first failed write or sync; refuses writes afterwards.
    poisoned: Mutex<Option<String>>,
    /// The end of what the last successful sync covered (at open: the
    /// whole file, whose dirty pages, if any, are still queued).
    synced_end: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct Index {
    offsets: Vec<u64>,
    end: u64,
}

impl FileLog {
    fn new(
        location: String,
        file: Arc<dyn VfsFile>,
        lock: Option<Arc<dyn VfsFile>>,
        offsets: Vec<u64>,
        end: u64,
    ) -> FileLog {
        FileLog {
            location,
            file,
            lock,
            index: RwLock::new(Index { offsets, end }),
            poisoned: Mutex::new(None),
            synced_end: std::sync::atomic::AtomicU64::new(end),
        }
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
            .offsets
            .len() as u64
    }

    fn read(&self, seq: u64) -> Result<Vec<u8>, ReadError> {
        let (start, end) = {
            let idx = self.index.read().unwrap_or_else(PoisonError::into_inner);
            let i = usize::try_from(seq).map_err(|_| ReadError::NoSuchRecord(seq))?;
            let start = *idx.offsets.get(i).ok_or(ReadError::NoSuchRecord(seq))?;
            (start, idx.offsets.get(i + 1).copied().unwrap_or(idx.end))
        };
        let mut buf = vec![0u8; (end - start) as usize];
        read_exact_at(&*self.file, &mut buf, start).map_err(|source| ReadError::Io {
            location: self.location.clone(),
            source,
        })?;
        frame::check(&buf).map_err(|d| {
            ReadError::Damaged(Box::new(Damage {
                location: self.location.clone(),
                line: seq + 1,
                offset: start,
                problem: format!(
                    "{d} (it verified when the session was opened: the file changed underneath)"
                ),
            }))
        })?;
        Ok(buf)
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
        usize::try_from(seq)
            .ok()
            .and_then(|i| idx.offsets.get(i))
            .copied()
            .unwrap_or(0)
    }

    fn poisoned(&self) -> Option<String> {
        self.poisoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::{SECTOR, is_hole};

    const LINE: &[u8] = br#"{"seq":3,"ts":"2026-11-30T00:00:00.000Z","kind":"message","data":{"text":"a b"},"crc":"00000000"}"#;

    #[test]
    fn zeros_before_the_start_of_a_later_record_are_a_hole() {
        let mut line = LINE[..20].to_vec();
        line.extend_from_slice(&[0; 7]);
        line.extend_from_slice(LINE);
        line.push(b'\n');
        assert!(is_hole(&line, 1000));
    }

    #[test]
    fn zeros_that_end_at_a_sector_boundary_are_a_hole() {
        let mut line = vec![0u8; 30];
        line.extend_from_slice(&LINE[40..]);
        line.push(b'\n');
        assert!(is_hole(&line, SECTOR * 3 - 30));
        assert!(!is_hole(&line, SECTOR * 3 - 29));
    }

    #[test]
    fn zeros_to_the_end_of_the_file_are_a_hole() {
        let mut line = LINE[..50].to_vec();
        line.extend_from_slice(&[0; 3]);
        assert!(is_hole(&line, 1001));
    }

    #[test]
    fn a_flipped_bit_that_makes_a_nul_inside_a_line_is_not_a_hole() {
        // "a b" -> "a\0b": a space is one bit away from NUL.
        let mut line = LINE.to_vec();
        let space = line.iter().position(|&b| b == b' ').unwrap_or(0);
        line[space] = 0;
        line.push(b'\n');
        assert!(!is_hole(&line, 1000));
        assert!(!is_hole(b"{\"seq\":3,\"tz\":1}\n", 1000));
    }
}
