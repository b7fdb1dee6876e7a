//! Importers of other agents' sessions into cairn — pi, Claude Code and
//! Codex — and the export of a cairn session back to pi's format.
//!
//! An import reads a source file line by line, converts each record to a
//! cairn entry (or an ignorable record, when cairn has no kind for it), and
//! writes them through the core's append path, so every invariant is
//! checked. What the source left broken is repaired and reported: a tool
//! call without a result is answered `TOOL_OUTCOME_UNKNOWN`, a phantom
//! parent becomes a root, a damaged line is skipped with its file and line
//! (fatal with [`Options::strict`]). A ledger ([`Ledger`]) keyed by the
//! source's path and SHA-256 makes imports idempotent: an unchanged file
//! writes nothing, a grown file only its new part.
//!
//! ```
//! use cairn::{MemoryBackend, Store};
//! use cairn_import::{Ledger, Options, Outcome, import_file};
//! use serde_json::json;
//! use std::sync::Arc;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("s.jsonl");
//! let header = json!({"type": "session", "version": 3, "id": "s1",
//!     "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/w"});
//! let hello = json!({"type": "message", "id": "a1b2c3d4", "parentId": null,
//!     "timestamp": "2025-01-01T00:00:01.000Z",
//!     "message": {"role": "user", "content": "hi", "timestamp": 1}});
//! std::fs::write(&path, format!("{header}\n{hello}\n"))?;
//! let store = Store::with_backend(Arc::new(MemoryBackend::new()));
//! let mut ledger = Ledger::in_memory();
//! let report = import_file(&store, &mut ledger, &path, &Options::default())?;
//! assert_eq!(report.format, "pi");
//! let again = import_file(&store, &mut ledger, &path, &Options::default())?;
//! assert_eq!(again.outcome, Outcome::Unchanged);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod builder;
mod claude;
mod codex;
mod detect;
mod ledger;
mod lineage;
pub mod oracle;
pub mod pi;
mod pi_export;
mod plan;
mod report;

use std::path::Path;

use cairn::{AppendError, EntryBody, OpenError, ReadError, Store, StoreError};
use serde_json::{Map, Value};

pub use builder::REFUSED_KIND;
pub use detect::{Format, default_sources, detect, source_files};
pub use ledger::{LEDGER_FILE, Ledger, Source, sha256_hex};
pub use pi_export::{ExportError, export_pi};
pub use report::{FileReport, Note, NoteKind, Outcome};

use builder::Builder;
use lineage::Link;
use plan::import_at;

/// How to import.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The source format (`None`: detected from the file's first record).
    pub format: Option<Format>,
    /// A damaged line fails the import (nothing is written) instead of being
    /// skipped and reported.
    pub strict: bool,
    /// Follow a live source: leave the calls of its last turn open (their
    /// results may still come) and leave an unterminated last line for the
    /// next round instead of reporting it as torn.
    pub live: bool,
}

