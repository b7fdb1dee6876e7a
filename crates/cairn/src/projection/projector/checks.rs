//! The checks an entry must pass against the projection before it is
//! appended: a message's tool calls are new and its results answer an open
//! call once; a compaction's kept range starts on the branch and splits no
//! tool call from its result.

use super::{Call, Projector};
use crate::error::{Invalid, ReadError};
use crate::kind::EntryKind;
use crate::record::{Compaction, Entry, EntryBody};
use crate::source::EntrySource;
use crate::tree::Tree;

impl Projector {
    /// Checks that `entry` may be appended at the current leaf.
    pub fn check(
        &self,
        tree: &Tree,
        entry: &Entry,
        src: &dyn EntrySource,
    ) -> Result<(), CheckError> {
        match &entry.body {
            EntryBody::Message(m) => {
                if m.tool_calls().next().is_none() && m.tool_results().next().is_none() {
                    // Nothing to check against the calls: none are read.
                    return Ok(());
                }
                let calls = self.calls()?;
                let mut seen_calls = Vec::new();
                for (call_id, _, _) in m.tool_calls() {
                    if calls.contains_key(call_id) || seen_calls.contains(&call_id) {
                        return Err(Invalid::CallIdReused(call_id.to_owned()).into());
                    }
                    seen_calls.push(call_id);
                }
                let mut answered = Vec::new();
                for call_id in m.tool_results() {
                    match calls.get(call_id) {
                        None if !seen_calls.contains(&call_id) => {
                            return Err(Invalid::NoSuchCall(call_id.to_owned()).into());
                        }
                        Some(Call {
                            answered: Some(_), ..
                        }) => {
                            return Err(Invalid::AlreadyAnswered(call_id.to_owned()).into());
                        }
                        _ if answered.contains(&call_id) => {
                            return Err(Invalid::AlreadyAnswered(call_id.to_owned()).into());
                        }
                        _ => answered.push(call_id),
                    }
                }
                Ok(())
            }
            EntryBody::Compaction(c) => self.check_compaction(tree, c, src),
            EntryBody::AppState(_)
            | EntryBody::Checkout(_)
            | EntryBody::Settings(_)
            | EntryBody::Label(_)
            | EntryBody::SessionInfo(_)
            | EntryBody::Custom(_)
            | EntryBody::Ignored(_) => Ok(()),
        }
    }

    fn check_compaction(
        &self,
        tree: &Tree,
        c: &Compaction,
        src: &dyn EntrySource,
    ) -> Result<(), CheckError> {
        let fk = match &c.first_kept {
            None => self.end(),
            Some(k) => {
                let off = || Invalid::FirstKeptOffBranch(k.to_string());
                let node = tree.get(k).ok_or_else(off)?;
                self.on_path(tree, node).ok_or_else(off)?
            }
        };
        let fk_name = || {
            c.first_kept
                .as_ref()
                .map_or_else(|| "(nothing)".to_owned(), ToString::to_string)
        };
        for (call_id, call) in self.calls()? {
            let split = call.pos < fk && call.answered.is_none_or(|a| a >= fk);
            if split {
                return Err(Invalid::SplitsToolCall {
                    first_kept: fk_name(),
                    call_id: call_id.clone(),
                }
                .into());
            }
        }
        if fk < self.kept_from {
            // The kept range reaches back past the active compaction: read it.
            let mut calls_in_range: Vec<String> = Vec::new();
            for pos in fk..self.kept_from {
                let node = self.node_at(tree, pos);
                if tree.node(node).kind != Some(EntryKind::Message) {
                    continue;
                }
                if let EntryBody::Message(m) = &src.entry(node)?.body {
                    calls_in_range.extend(m.tool_calls().map(|(id, _, _)| id.to_owned()));
                    if let Some(r) = m
                        .tool_results()
                        .find(|r| !calls_in_range.iter().any(|c| c == r))
                    {
                        return Err(Invalid::SplitsToolCall {
                            first_kept: fk_name(),
                            call_id: r.to_owned(),
                        }
                        .into());
                    }
                }
            }
        }
        Ok(())
    }
}

/// An entry that cannot be appended, or a read that failed while checking.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error(transparent)]
    Read(#[from] ReadError),
}

impl From<CheckError> for crate::error::AppendError {
    fn from(e: CheckError) -> Self {
        match e {
            CheckError::Invalid(i) => i.into(),
            CheckError::Read(r) => r.into(),
        }
    }
}
