//! Session memory: a bounded summary of the branch — current goal, completed
//! work, failed attempts, decisions, to-dos, verification status — derived
//! from the log, never stored. Each item points back to the entries it came
//! from. [`SessionMemory::derive`] is the rule written plainly (a fold of the
//! branch from scratch); the session maintains the same value incrementally
//! (`MemoryTracker`), following the branch across checkouts.
//!
//! ## Bounding rule
//!
//! Every list keeps its newest [`MemoryConfig::max_items`] items; an older
//! item is dropped and counted ("N earlier not shown"). Item texts are cut to
//! [`MemoryConfig::max_item_chars`]. When the rendered memory is still longer
//! than [`MemoryConfig::max_chars`], the oldest items are dropped — completed
//! work first, then decisions, then failed attempts — until it fits (the goal,
//! to-dos and verification status are kept).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::{self, Write as _};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ReadError;
use crate::id::EntryId;
use crate::journal::{TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN};
use crate::projection::merge_patch;
use crate::record::{
    AppStateChange, Block, Entry, EntryBody, Message, ResultBlock, Role, value_text,
};
use crate::summary::excerpt;
use crate::tree::{BranchFold, Walk};

/// One remembered item and the entries it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// What to remember.
    pub text: String,
    /// The entries it was derived from.
    pub entries: Vec<EntryId>,
}

/// A bounded list of items, newest last.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Section {
    /// The items kept.
    pub items: VecDeque<Item>,
    /// How many older items were dropped to stay within the bound.
    pub dropped: u64,
}

impl Section {
    fn push(&mut self, item: Item, max: usize) {
        self.items.push_back(item);
        while self.items.len() > max {
            self.items.pop_front();
            self.dropped += 1;
        }
    }

    fn drop_oldest(&mut self) -> bool {
        let dropped = self.items.pop_front().is_some();
        if dropped {
            self.dropped += 1;
        }
        dropped
    }
}

/// What a long or resumed session should keep in mind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SessionMemory {
    /// The latest request of the person.
    pub goal: Option<Item>,
    /// The to-do list, as the designated app-state keys hold it now.
    pub todos: Vec<Item>,
    /// Work done (successful tool calls that change things).
    pub completed: Section,
    /// Attempts that failed (tool errors, unknown outcomes).
    pub failed: Section,
    /// Decisions: rewinds, setting changes, host decision records.
    pub decisions: Section,
    /// The last test or build command and its outcome.
    pub verification: Option<Item>,
    /// Sections added by host rules, by name.
    pub extra: BTreeMap<String, Section>,
}

/// How memory is derived and bounded.
#[derive(Clone)]
pub struct MemoryConfig {
    /// Newest items kept per list.
    pub max_items: usize,
    /// Longest item text, in characters.
    pub max_item_chars: usize,
    /// Longest rendering, in characters.
    pub max_chars: usize,
    /// App-state keys holding the to-do list (an array of strings, or of
    /// objects with `text`/`title`/`content` and `done`/`completed`).
    pub todo_keys: Vec<String>,
    /// Tools that only read: their successes are not "completed work".
    pub read_only_tools: Vec<String>,
    /// Words that make a command a verification (test or build).
    pub verify_words: Vec<String>,
    /// Host rules, applied after the default ones.
    pub rules: Vec<Arc<dyn MemoryRule>>,
    /// A snapshot of the fold is kept every this many branch positions; a
    /// checkout replays at most this many entries past the common ancestor's
    /// snapshot. Lower costs memory, higher costs replay.
    pub checkpoint_every: usize,
}

impl fmt::Debug for MemoryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryConfig")
            .field("max_items", &self.max_items)
            .field("max_item_chars", &self.max_item_chars)
            .field("max_chars", &self.max_chars)
            .field("todo_keys", &self.todo_keys)
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

impl Default for MemoryConfig {
    fn default() -> MemoryConfig {
        let words = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect();
        MemoryConfig {
            max_items: 8,
            max_item_chars: 160,
            max_chars: 4000,
            todo_keys: words(&["todos"]),
            read_only_tools: words(&[
                "read_file",
                "list_dir",
                "grep",
                "glob",
                "search",
                "ls",
                "cat",
            ]),
            verify_words: words(&[
                "test", "build", "check", "clippy", "lint", "pytest", "tsc", "make",
            ]),
            rules: Vec::new(),
            checkpoint_every: 128,
        }
    }
}

/// A host rule: sees every entry of the branch in order, with the tool call
/// each tool result answers, and may add to the memory (typically to a
/// section of [`SessionMemory::extra`]). Must be deterministic.
pub trait MemoryRule: Send + Sync {
    /// Observes one entry.
    fn observe(
        &self,
        entry: &Entry,
        calls: &CallLookup<'_>,
        memory: &mut SessionMemory,
        config: &MemoryConfig,
    );
}

