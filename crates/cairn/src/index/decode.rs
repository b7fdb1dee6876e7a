//! Decoding an index's head: the preamble, the head's checksum, the prefix
//! it covers, the operation records, the checkpoint and the directory of
//! blocks. The blocks themselves are read later, when first needed
//! ([`Table`], [`IndexedPrefix::span`]).

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use super::blocks::{Blocks, Damage, IndexBytes, Span};
use super::layout::{
    INDEX_VERSION, LEN_BLOCK, MAGIC, PREAMBLE, ROW, ROW_BLOCK, SLOT, SLOT_BLOCK, le32,
};
use super::table::{IndexedPrefix, LineTable, Table};
use crate::id::{EntryId, SessionId};
use crate::kind::EntryKind;
use crate::projection::Saved;

/// What the index keeps beside the tree: the session-wide folds over every
/// indexed entry, and the projection at the last indexed entry (absent when
/// the index holds no entry; without it an open folds the branch).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    pub labels: BTreeMap<String, EntryId>,
    pub title: Option<String>,
    pub projection: Option<Saved>,
}

/// A decoded index head: the prefix and what the session rebuilds from it.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub prefix: IndexedPrefix,
    pub table: Table,
    pub ops: Vec<(u64, String)>,
    pub checkpoint: Checkpoint,
    /// Set when a block read later does not verify.
    pub damage: Damage,
}

/// Decodes an index's head for session `session`, or says why it cannot be
/// used. Reads and checks the preamble and the head (its checksum, the
/// sections adding up to the index's length, the operation records taking
/// the seqs the entries leave); the blocks are read and checked when first
/// needed ([`Table`], [`IndexedPrefix::span`]).
pub(crate) fn decode(src: Arc<dyn IndexBytes>, session: &SessionId) -> Result<Decoded, String> {
    let bytes = read_head(&*src)?;
    let body = bytes.len() - 4;
    let mut r = Reader {
        bytes: &bytes[..body],
        at: PREAMBLE,
    };
    if r.str()? != session.as_str() {
        return Err("it names another session".into());
    }
    let c = Counts::read(&mut r)?;
    let kinds = (0..r.u8()?)
        .map(|_| r.str().map(EntryKind::from_name))
        .collect::<Result<Vec<_>, _>>()?;
    let spans = Spans::read(&mut r, &c, bytes.len() as u64, src.len())?;
    let ops = operation_records(&mut r, &c)?;
    let checkpoint: Checkpoint = serde_json::from_slice(r.take(c.checkpoint_len)?)
        .map_err(|e| format!("its checkpoint does not decode ({e})"))?;
    if r.at != body {
        return Err("it holds bytes after its checkpoint".into());
    }
    let damage: Damage = Arc::default();
    let lines = LineTable {
        records: c.records,
        end: c.end,
        offsets: spans.starts.iter().map(|_| OnceLock::new()).collect(),
        starts: spans.starts,
        blocks: Blocks::new(&src, spans.lines, "line length", &damage),
    };
    Ok(Decoded {
        prefix: IndexedPrefix {
            records: c.records,
            end: c.end,
            last_line_crc: c.last_line_crc,
            lines: Arc::new(lines),
        },
        table: Table {
            entries: c.entries,
            records: c.records,
            rows: Blocks::new(&src, spans.rows, "row", &damage),
            slots: Blocks::new(&src, spans.slots, "id table", &damage),
            mask: c.slots - 1,
            seed: c.seed,
            kinds,
        },
        ops,
        checkpoint,
        damage,
    })
}

/// The preamble and the head, its checksum (the last 4 bytes) verified.
fn read_head(src: &dyn IndexBytes) -> Result<Vec<u8>, String> {
    let io = |e: io::Error| format!("it cannot be read ({e})");
    if src.len() < PREAMBLE as u64 + 4 {
        return Err("it is shorter than its header".into());
    }
    let mut pre = [0u8; PREAMBLE];
    src.read_at(&mut pre, 0).map_err(io)?;
    if &pre[..8] != MAGIC {
        return Err("it does not start with the index magic".into());
    }
    let version = le32(&pre[8..12]);
    if version != INDEX_VERSION {
        return Err(format!(
            "it has layout version {version}, this build reads {INDEX_VERSION}"
        ));
    }
    let head_len = u64::from(le32(&pre[12..16]));
    if head_len < 4 || PREAMBLE as u64 + head_len > src.len() {
        return Err("its head is longer than the index (cut short)".into());
    }
    let mut bytes = vec![0u8; PREAMBLE + head_len as usize];
    src.read_at(&mut bytes[PREAMBLE..], PREAMBLE as u64)
        .map_err(io)?;
    bytes[..PREAMBLE].copy_from_slice(&pre);
    let body = bytes.len() - 4;
    if crc32c::crc32c(&bytes[..body]) != le32(&bytes[body..]) {
        return Err("its checksum does not match (damaged or cut short)".into());
    }
    Ok(bytes)
}

