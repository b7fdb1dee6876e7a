//! Encoding: a record into its line, straight into a caller's buffer (an
//! appender reuses one), in the exact form of `docs/FORMAT.md` §1.

use super::json::{self, push_str as push_json_str, push_u64};
use crate::id::EntryId;
use crate::kind::RecordKind;
use crate::record::{Body, Entry, EntryBody, OpRecord};

fn entry_data(out: &mut Vec<u8>, body: &EntryBody) -> Result<(), serde_json::Error> {
    match body {
        EntryBody::Message(m) => json::write(out, m),
        EntryBody::AppState(a) => json::write(out, a),
        EntryBody::Compaction(c) => json::write(out, c),
        EntryBody::Checkout(c) => json::write(out, c),
        EntryBody::Settings(s) => json::write(out, s),
        EntryBody::Label(l) => json::write(out, l),
        EntryBody::SessionInfo(s) => json::write(out, s),
        EntryBody::Custom(c) => json::write(out, c),
        EntryBody::Ignored(u) => json::write(out, &u.data),
    }
}

fn op_data(out: &mut Vec<u8>, op: &OpRecord) -> Result<(), serde_json::Error> {
    match op {
        OpRecord::OpStarted(r) => json::write(out, r),
        OpRecord::ModelAttempted(r) => json::write(out, r),
        OpRecord::UsageSettled(r) => json::write(out, r),
        OpRecord::ApprovalRequested(r) => json::write(out, r),
        OpRecord::ApprovalResolved(r) => json::write(out, r),
        OpRecord::ToolDispatched(r) => json::write(out, r),
        OpRecord::InputQueued(r) => json::write(out, r),
        OpRecord::OpFinished(r) => json::write(out, r),
        OpRecord::Ignored(u) => json::write(out, &u.data),
    }
}

/// Encodes one record as a complete line, newline included.
pub fn encode(seq: u64, ts: &str, body: &Body) -> Vec<u8> {
    let mut line = Vec::with_capacity(512);
    match body {
        Body::Header(h) => {
            let members = Members {
                seq,
                ts,
                kind: RecordKind::HEADER,
                ignorable: false,
                ids: None,
            };
            encode_parts(&mut line, &members, |out| json::write(out, h));
        }
        Body::Entry(e) => encode_entry_into(&mut line, seq, ts, e, &serde_json::Map::new()),
        Body::Op(op) => encode_op_into(&mut line, seq, ts, op),
    }
    line
}

/// Encodes an entry record.
pub fn encode_entry(seq: u64, ts: &str, e: &Entry) -> Vec<u8> {
    encode_entry_with(seq, ts, e, &serde_json::Map::new())
}

