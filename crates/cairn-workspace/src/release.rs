//! Freeing the files a restore replaces or removes beside its other steps
//! rather than inside each rename.
//!
//! A rename over a file, like a removal, frees the old file's inode and
//! blocks when its last reference goes. On a file system mounted with
//! `discard` that frees blocks at once (ext4 without a journal does) the
//! freeing waits for the device to discard them: on the bench machine
//! ~0.1–0.2 ms of device time a file however many threads ask, so a
//! restore of 1,000 files spent most of its renames waiting for discards,
//! one after another behind each rename. So the restore opens each old
//! file (`O_PATH`: no permission needed, nothing read, not following a
//! symlink) just before its rename or removal and hands the descriptor to
//! a few threads that close it: the rename itself returns at once, the
//! frees run while the next files are renamed, the directories synced and
//! the restore recorded, and the restore waits for the last of them before
//! it returns. Nothing on disk differs: the rename is as atomic as before,
//! and a restore killed meanwhile has its descriptors closed by the kernel,
//! which frees the files then.
//!
//! At most [`HELD_MAX`] descriptors wait to be closed, and never more than a
//! quarter of the process's soft limit on open files (a rename waits for
//! room), so a restore holds a few hundred descriptors at most and leaves
//! the rest of the process (the directory syncs, the session's own files)
//! room to open what it needs. Elsewhere than on Linux nothing is held:
//! each file is freed by its own rename.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use rustix::fd::OwnedFd;

/// Descriptors waiting to be closed at most.
const HELD_MAX: usize = 256;
/// Closing threads at most.
const THREADS: usize = 16;
/// A closing thread for every this many files; none for fewer.
const FILES_PER_THREAD: usize = 8;

/// The threads that close the old files' descriptors; [`Releaser::finish`]
/// (or dropping it) waits for them.
pub(crate) struct Releaser {
    to_close: Option<SyncSender<OwnedFd>>,
    threads: Vec<JoinHandle<()>>,
    /// Descriptors the threads have closed.
    closed: Arc<AtomicUsize>,
}

impl Releaser {
    /// Closing threads for a restore that replaces or removes `files`
    /// files: none (each file freed by its own rename) for a few.
    pub(crate) fn start(files: usize) -> Releaser {
        let wanted = if files < FILES_PER_THREAD || !cfg!(target_os = "linux") {
            0
        } else {
            files.div_ceil(FILES_PER_THREAD).min(THREADS)
        };
        let (to_close, closing) = sync_channel::<OwnedFd>(held_max());
        let closing = Arc::new(Mutex::new(closing));
        let closed = Arc::new(AtomicUsize::new(0));
        let threads: Vec<JoinHandle<()>> = (0..wanted)
            .filter_map(|_| {
                let (closing, closed) = (Arc::clone(&closing), Arc::clone(&closed));
                std::thread::Builder::new()
                    .name("cairn-release".into())
                    .spawn(move || close_all(&closing, &closed))
                    .ok()
            })
            .collect();
        Releaser {
            // No thread to close them: nothing is held.
            to_close: (!threads.is_empty()).then_some(to_close),
            threads,
            closed,
        }
    }

    /// The file at `path` held open (not following a symlink), to be
    /// handed to [`Releaser::release`] once renamed over or removed;
    /// `None` when nothing is held (no threads, not Linux, or the open
    /// failed: the file is then freed by its rename, as without this).
    pub(crate) fn hold(&self, path: &Path) -> Option<OwnedFd> {
        self.to_close.as_ref()?;
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::{Mode, OFlags};
            rustix::fs::open(
                path,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = path;
            None
        }
    }

    /// Closes `held` on one of the threads (waiting while [`HELD_MAX`]
    /// already wait), or here if they are gone.
    pub(crate) fn release(&self, held: Option<OwnedFd>) {
        if let (Some(fd), Some(to_close)) = (held, &self.to_close) {
            // Refused only when every thread is gone: the fd comes back
            // in the error and is closed here.
            drop(to_close.send(fd));
        }
    }

    /// Waits until every held file is closed (and so freed); how many the
    /// threads closed.
    pub(crate) fn finish(mut self) -> usize {
        self.wait();
        self.closed.load(Ordering::Relaxed)
    }

    fn wait(&mut self) {
        self.to_close = None;
        for t in self.threads.drain(..) {
            // A closing thread cannot panic; if it did, its files are
            // closed by now anyway.
            drop(t.join());
        }
    }
}

impl Drop for Releaser {
    fn drop(&mut self) {
        self.wait();
    }
}

/// How many descriptors may wait to be closed: [`HELD_MAX`], or a quarter
/// of the soft limit on open files when that is less (at least one).
fn held_max() -> usize {
    #[cfg(target_os = "linux")]
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    #[cfg(not(target_os = "linux"))]
    let soft: Option<u64> = None;
    soft.map_or(HELD_MAX, |n| {
        usize::try_from(n / 4).map_or(HELD_MAX, |q| q.clamp(1, HELD_MAX))
    })
}

fn close_all(closing: &Mutex<Receiver<OwnedFd>>, closed: &AtomicUsize) {
    loop {
        let next = closing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv();
        match next {
            // Closed after the lock is released: the others go on receiving.
            Ok(fd) => {
                drop(fd);
                closed.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many links the file `fd` holds still has.
    #[cfg(target_os = "linux")]
    fn links(fd: &OwnedFd) -> u64 {
        rustix::fs::fstat(fd).unwrap().st_nlink
    }

    #[test]
    fn a_file_held_across_its_rename_is_freed_by_the_time_finish_returns() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("f"), dir.path().join(".f.new"));
        std::fs::write(&old, "old").unwrap();
        std::fs::write(&new, "new").unwrap();
        let releaser = Releaser::start(100);
        let held = releaser.hold(&old);
        assert_eq!(held.is_some(), cfg!(target_os = "linux"));
        std::fs::rename(&new, &old).unwrap();
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "new");
        // The replaced file has no name left: only the descriptor keeps
        // it (and its blocks) until a closing thread lets go of it.
        #[cfg(target_os = "linux")]
        assert_eq!(links(held.as_ref().unwrap()), 0);
        releaser.release(held);
        assert_eq!(releaser.finish(), usize::from(cfg!(target_os = "linux")));
    }

    #[test]
    fn nothing_is_held_for_a_few_files_or_a_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, "x").unwrap();
        assert!(Releaser::start(3).hold(&f).is_none());
        assert!(Releaser::start(100).hold(&dir.path().join("no")).is_none());
    }

    #[test]
    fn more_files_than_the_queue_holds_are_all_closed_by_the_time_finish_returns() {
        let dir = tempfile::tempdir().unwrap();
        let n = HELD_MAX * 3;
        let releaser = Releaser::start(n);
        for i in 0..n {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, "x").unwrap();
            let held = releaser.hold(&p);
            assert_eq!(held.is_some(), cfg!(target_os = "linux"));
            std::fs::remove_file(&p).unwrap();
            releaser.release(held);
        }
        let expected = if cfg!(target_os = "linux") { n } else { 0 };
        assert_eq!(releaser.finish(), expected);
    }

    #[test]
    fn the_descriptors_waiting_stay_within_a_quarter_of_the_open_file_limit() {
        let held = held_max();
        assert!((1..=HELD_MAX).contains(&held));
        #[cfg(target_os = "linux")]
        if let Some(soft) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
            assert!(held as u64 <= (soft / 4).max(1));
        }
    }
}
