//! The persisted index of a session (`docs/FORMAT.md`, "Index"): a cache
//! derived from the log, never a second source of truth. Per record its line
//! length (so its offset); per entry a fixed-size row (seq, parent, depth,
//! kind, where its id is) and its id; a hashed table of the ids; the
//! operation records; and a checkpoint of the session-wide folds and of the
//! projection at the last indexed entry. An open checks it still describes
//! the log (the log length it covers, the CRC-32C of the last line it
//! covers) and then keeps its bytes as the tree ([`Table`]): nothing is
//! allocated or hashed per entry. Every record the context reads is still
//! read from the log and its checksum verified.
//!
//! Encoding and decoding live here; where the bytes are kept is the
//! backend's business ([`IndexStore::load_index`](crate::IndexStore::load_index)).

use std::collections::BTreeMap;
use std::hash::BuildHasher;

use serde::{Deserialize, Serialize};

use crate::id::{EntryId, SessionId};
use crate::kind::EntryKind;
use crate::projection::Saved;
use crate::tree::{Node, Tree};

/// The first bytes of every index.
const MAGIC: &[u8; 8] = b"cairnidx";
/// The version of the index layout this build writes and reads.
pub(crate) const INDEX_VERSION: u32 = 2;

/// Records an open must have parsed beyond the index (or in all, without
/// one) before a writer saves a new index, and records appended beyond the
/// index before a closing writer saves one: below this, parsing the lines
/// costs about as much as reading an index.
pub(crate) const INDEX_AFTER_RECORDS: u64 = 1024;

/// Bytes of one entry's row: seq u32, parent u32 (0 for a root, else 1 +
/// the parent's entry number), depth u32, id offset u32, id length u8,
/// kind u8 (a position in the index's kind names; 255: an ignorable kind
/// this version does not know).
const ROW: usize = 18;
/// The kind byte of an entry of an unknown ignorable kind.
const UNKNOWN_KIND: u8 = 255;

/// The log prefix an index describes, as the backend checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedPrefix {
    /// Byte offset of every indexed line, in order (the first is 0).
    pub offsets: Vec<u64>,
    /// The length in bytes of the indexed lines (the offset after the last).
    pub end: u64,
    /// CRC-32C of the last indexed line's bytes, newline included.
    pub last_line_crc: u32,
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

/// A decoded index: the prefix and what the session rebuilds from it.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub prefix: IndexedPrefix,
    pub table: Table,
    pub ops: Vec<(u64, String)>,
    pub checkpoint: Checkpoint,
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

/// The entries an index covers, read in place from its bytes.
#[derive(Debug)]
pub(crate) struct Table {
    bytes: Vec<u8>,
    entries: u32,
    rows_at: usize,
    ids_at: usize,
    slots_at: usize,
    /// Slots of the id table, minus one (a power of two, minus one).
    mask: u32,
    seed: u64,
    kinds: Vec<Option<EntryKind>>,
}

impl Table {
    pub fn len(&self) -> u32 {
        self.entries
    }

    fn row(&self, n: u32) -> &[u8] {
        let at = self.rows_at + n as usize * ROW;
        &self.bytes[at..at + ROW]
    }

    pub fn node(&self, n: u32) -> Node {
        let r = self.row(n);
        Node {
            seq: u64::from(le32(&r[0..4])),
            parent: le32(&r[4..8]).checked_sub(1),
            depth: le32(&r[8..12]),
            kind: self.kinds.get(r[17] as usize).copied().flatten(),
        }
    }

    /// The parent of entry `n` alone (a walk up the tree reads nothing else).
    pub fn parent(&self, n: u32) -> Option<u32> {
        let at = self.rows_at + n as usize * ROW + 4;
        le32(&self.bytes[at..at + 4]).checked_sub(1)
    }

    pub fn id(&self, n: u32) -> &str {
        let r = self.row(n);
        let at = self.ids_at + le32(&r[12..16]) as usize;
        // Checked at decode: in bounds, and only ASCII id characters.
        std::str::from_utf8(&self.bytes[at..at + r[16] as usize]).unwrap_or("")
    }

