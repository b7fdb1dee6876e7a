//! When one `syncfs(2)` of a file system makes data as durable as an
//! `fdatasync` of each file written to it: the blob store's `sync` and the
//! workspace restore's flush ask here before they use it.
//!
//! Two conditions, both needed. The file system must be a local one whose
//! `syncfs` writes out, commits and flushes to the device everything
//! `fdatasync` would ([`PERSISTS`]): on FUSE (but virtiofs), CIFS, 9p or NFS
//! it writes pages to the server without asking it to persist them, and
//! overlayfs did not report its upper layer's write-back errors on older
//! kernels. And the kernel must report write-back errors through `syncfs`
//! (Linux 5.8 or later). Not on Linux: never.

use std::path::Path;

/// The file systems (`statfs`'s `f_type`) whose `syncfs` persists what
/// `fdatasync` would and reports write-back errors: ext2/3/4, XFS, btrfs,
/// tmpfs (nothing to persist) and f2fs. Any other — overlayfs, FUSE,
/// network file systems, or one not known here — gets an `fdatasync` of
/// each file.
#[cfg(target_os = "linux")]
pub const PERSISTS: &[(u32, &str)] = &[
    (0xEF53, "ext2/3/4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0xF2F5_2010, "f2fs"),
];

/// The rule, given the file system's `f_type` and the kernel release
/// (`uname -r`): the file system is one of [`PERSISTS`] and the kernel is
/// 5.8 or later.
#[cfg(target_os = "linux")]
pub fn persists(fs_type: Option<u32>, release: Option<&str>) -> bool {
    let listed = fs_type.is_some_and(|t| PERSISTS.iter().any(|&(m, _)| m == t));
    listed && release.and_then(version_of).is_some_and(|v| v >= (5, 8))
}

/// Whether a `syncfs` of the file system holding `path` persists data
/// ([`persists`] of its `f_type` and this kernel); false when either cannot
/// be read, and everywhere but Linux.
pub fn persists_at(path: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        persists(fs_type(path), kernel_release().as_deref())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        false
    }
}

/// `statfs(path)`'s `f_type` (its magic number: 32 bits on every file
/// system, whatever the width of the field).
#[cfg(target_os = "linux")]
pub fn fs_type(path: &Path) -> Option<u32> {
    // The low 32 bits: on 32-bit targets the field is signed and a magic
    // such as btrfs's reads negative.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    rustix::fs::statfs(path).ok().map(|s| s.f_type as u32)
}

/// This kernel's release (`/proc/sys/kernel/osrelease`).
#[cfg(target_os = "linux")]
pub fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()
}

/// `(major, minor)` of a kernel release such as `6.18.44-fc-v669`.
#[cfg(target_os = "linux")]
fn version_of(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn syncfs_persists_only_on_a_listed_local_file_system_of_a_kernel_that_reports_errors() {
        let new = Some("6.18.44-fc-v669");
        for (magic, name) in PERSISTS {
            assert!(persists(Some(*magic), new), "{name}");
        }
        // overlayfs, FUSE, NFS, CIFS (SMB2), 9p, an unknown one, statfs failing.
        for other in [
            Some(0x794C_7630),
            Some(0x6573_5546),
            Some(0x6969),
            Some(0xFE53_4D42),
            Some(0x0102_1997),
            Some(0x1234_5678),
            None,
        ] {
            assert!(!persists(other, new), "{other:x?}");
        }
        let ext4 = Some(0xEF53);
        assert!(persists(ext4, Some("5.8.0\n")));
        assert!(!persists(ext4, Some("5.7.19")));
        assert!(!persists(ext4, Some("4.19.0-18-amd64")));
        assert!(!persists(ext4, Some("garbage")));
        assert!(!persists(ext4, None));
    }

    #[test]
    fn a_file_system_magic_is_read_from_statfs() {
        let dir = tempfile::tempdir().unwrap();
        assert!(fs_type(dir.path()).is_some());
        assert_eq!(fs_type(&dir.path().join("missing")), None);
    }
}
