//! `cairn export --format pi`: a cairn session written as a pi session file
//! (version 3) that pi's own `SessionManager` opens with the same context.
//!
//! Every entry of the session is written, in order, so pi's leaf (its last
//! entry) is cairn's. An entry imported from pi is written back from the
//! fields its `source` member kept; anything else is mapped: messages to pi
//! messages (a tool message with several results to one `toolResult` entry
//! each), a compaction to `compaction`, a checkout to `branch_summary`,
//! settings to `thinking_level_change` / `model_change`, labels, titles,
//! custom entries; what pi has no type for (app state, system messages,
//! ignorable records) to `custom` entries pi keeps out of the context, or a
//! `custom_message` where cairn shows it to the model.

use std::collections::HashMap;
use std::io::Write;

use cairn::{Block, Body, EntryBody, EntryId, Message, Role, Session};
use serde_json::{Map, Value, json};

/// Errors of the export to pi.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// A record could not be read.
    #[error("cannot read session {session}")]
    Read {
        /// The session.
        session: String,
        /// The core's error.
        #[source]
        source: cairn::ReadError,
    },
    /// Writing the output failed.
    #[error("cannot write the pi session")]
    Write(#[from] std::io::Error),
}

/// Writes `session` as a pi session file (JSON lines, version 3) to `out`.
///
/// # Errors
///
/// [`ExportError::Read`] when a record cannot be read back,
/// [`ExportError::Write`] when `out` fails.
pub fn export_pi(session: &Session, out: &mut dyn Write) -> Result<(), ExportError> {
    let h = session.header();
    let id = h
        .lineage
        .imported_from
        .as_ref()
        .filter(|o| o.format == "pi")
        .and_then(|o| o.source_id.clone())
        .unwrap_or_else(|| h.session.to_string());
    let header = json!({
        "type": "session",
        "version": 3,
        "id": id,
        "timestamp": h.created,
        "cwd": h.cwd.clone().unwrap_or_default(),
    });
    writeln!(out, "{header}")?;
    let mut w = Writer {
        ids: HashMap::new(),
        label_targets: HashMap::new(),
        out,
    };
    let read = |e| ExportError::Read {
        session: session.id().to_string(),
        source: e,
    };
    for seq in 1..session.len() {
        let record = session.record(seq).map_err(read)?;
        let Body::Entry(entry) = record.body else {
            continue;
        };
        let raw = session.raw_record(seq).map_err(read)?;
        let source = source_member(&raw);
        let parent = entry.parent.as_ref().map(|p| w.pi_id(p));
        w.entry(&entry.id, parent, &record.ts, &entry.body, &source)?;
    }
    Ok(())
}

