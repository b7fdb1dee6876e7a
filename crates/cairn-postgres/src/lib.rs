//! cairn-postgres: a [`cairn::Backend`] that keeps many sessions in one
//! PostgreSQL schema, for a fleet of agent workers on many hosts, with the
//! same records and the same guarantees as session files. The log stays the
//! truth: each record is stored as the exact line a session file would hold
//! (JSON, `seq`, CRC-32C trailer, newline), so sessions copy between files,
//! SQLite and Postgres byte for byte.
//!
//! - **Durability.** An append is one statement — one transaction — that
//!   commits before it returns, with `synchronous_commit = on` (set on
//!   every connection cairn makes): the commit's WAL record is flushed to
//!   disk first. Every durability mode is as durable as `Sync`, and
//!   [`cairn::Log::sync`] has nothing to do. If an operator turns
//!   `synchronous_commit` off where cairn's `SET` does not reach (a pooler
//!   that drops it, or `ALTER ROLE` after connecting), a commit is
//!   acknowledged before its WAL is flushed: a server crash (not a clean
//!   restart) then loses the last commits of up to three times
//!   `wal_writer_delay` — whole appends, newest first, never a torn record
//!   or a gap — and a tool that ran after a lost `tool_dispatched` may run
//!   again on recovery (its idempotency key is the guard).
//!   [`PostgresBackend::synchronous_commit`] reports the setting in force.
//! - **One writer per session, fenced.** A lease in the session's row,
//!   timed by the server's clock, with a fencing token that every append
//!   checks in its own statement ([`lease`]). A worker that lost its lease
//!   has every later append refused and its handle poisoned: never a fork,
//!   never interleaved `seq`s (the `(session, seq)` primary key guards that
//!   too). No session-level advisory locks and no named prepared
//!   statements, so it runs behind PgBouncer's transaction pooling.
//! - **Faults.** A dropped connection or a server restart mid-append gives
//!   an error naming it and a poisoned handle; nothing acknowledged is lost
//!   (an append either committed or did not); the next open connects anew.
//! - **Fleets.** [`PostgresBackend::claim`] (the core's
//!   [`cairn::Backend::claim_interrupted`]) hands each worker a
//!   different interrupted session (`FOR UPDATE SKIP LOCKED`) with its lease
//!   taken; readers follow new records by polling one indexed range
//!   ([`PostgresBackend::records_since`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use cairn::{Access, EntryBody, Message, NewSession, Role, Store};
//! use cairn_postgres::PostgresBackend;
//!
//! let store = Store::with_backend(Arc::new(PostgresBackend::open(
//!     "postgres://postgres@127.0.0.1/test",
//! )?));
//! let s = store.create(NewSession { title: Some("demo".into()), ..NewSession::default() })?;
//! s.append(EntryBody::Message(Message::text(Role::User, "hello")))?;
//! let id = s.id().clone();
//! drop(s);
//! let again = store.open(&id, Access::Write)?;
//! assert_eq!(again.context().messages().len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The schema, the lease protocol and the fault analysis are in the crate's
//! `README.md` and in `docs/STORES.md` §3.

mod backend;
mod config;
mod error;
mod index;
pub mod lease;
mod log;
mod pool;
mod queries;
mod schema;
pub mod scratch;
mod shared;

pub use backend::PostgresBackend;
pub use cairn_sql::{Lease, Takeover};
pub use config::{DEFAULT_LEASE, DEFAULT_SCHEMA, PgUrl, hide_password, is_postgres_url};
pub use error::PgError;
pub use postgres::config::Host;
pub use schema::SCHEMA_VERSION;
