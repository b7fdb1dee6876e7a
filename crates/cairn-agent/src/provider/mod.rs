//! Providers: where model replies come from, behind one trait.
//!
//! A [`Provider`] turns a [`ChatRequest`] (the model view and the tools)
//! into a [`Reply`], streaming [`StreamEvent`]s as they arrive. Two
//! implementations: [`openai::OpenAiProvider`] (any OpenAI-compatible Chat
//! Completions server: hosted APIs, vLLM, llama.cpp's server, Ollama) and
//! [`scripted::ScriptedProvider`] (replies replayed from a JSON file, for
//! offline runs, the demo and tests). Errors are values
//! ([`ProviderError`]), never panics; [`retry::RetryPolicy`] says which are
//! worth another attempt and how long to wait.

pub mod openai;
pub mod retry;
pub mod scripted;
pub mod sse;

use std::fmt;
use std::time::Duration;

use cairn::{Block, Message, Role, Usage};
use serde_json::Value;

/// A tool as the model is told about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: Value,
}

/// Why a request is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A step of the agent loop.
    Turn,
    /// A summary for compaction (the last message asks for it).
    Summary,
}

/// One request to a model.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The view: system prompt, memory, context.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Why it is made.
    pub purpose: Purpose,
    /// The preallocated id of the assistant entry this reply will become
    /// (providers may derive tool-call ids from it).
    pub reply_id: Option<String>,
}

/// Something that arrived while a reply streams.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A piece of the reply's text.
    Text(String),
    /// A piece of the model's reasoning.
    Thinking(String),
    /// A tool call began (its arguments follow).
    ToolCall {
        /// The tool's name.
        name: String,
    },
}

/// A tool call in a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyCall {
    /// The call id (the provider's, or generated).
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments: the parsed JSON, or the raw text as a string when it
    /// did not parse (argument validation then rejects the call).
    pub arguments: Value,
}

/// A complete reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    /// Its text.
    pub text: String,
    /// Its reasoning, if the provider sent any.
    pub thinking: String,
    /// The tool calls it makes.
    pub tool_calls: Vec<ReplyCall>,
    /// Tokens used, when reported.
    pub usage: Option<Usage>,
    /// Why the model stopped (`end_turn`, `tool_use`, `max_tokens`, …).
    pub stop_reason: Option<String>,
    /// The model that answered, when reported.
    pub model: Option<String>,
}

impl Reply {
    /// The reply as an assistant message (`model` when the reply names none).
    pub fn into_message(self, model: &str) -> Message {
        let mut content = Vec::new();
        if !self.thinking.is_empty() {
            content.push(Block::Thinking {
                thinking: self.thinking,
                signature: None,
            });
        }
        if !self.text.is_empty() {
            content.push(Block::Text { text: self.text });
        }
        for c in self.tool_calls {
            content.push(Block::ToolCall {
                call_id: c.id,
                name: c.name,
                arguments: c.arguments,
            });
        }
        Message {
            role: Role::Assistant,
            content,
            usage: self.usage,
            model: Some(self.model.unwrap_or_else(|| model.to_owned())),
            stop_reason: self.stop_reason,
        }
    }
}

/// What went wrong with a request. Every variant's message says what
/// happened; [`ProviderError::is_transient`] says whether to try again.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProviderError {
    /// The server answered with an error status.
    Http {
        /// The status code.
        status: u16,
        /// The server's message (or the start of its body).
        message: String,
        /// How long the server asked us to wait (`Retry-After`).
        retry_after: Option<Duration>,
    },
    /// The connection failed or broke (refused, reset, closed early).
    Connection(String),
    /// A timeout expired.
    Timeout(String),
    /// The stream ended before the reply was complete.
    Incomplete(String),
    /// The response did not have the expected shape.
    Malformed(String),
    /// The server reported an error inside the stream.
    Api(String),
    /// The provider is not set up right (no key, bad URL, bad script).
    Config(String),
    /// The caller stopped the stream.
    Cancelled,
}

