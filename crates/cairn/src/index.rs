//! The persisted index of a session (`docs/STORES.md` §4): a cache
//! derived from the log, never a second source of truth. A head (the
//! prefix it covers, the operation records, a checkpoint of the
//! session-wide folds and of the projection at the last indexed entry, and
//! a directory of the blocks with each block's checksum), then fixed-size
//! blocks: line lengths, entry rows with their ids, and the hashed id
//! table. An open reads and checks the head only; a block is read, its
//! checksum and structure checked, when something in it is first needed
//! ([`Blocks`]), so an open costs O(what it reads), not O(entries). A block
//! that does not verify is reported ([`Damage`]) and never used: the open
//! then reads the log instead. Every record the context reads is still read
//! from the log and its checksum verified.
//!
//! Encoding and decoding live here; where the bytes are kept is the
//! backend's business ([`IndexStore::open_index`](crate::IndexStore::open_index)).

use std::collections::BTreeMap;
use std::fmt;
use std::hash::BuildHasher;
use std::io;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::id::{EntryId, SessionId};
use crate::kind::EntryKind;
use crate::projection::Saved;
use crate::tree::{Node, Tree};

/// The first bytes of every index.
const MAGIC: &[u8; 8] = b"cairnidx";
/// The version of the index layout this build writes and reads.
pub(crate) const INDEX_VERSION: u32 = 3;

/// Records an open must have parsed beyond the index (or in all, without
/// one) before a writer saves a new index, and records appended beyond the
/// index before a closing writer saves one: below this, parsing the lines
/// costs about as much as reading an index.
pub(crate) const INDEX_AFTER_RECORDS: u64 = 1024;

/// Line lengths per length block (4 KiB).
const LEN_BLOCK: u64 = 1024;
/// Entry rows per row block (4 KiB of rows, then their ids).
const ROW_BLOCK: u32 = 256;
/// Id-table slots per slot block (4 KiB).
const SLOT_BLOCK: u32 = 512;
/// Bytes of one id-table slot: 1 + the entry number (0: empty), and the
/// high 32 bits of the id's hash (so that a lookup reads the row of the
/// entry it finds, not of every entry it probes).
const SLOT: usize = 8;
/// Bytes of one entry's row: seq u32, parent u32 (0 for a root, else 1 +
/// the parent's entry number), depth u32, id offset u16 (in its block's
/// ids), id length u8, kind u8 (a position in the index's kind names; 255:
/// an ignorable kind this version does not know).
const ROW: usize = 16;
/// The kind byte of an entry of an unknown ignorable kind.
const UNKNOWN_KIND: u8 = 255;
/// Magic, version and head length.
const PREAMBLE: usize = 16;

/// Where a persisted index's bytes are read from, a range at a time (a
/// file: `pread`; the SQL backends: the bytes loaded from their table).
pub trait IndexBytes: Send + Sync + fmt::Debug {
    /// The length in bytes.
    fn len(&self) -> u64;

    /// Whether it holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset`.
    ///
    /// # Errors
    ///
    /// Any I/O error; [`io::ErrorKind::UnexpectedEof`] past the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Removes the stored index, found damaged, so that the next open
    /// rebuilds it from the log; returns whether it did. Best effort (it is
    /// only a cache). The default removes nothing.
    fn discard(&self) -> bool {
        false
    }
}

impl IndexBytes for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let at = usize::try_from(offset).map_err(io::Error::other)?;
        let src = self
            .get(at..at.saturating_add(buf.len()))
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// The first problem found in an index's blocks after it was opened, shared
/// by everything read from it: once set, nothing more is read from it.
pub(crate) type Damage = Arc<OnceLock<String>>;

/// One block: where it is and the CRC-32C it must have.
#[derive(Debug, Clone, Copy)]
struct Span {
    at: u64,
    len: u32,
    crc: u32,
}

/// Blocks of one section, each read and checked when first needed and
/// then kept.
#[derive(Debug)]
struct Blocks {
    src: Arc<dyn IndexBytes>,
    spans: Vec<Span>,
    cache: Vec<OnceLock<Option<Box<[u8]>>>>,
    what: &'static str,
    damage: Damage,
}