/// Tool calls seen on the branch and not yet answered.
#[derive(Debug)]
pub struct CallLookup<'a> {
    calls: &'a HashMap<String, Call>,
}

impl CallLookup<'_> {
    /// The tool name and arguments of a call.
    pub fn get(&self, call_id: &str) -> Option<(&str, &Value)> {
        self.calls
            .get(call_id)
            .map(|c| (c.tool.as_str(), &c.arguments))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    tool: String,
    arguments: Value,
    entry: EntryId,
    order: u64,
}

/// The fold's state: the memory plus what it needs to continue.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct MemoryState {
    memory: SessionMemory,
    calls: HashMap<String, Call>,
    todo_values: Map<String, Value>,
    todo_entry: BTreeMap<String, EntryId>,
    seen: u64,
}

/// An item of `text` (cut to the configured length) from `entries`.
fn item(config: &MemoryConfig, text: &str, entries: Vec<EntryId>) -> Item {
    Item {
        text: excerpt(text, config.max_item_chars),
        entries,
    }
}

/// Unanswered calls remembered at most (older ones are forgotten).
const MAX_OPEN_CALLS: usize = 256;

impl MemoryState {
    pub fn observe(&mut self, e: &Entry, config: &MemoryConfig) {
        self.seen += 1;
        match &e.body {
            EntryBody::Message(m) => self.observe_message(e, m, config),
            EntryBody::AppState(change) => self.observe_app_state(e, change, config),
            EntryBody::Checkout(c) => {
                let target = e
                    .parent
                    .as_ref()
                    .map_or_else(|| "the start".to_owned(), |p| format!("entry {p}"));
                let from = c
                    .from
                    .as_ref()
                    .map(|f| format!(" from {f}"))
                    .unwrap_or_default();
                let summary = c
                    .summary
                    .as_ref()
                    .map(|s| format!(": {s}"))
                    .unwrap_or_default();
                let text = format!("rewound to {target}{from}{summary}");
                self.memory
                    .decisions
                    .push(item(config, &text, vec![e.id.clone()]), config.max_items);
            }
            EntryBody::Settings(s) => {
                let changes: Vec<String> = s
                    .values
                    .iter()
                    .map(|(k, v)| match v {
                        Value::Null => format!("{k} unset"),
                        Value::Bool(_)
                        | Value::Number(_)
                        | Value::String(_)
                        | Value::Array(_)
                        | Value::Object(_) => format!("{k} = {}", value_text(v)),
                    })
                    .collect();
                let text = format!("settings: {}", changes.join(", "));
                self.memory
                    .decisions
                    .push(item(config, &text, vec![e.id.clone()]), config.max_items);
            }
            EntryBody::Custom(c) if c.namespace.ends_with("decision") => {
                let text = value_text(&c.content);
                self.memory
                    .decisions
                    .push(item(config, &text, vec![e.id.clone()]), config.max_items);
            }
            EntryBody::Custom(_)
            | EntryBody::Compaction(_)
            | EntryBody::Label(_)
            | EntryBody::SessionInfo(_)
            | EntryBody::Ignored(_) => {}
        }
        for rule in &config.rules {
            rule.observe(
                e,
                &CallLookup { calls: &self.calls },
                &mut self.memory,
                config,
            );
        }
        self.bound(config);
    }

    /// A message: a person's words are the goal; its tool calls are
    /// remembered until answered, its results observed.
    fn observe_message(&mut self, e: &Entry, m: &Message, config: &MemoryConfig) {
        if m.role == Role::User && m.tool_results().next().is_none() {
            let text = m.plain_text();
            if !text.trim().is_empty() {
                self.memory.goal = Some(item(config, &text, vec![e.id.clone()]));
            }
        }
        for (call_id, tool, arguments) in m.tool_calls() {
            self.calls.insert(
                call_id.to_owned(),
                Call {
                    tool: tool.to_owned(),
                    arguments: arguments.clone(),
                    entry: e.id.clone(),
                    order: self.seen,
                },
            );
        }
        if self.calls.len() > MAX_OPEN_CALLS
            && let Some(oldest) = self
                .calls
                .iter()
                .min_by_key(|(_, c)| c.order)
                .map(|(k, _)| k.clone())
        {
            self.calls.remove(&oldest);
        }
        for result in m.results() {
            self.observe_result(e, &result, config);
        }
    }

