//! How a restore makes the files it wrote under temporary names durable
//! before it renames any of them over its path: one `fdatasync` per file,
//! or one `syncfs(2)` of the working directory's file system, and the rule
//! that picks between them.
//!
//! Where the file system implements `syncfs` fully, both leave the same
//! thing on disk; they differ in what they wait for. `fdatasync` of 1,000
//! new files asks the file system for many journal commits and device
//! flushes (overlapped from a few threads, still many); one `syncfs` writes
//! them all out and commits and flushes once, but it also writes out every
//! other process's dirty data on that file system, which after a large
//! build can be gigabytes. So `syncfs` is used only when there is little of
//! that to wait for (see [`Flush::choose`]).
//!
//! `syncfs` is trusted only where it reports write-back errors: since Linux
//! 5.8 it returns an error when a write-back on that file system failed
//! since the descriptor it is called on was opened (the file system's
//! error sequence is sampled at `open`). The restore opens that descriptor
//! before it writes anything, so a failed write-back of one of its files
//! fails the restore before anything is renamed.
//!
//! And only on a local file system known to persist everything at
//! `syncfs` ([`cairn_blobs::syncfs::PERSISTS`], by `statfs`'s `f_type`): on FUSE (but
//! virtiofs), CIFS, 9p and other network file systems `syncfs` does not ask
//! the server to persist anything while `fdatasync` does, and overlayfs
//! before about 5.11 may not report its upper layer's write-back errors.
//!
//! `syncfs` and `/proc` are Linux's: elsewhere a restore always syncs each
//! file.

#[cfg(target_os = "linux")]
use std::fs::File;
use std::path::Path;

use crate::WorkspaceError;
#[cfg(target_os = "linux")]
use crate::io_err;

/// Other processes' dirty data a `syncfs` may wait for besides the
/// restore's own: 64 MiB, well under a second of write-back on most disks.
/// With more, the `fdatasync` of each file, which waits for the restore's
/// own data alone, is the safer bet.
#[cfg(target_os = "linux")]
pub(crate) const OTHERS_DIRTY_MAX: u64 = 64 << 20;

/// How a restore makes the files it wrote durable before renaming them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Flush {
    /// [`Flush::FileSystem`] on Linux 5.8 or later, when the working
    /// directory is on a local file system whose `syncfs` persists
    /// everything (ext2/3/4, XFS, btrfs, tmpfs, f2fs) and the system holds
    /// little dirty data (`Dirty` + `Writeback` of `/proc/meminfo` at most
    /// the restore's bytes + 64 MiB); else [`Flush::EachFile`].
    #[default]
    Auto,
    /// An `fdatasync` of each file (from a few threads at once): waits for
    /// nothing but the restore's own data.
    EachFile,
    /// One `syncfs(2)` of the working directory's file system (a file that
    /// lands on another file system is synced by itself): one write-back,
    /// commit and device flush for all the files, but it also waits for
    /// everything else dirty on that file system. Asked for explicitly it
    /// is used on any file system, so ask for it only on one whose
    /// `syncfs` persists data (not FUSE, CIFS, 9p or NFS). Linux only:
    /// elsewhere it is [`Flush::EachFile`].
    FileSystem,
}

