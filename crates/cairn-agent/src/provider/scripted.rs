//! The scripted provider: replies replayed from a JSON file, for offline
//! runs, the demo and tests. Which reply answers a request is a pure
//! function of the request — like everything in cairn, derived, not
//! remembered — so a process that crashed and resumed gets the same reply
//! at the same point of the conversation.
//!
//! # Format
//!
//! ```json
//! {
//!   "model": "storyboard-model",
//!   "chunk_chars": 12,
//!   "chunk_delay_ms": 0,
//!   "summary": "Panels 1 and 2 are drawn; the hero is powered up.",
//!   "turns": [
//!     { "match": "panel 1",
//!       "replies": [
//!         { "text": "Setting the state, then rendering.",
//!           "tool_calls": [
//!             { "name": "set_state", "arguments": { "patch": { "buff": "power-up" } } },
//!             { "name": "render_panel", "arguments": { "panel": 1, "scene": "…" } } ] },
//!         { "text": "Panel 1 is done." } ] },
//!     { "replies": [ { "text": "I have nothing scripted for that." } ] }
//!   ]
//! }
//! ```
//!
//! - **Turn**: the first turn whose `match` (case-insensitive substring)
//!   occurs in the request's last user message (its text, not tool
//!   results); a turn without `match` matches anything.
//! - **Reply**: the turn's `replies[n]`, where `n` is the number of assistant
//!   messages after that user message in the request (0 for the first model
//!   call of the turn, 1 after the first round of tool results, …). Past the
//!   end: a short text saying the script has nothing more, `end_turn`.
//! - A reply has `text`, optional `thinking`, `tool_calls` (`name`,
//!   `arguments`, optional `id`: when absent the id is derived from the
//!   preallocated assistant entry id, so it is unique in the session),
//!   optional `stop_reason` (default `tool_use` with calls, else
//!   `end_turn`), optional `usage` (`input`/`output`/`cached`; default: the
//!   view's estimated tokens), optional `delay_ms` before streaming, and
//!   optional `error` (`{"status": 503, "message": "…", "times": 1}`: the
//!   first `times` requests for this reply in this process fail with that
//!   HTTP status — or, without `status`, with a dropped connection).
//! - `chunk_chars` / `chunk_delay_ms`: the text streams in pieces of that
//!   many characters with that pause between them (defaults 16 and 0).
//! - `summary`: the text of compaction summaries (default: a summary listing
//!   the requests of the summarised part).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use cairn::view::{estimate_message, estimate_text};
use cairn::{Message, Role, Usage};
use serde::Deserialize;
use serde_json::Value;

use super::{
    ChatRequest, Exchange, Provider, ProviderError, Purpose, Reply, ReplyCall, StreamEvent,
};

/// A script (see the module docs for the format).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The model name to report.
    #[serde(default)]
    pub model: Option<String>,
    /// Characters per streamed text piece.
    #[serde(default)]
    pub chunk_chars: Option<usize>,
    /// Pause between pieces, in milliseconds.
    #[serde(default)]
    pub chunk_delay_ms: Option<u64>,
    /// The text of compaction summaries.
    #[serde(default)]
    pub summary: Option<String>,
    /// The turns.
    pub turns: Vec<Turn>,
}

/// The replies to one kind of user message.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// A case-insensitive substring of the user message (none: any).
    #[serde(default, rename = "match")]
    pub matches: Option<String>,
    /// The replies, in order.
    pub replies: Vec<ScriptReply>,
}

/// One scripted reply.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptReply {
    /// The text.
    #[serde(default)]
    pub text: String,
    /// Reasoning.
    #[serde(default)]
    pub thinking: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Vec<ScriptCall>,
    /// The stop reason.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Usage to report.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// A pause before streaming, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// Fail the first requests.
    #[serde(default)]
    pub error: Option<ScriptError>,
}

/// A scripted tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    /// The call id (derived from the reply's entry id when absent).
    #[serde(default)]
    pub id: Option<String>,
    /// The tool.
    pub name: String,
    /// The arguments.
    #[serde(default)]
    pub arguments: Value,
}

/// A scripted failure.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptError {
    /// The HTTP status (none: a dropped connection).
    #[serde(default)]
    pub status: Option<u16>,
    /// The message.
    #[serde(default)]
    pub message: String,
    /// How many requests fail (default 1).
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

/// Replays a [`Script`].
#[derive(Debug)]
pub struct ScriptedProvider {
    script: Script,
    model: String,
    failures: Mutex<HashMap<(usize, usize), u32>>,
}

