//! Looking at the disk: the state of one path, the bounded scan of the
//! working directory, and the comparison with what the records already say
//! (size, mtime and mode first; the content is read, hashed and stored in
//! the blob store only when they changed).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_blobs::BlobStore;

use crate::record::{FileState, Manifest};
use crate::watch::Within;
use crate::{WorkspaceError, io_err, path};

/// A regular file's timestamp tick, as coarse as any file system's (FAT
/// keeps 2 s; Linux's own file systems the kernel's clock tick, a few ms).
const TICK_NS: i64 = 2_000_000_000;

/// Files up to this size whose content is UTF-8 are kept in the record
/// itself, not in a blob.
pub(crate) const INLINE_MAX: u64 = 1024;

/// The suffix of a restore's temporary files (`.NAME.cairn-restore`),
/// which scans skip.
pub(crate) const TEMP_SUFFIX: &str = ".cairn-restore";

/// What separates the target's name from the writer's process id in the
/// name of a file tool's temporary file (`.NAME.cairn-write-PID`).
const WRITE_TEMP_MARK: &str = ".cairn-write-";

/// The name of the temporary file under which process `pid` writes the
/// new content of the file named `name` (in the same directory):
/// `.NAME.cairn-write-PID`. Scans never record such a file
/// ([`is_write_temporary`]).
pub fn write_temporary(name: &str, pid: u32) -> String {
    format!(".{name}{WRITE_TEMP_MARK}{pid}")
}

/// The target's name and the writer's process id of a name that
/// [`write_temporary`] made (`None`: not such a name).
pub fn parse_write_temporary(name: &str) -> Option<(&str, u32)> {
    let (target, pid) = name.strip_prefix('.')?.rsplit_once(WRITE_TEMP_MARK)?;
    if target.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((target, pid.parse().ok()?))
}

/// Whether `name` is a file tool's temporary file ([`write_temporary`]):
/// a write killed before its rename leaves one behind, which no snapshot
/// records, so a restore neither brings it back nor lists it.
pub fn is_write_temporary(name: &str) -> bool {
    parse_write_temporary(name).is_some()
}

/// Whether a scan leaves the file named `name` out: a restore's or a file
/// tool's temporary file.
pub(crate) fn is_temporary(name: &str) -> bool {
    name.ends_with(TEMP_SUFFIX) || is_write_temporary(name)
}

/// Up to this many blobs of a snapshot are synced one by one; more are
/// synced at once with one `syncfs`, which on a busy file system also waits
/// for everyone else's dirty data. (A restore picks between the two by how
/// much else is dirty: `flush.rs`.)
pub(crate) const SYNC_EACH_UP_TO: usize = 64;

/// Bounds of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Paths (files, symlinks, directories) a tree scan looks at before it
    /// stops (the record then says `truncated`, and paths it did not reach
    /// are left as they were); also the most changed paths a watcher
    /// hands a snapshot before it asks for a full scan instead.
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
    /// A regular file, symlink or directory (its stat as a state without
    /// content).
    Entry(FileState),
    /// A special file: never snapshotted.
    Other,
}

