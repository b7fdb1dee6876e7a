//! Looking at the disk: the state of one path, the bounded scan of the
//! working directory, and the comparison with what the records already say
//! (size, mtime and mode first; the content is read, hashed and stored in
//! the blob store only when they changed).

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cairn_stores::BlobStore;

use crate::record::{FileState, Manifest};
use crate::{WorkspaceError, io_err, path};

/// The suffix of a restore's temporary files (`.NAME.cairn-restore`),
/// which scans skip.
pub(crate) const TEMP_SUFFIX: &str = ".cairn-restore";

/// Up to this many files (blobs of a snapshot, files of a restore) are
/// synced one by one; more are synced at once with one `syncfs`, which on a
/// busy file system also waits for everyone else's dirty data.
pub(crate) const SYNC_EACH_UP_TO: usize = 64;

/// Bounds of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Files a tree scan looks at before it stops (the record then says
    /// `truncated`, and paths it did not reach are left as they were).
    pub max_files: usize,
    /// A file larger than this is described (size, mode, mtime) but its
    /// content is not kept, so a restore cannot bring it back (and says so).
    pub max_file_bytes: u64,
}

impl Default for Limits {
    /// 20,000 files; 16 MiB per file.
    fn default() -> Limits {
        Limits {
            max_files: 20_000,
            max_file_bytes: 16 << 20,
        }
    }
}

/// What the disk holds at a path, as far as the stat tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Disk {
    /// Nothing.
    Absent,
    /// A regular file or symlink (its stat as a state without content).
    Entry(FileState),
    /// A directory or a special file: never snapshotted.
    Other,
}

/// Takes snapshots of one working directory into one blob store.
#[derive(Debug, Clone)]
pub struct Snapshotter {
    root: PathBuf,
    blobs: BlobStore,
    limits: Limits,
    exclude: Vec<PathBuf>,
}

impl Snapshotter {
    /// Snapshots of `root` (absolute), contents kept in `blobs`.
    pub fn new(root: impl Into<PathBuf>, blobs: BlobStore, limits: Limits) -> Snapshotter {
        let root = root.into();
        // The store's own files are never part of the workspace.
        let exclude = vec![blobs.dir().to_owned()];
        Snapshotter {
            root,
            blobs,
            limits,
            exclude,
        }
    }

    /// Also leaves `dir` out of tree scans (e.g. a store kept inside the
    /// working directory).
    #[must_use]
    pub fn excluding(mut self, dir: impl Into<PathBuf>) -> Snapshotter {
        self.exclude.push(dir.into());
        self
    }