/// The head's counts and sizes, checked against each other.
struct Counts {
    records: u64,
    end: u64,
    last_line_crc: u32,
    entries: u32,
    slots: u32,
    op_count: u32,
    checkpoint_len: usize,
    seed: u64,
}

impl Counts {
    fn read(r: &mut Reader<'_>) -> Result<Counts, String> {
        let c = Counts {
            records: r.u64()?,
            end: r.u64()?,
            last_line_crc: r.u32()?,
            entries: r.u32()?,
            slots: r.u32()?,
            op_count: r.u32()?,
            checkpoint_len: r.u32()? as usize,
            seed: r.u64()?,
        };
        if c.records == 0 || c.records > u64::from(u32::MAX) {
            return Err("its record count is out of range".into());
        }
        if !c.slots.is_power_of_two() || c.slots <= c.entries {
            return Err("its id table has no room for its entries".into());
        }
        if u64::from(c.entries) + u64::from(c.op_count) + 1 != c.records {
            return Err("its entries and operation records do not add up to its records".into());
        }
        Ok(c)
    }
}

/// The head's directory of blocks: where each block is and its checksum.
struct Spans {
    /// The offset of each length block's first line.
    starts: Vec<u64>,
    lines: Vec<Span>,
    rows: Vec<Span>,
    slots: Vec<Span>,
}

impl Spans {
    /// Reads the directory; the blocks start at `base` and must end at the
    /// index's length, `len`.
    fn read(r: &mut Reader<'_>, c: &Counts, base: u64, len: u64) -> Result<Spans, String> {
        let mut spans = Spans {
            starts: Vec::new(),
            lines: Vec::new(),
            rows: Vec::new(),
            slots: Vec::new(),
        };
        for k in 0..c.records.div_ceil(LEN_BLOCK) {
            let (start, crc) = (r.u64()?, r.u32()?);
            if spans.starts.last().is_some_and(|&s| s >= start)
                || (k == 0 && start != 0)
                || start >= c.end
            {
                return Err("its line offsets do not rise from 0".into());
            }
            spans.starts.push(start);
            let count = (c.records - k * LEN_BLOCK).min(LEN_BLOCK);
            spans.lines.push(Span {
                at: base + k * LEN_BLOCK * 4,
                len: count as u32 * 4,
                crc,
            });
        }
        let mut at = base + c.records * 4;
        for k in 0..c.entries.div_ceil(ROW_BLOCK) {
            let (len, crc) = (r.u32()?, r.u32()?);
            let rows = (c.entries - k * ROW_BLOCK).min(ROW_BLOCK) as usize;
            if (len as usize) < rows * (ROW + 1) || len as usize > rows * (ROW + EntryId::MAX_LEN) {
                return Err(format!(
                    "its row block {k} has a length its rows cannot have"
                ));
            }
            spans.rows.push(Span { at, len, crc });
            at += u64::from(len);
        }
        for k in 0..c.slots.div_ceil(SLOT_BLOCK) {
            let len = (c.slots - k * SLOT_BLOCK).min(SLOT_BLOCK) * SLOT as u32;
            spans.slots.push(Span {
                at,
                len,
                crc: r.u32()?,
            });
            at += u64::from(len);
        }
        if at != len {
            return Err(format!(
                "it is {len} bytes where its head gives {at} (cut short or extended)"
            ));
        }
        Ok(spans)
    }
}

/// The operation records' seqs and kinds: rising, below the record count.
fn operation_records(r: &mut Reader<'_>, c: &Counts) -> Result<Vec<(u64, String)>, String> {
    let mut ops = Vec::with_capacity(c.op_count as usize);
    let mut last = 0u64;
    for _ in 0..c.op_count {
        let seq = u64::from(r.u32()?);
        if seq <= last || seq >= c.records {
            return Err(format!(
                "its operation record {seq} is out of order or range"
            ));
        }
        last = seq;
        ops.push((seq, r.str()?.to_owned()));
    }
    Ok(ops)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .bytes
            .get(self.at..self.at.saturating_add(n))
            .ok_or("it ends in the middle of a record")?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(le32(self.take(4)?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    fn str(&mut self) -> Result<&'a str, String> {
        let n = self.u8()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| "it holds a name that is not UTF-8".into())
    }
}
