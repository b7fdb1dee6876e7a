//! An OpenAI-compatible Chat Completions client (`POST {base}/chat/completions`
//! with `stream: true` and `stream_options.include_usage`), blocking, on
//! `ureq` with rustls. Works with hosted APIs and with vLLM, llama.cpp's
//! server and Ollama (`http://localhost:11434/v1`). A server that answers a
//! streaming request with a plain JSON completion is understood too.
//!
//! Messages map to the wire format as follows: system and developer
//! messages (the session memory is one) become `system` messages, which
//! every compatible server accepts; assistant messages carry their text and
//! `tool_calls`; each tool result becomes a `tool` message; blob references
//! are named in text; thinking is not sent back.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Read};
use std::rc::Rc;
use std::time::Duration;

use cairn::{Block, Message, Role};
use serde_json::{Value, json};

use super::sse::{
    Assembler, Flow, SseDecoder, cut, error_message, map_finish, parse_arguments, parse_usage,
};
use super::{
    ChatRequest, Exchange, Provider, ProviderError, Reply, ReplyCall, StreamEvent, result_text,
};

/// The environment variables a key is read from, in order.
pub const KEY_VARS: [&str; 2] = ["CAIRN_API_KEY", "OPENAI_API_KEY"];

/// The default endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How to reach the server.
#[derive(Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The API base, e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`.
    pub base_url: String,
    /// The model name the server knows.
    pub model: String,
    /// The bearer token, if the server needs one.
    pub api_key: Option<String>,
    /// Longest wait to connect.
    pub connect_timeout: Duration,
    /// Longest silence while waiting for the response or the next piece of it.
    pub read_timeout: Duration,
    /// Ask for a usage chunk at the end of the stream.
    pub include_usage: bool,
    /// `max_tokens` to send, if any.
    pub max_tokens: Option<u32>,
    /// Largest response body accepted, in bytes.
    pub max_body_bytes: u64,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .finish_non_exhaustive()
    }
}

impl OpenAiConfig {
    /// A configuration with default timeouts (connect 15 s, silence 120 s)
    /// and the key from the environment.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: key_from_env(),
            connect_timeout: Duration::from_secs(15),
            read_timeout: Duration::from_secs(120),
            include_usage: true,
            max_tokens: None,
            max_body_bytes: 64 << 20,
        }
    }

    /// The completions URL.
    pub fn url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/chat/completions") {
            base.to_owned()
        } else {
            format!("{base}/chat/completions")
        }
    }
}

/// The API key from `CAIRN_API_KEY`, else `OPENAI_API_KEY` (non-empty).
pub fn key_from_env() -> Option<String> {
    KEY_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|k| !k.trim().is_empty()))
}

/// The OpenAI-compatible provider.
#[derive(Debug)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    agent: ureq::Agent,
}

