//! What a listing shows of a session: [`SessionSummary`]; its rules as a
//! per-record fold ([`ListingFold`]) that every backend shares; and the excerpt rule that cuts the first
//! user message (and step texts) for display.

use serde::{Deserialize, Serialize};

use crate::frame::{Class, Frame, decode_body};
use crate::id::SessionId;
use crate::journal::{OpPhase, Status};
use crate::kind::EntryKind;
use crate::projection::fold_title;
use crate::record::{Body, EntryBody, Message, OpRecord, Outcome, Role};

/// What a listing shows of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
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

/// The listing summary as a fold of a session's records, one line at a
/// time: what a backend that keeps summaries beside its records (SQLite)
/// updates in each append. [`crate::summary_of`] gives the same summary
/// for an open session, with the same rules ([`ListingFold::first_message`],
/// the title fold of the session, and [`LastOperation`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListingFold {
    /// The title: the header's, then the latest `session_info` title.
    pub title: Option<String>,
    /// The first user message, cut to [`FIRST_MESSAGE_CHARS`].
    pub first_message: Option<String>,
    /// Entries so far.
    pub entries: u64,
    /// Records so far, header included.
    pub records: u64,
    /// The time of the last record.
    pub updated: String,
    /// What the phase of the last operation needs.
    pub op: LastOperation,
}

/// The state of a session's last operation that its phase needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastOperation {
    /// The last operation started (`None`: none yet).
    pub id: Option<String>,
    /// How it finished, once it has.
    pub finished: Option<Outcome>,
    /// Its calls awaiting approval.
    pub waiting: Vec<String>,
}

impl ListingFold {
    /// The fold after the header record: its title and time.
    pub fn new(title: Option<String>, ts: &str) -> ListingFold {
        ListingFold {
            title,
            records: 1,
            updated: ts.to_owned(),
            ..ListingFold::default()
        }
    }

    /// The first-message excerpt a message gives, if it is a user message.
    pub fn first_message(m: &Message) -> Option<String> {
        (m.role == Role::User).then(|| excerpt(&m.plain_text(), FIRST_MESSAGE_CHARS))
    }

    /// Folds in one record after the header, given by its parsed frame;
    /// only what the summary needs is decoded (the first user message, titles
    /// and operation records). A record that does not decode counts but
    /// changes nothing else.
    pub fn apply(&mut self, f: &Frame<'_>) {
        self.records += 1;
        self.updated = f.ts.to_string();
        let Ok(class) = f.class() else { return };
        let wanted = match class {
            Class::Header => false,
            Class::Entry => {
                self.entries += 1;
                match EntryKind::from_name(&f.kind) {
                    Some(EntryKind::Message) => self.first_message.is_none(),
                    Some(EntryKind::SessionInfo) => true,
                    Some(
                        EntryKind::AppState
                        | EntryKind::Compaction
                        | EntryKind::Checkout
                        | EntryKind::Settings
                        | EntryKind::Label
                        | EntryKind::Custom,
                    )
                    | None => false,
                }
            }
            Class::Op => true,
        };
        if !wanted {
            return;
        }
        match decode_body(f) {
            Ok(Body::Entry(e)) => match &e.body {
                EntryBody::Message(m) => {
                    if self.first_message.is_none() {
                        self.first_message = ListingFold::first_message(m);
                    }
                }
                EntryBody::SessionInfo(i) => fold_title(&mut self.title, i),
                EntryBody::AppState(_)
                | EntryBody::Compaction(_)
                | EntryBody::Checkout(_)
                | EntryBody::Settings(_)
                | EntryBody::Label(_)
                | EntryBody::Custom(_)
                | EntryBody::Ignored(_) => {}
            },
            Ok(Body::Op(op)) => self.op.apply(&op),
            Ok(Body::Header(_)) | Err(_) => {}
        }
    }

