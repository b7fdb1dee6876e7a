//! The indexed entries and lines, read in place from an index's blocks:
//! [`Table`] (entry rows, their ids and the hashed id table), [`LineTable`]
//! and [`IndexedPrefix`] (the lines' offsets), with the checks a row block
//! passes when first read. Knows nothing of the tree built on it.

use std::sync::{Arc, OnceLock};

use super::blocks::{Blocks, Damage, IndexBytes, Span};
use super::layout::{LEN_BLOCK, ROW, ROW_BLOCK, SLOT, SLOT_BLOCK, UNKNOWN_KIND, id_hash, le32};
use crate::id::EntryId;
use crate::kind::EntryKind;

/// One entry in the index (its id is [`Table::id`]; the tree's entries are
/// these too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Node {
    pub seq: u64,
    pub parent: Option<u32>,
    /// Number of ancestors (0 for a root).
    pub depth: u32,
    /// `None` for an ignorable entry of a kind this version does not know.
    pub kind: Option<EntryKind>,
}

/// The log prefix an index describes, as the backend checks it: the line
/// offsets are read from the index's length blocks when asked for.
#[derive(Debug, Clone)]
pub struct IndexedPrefix {
    /// How many lines (records) it covers, from record 0.
    pub records: u64,
    /// The length in bytes of the indexed lines (the offset after the last).
    pub end: u64,
    /// CRC-32C of the last indexed line's bytes, newline included.
    pub last_line_crc: u32,
    pub(super) lines: Arc<LineTable>,
}

impl IndexedPrefix {
    /// The byte offset and length of indexed line `seq`.
    ///
    /// # Errors
    ///
    /// Why the index cannot say (no such line, or its length block is
    /// damaged: the index is then not to be used).
    pub fn span(&self, seq: u64) -> Result<(u64, u64), String> {
        self.lines.span(seq)
    }

    /// The byte offset of the last indexed line.
    ///
    /// # Errors
    ///
    /// As [`IndexedPrefix::span`].
    pub fn last_offset(&self) -> Result<u64, String> {
        Ok(self.span(self.records.saturating_sub(1))?.0)
    }

    /// The byte offset of every indexed line, in order (reads every length
    /// block: for backends that keep the offsets in memory).
    ///
    /// # Errors
    ///
    /// As [`IndexedPrefix::span`].
    pub fn offsets(&self) -> Result<Vec<u64>, String> {
        (0..self.records)
            .map(|s| self.span(s).map(|(at, _)| at))
            .collect()
    }

    pub(crate) fn lines(&self) -> Arc<LineTable> {
        Arc::clone(&self.lines)
    }

    /// The prefix of the lines at `offsets` (in order, the first 0), which
    /// end at `end`, the last with the CRC-32C `last_line_crc`: what an
    /// index of those lines would give.
    ///
    /// ```
    /// let p = cairn::IndexedPrefix::from_offsets(&[0, 10], 25, 7);
    /// assert_eq!((p.records, p.span(1)), (2, Ok((10, 15))));
    /// ```
    pub fn from_offsets(offsets: &[u64], end: u64, last_line_crc: u32) -> IndexedPrefix {
        let records = offsets.len() as u64;
        let ends = offsets.iter().skip(1).chain(std::iter::once(&end));
        let lens: Vec<u8> = offsets
            .iter()
            .zip(ends)
            .flat_map(|(a, b)| {
                u32::try_from(b.saturating_sub(*a))
                    .unwrap_or(u32::MAX)
                    .to_le_bytes()
            })
            .collect();
        let step = LEN_BLOCK as usize * 4;
        let spans = lens
            .chunks(step)
            .enumerate()
            .map(|(k, b)| Span {
                at: (k * step) as u64,
                len: b.len() as u32,
                crc: crc32c::crc32c(b),
            })
            .collect();
        let starts: Vec<u64> = offsets
            .iter()
            .step_by(LEN_BLOCK as usize)
            .copied()
            .collect();
        let src: Arc<dyn IndexBytes> = Arc::new(lens);
        let lines = LineTable {
            records,
            end,
            offsets: starts.iter().map(|_| OnceLock::new()).collect(),
            starts,
            blocks: Blocks::new(&src, spans, "line length", &Damage::default()),
        };
        IndexedPrefix {
            records,
            end,
            last_line_crc,
            lines: Arc::new(lines),
        }
    }
}

