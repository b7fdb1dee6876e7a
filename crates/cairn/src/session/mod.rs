//! An open session: its log, the tree index, the incremental projection and
//! the reads. Opening and verification are in `open.rs`; the append path,
//! which checks every invariant before anything is written, in `append.rs`.

mod append;
mod open;
mod stream;

pub use stream::ContextStream;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;

use crate::backend::{Backend, Log, TornTail};
use crate::commit::{CommitStats, Durability, GroupCommit, InFlight};
use crate::error::{AppendError, Damage, LookupError, OpenError, ReadError};
use crate::frame::{self, Frame};
use crate::id::{EntryId, SessionId};
use crate::journal::OpFold;
use crate::kind::EntryKind;
use crate::memory::{MemoryConfig, MemoryTracker, SessionMemory};
use crate::projection::{Context, Projector, SessionWide};
use crate::record::{Body, Entry, EntryBody, FORMAT_VERSION, Header, Lineage, Record, Role};
use crate::source::EntrySource;
use crate::tree::{BranchFold, Tree, Walk};

/// The software name and version written in new headers.
pub const WRITER: &str = concat!("cairn/", env!("CARGO_PKG_VERSION"));

/// Options for a new session.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// The session's id (generated when `None`).
    pub id: Option<SessionId>,
    /// A title.
    pub title: Option<String>,
    /// The working directory to record (the process's when `None`).
    pub cwd: Option<String>,
    /// The initial application state (`{}` when `None`).
    pub app_state: Option<Value>,
    /// Where the session comes from.
    pub lineage: Lineage,
}

/// Where a new entry attaches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Parent {
    /// The current leaf (the entry appended last).
    #[default]
    Leaf,
    /// No parent: a new root.
    Root,
    /// This entry.
    Entry(EntryId),
}

/// An entry to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    /// The id to use (a fresh random one when `None`).
    pub id: Option<EntryId>,
    /// Where it attaches.
    pub parent: Parent,
    /// What it records.
    pub body: EntryBody,
}

impl NewEntry {
    /// An entry at the leaf with a generated id.
    pub fn at_leaf(body: EntryBody) -> NewEntry {
        NewEntry {
            id: None,
            parent: Parent::Leaf,
            body,
        }
    }
}

/// What an append wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The record's position.
    pub seq: u64,
    /// The entry's id (`None` for operation records).
    pub id: Option<EntryId>,
}

/// What happened when a session was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Records read.
    pub records: u64,
    /// A torn tail cut (writers) or ignored (readers).
    pub torn: Option<TornTail>,
    /// What became of the persisted index (`docs/STORES.md` §4), for
    /// people: used, rebuilt (and why), or `None` when the backend keeps
    /// none or the session is too short to need one.
    pub index: Option<String>,
}

/// An entry of the tree, as the index knows it (no payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The entry's id.
    pub id: EntryId,
    /// Its parent.
    pub parent: Option<EntryId>,
    /// Its record's position.
    pub seq: u64,
    /// Its kind, as written.
    pub kind: &'static str,
}

/// An open session.
///
/// All methods take `&self`: a session may be shared between threads (for
/// group commit). Reads never block on a sync in progress.
#[derive(Debug)]
pub struct Session {
    id: SessionId,
    header: Header,
    log: Box<dyn Log>,
    inner: Mutex<Inner>,
    commit: GroupCommit,
    durability: Mutex<Durability>,
    report: OpenReport,
}

#[derive(Debug)]
struct Inner {
    tree: Tree,
    proj: Projector,
    /// Labels and title (session-wide folds).
    wide: SessionWide,
    next_seq: u64,
    last_ts: String,
    /// Seqs and kinds of operation-journal records.
    ops: Vec<(u64, String)>,
    /// The operation journal folded up to the last operation.
    fold: OpFold,
    /// Session memory, once enabled.
    memory: Option<MemoryTracker>,
    /// Records the persisted index in force covers (0: none).
    indexed: u64,
}

/// A write in progress: its durability, the append noted in flight, and
/// the locked state ([`Session::begin_write`] to [`Session::finish_write`]).
struct Writing<'a> {
    durability: Durability,
    flight: InFlight<'a>,
    g: MutexGuard<'a, Inner>,
}

/// Reads entries through the log for the projector.
struct Reader<'a> {
    log: &'a dyn Log,
    tree: &'a Tree,
}

