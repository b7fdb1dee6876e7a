//! Verification and salvage of a session file.
//!
//! [`check_file`] reads every line, checks framing, `seq`, the header and the
//! payload of every record, then replays every intact record into a fresh
//! in-memory session through the normal append path, so each append-time
//! invariant (parents, ids, tool results, compactions, labels) is checked by
//! the same code that enforces it when writing. [`salvage`] does the same
//! into a new session file and keeps what it can: it never touches the
//! original.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::Durability;
use crate::backend::{Backend, FileBackend, MemoryBackend};
use crate::error::{AppendError, OpenError};
use crate::frame::{self, Class, Frame};
use crate::id::{EntryId, SessionId};
use crate::record::{Body, FORMAT_VERSION, Header};
use crate::session::{NewEntry, Parent, Session, WRITER};

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// A damaged record with intact records after it: opening fails.
    Damaged,
    /// Damaged bytes at the end only: a writer cuts them on open (a crash
    /// mid-append, or a writer appending right now).
    TornTail,
    /// An intact record that breaks an invariant or cannot be decoded.
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

/// What [`check_file`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FsckReport {
    /// The file checked.
    pub location: String,
    /// Lines whose framing is intact.
    pub records: u64,
    /// Entries that passed every check.
    pub entries: u64,
    /// Size of the file.
    pub bytes: u64,
    /// Everything wrong, in file order.
    pub problems: Vec<Problem>,
}