    /// The entry whose id is `id`, through the id table (linear probing).
    pub fn find(&self, id: &str) -> Option<u32> {
        let mut slot = id_hash(self.seed, id.as_bytes()) as u32 & self.mask;
        for _ in 0..=self.mask {
            let at = self.slots_at + slot as usize * 4;
            match le32(&self.bytes[at..at + 4]) {
                0 => return None,
                v if v <= self.entries && self.id(v - 1) == id => return Some(v - 1),
                _ => slot = (slot + 1) & self.mask,
            }
        }
        None
    }
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
/// large for the layout (more than `u32::MAX` records or id bytes).
pub(crate) fn encode(src: &Source<'_>) -> Option<Vec<u8>> {
    let records = src.offsets.len().saturating_sub(1);
    let entries = src.tree.len();
    u32::try_from(records).ok()?;
    let checkpoint = serde_json::to_vec(src.checkpoint).ok()?;
    let ids_len: usize = (0..entries as u32).map(|n| src.tree.id(n).len()).sum();
    let slots = (entries + entries / 2 + 1).next_power_of_two();
    let seed = hashbrown::DefaultHashBuilder::default().hash_one(records);
    let mut out = Vec::with_capacity(
        128 + records * 4 + entries * ROW + ids_len + slots * 4 + checkpoint.len(),
    );
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
    put_str(&mut out, src.session.as_str());
    out.extend_from_slice(&(records as u64).to_le_bytes());
    out.extend_from_slice(&src.offsets.last().copied().unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&src.last_line_crc.to_le_bytes());
    for n in [entries, ids_len, slots, src.ops.len(), checkpoint.len()] {
        out.extend_from_slice(&u32::try_from(n).ok()?.to_le_bytes());
    }
    out.extend_from_slice(&seed.to_le_bytes());
    out.push(EntryKind::ALL.len() as u8);
    for k in EntryKind::ALL {
        put_str(&mut out, k.name());
    }
    for w in src.offsets.windows(2) {
        out.extend_from_slice(&u32::try_from(w[1] - w[0]).ok()?.to_le_bytes());
    }
    let mut id_off = 0u32;
    for (n, node) in src.tree.iter() {
        let id = src.tree.id(n);
        out.extend_from_slice(&u32::try_from(node.seq).ok()?.to_le_bytes());
        out.extend_from_slice(&node.parent.map_or(0, |p| p + 1).to_le_bytes());
        out.extend_from_slice(&node.depth.to_le_bytes());
        out.extend_from_slice(&id_off.to_le_bytes());
        out.push(id.len() as u8);
        out.push(node.kind.map_or(UNKNOWN_KIND, |k| {
            EntryKind::ALL.iter().position(|&a| a == k).unwrap_or(0) as u8
        }));
        id_off += id.len() as u32;
    }
    for n in 0..entries as u32 {
        out.extend_from_slice(src.tree.id(n).as_bytes());
    }
    let mut table = vec![0u32; slots];
    let mask = slots as u32 - 1;
    for n in 0..entries as u32 {
        let mut slot = id_hash(seed, src.tree.id(n).as_bytes()) as u32 & mask;
        while table[slot as usize] != 0 {
            slot = (slot + 1) & mask;
        }
        table[slot as usize] = n + 1;
    }
    for v in table {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for (seq, kind) in src.ops {
        out.extend_from_slice(&u32::try_from(*seq).ok()?.to_le_bytes());
        put_str(&mut out, kind);
    }
    out.extend_from_slice(&checkpoint);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Some(out)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Kinds, ids and session ids are far shorter than 256 bytes; a longer
    // one is cut, which makes the index fail to decode and be rebuilt.
    let b = &s.as_bytes()[..s.len().min(255)];
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

/// Decodes an index for session `session`, or says why it cannot be used.
/// Checks everything an open relies on in O(records) integer work: the
/// sections add up, line lengths add up to the length covered, every row
/// names an earlier parent with a consistent depth and an id in bounds,
/// entries and operation records take every seq after the header exactly
/// once, and every id byte is an id character. (That ids are unique, and
/// where the id table puts them, was true of the tree the index was written
/// from; the checksum stands for it.)
pub(crate) fn decode(mut bytes: Vec<u8>, session: &SessionId) -> Result<Decoded, String> {
    let body_len = bytes
        .len()
        .checked_sub(4)
        .ok_or("it is shorter than its header")?;
    let crc = le32(&bytes[body_len..]);
    bytes.truncate(body_len);
    let mut r = Reader {
        bytes: &bytes,
        at: 0,
    };
    if r.take(8)? != MAGIC {
        return Err("it does not start with the index magic".into());
    }
    let version = r.u32()?;
    if version != INDEX_VERSION {
        return Err(format!(
            "it has layout version {version}, this build reads {INDEX_VERSION}"
        ));
    }
    if crc32c::crc32c(&bytes) != crc {
        return Err("its checksum does not match (damaged or cut short)".into());
    }
    if r.str()? != session.as_str() {
        return Err("it names another session".into());
    }
    let records = r.u64()?;
    let end = r.u64()?;
    let last_line_crc = r.u32()?;
    let entries = r.u32()?;
    let ids_len = r.u32()? as usize;
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

    let lens = r.take(records as usize * 4)?;
    let mut offsets = Vec::with_capacity(records as usize);
    let mut at = 0u64;
    for len in lens.chunks_exact(4) {
        offsets.push(at);
        at += u64::from(le32(len));
    }
    if at != end {
        return Err("its line lengths do not add up to the length it covers".into());
    }

    let rows_at = r.at;
    let rows = r.take(entries as usize * ROW)?;
    let ids_at = r.at;
    if !all_id_chars(r.take(ids_len)?) {
        return Err("it holds an id with a character ids may not have".into());
    }
    let depth_of = |p: usize| le32(&rows[p * ROW + 8..]);
    let seq_of = |e: usize| rows.get(e * ROW..).map(le32);
    let mut id_off = 0usize;
    for (n, row) in rows.chunks_exact(ROW).enumerate() {
        let (parent, depth) = (le32(&row[4..8]), le32(&row[8..12]));
        let (off, len, kind) = (le32(&row[12..16]) as usize, row[16] as usize, row[17]);
        let want_depth = match parent {
            0 => 0,
            p if (p as usize) <= n => depth_of(p as usize - 1) + 1,
            _ => return Err(format!("entry {n}'s parent is not before it")),
        };
        if depth != want_depth {
            return Err(format!("entry {n}'s depth is not its parent's plus one"));
        }
        if off != id_off || len == 0 || len > EntryId::MAX_LEN {
            return Err(format!("entry {n}'s id is out of place"));
        }
        if kind != UNKNOWN_KIND && kind as usize >= kinds.len() {
            return Err(format!("entry {n} has kind {kind}, which it does not name"));
        }
        id_off += len;
    }
    if id_off != ids_len {
        return Err("its ids do not fill their section".into());
    }
    let slots_at = r.at;
    r.take(slots as usize * 4)?;
    let mut ops = Vec::with_capacity(op_count as usize);
    for _ in 0..op_count {
        ops.push((r.u32()?, r.str()?.to_owned()));
    }
    // Entries and operation records, each in seq order, take every seq from
    // 1 to records - 1 exactly once.
    let (mut e, mut o, mut want) = (0usize, 0usize, 1u32);
    while e < entries as usize || o < ops.len() {
        if e < entries as usize && seq_of(e) == Some(want) {
            e += 1;
        } else if ops.get(o).map(|(s, _)| *s) == Some(want) {
            o += 1;
        } else {
            return Err(format!(
                "record {want} is neither an entry nor an operation record"
            ));
        }
        want += 1;
    }
    let checkpoint: Checkpoint = serde_json::from_slice(r.take(checkpoint_len)?)
        .map_err(|e| format!("its checkpoint does not decode ({e})"))?;
    if r.at != bytes.len() {
        return Err("it holds bytes after its checkpoint".into());
    }
    let ops = ops.into_iter().map(|(s, k)| (u64::from(s), k)).collect();
    Ok(Decoded {
        prefix: IndexedPrefix {
            offsets,
            end,
            last_line_crc,
        },
        table: Table {
            bytes,
            entries,
            rows_at,
            ids_at,
            slots_at,
            mask: slots - 1,
            seed,
            kinds,
        },
        ops,
        checkpoint,
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
        let checkpoint = Checkpoint::default();
        let bytes = encode(&Source {
            session: &session,
            tree: &tree,
            ops: &ops,
            offsets: &[0, 10, 25, 30, 42, 50],
            last_line_crc: 7,
            checkpoint: &Checkpoint {
                projection: None,
                ..checkpoint
            },
        })
        .expect("encodes");
        (session, bytes)
    }

    /// The rows start after the fixed header, the session id and the kind
    /// names, and the five line lengths.
    fn rows_at(session: &SessionId) -> usize {
        let names: usize = EntryKind::ALL.iter().map(|k| 1 + k.name().len()).sum();
        8 + 4 + 1 + session.as_str().len() + 8 + 8 + 4 + 5 * 4 + 8 + 1 + names + 5 * 4
    }

    /// Changes byte `at`, then seals the index again with a valid checksum:
    /// only the structural checks can refuse it.
    fn resealed(bytes: &[u8], at: usize, value: u8) -> Vec<u8> {
        let mut b = bytes.to_vec();
        b[at] = value;
        let body = b.len() - 4;
        let crc = crc32c::crc32c(&b[..body]);
        b[body..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn refusal(session: &SessionId, bytes: Vec<u8>) -> String {
        match decode(bytes, session) {
            Ok(_) => panic!("a bad index was accepted"),
            Err(why) => why,
        }
    }

    #[test]
    fn an_index_reads_back_as_the_tree_it_was_written_from() {
        let (session, bytes) = sample();
        let (decoded, with_projection) = match decode(bytes, &session) {
            Ok(d) => {
                let p = d.checkpoint.projection.is_some();
                (d, p)
            }
            Err(why) => panic!("{why}"),
        };
        assert!(!with_projection);
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
        assert_eq!(decoded.prefix.offsets, vec![0, 10, 25, 30, 42]);
        assert_eq!(decoded.prefix.end, 50);
    }

    #[test]
    fn a_sealed_index_with_a_parent_after_its_child_is_refused() {
        let (session, bytes) = sample();
        // Entry 0's parent field: 3 would be entry 2, after it.
        let at = rows_at(&session) + 4;
        let why = refusal(&session, resealed(&bytes, at, 3));
        assert!(why.contains("parent is not before it"), "{why}");
    }

    #[test]
    fn a_sealed_index_with_a_wrong_depth_is_refused() {
        let (session, bytes) = sample();
        let at = rows_at(&session) + ROW + 8;
        let why = refusal(&session, resealed(&bytes, at, 5));
        assert!(why.contains("depth"), "{why}");
    }

    #[test]
    fn a_sealed_index_with_an_id_character_ids_may_not_have_is_refused() {
        let (session, bytes) = sample();
        let ids_at = rows_at(&session) + 3 * ROW;
        let why = refusal(&session, resealed(&bytes, ids_at + 1, b'/'));
        assert!(why.contains("character"), "{why}");
    }

    #[test]
    fn a_sealed_index_whose_seqs_skip_a_record_is_refused() {
        let (session, bytes) = sample();
        // Entry 2's seq 4 becomes 5: record 4 is then nobody's.
        let at = rows_at(&session) + 2 * ROW;
        let why = refusal(&session, resealed(&bytes, at, 5));
        assert!(why.contains("record 4"), "{why}");
    }

    #[test]
    fn a_sealed_index_with_an_unnamed_kind_is_refused() {
        let (session, bytes) = sample();
        let at = rows_at(&session) + 17;
        let why = refusal(&session, resealed(&bytes, at, 40));
        assert!(why.contains("kind 40"), "{why}");
    }

    #[test]
    fn a_flipped_bit_anywhere_is_refused_by_the_checksum() {
        let (session, bytes) = sample();
        for at in 13..bytes.len() - 4 {
            let mut b = bytes.clone();
            b[at] ^= 0x10;
            let why = refusal(&session, b);
            assert!(why.contains("checksum"), "byte {at}: {why}");
        }
    }
}