impl OpenAiProvider {
    /// A provider for `config`.
    ///
    /// # Errors
    ///
    /// [`ProviderError::Config`] for a base URL that is not http(s).
    pub fn new(config: OpenAiConfig) -> Result<OpenAiProvider, ProviderError> {
        let url = config.url();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ProviderError::Config(format!(
                "the base URL must start with http:// or https://, not {:?}",
                config.base_url
            )));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(config.connect_timeout))
            .timeout_recv_response(Some(config.read_timeout))
            .timeout_per_read(Some(config.read_timeout))
            .user_agent(concat!("cairn-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(OpenAiProvider { config, agent })
    }

    /// Its configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The JSON body for `request`.
    pub fn body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": wire_messages(&request.messages),
            "stream": true,
        });
        if self.config.include_usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(n) = self.config.max_tokens {
            body["max_tokens"] = json!(n);
        }
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(
                request
                    .tools
                    .iter()
                    .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                    .collect(),
            );
        }
        body
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai-compatible"
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    fn stream(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> Result<Reply, ProviderError> {
        self.send(request, on_event, None)
            .map_err(|e| e.redacted(self.config.api_key.as_deref()))
    }

    fn stream_traced(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> (Result<Reply, ProviderError>, Option<Exchange>) {
        let mut exchange = Exchange::default();
        let key = self.config.api_key.as_deref();
        let result = self
            .send(request, on_event, Some(&mut exchange))
            .map_err(|e| e.redacted(key));
        exchange.redact(key);
        (result, Some(exchange))
    }
}

impl OpenAiProvider {
    /// One request: sends it and reads the reply; fills `trace` (unredacted)
    /// with what went over the wire when given.
    fn send(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
        mut trace: Option<&mut Exchange>,
    ) -> Result<Reply, ProviderError> {
        let started = std::time::Instant::now();
        let ms = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let body = self.body(request).to_string();
        let mut headers: Vec<(&str, String)> = vec![
            ("Content-Type", "application/json".into()),
            ("Accept", "text/event-stream".into()),
        ];
        if let Some(key) = &self.config.api_key {
            headers.push(("Authorization", format!("Bearer {key}")));
        }
        if let Some(t) = trace.as_deref_mut() {
            t.method = "POST".into();
            t.url = self.config.url();
            t.request_headers = headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.clone()))
                .collect();
            t.request_body = body.clone().into_bytes();
        }
        let mut req = self.agent.post(self.config.url());
        for (name, value) in &headers {
            req = req.header(*name, value);
        }
        let sent = req.send(body).map_err(from_ureq);
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                if let Some(t) = trace {
                    t.duration_ms = ms();
                }
                return Err(e);
            }
        };
        let status = resp.status().as_u16();
        if let Some(t) = trace.as_deref_mut() {
            t.status = Some(status);
            t.headers_ms = Some(ms());
            t.response_headers = resp
                .headers()
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
        }
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let json_body = header("content-type").is_some_and(|c| c.contains("json"));
        let copy = trace.is_some().then(|| Rc::new(RefCell::new(Vec::new())));
        let reader = Tee {
            inner: resp
                .into_body()
                .into_with_config()
                .limit(self.config.max_body_bytes)
                .reader(),
            copy: copy.clone(),
        };
        let result = read_reply(reader, status, retry_after, json_body, request, on_event);
        if let (Some(t), Some(copy)) = (trace, copy) {
            t.response_body = copy.take();
            t.duration_ms = ms();
        }
        result
    }
}

/// A reader that keeps a copy of what it reads (for the trace).
struct Tee<R> {
    inner: R,
    copy: Option<Rc<RefCell<Vec<u8>>>>,
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(c) = &self.copy {
            c.borrow_mut().extend_from_slice(&buf[..n]);
        }
        Ok(n)
    }
}

/// Reads a response: an error for a status of 400 or more, else a JSON
/// completion or an event stream.
fn read_reply(
    reader: impl Read,
    status: u16,
    retry_after: Option<Duration>,
    json_body: bool,
    request: &ChatRequest,
    on_event: &mut dyn FnMut(StreamEvent) -> bool,
) -> Result<Reply, ProviderError> {
    let prefix = request.reply_id.clone().unwrap_or_else(|| "call".into());
    if status >= 400 {
        let mut text = String::new();
        let _ = reader.take(64 << 10).read_to_string(&mut text);
        let message = match serde_json::from_str::<Value>(&text) {
            Ok(v) => v
                .get("error")
                .map_or_else(|| cut(&v.to_string()), error_message),
            Err(_) if text.trim().is_empty() => "(no body)".to_owned(),
            Err(_) => cut(text.trim()),
        };
        return Err(ProviderError::Http {
            status,
            message,
            retry_after,
        });
    }
    if json_body {
        let mut text = String::new();
        BufReader::new(reader)
            .read_to_string(&mut text)
            .map_err(from_io)?;
        return parse_completion(&text, &prefix, on_event);
    }
    read_stream(BufReader::new(reader), &prefix, on_event)
}

/// Reads an event stream to its end and assembles the reply.
///
/// # Errors
///
/// As [`Assembler::apply`] and [`Assembler::finish`]; I/O errors as
/// [`ProviderError::Connection`] or [`ProviderError::Timeout`].
pub fn read_stream(
    mut reader: impl BufRead,
    id_prefix: &str,
    on_event: &mut dyn FnMut(StreamEvent) -> bool,
) -> Result<Reply, ProviderError> {
    let mut decoder = SseDecoder::new();
    let mut asm = Assembler::new(id_prefix);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = match reader.read_until(b'\n', &mut line) {
            Ok(n) => n,
            // A connection that breaks after the reply completed lost nothing.
            Err(_) if asm.is_complete() => break,
            Err(e) => return Err(from_io(e)),
        };
        if n == 0 {
            if let Some(p) = decoder.finish() {
                asm.apply(&p, on_event)?;
            }
            break;
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(p) = decoder.push_line(&text)
            && asm.apply(&p, on_event)? == Flow::Done
        {
            break;
        }
    }
    asm.finish()
}

