//! Claude Code transcripts (`~/.claude/projects/<project>/<session>.jsonl`).
//!
//! There is no official specification; the facts used here are those of the
//! public readers of the format (openai/codex
//! `codex-rs/external-agent-sessions/src/records.rs`, which imports these
//! files into Codex; michaelschleiss/claude-convos `JSONL_SPEC.md`) and of the
//! Anthropic Messages API the content blocks come from:
//!
//! - chained records (`user`, `assistant`, `system`, `progress`,
//!   `attachment`) carry `uuid` and `parentUuid`; `isSidechain` marks a
//!   subagent's records (imported as branches of the same session);
//! - one model response is written as several `assistant` lines, one per
//!   content block, sharing `message.id` and chained one after the other:
//!   they become one assistant message (the entry takes the last line's
//!   uuid; every line's uuid names it);
//! - tool results are `user` lines with `tool_result` blocks;
//! - `attachment` lines are context Claude Code adds to the next request
//!   (reminders: the environment, the date, the tokens left, …). Since 2.1
//!   each says what it sends (`rendered[].content`); Claude Code joins them
//!   into the user message they follow, ahead of a prompt's text and after a
//!   tool result's (recorded from the real CLI: `fixtures/real/`), and so
//!   does the import;
//! - a subagent of Claude Code 2.1 writes its own transcript,
//!   `<session>/subagents/agent-<agentId>.jsonl`, linked to its parent's
//!   session by `lineage.rs`;
//! - `system` with `subtype: "compact_boundary"` starts a compacted history
//!   (`parentUuid: null`, the history it replaces in `logicalParentUuid`),
//!   followed by the summary as a `user` line with `isCompactSummary`: both
//!   become one cairn compaction under the logical parent, so the history
//!   before it stays reachable;
//! - side records without `uuid` (`summary` with `leafUuid`, `custom-title`,
//!   `ai-title`, `file-history-snapshot`, `queue-operation`) are kept as
//!   log-only records; the title (custom, else AI, else the last summary) is
//!   set when the import finishes.
//!
//! Claude Code resolves the leaf itself, and gets it wrong in reported cases
//! (a stale branch resumed, anthropics/claude-code#48270; progress lines
//! forking the chain, #35024; phantom parents, #22526, #24304): the import
//! takes the live leaf to be the last message of the main chain in file
//! order (not a sidechain's, and not an `isMeta` line, which is context
//! Claude Code injects, not a turn), and ends with a checkout to it when
//! another entry came last.

use cairn::{Block, Checkout, Compaction, EntryBody, Message, Role, SessionInfo, Unknown, Usage};
use serde_json::{Map, Value, json};

use crate::builder::{At, Builder, Item, message};
use crate::report::NoteKind;
use crate::{Convert, Error, Start, rest, str_of, ts_of};

/// Lines of one model response, not yet written.
#[derive(Debug)]
struct Group {
    line: u64,
    uuids: Vec<String>,
    parent: At,
    message_id: String,
    blocks: Vec<Block>,
    items: Vec<Value>,
    model: Option<String>,
    stop_reason: Option<String>,
    usage: Option<Usage>,
    ts: Option<String>,
}

/// A user line not yet written: the attachment lines chained after it join
/// it, as Claude Code joins them into the message it sends.
#[derive(Debug)]
struct Turn {
    item: Item,
    /// Its uuid, then each joined attachment's.
    uuids: Vec<String>,
    /// What the joined attachments render for the model, in order.
    rendered: Vec<String>,
    /// The joined attachment records, as written.
    attachments: Vec<Value>,
}

/// A compact boundary waiting for its summary line.
#[derive(Debug)]
struct Boundary {
    line: u64,
    uuid: Option<String>,
    parent: At,
    ts: Option<String>,
    record: Map<String, Value>,
}

/// The Claude Code converter's state.
#[derive(Debug, Default)]
pub struct Claude {
    group: Option<Group>,
    turn: Option<Turn>,
    boundary: Option<Boundary>,
    /// The last main-chain message's uuid: the live leaf.
    live: Option<String>,
    custom_title: Option<String>,
    ai_title: Option<String>,
    summary: Option<String>,
}

