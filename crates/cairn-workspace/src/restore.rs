//! Restoring the workspace to its state at an entry: the plan (what to
//! create, restore and delete), the conflict check against the last
//! snapshot and the disk, the writes (every file under a temporary name,
//! all synced at once, then each renamed over its path, the files it
//! replaces freed beside the later steps (`release.rs`); the directories
//! synced), and the record of the restore.
//!
//! A restore killed at any point leaves every file either as it was or as
//! restored, never torn; running it again completes it: a file already
//! restored is recognised as such (not as a conflict), and the temporary
//! file a killed run left is replaced.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cairn::{EntryId, Session, Store};
use cairn_blobs::BlobStore;

use crate::flush::{FileSystem, Flush};
use crate::history::History;
use crate::record::{FileState, Manifest, Phase, Scope, WorkspaceRecord, same};
use crate::release::Releaser;
use crate::scan::{Disk, Limits, Snapshotter, TEMP_SUFFIX};
use crate::{WorkspaceError, io_err, parallel, path};

/// What a restore does to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Writes a file or symlink that is absent now.
    Create,
    /// Replaces a file or symlink (its content, link target or mode).
    Restore,
    /// Removes a file or symlink.
    Delete,
}

impl Action {
    /// Its name: `create`, `restore`, `delete`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Restore => "restore",
            Action::Delete => "delete",
        }
    }

    fn between(from: Option<&FileState>, to: Option<&FileState>) -> Action {
        match (from, to) {
            (None, _) => Action::Create,
            (Some(_), None) => Action::Delete,
            (Some(_), Some(_)) => Action::Restore,
        }
    }
}

/// One path a restore (or a diff) changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Relative to the working directory.
    pub path: String,
    /// What happens to it.
    pub action: Action,
    /// Its state before (`None`: absent).
    pub from: Option<FileState>,
    /// Its state after (`None`: absent).
    pub to: Option<FileState>,
}

/// A path changed outside the agent since the last snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Relative to the working directory.
    pub path: String,
    /// What the disk holds that no snapshot recorded.
    pub why: String,
}

/// A path a restore leaves as it is, and why: never skipped silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// Relative to the working directory.
    pub path: String,
    /// Why it cannot be brought back.
    pub why: &'static str,
}

/// Why a file whose content was not kept is left.
const TOO_LARGE: &str =
    "its content at the entry was larger than the snapshot limit and was not kept";

/// Why a path the snapshots leave out is left.
const IGNORED: &str = "ignored by .gitignore: no snapshot records it";

/// Why a path whose state at the entry the records cannot tell is left.
const UNCERTAIN: &str = "first recorded after a snapshot that stopped at its path limit: its state at the entry is not known";

/// Why a path on disk no record names is left.
const UNKNOWN: &str = "no snapshot recorded it (past a snapshot's path limit, or made outside the agent since the last snapshot)";

/// Why a path past what a restore looks at is left.
const UNREACHED: &str = "past the number of paths a restore looks at: neither recorded nor checked";

/// Why a path a tool named outside what snapshots describe is left.
const UNRECORDED: &str =
    "a tool after the entry named it outside the working directory (or in .git): never snapshotted";

/// Why a directory a forced restore could not remove is left.
const HOLDS_UNRECORDED: &str = "it holds files no snapshot recorded";

/// What a restore will do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The working directory.
    pub root: PathBuf,
    /// The entry whose workspace it brings back.
    pub target: Option<EntryId>,
    /// The paths to change (conflicting ones included: they are changed
    /// only with `force`).
    pub changes: Vec<Change>,
    /// Paths that already hold their target state (a restore that was
    /// interrupted, or a change made by hand).
    pub done: Vec<(String, Option<FileState>)>,
    /// Paths changed outside the agent since the last snapshot.
    pub conflicts: Vec<Conflict>,
    /// Paths it cannot bring back, each with why: content not kept (larger
    /// than the limit), or on disk and in no record (`.gitignore`d, past a
    /// snapshot's path limit, made outside the agent since the last
    /// snapshot, or named by a tool outside the working directory).
    pub unrestorable: Vec<Left>,
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Files created.
    pub created: Vec<String>,
    /// Files restored.
    pub restored: Vec<String>,
    /// Files deleted.
    pub deleted: Vec<String>,
    /// Files already as at the target.
    pub already: Vec<String>,
    /// Files changed outside the agent that `force` overwrote.
    pub overwritten: Vec<String>,
    /// Paths left as they are, each with why (content not kept; a
    /// directory holding files no snapshot recorded).
    pub unrestorable: Vec<Left>,
    /// The checkout entry the conversation moved to, if it moved.
    pub checkout: Option<EntryId>,
}

