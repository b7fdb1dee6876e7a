//! Short, human descriptions of entries and content blocks, shared by the
//! agent's `/tree` and `/context` and the CLI's tree, log, exports and demo.
//! Text here is flattened to one line and cleaned (see
//! [`crate::term::sanitize`]), but not yet cut to a width.

use cairn::Unknown;
use cairn::steps::{Step, StepKind, StepStatus};
use cairn::{AppStateChange, Block, EntryBody, Message, ResultBlock, Role};
use serde_json::Value;

use crate::term::{Lines, Style, sanitize};

/// One entry in one line: a tag (`user`, `state`, `checkout`, …) and a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneLine {
    /// What the entry is.
    pub tag: String,
    /// How the tag looks.
    pub style: Style,
    /// What it says, on one line.
    pub text: String,
}

/// Flattens text to one cleaned line, whitespace collapsed.
pub fn flat(text: &str) -> String {
    let cleaned = sanitize(text, Lines::Flatten);
    cleaned.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Compact JSON on one line.
pub fn compact(v: &Value) -> String {
    flat(&v.to_string())
}

/// The style of a role's name.
pub fn role_style(role: Role) -> Style {
    match role {
        Role::User => Style::User,
        Role::Assistant => Style::Assistant,
        Role::Tool => Style::Tool,
        Role::System | Role::Developer => Style::Bold,
    }
}

/// Describes an entry in one line.
pub fn entry_line(body: &EntryBody) -> OneLine {
    let (tag, style, text): (String, Style, String) = match body {
        EntryBody::Message(m) => (m.role.as_str().into(), role_style(m.role), message_line(m)),
        EntryBody::AppState(AppStateChange::Set(v)) => {
            ("state".into(), Style::Tool, format!("set {}", compact(v)))
        }
        EntryBody::AppState(AppStateChange::Patch(v)) => {
            ("state".into(), Style::Tool, format!("patch {}", compact(v)))
        }
        EntryBody::Compaction(c) => {
            let keeps = c.first_kept.as_ref().map_or_else(
                || "keeps nothing before it".to_owned(),
                |k| format!("keeps from {k}"),
            );
            (
                "compaction".into(),
                Style::Bold,
                format!("{keeps}: {}", flat(&c.summary)),
            )
        }
        EntryBody::Checkout(c) => {
            let from = c
                .from
                .as_ref()
                .map_or_else(|| "from the start".to_owned(), |f| format!("from {f}"));
            let text = match &c.summary {
                Some(s) => format!("{from}: {}", flat(s)),
                None => from,
            };
            ("checkout".into(), Style::Bold, text)
        }
        EntryBody::Settings(s) => (
            "settings".into(),
            Style::Dim,
            compact(&Value::Object(s.values.clone())),
        ),
        EntryBody::Label(l) => {
            let text = match &l.target {
                Some(t) => format!("{} → {t}", flat(&l.name)),
                None => format!("{} removed", flat(&l.name)),
            };
            ("label".into(), Style::Label, text)
        }
        EntryBody::SessionInfo(i) => (
            "info".into(),
            Style::Dim,
            i.title.as_deref().map_or_else(
                || "(no title)".to_owned(),
                |t| format!("title {:?}", flat(t)),
            ),
        ),
        EntryBody::Custom(c) => {
            let content = match &c.content {
                Value::String(s) => flat(s),
                other => compact(other),
            };
            let vis = if c.visible {
                " (shown to the model)"
            } else {
                ""
            };
            (
                "custom".into(),
                Style::Dim,
                format!("{}{vis}: {content}", flat(&c.namespace)),
            )
        }
        EntryBody::Ignored(Unknown { kind, data }) => (
            flat(kind),
            Style::Dim,
            format!("(unknown kind, ignored) {}", compact(data)),
        ),
    };
    OneLine { tag, style, text }
}

/// A message's content in one line: text, then calls, results and the rest.
pub fn message_line(m: &Message) -> String {
    let parts = block_lines(&m.content);
    if parts.is_empty() {
        "(empty)".to_owned()
    } else {
        parts.join(" · ")
    }
}

/// The blocks' lines, the empty ones left out.
fn block_lines(blocks: &[Block]) -> Vec<String> {
    blocks
        .iter()
        .map(block_line)
        .filter(|s| !s.is_empty())
        .collect()
}

/// One content block in one line.
pub fn block_line(b: &Block) -> String {
    match b {
        Block::Text { text } => flat(text),
        Block::Thinking { .. } => "(thinking)".to_owned(),
        Block::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            format!(
                "→ {}({}) [{}]",
                flat(name),
                compact(arguments),
                flat(call_id)
            )
        }
        Block::ToolResult { .. } => b.as_result().map(result_line).unwrap_or_default(),
        Block::Image { media_type, data } => {
            format!("[image {} · {} bytes base64]", flat(media_type), data.len())
        }
        Block::Blob { uri, .. } => format!("[blob {}]", flat(uri)),
    }
}

