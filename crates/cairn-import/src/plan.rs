//! One import of one source file, as a plan and its appliers.
//!
//! [`Plan::read`] reads the file and decides, from the ledger, what the
//! import is: unchanged (nothing to do), new, grown (only the lines after
//! what an earlier import consumed are new) or rewritten; it parses the
//! lines and notes the damaged ones. A grown source is applied to the
//! session its earlier import wrote ([`apply_grown`]: the consumed lines are
//! replayed first, so the converter's state is what it was, then the new
//! lines appended). Anything else becomes a new session ([`apply_new`]),
//! built whole in memory, linked to the session its parent was imported
//! into (importing that parent first), and stored at once, so a failed
//! import leaves none. [`Plan::settle`] records the import in the ledger and
//! makes its report.

use std::path::{Path, PathBuf};

use cairn::{
    Access, Durability, EntryId, ForkOrigin, ImportOrigin, Lineage, MemoryBackend, NewSession,
    Session, SessionId, Store,
};
use serde_json::Value;

use crate::builder::Builder;
use crate::lineage::{self, Link};
use crate::{
    Convert, Error, FileReport, Format, Ledger, Note, NoteKind, Options, Outcome, Source, Start,
    converter, detect, parse_lines, sha256_hex,
};

/// [`crate::import_file`], `depth` parents down from the file first named.
pub(crate) fn import_at(
    store: &Store,
    ledger: &mut Ledger,
    path: &Path,
    opts: &Options,
    depth: u32,
) -> Result<FileReport, Error> {
    let mut plan = match Plan::read(store, ledger, path, opts)? {
        Planned::Unchanged(report) => return Ok(report),
        Planned::Import(plan) => plan,
    };
    let mut conv = converter(plan.format);
    let start = plan.start(&mut *conv)?;
    let applied = match plan.resume.clone() {
        Some(k) => apply_grown(store, &mut plan, &mut *conv, &start, &k, opts)?,
        None => apply_new(store, ledger, &mut plan, &mut *conv, &start, opts, depth)?,
    };
    plan.settle(ledger, applied, opts)
}

/// What [`Plan::read`] found.
enum Planned {
    /// The ledger says the file was imported as it is: nothing to do.
    Unchanged(FileReport),
    /// Lines to import.
    Import(Box<Plan>),
}

/// One file to import: what it is, and its lines.
struct Plan {
    /// The source's canonical path.
    canonical: PathBuf,
    /// The ledger's key (the canonical path, as text).
    key: String,
    /// The file's name, for the builder's notes.
    file_name: String,
    /// The whole file as read.
    bytes: Vec<u8>,
    /// The byte count of its complete lines (up to the last newline).
    complete: usize,
    /// The SHA-256 of `bytes`.
    file_sha256: String,
    format: Format,
    outcome: Outcome,
    /// The ledger's record of the earlier import a grown file continues.
    resume: Option<Source>,
    /// The lines that earlier import consumed (replayed, not written again).
    old_lines: Vec<(u64, Value)>,
    /// The lines to import.
    new_lines: Vec<(u64, Value)>,
    /// How many lines to import parsed (the report's `lines`).
    new_parsed: u64,
    /// The 1-based line of the first new line.
    first_new_line: u64,
    /// The 1-based line after the last complete one.
    last_line: u64,
    /// Notes on damaged lines (and, after applying, every note).
    damaged: Vec<Note>,
}

/// What applying a plan wrote.
struct Applied {
    session: SessionId,
    written: u64,
    notes: Vec<Note>,
    /// The parent reference a new session could not be linked to.
    unlinked: Option<String>,
    /// The parents imported first.
    also: Vec<FileReport>,
}