/// Takes snapshots of one working directory into one blob store.
#[derive(Debug, Clone)]
pub struct Snapshotter {
    root: PathBuf,
    blobs: BlobStore,
    limits: Limits,
    exclude: Vec<PathBuf>,
    /// Keeps what it reads (inline or as a blob); else only hashes it.
    keep: bool,
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
            keep: true,
        }
    }

    /// Only hashes what it reads, keeping nothing (a restore's plan,
    /// which compares the disk with the records and keeps only the
    /// content of the files changed outside the agent).
    #[must_use]
    pub(crate) fn hashing_only(mut self) -> Snapshotter {
        self.keep = false;
        self
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
    /// matches it (nothing read) and it was not `recent`, else the content
    /// is read, hashed and kept (inline when small text, else in the blob
    /// store, synced by the caller before the record; nothing kept when
    /// hashing only).
    pub(crate) fn observe(
        &self,
        rel: &str,
        stat: FileState,
        known: Option<&FileState>,
    ) -> Result<FileState, WorkspaceError> {
        if stat.dir {
            return Ok(stat);
        }
        if let Some(k) = known
            && !k.recent
            && !k.dir
            && k.size == stat.size
            && k.mtime_ns == stat.mtime_ns
            && k.mode == stat.mode
            && k.link.is_some() == stat.link.is_some()
        {
            return Ok(k.clone());
        }
        let stat = FileState {
            recent: is_recent(stat.mtime_ns),
            ..stat
        };
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
        if !self.keep {
            let mut f = std::fs::File::open(&p).map_err(io_err("read", &p))?;
            let (sha256, size) = cairn_blobs::digest_of(&mut f).map_err(io_err("read", &p))?;
            return Ok(FileState {
                sha256: Some(sha256),
                size,
                ..stat
            });
        }
        if stat.size <= INLINE_MAX {
            let bytes = std::fs::read(&p).map_err(io_err("read", &p))?;
            if bytes.len() as u64 <= INLINE_MAX
                && let Ok(text) = String::from_utf8(bytes)
            {
                return Ok(FileState {
                    sha256: Some(cairn_blobs::digest(text.as_bytes())),
                    size: text.len() as u64,
                    text: Some(text),
                    ..stat
                });
            }
        }
        // Synced once for the whole snapshot, before its record.
        let r = self.blobs.put_file_unsynced(&p)?;
        Ok(FileState {
            sha256: Some(r.sha256),
            size: r.size,
            ..stat
        })
    }

    /// The changes of the named paths against `known`, and the state of
    /// each directory on their way.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Io`] or [`WorkspaceError::Blob`].
    pub fn scan_files(
        &self,
        paths: &[String],
        known: &Manifest,
    ) -> Result<Scanned, WorkspaceError> {
        let mut out = Scanned::default();
        // The directories a tool may create on the way, parents first.
        let dirs: BTreeSet<&str> = paths
            .iter()
            .flat_map(|p| {
                p.char_indices()
                    .filter(|(_, c)| *c == '/')
                    .map(|(i, _)| &p[..i])
            })
            .collect();
        let mut looked: HashSet<&str> = HashSet::new();
        for rel in dirs.into_iter().chain(paths.iter().map(String::as_str)) {
            if !looked.insert(rel) || rel.split('/').any(is_temporary) {
                continue;
            }
            let before = known.get(rel).cloned().flatten();
            let now = match self.stat(rel)? {
                Disk::Absent | Disk::Other => None,
                Disk::Entry(stat) => Some(self.observe(rel, stat, before.as_ref())?),
            };
            out.note(rel, before.as_ref(), now, known.contains_key(rel));
        }
        Ok(out)
    }

    /// The changes of the working directory against `known`: every
    /// regular file, symlink and directory the walk reaches (`.gitignore`d
    /// paths, `.git`, the store and temporary files left out: a restore's
    /// and the file tools' ([`is_write_temporary`]); at most `max_files`),
    /// and the known paths that are gone. With `within`, only that part of
    /// the tree is walked and compared. `dirs` is told of the directories
    /// (where a watcher adds its watches).
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Io`] or [`WorkspaceError::Blob`].
    pub(crate) fn scan_tree(
        &self,
        known: &Manifest,
        within: Option<Arc<Within>>,
        dirs: Dirs<'_>,
    ) -> Result<Scanned, WorkspaceError> {
        let mut along = match dirs {
            Dirs::First(on_dir) => {
                for entry in self.walk(within.clone(), true).build().flatten() {
                    if entry.file_type().is_some_and(|t| t.is_dir())
                        && let Some(rel) = self.rel_of(entry.path())
                    {
                        on_dir(&rel);
                    }
                }
                None
            }
            Dirs::Along(on_dir) => Some(on_dir),
        };
        let mut out = Scanned::default();
        let mut seen: HashSet<String> = HashSet::new();
        for entry in self.walk(within.clone(), false).build().flatten() {
            if entry.depth() == 0 {
                continue;
            }
            let Some(rel) = path::relative(&self.root, entry.path()) else {
                continue;
            };
            if seen.len() >= self.limits.max_files {
                out.truncated = true;
                break;
            }
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let Disk::Entry(stat) = disk_of(&meta) else {
                continue;
            };
            if meta.is_file() {
                out.linked.insert(rel.clone(), meta.nlink() > 1);
            }
            if stat.dir
                && let Some(on_dir) = along.as_mut()
            {
                on_dir(&rel);
            }
            let before = known.get(&rel).and_then(Option::as_ref);
            let now = self.observe(&rel, stat, before)?;
            out.note(&rel, before, Some(now), true);
            seen.insert(rel);
        }
        // The known paths the walk did not reach: gone, or ignored or
        // beyond the limit and still there (looked at alone).
        let unseen: Vec<(&String, &FileState)> = match &within {
            None => known
                .iter()
                .filter_map(|(p, s)| Some((p, s.as_ref()?)))
                .filter(|(p, _)| !seen.contains(*p))
                .collect(),
            Some(w) => w
                .paths()
                .iter()
                .flat_map(|p| {
                    let under = format!("{p}/");
                    known.get_key_value(p).into_iter().chain(
                        known
                            .range(under.clone()..)
                            .take_while(move |(k, _)| k.starts_with(&under)),
                    )
                })
                .filter_map(|(p, s)| Some((p, s.as_ref()?)))
                .filter(|(p, _)| !seen.contains(*p))
                .collect(),
        };
        for (rel, state) in unseen {
            let now = match self.stat(rel)? {
                Disk::Absent | Disk::Other => None,
                Disk::Entry(stat) => Some(self.observe(rel, stat, Some(state))?),
            };
            out.note(rel, Some(state), now, true);
        }
        Ok(out)
    }

    /// What is on disk and in no record, so a restore leaves it as it is:
    /// each top-most such path (a directory is named, not what it holds),
    /// with why — `.gitignore`d (or `.git/info/exclude`d: no scan looks at
    /// it), or `unknown` (not in `known`, the state the records describe:
    /// past a snapshot's path limit, or made outside the agent since the
    /// last snapshot; only with `known`: a session whose tools only named
    /// their files says nothing of the others). At most
    /// [`Limits::max_files`] paths are looked at
    /// through the ignore rules; past that, what was not reached is named
    /// as such.
    pub(crate) fn left_out(
        &self,
        known: Option<&Manifest>,
        ignored: &'static str,
        unknown: &'static str,
        unreached: &'static str,
    ) -> Vec<(String, &'static str)> {
        let max = self.limits.max_files;
        let mut out = Vec::new();
        let mut kept: HashSet<std::ffi::OsString> = HashSet::new();
        let mut capped = false;
        let mut under_unknown: Option<String> = None;
        for entry in self.walk(None, false).build().flatten() {
            if kept.len() >= max {
                capped = true;
                break;
            }
            kept.insert(entry.path().as_os_str().to_owned());
            if entry.depth() == 0 {
                continue;
            }
            let Some(rel) = path::relative(&self.root, entry.path()) else {
                continue;
            };
            if under_unknown
                .as_ref()
                .is_some_and(|d| rel.starts_with(&format!("{d}/")))
            {
                continue;
            }
            if known.is_some_and(|k| !k.get(&rel).is_some_and(Option::is_some)) && out.len() < max {
                out.push((rel.clone(), unknown));
                under_unknown = Some(rel);
            }
        }
        let why = if capped { unreached } else { ignored };
        let kept = Arc::new(kept);
        let found = Arc::new(std::sync::Mutex::new(Vec::new()));
        let exclude = self.exclude.clone();
        let root = self.root.clone();
        let mut all = ignore::WalkBuilder::new(&self.root);
        let (seen, into) = (Arc::clone(&kept), Arc::clone(&found));
        all.standard_filters(false)
            .follow_links(false)
            .filter_entry(move |e| {
                if e.file_name() == ".git"
                    || is_temporary(&e.file_name().to_string_lossy())
                    || exclude.iter().any(|x| e.path().starts_with(x))
                {
                    return false;
                }
                if seen.contains(e.path().as_os_str()) {
                    return true;
                }
                if let Some(rel) = path::relative(&root, e.path()) {
                    let mut found = into
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if found.len() < max {
                        found.push(rel);
                    }
                }
                false
            });
        for _ in all.build().flatten() {}
        let found = found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        out.extend(found.iter().map(|p| (p.clone(), why)));
        out
    }

    /// `path` relative to the root ("" for the root itself), when it is a
    /// path a manifest can name.
    fn rel_of(&self, p: &Path) -> Option<String> {
        if p == self.root {
            return Some(String::new());
        }
        path::relative(&self.root, p)
    }

    /// The walker of tree scans (`dirs`: directories only).
    fn walk(&self, within: Option<Arc<Within>>, dirs: bool) -> ignore::WalkBuilder {
        let exclude = self.exclude.clone();
        let root = self.root.clone();
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
                if e.file_name() == ".git"
                    || (e.depth() > 0 && is_temporary(&e.file_name().to_string_lossy()))
                    || exclude.iter().any(|x| e.path().starts_with(x))
                {
                    return false;
                }
                if dirs && !e.file_type().is_some_and(|t| t.is_dir()) {
                    return false;
                }
                match &within {
                    None => true,
                    Some(w) => e
                        .path()
                        .strip_prefix(&root)
                        .ok()
                        .and_then(Path::to_str)
                        .is_some_and(|rel| w.keeps(rel)),
                }
            });
        walk
    }
}

/// When a tree scan tells of the directories it reaches.
pub(crate) enum Dirs<'a> {
    /// In a first walk of the directories alone, before any is read for the
    /// comparison (so a watch added then misses nothing the comparison
    /// does not see).
    First(&'a mut dyn FnMut(&str)),
    /// As the comparison's walk reaches them (the root excepted).
    Along(&'a mut dyn FnMut(&str)),
}

/// What a scan found.
#[derive(Debug, Clone, Default)]
pub struct Scanned {
    /// The paths whose state differs from what was known (`None`: gone).
    pub changes: Manifest,
    /// Paths whose state is unchanged but whose known state was `recent`
    /// and now is not: the tracker remembers it, the record does not list
    /// it.
    pub settled: Manifest,
    /// A tree scan stopped at its file-count limit.
    pub truncated: bool,
    /// The regular files a tree scan walked to, and whether each has more
    /// than one name (a hard link): a write through another name reaches
    /// no watch of the working directory, so a watched snapshot looks at
    /// such a file every time.
    pub linked: BTreeMap<String, bool>,
}

impl Scanned {
    /// Adds what a later scan found (its states win).
    pub(crate) fn merge(&mut self, later: Scanned) {
        self.changes.extend(later.changes);
        self.settled.extend(later.settled);
        self.truncated |= later.truncated;
        self.linked.extend(later.linked);
    }

    fn note(&mut self, rel: &str, before: Option<&FileState>, now: Option<FileState>, known: bool) {
        let same = match (before, &now) {
            (None, None) => known,
            (Some(b), Some(n)) => b.same_stat(n),
            _ => false,
        };
        if !same {
            self.changes.insert(rel.to_owned(), now);
        } else if let (Some(b), Some(n)) = (before, now)
            && b.recent != n.recent
        {
            self.settled.insert(rel.to_owned(), Some(n));
        }
    }
}

/// Whether a file modified at `mtime_ns` was modified within a timestamp
/// tick of now (or in the future): a same-size rewrite in that tick would
/// not change its stat.
fn is_recent(mtime_ns: i64) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    mtime_ns > now.saturating_sub(TICK_NS)
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
            link: Some(String::new()),
            mtime_ns,
            ..FileState::default()
        })
    } else if t.is_file() {
        Disk::Entry(FileState {
            size: m.len(),
            mode: m.permissions().mode() & 0o7777,
            mtime_ns,
            ..FileState::default()
        })
    } else if t.is_dir() {
        Disk::Entry(FileState {
            mode: m.permissions().mode() & 0o7777,
            dir: true,
            ..FileState::default()
        })
    } else {
        Disk::Other
    }
}
