//! The `cairn.workspace` record: what one snapshot saw of the working
//! directory (RECORDS.md §4). A log-only record marked `ignorable`, so a
//! reader that does not know it skips it, and the core's folds (context,
//! verdict, status, listing) never see it.

use std::collections::BTreeMap;

use cairn::{EntryId, OpRecord, Session, Unknown};
use serde::{Deserialize, Serialize};

use crate::WorkspaceError;

/// The record kind.
pub const KIND: &str = "cairn.workspace";

/// What the disk held at one path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileState {
    /// SHA-256 of a regular file's content (a blob of the store); absent
    /// for a symlink, and for a file larger than the snapshot limit (its
    /// content was not kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Bytes of a regular file.
    #[serde(default)]
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`) of a regular file.
    #[serde(default)]
    pub mode: u32,
    /// A symlink's target, as stored in the link (never followed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Modification time, nanoseconds since the Unix epoch: with `size`
    /// and `mode`, the cheap test of "unchanged" (0 for a directory).
    #[serde(default)]
    pub mtime_ns: i64,
    /// A directory (tracked so that a restore creates and removes empty
    /// ones too): only its `mode` counts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dir: bool,
    /// A small UTF-8 file's content, kept in the record itself instead of
    /// a blob (nothing to sync before the record: the record's own sync
    /// makes it durable). `sha256` is its digest all the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The file was modified within a timestamp tick of the scan that saw
    /// it, so a same-size rewrite in that tick would leave its stat
    /// unchanged: the next comparison reads and hashes it instead of
    /// trusting the stat.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recent: bool,
}

impl FileState {
    /// Whether `self` and `other` hold the same thing (content or link
    /// target, and mode), whatever their times.
    pub fn same_content(&self, other: &FileState) -> bool {
        if self.dir || other.dir {
            return self.dir == other.dir && self.mode == other.mode;
        }
        match (&self.link, &other.link) {
            (Some(a), Some(b)) => a == b,
            (None, None) => match (&self.sha256, &other.sha256) {
                (Some(a), Some(b)) => a == b && self.mode == other.mode,
                // Content not kept: only the stat can tell.
                _ => {
                    self.size == other.size
                        && self.mode == other.mode
                        && self.mtime_ns == other.mtime_ns
                }
            },
            _ => false,
        }
    }

    /// Whether the content was kept, so it can be restored.
    pub fn restorable(&self) -> bool {
        self.dir || self.link.is_some() || self.sha256.is_some()
    }

    /// Whether `self` and `other` describe the disk alike (what a snapshot
    /// lists when it differs): whether a state was `recent` or kept
    /// `text` inline does not count.
    pub fn same_stat(&self, other: &FileState) -> bool {
        self.sha256 == other.sha256
            && self.size == other.size
            && self.mode == other.mode
            && self.link == other.link
            && self.mtime_ns == other.mtime_ns
            && self.dir == other.dir
    }
}

/// The state of a set of paths: `None` is "absent".
pub type Manifest = BTreeMap<String, Option<FileState>>;

/// Whether two optional states hold the same thing.
pub fn same(a: Option<&FileState>, b: Option<&FileState>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.same_content(b),
        _ => false,
    }
}

/// When a snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before a side-effect tool ran (with its T1).
    Before,
    /// After it ran.
    After,
    /// After a restore wrote the files.
    Restore,
}

/// What a snapshot looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Named files only (`write_file`, `edit_file`, a restore).
    Files,
    /// The working directory, bounded and honouring `.gitignore` (`bash`).
    Tree,
}

/// One `cairn.workspace` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    /// The entry the workspace state belongs to: the leaf when the
    /// snapshot was taken (for `after`, the tool result's entry).
    pub at: Option<EntryId>,
    /// When it was taken.
    pub phase: Phase,
    /// The tool call, for `before` and `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The working directory, absolute.
    pub root: String,
    /// What was looked at.
    pub scope: Scope,
    /// The paths (relative to `root`, `/`-separated) whose state differs
    /// from what the session's earlier records say; `null`: absent.
    pub files: Manifest,
    /// A tree scan stopped at its file-count limit: paths it did not reach
    /// are not described.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Paths the tool named that no record can describe (outside the
    /// working directory, under `.git`, not UTF-8), as it named them: a
    /// restore cannot bring them back, and names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrecorded: Vec<String>,
}

impl WorkspaceRecord {
    /// Appends the record (log-only, ignorable), `Buffered` whatever the
    /// session's durability: a `before` record is made durable by the T1
    /// that follows it, an `after` record by the T2, a restore's by its
    /// [`Session::sync`].
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Append`].
    pub fn append(&self, session: &Session) -> Result<u64, WorkspaceError> {
        let data = serde_json::to_value(self).map_err(|e| WorkspaceError::Encode(e.to_string()))?;
        let mode = session.durability();
        session.set_durability(cairn::Durability::Buffered);
        let appended = session.append_op(OpRecord::Ignored(Unknown {
            kind: KIND.to_owned(),
            data,
        }));
        session.set_durability(mode);
        Ok(appended.map_err(WorkspaceError::Append)?.seq)
    }
}

/// Every `cairn.workspace` record of the session, with its `seq`.
///
/// # Errors
///
/// [`WorkspaceError::Read`] when a record cannot be read;
/// [`WorkspaceError::BadRecord`] when one does not have this shape.
pub fn read_all(session: &Session) -> Result<Vec<(u64, WorkspaceRecord)>, WorkspaceError> {
    let mut out = Vec::new();
    for (seq, kind) in session.op_records() {
        if kind != KIND {
            continue;
        }
        let record = session.record(seq).map_err(WorkspaceError::Read)?;
        let data = match record.body {
            cairn::Body::Op(OpRecord::Ignored(u)) => u.data,
            _ => continue,
        };
        let r: WorkspaceRecord =
            serde_json::from_value(data).map_err(|e| WorkspaceError::BadRecord {
                seq,
                why: e.to_string(),
            })?;
        for path in r.files.keys() {
            crate::path::check(path).map_err(|why| WorkspaceError::BadRecord {
                seq,
                why: format!("path {path:?}: {why}"),
            })?;
        }
        out.push((seq, r));
    }
    Ok(out)
}
