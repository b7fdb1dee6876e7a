//! The projection: [`Context`] is the fold of the branch from its root to the
//! leaf. [`Context::fold`] is the rule written plainly (from scratch, over
//! decoded entries); `Projector` (`projector/`) maintains the same value
//! incrementally: O(1) amortized per entry appended at the leaf, and on a
//! move it truncates to the common ancestor and replays only the new suffix
//! (plus, when a compaction is left behind, the kept range of the one
//! before it).
//!
//! A message entry's message ([`ContextMessage`], `message.rs`) is kept as
//! where its line is (`lazy.rs`) when the backend reads lines cheaply by
//! position, and decoded only when first asked for
//! ([`ContextMessage::message`]), its line checked again then.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use crate::id::EntryId;
use crate::record::{
    AppStateChange, Compaction, Entry, EntryBody, Message, Role, SessionInfo, value_text,
};

mod lazy;
mod list;
mod message;
mod projector;

pub use list::{Iter as MessagesIter, Messages};
pub use message::{ContextMessage, Source};

pub(crate) use projector::{CheckError, Projector, Saved};

/// What the model sees and the state beside it, at one leaf. Immutable: a
/// snapshot handed out by a session never changes and cannot change history.
///
/// Cheap to open, clone and share: the messages are a persistent chunked
/// list ([`Messages`]), and on the file backend a message entry's message
/// is kept as where its line is in the session file, read, checked and
/// decoded the first time [`ContextMessage::message`] is called (then kept).
/// So taking the context and counting its messages reads none of them, and
/// reading a message can fail: the file changed or was damaged since the
/// open. Only the entries a persisted index covers are kept so; lines the
/// open parsed are decoded there. Backends that cannot read a line cheaply
/// by position (the SQL ones, memory) decode every message at open. A
/// snapshot holding such messages keeps the session file open (its handle,
/// not the writer lock) for as long as it lives. Two contexts are equal when
/// their messages decode to equal messages (and their other fields are
/// equal).
///
/// ```
/// use cairn::{MemoryBackend, Session};
/// use cairn::testkit::build::user;
///
/// let backend = MemoryBackend::new();
/// let s = Session::create(&backend, Default::default())?;
/// s.append(user("hello"))?;
/// let ctx = s.context();
/// assert_eq!(ctx.messages().len(), 1);
/// assert_eq!(ctx.messages()[0].message()?.plain_text(), "hello");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    leaf: Option<EntryId>,
    messages: Messages,
    app_state: Value,
    settings: Map<String, Value>,
    compaction: Option<ActiveCompaction>,
    labels: BTreeMap<String, EntryId>,
}

/// The compaction in force on the branch.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveCompaction {
    /// The compaction entry.
    pub entry: EntryId,
    /// Its summary.
    pub summary: String,
    /// The first entry kept after the summary.
    pub first_kept: Option<EntryId>,
    /// Context size before it, if recorded.
    pub tokens_before: Option<u64>,
}

/// Text that introduces a compaction summary to the model.
pub const COMPACTION_PREFIX: &str =
    "The conversation before this point was compacted. Summary:\n\n";
/// Text that introduces a checkout summary to the model.
pub const CHECKOUT_PREFIX: &str =
    "The conversation returned here from another branch. Summary of that branch:\n\n";

impl Context {
    /// The context of an empty branch.
    pub fn empty(initial_state: Value) -> Context {
        Context {
            leaf: None,
            messages: Messages::new(),
            app_state: initial_state,
            settings: Map::new(),
            compaction: None,
            labels: BTreeMap::new(),
        }
    }

    /// The leaf this context was folded up to (`None`: before the first entry).
    pub fn leaf(&self) -> Option<&EntryId> {
        self.leaf.as_ref()
    }
    /// The messages the model sees, in order.
    pub fn messages(&self) -> &Messages {
        &self.messages
    }
    /// The application state at the leaf.
    pub fn app_state(&self) -> &Value {
        &self.app_state
    }
    /// The settings at the leaf.
    pub fn settings(&self) -> &Map<String, Value> {
        &self.settings
    }
    /// The compaction in force, if any.
    pub fn compaction(&self) -> Option<&ActiveCompaction> {
        self.compaction.as_ref()
    }
    /// The session's labels (bookmarks are session-wide, not per branch).
    pub fn labels(&self) -> &BTreeMap<String, EntryId> {
        &self.labels
    }

