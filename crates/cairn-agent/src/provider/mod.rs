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
