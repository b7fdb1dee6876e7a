//! The Chat Completions streaming protocol, without I/O: [`SseDecoder`]
//! turns lines of a `text/event-stream` body into event payloads, and
//! [`Assembler`] folds the `chat.completion.chunk` payloads into a
//! [`Reply`] — text deltas, reasoning deltas, tool calls whose id, name and
//! argument fragments arrive across many chunks, the finish reason and the
//! usage chunk (`stream_options.include_usage`). Anything unexpected is a
//! [`ProviderError`], never a panic.

use std::collections::BTreeMap;

use cairn::Usage;
use serde_json::Value;

use super::{ProviderError, Reply, ReplyCall, StreamEvent};

/// Splits an event stream into event payloads (the `data:` lines of one
/// event joined with newlines). Comments, `event:`, `id:` and `retry:`
/// lines are ignored.
#[derive(Debug, Default)]
pub struct SseDecoder {
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Feeds one line (without or with its line ending); returns a payload
    /// when the line ends an event.
    pub fn push_line(&mut self, line: &str) -> Option<String> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            return self.take();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if field == "data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(value);
            self.has_data = true;
        }
        None
    }

    /// The payload of an event the stream ended without a blank line after.
    pub fn finish(&mut self) -> Option<String> {
        self.take()
    }

    fn take(&mut self) -> Option<String> {
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(std::mem::take(&mut self.data))
    }
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Folds chunk payloads into a reply.
#[derive(Debug, Default)]
pub struct Assembler {
    text: String,
    thinking: String,
    calls: BTreeMap<usize, PartialCall>,
    usage: Option<Usage>,
    finish: Option<String>,
    model: Option<String>,
    done: bool,
    id_prefix: String,
}

/// Whether the stream goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    More,
    /// `[DONE]` arrived.
    Done,
}

impl Assembler {
    /// An assembler; `id_prefix` names tool calls a server sends without an id.
    pub fn new(id_prefix: &str) -> Assembler {
        Assembler {
            id_prefix: id_prefix.to_owned(),
            ..Assembler::default()
        }
    }

