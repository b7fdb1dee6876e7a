//! The I/O seam under the file backend: the handful of file and directory
//! operations it uses, so tests can substitute a disk that fails, tears or
//! forgets unsynced writes. [`StdVfs`] is the real file system.

use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Create a new file for reading and writing (mode 0600); fails if it exists.
    CreateNew,
    /// Open for reading and writing, creating it (mode 0600) if missing.
    CreateOrOpen,
}

/// An open file.
pub trait VfsFile: Send + Sync + fmt::Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read
    /// (0 at end of file).
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    ///
    /// # Errors
    ///
    /// Any I/O error; some bytes may have been written.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes the file's data (and the metadata needed to read it) durable.
    ///
    /// # Errors
    ///
    /// Any I/O error. After an error the state of unsynced data is unknown.
    fn sync_data(&self) -> io::Result<()>;
    /// The file's current length.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Shrinks (or grows) the file to `len` bytes.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Takes an exclusive advisory lock without waiting; `Ok(false)` if
    /// another handle holds it. Released when the handle is dropped.
    ///
    /// # Errors
    ///
    /// Any I/O error other than "would block".
    fn try_lock(&self) -> io::Result<bool>;
}

/// File and directory operations.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Opens a file.
    ///
    /// # Errors
    ///
    /// Any I/O error, `NotFound` and `AlreadyExists` included.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>>;
    /// Creates a directory and its parents with mode 0700.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Makes a directory's entries (created, renamed, removed files) durable.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// The names of the entries of a directory.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Size and modification time of a file, without following a final symlink.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn metadata(&self, path: &Path) -> io::Result<Metadata>;
    /// The entries of a directory whose names `want` accepts, each with its
    /// metadata as [`Vfs::metadata`] gives it (or the error of that stat: an
    /// entry may be removed between the listing and its stat). The default
    /// lists, then stats each path; [`StdVfs`] stats each entry relative to
    /// the directory it is reading (`fstatat` on its descriptor), with no
    /// path to build and resolve per entry.
    ///
    /// # Errors
    ///
    /// Any I/O error reading the directory.
    fn read_dir_metadata(
        &self,
        path: &Path,
        want: &dyn Fn(&str) -> bool,
    ) -> io::Result<Vec<(String, io::Result<Metadata>)>> {
        Ok(self
            .read_dir(path)?
            .into_iter()
            .filter(|name| want(name))
            .map(|name| {
                let m = self.metadata(&path.join(&name));
                (name, m)
            })
            .collect())
    }
    /// Atomically replaces `to` with `from`.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Gives the file at `from` the additional name `to`, failing with
    /// `AlreadyExists` if `to` exists: an atomic "create if absent" for a
    /// file written elsewhere first. The default says `Unsupported`, and
    /// callers then fall back to a checked rename.
    ///
    /// # Errors
    ///
    /// Any I/O error; `AlreadyExists` when `to` exists.
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let _ = (from, to);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "hard links are not supported here",
        ))
    }
}

/// What [`Vfs::metadata`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    /// Length in bytes.
    pub len: u64,
    /// Modification time in nanoseconds since the epoch (0 if unknown).
    pub modified_ns: u128,
    /// Whether it is a regular file (not a directory or symlink).
    pub is_file: bool,
    /// Whether it is a symbolic link.
    pub is_symlink: bool,
}

impl Metadata {
    fn of(m: &fs::Metadata) -> Metadata {
        let modified_ns = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        Metadata {
            len: m.len(),
            modified_ns,
            is_file: m.file_type().is_file(),
            is_symlink: m.file_type().is_symlink(),
        }
    }
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdVfs;

#[derive(Debug)]
struct StdFile(File);

impl VfsFile for StdFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        loop {
            match self.0.read_at(buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn try_lock(&self) -> io::Result<bool> {
        match self.0.try_lock() {
            Ok(()) => Ok(true),
            Err(TryLockError::WouldBlock) => Ok(false),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }
}

impl Vfs for StdVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>> {
        let mut o = OpenOptions::new();
        o.read(true).mode(0o600);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                o.write(true);
            }
            OpenMode::CreateNew => {
                o.write(true).create_new(true);
            }
            OpenMode::CreateOrOpen => {
                o.write(true).create(true);
            }
        }
        // Never follow a symlink planted where a session file should be.
        o.custom_flags(libc_o_nofollow());
        Ok(Arc::new(StdFile(o.open(path)?)))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in fs::read_dir(path)? {
            if let Ok(name) = e?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }
    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        Ok(Metadata::of(&fs::symlink_metadata(path)?))
    }
    fn read_dir_metadata(
        &self,
        path: &Path,
        want: &dyn Fn(&str) -> bool,
    ) -> io::Result<Vec<(String, io::Result<Metadata>)>> {
        let mut out = Vec::new();
        for e in fs::read_dir(path)? {
            let e = e?;
            let Ok(name) = e.file_name().into_string() else {
                continue;
            };
            if want(&name) {
                // `DirEntry::metadata` stats relative to the directory's
                // descriptor and does not follow a symlink.
                let m = e.metadata().map(|m| Metadata::of(&m));
                out.push((name, m));
            }
        }
        Ok(out)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(from, to)
    }
}

/// `O_NOFOLLOW` on Linux and the BSDs (no libc dependency for one constant).
const fn libc_o_nofollow() -> i32 {
    if cfg!(any(target_os = "linux", target_os = "android")) {
        0o400_000
    } else {
        0x0100
    }
}

/// Reads a whole file through the seam.
///
/// # Errors
///
/// Any I/O error.
pub fn read_all(vfs: &dyn Vfs, path: &Path) -> io::Result<Vec<u8>> {
    let f = vfs.open(path, OpenMode::Read)?;
    let len = f.len()?;
    let mut buf = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    let mut off = 0usize;
    while off < buf.len() {
        let n = f.read_at(&mut buf[off..], off as u64)?;
        if n == 0 {
            break;
        }
        off += n;
    }
    buf.truncate(off);
    Ok(buf)
}

/// Writes `bytes` to `path` atomically and durably: a temporary file in the
/// same directory is written, synced and renamed over `path`, then the
/// directory is synced.
///
/// # Errors
///
/// Any I/O error; `path` then still holds its old content.
pub fn write_atomic(vfs: &dyn Vfs, path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(vfs, path, bytes, true)
}

/// Replaces `path` with `bytes` atomically for readers (a temporary file
/// renamed over it) but without syncing: for a cache that every reader
/// validates, whose loss or damage in a power failure only costs its
/// rebuilding (the listing's catalog: `docs/STORES.md` §1).
///
/// # Errors
///
/// Any I/O error; `path` then still holds its old content.
pub fn replace_cache(vfs: &dyn Vfs, path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(vfs, path, bytes, false)
}

fn replace(vfs: &dyn Vfs, path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let mut rnd = [0u8; 4];
    crate::id::fill_random(&mut rnd);
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{:02x}{:02x}{:02x}{:02x}",
        std::process::id(),
        rnd[0],
        rnd[1],
        rnd[2],
        rnd[3]
    ));
    let result = (|| {
        let f = vfs.open(&tmp, OpenMode::CreateNew)?;
        f.write_all_at(bytes, 0)?;
        if durable {
            f.sync_data()?;
        }
        drop(f);
        vfs.rename(&tmp, path)?;
        if durable {
            vfs.sync_dir(&dir)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = vfs.remove_file(&tmp);
    }
    result
}
