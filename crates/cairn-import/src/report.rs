//! What an import did: per source file, what became of it and every
//! decision the importer took that a person should know about.

use std::fmt;

use serde::Serialize;

/// What kind of decision a note records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteKind {
    /// A line that is not a record of the format (not JSON, torn, not an
    /// object): skipped, or fatal with `strict`.
    Damaged,
    /// The importer changed or added something so that the session is valid:
    /// a tool call answered as unknown, a phantom parent, a duplicate id.
    Repaired,
    /// A line kept as an ignorable record: a type cairn does not know, or a
    /// record cairn refuses.
    Kept,
}

impl NoteKind {
    /// The kind's name, as in the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            NoteKind::Damaged => "damaged",
            NoteKind::Repaired => "repaired",
            NoteKind::Kept => "kept",
        }
    }
}

/// One decision about one source line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    /// The 1-based source line it concerns, if one.
    pub line: Option<u64>,
    /// What kind of decision.
    pub kind: NoteKind,
    /// What was found and done.
    pub message: String,
}

/// What became of a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Imported into a new session.
    New,
    /// The file grew since it was imported: only its new part was appended.
    Grown,
    /// Unchanged since it was imported: nothing written.
    Unchanged,
    /// The file changed other than by growing (the tool rewrote it): imported
    /// again into a new session.
    Rewritten,
}

impl Outcome {
    /// The outcome's name, as in the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::New => "new",
            Outcome::Grown => "grown",
            Outcome::Unchanged => "unchanged",
            Outcome::Rewritten => "rewritten",
        }
    }
}

/// The report of one source file's import.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileReport {
    /// The source file.
    pub path: String,
    /// Its format.
    pub format: &'static str,
    /// What became of it.
    pub outcome: Outcome,
    /// The session holding it.
    pub session: String,
    /// Records written by this import.
    pub written: u64,
    /// Source lines read by this import (not counting a replay).
    pub lines: u64,
    /// Every decision, in line order.
    pub notes: Vec<Note>,
    /// The sessions imported on the way: the parent a fork or a subagent
    /// names, when it was not imported yet or changed since, after its own
    /// such parents
    /// (`docs/RECORDS.md` section 2). Their reports have no `also`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<FileReport>,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "line {l}: {}: {}", self.kind.as_str(), self.message),
            None => write!(f, "{}: {}", self.kind.as_str(), self.message),
        }
    }
}