impl Convert for Claude {
    fn start(&mut self, lines: &[(u64, Value)]) -> Result<Start, String> {
        let mut start = Start::default();
        for (_, v) in lines {
            if start.source_id.is_none() {
                start.source_id = v
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            if start.cwd.is_none() {
                start.cwd = v.get("cwd").and_then(Value::as_str).map(str::to_owned);
            }
        }
        let looks = lines.iter().any(|(_, v)| {
            v.get("uuid").is_some() || v.get("leafUuid").is_some() || v.get("sessionId").is_some()
        });
        if looks || lines.is_empty() {
            Ok(start)
        } else {
            Err("none of its first records has a uuid, sessionId or leafUuid".into())
        }
    }

    fn line(&mut self, b: &mut Builder<'_>, line: u64, v: Value) -> Result<(), Error> {
        let Value::Object(o) = v else { return Ok(()) };
        let ty = str_of(&o, "type").unwrap_or("").to_owned();
        let Some(uuid) = str_of(&o, "uuid").map(str::to_owned) else {
            return self.side_record(b, &ty, o);
        };
        let parent = match str_of(&o, "parentUuid") {
            Some(p) => At::Source(p.to_owned()),
            None => At::Root,
        };
        let ts = ts_of(o.get("timestamp"));
        let sidechain = o.get("isSidechain").and_then(Value::as_bool) == Some(true);
        let msg = match o.get("message") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        // The summary that completes a compact boundary.
        if let Some(bd) = self.boundary.take() {
            let completes = ty == "user"
                && o.get("isCompactSummary").and_then(Value::as_bool) == Some(true)
                && bd.uuid.as_deref() == str_of(&o, "parentUuid");
            if completes {
                let id = write_compaction(b, bd, &o, &msg)?;
                b.alias(&uuid, &id);
                if !sidechain {
                    self.live = Some(uuid);
                }
                return Ok(());
            }
            self.write_boundary(b, bd)?;
        }
        if ty == "attachment"
            && let Some(t) = self.turn.as_mut()
            && str_of(&o, "parentUuid") == t.uuids.last().map(String::as_str)
        {
            t.rendered.extend(rendered(&o));
            t.uuids.push(uuid);
            t.attachments.push(Value::Object(o));
            return Ok(());
        }
        let continues_group = ty == "assistant"
            && self.group.as_ref().is_some_and(|g| {
                Some(g.message_id.as_str()) == str_of(&msg, "id")
                    && str_of(&o, "parentUuid") == g.uuids.last().map(String::as_str)
            });
        if !continues_group {
            self.flush(b)?;
        }
        let meta = o.get("isMeta").and_then(Value::as_bool) == Some(true);
        if !sidechain && !meta && matches!(ty.as_str(), "user" | "assistant") {
            self.live = Some(uuid.clone());
        }
        match ty.as_str() {
            "assistant" => {
                self.assistant_line(line, uuid, parent, ts, &o, &msg);
                Ok(())
            }
            "user" => {
                let mut items = Vec::new();
                let (blocks, results) = user_blocks(msg.get("content"), &mut items);
                let mut source = rest(&o, &["type", "uuid", "parentUuid", "timestamp", "message"]);
                source.insert("type".into(), json!(ty));
                source.insert("message".into(), Value::Object(rest(&msg, &["content"])));
                if !items.is_empty() {
                    source.insert("blocks".into(), Value::Array(items));
                }
                let role = if results { Role::Tool } else { Role::User };
                self.turn = Some(Turn {
                    item: Item {
                        line,
                        id: Some(uuid.clone()),
                        at: parent,
                        body: message(role, blocks),
                        ts,
                        source,
                    },
                    uuids: vec![uuid],
                    rendered: Vec::new(),
                    attachments: Vec::new(),
                });
                Ok(())
            }
            "attachment" if !rendered(&o).is_empty() => {
                // Not after a user line (which it would have joined): shown
                // as a message of its own, on the live chain.
                if !sidechain {
                    self.live = Some(uuid.clone());
                }
                let texts = rendered(&o).into_iter().map(|text| Block::Text { text });
                let source = rest(&o, &["uuid", "parentUuid", "timestamp", "rendered"]);
                b.entry(Item {
                    line,
                    id: Some(uuid),
                    at: parent,
                    body: message(Role::User, texts.collect()),
                    ts,
                    source,
                })?;
                Ok(())
            }
            "system" if str_of(&o, "subtype") == Some("compact_boundary") => {
                let logical = str_of(&o, "logicalParentUuid").map(|p| At::Source(p.to_owned()));
                self.boundary = Some(Boundary {
                    line,
                    uuid: Some(uuid),
                    parent: logical.unwrap_or(parent),
                    ts,
                    record: o,
                });
                Ok(())
            }
            other => {
                // system (not shown to the model), progress, attachment and
                // anything newer: kept in the chain, skipped by every fold.
                let kind = format!(
                    "claude-code.{}",
                    if other.is_empty() { "record" } else { other }
                );
                b.entry(Item {
                    line,
                    id: Some(uuid),
                    at: parent,
                    body: EntryBody::Ignored(Unknown {
                        kind,
                        data: Value::Object(o),
                    }),
                    ts,
                    source: Map::new(),
                })?;
                Ok(())
            }
        }
    }

    fn end_of_input(&mut self, b: &mut Builder<'_>, _line: u64) -> Result<(), Error> {
        if let Some(bd) = self.boundary.take() {
            self.write_boundary(b, bd)?;
        }
        self.flush(b)
    }

    fn finish(&mut self, b: &mut Builder<'_>, line: u64) -> Result<(), Error> {
        if let Some(live) = self.live.as_ref().and_then(|l| b.resolve(l)).cloned()
            && b.leaf() != Some(&live)
        {
            b.note(
                Some(line),
                NoteKind::Repaired,
                format!("the last entry is not the live leaf: checked out to {live}, the last message of the main chain"),
            );
            let from = b.leaf().cloned();
            b.entry(Item {
                line,
                id: None,
                at: At::Entry(live),
                body: EntryBody::Checkout(Checkout {
                    from,
                    summary: None,
                }),
                ts: None,
                source: Map::new(),
            })?;
        }
        if let Some(t) = self
            .custom_title
            .clone()
            .or_else(|| self.ai_title.clone())
            .or_else(|| self.summary.clone())
        {
            b.entry(Item {
                line,
                id: None,
                at: At::Leaf,
                body: EntryBody::SessionInfo(SessionInfo { title: Some(t) }),
                ts: None,
                source: Map::new(),
            })?;
        }
        b.finish(line)
    }
}

impl Claude {
    /// A record without `uuid` (a title, a summary, a snapshot, …): kept as
    /// a log-only record; a title is remembered for the end.
    fn side_record(
        &mut self,
        b: &mut Builder<'_>,
        ty: &str,
        o: Map<String, Value>,
    ) -> Result<(), Error> {
        match ty {
            "custom-title" => {
                self.custom_title = title(&o, "customTitle").or(self.custom_title.take());
            }
            "ai-title" => self.ai_title = title(&o, "aiTitle").or(self.ai_title.take()),
            "summary" => self.summary = title(&o, "summary").or(self.summary.take()),
            _ => {}
        }
        let kind = format!("claude-code.{}", if ty.is_empty() { "record" } else { ty });
        b.log_only(&kind, Value::Object(o))
    }

