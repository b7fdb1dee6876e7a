//! [`ContextMessage`]: one message of a context, where it came from
//! ([`Source`]) and how it is held (decoded, or read when first asked for:
//! `lazy.rs`).

use std::sync::Arc;

use super::lazy::{Deferred, Held};
use crate::error::ReadError;
use crate::id::EntryId;
use crate::record::Message;
use crate::source::LineAt;

/// One message of the context and where it came from.
#[derive(Debug, Clone)]
pub struct ContextMessage {
    entry: EntryId,
    pub(super) source: Source,
    message: Held,
    /// Position of the source entry on the branch (0 = root).
    pub(super) pos: u32,
}

impl ContextMessage {
    /// The entry that produced the message.
    pub fn entry(&self) -> &EntryId {
        &self.entry
    }
    /// What kind of entry produced it.
    pub fn source(&self) -> &Source {
        &self.source
    }
    /// The message: decoded already, or read from the session's log now
    /// (once: later calls return the same decoded message). A message read
    /// now is checked again — its line's checksum and framing, its `seq`,
    /// its entry id and its kind — so a record changed since the open is an
    /// error, never another message.
    ///
    /// # Errors
    ///
    /// [`ReadError::Damaged`] naming the session file, the record's line
    /// and byte offset and what is wrong (checksum, frame, body), with the
    /// advice to run `cairn fsck`; [`ReadError::Io`] when it cannot be read.
    pub fn message(&self) -> Result<&Message, ReadError> {
        self.message.get(&self.entry)
    }

    /// The message if it is decoded already (every message of a
    /// [`Context::fold`] is), without reading.
    pub(crate) fn decoded_message(&self) -> Option<&Message> {
        self.message.decoded()
    }

    /// A message entry's message kept as record `seq`, the line `at`, read
    /// when first asked for.
    pub(crate) fn deferred(entry: EntryId, pos: u32, seq: u64, at: LineAt) -> Self {
        ContextMessage {
            entry,
            source: Source::Message,
            message: Held::Deferred(Deferred::new(seq, at)),
            pos,
        }
    }

    /// A message already decoded.
    pub(crate) fn decoded(entry: EntryId, source: Source, message: Message, pos: u32) -> Self {
        ContextMessage {
            entry,
            source,
            message: Held::Decoded(Arc::new(message)),
            pos,
        }
    }
}

/// Equal when entry, source and position are, and the messages decode to
/// equal messages; a message that cannot be read equals only one kept as
/// the same line of the same log.
impl PartialEq for ContextMessage {
    fn eq(&self, other: &ContextMessage) -> bool {
        self.entry == other.entry
            && self.source == other.source
            && self.pos == other.pos
            && match (self.message(), other.message()) {
                (Ok(a), Ok(b)) => a == b,
                (Ok(_), Err(_)) | (Err(_), Ok(_)) | (Err(_), Err(_)) => {
                    self.message.same_line(&other.message)
                }
            }
    }
}

/// The kind of entry a context message comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// A `message` entry.
    Message,
    /// The active compaction's summary (always the first message).
    CompactionSummary,
    /// A checkout's summary of the branch it left.
    CheckoutSummary,
    /// A visible `custom` entry of this namespace.
    Custom(String),
}
