//! pi session files (`@mariozechner/pi-coding-agent`, `session-manager.ts`),
//! versions 1–3: a `session` header, then entries with `id` and `parentId`
//! (version 1 has neither: each entry follows the one before, as pi's own
//! migration makes it). The leaf is the last entry.
//!
//! How each record maps (`docs/RECORDS.md` section 2 has the table): a
//! `message` becomes a `message` entry (its role decides the cairn role and
//! text, exactly as pi's `convertToLlm` shows it to the model), a
//! `compaction` a compaction, a `branch_summary` a checkout with its summary,
//! `thinking_level_change` and `model_change` settings, `label` a label,
//! `session_info` a title, `custom` an invisible custom entry and
//! `custom_message` a user message. An unknown type becomes an ignorable
//! entry named `pi.<type>`; the fields cairn has no place for are kept in the
//! entry's `source` member.

use std::collections::{HashMap, HashSet};

use cairn::{
    Block, Checkout, Compaction, Custom, EntryBody, EntryId, Label, Message, Role, SessionInfo,
    Settings, Unknown, Usage,
};
use serde_json::{Map, Value, json};

use crate::builder::{At, Builder, Item, message};
use crate::lineage::{Link, ParentRef};
use crate::report::NoteKind;
use crate::{Convert, Error, Start, rest, str_of, ts_of};

/// pi's framing of a compaction summary shown to the model (`messages.ts`).
pub const COMPACTION_SUMMARY_PREFIX: &str = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
/// The end of it.
pub const COMPACTION_SUMMARY_SUFFIX: &str = "\n</summary>";
/// pi's framing of a branch summary shown to the model.
pub const BRANCH_SUMMARY_PREFIX: &str =
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
/// The end of it.
pub const BRANCH_SUMMARY_SUFFIX: &str = "</summary>";

/// The pi converter's state.
#[derive(Debug, Default)]
pub struct Pi {
    version: u64,
    /// Version 1: the id given to each parsed record, by position (0 is the header).
    v1_ids: Vec<String>,
    /// Entries that hold tool results (a compaction must not keep from one).
    results: HashSet<EntryId>,
    /// Each imported entry's parent (for "is it on the branch").
    parents: HashMap<EntryId, Option<EntryId>>,
    /// Each labelled target's label name.
    label_of: HashMap<EntryId, String>,
    header_seen: bool,
}

impl Convert for Pi {
    fn start(&mut self, lines: &[(u64, Value)]) -> Result<Start, String> {
        let Some((_, Value::Object(h))) = lines.first() else {
            return Err("it has no record".into());
        };
        if str_of(h, "type") != Some("session") {
            return Err("its first record is not a \"session\" header".into());
        }
        self.version = h.get("version").and_then(Value::as_u64).unwrap_or(1);
        if self.version > 3 {
            return Err(format!(
                "it is version {}, and this cairn reads pi versions 1 to 3",
                self.version
            ));
        }
        // A session branched from another names that one's file.
        let link = str_of(h, "parentSession")
            .filter(|p| !p.is_empty())
            .map(|p| Link::Fork {
                parent: ParentRef::Path(p.into()),
                ordinal: None,
            });
        Ok(Start {
            source_id: str_of(h, "id").map(str::to_owned),
            cwd: str_of(h, "cwd").map(str::to_owned),
            link,
        })
    }

