//! [`Workspace`]: what an agent keeps to take snapshots around its tools —
//! the snapshotter and the state the session's records describe, folded
//! once when it starts and kept up to date with each record it appends.

use std::path::Path;

use cairn::{EntryId, Session};

use crate::history::History;
use crate::record::{Manifest, Phase, Scope, WorkspaceRecord};
use crate::scan::Snapshotter;
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
#[derive(Debug, Clone)]
pub struct Workspace {
    snap: Snapshotter,
    known: Manifest,
    /// The `seq` of the session's last workspace record it knows of.
    last_seq: Option<u64>,
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
        let root = self.snap.root();
        let (scope, (files, truncated)) = match touches {
            Touches::Files(paths) => {
                let rels: Vec<String> = paths
                    .iter()
                    .filter_map(|p| {
                        let p = Path::new(p);
                        let abs = if p.is_absolute() {
                            p.to_owned()
                        } else {
                            root.join(p)
                        };
                        path::relative(root, &abs)
                    })
                    .collect();
                (
                    Scope::Files,
                    (self.snap.scan_files(&rels, &self.known)?, false),
                )
            }
            Touches::Tree => (Scope::Tree, self.snap.scan_tree(&self.known)?),
        };
        let record = WorkspaceRecord {
            at,
            phase,
            call_id: call_id.map(str::to_owned),
            root: root.to_string_lossy().into_owned(),
            scope,
            files,
            truncated,
        };
        // Every blob the record names is durable before the record: a few
        // synced one by one, many at once.
        let named: Vec<&str> = record
            .files
            .values()
            .flatten()
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
}
