//! One I/O seam for tests: [`HookVfs`] wraps a file system (the real one by
//! default) and sends every operation through a [`Hook`], whose methods all
//! pass the call through unchanged unless a test overrides them. A test
//! writes only the interference it needs:
//!
//! ```
//! use std::io;
//! use std::sync::Arc;
//! use cairn::testkit::vfs::{Hook, HookVfs, Hooked};
//!
//! /// Every sync of a session log fails.
//! #[derive(Debug)]
//! struct NoSync;
//!
//! impl Hook for NoSync {
//!     fn sync_data(&self, _file: Hooked<'_>) -> io::Result<()> {
//!         Err(io::Error::from_raw_os_error(5))
//!     }
//! }
//!
//! let dir = tempfile::tempdir()?;
//! let vfs = HookVfs::new(NoSync);
//! let store = cairn::Store::with_backend(Arc::new(cairn::FileBackend::with_vfs(dir.path(), vfs)));
//! # Ok::<(), io::Error>(())
//! ```
//!
//! Two hooks come with it: [`Faults`] (fail the N-th write or sync, or every
//! one while switched on) and [`Events`] (log every write and sync).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::vfs::{Metadata, OpenMode, StdVfs, Vfs, VfsFile};

/// Whether `path` is a session log (`*.jsonl`): the files hooks interfere
/// with by default; lock files, the catalog, saved torn tails and a new
/// session's header under its temporary name are left alone.
pub fn is_session_log(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "jsonl")
}

/// A hooked file, as a [`Hook`] sees it: the file underneath and how it was
/// opened.
#[derive(Debug, Clone, Copy)]
pub struct Hooked<'a> {
    /// The file of the wrapped file system.
    pub inner: &'a dyn VfsFile,
    /// The path it was opened at.
    pub path: &'a Path,
    /// The mode it was opened with.
    pub mode: OpenMode,
}

/// What a test does to the operations of a [`HookVfs`]. Every method
/// defaults to passing the call through to the wrapped file system.
pub trait Hook: Send + Sync + fmt::Debug + 'static {
    /// Whether the file at `path`, opened with `mode`, goes through the file
    /// hooks below; other files are returned as the wrapped file system
    /// opened them. Default: session logs only ([`is_session_log`]).
    fn hooks_file(&self, path: &Path, mode: OpenMode) -> bool {
        let _ = mode;
        is_session_log(path)
    }

    /// [`VfsFile::read_at`] of a hooked file.
    ///
    /// # Errors
    ///
    /// Whatever the hook injects, or the file's own error.
    fn read_at(&self, file: Hooked<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        file.inner.read_at(buf, offset)
    }

    /// [`VfsFile::write_all_at`] of a hooked file.
    ///
    /// # Errors
    ///
    /// Whatever the hook injects, or the file's own error.
    fn write_all_at(&self, file: Hooked<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        file.inner.write_all_at(buf, offset)
    }

    /// [`VfsFile::sync_data`] of a hooked file.
    ///
    /// # Errors
    ///
    /// Whatever the hook injects, or the file's own error.
    fn sync_data(&self, file: Hooked<'_>) -> io::Result<()> {
        file.inner.sync_data()
    }

    /// [`VfsFile::len`] of a hooked file.
    ///
    /// # Errors
    ///
    /// Whatever the hook injects, or the file's own error.
    fn len(&self, file: Hooked<'_>) -> io::Result<u64> {
        file.inner.len()
    }

    /// [`VfsFile::set_len`] of a hooked file.
    ///
    /// # Errors
    ///
    /// Whatever the hook injects, or the file's own error.
    fn set_len(&self, file: Hooked<'_>, len: u64) -> io::Result<()> {
        file.inner.set_len(len)
    }

    /// [`Vfs::hard_link`], for any path.
    ///
    /// # Errors
    ///
    /// Whatever the hook injects, or the file system's own error.
    fn hard_link(&self, inner: &dyn Vfs, from: &Path, to: &Path) -> io::Result<()> {
        inner.hard_link(from, to)
    }
}