/// Errors of an import.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The source could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The source path.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The format could not be told from the file.
    #[error("{path}: {problem}; name the format with --from pi|claude-code|codex")]
    UnknownFormat {
        /// The source path.
        path: String,
        /// What was found.
        problem: String,
    },
    /// The file is not a session of the format named.
    #[error("{path} is not a {format} session: {problem}")]
    NotThisFormat {
        /// The source path.
        path: String,
        /// The format.
        format: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// `strict` and the source has damaged lines; nothing was written.
    #[error("{path} has {} damaged line(s) (first: {}); nothing was imported (drop --strict to skip them)", notes.len(), notes.first().map(ToString::to_string).unwrap_or_default())]
    Strict {
        /// The source path.
        path: String,
        /// The damaged lines.
        notes: Vec<Note>,
    },
    /// A grown source's session no longer holds what its earlier import
    /// wrote.
    #[error(
        "session {session} no longer matches what importing its source wrote ({problem}); remove its ledger entry ({LEDGER_FILE}) to import the source into a new session"
    )]
    Diverged {
        /// The session.
        session: String,
        /// What differs.
        problem: String,
    },
    /// Writing the session failed.
    #[error("cannot write session {session}")]
    Write {
        /// The session.
        session: String,
        /// The core's error.
        #[source]
        source: AppendError,
    },
    /// Creating or opening the session failed.
    #[error("cannot create or open the imported session")]
    Open(#[from] OpenError),
    /// Reading the staged session back failed.
    #[error("cannot read the imported session back")]
    ReadBack(#[from] ReadError),
    /// The store refused.
    #[error("the store refused the imported session")]
    Store(#[from] StoreError),
    /// The ledger cannot be read or written.
    #[error("import ledger {path}: {problem}")]
    Ledger {
        /// The ledger file.
        path: String,
        /// What is wrong.
        problem: String,
    },
}

/// What a converter knows after the first records of a source.
#[derive(Debug, Clone, Default)]
pub(crate) struct Start {
    /// The source's own session id.
    pub source_id: Option<String>,
    /// Its working directory.
    pub cwd: Option<String>,
    /// The session it was forked from, if it names one.
    pub link: Option<Link>,
}

/// One source format's conversion, fed one parsed line at a time.
pub(crate) trait Convert {
    /// Reads what the header records of the source say (every parsed line
    /// is passed; a converter looks at the first ones). Errors when the
    /// file is not of this format.
    fn start(&mut self, lines: &[(u64, Value)]) -> Result<Start, String>;
    /// Converts one line.
    fn line(&mut self, b: &mut Builder<'_>, line: u64, v: Value) -> Result<(), Error>;
    /// The input read so far ends here (flush what is buffered).
    fn end_of_input(&mut self, _b: &mut Builder<'_>, _line: u64) -> Result<(), Error> {
        Ok(())
    }
    /// The source is finished: answer open calls, move to the live leaf.
    fn finish(&mut self, b: &mut Builder<'_>, line: u64) -> Result<(), Error> {
        b.finish(line)
    }
}

pub(crate) fn converter(format: Format) -> Box<dyn Convert> {
    match format {
        Format::Pi => Box::new(pi::Pi::default()),
        Format::ClaudeCode => Box::new(claude::Claude::default()),
        Format::Codex => Box::new(codex::Codex::default()),
    }
}

/// The source's complete lines, parsed: `(1-based line, value)`, with
/// notes for damaged lines; and the byte count of the complete lines.
struct Parsed {
    lines: Vec<(u64, Value)>,
    damaged: Vec<Note>,
}

pub(crate) fn parse_lines(bytes: &[u8], first_line: u64) -> Parsed {
    let mut lines = Vec::new();
    let mut damaged = Vec::new();
    for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = first_line + i as u64;
        let trimmed = raw.trim_ascii();
        if trimmed.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(trimmed) {
            Ok(v @ Value::Object(_)) => lines.push((line, v)),
            Ok(_) => damaged.push(Note {
                line: Some(line),
                kind: NoteKind::Damaged,
                message: "the line is JSON but not an object: skipped".into(),
            }),
            Err(e) => damaged.push(Note {
                line: Some(line),
                kind: NoteKind::Damaged,
                message: format!("the line is not JSON ({e}): skipped"),
            }),
        }
    }
    Parsed { lines, damaged }
}

/// Imports one source file into `store`, consulting and updating `ledger`.
///
/// A fork or a subagent (`docs/RECORDS.md` §2) is linked to the
/// session its parent was imported into; a parent not imported yet, or
/// changed since its import, is imported first, and its report is in
/// [`FileReport::also`].
///
/// # Errors
///
/// [`Error::Read`] when the file cannot be read; [`Error::UnknownFormat`] or
/// [`Error::NotThisFormat`] when it is not a session of a known (or the
/// named) format; [`Error::Strict`] for damaged lines with
/// [`Options::strict`]; [`Error::Diverged`] when a grown source's session
/// was changed since; store, write and ledger errors. A new session is
/// built whole before it is stored, so a failed import leaves none.
pub fn import_file(
    store: &Store,
    ledger: &mut Ledger,
    path: &Path,
    opts: &Options,
) -> Result<FileReport, Error> {
    import_at(store, ledger, path, opts, 0)
}

/// An entry body's `data` as JSON (as cairn writes it).
pub(crate) fn entry_data(body: &EntryBody) -> Value {
    let entry = cairn::Entry {
        id: cairn::EntryId::random(),
        parent: None,
        body: body.clone(),
    };
    let line = cairn::frame::encode_entry(0, "", &entry);
    cairn::frame::Frame::parse(&line)
        .ok()
        .and_then(|f| serde_json::from_str(f.data.get()).ok())
        .unwrap_or(Value::Null)
}

/// A source timestamp in the `ts` form (`None` when it is not one).
pub(crate) fn ts_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => cairn::parse_millis(s).map(cairn::format_millis),
        Value::Number(n) => n.as_i64().map(cairn::format_millis),
        _ => None,
    }
}

/// The members of `obj` other than `consumed`.
pub(crate) fn rest(obj: &Map<String, Value>, consumed: &[&str]) -> Map<String, Value> {
    obj.iter()
        .filter(|(k, _)| !consumed.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A string member.
pub(crate) fn str_of<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str)
}
