//! The one error type of every handler: an HTTP status, a stable `code`, a
//! message for people and a `hint` saying what to do, sent as the JSON body
//! `{"error": {"code", "message", "hint", "request_id"}}`. The core's typed
//! errors map onto it here and nowhere else.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn::{AppendError, InputError, LookupError, OpenError, ReadError, StoreError};
use cairn_view::ViewError;
use serde_json::json;

/// An error answered to a client.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code (`not_found`, `in_use`, …).
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// What to do about it.
    pub hint: String,
    /// More, for programs (the records a refused batch appended before it).
    pub detail: Option<Box<serde_json::Value>>,
}

impl ApiError {
    /// An error with every part given.
    pub fn new(
        status: StatusCode,
        code: &'static str,
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
    pub fn with_detail(mut self, detail: serde_json::Value) -> ApiError {
        self.detail = Some(Box::new(detail));
        self
    }

    /// 400: the request is malformed.
    pub fn bad_request(message: impl Into<String>, hint: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message, hint)
    }

    /// 404: no such thing.
    pub fn not_found(message: impl Into<String>, hint: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message, hint)
    }

    /// 409: the request conflicts with the session's state.
    pub fn conflict(
        code: &'static str,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, code, message, hint)
    }

    /// 500: a failure of the server or its storage.
    pub fn internal(message: impl Into<String>, hint: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message, hint)
    }

    /// The JSON body, naming the request.
    pub fn body(&self, request_id: &str) -> serde_json::Value {
        let mut body = json!({"error": {
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "request_id": request_id,
        }});
        if let (Some(d), Some(e)) = (&self.detail, body.get_mut("error"))
            && let Some(m) = e.as_object_mut()
        {
            m.insert("detail".into(), (**d).clone());
        }
        body
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
                "in_use",
                message,
                "another process holds the session's writer lock; retry once it is done",
            ),
            OpenError::Damaged(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "damaged",
                message,
                "run `cairn fsck` on the session; `cairn fsck --salvage DIR` writes a repaired copy",
            ),
            OpenError::NewerFormat { .. } => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "newer_format",
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
                "invalid_record",
                message,
                "the record breaks one of the session's rules (docs/FORMAT.md §5 and §8); nothing was written",
            ),
            AppendError::Poisoned { .. } | AppendError::Io { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "write_failed",
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
                "unknown_entry",
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
            "bad_record",
            cairn::with_causes(&e),
            "a record is {\"kind\": K, \"data\": D} with optional \"id\", \"parent\" and \"ignorable\" (docs/FORMAT.md)",
        )
    }
}