    /// A tool result of entry `e` answering a remembered call: what was
    /// completed or failed, and the latest verification.
    fn observe_result(&mut self, e: &Entry, result: &ResultBlock, config: &MemoryConfig) {
        let ResultBlock {
            call_id,
            content,
            is_error,
            code,
        } = result;
        let Some(call) = self.calls.get(*call_id) else {
            return;
        };
        let max = config.max_items;
        let what = describe_call(&call.tool, &call.arguments);
        let entries = vec![call.entry.clone(), e.id.clone()];
        let output = content.iter().find_map(|b| match b {
            Block::Text { text } => text
                .lines()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned),
            Block::Thinking { .. }
            | Block::ToolCall { .. }
            | Block::ToolResult { .. }
            | Block::Image { .. }
            | Block::Blob { .. } => None,
        });
        let unknown = *code == Some(TOOL_OUTCOME_UNKNOWN);
        let not_started = *code == Some(TOOL_NOT_STARTED);
        if not_started {
            // Never ran: not an attempt, failed or otherwise.
        } else if unknown {
            let text = format!("{what}: outcome unknown (interrupted)");
            self.memory
                .failed
                .push(item(config, &text, entries.clone()), max);
        } else if *is_error {
            let why = output
                .as_deref()
                .map(|o| format!(": {o}"))
                .unwrap_or_default();
            let text = format!("{what} failed{why}");
            self.memory
                .failed
                .push(item(config, &text, entries.clone()), max);
        } else if !config.read_only_tools.iter().any(|t| t == &call.tool) {
            self.memory
                .completed
                .push(item(config, &what, entries.clone()), max);
        }
        let lower = what.to_lowercase();
        if !unknown
            && !not_started
            && config
                .verify_words
                .iter()
                .any(|w| lower.contains(w.as_str()))
        {
            let verdict = if *is_error { "failed" } else { "passed" };
            let text = format!("{what} {verdict}");
            self.memory.verification = Some(item(config, &text, entries));
        }
        self.calls.remove(*call_id);
    }

    /// An app-state change: the to-do keys it touches, rendered again.
    fn observe_app_state(&mut self, e: &Entry, change: &AppStateChange, config: &MemoryConfig) {
        for key in &config.todo_keys {
            let touched = match change {
                AppStateChange::Set(v) => {
                    match v.get(key) {
                        Some(x) => self.todo_values.insert(key.clone(), x.clone()),
                        None => self.todo_values.remove(key),
                    };
                    true
                }
                AppStateChange::Patch(p) => match p.get(key) {
                    Some(x) => {
                        let slot = self.todo_values.entry(key.clone()).or_insert(Value::Null);
                        merge_patch(slot, x);
                        if slot.is_null() {
                            self.todo_values.remove(key);
                        }
                        true
                    }
                    None if !p.is_object() => {
                        self.todo_values.remove(key);
                        true
                    }
                    None => false,
                },
            };
            if touched {
                self.todo_entry.insert(key.clone(), e.id.clone());
            }
        }
        self.memory.todos = self.render_todos(config);
    }

    fn render_todos(&self, config: &MemoryConfig) -> Vec<Item> {
        let mut out = Vec::new();
        for key in &config.todo_keys {
            let Some(Value::Array(list)) = self.todo_values.get(key) else {
                continue;
            };
            let entries: Vec<EntryId> = self.todo_entry.get(key).cloned().into_iter().collect();
            for t in list {
                let (text, done) = match t {
                    Value::String(s) => (s.clone(), false),
                    Value::Object(o) => {
                        let text = ["text", "title", "content", "task"]
                            .iter()
                            .find_map(|k| o.get(*k).and_then(Value::as_str))
                            .map_or_else(|| Value::Object(o.clone()).to_string(), str::to_owned);
                        let done = ["done", "completed"]
                            .iter()
                            .any(|k| o.get(*k) == Some(&Value::Bool(true)))
                            || o.get("status")
                                .and_then(Value::as_str)
                                .is_some_and(|s| s == "done" || s == "completed");
                        (text, done)
                    }
                    other @ (Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_)) => {
                        (value_text(other), false)
                    }
                };
                let mark = if done { "[x]" } else { "[ ]" };
                out.push(Item {
                    text: format!("{mark} {}", excerpt(&text, config.max_item_chars)),
                    entries: entries.clone(),
                });
            }
        }
        out
    }

    fn bound(&mut self, config: &MemoryConfig) {
        while self.memory.render().chars().count() > config.max_chars {
            let m = &mut self.memory;
            if !(m.completed.drop_oldest()
                || m.decisions.drop_oldest()
                || m.failed.drop_oldest()
                || m.extra.values_mut().any(Section::drop_oldest))
            {
                break;
            }
        }
    }

    pub fn memory(&self) -> &SessionMemory {
        &self.memory
    }
}

