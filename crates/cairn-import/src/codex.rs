//! Codex rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`).
//!
//! Each line is `{timestamp, type, payload}` (openai/codex
//! `codex-rs/protocol/src/protocol.rs`, `RolloutLine` / `RolloutItem`):
//!
//! - `session_meta`: the session's id and cwd (the first one is the
//!   session's; later ones, written by forks, are kept as log-only records);
//!   its `base_instructions` (Codex's system prompt, sent as the first
//!   developer message after Codex adapts it to the run's tools, so not as
//!   recorded) stay there, out of the context, as a host's system prompt
//!   does; `forked_from_id` links a fork to its parent (`lineage.rs`);
//! - `response_item`: the model's history, in the Responses API's items.
//!   Consecutive model items — `reasoning`, an assistant `message`,
//!   `function_call` (its `arguments` a JSON string, parsed), `custom_tool_call`,
//!   `local_shell_call` — become one assistant message; `function_call_output`
//!   and `custom_tool_call_output` become tool results joined on `call_id`;
//!   user, developer and system messages become messages of those roles;
//! - `compacted` with a `replacement_history`: Codex's history becomes
//!   exactly those items (the summary among them, as Codex framed it), so the
//!   import checks out to a new root and writes them there (the history they
//!   replace stays on its branch); without one (older rollouts), a compaction
//!   with the summary (`message`);
//! - `turn_context`: settings (`model`, `reasoning_effort`, `cwd`, approval
//!   and sandbox policies), written when they change;
//! - `event_msg`: the UI's events, kept as log-only records, except
//!   `thread_rolled_back` (`num_turns`), which becomes a checkout to before
//!   the last `num_turns` user turns: the rolled-back turns stay in the log,
//!   on a branch.

use cairn::{Block, Checkout, Compaction, EntryBody, EntryId, Message, Role, Settings, Unknown};
use serde_json::{Map, Value, json};

use crate::builder::{At, Builder, Item, message};
use crate::lineage::{Link, ParentRef};
use crate::report::NoteKind;
use crate::{Convert, Error, Start, rest, str_of, ts_of};

/// Model items not yet written.
#[derive(Debug)]
struct Group {
    line: u64,
    blocks: Vec<Block>,
    items: Vec<Value>,
    ts: Option<String>,
}

/// The Codex converter's state.
#[derive(Debug, Default)]
pub struct Codex {
    meta_seen: bool,
    group: Option<Group>,
    /// The user turns of the current branch: each turn's first entry and
    /// its parent.
    turns: Vec<(EntryId, Option<EntryId>)>,
    settings: Map<String, Value>,
}

impl Convert for Codex {
    fn start(&mut self, lines: &[(u64, Value)]) -> Result<Start, String> {
        let mut start = Start::default();
        let meta = lines
            .iter()
            .find(|(_, v)| v.get("type").and_then(Value::as_str) == Some("session_meta"));
        if let Some((_, v)) = meta {
            let p = &v["payload"];
            start.source_id = p.get("id").and_then(Value::as_str).map(str::to_owned);
            start.cwd = p.get("cwd").and_then(Value::as_str).map(str::to_owned);
            start.link = p
                .get("forked_from_id")
                .and_then(Value::as_str)
                .map(|id| Link::Fork {
                    parent: ParentRef::CodexThread(id.to_owned()),
                    ordinal: p
                        .get("forked_from_ordinal_exclusive")
                        .and_then(Value::as_u64),
                });
        } else if !lines.iter().any(|(_, v)| v.get("payload").is_some()) && !lines.is_empty() {
            return Err(
                "none of its first records is a rollout line ({timestamp, type, payload})".into(),
            );
        }
        Ok(start)
    }

