//! The record kinds: the one table of kind names and their variants, and
//! [`decode_data`], which turns a kind and its `data` into a record body.
//! Every other place that needs a kind's name or its variant goes through
//! [`EntryKind`], [`OpKind`] or [`RecordKind`]; matches on them (and on
//! `EntryBody`/`OpRecord`) are exhaustive, so a new kind forces a decision
//! everywhere (the crate denies `clippy::wildcard_enum_match_arm`).

use serde::Deserialize;

use crate::record::{
    AppStateChange, ApprovalRequested, ApprovalResolved, Checkout, Compaction, Custom, EntryBody,
    Header, InputQueued, Label, Message, ModelAttempted, OpFinished, OpRecord, OpStarted,
    SessionInfo, Settings, ToolDispatched, Unknown, UsageSettled,
};

/// The kinds of tree entries this version knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntryKind {
    /// `message`.
    Message,
    /// `app_state`.
    AppState,
    /// `compaction`.
    Compaction,
    /// `checkout`.
    Checkout,
    /// `settings`.
    Settings,
    /// `label`.
    Label,
    /// `session_info`.
    SessionInfo,
    /// `custom`.
    Custom,
}

impl EntryKind {
    /// Every entry kind, in the order FORMAT.md lists them.
    pub const ALL: [EntryKind; 8] = [
        EntryKind::Message,
        EntryKind::AppState,
        EntryKind::Compaction,
        EntryKind::Checkout,
        EntryKind::Settings,
        EntryKind::Label,
        EntryKind::SessionInfo,
        EntryKind::Custom,
    ];

    /// The name written in a record's `kind` field.
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::Message => "message",
            EntryKind::AppState => "app_state",
            EntryKind::Compaction => "compaction",
            EntryKind::Checkout => "checkout",
            EntryKind::Settings => "settings",
            EntryKind::Label => "label",
            EntryKind::SessionInfo => "session_info",
            EntryKind::Custom => "custom",
        }
    }

    /// The entry kind named `name`, if this version knows it.
    pub fn from_name(name: &str) -> Option<EntryKind> {
        EntryKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// The kinds of operation-journal records this version knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// `op_started`.
    OpStarted,
    /// `model_attempted`.
    ModelAttempted,
    /// `usage_settled`.
    UsageSettled,
    /// `approval_requested`.
    ApprovalRequested,
    /// `approval_resolved`.
    ApprovalResolved,
    /// `tool_dispatched`.
    ToolDispatched,
    /// `input_queued`.
    InputQueued,
    /// `op_finished`.
    OpFinished,
}

impl OpKind {
    /// Every operation-journal kind, in the order FORMAT.md lists them.
    pub const ALL: [OpKind; 8] = [
        OpKind::OpStarted,
        OpKind::ModelAttempted,
        OpKind::UsageSettled,
        OpKind::ApprovalRequested,
        OpKind::ApprovalResolved,
        OpKind::ToolDispatched,
        OpKind::InputQueued,
        OpKind::OpFinished,
    ];

