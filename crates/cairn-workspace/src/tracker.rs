//! [`Workspace`]: what an agent keeps to take snapshots around its tools —
//! the snapshotter and the state the session's records describe, folded
//! once when it starts and kept up to date with each record it appends.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::Arc;

use cairn::{EntryId, Session};

use crate::history::History;
use crate::record::{Manifest, Phase, Scope, WorkspaceRecord};
use crate::scan::{Dirs, Scanned, Snapshotter};
use crate::watch::{Seen, Watcher, Within};
use crate::{WorkspaceError, path};

/// What a tool may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touches {
    /// Exactly these paths (absolute, or relative to the working
    /// directory); those outside it are not snapshotted.
    Files(Vec<String>),
    /// Anything in the working directory (a shell command).
    Tree,
}

/// Snapshots of one working directory for one session.
///
/// It keeps a file-system watcher between snapshots (inotify, on Linux):
/// after the first tree snapshot, which scans the whole working directory
/// and starts it, a tree snapshot walks only the paths changed since the
/// last snapshot. It falls back to a full scan whenever the watcher may
/// have missed something (see `watch.rs`), and for good when it cannot
/// watch (no inotify, the watch limit reached).
#[derive(Debug)]
pub struct Workspace {
    snap: Snapshotter,
    known: Manifest,
    /// The `seq` of the session's last workspace record it knows of.
    last_seq: Option<u64>,
    watch: Watch,
    /// Tree snapshots that scanned everything.
    full_scans: u64,
    /// Files with more than one name, as the tree scans last saw them: a
    /// write through a name outside the working directory reaches no
    /// watch, so a watched snapshot looks at each of them again.
    linked: BTreeSet<String>,
}

/// The watcher's state.
#[derive(Debug)]
enum Watch {
    /// Not started: the next tree snapshot is a full scan that starts it.
    Idle,
    /// Watching every directory the last full scan reached, and those
    /// created since.
    Running(Watcher),
    /// Cannot watch: every tree snapshot is a full scan.
    Off,
}

impl Clone for Workspace {
    /// The same state, with a watcher of its own (started by its first
    /// tree snapshot): two trackers never share one watcher's events.
    fn clone(&self) -> Workspace {
        Workspace {
            snap: self.snap.clone(),
            known: self.known.clone(),
            last_seq: self.last_seq,
            watch: match self.watch {
                Watch::Off => Watch::Off,
                Watch::Idle | Watch::Running(_) => Watch::Idle,
            },
            full_scans: 0,
            linked: BTreeSet::new(),
        }
    }
}

/// The `seq` of the session's last `cairn.workspace` record.
fn last_record(session: &Session) -> Option<u64> {
    session
        .op_records()
        .into_iter()
        .rev()
        .find(|(_, kind)| kind == crate::KIND)
        .map(|(seq, _)| seq)
}

impl Workspace {
    /// Starts from what `session`'s records say about the snapshotter's
    /// working directory.
    ///
    /// # Errors
    ///
    /// As [`History::read`].
    pub fn open(session: &Session, snap: Snapshotter) -> Result<Workspace, WorkspaceError> {
        let root = snap.root().to_string_lossy().into_owned();
        let history = History::read(session)?;
        let known = if history.root() == Some(root.as_str()) {
            history.last()
        } else {
            Manifest::new()
        };
        Ok(Workspace {
            snap,
            known,
            last_seq: last_record(session),
            watch: Watch::Idle,
            full_scans: 0,
            linked: BTreeSet::new(),
        })
    }

    /// Whether its state is still that of `session`'s records (no one
    /// else, e.g. a restore, appended one since).
    pub fn is_current(&self, session: &Session) -> bool {
        last_record(session) == self.last_seq
    }

    /// The snapshotter.
    pub fn snapshotter(&self) -> &Snapshotter {
        &self.snap
    }

