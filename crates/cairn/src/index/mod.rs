//! The persisted index of a session (`docs/STORES.md` §4): a cache
//! derived from the log, never a second source of truth. A head (the
//! prefix it covers, the operation records, a checkpoint of the
//! session-wide folds and of the projection at the last indexed entry, and
//! a directory of the blocks with each block's checksum), then fixed-size
//! blocks: line lengths, entry rows with their ids, and the hashed id
//! table. An open reads and checks the head only; a block is read, its
//! checksum and structure checked, when something in it is first needed,
//! so an open costs O(what it reads), not O(entries). A block that does
//! not verify is reported (the index's shared damage) and never used: the
//! open then reads the log instead. Every record the context reads is still
//! read from the log and its checksum verified.
//!
//! By job: `layout.rs` (constants), `blocks.rs` (the bytes and their
//! checksummed blocks), `table.rs` (entries and lines read in place),
//! `encode.rs`, `decode.rs` (the head). Where the bytes are kept is the
//! backend's business ([`IndexStore::open_index`](crate::IndexStore::open_index)).

mod blocks;
mod decode;
mod encode;
mod layout;
mod table;
#[cfg(test)]
mod tests;

pub use blocks::IndexBytes;
pub(crate) use decode::{Checkpoint, Decoded, decode};
pub(crate) use encode::{Source, encode};
pub(crate) use layout::INDEX_AFTER_RECORDS;
pub use table::IndexedPrefix;
pub(crate) use table::{LineTable, Node, Table};