/// The workspace differences between entries `a` and `b` of the session
/// (`None`: before the first entry), by path; what its subagents did in
/// the same directory counts ([`History::read_family`]).
///
/// # Errors
///
/// As [`History::read_family`]; [`WorkspaceError::NoSnapshots`].
pub fn diff(
    store: &Store,
    session: &Session,
    a: Option<&EntryId>,
    b: Option<&EntryId>,
) -> Result<Vec<Change>, WorkspaceError> {
    let history = History::read_family(store, session)?;
    if history.is_empty() {
        return Err(WorkspaceError::NoSnapshots(session.id().to_string()));
    }
    let (sa, sb) = (history.state_at(a), history.state_at(b));
    Ok(differences(&sa, &sb))
}

fn differences(from: &Manifest, to: &Manifest) -> Vec<Change> {
    let paths: BTreeSet<&String> = from.keys().chain(to.keys()).collect();
    let mut out = Vec::new();
    for p in paths {
        let f = from.get(p).cloned().flatten();
        let t = to.get(p).cloned().flatten();
        if same(f.as_ref(), t.as_ref()) {
            continue;
        }
        out.push(Change {
            path: p.clone(),
            action: Action::between(f.as_ref(), t.as_ref()),
            from: f,
            to: t,
        });
    }
    out
}

/// Plans the restore of the session's workspace to its state at `target`,
/// checking the disk against the last snapshot; the snapshots of its
/// subagents, which work in the same directory, count
/// ([`History::read_family`]). Reads the disk; writes only blobs (the
/// content of files changed outside the agent, so even a forced restore
/// keeps them in the blob store).
///
/// # Errors
///
/// [`WorkspaceError::NoSnapshots`]; as [`History::read_family`]; I/O errors.
pub fn plan(
    store: &Store,
    session: &Session,
    blobs: &BlobStore,
    target: Option<&EntryId>,
) -> Result<Plan, WorkspaceError> {
    let history = History::read_family(store, session)?;
    let Some(root) = history.root() else {
        return Err(WorkspaceError::NoSnapshots(session.id().to_string()));
    };
    let snap = Snapshotter::new(root, blobs.clone(), Limits::default()).hashing_only();
    let last = history.last();
    let wanted = history.state_at(target);
    let mut plan = Plan {
        root: PathBuf::from(root),
        target: target.cloned(),
        changes: Vec::new(),
        done: Vec::new(),
        conflicts: Vec::new(),
        unrestorable: Vec::new(),
    };
    let uncertain = history.uncertain_at(target);
    // Only tree scans describe the files no tool named.
    let scanned_tree = history
        .records()
        .iter()
        .any(|(_, r)| r.scope == Scope::Tree);
    let (changes, unrestorable): (Vec<Change>, Vec<Change>) =
        differences(&last, &wanted).into_iter().partition(|c| {
            c.to.as_ref().is_none_or(FileState::restorable) && !uncertain.contains(&c.path)
        });
    plan.unrestorable = unrestorable
        .into_iter()
        .map(|c| Left {
            why: if uncertain.contains(&c.path) {
                UNCERTAIN
            } else {
                TOO_LARGE
            },
            path: c.path,
        })
        .collect();
    // The disk at each path, looked at from a few threads: a file the last
    // snapshot or restore wrote within a timestamp tick is read and hashed.
    let numbered: Vec<(usize, &Change)> = changes.iter().enumerate().collect();
    let mut seen = parallel::each(&numbered, |&(i, change)| {
        let disk = match snap.stat(&change.path)? {
            Disk::Entry(stat) => {
                Disk::Entry(snap.observe(&change.path, stat, change.from.as_ref())?)
            }
            other => other,
        };
        Ok((i, disk))
    })?;
    seen.sort_unstable_by_key(|(i, _)| *i);
    for (change, (_, seen)) in changes.into_iter().zip(seen) {
        let disk = match seen {
            Disk::Absent => None,
            Disk::Entry(state) => Some(state),
            Disk::Other => {
                plan.conflicts.push(Conflict {
                    path: change.path.clone(),
                    why: "a special file is there now".into(),
                });
                plan.changes.push(change);
                continue;
            }
        };
        if same(disk.as_ref(), change.to.as_ref()) {
            // The content as the records keep it, the stat as it is.
            let now = change.to.clone().zip(disk).map(|(to, d)| FileState {
                mtime_ns: d.mtime_ns,
                recent: d.recent,
                ..to
            });
            plan.done.push((change.path, now));
        } else if same(disk.as_ref(), change.from.as_ref()) {
            plan.changes.push(change);
        } else {
            // Changed outside the agent: its content kept, so even a
            // forced restore loses nothing.
            let disk = match disk {
                Some(d) if d.sha256.is_some() => {
                    let r = blobs.put_file_unsynced(&plan.root.join(&change.path))?;
                    Some(FileState {
                        sha256: Some(r.sha256),
                        size: r.size,
                        ..d
                    })
                }
                other => other,
            };
            let why = match &disk {
                None => "deleted outside the agent since the last snapshot".to_owned(),
                Some(_) if change.from.is_none() => {
                    "created outside the agent since the last snapshot".to_owned()
                }
                Some(_) => "changed outside the agent since the last snapshot".to_owned(),
            };
            plan.conflicts.push(Conflict {
                path: change.path.clone(),
                why,
            });
            plan.changes.push(Change {
                action: Action::between(disk.as_ref(), change.to.as_ref()),
                from: disk,
                ..change
            });
        }
    }
    unlisted_in_removed_dirs(&mut plan)?;
    plan.unrestorable.extend(
        history
            .unrecorded_after(target)
            .into_iter()
            .map(|path| Left {
                path,
                why: UNRECORDED,
            }),
    );
    plan.unrestorable.extend(
        snap.left_out(scanned_tree.then_some(&last), IGNORED, UNKNOWN, UNREACHED)
            .into_iter()
            .map(|(path, why)| Left { path, why }),
    );
    Ok(plan)
}