    /// Applies one payload; `on_event` sees the deltas and returns `false` to stop.
    ///
    /// # Errors
    ///
    /// [`ProviderError::Malformed`] for a payload that is not a chunk,
    /// [`ProviderError::Api`] for an error object in the stream,
    /// [`ProviderError::Cancelled`] when `on_event` stops.
    pub fn apply(
        &mut self,
        payload: &str,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> Result<Flow, ProviderError> {
        let payload = payload.trim();
        if payload == "[DONE]" {
            self.done = true;
            return Ok(Flow::Done);
        }
        if payload.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: Value = serde_json::from_str(payload).map_err(|e| {
            ProviderError::Malformed(format!(
                "a stream event is not JSON ({e}): {}",
                cut(payload)
            ))
        })?;
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(ProviderError::Api(error_message(err)));
        }
        if !chunk.is_object() {
            return Err(ProviderError::Malformed(format!(
                "a stream event is not an object: {}",
                cut(payload)
            )));
        }
        if let Some(m) = chunk.get("model").and_then(Value::as_str) {
            self.model = Some(m.to_owned());
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(parse_usage(u));
        }
        let choices = match chunk.get("choices") {
            None | Some(Value::Null) => return Ok(Flow::More),
            Some(Value::Array(c)) => c,
            Some(_) => {
                return Err(ProviderError::Malformed(format!(
                    "`choices` is not an array: {}",
                    cut(payload)
                )));
            }
        };
        for choice in choices {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(r.to_owned());
            }
            let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) else {
                continue;
            };
            if let Some(t) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                self.text.push_str(t);
                if !on_event(StreamEvent::Text(t.to_owned())) {
                    return Err(ProviderError::Cancelled);
                }
            }
            let reasoning = delta
                .get("reasoning_content")
                .or_else(|| delta.get("reasoning"))
                .and_then(Value::as_str);
            if let Some(t) = reasoning.filter(|t| !t.is_empty()) {
                self.thinking.push_str(t);
                if !on_event(StreamEvent::Thinking(t.to_owned())) {
                    return Err(ProviderError::Cancelled);
                }
            }
            match delta.get("tool_calls") {
                None | Some(Value::Null) => {}
                Some(Value::Array(calls)) => {
                    for (pos, c) in calls.iter().enumerate() {
                        self.apply_call(pos, c, on_event)?;
                    }
                }
                Some(_) => {
                    return Err(ProviderError::Malformed(
                        "`tool_calls` is not an array".into(),
                    ));
                }
            }
        }
        Ok(Flow::More)
    }

    fn apply_call(
        &mut self,
        pos: usize,
        c: &Value,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> Result<(), ProviderError> {
        let mut index = c
            .get("index")
            .and_then(Value::as_u64)
            .map_or(pos, |i| i as usize);
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        // A server that numbers every call 0 starts a new one with a new id.
        if let (Some(id), Some(existing)) = (id, self.calls.get(&index))
            && existing.id.as_deref().is_some_and(|e| e != id)
        {
            index = self
                .calls
                .keys()
                .next_back()
                .map_or(0, |k| k.saturating_add(1));
        }
        let f = c.get("function").unwrap_or(&Value::Null);
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let args = match f.get("arguments") {
            Some(Value::String(s)) => Some(s.clone()),
            None | Some(Value::Null) => None,
            // Some servers send the arguments as an object.
            Some(other) => Some(other.to_string()),
        };
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id {
            call.id = Some(id.to_owned());
        }
        if let Some(n) = name {
            let first = call.name.is_empty();
            call.name.push_str(n);
            if first && !on_event(StreamEvent::ToolCall { name: n.to_owned() }) {
                return Err(ProviderError::Cancelled);
            }
        }
        if let Some(a) = args {
            call.arguments.push_str(&a);
        }
        Ok(())
    }

    /// Whether the reply is complete (`[DONE]` or a finish reason seen).
    pub fn is_complete(&self) -> bool {
        self.done || self.finish.is_some()
    }

    /// The reply.
    ///
    /// # Errors
    ///
    /// [`ProviderError::Incomplete`] when the stream ended before `[DONE]`
    /// and before a finish reason; [`ProviderError::Malformed`] for a tool
    /// call without a name.
    pub fn finish(self) -> Result<Reply, ProviderError> {
        if !self.is_complete() {
            let got = if self.text.is_empty() && self.calls.is_empty() {
                "nothing".to_owned()
            } else {
                format!(
                    "{} characters and {} tool call(s)",
                    self.text.chars().count(),
                    self.calls.len()
                )
            };
            return Err(ProviderError::Incomplete(format!(
                "the stream ended before the reply was complete (received {got}, no finish reason, no [DONE])"
            )));
        }
        let mut tool_calls = Vec::new();
        for (i, c) in self.calls {
            if c.name.is_empty() {
                return Err(ProviderError::Malformed(format!(
                    "tool call #{i} has no name"
                )));
            }
            let arguments = parse_arguments(&c.arguments);
            let id = c.id.unwrap_or_else(|| format!("{}-{i}", self.id_prefix));
            tool_calls.push(ReplyCall {
                id,
                name: c.name,
                arguments,
            });
        }
        let stop_reason = self.finish.map(|r| map_finish(&r)).or_else(|| {
            Some(
                if tool_calls.is_empty() {
                    "end_turn"
                } else {
                    "tool_use"
                }
                .to_owned(),
            )
        });
        Ok(Reply {
            text: self.text,
            thinking: self.thinking,
            tool_calls,
            usage: self.usage,
            stop_reason,
            model: self.model,
        })
    }
}

