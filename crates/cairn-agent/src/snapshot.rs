//! The workspace snapshots around a tool call that touches files: the
//! `before` (appended before its T1, or synced by the caller) and the
//! `after` (at its result's entry, before the T2), shared by the loop
//! ([`crate::agent`]) and resume ([`crate::recovery`]).

use cairn::Session;
use cairn_workspace::Touches;

use crate::observer::Event;
use crate::runtime::Runtime;

/// The workspace snapshot before a call that touches files (appended
/// before its T1, or synced by the caller); `Err` is the result text of a
/// call not run because it could not be taken.
pub(crate) fn before(
    rt: &mut Runtime,
    session: &Session,
    call_id: &str,
    touches: &Touches,
) -> std::result::Result<(), String> {
    let leaf = session.leaf();
    let taken = rt.env.workspace(session).and_then(|w| {
        w.map(|w| w.before(session, leaf, call_id, touches))
            .transpose()
    });
    taken.map(drop).map_err(|e| {
        format!(
            "Not run: the workspace snapshot before it could not be taken, so a rewind could not undo it ({}).",
            cairn::with_causes(&e)
        )
    })
}

/// The workspace snapshot after a call that touches files, at its result's
/// entry; a failure is a notice (the next snapshot sees the changes).
pub(crate) fn after(
    rt: &mut Runtime,
    session: &Session,
    at: cairn::EntryId,
    call_id: &str,
    name: &str,
    touches: &Touches,
) {
    let taken = rt.env.workspace(session).and_then(|w| {
        w.map(|w| w.after(session, at, call_id, touches))
            .transpose()
    });
    if let Err(e) = taken {
        rt.observer.event(&Event::Notice(&format!(
            "the workspace snapshot after {name} failed: {}",
            cairn::with_causes(&e)
        )));
    }
}
