//! Workspace snapshots tied to a cairn log, so a rewind of the
//! conversation can rewind the files too.
//!
//! Before a side-effect tool runs, the agent records the *pre-image* of
//! what it may touch ([`Workspace::before`]): the exact files of
//! `write_file`/`edit_file`, or for `bash` a scan of the working directory
//! bounded by [`Limits`] and honouring `.gitignore`, compared with what the
//! session's records already say (size, mtime and mode first; the content
//! is hashed only when they changed, or when the last stat was taken within
//! a timestamp tick of the change). After the first scan, a file-system
//! watcher kept between snapshots narrows each scan to the paths changed
//! since the last one (a full scan again whenever it may have missed
//! something). After the tool, it records the new state
//! ([`Workspace::after`]). Each snapshot is one `cairn.workspace` record
//! (RECORDS.md §4) listing only the paths that changed (files, symlinks,
//! directories), whose contents go to the store's blob store
//! ([`cairn_blobs::BlobStore`]) or, for small text files, into the record:
//! unchanged files cost nothing.
//!
//! [`History`] folds those records into the workspace state at any entry;
//! [`plan`] compares it with the last recorded state and the disk (a file
//! changed outside the agent is a [`Conflict`], never overwritten silently)
//! and [`apply`] writes each file under a temporary name, makes them all
//! durable ([`Flush`]: one `syncfs` of a local file system while little
//! else is dirty, else an `fdatasync` of each) and renames each (many at once, from a few
//! threads), then records the restore. [`checkout_files`] is the whole rewind: the
//! conversation's checkout and the files'. [`diff`] compares two entries.
//!
//! Every path is confined to the working directory: records naming `..`,
//! absolute paths or `.git` are refused, and a restore never writes through
//! a symlink. The user's `.git` is never read or written; git is not needed.

mod flush;
mod history;
mod parallel;
mod path;
mod record;
mod release;
mod restore;
mod scan;
mod tracker;
mod watch;

pub use flush::Flush;
pub use history::History;
pub use record::{FileState, KIND, Manifest, Phase, Scope, WorkspaceRecord, read_all, same};
pub use restore::{
    Action, Change, Conflict, Left, Plan, RestoreReport, apply, apply_with, checkout_files, diff,
    plan,
};
pub use scan::{
    Limits, Scanned, Snapshotter, is_write_temporary, parse_write_temporary, write_temporary,
};
pub use tracker::{Touches, Workspace};

/// A failure of snapshots or restores.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// An I/O failure at a path.
    #[error(transparent)]
    Io(cairn::IoFailure),
    /// The blob store failed.
    #[error("the blob store failed")]
    Blob(#[from] cairn_blobs::BlobError),
    /// A record could not be appended.
    #[error("cannot record the workspace snapshot in the session")]
    Append(#[source] cairn::AppendError),
    /// A record could not be read.
    #[error("cannot read the session's workspace records")]
    Read(#[source] cairn::ReadError),
    /// A record could not be encoded.
    #[error("cannot encode a workspace record: {0}")]
    Encode(String),
    /// A `cairn.workspace` record that does not have its documented shape.
    #[error(
        "the workspace record at seq {seq} is invalid ({why}); it was not written by this cairn, or is damaged: rewind without --files"
    )]
    BadRecord {
        /// Its position.
        seq: u64,
        /// What is wrong.
        why: String,
    },
    /// A path that would leave the working directory.
    #[error("refusing to touch {path:?}: {why}")]
    Unsafe {
        /// The path, relative to the working directory.
        path: String,
        /// Why.
        why: String,
    },
    /// The session has no workspace snapshots.
    #[error(
        "session {0} has no workspace snapshots: its tools ran without them (an older cairn, or a host that does not record them), so there are no files to restore"
    )]
    NoSnapshots(String),
    /// Files changed outside the agent since the last snapshot.
    #[error(
        "{} file(s) changed outside the agent since the last snapshot ({}); nothing was changed. Look at them, then pass --force to overwrite them",
        .0.len(),
        .0.iter().take(5).map(|c| c.path.as_str()).collect::<Vec<_>>().join(", ")
    )]
    Conflicts(Vec<Conflict>),
    /// A subagent session, whose snapshots count for its parent's restore
    /// and diff, could not be listed or opened.
    #[error("cannot read the workspace snapshots of subagent session {id}; run `cairn fsck {id}`")]
    Subagent {
        /// The session (the parent, when listing failed).
        id: String,
        /// Why.
        #[source]
        source: cairn::StoreError,
    },
    /// The conversation's checkout failed.
    #[error("cannot move the session's leaf")]
    Checkout(#[source] cairn::AppendError),
}

pub(crate) fn io_err<'a>(
    action: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(std::io::Error) -> WorkspaceError + 'a {
    move |source| {
        WorkspaceError::Io(cairn::IoFailure::new(
            action,
            path.display().to_string(),
            source,
        ))
    }
}
