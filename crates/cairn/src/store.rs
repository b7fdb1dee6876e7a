//! The session store: many sessions behind one [`Backend`], resolved by id,
//! unique id prefix or path; listing through a catalog that is only a cache;
//! fork.
//!
//! The catalog maps each session to a summary and the [`Stamp`] of the log it
//! was computed from. Listing compares stamps with the backend: a session whose
//! stamp changed (or that the catalog lacks) is re-read read-only; sessions the
//! backend no longer has are dropped; a catalog that does not parse is
//! ignored. So a deleted, stale or corrupted catalog is rebuilt, never trusted,
//! and processes writing different sessions at once can only make it stale.
//!
//! Listing takes every session's stamp in one pass (`Backend::stamps`);
//! an unchanged catalog's summaries are moved out as they are, a changed
//! one is brought up to date and saved. Forks may go to an id the host
//! chooses (`fork_as`); subagent sessions are spawned and listed as children
//! of their parent.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::{Access, Backend, CatalogEntry, FileBackend, Stamp};
use crate::error::{OpenError, StoreError};
use crate::id::{self, EntryId, SessionId};
use crate::journal::{OpPhase, Status};
use crate::kind::OpKind;
use crate::record::{Body, EntryBody, ForkOrigin, Lineage};
use crate::session::{ContextStream, NewEntry, NewSession, Parent, Session};
use crate::summary::{FIRST_MESSAGE_CHARS, LastOperation, ListingFold, SessionSummary, excerpt};

/// Many sessions behind one backend.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
}

impl Store {
    /// A store of session files under `home` (sessions in `home/sessions/`,
    /// the catalog in `home/catalog.json`). Nothing is created until a session is.
    pub fn open_dir(home: impl AsRef<Path>) -> Store {
        Store::with_backend(Arc::new(FileBackend::new(home.as_ref().join("sessions"))))
    }

    /// A store over any backend.
    pub fn with_backend(backend: Arc<dyn Backend>) -> Store {
        Store { backend }
    }

    /// The default home: `$CAIRN_HOME`, else `$XDG_DATA_HOME/cairn`, else
    /// `~/.local/share/cairn`.
    pub fn default_home() -> Option<PathBuf> {
        if let Some(h) = std::env::var_os("CAIRN_HOME").filter(|h| !h.is_empty()) {
            return Some(PathBuf::from(h));
        }
        if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|h| !h.is_empty()) {
            return Some(PathBuf::from(x).join("cairn"));
        }
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share/cairn"))
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Creates a session.
    ///
    /// # Errors
    ///
    /// As [`Session::create`].
    pub fn create(&self, opts: NewSession) -> Result<Session, OpenError> {
        Session::create(&*self.backend, opts)
    }

    /// Opens a session by id.
    ///
    /// # Errors
    ///
    /// As [`Session::open`].
    pub fn open(&self, id: &SessionId, access: Access) -> Result<Session, OpenError> {
        Session::open(&*self.backend, id, access)
    }

    /// Opens a session read-only to read its context once, a message at a
    /// time ([`ContextStream`]).
    ///
    /// # Errors
    ///
    /// As [`Session::open`].
    pub fn open_context_stream(&self, id: &SessionId) -> Result<ContextStream, OpenError> {
        ContextStream::open(&*self.backend, id)
    }

