//! Framing: one record as one line of JSON, with a CRC32C that detects a torn
//! or flipped line. Byte-exact rules are in `docs/FORMAT.md` ("Framing").
//!
//! A line is
//! `{"seq":N,"ts":"…","kind":"…"[,"ignorable":true][,"id":"…","parent":…],"data":…,"crc":"xxxxxxxx"}\n`
//! and the checksum is CRC32C (Castagnoli) over every byte of the line before
//! the 18-byte trailer `,"crc":"xxxxxxxx"}` (so from the opening `{` up to the
//! end of the `data` value), written as 8 lower-case hex digits.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::Deserializer;
use serde_json::value::RawValue;

use crate::id::EntryId;
use crate::kind::{DecodeError, Payload, RecordKind, decode_data};
use crate::record::{Body, Entry, EntryBody, OpRecord};

mod encode;
mod json;

use encode::{Members, TRAILER_PREFIX, frame_prefix};
pub use encode::{encode, encode_entry, encode_entry_with, encode_op, seal};
pub(crate) use encode::{encode_entry_into, encode_op_into};

/// Length of the trailer `,"crc":"xxxxxxxx"}` (without the newline).
pub const TRAILER_LEN: usize = 18;

/// Why a line's framing is not intact (the line is torn or damaged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameDamage {
    /// The line does not end with a newline: it was not completely written.
    #[error("the line is incomplete (no newline at its end)")]
    Incomplete,
    /// The line does not end with a well-formed `,"crc":"xxxxxxxx"}` trailer.
    #[error("the line has no valid checksum trailer")]
    NoTrailer,
    /// The line ends with `\r\n`: a tool rewrote the line ends.
    #[error(
        "the line ends with \\r\\n (a Windows line end, from a tool that rewrote the file); \
         cairn lines end with \\n alone"
    )]
    CrLf,
    /// The stored checksum does not match the line's bytes.
    #[error("checksum mismatch (stored {stored:08x}, computed {computed:08x})")]
    Checksum {
        /// The checksum written in the line.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
}

/// Checks a line's framing: `line` must include its trailing newline.
///
/// # Errors
///
/// [`FrameDamage`] when the newline, the trailer or the checksum is wrong.
pub fn check(line: &[u8]) -> Result<(), FrameDamage> {
    let Some(body) = line.strip_suffix(b"\n") else {
        return Err(FrameDamage::Incomplete);
    };
    check_body(body)
}

/// Like [`check`], for a line without its newline.
///
/// # Errors
///
/// [`FrameDamage`] when the trailer or the checksum is wrong.
pub fn check_body(body: &[u8]) -> Result<(), FrameDamage> {
    if body.ends_with(b"\"}\r") && check_body(&body[..body.len() - 1]).is_ok() {
        return Err(FrameDamage::CrLf);
    }
    if body.len() < TRAILER_LEN + 2 {
        return Err(FrameDamage::NoTrailer);
    }
    let (covered, trailer) = body.split_at(body.len() - TRAILER_LEN);
    if !trailer.starts_with(TRAILER_PREFIX) || !trailer.ends_with(b"\"}") {
        return Err(FrameDamage::NoTrailer);
    }
    let hex = &trailer[TRAILER_PREFIX.len()..TRAILER_PREFIX.len() + 8];
    let stored = parse_hex(hex).ok_or(FrameDamage::NoTrailer)?;
    let computed = crc32c::crc32c(covered);
    if stored != computed {
        return Err(FrameDamage::Checksum { stored, computed });
    }
    Ok(())
}

fn parse_hex(hex: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &c in hex {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        v = (v << 4) | u32::from(d);
    }
    Some(v)
}

/// The framing fields of one line, with `data` left undecoded.
#[derive(Debug, Deserialize)]
pub struct Frame<'a> {
    /// Position in the session, contiguous from 0.
    pub seq: u64,
    /// When the record was written.
    #[serde(borrow)]
    pub ts: Cow<'a, str>,
    /// The record kind.
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    /// Whether a reader that does not know `kind` may skip the record.
    #[serde(default)]
    pub ignorable: bool,
    /// Entry id (entries only).
    #[serde(default)]
    pub id: Option<EntryId>,
    /// Parent entry id: absent for non-entries, `null` for a root entry.
    #[serde(default, deserialize_with = "present")]
    pub parent: Option<Option<EntryId>>,
    /// The kind-specific payload, undecoded.
    #[serde(borrow, deserialize_with = "raw_data")]
    pub data: Data<'a>,
}

