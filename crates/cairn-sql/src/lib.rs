//! cairn-sql: what cairn's SQL backends (`cairn-sqlite`, `cairn-postgres`)
//! share whatever the database, so that each rule is written once:
//!
//! - [`SqlLog`], the core's [`cairn::Log`] over a [`Db`] — each line
//!   verified and parsed once for its columns and the listing summary, the
//!   append one fenced transaction of the database's, a failed or refused
//!   append poisoning the handle, reads through a read-ahead window;
//! - [`Scan`], an open's scan of a session's rows (checksums, `seq`
//!   continuity, the visitor, the last lines kept for the reads that follow);
//! - [`summary`], the listing summary kept in each session's row;
//! - [`open_from`], the open path (lease, summary, scan, the lease given
//!   back on a stale index or a failure) over a backend's [`SqlStore`];
//! - [`Lease`] and its takeover rule ([`Lease::holds`], [`Takeover`]);
//!   [`Holder`], who holds a writer lease and whether it still runs.
//!
//! It knows no SQL dialect and links no database driver.

mod holder;
mod index;
mod lease;
mod log;
mod open;
mod scan;
pub mod summary;

pub use holder::{Holder, Liveness};
pub use index::LoadedIndex;
pub use lease::{Lease, Takeover};
pub use log::{
    Batch, Db, Fence, NewRow, Poisoner, READ_AHEAD_BYTES, READ_AHEAD_MAX, SqlLog, Writer,
};
pub use open::{SqlStore, open, open_from};
pub use scan::{KEEP_BYTES, Scan, Scanned, damaged, stale_prefix};