/// Encodes an entry record whose `data` object also holds `extra`: members
/// the kind does not define (FORMAT.md section 1: a reader ignores them), e.g.
/// the fields of an imported record cairn has no place for. A member the
/// kind already writes is never replaced; `extra` is ignored for a kind
/// whose `data` is not an object.
pub fn encode_entry_with(
    seq: u64,
    ts: &str,
    e: &Entry,
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Vec<u8> {
    let mut line = Vec::with_capacity(512);
    encode_entry_into(&mut line, seq, ts, e, extra);
    line
}

/// [`encode_entry_with`] into `line` (cleared first), so an appender can
/// reuse one buffer: the data is serialized straight into it.
pub(crate) fn encode_entry_into(
    line: &mut Vec<u8>,
    seq: u64,
    ts: &str,
    e: &Entry,
    extra: &serde_json::Map<String, serde_json::Value>,
) {
    let members = Members {
        seq,
        ts,
        kind: e.body.kind(),
        ignorable: matches!(e.body, EntryBody::Ignored(_)),
        ids: Some((&e.id, e.parent.as_ref())),
    };
    encode_parts(line, &members, |out| {
        if extra.is_empty() {
            return entry_data(out, &e.body);
        }
        let mut data = Vec::new();
        entry_data(&mut data, &e.body)?;
        let mut value = serde_json::from_slice::<serde_json::Value>(&data)?;
        if let Some(members) = value.as_object_mut() {
            for (k, v) in extra {
                if !members.contains_key(k) {
                    members.insert(k.clone(), v.clone());
                }
            }
        }
        json::write(out, &value)
    });
}

/// Encodes an operation-journal record.
pub fn encode_op(seq: u64, ts: &str, op: &OpRecord) -> Vec<u8> {
    let mut line = Vec::with_capacity(512);
    encode_op_into(&mut line, seq, ts, op);
    line
}

/// [`encode_op`] into `line` (cleared first).
pub(crate) fn encode_op_into(line: &mut Vec<u8>, seq: u64, ts: &str, op: &OpRecord) {
    let members = Members {
        seq,
        ts,
        kind: op.kind(),
        ignorable: matches!(op, OpRecord::Ignored(_)),
        ids: None,
    };
    encode_parts(line, &members, |out| op_data(out, op));
}

/// The frame members of a line before its `data` (`docs/FORMAT.md`,
/// section 1), in the order writers emit them.
pub(super) struct Members<'a> {
    pub seq: u64,
    pub ts: &'a str,
    pub kind: &'a str,
    pub ignorable: bool,
    /// An entry's id and parent; `None` for other records.
    pub ids: Option<(&'a EntryId, Option<&'a EntryId>)>,
}

/// A whole line into `line` (cleared first): the members, the data `data`
/// writes, the trailer.
fn encode_parts(
    line: &mut Vec<u8>,
    members: &Members<'_>,
    data: impl FnOnce(&mut Vec<u8>) -> Result<(), serde_json::Error>,
) {
    line.clear();
    frame_prefix(line, members);
    let data_at = line.len();
    // Serializing cairn's own types cannot fail (every map key is a
    // string); should it, the record holds `null` and fails to decode.
    if data(line).is_err() {
        line.truncate(data_at);
        line.extend_from_slice(b"null");
    }
    seal(line);
}

/// Appends the frame members of a line up to and including `"data":`.
pub(super) fn frame_prefix(line: &mut Vec<u8>, members: &Members<'_>) {
    let &Members {
        seq,
        ts,
        kind,
        ignorable,
        ids,
    } = members;
    line.extend_from_slice(b"{\"seq\":");
    push_u64(line, seq);
    line.extend_from_slice(b",\"ts\":");
    push_json_str(line, ts);
    line.extend_from_slice(b",\"kind\":");
    push_json_str(line, kind);
    if ignorable {
        line.extend_from_slice(b",\"ignorable\":true");
    }
    if let Some((id, parent)) = ids {
        line.extend_from_slice(b",\"id\":");
        push_json_str(line, id.as_str());
        line.extend_from_slice(b",\"parent\":");
        match parent {
            Some(p) => push_json_str(line, p.as_str()),
            None => line.extend_from_slice(b"null"),
        }
    }
    line.extend_from_slice(b",\"data\":");
}

/// The start of the checksum trailer `,"crc":"xxxxxxxx"}`.
pub(super) const TRAILER_PREFIX: &[u8] = b",\"crc\":\"";

/// Appends the checksum trailer and newline to the covered bytes in `line`.
pub fn seal(line: &mut Vec<u8>) {
    use super::json::HEX;
    let crc = crc32c::crc32c(line);
    line.extend_from_slice(TRAILER_PREFIX);
    line.extend((0..8).rev().map(|i| HEX[(crc >> (4 * i)) as usize & 0xf]));
    line.extend_from_slice(b"\"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_numbers_and_strings_are_written_as_serde_json_writes_them() {
        for n in [0, 1, 9, 10, 99, 100, 123_456_789, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
        for s in [
            "",
            "a1b2c3d4",
            "2026-11-30T00:00:00.000Z",
            "x\"y",
            "a\\b",
            "t\u{1f}",
            "é\u{7f}",
        ] {
            let mut out = Vec::new();
            push_json_str(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }
}
