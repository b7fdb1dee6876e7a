//! The router and what wraps every request: a request id, the panic guard
//! (a panicking handler becomes a 500 naming the request id, and the server
//! keeps serving), the JSON error body filled with that id, the security
//! headers, the bearer token, and the body-size limit. The extractors here
//! turn every malformed request into an [`ApiError`] instead of axum's plain
//! text.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request};
use axum::http::{HeaderValue, Method, StatusCode, header, request::Parts};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::auth::{self, Auth};
use crate::error::{ApiError, ErrorCode};
use crate::hub::Hub;
use crate::{api, ops, stream, web};

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

/// The whole application: API, streams, OpenAPI document and web view,
/// with `extra` routes (tests add a panicking one) behind the same guards.
pub fn router(state: AppState, extra: Router<AppState>) -> Router {
    let max_body = state.max_body;
    Router::new()
        .merge(api::routes())
        .merge(ops::routes())
        .merge(stream::routes())
        .merge(web::routes())
        .merge(extra)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(state.clone(), auth::guard))
        .layer(middleware::from_fn(guard))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found(
        "no such path",
        "GET /openapi.json describes every path of the API",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::MethodNotAllowed,
        "this path does not take that method",
        "GET /openapi.json lists the methods of every path",
    )
}

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

/// A request id: a per-process random prefix and a counter.
fn request_id() -> String {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let mut b = [0u8; 4];
        // Without randomness ids are still unique within the process.
        let _ = getrandom::fill(&mut b);
        b.iter().map(|x| format!("{x:02x}")).collect()
    });
    format!(
        "req-{prefix}-{}",
        NEXT_REQUEST.fetch_add(1, Ordering::Relaxed)
    )
}

/// The outermost layer: request id, panic guard, error bodies, headers.
async fn guard(req: Request, next: Next) -> Response {
    let id = request_id();
    let mut res = match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(res) => res,
        Err(_) => ApiError::internal(
            "the server failed while handling this request",
            "this is a bug in cairn; report it with the request id (the server logged it) — the server goes on serving",
        )
        .into_response(),
    };
    if let Some(err) = res.extensions_mut().remove::<ApiError>() {
        if err.status.is_server_error() {
            eprintln!("cairn serve: {id}: {} ({})", err.message, err.code);
        }
        let status = err.status;
        let allow = res.headers().get(header::WWW_AUTHENTICATE).cloned();
        res = (status, axum::Json(err.body(&id))).into_response();
        if let Some(v) = allow {
            res.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
    }
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&id) {
        h.insert("x-request-id", v);
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
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

/// Whether a request changes something (and so needs a same-origin check
/// when authenticated by cookie).
pub fn is_write(m: &Method) -> bool {
    !matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// An empty 204.
pub fn no_content() -> Response {
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .body(Body::empty())
        .unwrap_or_default()
}
