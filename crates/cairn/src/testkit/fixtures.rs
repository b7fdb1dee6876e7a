//! Fixtures for the core's own backends: [`FileFixture`] (session files in
//! a temporary directory, writes that fail on demand through the
//! [`Faults`] hook) and [`MemoryFixture`].

use std::path::PathBuf;
use std::sync::Arc;

use tempfile::TempDir;

use super::fixture::{Fixture, Interrupted};
use super::util::OrFail;
use super::vfs::{Faults, HookVfs};
use crate::backend::{Backend, FileBackend, MemoryBackend};
use crate::id::SessionId;

/// The file backend in a temporary directory. Hooks: all of them (a torn
/// tail is half a line appended to the file; failures come from the
/// [`Faults`] hook; damage is a flipped byte).
#[derive(Debug)]
pub struct FileFixture {
    // Dropped last: the backends below refer to files in it.
    backend: Arc<FileBackend>,
    vfs: Arc<HookVfs<Faults>>,
    home: TempDir,
}

impl FileFixture {
    /// A fresh store in a new temporary directory.
    ///
    /// # Panics
    ///
    /// If the directory cannot be created.
    pub fn new() -> FileFixture {
        let home = tempfile::Builder::new()
            .prefix("cairn-testkit-")
            .tempdir()
            .or_fail("create a temporary directory");
        let vfs = HookVfs::new(Faults::new());
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
        self.vfs.hook().set_failing(fail);
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
