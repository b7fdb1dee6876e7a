//! [`ViewError`]: what can fail while a session is shown.

use cairn::{EntryId, ReadError};

/// A failure to read or write what a view shows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ViewError {
    /// A record the view needed could not be read back.
    #[error("cannot read a record of the session; run `cairn fsck` on it")]
    Read(#[source] ReadError),
    /// The record a tree node points at holds no entry.
    #[error(
        "record {seq} should hold entry {id} but does not: the session changed underneath; run `cairn fsck` on it"
    )]
    NotAnEntry {
        /// The record's position.
        seq: u64,
        /// The entry the tree expected there.
        id: EntryId,
    },
    /// A stored record is not a JSON object (it verified at open, so the
    /// session changed underneath).
    #[error(
        "a stored record is not a JSON object: the session changed underneath; run `cairn fsck` on it"
    )]
    Record(#[source] serde_json::Error),
    /// A shape could not be serialized.
    #[error("cannot serialize the JSON shape")]
    Json(#[source] serde_json::Error),
    /// Writing a drawing failed.
    #[error("cannot write the drawing")]
    Write(#[source] std::io::Error),
}

impl From<ReadError> for ViewError {
    fn from(e: ReadError) -> ViewError {
        ViewError::Read(e)
    }
}