impl ScriptedProvider {
    /// A provider for `script`.
    pub fn new(script: Script) -> ScriptedProvider {
        let model = script.model.clone().unwrap_or_else(|| "scripted".into());
        ScriptedProvider {
            script,
            model,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Loads a script file.
    ///
    /// # Errors
    ///
    /// [`ProviderError::Config`] when the file cannot be read or is not a script.
    pub fn load(path: &Path) -> Result<ScriptedProvider, ProviderError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ProviderError::Config(format!("cannot read the script {}: {e}", path.display()))
        })?;
        ScriptedProvider::parse(&text).map_err(|e| match e {
            ProviderError::Config(m) => ProviderError::Config(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parses a script.
    ///
    /// # Errors
    ///
    /// [`ProviderError::Config`] when the text is not a script.
    pub fn parse(text: &str) -> Result<ScriptedProvider, ProviderError> {
        let script: Script = serde_json::from_str(text).map_err(|e| {
            ProviderError::Config(format!(
                "not a valid script ({e}); see the format in the cairn-agent README"
            ))
        })?;
        Ok(ScriptedProvider::new(script))
    }

    fn pick(&self, messages: &[Message]) -> Option<(usize, usize, &ScriptReply)> {
        let user_pos = messages
            .iter()
            .rposition(|m| m.role == Role::User && m.tool_results().next().is_none())?;
        let said = messages[user_pos].plain_text().to_lowercase();
        let (t, turn) = self.script.turns.iter().enumerate().find(|(_, t)| {
            t.matches
                .as_ref()
                .is_none_or(|m| said.contains(&m.to_lowercase()))
        })?;
        let n = messages[user_pos..]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        turn.replies.get(n).map(|r| (t, n, r))
    }

    fn summary(&self, messages: &[Message]) -> String {
        if let Some(s) = &self.script.summary {
            return s.clone();
        }
        let asked: Vec<String> = messages
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| cairn::excerpt(&m.plain_text(), 60))
            .filter(|t| !t.is_empty())
            .collect();
        format!(
            "Summary of the earlier conversation. The person asked: {}.",
            asked.join("; ")
        )
    }

    fn stream_text(
        &self,
        text: &str,
        event: fn(String) -> StreamEvent,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> Result<(), ProviderError> {
        let size = self.script.chunk_chars.unwrap_or(16).max(1);
        let pause = Duration::from_millis(self.script.chunk_delay_ms.unwrap_or(0));
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(size) {
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
            if !on_event(event(piece.iter().collect())) {
                return Err(ProviderError::Cancelled);
            }
        }
        Ok(())
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    /// The exchange of a scripted reply: the request as the OpenAI wire
    /// format would carry it, and the reply (or the error) as JSON. No
    /// credentials are involved.
    fn stream_traced(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> (Result<Reply, ProviderError>, Option<Exchange>) {
        let started = std::time::Instant::now();
        let result = self.stream(request, on_event);
        let body = serde_json::json!({
            "model": self.model,
            "messages": super::openai::wire_messages(&request.messages),
            "tools": request.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        });
        let response = match &result {
            Ok(r) => serde_json::json!({
                "text": r.text,
                "tool_calls": r.tool_calls.iter().map(|c| serde_json::json!({"id": c.id, "name": c.name, "arguments": c.arguments})).collect::<Vec<_>>(),
                "stop_reason": r.stop_reason,
                "usage": r.usage,
            }),
            Err(e) => serde_json::json!({"error": e.to_string()}),
        };
        let exchange = Exchange {
            method: "SCRIPT".into(),
            url: format!("scripted:{}", self.model),
            request_body: body.to_string().into_bytes(),
            status: Some(if result.is_ok() { 200 } else { 500 }),
            response_body: response.to_string().into_bytes(),
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            ..Exchange::default()
        };
        (result, Some(exchange))
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn stream(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> Result<Reply, ProviderError> {
        let input: u64 = request
            .messages
            .iter()
            .map(|m| estimate_message(m) as u64)
            .sum();
        if request.purpose == Purpose::Summary {
            let text = self.summary(&request.messages);
            self.stream_text(&text, StreamEvent::Text, on_event)?;
            let output = estimate_text(&text) as u64;
            return Ok(Reply {
                text,
                usage: Some(Usage {
                    input,
                    output,
                    cached: 0,
                    cost: None,
                }),
                stop_reason: Some("end_turn".into()),
                model: Some(self.model.clone()),
                ..Reply::default()
            });
        }
        let Some((t, n, reply)) = self.pick(&request.messages) else {
            let text = "(The script has no reply for this point of the conversation.)".to_owned();
            self.stream_text(&text, StreamEvent::Text, on_event)?;
            return Ok(Reply {
                text,
                stop_reason: Some("end_turn".into()),
                model: Some(self.model.clone()),
                ..Reply::default()
            });
        };
        if let Some(err) = &reply.error {
            let mut failures = self
                .failures
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let count = failures.entry((t, n)).or_insert(0);
            if *count < err.times {
                *count += 1;
                return Err(match err.status {
                    Some(status) => ProviderError::Http {
                        status,
                        message: err.message.clone(),
                        retry_after: None,
                    },
                    None => ProviderError::Connection(format!(
                        "scripted dropped connection: {}",
                        err.message
                    )),
                });
            }
        }
        if reply.delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(reply.delay_ms));
        }
        if let Some(th) = &reply.thinking {
            self.stream_text(th, StreamEvent::Thinking, on_event)?;
        }
        self.stream_text(&reply.text, StreamEvent::Text, on_event)?;
        let prefix = request
            .reply_id
            .clone()
            .unwrap_or_else(|| format!("t{t}r{n}"));
        let mut tool_calls = Vec::new();
        for (i, c) in reply.tool_calls.iter().enumerate() {
            if !on_event(StreamEvent::ToolCall {
                name: c.name.clone(),
            }) {
                return Err(ProviderError::Cancelled);
            }
            let id =
                c.id.clone()
                    .unwrap_or_else(|| format!("call-{prefix}-{}", i + 1));
            tool_calls.push(ReplyCall {
                id,
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            });
        }
        let output = estimate_text(&reply.text) as u64
            + tool_calls
                .iter()
                .map(|c| estimate_text(&c.arguments.to_string()) as u64)
                .sum::<u64>();
        let stop = reply.stop_reason.clone().unwrap_or_else(|| {
            if tool_calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            }
            .into()
        });
        Ok(Reply {
            text: reply.text.clone(),
            thinking: reply.thinking.clone().unwrap_or_default(),
            tool_calls,
            usage: Some(reply.usage.clone().unwrap_or(Usage {
                input,
                output,
                cached: 0,
                cost: None,
            })),
            stop_reason: Some(stop),
            model: Some(self.model.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            messages,
            tools: vec![],
            purpose: Purpose::Turn,
            reply_id: Some("e1".into()),
        }
    }

    #[test]
    fn the_reply_is_chosen_by_turn_and_position() {
        let p = ScriptedProvider::parse(
            &json!({"turns": [
                {"match": "Panel 1", "replies": [{"text": "first", "tool_calls": [{"name": "x"}]}, {"text": "second"}]},
                {"replies": [{"text": "fallback"}]}
            ]})
            .to_string(),
        )
        .unwrap();
        let user = Message::text(Role::User, "draw panel 1 please");
        let r = p.stream(&req(vec![user.clone()]), &mut |_| true).unwrap();
        assert_eq!(r.text, "first");
        assert_eq!(r.tool_calls[0].id, "call-e1-1");
        let r = p
            .stream(
                &req(vec![user, Message::text(Role::Assistant, "first")]),
                &mut |_| true,
            )
            .unwrap();
        assert_eq!(r.text, "second");
        let r = p
            .stream(&req(vec![Message::text(Role::User, "other")]), &mut |_| {
                true
            })
            .unwrap();
        assert_eq!(r.text, "fallback");
    }

    #[test]
    fn scripted_errors_fail_the_first_requests_only() {
        let p = ScriptedProvider::parse(&json!({"turns": [{"replies": [{"text": "ok", "error": {"status": 503, "times": 2}}]}]}).to_string()).unwrap();
        let r = req(vec![Message::text(Role::User, "hi")]);
        assert!(p.stream(&r, &mut |_| true).unwrap_err().is_transient());
        assert!(p.stream(&r, &mut |_| true).is_err());
        assert_eq!(p.stream(&r, &mut |_| true).unwrap().text, "ok");
    }

    #[test]
    fn a_bad_script_is_a_config_error() {
        assert!(matches!(
            ScriptedProvider::parse("{\"turns\": 3}"),
            Err(ProviderError::Config(_))
        ));
        assert!(matches!(
            ScriptedProvider::parse("{\"turns\": [], \"typo\": 1}"),
            Err(ProviderError::Config(_))
        ));
    }
}
