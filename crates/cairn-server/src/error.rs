//! The one error type of every handler: an HTTP status, a stable `code`
//! ([`ErrorCode`]), a message for people and a `hint` saying what to do,
//! sent as the JSON body [`ErrorBody`]. The core's typed errors map onto it
//! here and nowhere else. [`ServerError`] is what starting the server can
//! fail with.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn::{AppendError, InputError, LookupError, OpenError, ReadError, StoreError};
use cairn_view::ViewError;
use cairn_view::shapes::Ack;
use serde::Serialize;
use utoipa::ToSchema;

/// The stable, machine-readable code of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// No token, or the wrong one.
    Unauthorized,
    /// No such session or path.
    NotFound,
    /// The session has no such entry.
    UnknownEntry,
    /// The request is malformed.
    BadRequest,
    /// The body is not the JSON the path takes.
    InvalidJson,
    /// A record or message cannot be decoded.
    BadRecord,
    /// A record breaks one of the session's rules.
    InvalidRecord,
    /// Someone else appended since `expected_seq`.
    SeqMismatch,
    /// Another process holds the session's writer lock.
    InUse,
    /// The body is larger than the server accepts.
    TooLarge,
    /// The body is not JSON.
    UnsupportedMediaType,
    /// The path does not take that method.
    MethodNotAllowed,
    /// The session has an open operation.
    OperationOpen,
    /// The session has no open operation.
    NoOpenOperation,
    /// The path names an operation that is not the open one.
    WrongOperation,
    /// The tool call was not dispatched, or has its result.
    NotDispatched,
    /// A cookie-authenticated write from another origin.
    CrossOrigin,
    /// A write or sync failed.
    WriteFailed,
    /// The session is damaged.
    Damaged,
    /// The session is of a newer format.
    NewerFormat,
    /// A failure of the server or its storage.
    Internal,
}

impl ErrorCode {
    /// The code as the body writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::NotFound => "not_found",
            ErrorCode::UnknownEntry => "unknown_entry",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::BadRecord => "bad_record",
            ErrorCode::InvalidRecord => "invalid_record",
            ErrorCode::SeqMismatch => "seq_mismatch",
            ErrorCode::InUse => "in_use",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::OperationOpen => "operation_open",
            ErrorCode::NoOpenOperation => "no_open_operation",
            ErrorCode::WrongOperation => "wrong_operation",
            ErrorCode::NotDispatched => "not_dispatched",
            ErrorCode::CrossOrigin => "cross_origin",
            ErrorCode::WriteFailed => "write_failed",
            ErrorCode::Damaged => "damaged",
            ErrorCode::NewerFormat => "newer_format",
            ErrorCode::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// More about an error, for programs.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
#[non_exhaustive]
pub enum ErrorDetail {
    /// A refused batch: the records appended before it, and which one was
    /// refused.
    Batch(BatchFailure),
}

/// What a refused batch did before the refused record.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchFailure {
    /// The records appended before the refused one (they stay).
    pub appended: Vec<Ack>,
    /// The index of the refused record in the batch.
    pub failed_index: usize,
}

/// Every error's body.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorJson,
}

/// An error as the body writes it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ErrorFields)]
pub struct ErrorJson {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
    /// What to do about it.
    pub hint: String,
    /// The request, as the `x-request-id` header and the server's log name it.
    pub request_id: String,
    /// More, for programs: for a refused batch, the records appended before
    /// it and the index of the refused one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<ErrorDetail>,
}

/// An error answered to a client.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable, machine-readable code.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
    /// What to do about it.
    pub hint: String,
    /// More, for programs (the records a refused batch appended before it).
    pub detail: Option<Box<ErrorDetail>>,
}

impl ApiError {
    /// An error with every part given.
    pub fn new(
        status: StatusCode,
        code: ErrorCode,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            hint: hint.into(),
            detail: None,
        }
    }

    /// The error with `detail` added to its body.
    pub fn with_detail(mut self, detail: ErrorDetail) -> ApiError {
        self.detail = Some(Box::new(detail));
        self
    }

    /// 400: the request is malformed.
    pub fn bad_request(message: impl Into<String>, hint: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            message,
            hint,
        )
    }

    /// 404: no such thing.
    pub fn not_found(message: impl Into<String>, hint: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, message, hint)
    }

    /// 409: the request conflicts with the session's state.
    pub fn conflict(
        code: ErrorCode,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, code, message, hint)
    }

    /// 500: a failure of the server or its storage.
    pub fn internal(message: impl Into<String>, hint: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            message,
            hint,
        )
    }

    /// The JSON body, naming the request.
    pub fn body(&self, request_id: &str) -> ErrorBody {
        ErrorBody {
            error: ErrorJson {
                code: self.code,
                message: self.message.clone(),
                hint: self.hint.clone(),
                request_id: request_id.to_owned(),
                detail: self.detail.as_deref().cloned(),
            },
        }
    }
}

