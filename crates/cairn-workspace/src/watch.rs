//! The file-system watcher a [`crate::Workspace`] keeps between snapshots
//! (inotify, one watch per directory the scan reaches), so that a tree
//! snapshot looks only at the paths changed since the last one instead of
//! at every file; and [`Within`], the part of the tree such a snapshot
//! walks.
//!
//! The watcher never decides alone that nothing changed: whenever it may
//! have missed an event — the kernel's queue overflowed (`IN_Q_OVERFLOW`),
//! a watch could not be added (the per-user limit), a `.gitignore`, the
//! working directory's `.git/info/exclude` or its `.git` changed (what a
//! scan reaches changed with them), the working directory itself moved,
//! or more paths changed than a scan would look at — it says
//! [`Seen::Everything`] and the snapshot is a full scan.
//!
//! inotify tells a directory's watch of a write made through a name in that
//! directory only: a file with more than one name (a hard link) may be
//! written through a name outside the working directory, so the tracker
//! looks at every such file at each watched snapshot. Writes through a
//! shared `mmap` are reported by no watch at all (inotify(7)); they are
//! seen only by a full scan.

use std::collections::{HashMap, HashSet};
use std::path::Path;

#[cfg(target_os = "linux")]
use crate::scan::is_temporary;

/// What the watcher saw since the last snapshot.
#[derive(Debug)]
pub(crate) enum Seen {
    /// Only these paths (relative; a directory stands for everything under
    /// it) may have changed.
    Paths(HashSet<String>),
    /// Events may have been lost: only a full scan can tell.
    Everything,
}

/// The part of the working directory a snapshot walks: the paths the
/// watcher named, everything under them, and the directories on the way.
#[derive(Debug, Default)]
pub(crate) struct Within {
    paths: HashSet<String>,
    ancestors: HashSet<String>,
}

impl Within {
    /// The part made of `paths` (relative).
    pub(crate) fn new(paths: HashSet<String>) -> Within {
        let mut ancestors = HashSet::new();
        for p in &paths {
            for (i, c) in p.char_indices() {
                if c == '/' {
                    ancestors.insert(p[..i].to_owned());
                }
            }
        }
        Within { paths, ancestors }
    }

    /// The paths named.
    pub(crate) fn paths(&self) -> &HashSet<String> {
        &self.paths
    }

    /// Whether `rel` is one of the paths or under one.
    pub(crate) fn covers(&self, rel: &str) -> bool {
        if self.paths.contains(rel) {
            return true;
        }
        rel.char_indices()
            .any(|(i, c)| c == '/' && self.paths.contains(&rel[..i]))
    }

    /// Whether a walk enters or yields `rel` ("" is the root): covered, or
    /// a directory on the way to a path.
    pub(crate) fn keeps(&self, rel: &str) -> bool {
        rel.is_empty() || self.ancestors.contains(rel) || self.covers(rel)
    }
}

/// The events inotify reports for a watched directory's entries (and for
/// the directory itself).
#[cfg(target_os = "linux")]
fn mask() -> rustix::fs::inotify::WatchFlags {
    use rustix::fs::inotify::WatchFlags as W;
    W::CREATE
        | W::DELETE
        | W::MODIFY
        | W::ATTRIB
        | W::CLOSE_WRITE
        | W::MOVED_FROM
        | W::MOVED_TO
        | W::DELETE_SELF
        | W::MOVE_SELF
        | W::ONLYDIR
        | W::DONT_FOLLOW
        | W::EXCL_UNLINK
}

/// An inotify instance watching the directories of one working directory.
#[derive(Debug)]
pub(crate) struct Watcher {
    #[cfg(target_os = "linux")]
    fd: rustix::fd::OwnedFd,
    /// Watch descriptor → directory (relative; "" is the root).
    dirs: HashMap<i32, String>,
    /// Directory → watch descriptor.
    wds: HashMap<String, i32>,
    /// Paths named by events not yet handed out.
    changed: HashSet<String>,
    /// Events may have been lost since the last [`Watcher::take`].
    lost: bool,
    /// More changed paths than this is [`Seen::Everything`].
    max_paths: usize,
}

