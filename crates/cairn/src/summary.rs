//! What a listing shows of a session: [`SessionSummary`], and the excerpt
//! rule that cuts the first user message (and step texts) for display.

use serde::{Deserialize, Serialize};

use crate::id::SessionId;
use crate::journal::{OpPhase, Status};

/// What a listing shows of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The session.
    pub id: SessionId,
    /// Its title, if any.
    pub title: Option<String>,
    /// When it was created.
    pub created: String,
    /// When its last record was written.
    pub updated: String,
    /// Number of entries.
    pub entries: u64,
    /// Number of records, header included.
    pub records: u64,
    /// The first user message, cut to 80 characters.
    pub first_message: Option<String>,
    /// The session it was forked from, if any.
    pub forked_from: Option<SessionId>,
    /// The session it was spawned by, if it is a subagent.
    #[serde(default)]
    pub parent: Option<SessionId>,
    /// The log-derived state of its last operation.
    pub phase: OpPhase,
    /// Its status: the phase, and whether a writer holds it right now.
    pub status: Status,
}

/// Longest first-message excerpt in a summary, in characters.
pub const FIRST_MESSAGE_CHARS: usize = 80;

/// `text` with every run of whitespace (newlines included) collapsed to one
/// space, cut to `max` characters (with `…` when cut).
pub fn excerpt(text: &str, max: usize) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= max {
        return collapsed;
    }
    let mut out: String = collapsed.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}