/// The indexed lines' offsets, read a length block at a time.
#[derive(Debug)]
pub(crate) struct LineTable {
    pub(super) records: u64,
    pub(super) end: u64,
    /// The offset of each length block's first line.
    pub(super) starts: Vec<u64>,
    pub(super) blocks: Blocks,
    /// Each length block's line offsets, summed when it is first used.
    pub(super) offsets: Vec<OnceLock<Box<[u64]>>>,
}

impl LineTable {
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The byte offset and length of line `seq`.
    pub fn span(&self, seq: u64) -> Result<(u64, u64), String> {
        if seq >= self.records {
            return Err(format!("it covers no line {}", seq + 1));
        }
        let k = (seq / LEN_BLOCK) as usize;
        let start = self.starts[k];
        let next = self.starts.get(k + 1).copied().unwrap_or(self.end);
        let offsets = match self.offsets[k].get() {
            Some(o) => o,
            None => {
                let block = self
                    .blocks
                    .get(k, |b| {
                        let sum: u64 = b.chunks_exact(4).map(|c| u64::from(le32(c))).sum();
                        if start + sum == next && b.chunks_exact(4).all(|c| le32(c) > 0) {
                            Ok(())
                        } else {
                            Err("its lengths do not add up to the offsets around it".into())
                        }
                    })
                    .ok_or_else(|| self.blocks.damage.get().cloned().unwrap_or_default())?;
                let mut at = start;
                let summed: Box<[u64]> = block
                    .chunks_exact(4)
                    .map(|c| {
                        let line = at;
                        at += u64::from(le32(c));
                        line
                    })
                    .collect();
                self.offsets[k].get_or_init(|| summed)
            }
        };
        let i = (seq % LEN_BLOCK) as usize;
        let line = offsets[i];
        Ok((line, offsets.get(i + 1).copied().unwrap_or(next) - line))
    }
}

/// The entries an index covers, read in place from its row and slot
/// blocks as they are needed.
#[derive(Debug)]
pub(crate) struct Table {
    pub(super) entries: u32,
    pub(super) records: u64,
    pub(super) rows: Blocks,
    pub(super) slots: Blocks,
    /// Slots of the id table, minus one (a power of two, minus one).
    pub(super) mask: u32,
    pub(super) seed: u64,
    pub(super) kinds: Vec<Option<EntryKind>>,
}

/// What a row read from a damaged block gives: no record, no parent, no
/// id. The damage is noted ([`Table::damage`]) and every reader checks it.
pub(super) const DAMAGED_NODE: Node = Node {
    seq: u64::MAX,
    parent: None,
    depth: 0,
    kind: None,
};

/// What an id read from a damaged block gives: a valid id that says why
/// (it is never the id of an entry: ids a session makes are hex digits).
pub(super) const DAMAGED_ID: &str = "index-block-damaged";

impl Table {
    pub fn len(&self) -> u32 {
        self.entries
    }

    /// The first problem found in a block read after the open, if any
    /// (shared by every section of the index, line lengths included): from
    /// then on no block is read (those read before still answer), and the
    /// session fails every read and append that goes through the tree.
    pub fn damage(&self) -> Option<&str> {
        self.rows.damage.get().map(String::as_str)
    }

    /// Row block `k` (its rows, then its ids), checked on first read.
    fn row_block(&self, k: u32) -> Option<&[u8]> {
        let first = k * ROW_BLOCK;
        let count = (self.entries - first).min(ROW_BLOCK) as usize;
        let (records, kinds) = (self.records, self.kinds.len());
        self.rows
            .get(k as usize, |b| check_rows(b, first, count, records, kinds))
    }

    /// Entry `n`'s row and its block.
    fn row(&self, n: u32) -> Option<(&[u8], &[u8])> {
        if n >= self.entries {
            return None;
        }
        let block = self.row_block(n / ROW_BLOCK)?;
        let at = (n % ROW_BLOCK) as usize * ROW;
        Some((&block[at..at + ROW], block))
    }

    pub fn node(&self, n: u32) -> Node {
        match self.row(n) {
            Some((r, _)) => Node {
                seq: u64::from(le32(&r[0..4])),
                parent: le32(&r[4..8]).checked_sub(1),
                depth: le32(&r[8..12]),
                kind: self.kinds.get(r[15] as usize).copied().flatten(),
            },
            None => DAMAGED_NODE,
        }
    }

    /// The parent of entry `n` alone (a walk up the tree reads nothing else).
    pub fn parent(&self, n: u32) -> Option<u32> {
        self.row(n).and_then(|(r, _)| le32(&r[4..8]).checked_sub(1))
    }

