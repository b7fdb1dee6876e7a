//! cairn-sqlite: a [`cairn::Backend`] that keeps many sessions in one SQLite
//! database, with the same records and the same guarantees as session
//! files. The log stays the truth: each record is stored as the exact line a
//! session file would hold (JSON, `seq`, CRC-32C trailer, newline), so a
//! session copies between files and SQLite byte for byte (`cairn_stores::copy_store`).
//!
//! - **Durability.** WAL mode with `synchronous=FULL`: every append is one
//!   transaction whose commit syncs the WAL before it returns (with
//!   `NORMAL`, WAL mode syncs only at checkpoints, and a committed
//!   transaction can be lost on power loss). So every durability mode is as
//!   durable as `Sync`, and [`cairn::Log::sync`] has nothing to do.
//! - **No torn tails.** A crash mid-append rolls the transaction back: a
//!   record is stored whole or not at all. A stored line whose checksum no
//!   longer verifies, or a missing `seq`, is damage, reported with its line.
//! - **One writer per session**, across processes, by a lease row with a
//!   fencing token checked in every append transaction ([`lease`]). A
//!   second writer gets the same [`cairn::OpenError::InUse`] as with files;
//!   a writer whose lease was taken over cannot append.
//! - **Listing by SQL.** Each append transaction also stores the session's
//!   listing summary: its counts and time on the append's last record (in
//!   columns before the payload), its title, first message and last
//!   operation's phase in the session's row when they change. So listing,
//!   stamps and status never read a payload ([`SqliteBackend::summaries`];
//!   the core's `Store::list` gets the same rows as its catalog).
//!
//! ```
//! # let dir = tempfile::tempdir()?;
//! use std::sync::Arc;
//! use cairn::{Access, EntryBody, Message, NewSession, Role, Store};
//! use cairn_sqlite::SqliteBackend;
//!
//! let store = Store::with_backend(Arc::new(SqliteBackend::open(dir.path().join("cairn.db"))?));
//! let s = store.create(NewSession { title: Some("demo".into()), ..NewSession::default() })?;
//! s.append(EntryBody::Message(Message::text(Role::User, "hello")))?;
//! let id = s.id().clone();
//! drop(s);
//! let again = store.open(&id, Access::Write)?;
//! assert_eq!(again.context().messages().len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The schema, the lease rule and the crash analysis are in the crate's
//! `README.md`.

mod backend;
mod error;
mod index;
pub mod lease;
mod log;
mod queries;
mod schema;

pub use backend::SqliteBackend;
pub use cairn_sql::{Holder, Lease, Liveness, Takeover};
pub use error::SqliteError;
pub use schema::{APPLICATION_ID, BUSY_TIMEOUT, SCHEMA_VERSION};
