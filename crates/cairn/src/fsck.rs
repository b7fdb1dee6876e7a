//! Verification and salvage of a stored session, on any backend.
//!
//! [`check`] asks two questions. First, does the session open? It runs the
//! real read-only open ([`Session::open`], the same code every reader and
//! writer runs), so fsck reports damage exactly when an open refuses the
//! session, with the open's own line, offset and words, and calls a tail
//! torn exactly when the backend does. Second, what else is wrong? It reads
//! every stored line through [`Backend::stored_lines`] (damaged ones
//! included), checks framing, `seq`, the header and the payload of every
//! record, then replays every intact record into a fresh in-memory session
//! through the normal append path, so each append-time invariant (parents,
//! ids, tool results, compactions, labels) is checked by the same code that
//! enforces it when writing. [`salvage_session`] does the same into a new
//! session file and keeps what it can: it never touches the original.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::Durability;
use crate::backend::{Access, Backend, FileBackend, MemoryBackend, TornTail};
use crate::error::{AppendError, IoFailure, OpenError};
use crate::frame::{self, Class, Frame};
use crate::id::{EntryId, SessionId};
use crate::record::{Body, FORMAT_VERSION, Header};
use crate::session::{NewEntry, Parent, Session, WRITER};

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Opening refuses the session: the problem an open stops at (its own
    /// words), and any other damaged line that is not part of a torn tail.
    /// Present exactly when an open refuses the session.
    Damaged,
    /// Damaged bytes the backend classifies as a torn tail: a write open
    /// cuts them (a crash mid-append, or a writer appending right now).
    TornTail,
    /// An intact record that breaks a rule: one an open would refuse next,
    /// after an earlier problem it stops at; or one an open does not look at
    /// (a payload off the current branch, an append-time invariant).
    Invalid,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// 1-based line number in the file.
    pub line: u64,
    /// Byte offset of the line.
    pub offset: u64,
    /// The record's `seq`, when it could be read.
    pub seq: Option<u64>,
    /// How bad it is.
    pub severity: Severity,
    /// What is wrong.
    pub what: String,
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FsckReport {
    /// Where the session lives (its file, for files).
    pub location: String,
    /// Lines whose framing is intact.
    pub records: u64,
    /// Entries that passed every check.
    pub entries: u64,
    /// Size of the stored lines.
    pub bytes: u64,
    /// The error an open gives, when it refuses the session (`None`: it opens).
    pub refused: Option<String>,
    /// The format version of a session written by a newer cairn (which only
    /// a newer cairn can read or salvage).
    pub newer_format: Option<u32>,
    /// Everything wrong, in line order.
    pub problems: Vec<Problem>,
}

impl FsckReport {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// Whether an open refuses the session (some problem is
    /// [`Severity::Damaged`]).
    pub fn is_damaged(&self) -> bool {
        self.problems
            .iter()
            .any(|p| p.severity == Severity::Damaged)
    }
}

/// What [`salvage_session`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SalvageReport {
    /// The new session file.
    pub written: PathBuf,
    /// The session id in it.
    pub session: SessionId,
    /// Records kept (header included).
    pub kept: u64,
    /// Records dropped or changed, with why.
    pub problems: Vec<Problem>,
    /// Entries whose parent was lost and that were attached elsewhere:
    /// (entry, original parent, new parent).
    pub reparented: Vec<(EntryId, EntryId, Option<EntryId>)>,
}

/// Errors of [`salvage_session`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SalvageError {
    /// The source could not be read (or is of a newer format, which only a
    /// newer cairn can salvage), or the target could not be created.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Writing the target failed.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// The target directory is the source's: salvage never writes beside the original.
    #[error("salvage writes a new file: choose an output directory other than {0}")]
    SameDirectory(String),
}

struct Line {
    no: u64,
    offset: u64,
    bytes: Vec<u8>,
    damage: Option<frame::FrameDamage>,
}

/// Every stored line, with its number, offset and framing damage.
fn read_lines(backend: &dyn Backend, id: &SessionId) -> Result<(Vec<Line>, u64), OpenError> {
    let mut offset = 0u64;
    let lines = backend
        .stored_lines(id)?
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| {
            let line = Line {
                no: i as u64 + 1,
                offset,
                damage: frame::check(&bytes).err(),
                bytes,
            };
            offset += line.bytes.len() as u64;
            line
        })
        .collect();
    Ok((lines, offset))
}

