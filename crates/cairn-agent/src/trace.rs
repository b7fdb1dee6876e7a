//! `cairn agent --trace`: each exchange with the model server (request and
//! response bodies, headers, timings, the attempt and the retry) recorded
//! beside the transcript as a **log-only record** that never enters the
//! context. It uses the format's extension point for such records
//! (`docs/FORMAT.md` §6, `docs/RECORDS.md` §3): kind [`KIND`], written with
//! `"ignorable": true` and no `id`, so every reader keeps it and skips it,
//! and no projection, verdict, status or listing ever reads it.
//!
//! Credentials never reach the session: the provider redacts them
//! ([`crate::provider::Exchange::redact`]: `Authorization` and other
//! credential headers, and the API key wherever it appears in a body). A
//! body over the configured size is cut, and the whole of it (redacted) is
//! kept as a content-addressed blob the record references.

use anyhow::Result;
use cairn::{EntryId, OpRecord, Session, Unknown};
use serde_json::{Value, json};

use crate::provider::{Exchange, ProviderError, Purpose};
use crate::stream::Streamed;
use crate::tools::store_blob;

/// The record kind of a trace record (an ignorable, log-only kind).
pub const KIND: &str = "agent.trace";

/// How much of a body a trace record holds by default (bytes); the whole
/// body is kept as a blob beyond it.
pub const DEFAULT_BODY_LIMIT: usize = 16 << 10;

/// What a trace records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceConfig {
    /// Bytes of a body kept in the record; beyond, the record holds the
    /// head and the whole is a blob.
    pub body_limit: usize,
}

impl Default for TraceConfig {
    fn default() -> TraceConfig {
        TraceConfig {
            body_limit: DEFAULT_BODY_LIMIT,
        }
    }
}

/// Which model request an exchange belongs to.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The operation, if one is open.
    pub op: Option<&'a str>,
    /// A reply or a compaction summary.
    pub purpose: Purpose,
    /// The attempt (`model_attempted.attempt`), for replies.
    pub attempt: Option<u32>,
    /// The reply's preallocated entry, for replies.
    pub entry: Option<&'a EntryId>,
    /// How many retries preceded this request (0 for the first).
    pub retry: u32,
}

/// Appends the trace record of a streamed request, when tracing is on (`config`)
/// and the provider gave an exchange.
///
/// # Errors
///
/// As [`record`].
pub(crate) fn record_streamed(
    session: &Session,
    config: Option<TraceConfig>,
    blob_dir: &std::path::Path,
    request: Request<'_>,
    streamed: &Streamed,
    exchange: Option<&Exchange>,
) -> Result<()> {
    let (Some(config), Some(exchange)) = (config, exchange) else {
        return Ok(());
    };
    let error = match streamed {
        Streamed::Done(Err(e)) => Some(e),
        Streamed::Done(Ok(_)) | Streamed::Interrupted { .. } => None,
    };
    record(session, config, blob_dir, request, exchange, error)
}

/// Appends the trace record of one exchange.
///
/// # Errors
///
/// The append failed (a failed blob write only leaves the body cut).
pub fn record(
    session: &Session,
    config: TraceConfig,
    blob_dir: &std::path::Path,
    request: Request<'_>,
    exchange: &Exchange,
    error: Option<&ProviderError>,
) -> Result<()> {
    let mut data = json!({
        "op": request.op,
        "purpose": match request.purpose {
            Purpose::Turn => "turn",
            Purpose::Summary => "summary",
        },
        "attempt": request.attempt,
        "entry": request.entry,
        "retry": request.retry,
        "duration_ms": exchange.duration_ms,
        "headers_ms": exchange.headers_ms,
        "request": {
            "method": exchange.method,
            "url": exchange.url,
            "headers": pairs(&exchange.request_headers),
            "body": body(config, blob_dir, &exchange.request_body, "application/json"),
        },
        "response": {
            "status": exchange.status,
            "headers": pairs(&exchange.response_headers),
            "body": body(config, blob_dir, &exchange.response_body, "text/plain; charset=utf-8"),
        },
    });
    if let Some(e) = error {
        data["error"] = Value::String(e.to_string());
    }
    session.append_op(OpRecord::Ignored(Unknown {
        kind: KIND.to_owned(),
        data,
    }))?;
    Ok(())
}

