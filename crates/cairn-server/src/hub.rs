//! The server's handles on the store's sessions.
//!
//! A write opens the session as its writer (taking the writer lock) and
//! keeps the handle while requests keep coming; a handle unused for the
//! hold time is closed, so another process (an agent, `cairn append`) can
//! take the session between bursts. Reads use the held writer when there is
//! one (it is current), and otherwise open the session read-only, which
//! takes no lock. Every write through the server bumps one change counter
//! that the live tails wait on; writes by other processes are seen by
//! polling the backend's cheap stamp (`Backend::stamp`).
//!
//! Everything here blocks: handlers call it through `spawn_blocking`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cairn::{Access, Session, SessionId, Stamp, Status, Store};
use tokio::sync::watch;

use crate::error::ApiError;

/// An open session, as the server holds it.
#[derive(Debug)]
pub struct Handle {
    /// The session.
    pub session: Session,
    /// Held for a whole batch append (and for every write of the operation
    /// API), so `expected_seq` and the batch's durability apply to it alone.
    batch: Mutex<()>,
    used: Mutex<Instant>,
}

impl Handle {
    fn new(session: Session) -> Handle {
        Handle {
            session,
            batch: Mutex::new(()),
            used: Mutex::new(Instant::now()),
        }
    }

    /// Holds the session for one batch of writes.
    pub fn batch(&self) -> MutexGuard<'_, ()> {
        self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The store and the writers the server holds.
#[derive(Debug)]
pub struct Hub {
    store: Store,
    writers: Mutex<HashMap<SessionId, Arc<Handle>>>,
    hold: Duration,
    changes: watch::Sender<u64>,
}

impl Hub {
    /// A hub over `store` that closes writers unused for `hold`.
    pub fn new(store: Store, hold: Duration) -> Hub {
        Hub {
            store,
            writers: Mutex::new(HashMap::new()),
            hold,
            changes: watch::Sender::new(0),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A receiver told of every write made through this server.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Tells the live tails that something was written.
    pub fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn writers(&self) -> MutexGuard<'_, HashMap<SessionId, Arc<Handle>>> {
        self.writers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session a path names: its id or a unique prefix.
    ///
    /// # Errors
    ///
    /// Not found, or an ambiguous prefix.
    pub fn resolve(&self, query: &str) -> Result<SessionId, ApiError> {
        if query.is_empty() || query.len() > 64 || !query.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(ApiError::bad_request(
                format!("{query:?} is not a session id"),
                "a session id is 26 characters of Crockford base 32 (letters and digits), or a unique prefix of one",
            ));
        }
        // A full id needs no listing (opening it says whether it exists);
        // only a prefix is looked up among every session.
        if let Ok(id) = SessionId::parse(&query.to_ascii_lowercase()) {
            return Ok(id);
        }
        Ok(self.store.resolve(query)?)
    }

    /// The session held for writing, opened (and its lock taken) if needed.
    ///
    /// # Errors
    ///
    /// Opening fails: not found, held by another process, damaged.
    pub fn writer(&self, id: &SessionId) -> Result<Arc<Handle>, ApiError> {
        if let Some(h) = self.writers().get(id) {
            touch(h);
            return Ok(Arc::clone(h));
        }
        // Opened outside the map's lock: opening reads the whole log.
        let opened = Arc::new(Handle::new(self.store.open(id, Access::Write)?));
        let mut writers = self.writers();
        let h = writers.entry(id.clone()).or_insert(opened);
        touch(h);
        Ok(Arc::clone(h))
    }

    /// Adopts a session this server just created (or forked) as its writer.
    pub fn adopt(&self, session: Session) -> Arc<Handle> {
        let h = Arc::new(Handle::new(session));
        self.writers()
            .insert(h.session.id().clone(), Arc::clone(&h));
        h
    }

    /// The session for reading: the held writer, or a read-only open.
    ///
    /// # Errors
    ///
    /// Opening fails: not found, damaged.
    pub fn reader(&self, id: &SessionId) -> Result<Arc<Handle>, ApiError> {
        if let Some(h) = self.held(id) {
            return Ok(h);
        }
        Ok(Arc::new(Handle::new(self.store.open(id, Access::Read)?)))
    }

    /// The writer this server holds for `id`, if any.
    pub fn held(&self, id: &SessionId) -> Option<Arc<Handle>> {
        self.writers().get(id).map(Arc::clone)
    }

    /// Closes the writer held for `id` (after a failed write, so the next
    /// request reopens it and cuts any torn tail; or before a removal).
    pub fn release(&self, id: &SessionId) {
        self.writers().remove(id);
    }

    /// Closes the writers nobody used for the hold time (and nobody is
    /// using now).
    pub fn release_idle(&self) {
        let hold = self.hold;
        self.writers().retain(|_, h| {
            Arc::strong_count(h) > 1
                || h.used
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .elapsed()
                    < hold
        });
    }

    /// The status of `s`: `running` while an operation is open and a live
    /// writer holds the session, `interrupted` when an open operation has
    /// none (its process died). A writer this server holds is live: the
    /// operation API drives the open operation through it, between
    /// requests as well.
    pub fn status(&self, s: &Session) -> Status {
        s.phase().status(self.store.backend().writer_active(s.id()))
    }

    /// The backend's cheap change stamp of a session (`None` once removed).
    pub fn stamp(&self, id: &SessionId) -> Option<Stamp> {
        self.store.backend().stamp(id).ok()
    }
}

fn touch(h: &Handle) {
    *h.used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
}