    /// The name written in a record's `kind` field.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::OpStarted => "op_started",
            OpKind::ModelAttempted => "model_attempted",
            OpKind::UsageSettled => "usage_settled",
            OpKind::ApprovalRequested => "approval_requested",
            OpKind::ApprovalResolved => "approval_resolved",
            OpKind::ToolDispatched => "tool_dispatched",
            OpKind::InputQueued => "input_queued",
            OpKind::OpFinished => "op_finished",
        }
    }

    /// The operation-journal kind named `name`, if this version knows it.
    pub fn from_name(name: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl EntryBody {
    /// The entry's kind (`None` for a record of a kind this version does
    /// not know, kept because it is ignorable).
    pub fn known_kind(&self) -> Option<EntryKind> {
        match self {
            EntryBody::Message(_) => Some(EntryKind::Message),
            EntryBody::AppState(_) => Some(EntryKind::AppState),
            EntryBody::Compaction(_) => Some(EntryKind::Compaction),
            EntryBody::Checkout(_) => Some(EntryKind::Checkout),
            EntryBody::Settings(_) => Some(EntryKind::Settings),
            EntryBody::Label(_) => Some(EntryKind::Label),
            EntryBody::SessionInfo(_) => Some(EntryKind::SessionInfo),
            EntryBody::Custom(_) => Some(EntryKind::Custom),
            EntryBody::Ignored(_) => None,
        }
    }

    /// The record kind written in the `kind` field.
    pub fn kind(&self) -> &str {
        // `known_kind` is the exhaustive match; only an ignored record keeps
        // its own name.
        if let EntryBody::Ignored(u) = self {
            &u.kind
        } else {
            self.known_kind().map_or("", EntryKind::name)
        }
    }

    /// The message, when the entry is one.
    pub fn message(&self) -> Option<&Message> {
        if let EntryBody::Message(m) = self {
            Some(m)
        } else {
            None
        }
    }
}

impl OpRecord {
    /// The record's kind (`None` for a record of a kind this version does
    /// not know, kept because it is ignorable).
    pub fn known_kind(&self) -> Option<OpKind> {
        match self {
            OpRecord::OpStarted(_) => Some(OpKind::OpStarted),
            OpRecord::ModelAttempted(_) => Some(OpKind::ModelAttempted),
            OpRecord::UsageSettled(_) => Some(OpKind::UsageSettled),
            OpRecord::ApprovalRequested(_) => Some(OpKind::ApprovalRequested),
            OpRecord::ApprovalResolved(_) => Some(OpKind::ApprovalResolved),
            OpRecord::ToolDispatched(_) => Some(OpKind::ToolDispatched),
            OpRecord::InputQueued(_) => Some(OpKind::InputQueued),
            OpRecord::OpFinished(_) => Some(OpKind::OpFinished),
            OpRecord::Ignored(_) => None,
        }
    }

    /// The record kind written in the `kind` field.
    pub fn kind(&self) -> &str {
        // `known_kind` is the exhaustive match; only an ignored record keeps
        // its own name.
        if let OpRecord::Ignored(u) = self {
            &u.kind
        } else {
            self.known_kind().map_or("", OpKind::name)
        }
    }
}

/// A kind this version knows: the header, an entry kind or an
/// operation-journal kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// `header` (record 0 only).
    Header,
    /// A tree entry.
    Entry(EntryKind),
    /// An operation-journal record.
    Op(OpKind),
}

impl RecordKind {
    /// The name written in a record's `kind` field for the header.
    pub const HEADER: &'static str = "header";

    /// The kind named `name`, if this version knows it.
    pub fn from_name(name: &str) -> Option<RecordKind> {
        if name == RecordKind::HEADER {
            return Some(RecordKind::Header);
        }
        EntryKind::from_name(name)
            .map(RecordKind::Entry)
            .or_else(|| OpKind::from_name(name).map(RecordKind::Op))
    }

    /// The name written in a record's `kind` field.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Header => RecordKind::HEADER,
            RecordKind::Entry(k) => k.name(),
            RecordKind::Op(k) => k.name(),
        }
    }
}

/// A record's `data` decoded by its kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// A header's data.
    Header(Header),
    /// The body of an entry of a known kind.
    Entry(EntryBody),
    /// An operation-journal record of a known kind.
    Op(OpRecord),
    /// A kind this version does not know, marked ignorable: kept as it is.
    /// It is an entry when its record has `id` and `parent`, else a
    /// log-only record.
    Unknown(Unknown),
}

