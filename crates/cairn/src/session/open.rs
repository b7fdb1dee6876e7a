//! Opening a session: one pass over its lines that verifies every frame,
//! `seq` continuity, the header and the tree, then the projection, the
//! session-wide folds and the last operation, decoding only what they need.

use std::sync::Mutex;

use serde_json::Value;

use super::{Inner, OpenReport, Reader, Session, read_record};
use crate::backend::{Access, Backend, Log, RawLine};
use crate::commit::{Durability, GroupCommit};
use crate::error::{Damage, IoFailure, OpenError, ReadError};
use crate::frame::{self, Class, Frame};
use crate::id::SessionId;
use crate::journal::OpFold;
use crate::kind::{EntryKind, OpKind};
use crate::projection::{EntrySource, Projector, SessionWide};
use crate::record::{Body, FORMAT_VERSION, Header};
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
                    let kind = EntryKind::from_name(&frame.kind);
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
            ReadError::Io { location, source } => {
                OpenError::Io(IoFailure::new("read", location, source))
            }
            ReadError::NoSuchRecord(seq) => OpenError::NotASession {
                location: log.location().to_owned(),
                problem: format!("record {seq} vanished while opening"),
            },
        };
        let mut proj = Projector::new(header.app_state.clone());
        let mut wide = SessionWide::new(header.title.clone());
        {
            let reader = Reader {
                log: &*log,
                tree: &tree,
            };
            proj.move_to(
                tree.last(),
                Walk {
                    tree: &tree,
                    src: &reader,
                },
            )
            .map_err(read_err)?;
            for (n, node) in tree.nodes().iter().enumerate() {
                let read = match node.kind {
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
                    wide.apply(&reader.entry(n as u32).map_err(read_err)?.body);
                }
            }
        }
        proj.set_labels(wide.labels.clone());
        let fold = fold_last_operation(&*log, &ops).map_err(read_err)?;
        Ok(Session {
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
