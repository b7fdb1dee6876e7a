//! An open session: its log, the tree index, the incremental projection, and
//! the append path that checks every invariant before anything is written.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;

use crate::backend::{Access, Backend, Log, RawLine, TornTail};
use crate::commit::{Durability, GroupCommit};
use crate::error::{AppendError, Damage, Invalid, LookupError, OpenError, ReadError};
use crate::frame::{self, Body, Class, Frame};
use crate::id::{self, EntryId, SessionId};
use crate::journal::OpFold;
use crate::memory::{MemoryConfig, MemoryTracker, SessionMemory};
use crate::projection::{CheckError, Context, EntrySource, Projector};
use crate::record::{
    Checkout, Entry, EntryBody, FORMAT_VERSION, Header, Label, Lineage, OpRecord, Role,
};
use crate::tree::{Kind, Reject, Tree};

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
}

/// A decoded record with its position and time.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Position in the session.
    pub seq: u64,
    /// When it was written.
    pub ts: String,
    /// What it holds.
    pub body: Body,
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
    labels: BTreeMap<String, EntryId>,
    title: Option<String>,
    next_seq: u64,
    last_ts: String,
    /// Seqs and kinds of operation-journal records.
    ops: Vec<(u64, String)>,
    /// The operation journal folded up to the last operation.
    fold: OpFold,
    /// Session memory, once enabled.
    memory: Option<MemoryTracker>,
}

/// Reads entries through the log for the projector.
struct Reader<'a> {
    log: &'a dyn Log,
    tree: &'a Tree,
}