/// A directory the restore removes must hold nothing but what it removes
/// too (a file no snapshot recorded, e.g. an ignored one, would be lost):
/// otherwise it is a conflict, and a forced restore leaves it in place.
fn unlisted_in_removed_dirs(plan: &mut Plan) -> Result<(), WorkspaceError> {
    let removed: BTreeSet<&str> = plan
        .changes
        .iter()
        .filter(|c| c.to.is_none())
        .map(|c| c.path.as_str())
        .collect();
    let mut found = Vec::new();
    for c in &plan.changes {
        if c.to.is_some() || !c.from.as_ref().is_some_and(|f| f.dir) {
            continue;
        }
        let dir = plan.root.join(&c.path);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("read", &dir)(e)),
        };
        for e in entries {
            let e = e.map_err(io_err("read", &dir))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !removed.contains(format!("{}/{name}", c.path).as_str()) {
                found.push(Conflict {
                    path: c.path.clone(),
                    why: format!("it holds {name:?}, which no snapshot recorded"),
                });
                break;
            }
        }
    }
    plan.conflicts.extend(found);
    Ok(())
}

/// Carries out a plan: refuses if it has conflicts (unless `force`), writes
/// each file, syncs the directories, then records the restore in the
/// session (at its leaf) and syncs it.
///
/// # Errors
///
/// [`WorkspaceError::Conflicts`] (nothing written); [`WorkspaceError::Unsafe`]
/// for a path that would leave the working directory; I/O, blob and
/// session errors (the files written so far stay written: running the
/// restore again completes it).
pub fn apply(
    session: &Session,
    blobs: &BlobStore,
    plan: &Plan,
    force: bool,
) -> Result<RestoreReport, WorkspaceError> {
    apply_with(session, blobs, plan, force, Flush::Auto, &mut |_, _| {})
}