impl Watcher {
    /// A watcher with no watches yet; `None` where inotify is not
    /// available (not Linux, or the per-user instance limit reached).
    pub(crate) fn start(max_paths: usize) -> Option<Watcher> {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::inotify::{CreateFlags, init};
            let fd = init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok()?;
            Some(Watcher {
                fd,
                dirs: HashMap::new(),
                wds: HashMap::new(),
                changed: HashSet::new(),
                lost: false,
                max_paths,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = max_paths;
            None
        }
    }

    /// Watches the directory `rel` under `root` (nothing if it is watched
    /// already).
    ///
    /// # Errors
    ///
    /// When the watch cannot be added for another reason than the
    /// directory being gone: the watcher is then no longer complete.
    pub(crate) fn watch(&mut self, root: &Path, rel: &str) -> std::io::Result<()> {
        if self.wds.contains_key(rel) {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        {
            let wd = match rustix::fs::inotify::add_watch(&self.fd, root.join(rel), mask()) {
                Ok(wd) => wd,
                // Gone or replaced since the walk saw it: its parent's
                // watch reported that (not so for the working directory
                // itself).
                Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) if !rel.is_empty() => {
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            // The same directory under a new name (moved while events were
            // lost): the watch follows the inode.
            if let Some(old) = self.dirs.insert(wd, rel.to_owned()) {
                self.wds.remove(&old);
            }
            self.wds.insert(rel.to_owned(), wd);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = root;
        Ok(())
    }

    /// Watches the working directory `root` itself (a walk does not report
    /// a root named through a symlink as a directory; such a root is not
    /// watched at all, since the link may be pointed elsewhere without an
    /// event), and `.git` and `.git/info` under it
    /// (those that exist) for the one file there a scan reads,
    /// `info/exclude`: it decides what a scan reaches as a `.gitignore`
    /// does, but a scan never walks `.git`.
    ///
    /// # Errors
    ///
    /// As [`Watcher::watch`].
    pub(crate) fn watch_root(&mut self, root: &Path) -> std::io::Result<()> {
        if std::fs::symlink_metadata(root)?.is_symlink() {
            return Err(std::io::Error::other(
                "the working directory is named through a symlink",
            ));
        }
        self.watch(root, "")?;
        self.watch(root, ".git")?;
        self.watch(root, ".git/info")
    }

    /// Whether the directory `rel` is watched.
    pub(crate) fn watches(&self, rel: &str) -> bool {
        self.wds.contains_key(rel)
    }

    /// Reads the events queued since the last call.
    pub(crate) fn drain(&mut self) {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::inotify::{ReadFlags as R, Reader};
            let mut buf = [std::mem::MaybeUninit::uninit(); 16 << 10];
            let mut reader = Reader::new(&self.fd, &mut buf);
            let mut events = Vec::new();
            loop {
                match reader.next() {
                    Ok(e) => events.push((
                        e.wd(),
                        e.events(),
                        e.file_name().map(|n| n.to_bytes().to_vec()),
                    )),
                    Err(rustix::io::Errno::WOULDBLOCK) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => {
                        self.lost = true;
                        break;
                    }
                }
            }
            for (wd, flags, name) in events {
                if flags.intersects(R::QUEUE_OVERFLOW | R::UNMOUNT) {
                    self.lost = true;
                    continue;
                }
                let Some(dir) = self.dirs.get(&wd).cloned() else {
                    continue;
                };
                if flags.contains(R::IGNORED) {
                    self.dirs.remove(&wd);
                    if self.wds.get(&dir) == Some(&wd) {
                        self.wds.remove(&dir);
                    }
                    continue;
                }
                let Some(name) = name.filter(|n| !n.is_empty()) else {
                    // The watched directory itself was deleted or moved:
                    // its parent's watch names it, unless it is the root.
                    if dir.is_empty() {
                        self.lost = true;
                    }
                    self.changed.insert(dir);
                    continue;
                };
                let Ok(name) = String::from_utf8(name) else {
                    // Never in a manifest, whose paths are UTF-8.
                    continue;
                };
                if is_temporary(&name) {
                    // A restore's or a file tool's temporary file: no scan
                    // records it (its rename names the target).
                    continue;
                }
                if name == ".gitignore" {
                    self.lost = true;
                }
                if dir == ".git" || dir.starts_with(".git/") {
                    // Only what changes what a scan reaches: the exclude
                    // file, or the directory holding it.
                    if (dir == ".git" && name == "info")
                        || (dir == ".git/info" && name == "exclude")
                    {
                        self.lost = true;
                    }
                    continue;
                }
                if dir.is_empty() && name == ".git" {
                    self.lost = true;
                }
                let rel = if dir.is_empty() {
                    name.to_owned()
                } else {
                    format!("{dir}/{name}")
                };
                if flags.contains(R::ISDIR) && flags.intersects(R::MOVED_FROM | R::DELETE) {
                    self.forget(&rel);
                }
                self.changed.insert(rel);
            }
        }
        if self.changed.len() > self.max_paths {
            self.lost = true;
        }
    }

    /// Stops watching `rel` and everything under it (moved away or
    /// deleted: a watch follows the inode, so its path would be wrong).
    fn forget(&mut self, rel: &str) {
        let prefix = format!("{rel}/");
        let gone: Vec<(String, i32)> = self
            .wds
            .iter()
            .filter(|(d, _)| *d == rel || d.starts_with(&prefix))
            .map(|(d, wd)| (d.clone(), *wd))
            .collect();
        for (d, wd) in gone {
            self.wds.remove(&d);
            self.dirs.remove(&wd);
            #[cfg(target_os = "linux")]
            // Already gone with a deleted directory: nothing to undo.
            let _ = rustix::fs::inotify::remove_watch(&self.fd, wd);
        }
    }

    /// What changed since the last call (after a [`Watcher::drain`]).
    pub(crate) fn take(&mut self) -> Seen {
        let changed = std::mem::take(&mut self.changed);
        if std::mem::take(&mut self.lost) {
            Seen::Everything
        } else {
            Seen::Paths(changed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_keeps_the_changed_paths_what_is_under_them_and_the_way_there() {
        let w = Within::new(["d07/f7.rs".to_owned(), "new".to_owned()].into());
        for kept in ["", "d07", "d07/f7.rs", "new", "new/a/b.txt"] {
            assert!(w.keeps(kept), "{kept}");
        }
        for left in ["d08", "d07/f8.rs", "d07-x", "newer", "d07/f7.rs.bak"] {
            assert!(!w.keeps(left), "{left}");
        }
        assert!(w.covers("new/a") && !w.covers("d07"));
    }
}
