//! Encoding an index (`docs/STORES.md` §4): the head, then the
//! length, row and slot blocks, each block's CRC-32C in the head's
//! directory.

use std::hash::BuildHasher;

use super::decode::Checkpoint;
use super::layout::{
    INDEX_VERSION, LEN_BLOCK, MAGIC, PREAMBLE, ROW, ROW_BLOCK, SLOT, SLOT_BLOCK, UNKNOWN_KIND,
    id_hash,
};
use crate::id::SessionId;
use crate::kind::EntryKind;
use crate::tree::Tree;

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