/// [`apply`] with the given [`Flush`] (`apply` uses [`Flush::Auto`]),
/// calling `hook(event, path)` after each step (`written`: a temporary
/// file written, before any is renamed; `kept`: the content of a file
/// changed outside the agent durable in the blob store, before anything
/// replaces it; `renamed`; `deleted`; `recorded`): the crash tests' seam.
#[doc(hidden)]
pub fn apply_with(
    session: &Session,
    blobs: &BlobStore,
    plan: &Plan,
    force: bool,
    flush: Flush,
    hook: &mut (dyn FnMut(&str, &str) + Send),
) -> Result<RestoreReport, WorkspaceError> {
    if !plan.conflicts.is_empty() && !force {
        return Err(WorkspaceError::Conflicts(plan.conflicts.clone()));
    }
    let conflicting: BTreeSet<&str> = plan.conflicts.iter().map(|c| c.path.as_str()).collect();
    let hook = std::sync::Mutex::new(hook);
    let step = |event: &str, path: &str| {
        let mut h = hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (*h)(event, path);
    };
    keep_outside(blobs, plan, &conflicting, &step)?;
    let mut files = Manifest::new();
    // 1. Every new directory, then every new content under its temporary
    // name; nothing else visible yet. 2. All of them durable.
    let (targets, dirs) = make_dirs(plan, &mut files, &step)?;
    let order: Vec<(&Change, &PathBuf)> = plan.changes.iter().zip(&targets).collect();
    let writes: Vec<FileWrite<'_>> = order
        .iter()
        .filter_map(|(c, dest)| Some((*c, *dest, c.to.as_ref().filter(|t| !t.dir)?)))
        .collect();
    let mtimes = write_durably(plan, blobs, flush, &writes, &step)?;
    // 3. What goes away removed, then each new content renamed over its
    // path; the files replaced freed beside the next steps (release.rs).
    let replaced = writes.iter().filter(|(c, _, _)| c.from.is_some()).count();
    let removals: Vec<(&Change, &PathBuf)> = order
        .iter()
        .rev()
        .filter(|(c, _)| c.to.is_none())
        .copied()
        .collect();
    let releaser = Releaser::start(removals.len() + replaced);
    let kept = remove(&removals, &releaser, &mut files, &step)?;
    rename(&writes, mtimes, &releaser, &mut files, &step)?;
    let report = report(plan, &conflicting, &kept);
    // 4. The renames and removals durable: every directory touched; then
    // the record.
    for dir in &dirs {
        if dir.exists() {
            cairn_blobs::sync_dir(dir)?;
        }
    }
    record(session, plan, files)?;
    step("recorded", "");
    releaser.finish();
    Ok(report)
}

/// One file a restore writes: its change, its path, its state.
type FileWrite<'a> = (&'a Change, &'a PathBuf, &'a FileState);

/// A step's hook: `(event, path)`.
type Hook<'a> = dyn Fn(&str, &str) + Sync + 'a;

/// The content of each file changed outside the agent, which `plan`
/// stored as a blob, made durable before anything replaces or removes it.
fn keep_outside(
    blobs: &BlobStore,
    plan: &Plan,
    conflicting: &BTreeSet<&str>,
    step: &Hook<'_>,
) -> Result<(), WorkspaceError> {
    let kept_outside: Vec<&Change> = plan
        .changes
        .iter()
        .filter(|c| conflicting.contains(c.path.as_str()))
        .filter(|c| c.from.as_ref().is_some_and(|f| f.sha256.is_some()))
        .collect();
    blobs.sync_some(
        kept_outside
            .iter()
            .filter_map(|c| c.from.as_ref()?.sha256.as_deref()),
    )?;
    for c in &kept_outside {
        step("kept", &c.path);
    }
    Ok(())
}

/// Each change's path (confined to the working directory), the
/// directories holding them, and every new directory made (recorded in
/// `files`).
fn make_dirs(
    plan: &Plan,
    files: &mut Manifest,
    step: &Hook<'_>,
) -> Result<(Vec<PathBuf>, BTreeSet<PathBuf>), WorkspaceError> {
    let mut dirs = BTreeSet::new();
    let mut targets = Vec::with_capacity(plan.changes.len());
    for change in &plan.changes {
        let dest = path::confined(&plan.root, &change.path, change.to.is_some())?;
        dirs.insert(dest.parent().unwrap_or(&plan.root).to_owned());
        if let Some(to) = change.to.as_ref().filter(|t| t.dir) {
            // A file or symlink where the directory goes is removed first
            // (else neither the directory nor anything under it can be
            // written). Killed between the two, the restore leaves the
            // path empty: the next run's plan calls that a conflict (the
            // file's content is still in the records and the blob store).
            if change.from.as_ref().is_some_and(|f| !f.dir) {
                match std::fs::remove_file(&dest) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err("remove", &dest)(e)),
                }
            }
            match std::fs::create_dir(&dest) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dest.is_dir() => {}
                Err(e) => return Err(io_err("create", &dest)(e)),
            }
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(to.mode))
                .map_err(io_err("set the mode of", &dest))?;
            files.insert(change.path.clone(), Some(to.clone()));
            step("made", &change.path);
        }
        targets.push(dest);
    }
    Ok((targets, dirs))
}