/// Headers as `[name, value]` pairs (names may repeat; a JSON object
/// could not hold them twice).
fn pairs(headers: &[(String, String)]) -> Value {
    Value::Array(headers.iter().map(|(n, v)| json!([n, v])).collect())
}

/// A body in a record: `{text, bytes}`, with `truncated` and `blob` when it
/// is longer than the limit.
fn body(config: TraceConfig, blob_dir: &std::path::Path, bytes: &[u8], media_type: &str) -> Value {
    let text = String::from_utf8_lossy(bytes);
    if bytes.len() <= config.body_limit {
        return json!({"text": text, "bytes": bytes.len()});
    }
    let mut end = config.body_limit.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut v = json!({"text": &text[..end], "bytes": bytes.len(), "truncated": true});
    if let Ok(blob) = store_blob(blob_dir, bytes, media_type) {
        v["blob"] = serde_json::to_value(blob).unwrap_or(Value::Null);
    }
    v
}

/// One trace record, read back: what `cairn log --trace` and the exports
/// show. `None` when `data` is not shaped as [`record`] writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Traced {
    /// `turn` or `summary`.
    pub purpose: String,
    /// The attempt, for replies.
    pub attempt: Option<u64>,
    /// Retries before it.
    pub retry: u64,
    /// `POST`, `SCRIPT`.
    pub method: String,
    /// Where it went.
    pub url: String,
    /// The response's status.
    pub status: Option<u64>,
    /// Milliseconds to the end.
    pub duration_ms: Option<u64>,
    /// Milliseconds to the headers.
    pub headers_ms: Option<u64>,
    /// The request's headers.
    pub request_headers: Vec<(String, String)>,
    /// The request's body (as much as the record holds).
    pub request_body: TracedBody,
    /// The response's headers.
    pub response_headers: Vec<(String, String)>,
    /// The response's body.
    pub response_body: TracedBody,
    /// The error, if the request failed.
    pub error: Option<String>,
}

/// A body as a trace record holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TracedBody {
    /// Its text (the head when cut).
    pub text: String,
    /// Its whole size.
    pub bytes: u64,
    /// Where the whole is kept, when cut.
    pub blob: Option<String>,
}

impl Traced {
    /// Reads a trace record's `data`.
    pub fn parse(data: &Value) -> Option<Traced> {
        let req = data.get("request")?;
        let resp = data.get("response")?;
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
        let headers = |v: &Value| -> Vec<(String, String)> {
            v.get("headers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|p| {
                            Some((
                                p.get(0)?.as_str()?.to_owned(),
                                p.get(1)?.as_str()?.to_owned(),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let body = |v: &Value| -> TracedBody {
            let b = v.get("body").unwrap_or(&Value::Null);
            TracedBody {
                text: s(b, "text").unwrap_or_default(),
                bytes: n(b, "bytes").unwrap_or(0),
                blob: b.get("blob").and_then(|x| s(x, "uri")),
            }
        };
        Some(Traced {
            purpose: s(data, "purpose").unwrap_or_default(),
            attempt: n(data, "attempt"),
            retry: n(data, "retry").unwrap_or(0),
            method: s(req, "method").unwrap_or_default(),
            url: s(req, "url").unwrap_or_default(),
            status: n(resp, "status"),
            duration_ms: n(data, "duration_ms"),
            headers_ms: n(data, "headers_ms"),
            request_headers: headers(req),
            request_body: body(req),
            response_headers: headers(resp),
            response_body: body(resp),
            error: s(data, "error"),
        })
    }

    /// One line: `POST https://… → 200 in 812 ms (attempt 1)`.
    pub fn headline(&self) -> String {
        let status = self
            .status
            .map_or_else(|| "no response".to_owned(), |s| s.to_string());
        let took = self
            .duration_ms
            .map(|d| format!(" in {d} ms"))
            .unwrap_or_default();
        let attempt = self
            .attempt
            .map(|a| format!(", attempt {a}"))
            .unwrap_or_default();
        let retry = if self.retry > 0 {
            format!(", retry {}", self.retry)
        } else {
            String::new()
        };
        format!(
            "{} {} → {status}{took} ({}{attempt}{retry})",
            self.method, self.url, self.purpose
        )
    }
}
