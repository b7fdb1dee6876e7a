//! What every SQL backend does with a session's rows, whatever the
//! database: the open's scan (each stored line's checksum and `seq`
//! continuity, handed to the core's visitor) and the log handle's state
//! (the lines' offsets, the writer's token and summary, the poison after a
//! failed append). Public so that cairn-postgres shares it.

use std::io;

use cairn::frame;
use cairn::{AppendError, Damage, OpenError, RawLine, ReadError, Visitor};

use crate::summary::Summary;

/// Damage found at open: record `index` at byte `offset` (as if the lines
/// were one file).
pub fn damaged(location: &str, index: u64, offset: u64, problem: String) -> OpenError {
    OpenError::Damaged(Box::new(Damage {
        location: location.to_owned(),
        line: index + 1,
        offset,
        problem,
    }))
}

/// An open's scan of a session's rows in `seq` order.
#[derive(Debug)]
pub struct Scan<'a> {
    location: &'a str,
    offsets: Vec<u64>,
    end: u64,
}

impl<'a> Scan<'a> {
    /// A scan of the session at `location`.
    pub fn new(location: &'a str) -> Scan<'a> {
        Scan {
            location,
            offsets: Vec::new(),
            end: 0,
        }
    }

    /// The position the next row must have.
    pub fn next_index(&self) -> u64 {
        self.offsets.len() as u64
    }

    /// Damage at the next row.
    pub fn damaged(&self, problem: String) -> OpenError {
        damaged(self.location, self.next_index(), self.end, problem)
    }

    /// Takes the next row: its `seq` must follow, its line must verify; the
    /// line is then handed to `visit`.
    ///
    /// # Errors
    ///
    /// [`OpenError::Damaged`] for a gap or a line that does not verify, or
    /// the visitor's error.
    pub fn row(
        &mut self,
        seq: i64,
        bytes: &[u8],
        visit: &mut Visitor<'_>,
    ) -> Result<(), OpenError> {
        let index = self.next_index();
        if u64::try_from(seq).ok() != Some(index) {
            return Err(self.damaged(format!(
                "record {index} is missing: the next stored record has seq {seq}"
            )));
        }
        frame::check(bytes).map_err(|d| self.damaged(d.to_string()))?;
        visit(RawLine {
            index,
            offset: self.end,
            bytes,
        })?;
        self.offsets.push(self.end);
        self.end += bytes.len() as u64;
        Ok(())
    }

    /// The offsets of every line and the end.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotASession`] when there was no row.
    pub fn finish(self) -> Result<(Vec<u64>, u64), OpenError> {
        if self.offsets.is_empty() {
            return Err(OpenError::NotASession {
                location: self.location.to_owned(),
                problem: "the session has no records".into(),
            });
        }
        Ok((self.offsets, self.end))
    }
}

/// The writer's part of a log: its fencing token and the summary columns.
#[derive(Debug)]
pub struct Writer {
    /// The fencing token every append carries.
    pub token: i64,
    /// The summary columns as of the last append.
    pub summary: Summary,
}

/// An open log's state.
#[derive(Debug)]
pub struct LogState {
    /// Offset of every line, as if the lines were one file.
    offsets: Vec<u64>,
    end: u64,
    writer: Option<Writer>,
    poisoned: Option<String>,
}

impl LogState {
    /// The state after an open (or create) found `offsets` and `end`.
    pub fn new(offsets: Vec<u64>, end: u64, writer: Option<Writer>) -> LogState {
        LogState {
            offsets,
            end,
            writer,
            poisoned: None,
        }
    }

    /// The writer, if this handle may append.
    ///
    /// # Errors
    ///
    /// [`AppendError::Poisoned`] after a failed append,
    /// [`AppendError::ReadOnly`] for a reader.
    pub fn writable(&mut self, location: &str) -> Result<&mut Writer, AppendError> {
        if let Some(cause) = &self.poisoned {
            return Err(AppendError::Poisoned {
                session: location.to_owned(),
                cause: cause.clone(),
            });
        }
        self.writer.as_mut().ok_or_else(|| AppendError::ReadOnly {
            session: location.to_owned(),
        })
    }

    /// The offset of line `seq`.
    ///
    /// # Errors
    ///
    /// [`ReadError::NoSuchRecord`].
    pub fn offset_of(&self, seq: u64) -> Result<u64, ReadError> {
        usize::try_from(seq)
            .ok()
            .and_then(|i| self.offsets.get(i))
            .copied()
            .ok_or(ReadError::NoSuchRecord(seq))
    }

    /// Takes in `lines`, just committed, and the summary after them.
    pub fn appended(&mut self, lines: &[Vec<u8>], summary: Summary) {
        if let Some(w) = self.writer.as_mut() {
            w.summary = summary;
        }
        for l in lines {
            self.offsets.push(self.end);
            self.end += l.len() as u64;
        }
    }

    /// Poisons the handle after an append failed with `source`; the error
    /// to return.
    pub fn failed(&mut self, location: &str, source: io::Error) -> AppendError {
        self.poison(format!("an append failed: {}", cairn::with_causes(&source)));
        AppendError::Io {
            action: "append to",
            location: location.to_owned(),
            source,
        }
    }

    /// Refuses every later append with `cause` (the first cause stays).
    pub fn poison(&mut self, cause: String) {
        self.poisoned.get_or_insert(cause);
    }

    /// Lines.
    pub fn len(&self) -> u64 {
        self.offsets.len() as u64
    }

    /// Whether there is no line (never, once opened).
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Bytes of all lines.
    pub fn byte_len(&self) -> u64 {
        self.end
    }

    /// The offset of line `seq`, 0 if none.
    pub fn offset(&self, seq: u64) -> u64 {
        self.offset_of(seq).unwrap_or(0)
    }

    /// The writer's token, for a writer.
    pub fn token(&self) -> Option<i64> {
        self.writer.as_ref().map(|w| w.token)
    }

    /// Why appends are refused, once they are.
    pub fn poisoned(&self) -> Option<String> {
        self.poisoned.clone()
    }
}