    /// An `assistant` line: joins the model response it belongs to (written
    /// when the next line does not continue it).
    fn assistant_line(
        &mut self,
        line: u64,
        uuid: String,
        parent: At,
        ts: Option<String>,
        o: &Map<String, Value>,
        msg: &Map<String, Value>,
    ) {
        let mut items = Vec::new();
        let blocks = assistant_blocks(msg.get("content"), &mut items);
        let mut record = rest(o, &["type", "uuid", "parentUuid", "timestamp", "message"]);
        record.insert("message".into(), Value::Object(rest(msg, &["content"])));
        record.insert("blocks".into(), Value::Array(items));
        let g = self.group.get_or_insert_with(|| Group {
            line,
            uuids: Vec::new(),
            parent,
            message_id: str_of(msg, "id").unwrap_or("").to_owned(),
            blocks: Vec::new(),
            items: Vec::new(),
            model: None,
            stop_reason: None,
            usage: None,
            ts,
        });
        g.uuids.push(uuid);
        g.blocks.extend(blocks);
        g.items.push(Value::Object(record));
        g.model = str_of(msg, "model").map(str::to_owned).or(g.model.take());
        g.stop_reason = str_of(msg, "stop_reason")
            .map(str::to_owned)
            .or(g.stop_reason.take());
        g.usage = msg.get("usage").map(usage).or(g.usage.take());
    }