    fn line(&mut self, b: &mut Builder<'_>, line: u64, v: Value) -> Result<(), Error> {
        let Value::Object(o) = v else {
            return Ok(());
        };
        let ty = str_of(&o, "type").unwrap_or("").to_owned();
        if ty == "session" {
            if self.header_seen {
                b.note(
                    Some(line),
                    NoteKind::Kept,
                    "a second session header: kept as an ignorable record".into(),
                );
                b.log_only("pi.session", Value::Object(o))?;
            } else {
                // Its fields beyond the id and cwd (time, version, the
                // session it was branched from) are kept as they are.
                self.header_seen = true;
                self.v1_ids.push(String::new());
                b.log_only("pi.session", Value::Object(o))?;
            }
            return Ok(());
        }
        let (id, at) = if self.version < 2 {
            let id = format!("{:08x}", self.v1_ids.len());
            let at = self
                .v1_ids
                .iter()
                .rev()
                .find(|i| !i.is_empty())
                .map_or(At::Root, |p| At::Source(p.clone()));
            self.v1_ids.push(id.clone());
            (Some(id), at)
        } else {
            let id = match o.get("id") {
                Some(Value::String(s)) => Some(s.clone()),
                _ => {
                    b.note(
                        Some(line),
                        NoteKind::Repaired,
                        "the entry has no id: imported under a new one".into(),
                    );
                    None
                }
            };
            let at = match o.get("parentId") {
                Some(Value::String(p)) => At::Source(p.clone()),
                _ => At::Root,
            };
            (id, at)
        };
        let ts = ts_of(o.get("timestamp"));
        let (body, source) = self.convert(b, line, &ty, &o, &at);
        let is_result = matches!(&body, EntryBody::Message(m) if m.role == Role::Tool);
        let parent = match &at {
            At::Source(p) => b.resolve(p).cloned(),
            At::Root | At::Leaf | At::Entry(_) => None,
        };
        let imported = b.entry(Item {
            line,
            id,
            at,
            body,
            ts,
            source,
        })?;
        if is_result {
            self.results.insert(imported.clone());
        }
        self.parents.insert(imported, parent);
        Ok(())
    }
}

impl Pi {
    /// The cairn body for one pi entry, and the fields kept in `source`.
    fn convert(
        &mut self,
        b: &mut Builder<'_>,
        line: u64,
        ty: &str,
        o: &Map<String, Value>,
        at: &At,
    ) -> (EntryBody, Map<String, Value>) {
        // The message is converted on its own (never copied whole here).
        const ENTRY: &[&str] = &["type", "id", "parentId", "timestamp", "message"];
        let mut source = rest(o, ENTRY);
        source.insert("type".into(), json!(ty));
        if ty != "message"
            && let Some(m) = o.get("message")
        {
            source.insert("message".into(), m.clone());
        }
        if let Some(t) = o.get("timestamp") {
            source.insert("timestamp".into(), t.clone());
        }
        let body = match ty {
            "message" => match o.get("message") {
                Some(Value::Object(m)) => {
                    let (body, kept) = pi_message(b, line, m);
                    source.insert("message".into(), Value::Object(kept));
                    body
                }
                _ => ignored(
                    b,
                    line,
                    "pi.message",
                    o,
                    "a message entry without a message object",
                ),
            },
            "thinking_level_change" => {
                source.remove("thinkingLevel");
                settings([(
                    "thinking_level",
                    o.get("thinkingLevel").cloned().unwrap_or(Value::Null),
                )])
            }
            "model_change" => {
                source.remove("provider");
                source.remove("modelId");
                settings([
                    (
                        "provider",
                        o.get("provider").cloned().unwrap_or(Value::Null),
                    ),
                    ("model", o.get("modelId").cloned().unwrap_or(Value::Null)),
                ])
            }
            "compaction" => {
                source.remove("summary");
                source.remove("tokensBefore");
                let first_kept = self.first_kept(b, line, o, at);
                if first_kept.is_some() || o.contains_key("firstKeptEntryId") {
                    source.remove("firstKeptEntryId");
                }
                EntryBody::Compaction(Compaction {
                    summary: str_of(o, "summary").unwrap_or("").to_owned(),
                    first_kept,
                    tokens_before: o.get("tokensBefore").and_then(Value::as_u64),
                })
            }
            "branch_summary" => {
                source.remove("summary");
                let from = match str_of(o, "fromId") {
                    Some("root") | None => None,
                    Some(f) => b.resolve(f).cloned(),
                };
                let summary = str_of(o, "summary").filter(|s| !s.is_empty());
                EntryBody::Checkout(Checkout {
                    from,
                    summary: summary.map(str::to_owned),
                })
            }
            "custom" => {
                source.remove("data");
                let ns = match str_of(o, "customType") {
                    Some(t) if !t.is_empty() => format!("pi.{t}"),
                    _ => "pi.custom".to_owned(),
                };
                EntryBody::Custom(Custom {
                    namespace: ns,
                    visible: false,
                    content: o.get("data").cloned().unwrap_or(Value::Null),
                })
            }
            "custom_message" => {
                source.remove("content");
                message(
                    Role::User,
                    content_blocks(b, line, o.get("content"), &mut source),
                )
            }
            "label" => self.label(b, line, o, &mut source),
            "session_info" => {
                source.remove("name");
                let name = str_of(o, "name").map(str::trim).filter(|n| !n.is_empty());
                if name.is_none() {
                    // cairn keeps the last title; pi clears its name.
                    source.insert("name".into(), o.get("name").cloned().unwrap_or(Value::Null));
                }
                EntryBody::SessionInfo(SessionInfo {
                    title: name.map(str::to_owned),
                })
            }
            other => {
                let kind = format!("pi.{}", if other.is_empty() { "unknown" } else { other });
                ignored(
                    b,
                    line,
                    &kind,
                    o,
                    &format!("pi entry type {other:?} is not one cairn knows"),
                )
            }
        };
        if matches!(body, EntryBody::Ignored(_)) {
            source = Map::new();
        }
        (body, source)
    }

