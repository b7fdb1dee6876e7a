//! Sessions long enough to have a persisted index, and damage placed in one
//! of its blocks: what the index tests of every backend share.

use crate::Store;
use crate::id::{EntryId, SessionId};
use crate::record::{Compaction, EntryBody};
use crate::session::NewSession;

use super::build::user;
use super::util::OrFail;

/// A session of `messages` user messages then a compaction keeping those
/// from `keep_from` on, appended by one writer (which saves the index when
/// it closes): its id and its messages' entry ids.
pub fn compacted_session(
    store: &Store,
    messages: usize,
    keep_from: usize,
) -> (SessionId, Vec<EntryId>) {
    let s = store.create(NewSession::default()).or_fail("create");
    s.set_durability(crate::Durability::Buffered);
    let ids: Vec<EntryId> = (0..messages)
        .map(|i| {
            s.append(user(&format!("question {i}")))
                .or_fail("append")
                .id
                .or_fail("an entry id")
        })
        .collect();
    s.append(EntryBody::Compaction(Compaction {
        summary: "so far".into(),
        first_kept: Some(ids[keep_from].clone()),
        tokens_before: None,
    }))
    .or_fail("compact");
    s.sync().or_fail("sync");
    (s.id().clone(), ids)
}

/// Where row block `k` of an index (layout 3, `docs/STORES.md` §4) starts,
/// for a session whose entry ids all have one length: after the preamble,
/// the head and the line lengths, each row block is 256 rows of 16 bytes
/// and their ids.
pub fn row_block_at(idx: &[u8], k: usize) -> usize {
    let u32_at =
        |at: usize| u32::from_le_bytes(idx[at..at + 4].try_into().or_fail("4 bytes")) as usize;
    let head = 16 + 1 + usize::from(idx[16]); // the preamble, then the session id
    let records = u32_at(head);
    // After the session id: records (u64), end (u64), the last line's CRC,
    // entries, slots (u32 each).
    let entries = u32_at(head + 8 + 8 + 4);
    let slots = u32_at(head + 8 + 8 + 4 + 4);
    let rows_at = 16 + u32_at(12) + records * 4;
    let slots_at = idx.len() - slots * 8;
    let id_len = (slots_at - rows_at - entries * 16) / entries;
    assert_eq!(
        rows_at + entries * (16 + id_len),
        slots_at,
        "entry ids of one length"
    );
    rows_at + k * 256 * (16 + id_len)
}