/// The `data` of a line as stored: its JSON text, not yet decoded (and, on
/// the fast path of [`Frame::parse`], not yet validated: the checksum vouches
/// for the bytes; decoding reports anything malformed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Data<'a>(&'a [u8]);

impl<'a> Data<'a> {
    /// The JSON text's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The JSON text (empty if it is not UTF-8, which then fails to decode).
    pub fn get(&self) -> &'a str {
        std::str::from_utf8(self.0).unwrap_or("")
    }
}

fn raw_data<'de, D: Deserializer<'de>>(d: D) -> Result<Data<'de>, D::Error> {
    let raw = <&'de RawValue>::deserialize(d)?;
    Ok(Data(raw.get().as_bytes()))
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<EntryId>>, D::Error> {
    Option::<EntryId>::deserialize(d).map(Some)
}

/// The frame fields of a line written in the canonical member order of
/// FORMAT.md, read without a JSON parser; `None` sends the caller to the
/// general parser (other member orders, escapes in the frame strings).
fn parse_canonical(line: &[u8]) -> Option<Frame<'_>> {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let data_end = body.len().checked_sub(TRAILER_LEN)?;
    let trailer = &body[data_end..];
    if !trailer.starts_with(TRAILER_PREFIX) || !trailer.ends_with(b"\"}") {
        return None;
    }
    let body = &body[..data_end];
    // Only the frame members need to be text here; `data` is validated when decoded.
    let data_at = memchr::memmem::find(body, b",\"data\":")?;
    let head = std::str::from_utf8(&body[..data_at]).ok()?;
    let data = &body[data_at + 8..];
    let space = |b: Option<&u8>| matches!(b, None | Some(b' ' | b'\t' | b'\n' | b'\r'));
    if space(data.first()) || space(data.last()) {
        return None;
    }
    let rest = head.strip_prefix("{\"seq\":")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || (digits > 1 && rest.starts_with('0')) {
        return None;
    }
    let seq: u64 = rest[..digits].parse().ok()?;
    let (ts, rest) = string_member(&rest[digits..], ",\"ts\":")?;
    let (kind, mut rest) = string_member(rest, ",\"kind\":")?;
    let mut ignorable = false;
    if let Some(r) = rest.strip_prefix(",\"ignorable\":true") {
        ignorable = true;
        rest = r;
    }
    let (mut id, mut parent) = (None, None);
    if rest.starts_with(",\"id\":") {
        let (i, r) = string_member(rest, ",\"id\":")?;
        id = Some(EntryId::parse(i).ok()?);
        let r = r.strip_prefix(",\"parent\":")?;
        if r == "null" {
            parent = Some(None);
        } else {
            let (p, r) = string_member(r, "")?;
            if !r.is_empty() {
                return None;
            }
            parent = Some(Some(EntryId::parse(p).ok()?));
        }
        rest = "";
    }
    if !rest.is_empty() {
        return None;
    }
    Some(Frame {
        seq,
        ts: Cow::Borrowed(ts),
        kind: Cow::Borrowed(kind),
        ignorable,
        id,
        parent,
        data: Data(data),
    })
}

/// `prefix` then a JSON string without escapes; returns it and what follows.
fn string_member<'s>(s: &'s str, prefix: &str) -> Option<(&'s str, &'s str)> {
    let r = s.strip_prefix(prefix)?.strip_prefix('"')?;
    let end = r.find('"')?;
    let value = &r[..end];
    if value.contains('\\') || value.chars().any(char::is_control) {
        return None;
    }
    Some((value, &r[end + 1..]))
}

/// What class of record a frame holds, known without decoding its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Record 0.
    Header,
    /// A tree entry (including ignorable unknown kinds with an id).
    Entry,
    /// An operation-journal record (including ignorable unknown kinds without an id).
    Op,
}