/// Writes every file under its temporary name, then makes them all
/// durable (data and size; the names are made durable by the directories'
/// fsyncs after the renames): one syncfs of the working directory's file
/// system, or an fdatasync of each. The mtime of each file written (a
/// rename leaves it as it is; `None` for a symlink).
fn write_durably(
    plan: &Plan,
    blobs: &BlobStore,
    flush: Flush,
    writes: &[FileWrite<'_>],
    step: &Hook<'_>,
) -> Result<Vec<Option<i64>>, WorkspaceError> {
    // The file system opened before anything is written, so its syncfs
    // reports any write-back error from here on (flush.rs).
    let bytes = writes.iter().map(|(_, _, to)| to.size).sum();
    let fs = FileSystem::open_for(flush.resolve(&plan.root, bytes), &plan.root)?;
    let numbered: Vec<_> = writes.iter().enumerate().collect();
    let written = parallel::each(&numbered, |&(i, (change, dest, to))| {
        let mtime_ns = write_one(dest, to, blobs, fs.as_ref())?;
        step("written", &change.path);
        Ok((i, mtime_ns))
    })?;
    let mut mtimes = vec![None; writes.len()];
    for (i, mtime_ns) in written {
        mtimes[i] = mtime_ns;
    }
    if let Some(fs) = &fs {
        fs.sync(&plan.root)?;
    } else {
        parallel::each(writes, |(_, dest, to)| {
            if to.link.is_some() {
                return Ok(());
            }
            let tmp = temp_name(dest);
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_data())
                .map_err(io_err("sync", &tmp))
        })?;
    }
    Ok(mtimes)
}

/// Removes what goes away: files, then directories deepest first. The
/// directories a forced restore must keep (they hold what no snapshot
/// recorded).
fn remove(
    removals: &[(&Change, &PathBuf)],
    releaser: &Releaser,
    files: &mut Manifest,
    step: &Hook<'_>,
) -> Result<Vec<String>, WorkspaceError> {
    let (dir_removals, file_removals): (Vec<_>, Vec<_>) = removals
        .iter()
        .copied()
        .partition(|(c, _)| c.from.as_ref().is_some_and(|f| f.dir));
    let removed = parallel::each(&file_removals, |(change, dest)| {
        let held = releaser.hold(dest);
        match std::fs::remove_file(dest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", dest)(e)),
        }
        releaser.release(held);
        step("deleted", &change.path);
        Ok(change.path.clone())
    })?;
    files.extend(removed.into_iter().map(|p| (p, None)));
    let mut kept = Vec::new();
    for (change, dest) in dir_removals {
        match std::fs::remove_dir(dest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Holds what no snapshot recorded (a conflict, forced): kept.
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                kept.push(change.path.clone());
                continue;
            }
            Err(e) => return Err(io_err("remove", dest)(e)),
        }
        step("deleted", &change.path);
        files.insert(change.path.clone(), None);
    }
    Ok(kept)
}

