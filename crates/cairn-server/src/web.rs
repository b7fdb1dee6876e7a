//! The web view and what is served beside the API: the page at `/` (the
//! login form until the browser is signed in), the login, the assets
//! (compiled into the binary: no CDN, nothing fetched), and the OpenAPI
//! document. The page's script escapes everything it shows: session
//! content is written by models and tools, and is never trusted as markup.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::auth;
use crate::error::ApiError;
use crate::extract::{AppState, Path, Reply};

const INDEX: &str = include_str!("../assets/index.html");
const LOGIN: &str = include_str!("../assets/login.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");

/// The web view's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/login", axum::routing::post(login))
        .route("/assets/{file}", get(asset))
        .route("/openapi.json", get(openapi))
}

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

async fn index(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if auth::signed_in(&st.auth, &headers) {
        html(StatusCode::OK, INDEX.to_owned())
    } else {
        html(StatusCode::OK, LOGIN.replace("{{error}}", ""))
    }
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(
    State(st): State<AppState>,
    form: Result<axum::Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let given = form.map(|f| f.0.token).unwrap_or_default();
    if !st.auth.accepts(given.trim()) {
        return html(
            StatusCode::UNAUTHORIZED,
            LOGIN.replace(
                "{{error}}",
                "<p class=\"error\" role=\"alert\">That is not the server's token. \
                 `cairn serve` printed where it is kept.</p>",
            ),
        );
    }
    let mut res = StatusCode::SEE_OTHER.into_response();
    let h = res.headers_mut();
    h.insert(header::LOCATION, HeaderValue::from_static("/"));
    if let Ok(v) = HeaderValue::from_str(&auth::set_cookie(st.auth.token())) {
        h.insert(header::SET_COOKIE, v);
    }
    res
}

async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    let (body, kind) = match file.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "app.css" => (APP_CSS, "text/css; charset=utf-8"),
        _ => {
            return Err(ApiError::not_found(
                format!("no asset {file:?}"),
                "the web view is at /",
            ));
        }
    };
    Ok((
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response())
}

async fn openapi() -> Response {
    Reply(StatusCode::OK, crate::openapi::document()).into_response()
}
