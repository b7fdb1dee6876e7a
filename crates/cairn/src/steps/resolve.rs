//! Step labels where an entry is expected: [`resolve`] names the entry a
//! step produced, and anything else goes to the session's own lookup.

use super::{label, parse_label};
use crate::error::LookupError;
use crate::id::EntryId;
use crate::session::Session;

/// Resolves what a person typed where an entry is expected, step labels
/// included: a step label (`s0005`) names the entry its step produced, the
/// state right after that step; anything else goes to [`Session::resolve`].
///
/// # Errors
///
/// [`LookupError::NoSuchStep`] past the last step;
/// [`LookupError::StepWithoutEntry`] for a step that produced no entry (a
/// model call interrupted before its reply, a tool still running);
/// [`LookupError::StepOrEntry`] when the label also names an entry or a
/// label of the session; otherwise as [`Session::resolve`].
pub fn resolve(session: &Session, query: &str) -> Result<EntryId, LookupError> {
    let Some(number) = parse_label(query) else {
        return session.resolve(query);
    };
    let steps = session.steps().map_err(|e| LookupError::Unreadable {
        query: query.to_owned(),
        problem: crate::with_causes(&e),
    })?;
    let Some(step) = steps.iter().find(|s| s.number == number) else {
        return Err(LookupError::NoSuchStep {
            step: label(number),
            last: steps.len() as u32,
        });
    };
    let entry = step
        .entry
        .clone()
        .filter(|id| session.resolve(id.as_str()).is_ok())
        .ok_or_else(|| LookupError::StepWithoutEntry {
            step: step.label(),
            status: step.status.name(),
        })?;
    if let Ok(other) = session.resolve(query)
        && other != entry
    {
        return Err(LookupError::StepOrEntry {
            query: query.to_owned(),
            step_entry: entry.to_string(),
            other: other.to_string(),
        });
    }
    Ok(entry)
}