    /// The working directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The blob store.
    pub fn blobs(&self) -> &BlobStore {
        &self.blobs
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The stat of `rel`.
    pub(crate) fn stat(&self, rel: &str) -> Result<Disk, WorkspaceError> {
        let p = self.root.join(rel);
        match std::fs::symlink_metadata(&p) {
            Ok(m) => Ok(disk_of(&m)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Disk::Absent),
            // A parent that is a file: nothing can be at this path.
            Err(e) if e.raw_os_error() == Some(20) => Ok(Disk::Absent),
            Err(e) => Err(io_err("read", &p)(e)),
        }
    }

    /// The full state of `rel` given its stat: `known` itself when the stat
    /// matches it (nothing read), else the content is read, hashed and kept.
    pub(crate) fn observe(
        &self,
        rel: &str,
        stat: FileState,
        known: Option<&FileState>,
    ) -> Result<FileState, WorkspaceError> {
        if let Some(k) = known
            && k.size == stat.size
            && k.mtime_ns == stat.mtime_ns
            && k.mode == stat.mode
            && k.link.is_some() == stat.link.is_some()
        {
            return Ok(k.clone());
        }
        let p = self.root.join(rel);
        if stat.link.is_some() {
            let target = std::fs::read_link(&p).map_err(io_err("read the link", &p))?;
            return Ok(FileState {
                link: Some(target.to_string_lossy().into_owned()),
                ..stat
            });
        }
        if stat.size > self.limits.max_file_bytes {
            return Ok(stat);
        }
        // Synced once for the whole snapshot, before its record.
        let r = self.blobs.put_file_unsynced(&p)?;
        Ok(FileState {
            sha256: Some(r.sha256),
            size: r.size,
            ..stat
        })
    }

    /// The changes of the named paths against `known`.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Io`] or [`WorkspaceError::Blob`].
    pub fn scan_files(
        &self,
        paths: &[String],
        known: &Manifest,
    ) -> Result<Manifest, WorkspaceError> {
        let mut changes = Manifest::new();
        for rel in paths {
            let before = known.get(rel).cloned().flatten();
            let now = match self.stat(rel)? {
                Disk::Absent | Disk::Other => None,
                Disk::Entry(stat) => Some(self.observe(rel, stat, before.as_ref())?),
            };
            if !known.contains_key(rel) || now != before {
                changes.insert(rel.clone(), now);
            }
        }
        Ok(changes)
    }

    /// The changes of the working directory against `known`: every
    /// regular file and symlink the walk reaches (`.gitignore`d paths,
    /// `.git` and the store left out; at most `max_files`), and the known
    /// paths that are gone. Returns the changes and whether the walk was
    /// cut short.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Io`] or [`WorkspaceError::Blob`].
    pub fn scan_tree(&self, known: &Manifest) -> Result<(Manifest, bool), WorkspaceError> {
        let mut changes = Manifest::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut truncated = false;
        let exclude = self.exclude.clone();
        let mut walk = ignore::WalkBuilder::new(&self.root);
        walk.hidden(false)
            .parents(false)
            .ignore(false)
            .git_ignore(true)
            .git_exclude(true)
            .git_global(false)
            .require_git(false)
            .follow_links(false)
            .filter_entry(move |e| {
                e.file_name() != ".git" && !exclude.iter().any(|x| e.path().starts_with(x))
            });
        for item in walk.build() {
            let entry = match item {
                Ok(e) => e,
                // An unreadable directory or a bad .gitignore: skip what cannot be read.
                Err(_) => continue,
            };
            if entry.depth() == 0 || entry.file_type().is_some_and(|t| t.is_dir()) {
                continue;
            }
            let name = entry.file_name().to_string_lossy();
            if name.ends_with(TEMP_SUFFIX) {
                continue;
            }
            let Some(rel) = path::relative(&self.root, entry.path()) else {
                continue;
            };
            if seen.len() >= self.limits.max_files {
                truncated = true;
                break;
            }
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(_) => continue,
            };
            let Disk::Entry(stat) = disk_of(&meta) else {
                continue;
            };
            let before = known.get(&rel).and_then(Option::as_ref);
            let now = self.observe(&rel, stat, before)?;
            if before != Some(&now) {
                changes.insert(rel.clone(), Some(now));
            }
            seen.insert(rel);
        }
        for (rel, state) in known {
            if state.is_some() && !seen.contains(rel) && !changes.contains_key(rel) {
                match self.stat(rel)? {
                    Disk::Absent | Disk::Other => {
                        changes.insert(rel.clone(), None);
                    }
                    // Ignored or beyond the limit, still there: look at it alone.
                    Disk::Entry(stat) => {
                        let now = self.observe(rel, stat, state.as_ref())?;
                        if state.as_ref() != Some(&now) {
                            changes.insert(rel.clone(), Some(now));
                        }
                    }
                }
            }
        }
        Ok((changes, truncated))
    }
}

/// The stat of a file as a state without content.
pub(crate) fn disk_of(m: &std::fs::Metadata) -> Disk {
    let mtime_ns = m
        .mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(m.mtime_nsec());
    let t = m.file_type();
    if t.is_symlink() {
        Disk::Entry(FileState {
            sha256: None,
            size: 0,
            mode: 0,
            link: Some(String::new()),
            mtime_ns,
        })
    } else if t.is_file() {
        Disk::Entry(FileState {
            sha256: None,
            size: m.len(),
            mode: m.permissions().mode() & 0o7777,
            link: None,
            mtime_ns,
        })
    } else {
        Disk::Other
    }
}