    fn flush(&mut self, b: &mut Builder<'_>) -> Result<(), Error> {
        self.flush_turn(b)?;
        let Some(g) = self.group.take() else {
            return Ok(());
        };
        let mut source = Map::new();
        source.insert("type".into(), json!("assistant"));
        source.insert("lines".into(), Value::Array(g.items));
        let last = g.uuids.last().cloned();
        let id = b.entry(Item {
            line: g.line,
            id: last,
            at: g.parent,
            body: EntryBody::Message(Message {
                role: Role::Assistant,
                content: g.blocks,
                usage: g.usage,
                model: g.model,
                stop_reason: g.stop_reason,
            }),
            ts: g.ts,
            source,
        })?;
        for u in &g.uuids {
            b.alias(u, &id);
        }
        Ok(())
    }

    /// Writes the pending user line with the attachments that joined it:
    /// what they render goes before a prompt's own content, and after a tool
    /// result's (Claude Code sends them there: the prompt's reminders as
    /// text blocks ahead of it, a reminder after a tool result appended to
    /// the result's text).
    fn flush_turn(&mut self, b: &mut Builder<'_>) -> Result<(), Error> {
        let Some(mut t) = self.turn.take() else {
            return Ok(());
        };
        if let EntryBody::Message(m) = &mut t.item.body {
            let texts = t.rendered.into_iter().map(|text| Block::Text { text });
            let last_result = m
                .content
                .iter()
                .rposition(|b| matches!(b, Block::ToolResult { .. }));
            match last_result {
                Some(i) => {
                    if let Block::ToolResult { content, .. } = &mut m.content[i] {
                        content.extend(texts);
                    }
                }
                None => drop(m.content.splice(0..0, texts)),
            }
        }
        if !t.attachments.is_empty() {
            t.item
                .source
                .insert("attachments".into(), Value::Array(t.attachments));
        }
        let id = b.entry(t.item)?;
        for u in &t.uuids {
            b.alias(u, &id);
        }
        Ok(())
    }