impl FsckReport {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// What [`salvage`] wrote.
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

/// Errors of [`salvage`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SalvageError {
    /// The source could not be read, or the target could not be created.
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

fn read_lines(path: &Path) -> Result<(Vec<Line>, u64), OpenError> {
    let location = path.display().to_string();
    let io = |source| OpenError::Io {
        action: "read",
        location: location.clone(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut lines = Vec::new();
    let mut offset = 0u64;
    loop {
        let mut bytes = Vec::new();
        let n = r.read_until(b'\n', &mut bytes).map_err(io)?;
        if n == 0 {
            break;
        }
        let damage = frame::check(&bytes).err();
        lines.push(Line {
            no: lines.len() as u64 + 1,
            offset,
            bytes,
            damage,
        });
        offset += n as u64;
    }
    Ok((lines, offset))
}

/// Verifies a session file: framing, checksums, `seq`, header, payloads, tree
/// and append-time invariants. Changes nothing.
///
/// # Errors
///
/// Only when the file cannot be read; everything wrong inside it is a
/// [`Problem`] in the report.
pub fn check_file(path: &Path) -> Result<FsckReport, OpenError> {
    let (lines, bytes) = read_lines(path)?;
    let mut out = Replay::new(path, &lines);
    let target = MemoryBackend::new();
    out.run(&target)?;
    Ok(FsckReport {
        location: path.display().to_string(),
        records: lines.iter().filter(|l| l.damage.is_none()).count() as u64,
        entries: out.entries,
        bytes,
        problems: out.problems,
    })
}

/// Writes a repaired copy of the session at `path` into `out_dir` (as
/// `<out_dir>/<session id>.jsonl`): every record that verifies and passes the
/// invariants, re-numbered; entries whose parent was lost attached to their
/// nearest kept ancestor (or made roots); a lost header replaced by a new one
/// with a new session id. The original is never touched.
///
/// # Errors
///
/// [`SalvageError::SameDirectory`] when `out_dir` is the source's directory;
/// errors reading the source or writing the target.
pub fn salvage(path: &Path, out_dir: &Path) -> Result<SalvageReport, SalvageError> {
    let src_dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let (Ok(a), Ok(b)) = (src_dir.canonicalize(), out_dir.canonicalize())
        && a == b
    {
        return Err(SalvageError::SameDirectory(out_dir.display().to_string()));
    }
    let (lines, _) = read_lines(path)?;
    let mut out = Replay::new(path, &lines);
    let target = FileBackend::new(out_dir);
    let session = out.run(&target)?;
    session.sync()?;
    Ok(SalvageReport {
        written: target.path(session.id()),
        session: session.id().clone(),
        kept: session.len(),
        problems: out.problems,
        reparented: out.reparented,
    })
}

struct Replay<'a> {
    path: &'a Path,
    lines: &'a [Line],
    problems: Vec<Problem>,
    entries: u64,
    reparented: Vec<(EntryId, EntryId, Option<EntryId>)>,
}

impl<'a> Replay<'a> {
    fn new(path: &'a Path, lines: &'a [Line]) -> Replay<'a> {
        Replay {
            path,
            lines,
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

    fn run(&mut self, target: &dyn Backend) -> Result<Session, OpenError> {
        let lines = self.lines;
        let last_intact = lines.iter().rposition(|l| l.damage.is_none());
        for (i, l) in lines.iter().enumerate() {
            if let Some(d) = &l.damage {
                let torn = last_intact.is_none_or(|li| i > li);
                let sev = if torn {
                    Severity::TornTail
                } else {
                    Severity::Damaged
                };
                self.problem(l, None, sev, d.to_string());
            }
        }
        let mut intact = lines.iter().filter(|l| l.damage.is_none()).peekable();
        let header_line = intact.next_if(|l| l.no == 1);
        let (header, header_ts) = match header_line.map(|l| (l, self.header(l))) {
            Some((l, Ok(h))) => {
                let stem = self
                    .path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".jsonl"));
                if let Some(stem) = stem.filter(|s| SessionId::parse(s).is_ok())
                    && stem != h.0.session.as_str()
                {
                    let what = format!(
                        "the header names session {} but the file is named {stem}",
                        h.0.session
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
        let mut kept: std::collections::HashSet<EntryId> = std::collections::HashSet::new();
        let mut expected_seq = 1u64;
        for l in intact {
            let frame = match Frame::parse(&l.bytes) {
                Ok(f) => f,
                Err(e) => {
                    self.problem(l, None, Severity::Invalid, e.to_string());
                    continue;
                }
            };
            if frame.seq != expected_seq {
                let what = format!("seq is {} where {expected_seq} was expected", frame.seq);
                self.problem(l, Some(frame.seq), Severity::Invalid, what);
            }
            expected_seq = frame.seq + 1;
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
                    Err(e) => return Err(fatal(e, self.path)),
                },
                Body::Entry(e) => {
                    let original = e.parent.clone();
                    let mut parent = original.clone();
                    let mut hops = 0;
                    // Walk up past dropped entries to the nearest kept one; an
                    // ancestor lost to damage makes the entry a root.
                    while let Some(p) = parent.clone() {
                        if kept.contains(&p) {
                            break;
                        }
                        parent = match dropped.get(&p) {
                            Some(up) if hops <= dropped.len() => up.clone(),
                            _ => None,
                        };
                        hops += 1;
                    }
                    let id = e.id.clone();
                    let new = NewEntry {
                        id: Some(id.clone()),
                        parent: parent.clone().map_or(Parent::Root, Parent::Entry),
                        body: e.body,
                    };
                    match session.append_entry_at(new, ts, None) {
                        Ok(_) => {
                            kept.insert(id.clone());
                            self.entries += 1;
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
                        Err(e) => return Err(fatal(e, self.path)),
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

    fn fresh_header(&self) -> (Header, String) {
        let now = crate::time::now_rfc3339();
        let h = Header {
            format: FORMAT_VERSION,
            session: SessionId::generate(),
            created: now.clone(),
            cwd: None,
            title: Some(format!("salvaged from {}", self.path.display())),
            app_state: serde_json::Value::Object(Default::default()),
            lineage: Default::default(),
            writer: WRITER.to_owned(),
        };
        (h, now)
    }
}

fn fatal(e: AppendError, path: &Path) -> OpenError {
    OpenError::Io {
        action: "replay",
        location: path.display().to_string(),
        source: std::io::Error::other(e.to_string()),
    }
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
