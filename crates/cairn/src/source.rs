//! Where entries and lines are read from, below both the storage seam and
//! the projection: [`LineReader`] and [`LineAt`] (a log line read by
//! position, what a context keeps of a message it has not decoded yet) and
//! `EntrySource` (decoded entries by node number, what the tree and the
//! projection read through).

use std::fmt;
use std::sync::Arc;

use crate::error::ReadError;
use crate::record::Entry;

/// Reads a log's lines by position ([`Log::line_at`](crate::Log::line_at)).
pub trait LineReader: Send + Sync + fmt::Debug {
    /// Where the log lives, for messages.
    fn location(&self) -> &str;

    /// Reads line `seq`, `len` bytes at byte `offset` (newline included),
    /// verifying its framing and checksum.
    ///
    /// # Errors
    ///
    /// [`ReadError::Damaged`] if the bytes there are no longer an intact
    /// line, or I/O errors.
    fn read_at(&self, seq: u64, offset: u64, len: u64) -> Result<Vec<u8>, ReadError>;
}

/// Where one line of a log is, and a reader for it ([`Log::line_at`](crate::Log::line_at)).
#[derive(Debug, Clone)]
pub struct LineAt {
    /// Reads the line.
    pub reader: Arc<dyn LineReader>,
    /// Byte offset of its first byte.
    pub offset: u64,
    /// Its length, newline included.
    pub len: u64,
}

/// Reads decoded entries by node number (the session reads them from its log).
pub(crate) trait EntrySource {
    fn entry(&self, node: u32) -> Result<Entry, ReadError>;

    /// The `seq` of node `node`'s record and where its line is, when the
    /// log reads lines cheaply by position: a message entry is then kept so
    /// and decoded when first read ([`ContextMessage::message`](crate::ContextMessage::message)). `None`:
    /// decode it now.
    fn line_at(&self, node: u32) -> Option<(u64, LineAt)> {
        let _ = node;
        None
    }

    /// Whether the entries' structure (the tree) still answers truly: an
    /// error once a block of the persisted index failed its check after the
    /// open, since a lookup through it then answers without that block.
    fn check(&self) -> Result<(), ReadError> {
        Ok(())
    }
}