impl Flush {
    /// The flush a restore writing `bytes` under `root` uses. `Auto`:
    /// [`Flush::FileSystem`] when `root`'s file system is one of
    /// [`cairn_blobs::syncfs::PERSISTS`], the kernel's `syncfs` reports write-back errors
    /// (Linux 5.8 or later) and the dirty data and data under write-back of
    /// the whole system (`/proc/meminfo`'s `Dirty` + `Writeback`) are at
    /// most `bytes` + [`OTHERS_DIRTY_MAX`]; otherwise, or when any of them
    /// cannot be read, [`Flush::EachFile`]. `EachFile` and `FileSystem`
    /// stay as they are. Not on Linux: always `EachFile`.
    pub(crate) fn resolve(self, root: &Path, bytes: u64) -> Flush {
        #[cfg(target_os = "linux")]
        {
            match self {
                Flush::Auto => Flush::choose(
                    cairn_blobs::syncfs::fs_type(root),
                    cairn_blobs::syncfs::kernel_release().as_deref(),
                    dirty_bytes(),
                    bytes,
                ),
                Flush::EachFile | Flush::FileSystem => self,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (self, root, bytes);
            Flush::EachFile
        }
    }

    /// The rule of `Auto` in [`Flush::resolve`], given the `f_type` of the
    /// working directory's file system, the kernel release (`uname -r`),
    /// the system's dirty bytes and the bytes the restore writes.
    #[cfg(target_os = "linux")]
    pub(crate) fn choose(
        fs_type: Option<u32>,
        release: Option<&str>,
        dirty: Option<u64>,
        bytes: u64,
    ) -> Flush {
        match dirty {
            Some(d)
                if cairn_blobs::syncfs::persists(fs_type, release)
                    && d <= bytes.saturating_add(OTHERS_DIRTY_MAX) =>
            {
                Flush::FileSystem
            }
            _ => Flush::EachFile,
        }
    }
}

/// `Dirty` + `Writeback` of `/proc/meminfo`, in bytes.
#[cfg(target_os = "linux")]
fn dirty_bytes() -> Option<u64> {
    dirty_of(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

#[cfg(target_os = "linux")]
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
#[cfg(target_os = "linux")]
pub(crate) struct FileSystem {
    root: File,
    dev: u64,
}

#[cfg(target_os = "linux")]
impl FileSystem {
    /// `root`'s file system, opened when `flush` (resolved) is
    /// [`Flush::FileSystem`]; `None` when each file is synced by itself.
    pub(crate) fn open_for(
        flush: Flush,
        root: &Path,
    ) -> Result<Option<FileSystem>, WorkspaceError> {
        match flush {
            Flush::FileSystem => FileSystem::open(root).map(Some),
            Flush::Auto | Flush::EachFile => Ok(None),
        }
    }

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

/// No `syncfs` here: [`Flush::resolve`] never chooses it, so there is no
/// value of this type.
#[cfg(not(target_os = "linux"))]
pub(crate) enum FileSystem {}

#[cfg(not(target_os = "linux"))]
impl FileSystem {
    /// Always `None`: each file is synced by itself.
    pub(crate) fn open_for(
        flush: Flush,
        root: &Path,
    ) -> Result<Option<FileSystem>, WorkspaceError> {
        let _ = (flush, root);
        Ok(None)
    }

    pub(crate) fn holds(&self, _dev: u64) -> bool {
        match *self {}
    }

    pub(crate) fn sync(&self, _root: &Path) -> Result<(), WorkspaceError> {
        match *self {}
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    const EXT4: Option<u32> = Some(0xEF53);

    #[test]
    fn syncfs_only_on_a_kernel_that_reports_its_errors_and_with_little_else_dirty() {
        let mib = 1 << 20;
        let new = Some("6.18.44-fc-v669");
        assert_eq!(
            Flush::choose(EXT4, new, Some(0), 4 * mib),
            Flush::FileSystem
        );
        assert_eq!(
            Flush::choose(EXT4, new, Some(68 * mib), 4 * mib),
            Flush::FileSystem
        );
        assert_eq!(
            Flush::choose(EXT4, new, Some(68 * mib + 1), 4 * mib),
            Flush::EachFile
        );
        assert_eq!(Flush::choose(EXT4, new, None, 4 * mib), Flush::EachFile);
        assert_eq!(
            Flush::choose(EXT4, Some("5.8.0"), Some(0), 0),
            Flush::FileSystem
        );
        assert_eq!(
            Flush::choose(EXT4, Some("5.7.19"), Some(0), 0),
            Flush::EachFile
        );
        assert_eq!(
            Flush::choose(EXT4, Some("4.19.0-18-amd64"), Some(0), 0),
            Flush::EachFile
        );
        assert_eq!(
            Flush::choose(EXT4, Some("garbage"), Some(0), 0),
            Flush::EachFile
        );
        assert_eq!(Flush::choose(EXT4, None, Some(0), 0), Flush::EachFile);
        let root = Path::new("/");
        assert_eq!(Flush::EachFile.resolve(root, 0), Flush::EachFile);
        assert_eq!(Flush::FileSystem.resolve(root, u64::MAX), Flush::FileSystem);
    }

    #[test]
    fn syncfs_only_on_a_local_file_system_that_persists_at_syncfs() {
        // The list itself is cairn_blobs::syncfs's (tested there): one
        // file system on it, and overlayfs and a failed statfs off it.
        let new = Some("6.18.44-fc-v669");
        assert_eq!(Flush::choose(EXT4, new, Some(0), 0), Flush::FileSystem);
        for other in [Some(0x794C_7630), None] {
            assert_eq!(
                Flush::choose(other, new, Some(0), 0),
                Flush::EachFile,
                "{other:x?}"
            );
        }
    }

    #[test]
    fn dirty_bytes_are_dirty_plus_writeback_of_meminfo() {
        let meminfo = "MemTotal:       24684084 kB\nDirty:            137596 kB\nWriteback:            32 kB\nWritebackTmp:          0 kB\n";
        assert_eq!(dirty_of(meminfo), Some((137_596 + 32) * 1024));
        assert_eq!(dirty_of("MemTotal: 1 kB\nDirty: 5 kB\n"), None);
        assert_eq!(dirty_of("Dirty: x kB\nWriteback: 0 kB\n"), None);
        // The real one parses here (Linux).
        assert!(dirty_bytes().is_some());
        assert!(cairn_blobs::syncfs::kernel_release().is_some());
    }
}
