//! The record a program hands to cairn as one JSON line — `cairn append`'s
//! input, and the shape any other front end (a pipe, an HTTP body) accepts:
//! `{"kind": K, "data": D}` plus optional `"id"`, `"parent"` and
//! `"ignorable"`. The `data` is decoded by [`decode_data`], the decoder that
//! reads logs, so an input is accepted exactly when the format allows it.

use serde::Deserialize;
use serde::de::Deserializer;
use serde_json::value::RawValue;

use crate::id::{EntryId, InvalidId};
use crate::kind::{DecodeError, EntryKind, OpKind, Payload, RecordKind, decode_data};
use crate::record::{EntryBody, OpRecord};

/// One input line, before its `data` is decoded.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    /// Kept as written: decoded once, by [`decode_data`], so that nothing in
    /// it (an integer beyond 64 bits, a repeated member) changes on the way.
    #[serde(borrow)]
    data: &'a RawValue,
    #[serde(default)]
    id: Option<String>,
    /// Absent: the leaf; `null`: a new root; a string: an entry reference.
    #[serde(default, deserialize_with = "present")]
    parent: Option<Option<String>>,
    #[serde(default)]
    ignorable: bool,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// Where an input entry goes in the tree, before a session resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputParent {
    /// No `"parent"`: at the current leaf.
    Leaf,
    /// `"parent": null`: a new root.
    Root,
    /// `"parent": "…"`: an entry id, unique prefix or label, resolved by the
    /// session ([`Session::resolve`](crate::Session::resolve)).
    Reference(String),
}

/// A decoded input line.
#[derive(Debug, Clone, PartialEq)]
pub enum InputRecord {
    /// An entry, with the id it asks for (if any) and its place.
    Entry {
        /// The entry's id, if the input names one.
        id: Option<EntryId>,
        /// Where it goes.
        parent: InputParent,
        /// The entry.
        body: EntryBody,
    },
    /// An operation-journal record (or an ignorable record of a kind this
    /// version does not know, given without a place in the tree).
    Op(OpRecord),
}

/// Why an input line was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// Not the JSON object an input line must be.
    #[error(
        "not a valid input record: {0} (expected {{\"kind\": K, \"data\": D}} with optional \"id\", \"parent\" and \"ignorable\")"
    )]
    Json(#[source] serde_json::Error),
    /// A header: record 0 is written when a session is created.
    #[error("a header is record 0, written by `cairn new`; it cannot be appended")]
    Header,
    /// An operation record given an `id` or `parent`.
    #[error("{0:?} is an operation record: it takes no \"id\" or \"parent\"")]
    OpWithPlace(String),
    /// A kind this version does not know, not marked ignorable.
    #[error(
        "unknown record kind {kind:?}: entry kinds are {entry_kinds}; operation kinds are {op_kinds}; a kind of your own needs \"ignorable\": true"
    )]
    UnknownKind {
        /// The kind given.
        kind: String,
        /// The entry kinds, comma-separated.
        entry_kinds: String,
        /// The operation kinds, comma-separated.
        op_kinds: String,
    },
    /// The `data` does not fit its kind.
    #[error(transparent)]
    Data(DecodeError),
    /// The `id` is not a valid entry id.
    #[error(transparent)]
    Id(InvalidId),
}