impl ProviderError {
    /// The same error with every occurrence of `secret` in its text replaced
    /// by [`REDACTED`]: a server may echo a key back in an error message,
    /// which would then reach the journal (`op_finished.error`, a trace).
    #[must_use]
    pub fn redacted(self, secret: Option<&str>) -> ProviderError {
        let Some(secret) = secret.filter(|s| !s.is_empty()) else {
            return self;
        };
        let r = |m: String| m.replace(secret, REDACTED);
        match self {
            ProviderError::Http {
                status,
                message,
                retry_after,
            } => ProviderError::Http {
                status,
                message: r(message),
                retry_after,
            },
            ProviderError::Connection(m) => ProviderError::Connection(r(m)),
            ProviderError::Timeout(m) => ProviderError::Timeout(r(m)),
            ProviderError::Incomplete(m) => ProviderError::Incomplete(r(m)),
            ProviderError::Malformed(m) => ProviderError::Malformed(r(m)),
            ProviderError::Api(m) => ProviderError::Api(r(m)),
            ProviderError::Config(m) => ProviderError::Config(r(m)),
            ProviderError::Cancelled => ProviderError::Cancelled,
        }
    }

    /// Whether another attempt may succeed: rate limits, server errors,
    /// broken connections, timeouts and cut-off streams.
    pub fn is_transient(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => {
                matches!(status, 408 | 409 | 425 | 429 | 500..=599)
            }
            ProviderError::Connection(_)
            | ProviderError::Timeout(_)
            | ProviderError::Incomplete(_) => true,
            ProviderError::Malformed(_)
            | ProviderError::Api(_)
            | ProviderError::Config(_)
            | ProviderError::Cancelled => false,
        }
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderError::Http {
                status, message, ..
            } => {
                write!(f, "the server answered HTTP {status}: {message}")?;
                match status {
                    401 | 403 => write!(f, " (check CAIRN_API_KEY or OPENAI_API_KEY)"),
                    404 => write!(f, " (check --base-url and --model)"),
                    _ => Ok(()),
                }
            }
            ProviderError::Connection(m) => write!(f, "connection problem: {m}"),
            ProviderError::Timeout(m) => write!(f, "timed out: {m}"),
            ProviderError::Incomplete(m) => write!(f, "incomplete response: {m}"),
            ProviderError::Malformed(m) => write!(f, "malformed response: {m}"),
            ProviderError::Api(m) => write!(f, "the provider reported an error: {m}"),
            ProviderError::Config(m) => write!(f, "provider setup: {m}"),
            ProviderError::Cancelled => write!(f, "the request was cancelled"),
        }
    }
}

impl std::error::Error for ProviderError {}

/// One exchange with a model server, as `cairn agent --trace` records it.
/// Credentials are redacted by the provider that fills it (headers that
/// carry them, and the key wherever it appears in a body).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exchange {
    /// `POST`, or `SCRIPT` for the scripted provider.
    pub method: String,
    /// Where it went (a URL, or the script's path).
    pub url: String,
    /// The request's headers, in order (names may repeat).
    pub request_headers: Vec<(String, String)>,
    /// The request's body.
    pub request_body: Vec<u8>,
    /// The response's status, when one came.
    pub status: Option<u16>,
    /// The response's headers, in order.
    pub response_headers: Vec<(String, String)>,
    /// The response's body, as received (an event stream is kept raw).
    pub response_body: Vec<u8>,
    /// Milliseconds from sending to the response's headers.
    pub headers_ms: Option<u64>,
    /// Milliseconds from sending to the end of the response (or the error).
    pub duration_ms: u64,
}

/// The text every redacted credential is replaced with.
pub const REDACTED: &str = "[redacted]";

impl Exchange {
    /// Whether a header of this name carries a credential (its value is
    /// redacted): `Authorization`, `Proxy-Authorization`, cookies, and any
    /// name with `key`, `token`, `secret` or `auth` in it.
    pub fn is_secret_header(name: &str) -> bool {
        let n = name.to_ascii_lowercase();
        ["auth", "cookie", "key", "token", "secret"]
            .iter()
            .any(|w| n.contains(w))
    }