/// A tool result in one line: the call it answers, whether it failed, its
/// code, then its content.
fn result_line(r: ResultBlock<'_>) -> String {
    let inner = block_lines(r.content);
    let err = if r.is_error { " error" } else { "" };
    let code = r.code.map(|c| format!(" {}", flat(c))).unwrap_or_default();
    format!("← [{}]{err}{code}: {}", flat(r.call_id), inner.join(" · "))
}

/// A step in cells: what every listing of steps shows (`cairn steps`,
/// `/steps`, the HTML export), flattened and cleaned but not cut to a width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCells {
    /// `input`, `model` or `tool`.
    pub kind: &'static str,
    /// The input's excerpt, the model's or the tool's name.
    pub name: String,
    /// `ok`, `not started`, …
    pub status: &'static str,
    /// How the status looks.
    pub style: Style,
    /// How long it took (`-` when unknown).
    pub time: String,
    /// Input/output tokens (`-` when unknown).
    pub tokens: String,
    /// What went in (tool arguments), on one line; empty when the name says it.
    pub input: String,
    /// What came out, on one line.
    pub output: String,
}

/// Describes a step in cells.
pub fn step_cells(s: &Step) -> StepCells {
    let kind = match s.kind {
        StepKind::Input => "input",
        StepKind::Model => "model",
        StepKind::Tool => "tool",
    };
    let (status, style) = match s.status {
        StepStatus::Ok => ("ok", Style::Plain),
        StepStatus::Error => ("error", Style::Warn),
        StepStatus::Running => ("running", Style::Bold),
        StepStatus::Interrupted => ("interrupted", Style::Warn),
        StepStatus::Unknown => ("unknown", Style::Warn),
        StepStatus::NotStarted => ("not started", Style::Dim),
        StepStatus::Denied => ("denied", Style::Dim),
    };
    let input = match s.kind {
        StepKind::Tool => s.input.as_deref().map(flat).unwrap_or_default(),
        StepKind::Input | StepKind::Model => String::new(),
    };
    StepCells {
        kind,
        name: flat(&s.name),
        status,
        style,
        time: s.duration_ms.map_or_else(|| "-".to_owned(), duration),
        tokens: s
            .usage
            .as_ref()
            .map_or_else(|| "-".to_owned(), |u| format!("{}/{}", u.input, u.output)),
        input,
        output: s.output.as_deref().map(flat).unwrap_or_default(),
    }
}

/// A duration for people: `850ms`, `1.2s`.
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn::{Label, Settings};
    use serde_json::json;

    #[test]
    fn tool_calls_and_results_read_in_one_line() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                Block::Text {
                    text: "Rendering\nnow".into(),
                },
                Block::ToolCall {
                    call_id: "c1".into(),
                    name: "render".into(),
                    arguments: json!({"panel":1}),
                },
            ],
            usage: None,
            model: None,
            stop_reason: None,
        };
        assert_eq!(
            message_line(&m),
            "Rendering now · → render({\"panel\":1}) [c1]"
        );
        let r = Block::ToolResult {
            call_id: "c1".into(),
            content: vec![Block::Text { text: "ok".into() }],
            is_error: true,
            code: None,
        };
        assert_eq!(block_line(&r), "← [c1] error: ok");
    }

    #[test]
    fn hostile_text_is_flattened_and_escaped() {
        let l = entry_line(&EntryBody::Label(Label {
            name: "x".into(),
            target: None,
        }));
        assert_eq!(l.text, "x removed");
        assert_eq!(flat("a\x1b[31m\n b"), "a\\x1b[31m b");
        let s = entry_line(&EntryBody::Settings(Settings {
            values: json!({"model":"m"}).as_object().unwrap().clone(),
        }));
        assert_eq!(s.text, "{\"model\":\"m\"}");
    }
}
