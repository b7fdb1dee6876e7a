//! Fixtures for the core's own backends: [`FileFixture`] (session files in
//! a temporary directory, writes that fail on demand through [`SwitchVfs`])
//! and [`MemoryFixture`].

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::util::OrFail;
use super::{Fixture, Interrupted};
use crate::backend::{Backend, FileBackend, MemoryBackend};
use crate::id::SessionId;
use crate::vfs::{Metadata, OpenMode, StdVfs, Vfs, VfsFile};

/// A temporary directory, removed (with its contents) when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `cairn-testkit-<pid>-<random>` in the system's temporary directory.
    ///
    /// # Panics
    ///
    /// If the directory cannot be created.
    pub fn new() -> TempDir {
        let mut rnd = [0u8; 8];
        crate::id::fill_random(&mut rnd);
        let hex: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
        let path = std::env::temp_dir().join(format!("cairn-testkit-{}-{hex}", std::process::id()));
        std::fs::create_dir_all(&path).or_fail(format_args!("create {}", path.display()));
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Default for TempDir {
    fn default() -> TempDir {
        TempDir::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The real file system, except that while switched on every write and sync
/// of a session log (`*.jsonl`) fails with `EIO` and writes nothing.
#[derive(Debug, Default)]
pub struct SwitchVfs {
    fail: Arc<AtomicBool>,
}

impl SwitchVfs {
    /// A file system that does not fail (yet).
    pub fn new() -> SwitchVfs {
        SwitchVfs::default()
    }

    /// Makes writes and syncs of session logs fail (`true`) or succeed.
    pub fn set_failing(&self, fail: bool) {
        self.fail.store(fail, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct SwitchFile {
    inner: Arc<dyn VfsFile>,
    fail: Arc<AtomicBool>,
}

impl SwitchFile {
    fn check(&self) -> io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(5)); // EIO
        }
        Ok(())
    }
}

impl VfsFile for SwitchFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check()?;
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.check()?;
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn try_lock(&self) -> io::Result<bool> {
        self.inner.try_lock()
    }
}

impl Vfs for SwitchVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>> {
        let inner = StdVfs.open(path, mode)?;
        if path.extension().is_some_and(|e| e == "jsonl") {
            return Ok(Arc::new(SwitchFile {
                inner,
                fail: self.fail.clone(),
            }));
        }
        Ok(inner)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        StdVfs.create_dir_all(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        StdVfs.sync_dir(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        StdVfs.read_dir(path)
    }
    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        StdVfs.metadata(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdVfs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        StdVfs.remove_file(path)
    }
}

/// The file backend in a temporary directory. Hooks: all of them (a torn
/// tail is half a line appended to the file; failures come from
/// [`SwitchVfs`]; damage is a flipped byte).
#[derive(Debug)]
pub struct FileFixture {
    // Dropped last: the backends below refer to files in it.
    backend: Arc<FileBackend>,
    vfs: Arc<SwitchVfs>,
    home: TempDir,
}

impl FileFixture {
    /// A fresh store in a new temporary directory.
    pub fn new() -> FileFixture {
        let home = TempDir::new();
        let vfs = Arc::new(SwitchVfs::new());
        let backend = Arc::new(FileBackend::with_vfs(
            home.path().join("sessions"),
            vfs.clone(),
        ));
        FileFixture { backend, vfs, home }
    }

    fn dir(&self) -> PathBuf {
        self.home.path().join("sessions")
    }
}

impl Default for FileFixture {
    fn default() -> FileFixture {
        FileFixture::new()
    }
}

impl Fixture for FileFixture {
    fn name(&self) -> String {
        "file".into()
    }

    fn backend(&self) -> Arc<dyn Backend> {
        self.backend.clone()
    }

    fn reopen(&self) -> Arc<dyn Backend> {
        Arc::new(FileBackend::new(self.dir()))
    }

    fn interrupt_append(&self, id: &SessionId, line: &[u8]) -> Interrupted {
        use std::io::Write;
        let path = self.backend.path(id);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .or_fail(format_args!("open {} to tear it", path.display()));
        f.write_all(&line[..line.len() / 2])
            .or_fail("write half a line");
        f.sync_all().or_fail("sync the torn tail");
        Interrupted::Torn
    }

    fn fail_writes(&self, fail: bool) -> bool {
        self.vfs.set_failing(fail);
        true
    }

    fn corrupt(&self, id: &SessionId, seq: u64) -> bool {
        let path = self.backend.path(id);
        let mut bytes = std::fs::read(&path).or_fail(format_args!("read {}", path.display()));
        let start = if seq == 0 {
            0
        } else {
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .nth(seq as usize - 1)
                .map(|(i, _)| i + 1)
                .or_fail(format_args!("{} has a line {}", path.display(), seq + 1))
        };
        // A byte in the middle of the line's JSON: never a newline, and
        // flipping its lowest bit cannot make one.
        let end = bytes[start..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |p| start + p);
        bytes[start + (end - start) / 2] ^= 0x01;
        std::fs::write(&path, &bytes).or_fail(format_args!("write {}", path.display()));
        true
    }
}

/// The memory backend. Hooks: an interrupted append is atomic (nothing);
/// damage rewrites the stored line; writes cannot fail.
#[derive(Debug, Default)]
pub struct MemoryFixture {
    backend: MemoryBackend,
}

impl MemoryFixture {
    /// A fresh, empty memory store.
    pub fn new() -> MemoryFixture {
        MemoryFixture::default()
    }
}

impl Fixture for MemoryFixture {
    fn name(&self) -> String {
        "memory".into()
    }

    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.backend.clone())
    }

    fn reopen(&self) -> Arc<dyn Backend> {
        // Clones share the sessions: the closest thing to another process.
        Arc::new(self.backend.clone())
    }

    fn interrupt_append(&self, _id: &SessionId, _line: &[u8]) -> Interrupted {
        Interrupted::Atomic
    }

    fn corrupt(&self, id: &SessionId, seq: u64) -> bool {
        let mut lines = self
            .backend
            .raw(id)
            .or_fail(format_args!("session {id} is in the memory store"));
        let line = lines
            .get_mut(seq as usize)
            .or_fail(format_args!("session {id} has record {seq}"));
        let mid = line.len() / 2;
        line[mid] ^= 0x01;
        self.backend.put_raw(id, lines);
        true
    }
}
