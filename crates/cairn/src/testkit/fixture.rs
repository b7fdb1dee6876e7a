//! What the conformance suite runs against: [`Fixture`], a backend under
//! test, and what an interrupted append leaves on it ([`Interrupted`]).

use std::sync::Arc;

use crate::backend::Backend;
use crate::id::SessionId;

/// What a crash in the middle of an append leaves behind, per backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    /// Part of the line reached storage: a reader ignores it, a writer cuts
    /// it (and reports it) on open. The file backend.
    Torn,
    /// Appends are atomic: nothing of the interrupted append is visible.
    /// Transactional and in-memory backends.
    Atomic,
}

/// A backend under test: one fresh, empty store per fixture.
pub trait Fixture {
    /// The backend's name, for failure messages.
    fn name(&self) -> String;

    /// The backend under test.
    fn backend(&self) -> Arc<dyn Backend>;

    /// An independent handle onto the same storage, as another process
    /// would open it (new files, new connections). Locks taken through
    /// [`Fixture::backend`] must be seen through it. A backend with no such
    /// notion returns a handle sharing the same state.
    fn reopen(&self) -> Arc<dyn Backend>;

    /// Leaves session `id` (no writer open) as a writer killed in the middle
    /// of appending `line` as its next record would leave it.
    fn interrupt_append(&self, id: &SessionId, line: &[u8]) -> Interrupted;

    /// From now on every write and sync of session logs through
    /// [`Fixture::backend`] fails (`true`), or succeeds again (`false`).
    /// Returns whether the backend can fail on demand.
    fn fail_writes(&self, fail: bool) -> bool {
        let _ = fail;
        false
    }

    /// Damages record `seq` of session `id` (no writer open) in storage, so
    /// that its checksum no longer verifies. Returns whether supported.
    fn corrupt(&self, id: &SessionId, seq: u64) -> bool {
        let _ = (id, seq);
        false
    }
}

/// A check of the suite.
pub type Check = fn(&dyn Fixture);