    /// The listing summary of session `id`, whose header gave `created`
    /// and the sessions it was forked from and spawned by;
    /// `writer_active` tells Running from Interrupted.
    pub fn summary(
        &self,
        id: SessionId,
        created: String,
        forked_from: Option<SessionId>,
        parent: Option<SessionId>,
        writer_active: bool,
    ) -> SessionSummary {
        let phase = self.op.phase();
        SessionSummary {
            id,
            title: self.title.clone(),
            created,
            updated: self.updated.clone(),
            entries: self.entries,
            records: self.records,
            first_message: self.first_message.clone(),
            forked_from,
            parent,
            phase,
            status: phase.status(writer_active),
        }
    }
}

impl LastOperation {
    /// Folds in one operation-journal record: `op_started` begins a new
    /// operation; approvals and `op_finished` of that operation change it.
    pub fn apply(&mut self, op: &OpRecord) {
        if let OpRecord::OpStarted(s) = op {
            *self = LastOperation {
                id: Some(s.op.clone()),
                finished: None,
                waiting: Vec::new(),
            };
            return;
        }
        let Some(id) = &self.id else { return };
        match op {
            OpRecord::ApprovalRequested(a) if &a.op == id => {
                self.waiting.retain(|c| c != &a.call_id);
                self.waiting.push(a.call_id.clone());
            }
            OpRecord::ApprovalResolved(a) if &a.op == id => {
                self.waiting.retain(|c| c != &a.call_id);
            }
            OpRecord::OpFinished(f) if &f.op == id => self.finished = Some(f.outcome),
            OpRecord::OpStarted(_)
            | OpRecord::ModelAttempted(_)
            | OpRecord::UsageSettled(_)
            | OpRecord::ApprovalRequested(_)
            | OpRecord::ApprovalResolved(_)
            | OpRecord::ToolDispatched(_)
            | OpRecord::InputQueued(_)
            | OpRecord::OpFinished(_)
            | OpRecord::Ignored(_) => {}
        }
    }

    /// The phase of the last operation.
    pub fn phase(&self) -> OpPhase {
        match (&self.id, self.finished) {
            (None, _) => OpPhase::None,
            (Some(_), Some(o)) => OpPhase::Finished(o),
            (Some(_), None) if !self.waiting.is_empty() => OpPhase::AwaitingApproval,
            (Some(_), None) => OpPhase::Open,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ApprovalRequested, ApprovalResolved, OpFinished, OpStarted};

    fn started(op: &str) -> OpRecord {
        OpRecord::OpStarted(OpStarted {
            op: op.into(),
            input: None,
        })
    }

    fn finished(op: &str, outcome: Outcome) -> OpRecord {
        OpRecord::OpFinished(OpFinished {
            op: op.into(),
            outcome,
            error: None,
        })
    }

    #[test]
    fn a_later_approval_request_for_the_same_call_waits_again() {
        let mut s = LastOperation::default();
        s.apply(&started("o"));
        let req = OpRecord::ApprovalRequested(ApprovalRequested {
            op: "o".into(),
            call_id: "c".into(),
            tool: "t".into(),
        });
        s.apply(&req);
        s.apply(&OpRecord::ApprovalResolved(ApprovalResolved {
            op: "o".into(),
            call_id: "c".into(),
            approved: true,
            by: None,
        }));
        assert!(s.waiting.is_empty());
        s.apply(&req);
        assert_eq!(s.waiting, vec!["c".to_owned()]);
        assert_eq!(s.phase(), OpPhase::AwaitingApproval);
    }

    #[test]
    fn records_of_another_operation_do_not_change_the_phase() {
        let mut s = LastOperation::default();
        s.apply(&started("o2"));
        s.apply(&finished("o1", Outcome::Completed));
        assert_eq!(s.phase(), OpPhase::Open);
        s.apply(&finished("o2", Outcome::Failed));
        assert_eq!(s.phase(), OpPhase::Finished(Outcome::Failed));
    }
}