impl EntrySource for Reader<'_> {
    fn entry(&self, node: u32) -> Result<Entry, ReadError> {
        let seq = self.tree.node(node).seq;
        // A block of the persisted index that did not verify gives no
        // record: say so rather than read a wrong one.
        self.tree.check_damage(self.log.location())?;
        match read_record(self.log, seq)?.body {
            Body::Entry(e) if e.id.as_str() == self.tree.id(node) => Ok(e),
            Body::Entry(e) => Err(ReadError::Damaged(Box::new(Damage {
                location: self.log.location().to_owned(),
                line: seq + 1,
                offset: self.log.offset(seq),
                problem: format!(
                    "it holds entry {} where the session's index places entry {}",
                    e.id,
                    self.tree.id(node)
                ),
            }))),
            Body::Header(_) | Body::Op(_) => Err(ReadError::NoSuchRecord(seq)),
        }
    }

    /// Only for entries the persisted index covers: those lines were
    /// decoded when the index was written, and an open through it need not
    /// read them; a line the open parses has its payload decoded there, as
    /// `docs/FORMAT.md` §7 says.
    fn line_at(&self, node: u32) -> Option<(u64, crate::source::LineAt)> {
        // A damaged tree: read now (`entry`), which reports it.
        if node >= self.tree.base_len() || self.tree.damage().is_some() {
            return None;
        }
        let seq = self.tree.node(node).seq;
        self.log.line_at(seq).map(|at| (seq, at))
    }

    fn check(&self) -> Result<(), ReadError> {
        self.tree.check_damage(self.log.location())
    }
}

fn read_record(log: &dyn Log, seq: u64) -> Result<Record, ReadError> {
    let line = log.read(seq)?;
    let damaged = |problem: String| {
        let offset = log.offset(seq);
        ReadError::Damaged(Box::new(Damage {
            location: log.location().to_owned(),
            line: seq + 1,
            offset,
            problem,
        }))
    };
    let frame = Frame::parse(&line).map_err(|e| damaged(e.to_string()))?;
    let body = frame::decode_body(&frame).map_err(|e| damaged(e.to_string()))?;
    Ok(Record {
        seq: frame.seq,
        ts: frame.ts.into_owned(),
        body,
    })
}