/// Why an open refuses a session: where, and in its words.
struct Refusal {
    line: u64,
    offset: u64,
    what: String,
    error: OpenError,
}

/// What the real read-only open says of a session.
struct Verdict {
    refused: Option<Refusal>,
    /// The backend's torn tail, when the session opens.
    torn: Option<TornTail>,
}

impl Verdict {
    /// Opens the session read-only, as every reader does (no lock, no change).
    fn of(backend: &dyn Backend, id: &SessionId) -> Result<Verdict, OpenError> {
        let error = match Session::open(backend, id, Access::Read) {
            Ok(s) => {
                return Ok(Verdict {
                    refused: None,
                    torn: s.open_report().torn.clone(),
                });
            }
            Err(e) => e,
        };
        let (line, offset, what) = match &error {
            OpenError::Damaged(d) => (d.line, d.offset, d.problem.clone()),
            OpenError::NewerFormat {
                found, supported, ..
            } => (
                1,
                0,
                format!(
                    "record format version {found} is newer than this cairn reads ({supported}); \
                     upgrade cairn"
                ),
            ),
            OpenError::NotASession { problem, .. } => {
                (1, 0, format!("not a cairn session: {problem}"))
            }
            // Not the session's content: nothing to report, the check fails.
            OpenError::NotFound { .. }
            | OpenError::AlreadyExists { .. }
            | OpenError::InUse { .. }
            | OpenError::InvalidId(_)
            | OpenError::Io(_) => return Err(error),
        };
        Ok(Verdict {
            refused: Some(Refusal {
                line,
                offset,
                what,
                error,
            }),
            torn: None,
        })
    }
}

/// Verifies a stored session: whether it opens (the open's own verdict),
/// then framing, checksums, `seq`, header, payloads, tree and append-time
/// invariants of every record. Changes nothing.
///
/// # Errors
///
/// Only when the session cannot be read at all (not found, not a regular
/// file, I/O); everything wrong inside it is a [`Problem`] in the report.
pub fn check(backend: &dyn Backend, id: &SessionId) -> Result<FsckReport, OpenError> {
    let (lines, bytes) = read_lines(backend, id)?;
    let verdict = Verdict::of(backend, id)?;
    let location = backend.location(id);
    let mut out = Replay::new(&location, id, &lines, verdict.torn.as_ref());
    out.run(&MemoryBackend::new())?;
    Ok(FsckReport {
        records: lines.iter().filter(|l| l.damage.is_none()).count() as u64,
        entries: out.entries,
        bytes,
        refused: verdict
            .refused
            .as_ref()
            .map(|r| crate::error::with_causes(&r.error)),
        newer_format: match &verdict.refused {
            Some(Refusal {
                error: OpenError::NewerFormat { found, .. },
                ..
            }) => Some(*found),
            _ => None,
        },
        problems: out.problems(verdict.refused.as_ref()),
        location,
    })
}

/// [`check`] of the session file at `path` (named `<session id>.jsonl`).
///
/// # Errors
///
/// A path that cannot name a session file, or as [`check`].
pub fn check_file(path: &Path) -> Result<FsckReport, OpenError> {
    let (store, id) = crate::locate_path(path)?;
    check(&**store.backend(), &id)
}