impl Frame<'_> {
    /// Parses the framing fields of a line whose checksum was checked.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Json`] when the line is not UTF-8 (`docs/FORMAT.md`
    /// §1: a session is UTF-8 text, `data` included, whether or not anything
    /// decodes it), or not a JSON object with the required fields.
    ///
    /// A stored line (one that ends with the checksum trailer) must be in the
    /// exact form writers emit (FORMAT.md §1: member order, no other member,
    /// `ignorable` only as `true`, no whitespace); a record object without a
    /// trailer (as `cairn append` builds from its input) may be any JSON
    /// object with the frame members.
    pub fn parse(line: &[u8]) -> Result<Frame<'_>, DecodeError> {
        if let Err(e) = std::str::from_utf8(line) {
            return Err(DecodeError::Json(format!(
                "the line is not UTF-8 (an invalid byte at byte {} of the line)",
                e.valid_up_to()
            )));
        }
        if let Some(f) = parse_canonical(line) {
            return Ok(f);
        }
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let frame: Frame<'_> =
            serde_json::from_slice(body).map_err(|e| DecodeError::Json(e.to_string()))?;
        if check_body(body).is_ok() && !frame.is_canonical(&body[..body.len() - TRAILER_LEN]) {
            return Err(DecodeError::Json(
                "the frame is not in the form writers emit (FORMAT.md section 1: \"seq\", \"ts\", \"kind\", \"ignorable\": true only when present, \"id\" and \"parent\" for entries, \"data\", in this order, with no other member and no whitespace)".into(),
            ));
        }
        Ok(frame)
    }

    /// Whether `covered` (a line without its trailer) is exactly what
    /// [`encode`] writes for this frame's members.
    fn is_canonical(&self, covered: &[u8]) -> bool {
        let ids = self.id.as_ref().zip(self.parent.as_ref());
        let mut expected = Vec::with_capacity(covered.len());
        let members = Members {
            seq: self.seq,
            ts: &self.ts,
            kind: &self.kind,
            ignorable: self.ignorable,
            ids: ids.map(|(i, p)| (i, p.as_ref())),
        };
        frame_prefix(&mut expected, &members);
        expected.extend_from_slice(self.data.bytes());
        expected == covered
    }

    /// The class of the record, checking that entry kinds carry `id` and
    /// `parent` and that others don't.
    ///
    /// # Errors
    ///
    /// [`DecodeError::UnknownKind`] for an unknown kind not marked ignorable;
    /// [`DecodeError::Shape`] when `id`/`parent` presence does not fit the kind.
    pub fn class(&self) -> Result<Class, DecodeError> {
        let kind = self.kind.as_ref();
        let shape = |problem| DecodeError::Shape {
            kind: kind.to_owned(),
            problem,
        };
        let has_entry_fields = match (&self.id, &self.parent) {
            (Some(_), Some(_)) => true,
            (None, None) => false,
            _ => return Err(shape("must have both \"id\" and \"parent\" or neither")),
        };
        let class = match RecordKind::from_name(kind) {
            Some(RecordKind::Header) => Class::Header,
            Some(RecordKind::Entry(_)) => Class::Entry,
            Some(RecordKind::Op(_)) => Class::Op,
            None if !self.ignorable => return Err(DecodeError::UnknownKind(kind.to_owned())),
            None if has_entry_fields => Class::Entry,
            None => Class::Op,
        };
        match (class, has_entry_fields) {
            (Class::Entry, false) => Err(shape("is an entry and needs \"id\" and \"parent\"")),
            (Class::Header | Class::Op, true) => Err(shape(
                "is not an entry and must not have \"id\" or \"parent\"",
            )),
            _ => Ok(class),
        }
    }
}

/// Decodes the body of a parsed frame (its data by [`decode_data`]).
///
/// # Errors
///
/// As [`Frame::class`], and [`DecodeError::Json`] when `data` does not fit the kind.
pub fn decode_body(frame: &Frame<'_>) -> Result<Body, DecodeError> {
    let class = frame.class()?;
    let kind = frame.kind.as_ref();
    let payload = decode_data(kind, frame.ignorable, frame.data.bytes())?;
    let entry = |body| match (frame.id.clone(), frame.parent.clone()) {
        (Some(id), Some(parent)) => Ok(Body::Entry(Entry { id, parent, body })),
        (None, _) | (_, None) => Err(DecodeError::Shape {
            kind: kind.to_owned(),
            problem: "lacks id",
        }),
    };
    match (class, payload) {
        (Class::Header, Payload::Header(h)) => Ok(Body::Header(h)),
        (Class::Entry, Payload::Entry(body)) => entry(body),
        (Class::Entry, Payload::Unknown(u)) => entry(EntryBody::Ignored(u)),
        (Class::Op, Payload::Op(op)) => Ok(Body::Op(op)),
        (Class::Op, Payload::Unknown(u)) => Ok(Body::Op(OpRecord::Ignored(u))),
        // The class is read from the same kind: these cannot disagree.
        (Class::Header, Payload::Entry(_) | Payload::Op(_) | Payload::Unknown(_))
        | (Class::Entry, Payload::Header(_) | Payload::Op(_))
        | (Class::Op, Payload::Header(_) | Payload::Entry(_)) => Err(DecodeError::Shape {
            kind: kind.to_owned(),
            problem: "does not fit its class",
        }),
    }
}

