//! The projection: [`Context`] is the fold of the branch from its root to the
//! leaf. [`Context::fold`] is the rule written plainly (from scratch, over
//! decoded entries); `Projector` maintains the same value incrementally: O(1)
//! amortized per entry appended at the leaf, and on a move it truncates to the
//! common ancestor and replays only the new suffix (plus, when a compaction is
//! left behind, the kept range of the one before it).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{Invalid, ReadError};
use crate::id::EntryId;
use crate::kind::EntryKind;
use crate::record::{
    AppStateChange, Compaction, Entry, EntryBody, Message, Role, SessionInfo, value_text,
};
use crate::tree::Tree;

/// What the model sees and the state beside it, at one leaf. Immutable: a
/// snapshot handed out by a session never changes and cannot change history.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    leaf: Option<EntryId>,
    messages: Vec<ContextMessage>,
    app_state: Value,
    settings: Map<String, Value>,
    compaction: Option<ActiveCompaction>,
    labels: BTreeMap<String, EntryId>,
}

/// One message of the context and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextMessage {
    entry: EntryId,
    source: Source,
    message: Arc<Message>,
    /// Position of the source entry on the branch (0 = root).
    pos: u32,
}

impl ContextMessage {
    /// The entry that produced the message.
    pub fn entry(&self) -> &EntryId {
        &self.entry
    }
    /// What kind of entry produced it.
    pub fn source(&self) -> &Source {
        &self.source
    }
    /// The message.
    pub fn message(&self) -> &Message {
        &self.message
    }
}

/// The kind of entry a context message comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// A `message` entry.
    Message,
    /// The active compaction's summary (always the first message).
    CompactionSummary,
    /// A checkout's summary of the branch it left.
    CheckoutSummary,
    /// A visible `custom` entry of this namespace.
    Custom(String),
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
            messages: Vec::new(),
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
    pub fn messages(&self) -> &[ContextMessage] {
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
    ContextMessage {
        entry: id.clone(),
        source: Source::CompactionSummary,
        message: Arc::new(Message::text(
            Role::User,
            format!("{COMPACTION_PREFIX}{}", c.summary),
        )),
        pos,
    }
}