/// A file system that sends every operation through a [`Hook`] before the
/// file system it wraps.
#[derive(Debug)]
pub struct HookVfs<H> {
    inner: Arc<dyn Vfs>,
    hook: Arc<H>,
}

impl<H: Hook> HookVfs<H> {
    /// The real file system ([`StdVfs`]) under `hook`.
    pub fn new(hook: H) -> Arc<HookVfs<H>> {
        HookVfs::over(Arc::new(StdVfs), hook)
    }

    /// The file system `inner` under `hook`.
    pub fn over(inner: Arc<dyn Vfs>, hook: H) -> Arc<HookVfs<H>> {
        Arc::new(HookVfs {
            inner,
            hook: Arc::new(hook),
        })
    }

    /// The real file system under a hook the test keeps a handle on.
    pub fn sharing(hook: Arc<H>) -> Arc<HookVfs<H>> {
        Arc::new(HookVfs {
            inner: Arc::new(StdVfs),
            hook,
        })
    }

    /// The hook, to arm it or read what it saw.
    pub fn hook(&self) -> &H {
        &self.hook
    }
}

#[derive(Debug)]
struct HookFile<H> {
    inner: Arc<dyn VfsFile>,
    path: PathBuf,
    mode: OpenMode,
    hook: Arc<H>,
}

impl<H> HookFile<H> {
    fn hooked(&self) -> Hooked<'_> {
        Hooked {
            inner: &*self.inner,
            path: &self.path,
            mode: self.mode,
        }
    }
}

impl<H: Hook> VfsFile for HookFile<H> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.hook.read_at(self.hooked(), buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.hook.write_all_at(self.hooked(), buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.hook.sync_data(self.hooked())
    }
    fn len(&self) -> io::Result<u64> {
        self.hook.len(self.hooked())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.hook.set_len(self.hooked(), len)
    }
    fn try_lock(&self) -> io::Result<bool> {
        self.inner.try_lock()
    }
}

impl<H: Hook> Vfs for HookVfs<H> {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>> {
        let inner = self.inner.open(path, mode)?;
        if !self.hook.hooks_file(path, mode) {
            return Ok(inner);
        }
        Ok(Arc::new(HookFile {
            inner,
            path: path.to_path_buf(),
            mode,
            hook: Arc::clone(&self.hook),
        }))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.read_dir(path)
    }
    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        self.inner.metadata(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.hook.hard_link(&*self.inner, from, to)
    }
}

/// Locks a test's mutex, ignoring poisoning (a failed check in another
/// thread must not hide this one's findings).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------

/// An injected I/O failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `EIO`: the device reported an error.
    Eio,
    /// `ENOSPC`: the disk is full.
    NoSpace,
    /// A write that lands its first `n` bytes and then fails with `EIO`
    /// (for a sync, the same as [`Fault::Eio`]).
    Short(usize),
}

impl Fault {
    /// The OS error number the fault reports.
    pub fn errno(self) -> i32 {
        match self {
            Fault::Eio | Fault::Short(_) => 5,
            Fault::NoSpace => 28,
        }
    }

    /// The error the fault reports.
    pub fn error(self) -> io::Error {
        io::Error::from_raw_os_error(self.errno())
    }
}

#[derive(Debug, Default)]
struct Plan {
    /// Every write, sync and truncation fails with `EIO` and does nothing.
    failing: bool,
    /// Writes to let through before the next one fails, and how it fails.
    write: Option<(u64, Fault)>,
    /// Syncs to let through before the next one fails, and how it fails.
    sync: Option<(u64, Fault)>,
    /// Write calls on hooked files so far (failed ones included).
    writes: u64,
    /// Sync calls on hooked files so far (failed ones included).
    syncs: u64,
}

/// Decrements a countdown; returns the fault when it fires (once).
fn fires(slot: &mut Option<(u64, Fault)>) -> Option<Fault> {
    let (left, fault) = slot.as_mut()?;
    if *left > 1 {
        *left -= 1;
        return None;
    }
    let fault = *fault;
    *slot = None;
    Some(fault)
}

/// A [`Hook`] that fails writes and syncs of session logs on demand: the
/// N-th one from when it is armed, once; or every write, sync and
/// truncation while switched on. It counts the writes and syncs it sees.
#[derive(Debug, Default)]
pub struct Faults {
    plan: Mutex<Plan>,
}

