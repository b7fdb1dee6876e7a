//! The router and what wraps every request: a request id, the panic guard
//! (a panicking handler becomes a 500 naming the request id, and the server
//! keeps serving), the JSON error body filled with that id, the security
//! headers, the bearer token, and the body-size limit.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt as _;

use crate::error::{ApiError, ErrorCode};
use crate::extract::AppState;
use crate::{api, auth, derived, ops, stream, web};

/// The whole application: API, streams, OpenAPI document and web view,
/// with `extra` routes (tests add a panicking one) behind the same guards.
pub fn router(state: AppState, extra: Router<AppState>) -> Router {
    let max_body = state.max_body;
    Router::new()
        .merge(api::routes())
        .merge(derived::routes())
        .merge(ops::routes())
        .merge(stream::routes())
        .merge(web::routes())
        .merge(extra)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state.auth),
            auth::guard,
        ))
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
