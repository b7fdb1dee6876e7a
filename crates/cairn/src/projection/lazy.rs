//! How a [`ContextMessage`](super::ContextMessage) holds its message:
//! decoded, or as where its line is in the session's log (`Deferred`), read,
//! checked and decoded the first time it is asked for, then kept. A
//! deferred message holds a reader of the log's lines (the session file's
//! handle, no lock), the record's `seq`, byte offset and length, and a
//! once-cell for the decoded message; the cell lives in the list's shared
//! slot, so every snapshot sharing the slot sees one decoding.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::error::{Damage, ReadError};
use crate::frame::{self, Frame};
use crate::id::EntryId;
use crate::record::{Body, Entry, EntryBody, Message};
use crate::source::LineAt;

/// A context message's message.
#[derive(Clone)]
pub(super) enum Held {
    /// Decoded (appended in this process, a summary, or a backend that
    /// decodes at open).
    Decoded(Arc<Message>),
    /// Read from the log when first asked for.
    Deferred(Deferred),
}

/// A message entry's record, not read yet.
#[derive(Clone)]
pub(super) struct Deferred {
    seq: u64,
    at: LineAt,
    decoded: OnceLock<Arc<Message>>,
}

impl Deferred {
    /// The message of record `seq`, the line `at`.
    pub(super) fn new(seq: u64, at: LineAt) -> Deferred {
        Deferred {
            seq,
            at,
            decoded: OnceLock::new(),
        }
    }

    /// Reads the line, checks it is record `seq`, entry `entry`, a message,
    /// and decodes it.
    fn read(&self, entry: &EntryId) -> Result<Message, ReadError> {
        let damaged = |problem: String| {
            ReadError::Damaged(Box::new(Damage {
                location: self.at.reader.location().to_owned(),
                line: self.seq + 1,
                offset: self.at.offset,
                problem: format!(
                    "{problem} (this message was read only when the context first asked for it: \
                     the open took the session's structure from its persisted index and did \
                     not read this line; `cairn fsck` checks every line)"
                ),
            }))
        };
        let line = self
            .at
            .reader
            .read_at(self.seq, self.at.offset, self.at.len)?;
        let frame = Frame::parse(&line).map_err(|e| damaged(e.to_string()))?;
        if frame.seq != self.seq {
            return Err(damaged(format!(
                "its seq is {} where record {} was",
                frame.seq, self.seq
            )));
        }
        if frame.id.as_ref() != Some(entry) {
            return Err(damaged(format!(
                "it holds entry {} where entry {entry} was",
                frame.id.as_ref().map_or("(none)", EntryId::as_str)
            )));
        }
        match frame::decode_body(&frame).map_err(|e| damaged(e.to_string()))? {
            Body::Entry(Entry {
                body: EntryBody::Message(m),
                ..
            }) => Ok(m),
            Body::Entry(_) | Body::Header(_) | Body::Op(_) => Err(damaged(format!(
                "it is a {:?} record where a message was",
                frame.kind
            ))),
        }
    }
}

impl Held {
    /// The message, read and decoded now if it was deferred.
    pub(super) fn get(&self, entry: &EntryId) -> Result<&Message, ReadError> {
        match self {
            Held::Decoded(m) => Ok(&**m),
            Held::Deferred(d) => {
                if let Some(m) = d.decoded.get() {
                    return Ok(&**m);
                }
                let m = d.read(entry)?;
                Ok(&**d.decoded.get_or_init(|| Arc::new(m)))
            }
        }
    }

    /// The message if it is decoded already.
    pub(super) fn decoded(&self) -> Option<&Message> {
        match self {
            Held::Decoded(m) => Some(m),
            Held::Deferred(d) => d.decoded.get().map(|m| &**m),
        }
    }

    /// Whether both are the same line of the same log (what two messages
    /// that cannot be read are compared by).
    pub(super) fn same_line(&self, other: &Held) -> bool {
        match (self, other) {
            (Held::Deferred(a), Held::Deferred(b)) => {
                a.seq == b.seq
                    && a.at.offset == b.at.offset
                    && std::ptr::addr_eq(Arc::as_ptr(&a.at.reader), Arc::as_ptr(&b.at.reader))
            }
            (Held::Decoded(_), _) | (Held::Deferred(_), Held::Decoded(_)) => false,
        }
    }
}

/// Shows the decoded message, or where the deferred one is; never reads.
impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Held::Decoded(m) => fmt::Debug::fmt(&**m, f),
            Held::Deferred(d) => match d.decoded.get() {
                Some(m) => fmt::Debug::fmt(&**m, f),
                None => f
                    .debug_struct("Deferred")
                    .field("location", &d.at.reader.location())
                    .field("seq", &d.seq)
                    .field("offset", &d.at.offset)
                    .finish(),
            },
        }
    }
}