    pub fn id(&self, n: u32) -> &str {
        let Some((r, block)) = self.row(n) else {
            return DAMAGED_ID;
        };
        let count = (self.entries - n / ROW_BLOCK * ROW_BLOCK).min(ROW_BLOCK) as usize;
        let at = count * ROW + usize::from(u16::from_le_bytes([r[12], r[13]]));
        // Checked when the block was read: in bounds, only id characters.
        block
            .get(at..at + r[14] as usize)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or(DAMAGED_ID)
    }

    /// The entry whose id is `id`, through the id table (linear probing).
    pub fn find(&self, id: &str) -> Option<u32> {
        let hash = id_hash(self.seed, id.as_bytes());
        let (mut slot, tag) = (hash as u32 & self.mask, (hash >> 32) as u32);
        let entries = self.entries;
        for _ in 0..=self.mask {
            let block = self.slots.get((slot / SLOT_BLOCK) as usize, |b| {
                if b.chunks_exact(SLOT).all(|v| le32(v) <= entries) {
                    Ok(())
                } else {
                    Err("a slot names an entry it does not hold".into())
                }
            })?;
            let at = (slot % SLOT_BLOCK) as usize * SLOT;
            match (le32(&block[at..]), le32(&block[at + 4..])) {
                (0, _) => return None,
                // A damaged row answers nothing (and the damage is noted).
                (v, t) if t == tag && self.row(v - 1).is_none() => return None,
                (v, t) if t == tag && self.id(v - 1) == id => return Some(v - 1),
                _ => slot = (slot + 1) & self.mask,
            }
        }
        None
    }
}

/// The checks of one row block when it is first read: `count` rows from
/// entry `first`, then their ids. Each row's parent is an earlier entry and,
/// when in this block, one less deep; seqs rise and stay below `records`;
/// ids sit in order, 1–64 id characters each, filling the block; kinds are
/// named. (Across blocks — a depth against a parent in another block, each
/// seq taken once — the writer's tree stood for it and the checksum for the
/// bytes.)
pub(super) fn check_rows(
    b: &[u8],
    first: u32,
    count: usize,
    records: u64,
    kinds: usize,
) -> Result<(), String> {
    let ids = b.get(count * ROW..).ok_or("it is shorter than its rows")?;
    if !all_id_chars(ids) {
        return Err("it holds an id with a character ids may not have".into());
    }
    let (mut id_off, mut last_seq) = (0usize, 0u32);
    for (i, row) in b[..count * ROW].chunks_exact(ROW).enumerate() {
        let n = first + i as u32;
        let (seq, parent, depth) = (le32(&row[0..4]), le32(&row[4..8]), le32(&row[8..12]));
        let (off, len, kind) = (
            usize::from(u16::from_le_bytes([row[12], row[13]])),
            row[14] as usize,
            row[15],
        );
        if seq <= last_seq || u64::from(seq) >= records {
            return Err(format!("entry {n}'s seq {seq} is out of order or range"));
        }
        last_seq = seq;
        let want_depth = match parent {
            0 => Some(0),
            p if p <= n && p > first => Some(le32(&b[(p - 1 - first) as usize * ROW + 8..]) + 1),
            p if p <= n => None,
            _ => return Err(format!("entry {n}'s parent is not before it")),
        };
        if want_depth.is_some_and(|d| d != depth) || (parent > 0 && depth == 0) {
            return Err(format!("entry {n}'s depth is not its parent's plus one"));
        }
        if off != id_off || len == 0 || len > EntryId::MAX_LEN {
            return Err(format!("entry {n}'s id is out of place"));
        }
        if kind != UNKNOWN_KIND && kind as usize >= kinds {
            return Err(format!("entry {n} has kind {kind}, which it does not name"));
        }
        id_off += len;
    }
    if id_off != ids.len() {
        return Err("its ids do not fill it".into());
    }
    Ok(())
}

/// Whether every byte is an id character (ASCII letter, digit, `-`, `_`,
/// `.`), checked without branching so that it runs at memory speed.
fn all_id_chars(bytes: &[u8]) -> bool {
    let bad = bytes.iter().fold(0u8, |bad, &c| {
        let lower = c | 0x20;
        let ok = (c.wrapping_sub(b'0') < 10)
            | (lower.wrapping_sub(b'a') < 26)
            | (c == b'-')
            | (c == b'_')
            | (c == b'.');
        bad | u8::from(!ok)
    });
    bad == 0
}