/// The request id is filled in by the request middleware (`app.rs`), which
/// rewrites every error body on the way out; a response built here carries
/// the error in an extension for it.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut res = (status, axum::Json(self.body(""))).into_response();
        res.extensions_mut().insert(self);
        res
    }
}

impl From<OpenError> for ApiError {
    fn from(e: OpenError) -> ApiError {
        let message = cairn::with_causes(&e);
        match e {
            OpenError::NotFound { .. } => ApiError::not_found(
                message,
                "list the sessions with GET /sessions; ids may be given by unique prefix",
            ),
            OpenError::InUse { .. } => ApiError::conflict(
                ErrorCode::InUse,
                message,
                "another process holds the session's writer lock; retry once it is done",
            ),
            OpenError::Damaged(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Damaged,
                message,
                "run `cairn fsck` on the session; `cairn fsck --salvage DIR` writes a repaired copy",
            ),
            OpenError::NewerFormat { .. } => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::NewerFormat,
                message,
                "upgrade cairn to read this session",
            ),
            OpenError::InvalidId(_) => ApiError::bad_request(
                message,
                "a session id is 26 characters of Crockford base 32, or a unique prefix of one",
            ),
            _ => ApiError::internal(message, "check the store's disk and permissions"),
        }
    }
}

impl From<AppendError> for ApiError {
    fn from(e: AppendError) -> ApiError {
        let message = cairn::with_causes(&e);
        match e {
            AppendError::Invalid(_) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidRecord,
                message,
                "the record breaks one of the session's rules (docs/FORMAT.md §5 and §8); nothing was written",
            ),
            AppendError::Poisoned { .. } | AppendError::Io { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::WriteFailed,
                message,
                "a write or sync failed; the server reopens the session on the next request (acknowledged records are safe)",
            ),
            _ => ApiError::internal(message, "check the store's disk and permissions"),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> ApiError {
        ApiError::internal(
            cairn::with_causes(&e),
            "the session could not be read; run `cairn fsck` on it",
        )
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        let message = cairn::with_causes(&e);
        match e {
            StoreError::NoSuchSession { .. } | StoreError::Empty(_) => ApiError::not_found(
                message,
                "list the sessions with GET /sessions; ids may be given by unique prefix",
            ),
            StoreError::Ambiguous { .. } => {
                ApiError::bad_request(message, "give more characters of the session id")
            }
            StoreError::Open(o) => ApiError::from(o),
            StoreError::Append(a) => ApiError::from(a),
            StoreError::Read(r) => ApiError::from(r),
            StoreError::Lookup(l) => ApiError::from(l),
            _ => ApiError::internal(message, "check the store's disk and permissions"),
        }
    }
}

impl From<LookupError> for ApiError {
    fn from(e: LookupError) -> ApiError {
        let message = cairn::with_causes(&e);
        match e {
            LookupError::Ambiguous { .. } => {
                ApiError::bad_request(message, "give more characters of the entry id")
            }
            // The session exists (404 would say it does not): the request
            // names an entry it does not have.
            _ => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::UnknownEntry,
                message,
                "name an entry by its id, a unique prefix of it, or a label (GET /sessions/{id}/tree lists them)",
            ),
        }
    }
}

impl From<ViewError> for ApiError {
    fn from(e: ViewError) -> ApiError {
        match e {
            ViewError::Read(r) => ApiError::from(r),
            other => ApiError::internal(
                cairn::with_causes(&other),
                "the session could not be shown; run `cairn fsck` on it",
            ),
        }
    }
}

impl From<InputError> for ApiError {
    fn from(e: InputError) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRecord,
            cairn::with_causes(&e),
            "a record is {\"kind\": K, \"data\": D} with optional \"id\", \"parent\" and \"ignorable\" (docs/FORMAT.md)",
        )
    }
}

/// What starting the server can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The token given is unusable.
    #[error(
        "the token must be at least 16 printable ASCII characters without spaces or ';'; pass a longer --token (or $CAIRN_TOKEN), or leave it out to have one generated"
    )]
    BadToken,
    /// The token file holds an unusable token.
    #[error(
        "the token file {} is not valid: it must hold at least 16 printable ASCII characters without spaces or ';'; fix it, or remove it to have a new token generated",
        path.display()
    )]
    BadTokenFile {
        /// The file.
        path: PathBuf,
    },
    /// The token file could not be read or written.
    #[error(
        "cannot {action} {}; check the permissions of the store's files directory",
        path.display()
    )]
    TokenFile {
        /// What was being done (`read`, `write`, …).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No randomness for a new token.
    #[error("cannot get random bytes for the token ({0}); pass one with --token")]
    Random(getrandom::Error),
    /// The address could not be bound.
    #[error("cannot listen on {addr}; choose another address with --listen")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Accepting connections failed for good.
    #[error("the server stopped")]
    Serve(#[source] std::io::Error),
}
