//! What every handler shares, and nothing that handles a route: the
//! state ([`AppState`]), the extractors that turn every malformed request
//! into an [`ApiError`] instead of axum's plain text, the answer type
//! ([`Reply`]: a serialization failure is a 500, never `null`), and
//! [`blocking`] (the core is synchronous). The route modules and the
//! router (`app.rs`) import it; it imports none of them.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::auth::Auth;
use crate::error::{ApiError, ErrorCode};
use crate::hub::Hub;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The store and the held writers.
    pub hub: Arc<Hub>,
    /// Who may use the server.
    pub auth: Arc<Auth>,
    /// The largest request body accepted, in bytes.
    pub max_body: usize,
    /// How often a live tail looks for records written by other processes.
    pub poll: std::time::Duration,
}

/// Runs blocking work (the core is synchronous) off the async threads; a
/// panic in it becomes a 500.
///
/// # Errors
///
/// What `f` returns, or an internal error when it panicked.
pub async fn blocking<T, F>(f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(ApiError::internal(
            "the server is shutting down",
            "retry once it is back",
        )),
    }
}

/// A JSON request body, refused with a JSON error when too large, of the
/// wrong type or malformed.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UnsupportedMediaType,
                "the body must be JSON",
                "send the header Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::TooLarge,
                    "the request body is larger than the server accepts",
                    "send fewer records per request, or start the server with a larger --max-body",
                )
            } else {
                ApiError::bad_request(format!("cannot read the body: {e}"), "resend the request")
            }
        })?;
        let invalid = |why: String| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidJson,
                format!("the body is not the JSON this path takes: {why}"),
                "GET /openapi.json gives the schema of every request body",
            )
        };
        // Every body is an object: serde would also read a struct from an
        // array of its fields in order (`[null, null]`).
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        if !value.is_object() {
            return Err(invalid("it must be a JSON object".into()));
        }
        serde_json::from_value(value)
            .map(Json)
            .map_err(|e| invalid(e.to_string()))
    }
}

/// Query parameters, refused with a JSON error when malformed.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e| {
                ApiError::bad_request(
                    format!("bad query parameters: {}", e.body_text()),
                    "GET /openapi.json lists the parameters of every path",
                )
            })
    }
}

/// Path parameters, refused with a JSON error when malformed.
#[derive(Debug)]
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| {
                ApiError::bad_request(
                    format!("bad path: {}", e.body_text()),
                    "GET /openapi.json lists every path",
                )
            })
    }
}

/// An answer: a status and a body of type `T`, serialized here. A body
/// that cannot be serialized is a 500 naming the request, never a `null`.
#[derive(Debug)]
pub struct Reply<T>(pub StatusCode, pub T);

impl<T: Serialize> IntoResponse for Reply<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.1) {
            Ok(body) => (
                self.0,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(e) => ApiError::internal(
                format!("cannot serialize the answer: {e}"),
                "this is a bug in cairn; report it with the request id",
            )
            .into_response(),
        }
    }
}

/// An empty 204.
pub fn no_content() -> Response {
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .body(Body::empty())
        .unwrap_or_default()
}
