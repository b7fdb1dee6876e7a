//! `Projector`: the context of one session maintained incrementally as
//! entries are appended and the leaf moves, equal at every step to
//! [`Context::fold`] over the same branch (property-tested), and the checks
//! an entry must pass against it before it is appended (`checks.rs`); its
//! checkpoint for a persisted index is in `checkpoint.rs`.
//!
//! The projector holds its branch from position `from` on (the compaction
//! in force, when restored from a checkpoint) and walks further up the tree
//! when a move or a check needs more. Its tool calls by id are read from the
//! messages the first time an append or the verdict needs them.
//! `Projector::each_message` hands the context's messages over one at a
//! time, each record read and checked in turn (or, on the file backend, kept
//! as where its line is): what `rebuild_messages` collects and a
//! `ContextStream` hands on.

use std::collections::BTreeMap;

// foldhash, seeded per process: call ids come from input.
use hashbrown::HashMap;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

use super::{
    ActiveCompaction, Context, ContextMessage, Messages, Source, active, apply_state,
    merge_settings, message_from, message_of, summary_message,
};
use crate::error::ReadError;
use crate::id::EntryId;
use crate::kind::EntryKind;
use crate::record::{Entry, EntryBody, Message};
use crate::source::EntrySource;
use crate::tree::{BranchFold, Tree, Walk};

mod checkpoint;
mod checks;

pub(crate) use checkpoint::Saved;
pub(crate) use checks::CheckError;

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

/// The incremental projection of one session. It holds its branch from
/// position `from` on (the whole branch when built by folding; from the
/// compaction in force when restored from a checkpoint, so that an open
/// does not walk to the root) and walks further up the tree when a move,
/// a check or an older compaction needs more of it.
#[derive(Debug, Clone)]
pub(crate) struct Projector {
    initial_state: Arc<Value>,
    /// The branch's nodes from position (depth) `from` on.
    path: Vec<u32>,
    from: u32,
    ctx: Arc<Context>,
    state_marks: Vec<Mark<Value>>,
    settings_marks: Vec<Mark<Map<String, Value>>>,
    /// Positions of the compaction entries on the branch.
    compactions: Vec<u32>,
    /// Start of the kept range of the active compaction (0 without one).
    kept_from: u32,
    /// Tool calls in the context, by call id: a function of the messages,
    /// computed when first needed ([`Projector::calls`]; an open leaves the
    /// messages unread), then kept up to date.
    calls: OnceLock<HashMap<String, Call>>,
}

impl Projector {
    pub fn new(initial_state: Value) -> Projector {
        Projector {
            ctx: Arc::new(Context::empty(initial_state.clone())),
            initial_state: Arc::new(initial_state),
            path: Vec::new(),
            from: 0,
            state_marks: Vec::new(),
            settings_marks: Vec::new(),
            compactions: Vec::new(),
            kept_from: 0,
            calls: OnceLock::from(HashMap::new()),
        }
    }

    /// A shared, immutable snapshot of the context.
    pub fn context(&self) -> Arc<Context> {
        Arc::clone(&self.ctx)
    }

    /// Whether a tool call is in the context: `Some(answered)`, or `None`.
    ///
    /// # Errors
    ///
    /// [`ReadError`] when a message not read yet cannot be read.
    pub fn call_state(&self, call_id: &str) -> Result<Option<bool>, ReadError> {
        Ok(self.calls()?.get(call_id).map(|c| c.answered.is_some()))
    }

    /// The tool calls in the context, read from its messages the first time.
    fn calls(&self) -> Result<&HashMap<String, Call>, ReadError> {
        if let Some(calls) = self.calls.get() {
            return Ok(calls);
        }
        let mut calls = HashMap::new();
        for m in self.ctx.messages() {
            if m.source == Source::Message {
                Self::track_calls(&mut calls, m.pos, m.message()?);
            }
        }
        Ok(self.calls.get_or_init(|| calls))
    }

    pub fn set_labels(&mut self, labels: BTreeMap<String, EntryId>) {
        Arc::make_mut(&mut self.ctx).labels = labels;
    }

    /// The position of `node` on the branch, if it is on it.
    fn on_path(&self, tree: &Tree, node: u32) -> Option<u32> {
        let d = tree.node(node).depth;
        (d < self.end() && self.node_at(tree, d) == node).then_some(d)
    }

    /// The position after the branch's last node.
    fn end(&self) -> u32 {
        self.from + self.path.len() as u32
    }

