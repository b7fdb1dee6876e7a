//! The one writer every importer goes through: it maps source ids to entry
//! ids, attaches entries whose parent is missing as roots, answers tool calls
//! the source left without a result (`TOOL_OUTCOME_UNKNOWN`), keeps what
//! cairn refuses as an ignorable record, and notes every such decision.
//!
//! Decisions depend only on the source lines read so far, so importing the
//! first N bytes of a file always writes the same entries: a grown file is
//! continued by *replaying* its old part against the session (checking that
//! the session holds those entries, writing nothing) and then writing the new
//! part.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use cairn::{
    AppendError, Block, EntryBody, EntryId, Message, NewEntry, OpRecord, Parent, Role, Session,
    TOOL_OUTCOME_UNKNOWN, Unknown,
};
use serde_json::{Map, Value, json};

use crate::Error;
use crate::report::{Note, NoteKind};

/// The kind of the ignorable entry that keeps what cairn refused to append.
pub const REFUSED_KIND: &str = "import.refused";

/// Where an imported entry attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum At {
    /// A new root.
    Root,
    /// The entry written last.
    Leaf,
    /// The entry the source names by its own id (missing: a root, noted).
    Source(String),
    /// An entry of the session.
    Entry(EntryId),
}

/// One entry to import.
#[derive(Debug, Clone)]
pub struct Item {
    /// The 1-based line of the source it comes from.
    pub line: u64,
    /// The source's id for it (`None`: one is derived from the line).
    pub id: Option<String>,
    /// Its parent.
    pub at: At,
    /// What it records.
    pub body: EntryBody,
    /// The source's time for it, already in the `ts` form.
    pub ts: Option<String>,
    /// The source fields cairn has no place for (the `source` member).
    pub source: Map<String, Value>,
}

/// Writes imported entries into a session (or checks them against it, when
/// replaying what an earlier import wrote).
#[derive(Debug)]
pub struct Builder<'s> {
    session: &'s Session,
    file: String,
    /// The kinds of the entries the session held when the import began
    /// (`None` for a new session): those are checked, not written.
    replay: Option<HashMap<EntryId, &'static str>>,
    /// Whether the source part being read was read by an earlier import.
    replaying: bool,
    ids: HashMap<String, EntryId>,
    used: HashSet<EntryId>,
    /// Tool calls without a result on the branch ending at an entry (only
    /// entries that have some).
    pending: HashMap<EntryId, Rc<Vec<String>>>,
    /// Entries whose open calls were answered by a repair entry under them.
    repaired: HashMap<EntryId, EntryId>,
    leaf: Option<EntryId>,
    written: u64,
    notes: Vec<Note>,
}