/// Writes a repaired copy of a stored session into `out_dir` (as
/// `<out_dir>/<session id>.jsonl`): every record that verifies and passes the
/// invariants, re-numbered; entries whose parent was lost attached to their
/// nearest kept ancestor (or made roots); a lost header replaced by a new one
/// naming the same session id (the one asked for: for files, the file's
/// name). The original is never touched, and no lock file is left in
/// `out_dir`.
///
/// # Errors
///
/// [`SalvageError::SameDirectory`] when `out_dir` is the source's directory;
/// [`OpenError::NewerFormat`] for a session of a newer format (only a newer
/// cairn can salvage it); errors reading the source or writing the target.
pub fn salvage_session(
    backend: &dyn Backend,
    id: &SessionId,
    out_dir: &Path,
) -> Result<SalvageReport, SalvageError> {
    let location = backend.location(id);
    let src_dir = Path::new(&location)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let (Ok(a), Ok(b)) = (src_dir.canonicalize(), out_dir.canonicalize())
        && a == b
    {
        return Err(SalvageError::SameDirectory(out_dir.display().to_string()));
    }
    let (lines, _) = read_lines(backend, id)?;
    let verdict = Verdict::of(backend, id)?;
    if let Some(Refusal {
        error: e @ OpenError::NewerFormat { .. },
        ..
    }) = verdict.refused
    {
        return Err(e.into());
    }
    let mut out = Replay::new(&location, id, &lines, verdict.torn.as_ref());
    let target = FileBackend::new(out_dir);
    let session = out.run(&target)?;
    session.sync()?;
    let (written, session_id, kept) = (
        target.path(session.id()),
        session.id().clone(),
        session.len(),
    );
    drop(session);
    // Nobody else knows the new session yet: its lock file is only litter.
    let _ = std::fs::remove_file(target.lock_path(&session_id));
    Ok(SalvageReport {
        written,
        session: session_id,
        kept,
        problems: out.problems(None),
        reparented: out.reparented,
    })
}

/// [`salvage_session`] of the session file at `path` (named `<session id>.jsonl`).
///
/// # Errors
///
/// A path that cannot name a session file, or as [`salvage_session`].
pub fn salvage(path: &Path, out_dir: &Path) -> Result<SalvageReport, SalvageError> {
    let (store, id) = crate::locate_path(path)?;
    salvage_session(&**store.backend(), &id, out_dir)
}

struct Replay<'a> {
    location: &'a str,
    id: &'a SessionId,
    lines: &'a [Line],
    /// Where the backend's torn tail begins: lines from there on are cut.
    torn_from: Option<u64>,
    problems: Vec<Problem>,
    entries: u64,
    reparented: Vec<(EntryId, EntryId, Option<EntryId>)>,
}