    /// Resolves a full id or a unique id prefix.
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`], [`StoreError::Ambiguous`], or I/O errors.
    pub fn resolve(&self, query: &str) -> Result<SessionId, StoreError> {
        let q = query.to_ascii_lowercase();
        if !id::is_session_id_prefix(&q) {
            return Err(self.no_such(query));
        }
        let mut found: Vec<SessionId> = self
            .backend
            .list()?
            .into_iter()
            .filter(|id| id.as_str().starts_with(&q))
            .collect();
        found.sort();
        match found.len() {
            0 => Err(self.no_such(query)),
            1 => Ok(found.remove(0)),
            n => {
                let mut candidates: Vec<String> =
                    found.iter().take(10).map(ToString::to_string).collect();
                if n > 10 {
                    candidates.push(format!("and {} more", n - 10));
                }
                Err(StoreError::Ambiguous {
                    query: query.to_owned(),
                    candidates,
                })
            }
        }
    }

    fn no_such(&self, query: &str) -> StoreError {
        StoreError::NoSuchSession {
            query: query.to_owned(),
            store: self.backend.describe(),
        }
    }

    /// The most recently updated session (for `--continue`).
    ///
    /// # Errors
    ///
    /// [`StoreError::Empty`] when there is none, or as [`Store::list`].
    pub fn latest(&self) -> Result<SessionId, StoreError> {
        self.list()?
            .into_iter()
            .next()
            .map(|s| s.id)
            .ok_or_else(|| StoreError::Empty(self.backend.describe()))
    }

    /// Lists every session, most recently updated first, through the catalog.
    ///
    /// # Errors
    ///
    /// I/O errors listing the store. A session that cannot be read is listed
    /// with what its id tells (creation time) and no title, rather than hiding
    /// the others.
    pub fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        // The catalog is read and parsed while the sessions are listed and
        // stated: two independent halves of the same wait.
        let (stamped, catalog) = std::thread::scope(|scope| {
            let catalog = scope.spawn(|| self.backend.load_catalog());
            let stamped = self.backend.stamps();
            let catalog = catalog
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (stamped, catalog)
        });
        let stamped = stamped?;
        let mut catalog = catalog.unwrap_or_default();
        // The sessions whose catalog entry no longer describes the log.
        let stale: Vec<&(SessionId, Stamp)> = stamped
            .iter()
            .filter(|(id, stamp)| {
                catalog
                    .sessions
                    .get(id)
                    .is_none_or(|c| c.stamp != *stamp || c.summary.id != *id)
            })
            .collect();
        let mut unreadable = Vec::new();
        // Unchanged (the usual case): the summaries move out of the catalog
        // as they are. Otherwise the catalog is brought up to date and saved.
        if !stale.is_empty() || catalog.sessions.len() != stamped.len() - stale.len() {
            let listed: HashSet<&SessionId> = stamped.iter().map(|(id, _)| id).collect();
            catalog.sessions.retain(|id, _| listed.contains(id));
            for (id, stamp) in stale {
                match self.summarize(id) {
                    Some(summary) => {
                        let entry = CatalogEntry {
                            stamp: *stamp,
                            summary,
                        };
                        catalog.sessions.insert(id.clone(), entry);
                    }
                    None => {
                        catalog.sessions.remove(id);
                        unreadable.push(unreadable_summary(id));
                    }
                }
            }
            self.backend.save_catalog(&catalog);
        }
        let mut out: Vec<SessionSummary> = Vec::with_capacity(stamped.len());
        for entry in catalog.sessions.into_values() {
            let mut summary = entry.summary;
            // Only an open operation needs the lock to tell Running from Interrupted.
            let live =
                matches!(summary.phase, OpPhase::Open) && self.backend.writer_active(&summary.id);
            summary.status = summary.phase.status(live);
            out.push(summary);
        }
        out.extend(unreadable);
        out.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| b.id.cmp(&a.id)));
        Ok(out)
    }

    fn summarize(&self, id: &SessionId) -> Option<SessionSummary> {
        let s = Session::open(&*self.backend, id, Access::Read).ok()?;
        summary_of(&s).ok()
    }

    /// The status of a session: its last operation's phase, and whether a
    /// writer (in any process) holds it.
    ///
    /// # Errors
    ///
    /// As [`Session::open`] (read-only).
    pub fn status(&self, id: &SessionId) -> Result<Status, OpenError> {
        let s = Session::open(&*self.backend, id, Access::Read)?;
        Ok(s.phase().status(self.backend.writer_active(id)))
    }

    /// Creates a subagent session spawned by tool call `call_id` of `parent`:
    /// its header names the parent session, the call and the delegation
    /// depth (the parent's plus one). Refused beyond `max_depth`. Put
    /// [`child_reference`](crate::child_reference) in the parent's tool result.
    ///
    /// # Errors
    ///
    /// [`StoreError::Append`] with [`crate::Invalid::TooDeep`] when the depth
    /// would exceed `max_depth`; as [`Session::create`].
    pub fn spawn_child(
        &self,
        parent: &Session,
        call_id: &str,
        title: Option<String>,
        max_depth: u32,
    ) -> Result<Session, StoreError> {
        let depth = parent
            .header()
            .lineage
            .parent
            .as_ref()
            .map_or(0, |p| p.depth)
            + 1;
        if depth > max_depth {
            return Err(crate::AppendError::from(crate::Invalid::TooDeep {
                session: parent.id().to_string(),
                depth,
                max: max_depth,
            })
            .into());
        }
        let lineage = Lineage {
            forked_from: None,
            parent: Some(crate::record::SpawnOrigin {
                session: parent.id().clone(),
                call_id: call_id.to_owned(),
                depth,
            }),
            imported_from: None,
        };
        Ok(self.create(NewSession {
            title,
            cwd: parent.header().cwd.clone(),
            lineage,
            ..Default::default()
        })?)
    }

    /// The subagent sessions `parent` spawned, oldest first, each with the
    /// spawn origin its header records (the call that spawned it). Reads the
    /// listing, then the header of each child it names.
    ///
    /// # Errors
    ///
    /// As [`Store::list`]; a child that cannot be opened is left out (its
    /// listing row says to run `cairn fsck`).
    pub fn children(
        &self,
        parent: &SessionId,
    ) -> Result<Vec<(SessionSummary, crate::record::SpawnOrigin)>, StoreError> {
        let mut out: Vec<_> = self
            .list()?
            .into_iter()
            .filter(|s| s.parent.as_ref() == Some(parent))
            .filter_map(|s| {
                let child = Session::open(&*self.backend, &s.id, Access::Read).ok()?;
                let origin = child.header().lineage.parent.clone()?;
                Some((s, origin))
            })
            .collect();
        out.sort_by(|a, b| a.0.created.cmp(&b.0.created).then(a.0.id.cmp(&b.0.id)));
        Ok(out)
    }

    /// Removes a session.
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`], in use, or I/O errors.
    pub fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        self.backend.remove(id)
    }

    /// Forks `source` at `at` into a new session holding the branch from the
    /// root to `at` (`None`: an empty branch), with the same ids, times and
    /// initial state, and a header naming the source session and entry. The
    /// source is untouched. Labels whose target is not copied are dropped, and
    /// so are removals of labels the fork does not have; a compaction that
    /// kept from a dropped label keeps from the next copied entry instead
    /// (the same messages: labels have none). Operation records are not
    /// copied (they belong to the source's runs). An explicit `title` wins
    /// over a `session_info` title copied from the branch: if one would
    /// override it, a `session_info` entry with `title` is appended after the
    /// copied branch.
    ///
    /// A fork at an entry whose branch has a tool call without a result (an
    /// assistant entry whose calls are answered only on another branch, or
    /// not at all) is refused with [`crate::Invalid::UnansweredCalls`],
    /// which names the nearest safe entries.
    ///
    /// # Errors
    ///
    /// Open, read or append errors; nothing is created on failure.
    pub fn fork(
        &self,
        source: &Session,
        at: Option<&EntryId>,
        title: Option<String>,
    ) -> Result<Session, StoreError> {
        self.fork_as(source, at, title, SessionId::generate())
    }

    /// [`Store::fork`] into a session of the caller's id (a host that maps
    /// its own names onto session ids, like the LangGraph checkpointer's
    /// threads).
    ///
    /// # Errors
    ///
    /// As [`Store::fork`]; [`OpenError::AlreadyExists`] (as
    /// [`StoreError::Open`]) if the id is taken. Nothing is created on
    /// failure.
    pub fn fork_as(
        &self,
        source: &Session,
        at: Option<&EntryId>,
        title: Option<String>,
        id: SessionId,
    ) -> Result<Session, StoreError> {
        let entries = source.branch_entries(at)?;
        source.check_fork_point(&entries, at)?;
        let h = source.header();
        // The fork is built in memory, through the normal append path, then
        // handed to the backend whole: it appears complete or not at all (a
        // crash mid-fork leaves no prefix that looks like a finished fork).
        let staging = crate::backend::MemoryBackend::new();
        let fork = Session::create(
            &staging,
            NewSession {
                id: Some(id.clone()),
                title: title.clone().or_else(|| source.title()),
                cwd: h.cwd.clone(),
                app_state: Some(h.app_state.clone()),
                lineage: Lineage {
                    forked_from: Some(ForkOrigin {
                        session: source.id().clone(),
                        entry: at.cloned(),
                    }),
                    parent: h.lineage.parent.clone(),
                    imported_from: None,
                },
            },
        )?;
        // Entries copied so far; dropped labels, each with the copied entry
        // that took its place (`None` while none has been copied after it).
        let mut copied = std::collections::HashSet::<EntryId>::new();
        let mut dropped = std::collections::HashMap::<EntryId, Option<EntryId>>::new();
        let mut pending: Vec<EntryId> = Vec::new();
        let mut parent: Option<EntryId> = None;
        let lines = (|| {
            for (e, ts) in &entries {
                let mut body = e.body.clone();
                match &mut body {
                    EntryBody::Label(l) => {
                        let kept = match &l.target {
                            Some(t) => copied.contains(t),
                            None => fork.labels().contains_key(&l.name),
                        };
                        if !kept {
                            dropped.insert(e.id.clone(), None);
                            pending.push(e.id.clone());
                            continue;
                        }
                    }
                    EntryBody::Compaction(c) => {
                        if let Some(instead) = c.first_kept.as_ref().and_then(|k| dropped.get(k)) {
                            c.first_kept = instead.clone();
                        }
                    }
                    EntryBody::Message(_)
                    | EntryBody::AppState(_)
                    | EntryBody::Checkout(_)
                    | EntryBody::Settings(_)
                    | EntryBody::SessionInfo(_)
                    | EntryBody::Custom(_)
                    | EntryBody::Ignored(_) => {}
                }
                let new = NewEntry {
                    id: Some(e.id.clone()),
                    parent: parent.clone().map_or(Parent::Root, Parent::Entry),
                    body,
                };
                fork.append_entry_at(new, Some(ts.clone()), None)?;
                for d in pending.drain(..) {
                    dropped.insert(d, Some(e.id.clone()));
                }
                copied.insert(e.id.clone());
                parent = Some(e.id.clone());
            }
            if let Some(t) = &title
                && fork.title().as_ref() != Some(t)
            {
                let info = EntryBody::SessionInfo(crate::record::SessionInfo {
                    title: Some(t.clone()),
                });
                fork.append_entry_at(NewEntry::at_leaf(info), None, None)?;
            }
            (0..fork.len())
                .map(|seq| fork.raw_record(seq))
                .collect::<Result<Vec<_>, _>>()
                .map_err(StoreError::from)
        })()?;
        drop(fork);
        drop(self.backend.create_with(&id, &lines)?);
        Ok(self.open(&id, Access::Write)?)
    }
}