    /// Whether a file-system watcher is running, so that the next tree
    /// snapshot walks only what changed (false before the first tree
    /// snapshot, and where it cannot watch).
    pub fn is_watching(&self) -> bool {
        matches!(self.watch, Watch::Running(_))
    }

    /// How many tree snapshots scanned the whole working directory (the
    /// first, and each fallback) rather than what the watcher saw change.
    pub fn full_scans(&self) -> u64 {
        self.full_scans
    }

    /// The state the records describe now.
    pub fn known(&self) -> &Manifest {
        &self.known
    }

    /// Records the pre-image of what a tool call may touch, at `at` (the
    /// leaf). Append it before the call's T1, whose sync makes it durable
    /// before the tool starts.
    ///
    /// # Errors
    ///
    /// When the disk, the blob store or the session fails.
    pub fn before(
        &mut self,
        session: &Session,
        at: Option<EntryId>,
        call_id: &str,
        touches: &Touches,
    ) -> Result<WorkspaceRecord, WorkspaceError> {
        self.snapshot(session, at, Some(call_id), Phase::Before, touches)
    }

    /// Records the state after a tool call, at `at` (its result's entry,
    /// preallocated by the T1). Append it before the result (T2), whose sync
    /// makes it durable.
    ///
    /// # Errors
    ///
    /// As [`Workspace::before`].
    pub fn after(
        &mut self,
        session: &Session,
        at: EntryId,
        call_id: &str,
        touches: &Touches,
    ) -> Result<WorkspaceRecord, WorkspaceError> {
        self.snapshot(session, Some(at), Some(call_id), Phase::After, touches)
    }

    fn snapshot(
        &mut self,
        session: &Session,
        at: Option<EntryId>,
        call_id: Option<&str>,
        phase: Phase,
        touches: &Touches,
    ) -> Result<WorkspaceRecord, WorkspaceError> {
        let taken = self.take(touches).and_then(|(scope, scanned, unrecorded)| {
            // Named once, in the record taken before the tool.
            let unrecorded = if phase == Phase::Before {
                unrecorded
            } else {
                Vec::new()
            };
            self.record(session, (scope, scanned), unrecorded, at, call_id, phase)
        });
        if taken.is_err() && matches!(self.watch, Watch::Running(_)) {
            // The paths the watcher handed out were not recorded: the next
            // tree snapshot scans everything.
            self.watch = Watch::Idle;
        }
        taken
    }

    /// What changed in what `touches` names, and the paths it names that
    /// no record can describe (outside the working directory, …).
    fn take(&mut self, touches: &Touches) -> Result<(Scope, Scanned, Vec<String>), WorkspaceError> {
        let root = self.snap.root().to_owned();
        let root = root.as_path();
        let mut unrecorded = Vec::new();
        let (scope, scanned) = match touches {
            Touches::Files(paths) => {
                let mut rels = Vec::new();
                for p in paths {
                    let abs = if Path::new(p).is_absolute() {
                        Path::new(p).to_owned()
                    } else {
                        root.join(p)
                    };
                    match path::relative(root, &abs) {
                        Some(rel) => rels.push(rel),
                        None => unrecorded.push(p.clone()),
                    }
                }
                if let Watch::Running(w) = &mut self.watch {
                    // Read now, so the kernel's queue does not overflow.
                    w.drain();
                }
                (Scope::Files, self.snap.scan_files(&rels, &self.known)?)
            }
            Touches::Tree => (Scope::Tree, self.scan_tree()?),
        };
        Ok((scope, scanned, unrecorded))
    }