    /// Replaces every occurrence of `secret` in the bodies and header
    /// values with [`REDACTED`], and the values of credential headers.
    pub fn redact(&mut self, secret: Option<&str>) {
        let secret = secret.filter(|s| !s.is_empty());
        for (name, value) in self
            .request_headers
            .iter_mut()
            .chain(self.response_headers.iter_mut())
        {
            if Exchange::is_secret_header(name) {
                *value = match value.split_once(' ') {
                    // Keep the scheme: `Bearer [redacted]`.
                    Some((scheme, _)) if !scheme.is_empty() => format!("{scheme} {REDACTED}"),
                    _ => REDACTED.to_owned(),
                };
            } else if let Some(s) = secret {
                *value = value.replace(s, REDACTED);
            }
        }
        if let Some(s) = secret {
            for body in [&mut self.request_body, &mut self.response_body] {
                *body = replace_bytes(body, s.as_bytes(), REDACTED.as_bytes());
            }
        }
    }
}

fn replace_bytes(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// A source of model replies.
pub trait Provider: Send + Sync {
    /// A short name for the journal (`openai-compatible`, `scripted`).
    fn name(&self) -> &str;
    /// The model asked for.
    fn model(&self) -> &str;
    /// Sends `request` and streams the reply: `on_event` is called as pieces
    /// arrive and returns `false` to stop (the call then returns
    /// [`ProviderError::Cancelled`]).
    ///
    /// # Errors
    ///
    /// Any [`ProviderError`]; never panics on what the server sends.
    fn stream(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> Result<Reply, ProviderError>;

    /// As [`Provider::stream`], and what went over the wire, credentials
    /// redacted ([`Exchange::redact`]), when the provider makes an exchange
    /// (default: none).
    fn stream_traced(
        &self,
        request: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> (Result<Reply, ProviderError>, Option<Exchange>) {
        (self.stream(request, on_event), None)
    }
}

/// The plain text of a tool result's content, with blob references named.
pub fn result_text(content: &[Block]) -> String {
    let mut out = String::new();
    for b in content {
        let piece = match b {
            Block::Text { text } => text.clone(),
            Block::Blob { uri, size, .. } => match size {
                Some(n) => format!("[full output: {uri} ({n} bytes)]"),
                None => format!("[attachment: {uri}]"),
            },
            Block::Image { media_type, .. } => format!("[image: {media_type}]"),
            Block::Thinking { .. } | Block::ToolCall { .. } | Block::ToolResult { .. } => continue,
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_and_the_key_anywhere_are_redacted() {
        let mut ex = Exchange {
            request_headers: vec![
                ("Authorization".into(), "Bearer sk-1".into()),
                ("X-Api-Key".into(), "sk-1".into()),
                ("Accept".into(), "text/event-stream".into()),
            ],
            request_body: b"{\"echo\":\"sk-1\"}".to_vec(),
            response_headers: vec![
                ("Set-Cookie".into(), "session=abc".into()),
                ("X-Note".into(), "key sk-1 seen".into()),
            ],
            response_body: b"data: sk-1sk-1\n".to_vec(),
            ..Exchange::default()
        };
        ex.redact(Some("sk-1"));
        assert_eq!(
            ex.request_headers,
            [
                ("Authorization".to_owned(), "Bearer [redacted]".to_owned()),
                ("X-Api-Key".to_owned(), "[redacted]".to_owned()),
                ("Accept".to_owned(), "text/event-stream".to_owned()),
            ]
        );
        assert_eq!(ex.response_headers[0].1, "[redacted]");
        assert_eq!(ex.response_headers[1].1, "key [redacted] seen");
        assert_eq!(ex.request_body, b"{\"echo\":\"[redacted]\"}");
        assert_eq!(ex.response_body, b"data: [redacted][redacted]\n");
    }

    /// Regression: a server that echoed the key in an error message put it
    /// in the journal (`op_finished.error`), trace or not.
    #[test]
    fn an_error_that_echoes_the_key_is_redacted() {
        let e = ProviderError::Http {
            status: 401,
            message: "bad key sk-1".into(),
            retry_after: None,
        };
        assert!(!e.redacted(Some("sk-1")).to_string().contains("sk-1"));
        let e = ProviderError::Api("sk-1".into()).redacted(Some("sk-1"));
        assert_eq!(e, ProviderError::Api(REDACTED.into()));
        let e = ProviderError::Api("x".into()).redacted(Some(""));
        assert_eq!(
            e,
            ProviderError::Api("x".into()),
            "an empty key redacts nothing"
        );
    }
}
