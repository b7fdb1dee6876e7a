//! The writer lock and the unsynced marker: taking a session's lock file
//! (waiting out a momentary holder), the pid note it carries, and the
//! `unsynced-from` marker (in the lock file and in this process) that makes
//! the next writer rewrite and sync bytes a failed fsync may have dropped.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::scan::{READ_CHUNK, read_exact_at};
use crate::error::{IoFailure, OpenError};
use crate::id::SessionId;
use crate::vfs::{OpenMode, Vfs, VfsFile};

/// The line a writer adds to its lock file when a write or sync of the log
/// fails: `unsynced-from <offset>`, the end of what its last successful sync
/// covered. On Linux a failed fsync can drop the dirty pages from the
/// write-back queue while they stay readable in the page cache, so a later
/// writer would build on bytes the disk never got and a later fsync would
/// not write them. The next writer reads the marker and rewrites the bytes
/// from that offset on (dirtying them again) and syncs before appending.
pub(super) const UNSYNCED: &str = "unsynced-from ";

/// Writes the lock file's note: our pid, and the unsynced marker if any.
/// The note helps messages and recovery but is not the log: callers decide
/// what a failure means.
pub(super) fn write_lock_note(f: &dyn VfsFile, unsynced: Option<u64>) -> io::Result<()> {
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
pub(super) fn remember_unsynced(location: &str, from: u64) {
    let mut m = UNSYNCED_IN_PROCESS
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let e = m.entry(location.to_owned()).or_insert(from);
    *e = (*e).min(from);
}

/// The in-process marker of `location`, if any.
pub(super) fn unsynced_in_process(location: &str) -> Option<u64> {
    UNSYNCED_IN_PROCESS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(location)
        .copied()
}

pub(super) fn forget_unsynced(location: &str) {
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

/// Removes the temporary files of creates that crashed
/// (`.<id>.jsonl.new`, STORES.md §1) from `dir`. A create holds the
/// session's writer lock (at `lock_path`) for as long as its temporary
/// exists, so one whose lock can be taken (or that has no lock file) is not
/// in use. Best effort: a file that cannot be probed or removed stays for
/// the next time.
pub(super) fn sweep_stale_creates(
    vfs: &dyn Vfs,
    dir: &Path,
    lock_path: impl Fn(&SessionId) -> PathBuf,
) {
    let Ok(names) = vfs.read_dir(dir) else {
        return;
    };
    for name in names {
        let Some(id) = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".jsonl.new"))
            .and_then(|n| SessionId::parse(n).ok())
        else {
            continue;
        };
        let free = match vfs.open(&lock_path(&id), OpenMode::ReadWrite) {
            // Held until dropped, after the removal below.
            Ok(lock) => lock.try_lock().ok().filter(|&l| l).map(|_| Some(lock)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(None),
            Err(_) => None,
        };
        if let Some(_lock) = free {
            let _ = vfs.remove_file(&dir.join(&name));
        }
    }
}

/// Takes the writer lock of session `id` (its lock file at `path`), writing
/// our pid into the lock file. Returns the lock file and, when the previous
/// writer recorded a failed write or sync, the offset from which the log
/// may not have reached the disk (see [`UNSYNCED`]).
pub(super) fn take_lock(
    vfs: &dyn Vfs,
    path: &Path,
    id: &SessionId,
) -> Result<(Arc<dyn VfsFile>, Option<u64>), OpenError> {
    let io_err =
        |action, source| OpenError::Io(IoFailure::new(action, path.display().to_string(), source));
    let f = vfs
        .open(path, OpenMode::CreateOrOpen)
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

/// Writes the bytes of `file` from `from` to `end` again, in place, a chunk
/// at a time (dirtying the pages a failed sync may have dropped).
pub(super) fn rewrite(file: &dyn VfsFile, from: u64, end: u64) -> io::Result<()> {
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
