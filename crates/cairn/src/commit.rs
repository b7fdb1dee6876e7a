//! Durability modes and group commit.
//!
//! In [`Durability::Group`] a writer writes its record under the session lock,
//! releases the lock, and then waits until a sync that started after its write
//! has completed. The first waiter to find no sync in flight becomes the
//! leader and runs one `fdatasync` for everybody written so far; the others
//! wait for it. Nobody is acknowledged before a sync that covers their record.

use std::sync::{Condvar, Mutex, PoisonError};

use crate::backend::Log;
use crate::error::AppendError;

/// What an acknowledged append survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `fdatasync` before `append` returns: an acknowledged record survives
    /// process crash and power loss. One sync per append.
    #[default]
    Sync,
    /// Group commit: `append` returns after an `fdatasync` that covers the
    /// record, shared with every thread appending at the same time. Same
    /// guarantee as `Sync`, higher throughput under concurrency.
    Group,
    /// The record is handed to the OS (`write`) before `append` returns, but
    /// not synced: it survives a crash of the process (kill -9), not a power
    /// loss or kernel crash until [`crate::Session::sync`] returns.
    Buffered,
}

impl Durability {
    /// The name used on the command line and in docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Group => "group",
            Durability::Buffered => "buffered",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Durability, String> {
        match s {
            "sync" => Ok(Durability::Sync),
            "group" => Ok(Durability::Group),
            "buffered" => Ok(Durability::Buffered),
            other => Err(format!(
                "unknown durability {other:?}: expected sync, group or buffered"
            )),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Records `< written` have been written.
    written: u64,
    /// Records `< synced` are durable.
    synced: u64,
    /// A leader is running a sync.
    syncing: bool,
    /// Why the log failed, once it has.
    failed: Option<String>,
}

/// Coordinates syncs of one log.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    cv: Condvar,
}

impl GroupCommit {
    pub fn new(records: u64) -> GroupCommit {
        GroupCommit {
            state: Mutex::new(State {
                written: records,
                synced: records,
                ..State::default()
            }),
            cv: Condvar::new(),
        }
    }

    /// Notes that records `< upto` have been written (call after the write returned).
    pub fn written(&self, upto: u64) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.written = st.written.max(upto);
    }

    /// Notes that records `< upto` are durable (after a sync made under the session lock).
    pub fn synced(&self, upto: u64) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.synced = st.synced.max(upto);
        st.written = st.written.max(upto);
        self.cv.notify_all();
    }

    /// Records `< durable()` are durable.
    pub fn durable(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .synced
    }

    /// Returns once records `< upto` are durable, leading a sync if none is running.
    pub fn wait_durable(&self, log: &dyn Log, upto: u64) -> Result<(), AppendError> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if st.synced >= upto {
                return Ok(());
            }
            if let Some(cause) = &st.failed {
                return Err(AppendError::Poisoned {
                    session: log.location().to_owned(),
                    cause: cause.clone(),
                });
            }
            if st.syncing {
                st = self.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            st.syncing = true;
            let target = st.written;
            drop(st);
            let result = log.sync();
            st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            st.syncing = false;
            match result {
                Ok(()) => st.synced = st.synced.max(target),
                Err(e) => {
                    st.failed = Some(crate::error::with_causes(&e));
                    self.cv.notify_all();
                    return Err(e);
                }
            }
            self.cv.notify_all();
        }
    }
}