impl<'s> Builder<'s> {
    /// A builder writing into `session` (which holds only its header, or
    /// the entries of an earlier import of the same source when `replay`).
    pub fn new(session: &'s Session, file: &str, replay: bool) -> Builder<'s> {
        let replay = replay.then(|| {
            session
                .nodes()
                .into_iter()
                .map(|n| (n.id, n.kind))
                .collect::<HashMap<_, _>>()
        });
        Builder {
            session,
            file: file.to_owned(),
            replaying: replay.is_some(),
            replay,
            ids: HashMap::new(),
            used: HashSet::new(),
            pending: HashMap::new(),
            repaired: HashMap::new(),
            leaf: None,
            written: 0,
            notes: Vec::new(),
        }
    }

    /// Ends the replay of what the earlier import read: from now on
    /// entries are written, except those the session already holds (an
    /// earlier import of the new part that was interrupted before it
    /// recorded its progress), which are checked and skipped.
    pub fn end_replay(&mut self) {
        // Notes of the replayed part were reported by the earlier import.
        self.notes.clear();
        self.replaying = false;
    }

    /// The notes so far.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    /// Records written (not counting a replay).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The entry written last.
    pub fn leaf(&self) -> Option<&EntryId> {
        self.leaf.as_ref()
    }

    /// The entry a source id was imported as.
    pub fn resolve(&self, source_id: &str) -> Option<&EntryId> {
        self.ids.get(source_id)
    }

    /// Makes a source id name an entry already imported (a record the
    /// import folded into another entry).
    pub fn alias(&mut self, source_id: &str, entry: &EntryId) {
        self.ids.insert(source_id.to_owned(), entry.clone());
    }

    /// Adds a note.
    pub fn note(&mut self, line: Option<u64>, kind: NoteKind, message: String) {
        self.notes.push(Note {
            line,
            kind,
            message,
        });
    }

    /// Keeps a source line that is no entry as an ignorable log-only record.
    pub fn log_only(&mut self, kind: &str, data: Value) -> Result<(), Error> {
        if self.replaying {
            return Ok(());
        }
        self.session
            .append_op(OpRecord::Ignored(Unknown {
                kind: kind.to_owned(),
                data,
            }))
            .map_err(|e| self.write_error(e))?;
        self.written += 1;
        Ok(())
    }

    /// Answers the open calls of the leaf's branch as unknown (the end of a
    /// source whose last calls never got a result).
    pub fn finish(&mut self, line: u64) -> Result<(), Error> {
        if let Some(leaf) = self.leaf.clone()
            && self.pending.contains_key(&leaf)
        {
            self.repair(&leaf, line)?;
        }
        Ok(())
    }

    /// Imports one entry; returns its id.
    pub fn entry(&mut self, item: Item) -> Result<EntryId, Error> {
        let Item {
            line,
            id,
            at,
            mut body,
            ts,
            source,
        } = item;
        let mut parent = match at {
            At::Root => None,
            At::Leaf => self.leaf.clone(),
            At::Entry(e) => Some(e),
            At::Source(s) => match self.ids.get(&s) {
                Some(e) => Some(e.clone()),
                None => {
                    self.note(
                        Some(line),
                        NoteKind::Repaired,
                        format!(
                            "parent {s:?} is not in the file (a phantom parent): imported as a root"
                        ),
                    );
                    None
                }
            },
        };
        let answers: Vec<String> = body
            .message()
            .map(|m| m.tool_results().map(str::to_owned).collect())
            .unwrap_or_default();
        // Under an entry whose open calls a repair answered, what answers
        // none of them continues after the repair; a late result of one
        // attaches where the source puts it (and answers the rest as unknown).
        if let Some(r) = parent.as_ref().and_then(|p| self.repaired.get(p)) {
            let open = parent.as_ref().and_then(|p| self.pending.get(p));
            if !open.is_some_and(|o| answers.iter().any(|a| o.contains(a))) {
                parent = Some(r.clone());
            }
        }
        let mut open = parent
            .as_ref()
            .and_then(|p| self.pending.get(p))
            .cloned()
            .unwrap_or_default();
        if let Some(p) = parent.clone()
            && !open.is_empty()
        {
            let answers_some = answers.iter().any(|a| open.contains(a));
            let continues = parent == self.leaf;
            if answers_some {
                if !continues {
                    let rest: Vec<String> = open
                        .iter()
                        .filter(|c| !answers.contains(c))
                        .cloned()
                        .collect();
                    if !rest.is_empty()
                        && let EntryBody::Message(m) = &mut body
                    {
                        for c in &rest {
                            m.content.push(unknown_result(c, &self.file, line));
                        }
                        self.note(
                            Some(line),
                            NoteKind::Repaired,
                            format!(
                                "starts a branch where tool call(s) {} have no result: answered here as {TOOL_OUTCOME_UNKNOWN}",
                                rest.join(", ")
                            ),
                        );
                    }
                }
            } else if !(continues && passes_calls_through(&body)) {
                parent = Some(self.repair(&p, line)?);
                open = Rc::default();
            }
        }
        let id = self.new_id(id.as_deref(), line, 0);
        let kind = body.kind().to_owned();
        let new = NewEntry {
            id: Some(id.clone()),
            parent: parent.clone().map_or(Parent::Root, Parent::Entry),
            body: body.clone(),
        };
        let mut source_member = Map::new();
        if !source.is_empty() {
            source_member.insert("source".into(), Value::Object(source.clone()));
        }
        let stored = self.replay.as_ref().and_then(|r| r.get(&id)).copied();
        let kept = match stored {
            Some(k) if k == kind_or_ignored(&body) => true,
            Some("ignored") => false,
            Some(k) => {
                return Err(self.diverged(format!(
                    "entry {id} is a {k} where the import writes a {kind}"
                )));
            }
            None if self.replaying => {
                return Err(self.diverged(format!("entry {id} (line {line}) is missing")));
            }
            None => match self
                .session
                .append_imported(new, ts.clone(), &source_member)
            {
                Ok(_) => {
                    self.written += 1;
                    true
                }
                Err(AppendError::Invalid(why)) => {
                    self.note(
                        Some(line),
                        NoteKind::Kept,
                        format!("cairn refuses this {kind} ({why}): kept as an ignorable record"),
                    );
                    let data = json!({
                        "kind": kind,
                        "data": crate::entry_data(&body),
                        "refused": why.to_string(),
                        "source": Value::Object(source),
                    });
                    let fallback = NewEntry {
                        id: Some(id.clone()),
                        parent: parent.clone().map_or(Parent::Root, Parent::Entry),
                        body: EntryBody::Ignored(Unknown {
                            kind: REFUSED_KIND.into(),
                            data,
                        }),
                    };
                    self.session
                        .append_imported(fallback, ts, &Map::new())
                        .map_err(|e| self.write_error(e))?;
                    self.written += 1;
                    false
                }
                Err(e) => return Err(self.write_error(e)),
            },
        };
        let mut open = (*open).clone();
        if kept && let EntryBody::Message(m) = &body {
            open.retain(|c| !m.tool_results().any(|r| r == c));
            open.extend(m.tool_calls().map(|(c, _, _)| c.to_owned()));
        }
        if !open.is_empty() {
            self.pending.insert(id.clone(), Rc::new(open));
        }
        self.leaf = Some(id.clone());
        let _ = kind;
        Ok(id)
    }

    /// Appends a result for every open call of the branch ending at `at`,
    /// as a child of `at`; returns its id.
    fn repair(&mut self, at: &EntryId, line: u64) -> Result<EntryId, Error> {
        if let Some(r) = self.repaired.get(at) {
            return Ok(r.clone());
        }
        let calls = self.pending.get(at).cloned().unwrap_or_default();
        let id = self.new_id(Some(&format!("{at}.u")), line, 1);
        let content = calls
            .iter()
            .map(|c| unknown_result(c, &self.file, line))
            .collect();
        let body = message(Role::Tool, content);
        let mut source = Map::new();
        source.insert(
            "repair".into(),
            json!("the source has no result for these calls"),
        );
        let mut member = Map::new();
        member.insert("source".into(), Value::Object(source));
        let stored = self.replay.as_ref().is_some_and(|r| r.contains_key(&id));
        match (stored, self.replaying) {
            (true, _) => {}
            (false, true) => {
                return Err(self.diverged(format!("repair entry {id} is missing")));
            }
            (false, false) => {
                let new = NewEntry {
                    id: Some(id.clone()),
                    parent: Parent::Entry(at.clone()),
                    body,
                };
                self.session
                    .append_imported(new, None, &member)
                    .map_err(|e| self.write_error(e))?;
                self.written += 1;
            }
        }
        self.note(
            Some(line),
            NoteKind::Repaired,
            format!(
                "tool call(s) {} of entry {at} have no result in the source: answered {TOOL_OUTCOME_UNKNOWN} (entry {id})",
                calls.join(", ")
            ),
        );
        self.repaired.insert(at.clone(), id.clone());
        self.leaf = Some(id.clone());
        Ok(id)
    }

    /// An entry id for a source id: the source's own when it is a valid,
    /// unused entry id; else one derived from the line.
    fn new_id(&mut self, source: Option<&str>, line: u64, k: u32) -> EntryId {
        let own = source.and_then(|s| EntryId::parse(s).ok());
        let id = match own {
            Some(id) if !self.used.contains(&id) => id,
            _ => {
                if let Some(s) = source
                    && k == 0
                {
                    let why = if own.is_some() {
                        "is used twice"
                    } else {
                        "is not a valid entry id"
                    };
                    self.note(
                        Some(line),
                        NoteKind::Repaired,
                        format!("id {s:?} {why}: imported under a new id"),
                    );
                }
                let mut n = 0u32;
                loop {
                    let candidate = format!(
                        "L{line}-{k}{}",
                        if n == 0 {
                            String::new()
                        } else {
                            format!("-{n}")
                        }
                    );
                    if let Ok(id) = EntryId::parse(&candidate)
                        && !self.used.contains(&id)
                    {
                        break id;
                    }
                    n += 1;
                }
            }
        };
        if let Some(s) = source
            && k == 0
        {
            self.ids.insert(s.to_owned(), id.clone());
        }
        self.used.insert(id.clone());
        id
    }

    fn diverged(&self, problem: String) -> Error {
        Error::Diverged {
            session: self.session.id().to_string(),
            problem,
        }
    }

    fn write_error(&self, e: AppendError) -> Error {
        Error::Write {
            session: self.session.id().to_string(),
            source: e,
        }
    }
}

fn kind_or_ignored(body: &EntryBody) -> &str {
    match body {
        EntryBody::Ignored(_) => "ignored",
        other => other.kind(),
    }
}

/// Entries that may sit between a tool call and its result without cutting
/// the turn: they show the model nothing.
fn passes_calls_through(body: &EntryBody) -> bool {
    match body {
        EntryBody::Settings(_)
        | EntryBody::Label(_)
        | EntryBody::SessionInfo(_)
        | EntryBody::AppState(_)
        | EntryBody::Ignored(_) => true,
        EntryBody::Custom(c) => !c.visible,
        EntryBody::Message(_) | EntryBody::Compaction(_) | EntryBody::Checkout(_) => false,
    }
}

/// A message entry of `role` holding `content`, with no usage, model or
/// stop reason.
pub fn message(role: Role, content: Vec<Block>) -> EntryBody {
    EntryBody::Message(Message {
        role,
        content,
        usage: None,
        model: None,
        stop_reason: None,
    })
}

/// The result the import writes for a call the source never answered.
pub fn unknown_result(call_id: &str, file: &str, line: u64) -> Block {
    Block::ToolResult {
        call_id: call_id.to_owned(),
        content: vec![Block::Text {
            text: format!(
                "cairn import: the source session ({file}, around line {line}) has no result for this tool call. \
                 The tool may or may not have run; its outcome is unknown. Check before running it again."
            ),
        }],
        is_error: true,
        code: Some(TOOL_OUTCOME_UNKNOWN.to_owned()),
    }
}
