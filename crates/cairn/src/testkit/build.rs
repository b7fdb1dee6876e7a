//! Builders of the entries tests append: messages, tool calls and results.
//!
//! ```
//! use cairn::testkit::build::{assistant, user};
//!
//! let s = cairn::Session::create(&cairn::MemoryBackend::new(), Default::default())?;
//! s.append(user("list the files"))?;
//! s.append(assistant("a, b, c"))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use serde_json::Value;

use crate::record::{Block, EntryBody, Message, Role};

/// A user message of one text block.
pub fn user(text: &str) -> EntryBody {
    EntryBody::Message(Message::text(Role::User, text))
}

/// An assistant message of one text block.
pub fn assistant(text: &str) -> EntryBody {
    EntryBody::Message(Message::text(Role::Assistant, text))
}

/// An assistant message asking for the given tool calls (`call_id`, tool
/// name, arguments), with stop reason `tool_use`.
pub fn calls(text: &str, calls: &[(&str, &str, Value)]) -> Message {
    let mut m = Message::text(Role::Assistant, text);
    for (call_id, name, arguments) in calls {
        m.content.push(Block::ToolCall {
            call_id: (*call_id).to_owned(),
            name: (*name).to_owned(),
            arguments: arguments.clone(),
        });
    }
    m.stop_reason = Some("tool_use".into());
    m
}

/// A tool message answering each `(call_id, text)` successfully with its text.
pub fn tool_results(answers: &[(&str, &str)]) -> EntryBody {
    let content = answers
        .iter()
        .map(|(call_id, text)| Block::ToolResult {
            call_id: (*call_id).to_owned(),
            content: vec![Block::Text {
                text: (*text).to_owned(),
            }],
            is_error: false,
            code: None,
        })
        .collect();
    EntryBody::Message(Message {
        role: Role::Tool,
        content,
        usage: None,
        model: None,
        stop_reason: None,
    })
}

/// A tool message answering `call_id` successfully with `text`.
pub fn tool_result(call_id: &str, text: &str) -> EntryBody {
    tool_results(&[(call_id, text)])
}
