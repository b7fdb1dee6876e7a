//! `cairn.Store`: a store named by its location, opened by
//! `cairn_stores::open_store` (a directory, `sqlite:PATH`, and whatever
//! locations that crate learns), and the sessions in it.

use std::path::PathBuf;
use std::sync::Arc;

use cairn::{Access, EntryId, NewSession, SessionId, Store};
use pyo3::prelude::*;

use crate::convert::{to_json, to_py};
use crate::errors::{CairnError, PyResultExt as _};
use crate::session::PySession;

/// A cairn store. Thread-safe: share one between threads.
#[pyclass(module = "cairn", name = "Store", frozen)]
pub struct PyStore {
    store: Arc<Store>,
    location: String,
}

pub(crate) fn session_id(id: &str) -> PyResult<SessionId> {
    SessionId::parse(id).py()
}

pub(crate) fn entry_id(id: &str) -> PyResult<EntryId> {
    EntryId::parse(id).py()
}

impl PyStore {
    fn resolve(&self, py: Python<'_>, query: &str) -> PyResult<SessionId> {
        let store = Arc::clone(&self.store);
        py.detach(|| store.resolve(query)).py()
    }
}

#[pymethods]
impl PyStore {
    /// Opens the store at `location`: a directory (created with its first
    /// session), `sqlite:PATH` (created if missing), or any location
    /// `cairn --store` accepts.
    #[new]
    fn new(py: Python<'_>, location: PathBuf) -> PyResult<PyStore> {
        let spec = location.clone();
        let store = py
            .detach(|| cairn_stores::open_store(&spec))
            .map_err(|e| CairnError::new_err(cairn::with_causes(&e)))?;
        Ok(PyStore {
            store: Arc::new(store),
            location: location.display().to_string(),
        })
    }

    /// The location this store was opened from.
    #[getter]
    fn location(&self) -> &str {
        &self.location
    }

    /// Creates a session (its header is durable when this returns) and
    /// returns it open for writing.
    #[pyo3(signature = (*, title=None, app_state=None, id=None, cwd=None))]
    fn create(
        &self,
        py: Python<'_>,
        title: Option<String>,
        app_state: Option<&Bound<'_, PyAny>>,
        id: Option<&str>,
        cwd: Option<String>,
    ) -> PyResult<PySession> {
        let opts = NewSession {
            id: id.map(session_id).transpose()?,
            title,
            cwd,
            app_state: app_state.map(to_json).transpose()?,
            lineage: Default::default(),
        };
        let store = Arc::clone(&self.store);
        let s = py.detach(|| store.create(opts)).py()?;
        Ok(PySession::new(s))
    }

    /// Opens a session by id or unique id prefix: for writing (the
    /// default; one writer per session, a second gets `SessionInUse`) or
    /// read-only (`write=False`: a snapshot of what was written so far).
    #[pyo3(signature = (session, *, write=true))]
    fn open(&self, py: Python<'_>, session: &str, write: bool) -> PyResult<PySession> {
        let id = self.resolve(py, session)?;
        let access = if write { Access::Write } else { Access::Read };
        let store = Arc::clone(&self.store);
        let s = py.detach(|| store.open(&id, access)).py()?;
        Ok(PySession::new(s))
    }

    /// Whether a session of exactly this id exists.
    fn exists(&self, py: Python<'_>, session: &str) -> PyResult<bool> {
        let id = session_id(session)?;
        let store = Arc::clone(&self.store);
        match py.detach(|| store.open(&id, Access::Read)) {
            Ok(_) => Ok(true),
            Err(cairn::OpenError::NotFound { .. }) => Ok(false),
            Err(e) => Err(crate::errors::ToPy::to_py(&e)),
        }
    }

    /// The sessions, newest first, as listing summaries (dicts).
    fn list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let store = Arc::clone(&self.store);
        let list = py.detach(|| store.list()).py()?;
        to_py(py, &list)
    }

    /// A session's status: `init`, `running` (a writer holds it and an
    /// operation is open), `interrupted`, `paused`, `succeeded`, `failed`.
    fn status(&self, py: Python<'_>, session: &str) -> PyResult<&'static str> {
        let id = self.resolve(py, session)?;
        let store = Arc::clone(&self.store);
        Ok(py.detach(|| store.status(&id)).py()?.as_str())
    }

    /// Removes a session (refused while a writer holds it).
    fn remove(&self, py: Python<'_>, session: &str) -> PyResult<()> {
        let id = self.resolve(py, session)?;
        let store = Arc::clone(&self.store);
        py.detach(|| store.remove(&id)).py()
    }

    /// Forks `session`'s branch up to entry `at` (its leaf when `None`)
    /// into a new session, returned open for writing. `id` chooses the new
    /// session's id.
    #[pyo3(signature = (session, at=None, *, title=None, id=None))]
    fn fork(
        &self,
        py: Python<'_>,
        session: &PySession,
        at: Option<&str>,
        title: Option<String>,
        id: Option<&str>,
    ) -> PyResult<PySession> {
        let source = session.inner()?;
        let at = match at {
            Some(q) => Some(source.resolve(q).py()?),
            None => source.leaf(),
        };
        let id = match id {
            Some(i) => session_id(i)?,
            None => SessionId::generate(),
        };
        let store = Arc::clone(&self.store);
        let fork = py
            .detach(|| store.fork_as(&source, at.as_ref(), title, id))
            .py()?;
        Ok(PySession::new(fork))
    }

    fn __repr__(&self) -> String {
        format!("cairn.Store({:?})", self.location)
    }
}