/// Arguments text as JSON: `{}` when empty, the raw text as a string when
/// it does not parse.
pub fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// An OpenAI finish reason in cairn's words.
pub fn map_finish(reason: &str) -> String {
    match reason {
        "stop" => "end_turn".into(),
        "tool_calls" | "function_call" => "tool_use".into(),
        "length" => "max_tokens".into(),
        other => other.to_owned(),
    }
}

/// Usage from an OpenAI `usage` object.
pub fn parse_usage(u: &Value) -> Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input: n(u.get("prompt_tokens")),
        output: n(u.get("completion_tokens")),
        cached: n(u
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"))),
        cost: None,
    }
}

/// The message of an OpenAI error object (or the value as text).
pub fn error_message(err: &Value) -> String {
    match err {
        Value::String(s) => cut(s),
        Value::Object(o) => match o.get("message").and_then(Value::as_str) {
            Some(m) => cut(m),
            None => cut(&err.to_string()),
        },
        other => cut(&other.to_string()),
    }
}

/// At most 300 characters of `s`, for messages.
pub fn cut(s: &str) -> String {
    let mut out: String = s.chars().take(300).collect();
    if s.chars().count() > 300 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn feed(lines: &[&str]) -> Result<Reply, ProviderError> {
        let mut d = SseDecoder::new();
        let mut a = Assembler::new("call");
        let mut events = Vec::new();
        for l in lines {
            if let Some(p) = d.push_line(l)
                && a.apply(&p, &mut |e| {
                    events.push(e);
                    true
                })? == Flow::Done
            {
                break;
            }
        }
        a.finish()
    }

    #[test]
    fn tool_call_arguments_split_across_chunks_are_joined() {
        let r = feed(&[
            r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#,
            "",
            ": keep-alive",
            r#"data: {"choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
            "",
            r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"pa"}}]}}]}"#,
            "",
            r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\": \"a.txt\"}"}}]}}]}"#,
            "",
            r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "",
            r#"data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            "",
            "data: [DONE]",
            "",
        ])
        .unwrap();
        assert_eq!(r.text, "Hello");
        assert_eq!(
            r.tool_calls,
            vec![ReplyCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: json!({"path": "a.txt"})
            }]
        );
        assert_eq!(r.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(
            r.usage,
            Some(Usage {
                input: 12,
                output: 5,
                cached: 4,
                cost: None
            })
        );
    }

    #[test]
    fn a_stream_cut_before_the_end_is_incomplete() {
        let e = feed(&[
            r#"data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            "",
        ])
        .unwrap_err();
        assert!(matches!(e, ProviderError::Incomplete(_)), "{e}");
        assert!(e.is_transient());
    }

    #[test]
    fn garbage_and_error_events_are_errors_not_panics() {
        let e = feed(&["data: {not json", ""]).unwrap_err();
        assert!(matches!(e, ProviderError::Malformed(_)), "{e}");
        let e = feed(&[r#"data: {"error":{"message":"overloaded"}}"#, ""]).unwrap_err();
        assert_eq!(e, ProviderError::Api("overloaded".into()));
        let e = feed(&[r#"data: {"choices":"x"}"#, ""]).unwrap_err();
        assert!(matches!(e, ProviderError::Malformed(_)));
        let e = feed(&[r#"data: [1,2]"#, ""]).unwrap_err();
        assert!(matches!(e, ProviderError::Malformed(_)));
    }

    #[test]
    fn multi_line_data_and_unparseable_arguments_are_kept() {
        let mut d = SseDecoder::new();
        assert_eq!(d.push_line("data: a\r\n"), None);
        assert_eq!(d.push_line("data: b\n"), None);
        assert_eq!(d.push_line("\n"), Some("a\nb".into()));
        assert_eq!(parse_arguments("{oops"), Value::String("{oops".into()));
        assert_eq!(parse_arguments(""), json!({}));
    }

    #[test]
    fn servers_that_number_every_call_zero_still_give_separate_calls() {
        let r = feed(&[
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{}"}}]}}]}"#,
            "",
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"y","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
            "",
        ])
        .unwrap();
        let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["x", "y"]);
    }
}