/// A writer that closes after appending many records saves the index, so
/// the next open does not parse them again.
impl Drop for Session {
    fn drop(&mut self) {
        self.save_index_beyond(crate::index::INDEX_AFTER_RECORDS);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Session {
    /// Creates a session in `backend`: the header is durable when this returns.
    ///
    /// # Errors
    ///
    /// [`OpenError::AlreadyExists`] if the id is taken, or I/O errors.
    pub fn create(backend: &dyn Backend, opts: NewSession) -> Result<Session, OpenError> {
        let id = opts.id.unwrap_or_else(SessionId::generate);
        let created = crate::time::now_rfc3339();
        let cwd = opts.cwd.or_else(|| {
            std::env::current_dir()
                .ok()
                .map(|p| p.display().to_string())
        });
        let header = Header {
            format: FORMAT_VERSION,
            session: id.clone(),
            created: created.clone(),
            cwd,
            title: opts.title.clone(),
            app_state: opts
                .app_state
                .unwrap_or_else(|| Value::Object(Default::default())),
            lineage: opts.lineage,
            writer: WRITER.to_owned(),
        };
        Session::create_with_header(backend, header, created)
    }

    /// Creates a session whose header record is `header`, written at `ts`.
    pub(crate) fn create_with_header(
        backend: &dyn Backend,
        header: Header,
        ts: String,
    ) -> Result<Session, OpenError> {
        let id = header.session.clone();
        let line = frame::encode(0, &ts, &Body::Header(header.clone()));
        let created = ts;
        let log = backend.create(&id, &line)?;
        Ok(Session {
            inner: Mutex::new(Inner {
                tree: Tree::default(),
                proj: Projector::new(header.app_state.clone()),
                wide: SessionWide::new(header.title.clone()),
                next_seq: 1,
                last_ts: created,
                ops: Vec::new(),
                fold: OpFold::default(),
                memory: None,
                indexed: 0,
            }),
            id,
            header,
            log,
            commit: GroupCommit::new(1),
            durability: Mutex::new(Durability::default()),
            report: OpenReport {
                records: 1,
                torn: None,
                index: None,
            },
        })
    }
    /// The session's id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }
    /// The header (record 0).
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// What opening found (records, torn tail).
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }
    /// Where the session is stored.
    pub fn location(&self) -> &str {
        self.log.location()
    }
    /// Whether this handle holds the writer lock.
    pub fn is_writer(&self) -> bool {
        self.log.is_writer()
    }
    /// The durability of appends.
    pub fn durability(&self) -> Durability {
        *lock(&self.durability)
    }
    /// Sets the durability of later appends.
    pub fn set_durability(&self, d: Durability) {
        *lock(&self.durability) = d;
    }

    /// The current context. O(1): a shared snapshot that later appends do
    /// not change. On the file backend the messages the open did not read
    /// are read when first asked for ([`crate::ContextMessage::message`]),
    /// so reading one can fail if the file changed underneath.
    pub fn context(&self) -> Arc<Context> {
        lock(&self.inner).proj.context()
    }

    /// Turns on session memory with `config`: derives it from the current
    /// branch now (reading every entry on it), then keeps it up to date
    /// incrementally on every append and checkout.
    ///
    /// # Errors
    ///
    /// [`ReadError`] when an entry of the branch cannot be read.
    pub fn enable_memory(&self, config: MemoryConfig) -> Result<(), ReadError> {
        let mut g = lock(&self.inner);
        let inner = &mut *g;
        let mut tracker = MemoryTracker::new(config);
        let reader = Reader {
            log: &*self.log,
            tree: &inner.tree,
        };
        tracker.move_to(
            inner.proj.leaf(),
            Walk {
                tree: &inner.tree,
                src: &reader,
            },
        )?;
        inner.memory = Some(tracker);
        Ok(())
    }

    /// The session memory of the current branch, if enabled.
    pub fn memory(&self) -> Option<SessionMemory> {
        lock(&self.inner)
            .memory
            .as_ref()
            .map(|m| m.memory().clone())
    }

    /// The leaf: the entry appended last (`None` before the first entry).
    pub fn leaf(&self) -> Option<EntryId> {
        let inner = lock(&self.inner);
        inner.tree.last().map(|n| inner.tree.entry_id(n))
    }

    /// The branch: entry ids from the root to the leaf. Once a block of the
    /// persisted index failed its check after the open (every read and
    /// append of the handle then fails), the walk answers without that
    /// block's entries.
    pub fn branch(&self) -> Vec<EntryId> {
        let inner = lock(&self.inner);
        // The projector may hold only the end of its branch: walk it whole.
        inner
            .tree
            .path_to(inner.proj.leaf())
            .into_iter()
            .map(|n| inner.tree.entry_id(n))
            .collect()
    }

    /// The title: the latest `session_info` title, else the header's.
    pub fn title(&self) -> Option<String> {
        lock(&self.inner).wide.title.clone()
    }

    /// Number of records, header included.
    pub fn len(&self) -> u64 {
        lock(&self.inner).next_seq
    }

    /// Always false: a session has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Number of entries.
    pub fn entry_count(&self) -> usize {
        lock(&self.inner).tree.len()
    }

    /// When the session last changed: the time of its last record, or of
    /// its creation when that is later (a fork's copied records keep their
    /// original times, but the fork was made now).
    pub fn updated(&self) -> String {
        let last = lock(&self.inner).last_ts.clone();
        let created = &self.header.created;
        match (
            crate::time::parse_millis(&last),
            crate::time::parse_millis(created),
        ) {
            (Some(l), Some(c)) if c > l => created.clone(),
            _ => last,
        }
    }

    /// Labels: name → entry.
    pub fn labels(&self) -> BTreeMap<String, EntryId> {
        lock(&self.inner).wide.labels.clone()
    }

    /// Every entry as the index knows it, in append order.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let inner = lock(&self.inner);
        inner
            .tree
            .iter()
            .map(|(i, n)| NodeInfo {
                id: inner.tree.entry_id(i),
                parent: n.parent.map(|p| inner.tree.entry_id(p)),
                seq: n.seq,
                kind: n.kind.map_or("ignored", EntryKind::name),
            })
            .collect()
    }

    /// Seqs and kinds of the operation-journal records.
    pub fn op_records(&self) -> Vec<(u64, String)> {
        lock(&self.inner).ops.clone()
    }

    /// The children of an entry (`None`: the roots), in append order.
    pub fn children(&self, of: Option<&EntryId>) -> Vec<EntryId> {
        let inner = lock(&self.inner);
        let n = match of {
            Some(id) => match inner.tree.get(id) {
                Some(n) => Some(n),
                None => return Vec::new(),
            },
            None => None,
        };
        inner
            .tree
            .children(n)
            .into_iter()
            .map(|c| inner.tree.entry_id(c))
            .collect()
    }