impl Plan {
    /// Reads the file and decides what importing it means.
    fn read(store: &Store, ledger: &Ledger, path: &Path, opts: &Options) -> Result<Planned, Error> {
        let canonical: PathBuf = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let key = canonical.display().to_string();
        let bytes = std::fs::read(&canonical).map_err(|source| Error::Read {
            path: key.clone(),
            source,
        })?;
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let file_sha256 = sha256_hex(&bytes);
        let known = ledger
            .get(&key)
            .filter(|s| {
                SessionId::parse(&s.session).is_ok_and(|id| store.open(&id, Access::Read).is_ok())
            })
            .cloned();
        let format = match (opts.format, &known) {
            (Some(f), _) => f,
            (None, Some(k)) => Format::from_name(&k.format).unwrap_or(Format::Pi),
            (None, None) => detect(&bytes).map_err(|problem| Error::UnknownFormat {
                path: key.clone(),
                problem,
            })?,
        };
        let mut outcome = Outcome::New;
        let mut resume = None;
        if let Some(k) = known.as_ref().filter(|k| k.format == format.name()) {
            let end = usize::try_from(k.consumed).unwrap_or(usize::MAX);
            if k.file_sha256 == file_sha256 && (k.finished || opts.live) {
                return Ok(Planned::Unchanged(FileReport {
                    path: key,
                    format: format.name(),
                    outcome: Outcome::Unchanged,
                    session: k.session.clone(),
                    written: 0,
                    lines: 0,
                    notes: Vec::new(),
                    also: Vec::new(),
                }));
            }
            if end <= complete && sha256_hex(&bytes[..end]) == k.consumed_sha256 {
                outcome = Outcome::Grown;
                resume = Some(k.clone());
            } else {
                outcome = Outcome::Rewritten;
            }
        }
        let old_end = resume
            .as_ref()
            .map_or(0, |k| usize::try_from(k.consumed).unwrap_or(usize::MAX));
        let newlines = |b: &[u8]| b.iter().filter(|b| **b == b'\n').count() as u64;
        let old = parse_lines(&bytes[..old_end], 1);
        let first_new_line = 1 + newlines(&bytes[..old_end]);
        let new = parse_lines(&bytes[old_end..complete], first_new_line);
        let last_line = first_new_line + newlines(&bytes[old_end..complete]);
        let mut damaged = new.damaged;
        if complete < bytes.len() && !opts.live {
            damaged.push(Note {
                line: Some(last_line),
                kind: NoteKind::Damaged,
                message: format!(
                    "the last line has no newline ({} bytes: a torn write, or a writer still appending): skipped; an import after it is complete reads it",
                    bytes.len() - complete
                ),
            });
        }
        if opts.strict && !damaged.is_empty() {
            return Err(Error::Strict {
                path: key,
                notes: damaged,
            });
        }
        let file_name = canonical
            .file_name()
            .map_or_else(|| key.clone(), |n| n.to_string_lossy().into_owned());
        Ok(Planned::Import(Box::new(Plan {
            canonical,
            key,
            file_name,
            bytes,
            complete,
            file_sha256,
            format,
            outcome,
            resume,
            old_lines: old.lines,
            new_parsed: new.lines.len() as u64,
            new_lines: new.lines,
            first_new_line,
            last_line,
            damaged,
        })))
    }

    /// What the converter reads from the first records, and the subagent
    /// link a Claude Code transcript's path gives.
    fn start(&self, conv: &mut dyn Convert) -> Result<Start, Error> {
        let first: Vec<(u64, Value)> = self
            .old_lines
            .iter()
            .chain(self.new_lines.iter())
            .take(8)
            .cloned()
            .collect();
        let mut start = conv.start(&first).map_err(|problem| Error::NotThisFormat {
            path: self.key.clone(),
            format: self.format.name(),
            problem,
        })?;
        if self.format == Format::ClaudeCode
            && let Some(link) = lineage::claude_subagent(&self.canonical)
        {
            if let Link::Spawn { agent_id, .. } = &link {
                start.source_id = Some(agent_id.clone());
            }
            start.link = Some(link);
        }
        Ok(start)
    }