    /// The compaction's first kept entry, as pi finds it: an entry on the
    /// branch before the compaction, else none. A first kept entry holding
    /// tool results is moved back to the call it answers (cairn never
    /// separates a call from its result).
    fn first_kept(
        &self,
        b: &mut Builder<'_>,
        line: u64,
        o: &Map<String, Value>,
        at: &At,
    ) -> Option<EntryId> {
        let target = if self.version < 2 {
            let i = o.get("firstKeptEntryIndex").and_then(Value::as_u64)?;
            let id = self.v1_ids.get(usize::try_from(i).ok()?)?;
            b.resolve(id).cloned()?
        } else {
            b.resolve(str_of(o, "firstKeptEntryId")?).cloned()?
        };
        let mut cur = match at {
            At::Source(p) => b.resolve(p).cloned(),
            At::Root | At::Leaf | At::Entry(_) => None,
        };
        while let Some(c) = cur {
            if c == target {
                let mut kept = c;
                while self.results.contains(&kept) {
                    match self.parents.get(&kept).cloned().flatten() {
                        Some(p) => kept = p,
                        None => break,
                    }
                }
                if kept != target {
                    b.note(
                        Some(line),
                        NoteKind::Repaired,
                        format!(
                            "the compaction keeps from {target}, a tool result: kept from {kept}, the call it answers, instead"
                        ),
                    );
                }
                return Some(kept);
            }
            cur = self.parents.get(&c).cloned().flatten();
        }
        None
    }

    fn label(
        &mut self,
        b: &mut Builder<'_>,
        line: u64,
        o: &Map<String, Value>,
        source: &mut Map<String, Value>,
    ) -> EntryBody {
        let target = str_of(o, "targetId").and_then(|t| b.resolve(t).cloned());
        let Some(target) = target else {
            return ignored(
                b,
                line,
                "pi.label",
                o,
                "the label's target is not in the file",
            );
        };
        source.remove("targetId");
        match str_of(o, "label").filter(|l| !l.is_empty()) {
            Some(text) => {
                let name = label_name(text);
                if name != text {
                    source.insert("label".into(), json!(text));
                } else {
                    source.remove("label");
                }
                self.label_of.insert(target.clone(), name.clone());
                EntryBody::Label(Label {
                    name,
                    target: Some(target),
                })
            }
            None => match self.label_of.remove(&target) {
                Some(name) => {
                    source.remove("label");
                    EntryBody::Label(Label { name, target: None })
                }
                None => EntryBody::Ignored(Unknown {
                    kind: "pi.label".into(),
                    data: Value::Object(o.clone()),
                }),
            },
        }
    }
}

/// A cairn label name for a pi label text: characters outside
/// `A-Z a-z 0-9 - _ .` become `-`, at most 64 characters.
pub fn label_name(text: &str) -> String {
    let name: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "label".into()
    } else {
        name
    }
}

