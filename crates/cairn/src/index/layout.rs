//! The index's layout constants (`docs/STORES.md` §4) and the small
//! byte helpers its encoder, decoder and tables share.

/// The first bytes of every index.
pub(super) const MAGIC: &[u8; 8] = b"cairnidx";
/// The version of the index layout this build writes and reads.
pub(crate) const INDEX_VERSION: u32 = 3;

/// Records an open must have parsed beyond the index (or in all, without
/// one) before a writer saves a new index, and records appended beyond the
/// index before a closing writer saves one: below this, parsing the lines
/// costs about as much as reading an index.
pub(crate) const INDEX_AFTER_RECORDS: u64 = 1024;

/// Line lengths per length block (4 KiB).
pub(super) const LEN_BLOCK: u64 = 1024;
/// Entry rows per row block (4 KiB of rows, then their ids).
pub(super) const ROW_BLOCK: u32 = 256;
/// Id-table slots per slot block (4 KiB).
pub(super) const SLOT_BLOCK: u32 = 512;
/// Bytes of one id-table slot: 1 + the entry number (0: empty), and the
/// high 32 bits of the id's hash (so that a lookup reads the row of the
/// entry it finds, not of every entry it probes).
pub(super) const SLOT: usize = 8;
/// Bytes of one entry's row: seq u32, parent u32 (0 for a root, else 1 +
/// the parent's entry number), depth u32, id offset u16 (in its block's
/// ids), id length u8, kind u8 (a position in the index's kind names; 255:
/// an ignorable kind this version does not know).
pub(super) const ROW: usize = 16;
/// The kind byte of an entry of an unknown ignorable kind.
pub(super) const UNKNOWN_KIND: u8 = 255;
/// Magic, version and head length.
pub(super) const PREAMBLE: usize = 16;

pub(super) fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// The hash of an id in the id table, under the index's seed.
pub(super) fn id_hash(seed: u64, id: &[u8]) -> u64 {
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
