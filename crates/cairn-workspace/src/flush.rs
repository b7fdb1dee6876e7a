//! How a restore makes the files it wrote under temporary names durable
//! before it renames any of them over its path: one `fdatasync` per file,
//! or one `syncfs(2)` of the working directory's file system, and the rule
//! that picks between them.
//!
//! Both leave the same thing on disk; they differ in what they wait for.
//! `fdatasync` of 1,000 new files asks the file system for many journal
//! commits and device flushes (overlapped from a few threads, still many);
//! one `syncfs` writes them all out and commits and flushes once, but it
//! also writes out every other process's dirty data on that file system,
//! which after a large build can be gigabytes. So `syncfs` is used only when
//! there is little of that to wait for (see [`Flush::choose`]).
//!
//! `syncfs` is trusted only where it reports write-back errors: since Linux
//! 5.8 it returns an error when a write-back on that file system failed
//! since the descriptor it is called on was opened (the file system's
//! error sequence is sampled at `open`). The restore opens that descriptor
//! before it writes anything, so a failed write-back of one of its files
//! fails the restore before anything is renamed.

use std::fs::File;
use std::path::Path;

use crate::{WorkspaceError, io_err};

/// Other processes' dirty data a `syncfs` may wait for besides the
/// restore's own: 64 MiB, well under a second of write-back on most disks.
/// With more, the `fdatasync` of each file, which waits for the restore's
/// own data alone, is the safer bet.
pub(crate) const OTHERS_DIRTY_MAX: u64 = 64 << 20;

/// How a restore makes the files it wrote durable before renaming them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Flush {
    /// [`Flush::FileSystem`] on Linux 5.8 or later while the system holds
    /// little dirty data (`Dirty` + `Writeback` of `/proc/meminfo` at most
    /// the restore's bytes + 64 MiB), else [`Flush::EachFile`].
    #[default]
    Auto,
    /// An `fdatasync` of each file (from a few threads at once): waits for
    /// nothing but the restore's own data.
    EachFile,
    /// One `syncfs(2)` of the working directory's file system (a file that
    /// lands on another file system is synced by itself): one write-back,
    /// commit and device flush for all the files, but it also waits for
    /// everything else dirty on that file system.
    FileSystem,
}

impl Flush {
    /// The flush a restore writing `bytes` uses: [`Flush::FileSystem`]
    /// when the kernel's `syncfs` reports write-back errors (Linux 5.8 or
    /// later) and the dirty data and data under write-back of the whole
    /// system (`/proc/meminfo`'s `Dirty` + `Writeback`) are at most
    /// `bytes` + [`OTHERS_DIRTY_MAX`]; otherwise, or when either cannot be
    /// read, [`Flush::EachFile`]. `EachFile` and `FileSystem` stay as they
    /// are.
    pub(crate) fn resolve(self, bytes: u64) -> Flush {
        match self {
            Flush::Auto => Flush::choose(kernel_release().as_deref(), dirty_bytes(), bytes),
            Flush::EachFile | Flush::FileSystem => self,
        }
    }

    /// The rule of [`Flush::resolve`], given the kernel release (`uname
    /// -r`), the system's dirty bytes and the bytes the restore writes.
    pub(crate) fn choose(release: Option<&str>, dirty: Option<u64>, bytes: u64) -> Flush {
        let reports_errors = release.and_then(version_of).is_some_and(|v| v >= (5, 8));
        match dirty {
            Some(d) if reports_errors && d <= bytes.saturating_add(OTHERS_DIRTY_MAX) => {
                Flush::FileSystem
            }
            _ => Flush::EachFile,
        }
    }
}

/// `(major, minor)` of a kernel release such as `6.18.44-fc-v669`.
fn version_of(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()
}

/// `Dirty` + `Writeback` of `/proc/meminfo`, in bytes.
fn dirty_bytes() -> Option<u64> {
    dirty_of(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn dirty_of(meminfo: &str) -> Option<u64> {
    let field = |name: &str| -> Option<u64> {
        let value = meminfo.lines().find_map(|l| l.strip_prefix(name))?;
        let kib: u64 = value.trim().trim_end_matches("kB").trim().parse().ok()?;
        kib.checked_mul(1024)
    };
    field("Dirty:")?.checked_add(field("Writeback:")?)
}

/// The working directory's file system, opened before the restore writes
/// anything (so its `syncfs` reports every write-back error from then on).
pub(crate) struct FileSystem {
    root: File,
    dev: u64,
}

impl FileSystem {
    /// Opens `root`.
    pub(crate) fn open(root: &Path) -> Result<FileSystem, WorkspaceError> {
        use std::os::unix::fs::MetadataExt;
        let f = File::open(root).map_err(io_err("open", root))?;
        let dev = f.metadata().map_err(io_err("read", root))?.dev();
        Ok(FileSystem { root: f, dev })
    }

    /// Whether a file with this `st_dev` is on it (else it must be synced
    /// by itself).
    pub(crate) fn holds(&self, dev: u64) -> bool {
        dev == self.dev
    }

    /// Writes out and commits everything dirty on it.
    pub(crate) fn sync(&self, root: &Path) -> Result<(), WorkspaceError> {
        rustix::fs::syncfs(&self.root)
            .map_err(|e| io_err("sync the file system of", root)(std::io::Error::from(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncfs_only_on_a_kernel_that_reports_its_errors_and_with_little_else_dirty() {
        let mib = 1 << 20;
        let new = Some("6.18.44-fc-v669");
        assert_eq!(Flush::choose(new, Some(0), 4 * mib), Flush::FileSystem);
        assert_eq!(
            Flush::choose(new, Some(68 * mib), 4 * mib),
            Flush::FileSystem
        );
        assert_eq!(
            Flush::choose(new, Some(68 * mib + 1), 4 * mib),
            Flush::EachFile
        );
        assert_eq!(Flush::choose(new, None, 4 * mib), Flush::EachFile);
        assert_eq!(Flush::choose(Some("5.8.0"), Some(0), 0), Flush::FileSystem);
        assert_eq!(Flush::choose(Some("5.7.19"), Some(0), 0), Flush::EachFile);
        assert_eq!(
            Flush::choose(Some("4.19.0-18-amd64"), Some(0), 0),
            Flush::EachFile
        );
        assert_eq!(Flush::choose(Some("garbage"), Some(0), 0), Flush::EachFile);
        assert_eq!(Flush::choose(None, Some(0), 0), Flush::EachFile);
        assert_eq!(Flush::EachFile.resolve(0), Flush::EachFile);
        assert_eq!(Flush::FileSystem.resolve(u64::MAX), Flush::FileSystem);
    }

    #[test]
    fn dirty_bytes_are_dirty_plus_writeback_of_meminfo() {
        let meminfo = "MemTotal:       24684084 kB\nDirty:            137596 kB\nWriteback:            32 kB\nWritebackTmp:          0 kB\n";
        assert_eq!(dirty_of(meminfo), Some((137_596 + 32) * 1024));
        assert_eq!(dirty_of("MemTotal: 1 kB\nDirty: 5 kB\n"), None);
        assert_eq!(dirty_of("Dirty: x kB\nWriteback: 0 kB\n"), None);
        // The real one parses here (Linux).
        assert!(dirty_bytes().is_some());
        assert!(kernel_release().as_deref().and_then(version_of).is_some());
    }
}