/// The `source` member an import kept in a line's `data`.
fn source_member(raw: &[u8]) -> Map<String, Value> {
    cairn::frame::Frame::parse(raw)
        .ok()
        .and_then(|f| serde_json::from_str::<Value>(f.data.get()).ok())
        .and_then(|d| match d.get("source") {
            Some(Value::Object(o)) => Some(o.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

struct Writer<'o> {
    /// cairn id → the id of the last pi entry written for it.
    ids: HashMap<EntryId, String>,
    label_targets: HashMap<String, String>,
    out: &'o mut dyn Write,
}

impl Writer<'_> {
    fn pi_id(&self, id: &EntryId) -> String {
        self.ids.get(id).cloned().unwrap_or_else(|| id.to_string())
    }

    fn emit(
        &mut self,
        id: &str,
        parent: Option<&str>,
        ts: &str,
        mut e: Map<String, Value>,
    ) -> Result<(), ExportError> {
        let mut line = Map::new();
        line.insert("type".into(), e.remove("type").unwrap_or(json!("custom")));
        line.insert("id".into(), json!(id));
        line.insert("parentId".into(), parent.map_or(Value::Null, |p| json!(p)));
        line.insert(
            "timestamp".into(),
            e.remove("timestamp").unwrap_or(json!(ts)),
        );
        line.extend(e);
        writeln!(self.out, "{}", Value::Object(line))?;
        Ok(())
    }

    fn entry(
        &mut self,
        id: &EntryId,
        parent: Option<String>,
        ts: &str,
        body: &EntryBody,
        source: &Map<String, Value>,
    ) -> Result<(), ExportError> {
        let from_pi = source.get("type").is_some();
        let mut e = if from_pi { source.clone() } else { Map::new() };
        e.remove("repair");
        let pid = id.to_string();
        let parent = parent.as_deref();
        match body {
            EntryBody::Message(m) => return self.message(id, parent, ts, m, source),
            EntryBody::Compaction(c) => {
                e.insert("type".into(), json!("compaction"));
                e.insert("summary".into(), json!(c.summary));
                e.insert(
                    "firstKeptEntryId".into(),
                    c.first_kept
                        .as_ref()
                        .map_or(Value::Null, |k| json!(self.pi_id(k))),
                );
                if let Some(t) = c.tokens_before {
                    e.insert("tokensBefore".into(), json!(t));
                }
            }
            EntryBody::Checkout(c) => {
                e.insert("type".into(), json!("branch_summary"));
                e.insert(
                    "fromId".into(),
                    c.from
                        .as_ref()
                        .map_or(json!("root"), |f| json!(self.pi_id(f))),
                );
                e.insert(
                    "summary".into(),
                    json!(c.summary.clone().unwrap_or_default()),
                );
            }
            EntryBody::Settings(s) => {
                let level = s.values.get("thinking_level").filter(|v| v.is_string());
                let model = s.values.get("model").filter(|v| v.is_string());
                if s.values.len() == 1 && level.is_some() {
                    e.insert("type".into(), json!("thinking_level_change"));
                    e.insert("thinkingLevel".into(), level.cloned().unwrap_or_default());
                } else if model.is_some()
                    && s.values.keys().all(|k| k == "model" || k == "provider")
                {
                    e.insert("type".into(), json!("model_change"));
                    e.insert(
                        "provider".into(),
                        s.values.get("provider").cloned().unwrap_or(json!("")),
                    );
                    e.insert("modelId".into(), model.cloned().unwrap_or_default());
                } else {
                    e = custom("cairn.settings", Value::Object(s.values.clone()));
                }
            }
            EntryBody::Label(l) => {
                let text = source.get("label").filter(|v| v.is_string()).cloned();
                match &l.target {
                    Some(t) => {
                        let target = self.pi_id(t);
                        self.label_targets.insert(l.name.clone(), target.clone());
                        e.insert("type".into(), json!("label"));
                        e.insert("targetId".into(), json!(target));
                        e.insert("label".into(), text.unwrap_or(json!(l.name)));
                    }
                    None => match self.label_targets.remove(&l.name) {
                        Some(target) => {
                            e.insert("type".into(), json!("label"));
                            e.insert("targetId".into(), json!(target));
                            e.remove("label");
                        }
                        None => e = custom("cairn.label", json!({"name": l.name})),
                    },
                }
            }
            EntryBody::SessionInfo(i) => {
                e.insert("type".into(), json!("session_info"));
                if let Some(t) = &i.title {
                    e.insert("name".into(), json!(t));
                }
            }
            EntryBody::Custom(c) => {
                if c.visible {
                    e.insert("type".into(), json!("custom_message"));
                    e.insert("customType".into(), json!(c.namespace));
                    e.insert("content".into(), json!(value_text(&c.content)));
                    e.insert("display".into(), json!(true));
                } else if c.namespace == "pi.bashExecution" {
                    e = Map::new();
                    e.insert("type".into(), json!("message"));
                    e.insert("message".into(), c.content.clone());
                } else if from_pi {
                    e.insert("type".into(), json!("custom"));
                    e.insert("data".into(), c.content.clone());
                } else {
                    e = custom(&c.namespace, c.content.clone());
                }
            }
            EntryBody::AppState(a) => {
                e = custom(
                    "cairn.app_state",
                    crate::entry_data(&EntryBody::AppState(a.clone())),
                )
            }
            EntryBody::Ignored(u) => match (&u.data, u.kind.strip_prefix("pi.")) {
                (Value::Object(o), Some("message")) if o.contains_key("role") => {
                    e = Map::new();
                    e.insert("type".into(), json!("message"));
                    e.insert("message".into(), u.data.clone());
                }
                (Value::Object(o), Some(_)) if o.contains_key("type") => {
                    e = o.clone();
                    e.remove("id");
                    e.remove("parentId");
                }
                _ => e = custom("cairn.ignored", json!({"kind": u.kind, "data": u.data})),
            },
        }
        self.ids.insert(id.clone(), pid.clone());
        self.emit(&pid, parent, ts, e)
    }

    fn message(
        &mut self,
        id: &EntryId,
        parent: Option<&str>,
        ts: &str,
        m: &Message,
        source: &Map<String, Value>,
    ) -> Result<(), ExportError> {
        let kept = match source.get("message") {
            Some(Value::Object(k)) => k.clone(),
            _ => Map::new(),
        };
        let block_extra = |i: usize| -> Map<String, Value> {
            match kept.get("blocks").and_then(|b| b.get(i.to_string())) {
                Some(Value::Object(o)) => o.clone(),
                _ => Map::new(),
            }
        };
        let entry_of = |message: Map<String, Value>| {
            let mut e = Map::new();
            if let Some(t) = source.get("timestamp") {
                e.insert("timestamp".into(), t.clone());
            }
            e.insert("type".into(), json!("message"));
            e.insert("message".into(), Value::Object(message));
            e
        };
        let pid = id.to_string();
        let role = kept.get("role").and_then(Value::as_str).unwrap_or("");
        // Messages pi shows through a framing of its own go back as they were.
        if matches!(
            role,
            "bashExecution" | "branchSummary" | "compactionSummary"
        ) {
            let mut k = kept.clone();
            k.remove("blocks");
            self.ids.insert(id.clone(), pid.clone());
            return self.emit(&pid, parent, ts, entry_of(k));
        }
        if source.get("type").and_then(Value::as_str) == Some("custom_message") {
            let mut e = source.clone();
            e.insert("content".into(), pi_content(m, &block_extra, true));
            self.ids.insert(id.clone(), pid.clone());
            return self.emit(&pid, parent, ts, e);
        }
        match m.role {
            Role::Tool => {
                let mut parent = parent.map(str::to_owned);
                let mut n = 0;
                let mut last = pid.clone();
                for b in &m.content {
                    let Block::ToolResult {
                        call_id,
                        content,
                        is_error,
                        ..
                    } = b
                    else {
                        continue;
                    };
                    let mut msg = if n == 0 { kept.clone() } else { Map::new() };
                    msg.remove("blocks");
                    msg.insert("role".into(), json!("toolResult"));
                    msg.insert("toolCallId".into(), json!(call_id));
                    msg.entry("toolName").or_insert(json!(""));
                    msg.insert(
                        "content".into(),
                        Value::Array(
                            content
                                .iter()
                                .enumerate()
                                .map(|(i, c)| {
                                    pi_block(c, if n == 0 { block_extra(i) } else { Map::new() })
                                })
                                .collect(),
                        ),
                    );
                    msg.insert("isError".into(), json!(is_error));
                    msg.entry("timestamp")
                        .or_insert(json!(cairn::parse_millis(ts).unwrap_or(0)));
                    let this = if n == 0 {
                        pid.clone()
                    } else {
                        format!("{pid}.{n}")
                    };
                    self.emit(&this, parent.as_deref(), ts, entry_of(msg))?;
                    parent = Some(this.clone());
                    last = this;
                    n += 1;
                }
                self.ids.insert(id.clone(), last);
                Ok(())
            }
            Role::User | Role::Assistant => {
                let mut msg = kept.clone();
                msg.remove("blocks");
                let role = match (m.role, role) {
                    (Role::User, "custom" | "hookMessage") => role.to_owned(),
                    (r, _) => r.as_str().to_owned(),
                };
                let as_string = m.role == Role::User && kept.get("blocks").is_none();
                msg.insert("role".into(), json!(role));
                msg.insert("content".into(), pi_content(m, &block_extra, as_string));
                if m.role == Role::Assistant {
                    if let Some(model) = &m.model {
                        msg.insert("model".into(), json!(model));
                    }
                    if let Some(s) = &m.stop_reason {
                        msg.insert("stopReason".into(), json!(s));
                    }
                    if !msg.contains_key("usage")
                        && let Some(u) = &m.usage
                    {
                        msg.insert("usage".into(), json!({"input": u.input, "output": u.output, "cacheRead": u.cached,
                            "cacheWrite": 0, "totalTokens": u.input + u.output, "cost": {"total": u.cost.unwrap_or(0.0)}}));
                    }
                }
                msg.entry("timestamp")
                    .or_insert(json!(cairn::parse_millis(ts).unwrap_or(0)));
                self.ids.insert(id.clone(), pid.clone());
                self.emit(&pid, parent, ts, entry_of(msg))
            }
            Role::System | Role::Developer => {
                let mut e = Map::new();
                e.insert("type".into(), json!("custom_message"));
                e.insert(
                    "customType".into(),
                    json!(format!("cairn.{}", m.role.as_str())),
                );
                e.insert("content".into(), pi_content(m, &block_extra, false));
                e.insert("display".into(), json!(false));
                self.ids.insert(id.clone(), pid.clone());
                self.emit(&pid, parent, ts, e)
            }
        }
    }
}

fn pi_content(m: &Message, extra: &dyn Fn(usize) -> Map<String, Value>, as_string: bool) -> Value {
    if as_string && let [Block::Text { text }] = m.content.as_slice() {
        return json!(text);
    }
    Value::Array(
        m.content
            .iter()
            .enumerate()
            .map(|(i, b)| pi_block(b, extra(i)))
            .collect(),
    )
}

fn pi_block(b: &Block, mut extra: Map<String, Value>) -> Value {
    let mut put = |k: &str, v: Value| {
        extra.insert(k.to_owned(), v);
    };
    match b {
        Block::Text { text } => {
            put("type", json!("text"));
            put("text", json!(text));
        }
        Block::Thinking {
            thinking,
            signature,
        } => {
            put("type", json!("thinking"));
            put("thinking", json!(thinking));
            if let Some(s) = signature {
                put("thinkingSignature", json!(s));
            }
        }
        Block::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            put("type", json!("toolCall"));
            put("id", json!(call_id));
            put("name", json!(name));
            put("arguments", arguments.clone());
        }
        Block::Image { media_type, data } => {
            put("type", json!("image"));
            put("data", json!(data));
            put("mimeType", json!(media_type));
        }
        Block::Blob { uri, .. } => {
            put("type", json!("text"));
            put(
                "text",
                json!(format!("[content stored outside the session: {uri}]")),
            );
        }
        Block::ToolResult {
            call_id, content, ..
        } => {
            let text: Vec<String> = content
                .iter()
                .filter_map(|c| match c {
                    Block::Text { text } => Some(text.clone()),
                    _ => None,
                })
                .collect();
            put("type", json!("text"));
            put(
                "text",
                json!(format!("[result of {call_id}] {}", text.join("\n"))),
            );
        }
    }
    Value::Object(extra)
}

fn value_text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

fn custom(namespace: &str, data: Value) -> Map<String, Value> {
    let mut e = Map::new();
    e.insert("type".into(), json!("custom"));
    e.insert("customType".into(), json!(namespace));
    e.insert("data".into(), data);
    e
}
