//! The persisted index of a session (`docs/FORMAT.md`, "Index"): a cache
//! derived from the log, never a second source of truth. Per record its line
//! length (so its offset), its class, kind, and for entries the id and the
//! parent's node number; plus the log length it covers and the CRC-32C of
//! the last line it covers, by which an open checks it still describes the
//! log. An open that trusts it skips parsing the indexed lines (it verifies
//! only the lines after them) and builds the tree from it; every record the
//! context reads is still read from the log and its checksum verified.
//!
//! Encoding and decoding live here; where the bytes are kept is the
//! backend's business ([`IndexStore::load_index`](crate::IndexStore::load_index)).

use crate::id::{EntryId, SessionId};
use crate::kind::EntryKind;
use crate::tree::Tree;

/// The first bytes of every index.
const MAGIC: &[u8; 8] = b"cairnidx";
/// The version of the index layout this build writes and reads.
pub(crate) const INDEX_VERSION: u32 = 1;

/// Records an open must have parsed beyond the index (or in all, without
/// one) before a writer saves a new index, and records appended beyond the
/// index before a closing writer saves one: below this, parsing the lines
/// costs about as much as reading an index.
pub(crate) const INDEX_AFTER_RECORDS: u64 = 1024;

/// Record classes as stored.
const HEADER: u8 = 0;
const ENTRY: u8 = 1;
const OP: u8 = 2;

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

/// A decoded index: the prefix and what the session rebuilds from it.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub prefix: IndexedPrefix,
    pub tree: Tree,
    pub ops: Vec<(u64, String)>,
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
}

/// Encodes an index of the records whose offsets `src.offsets` lists (one
/// more offset than records: the end).
pub(crate) fn encode(src: &Source<'_>) -> Vec<u8> {
    let records = src.offsets.len().saturating_sub(1);
    let mut out = Vec::with_capacity(64 + records * 24);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
    put_str(&mut out, src.session.as_str());
    out.extend_from_slice(&(records as u64).to_le_bytes());
    out.extend_from_slice(&src.offsets.last().copied().unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&src.last_line_crc.to_le_bytes());
    let nodes = src.tree.nodes();
    let (mut node, mut op) = (0usize, 0usize);
    for seq in 0..records {
        let len = src.offsets[seq + 1] - src.offsets[seq];
        out.extend_from_slice(&(len as u32).to_le_bytes());
        match (nodes.get(node), src.ops.get(op)) {
            (Some(n), _) if n.seq == seq as u64 => {
                out.push(ENTRY);
                put_str(&mut out, n.kind.map_or("", EntryKind::name));
                put_str(&mut out, n.id.as_str());
                out.extend_from_slice(&n.parent.map_or(0, |p| p + 1).to_le_bytes());
                node += 1;
            }
            (_, Some((s, kind))) if *s == seq as u64 => {
                out.push(OP);
                put_str(&mut out, kind);
                op += 1;
            }
            _ => out.push(HEADER),
        }
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Kinds, ids and session ids are far shorter than 256 bytes; a longer
    // one is cut, which makes the index fail to decode and be rebuilt.
    let b = &s.as_bytes()[..s.len().min(255)];
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

/// Decodes an index for session `session`, or says why it cannot be used.
pub(crate) fn decode(bytes: &[u8], session: &SessionId) -> Result<Decoded, String> {
    let body_len = bytes
        .len()
        .checked_sub(4)
        .ok_or("it is shorter than its header")?;
    let (body, crc) = bytes.split_at(body_len);
    let mut r = Reader { bytes: body, at: 0 };
    if r.take(8)? != MAGIC {
        return Err("it does not start with the index magic".into());
    }
    let version = r.u32()?;
    if version != INDEX_VERSION {
        return Err(format!(
            "it has layout version {version}, this build reads {INDEX_VERSION}"
        ));
    }
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err("its checksum does not match (damaged or cut short)".into());
    }
    if r.str()? != session.as_str() {
        return Err("it names another session".into());
    }
    let records = r.u64()?;
    let end = r.u64()?;
    let last_line_crc = r.u32()?;
    let cap = usize::try_from(records)
        .map_err(|_| "its record count is too large")?
        .min(body.len());
    let mut offsets = Vec::with_capacity(cap);
    let mut tree = Tree::default();
    tree.reserve(cap);
    let mut ops = Vec::new();
    let mut at = 0u64;
    for seq in 0..records {
        offsets.push(at);
        at += u64::from(r.u32()?);
        match r.u8()? {
            HEADER if seq == 0 => {}
            ENTRY if seq > 0 => {
                let kind = r.str()?;
                let kind = EntryKind::from_name(kind);
                let id = EntryId::parse(r.str()?).map_err(|e| e.to_string())?;
                let parent = match r.u32()? {
                    0 => None,
                    p if (p as usize) <= tree.len() => Some(p - 1),
                    _ => return Err(format!("record {seq}'s parent is not before it")),
                };
                if tree.get(&id).is_some() {
                    return Err(format!("entry id {id} appears twice"));
                }
                tree.insert_checked(seq, id, parent, kind);
            }
            OP if seq > 0 => ops.push((seq, r.str()?.to_owned())),
            class => return Err(format!("record {seq} has class {class} at that position")),
        }
    }
    if r.at != body.len() {
        return Err("it holds bytes after its last record".into());
    }
    if at != end || records == 0 {
        return Err("its line lengths do not add up to the length it covers".into());
    }
    Ok(Decoded {
        prefix: IndexedPrefix {
            offsets,
            end,
            last_line_crc,
        },
        tree,
        ops,
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
            .get(self.at..self.at + n)
            .ok_or("it ends in the middle of a record")?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
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
