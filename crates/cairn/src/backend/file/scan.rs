//! The open-time scan of a session file: reading it in chunks, checking
//! each line's framing, and classifying damage as a torn tail (nothing
//! intact after it, or a hole of bytes that never reached the disk) or as
//! damage in the middle (a hard error).

use std::io;

use super::super::{RawLine, Visitor};
use crate::error::{Damage, IoFailure, OpenError};
use crate::frame;
use crate::vfs::VfsFile;

pub(super) fn read_exact_at(file: &dyn VfsFile, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file is shorter than expected",
            ));
        }
        done += n;
    }
    Ok(())
}

pub(super) struct Bad {
    pub(super) offset: u64,
    pub(super) index: u64,
    pub(super) problem: String,
    /// The first damaged line is a hole ([`is_hole`]): the intact lines
    /// after it belong to the torn tail instead of making it an error.
    pub(super) hole: bool,
    /// Intact lines follow the damage (only possible after a hole).
    pub(super) intact_after: bool,
}

pub(super) struct Scan {
    /// Offsets of the lines read (after the first `first`).
    pub(super) offsets: Vec<u64>,
    pub(super) end: u64,
    pub(super) file_len: u64,
    pub(super) bad: Option<Bad>,
}

/// How much of a file is read at a time.
pub(super) const READ_CHUNK: usize = 1 << 20;

/// Reads the file in chunks from byte `start_end`, where the first `first`
/// lines end (both 0 for the whole file), checking each line's framing. Intact lines are
/// handed to `visit` until the first damaged one. Everything from there to
/// the end of the file is a torn tail when no intact line follows, or when
/// the first damaged line is a hole ([`is_hole`]); otherwise an intact line
/// after damage is damage in the middle (a hard error).
pub(super) fn scan(
    file: &dyn VfsFile,
    location: &str,
    first: u64,
    start_end: u64,
    visit: &mut Visitor<'_>,
) -> Result<Scan, OpenError> {
    let io_err = |source| OpenError::Io(IoFailure::new("read", location.to_owned(), source));
    let file_len = file.len().map_err(io_err)?;
    let mut lines = Lines {
        location,
        first,
        offsets: Vec::new(),
        bad: None,
        end: start_end,
    };
    // A line split across chunks is joined in `carry`; whole lines are
    // handled in place.
    let mut carry: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut pos: u64 = start_end; // file offset of the next line (of carry[0] if any)
    let mut read_off: u64 = start_end;
    loop {
        // Never past the length measured above: a reader racing a writer's
        // append would otherwise see a tail beyond `file_len`.
        let want = file_len.saturating_sub(read_off).min(READ_CHUNK as u64) as usize;
        let n = if want > 0 {
            file.read_at(&mut chunk[..want], read_off).map_err(io_err)?
        } else {
            0
        };
        read_off += n as u64;
        let mut data = &chunk[..n];
        if !carry.is_empty() {
            match memchr::memchr(b'\n', data) {
                Some(nl) => {
                    carry.extend_from_slice(&data[..=nl]);
                    lines.line(&carry, pos, visit)?;
                    pos += carry.len() as u64;
                    carry.clear();
                    data = &data[nl + 1..];
                }
                None => {
                    carry.extend_from_slice(data);
                    data = &[];
                }
            }
        }
        let mut start = 0usize;
        while let Some(nl) = memchr::memchr(b'\n', &data[start..]) {
            let line = &data[start..start + nl + 1];
            lines.line(line, pos, visit)?;
            pos += line.len() as u64;
            start += nl + 1;
        }
        carry.extend_from_slice(&data[start..]);
        if n == 0 {
            if !carry.is_empty() && lines.bad.is_none() {
                lines.bad = Some(Bad {
                    offset: pos,
                    index: lines.first + lines.offsets.len() as u64,
                    problem: frame::FrameDamage::Incomplete.to_string(),
                    hole: false,
                    intact_after: false,
                });
            }
            break;
        }
    }
    if lines.first == 0 && lines.offsets.is_empty() {
        let problem = match &lines.bad {
            None => "the file is empty".to_owned(),
            Some(b) => format!("its header (line 1) is unreadable: {}", b.problem),
        };
        return Err(OpenError::NotASession {
            location: location.to_owned(),
            problem,
        });
    }
    Ok(Scan {
        offsets: lines.offsets,
        end: lines.end,
        file_len,
        bad: lines.bad,
    })
}

/// Bytes a 512-byte disk sector starts at: the smallest unit a disk writes,
/// so the zeros of a lost write end at a multiple of it (or where another
/// write begins, or at the end of the file).
const SECTOR: u64 = 512;

