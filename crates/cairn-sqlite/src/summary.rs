//! The listing summary kept in the `sessions` row, folded from each line as
//! it is appended (in the append's transaction), so that listing, status and
//! counts are SQL over `sessions` and never read a payload back.
//!
//! The fold is the core's rule restated for one line at a time: the title
//! is the header's, then the last `session_info` title; the first message
//! is the first user message's text cut to 80 characters; the phase is
//! that of the last operation (`op_started` … `approval_requested` /
//! `approval_resolved` … `op_finished`). The conformance suite compares
//! every listed field with the core's [`cairn::summary_of`].

use cairn::Body;
use cairn::backend::Stamp;
use cairn::frame::{self, Class, Frame};
use cairn::journal::OpPhase;
use cairn::{EntryBody, OpRecord, Outcome, Role, SessionId, SessionSummary};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest first-message excerpt, as the core's listing cuts it.
const FIRST_MESSAGE_CHARS: usize = 80;

/// What the header says, fixed for the session's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderInfo {
    /// The header's `data`, as JSON text.
    pub json: String,
    pub created: String,
    pub forked_from: Option<String>,
    pub parent: Option<String>,
}

/// The state of the last operation needed for its phase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OpState {
    /// The last operation (`None`: none started yet).
    pub id: Option<String>,
    /// How it finished, once it has.
    pub finished: Option<Outcome>,
    /// Its calls awaiting approval.
    pub waiting: Vec<String>,
}

/// The summary columns of a `sessions` row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub title: Option<String>,
    pub first_message: Option<String>,
    pub entries: u64,
    pub records: u64,
    pub bytes: u64,
    pub updated: String,
    pub op: OpState,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// Reads what the listing needs from a header line, leniently: a header of
/// a newer format is stored all the same (the core refuses to open it).
pub(crate) fn header_info(line: &[u8]) -> Result<(HeaderInfo, Summary), String> {
    frame::check(line).map_err(|e| e.to_string())?;
    let f = Frame::parse(line).map_err(|e| e.to_string())?;
    if f.seq != 0 || f.kind != "header" {
        return Err("the first record of a session must be its header".into());
    }
    let data: Value = serde_json::from_str(f.data.get()).map_err(|e| e.to_string())?;
    let info = HeaderInfo {
        json: f.data.get().to_owned(),
        created: str_at(&data, &["created"]).unwrap_or(&f.ts).to_owned(),
        forked_from: str_at(&data, &["lineage", "forked_from", "session"]).map(str::to_owned),
        parent: str_at(&data, &["lineage", "parent", "session"]).map(str::to_owned),
    };
    let summary = Summary {
        title: str_at(&data, &["title"]).map(str::to_owned),
        records: 1,
        bytes: line.len() as u64,
        updated: f.ts.into_owned(),
        ..Summary::default()
    };
    Ok((info, summary))
}

impl Summary {
    /// Folds in one appended line (already parsed).
    pub fn apply(&mut self, f: &Frame<'_>, len: usize) {
        self.records += 1;
        self.bytes += len as u64;
        self.updated = f.ts.to_string();
        match f.class() {
            Ok(Class::Header) | Err(_) => {}
            Ok(Class::Entry) => {
                self.entries += 1;
                let wanted = match f.kind.as_ref() {
                    "message" => self.first_message.is_none(),
                    "session_info" => true,
                    _ => false,
                };
                if !wanted {
                    return;
                }
                if let Ok(Body::Entry(e)) = frame::decode_body(f) {
                    match e.body {
                        EntryBody::Message(m) if m.role == Role::User => {
                            self.first_message =
                                Some(cairn::excerpt(&m.plain_text(), FIRST_MESSAGE_CHARS));
                        }
                        EntryBody::SessionInfo(i) if i.title.is_some() => self.title = i.title,
                        _ => {}
                    }
                }
            }
            Ok(Class::Op) => {
                if let Ok(Body::Op(op)) = frame::decode_body(f) {
                    self.op.apply(&op);
                }
            }
        }
    }

    /// The phase of the last operation.
    pub fn phase(&self) -> OpPhase {
        match (&self.op.id, self.op.finished) {
            (None, _) => OpPhase::None,
            (Some(_), Some(o)) => OpPhase::Finished(o),
            (Some(_), None) if !self.op.waiting.is_empty() => OpPhase::AwaitingApproval,
            (Some(_), None) => OpPhase::Open,
        }
    }

    /// The listing summary, with the status a session has without a writer.
    pub fn to_listing(&self, id: SessionId, header: &HeaderInfo) -> SessionSummary {
        let parse = |s: &Option<String>| s.as_deref().and_then(|s| SessionId::parse(s).ok());
        SessionSummary {
            id,
            title: self.title.clone(),
            created: header.created.clone(),
            updated: self.updated.clone(),
            entries: self.entries,
            records: self.records,
            first_message: self.first_message.clone(),
            forked_from: parse(&header.forked_from),
            parent: parse(&header.parent),
            phase: self.phase(),
            status: self.phase().status(false),
        }
    }

    /// The stamp listing caches are validated with: bytes and records.
    pub fn stamp(&self) -> Stamp {
        Stamp {
            len: self.bytes,
            modified_ns: u128::from(self.records),
        }
    }
}

impl OpState {
    fn apply(&mut self, op: &OpRecord) {
        if let OpRecord::OpStarted(s) = op {
            *self = OpState {
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
}

/// Encodes the operation state for its column.
pub(crate) fn op_state_json(op: &OpState) -> String {
    serde_json::to_string(op).unwrap_or_else(|_| "{}".into())
}

/// Decodes the operation state column (an unreadable one is "no operation").
pub(crate) fn op_state_from(json: &str) -> OpState {
    serde_json::from_str(json).unwrap_or_default()
}

/// Encodes a phase for its column.
pub(crate) fn phase_json(p: OpPhase) -> String {
    serde_json::to_string(&p).unwrap_or_else(|_| "\"none\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(json: &str) -> OpRecord {
        let line = {
            let mut l = format!(r#"{{"seq":1,"ts":"t","kind":{json}"#).into_bytes();
            frame::seal(&mut l);
            l
        };
        match frame::decode_line(&line) {
            Ok((_, _, Body::Op(op))) => op,
            other => panic!("not an op record: {other:?}"),
        }
    }

    #[test]
    fn a_later_approval_request_for_the_same_call_waits_again() {
        let mut s = OpState::default();
        s.apply(&op(r#""op_started","data":{"op":"o","input":null}"#));
        let req = op(r#""approval_requested","data":{"op":"o","call_id":"c","tool":"t"}"#);
        s.apply(&req);
        s.apply(&op(
            r#""approval_resolved","data":{"op":"o","call_id":"c","approved":true,"by":null}"#,
        ));
        assert!(s.waiting.is_empty());
        s.apply(&req);
        assert_eq!(s.waiting, vec!["c".to_owned()]);
    }

    #[test]
    fn records_of_another_operation_do_not_change_the_phase() {
        let mut s = OpState::default();
        s.apply(&op(r#""op_started","data":{"op":"o2","input":null}"#));
        s.apply(&op(
            r#""op_finished","data":{"op":"o1","outcome":"completed"}"#,
        ));
        assert_eq!(s.finished, None);
        s.apply(&op(
            r#""op_finished","data":{"op":"o2","outcome":"failed"}"#,
        ));
        assert_eq!(s.finished, Some(Outcome::Failed));
    }
}
