//! An open's scan of a session's rows in `seq` order: each stored line's
//! checksum and `seq` continuity, handed to the core's visitor, with the
//! offsets the log handle keeps and the last lines kept for the reads that
//! follow the open.

use cairn::frame;
use cairn::{Damage, IndexedOpen, IndexedPrefix, IoFailure, OpenError, Opening, RawLine, Visitor};

/// How many bytes of a session's last records an open keeps for the reads
/// that follow it (the records an open reads back for the context are the
/// branch's, mostly at the end): the log's first read-ahead window.
pub const KEEP_BYTES: u64 = 32 << 20;

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
    /// Lines from this offset on are kept.
    keep_from: u64,
    kept: Vec<Vec<u8>>,
}

/// What a scan found.
#[derive(Debug)]
pub struct Scanned {
    /// The offset of every line, as if the lines were one file.
    pub offsets: Vec<u64>,
    /// The end of the last line.
    pub end: u64,
    /// `kept[i]` is record `first_kept + i`: the last lines, as read.
    pub first_kept: u64,
    /// The lines kept.
    pub kept: Vec<Vec<u8>>,
}

impl Scanned {
    /// What a session just created holds: its header, kept.
    pub fn created(header: &[u8]) -> Scanned {
        Scanned {
            offsets: vec![0],
            end: header.len() as u64,
            first_kept: 0,
            kept: vec![header.to_vec()],
        }
    }
}