    /// Resolves an entry reference: a full id, then a label, then a unique id prefix.
    ///
    /// # Errors
    ///
    /// [`LookupError::NotFound`] or [`LookupError::Ambiguous`] (listing candidates);
    /// [`LookupError::IndexDamaged`] once a block of the persisted index failed its check.
    pub fn resolve(&self, query: &str) -> Result<EntryId, LookupError> {
        let inner = lock(&self.inner);
        if let Some(n) = inner.tree.get_str(query) {
            return Ok(inner.tree.entry_id(n));
        }
        if let Some(id) = inner.wide.labels.get(query) {
            return Ok(id.clone());
        }
        let found = inner.tree.resolve_prefix(query);
        // A prefix matched (or not) without the entries of a block that
        // failed its check: no answer rather than a wrong one.
        if let Some(why) = inner.tree.damage() {
            return Err(LookupError::IndexDamaged {
                query: query.to_owned(),
                problem: format!("the persisted index {why}"),
            });
        }
        Ok(inner.tree.entry_id(found?))
    }

    /// Reads and decodes record `seq`.
    ///
    /// # Errors
    ///
    /// [`ReadError`] when it does not exist, is damaged, or cannot be read.
    pub fn record(&self, seq: u64) -> Result<Record, ReadError> {
        read_record(&*self.log, seq)
    }

    /// The stored bytes of record `seq`, newline included.
    ///
    /// # Errors
    ///
    /// [`ReadError`] when it does not exist, is damaged, or cannot be read.
    pub fn raw_record(&self, seq: u64) -> Result<Vec<u8>, ReadError> {
        self.log.read(seq)
    }