/// The listing summary of an open session, by the rules of [`ListingFold`]:
/// the session's title fold, the first user message, and the last operation
/// (its records read from the last `op_started` on).
///
/// # Errors
///
/// A read error finding the first user message or reading the last
/// operation's records.
pub fn summary_of(s: &Session) -> Result<SessionSummary, crate::error::ReadError> {
    let first_message = s
        .first_user_message()?
        .map(|t| excerpt(&t, FIRST_MESSAGE_CHARS));
    let mut op = LastOperation::default();
    let ops = s.op_records();
    let last = ops
        .iter()
        .rposition(|(_, k)| OpKind::from_name(k) == Some(OpKind::OpStarted));
    for (seq, _) in &ops[last.unwrap_or(ops.len())..] {
        if let Body::Op(r) = s.record(*seq)?.body {
            op.apply(&r);
        }
    }
    let fold = ListingFold {
        title: s.title(),
        first_message,
        entries: s.entry_count() as u64,
        records: s.len(),
        updated: s.updated(),
        op,
    };
    let h = s.header();
    Ok(fold.summary(
        s.id().clone(),
        h.created.clone(),
        h.lineage.forked_from.as_ref().map(|f| f.session.clone()),
        h.lineage.parent.as_ref().map(|p| p.session.clone()),
        s.is_writer(),
    ))
}

fn unreadable_summary(id: &SessionId) -> SessionSummary {
    let created = crate::time::format_millis(id.millis() as i64);
    SessionSummary {
        id: id.clone(),
        title: Some("(run `cairn fsck`)".into()),
        created: created.clone(),
        updated: created,
        entries: 0,
        records: 0,
        first_message: None,
        forked_from: None,
        parent: None,
        phase: OpPhase::None,
        status: Status::Init,
    }
}

/// A store and session id for a session file given by path.
///
/// # Errors
///
/// [`OpenError::NotASession`] when the file name is not `<session id>.jsonl`.
pub fn locate_path(path: &Path) -> Result<(Store, SessionId), OpenError> {
    let not = |problem: &str| OpenError::NotASession {
        location: path.display().to_string(),
        problem: problem.into(),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| not("it has no file name"))?;
    let stem = name
        .strip_suffix(".jsonl")
        .ok_or_else(|| not("a session file is named <session id>.jsonl"))?;
    let id =
        SessionId::parse(stem).map_err(|_| not("a session file is named <session id>.jsonl"))?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok((Store::with_backend(Arc::new(FileBackend::new(dir))), id))
}