/// A short description of a tool call: its command, path or name.
fn describe_call(tool: &str, args: &Value) -> String {
    let field = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| args.get(*n).and_then(Value::as_str))
            .map(str::to_owned)
    };
    if let Some(cmd) = field(&["command", "cmd"]) {
        return format!("{tool} `{}`", excerpt(&cmd, 80));
    }
    if let Some(path) = field(&["path", "file_path", "file", "filename"]) {
        return format!("{tool} {path}");
    }
    tool.to_owned()
}

impl SessionMemory {
    /// Memory derived from scratch from the entries of a branch, root first.
    pub fn derive<'a>(
        branch: impl IntoIterator<Item = &'a Entry>,
        config: &MemoryConfig,
    ) -> SessionMemory {
        let mut state = MemoryState::default();
        for e in branch {
            state.observe(e, config);
        }
        state.memory
    }

    /// Whether there is nothing to remember.
    pub fn is_empty(&self) -> bool {
        self.goal.is_none()
            && self.todos.is_empty()
            && self.completed.items.is_empty()
            && self.failed.items.is_empty()
            && self.decisions.items.is_empty()
            && self.verification.is_none()
            && self.extra.values().all(|s| s.items.is_empty())
    }

    /// The memory as text for the model (and for people): one section per
    /// kind, each item followed by the entries it came from.
    pub fn render(&self) -> String {
        let mut out =
            String::from("Session memory (derived from the session log; [ids] are entries):\n");
        let refs = |i: &Item| {
            if i.entries.is_empty() {
                String::new()
            } else {
                format!(
                    " [{}]",
                    i.entries
                        .iter()
                        .map(EntryId::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        };
        if let Some(g) = &self.goal {
            let _ = writeln!(out, "Goal: {}{}", g.text, refs(g));
        }
        if !self.todos.is_empty() {
            out.push_str("To-do:\n");
            for t in &self.todos {
                let _ = writeln!(out, "- {}{}", t.text, refs(t));
            }
        }
        let mut section = |name: &str, s: &Section| {
            if s.items.is_empty() && s.dropped == 0 {
                return;
            }
            let earlier = if s.dropped > 0 {
                format!(" ({} earlier not shown)", s.dropped)
            } else {
                String::new()
            };
            let _ = writeln!(out, "{name}{earlier}:");
            for i in &s.items {
                let _ = writeln!(out, "- {}{}", i.text, refs(i));
            }
        };
        section("Completed", &self.completed);
        section("Failed attempts", &self.failed);
        section("Decisions", &self.decisions);
        for (name, s) in &self.extra {
            section(name, s);
        }
        if let Some(v) = &self.verification {
            let _ = writeln!(out, "Verification: {}{}", v.text, refs(v));
        }
        out
    }
}

/// The incremental memory of a session, following its branch.
#[derive(Debug, Clone)]
pub(crate) struct MemoryTracker {
    config: Arc<MemoryConfig>,
    path: Vec<u32>,
    state: MemoryState,
    checkpoints: Vec<(usize, MemoryState)>,
}

impl MemoryTracker {
    pub fn new(config: MemoryConfig) -> MemoryTracker {
        MemoryTracker {
            config: Arc::new(config),
            path: Vec::new(),
            state: MemoryState::default(),
            checkpoints: Vec::new(),
        }
    }

    pub fn memory(&self) -> &SessionMemory {
        self.state.memory()
    }

    /// Observes `entry` (node `node`, a child of the tracked leaf).
    pub fn push(&mut self, node: u32, entry: &Entry) {
        self.path.push(node);
        self.state.observe(entry, &self.config);
        if self
            .path
            .len()
            .is_multiple_of(self.config.checkpoint_every.max(1))
        {
            self.checkpoints.push((self.path.len(), self.state.clone()));
        }
    }
}

/// The memory follows the branch from the checkpoint at or before the
/// common ancestor.
impl BranchFold for MemoryTracker {
    fn path(&self) -> &[u32] {
        &self.path
    }

    fn truncate(&mut self, keep: usize, walk: Walk<'_>) -> Result<(), ReadError> {
        if keep >= self.path.len() {
            return Ok(());
        }
        self.checkpoints.retain(|(len, _)| *len <= keep);
        let (from, state) = self.checkpoints.last().cloned().unwrap_or_default();
        self.state = state;
        let replay: Vec<u32> = self.path[from..keep].to_vec();
        self.path.truncate(from);
        self.extend(&replay, walk)
    }

    fn extend(&mut self, suffix: &[u32], walk: Walk<'_>) -> Result<(), ReadError> {
        for &n in suffix {
            let e = walk.src.entry(n)?;
            self.push(n, &e);
        }
        Ok(())
    }
}