impl<'a> Replay<'a> {
    fn new(
        location: &'a str,
        id: &'a SessionId,
        lines: &'a [Line],
        torn: Option<&TornTail>,
    ) -> Replay<'a> {
        Replay {
            location,
            id,
            lines,
            torn_from: torn.map(|t| t.offset),
            problems: Vec::new(),
            entries: 0,
            reparented: Vec::new(),
        }
    }

    fn problem(&mut self, l: &Line, seq: Option<u64>, severity: Severity, what: String) {
        self.problems.push(Problem {
            line: l.no,
            offset: l.offset,
            seq,
            severity,
            what,
        });
    }

    /// The problems in line order, the open's refusal (if any) in place of
    /// whatever the replay said of that line.
    fn problems(&self, refused: Option<&Refusal>) -> Vec<Problem> {
        let mut all = self.problems.clone();
        if let Some(r) = refused {
            let seq = all.iter().find(|p| p.line == r.line).and_then(|p| p.seq);
            all.retain(|p| p.line != r.line);
            all.push(Problem {
                line: r.line,
                offset: r.offset,
                seq,
                severity: Severity::Damaged,
                what: r.what.clone(),
            });
        }
        all.sort_by_key(|p| p.line);
        all
    }

    fn run(&mut self, target: &dyn Backend) -> Result<Session, OpenError> {
        let lines = self.lines;
        let torn_from = self.torn_from;
        let in_torn_tail = |l: &Line| torn_from.is_some_and(|t| l.offset >= t);
        for l in lines {
            match (&l.damage, in_torn_tail(l)) {
                (Some(d), true) => self.problem(l, None, Severity::TornTail, d.to_string()),
                (Some(d), false) => self.problem(l, None, Severity::Damaged, d.to_string()),
                (None, true) => self.problem(
                    l,
                    None,
                    Severity::TornTail,
                    "an intact line inside the torn tail: it is cut with it".into(),
                ),
                (None, false) => {}
            }
        }
        let mut intact = lines
            .iter()
            .filter(|l| l.damage.is_none() && !in_torn_tail(l))
            .peekable();
        let header_line = intact.next_if(|l| l.no == 1);
        let (header, header_ts) = match header_line.map(|l| (l, self.header(l))) {
            Some((l, Ok(h))) => {
                if h.0.session != *self.id {
                    let what = format!(
                        "the header names session {} but {} should hold session {}",
                        h.0.session, self.location, self.id
                    );
                    self.problem(l, Some(0), Severity::Invalid, what);
                }
                h
            }
            Some((l, Err(what))) => {
                self.problem(l, Some(0), Severity::Invalid, what);
                self.fresh_header()
            }
            None => {
                if let Some(l) = lines.first().filter(|l| l.damage.is_none()) {
                    self.problem(l, None, Severity::Invalid, "line 1 is not a header".into());
                }
                self.fresh_header()
            }
        };
        let session = Session::create_with_header(target, header, header_ts)?;
        session.set_durability(Durability::Buffered);
        // For dropped entries: their id → where their children should attach.
        let mut dropped: HashMap<EntryId, Option<EntryId>> = HashMap::new();
        let mut kept: HashSet<EntryId> = HashSet::new();
        for l in intact {
            let frame = match Frame::parse(&l.bytes) {
                Ok(f) => f,
                Err(e) => {
                    self.problem(l, None, Severity::Invalid, e.to_string());
                    continue;
                }
            };
            // The rule of the open: record n is line n + 1.
            if frame.seq != l.no - 1 {
                let what = format!(
                    "its seq is {} but it is record {} (a gap, repeat or reordering)",
                    frame.seq,
                    l.no - 1
                );
                self.problem(l, Some(frame.seq), Severity::Invalid, what);
            }
            let body = match frame.class().and_then(|_| frame::decode_body(&frame)) {
                Ok(b) => b,
                Err(e) => {
                    if let Some(id) = &frame.id {
                        dropped.insert(id.clone(), frame.parent.clone().flatten());
                    }
                    self.problem(l, Some(frame.seq), Severity::Invalid, e.to_string());
                    continue;
                }
            };
            let ts = Some(frame.ts.clone().into_owned());
            match body {
                Body::Header(_) => self.problem(
                    l,
                    Some(frame.seq),
                    Severity::Invalid,
                    "a second header".into(),
                ),
                Body::Op(op) => match session.append_op_at(op, ts, None) {
                    Ok(_) => {}
                    // E.g. the record names an operation whose op_started was
                    // lost to damage: reported and left out, never fatal.
                    Err(AppendError::Invalid(inv)) => {
                        self.problem(l, Some(frame.seq), Severity::Invalid, inv.to_string());
                    }
                    Err(e) => return Err(fatal(e, self.location)),
                },
                Body::Entry(e) => {
                    let id = e.id.clone();
                    let original = e.parent.clone();
                    let mut parent = original.clone();
                    let mut hops = 0;
                    let mut sound = true;
                    // Walk up past dropped entries to the nearest kept one; an
                    // ancestor lost to damage makes the entry a root.
                    while let Some(p) = parent.clone() {
                        if kept.contains(&p) {
                            break;
                        }
                        parent = match dropped.get(&p) {
                            Some(up) if hops <= dropped.len() => up.clone(),
                            Some(_) => None,
                            // Never an entry before this one (missing, later,
                            // or itself): an open refuses it; salvage makes
                            // the entry a root.
                            None => {
                                if hops == 0 {
                                    sound = false;
                                    let lost = lines[..l.no as usize - 1]
                                        .iter()
                                        .any(|d| d.damage.is_some());
                                    let what = format!(
                                        "the parent {p} of entry {id} does not appear before it{}",
                                        if lost {
                                            " (it was in a damaged line, or never existed)"
                                        } else {
                                            ""
                                        }
                                    );
                                    self.problem(l, Some(frame.seq), Severity::Invalid, what);
                                }
                                None
                            }
                        };
                        hops += 1;
                    }
                    let new = NewEntry {
                        id: Some(id.clone()),
                        parent: parent.clone().map_or(Parent::Root, Parent::Entry),
                        body: e.body,
                    };
                    match session.append_entry_at(new, ts, None) {
                        Ok(_) => {
                            kept.insert(id.clone());
                            if sound {
                                self.entries += 1;
                            }
                            if parent != original
                                && let Some(orig) = original
                            {
                                self.reparented.push((id, orig, parent));
                            }
                        }
                        Err(AppendError::Invalid(inv)) => {
                            self.problem(l, Some(frame.seq), Severity::Invalid, inv.to_string());
                            dropped.entry(id).or_insert(parent);
                        }
                        Err(e) => return Err(fatal(e, self.location)),
                    }
                }
            }
        }
        Ok(session)
    }

    fn header(&self, l: &Line) -> Result<(Header, String), String> {
        let frame = Frame::parse(&l.bytes).map_err(|e| e.to_string())?;
        if frame.class().map_err(|e| e.to_string())? != Class::Header {
            return Err("line 1 is not a header".into());
        }
        if frame.seq != 0 {
            return Err(format!("the header's seq is {}, not 0", frame.seq));
        }
        let Body::Header(h) = frame::decode_body(&frame).map_err(|e| e.to_string())? else {
            return Err("line 1 is not a header".into());
        };
        if h.format > FORMAT_VERSION {
            return Err(format!(
                "format version {} is newer than this cairn reads ({FORMAT_VERSION}); upgrade cairn",
                h.format
            ));
        }
        Ok((h, frame.ts.into_owned()))
    }

    /// The header of a replay whose header line is lost: it names the
    /// session the backend was asked for (the file's name, for the file
    /// backend), so that what is derived from the session id — the
    /// idempotency keys of `tool_dispatched` records — is checked against
    /// the right one, not reported wrong.
    fn fresh_header(&self) -> (Header, String) {
        let now = crate::time::now_rfc3339();
        let h = Header {
            format: FORMAT_VERSION,
            session: self.id.clone(),
            created: now.clone(),
            cwd: None,
            title: Some(format!("salvaged from {}", self.location)),
            app_state: serde_json::Value::Object(Default::default()),
            lineage: Default::default(),
            writer: WRITER.to_owned(),
        };
        (h, now)
    }
}