    /// Feeds the new lines to the converter, and finishes the source
    /// unless it is followed live.
    fn convert_new(
        &mut self,
        b: &mut Builder<'_>,
        conv: &mut dyn Convert,
        opts: &Options,
    ) -> Result<(), Error> {
        for (line, v) in std::mem::take(&mut self.new_lines) {
            conv.line(b, line, v)?;
        }
        conv.end_of_input(b, self.last_line)?;
        if !opts.live {
            conv.finish(b, self.last_line)?;
        }
        Ok(())
    }

    /// Records the import in the ledger and makes its report.
    fn settle(
        mut self,
        ledger: &mut Ledger,
        mut applied: Applied,
        opts: &Options,
    ) -> Result<FileReport, Error> {
        let lines = self.new_parsed;
        self.damaged.append(&mut applied.notes);
        self.damaged.sort_by_key(|n| n.line);
        let consumed_sha256 = if self.complete == self.bytes.len() {
            self.file_sha256.clone()
        } else {
            sha256_hex(&self.bytes[..self.complete])
        };
        ledger.record(
            &self.key,
            Source {
                format: self.format.name().to_owned(),
                session: applied.session.to_string(),
                consumed: self.complete as u64,
                consumed_sha256,
                file_sha256: self.file_sha256,
                lines: self.last_line.saturating_sub(1),
                finished: !opts.live,
                unlinked: applied.unlinked,
            },
        )?;
        Ok(FileReport {
            path: self.key,
            format: self.format.name(),
            outcome: self.outcome,
            session: applied.session.to_string(),
            written: applied.written,
            lines,
            notes: self.damaged,
            also: applied.also,
        })
    }
}

/// Appends a grown source's new lines to the session its earlier import
/// wrote, after replaying what that import consumed.
fn apply_grown(
    store: &Store,
    plan: &mut Plan,
    conv: &mut dyn Convert,
    start: &Start,
    k: &Source,
    opts: &Options,
) -> Result<Applied, Error> {
    let id = SessionId::parse(&k.session).map_err(|e| Error::Diverged {
        session: k.session.clone(),
        problem: e.to_string(),
    })?;
    let session = store.open(&id, Access::Write)?;
    session.set_durability(Durability::Buffered);
    let mut b = Builder::new(&session, &plan.file_name, true);
    // A fork that holds only its own items was written after a copy of its
    // parent's branch: replayed first, as it was.
    if let Some(Link::Fork {
        ordinal: Some(_), ..
    }) = &start.link
        && let Some(ForkOrigin {
            session: parent,
            entry: Some(at),
        }) = &session.header().lineage.forked_from
    {
        let parent = store.open(parent, Access::Read)?;
        lineage::copy_branch(&mut b, &parent, at)?;
    }
    let old_last = plan.first_new_line.saturating_sub(1);
    for (line, v) in std::mem::take(&mut plan.old_lines) {
        conv.line(&mut b, line, v)?;
    }
    conv.end_of_input(&mut b, old_last)?;
    if k.finished {
        conv.finish(&mut b, old_last)?;
    }
    b.end_replay();
    plan.convert_new(&mut b, conv, opts)?;
    session.sync().map_err(|e| Error::Write {
        session: id.to_string(),
        source: e,
    })?;
    Ok(Applied {
        session: id,
        written: b.written(),
        notes: b.take_notes(),
        unlinked: k.unlinked.clone(),
        also: Vec::new(),
    })
}