    fn line(&mut self, b: &mut Builder<'_>, line: u64, v: Value) -> Result<(), Error> {
        let Value::Object(o) = v else { return Ok(()) };
        let ty = str_of(&o, "type").unwrap_or("").to_owned();
        let ts = ts_of(o.get("timestamp"));
        let payload = match o.get("payload") {
            Some(Value::Object(p)) => p.clone(),
            _ => Map::new(),
        };
        match ty.as_str() {
            "session_meta" if !self.meta_seen => {
                self.meta_seen = true;
                b.log_only("codex.session_meta", Value::Object(o))
            }
            "response_item" => self.item(b, line, ts, &payload, 0),
            "compacted" => {
                self.flush(b)?;
                let summary = str_of(&payload, "message").unwrap_or("").to_owned();
                let mut source = rest(&payload, &["replacement_history"]);
                source.insert("type".into(), json!("compacted"));
                self.turns.clear();
                let Some(Value::Array(history)) = payload.get("replacement_history") else {
                    // An older rollout: the summary alone.
                    source.remove("message");
                    b.entry(Item {
                        line,
                        id: None,
                        at: At::Leaf,
                        body: EntryBody::Compaction(Compaction {
                            summary,
                            first_kept: None,
                            tokens_before: None,
                        }),
                        ts,
                        source,
                    })?;
                    return Ok(());
                };
                // Codex's history is now exactly the replacement history
                // (which holds the summary, as Codex framed it): a new root
                // holds it, and the history it replaces stays on its branch.
                let from = b.leaf().cloned();
                b.entry(Item {
                    line,
                    id: None,
                    at: At::Root,
                    body: EntryBody::Checkout(Checkout {
                        from,
                        summary: None,
                    }),
                    ts: ts.clone(),
                    source,
                })?;
                // The turn context is not history: it carries over.
                if !self.settings.is_empty() {
                    let mut source = Map::new();
                    source.insert("type".into(), json!("compacted"));
                    source.insert("carried_over".into(), json!("turn_context"));
                    b.entry(Item {
                        line,
                        id: None,
                        at: At::Leaf,
                        body: EntryBody::Settings(Settings {
                            values: self.settings.clone(),
                        }),
                        ts: ts.clone(),
                        source,
                    })?;
                }
                for (k, item) in history.iter().enumerate() {
                    if let Value::Object(i) = item {
                        self.item(b, line, ts.clone(), i, k + 1)?;
                    }
                }
                self.flush(b)
            }
            "turn_context" => {
                let mut changed = Map::new();
                for (from, to) in [
                    ("model", "model"),
                    ("effort", "reasoning_effort"),
                    ("cwd", "cwd"),
                    ("approval_policy", "approval_policy"),
                    ("sandbox_policy", "sandbox_policy"),
                ] {
                    if let Some(v) = payload.get(from)
                        && self.settings.get(to) != Some(v)
                    {
                        changed.insert(to.to_owned(), v.clone());
                        self.settings.insert(to.to_owned(), v.clone());
                    }
                }
                if changed.is_empty() {
                    return b.log_only("codex.turn_context", Value::Object(o));
                }
                self.flush(b)?;
                let mut source = rest(
                    &payload,
                    &[
                        "model",
                        "effort",
                        "cwd",
                        "approval_policy",
                        "sandbox_policy",
                    ],
                );
                source.insert("type".into(), json!("turn_context"));
                b.entry(Item {
                    line,
                    id: None,
                    at: At::Leaf,
                    body: EntryBody::Settings(Settings { values: changed }),
                    ts,
                    source,
                })?;
                Ok(())
            }
            "event_msg" if str_of(&payload, "type") == Some("thread_rolled_back") => {
                self.flush(b)?;
                let n = payload
                    .get("num_turns")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                let n = usize::try_from(n)
                    .unwrap_or(usize::MAX)
                    .min(self.turns.len());
                if n == 0 {
                    b.note(
                        Some(line),
                        NoteKind::Kept,
                        "a rollback of no turn the import saw: kept as a log-only record".into(),
                    );
                    return b.log_only("codex.event_msg", Value::Object(o));
                }
                let (_, target) = self.turns[self.turns.len() - n].clone();
                self.turns.truncate(self.turns.len() - n);
                let from = b.leaf().cloned();
                let mut source = payload.clone();
                source.insert("type".into(), json!("thread_rolled_back"));
                b.entry(Item {
                    line,
                    id: None,
                    at: target.map_or(At::Root, At::Entry),
                    body: EntryBody::Checkout(Checkout {
                        from,
                        summary: None,
                    }),
                    ts,
                    source,
                })?;
                Ok(())
            }
            other => {
                let kind = format!("codex.{}", if other.is_empty() { "record" } else { other });
                b.log_only(&kind, Value::Object(o))
            }
        }
    }

    fn end_of_input(&mut self, b: &mut Builder<'_>, _line: u64) -> Result<(), Error> {
        self.flush(b)
    }
}