    /// The branch's node at position `pos` (below [`Projector::end`]):
    /// held, or found by walking up from the first node held.
    fn node_at(&self, tree: &Tree, pos: u32) -> u32 {
        match pos.checked_sub(self.from) {
            Some(i) => self.path[i as usize],
            None => {
                let mut n = self.path[0];
                for _ in pos..self.from {
                    n = tree.parent(n).unwrap_or(n);
                }
                n
            }
        }
    }

    /// The branch's nodes at positions `start..from` (above the part held).
    fn above(&self, tree: &Tree, start: u32) -> Vec<u32> {
        match self.path.first() {
            Some(&first) if start < self.from => {
                let mut seg = tree.path_from(start, first);
                seg.pop();
                seg
            }
            _ => Vec::new(),
        }
    }

    /// Holds the branch from position `pos` on (walks up to it).
    fn hold_from(&mut self, tree: &Tree, pos: u32) {
        if pos < self.from {
            let mut seg = self.above(tree, pos);
            seg.append(&mut self.path);
            self.path = seg;
            self.from = pos;
        }
    }

    /// Appends the nodes of `suffix` (a path continuing the branch) reading
    /// only what the context needs: app-state and settings entries always;
    /// message-producing entries only from the last compaction's kept range.
    fn extend_branch(
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
            let pos = self.end();
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
        Arc::make_mut(&mut self.ctx).leaf = self.path.last().map(|&n| tree.entry_id(n));
        self.rebuild_messages(tree, src)
    }