/// Builds a new session in memory from the source's lines, links it to its
/// parent's session, and stores it whole.
fn apply_new(
    store: &Store,
    ledger: &mut Ledger,
    plan: &mut Plan,
    conv: &mut dyn Convert,
    start: &Start,
    opts: &Options,
    depth: u32,
) -> Result<Applied, Error> {
    let id = SessionId::generate();
    let mut notes = lineage::orphans(ledger, &plan.key, plan.format, start.source_id.as_deref());
    let mut also = Vec::new();
    let mut unlinked = None;
    let parent = match &start.link {
        Some(link) => {
            match lineage::link_parent(store, ledger, link, &plan.canonical, opts, depth, &mut also)
            {
                Ok(p) => Some((link, p)),
                Err(why) => {
                    unlinked = Some(link.reference(&plan.canonical));
                    notes.push(Note {
                        line: None,
                        kind: NoteKind::Kept,
                        message: format!(
                            "{}: not linked, {why} (the source header keeps the reference)",
                            link.describe()
                        ),
                    });
                    None
                }
            }
        }
        None => None,
    };
    let copy = parent
        .as_ref()
        .and_then(|(link, p)| Some((p, fork_copy(link, p, &mut notes)?)));
    let mut header = NewSession {
        id: Some(id.clone()),
        title: None,
        cwd: start.cwd.clone(),
        app_state: None,
        lineage: Lineage {
            forked_from: copy.as_ref().map(|(p, at)| ForkOrigin {
                session: p.id().clone(),
                entry: Some(at.clone()),
            }),
            imported_from: Some(Box::new(ImportOrigin {
                format: plan.format.name().to_owned(),
                path: plan.key.clone(),
                sha256: plan.file_sha256.clone(),
                source_id: start.source_id.clone(),
            })),
            ..Lineage::default()
        },
    };
    let staging = MemoryBackend::new();
    let session = Session::create(&staging, header.clone())?;
    session.set_durability(Durability::Buffered);
    let mut b = Builder::new(&session, &plan.file_name, false);
    if let Some((p, at)) = &copy {
        lineage::copy_branch(&mut b, p, at)?;
    }
    plan.convert_new(&mut b, conv, opts)?;
    let mut built = b.take_notes();
    built.append(&mut notes);
    let written = b.written();
    drop(b);
    let mut lines = (0..session.len())
        .map(|seq| session.raw_record(seq))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some((link, p)) = &parent {
        link_header(&mut header, link, p, &session, &mut built)?;
    }
    drop(session);
    if let Some(first) = lines.first_mut()
        && (header.lineage.forked_from.is_some() || header.lineage.parent.is_some())
    {
        // The header is written first; the link is known only now.
        let linked = Session::create(&MemoryBackend::new(), header)?;
        *first = linked.raw_record(0)?;
    }
    drop(store.backend().create_with(&id, &lines)?);
    Ok(Applied {
        session: id,
        written,
        notes: built,
        unlinked,
        also,
    })
}

/// Where a Codex fork that holds only its own items continues a copy of its
/// parent's branch (`None` for any other link, or when the parent's import
/// does not hold the items the fork names: noted).
fn fork_copy(link: &Link, parent: &Session, notes: &mut Vec<Note>) -> Option<EntryId> {
    let Link::Fork {
        ordinal: Some(n), ..
    } = link
    else {
        return None;
    };
    match lineage::codex_fork_point(parent, *n) {
        Some(at) => Some(at),
        None => {
            notes.push(Note {
                line: None,
                kind: NoteKind::Kept,
                message: format!(
                    "forked from session {} after its first {n} rollout items, which its import does not hold: linked, but its history is not copied",
                    parent.id()
                ),
            });
            None
        }
    }
}

/// Puts the link to the parent's session, known once the session is built,
/// into `header`: a fork's point, or the tool call that spawned a subagent.
fn link_header(
    header: &mut NewSession,
    link: &Link,
    parent: &Session,
    session: &Session,
    notes: &mut Vec<Note>,
) -> Result<(), Error> {
    match link {
        Link::Fork { ordinal: None, .. } => {
            header.lineage.forked_from = Some(ForkOrigin {
                session: parent.id().clone(),
                entry: lineage::fork_point(session, parent)?,
            });
        }
        Link::Spawn {
            parent: file,
            agent_id,
            call_id,
        } => match call_id
            .clone()
            .or_else(|| lineage::claude_spawning_call(file, agent_id))
        {
            Some(call) => header.lineage.parent = Some(lineage::spawn_origin(parent, call)),
            None => notes.push(Note {
                line: None,
                kind: NoteKind::Kept,
                message: format!(
                    "subagent {agent_id}: not linked, no tool call of session {} started it",
                    parent.id()
                ),
            }),
        },
        Link::Fork { .. } => {}
    }
    Ok(())
}