impl Codex {
    /// One response item (`k`: its position in a compaction's replacement
    /// history, 0 for a line of its own).
    fn item(
        &mut self,
        b: &mut Builder<'_>,
        line: u64,
        ts: Option<String>,
        p: &Map<String, Value>,
        k: usize,
    ) -> Result<(), Error> {
        let s = |key: &str| str_of(p, key).unwrap_or("").to_owned();
        let model_block = match str_of(p, "type") {
            Some("message") if str_of(p, "role") == Some("assistant") => {
                Some((content(p.get("content")), rest(p, &["content"])))
            }
            Some("reasoning") => {
                let summary: Vec<&str> = p
                    .get("summary")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.get("text").and_then(Value::as_str))
                            .collect()
                    })
                    .unwrap_or_default();
                let block = Block::Thinking {
                    thinking: summary.join("\n\n"),
                    signature: str_of(p, "encrypted_content").map(str::to_owned),
                };
                Some((vec![block], rest(p, &["summary", "encrypted_content"])))
            }
            Some("function_call") => {
                let raw = s("arguments");
                let arguments = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
                Some((
                    vec![Block::ToolCall {
                        call_id: s("call_id"),
                        name: s("name"),
                        arguments,
                    }],
                    rest(p, &["call_id", "name", "arguments"]),
                ))
            }
            Some("custom_tool_call") => Some((
                vec![Block::ToolCall {
                    call_id: s("call_id"),
                    name: s("name"),
                    arguments: p.get("input").cloned().unwrap_or(Value::Null),
                }],
                rest(p, &["call_id", "name", "input"]),
            )),
            Some("local_shell_call") => Some((
                vec![Block::ToolCall {
                    call_id: str_of(p, "call_id")
                        .or_else(|| str_of(p, "id"))
                        .unwrap_or("")
                        .to_owned(),
                    name: "local_shell".into(),
                    arguments: p.get("action").cloned().unwrap_or(Value::Null),
                }],
                rest(p, &["call_id", "action"]),
            )),
            _ => None,
        };
        if let Some((blocks, kept)) = model_block {
            let g = self.group.get_or_insert_with(|| Group {
                line,
                blocks: Vec::new(),
                items: Vec::new(),
                ts: ts.clone(),
            });
            g.blocks.extend(blocks);
            g.items.push(Value::Object(kept));
            return Ok(());
        }
        self.flush(b)?;
        let (role, blocks, kept) = match (str_of(p, "type"), str_of(p, "role")) {
            (Some("message"), Some(role)) => {
                let role = match role {
                    "user" => Role::User,
                    "developer" => Role::Developer,
                    "system" => Role::System,
                    _ => Role::User,
                };
                (role, content(p.get("content")), rest(p, &["content"]))
            }
            (Some("function_call_output" | "custom_tool_call_output"), _) => {
                let (text, error) = output(p.get("output"));
                let block = Block::ToolResult {
                    call_id: s("call_id"),
                    content: vec![Block::Text { text }],
                    is_error: error,
                    code: None,
                };
                (Role::Tool, vec![block], rest(p, &["call_id", "output"]))
            }
            (other, _) => {
                // A newer item: kept in the history as a node every fold skips.
                let kind = format!("codex.{}", other.unwrap_or("item"));
                b.entry(Item {
                    line,
                    id: None,
                    at: At::Leaf,
                    body: EntryBody::Ignored(Unknown {
                        kind,
                        data: Value::Object(p.clone()),
                    }),
                    ts,
                    source: Map::new(),
                })?;
                return Ok(());
            }
        };
        let turn_start = role == Role::User && k == 0 && !injected(&blocks);
        let parent = b.leaf().cloned();
        let mut source = kept;
        source.insert("type".into(), json!("response_item"));
        let id = b.entry(Item {
            line,
            id: None,
            at: At::Leaf,
            body: message(role, blocks),
            ts,
            source,
        })?;
        if turn_start {
            self.turns.push((id, parent));
        }
        Ok(())
    }

    fn flush(&mut self, b: &mut Builder<'_>) -> Result<(), Error> {
        let Some(g) = self.group.take() else {
            return Ok(());
        };
        let mut source = Map::new();
        source.insert("type".into(), json!("response_item"));
        source.insert("items".into(), Value::Array(g.items));
        b.entry(Item {
            line: g.line,
            id: None,
            at: At::Leaf,
            body: EntryBody::Message(Message {
                role: Role::Assistant,
                content: g.blocks,
                usage: None,
                model: self
                    .settings
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                stop_reason: None,
            }),
            ts: g.ts,
            source,
        })?;
        Ok(())
    }
}

/// Context Codex writes as user messages before the first turn.
fn injected(blocks: &[Block]) -> bool {
    blocks.iter().any(|b| {
        matches!(b, Block::Text { text } if text.trim_start().starts_with("<environment_context>")
            || text.trim_start().starts_with("<user_instructions>"))
    })
}

fn content(c: Option<&Value>) -> Vec<Block> {
    let Some(Value::Array(items)) = c else {
        return match c {
            Some(Value::String(s)) => vec![Block::Text { text: s.clone() }],
            _ => Vec::new(),
        };
    };
    items
        .iter()
        .filter_map(|i| match i.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => Some(Block::Text {
                text: i
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            }),
            Some("input_image") => {
                let url = i.get("image_url").and_then(Value::as_str).unwrap_or("");
                Some(
                    match url
                        .strip_prefix("data:")
                        .and_then(|r| r.split_once(";base64,"))
                    {
                        Some((mime, data)) => Block::Image {
                            media_type: mime.to_owned(),
                            data: data.to_owned(),
                        },
                        None => Block::Blob {
                            uri: url.to_owned(),
                            media_type: None,
                            size: None,
                            sha256: None,
                        },
                    },
                )
            }
            _ => None,
        })
        .collect()
}

/// A tool output's text and whether it failed: a string, or
/// `{content, success}`, or content items.
fn output(o: Option<&Value>) -> (String, bool) {
    match o {
        Some(Value::String(s)) => (s.clone(), false),
        Some(Value::Object(m)) => {
            let text = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            (
                text,
                m.get("success").and_then(Value::as_bool) == Some(false),
            )
        }
        Some(Value::Array(items)) => (
            items
                .iter()
                .filter_map(|i| i.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            false,
        ),
        _ => (String::new(), false),
    }
}