impl EntrySource for Reader<'_> {
    fn entry(&self, node: u32) -> Result<Entry, ReadError> {
        let seq = self.tree.node(node).seq;
        match read_record(self.log, seq)?.body {
            Body::Entry(e) => Ok(e),
            Body::Header(_) | Body::Op(_) => Err(ReadError::NoSuchRecord(seq)),
        }
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
                labels: BTreeMap::new(),
                title: header.title.clone(),
                next_seq: 1,
                last_ts: created,
                ops: Vec::new(),
                fold: OpFold::default(),
                memory: None,
            }),
            id,
            header,
            log,
            commit: GroupCommit::new(1),
            durability: Mutex::new(Durability::default()),
            report: OpenReport {
                records: 1,
                torn: None,
            },
        })
    }

    /// Opens a session. [`Access::Write`] takes the writer lock and cuts a
    /// torn tail (reported in [`Session::open_report`]); [`Access::Read`]
    /// changes nothing.
    ///
    /// Every line's checksum and framing, `seq` continuity, and the tree
    /// (every parent present and earlier, no duplicate id) are checked; the
    /// payloads of entries not needed for the current context are not decoded.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotFound`], [`OpenError::InUse`], [`OpenError::Damaged`]
    /// (with line and byte offset), [`OpenError::NewerFormat`],
    /// [`OpenError::NotASession`], or I/O errors.
    pub fn open(
        backend: &dyn Backend,
        id: &SessionId,
        access: Access,
    ) -> Result<Session, OpenError> {
        let location = backend.location(id);
        let mut header: Option<Header> = None;
        let mut tree = Tree::default();
        let mut ops = Vec::new();
        let mut last_ts = String::new();
        let mut visit = |raw: RawLine<'_>| -> Result<(), OpenError> {
            let damaged = |problem: String| {
                OpenError::Damaged(Box::new(Damage {
                    location: location.clone(),
                    line: raw.index + 1,
                    offset: raw.offset,
                    problem,
                }))
            };
            let frame = Frame::parse(raw.bytes).map_err(|e| damaged(e.to_string()))?;
            if frame.seq != raw.index {
                return Err(damaged(format!(
                    "its seq is {} but it is record {} (a gap, repeat or reordering)",
                    frame.seq, raw.index
                )));
            }
            let class = frame.class().map_err(|e| damaged(e.to_string()))?;
            match (raw.index, class) {
                (0, Class::Header) => {
                    let h = check_header(&frame, id, &location).map_err(|e| match e {
                        HeaderProblem::Newer(found) => OpenError::NewerFormat {
                            location: location.clone(),
                            found,
                            supported: FORMAT_VERSION,
                        },
                        HeaderProblem::Bad(p) => damaged(p),
                    })?;
                    header = Some(h);
                }
                (0, _) => {
                    return Err(OpenError::NotASession {
                        location: location.clone(),
                        problem: format!("its first record is a {:?}, not a header", frame.kind),
                    });
                }
                (_, Class::Header) => return Err(damaged("a second header record".into())),
                (_, Class::Entry) => {
                    let (Some(eid), Some(parent)) = (frame.id.clone(), frame.parent.clone()) else {
                        return Err(damaged("an entry without id or parent".into()));
                    };
                    let kind = Kind::from_name(&frame.kind);
                    tree.insert(frame.seq, eid.clone(), parent.as_ref(), kind)
                        .map_err(|r| match r {
                            Reject::DuplicateId => damaged(format!("entry id {eid} is used twice")),
                            Reject::MissingParent => damaged(format!(
                                "the parent {} of entry {eid} does not appear before it",
                                parent.as_ref().map_or("?", |p| p.as_str())
                            )),
                        })?;
                }
                (_, Class::Op) => ops.push((frame.seq, frame.kind.clone().into_owned())),
            }
            last_ts.clear();
            last_ts.push_str(&frame.ts);
            Ok(())
        };
        let opened = backend.open(id, access, &mut visit)?;
        let Some(header) = header else {
            return Err(OpenError::NotASession {
                location,
                problem: "it has no header".into(),
            });
        };
        let log = opened.log;
        let records = log.len();
        let read_err = |e: ReadError| match e {
            ReadError::Damaged(d) => OpenError::Damaged(d),
            ReadError::Io { location, source } => OpenError::Io {
                action: "read",
                location,
                source,
            },
            ReadError::NoSuchRecord(seq) => OpenError::NotASession {
                location: log.location().to_owned(),
                problem: format!("record {seq} vanished while opening"),
            },
        };
        let mut proj = Projector::new(header.app_state.clone());
        let mut labels = BTreeMap::new();
        let mut title = header.title.clone();
        {
            let reader = Reader {
                log: &*log,
                tree: &tree,
            };
            proj.move_to(&tree, tree.last(), &reader)
                .map_err(read_err)?;
            for (n, node) in tree.nodes().iter().enumerate() {
                match node.kind {
                    Kind::Label => {
                        if let EntryBody::Label(l) = reader.entry(n as u32).map_err(read_err)?.body
                        {
                            apply_label(&mut labels, l);
                        }
                    }
                    Kind::SessionInfo => {
                        if let EntryBody::SessionInfo(i) =
                            reader.entry(n as u32).map_err(read_err)?.body
                            && i.title.is_some()
                        {
                            title = i.title;
                        }
                    }
                    _ => {}
                }
            }
        }
        proj.set_labels(labels.clone());
        let fold = fold_last_operation(&*log, &ops).map_err(read_err)?;
        Ok(Session {
            id: id.clone(),
            header,
            inner: Mutex::new(Inner {
                tree,
                proj,
                labels,
                title,
                next_seq: records,
                last_ts,
                ops,
                fold,
                memory: None,
            }),
            log,
            commit: GroupCommit::new(records),
            durability: Mutex::new(Durability::default()),
            report: OpenReport {
                records,
                torn: opened.torn,
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

    /// The current context. O(1): a shared snapshot that later appends do not change.
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
        tracker.move_to(&inner.tree, inner.proj.leaf(), &reader)?;
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
        inner.tree.last().map(|n| inner.tree.node(n).id.clone())
    }

    /// The branch: entry ids from the root to the leaf.
    pub fn branch(&self) -> Vec<EntryId> {
        let inner = lock(&self.inner);
        inner
            .proj
            .path()
            .iter()
            .map(|&n| inner.tree.node(n).id.clone())
            .collect()
    }

    /// The title: the latest `session_info` title, else the header's.
    pub fn title(&self) -> Option<String> {
        lock(&self.inner).title.clone()
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

    /// The time of the last record.
    pub fn updated(&self) -> String {
        lock(&self.inner).last_ts.clone()
    }

    /// Labels: name → entry.
    pub fn labels(&self) -> BTreeMap<String, EntryId> {
        lock(&self.inner).labels.clone()
    }

    /// Every entry as the index knows it, in append order.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let inner = lock(&self.inner);
        inner
            .tree
            .nodes()
            .iter()
            .map(|n| NodeInfo {
                id: n.id.clone(),
                parent: n.parent.map(|p| inner.tree.node(p).id.clone()),
                seq: n.seq,
                kind: kind_name(n.kind),
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
            .map(|c| inner.tree.node(c).id.clone())
            .collect()
    }

    /// Resolves an entry reference: a full id, then a label, then a unique id prefix.
    ///
    /// # Errors
    ///
    /// [`LookupError::NotFound`] or [`LookupError::Ambiguous`] (listing candidates).
    pub fn resolve(&self, query: &str) -> Result<EntryId, LookupError> {
        let inner = lock(&self.inner);
        if let Some(n) = inner.tree.get_str(query) {
            return Ok(inner.tree.node(n).id.clone());
        }
        if let Some(id) = inner.labels.get(query) {
            return Ok(id.clone());
        }
        let n = inner.tree.resolve_prefix(query)?;
        Ok(inner.tree.node(n).id.clone())
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
                    .nodes()
                    .iter()
                    .filter(|n| n.kind == Kind::Message)
                    .map(|n| n.seq),
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
                .nodes()
                .iter()
                .filter(|n| n.kind == Kind::Message)
                .map(|n| n.seq)
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

    /// Appends an entry at the leaf with a generated id.
    ///
    /// # Errors
    ///
    /// As [`Session::append_entry`].
    pub fn append(&self, body: EntryBody) -> Result<Appended, AppendError> {
        self.append_entry(NewEntry::at_leaf(body))
    }

    /// Appends an entry, checking first (nothing is written if a check fails):
    /// the parent exists; the id is new; a tool result answers an unanswered
    /// tool call on the entry's branch; a compaction's `first_kept` is on the
    /// branch and separates no call from its result; a label names an entry.
    /// Returns once the record is written under the session's durability.
    ///
    /// # Errors
    ///
    /// [`AppendError::Invalid`] for a failed check, [`AppendError::ReadOnly`],
    /// [`AppendError::Poisoned`], [`AppendError::Io`] (which poisons the handle).
    pub fn append_entry(&self, new: NewEntry) -> Result<Appended, AppendError> {
        self.append_entry_at(new, None, None)
    }

    pub(crate) fn append_entry_at(
        &self,
        new: NewEntry,
        ts: Option<String>,
        durability: Option<Durability>,
    ) -> Result<Appended, AppendError> {
        let durability = durability.unwrap_or_else(|| self.durability());
        let mut g = lock(&self.inner);
        self.check_writable()?;
        let inner = &mut *g;
        let parent = match new.parent {
            Parent::Leaf => inner.tree.last().map(|n| inner.tree.node(n).id.clone()),
            Parent::Root => None,
            Parent::Entry(p) => Some(p),
        };
        let id = match new.id {
            Some(id) => id,
            None => loop {
                let id = EntryId::random();
                if inner.tree.get(&id).is_none() {
                    break id;
                }
            },
        };
        let parent_node = inner
            .tree
            .check(&id, parent.as_ref())
            .map_err(|r| match r {
                Reject::DuplicateId => Invalid::DuplicateId(id.to_string()),
                Reject::MissingParent => Invalid::MissingParent(
                    parent
                        .as_ref()
                        .map_or_else(String::new, ToString::to_string),
                ),
            })?;
        let entry = Entry {
            id,
            parent,
            body: new.body,
        };
        match &entry.body {
            EntryBody::Label(l) => check_label(&inner.tree, &inner.labels, l)?,
            EntryBody::Custom(c) if c.namespace.is_empty() => {
                return Err(Invalid::Other("a custom entry needs a namespace".into()).into());
            }
            _ => {}
        }
        inner.fold.check_entry(&entry)?;
        let old_leaf = inner.proj.leaf();
        let reader = Reader {
            log: &*self.log,
            tree: &inner.tree,
        };
        inner.proj.move_to(&inner.tree, parent_node, &reader)?;
        if let Err(e) = inner.proj.check(&inner.tree, &entry, &reader) {
            inner.proj.move_to(&inner.tree, old_leaf, &reader)?;
            return Err(match e {
                CheckError::Invalid(i) => i.into(),
                CheckError::Read(r) => r.into(),
            });
        }
        let seq = inner.next_seq;
        let ts = ts.unwrap_or_else(crate::time::now_rfc3339);
        let line = frame::encode_entry(seq, &ts, &entry);
        if let Err(e) = self.log.append(std::slice::from_ref(&line)) {
            let _ = inner.proj.move_to(&inner.tree, old_leaf, &reader);
            return Err(e);
        }
        inner.next_seq += 1;
        inner.last_ts = ts;
        let node = match inner.tree.insert(
            seq,
            entry.id.clone(),
            entry.parent.as_ref(),
            kind_of(&entry.body),
        ) {
            Ok(n) => n,
            Err(_) => return Err(Invalid::Other("the tree rejected a checked entry".into()).into()),
        };
        let reader = Reader {
            log: &*self.log,
            tree: &inner.tree,
        };
        inner.fold.apply_entry(&entry);
        if let Some(m) = inner.memory.as_mut() {
            let parent = inner.tree.node(node).parent;
            if parent == m.leaf() {
                m.push(node, &entry);
            } else {
                m.move_to(&inner.tree, Some(node), &reader)?;
            }
        }
        match &entry.body {
            EntryBody::Label(l) => {
                apply_label(&mut inner.labels, l.clone());
                inner.proj.set_labels(inner.labels.clone());
            }
            EntryBody::SessionInfo(i) if i.title.is_some() => inner.title = i.title.clone(),
            _ => {}
        }
        let appended = Appended {
            seq,
            id: Some(entry.id.clone()),
        };
        // Last: the projection takes the entry (a message moves into the context).
        inner.proj.push(&inner.tree, node, entry, &reader)?;
        self.finish_write(g, seq + 1, durability)?;
        Ok(appended)
    }

    /// Appends an operation-journal record.
    ///
    /// # Errors
    ///
    /// [`AppendError::ReadOnly`], [`AppendError::Poisoned`], [`AppendError::Io`].
    pub fn append_op(&self, op: OpRecord) -> Result<Appended, AppendError> {
        let durability = match op {
            // T1 is on disk before the tool starts, whatever the session's mode.
            OpRecord::ToolDispatched(_) => Some(Durability::Sync),
            _ => None,
        };
        self.append_op_at(op, None, durability)
    }

    pub(crate) fn append_op_at(
        &self,
        op: OpRecord,
        ts: Option<String>,
        durability: Option<Durability>,
    ) -> Result<Appended, AppendError> {
        let durability = durability.unwrap_or_else(|| self.durability());
        let mut g = lock(&self.inner);
        self.check_writable()?;
        {
            let inner = &*g;
            inner.fold.check_op(&op, &inner.tree, &inner.proj)?;
        }
        let seq = g.next_seq;
        let ts = ts.unwrap_or_else(crate::time::now_rfc3339);
        let kind = op.kind().to_owned();
        let line = frame::encode_op(seq, &ts, &op);
        self.log.append(std::slice::from_ref(&line))?;
        g.next_seq += 1;
        g.last_ts = ts;
        g.ops.push((seq, kind));
        g.fold.apply_op(&op);
        self.finish_write(g, seq + 1, durability)?;
        Ok(Appended { seq, id: None })
    }

    /// Moves the leaf: appends a `checkout` entry whose parent is `target`
    /// (`None`: before the first entry), recording the leaf it came from and
    /// an optional summary of the branch left behind (shown to the model).
    ///
    /// # Errors
    ///
    /// As [`Session::append_entry`]; [`Invalid::MissingParent`] for an unknown target.
    pub fn checkout(
        &self,
        target: Option<&EntryId>,
        summary: Option<String>,
    ) -> Result<Appended, AppendError> {
        let from = self.leaf();
        self.append_entry(NewEntry {
            id: None,
            parent: target.map_or(Parent::Root, |t| Parent::Entry(t.clone())),
            body: EntryBody::Checkout(Checkout { from, summary }),
        })
    }

    /// Sets (or with `target: None`, removes) a label.
    ///
    /// # Errors
    ///
    /// As [`Session::append_entry`]; [`Invalid::Label`] for a bad name, an
    /// unknown target, or removing a label that does not exist.
    pub fn label(&self, name: &str, target: Option<&EntryId>) -> Result<Appended, AppendError> {
        self.append(EntryBody::Label(Label {
            name: name.to_owned(),
            target: target.cloned(),
        }))
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
    pub(crate) fn find_call(&self, call_id: &str) -> Option<(String, Value)> {
        let ctx = self.context();
        ctx.messages().iter().rev().find_map(|m| {
            m.message()
                .tool_calls()
                .find(|(id, _, _)| *id == call_id)
                .map(|(_, name, args)| (name.to_owned(), args.clone()))
        })
    }

    fn check_writable(&self) -> Result<(), AppendError> {
        if !self.log.is_writer() {
            return Err(AppendError::ReadOnly {
                session: self.id.to_string(),
            });
        }
        Ok(())
    }

    /// Acknowledges a write under `durability`; releases the session lock
    /// before waiting for a group sync.
    fn finish_write(
        &self,
        g: MutexGuard<'_, Inner>,
        upto: u64,
        durability: Durability,
    ) -> Result<(), AppendError> {
        match durability {
            Durability::Sync => {
                self.log.sync()?;
                self.commit.synced(upto);
                drop(g);
                Ok(())
            }
            Durability::Group => {
                self.commit.written(upto);
                drop(g);
                self.commit.wait_durable(&*self.log, upto)
            }
            Durability::Buffered => {
                self.commit.written(upto);
                drop(g);
                Ok(())
            }
        }
    }
}

/// Folds the operation journal from the last `op_started` on: only the last
/// operation decides the verdict and status, so resume reads no more than it.
fn fold_last_operation(log: &dyn Log, ops: &[(u64, String)]) -> Result<OpFold, ReadError> {
    let mut fold = OpFold::default();
    let start = ops
        .iter()
        .rev()
        .find(|(_, k)| k == "op_started")
        .map(|(s, _)| *s);
    if let Some(start) = start {
        for seq in start..log.len() {
            fold.apply(&read_record(log, seq)?.body);
        }
    }
    Ok(fold)
}

enum HeaderProblem {
    Newer(u32),
    Bad(String),
}

fn check_header(
    frame: &Frame<'_>,
    id: &SessionId,
    location: &str,
) -> Result<Header, HeaderProblem> {
    // Look at the version before anything else: a newer header may not decode.
    let version = serde_json::from_str::<Value>(frame.data.get())
        .ok()
        .and_then(|v| v.get("format").and_then(Value::as_u64));
    match version {
        Some(v) if v > u64::from(FORMAT_VERSION) => {
            return Err(HeaderProblem::Newer(u32::try_from(v).unwrap_or(u32::MAX)));
        }
        Some(_) => {}
        None => {
            return Err(HeaderProblem::Bad(
                "the header has no format version".into(),
            ));
        }
    }
    let header = match frame::decode_body(frame) {
        Ok(Body::Header(h)) => h,
        Ok(_) => return Err(HeaderProblem::Bad("record 0 is not a header".into())),
        Err(e) => return Err(HeaderProblem::Bad(format!("the header is not valid: {e}"))),
    };
    if &header.session != id {
        return Err(HeaderProblem::Bad(format!(
            "the header names session {} but {location} should hold session {id}",
            header.session
        )));
    }
    Ok(header)
}

fn check_label(tree: &Tree, labels: &BTreeMap<String, EntryId>, l: &Label) -> Result<(), Invalid> {
    let bad = |problem: String| Invalid::Label {
        name: l.name.clone(),
        problem,
    };
    if !id::is_name(&l.name) {
        return Err(bad(
            "a label name is 1 to 64 characters of A-Z, a-z, 0-9, '-', '_' and '.'".into(),
        ));
    }
    match &l.target {
        Some(t) if tree.get(t).is_none() => Err(bad(format!(
            "its target {t} is not an entry of this session"
        ))),
        None if !labels.contains_key(&l.name) => {
            Err(bad("there is no such label to remove".into()))
        }
        _ => Ok(()),
    }
}

fn apply_label(labels: &mut BTreeMap<String, EntryId>, l: Label) {
    match l.target {
        Some(t) => {
            labels.insert(l.name, t);
        }
        None => {
            labels.remove(&l.name);
        }
    }
}

fn kind_of(body: &EntryBody) -> Kind {
    match body {
        EntryBody::Message(_) => Kind::Message,
        EntryBody::AppState(_) => Kind::AppState,
        EntryBody::Compaction(_) => Kind::Compaction,
        EntryBody::Checkout(_) => Kind::Checkout,
        EntryBody::Settings(_) => Kind::Settings,
        EntryBody::Label(_) => Kind::Label,
        EntryBody::SessionInfo(_) => Kind::SessionInfo,
        EntryBody::Custom(_) => Kind::Custom,
        EntryBody::Ignored(_) => Kind::Ignored,
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Message => "message",
        Kind::AppState => "app_state",
        Kind::Compaction => "compaction",
        Kind::Checkout => "checkout",
        Kind::Settings => "settings",
        Kind::Label => "label",
        Kind::SessionInfo => "session_info",
        Kind::Custom => "custom",
        Kind::Ignored => "ignored",
    }
}