/// The message an entry contributes to the context, if any (compactions are
/// handled separately: only the active one contributes, as the first message).
fn message_of(e: &Entry, pos: u32) -> Option<ContextMessage> {
    let (source, message) = match &e.body {
        EntryBody::Message(m) => (Source::Message, Arc::new(m.clone())),
        EntryBody::Checkout(c) => {
            let summary = c.summary.as_ref()?;
            (
                Source::CheckoutSummary,
                Arc::new(Message::text(
                    Role::User,
                    format!("{CHECKOUT_PREFIX}{summary}"),
                )),
            )
        }
        EntryBody::Custom(c) if c.visible => {
            let text = value_text(&c.content);
            (
                Source::Custom(c.namespace.clone()),
                Arc::new(Message::text(Role::User, text)),
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
    Some(ContextMessage {
        entry: e.id.clone(),
        source,
        message,
        pos,
    })
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

/// Reads decoded entries by node number (the session reads them from its log).
pub(crate) trait EntrySource {
    fn entry(&self, node: u32) -> Result<Entry, ReadError>;
}

/// Snapshots of the app state are kept every this many `app_state` entries on
/// the branch; a move replays at most this many patches.
const STATE_SNAPSHOT_EVERY: usize = 16;

#[derive(Debug, Clone)]
struct Mark<T> {
    pos: u32,
    node: u32,
    snapshot: Option<Arc<T>>,
}

#[derive(Debug, Clone, Copy)]
struct Call {
    pos: u32,
    answered: Option<u32>,
}

/// The incremental projection of one session.
#[derive(Debug, Clone)]
pub(crate) struct Projector {
    initial_state: Arc<Value>,
    path: Vec<u32>,
    ctx: Arc<Context>,
    state_marks: Vec<Mark<Value>>,
    settings_marks: Vec<Mark<Map<String, Value>>>,
    /// Positions of the compaction entries on the branch.
    compactions: Vec<u32>,
    /// Start of the kept range of the active compaction (0 without one).
    kept_from: u32,
    /// Tool calls in the context, by call id.
    calls: HashMap<String, Call>,
}

impl Projector {
    pub fn new(initial_state: Value) -> Projector {
        Projector {
            ctx: Arc::new(Context::empty(initial_state.clone())),
            initial_state: Arc::new(initial_state),
            path: Vec::new(),
            state_marks: Vec::new(),
            settings_marks: Vec::new(),
            compactions: Vec::new(),
            kept_from: 0,
            calls: HashMap::new(),
        }
    }

    /// A shared, immutable snapshot of the context.
    pub fn context(&self) -> Arc<Context> {
        Arc::clone(&self.ctx)
    }

    /// The branch, as node numbers from the root.
    pub fn path(&self) -> &[u32] {
        &self.path
    }

    /// The node at the end of the branch.
    pub fn leaf(&self) -> Option<u32> {
        self.path.last().copied()
    }

    /// Whether a tool call is in the context: `Some(answered)`, or `None`.
    pub fn call_state(&self, call_id: &str) -> Option<bool> {
        self.calls.get(call_id).map(|c| c.answered.is_some())
    }

    pub fn set_labels(&mut self, labels: BTreeMap<String, EntryId>) {
        Arc::make_mut(&mut self.ctx).labels = labels;
    }

    fn on_path(&self, tree: &Tree, node: u32) -> Option<u32> {
        let d = tree.node(node).depth as usize;
        (self.path.get(d) == Some(&node)).then_some(d as u32)
    }

    /// Moves the branch end to `target`: truncates to the common ancestor and
    /// replays the entries from there to `target`.
    pub fn move_to(
        &mut self,
        tree: &Tree,
        target: Option<u32>,
        src: &dyn EntrySource,
    ) -> Result<(), ReadError> {
        if target == self.leaf() {
            return Ok(());
        }
        let mut suffix = Vec::new();
        let mut cur = target;
        while let Some(c) = cur {
            if self.on_path(tree, c).is_some() {
                break;
            }
            suffix.push(c);
            cur = tree.node(c).parent;
        }
        let keep = cur.map_or(0, |c| tree.node(c).depth as usize + 1);
        self.truncate(tree, keep, src)?;
        suffix.reverse();
        self.extend(tree, &suffix, src)
    }

    /// Appends the nodes of `suffix` (a path continuing the branch) reading
    /// only what the context needs: app-state and settings entries always;
    /// message-producing entries only from the last compaction's kept range.
    fn extend(
        &mut self,
        tree: &Tree,
        suffix: &[u32],
        src: &dyn EntrySource,
    ) -> Result<(), ReadError> {
        if !suffix
            .iter()
            .any(|&n| tree.node(n).kind == Some(EntryKind::Compaction))
        {
            for &n in suffix {
                match tree.node(n).kind {
                    Some(EntryKind::Message)
                    | Some(EntryKind::Checkout)
                    | Some(EntryKind::Custom)
                    | Some(EntryKind::AppState)
                    | Some(EntryKind::Settings) => {
                        let e = src.entry(n)?;
                        self.push(tree, n, e, src)?;
                    }
                    Some(EntryKind::Compaction)
                    | Some(EntryKind::Label)
                    | Some(EntryKind::SessionInfo)
                    | None => self.push_quiet(tree, n),
                }
            }
            return Ok(());
        }
        // Bulk: fold state and settings, note compactions, then build the
        // messages once from the newest compaction's kept range.
        for &n in suffix {
            let pos = self.path.len() as u32;
            match tree.node(n).kind {
                Some(EntryKind::AppState) | Some(EntryKind::Settings) => {
                    let e = src.entry(n)?;
                    self.path.push(n);
                    self.fold_state(pos, n, &e);
                }
                Some(EntryKind::Compaction) => {
                    self.path.push(n);
                    self.compactions.push(pos);
                }
                Some(EntryKind::Message)
                | Some(EntryKind::Checkout)
                | Some(EntryKind::Custom)
                | Some(EntryKind::Label)
                | Some(EntryKind::SessionInfo)
                | None => {
                    self.path.push(n);
                }
            }
        }
        Arc::make_mut(&mut self.ctx).leaf = self.path.last().map(|&n| tree.node(n).id.clone());
        self.rebuild_messages(tree, src)
    }

    /// Extends the branch by an entry that contributes nothing to the context.
    fn push_quiet(&mut self, tree: &Tree, node: u32) {
        self.path.push(node);
        Arc::make_mut(&mut self.ctx).leaf = Some(tree.node(node).id.clone());
    }

    /// Folds an app-state or settings entry at `pos` into the context.
    fn fold_state(&mut self, pos: u32, node: u32, entry: &Entry) {
        match &entry.body {
            EntryBody::AppState(change) => {
                let ctx = Arc::make_mut(&mut self.ctx);
                apply_state(&mut ctx.app_state, change);
                let snapshot = (self.state_marks.len() + 1)
                    .is_multiple_of(STATE_SNAPSHOT_EVERY)
                    .then(|| Arc::new(ctx.app_state.clone()));
                self.state_marks.push(Mark {
                    pos,
                    node,
                    snapshot,
                });
            }
            EntryBody::Settings(s) => {
                let ctx = Arc::make_mut(&mut self.ctx);
                merge_settings(&mut ctx.settings, &s.values);
                let snapshot = Some(Arc::new(ctx.settings.clone()));
                self.settings_marks.push(Mark {
                    pos,
                    node,
                    snapshot,
                });
            }
            EntryBody::Message(_)
            | EntryBody::Compaction(_)
            | EntryBody::Checkout(_)
            | EntryBody::Label(_)
            | EntryBody::SessionInfo(_)
            | EntryBody::Custom(_)
            | EntryBody::Ignored(_) => {}
        }
    }

    fn truncate(
        &mut self,
        tree: &Tree,
        keep: usize,
        src: &dyn EntrySource,
    ) -> Result<(), ReadError> {
        if keep >= self.path.len() {
            return Ok(());
        }
        let keep32 = keep as u32;
        self.path.truncate(keep);
        self.state_marks.retain(|m| m.pos < keep32);
        self.settings_marks.retain(|m| m.pos < keep32);
        let state = self.replay_state(src)?;
        let settings = self.settings_marks.last().and_then(|m| m.snapshot.clone());
        let dropped_compaction = self.compactions.last().is_some_and(|&c| c >= keep32);
        self.compactions.retain(|&c| c < keep32);
        {
            let ctx = Arc::make_mut(&mut self.ctx);
            ctx.app_state = state;
            ctx.settings = settings.map(|s| (*s).clone()).unwrap_or_default();
            ctx.leaf = self.path.last().map(|&n| tree.node(n).id.clone());
        }
        if dropped_compaction {
            self.rebuild_messages(tree, src)?;
        } else {
            Arc::make_mut(&mut self.ctx)
                .messages
                .retain(|m| m.pos < keep32);
            self.calls.retain(|_, c| c.pos < keep32);
            for c in self.calls.values_mut() {
                if c.answered.is_some_and(|a| a >= keep32) {
                    c.answered = None;
                }
            }
        }
        Ok(())
    }

    /// The app state after the marks kept: the last snapshot plus the patches after it.
    fn replay_state(&self, src: &dyn EntrySource) -> Result<Value, ReadError> {
        let base = self.state_marks.iter().rposition(|m| m.snapshot.is_some());
        let mut state = match base {
            Some(i) => self.state_marks[i]
                .snapshot
                .as_deref()
                .cloned()
                .unwrap_or(Value::Null),
            None => (*self.initial_state).clone(),
        };
        for m in &self.state_marks[base.map_or(0, |i| i + 1)..] {
            if let EntryBody::AppState(change) = &src.entry(m.node)?.body {
                apply_state(&mut state, change);
            }
        }
        Ok(state)
    }

    /// Recomputes the messages from the active compaction's kept range (or the root).
    fn rebuild_messages(&mut self, tree: &Tree, src: &dyn EntrySource) -> Result<(), ReadError> {
        let mut messages = Vec::new();
        self.calls.clear();
        let mut compaction = None;
        let start = match self.compactions.last() {
            None => 0,
            Some(&cpos) => {
                let node = self.path[cpos as usize];
                let entry = src.entry(node)?;
                let EntryBody::Compaction(c) = &entry.body else {
                    return Err(ReadError::NoSuchRecord(tree.node(node).seq));
                };
                compaction = Some(active(&entry.id, c));
                messages.push(summary_message(&entry.id, cpos, c));
                c.first_kept
                    .as_ref()
                    .and_then(|k| tree.get(k))
                    .and_then(|n| self.on_path(tree, n))
                    .unwrap_or(cpos + 1)
            }
        };
        self.kept_from = start;
        for pos in start as usize..self.path.len() {
            let node = self.path[pos];
            if matches!(
                tree.node(node).kind,
                Some(EntryKind::Message) | Some(EntryKind::Checkout) | Some(EntryKind::Custom)
            ) {
                let e = src.entry(node)?;
                if let Some(m) = message_of(&e, pos as u32) {
                    Self::track_calls(&mut self.calls, &m);
                    messages.push(m);
                }
            }
        }
        let ctx = Arc::make_mut(&mut self.ctx);
        ctx.messages = messages;
        ctx.compaction = compaction;
        Ok(())
    }

    fn track_calls(calls: &mut HashMap<String, Call>, m: &ContextMessage) {
        if m.source != Source::Message {
            return;
        }
        for (call_id, _, _) in m.message.tool_calls() {
            calls.insert(
                call_id.to_owned(),
                Call {
                    pos: m.pos,
                    answered: None,
                },
            );
        }
        for call_id in m.message.tool_results() {
            if let Some(c) = calls.get_mut(call_id) {
                c.answered = Some(m.pos);
            }
        }
    }

    /// Appends `entry` (node `node`, whose parent is the current leaf) to the branch.
    pub fn push(
        &mut self,
        tree: &Tree,
        node: u32,
        entry: Entry,
        src: &dyn EntrySource,
    ) -> Result<(), ReadError> {
        let pos = self.path.len() as u32;
        self.path.push(node);
        Arc::make_mut(&mut self.ctx).leaf = Some(entry.id.clone());
        let Entry { id, parent, body } = entry;
        let body = match body {
            EntryBody::Message(m) => {
                // Moved, not cloned: appending at the leaf copies no content.
                let m = ContextMessage {
                    entry: id,
                    source: Source::Message,
                    message: Arc::new(m),
                    pos,
                };
                Self::track_calls(&mut self.calls, &m);
                Arc::make_mut(&mut self.ctx).messages.push(m);
                return Ok(());
            }
            other @ (EntryBody::AppState(_)
            | EntryBody::Compaction(_)
            | EntryBody::Checkout(_)
            | EntryBody::Settings(_)
            | EntryBody::Label(_)
            | EntryBody::SessionInfo(_)
            | EntryBody::Custom(_)
            | EntryBody::Ignored(_)) => other,
        };
        let entry = &Entry { id, parent, body };
        match &entry.body {
            EntryBody::AppState(_) | EntryBody::Settings(_) => self.fold_state(pos, node, entry),
            EntryBody::Compaction(c) => {
                self.compactions.push(pos);
                let fk = match &c.first_kept {
                    Some(k) => tree
                        .get(k)
                        .and_then(|n| self.on_path(tree, n))
                        .unwrap_or(pos + 1),
                    None => pos + 1,
                };
                if fk >= self.kept_from {
                    self.kept_from = fk;
                    self.calls.retain(|_, call| call.pos >= fk);
                    let ctx = Arc::make_mut(&mut self.ctx);
                    ctx.messages
                        .retain(|m| m.pos >= fk && m.source != Source::CompactionSummary);
                    ctx.messages.insert(0, summary_message(&entry.id, pos, c));
                    ctx.compaction = Some(active(&entry.id, c));
                } else {
                    self.rebuild_messages(tree, src)?;
                }
            }
            EntryBody::Message(_)
            | EntryBody::Checkout(_)
            | EntryBody::Custom(_)
            | EntryBody::Label(_)
            | EntryBody::SessionInfo(_)
            | EntryBody::Ignored(_) => {
                if let Some(m) = message_of(entry, pos) {
                    Self::track_calls(&mut self.calls, &m);
                    Arc::make_mut(&mut self.ctx).messages.push(m);
                }
            }
        }
        Ok(())
    }

    /// Checks that `entry` may be appended at the current leaf.
    pub fn check(
        &self,
        tree: &Tree,
        entry: &Entry,
        src: &dyn EntrySource,
    ) -> Result<(), CheckError> {
        match &entry.body {
            EntryBody::Message(m) => {
                let mut seen_calls = Vec::new();
                for (call_id, _, _) in m.tool_calls() {
                    if self.calls.contains_key(call_id) || seen_calls.contains(&call_id) {
                        return Err(Invalid::CallIdReused(call_id.to_owned()).into());
                    }
                    seen_calls.push(call_id);
                }
                let mut answered = Vec::new();
                for call_id in m.tool_results() {
                    match self.calls.get(call_id) {
                        None if !seen_calls.contains(&call_id) => {
                            return Err(Invalid::NoSuchCall(call_id.to_owned()).into());
                        }
                        Some(Call {
                            answered: Some(_), ..
                        }) => {
                            return Err(Invalid::AlreadyAnswered(call_id.to_owned()).into());
                        }
                        _ if answered.contains(&call_id) => {
                            return Err(Invalid::AlreadyAnswered(call_id.to_owned()).into());
                        }
                        _ => answered.push(call_id),
                    }
                }
                Ok(())
            }
            EntryBody::Compaction(c) => self.check_compaction(tree, c, src),
            EntryBody::AppState(_)
            | EntryBody::Checkout(_)
            | EntryBody::Settings(_)
            | EntryBody::Label(_)
            | EntryBody::SessionInfo(_)
            | EntryBody::Custom(_)
            | EntryBody::Ignored(_) => Ok(()),
        }
    }

    fn check_compaction(
        &self,
        tree: &Tree,
        c: &Compaction,
        src: &dyn EntrySource,
    ) -> Result<(), CheckError> {
        let fk = match &c.first_kept {
            None => self.path.len() as u32,
            Some(k) => {
                let off = || Invalid::FirstKeptOffBranch(k.to_string());
                let node = tree.get(k).ok_or_else(off)?;
                self.on_path(tree, node).ok_or_else(off)?
            }
        };
        let fk_name = || {
            c.first_kept
                .as_ref()
                .map_or_else(|| "(nothing)".to_owned(), ToString::to_string)
        };
        for (call_id, call) in &self.calls {
            let split = call.pos < fk && call.answered.is_none_or(|a| a >= fk);
            if split {
                return Err(Invalid::SplitsToolCall {
                    first_kept: fk_name(),
                    call_id: call_id.clone(),
                }
                .into());
            }
        }
        if fk < self.kept_from {
            // The kept range reaches back past the active compaction: read it.
            let mut calls_in_range: Vec<String> = Vec::new();
            for pos in fk as usize..self.kept_from as usize {
                let node = self.path[pos];
                if tree.node(node).kind != Some(EntryKind::Message) {
                    continue;
                }
                if let EntryBody::Message(m) = &src.entry(node)?.body {
                    calls_in_range.extend(m.tool_calls().map(|(id, _, _)| id.to_owned()));
                    if let Some(r) = m
                        .tool_results()
                        .find(|r| !calls_in_range.iter().any(|c| c == r))
                    {
                        return Err(Invalid::SplitsToolCall {
                            first_kept: fk_name(),
                            call_id: r.to_owned(),
                        }
                        .into());
                    }
                }
            }
        }
        Ok(())
    }
}

/// An entry that cannot be appended, or a read that failed while checking.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error(transparent)]
    Read(#[from] ReadError),
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