impl Blocks {
    fn new(
        src: &Arc<dyn IndexBytes>,
        spans: Vec<Span>,
        what: &'static str,
        damage: &Damage,
    ) -> Blocks {
        Blocks {
            src: Arc::clone(src),
            cache: (0..spans.len()).map(|_| OnceLock::new()).collect(),
            spans,
            what,
            damage: Arc::clone(damage),
        }
    }

    /// Block `k`, read, checksummed and checked by `check` on first use;
    /// `None` (and the damage noted) when it cannot be read or does not
    /// verify, or when the index was already found damaged.
    fn get(&self, k: usize, check: impl FnOnce(&[u8]) -> Result<(), String>) -> Option<&[u8]> {
        let slot = self.cache.get(k)?;
        let block = slot.get_or_init(|| {
            if self.damage.get().is_some() {
                return None;
            }
            let span = self.spans[k];
            let mut buf = vec![0u8; span.len as usize];
            let problem = match self.src.read_at(&mut buf, span.at) {
                Err(e) => Some(format!("its {} block {k} cannot be read ({e})", self.what)),
                Ok(()) if crc32c::crc32c(&buf) != span.crc => Some(format!(
                    "its {} block {k} does not match its checksum (damaged)",
                    self.what
                )),
                Ok(()) => check(&buf)
                    .err()
                    .map(|why| format!("its {} block {k} is inconsistent ({why})", self.what)),
            };
            match problem {
                None => Some(buf.into_boxed_slice()),
                Some(p) => {
                    let fix = if self.src.discard() {
                        "it was removed: the next open rebuilds it from the log"
                    } else {
                        "delete it (it is only a cache) and reopen: the open rebuilds it"
                    };
                    let _ = self.damage.set(format!("{p}; {fix}"));
                    None
                }
            }
        });
        block.as_deref()
    }
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
    lines: Arc<LineTable>,
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
    records: u64,
    end: u64,
    /// The offset of each length block's first line.
    starts: Vec<u64>,
    blocks: Blocks,
    /// Each length block's line offsets, summed when it is first used.
    offsets: Vec<OnceLock<Box<[u64]>>>,
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

/// What the index is built from: the session's state over records
/// `0..records` and each line's length.
pub(crate) struct Source<'a> {
    pub session: &'a SessionId,
    pub tree: &'a Tree,
    pub ops: &'a [(u64, String)],
    /// Byte offset of every line, then the end of the last.
    pub offsets: &'a [u64],
    pub last_line_crc: u32,
    pub checkpoint: &'a Checkpoint,
}

/// The entries an index covers, read in place from its row and slot
/// blocks as they are needed.
#[derive(Debug)]
pub(crate) struct Table {
    entries: u32,
    records: u64,
    rows: Blocks,
    slots: Blocks,
    /// Slots of the id table, minus one (a power of two, minus one).
    mask: u32,
    seed: u64,
    kinds: Vec<Option<EntryKind>>,
}

/// What a row read from a damaged block gives: no record, no parent, no
/// id. The damage is noted ([`Table::damage`]) and every reader checks it.
const DAMAGED_NODE: Node = Node {
    seq: u64::MAX,
    parent: None,
    depth: 0,
    kind: None,
};

/// What an id read from a damaged block gives: a valid id that says why
/// (it is never the id of an entry: ids a session makes are hex digits).
const DAMAGED_ID: &str = "index-block-damaged";

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
fn check_rows(
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

fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// The hash of an id in the id table, under the index's seed.
fn id_hash(seed: u64, id: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (seed ^ id.len() as u64).wrapping_mul(K);
    for chunk in id.chunks(8) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K);
        h ^= h >> 29;
    }
    h ^ (h >> 32)
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