    /// The context written plainly: folds `entries` (all of a session's
    /// entries, in append order) along the branch ending at `leaf`.
    /// Entries whose parent is missing end the branch walk.
    pub fn fold(initial_state: &Value, entries: &[Entry], leaf: Option<&EntryId>) -> Context {
        let by_id: HashMap<&EntryId, &Entry> = entries.iter().map(|e| (&e.id, e)).collect();
        let mut branch: Vec<&Entry> = Vec::new();
        let mut cur = leaf.and_then(|l| by_id.get(l).copied());
        while let Some(e) = cur {
            branch.push(e);
            cur = e.parent.as_ref().and_then(|p| by_id.get(p).copied());
        }
        branch.reverse();
        let mut ctx = Context::empty(initial_state.clone());
        ctx.leaf = branch.last().map(|e| e.id.clone());
        let mut wide = SessionWide::default();
        for e in entries {
            wide.apply(&e.body);
        }
        ctx.labels = wide.labels;
        let mut last_compaction = None;
        for (pos, e) in branch.iter().enumerate() {
            match &e.body {
                EntryBody::AppState(change) => apply_state(&mut ctx.app_state, change),
                EntryBody::Settings(s) => merge_settings(&mut ctx.settings, &s.values),
                EntryBody::Compaction(c) => last_compaction = Some((pos, c)),
                EntryBody::Message(_)
                | EntryBody::Checkout(_)
                | EntryBody::Label(_)
                | EntryBody::SessionInfo(_)
                | EntryBody::Custom(_)
                | EntryBody::Ignored(_) => {}
            }
        }
        let start = match last_compaction {
            None => 0,
            Some((cpos, c)) => {
                ctx.compaction = Some(active(&branch[cpos].id, c));
                ctx.messages
                    .push(summary_message(&branch[cpos].id, cpos as u32, c));
                c.first_kept
                    .as_ref()
                    .and_then(|k| branch.iter().position(|e| &e.id == k))
                    .unwrap_or(cpos + 1)
            }
        };
        for (pos, e) in branch.iter().enumerate().skip(start) {
            if let Some(m) = message_of(e, pos as u32) {
                ctx.messages.push(m);
            }
        }
        ctx
    }
}

/// The session-wide folds: labels and the title, over every entry of the
/// session in append order (not only the branch). A label entry sets or
/// removes its name; a `session_info` entry with a title replaces the title
/// (the header's is the first).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SessionWide {
    /// Labels: name → entry.
    pub labels: BTreeMap<String, EntryId>,
    /// The latest title.
    pub title: Option<String>,
}

impl SessionWide {
    /// The folds before any entry, with the header's title.
    pub fn new(title: Option<String>) -> SessionWide {
        SessionWide {
            labels: BTreeMap::new(),
            title,
        }
    }

    /// Folds in one entry.
    pub fn apply(&mut self, body: &EntryBody) {
        match body {
            EntryBody::Label(l) => match &l.target {
                Some(t) => {
                    self.labels.insert(l.name.clone(), t.clone());
                }
                None => {
                    self.labels.remove(&l.name);
                }
            },
            EntryBody::SessionInfo(i) => fold_title(&mut self.title, i),
            EntryBody::Message(_)
            | EntryBody::AppState(_)
            | EntryBody::Compaction(_)
            | EntryBody::Checkout(_)
            | EntryBody::Settings(_)
            | EntryBody::Custom(_)
            | EntryBody::Ignored(_) => {}
        }
    }
}

/// The title rule: a `session_info` entry with a title replaces the title.
pub(crate) fn fold_title(title: &mut Option<String>, info: &SessionInfo) {
    if let Some(t) = &info.title {
        *title = Some(t.clone());
    }
}

fn active(id: &EntryId, c: &Compaction) -> ActiveCompaction {
    ActiveCompaction {
        entry: id.clone(),
        summary: c.summary.clone(),
        first_kept: c.first_kept.clone(),
        tokens_before: c.tokens_before,
    }
}

fn summary_message(id: &EntryId, pos: u32, c: &Compaction) -> ContextMessage {
    ContextMessage::decoded(
        id.clone(),
        Source::CompactionSummary,
        Message::text(Role::User, format!("{COMPACTION_PREFIX}{}", c.summary)),
        pos,
    )
}

/// [`message_of`] for an entry the caller no longer needs: a message is
/// moved into the context, not copied.
fn message_from(e: Entry, pos: u32) -> Option<ContextMessage> {
    // Only a message is moved; every other kind is decided in `message_of`.
    if let EntryBody::Message(m) = e.body {
        return Some(ContextMessage::decoded(e.id, Source::Message, m, pos));
    }
    message_of(&e, pos)
}

/// The message an entry contributes to the context, if any (compactions are
/// handled separately: only the active one contributes, as the first message).
fn message_of(e: &Entry, pos: u32) -> Option<ContextMessage> {
    let (source, message) = match &e.body {
        EntryBody::Message(m) => (Source::Message, m.clone()),
        EntryBody::Checkout(c) => {
            let summary = c.summary.as_ref()?;
            (
                Source::CheckoutSummary,
                Message::text(Role::User, format!("{CHECKOUT_PREFIX}{summary}")),
            )
        }
        EntryBody::Custom(c) if c.visible => {
            let text = value_text(&c.content);
            (
                Source::Custom(c.namespace.clone()),
                Message::text(Role::User, text),
            )
        }
        EntryBody::Custom(_)
        | EntryBody::AppState(_)
        | EntryBody::Compaction(_)
        | EntryBody::Settings(_)
        | EntryBody::Label(_)
        | EntryBody::SessionInfo(_)
        | EntryBody::Ignored(_) => return None,
    };
    Some(ContextMessage::decoded(e.id.clone(), source, message, pos))
}

/// Applies an app-state change: a full value, or an RFC 7386 merge patch.
pub fn apply_state(state: &mut Value, change: &AppStateChange) {
    match change {
        AppStateChange::Set(v) => *state = v.clone(),
        AppStateChange::Patch(p) => merge_patch(state, p),
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn merge_settings(settings: &mut Map<String, Value>, values: &Map<String, Value>) {
    for (k, v) in values {
        if v.is_null() {
            settings.remove(k);
        } else {
            settings.insert(k.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386_examples() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (target, patch, want) in cases {
            let mut t = target.clone();
            merge_patch(&mut t, &patch);
            assert_eq!(t, want, "{target} + {patch}");
        }
    }
}