    /// Records what a snapshot found (its blobs synced first).
    fn record(
        &mut self,
        session: &Session,
        (scope, scanned): (Scope, Scanned),
        unrecorded: Vec<String>,
        at: Option<EntryId>,
        call_id: Option<&str>,
        phase: Phase,
    ) -> Result<WorkspaceRecord, WorkspaceError> {
        let Scanned {
            changes: files,
            settled,
            truncated,
            linked: _,
        } = scanned;
        for (p, s) in settled {
            self.known.insert(p, s);
        }
        let record = WorkspaceRecord {
            at,
            phase,
            call_id: call_id.map(str::to_owned),
            root: self.snap.root().to_string_lossy().into_owned(),
            scope,
            files,
            truncated,
            unrecorded,
        };
        // Every blob the record names is durable before the record: a few
        // synced one by one, many at once.
        let named: Vec<&str> = record
            .files
            .values()
            .flatten()
            .filter(|s| s.text.is_none())
            .filter_map(|s| s.sha256.as_deref())
            .collect();
        if named.len() > crate::scan::SYNC_EACH_UP_TO {
            self.snap.blobs().sync()?;
        } else {
            self.snap.blobs().sync_some(named)?;
        }
        self.last_seq = Some(record.append(session)?);
        for (p, s) in &record.files {
            self.known.insert(p.clone(), s.clone());
        }
        Ok(record)
    }

    /// A tree scan ([`Workspace::scan_tree_seen`]), keeping the files with
    /// more than one name up to date with what it saw.
    fn scan_tree(&mut self) -> Result<Scanned, WorkspaceError> {
        let full_scans = self.full_scans;
        let scanned = self.scan_tree_seen()?;
        if self.full_scans != full_scans {
            self.linked.clear();
        }
        for (p, many) in &scanned.linked {
            if *many {
                self.linked.insert(p.clone());
            } else {
                self.linked.remove(p);
            }
        }
        for (p, s) in &scanned.changes {
            if s.as_ref().is_none_or(|s| s.dir || s.link.is_some()) {
                self.linked.remove(p);
            }
        }
        Ok(scanned)
    }

    /// A tree scan: of the paths the watcher saw change (and the files with
    /// more than one name) when it is running and complete, else of
    /// everything (starting the watcher afresh, its watches added before
    /// the scan reads each directory).
    fn scan_tree_seen(&mut self) -> Result<Scanned, WorkspaceError> {
        let root = self.snap.root().to_owned();
        let mut failed = false;
        if let Watch::Running(w) = &mut self.watch {
            w.drain();
            if let Seen::Paths(mut paths) = w.take() {
                paths.extend(self.linked.iter().cloned());
                if paths.is_empty() {
                    return Ok(Scanned::default());
                }
                let within = Arc::new(Within::new(paths));
                let mut new: HashSet<String> = HashSet::new();
                let mut note = |rel: &str| {
                    if !w.watches(rel) {
                        new.insert(rel.to_owned());
                    }
                };
                let mut scanned =
                    self.snap
                        .scan_tree(&self.known, Some(within), Dirs::Along(&mut note))?;
                if !new.is_empty() {
                    // Directories made since the last snapshot: watched
                    // now, then read again, so a file made in one between
                    // the walk's read and its watch is not missed.
                    let within = Arc::new(Within::new(new));
                    let mut add = |rel: &str| failed |= w.watch(&root, rel).is_err();
                    let again =
                        self.snap
                            .scan_tree(&self.known, Some(within), Dirs::First(&mut add))?;
                    scanned.merge(again);
                }
                if failed {
                    // What changed from now on would be missed.
                    self.watch = Watch::Off;
                }
                return Ok(scanned);
            }
        }
        self.full_scans += 1;
        let mut watcher = match self.watch {
            Watch::Off => None,
            Watch::Idle | Watch::Running(_) => Watcher::start(self.snap.limits().max_files),
        };
        let scanned = match &mut watcher {
            Some(w) => {
                failed |= w.watch_root(&root).is_err();
                let mut add = |rel: &str| failed |= w.watch(&root, rel).is_err();
                self.snap
                    .scan_tree(&self.known, None, Dirs::First(&mut add))?
            }
            None => self
                .snap
                .scan_tree(&self.known, None, Dirs::Along(&mut |_| {}))?,
        };
        self.watch = match watcher {
            Some(w) if !failed => Watch::Running(w),
            _ => Watch::Off,
        };
        Ok(scanned)
    }
}