/// Parses a non-streamed completion (`choices[0].message`).
///
/// # Errors
///
/// [`ProviderError::Malformed`] or [`ProviderError::Api`].
pub fn parse_completion(
    text: &str,
    id_prefix: &str,
    on_event: &mut dyn FnMut(StreamEvent) -> bool,
) -> Result<Reply, ProviderError> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        ProviderError::Malformed(format!("the response is not JSON ({e}): {}", cut(text)))
    })?;
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(ProviderError::Api(error_message(err)));
    }
    let choice = v.get("choices").and_then(|c| c.get(0)).ok_or_else(|| {
        ProviderError::Malformed(format!("the response has no choices: {}", cut(text)))
    })?;
    let message = choice.get("message").unwrap_or(&Value::Null);
    let text_out = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if !text_out.is_empty() && !on_event(StreamEvent::Text(text_out.clone())) {
        return Err(ProviderError::Cancelled);
    }
    let mut tool_calls = Vec::new();
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for (i, c) in calls.iter().enumerate() {
            let f = c.get("function").unwrap_or(&Value::Null);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| ProviderError::Malformed(format!("tool call #{i} has no name")))?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => parse_arguments(s),
                Some(other) if !other.is_null() => other.clone(),
                _ => json!({}),
            };
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("{id_prefix}-{i}"), str::to_owned);
            tool_calls.push(ReplyCall {
                id,
                name: name.to_owned(),
                arguments,
            });
        }
    }
    let stop_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(map_finish);
    Ok(Reply {
        text: text_out,
        thinking: String::new(),
        tool_calls,
        usage: v.get("usage").filter(|u| u.is_object()).map(parse_usage),
        stop_reason,
        model: v.get("model").and_then(Value::as_str).map(str::to_owned),
    })
}

