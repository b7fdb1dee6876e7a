//! The schemas of the API's wire forms that no core type derives: a
//! stored record as history answers it, an input record, and the
//! durability name. The core's other types (`cairn::Message`,
//! `cairn::Verdict`, `cairn::SessionSummary`, …) describe themselves under
//! its `schema` feature, which this crate enables; these three have no
//! `serde` form in the core to derive from (a record is encoded by hand, an
//! input record is parsed by hand, a durability is named by the API). The
//! server's conformance test checks real answers against them.

use utoipa::ToSchema;

/// A stored record as history answers it: the line's fields without the
/// checksum (docs/FORMAT.md).
#[derive(ToSchema)]
pub struct Record {
    /// Its position in the log.
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    pub seq: u64,
    /// When it was written (RFC 3339).
    pub ts: String,
    /// Its kind.
    pub kind: String,
    /// Whether a reader that does not know the kind may skip it.
    pub ignorable: Option<bool>,
    /// The entry's id (entries only).
    pub id: Option<String>,
    /// The entry's parent (entries only).
    pub parent: Option<String>,
    /// The kind's payload.
    pub data: serde_json::Value,
}

/// One input record: what `cairn append` reads, one per line.
#[derive(ToSchema)]
pub struct InputRecord {
    /// An entry kind (message, app_state, settings, compaction, checkout,
    /// label, session_info, custom) or an operation kind; a kind of your own
    /// needs `ignorable`.
    pub kind: String,
    /// The kind's payload (docs/FORMAT.md).
    pub data: serde_json::Value,
    /// The entry's id (generated when left out).
    pub id: Option<String>,
    /// The parent: an entry, or null for a new root (the leaf when left out).
    pub parent: Option<String>,
    /// Whether a reader that does not know the kind may skip it.
    pub ignorable: Option<bool>,
}

/// How a batch is made durable before it is acknowledged.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Durability {
    /// Each record synced (the default).
    Sync,
    /// The batch written, then synced once.
    Group,
    /// Handed to the OS, not synced.
    Buffered,
}