/// How every record line but the header begins (`docs/FORMAT.md`, "Framing").
const RECORD_START: &[u8] = b"{\"seq\":";

/// Whether a damaged line, starting at byte `offset` of the file, carries
/// the signature of a *hole*: bytes that never reached the disk. cairn never
/// writes a NUL byte (JSON escapes control characters), and a write lost at
/// a power loss reads back as zeros that end where the disk's write units
/// end: at the end of the file, at a sector boundary, or where a later write
/// (always a whole record) begins. So the line must hold a run of NUL bytes
/// ending in one of those places. A flipped bit can make one NUL, but not
/// one that ends so (a newline cannot become NUL in one flip); see
/// `docs/FORMAT.md`, "Torn tail", for why damage that starts with a hole is
/// cut as a torn tail.
pub(super) fn is_hole(line: &[u8], offset: u64) -> bool {
    let mut i = 0;
    while let Some(z) = memchr::memchr(0, &line[i..]) {
        let start = i + z;
        let end = line[start..]
            .iter()
            .position(|&b| b != 0)
            .map_or(line.len(), |n| start + n);
        if end == line.len()
            || (offset + end as u64).is_multiple_of(SECTOR)
            || line[end..].starts_with(RECORD_START)
        {
            return true;
        }
        i = end;
    }
    false
}

/// The lines seen so far by [`scan`].
struct Lines<'l> {
    location: &'l str,
    /// Lines before the scan's start (a persisted index covers them).
    first: u64,
    offsets: Vec<u64>,
    bad: Option<Bad>,
    end: u64,
}

impl Lines<'_> {
    /// Checks one complete line: intact lines go to the visitor until the
    /// first damaged one; an intact line after damage is a hard error.
    fn line(&mut self, line: &[u8], offset: u64, visit: &mut Visitor<'_>) -> Result<(), OpenError> {
        let index = self.first + self.offsets.len() as u64;
        match frame::check(line) {
            Ok(()) => {
                if let Some(b) = &mut self.bad {
                    if b.hole {
                        b.intact_after = true;
                        return Ok(());
                    }
                    return Err(damaged(
                        self.location,
                        b.index,
                        b.offset,
                        format!(
                            "{}, and intact records follow it, so it is not a torn tail",
                            b.problem
                        ),
                    ));
                }
                visit(RawLine {
                    index,
                    offset,
                    bytes: line,
                })?;
                self.offsets.push(offset);
                self.end = offset + line.len() as u64;
            }
            Err(d) => {
                if self.bad.is_none() {
                    self.bad = Some(Bad {
                        offset,
                        index,
                        problem: d.to_string(),
                        hole: is_hole(line, offset),
                        intact_after: false,
                    });
                }
            }
        }
        Ok(())
    }
}

pub(super) fn damaged(location: &str, index: u64, offset: u64, problem: String) -> OpenError {
    OpenError::Damaged(Box::new(Damage {
        location: location.to_owned(),
        line: index + 1,
        offset,
        problem,
    }))
}

#[cfg(test)]
mod tests {
    use super::{SECTOR, is_hole};

    const LINE: &[u8] = br#"{"seq":3,"ts":"2026-11-30T00:00:00.000Z","kind":"message","data":{"text":"a b"},"crc":"00000000"}"#;

    #[test]
    fn zeros_before_the_start_of_a_later_record_are_a_hole() {
        let mut line = LINE[..20].to_vec();
        line.extend_from_slice(&[0; 7]);
        line.extend_from_slice(LINE);
        line.push(b'\n');
        assert!(is_hole(&line, 1000));
    }

    #[test]
    fn zeros_that_end_at_a_sector_boundary_are_a_hole() {
        let mut line = vec![0u8; 30];
        line.extend_from_slice(&LINE[40..]);
        line.push(b'\n');
        assert!(is_hole(&line, SECTOR * 3 - 30));
        assert!(!is_hole(&line, SECTOR * 3 - 29));
    }

    #[test]
    fn zeros_to_the_end_of_the_file_are_a_hole() {
        let mut line = LINE[..50].to_vec();
        line.extend_from_slice(&[0; 3]);
        assert!(is_hole(&line, 1001));
    }

    #[test]
    fn a_flipped_bit_that_makes_a_nul_inside_a_line_is_not_a_hole() {
        // "a b" -> "a\0b": a space is one bit away from NUL.
        let mut line = LINE.to_vec();
        let space = line.iter().position(|&b| b == b' ').unwrap_or(0);
        line[space] = 0;
        line.push(b'\n');
        assert!(!is_hole(&line, 1000));
        assert!(!is_hole(b"{\"seq\":3,\"tz\":1}\n", 1000));
    }
}