/// The wire form of the view's messages. Consecutive system messages (the
/// system prompt and the memory) are merged, and so are consecutive plain
/// user messages: some servers' chat templates accept one system message
/// and require user and assistant turns to alternate.
pub fn wire_messages(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for m in messages {
        match m.role {
            Role::System | Role::Developer => push_merged(&mut out, "system", m.plain_text()),
            Role::User => {
                let images: Vec<&Block> = m
                    .content
                    .iter()
                    .filter(|b| matches!(b, Block::Image { .. }))
                    .collect();
                if images.is_empty() {
                    let text = user_text(m);
                    if !text.is_empty() {
                        push_merged(&mut out, "user", text);
                    }
                } else {
                    let mut parts = vec![json!({"type": "text", "text": user_text(m)})];
                    for b in images {
                        if let Block::Image { media_type, data } = b {
                            parts.push(json!({"type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}}));
                        }
                    }
                    out.push(json!({"role": "user", "content": parts}));
                }
                push_results(m, &mut out);
            }
            Role::Assistant => {
                let text = m.plain_text();
                let calls: Vec<Value> = m
                    .tool_calls()
                    .map(|(id, name, args)| {
                        let arguments = match args {
                            Value::String(raw) => raw.clone(),
                            other => other.to_string(),
                        };
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                    })
                    .collect();
                if text.is_empty() && calls.is_empty() {
                    // An interrupted reply with no output: nothing to send.
                    continue;
                }
                let mut v = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
                if !calls.is_empty() {
                    v["tool_calls"] = Value::Array(calls);
                }
                out.push(v);
            }
            Role::Tool => push_results(m, &mut out),
        }
    }
    out
}

/// Appends a plain text message, merged into the previous one when it has
/// the same role and plain text content.
fn push_merged(out: &mut Vec<Value>, role: &str, text: String) {
    if let Some(last) = out.last_mut()
        && last["role"] == role
        && last.get("tool_calls").is_none()
        && let Some(prev) = last["content"].as_str()
    {
        last["content"] = Value::String(format!("{prev}\n\n{text}"));
        return;
    }
    out.push(json!({"role": role, "content": text}));
}

fn user_text(m: &Message) -> String {
    let mut text = String::new();
    for b in &m.content {
        let piece = match b {
            Block::Text { text } => text.clone(),
            Block::Blob { .. } => result_text(std::slice::from_ref(b)),
            Block::Thinking { .. }
            | Block::ToolCall { .. }
            | Block::ToolResult { .. }
            | Block::Image { .. } => continue,
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&piece);
    }
    text
}

fn push_results(m: &Message, out: &mut Vec<Value>) {
    for b in &m.content {
        if let Block::ToolResult {
            call_id,
            content,
            is_error,
            code,
        } = b
        {
            let mut text = result_text(content);
            if text.is_empty() {
                text = "(no output)".into();
            }
            if *is_error {
                text = match code {
                    Some(c) => format!("[error {c}] {text}"),
                    None => format!("[error] {text}"),
                };
            }
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": text}));
        }
    }
}

fn from_ureq(e: ureq::Error) -> ProviderError {
    match e {
        ureq::Error::Timeout(t) => ProviderError::Timeout(t.to_string()),
        ureq::Error::Io(io) => from_io(io),
        ureq::Error::BadUri(u) => ProviderError::Config(format!("bad URL: {u}")),
        ureq::Error::HostNotFound => ProviderError::Connection("host not found".into()),
        other => ProviderError::Connection(other.to_string()),
    }
}

fn from_io(e: std::io::Error) -> ProviderError {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => ProviderError::Timeout(e.to_string()),
        _ => {
            // ureq wraps its own errors (timeouts among them) in io::Error.
            let text = e.to_string();
            if text.contains("timeout") || text.contains("timed out") {
                ProviderError::Timeout(text)
            } else {
                ProviderError::Connection(text)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn::Message;

    #[test]
    fn wire_format_pairs_calls_with_results_and_skips_empty_replies() {
        let assistant = Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall {
                call_id: "c1".into(),
                name: "bash".into(),
                arguments: json!({"command": "ls"}),
            }],
            usage: None,
            model: None,
            stop_reason: None,
        };
        let result = Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: "c1".into(),
                content: vec![Block::Text {
                    text: "boom".into(),
                }],
                is_error: true,
                code: Some("TOOL_OUTCOME_UNKNOWN".into()),
            }],
            usage: None,
            model: None,
            stop_reason: None,
        };
        let empty = Message {
            role: Role::Assistant,
            content: vec![],
            usage: None,
            model: None,
            stop_reason: Some("interrupted".into()),
        };
        let wire = wire_messages(&[
            Message::text(Role::Developer, "memory"),
            assistant,
            result,
            empty,
        ]);
        assert_eq!(wire.len(), 3);
        assert_eq!(wire[0]["role"], "system");
        assert_eq!(wire[1]["content"], Value::Null);
        assert_eq!(
            wire[1]["tool_calls"][0]["function"]["arguments"],
            "{\"command\":\"ls\"}"
        );
        assert_eq!(
            wire[2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "[error TOOL_OUTCOME_UNKNOWN] boom"})
        );
    }

    #[test]
    fn urls_are_joined_once() {
        assert_eq!(
            OpenAiConfig::new("http://h:1/v1/", "m").url(),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            OpenAiConfig::new("http://h/v1/chat/completions", "m").url(),
            "http://h/v1/chat/completions"
        );
        assert!(OpenAiProvider::new(OpenAiConfig::new("ftp://x", "m")).is_err());
    }

    #[test]
    fn a_plain_json_completion_is_understood() {
        let text = r#"{"model":"m","choices":[{"message":{"content":"hi","tool_calls":[{"id":"x","function":{"name":"ls","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
        let r = parse_completion(text, "p", &mut |_| true).unwrap();
        assert_eq!(r.text, "hi");
        assert_eq!(r.tool_calls[0].name, "ls");
        assert_eq!(r.stop_reason.as_deref(), Some("tool_use"));
        assert!(parse_completion("{}", "p", &mut |_| true).is_err());
    }
}