/// Renames each new content over its path (atomic: before or after),
/// recording its state with the mtime it was written with.
fn rename(
    writes: &[FileWrite<'_>],
    mtimes: Vec<Option<i64>>,
    releaser: &Releaser,
    files: &mut Manifest,
    step: &Hook<'_>,
) -> Result<(), WorkspaceError> {
    let renames: Vec<_> = writes.iter().zip(mtimes).collect();
    let renamed = parallel::each(&renames, |&((change, dest, to), written_at)| {
        let tmp = temp_name(dest);
        let held = change.from.as_ref().and_then(|_| releaser.hold(dest));
        std::fs::rename(&tmp, dest).map_err(io_err("rename into place", dest))?;
        releaser.release(held);
        step("renamed", &change.path);
        let mtime_ns = match written_at {
            Some(m) => m,
            None => {
                let meta = std::fs::symlink_metadata(dest).map_err(io_err("read", dest))?;
                match crate::scan::disk_of(&meta) {
                    Disk::Entry(s) => s.mtime_ns,
                    Disk::Absent | Disk::Other => to.mtime_ns,
                }
            }
        };
        let state = FileState {
            mtime_ns,
            // Written just now: the next comparison reads it.
            recent: true,
            ..(*to).clone()
        };
        Ok((change.path.clone(), Some(state)))
    })?;
    files.extend(renamed);
    Ok(())
}

/// What the restore did, by path.
fn report(plan: &Plan, conflicting: &BTreeSet<&str>, kept: &[String]) -> RestoreReport {
    let mut report = RestoreReport {
        unrestorable: plan.unrestorable.clone(),
        ..RestoreReport::default()
    };
    for change in &plan.changes {
        if kept.contains(&change.path) {
            report.unrestorable.push(Left {
                path: change.path.clone(),
                why: HOLDS_UNRECORDED,
            });
            continue;
        }
        if conflicting.contains(change.path.as_str()) {
            report.overwritten.push(change.path.clone());
        }
        match change.action {
            Action::Create => report.created.push(change.path.clone()),
            Action::Restore => report.restored.push(change.path.clone()),
            Action::Delete => report.deleted.push(change.path.clone()),
        }
    }
    report
        .already
        .extend(plan.done.iter().map(|(p, _)| p.clone()));
    report
}

/// Appends the `restore` record (at the new leaf: every path written,
/// created, deleted or found done) and syncs it.
fn record(session: &Session, plan: &Plan, mut files: Manifest) -> Result<(), WorkspaceError> {
    for (p, state) in &plan.done {
        files.insert(p.clone(), state.clone());
    }
    let record = WorkspaceRecord {
        at: session.leaf(),
        phase: Phase::Restore,
        call_id: None,
        root: plan.root.to_string_lossy().into_owned(),
        scope: Scope::Files,
        files,
        truncated: false,
        unrecorded: Vec::new(),
    };
    record.append(session)?;
    session.sync().map_err(WorkspaceError::Append)?;
    Ok(())
}

/// The temporary name a file is written under: `.NAME.cairn-restore`
/// beside it.
fn temp_name(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dest.with_file_name(format!(".{name}{TEMP_SUFFIX}"))
}

/// Writes `to` under the temporary name beside `dest` (made durable
/// before it is renamed: by the caller, or here when `fs` is to sync them
/// all but the file is on another file system). The file's mtime (`None`
/// for a symlink).
fn write_one(
    dest: &Path,
    to: &FileState,
    blobs: &BlobStore,
    fs: Option<&FileSystem>,
) -> Result<Option<i64>, WorkspaceError> {
    let tmp = temp_name(dest);
    if let Some(link) = &to.link {
        retry_over_leftover(&tmp, || std::os::unix::fs::symlink(link, &tmp))
            .map_err(io_err("create the symlink", &tmp))?;
        return Ok(None);
    }
    let bytes = match &to.text {
        Some(text) => text.as_bytes().to_vec(),
        None => blobs.get(to.sha256.as_deref().unwrap_or_default())?,
    };
    let mut f = retry_over_leftover(&tmp, || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
    })
    .map_err(io_err("create", &tmp))?;
    f.write_all(&bytes).map_err(io_err("write", &tmp))?;
    f.set_permissions(std::fs::Permissions::from_mode(to.mode))
        .map_err(io_err("set the mode of", &tmp))?;
    let meta = f.metadata().map_err(io_err("read", &tmp))?;
    if fs.is_some_and(|fs| !fs.holds(meta.dev())) {
        f.sync_data().map_err(io_err("sync", &tmp))?;
    }
    Ok(Some(
        meta.mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec()),
    ))
}

/// `create` (which makes `tmp` and fails if it exists); when a killed
/// restore left `tmp` behind (never anyone else's file: the name is ours),
/// removes it and creates again.
fn retry_over_leftover<T>(
    tmp: &Path,
    create: impl Fn() -> std::io::Result<T>,
) -> std::io::Result<T> {
    match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            match std::fs::remove_file(tmp) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            create()
        }
        other => other,
    }
}

/// The whole rewind: plans the restore to `target`, refuses on conflicts
/// (unless `force`) before anything moves, moves the conversation's leaf
/// there (a `checkout`, with an optional summary of the branch left), then
/// restores the files and records it.
///
/// # Errors
///
/// As [`plan`] and [`apply`]; [`WorkspaceError::Checkout`] when the
/// session refuses the checkout (an entry with unanswered tool calls).
pub fn checkout_files(
    store: &Store,
    session: &Session,
    blobs: &BlobStore,
    target: Option<&EntryId>,
    summary: Option<String>,
    force: bool,
) -> Result<RestoreReport, WorkspaceError> {
    let plan = plan(store, session, blobs, target)?;
    if !plan.conflicts.is_empty() && !force {
        return Err(WorkspaceError::Conflicts(plan.conflicts));
    }
    let moved = session
        .checkout(target, summary)
        .map_err(WorkspaceError::Checkout)?;
    let mut report = apply(session, blobs, &plan, force)?;
    report.checkout = moved.and_then(|a| a.id);
    Ok(report)
}