/// Parses, checks and decodes a whole line (newline included).
///
/// # Errors
///
/// A [`LineError`] saying whether the framing or the content is wrong.
pub fn decode_line(line: &[u8]) -> Result<(u64, String, Body), LineError> {
    check(line).map_err(LineError::Frame)?;
    let frame = Frame::parse(line).map_err(LineError::Decode)?;
    let body = decode_body(&frame).map_err(LineError::Decode)?;
    Ok((frame.seq, frame.ts.into_owned(), body))
}

/// A line that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// The framing is damaged.
    #[error(transparent)]
    Frame(FrameDamage),
    /// The framing is intact but the content is not a valid record.
    #[error(transparent)]
    Decode(DecodeError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Block, InputQueued, Message, Role, Unknown};
    use serde_json::json;

    fn msg_entry() -> Body {
        Body::Entry(Entry {
            id: EntryId::parse("a1b2c3d4").unwrap(),
            parent: None,
            body: EntryBody::Message(Message::text(Role::User, "hello \"world\"\n")),
        })
    }

    #[test]
    fn encoded_line_round_trips_and_is_plain_json() {
        let line = encode(3, "2026-11-30T00:00:00.000Z", &msg_entry());
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["seq"], 3);
        assert_eq!(v["kind"], "message");
        assert_eq!(v["parent"], serde_json::Value::Null);
        assert_eq!(v["data"]["content"][0]["text"], "hello \"world\"\n");
        let (seq, ts, body) = decode_line(&line).unwrap();
        assert_eq!((seq, ts.as_str()), (3, "2026-11-30T00:00:00.000Z"));
        assert_eq!(body, msg_entry());
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
    }

    #[test]
    fn checksum_covers_everything_before_the_trailer() {
        let line = encode(0, "t", &msg_entry());
        let covered = &line[..line.len() - 1 - TRAILER_LEN];
        let crc = format!("{:08x}", crc32c::crc32c(covered));
        assert!(line.ends_with(format!(",\"crc\":\"{crc}\"}}\n").as_bytes()));
    }

    fn slow(line: &[u8]) -> Frame<'_> {
        serde_json::from_slice(line.strip_suffix(b"\n").unwrap()).unwrap()
    }

    #[test]
    fn canonical_fast_path_reads_what_the_json_parser_reads() {
        let lines = [
            encode(0, "2026-11-30T00:00:00.000Z", &msg_entry()),
            encode(
                12,
                "t",
                &Body::Entry(Entry {
                    id: EntryId::parse("b.2").unwrap(),
                    parent: Some(EntryId::parse("a1b2c3d4").unwrap()),
                    body: EntryBody::Ignored(Unknown {
                        kind: "x.y".into(),
                        data: json!([1, {"data":"\"crc\""}]),
                    }),
                }),
            ),
            encode(
                3,
                "t",
                &Body::Op(OpRecord::InputQueued(InputQueued {
                    op: "op-1".into(),
                    text: ",\"data\":".into(),
                })),
            ),
        ];
        for line in &lines {
            let fast = parse_canonical(line).expect("cairn writes canonical lines");
            let slow = slow(line);
            assert_eq!(
                (fast.seq, &fast.ts, &fast.kind, fast.ignorable),
                (slow.seq, &slow.ts, &slow.kind, slow.ignorable)
            );
            assert_eq!((&fast.id, &fast.parent), (&slow.id, &slow.parent));
            assert_eq!(fast.data.get(), slow.data.get());
        }
    }

    /// Regression: a line without a checksum trailer (as `cairn append`
    /// builds to parse its input) lost the end of its data to the fast path.
    #[test]
    fn a_line_without_a_trailer_is_parsed_whole() {
        let line = br#"{"seq":1,"ts":"t","kind":"input_queued","data":{"op":"o","text":"a longer text, enough bytes"}}"#;
        let f = Frame::parse(line).unwrap();
        assert_eq!(
            f.data.get(),
            r#"{"op":"o","text":"a longer text, enough bytes"}"#
        );
    }

    #[test]
    fn a_stored_line_not_in_the_written_form_is_refused() {
        // Members in another order, an escape serde_json does not write, an
        // extra member, `"ignorable": false`, whitespace: FORMAT.md section 1.
        for covered in [
            r#"{"kind":"input_queued","seq":1,"ts":"t","data":{"op":"o","text":"x"}"#,
            r#"{"seq":1,"ts":"t","kind":"input_queue\u0064","data":{"op":"o","text":"x"}"#,
            r#"{"seq":1,"ts":"t","kind":"input_queued","x":0,"data":{"op":"o","text":"x"}"#,
            r#"{"seq":1,"ts":"t","kind":"input_queued","ignorable":false,"data":{"op":"o","text":"x"}"#,
            r#"{"seq":1,"ts":"t","kind":"input_queued","data": {"op":"o","text":"x"}"#,
        ] {
            let mut line = covered.as_bytes().to_vec();
            seal(&mut line);
            let e = Frame::parse(&line).expect_err(covered);
            assert!(e.to_string().contains("section 1"), "{e}");
            // Without a trailer it is a record object (cairn append input).
            let object = format!("{covered}}}");
            assert!(Frame::parse(object.as_bytes()).is_ok(), "{object}");
        }
    }

    #[test]
    fn a_frame_string_that_needs_escapes_is_read_in_the_written_form() {
        let line = encode(
            1,
            "t",
            &Body::Op(OpRecord::Ignored(Unknown {
                kind: "x\"y".into(),
                data: json!(null),
            })),
        );
        assert!(parse_canonical(&line).is_none());
        assert_eq!(Frame::parse(&line).unwrap().kind, "x\"y");
    }

    #[test]
    fn checksum_is_crc32c_as_documented() {
        // docs/FORMAT.md gives this check value so other readers can verify their CRC.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let line = encode(7, "2026-11-30T00:00:00.000Z", &msg_entry());
        for i in 0..line.len() - 1 {
            for bit in 0..8 {
                let mut bad = line.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    decode_line(&bad).is_err(),
                    "flip at byte {i} bit {bit} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn unknown_kind_needs_ignorable() {
        let mut line = br#"{"seq":1,"ts":"t","kind":"x.future","data":{"a":1}"#.to_vec();
        seal(&mut line);
        assert!(
            matches!(decode_line(&line), Err(LineError::Decode(DecodeError::UnknownKind(k))) if k == "x.future")
        );
        let mut line =
            br#"{"seq":1,"ts":"t","kind":"x.future","ignorable":true,"data":{"a":1}"#.to_vec();
        seal(&mut line);
        let (_, _, body) = decode_line(&line).unwrap();
        assert!(matches!(body, Body::Op(OpRecord::Ignored(u)) if u.data == json!({"a":1})));
    }

    #[test]
    fn entry_kinds_need_id_and_parent() {
        let mut line =
            br#"{"seq":1,"ts":"t","kind":"message","data":{"role":"user","content":[]}"#.to_vec();
        seal(&mut line);
        assert!(matches!(
            decode_line(&line),
            Err(LineError::Decode(DecodeError::Shape { .. }))
        ));
    }

    #[test]
    fn tool_blocks_round_trip() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                Block::Thinking {
                    thinking: "hm".into(),
                    signature: None,
                },
                Block::ToolCall {
                    call_id: "c1".into(),
                    name: "bash".into(),
                    arguments: json!({"cmd":"ls"}),
                },
            ],
            usage: None,
            model: Some("m".into()),
            stop_reason: Some("tool_use".into()),
        };
        let body = Body::Entry(Entry {
            id: EntryId::parse("x").unwrap(),
            parent: None,
            body: EntryBody::Message(m),
        });
        let line = encode(1, "t", &body);
        assert_eq!(decode_line(&line).unwrap().2, body);
    }

    #[test]
    fn a_reused_buffer_encodes_exactly_what_a_new_one_does() {
        let mut line = b"left over from a longer record".repeat(40);
        let e = Entry {
            id: EntryId::parse("a1b2c3d4").unwrap(),
            parent: None,
            body: EntryBody::Message(crate::record::Message::text(
                crate::record::Role::User,
                "hi",
            )),
        };
        encode_entry_into(&mut line, 9, "t", &e, &serde_json::Map::new());
        assert_eq!(line, encode_entry(9, "t", &e));
        encode_op_into(
            &mut line,
            10,
            "t",
            &OpRecord::InputQueued(crate::record::InputQueued {
                op: "op-1".into(),
                text: "x".into(),
            }),
        );
        assert!(decode_line(&line).is_ok());
    }
}
