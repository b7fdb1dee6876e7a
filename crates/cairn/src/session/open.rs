//! Opening a session: one pass over its lines that verifies every frame,
//! `seq` continuity, the header and the tree, then the projection, the
//! session-wide folds and the last operation, decoding only what they need.
//!
//! With a persisted index that still describes the log, the tree, the
//! operation list and the checkpoint come from it and only the lines after it
//! are parsed; the projection starts from the checkpoint when it fits the
//! tree. A writer's open that parsed many lines saves a new index.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::{Inner, OpenReport, Reader, Session, read_record};
use crate::backend::{Access, Backend, IndexStore, IndexedOpen, Log, OpenFrom, RawLine};
use crate::commit::{Durability, GroupCommit};
use crate::error::{Damage, IoFailure, OpenError, ReadError};
use crate::frame::{self, Class, Frame};
use crate::id::SessionId;
use crate::index;
use crate::journal::OpFold;
use crate::kind::{EntryKind, OpKind};
use crate::projection::{Projector, SessionWide};
use crate::record::{Body, FORMAT_VERSION, Header};
use crate::source::EntrySource;
use crate::tree::{BranchFold, Reject, Tree, Walk};

impl Session {
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
        Ok(Session::open_with(backend, id, access, false)?.0)
    }

    /// [`Session::open`]; with `defer`, when the persisted index's
    /// checkpoint stands at the leaf, the context's messages are not read
    /// (then true is returned beside the session, whose context holds no
    /// messages: only [`crate::ContextStream`] opens so, and it never hands
    /// that context out).
    pub(super) fn open_with(
        backend: &dyn Backend,
        id: &SessionId,
        access: Access,
        defer: bool,
    ) -> Result<(Session, bool), OpenError> {
        let loaded = backend.indexes().and_then(|ix| {
            ix.open_index(id)
                .map(|bytes| (ix, index::decode(bytes, id)))
        });
        let note = match loaded {
            Some((ix, Ok(decoded))) => {
                let damage = Arc::clone(&decoded.damage);
                let attempt =
                    Session::open_once(backend, id, access, defer, Some((ix, decoded)), None);
                // A block of the index read during the open did not verify:
                // whatever was opened is dropped (and its lock with it) and
                // the log is read instead.
                match (attempt, damage.get()) {
                    (Ok(Attempt::Opened(s)), None) => return Ok(*s),
                    (Err(e), None) => return Err(e),
                    (Ok(Attempt::Stale(why)), None) => Some(format!("index not used ({why})")),
                    (_, Some(why)) => Some(format!("index not used ({why})")),
                }
            }
            Some((_, Err(why))) => Some(format!("index not used ({why})")),
            None => None,
        };
        Session::open_once(backend, id, access, defer, None, note)?.opened(backend.location(id))
    }

    /// One attempt at an open: through `indexed` (the backend's index store
    /// and the index's decoded head) when given, else by reading the whole
    /// log; `note` is what the open report says of an index not used.
    fn open_once(
        backend: &dyn Backend,
        id: &SessionId,
        access: Access,
        defer: bool,
        indexed: Option<(&dyn IndexStore, index::Decoded)>,
        mut note: Option<String>,
    ) -> Result<Attempt, OpenError> {
        let location = backend.location(id);
        let mut st = Scanned::default();
        let mut checkpoint = None;
        let opened = match indexed {
            Some((ix, decoded)) => {
                st.tree = Tree::from_table(decoded.table);
                st.ops = decoded.ops;
                st.indexed = decoded.prefix.records;
                let mut visit = |raw: RawLine<'_>| st.line(raw, id, &location);
                let from = OpenFrom {
                    id,
                    access,
                    prefix: Some(decoded.prefix),
                };
                match ix.open_from(from, &mut visit)? {
                    IndexedOpen::Opened(o) => {
                        checkpoint = Some(decoded.checkpoint);
                        o
                    }
                    IndexedOpen::Stale(why) => return Ok(Attempt::Stale(why)),
                }
            }
            None => {
                let mut visit = |raw: RawLine<'_>| st.line(raw, id, &location);
                backend.open(id, access, &mut visit)?
            }
        };
        let Scanned {
            mut header,
            tree,
            ops,
            mut last_ts,
            indexed,
        } = st;
        let log = opened.log;
        let records = log.len();
        let read_err = |e: ReadError| match e {
            ReadError::Damaged(d) => OpenError::Damaged(d),
            ReadError::Io { location, source } => {
                OpenError::Io(IoFailure::new("read", location, source))
            }
            ReadError::NoSuchRecord(seq) => OpenError::NotASession {
                location: log.location().to_owned(),
                problem: format!("record {seq} vanished while opening"),
            },
        };
        if indexed > 0 {
            // The indexed lines were not parsed: the header and the time of
            // the last record come from the log itself, checksums verified.
            let line = log.read(0).map_err(read_err)?;
            let frame = Frame::parse(&line).map_err(|e| damaged_at(&location, 0, e.to_string()))?;
            header = Some(header_of(&frame, id, &location)?);
            if last_ts.is_empty() {
                let line = log.read(indexed - 1).map_err(read_err)?;
                let frame = Frame::parse(&line)
                    .map_err(|e| damaged_at(&location, indexed - 1, e.to_string()))?;
                last_ts.push_str(&frame.ts);
            }
        }
        let Some(header) = header else {
            return Err(OpenError::NotASession {
                location,
                problem: "it has no header".into(),
            });
        };
        let reader = Reader {
            log: &*log,
            tree: &tree,
        };
        let (proj, wide, restored, deferred) =
            project(&header, &tree, &reader, checkpoint, defer).map_err(read_err)?;
        // Only a writer saves: its open has made the whole log durable (a
        // reader may see lines a writer has not synced yet).
        let mut indexed_now = indexed;
        if access == Access::Write
            && records - indexed >= index::INDEX_AFTER_RECORDS
            && log.keeps_index()
        {
            let saved = match save_index(id, &*log, &tree, &ops, &proj, &wide) {
                Ok(()) => {
                    indexed_now = records;
                    format!(
                        "{records} records ({} parsed now, {indexed} from the old index)",
                        records - indexed
                    )
                }
                Err(e) => format!("not saved: {e}"),
            };
            note = Some(match note {
                Some(stale) => format!("{stale}: rebuilt from the log, {saved}"),
                None => format!("index written: {saved}"),
            });
        } else if indexed > 0 && note.is_none() {
            note = Some(format!(
                "index used: {indexed} records from the index, {} verified after it{}",
                records - indexed,
                if restored {
                    ""
                } else {
                    " (its checkpoint did not fit the tree: the branch was read)"
                }
            ));
        }
        let fold = fold_last_operation(&*log, &ops).map_err(read_err)?;
        let session = Session {
            id: id.clone(),
            header,
            inner: Mutex::new(Inner {
                tree,
                proj,
                wide,
                next_seq: records,
                last_ts,
                ops,
                fold,
                memory: None,
                indexed: indexed_now,
            }),
            log,
            commit: GroupCommit::new(records),
            durability: Mutex::new(Durability::default()),
            report: OpenReport {
                records,
                torn: opened.torn,
                index: note,
            },
        };
        Ok(Attempt::Opened(Box::new((session, deferred))))
    }
}