    /// Extends the branch by an entry that contributes nothing to the context.
    fn push_quiet(&mut self, tree: &Tree, node: u32) {
        self.path.push(node);
        Arc::make_mut(&mut self.ctx).leaf = Some(tree.entry_id(node));
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

    fn truncate_branch(
        &mut self,
        tree: &Tree,
        keep: usize,
        src: &dyn EntrySource,
    ) -> Result<(), ReadError> {
        if keep >= self.end() as usize {
            return Ok(());
        }
        let keep32 = keep as u32;
        if keep32 <= self.from {
            // The new leaf is above the part held: hold from it.
            match keep32.checked_sub(1) {
                Some(leaf) => self.hold_from(tree, leaf),
                None => self.from = 0,
            }
        }
        self.path.truncate((keep32 - self.from) as usize);
        self.state_marks.retain(|m| m.pos < keep32);
        self.settings_marks.retain(|m| m.pos < keep32);
        let state = self.replay_state(src)?;
        let settings = self.replay_settings(src)?;
        let dropped_compaction = self.compactions.last().is_some_and(|&c| c >= keep32);
        self.compactions.retain(|&c| c < keep32);
        {
            let ctx = Arc::make_mut(&mut self.ctx);
            ctx.app_state = state;
            ctx.settings = settings;
            ctx.leaf = self.path.last().map(|&n| tree.entry_id(n));
        }
        if dropped_compaction {
            self.rebuild_messages(tree, src)?;
        } else {
            let messages = &mut Arc::make_mut(&mut self.ctx).messages;
            // Positions rise along the list: keep the prefix before `keep`.
            let kept = messages.iter().take_while(|m| m.pos < keep32).count();
            messages.truncate(kept);
            if let Some(calls) = self.calls.get_mut() {
                calls.retain(|_, c| c.pos < keep32);
                for c in calls.values_mut() {
                    if c.answered.is_some_and(|a| a >= keep32) {
                        c.answered = None;
                    }
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

    /// The settings after the marks kept: the last snapshot plus the
    /// entries after it (every mark has one, but those of a restored
    /// projection only the last).
    fn replay_settings(&self, src: &dyn EntrySource) -> Result<Map<String, Value>, ReadError> {
        let base = self
            .settings_marks
            .iter()
            .rposition(|m| m.snapshot.is_some());
        let mut settings = base
            .and_then(|i| self.settings_marks[i].snapshot.as_deref().cloned())
            .unwrap_or_default();
        for m in &self.settings_marks[base.map_or(0, |i| i + 1)..] {
            if let EntryBody::Settings(s) = &src.entry(m.node)?.body {
                merge_settings(&mut settings, &s.values);
            }
        }
        Ok(settings)
    }

    /// Recomputes the messages from the active compaction's kept range (or the root).
    fn rebuild_messages(&mut self, tree: &Tree, src: &dyn EntrySource) -> Result<(), ReadError> {
        let mut messages = Messages::new();
        let (compaction, start) = self.each_message(tree, src, &mut |m| messages.push(m))?;
        // Found from the new messages when next needed.
        self.calls = OnceLock::new();
        self.kept_from = start;
        let ctx = Arc::make_mut(&mut self.ctx);
        ctx.messages = messages;
        ctx.compaction = compaction;
        Ok(())
    }

    /// Hands the context's messages to `each` in order, from the active
    /// compaction's kept range (or the root), reading each record (checked
    /// as every read is) when its turn comes — except message entries where
    /// `src` says where their lines are: those are handed over unread, to
    /// be read when first asked for; returns the compaction in force and
    /// the start of its kept range.
    pub fn each_message(
        &self,
        tree: &Tree,
        src: &dyn EntrySource,
        each: &mut dyn FnMut(ContextMessage),
    ) -> Result<(Option<ActiveCompaction>, u32), ReadError> {
        let mut compaction = None;
        let mut summary = None;
        let start = match self.compactions.last() {
            None => 0,
            Some(&cpos) => {
                let node = self.node_at(tree, cpos);
                let entry = src.entry(node)?;
                let EntryBody::Compaction(c) = &entry.body else {
                    return Err(ReadError::NoSuchRecord(tree.node(node).seq));
                };
                compaction = Some(active(&entry.id, c));
                summary = Some(summary_message(&entry.id, cpos, c));
                c.first_kept
                    .as_ref()
                    .and_then(|k| tree.get(k))
                    .and_then(|n| self.on_path(tree, n))
                    .unwrap_or(cpos + 1)
            }
        };
        let above = self.above(tree, start);
        // The kept range's start and the path above the part held were
        // found through the tree: a block that failed its check on the way
        // makes them wrong, so nothing is handed over.
        src.check()?;
        if let Some(m) = summary {
            each(m);
        }
        for pos in start..self.end() {
            let node = match pos.checked_sub(self.from) {
                Some(i) => self.path[i as usize],
                None => *above
                    .get((pos - start) as usize)
                    .ok_or(ReadError::NoSuchRecord(u64::from(pos)))?,
            };
            let kind = tree.node(node).kind;
            if kind == Some(EntryKind::Message)
                && let Some((seq, at)) = src.line_at(node)
            {
                each(ContextMessage::deferred(tree.entry_id(node), pos, seq, at));
            } else if matches!(
                kind,
                Some(EntryKind::Message) | Some(EntryKind::Checkout) | Some(EntryKind::Custom)
            ) && let Some(m) = message_from(src.entry(node)?, pos)
            {
                each(m);
            }
        }
        // Reading the entries above may have met a block that failed its
        // check since.
        src.check()?;
        Ok((compaction, start))
    }

    /// Notes the calls and results of message entry `m` at `pos`.
    fn track_calls(calls: &mut HashMap<String, Call>, pos: u32, m: &Message) {
        for (call_id, _, _) in m.tool_calls() {
            calls.insert(
                call_id.to_owned(),
                Call {
                    pos,
                    answered: None,
                },
            );
        }
        for call_id in m.tool_results() {
            if let Some(c) = calls.get_mut(call_id) {
                c.answered = Some(pos);
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
        let pos = self.end();
        self.path.push(node);
        Arc::make_mut(&mut self.ctx).leaf = Some(entry.id.clone());
        let Entry { id, parent, body } = entry;
        let body = match body {
            EntryBody::Message(m) => {
                // Moved, not cloned: appending at the leaf copies no content.
                if let Some(calls) = self.calls.get_mut() {
                    Self::track_calls(calls, pos, &m);
                }
                let m = ContextMessage::decoded(id, Source::Message, m, pos);
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
                    if let Some(calls) = self.calls.get_mut() {
                        calls.retain(|_, call| call.pos >= fk);
                    }
                    let ctx = Arc::make_mut(&mut self.ctx);
                    ctx.messages = std::iter::once(summary_message(&entry.id, pos, c))
                        .chain(
                            ctx.messages
                                .iter()
                                .filter(|m| m.pos >= fk && m.source != Source::CompactionSummary)
                                .cloned(),
                        )
                        .collect();
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
                // A checkout summary or custom message: no calls in it.
                if let Some(m) = message_of(entry, pos) {
                    Arc::make_mut(&mut self.ctx).messages.push(m);
                }
            }
        }
        Ok(())
    }
}

/// The projection truncates its context to the common ancestor (rebuilding
/// the messages when the compaction in force is dropped) and extends it
/// reading only the entries the context needs.
impl BranchFold for Projector {
    fn path(&self) -> &[u32] {
        &self.path
    }

    fn path_from(&self) -> usize {
        self.from as usize
    }

    fn truncate(&mut self, keep: usize, walk: Walk<'_>) -> Result<(), ReadError> {
        self.truncate_branch(walk.tree, keep, walk.src)
    }

    fn extend(&mut self, suffix: &[u32], walk: Walk<'_>) -> Result<(), ReadError> {
        self.extend_branch(walk.tree, suffix, walk.src)
    }
}