    /// The numbered steps of the session, derived from every operation
    /// record and message (reads them all).
    ///
    /// # Errors
    ///
    /// [`ReadError`] when a record cannot be read.
    pub fn steps(&self) -> Result<Vec<crate::steps::Step>, ReadError> {
        let seqs: Vec<u64> = {
            let inner = lock(&self.inner);
            let mut seqs: Vec<u64> = inner.ops.iter().map(|(s, _)| *s).collect();
            seqs.extend(
                inner
                    .tree
                    .iter()
                    .filter(|(_, n)| n.kind == Some(EntryKind::Message))
                    .map(|(_, n)| n.seq),
            );
            seqs
        };
        let mut seqs = seqs;
        seqs.sort_unstable();
        let records = seqs
            .into_iter()
            .map(|s| self.record(s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(crate::steps::derive(&records))
    }

    /// Reads and decodes one entry.
    ///
    /// # Errors
    ///
    /// [`LookupError`] (as [`ReadError::NoSuchRecord`]) is not used: an unknown
    /// id gives `Ok(None)`; read failures give [`ReadError`].
    pub fn entry(&self, id: &EntryId) -> Result<Option<Entry>, ReadError> {
        let inner = lock(&self.inner);
        let Some(n) = inner.tree.get(id) else {
            // Not found may mean not found in a block that failed its check.
            inner.tree.check_damage(self.log.location())?;
            return Ok(None);
        };
        Reader {
            log: &*self.log,
            tree: &inner.tree,
        }
        .entry(n)
        .map(Some)
    }

    /// The entries from the root to `to` (inclusive), decoded, with their times.
    ///
    /// # Errors
    ///
    /// [`ReadError`] when a record cannot be read.
    pub fn branch_entries(&self, to: Option<&EntryId>) -> Result<Vec<(Entry, String)>, ReadError> {
        let inner = lock(&self.inner);
        let n = match to {
            Some(id) => Some(
                inner
                    .tree
                    .get(id)
                    .ok_or(ReadError::NoSuchRecord(u64::MAX))?,
            ),
            None => None,
        };
        let mut out = Vec::new();
        for p in inner.tree.path_to(n) {
            let rec = read_record(&*self.log, inner.tree.node(p).seq)?;
            if let Body::Entry(e) = rec.body {
                out.push((e, rec.ts));
            }
        }
        Ok(out)
    }

    /// The first user message's text, if any (for listings).
    ///
    /// # Errors
    ///
    /// [`ReadError`] when a record cannot be read.
    pub fn first_user_message(&self) -> Result<Option<String>, ReadError> {
        let seqs: Vec<u64> = {
            let inner = lock(&self.inner);
            inner
                .tree
                .iter()
                .filter(|(_, n)| n.kind == Some(EntryKind::Message))
                .map(|(_, n)| n.seq)
                .collect()
        };
        for seq in seqs {
            if let Body::Entry(Entry {
                body: EntryBody::Message(m),
                ..
            }) = self.record(seq)?.body
                && m.role == Role::User
            {
                return Ok(Some(m.plain_text()));
            }
        }
        Ok(None)
    }

    /// Makes every record appended so far durable, whatever the durability mode.
    ///
    /// # Errors
    ///
    /// [`AppendError::ReadOnly`], [`AppendError::Poisoned`], [`AppendError::Io`].
    pub fn sync(&self) -> Result<(), AppendError> {
        let upto = lock(&self.inner).next_seq;
        self.check_writable()?;
        // Even with nothing left to sync, a handle whose write failed is dead.
        if let Some(cause) = self.log.poisoned() {
            return Err(AppendError::Poisoned {
                session: self.log.location().to_owned(),
                cause,
            });
        }
        // Every record below `upto` was written (Buffered appends leave
        // noting that to this call).
        self.commit.wait_durable(&*self.log, upto)
    }

    pub(crate) fn with_fold<T>(&self, f: impl FnOnce(&OpFold) -> T) -> T {
        f(&lock(&self.inner).fold)
    }

    pub(crate) fn open_operation_id(&self) -> Option<String> {
        self.with_fold(|f| f.open().map(|p| p.id.clone()))
    }

    /// A new entry id, unused and unreserved.
    pub(crate) fn fresh_entry_id(&self) -> EntryId {
        let inner = lock(&self.inner);
        loop {
            let id = EntryId::random();
            let reserved = inner.fold.open().is_some_and(|p| {
                p.attempts.iter().any(|a| a.entry == id)
                    || p.dispatched.iter().any(|d| d.record.result_entry == id)
            });
            if inner.tree.get(&id).is_none() && !reserved {
                return id;
            }
        }
    }

    /// The name and arguments of an unanswered tool call in the context.
    ///
    /// # Errors
    ///
    /// [`ReadError`] when a message read on the way cannot be read.
    pub(crate) fn find_call(&self, call_id: &str) -> Result<Option<(String, Value)>, ReadError> {
        let ctx = self.context();
        for m in ctx.messages().iter().rev() {
            if let Some((_, name, args)) =
                m.message()?.tool_calls().find(|(id, _, _)| *id == call_id)
            {
                return Ok(Some((name.to_owned(), args.clone())));
            }
        }
        Ok(None)
    }

    /// Saves the persisted index (`docs/STORES.md` §4) now, covering
    /// every record, so that the next open reads none of them again. A
    /// writer does this itself when it closes after appending 1,024 records
    /// or more; this is for hosts that want it sooner. Returns whether it
    /// was saved: not when the backend keeps no index, this handle is not
    /// a healthy writer, or a record is not yet durable (an index never
    /// covers lines a power loss could take: [`Session::sync`] first).
    /// Best effort: it is only a cache.
    pub fn save_index(&self) -> bool {
        self.save_index_beyond(0)
    }

    /// Saves the index if at least `min_new` records are not yet covered.
    fn save_index_beyond(&self, min_new: u64) -> bool {
        // A panic while the session's lock was held (an append cut short)
        // may have left the tree and the log apart: save nothing.
        if self.inner.is_poisoned() || std::thread::panicking() {
            return false;
        }
        let mut inner = lock(&self.inner);
        let records = self.log.len();
        if !self.log.is_writer()
            || !self.log.keeps_index()
            || self.log.poisoned().is_some()
            || records < inner.indexed + min_new
            || self.commit.durable() < records
        {
            return false;
        }
        let saved = open::save_index(
            &self.id,
            &*self.log,
            &inner.tree,
            &inner.ops,
            &inner.proj,
            &inner.wide,
        )
        .is_ok();
        if saved {
            inner.indexed = records;
        }
        saved
    }

    fn check_writable(&self) -> Result<(), AppendError> {
        if !self.log.is_writer() {
            return Err(AppendError::ReadOnly {
                session: self.id.to_string(),
            });
        }
        Ok(())
    }

    /// Acknowledges a write under its durability; releases the session
    /// lock before waiting for a group sync.
    fn finish_write(&self, w: Writing<'_>, upto: u64) -> Result<(), AppendError> {
        let Writing {
            durability,
            flight,
            g,
        } = w;
        match durability {
            Durability::Sync => {
                drop(flight);
                self.log.sync()?;
                self.commit.synced(upto);
                drop(g);
                Ok(())
            }
            Durability::Group => {
                // Written under the lock: records `< upto` are all written.
                drop(g);
                self.commit.commit(&*self.log, upto, flight)
            }
            Durability::Buffered => {
                // Nothing waits for it: `Session::sync` notes it written.
                drop(flight);
                drop(g);
                Ok(())
            }
        }
    }

    /// How the group syncs of this handle went: the records each covered
    /// ([`Durability::Group`] appends and [`Session::sync`]).
    pub fn commit_stats(&self) -> CommitStats {
        self.commit.stats()
    }
}