/// Decodes one input line (without its newline).
///
/// An unknown kind marked `"ignorable": true` is an entry when the line says
/// where it goes (`id` or `parent`), and an operation-journal record otherwise.
///
/// # Errors
///
/// [`InputError`] naming what is wrong: not the input object, a header, an
/// operation record with a place in the tree, an unknown kind not marked
/// ignorable, `data` that does not fit its kind, or an invalid `id`.
///
/// ```
/// use cairn::{InputParent, InputRecord, decode_input};
///
/// let line = r#"{"kind":"message","data":{"role":"user","content":[{"type":"text","text":"hi"}]}}"#;
/// let InputRecord::Entry { parent, .. } = decode_input(line)? else { unreachable!() };
/// assert_eq!(parent, InputParent::Leaf);
/// assert!(decode_input(r#"{"kind":"nope","data":{}}"#).is_err());
/// # Ok::<(), cairn::InputError>(())
/// ```
pub fn decode_input(line: &str) -> Result<InputRecord, InputError> {
    let input: Line<'_> = serde_json::from_str(line).map_err(InputError::Json)?;
    let kind = input.kind.as_ref();
    let has_place = input.id.is_some() || input.parent.is_some();
    if RecordKind::from_name(kind) == Some(RecordKind::Header) {
        return Err(InputError::Header);
    }
    let body = match decode_data(kind, input.ignorable, input.data.get().as_bytes()) {
        Ok(Payload::Header(_)) => return Err(InputError::Header),
        Ok(Payload::Entry(body)) => body,
        Ok(Payload::Op(_)) if has_place => return Err(InputError::OpWithPlace(kind.to_owned())),
        Ok(Payload::Op(op)) => return Ok(InputRecord::Op(op)),
        // A kind of the host's own: an entry if it says where it goes in the tree.
        Ok(Payload::Unknown(u)) if has_place => EntryBody::Ignored(u),
        Ok(Payload::Unknown(u)) => return Ok(InputRecord::Op(OpRecord::Ignored(u))),
        Err(DecodeError::UnknownKind(_)) => {
            return Err(InputError::UnknownKind {
                kind: kind.to_owned(),
                entry_kinds: EntryKind::ALL.map(EntryKind::name).join(", "),
                op_kinds: OpKind::ALL.map(OpKind::name).join(", "),
            });
        }
        Err(e) => return Err(InputError::Data(e)),
    };
    let id = input
        .id
        .as_deref()
        .map(EntryId::parse)
        .transpose()
        .map_err(InputError::Id)?;
    let parent = match input.parent {
        None => InputParent::Leaf,
        Some(None) => InputParent::Root,
        Some(Some(q)) => InputParent::Reference(q),
    };
    Ok(InputRecord::Entry { id, parent, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = r#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#;

    #[test]
    fn an_entry_takes_its_place_from_parent_and_its_id_from_id() {
        let line = format!(r#"{{"kind":"message","data":{USER},"id":"0000abcd","parent":null}}"#);
        let InputRecord::Entry { id, parent, .. } = decode_input(&line).expect("decodes") else {
            panic!("an entry")
        };
        assert_eq!(id.map(|i| i.to_string()), Some("0000abcd".to_owned()));
        assert_eq!(parent, InputParent::Root);
        let line = format!(r#"{{"kind":"message","data":{USER},"parent":"lbl"}}"#);
        let Ok(InputRecord::Entry { parent, .. }) = decode_input(&line) else {
            panic!("an entry")
        };
        assert_eq!(parent, InputParent::Reference("lbl".to_owned()));
    }

    #[test]
    fn an_unknown_ignorable_kind_is_an_entry_only_with_a_place() {
        let op = decode_input(r#"{"kind":"x.note","data":{"a":1},"ignorable":true}"#);
        assert!(matches!(op, Ok(InputRecord::Op(OpRecord::Ignored(_)))));
        let entry =
            decode_input(r#"{"kind":"x.note","data":{"a":1},"ignorable":true,"parent":null}"#);
        assert!(matches!(
            entry,
            Ok(InputRecord::Entry {
                body: EntryBody::Ignored(_),
                ..
            })
        ));
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let cases = [
            (r#"{"kind":"message"}"#, "not a valid input record"),
            (r#"{"kind":"header","data":{}}"#, "cannot be appended"),
            (r#"{"kind":"nope","data":{}}"#, "a kind of your own needs"),
            (
                r#"{"kind":"op_started","data":{"op":"op-1"},"parent":null}"#,
                "takes no \"id\" or \"parent\"",
            ),
            (r#"{"kind":"message","data":{},"extra":1}"#, "unknown field"),
        ];
        for (line, says) in cases {
            let e = decode_input(line).expect_err(line).to_string();
            assert!(e.contains(says), "{line}: {e}");
        }
    }

    #[test]
    fn data_is_decoded_as_written_so_a_big_integer_is_refused_not_rounded() {
        let line = r#"{"kind":"app_state","data":{"set":{"n":12345678901234567890123}}}"#;
        assert!(matches!(decode_input(line), Err(InputError::Data(_))));
    }
}
