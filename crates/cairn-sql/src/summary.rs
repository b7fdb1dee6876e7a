//! The listing summary kept in the `sessions` row (SQLite: its counters on
//! each session's last record), folded from each line as it is appended (in
//! the append's transaction), so that listing, status and counts are SQL
//! over those columns and never read a payload back.
//!
//! The fold is the core's [`cairn::ListingFold`] (the rules every backend
//! lists by); this module adds the bytes stored and maps the fold to the
//! row's columns, the same columns in every SQL backend. The conformance
//! suite compares every listed field with the core's [`cairn::summary_of`].

use cairn::OpPhase;
use cairn::frame::{self, Frame};
use cairn::{LastOperation, ListingFold, OpenError, RecordKind, SessionId, SessionSummary};
use cairn::{Stamp, Status};
use serde_json::Value;

/// What the header says, fixed for the session's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderInfo {
    /// The header's `data`, as JSON text.
    pub json: String,
    /// `created` (the header's `ts` if absent).
    pub created: String,
    /// `lineage.forked_from.session`.
    pub forked_from: Option<String>,
    /// `lineage.parent.session` (subagents).
    pub parent: Option<String>,
}

/// The summary columns of a `sessions` row: the core's listing fold and
/// the bytes stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// The core's listing fold.
    pub fold: ListingFold,
    /// Bytes stored (the lines' lengths).
    pub bytes: u64,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// Reads what the listing needs from a header line, leniently: a header of
/// a newer format is stored all the same (the core refuses to open it).
pub fn header_info(line: &[u8]) -> Result<(HeaderInfo, Summary), String> {
    frame::check(line).map_err(|e| e.to_string())?;
    let f = Frame::parse(line).map_err(|e| e.to_string())?;
    if f.seq != 0 || RecordKind::from_name(&f.kind) != Some(RecordKind::Header) {
        return Err("the first record of a session must be its header".into());
    }
    let data: Value = serde_json::from_str(f.data.get()).map_err(|e| e.to_string())?;
    let info = HeaderInfo {
        json: f.data.get().to_owned(),
        created: str_at(&data, &["created"]).unwrap_or(&f.ts).to_owned(),
        forked_from: str_at(&data, &["lineage", "forked_from", "session"]).map(str::to_owned),
        parent: str_at(&data, &["lineage", "parent", "session"]).map(str::to_owned),
    };
    let summary = Summary {
        fold: ListingFold::new(str_at(&data, &["title"]).map(str::to_owned), &f.ts),
        bytes: line.len() as u64,
    };
    Ok((info, summary))
}

/// [`header_info`] for a session being created at `location`: a header
/// that cannot be stored is [`OpenError::NotASession`].
///
/// # Errors
///
/// As said.
pub fn header_of(location: &str, header: &[u8]) -> Result<(HeaderInfo, Summary), OpenError> {
    header_info(header).map_err(|problem| OpenError::NotASession {
        location: location.to_owned(),
        problem: format!("its header cannot be stored: {problem}"),
    })
}

/// A count read back from a column (a negative one, never written, is 0).
pub fn uncount(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A count for a column.
pub fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Summary {
    /// The summary read back from its columns `updated, title,
    /// first_message, op_state, entries, records, bytes`.
    pub fn from_columns(
        updated: String,
        title: Option<String>,
        first_message: Option<String>,
        op_state: &str,
        [entries, records, bytes]: [i64; 3],
    ) -> Summary {
        Summary {
            fold: ListingFold {
                updated,
                title,
                first_message,
                op: op_state_from(op_state),
                entries: uncount(entries),
                records: uncount(records),
            },
            bytes: uncount(bytes),
        }
    }

    /// Folds in one appended line (already parsed).
    pub fn apply(&mut self, f: &Frame<'_>, len: usize) {
        self.fold.apply(f);
        self.bytes += len as u64;
    }

    /// The listing summary, with the status a session has without a writer.
    pub fn to_listing(&self, id: SessionId, header: &HeaderInfo) -> SessionSummary {
        let parse = |s: &Option<String>| s.as_deref().and_then(|s| SessionId::parse(s).ok());
        self.fold.summary(
            id,
            header.created.clone(),
            parse(&header.forked_from),
            parse(&header.parent),
            false,
        )
    }

    /// The stamp listing caches are validated with: bytes and records.
    pub fn stamp(&self) -> Stamp {
        stamp(count(self.bytes), count(self.fold.records))
    }
}

/// The stamp of a session from its `bytes` and `records` columns, as
/// [`Summary::stamp`] gives it.
pub fn stamp(bytes: i64, records: i64) -> Stamp {
    Stamp {
        len: uncount(bytes),
        modified_ns: u128::from(uncount(records)),
    }
}

/// Every session's listing summary from its row (`held`: whether a writer
/// holds its lease, which gives its status), most recently updated first.
pub fn listing(
    rows: impl IntoIterator<Item = (SessionId, HeaderInfo, Summary, bool)>,
) -> Vec<SessionSummary> {
    let mut out: Vec<SessionSummary> = rows
        .into_iter()
        .map(|(id, info, summary, held)| {
            let mut s = summary.to_listing(id, &info);
            s.status = s.phase.status(held);
            s
        })
        .collect();
    out.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| b.id.cmp(&a.id)));
    out
}

/// A session's status from its `phase` column and whether a writer holds
/// its lease (an unreadable phase is "no operation").
pub fn status(phase: &str, held: bool) -> Status {
    let phase: OpPhase = serde_json::from_str(phase).unwrap_or(OpPhase::None);
    phase.status(held)
}

/// The listing cache made from every session's row: the stamps
/// [`Summary::stamp`] gives, so the core's listing trusts every entry.
pub fn catalog(rows: impl IntoIterator<Item = (SessionId, HeaderInfo, Summary)>) -> cairn::Catalog {
    let sessions = rows
        .into_iter()
        .map(|(id, info, summary)| {
            let entry = cairn::CatalogEntry {
                stamp: summary.stamp(),
                summary: summary.to_listing(id.clone(), &info),
            };
            (id, entry)
        })
        .collect();
    cairn::Catalog { sessions }
}

/// Encodes the operation state for its column.
pub fn op_state_json(op: &LastOperation) -> String {
    serde_json::to_string(op).unwrap_or_else(|_| "{}".into())
}

/// Decodes the operation state column (an unreadable one is "no operation").
pub fn op_state_from(json: &str) -> LastOperation {
    serde_json::from_str(json).unwrap_or_default()
}

/// Encodes a phase for its column.
pub fn phase_json(p: OpPhase) -> String {
    serde_json::to_string(&p).unwrap_or_else(|_| "\"none\"".into())
}

/// The CRC-32C in a line's trailer (the line was checked), for its column.
pub fn crc_of(line: &[u8]) -> i64 {
    let hex = line
        .len()
        .checked_sub(11)
        .and_then(|start| line.get(start..start + 8))
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(|h| u32::from_str_radix(h, 16).ok());
    i64::from(hex.unwrap_or(0))
}