    fn write_boundary(&mut self, b: &mut Builder<'_>, bd: Boundary) -> Result<(), Error> {
        b.note(
            Some(bd.line),
            NoteKind::Repaired,
            "a compact boundary without its summary line: imported as a compaction with the boundary's text".into(),
        );
        let summary = str_of(&bd.record, "content").unwrap_or("").to_owned();
        let source = rest(&bd.record, &["type", "uuid", "parentUuid", "timestamp"]);
        b.entry(Item {
            line: bd.line,
            id: bd.uuid,
            at: bd.parent,
            body: EntryBody::Compaction(Compaction {
                summary,
                first_kept: None,
                tokens_before: None,
            }),
            ts: bd.ts,
            source,
        })?;
        Ok(())
    }
}

/// What an attachment line renders for the model (`rendered[].content`,
/// written by Claude Code 2.1 and later; older lines say nothing of it).
/// A compact boundary and the summary line `o` that completes it, as one
/// compaction under the boundary's logical parent; returns its id.
fn write_compaction(
    b: &mut Builder<'_>,
    bd: Boundary,
    o: &Map<String, Value>,
    msg: &Map<String, Value>,
) -> Result<cairn::EntryId, Error> {
    let summary = text_of(msg.get("content"));
    let mut source = rest(&bd.record, &["type", "uuid", "parentUuid", "timestamp"]);
    source.insert(
        "summary_record".into(),
        Value::Object(rest(o, &["message"])),
    );
    b.entry(Item {
        line: bd.line,
        id: bd.uuid.clone(),
        at: bd.parent,
        body: EntryBody::Compaction(Compaction {
            summary,
            first_kept: None,
            tokens_before: bd
                .record
                .get("compactMetadata")
                .and_then(|m| m.get("preTokens"))
                .and_then(Value::as_u64),
        }),
        ts: bd.ts,
        source,
    })
}

fn rendered(o: &Map<String, Value>) -> Vec<String> {
    o.get("rendered")
        .and_then(Value::as_array)
        .map(|rs| {
            rs.iter()
                .map(|r| text_of(r.get("content")))
                .filter(|t| !t.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

fn title(o: &Map<String, Value>, key: &str) -> Option<String> {
    str_of(o, key)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(bs)) => bs
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input: n("input_tokens"),
        output: n("output_tokens"),
        cached: n("cache_read_input_tokens"),
        cost: None,
    }
}

/// Each block's fields cairn has no place for (or the whole block, when
/// cairn has no block for it) go to `items`, by position.
fn keep(items: &mut Vec<Value>, i: usize, v: Map<String, Value>) {
    if !v.is_empty() {
        items.push(json!({"index": i, "fields": v}));
    }
}

fn assistant_blocks(content: Option<&Value>, items: &mut Vec<Value>) -> Vec<Block> {
    let mut out = Vec::new();
    let blocks = match content {
        Some(Value::String(s)) => return vec![Block::Text { text: s.clone() }],
        Some(Value::Array(bs)) => bs,
        _ => return out,
    };
    for (i, b) in blocks.iter().enumerate() {
        let Value::Object(o) = b else { continue };
        let s = |k: &str| str_of(o, k).unwrap_or("").to_owned();
        match str_of(o, "type") {
            Some("text") => {
                out.push(Block::Text { text: s("text") });
                keep(items, i, rest(o, &["type", "text"]));
            }
            Some("thinking") => {
                out.push(Block::Thinking {
                    thinking: s("thinking"),
                    signature: str_of(o, "signature").map(str::to_owned),
                });
                keep(items, i, rest(o, &["type", "thinking", "signature"]));
            }
            Some("tool_use") => {
                out.push(Block::ToolCall {
                    call_id: s("id"),
                    name: s("name"),
                    arguments: o.get("input").cloned().unwrap_or(json!({})),
                });
                keep(items, i, rest(o, &["type", "id", "name", "input"]));
            }
            _ => keep(items, i, o.clone()),
        }
    }
    out
}

/// A user line's blocks, and whether it holds tool results.
fn user_blocks(content: Option<&Value>, items: &mut Vec<Value>) -> (Vec<Block>, bool) {
    let blocks = match content {
        Some(Value::String(s)) => return (vec![Block::Text { text: s.clone() }], false),
        Some(Value::Array(bs)) => bs,
        _ => return (Vec::new(), false),
    };
    let mut out = Vec::new();
    let mut results = false;
    for (i, b) in blocks.iter().enumerate() {
        let Value::Object(o) = b else { continue };
        match str_of(o, "type") {
            Some("text") => {
                out.push(Block::Text {
                    text: str_of(o, "text").unwrap_or("").to_owned(),
                });
                keep(items, i, rest(o, &["type", "text"]));
            }
            Some("image") => match image(o.get("source")) {
                Some(img) => {
                    out.push(img);
                    keep(items, i, rest(o, &["type", "source"]));
                }
                None => keep(items, i, o.clone()),
            },
            Some("tool_result") => {
                results = true;
                let content = match o.get("content") {
                    Some(Value::String(s)) => vec![Block::Text { text: s.clone() }],
                    Some(Value::Array(cs)) => cs
                        .iter()
                        .filter_map(|c| match str_of(c.as_object()?, "type") {
                            Some("text") => Some(Block::Text {
                                text: c.get("text")?.as_str()?.to_owned(),
                            }),
                            Some("image") => image(c.get("source")),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                out.push(Block::ToolResult {
                    call_id: str_of(o, "tool_use_id").unwrap_or("").to_owned(),
                    content,
                    is_error: o.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                    code: None,
                });
                keep(items, i, rest(o, &["type", "tool_use_id", "is_error"]));
            }
            _ => keep(items, i, o.clone()),
        }
    }
    (out, results)
}

fn image(source: Option<&Value>) -> Option<Block> {
    let s = source?.as_object()?;
    (str_of(s, "type") == Some("base64")).then(|| Block::Image {
        media_type: str_of(s, "media_type").unwrap_or("").to_owned(),
        data: str_of(s, "data").unwrap_or("").to_owned(),
    })
}