impl<'a> Scan<'a> {
    /// A scan of the session at `location`, whose lines are expected to
    /// total `bytes` (the lines within [`KEEP_BYTES`] of that end are kept;
    /// 0 keeps none).
    pub fn new(location: &'a str, bytes: u64) -> Scan<'a> {
        Scan {
            location,
            offsets: Vec::new(),
            end: 0,
            keep_from: if bytes == 0 {
                u64::MAX
            } else {
                bytes.saturating_sub(KEEP_BYTES)
            },
            kept: Vec::new(),
        }
    }

    /// A scan of the rows after the ones a persisted index describes
    /// (checked with [`stale_prefix`]), whose offsets are `offsets`: the
    /// first row must be record `offsets.len()`, at `end`.
    pub fn after(location: &'a str, offsets: Vec<u64>, end: u64, bytes: u64) -> Scan<'a> {
        Scan {
            offsets,
            end,
            ..Scan::new(location, bytes)
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

    /// The database failed during the scan: `source` as the open's error.
    pub fn failed(&self, source: std::io::Error) -> OpenError {
        OpenError::Io(IoFailure::new("read", self.location.to_owned(), source))
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
        if self.end >= self.keep_from {
            self.kept.push(bytes.to_vec());
        }
        self.offsets.push(self.end);
        self.end += bytes.len() as u64;
        Ok(())
    }

    /// What the scan found.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotASession`] when there was no row.
    pub fn finish(self) -> Result<Scanned, OpenError> {
        if self.offsets.is_empty() {
            return Err(OpenError::NotASession {
                location: self.location.to_owned(),
                problem: "the session has no records".into(),
            });
        }
        Ok(Scanned {
            first_kept: (self.offsets.len() - self.kept.len()) as u64,
            offsets: self.offsets,
            end: self.end,
            kept: self.kept,
        })
    }
}

/// What a backend's open of a whole session (no index) found: only an
/// index can be stale, so a stale answer would be a session that is not one.
///
/// # Errors
///
/// [`OpenError::NotASession`] for a stale answer.
pub(crate) fn opened_whole(found: IndexedOpen, location: impl FnOnce() -> String) -> Opening {
    match found {
        IndexedOpen::Opened(o) => Ok(o),
        IndexedOpen::Stale(problem) => Err(OpenError::NotASession {
            location: location(),
            problem,
        }),
    }
}

/// Where an open's scan starts: at the first row, or after the rows
/// `prefix` (a persisted index's) describes if it still describes them —
/// else why not. The session holds `records` rows of `bytes` in all;
/// `last_row(n)` reads its record `n`, if there is one.
///
/// # Errors
///
/// `last_row`'s.
pub(crate) fn scan_from<'a>(
    location: &'a str,
    prefix: Option<IndexedPrefix>,
    (records, bytes): (u64, u64),
    last_row: impl FnOnce(u64) -> Result<Option<Vec<u8>>, OpenError>,
) -> Result<Result<Scan<'a>, String>, OpenError> {
    let Some(prefix) = prefix else {
        return Ok(Ok(Scan::new(location, bytes)));
    };
    // This backend keeps every offset in memory: read them all.
    let offsets = match prefix.offsets() {
        Ok(o) => o,
        Err(why) => return Ok(Err(why)),
    };
    let last = match prefix.records.checked_sub(1) {
        Some(n) => last_row(n)?,
        None => None,
    };
    Ok(
        match stale_prefix(&prefix, records, bytes, last.as_deref()) {
            Some(why) => Err(why),
            None => Ok(Scan::after(location, offsets, prefix.end, bytes)),
        },
    )
}

/// Why a persisted index no longer describes a session's rows (`None`: it
/// does): the session holds `records` rows of `bytes` in all, and `last` is
/// its row at the index's last position, if there is one. The rows of a
/// session are never rewritten, so its last indexed row, whole and with
/// the indexed CRC, vouches for the rows before it as the file backend's
/// last indexed line does.
pub fn stale_prefix(
    prefix: &IndexedPrefix,
    records: u64,
    bytes: u64,
    last: Option<&[u8]>,
) -> Option<String> {
    let n = prefix.records;
    if n == 0 {
        return Some("it indexes no records".into());
    }
    let at = match prefix.last_offset() {
        Ok(at) => at,
        Err(why) => return Some(why),
    };
    if records < n || bytes < prefix.end {
        return Some(format!(
            "the session holds {records} records ({bytes} bytes), fewer than the {n} ({} bytes) \
             it indexes",
            prefix.end
        ));
    }
    match last {
        Some(line)
            if line.len() as u64 == prefix.end - at
                && frame::check(line).is_ok()
                && crc32c::crc32c(line) == prefix.last_line_crc =>
        {
            None
        }
        _ => Some(format!(
            "the session's record {} is not the one it indexed",
            n - 1
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix_of(lines: &[&[u8]]) -> IndexedPrefix {
        let mut offsets = Vec::new();
        let mut end = 0;
        for l in lines {
            offsets.push(end);
            end += l.len() as u64;
        }
        IndexedPrefix::from_offsets(&offsets, end, crc32c::crc32c(lines[lines.len() - 1]))
    }

    fn line(seq: u64) -> Vec<u8> {
        let e = cairn::Entry {
            id: cairn::EntryId::parse(&format!("e{seq}")).unwrap(),
            parent: None,
            body: cairn::EntryBody::Message(cairn::Message::text(cairn::Role::User, "hi")),
        };
        frame::encode_entry(seq, "2026-01-01T00:00:00.000Z", &e)
    }

    #[test]
    fn an_index_is_stale_unless_its_last_row_is_the_one_it_indexed() {
        let (a, b) = (line(0), line(1));
        let p = prefix_of(&[&a, &b]);
        let all = p.end + 10;
        assert_eq!(stale_prefix(&p, 3, all, Some(&b)), None);
        assert!(
            stale_prefix(&p, 1, all, Some(&b)).is_some(),
            "fewer records"
        );
        assert!(
            stale_prefix(&p, 3, p.end - 1, Some(&b)).is_some(),
            "fewer bytes"
        );
        assert!(stale_prefix(&p, 3, all, None).is_some(), "no such row");
        assert!(stale_prefix(&p, 3, all, Some(&a)).is_some(), "another row");
        let mut torn = b.clone();
        torn[3] ^= 1;
        assert!(stale_prefix(&p, 3, all, Some(&torn)).is_some(), "damaged");
    }
}