impl Faults {
    /// No fault armed.
    pub fn new() -> Faults {
        Faults::default()
    }

    /// The `nth` write from now (1: the next one) fails with `fault`.
    ///
    /// # Panics
    ///
    /// If `nth` is 0.
    pub fn fail_write(&self, nth: u64, fault: Fault) {
        assert!(nth >= 1, "fail_write counts from 1");
        lock(&self.plan).write = Some((nth, fault));
    }

    /// The `nth` sync from now (1: the next one) fails with `fault`.
    ///
    /// # Panics
    ///
    /// If `nth` is 0.
    pub fn fail_sync(&self, nth: u64, fault: Fault) {
        assert!(nth >= 1, "fail_sync counts from 1");
        lock(&self.plan).sync = Some((nth, fault));
    }

    /// Every write, sync and truncation fails with `EIO` and does nothing
    /// (`true`), or succeeds again (`false`).
    pub fn set_failing(&self, failing: bool) {
        lock(&self.plan).failing = failing;
    }

    /// Disarms any fault not yet fired and switches failing off.
    pub fn clear(&self) {
        let mut p = lock(&self.plan);
        p.failing = false;
        p.write = None;
        p.sync = None;
    }

    /// Write calls seen so far.
    pub fn writes(&self) -> u64 {
        lock(&self.plan).writes
    }

    /// Sync calls seen so far.
    pub fn syncs(&self) -> u64 {
        lock(&self.plan).syncs
    }
}

impl Hook for Faults {
    fn write_all_at(&self, file: Hooked<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        let fault = {
            let mut p = lock(&self.plan);
            p.writes += 1;
            if p.failing {
                Some(Fault::Eio)
            } else {
                fires(&mut p.write)
            }
        };
        match fault {
            None => file.inner.write_all_at(buf, offset),
            Some(Fault::Short(n)) => {
                file.inner.write_all_at(&buf[..n.min(buf.len())], offset)?;
                Err(Fault::Short(n).error())
            }
            Some(f) => Err(f.error()),
        }
    }

    fn sync_data(&self, file: Hooked<'_>) -> io::Result<()> {
        let fault = {
            let mut p = lock(&self.plan);
            p.syncs += 1;
            if p.failing {
                Some(Fault::Eio)
            } else {
                fires(&mut p.sync)
            }
        };
        match fault {
            None => file.inner.sync_data(),
            Some(f) => Err(f.error()),
        }
    }

    fn set_len(&self, file: Hooked<'_>, len: u64) -> io::Result<()> {
        if lock(&self.plan).failing {
            return Err(Fault::Eio.error());
        }
        file.inner.set_len(len)
    }
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

/// A write or sync of a session log, as [`Events`] logs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A write of `len` bytes returned successfully.
    Write {
        /// The file written.
        path: PathBuf,
        /// Where the write began.
        offset: u64,
        /// How many bytes it wrote.
        len: usize,
    },
    /// A sync returned successfully.
    Sync {
        /// The file synced.
        path: PathBuf,
    },
}

/// A [`Hook`] that logs every successful write and sync of a session log,
/// in the order they returned.
#[derive(Debug, Default)]
pub struct Events {
    log: Mutex<Vec<Event>>,
}

impl Events {
    /// An empty log.
    pub fn new() -> Events {
        Events::default()
    }

    /// Every event so far, in order.
    pub fn events(&self) -> Vec<Event> {
        lock(&self.log).clone()
    }

    /// Every event so far, and forgets them.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *lock(&self.log))
    }
}

impl Hook for Events {
    fn write_all_at(&self, file: Hooked<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        file.inner.write_all_at(buf, offset)?;
        lock(&self.log).push(Event::Write {
            path: file.path.to_path_buf(),
            offset,
            len: buf.len(),
        });
        Ok(())
    }

    fn sync_data(&self, file: Hooked<'_>) -> io::Result<()> {
        file.inner.sync_data()?;
        lock(&self.log).push(Event::Sync {
            path: file.path.to_path_buf(),
        });
        Ok(())
    }
}