/// What one attempt at an open gave.
enum Attempt {
    Opened(Box<(Session, bool)>),
    /// The index does not describe the log (why).
    Stale(String),
}

impl Attempt {
    /// The session of an attempt without an index (which reads the whole
    /// log, so is never stale).
    fn opened(self, location: String) -> Result<(Session, bool), OpenError> {
        match self {
            Attempt::Opened(s) => Ok(*s),
            Attempt::Stale(problem) => Err(OpenError::NotASession { location, problem }),
        }
    }
}

/// What the scan of the lines collects: the header, the tree, the
/// operation records and the time of the last record; `indexed` lines came
/// from the persisted index instead.
#[derive(Default)]
struct Scanned {
    header: Option<Header>,
    tree: Tree,
    ops: Vec<(u64, String)>,
    last_ts: String,
    indexed: u64,
}

impl Scanned {
    /// Checks one intact line (framing, `seq` continuity, the header, the
    /// tree) and adds it.
    fn line(&mut self, raw: RawLine<'_>, id: &SessionId, location: &str) -> Result<(), OpenError> {
        let damaged = |problem: String| {
            OpenError::Damaged(Box::new(Damage {
                location: location.to_owned(),
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
            (0, Class::Header) => self.header = Some(header_of(&frame, id, location)?),
            (0, _) => {
                return Err(OpenError::NotASession {
                    location: location.to_owned(),
                    problem: format!("its first record is a {:?}, not a header", frame.kind),
                });
            }
            (_, Class::Header) => return Err(damaged("a second header record".into())),
            (_, Class::Entry) => {
                let (Some(eid), Some(parent)) = (frame.id.clone(), frame.parent.clone()) else {
                    return Err(damaged("an entry without id or parent".into()));
                };
                let kind = EntryKind::from_name(&frame.kind);
                let parent = self
                    .tree
                    .check(&eid, parent.as_ref())
                    .map_err(|r| match r {
                        Reject::DuplicateId => damaged(format!("entry id {eid} is used twice")),
                        Reject::MissingParent => damaged(format!(
                            "the parent {} of entry {eid} does not appear before it",
                            parent.as_ref().map_or("?", |p| p.as_str())
                        )),
                    })?;
                self.tree.insert_checked(frame.seq, eid, parent, kind);
            }
            (_, Class::Op) => self.ops.push((frame.seq, frame.kind.clone().into_owned())),
        }
        self.last_ts.clear();
        self.last_ts.push_str(&frame.ts);
        Ok(())
    }
}

fn damaged_at(location: &str, seq: u64, problem: String) -> OpenError {
    OpenError::Damaged(Box::new(Damage {
        location: location.to_owned(),
        line: seq + 1,
        offset: 0,
        problem,
    }))
}

/// The header in record 0's frame, checked (version, session id).
fn header_of(frame: &Frame<'_>, id: &SessionId, location: &str) -> Result<Header, OpenError> {
    check_header(frame, id, location).map_err(|e| match e {
        HeaderProblem::Newer(found) => OpenError::NewerFormat {
            location: location.to_owned(),
            found,
            supported: FORMAT_VERSION,
        },
        HeaderProblem::Bad(p) => damaged_at(location, 0, p),
    })
}

/// The projection and the session-wide folds at the leaf: from the index's
/// checkpoint when there is one that fits the tree (then only the entries
/// after the index and the messages from the compaction in force on are
/// read), else folded from every entry. Also whether a checkpoint was used,
/// and whether the messages were left out (`defer`, and the checkpoint
/// stands at the leaf: nothing after it to fold).
fn project(
    header: &Header,
    tree: &Tree,
    reader: &Reader<'_>,
    checkpoint: Option<index::Checkpoint>,
    defer: bool,
) -> Result<(Projector, SessionWide, bool, bool), ReadError> {
    let walk = Walk { tree, src: reader };
    let mut deferred = false;
    let (mut proj, mut wide, from) = match checkpoint {
        Some(cp) if cp.labels.values().all(|t| tree.get(t).is_some()) => {
            let proj = match cp.projection {
                Some(saved) => {
                    deferred = defer && tree.last() == Some(saved.leaf);
                    let p = Projector::restore(
                        header.app_state.clone(),
                        saved,
                        tree,
                        reader,
                        !deferred,
                    )?;
                    deferred &= p.is_some();
                    p
                }
                None => Some(Projector::new(header.app_state.clone())),
            };
            let wide = SessionWide {
                labels: cp.labels,
                title: cp.title,
            };
            match proj {
                Some(p) => (p, wide, tree.base_len()),
                None => (
                    Projector::new(header.app_state.clone()),
                    SessionWide::new(header.title.clone()),
                    0,
                ),
            }
        }
        Some(_) | None => (
            Projector::new(header.app_state.clone()),
            SessionWide::new(header.title.clone()),
            0,
        ),
    };
    proj.move_to(tree.last(), walk)?;
    for n in from..tree.len() as u32 {
        let read = match tree.node(n).kind {
            Some(EntryKind::Label) | Some(EntryKind::SessionInfo) => true,
            Some(EntryKind::Message)
            | Some(EntryKind::AppState)
            | Some(EntryKind::Compaction)
            | Some(EntryKind::Checkout)
            | Some(EntryKind::Settings)
            | Some(EntryKind::Custom)
            | None => false,
        };
        if read {
            wide.apply(&reader.entry(n)?.body);
        }
    }
    proj.set_labels(wide.labels.clone());
    Ok((proj, wide, from > 0 || tree.base_len() == 0, deferred))
}

/// Saves the persisted index of every record of `log`, with the
/// checkpoint of the projection and session-wide folds over all of them.
pub(super) fn save_index(
    id: &SessionId,
    log: &dyn Log,
    tree: &Tree,
    ops: &[(u64, String)],
    proj: &Projector,
    wide: &SessionWide,
) -> Result<(), String> {
    let records = log.len();
    let last = log
        .read(records.saturating_sub(1))
        .map_err(|e| crate::error::with_causes(&e))?;
    let mut offsets: Vec<u64> = (0..records).map(|seq| log.offset(seq)).collect();
    offsets.push(log.byte_len());
    // A block of the index in use that failed its check (the tree's rows,
    // or the line lengths the offsets came from) gives nothing to save.
    if let Some(why) = tree.damage() {
        return Err(format!("the persisted index in use {why}"));
    }
    let checkpoint = index::Checkpoint {
        labels: wide.labels.clone(),
        title: wide.title.clone(),
        projection: proj.save(),
    };
    let bytes = index::encode(&index::Source {
        session: id,
        tree,
        ops,
        offsets: &offsets,
        last_line_crc: crc32c::crc32c(&last),
        checkpoint: &checkpoint,
    })
    .ok_or("the session is too large for the index layout (over 2^32 records)")?;
    log.save_index(&bytes);
    Ok(())
}

/// Folds the operation journal from the last `op_started` on: only the last
/// operation decides the verdict and status, so resume reads no more than it.
fn fold_last_operation(log: &dyn Log, ops: &[(u64, String)]) -> Result<OpFold, ReadError> {
    let mut fold = OpFold::default();
    let start = ops
        .iter()
        .rev()
        .find(|(_, k)| OpKind::from_name(k) == Some(OpKind::OpStarted))
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