/// Why a record cannot be decoded from its kind and data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The line is not the JSON object the format requires.
    #[error("the record is not valid: {0}")]
    Json(String),
    /// The kind is not known to this version and the record is not marked ignorable.
    #[error(
        "unknown record kind {0:?}; it was written by a newer or different program and is not marked \"ignorable\": upgrade cairn to read it"
    )]
    UnknownKind(String),
    /// An entry kind without `id` or `parent`, or a non-entry kind with them.
    #[error("record kind {kind:?} {problem}")]
    Shape {
        /// The kind.
        kind: String,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Decodes a record's `data` (its JSON text) by its `kind`: the one decoder
/// of record payloads, used for lines read from a log and for records given
/// on `cairn append`'s input. A kind this version does not know decodes to
/// [`Payload::Unknown`] when `ignorable`.
///
/// # Errors
///
/// [`DecodeError::UnknownKind`] for an unknown kind that is not
/// `ignorable`; [`DecodeError::Json`] when `data` is not JSON or does not
/// fit the kind.
///
/// ```
/// use cairn::{EntryBody, Payload, decode_data};
/// let p = decode_data("session_info", false, br#"{"title":"plans"}"#)?;
/// assert!(matches!(p, Payload::Entry(EntryBody::SessionInfo(i)) if i.title.as_deref() == Some("plans")));
/// assert!(decode_data("x.mine", false, b"{}").is_err());
/// # Ok::<(), cairn::DecodeError>(())
/// ```
pub fn decode_data(kind: &str, ignorable: bool, data: &[u8]) -> Result<Payload, DecodeError> {
    fn de<T: for<'de> Deserialize<'de>>(kind: &str, data: &[u8]) -> Result<T, DecodeError> {
        let bad = |e: String| DecodeError::Json(format!("{kind} data: {e}"));
        // The JSON rule (FORMAT.md section 1) before serde_json, which would
        // round a long integer or let a repeated member name through.
        crate::ijson::check(data).map_err(bad)?;
        serde_json::from_slice(data).map_err(|e| bad(e.to_string()))
    }
    let Some(known) = RecordKind::from_name(kind) else {
        if !ignorable {
            return Err(DecodeError::UnknownKind(kind.to_owned()));
        }
        return Ok(Payload::Unknown(Unknown {
            kind: kind.to_owned(),
            data: de(kind, data)?,
        }));
    };
    Ok(match known {
        RecordKind::Header => Payload::Header(de(kind, data)?),
        RecordKind::Entry(k) => Payload::Entry(match k {
            EntryKind::Message => EntryBody::Message(de::<Message>(kind, data)?),
            EntryKind::AppState => EntryBody::AppState(de::<AppStateChange>(kind, data)?),
            EntryKind::Compaction => EntryBody::Compaction(de::<Compaction>(kind, data)?),
            EntryKind::Checkout => EntryBody::Checkout(de::<Checkout>(kind, data)?),
            EntryKind::Settings => EntryBody::Settings(de::<Settings>(kind, data)?),
            EntryKind::Label => EntryBody::Label(de::<Label>(kind, data)?),
            EntryKind::SessionInfo => EntryBody::SessionInfo(de::<SessionInfo>(kind, data)?),
            EntryKind::Custom => EntryBody::Custom(de::<Custom>(kind, data)?),
        }),
        RecordKind::Op(k) => Payload::Op(match k {
            OpKind::OpStarted => OpRecord::OpStarted(de::<OpStarted>(kind, data)?),
            OpKind::ModelAttempted => OpRecord::ModelAttempted(de::<ModelAttempted>(kind, data)?),
            OpKind::UsageSettled => OpRecord::UsageSettled(de::<UsageSettled>(kind, data)?),
            OpKind::ApprovalRequested => {
                OpRecord::ApprovalRequested(de::<ApprovalRequested>(kind, data)?)
            }
            OpKind::ApprovalResolved => {
                OpRecord::ApprovalResolved(de::<ApprovalResolved>(kind, data)?)
            }
            OpKind::ToolDispatched => OpRecord::ToolDispatched(de::<ToolDispatched>(kind, data)?),
            OpKind::InputQueued => OpRecord::InputQueued(de::<InputQueued>(kind, data)?),
            OpKind::OpFinished => OpRecord::OpFinished(de::<OpFinished>(kind, data)?),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_name_maps_back_to_its_kind() {
        for k in EntryKind::ALL {
            assert_eq!(EntryKind::from_name(k.name()), Some(k));
            assert_eq!(RecordKind::from_name(k.name()), Some(RecordKind::Entry(k)));
            assert_eq!(OpKind::from_name(k.name()), None);
        }
        for k in OpKind::ALL {
            assert_eq!(OpKind::from_name(k.name()), Some(k));
            assert_eq!(RecordKind::from_name(k.name()), Some(RecordKind::Op(k)));
        }
        assert_eq!(RecordKind::from_name("header"), Some(RecordKind::Header));
        assert_eq!(RecordKind::from_name("ignored"), None);
    }

    #[test]
    fn an_unknown_kind_decodes_only_when_ignorable() {
        assert_eq!(
            decode_data("x.future", false, b"{}"),
            Err(DecodeError::UnknownKind("x.future".into()))
        );
        assert!(matches!(
            decode_data("x.future", true, br#"{"a":1}"#),
            Ok(Payload::Unknown(u)) if u.kind == "x.future" && u.data["a"] == 1
        ));
    }

    #[test]
    fn data_that_does_not_fit_the_kind_names_the_kind() {
        let e = decode_data("label", false, br#"{"name":1}"#).unwrap_err();
        assert!(
            matches!(&e, DecodeError::Json(m) if m.starts_with("label data: ")),
            "{e}"
        );
    }
}