fn settings<const N: usize>(values: [(&str, Value); N]) -> EntryBody {
    EntryBody::Settings(Settings {
        values: values.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    })
}

fn ignored(
    b: &mut Builder<'_>,
    line: u64,
    kind: &str,
    o: &Map<String, Value>,
    why: &str,
) -> EntryBody {
    b.note(
        Some(line),
        NoteKind::Kept,
        format!("{why}: kept as an ignorable {kind} entry"),
    );
    EntryBody::Ignored(Unknown {
        kind: kind.to_owned(),
        data: Value::Object(o.clone()),
    })
}

/// A pi message: the cairn body, and the message's fields kept in `source`.
fn pi_message(
    b: &mut Builder<'_>,
    line: u64,
    m: &Map<String, Value>,
) -> (EntryBody, Map<String, Value>) {
    let role = str_of(m, "role").unwrap_or("");
    let mut kept = rest(m, &["content"]);
    let text = |t: String| vec![Block::Text { text: t }];
    let msg = |role: Role, content: Vec<Block>| Message {
        role,
        content,
        usage: None,
        model: None,
        stop_reason: None,
    };
    let body = match role {
        "user" => msg(
            Role::User,
            content_blocks(b, line, m.get("content"), &mut kept),
        ),
        // pi 2 wrote extension messages as `hookMessage`; pi 3 as `custom`.
        "custom" | "hookMessage" => msg(
            Role::User,
            content_blocks(b, line, m.get("content"), &mut kept),
        ),
        "assistant" => {
            kept.remove("model");
            kept.remove("stopReason");
            let mut out = msg(
                Role::Assistant,
                assistant_blocks(b, line, m.get("content"), &mut kept),
            );
            out.model = str_of(m, "model").map(str::to_owned);
            out.stop_reason = str_of(m, "stopReason").map(str::to_owned);
            out.usage = m.get("usage").and_then(usage);
            out
        }
        "toolResult" => {
            kept.remove("toolCallId");
            kept.remove("isError");
            let content = content_blocks(b, line, m.get("content"), &mut kept)
                .into_iter()
                .filter(Block::fits_in_a_tool_result)
                .collect();
            msg(
                Role::Tool,
                vec![Block::ToolResult {
                    call_id: str_of(m, "toolCallId").unwrap_or("").to_owned(),
                    content,
                    is_error: m.get("isError").and_then(Value::as_bool).unwrap_or(false),
                    code: None,
                }],
            )
        }
        "bashExecution" => {
            kept = m.clone();
            if m.get("excludeFromContext").and_then(Value::as_bool) == Some(true) {
                return (
                    EntryBody::Custom(Custom {
                        namespace: "pi.bashExecution".into(),
                        visible: false,
                        content: Value::Object(m.clone()),
                    }),
                    Map::new(),
                );
            }
            msg(Role::User, text(bash_execution_text(m)))
        }
        "branchSummary" => {
            let s = str_of(m, "summary").unwrap_or("");
            msg(
                Role::User,
                text(format!("{BRANCH_SUMMARY_PREFIX}{s}{BRANCH_SUMMARY_SUFFIX}")),
            )
        }
        "compactionSummary" => {
            let s = str_of(m, "summary").unwrap_or("");
            msg(
                Role::User,
                text(format!(
                    "{COMPACTION_SUMMARY_PREFIX}{s}{COMPACTION_SUMMARY_SUFFIX}"
                )),
            )
        }
        other => {
            // pi's convertToLlm shows the model no message of another role.
            b.note(
                Some(line),
                NoteKind::Kept,
                format!("message role {other:?} is not one pi shows the model: kept as an ignorable pi.message entry"),
            );
            return (
                EntryBody::Ignored(Unknown {
                    kind: "pi.message".into(),
                    data: Value::Object(m.clone()),
                }),
                Map::new(),
            );
        }
    };
    (EntryBody::Message(body), kept)
}

