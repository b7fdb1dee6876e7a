//! The content-addressed blob store of a cairn store: bytes too large for a
//! record (long tool output, the workspace snapshots of `cairn-workspace`,
//! traces) kept once each, by their SHA-256, zstd-compressed, in one
//! directory ([`BlobStore`]). Which directory belongs to which store is the
//! caller's rule (`cairn_stores::blob_dir`); this crate takes a directory and
//! links no database driver.
//!
//! A blob is durable before any record names it ([`BlobStore::put`]), is
//! read back verified against its digest ([`BlobStore::get`]), and is
//! removed by [`BlobStore::gc`] only when no record references it, safely
//! while writers run. [`syncfs`] says when one `syncfs(2)` persists what an
//! `fdatasync` of each file would.
//!
//! ```
//! # let dir = tempfile::tempdir()?;
//! use cairn_blobs::BlobStore;
//!
//! let blobs = BlobStore::new(dir.path().join("blobs"));
//! let r = blobs.put(b"a long tool output")?;
//! assert_eq!(blobs.get(&r.sha256)?, b"a long tool output");
//! assert_eq!(blobs.get_uri(&r.uri())?, b"a long tool output");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use digest::{digest, digest_of, hex, valid_digest};
pub use gc::{DEFAULT_GRACE, GcReport};
pub use store::{BlobError, BlobRef, BlobStore, LEVEL, URI_PREFIX, sync_dir, uri};

pub mod syncfs;

mod digest;
mod gc;
mod store;
