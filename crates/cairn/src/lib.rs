//! cairn: a durable session engine for AI agents.
//!
//! A session is an append-only log of records; the log is the single source
//! of truth and everything else — the messages the model sees, the app state,
//! the settings, the labels — is a pure function of it ([`Context`]).
//!
//! ```
//! use cairn::{Access, EntryBody, MemoryBackend, Message, NewSession, Role, Store};
//! use std::sync::Arc;
//!
//! let store = Store::with_backend(Arc::new(MemoryBackend::new()));
//! let session = store.create(NewSession::default())?;
//! let hello = session.append(EntryBody::Message(Message::text(Role::User, "hello")))?;
//! session.append(EntryBody::Message(Message::text(Role::Assistant, "hi!")))?;
//! // Rewind to the first message: the reply is no longer in the context,
//! // but it is still in the log and reachable by another checkout.
//! session.checkout(hello.id.as_ref(), None)?;
//! assert_eq!(session.context().messages().len(), 1);
//! drop(session);
//! let id = store.list()?[0].id.clone();
//! let again = store.open(&id, Access::Read)?;
//! assert_eq!(again.context().messages().len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Features: `schema` derives `utoipa::ToSchema` for the types the HTTP API
//! carries (`Message`, `Block`, `Verdict`, `Status`, `SessionSummary`, the
//! ids, …), so `cairn-view`'s OpenAPI shapes name the real types instead of
//! copies; `testkit` is the backend conformance suite and the tests' toolkit.
//! The default build has neither.

// Exhaustive matches: a new record kind (or any new variant) must be
// handled everywhere, never fall into a wildcard arm (ARCHITECTURE.md, invariant 12).
#![deny(clippy::wildcard_enum_match_arm)]

mod backend;
mod commit;
mod error;
pub mod frame;
pub mod fsck;
mod id;
mod ijson;
mod index;
mod input;
mod journal;
mod kind;
pub mod memory;
mod operation;
mod projection;
mod record;
mod recovery;
mod reference;
mod session;
mod source;
pub mod steps;
mod store;
mod summary;
#[cfg(feature = "testkit")]
#[allow(clippy::wildcard_enum_match_arm)] // test support: a wrong record kind is a failed check
pub mod testkit;
mod time;
mod tree;
pub mod vfs;
pub mod view;

pub use backend::{
    Access, Backend, Catalog, CatalogEntry, Claim, FileBackend, IndexBytes, IndexStore,
    IndexedOpen, IndexedPrefix, LineAt, LineReader, Log, MemoryBackend, OpenFrom, Opened, Opening,
    RawLine, Stamp, TornTail, Visitor,
};
pub use commit::{CommitStats, Durability, MAX_GATHER};
pub use error::{
    AppendError, Damage, Invalid, IoFailure, LookupError, OpenError, ReadError, StoreError,
    with_causes,
};
pub use id::{EntryId, InvalidId, SessionId};
pub use input::{InputError, InputParent, InputRecord, decode_input};
pub use journal::{
    NotStarted, OpPhase, OpenCall, PendingApproval, Status, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN,
    Verdict, args_hash, idempotency_key, unanswered_calls, verdict,
};
pub use kind::{DecodeError, EntryKind, OpKind, Payload, RecordKind, decode_data};
pub use operation::{ModelTicket, Operation, ToolOutput, ToolTicket};
pub use projection::{
    ActiveCompaction, Context, ContextMessage, Messages, MessagesIter, Source, apply_state,
    merge_patch,
};
pub use record::{
    AppStateChange, ApprovalRequested, ApprovalResolved, Block, Body, Checkout, Compaction, Custom,
    EffectClass, Entry, EntryBody, FORMAT_VERSION, ForkOrigin, Header, ImportOrigin, InputQueued,
    Label, Lineage, Message, ModelAttempted, OpFinished, OpRecord, OpStarted, Outcome, Record,
    ResultBlock, Role, SessionInfo, Settings, SpawnOrigin, ToolDispatched, Unknown, Usage,
    UsageSettled,
};
pub use recovery::{
    APPROVAL_INTERRUPTED, Action, ActionKind, DENIED_BY_PERSON, Decision, MAX_RECOVERY_ROUNDS,
    Pending, Policy, RecoveryError, RecoveryReport, Resolver, ToolRunner, recover, recover_with,
};
pub use reference::{child_reference, referenced_session};
pub use session::{
    Appended, ContextStream, NewEntry, NewSession, NodeInfo, OpenReport, Parent, Session, WRITER,
};
pub use store::{Store, locate_path, summary_of};
pub use summary::{FIRST_MESSAGE_CHARS, LastOperation, ListingFold, SessionSummary, excerpt};
pub use time::{format_millis, now_rfc3339, parse_millis};