/// Encodes an index of the records whose offsets `src.offsets` lists (one
/// more offset than records: the end); `None` when the session is too
/// large for the layout (more than `u32::MAX` records) or the tree it is
/// made from read a damaged block of an earlier index.
pub(crate) fn encode(src: &Source<'_>) -> Option<Vec<u8>> {
    let records = src.offsets.len().saturating_sub(1);
    let entries = src.tree.len();
    u32::try_from(records).ok()?;
    let entries32 = u32::try_from(entries).ok()?;
    let checkpoint = serde_json::to_vec(src.checkpoint).ok()?;
    let slots = (entries + entries / 2 + 1).next_power_of_two();
    let seed = hashbrown::DefaultHashBuilder::default().hash_one(records);

    let mut lens = Vec::with_capacity(records * 4);
    let mut len_dir = Vec::new();
    for first in (0..records).step_by(LEN_BLOCK as usize) {
        let from = lens.len();
        for w in src.offsets[first..=(first + LEN_BLOCK as usize).min(records)].windows(2) {
            // A line is never empty: offsets that do not rise are not a log's.
            let len = w[1].checked_sub(w[0]).filter(|&l| l > 0)?;
            lens.extend_from_slice(&u32::try_from(len).ok()?.to_le_bytes());
        }
        len_dir.push((src.offsets[first], crc32c::crc32c(&lens[from..])));
    }
    let mut rows = Vec::with_capacity(entries * (ROW + 8));
    let mut row_dir = Vec::new();
    for first in (0..entries32).step_by(ROW_BLOCK as usize) {
        let from = rows.len();
        let last = (first + ROW_BLOCK).min(entries32);
        let mut id_off = 0u16;
        for n in first..last {
            let (node, id) = (src.tree.node(n), src.tree.id(n));
            rows.extend_from_slice(&u32::try_from(node.seq).ok()?.to_le_bytes());
            rows.extend_from_slice(&node.parent.map_or(0, |p| p + 1).to_le_bytes());
            rows.extend_from_slice(&node.depth.to_le_bytes());
            rows.extend_from_slice(&id_off.to_le_bytes());
            rows.push(u8::try_from(id.len()).ok()?);
            rows.push(node.kind.map_or(UNKNOWN_KIND, |k| {
                EntryKind::ALL.iter().position(|&a| a == k).unwrap_or(0) as u8
            }));
            id_off += id.len() as u16;
        }
        for n in first..last {
            rows.extend_from_slice(src.tree.id(n).as_bytes());
        }
        row_dir.push((
            u32::try_from(rows.len() - from).ok()?,
            crc32c::crc32c(&rows[from..]),
        ));
    }
    let mut table = vec![(0u32, 0u32); slots];
    let mask = slots as u32 - 1;
    for n in 0..entries32 {
        let hash = id_hash(seed, src.tree.id(n).as_bytes());
        let mut slot = hash as u32 & mask;
        while table[slot as usize].0 != 0 {
            slot = (slot + 1) & mask;
        }
        table[slot as usize] = (n + 1, (hash >> 32) as u32);
    }
    let slot_bytes: Vec<u8> = table
        .iter()
        .flat_map(|(v, t)| v.to_le_bytes().into_iter().chain(t.to_le_bytes()))
        .collect();
    if src.tree.damage().is_some() {
        return None;
    }

    let mut head =
        Vec::with_capacity(256 + len_dir.len() * 12 + row_dir.len() * 8 + checkpoint.len());
    put_str(&mut head, src.session.as_str());
    head.extend_from_slice(&(records as u64).to_le_bytes());
    head.extend_from_slice(&src.offsets.last().copied().unwrap_or(0).to_le_bytes());
    head.extend_from_slice(&src.last_line_crc.to_le_bytes());
    for n in [entries, slots, src.ops.len(), checkpoint.len()] {
        head.extend_from_slice(&u32::try_from(n).ok()?.to_le_bytes());
    }
    head.extend_from_slice(&seed.to_le_bytes());
    head.push(EntryKind::ALL.len() as u8);
    for k in EntryKind::ALL {
        put_str(&mut head, k.name());
    }
    for (start, crc) in &len_dir {
        head.extend_from_slice(&start.to_le_bytes());
        head.extend_from_slice(&crc.to_le_bytes());
    }
    for (len, crc) in &row_dir {
        head.extend_from_slice(&len.to_le_bytes());
        head.extend_from_slice(&crc.to_le_bytes());
    }
    for block in slot_bytes.chunks(SLOT_BLOCK as usize * SLOT) {
        head.extend_from_slice(&crc32c::crc32c(block).to_le_bytes());
    }
    for (seq, kind) in src.ops {
        head.extend_from_slice(&u32::try_from(*seq).ok()?.to_le_bytes());
        put_str(&mut head, kind);
    }
    head.extend_from_slice(&checkpoint);

    let mut out =
        Vec::with_capacity(PREAMBLE + head.len() + 4 + lens.len() + rows.len() + slot_bytes.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
    out.extend_from_slice(&u32::try_from(head.len() + 4).ok()?.to_le_bytes());
    out.extend_from_slice(&head);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&lens);
    out.extend_from_slice(&rows);
    out.extend_from_slice(&slot_bytes);
    Some(out)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Kinds, ids and session ids are far shorter than 256 bytes; a longer
    // one is cut, which makes the index fail to decode and be rebuilt.
    let b = &s.as_bytes()[..s.len().min(255)];
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

/// Decodes an index's head for session `session`, or says why it cannot be
/// used. Reads and checks the preamble and the head (its checksum, the
/// sections adding up to the index's length, the operation records taking
/// the seqs the entries leave); the blocks are read and checked when first
/// needed ([`Table`], [`IndexedPrefix::span`]).
pub(crate) fn decode(src: Arc<dyn IndexBytes>, session: &SessionId) -> Result<Decoded, String> {
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
    let mut r = Reader {
        bytes: &bytes[..body],
        at: PREAMBLE,
    };
    if r.str()? != session.as_str() {
        return Err("it names another session".into());
    }
    let records = r.u64()?;
    let end = r.u64()?;
    let last_line_crc = r.u32()?;
    let entries = r.u32()?;
    let slots = r.u32()?;
    let op_count = r.u32()?;
    let checkpoint_len = r.u32()? as usize;
    let seed = r.u64()?;
    if records == 0 || records > u64::from(u32::MAX) {
        return Err("its record count is out of range".into());
    }
    if !slots.is_power_of_two() || slots <= entries {
        return Err("its id table has no room for its entries".into());
    }
    if u64::from(entries) + u64::from(op_count) + 1 != records {
        return Err("its entries and operation records do not add up to its records".into());
    }
    let kinds = (0..r.u8()?)
        .map(|_| r.str().map(EntryKind::from_name))
        .collect::<Result<Vec<_>, _>>()?;

    let base = PREAMBLE as u64 + head_len;
    let mut starts = Vec::new();
    let mut len_spans = Vec::new();
    for k in 0..records.div_ceil(LEN_BLOCK) {
        let (start, crc) = (r.u64()?, r.u32()?);
        if starts.last().is_some_and(|&s| s >= start) || (k == 0 && start != 0) || start >= end {
            return Err("its line offsets do not rise from 0".into());
        }
        starts.push(start);
        let count = (records - k * LEN_BLOCK).min(LEN_BLOCK);
        len_spans.push(Span {
            at: base + k * LEN_BLOCK * 4,
            len: count as u32 * 4,
            crc,
        });
    }
    let mut at = base + records * 4;
    let mut row_spans = Vec::new();
    for k in 0..entries.div_ceil(ROW_BLOCK) {
        let (len, crc) = (r.u32()?, r.u32()?);
        let rows = (entries - k * ROW_BLOCK).min(ROW_BLOCK) as usize;
        if (len as usize) < rows * (ROW + 1) || len as usize > rows * (ROW + EntryId::MAX_LEN) {
            return Err(format!(
                "its row block {k} has a length its rows cannot have"
            ));
        }
        row_spans.push(Span { at, len, crc });
        at += u64::from(len);
    }
    let mut slot_spans = Vec::new();
    for k in 0..slots.div_ceil(SLOT_BLOCK) {
        let len = (slots - k * SLOT_BLOCK).min(SLOT_BLOCK) * SLOT as u32;
        slot_spans.push(Span {
            at,
            len,
            crc: r.u32()?,
        });
        at += u64::from(len);
    }
    if at != src.len() {
        return Err(format!(
            "it is {} bytes where its head gives {at} (cut short or extended)",
            src.len()
        ));
    }
    let mut ops = Vec::with_capacity(op_count as usize);
    let mut last = 0u64;
    for _ in 0..op_count {
        let seq = u64::from(r.u32()?);
        if seq <= last || seq >= records {
            return Err(format!(
                "its operation record {seq} is out of order or range"
            ));
        }
        last = seq;
        ops.push((seq, r.str()?.to_owned()));
    }
    let checkpoint: Checkpoint = serde_json::from_slice(r.take(checkpoint_len)?)
        .map_err(|e| format!("its checkpoint does not decode ({e})"))?;
    if r.at != body {
        return Err("it holds bytes after its checkpoint".into());
    }
    let damage: Damage = Arc::default();
    let lines = LineTable {
        records,
        end,
        offsets: starts.iter().map(|_| OnceLock::new()).collect(),
        starts,
        blocks: Blocks::new(&src, len_spans, "line length", &damage),
    };
    Ok(Decoded {
        prefix: IndexedPrefix {
            records,
            end,
            last_line_crc,
            lines: Arc::new(lines),
        },
        table: Table {
            entries,
            records,
            rows: Blocks::new(&src, row_spans, "row", &damage),
            slots: Blocks::new(&src, slot_spans, "id table", &damage),
            mask: slots - 1,
            seed,
            kinds,
        },
        ops,
        checkpoint,
        damage,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An index of a header and three entries (a root, its child, and a
    /// second root), with one operation record between them.
    fn sample() -> (SessionId, Vec<u8>) {
        let session = SessionId::generate();
        let mut tree = Tree::default();
        let id = |s: &str| EntryId::parse(s).expect("id");
        tree.insert_checked(1, id("aa"), None, Some(EntryKind::Message));
        tree.insert_checked(3, id("bbb"), Some(0), None);
        tree.insert_checked(4, id("c"), None, Some(EntryKind::Label));
        let ops = vec![(2, "op_started".to_owned())];
        let bytes = encode(&Source {
            session: &session,
            tree: &tree,
            ops: &ops,
            offsets: &[0, 10, 25, 30, 42, 50],
            last_line_crc: 7,
            checkpoint: &Checkpoint::default(),
        })
        .expect("encodes");
        (session, bytes)
    }

    fn open(session: &SessionId, bytes: Vec<u8>) -> Decoded {
        match decode(Arc::new(bytes), session) {
            Ok(d) => d,
            Err(why) => panic!("{why}"),
        }
    }

    /// Where the blocks start: after the preamble and the head.
    fn blocks_at(bytes: &[u8]) -> usize {
        PREAMBLE + le32(&bytes[12..16]) as usize
    }

    /// The sample's one row block (three rows, then "aabbbc"), changed at
    /// `at` to `value`, checked as a read would check it.
    fn rows_changed(at: usize, value: u8) -> Result<(), String> {
        let (_, bytes) = sample();
        let from = blocks_at(&bytes) + 5 * 4;
        let mut block = bytes[from..from + 3 * ROW + 6].to_vec();
        block[at] = value;
        check_rows(&block, 0, 3, 5, EntryKind::ALL.len())
    }

    #[test]
    fn an_index_reads_back_as_the_tree_it_was_written_from() {
        let (session, bytes) = sample();
        let decoded = open(&session, bytes);
        assert!(decoded.checkpoint.projection.is_none());
        let t = &decoded.table;
        assert_eq!(t.len(), 3);
        assert_eq!((t.id(0), t.id(1), t.id(2)), ("aa", "bbb", "c"));
        assert_eq!(
            t.node(1),
            Node {
                seq: 3,
                parent: Some(0),
                depth: 1,
                kind: None
            }
        );
        assert_eq!(t.node(2).kind, Some(EntryKind::Label));
        assert_eq!(
            (t.find("aa"), t.find("bbb"), t.find("c"), t.find("d")),
            (Some(0), Some(1), Some(2), None)
        );
        assert_eq!(decoded.ops, vec![(2, "op_started".to_owned())]);
        assert_eq!(decoded.prefix.offsets(), Ok(vec![0, 10, 25, 30, 42]));
        assert_eq!(decoded.prefix.span(4), Ok((42, 8)));
        assert_eq!(decoded.prefix.end, 50);
        assert!(t.damage().is_none());
    }

    #[test]
    fn many_blocks_read_back_in_place() {
        let session = SessionId::generate();
        let mut tree = Tree::default();
        let n = 3 * ROW_BLOCK + 7;
        for i in 0..n {
            let parent = (i > 0).then(|| i - 1);
            let id = EntryId::parse(&format!("e{i}")).expect("id");
            tree.insert_checked(u64::from(i) + 1, id, parent, Some(EntryKind::Message));
        }
        let offsets: Vec<u64> = (0..=u64::from(n) + 1).map(|s| s * 3).collect();
        let bytes = encode(&Source {
            session: &session,
            tree: &tree,
            ops: &[],
            offsets: &offsets,
            last_line_crc: 1,
            checkpoint: &Checkpoint::default(),
        })
        .expect("encodes");
        let d = open(&session, bytes);
        for i in [0, 255, 256, 700, n - 1] {
            assert_eq!(d.table.node(i).depth, i);
            assert_eq!(d.table.find(&format!("e{i}")), Some(i));
            assert_eq!(d.prefix.span(u64::from(i)), Ok((u64::from(i) * 3, 3)));
        }
        assert!(d.table.damage().is_none());
    }

    #[test]
    fn a_row_block_with_a_parent_after_its_child_is_refused() {
        // Entry 0's parent field: 3 would be entry 2, after it.
        let why = rows_changed(4, 3).expect_err("accepted");
        assert!(why.contains("parent is not before it"), "{why}");
    }

    #[test]
    fn a_row_block_with_a_wrong_depth_is_refused() {
        let why = rows_changed(ROW + 8, 5).expect_err("accepted");
        assert!(why.contains("depth"), "{why}");
    }

    #[test]
    fn a_row_block_with_an_id_character_ids_may_not_have_is_refused() {
        let why = rows_changed(3 * ROW + 1, b'/').expect_err("accepted");
        assert!(why.contains("character"), "{why}");
    }

    #[test]
    fn a_row_block_whose_seqs_do_not_rise_is_refused() {
        // Entry 2's seq 4 becomes 3, entry 1's.
        let why = rows_changed(2 * ROW, 3).expect_err("accepted");
        assert!(why.contains("seq 3"), "{why}");
    }

    #[test]
    fn a_row_block_with_an_unnamed_kind_is_refused() {
        let why = rows_changed(15, 40).expect_err("accepted");
        assert!(why.contains("kind 40"), "{why}");
    }

    #[test]
    fn a_flipped_bit_in_the_head_is_refused_by_its_checksum() {
        let (session, bytes) = sample();
        for at in 16..blocks_at(&bytes) {
            let mut b = bytes.clone();
            b[at] ^= 0x10;
            match decode(Arc::new(b), &session) {
                Ok(_) => panic!("byte {at}: accepted"),
                Err(why) => assert!(why.contains("checksum"), "byte {at}: {why}"),
            }
        }
    }

    #[test]
    fn a_flipped_bit_in_a_block_is_found_when_the_block_is_read() {
        let (session, bytes) = sample();
        for at in blocks_at(&bytes)..bytes.len() {
            let mut b = bytes.clone();
            b[at] ^= 0x10;
            // The head is intact: the index opens, and the block that
            // holds the byte refuses to be read.
            let d = open(&session, b);
            let _ = (d.prefix.offsets(), d.table.node(2), d.table.find("aa"));
            let why = d
                .damage
                .get()
                .unwrap_or_else(|| panic!("byte {at}: not found"));
            assert!(why.contains("checksum"), "byte {at}: {why}");
        }
    }

    #[test]
    fn a_damaged_row_block_answers_nothing_and_says_so() {
        let (session, mut bytes) = sample();
        let at = blocks_at(&bytes) + 5 * 4 + ROW + 4;
        bytes[at] ^= 1;
        let d = open(&session, bytes);
        assert_eq!(d.prefix.span(1), Ok((10, 15)), "other blocks still read");
        assert_eq!(d.table.node(1), DAMAGED_NODE);
        assert_eq!((d.table.id(0), d.table.parent(1)), (DAMAGED_ID, None));
        let why = d.table.damage().expect("noted");
        assert!(why.contains("row block 0"), "{why}");
    }

    #[test]
    fn a_cut_or_extended_index_is_refused_at_open() {
        let (session, bytes) = sample();
        for b in [
            bytes[..bytes.len() - 1].to_vec(),
            [&bytes[..], &[0]].concat(),
        ] {
            match decode(Arc::new(b), &session) {
                Ok(_) => panic!("accepted"),
                Err(why) => assert!(why.contains("cut short or extended"), "{why}"),
            }
        }
    }
}