fn fatal(e: AppendError, location: &str) -> OpenError {
    OpenError::Io(IoFailure::new(
        "replay",
        location.to_owned(),
        std::io::Error::other(crate::error::with_causes(&e)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{EntryBody, Message, Role};
    use crate::{Access, Store};

    fn session_with_three(dir: &Path) -> PathBuf {
        let store = Store::open_dir(dir);
        let s = store.create(Default::default()).unwrap();
        for t in ["one", "two", "three"] {
            s.append(EntryBody::Message(Message::text(Role::User, t)))
                .unwrap();
        }
        PathBuf::from(s.location())
    }

    #[test]
    fn clean_session_has_no_problems() {
        let dir = tempfile::tempdir().unwrap();
        let path = session_with_three(dir.path());
        let r = check_file(&path).unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!((r.records, r.entries), (4, 3));
    }

    #[test]
    fn middle_damage_is_reported_and_salvage_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = session_with_three(dir.path());
        let before = std::fs::read(&path).unwrap();
        let mut bytes = before.clone();
        let second = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
        let third = second + bytes[second..].iter().position(|b| *b == b'\n').unwrap() + 1;
        bytes[third - 5] ^= 0x20; // damage entry "one"
        std::fs::write(&path, &bytes).unwrap();
        let r = check_file(&path).unwrap();
        assert_eq!(r.problems[0].severity, Severity::Damaged);
        assert_eq!(r.problems[0].line, 2);
        // "two" lost its parent: salvage attaches it as a root.
        let out = tempfile::tempdir().unwrap();
        let s = salvage(&path, out.path()).unwrap();
        assert_eq!(s.kept, 3);
        assert_eq!(s.reparented.len(), 1);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "the original is never touched"
        );
        let (store, id) = crate::locate_path(&s.written).unwrap();
        let salvaged = store.open(&id, Access::Write).unwrap();
        assert_eq!(salvaged.context().messages().len(), 2);
        assert!(check_file(&s.written).unwrap().is_clean());
    }

    #[test]
    fn salvage_refuses_the_source_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = session_with_three(dir.path());
        assert!(matches!(
            salvage(&path, path.parent().unwrap()),
            Err(SalvageError::SameDirectory(_))
        ));
    }
}