/// pi's `bashExecutionToText`: how a `!command` run by the person is shown
/// to the model.
fn bash_execution_text(m: &Map<String, Value>) -> String {
    let mut text = format!("Ran `{}`\n", str_of(m, "command").unwrap_or(""));
    match str_of(m, "output").filter(|o| !o.is_empty()) {
        Some(out) => text.push_str(&format!("```\n{out}\n```")),
        None => text.push_str("(no output)"),
    }
    let truthy = |k: &str| match m.get(k) {
        Some(Value::Bool(b)) => *b,
        Some(Value::Null) | None => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(_) => true,
    };
    if truthy("cancelled") {
        text.push_str("\n\n(command cancelled)");
    } else if let Some(code) = m.get("exitCode").filter(|c| !c.is_null())
        && code.as_f64() != Some(0.0)
    {
        text.push_str(&format!("\n\nCommand exited with code {}", js_number(code)));
    }
    if truthy("truncated")
        && let Some(p) = str_of(m, "fullOutputPath").filter(|p| !p.is_empty())
    {
        text.push_str(&format!("\n\n[Output truncated. Full output: {p}]"));
    }
    text
}

fn js_number(v: &Value) -> String {
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn usage(u: &Value) -> Option<Usage> {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        input: n("input"),
        output: n("output"),
        cached: n("cacheRead"),
        cost: u
            .get("cost")
            .and_then(|c| c.get("total"))
            .and_then(Value::as_f64),
    })
}

/// User-side content: a string, or text and image blocks.
fn content_blocks(
    b: &mut Builder<'_>,
    line: u64,
    content: Option<&Value>,
    kept: &mut Map<String, Value>,
) -> Vec<Block> {
    match content {
        Some(Value::String(s)) => vec![Block::Text { text: s.clone() }],
        Some(Value::Array(blocks)) => blocks_of(b, line, blocks, kept),
        _ => Vec::new(),
    }
}

fn assistant_blocks(
    b: &mut Builder<'_>,
    line: u64,
    content: Option<&Value>,
    kept: &mut Map<String, Value>,
) -> Vec<Block> {
    content_blocks(b, line, content, kept)
}

/// Converts pi content blocks; a block's fields cairn has no place for go to
/// `kept.blocks[i]`, an unknown block whole.
fn blocks_of(
    b: &mut Builder<'_>,
    line: u64,
    blocks: &[Value],
    kept: &mut Map<String, Value>,
) -> Vec<Block> {
    let mut out = Vec::with_capacity(blocks.len());
    let mut extra = Map::new();
    for (i, block) in blocks.iter().enumerate() {
        let Value::Object(o) = block else {
            extra.insert(i.to_string(), block.clone());
            continue;
        };
        let s = |k: &str| str_of(o, k).unwrap_or("").to_owned();
        let (converted, consumed): (Option<Block>, &[&str]) = match str_of(o, "type") {
            Some("text") => (Some(Block::Text { text: s("text") }), &["type", "text"]),
            Some("image") => (
                Some(Block::Image {
                    media_type: s("mimeType"),
                    data: s("data"),
                }),
                &["type", "mimeType", "data"],
            ),
            Some("thinking") => (
                Some(Block::Thinking {
                    thinking: s("thinking"),
                    signature: str_of(o, "thinkingSignature").map(str::to_owned),
                }),
                &["type", "thinking", "thinkingSignature"],
            ),
            Some("toolCall") => (
                Some(Block::ToolCall {
                    call_id: s("id"),
                    name: s("name"),
                    arguments: o.get("arguments").cloned().unwrap_or(json!({})),
                }),
                &["type", "id", "name", "arguments"],
            ),
            other => {
                b.note(
                    Some(line),
                    NoteKind::Kept,
                    format!("content block type {other:?} is not one cairn knows: kept in the entry's source"),
                );
                (None, &[])
            }
        };
        match converted {
            Some(c) => {
                let r = rest(o, consumed);
                if !r.is_empty() {
                    extra.insert(out.len().to_string(), Value::Object(r));
                }
                out.push(c);
            }
            None => {
                extra.insert(format!("dropped.{i}"), block.clone());
            }
        }
    }
    if !extra.is_empty() {
        kept.insert("blocks".into(), Value::Object(extra));
    }
    out
}
